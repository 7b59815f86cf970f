/* The blocked engine's pass: a task's key blocks in order, each through its scores, the extras
 * (exponential-map offsets, selection) and the block step. */
#include "engine/blocked/internal.h"
#include "engine/blocked/mask.h"

/* One pass over the key blocks some row of the task sees (pass 1: dsoftmax's column sums). */
static void blk_pass(const blk_task *t, int64_t lo, int64_t hi, int pass) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t D = s->d, m = p->m, rows = t->rows;
  float *ku = t->ws + p->off_ku, *kf = t->ws + p->off_kf, *tmp = t->ws + p->off_tmp;
  for (int64_t j0 = lo; j0 <= hi; j0 += (int64_t)p->bc) {
    const size_t jn = (size_t)(hi + 1 - j0 < (int64_t)p->bc ? hi + 1 - j0 : (int64_t)p->bc);
    const int masked = blk_masked(p, t->p0, t->p1, j0, j0 + (int64_t)jn - 1);
    if (p->few && !p->sel && t->hn > 1) {
      attn_blk_block_heads(t, j0, jn, masked);
      continue;
    }
    /* heads in order, h_sel's key head first when the task holds it (selection) */
    const int sel_here = p->sel && p->sel_kv >= t->h0 && p->sel_kv < t->h0 + t->hn;
    const size_t hs = sel_here ? p->sel_kv - t->h0 : 0;
    for (size_t hi_order = 0; hi_order < t->hn; hi_order++) {
      const size_t hh = !sel_here ? hi_order : hi_order == 0 ? hs : hi_order <= hs ? hi_order - 1 : hi_order;
      float *reg = blk_head(t, hh);
      /* fp32: K and V in place; fp16 / bf16 (no feature map: fp32 only): V's block rows converted
       * into scratch, K's in chunks by attn_blk_scores */
      size_t ldv = s->v.row_stride, ldk = s->k.row_stride;
      const float *kb = p->fm ? blk_row(t, t->io->k, s->k, j0, t->h0 + hh) : NULL;
      const int vfew = p->few && !masked; /* V in place: a masked block's P V needs fp32 rows */
      const void *vh = vfew ? blk_row(t, t->io->v, s->v, j0, t->h0 + hh) : NULL;
      const float *vb = vfew ? NULL : attn_blk_kv(t, 1, j0, jn, t->h0 + hh, &ldv);
      if (p->xm) { /* sub-blocks of bounded spread where some row sees only part of the block */
        p->fm->apply(t->uk, &t->fa, 1, jn, D, m, kb, ldk, ku, m, 1, t->ws + p->off_fms);
        for (size_t a = 0, b; a < jn; a = b) {
          b = masked ? attn_blk_split(t->uk, m, ku, a, jn, tmp, tmp + m) : jn;
          attn_blk_exp_keys(t, hh, j0 + (int64_t)a, b - a, masked, ku + a * m, vb + a * ldv, pass,
                            masked ? tmp + m : NULL);
        }
        continue;
      }
      if (masked && p->views) {
        attn_blk_boundary(t, hh, j0, jn, vb, ldv);
        continue;
      }
      if (p->fm) { /* psi(K_blk), read in place otherwise */
        p->fm->apply(t->uk, &t->fa, 1, jn, D, D, kb, ldk, kf, D, 1, NULL);
        t->uk->gemm(jn, rows, D, kf, D, 1, reg + p->off_qt, rows, t->ws + p->off_st, rows, NULL, 0);
      } else if (p->few) {
        t->uk->few_scores(p->kv_type, NULL, jn, rows, D, blk_row(t, t->io->k, s->k, j0, t->h0 + hh), ldk,
                          reg + p->off_qt, D, t->ws + p->off_st, rows);
      } else {
        attn_blk_scores(t, j0, jn, t->h0 + hh, rows, blk_qt(t, hh), t->ldq, t->ws + p->off_st, rows);
      }
      if (p->sel) { /* the first head of the order is h_sel's key head when the task holds it */
        const int applied = hi_order == 0 && attn_blk_select(t, j0, jn, sel_here ? t->ws + p->off_st : NULL);
        if (!applied) attn_blk_select_apply(t, t->ws + p->off_st, jn);
      }
      blk_accumulate(t, hh, j0, jn, masked, vb, vh, ldv, NULL);
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
