/*
 * Scores for many query rows of one key head (contract: attn_few_scores_wide_fn in
 * core/ukernels.h; a GQA group's speculative block, 8-32 rows), written once against the vf_*
 * shim. few_scores (fewrows_tmpl.h) runs each row along d and reduces every (key, row) pair's
 * vector at the end: with 16-32 rows, the reductions cost about half as much as the FMAs. Here the
 * rows lie in the vector's lanes (Q transposed, d x rows): a tile of KT keys x RV vectors of rows
 * takes each key element broadcast against the rows' column of Q^T, and stores a key's scores,
 * its rows adjacent, with no reduction. A key row is read once, in place, converted in registers
 * VL elements at a time (fp16 / bf16 / int8 / q8_0 as few_scores reads it) into a small staged
 * copy the broadcasts read. Each score is one FMA chain along d, p = 0 .. d - 1.
 * Include the path's shim, define ATTN_FEW_WIDE_NAME, then include (its own translation unit,
 * beside few-rows.c: the two compile in parallel).
 */
#include "simd/fewrows_load.h"

/* Accumulators a tile may hold: leave room for the rows' vectors and the broadcast. */
#if ATTN_VREGS >= 32
#define ATTN_FW_ACC 24
#else
#define ATTN_FW_ACC 12
#endif
#define ATTN_FW_KT_MAX 8 /* keys of a tile, at most */
/* Row vectors of a tile, at most: the contract's 32 rows. */
#define ATTN_FW_RV_MAX ((32 + ATTN_VL - 1) / ATTN_VL)
/* Keys of a tile of rv row vectors (a constant for each rv). */
#define ATTN_FW_KT(rv) \
  ((ATTN_FW_ACC / (rv)) > ATTN_FW_KT_MAX ? ATTN_FW_KT_MAX : (ATTN_FW_ACC / (rv)) < 1 ? 1 : (ATTN_FW_ACC / (rv)))

/* One tile: keys kr[0 .. kt) (the first kv valid; the others repeat a valid row and are not
 * stored) against nq rows in rv vectors (the last one wl lanes wide) of qt (row p at p ldq). */
static inline __attribute__((always_inline)) void attn_fw_tile_(attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn,
                                                                size_t gs, size_t es, int pfm, const size_t kt,
                                                                const size_t rv, size_t kv, size_t wl, size_t d,
                                                                const char *const *kr, const vf *ks, size_t ldk,
                                                                const float *qt, size_t ldq, float *st, size_t ldst) {
  vf acc[ATTN_FW_KT_MAX][ATTN_FW_RV_MAX];
  _Alignas(64) float kb[ATTN_FW_KT_MAX][ATTN_VL];
#pragma GCC unroll 8
  for (size_t i = 0; i < kt; i++)
#pragma GCC unroll 8
    for (size_t v = 0; v < rv; v++) acc[i][v] = vf_zero();
  for (size_t p = 0; p < d; p += gs) { /* groups of gs elements that share a scale (q8_0 blocks) */
    vf bs[ATTN_FW_KT_MAX];
#pragma GCC unroll 8
    for (size_t i = 0; i < kt; i++) {
      ATTN_HKV_BLOCK_PF_(kr[i], p, ldk);
      bs[i] = sfn(kr[i], p, ks[i]);
    }
    const size_t pe = d - p < gs ? d : p + gs;
    for (size_t e = p; e < pe; e += ATTN_VL) {
      const size_t w = pe - e < ATTN_VL ? pe - e : ATTN_VL;
#pragma GCC unroll 8
      for (size_t i = 0; i < kt; i++) {
        if (ATTN_HKV_LINE_(e * es)) ATTN_HKV_PREFETCH_(kr[i] + e * es, ldk);
        vf_store(kb[i], w == ATTN_VL ? conv(kr[i], e, bs[i]) : attn_hkv_load_(conv, es, kr[i], e, w, bs[i]));
      }
      for (size_t x = 0; x < w; x++) {
        const float *qr = qt + (e + x) * ldq;
        vf qx[ATTN_FW_RV_MAX];
#pragma GCC unroll 8
        for (size_t v = 0; v < rv; v++)
          qx[v] = v + 1 < rv || wl == ATTN_VL ? vf_load(qr + v * ATTN_VL) : vf_load_n(qr + v * ATTN_VL, wl);
        ATTN_VF_RANK1(acc, kt, rv, kb[r_][x], qx);
      }
    }
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < kt; i++) /* (kt, not kv: constant indices keep acc in registers) */
    if (i < kv)
#pragma GCC unroll 8
      for (size_t v = 0; v < rv; v++) vf_store_w(st + i * ldst + v * ATTN_VL, acc[i][v], v + 1 < rv ? ATTN_VL : wl);
}

/* nk keys in tiles of kt (a constant), each tile's keys for every head of hd before the next
 * keys: heads side by side in a token's row are read in one sweep along memory (a head's whole
 * run of keys before the next head's made a strided stream of each head, slower from memory). */
static inline __attribute__((always_inline)) void attn_fw_keys_(attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn,
                                                                size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
                                                                const float *sc, const attn_few_heads *hd,
                                                                const size_t rv, size_t nk, size_t nq, size_t d,
                                                                const char *k, size_t ldk, const float *qt, size_t ldq,
                                                                float *st, size_t ldst) {
  const size_t kt = ATTN_FW_KT(rv), wl = nq - (rv - 1) * ATTN_VL, nh = hd ? hd->n : 1;
  const size_t sld = hd ? hd->sld : 0;
  for (size_t j0 = 0; j0 < nk; j0 += kt) {
    const size_t kv = nk - j0 < kt ? nk - j0 : kt;
    for (size_t h = 0; h < nh; h++) {
      const char *kh = k + (hd ? h * hd->k * eu : 0);
      const float *sh = sc ? sc + h * hd->shd : NULL;
      const char *kr[ATTN_FW_KT_MAX];
      vf ks[ATTN_FW_KT_MAX];
      for (size_t i = 0; i < kt; i++) {
        const size_t j = j0 + (i < kv ? i : kv - 1);
        kr[i] = kh + j * ldk * eu;
        ks[i] = sh ? vf_set1(sh[j * sld]) : vf_zero();
      }
      attn_fw_tile_(conv, sfn, gs, es, pfm, kt, rv, kv, wl, d, kr, ks, ldpf, qt + (hd ? h * hd->q : 0), ldq,
                    st + (hd ? h * hd->s : 0) + j0 * ldst, ldst);
    }
  }
}

static inline __attribute__((always_inline)) void attn_fw_heads_(attn_hkv_conv_fn_ *conv, attn_hkv_scale_fn_ *sfn,
                                                                 size_t gs, size_t es, int pfm, size_t eu, size_t ldpf,
                                                                 const float *sc, const attn_few_heads *hd, size_t nk,
                                                                 size_t nq, size_t d, const char *k, size_t ldk,
                                                                 const float *qt, size_t ldq, float *st, size_t ldst) {
  switch ((nq + ATTN_VL - 1) / ATTN_VL) { /* each width of rows its own tile, compiled for it */
#define ATTN_FW_CASE_(n)                                                                              \
  case n:                                                                                             \
    attn_fw_keys_(conv, sfn, gs, es, pfm, eu, ldpf, sc, hd, n, nk, nq, d, k, ldk, qt, ldq, st, ldst); \
    break;
    ATTN_FW_CASE_(1)
    ATTN_FW_CASE_(2)
#if ATTN_FW_RV_MAX > 2
    ATTN_FW_CASE_(3)
    ATTN_FW_CASE_(4)
#endif
#if ATTN_FW_RV_MAX > 4
    ATTN_FW_CASE_(5)
    ATTN_FW_CASE_(6)
    ATTN_FW_CASE_(7)
    ATTN_FW_CASE_(8)
#endif
#undef ATTN_FW_CASE_
    default:
      break;
  }
}

void ATTN_FEW_WIDE_NAME(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nk, size_t nq, size_t d,
                        const void *k, size_t ldk, const float *qt, size_t ldq, float *st, size_t ldst) {
  ATTN_HKV_TYPED_(type, pf, hd, ldk, d, nq,
                  attn_fw_heads_(conv, sfn, gs, es, pfm, eu, ldpf, sc, hd, nk, nq, d, k, ldk, qt, ldq, st, ldst));
}

#undef ATTN_FW_ACC
#undef ATTN_FW_KT_MAX
#undef ATTN_FW_RV_MAX
#undef ATTN_FW_KT
