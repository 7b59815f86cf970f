/*
 * Vector exp and log, and softmax's soft-cap (contracts: attn_vexp_fn, attn_vlog_fn and
 * attn_softcap_fn in core/ukernels.h) over the exp and log of exp_tmpl.h, written once against the
 * vf_* shim. Include the path's shim, define ATTN_VEXP_NAME, ATTN_VLOG_NAME or ATTN_SOFTCAP_NAME,
 * then include.
 */
#include "core/ukernels.h"
#include "simd/exp_tmpl.h"

#define ATTN_VMAP_(name, f)                               \
  void name(size_t n, const float *x, float *y) {         \
    for (size_t i = 0; i < n; i += ATTN_VL) {             \
      const size_t w = n - i < ATTN_VL ? n - i : ATTN_VL; \
      vf_store_w(y + i, f(vf_load_w(x + i, w)), w);       \
    }                                                     \
  }
#ifdef ATTN_VEXP_NAME
ATTN_VMAP_(ATTN_VEXP_NAME, attn_vexp_)
#endif
#ifdef ATTN_VLOG_NAME
ATTN_VMAP_(ATTN_VLOG_NAME, attn_vlog_)
#endif
#undef ATTN_VMAP_

#ifdef ATTN_SOFTCAP_NAME
void ATTN_SOFTCAP_NAME(size_t n, float *x, float c) {
  const vf k = vf_set1(2.0f / c), cv = vf_set1(c), lim = vf_set1(88.0f), one = vf_set1(1.0f), two = vf_set1(2.0f);
  for (size_t i = 0; i < n; i += ATTN_VL) {
    const size_t w = n - i < ATTN_VL ? n - i : ATTN_VL;
    const vf v = vf_load_w(x + i, w);
    const vmask fin = vf_eq(vf_sub(v, v), vf_zero()); /* x - x is 0 exactly when x is finite */
    const vf y = vf_select(fin, vf_max(vf_min(vf_mul(v, k), lim), vf_sub(vf_zero(), lim)), vf_zero());
    const vf t = vf_mul(cv, vf_sub(one, vf_div(two, vf_add(attn_vexp_(y), one))));
    vf_store_w(x + i, vf_select(fin, t, v), w);
  }
}
#endif
