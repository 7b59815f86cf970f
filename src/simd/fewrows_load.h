/*
 * The few-rows kernels' row access (simd/fewrows_tmpl.h), written once against the vf_* shim:
 * their tile sizes, how far ahead they prefetch, and ATTN_VL elements of a K or V row of any type
 * as floats (fp32 loaded, half converted in registers, int8 scaled), and the dispatch on the
 * element type (ATTN_HKV_TYPED_). Included by the templates after the path's shim.
 */
#ifndef ATTN_SIMD_FEWROWS_LOAD_H
#define ATTN_SIMD_FEWROWS_LOAD_H

#include <string.h>

#include "core/internal.h"
#include "core/ukernels.h"
#include "simd/half.h"

#if ATTN_VREGS >= 32
#define ATTN_HKV_QR 4 /* scores: 4 keys x 4 rows of accumulators; P V: 4 rows x 4 vectors */
#define ATTN_HKV_NV 4
#else
#define ATTN_HKV_QR 2 /* 16 registers: 4 x 2 accumulators; 2 rows x 4 vectors */
#define ATTN_HKV_NV 4
#endif
#define ATTN_HKV_KR 4
/* P V of one query row of one head over fp32 rows: vectors a tile while whole tiles fit, a row
 * of 128 in one tile on the paths with 32 registers, read once a key rather than in two halves
 * (see the prefetch mode ATTN_HKV_PF_NONE_ below, which it makes possible). */
#if ATTN_VREGS >= 32
#define ATTN_HKV_NV1 8
#else
#define ATTN_HKV_NV1 ATTN_HKV_NV
#endif
#define ATTN_HKV_NV_MAX (ATTN_HKV_NV1 > ATTN_HKV_NV ? ATTN_HKV_NV1 : ATTN_HKV_NV)
/* Whether a call takes those tiles: one query row of one head over fp32 rows (es bytes an
 * element, nh heads, nq rows). The prefetch mode below counts on it. */
#define ATTN_HKV_ONE_FP32_(es, nh, nq) ((es) == sizeof(float) && (nh) == 1 && (nq) == 1)
/* Rows of a P V tile over several rows (PV_QR x NV accumulators): the rows' tiles each read the
 * value rows again (from L1 after the first), so more rows a tile cost fewer passes. */
#ifndef ATTN_HKV_PV_QR
#define ATTN_HKV_PV_QR ATTN_HKV_QR
#endif
/* P V over several heads goes ATTN_HKV_JC keys of a head (one query row) or ATTN_HKV_JC_ROWS (a
 * group of rows: GQA) before the next head. One row is memory-bound and wants short steps (see
 * above; 32 keys were slower, measured: 82996a3); a
 * group feeds each key row qr times the FMAs and takes a tile's accumulators through memory once
 * per call, so a path may take more keys there (src/avx512/few-rows.c). */
#ifndef ATTN_HKV_JC
#define ATTN_HKV_JC 8
#endif
#ifndef ATTN_HKV_JC_ROWS
#define ATTN_HKV_JC_ROWS 8
#endif
#ifndef ATTN_HKV_PF
#define ATTN_HKV_PF 8 /* fp32 rows ahead that each step prefetches (as cvt_tmpl.h) */
#endif
/* The same for several query rows into L2 (ATTN_HKV_PF_L2_ROWS_, AMD's cores): a GQA group's or
 * a speculative block's rows (2-16 a key head: more arithmetic between a row's loads) ran
 * 1.13-1.3x faster from memory 24 fp32 rows ahead than 8 (fp32, fp16 and int8; 16-64 within 5%
 * of 24), where one row ran 6-10% slower so (measured: b6c34a0). */
#define ATTN_HKV_PF_L2 24
/* fp32 rows ahead that ATTN_HKV_PF_L2_ROWS_ also brings into L1 on the paths with 32 registers:
 * fp32 GQA 32/8 and 4-token blocks 7-9% faster, 2 rows a key head 1-3%, from calls alternated
 * within one process; fp16 no faster and int8 3% slower, so they take none (measured: 058a71e). */
#define ATTN_HKV_PF_NEAR 1
/* The same columns ATTN_HKV_PF fp32 rows' bytes after p (rows ld elements apart; half rows: twice
 * as many rows ahead, the same distance in memory, so that as many lines are in flight): an
 * address computed as an integer, which may lie past the tensor (a prefetch never faults).
 * Half rows go twice as many rows ahead (measured: 924fee6). Where, by the kernel's mode pfm
 * (ATTN_HKV_AS_ binds it):
 * - ATTN_HKV_PF_L1_: into L1 (prefetcht0); half rows ATTN_HKV_PF_FAR bytes or more ahead (a
 *   token-major cache of several heads: 16 KiB at 8 heads of 64) take ATTN_HKV_PF_L2_, once per
 *   64-byte line: that far ahead, K and V together would fill most of an L1 (measured: 79bc357);
 * - ATTN_HKV_PF_L2_: into L2 only (prefetcht1), half and int8 rows at least ATTN_HKV_PF_FAR
 *   bytes ahead: every row where the table's few_pf asks (ATTN_FEW_PF_L2: AMD's cores, whose L1
 *   prefetches of a stream from memory held its demand misses back; one head of 64 fp16: 2 KiB
 *   ahead ran 1.1-1.4x slower than 8; measured: 67762bf);
 * - ATTN_HKV_PF_L2_ROWS_: the same with several query rows, ATTN_HKV_PF_L2 rows ahead (and fp32
 *   rows into L1 ATTN_HKV_PF_NEAR ahead, above);
 * - ATTN_HKV_PF_NONE_: none, with ATTN_FEW_PF_L2 for one head whose rows are at most 128 bytes
 *   apart (a single dense stream, fp16 at d = 64: the hardware's prefetchers alone ran it 1.35-1.5x
 *   faster; measured: 42e88e0), and for one row of one head over contiguous fp32 rows that one
 *   tile reads whole (at most ATTN_HKV_NV1 vectors: a head-major cache, each row read once in
 *   order): 8 heads of 64 or 128 over 16k keys from memory, one at a time, 1.07-1.16x, one head
 *   of 128 1.08-1.14x; rows of 256, read in two tiles, ran 1.27x slower so (measured: 70a2d80,
 *   alternated in one process). */
#define ATTN_HKV_PF_FAR 8192
enum { ATTN_HKV_PF_L1_, ATTN_HKV_PF_L2_, ATTN_HKV_PF_L2_ROWS_, ATTN_HKV_PF_NONE_ };
#define ATTN_HKV_PREFETCH_(p, ld)                                                                                      \
  do {                                                                                                                 \
    const size_t dist_ = (pfm == ATTN_HKV_PF_L2_ROWS_ ? ATTN_HKV_PF_L2 : ATTN_HKV_PF) * (ld) * sizeof(float);          \
    if (pfm == ATTN_HKV_PF_L1_)                                                                                        \
      __builtin_prefetch((const void *)((uintptr_t)(p) + dist_), 0, 3);                                                \
    else if (pfm != ATTN_HKV_PF_NONE_)                                                                                 \
      __builtin_prefetch(                                                                                              \
          (const void *)((uintptr_t)(p) + (es != sizeof(float) && dist_ < ATTN_HKV_PF_FAR ? ATTN_HKV_PF_FAR : dist_)), \
          0, 2);                                                                                                       \
    if (pfm == ATTN_HKV_PF_L2_ROWS_ && ATTN_VREGS >= 32 && es == sizeof(float))                                        \
      __builtin_prefetch((const void *)((uintptr_t)(p) + ATTN_HKV_PF_NEAR * (ld) * sizeof(float)), 0, 3);              \
  } while (0)
/* Whether the vector at byte offset `off` of a row starts a 64-byte line: half rows prefetch once
 * per line (two vectors on AVX-512, four on AVX2), fp32 rows once per vector, as before. */
#define ATTN_HKV_LINE_(off) (gs == ATTN_VL && (es == sizeof(float) || (off) % 64 == 0))
/* q8_0 rows prefetch per block instead, its last byte (and a row's first block its first byte
 * too): a row's blocks are not line-aligned (34 bytes), so offsets in the row say nothing of
 * lines (a token-major row of 8 heads of 128 missed one line in 17 by them), and one prefetch a
 * block covers every line of contiguous blocks (one per vector on AVX-512; two were slower). */
#define ATTN_HKV_BLOCK_PF_(row, p, ld)                                         \
  do {                                                                         \
    if (gs != ATTN_VL) {                                                       \
      const char *b_ = (row) + (p) / ATTN_Q8_0_VALUES * ATTN_Q8_0_BLOCK_BYTES; \
      if ((p) == 0) ATTN_HKV_PREFETCH_(b_, ld);                                \
      ATTN_HKV_PREFETCH_(b_ + ATTN_Q8_0_BLOCK_BYTES - 1, ld);                  \
    }                                                                          \
  } while (0)

/* ATTN_VL elements from element c of a row (its first byte at row) as floats: fp32 loaded, fp16 /
 * bf16 converted, int8 times the scale s (ATTN_I8: the row's; ATTN_Q8_0: the block's, from
 * attn_hkv_s_q8_; a vector never straddles two blocks: ATTN_VL divides 32). Each value one rounded product, as the
 * conversion kernels give it (cvt_tmpl.h). */
typedef vf attn_hkv_conv_fn_(const char *row, size_t c, vf s);
static inline vf attn_hkv_f32_(const char *row, size_t c, vf s) {
  (void)s;
  return vf_load((const float *)(const void *)row + c);
}
static inline vf attn_hkv_f16_(const char *row, size_t c, vf s) {
  (void)s;
  return vf_from_f16((const uint16_t *)(const void *)row + c);
}
static inline vf attn_hkv_bf16_(const char *row, size_t c, vf s) {
  (void)s;
  return vf_from_bf16((const uint16_t *)(const void *)row + c);
}
static inline vf attn_hkv_i8_(const char *row, size_t c, vf s) {
  return vf_mul(s, vf_from_i8((const int8_t *)(const void *)row + c));
}
static inline vf attn_hkv_q8_(const char *row, size_t c, vf s) {
  return vf_mul(s, vf_from_i8((const int8_t *)(const void *)(row + c / ATTN_Q8_0_VALUES * ATTN_Q8_0_BLOCK_BYTES +
                                                             sizeof(uint16_t)) +
                              c % ATTN_Q8_0_VALUES));
}

/* The scale that the conversion above takes for the group of gs elements from element c (a
 * multiple of gs) of a row: ATTN_I8's row scale s as it is (and nothing for the unscaled types;
 * gs = ATTN_VL), q8_0's block's fp16 scale broadcast (gs = 32), once per block rather than once
 * per vector. */
typedef vf attn_hkv_scale_fn_(const char *row, size_t c, vf s);
static inline vf attn_hkv_s_row_(const char *row, size_t c, vf s) {
  (void)row, (void)c;
  return s;
}
static inline vf attn_hkv_s_q8_(const char *row, size_t c, vf s) {
  (void)s;
  uint16_t h;
  memcpy(&h, row + c / ATTN_Q8_0_VALUES * ATTN_Q8_0_BLOCK_BYTES, sizeof h);
  return vf_set1_f16(h);
}

/* ATTN_VL elements of es bytes from element c of row, w of them valid (the rest read as 0, never
 * past the w-th; q8_0 rows have no tails). */
static inline __attribute__((always_inline)) vf attn_hkv_load_(attn_hkv_conv_fn_ *conv, size_t es, const char *row,
                                                               size_t c, size_t w, vf s) {
  if (w == ATTN_VL) return conv(row, c, s);
  _Alignas(64) char t[ATTN_VL * sizeof(float)] = {0};
  memcpy(t, row + c * es, w * es);
  return conv(t, 0, s);
}

/* The prefetch mode (ATTN_HKV_PF_*_ above) of a call over rows ld elements apart, w elements
 * read of each (es bytes an element, eu a stride unit, prefetches counted in rows of ldpf), nh
 * heads, nq query rows, under the policy pf. */
static inline int attn_hkv_pfm_(attn_few_pf pf, size_t es, size_t eu, size_t ldpf, size_t ld, size_t w, size_t nh,
                                size_t nq) {
  const int dense =
      nh == 1 && (ld * eu <= 128 || (ATTN_HKV_ONE_FP32_(es, nh, nq) && ld == w && w <= ATTN_HKV_NV1 * ATTN_VL));
  if (pf == ATTN_FEW_PF_L2) return nq > 1 ? ATTN_HKV_PF_L2_ROWS_ : dense ? ATTN_HKV_PF_NONE_ : ATTN_HKV_PF_L2_;
  return es != sizeof(float) && ATTN_HKV_PF * ldpf * sizeof(float) >= ATTN_HKV_PF_FAR ? ATTN_HKV_PF_L2_
                                                                                      : ATTN_HKV_PF_L1_;
}

/* call with the names the kernels take bound to one type's row access: its conversion and group
 * scale, gs elements a scale, es bytes an element, eu a stride unit, prefetches counted in ldpf =
 * ld_ lpn / lpd rows (half rows twice as many rows ahead as fp32, the same distance in memory;
 * int8 and q8_0 rows as many as half rows), lpn and lpd bound too (for a second stride); where
 * (pfm) from the caller's policy pf_, the rows' stride ld_ and width w_ in elements, the heads
 * nh_ and the query rows nq_; the rows' scales sc (ATTN_I8: hd's; NULL, a constant, for the
 * other types). */
#define ATTN_HKV_AS_(conv_, sfn_, gs_, es_, eu_, lpn_, lpd_, sc_, pf_, ld_, w_, nh_, nq_, call) \
  do {                                                                                          \
    attn_hkv_conv_fn_ *const conv = conv_;                                                      \
    attn_hkv_scale_fn_ *const sfn = sfn_;                                                       \
    const size_t gs = gs_, es = es_, eu = eu_, lpn = lpn_, lpd = lpd_, ldpf = (ld_)*lpn / lpd;  \
    const float *const sc = sc_;                                                                \
    const int pfm = attn_hkv_pfm_(pf_, es, eu, ldpf, ld_, w_, nh_, nq_);                        \
    (void)lpn, (void)lpd;                                                                       \
    call;                                                                                       \
  } while (0)
#define ATTN_HKV_TYPED_(type, pf, hd, ld, w, nq, call)                                                                 \
  do {                                                                                                                 \
    const size_t hkv_heads_ = (hd) ? (hd)->n : 1;                                                                      \
    if ((type) == ATTN_F16)                                                                                            \
      ATTN_HKV_AS_(attn_hkv_f16_, attn_hkv_s_row_, ATTN_VL, 2, 2, 1, 1, NULL, pf, (ld), (w), hkv_heads_, nq, call);    \
    else if ((type) == ATTN_BF16)                                                                                      \
      ATTN_HKV_AS_(attn_hkv_bf16_, attn_hkv_s_row_, ATTN_VL, 2, 2, 1, 1, NULL, pf, (ld), (w), hkv_heads_, nq, call);   \
    else if ((type) == ATTN_I8)                                                                                        \
      ATTN_HKV_AS_(attn_hkv_i8_, attn_hkv_s_row_, ATTN_VL, 1, 1, 1, 2, (hd)->sc, pf, (ld), (w), hkv_heads_, nq, call); \
    else if ((type) == ATTN_Q8_0)                                                                                      \
      ATTN_HKV_AS_(attn_hkv_q8_, attn_hkv_s_q8_, ATTN_Q8_0_VALUES, 1, ATTN_Q8_0_BLOCK_BYTES, ATTN_Q8_0_BLOCK_BYTES, 2, \
                   NULL, pf, (ld), (w), hkv_heads_, nq, call);                                                         \
    else                                                                                                               \
      ATTN_HKV_AS_(attn_hkv_f32_, attn_hkv_s_row_, ATTN_VL, 4, 4, 1, 1, NULL, pf, (ld), (w), hkv_heads_, nq, call);    \
  } while (0)

#endif
