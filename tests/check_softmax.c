/*
 * Softmax attention and merge, on the ISA path named by ATTN_ISA, against the float64 reference.
 * TCases: "reference" (the shape table), "properties" (decode / chunked prefill / split-KV merge
 * reproduce the full prefill), "merge" (attn_softmax_merge directly), "window" (keys wholly
 * outside the window are never used), "workspace".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tolerances.h"

#define U ATTN_UNBOUNDED
#define W_FULL U, U
#define W_CAUSAL U, 0
#define SD (-1000.0f) /* default scale 1/sqrt(d) */
#define T TU_TOKEN_MAJOR
#define H TU_HEAD_MAJOR
#define P TU_PADDED
#define HP TU_HEAD_PADDED
#define PK TU_PACKED_QKV
#define UNI TU_DATA_UNIFORM
#define LRG TU_DATA_LARGE

typedef struct sm_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  size_t wl, wr;
  tu_layout_kind layout;
  float scale;
  tu_data data;
  int lse; /* 0: lse = NULL */
} sm_case;

/* Query blocks are 48 rows and key blocks 96 on SIMD paths, 32 / 64 on scalar; vectors are 8
 * (AVX2) and 4 (NEON) floats: sizes sit on, below and above each of them. */
static const sm_case sm_cases[] = {
  /* sizes: 1, primes, around vector widths and block sizes */
  {"n1_d1", 1, 1, 1, 1, 1, 1, W_FULL, T, SD, UNI, 1},
  {"n1_d8_causal", 1, 1, 1, 1, 8, 8, W_CAUSAL, T, SD, UNI, 1},
  {"n2_d7_causal", 2, 2, 1, 1, 7, 7, W_CAUSAL, T, SD, UNI, 1},
  {"n3_d65", 3, 3, 1, 1, 65, 65, W_FULL, T, SD, UNI, 1},
  {"n4_d4_causal", 4, 4, 2, 1, 4, 4, W_CAUSAL, T, SD, UNI, 1},
  {"n5_d3_dv5", 5, 5, 1, 1, 3, 5, W_FULL, T, SD, UNI, 1},
  {"n7_d8_causal", 7, 7, 1, 1, 8, 8, W_CAUSAL, T, SD, UNI, 1},
  {"n8_d8", 8, 8, 2, 2, 8, 8, W_FULL, T, SD, UNI, 1},
  {"n9_d9_causal", 9, 9, 1, 1, 9, 9, W_CAUSAL, T, SD, UNI, 1},
  {"n13_d64_causal", 13, 13, 1, 1, 64, 64, W_CAUSAL, T, SD, UNI, 1},
  {"n31_d1", 31, 31, 1, 1, 1, 1, W_FULL, T, SD, UNI, 1},
  {"n32_d128_causal", 32, 32, 1, 1, 128, 128, W_CAUSAL, T, SD, UNI, 1},
  {"n33_d65", 33, 33, 2, 1, 65, 65, W_FULL, T, SD, UNI, 1},
  {"n47_d64_causal", 47, 47, 1, 1, 64, 64, W_CAUSAL, T, SD, UNI, 1},
  {"n48_d8", 48, 48, 1, 1, 8, 8, W_FULL, T, SD, UNI, 1},
  {"n49_d7_causal", 49, 49, 2, 2, 7, 7, W_CAUSAL, T, SD, UNI, 1},
  {"n63_d65", 63, 63, 1, 1, 65, 65, W_FULL, T, SD, UNI, 1},
  {"n64_d64_causal", 64, 64, 1, 1, 64, 64, W_CAUSAL, T, SD, UNI, 1},
  {"n65_d1_causal", 65, 65, 1, 1, 1, 1, W_CAUSAL, T, SD, UNI, 1},
  {"n95_d64", 95, 95, 1, 1, 64, 64, W_FULL, T, SD, UNI, 1},
  {"n96_d128_causal", 96, 96, 1, 1, 128, 128, W_CAUSAL, T, SD, UNI, 1},
  {"n97_d8", 97, 97, 2, 1, 8, 8, W_FULL, T, SD, UNI, 1},
  {"n127_d7_causal", 127, 127, 1, 1, 7, 7, W_CAUSAL, T, SD, UNI, 1},
  {"n128_d64", 128, 128, 1, 1, 64, 64, W_FULL, T, SD, UNI, 1},
  {"n129_d65_causal", 129, 129, 1, 1, 65, 65, W_CAUSAL, T, SD, UNI, 1},
  {"n193_d64_causal", 193, 193, 1, 1, 64, 64, W_CAUSAL, T, SD, UNI, 1},
  {"n289_d128", 289, 289, 1, 1, 128, 128, W_FULL, T, SD, UNI, 1},
  {"nq97_nkv289_d32", 97, 289, 1, 1, 32, 32, W_FULL, T, SD, UNI, 1},
  /* head widths */
  {"d1", 50, 50, 2, 2, 1, 1, W_CAUSAL, T, SD, UNI, 1},
  {"d7", 50, 50, 2, 2, 7, 7, W_CAUSAL, T, SD, UNI, 1},
  {"d8", 50, 50, 2, 2, 8, 8, W_CAUSAL, T, SD, UNI, 1},
  {"d64", 50, 50, 2, 2, 64, 64, W_CAUSAL, T, SD, UNI, 1},
  {"d65", 50, 50, 2, 2, 65, 65, W_CAUSAL, T, SD, UNI, 1},
  {"d128", 50, 50, 2, 2, 128, 128, W_CAUSAL, T, SD, UNI, 1},
  /* dv != d */
  {"d64_dv7", 33, 33, 1, 1, 64, 7, W_FULL, T, SD, UNI, 1},
  {"d8_dv65", 49, 70, 2, 1, 8, 65, W_FULL, T, SD, UNI, 1},
  {"d1_dv128_causal", 20, 20, 1, 1, 1, 128, W_CAUSAL, T, SD, UNI, 1},
  {"d65_dv16_causal", 30, 30, 2, 1, 65, 16, W_CAUSAL, T, SD, UNI, 1},
  /* heads: GQA, MQA, MHA */
  {"gqa_4_2_causal", 37, 37, 4, 2, 16, 16, W_CAUSAL, T, SD, UNI, 1},
  {"mqa_6_1", 50, 50, 6, 1, 64, 32, W_FULL, T, SD, UNI, 1},
  {"mqa_6_1_causal", 50, 50, 6, 1, 8, 8, W_CAUSAL, T, SD, UNI, 1},
  {"mha_3_3_causal", 17, 17, 3, 3, 24, 24, W_CAUSAL, T, SD, UNI, 1},
  /* chunked prefill (n_q < n_kv) and decode, bottom-right */
  {"chunk_16_of_100", 16, 100, 2, 1, 32, 32, W_CAUSAL, T, SD, UNI, 1},
  {"chunk_49_of_145", 49, 145, 1, 1, 8, 8, W_CAUSAL, T, SD, UNI, 1},
  {"chunk_48_of_200", 48, 200, 1, 1, 64, 64, W_CAUSAL, T, SD, UNI, 1},
  {"decode_1_of_97_gqa", 1, 97, 4, 2, 64, 64, W_CAUSAL, T, SD, UNI, 1},
  {"decode_1_of_1", 1, 1, 2, 1, 16, 16, W_CAUSAL, T, SD, UNI, 1},
  /* n_q > n_kv: the first n_q - n_kv rows see no key (zeros, LSE -inf) */
  {"nq40_nkv10_causal", 40, 10, 1, 1, 16, 16, W_CAUSAL, T, SD, UNI, 1},
  {"nq97_nkv48_causal", 97, 48, 2, 1, 8, 8, W_CAUSAL, T, SD, UNI, 1},
  {"nq5_nkv1_causal", 5, 1, 1, 1, 7, 7, W_CAUSAL, T, SD, UNI, 1},
  /* windows (left, right) */
  {"win_0_0", 30, 30, 1, 1, 16, 16, 0, 0, T, SD, UNI, 1},
  {"win_1_0", 50, 50, 1, 1, 16, 16, 1, 0, T, SD, UNI, 1},
  {"win_3_2", 70, 70, 2, 1, 16, 16, 3, 2, T, SD, UNI, 1},
  {"win_3_2_chunk", 20, 90, 1, 1, 8, 8, 3, 2, T, SD, UNI, 1},
  {"win_wider_than_seq", 40, 40, 1, 1, 8, 8, 500, 500, T, SD, UNI, 1},
  {"win_slide_8", 100, 100, 1, 1, 8, 8, 7, 0, T, SD, UNI, 1},
  {"win_slide_16_long", 200, 200, 1, 1, 64, 64, 15, 0, T, SD, UNI, 1},
  {"win_0_0_nq_gt_nkv", 20, 8, 1, 1, 8, 8, 0, 0, T, SD, UNI, 1},
  {"win_0_unbounded", 40, 40, 1, 1, 8, 8, 0, U, T, SD, UNI, 1},
  {"win_2_5_decode", 1, 50, 1, 1, 8, 8, 2, 5, T, SD, UNI, 1},
  {"win_4_1_block_edges", 130, 130, 1, 1, 8, 8, 4, 1, T, SD, UNI, 1},
  /* large logits (scale 1, q.k in ~[90, 100]): finite and accurate only with max subtraction */
  {"large_d64", 65, 65, 1, 1, 64, 64, W_FULL, T, 1.0f, LRG, 1},
  {"large_d64_causal", 65, 65, 1, 1, 64, 64, W_CAUSAL, T, 1.0f, LRG, 1},
  {"large_d8_causal", 40, 40, 2, 1, 8, 8, W_CAUSAL, T, 1.0f, LRG, 1},
  {"large_d1", 97, 97, 1, 1, 1, 1, W_FULL, T, 1.0f, LRG, 1},
  {"large_d7_decode", 1, 150, 1, 1, 7, 7, W_CAUSAL, T, 1.0f, LRG, 1},
  {"large_d128_causal", 200, 200, 1, 1, 128, 128, W_CAUSAL, T, 1.0f, LRG, 1},
  /* layouts: head-major, prime padding, packed QKV [n][3][H][d] */
  {"head_major", 37, 37, 2, 2, 16, 16, W_CAUSAL, H, SD, UNI, 1},
  {"head_major_gqa", 50, 60, 4, 2, 8, 12, W_FULL, H, SD, UNI, 1},
  {"padded_causal", 49, 49, 2, 1, 13, 11, W_CAUSAL, P, SD, UNI, 1},
  {"head_padded", 33, 33, 3, 1, 7, 9, W_FULL, HP, SD, UNI, 1},
  {"packed_mha_causal", 40, 40, 4, 4, 16, 16, W_CAUSAL, PK, SD, UNI, 1},
  {"packed_gqa", 41, 41, 4, 2, 8, 8, W_FULL, PK, SD, UNI, 1},
  {"packed_mqa_dv", 30, 30, 6, 1, 64, 32, W_CAUSAL, PK, SD, UNI, 1},
  /* non-default scale */
  {"scale_0.37_causal", 33, 33, 1, 1, 16, 16, W_CAUSAL, T, 0.37f, UNI, 1},
  {"scale_-0.5", 33, 33, 1, 1, 16, 16, W_FULL, T, -0.5f, UNI, 1},
  {"scale_0_causal", 20, 20, 1, 1, 8, 8, W_CAUSAL, T, 0.0f, UNI, 1},
  {"scale_3", 40, 40, 1, 1, 32, 32, W_FULL, T, 3.0f, UNI, 1},
  /* lse = NULL */
  {"no_lse_causal", 47, 47, 2, 1, 8, 8, W_CAUSAL, T, SD, UNI, 0},
  {"no_lse_padded", 50, 50, 1, 1, 9, 9, W_FULL, P, SD, UNI, 0},
};
#define SM_NCASES (sizeof sm_cases / sizeof sm_cases[0])
static size_t sm_sel[SM_NCASES];

/* ------------------------------------------------------------------------------------------ */
/* Running the library and the reference                                                       */
/* ------------------------------------------------------------------------------------------ */
typedef struct sm_result {
  tu_tensor o, lse;
  int has_lse;
} sm_result;

/* attn_softmax with q, k, v as given (their strides go into desc), o and lse freshly allocated
 * (guarded, sentinel-filled) in layout okind; asserts ATTN_OK, intact guards around o, lse and
 * the exactly-sized workspace, and untouched gaps of o and lse. */
static void sm_call(const attn_softmax_desc *desc, const tu_tensor *q, const tu_tensor *k,
                    const tu_tensor *v, tu_layout_kind okind, int with_lse, size_t misalign,
                    sm_result *r) {
  attn_softmax_desc dd = *desc;
  tu_tensor_alloc(&r->o, okind, dd.n_q, dd.h_q, dd.dv, 1);
  r->has_lse = with_lse;
  if (with_lse) tu_tensor_alloc(&r->lse, okind, dd.n_q, dd.h_q, 1, 1);
  dd.q = q->l;
  dd.k = k->l;
  dd.v = v->l;
  dd.o = r->o.l;
  if (with_lse) dd.lse = r->lse.l;
  size_t ws = 0;
  ck_assert_int_eq(attn_softmax_workspace_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(attn_softmax(&dd, q->data, k->data, v->data, r->o.data,
                                with_lse ? r->lse.data : NULL, w, ws),
                   ATTN_OK);
  tu_assert_guards("softmax workspace", w);
  tu_free(w);
  tu_assert_output_clean("softmax o", &r->o);
  if (with_lse) tu_assert_output_clean("softmax lse", &r->lse);
}

static void sm_result_free(sm_result *r) {
  tu_tensor_free(&r->o);
  if (r->has_lse) tu_tensor_free(&r->lse);
}

typedef struct sm_ref {
  double *o, *lse, *oscale, *sabs;
} sm_ref;

static void sm_ref_compute(const attn_softmax_desc *d, const tu_tensor *q, const tu_tensor *k,
                           const tu_tensor *v, sm_ref *r) {
  const ref_softmax_problem p = {d->n_q, d->n_kv, d->h_q, d->h_kv, d->d, d->dv, (double)d->scale,
                                 d->window_left, d->window_right, q->data, k->data, v->data,
                                 tu_ref_layout(q), tu_ref_layout(k), tu_ref_layout(v)};
  const size_t rows = d->n_q * d->h_q;
  r->o = malloc(sizeof(double) * rows * d->dv);
  r->oscale = malloc(sizeof(double) * rows * d->dv);
  r->lse = malloc(sizeof(double) * rows);
  r->sabs = malloc(sizeof(double) * rows);
  ck_assert(r->o && r->oscale && r->lse && r->sabs);
  ref_softmax(&p, r->o, r->lse, r->oscale, r->sabs);
}

static void sm_ref_free(sm_ref *r) {
  free(r->o);
  free(r->lse);
  free(r->oscale);
  free(r->sabs);
}

/* The one softmax comparison: got's o (and lse) against expected values (the reference, or
 * another library result for a property) with the reference's error scales, all given for got's
 * rows ([got rows][h_q][dv] and [got rows][h_q]), bounds times factor. */
static void sm_compare(const char *what, const attn_softmax_desc *d, const sm_result *got,
                       const double *exp_o, const double *exp_lse, const double *oscale,
                       const double *sabs, double factor) {
  const size_t rows = got->o.n * d->h_q;
  double *tol = malloc(sizeof(double) * rows * d->dv);
  ck_assert_ptr_nonnull(tol);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < d->dv; ++c)
      tol[r * d->dv + c] = factor * tol_softmax_o(d->n_kv, d->d, sabs[r]);
  tu_compare("softmax.o", what, &got->o, exp_o, oscale, tol);
  if (got->has_lse && exp_lse) {
    double *one = tu_dup(1.0, rows);
    for (size_t r = 0; r < rows; ++r)
      tol[r] = factor * tol_softmax_lse(d->n_kv, d->d, sabs[r], isinf(exp_lse[r]) ? 0 : exp_lse[r]);
    tu_compare("softmax.lse", what, &got->lse, exp_lse, one, tol);
    free(one);
  }
  free(tol);
}

static void sm_desc(attn_softmax_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                    size_t dd, size_t dv, size_t wl, size_t wr) {
  ck_assert_int_eq(attn_softmax_desc_init(d, n_q, n_kv, h_q, h_kv, dd, dv), ATTN_OK);
  d->window_left = wl;
  d->window_right = wr;
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
START_TEST(softmax_matches_reference) {
  const size_t idx = sm_sel[_i];
  const sm_case *c = &sm_cases[idx];
  tu_rng rng;
  tu_rng_seed(&rng, 1000 + idx);
  tu_qkv x;
  tu_qkv_make(&x, c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv);
  attn_softmax_desc d;
  sm_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->wl, c->wr);
  if (c->scale != SD) d.scale = c->scale;
  const tu_layout_kind okind = c->layout == PK ? T : c->layout;
  sm_result res;
  sm_call(&d, &x.q, &x.k, &x.v, okind, c->lse, (idx % 2) * 4, &res);
  tu_qkv_assert_unchanged(&x);
  sm_ref ref;
  sm_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
  sm_compare(c->name, &d, &res, ref.o, ref.lse, ref.oscale, ref.sabs, 1.0);
  sm_ref_free(&ref);
  sm_result_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* Inputs may overlap one another: q = k = v, one buffer. */
START_TEST(softmax_shared_inputs) {
  tu_rng rng;
  tu_rng_seed(&rng, 77);
  tu_tensor t;
  tu_tensor_alloc(&t, T, 45, 2, 16, 0);
  tu_tensor_fill(&t, &rng, -1.0f, 1.0f);
  attn_softmax_desc d;
  sm_desc(&d, 45, 45, 2, 2, 16, 16, W_CAUSAL);
  sm_result res;
  sm_call(&d, &t, &t, &t, T, 1, 0, &res);
  sm_ref ref;
  sm_ref_compute(&d, &t, &t, &t, &ref);
  sm_compare("q=k=v", &d, &res, ref.o, ref.lse, ref.oscale, ref.sabs, 1.0);
  sm_ref_free(&ref);
  sm_result_free(&res);
  tu_tensor_free(&t);
}
END_TEST

/* A decode query's row stride is unconstrained (the count of rows is 1): 0 is valid. */
START_TEST(softmax_decode_row_stride_zero) {
  tu_rng rng;
  tu_rng_seed(&rng, 78);
  tu_qkv x;
  tu_qkv_make(&x, T, UNI, &rng, 1, 30, 4, 2, 8, 8);
  x.q.l.row_stride = 0;
  attn_softmax_desc d;
  sm_desc(&d, 1, 30, 4, 2, 8, 8, W_CAUSAL);
  sm_result res;
  sm_call(&d, &x.q, &x.k, &x.v, T, 1, 0, &res);
  sm_ref ref;
  sm_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
  sm_compare("q row stride 0", &d, &res, ref.o, ref.lse, ref.oscale, ref.sabs, 1.0);
  sm_ref_free(&ref);
  sm_result_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties against the full causal prefill                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct sm_prop_case {
  size_t n, h_q, h_kv, d, dv, wl;
  size_t start; /* chunked prefill: first query row; merge: split point a */
} sm_prop_case;

static const sm_prop_case sm_props[] = {
  {50, 1, 1, 8, 8, U, 25},      {97, 4, 2, 64, 64, U, 96},  {100, 2, 1, 16, 16, 20, 49},
  {49, 6, 1, 7, 9, U, 1},       {65, 1, 1, 65, 65, U, 64},  {130, 1, 1, 8, 8, 30, 33},
};
#define SM_NPROPS (sizeof sm_props / sizeof sm_props[0])

/* Builds inputs, the full causal prefill (windowed by wl), its reference. */
typedef struct sm_full {
  tu_qkv x;
  attn_softmax_desc d;
  sm_result res;
  sm_ref ref;
  double *got; /* the prefill's o as double, [n][h_q][dv] */
  double *got_lse;
} sm_full;

static void sm_full_make(sm_full *f, const sm_prop_case *c, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_qkv_make(&f->x, T, UNI, &rng, c->n, c->n, c->h_q, c->h_kv, c->d, c->dv);
  sm_desc(&f->d, c->n, c->n, c->h_q, c->h_kv, c->d, c->dv, c->wl, 0);
  sm_call(&f->d, &f->x.q, &f->x.k, &f->x.v, T, 1, 0, &f->res);
  sm_ref_compute(&f->d, &f->x.q, &f->x.k, &f->x.v, &f->ref);
  sm_compare("full prefill", &f->d, &f->res, f->ref.o, f->ref.lse, f->ref.oscale, f->ref.sabs,
             1.0);
  f->got = malloc(sizeof(double) * c->n * c->h_q * c->dv);
  f->got_lse = malloc(sizeof(double) * c->n * c->h_q);
  ck_assert(f->got && f->got_lse);
  tu_tensor_to_double(&f->res.o, f->got);
  tu_tensor_to_double(&f->res.lse, f->got_lse);
}

static void sm_full_free(sm_full *f) {
  free(f->got);
  free(f->got_lse);
  sm_ref_free(&f->ref);
  sm_result_free(&f->res);
  tu_qkv_free(&f->x);
}

/* Decode steps (n_q = 1 over a growing cache) reproduce the rows of the full causal prefill. */
START_TEST(softmax_decode_matches_prefill) {
  const sm_prop_case *c = &sm_props[_i];
  sm_full f;
  sm_full_make(&f, c, 2000 + (uint64_t)_i);
  const size_t hd = c->h_q * c->dv;
  for (size_t t = 0; t < c->n; ++t) {
    attn_softmax_desc d;
    sm_desc(&d, 1, t + 1, c->h_q, c->h_kv, c->d, c->dv, c->wl, 0);
    const tu_tensor q = tu_rows_view(&f.x.q, t, 1), k = tu_rows_view(&f.x.k, 0, t + 1),
                    v = tu_rows_view(&f.x.v, 0, t + 1);
    sm_result res;
    sm_call(&d, &q, &k, &v, T, 1, 0, &res);
    sm_compare("decode step vs prefill row", &d, &res, f.got + t * hd, f.got_lse + t * c->h_q,
               f.ref.oscale + t * hd, f.ref.sabs + t * c->h_q, TOL_PROPERTY_FACTOR);
    sm_result_free(&res);
  }
  tu_qkv_assert_unchanged(&f.x);
  sm_full_free(&f);
}
END_TEST

/* Chunked prefill (rows [start, n) over all n keys, n_q < n_kv) equals those rows of the full one. */
START_TEST(softmax_chunked_matches_prefill) {
  const sm_prop_case *c = &sm_props[_i];
  sm_full f;
  sm_full_make(&f, c, 3000 + (uint64_t)_i);
  const size_t nq = c->n - c->start, hd = c->h_q * c->dv;
  attn_softmax_desc d;
  sm_desc(&d, nq, c->n, c->h_q, c->h_kv, c->d, c->dv, c->wl, 0);
  const tu_tensor q = tu_rows_view(&f.x.q, c->start, nq);
  sm_result res;
  sm_call(&d, &q, &f.x.k, &f.x.v, T, 1, 0, &res);
  sm_compare("chunked prefill vs prefill rows", &d, &res, f.got + c->start * hd,
             f.got_lse + c->start * c->h_q, f.ref.oscale + c->start * hd,
             f.ref.sabs + c->start * c->h_q, TOL_PROPERTY_FACTOR);
  sm_result_free(&res);
  sm_full_free(&f);
}
END_TEST

/* Split-KV: keys [0, a) and [a, n) computed apart, merged with their LSE, equal the whole.
 * Causal bottom-right alignment across the split: the first part needs window_right = n - a,
 * the second is plain causal (its rows i < a see nothing: LSE -inf, merged correctly). */
START_TEST(softmax_merge_halves_matches_whole) {
  const sm_prop_case *c = &sm_props[_i];
  sm_prop_case full = *c;
  full.wl = U; /* a left bound on the first part would need a negative window */
  sm_full f;
  sm_full_make(&f, &full, 4000 + (uint64_t)_i);
  const size_t a = c->start, n = c->n, rows = n * c->h_q;
  attn_softmax_desc da, db;
  sm_desc(&da, n, a, c->h_q, c->h_kv, c->d, c->dv, U, n - a);
  sm_desc(&db, n, n - a, c->h_q, c->h_kv, c->d, c->dv, U, 0);
  const tu_tensor ka = tu_rows_view(&f.x.k, 0, a), va = tu_rows_view(&f.x.v, 0, a);
  const tu_tensor kb = tu_rows_view(&f.x.k, a, n - a), vb = tu_rows_view(&f.x.v, a, n - a);
  sm_result ra, rb, merged;
  sm_call(&da, &f.x.q, &ka, &va, T, 1, 0, &ra);
  sm_call(&db, &f.x.q, &kb, &vb, T, 1, 0, &rb);
  tu_tensor_alloc(&merged.o, T, n, c->h_q, c->dv, 1);
  tu_tensor_alloc(&merged.lse, T, n, c->h_q, 1, 1);
  merged.has_lse = 1;
  const float *op[2] = {ra.o.data, rb.o.data}, *lp[2] = {ra.lse.data, rb.lse.data};
  ck_assert_int_eq(attn_softmax_merge(rows, c->dv, 2, op, c->dv, lp, 1, merged.o.data, c->dv,
                                      merged.lse.data, 1),
                   ATTN_OK);
  tu_assert_output_clean("merge o", &merged.o);
  tu_assert_output_clean("merge lse", &merged.lse);
  sm_compare("merge of two key halves vs whole", &f.d, &merged, f.ref.o, f.ref.lse, f.ref.oscale,
             f.ref.sabs, TOL_PROPERTY_FACTOR);
  sm_result_free(&ra);
  sm_result_free(&rb);
  sm_result_free(&merged);
  sm_full_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* attn_softmax_merge against the reference                                                    */
/* ------------------------------------------------------------------------------------------ */
enum { LSE_NARROW, LSE_WIDE, LSE_HOLES };
typedef struct mg_case {
  size_t rows, dv, parts;
  tu_layout_kind layout; /* T: o stride dv, lse stride 1; P: o stride dv + 10, lse stride 11 */
  int lse_mode;
  int in_place; /* 0: separate output; k > 0: the output is part k - 1 (same strides) */
  int with_lse;
} mg_case;

static const mg_case mg_cases[] = {
  {1, 1, 1, T, LSE_NARROW, 0, 1},   {7, 8, 2, T, LSE_NARROW, 0, 1},  {33, 65, 3, P, LSE_WIDE, 0, 1},
  {50, 64, 4, T, LSE_HOLES, 0, 1},  {9, 7, 2, P, LSE_HOLES, 1, 1},   {64, 128, 2, T, LSE_WIDE, 2, 1},
  {20, 9, 5, T, LSE_HOLES, 0, 0},   {17, 4, 2, P, LSE_NARROW, 1, 0}, {97, 3, 3, P, LSE_HOLES, 0, 1},
  {31, 16, 4, T, LSE_NARROW, 3, 1}, {40, 9, 3, P, LSE_HOLES, 3, 1},
};
#define MG_NCASES (sizeof mg_cases / sizeof mg_cases[0])

START_TEST(merge_matches_reference) {
  const mg_case *c = &mg_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 5000 + (uint64_t)_i);
  tu_tensor o[5], l[5], out, lout;
  const float *op[5], *lp[5];
  for (size_t p = 0; p < c->parts; ++p) {
    tu_tensor_alloc(&o[p], c->layout, c->rows, 1, c->dv, 1);
    tu_tensor_alloc(&l[p], c->layout, c->rows, 1, 1, 1);
    tu_tensor_fill(&o[p], &rng, -1.0f, 1.0f);
    for (size_t r = 0; r < c->rows; ++r) {
      float v = tu_rng_range(&rng, -3.0f, 3.0f);
      if (c->lse_mode == LSE_WIDE) v = tu_rng_range(&rng, -150.0f, 150.0f);
      if (c->lse_mode == LSE_HOLES && (r % 5 == 0 || tu_rng_next(&rng) % 4 == 0)) v = -INFINITY;
      *tu_at(&l[p], r, 0, 0) = v;
    }
    op[p] = o[p].data;
    lp[p] = l[p].data;
  }
  const size_t os = o[0].l.row_stride, ls = l[0].l.row_stride;
  double *ro = malloc(sizeof(double) * c->rows * c->dv), *rl = malloc(sizeof(double) * c->rows);
  double *so = malloc(sizeof(double) * c->rows * c->dv), *sl = malloc(sizeof(double) * c->rows);
  ck_assert(ro && rl && so && sl);
  ref_merge(c->rows, c->dv, c->parts, op, os, lp, ls, ro, rl, so, sl);
  if (c->in_place) {
    out = o[c->in_place - 1];
    lout = l[c->in_place - 1];
  } else {
    tu_tensor_alloc(&out, c->layout, c->rows, 1, c->dv, 1);
    tu_tensor_alloc(&lout, c->layout, c->rows, 1, 1, 1);
  }
  ck_assert_int_eq(attn_softmax_merge(c->rows, c->dv, c->parts, op, os, lp, ls, out.data,
                                      out.l.row_stride, c->with_lse ? lout.data : NULL,
                                      lout.l.row_stride),
                   ATTN_OK);
  tu_assert_output_clean("merge o", &out);
  tu_assert_output_clean("merge lse", &lout);
  double *tol = tu_dup(tol_merge_o(c->parts), c->rows * c->dv);
  tu_compare("merge.o", "merge", &out, ro, so, tol);
  if (c->with_lse) {
    for (size_t r = 0; r < c->rows; ++r) tol[r] = tol_merge_lse(c->parts);
    tu_compare("merge.lse", "merge", &lout, rl, sl, tol);
  } else if (!c->in_place) {
    /* lse_out NULL: the buffer we did not pass stays all sentinel */
    for (size_t r = 0; r < c->rows; ++r) {
      const float s = tu_sentinel(), g = *tu_at(&lout, r, 0, 0);
      ck_assert_int_eq(memcmp(&s, &g, sizeof s), 0);
    }
  }
  free(tol);
  free(ro);
  free(rl);
  free(so);
  free(sl);
  if (!c->in_place) {
    tu_tensor_free(&out);
    tu_tensor_free(&lout);
  }
  for (size_t p = 0; p < c->parts; ++p) {
    tu_tensor_free(&o[p]);
    tu_tensor_free(&l[p]);
  }
}
END_TEST

/* The audit's case: in place with the same part twice, o_parts = {a, a}, o = a, equal LSE, a =
 * {2, 4}: the weights 1/2 + 1/2 of the one buffer are summed before it is overwritten, so o = a
 * exactly and lse = l + log 2. Also {a, b, a} with o = a. */
START_TEST(merge_in_place_same_part_twice) {
  float a[2] = {2, 4}, b[2] = {6, 8}, la = 0.5f, lb = 0.5f, lout = 0;
  const float *op2[2] = {a, a}, *lp2[2] = {&la, &la};
  ck_assert_int_eq(attn_softmax_merge(1, 2, 2, op2, 2, lp2, 1, a, 2, &lout, 1), ATTN_OK);
  ck_assert_msg(a[0] == 2.0f && a[1] == 4.0f, "o = {%g, %g}, want {2, 4}", a[0], a[1]);
  ck_assert_float_eq_tol(lout, 0.5f + logf(2.0f), 1e-6f);
  const float *op3[3] = {a, b, a}, *lp3[3] = {&la, &lb, &la};
  ck_assert_int_eq(attn_softmax_merge(1, 2, 3, op3, 2, lp3, 1, a, 2, NULL, 1), ATTN_OK);
  ck_assert_float_eq_tol(a[0], 10.0f / 3.0f, 1e-6f); /* (2 + 6 + 2) / 3 */
  ck_assert_float_eq_tol(a[1], 16.0f / 3.0f, 1e-6f); /* (4 + 8 + 4) / 3 */
}
END_TEST

/* Non-finite parts, one row per situation, against the reference (which applies the policy):
 * a NaN LSE, a +inf LSE, every LSE NaN, a NaN o in a part with a finite LSE, a NaN o in an empty
 * part (LSE -inf: never read), every part empty, and an infinite o; in place and not. */
START_TEST(merge_nonfinite_policy) {
  enum { ROWS = 7, DV = 5, PARTS = 3 };
  const float lse_in[ROWS][PARTS] = {
      {0.5f, NAN, 1.0f},   {0.5f, INFINITY, 1.0f},   {NAN, NAN, NAN},       {0.5f, 0.25f, 1.0f},
      {0.5f, -INFINITY, 1.0f}, {-INFINITY, -INFINITY, -INFINITY}, {2.0f, 0.0f, -1.0f}};
  for (int in_place = 0; in_place < 2; ++in_place) {
    tu_rng rng;
    tu_rng_seed(&rng, 5100);
    tu_tensor o[PARTS], l[PARTS], out, lout;
    const float *op[PARTS], *lp[PARTS];
    for (size_t p = 0; p < PARTS; ++p) {
      tu_tensor_alloc(&o[p], T, ROWS, 1, DV, 1);
      tu_tensor_alloc(&l[p], T, ROWS, 1, 1, 1);
      tu_tensor_fill(&o[p], &rng, -1.0f, 1.0f);
      for (size_t r = 0; r < ROWS; ++r) *tu_at(&l[p], r, 0, 0) = lse_in[r][p];
      op[p] = o[p].data;
      lp[p] = l[p].data;
    }
    *tu_at(&o[1], 3, 0, 2) = NAN;      /* row 3: used part */
    *tu_at(&o[1], 4, 0, 1) = NAN;      /* row 4: empty part, never read */
    *tu_at(&o[0], 6, 0, 4) = INFINITY; /* row 6: used part */
    double ro[ROWS * DV], rl[ROWS], so[ROWS * DV], sl[ROWS];
    ref_merge(ROWS, DV, PARTS, op, DV, lp, 1, ro, rl, so, sl);
    if (in_place) {
      out = o[0];
      lout = l[2];
    } else {
      tu_tensor_alloc(&out, T, ROWS, 1, DV, 1);
      tu_tensor_alloc(&lout, T, ROWS, 1, 1, 1);
    }
    ck_assert_int_eq(attn_softmax_merge(ROWS, DV, PARTS, op, DV, lp, 1, out.data, DV, lout.data, 1), ATTN_OK);
    double *tol = tu_dup(tol_merge_o(PARTS), ROWS * DV);
    tu_compare("merge.o", in_place ? "non-finite parts, in place" : "non-finite parts", &out, ro, so, tol);
    for (size_t r = 0; r < ROWS; ++r) tol[r] = tol_merge_lse(PARTS);
    tu_compare("merge.lse", in_place ? "non-finite parts, in place" : "non-finite parts", &lout, rl, sl, tol);
    ck_assert(isnan(rl[0]) && isnan(rl[2]) && isnan(ro[3 * DV]) && !isnan(ro[4 * DV]) && rl[5] == -INFINITY);
    free(tol);
    if (!in_place) {
      tu_tensor_free(&out);
      tu_tensor_free(&lout);
    }
    for (size_t p = 0; p < PARTS; ++p) {
      tu_tensor_free(&o[p]);
      tu_tensor_free(&l[p]);
    }
  }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Keys wholly outside the window are never used                                               */
/* ------------------------------------------------------------------------------------------ */
typedef struct win_case {
  size_t n_q, n_kv, d, wl, wr;
} win_case;
static const win_case win_cases[] = {
  {1, 400, 64, 10, 0}, {20, 400, 8, 10, 0}, {1, 300, 7, 0, 0}, {48, 500, 16, 31, 0}, {5, 400, 9, 3, 2},
};
#define WIN_NCASES (sizeof win_cases / sizeof win_cases[0])

/* Keys (and values) before the first visible one minus a whole key block (96 or 64 rows) are
 * NaN: a kernel that skips the blocks outside the window, as documented, never sees them. */
START_TEST(softmax_window_skips_outside_keys) {
  const win_case *c = &win_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 6000 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, UNI, &rng, c->n_q, c->n_kv, 2, 1, c->d, c->d);
  const size_t first_visible = c->n_kv - c->n_q - c->wl; /* row 0's window start */
  ck_assert_uint_gt(first_visible, 96);
  for (size_t j = 0; j < first_visible - 96; ++j)
    for (size_t e = 0; e < c->d; ++e) {
      *tu_at(&x.k, j, 0, e) = NAN;
      *tu_at(&x.v, j, 0, e) = NAN;
    }
  tu_qkv_snapshot(&x);
  attn_softmax_desc d;
  sm_desc(&d, c->n_q, c->n_kv, 2, 1, c->d, c->d, c->wl, c->wr);
  sm_result res;
  sm_call(&d, &x.q, &x.k, &x.v, T, 1, 0, &res);
  tu_qkv_assert_unchanged(&x);
  sm_ref ref;
  sm_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
  sm_compare("NaN keys outside the window", &d, &res, ref.o, ref.lse, ref.oscale, ref.sabs, 1.0);
  sm_ref_free(&ref);
  sm_result_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Non-finite inputs: the policy of attn.h on every path                                        */
/* ------------------------------------------------------------------------------------------ */
/* The audit's case: causal, n = 2, d = dv = 1, q = k = {1, 1}, v = {1, NaN}. Query 0 sees only
 * key 0: o[0] = 1 and lse[0] = 1 exactly; query 1 sees the NaN: o[1] is NaN and lse[1] =
 * 1 + log 2 (v does not enter the LSE). The same with the window (0, 0): o[1] NaN, lse[1] = 1. */
START_TEST(softmax_invisible_nan_value_is_ignored) {
  static const float q[2] = {1, 1}, k[2] = {1, 1}, v[2] = {1, NAN};
  for (int win = 0; win < 2; ++win) {
    attn_softmax_desc d;
    sm_desc(&d, 2, 2, 1, 1, 1, 1, win ? 0 : U, 0);
    size_t ws = 0;
    ck_assert_int_eq(attn_softmax_workspace_size(&d, &ws), ATTN_OK);
    void *w = tu_alloc(ws, 0);
    float o[2], lse[2];
    ck_assert_int_eq(attn_softmax(&d, q, k, v, o, lse, w, ws), ATTN_OK);
    tu_free(w);
    ck_assert_msg(o[0] == 1.0f && lse[0] == 1.0f, "window %d: o[0] %g lse[0] %g", win, o[0], lse[0]);
    ck_assert_msg(isnan(o[1]), "window %d: o[1] %g", win, o[1]);
    ck_assert_float_eq_tol(lse[1], win ? 1.0f : 1.0f + logf(2.0f), 1e-6f);
  }
}
END_TEST

typedef struct nf_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv, wl, wr;
} nf_case;
/* Shapes whose boundary key blocks (96 / 64 keys) hold the poisoned token: causal prefill across
 * blocks, GQA, a sliding window, chunked prefill, decode, n_q > n_kv, full attention. */
static const nf_case nf_cases[] = {
  {"causal_130_gqa", 130, 130, 4, 2, 16, 9, W_CAUSAL},
  {"window_7_0", 150, 150, 1, 1, 8, 8, 7, 0},
  {"window_3_2", 70, 70, 2, 1, 7, 5, 3, 2},
  {"chunk_20_of_120", 20, 120, 2, 2, 16, 16, W_CAUSAL},
  {"decode_1_of_100_gqa", 1, 100, 4, 1, 64, 64, W_CAUSAL},
  {"nq50_nkv30_causal", 50, 30, 1, 1, 8, 8, W_CAUSAL},
  {"full_60", 60, 60, 2, 1, 9, 9, W_FULL},
};
#define NF_NCASES (sizeof nf_cases / sizeof nf_cases[0])

/* For each of q, k, v, each of NaN, +inf, -inf, and a token early in the sequence and one late,
 * one element is poisoned; every row must match the reference, which applies the policy: rows
 * that use the value are NaN (lse NaN unless it is in v), every other row is exact as usual. */
START_TEST(softmax_nonfinite_policy) {
  const nf_case *c = &nf_cases[_i];
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng;
    tu_rng_seed(&rng, 9000 + (uint64_t)_i);
    tu_qkv x;
    tu_qkv_make(&x, T, UNI, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv);
    char poison[64], what[96];
    tu_qkv_poison(&x, pc, 0, poison, sizeof poison);
    attn_softmax_desc d;
    sm_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->wl, c->wr);
    sm_result res;
    sm_call(&d, &x.q, &x.k, &x.v, T, 1, 0, &res);
    tu_qkv_assert_unchanged(&x);
    sm_ref ref;
    sm_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
    snprintf(what, sizeof what, "%s: %s", c->name, poison);
    sm_compare(what, &d, &res, ref.o, ref.lse, ref.oscale, ref.sabs, 1.0);
    sm_ref_free(&ref);
    sm_result_free(&res);
    tu_qkv_free(&x);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* exp accuracy through the public API                                                          */
/* ------------------------------------------------------------------------------------------ */
/* d = dv = 1, scale 1, keys {0, 1}, values {0, 1}: query x has logits {0, x} and output
 * o = e^x / (1 + e^x), so o carries exp's relative error (times 1 - o) almost undiluted. The
 * queries sweep x over [-87, 87] (e^-87 is still a normal float). */
enum { EXP_SWEEP = 4001 };
START_TEST(softmax_exp_accuracy_sweep) {
  tu_tensor q, k, v;
  tu_tensor_alloc(&q, T, EXP_SWEEP, 1, 1, 0);
  tu_tensor_alloc(&k, T, 2, 1, 1, 0);
  tu_tensor_alloc(&v, T, 2, 1, 1, 0);
  for (size_t i = 0; i < EXP_SWEEP; ++i)
    *tu_at(&q, i, 0, 0) = (float)(-87.0 + 174.0 * (double)i / (EXP_SWEEP - 1));
  *tu_at(&q, EXP_SWEEP / 2, 0, 0) = -0x1p-30f; /* tiny argument next to 0 */
  *tu_at(&k, 0, 0, 0) = 0.0f;
  *tu_at(&k, 1, 0, 0) = 1.0f;
  *tu_at(&v, 0, 0, 0) = 0.0f;
  *tu_at(&v, 1, 0, 0) = 1.0f;
  attn_softmax_desc d;
  sm_desc(&d, EXP_SWEEP, 2, 1, 1, 1, 1, W_FULL);
  d.scale = 1.0f;
  sm_result res;
  sm_call(&d, &q, &k, &v, T, 1, 0, &res);
  sm_ref ref;
  sm_ref_compute(&d, &q, &k, &v, &ref);
  double *tol = tu_dup(TOL_EXP_SWEEP_SOFTMAX, EXP_SWEEP);
  tu_compare("softmax.exp", "exp sweep: o = e^x / (1 + e^x)", &res.o, ref.o, ref.oscale, tol);
  free(tol);
  sm_ref_free(&ref);
  sm_result_free(&res);
  tu_tensor_free(&q);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Workspace                                                                                   */
/* ------------------------------------------------------------------------------------------ */
/* The size depends on d, dv, h_q / h_kv and the path, not on n_q or n_kv. */
START_TEST(softmax_workspace_independent_of_lengths) {
  static const size_t n[][2] = {{1, 1}, {7, 3}, {100, 1000}, {1000, 100}, {48, 96}};
  size_t first = 0;
  for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
    attn_softmax_desc d;
    sm_desc(&d, n[i][0], n[i][1], 4, 2, 64, 32, W_CAUSAL);
    size_t ws = 0;
    ck_assert_int_eq(attn_softmax_workspace_size(&d, &ws), ATTN_OK);
    if (i == 0) first = ws;
    ck_assert_uint_eq(ws, first);
  }
}
END_TEST

static Suite *softmax_suite(attn_isa isa) {
  Suite *s = suite_create(attn_isa_name(isa));
  size_t work[SM_NCASES];
  for (size_t i = 0; i < SM_NCASES; ++i) {
    const sm_case *c = &sm_cases[i];
    work[i] = c->n_q * c->n_kv * c->h_q * (c->d + c->dv);
  }
  const size_t nsel = tu_select_rows(SM_NCASES, work, sm_sel);
  TCase *tc = tu_tcase("reference");
  tcase_add_loop_test(tc, softmax_matches_reference, 0, (int)nsel);
  tcase_add_test(tc, softmax_shared_inputs);
  tcase_add_test(tc, softmax_decode_row_stride_zero);
  suite_add_tcase(s, tc);
  tc = tu_tcase("properties");
  tcase_add_loop_test(tc, softmax_decode_matches_prefill, 0, (int)SM_NPROPS);
  tcase_add_loop_test(tc, softmax_chunked_matches_prefill, 0, (int)SM_NPROPS);
  tcase_add_loop_test(tc, softmax_merge_halves_matches_whole, 0, (int)SM_NPROPS);
  suite_add_tcase(s, tc);
  tc = tu_tcase("merge");
  tcase_add_loop_test(tc, merge_matches_reference, 0, (int)MG_NCASES);
  tcase_add_test(tc, merge_in_place_same_part_twice);
  tcase_add_test(tc, merge_nonfinite_policy);
  suite_add_tcase(s, tc);
  tc = tu_tcase("window");
  tcase_add_loop_test(tc, softmax_window_skips_outside_keys, 0, (int)WIN_NCASES);
  suite_add_tcase(s, tc);
  tc = tu_tcase("nonfinite");
  tcase_add_test(tc, softmax_invisible_nan_value_is_ignored);
  tcase_add_loop_test(tc, softmax_nonfinite_policy, 0, (int)NF_NCASES);
  suite_add_tcase(s, tc);
  tc = tu_tcase("exp");
  tcase_add_test(tc, softmax_exp_accuracy_sweep);
  suite_add_tcase(s, tc);
  tc = tu_tcase("workspace");
  tcase_add_test(tc, softmax_workspace_independent_of_lengths);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_main(softmax_suite); }
