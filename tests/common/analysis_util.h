/*
 * Shared helpers of the analysis suites (tests/ops/check_analysis.c and
 * check_analysis_bad_input.c): a descriptor of any kind, float buffers, the three statistics
 * arrays of attn_matrix_stats in guarded memory.
 */
#ifndef ATTN_TEST_ANALYSIS_UTIL_H
#define ATTN_TEST_ANALYSIS_UTIL_H

#include <stddef.h>

#include <attn.h>

#include "test_util.h"

/* A descriptor of any kind (attn_shape first in each). */
typedef union an_desc {
  attn_shape shape;
  attn_softmax_desc sm;
  attn_linear_desc lin;
  attn_gau_desc gau;
  attn_selective_desc sel;
} an_desc;

/* What a size query's output holds before a rejected query (it must still hold it after). */
#define AN_UNTOUCHED ((size_t)12345)

/** n floats (malloc'd, asserted; at least one). */
float *an_floats(size_t n);

/* Stats arrays [n_q][H] in one layout kind (width 1), guarded and sentinel-filled. */
typedef struct an_stats {
  tu_tensor e, s, c;
  attn_row_stats rs;
} an_stats;

void an_stats_alloc(an_stats *st, tu_layout_kind kind, size_t n_q, size_t heads);
void an_stats_free(an_stats *st);

#endif /* ATTN_TEST_ANALYSIS_UTIL_H */
