/* Shared helpers of the analysis suites: see analysis_util.h. */
#include "analysis_util.h"

#include <stdlib.h>

float *an_floats(size_t n) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  ck_assert_ptr_nonnull(p);
  return p;
}

void an_stats_alloc(an_stats *st, tu_layout_kind kind, size_t n_q, size_t heads) {
  tu_tensor_alloc(&st->e, kind, n_q, heads, 1, 1);
  tu_tensor_alloc(&st->s, kind, n_q, heads, 1, 1);
  tu_tensor_alloc(&st->c, kind, n_q, heads, 1, 1);
  st->rs = (attn_row_stats){st->e.data, st->s.data, st->c.data, st->e.l};
}

void an_stats_free(an_stats *st) {
  tu_tensor_free(&st->e);
  tu_tensor_free(&st->s);
  tu_tensor_free(&st->c);
}
