/*
 * GEMM micro-kernel body (contract: attn_gemm_fn in core/ukernels.h), written once against the
 * vf_* shim. Register tile ATTN_GEMM_MR rows x (ATTN_GEMM_NV vectors) columns: per step of k,
 * NV vector loads of a B row and MR broadcasts of A elements feed MR*NV FMAs. Row edges reuse the
 * last valid A row (nothing out of bounds is read; only valid rows are stored); column edges use
 * partial loads/stores; a block at most one vector wide uses a one-vector tile. Three shapes get
 * their own loops: a single row (m == 1, the P V product of a
 * decode step) uses a one-row tile; a single column with contiguous operands (n == 1,
 * csa == 1, ldb == 1: K q of a decode step) runs as dot products vectorised along k; and a last
 * block of one or two columns with A read transposed (rsa == 1: [V | 1]'s ones column) runs
 * vectorised along the rows.
 * Include the path's vf_* shim, define ATTN_GEMM_NAME (a GEMM of src/ukernels.inc), then include;
 * the register tile is the one its row of the list gives.
 */
#include "core/ukernels.h"

#define ATTN_GEMM_CAT2_(a, b)        a##b
#define ATTN_GEMM_CAT_(a, b)         ATTN_GEMM_CAT2_(a, b)
#define ATTN_GEMM(isa, name, mr, nr) enum { name##_mr_ = mr, name##_nr_ = nr };
#define ATTN_UKERNEL(isa, slot, name)
#define ATTN_TUNING(isa, slot, value)
#include "ukernels.inc"
#undef ATTN_GEMM
#undef ATTN_UKERNEL
#undef ATTN_TUNING
#define ATTN_GEMM_MR ATTN_GEMM_CAT_(ATTN_GEMM_NAME, _mr_)
#define ATTN_GEMM_NV (ATTN_GEMM_CAT_(ATTN_GEMM_NAME, _nr_) / ATTN_VL)
_Static_assert(ATTN_GEMM_CAT_(ATTN_GEMM_NAME, _nr_) % ATTN_VL == 0, "GEMM tile columns: whole vectors");

#define GEMM_NR_ (ATTN_GEMM_NV * ATTN_VL)
#define ATTN_GEMM_LINE (64 / sizeof(float)) /* floats a cache line */

static inline __attribute__((always_inline)) void attn_gemm_tile_(size_t mrc, size_t nvc, size_t mv, size_t nc,
                                                                  int full, size_t k, const float *a, size_t rsa,
                                                                  size_t csa, const float *b, size_t ldb, float *c,
                                                                  size_t ldc, const float *rs, int accumulate) {
  vf acc[ATTN_GEMM_MR][ATTN_GEMM_NV];
  const float *ar[ATTN_GEMM_MR];
  size_t cnt[ATTN_GEMM_NV];
#pragma GCC unroll 16
  for (size_t r = 0; r < mrc; r++) ar[r] = a + (r < mv ? r : mv - 1) * rsa;
#pragma GCC unroll 16
  for (size_t v = 0; v < nvc; v++) {
    const size_t c0 = v * ATTN_VL;
    cnt[v] = nc > c0 ? (nc - c0 < ATTN_VL ? nc - c0 : ATTN_VL) : 0;
  }
#pragma GCC unroll 16
  for (size_t r = 0; r < mrc; r++)
#pragma GCC unroll 16
    for (size_t v = 0; v < nvc; v++) acc[r][v] = vf_zero();

#pragma GCC unroll 2 /* faster than 1 or 4, measured: ba8c058 */
  for (size_t p = 0; p < k; p++) {
    const float *bp = b + p * ldb;
    const size_t ap = p * csa;
    vf bv[ATTN_GEMM_NV];
#pragma GCC unroll 16
    for (size_t v = 0; v < nvc; v++) bv[v] = full ? vf_load(bp + v * ATTN_VL) : vf_load_n(bp + v * ATTN_VL, cnt[v]);
    /* A's rows along k (csa 1: the blocked engine's K rows, streamed from L3 or memory by each
     * query block of a long prefill): the rows of the next tile down, the line this step starts,
     * an address computed as an integer (a prefetch never faults; past A's last row it is
     * unused). Full prefill of one head of 128 over 16k tokens 1.07x on AVX-512 and 1.20x on
     * AVX2, 8k causal 1.05x / 1.10x; linear attention, GAU, the delta rule, selective attention
     * and short calls within 1% (Zen 4, alternated in one process; measured against 3bfc617). */
    if (csa == 1 && p % ATTN_GEMM_LINE == 0)
#pragma GCC unroll 16
      for (size_t r = 0; r < mrc; r++)
        __builtin_prefetch((const void *)((uintptr_t)(ar[r] + p) + ATTN_GEMM_MR * rsa * sizeof(float)), 0, 3);
    ATTN_VF_RANK1(acc, mrc, nvc, ar[r_][ap], bv);
  }

#pragma GCC unroll 16
  for (size_t r = 0; r < mrc; r++) {
    if (r >= mv) break;
    float *cr = c + r * ldc;
    const vf s = vf_set1(rs ? rs[r] : 1.0f);
#pragma GCC unroll 16
    for (size_t v = 0; v < nvc; v++) {
      float *cp = cr + v * ATTN_VL;
      if (full) {
        vf out = acc[r][v];
        if (accumulate) out = rs ? vf_fma(vf_load(cp), s, out) : vf_add(vf_load(cp), out);
        vf_store(cp, out);
      } else if (cnt[v]) {
        vf out = acc[r][v];
        if (accumulate) out = rs ? vf_fma(vf_load_n(cp, cnt[v]), s, out) : vf_add(vf_load_n(cp, cnt[v]), out);
        vf_store_n(cp, out, cnt[v]);
      }
    }
  }
}

/* C[i] (+)= sum_p A[i][p] B[p] for rows with contiguous A rows and a contiguous B column. */
static void attn_gemm_dot_(size_t m, size_t k, const float *a, size_t rsa, const float *b, float *c, size_t ldc,
                           const float *rs, int accumulate) {
  enum { R = 4 };
  for (size_t i0 = 0; i0 < m; i0 += R) {
    const size_t mv = m - i0 < R ? m - i0 : R;
    const float *ar[R];
    vf acc[R];
#pragma GCC unroll 4
    for (size_t r = 0; r < R; r++) {
      ar[r] = a + (i0 + (r < mv ? r : mv - 1)) * rsa;
      acc[r] = vf_zero();
    }
    size_t p = 0;
    for (; p + ATTN_VL <= k; p += ATTN_VL) {
      const vf bv = vf_load(b + p);
#pragma GCC unroll 4
      for (size_t r = 0; r < R; r++) acc[r] = vf_fma(vf_load(ar[r] + p), bv, acc[r]);
    }
    if (p < k) {
      const vf bv = vf_load_n(b + p, k - p);
#pragma GCC unroll 4
      for (size_t r = 0; r < R; r++) acc[r] = vf_fma(vf_load_n(ar[r] + p, k - p), bv, acc[r]);
    }
    for (size_t r = 0; r < mv; r++) {
      float *cp = c + (i0 + r) * ldc;
      const float dot = vf_hsum(acc[r]);
      *cp = accumulate ? (rs ? *cp * rs[i0 + r] : *cp) + dot : dot;
    }
  }
}

#if ATTN_VL > 1
/* Columns [j0, n) (a few) when A is read transposed (rsa == 1: A's column p is contiguous along
 * the rows): vectorised along the rows instead, acc(rows i..i+VL, j) += A(i.., p) B(p, j), a load
 * and a broadcast per ATTN_GEMM_COLS_RV row vectors and column pair. Each element gets the same
 * operations in the same order as in a tile (C = B is excluded by the caller), so the bits are
 * the tile's. A normalised linear map's [V | 1] has dv + 1 columns: this is its last one, which
 * a tile would compute as a full tile's broadcasts and FMAs for one lane. */
#define ATTN_GEMM_COLS_RV 4
/* nv vectors of rows from row r0 (nv and tail compile-time constants after inlining: nv whole
 * vectors, or with tail one vector of its first cnt rows), column j and with two j + 1: no test
 * in the loop over k (a test of each vector's count per step made the column cost as much as
 * a fifth of the whole product). */
static inline __attribute__((always_inline)) void attn_gemm_cols_rows_(size_t r0, const size_t nv, const int tail,
                                                                       size_t cnt, size_t j, const int two, size_t k,
                                                                       const float *a, size_t csa, const float *b,
                                                                       size_t ldb, float *c, size_t ldc,
                                                                       const float *rs, int accumulate) {
  vf acc[2][ATTN_GEMM_COLS_RV];
#pragma GCC unroll 4
  for (size_t v = 0; v < nv; v++) acc[0][v] = acc[1][v] = vf_zero();
  for (size_t p = 0; p < k; p++) {
    const float *ap = a + p * csa + r0;
    const vf b0 = vf_set1(b[p * ldb + j]), b1 = two ? vf_set1(b[p * ldb + j + 1]) : b0;
#pragma GCC unroll 4
    for (size_t v = 0; v < nv; v++) {
      const vf av = tail ? vf_load_n(ap + v * ATTN_VL, cnt) : vf_load(ap + v * ATTN_VL);
      acc[0][v] = vf_fma(av, b0, acc[0][v]);
      if (two) acc[1][v] = vf_fma(av, b1, acc[1][v]);
    }
  }
  const size_t w = tail ? cnt : ATTN_VL;
  for (int t = 0; t <= two; t++)
#pragma GCC unroll 4
    for (size_t v = 0; v < nv; v++) {
      const size_t rv = r0 + v * ATTN_VL;
      float *cp = c + rv * ldc + j + (size_t)t;
      vf out = acc[t][v];
      if (accumulate) {
        const vf old = vf_load_strided(cp, ldc, w);
        out = rs ? vf_fma(old, vf_load_w(rs + rv, w), out) : vf_add(old, out);
      }
      vf_store_strided(cp, ldc, out, w);
    }
}
/* Columns [j0, n) (a few) when A is read transposed (rsa == 1: A's column p is contiguous along
 * the rows): vectorised along the rows instead, acc(rows i..i+VL, j) += A(i.., p) B(p, j), a load
 * and a broadcast per row vector and column pair, ATTN_GEMM_COLS_RV row vectors at a time, then
 * the last rows' partial vector. Each element gets the same operations in the same order as in a
 * tile (C = B is excluded by the caller), so the bits are the tile's. A normalised linear map's
 * [V | 1] has dv + 1 columns: this is its last one, which a tile would compute as a full tile's
 * broadcasts and FMAs for one lane. */
#define ATTN_GEMM_COLS_(nv, tail)                                                                 \
  (two ? attn_gemm_cols_rows_(r0, nv, tail, cnt, j, 1, k, a, csa, b, ldb, c, ldc, rs, accumulate) \
       : attn_gemm_cols_rows_(r0, nv, tail, cnt, j, 0, k, a, csa, b, ldb, c, ldc, rs, accumulate))
static void attn_gemm_cols_(size_t m, size_t n, size_t j0, size_t k, const float *a, size_t csa, const float *b,
                            size_t ldb, float *c, size_t ldc, const float *rs, int accumulate) {
  for (size_t j = j0; j < n; j += 2) {
    const int two = j + 1 < n;
    size_t r0 = 0;
    for (; r0 + ATTN_GEMM_COLS_RV * ATTN_VL <= m; r0 += ATTN_GEMM_COLS_RV * ATTN_VL) {
      const size_t cnt = ATTN_VL;
      ATTN_GEMM_COLS_(ATTN_GEMM_COLS_RV, 0);
    }
    const size_t whole = (m - r0) / ATTN_VL, cnt = m - r0 - whole * ATTN_VL;
    switch (whole) { /* fewer than ATTN_GEMM_COLS_RV whole vectors left */
      case 3:
        ATTN_GEMM_COLS_(3, 0);
        break;
      case 2:
        ATTN_GEMM_COLS_(2, 0);
        break;
      case 1:
        ATTN_GEMM_COLS_(1, 0);
        break;
      default:
        break;
    }
    r0 += whole * ATTN_VL;
    if (cnt) ATTN_GEMM_COLS_(1, 1);
  }
}
#undef ATTN_GEMM_COLS_
#endif

void ATTN_GEMM_NAME(size_t m, size_t n, size_t k, const float *a, size_t rsa, size_t csa, const float *b, size_t ldb,
                    float *c, size_t ldc, const float *row_scale, int accumulate) {
  if (n == 1 && csa == 1 && ldb == 1 && k >= ATTN_VL) {
    attn_gemm_dot_(m, k, a, rsa, b, c, ldc, row_scale, accumulate);
    return;
  }
  for (size_t j0 = 0; j0 < n; j0 += GEMM_NR_) {
    const size_t nc = n - j0 < GEMM_NR_ ? n - j0 : GEMM_NR_;
#if ATTN_VL > 1
    if (nc <= 2 && rsa == 1 && m >= ATTN_VL && c != b) { /* the last column or two, along the rows */
      attn_gemm_cols_(m, n, j0, k, a, csa, b, ldb, c, ldc, row_scale, accumulate);
      break;
    }
#endif
    for (size_t i0 = 0; i0 < m; i0 += ATTN_GEMM_MR) {
      const size_t mv = m - i0 < ATTN_GEMM_MR ? m - i0 : ATTN_GEMM_MR;
      const float *ai = a + i0 * rsa;
      float *ci = c + i0 * ldc + j0;
      const float *rsi = row_scale ? row_scale + i0 : NULL;
      /* Tile shape (rows, vectors) as compile-time constants: full, one row, one vector wide;
       * and A's row stride as the constant 1 when A is read transposed (P^T, Kf^T, QfT), so
       * the MR broadcasts of a step come off one pointer with constant offsets. */
#define GEMM_TILE_(mrc, nvc, full, rsa_c) \
  attn_gemm_tile_(mrc, nvc, mv, nc, full, k, ai, rsa_c, csa, b + j0, ldb, ci, ldc, rsi, accumulate)
#define GEMM_TILES_(rsa_c)                                                                          \
  if (m == 1)                                                                                       \
    nc == GEMM_NR_ ? GEMM_TILE_(1, ATTN_GEMM_NV, 1, rsa_c) : GEMM_TILE_(1, ATTN_GEMM_NV, 0, rsa_c); \
  else if (nc == GEMM_NR_)                                                                          \
    GEMM_TILE_(ATTN_GEMM_MR, ATTN_GEMM_NV, 1, rsa_c);                                               \
  else if (nc == ATTN_VL)                                                                           \
    GEMM_TILE_(ATTN_GEMM_MR, 1, 1, rsa_c);                                                          \
  else if (nc < ATTN_VL)                                                                            \
    GEMM_TILE_(ATTN_GEMM_MR, 1, 0, rsa_c);                                                          \
  else                                                                                              \
    GEMM_TILE_(ATTN_GEMM_MR, ATTN_GEMM_NV, 0, rsa_c);
      if (rsa == 1) {
        GEMM_TILES_(1)
      } else {
        GEMM_TILES_(rsa)
      }
#undef GEMM_TILES_
#undef GEMM_TILE_
    }
  }
}

#undef GEMM_NR_
#undef ATTN_GEMM_LINE
