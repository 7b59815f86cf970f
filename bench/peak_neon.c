/* Peak probe for the NEON path: compiled alone (Arm only; -mfpu=neon-vfpv4 on 32-bit Arm). */
#include <simde/arm/neon.h>

#include "peak.h"

#define CHAIN(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECL(j) simde_float32x4_t acc##j = simde_vdupq_n_f32((float)(j));
#define STEP(j) acc##j = simde_vfmaq_f32(acc##j, a, b);
#define SUM(j) s = simde_vaddq_f32(s, acc##j);

float bench_peak_neon(size_t iters) {
  volatile float va = 0.9999999f, vb = 1e-7f;
  const simde_float32x4_t a = simde_vdupq_n_f32(va), b = simde_vdupq_n_f32(vb);
  CHAIN(DECL)
  for (size_t i = 0; i < iters; i++) {
    CHAIN(STEP)
  }
  simde_float32x4_t s = simde_vdupq_n_f32(0.0f);
  CHAIN(SUM)
  float out[4];
  simde_vst1q_f32(out, s);
  return out[0] + out[1] + out[2] + out[3];
}
