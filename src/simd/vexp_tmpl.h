/*
 * Vector exp (contract: attn_vexp_fn in core/ukernels.h) over the exp of exp_tmpl.h, written once
 * against the vf_* shim. Include the path's shim, define ATTN_VEXP_NAME, then include.
 */
#include "core/ukernels.h"
#include "simd/exp_tmpl.h"

void ATTN_VEXP_NAME(size_t n, const float *x, float *y) {
  for (size_t i = 0; i < n; i += ATTN_VL) {
    const size_t w = n - i < ATTN_VL ? n - i : ATTN_VL;
    vf_store_w(y + i, attn_vexp_(vf_load_w(x + i, w)), w);
  }
}
