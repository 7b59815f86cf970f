/*
 * The online-softmax block step's column and flat forms (simd/softmax_tmpl.h instantiates them as
 * the softmax_block kernel; simd/fewfused_tmpl.h takes the flat one inline), written once against
 * the vf_* shim. Included after the path's shim.
 */
#ifndef ATTN_SIMD_SOFTMAX_STEP_H
#define ATTN_SIMD_SOFTMAX_STEP_H

#include "core/ukernels.h"
#include "simd/exp_tmpl.h"

/* masked and with_stats are compile-time constants in each instantiation. When masked is 0, a -inf
 * entry is a logit from non-finite input: the max pass also tracks the column minimum, whose
 * mn - mn is NaN when some entry is -inf, and that NaN is added to l (chains beside the max's,
 * so they cost no time). A NaN entry needs no such help: its p is NaN, and so is l. (Where a
 * path's max or min passes a NaN over, as x86's do, a chain may drop it and a -inf before it;
 * the column's l is NaN all the same.) When 1, -inf marks a masked pair.
 * With stats, two more chains: sum p^2 and sum p (s - M'), the latter from exp's clamped
 * argument (0 for a masked or underflowing p, never 0 x -inf), two FMAs per element. */

/* The statistics' running sums of VL columns (or of one, lane 0): q2 = alpha^2 q2 + sq and
 * e = alpha (e - l_old (M' - m)) + se, the old terms dropped where alpha = 0 (m = -inf: nothing
 * before; or far below M'). */
static inline __attribute__((always_inline)) void attn_softmax_stats_(float *q2, float *e, vf lo, vf al, vf mo, vf mnew,
                                                                      vf sq, vf se, size_t w) {
  const vf old = vf_mul(al, vf_fma(lo, vf_sub(mo, mnew), vf_load_w(e, w)));
  vf_store_w(e, vf_add(vf_select(vf_eq(al, vf_zero()), vf_zero(), old), se), w);
  vf_store_w(q2, vf_fma(vf_mul(al, al), vf_load_w(q2, w), sq), w);
}

/* The max pass's independent chains per column vector (a power of two): one vf_max per key row
 * in a single chain waits on its latency (4 cycles on Intel cores) where the load and the
 * max issue in one; the chains' results are folded at the end. */
#define ATTN_SOFTMAX_CHAINS 4

static inline __attribute__((always_inline)) void attn_softmax_cols_(size_t nk, size_t nq, float *st, size_t ldst,
                                                                     float *m, float *l, float *alpha, float *stats,
                                                                     size_t lds, int masked, int with_stats) {
  const vf ninf = vf_set1(-__builtin_inff()), zero = vf_zero();
  for (size_t c = 0; c < nq; c += ATTN_VL) {
    const size_t w = nq - c < ATTN_VL ? nq - c : ATTN_VL;
    const vf mo = vf_load_w(m + c, w);
    vf mxs[ATTN_SOFTMAX_CHAINS], mns[ATTN_SOFTMAX_CHAINS];
    for (size_t u = 0; u < ATTN_SOFTMAX_CHAINS; u++) mxs[u] = ninf, mns[u] = vf_set1(__builtin_inff());
    size_t j = 0;
    for (; j + ATTN_SOFTMAX_CHAINS <= nk; j += ATTN_SOFTMAX_CHAINS)
#pragma GCC unroll 8
      for (size_t u = 0; u < ATTN_SOFTMAX_CHAINS; u++) {
        const vf s = vf_load_w(st + (j + u) * ldst + c, w);
        mxs[u] = vf_max(mxs[u], s);
        if (!masked) mns[u] = vf_min(mns[u], s);
      }
    for (; j < nk; j++) {
      const vf s = vf_load_w(st + j * ldst + c, w);
      mxs[0] = vf_max(mxs[0], s);
      if (!masked) mns[0] = vf_min(mns[0], s);
    }
#pragma GCC unroll 8
    for (size_t u = ATTN_SOFTMAX_CHAINS / 2; u >= 1; u /= 2)
#pragma GCC unroll 8
      for (size_t i = 0; i < u; i++) mxs[i] = vf_max(mxs[i], mxs[i + u]), mns[i] = vf_min(mns[i], mns[i + u]);
    const vf mx = mxs[0], mn = mns[0];
    const vf mnew = vf_max(mo, mx);
    const vf msafe = vf_select(vf_eq(mnew, ninf), zero, mnew); /* all masked so far: P = 0 */
    const vf al = attn_vexp_np_(vf_sub(mo, msafe));
    vf sum = masked ? zero : vf_sub(mn, mn); /* 0, or NaN for a -inf logit */
    vf sq = zero, se = zero;
    for (size_t j = 0; j < nk; j++) {
      float *sp = st + j * ldst + c;
      vf xc;
      const vf p = attn_vexp_np_xc_(vf_sub(vf_load_w(sp, w), msafe), &xc);
      vf_store_w(sp, p, w);
      sum = vf_add(sum, p);
      if (with_stats) sq = vf_fma(p, p, sq), se = vf_fma(p, xc, se);
    }
    const vf lo = vf_load_w(l + c, w);
    if (with_stats) attn_softmax_stats_(stats + c, stats + lds + c, lo, al, mo, mnew, sq, se, w);
    vf_store_w(l + c, vf_fma(lo, al, sum), w);
    vf_store_w(m + c, mnew, w);
    vf_store_w(alpha + c, al, w);
  }
}

/* A few contiguous columns (ldst == nq, nq dividing ATTN_VL: a decode step, one query row or GQA's
 * group of query heads): the block as one flat array, lane i of every vector in column i mod nq,
 * so that each vector holds ATTN_VL / nq keys instead of nq of its lanes. The columns' max and
 * sums fold the lanes of a column once per block. The same policy as the column path (a NaN entry
 * gives NaN in P and l; with masked == 0 a -inf entry gives l NaN through the running minimum,
 * mn - mn); the same values, the sums in another order. With a few lanes of 16 busy the column
 * path's step was a large share of a decode (measured: 35d00de). */
static inline __attribute__((always_inline)) void attn_softmax_flat_(size_t nk, size_t nq, float *st, float *m,
                                                                     float *l, float *alpha, float *stats, size_t lds,
                                                                     int masked, int with_stats) {
  const size_t n = nk * nq;
  const vf ninf = vf_set1(-__builtin_inff());
  vf mx = ninf, mn = vf_set1(__FLT_MAX__); /* finite: a lane no entry reaches gives mn - mn = 0 */
  size_t j = 0;
  for (; j + ATTN_VL <= n; j += ATTN_VL) {
    const vf x = vf_load(st + j);
    mx = vf_max(mx, x);
    if (!masked) mn = vf_min(mn, x);
  }
  _Alignas(64) float t[ATTN_VL], u[ATTN_VL];
  if (j < n) { /* the tail (whole keys: lane i still in column i mod nq), padded as the row path */
    for (size_t i = 0; i < ATTN_VL; i++) t[i] = j + i < n ? st[j + i] : -__builtin_inff();
    mx = vf_max(mx, vf_load(t));
    for (size_t i = n - j; !masked && i < ATTN_VL; i++) t[i] = __FLT_MAX__;
    if (!masked) mn = vf_min(mn, vf_load(t));
  }
  float mnew[ATTN_VL], msafe[ATTN_VL];
  vf_store(t, mx);
  for (size_t c = 0; c < nq; c++) {
    float b = t[c];
    for (size_t i = c + nq; i < ATTN_VL; i += nq) b = t[i] > b ? t[i] : b;
    mnew[c] = m[c] > b ? m[c] : b;
    msafe[c] = mnew[c] == -__builtin_inff() ? 0.0f : mnew[c]; /* all masked so far: P = 0 */
  }
  for (size_t i = 0; i < ATTN_VL; i++) t[i] = msafe[i % nq], u[i] = m[i % nq];
  const vf ms = vf_load(t), al = attn_vexp_np_(vf_sub(vf_load(u), ms));
  vf sum = masked ? vf_zero() : vf_sub(mn, mn); /* 0, or NaN lanes for a -inf logit */
  vf sq = vf_zero(), se = vf_zero(), xc;
  for (j = 0; j + ATTN_VL <= n; j += ATTN_VL) {
    const vf p = attn_vexp_np_xc_(vf_sub(vf_load(st + j), ms), &xc);
    vf_store(st + j, p);
    sum = vf_add(sum, p);
    if (with_stats) sq = vf_fma(p, p, sq), se = vf_fma(p, xc, se);
  }
  if (j < n) {
    const vf p = attn_vexp_np_xc_(vf_sub(vf_load_n(st + j, n - j), ms), &xc);
    vf_store_n(st + j, p, n - j);
    vf_store(t, p);
    for (size_t i = n - j; i < ATTN_VL; i++) t[i] = 0.0f; /* the padding's exp(0 - M) */
    const vf pt = vf_load(t);
    sum = vf_add(sum, pt);
    if (with_stats) sq = vf_fma(pt, pt, sq), se = vf_fma(pt, xc, se);
  }
  /* fold each column's lanes (lanes 0 .. nq - 1 of the results), then the column path's update */
  float fs[3][ATTN_VL];
  const vf parts[3] = {sum, sq, se};
  for (int k = 0; k < (with_stats ? 3 : 1); k++) {
    vf_store(t, parts[k]);
    for (size_t c = 0; c < ATTN_VL; c++) fs[k][c] = 0.0f;
    for (size_t c = 0; c < nq; c++) {
      float a = t[c];
      for (size_t i = c + nq; i < ATTN_VL; i += nq) a += t[i];
      fs[k][c] = a;
    }
  }
  const vf lo = vf_load_w(l, nq), mo = vf_load_w(m, nq), mn_ = vf_load_w(mnew, nq);
  if (with_stats) attn_softmax_stats_(stats, stats + lds, lo, al, mo, mn_, vf_load(fs[1]), vf_load(fs[2]), nq);
  vf_store_w(l, vf_fma(lo, al, vf_load(fs[0])), nq);
  vf_store_w(m, mn_, nq);
  vf_store_w(alpha, al, nq);
}

#endif
