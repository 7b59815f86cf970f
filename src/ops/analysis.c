/*
 * Analysis (attn.h, spec 7): the arguments of per-row statistics, shared by the streamed calls
 * (softmax, GAU and selective attention with *_stats) and the explicit ones (ops/matrix.c); their
 * check, attn_row_stats_check, is core/validate.c's (the engine calls it too).
 */
#include "core/internal.h"

attn_status attn_row_stats_init(attn_row_stats *s, size_t heads, float *entropy, float *sparsity, float *count) {
  if (!s) return attn_fail(ATTN_E_NULL_POINTER, "stats is NULL");
  if (!heads) return attn_fail(ATTN_E_ZERO_SIZE, "heads is 0");
  *s = (attn_row_stats){entropy, sparsity, count, {heads, 1}};
  return ATTN_OK;
}
