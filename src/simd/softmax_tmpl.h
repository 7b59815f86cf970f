/*
 * Online-softmax block step (contract: attn_softmax_block_fn in core/ukernels.h), written once
 * against the vf_* shim. The block is transposed (keys x queries), so every reduction runs down
 * columns: one vector holds VL queries, and no horizontal operation is needed.
 * Include the path's vf_* shim, define ATTN_SOFTMAX_NAME, then include.
 */
#include "simd/softmax_step.h"

void ATTN_SOFTMAX_NAME(size_t nk, size_t nq, float *st, size_t ldst, float *m, float *l, float *alpha, float *stats,
                       size_t lds, int masked) {
  if (nq >= 1 && ldst == nq && ATTN_VL % nq == 0) {
#define ATTN_SOFTMAX_FLAT_(S, LDS, M, T) attn_softmax_flat_(nk, nq, st, m, l, alpha, S, LDS, M, T)
    ATTN_SPECIALISE4(masked, stats, lds, ATTN_SOFTMAX_FLAT_);
#undef ATTN_SOFTMAX_FLAT_
    return;
  }
#define ATTN_SOFTMAX_COLS_(S, LDS, M, T) attn_softmax_cols_(nk, nq, st, ldst, m, l, alpha, S, LDS, M, T)
  ATTN_SPECIALISE4(masked, stats, lds, ATTN_SOFTMAX_COLS_);
#undef ATTN_SOFTMAX_COLS_
}
