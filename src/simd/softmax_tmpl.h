/*
 * Online-softmax block step (contract: attn_softmax_block_fn in core/ukernels.h), written once
 * against the vf_* shim. The block is transposed (keys x queries), so every reduction runs down
 * columns: one vector holds VL queries, and no horizontal operation is needed.
 * Include the path's vf_* shim, define ATTN_SOFTMAX_NAME, then include.
 */
#include "core/ukernels.h"
#include "simd/exp_tmpl.h"

/* masked is a compile-time constant in each instantiation. When 0, a -inf entry is a logit from
 * non-finite input: the max pass also tracks the column minimum, whose mn - mn is NaN exactly
 * when some entry is -inf (or NaN), and that NaN is added to l (an independent chain beside the
 * max's, so it costs no time). When 1, -inf marks a masked pair. */
static inline __attribute__((always_inline)) void attn_softmax_cols_(size_t nk, size_t nq, float *st, size_t ldst,
                                                                     float *m, float *l, float *alpha, int masked) {
  const vf ninf = vf_set1(-__builtin_inff()), zero = vf_zero();
  for (size_t c = 0; c < nq; c += ATTN_VL) {
    const size_t w = nq - c < ATTN_VL ? nq - c : ATTN_VL;
    const vf mo = vf_load_w(m + c, w);
    vf mx = ninf, mn = vf_set1(__builtin_inff());
    for (size_t j = 0; j < nk; j++) {
      const vf s = vf_load_w(st + j * ldst + c, w);
      mx = vf_max(mx, s);
      if (!masked) mn = vf_min(mn, s);
    }
    const vf mnew = vf_max(mo, mx);
    const vf msafe = vf_select(vf_eq(mnew, ninf), zero, mnew); /* all masked so far: P = 0 */
    const vf al = attn_vexp_(vf_sub(mo, msafe));
    vf sum = masked ? zero : vf_sub(mn, mn); /* 0, or NaN for a -inf logit */
    for (size_t j = 0; j < nk; j++) {
      float *sp = st + j * ldst + c;
      const vf p = attn_vexp_(vf_sub(vf_load_w(sp, w), msafe));
      vf_store_w(sp, p, w);
      sum = vf_add(sum, p);
    }
    vf_store_w(l + c, vf_fma(vf_load_w(l + c, w), al, sum), w);
    vf_store_w(m + c, mnew, w);
    vf_store_w(alpha + c, al, w);
  }
}

void ATTN_SOFTMAX_NAME(size_t nk, size_t nq, float *st, size_t ldst, float *m, float *l, float *alpha, int masked) {
  if (masked)
    attn_softmax_cols_(nk, nq, st, ldst, m, l, alpha, 1);
  else
    attn_softmax_cols_(nk, nq, st, ldst, m, l, alpha, 0);
}
