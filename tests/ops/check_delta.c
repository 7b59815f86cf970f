/*
 * Delta-rule attention (attn_delta: DeltaNet, Gated DeltaNet, Kimi Delta Attention; spec
 * VARIANTS.md section 8) on the ISA path named by ATTN_ISA, against the float64 token recurrence
 * of tests/ref/ref_delta.c. TCases: "reference" (the case table: PLAIN, SCALAR and FEATURE gates,
 * sizes around the chunk C the call uses, decode and speculative blocks, shared key heads,
 * layouts, gates from 0 to -200 per token, beta 0 to 2, with and without qk_l2norm, scales,
 * incoming states), "properties" (decode token by token vs one prefill, pieces vs one call, a
 * long sequence) and "nonfinite" (attn.h's policy). Checkpoints, threads and bad input:
 * check_delta_state.c.
 *
 * TOLERANCES: tests/common/tolerances.h (delta rule): |got - ref| <= tol_delta(d, C) * scale +
 * TOL_DT_FLOOR with scale the reference's error scale (ref_delta.h). Two library results (decode
 * vs prefill, pieces vs one call) may each be off by the bound: TOL_PROPERTY_FACTOR times it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linear_util.h"
#include "test_util.h"
#include "tolerances.h"

#include "delta_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
/* Tokens: cn C + nb with C the chunk the call uses (attn_delta_chunk_size); every field left out
 * is the default: one key and value head, SCALAR gates in [-0.5, 0), beta in [0.05, 1),
 * qk_l2norm, token-major, chunk 0 (the path's), the default scale, no incoming state. */
typedef struct dt_case {
  const char *name;
  size_t cn;
  long nb;
  size_t hk, hv, d, dv;
  attn_delta_gate gate;
  tu_layout_kind layout;
  size_t chunk;
  int nonorm, state, split, beta0, row0;
  float glo, ghi, blo, bhi, scale;
} dt_case;

#define N(c, b)          .cn = (c), .nb = (b)
#define DIMS(k, v, a, b) .hk = (k), .hv = (v), .d = (a), .dv = (b)
#define PLAIN            .gate = ATTN_DELTA_PLAIN
#define SCAL             .gate = ATTN_DELTA_SCALAR
#define FEAT             .gate = ATTN_DELTA_FEATURE
#define G(lo, hi)        .glo = (lo), .ghi = (hi)
#define B(lo, hi)        .blo = (lo), .bhi = (hi)
#define ST               .state = 1
#define NONORM           .nonorm = 1

static const dt_case dt_cases[] = {
    /* decode (one token) and speculative blocks (2..8 tokens: a chunk of their own) */
    {"decode_5x7_plain", N(0, 1), DIMS(1, 1, 5, 7), PLAIN, ST},
    {"decode_16_feature_gqa", N(0, 1), DIMS(1, 3, 16, 16), FEAT, ST},
    {"decode_128x64_scalar", N(0, 1), DIMS(2, 4, 128, 64), SCAL, ST},
    {"spec2_16_scalar", N(0, 2), DIMS(2, 4, 16, 16), SCAL, ST},
    {"spec5_5x7_feature", N(0, 5), DIMS(1, 1, 5, 7), FEAT, ST},
    {"spec8_64_plain", N(0, 8), DIMS(1, 3, 64, 64), PLAIN, ST},
    {"spec7_64_feature_nonorm", N(0, 7), DIMS(1, 1, 64, 64), FEAT, ST, NONORM},
    /* sizes around the chunk: C - 1, C, C + 1, 2C + 3 */
    {"cm1_5x7_scalar", N(1, -1), DIMS(1, 1, 5, 7), SCAL},
    {"c_16_feature", N(1, 0), DIMS(1, 1, 16, 16), FEAT},
    {"cp1_64_plain", N(1, 1), DIMS(1, 1, 64, 64), PLAIN},
    {"2cp3_128x64_scalar", N(2, 3), DIMS(1, 1, 128, 64), SCAL, ST},
    {"2cp3_128x64_feature", N(2, 3), DIMS(1, 2, 128, 64), FEAT},
    {"2cp3_5x7_plain", N(2, 3), DIMS(1, 1, 5, 7), PLAIN, ST},
    {"c16_2cp3_feature_gqa", N(2, 3), DIMS(2, 4, 16, 16), FEAT, .chunk = 16, ST},
    {"c16_cm1_plain", N(1, -1), DIMS(1, 3, 5, 7), PLAIN, .chunk = 16},
    {"c16_cp1_scalar_64", N(1, 1), DIMS(1, 1, 64, 64), SCAL, .chunk = 16},
    {"c7_3cp2_scalar", N(3, 2), DIMS(1, 1, 16, 16), SCAL, .chunk = 7},
    {"c1_every_token_feature", N(20, 0), DIMS(1, 1, 16, 16), FEAT, .chunk = 1, ST},
    {"c2_odd_feature", N(9, 1), DIMS(1, 2, 5, 7), FEAT, .chunk = 2},
    {"c256_max_feature", N(1, 44), DIMS(1, 1, 16, 16), FEAT, .chunk = 256},
    {"c32_4c_128x64_plain", N(4, 0), DIMS(1, 1, 128, 64), PLAIN, .chunk = 32},
    /* shared key heads (h_k divides h_v) and h_k = h_v */
    {"gqa_1_3_scalar", N(2, 3), DIMS(1, 3, 16, 16), SCAL, ST},
    {"gqa_2_4_feature", N(1, 1), DIMS(2, 4, 16, 16), FEAT, ST},
    {"heads_4_4_plain", N(1, 0), DIMS(4, 4, 16, 16), PLAIN},
    {"heads_3_3_feature_5x7", N(1, 5), DIMS(3, 3, 5, 7), FEAT},
    /* layouts: head-major, padded, head-padded, packed projections (row stride > heads d) */
    {"headmajor_scalar", N(1, 5), DIMS(2, 4, 16, 16), SCAL, .layout = TU_HEAD_MAJOR, ST},
    {"padded_feature", N(1, 9), DIMS(1, 3, 16, 16), FEAT, .layout = TU_PADDED},
    {"headpadded_plain", N(1, 3), DIMS(2, 2, 5, 7), PLAIN, .layout = TU_HEAD_PADDED},
    {"packed_scalar_gqa", N(2, 3), DIMS(2, 4, 16, 16), SCAL, .layout = TU_PACKED_QKV, ST},
    {"packed_feature_64", N(1, 1), DIMS(1, 1, 64, 64), FEAT, .layout = TU_PACKED_QKV},
    {"gate_row0_scalar", N(2, 3), DIMS(1, 3, 16, 16), SCAL, .row0 = 1},
    {"gate_row0_feature", N(1, 7), DIMS(2, 4, 16, 16), FEAT, .row0 = 1},
    /* gates near 0, and strong decays: -20, -60, -200 per token (no overflow, no NaN) */
    {"gates_near0_scalar", N(2, 3), DIMS(1, 1, 16, 16), SCAL, G(-1e-4f, 0.0f), ST},
    {"gates_near0_feature", N(2, 3), DIMS(1, 1, 16, 16), FEAT, G(-1e-4f, 0.0f), ST},
    {"gates_20_scalar", N(2, 3), DIMS(1, 2, 16, 16), SCAL, G(-20.5f, -19.5f), ST},
    {"gates_20_feature", N(2, 3), DIMS(1, 2, 16, 16), FEAT, G(-20.5f, -19.5f), ST},
    {"gates_60_feature", N(2, 3), DIMS(1, 1, 16, 16), FEAT, G(-60.5f, -59.5f), ST},
    {"gates_200_scalar", N(2, 3), DIMS(1, 1, 16, 16), SCAL, G(-200.5f, -199.5f), ST},
    {"gates_200_feature", N(2, 3), DIMS(1, 1, 16, 16), FEAT, G(-200.5f, -199.5f), ST},
    {"gates_split_20_feature", N(2, 3), DIMS(1, 1, 16, 16), FEAT, G(-20.5f, -19.5f), .split = 1, ST},
    {"gates_split_200_feature", N(2, 3), DIMS(1, 1, 64, 64), FEAT, G(-200.0f, -150.0f), .split = 1, ST},
    {"gates_split_5_feature_c16", N(3, 3), DIMS(1, 1, 16, 16), FEAT, G(-6.0f, -4.0f), .split = 1, .chunk = 16},
    {"gates_wide_feature", N(2, 3), DIMS(1, 1, 16, 16), FEAT, G(-30.0f, 0.0f), ST},
    /* beta: 0 (all, and every third), 1, 2, up to 2 */
    {"beta_all0_scalar", N(1, 3), DIMS(1, 1, 16, 16), SCAL, B(0.0f, 0.0f), ST},
    {"beta_some0_feature", N(2, 3), DIMS(1, 2, 16, 16), FEAT, .beta0 = 1, ST},
    {"beta1_plain", N(2, 3), DIMS(1, 1, 16, 16), PLAIN, B(1.0f, 1.0f), ST},
    {"beta1_feature_64", N(2, 3), DIMS(1, 1, 64, 64), FEAT, B(1.0f, 1.0f)},
    {"beta2_plain", N(2, 3), DIMS(1, 1, 16, 16), PLAIN, B(2.0f, 2.0f), ST},
    {"beta2_scalar_64", N(2, 3), DIMS(1, 1, 64, 64), SCAL, B(2.0f, 2.0f)},
    {"beta_1to2_feature", N(2, 3), DIMS(1, 3, 16, 16), FEAT, B(1.0f, 2.0f)},
    /* no qk_l2norm: keys of norm below 1 */
    {"nonorm_plain", N(2, 3), DIMS(1, 1, 16, 16), PLAIN, NONORM, ST},
    {"nonorm_scalar_beta2", N(2, 3), DIMS(1, 3, 64, 64), SCAL, NONORM, B(1.5f, 2.0f)},
    {"nonorm_feature_5x7", N(1, 1), DIMS(1, 1, 5, 7), FEAT, NONORM, ST},
    {"nonorm_feature_128x64", N(1, 1), DIMS(1, 1, 128, 64), FEAT, NONORM},
    /* scales */
    {"scale_0.37_scalar", N(1, 1), DIMS(1, 1, 16, 16), SCAL, .scale = 0.37f, ST},
    {"scale_-2_feature", N(1, 1), DIMS(1, 2, 16, 16), FEAT, .scale = -2.0f},
    {"scale_tiny_plain", N(1, 1), DIMS(1, 1, 16, 16), PLAIN, .scale = 1e-30f},
};
#define DT_NCASES (sizeof dt_cases / sizeof dt_cases[0])

static size_t dt_sel[DT_NCASES];

static size_t dt_case_n(const dt_case *c, size_t C) { return (size_t)((long)(c->cn * C) + c->nb); }

/* One call over all n tokens of in from an incoming state, and its reference: s the call's state, s0 and s2 copies of the incoming one (s0 the reference's). */
typedef struct dt_one_call {
  attn_delta_desc d;
  dt_in in;
  size_t C, n;
  float *s, *s0, *s2;
  tu_tensor o;
  dt_ref r;
} dt_one_call;

/* The call and its reference, with d, in, C and n set: the incoming state dt_state's (nonzero). */
static void dt_one_call_run(dt_one_call *f, tu_rng *rng, int nonzero) {
  f->s = dt_state(&f->d, rng, nonzero);
  f->s0 = dt_copy_state(&f->d, f->s);
  f->s2 = dt_copy_state(&f->d, f->s);
  dt_call(&f->d, &f->in, 0, f->n, f->s, NULL, &f->o);
  dt_ref_run(&f->r, &f->d, &f->in, 0, f->n, f->s0, f->C, 0, NULL);
}

/* A property case's (dt_pcase_setup) one call from a nonzero state. */
static void dt_one_call_make(dt_one_call *f, const dt_pcase *p, uint64_t seed, size_t mul, long add) {
  tu_rng rng;
  dt_pcase_setup(p, seed, mul, add, &f->d, &f->in, &f->C, &f->n, &rng);
  dt_one_call_run(f, &rng, 1);
}

static void dt_one_call_free(dt_one_call *f) {
  dt_ref_free(&f->r);
  tu_tensor_free(&f->o);
  tu_free(f->s);
  tu_free(f->s0);
  tu_free(f->s2);
  tu_gated_free(&f->in);
}

/* The state s2 against the one call's state s within the property factor of the reference's bound. */
static void dt_one_call_check_state(const char *what, const dt_one_call *f) {
  double *sd = dt_doubles(dt_state_floats(&f->d));
  for (size_t e = 0; e < dt_state_floats(&f->d); ++e) sd[e] = f->s[e];
  dt_check_state(what, &f->d, f->s2, sd, f->r.ss, f->C, TOL_PROPERTY_FACTOR);
  free(sd);
}

START_TEST(delta_matches_reference) {
  const dt_case *c = &dt_cases[dt_sel[_i]];
  tu_rng rng = tu_rng_of(41000 + (uint64_t)dt_sel[_i]);
  dt_one_call f;
  dt_desc(&f.d, c->hk, c->hv, c->d, c->dv, c->gate, c->chunk, !c->nonorm);
  if (c->scale != 0.0f) f.d.scale = c->scale;
  f.C = dt_chunk(&f.d);
  f.n = dt_case_n(c, f.C);
  const dt_spec s = {c->gate, c->layout, c->nonorm, c->glo, c->ghi, c->blo, c->bhi, c->split, c->beta0, c->row0};
  dt_in_make(&f.in, &s, &rng, f.n, c->hk, c->hv, c->d, c->dv);
  dt_one_call_run(&f, &rng, c->state);
  dt_assert_finite(c->name, f.s, dt_state_floats(&f.d));
  char what[160];
  snprintf(what, sizeof what, "%s (n %zu, C %zu)", c->name, f.n, f.C);
  dt_compare("delta.o", what, &f.o, f.r.o, f.r.os, c->d, f.C, 1.0);
  dt_check_state(what, &f.d, f.s, f.r.s, f.r.ss, f.C, 1.0);
  for (size_t t = 0; t < f.n; ++t)
    for (size_t h = 0; h < c->hv; ++h) dt_assert_finite(what, tu_at(&f.o, t, h, 0), c->dv);
  dt_one_call_free(&f);
}
END_TEST

/* Defaults of desc_init and the size queries. */
START_TEST(delta_desc_defaults) {
  attn_delta_desc d;
  ck_assert_int_eq(attn_delta_desc_init(NULL, 4, 1, 2, 16, 8, ATTN_DELTA_SCALAR), ATTN_E_NULL_POINTER);
  for (int g = 0; g < 3; ++g) {
    ck_assert_int_eq(attn_delta_desc_init(&d, 10, 2, 6, 16, 8, (attn_delta_gate)g), ATTN_OK);
    ck_assert_uint_eq(d.shape.n_q, 10);
    ck_assert_uint_eq(d.shape.n_kv, 10);
    ck_assert_uint_eq(d.shape.h_q, 2);
    ck_assert_uint_eq(d.shape.h_k, 2);
    ck_assert_uint_eq(d.shape.h_v, 6);
    ck_assert_uint_eq(d.shape.q.row_stride, 32);
    ck_assert_uint_eq(d.shape.v.row_stride, 48);
    ck_assert_uint_eq(d.shape.o.row_stride, 48);
    ck_assert_uint_eq(d.shape.o.head_stride, 8);
    ck_assert_int_eq(d.shape.kv_type, ATTN_F32);
    ck_assert_ptr_null(d.shape.threads);
    ck_assert_int_eq(d.gate, g);
    const size_t w = g == ATTN_DELTA_FEATURE ? 16 : 1;
    if (g != ATTN_DELTA_PLAIN) {
      ck_assert_uint_eq(d.gate_layout.row_stride, 6 * w);
      ck_assert_uint_eq(d.gate_layout.head_stride, w);
    }
    ck_assert_uint_eq(d.beta_layout.row_stride, 6);
    ck_assert_uint_eq(d.beta_layout.head_stride, 1);
    ck_assert(d.scale == (float)(1.0 / sqrt(16.0)));
    ck_assert_int_eq(d.qk_l2norm, 1);
    ck_assert_uint_eq(d.chunk, 0);
    size_t bytes = 0, c = 0;
    ck_assert_int_eq(attn_delta_state_size(&d, &bytes), ATTN_OK);
    ck_assert_uint_eq(bytes, sizeof(float) * 6 * 16 * 8);
    ck_assert_int_eq(attn_delta_chunk_size(&d, &c), ATTN_OK); /* the path's default */
    ck_assert(c >= 1 && c <= ATTN_LINEAR_MAX_CHUNK);
    d.chunk = 17;
    ck_assert_int_eq(attn_delta_chunk_size(&d, &c), ATTN_OK);
    ck_assert_uint_eq(c, 17);
    ck_assert_int_eq(attn_delta_workspace_size(&d, &bytes), ATTN_OK);
    ck_assert_int_eq(attn_delta_workspace_size(&d, NULL), ATTN_E_NULL_POINTER);
    ck_assert_int_eq(attn_delta_state_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties: decode vs prefill, pieces vs one call, a long sequence                           */
/* ------------------------------------------------------------------------------------------ */
/* One prefill of 2C + 5 tokens vs the same tokens one decode step (n = 1) at a time from the same
 * incoming state: each within its bound of the reference, and of each other (factor 2). */
START_TEST(delta_decode_equals_prefill) {
  const dt_pcase *p = &dt_pcases[_i];
  dt_one_call f;
  dt_one_call_make(&f, p, 42000 + (uint64_t)_i, 2, 5);
  const size_t row = p->hv * p->dv;
  for (size_t t = 0; t < f.n; ++t) {
    tu_tensor o1;
    dt_call(&f.d, &f.in, t, 1, f.s2, NULL, &o1);
    const tu_tensor pr = tu_rows_view(&f.o, t, 1);
    double *pd = dt_doubles(row);
    tu_tensor_to_double(&pr, pd);
    char what[96];
    snprintf(what, sizeof what, "decode step %zu vs prefill row (case %d)", t, _i);
    dt_compare("delta.prop", what, &o1, pd, f.r.os + t * row, p->d, f.C, TOL_PROPERTY_FACTOR);
    snprintf(what, sizeof what, "decode step %zu vs reference (case %d)", t, _i);
    dt_compare("delta.o", what, &o1, f.r.o + t * row, f.r.os + t * row, p->d, f.C, 1.0);
    free(pd);
    tu_tensor_free(&o1);
  }
  dt_check_state("decoded state", &f.d, f.s2, f.r.s, f.r.ss, f.C, 1.0);
  dt_check_state("prefill state", &f.d, f.s, f.r.s, f.r.ss, f.C, 1.0);
  dt_one_call_check_state("decoded vs prefill state", &f);
  dt_one_call_free(&f);
}
END_TEST

/* One call of 4C + 9 tokens vs pieces (a decode step, speculative blocks of 2..8, C - 1, C + 1, the
 * rest) each continuing the state: every piece within twice the bound of the one call. */
START_TEST(delta_pieces_equal_one_call) {
  const dt_pcase *p = &dt_pcases[_i];
  dt_one_call f;
  dt_one_call_make(&f, p, 43000 + (uint64_t)_i, 4, 9);
  const size_t C = f.C, n = f.n;
  dt_compare("delta.o", "one call", &f.o, f.r.o, f.r.os, p->d, C, 1.0);
  const size_t sizes[] = {1, 2, 8, C - 1 ? C - 1 : 1, 3, C + 1, 1, 5};
  const size_t row = p->hv * p->dv;
  double *od = dt_doubles(n * row);
  tu_tensor_to_double(&f.o, od);
  for (size_t t0 = 0, i = 0; t0 < n; ++i) {
    const size_t m = i < sizeof sizes / sizeof sizes[0] && t0 + sizes[i] < n ? sizes[i] : n - t0;
    tu_tensor op;
    dt_call(&f.d, &f.in, t0, m, f.s2, NULL, &op);
    char what[96];
    snprintf(what, sizeof what, "piece %zu (tokens %zu..%zu) vs one call (case %d)", i, t0, t0 + m, _i);
    dt_compare("delta.prop", what, &op, od + t0 * row, f.r.os + t0 * row, p->d, C, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&op);
    t0 += m;
  }
  dt_one_call_check_state("pieces' state vs one call's", &f);
  free(od);
  dt_one_call_free(&f);
}
END_TEST

/* A long sequence (4096 tokens; 1024 in small runs), one head of d = dv = 64 with qk_l2norm and
 * beta in (0, 1): Gated DeltaNet (log gates ~ -0.05), Kimi (per channel), DeltaNet. */
START_TEST(delta_long_sequence) {
  static const attn_delta_gate gates[3] = {ATTN_DELTA_SCALAR, ATTN_DELTA_FEATURE, ATTN_DELTA_PLAIN};
  const size_t n = tu_small() ? 1024 : 4096;
  tu_rng rng = tu_rng_of(44000 + (uint64_t)_i);
  attn_delta_desc d;
  dt_desc(&d, 1, 1, 64, 64, gates[_i], 0, 1);
  const size_t C = dt_chunk(&d);
  const dt_spec s = {gates[_i], TU_TOKEN_MAJOR, 0, -0.1f, 0.0f, 0.01f, 0.99f, 0, 0, 0};
  dt_in in;
  dt_in_make(&in, &s, &rng, n, 1, 1, 64, 64);
  float *st = dt_state(&d, &rng, 0);
  tu_tensor o;
  dt_call(&d, &in, 0, n, st, NULL, &o);
  dt_ref r;
  dt_ref_run(&r, &d, &in, 0, n, NULL, C, 0, NULL);
  dt_compare("delta.long", "4096 tokens", &o, r.o, r.os, 64, C, 1.0);
  dt_check_state("long state", &d, st, r.s, r.ss, C, 1.0);
  dt_ref_free(&r);
  tu_tensor_free(&o);
  tu_free(st);
  tu_gated_free(&in);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Non-finite inputs                                                                           */
/* ------------------------------------------------------------------------------------------ */
/* q, k or v ((case % 9) / 3) NaN, +inf or -inf (case % 3) at token t = C + 5 of 2C + 3 (inside
 * the second chunk), key head 0 or value head 1, h_k 1 and h_v 2; SCALAR gates with qk_l2norm
 * (case < 9), FEATURE gates without (small keys). Against the reference, which applies attn.h's
 * policy: q makes row t of both value heads NaN; k makes both heads' rows from t on and their
 * states NaN; v value head 1's. Every other element within the bound (the chunk holding t runs
 * token by token). */
START_TEST(delta_nonfinite_policy) {
  static const float bad[3] = {NAN, INFINITY, -INFINITY};
  const int which = (_i % 9) / 3, l2 = _i < 9;
  const attn_delta_gate gate = l2 ? ATTN_DELTA_SCALAR : ATTN_DELTA_FEATURE;
  tu_rng rng = tu_rng_of(47000 + (uint64_t)_i);
  dt_one_call f;
  dt_desc(&f.d, 1, 2, 16, 16, gate, 0, l2);
  f.C = dt_chunk(&f.d);
  f.n = 2 * f.C + 3;
  const size_t t = f.C + 5;
  const dt_spec s = {.gate = gate, .layout = TU_TOKEN_MAJOR, .small_keys = !l2};
  dt_in_make(&f.in, &s, &rng, f.n, 1, 2, 16, 16);
  tu_tensor *x = which == 0 ? &f.in.x.q : which == 1 ? &f.in.x.k : &f.in.x.v;
  *tu_at(x, t, which == 2 ? 1 : 0, 3) = bad[_i % 3];
  tu_qkv_snapshot(&f.in.x);
  dt_one_call_run(&f, &rng, 1);
  char what[96];
  snprintf(what, sizeof what, "%c[%zu] = %g", "qkv"[which], t, (double)bad[_i % 3]);
  dt_compare("delta.o", what, &f.o, f.r.o, f.r.os, 16, f.C, 1.0);
  dt_check_state(what, &f.d, f.s, f.r.s, f.r.ss, f.C, 1.0);
  dt_one_call_free(&f);
}
END_TEST

static Suite *delta_suite(attn_isa isa) {
  size_t work[DT_NCASES];
  for (size_t i = 0; i < DT_NCASES; ++i) {
    const dt_case *c = &dt_cases[i];
    /* the recurrence's d dv per token and value head, in the harness's units */
    work[i] = dt_case_n(c, c->chunk ? c->chunk : 64) * c->hv * c->d * c->dv / 4;
  }
  const size_t nsel = tu_select_rows(DT_NCASES, work, dt_sel);
  /* clang-format off */
  return TU_SUITE(isa,
    {"reference", delta_matches_reference, (int)nsel}, {"reference", delta_desc_defaults, 1},
    {"properties", delta_decode_equals_prefill, (int)dt_npcases},
      {"properties", delta_pieces_equal_one_call, (int)dt_npcases}, {"properties", delta_long_sequence, 3},
    {"nonfinite", delta_nonfinite_policy, 18});
  /* clang-format on */
}

int main(void) { return tu_main(delta_suite); }
