/* The exponential maps' per-feature offsets (engine/chunkwise.h): a state's offsets, the guard that
 * cuts a chunk, a state raised to new offsets, and for the scan a chunk's own state at its own
 * offsets and the merge of two states at the larger. */
#include "engine/chunkwise/internal.h"

/* The effective offsets of S: c_f, or -inf for a feature nothing was absorbed into (z_f == 0;
 * the zeroed memory of an empty state). */
void attn_cw_offsets_of(const attn_chunkwise_plan *p, const float *S, float *c) {
  const size_t dv = p->shape->dv;
  for (size_t f = 0; f < p->m; f++) c[f] = S[f * p->lds + dv] == 0.0f ? -INFINITY : S[f * p->lds + dv + 1];
}

/* Exponential maps, causal chunk of cn >= 2 keys (pre-exponential features in ku): the length of
 * the chunk to run, cut before the first key that raises an offset more than ATTN_OFFSET_GUARD
 * above its value at the chunk's start (the first key's feature, for a feature without one).
 * kmax (or NULL): an upper bound of each feature over the keys (their maxima, +inf counted, NaN
 * not: attn_cw_scan_local's offsets); where no feature's bound passes the guard, no key can, and the
 * keys are not read. */
size_t attn_cw_guard(const cw_ctx *x, const float *S, size_t cn, const float *kmax) {
  const attn_chunkwise_plan *p = x->p;
  float *base = x->rn;
  attn_cw_offsets_of(p, S, base);
  int pass = 0;
  for (size_t f = 0; f < p->m; f++) {
    base[f] = (base[f] == -INFINITY ? x->ku[f] : base[f]) + ATTN_OFFSET_GUARD;
    pass |= kmax && kmax[f] > base[f];
  }
  if (kmax && !pass) return cn;
  for (size_t r = 1; r < cn; r++) {
    const float *u = x->ku + r * p->m;
    int raise = 0;
    for (size_t f = 0; f < p->m; f++) raise |= u[f] > base[f];
    if (raise) return r;
  }
  return cn;
}

/* The rows of S (and z) whose offset rises from cp to cn, rescaled by exp(cp - cn); a row whose z
 * underflows to 0 is emptied; the new offsets stored. */
void attn_cw_raise(const cw_ctx *x, float *S) {
  const attn_chunkwise_plan *p = x->p;
  const size_t dv = p->shape->dv;
  for (size_t f = 0; f < p->m; f++) {
    if (!(x->cn[f] > x->cp[f])) continue;
    float *row = S + f * p->lds;
    const float a = expf(x->cp[f] - x->cn[f]); /* 0 for an empty row */
    for (size_t c = 0; c <= dv; c++) row[c] *= a;
    if (row[dv] == 0.0f) memset(row, 0, dv * sizeof(float));
    row[dv + 1] = x->cn[f];
  }
}

/* Exponential maps, keys ku[0 .. cn): cp = the offsets before them, cn = after (the largest
 * feature so far); rows of S (and z) whose offset rises are rescaled by exp(cp - cn) (a row whose
 * z underflows to 0 is emptied), the new offsets stored; then Kf = exp(ku - cn) <= 1. */
void attn_cw_key_offsets(const cw_ctx *x, float *S, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  attn_cw_offsets_of(p, S, x->cp);
  memcpy(x->cn, x->cp, m * sizeof(float));
  for (size_t r = 0; r < cn; r++) {
    const float *u = x->ku + r * m;
    for (size_t f = 0; f < m; f++) x->cn[f] = u[f] > x->cn[f] ? u[f] : x->cn[f];
  }
  attn_cw_raise(x, S);
  x->uk->expfeat(ATTN_EXPF_KEYS, cn, m, x->ku, m, NULL, 0, NULL, x->cn, x->kf, m, 1);
}

/* Maps with offsets, the scan's update on rows [f0, f1): S and D (a chunk's local state, with its
 * own offsets) both move to the larger offsets, c = max(c_S, c_D) per row (an empty row's offset
 * is -inf; a row empty in both stays empty). S moves first, as attn_cw_raise moves it: scaled by
 * exp(c_S - c), and emptied when its z underflows to 0; then S += D exp(c_D - c). So a row that a
 * chunk's outputs already raised in place (cw_scan_outputs, chunkwise/transition.c) merges to the same bits as one that was
 * not raised. With keep, D gets S as it was. */
void attn_cw_scan_merge(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *D, size_t f0,
                        size_t f1, int keep) {
  const size_t dv = p->shape->dv, lds = p->lds;
  float fa[CW_ROW_BATCH], fb[CW_ROW_BATCH], off[CW_ROW_BATCH]; /* the rows' factors and new offsets */
  unsigned char done[CW_ROW_BATCH];                            /* rows merged on their own (emptied) */
  for (size_t g0 = f0; g0 < f1; g0 += CW_ROW_BATCH) {
    const size_t g1 = attn_min_sz(f1, g0 + CW_ROW_BATCH);
    for (size_t f = g0; f < g1; f++) {
      float *restrict s = S + f * lds, *restrict d = D + f * lds;
      const float cs = s[dv] == 0.0f ? -INFINITY : s[dv + 1], cd = d[dv] == 0.0f ? -INFINITY : d[dv + 1];
      const float c = cd > cs ? cd : cs;
      /* the larger side's factor is exactly 1 */
      const float a = c == -INFINITY ? 0.0f : cs == c ? 1.0f : expf(cs - c);
      const float b = c == -INFINITY ? 0.0f : cd == c ? 1.0f : expf(cd - c);
      fa[f - g0] = a, fb[f - g0] = b, off[f - g0] = c;
      done[f - g0] = a * s[dv] == 0.0f;
      if (done[f - g0]) { /* S's row at c holds nothing (attn_cw_raise's rule): 0 + b D */
        for (size_t e = 0; e <= dv; e++) {
          const float t = d[e], v = s[e];
          if (keep) d[e] = v;
          s[e] = 0.0f + b * t;
        }
        if (keep) d[dv + 1] = s[dv + 1];
      }
    }
    for (size_t f = g0; f < g1;) { /* the other rows, runs of them at once */
      size_t e = f;
      while (e < g1 && !done[e - g0]) e++;
      if (e > f) {
        for (size_t r = f; keep && r < e; r++) D[r * lds + dv + 1] = S[r * lds + dv + 1];
        uk->rows_axpby(e - f, dv + 1, S + f * lds, lds, D + f * lds, lds, fa + (f - g0), 1, fb + (f - g0), 1, 1, keep);
      }
      f = e + 1;
    }
    for (size_t f = g0; f < g1; f++) {
      float *s = S + f * lds;
      s[dv + 1] = off[f - g0];
      if (s[dv] == 0.0f) memset(s, 0, (dv + 2) * sizeof(float));
    }
  }
}

/* Maps with offsets, a chunk's local state from its pre-exponential key features KU (cn rows,
 * x->va its Va): offsets c_f = max_j KU[j][f] (into c, and D's column dv + 1), its features
 * Kf = exp(KU - c) (into x->kf), D = Kf^T Va. */
void attn_cw_scan_local(const cw_ctx *x, const float *KU, float *D, size_t cn, float *c) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  for (size_t f = 0; f < m; f++) c[f] = -INFINITY;
  x->uk->rows_cols(ATTN_COLS_MAX, cn, m, NULL, 0, KU, m, c);
  x->uk->expfeat(ATTN_EXPF_KEYS, cn, m, KU, m, NULL, 0, NULL, c, x->kf, m, 1);
  x->uk->gemm(m, p->W, cn, x->kf, 1, m, x->va, p->ldw, D, p->lds, NULL, 0);
  for (size_t f = 0; f < m; f++) D[f * p->lds + p->shape->dv + 1] = c[f];
}
