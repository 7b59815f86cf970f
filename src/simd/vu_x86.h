/* The parts the x86 shims of W-bit vectors share (vf_avx2.h: W = 256, vf_avx512.h: 512).
 * ATTN_VU_X86: 32-bit lanes as unsigned integers (vf_common.h's fp16 / bf16 rounding); each shim
 * adds vu_srl, vu_gt_select and vu_store_u16, which differ by more than the width. */
#ifndef ATTN_SIMD_VU_X86_H
#define ATTN_SIMD_VU_X86_H

#include <math.h>

#define ATTN_VU_X86(W)                                                                  \
  typedef simde__m##W##i vu;                                                            \
  static inline vu vu_of(vf a) { return simde_mm##W##_castps_si##W(a); }                \
  static inline vf vf_of(vu a) { return simde_mm##W##_castsi##W##_ps(a); }              \
  static inline vu vu_set1(uint32_t x) { return simde_mm##W##_set1_epi32((int32_t)x); } \
  static inline vu vu_add(vu a, vu b) { return simde_mm##W##_add_epi32(a, b); }         \
  static inline vu vu_and(vu a, vu b) { return simde_mm##W##_and_si##W(a, b); }         \
  static inline vu vu_or(vu a, vu b) { return simde_mm##W##_or_si##W(a, b); }

/* The float vector of the x86 shims of W-bit vectors and its plain loads and stores (unaligned). */
#define ATTN_VF_X86(W)                                                           \
  typedef simde__m##W vf;                                                        \
  static inline vf vf_zero(void) { return simde_mm##W##_setzero_ps(); }          \
  static inline vf vf_set1(float x) { return simde_mm##W##_set1_ps(x); }         \
  static inline vf vf_load(const float *p) { return simde_mm##W##_loadu_ps(p); } \
  static inline void vf_store(float *p, vf v) { simde_mm##W##_storeu_ps(p, v); }

/* One lane of vf_fma on floats (a row's tail column): fmaf, one scalar instruction with the
 * shims' -mfma (SIMDe's _ss form inserts each operand into a zeroed vector first), where a whole
 * vector's costs two slots on AMD's 256-bit units (ATTN_VF_FMA1 for vf_common.h). */
#define ATTN_VF_FMA1 1
static inline float vf_fma1(float a, float b, float c) { return fmaf(a, b, c); }

/* The ordered comparisons, through the shim's compare (cmp(a, b, predicate) -> vmask). */
#define ATTN_VF_X86_CMP(cmp)                                                   \
  static inline vmask vf_lt(vf a, vf b) { return cmp(a, b, SIMDE_CMP_LT_OQ); } \
  static inline vmask vf_ge(vf a, vf b) { return cmp(a, b, SIMDE_CMP_GE_OQ); } \
  static inline vmask vf_eq(vf a, vf b) { return cmp(a, b, SIMDE_CMP_EQ_OQ); }

#endif
