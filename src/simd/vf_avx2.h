/* Vector shim, AVX2 + FMA path (8 floats), through SIMDe: native on x86 (-mavx2 -mfma), emulated elsewhere. */
#ifndef ATTN_VF_AVX2_H
#define ATTN_VF_AVX2_H
#include <simde/x86/avx2.h>
#include <simde/x86/fma.h>
#include <simde/x86/f16c.h>

#define ATTN_VL    8
#define ATTN_VREGS 16 /* ymm0-15 */
#include "simd/half.h"
#include "simd/vu_x86.h"
ATTN_VF_X86(256)
typedef simde__m256 vmask;
static inline simde__m256i vf_tail_mask_(size_t n) {
  const simde__m256i idx = simde_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return simde_mm256_cmpgt_epi32(simde_mm256_set1_epi32((int)n), idx);
}
/* First n (< 8) lanes from p, the rest 0; never reads past p[n-1]. */
static inline vf vf_load_n(const float *p, size_t n) { return simde_mm256_maskload_ps(p, vf_tail_mask_(n)); }
/* Through a stack copy, not vmaskmovps: masked stores are microcoded on some AVX2 cores, slow
 * enough that the one-float tail of linear attention's W = dv + 1 columns dominated a decode step
 * (measured: fc0953e). */
static inline void vf_store_n(float *p, vf v, size_t n) {
  float t[8];
  simde_mm256_storeu_ps(t, v);
  for (size_t i = 0; i < n; i++) p[i] = t[i];
}
#define ATTN_VF_BINARY(op) \
  static inline vf vf_##op(vf a, vf b) { return simde_mm256_##op##_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return simde_mm256_fmadd_ps(a, b, c); }
static inline vf vf_div(vf a, vf b) { return simde_mm256_div_ps(a, b); }
/* 2^n from nb = n + 1.5 * 2^23 (n integral in [-126, 127]): nb's bits less those of 1.5 * 2^23
 * are n (no conversion). */
static inline vf vf_pow2b(vf nb) {
  const simde__m256i e = simde_mm256_add_epi32(simde_mm256_castps_si256(nb), simde_mm256_set1_epi32(127 - 0x4B400000));
  return simde_mm256_castsi256_ps(simde_mm256_slli_epi32(e, 23));
}
/* x = z 2^k with z in [0.69921875, 1.3984375) (OFF = 0x3f330000 shifts the binade's cut), for
 * positive normal x: z, and k as a float in *k; finite for 0 and subnormals. */
static inline vf vf_logsplit(vf x, vf *k) {
  const simde__m256i b = simde_mm256_castps_si256(x), t = simde_mm256_sub_epi32(b, simde_mm256_set1_epi32(0x3f330000));
  *k = simde_mm256_cvtepi32_ps(simde_mm256_srai_epi32(t, 23));
  return simde_mm256_castsi256_ps(
      simde_mm256_sub_epi32(b, simde_mm256_and_si256(t, simde_mm256_set1_epi32(-0x800000))));
}
ATTN_VF_X86_CMP(simde_mm256_cmp_ps)
static inline vf vf_select(vmask m, vf t, vf f) { return simde_mm256_blendv_ps(f, t, m); }
/* Sum of the lanes. */
static inline float vf_hsum(vf a) {
  simde__m128 s = simde_mm_add_ps(simde_mm256_castps256_ps128(a), simde_mm256_extractf128_ps(a, 1));
  s = simde_mm_add_ps(s, simde_mm_movehl_ps(s, s));
  s = simde_mm_add_ss(s, simde_mm_shuffle_ps(s, s, 1));
  return simde_mm_cvtss_f32(s);
}
/* The lane sums of a, b, c and d into out[0..3] (few-rows scores: four keys at once): two
 * horizontal-add levels and one add of the halves, instead of four reductions. */
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float *out) {
  const simde__m256 t = simde_mm256_hadd_ps(simde_mm256_hadd_ps(a, b), simde_mm256_hadd_ps(c, d));
  simde_mm_storeu_ps(out, simde_mm_add_ps(simde_mm256_castps256_ps128(t), simde_mm256_extractf128_ps(t, 1)));
}
/* 8 fp16 / bf16 values (16-bit patterns) as floats, exactly (K/V storage): F16C's vcvtph2ps
 * (the path needs F16C: -mf16c, and cpu.c checks it with AVX2), bf16 a 16-bit shift. Emulated,
 * SIMDe's conversion leaves a signalling NaN signalling: made quiet here, as vcvtph2ps makes it. */
static inline vf vf_from_f16(const uint16_t *p) {
  const simde__m256 v = simde_mm256_cvtph_ps(simde_mm_loadu_si128((const simde__m128i *)(const void *)p));
#if defined(SIMDE_X86_F16C_NATIVE)
  return v;
#else
  const simde__m256i q = simde_mm256_and_si256(simde_mm256_castps_si256(simde_mm256_cmp_ps(v, v, SIMDE_CMP_UNORD_Q)),
                                               simde_mm256_set1_epi32(0x00400000));
  return simde_mm256_or_ps(v, simde_mm256_castsi256_ps(q));
#endif
}
static inline vf vf_from_bf16(const uint16_t *p) {
  const simde__m256i w = simde_mm256_cvtepu16_epi32(simde_mm_loadu_si128((const simde__m128i *)(const void *)p));
  return simde_mm256_castsi256_ps(simde_mm256_slli_epi32(w, 16));
}
/* One fp16 value (a q8_0 block's scale) as a float in every lane: vcvtph2ps of its broadcast
 * where F16C is native, the bit conversion of simd/half.h otherwise (both make a NaN quiet). */
static inline vf vf_set1_f16(uint16_t h) {
#if defined(SIMDE_X86_F16C_NATIVE)
  return simde_mm256_cvtph_ps(simde_mm_set1_epi16((int16_t)h));
#else
  return simde_mm256_set1_ps(attn_f16_bits_to_f32(h));
#endif
}
/* 8 int8 values as floats (exact). */
static inline vf vf_from_i8(const int8_t *p) {
  return simde_mm256_cvtepi32_ps(
      simde_mm256_cvtepi8_epi32(simde_mm_loadl_epi64((const simde__m128i *)(const void *)p)));
}
/* (float)(a[i] - c[i]) of 8 doubles: the difference in double, one rounding to float. */
static inline vf vf_from_f64_diff(const double *a, const double *c) {
  const simde__m128 lo = simde_mm256_cvtpd_ps(simde_mm256_sub_pd(simde_mm256_loadu_pd(a), simde_mm256_loadu_pd(c)));
  const simde__m128 hi =
      simde_mm256_cvtpd_ps(simde_mm256_sub_pd(simde_mm256_loadu_pd(a + 4), simde_mm256_loadu_pd(c + 4)));
  return simde_mm256_set_m128(hi, lo);
}
/* Running sums of the lanes (lane i: a[0] + ... + a[i], a log-step tree: lanes shifted by one and
 * by two within each 128-bit half, then the low half's total added to the high half); [c's lane,
 * a[0] .. a[6]] (a shifted up one lane, c's first lane entering; c a broadcast); a's last lane in
 * every lane. Selective attention's selection sums (simd/select_tmpl.h). */
static inline vf vf_prefix(vf a) {
  a = simde_mm256_add_ps(a, simde_mm256_castsi256_ps(simde_mm256_slli_si256(simde_mm256_castps_si256(a), 4)));
  a = simde_mm256_add_ps(a, simde_mm256_castsi256_ps(simde_mm256_slli_si256(simde_mm256_castps_si256(a), 8)));
  const simde__m256 t = simde_mm256_permute_ps(a, 0xff);                 /* lane 3 of each half */
  return simde_mm256_add_ps(a, simde_mm256_permute2f128_ps(t, t, 0x08)); /* low half 0, high half low's */
}
static inline vf vf_shift_in(vf a, vf c) {
  const vf r = simde_mm256_permutevar8x32_ps(a, simde_mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6));
  return simde_mm256_blend_ps(r, c, 0x01);
}
static inline vf vf_bcast_last(vf a) { return simde_mm256_permutevar8x32_ps(a, simde_mm256_set1_epi32(7)); }
/* The 8 x 8 tile r[0 .. 8) transposed in place: lane v of r[u] becomes lane u of r[v]
 * (simd/transpose_tmpl.h): pairs of rows interleaved, fours gathered within each 128-bit
 * half, then the halves exchanged. */
static inline void vf_transpose(vf *r) {
  simde__m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = simde_mm256_unpacklo_ps(r[i], r[i + 1]);     /* a0 b0 a1 b1 | a4 b4 a5 b5 */
    t[i + 1] = simde_mm256_unpackhi_ps(r[i], r[i + 1]); /* a2 b2 a3 b3 | a6 b6 a7 b7 */
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = simde_mm256_shuffle_ps(t[i], t[i + 2], 0x44);     /* a0 b0 c0 d0 | a4 b4 c4 d4 */
    u[i + 1] = simde_mm256_shuffle_ps(t[i], t[i + 2], 0xEE); /* column 1 | 5 */
    u[i + 2] = simde_mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = simde_mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int k = 0; k < 4; k++) {
    r[k] = simde_mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = simde_mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}
/* 32-bit lanes as unsigned integers (simd/vu_x86.h). */
ATTN_VU_X86(256)
#define vu_srl(a, n) simde_mm256_srli_epi32(a, n)
/* a > b ? t : f per lane (a signed comparison: lanes below 2^31). */
static inline vu vu_gt_select(vu a, vu b, vu t, vu f) {
  return simde_mm256_blendv_epi8(f, t, simde_mm256_cmpgt_epi32(a, b));
}
/* The low 16 bits of each lane (values below 2^16: the unsigned saturation keeps them) to p[0 .. 8). */
static inline void vu_store_u16(uint16_t *p, vu a) {
  const simde__m256i w = simde_mm256_permute4x64_epi64(simde_mm256_packus_epi32(a, a), 0x08);
  simde_mm_storeu_si128((simde__m128i *)(void *)p, simde_mm256_castsi256_si128(w));
}
/* F16C's vcvtps2ph where native, rounding to nearest even by its immediate (not MXCSR's mode). */
#if defined(SIMDE_X86_F16C_NATIVE)
#define ATTN_VF_TO_F16 1
static inline void vf_to_f16(uint16_t *p, vf x) {
  simde_mm_storeu_si128((simde__m128i *)(void *)p, simde_mm256_cvtps_ph(x, SIMDE_MM_FROUND_TO_NEAREST_INT));
}
#endif
#include "simd/vf_common.h"
#endif
