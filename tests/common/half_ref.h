/*
 * The tests' own fp16 / bf16 conversions (K/V storage, attn_shape.kv_type), written from the
 * formats' definitions in double arithmetic and independently of the library's (src/simd/half.h
 * and the per-path kernels): rounding to the nearest even value (frexp / ldexp for fp16, integer
 * bit rounding for bf16), encoding a representable value as its bits, and decoding bits to their
 * exact value. Header-only: the white-box kernel test and the API suite both use it.
 */
#ifndef ATTN_TEST_HALF_REF_H
#define ATTN_TEST_HALF_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The value of fp16 bits: (-1)^s 2^(e-15) (1 + f/1024), subnormals f 2^-24, e = 31 inf / NaN. */
static inline double hr_f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, f = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return f ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp((double)f, -24);
  return s * ldexp((double)(1024 + f), e - 25);
}

/* x rounded to the nearest fp16 value, ties to even (NaN stays NaN; beyond the largest finite
 * value 65504 by half an ulp or more: infinity). */
static inline double hr_f16_round(double x) {
  if (isnan(x) || isinf(x) || x == 0.0) return x;
  int e;
  (void)frexp(x, &e);                                 /* |x| = m 2^e, m in [0.5, 1): 11 bits are 2^(e-11) apart */
  const int q = e - 11 < -24 ? -24 : e - 11;          /* subnormals: a fixed quantum 2^-24 */
  const double r = ldexp(nearbyint(ldexp(x, -q)), q); /* nearbyint: ties to even (default mode) */
  return fabs(r) > 65504.0 ? copysign(INFINITY, x) : r;
}

/* The bits of an fp16 value (x must be representable: hr_f16_round's result). NaN: 0x7e00. */
static inline uint16_t hr_f16_bits(double x) {
  const uint16_t s = signbit(x) ? 0x8000 : 0;
  if (isnan(x)) return 0x7e00;
  if (isinf(x)) return (uint16_t)(s | 0x7c00);
  const double a = fabs(x);
  if (a == 0.0) return s;
  if (a < ldexp(1.0, -14)) return (uint16_t)(s | (uint16_t)ldexp(a, 24)); /* subnormal */
  int e;
  const double m = frexp(a, &e); /* a = m 2^e: biased exponent e - 1 + 15 */
  return (uint16_t)(s | (uint16_t)((e + 14) << 10) | (uint16_t)(ldexp(m, 11) - 1024.0));
}

/* The value of bf16 bits: the float whose upper half they are. */
static inline double hr_bf16_value(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return (double)f;
}

/* A float rounded to bf16 (nearest, ties to even on the 16 dropped bits), as bits. NaN: 0x7fc0. */
static inline uint16_t hr_bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u); /* may carry into the exponent: the correct rounding up */
  return (uint16_t)(u >> 16);
}

#endif
