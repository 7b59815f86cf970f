/*
 * Scores and P V for few query rows (contracts: attn_few_scores_fn and attn_few_pv_fn in
 * core/ukernels.h), written once against the vf_* shim. A decode step reads every key and value
 * row once for one to a few query rows: converting half rows into scratch first (cvt_tmpl.h)
 * stored and reloaded them, and left the fp16 decode little faster than fp32 where memory
 * bounds it. Here a row is read in place, fp16 / bf16 converted in registers
 * (vf_from_f16 / vf_from_bf16; int8 vf_from_i8 times the row's or q8_0 block's scale), and used at once:
 *   scores: each key row's vectors along d, FMAs with KR keys x QR query rows of accumulators,
 *           the sums of a row's four keys reduced together (vf_hsum4; with four rows, each
 *           key's four rows, adjacent in the scores);
 *   P V:    each value row's NV vectors along dv, FMAs with the QR rows' broadcast weights.
 * Several heads (attn_few_heads) go KR keys (scores) or ATTN_HKV_JC keys (P V) of every head at
 * a time: several streams in flight instead of one (measured: 82996a3). Tails (d or dv not a multiple of
 * ATTN_VL) convert a zero-padded copy, as cvt_tmpl.h does, and read only the valid elements.
 * Tiles fit the shim's register file (ATTN_VREGS).
 * Include the path's shim, define ATTN_FEW_SCORES_NAME and ATTN_FEW_PV_NAME, then include.
 */
#include "simd/fewrows_load.h"

/* One tile of scores: keys kr[0 .. KR) (the first kv valid; the others repeat a valid row and are
 * not stored) against rows q[0 .. qr) (qv valid, the same). */
static inline __attribute__((always_inline)) void attn_hkv_scores_tile_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t qr, size_t kv, size_t qv,
    size_t d, const char *const *kr, const vf *ks, size_t ldk, const float *const *qp, float *st, size_t ldst) {
  vf acc[ATTN_HKV_KR][ATTN_HKV_QR];
#pragma GCC unroll 4
  for (size_t i = 0; i < ATTN_HKV_KR; i++)
#pragma GCC unroll 4
    for (size_t r = 0; r < qr; r++) acc[i][r] = vf_zero();
  size_t p = 0;
  if (qr == 1 && es == sizeof(float)) {
    /* One row of fp32 keys: each key's row whole, one key after another. Along d across the 4
     * keys, four rows were in flight a line each, and the hardware's prefetchers followed them
     * badly: MHA decode, 8 heads of 128 over 16k keys from memory (AMD Zen 4), head-major 8.2-8.7
     * -> 7.3-7.8 ms, token-major 6.7-6.9 -> 6.0-6.3 (a scratch loop of each order: 1.4-1.8x);
     * half and int8 rows showed no clear change (measured: 9a25240). Each accumulator takes the
     * same products in the same order as below (the tail, below, last): the same bits. */
#pragma GCC unroll 4
    for (size_t i = 0; i < ATTN_HKV_KR; i++)
      for (p = 0; p + gs <= d; p += gs) {
        ATTN_HKV_BLOCK_PF_(kr[i], p, ldk);
        const vf bs = sfn(kr[i], p, ks[i]);
        for (size_t e = p; e < p + gs; e += ATTN_VL) {
          if (ATTN_HKV_LINE_(e * es)) ATTN_HKV_PREFETCH_(kr[i] + e * es, ldk);
          acc[i][0] = vf_fma(conv(kr[i], e, bs), vf_load(qp[0] + e), acc[i][0]);
        }
      }
  }
  for (; p + gs <= d; p += gs) { /* groups of gs elements (whole vectors) that share a scale */
    vf bs[ATTN_HKV_KR];
#pragma GCC unroll 4
    for (size_t i = 0; i < ATTN_HKV_KR; i++) {
      ATTN_HKV_BLOCK_PF_(kr[i], p, ldk);
      bs[i] = sfn(kr[i], p, ks[i]);
    }
    for (size_t e = p; e < p + gs; e += ATTN_VL) {
      vf kx[ATTN_HKV_KR];
#pragma GCC unroll 4
      for (size_t i = 0; i < ATTN_HKV_KR; i++) {
        if (ATTN_HKV_LINE_(e * es)) ATTN_HKV_PREFETCH_(kr[i] + e * es, ldk);
        kx[i] = conv(kr[i], e, bs[i]);
      }
#pragma GCC unroll 4
      for (size_t r = 0; r < qr; r++) {
        const vf qx = vf_load(qp[r] + e);
#pragma GCC unroll 4
        for (size_t i = 0; i < ATTN_HKV_KR; i++) acc[i][r] = vf_fma(kx[i], qx, acc[i][r]);
      }
    }
  }
  if (p < d) { /* the tail: zero-padded rows */
    const size_t w = d - p;
    vf kx[ATTN_HKV_KR];
#pragma GCC unroll 4
    for (size_t i = 0; i < ATTN_HKV_KR; i++) kx[i] = attn_hkv_load_(conv, es, kr[i], p, w, ks[i]);
#pragma GCC unroll 4
    for (size_t r = 0; r < qr; r++) {
      const vf qx = vf_load_n(qp[r] + p, w);
#pragma GCC unroll 4
      for (size_t i = 0; i < ATTN_HKV_KR; i++) acc[i][r] = vf_fma(kx[i], qx, acc[i][r]);
    }
  }
  _Static_assert(ATTN_HKV_KR == 4, "vf_hsum4 reduces four keys");
  /* One row (qv = 1) and four keys: the sums stored at once. Copied through sum[] (the compiler
   * makes the loop below a memcpy of kv floats, 8-byte loads across the 16-byte store), each tile
   * waited on store forwarding (measured: f9f200e). */
  if (ldst == 1 && kv == ATTN_HKV_KR) {
    vf_hsum4(acc[0][0], acc[1][0], acc[2][0], acc[3][0], st);
    return;
  }
#if ATTN_HKV_QR == 4
  /* Four rows (a GQA group of four, or four rows of a larger one): each key's four sums are
   * adjacent in st (rows are its columns), so reduced and stored at once. The same bits as a
   * row's four keys reduced together: vf_hsum4 reduces each of its inputs the same way. */
  if (qv == ATTN_HKV_QR) {
    for (size_t i = 0; i < kv; i++) vf_hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], st + i * ldst);
    return;
  }
#endif
  for (size_t r = 0; r < qv; r++) {
    float sum[4];
    vf_hsum4(acc[0][r], acc[1][r], acc[2][r], acc[3][r], sum);
    for (size_t i = 0; i < kv; i++) st[i * ldst + r] = sum[i];
  }
}

/* eu: bytes per stride unit (es, or a q8_0 block's); ldpf: the row stride the prefetches count
 * in (fp32 rows ahead, see ATTN_HKV_PREFETCH_); sc (ATTN_I8): each row's scale, ld sld, head hsd. */
static inline __attribute__((always_inline)) void attn_hkv_scores_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
    const float *sc, size_t sld, size_t shd, size_t nh, size_t hk, size_t hq, size_t hs, size_t nk, size_t nq, size_t d,
    const char *k0, size_t ldk, const float *q0, size_t ldq, float *st0, size_t ldst) {
  for (size_t j0 = 0; j0 < nk; j0 += ATTN_HKV_KR)
    for (size_t h = 0; h < nh; h++) {
      const char *k = k0 + h * hk * eu;
      const float *q = q0 + h * hq;
      float *st = st0 + h * hs;
      const size_t kv = nk - j0 < ATTN_HKV_KR ? nk - j0 : ATTN_HKV_KR;
      const char *kr[ATTN_HKV_KR];
      vf ks[ATTN_HKV_KR];
      for (size_t i = 0; i < ATTN_HKV_KR; i++) {
        const size_t j = j0 + (i < kv ? i : kv - 1);
        kr[i] = k + j * ldk * eu;
        ks[i] = sc ? vf_set1(sc[j * sld + h * shd]) : vf_zero();
      }
      for (size_t r0 = 0; r0 < nq; r0 += ATTN_HKV_QR) {
        const size_t qv = nq - r0 < ATTN_HKV_QR ? nq - r0 : ATTN_HKV_QR;
        const float *qp[ATTN_HKV_QR];
        for (size_t r = 0; r < ATTN_HKV_QR; r++) qp[r] = q + (r0 + (r < qv ? r : qv - 1)) * ldq;
        if (nq == 1) /* one query row (a decode step without GQA): a one-row tile */
          attn_hkv_scores_tile_(conv, sfn, gs, es, pfm, 1, kv, 1, d, kr, ks, ldpf, qp, st + j0 * ldst, ldst);
        else
          attn_hkv_scores_tile_(conv, sfn, gs, es, pfm, ATTN_HKV_QR, kv, qv, d, kr, ks, ldpf, qp, st + j0 * ldst + r0,
                                ldst);
      }
    }
}

/* One tile of P V: rows r0 .. r0 + qv (of qr) and columns c0 .. c0 + cw (of NV vectors; full:
 * all NV whole, a constant, so that the loop over keys keeps every accumulator in a register). */
static inline __attribute__((always_inline)) void attn_hkv_pv_tile_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
    const float *sc, size_t sld, size_t qr, size_t qv, size_t nv, int full, int pf, size_t cw, size_t nk,
    const float *pt, size_t ldp, const char *v, size_t c0, size_t ldv, float *acc, size_t lda, const float *alpha) {
  vf a[ATTN_HKV_PV_QR > ATTN_HKV_QR ? ATTN_HKV_PV_QR : ATTN_HKV_QR][ATTN_HKV_NV_MAX];
  size_t w[ATTN_HKV_NV_MAX];
#pragma GCC unroll 8
  for (size_t u = 0; u < nv; u++) {
    const size_t c = u * ATTN_VL;
    w[u] = full ? ATTN_VL : cw > c ? (cw - c < ATTN_VL ? cw - c : ATTN_VL) : 0;
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < qr; r++)
#pragma GCC unroll 8
    for (size_t u = 0; u < nv; u++) a[r][u] = vf_zero();
  for (size_t j = 0; j < nk; j++) {
    const char *vr = v + j * ldv * eu;
    const float *pr = pt + j * ldp;
    const vf vs = sc ? vf_set1(sc[j * sld]) : vf_zero();
    vf vx[ATTN_HKV_NV_MAX], bs = vs;
#pragma GCC unroll 8
    for (size_t u = 0; u < nv; u++) {
      const size_t c = c0 + u * ATTN_VL;
      if (w[u] && (u == 0 || c % gs == 0)) { /* a new group's scale */
        if (pf) ATTN_HKV_BLOCK_PF_(vr, c, ldpf);
        bs = sfn(vr, c - c % gs, vs);
      }
      if (pf && w[u] && ATTN_HKV_LINE_(c * es)) ATTN_HKV_PREFETCH_(vr + c * es, ldpf);
      vx[u] = full ? conv(vr, c, bs) : w[u] ? attn_hkv_load_(conv, es, vr, c, w[u], bs) : vf_zero();
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < qr; r++) {
      const vf pb = vf_set1(pr[r < qv ? r : qv - 1]);
#pragma GCC unroll 8
      for (size_t u = 0; u < nv; u++) a[r][u] = vf_fma(pb, vx[u], a[r][u]);
    }
  }
  for (size_t r = 0; r < qv; r++) {
    float *cr = acc + r * lda;
    const vf s = vf_set1(alpha ? alpha[r] : 1.0f);
#pragma GCC unroll 8
    for (size_t u = 0; u < nv; u++) {
      if (!w[u]) break;
      float *cp = cr + u * ATTN_VL;
      const vf old = vf_load_w(cp, w[u]);
      vf_store_w(cp, alpha ? vf_fma(old, s, a[r][u]) : vf_add(old, a[r][u]), w[u]);
    }
  }
}

/* P V of columns c0 .. c0 + cw of every row (acc: column c0's), rows in tiles of ATTN_HKV_QR
 * (groups of up to that many) or ATTN_HKV_PV_QR, the first of them prefetching. tiles (a
 * constant: the tiles a call site compiles): ATTN_HKV_ONE one row, ATTN_HKV_FEW one row or
 * ATTN_HKV_QR-row tiles, ATTN_HKV_MANY those or ATTN_HKV_PV_QR-row ones (more than one row). */
enum { ATTN_HKV_ONE, ATTN_HKV_FEW, ATTN_HKV_MANY };
static inline __attribute__((always_inline)) void attn_hkv_pv_cols_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
    const float *sc, size_t sld, size_t nq, size_t nv, size_t cw, size_t nk, const float *pt, size_t ldp, const char *v,
    size_t c0, size_t ldv, float *acc, size_t lda, const float *alpha, const int tiles) {
  /* up to two tiles of ATTN_HKV_QR rows, those (a 6-row tile and a 2-row one were slower at 8) */
  const size_t qr = tiles == ATTN_HKV_ONE                            ? 1
                    : tiles == ATTN_HKV_FEW || nq <= 2 * ATTN_HKV_QR ? ATTN_HKV_QR
                                                                     : ATTN_HKV_PV_QR;
  const int full = cw == nv * ATTN_VL;
  for (size_t r0 = 0; r0 < nq; r0 += qr) {
    const size_t qv = nq - r0 < qr ? nq - r0 : qr;
    const float *al = alpha ? alpha + r0 : NULL;
    const int pf = r0 == 0; /* the next row tiles find the rows in L1 */
#define ATTN_HKV_PV_(qr_c, full_c)                                                                               \
  attn_hkv_pv_tile_(conv, sfn, gs, es, pfm, eu, ldpf, sc, sld, qr_c, qr_c == 1 ? 1 : qv, nv, full_c, pf, cw, nk, \
                    pt + r0, ldp, v, c0, ldv, acc + r0 * lda, lda, al)
    if (tiles == ATTN_HKV_ONE || (tiles == ATTN_HKV_FEW && nq == 1)) full ? ATTN_HKV_PV_(1, 1) : ATTN_HKV_PV_(1, 0);
#if ATTN_HKV_PV_QR != ATTN_HKV_QR
    else if (tiles == ATTN_HKV_MANY && qr == ATTN_HKV_PV_QR)
      full ? ATTN_HKV_PV_(ATTN_HKV_PV_QR, 1) : ATTN_HKV_PV_(ATTN_HKV_PV_QR, 0);
#endif
    else
      full ? ATTN_HKV_PV_(ATTN_HKV_QR, 1) : ATTN_HKV_PV_(ATTN_HKV_QR, 0);
#undef ATTN_HKV_PV_
  }
}

/* P V of every column (of one of nh heads). One query row of one head over fp32 rows
 * (ATTN_HKV_ONE_FP32_) takes ATTN_HKV_NV1 vectors a tile while whole tiles of them fit, then
 * tiles of ATTN_HKV_NV: each column's sums are the same, in the same order, whatever the tile's
 * width. (Over a token-major cache, a group of heads, wider tiles ran 2-3% slower; measured:
 * 70a2d80.) */
static inline __attribute__((always_inline)) void attn_hkv_pv_(attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn,
                                                               size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
                                                               const float *sc, size_t sld, size_t nq, size_t dv,
                                                               size_t nk, const float *pt, size_t ldp, const char *v,
                                                               size_t ldv, float *acc, size_t lda, const float *alpha,
                                                               const int tiles, size_t nh) {
  enum { NC = ATTN_HKV_NV * ATTN_VL, NC1 = ATTN_HKV_NV1 * ATTN_VL };
  size_t c0 = 0;
#if ATTN_HKV_NV1 != ATTN_HKV_NV
  if (ATTN_HKV_ONE_FP32_(es, nh, nq))
    for (; dv - c0 >= NC1; c0 += NC1)
      attn_hkv_pv_cols_(conv, sfn, gs, es, pfm, eu, ldpf, sc, sld, nq, ATTN_HKV_NV1, NC1, nk, pt, ldp, v, c0, ldv,
                        acc + c0, lda, alpha, tiles);
#else
  (void)nh;
#endif
  for (; c0 < dv; c0 += NC)
    attn_hkv_pv_cols_(conv, sfn, gs, es, pfm, eu, ldpf, sc, sld, nq, ATTN_HKV_NV, dv - c0 < NC ? dv - c0 : NC, nk, pt,
                      ldp, v, c0, ldv, acc + c0, lda, alpha, tiles);
}

void ATTN_FEW_SCORES_NAME(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nk, size_t nq, size_t d,
                          const void *k, size_t ldk, const float *q, size_t ldq, float *st, size_t ldst) {
  const size_t nh = hd ? hd->n : 1, hk = hd ? hd->k : 0, hq = hd ? hd->q : 0, hs = hd ? hd->s : 0;
  const size_t sld = hd ? hd->sld : 0, shd = hd ? hd->shd : 0;
  ATTN_HKV_TYPED_(type, pf, hd, ldk, d, nq,
                  attn_hkv_scores_(conv, sfn, gs, es, pfm, eu, ldpf, sc, sld, shd, nh, hk, hq, hs, nk, nq, d, k, ldk, q,
                                   ldq, st, ldst));
}

/* P V of several heads, jc keys (a constant: the tile's key loop is compiled for it) of each head
 * before the next head. */
static inline __attribute__((always_inline)) void attn_hkv_pv_keys_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
    const float *sc, const attn_few_heads *hd, size_t nq, size_t dv, size_t nk, const float *pt, size_t ldp,
    const char *v, size_t ldv, float *acc, size_t lda, const size_t jc, const int tiles) {
  for (size_t j0 = 0; j0 < nk; j0 += jc) {
    const size_t jn = nk - j0 < jc ? nk - j0 : jc;
    for (size_t h = 0; h < hd->n; h++)
      attn_hkv_pv_(conv, sfn, gs, es, pfm, eu, ldpf, sc ? sc + h * hd->shd + j0 * hd->sld : NULL, hd->sld, nq, dv, jn,
                   pt + h * hd->p + j0 * ldp, ldp, v + (h * hd->v + j0 * ldv) * eu, ldv, acc + h * hd->a, lda, NULL,
                   tiles, hd->n);
  }
}

static inline __attribute__((always_inline)) void attn_hkv_pv_heads_(
    attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn, size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
    const float *sc, const attn_few_heads *hd, size_t nq, size_t dv, size_t nk, const float *pt, size_t ldp,
    const char *v, size_t ldv, float *acc, size_t lda, const float *alpha) {
  if (!hd) { /* heads in a group (hd), even one, add jc keys at a time: the same bits in any group */
    attn_hkv_pv_(conv, sfn, gs, es, pfm, eu, ldpf, NULL, 0, nq, dv, nk, pt, ldp, v, ldv, acc, lda, alpha, ATTN_HKV_FEW,
                 1);
    return;
  }
  for (size_t h = 0; h < hd->n && alpha; h++) /* scaled once, then every chunk adds */
    for (size_t r = 0; r < nq; r++) {
      const vf s = vf_set1(alpha[h * hd->al + r]);
      float *cr = acc + h * hd->a + r * lda;
      for (size_t c = 0; c < dv; c += ATTN_VL) {
        const size_t w = dv - c < ATTN_VL ? dv - c : ATTN_VL;
        vf_store_w(cr + c, vf_mul(vf_load_w(cr + c, w), s), w);
      }
    }
  if (nq == 1)
    attn_hkv_pv_keys_(conv, sfn, gs, es, pfm, eu, ldpf, sc, hd, nq, dv, nk, pt, ldp, v, ldv, acc, lda, ATTN_HKV_JC,
                      ATTN_HKV_ONE);
  else
    attn_hkv_pv_keys_(conv, sfn, gs, es, pfm, eu, ldpf, sc, hd, nq, dv, nk, pt, ldp, v, ldv, acc, lda, ATTN_HKV_JC_ROWS,
                      ATTN_HKV_MANY);
}

void ATTN_FEW_PV_NAME(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nq, size_t dv, size_t nk,
                      const float *pt, size_t ldp, const void *v, size_t ldv, float *acc, size_t lda,
                      const float *alpha) {
  ATTN_HKV_TYPED_(
      type, pf, hd, ldv, dv, nq,
      attn_hkv_pv_heads_(conv, sfn, gs, es, pfm, eu, ldpf, sc, hd, nq, dv, nk, pt, ldp, v, ldv, acc, lda, alpha));
}

/* few_fused: its own file, over the tiles and row access above */
#include "simd/fewfused_tmpl.h"

#undef ATTN_HKV_TYPED_
#undef ATTN_HKV_AS_
#undef ATTN_HKV_QR
#undef ATTN_HKV_PV_QR
#undef ATTN_HKV_NV
#undef ATTN_HKV_NV1
#undef ATTN_HKV_NV_MAX
#undef ATTN_HKV_ONE_FP32_
#undef ATTN_HKV_KR
#undef ATTN_HKV_JC
#undef ATTN_HKV_JC_ROWS
#undef ATTN_HKV_PF
#undef ATTN_HKV_PF_L2
#undef ATTN_HKV_PF_NEAR
#undef ATTN_HKV_PREFETCH_
#undef ATTN_HKV_LINE_
#undef ATTN_HKV_BLOCK_PF_
#undef ATTN_HKV_PF_FAR
