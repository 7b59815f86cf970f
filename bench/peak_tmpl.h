/*
 * Peak probe body, written once against a vf_* vector shim (src/simd/vf_<isa>.h, or the one in
 * peak_avx512.c), like the library's micro-kernels: BENCH_PEAK_NCHAINS independent FMA chains,
 * unrolled so they stay in registers. Include the shim, define BENCH_PEAK_NAME and
 * BENCH_PEAK_NCHAINS (at most 16), then include this file.
 */
#include "peak.h"

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
