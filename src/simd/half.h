/*
 * Exact scalar conversions of 16-bit floats to fp32, one value at a time (the vector kernels use
 * their shim's vf_from_f16 / vf_from_bf16, which give the same bits). Every fp16 and bf16 value is
 * a float, so these are exact: no rounding, whatever the path. Named *_bits_to_f32: attn_f16_to_f32
 * and attn_bf16_to_f32 are the public row converters (attn.h).
 */
#ifndef ATTN_SIMD_HALF_H
#define ATTN_SIMD_HALF_H
#include <stdint.h>
#include <string.h>

/* IEEE binary16 -> binary32 by bit manipulation (after F. Giesen): move exponent and fraction
 * into place and rebias the exponent (15 -> 127); the all-ones exponent (inf, NaN) takes the
 * all-ones one; zero and subnormals (exponent 0, value f 2^-24) are renormalised by a float
 * subtraction, exact: 2^-14 (1 + f / 1024) - 2^-14. A NaN keeps its sign and payload, shifted, and
 * is quiet (as F16C's and NEON's conversions make it). */
static inline float attn_f16_bits_to_f32(uint16_t h) {
  const uint32_t magic_bits = 113u << 23; /* 2^-14 */
  uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
  const uint32_t e = o & 0x0f800000u;
  o += 112u << 23;
  if (e == 0x0f800000u) {
    o += 112u << 23;
    if (h & 0x3ffu) o |= 0x00400000u;
  } else if (e == 0) {
    float f, magic;
    o += 1u << 23;
    memcpy(&f, &o, sizeof f);
    memcpy(&magic, &magic_bits, sizeof magic);
    f -= magic;
    memcpy(&o, &f, sizeof o);
  }
  o |= (uint32_t)(h & 0x8000u) << 16;
  float r;
  memcpy(&r, &o, sizeof r);
  return r;
}

/* bfloat16 -> binary32: the upper half of the float's bits. */
static inline float attn_bf16_bits_to_f32(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float r;
  memcpy(&r, &u, sizeof r);
  return r;
}

#endif
