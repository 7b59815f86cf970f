/*
 * Vector shim, AVX-512 path (16 floats, AVX-512F only), through SIMDe: native on x86 with
 * -mavx512f, emulated elsewhere. Comparisons give opmask registers, and partial loads and stores
 * are masked instructions (fast on AVX-512 hardware, unlike AVX's vmaskmovps).
 */
#ifndef ATTN_VF_AVX512_H
#define ATTN_VF_AVX512_H
#include <stdint.h>
#include <string.h>
#include <simde/x86/avx512.h>

/* SIMDe 0.7 (Debian 12) lacks a few AVX-512F operations (masked loads and stores, the float to
 * int32 conversion, the horizontal sum): where AVX-512F is native they are its intrinsics; where
 * it is emulated, portable equivalents. */
#if defined(SIMDE_X86_AVX512F_NATIVE)
#define ATTN_AVX512_NATIVE_ 1
#else
#define ATTN_AVX512_NATIVE_ 0
#endif

#define ATTN_VL    16
#define ATTN_VREGS 32 /* zmm0-31 */
#include "simd/half.h"
#include "simd/vu_x86.h"
ATTN_VF_X86(512)
typedef simde__mmask16 vmask;
/* First n (< 16) lanes from p, the rest 0; never reads past p[n-1] (masked lanes do not fault). */
static inline vf vf_load_n(const float *p, size_t n) {
#if ATTN_AVX512_NATIVE_
  return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
#else
  float t[16] = {0};
  memcpy(t, p, n * sizeof(float));
  return simde_mm512_loadu_ps(t);
#endif
}
static inline void vf_store_n(float *p, vf v, size_t n) {
#if ATTN_AVX512_NATIVE_
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
#else
  float t[16];
  simde_mm512_storeu_ps(t, v);
  memcpy(p, t, n * sizeof(float));
#endif
}
#define ATTN_VF_BINARY(op) \
  static inline vf vf_##op(vf a, vf b) { return simde_mm512_##op##_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return simde_mm512_fmadd_ps(a, b, c); }
static inline vf vf_div(vf a, vf b) { return simde_mm512_div_ps(a, b); }
/* exp's scaling (simd/exp_tmpl.h): vscalefps takes any n, so exp clamps none below (vf_exp_nclamp
 * is x itself), and its zero mask (x not below lo: NaN kept) clears the lanes below lo: y 2^n
 * there, +0 elsewhere, in two instructions. */
#define ATTN_VF_EXP_SCALE 1
static inline vf vf_exp_nclamp(vf x, vf lo) {
  (void)lo;
  return x;
}
static inline vf vf_exp_scale(vf y, vf n, vf nb, vf x, vf lo) {
  (void)nb;
  return simde_mm512_maskz_scalef_ps(simde_mm512_cmp_ps_mask(x, lo, SIMDE_CMP_NLT_UQ), y, n);
}
/* x = z 2^k with z in [0.69921875, 1.3984375) (OFF = 0x3f330000 shifts the binade's cut), for
 * positive normal x: z, and k as a float in *k; finite for 0 and subnormals (as vf_avx2.h's).
 * SIMDe 0.7 has neither the 512-bit arithmetic shift nor the int32 to float conversion: t's
 * sign bit flipped and shifted logically is k + 256 in [0, 511], and that integer is made a float
 * exactly through the mantissa trick: its bits plus those of 1.5 * 2^23, less 1.5 * 2^23 + 256. */
static inline vf vf_logsplit(vf x, vf *k) {
  const simde__m512i b = simde_mm512_castps_si512(x), t = simde_mm512_sub_epi32(b, simde_mm512_set1_epi32(0x3f330000));
  const simde__m512i u = simde_mm512_srli_epi32(simde_mm512_xor_si512(t, simde_mm512_set1_epi32(INT32_MIN)), 23);
  *k = simde_mm512_sub_ps(simde_mm512_castsi512_ps(simde_mm512_add_epi32(u, simde_mm512_set1_epi32(0x4B400000))),
                          simde_mm512_set1_ps(12582912.0f + 256.0f));
  return simde_mm512_castsi512_ps(
      simde_mm512_sub_epi32(b, simde_mm512_and_si512(t, simde_mm512_set1_epi32(-0x800000))));
}
ATTN_VF_X86_CMP(simde_mm512_cmp_ps_mask)
static inline vf vf_select(vmask m, vf t, vf f) { return simde_mm512_mask_blend_ps(m, f, t); }
/* Sum of the lanes. */
static inline float vf_hsum(vf a) {
#if ATTN_AVX512_NATIVE_
  return _mm512_reduce_add_ps(a);
#else
  float t[16];
  simde_mm512_storeu_ps(t, a);
  for (int w = 8; w >= 1; w /= 2) /* pairwise, as the native reduction */
    for (int i = 0; i < w; i++) t[i] += t[i + w];
  return t[0];
#endif
}
/* The lane sums of a, b, c and d into out[0..3] (few-rows scores: four keys at once): each
 * vector's halves added (AVX-512F's 256-bit extract), then AVX's two horizontal-add levels and one
 * add of the halves, instead of four reductions. */
static inline simde__m256 vf_fold256_(vf a) {
  return simde_mm256_add_ps(simde_mm512_castps512_ps256(a),
                            simde_mm256_castpd_ps(simde_mm512_extractf64x4_pd(simde_mm512_castps_pd(a), 1)));
}
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float *out) {
  const simde__m256 t = simde_mm256_hadd_ps(simde_mm256_hadd_ps(vf_fold256_(a), vf_fold256_(b)),
                                            simde_mm256_hadd_ps(vf_fold256_(c), vf_fold256_(d)));
  simde_mm_storeu_ps(out, simde_mm_add_ps(simde_mm256_castps256_ps128(t), simde_mm256_extractf128_ps(t, 1)));
}
/* Two 256-bit halves as one vector (AVX-512F: joined as doubles, not with DQ's insertf32x8). */
static inline vf vf_join_(simde__m256 lo, simde__m256 hi) {
  return simde_mm512_castpd_ps(
      simde_mm512_insertf64x4(simde_mm512_castpd256_pd512(simde_mm256_castps_pd(lo)), simde_mm256_castps_pd(hi), 1));
}
/* 16 fp16 / bf16 values (16-bit patterns) as floats, exactly (K/V storage): AVX-512F's
 * vcvtph2ps where native (SIMDe 0.7 has no 512-bit form: emulated, two 256-bit halves through its
 * F16C emulation), bf16 a 16-bit shift. */
#include <simde/x86/f16c.h>
static inline vf vf_from_f16(const uint16_t *p) {
  const simde__m256i h = simde_mm256_loadu_si256((const void *)p);
#if ATTN_AVX512_NATIVE_
  return _mm512_cvtph_ps(h);
#else
  /* SIMDe's conversion leaves a signalling NaN signalling: made quiet, as vcvtph2ps makes it. */
  simde__m256 v[2] = {simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(h)),
                      simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(h, 1))};
  for (int i = 0; i < 2; i++)
    v[i] = simde_mm256_or_ps(v[i], simde_mm256_and_ps(simde_mm256_cmp_ps(v[i], v[i], SIMDE_CMP_UNORD_Q),
                                                      simde_mm256_castsi256_ps(simde_mm256_set1_epi32(0x00400000))));
  return vf_join_(v[0], v[1]);
#endif
}
/* One fp16 value (a q8_0 block's scale) as a float in every lane: vcvtph2ps of its broadcast
 * where native, the bit conversion of simd/half.h otherwise (both make a NaN quiet). */
static inline vf vf_set1_f16(uint16_t h) {
#if ATTN_AVX512_NATIVE_
  return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
#else
  return simde_mm512_set1_ps(attn_f16_bits_to_f32(h));
#endif
}
/* 16 int8 values as floats (exact). */
static inline vf vf_from_i8(const int8_t *p) {
#if ATTN_AVX512_NATIVE_
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
#else /* (SIMDe has neither conversion) */
  float t[16];
  for (int i = 0; i < 16; i++) t[i] = (float)p[i];
  return simde_mm512_loadu_ps(t);
#endif
}
static inline vf vf_from_bf16(const uint16_t *p) {
  const simde__m256i h = simde_mm256_loadu_si256((const void *)p);
#if ATTN_AVX512_NATIVE_
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#else
  const simde__m256i lo = simde_mm256_cvtepu16_epi32(simde_mm256_castsi256_si128(h)),
                     hi = simde_mm256_cvtepu16_epi32(simde_mm256_extracti128_si256(h, 1));
  const simde__m256 a = simde_mm256_castsi256_ps(simde_mm256_slli_epi32(lo, 16)),
                    b = simde_mm256_castsi256_ps(simde_mm256_slli_epi32(hi, 16));
  return vf_join_(a, b);
#endif
}
/* 8 doubles rounded to floats: AVX-512F's vcvtpd2ps where native (SIMDe 0.7 has no 512-bit form:
 * emulated, its two 256-bit halves). */
static inline simde__m256 vf_cvtpd_ps_(simde__m512d d) {
#if ATTN_AVX512_NATIVE_
  return _mm512_cvtpd_ps(d);
#else
  return simde_mm256_set_m128(simde_mm256_cvtpd_ps(simde_mm512_extractf64x4_pd(d, 1)),
                              simde_mm256_cvtpd_ps(simde_mm512_castpd512_pd256(d)));
#endif
}
/* (float)(a[i] - c[i]) of 16 doubles: the difference in double, one rounding to float. */
static inline vf vf_from_f64_diff(const double *a, const double *c) {
  return vf_join_(vf_cvtpd_ps_(simde_mm512_sub_pd(simde_mm512_loadu_pd(a), simde_mm512_loadu_pd(c))),
                  vf_cvtpd_ps_(simde_mm512_sub_pd(simde_mm512_loadu_pd(a + 8), simde_mm512_loadu_pd(c + 8))));
}
/* Running sums of the lanes (lane i: a[0] + ... + a[i], a log-step tree: a plus itself shifted up
 * 1, 2, 4 and 8 lanes); [c's lane, a[0] .. a[14]] (a shifted up one lane, c's first lane entering;
 * c a broadcast); a's last lane in every lane. Selective attention's selection sums
 * (simd/select_tmpl.h). Lane shifts are permutes with zeroing masks (SIMDe 0.7 has no valignd). */
static inline simde__m512i vf_lanes_down_(int k) { /* lane i: i - k mod 16 (lanes below k are masked off) */
  /* A load from a table: GCC 12 builds the equivalent setr_epi32 through SIMDe lane by lane, with
   * a masked broadcast per lane, inside every loop that uses it (4.5x slower select_scan). */
  static const int32_t idx[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return simde_mm512_loadu_si512(idx + 16 - k);
}
static inline vf vf_prefix(vf a) {
  a = simde_mm512_add_ps(a, simde_mm512_maskz_permutexvar_ps(0xfffe, vf_lanes_down_(1), a));
  a = simde_mm512_add_ps(a, simde_mm512_maskz_permutexvar_ps(0xfffc, vf_lanes_down_(2), a));
  a = simde_mm512_add_ps(a, simde_mm512_maskz_permutexvar_ps(0xfff0, vf_lanes_down_(4), a));
  return simde_mm512_add_ps(a, simde_mm512_maskz_permutexvar_ps(0xff00, vf_lanes_down_(8), a));
}
static inline vf vf_shift_in(vf a, vf c) { return simde_mm512_mask_permutexvar_ps(c, 0xfffe, vf_lanes_down_(1), a); }
static inline vf vf_bcast_last(vf a) { return simde_mm512_permutexvar_ps(simde_mm512_set1_epi32(15), a); }
/* The 16 x 16 tile r[0 .. 16) transposed in place: lane v of r[u] becomes lane u of r[v]
 * (simd/transpose_tmpl.h): pairs of rows interleaved, fours gathered within each 128-bit
 * lane (AVX-512F: the pairs as doubles), then the lanes exchanged in two steps. */
static inline void vf_transpose(vf *r) {
  simde__m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = simde_mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = simde_mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) /* u[i + k]: rows i .. i + 3 of columns k, k + 4, k + 8, k + 12 */
    for (int h = 0; h < 2; h++) {
      const simde__m512d x = simde_mm512_castps_pd(t[i + h]), y = simde_mm512_castps_pd(t[i + h + 2]);
      u[i + 2 * h] = simde_mm512_castpd_ps(simde_mm512_unpacklo_pd(x, y));
      u[i + 2 * h + 1] = simde_mm512_castpd_ps(simde_mm512_unpackhi_pd(x, y));
    }
  for (int k = 0; k < 4; k++) {
    const simde__m512 v = simde_mm512_shuffle_f32x4(u[k], u[k + 4], 0x88),
                      w = simde_mm512_shuffle_f32x4(u[k], u[k + 4], 0xDD);
    const simde__m512 v2 = simde_mm512_shuffle_f32x4(u[k + 8], u[k + 12], 0x88),
                      w2 = simde_mm512_shuffle_f32x4(u[k + 8], u[k + 12], 0xDD);
    r[k] = simde_mm512_shuffle_f32x4(v, v2, 0x88);
    r[k + 8] = simde_mm512_shuffle_f32x4(v, v2, 0xDD);
    r[k + 4] = simde_mm512_shuffle_f32x4(w, w2, 0x88);
    r[k + 12] = simde_mm512_shuffle_f32x4(w, w2, 0xDD);
  }
}
/* 32-bit lanes as unsigned integers (simd/vu_x86.h). */
ATTN_VU_X86(512)
#define vu_srl(a, n) simde_mm512_srli_epi32(a, n)
/* a > b ? t : f per lane (a signed comparison: lanes below 2^31). */
static inline vu vu_gt_select(vu a, vu b, vu t, vu f) {
  return simde_mm512_mask_blend_epi32(simde_mm512_cmpgt_epi32_mask(a, b), f, t);
}
/* The low 16 bits of each lane to p[0 .. 16): AVX-512F's vpmovdw where native (SIMDe 0.7 has no
 * truncating form: emulated, through memory). */
static inline void vu_store_u16(uint16_t *p, vu a) {
#if ATTN_AVX512_NATIVE_
  _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(a));
#else
  uint32_t t[16];
  simde_mm512_storeu_si512(t, a);
  for (int i = 0; i < 16; i++) p[i] = (uint16_t)t[i];
#endif
}
/* AVX-512F's vcvtps2ph where native, rounding to nearest even by its immediate (not MXCSR's mode),
 * exceptions suppressed. */
#if ATTN_AVX512_NATIVE_
#define ATTN_VF_TO_F16 1
static inline void vf_to_f16(uint16_t *p, vf x) {
  _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif
#include "simd/vf_common.h"
#endif
