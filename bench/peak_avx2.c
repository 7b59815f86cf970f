/* Peak probe for the AVX2 path: compiled alone with -mavx2 -mfma (x86 only). */
#include <simde/x86/avx2.h>
#include <simde/x86/fma.h>

#include "peak.h"

#define CHAIN(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECL(j) simde__m256 acc##j = simde_mm256_set1_ps((float)(j));
#define STEP(j) acc##j = simde_mm256_fmadd_ps(acc##j, a, b);
#define SUM(j) s = simde_mm256_add_ps(s, acc##j);

float bench_peak_avx2(size_t iters) {
  volatile float va = 0.9999999f, vb = 1e-7f;
  const simde__m256 a = simde_mm256_set1_ps(va), b = simde_mm256_set1_ps(vb);
  CHAIN(DECL)
  for (size_t i = 0; i < iters; i++) {
    CHAIN(STEP)
  }
  simde__m256 s = simde_mm256_setzero_ps();
  CHAIN(SUM)
  float out[8];
  simde_mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
