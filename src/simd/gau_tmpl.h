/*
 * GAU's relu^2 score step (contract: attn_gau_block_fn in core/ukernels.h), written once against
 * the vf_* shim. Include the path's shim, define ATTN_GAU_NAME, then include.
 */
#include <math.h>

#include "core/ukernels.h"
#include "simd/exp_tmpl.h"

/* The statistics' sums of VL weights w (masked 0; a non-finite input's NaN): sum w, sum w^2 and
 * sum w log w (log 0 is finite, so a zero weight adds 0): one log and three FMAs per vector.
 * with_stats is a compile-time constant of each instantiation. */
static inline __attribute__((always_inline)) void attn_gau_sums_(vf w, vf *s0, vf *s1, vf *s2) {
  *s0 = vf_add(*s0, w);
  *s1 = vf_fma(w, w, *s1);
  *s2 = vf_fma(w, attn_vlog_(w), *s2);
}

/* One query with contiguous scores (nq == 1, ld == 1: a decode step): vectors along the keys.
 * The bias of VL keys is one load when its stride is 1, gathered through a copy otherwise (a
 * relative-position table runs backwards along the keys); the tail is padded with -inf, which a
 * masked step does not count (an unmasked step counts every key: nk) and the sums never see. */
static inline __attribute__((always_inline)) void attn_gau_row_(size_t nk, float *st, float beta, const float *bias,
                                                                ptrdiff_t bias_ld, float *count, float *stats,
                                                                size_t lds, int masked, int with_stats) {
  const vf zero = vf_zero(), one = vf_set1(1.0f), ninf = vf_set1(-INFINITY);
  const vf hidden = vf_set1(masked ? 0.0f : NAN), bv = vf_set1(beta);
  vf cnt = zero, s0 = zero, s1 = zero, s2 = zero;
  for (size_t j = 0; j < nk; j += ATTN_VL) {
    const size_t w = nk - j < ATTN_VL ? nk - j : ATTN_VL;
    float xt[ATTN_VL], bt[ATTN_VL];
    vf x, b = bv;
    if (w == ATTN_VL) {
      x = vf_load(st + j);
    } else {
      for (size_t i = 0; i < ATTN_VL; i++) xt[i] = i < w ? st[j + i] : -INFINITY;
      x = vf_load(xt);
    }
    if (bias && bias_ld == 1 && w == ATTN_VL) {
      b = vf_load(bias + j);
    } else if (bias) {
      for (size_t i = 0; i < ATTN_VL; i++) bt[i] = i < w ? bias[(ptrdiff_t)(j + i) * bias_ld] : 0.0f;
      b = vf_load(bt);
    }
    const vf y = vf_add(x, b);
    const vf r = vf_select(vf_lt(y, zero), zero, y); /* relu, NaN kept */
    const vmask gone = vf_eq(x, ninf);               /* masked, or (unmasked) a non-finite input */
    const vf p = vf_select(gone, hidden, vf_mul(r, r));
    vf_store_w(st + j, p, w);
    if (masked) cnt = vf_add(cnt, vf_select(gone, zero, one));
    if (with_stats) attn_gau_sums_(w == ATTN_VL ? p : vf_load_w(st + j, w), &s0, &s1, &s2); /* tail: 0 lanes */
  }
  *count += masked ? vf_hsum(cnt) : (float)nk;
  if (with_stats) stats[0] += vf_hsum(s0), stats[lds] += vf_hsum(s1), stats[2 * lds] += vf_hsum(s2);
}

/* A column strip at a time: its counts (and sums) stay in registers. */
static inline __attribute__((always_inline)) void attn_gau_cols_(size_t nk, size_t nq, float *st, size_t ld, float beta,
                                                                 const float *bias, ptrdiff_t bias_ld, float *count,
                                                                 float *stats, size_t lds, int masked, int with_stats) {
  const vf zero = vf_zero(), one = vf_set1(1.0f), ninf = vf_set1(-INFINITY);
  const vf hidden = vf_set1(masked ? 0.0f : NAN), bv = vf_set1(beta);
  for (size_t c = 0; c < nq; c += ATTN_VL) {
    const size_t w = nq - c < ATTN_VL ? nq - c : ATTN_VL;
    vf cnt = vf_load_w(count + c, w), s0 = zero, s1 = zero, s2 = zero;
    if (with_stats)
      s0 = vf_load_w(stats + c, w), s1 = vf_load_w(stats + lds + c, w), s2 = vf_load_w(stats + 2 * lds + c, w);
    for (size_t j = 0; j < nk; j++) {
      float *cell = st + j * ld + c;
      const vf x = vf_load_w(cell, w);
      const vf y = vf_add(x, bias ? vf_load_w(bias + (ptrdiff_t)j * bias_ld + (ptrdiff_t)c, w) : bv);
      const vf r = vf_select(vf_lt(y, zero), zero, y); /* relu, NaN kept */
      const vmask gone = vf_eq(x, ninf);               /* masked, or (unmasked) a non-finite input */
      const vf p = vf_select(gone, hidden, vf_mul(r, r));
      vf_store_w(cell, p, w);
      cnt = vf_add(cnt, masked ? vf_select(gone, zero, one) : one);
      if (with_stats) attn_gau_sums_(p, &s0, &s1, &s2); /* lanes past w: loaded as 0, never stored */
    }
    vf_store_w(count + c, cnt, w);
    if (with_stats) {
      vf_store_w(stats + c, s0, w);
      vf_store_w(stats + lds + c, s1, w);
      vf_store_w(stats + 2 * lds + c, s2, w);
    }
  }
}

void ATTN_GAU_NAME(size_t nk, size_t nq, float *st, size_t ld, float beta, const float *bias, ptrdiff_t bias_ld,
                   float *count, float *stats, size_t lds, int masked) {
  if (nq == 1 && ld == 1) {
#define ATTN_GAU_ROW_(S, LDS, M, T) attn_gau_row_(nk, st, beta, bias, bias_ld, count, S, LDS, M, T)
    ATTN_SPECIALISE4(masked, stats, lds, ATTN_GAU_ROW_);
#undef ATTN_GAU_ROW_
    return;
  }
  if (stats)
    attn_gau_cols_(nk, nq, st, ld, beta, bias, bias_ld, count, stats, lds, masked, 1);
  else
    attn_gau_cols_(nk, nq, st, ld, beta, bias, bias_ld, count, NULL, 0, masked, 0);
}
