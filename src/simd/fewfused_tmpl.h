/*
 * few_fused (contract: attn_few_fused_fn in core/ukernels.h): one query row of each head over K
 * and V rows in place (every K/V type, converted in registers as few_scores and few_pv convert
 * them), ATTN_FUSED_KEYS keys a step through few_scores' one-row tile, the flat online-softmax
 * step (simd/softmax_step.h) and few_pv's tile, with acc in registers across the steps where one
 * head's row of it fits (at most ATTN_HKV_NV1 vectors), else few_pv's tiles on acc in memory.
 * Part of simd/fewrows_tmpl.h (its tiles, row access and prefetch modes), which includes it
 * before its macros end.
 *
 * Why: a decode step without GQA read a head's K rows, then its V rows, block by block (96 keys):
 * the scores call, the step and P V each walked the block and paid their own calls, and the two
 * streams took turns in long runs. Steps of a few keys keep both streams in flight and acc in
 * registers. Against the blocks, alternated call by call in one process (Zen 4, one thread, 16k
 * keys from memory, head-major): 8 heads of 128 fp32 1.38-1.47x, of 64 1.41x, of 256 1.11x, one
 * head of 128 over 64k keys 1.14x, 2k keys 1.34x, fp16 1.12x; over a token-major cache the
 * 16-key steps of a group of heads ran 0.93-0.96x (fp32) and 0.88x (fp16), so it keeps its
 * blocks (measured: against ed57c7c).
 */
#include "simd/softmax_step.h"

#ifndef ATTN_FUSED_KEYS
#define ATTN_FUSED_KEYS 16 /* keys a step: the table's few_fused_keys */
#endif
/* One head's scores run ahead of its steps by up to this many keys (whole steps): the keys whose
 * K rows make about ATTN_FUSED_BYTES, so that K and V are read in runs of that many bytes
 * whatever the type. Scores stand alone per key: the same bits for any run. Over 32k keys of one
 * head of 64 from memory, fp16 rows ran 21.9 -> 25.1-25.4 GB/s with 32 keys ahead instead of 16,
 * where fp32 rows ran 26.3-27.0 with 16 and 21.4-24.1 with 32 (measured: against f9eff63). */
#define ATTN_FUSED_AHEAD 64
#define ATTN_FUSED_BYTES 4096

/* The scores of n keys of nh heads into st (head h's ATTN_FUSED_KEYS floats apart): few_scores'
 * call for one query row (hk, hq: the heads' strides of k and q; sc, sld, shd: ATTN_I8's K
 * scales), under the V rows' binding (ATTN_HKV_AS_) with K's stride and width. */
static inline __attribute__((always_inline)) void attn_fused_scores_(attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn,
                                                                     size_t gs, size_t es, size_t eu, size_t lpn,
                                                                     size_t lpd, attn_few_pf pf, const float *sc,
                                                                     size_t sld, size_t shd, size_t nh, size_t hk,
                                                                     size_t hq, size_t n, size_t d, const char *k,
                                                                     size_t ldk, const float *q, float *st) {
  const size_t ldpf = ldk * lpn / lpd;
  const int pfm = attn_hkv_pfm_(pf, es, eu, ldpf, ldk, d, nh, 1);
  attn_hkv_scores_(conv, sfn, gs, es, pfm, eu, ldpf, sc, sld, shd, nh, hk, hq, ATTN_FUSED_KEYS, n, 1, d, k, ldk, q, d,
                   st, 1);
}

/* One head whose row of acc fits ATTN_HKV_NV1 vectors: a[] (w[u] valid columns of vector u) in
 * registers across the steps. Each step's P V sums its keys into x[] from zero, in order, then a
 * = alpha a + x: few_pv's tile (whatever its width, each column's sums are the same), without
 * acc's store and load between the steps. The V rows' binding (ATTN_HKV_AS_) as arguments. */
static inline __attribute__((always_inline)) void attn_fused_regs_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t eu, size_t ldpf, size_t lpn,
    size_t lpd, attn_few_pf pf, size_t sld, size_t nk, size_t d, size_t dv, const char *k, size_t ldk, const char *v,
    size_t ldv, const float *ksc, const float *vsc, const float *q, float *st, float *rs, float *stats, float *acc,
    const int with_stats) {
  enum { NV = ATTN_HKV_NV1 };
  vf a[NV];
  size_t w[NV];
#pragma GCC unroll 8
  for (size_t u = 0; u < NV; u++) {
    w[u] = dv > u * ATTN_VL ? (dv - u * ATTN_VL < ATTN_VL ? dv - u * ATTN_VL : ATTN_VL) : 0;
    a[u] = w[u] ? vf_load_w(acc + u * ATTN_VL, w[u]) : vf_zero();
  }
  /* keys of scores ahead: whole steps, about ATTN_FUSED_BYTES of K rows (d es bytes each) */
  size_t ahead = (ATTN_FUSED_BYTES / (d * es) + ATTN_FUSED_KEYS / 2) / ATTN_FUSED_KEYS * ATTN_FUSED_KEYS;
  ahead = ahead < ATTN_FUSED_KEYS ? ATTN_FUSED_KEYS : ahead > ATTN_FUSED_AHEAD ? ATTN_FUSED_AHEAD : ahead;
  for (size_t j0 = 0; j0 < nk; j0 += ATTN_FUSED_KEYS) {
    const size_t n = nk - j0 < ATTN_FUSED_KEYS ? nk - j0 : ATTN_FUSED_KEYS, sa = j0 % ahead;
    if (sa == 0) {
      const size_t na = nk - j0 < ahead ? nk - j0 : ahead;
      attn_fused_scores_(conv, sfn, gs, es, eu, lpn, lpd, pf, ksc ? ksc + j0 * sld : NULL, sld, 0, 1, 0, 0, na, d,
                         k + j0 * ldk * eu, ldk, q, st);
    }
    float *sp = st + sa;
    attn_softmax_flat_(n, 1, sp, rs, rs + 1, rs + 2, stats, 1, 0, with_stats);
    vf x[NV];
#pragma GCC unroll 8
    for (size_t u = 0; u < NV; u++) x[u] = vf_zero();
    for (size_t j = 0; j < n; j++) {
      const char *vr = v + (j0 + j) * ldv * eu;
      const vf pb = vf_set1(sp[j]), vs = vsc ? vf_set1(vsc[(j0 + j) * sld]) : vf_zero();
      vf bs = vs;
#pragma GCC unroll 8
      for (size_t u = 0; u < NV; u++) {
        const size_t c = u * ATTN_VL;
        if (!w[u]) continue;
        if (u == 0 || c % gs == 0) { /* a new group's scale */
          ATTN_HKV_BLOCK_PF_(vr, c, ldpf);
          bs = sfn(vr, c - c % gs, vs);
        }
        if (ATTN_HKV_LINE_(c * es)) ATTN_HKV_PREFETCH_(vr + c * es, ldpf);
        x[u] = vf_fma(pb, attn_hkv_load_(conv, es, vr, c, w[u], bs), x[u]);
      }
    }
    const vf al = vf_set1(rs[2]);
#pragma GCC unroll 8
    for (size_t u = 0; u < NV; u++) a[u] = vf_fma(a[u], al, x[u]);
  }
#pragma GCC unroll 8
  for (size_t u = 0; u < NV; u++)
    if (w[u]) vf_store_w(acc + u * ATTN_VL, a[u], w[u]);
}

/* Several heads, or rows wider than ATTN_HKV_NV1 vectors: each step's scores of every head, their
 * steps, then few_pv's tiles head by head on acc in memory (the V rows' binding as arguments). */
static inline __attribute__((always_inline)) void attn_fused_heads_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t eu, size_t ldpf, size_t lpn,
    size_t lpd, attn_few_pf pf, const attn_few_heads *hd, size_t nk, size_t d, size_t dv, const char *k, size_t ldk,
    const char *v, size_t ldv, const float *ksc, const float *vsc, const float *q, float *st, float *rs, int stats,
    float *acc) {
  const size_t nh = hd ? hd->n : 1, ha = hd ? hd->a : 0, sld = hd ? hd->sld : 0, shd = hd ? hd->shd : 0;
  for (size_t j0 = 0; j0 < nk; j0 += ATTN_FUSED_KEYS) {
    const size_t n = nk - j0 < ATTN_FUSED_KEYS ? nk - j0 : ATTN_FUSED_KEYS;
    attn_fused_scores_(conv, sfn, gs, es, eu, lpn, lpd, pf, ksc ? ksc + j0 * sld : NULL, sld, shd, nh, hd ? hd->k : 0,
                       hd ? hd->q : 0, n, d, k + j0 * ldk * eu, ldk, q, st);
    for (size_t h = 0; h < nh; h++) {
      float *r = rs + h * ha, *sh = st + h * ATTN_FUSED_KEYS;
      if (stats)
        attn_softmax_flat_(n, 1, sh, r, r + 1, r + 2, r + 3, 1, 0, 1);
      else
        attn_softmax_flat_(n, 1, sh, r, r + 1, r + 2, NULL, 0, 0, 0);
    }
    for (size_t h = 0; h < nh; h++)
      attn_hkv_pv_(conv, sfn, gs, es, pfm, eu, ldpf, vsc ? vsc + h * shd + j0 * sld : NULL, sld, 1, dv, n,
                   st + h * ATTN_FUSED_KEYS, 1, v + (h * (hd ? hd->v : 0) + j0 * ldv) * eu, ldv, acc + h * ha, dv,
                   rs + h * ha + 2, ATTN_HKV_FEW, nh);
  }
}

static inline __attribute__((always_inline)) void attn_fused_(attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn,
                                                              size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
                                                              size_t lpn, size_t lpd, attn_few_pf pf,
                                                              const attn_few_heads *hd, size_t nk, size_t d, size_t dv,
                                                              const char *k, size_t ldk, const char *v, size_t ldv,
                                                              const float *ksc, const float *vsc, const float *q,
                                                              float *st, float *rs, int stats, float *acc) {
  if ((!hd || hd->n == 1) && dv <= ATTN_HKV_NV1 * ATTN_VL) {
    const size_t sld = hd ? hd->sld : 0;
    if (stats)
      attn_fused_regs_(conv, sfn, gs, es, pfm, eu, ldpf, lpn, lpd, pf, sld, nk, d, dv, k, ldk, v, ldv, ksc, vsc, q, st,
                       rs, rs + 3, acc, 1);
    else
      attn_fused_regs_(conv, sfn, gs, es, pfm, eu, ldpf, lpn, lpd, pf, sld, nk, d, dv, k, ldk, v, ldv, ksc, vsc, q, st,
                       rs, NULL, acc, 0);
    return;
  }
  attn_fused_heads_(conv, sfn, gs, es, pfm, eu, ldpf, lpn, lpd, pf, hd, nk, d, dv, k, ldk, v, ldv, ksc, vsc, q, st, rs,
                    stats, acc);
}

void ATTN_FEW_FUSED_NAME(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nk, size_t d, size_t dv,
                         const void *k, size_t ldk, const void *v, size_t ldv, const float *ksc, const float *vsc,
                         const float *q, float *st, float *rs, int stats, float *acc) {
  /* the V rows' binding; ATTN_I8's scales come as ksc and vsc, not through hd */
  const attn_few_heads one = {.n = 1}, *const hv = hd ? hd : &one;
  ATTN_HKV_TYPED_(type, pf, hv, ldv, dv, 1,
                  ((void)sc, attn_fused_(conv, sfn, gs, es, pfm, eu, ldpf, lpn, lpd, pf, hd, nk, d, dv, (const char *)k,
                                         ldk, (const char *)v, ldv, ksc, vsc, q, st, rs, stats, acc)));
}

#undef ATTN_FUSED_KEYS
#undef ATTN_FUSED_AHEAD
#undef ATTN_FUSED_BYTES
