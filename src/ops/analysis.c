/*
 * Analysis (attn.h, spec 7): the arguments of per-row statistics, shared by the streamed calls
 * (softmax, GAU and selective attention with *_stats) and the explicit ones (ops/matrix.c).
 */
#include "core/internal.h"

attn_status attn_row_stats_init(attn_row_stats *s, size_t heads, float *entropy, float *sparsity, float *count) {
  if (!s) return attn_fail(ATTN_E_NULL_POINTER, "stats is NULL");
  if (!heads) return attn_fail(ATTN_E_ZERO_SIZE, "heads is 0");
  *s = (attn_row_stats){entropy, sparsity, count, {heads, 1}};
  return ATTN_OK;
}

attn_status attn_row_stats_check(const attn_row_stats *s, size_t n_q, size_t heads, size_t *bytes) {
  if (!s) return attn_fail(ATTN_E_NULL_POINTER, "stats is NULL");
  if (!s->entropy && !s->sparsity && !s->count)
    return attn_fail(ATTN_E_NULL_POINTER, "stats.entropy, stats.sparsity and stats.count are all NULL");
  size_t span;
  const attn_status st = attn_check_output(n_q, heads, 1, s->layout, &span);
  if (st) return attn_fail_layout(st, "stats.layout", NULL, n_q, heads, 1, s->layout);
  *bytes = span * sizeof(float);
  const float *a[] = {s->entropy, s->sparsity, s->count};
  static const char *const names[] = {"entropy", "sparsity", "count"};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = i + 1; j < 3; j++)
      if (a[i] && a[j] && attn_overlap(a[i], *bytes, a[j], *bytes))
        return attn_fail(ATTN_E_ALIASING, "stats.%s overlaps output stats.%s", names[i], names[j]);
  return ATTN_OK;
}
