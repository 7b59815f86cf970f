/* 32-bit lanes as unsigned integers (vf_common.h's fp16 / bf16 rounding), for the x86 shims of
 * W-bit vectors: ATTN_VU_X86(256) in vf_avx2.h, ATTN_VU_X86(512) in vf_avx512.h. Each shim adds
 * vu_srl, vu_gt_select and vu_store_u16, which differ by more than the width. */
#ifndef ATTN_SIMD_VU_X86_H
#define ATTN_SIMD_VU_X86_H

#define ATTN_VU_X86(W)                                                                  \
  typedef simde__m##W##i vu;                                                            \
  static inline vu vu_of(vf a) { return simde_mm##W##_castps_si##W(a); }                \
  static inline vf vf_of(vu a) { return simde_mm##W##_castsi##W##_ps(a); }              \
  static inline vu vu_set1(uint32_t x) { return simde_mm##W##_set1_epi32((int32_t)x); } \
  static inline vu vu_add(vu a, vu b) { return simde_mm##W##_add_epi32(a, b); }         \
  static inline vu vu_and(vu a, vu b) { return simde_mm##W##_and_si##W(a, b); }         \
  static inline vu vu_or(vu a, vu b) { return simde_mm##W##_or_si##W(a, b); }

#endif
