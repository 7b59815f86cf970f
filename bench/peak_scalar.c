/* Peak probe for the scalar path: plain C, compiled with the build's baseline flags only. */
#include "peak.h"

const double bench_peak_scalar_flops = BENCH_PEAK_SCALAR_CHAINS * 4 * 2;

float bench_peak_scalar(size_t iters) {
  volatile float va = 0.9999999f, vb = 1e-7f;
  const float a = va, b = vb;
  float acc[BENCH_PEAK_SCALAR_CHAINS * 4];
  for (int j = 0; j < BENCH_PEAK_SCALAR_CHAINS * 4; j++) acc[j] = (float)j;
  for (size_t i = 0; i < iters; i++)
    for (int j = 0; j < BENCH_PEAK_SCALAR_CHAINS * 4; j++) acc[j] = acc[j] * a + b;
  float s = 0;
  for (int j = 0; j < BENCH_PEAK_SCALAR_CHAINS * 4; j++) s += acc[j];
  return s;
}
