/*
 * GAU's relu^2 score step (contract: attn_gau_block_fn in core/ukernels.h), written once against
 * the vf_* shim. Include the path's shim, define ATTN_GAU_NAME, then include.
 */
#include <math.h>

#include "core/ukernels.h"

/* One query with contiguous scores (nq == 1, ld == 1: a decode step): vectors along the keys.
 * The bias of VL keys is one load when its stride is 1, gathered through a copy otherwise (a
 * relative-position table runs backwards along the keys); the tail is padded with -inf, which a
 * masked step does not count (an unmasked step counts every key: nk). */
static inline __attribute__((always_inline)) void attn_gau_row_(size_t nk, float *st, float beta, const float *bias,
                                                                ptrdiff_t bias_ld, float *count, int masked) {
  const vf zero = vf_zero(), one = vf_set1(1.0f), ninf = vf_set1(-INFINITY);
  const vf hidden = vf_set1(masked ? 0.0f : NAN), bv = vf_set1(beta);
  vf cnt = zero;
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
    vf_store_w(st + j, vf_select(gone, hidden, vf_mul(r, r)), w);
    if (masked) cnt = vf_add(cnt, vf_select(gone, zero, one));
  }
  *count += masked ? vf_hsum(cnt) : (float)nk;
}

void ATTN_GAU_NAME(size_t nk, size_t nq, float *st, size_t ld, float beta, const float *bias, ptrdiff_t bias_ld,
                   float *count, int masked) {
  if (nq == 1 && ld == 1) {
    if (masked)
      attn_gau_row_(nk, st, beta, bias, bias_ld, count, 1);
    else
      attn_gau_row_(nk, st, beta, bias, bias_ld, count, 0);
    return;
  }
  const vf zero = vf_zero(), one = vf_set1(1.0f), ninf = vf_set1(-INFINITY);
  const vf hidden = vf_set1(masked ? 0.0f : NAN), bv = vf_set1(beta);
  for (size_t c = 0; c < nq; c += ATTN_VL) { /* a column strip at a time: its counts stay in a register */
    const size_t w = nq - c < ATTN_VL ? nq - c : ATTN_VL;
    vf cnt = vf_load_w(count + c, w);
    for (size_t j = 0; j < nk; j++) {
      float *cell = st + j * ld + c;
      const vf x = vf_load_w(cell, w);
      const vf y = vf_add(x, bias ? vf_load_w(bias + (ptrdiff_t)j * bias_ld + (ptrdiff_t)c, w) : bv);
      const vf r = vf_select(vf_lt(y, zero), zero, y); /* relu, NaN kept */
      const vmask gone = vf_eq(x, ninf);               /* masked, or (unmasked) a non-finite input */
      vf_store_w(cell, vf_select(gone, hidden, vf_mul(r, r)), w);
      cnt = vf_add(cnt, masked ? vf_select(gone, zero, one) : one);
    }
    vf_store_w(count + c, cnt, w);
  }
}
