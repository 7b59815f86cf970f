/*
 * Vector exp and log (contracts: attn_vexp_fn and attn_vlog_fn in core/ukernels.h) over the exp
 * and log of exp_tmpl.h, written once against the vf_* shim. Include the path's shim, define
 * ATTN_VEXP_NAME or ATTN_VLOG_NAME, then include.
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
