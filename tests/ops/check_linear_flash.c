/*
 * FLASH's chunk-exclusive causal form of linear attention (attn_linear_desc.exclusive_chunk) on
 * the ISA path named by ATTN_ISA, against the float64 reference. TCase "flash": the exclusive
 * form against the reference, pieces then decode steps vs one call, the sum against its formula,
 * and the statuses of what the form refuses.
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
/* FLASH's chunk-exclusive causal form (attn_linear_desc.exclusive_chunk, attn.h, 0.4.0)        */
/* ------------------------------------------------------------------------------------------ */
/* Cases {n_q, n_kv, h_q, h_kv, d, dv, G}; the maps rotate: identity un-normalised (FLASH's),
 * elu1 and relu normalised. The g = 4, n = 10; chunks around the path's linear chunk
 * (48 on AVX2 and NEON, 64 scalar) and the blocks; chunked prefill and decode (bottom-right) at a
 * chunk's last and first token; n_q > n_kv; G = 1 (every earlier key); G beyond n (no key). */
static const size_t fx_cases[][7] = {
    {10, 10, 1, 1, 8, 8, 4},   {130, 130, 4, 2, 16, 16, 4}, {97, 97, 2, 1, 7, 5, 48},     {130, 130, 4, 4, 9, 13, 49},
    {40, 97, 4, 1, 8, 8, 7},   {1, 64, 2, 2, 8, 8, 16},     {1, 65, 2, 2, 8, 8, 16},      {30, 10, 2, 1, 8, 8, 4},
    {50, 50, 1, 1, 16, 16, 1}, {64, 64, 2, 1, 8, 8, 200},   {150, 150, 1, 1, 16, 16, 70},
};
#define FX_NCASES (sizeof fx_cases / sizeof fx_cases[0])
static const attn_feature_map fx_fm[3] = {ID, ELU, RELU};

static void fx_desc(attn_linear_desc *d, const size_t *c, size_t map) {
  lu_desc(d, c[0], c[1], c[2], c[3], c[3], c[4], c[5], fx_fm[map], CAUSAL, map != 0, 0);
  d->exclusive_chunk = c[6];
  d->scale = 1.0f / (float)c[6];
}

/* The chunk start of position p (p < 0: before every key, 0). */
static size_t fx_chunk_start(int64_t p, size_t G) { return p < 0 ? 0 : (size_t)p / G * G; }

/* Row i of a chunk-exclusive call is the bidirectional call of its query over the keys before its
 * chunk (the float64 reference of that call), and exactly 0 when there are none. */
START_TEST(linear_flash_exclusive_matches_reference) {
  const size_t *c = fx_cases[_i / 3], map = (size_t)_i % 3, G = c[6];
  tu_rng rng = tu_rng_of(17000 + (uint64_t)_i);
  attn_linear_desc d;
  fx_desc(&d, c, map);
  tu_qkv x = tu_qkv_of(_i % 2 ? H : T, TU_DATA_UNIFORM, &rng, c[0], c[1], c[2], c[3], c[3], c[4], c[5]);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, (size_t)_i % 2 * 4, &o);
  tu_qkv_assert_unchanged(&x);
  for (size_t i = 0; i < c[0]; ++i) {
    const size_t cs = fx_chunk_start((int64_t)c[1] - (int64_t)c[0] + (int64_t)i, G);
    const tu_tensor row = tu_rows_view(&o, i, 1);
    char what[96];
    snprintf(what, sizeof what, "G %zu, map %zu, row %zu over %zu keys", G, map, i, cs);
    if (cs == 0) {
      for (size_t h = 0; h < c[2]; ++h)
        for (size_t col = 0; col < c[5]; ++col)
          ck_assert_msg(*tu_at(&row, 0, h, col) == 0.0f, "%s: %g", what, (double)*tu_at(&row, 0, h, col));
      continue;
    }
    attn_linear_desc rd = d;
    rd.exclusive_chunk = 0;
    rd.mask = attn_mask_full();
    rd.shape.n_q = 1;
    rd.shape.n_kv = cs;
    const tu_tensor q = tu_rows_view(&x.q, i, 1), k = tu_rows_view(&x.k, 0, cs), v = tu_rows_view(&x.v, 0, cs);
    lu_ref r;
    lu_ref_output(&rd, &q, &k, &v, NULL, &r);
    lu_compare(what, d.feature_map, cs, c[4], &row, r.o, r.scale, r.arg, 1.0);
    lu_ref_free(&r);
  }
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* A sequence in pieces with a state, each call passing the keys from the state's absorbed
 * boundary (the tokens of an incomplete chunk again): prefill of 37 tokens, a chunk of 20, then
 * decode steps; outputs equal one call's, the state's tokens are the complete chunks, and the
 * final state equals the one call's. */
START_TEST(linear_flash_pieces_then_decode) {
  static const size_t Gs[] = {4, 16, 7, 48};
  const size_t map = (size_t)_i % 3, G = Gs[_i / 3], n = 67, hq = 4, hkv = 2, dd = 8, dv = 8, hd = hq * dv;
  const size_t c[7] = {n, n, hq, hkv, dd, dv, G};
  tu_rng rng = tu_rng_of(17100 + (uint64_t)_i);
  attn_linear_desc d;
  fx_desc(&d, c, map);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  lu_state one_s, s;
  lu_state_make(&one_s, &d);
  lu_state_make(&s, &d);
  tu_tensor one;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, &one_s.s, 0, &one);
  ck_assert_uint_eq(one_s.s.tokens, n / G * G);
  double *got = malloc(sizeof(double) * n * hd), *sc = malloc(sizeof(double) * n * hd);
  ck_assert(got && sc);
  tu_tensor_to_double(&one, got);
  lu_ref r; /* the scales of the one call's rows (the reference of the exclusive form: the test above) */
  attn_linear_desc rd = d;
  rd.exclusive_chunk = 0;
  lu_ref_output(&rd, &x.q, &x.k, &x.v, NULL, &r);
  for (size_t e = 0; e < n * hd; ++e) sc[e] = r.scale[e] + fabs(got[e]);
  for (size_t t = 0, len; t < n; t += len) {
    len = t == 0 ? 37 : t == 37 ? 20 : 1;
    const size_t from = s.s.tokens;
    ck_assert_uint_eq(from % G, 0);
    attn_linear_desc pd = d;
    pd.shape.n_q = len;
    pd.shape.n_kv = t + len - from;
    const tu_tensor q = tu_rows_view(&x.q, t, len), k = tu_rows_view(&x.k, from, t + len - from),
                    v = tu_rows_view(&x.v, from, t + len - from);
    tu_tensor o;
    lu_call_plain(&pd, &q, &k, &v, T, &s.s, 0, &o);
    ck_assert_uint_eq(s.s.tokens, (t + len) / G * G);
    char what[96];
    snprintf(what, sizeof what, "G %zu map %zu: piece at %zu (%zu) vs one call", G, map, t, len);
    lu_compare(what, d.feature_map, n, dd, &o, got + t * hd, sc + t * hd, NULL, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  const size_t count = lu_state_floats(&s.s);
  for (size_t e = 0; e < count; ++e) /* the same chunks absorbed in the same pieces: bit for bit */
    ck_assert_msg(s.s.data[e] == one_s.s.data[e], "G %zu map %zu: state[%zu] %g vs %g", G, map, e, (double)s.s.data[e],
                  (double)one_s.s.data[e]);
  free(got);
  free(sc);
  lu_ref_free(&r);
  tu_tensor_free(&one);
  lu_state_free(&one_s);
  lu_state_free(&s);
  tu_qkv_free(&x);
}
END_TEST

/* FLASH (spec 5) as the sum of its two documented calls, against the brute-force formula in
 * double: o_i = sum_{j in i's chunk, j <= p_i} relu(q_i.k_j / G + b[p_i - j])^2 v_j (attn_gau,
 * chunk-local causal mask, causal Toeplitz table) + sum_{j < chunk start} (q'_i.k'_j / G) v_j
 * (attn_linear, identity, un-normalised, exclusive chunk G). n = 10 with g = 4 (the issue's),
 * and n = 130 with G = 48 and 7; GQA 4 : 2. */
START_TEST(linear_flash_sum_matches_formula) {
  static const size_t ns[] = {10, 130, 130}, Gs[] = {4, 48, 7};
  const size_t n = ns[_i], G = Gs[_i], hq = 4, hkv = 2, dd = 8, dv = 8, grp = hq / hkv;
  tu_rng rng = tu_rng_of(17200 + (uint64_t)_i);
  tu_qkv x, y; /* x: the quadratic part's q, k, v; y: the linear part's q', k' (its v unused: v is shared) */
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  tu_qkv_make(&y, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  float table[48];
  for (size_t e = 0; e < G; ++e) table[e] = (float)(tu_rng_next(&rng) % 2001) * 1e-4f - 0.1f; /* in [-0.1, 0.1] */
  attn_gau_desc gd;
  ck_assert_int_eq(attn_gau_desc_init(&gd, n, n, hq, hkv, dd, dv), ATTN_OK);
  gd.mask = (attn_mask){ATTN_UNBOUNDED, 0, G};
  gd.scale = 1.0f / (float)G;
  gd.bias = ATTN_GAU_BIAS_CAUSAL;
  gd.bias_table = table;
  gd.bias_len = G;
  size_t ws = 0;
  ck_assert_int_eq(attn_gau_workspace_size(&gd, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  float *quad = malloc(sizeof(float) * n * hq * dv), *lin = malloc(sizeof(float) * n * hq * dv);
  ck_assert(quad && lin);
  ck_assert_int_eq(attn_gau(&gd, x.q.data, x.k.data, x.v.data, quad, mem, ws), ATTN_OK);
  tu_free(mem);
  attn_linear_desc ld;
  const size_t c[7] = {n, n, hq, hkv, dd, dv, G};
  fx_desc(&ld, c, 0);
  ck_assert_int_eq(attn_linear_workspace_size(&ld, &ws), ATTN_OK);
  mem = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear(&ld, y.q.data, y.k.data, x.v.data, lin, NULL, mem, ws), ATTN_OK);
  tu_free(mem);
  for (size_t i = 0; i < n; ++i)
    for (size_t h = 0; h < hq; ++h) {
      const size_t hk = h / grp, cs = i / G * G;
      for (size_t col = 0; col < dv; ++col) {
        double ref = 0.0, mag = 0.0;
        for (size_t j = 0; j <= i; ++j) {
          double s = 0.0, sa = 0.0;
          const tu_qkv *a = j >= cs ? &x : &y;
          for (size_t f = 0; f < dd; ++f) {
            const double p = (double)*tu_at(&a->q, i, h, f) * (double)*tu_at(&a->k, j, hk, f);
            s += p;
            sa += fabs(p);
          }
          s /= (double)G, sa /= (double)G;
          double w, wm;
          if (j >= cs) { /* the quadratic part */
            const double z = s + (double)table[i - j < G ? i - j : G - 1];
            w = z > 0.0 ? z * z : 0.0;
            wm = (fabs(z) + sa) * (fabs(z) + sa);
          } else {
            w = s, wm = sa;
          }
          const double vv = (double)*tu_at(&x.v, j, hk, col);
          ref += w * vv;
          mag += wm * fabs(vv);
        }
        const size_t e = (i * hq + h) * dv + col;
        const double got = (double)quad[e] + (double)lin[e];
        /* each term's error is a few float roundings of its magnitude: the dot product over d, the
         * square, the sums over n keys (tolerances.h: tol_linear_o's n + d roundings, doubled for
         * the square) */
        const double tol = 2.0 * tol_linear_o(n, dd) * mag + 1e-30;
        ck_assert_msg(fabs(got - ref) <= tol, "FLASH n %zu G %zu (%zu,%zu,%zu): %.9g vs %.9g (tol %.3g)", n, G, i, h,
                      col, got, ref, tol);
      }
    }
  free(quad);
  free(lin);
  tu_qkv_free(&x);
  tu_qkv_free(&y);
}
END_TEST

/* What the exclusive form refuses, output untouched: another mask than causal, a gate, an
 * exponential map, a state whose absorbed tokens are not whole chunks. */
START_TEST(linear_flash_rejects_bad_input) {
  const size_t n = 20, G = 4;
  const size_t c[7] = {n, n, 2, 2, 8, 8, G};
  tu_rng rng = tu_rng_of(17300 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n, n, 2, 2, 2, 8, 8);
  attn_linear_desc d;
  fx_desc(&d, c, 0);
  lu_state s;
  lu_state_make(&s, &d);
  attn_status want = ATTN_E_BAD_WINDOW;
  float log_gate[20 * 2];
  for (size_t e = 0; e < 40; ++e) log_gate[e] = -0.1f;
  const float *lg = NULL;
  attn_linear_state *sp = NULL;
  switch (_i) {
    case 0:
      d.mask = attn_mask_full();
      break;
    case 1:
      d.mask = attn_mask_window(3, 0);
      break;
    case 2:
      d.mask = (attn_mask){ATTN_UNBOUNDED, 0, 4};
      break;
    case 3:
      d.gate = ATTN_GATE_SCALAR;
      d.gate_layout = (attn_layout){2, 1};
      lg = log_gate;
      break;
    case 4:
      d.feature_map = EXPM;
      d.normalize = 1;
      d.scale = 0.5f;
      want = ATTN_E_BAD_FEATURE_MAP;
      break;
    default: /* a state with 3 absorbed tokens */
      s.s.tokens = 3;
      sp = &s.s;
      want = ATTN_E_STATE_MISMATCH;
      break;
  }
  size_t ws = 1 << 20;
  void *mem = tu_alloc(ws, 0);
  float *o = malloc(sizeof(float) * n * 2 * 8);
  ck_assert_ptr_nonnull(o);
  for (size_t e = 0; e < n * 16; ++e) o[e] = 12345.0f;
  ck_assert_int_eq(attn_linear_gated(&d, x.q.data, x.k.data, x.v.data, lg, NULL, o, sp, mem, ws), want);
  for (size_t e = 0; e < n * 16; ++e) ck_assert(o[e] == 12345.0f);
  free(o);
  tu_free(mem);
  lu_state_free(&s);
  tu_qkv_free(&x);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"flash", linear_flash_exclusive_matches_reference, (int)(3 * FX_NCASES)},
    {"flash", linear_flash_pieces_then_decode, 12}, {"flash", linear_flash_sum_matches_formula, 3},
    {"flash", linear_flash_rejects_bad_input, 6})
/* clang-format on */
