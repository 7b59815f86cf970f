/*
 * Softmax options (attn.h, attn_softmax_desc, 0.6.0): attention sinks, logit soft-capping, ALiBi
 * and an additive bias / mask tensor with strides, on the path ATTN_ISA forces, against the
 * float64 reference (tests/ref/ref_softmax.c with the same options, written from attn.h's
 * formulas): each alone and together, masks, GQA / MQA, odd sizes, chunked prefill, decode over a
 * split key range, broadcast bias strides, rows the bias hides entirely (with and without a sink),
 * a NaN bias, large logits under a cap, large slopes; decode steps equal the rows of a prefill;
 * split-KV parts merged with the documented sink recipe equal one call; statistics with a sink;
 * bad options return their status and leave the outputs untouched.
 * Tolerances: the softmax bounds of tolerances.h with the reference's error scale sabs, which
 * with options also counts |ALiBi term| + |bias| (their fp32 sums round to u times them) and
 * 2 softcap (the tanh through exp is within 4e-7 softcap, ~7u softcap, of the capped logit; the
 * bound multiplies sabs by (sqrt(d) + 4) u).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tolerances.h"

typedef struct opt_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;
  int sinks, alibi, bias; /* bias: 1 random in [-2, 2] with a few -inf; 2 also hides every key of
                             some rows; 3 a NaN in one visible pair */
  float softcap, slope_mul;
  int bias_row0, bias_head0; /* broadcast: row stride 0, head stride 0 */
  tu_data data;
} opt_case;

#define FULL \
  { ATTN_UNBOUNDED, ATTN_UNBOUNDED, 0 }
#define CAUSAL \
  { ATTN_UNBOUNDED, 0, 0 }
static const opt_case cases[] = {
    {"sinks causal gqa", 37, 37, 4, 2, 16, 16, CAUSAL, 1, 0, 0, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"sinks full mqa dv", 30, 50, 3, 1, 8, 12, FULL, 1, 0, 0, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"softcap large logits", 50, 50, 2, 2, 16, 16, FULL, 0, 0, 0, 5.0f, 1, 0, 0, TU_DATA_LARGE},
    {"softcap causal small cap", 65, 65, 2, 1, 7, 9, CAUSAL, 0, 0, 0, 0.5f, 1, 0, 0, TU_DATA_WIDE},
    {"alibi causal", 300, 300, 4, 4, 16, 16, CAUSAL, 0, 1, 0, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"alibi large slopes", 130, 130, 2, 2, 8, 8, CAUSAL, 0, 1, 0, 0, 64, 0, 0, TU_DATA_UNIFORM},
    {"alibi full two-sided", 97, 97, 2, 1, 8, 8, FULL, 0, 1, 0, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"bias window", 70, 70, 2, 2, 16, 16, {5, 2, 0}, 0, 0, 1, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"bias broadcast rows", 40, 100, 4, 2, 8, 8, CAUSAL, 0, 0, 1, 0, 1, 1, 0, TU_DATA_UNIFORM},
    {"bias broadcast heads", 49, 49, 4, 1, 8, 8, FULL, 0, 0, 1, 0, 1, 0, 1, TU_DATA_UNIFORM},
    {"bias hides rows", 33, 33, 2, 1, 8, 8, CAUSAL, 0, 0, 2, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"bias hides rows sinks", 33, 33, 2, 1, 8, 8, CAUSAL, 1, 0, 2, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"bias nan", 20, 20, 2, 2, 8, 8, CAUSAL, 0, 0, 3, 0, 1, 0, 0, TU_DATA_UNIFORM},
    {"all causal gqa chunked", 97, 289, 4, 2, 32, 24, CAUSAL, 1, 1, 1, 3.0f, 1, 0, 0, TU_DATA_UNIFORM},
    {"all window chunk-local", 60, 60, 2, 2, 8, 8, {7, 3, 16}, 1, 1, 1, 2.0f, 1, 0, 0, TU_DATA_UNIFORM},
    {"all decode split", 1, 5000, 8, 2, 16, 16, CAUSAL, 1, 1, 1, 4.0f, 1, 0, 0, TU_DATA_UNIFORM},
    {"all 3 tokens split window", 3, 9000, 2, 2, 8, 8, {6000, 0, 0}, 1, 1, 1, 1.5f, 1, 0, 0, TU_DATA_UNIFORM},
    {"all n1 d1", 1, 1, 1, 1, 1, 1, CAUSAL, 1, 1, 1, 1.0f, 1, 0, 0, TU_DATA_UNIFORM},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* Options' arrays of a case. */
typedef struct opt_arrays {
  float *sinks, *alibi, *bias;
  size_t rs, hs, bias_floats;
} opt_arrays;

static void arrays_make(const opt_case *c, tu_rng *rng, opt_arrays *a) {
  *a = (opt_arrays){0};
  if (c->sinks) {
    a->sinks = malloc(sizeof(float) * c->h_q);
    for (size_t h = 0; h < c->h_q; h++) a->sinks[h] = tu_rng_range(rng, -1.0f, 3.0f);
  }
  if (c->alibi) { /* the geometric slopes of the ALiBi paper, 2^(-8 (h + 1) / H), times slope_mul */
    a->alibi = malloc(sizeof(float) * c->h_q);
    for (size_t h = 0; h < c->h_q; h++)
      a->alibi[h] = c->slope_mul * (float)pow(2.0, -8.0 * (double)(h + 1) / (double)c->h_q);
  }
  if (c->bias) {
    a->hs = c->bias_head0 ? 0 : c->n_kv + 3;
    a->rs = c->bias_row0 ? 0 : c->h_q * (c->n_kv + 3) + 1;
    a->bias_floats = (c->n_q - 1) * a->rs + (c->h_q - 1) * a->hs + c->n_kv;
    a->bias = malloc(sizeof(float) * a->bias_floats);
    for (size_t e = 0; e < a->bias_floats; e++) {
      const float u = tu_rng_range(rng, 0.0f, 1.0f);
      a->bias[e] = u < 0.05f ? -INFINITY : tu_rng_range(rng, -2.0f, 2.0f);
    }
    if (c->bias == 2) /* every key of query rows 3 and 17 (every head) hidden */
      for (size_t i = 3; i < c->n_q; i += 14)
        for (size_t h = 0; h < c->h_q; h++)
          for (size_t j = 0; j < c->n_kv; j++) a->bias[i * a->rs + h * a->hs + j] = -INFINITY;
    if (c->bias == 3) a->bias[5 * a->rs + 1 * a->hs + 2] = NAN; /* query 5 sees key 2 causally */
  }
}

static void arrays_free(opt_arrays *a) {
  free(a->sinks);
  free(a->alibi);
  free(a->bias);
}

static void desc_make(const opt_case *c, const opt_arrays *a, attn_softmax_desc *d) {
  ck_assert_int_eq(attn_softmax_desc_init(d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  d->mask = c->mask;
  d->sinks = a->sinks;
  d->alibi_slopes = a->alibi;
  d->softcap = c->softcap;
  d->bias = a->bias;
  d->bias_layout = (attn_layout){a->rs, a->hs};
}

/* The library's o and lse (fresh guarded tensors). */
static void lib_run(const attn_softmax_desc *d, const tu_qkv *x, tu_tensor *o, tu_tensor *lse) {
  const attn_shape *s = &d->shape;
  tu_tensor_alloc(o, TU_TOKEN_MAJOR, s->n_q, s->h_q, s->dv, 1);
  tu_tensor_alloc(lse, TU_TOKEN_MAJOR, s->n_q, s->h_q, 1, 1);
  attn_softmax_desc dd = *d;
  dd.lse = lse->l;
  size_t ws = 0;
  ck_assert_int_eq(attn_softmax_workspace_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 3);
  ck_assert_int_eq(attn_softmax(&dd, x->q.data, x->k.data, x->v.data, o->data, lse->data, w, ws), ATTN_OK);
  tu_assert_guards("options workspace", w);
  tu_free(w);
  tu_assert_output_clean("options o", o);
  tu_assert_output_clean("options lse", lse);
}

static void compare(const char *what, const attn_softmax_desc *d, const tu_tensor *o, const tu_tensor *lse,
                    const tu_softmax_ref *r, size_t row0, double factor) {
  const attn_shape *s = &d->shape;
  const size_t rows = o->n * s->h_q;
  double *tol = malloc(sizeof(double) * rows * s->dv), *one = tu_dup(1.0, rows);
  for (size_t i = 0; i < rows; i++)
    for (size_t c = 0; c < s->dv; c++) tol[i * s->dv + c] = factor * tol_softmax_o(s->n_kv, s->d, r->sabs[row0 + i]);
  tu_compare("softmax_options.o", what, o, r->o + row0 * s->dv, r->oscale + row0 * s->dv, tol);
  for (size_t i = 0; i < rows; i++) {
    const double l = r->lse[row0 + i];
    tol[i] = factor * tol_softmax_lse(s->n_kv, s->d, r->sabs[row0 + i], isfinite(l) ? l : 0);
  }
  tu_compare("softmax_options.lse", what, lse, r->lse + row0, one, tol);
  free(tol);
  free(one);
}

/* One call of d (with statistics when st) on a fresh workspace; asserts ATTN_OK. */
static void call_ok(const attn_softmax_desc *d, const float *q, const float *k, const float *v, float *o, float *lse,
                    const attn_row_stats *st) {
  size_t ws;
  ck_assert_int_eq(attn_softmax_workspace_size(d, &ws), ATTN_OK);
  void *w = malloc(ws);
  ck_assert_ptr_nonnull(w);
  ck_assert_int_eq(st ? attn_softmax_stats(d, q, k, v, o, lse, st, w, ws) : attn_softmax(d, q, k, v, o, lse, w, ws),
                   ATTN_OK);
  free(w);
}

START_TEST(options_match_reference) {
  const opt_case *c = &cases[_i];
  tu_rng rng = tu_rng_of(5100 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  opt_arrays a;
  arrays_make(c, &rng, &a);
  attn_softmax_desc d;
  desc_make(c, &a, &d);
  tu_tensor o, lse;
  lib_run(&d, &x, &o, &lse);
  tu_qkv_assert_unchanged(&x);
  tu_softmax_ref r;
  tu_softmax_ref_compute(&d, &x.q, &x.k, &x.v, &r);
  compare(c->name, &d, &o, &lse, &r, 0, 1.0);
  tu_softmax_ref_free(&r);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  arrays_free(&a);
  tu_qkv_free(&x);
}
END_TEST

/* One decode call per position i (n_q = 1 over the first i + 1 keys, the bias rows from row i)
 * gives row i of a causal prefill with every option. */
START_TEST(options_decode_equals_prefill) {
  const opt_case c = {"decode", 41, 41, 4, 2, 16, 16, CAUSAL, 1, 1, 1, 3.0f, 1, 0, 0, TU_DATA_UNIFORM};
  tu_rng rng = tu_rng_of(5200);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, c.n_q, c.n_kv, c.h_q, c.h_kv, c.h_kv, c.d, c.dv);
  opt_arrays a;
  arrays_make(&c, &rng, &a);
  attn_softmax_desc d;
  desc_make(&c, &a, &d);
  tu_tensor o, lse;
  lib_run(&d, &x, &o, &lse);
  tu_softmax_ref r;
  tu_softmax_ref_compute(&d, &x.q, &x.k, &x.v, &r);
  for (size_t i = 0; i < c.n_q; i++) {
    tu_qkv step = x;
    step.q = tu_rows_view(&x.q, i, 1);
    step.k = tu_rows_view(&x.k, 0, i + 1);
    step.v = tu_rows_view(&x.v, 0, i + 1);
    attn_softmax_desc dd = d;
    ck_assert_int_eq(attn_softmax_desc_init(&dd, 1, i + 1, c.h_q, c.h_kv, c.d, c.dv), ATTN_OK);
    dd.mask = d.mask, dd.sinks = d.sinks, dd.alibi_slopes = d.alibi_slopes, dd.softcap = d.softcap;
    dd.bias = a.bias + i * a.rs, dd.bias_layout = d.bias_layout;
    tu_shape_layouts(&dd.shape, &step.q, &step.k, &step.v, &o);
    tu_tensor so, slse;
    lib_run(&dd, &step, &so, &slse);
    /* the step's keys are the prefill's first i + 1: the reference rows of the prefill apply */
    char what[64];
    snprintf(what, sizeof what, "decode step %zu", i);
    compare(what, &d, &so, &slse, &r, i * c.h_q, 1.0);
    tu_tensor_free(&so);
    tu_tensor_free(&slse);
  }
  tu_softmax_ref_free(&r);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  arrays_free(&a);
  tu_qkv_free(&x);
}
END_TEST

/* Split-KV with sinks (attn.h's recipe): parts over two key ranges computed without sinks,
 * merged with one more part of o = 0 and lse = the sink, equal one call with the sinks. */
START_TEST(options_merge_with_sinks) {
  const size_t n_q = 9, n_kv = 70, H = 3, D = 8, half = 31;
  tu_rng rng = tu_rng_of(5300);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n_q, n_kv, H, H, H, D, D);
  float sinks[3] = {0.5f, 2.5f, -1.0f}, bias[9 * 70];
  for (size_t e = 0; e < n_q * n_kv; e++) bias[e] = tu_rng_range(&rng, -1.0f, 1.0f);
  const size_t rows = n_q * H;
  float *parts[3], *lses[3];
  for (int p = 0; p < 3; p++) {
    parts[p] = calloc(rows * D, sizeof(float));
    lses[p] = calloc(rows, sizeof(float));
  }
  for (int p = 0; p < 2; p++) { /* keys [0, half) and [half, n_kv), full mask, bias broadcast over heads */
    const size_t j0 = p ? half : 0, nk = p ? n_kv - half : half;
    attn_softmax_desc d;
    ck_assert_int_eq(attn_softmax_desc_init(&d, n_q, nk, H, H, D, D), ATTN_OK);
    d.bias = bias + j0;
    d.bias_layout = (attn_layout){n_kv, 0};
    call_ok(&d, x.q.data, x.k.data + j0 * H * D, x.v.data + j0 * H * D, parts[p], lses[p], NULL);
  }
  for (size_t r = 0; r < rows; r++) lses[2][r] = sinks[r % H]; /* the sink part: o = 0 */
  float *merged = malloc(sizeof(float) * rows * D), *mlse = malloc(sizeof(float) * rows);
  ck_assert_int_eq(
      attn_softmax_merge(rows, D, 3, (const float *const *)parts, D, (const float *const *)lses, 1, merged, D, mlse, 1),
      ATTN_OK);
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, n_q, n_kv, H, H, D, D), ATTN_OK);
  d.sinks = sinks;
  d.bias = bias;
  d.bias_layout = (attn_layout){n_kv, 0};
  float *o = malloc(sizeof(float) * rows * D), *lse = malloc(sizeof(float) * rows);
  call_ok(&d, x.q.data, x.k.data, x.v.data, o, lse, NULL);
  for (size_t e = 0; e < rows * D; e++) ck_assert_float_eq_tol(merged[e], o[e], 2e-6f);
  for (size_t r = 0; r < rows; r++) ck_assert_float_eq_tol(mlse[r], lse[r], 4e-6f);
  free(o);
  free(lse);
  free(merged);
  free(mlse);
  for (int p = 0; p < 3; p++) free(parts[p]), free(lses[p]);
  tu_qkv_free(&x);
}
END_TEST

/* Statistics with a sink are the visible keys' (the sink's share left out, count n): against
 * a float64 computation of the keys' weights, and against attn_matrix_stats (the explicit matrix,
 * whose rows then sum to less than 1) with every option on. */
START_TEST(options_stats_with_sinks) {
  const size_t n = 23, H = 2, D = 8;
  tu_rng rng = tu_rng_of(5400);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, H, H, H, D, D);
  float sinks[2] = {1.0f, 3.5f}, ent[23 * 2], sp[23 * 2], cnt[23 * 2], o[23 * 2 * 8];
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, n, n, H, H, D, D), ATTN_OK);
  d.mask = attn_mask_causal();
  d.sinks = sinks;
  attn_row_stats st;
  ck_assert_int_eq(attn_row_stats_init(&st, H, ent, sp, cnt), ATTN_OK);
  call_ok(&d, x.q.data, x.k.data, x.v.data, o, NULL, &st);
  for (size_t i = 0; i < n; i++)
    for (size_t h = 0; h < H; h++) {
      double s[23], m = -INFINITY, W = 0, W2 = 0, L = 0;
      for (size_t j = 0; j <= i; j++) {
        double dot = 0;
        for (size_t t = 0; t < D; t++) dot += (double)tu_at(&x.q, i, h, t)[0] * (double)tu_at(&x.k, j, h, t)[0];
        s[j] = dot * d.scale;
        m = fmax(m, s[j]);
      }
      for (size_t j = 0; j <= i; j++) {
        const double wj = exp(s[j] - m);
        W += wj, W2 += wj * wj, L += wj * (s[j] - m);
      }
      const double e_ref = log(W) - L / W, sp_ref = W / sqrt((double)(i + 1) * W2);
      ck_assert_float_eq(cnt[i * H + h], (float)(i + 1));
      /* W is l less the sink's e^(sink - m): its rounding grows with the sink's share (<= ~30x) */
      ck_assert_msg(fabs(ent[i * H + h] - e_ref) <= 3e-5 * (1 + e_ref), "entropy row %zu head %zu: %g vs %g", i, h,
                    (double)ent[i * H + h], e_ref);
      ck_assert_msg(fabs(sp[i * H + h] - sp_ref) <= 3e-5, "sparsity row %zu head %zu: %g vs %g", i, h,
                    (double)sp[i * H + h], sp_ref);
    }
  /* every option: the streamed statistics equal the explicit matrix's */
  float slopes[2] = {0.3f, 0.05f}, bias[23 * 23], ment[23 * 2], msp[23 * 2], mcnt[23 * 2];
  for (size_t e = 0; e < n * n; e++) bias[e] = e % 7 == 3 ? -INFINITY : tu_rng_range(&rng, -1.0f, 1.0f);
  d.alibi_slopes = slopes, d.softcap = 2.5f, d.bias = bias, d.bias_layout = (attn_layout){n, 0};
  call_ok(&d, x.q.data, x.k.data, x.v.data, o, NULL, &st);
  attn_row_stats mst;
  ck_assert_int_eq(attn_row_stats_init(&mst, H, ment, msp, mcnt), ATTN_OK);
  const attn_call call = {ATTN_KIND_SOFTMAX, &d, x.q.data, x.k.data, NULL, NULL, NULL};
  size_t ws;
  ck_assert_int_eq(attn_matrix_stats_workspace_size(&call, &ws), ATTN_OK);
  void *w = malloc(ws);
  ck_assert_int_eq(attn_matrix_stats(&call, &mst, w, ws), ATTN_OK);
  free(w);
  for (size_t r = 0; r < n * H; r++) {
    ck_assert_float_eq(cnt[r], mcnt[r]);
    ck_assert_int_eq(isnan(ent[r]), isnan(ment[r]));
    if (isnan(ent[r])) continue;
    ck_assert_msg(fabs(ent[r] - ment[r]) <= 3e-5 * (1 + ment[r]), "row %zu: entropy %g, matrix %g", r, (double)ent[r],
                  (double)ment[r]);
    ck_assert_msg(fabs(sp[r] - msp[r]) <= 3e-5, "row %zu: sparsity %g, matrix %g", r, (double)sp[r], (double)msp[r]);
  }
  tu_qkv_free(&x);
}
END_TEST

/* A non-finite q or k (the policy) still makes its row NaN through a cap and a bias: a bias must
 * not take a -inf score from an infinite input for a hidden pair. */
START_TEST(options_nonfinite_input) {
  const size_t n = 12, H = 1, D = 4;
  tu_rng rng = tu_rng_of(5500);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, H, H, H, D, D);
  tu_at(&x.q, 6, 0, 1)[0] = INFINITY;
  tu_at(&x.k, 9, 0, 0)[0] = -INFINITY;
  tu_qkv_snapshot(&x);
  float bias[12 * 12] = {0}, o[12 * 4], lse[12];
  for (int variant = 0; variant < 4; variant++) { /* cap and bias; cap alone; ALiBi alone; bias alone */
    float slopes[1] = {0.25f};
    attn_softmax_desc d;
    ck_assert_int_eq(attn_softmax_desc_init(&d, n, n, H, H, D, D), ATTN_OK);
    d.mask = variant == 0 ? attn_mask_causal() : attn_mask_full(); /* full: one unmasked block */
    d.softcap = variant < 2 ? 2.0f : 0.0f;
    d.bias = variant == 0 || variant == 3 ? bias : NULL; /* 3: on an unmasked block, a -inf score from k_9 */
    d.alibi_slopes = variant == 2 ? slopes : NULL;
    call_ok(&d, x.q.data, x.k.data, x.v.data, o, lse, NULL);
    for (size_t i = 0; i < n; i++) {
      const int bad = variant ? 1 : i == 6 || i >= 9; /* q_6 infinite; key 9 seen by rows 9.. (all: full) */
      for (size_t c = 0; c < D; c++)
        ck_assert_msg(isnan(o[i * D + c]) == bad, "row %zu col %zu: %g", i, c, o[i * D + c]);
      ck_assert(isnan(lse[i]) == bad);
    }
  }
  tu_qkv_free(&x);
}
END_TEST

/* A bias of NaN, +inf or -inf at a pair the mask hides changes nothing (attn.h: hidden pairs never
 * count): the same bits as a bias of 0 there, over causal, window, two-sided and chunk-local masks,
 * chunked prefill, more queries than keys, a 3-token decode and a one-token one over a split key
 * range (0.6.0's audit: a partly masked block added the bias to the mask's -inf). */
START_TEST(options_bias_hidden_nonfinite) {
  static const struct {
    size_t n_q, n_kv, h_q, h_kv, d;
    attn_mask mask;
  } sh[] = {
      {2, 2, 1, 1, 1, CAUSAL},
      {45, 45, 2, 1, 8, CAUSAL},
      {70, 70, 2, 2, 8, {5, 0, 0}},
      {61, 61, 2, 2, 8, {6, 3, 0}},
      {60, 60, 2, 1, 8, {ATTN_UNBOUNDED, 0, 16}},
      {37, 140, 4, 2, 8, CAUSAL},
      {30, 12, 2, 2, 8, CAUSAL},
      {3, 200, 2, 1, 16, CAUSAL},
      {1, 5000, 2, 1, 8, {3000, 0, 0}},
  };
  static const float poison[3] = {NAN, INFINITY, -INFINITY};
  for (size_t c = 0; c < sizeof sh / sizeof sh[0]; c++) {
    const size_t nq = sh[c].n_q, nkv = sh[c].n_kv, H = sh[c].h_q, D = sh[c].d;
    tu_rng rng = tu_rng_of(5700 + (uint64_t)c);
    tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, nq, nkv, H, sh[c].h_kv, sh[c].h_kv, D, D);
    if (c == 0) x.q.data[0] = x.q.data[1] = x.k.data[0] = x.k.data[1] = 1.0f, x.v.data[0] = 3.0f, x.v.data[1] = 5.0f;
    const size_t nb = nq * H * nkv;
    float *bias = malloc(sizeof(float) * nb), *o0 = malloc(sizeof(float) * nq * H * D),
          *o1 = malloc(sizeof(float) * nq * H * D);
    float *l0 = malloc(sizeof(float) * nq * H), *l1 = malloc(sizeof(float) * nq * H);
    for (size_t e = 0; e < nb; e++) bias[e] = c == 0 ? 0.0f : tu_rng_range(&rng, -2.0f, 2.0f);
    attn_softmax_desc d;
    ck_assert_int_eq(attn_softmax_desc_init(&d, nq, nkv, H, sh[c].h_kv, D, D), ATTN_OK);
    d.mask = sh[c].mask;
    d.bias = bias;
    d.bias_layout = (attn_layout){H * nkv, nkv};
    for (int pz = -1; pz < 3; pz++) { /* -1: 0 at the hidden pairs, the bits every poison must give */
      for (size_t i = 0; i < nq; i++)
        for (size_t j = 0; j < nkv; j++)
          if (!ref_visible(i, j, nq, nkv, d.mask.left, d.mask.right, d.mask.chunk))
            for (size_t h = 0; h < H; h++) bias[(i * H + h) * nkv + j] = pz < 0 ? 0.0f : poison[pz];
      call_ok(&d, x.q.data, x.k.data, x.v.data, pz < 0 ? o0 : o1, pz < 0 ? l0 : l1, NULL);
      if (pz < 0) {
        for (size_t e = 0; e < nq * H * D; e++) ck_assert_msg(isfinite(o0[e]), "case %zu: o[%zu] %g", c, e, o0[e]);
        continue;
      }
      for (size_t e = 0; e < nq * H * D; e++)
        ck_assert_msg(memcmp(&o0[e], &o1[e], sizeof(float)) == 0, "case %zu, hidden bias %g: o[%zu] %g, expected %g", c,
                      (double)poison[pz], e, (double)o1[e], (double)o0[e]);
      for (size_t r = 0; r < nq * H; r++)
        ck_assert_msg(memcmp(&l0[r], &l1[r], sizeof(float)) == 0, "case %zu, hidden bias %g: lse[%zu] %g, expected %g",
                      c, (double)poison[pz], r, (double)l1[r], (double)l0[r]);
    }
    if (c == 0) { /* the audit's case: row 0 sees key 0 alone */
      ck_assert_float_eq(o1[0], 3.0f);
      ck_assert_float_eq_tol(l1[0], 1.0f, 1e-6f);
    }
    free(bias), free(o0), free(o1), free(l0), free(l1);
    tu_qkv_free(&x);
  }
}
END_TEST

/* Bad options: their status, outputs untouched. */
START_TEST(options_reject_bad_input) {
  const size_t n = 6, H = 2, D = 4;
  tu_rng rng = tu_rng_of(5600);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, H, H, H, D, D);
  float o[6 * 2 * 4 + 64], lse[12], good[2] = {0.1f, 0.2f}, nan2[2] = {0.1f, NAN}, inf2[2] = {INFINITY, 0};
  attn_softmax_desc plain; /* a workspace for the shape, so that each call reaches its option's check */
  size_t ws_bytes = 0;
  ck_assert_int_eq(attn_softmax_desc_init(&plain, n, n, H, H, D, D), ATTN_OK);
  ck_assert_int_eq(attn_softmax_workspace_size(&plain, &ws_bytes), ATTN_OK);
  float *ws = malloc(ws_bytes);
  ck_assert_ptr_nonnull(ws);
  for (int k = 0; k < 9; k++) {
    attn_softmax_desc d;
    ck_assert_int_eq(attn_softmax_desc_init(&d, n, n, H, H, D, D), ATTN_OK);
    attn_status want = ATTN_E_BAD_SCALE;
    float *bias_buf = NULL;
    switch (k) {
      case 0:
        d.softcap = -1.0f;
        break;
      case 1:
        d.softcap = NAN;
        break;
      case 2:
        d.softcap = INFINITY;
        break;
      case 3:
        d.sinks = nan2, want = ATTN_E_BAD_BIAS;
        break;
      case 4:
        d.alibi_slopes = inf2, want = ATTN_E_BAD_BIAS;
        break;
      case 5:
        d.sinks = good, d.alibi_slopes = nan2, want = ATTN_E_BAD_BIAS;
        break;
      case 6:
        d.bias = o + 8, want = ATTN_E_ALIASING;
        break; /* overlaps o */
      case 7:
        d.bias = lse, d.bias_layout = (attn_layout){0, 0}, want = ATTN_E_ALIASING;
        break;
      default:
        bias_buf = good;
        d.bias = bias_buf, d.bias_layout = (attn_layout){SIZE_MAX / 2, 0}, want = ATTN_E_SIZE_OVERFLOW;
        break;
    }
    for (size_t e = 0; e < sizeof o / sizeof o[0]; e++) o[e] = 7.0f;
    for (size_t e = 0; e < 12; e++) lse[e] = 7.0f;
    size_t bytes = 0;
    if (k < 6 || k == 8) ck_assert_int_eq(attn_softmax_workspace_size(&d, &bytes), want);
    if ((k == 6 || k == 7) && attn_softmax_workspace_size(&d, &bytes) == ATTN_OK && bytes > ws_bytes) {
      free(ws); /* a bias tensor's step takes more scratch: enough of it, so that aliasing is what fails */
      ws = malloc(ws_bytes = bytes);
      ck_assert_ptr_nonnull(ws);
    }
    ck_assert_int_eq(attn_softmax(&d, x.q.data, x.k.data, x.v.data, o, lse, ws, ws_bytes), want);
    for (size_t e = 0; e < sizeof o / sizeof o[0]; e++) ck_assert_float_eq(o[e], 7.0f);
    for (size_t e = 0; e < 12; e++) ck_assert_float_eq(lse[e], 7.0f);
  }
  free(ws);
  tu_qkv_free(&x);
}
END_TEST

/* Options off (the init defaults) leave the plain call: the same workspace size and results. */
START_TEST(options_off_is_plain) {
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, 5, 7, 4, 2, 8, 8), ATTN_OK);
  ck_assert_ptr_null(d.sinks);
  ck_assert_ptr_null(d.alibi_slopes);
  ck_assert_ptr_null(d.bias);
  ck_assert_float_eq(d.softcap, 0.0f);
  ck_assert_uint_eq(d.bias_layout.row_stride, 4 * 7);
  ck_assert_uint_eq(d.bias_layout.head_stride, 7);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"reference", options_match_reference, (int)NCASES},
  {"properties", options_decode_equals_prefill, 1}, {"properties", options_merge_with_sinks, 1},
    {"properties", options_stats_with_sinks, 1}, {"properties", options_nonfinite_input, 1},
    {"properties", options_bias_hidden_nonfinite, 1},
  {"api", options_reject_bad_input, 1}, {"api", options_off_is_plain, 1})
/* clang-format on */
