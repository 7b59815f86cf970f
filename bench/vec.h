/*
 * vec.h: the baselines' vectors (baselines.c, baseline_delta.c), as the compiler's generic vector
 * type, so that the loops build for every target without intrinsics and keep their accumulators
 * in registers (gcc and clang do not keep a local array of a tile's accumulators in registers
 * across a loop over state rows). The widest vector the build targets: 64 bytes with AVX-512, 32
 * with AVX, else 16 (SSE2, NEON); wider than the target would change the calling convention
 * (-Wpsabi). A tile is BV_NV vectors: BV_TILE columns.
 */
#ifndef ATTN_BENCH_VEC_H
#define ATTN_BENCH_VEC_H

#include <string.h>

#if defined(__AVX512F__)
#define BV_BYTES 64
#elif defined(__AVX__)
#define BV_BYTES 32
#else
#define BV_BYTES 16
#endif
typedef float bv __attribute__((vector_size(BV_BYTES)));
enum { BV_VL = BV_BYTES / sizeof(float), BV_NV = 4, BV_TILE = BV_VL * BV_NV };

static inline bv bv_load(const float *p) {
  bv v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void bv_store(float *p, bv v) { memcpy(p, &v, sizeof v); }
/** v in every lane */
static inline bv bv_set1(float v) { return (bv){0} + v; }
/** n columns in whole tiles */
static inline size_t bv_tiles(size_t n) { return (n + BV_TILE - 1) / BV_TILE * BV_TILE; }

#endif
