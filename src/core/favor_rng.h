/*
 * The portable random-matrix generator of FAVOR+ (Performer) features: the m x d matrix W that a
 * seed source gives (ATTN_FAVOR_SEED_CHI, ATTN_FAVOR_SEED_SQRT_D), exactly as include/attn.h
 * documents it above attn_linear_favor_matrix. Built in its own archive without FMA contraction
 * (src/meson.build), so W is the same bit for bit on every platform and path.
 */
#ifndef ATTN_CORE_FAVOR_RNG_H
#define ATTN_CORE_FAVOR_RNG_H

#include "core/internal.h"

/* Doubles of scratch attn_favor_generate needs for width d (d * d: one block of orthonormal rows);
 * 0 when that many bytes of doubles would overflow size_t. */
ATTN_INTERNAL size_t attn_favor_scratch_doubles(size_t d);

/* W (m x d floats, row-major, row stride d) of the documented generator for (seed, m, d):
 * sqrt_d_norms == 0 draws chi row norms (ATTN_FAVOR_SEED_CHI), != 0 makes every row norm sqrt(d)
 * (ATTN_FAVOR_SEED_SQRT_D). scratch: attn_favor_scratch_doubles(d) doubles, not overlapping w.
 * m >= 1 and d >= 1 (the caller validates). No allocation, no failure. */
ATTN_INTERNAL void attn_favor_generate(size_t m, size_t d, uint64_t seed, int sqrt_d_norms, float *w, double *scratch);

/* The generator's natural log, from + - * / and exact bit operations only (exposed for the
 * white-box test). x > 0 and finite (subnormals included); error below 1 ulp. */
ATTN_INTERNAL double attn_favor_log(double x);

#endif /* ATTN_CORE_FAVOR_RNG_H */
