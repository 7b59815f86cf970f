/*
 * White-box tests, per ISA path (ATTN_ISA picks the path; exit 77 = SKIP when it cannot run here;
 * the shared state, main, RNG and guard zones come from tests/common/internal_util.h). Every kernel
 * is compared with a double-precision loop written here, on edge shapes, with guard zones around
 * every output: a kernel must write only its output elements (including the padding between rows,
 * which it must leave alone).
 * This file: the blocked engine's kernels: the GEMM on every edge of its register tile, the
 * score steps (online softmax, GAU's relu^2, windowed linear attention), the few-rows kernels
 * over K/V stored as fp32, fp16 or bf16, and selective attention's selection sums.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "half_ref.h"
#include "internal_util.h"
#include "engine/blocked.h"

/* ---- GEMM: every edge of the register tile, strides, modes ---- */
static const size_t gemm_sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 33, 47, 48, 49};
#define NGS (sizeof gemm_sizes / sizeof gemm_sizes[0])

static void gemm_case(size_t m, size_t n, size_t k, int a_trans, int mode) {
  /* mode 0: overwrite, 1: +=, 2: row-scaled += */
  /* n == 1 with ldb == 1 and untransposed A takes the kernel's dot-product loop */
  const size_t lda = k + 3, ldat = m + 5, ldb = n == 1 && !a_trans ? 1 : n + 2, ldc = n + 7;
  const size_t asz = (a_trans ? k * ldat : m * lda) + 1;
  float *a = malloc(asz * sizeof(float)), *b = malloc((k * ldb + 1) * sizeof(float));
  float *c = galloc(m * ldc), *c0 = malloc(m * ldc * sizeof(float)), *rs = malloc(m * sizeof(float));
  for (size_t i = 0; i < asz; i++) a[i] = frand();
  for (size_t i = 0; i < k * ldb + 1; i++) b[i] = frand();
  for (size_t i = 0; i < m * ldc; i++) c[i] = c0[i] = frand();
  for (size_t i = 0; i < m; i++) rs[i] = frand();
  const size_t rsa = a_trans ? 1 : lda, csa = a_trans ? ldat : 1;
  uk->gemm(m, n, k, a, rsa, csa, b, ldb, c, ldc, mode == 2 ? rs : NULL, mode != 0);
  size_t bad_i = SIZE_MAX, bad_j = 0;
  double bad_ref = 0;
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < ldc; j++) {
      if (j >= n) { /* padding between rows is not the kernel's */
        if (c[i * ldc + j] != c0[i * ldc + j] && bad_i == SIZE_MAX) {
          bad_i = i;
          bad_j = j;
          bad_ref = c0[i * ldc + j];
        }
        continue;
      }
      double ref = 0, mag = 0;
      for (size_t p = 0; p < k; p++) {
        const double t = (double)a[i * rsa + p * csa] * b[p * ldb + j];
        ref += t;
        mag += fabs(t);
      }
      const double old = c0[i * ldc + j] * (mode == 2 ? (double)rs[i] : 1.0);
      if (mode) {
        ref += old;
        mag += fabs(old);
      }
      /* fp32 accumulation of k + 1 terms: |err| <= (k + 2) * 2^-24 * sum |terms| */
      const double tol = (double)(k + 2) * 5.960464477539063e-08 * mag + 1e-30;
      if (!(fabs(c[i * ldc + j] - ref) <= tol) && bad_i == SIZE_MAX) {
        bad_i = i;
        bad_j = j;
        bad_ref = ref;
      }
    }
  }
  ck_assert_msg(bad_i == SIZE_MAX, "gemm m=%zu n=%zu k=%zu trans=%d mode=%d at (%zu,%zu): %g, want %g", m, n, k,
                a_trans, mode, bad_i, bad_j, bad_i == SIZE_MAX ? 0.0 : c[bad_i * ldc + bad_j], bad_ref);
  gcheck_free(c);
  free(a);
  free(b);
  free(c0);
  free(rs);
}

START_TEST(gemm_shapes) {
  const size_t m = gemm_sizes[_i % NGS];
  for (size_t jn = 0; jn < NGS; jn += 2)
    for (size_t kk = 0; kk < 5; kk++) {
      const size_t ks[] = {0, 1, 7, 64, 97};
      gemm_case(m, gemm_sizes[jn], ks[kk], (int)(kk & 1), (int)((jn / 2 + kk) % 3));
    }
}
END_TEST

/* The last column or two of a block, with A read transposed, run along the rows (gemm_tmpl.h):
 * [V | 1]'s ones column of a normalised linear map. Against the float64 reference (gemm_case), and
 * bit for bit against the same columns computed inside a wider block's tile. */
START_TEST(gemm_last_columns) {
  const size_t nr = uk->gemm_nr, ms[] = {1, 2, 5, 8, 15, 16, 17, 31, 33, 64, 65, 97};
  const size_t m = ms[_i % (sizeof ms / sizeof ms[0])];
  for (size_t q = 0; q < 3; q++)
    for (size_t extra = 1; extra <= 2; extra++)
      for (int mode = 0; mode < 3; mode++) {
        const size_t ks[] = {1, 7, 64};
        const size_t n = q * nr + extra, k = ks[(q + extra + (size_t)mode) % 3], wide = q * nr + nr / 2 + 3;
        gemm_case(m, n, k, 1, mode);
        /* the same product over `wide` columns: its first n columns in a tile */
        const size_t ldat = m + 5, ldb = wide + 1, ldc = wide + 2;
        float *a = malloc(k * ldat * sizeof(float)), *b = malloc(k * ldb * sizeof(float));
        float *c1 = galloc(m * ldc), *c2 = galloc(m * ldc), *rs = malloc(m * sizeof(float));
        for (size_t i = 0; i < k * ldat; i++) a[i] = frand();
        for (size_t i = 0; i < k * ldb; i++) b[i] = frand();
        for (size_t i = 0; i < m * ldc; i++) c1[i] = c2[i] = frand();
        for (size_t i = 0; i < m; i++) rs[i] = frand();
        uk->gemm(m, n, k, a, 1, ldat, b, ldb, c1, ldc, mode == 2 ? rs : NULL, mode != 0);
        uk->gemm(m, wide, k, a, 1, ldat, b, ldb, c2, ldc, mode == 2 ? rs : NULL, mode != 0);
        for (size_t i = 0; i < m; i++)
          for (size_t j = 0; j < n; j++)
            ck_assert_msg(c1[i * ldc + j] == c2[i * ldc + j], "m=%zu n=%zu k=%zu mode=%d (%zu,%zu): %a, tile %a", m, n,
                          k, mode, i, j, (double)c1[i * ldc + j], (double)c2[i * ldc + j]);
        gcheck_free(c1);
        gcheck_free(c2);
        free(a);
        free(b);
        free(rs);
      }
}
END_TEST

START_TEST(gemm_in_place_row) {
  /* merge relies on C == B for a one-row, k = 1 product: C = w * C */
  float *c = galloc(37);
  float ref[37];
  for (int i = 0; i < 37; i++) ref[i] = c[i] = frand();
  const float w = 0.375f;
  uk->gemm(1, 37, 1, &w, 0, 0, c, 0, c, 0, NULL, 0);
  for (int i = 0; i < 37; i++) ck_assert_float_eq(c[i], w * ref[i]);
  gcheck_free(c);
}
END_TEST

/* ---- online softmax block: against a double recurrence, with masked entries and columns ---- */
/* Loop index 0..7: columns with padding (ld = nq + 3); 8..10: one contiguous column (nq = ld = 1:
 * a decode step) over 3, 16 and 37 keys (a tail only, whole vectors, both); 11..14: 2, 4, 8 and 4
 * contiguous columns (ld = nq: a GQA decode step) over 13, 13, 13 and 16 keys (a tail, whole
 * vectors on some paths); 8..14 take the flat path where nq divides the vector. Every step runs
 * twice, without and with the statistics (q2 and e, stride nq + 2): P, m, l and alpha must be the
 * same bits, and q2 = sum p^2, e = sum p (s - m) (p relative to the running max) follow the
 * double recurrence. */
START_TEST(softmax_block_steps) {
  static const size_t nqs[] = {1, 3, 4, 5, 8, 9, 17, 48, 1, 1, 1, 2, 4, 8, 4};
  static const size_t nks[] = {13, 13, 13, 13, 13, 13, 13, 13, 3, 16, 37, 13, 13, 13, 16};
  const int row = _i >= 8 && _i < 11, flat = _i >= 11;
  const size_t nq = nqs[_i], nk = nks[_i], lds = nq + 2;
  size_t ld = nq + 3;
  if (row) ld = 1;
  if (flat) ld = nq;
  float *m = galloc(nq), *l = galloc(nq), *al = galloc(nq), *st = galloc(nk * ld);
  float *m2 = galloc(nq), *l2 = galloc(nq), *al2 = galloc(nq), *st2 = galloc(nk * ld), *sts = galloc(2 * lds);
  double *rm = malloc(nq * sizeof(double)), *rl = malloc(nq * sizeof(double));
  double *rq = malloc(nq * sizeof(double)), *re = malloc(nq * sizeof(double)), *rea = malloc(nq * sizeof(double));
  for (size_t c = 0; c < nq; c++) {
    m[c] = m2[c] = -INFINITY;
    l[c] = l2[c] = 0;
    rm[c] = -INFINITY;
    rl[c] = rq[c] = re[c] = rea[c] = 0;
  }
  for (size_t c = 0; c < 2 * lds; c++) sts[c] = c % lds < nq ? 0.0f : 7.0f; /* the padding must stay */
  for (int step = 0; step < 4; step++) {
    float *keep = malloc(nk * ld * sizeof(float));
    for (size_t j = 0; j < nk; j++)
      for (size_t c = 0; c < ld; c++) {
        float s = 20.0f * frand() + (step == 2 ? 60.0f : 0.0f); /* a jump of the max in step 2 */
        if (c == 0 && step < 2) s = -INFINITY;                  /* column 0: empty at first */
        if (c == nq - 1 && nq > 2) s = -INFINITY;               /* last column: always empty */
        if ((j + c + (size_t)step) % 5 == 0) s = -INFINITY;     /* scattered masked pairs */
        st[j * ld + c] = st2[j * ld + c] = keep[j * ld + c] = s;
      }
    uk->softmax_block(nk, nq, st, ld, m, l, al, NULL, 0, 1);
    uk->softmax_block(nk, nq, st2, ld, m2, l2, al2, sts, lds, 1);
    tu_assert_same_bits("P with statistics", st, st2, nk * ld * sizeof(float));
    tu_assert_same_bits("m with statistics", m, m2, nq * sizeof(float));
    tu_assert_same_bits("l with statistics", l, l2, nq * sizeof(float));
    tu_assert_same_bits("alpha with statistics", al, al2, nq * sizeof(float));
    for (size_t c = 0; c < nq; c++) {
      double mx = rm[c];
      for (size_t j = 0; j < nk; j++) mx = fmax(mx, keep[j * ld + c]);
      const double alpha = mx == -INFINITY ? 0.0 : exp(rm[c] - mx);
      double sum = 0, sq = 0, se = 0, sea = 0;
      for (size_t j = 0; j < nk; j++) {
        const double p = mx == -INFINITY ? 0.0 : exp((double)keep[j * ld + c] - mx);
        sum += p;
        sq += p * p;
        se += p == 0.0 ? 0.0 : p * ((double)keep[j * ld + c] - mx);
        sea += p == 0.0 ? 0.0 : p * fabs((double)keep[j * ld + c] - mx);
        /* exp's bound plus the rounding of the fp32 difference s - m (|s - m| * 2^-24) */
        const double tol =
            p == 0.0 ? 0.0 : p * (4 * EXP_RTOL + fabs((double)keep[j * ld + c] - mx) * 5.960464477539063e-08) + 1e-37;
        ck_assert_msg(fabs(st[j * ld + c] - p) <= tol, "P[%zu][%zu] %g vs %g", j, c, st[j * ld + c], p);
      }
      const double atol =
          alpha == 0.0 ? 0.0 : alpha * (4 * EXP_RTOL + fabs(rm[c] - mx) * 5.960464477539063e-08) + 1e-37;
      ck_assert_msg(fabs(al[c] - alpha) <= atol, "alpha[%zu] %.9g vs %.9g (m %.9g -> %.9g)", c, al[c], alpha, rm[c],
                    mx);
      const double shift = alpha == 0.0 ? 0.0 : rl[c] * (mx - rm[c]); /* the old terms' s - m grew */
      re[c] = (alpha == 0.0 ? 0.0 : alpha * (re[c] - shift)) + se;
      rea[c] = (alpha == 0.0 ? 0.0 : alpha * (rea[c] + shift)) + sea;
      rq[c] = rq[c] * alpha * alpha + sq;
      rl[c] = rl[c] * alpha + sum;
      rm[c] = mx;
      ck_assert(m[c] == (float)mx);
      ck_assert_msg(fabs(l[c] - rl[c]) <= 1e-5 * rl[c], "l[%zu] %g vs %g", c, l[c], rl[c]);
      /* q2: as l, twice exp's error per term; e: each term carries exp's error and the rounding of
       * s - m (|s - m| u relative, |s - m| <= 80 here), relative to the sum of |terms| */
      ck_assert_msg(fabs(sts[c] - rq[c]) <= 2e-5 * rq[c], "q2[%zu] %g vs %g", c, sts[c], rq[c]);
      ck_assert_msg(fabs(sts[lds + c] - re[c]) <= 2e-5 * rea[c], "e[%zu] %.9g vs %.9g (scale %g)", c, sts[lds + c],
                    re[c], rea[c]);
    }
    for (size_t c = nq; c < lds; c++) ck_assert(sts[c] == 7.0f && sts[lds + c] == 7.0f);
    for (size_t j = 0; j < nk; j++)
      for (size_t c = nq; c < ld; c++) ck_assert(st[j * ld + c] == keep[j * ld + c]); /* padding */
    free(keep);
  }
  if (nq > 2) {
    ck_assert(m[nq - 1] == -INFINITY);
    ck_assert(l[nq - 1] == 0.0f);
    ck_assert(sts[nq - 1] == 0.0f && sts[lds + nq - 1] == 0.0f); /* an empty column's sums stay 0 */
  }
  float *bufs[] = {m, l, al, st, m2, l2, al2, st2, sts};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gcheck_free(bufs[i]);
  free(rm), free(rl), free(rq), free(re), free(rea);
}
END_TEST

/* ---- online softmax block, non-finite logits: masked == 0 takes -inf as a logit (NaN); a NaN
 * or +inf logit makes its column's l NaN, and l stays NaN in later steps; other columns are
 * untouched by them ---- */
START_TEST(softmax_block_nonfinite) {
  /* loop index 0: 7 keys x 11 columns (ld 13), the bad logit in column 5; 1, 2: one contiguous
   * column (a decode step's path) of 19 keys, and of 3 (fewer than a vector), the bad logit in it;
   * 3: 7 keys x 4 contiguous columns (the flat path), the bad logit in column 2; 4: 13 keys x 11
   * columns (the column path's max chains, a tail row after them). The bad logit sits in each row
   * in turn (the chains see it first, last or in the tail). */
  static const size_t shapes[][4] = {{7, 11, 13, 5}, {19, 1, 1, 0}, {3, 1, 1, 0}, {7, 4, 4, 2}, {13, 11, 13, 5}};
  const size_t NK = shapes[_i][0], NQ = shapes[_i][1], LD = shapes[_i][2], BC = shapes[_i][3];
  const float bad[] = {NAN, INFINITY, -INFINITY, 1.0f}; /* and a finite control */
  for (size_t row = 0; row < NK; row++)
    for (int masked = 0; masked < 2; masked++)
      for (size_t b = 0; b < 4; b++) {
        float *m = galloc(NQ), *l = galloc(NQ), *al = galloc(NQ), *st = galloc(NK * LD);
        for (size_t c = 0; c < NQ; c++) {
          m[c] = -INFINITY;
          l[c] = 0;
        }
        for (int step = 0; step < 2; step++) {
          for (size_t i = 0; i < NK * LD; i++) st[i] = 4.0f * frand();
          if (step == 0) st[row * LD + BC] = bad[b]; /* column BC, first step only */
          uk->softmax_block(NK, NQ, st, LD, m, l, al, NULL, 0, masked);
          for (size_t c = 0; c < NQ; c++) {
            const int poisoned = c == BC && b < 3 && !(masked && b == 2); /* masked -inf: a masked pair */
            ck_assert_msg(poisoned ? isnan(l[c]) : isfinite(l[c]) && l[c] > 0,
                          "masked %d bad %zu in row %zu step %d col %zu: l %g", masked, b, row, step, c, l[c]);
          }
        }
        gcheck_free(m);
        gcheck_free(l);
        gcheck_free(al);
        gcheck_free(st);
      }
}
END_TEST

/* ---- windowed linear attention's score step: -inf pairs hidden, weights scaled, column sums ---- */
/* The contract promises the scalar loop's bits (each column's sum in key order, one product per
 * weight), so the reference is that loop in float and the comparison is exact. Loop index: nk x
 * nq from 1 x 1 to 43 x 73 (every path's four-strip loop and its tails) with padded rows (ld =
 * nq + 3: the padding must stay untouched; guard zones cover only the ends, so the whole array is
 * compared), -inf entries (masked pairs, or infinite inputs when unmasked: NaN), a NaN entry,
 * fac NULL or not. */
START_TEST(window_block_values) {
  const size_t nk = 1 + (size_t)_i * 7, nq = 1 + (size_t)_i * 12, ld = nq + 3;
  float *in = malloc(nk * ld * sizeof(float)), *fac = malloc(nq * sizeof(float)), *den0 = malloc(nq * sizeof(float));
  for (size_t e = 0; e < nk * ld; e++) in[e] = e % 11 == 3 ? -INFINITY : 4.0f * frand();
  in[(nk / 2) * ld + nq / 2] = NAN;
  for (size_t c = 0; c < nq; c++) fac[c] = 3.0f * frand(), den0[c] = 2.0f * frand();
  for (int masked = 0; masked < 2; masked++)
    for (int use_fac = 0; use_fac < 2; use_fac++) {
      float *st = galloc(nk * ld), *den = galloc(nq), *want = malloc(nk * ld * sizeof(float)), wden[80];
      memcpy(st, in, nk * ld * sizeof(float));
      memcpy(want, in, nk * ld * sizeof(float));
      memcpy(den, den0, nq * sizeof(float));
      memcpy(wden, den0, nq * sizeof(float));
      for (size_t j = 0; j < nk; j++)
        for (size_t c = 0; c < nq; c++) {
          const float x = want[j * ld + c];
          want[j * ld + c] = x == -INFINITY ? (masked ? 0.0f : NAN) : use_fac ? x * fac[c] : x;
          wden[c] += want[j * ld + c];
        }
      uk->window_block(nk, nq, st, ld, use_fac ? fac : NULL, den, masked);
      tu_assert_same_bits("window_block weights", want, st, nk * ld * sizeof(float));
      tu_assert_same_bits("window_block sums", wden, den, nq * sizeof(float));
      gcheck_free(st);
      gcheck_free(den);
      free(want);
    }
  free(in), free(fac), free(den0);
}
END_TEST

/* ---- GAU's relu^2 block step: bias scalar / strided (negative stride too), masking, counts ---- */
/* Loop index 0..7: 1 x 1 .. 36 x 22 with padding (ld = nq + 3); 8..10: one contiguous column
 * (nq = ld = 1, a decode step's own path) of 3, 16 and 37 keys. Each mode runs again with the
 * statistics (from nonzero starting sums, stride nq + 1): ST and the counts the same bits, and
 * the sums of w, w^2 and w log w added over the column's weights (NaN where one is NaN). */
START_TEST(gau_block_steps) {
  const size_t row_nk[] = {3, 16, 37};
  const int row = _i >= 8;
  const size_t nk = row ? row_nk[_i - 8] : 1 + (size_t)_i * 5, nq = row ? 1 : 1 + (size_t)_i * 3;
  const size_t ld = row ? 1 : nq + 3, lds = nq + 1;
  float *st = galloc(nk * ld), *cnt = galloc(nq), *in = malloc(nk * ld * sizeof(float));
  float *st2 = galloc(nk * ld), *cnt2 = galloc(nq), *sums = galloc(3 * lds);
  float *bias = malloc((nk + nq + 8) * sizeof(float));
  for (size_t e = 0; e < nk + nq + 8; e++) bias[e] = 3.0f * frand();
  for (int mode = 0; mode < 6; mode++) { /* bias: scalar, stride +1 (rows apart by nq), stride -1; masked or not */
    const int masked = mode % 2, kind = mode / 2;
    for (size_t j = 0; j < nk; j++)
      for (size_t r = 0; r < nq; r++) {
        float x = 4.0f * frand();
        if ((j + 2 * r) % 7 == 3) x = -INFINITY; /* masked (or, unmasked, a non-finite input) */
        if ((j * 3 + r) % 11 == 5) x = NAN;
        in[j * ld + r] = st[j * ld + r] = st2[j * ld + r] = x;
      }
    for (size_t r = 0; r < nq; r++) cnt[r] = cnt2[r] = (float)r;
    for (size_t e = 0; e < 3 * lds; e++) sums[e] = e % lds < nq ? 0.5f * (float)(e / lds + 1) : 7.0f;
    const float beta = -0.7f;
    const float *b = kind == 0 ? NULL : kind == 1 ? bias : bias + nk + 4;
    const ptrdiff_t bld = kind == 0 ? 0 : kind == 1 ? 1 : -1;
    uk->gau_block(nk, nq, st, ld, beta, b, bld, cnt, NULL, 0, masked);
    uk->gau_block(nk, nq, st2, ld, beta, b, bld, cnt2, sums, lds, masked);
    tu_assert_same_bits("GAU weights with statistics", st, st2, nk * ld * sizeof(float));
    tu_assert_same_bits("GAU counts with statistics", cnt, cnt2, nq * sizeof(float));
    for (size_t r = 0; r < nq; r++) {
      double want_cnt = (double)r, ws[3] = {0.5, 1.0, 1.5}, mag[3] = {0.5, 1.0, 1.5};
      for (size_t j = 0; j < nk; j++) {
        const float x = in[j * ld + r];
        const float bb = b ? b[(ptrdiff_t)j * bld + (ptrdiff_t)r] : beta;
        const double y = (double)(x + bb); /* the kernel's float sum: the square is then within 1 ulp */
        double ref = isnan(y) ? NAN : y > 0 ? y * y : 0.0;
        if (x == -INFINITY) ref = masked ? 0.0 : NAN;
        want_cnt += !(masked && x == -INFINITY);
        const double got = st[j * ld + r];
        ck_assert_msg(isnan(ref) ? isnan(got) : fabs(got - ref) <= 1e-6 * fabs(ref), "mode %d (%zu,%zu): %g vs %g",
                      mode, j, r, got, ref);
        const double w = got, lw = w > 0 ? w * log(w) : w == 0 ? 0.0 : NAN; /* the kernel's own weight */
        ws[0] += w, ws[1] += w * w, ws[2] += lw;
        mag[0] += fabs(w), mag[1] += w * w, mag[2] += fabs(lw) + w * (1.0 + fabs(log(fmax(w, 1e-30))));
      }
      ck_assert_msg(cnt[r] == (float)want_cnt, "mode %d count %zu: %g vs %g", mode, r, cnt[r], want_cnt);
      /* fp32 sums of nk + 1 terms (each within a few u, log's 4u) relative to their magnitudes */
      for (size_t i = 0; i < 3; i++) {
        const double got = sums[i * lds + r];
        ck_assert_msg(isnan(ws[i]) ? isnan(got) : fabs(got - ws[i]) <= (double)(nk + 8) * 6e-8 * mag[i],
                      "mode %d sum %zu col %zu: %.9g vs %.9g", mode, i, r, got, ws[i]);
      }
    }
    for (size_t e = 0; e < 3 * lds; e++)
      if (e % lds >= nq) ck_assert_msg(sums[e] == 7.0f, "sums padding %zu", e);
  }
  free(in), free(bias);
  float *bufs[] = {st, cnt, st2, cnt2, sums};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gcheck_free(bufs[i]);
}
END_TEST

/* ---- few query rows (few_scores, few_pv): K/V in place as fp32, fp16 or bf16 ---- */
/* Shapes around every tile edge (4 keys, up to 4 rows, 4 vectors of columns, the vector's tail),
 * strides above the widths, guard zones around both outputs (padding between rows untouched).
 * Against a double loop over the rounded values, with the GEMM's bound; then the claims the
 * engine relies on: a half call gives the bits of the fp32 call on the converted values, and
 * one head's few_pv gives the GEMM's bits (check_kv_half's bit-for-bit test needs both). */
static uint16_t few_bits(attn_dtype ty, float x) {
  return ty == ATTN_F16 ? hr_f16_bits(hr_f16_round((double)x)) : hr_bf16_bits(x);
}
static double few_value(attn_dtype ty, uint16_t h) { return ty == ATTN_F16 ? hr_f16_value(h) : hr_bf16_value(h); }

/* n elements of type ty from x (rounded to it; x becomes the rounded values): a float buffer, or
 * the 16-bit patterns in *h. */
static const void *few_store(attn_dtype ty, float *x, size_t n, uint16_t **h) {
  *h = NULL;
  if (ty == ATTN_F32) return x;
  *h = malloc((n + 1) * sizeof(uint16_t));
  ck_assert_ptr_nonnull(*h);
  for (size_t i = 0; i < n; i++) (*h)[i] = few_bits(ty, x[i]), x[i] = (float)few_value(ty, (*h)[i]);
  return *h;
}

/* Each case runs under one prefetch policy (attn_few_pf, the table's few_pf) and compares with
 * calls under the other where it compares bits: where the rows are prefetched changes no result. */
static attn_few_pf few_other(attn_few_pf pf) { return pf == ATTN_FEW_PF_L1 ? ATTN_FEW_PF_L2 : ATTN_FEW_PF_L1; }

static void few_case(attn_dtype ty, attn_few_pf pf, size_t nk, size_t nq, size_t d, size_t dv, int scaled, int dense) {
  const size_t ldk = dense ? d : d + 3, ldq = d + 1, ldst = nq + 2, ldp = nq + 1, ldv = dense ? dv : dv + 5;
  const size_t lda = dv + 3;
  const size_t nkk = nk * ldk + 1, nvv = nk * ldv + 1;
  float *k = malloc(nkk * sizeof(float)), *v = malloc(nvv * sizeof(float)), *q = malloc(nq * ldq * sizeof(float));
  float *pt = malloc((nk * ldp + 1) * sizeof(float)), *al = malloc(nq * sizeof(float));
  float *st = galloc(nk * ldst + 1), *acc = galloc(nq * lda), *acc0 = malloc(nq * lda * sizeof(float));
  for (size_t i = 0; i < nkk; i++) k[i] = frand();
  for (size_t i = 0; i < nvv; i++) v[i] = frand();
  for (size_t i = 0; i < nq * ldq; i++) q[i] = frand();
  for (size_t i = 0; i < nk * ldp + 1; i++) pt[i] = frand() + 1.0f; /* weights in [0, 2) */
  for (size_t i = 0; i < nq; i++) al[i] = frand();
  for (size_t i = 0; i < nk * ldst + 1; i++) st[i] = 7.0f;
  for (size_t i = 0; i < nq * lda; i++) acc[i] = acc0[i] = frand();
  uint16_t *kh, *vh;
  const void *kx = few_store(ty, k, nkk, &kh), *vx = few_store(ty, v, nvv, &vh);
  const float *alpha = scaled ? al : NULL;
  uk->few_scores(ty, pf, NULL, nk, nq, d, kx, ldk, q, ldq, st, ldst);
  uk->few_pv(ty, pf, NULL, nq, dv, nk, pt, ldp, vx, ldv, acc, lda, alpha);
  for (size_t j = 0; j < nk; j++)
    for (size_t r = 0; r < ldst; r++) {
      const float got = st[j * ldst + r];
      if (r >= nq) { /* padding */
        ck_assert_msg(got == 7.0f, "few_scores wrote padding (%zu, %zu)", j, r);
        continue;
      }
      double ref = 0, mag = 0;
      for (size_t p = 0; p < d; p++)
        ref += (double)k[j * ldk + p] * q[r * ldq + p], mag += fabs(k[j * ldk + p] * q[r * ldq + p]);
      const double tol = (double)(d + 2) * 5.960464477539063e-08 * mag + 1e-30;
      ck_assert_msg(fabs(got - ref) <= tol, "few_scores %d nk=%zu nq=%zu d=%zu at (%zu,%zu): %a, want %a", (int)ty, nk,
                    nq, d, j, r, (double)got, ref);
    }
  for (size_t r = 0; r < nq; r++)
    for (size_t c = 0; c < lda; c++) {
      const float got = acc[r * lda + c];
      if (c >= dv) {
        ck_assert_msg(memcmp(&got, &acc0[r * lda + c], sizeof got) == 0, "few_pv wrote padding (%zu, %zu)", r, c);
        continue;
      }
      const double old = (double)acc0[r * lda + c] * (scaled ? (double)al[r] : 1.0);
      double ref = old, mag = fabs(old);
      for (size_t j = 0; j < nk; j++)
        ref += (double)pt[j * ldp + r] * v[j * ldv + c], mag += fabs(pt[j * ldp + r] * v[j * ldv + c]);
      const double tol = (double)(nk + 2) * 5.960464477539063e-08 * mag + 1e-30;
      ck_assert_msg(fabs(got - ref) <= tol, "few_pv %d nq=%zu dv=%zu nk=%zu at (%zu,%zu): %a, want %a", (int)ty, nq, dv,
                    nk, r, c, (double)got, ref);
    }
  /* the same bits: fp32 on the rounded values (scores, P V), and the GEMM (P V) */
  float *st2 = malloc((nk * ldst + 1) * sizeof(float)), *acc2 = malloc(nq * lda * sizeof(float));
  memcpy(st2, st, (nk * ldst + 1) * sizeof(float));
  memcpy(acc2, acc0, nq * lda * sizeof(float));
  uk->few_scores(ATTN_F32, pf, NULL, nk, nq, d, k, ldk, q, ldq, st2, ldst);
  uk->few_pv(ATTN_F32, pf, NULL, nq, dv, nk, pt, ldp, v, ldv, acc2, lda, alpha);
  ck_assert_msg(memcmp(st2, st, (nk * ldst + 1) * sizeof(float)) == 0, "few_scores %d: not the fp32 bits", (int)ty);
  ck_assert_msg(memcmp(acc2, acc, nq * lda * sizeof(float)) == 0, "few_pv %d: not the fp32 bits", (int)ty);
  memcpy(acc2, acc0, nq * lda * sizeof(float));
  uk->gemm(nq, dv, nk, pt, 1, ldp, v, ldv, acc2, lda, alpha, 1);
  ck_assert_msg(memcmp(acc2, acc, nq * lda * sizeof(float)) == 0, "few_pv %d nq=%zu dv=%zu nk=%zu: not the GEMM's bits",
                (int)ty, nq, dv, nk);
  gcheck_free(st);
  gcheck_free(acc);
  free(st2), free(acc2), free(acc0), free(k), free(v), free(q), free(pt), free(al), free(kh), free(vh);
}

/* Several heads at once (attn_few_heads): heads side by side in a token's row (K and V), with
 * their own q, ST, P, acc and alpha regions; per head, the scores are the bits of a one-head call
 * and P V follows the float64 loop; a half call gives the fp32 call's bits; guard zones around
 * every output region. */
static void few_heads_case(attn_dtype ty, attn_few_pf pf, size_t nh, size_t nk, size_t nq, size_t d, size_t dv,
                           int scaled) {
  const size_t hk = d + 1, ldk = nh * hk + 2, hv = dv + 2, ldv = nh * hv + 1;
  const size_t ldq = d + 1, hq = nq * ldq + 5, ldst = nq + 1, hs = nk * ldst + 3;
  const size_t ldp = nq + 2, hp = nk * ldp + 1, lda = dv + 3, ha = nq * lda + 4, hal = nq + 1;
  const size_t nkk = nk * ldk + 1, nvv = nk * ldv + 1;
  float *k = malloc(nkk * sizeof(float)), *v = malloc(nvv * sizeof(float)), *q = malloc(nh * hq * sizeof(float));
  float *pt = malloc((nh * hp + 1) * sizeof(float)), *al = malloc(nh * hal * sizeof(float));
  float *st = galloc(nh * hs), *acc = galloc(nh * ha), *acc0 = malloc(nh * ha * sizeof(float));
  float *one = malloc((hs + 1) * sizeof(float));
  for (size_t i = 0; i < nkk; i++) k[i] = frand();
  for (size_t i = 0; i < nvv; i++) v[i] = frand();
  for (size_t i = 0; i < nh * hq; i++) q[i] = frand();
  for (size_t i = 0; i < nh * hp + 1; i++) pt[i] = frand() + 1.0f;
  for (size_t i = 0; i < nh * hal; i++) al[i] = frand();
  for (size_t i = 0; i < nh * hs; i++) st[i] = 7.0f;
  for (size_t i = 0; i < nh * ha; i++) acc[i] = acc0[i] = frand();
  uint16_t *kh, *vh;
  const void *kx = few_store(ty, k, nkk, &kh), *vx = few_store(ty, v, nvv, &vh);
  const attn_few_heads hdk = {nh, hk, hq, hs, 0, 0, 0, 0, NULL, 0, 0}, hdv = {nh, 0, 0, 0, hp, hv, ha, hal, NULL, 0, 0};
  uk->few_scores(ty, pf, &hdk, nk, nq, d, kx, ldk, q, ldq, st, ldst);
  uk->few_pv(ty, pf, &hdv, nq, dv, nk, pt, ldp, vx, ldv, acc, lda, scaled ? al : NULL);
  const size_t es = ty == ATTN_F32 ? sizeof(float) : sizeof(uint16_t);
  for (size_t h = 0; h < nh; h++) {
    for (size_t i = 0; i < hs; i++) one[i] = 7.0f;
    uk->few_scores(ty, few_other(pf), NULL, nk, nq, d, (const char *)kx + h * hk * es, ldk, q + h * hq, ldq, one, ldst);
    ck_assert_msg(memcmp(one, st + h * hs, hs * sizeof(float)) == 0, "few_scores %d heads=%zu: head %zu differs",
                  (int)ty, nh, h);
    for (size_t r = 0; r < nq; r++)
      for (size_t c = 0; c < lda; c++) {
        const float got = acc[h * ha + r * lda + c], was = acc0[h * ha + r * lda + c];
        if (c >= dv) {
          ck_assert_msg(memcmp(&got, &was, sizeof got) == 0, "few_pv heads wrote padding (%zu, %zu, %zu)", h, r, c);
          continue;
        }
        const double old = (double)was * (scaled ? (double)al[h * hal + r] : 1.0);
        double ref = old, mag = fabs(old);
        for (size_t j = 0; j < nk; j++) {
          const double t = (double)pt[h * hp + j * ldp + r] * v[j * ldv + h * hv + c];
          ref += t, mag += fabs(t);
        }
        const double tol = (double)(nk + 3) * 5.960464477539063e-08 * mag + 1e-30;
        ck_assert_msg(fabs(got - ref) <= tol, "few_pv %d heads=%zu nq=%zu dv=%zu nk=%zu at (%zu,%zu,%zu): %a, want %a",
                      (int)ty, nh, nq, dv, nk, h, r, c, (double)got, ref);
      }
  }
  float *acc2 = malloc(nh * ha * sizeof(float));
  memcpy(acc2, acc0, nh * ha * sizeof(float));
  uk->few_pv(ATTN_F32, few_other(pf), &hdv, nq, dv, nk, pt, ldp, v, ldv, acc2, lda, scaled ? al : NULL);
  ck_assert_msg(memcmp(acc2, acc, nh * ha * sizeof(float)) == 0, "few_pv %d heads: not the fp32 bits", (int)ty);
  gcheck_free(st);
  gcheck_free(acc);
  free(acc2), free(acc0), free(one), free(k), free(v), free(q), free(pt), free(al), free(kh), free(vh);
}

START_TEST(few_rows_heads) {
  const attn_dtype ty = _i == 0 ? ATTN_F32 : _i == 1 ? ATTN_F16 : ATTN_BF16;
  static const size_t nhs[] = {2, 3, 7};
  /* key counts around a head's key steps in P V (8 keys for one row; 32 for several rows on the
   * AVX-512 path): within one step, a step and a tail, several steps and a tail */
  static const size_t nks[] = {1, 5, 8, 17, 40, 64, 97};
  static const size_t nqs[] = {1, 3, 4, 8};
  /* value widths around P V's tiles of 4 vectors (128: whole tiles on every path, 131 and 200:
   * whole tiles and a tail) */
  static const size_t ds[] = {3, 16, 33, 64, 72, 128, 131, 200};
  for (size_t a = 0; a < sizeof nhs / sizeof nhs[0]; a++)
    for (size_t b = 0; b < sizeof nks / sizeof nks[0]; b++)
      for (size_t c = 0; c < sizeof nqs / sizeof nqs[0]; c++)
        few_heads_case(ty, (attn_few_pf)((a + b + c) % 2 == 0), nhs[a], nks[b], nqs[c], ds[(a + b + c) % 5],
                       ds[(a + 2 * b + c + 1) % 8], (int)((a + b + c) % 2));
}
END_TEST

START_TEST(few_rows_shapes) {
  const attn_dtype ty = _i == 0 ? ATTN_F32 : _i == 1 ? ATTN_F16 : ATTN_BF16;
  static const size_t nks[] = {0, 1, 3, 4, 5, 9, 40};
  static const size_t nqs[] = {1, 2, 3, 4, 5, 8, 9};
  static const size_t ds[] = {1, 3, 4, 7, 8, 15, 16, 17, 33, 64, 65, 72};
  for (size_t a = 0; a < sizeof nks / sizeof nks[0]; a++)
    for (size_t b = 0; b < sizeof nqs / sizeof nqs[0]; b++)
      for (size_t c = 0; c < sizeof ds / sizeof ds[0]; c += 1 + (a + b) % 2)
        few_case(ty, (attn_few_pf)((a + c) % 2), nks[a], nqs[b], ds[c], ds[(c + 5) % (sizeof ds / sizeof ds[0])],
                 (int)((a + b + c) % 2), 0);
  /* rows of 128 and more, one query row (P V in tiles of 8 vectors on the paths with 32
   * registers while whole ones fit, then of 4, and a tail) and two; rows contiguous (fp32 rows
   * that one tile reads whole take no software prefetch) or apart */
  static const size_t wide[] = {128, 131, 200, 256};
  for (size_t e = 0; e < sizeof wide / sizeof wide[0]; e++)
    for (size_t a = 1; a < sizeof nks / sizeof nks[0]; a += 2)
      for (int dense = 0; dense < 2; dense++)
        few_case(ty, (attn_few_pf)((a + e + (size_t)dense) % 2), nks[a], 1 + (a + e) % 2 * (size_t)dense, wide[e],
                 wide[(e + a) % 4], (int)(e % 2), dense);
}
END_TEST

/* few_scores_wide: nh heads side by side in a token's row, Q transposed (d x nq, padded), rows
 * around every tile edge of every path (1 .. 32: vector tails, one to eight vectors) and keys
 * around its key tiles. Against the double loop with the GEMM's bound; guard zones around st and
 * its padding; per head, the bits of a one-head call; a half call, the fp32 call's bits on the
 * rounded values. */
static void few_wide_case(attn_dtype ty, attn_few_pf pf, size_t nh, size_t nk, size_t nq, size_t d) {
  const size_t hk = d + 1, ldk = nh * hk + 2, ldq = nq + 1, hq = d * ldq + 3, ldst = nq + 2, hs = nk * ldst + 3;
  const size_t nkk = nk * ldk + 1;
  float *k = malloc(nkk * sizeof(float)), *q = malloc(nh * hq * sizeof(float)), *st = galloc(nh * hs + 1);
  float *one = malloc((hs + 1) * sizeof(float)), *st2 = malloc((nh * hs + 1) * sizeof(float));
  for (size_t i = 0; i < nkk; i++) k[i] = frand();
  for (size_t i = 0; i < nh * hq; i++) q[i] = frand();
  for (size_t i = 0; i < nh * hs + 1; i++) st[i] = st2[i] = 7.0f;
  uint16_t *kh;
  const void *kx = few_store(ty, k, nkk, &kh);
  const attn_few_heads hd = {nh, hk, hq, hs, 0, 0, 0, 0, NULL, 0, 0};
  uk->few_scores_wide(ty, pf, &hd, nk, nq, d, kx, ldk, q, ldq, st, ldst);
  const size_t es = ty == ATTN_F32 ? sizeof(float) : sizeof(uint16_t);
  for (size_t h = 0; h < nh; h++) {
    for (size_t i = 0; i < hs + 1; i++) one[i] = 7.0f;
    uk->few_scores_wide(ty, few_other(pf), NULL, nk, nq, d, (const char *)kx + h * hk * es, ldk, q + h * hq, ldq, one,
                        ldst);
    ck_assert_msg(memcmp(one, st + h * hs, hs * sizeof(float)) == 0, "few_scores_wide %d heads=%zu: head %zu differs",
                  (int)ty, nh, h);
    for (size_t i = nk * ldst; i < hs; i++)
      ck_assert_msg(st[h * hs + i] == 7.0f, "few_scores_wide wrote past head %zu's keys", h);
    for (size_t j = 0; j < nk; j++)
      for (size_t r = 0; r < ldst; r++) {
        const float got = st[h * hs + j * ldst + r];
        if (r >= nq) {
          ck_assert_msg(got == 7.0f, "few_scores_wide wrote padding (%zu, %zu, %zu)", h, j, r);
          continue;
        }
        double ref = 0, mag = 0;
        for (size_t p = 0; p < d; p++) {
          const double t = (double)k[j * ldk + h * hk + p] * q[h * hq + p * ldq + r];
          ref += t, mag += fabs(t);
        }
        const double tol = (double)(d + 2) * 5.960464477539063e-08 * mag + 1e-30;
        ck_assert_msg(fabs(got - ref) <= tol, "few_scores_wide %d nk=%zu nq=%zu d=%zu at (%zu,%zu,%zu): %a, want %a",
                      (int)ty, nk, nq, d, h, j, r, (double)got, ref);
      }
  }
  ck_assert_msg(st[nh * hs] == 7.0f, "few_scores_wide wrote past the last head");
  uk->few_scores_wide(ATTN_F32, pf, &hd, nk, nq, d, k, ldk, q, ldq, st2, ldst);
  ck_assert_msg(memcmp(st2, st, (nh * hs + 1) * sizeof(float)) == 0, "few_scores_wide %d: not the fp32 bits", (int)ty);
  gcheck_free(st);
  free(one), free(st2), free(k), free(q), free(kh);
}

START_TEST(few_rows_wide) {
  const attn_dtype ty = _i == 0 ? ATTN_F32 : _i == 1 ? ATTN_F16 : ATTN_BF16;
  static const size_t nqs[] = {1, 4, 5, 8, 9, 12, 16, 17, 24, 31, 32};
  static const size_t nks[] = {1, 3, 8, 13, 40};
  static const size_t ds[] = {1, 3, 16, 17, 33, 64, 72};
  for (size_t a = 0; a < sizeof nqs / sizeof nqs[0]; a++)
    for (size_t b = 0; b < sizeof nks / sizeof nks[0]; b++)
      few_wide_case(ty, (attn_few_pf)((a + b) % 2), 1 + (a + b) % 3, nks[b], nqs[a], ds[(a + 2 * b) % 7]);
}
END_TEST

/* ---- selective attention's selection sums: exclusive running sums of relu'd rows ---- */
/* The reference: row jj's first follower (tn for BOS, else d0 + jj clamped to [0, tn]), then
 * fz = run + the relu'd values of the tokens before, in double. */
static size_t sel_first(size_t jj, size_t tn, int64_t d0, int bos) {
  const int64_t d = d0 + (int64_t)jj;
  return bos && jj == 0 ? tn : d <= 0 ? 0 : d < (int64_t)tn ? (size_t)d : tn;
}

/* Every tn 1 .. 67 (each vector tail of every path), 1-5 rows, the first follower before, inside
 * and after the block, BOS or not, rows contiguous (step 1) or a column of a head group (step 3)
 * with padded rows, guard zones around fz and run. Pass 0: multiples of 1/8 in [-4, 4] and run in
 * [0, 8]: every partial sum is exact in float (at most 67 terms of 2^-3 granularity below 2^10),
 * so F must equal the reference bit for bit, whatever the path's order of additions; an off-by-one
 * token, a lost carry or a relu that lets a negative through shows as a whole term. Pass 1:
 * random floats in [-2, 2]: each F is a sum of at most tn + 1 non-negative floats, so any order
 * is within (tn + 1) 2^-24 of the exact sum (the recursive-summation bound; all terms share a
 * sign); that is asserted. Each case runs again with y (F subtracted from every score of the
 * token's group in place, x inside y, step 3 reading the group's middle column). */
START_TEST(select_scan_values) {
  enum { T = 67, STEP = 3, J = 5 };
  const int exact = _i == 0;
  for (size_t tn = 1; tn <= T; tn++)
    for (size_t step = 1; step <= STEP; step += STEP - 1) {
      const size_t jn = 1 + tn % J, ldx = tn * step + 2, col = step / 2; /* x: column col of each group */
      const int64_t d0s[] = {-3, 0, 1, (int64_t)tn / 2, (int64_t)tn - 1, (int64_t)tn + 2};
      float *x = galloc(jn * ldx);
      for (size_t e = 0; e < jn * ldx; e++)
        x[e] = exact ? (float)((int)(tu_rng_next(&rng) % 65) - 32) / 8.0f : tu_rng_range(&rng, -2.0f, 2.0f);
      for (size_t di = 0; di < sizeof d0s / sizeof d0s[0]; di++)
        for (int bos = 0; bos < 2; bos++) {
          float *fz = galloc(jn * tn), *run = galloc(jn), run0[J];
          for (size_t jj = 0; jj < jn; jj++)
            run[jj] = run0[jj] = exact ? (float)(tu_rng_next(&rng) % 65) / 8.0f : tu_rng_range(&rng, 0.0f, 8.0f);
          uk->select_scan(jn, tn, x + col, ldx, step, d0s[di], bos, run, fz, NULL);
          for (size_t jj = 0; jj < jn; jj++) {
            const size_t first = sel_first(jj, tn, d0s[di], bos);
            double acc = run0[jj];
            for (size_t ti = 0; ti <= tn; ti++) {
              const float got = ti < tn ? fz[jj * tn + ti] : run[jj];
              const double tol = exact ? 0.0 : (double)(tn + 1) * 0x1p-24 * acc;
              ck_assert_msg(fabs((double)got - acc) <= tol,
                            "tn %zu step %zu d0 %lld bos %d row %zu token %zu: %.9g, want %.9g", tn, step,
                            (long long)d0s[di], bos, jj, ti, (double)got, acc);
              const float v = ti < tn ? x[jj * ldx + col + ti * step] : 0.0f;
              if (ti >= first && v > 0.0f) acc += v;
            }
          }
          /* again with y: the same F and sums, bit for bit, and every score of each token's group
           * minus its F in place (x read from the tile it updates); the rows' padding untouched */
          float *y = galloc(jn * ldx), *fz2 = galloc(jn * tn), *run2 = galloc(jn);
          memcpy(y, x, jn * ldx * sizeof(float));
          memcpy(run2, run0, jn * sizeof(float));
          uk->select_scan(jn, tn, y + col, ldx, step, d0s[di], bos, run2, fz2, y);
          tu_assert_same_bits("select_scan F with y", fz, fz2, jn * tn * sizeof(float));
          tu_assert_same_bits("select_scan sums with y", run, run2, jn * sizeof(float));
          for (size_t jj = 0; jj < jn; jj++)
            for (size_t e = 0; e < ldx; e++) {
              const size_t ti = e / step;
              const float want = ti < tn ? x[jj * ldx + e] - fz[jj * tn + ti] : x[jj * ldx + e];
              ck_assert_msg(!memcmp(&y[jj * ldx + e], &want, sizeof want),
                            "tn %zu step %zu row %zu element %zu: %.9g, want %.9g", tn, step, jj, e,
                            (double)y[jj * ldx + e], (double)want);
            }
          gcheck_free(y);
          gcheck_free(fz2);
          gcheck_free(run2);
          gcheck_free(fz);
          gcheck_free(run);
        }
      gcheck_free(x);
    }
}
END_TEST

/* Non-finite selections: +inf and NaN reach only the later tokens of their row (their own F
 * leaves them out), -inf (a score from an infinite input) reaches them as NaN, and a NaN or -inf
 * before the row's first follower (a masked pair) is never read into F. */
START_TEST(select_scan_nonfinite) {
  enum { TN = 37, JN = 3 };
  for (size_t k = 0; k < TN; k += 5) {
    float x[JN * TN], fz[JN * TN], run[JN] = {0.5f, 0.5f, 0.5f};
    for (size_t e = 0; e < JN * TN; e++) x[e] = 0.25f;
    x[0 * TN + k] = INFINITY, x[1 * TN + k] = NAN, x[2 * TN + k] = -INFINITY;
    uk->select_scan(JN, TN, x, TN, 1, -2, 0, run, fz, NULL); /* every row followed from token 0 */
    for (size_t ti = 0; ti < TN; ti++) {
      const float a = fz[0 * TN + ti], b = fz[1 * TN + ti], c = fz[2 * TN + ti];
      ck_assert_msg(ti <= k ? isfinite(a) : a == INFINITY, "inf at %zu: token %zu has %g", k, ti, (double)a);
      ck_assert_msg(ti <= k ? isfinite(b) : isnan(b), "NaN at %zu: token %zu has %g", k, ti, (double)b);
      ck_assert_msg(ti <= k ? c == 0.5f + 0.25f * (float)ti : isnan(c), "-inf at %zu: token %zu has %g", k, ti,
                    (double)c);
    }
    ck_assert(run[0] == INFINITY && isnan(run[1]) && isnan(run[2]));
    if (k == 0) continue;
    for (int bad = 0; bad < 2; bad++) {
      x[k - 1] = bad ? -INFINITY : NAN; /* row 0 alone, followed from token k: k - 1 is never read */
      run[0] = 0.5f;
      uk->select_scan(1, TN, x, TN, 1, (int64_t)k, 0, run, fz, NULL);
      for (size_t ti = 0; ti < TN; ti++)
        ck_assert_msg(ti <= k ? fz[ti] == 0.5f : fz[ti] == INFINITY,
                      "%g before the first follower %zu: token %zu has %g", (double)x[k - 1], k, ti, (double)fz[ti]);
    }
  }
}
END_TEST

/* ---- few_fused: scores, the online-softmax step and P V of one row a head, a few keys a step ---- */
/* nh heads (head h's K rows hk elements after head 0's, V rows hv), nk keys, widths d and dv
 * (rows a few elements wider), a state carried in (a finite m, l > 0, acc) and the statistics'
 * sums or not. F32: the bits of few_scores, softmax_block and few_pv run by run of
 * few_fused_keys keys, head by head (the contract); with nh > 1 each head's bits those of a
 * one-head call. F16 and I8 (a scale per row and head): the F32 call's bits on the converted
 * values. Guard zones around acc and the row state (each head's region). */
enum { FF_PAD = 3 };
static void ff_state(size_t nh, size_t ha, size_t dv, int stats, float **reg) {
  *reg = galloc(nh * ha);
  for (size_t h = 0; h < nh; h++) {
    float *r = *reg + h * ha;
    for (size_t c = 0; c < ha; c++) r[c] = 7.0f;
    for (size_t c = 0; c < dv; c++) r[c] = frand();
    float *rs = r + dv + FF_PAD;
    rs[0] = 0.25f * (float)h, rs[1] = 1.5f, rs[2] = 0.0f;
    if (stats) rs[3] = 0.5f, rs[4] = -0.25f;
  }
}

static void ff_case(attn_few_pf pf, size_t nh, size_t nk, size_t d, size_t dv, int stats, float qs) {
  const size_t ldk = d + 2, ldv = dv + 1, hk = nk * ldk + 3, hv = nk * ldv + 5, hq = d + 1,
               ha = dv + FF_PAD + 5 + FF_PAD;
  const size_t fk = uk->few_fused_keys, kn = nh * hk + 1, vn = nh * hv + 1;
  float *k = malloc(kn * sizeof(float)), *v = malloc(vn * sizeof(float)), *q = malloc(nh * hq * sizeof(float));
  float *ksc = malloc(nh * nk * sizeof(float) + 1), *vsc = malloc(nh * nk * sizeof(float) + 1);
  int8_t *k8 = malloc(kn), *v8 = malloc(vn);
  uint16_t *kh = malloc(kn * sizeof(uint16_t)), *vh = malloc(vn * sizeof(uint16_t));
  float *st = malloc(64 * nh * sizeof(float)), *st1 = malloc(fk * sizeof(float));
  ck_assert(k && v && q && ksc && vsc && k8 && v8 && kh && vh && st && st1);
  for (size_t i = 0; i < nh * hq; i++) q[i] = qs * frand();
  /* int8 values times a scale per (key, head): the F32 operands are the products, rounded once */
  for (size_t i = 0; i < nh * nk; i++)
    ksc[i] = 0.01f + 0.001f * (float)(i % 7), vsc[i] = 0.02f - 0.001f * (float)(i % 5);
  for (size_t i = 0; i < kn; i++) k8[i] = (int8_t)((int)(frand() * 127.0f));
  for (size_t i = 0; i < vn; i++) v8[i] = (int8_t)((int)(frand() * 127.0f));
  float *reg[4];
  for (int t = 0; t < 4; t++) ff_state(nh, ha, dv, stats, &reg[t]);
  for (int ty = 0; ty < 3; ty++) { /* F32, F16, I8 */
    for (size_t h = 0; h < nh; h++)
      for (size_t j = 0; j < nk; j++) {
        for (size_t p = 0; p < d; p++) {
          const size_t e = h * hk + j * ldk + p;
          k[e] = ty == 2 ? (float)k8[e] * ksc[h * nk + j] : frand();
          if (ty == 1) kh[e] = hr_f16_bits(hr_f16_round((double)k[e])), k[e] = (float)hr_f16_value(kh[e]);
        }
        for (size_t c = 0; c < dv; c++) {
          const size_t e = h * hv + j * ldv + c;
          v[e] = ty == 2 ? (float)v8[e] * vsc[h * nk + j] : frand();
          if (ty == 1) vh[e] = hr_f16_bits(hr_f16_round((double)v[e])), v[e] = (float)hr_f16_value(vh[e]);
        }
      }
    /* every head's state alike in the copies 0 (the call), 1 (fp32 call), 2 (run by run), 3 (heads alone) */
    for (int t = 1; t < 4; t++) memcpy(reg[t], reg[0], nh * ha * sizeof(float));
    const attn_few_heads hd = {.n = nh, .k = hk, .v = hv, .q = hq, .a = ha, .sld = 1, .shd = nk};
    const attn_dtype tys[] = {ATTN_F32, ATTN_F16, ATTN_I8};
    const void *kx = ty == 0 ? (const void *)k : ty == 1 ? (const void *)kh : (const void *)k8;
    const void *vx = ty == 0 ? (const void *)v : ty == 1 ? (const void *)vh : (const void *)v8;
    uk->few_fused(tys[ty], pf, &hd, nk, d, dv, kx, ldk, vx, ldv, ty == 2 ? ksc : NULL, ty == 2 ? vsc : NULL, q, st,
                  reg[0] + dv + FF_PAD, stats, reg[0]);
    if (ty) { /* the F32 call's bits on the converted values */
      uk->few_fused(ATTN_F32, few_other(pf), &hd, nk, d, dv, k, ldk, v, ldv, NULL, NULL, q, st, reg[1] + dv + FF_PAD,
                    stats, reg[1]);
      ck_assert_msg(memcmp(reg[0], reg[1], nh * ha * sizeof(float)) == 0,
                    "few_fused %d nh=%zu nk=%zu d=%zu dv=%zu: not the fp32 bits", ty, nh, nk, d, dv);
      continue;
    }
    for (size_t h = 0; h < nh; h++) {
      float *acc = reg[2] + h * ha, *rs = acc + dv + FF_PAD;
      for (size_t a = 0; a < nk; a += fk) {
        const size_t n = nk - a < fk ? nk - a : fk;
        uk->few_scores(ATTN_F32, pf, NULL, n, 1, d, k + h * hk + a * ldk, ldk, q + h * hq, d, st1, 1);
        uk->softmax_block(n, 1, st1, 1, rs, rs + 1, rs + 2, stats ? rs + 3 : NULL, 1, 0);
        uk->few_pv(ATTN_F32, pf, NULL, 1, dv, n, st1, 1, v + h * hv + a * ldv, ldv, acc, dv, rs + 2);
      }
      float *one = reg[3] + h * ha;
      uk->few_fused(ATTN_F32, few_other(pf), NULL, nk, d, dv, k + h * hk, ldk, v + h * hv, ldv, NULL, NULL, q + h * hq,
                    st, one + dv + FF_PAD, stats, one);
    }
    for (size_t e = 0; e < nh * ha; e++) {
      const size_t c = e % ha;
      const int guard = (c >= dv && c < dv + FF_PAD) || c >= dv + FF_PAD + (stats ? 5 : 3);
      ck_assert_msg(!guard || reg[0][e] == 7.0f, "few_fused wrote its guard (head %zu, %zu)", e / ha, c);
      ck_assert_msg(memcmp(&reg[0][e], &reg[2][e], sizeof(float)) == 0,
                    "few_fused nh=%zu nk=%zu d=%zu dv=%zu stats=%d head %zu at %zu: %a, run by run %a", nh, nk, d, dv,
                    stats, e / ha, c, (double)reg[0][e], (double)reg[2][e]);
      ck_assert_msg(memcmp(&reg[0][e], &reg[3][e], sizeof(float)) == 0,
                    "few_fused nh=%zu nk=%zu d=%zu dv=%zu: head %zu alone differs at %zu", nh, nk, d, dv, e / ha, c);
    }
    ck_assert_msg(nk == 0 || reg[0][dv + FF_PAD + 1] != 1.5f, "few_fused: l unchanged");
  }
  for (int t = 0; t < 4; t++) gcheck_free(reg[t]);
  free(k), free(v), free(q), free(ksc), free(vsc), free(k8), free(v8), free(kh), free(vh), free(st), free(st1);
}

/* Keys around the steps (none, within one, steps and a tail), widths around the register row
 * (ATTN_HKV_NV1 vectors: 128 on AVX-512; 131 and 200 past it) and the vector's tail, one head
 * (acc in registers) and several (acc in memory), large logits. */
START_TEST(few_fused_steps) {
  static const size_t nks[] = {0, 5, 16, 37, 100};
  static const size_t dims[][2] = {{3, 5}, {33, 24}, {64, 64}, {128, 128}, {72, 131}, {128, 200}};
  static const size_t nhs[] = {1, 3};
  const attn_few_pf pf = _i % 2 ? ATTN_FEW_PF_L2 : ATTN_FEW_PF_L1;
  for (size_t a = 0; a < sizeof nks / sizeof nks[0]; a++)
    for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++)
      for (size_t c = 0; c < sizeof nhs / sizeof nhs[0]; c++)
        ff_case(pf, nhs[c], nks[a], dims[b][0], dims[b][1], _i / 2, a == 3 ? 30.0f : 1.0f);
}
END_TEST

/* A decode step's head groups: a head-major cache one key head a group (each head's two streams
 * in turn), token-major and paged caches in groups (every token's row, or every page, read along
 * memory). Grouping changes no bit (the parallel suite checks it); this pins the choice, which
 * speed alone would not show. */
START_TEST(few_plan_head_groups) {
  for (int layout = 0; layout < 3; layout++) /* token-major, head-major, head-major pages */
    for (size_t nq = 1; nq <= 3; nq += 2) {
      attn_softmax_desc de;
      attn_softmax_desc_init(&de, nq, 4096, 32, 8, 128, 128);
      de.shape.kv_type = _i ? ATTN_F16 : ATTN_F32;
      if (layout) {
        de.shape.k = (attn_layout){.row_stride = 128, .head_stride = 128 * 4096};
        de.shape.v = de.shape.k;
      }
      const attn_blocked_spec spec = {.shape = &de.shape,
                                      .mask = de.mask,
                                      .scale = de.scale,
                                      .step = &attn_softmax_score_step,
                                      .paged = layout == 2};
      attn_blocked_plan p;
      ck_assert_int_eq(attn_blocked_plan_make(&p, &spec, uk), ATTN_OK);
      ck_assert(p.few && p.heads_together);
      if (layout == 1)
        ck_assert_uint_eq(p.hg, 1);
      else
        ck_assert_uint_gt(p.hg, 1);
      ck_assert(!p.fused); /* GQA: 4 rows a key head */
      /* without GQA, one token: few_fused over head-major caches, paged or not, whatever the type */
      de.shape.h_q = 8, de.shape.h_k = 8;
      if (layout) de.shape.k.head_stride = de.shape.v.head_stride = 128 * 4096;
      ck_assert_int_eq(attn_blocked_plan_make(&p, &spec, uk), ATTN_OK);
      ck_assert_int_eq(p.fused, layout != 0 && nq == 1);
    }
}
END_TEST

static Suite *internal_blocked_suite(attn_isa active) {
  ti_setup(active);
  /* clang-format off */
  return TU_SUITE(active,
    {"gemm", gemm_shapes, (int)NGS}, {"gemm", gemm_last_columns, 12}, {"gemm", gemm_in_place_row, 1},
    {"softmax_block", softmax_block_steps, 15}, {"softmax_block", softmax_block_nonfinite, 5},
      {"softmax_block", gau_block_steps, 11}, {"softmax_block", window_block_values, 7},
    {"few_rows", few_rows_shapes, 3}, {"few_rows", few_rows_heads, 3}, {"few_rows", few_rows_wide, 3},
      {"few_rows", few_plan_head_groups, 2}, {"few_rows", few_fused_steps, 4},
    {"select", select_scan_values, 2}, {"select", select_scan_nonfinite, 1});
  /* clang-format on */
}

int main(void) { return tu_main(internal_blocked_suite); }
