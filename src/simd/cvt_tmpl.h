/*
 * K/V conversion kernels (contracts: attn_f16_cvt_fn and attn_bf16_cvt_fn in core/ukernels.h),
 * written once against the vf_* shim's vf_from_f16 / vf_from_bf16 (ATTN_VL 16-bit values into a
 * vector of floats: F16C, AVX-512F or NEON's conversion, a bit manipulation on the scalar path; bf16
 * a 16-bit shift everywhere). A row's tail goes through the same conversion on a zero-padded copy,
 * so every value of a row is converted the same way. Each step prefetches the same columns 8 rows
 * ahead (an address computed as an integer: it may lie past the source, which a prefetch never
 * faults on): the engine converts a head's narrow slice of every token row, a pattern the hardware
 * prefetchers follow poorly (measured: b092b0b).
 * The other direction (contracts: attn_f32_f16_cvt_fn and attn_f32_bf16_cvt_fn) rounds one row of
 * floats to 16-bit patterns with vf_to_f16 / vf_to_bf16 (simd/vf_common.h, or the shim's own
 * instruction), its tail through a zero-padded copy as above.
 * int8 rows (ATTN_I8: a float scale per row; ATTN_Q8_0: 34-byte blocks of an fp16 scale and 32
 * values) go through vf_from_i8 and one vf_mul by the row's or block's scale.
 * Include the path's shim, define any of ATTN_F16_CVT_NAME, ATTN_BF16_CVT_NAME, ATTN_I8_CVT_NAME,
 * ATTN_Q8_CVT_NAME, ATTN_F32_F16_CVT_NAME and ATTN_F32_BF16_CVT_NAME, then include.
 */
#include "core/internal.h"
#include "core/ukernels.h"
#include "simd/half.h"

#define ATTN_CVT_(name, conv)                                                                \
  void name(size_t rows, size_t cols, const uint16_t *x, size_t ldx, float *y) {             \
    for (size_t r = 0; r < rows; r++, x += ldx, y += cols) {                                 \
      size_t c = 0;                                                                          \
      for (; c + 2 * ATTN_VL <= cols; c += 2 * ATTN_VL) {                                    \
        __builtin_prefetch((const void *)((uintptr_t)(x + c) + 8 * ldx * sizeof(uint16_t))); \
        const vf a = conv(x + c), b = conv(x + c + ATTN_VL);                                 \
        vf_store(y + c, a);                                                                  \
        vf_store(y + c + ATTN_VL, b);                                                        \
      }                                                                                      \
      for (; c < cols; c += ATTN_VL) {                                                       \
        const size_t w = cols - c < ATTN_VL ? cols - c : ATTN_VL;                            \
        uint16_t t[ATTN_VL] = {0};                                                           \
        const uint16_t *src = x + c;                                                         \
        if (w < ATTN_VL) memcpy(t, src, w * sizeof(uint16_t)), src = t;                      \
        vf_store_w(y + c, conv(src), w);                                                     \
      }                                                                                      \
    }                                                                                        \
  }
#ifdef ATTN_F16_CVT_NAME
ATTN_CVT_(ATTN_F16_CVT_NAME, vf_from_f16)
#endif
#ifdef ATTN_BF16_CVT_NAME
ATTN_CVT_(ATTN_BF16_CVT_NAME, vf_from_bf16)
#endif
#undef ATTN_CVT_

/* int8 rows: y = s_r * (float)x, one rounded product per value (the float the caller's own
 * dequantisation gives); a row's tail through a zero-padded copy. */
#ifdef ATTN_I8_CVT_NAME
void ATTN_I8_CVT_NAME(size_t rows, size_t cols, const int8_t *x, size_t ldx, const float *s, size_t lds, float *y) {
  for (size_t r = 0; r < rows; r++, x += ldx, y += cols) {
    for (size_t c = 0; c < cols; c += 64) /* every line of the row 16 rows ahead */
      __builtin_prefetch((const void *)((uintptr_t)(x + c) + 16 * ldx));
    const vf sc = vf_set1(s[r * lds]);
    size_t c = 0;
    for (; c + ATTN_VL <= cols; c += ATTN_VL) vf_store(y + c, vf_mul(sc, vf_from_i8(x + c)));
    if (c < cols) {
      int8_t t[ATTN_VL] = {0};
      memcpy(t, x + c, cols - c);
      vf_store_w(y + c, vf_mul(sc, vf_from_i8(t)), cols - c);
    }
  }
}
#endif
/* q8_0 rows of cols / 32 blocks (ldx in blocks of ATTN_Q8_0_BLOCK_BYTES): each block's fp16 scale
 * converted exactly, times its 32 values (ATTN_VL divides 32). */
#ifdef ATTN_Q8_CVT_NAME
void ATTN_Q8_CVT_NAME(size_t rows, size_t cols, const uint8_t *x, size_t ldx, float *y) {
  for (size_t r = 0; r < rows; r++, x += ldx * ATTN_Q8_0_BLOCK_BYTES, y += cols) {
    for (size_t c = 0; c < cols / ATTN_Q8_0_VALUES * ATTN_Q8_0_BLOCK_BYTES; c += 64) /* 16 rows ahead */
      __builtin_prefetch((const void *)((uintptr_t)(x + c) + 16 * ldx * ATTN_Q8_0_BLOCK_BYTES));
    for (size_t b = 0; b < cols / ATTN_Q8_0_VALUES; b++) {
      const uint8_t *blk = x + b * ATTN_Q8_0_BLOCK_BYTES;
      uint16_t h;
      memcpy(&h, blk, sizeof h);
      const vf sc = vf_set1(attn_f16_bits_to_f32(h));
      const int8_t *q = (const int8_t *)(const void *)(blk + sizeof h);
      for (size_t c = 0; c < ATTN_Q8_0_VALUES; c += ATTN_VL)
        vf_store(y + b * ATTN_Q8_0_VALUES + c, vf_mul(sc, vf_from_i8(q + c)));
    }
  }
}
#endif

#define ATTN_CVT_OUT_(name, conv)                         \
  void name(size_t n, const float *x, uint16_t *y) {      \
    size_t i = 0;                                         \
    for (; i + 2 * ATTN_VL <= n; i += 2 * ATTN_VL) {      \
      conv(y + i, vf_load(x + i));                        \
      conv(y + i + ATTN_VL, vf_load(x + i + ATTN_VL));    \
    }                                                     \
    for (; i < n; i += ATTN_VL) {                         \
      const size_t w = n - i < ATTN_VL ? n - i : ATTN_VL; \
      if (w == ATTN_VL) {                                 \
        conv(y + i, vf_load(x + i));                      \
      } else {                                            \
        uint16_t t[ATTN_VL];                              \
        conv(t, vf_load_n(x + i, w));                     \
        memcpy(y + i, t, w * sizeof(uint16_t));           \
      }                                                   \
    }                                                     \
  }
#ifdef ATTN_F32_F16_CVT_NAME
ATTN_CVT_OUT_(ATTN_F32_F16_CVT_NAME, vf_to_f16)
#endif
#ifdef ATTN_F32_BF16_CVT_NAME
ATTN_CVT_OUT_(ATTN_F32_BF16_CVT_NAME, vf_to_bf16)
#endif
#undef ATTN_CVT_OUT_
