/*
 * K and V stored as fp16 or bf16 (attn_shape.kv_type, 0.6.0), per ISA path (ATTN_ISA): softmax
 * (prefill, decode, windows, GQA, LSE, large logits), GAU (scalar bias, a table), selective
 * attention (prefill, a decode step carrying F, the selective cache's load and step), strided
 * layouts, non-finite and subnormal half values, bad and unsupported element types, aliasing in
 * bytes. int8 K/V (ATTN_I8, ATTN_Q8_0): kv_int8.c, run from here.
 *
 * Inputs: K and V are drawn as floats, rounded to the half type by the tests' own converter
 * (tests/common/half_ref.h, independent of the library's), and stored twice: as 16-bit patterns in
 * the tensor's layout (what the call reads; the layout's gaps hold NaN patterns, so a read of a gap
 * poisons the output) and as the floats of the rounded values.
 * Checks, per case:
 *   - against the float64 reference of the rounded inputs, with the suites' own bounds
 *     (tolerances.h: tol_softmax_o / _lse, tol_gau_bound, tol_selective_*): the conversion is
 *     exact, so the half call owes nothing beyond the fp32 call's rounding, and the bounds are
 *     the fp32 ones (factor 1);
 *   - bit for bit against the library's fp32 call on the rounded floats: the engine converts
 *     each key block into scratch and runs the same kernels in the same order (only the stride
 *     of K and V differs, which no kernel's arithmetic depends on), so any difference is a
 *     conversion or block-addressing error. NaN compares as NaN (payloads are not specified).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_ref.h"
#include "kv_tests.h"
#include "ref/ref_selective.h"
#include "test_util.h"
#include "tolerances.h"

static tu_rng rng;

/* ------------------------------------------------------------------------------------------ */
/* Half tensors                                                                                */
/* ------------------------------------------------------------------------------------------ */
/* A K or V tensor in 16-bit patterns: the layout of its float twin t (strides in elements). */
typedef struct hx {
  uint16_t *data;
  size_t span;
} hx;

static uint16_t bits_of(attn_dtype ty, float x) { return ty == ATTN_F16 ? hr_f16_bits((double)x) : hr_bf16_bits(x); }
static double value_of(attn_dtype ty, uint16_t h) { return tu_half_value(ty, h); }

/* t rounded to the type in place, and its patterns (tu_half_of). */
static hx half_of(tu_tensor *t, attn_dtype ty) { return (hx){tu_half_of(t, ty), t->span}; }

/* Set element (i, a, c) of both twins to the half pattern b. */
static void half_set(tu_tensor *t, hx *h, attn_dtype ty, size_t i, size_t a, size_t c, uint16_t b) {
  float *x = tu_at(t, i, a, c);
  *x = (float)value_of(ty, b);
  h->data[(size_t)(x - t->data)] = b;
}

/* got and want equal: same bits, or both NaN. */
static void assert_same(const char *what, const float *got, const float *want, size_t n) {
  for (size_t e = 0; e < n; e++) {
    if (isnan(got[e]) && isnan(want[e])) continue;
    ck_assert_msg(memcmp(got + e, want + e, sizeof(float)) == 0, "%s: element %zu: half K/V %a, fp32 K/V %a", what, e,
                  (double)got[e], (double)want[e]);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Cases                                                                                       */
/* ------------------------------------------------------------------------------------------ */
enum { KC_SOFTMAX, KC_GAU, KC_GAU_TABLE, KC_SELECTIVE };

typedef struct kv_case {
  const char *name;
  int kind;
  attn_dtype ty;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  size_t left, right; /* mask (softmax, GAU); selective is causal */
  tu_layout_kind lay;
  tu_data data;
  int poison; /* non-finite and subnormal half values in K and V */
} kv_case;

#define UNB ATTN_UNBOUNDED
static const kv_case cases[] = {
    {"softmax f16 full tiny", KC_SOFTMAX, ATTN_F16, 7, 37, 2, 2, 5, 3, UNB, UNB, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, 0},
    {"softmax bf16 full tiny", KC_SOFTMAX, ATTN_BF16, 7, 37, 2, 2, 5, 3, UNB, UNB, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, 0},
    {"softmax f16 causal gqa odd padded", KC_SOFTMAX, ATTN_F16, 53, 211, 4, 2, 65, 17, UNB, 0, TU_PADDED,
     TU_DATA_UNIFORM, 0},
    {"softmax bf16 causal gqa odd head-major", KC_SOFTMAX, ATTN_BF16, 53, 211, 6, 2, 33, 9, UNB, 0, TU_HEAD_MAJOR,
     TU_DATA_UNIFORM, 0},
    {"softmax f16 window head-padded", KC_SOFTMAX, ATTN_F16, 70, 150, 3, 1, 16, 8, 20, 3, TU_HEAD_PADDED,
     TU_DATA_UNIFORM, 0},
    {"softmax bf16 window", KC_SOFTMAX, ATTN_BF16, 70, 150, 3, 3, 24, 40, 37, 0, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, 0},
    {"softmax f16 decode gqa", KC_SOFTMAX, ATTN_F16, 1, 333, 8, 2, 64, 64, UNB, 0, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, 0},
    {"softmax f16 verify gqa", KC_SOFTMAX, ATTN_F16, 6, 444, 16, 4, 32, 32, UNB, 0, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, 0},
    {"softmax bf16 decode padded", KC_SOFTMAX, ATTN_BF16, 1, 1001, 4, 4, 128, 72, UNB, 0, TU_PADDED, TU_DATA_UNIFORM,
     0},
    {"softmax f16 large logits", KC_SOFTMAX, ATTN_F16, 40, 120, 2, 1, 16, 16, UNB, 0, TU_TOKEN_MAJOR, TU_DATA_LARGE, 0},
    {"softmax bf16 large logits", KC_SOFTMAX, ATTN_BF16, 40, 120, 2, 1, 16, 16, UNB, UNB, TU_TOKEN_MAJOR, TU_DATA_LARGE,
     0},
    {"softmax f16 inf nan subnormal causal", KC_SOFTMAX, ATTN_F16, 30, 230, 2, 1, 9, 5, UNB, 0, TU_TOKEN_MAJOR,
     TU_DATA_UNIFORM, 1},
    {"softmax bf16 inf nan subnormal window", KC_SOFTMAX, ATTN_BF16, 30, 230, 2, 2, 9, 5, 40, 0, TU_PADDED,
     TU_DATA_UNIFORM, 1},
    {"softmax f16 inf nan subnormal decode", KC_SOFTMAX, ATTN_F16, 1, 230, 2, 1, 9, 5, UNB, 0, TU_TOKEN_MAJOR,
     TU_DATA_UNIFORM, 1},
    {"gau f16 scalar bias causal", KC_GAU, ATTN_F16, 45, 130, 4, 2, 19, 11, UNB, 0, TU_PADDED, TU_DATA_UNIFORM, 0},
    {"gau bf16 scalar bias window", KC_GAU, ATTN_BF16, 45, 130, 2, 2, 32, 16, 30, 2, TU_TOKEN_MAJOR, TU_DATA_UNIFORM,
     0},
    {"gau f16 table", KC_GAU_TABLE, ATTN_F16, 45, 130, 2, 1, 16, 20, UNB, 0, TU_HEAD_MAJOR, TU_DATA_UNIFORM, 0},
    {"gau bf16 table decode", KC_GAU_TABLE, ATTN_BF16, 1, 400, 2, 2, 16, 20, UNB, 0, TU_TOKEN_MAJOR, TU_DATA_UNIFORM,
     0},
    {"selective f16 prefill gqa", KC_SELECTIVE, ATTN_F16, 150, 150, 4, 2, 24, 13, UNB, 0, TU_PADDED, TU_DATA_UNIFORM,
     0},
    {"selective bf16 prefill", KC_SELECTIVE, ATTN_BF16, 120, 120, 3, 3, 16, 16, UNB, 0, TU_HEAD_MAJOR, TU_DATA_UNIFORM,
     0},
    /* wide heads: heads split into groups, so a group without h_sel's key head converts that
     * head's K for its own selection GEMM */
    {"selective bf16 head groups", KC_SELECTIVE, ATTN_BF16, 60, 60, 4, 4, 256, 256, UNB, 0, TU_TOKEN_MAJOR,
     TU_DATA_UNIFORM, 0},
    {"selective f16 chunk", KC_SELECTIVE, ATTN_F16, 17, 260, 2, 1, 32, 8, UNB, 0, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, 0},
    /* the last query blocks' keys in 2 ranges, folded */
    {"selective f16 key ranges", KC_SELECTIVE, ATTN_F16, 600, 600, 2, 1, 16, 16, UNB, 0, TU_TOKEN_MAJOR,
     TU_DATA_UNIFORM, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* One case's inputs: q, the rounded float twins of k and v, and their half patterns. */
typedef struct kv_inputs {
  tu_qkv x;
  hx k, v;
} kv_inputs;

static void inputs_make(kv_inputs *in, const kv_case *c) {
  const size_t h_v = c->h_kv;
  tu_qkv_make(&in->x, c->lay, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, h_v, c->d, c->dv);
  in->k = half_of(&in->x.k, c->ty);
  in->v = half_of(&in->x.v, c->ty);
  if (c->poison) { /* subnormals throughout, and a few infinities and NaNs in K and V */
    const int f16 = c->ty == ATTN_F16;
    const uint16_t sub[] = {0x0001, 0x83ff, 0x0200, 0x8001}, bsub[] = {0x0001, 0x807f, 0x0040, 0x8001};
    for (size_t i = 0; i < c->n_kv; i += 3)
      for (size_t a = 0; a < c->h_kv; a++) {
        half_set(&in->x.k, &in->k, c->ty, i, a, i % c->d, f16 ? sub[i % 4] : bsub[i % 4]);
        half_set(&in->x.v, &in->v, c->ty, i, a, i % c->dv, f16 ? sub[(i + 1) % 4] : bsub[(i + 1) % 4]);
      }
    const uint16_t pinf = f16 ? 0x7c00 : 0x7f80, ninf = f16 ? 0xfc00 : 0xff80, nan = f16 ? 0x7e01 : 0x7fc1;
    half_set(&in->x.k, &in->k, c->ty, 5, 0, 1, pinf);                   /* a key: NaN / inf scores */
    half_set(&in->x.v, &in->v, c->ty, 11, c->h_kv - 1, 0, nan);         /* a value early: hidden later */
    half_set(&in->x.v, &in->v, c->ty, c->n_kv - 7, 0, c->dv - 1, ninf); /* a value late */
    half_set(&in->x.k, &in->k, c->ty, c->n_kv - 90, c->h_kv - 1, 0, nan);
  }
  tu_qkv_snapshot(&in->x);
}

static void inputs_free(kv_inputs *in) {
  free(in->k.data);
  free(in->v.data);
  tu_qkv_free(&in->x);
}

static double *dalloc(size_t n) {
  double *p = malloc(sizeof(double) * (n ? n : 1));
  ck_assert_ptr_nonnull(p);
  return p;
}

static void *wsalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

/* An lse tensor [n][h] (contiguous), guarded. */
static void lse_alloc(tu_tensor *t, size_t n, size_t h) { tu_tensor_alloc(t, TU_TOKEN_MAJOR, n, h, 1, 1); }

/* ------------------------------------------------------------------------------------------ */
/* Softmax                                                                                     */
/* ------------------------------------------------------------------------------------------ */
static void sm_desc_of(const kv_case *c, const kv_inputs *in, const tu_tensor *o, attn_softmax_desc *d) {
  ck_assert_int_eq(attn_softmax_desc_init(d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  d->mask.left = c->left;
  d->mask.right = c->right;
  if (c->data == TU_DATA_LARGE) d->scale = 1.0f;
  tu_shape_layouts(&d->shape, &in->x.q, &in->x.k, &in->x.v, o);
}

/* Run softmax with half K/V (kv = the patterns) or fp32 (the rounded floats). */
static void sm_call(attn_softmax_desc *d, const kv_inputs *in, attn_dtype ty, tu_tensor *o, tu_tensor *lse) {
  d->shape.kv_type = ty;
  size_t ws_bytes;
  ck_assert_int_eq(attn_softmax_workspace_size(d, &ws_bytes), ATTN_OK);
  void *ws = wsalloc(ws_bytes);
  const void *k = ty == ATTN_F32 ? (const void *)in->x.k.data : (const void *)in->k.data;
  const void *v = ty == ATTN_F32 ? (const void *)in->x.v.data : (const void *)in->v.data;
  ck_assert_int_eq(attn_softmax(d, in->x.q.data, k, v, o->data, lse ? lse->data : NULL, ws, ws_bytes), ATTN_OK);
  free(ws);
}

static void sm_case(const kv_case *c) {
  kv_inputs in;
  inputs_make(&in, c);
  tu_tensor o, o32, lse, lse32;
  tu_tensor_alloc(&o, c->lay == TU_HEAD_PADDED ? TU_HEAD_PADDED : TU_PADDED, c->n_q, c->h_q, c->dv, 1);
  tu_tensor_alloc(&o32, c->lay == TU_HEAD_PADDED ? TU_HEAD_PADDED : TU_PADDED, c->n_q, c->h_q, c->dv, 1);
  lse_alloc(&lse, c->n_q, c->h_q);
  lse_alloc(&lse32, c->n_q, c->h_q);
  attn_softmax_desc d;
  sm_desc_of(c, &in, &o, &d);
  /* workspace: fp32 needs no conversion scratch; a half type at least the fp32 size */
  size_t b32, bh;
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &b32), ATTN_OK);
  d.shape.kv_type = c->ty;
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &bh), ATTN_OK);
  ck_assert_uint_ge(bh, b32);
  sm_call(&d, &in, c->ty, &o, &lse);
  tu_qkv_assert_unchanged(&in.x);
  tu_assert_output_clean("o", &o);
  tu_assert_output_clean("lse", &lse);
  sm_call(&d, &in, ATTN_F32, &o32, &lse32);
  assert_same(c->name, o.data, o32.data, o.span);
  assert_same(c->name, lse.data, lse32.data, lse.span);

  /* the float64 reference of the rounded values */
  const attn_shape *s = &d.shape;
  const ref_softmax_problem p = tu_softmax_problem(&d, &in.x.q, &in.x.k, &in.x.v);
  const size_t rows = s->n_q * s->h_q;
  double *ro = dalloc(rows * s->dv), *rs = dalloc(rows * s->dv), *rl = dalloc(rows), *sabs = dalloc(rows);
  double *tol = dalloc(rows * s->dv), *one = dalloc(rows * s->dv);
  ref_softmax(&p, ro, rl, rs, sabs);
  for (size_t r = 0; r < rows; r++)
    for (size_t x = 0; x < s->dv; x++) tol[r * s->dv + x] = tol_softmax_o(s->n_kv, s->d, sabs[r]);
  tu_compare("kv_half.softmax.o", c->name, &o, ro, rs, tol);
  for (size_t r = 0; r < rows; r++) {
    one[r] = 1.0;
    tol[r] = tol_softmax_lse(s->n_kv, s->d, sabs[r], isinf(rl[r]) || isnan(rl[r]) ? 0 : rl[r]);
  }
  tu_compare("kv_half.softmax.lse", c->name, &lse, rl, one, tol);

  /* decode rows == prefill rows: token t alone over keys [0, p_t] (causal, full-history cases) */
  if (c->right == 0 && c->left == UNB && c->n_q > 1) {
    const size_t ts[] = {0, c->n_q / 2, c->n_q - 1};
    for (size_t a = 0; a < 3; a++) {
      const size_t t = ts[a], nkv = c->n_kv - c->n_q + t + 1;
      tu_tensor o1, l1;
      tu_tensor_alloc(&o1, TU_TOKEN_MAJOR, 1, c->h_q, c->dv, 1);
      lse_alloc(&l1, 1, c->h_q);
      attn_softmax_desc d1 = d;
      d1.shape.n_q = 1;
      d1.shape.n_kv = nkv;
      d1.shape.o = o1.l;
      kv_inputs view = in; /* q row t; K and V unchanged (their first nkv rows) */
      view.x.q = tu_rows_view(&in.x.q, t, 1);
      sm_call(&d1, &view, c->ty, &o1, &l1);
      char what[160];
      snprintf(what, sizeof what, "%s: decode of token %zu", c->name, t);
      double *t1 = dalloc(c->h_q * c->dv);
      for (size_t e = 0; e < c->h_q * c->dv; e++) t1[e] = tol_softmax_o(nkv, c->d, sabs[t * c->h_q + e / c->dv]);
      tu_compare("kv_half.softmax.o", what, &o1, ro + t * c->h_q * c->dv, rs + t * c->h_q * c->dv, t1);
      free(t1);
      tu_tensor_free(&o1);
      tu_tensor_free(&l1);
    }
  }
  free(ro), free(rs), free(rl), free(sabs), free(tol), free(one);
  tu_tensor_free(&o), tu_tensor_free(&o32), tu_tensor_free(&lse), tu_tensor_free(&lse32);
  inputs_free(&in);
}

/* ------------------------------------------------------------------------------------------ */
/* GAU                                                                                         */
/* ------------------------------------------------------------------------------------------ */
static const float gau_table[] = {0.3f, -0.2f, 0.1f, 0.05f, -0.4f, 0.25f, 0.0f, -0.1f, 0.2f};

static void gau_call(attn_gau_desc *d, const kv_inputs *in, attn_dtype ty, tu_tensor *o) {
  d->shape.kv_type = ty;
  size_t ws_bytes;
  ck_assert_int_eq(attn_gau_workspace_size(d, &ws_bytes), ATTN_OK);
  void *ws = wsalloc(ws_bytes);
  const void *k = ty == ATTN_F32 ? (const void *)in->x.k.data : (const void *)in->k.data;
  const void *v = ty == ATTN_F32 ? (const void *)in->x.v.data : (const void *)in->v.data;
  ck_assert_int_eq(attn_gau(d, in->x.q.data, k, v, o->data, ws, ws_bytes), ATTN_OK);
  free(ws);
}

static void gau_case(const kv_case *c) {
  kv_inputs in;
  inputs_make(&in, c);
  tu_tensor o, o32;
  tu_tensor_alloc(&o, TU_PADDED, c->n_q, c->h_q, c->dv, 1);
  tu_tensor_alloc(&o32, TU_PADDED, c->n_q, c->h_q, c->dv, 1);
  attn_gau_desc d;
  ck_assert_int_eq(attn_gau_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  d.mask.left = c->left;
  d.mask.right = c->right;
  d.beta = 0.05f;
  if (c->kind == KC_GAU_TABLE) {
    d.bias = ATTN_GAU_BIAS_TWO_SIDED;
    d.bias_table = gau_table;
    d.bias_len = 5; /* 2L - 1 = 9 floats */
  }
  tu_shape_layouts(&d.shape, &in.x.q, &in.x.k, &in.x.v, &o);
  gau_call(&d, &in, c->ty, &o);
  tu_qkv_assert_unchanged(&in.x);
  tu_assert_output_clean("o", &o);
  gau_call(&d, &in, ATTN_F32, &o32);
  assert_same(c->name, o.data, o32.data, o.span);
  const ref_gau_problem p = tu_gau_problem(&d, &in.x.q, &in.x.k, &in.x.v);
  const size_t count = c->n_q * c->h_q * c->dv;
  double *ro = dalloc(count), *os = dalloc(count), *oa = dalloc(count), *on = dalloc(count), *sc = dalloc(count),
         *tol = dalloc(count);
  ref_gau(&p, ro, os, oa, on);
  for (size_t e = 0; e < count; e++) {
    const double bound = tol_gau_bound(c->n_kv, c->d, os[e], oa[e], on[e]);
    sc[e] = os[e] > 0.0 ? os[e] : 1.0;
    tol[e] = bound / sc[e];
  }
  tu_compare("kv_half.gau.o", c->name, &o, ro, sc, tol);
  free(ro), free(os), free(oa), free(on), free(sc), free(tol);
  tu_tensor_free(&o), tu_tensor_free(&o32);
  inputs_free(&in);
}

/* ------------------------------------------------------------------------------------------ */
/* Selective attention (and the selective cache)                                               */
/* ------------------------------------------------------------------------------------------ */
static void sel_call(attn_selective_desc *d, const kv_inputs *in, attn_dtype ty, tu_tensor *o, tu_tensor *lse,
                     float *f) {
  d->shape.kv_type = ty;
  size_t ws_bytes;
  ck_assert_int_eq(attn_selective_workspace_size(d, &ws_bytes), ATTN_OK);
  void *ws = wsalloc(ws_bytes);
  const void *k = ty == ATTN_F32 ? (const void *)in->x.k.data : (const void *)in->k.data;
  const void *v = ty == ATTN_F32 ? (const void *)in->x.v.data : (const void *)in->v.data;
  ck_assert_int_eq(attn_selective(d, in->x.q.data, k, v, o->data, lse->data, f, ws, ws_bytes), ATTN_OK);
  free(ws);
}

/* A chunk (n_q < n_kv) needs F of the earlier queries: a fresh call over the first n_kv - n_q
 * tokens gives it (computed on the fp32 path, so both calls of the chunk start alike). */
static void sel_case(const kv_case *c) {
  kv_inputs in;
  inputs_make(&in, c);
  tu_tensor o, o32, lse, lse32;
  tu_tensor_alloc(&o, TU_PADDED, c->n_q, c->h_q, c->dv, 1);
  tu_tensor_alloc(&o32, TU_PADDED, c->n_q, c->h_q, c->dv, 1);
  lse_alloc(&lse, c->n_q, c->h_q);
  lse_alloc(&lse32, c->n_q, c->h_q);
  float *f = calloc(c->n_kv, sizeof(float)), *f32 = calloc(c->n_kv, sizeof(float)),
        *f0 = calloc(c->n_kv, sizeof(float));
  ck_assert(f && f32 && f0);
  attn_selective_desc d;
  ck_assert_int_eq(attn_selective_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  d.h_sel = c->h_q - 1;
  tu_shape_layouts(&d.shape, &in.x.q, &in.x.k, &in.x.v, &o);
  const size_t first = c->n_kv - c->n_q;
  if (first) { /* the earlier tokens' F, fp32 */
    tu_qkv pre;
    tu_tensor po, pl;
    tu_qkv_make(&pre, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, first, first, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
    tu_tensor_alloc(&po, TU_TOKEN_MAJOR, first, c->h_q, c->dv, 1);
    lse_alloc(&pl, first, c->h_q);
    attn_selective_desc dp;
    ck_assert_int_eq(attn_selective_desc_init(&dp, first, first, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
    dp.h_sel = d.h_sel;
    kv_inputs pin = {pre, {NULL, 0}, {NULL, 0}};
    pin.x.q = pre.q, pin.x.k = tu_rows_view(&in.x.k, 0, first), pin.x.v = tu_rows_view(&in.x.v, 0, first);
    tu_shape_layouts(&dp.shape, &pre.q, &pin.x.k, &pin.x.v, &po);
    sel_call(&dp, &pin, ATTN_F32, &po, &pl, f0);
    tu_tensor_free(&po), tu_tensor_free(&pl);
    tu_qkv_free(&pre);
  }
  memcpy(f, f0, c->n_kv * sizeof(float));
  memcpy(f32, f0, c->n_kv * sizeof(float));
  sel_call(&d, &in, c->ty, &o, &lse, f);
  tu_qkv_assert_unchanged(&in.x);
  tu_assert_output_clean("o", &o);
  sel_call(&d, &in, ATTN_F32, &o32, &lse32, f32);
  assert_same(c->name, o.data, o32.data, o.span);
  assert_same(c->name, lse.data, lse32.data, lse.span);
  assert_same(c->name, f, f32, c->n_kv);

  const attn_shape *s = &d.shape;
  const ref_selective_problem p = tu_selective_problem(&d, &in.x.q, &in.x.k, &in.x.v, first ? f0 : NULL);
  const size_t rows = s->n_q * s->h_q, n = s->n_kv, dv = s->dv;
  double *r_o = dalloc(rows * dv), *r_os = dalloc(rows * dv), *r_oa = dalloc(rows * dv), *r_of = dalloc(rows * dv);
  double *r_l = dalloc(rows), *r_sabs = dalloc(rows), *r_la = dalloc(rows), *r_lf = dalloc(rows);
  double *r_f = dalloc(n), *r_fg = dalloc(n), *r_F = dalloc(s->n_q * n);
  const ref_selective_out out = {r_o, r_l, r_os, r_oa, r_of, r_sabs, r_la, r_lf, r_f, r_fg, r_F};
  ref_selective(&p, &out);
  double *sc = dalloc(rows * dv), *tol = dalloc(rows * dv);
  for (size_t r = 0; r < rows; r++)
    for (size_t x = 0; x < dv; x++) {
      const size_t e = r * dv + x;
      sc[e] = r_os[e] > 0.0 ? r_os[e] : 1.0;
      tol[e] = tol_selective_o(n, s->d, r_os[e], r_sabs[r], r_oa[e], r_of[e]) / sc[e];
    }
  tu_compare("kv_half.selective.o", c->name, &o, r_o, sc, tol);
  for (size_t r = 0; r < rows; r++) {
    sc[r] = 1.0;
    tol[r] = tol_selective_lse(n, s->d, r_sabs[r], isinf(r_l[r]) ? 0.0 : r_l[r], r_la[r], r_lf[r]);
  }
  tu_compare("kv_half.selective.lse", c->name, &lse, r_l, sc, tol);
  for (size_t j = 0; j < n; j++) {
    const double b = tol_selective_f(n, s->d, r_f[j], r_fg[j]); /* absolute */
    ck_assert_msg(fabs((double)f[j] - r_f[j]) <= b, "%s: F[%zu] = %g, reference %g, bound %g", c->name, j, (double)f[j],
                  r_f[j], b);
  }
  double *all[] = {r_o, r_os, r_oa, r_of, r_l, r_sabs, r_la, r_lf, r_f, r_fg, r_F, sc, tol};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  free(f), free(f32), free(f0);
  tu_tensor_free(&o), tu_tensor_free(&o32), tu_tensor_free(&lse), tu_tensor_free(&lse32);
  inputs_free(&in);
}

START_TEST(kv_half_matches_reference) {
  const kv_case *c = &cases[_i];
  if (c->kind == KC_SOFTMAX)
    sm_case(c);
  else if (c->kind == KC_SELECTIVE)
    sel_case(c);
  else
    gau_case(c);
}
END_TEST

/* The selective cache keeps fp32 K and V; its load and step take half K/V (desc's kv_type) and
 * convert them exactly: a cache fed fp16 / bf16 ends with the memory, outputs and report of one
 * fed the rounded floats, through a prefill load and decode steps with evictions (a budget). */
START_TEST(kv_half_selcache) {
  const attn_dtype ty = _i ? ATTN_BF16 : ATTN_F16;
  const size_t n0 = 30, steps = 6, n = n0 + steps, h_q = 4, h_kv = 2, d = 24, dv = 13, cap = 40, budget = 20;
  kv_inputs in;
  const kv_case c = {"selcache", KC_SELECTIVE, ty, n, n, h_q, h_kv, d, dv, UNB, 0, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, 0};
  inputs_make(&in, &c);
  /* F of the prefill (fp32 path over the rounded values) */
  attn_selective_desc dp;
  ck_assert_int_eq(attn_selective_desc_init(&dp, n0, n0, h_q, h_kv, d, dv), ATTN_OK);
  dp.h_sel = 1;
  float *f = calloc(n, sizeof(float)), *po = malloc(sizeof(float) * n0 * h_q * dv);
  ck_assert(f && po);
  size_t wsb;
  ck_assert_int_eq(attn_selective_workspace_size(&dp, &wsb), ATTN_OK);
  void *ws = wsalloc(wsb);
  dp.shape.k = in.x.k.l, dp.shape.v = in.x.v.l, dp.shape.q = in.x.q.l;
  ck_assert_int_eq(attn_selective(&dp, in.x.q.data, in.x.k.data, in.x.v.data, po, NULL, f, ws, wsb), ATTN_OK);
  free(ws);
  size_t mem_bytes;
  ck_assert_int_eq(attn_selcache_size(cap, h_kv, d, dv, &mem_bytes), ATTN_OK);
  attn_selcache cache[2];
  void *mem[2];
  float out[2][6][4 * 13];      /* [path][step][h_q x dv] */
  for (int w = 0; w < 2; w++) { /* w = 0: half K/V; w = 1: fp32 */
    const attn_dtype t = w ? ATTN_F32 : ty;
    mem[w] = calloc(1, mem_bytes);
    ck_assert_ptr_nonnull(mem[w]);
    ck_assert_int_eq(attn_selcache_init(&cache[w], cap, h_kv, d, dv, INFINITY, budget, mem[w], mem_bytes), ATTN_OK);
    attn_selective_desc dl = dp;
    dl.shape.kv_type = t;
    const void *k = w ? (const void *)in.x.k.data : (const void *)in.k.data;
    const void *v = w ? (const void *)in.x.v.data : (const void *)in.v.data;
    ck_assert_int_eq(attn_selcache_load(&cache[w], &dl, k, v, f), ATTN_OK);
    attn_selective_desc ds;
    ck_assert_int_eq(attn_selective_desc_init(&ds, 1, 1, h_q, h_kv, d, dv), ATTN_OK);
    ds.h_sel = 1;
    ds.shape.kv_type = t;
    ck_assert_int_eq(attn_selcache_workspace_size(&ds, &cache[w], &wsb), ATTN_OK);
    ws = wsalloc(wsb);
    for (size_t st = 0; st < steps; st++) {
      const size_t tok = n0 + st;
      const size_t ek = tok * in.x.k.l.row_stride, ev = tok * in.x.v.l.row_stride;
      const void *kt = w ? (const void *)(in.x.k.data + ek) : (const void *)(in.k.data + ek);
      const void *vt = w ? (const void *)(in.x.v.data + ev) : (const void *)(in.v.data + ev);
      ck_assert_int_eq(attn_selcache_step(&ds, &cache[w], tu_at(&in.x.q, tok, 0, 0), kt, vt, out[w][st], NULL, ws, wsb),
                       ATTN_OK);
    }
    free(ws);
  }
  for (size_t st = 0; st < steps; st++) assert_same("selcache step o", out[0][st], out[1][st], h_q * dv);
  ck_assert_uint_eq(cache[0].live, cache[1].live);
  ck_assert_uint_eq(cache[0].evicted, cache[1].evicted);
  ck_assert_uint_gt(cache[0].evicted, 0);
  tu_assert_same_bits("selcache memory", mem[0], mem[1], mem_bytes);
  free(mem[0]), free(mem[1]), free(f), free(po);
  inputs_free(&in);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad and unsupported element types, aliasing in bytes                                        */
/* ------------------------------------------------------------------------------------------ */
enum { BN = 5, BH = 2, BD = 4, BDV = 4, BWS = 1 << 20 };
static const float canary = 1234.5f;

static void fill(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = canary;
}
static void assert_untouched(const char *what, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) ck_assert_msg(x[i] == canary, "%s: element %zu written", what, i);
}

/* An unknown kv_type: every variant and the cache refuse with ATTN_E_BAD_DTYPE and write nothing;
 * a half type where only fp32 is taken (linear attention, attn_matrix): the same. */
START_TEST(kv_half_bad_dtype) {
  static const int bad[] = {5, -1, 1000, ATTN_F16, ATTN_BF16};
  const attn_dtype ty = (attn_dtype)bad[_i];
  const int unknown = _i < 3;
  float q[BN * BH * BD], k[BN * BH * BD], v[BN * BH * BDV], o[BN * BH * BDV], lse[BN * BH], f[BN], ent[BN * BH];
  for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = k[i] = 0.25f * (float)(i % 7);
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) v[i] = 0.5f;
  void *ws = wsalloc(BWS);
  size_t bytes;
  const attn_status want = ATTN_E_BAD_DTYPE;
  ck_assert_str_ne(attn_status_string(ATTN_E_BAD_DTYPE), attn_status_string((attn_status)999));
  if (unknown) {
    attn_softmax_desc sd;
    attn_softmax_desc_init(&sd, BN, BN, BH, BH, BD, BDV);
    ck_assert_int_eq(sd.shape.kv_type, ATTN_F32);
    sd.shape.kv_type = ty;
    ck_assert_int_eq(attn_softmax_workspace_size(&sd, &bytes), want);
    fill(o, BN * BH * BDV), fill(lse, BN * BH), fill(ent, BN * BH);
    ck_assert_int_eq(attn_softmax(&sd, q, k, v, o, lse, ws, BWS), want);
    attn_row_stats rs;
    attn_row_stats_init(&rs, BH, ent, NULL, NULL);
    ck_assert_int_eq(attn_softmax_stats(&sd, q, k, v, o, lse, &rs, ws, BWS), want);
    assert_untouched("softmax o", o, BN * BH * BDV), assert_untouched("softmax lse", lse, BN * BH);
    assert_untouched("softmax entropy", ent, BN * BH);

    attn_gau_desc gd;
    attn_gau_desc_init(&gd, BN, BN, BH, BH, BD, BDV);
    ck_assert_int_eq(gd.shape.kv_type, ATTN_F32);
    gd.shape.kv_type = ty;
    ck_assert_int_eq(attn_gau_workspace_size(&gd, &bytes), want);
    ck_assert_int_eq(attn_gau(&gd, q, k, v, o, ws, BWS), want);
    ck_assert_int_eq(attn_gau_stats(&gd, q, k, v, o, &rs, ws, BWS), want);
    assert_untouched("gau o", o, BN * BH * BDV);

    attn_selective_desc ld;
    attn_selective_desc_init(&ld, BN, BN, BH, BH, BD, BDV);
    ck_assert_int_eq(ld.shape.kv_type, ATTN_F32);
    ld.shape.kv_type = ty;
    fill(f, BN);
    ck_assert_int_eq(attn_selective_workspace_size(&ld, &bytes), want);
    ck_assert_int_eq(attn_selective(&ld, q, k, v, o, lse, f, ws, BWS), want);
    ck_assert_int_eq(attn_selective_stats(&ld, q, k, v, o, lse, f, &rs, ws, BWS), want);
    assert_untouched("selective o", o, BN * BH * BDV), assert_untouched("selective f", f, BN);
    size_t mb;
    ck_assert_int_eq(attn_selcache_size(8, BH, BD, BDV, &mb), ATTN_OK);
    void *mem = calloc(1, mb);
    attn_selcache cache;
    ck_assert_int_eq(attn_selcache_init(&cache, 8, BH, BD, BDV, INFINITY, 0, mem, mb), ATTN_OK);
    for (size_t j = 0; j < BN; j++) f[j] = 0.0f;
    ck_assert_int_eq(attn_selcache_load(&cache, &ld, k, v, f), want);
    ck_assert_uint_eq(cache.live, 0);
    attn_selective_desc one;
    attn_selective_desc_init(&one, 1, 1, BH, BH, BD, BDV);
    one.shape.kv_type = ty;
    fill(o, BN * BH * BDV);
    ck_assert_int_eq(attn_selcache_step(&one, &cache, q, k, v, o, NULL, ws, BWS), want);
    ck_assert_uint_eq(cache.live, 0);
    assert_untouched("selcache step o", o, BN * BH * BDV);
    free(mem);
  }
  /* linear attention: fp32 only (every mask: the chunkwise and the windowed engine) */
  for (int windowed = 0; windowed < 2; windowed++) {
    attn_linear_desc nd;
    attn_linear_desc_init(&nd, BN, BN, BH, BH, BD, BDV, ATTN_FEATURE_ELU1);
    ck_assert_int_eq(nd.shape.kv_type, ATTN_F32);
    if (windowed) nd.mask.left = 2;
    nd.shape.kv_type = ty;
    fill(o, BN * BH * BDV);
    ck_assert_int_eq(attn_linear_workspace_size(&nd, &bytes), want);
    ck_assert_int_eq(attn_linear(&nd, q, k, v, o, NULL, ws, BWS), want);
    assert_untouched("linear o", o, BN * BH * BDV);
  }
  /* attn_matrix: fp32 only */
  attn_softmax_desc md;
  attn_softmax_desc_init(&md, BN, BN, BH, BH, BD, BDV);
  md.shape.kv_type = ty;
  const attn_call call = {ATTN_KIND_SOFTMAX, &md, q, k, NULL, NULL, NULL};
  float a[BN * BH * BN];
  fill(a, BN * BH * BN);
  ck_assert_int_eq(attn_matrix_workspace_size(&call, &bytes), want);
  ck_assert_int_eq(attn_matrix(&call, a, (attn_layout){BH * BN, BN}, ws, BWS), want);
  assert_untouched("matrix", a, BN * BH * BN);
  free(ws);
}
END_TEST

/* Aliasing is checked in bytes of the element type: an output right after a half K (which an fp32
 * K of the same span would overlap) is accepted, one overlapping its last element is not. */
START_TEST(kv_half_aliasing_in_bytes) {
  const attn_dtype ty = _i ? ATTN_BF16 : ATTN_F16;
  const size_t n = 8, h = 1, dd = 4, dv = 4, kspan = n * h * dd, ospan = n * h * dv;
  attn_softmax_desc sd;
  attn_softmax_desc_init(&sd, n, n, h, h, dd, dv);
  sd.shape.kv_type = ty;
  size_t wsb;
  ck_assert_int_eq(attn_softmax_workspace_size(&sd, &wsb), ATTN_OK);
  void *ws = wsalloc(wsb);
  float q[8 * 4], o_ok[8 * 4];
  uint16_t v[8 * 4];
  for (size_t i = 0; i < kspan; i++) q[i] = 0.1f * (float)i, v[i] = bits_of(ty, 0.5f);
  /* one buffer: K's kspan halves, then o; o at the first float after K is fine */
  float *buf = malloc(kspan * sizeof(uint16_t) + ospan * sizeof(float) + 64);
  ck_assert_ptr_nonnull(buf);
  uint16_t *k = (uint16_t *)buf;
  for (size_t i = 0; i < kspan; i++) k[i] = bits_of(ty, 0.25f * (float)(i % 5));
  float *o = buf + kspan / 2; /* byte kspan * 2: just past K */
  ck_assert_int_eq(attn_softmax(&sd, q, k, v, o, NULL, ws, wsb), ATTN_OK);
  /* the same values as fp32 K elsewhere */
  float kf[8 * 4], vf[8 * 4];
  for (size_t i = 0; i < kspan; i++) kf[i] = (float)value_of(ty, k[i]), vf[i] = (float)value_of(ty, v[i]);
  sd.shape.kv_type = ATTN_F32;
  ck_assert_int_eq(attn_softmax(&sd, q, kf, vf, o_ok, NULL, ws, wsb), ATTN_OK);
  assert_same("o after a half K", o, o_ok, ospan);
  sd.shape.kv_type = ty;
  float *o_bad = buf + kspan / 2 - 1; /* its first float holds K's last two halves */
  ck_assert_int_eq(attn_softmax(&sd, q, k, v, o_bad, NULL, ws, wsb), ATTN_E_ALIASING);
  /* and V the same way, through the workspace: a workspace right after half V is fine */
  free(buf);
  free(ws);
}
END_TEST

static Suite *kv_half_suite(attn_isa isa) {
  tu_rng_seed(&rng, 0x16f16);
  /* clang-format off */
  return TU_SUITE(isa,
    {"reference", kv_half_matches_reference, (int)NCASES}, {"reference", kv_half_selcache, 2},
    {"bad_input", kv_half_bad_dtype, 5}, {"bad_input", kv_half_aliasing_in_bytes, 2},
    kv_int8_row(0), kv_int8_row(1), kv_paged_row(0), kv_paged_row(1),
    qo_half_row(0), qo_half_row(1), qo_half_row(2));
  /* clang-format on */
}

int main(void) { return tu_main(kv_half_suite); }
