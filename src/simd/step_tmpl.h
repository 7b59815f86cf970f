/*
 * Recurrent linear-attention step (contract: attn_linear_step_fn in core/ukernels.h), written
 * once against the vf_* shim: one pass over the state reads each element once for the output and,
 * when kf is given, writes it once updated. Include the path's vf_* shim, define ATTN_STEP_NAME,
 * then include.
 */
#include "core/ukernels.h"

enum { ATTN_STEP_NV = 4 }; /* column vectors per sweep down the state */

/* The sweep, instantiated twice (decay or not, a compile-time constant after inlining): a test of
 * g inside the inner loop made the plain step ~1.6x slower. */
static inline __attribute__((always_inline)) void attn_step_sweep_(size_t m, size_t w, const float *qf, const float *kf,
                                                                   const float *va, float a, float *s, size_t lds,
                                                                   float *out, const float *g, const int decay) {
  for (size_t c0 = 0; c0 < w; c0 += ATTN_STEP_NV * ATTN_VL) {
    size_t cnt[ATTN_STEP_NV];
    vf acc[ATTN_STEP_NV], vv[ATTN_STEP_NV];
    for (size_t v = 0; v < ATTN_STEP_NV; v++) {
      const size_t c = c0 + v * ATTN_VL;
      cnt[v] = c < w ? (w - c < ATTN_VL ? w - c : ATTN_VL) : 0;
      vv[v] = vf_load_w(va + c, cnt[v]);
      acc[v] = vf_mul(vf_set1(a), vv[v]);
    }
    for (size_t p = 0; p < m; p++) {
      float *row = s + p * lds + c0;
      const vf qp = vf_set1(qf[p]), kp = vf_set1(kf ? kf[p] : 0.0f), gp = vf_set1(decay ? g[p] : 1.0f);
#pragma GCC unroll 4
      for (size_t v = 0; v < ATTN_STEP_NV; v++) {
        if (!cnt[v]) break;
        float *sp = row + v * ATTN_VL;
        vf sv = vf_load_w(sp, cnt[v]);
        acc[v] = vf_fma(qp, sv, acc[v]);
        if (kf) {
          sv = vf_fma(kp, vv[v], decay ? vf_mul(gp, sv) : sv);
          vf_store_w(sp, sv, cnt[v]);
        }
      }
    }
    for (size_t v = 0; v < ATTN_STEP_NV && cnt[v]; v++) vf_store_w(out + c0 + v * ATTN_VL, acc[v], cnt[v]);
  }
}

void ATTN_STEP_NAME(size_t m, size_t w, const float *qf, const float *kf, const float *va, float a, float *s,
                    size_t lds, float *out, const float *g) {
  if (g)
    attn_step_sweep_(m, w, qf, kf, va, a, s, lds, out, g, 1);
  else
    attn_step_sweep_(m, w, qf, kf, va, a, s, lds, out, NULL, 0);
}
