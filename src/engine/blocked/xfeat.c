/* The blocked engine's exponential feature maps (engine/blocked.h, attn_blocked_features): sub-blocks
 * of bounded spread, each row's offsets, dsoftmax's column sums and queries. */
#include "engine/blocked/internal.h"
#include "engine/blocked/mask.h"

/* Exponential maps: the end b of the sub-block of u rows [a, jn) (m floats each) that starts at a,
 * where every feature's finite values spread at most ATTN_OFFSET_GUARD (at least one key: a
 * single row spreads 0); mn and mx end as each feature's finite minimum and maximum over [a, b). */
size_t attn_blk_split(const struct attn_ukernels *uk, size_t m, const float *u, size_t a, size_t jn, float *mn,
                      float *mx) {
  for (size_t f = 0; f < m; f++) mn[f] = INFINITY, mx[f] = -INFINITY;
  /* the common case first: the whole rest within the guard */
  uk->expfeat(ATTN_EXPF_RANGE, jn - a, m, u + a * m, m, NULL, 0, mx, NULL, mn, 0, 0);
  int within = 1;
  for (size_t f = 0; f < m; f++) within &= !(mx[f] - mn[f] > ATTN_OFFSET_GUARD);
  if (within) return jn;
  for (size_t f = 0; f < m; f++) mn[f] = INFINITY, mx[f] = -INFINITY;
  size_t j = a;
  for (; j < jn; j++) {
    const float *r = u + j * m;
    int cut = 0;
    for (size_t f = 0; f < m; f++) {
      const float x = r[f], lo = x < mn[f] ? x : mn[f], hi = x > mx[f] ? x : mx[f];
      cut |= isfinite(x) && hi - lo > ATTN_OFFSET_GUARD;
    }
    if (cut) break;
    for (size_t f = 0; f < m; f++)
      if (isfinite(r[f])) mn[f] = r[f] < mn[f] ? r[f] : mn[f], mx[f] = r[f] > mx[f] ? r[f] : mx[f];
  }
  return j > a ? j : a + 1;
}

/* Each row's offset over the keys of a boundary sub-block it sees: the largest x_f + u_jf. When
 * one edge of the window cuts the sub-block, every token sees a prefix (or every one a suffix) of
 * it, and the running maxima of u over the keys give each row's in O(m); otherwise a max-plus
 * pass per row. Rows that see none of the keys keep -inf. */
static void blk_row_offsets(const blk_task *t, int64_t j0, size_t jn, const float *ku, const float *uq, float *bm) {
  const attn_blocked_plan *p = t->p;
  const size_t m = p->m, g = p->g;
  int prefix = 1, suffix = 1;
  for (size_t ti = 0; ti < t->tn; ti++) {
    size_t first;
    const size_t count = blk_visible(p, t->p0 + (int64_t)ti, j0, jn, &first);
    prefix &= !count || first == 0;
    suffix &= !count || first + count == jn;
  }
  float *km = t->ws + p->wl.km;
  if (prefix || suffix) {
    const size_t j0s = prefix ? 0 : jn - 1;
    for (size_t f = 0; f < m; f++) km[j0s * m + f] = ku[j0s * m + f];
    for (size_t s = 1; s < jn; s++) {
      const size_t j = prefix ? s : jn - 1 - s, prev = prefix ? j - 1 : j + 1;
      const float *u = ku + j * m, *a = km + prev * m;
      float *o = km + j * m;
      for (size_t f = 0; f < m; f++) o[f] = u[f] > a[f] ? u[f] : a[f];
    }
  }
  for (size_t ti = 0; ti < t->tn; ti++) {
    size_t first;
    const size_t count = blk_visible(p, t->p0 + (int64_t)ti, j0, jn, &first);
    if (!count) continue;
    for (size_t r = ti * g; r < (ti + 1) * g; r++)
      if (prefix || suffix)
        t->uk->expfeat(ATTN_EXPF_MAX, 1, m, km + (prefix ? count - 1 : first) * m, m, NULL, 0, bm + r, uq + r * m, NULL,
                       0, 0);
      else
        t->uk->expfeat(ATTN_EXPF_MAX, count, m, ku + first * m, m, NULL, 0, bm + r, uq + r * m, NULL, 0, 0);
  }
}

/* dsoftmax, first pass: each token's running column sums over the keys of a sub-block it sees,
 * c_t = max(c_t, cb), z_t = z_t e^(c_t - c) + (sum of its psi rows) e^(cb - c). cb may exceed the
 * visible keys' largest feature by the sub-block's spread (< e^40): c and z only need to agree. */
static void blk_column_sums(const blk_task *t, float *reg, int64_t j0, size_t jn, int masked, const float *kf,
                            const float *cb) {
  const attn_blocked_plan *p = t->p;
  const size_t m = p->m;
  float *cz = reg + p->hl.cz, *sum = t->ws + p->wl.tmp, *e1 = sum + m, *e2 = e1 + m;
  for (size_t ti = 0; ti < t->tn; ti++) {
    size_t first = 0, count = jn;
    if (masked && !(count = blk_visible(p, t->p0 + (int64_t)ti, j0, jn, &first))) continue;
    if (ti == 0 || masked) {
      for (size_t f = 0; f < m; f++) sum[f] = 0.0f;
      for (size_t j = first; j < first + count; j++)
        for (size_t f = 0; f < m; f++) sum[f] += kf[j * m + f];
    }
    float *c = cz + ti * m, *z = cz + (t->tn + ti) * m;
    for (size_t f = 0; f < m; f++) {
      const float cn = c[f] > cb[f] ? c[f] : cb[f];
      e1[f] = cn == -INFINITY ? 0.0f : c[f] - cn;
      e2[f] = cn == -INFINITY ? 0.0f : cb[f] - cn;
      c[f] = cn;
    }
    t->uk->vexp(m, e1, e1);
    t->uk->vexp(m, e2, e2);
    for (size_t f = 0; f < m; f++) z[f] = z[f] * e1[f] + sum[f] * e2[f];
  }
}

/* Exponential maps: keys [j0, j0 + jn) of one sub-block, u(K) rows ku (attn_blocked_features in
 * engine/blocked.h): psi with the sub-block's offsets cb (the features' finite maxima: kmax when
 * the caller has them, attn_blk_split's), then (pass 0) each row's offset bm, phi, the scores and the
 * step, or (pass 1, dsoftmax) the column sums. */
void attn_blk_exp_keys(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *ku,
                       const float *vb, int pass, const float *kmax) {
  float *reg = blk_head(t, hh);
  const attn_blocked_plan *p = t->p;
  const struct attn_ukernels *uk = t->uk;
  const size_t m = p->m, rows = t->rows;
  float *kf = t->ws + p->wl.kf, *cb = t->ws + p->wl.cb;
  if (kmax) { /* a copy: kmax lies in scratch that the column sums reuse */
    memcpy(cb, kmax, m * sizeof(float));
  } else { /* the finite features' maxima: a non-finite key stays its own */
    for (size_t f = 0; f < m; f++) cb[f] = -INFINITY;
    uk->expfeat(ATTN_EXPF_RANGE, jn, m, ku, m, NULL, 0, cb, NULL, NULL, 0, 0);
  }
  uk->expfeat(ATTN_EXPF_KEYS, jn, m, ku, m, NULL, 0, NULL, cb, kf, m, 1);
  if (pass) {
    blk_column_sums(t, reg, j0, jn, masked, kf, cb);
    return;
  }
  float *uq = reg + p->hl.uq, *bm = reg + p->hl.bm, *qt = reg + p->hl.qt;
  for (size_t r = 0; r < rows; r++) bm[r] = -INFINITY;
  if (masked) {
    blk_row_offsets(t, j0, jn, ku, uq, bm);
  } else { /* every key visible: max_f (x_f + cb_f) */
    for (size_t r = 0; r < rows; r++) uk->expfeat(ATTN_EXPF_MAX, 1, m, uq + r * m, m, NULL, 0, bm + r, cb, NULL, 0, 0);
  }
  uk->expfeat(ATTN_EXPF_SCALED, rows, m, uq, m, NULL, 0, bm, cb, qt, 1, rows);
  uk->gemm(jn, rows, m, kf, m, 1, qt, rows, t->ws + p->wl.st, rows, NULL, 0);
  blk_accumulate(t, hh, j0, jn, masked, vb, NULL, p->shape->v.row_stride, bm);
}

/* dsoftmax after its first pass: each row's query pre-features x_f = q_f - c_tf - log z_tf (-inf
 * for a feature no visible key has; NaN for a NaN sum). */
void attn_blk_dsoftmax_queries(const blk_task *t, float *reg) {
  const attn_blocked_plan *p = t->p;
  const size_t m = p->m;
  const float *cz = reg + p->hl.cz;
  float *uq = reg + p->hl.uq;
  for (size_t r = 0; r < t->rows; r++) {
    const size_t ti = r / p->g;
    const float *c = cz + ti * m, *z = cz + (t->tn + ti) * m;
    float *x = uq + r * m;
    for (size_t f = 0; f < m; f++) x[f] = z[f] > 0.0f ? x[f] - c[f] - logf(z[f]) : z[f] == 0.0f ? -INFINITY : NAN;
  }
}
