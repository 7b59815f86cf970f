/* The blocked engine's pass: a task's key blocks in order, each head's block through the plan's
 * strategies (attn_blocked_plan: block, scores, heads_together). */
#include "engine/blocked/internal.h"
#include "engine/blocked/mask.h"

/* Head hh's key block [j0, j0 + jn), order-th of the task's heads; pass 1: dsoftmax's column sums. */
typedef void blk_block_fn(const blk_task *t, size_t hh, size_t order, int64_t j0, size_t jn, int masked, int pass);
/* The block's scores into st (jn x rows). */
typedef void blk_scores_fn(const blk_task *t, size_t hh, int64_t j0, size_t jn, float *st);

/* The block's values: V in place where the few-rows P V reads them (an unmasked block: *vh), else
 * fp32 rows (*vb, row stride *ldv; half and int8 K/V converted into scratch). */
static void blk_values(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const void **vh,
                       const float **vb, size_t *ldv) {
  const attn_blocked_plan *p = t->p;
  size_t run;
  const void *row = blk_kv_row(t, 1, j0, t->h0 + hh, &run);
  /* a masked block's P V needs fp32 rows, and few_pv one run of rows */
  const int in_place = p->few && !masked && run >= jn;
  *ldv = p->shape->v.row_stride;
  *vh = in_place ? row : NULL;
  *vb = in_place ? NULL : attn_blk_kv(t, 1, j0, jn, t->h0 + hh, ldv);
}

static void blk_scores_gemm(const blk_task *t, size_t hh, int64_t j0, size_t jn, float *st) {
  attn_blk_scores(t, j0, jn, t->h0 + hh, t->rows, blk_qt(t, hh), t->ldq, st, t->rows);
}

/* (key rows are independent: run by run of a page, the same bits) */
static void blk_scores_few(const blk_task *t, size_t hh, int64_t j0, size_t jn, float *st) {
  const attn_blocked_plan *p = t->p;
  for (size_t a = 0, run; a < jn; a += run) {
    const void *k = blk_kv_row(t, 0, j0 + (int64_t)a, t->h0 + hh, &run);
    run = attn_min_sz(run, jn - a);
    attn_blk_few_scores(t, NULL, run, k, blk_head(t, hh) + p->hl.qt, st + a * t->rows);
  }
}

/* psi(K_blk) (keys read in place), then its product with the head's features. */
static void blk_scores_feature(const blk_task *t, size_t hh, int64_t j0, size_t jn, float *st) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  float *kf = t->ws + p->wl.kf;
  p->fm->apply(t->uk, &t->fa, 1, jn, s->d, s->d, blk_row(t, 0, j0, t->h0 + hh), s->k.row_stride, kf, s->d, 1, NULL);
  t->uk->gemm(jn, t->rows, s->d, kf, s->d, 1, blk_head(t, hh) + p->hl.qt, t->rows, st, t->rows, NULL, 0);
}

static blk_scores_fn *const blk_scores_of[] = {
    [BLK_SCORES_GEMM] = blk_scores_gemm, [BLK_SCORES_FEW] = blk_scores_few, [BLK_SCORES_FEATURE] = blk_scores_feature};

/* Scores (a boundary block of a plan with views: in sub-blocks), the selection (the first head of
 * the order is h_sel's key head when the task holds it), the step and P V. */
static void blk_block_scored(const blk_task *t, size_t hh, size_t order, int64_t j0, size_t jn, int masked, int pass) {
  (void)pass;
  const attn_blocked_plan *p = t->p;
  const void *vh;
  const float *vb;
  size_t ldv;
  blk_values(t, hh, j0, jn, masked, &vh, &vb, &ldv);
  if (masked && p->views) {
    attn_blk_boundary(t, hh, j0, jn, vb, ldv);
    return;
  }
  float *st = t->ws + p->wl.st;
  blk_scores_of[p->scores](t, hh, j0, jn, st);
  if (p->sel) {
    const int sel_here = p->sel_kv >= t->h0 && p->sel_kv < t->h0 + t->hn;
    if (!(order == 0 && attn_blk_select(t, j0, jn, sel_here ? st : NULL))) attn_blk_select_apply(t, st, jn);
  }
  blk_accumulate(t, hh, j0, jn, masked, vb, vh, ldv, NULL);
}

/* Exponential maps: the keys' pre-features, then sub-blocks of bounded spread where some row sees
 * only part of the block. */
static void blk_block_xmap(const blk_task *t, size_t hh, size_t order, int64_t j0, size_t jn, int masked, int pass) {
  (void)order;
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t m = p->m;
  float *ku = t->ws + p->wl.ku, *tmp = t->ws + p->wl.tmp;
  const void *vh;
  const float *vb;
  size_t ldv;
  blk_values(t, hh, j0, jn, masked, &vh, &vb, &ldv);
  p->fm->apply(t->uk, &t->fa, 1, jn, s->d, m, blk_row(t, 0, j0, t->h0 + hh), s->k.row_stride, ku, m, 1,
               t->ws + p->wl.fms);
  for (size_t a = 0, b; a < jn; a = b) {
    b = masked ? attn_blk_split(t->uk, m, ku, a, jn, tmp, tmp + m) : jn;
    attn_blk_exp_keys(t, hh, j0 + (int64_t)a, b - a, masked, ku + a * m, vb + a * ldv, pass, masked ? tmp + m : NULL);
  }
}

static blk_block_fn *const blk_block_of[] = {[BLK_BLOCK_SCORED] = blk_block_scored, [BLK_BLOCK_XMAP] = blk_block_xmap};

/* One pass over the key blocks some row of the task sees: every block's heads in order, h_sel's
 * key head first when the task holds it (selection). */
static void blk_pass(const blk_task *t, int64_t lo, int64_t hi, int pass) {
  const attn_blocked_plan *p = t->p;
  blk_block_fn *const block = blk_block_of[p->block];
  const int together = p->heads_together; /* one head too: its bits do not depend on its group */
  const int sel_here = p->sel && p->sel_kv >= t->h0 && p->sel_kv < t->h0 + t->hn;
  const size_t hs = sel_here ? p->sel_kv - t->h0 : 0;
  for (int64_t j0 = lo; j0 <= hi; j0 += (int64_t)p->bc) {
    const size_t jn = (size_t)(hi + 1 - j0 < (int64_t)p->bc ? hi + 1 - j0 : (int64_t)p->bc);
    const int masked = blk_masked(p, t->p0, t->p1, j0, j0 + (int64_t)jn - 1);
    if (together) {
      if (p->fused && !masked)
        attn_blk_fused(t, j0, jn);
      else
        attn_blk_block_heads(t, j0, jn, masked);
      continue;
    }
    for (size_t order = 0; order < t->hn; order++) {
      const size_t hh = !sel_here ? order : order == 0 ? hs : order <= hs ? order - 1 : order;
      block(t, hh, order, j0, jn, masked, pass);
    }
  }
}

/* Keys [lo, hi] into every head's state (dsoftmax: its column sums first). */
void attn_blk_keys(const blk_task *t, int64_t lo, int64_t hi) {
  if (t->p->dsm) {
    blk_pass(t, lo, hi, 1);
    for (size_t hh = 0; hh < t->hn; hh++) attn_blk_dsoftmax_queries(t, blk_head(t, hh));
  }
  blk_pass(t, lo, hi, 0);
}
