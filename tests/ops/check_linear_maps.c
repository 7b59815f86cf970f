/*
 * Linear attention's feature maps on the ISA path named by ATTN_ISA, against their formulas:
 * TCases "elu1" (elu1's accuracy through the public API) and "exponential" (FAVOR+ against its
 * float64 formula, seed sources against the W of attn_linear_favor_matrix and its transpose, the
 * matrix's properties and contract; exp and favor with features up to +-150; dsoftmax against
 * softmax_rows(Q) softmax_cols(K)^T V, with v = 1, and its shift invariances). The shape table
 * and the properties of every map: check_linear.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LU_SHORT_NAMES /* linear_util.h: T, H, ELU, FAV, SIZES, ... */
#include "linear_util.h"
#include "test_util.h"
#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* elu1                                                                                        */
/* ------------------------------------------------------------------------------------------ */
/* elu1 accuracy through the public API: d = dv = 1, one key 0 (psi = 1) with value 1, so the
 * un-normalised bidirectional output is phi(q) itself; q sweeps [-87, 30] (exp branch below 0). */
enum { ELU_SWEEP = 2001 };
START_TEST(linear_elu1_accuracy_sweep) {
  tu_tensor q, k, v, o;
  tu_tensor_alloc(&q, T, ELU_SWEEP, 1, 1, 0);
  tu_tensor_alloc(&k, T, 1, 1, 1, 0);
  tu_tensor_alloc(&v, T, 1, 1, 1, 0);
  for (size_t i = 0; i < ELU_SWEEP; ++i) *tu_at(&q, i, 0, 0) = (float)(-87.0 + 117.0 * (double)i / (ELU_SWEEP - 1));
  *tu_at(&k, 0, 0, 0) = 0.0f;
  *tu_at(&v, 0, 0, 0) = 1.0f;
  attn_linear_desc d;
  lu_desc(&d, ELU_SWEEP, 1, 1, 1, 1, 1, 1, ELU, BIDIR, UNNORM, 0);
  lu_call_plain(&d, &q, &k, &v, T, NULL, 0, &o);
  const ref_linear_problem p = lu_problem(&d, &q, &k, &v, NULL);
  double *ro = malloc(sizeof(double) * ELU_SWEEP), *rs = malloc(sizeof(double) * ELU_SWEEP);
  ck_assert(ro && rs);
  ref_linear(&p, ro, rs);
  double *tol = tu_dup(TOL_EXP_SWEEP_ELU1, ELU_SWEEP);
  tu_compare("linear.elu1", "elu1 sweep: o = phi(q)", &o, ro, rs, tol);
  free(tol);
  free(ro);
  free(rs);
  tu_tensor_free(&o);
  tu_tensor_free(&q);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* FAVOR+: the float64 formula, seed sources and the matrix                                    */
/* ------------------------------------------------------------------------------------------ */
/* The unstabilised FAVOR+ formula in double, straight from attn.h, for moderate inputs (every
 * exponential finite): phi(x)_f = exp((W x')_f - |x'|^2 / 2) / sqrt(m), x' = sqrt(scale) x
 * rounded to float as the library documents (fl32(sqrtf(scale) x)), o_i = sum_j (phi(q_i).phi(k_j))
 * v_j / sum_j phi(q_i).phi(k_j) (eps = 0) over the keys row i sees. One head, contiguous layouts. */
static void favor_formula(size_t n_q, size_t n_kv, size_t d, size_t dv, size_t m, const float *w, double scale,
                          int causal, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v, double *o) {
  double *pk = malloc(sizeof(double) * n_kv * m), *pq = malloc(sizeof(double) * m);
  ck_assert(pk && pq);
  const float xs = sqrtf((float)scale);
  for (int side = 0; side < 2; ++side) {
    const size_t rows = side ? n_q : n_kv;
    for (size_t r = 0; r < rows; ++r) {
      const float *x = side ? tu_at(q, r, 0, 0) : tu_at(k, r, 0, 0);
      double n2 = 0.0, xp[64];
      for (size_t t = 0; t < d; ++t) {
        xp[t] = (double)(xs * x[t]);
        n2 += xp[t] * xp[t];
      }
      double *phi = side ? pq : pk + r * m;
      for (size_t f = 0; f < m; ++f) {
        double dot = 0.0;
        for (size_t t = 0; t < d; ++t) dot += (double)w[f * d + t] * xp[t];
        phi[f] = exp(dot - 0.5 * n2) / sqrt((double)m);
      }
      if (!side) continue;
      double den = 0.0;
      for (size_t c = 0; c < dv; ++c) o[r * dv + c] = 0.0;
      for (size_t j = 0; j < n_kv; ++j) {
        if (causal && !ref_visible(r, j, n_q, n_kv, REF_UNBOUNDED, 0, 0)) continue;
        double kern = 0.0;
        for (size_t f = 0; f < m; ++f) kern += pq[f] * pk[j * m + f];
        for (size_t c = 0; c < dv; ++c) o[r * dv + c] += kern * (double)*tu_at(v, j, 0, c);
        den += kern;
      }
      for (size_t c = 0; c < dv; ++c) o[r * dv + c] = den > 0.0 ? o[r * dv + c] / den : 0.0;
    }
  }
  free(pk);
  free(pq);
}

/* FAVOR+ with the caller's W (Gaussian floats) and eps = 0 equals the float64 formula, causal
 * (chunk 7 and the path's default) and bidirectional, m = 4d, 37 and 1; the reference agrees
 * with the formula to 1e-12 (it is written in another, stabilised, form). */
START_TEST(linear_favor_caller_w_formula) {
  static const size_t ms[] = {0, 37, 1};
  const size_t n = 90, dd = 12, dv = 6, m0 = ms[_i % 3];
  const int mode = _i / 3; /* 0 causal default chunk, 1 causal chunk 7, 2 bidirectional */
  tu_rng rng = tu_rng_of(12000 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n, n, 1, 1, 1, dd, dv);
  attn_linear_desc d;
  lu_desc(&d, n, n, 1, 1, 1, dd, dv, FAV, mode < 2, NORM, mode == 1 ? 7 : 0);
  d.eps = 0.0f;
  d.m = m0;
  float *w = lu_set_favor(&d, 2, 0, &rng);
  const size_t m = lu_feature_size(&d);
  lu_state st;
  if (mode < 2) lu_state_make(&st, &d);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, mode < 2 ? &st.s : NULL, 0, &o);
  double *fo = malloc(sizeof(double) * n * dv);
  ck_assert_ptr_nonnull(fo);
  favor_formula(n, n, dd, dv, m, w, (double)d.scale, mode < 2, &x.q, &x.k, &x.v, fo);
  lu_ref r;
  lu_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r);
  for (size_t e = 0; e < n * dv; ++e)
    ck_assert_msg(fabs(r.o[e] - fo[e]) <= 1e-12 * (r.scale[e] + 1e-300), "reference %.17g vs formula %.17g at %zu",
                  r.o[e], fo[e], e);
  lu_compare("favor caller W, eps 0: float64 formula", FAV, n, m, &o, fo, r.scale, r.arg, 1.0);
  if (mode < 2) {
    lu_check_state("favor caller W state", &d, &x.k, &x.v, NULL, 0, &st.s);
    lu_state_free(&st);
  }
  lu_ref_free(&r);
  free(fo);
  free(w);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* A seed source is the caller source with the W attn_linear_favor_matrix writes for the same
 * descriptor, and the caller source is ATTN_FAVOR_CALLER_T with W transposed: outputs and states
 * equal bit for bit, for both seed sources, m = 4d and 37, a causal prefill continued by a decode
 * step, and a bidirectional call. */
START_TEST(linear_favor_seed_equals_caller) {
  const attn_favor_source src = _i % 2 ? ATTN_FAVOR_SEED_SQRT_D : ATTN_FAVOR_SEED_CHI;
  const size_t m0 = (_i / 2) % 2 ? 37 : 0, n = 70, dd = 9, dv = 5;
  const int bidir = _i / 4;
  tu_rng rng = tu_rng_of(12100 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n + 1, n + 1, 4, 2, 2, dd, dv);
  attn_linear_desc ds;
  lu_desc(&ds, n, n, 4, 2, 2, dd, dv, FAV, !bidir, NORM, 0);
  ds.m = m0;
  ds.favor_source = src;
  ds.favor_seed = 0x5EED0000u + (uint64_t)_i;
  const size_t m = lu_feature_size(&ds);
  float *w = malloc(sizeof(float) * m * dd);
  ck_assert_ptr_nonnull(w);
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&ds, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear_favor_matrix(&ds, w, m * dd, mem, ws), ATTN_OK);
  tu_free(mem);
  float *wt = malloc(sizeof(float) * m * dd);
  ck_assert_ptr_nonnull(wt);
  for (size_t f = 0; f < m; ++f)
    for (size_t t = 0; t < dd; ++t) wt[t * m + f] = w[f * dd + t];
  attn_linear_desc dc[3] = {ds, ds, ds}; /* seed, caller W, caller W^T */
  dc[1].favor_source = ATTN_FAVOR_CALLER;
  dc[1].favor_w = w;
  dc[2].favor_source = ATTN_FAVOR_CALLER_T;
  dc[2].favor_w = wt;
  static const char *names[3] = {"seed", "caller W from favor_matrix", "caller W^T"};
  lu_state st[3];
  tu_tensor o[3];
  const tu_tensor q0 = tu_rows_view(&x.q, 0, n), k0 = tu_rows_view(&x.k, 0, n), v0 = tu_rows_view(&x.v, 0, n);
  const tu_tensor q1 = tu_rows_view(&x.q, n, 1), k1 = tu_rows_view(&x.k, n, 1), v1 = tu_rows_view(&x.v, n, 1);
  for (int c = 0; c < 3; ++c) {
    if (!bidir) lu_state_make(&st[c], &dc[c]);
    lu_call_plain(&dc[c], &q0, &k0, &v0, T, bidir ? NULL : &st[c].s, 0, &o[c]);
  }
  lu_check_output("seed source", &ds, &q0, &k0, &v0, NULL, 0, &o[0]);
  char what[96];
  for (int c = 1; c < 3; ++c) {
    snprintf(what, sizeof what, "o: %s vs %s", names[0], names[c]);
    tu_assert_same_bits(what, o[0].data, o[c].data, sizeof(float) * o[0].span);
    if (!bidir) {
      snprintf(what, sizeof what, "state: %s vs %s", names[0], names[c]);
      tu_assert_same_bits(what, st[0].s.data, st[c].s.data, sizeof(float) * lu_state_floats(&st[0].s));
    }
  }
  for (int c = 0; c < 3; ++c) tu_tensor_free(&o[c]);
  if (!bidir) { /* a decode step on each state */
    for (int c = 0; c < 3; ++c) {
      attn_linear_desc step = dc[c];
      step.shape.n_q = step.shape.n_kv = 1;
      lu_call_plain(&step, &q1, &k1, &v1, T, &st[c].s, 0, &o[c]);
    }
    for (int c = 1; c < 3; ++c) {
      snprintf(what, sizeof what, "decode step: %s vs %s", names[0], names[c]);
      tu_assert_same_bits(what, o[0].data, o[c].data, sizeof(float) * o[0].span);
      snprintf(what, sizeof what, "state after decode: %s vs %s", names[0], names[c]);
      tu_assert_same_bits(what, st[0].s.data, st[c].s.data, sizeof(float) * lu_state_floats(&st[0].s));
    }
    for (int c = 0; c < 3; ++c) {
      tu_tensor_free(&o[c]);
      lu_state_free(&st[c]);
    }
  }
  free(wt);
  free(w);
  tu_qkv_free(&x);
}
END_TEST

/* attn_linear_favor_matrix: statuses (nothing written on error), exactly m * d floats written,
 * deterministic, a smaller m is a prefix of a larger one, rows orthogonal within each block of d,
 * row norms sqrt(d) (SEED_SQRT_D) or chi-distributed with d degrees of freedom (SEED_CHI, whose
 * first block has the same directions: the same Gaussians are drawn first). */
static float *fm_matrix(size_t dd, size_t m, attn_favor_source src, uint64_t seed) {
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, 3, 3, 1, 1, dd, 4, FAV), ATTN_OK);
  d.m = m;
  d.favor_source = src;
  d.favor_seed = seed;
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  float *w = tu_alloc(sizeof(float) * m * dd, 0);
  ck_assert_int_eq(attn_linear_favor_matrix(&d, w, m * dd, mem, ws), ATTN_OK);
  tu_assert_guards("favor_matrix workspace", mem);
  tu_assert_guards("favor_matrix W", w);
  for (size_t e = 0; e < m * dd; ++e)
    ck_assert_msg(isfinite(w[e]), "W[%zu] = %g not written or not finite", e, (double)w[e]);
  tu_free(mem);
  return w;
}

static double fm_dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t t = 0; t < n; ++t) s += (double)a[t] * (double)b[t];
  return s;
}

START_TEST(linear_favor_matrix_properties) {
  static const size_t ds[] = {1, 7, 16, 33};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; ++i) {
    const size_t dd = ds[i], m = 3 * dd + 5;
    float *chi = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 42), *sq = fm_matrix(dd, m, ATTN_FAVOR_SEED_SQRT_D, 42);
    float *again = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 42), *other = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 43);
    float *prefix = fm_matrix(dd, 2 * dd + 1, ATTN_FAVOR_SEED_CHI, 42);
    tu_assert_same_bits("favor_matrix: the same seed twice", chi, again, sizeof(float) * m * dd);
    tu_assert_same_bits("favor_matrix: m rows are the first m rows of a larger m", prefix, chi,
                        sizeof(float) * (2 * dd + 1) * dd);
    ck_assert_msg(memcmp(chi, other, sizeof(float) * m * dd) != 0, "seeds 42 and 43 give the same W");
    for (size_t r = 0; r < m; ++r) {
      const double nsq = sqrt(fm_dot(sq + r * dd, sq + r * dd, dd)),
                   nchi = sqrt(fm_dot(chi + r * dd, chi + r * dd, dd));
      ck_assert_msg(fabs(nsq - sqrt((double)dd)) <= 1e-6 * sqrt((double)dd), "d %zu row %zu: SEED_SQRT_D norm %.9g", dd,
                    r, nsq);
      ck_assert_msg(nchi > 0.0, "d %zu row %zu: zero row", dd, r);
      for (size_t s = r + 1; s < m && s / dd == r / dd; ++s) { /* orthogonal within a block */
        const double c = fm_dot(sq + r * dd, sq + s * dd, dd) / (double)dd;
        const double cc =
            fm_dot(chi + r * dd, chi + s * dd, dd) / (nchi * sqrt(fm_dot(chi + s * dd, chi + s * dd, dd)));
        ck_assert_msg(fabs(c) <= 1e-6 && fabs(cc) <= 1e-6, "d %zu rows %zu, %zu: cosines %.3g %.3g", dd, r, s, c, cc);
      }
      if (r < dd) /* the first block: the same directions */
        for (size_t t = 0; t < dd; ++t)
          ck_assert_msg(fabs(chi[r * dd + t] / nchi - sq[r * dd + t] / nsq) <= 1e-6, "d %zu row %zu: directions differ",
                        dd, r);
    }
    tu_free(chi);
    tu_free(sq);
    tu_free(again);
    tu_free(other);
    tu_free(prefix);
  }
  /* chi norms: |W_r|^2 has mean d and variance 2d; over 512 rows the mean of |W_r|^2 / d lies
   * within 6 standard deviations (6 sqrt(2 / (d 512))) of 1 */
  const size_t dd = 16, m = 512;
  float *chi = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 7);
  double mean = 0.0, spread = 0.0;
  for (size_t r = 0; r < m; ++r) {
    const double x = fm_dot(chi + r * dd, chi + r * dd, dd) / (double)dd;
    mean += x / (double)m;
    spread = fmax(spread, fabs(x - 1.0));
  }
  ck_assert_msg(fabs(mean - 1.0) <= 6.0 * sqrt(2.0 / (double)(dd * m)), "chi norms: mean |W_r|^2 / d = %.4f", mean);
  ck_assert_msg(spread > 0.05, "chi norms all equal (spread %.3g): not drawn", spread);
  tu_free(chi);
}
END_TEST

START_TEST(linear_favor_matrix_contract) {
  const size_t dd = 8, m = 32;
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, 3, 3, 1, 1, dd, 4, FAV), ATTN_OK);
  size_t need = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &need), ATTN_OK);
  void *ws = tu_alloc(need + 256, 0);
  float *w = tu_alloc(sizeof(float) * (m * dd + 16), 0);
  const float *pristine = tu_alloc(sizeof(float) * (m * dd + 16), 0);
  const size_t wbytes = sizeof(float) * (m * dd + 16);
  attn_linear_desc bad = d;
#define FM_EXPECT(desc, wp, wf, wsp, wsz, status)                                         \
  do {                                                                                    \
    ck_assert_int_eq(attn_linear_favor_matrix((desc), (wp), (wf), (wsp), (wsz)), status); \
    tu_assert_same_bits("W after a rejected favor_matrix", pristine, w, wbytes);          \
    tu_assert_guards("W", w);                                                             \
    tu_assert_guards("favor_matrix workspace", ws);                                       \
  } while (0)
  FM_EXPECT(NULL, w, m * dd, ws, need, ATTN_E_NULL_POINTER);
  FM_EXPECT(&d, NULL, m * dd, ws, need, ATTN_E_NULL_POINTER);
  FM_EXPECT(&d, w, m * dd - 1, ws, need, ATTN_E_WORKSPACE_TOO_SMALL);
  if (need > 0) {
    FM_EXPECT(&d, w, m * dd, ws, need - 1, ATTN_E_WORKSPACE_TOO_SMALL);
    FM_EXPECT(&d, w, m * dd, NULL, need, ATTN_E_NULL_POINTER);
    FM_EXPECT(&d, (float *)ws + 4, m * dd, ws, need + 256, ATTN_E_ALIASING);
  }
  for (int fm = 0; fm < ATTN_FEATURE_COUNT; ++fm) {
    if (fm == FAV) continue;
    ck_assert_int_eq(attn_linear_desc_init(&bad, 3, 3, 1, 1, dd, 4, (attn_feature_map)fm), ATTN_OK);
    FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_FEATURE_MATRIX);
  }
  bad = d;
  bad.favor_source = ATTN_FAVOR_CALLER;
  bad.favor_w = pristine;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_FEATURE_MATRIX);
  bad = d;
  bad.favor_source = (attn_favor_source)99;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_FEATURE_MATRIX);
  bad = d;
  bad.shape.d = 0;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_ZERO_SIZE);
  bad = d;
  bad.scale = 0.0f;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_SCALE);
#undef FM_EXPECT
  /* success: exactly m * d floats, the rest of the buffer untouched */
  ck_assert_int_eq(attn_linear_favor_matrix(&d, w, m * dd + 16, ws, need), ATTN_OK);
  for (size_t e = 0; e < m * dd; ++e) ck_assert(isfinite(w[e]));
  tu_assert_same_bits("W past m * d floats", pristine + m * dd, w + m * dd, sizeof(float) * 16);
  tu_assert_guards("W", w);
  tu_assert_guards("favor_matrix workspace", ws);
  tu_free(ws);
  tu_free(w);
  tu_free((void *)pristine);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* exp and favor under stress: features up to +-150, exact stabilisation                        */
/* ------------------------------------------------------------------------------------------ */
/* Inputs designed as target features in the five patterns of linear_util.h (lu_xs_fill), so that
 * exp's and favor's features reach +-150. Causal with chunk 48 and 7, and bidirectional; eps the
 * default, 0 and 0.5 (eps is added to the denominator stabilised with the offsets of the keys the
 * row sees, >= 1). */
START_TEST(linear_exp_favor_stress) {
  const int favor = _i % 2, mode = (_i / 2) % 3, pattern = (_i / 6) % LU_XS_PATTERNS, eps = _i / (6 * LU_XS_PATTERNS);
  tu_rng rng = tu_rng_of(13000 + (uint64_t)_i);
  attn_linear_desc d;
  lu_desc(&d, LU_XS_N, LU_XS_N, 1, 1, 1, LU_XS_D, LU_XS_DV, favor ? FAV : EXPM, mode < 2, NORM,
          mode == 0   ? 48
          : mode == 1 ? 7
                      : 0);
  if (eps) d.eps = eps == 1 ? 0.0f : 0.5f; /* 0.5: a misplaced eps (added to a denominator with other offsets) shows */
  float w[LU_XS_D * LU_XS_D];
  double Q[LU_XS_D * LU_XS_D];
  if (favor) lu_xs_favor(&rng, &d, Q, w);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, LU_XS_N, LU_XS_N, 1, 1, 1, LU_XS_D, LU_XS_DV);
  lu_xs_fill(&rng, &x, pattern, favor ? Q : NULL, sqrtf(d.scale), NULL);
  lu_state st;
  if (mode < 2) lu_state_make(&st, &d);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, mode < 2 ? &st.s : NULL, 0, &o);
  char what[96];
  snprintf(what, sizeof what, "%s stress: pattern %d, %s, eps %g", favor ? "favor" : "exp", pattern,
           mode == 0   ? "causal chunk 48"
           : mode == 1 ? "causal chunk 7"
                       : "bidirectional",
           (double)d.eps);
  for (size_t i = 0; i < LU_XS_N; ++i)
    for (size_t c = 0; c < LU_XS_DV; ++c)
      ck_assert_msg(isfinite(*tu_at(&o, i, 0, c)), "%s: o[%zu][%zu] = %g", what, i, c, (double)*tu_at(&o, i, 0, c));
  lu_check_output(what, &d, &x.q, &x.k, &x.v, NULL, 0, &o);
  if (mode < 2) {
    lu_check_state(what, &d, &x.k, &x.v, NULL, 0, &st.s);
    lu_state_free(&st);
  }
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST
#define XS_NRUNS (2 * 3 * LU_XS_PATTERNS * 3)

/* ------------------------------------------------------------------------------------------ */
/* dsoftmax                                                                                    */
/* ------------------------------------------------------------------------------------------ */
/* Bidirectional dsoftmax is softmax_rows(Q) (softmax_cols(K)^T V), computed here directly in
 * double (one head): the library within tolerance, the reference to 1e-12. */
START_TEST(linear_dsoftmax_bidir_formula) {
  const size_t n_q = 37, n_kv = 53, dd = 11, dv = 7;
  tu_rng rng = tu_rng_of(14000 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, _i ? WIDE : TU_DATA_UNIFORM, &rng, n_q, n_kv, 1, 1, 1, dd, dv);
  attn_linear_desc d;
  lu_desc(&d, n_q, n_kv, 1, 1, 1, dd, dv, DSM, BIDIR, NORM, 0);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
  /* softmax_cols(K)^T V: dd x dv */
  double kv[11 * 7], *fo = malloc(sizeof(double) * n_q * dv);
  ck_assert_ptr_nonnull(fo);
  for (size_t f = 0; f < dd; ++f) {
    double mx = -INFINITY, z = 0.0;
    for (size_t j = 0; j < n_kv; ++j) mx = fmax(mx, (double)*tu_at(&x.k, j, 0, f));
    for (size_t c = 0; c < dv; ++c) kv[f * dv + c] = 0.0;
    for (size_t j = 0; j < n_kv; ++j) {
      const double e = exp((double)*tu_at(&x.k, j, 0, f) - mx);
      z += e;
      for (size_t c = 0; c < dv; ++c) kv[f * dv + c] += e * (double)*tu_at(&x.v, j, 0, c);
    }
    for (size_t c = 0; c < dv; ++c) kv[f * dv + c] /= z;
  }
  for (size_t i = 0; i < n_q; ++i) {
    double mx = -INFINITY, z = 0.0, p[11];
    for (size_t f = 0; f < dd; ++f) mx = fmax(mx, (double)*tu_at(&x.q, i, 0, f));
    for (size_t f = 0; f < dd; ++f) z += p[f] = exp((double)*tu_at(&x.q, i, 0, f) - mx);
    for (size_t c = 0; c < dv; ++c) {
      fo[i * dv + c] = 0.0;
      for (size_t f = 0; f < dd; ++f) fo[i * dv + c] += p[f] / z * kv[f * dv + c];
    }
  }
  lu_ref r;
  lu_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r);
  for (size_t e = 0; e < n_q * dv; ++e)
    ck_assert_msg(fabs(r.o[e] - fo[e]) <= 1e-12 * r.scale[e], "reference %.17g vs formula %.17g at %zu", r.o[e], fo[e],
                  e);
  lu_compare("dsoftmax bidirectional: softmax_rows(Q) softmax_cols(K)^T V", DSM, n_kv, dd, &o, fo, r.scale, r.arg, 1.0);
  lu_ref_free(&r);
  free(fo);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* With every v = 1 each R_f is 1 and every output is 1: causal (default chunk and 7, with a
 * prefix in the state) and bidirectional, keys over [-30, 30]. */
START_TEST(linear_dsoftmax_ones) {
  const int mode = _i; /* 0 causal default, 1 causal chunk 7 + prefix, 2 bidirectional */
  const size_t n = 100, dd = 16, dv = 5, prefix = mode == 1 ? 33 : 0;
  tu_rng rng = tu_rng_of(14100 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, WIDE, &rng, n + prefix, n + prefix, 2, 1, 1, dd, dv);
  for (size_t j = 0; j < n + prefix; ++j)
    for (size_t c = 0; c < dv; ++c) *tu_at(&x.v, j, 0, c) = 1.0f;
  tu_qkv_snapshot(&x);
  attn_linear_desc d;
  lu_desc(&d, n, n, 2, 1, 1, dd, dv, DSM, mode < 2, NORM, mode == 1 ? 7 : 0);
  lu_state st;
  double *s0 = NULL;
  if (mode < 2) lu_state_make(&st, &d);
  if (prefix) {
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = prefix;
    const tu_tensor pq = tu_rows_view(&x.q, 0, prefix), pk = tu_rows_view(&x.k, 0, prefix);
    const tu_tensor pv = tu_rows_view(&x.v, 0, prefix);
    tu_tensor po;
    lu_call_plain(&pd, &pq, &pk, &pv, T, &st.s, 0, &po);
    tu_tensor_free(&po);
    s0 = lu_state_to_double(&st.s);
  }
  const tu_tensor q = tu_rows_view(&x.q, prefix, n), k = tu_rows_view(&x.k, prefix, n);
  const tu_tensor v = tu_rows_view(&x.v, prefix, n);
  tu_tensor o;
  lu_call_plain(&d, &q, &k, &v, T, mode < 2 ? &st.s : NULL, 0, &o);
  lu_ref r;
  lu_ref_output(&d, &q, &k, &v, s0, &r);
  double *ones = tu_dup(1.0, n * 2 * dv);
  lu_compare("dsoftmax with v = 1: o = 1", DSM, n + prefix, dd, &o, ones, r.scale, r.arg, 1.0);
  free(ones);
  lu_ref_free(&r);
  free(s0);
  tu_tensor_free(&o);
  if (mode < 2) lu_state_free(&st);
  tu_qkv_free(&x);
}
END_TEST

/* dsoftmax is invariant to a constant added to one key feature column (every key) or to one
 * query row: the library's results agree within the sum of both bounds. Causal (chunk 7 and the
 * default) and bidirectional; constants 40 and -25.5, added exactly (inputs on a 2^-12 grid). */
static void ds_quantise(tu_tensor *t) {
  for (size_t i = 0; i < t->n; ++i)
    for (size_t h = 0; h < t->h; ++h)
      for (size_t c = 0; c < t->w; ++c) *tu_at(t, i, h, c) = ldexpf(roundf(ldexpf(*tu_at(t, i, h, c), 12)), -12);
}

START_TEST(linear_dsoftmax_shift_invariance) {
  const int mode = _i % 3, query = _i / 3;
  const size_t n = 90, dd = 9, dv = 6;
  tu_rng rng = tu_rng_of(14200 + (uint64_t)_i);
  tu_qkv x, y;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, 2, 2, 2, dd, dv);
  tu_rng_seed(&rng, 14200 + (uint64_t)_i);
  tu_qkv_make(&y, T, TU_DATA_UNIFORM, &rng, n, n, 2, 2, 2, dd, dv);
  ds_quantise(&x.q);
  ds_quantise(&x.k);
  ds_quantise(&y.q);
  ds_quantise(&y.k);
  tu_qkv_snapshot(&x);
  for (size_t j = 0; j < n; ++j)
    for (size_t h = 0; h < 2; ++h) {
      if (query)
        for (size_t f = 0; f < dd; ++f) *tu_at(&y.q, j, h, f) += j % 2 ? 40.0f : -25.5f;
      else
        *tu_at(&y.k, j, h, 3 + h) += h ? 40.0f : -25.5f;
    }
  tu_qkv_snapshot(&y);
  attn_linear_desc d;
  lu_desc(&d, n, n, 2, 2, 2, dd, dv, DSM, mode < 2, NORM, mode == 1 ? 7 : 0);
  tu_tensor o1, o2;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o1);
  lu_call_plain(&d, &y.q, &y.k, &y.v, T, NULL, 0, &o2);
  lu_ref r1, r2;
  lu_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r1);
  lu_ref_output(&d, &y.q, &y.k, &y.v, NULL, &r2);
  const size_t count = n * 2 * dv;
  double *t1 = lu_tols(DSM, 0, n, dd, r1.scale, r1.arg, count, 1.0);
  double *t2 = lu_tols(DSM, 0, n, dd, r2.scale, r2.arg, count, 1.0);
  double *bound = malloc(sizeof(double) * count), *got1 = malloc(sizeof(double) * count);
  ck_assert(bound && got1);
  for (size_t e = 0; e < count; ++e) bound[e] = t1[e] * r1.scale[e] + t2[e] * r2.scale[e];
  tu_tensor_to_double(&o1, got1);
  double *unit = tu_dup(1.0, count);
  tu_compare("linear.dsoftmax.o",
             query ? "dsoftmax: a constant added to query rows" : "dsoftmax: a constant added to a key column", &o2,
             got1, bound, unit);
  for (size_t e = 0; e < count; ++e) /* and the reference is invariant too */
    ck_assert_msg(fabs(r1.o[e] - r2.o[e]) <= 1e-12 * (r1.scale[e] + r2.scale[e]), "reference not invariant at %zu", e);
  free(unit);
  free(bound);
  free(got1);
  free(t1);
  free(t2);
  lu_ref_free(&r1);
  lu_ref_free(&r2);
  tu_tensor_free(&o1);
  tu_tensor_free(&o2);
  tu_qkv_free(&x);
  tu_qkv_free(&y);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"elu1", linear_elu1_accuracy_sweep, 1},
  {"exponential", linear_favor_caller_w_formula, 9}, {"exponential", linear_favor_seed_equals_caller, 8},
    {"exponential", linear_favor_matrix_properties, 1}, {"exponential", linear_favor_matrix_contract, 1},
    {"exponential", linear_exp_favor_stress, (int)XS_NRUNS}, {"exponential", linear_dsoftmax_bidir_formula, 2},
    {"exponential", linear_dsoftmax_ones, 3}, {"exponential", linear_dsoftmax_shift_invariance, 6})
/* clang-format on */
