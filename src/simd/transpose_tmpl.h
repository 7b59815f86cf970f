/*
 * Rows of a matrix into the columns of a block, copied or added (contract: attn_transpose_fn in
 * core/ukernels.h), written once against the vf_* shim: softmax's bias tensor onto a block of
 * scores (keys in rows, query columns side by side; the tensor a row of keys per column), GLA's
 * query factors into the GEMM's row-major operand. A tile of ATTN_VL columns x ATTN_VL rows is
 * loaded as the columns' source rows, transposed in registers (vf_transpose) and stored to (or
 * added to) the block's rows, a vector each; the tails (fewer rows or columns than a vector) load
 * and store only the valid lanes. A block narrower than a vector (a decode's) goes down its
 * columns instead. Include the path's vf_* shim, define ATTN_TRANSPOSE_NAME, then include; a
 * kernel that writes a transposed output (featmap, expfeat) includes it without the name for
 * attn_tr_block_ alone.
 */
#ifndef ATTN_TRANSPOSE_TMPL_H
#define ATTN_TRANSPOSE_TMPL_H
#include <math.h>

#include "core/ukernels.h"

/* Features per row up to which featmap and expfeat write a transposed output (phi(Q)^T) through
 * a row-major tile on the stack and attn_tr_block_ (ATTN_VL x this floats: 8 KiB on AVX-512);
 * wider rows go lane by lane. */
#define ATTN_TR_TILE_COLS 128

/* The block's new value y from its old one (read only when adding) and the source's x. */
static inline __attribute__((always_inline)) vf attn_tr_combine_(attn_transpose_mode mode, const float *p, size_t cs,
                                                                 size_t w, vf x) {
  if (mode == ATTN_TR_COPY) return x;
  vf y = vf_load_strided(p, cs, w);
  const vmask ninf = vf_eq(y, vf_set1(-INFINITY));
  if (mode == ATTN_TR_ADD_MASKED) return vf_select(ninf, y, vf_add(y, x)); /* hidden stays hidden */
  return vf_add(vf_select(ninf, vf_set1(NAN), y), x);
}

/* The block in one mode (a constant once inlined: no test per vector). */
static inline __attribute__((always_inline)) void attn_tr_block_(attn_transpose_mode mode, size_t nk, size_t nq,
                                                                 size_t g, float *st, size_t ld, const float *x,
                                                                 size_t rs, size_t hs) {
  if (nq < ATTN_VL) { /* a narrow block: down each column, a vector of rows at a time */
    for (size_t c = 0; c < nq; c++) {
      const float *src = x + c / g * rs + c % g * hs;
      for (size_t j0 = 0; j0 < nk; j0 += ATTN_VL) {
        const size_t wk = nk - j0 < ATTN_VL ? nk - j0 : ATTN_VL;
        float *p = st + j0 * ld + c;
        vf_store_strided(p, ld, attn_tr_combine_(mode, p, ld, wk, vf_load_w(src + j0, wk)), wk);
      }
    }
    return;
  }
  for (size_t c0 = 0; c0 < nq; c0 += ATTN_VL) {
    const size_t wc = nq - c0 < ATTN_VL ? nq - c0 : ATTN_VL;
    const float *src[ATTN_VL]; /* each column's source row (the last valid one past wc) */
    for (size_t u = 0; u < ATTN_VL; u++) {
      const size_t c = c0 + (u < wc ? u : wc - 1);
      src[u] = x + c / g * rs + c % g * hs;
    }
    for (size_t j0 = 0; j0 < nk; j0 += ATTN_VL) {
      const size_t wk = nk - j0 < ATTN_VL ? nk - j0 : ATTN_VL;
      vf t[ATTN_VL];
#pragma GCC unroll 16
      for (size_t u = 0; u < ATTN_VL; u++) t[u] = vf_load_w(src[u] + j0, wk);
      vf_transpose(t); /* t[v]: row j0 + v of the tile's columns */
      for (size_t v = 0; v < wk; v++) {
        float *row = st + (j0 + v) * ld + c0;
        vf_store_w(row, attn_tr_combine_(mode, row, 1, wc, t[v]), wc);
      }
    }
  }
}

#endif /* ATTN_TRANSPOSE_TMPL_H */

#ifdef ATTN_TRANSPOSE_NAME
void ATTN_TRANSPOSE_NAME(attn_transpose_mode mode, size_t nk, size_t nq, size_t g, float *st, size_t ld, const float *x,
                         size_t rs, size_t hs) {
  if (mode == ATTN_TR_COPY)
    attn_tr_block_(ATTN_TR_COPY, nk, nq, g, st, ld, x, rs, hs);
  else if (mode == ATTN_TR_ADD_MASKED)
    attn_tr_block_(ATTN_TR_ADD_MASKED, nk, nq, g, st, ld, x, rs, hs);
  else
    attn_tr_block_(ATTN_TR_ADD_NAN_NINF, nk, nq, g, st, ld, x, rs, hs);
}
#endif
