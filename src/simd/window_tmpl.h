/*
 * Windowed linear attention's score step (contract: attn_window_block_fn in core/ukernels.h),
 * written once against the vf_* shim: strips of query columns, their sums in registers down the
 * keys (each column's additions in key order, as the scalar loop's). Four strips go side by side:
 * each column's sum is one chain of dependent adds, and four chains hide the add's latency.
 * Include the path's shim, define ATTN_WINDOW_BLOCK_NAME, then include.
 */
#include <math.h>

#include "core/ukernels.h"

/* One weight: hidden for a -inf pair, else x fac (fac NULL: x). */
static inline vf attn_window_weight_(vf x, const float *fac, vf f, vf hidden) {
  return vf_select(vf_eq(x, vf_set1(-INFINITY)), hidden, fac ? vf_mul(x, f) : x);
}

void ATTN_WINDOW_BLOCK_NAME(size_t nk, size_t nq, float *st, size_t ldst, const float *fac, float *den, int masked) {
  const vf hidden = vf_set1(masked ? 0.0f : NAN), one = vf_set1(1.0f);
  size_t c = 0;
  for (; c + 4 * ATTN_VL <= nq; c += 4 * ATTN_VL) {
    vf f[4], s[4];
    for (size_t i = 0; i < 4; i++)
      f[i] = fac ? vf_load(fac + c + i * ATTN_VL) : one, s[i] = vf_load(den + c + i * ATTN_VL);
    for (size_t j = 0; j < nk; j++) {
      float *row = st + j * ldst + c;
      for (size_t i = 0; i < 4; i++) {
        const vf y = attn_window_weight_(vf_load(row + i * ATTN_VL), fac, f[i], hidden);
        vf_store(row + i * ATTN_VL, y);
        s[i] = vf_add(s[i], y);
      }
    }
    for (size_t i = 0; i < 4; i++) vf_store(den + c + i * ATTN_VL, s[i]);
  }
  for (; c < nq; c += ATTN_VL) {
    const size_t w = nq - c < ATTN_VL ? nq - c : ATTN_VL;
    const vf f = fac ? vf_load_w(fac + c, w) : one;
    vf s = vf_load_w(den + c, w);
    for (size_t j = 0; j < nk; j++) {
      float *row = st + j * ldst + c;
      const vf y = attn_window_weight_(vf_load_w(row, w), fac, f, hidden);
      vf_store_w(row, y, w);
      s = vf_add(s, y);
    }
    vf_store_w(den + c, s, w);
  }
}
