/*
 * Online-softmax block step (contract: attn_softmax_block_fn in core/ukernels.h), written once
 * against the vf_* shim. The block is transposed (keys x queries), so every reduction runs down
 * columns: one vector holds VL queries, and no horizontal operation is needed.
 * Define ATTN_SOFTMAX_NAME, then include.
 */
#include "simd/exp_tmpl.h"

static inline vf attn_ld_(const float *p, size_t w) { return w == ATTN_VL ? vf_load(p) : vf_load_n(p, w); }
static inline void attn_st_(float *p, vf v, size_t w) {
  if (w == ATTN_VL) vf_store(p, v); else vf_store_n(p, v, w);
}

void ATTN_SOFTMAX_NAME(size_t nk, size_t nq, float *st, size_t ldst, float *m, float *l,
                       float *alpha) {
  const vf ninf = vf_set1(-__builtin_inff()), zero = vf_zero();
  for (size_t c = 0; c < nq; c += ATTN_VL) {
    const size_t w = nq - c < ATTN_VL ? nq - c : ATTN_VL;
    const vf mo = attn_ld_(m + c, w);
    vf mx = ninf;
    for (size_t j = 0; j < nk; j++) mx = vf_max(mx, attn_ld_(st + j * ldst + c, w));
    const vf mn = vf_max(mo, mx);
    const vf msafe = vf_select(vf_eq(mn, ninf), zero, mn); /* all masked so far: P = 0 */
    const vf al = attn_vexp_(vf_sub(mo, msafe));
    vf sum = zero;
    for (size_t j = 0; j < nk; j++) {
      float *sp = st + j * ldst + c;
      const vf p = attn_vexp_(vf_sub(attn_ld_(sp, w), msafe));
      attn_st_(sp, p, w);
      sum = vf_add(sum, p);
    }
    attn_st_(l + c, vf_fma(attn_ld_(l + c, w), al, sum), w);
    attn_st_(m + c, mn, w);
    attn_st_(alpha + c, al, w);
  }
}
