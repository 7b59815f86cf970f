/* The blocked engine's selection (engine/blocked.h, attn_blocked_select): F of a block's (key, token)
 * pairs from head h_sel's scores, and every head's scores minus F. */
#include "engine/blocked/internal.h"

/* relu with NaN kept and -inf made NaN (a selection: a non-finite score reaches F), branch-free:
 * the bits of y, cleared where y <= 0 (random signs would mispredict a branch half the time). */
static inline float blk_relu(float y) {
  y = y == -INFINITY ? NAN : y;
  uint32_t u;
  memcpy(&u, &y, sizeof u);
  u &= (uint32_t)0 - (uint32_t) !(y <= 0.0f);
  memcpy(&y, &u, sizeof y);
  return y;
}

/* Selection: F of the block's (key, token) pairs (fz, jn x tn) from head h_sel's scores (src:
 * row jj of key j0 + jj, its token ti at src[jj * ld + ti * step]): F_pj = sel_f[j] + the relu'd
 * scores of the block's earlier tokens k with j < k (none for j = 0), through the path's
 * select_scan kernel. A NaN or an infinity reaches only the later tokens of its key. The last
 * head group stores each key's sum over all the block's tokens. */
static int blk_select_f(const blk_task *t, int64_t j0, size_t jn, const float *src, size_t ld, size_t step, float *y) {
  const attn_blocked_plan *p = t->p;
  const size_t tn = t->tn;
  float *fz = t->ws + p->wl.fz, *run = t->ws + p->wl.run, *f = t->io->sel_f;
  if (tn == 1) { /* a decode step: F is sel_f itself; keys 0 < j < p0 take the token's selection */
    const int64_t a = j0 > 1 ? j0 : 1, e = j0 + (int64_t)jn, b = t->p0 < e ? t->p0 : e;
    memcpy(fz, f + j0, jn * sizeof(float));
    const size_t n = t->last_group && b > a ? (size_t)(b - a) : 0;
    float *fa = f + a;
    src += (size_t)(a - j0) * ld;
    if (ld == 1) /* contiguous: a vector loop */
      for (size_t i = 0; i < n; i++) fa[i] += blk_relu(src[i]);
    else
      for (size_t i = 0; i < n; i++) fa[i] += blk_relu(src[i * ld]);
    return 0;
  }
  memcpy(run, f + j0, jn * sizeof(float));
  /* token ti selects key j when ti >= j - p0 + 1 */
  t->uk->select_scan(jn, tn, src, ld, step, j0 - t->p0 + 1, j0 == 0, run, fz, y);
  if (t->last_group) memcpy(f + j0, run, jn * sizeof(float));
  return y != NULL;
}

/* Selection: F of keys [j0, j0 + jn) from head h_sel's scores: the columns of its key head's tile
 * when the task holds it (st, already computed; F is then subtracted from that tile in the same
 * pass, except in a decode step), else their own GEMM. Returns whether st has lost F. */
int attn_blk_select(const blk_task *t, int64_t j0, size_t jn, float *st) {
  const attn_blocked_plan *p = t->p;
  if (st) return blk_select_f(t, j0, jn, st + p->sel_gi, t->rows, p->g, st);
  float *ss = t->ws + p->wl.ss;
  /* half K: converted into the K scratch, free again (the head's scores are done) */
  attn_blk_scores(t, j0, jn, p->sel_kv, t->tn, t->ws + p->wl.qs, t->tn, ss, t->tn);
  return blk_select_f(t, j0, jn, ss, t->tn, 1, NULL);
}

/* A row of ST (tn tokens x g heads) minus F of its key (tn floats), g a constant where inlined. */
static inline __attribute__((always_inline)) void blk_sub_group(float *row, const float *fr, size_t tn, size_t g) {
  for (size_t ti = 0; ti < tn; ti++)
    for (size_t gi = 0; gi < g; gi++) row[ti * g + gi] -= fr[ti];
}

/* Selection: every head's scores minus F (column r of ST is token r / g). The common GQA groups
 * get loops with a constant g, which compilers vectorise; g == 1 is one flat pass. */
void attn_blk_select_apply(const blk_task *t, float *st, size_t jn) {
  const size_t tn = t->tn, g = t->p->g, rows = t->rows;
  const float *fz = t->ws + t->p->wl.fz;
  if (g == 1) { /* ST is jn x tn, as F */
    for (size_t e = 0; e < jn * tn; e++) st[e] -= fz[e];
    return;
  }
  for (size_t jj = 0; jj < jn; jj++) {
    float *row = st + jj * rows;
    const float *fr = fz + jj * tn;
    switch (g) {
      case 2:
        blk_sub_group(row, fr, tn, 2);
        break;
      case 4:
        blk_sub_group(row, fr, tn, 4);
        break;
      case 8:
        blk_sub_group(row, fr, tn, 8);
        break;
      default:
        blk_sub_group(row, fr, tn, g);
        break;
    }
  }
}
