/*
 * Peak probe body, written once against the library's vf_* vector shim (src/simd/vf_<isa>.h),
 * like the library's micro-kernels: BENCH_PEAK_CHAINS independent FMA chains, unrolled so they
 * stay in registers. Include the shim, define BENCH_PEAK_NAME, then include this file.
 */
#include "peak.h"

float BENCH_PEAK_NAME(size_t iters) {
  volatile float va = 0.9999999f, vb = 1e-7f; /* volatile: values the compiler cannot fold */
  const vf a = vf_set1(va), b = vf_set1(vb);
  vf acc[BENCH_PEAK_CHAINS];
#pragma GCC unroll 16
  for (int j = 0; j < BENCH_PEAK_CHAINS; j++) acc[j] = vf_set1((float)j);
  for (size_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
    for (int j = 0; j < BENCH_PEAK_CHAINS; j++) acc[j] = vf_fma(acc[j], a, b);
  }
  vf s = vf_zero();
#pragma GCC unroll 16
  for (int j = 0; j < BENCH_PEAK_CHAINS; j++) s = vf_add(s, acc[j]);
  return vf_hsum(s);
}
