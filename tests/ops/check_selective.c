/*
 * Selective attention (attn_selective and the selective KV cache attn_selcache_*), on the ISA path
 * named by ATTN_ISA, against the float64 reference (tests/ref/ref_selective.h). TCases:
 * "reference" (the shape table: o, lse and the returned f; a hand-computed case), "properties"
 * (F's structure through f, head isolation of the selection, prefill + chunk + decode = one call),
 * "cache" (no pruning = attn_selective exactly; budget and tau eviction against a float64
 * simulation of the policy; live bytes; copy / snapshot), "api" and "bad_input" (the exact status
 * of every bad argument, outputs and cache untouched).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "ref/ref_selective.h"
#include "test_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

#define HEADS(q, kv, s) .h_q = (q), .h_kv = (kv), .h_sel = (s)

/* ------------------------------------------------------------------------------------------ */
/* Running the library and the reference                                                       */
/* ------------------------------------------------------------------------------------------ */
static void sel_desc(attn_selective_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv,
                     size_t h_sel) {
  ck_assert_int_eq(attn_selective_desc_init(d, n_q, n_kv, h_q, h_kv, dd, dv), ATTN_OK);
  d->h_sel = h_sel;
}

/* Token-major inputs of n tokens from r (q [n][h_q][dd], k [n][h_kv][dd], v [n][h_kv][dv]) and the
 * descriptor of one call over all of them. */
static void sel_inputs(tu_qkv *x, attn_selective_desc *d, tu_rng *r, tu_data data, size_t n, size_t h_q, size_t h_kv,
                       size_t dd, size_t dv, size_t h_sel) {
  tu_qkv_make(x, T, data, r, n, n, h_q, h_kv, h_kv, dd, dv);
  sel_desc(d, n, n, h_q, h_kv, dd, dv, h_sel);
}

typedef struct sel_res {
  tu_tensor o, lse;
  int has_lse;
  float *f; /* n_kv floats, guarded */
  size_t n_kv;
} sel_res;

/* attn_selective with q, k, v as given, o and lse freshly allocated (guarded, sentinel-filled) in
 * layout okind, f guarded: its first n_kv - n_q entries copied from f_in (the carried state), the
 * call's own entries left at the sentinel (a NaN: their input must be ignored). Asserts ATTN_OK,
 * intact guards (o, lse, f, the exactly-sized workspace at `misalign`) and untouched gaps. */
static void sel_run(const attn_selective_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                    tu_layout_kind okind, int with_lse, const float *f_in, size_t misalign, sel_res *r) {
  attn_selective_desc dd = *desc;
  tu_tensor_alloc(&r->o, okind, dd.shape.n_q, dd.shape.h_q, dd.shape.dv, 1);
  r->has_lse = with_lse;
  if (with_lse) tu_tensor_alloc(&r->lse, okind, dd.shape.n_q, dd.shape.h_q, 1, 1);
  tu_shape_layouts(&dd.shape, q, k, v, &r->o);
  if (with_lse) dd.lse = r->lse.l;
  const size_t nkv = dd.shape.n_kv, first_new = dd.shape.n_q < nkv ? nkv - dd.shape.n_q : 0;
  r->n_kv = nkv;
  r->f = tu_alloc(sizeof(float) * nkv, 0);
  tu_fill_sentinel(r->f, nkv);
  if (f_in) memcpy(r->f, f_in, sizeof(float) * first_new);
  size_t ws = 0;
  ck_assert_int_eq(attn_selective_workspace_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(
      attn_selective(&dd, q->data, k->data, v->data, r->o.data, with_lse ? r->lse.data : NULL, r->f, w, ws), ATTN_OK);
  tu_assert_guards("selective workspace", w);
  tu_free(w);
  tu_assert_guards("selective f", r->f);
  tu_assert_output_clean("selective o", &r->o);
  if (with_lse) tu_assert_output_clean("selective lse", &r->lse);
}

static void sel_res_free(sel_res *r) {
  tu_tensor_free(&r->o);
  if (r->has_lse) tu_tensor_free(&r->lse);
  tu_free(r->f);
}

typedef struct sel_ref {
  double *o, *lse, *oscale, *oarg, *of, *sabs, *larg, *lf, *f, *fg, *F;
} sel_ref;

static double *dalloc(size_t n) {
  double *p = malloc(sizeof(double) * (n ? n : 1));
  ck_assert_ptr_nonnull(p);
  return p;
}

static ref_selective_out sel_ref_out(sel_ref *r, size_t rows, size_t dv, size_t n_q, size_t n_kv) {
  r->o = dalloc(rows * dv);
  r->oscale = dalloc(rows * dv);
  r->oarg = dalloc(rows * dv);
  r->of = dalloc(rows * dv);
  r->lse = dalloc(rows);
  r->sabs = dalloc(rows);
  r->larg = dalloc(rows);
  r->lf = dalloc(rows);
  r->f = dalloc(n_kv);
  r->fg = dalloc(n_kv);
  r->F = dalloc(n_q * n_kv);
  return (ref_selective_out){r->o, r->lse, r->oscale, r->oarg, r->of, r->sabs, r->larg, r->lf, r->f, r->fg, r->F};
}

/* The reference of a call of desc (its sizes, scale, h_sel) over these tensors, f0 the state. */
static void sel_ref_compute(const attn_selective_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                            const float *f0, sel_ref *r) {
  const attn_shape *s = &d->shape;
  const ref_selective_problem p = {.n_q = s->n_q,
                                   .n_kv = s->n_kv,
                                   .h_q = s->h_q,
                                   .h_kv = s->h_k,
                                   .d = s->d,
                                   .dv = s->dv,
                                   .scale = (double)d->scale,
                                   .h_sel = d->h_sel,
                                   .q = q->data,
                                   .k = k->data,
                                   .v = v->data,
                                   .lq = tu_ref_layout(q),
                                   .lk = tu_ref_layout(k),
                                   .lv = tu_ref_layout(v),
                                   .f0 = f0};
  const ref_selective_out out = sel_ref_out(r, s->n_q * s->h_q, s->dv, s->n_q, s->n_kv);
  ref_selective(&p, &out);
}

static void sel_ref_free(sel_ref *r) {
  double *all[] = {r->o, r->lse, r->oscale, r->oarg, r->of, r->sabs, r->larg, r->lf, r->f, r->fg, r->F};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
}

/* The error scales of some rows (pointers at the first row's [h_q][dv] and [h_q] entries). */
typedef struct sel_scales {
  const double *oscale, *oarg, *of, *sabs, *larg, *lf;
} sel_scales;

static sel_scales sel_scales_at(const sel_ref *r, size_t row, size_t h_q, size_t dv) {
  const size_t a = row * h_q * dv, b = row * h_q;
  return (sel_scales){r->oscale + a, r->oarg + a, r->of + a, r->sabs + b, r->larg + b, r->lf + b};
}

/* got's o (and lse) against expected values, with the scales of got's rows; n the tokens behind the
 * results, bounds times factor. */
static void sel_compare(const char *what, size_t n, size_t d, const tu_tensor *o, const tu_tensor *lse,
                        const double *exp_o, const double *exp_lse, sel_scales sc, double factor) {
  const size_t rows = o->n * o->h, dv = o->w;
  double *scale = dalloc(rows * dv), *tol = dalloc(rows * dv);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < dv; ++c) {
      const size_t e = r * dv + c;
      const double b = factor * tol_selective_o(n, d, sc.oscale[e], sc.sabs[r], sc.oarg[e], sc.of[e]);
      scale[e] = sc.oscale[e] > 0.0 ? sc.oscale[e] : 1.0;
      tol[e] = b / scale[e];
    }
  tu_compare("selective.o", what, o, exp_o, scale, tol);
  if (lse && exp_lse) {
    for (size_t r = 0; r < rows; ++r) {
      scale[r] = 1.0;
      tol[r] = factor * tol_selective_lse(n, d, sc.sabs[r], isinf(exp_lse[r]) ? 0.0 : exp_lse[r], sc.larg[r], sc.lf[r]);
    }
    tu_compare("selective.lse", what, lse, exp_lse, scale, tol);
  }
  free(scale);
  free(tol);
}

/* The n floats of f against expected column sums; fr and fg the reference's f and its magnitudes
 * (the bound: tol_selective_f; 0, i.e. exact, for a column nothing was added to). */
static void sel_compare_f(const char *what, size_t n_tokens, size_t d, float *f, size_t n, const double *expect,
                          const double *fr, const double *fg, double factor) {
  tu_tensor t;
  memset(&t, 0, sizeof t);
  t.data = f;
  t.n = n;
  t.h = 1;
  t.w = 1;
  t.l = (attn_layout){1, 1};
  t.span = n;
  double *scale = dalloc(n), *tol = dalloc(n);
  for (size_t j = 0; j < n; ++j) {
    if (!isfinite(fg[j])) { /* poisoned data: no finite bound (the value must still be right where inf or NaN) */
      scale[j] = 1.0;
      tol[j] = INFINITY;
      continue;
    }
    const double b = factor * tol_selective_f(n_tokens, d, fr[j], fg[j]);
    scale[j] = fabs(fr[j]) + fg[j] > 0.0 ? fabs(fr[j]) + fg[j] : 1.0;
    tol[j] = b / scale[j];
  }
  tu_compare("selective.f", what, &t, expect, scale, tol);
  free(scale);
  free(tol);
}

static double *tensor_double(const tu_tensor *t) {
  double *p = dalloc(t->n * t->h * t->w);
  tu_tensor_to_double(t, p);
  return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
typedef struct sel_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv, h_sel;
  tu_layout_kind layout;
  float scale;
  int set_scale;
  tu_data data;
  int no_lse;
  int f0_random; /* n_q < n_kv: the carried column sums drawn in [0, 2) (BOS 0), not the prefix's */
} sel_case;

/* Query blocks are 48 rows and key blocks 96 on SIMD paths, 32 / 64 on scalar: sequence lengths
 * 1, 7, 47, 48, 49, 64, 96, 97, 130 sit on and around them. n_q < n_kv continues a prefix whose
 * column sums come from the reference (rounded to float, as the library would carry them). */
static const sel_case sel_cases[] = {
    {.name = "n1_d8", SIZES(1, 1, 8, 8), HEADS(1, 1, 0)},
    {.name = "n2_d4_gqa", SIZES(2, 2, 4, 4), HEADS(2, 1, 1)},
    {.name = "n7_d7_gqa", SIZES(7, 7, 7, 7), HEADS(4, 2, 3)},
    {.name = "n31_d16", SIZES(31, 31, 16, 16), HEADS(1, 1, 0)},
    {.name = "n47_d16", SIZES(47, 47, 16, 16), HEADS(2, 1, 1)},
    {.name = "n48_d64", SIZES(48, 48, 64, 64), HEADS(2, 2, 0)},
    {.name = "n49_d8_gqa", SIZES(49, 49, 8, 8), HEADS(4, 2, 2)},
    {.name = "n64_d128", SIZES(64, 64, 128, 128), HEADS(1, 1, 0)},
    {.name = "n96_d9_mha", SIZES(96, 96, 9, 9), HEADS(3, 3, 2)},
    {.name = "n97_d32_gqa", SIZES(97, 97, 32, 32), HEADS(6, 2, 5)},
    {.name = "n130_d16", SIZES(130, 130, 16, 16), HEADS(2, 1, 1)},
    {.name = "n130_d65", SIZES(130, 130, 65, 65), HEADS(1, 1, 0)},
    {.name = "d1", SIZES(50, 50, 1, 1), HEADS(2, 2, 1)},
    {.name = "d8_dv13_mqa", SIZES(50, 50, 8, 13), HEADS(4, 1, 3)},
    {.name = "d64_dv7", SIZES(33, 33, 64, 7), HEADS(2, 1, 0)},
    /* data: strong selection (every score positive: F grows linearly), large and wide scores */
    {.name = "positive_n97", SIZES(97, 97, 16, 16), HEADS(2, 1, 0), .data = POS},
    {.name = "positive_n130_gqa", SIZES(130, 130, 8, 8), HEADS(4, 2, 1), .data = POS},
    {.name = "large_n49_scale1", SIZES(49, 49, 8, 8), HEADS(1, 1, 0), SCALE(1.0f), .data = LRG},
    {.name = "wide_n40", SIZES(40, 40, 8, 8), HEADS(2, 1, 1), .data = WIDE},
    {.name = "scale_-0.5", SIZES(60, 60, 16, 16), HEADS(2, 1, 0), SCALE(-0.5f)},
    {.name = "scale_0", SIZES(30, 30, 8, 8), HEADS(2, 1, 1), SCALE(0.0f)},
    {.name = "scale_3", SIZES(40, 40, 16, 16), HEADS(1, 1, 0), SCALE(3.0f)},
    /* chunked prefill (n_q < n_kv) with the carried state, decode */
    {.name = "chunk_20_of_100", SIZES(20, 100, 32, 32), HEADS(2, 1, 1)},
    {.name = "chunk_49_of_145", SIZES(49, 145, 8, 8), HEADS(1, 1, 0)},
    {.name = "chunk_48_of_97_positive", SIZES(48, 97, 16, 16), HEADS(4, 2, 3), .data = POS},
    {.name = "decode_1_of_97_gqa", SIZES(1, 97, 64, 64), HEADS(4, 2, 3)},
    {.name = "decode_1_of_2", SIZES(1, 2, 16, 16), HEADS(2, 1, 0)},
    {.name = "decode_1_of_1", SIZES(1, 1, 16, 16), HEADS(2, 1, 1)},
    /* n_q > n_kv: the first rows see no key (zeros, LSE -inf) */
    {.name = "nq40_nkv10", SIZES(40, 10, 16, 16), HEADS(2, 1, 1)},
    /* layouts */
    {.name = "head_major", SIZES(37, 37, 16, 16), HEADS(2, 2, 1), .layout = H},
    {.name = "padded_gqa", SIZES(49, 49, 13, 11), HEADS(4, 2, 2), .layout = P},
    {.name = "head_padded", SIZES(33, 33, 7, 9), HEADS(3, 1, 2), .layout = HP},
    {.name = "packed_gqa", SIZES(41, 41, 8, 8), HEADS(4, 2, 1), .layout = PK},
    {.name = "chunk_head_major", SIZES(30, 80, 8, 8), HEADS(2, 1, 0), .layout = H},
    /* lse = NULL */
    {.name = "no_lse", SIZES(47, 47, 8, 8), HEADS(2, 1, 1), .no_lse = 1},
    /* the keys of each query block in ranges (whole key blocks) folded in order: >= 256 keys each,
     * 2 ranges for the last blocks, 5 for a chunk; >= 2048 for calls of <= 4 tokens: 4 for a
     * decode call (the carried F drawn: the prefix's reference would cost 9000^2); d = 128 with 6
     * heads puts h_sel's key head in the second head group on the SIMD paths (5 + 1 heads with
     * 48-row blocks, 3 + 3 with 64), whose F the first group reads before the last one stores it */
    {.name = "ranges_n700_gqa", SIZES(700, 700, 16, 16), HEADS(4, 2, 3)},
    {.name = "ranges_chunk_64_of_1500", SIZES(64, 1500, 16, 16), HEADS(2, 1, 1)},
    {.name = "ranges_decode_1_of_9000_gqa", SIZES(1, 9000, 32, 32), HEADS(4, 2, 3), .f0_random = 1},
    {.name = "ranges_3_of_8300_f0_drawn", SIZES(3, 8300, 16, 16), HEADS(2, 2, 1), .f0_random = 1},
    {.name = "ranges_groups_n520_d128", SIZES(520, 520, 128, 128), HEADS(6, 6, 5)},
};
#define SEL_NCASES (sizeof sel_cases / sizeof sel_cases[0])
static size_t sel_sel[SEL_NCASES];

START_TEST(selective_matches_reference) {
  const size_t idx = sel_sel[_i];
  const sel_case *c = &sel_cases[idx];
  tu_rng rng;
  tu_rng_seed(&rng, 1000 + idx);
  /* chunked: inputs for every position, the call reads rows [start, n_kv) of q */
  const int chunked = c->n_q < c->n_kv;
  const size_t nq_all = chunked ? c->n_kv : c->n_q, start = chunked ? c->n_kv - c->n_q : 0;
  tu_qkv x;
  tu_qkv_make(&x, c->layout, c->data, &rng, nq_all, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  attn_selective_desc d;
  sel_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  if (c->set_scale) d.scale = c->scale;
  /* the carried state of the prefix [0, start): its column sums, from the reference */
  float *f0 = NULL;
  if (chunked && c->f0_random) {
    f0 = malloc(sizeof(float) * start);
    ck_assert_ptr_nonnull(f0);
    for (size_t j = 0; j < start; ++j) f0[j] = j ? tu_rng_range(&rng, 0.0f, 2.0f) : 0.0f;
  } else if (chunked) {
    attn_selective_desc dp = d;
    dp.shape.n_q = dp.shape.n_kv = start;
    const tu_tensor qp = tu_rows_view(&x.q, 0, start), kp = tu_rows_view(&x.k, 0, start),
                    vp = tu_rows_view(&x.v, 0, start);
    sel_ref pre;
    sel_ref_compute(&dp, &qp, &kp, &vp, NULL, &pre);
    f0 = malloc(sizeof(float) * start);
    ck_assert_ptr_nonnull(f0);
    for (size_t j = 0; j < start; ++j) f0[j] = (float)pre.f[j];
    sel_ref_free(&pre);
  }
  const tu_tensor q = tu_rows_view(&x.q, start, c->n_q);
  const tu_layout_kind okind = c->layout == PK ? T : c->layout;
  sel_res res;
  sel_run(&d, &q, &x.k, &x.v, okind, !c->no_lse, f0, (idx % 2) * 4, &res);
  tu_qkv_assert_unchanged(&x);
  sel_ref ref;
  sel_ref_compute(&d, &q, &x.k, &x.v, f0, &ref);
  sel_compare(c->name, c->n_kv, c->d, &res.o, c->no_lse ? NULL : &res.lse, ref.o, ref.lse,
              sel_scales_at(&ref, 0, c->h_q, c->dv), 1.0);
  sel_compare_f(c->name, c->n_kv, c->d, res.f, c->n_kv, ref.f, ref.f, ref.fg, 1.0);
  /* F_p0 = 0 and the last key's column is empty: exactly 0 */
  ck_assert_msg(res.f[0] == 0.0f, "%s: f[0] = %g", c->name, (double)res.f[0]);
  ck_assert_msg(res.f[c->n_kv - 1] == 0.0f, "%s: f[last] = %g", c->name, (double)res.f[c->n_kv - 1]);
  sel_ref_free(&ref);
  sel_res_free(&res);
  free(f0);
  tu_qkv_free(&x);
}
END_TEST

/* A case computed by hand: one head, d = dv = 1, scale 1, q = 1 everywhere, keys {1, 2, 3, -1},
 * values {1, 2, 4, 8}. S_kj = relu(k_j) for 0 < j < k: S_21 = 2, S_31 = 2, S_32 = 3 (BOS never,
 * no token itself). F of query 3: {0, S_21 = 2, 0 (F_p,p-1), 0} -> logits {1, 0, 3, -1}; query 2:
 * F = 0 everywhere (F_21 sums over 1 < k < 2: nothing) -> logits {1, 2, 3}. Returned f = {0, 4, 3,
 * 0}: exact in float. Without the shift (F_pj including S_pj), without the BOS or the diagonal
 * rule, the logits of row 3 would differ by 2 or 3. */
START_TEST(selective_hand_computed) {
  static const float q[4] = {1, 1, 1, 1}, k[4] = {1, 2, 3, -1}, v[4] = {1, 2, 4, 8};
  attn_selective_desc d;
  sel_desc(&d, 4, 4, 1, 1, 1, 1, 0);
  d.scale = 1.0f;
  size_t ws = 0;
  ck_assert_int_eq(attn_selective_workspace_size(&d, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 0);
  float o[4], lse[4], f[4] = {NAN, NAN, NAN, NAN};
  ck_assert_int_eq(attn_selective(&d, q, k, v, o, lse, f, w, ws), ATTN_OK);
  tu_free(w);
  const double e = exp(1.0);
  const double x3[4] = {1, 0, 3, -1}, x2[3] = {1, 2, 3};
  double n3 = 0, l3 = 0, n2 = 0, l2 = 0;
  for (int j = 0; j < 4; ++j) {
    n3 += exp(x3[j]) * v[j];
    l3 += exp(x3[j]);
  }
  for (int j = 0; j < 3; ++j) {
    n2 += exp(x2[j]) * v[j];
    l2 += exp(x2[j]);
  }
  const double want_o[4] = {1.0, (1.0 * e + 2.0 * e * e) / (e + e * e), n2 / l2, n3 / l3};
  const double want_lse[4] = {1.0, log(e + e * e), log(l2), log(l3)};
  for (int i = 0; i < 4; ++i) {
    ck_assert_msg(fabs(o[i] - want_o[i]) <= 1e-6 * fabs(want_o[i]), "o[%d] = %.9g, want %.9g", i, (double)o[i],
                  want_o[i]);
    ck_assert_msg(fabs(lse[i] - want_lse[i]) <= 1e-6 * fabs(want_lse[i]) + 1e-6, "lse[%d] = %.9g, want %.9g", i,
                  (double)lse[i], want_lse[i]);
  }
  ck_assert_msg(f[0] == 0.0f && f[1] == 4.0f && f[2] == 3.0f && f[3] == 0.0f, "f = {%g, %g, %g, %g}, want {0, 4, 3, 0}",
                (double)f[0], (double)f[1], (double)f[2], (double)f[3]);
}
END_TEST

/* Non-finite inputs: softmax's policy (a row that uses a non-finite q_i or k_j is NaN, a
 * non-finite v_j makes o NaN), and through F: a NaN or -inf score of head h_sel reaches F as NaN,
 * so every later row that sees the selected keys is NaN; a +inf one is +inf in F (checked apart).
 * h_sel is the last head (the one tu_qkv_poison poisons) or 0. */
typedef struct nf_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, h_sel;
} nf_case;
static const nf_case nf_cases[] = {
    {"causal_130_gqa_hsel_last", 130, 130, 4, 2, 16, 3},
    {"causal_60_hsel_0", 60, 60, 2, 1, 8, 0},
    {"chunk_20_of_100_hsel_last", 20, 100, 2, 1, 16, 1},
    {"decode_1_of_50", 1, 50, 4, 2, 8, 3},
};
#define NF_NCASES (sizeof nf_cases / sizeof nf_cases[0])

START_TEST(selective_nonfinite_policy) {
  const nf_case *c = &nf_cases[_i];
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng;
    tu_rng_seed(&rng, 9000 + (uint64_t)_i);
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->d);
    char poison[64], what[128];
    tu_qkv_poison(&x, pc, 0, poison, sizeof poison);
    attn_selective_desc d;
    sel_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->d, c->h_sel);
    /* a chunk carries a finite state: zeros for the earlier keys (as if they selected nothing) */
    float *f0 = calloc(c->n_kv, sizeof(float));
    ck_assert_ptr_nonnull(f0);
    sel_res res;
    sel_run(&d, &x.q, &x.k, &x.v, T, 1, f0, 0, &res);
    tu_qkv_assert_unchanged(&x);
    sel_ref ref;
    sel_ref_compute(&d, &x.q, &x.k, &x.v, f0, &ref);
    /* an infinite selection (F = +inf for a later row: the reference gives the key weight 0,
     * attn.h's policy NaN) is stated apart by selective_infinite_selection_is_nan; an infinite k
     * selects +inf for some queries and NaN (-inf scores) for others, so look at F row by row */
    int inf_f = 0;
    for (size_t j = 0; j < c->n_kv; ++j) inf_f |= ref.f[j] == INFINITY;
    for (size_t e = 0; e < c->n_q * c->n_kv; ++e) inf_f |= ref.F[e] == INFINITY;
    if (inf_f) {
      sel_ref_free(&ref);
      sel_res_free(&res);
      free(f0);
      tu_qkv_free(&x);
      continue;
    }
    snprintf(what, sizeof what, "%s: %s", c->name, poison);
    sel_compare(what, c->n_kv, c->d, &res.o, &res.lse, ref.o, ref.lse, sel_scales_at(&ref, 0, c->h_q, c->d), 1.0);
    sel_compare_f(what, c->n_kv, c->d, res.f, c->n_kv, ref.f, ref.f, ref.fg, 1.0);
    sel_ref_free(&ref);
    sel_res_free(&res);
    free(f0);
    tu_qkv_free(&x);
  }
}
END_TEST

/* An infinite score of head h_sel: q_10 of h_sel is +inf (loop 0) or -inf (loop 1) and every key
 * of its key head positive, so the scores s_10,j are +inf or -inf for 0 < j < 10. attn.h's policy:
 * a non-finite score of h_sel reaches F (+inf: S = +inf, F = +inf; -inf, an infinite input like
 * any other, not relu's limit 0: S = NaN, F = NaN; f[1..9] as the reference), and a row whose
 * logit meets a non-finite F is NaN (as for any non-finite input it sees; the definition's limit
 * would give those keys weight 0). So: rows before 10 equal the reference, row 10 is NaN in head
 * h_sel only (its own q), and every head of every later row is NaN (each sees keys 1..9). */
START_TEST(selective_infinite_selection_is_nan) {
  enum { N = 40, HQ = 2, HKV = 2, DD = 8, HS = 1, PQ = 10 };
  tu_rng rng;
  tu_rng_seed(&rng, 9100);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_POSITIVE, &rng, N, N, HQ, HKV, HKV, DD, DD);
  for (size_t e = 0; e < DD; ++e) *tu_at(&x.q, PQ, HS, e) = _i ? -INFINITY : INFINITY;
  tu_qkv_snapshot(&x);
  attn_selective_desc d;
  sel_desc(&d, N, N, HQ, HKV, DD, DD, HS);
  sel_res res;
  sel_run(&d, &x.q, &x.k, &x.v, T, 1, NULL, 0, &res);
  sel_ref ref;
  sel_ref_compute(&d, &x.q, &x.k, &x.v, NULL, &ref);
  for (size_t j = 1; j < PQ; ++j) ck_assert(_i ? isnan(ref.f[j]) : ref.f[j] == INFINITY);
  sel_compare_f("f after an infinite selection", N, DD, res.f, N, ref.f, ref.f, ref.fg, 1.0);
  const tu_tensor before = tu_rows_view(&res.o, 0, PQ), lb = tu_rows_view(&res.lse, 0, PQ);
  sel_compare("rows before the infinite selection", N, DD, &before, &lb, ref.o, ref.lse, sel_scales_at(&ref, 0, HQ, DD),
              1.0);
  for (size_t i = PQ; i < N; ++i)
    for (size_t h = 0; h < HQ; ++h)
      for (size_t c = 0; c < DD; ++c) {
        const float got = *tu_at(&res.o, i, h, c);
        if (i == PQ && h != HS) continue; /* row 10's other head: finite, F before it is finite */
        ck_assert_msg(isnan(got), "row %zu head %zu col %zu: %g, want NaN", i, h, c, (double)got);
      }
  for (size_t h = 0; h < HQ; ++h)
    for (size_t c = 0; h != HS && c < DD; ++c) ck_assert(isfinite(*tu_at(&res.o, PQ, h, c)));
  sel_ref_free(&ref);
  sel_res_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* 0.6.0's audit case, in one prefill call and in five decode calls carrying f: 5 tokens, d = 1,
 * every k 1, q = {1, 1, 1, x, 1}. x = +inf, NaN and -inf all make row 3 (its own q) and row 4 (F
 * of keys 1 and 2 non-finite) NaN; rows 0-2 stay finite. Before 0.6.1 x = -inf selected nothing
 * (relu's limit), and row 4 was finite. */
START_TEST(selective_neg_inf_selection_reaches_f) {
  enum { N = 5 };
  static const float xs[3] = {INFINITY, NAN, -INFINITY};
  for (int xi = 0; xi < 3; ++xi)
    for (int decode = 0; decode < 2; ++decode) {
      float q[N] = {1, 1, 1, xs[xi], 1}, k[N] = {1, 1, 1, 1, 1}, v[N] = {0.5f, -1, 2, 3, -4}, o[N], lse[N], f[N] = {0};
      for (size_t i = decode ? 0 : N - 1; i < N; ++i) {
        attn_selective_desc d;
        const size_t nq = decode ? 1 : N, nkv = decode ? i + 1 : N;
        sel_desc(&d, nq, nkv, 1, 1, 1, 1, 0);
        size_t ws;
        ck_assert_int_eq(attn_selective_workspace_size(&d, &ws), ATTN_OK);
        void *w = malloc(ws);
        ck_assert_int_eq(attn_selective(&d, decode ? q + i : q, k, v, decode ? o + i : o, decode ? lse + i : lse, f, w, ws),
                         ATTN_OK);
        free(w);
      }
      for (size_t i = 0; i < N; ++i)
        ck_assert_msg(isnan(o[i]) == (i >= 3), "x %g, %s: row %zu o %g", (double)xs[xi], decode ? "decode" : "prefill", i,
                      (double)o[i]);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties of F (through f), the selection's heads, pieces vs one call                       */
/* ------------------------------------------------------------------------------------------ */
/* The reference's own F has the structure of the definition (F_p0 = 0, F_pp = 0, F_p,p-1 = 0,
 * columns non-decreasing), and the library's decode calls, carrying f, show it where f can:
 * before the call at p, f[p-1] is exactly 0 (F_p,p-1); after it f[0] and f[p] are exactly 0 and
 * no column decreased; every output row matches the reference of the whole sequence, and the
 * final f its column sums. */
START_TEST(selective_f_structure_through_decode) {
  enum { N = 60, HQ = 4, HKV = 2, DD = 16, HS = 2 };
  tu_rng rng;
  tu_rng_seed(&rng, 2100);
  tu_qkv x;
  attn_selective_desc dfull;
  sel_inputs(&x, &dfull, &rng, TU_DATA_UNIFORM, N, HQ, HKV, DD, DD, HS);
  sel_ref ref;
  sel_ref_compute(&dfull, &x.q, &x.k, &x.v, NULL, &ref);
  for (size_t i = 0; i < N; ++i) {
    ck_assert(ref.F[i * N + 0] == 0.0 && ref.F[i * N + i] == 0.0);
    if (i > 0) ck_assert(ref.F[i * N + i - 1] == 0.0);
    for (size_t j = 0; i > 0 && j < N; ++j) ck_assert(ref.F[i * N + j] >= ref.F[(i - 1) * N + j] || j > i);
  }
  float *f = malloc(sizeof(float) * N);
  ck_assert_ptr_nonnull(f);
  for (size_t t = 0; t < N; ++t) {
    if (t > 0) ck_assert_msg(f[t - 1] == 0.0f, "before step %zu: f[%zu] = %g", t, t - 1, (double)f[t - 1]);
    attn_selective_desc d;
    sel_desc(&d, 1, t + 1, HQ, HKV, DD, DD, HS);
    const tu_tensor q = tu_rows_view(&x.q, t, 1), k = tu_rows_view(&x.k, 0, t + 1), v = tu_rows_view(&x.v, 0, t + 1);
    sel_res res;
    sel_run(&d, &q, &k, &v, T, 1, f, 4, &res);
    char what[64];
    snprintf(what, sizeof what, "decode step %zu vs reference row", t);
    sel_compare(what, N, DD, &res.o, &res.lse, ref.o + t * HQ * DD, ref.lse + t * HQ, sel_scales_at(&ref, t, HQ, DD),
                1.0);
    ck_assert_msg(res.f[0] == 0.0f && res.f[t] == 0.0f, "step %zu: f[0] = %g, f[%zu] = %g", t, (double)res.f[0], t,
                  (double)res.f[t]);
    for (size_t j = 0; j < t; ++j)
      ck_assert_msg(res.f[j] >= f[j], "step %zu: column %zu decreased from %.9g to %.9g", t, j, (double)f[j],
                    (double)res.f[j]);
    memcpy(f, res.f, sizeof(float) * (t + 1));
    sel_res_free(&res);
  }
  sel_compare_f("f after decode", N, DD, f, N, ref.f, ref.f, ref.fg, 1.0);
  tu_qkv_assert_unchanged(&x);
  free(f);
  sel_ref_free(&ref);
  tu_qkv_free(&x);
}
END_TEST

/* The selection is one query's business: a new q_p of head h_sel changes no row <= p of any other
 * head and no row < p of h_sel (bit for bit: F_pj sums queries before p only), nor f of keys >= p;
 * with scores that select (positive data) it changes some later row of another head. */
typedef struct iso_case {
  size_t n, h_q, h_kv, d, h_sel, p;
} iso_case;
static const iso_case iso_cases[] = {
    {.n = 70, .h_q = 4, .h_kv = 2, .d = 16, .h_sel = 1, .p = 30},
    {.n = 70, .h_q = 4, .h_kv = 2, .d = 16, .h_sel = 2, .p = 47},
    {.n = 100, .h_q = 2, .h_kv = 1, .d = 8, .h_sel = 0, .p = 48},
    {.n = 100, .h_q = 3, .h_kv = 3, .d = 9, .h_sel = 2, .p = 96},
    {.n = 50, .h_q = 2, .h_kv = 2, .d = 8, .h_sel = 1, .p = 1},
    {.n = 50, .h_q = 2, .h_kv = 1, .d = 8, .h_sel = 0, .p = 0},
    {.n = 50, .h_q = 2, .h_kv = 1, .d = 8, .h_sel = 1, .p = 49},
};
#define ISO_NCASES (sizeof iso_cases / sizeof iso_cases[0])

START_TEST(selective_selecting_query_isolation) {
  const iso_case *c = &iso_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 2200 + (uint64_t)_i);
  tu_qkv x;
  attn_selective_desc d;
  sel_inputs(&x, &d, &rng, TU_DATA_POSITIVE, c->n, c->h_q, c->h_kv, c->d, c->d, c->h_sel);
  sel_res a, b;
  sel_run(&d, &x.q, &x.k, &x.v, T, 1, NULL, 0, &a);
  for (size_t e = 0; e < c->d; ++e) *tu_at(&x.q, c->p, c->h_sel, e) = 1.0f + tu_rng_range(&rng, 0.0f, 1.0f);
  tu_qkv_snapshot(&x);
  sel_run(&d, &x.q, &x.k, &x.v, T, 1, NULL, 0, &b);
  int later_changed = 0;
  for (size_t i = 0; i < c->n; ++i)
    for (size_t h = 0; h < c->h_q; ++h) {
      const int same_o = !memcmp(tu_at(&a.o, i, h, 0), tu_at(&b.o, i, h, 0), sizeof(float) * c->d);
      const int same_l = !memcmp(tu_at(&a.lse, i, h, 0), tu_at(&b.lse, i, h, 0), sizeof(float));
      if (i < c->p || (i == c->p && h != c->h_sel))
        ck_assert_msg(same_o && same_l, "row %zu head %zu changed by q of head %zu at %zu", i, h, c->h_sel, c->p);
      else if (i > c->p && h != c->h_sel && !(same_o && same_l))
        later_changed = 1;
    }
  for (size_t j = c->p; j < c->n; ++j)
    ck_assert_msg(!memcmp(&a.f[j], &b.f[j], sizeof(float)), "f[%zu] changed: %.9g -> %.9g", j, (double)a.f[j],
                  (double)b.f[j]);
  /* a later row of another head sees keys 1 .. p-1 with the new F (none when p < 2 or p is last) */
  if (c->p >= 2 && c->p + 1 < c->n)
    ck_assert_msg(later_changed, "no row after %zu of another head changed: the selection does not reach them", c->p);
  sel_ref ref;
  sel_ref_compute(&d, &x.q, &x.k, &x.v, NULL, &ref);
  sel_compare("after the new selecting query", c->n, c->d, &b.o, &b.lse, ref.o, ref.lse,
              sel_scales_at(&ref, 0, c->h_q, c->d), 1.0);
  sel_compare_f("after the new selecting query", c->n, c->d, b.f, c->n, ref.f, ref.f, ref.fg, 1.0);
  sel_ref_free(&ref);
  sel_res_free(&a);
  sel_res_free(&b);
  tu_qkv_free(&x);
}
END_TEST

/* A prefill of 37 tokens, a chunk of 20 (n_q < n_kv, the state carried in f) and 10 decode steps
 * equal one 67-token call: every row within twice the bound, f too; and each piece matches the
 * reference of the whole sequence. */
typedef struct pieces_case {
  size_t h_q, h_kv, d, dv, h_sel;
  tu_data data;
} pieces_case;
static const pieces_case pieces_cases[] = {
    {.h_q = 4, .h_kv = 2, .d = 16, .dv = 16, .h_sel = 3},
    {.h_q = 1, .h_kv = 1, .d = 64, .dv = 64, .h_sel = 0},
    {.h_q = 6, .h_kv = 1, .d = 8, .dv = 12, .h_sel = 2},
    {.h_q = 2, .h_kv = 1, .d = 16, .dv = 16, .h_sel = 1, .data = POS},
};
#define PIECES_NCASES (sizeof pieces_cases / sizeof pieces_cases[0])

START_TEST(selective_pieces_match_one_call) {
  enum { N = 67, A = 37, B = 20 };
  const pieces_case *c = &pieces_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 2300 + (uint64_t)_i);
  tu_qkv x;
  attn_selective_desc dw;
  sel_inputs(&x, &dw, &rng, c->data, N, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  sel_res whole;
  sel_run(&dw, &x.q, &x.k, &x.v, T, 1, NULL, 0, &whole);
  sel_ref ref;
  sel_ref_compute(&dw, &x.q, &x.k, &x.v, NULL, &ref);
  sel_compare("one call", N, c->d, &whole.o, &whole.lse, ref.o, ref.lse, sel_scales_at(&ref, 0, c->h_q, c->dv), 1.0);
  double *wo = tensor_double(&whole.o), *wl = tensor_double(&whole.lse);
  const size_t hd = c->h_q * c->dv;
  /* the pieces: [0, A), [A, A + B), then one token at a time */
  size_t starts[2 + N - A - B], ends[2 + N - A - B], np = 0;
  starts[np] = 0, ends[np++] = A;
  starts[np] = A, ends[np++] = A + B;
  for (size_t t = A + B; t < N; ++t) starts[np] = t, ends[np++] = t + 1;
  float *f = malloc(sizeof(float) * N);
  ck_assert_ptr_nonnull(f);
  for (size_t pc = 0; pc < np; ++pc) {
    const size_t s0 = starts[pc], nq = ends[pc] - s0, nkv = ends[pc];
    attn_selective_desc d;
    sel_desc(&d, nq, nkv, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
    const tu_tensor q = tu_rows_view(&x.q, s0, nq), k = tu_rows_view(&x.k, 0, nkv), v = tu_rows_view(&x.v, 0, nkv);
    sel_res r;
    sel_run(&d, &q, &k, &v, T, 1, f, 0, &r);
    char what[64];
    snprintf(what, sizeof what, "piece [%zu, %zu) vs one call", s0, nkv);
    const sel_scales sc = sel_scales_at(&ref, s0, c->h_q, c->dv);
    sel_compare(what, N, c->d, &r.o, &r.lse, wo + s0 * hd, wl + s0 * c->h_q, sc, TOL_PROPERTY_FACTOR);
    snprintf(what, sizeof what, "piece [%zu, %zu) vs reference", s0, nkv);
    sel_compare(what, N, c->d, &r.o, &r.lse, ref.o + s0 * hd, ref.lse + s0 * c->h_q, sc, 1.0);
    memcpy(f, r.f, sizeof(float) * nkv);
    sel_res_free(&r);
  }
  double *wf = dalloc(N);
  for (size_t j = 0; j < N; ++j) wf[j] = (double)whole.f[j];
  sel_compare_f("f of the pieces vs one call", N, c->d, f, N, wf, ref.f, ref.fg, TOL_PROPERTY_FACTOR);
  sel_compare_f("f of the pieces vs reference", N, c->d, f, N, ref.f, ref.f, ref.fg, 1.0);
  tu_qkv_assert_unchanged(&x);
  free(wf);
  free(f);
  free(wo);
  free(wl);
  sel_ref_free(&ref);
  sel_res_free(&whole);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The selective cache                                                                         */
/* ------------------------------------------------------------------------------------------ */
typedef struct sc_fix {
  attn_selcache c;
  void *mem;
  size_t bytes;
} sc_fix;

static size_t sc_token_bytes(size_t h_kv, size_t d, size_t dv) {
  return (h_kv * (d + dv) + 1) * sizeof(float) + sizeof(uint64_t);
}

static void sc_fix_init(sc_fix *s, size_t cap, size_t h_kv, size_t d, size_t dv, float tau, size_t budget,
                        size_t misalign) {
  ck_assert_int_eq(attn_selcache_size(cap, h_kv, d, dv, &s->bytes), ATTN_OK);
  ck_assert_uint_ge(s->bytes, cap * sc_token_bytes(h_kv, d, dv));
  s->mem = tu_alloc(s->bytes, misalign);
  memset(&s->c, 0xA5, sizeof s->c);
  ck_assert_int_eq(attn_selcache_init(&s->c, cap, h_kv, d, dv, tau, budget, s->mem, s->bytes), ATTN_OK);
  ck_assert(s->c.capacity == cap && s->c.h_kv == h_kv && s->c.d == d && s->c.dv == dv && s->c.budget == budget);
  ck_assert(s->c.tau == tau || (isnan(s->c.tau) && isnan(tau)));
  ck_assert(s->c.live == 0 && s->c.tokens == 0 && s->c.evicted == 0 && s->c.memory == s->mem);
}

static void sc_fix_free(sc_fix *s) {
  tu_assert_guards("cache memory", s->mem);
  tu_free(s->mem);
}

/* One step with token t of x (its q, k, v rows) into o and lse (1 x h_q); desc1 gives the sizes
 * (n_q = n_kv = 1) and h_sel. */
static attn_status sc_step_token(const attn_selective_desc *desc1, attn_selcache *c, const tu_qkv *x, size_t t,
                                 tu_tensor *o, tu_tensor *lse, size_t misalign) {
  attn_selective_desc dd = *desc1;
  const tu_tensor q = tu_rows_view(&x->q, t, 1), k = tu_rows_view(&x->k, t, 1), v = tu_rows_view(&x->v, t, 1);
  tu_shape_layouts(&dd.shape, &q, &k, &v, o);
  dd.lse = lse->l;
  size_t ws = 0;
  ck_assert_int_eq(attn_selcache_workspace_size(&dd, c, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  const attn_status st = attn_selcache_step(&dd, c, q.data, k.data, v.data, o->data, lse->data, w, ws);
  tu_assert_guards("cache step workspace", w);
  tu_free(w);
  return st;
}

/* Prefill [0, n) with attn_selective, then attn_selcache_load of its keys, values and f. */
static void sc_prefill_load(sc_fix *s, const tu_qkv *x, size_t n, size_t h_q, size_t h_kv, size_t d, size_t dv,
                            size_t h_sel, float *f_out) {
  attn_selective_desc dp;
  sel_desc(&dp, n, n, h_q, h_kv, d, dv, h_sel);
  const tu_tensor q = tu_rows_view(&x->q, 0, n), k = tu_rows_view(&x->k, 0, n), v = tu_rows_view(&x->v, 0, n);
  sel_res r;
  sel_run(&dp, &q, &k, &v, T, 1, NULL, 0, &r);
  memcpy(f_out, r.f, sizeof(float) * n);
  tu_shape_layouts(&dp.shape, &q, &k, &v, &r.o);
  ck_assert_int_eq(attn_selcache_load(&s->c, &dp, k.data, v.data, r.f), ATTN_OK);
  sel_res_free(&r);
}

static void sc_check_report(const sc_fix *s, size_t live, size_t tokens, size_t evicted) {
  ck_assert_msg(s->c.live == live && s->c.tokens == tokens && s->c.evicted == evicted,
                "cache report live %zu tokens %zu evicted %zu, expected %zu %zu %zu", s->c.live, s->c.tokens,
                s->c.evicted, live, tokens, evicted);
  size_t lb = 0;
  ck_assert_int_eq(attn_selcache_live_bytes(&s->c, &lb), ATTN_OK);
  ck_assert_uint_eq(lb, live * sc_token_bytes(s->c.h_kv, s->c.d, s->c.dv));
}

/* No pruning (tau = +inf; no budget, or one no smaller than the tokens): every step equals
 * attn_selective's decode call over the same keys with the same carried f, bit for bit (the cache
 * holds the tokens in order, in the layout of a token-major tensor); and the reference rows of the
 * whole sequence within the bound. prefill 0: the cache is built by steps from BOS on. */
typedef struct unp_case {
  size_t h_q, h_kv, d, dv, h_sel, prefill, n, budget;
} unp_case;
static const unp_case unp_cases[] = {
    {.h_q = 4, .h_kv = 2, .d = 16, .dv = 16, .h_sel = 3, .prefill = 37, .n = 67},
    {.h_q = 2, .h_kv = 1, .d = 8, .dv = 12, .h_sel = 0, .prefill = 0, .n = 50},
    {.h_q = 1, .h_kv = 1, .d = 64, .dv = 64, .h_sel = 0, .prefill = 49, .n = 100, .budget = 100},
    {.h_q = 3, .h_kv = 3, .d = 9, .dv = 9, .h_sel = 1, .prefill = 1, .n = 40, .budget = 40},
};
#define UNP_NCASES (sizeof unp_cases / sizeof unp_cases[0])

START_TEST(selcache_unpruned_equals_selective) {
  const unp_case *c = &unp_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 3000 + (uint64_t)_i);
  tu_qkv x;
  attn_selective_desc dfull;
  sel_inputs(&x, &dfull, &rng, TU_DATA_UNIFORM, c->n, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  sel_ref ref;
  sel_ref_compute(&dfull, &x.q, &x.k, &x.v, NULL, &ref);
  sc_fix s;
  sc_fix_init(&s, c->n + 1, c->h_kv, c->d, c->dv, INFINITY, c->budget, 4);
  float *f = malloc(sizeof(float) * c->n);
  ck_assert_ptr_nonnull(f);
  if (c->prefill) sc_prefill_load(&s, &x, c->prefill, c->h_q, c->h_kv, c->d, c->dv, c->h_sel, f);
  sc_check_report(&s, c->prefill, c->prefill, 0);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  for (size_t t = c->prefill; t < c->n; ++t) {
    tu_tensor o, lse;
    tu_tensor_alloc(&o, T, 1, c->h_q, c->dv, 1);
    tu_tensor_alloc(&lse, T, 1, c->h_q, 1, 1);
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 12), ATTN_OK);
    tu_assert_output_clean("cache step o", &o);
    tu_assert_output_clean("cache step lse", &lse);
    sc_check_report(&s, t + 1, t + 1, 0);
    /* the same step through attn_selective */
    attn_selective_desc d;
    sel_desc(&d, 1, t + 1, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
    const tu_tensor q = tu_rows_view(&x.q, t, 1), k = tu_rows_view(&x.k, 0, t + 1), v = tu_rows_view(&x.v, 0, t + 1);
    sel_res r;
    sel_run(&d, &q, &k, &v, T, 1, f, 0, &r);
    ck_assert_msg(!memcmp(o.data, r.o.data, sizeof(float) * c->h_q * c->dv) &&
                      !memcmp(lse.data, r.lse.data, sizeof(float) * c->h_q),
                  "step %zu: the cache's output differs from attn_selective's (o[0] %.9g vs %.9g)", t,
                  (double)o.data[0], (double)r.o.data[0]);
    char what[64];
    snprintf(what, sizeof what, "cache step %zu vs reference", t);
    sel_compare(what, c->n, c->d, &o, &lse, ref.o + t * c->h_q * c->dv, ref.lse + t * c->h_q,
                sel_scales_at(&ref, t, c->h_q, c->dv), 1.0);
    memcpy(f, r.f, sizeof(float) * (t + 1));
    sel_res_free(&r);
    tu_tensor_free(&o);
    tu_tensor_free(&lse);
  }
  tu_qkv_assert_unchanged(&x);
  free(f);
  sc_fix_free(&s);
  sel_ref_free(&ref);
  tu_qkv_free(&x);
}
END_TEST

/* attn_selcache_load into a partly filled cache (attn.h: "an empty or partly filled cache"): a
 * prefill of 37 tokens loaded, then a chunk of 20 (attn_selective with the carried f, n_q < n_kv)
 * loaded with its tokens' f, then decode steps, without pruning, must give the rows of the whole
 * sequence (the reference) as the documented "pruning changes nothing" promises: the cached
 * tokens' F must include the chunk's selections too. */
START_TEST(selcache_load_in_two_pieces) {
  enum { HQ = 4, HKV = 2, DD = 16, HS = 3, N = 67, A = 37, B = 20 };
  tu_rng rng;
  tu_rng_seed(&rng, 3050);
  tu_qkv x;
  attn_selective_desc dfull;
  sel_inputs(&x, &dfull, &rng, TU_DATA_UNIFORM, N, HQ, HKV, DD, DD, HS);
  sel_ref ref;
  sel_ref_compute(&dfull, &x.q, &x.k, &x.v, NULL, &ref);
  sc_fix s;
  sc_fix_init(&s, N + 1, HKV, DD, DD, INFINITY, 0, 0);
  float f[N];
  sc_prefill_load(&s, &x, A, HQ, HKV, DD, DD, HS, f);
  attn_selective_desc dc;
  sel_desc(&dc, B, A + B, HQ, HKV, DD, DD, HS);
  const tu_tensor qc = tu_rows_view(&x.q, A, B), kc = tu_rows_view(&x.k, 0, A + B), vc = tu_rows_view(&x.v, 0, A + B);
  sel_res r;
  sel_run(&dc, &qc, &kc, &vc, T, 1, f, 0, &r);
  attn_selective_desc dl;
  sel_desc(&dl, B, B, HQ, HKV, DD, DD, HS);
  ck_assert_int_eq(attn_selcache_load(&s.c, &dl, tu_at(&x.k, A, 0, 0), tu_at(&x.v, A, 0, 0), r.f),
                   ATTN_OK); /* F of all A + B positions */
  sel_res_free(&r);
  sc_check_report(&s, A + B, A + B, 0);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, HQ, HKV, DD, DD, HS);
  for (size_t t = A + B; t < N; ++t) {
    tu_tensor o, lse;
    tu_tensor_alloc(&o, T, 1, HQ, DD, 1);
    tu_tensor_alloc(&lse, T, 1, HQ, 1, 1);
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 0), ATTN_OK);
    char what[64];
    snprintf(what, sizeof what, "step %zu after two loads vs reference", t);
    sel_compare(what, N, DD, &o, &lse, ref.o + t * HQ * DD, ref.lse + t * HQ, sel_scales_at(&ref, t, HQ, DD), 1.0);
    tu_tensor_free(&o);
    tu_tensor_free(&lse);
  }
  sc_fix_free(&s);
  sel_ref_free(&ref);
  tu_qkv_free(&x);
}
END_TEST

/* A float64 simulation of the policy: the live positions, their F and the magnitudes G behind it. */
typedef struct sim {
  size_t n, evicted, d;
  size_t *pos;
  double *F, *G;
} sim;

static void sim_init(sim *s, size_t cap, size_t d) {
  memset(s, 0, sizeof *s);
  s->pos = malloc(sizeof(size_t) * (cap + 1));
  s->F = dalloc(cap + 1);
  s->G = dalloc(cap + 1);
  s->d = d;
  ck_assert_ptr_nonnull(s->pos);
}

static void sim_free(sim *s) {
  free(s->pos);
  free(s->F);
  free(s->G);
}

static void sim_add(sim *s, size_t pos, double F, double G) {
  s->pos[s->n] = pos;
  s->F[s->n] = F;
  s->G[s->n] = G;
  s->n++;
}

static void sim_remove(sim *s, size_t i) {
  s->n--;
  s->pos[i] = s->pos[s->n];
  s->F[i] = s->F[s->n];
  s->G[i] = s->G[s->n];
  s->evicted++;
}

/* How far the library's float F of live entry i may be from the simulation's (generously: 16 times
 * the bound of a returned column sum). Decisions closer than this are ambiguous: the test data
 * must avoid them (exact ties are fine: both sides see F = 0 exactly). */
static double sim_margin(const sim *s, size_t i, size_t tokens) {
  return 16.0 * tol_selective_f(tokens, s->d, s->F[i], s->G[i]);
}

/* Step (3) of the policy: F >= tau, then the budget (largest F, ties: the oldest), BOS and the
 * newest exempt. */
static void sim_evict(sim *s, float tau, size_t budget, size_t newest, size_t tokens) {
  for (size_t i = 0; i < s->n;) {
    const size_t p = s->pos[i];
    if (p == 0 || p == newest) {
      ++i;
      continue;
    }
    ck_assert_msg(
        s->F[i] == (double)tau || fabs(s->F[i] - (double)tau) > sim_margin(s, i, tokens) || isinf((double)tau),
        "ambiguous test data: F %.9g of position %zu is within rounding of tau %g", s->F[i], p, (double)tau);
    if (s->F[i] >= (double)tau)
      sim_remove(s, i);
    else
      ++i;
  }
  while (budget && s->n > budget) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < s->n; ++i) {
      const size_t p = s->pos[i];
      if (p == 0 || p == newest) continue;
      if (best == SIZE_MAX || s->F[i] > s->F[best] || (s->F[i] == s->F[best] && p < s->pos[best])) best = i;
    }
    ck_assert_uint_ne(best, SIZE_MAX);
    for (size_t i = 0; i < s->n; ++i) {
      if (i == best || s->pos[i] == 0 || s->pos[i] == newest || s->F[i] == s->F[best]) continue;
      ck_assert_msg(fabs(s->F[i] - s->F[best]) > sim_margin(s, i, tokens) + sim_margin(s, best, tokens),
                    "ambiguous test data: F %.9g (position %zu) and %.9g (position %zu) within rounding", s->F[i],
                    s->pos[i], s->F[best], s->pos[best]);
    }
    sim_remove(s, best);
  }
  /* the simulation's own invariants */
  int bos = 0, newest_live = 0;
  for (size_t i = 0; i < s->n; ++i) {
    bos |= s->pos[i] == 0;
    newest_live |= s->pos[i] == newest;
  }
  ck_assert(bos && newest_live);
  if (budget) ck_assert_uint_le(s->n, budget);
}

/* Ties: the selecting head's queries are >= 0, and the keys of its key head are <= 0 at positions
 * 1 mod 3 (their scores are <= 0: S = 0 exactly, their F stays exactly 0, a tie the budget breaks
 * by age) and >= 0 elsewhere (selected at every step: F grows by about the same amount per step). */
static void sel_make_ties(tu_qkv *x, size_t h_sel, size_t group) {
  const size_t hk = h_sel / group;
  for (size_t t = 0; t < x->q.n; ++t)
    for (size_t e = 0; e < x->q.w; ++e) *tu_at(&x->q, t, h_sel, e) = fabsf(*tu_at(&x->q, t, h_sel, e));
  for (size_t t = 0; t < x->k.n; ++t)
    for (size_t e = 0; e < x->k.w; ++e) {
      const float a = fabsf(*tu_at(&x->k, t, hk, e));
      *tu_at(&x->k, t, hk, e) = t % 3 == 1 ? -a : a;
    }
  tu_qkv_snapshot(x);
}

typedef struct pol_case {
  const char *name;
  size_t h_q, h_kv, d, dv, h_sel;
  size_t prefill, n, capacity, budget;
  float tau;
  int ties;
} pol_case;
static const pol_case pol_cases[] = {
    {"ties_budget6", 2, 1, 16, 16, 0, 9, 50, 10, 6, INFINITY, 1},
    {"ties_budget2", 2, 1, 8, 8, 1, 5, 35, 12, 2, INFINITY, 1},
    {"ties_gqa_budget17", 4, 2, 8, 12, 3, 40, 90, 48, 17, INFINITY, 1},
    {"ties_budget4_no_prefill", 2, 2, 16, 16, 1, 0, 40, 6, 4, INFINITY, 1},
    {"random_budget5", 2, 2, 16, 16, 1, 20, 60, 24, 5, INFINITY, 0},
    {"random_budget_load_evicts", 3, 1, 8, 8, 2, 30, 50, 31, 12, INFINITY, 0},
    {"ties_tau2", 2, 1, 16, 16, 0, 20, 60, 64, 0, 2.0f, 1},
    {"random_tau0.5", 2, 1, 16, 16, 1, 30, 60, 70, 0, 0.5f, 0},
    {"random_tau3_budget8", 3, 1, 8, 8, 2, 10, 50, 12, 8, 3.0f, 0},
    {"ties_tau0", 2, 1, 8, 8, 0, 6, 26, 8, 0, 0.0f, 1},
    {"ties_tau_-inf", 2, 1, 8, 8, 1, 6, 26, 8, 0, -INFINITY, 1},
};
#define POL_NCASES (sizeof pol_cases / sizeof pol_cases[0])

/* Pruned decode against the simulation: after a load (the prefill's f) and after every step, the
 * report (live, tokens, evicted, live bytes) equals the simulation's, the live set stays within the
 * budget with BOS and the newest token, and every step's output equals the reference over the
 * simulated live set with the simulated F (an evicted token that came back, the wrong token evicted
 * or a wrong tie-break change the output far beyond the bound). */
START_TEST(selcache_policy_matches_simulation) {
  const pol_case *c = &pol_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 3100 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, c->n, c->n, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  if (c->ties) sel_make_ties(&x, c->h_sel, c->h_q / c->h_kv);
  sc_fix s;
  sc_fix_init(&s, c->capacity, c->h_kv, c->d, c->dv, c->tau, c->budget, 4);
  sim sm;
  sim_init(&sm, c->capacity, c->d);
  if (c->prefill) {
    float *f = malloc(sizeof(float) * c->prefill);
    ck_assert_ptr_nonnull(f);
    sc_prefill_load(&s, &x, c->prefill, c->h_q, c->h_kv, c->d, c->dv, c->h_sel, f);
    attn_selective_desc dp;
    sel_desc(&dp, c->prefill, c->prefill, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
    const tu_tensor q = tu_rows_view(&x.q, 0, c->prefill), k = tu_rows_view(&x.k, 0, c->prefill),
                    v = tu_rows_view(&x.v, 0, c->prefill);
    sel_ref pre;
    sel_ref_compute(&dp, &q, &k, &v, NULL, &pre);
    for (size_t j = 0; j < c->prefill; ++j) sim_add(&sm, j, (double)f[j], pre.fg[j]);
    sel_ref_free(&pre);
    free(f);
    sim_evict(&sm, c->tau, c->budget, c->prefill - 1, c->prefill);
    sc_check_report(&s, sm.n, c->prefill, sm.evicted);
  }
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  const float **kp = malloc(sizeof(float *) * (c->capacity + 1)), **vp = malloc(sizeof(float *) * (c->capacity + 1));
  ck_assert(kp && vp);
  const size_t hd = c->h_q * c->dv;
  double *eo = dalloc(hd), *el = dalloc(c->h_q), *os = dalloc(hd), *oa = dalloc(hd), *of = dalloc(hd);
  double *sa = dalloc(c->h_q), *la = dalloc(c->h_q), *lf = dalloc(c->h_q), *srow = dalloc(c->capacity + 1),
         *grow = dalloc(c->capacity + 1);
  for (size_t t = c->prefill; t < c->n; ++t) {
    tu_tensor o, lse;
    tu_tensor_alloc(&o, T, 1, c->h_q, c->dv, 1);
    tu_tensor_alloc(&lse, T, 1, c->h_q, 1, 1);
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, t % 8), ATTN_OK);
    tu_assert_output_clean("cache step o", &o);
    /* (1) the new token with F = 0, attention over the live set */
    sim_add(&sm, t, 0.0, 0.0);
    for (size_t i = 0; i < sm.n; ++i) {
      kp[i] = tu_at(&x.k, sm.pos[i], 0, 0);
      vp[i] = tu_at(&x.v, sm.pos[i], 0, 0);
    }
    const ref_selective_live lp = {.n = sm.n,
                                   .h_q = c->h_q,
                                   .h_kv = c->h_kv,
                                   .d = c->d,
                                   .dv = c->dv,
                                   .scale = (double)d1.scale,
                                   .h_sel = c->h_sel,
                                   .q = tu_at(&x.q, t, 0, 0),
                                   .q_head_stride = x.q.l.head_stride,
                                   .k = kp,
                                   .v = vp,
                                   .k_head_stride = x.k.l.head_stride,
                                   .v_head_stride = x.v.l.head_stride,
                                   .F = sm.F,
                                   .G = sm.G};
    const ref_selective_out out = {eo, el, os, oa, of, sa, la, lf, srow, grow, NULL};
    ref_selective_live_attend(&lp, &out);
    char what[96];
    snprintf(what, sizeof what, "%s: step %zu over %zu live tokens", c->name, t, sm.n);
    const sel_scales sc = {os, oa, of, sa, la, lf};
    sel_compare(what, t + 1, c->d, &o, &lse, eo, el, sc, 1.0);
    /* (2) the query's selection into F of every live token but BOS and itself */
    for (size_t i = 0; i < sm.n; ++i)
      if (sm.pos[i] != 0 && sm.pos[i] != t) {
        sm.F[i] += srow[i];
        sm.G[i] += grow[i];
      }
    /* (3) eviction */
    sim_evict(&sm, c->tau, c->budget, t, t + 1);
    sc_check_report(&s, sm.n, t + 1, sm.evicted);
    tu_tensor_free(&o);
    tu_tensor_free(&lse);
  }
  /* the cases exercise eviction */
  if (c->budget || isfinite(c->tau)) ck_assert_uint_gt(s.c.evicted, 0);
  tu_qkv_assert_unchanged(&x);
  double *all[] = {eo, el, os, oa, of, sa, la, lf, srow, grow};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
  free(kp);
  free(vp);
  sim_free(&sm);
  sc_fix_free(&s);
  tu_qkv_free(&x);
}
END_TEST

/* A NaN F ranks below every number for the budget (as it is never >= tau). Token 1's key is NaN,
 * so the first query after it gives F_1 = NaN: token 1 then stays live while tokens with a
 * number remain, and every later row, which sees it, is NaN (were it evicted, as the first slot
 * examined once was against any number, the later rows would come out finite). With every key
 * after BOS NaN, every candidate is NaN and the budget still holds (the oldest goes first). */
START_TEST(selcache_nan_f_ranks_last) {
  enum { N = 14, HQ = 2, HKV = 1, D = 8, BUDGET = 3 };
  for (int all = 0; all < 2; all++) {
    tu_rng rng;
    tu_rng_seed(&rng, 4200 + (uint64_t)all);
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, D, D);
    for (size_t t = 1; t < (all ? (size_t)N : 2); t++) *tu_at(&x.k, t, 0, 3) = NAN;
    tu_qkv_snapshot(&x);
    sc_fix s;
    sc_fix_init(&s, BUDGET + 1, HKV, D, D, INFINITY, BUDGET, 4);
    attn_selective_desc d1;
    sel_desc(&d1, 1, 1, HQ, HKV, D, D, 0);
    for (size_t t = 0; t < N; t++) {
      tu_tensor o, lse;
      tu_tensor_alloc(&o, T, 1, HQ, D, 1);
      tu_tensor_alloc(&lse, T, 1, HQ, 1, 1);
      ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 0), ATTN_OK);
      for (size_t h = 0; h < HQ; h++)
        for (size_t c = 0; c < D; c++) {
          const float got = *tu_at(&o, 0, h, c);
          ck_assert_msg(t == 0 ? isfinite(got) : isnan(got), "all %d step %zu head %zu col %zu: %g", all, t, h, c,
                        (double)got);
        }
      sc_check_report(&s, t + 1 < BUDGET ? t + 1 : BUDGET, t + 1, t + 1 > BUDGET ? t + 1 - BUDGET : 0);
      tu_tensor_free(&o);
      tu_tensor_free(&lse);
    }
    tu_qkv_assert_unchanged(&x);
    sc_fix_free(&s);
    tu_qkv_free(&x);
  }
}
END_TEST

/* attn_selcache_copy: a copy continues exactly as the original (the same outputs, bit for bit, and
 * reports); a snapshot restored into the original replays the same steps; copying a cache onto
 * itself changes nothing. */
START_TEST(selcache_copy_and_restore) {
  enum { HQ = 4, HKV = 2, DD = 8, DV = 8, HS = 1, N = 60, PRE = 12, CAP = 16, BUDGET = 7, MID = 30 };
  tu_rng rng;
  tu_rng_seed(&rng, 3200);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, DD, DV);
  sel_make_ties(&x, HS, HQ / HKV);
  sc_fix a, b, snap;
  sc_fix_init(&a, CAP, HKV, DD, DV, 4.0f, BUDGET, 0);
  sc_fix_init(&b, CAP, HKV, DD, DV, INFINITY, 0, 4); /* its own settings are overwritten by the copy */
  sc_fix_init(&snap, CAP, HKV, DD, DV, INFINITY, 0, 8);
  float f[PRE];
  sc_prefill_load(&a, &x, PRE, HQ, HKV, DD, DV, HS, f);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, HQ, HKV, DD, DV, HS);
  tu_tensor o1, l1, o2, l2;
  tu_tensor_alloc(&o1, T, 1, HQ, DV, 1);
  tu_tensor_alloc(&l1, T, 1, HQ, 1, 1);
  tu_tensor_alloc(&o2, T, 1, HQ, DV, 1);
  tu_tensor_alloc(&l2, T, 1, HQ, 1, 1);
  for (size_t t = PRE; t < MID; ++t) ck_assert_int_eq(sc_step_token(&d1, &a.c, &x, t, &o1, &l1, 0), ATTN_OK);
  ck_assert_int_eq(attn_selcache_copy(&b.c, &a.c), ATTN_OK);
  ck_assert_int_eq(attn_selcache_copy(&snap.c, &a.c), ATTN_OK);
  ck_assert(b.c.memory == b.mem && snap.c.memory == snap.mem);
  ck_assert(b.c.live == a.c.live && b.c.tokens == a.c.tokens && b.c.evicted == a.c.evicted &&
            b.c.budget == a.c.budget && b.c.tau == a.c.tau);
  /* onto itself: nothing changes */
  attn_selcache before = a.c;
  unsigned char *mem_before = malloc(a.bytes);
  ck_assert_ptr_nonnull(mem_before);
  memcpy(mem_before, a.mem, a.bytes);
  ck_assert_int_eq(attn_selcache_copy(&a.c, &a.c), ATTN_OK);
  tu_assert_same_bits("cache copied onto itself", &before, &a.c, sizeof before);
  tu_assert_same_bits("memory copied onto itself", mem_before, a.mem, a.bytes);
  free(mem_before);
  float *replay = malloc(sizeof(float) * (N - MID) * (HQ * DV + HQ));
  ck_assert_ptr_nonnull(replay);
  for (size_t t = MID; t < N; ++t) {
    ck_assert_int_eq(sc_step_token(&d1, &a.c, &x, t, &o1, &l1, 0), ATTN_OK);
    ck_assert_int_eq(sc_step_token(&d1, &b.c, &x, t, &o2, &l2, 4), ATTN_OK);
    tu_assert_same_bits("copy's o", o1.data, o2.data, sizeof(float) * HQ * DV);
    tu_assert_same_bits("copy's lse", l1.data, l2.data, sizeof(float) * HQ);
    ck_assert(b.c.live == a.c.live && b.c.tokens == a.c.tokens && b.c.evicted == a.c.evicted);
    memcpy(replay + (t - MID) * (HQ * DV + HQ), o1.data, sizeof(float) * HQ * DV);
    memcpy(replay + (t - MID) * (HQ * DV + HQ) + HQ * DV, l1.data, sizeof(float) * HQ);
  }
  ck_assert_uint_gt(a.c.evicted, 0);
  /* restore the snapshot into a and replay */
  ck_assert_int_eq(attn_selcache_copy(&a.c, &snap.c), ATTN_OK);
  ck_assert(a.c.memory == a.mem && a.c.tokens == MID);
  for (size_t t = MID; t < N; ++t) {
    ck_assert_int_eq(sc_step_token(&d1, &a.c, &x, t, &o1, &l1, 0), ATTN_OK);
    tu_assert_same_bits("replayed o", replay + (t - MID) * (HQ * DV + HQ), o1.data, sizeof(float) * HQ * DV);
    tu_assert_same_bits("replayed lse", replay + (t - MID) * (HQ * DV + HQ) + HQ * DV, l1.data, sizeof(float) * HQ);
  }
  ck_assert(a.c.live == b.c.live && a.c.tokens == b.c.tokens && a.c.evicted == b.c.evicted);
  free(replay);
  tu_tensor_free(&o1);
  tu_tensor_free(&l1);
  tu_tensor_free(&o2);
  tu_tensor_free(&l2);
  sc_fix_free(&a);
  sc_fix_free(&b);
  sc_fix_free(&snap);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* API: defaults, workspace, sizes                                                             */
/* ------------------------------------------------------------------------------------------ */
START_TEST(selective_desc_init_defaults) {
  attn_selective_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_selective_desc_init(&d, 5, 9, 6, 2, 64, 40), ATTN_OK);
  attn_shape want;
  ck_assert_int_eq(attn_shape_init(&want, 5, 9, 6, 2, 2, 64, 40), ATTN_OK);
  tu_assert_same_bits("selective shape defaults", &want, &d.shape, sizeof want);
  ck_assert(fabs((double)d.scale - 0.125) <= 0x1p-24);
  ck_assert_uint_eq(d.h_sel, 0);
  ck_assert_uint_eq(d.lse.row_stride, 6);
  ck_assert_uint_eq(d.lse.head_stride, 1);
  ck_assert_int_eq(attn_selective_desc_init(NULL, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER);
}
END_TEST

/* attn_selective's workspace does not depend on n_q or n_kv; the cache's is attn_selective's for
 * n_kv = capacity. */
START_TEST(selective_workspace_sizes) {
  static const size_t n[][2] = {{1, 1}, {7, 3}, {100, 1000}, {1000, 100}, {48, 96}};
  size_t first = 0;
  for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
    attn_selective_desc d;
    sel_desc(&d, n[i][0], n[i][1], 4, 2, 64, 32, 3);
    size_t ws = 0;
    ck_assert_int_eq(attn_selective_workspace_size(&d, &ws), ATTN_OK);
    if (i == 0) first = ws;
    ck_assert_uint_eq(ws, first);
  }
  sc_fix s;
  sc_fix_init(&s, 20, 2, 64, 32, INFINITY, 0, 0);
  attn_selective_desc d1, dc;
  sel_desc(&d1, 1, 1, 4, 2, 64, 32, 3);
  sel_desc(&dc, 1, 20, 4, 2, 64, 32, 3);
  size_t a = 0, b = 0;
  ck_assert_int_eq(attn_selcache_workspace_size(&d1, &s.c, &a), ATTN_OK);
  ck_assert_int_eq(attn_selective_workspace_size(&dc, &b), ATTN_OK);
  ck_assert_uint_eq(a, b);
  ck_assert_int_eq(attn_selective_workspace_size(&d1, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_workspace_size(NULL, &s.c, &a), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_workspace_size(&d1, NULL, &a), ATTN_E_NULL_POINTER);
  sc_fix_free(&s);
}
END_TEST

/* attn_selcache_size and init: the statuses of each argument; a failed init leaves the struct and
 * the memory untouched; budget = capacity - 1 is the largest valid one. */
START_TEST(selcache_size_and_init) {
  size_t bytes = 777;
  ck_assert_int_eq(attn_selcache_size(10, 2, 8, 4, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_size(0, 2, 8, 4, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(10, 0, 8, 4, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(10, 2, 0, 4, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(10, 2, 8, 0, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(SIZE_MAX / 4, 2, 8, 4, &bytes), ATTN_E_SIZE_OVERFLOW);
  ck_assert_int_eq(attn_selcache_size(2, SIZE_MAX / 2, 8, 4, &bytes), ATTN_E_SIZE_OVERFLOW);
  ck_assert_uint_eq(bytes, 777);
  size_t need = 0;
  ck_assert_int_eq(attn_selcache_size(10, 2, 8, 4, &need), ATTN_OK);
  ck_assert_uint_ge(need, 10 * sc_token_bytes(2, 8, 4));
  unsigned char *mem = tu_alloc(need, 0);
  memset(mem, 0x5A, need);
  static const struct {
    size_t cap, h_kv, d, dv;
    float tau;
    size_t budget;
    int short_mem, null_cache, null_mem;
    attn_status expect;
  } rows[] = {
      {0, 2, 8, 4, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 0, 8, 4, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 2, 0, 4, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 2, 8, 0, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 2, 8, 4, INFINITY, 0, 1, 0, 0, ATTN_E_WORKSPACE_TOO_SMALL},
      {10, 2, 8, 4, NAN, 0, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, INFINITY, 1, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, INFINITY, 10, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, 1.0f, 11, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {1, 2, 8, 4, INFINITY, 1, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, INFINITY, 0, 0, 1, 0, ATTN_E_NULL_POINTER},
      {10, 2, 8, 4, INFINITY, 0, 0, 0, 1, ATTN_E_NULL_POINTER},
  };
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
    attn_selcache c, pristine;
    memset(&c, 0x3C, sizeof c);
    pristine = c;
    const attn_status st = attn_selcache_init(rows[r].null_cache ? NULL : &c, rows[r].cap, rows[r].h_kv, rows[r].d,
                                              rows[r].dv, rows[r].tau, rows[r].budget, rows[r].null_mem ? NULL : mem,
                                              rows[r].short_mem ? need - 1 : need);
    ck_assert_msg(st == rows[r].expect, "init row %zu: status %d, expected %d", r, (int)st, (int)rows[r].expect);
    tu_assert_same_bits("cache struct after a rejected init", &pristine, &c, sizeof c);
    for (size_t i = 0; i < need; ++i) ck_assert_msg(mem[i] == 0x5A, "init row %zu wrote memory byte %zu", r, i);
  }
  tu_assert_guards("cache memory", mem);
  /* memory not aligned for float: refused, nothing written */
  {
    unsigned char *odd = tu_alloc(need + 1, 0);
    memset(odd, 0x5A, need + 1);
    attn_selcache c, pristine;
    memset(&c, 0x3C, sizeof c);
    pristine = c;
    ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, INFINITY, 0, odd + 1, need), ATTN_E_BAD_ARGUMENT);
    tu_assert_same_bits("cache struct after a misaligned init", &pristine, &c, sizeof c);
    for (size_t i = 0; i <= need; ++i) ck_assert(odd[i] == 0x5A);
    tu_free(odd);
  }
  /* the largest budget, -inf and 0 as tau, and a 1-slot cache without budget are valid */
  attn_selcache c;
  ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, INFINITY, 9, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, -INFINITY, 2, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, 0.0f, 0, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_init(&c, 1, 2, 8, 4, INFINITY, 0, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_live_bytes(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_live_bytes(&c, NULL), ATTN_E_NULL_POINTER);
  tu_free(mem);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input of attn_selective: each row mutates one argument of a valid chunked call (its f    */
/* holds a carried state): every shared row of bad_input.h (the lse ones included), then the    */
/* rows of h_sel and f; the call answers the row's status and writes nothing: o, lse and f keep */
/* their bytes, the inputs too.                                                                 */
/* ------------------------------------------------------------------------------------------ */
enum { BNQ = 5, BNKV = 9, BHQ = 4, BHKV = 2, BD = 8, BDV = 6, BSEL = 3 };
/* f's buffer: room for o or lse inside it */
#define BF_FLOATS ((size_t)4 * BNKV * BHQ * BDV)

typedef enum bs_kind {
  BS_F_NULL = TU_BAD_OWN,
  BS_HSEL_HQ,
  BS_HSEL_HUGE,
  BS_F_IN_Q,
  BS_F_IN_K,
  BS_F_IN_V,
  BS_F_IN_O,
  BS_F_IN_LSE,
  BS_F_IN_WS,
  BS_O_IN_F,
  BS_LSE_IN_F
} bs_kind;

#define BS(k, s, lvl) .fault = (k), .expect = (s), .desc_level = (lvl)
static const tu_bad_case bs_cases[] = {
    {.name = "f NULL", BS(BS_F_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "h_sel = h_q", BS(BS_HSEL_HQ, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_sel SIZE_MAX", BS(BS_HSEL_HUGE, ATTN_E_BAD_HEADS, 1)},
    {.name = "f inside q", BS(BS_F_IN_Q, ATTN_E_ALIASING, 0)},
    {.name = "f inside k", BS(BS_F_IN_K, ATTN_E_ALIASING, 0)},
    {.name = "f inside v", BS(BS_F_IN_V, ATTN_E_ALIASING, 0)},
    {.name = "f inside o", BS(BS_F_IN_O, ATTN_E_ALIASING, 0)},
    {.name = "f inside lse", BS(BS_F_IN_LSE, ATTN_E_ALIASING, 0)},
    {.name = "f inside workspace", BS(BS_F_IN_WS, ATTN_E_ALIASING, 0)},
    {.name = "o overlaps f", BS(BS_O_IN_F, ATTN_E_ALIASING, 0)},
    {.name = "lse inside f", BS(BS_LSE_IN_F, ATTN_E_ALIASING, 0)},
};
#define BS_NOWN (sizeof bs_cases / sizeof bs_cases[0])

/* Applies one of selective's own faults to the descriptor's h_sel or the call's pointers (*fp:
 * the call's f). A shared fault that leaves h_sel no longer below h_q gets h_sel 0, so that the
 * row tests its own fault, not h_sel. */
static void sel_bad_apply(tu_bad *b, int fault, attn_selective_desc *d, float *fbuf, float **fp) {
  switch ((bs_kind)fault) {
    case BS_F_NULL:
      *fp = NULL;
      break;
    case BS_HSEL_HQ:
      d->h_sel = BHQ;
      break;
    case BS_HSEL_HUGE:
      d->h_sel = SIZE_MAX;
      break;
    case BS_F_IN_Q:
      *fp = b->x.q.data + 3;
      break;
    case BS_F_IN_K:
      *fp = b->x.k.data + 5;
      break;
    case BS_F_IN_V:
      *fp = b->x.v.data;
      break;
    case BS_F_IN_O:
      *fp = b->o.data + 7;
      break;
    case BS_F_IN_LSE:
      *fp = b->lse.data + 2;
      break;
    case BS_F_IN_WS:
      *fp = (float *)b->ws + 4;
      b->ws_size = b->need + TU_BAD_WS_ROOM;
      break;
    case BS_O_IN_F:
      b->o_arg = fbuf + BNKV - 1; /* o's first element is f's last */
      break;
    case BS_LSE_IN_F:
      b->lse_arg = fbuf + 2;
      break;
    default: /* a shared fault (tu_bad_apply) */
      if (d->shape.h_q && d->h_sel >= d->shape.h_q) d->h_sel = 0;
      break;
  }
}

START_TEST(selective_rejects_bad_input) {
  const tu_bad_case *c = tu_bad_row((size_t)_i, 1, bs_cases);
  tu_rng rng;
  tu_rng_seed(&rng, 4000 + (uint64_t)_i);
  attn_selective_desc d;
  sel_desc(&d, BNQ, BNKV, BHQ, BHKV, BD, BDV, BSEL);
  size_t need = 0;
  ck_assert_int_eq(attn_selective_workspace_size(&d, &need), ATTN_OK);
  tu_bad b;
  tu_bad_make(&b, &rng, &d.shape, 4, 1, need);
  /* f: a carried state for the 4 earlier keys, the sentinel for the call's own; room to alias */
  float *fbuf = tu_alloc(sizeof(float) * BF_FLOATS, 0);
  tu_fill_sentinel(fbuf, BF_FLOATS);
  for (size_t j = 0; j < BNKV - BNQ; ++j) fbuf[j] = (float)j * 0.25f;
  unsigned char *f_before = malloc(sizeof(float) * BF_FLOATS);
  ck_assert_ptr_nonnull(f_before);
  memcpy(f_before, fbuf, sizeof(float) * BF_FLOATS);
  float *fp = fbuf;
  tu_bad_apply(&b, c->fault, &d.shape, &d.scale, &d.lse);
  sel_bad_apply(&b, c->fault, &d, fbuf, &fp);
  const attn_selective_desc *dp = b.desc_null ? NULL : &d;
  tu_bad_assert_status(c, "attn_selective",
                       attn_selective(dp, b.q, b.k, b.v, b.o_arg, b.lse_arg, fp, b.ws_arg, b.ws_size));
  size_t bytes = TU_BAD_UNTOUCHED;
  tu_bad_assert_query(c, "attn_selective_workspace_size", attn_selective_workspace_size(&d, &bytes), bytes);
  tu_bad_assert_untouched(&b);
  tu_assert_same_bits("f after a rejected call", f_before, fbuf, sizeof(float) * BF_FLOATS);
  tu_assert_guards("f", fbuf);
  free(f_before);
  tu_free(fbuf);
  tu_bad_free(&b);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input of the cache: step, load, copy and workspace size. Each row runs against a cache    */
/* holding a prefill and a few steps (a budget: evictions happened); the call answers the row's  */
/* status and changes nothing: o, lse, the cache's struct and its memory keep their bytes.       */
/* ------------------------------------------------------------------------------------------ */
enum { CHQ = 4, CHKV = 2, CD = 8, CDV = 6, CSEL = 1, CCAP = 12, CBUDGET = 8, CPRE = 6, CSTEPS = 10 };

typedef enum cb_kind {
  CB_STEP_DESC_NULL,
  CB_STEP_CACHE_NULL,
  CB_STEP_Q_NULL,
  CB_STEP_K_NULL,
  CB_STEP_V_NULL,
  CB_STEP_O_NULL,
  CB_STEP_WS_NULL,
  CB_STEP_NQ_2,
  CB_STEP_NKV_2,
  CB_STEP_HKV_MISMATCH,
  CB_STEP_D_MISMATCH,
  CB_STEP_DV_MISMATCH,
  CB_STEP_HSEL,
  CB_STEP_SCALE_NAN,
  CB_STEP_WS_SMALL,
  CB_STEP_FULL,
  CB_STEP_O_IN_MEMORY,
  CB_STEP_LSE_IN_MEMORY,
  CB_STEP_WS_IN_MEMORY,
  CB_STEP_O_IS_Q,
  CB_LOAD_TOO_MANY,
  CB_LOAD_MISMATCH,
  CB_LOAD_K_NULL,
  CB_LOAD_F_NULL,
  CB_LOAD_F_IN_MEMORY,
  CB_COPY_NULL,
  CB_COPY_CAPACITY,
  CB_COPY_DV,
  CB_COPY_OVERLAP,
  CB_WS_MISMATCH
} cb_kind;

typedef struct cb_case {
  const char *name;
  cb_kind kind;
  attn_status expect;
} cb_case;
static const cb_case cb_cases[] = {
    {"step: desc NULL", CB_STEP_DESC_NULL, ATTN_E_NULL_POINTER},
    {"step: cache NULL", CB_STEP_CACHE_NULL, ATTN_E_NULL_POINTER},
    {"step: q NULL", CB_STEP_Q_NULL, ATTN_E_NULL_POINTER},
    {"step: k NULL", CB_STEP_K_NULL, ATTN_E_NULL_POINTER},
    {"step: v NULL", CB_STEP_V_NULL, ATTN_E_NULL_POINTER},
    {"step: o NULL", CB_STEP_O_NULL, ATTN_E_NULL_POINTER},
    {"step: workspace NULL", CB_STEP_WS_NULL, ATTN_E_NULL_POINTER},
    {"step: n_q 2", CB_STEP_NQ_2, ATTN_E_BAD_ARGUMENT},
    {"step: n_kv 2", CB_STEP_NKV_2, ATTN_E_BAD_ARGUMENT},
    {"step: h_kv of the cache differs", CB_STEP_HKV_MISMATCH, ATTN_E_STATE_MISMATCH},
    {"step: d of the cache differs", CB_STEP_D_MISMATCH, ATTN_E_STATE_MISMATCH},
    {"step: dv of the cache differs", CB_STEP_DV_MISMATCH, ATTN_E_STATE_MISMATCH},
    {"step: h_sel = h_q", CB_STEP_HSEL, ATTN_E_BAD_HEADS},
    {"step: scale NaN", CB_STEP_SCALE_NAN, ATTN_E_BAD_SCALE},
    {"step: workspace one byte short", CB_STEP_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL},
    {"step: cache full, no budget", CB_STEP_FULL, ATTN_E_WORKSPACE_TOO_SMALL},
    {"step: o inside the cache memory", CB_STEP_O_IN_MEMORY, ATTN_E_ALIASING},
    {"step: lse inside the cache memory", CB_STEP_LSE_IN_MEMORY, ATTN_E_ALIASING},
    {"step: workspace overlaps the cache memory", CB_STEP_WS_IN_MEMORY, ATTN_E_ALIASING},
    {"step: o is q", CB_STEP_O_IS_Q, ATTN_E_ALIASING},
    {"load: more tokens than free slots", CB_LOAD_TOO_MANY, ATTN_E_WORKSPACE_TOO_SMALL},
    {"load: d of the cache differs", CB_LOAD_MISMATCH, ATTN_E_STATE_MISMATCH},
    {"load: k NULL", CB_LOAD_K_NULL, ATTN_E_NULL_POINTER},
    {"load: f NULL", CB_LOAD_F_NULL, ATTN_E_NULL_POINTER},
    {"load: f inside the cache memory", CB_LOAD_F_IN_MEMORY, ATTN_E_ALIASING},
    {"copy: src NULL", CB_COPY_NULL, ATTN_E_NULL_POINTER},
    {"copy: capacities differ", CB_COPY_CAPACITY, ATTN_E_STATE_MISMATCH},
    {"copy: dv differs", CB_COPY_DV, ATTN_E_STATE_MISMATCH},
    {"copy: memories overlap", CB_COPY_OVERLAP, ATTN_E_ALIASING},
    {"workspace size: d of the cache differs", CB_WS_MISMATCH, ATTN_E_STATE_MISMATCH},
};
#define CB_NCASES (sizeof cb_cases / sizeof cb_cases[0])

START_TEST(selcache_rejects_bad_input) {
  const cb_case *c = &cb_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 4100 + (uint64_t)_i);
  const size_t n = CPRE + CSTEPS + CCAP + 1;
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, CHQ, CHKV, CHKV, 2 * CD, 2 * CDV);
  /* views of the first CD / CDV columns: a d = CD cache; the wider rows let a mismatched desc read */
  x.q.w = x.k.w = CD;
  x.v.w = CDV;
  const int full = c->kind == CB_STEP_FULL;
  sc_fix s;
  sc_fix_init(&s, full ? CPRE : CCAP, CHKV, CD, CDV, INFINITY, full ? 0 : CBUDGET, 0);
  float f[CPRE];
  sc_prefill_load(&s, &x, CPRE, CHQ, CHKV, CD, CDV, CSEL, f);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, CHQ, CHKV, CD, CDV, CSEL);
  tu_tensor o, lse;
  tu_tensor_alloc(&o, T, 1, CHQ, CDV, 1);
  tu_tensor_alloc(&lse, T, 1, CHQ, 1, 1);
  for (size_t t = CPRE; !full && t < CPRE + CSTEPS; ++t)
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 0), ATTN_OK);
  if (!full) ck_assert_uint_gt(s.c.evicted, 0);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  tu_tensor_alloc(&o, T, 1, CHQ, CDV, 1);
  tu_tensor_alloc(&lse, T, 1, CHQ, 1, 1);
  /* the call's arguments */
  const size_t t = s.c.tokens;
  const tu_tensor qv = tu_rows_view(&x.q, t, 1), kv = tu_rows_view(&x.k, t, 1), vv = tu_rows_view(&x.v, t, 1);
  attn_selective_desc d = d1;
  tu_shape_layouts(&d.shape, &qv, &kv, &vv, &o);
  size_t need = 0;
  ck_assert_int_eq(attn_selcache_workspace_size(&d, &s.c, &need), ATTN_OK);
  void *ws = tu_alloc(need + 64, 0);
  const float *q = qv.data, *k = kv.data, *v = vv.data;
  float *op = o.data, *lp = lse.data;
  void *wp = ws;
  size_t ws_size = need;
  attn_selcache *cp = &s.c;
  const attn_selective_desc *dp = &d;
  /* a second cache (copy rows) and the state of both before the call */
  sc_fix other;
  memset(&other, 0, sizeof other);
  const attn_selcache before = s.c;
  unsigned char *mem_before = malloc(s.bytes);
  ck_assert_ptr_nonnull(mem_before);
  memcpy(mem_before, s.mem, s.bytes);
  attn_status st = ATTN_OK;
  switch (c->kind) {
    case CB_STEP_DESC_NULL:
      dp = NULL;
      break;
    case CB_STEP_CACHE_NULL:
      cp = NULL;
      break;
    case CB_STEP_Q_NULL:
      q = NULL;
      break;
    case CB_STEP_K_NULL:
      k = NULL;
      break;
    case CB_STEP_V_NULL:
      v = NULL;
      break;
    case CB_STEP_O_NULL:
      op = NULL;
      break;
    case CB_STEP_WS_NULL:
      wp = NULL;
      break;
    case CB_STEP_NQ_2:
      d.shape.n_q = 2;
      break;
    case CB_STEP_NKV_2:
      d.shape.n_kv = 2;
      break;
    case CB_STEP_HKV_MISMATCH: /* h_kv 1: the same rows read as MQA */
      d.shape.h_k = d.shape.h_v = 1;
      break;
    case CB_STEP_D_MISMATCH:
      d.shape.d = 2 * CD;
      break;
    case CB_STEP_DV_MISMATCH:
      d.shape.dv = CDV - 1;
      break;
    case CB_STEP_HSEL:
      d.h_sel = CHQ;
      break;
    case CB_STEP_SCALE_NAN:
      d.scale = NAN;
      break;
    case CB_STEP_WS_SMALL:
      ws_size = need - 1;
      break;
    case CB_STEP_FULL:
      ck_assert_uint_eq(s.c.live, s.c.capacity);
      break;
    case CB_STEP_O_IN_MEMORY:
      op = (float *)s.mem + 3;
      break;
    case CB_STEP_LSE_IN_MEMORY:
      lp = (float *)((unsigned char *)s.mem + s.bytes) - 2;
      break;
    case CB_STEP_WS_IN_MEMORY:
      wp = (unsigned char *)s.mem + 8;
      ws_size = need;
      break;
    case CB_STEP_O_IS_Q:
      op = (float *)qv.data; /* the step's own q row */
      break;
    default:
      break;
  }
  switch (c->kind) {
    case CB_LOAD_TOO_MANY:
    case CB_LOAD_MISMATCH:
    case CB_LOAD_K_NULL:
    case CB_LOAD_F_NULL:
    case CB_LOAD_F_IN_MEMORY: {
      const size_t nl = c->kind == CB_LOAD_TOO_MANY ? s.c.capacity - s.c.live + 1 : 2;
      attn_selective_desc dl;
      sel_desc(&dl, nl, nl, CHQ, CHKV, c->kind == CB_LOAD_MISMATCH ? 2 * CD : CD, CDV, CSEL);
      const tu_tensor kl = tu_rows_view(&x.k, t, nl), vl = tu_rows_view(&x.v, t, nl);
      dl.shape.k = kl.l;
      dl.shape.v = vl.l;
      float fl[CCAP + 1] = {0};
      const float *fp = c->kind == CB_LOAD_F_NULL ? NULL : c->kind == CB_LOAD_F_IN_MEMORY ? (const float *)s.mem : fl;
      st = attn_selcache_load(&s.c, &dl, c->kind == CB_LOAD_K_NULL ? NULL : kl.data, vl.data, fp);
      break;
    }
    case CB_COPY_NULL:
      st = attn_selcache_copy(&s.c, NULL);
      break;
    case CB_COPY_CAPACITY:
    case CB_COPY_DV:
      sc_fix_init(&other, c->kind == CB_COPY_CAPACITY ? CCAP + 1 : CCAP, CHKV, CD,
                  c->kind == CB_COPY_DV ? CDV + 1 : CDV, INFINITY, 0, 0);
      st = attn_selcache_copy(&s.c, &other.c);
      break;
    case CB_COPY_OVERLAP: { /* a source cache whose memory starts inside s's */
      attn_selcache src = s.c;
      src.memory = (unsigned char *)s.mem + 4;
      src.live = 0;
      st = attn_selcache_copy(&s.c, &src);
      break;
    }
    case CB_WS_MISMATCH: {
      size_t bytes = 4242;
      d.shape.d = 2 * CD;
      st = attn_selcache_workspace_size(&d, &s.c, &bytes);
      ck_assert_uint_eq(bytes, 4242);
      break;
    }
    default:
      st = attn_selcache_step(dp, cp, q, k, v, op, lp, wp, ws_size);
      break;
  }
  ck_assert_msg(st == c->expect, "%s: status %d (%s), expected %d (%s)", c->name, (int)st, attn_status_string(st),
                (int)c->expect, attn_status_string(c->expect));
  tu_assert_same_bits("cache struct after a rejected call", &before, &s.c, sizeof before);
  tu_assert_same_bits("cache memory after a rejected call", mem_before, s.mem, s.bytes);
  tu_tensor pristine;
  tu_tensor_alloc(&pristine, T, 1, CHQ, CDV, 1);
  tu_assert_same_bits("o after a rejected call", pristine.data, o.data, sizeof(float) * o.span);
  tu_assert_same_bits("lse after a rejected call", pristine.data, lse.data, sizeof(float) * lse.span);
  tu_assert_guards("workspace", ws);
  tu_qkv_assert_unchanged(&x);
  tu_tensor_free(&pristine);
  if (other.mem) sc_fix_free(&other);
  free(mem_before);
  tu_free(ws);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  sc_fix_free(&s);
  tu_qkv_free(&x);
}
END_TEST

static Suite *selective_suite(attn_isa isa) {
  Suite *s = suite_create(attn_isa_name(isa));
  size_t work[SEL_NCASES];
  for (size_t i = 0; i < SEL_NCASES; ++i) {
    const sel_case *c = &sel_cases[i];
    work[i] = c->n_q * c->n_kv * c->h_q * (c->d + c->dv);
  }
  const size_t nsel = tu_select_rows(SEL_NCASES, work, sel_sel);
  TCase *tc = tu_tcase("reference");
  tcase_add_loop_test(tc, selective_matches_reference, 0, (int)nsel);
  tcase_add_test(tc, selective_hand_computed);
  suite_add_tcase(s, tc);
  tc = tu_tcase("nonfinite");
  tcase_add_loop_test(tc, selective_nonfinite_policy, 0, (int)NF_NCASES);
  tcase_add_loop_test(tc, selective_infinite_selection_is_nan, 0, 2);
  tcase_add_test(tc, selective_neg_inf_selection_reaches_f);
  suite_add_tcase(s, tc);
  tc = tu_tcase("properties");
  tcase_add_test(tc, selective_f_structure_through_decode);
  tcase_add_loop_test(tc, selective_selecting_query_isolation, 0, (int)ISO_NCASES);
  tcase_add_loop_test(tc, selective_pieces_match_one_call, 0, (int)PIECES_NCASES);
  suite_add_tcase(s, tc);
  tc = tu_tcase("cache");
  tcase_add_loop_test(tc, selcache_unpruned_equals_selective, 0, (int)UNP_NCASES);
  tcase_add_test(tc, selcache_load_in_two_pieces);
  tcase_add_loop_test(tc, selcache_policy_matches_simulation, 0, (int)POL_NCASES);
  tcase_add_test(tc, selcache_copy_and_restore);
  tcase_add_test(tc, selcache_nan_f_ranks_last);
  suite_add_tcase(s, tc);
  tc = tu_tcase("api");
  tcase_add_test(tc, selective_desc_init_defaults);
  tcase_add_test(tc, selective_workspace_sizes);
  tcase_add_test(tc, selcache_size_and_init);
  suite_add_tcase(s, tc);
  tc = tu_tcase("bad_input");
  tcase_add_loop_test(tc, selective_rejects_bad_input, 0, (int)tu_bad_rows(1, BS_NOWN));
  tcase_add_loop_test(tc, selcache_rejects_bad_input, 0, (int)CB_NCASES);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_main(selective_suite); }
