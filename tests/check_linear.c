/*
 * Linear attention and its state, on the ISA path named by ATTN_ISA, against the float64
 * reference. TCases: "reference" (the shape table, outputs and states), "properties" (chunkwise
 * prefill vs recurrent decode for several chunk sizes, prefill state continuing into decode,
 * bit-exact snapshot / restore, a prefill split in two calls).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tolerances.h"

#define T TU_TOKEN_MAJOR
#define H TU_HEAD_MAJOR
#define P TU_PADDED
#define HP TU_HEAD_PADDED
#define PK TU_PACKED_QKV
#define UNI TU_DATA_UNIFORM
#define POS TU_DATA_POSITIVE
#define WIDE TU_DATA_WIDE
#define ELU ATTN_FEATURE_ELU1
#define ID ATTN_FEATURE_IDENTITY
#define CAUSAL 1
#define BIDIR 0
#define NORM 1
#define UNNORM 0
#define EPS_DEF (-1.0f)

typedef struct ln_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_feature_map fm;
  int causal, normalize;
  size_t chunk;          /* 0: the path's default */
  float eps;             /* EPS_DEF: the descriptor's default 1e-6 */
  tu_layout_kind layout;
  tu_data data;
  size_t prefix;         /* causal: tokens absorbed into the state by an earlier call */
  int state;             /* causal: 1 pass a state, 0 pass NULL */
} ln_case;

/* Chunk 64 by default: sizes around it and its multiples; vectors of 8 and 4 floats for d. */
static const ln_case ln_cases[] = {
  /* causal, elu1, normalised, default chunk: sizes */
  {"n1_d1", 1, 1, 1, 1, 1, 1, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n2_d7", 2, 2, 1, 1, 7, 7, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n7_d8", 7, 7, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n8_d64", 8, 8, 1, 1, 64, 64, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n9_d65", 9, 9, 1, 1, 65, 65, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n31_d128", 31, 31, 1, 1, 128, 128, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n47_d1", 47, 47, 1, 1, 1, 1, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n48_d7", 48, 48, 2, 1, 7, 7, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n49_d8", 49, 49, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n63_d64", 63, 63, 1, 1, 64, 64, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n64_d65", 64, 64, 1, 1, 65, 65, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n65_d128", 65, 65, 1, 1, 128, 128, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n95_d8", 95, 95, 2, 2, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n96_d7", 96, 96, 1, 1, 7, 7, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n97_d64", 97, 97, 1, 1, 64, 64, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n127_d65", 127, 127, 1, 1, 65, 65, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n128_d8", 128, 128, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n129_d64", 129, 129, 1, 1, 64, 64, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n200_d128", 200, 200, 1, 1, 128, 128, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"n257_d64", 257, 257, 1, 1, 64, 64, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  /* head widths */
  {"d1", 70, 70, 2, 1, 1, 1, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d3_dv4", 70, 70, 2, 1, 3, 4, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d4_dv5", 70, 70, 2, 1, 4, 5, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d5_dv3_unnorm", 70, 70, 2, 1, 5, 3, ID, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d7", 70, 70, 2, 1, 7, 7, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d8", 70, 70, 2, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d64", 70, 70, 2, 1, 64, 64, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d65", 70, 70, 2, 1, 65, 65, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d128", 70, 70, 2, 1, 128, 128, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  /* dv != d */
  {"d64_dv7", 50, 50, 1, 1, 64, 7, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d8_dv65", 65, 65, 2, 1, 8, 65, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"d1_dv128", 33, 33, 1, 1, 1, 128, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  /* bidirectional (state must be NULL) */
  {"bidir_30x50", 30, 50, 1, 1, 16, 16, ELU, BIDIR, NORM, 0, EPS_DEF, T, UNI, 0, 0},
  {"bidir_1x1", 1, 1, 1, 1, 8, 8, ELU, BIDIR, NORM, 0, EPS_DEF, T, UNI, 0, 0},
  {"bidir_65x17_d65", 65, 17, 2, 1, 65, 65, ELU, BIDIR, NORM, 0, EPS_DEF, T, UNI, 0, 0},
  {"bidir_id_unnorm", 129, 129, 1, 1, 64, 64, ID, BIDIR, UNNORM, 0, EPS_DEF, T, UNI, 0, 0},
  {"bidir_id_unnorm_dv", 40, 100, 2, 2, 7, 9, ID, BIDIR, UNNORM, 0, EPS_DEF, T, UNI, 0, 0},
  {"bidir_elu_unnorm", 64, 64, 1, 1, 8, 8, ELU, BIDIR, UNNORM, 0, EPS_DEF, T, UNI, 0, 0},
  {"bidir_gqa_4_2", 37, 45, 4, 2, 16, 8, ELU, BIDIR, NORM, 0, EPS_DEF, T, UNI, 0, 0},
  {"bidir_wide", 50, 50, 1, 1, 16, 16, ELU, BIDIR, NORM, 0, EPS_DEF, T, WIDE, 0, 0},
  /* un-normalised causal */
  {"id_unnorm_n47_d64", 47, 47, 1, 1, 64, 64, ID, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"id_unnorm_n64_d128", 64, 64, 1, 1, 128, 128, ID, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"id_unnorm_n65_d8", 65, 65, 2, 1, 8, 8, ID, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"id_unnorm_n129_d65", 129, 129, 1, 1, 65, 65, ID, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"elu_unnorm_n100", 100, 100, 1, 1, 16, 16, ELU, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 0, 1},
  /* identity normalised (positive data keeps the denominator away from 0) */
  {"id_norm_pos", 50, 50, 1, 1, 16, 16, ID, CAUSAL, NORM, 0, EPS_DEF, T, POS, 0, 1},
  {"id_norm_pos_bidir", 30, 30, 2, 2, 8, 8, ID, BIDIR, NORM, 0, EPS_DEF, T, POS, 0, 0},
  /* elu1 over its whole range (exp branch down to e^-30) */
  {"elu_wide", 70, 70, 1, 1, 16, 16, ELU, CAUSAL, NORM, 0, EPS_DEF, T, WIDE, 0, 1},
  /* chunk sizes */
  {"chunk1", 100, 100, 1, 1, 16, 16, ELU, CAUSAL, NORM, 1, EPS_DEF, T, UNI, 0, 1},
  {"chunk7", 100, 100, 1, 1, 16, 16, ELU, CAUSAL, NORM, 7, EPS_DEF, T, UNI, 0, 1},
  {"chunk48", 97, 97, 1, 1, 8, 8, ELU, CAUSAL, NORM, 48, EPS_DEF, T, UNI, 0, 1},
  {"chunk64", 129, 129, 1, 1, 64, 64, ELU, CAUSAL, NORM, 64, EPS_DEF, T, UNI, 0, 1},
  {"chunk256", 129, 129, 1, 1, 8, 8, ELU, CAUSAL, NORM, 256, EPS_DEF, T, UNI, 0, 1},
  {"chunk256_n300", 300, 300, 1, 1, 32, 32, ELU, CAUSAL, NORM, 256, EPS_DEF, T, UNI, 0, 1},
  {"chunk7_id_unnorm", 65, 65, 1, 1, 8, 8, ID, CAUSAL, UNNORM, 7, EPS_DEF, T, UNI, 0, 1},
  /* n_q < n_kv (chunked prefill, bottom-right) and decode */
  {"chunked_10_of_75", 10, 75, 1, 1, 16, 16, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"decode_1_of_64", 1, 64, 2, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"chunked_48_of_200", 48, 200, 1, 1, 64, 64, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"chunked_63_of_129_c7", 63, 129, 1, 1, 8, 8, ELU, CAUSAL, NORM, 7, EPS_DEF, T, UNI, 0, 1},
  /* n_q > n_kv: the first rows see no key of this call */
  {"nq20_nkv5", 20, 5, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"nq20_nkv5_prefix", 20, 5, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 30, 1},
  {"nq97_nkv48_unnorm", 97, 48, 2, 1, 8, 8, ID, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 0, 1},
  /* heads */
  {"gqa_4_2", 37, 37, 4, 2, 16, 16, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"mqa_6_1", 50, 50, 6, 1, 64, 32, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"mha_3_3", 17, 17, 3, 3, 24, 24, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 1},
  {"gqa_4_2_unnorm_c7", 70, 70, 4, 2, 8, 8, ID, CAUSAL, UNNORM, 7, EPS_DEF, T, UNI, 0, 1},
  /* eps */
  {"eps_0.5", 40, 40, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0, 0.5f, T, UNI, 0, 1},
  {"eps_0", 40, 40, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0, 0.0f, T, UNI, 0, 1},
  {"eps_2_bidir", 40, 40, 1, 1, 8, 8, ELU, BIDIR, NORM, 0, 2.0f, T, UNI, 0, 0},
  /* an incoming state (earlier tokens) and no state */
  {"prefix30_n20", 20, 20, 2, 1, 16, 16, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 30, 1},
  {"prefix64_decode", 1, 1, 2, 2, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 64, 1},
  {"prefix100_chunked", 10, 75, 1, 1, 8, 8, ELU, CAUSAL, NORM, 7, EPS_DEF, T, UNI, 100, 1},
  {"prefix5_id_unnorm", 33, 33, 1, 1, 8, 8, ID, CAUSAL, UNNORM, 0, EPS_DEF, T, UNI, 5, 1},
  {"no_state_causal", 40, 40, 2, 1, 8, 8, ELU, CAUSAL, NORM, 0, EPS_DEF, T, UNI, 0, 0},
  /* layouts */
  {"head_major", 37, 37, 2, 2, 16, 16, ELU, CAUSAL, NORM, 0, EPS_DEF, H, UNI, 0, 1},
  {"padded", 49, 49, 2, 1, 13, 11, ELU, CAUSAL, NORM, 7, EPS_DEF, P, UNI, 0, 1},
  {"head_padded_bidir", 33, 40, 3, 1, 7, 9, ELU, BIDIR, NORM, 0, EPS_DEF, HP, UNI, 0, 0},
  {"packed_mha", 40, 40, 4, 4, 16, 16, ELU, CAUSAL, NORM, 0, EPS_DEF, PK, UNI, 0, 1},
  {"packed_gqa_unnorm", 41, 41, 4, 2, 8, 8, ID, CAUSAL, UNNORM, 0, EPS_DEF, PK, UNI, 0, 1},
};
#define LN_NCASES (sizeof ln_cases / sizeof ln_cases[0])
static size_t ln_sel[LN_NCASES];

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */
static void ln_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                    size_t dd, size_t dv, attn_feature_map fm, int causal, int normalize,
                    size_t chunk) {
  ck_assert_int_eq(attn_linear_desc_init(d, n_q, n_kv, h_q, h_kv, dd, dv, fm), ATTN_OK);
  d->causal = causal;
  d->normalize = normalize;
  d->chunk = chunk;
}

typedef struct ln_state {
  attn_linear_state s;
  void *mem;
} ln_state;

static size_t state_floats(const attn_linear_state *s) { return s->heads * s->m * (s->dv + 1); }

/* A bound state in guarded memory of exactly attn_linear_state_size bytes; checks the shape
 * fields and that it starts zeroed. */
static void ln_state_make(ln_state *st, const attn_linear_desc *d) {
  size_t bytes = 0;
  ck_assert_int_eq(attn_linear_state_size(d, &bytes), ATTN_OK);
  ck_assert_uint_ge(bytes, sizeof(float) * d->h_kv * d->d * (d->dv + 1));
  st->mem = tu_alloc(bytes, 0);
  memset(&st->s, 0xAB, sizeof st->s);
  ck_assert_int_eq(attn_linear_state_init(&st->s, d, st->mem, bytes), ATTN_OK);
  ck_assert_uint_eq(st->s.heads, d->h_kv);
  ck_assert_uint_eq(st->s.m, d->d);
  ck_assert_uint_eq(st->s.dv, d->dv);
  ck_assert_int_eq(st->s.feature_map, d->feature_map);
  ck_assert_int_eq(st->s.normalize, d->normalize);
  ck_assert_uint_eq(st->s.tokens, 0);
  ck_assert_ptr_eq(st->s.data, st->mem);
  for (size_t e = 0; e < state_floats(&st->s); ++e) ck_assert(st->s.data[e] == 0.0f);
  tu_assert_guards("state init", st->mem);
}

static void ln_state_free(ln_state *st) { tu_free(st->mem); }

static double *ln_state_to_double(const attn_linear_state *s) {
  double *out = malloc(sizeof(double) * state_floats(s));
  ck_assert_ptr_nonnull(out);
  for (size_t e = 0; e < state_floats(s); ++e) out[e] = (double)s->data[e];
  return out;
}

/* The state's documented layout, S[h][p][c] = data[(h*m + p)*(dv+1) + c], z in column dv, as a
 * [heads*m][1][dv+1] tensor. */
static tu_tensor state_view(const attn_linear_state *s) {
  tu_tensor t;
  memset(&t, 0, sizeof t);
  t.data = s->data;
  t.n = s->heads * s->m;
  t.h = 1;
  t.w = s->dv + 1;
  t.l.row_stride = s->dv + 1;
  t.l.head_stride = s->dv + 1;
  t.span = t.n * t.w;
  return t;
}

/* attn_linear with q, k, v as given, o freshly allocated (guarded) in layout okind; asserts
 * ATTN_OK, guards of o, workspace (exact size) and state memory, untouched gaps of o. */
static void ln_call(const attn_linear_desc *desc, const tu_tensor *q, const tu_tensor *k,
                    const tu_tensor *v, tu_layout_kind okind, attn_linear_state *state,
                    size_t misalign, tu_tensor *o) {
  attn_linear_desc dd = *desc;
  tu_tensor_alloc(o, okind, dd.n_q, dd.h_q, dd.dv, 1);
  dd.q = q->l;
  dd.k = k->l;
  dd.v = v->l;
  dd.o = o->l;
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(attn_linear(&dd, q->data, k->data, v->data, o->data, state, w, ws), ATTN_OK);
  tu_assert_guards("linear workspace", w);
  tu_free(w);
  tu_assert_output_clean("linear o", o);
  if (state) tu_assert_guards("linear state memory", state->data);
}

static ref_linear_problem ln_problem(const attn_linear_desc *d, const tu_tensor *q,
                                     const tu_tensor *k, const tu_tensor *v, const double *s0) {
  const ref_linear_problem p = {d->n_q, d->n_kv, d->h_q, d->h_kv, d->d, d->dv,
                                d->feature_map == ELU ? REF_FM_ELU1 : REF_FM_IDENTITY,
                                d->causal, d->normalize, (double)d->eps, q->data, k->data,
                                v->data, tu_ref_layout(q), tu_ref_layout(k), tu_ref_layout(v),
                                s0};
  return p;
}

/* The one output comparison: got against expected values (the reference or another library
 * result) with the reference's scales; n_tokens counts every key token behind the outputs. */
static void ln_compare(const char *family, const char *what, const tu_tensor *got,
                       const double *expect, const double *scale, double tol1, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *tol = tu_dup(tol1 * factor, count);
  tu_compare(family, what, got, expect, scale, tol);
  free(tol);
}

/* Reference outputs and scales of a problem, then the comparison. */
static void ln_check_output(const char *what, const attn_linear_desc *d, const tu_tensor *q,
                            const tu_tensor *k, const tu_tensor *v, const double *s0,
                            size_t prefix, const tu_tensor *got) {
  const ref_linear_problem p = ln_problem(d, q, k, v, s0);
  const size_t count = d->n_q * d->h_q * d->dv;
  double *ro = malloc(sizeof(double) * count), *rs = malloc(sizeof(double) * count);
  ck_assert(ro && rs);
  ref_linear(&p, ro, rs);
  ln_compare("linear.o", what, got, ro, rs, tol_linear_o(prefix + d->n_kv, d->d), 1.0);
  free(ro);
  free(rs);
}

/* The state after a call against the reference: s0 plus this call's keys; tokens counted. */
static void ln_check_state(const char *what, const attn_linear_desc *d, const tu_tensor *k,
                           const tu_tensor *v, const double *s0, size_t prefix,
                           const attn_linear_state *s) {
  const ref_linear_problem p = ln_problem(d, k, k, v, s0);
  const size_t count = state_floats(s);
  double *rs = malloc(sizeof(double) * count), *sc = malloc(sizeof(double) * count);
  ck_assert(rs && sc);
  ref_linear_state(&p, rs, sc);
  ck_assert_uint_eq(s->tokens, prefix + d->n_kv);
  ck_assert_uint_eq(s->heads, d->h_kv);
  ck_assert_uint_eq(s->m, d->d);
  ck_assert_uint_eq(s->dv, d->dv);
  const tu_tensor view = state_view(s);
  ln_compare("linear.state", what, &view, rs, sc, tol_linear_state(prefix + d->n_kv), 1.0);
  free(rs);
  free(sc);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
START_TEST(linear_matches_reference) {
  const size_t idx = ln_sel[_i];
  const ln_case *c = &ln_cases[idx];
  tu_rng rng;
  tu_rng_seed(&rng, 7000 + idx);
  attn_linear_desc d;
  ln_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->fm, c->causal, c->normalize,
          c->chunk);
  if (c->eps != EPS_DEF) d.eps = c->eps;
  ln_state st;
  attn_linear_state *state = NULL;
  double *s0 = NULL;
  if (c->state) {
    ln_state_make(&st, &d);
    state = &st.s;
  }
  if (c->prefix) {
    ck_assert_ptr_nonnull(state); /* a prefix lives in a state */
    tu_qkv px;
    tu_qkv_make(&px, T, c->data, &rng, c->prefix, c->prefix, c->h_q, c->h_kv, c->d, c->dv);
    attn_linear_desc pd = d;
    pd.n_q = pd.n_kv = c->prefix;
    tu_tensor po;
    ln_call(&pd, &px.q, &px.k, &px.v, T, state, 0, &po);
    ck_assert_uint_eq(state->tokens, c->prefix);
    s0 = ln_state_to_double(state);
    tu_tensor_free(&po);
    tu_qkv_free(&px);
  }
  tu_qkv x;
  tu_qkv_make(&x, c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, c->layout == PK ? T : c->layout, state, (idx % 2) * 4, &o);
  tu_qkv_assert_unchanged(&x);
  ln_check_output(c->name, &d, &x.q, &x.k, &x.v, s0, c->prefix, &o);
  if (state) ln_check_state(c->name, &d, &x.k, &x.v, s0, c->prefix, state);
  free(s0);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
  if (c->state) ln_state_free(&st);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties                                                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct ln_prop_case {
  size_t n, h_q, h_kv, d, dv;
  attn_feature_map fm;
  int normalize;
  size_t chunk, split;
} ln_prop_case;

static const ln_prop_case ln_props[] = {
  {100, 1, 1, 16, 16, ELU, NORM, 1, 37},   {100, 2, 1, 8, 8, ELU, NORM, 7, 50},
  {129, 1, 1, 64, 64, ELU, NORM, 64, 64},  {97, 4, 2, 16, 24, ELU, NORM, 0, 96},
  {65, 1, 1, 65, 7, ID, UNNORM, 0, 1},     {80, 6, 1, 8, 8, ELU, UNNORM, 7, 79},
  {130, 2, 2, 7, 9, ELU, NORM, 0, 65},
};
#define LN_NPROPS (sizeof ln_props / sizeof ln_props[0])

/* n + 1 tokens of inputs; a causal prefill over the first n into a fresh state. */
typedef struct ln_full {
  tu_qkv x;        /* n + 1 tokens */
  tu_tensor q, k, v; /* views of the first n */
  attn_linear_desc d; /* n tokens */
  ln_state st;
  tu_tensor o;
  double *got, *ref, *scale; /* prefill output as double, reference, scales ([n][h_q][dv]) */
} ln_full;

static void ln_full_make(ln_full *f, const ln_prop_case *c, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_qkv_make(&f->x, T, UNI, &rng, c->n + 1, c->n + 1, c->h_q, c->h_kv, c->d, c->dv);
  f->q = tu_rows_view(&f->x.q, 0, c->n);
  f->k = tu_rows_view(&f->x.k, 0, c->n);
  f->v = tu_rows_view(&f->x.v, 0, c->n);
  ln_desc(&f->d, c->n, c->n, c->h_q, c->h_kv, c->d, c->dv, c->fm, CAUSAL, c->normalize, c->chunk);
  ln_state_make(&f->st, &f->d);
  ln_call(&f->d, &f->q, &f->k, &f->v, T, &f->st.s, 0, &f->o);
  const size_t count = c->n * c->h_q * c->dv;
  f->got = malloc(sizeof(double) * count);
  f->ref = malloc(sizeof(double) * count);
  f->scale = malloc(sizeof(double) * count);
  ck_assert(f->got && f->ref && f->scale);
  tu_tensor_to_double(&f->o, f->got);
  const ref_linear_problem p = ln_problem(&f->d, &f->q, &f->k, &f->v, NULL);
  ref_linear(&p, f->ref, f->scale);
}

static void ln_full_free(ln_full *f) {
  free(f->got);
  free(f->ref);
  free(f->scale);
  tu_tensor_free(&f->o);
  ln_state_free(&f->st);
  tu_qkv_free(&f->x);
}

/* One token at a time (n_q = n_kv = 1, the recurrent form) continuing a state. */
static void ln_decode_step(const ln_prop_case *c, const tu_qkv *x, size_t t,
                           attn_linear_state *state, tu_tensor *o) {
  attn_linear_desc d;
  ln_desc(&d, 1, 1, c->h_q, c->h_kv, c->d, c->dv, c->fm, CAUSAL, c->normalize, c->chunk);
  const tu_tensor q = tu_rows_view(&x->q, t, 1), k = tu_rows_view(&x->k, t, 1),
                  v = tu_rows_view(&x->v, t, 1);
  ln_call(&d, &q, &k, &v, T, state, 0, o);
}

/* Chunkwise prefill equals token-by-token decode (outputs row by row, and the final states). */
START_TEST(linear_chunkwise_matches_recurrent) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 8000 + (uint64_t)_i);
  ln_compare("linear.o", "prefill", &f.o, f.ref, f.scale, tol_linear_o(c->n, c->d), 1.0);
  ln_state dec;
  ln_state_make(&dec, &f.d);
  const size_t hd = c->h_q * c->dv;
  for (size_t t = 0; t < c->n; ++t) {
    tu_tensor o;
    ln_decode_step(c, &f.x, t, &dec.s, &o);
    ln_compare("linear.o", "decode step vs prefill row", &o, f.got + t * hd, f.scale + t * hd,
               tol_linear_o(c->n, c->d), TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(dec.s.tokens, f.st.s.tokens);
  double *sp = ln_state_to_double(&f.st.s);
  const ref_linear_problem p = ln_problem(&f.d, &f.q, &f.k, &f.v, NULL);
  double *rs = malloc(sizeof(double) * state_floats(&dec.s));
  double *sc = malloc(sizeof(double) * state_floats(&dec.s));
  ck_assert(rs && sc);
  ref_linear_state(&p, rs, sc);
  const tu_tensor view = state_view(&dec.s);
  ln_compare("linear.state", "decoded state vs prefill state", &view, sp, sc,
             tol_linear_state(c->n), TOL_PROPERTY_FACTOR);
  free(rs);
  free(sc);
  free(sp);
  ln_state_free(&dec);
  ln_full_free(&f);
}
END_TEST

/* A prefill's state continues into decode: its state is the reference sum over the n tokens,
 * and the next decode step from it gives the reference output of token n + 1. */
START_TEST(linear_prefill_state_continues_decode) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 9000 + (uint64_t)_i);
  ln_check_state("prefill state", &f.d, &f.k, &f.v, NULL, 0, &f.st.s);
  tu_tensor o;
  ln_decode_step(c, &f.x, c->n, &f.st.s, &o);
  ck_assert_uint_eq(f.st.s.tokens, c->n + 1);
  /* reference: row n of the whole n + 1 token causal sequence */
  attn_linear_desc whole;
  ln_desc(&whole, c->n + 1, c->n + 1, c->h_q, c->h_kv, c->d, c->dv, c->fm, CAUSAL, c->normalize,
          c->chunk);
  const ref_linear_problem p = ln_problem(&whole, &f.x.q, &f.x.k, &f.x.v, NULL);
  const size_t count = (c->n + 1) * c->h_q * c->dv, hd = c->h_q * c->dv;
  double *ro = malloc(sizeof(double) * count), *rsc = malloc(sizeof(double) * count);
  ck_assert(ro && rsc);
  ref_linear(&p, ro, rsc);
  ln_compare("linear.o", "decode after prefill", &o, ro + c->n * hd, rsc + c->n * hd,
             tol_linear_o(c->n + 1, c->d), 1.0);
  ln_check_state("state after prefill + decode", &whole, &f.x.k, &f.x.v, NULL, 0, &f.st.s);
  free(ro);
  free(rsc);
  tu_tensor_free(&o);
  ln_full_free(&f);
}
END_TEST

/* Snapshot, run more, restore, run again: identical outputs and states, bit for bit. Tokens
 * [0, split) are absorbed first; "more" is the multi-token call over [split, n + 1). Loop index
 * odd: snapshot and restore by attn_linear_state_copy; even: by memcpy of the struct and data. */
START_TEST(linear_snapshot_restore_bit_exact) {
  const ln_prop_case *c = &ln_props[_i / 2];
  const int by_copy = _i % 2;
  ln_full f;
  ln_full_make(&f, c, 10000 + (uint64_t)_i);
  const size_t a = c->split, rest = c->n + 1 - a;
  ln_state st, snap;
  ln_state_make(&st, &f.d);
  ln_state_make(&snap, &f.d);
  const size_t bytes = sizeof(float) * state_floats(&st.s);
  attn_linear_desc d = f.d;
  d.n_q = d.n_kv = a;
  tu_tensor o0, o1, o2;
  const tu_tensor q0 = tu_rows_view(&f.x.q, 0, a), k0 = tu_rows_view(&f.x.k, 0, a),
                  v0 = tu_rows_view(&f.x.v, 0, a);
  ln_call(&d, &q0, &k0, &v0, T, &st.s, 0, &o0);
  attn_linear_state saved = st.s;
  if (by_copy) {
    ck_assert_int_eq(attn_linear_state_copy(&snap.s, &st.s), ATTN_OK);
    ck_assert_ptr_eq(snap.s.data, snap.mem); /* dst keeps its own data pointer */
    ck_assert_uint_eq(snap.s.tokens, a);
    tu_assert_same_bits("state copy", snap.s.data, st.s.data, bytes);
    tu_assert_guards("state copy dst", snap.mem);
  } else {
    memcpy(snap.s.data, st.s.data, bytes);
  }
  d.n_q = d.n_kv = rest;
  const tu_tensor q1 = tu_rows_view(&f.x.q, a, rest), k1 = tu_rows_view(&f.x.k, a, rest),
                  v1 = tu_rows_view(&f.x.v, a, rest);
  ln_call(&d, &q1, &k1, &v1, T, &st.s, 0, &o1);
  float *after = malloc(bytes);
  ck_assert_ptr_nonnull(after);
  memcpy(after, st.s.data, bytes);
  ck_assert_uint_eq(st.s.tokens, c->n + 1);
  if (by_copy) {
    ck_assert_int_eq(attn_linear_state_copy(&st.s, &snap.s), ATTN_OK);
    ck_assert_ptr_eq(st.s.data, st.mem);
  } else {
    st.s = saved;
    memcpy(st.s.data, snap.s.data, bytes);
  }
  ck_assert_uint_eq(st.s.tokens, a);
  ln_call(&d, &q1, &k1, &v1, T, &st.s, 0, &o2);
  tu_assert_same_bits("output after restore", o1.data, o2.data, sizeof(float) * o1.span);
  tu_assert_same_bits("state after restore and rerun", after, st.s.data, bytes);
  ck_assert_uint_eq(st.s.tokens, c->n + 1);
  free(after);
  tu_tensor_free(&o0);
  tu_tensor_free(&o1);
  tu_tensor_free(&o2);
  ln_state_free(&snap);
  ln_state_free(&st);
  ln_full_free(&f);
}
END_TEST

/* A prefill split in two calls (rows [0, a) then [a, n) continuing the state) equals one call. */
START_TEST(linear_split_prefill_matches_one_call) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 11000 + (uint64_t)_i);
  const size_t a = c->split, n = c->n, hd = c->h_q * c->dv;
  ln_state st;
  ln_state_make(&st, &f.d);
  const size_t part[2][2] = {{0, a}, {a, n - a}};
  for (int s = 0; s < 2; ++s) {
    attn_linear_desc d = f.d;
    d.n_q = d.n_kv = part[s][1];
    const tu_tensor q = tu_rows_view(&f.q, part[s][0], part[s][1]),
                    k = tu_rows_view(&f.k, part[s][0], part[s][1]),
                    v = tu_rows_view(&f.v, part[s][0], part[s][1]);
    tu_tensor o;
    ln_call(&d, &q, &k, &v, T, &st.s, 0, &o);
    ln_compare("linear.o", "split prefill vs one call", &o, f.got + part[s][0] * hd,
               f.scale + part[s][0] * hd, tol_linear_o(n, c->d), TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(st.s.tokens, n);
  ln_check_state("state after split prefill", &f.d, &f.k, &f.v, NULL, 0, &st.s);
  ln_state_free(&st);
  ln_full_free(&f);
}
END_TEST

/* elu1 accuracy through the public API: d = dv = 1, one key 0 (psi = 1) with value 1, so the
 * un-normalised bidirectional output is phi(q) itself; q sweeps [-87, 30] (exp branch below 0). */
enum { ELU_SWEEP = 2001 };
START_TEST(linear_elu1_accuracy_sweep) {
  tu_tensor q, k, v, o;
  tu_tensor_alloc(&q, T, ELU_SWEEP, 1, 1, 0);
  tu_tensor_alloc(&k, T, 1, 1, 1, 0);
  tu_tensor_alloc(&v, T, 1, 1, 1, 0);
  for (size_t i = 0; i < ELU_SWEEP; ++i)
    *tu_at(&q, i, 0, 0) = (float)(-87.0 + 117.0 * (double)i / (ELU_SWEEP - 1));
  *tu_at(&k, 0, 0, 0) = 0.0f;
  *tu_at(&v, 0, 0, 0) = 1.0f;
  attn_linear_desc d;
  ln_desc(&d, ELU_SWEEP, 1, 1, 1, 1, 1, ELU, BIDIR, UNNORM, 0);
  ln_call(&d, &q, &k, &v, T, NULL, 0, &o);
  const ref_linear_problem p = ln_problem(&d, &q, &k, &v, NULL);
  double *ro = malloc(sizeof(double) * ELU_SWEEP), *rs = malloc(sizeof(double) * ELU_SWEEP);
  ck_assert(ro && rs);
  ref_linear(&p, ro, rs);
  ln_compare("linear.elu1", "elu1 sweep: o = phi(q)", &o, ro, rs, TOL_EXP_SWEEP_ELU1, 1.0);
  free(ro);
  free(rs);
  tu_tensor_free(&o);
  tu_tensor_free(&q);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}
END_TEST

/* Feature size: m = d for identity and elu1. */
/* ------------------------------------------------------------------------------------------ */
/* Non-finite inputs and zero denominators: the policy of attn.h on every path                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct lnf_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  int causal;
  size_t chunk;
} lnf_case;
/* Causal chunks of the path's default size and of 16, GQA, n_q < n_kv, bidirectional. */
static const lnf_case lnf_cases[] = {
    {"causal_100_gqa", 100, 100, 4, 2, 8, 7, CAUSAL, 0},
    {"causal_70_chunk16", 70, 70, 1, 1, 9, 16, CAUSAL, 16},
    {"chunk_30_of_50", 30, 50, 2, 2, 8, 8, CAUSAL, 0},
    {"bidir_40", 40, 40, 2, 1, 8, 5, BIDIR, 0},
};
#define LNF_NCASES (sizeof lnf_cases / sizeof lnf_cases[0])

/* One element of q, k or v is NaN, +inf or -inf, early or late in the sequence, for identity
 * (un-normalised) and elu1 (normalised): every row matches the reference, which makes the rows
 * that use the value NaN; causal rows before it are exact. Then one decode step continues from
 * the state: NaN when the prefill's poisoned k or v is in the state (every later token sees it). */
START_TEST(linear_nonfinite_policy) {
  const lnf_case *c = &lnf_cases[_i];
  for (int elu = 0; elu < 2; ++elu)
    for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
      tu_rng rng;
      tu_rng_seed(&rng, 9500 + (uint64_t)_i);
      const size_t n1 = c->n_kv + 1; /* the prefill's keys and one decode token */
      tu_qkv x;
      tu_qkv_make(&x, T, UNI, &rng, c->n_q + 1, n1, c->h_q, c->h_kv, c->d, c->dv);
      char poison[64], what[96];
      tu_qkv_poison(&x, pc, 1, poison, sizeof poison); /* not in the decode token */
      attn_linear_desc d;
      ln_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, elu ? ELU : ID, c->causal, elu, c->chunk);
      ln_state st;
      if (c->causal) ln_state_make(&st, &d);
      const tu_tensor q0 = tu_rows_view(&x.q, 0, c->n_q), k0 = tu_rows_view(&x.k, 0, c->n_kv);
      const tu_tensor v0 = tu_rows_view(&x.v, 0, c->n_kv);
      tu_tensor o;
      ln_call(&d, &q0, &k0, &v0, T, c->causal ? &st.s : NULL, 0, &o);
      tu_qkv_assert_unchanged(&x);
      snprintf(what, sizeof what, "%s %s: %s", c->name, elu ? "elu1" : "identity", poison);
      ln_check_output(what, &d, &q0, &k0, &v0, NULL, 0, &o);
      tu_tensor_free(&o);
      if (c->causal) { /* the decode step after it: row n_q of the whole sequence */
        attn_linear_desc step = d;
        step.n_q = step.n_kv = 1;
        const tu_tensor q1 = tu_rows_view(&x.q, c->n_q, 1), k1 = tu_rows_view(&x.k, c->n_kv, 1);
        const tu_tensor v1 = tu_rows_view(&x.v, c->n_kv, 1);
        ln_call(&step, &q1, &k1, &v1, T, &st.s, 0, &o);
        attn_linear_desc whole = d;
        whole.n_q = c->n_q + 1;
        whole.n_kv = n1;
        const ref_linear_problem p = ln_problem(&whole, &x.q, &x.k, &x.v, NULL);
        const size_t all = whole.n_q * c->h_q * c->dv, hd = c->h_q * c->dv;
        double *ro = malloc(sizeof(double) * all), *rsc = malloc(sizeof(double) * all);
        ck_assert(ro && rsc);
        ref_linear(&p, ro, rsc);
        ln_compare("linear.o", what, &o, ro + c->n_q * hd, rsc + c->n_q * hd, tol_linear_o(n1, c->d), 1.0);
        free(ro);
        free(rsc);
        tu_tensor_free(&o);
        ln_state_free(&st);
      }
      tu_qkv_free(&x);
    }
}
END_TEST

/* eps = 0: a normalised row whose denominator is exactly 0 gives zeros (as softmax does for a
 * row with no visible key): n_q > n_kv leaves the first rows without a key. */
START_TEST(linear_eps0_empty_rows_are_zero) {
  tu_rng rng;
  tu_rng_seed(&rng, 9600);
  tu_qkv x;
  tu_qkv_make(&x, T, POS, &rng, 9, 4, 2, 1, 8, 8);
  for (int with_state = 0; with_state < 2; ++with_state) {
    attn_linear_desc d;
    ln_desc(&d, 9, 4, 2, 1, 8, 8, ELU, CAUSAL, NORM, 0);
    d.eps = 0.0f;
    ln_state st;
    if (with_state) ln_state_make(&st, &d);
    tu_tensor o;
    ln_call(&d, &x.q, &x.k, &x.v, T, with_state ? &st.s : NULL, 0, &o);
    for (size_t i = 0; i < 5; ++i)
      for (size_t h = 0; h < 2; ++h)
        for (size_t c = 0; c < 8; ++c) ck_assert_msg(*tu_at(&o, i, h, c) == 0.0f, "row %zu: %g", i, *tu_at(&o, i, h, c));
    ln_check_output("eps = 0, rows without keys", &d, &x.q, &x.k, &x.v, NULL, 0, &o);
    tu_tensor_free(&o);
    if (with_state) ln_state_free(&st);
  }
  tu_qkv_free(&x);
}
END_TEST

START_TEST(linear_feature_size_is_d) {
  static const size_t ds[] = {1, 7, 64, 65, 128};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; ++i)
    for (int fm = 0; fm < ATTN_FEATURE_COUNT; ++fm) {
      attn_linear_desc d;
      ln_desc(&d, 3, 3, 2, 1, ds[i], 5, (attn_feature_map)fm, CAUSAL, NORM, 0);
      size_t m = 0;
      ck_assert_int_eq(attn_linear_feature_size(&d, &m), ATTN_OK);
      ck_assert_uint_eq(m, ds[i]);
    }
}
END_TEST

static Suite *linear_suite(attn_isa isa) {
  Suite *s = suite_create(attn_isa_name(isa));
  size_t work[LN_NCASES];
  for (size_t i = 0; i < LN_NCASES; ++i) {
    const ln_case *c = &ln_cases[i];
    work[i] = c->n_q * (c->n_kv + c->prefix) * c->h_q * (c->d + c->dv);
  }
  const size_t nsel = tu_select_rows(LN_NCASES, work, ln_sel);
  TCase *tc = tu_tcase("reference");
  tcase_add_loop_test(tc, linear_matches_reference, 0, (int)nsel);
  tcase_add_test(tc, linear_feature_size_is_d);
  tcase_add_test(tc, linear_elu1_accuracy_sweep);
  tcase_add_loop_test(tc, linear_nonfinite_policy, 0, (int)LNF_NCASES);
  tcase_add_test(tc, linear_eps0_empty_rows_are_zero);
  suite_add_tcase(s, tc);
  tc = tu_tcase("properties");
  tcase_add_loop_test(tc, linear_chunkwise_matches_recurrent, 0, (int)LN_NPROPS);
  tcase_add_loop_test(tc, linear_prefill_state_continues_decode, 0, (int)LN_NPROPS);
  tcase_add_loop_test(tc, linear_snapshot_restore_bit_exact, 0, (int)(2 * LN_NPROPS));
  tcase_add_loop_test(tc, linear_split_prefill_matches_one_call, 0, (int)LN_NPROPS);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_main(linear_suite); }
