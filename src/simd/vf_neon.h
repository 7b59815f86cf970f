/* Vector shim, NEON path (4 floats), through SIMDe: native on AArch64, emulated (SSE2) on x86. */
#ifndef ATTN_VF_NEON_H
#define ATTN_VF_NEON_H
#include <string.h>
#include <simde/arm/neon.h>

#define ATTN_VL    4
#define ATTN_VREGS 32 /* v0-v31 */
typedef simde_float32x4_t vf;
typedef simde_uint32x4_t vmask;

static inline vf vf_zero(void) { return simde_vdupq_n_f32(0.0f); }
static inline vf vf_set1(float x) { return simde_vdupq_n_f32(x); }
static inline vf vf_load(const float *p) { return simde_vld1q_f32(p); }
static inline void vf_store(float *p, vf v) { simde_vst1q_f32(p, v); }
/* First n (< 4) lanes from p, the rest 0; never reads past p[n-1]. */
static inline vf vf_load_n(const float *p, size_t n) {
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  memcpy(t, p, n * sizeof(float));
  return simde_vld1q_f32(t);
}
static inline void vf_store_n(float *p, vf v, size_t n) {
  float t[4];
  simde_vst1q_f32(t, v);
  memcpy(p, t, n * sizeof(float));
}
#define ATTN_VF_BINARY(op) \
  static inline vf vf_##op(vf a, vf b) { return simde_v##op##q_f32(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return simde_vfmaq_f32(c, a, b); }
/* Correctly rounded division: AArch64's own instruction where native; lane by lane elsewhere
 * (32-bit NEON has only a reciprocal estimate; SIMDe 0.7.4 wraps neither). */
static inline vf vf_div(vf a, vf b) {
#if defined(SIMDE_ARM_NEON_A64V8_NATIVE)
  return vdivq_f32(a, b);
#else
  float x[4], y[4];
  simde_vst1q_f32(x, a);
  simde_vst1q_f32(y, b);
  for (int i = 0; i < 4; i++) x[i] /= y[i];
  return simde_vld1q_f32(x);
#endif
}
/* 2^n from nb = n + 1.5 * 2^23 (n integral in [-126, 127]): nb's bits less those of 1.5 * 2^23
 * are n (no conversion). */
static inline vf vf_pow2b(vf nb) {
  const simde_int32x4_t e = simde_vaddq_s32(simde_vreinterpretq_s32_f32(nb), simde_vdupq_n_s32(127 - 0x4B400000));
  return simde_vreinterpretq_f32_s32(simde_vshlq_n_s32(e, 23));
}
/* x = z 2^k with z in [0.69921875, 1.3984375) (OFF = 0x3f330000 shifts the binade's cut), for
 * positive normal x: z, and k as a float in *k; finite for 0 and subnormals. */
static inline vf vf_logsplit(vf x, vf *k) {
  const simde_int32x4_t b = simde_vreinterpretq_s32_f32(x), t = simde_vsubq_s32(b, simde_vdupq_n_s32(0x3f330000));
  *k = simde_vcvtq_f32_s32(simde_vshrq_n_s32(t, 23));
  return simde_vreinterpretq_f32_s32(simde_vsubq_s32(b, simde_vandq_s32(t, simde_vdupq_n_s32(-0x800000))));
}
static inline vmask vf_lt(vf a, vf b) { return simde_vcltq_f32(a, b); }
static inline vmask vf_ge(vf a, vf b) { return simde_vcgeq_f32(a, b); }
static inline vmask vf_eq(vf a, vf b) { return simde_vceqq_f32(a, b); }
static inline vf vf_select(vmask m, vf t, vf f) { return simde_vbslq_f32(m, t, f); }
/* Sum of the lanes. */
static inline float vf_hsum(vf a) { return simde_vaddvq_f32(a); }
/* 4 fp16 / bf16 values (16-bit patterns) as floats, exactly (K/V storage): NEON's vcvt_f32_f16
 * (SIMDe's bit conversion where emulated), bf16 a 16-bit shift. A NaN is made quiet (SIMDe's
 * conversion leaves a signalling one signalling; the instruction's is quiet already). */
static inline vf vf_from_f16(const uint16_t *p) {
  const vf v = simde_vcvt_f32_f16(simde_vreinterpret_f16_u16(simde_vld1_u16(p)));
  const simde_uint32x4_t q = simde_vbicq_u32(simde_vdupq_n_u32(0x00400000u), simde_vceqq_f32(v, v));
  return simde_vreinterpretq_f32_u32(simde_vorrq_u32(simde_vreinterpretq_u32_f32(v), q));
}
/* The lane sums of a, b, c and d into out[0..3] (few-rows scores: four keys at once). */
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float *out) {
  simde_vst1q_f32(out, simde_vpaddq_f32(simde_vpaddq_f32(a, b), simde_vpaddq_f32(c, d)));
}
static inline vf vf_from_bf16(const uint16_t *p) {
  return simde_vreinterpretq_f32_u32(simde_vshlq_n_u32(simde_vmovl_u16(simde_vld1_u16(p)), 16));
}
/* One fp16 value (a q8_0 block's scale) as a float in every lane (NaN made quiet). */
static inline vf vf_set1_f16(uint16_t h) {
  const uint16_t t[4] = {h, h, h, h};
  return vf_from_f16(t);
}
/* 4 int8 values as floats (exact): widened to 16 and 32 bits. */
static inline vf vf_from_i8(const int8_t *p) {
  int32_t w;
  memcpy(&w, p, sizeof w);
  const simde_int16x8_t h = simde_vmovl_s8(simde_vreinterpret_s8_s32(simde_vdup_n_s32(w)));
  return simde_vcvtq_f32_s32(simde_vmovl_s16(simde_vget_low_s16(h)));
}
/* (float)(a[i] - c[i]) of 4 doubles: the difference in double, one rounding to float. */
static inline vf vf_from_f64_diff(const double *a, const double *c) {
  const simde_float32x2_t lo = simde_vcvt_f32_f64(simde_vsubq_f64(simde_vld1q_f64(a), simde_vld1q_f64(c)));
  const simde_float32x2_t hi = simde_vcvt_f32_f64(simde_vsubq_f64(simde_vld1q_f64(a + 2), simde_vld1q_f64(c + 2)));
  return simde_vcombine_f32(lo, hi);
}
/* Running sums of the lanes (lane i: a[0] + ... + a[i], a log-step tree: a plus itself shifted up
 * one lane, then two); [c's last lane, a[0] .. a[2]] (c a broadcast); a's last lane in every lane.
 * Selective attention's selection sums (simd/select_tmpl.h). */
static inline vf vf_prefix(vf a) {
  a = simde_vaddq_f32(a, simde_vextq_f32(vf_zero(), a, 3));
  return simde_vaddq_f32(a, simde_vextq_f32(vf_zero(), a, 2));
}
static inline vf vf_shift_in(vf a, vf c) { return simde_vextq_f32(c, a, 3); }
static inline vf vf_bcast_last(vf a) { return simde_vdupq_laneq_f32(a, 3); }
/* The 4 x 4 tile r[0 .. 4) transposed in place: lane v of r[u] becomes lane u of r[v]
 * (simd/transpose_tmpl.h): pairs of rows interleaved, then their halves joined. */
static inline void vf_transpose(vf *r) {
  const simde_float32x4x2_t ab = simde_vtrnq_f32(r[0], r[1]), cd = simde_vtrnq_f32(r[2], r[3]);
  r[0] = simde_vcombine_f32(simde_vget_low_f32(ab.val[0]), simde_vget_low_f32(cd.val[0]));
  r[1] = simde_vcombine_f32(simde_vget_low_f32(ab.val[1]), simde_vget_low_f32(cd.val[1]));
  r[2] = simde_vcombine_f32(simde_vget_high_f32(ab.val[0]), simde_vget_high_f32(cd.val[0]));
  r[3] = simde_vcombine_f32(simde_vget_high_f32(ab.val[1]), simde_vget_high_f32(cd.val[1]));
}
/* 32-bit lanes as unsigned integers (vf_common.h's fp16 / bf16 rounding). */
typedef simde_uint32x4_t vu;
static inline vu vu_of(vf a) { return simde_vreinterpretq_u32_f32(a); }
static inline vf vf_of(vu a) { return simde_vreinterpretq_f32_u32(a); }
static inline vu vu_set1(uint32_t x) { return simde_vdupq_n_u32(x); }
static inline vu vu_add(vu a, vu b) { return simde_vaddq_u32(a, b); }
static inline vu vu_and(vu a, vu b) { return simde_vandq_u32(a, b); }
static inline vu vu_or(vu a, vu b) { return simde_vorrq_u32(a, b); }
#define vu_srl(a, n) simde_vshrq_n_u32(a, n)
/* a > b ? t : f per lane. */
static inline vu vu_gt_select(vu a, vu b, vu t, vu f) { return simde_vbslq_u32(simde_vcgtq_u32(a, b), t, f); }
/* The low 16 bits of each lane to p[0 .. 4). */
static inline void vu_store_u16(uint16_t *p, vu a) { simde_vst1_u16(p, simde_vmovn_u32(a)); }
/* AArch64's fcvtn where native: IEEE rounding by FPCR's mode (to nearest in the default
 * environment), a NaN made quiet with its sign and payload's top bits, as F16C. */
#if defined(SIMDE_ARM_NEON_A64V8_NATIVE)
#define ATTN_VF_TO_F16 1
static inline void vf_to_f16(uint16_t *p, vf x) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(x))); }
#endif
#include "simd/vf_common.h"
#endif
