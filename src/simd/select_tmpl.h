/*
 * Selective attention's selection sums (contract: attn_select_scan_fn in core/ukernels.h), written
 * once against the vf_* shim: along each key's row of tokens, a vector of tokens at a time, the
 * relu'd selections' running sum in registers (vf_prefix) plus the carry of the earlier tokens,
 * shifted up one lane so that each token's F leaves out its own selection. Include the path's
 * shim, define ATTN_SELECT_SCAN_NAME, then include.
 */
#include <math.h>

#include "core/ukernels.h"

/* One vector of tokens from ti: relu (NaN fails the comparison and stays; -inf, a score from an
 * infinite input, becomes NaN first), tokens before first zeroed, the running sum from the carry
 * c; *e gets the tokens' F, the return is the new carry. */
static inline vf attn_sel_step_(vf v, vf c, size_t ti, size_t first, vf lanes, vf *e) {
  const vf zero = vf_zero();
  v = vf_select(vf_eq(v, vf_set1(-INFINITY)), vf_set1(NAN), v);
  v = vf_select(vf_ge(zero, v), zero, v);
  if (ti < first) v = vf_select(vf_ge(lanes, vf_set1((float)(first - ti))), v, zero);
  const vf s = vf_add(c, vf_prefix(v));
  *e = vf_shift_in(s, c);
  return vf_bcast_last(s);
}

/* y's w tokens from ti minus their F, e: x's own scores (raw, already loaded) for a group of one,
 * else every score of each token's group. */
static inline __attribute__((always_inline)) void attn_sel_sub_(float *yr, size_t ti, size_t step, size_t w, vf raw,
                                                                vf e) {
  if (step == 1) {
    vf_store_w(yr + ti, vf_sub(raw, e), w);
    return;
  }
  float t[ATTN_VL];
  vf_store(t, e);
  for (size_t i = 0; i < w; i++)
    for (size_t gi = 0; gi < step; gi++) yr[(ti + i) * step + gi] -= t[i];
}

/* One key's row (first: its first follower; c: the carry in, returned out), y's row yr or NULL;
 * inlined with step 1 as a constant for the contiguous case. */
static inline __attribute__((always_inline)) vf attn_sel_row_(size_t tn, const float *xr, size_t step, size_t first,
                                                              vf c, vf lanes, float *o, float *yr) {
  size_t ti = 0;
  vf e;
  for (; ti + ATTN_VL <= first; ti += ATTN_VL) { /* before the key's first follower: the carry */
    vf_store(o + ti, c);
    if (yr) attn_sel_sub_(yr, ti, step, ATTN_VL, step == 1 ? vf_load(yr + ti) : c, c);
  }
  for (; ti + ATTN_VL <= tn; ti += ATTN_VL) {
    const vf raw = vf_load_strided(xr + ti * step, step, ATTN_VL);
    c = attn_sel_step_(raw, c, ti, first, lanes, &e);
    vf_store(o + ti, e);
    if (yr) attn_sel_sub_(yr, ti, step, ATTN_VL, raw, e);
  }
  if (ti < tn) { /* the last tn - ti tokens: lanes beyond them load as 0, so the carry is the total */
    const vf raw = vf_load_strided(xr + ti * step, step, tn - ti);
    c = attn_sel_step_(raw, c, ti, first, lanes, &e);
    vf_store_n(o + ti, e, tn - ti);
    if (yr) attn_sel_sub_(yr, ti, step, tn - ti, raw, e);
  }
  return c;
}

void ATTN_SELECT_SCAN_NAME(size_t jn, size_t tn, const float *x, size_t ldx, size_t step, int64_t d0, int bos,
                           float *run, float *fz, float *y) {
  static const float lane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const vf lanes = vf_load(lane);
  for (size_t jj = 0; jj < jn; jj++) {
    const int64_t d = d0 + (int64_t)jj;
    const size_t first = bos && jj == 0 ? tn : d <= 0 ? 0 : (uint64_t)d < tn ? (size_t)d : tn;
    const float *xr = x + jj * ldx;
    float *o = fz + jj * tn, *yr = y ? y + jj * ldx : NULL;
    const vf c0 = vf_set1(run[jj]);
    const vf c = step == 1 ? attn_sel_row_(tn, xr, 1, first, c0, lanes, o, yr)
                           : attn_sel_row_(tn, xr, step, first, c0, lanes, o, yr);
    run[jj] = vf_first(c);
  }
}
