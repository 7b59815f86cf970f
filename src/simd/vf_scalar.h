/* Vector shim, scalar path: a "vector" is one float. Same operations as vf_avx2.h / vf_neon.h. */
#ifndef ATTN_VF_SCALAR_H
#define ATTN_VF_SCALAR_H
#include <stdint.h>
#include <string.h>

#define ATTN_VL 1
typedef float vf;
typedef int vmask;

static inline vf vf_zero(void) { return 0.0f; }
static inline vf vf_set1(float x) { return x; }
static inline vf vf_load(const float *p) { return *p; }
static inline void vf_store(float *p, vf v) { *p = v; }
static inline vf vf_load_n(const float *p, size_t n) { return n ? *p : 0.0f; }
static inline void vf_store_n(float *p, vf v, size_t n) { if (n) *p = v; }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline vf vf_sub(vf a, vf b) { return a - b; }
static inline vf vf_mul(vf a, vf b) { return a * b; }
/* a * b + c; written unfused: the scalar path compiles without FMA flags. */
static inline vf vf_fma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vf_max(vf a, vf b) { return a > b ? a : b; }
static inline vf vf_min(vf a, vf b) { return a < b ? a : b; }
/* Round to nearest even for |x| < 2^22 (the 1.5 * 2^23 trick; exact in round-to-nearest mode). */
static inline vf vf_round(vf x) {
  const float big = 12582912.0f; /* IEEE rules forbid folding (x + big) - big to x */
  return (x + big) - big;
}
/* 2^n for integral n in [-126, 127]. */
static inline vf vf_pow2i(vf n) {
  const int32_t e = ((int32_t)n + 127) << 23;
  float r;
  memcpy(&r, &e, sizeof r);
  return r;
}
static inline vmask vf_lt(vf a, vf b) { return a < b; }
static inline vmask vf_ge(vf a, vf b) { return a >= b; }
static inline vmask vf_eq(vf a, vf b) { return a == b; }
static inline vf vf_select(vmask m, vf t, vf f) { return m ? t : f; }
/* Sum of the lanes. */
static inline float vf_hsum(vf a) { return a; }
#endif
