/* Merge of partial softmax results over disjoint key sets by their LSE (attn.h: attn_softmax_merge). */
#include <math.h>

#include "engine/blocked.h"

/* A row stride (rows of width floats) that attn_check_input / _output refused with st. */
static ATTN_COLD attn_status merge_stride(attn_status st, const char *name, size_t stride, size_t width, size_t rows) {
  if (st == ATTN_E_BAD_STRIDE) return attn_fail(st, "%s %zu < the row's %zu floats", name, stride, width);
  return attn_fail(st, "%s %zu: the span of %zu rows overflows", name, stride, rows);
}

static attn_status merge_validate(size_t rows, size_t dv, size_t parts, const float *const *o_parts, size_t o_stride,
                                  const float *const *lse_parts, size_t lse_stride, float *o, size_t out_stride,
                                  float *lse_out, size_t lse_out_stride) {
  if (!o_parts || !lse_parts || !o)
    return attn_fail_null("o_parts lse_parts o", (const void *[]){o_parts, lse_parts, o});
  if (!rows || !dv || !parts) return attn_fail(ATTN_E_ZERO_SIZE, "%s is 0", !rows ? "rows" : !dv ? "dv" : "parts");
  for (size_t c = 0; c < parts; c++)
    if (!o_parts[c] || !lse_parts[c])
      return attn_fail(ATTN_E_NULL_POINTER, "%s[%zu] is NULL", !o_parts[c] ? "o_parts" : "lse_parts", c);
  const attn_layout lo = {o_stride, 0}, lout = {out_stride, 0}, ll = {lse_stride, 0}, llo = {lse_out_stride, 0};
  size_t so, sout, sl, slo = 0;
  attn_status st;
  if ((st = attn_check_input(rows, 1, dv, lo, &so))) return merge_stride(st, "o_stride", o_stride, dv, rows);
  if ((st = attn_check_output(rows, 1, dv, lout, &sout))) return merge_stride(st, "out_stride", out_stride, dv, rows);
  if ((st = attn_check_input(rows, 1, 1, ll, &sl))) return merge_stride(st, "lse_stride", lse_stride, 1, rows);
  if (lse_out && (st = attn_check_output(rows, 1, 1, llo, &slo)))
    return merge_stride(st, "lse_out_stride", lse_out_stride, 1, rows);
  const size_t F = sizeof(float);
  for (size_t c = 0; c < parts; c++) {
    const int o_same = o == o_parts[c] && out_stride == o_stride;
    const int l_same = lse_out == lse_parts[c] && lse_out_stride == lse_stride;
    if (!o_same && attn_overlap(o, sout * F, o_parts[c], so * F))
      return attn_fail(ATTN_E_ALIASING, "o overlaps input o_parts[%zu] (other than as the same rows)", c);
    if (attn_overlap(o, sout * F, lse_parts[c], sl * F))
      return attn_fail(ATTN_E_ALIASING, "o overlaps input lse_parts[%zu]", c);
    if (lse_out && !l_same && attn_overlap(lse_out, slo * F, lse_parts[c], sl * F))
      return attn_fail(ATTN_E_ALIASING, "lse_out overlaps input lse_parts[%zu] (other than as the same rows)", c);
    if (lse_out && attn_overlap(lse_out, slo * F, o_parts[c], so * F))
      return attn_fail(ATTN_E_ALIASING, "lse_out overlaps input o_parts[%zu]", c);
  }
  if (lse_out && attn_overlap(lse_out, slo * F, o, sout * F))
    return attn_fail(ATTN_E_ALIASING, "lse_out overlaps output o");
  return ATTN_OK;
}

attn_status attn_softmax_merge(size_t rows, size_t dv, size_t parts, const float *const *o_parts, size_t o_stride,
                               const float *const *lse_parts, size_t lse_stride, float *o, size_t out_stride,
                               float *lse_out, size_t lse_out_stride) {
  attn_status st =
      merge_validate(rows, dv, parts, o_parts, o_stride, lse_parts, lse_stride, o, out_stride, lse_out, lse_out_stride);
  if (st) return st;
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
  /* The parts that are the output itself (in place; validation allowed only the exact same rows)
   * must be read before anything is written over them: their weights are summed into the first
   * term, which scales the row in place, and the other parts are added after it. */
  const float *self = NULL;
  for (size_t c = 0; c < parts; c++)
    if (o_parts[c] == o) self = o;
  /* Each row ends through the online-softmax score step's epilogue, with the row state (m, l) it
   * would hold after absorbing the parts: o is accumulated already normalised (weights w_c / sum w,
   * so no intermediate can overflow), hence l = 1 and m = M + log sum w; l = NaN for a NaN or +inf
   * part LSE, l = 0 when every part is empty. */
  float rs[3];
  for (size_t r = 0; r < rows; r++) {
    float *orow = o + r * out_stride;
    float mx = -INFINITY;
    int bad = 0;
    for (size_t c = 0; c < parts; c++) {
      const float lc = lse_parts[c][r * lse_stride];
      bad |= !(lc < INFINITY);
      mx = fmaxf(mx, lc);
    }
    rs[0] = mx;
    rs[1] = bad ? NAN : mx == -INFINITY ? 0.0f : 1.0f;
    if (rs[1] == 1.0f) {
      float wsum = 0.0f, wself = 0.0f;
      int self_used = 0;
      for (size_t c = 0; c < parts; c++) {
        const float lc = lse_parts[c][r * lse_stride], w = expf(lc - mx);
        wsum += w;
        if (o_parts[c] == self && lc != -INFINITY) wself += w, self_used = 1;
      }
      /* orow (1 x dv) = w * part row (+ orow), on the active path's GEMM kernel. Parts with
       * lse = -inf are empty: their rows are never read. */
      int started = 0;
      if (self_used) {
        const float w = wself / wsum;
        uk->gemm(1, dv, 1, &w, 0, 0, orow, 0, orow, 0, NULL, 0);
        started = 1;
      }
      for (size_t c = 0; c < parts; c++) {
        const float lc = lse_parts[c][r * lse_stride];
        if (o_parts[c] == self || lc == -INFINITY) continue;
        const float w = expf(lc - mx) / wsum;
        uk->gemm(1, dv, 1, &w, 0, 0, o_parts[c] + r * o_stride, 0, orow, 0, NULL, started);
        started = 1;
      }
      rs[0] = mx + logf(wsum);
    }
    attn_softmax_score_step.finish(orow, rs, 1, 0, dv, orow, lse_out ? lse_out + r * lse_out_stride : NULL, NULL);
  }
  return ATTN_OK;
}
