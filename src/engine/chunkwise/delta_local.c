/* The delta rule's local phase (engine/chunkwise.h): what a chunk computes from its own tokens,
 * before the state enters. */
#include <math.h>

#include "engine/chunkwise/delta.h"

/* sum x^2 in eight running sums (so that it vectorises), then combined pairwise. */
static float dl_sumsq(size_t n, const float *restrict x) {
  float a[8] = {0};
  size_t f = 0;
  for (; f + 8 <= n; f += 8)
    for (size_t j = 0; j < 8; j++) a[j] += x[f + j] * x[f + j];
  for (size_t j = 0; f < n; f++, j++) a[j] += x[f] * x[f];
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* x *= a / sqrt(sum x^2 + 1e-6) with normalisation, x *= a without. */
static void dl_norm(size_t n, float *restrict x, int l2norm, float a) {
  if (l2norm) a /= sqrtf(dl_sumsq(n, x) + 1e-6f);
  if (a != 1.0f)
    for (size_t f = 0; f < n; f++) x[f] *= a;
}

/* x = a x / |x| (or a x) from src (type t), then NaN everywhere when x held a non-finite element. */
static void dl_token_row(const dl_ctx *c, attn_dtype t, size_t n, float *x, const void *src, int l2norm, float a) {
  attn_act_in(c->uk, t, 1, n, src, n, x);
  const float z = attn_rows_finite(x, 1, n, n) ? 0.0f : NAN;
  dl_norm(n, x, l2norm, a);
  for (size_t f = 0; z != 0.0f && f < n; f++) x[f] += z; /* z is 0 or NaN */
}

void attn_delta_token(const dl_ctx *x, size_t t, float *qv, float *kv) {
  const attn_delta_plan *p = x->p;
  const attn_shape *s = p->shape;
  dl_token_row(x, s->q_type, s->d, qv, attn_act_at(x->io->q, attn_act_size(s->q_type), s->q, t, x->hk), p->l2norm,
               p->scale);
  dl_token_row(x, ATTN_F32, s->d, kv, dl_row(x->io->k, s->k, t, x->hk), p->l2norm, 1.0f);
}

int attn_delta_load(const dl_ctx *x, size_t j0, size_t cn) {
  const attn_delta_plan *p = x->p;
  const attn_shape *s = p->shape;
  const size_t d = s->d, dv = s->dv;
  const void *q = attn_act_at(x->io->q, attn_act_size(s->q_type), s->q, j0, x->hk);
  int ok;
  if (s->q_type == ATTN_F32) {
    ok = x->uk->rows_copy(cn, d, x->q, d, q, s->q.row_stride);
  } else { /* half queries: converted, then checked as rows_copy checks */
    attn_act_in(x->uk, s->q_type, cn, d, q, s->q.row_stride, x->q);
    ok = attn_rows_finite(x->q, cn, d, d);
  }
  ok &= x->uk->rows_copy(cn, d, x->k, d, dl_row(x->io->k, s->k, j0, x->hk), s->k.row_stride);
  ok &= x->uk->rows_copy(cn, dv, x->vb, p->ldvk, dl_row(x->io->v, s->v, j0, x->h), s->v.row_stride);
  if (!ok) return 0;
  for (size_t r = 0; r < cn; r++) {
    dl_norm(d, x->q + r * d, p->l2norm, p->scale);
    dl_norm(d, x->k + r * d, p->l2norm, 1.0f);
  }
  return 1;
}

/* beta_r of the chunk's row r. */
static inline float dl_beta(const dl_ctx *x, size_t j) { return *dl_row(x->io->beta, x->p->bl, j, x->h); }

/* b: the inclusive cumulative log decays of the chunk (reset at its start), in double. */
static void dl_decays(const dl_ctx *x, size_t j0, size_t cn) {
  const attn_delta_plan *p = x->p;
  const size_t d = p->shape->d;
  if (p->gate == ATTN_DELTA_SCALAR)
    for (size_t r = 0; r < cn; r++) x->b[r] = (r ? x->b[r - 1] : 0.0) + *dl_row(x->io->log_gate, p->gl, j0 + r, x->h);
  if (p->gate != ATTN_DELTA_FEATURE) return;
  for (size_t r = 0; r < cn; r++) {
    const float *g = dl_row(x->io->log_gate, p->gl, j0 + r, x->h);
    double *b = x->b + r * d;
    const double *prev = r ? x->b + (r - 1) * d : NULL;
    for (size_t f = 0; f < d; f++) b[f] = (prev ? prev[f] : 0.0) + g[f];
  }
}

/* a *= e and b *= e (n floats). */
static void dl_mul2(size_t n, const float *restrict e, float *restrict a, float *restrict b) {
  for (size_t c = 0; c < n; c++) a[c] *= e[c], b[c] *= e[c];
}

/* Scalar or no decay: L and A from the Gram products, weighted element by element, e^(b_r - b_c) <= 1. */
static void dl_intra_scalar(const dl_ctx *x, size_t cn) {
  const attn_delta_plan *p = x->p;
  const size_t d = p->shape->d, C = p->C;
  x->uk->transpose(ATTN_TR_COPY, d, cn, 1, x->kt, cn, x->k, d, 0);
  if (cn == C) { /* K above Q: L above A in one product */
    x->uk->gemm(2 * cn, cn, d, x->k, d, 1, x->kt, cn, x->l, C, NULL, 0);
  } else {
    x->uk->gemm(cn, cn, d, x->k, d, 1, x->kt, cn, x->l, C, NULL, 0);
    x->uk->gemm(cn, cn, d, x->q, d, 1, x->kt, cn, x->a, C, NULL, 0);
  }
  float *e = x->e;
  for (size_t r = 0; r < cn; r++) {
    float *lr = x->l + r * C, *ar = x->a + r * C;
    if (p->gate == ATTN_DELTA_SCALAR) {
      for (size_t c = 0; c <= r; c++) e[c] = (float)(x->b[r] - x->b[c]);
      x->uk->vexp(r + 1, e, e);
      dl_mul2(r + 1, e, lr, ar);
    }
    for (size_t c = r + 1; c < cn; c++) ar[c] = 0.0f;
    for (size_t c = r; c < cn; c++) lr[c] = 0.0f;
  }
}

/* Per-channel decays: query block I = [i0, i1) against the keys before i1, with the decay before
 * the block as reference (R = B_(i0-1), 0 for the first block): (X_I (.) e^(B_I - R))
 * (K_c (.) e^(R - B_c))^T; for keys c < i0 both exponents are <= 0; the block's own keys join
 * the product while its decay spans at most ATTN_GATE_SPAN, and are summed element by element
 * beyond. Returns 1 when the chunk was one block whose keys all joined the product: its factors
 * are then K e^B, Q e^B (in the scratch after the step's vectors) and K e^-B (kr), which the
 * local phase reuses. */
static int dl_intra_feature(const dl_ctx *x, size_t cn) {
  const attn_delta_plan *p = x->p;
  const size_t d = p->shape->d, C = p->C, sub = ATTN_DELTA_SUB;
  float *kl = x->e + 5 * d + 2 * p->shape->dv, *ql = kl + sub * d, *tmp = x->e + 4 * d;
  int whole = 0;
  for (size_t i0 = 0; i0 < cn; i0 += sub) {
    const size_t i1 = attn_min_sz(cn, i0 + sub), bn = i1 - i0;
    const double *r0 = i0 ? x->b + (i0 - 1) * d : NULL, *bl = x->b + (i1 - 1) * d;
    double span = 0.0;
    for (size_t f = 0; f < d; f++) span = (r0 ? r0[f] : 0.0) - bl[f] > span ? (r0 ? r0[f] : 0.0) - bl[f] : span;
    const size_t ce = span <= ATTN_GATE_SPAN ? i1 : i0; /* keys in the factored product */
    whole = i0 == 0 && i1 == cn && ce == cn;
    x->uk->gate_exp(bn, d, x->b + i0 * d, d, r0, 0, x->k + i0 * d, d, kl, d);
    x->uk->gate_exp(bn, d, x->b + i0 * d, d, r0, 0, x->q + i0 * d, d, ql, d);
    if (ce) {
      x->uk->gate_exp(ce, d, x->b, d, r0, 1, x->k, d, x->kr, d);
      x->uk->transpose(ATTN_TR_COPY, d, ce, 1, x->kt, ce, x->kr, d, 0);
      x->uk->gemm(bn, ce, d, kl, d, 1, x->kt, ce, x->l + i0 * C, C, NULL, 0);
      x->uk->gemm(bn, ce, d, ql, d, 1, x->kt, ce, x->a + i0 * C, C, NULL, 0);
    }
    for (size_t r = i0; r < i1; r++) {
      float *lr = x->l + r * C, *ar = x->a + r * C;
      for (size_t c = ce; c <= r; c++) { /* element by element: k_c (.) e^(B_r - B_c) */
        x->uk->gate_exp(1, d, x->b + r * d, d, x->b + c * d, 0, x->k + c * d, d, tmp, d);
        float sl = 0.0f, sa = 0.0f;
        for (size_t f = 0; f < d; f++) sl += x->k[r * d + f] * tmp[f], sa += x->q[r * d + f] * tmp[f];
        lr[c] = sl, ar[c] = sa;
      }
      for (size_t c = r + 1; c < cn; c++) ar[c] = 0.0f;
      for (size_t c = r; c < cn; c++) lr[c] = 0.0f;
    }
  }
  return whole;
}

/* y -= a x (n floats), restrict so that it vectorises. */
static void dl_axmy(size_t n, float a, const float *restrict x, float *restrict y) {
  for (size_t j = 0; j < n; j++) y[j] -= a * x[j];
}

/* X = (I + L)^-1 (L strictly lower, rows already times beta) by forward substitution: row r of X
 * is e_r - sum_{c < r} L_rc X_c, and X_c is zero right of c. */
static void dl_solve(const dl_ctx *x, size_t cn) {
  const size_t C = x->p->C;
  for (size_t r = 0; r < cn; r++) {
    float *xr = x->x + r * C;
    const float *lr = x->l + r * C;
    memset(xr, 0, cn * sizeof(float));
    xr[r] = 1.0f;
    for (size_t c = 0; c < r; c++)
      if (lr[c] != 0.0f) dl_axmy(c + 1, lr[c], x->x + c * C, xr);
  }
}

void attn_delta_local(const dl_ctx *x, size_t j0, size_t cn) {
  const attn_delta_plan *p = x->p;
  const size_t d = p->shape->d, dv = p->shape->dv, C = p->C;
  dl_decays(x, j0, cn);
  const int whole = p->gate == ATTN_DELTA_FEATURE && dl_intra_feature(x, cn);
  if (p->gate != ATTN_DELTA_FEATURE) dl_intra_scalar(x, cn);
  float *rows = x->e + 5 * d + 2 * dv + 2 * ATTN_DELTA_SUB * d; /* past the step's vectors and kl, ql */
  float *bt = rows + 2 * C;                                     /* beta, then -beta of each row */
  for (size_t r = 0; r < cn; r++) bt[r] = dl_beta(x, j0 + r);
  x->uk->rows_axpby(cn, cn, x->l, C, x->l, C, NULL, 0, bt, 1, 0, 0); /* L's rows and V's times beta */
  x->uk->rows_axpby(cn, dv, x->vb, p->ldvk, x->vb, p->ldvk, NULL, 0, bt, 1, 0, 0);
  dl_solve(x, cn);
  for (size_t r = 0; r < cn; r++) bt[r] = -bt[r];
  /* kg = -beta K (.) e^B, kn = K (.) e^(B_last - B), q = Q (.) e^B, rs = e^B_last */
  if (whole) { /* the intra part's factors: K e^B, Q e^B, and K e^-B times e^B_last */
    const float *kl = x->e + 5 * d + 2 * dv, *ql = kl + ATTN_DELTA_SUB * d;
    x->uk->gate_exp(1, d, x->b + (cn - 1) * d, d, NULL, 0, NULL, 0, x->rs, d);
    x->uk->rows_axpby(cn, d, x->kg, p->ldvk, (float *)kl, d, NULL, 0, bt, 1, 0, 0);
    memcpy(x->q, ql, cn * d * sizeof(float));
    x->uk->rows_cols(ATTN_COLS_SCALE, cn, d, x->kn, d, x->kr, d, x->rs);
  } else if (p->gate == ATTN_DELTA_FEATURE) {
    const double *bl = x->b + (cn - 1) * d;
    x->uk->gate_exp(cn, d, x->b, d, NULL, 0, x->k, d, x->kg, p->ldvk);
    x->uk->gate_exp(cn, d, x->b, d, bl, 1, x->k, d, x->kn, d);
    x->uk->gate_exp(cn, d, x->b, d, NULL, 0, x->q, d, x->q, d);
    x->uk->gate_exp(1, d, bl, d, NULL, 0, NULL, 0, x->rs, d);
    x->uk->rows_axpby(cn, d, x->kg, p->ldvk, x->kg, p->ldvk, NULL, 0, bt, 1, 0, 0);
  } else if (p->gate == ATTN_DELTA_SCALAR) {
    float *e = rows, *en = rows + C;
    for (size_t r = 0; r < cn; r++) e[r] = (float)x->b[r], en[r] = (float)(x->b[cn - 1] - x->b[r]);
    x->uk->vexp(cn, e, e);
    x->uk->vexp(cn, en, en);
    x->uk->rows_axpby(cn, d, x->kn, d, x->k, d, NULL, 0, en, 1, 0, 0);
    x->uk->rows_axpby(cn, d, x->q, d, x->q, d, NULL, 0, e, 1, 0, 0);
    for (size_t r = 0; r < cn; r++) bt[r] *= e[r];
    x->uk->rows_axpby(cn, d, x->kg, p->ldvk, x->k, d, NULL, 0, bt, 1, 0, 0);
    for (size_t f = 0; f < d; f++) x->rs[f] = e[cn - 1];
  } else { /* no decay: kn is K itself (dl_absorb reads k) */
    x->uk->rows_axpby(cn, d, x->kg, p->ldvk, x->k, d, NULL, 0, bt, 1, 0, 0);
  }
  /* U = X (beta V) beside W' = X (-beta K (.) e^B): one product */
  x->uk->gemm(cn, dv + d, cn, x->x, C, 1, x->vb, p->ldvk, x->u, p->ldvk, NULL, 0);
}
