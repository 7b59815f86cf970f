/*
 * GAU's relu^2 score step (contract: attn_gau_block_fn in core/ukernels.h), written once against
 * the vf_* shim. Include the path's shim, define ATTN_GAU_NAME, then include.
 */
#include <math.h>

#include "core/ukernels.h"

void ATTN_GAU_NAME(size_t nk, size_t nq, float *st, size_t ld, float beta, const float *bias, ptrdiff_t bias_ld,
                   float *count, int masked) {
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
