/*
 * GAU relu^2 attention (attn_gau), on the ISA path named by ATTN_ISA, beyond the case table of
 * check_gau.c: TCases "sparsity" (beta -> -inf gives exact zeros; with beta = 0 some weights are 0
 * and their keys' values never matter), "mask" (keys no row sees are never read; rows that see no
 * key), "properties" (decode and chunked prefill reproduce the full prefill) and "nonfinite" (the
 * policy of attn.h). Helpers: tests/common/gau_util.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gau_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

/* ------------------------------------------------------------------------------------------ */
/* Sparsity (seed 000: it reaches 0 only as beta -> -inf)                                       */
/* ------------------------------------------------------------------------------------------ */
/* beta = -1e4 (and a table of -1e4) against |scale q.k| <= ~10: every argument is negative, every
 * weight 0, every output exactly 0, on every mask, normalised or not. */
START_TEST(gau_very_negative_bias_gives_zeros) {
  static const gau_case cases[] = {
      {.name = "beta -1e4 causal", SIZES(130, 130, 64, 64), HEADS(2, 1), .mask = CAUSAL, BETA(-1e4f)},
      {.name = "beta -1e4 full norm", SIZES(97, 97, 8, 8), HEADS(1, 1), .mask = FULL, BETA(-1e4f), NORM},
      {.name = "beta -1e4 chunk 7", SIZES(50, 50, 16, 16), HEADS(1, 1), .mask = MASK(U, 0, 7), BETA(-1e4f)},
      {.name = "beta -1e4 scale 3 positive data",
       SIZES(49, 49, 65, 9),
       HEADS(1, 1),
       .mask = WINDOW(5, 9),
       .data = POS,
       SCALE(3.0f),
       BETA(-1e4f)},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0] + 1; ++t) {
    const gau_case *c = &cases[t < 4 ? t : 0];
    gau_setup s;
    gau_setup_make(&s, c, 1800 + t);
    float *table = NULL;
    if (t == 4) { /* the causal table of -1e4 everywhere */
      table = malloc(sizeof(float) * 5);
      ck_assert_ptr_nonnull(table);
      for (int e = 0; e < 5; ++e) table[e] = -1e4f;
      s.d.bias = ATTN_GAU_BIAS_CAUSAL;
      s.d.bias_table = table;
      s.d.bias_len = 5;
    }
    tu_tensor o;
    gau_call(&s.d, &s.x.q, &s.x.k, &s.x.v, T, 0, &o);
    for (size_t i = 0; i < o.n; ++i)
      for (size_t h = 0; h < o.h; ++h)
        for (size_t e = 0; e < o.w; ++e)
          ck_assert_msg(*tu_at(&o, i, h, e) == 0.0f, "%s%s: o[%zu][%zu][%zu] = %g, not 0", c->name,
                        t == 4 ? " (table)" : "", i, h, e, (double)*tu_at(&o, i, h, e));
    tu_tensor_free(&o);
    free(table);
    gau_setup_free(&s);
  }
}
END_TEST

/* beta = 0 with random-sign data: about half the weights are 0 (the reference counts them: some,
 * but not all), and the result matches the reference. Then, for one decode row, the values of
 * every key whose argument is clearly negative (x < -0.01, far beyond any rounding) are made huge
 * (1e20): their weights are exactly 0, so the output must not change beyond its bound. */
START_TEST(gau_beta_zero_partial_sparsity) {
  enum { N = 130, HQ = 2, HKV = 1, D = 16 };
  tu_rng rng = tu_rng_of(1900);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, D, D);
  attn_gau_desc d;
  gau_desc(&d, N, N, HQ, HKV, D, D, attn_mask_causal());
  const ref_gau_problem p = tu_gau_problem(&d, &x.q, &x.k, &x.v);
  size_t zero = 0, visible = 0;
  for (size_t i = 0; i < N; ++i)
    for (size_t h = 0; h < HQ; ++h)
      for (size_t j = 0; j <= i; ++j, ++visible) zero += ref_gau_weight(&p, i, h, j) == 0.0;
  ck_assert_msg(zero > visible / 4 && zero < visible - visible / 4, "%zu of %zu weights are 0", zero, visible);
  gau_check_call("beta 0: partly sparse", &d, &x, T, 0);

  /* decode row N - 1, head 0 only (h_q = 1): dead keys get v = 1e20 */
  attn_gau_desc dd;
  gau_desc(&dd, 1, N, 1, 1, D, D, attn_mask_causal());
  const tu_tensor q1 = tu_rows_view(&x.q, N - 1, 1);
  size_t dead = 0;
  for (size_t j = 0; j < N; ++j) {
    double s = 0.0;
    for (size_t f = 0; f < D; ++f) s += (double)*tu_at(&q1, 0, 0, f) * (double)*tu_at(&x.k, j, 0, f);
    if (s * (double)dd.scale < -0.01) {
      for (size_t c = 0; c < D; ++c) *tu_at(&x.v, j, 0, c) = 1e20f;
      ++dead;
    }
  }
  ck_assert_uint_gt(dead, N / 4);
  tu_qkv_snapshot(&x);
  tu_tensor o;
  gau_call(&dd, &q1, &x.k, &x.v, T, 4, &o);
  gau_ref ref;
  gau_ref_compute(&dd, &q1, &x.k, &x.v, &ref);
  gau_compare("gau.o", "decode: huge values behind zero weights", &o, ref.o, &ref, N, D, 1.0);
  gau_ref_free(&ref);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties against the full prefill                                                         */
/* ------------------------------------------------------------------------------------------ */
typedef struct gau_prop_case {
  size_t n, h_q, h_kv, d, dv;
  attn_mask mask;
  attn_gau_bias bias;
  float beta;
  size_t bias_len;
  int normalize;
  size_t start; /* chunked prefill: first query row; pieces: the first cut */
} gau_prop_case;

static const gau_prop_case gau_props[] = {
    {.n = 50, .h_q = 1, .h_kv = 1, .d = 8, .dv = 8, .mask = CAUSAL, CTAB(16), .start = 25},
    {.n = 97, .h_q = 4, .h_kv = 2, .d = 64, .dv = 64, .mask = CAUSAL, NORM, .start = 96},
    {.n = 100, .h_q = 2, .h_kv = 1, .d = 16, .dv = 16, .mask = WINDOW(20, 0), TTAB(8), NORM, .start = 49},
    {.n = 49, .h_q = 6, .h_kv = 1, .d = 7, .dv = 9, .mask = CAUSAL, BETA(0.2f), .start = 1},
    {.n = 130, .h_q = 1, .h_kv = 1, .d = 65, .dv = 65, .mask = WINDOW(3, 0), CTAB(3), .start = 33},
    {.n = 100, .h_q = 2, .h_kv = 1, .d = 16, .dv = 16, .mask = MASK(U, 0, 7), CTAB(7), NORM, .start = 49},
    {.n = 130, .h_q = 1, .h_kv = 1, .d = 8, .dv = 8, .mask = MASK(10, 0, 64), TTAB(100), .start = 48},
    {.n = 97, .h_q = 4, .h_kv = 2, .d = 64, .dv = 64, .mask = MASK(U, 0, 4), NORM, .start = 95},
    /* masks that see later keys: chunked prefill only (a decode step or an earlier piece would
     * need keys beyond its last row, which bottom-right alignment does not allow) */
    {.n = 100, .h_q = 2, .h_kv = 1, .d = 16, .dv = 16, .mask = FULL, TTAB(10), .start = 31},
    {.n = 130, .h_q = 1, .h_kv = 1, .d = 9, .dv = 9, .mask = WINDOW(17, 2), NORM, .start = 64},
    {.n = 97, .h_q = 2, .h_kv = 2, .d = 8, .dv = 8, .mask = MASK(U, U, 4), CTAB(4), .start = 47},
};
#define GAU_NPROPS (sizeof gau_props / sizeof gau_props[0])
static size_t gau_decode_sel[GAU_NPROPS];

/* The full prefill of a property case, its reference (and check), and its result as double. */
typedef struct gau_full {
  const gau_prop_case *c;
  tu_qkv x;
  float *table;
  attn_gau_desc d;
  tu_tensor o;
  gau_ref ref;
  double *got; /* [n][h_q][dv] */
} gau_full;

static void gau_prop_desc(attn_gau_desc *d, const gau_prop_case *c, size_t n_q, size_t n_kv, const float *table) {
  gau_desc(d, n_q, n_kv, c->h_q, c->h_kv, c->d, c->dv, c->mask);
  d->bias = c->bias;
  d->beta = c->beta;
  d->bias_table = table;
  d->bias_len = c->bias_len;
  d->normalize = c->normalize;
}

static void gau_full_make(gau_full *f, const gau_prop_case *c, uint64_t seed) {
  tu_rng rng = tu_rng_of(seed);
  f->c = c;
  tu_qkv_make(&f->x, T, TU_DATA_UNIFORM, &rng, c->n, c->n, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  f->table = gau_table_make(c->bias, c->bias_len, 0.0f, &rng);
  gau_prop_desc(&f->d, c, c->n, c->n, f->table);
  gau_call(&f->d, &f->x.q, &f->x.k, &f->x.v, T, 0, &f->o);
  gau_ref_compute(&f->d, &f->x.q, &f->x.k, &f->x.v, &f->ref);
  gau_compare("gau.o", "full prefill", &f->o, f->ref.o, &f->ref, c->n, c->d, 1.0);
  f->got = malloc(sizeof(double) * c->n * c->h_q * c->dv);
  ck_assert_ptr_nonnull(f->got);
  tu_tensor_to_double(&f->o, f->got);
}

static void gau_full_free(gau_full *f) {
  free(f->got);
  gau_ref_free(&f->ref);
  tu_tensor_free(&f->o);
  tu_qkv_free(&f->x);
  free(f->table);
}

/* A property part (tu_prop_part_fn) of the full prefill ctx: misaligned inputs per step. */
static void gau_prop_part(const void *ctx, const char *what, tu_prop_kind kind, size_t step, size_t q0, size_t nq,
                          size_t nkv) {
  const gau_full *f = ctx;
  const gau_prop_case *c = f->c;
  const size_t hd = c->h_q * c->dv;
  attn_gau_desc d;
  gau_prop_desc(&d, c, nq, nkv, f->table);
  const tu_qkv w = tu_qkv_rows(&f->x, q0, nq, nkv);
  tu_tensor o;
  gau_call(&d, &w.q, &w.k, &w.v, T, kind == TU_PROP_CHUNKED ? 4 : gau_misalign[step % 4], &o);
  const gau_ref sc = gau_ref_at(&f->ref, q0 * hd);
  gau_compare("gau.prop", what, &o, f->got + q0 * hd, &sc, c->n, c->d, TOL_PROPERTY_FACTOR);
  tu_tensor_free(&o);
}

/* Decode steps (n_q = 1 over the first t + 1 keys) reproduce the rows of the full prefill: the
 * step's query sits at the same position, so the same mask, chunk and bias offsets apply. */
START_TEST(gau_decode_matches_prefill) {
  const size_t ci = gau_decode_sel[_i];
  gau_full f;
  gau_full_make(&f, &gau_props[ci], 2000 + (uint64_t)ci);
  tu_prop_decode(&f, f.c->n, gau_prop_part);
  tu_qkv_assert_unchanged(&f.x);
  gau_full_free(&f);
}
END_TEST

/* Chunked prefill (rows [start, n) over all n keys, n_q < n_kv) equals those rows of the full
 * call, for every mask. */
START_TEST(gau_chunked_matches_prefill) {
  gau_full f;
  gau_full_make(&f, &gau_props[_i], 3000 + (uint64_t)_i);
  tu_prop_chunked(&f, f.c->n, f.c->start, gau_prop_part);
  gau_full_free(&f);
}
END_TEST

/* A prefill in pieces (rows [0, a), [a, b), [b, n), cut inside and across query blocks), each
 * over the keys up to its last row as a growing KV cache holds them, equals one call. Masks that
 * see no later key only (right = 0): bottom-right alignment puts a piece's rows at the positions
 * of the full call's only when its keys end at its last row. */
START_TEST(gau_pieces_match_one_call) {
  const size_t ci = gau_decode_sel[_i];
  const gau_prop_case *c = &gau_props[ci];
  gau_full f;
  gau_full_make(&f, c, 3500 + (uint64_t)ci);
  size_t a = c->start / 2 + 1, b = c->start + (c->n - c->start) / 2;
  if (a > c->n - 1) a = c->n - 1;
  if (b <= a) b = a + (c->n - a) / 2;
  const size_t cuts[4] = {0, a, b, c->n};
  tu_prop_pieces(&f, cuts, gau_prop_part);
  gau_full_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Masks: keys no row sees are never read; rows that see no key                                */
/* ------------------------------------------------------------------------------------------ */
typedef struct skip_case {
  size_t n_q, n_kv, d;
  attn_mask mask;
} skip_case;
static const skip_case skip_cases[] = {
    {.n_q = 1, .n_kv = 400, .d = 64, .mask = WINDOW(10, 0)},  {.n_q = 20, .n_kv = 300, .d = 8, .mask = WINDOW(10, 0)},
    {.n_q = 1, .n_kv = 300, .d = 7, .mask = WINDOW(0, 0)},    {.n_q = 48, .n_kv = 300, .d = 16, .mask = WINDOW(31, 0)},
    {.n_q = 5, .n_kv = 200, .d = 9, .mask = WINDOW(3, 2)},    {.n_q = 20, .n_kv = 250, .d = 8, .mask = MASK(U, 0, 100)},
    {.n_q = 1, .n_kv = 200, .d = 16, .mask = MASK(U, U, 64)}, {.n_q = 48, .n_kv = 300, .d = 16, .mask = MASK(5, 0, 7)},
    {.n_q = 3, .n_kv = 150, .d = 8, .mask = MASK(U, 0, 3)},   {.n_q = 10, .n_kv = 130, .d = 8, .mask = MASK(U, U, 4)},
    {.n_q = 50, .n_kv = 150, .d = 8, .mask = WINDOW(17, 2)},
};
#define SKIP_NCASES (sizeof skip_cases / sizeof skip_cases[0])

/* Every key (and its value) that no query row can see is NaN, inside boundary blocks too: the
 * policy lets no hidden key reach a row, however the engine masks a block. */
START_TEST(gau_mask_skips_outside_keys) {
  const skip_case *c = &skip_cases[_i];
  tu_rng rng = tu_rng_of(6000 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, 2, 1, 1, c->d, c->d);
  size_t hidden = 0;
  for (size_t j = 0; j < c->n_kv; ++j) {
    int seen = 0;
    for (size_t i = 0; i < c->n_q && !seen; ++i)
      seen = ref_visible(i, j, c->n_q, c->n_kv, c->mask.left, c->mask.right, c->mask.chunk);
    if (seen) continue;
    ++hidden;
    for (size_t e = 0; e < c->d; ++e) {
      *tu_at(&x.k, j, 0, e) = NAN;
      *tu_at(&x.v, j, 0, e) = NAN;
    }
  }
  ck_assert_uint_gt(hidden, 0);
  tu_qkv_snapshot(&x);
  attn_gau_desc d;
  gau_desc(&d, c->n_q, c->n_kv, 2, 1, c->d, c->d, c->mask);
  d.beta = 0.1f;
  d.normalize = (int)(_i % 2);
  gau_check_call("NaN keys outside the mask", &d, &x, T, 0);
  tu_qkv_free(&x);
}
END_TEST

/* Rows that see no key get exactly zeros, normalised or not (no 0 / 0): n_q > n_kv puts the first
 * queries at negative positions, which lie in no chunk of the keys even when the window is
 * unbounded on both sides; a window (0, 0) with n_q > n_kv empties them too. */
START_TEST(gau_rows_without_keys_are_empty) {
  static const attn_mask masks[] = {MASK(U, U, 3), MASK(U, 0, 7), MASK(U, U, U), WINDOW(0, 0), CAUSAL};
  enum { NQ = 13, NKV = 5, HQ = 2, DD = 8 };
  tu_rng rng = tu_rng_of(6100);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, NQ, NKV, HQ, 1, 1, DD, DD);
  float table[9] = {0.5f, 0.25f, 0.125f, 1.0f, 0.5f, 0.75f, 0.5f, 0.25f, 0.5f};
  for (size_t m = 0; m < 2 * sizeof masks / sizeof masks[0]; ++m) {
    attn_gau_desc d;
    gau_desc(&d, NQ, NKV, HQ, 1, DD, DD, masks[m / 2]);
    d.normalize = (int)(m % 2);
    d.bias = m % 4 < 2 ? ATTN_GAU_BIAS_SCALAR : ATTN_GAU_BIAS_TWO_SIDED;
    d.beta = 1.0f; /* a positive bias: a visible key would have a positive weight */
    d.bias_table = m % 4 < 2 ? NULL : table;
    d.bias_len = 5;
    tu_tensor o;
    gau_call(&d, &x.q, &x.k, &x.v, T, 0, &o);
    for (size_t i = 0; i < NQ - NKV; ++i) /* positions -8 .. -1 */
      for (size_t h = 0; h < HQ; ++h)
        for (size_t c = 0; c < DD; ++c)
          ck_assert_msg(*tu_at(&o, i, h, c) == 0.0f, "mask %zu, normalize %d: row %zu o %g", m / 2, (int)(m % 2), i,
                        (double)*tu_at(&o, i, h, c));
    gau_ref ref;
    gau_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
    gau_compare("gau.o", "rows without keys", &o, ref.o, &ref, NKV, DD, 1.0);
    gau_ref_free(&ref);
    tu_tensor_free(&o);
  }
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Non-finite inputs: the policy of attn.h on every path                                        */
/* ------------------------------------------------------------------------------------------ */
/* Causal, n = 2, d = dv = 1, q = k = 1, scale 1, beta 0: query 0 sees key 0 only, o[0] = 1
 * exactly; query 1 sees the bad key or value: NaN. Variants: a NaN value; a -inf key, whose
 * argument is -inf and whose relu weight would be 0 (the policy still makes the row NaN); a NaN
 * key; and the window (0, 0), under which query 1 sees only itself. */
START_TEST(gau_nonfinite_small_cases) {
  for (int form = 0; form < 6; ++form) {
    const int win = form >= 3, which = form % 3; /* 0: v[1] NaN, 1: k[1] -inf, 2: k[1] NaN */
    float q[2] = {1, 1}, k[2] = {1, 1}, v[2] = {1, 1};
    if (which == 0) v[1] = NAN;
    if (which == 1) k[1] = -INFINITY;
    if (which == 2) k[1] = NAN;
    attn_gau_desc d;
    gau_desc(&d, 2, 2, 1, 1, 1, 1, attn_mask_window(win ? 0 : U, 0));
    d.scale = 1.0f;
    size_t ws = 0;
    ck_assert_int_eq(attn_gau_workspace_size(&d, &ws), ATTN_OK);
    void *w = tu_alloc(ws, 0);
    float o[2] = {-7.0f, -7.0f};
    ck_assert_int_eq(attn_gau(&d, q, k, v, o, w, ws), ATTN_OK);
    tu_free(w);
    ck_assert_msg(o[0] == 1.0f, "form %d: o[0] %g", form, (double)o[0]);
    ck_assert_msg(isnan(o[1]), "form %d: o[1] %g (the row sees the non-finite element)", form, (double)o[1]);
  }
  /* a -inf key whose weight would be 0, and a NaN value behind a negative argument: NaN rows */
  {
    const float q[1] = {1}, k[3] = {0.5f, -INFINITY, 0.25f}, v[3] = {1, 2, 3};
    const float k2[3] = {0.5f, -1.0f, 0.25f}, v2[3] = {1, NAN, 3};
    attn_gau_desc d;
    gau_desc(&d, 1, 3, 1, 1, 1, 1, attn_mask_causal());
    d.scale = 1.0f;
    size_t ws = 0;
    ck_assert_int_eq(attn_gau_workspace_size(&d, &ws), ATTN_OK);
    void *w = tu_alloc(ws, 0);
    float o = 0.0f;
    ck_assert_int_eq(attn_gau(&d, q, k, v, &o, w, ws), ATTN_OK);
    ck_assert_msg(isnan(o), "a visible -inf key (argument -inf, relu 0): o %g, not NaN", (double)o);
    o = 0.0f;
    ck_assert_int_eq(attn_gau(&d, q, k2, v2, &o, w, ws), ATTN_OK);
    ck_assert_msg(isnan(o), "a visible NaN value behind a zero weight: o %g, not NaN", (double)o);
    tu_free(w);
  }
}
END_TEST

/* A -inf score in a block the mask does not cut (full mask, n = 200: whole key blocks of 96 or 64
 * keys on every path): positive q and a key element of -inf give every row the argument -inf,
 * whose relu weight would be 0; every row sees it and must be NaN. The same with +inf against
 * negative q, and with +inf against positive q (argument +inf). */
START_TEST(gau_nonfinite_score_in_unmasked_block) {
  enum { N = 200, DD = 8 };
  static const float bad[3] = {-INFINITY, INFINITY, INFINITY};
  for (int form = 0; form < 3; ++form) {
    tu_rng rng = tu_rng_of(9500 + (uint64_t)form);
    tu_qkv x = tu_qkv_of(T, TU_DATA_POSITIVE, &rng, N, N, 1, 1, 1, DD, DD);
    for (size_t i = 0; i < N; ++i)
      for (size_t f = 0; f < DD; ++f) {
        float *e = tu_at(&x.q, i, 0, f);
        *e = (form == 1 ? -1.0f : 1.0f) * (*e + 0.01f);
      }
    *tu_at(&x.k, 10, 0, 3) = bad[form];
    tu_qkv_snapshot(&x);
    attn_gau_desc d;
    gau_desc(&d, N, N, 1, 1, DD, DD, attn_mask_full());
    tu_tensor o;
    gau_call(&d, &x.q, &x.k, &x.v, T, 0, &o);
    for (size_t i = 0; i < N; ++i)
      for (size_t c = 0; c < DD; ++c)
        ck_assert_msg(isnan(*tu_at(&o, i, 0, c)), "k[10][0][3] = %g, form %d: o[%zu][%zu] = %g, not NaN",
                      (double)bad[form], form, i, c, (double)*tu_at(&o, i, 0, c));
    tu_tensor_free(&o);
    tu_qkv_free(&x);
  }
}
END_TEST

typedef struct nf_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;
  attn_gau_bias bias;
  float beta;
  size_t bias_len;
  int normalize;
} nf_case;
/* Shapes whose boundary key blocks (96 / 64 keys) hold the poisoned token: causal prefill across
 * blocks, GQA, windows, chunked prefill, decode, n_q > n_kv, full attention, chunk-local masks
 * (a poisoned key poisons only its own chunk's rows), both tables and normalize. */
static const nf_case nf_cases[] = {
    {.name = "causal_130_gqa", SIZES(130, 130, 16, 9), HEADS(4, 2), .mask = CAUSAL, CTAB(20)},
    {.name = "window_7_0_norm", SIZES(150, 150, 8, 8), HEADS(1, 1), .mask = WINDOW(7, 0), NORM},
    {.name = "window_3_2", SIZES(70, 70, 7, 5), HEADS(2, 1), .mask = WINDOW(3, 2), TTAB(4)},
    {.name = "window_17_2", SIZES(130, 130, 8, 8), HEADS(1, 1), .mask = WINDOW(17, 2), BETA(0.2f)},
    {.name = "chunk_20_of_120", SIZES(20, 120, 16, 16), HEADS(2, 2), .mask = CAUSAL, NORM},
    {.name = "decode_1_of_100_gqa", SIZES(1, 100, 64, 64), HEADS(4, 1), .mask = CAUSAL, CTAB(50)},
    {.name = "nq50_nkv30_causal", SIZES(50, 30, 8, 8), HEADS(1, 1), .mask = CAUSAL, BETA(-0.1f)},
    {.name = "full_60", SIZES(60, 60, 9, 9), HEADS(2, 1), .mask = FULL, TTAB(10), NORM},
    {.name = "chunk4_full_100", SIZES(100, 100, 8, 8), HEADS(1, 1), .mask = MASK(U, U, 4), BETA(0.1f)},
    {.name = "chunk7_causal_150", SIZES(150, 150, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 7), CTAB(7), NORM},
    {.name = "chunk64_full_gqa", SIZES(130, 130, 16, 9), HEADS(4, 2), .mask = MASK(U, U, 64)},
};
#define NF_NCASES (sizeof nf_cases / sizeof nf_cases[0])

/* For each of q, k, v, each of NaN, +inf, -inf, and a token early in the sequence and one late,
 * one element is poisoned; every row must match the reference, which applies the policy: rows
 * that use the value are NaN, every other row is within its bound as usual. */
START_TEST(gau_nonfinite_policy) {
  const nf_case *c = &nf_cases[_i];
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng = tu_rng_of(9000 + (uint64_t)_i);
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
    float *table = gau_table_make(c->bias, c->bias_len, 0.0f, &rng);
    char poison[64], what[96];
    tu_qkv_poison(&x, pc, 0, poison, sizeof poison);
    attn_gau_desc d;
    gau_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->mask);
    d.bias = c->bias;
    d.beta = c->beta;
    d.bias_table = table;
    d.bias_len = c->bias_len;
    d.normalize = c->normalize;
    tu_tensor o;
    gau_call(&d, &x.q, &x.k, &x.v, T, 0, &o);
    tu_qkv_assert_unchanged(&x);
    gau_ref ref;
    gau_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
    snprintf(what, sizeof what, "%s: %s", c->name, poison);
    gau_compare("gau.o", what, &o, ref.o, &ref, c->n_kv, c->d, 1.0);
    gau_ref_free(&ref);
    tu_tensor_free(&o);
    free(table);
    tu_qkv_free(&x);
  }
}
END_TEST

static Suite *gau_props_suite(attn_isa isa) {
  int ndecode = 0; /* the property rows whose mask sees no later key */
  for (size_t i = 0; i < GAU_NPROPS; ++i)
    if (gau_props[i].mask.right == 0) gau_decode_sel[ndecode++] = i;
  /* clang-format off */
  return TU_SUITE(isa,
    {"sparsity", gau_very_negative_bias_gives_zeros, 1}, {"sparsity", gau_beta_zero_partial_sparsity, 1},
    {"mask", gau_mask_skips_outside_keys, (int)SKIP_NCASES}, {"mask", gau_rows_without_keys_are_empty, 1},
    {"properties", gau_decode_matches_prefill, ndecode}, {"properties", gau_chunked_matches_prefill, (int)GAU_NPROPS},
      {"properties", gau_pieces_match_one_call, ndecode},
    {"nonfinite", gau_nonfinite_small_cases, 1}, {"nonfinite", gau_nonfinite_score_in_unmasked_block, 1},
      {"nonfinite", gau_nonfinite_policy, (int)NF_NCASES});
  /* clang-format on */
}

int main(void) { return tu_main(gau_props_suite); }
