/*
 * Vector shim, scalar path: plain C with no intrinsics and no ISA flags. A "vector" is a small
 * array of ATTN_VL floats operated on lane by lane, which compilers map onto the baseline SIMD
 * of the target (SSE2 on x86-64, Advanced SIMD on AArch64) or onto scalar code anywhere else.
 * Same operations as vf_avx2.h / vf_neon.h.
 */
#ifndef ATTN_VF_SCALAR_H
#define ATTN_VF_SCALAR_H
#include <stdint.h>
#include <string.h>

#define ATTN_VL 4
typedef struct { float f[ATTN_VL]; } vf;
typedef struct { int32_t m[ATTN_VL]; } vmask;

#define VF_LANES_(i) for (size_t i = 0; i < ATTN_VL; i++)

static inline vf vf_zero(void) { vf r; VF_LANES_(i) r.f[i] = 0.0f; return r; }
static inline vf vf_set1(float x) { vf r; VF_LANES_(i) r.f[i] = x; return r; }
static inline vf vf_load(const float *p) { vf r; memcpy(r.f, p, sizeof r.f); return r; }
static inline void vf_store(float *p, vf v) { memcpy(p, v.f, sizeof v.f); }
/* First n (< ATTN_VL) lanes from p, the rest 0; never reads past p[n-1]. */
static inline vf vf_load_n(const float *p, size_t n) { vf r = vf_zero(); memcpy(r.f, p, n * sizeof(float)); return r; }
static inline void vf_store_n(float *p, vf v, size_t n) { memcpy(p, v.f, n * sizeof(float)); }
static inline vf vf_add(vf a, vf b) { VF_LANES_(i) a.f[i] += b.f[i]; return a; }
static inline vf vf_sub(vf a, vf b) { VF_LANES_(i) a.f[i] -= b.f[i]; return a; }
static inline vf vf_mul(vf a, vf b) { VF_LANES_(i) a.f[i] *= b.f[i]; return a; }
/* a * b + c (fused or not, as the compiler's default contraction decides) */
static inline vf vf_fma(vf a, vf b, vf c) { VF_LANES_(i) c.f[i] += a.f[i] * b.f[i]; return c; }
static inline vf vf_max(vf a, vf b) { VF_LANES_(i) a.f[i] = a.f[i] > b.f[i] ? a.f[i] : b.f[i]; return a; }
static inline vf vf_min(vf a, vf b) { VF_LANES_(i) a.f[i] = a.f[i] < b.f[i] ? a.f[i] : b.f[i]; return a; }
/* Round to nearest even for |x| < 2^22 (the 1.5 * 2^23 trick; exact in round-to-nearest mode;
 * IEEE rules forbid folding (x + big) - big to x). */
static inline vf vf_round(vf x) {
  const float big = 12582912.0f;
  VF_LANES_(i) x.f[i] = (x.f[i] + big) - big;
  return x;
}
/* 2^n for integral n in [-126, 127]. */
static inline vf vf_pow2i(vf n) {
  int32_t e[ATTN_VL];
  VF_LANES_(i) e[i] = ((int32_t)n.f[i] + 127) << 23;
  memcpy(n.f, e, sizeof e);
  return n;
}
static inline vmask vf_lt(vf a, vf b) { vmask m; VF_LANES_(i) m.m[i] = a.f[i] < b.f[i]; return m; }
static inline vmask vf_ge(vf a, vf b) { vmask m; VF_LANES_(i) m.m[i] = a.f[i] >= b.f[i]; return m; }
static inline vmask vf_eq(vf a, vf b) { vmask m; VF_LANES_(i) m.m[i] = a.f[i] == b.f[i]; return m; }
static inline vf vf_select(vmask m, vf t, vf f) { VF_LANES_(i) t.f[i] = m.m[i] ? t.f[i] : f.f[i]; return t; }
/* Sum of the lanes. */
static inline float vf_hsum(vf a) { float s = 0.0f; VF_LANES_(i) s += a.f[i]; return s; }
#endif
