/* The blocked score engine's insides (engine/blocked.h is its interface to the ops), written once
 * for every ISA path and every score step: its tunings, the task a worker runs (blk_task), the
 * functions its files share (attn_blk_*, hidden as every symbol of the library) and the block
 * loop's step (blk_accumulate, inline in its callers as it was in one file). Positions are
 * absolute (bottom-right: token t of the call sits at n_kv - n_q + t). The files, each using only
 * those listed before it (and mask.h): plan.c, kv.c, block.c, xfeat.c, select.c, pass.c, stats.c,
 * task.c, schedule.c, batch.c, call.c. */
#ifndef ATTN_ENGINE_BLOCKED_INTERNAL_H
#define ATTN_ENGINE_BLOCKED_INTERNAL_H

#include "engine/blocked.h"

/* ---- tunings ---- */
enum {
  BLK_HEAD_GROUP_FLOATS = 65536, /* 256 KiB of per-head state for heads advancing together */
  /* 256 KiB for the heads of a few-rows call shorter than a query block: each its region for the
   * call's rows, its scores and its key ranges' folded state (blk_short_group) */
  BLK_SHORT_GROUP_FLOATS = 65536,
  BLK_SPLIT_MAX = 16, /* key ranges of a split call (or selection task), at most */
  /* Selection: each query block's keys in ranges of at least this many keys (whole key blocks),
   * so that a selective call's one sequential chain (its query blocks) still gives threads work;
   * a range's fold costs ~dv + 5 flops per row against ~2 (d + dv) per key and row. */
  BLK_SEL_RANGE_KEYS = 256
};
/* Boundary blocks of a plan without selection, feature map or few-rows scores: keys taken this
 * many at a time, each sub-block with only the tokens that see some of its keys (attn_blk_boundary). */
enum { BLK_BOUNDARY_KEYS = 32 };
/* Half K: keys converted at a time for the scores (a multiple of every GEMM tile's rows: 4, 6, 8),
 * so that the converted rows stay in L1 (12 KiB at d = 128) between the conversion and the GEMM. */
enum { BLK_HALF_K_KEYS = 24 };
/* Packed K/V (engine/blocked.h): the keys of a head a worker holds packed (2 MiB of fp32 K and V
 * at d = dv = 64), and the query blocks a call needs for packing to pay (each packed key is read
 * by up to that many of them). */
enum { BLK_PACK_KEYS = 4096, BLK_PACK_MIN_QBLOCKS = 8 };
/* Rows per task up to which scores and P V read K and V in place, half ones converted in registers
 * (decode steps: the GQA group of a token; speculative blocks of up to 8 tokens of a group of 4);
 * more rows reuse a block enough to pay for a GEMM tile and, half, a conversion into scratch.
 * Measured (AVX-512, d = 128, 16k keys, 32 / 8 heads: 16 rows): 8 rows here made a 4-token block
 * cost 2.77 decode steps, 32 make it 1.72 (MHA 16 tokens: 3.08 -> 1.61). */
enum { BLK_FEW_ROWS = 32 };

/* ---- tasks ---- */
/* One task's fixed quantities. */
typedef struct blk_task {
  const attn_blocked_plan *p;
  const struct attn_ukernels *uk;
  const attn_blocked_io *io;
  attn_fm_args fa; /* the map's arguments: the plan's scale, the call's W^T */
  float *ws;
  size_t h0, hn, tn, rows, t0; /* key heads h0 .. h0 + hn - 1; tokens t0 .. t0 + tn - 1 of the call */
  int64_t p0, p1;
  int last_group; /* the last head group of its query block (selection: it stores F) */
  /* A view (attn_blk_boundary) of tokens t0 .. t0 + tn - 1 within its task: its first row among the
   * head regions' rows (Q^T columns, row state, accumulator rows), and the task's rows (Q^T's
   * row stride). A whole task: 0 and rows. */
  size_t c0, ldq;
} blk_task;

static inline float *blk_head(const blk_task *t, size_t hh) { return t->ws + t->p->wl.heads + hh * t->p->head_floats; }

/* Row j0 of key (value 0) or value (value 1) head h, in place (elements of shape.kv_type), and in
 * *run how many rows from it lie evenly spaced (l.row_stride apart): to the end of its page
 * (io->pages), all of them without pages. */
static inline const void *blk_kv_row(const blk_task *t, int value, int64_t j0, size_t h, size_t *run) {
  const attn_blocked_plan *p = t->p;
  const attn_blocked_io *io = t->io;
  const attn_layout l = value ? p->shape->v : p->shape->k;
  size_t base = 0, j = (size_t)j0;
  *run = SIZE_MAX;
  if (io->pages.table) {
    const size_t P = io->pages.size;
    base = (size_t)io->pages.table[j / P] * (value ? io->pages.v : io->pages.k);
    *run = P - j % P, j %= P;
  }
  return (const char *)(value ? io->v : io->k) + (base + j * l.row_stride + h * l.head_stride) * p->kv.size;
}
/* The same without the run: rows a caller reads only within one page (or without pages). */
static inline const void *blk_row(const blk_task *t, int value, int64_t j0, size_t h) {
  size_t run;
  return blk_kv_row(t, value, j0, h, &run);
}
/* ATTN_I8: the scale of row j0 of key (value 0) or value head h (paged as its rows). */
static inline const float *blk_scale(const blk_task *t, int value, int64_t j0, size_t h) {
  const attn_blocked_io *io = t->io;
  const attn_layout l = io->scales;
  size_t base = 0, j = (size_t)j0;
  if (io->pages.table) {
    const size_t P = io->pages.size;
    base = (size_t)io->pages.table[j / P] * io->pages.scales, j %= P;
  }
  return (value ? io->v_scales : io->k_scales) + base + j * l.row_stride + h * l.head_stride;
}

/* Head hh's scaled Q^T from the task's (or view's) first row: d x rows, row stride t->ldq. */
static inline const float *blk_qt(const blk_task *t, size_t hh) { return blk_head(t, hh) + t->p->hl.qt + t->c0; }
/* Whether a few-rows task's queries lie transposed (hl.qt: d x rows, a GQA group's speculative
 * block) for few_scores_wide, or row by row (rows x d) for few_scores: by its rows alone. */
static inline int blk_few_wide(const blk_task *t) { return t->rows >= t->uk->few_wide_rows; }
/* Where the few-rows kernels prefetch (the table's tuning for this CPU). */
static inline attn_few_pf blk_few_pf(const blk_task *t) { return (attn_few_pf)t->uk->few_pf; }

/* ---- functions shared between the files, by file (each documented at its definition) ---- */
/* ---- kv.c: K/V access ---- */
ATTN_INTERNAL void attn_blk_pack(const blk_task *t);
ATTN_INTERNAL const float *attn_blk_kv(const blk_task *t, int value, int64_t j0, size_t jn, size_t h, size_t *ld);
ATTN_INTERNAL void attn_blk_scores(const blk_task *t, int64_t j0, size_t jn, size_t h, size_t n, const float *b,
                                   size_t ldb, float *st, size_t ldst);
/* ---- block.c: the block step ---- */
ATTN_INTERNAL const float *attn_blk_step(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, float *st,
                                         const float *bm);
ATTN_INTERNAL void attn_blk_pv(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *st,
                               const float *alpha, const float *vb, const void *vh, size_t ldv);
ATTN_INTERNAL void attn_blk_few_scores(const blk_task *t, const attn_few_heads *hd, size_t nk, const void *k,
                                       const float *qt, float *st);
ATTN_INTERNAL void attn_blk_block_heads(const blk_task *t, int64_t j0, size_t jn, int masked);
ATTN_INTERNAL void attn_blk_fused(const blk_task *t, int64_t j0, size_t jn);
ATTN_INTERNAL void attn_blk_boundary(const blk_task *t, size_t hh, int64_t j0, size_t jn, const float *vb, size_t ldv);
/* ---- xfeat.c: exponential feature maps ---- */
ATTN_INTERNAL size_t attn_blk_split(const struct attn_ukernels *uk, size_t m, const float *u, size_t a, size_t jn,
                                    float *mn, float *mx);
ATTN_INTERNAL void attn_blk_exp_keys(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *ku,
                                     const float *vb, int pass, const float *kmax);
ATTN_INTERNAL void attn_blk_dsoftmax_queries(const blk_task *t, float *reg);
/* ---- select.c: selection ---- */
ATTN_INTERNAL int attn_blk_select(const blk_task *t, int64_t j0, size_t jn, float *st);
ATTN_INTERNAL void attn_blk_select_apply(const blk_task *t, float *st, size_t jn);
/* ---- pass.c: a task's key blocks ---- */
ATTN_INTERNAL void attn_blk_keys(const blk_task *t, int64_t lo, int64_t hi);
/* ---- stats.c: per-row statistics ---- */
ATTN_INTERNAL void attn_blk_stats(const attn_blocked_plan *p, const float *rs, size_t R, size_t r, int64_t pos,
                                  const attn_row_stats *st, size_t t, size_t h);
/* ---- schedule.c: tasks whole, serial or by ranges (batch.c runs them too) ---- */
ATTN_INTERNAL void attn_blk_run_task(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                     const attn_blocked_io *io, size_t task, float *ws);
ATTN_INTERNAL void attn_blk_run_serial(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                       const attn_blocked_io *io, size_t task, float *ws);
ATTN_INTERNAL void attn_blk_run_select_serial(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                              const attn_blocked_io *io, float *ws);
ATTN_INTERNAL void attn_blk_store_range(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                        const attn_blocked_io *io, size_t task, size_t r, float *ws, float *slots);
ATTN_INTERNAL void attn_blk_fold_slots(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                       const attn_blocked_io *io, size_t task, size_t S, const float *slots, float *ws);
ATTN_INTERNAL size_t attn_blk_par_order(const attn_blocked_plan *p, size_t i);
/* ---- task.c: a task's state ---- */
ATTN_INTERNAL blk_task attn_blk_task_of(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                        const attn_blocked_io *io, size_t task, float *ws);
ATTN_INTERNAL void attn_blk_task_keys(const blk_task *t, int64_t *lo, int64_t *hi);
ATTN_INTERNAL void attn_blk_begin(const blk_task *t, int first, int queries);
ATTN_INTERNAL void attn_blk_store(const blk_task *t, float *region);
ATTN_INTERNAL void attn_blk_end(const blk_task *t, float *fold);
ATTN_INTERNAL void attn_blk_fold(const blk_task *t, float *fold, const float *src);

/* ---- the block loop's one step, inline in each of its callers (block.c, xfeat.c, pass.c) ---- */
/* Scores of keys [j0, j0 + jn) (ST, jn x rows, in the worker's wl.st), their mask, the step and
 * acc += P V (attn_blk_pv's V). */
static inline void blk_accumulate(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *vb,
                                  const void *vh, size_t ldv, const float *bm) {
  float *st = t->ws + t->p->wl.st;
  const float *alpha = attn_blk_step(t, hh, j0, jn, masked, st, bm);
  attn_blk_pv(t, hh, j0, jn, masked, st, alpha, vb, vh, ldv);
}

#endif
