/*
 * Vector shim, scalar path: no intrinsics and no ISA flags. A "vector" is a GNU C vector of
 * ATTN_VL floats (gcc and clang), which compilers map onto the baseline SIMD of the target (SSE2
 * on x86-64, Advanced SIMD on AArch64) or onto scalar code anywhere else; element-wise operators
 * keep IEEE semantics (no contraction under -std=c11, no reassociation). Same operations as
 * vf_avx2.h / vf_neon.h. (A struct of four floats did the same, but gcc's scalar replacement of
 * the struct made the GEMM's code depend on what else its translation unit held: up to 1.5x.)
 */
#ifndef ATTN_VF_SCALAR_H
#define ATTN_VF_SCALAR_H
#include <stdint.h>
#include <string.h>

#define ATTN_VL    4
#define ATTN_VREGS 16 /* the fewest of the baselines: SSE2 xmm0-15 */
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vmask __attribute__((vector_size(16)));

static inline vf vf_zero(void) { return (vf){0.0f, 0.0f, 0.0f, 0.0f}; }
static inline vf vf_set1(float x) { return (vf){x, x, x, x}; }
static inline vf vf_load(const float *p) {
  vf r;
  memcpy(&r, p, sizeof r);
  return r;
}
static inline void vf_store(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* First n (< ATTN_VL) lanes from p, the rest 0; never reads past p[n-1]. */
static inline vf vf_load_n(const float *p, size_t n) {
  vf r = vf_zero();
  memcpy(&r, p, n * sizeof(float));
  return r;
}
static inline void vf_store_n(float *p, vf v, size_t n) { memcpy(p, &v, n * sizeof(float)); }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline vf vf_sub(vf a, vf b) { return a - b; }
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_div(vf a, vf b) { return a / b; }
/* a * b + c, not fused (as the struct version: ISO C mode does not contract) */
static inline vf vf_fma(vf a, vf b, vf c) { return c + a * b; }
static inline vf vf_select(vmask m, vf t, vf f) { return (vf)(((vmask)t & m) | ((vmask)f & ~m)); }
/* a > b ? a : b and a < b ? a : b per lane: b when either is NaN, as on x86 */
static inline vf vf_max(vf a, vf b) { return vf_select(a > b, a, b); }
static inline vf vf_min(vf a, vf b) { return vf_select(a < b, a, b); }
/* 2^n from nb = n + 1.5 * 2^23 (n integral in [-126, 127], held in nb's low mantissa bits):
 * nb's bits less those of 1.5 * 2^23 are n, so no conversion is needed. */
static inline vf vf_pow2b(vf nb) { return (vf)(((vmask)nb + (127 - 0x4B400000)) << 23); }
/* x = z 2^k with z in [0.69921875, 1.3984375) (OFF = 0x3f330000 shifts the binade's cut), for
 * positive normal x: z, and k as a float in *k; finite for 0 and subnormals. */
static inline vf vf_logsplit(vf x, vf *k) {
  const vmask b = (vmask)x, t = b - 0x3f330000;
  *k = __builtin_convertvector(t >> 23, vf);
  return (vf)(b - (t & -0x800000));
}
static inline vmask vf_lt(vf a, vf b) { return a < b; }
static inline vmask vf_ge(vf a, vf b) { return a >= b; }
static inline vmask vf_eq(vf a, vf b) { return a == b; }
/* Sum of the lanes, in lane order. */
static inline float vf_hsum(vf a) { return ((a[0] + a[1]) + a[2]) + a[3]; }
/* ATTN_VL fp16 / bf16 values (16-bit patterns) as floats, exactly (K/V storage): fp16 by the bit
 * manipulation of simd/half.h on 32-bit lanes (no ISA has a portable conversion), bf16 a shift. */
typedef uint32_t vu32_ __attribute__((vector_size(16)));
static inline vf vf_from_f16(const uint16_t *p) {
  const vu32_ h = {p[0], p[1], p[2], p[3]}, e_inf = {0x0f800000u, 0x0f800000u, 0x0f800000u, 0x0f800000u};
  const vu32_ em = (h & 0x7fffu) << 13, e = em & 0x0f800000u;
  vu32_ o = em + (112u << 23);
  o += (vu32_)(e == e_inf) & (112u << 23); /* inf, NaN: the all-ones exponent */
  o |= (vu32_)(em > e_inf) & 0x00400000u;  /* NaN: quiet, as F16C and NEON make it */
  const vu32_ zs = (vu32_)(e == 0u);       /* zero, subnormal: 2^-14 (1 + f / 1024) - 2^-14 */
  const vf sub = (vf)(o + (1u << 23)) - vf_set1(0x1p-14f);
  o = (zs & (vu32_)sub) | (~zs & o);
  return (vf)(o | ((h & 0x8000u) << 16));
}
/* The lane sums of a, b, c and d into out[0..3] (few-rows scores: four keys at once). */
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float *out) {
  out[0] = vf_hsum(a), out[1] = vf_hsum(b), out[2] = vf_hsum(c), out[3] = vf_hsum(d);
}
static inline vf vf_from_bf16(const uint16_t *p) {
  const vu32_ h = {p[0], p[1], p[2], p[3]};
  return (vf)(h << 16);
}
/* One fp16 value (a q8_0 block's scale) as a float in every lane (NaN made quiet). */
static inline vf vf_set1_f16(uint16_t h) {
  const uint16_t t[4] = {h, h, h, h};
  return vf_from_f16(t);
}
/* ATTN_VL int8 values as floats (exact). */
static inline vf vf_from_i8(const int8_t *p) { return (vf){(float)p[0], (float)p[1], (float)p[2], (float)p[3]}; }
/* 32-bit lanes as unsigned integers (vf_common.h's fp16 / bf16 rounding). */
typedef vu32_ vu;
static inline vu vu_of(vf a) { return (vu)a; }
static inline vf vf_of(vu a) { return (vf)a; }
static inline vu vu_set1(uint32_t x) { return (vu){x, x, x, x}; }
static inline vu vu_add(vu a, vu b) { return a + b; }
static inline vu vu_and(vu a, vu b) { return a & b; }
static inline vu vu_or(vu a, vu b) { return a | b; }
#define vu_srl(a, n) ((a) >> (n))
/* a > b ? t : f per lane. */
static inline vu vu_gt_select(vu a, vu b, vu t, vu f) {
  const vu m = (vu)(a > b);
  return (t & m) | (f & ~m);
}
/* The low 16 bits of each lane to p[0 .. ATTN_VL). */
static inline void vu_store_u16(uint16_t *p, vu a) {
  for (int i = 0; i < ATTN_VL; i++) p[i] = (uint16_t)a[i];
}
/* (float)(a[i] - c[i]) of ATTN_VL doubles: the difference in double, one rounding to float. */
static inline vf vf_from_f64_diff(const double *a, const double *c) {
  vf r;
  for (int i = 0; i < ATTN_VL; i++) r[i] = (float)(a[i] - c[i]);
  return r;
}
/* Running sums of the lanes (lane i: a[0] + ... + a[i], the log-step tree of the other shims: a
 * plus itself shifted up one lane, then two); [c[0], a[0] .. a[2]]; a's last lane in every lane.
 * Selective attention's selection sums (simd/select_tmpl.h). */
static inline vf vf_prefix(vf a) {
  a = a + (vf){0.0f, a[0], a[1], a[2]};
  return a + (vf){0.0f, 0.0f, a[0], a[1]};
}
static inline vf vf_shift_in(vf a, vf c) { return (vf){c[0], a[0], a[1], a[2]}; }
static inline vf vf_bcast_last(vf a) { return vf_set1(a[3]); }
/* The ATTN_VL x ATTN_VL tile r[0 .. VL) transposed in place: lane v of r[u] becomes lane u of r[v]
 * (simd/transpose_tmpl.h). */
static inline void vf_transpose(vf *r) {
  const vf a = r[0], b = r[1], c = r[2], d = r[3];
  r[0] = (vf){a[0], b[0], c[0], d[0]};
  r[1] = (vf){a[1], b[1], c[1], d[1]};
  r[2] = (vf){a[2], b[2], c[2], d[2]};
  r[3] = (vf){a[3], b[3], c[3], d[3]};
}
#include "simd/vf_common.h"
#endif
