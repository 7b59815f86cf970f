/*
 * Vector exp and log, softmax's logit options and the gates' factors (contracts: attn_vexp_fn,
 * attn_vlog_fn, attn_logit_opts_fn and attn_gate_exp_fn in core/ukernels.h) over the exp and log of
 * exp_tmpl.h, written once against the vf_* shim. Include the path's shim, define ATTN_VEXP_NAME,
 * ATTN_VLOG_NAME, ATTN_LOGIT_OPTS_NAME or ATTN_GATE_EXP_NAME, then include.
 */
#include "core/ukernels.h"
#include "simd/exp_tmpl.h"

#define ATTN_VMAP_(name, f)                               \
  void name(size_t n, const float *x, float *y) {         \
    for (size_t i = 0; i < n; i += ATTN_VL) {             \
      const size_t w = n - i < ATTN_VL ? n - i : ATTN_VL; \
      vf_store_w(y + i, f(vf_load_w(x + i, w)), w);       \
    }                                                     \
  }
#ifdef ATTN_VEXP_NAME
ATTN_VMAP_(ATTN_VEXP_NAME, attn_vexp_)
#endif
#ifdef ATTN_VLOG_NAME
ATTN_VMAP_(ATTN_VLOG_NAME, attn_vlog_)
#endif
#undef ATTN_VMAP_

#ifdef ATTN_GATE_EXP_NAME
/* One row's vectors, c and x present or not as constants (the loop is then a straight run of
 * conversions, exps and stores: with the tests in it, they took about half its instructions). */
static inline __attribute__((always_inline)) void attn_gate_exp_row_(size_t m, const double *ar, const double *c,
                                                                     vf sign, const float *xr, float *yr) {
  size_t f = 0;
  for (; f + ATTN_VL <= m; f += ATTN_VL) {
    static const double zero[ATTN_VL]; /* c NULL */
    vf e = attn_vexp_(vf_mul(vf_from_f64_diff(ar + f, c ? c + f : zero), sign));
    if (xr) e = vf_mul(e, vf_load(xr + f));
    vf_store(yr + f, e);
  }
  if (f < m) { /* the tail: the same conversion, lane by lane */
    const size_t w = m - f;
    float t[ATTN_VL];
    for (size_t i = 0; i < w; i++) t[i] = (float)(ar[f + i] - (c ? c[f + i] : 0.0));
    vf e = attn_vexp_(vf_mul(vf_load_w(t, w), sign));
    if (xr) e = vf_mul(e, vf_load_w(xr + f, w));
    vf_store_w(yr + f, e, w);
  }
}

void ATTN_GATE_EXP_NAME(size_t rows, size_t m, const double *a, size_t lda, const double *c, int neg, const float *x,
                        size_t ldx, float *y, size_t ldy) {
  const vf sign = vf_set1(neg ? -1.0f : 1.0f);
  for (size_t r = 0; r < rows; r++) {
    const double *ar = a + r * lda;
    float *yr = y + r * ldy;
    if (c && x)
      attn_gate_exp_row_(m, ar, c, sign, x + r * ldx, yr);
    else if (c)
      attn_gate_exp_row_(m, ar, c, sign, NULL, yr);
    else if (x)
      attn_gate_exp_row_(m, ar, NULL, sign, x + r * ldx, yr);
    else
      attn_gate_exp_row_(m, ar, NULL, sign, NULL, yr);
  }
}
#endif

#ifdef ATTN_LOGIT_OPTS_NAME
/* c tanh(v / c) for finite lanes of v (k = 2 / c), the others as they are. */
static inline vf attn_softcap_(vf v, vf k, vf cv) {
  const vf lim = vf_set1(88.0f), one = vf_set1(1.0f), two = vf_set1(2.0f);
  const vmask fin = vf_eq(vf_sub(v, v), vf_zero()); /* x - x is 0 exactly when x is finite */
  const vf y = vf_select(fin, vf_max(vf_min(vf_mul(v, k), lim), vf_sub(vf_zero(), lim)), vf_zero());
  const vf t = vf_mul(cv, vf_sub(one, vf_div(two, vf_add(attn_vexp_(y), one))));
  return vf_select(fin, t, v);
}

/* The block with the cap and ALiBi on or off (constants once inlined: no test per vector). A
 * decode's narrow block (fewer columns than a vector) goes down its columns, a vector of keys at a
 * time (strided unless one column); a contiguous block with the cap alone, as one vector loop;
 * otherwise along the rows. Each element gets the same operations in every order. */
static inline __attribute__((always_inline)) void attn_logit_block_(int cap, int alibi, size_t nk, size_t nq, float *st,
                                                                    size_t ld, float c, const float *sl,
                                                                    const float *tk, int64_t d0) {
  const vf k = vf_set1(cap ? 2.0f / c : 0.0f), cv = vf_set1(c);
  if (!alibi && ld == nq) {
    const size_t n = nk * nq;
    for (size_t i = 0; i < n; i += ATTN_VL) {
      const size_t w = n - i < ATTN_VL ? n - i : ATTN_VL;
      vf_store_w(st + i, attn_softcap_(vf_load_w(st + i, w), k, cv), w);
    }
  } else if (nq < ATTN_VL) {
    for (size_t col = 0; col < nq; col++)
      for (size_t j0 = 0; j0 < nk; j0 += ATTN_VL) {
        const size_t w = nk - j0 < ATTN_VL ? nk - j0 : ATTN_VL;
        float *p = st + j0 * ld + col;
        vf v = vf_load_strided(p, ld, w);
        if (cap) v = attn_softcap_(v, k, cv);
        if (alibi) {
          float dist[ATTN_VL];
          for (size_t i = 0; i < ATTN_VL; i++) dist[i] = (float)(d0 + (int64_t)(j0 + i));
          v = vf_fma(vf_set1(sl[col]), vf_sub(vf_load(dist), vf_set1(tk[col])), v);
        }
        vf_store_strided(p, ld, v, w);
      }
  } else {
    for (size_t j = 0; j < nk; j++) {
      float *row = st + j * ld;
      const vf dist = vf_set1((float)(d0 + (int64_t)j));
      for (size_t i = 0; i < nq; i += ATTN_VL) {
        const size_t w = nq - i < ATTN_VL ? nq - i : ATTN_VL;
        vf v = vf_load_w(row + i, w);
        if (cap) v = attn_softcap_(v, k, cv);
        if (alibi) v = vf_fma(vf_load_w(sl + i, w), vf_sub(dist, vf_load_w(tk + i, w)), v);
        vf_store_w(row + i, v, w);
      }
    }
  }
}

void ATTN_LOGIT_OPTS_NAME(size_t nk, size_t nq, float *st, size_t ld, float c, const float *sl, const float *tk,
                          int64_t d0) {
  if (c > 0.0f && sl)
    attn_logit_block_(1, 1, nk, nq, st, ld, c, sl, tk, d0);
  else if (c > 0.0f)
    attn_logit_block_(1, 0, nk, nq, st, ld, c, sl, tk, d0);
  else if (sl)
    attn_logit_block_(0, 1, nk, nq, st, ld, c, sl, tk, d0);
}
#endif
