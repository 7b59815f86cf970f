/*
 * What the white-box suites (tests/check_internal_*.c) share: the kernel table of the path
 * under test, one RNG seeded before the tests fork (every test sees the same sequence), and float
 * buffers between guard zones. They link the library's internal archive, so this file may include
 * src/core; the main, the RNG and the guard zones themselves come from harness.h.
 */
#ifndef ATTN_TEST_INTERNAL_UTIL_H
#define ATTN_TEST_INTERNAL_UTIL_H

#include <stddef.h>

#include "core/internal.h"
#include "harness.h"

/** exp's bound: relative error 2^-22 against double exp over [-87.33, 88.375]. In ulps of the
 *  result that is 2 ulp just above a power of two and up to 4 ulp just below the next one (an ulp
 *  is 2^-23 of the binade's lower end). log's bound and the kernels built on exp use it too. */
#define EXP_RTOL 2.384185791015625e-07 /* 2^-22 */

/** The micro-kernels of the path under test (set by ti_suite). */
extern const struct attn_ukernels *uk;
/** Seeded by ti_suite, before Check forks. */
extern tu_rng rng;

/** Uniform in [-1, 1) from rng. */
float frand(void);
/** n floats between guard zones (harness.h), filled with the sentinel. */
float *galloc(size_t n);
/** Asserts the guard zones of a galloc buffer intact, then frees it. */
void gcheck_free(float *p);
/** Points uk at the active path's table and seeds rng (tu_main's make_suite begins with it). */
void ti_setup(attn_isa active);

#endif /* ATTN_TEST_INTERNAL_UTIL_H */
