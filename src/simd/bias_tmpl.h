/*
 * Softmax's bias tensor over a block of scores (contract: attn_bias_add_fn in core/ukernels.h),
 * written once against the vf_* shim. The block holds keys in rows and query columns side by
 * side, the tensor a row of keys per column: a tile of ATTN_VL columns x ATTN_VL keys is loaded
 * as the columns' rows, transposed in registers (vf_transpose) and added to the block's rows, a
 * vector each. The tails (fewer keys or columns than a vector) load and store only the valid
 * lanes. A block narrower than a vector (a decode's) goes down its columns instead. Include the path's vf_* shim, define ATTN_BIAS_ADD_NAME, then include.
 */
#include <math.h>

#include "core/ukernels.h"

/* The block's tiles, with -inf scores turned into NaN first or not (a constant once inlined). */
static inline __attribute__((always_inline)) void attn_bias_tiles_(int nan_ninf, size_t nk, size_t nq, size_t g,
                                                                   float *st, size_t ld, const float *b, size_t rs,
                                                                   size_t hs) {
  const vf ninf = vf_set1(-INFINITY), nan = vf_set1(NAN);
  if (nq < ATTN_VL) { /* a decode's narrow block: down each column, a vector of keys at a time */
    for (size_t c = 0; c < nq; c++) {
      const float *src = b + c / g * rs + c % g * hs;
      for (size_t j0 = 0; j0 < nk; j0 += ATTN_VL) {
        const size_t wk = nk - j0 < ATTN_VL ? nk - j0 : ATTN_VL;
        float *p = st + j0 * ld + c;
        vf y = vf_load_strided(p, ld, wk);
        if (nan_ninf) y = vf_select(vf_eq(y, ninf), nan, y);
        vf_store_strided(p, ld, vf_add(y, vf_load_w(src + j0, wk)), wk);
      }
    }
    return;
  }
  for (size_t c0 = 0; c0 < nq; c0 += ATTN_VL) {
    const size_t wc = nq - c0 < ATTN_VL ? nq - c0 : ATTN_VL;
    const float *src[ATTN_VL]; /* each column's row of the tensor (the last valid one past wc) */
    for (size_t u = 0; u < ATTN_VL; u++) {
      const size_t c = c0 + (u < wc ? u : wc - 1);
      src[u] = b + c / g * rs + c % g * hs;
    }
    for (size_t j0 = 0; j0 < nk; j0 += ATTN_VL) {
      const size_t wk = nk - j0 < ATTN_VL ? nk - j0 : ATTN_VL;
      vf x[ATTN_VL];
#pragma GCC unroll 16
      for (size_t u = 0; u < ATTN_VL; u++) x[u] = vf_load_w(src[u] + j0, wk);
      vf_transpose(x); /* x[v]: key j0 + v of the tile's columns */
      for (size_t v = 0; v < wk; v++) {
        float *row = st + (j0 + v) * ld + c0;
        vf y = vf_load_w(row, wc);
        if (nan_ninf) y = vf_select(vf_eq(y, ninf), nan, y);
        vf_store_w(row, vf_add(y, x[v]), wc);
      }
    }
  }
}

void ATTN_BIAS_ADD_NAME(size_t nk, size_t nq, size_t g, float *st, size_t ld, const float *b, size_t rs, size_t hs,
                        int nan_ninf) {
  if (nan_ninf)
    attn_bias_tiles_(1, nk, nq, g, st, ld, b, rs, hs);
  else
    attn_bias_tiles_(0, nk, nq, g, st, ld, b, rs, hs);
}
