/*
 * Peak probe body, written once against a vf_* vector shim (src/simd/vf_<isa>.h), like the
 * library's micro-kernels: BENCH_PEAK_NCHAINS independent FMA chains,
 * unrolled so they stay in registers. Include the shim, define BENCH_PEAK_NAME and
 * BENCH_PEAK_NCHAINS (at most 16), then include this file. It also defines BENCH_PEAK_NAME##_flops,
 * the flops of one iteration (chains x ATTN_VL lanes x 2).
 */
#include "peak.h"

#define BENCH_PEAK_CAT2_(a, b) a##b
#define BENCH_PEAK_CAT_(a, b)  BENCH_PEAK_CAT2_(a, b)
const double BENCH_PEAK_CAT_(BENCH_PEAK_NAME, _flops) = BENCH_PEAK_NCHAINS * ATTN_VL * 2.0;

float BENCH_PEAK_NAME(size_t iters) {
  volatile float va = 0.9999999f, vb = 1e-7f; /* volatile: values the compiler cannot fold */
  const vf a = vf_set1(va), b = vf_set1(vb);
  vf acc[BENCH_PEAK_NCHAINS];
#pragma GCC unroll 16
  for (int j = 0; j < BENCH_PEAK_NCHAINS; j++) acc[j] = vf_set1((float)j);
  for (size_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
    for (int j = 0; j < BENCH_PEAK_NCHAINS; j++) acc[j] = vf_fma(acc[j], a, b);
  }
  vf s = vf_zero();
#pragma GCC unroll 16
  for (int j = 0; j < BENCH_PEAK_NCHAINS; j++) s = vf_add(s, acc[j]);
  return vf_hsum(s);
}
