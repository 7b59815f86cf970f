/* The chunkwise engine (engine/chunkwise.h), written once for every ISA path, feature map and
 * gate. Every product is one call of the path's GEMM micro-kernel. This header is its private
 * interface (engine/chunkwise.h is the ops'): the context of a task, the tiny helpers every file
 * inlines, and the functions one file calls in another. */
#ifndef ATTN_ENGINE_CHUNKWISE_INTERNAL_H
#define ATTN_ENGINE_CHUNKWISE_INTERNAL_H

#include "engine/chunkwise.h"

/* The files, each calling only those listed before it (plan.c calls none of them):
 *   plan.c       the plan: state heads, the scratch layout, the scan's schedule
 *   gates.c      decay and gates: a chunk's cumulative log gates and the scales made from them
 *   offsets.c    the exponential maps' per-feature offsets: guard, raise, the scan's merge
 *   rows.c       the inputs' rows: prefetch, the scan by head groups' gather
 *   chunk.c      the per-chunk steps: load, absorb, outputs
 *   exclusive.c  FLASH's chunk-exclusive rounds
 *   step.c       the one-token step (the decode step) and what precedes the aligned chunks
 *   transition.c the transitions (a chunk's phases, chosen at plan time) and the per-chunk routine
 *   scan.c       each head's lead and the scan by head groups
 *   waves.c      the scan's waves
 *   run.c        the serial loop of one state head, and the schedule the plan chose
 * The delta rule's files (delta.h) come after transition.c: their transition runs on its routine. */

/* Tokens from which the recurrence copies the state to rows of whole lines and back (two passes
 * over it, against a fraction of a pass saved per token). */
#define CW_REC_COPY_MIN 4

/* Rows per rows_axpby call where each row's factors are computed first (on the stack). */
#define CW_ROW_BATCH 64

typedef struct cw_ctx {
  const attn_chunkwise_plan *p;
  const struct attn_ukernels *uk;
  const attn_chunkwise_io *io;
  attn_fm_args fa; /* the map's arguments: the plan's scale, the call's W^T */
  float *kf, *va, *qt, *at, *oc, *fs;
  float *qc, *oh;            /* half queries, half outputs: their fp32 rows (wl.qc, wl.oh) */
  float *ku, *qu;            /* exponential maps: pre-exponential key and query features (C x m) */
  float *cp, *cn, *rn;       /* exponential maps: offsets before and after the chunk, running row (m) */
  double *b;                 /* gates: the chunk's cumulative log gates (C, or C x m per-feature) */
  float *wt, *din;           /* gates: intra weights (C x C; factored: cw_factored), state-product row scales (C) */
  float *dout, *dc;          /* gates: absorb key-row scales (C), state row scales (m) */
  float *ks;                 /* per-feature gates: block factors */
  float *gx;                 /* the recurrence with a gate: its rows' decay factors (C x m) */
  size_t ls;                 /* the row stride of the state the step kernel updates (lds; the
                                recurrence's working copy: ldr) */
  size_t hk, hv, hg;         /* key, value and gate heads of the task's state head */
  const float *gq, *gk, *gv; /* gathered rows of the head (attn_cw_gather; NULL: the inputs in place): */
  size_t g0q, g0k;           /* query row t at gq + (t - g0q) d, key row j at gk + (j - g0k) d */
  float *at0;                /* share_at: the chunk's intra scores before their weights (C x C) */
  int at_keep;               /* share_at: CW_AT_KEEP the scores into at0, CW_AT_REUSE copy them from it */
} cw_ctx;

/* cw_ctx.at_keep: the intra scores computed (0), computed and kept, or the kept ones copied. */
enum { CW_AT_KEEP = 1, CW_AT_REUSE = 2 };
/* Whether state heads a and b read the same query and key rows (share_at). */
static inline int cw_same_qk(const struct attn_chunkwise_plan *p, size_t a, size_t b) {
  return a / p->qdiv == b / p->qdiv && a / p->kdiv == b / p->kdiv;
}

typedef struct cw_par {
  const attn_chunkwise_plan *p;
  const struct attn_ukernels *uk;
  const attn_chunkwise_io *io;
  float *ws;
  size_t c0, wn; /* the scan's waves: the wave's first group and its groups */
} cw_par;

/* What a chunk's gates are computed for (attn_cw_gates): its absorb, its outputs, or both; with
 * CW_B_KEPT, a per-feature gate's b is already in x->b (the waves' slot keeps it from the absorb). */
enum { CW_FOR_ABSORB = 1, CW_FOR_QUERY = 2, CW_FOR_BOTH = 3, CW_B_KEPT = 4 };

/* Row j of the task's key and value heads, row t of query head hq: in place, or gathered. */
static inline const float *cw_k_row(const cw_ctx *x, size_t j) {
  const attn_shape *s = x->p->shape;
  return x->gk ? x->gk + (j - x->g0k) * s->d : x->io->k + j * s->k.row_stride + x->hk * s->k.head_stride;
}
static inline const float *cw_v_row(const cw_ctx *x, size_t j) {
  const attn_shape *s = x->p->shape;
  return x->gv ? x->gv + (j - x->g0k) * s->dv : x->io->v + j * s->v.row_stride + x->hv * s->v.head_stride;
}
/* Rows t .. t + n of query head hq as fp32 (*ld their row stride): gathered, in place, or (half
 * queries) converted into x->qc (n <= the chunk). */
static inline const float *cw_q_rows(const cw_ctx *x, size_t hq, size_t t, size_t n, size_t *ld) {
  const attn_shape *s = x->p->shape;
  if (x->gq) return *ld = s->d, x->gq + (t - x->g0q) * s->d;
  const void *q = attn_act_at(x->io->q, attn_act_size(s->q_type), s->q, t, hq);
  if (s->q_type == ATTN_F32) return *ld = s->q.row_stride, q;
  attn_act_in(x->uk, s->q_type, n, s->d, q, s->q.row_stride, x->qc);
  return *ld = s->d, x->qc;
}

static inline int cw_gated(const attn_chunkwise_plan *p) { return p->g.kind != ATTN_GATE_NONE || p->g.beta; }

/* Where output rows t0 .. of head h are made: o's rows themselves when nothing scales them
 * (direct: attn_cw_store would multiply each by exactly 1), else x->oc; *ld their stride (ld
 * NULL: one row). */
static inline float *cw_out_rows(const cw_ctx *x, int direct, size_t h, size_t t0, size_t *ld) {
  const attn_shape *s = x->p->shape;
  if (ld) *ld = direct ? s->o.row_stride : x->p->ldw;
  return direct ? (float *)x->io->o + t0 * s->o.row_stride + h * s->o.head_stride : x->oc;
}

/* Whether a chunk's intra weights (scalar gate or beta alone) come factored (attn_cw_gates' b of its
 * cn keys): beta_j exp(b_i - b_j) = dout_j exp(b_i - b_last), the keys' factor dout_j (<= beta_j,
 * the absorb's) on the rows of the block's scores and the queries' g_i = exp(b_i - b_last) (>= 1)
 * on its columns, two passes of vector kernels instead of C x C exps (the output rows then need
 * no pass of their own: un-normalised fp32 rows go to o directly). Only while the chunk's decay stays
 * within ATTN_GATE_SPAN (as the per-feature gates' factors), so that no factor overflows or
 * becomes subnormal; beyond it, the weights one by one (wt). The same choice whatever the
 * threads: it depends on the chunk alone. */
static inline int cw_factored(const cw_ctx *x, size_t cn) {
  return x->p->g.kind != ATTN_GATE_FEATURE && x->b[cn - 1] >= -ATTN_GATE_SPAN;
}

/* Causal bottom-right alignment: keys before the first query's position, queries before the
 * first key; the rest (aligned) pairs query pre_q + t with key pre_k + t. */
static inline size_t cw_pre_k(const attn_chunkwise_plan *p) {
  const attn_shape *s = p->shape;
  return p->causal && s->n_kv > s->n_q ? s->n_kv - s->n_q : 0;
}
static inline size_t cw_pre_q(const attn_chunkwise_plan *p) {
  const attn_shape *s = p->shape;
  return p->causal && s->n_q > s->n_kv ? s->n_q - s->n_kv : 0;
}

/* The float regions of a worker's scratch a context points at: X(its field, the layout's). */
/* clang-format off */
#define CW_REGIONS(X)                                                                                   \
  X(kf, kf) X(va, va) X(qt, qt) X(at, at) X(oc, oc) X(fs, fm) X(qc, qc) X(oh, oh) X(ku, ku) X(qu, qu) \
  X(cp, cp) X(cn, cn) X(rn, run) X(wt, wt) X(din, din) X(dout, dout) X(dc, dc) X(ks, ks) X(gx, gx) \
  X(at0, at0)
/* clang-format on */

/* The context of state head `task` on a worker's scratch ws. */
static inline cw_ctx cw_ctx_of(const attn_chunkwise_plan *p, const struct attn_ukernels *uk,
                               const attn_chunkwise_io *io, size_t task, float *ws) {
#define CW_AT_(field, region) .field = ws + p->wl.region,
  return (cw_ctx){.p = p,
                  .uk = uk,
                  .io = io,
                  .fa = {.xs = p->fm_xs, .wt = io->fm_wt},
                  .b = (double *)(void *)(ws + p->wl.b),
                  .hk = task / p->kdiv,
                  .hv = task / p->vdiv,
                  .hg = task / p->gdiv,
                  .gq = NULL,
                  .gk = NULL,
                  .gv = NULL,
                  .g0q = 0,
                  .g0k = 0,
                  .ls = p->lds,
                  .at_keep = 0,
                  CW_REGIONS(CW_AT_)};
#undef CW_AT_
}

static inline float *cw_scan_state(const cw_par *c, size_t h) {
  const size_t slab = c->p->m * c->p->lds;
  return c->io->state ? c->io->state + h * slab : c->ws + c->p->scan_region + h * slab;
}

/* gates.c: decay and gates */
ATTN_INTERNAL void attn_cw_gates(const cw_ctx *x, size_t j0, size_t cn, int uses);

/* offsets.c: the exponential maps' offsets */
ATTN_INTERNAL void attn_cw_offsets_of(const attn_chunkwise_plan *p, const float *S, float *c);
ATTN_INTERNAL size_t attn_cw_guard(const cw_ctx *x, const float *S, size_t cn, const float *kmax);
ATTN_INTERNAL void attn_cw_raise(const cw_ctx *x, float *S);
ATTN_INTERNAL void attn_cw_key_offsets(const cw_ctx *x, float *S, size_t cn);
ATTN_INTERNAL void attn_cw_scan_merge(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *D,
                                      size_t f0, size_t f1, int keep);
ATTN_INTERNAL void attn_cw_scan_local(const cw_ctx *x, const float *KU, float *D, size_t cn, float *c);

/* rows.c: the inputs' rows */
ATTN_INTERNAL void attn_cw_prefetch_rows(const cw_ctx *x, size_t h0, size_t tq, size_t tk, size_t cn);
ATTN_INTERNAL void attn_cw_prefetch_chunk(const cw_ctx *x, size_t h, size_t k, int queries, int keys);
ATTN_INTERNAL void attn_cw_gather(const cw_ctx *x0, float *g, size_t a, size_t b, size_t t0, size_t cn);
ATTN_INTERNAL void attn_cw_gathered(cw_ctx *x, const float *g, size_t a, size_t h, size_t t0);

/* chunk.c: the per-chunk steps */
ATTN_INTERNAL void attn_cw_absorb_to(const cw_ctx *x, float *kf, float *S, size_t cn, int accumulate);
ATTN_INTERNAL int attn_cw_load_kv(const cw_ctx *x, size_t j0, size_t cn);
ATTN_INTERNAL void attn_cw_load_k(const cw_ctx *x, size_t j0, size_t cn);
ATTN_INTERNAL int attn_cw_load_v(const cw_ctx *x, size_t j0, size_t cn);
ATTN_INTERNAL void attn_cw_store(const cw_ctx *x, size_t h, size_t t0, size_t cn);
ATTN_INTERNAL void attn_cw_load_q(const cw_ctx *x, const float *S, size_t h, size_t t0, size_t cn, size_t rs, size_t cs,
                                  int intra);
ATTN_INTERNAL void attn_cw_query(const cw_ctx *x, const float *S, size_t h, size_t t0, size_t cn, int intra,
                                 int va_finite);
static inline void cw_absorb(const cw_ctx *x, float *S, size_t cn) { attn_cw_absorb_to(x, x->kf, S, cn, 1); }

/* exclusive.c: FLASH's exclusive rounds */
ATTN_INTERNAL int attn_cw_xround(const attn_chunkwise_plan *p, size_t k, size_t *qa, size_t *qb);
ATTN_INTERNAL void attn_cw_xquery(const cw_ctx *x, const float *S, size_t h, size_t qa, size_t qb);
ATTN_INTERNAL void attn_cw_xabsorb(const cw_ctx *x, float *T, size_t k, int accumulate);

/* step.c: the one-token step, the lead */
ATTN_INTERNAL void attn_cw_step_loaded(const cw_ctx *x, float *S, size_t h0, size_t i, size_t j);
ATTN_INTERNAL const float *attn_cw_step_factors(const cw_ctx *x, size_t j0, size_t cn, float *kf, float *g, int one);
ATTN_INTERNAL void attn_cw_step_rows(const cw_ctx *x, float *S, size_t h0, size_t i, float *kf, const float *va,
                                     const float *g);
ATTN_INTERNAL void attn_cw_lead(const cw_ctx *x, float *S, size_t h0);
ATTN_INTERNAL void attn_cw_decode(const cw_ctx *x, float *S, size_t h);
/* Gate heads whose factors a decode step makes before its tasks (a stack buffer of run_all). */
enum { CW_DEC_G_MAX = 256 };
ATTN_INTERNAL const attn_chunkwise_io *attn_cw_decode_facts(const attn_chunkwise_plan *p,
                                                            const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                                                            attn_chunkwise_io *dio, float *g);

/* transition.c: a chunk's phases. Its working set lives in a worker's scratch (the serial loop; the
 * scan by head groups: attn_cw_chunk_in_scratch) or in a wave's slot. */
typedef struct cw_chunk {
  size_t k, t0, cn; /* chunk k (FLASH: round k), its aligned tokens [t0, t0 + cn) */
  float *D;         /* the scan: its local state (m x lds; column dv + 1: dC, or its offsets) */
  float *kf, *va;   /* its key features (maps with offsets: pre-exponential) and Va */
  float *kl, *dl;   /* maps with offsets, the scan: its Kf at its own offsets, and those */
  double *b;        /* per-feature gates: its b, kept from its local phase to its outputs (NULL: x's) */
  int finite;       /* whether every Va row is finite */
} cw_chunk;

/* A transition: how a chunk moves the state (S_after = T_chunk(S_before)) and makes its outputs
 * from the state before it, as phases that a schedule runs in its order. x is the task's context
 * (cw_ctx; the delta rule's dl_ctx), h its state head. Chosen once per call, with the schedule:
 *   load     rows for CW_FOR_ABSORB, gates for the uses; the serial loop's may cut c->cn (S: the
 *            state before the chunk, NULL in the scan); 0: the chunk runs token by token (step)
 *   local    what the chunk computes alone (the scan: its local state D; the delta rule: its solve)
 *   outputs  from S, the state before the chunk (copy: m x lds floats of scratch, or NULL)
 *   combine  the scan: S past the chunk from D (keep: D gets S as it was)
 *   absorb   the serial schedules: S past the chunk in place, after its outputs
 *   step     token u of the chunk by the recurrence (its output and S past it)
 * A transition has combine or absorb, and local where its chunk computes alone. */
typedef struct cw_transition {
  int (*load)(const void *x, const float *S, cw_chunk *c, int uses);
  void (*local)(const void *x, const cw_chunk *c);
  void (*outputs)(const void *x, float *S, const cw_chunk *c, size_t h, float *copy);
  void (*combine)(const void *x, float *S, const cw_chunk *c, int keep);
  void (*absorb)(const void *x, float *S, const cw_chunk *c);
  void (*step)(const void *x, float *S, const cw_chunk *c, size_t h, size_t u);
} cw_transition;

/* The plan's transition: of its map (with or without offsets) or FLASH's rounds, for its schedule
 * (the scan, or the serial loop). */
ATTN_INTERNAL const cw_transition *attn_cw_transition(const attn_chunkwise_plan *p);
ATTN_INTERNAL cw_chunk attn_cw_chunk_in_scratch(const cw_ctx *x, float *ws, size_t k);
/* The per-chunk routine: chunk c on one worker, S the state before it, then past it: its rows and
 * gates, then token by token (step) where the load says so; otherwise what the chunk computes
 * alone, its outputs from S, and S past it (combine from the local state, or absorbed in place).
 * Returns the tokens it ran (c->cn, which the serial loop's load may have cut). The waves run the
 * same phases with a group's local states first and its outputs last. */
static inline size_t attn_cw_chunk(const cw_transition *tr, const void *x, float *S, cw_chunk *c, size_t h,
                                   float *copy) {
  if (!tr->load(x, S, c, CW_FOR_BOTH)) {
    for (size_t u = 0; u < c->cn; u++) tr->step(x, S, c, h, u);
    return c->cn;
  }
  if (tr->local) tr->local(x, c);
  tr->outputs(x, S, c, h, copy);
  if (tr->absorb)
    tr->absorb(x, S, c);
  else
    tr->combine(x, S, c, 0);
  return c->cn;
}

/* scan.c: the scan */
ATTN_INTERNAL void attn_cw_scan_lead(void *ctx, size_t h, size_t worker);
ATTN_INTERNAL void attn_cw_scan_heads(void *ctx, size_t task, size_t worker);

/* waves.c: the waves (c's c0 and wn move through them) */
ATTN_INTERNAL void attn_cw_waves(cw_par *c);

#endif
