/*
 * GAU relu^2 attention (attn_gau: scalar and relative-position biases, normalised or not, every
 * mask), on the ISA path named by ATTN_ISA, against the float64 reference (tests/ref/ref_gau.c).
 * TCases: "reference" (the shape table and the named forms: FLASH's quadratic part, Su's
 * normalised causal form, chunk-local masks, the bias lookups read back exactly), "sparsity"
 * (beta -> -inf gives exact zeros; with beta = 0 some weights are 0 and their keys' values never
 * matter), "mask" (keys no row sees are never read; rows that see no key), "properties" (decode
 * and chunked prefill reproduce the full prefill), "nonfinite", "api" (descriptor defaults,
 * workspace) and "bad_input" (the exact status of every bad argument, nothing written).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "test_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

#define HEADS(q, kv) .h_q = (q), .h_kv = (kv)
#define BETA(x)      .bias = ATTN_GAU_BIAS_SCALAR, .beta = (x)
#define CTAB(l)      .bias = ATTN_GAU_BIAS_CAUSAL, .bias_len = (l)
#define TTAB(l)      .bias = ATTN_GAU_BIAS_TWO_SIDED, .bias_len = (l)
#define NORM         .normalize = 1

/* ------------------------------------------------------------------------------------------ */
/* Bias tables                                                                                 */
/* ------------------------------------------------------------------------------------------ */
/* Entries a table kind holds: L (causal), 2L - 1 (two-sided); 0 for the scalar bias. */
static size_t gau_table_count(attn_gau_bias kind, size_t len) {
  return kind == ATTN_GAU_BIAS_CAUSAL ? len : kind == ATTN_GAU_BIAS_TWO_SIDED ? 2 * len - 1 : 0;
}

/* A table of the kind's count, uniform in [-amp, amp) (amp 0: 0.5), exactly sized (malloc: ASan
 * sees an over-read); NULL for the scalar bias. */
static float *gau_table_make(attn_gau_bias kind, size_t len, float amp, tu_rng *r) {
  const size_t count = gau_table_count(kind, len);
  if (count == 0) return NULL;
  if (amp == 0.0f) amp = 0.5f;
  float *t = malloc(sizeof(float) * count);
  ck_assert_ptr_nonnull(t);
  for (size_t i = 0; i < count; ++i) t[i] = tu_rng_range(r, -amp, amp);
  return t;
}

/* ------------------------------------------------------------------------------------------ */
/* Running the library and the reference                                                       */
/* ------------------------------------------------------------------------------------------ */
static void gau_desc(attn_gau_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv,
                     attn_mask mask) {
  ck_assert_int_eq(attn_gau_desc_init(d, n_q, n_kv, h_q, h_kv, dd, dv), ATTN_OK);
  d->mask = mask;
}

/* Workspace misalignments (bytes) the calls cycle through: any alignment is documented to work. */
static const size_t gau_misalign[4] = {0, 4, 1, 36};

/* attn_gau with q, k, v as given (their strides go into desc), o freshly allocated (guarded,
 * sentinel-filled) in layout okind; asserts ATTN_OK, intact guards around o and the exactly-sized
 * workspace (misaligned by `misalign` bytes), untouched gaps of o and an unchanged bias table. */
static void gau_call(const attn_gau_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                     tu_layout_kind okind, size_t misalign, tu_tensor *o) {
  attn_gau_desc dd = *desc;
  tu_tensor_alloc(o, okind, dd.shape.n_q, dd.shape.h_q, dd.shape.dv, 1);
  tu_shape_layouts(&dd.shape, q, k, v, o);
  const size_t tcount = dd.bias_table ? gau_table_count(dd.bias, dd.bias_len) : 0;
  float *tcopy = malloc(sizeof(float) * (tcount ? tcount : 1));
  ck_assert_ptr_nonnull(tcopy);
  if (tcount) memcpy(tcopy, dd.bias_table, sizeof(float) * tcount);
  size_t ws = 0;
  ck_assert_int_eq(attn_gau_workspace_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(attn_gau(&dd, q->data, k->data, v->data, o->data, w, ws), ATTN_OK);
  tu_assert_guards("gau workspace", w);
  tu_free(w);
  tu_assert_output_clean("gau o", o);
  if (tcount) tu_assert_same_bits("bias table (const) after the call", tcopy, dd.bias_table, sizeof(float) * tcount);
  free(tcopy);
}

typedef struct gau_ref {
  double *o, *oscale, *oarg, *onear;
} gau_ref;

static void gau_ref_compute(const attn_gau_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                            gau_ref *r) {
  const ref_gau_problem p = tu_gau_problem(d, q, k, v);
  const size_t count = d->shape.n_q * d->shape.h_q * d->shape.dv;
  r->o = malloc(sizeof(double) * count);
  r->oscale = malloc(sizeof(double) * count);
  r->oarg = malloc(sizeof(double) * count);
  r->onear = malloc(sizeof(double) * count);
  ck_assert(r->o && r->oscale && r->oarg && r->onear);
  ref_gau(&p, r->o, r->oscale, r->oarg, r->onear);
}

static void gau_ref_free(gau_ref *r) {
  free(r->o);
  free(r->oscale);
  free(r->oarg);
  free(r->onear);
}

/* A view of a reference's scales from element `off` on (a property compares some rows only). */
static gau_ref gau_ref_at(const gau_ref *r, size_t off) {
  const gau_ref v = {r->o + off, r->oscale + off, r->oarg + off, r->onear + off};
  return v;
}

/* The one GAU comparison: got (all its rows) against expected values (the reference, or another
 * library result for a property) with the reference's error scales for got's rows, n the keys
 * behind the sums, bounds times factor (tolerances.h, tol_gau_bound). */
static void gau_compare(const char *family, const char *what, const tu_tensor *got, const double *expect,
                        const gau_ref *sc, size_t n, size_t d, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *scale = malloc(sizeof(double) * count), *tol = malloc(sizeof(double) * count);
  ck_assert(scale && tol);
  for (size_t e = 0; e < count; ++e) {
    const double bound = factor * tol_gau_bound(n, d, sc->oscale[e], sc->oarg[e], sc->onear[e]);
    scale[e] = sc->oscale[e] > 0.0 ? sc->oscale[e] : 1.0;
    tol[e] = bound / scale[e];
  }
  tu_compare(family, what, got, expect, scale, tol);
  free(scale);
  free(tol);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
/* GAU needs h_k == h_v (one count, h_kv, dividing h_q). */
typedef struct gau_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;        /* every row states it */
  tu_layout_kind layout; /* default: token-major */
  float scale;           /* with set_scale; otherwise the default 1/sqrt(d) */
  int set_scale;
  tu_data data; /* default: uniform in [-1, 1) */
  attn_gau_bias bias;
  float beta;      /* SCALAR */
  size_t bias_len; /* table kinds: L */
  float amp;       /* table entries in [-amp, amp) (0: 0.5) */
  int normalize;
} gau_case;

/* Query blocks are 48 rows and key blocks 96 on SIMD paths, 32 / 64 on scalar; vectors are 8
 * (AVX2) and 4 (NEON) floats: sizes sit on, below and above each of them. Every mask kind, both
 * bias tables (L = 1, L below and above the lengths), beta of both signs and 0, normalize 0 and
 * 1, large arguments (|x| up to ~1e3: r^2 ~ 1e6, still far inside float). */
static const gau_case gau_cases[] = {
    /* sizes: 1, primes, around vector widths and block sizes */
    {.name = "n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1), .mask = FULL, BETA(0.5f)},
    {.name = "n1_d8_causal_norm", SIZES(1, 1, 8, 8), HEADS(1, 1), .mask = CAUSAL, NORM, BETA(0.25f)},
    {.name = "n3_d65", SIZES(3, 3, 65, 65), HEADS(1, 1), .mask = FULL},
    /* key splits (attn.h, threads): 2 and 16 ranges, a window, a table, normalised */
    {.name = "split2_decode_norm", SIZES(1, 4500, 8, 8), HEADS(2, 1), .mask = CAUSAL, NORM, BETA(0.1f)},
    {.name = "split16_nq3_ctab", SIZES(3, 40000, 4, 5), HEADS(2, 2), .mask = CAUSAL, CTAB(64)},
    {.name = "split_nq4_window", SIZES(4, 12000, 8, 8), HEADS(4, 2), .mask = WINDOW(5000, 0), NORM},
    {.name = "n5_d3_dv5_ctab", SIZES(5, 5, 3, 5), HEADS(1, 1), .mask = CAUSAL, CTAB(3)},
    {.name = "n7_d7_causal", SIZES(7, 7, 7, 7), HEADS(1, 1), .mask = CAUSAL, BETA(0.1f)},
    {.name = "n8_d8_ttab", SIZES(8, 8, 8, 8), HEADS(2, 2), .mask = FULL, TTAB(4)},
    {.name = "n31_d1_norm", SIZES(31, 31, 1, 1), HEADS(1, 1), .mask = FULL, NORM, BETA(0.2f)},
    {.name = "n32_d64_causal", SIZES(32, 32, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n33_d65_gqa", SIZES(33, 33, 65, 65), HEADS(2, 1), .mask = FULL, BETA(-0.1f)},
    {.name = "n47_d64_causal_ctab", SIZES(47, 47, 64, 64), HEADS(1, 1), .mask = CAUSAL, CTAB(16)},
    {.name = "n48_d8_norm", SIZES(48, 48, 8, 8), HEADS(1, 1), .mask = FULL, NORM},
    {.name = "n49_d7_causal", SIZES(49, 49, 7, 7), HEADS(2, 2), .mask = CAUSAL, BETA(0.3f)},
    {.name = "n95_d64_ttab", SIZES(95, 95, 64, 64), HEADS(1, 1), .mask = FULL, TTAB(32)},
    {.name = "n96_d128_causal_norm", SIZES(96, 96, 128, 128), HEADS(1, 1), .mask = CAUSAL, NORM, BETA(0.05f)},
    {.name = "n97_d8_gqa", SIZES(97, 97, 8, 8), HEADS(2, 1), .mask = FULL, BETA(0.5f)},
    {.name = "n130_d65_causal_ctab", SIZES(130, 130, 65, 65), HEADS(1, 1), .mask = CAUSAL, CTAB(200)},
    {.name = "n193_d64_causal", SIZES(193, 193, 64, 64), HEADS(1, 1), .mask = CAUSAL, NORM},
    {.name = "nq97_nkv289_d32", SIZES(97, 289, 32, 32), HEADS(1, 1), .mask = FULL, TTAB(50)},
    /* head widths, dv != d */
    {.name = "d1_causal", SIZES(50, 50, 1, 1), HEADS(2, 2), .mask = CAUSAL, BETA(0.1f)},
    {.name = "d3_dv1", SIZES(50, 50, 3, 1), HEADS(2, 2), .mask = CAUSAL, CTAB(7)},
    {.name = "d65_dv3_causal", SIZES(50, 50, 65, 3), HEADS(2, 2), .mask = CAUSAL},
    {.name = "d64_dv7", SIZES(33, 33, 64, 7), HEADS(1, 1), .mask = FULL, NORM},
    {.name = "d8_dv65", SIZES(49, 70, 8, 65), HEADS(2, 1), .mask = FULL, TTAB(9)},
    {.name = "d1_dv128_causal", SIZES(20, 20, 1, 128), HEADS(1, 1), .mask = CAUSAL, BETA(0.5f)},
    /* heads: GQA, MQA */
    {.name = "gqa_4_2_causal", SIZES(37, 37, 16, 16), HEADS(4, 2), .mask = CAUSAL, CTAB(8), NORM},
    {.name = "mqa_6_1", SIZES(50, 50, 64, 32), HEADS(6, 1), .mask = FULL, BETA(0.1f)},
    {.name = "mqa_6_1_causal_ttab", SIZES(50, 50, 8, 8), HEADS(6, 1), .mask = CAUSAL, TTAB(5)},
    /* chunked prefill (n_q < n_kv) and decode, bottom-right */
    {.name = "chunk_16_of_100", SIZES(16, 100, 32, 32), HEADS(2, 1), .mask = CAUSAL, CTAB(40)},
    {.name = "chunk_49_of_145_norm", SIZES(49, 145, 8, 8), HEADS(1, 1), .mask = CAUSAL, NORM},
    {.name = "decode_1_of_97_gqa", SIZES(1, 97, 64, 64), HEADS(4, 2), .mask = CAUSAL, CTAB(64)},
    {.name = "decode_1_of_130_ttab", SIZES(1, 130, 16, 16), HEADS(2, 1), .mask = CAUSAL, TTAB(20), NORM},
    {.name = "decode_1_of_1", SIZES(1, 1, 16, 16), HEADS(2, 1), .mask = CAUSAL, BETA(0.5f)},
    /* n_q > n_kv: the first n_q - n_kv rows sit at negative positions */
    {.name = "nq40_nkv10_causal", SIZES(40, 10, 16, 16), HEADS(1, 1), .mask = CAUSAL, NORM},
    {.name = "nq97_nkv48_causal_ctab", SIZES(97, 48, 8, 8), HEADS(2, 1), .mask = CAUSAL, CTAB(10)},
    {.name = "nq30_nkv7_full_ttab", SIZES(30, 7, 8, 8), HEADS(1, 1), .mask = FULL, TTAB(6), NORM},
    /* windows (left, right) */
    {.name = "win_3_0", SIZES(70, 70, 16, 16), HEADS(2, 1), .mask = WINDOW(3, 0), BETA(0.2f)},
    {.name = "win_3_0_norm_ctab", SIZES(130, 130, 8, 8), HEADS(1, 1), .mask = WINDOW(3, 0), CTAB(3), NORM},
    {.name = "win_17_2", SIZES(130, 130, 16, 16), HEADS(1, 1), .mask = WINDOW(17, 2), TTAB(5)},
    {.name = "win_17_2_chunked", SIZES(33, 130, 16, 16), HEADS(2, 2), .mask = WINDOW(17, 2), NORM},
    {.name = "win_5_9", SIZES(97, 97, 9, 9), HEADS(1, 1), .mask = WINDOW(5, 9), TTAB(12), NORM},
    {.name = "win_0_U", SIZES(49, 49, 8, 8), HEADS(1, 1), .mask = WINDOW(0, U), CTAB(4)},
    {.name = "win_U_4", SIZES(97, 97, 8, 8), HEADS(2, 1), .mask = WINDOW(U, 4), TTAB(7), NORM},
    {.name = "win_0_0_nq_gt_nkv", SIZES(20, 8, 8, 8), HEADS(1, 1), .mask = WINDOW(0, 0), BETA(0.3f)},
    {.name = "win_2_5_decode", SIZES(1, 50, 8, 8), HEADS(1, 1), .mask = WINDOW(2, 5), TTAB(3)},
    /* chunk-local masks (chunks counted from key 0) */
    {.name = "chunk4_full", SIZES(10, 10, 8, 8), HEADS(1, 1), .mask = MASK(U, U, 4), BETA(0.1f)},
    {.name = "chunk4_causal", SIZES(10, 10, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 4), NORM},
    {.name = "chunk4_full_130_ttab", SIZES(130, 130, 16, 16), HEADS(2, 1), .mask = MASK(U, U, 4), TTAB(4)},
    {.name = "chunk7_full", SIZES(97, 97, 16, 16), HEADS(2, 2), .mask = MASK(U, U, 7), NORM},
    {.name = "chunk7_causal_ctab", SIZES(100, 100, 16, 16), HEADS(2, 1), .mask = MASK(U, 0, 7), CTAB(7)},
    {.name = "chunk7_causal_chunked", SIZES(30, 130, 9, 9), HEADS(1, 1), .mask = MASK(U, 0, 7), NORM},
    {.name = "chunk7_decode", SIZES(1, 100, 64, 64), HEADS(4, 2), .mask = MASK(U, 0, 7), CTAB(7)},
    {.name = "chunk3_causal_nq_gt_nkv", SIZES(20, 8, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 3), NORM},
    {.name = "chunk64_causal", SIZES(200, 200, 16, 16), HEADS(1, 1), .mask = MASK(U, 0, 64), CTAB(64)},
    {.name = "chunk100_full_gqa", SIZES(130, 130, 8, 12), HEADS(4, 2), .mask = MASK(U, U, 100), TTAB(100)},
    /* bias: beta of both signs and 0, tables with L = 1 and L above the lengths */
    {.name = "beta_pos", SIZES(49, 49, 16, 16), HEADS(1, 1), .mask = CAUSAL, BETA(1.0f)},
    {.name = "beta_neg", SIZES(49, 49, 16, 16), HEADS(1, 1), .mask = FULL, BETA(-0.3f)},
    {.name = "beta_0_norm", SIZES(49, 49, 16, 16), HEADS(1, 1), .mask = CAUSAL, BETA(0.0f), NORM},
    {.name = "ctab_L1", SIZES(50, 50, 8, 8), HEADS(1, 1), .mask = CAUSAL, CTAB(1)},
    {.name = "ctab_L1_full", SIZES(50, 50, 8, 8), HEADS(1, 1), .mask = FULL, CTAB(1)},
    {.name = "ttab_L1", SIZES(50, 50, 8, 8), HEADS(1, 1), .mask = FULL, TTAB(1), NORM},
    {.name = "ctab_full_reads_0_ahead", SIZES(60, 60, 8, 8), HEADS(1, 1), .mask = FULL, CTAB(20)},
    {.name = "ttab_L_gt_n", SIZES(40, 40, 8, 8), HEADS(1, 1), .mask = FULL, TTAB(300), .amp = 2.0f},
    {.name = "ctab_L_gt_n_chunked", SIZES(20, 60, 8, 8), HEADS(1, 1), .mask = CAUSAL, CTAB(1000), .amp = 2.0f},
    /* scales */
    {.name = "scale_-0.5", SIZES(33, 33, 16, 16), HEADS(1, 1), .mask = FULL, SCALE(-0.5f), BETA(0.2f)},
    {.name = "scale_0_causal", SIZES(20, 20, 8, 8), HEADS(1, 1), .mask = CAUSAL, SCALE(0.0f), CTAB(8)},
    {.name = "scale_3_norm", SIZES(40, 40, 32, 32), HEADS(1, 1), .mask = FULL, SCALE(3.0f), NORM},
    /* large arguments: |x| up to ~1e3 (scale 10 on q.k ~ 95; wide data: q.k up to ~3e3 / sqrt(8)) */
    {.name = "large_d64", SIZES(65, 65, 64, 64), HEADS(1, 1), .mask = FULL, SCALE(10.0f), .data = LRG},
    {.name = "large_d8_causal_norm", SIZES(49, 49, 8, 8), HEADS(2, 1), .mask = CAUSAL, SCALE(10.0f), .data = LRG, NORM},
    {.name = "wide_d8_causal", SIZES(97, 97, 8, 8), HEADS(1, 1), .mask = CAUSAL, .data = WIDE, CTAB(9), .amp = 50.0f},
    {.name = "wide_d1_full", SIZES(97, 97, 1, 1), HEADS(1, 1), .mask = FULL, .data = WIDE, BETA(-100.0f)},
    {.name = "wide_d65_chunk7", SIZES(60, 60, 65, 65), HEADS(1, 1), .mask = MASK(U, 0, 7), .data = WIDE, NORM},
    {.name = "positive_d64_norm", SIZES(100, 100, 64, 64), HEADS(1, 1), .mask = CAUSAL, .data = POS, NORM},
    /* layouts: head-major, prime padding, packed QKV [n][3][H][d] */
    {.name = "head_major", SIZES(37, 37, 16, 16), HEADS(2, 2), .mask = CAUSAL, .layout = H, CTAB(5)},
    {.name = "head_major_gqa", SIZES(50, 60, 8, 12), HEADS(4, 2), .mask = FULL, .layout = H, NORM},
    {.name = "padded_causal", SIZES(49, 49, 13, 11), HEADS(2, 1), .mask = CAUSAL, .layout = P, TTAB(6)},
    {.name = "head_padded", SIZES(33, 33, 7, 9), HEADS(3, 1), .mask = WINDOW(5, 9), .layout = HP, BETA(0.2f)},
    {.name = "packed_mha_causal", SIZES(40, 40, 16, 16), HEADS(4, 4), .mask = CAUSAL, .layout = PK, NORM},
    {.name = "packed_gqa_chunk4", SIZES(41, 41, 8, 8), HEADS(4, 2), .mask = MASK(U, U, 4), .layout = PK, CTAB(4)},
    {.name = "packed_mqa_dv", SIZES(30, 30, 64, 32), HEADS(6, 1), .mask = CAUSAL, .layout = PK, TTAB(8)},
};
#define GAU_NCASES (sizeof gau_cases / sizeof gau_cases[0])
static size_t gau_sel[GAU_NCASES];

/* Inputs, table and descriptor of a case. */
typedef struct gau_setup {
  tu_qkv x;
  float *table;
  attn_gau_desc d;
} gau_setup;

static void gau_setup_make(gau_setup *s, const gau_case *c, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_qkv_make(&s->x, c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  s->table = gau_table_make(c->bias, c->bias_len, c->amp, &rng);
  gau_desc(&s->d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->mask);
  if (c->set_scale) s->d.scale = c->scale;
  s->d.bias = c->bias;
  s->d.beta = c->beta;
  s->d.bias_table = s->table;
  s->d.bias_len = c->bias_len;
  s->d.normalize = c->normalize;
}

static void gau_setup_free(gau_setup *s) {
  tu_qkv_free(&s->x);
  free(s->table);
}

/* Runs a call (gau_call, output in okind) and compares it with the reference. */
static void gau_check_call(const char *what, const attn_gau_desc *d, const tu_qkv *x, tu_layout_kind okind,
                           size_t misalign) {
  tu_tensor o;
  gau_call(d, &x->q, &x->k, &x->v, okind, misalign, &o);
  tu_qkv_assert_unchanged(x);
  gau_ref ref;
  gau_ref_compute(d, &x->q, &x->k, &x->v, &ref);
  gau_compare("gau.o", what, &o, ref.o, &ref, d->shape.n_kv, d->shape.d, 1.0);
  gau_ref_free(&ref);
  tu_tensor_free(&o);
}

START_TEST(gau_matches_reference) {
  const size_t idx = gau_sel[_i];
  const gau_case *c = &gau_cases[idx];
  gau_setup s;
  gau_setup_make(&s, c, 1000 + idx);
  gau_check_call(c->name, &s.d, &s.x, c->layout == PK ? T : c->layout, gau_misalign[idx % 4]);
  gau_setup_free(&s);
}
END_TEST

/* Inputs may overlap one another: q = k = v, one buffer. */
START_TEST(gau_shared_inputs) {
  tu_rng rng;
  tu_rng_seed(&rng, 77);
  tu_tensor t;
  tu_tensor_alloc(&t, T, 45, 2, 16, 0);
  tu_tensor_fill(&t, &rng, -1.0f, 1.0f);
  float *table = gau_table_make(ATTN_GAU_BIAS_CAUSAL, 10, 0.0f, &rng);
  attn_gau_desc d;
  gau_desc(&d, 45, 45, 2, 2, 16, 16, attn_mask_causal());
  d.bias = ATTN_GAU_BIAS_CAUSAL;
  d.bias_table = table;
  d.bias_len = 10;
  tu_tensor o;
  gau_call(&d, &t, &t, &t, T, 0, &o);
  gau_ref ref;
  gau_ref_compute(&d, &t, &t, &t, &ref);
  gau_compare("gau.o", "q=k=v", &o, ref.o, &ref, 45, 16, 1.0);
  gau_ref_free(&ref);
  tu_tensor_free(&o);
  tu_tensor_free(&t);
  free(table);
}
END_TEST

/* A decode query's row stride is unconstrained (the count of rows is 1): 0 is valid. */
START_TEST(gau_decode_row_stride_zero) {
  tu_rng rng;
  tu_rng_seed(&rng, 78);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, 1, 30, 4, 2, 2, 8, 8);
  x.q.l.row_stride = 0;
  attn_gau_desc d;
  gau_desc(&d, 1, 30, 4, 2, 8, 8, attn_mask_causal());
  d.normalize = 1;
  gau_check_call("q row stride 0", &d, &x, T, 0);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The named forms                                                                             */
/* ------------------------------------------------------------------------------------------ */
/* FLASH's quadratic part (Hua et al. 2022): scale 1/n with n a training-length constant (1/512,
 * never the current number of keys) or 1/g of the chunk-local mask, a relative-position table
 * (the causal Toeplitz one, or an expanded two-sided one for the bidirectional form), t = 1.
 * Wide data makes q.k ~ +-1e3, so that q.k / 512 is of the order of the bias. */
static const gau_case flash_cases[] = {
    {.name = "flash causal 1/512 Toeplitz L=128",
     SIZES(200, 200, 64, 64),
     HEADS(1, 1),
     .mask = CAUSAL,
     SCALE(1.0f / 512),
     .data = WIDE,
     CTAB(128),
     .amp = 1.0f},
    {.name = "flash causal 1/n_kv GQA",
     SIZES(97, 97, 32, 32),
     HEADS(2, 1),
     .mask = CAUSAL,
     SCALE(1.0f / 97),
     .data = WIDE,
     CTAB(64),
     .amp = 1.0f},
    {.name = "flash chunk g=64 causal 1/64",
     SIZES(150, 150, 32, 32),
     HEADS(1, 1),
     .mask = MASK(U, 0, 64),
     SCALE(1.0f / 64),
     .data = WIDE,
     CTAB(64),
     .amp = 1.0f},
    {.name = "flash chunk g=4 bidirectional 1/4 two-sided",
     SIZES(130, 130, 16, 16),
     HEADS(1, 1),
     .mask = MASK(U, U, 4),
     SCALE(0.25f),
     .data = WIDE,
     TTAB(4),
     .amp = 1.0f},
    {.name = "flash decode chunk g=32",
     SIZES(1, 100, 64, 64),
     HEADS(4, 2),
     .mask = MASK(U, 0, 32),
     SCALE(1.0f / 512),
     .data = WIDE,
     CTAB(32),
     .amp = 1.0f},
};
#define FLASH_NCASES (sizeof flash_cases / sizeof flash_cases[0])

START_TEST(gau_flash_quad) {
  gau_setup s;
  gau_setup_make(&s, &flash_cases[_i], 1500 + (uint64_t)_i);
  ck_assert_int_eq(s.d.normalize, 0);
  gau_check_call(flash_cases[_i].name, &s.d, &s.x, T, gau_misalign[_i % 4]);
  gau_setup_free(&s);
}
END_TEST

/* Su's form (bert4keras): scale 1/sqrt(d) (the descriptor's default), causal, normalised by the
 * count: row i = sum_{j <= i} relu(q_i . k_j / sqrt(d))^2 v_j / (i + 1). Checked against the
 * reference and against that closed formula, written out here (n_q = n_kv, no bias). */
static const struct {
  size_t n, h_q, h_kv, d, dv;
} su_cases[] = {{97, 1, 1, 64, 64}, {130, 4, 2, 7, 9}, {49, 2, 2, 128, 16}};
#define SU_NCASES (sizeof su_cases / sizeof su_cases[0])

START_TEST(gau_su_form) {
  const size_t n = su_cases[_i].n, hq = su_cases[_i].h_q, hkv = su_cases[_i].h_kv, dd = su_cases[_i].d,
               dv = su_cases[_i].dv;
  tu_rng rng;
  tu_rng_seed(&rng, 1600 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  attn_gau_desc d;
  gau_desc(&d, n, n, hq, hkv, dd, dv, attn_mask_causal());
  d.normalize = 1;
  tu_tensor o;
  gau_call(&d, &x.q, &x.k, &x.v, T, 4, &o);
  gau_ref ref;
  gau_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
  gau_compare("gau.o", "Su's form vs reference", &o, ref.o, &ref, n, dd, 1.0);
  /* the closed formula, in double, with the exact 1/sqrt(d) (the descriptor holds it rounded to
   * float: a relative 2u on each square, inside the bound's constant) */
  double *su = malloc(sizeof(double) * n * hq * dv);
  ck_assert_ptr_nonnull(su);
  for (size_t i = 0; i < n; ++i)
    for (size_t h = 0; h < hq; ++h)
      for (size_t c = 0; c < dv; ++c) {
        double acc = 0.0;
        for (size_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (size_t f = 0; f < dd; ++f)
            dot += (double)*tu_at(&x.q, i, h, f) * (double)*tu_at(&x.k, j, h / (hq / hkv), f);
          const double r = fmax(dot / sqrt((double)dd), 0.0);
          acc += r * r * (double)*tu_at(&x.v, j, h / (hq / hkv), c);
        }
        su[(i * hq + h) * dv + c] = acc / (double)(i + 1);
      }
  gau_compare("gau.o", "Su's form vs closed formula", &o, su, &ref, n, dd, 1.0);
  free(su);
  gau_ref_free(&ref);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* Chunk-local masks with g = 4 over n = 10 (chunks {0..3}, {4..7}, {8, 9}), bidirectional and
 * causal: q = k = 1 (d = 1), scale 1, beta 0 make every visible weight exactly 1, and v_j = j + 1,
 * so that o_i is exactly the sum of (j + 1) over the keys row i sees (small integers: exact in
 * any order), and with normalize the mean of them. The expectation is written from the chunk
 * definition, not with the reference's mask. Also n_q = 3 < n_kv (rows at positions 7, 8, 9). */
START_TEST(gau_chunk_local_g4_n10) {
  enum { N = 10, G = 4 };
  float q[N], k[N], v[N];
  for (int j = 0; j < N; ++j) {
    q[j] = k[j] = 1.0f;
    v[j] = (float)(j + 1);
  }
  for (int form = 0; form < 8; ++form) {
    const int causal = form & 1, normalize = (form >> 1) & 1, nq = (form & 4) ? 3 : N;
    attn_gau_desc d;
    gau_desc(&d, (size_t)nq, N, 1, 1, 1, 1, (attn_mask)MASK(U, causal ? 0 : U, G));
    d.scale = 1.0f;
    d.normalize = normalize;
    tu_tensor qt = {.data = q + (N - nq), .n = (size_t)nq, .h = 1, .w = 1, .l = {1, 1}, .span = (size_t)nq};
    tu_tensor kt = {.data = k, .n = N, .h = 1, .w = 1, .l = {1, 1}, .span = N};
    tu_tensor vt = {.data = v, .n = N, .h = 1, .w = 1, .l = {1, 1}, .span = N};
    tu_tensor o;
    gau_call(&d, &qt, &kt, &vt, T, 0, &o);
    for (int i = 0; i < nq; ++i) {
      const int p = N - nq + i;
      double sum = 0.0, count = 0.0;
      for (int j = 0; j < N; ++j)
        if (j / G == p / G && (!causal || j <= p)) {
          sum += j + 1;
          count += 1.0;
        }
      const double want = normalize ? sum / count : sum, got = (double)*tu_at(&o, (size_t)i, 0, 0);
      ck_assert_msg(normalize ? fabs(got - want) <= 4.0 * TOL_U * want : got == want,
                    "chunk 4, n_q %d, %s%s: row %d (position %d): got %.9g, want %.9g", nq,
                    causal ? "causal" : "bidirectional", normalize ? ", normalised" : "", i, p, got, want);
    }
    tu_tensor_free(&o);
  }
}
END_TEST

/* The bias lookups read back exactly: q = 0 makes every score exactly the bias, and v = I (dv =
 * n_kv) puts the weight of key j in column j: o_ij = A_ij = relu(bias_ij)^2 where j is visible, 0
 * elsewhere. Table entries are multiples of 1/8 (their squares are exact floats), so the library
 * must match exactly, for both table kinds with L = 1, L = 3 (clamped) and L above the lengths,
 * the scalar beta, full / causal / windowed / chunk-local masks, n_q = n_kv and n_q < n_kv. */
START_TEST(gau_bias_lookup_exact) {
  static const struct {
    attn_gau_bias kind;
    size_t len;
    float beta;
  } biases[] = {{ATTN_GAU_BIAS_CAUSAL, 1, 0},     {ATTN_GAU_BIAS_CAUSAL, 3, 0},    {ATTN_GAU_BIAS_CAUSAL, 20, 0},
                {ATTN_GAU_BIAS_TWO_SIDED, 1, 0},  {ATTN_GAU_BIAS_TWO_SIDED, 3, 0}, {ATTN_GAU_BIAS_TWO_SIDED, 20, 0},
                {ATTN_GAU_BIAS_SCALAR, 0, 0.375f}};
  static const attn_mask masks[] = {FULL, CAUSAL, WINDOW(2, 3), MASK(U, U, 5)};
  enum { NKV = 12, D = 3 };
  float table[39];
  for (int t = 0; t < 39; ++t) table[t] = 0.125f * (float)((t * 7) % 13 - 4); /* -0.5 .. 1, varied */
  tu_rng rng;
  tu_rng_seed(&rng, 1700);
  tu_tensor q, k, v;
  tu_tensor_alloc(&q, T, NKV, 1, D, 0);
  tu_tensor_alloc(&k, T, NKV, 1, D, 0);
  tu_tensor_alloc(&v, T, NKV, 1, NKV, 0);
  tu_tensor_fill(&k, &rng, -1.0f, 1.0f);
  for (size_t i = 0; i < NKV; ++i) {
    for (size_t c = 0; c < D; ++c) *tu_at(&q, i, 0, c) = 0.0f;
    for (size_t c = 0; c < NKV; ++c) *tu_at(&v, i, 0, c) = i == c ? 1.0f : 0.0f;
  }
  for (size_t b = 0; b < sizeof biases / sizeof biases[0]; ++b)
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; ++m)
      for (size_t nq = NKV; nq > 0; nq = nq == NKV ? 5 : 0) { /* 12, then 5 */
        attn_gau_desc d;
        gau_desc(&d, nq, NKV, 1, 1, D, NKV, masks[m]);
        d.bias = biases[b].kind;
        d.beta = biases[b].beta;
        d.bias_table = biases[b].kind == ATTN_GAU_BIAS_SCALAR ? NULL : table;
        d.bias_len = biases[b].len;
        const tu_tensor qv = tu_rows_view(&q, NKV - nq, nq);
        tu_tensor o;
        gau_call(&d, &qv, &k, &v, T, 0, &o);
        const ref_gau_problem p = tu_gau_problem(&d, &qv, &k, &v);
        for (size_t i = 0; i < nq; ++i)
          for (size_t j = 0; j < NKV; ++j) {
            const double want = ref_gau_weight(&p, i, 0, j), got = (double)*tu_at(&o, i, 0, j);
            ck_assert_msg(got == want, "bias %zu (kind %d, L %zu), mask %zu, n_q %zu: A[%zu][%zu] got %.9g want %.9g",
                          b, (int)biases[b].kind, biases[b].len, m, nq, i, j, got, want);
          }
        tu_tensor_free(&o);
      }
  tu_tensor_free(&q);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}
END_TEST

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
  tu_rng rng;
  tu_rng_seed(&rng, 1900);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, D, D);
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
  tu_rng rng;
  tu_rng_seed(&rng, seed);
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

/* Decode steps (n_q = 1 over the first t + 1 keys) reproduce the rows of the full prefill: the
 * step's query sits at the same position, so the same mask, chunk and bias offsets apply. */
START_TEST(gau_decode_matches_prefill) {
  const size_t ci = gau_decode_sel[_i];
  const gau_prop_case *c = &gau_props[ci];
  gau_full f;
  gau_full_make(&f, c, 2000 + (uint64_t)ci);
  const size_t hd = c->h_q * c->dv;
  for (size_t t = 0; t < c->n; ++t) {
    attn_gau_desc d;
    gau_prop_desc(&d, c, 1, t + 1, f.table);
    const tu_tensor q = tu_rows_view(&f.x.q, t, 1), k = tu_rows_view(&f.x.k, 0, t + 1),
                    v = tu_rows_view(&f.x.v, 0, t + 1);
    tu_tensor o;
    gau_call(&d, &q, &k, &v, T, gau_misalign[t % 4], &o);
    const gau_ref sc = gau_ref_at(&f.ref, t * hd);
    char what[128];
    snprintf(what, sizeof what, "decode step %zu vs prefill row", t);
    gau_compare("gau.prop", what, &o, f.got + t * hd, &sc, c->n, c->d, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  tu_qkv_assert_unchanged(&f.x);
  gau_full_free(&f);
}
END_TEST

/* Chunked prefill (rows [start, n) over all n keys, n_q < n_kv) equals those rows of the full
 * call, for every mask. */
START_TEST(gau_chunked_matches_prefill) {
  const gau_prop_case *c = &gau_props[_i];
  gau_full f;
  gau_full_make(&f, c, 3000 + (uint64_t)_i);
  const size_t nq = c->n - c->start, hd = c->h_q * c->dv;
  attn_gau_desc d;
  gau_prop_desc(&d, c, nq, c->n, f.table);
  const tu_tensor q = tu_rows_view(&f.x.q, c->start, nq);
  tu_tensor o;
  gau_call(&d, &q, &f.x.k, &f.x.v, T, 4, &o);
  const gau_ref sc = gau_ref_at(&f.ref, c->start * hd);
  gau_compare("gau.prop", "chunked prefill vs prefill rows", &o, f.got + c->start * hd, &sc, c->n, c->d,
              TOL_PROPERTY_FACTOR);
  tu_tensor_free(&o);
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
  const size_t hd = c->h_q * c->dv;
  size_t a = c->start / 2 + 1, b = c->start + (c->n - c->start) / 2;
  if (a > c->n - 1) a = c->n - 1;
  if (b <= a) b = a + (c->n - a) / 2;
  const size_t cuts[4] = {0, a, b, c->n};
  for (int piece = 0; piece < 3; ++piece) {
    const size_t r0 = cuts[piece], r1 = cuts[piece + 1];
    if (r1 <= r0) continue;
    const size_t nkv = r1;
    attn_gau_desc d;
    gau_prop_desc(&d, c, r1 - r0, nkv, f.table);
    const tu_tensor q = tu_rows_view(&f.x.q, r0, r1 - r0), k = tu_rows_view(&f.x.k, 0, nkv),
                    v = tu_rows_view(&f.x.v, 0, nkv);
    tu_tensor o;
    gau_call(&d, &q, &k, &v, T, gau_misalign[piece], &o);
    const gau_ref sc = gau_ref_at(&f.ref, r0 * hd);
    char what[128];
    snprintf(what, sizeof what, "piece [%zu, %zu) over %zu keys vs one call", r0, r1, nkv);
    gau_compare("gau.prop", what, &o, f.got + r0 * hd, &sc, c->n, c->d, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
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
  tu_rng rng;
  tu_rng_seed(&rng, 6000 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, 2, 1, 1, c->d, c->d);
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
  tu_rng rng;
  tu_rng_seed(&rng, 6100);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, NQ, NKV, HQ, 1, 1, DD, DD);
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
    tu_rng rng;
    tu_rng_seed(&rng, 9500 + (uint64_t)form);
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_POSITIVE, &rng, N, N, 1, 1, 1, DD, DD);
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
    tu_rng rng;
    tu_rng_seed(&rng, 9000 + (uint64_t)_i);
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
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

/* ------------------------------------------------------------------------------------------ */
/* Descriptor defaults, workspace                                                              */
/* ------------------------------------------------------------------------------------------ */
START_TEST(gau_desc_init_defaults) {
  attn_gau_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_gau_desc_init(&d, 5, 9, 6, 2, 64, 40), ATTN_OK);
  attn_shape want;
  ck_assert_int_eq(attn_shape_init(&want, 5, 9, 6, 2, 2, 64, 40), ATTN_OK); /* h_k = h_v = h_kv */
  tu_assert_same_bits("gau shape defaults", &want, &d.shape, sizeof want);
  ck_assert(d.mask.left == ATTN_UNBOUNDED && d.mask.right == ATTN_UNBOUNDED && d.mask.chunk == 0);
  ck_assert(fabs((double)d.scale - 0.125) <= 0x1p-24);
  ck_assert_int_eq(d.bias, ATTN_GAU_BIAS_SCALAR);
  ck_assert(d.beta == 0.0f);
  ck_assert_ptr_null(d.bias_table);
  ck_assert_uint_eq(d.bias_len, 0);
  ck_assert_int_eq(d.normalize, 0);
  ck_assert_int_eq(attn_gau_desc_init(&d, 3, 3, 1, 1, 7, 7), ATTN_OK);
  ck_assert(fabs((double)d.scale - 1.0 / sqrt(7.0)) <= 0x1p-24);
  ck_assert_int_eq(attn_gau_desc_init(NULL, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER);
}
END_TEST

/* The size depends on d, dv, the heads and the path, not on n_q or n_kv (nor on the bias or the
 * normalisation, which need no per-row memory beyond softmax's). */
START_TEST(gau_workspace_independent_of_lengths) {
  static const size_t n[][2] = {{1, 1}, {7, 3}, {100, 1000}, {1000, 100}, {48, 96}};
  static const float table[9] = {0};
  size_t first = 0;
  for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
    attn_gau_desc d;
    gau_desc(&d, n[i][0], n[i][1], 4, 2, 64, 32, attn_mask_causal());
    if (i % 2) {
      d.bias = ATTN_GAU_BIAS_TWO_SIDED;
      d.bias_table = table;
      d.bias_len = 5;
      d.normalize = 1;
    }
    size_t ws = 0;
    ck_assert_int_eq(attn_gau_workspace_size(&d, &ws), ATTN_OK);
    if (i == 0) first = ws;
    ck_assert_uint_eq(ws, first);
  }
}
END_TEST

START_TEST(gau_workspace_size_null_pointers) {
  attn_gau_desc d;
  ck_assert_int_eq(attn_gau_desc_init(&d, 5, 7, 4, 2, 8, 6), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_gau_workspace_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_gau_workspace_size(&d, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

/* The scalar bias reads no table: a table pointer to NaNs with L = 0 beside SCALAR is ignored. */
START_TEST(gau_scalar_bias_ignores_table_fields) {
  static const float nan_table[3] = {NAN, NAN, NAN};
  tu_rng rng;
  tu_rng_seed(&rng, 7100);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, 30, 30, 2, 1, 1, 8, 8);
  attn_gau_desc d;
  gau_desc(&d, 30, 30, 2, 1, 8, 8, attn_mask_causal());
  d.beta = 0.25f;
  d.bias_table = nan_table;
  d.bias_len = 0;
  gau_check_call("scalar bias beside a NaN table, L 0", &d, &x, T, 0);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid call (causal mask, a causal bias table of */
/* L = 5, normalised): every shared row of bad_input.h (no lse), then GAU's own; the call (and,  */
/* for descriptor faults, attn_gau_workspace_size) answers the row's status and writes nothing. */
/* ------------------------------------------------------------------------------------------ */
typedef enum bv_kind {
  BV_NORMALIZE_2 = TU_BAD_OWN,
  BV_NORMALIZE_NEG,
  BV_BIAS_KIND_3,
  BV_BIAS_KIND_NEG,
  BV_BETA_NAN,
  BV_BETA_INF,
  BV_BETA_NINF,
  BV_TABLE_NULL,
  BV_TABLE_NULL_TWO_SIDED,
  BV_L_0,
  BV_L_0_TWO_SIDED,
  BV_L_OVERFLOW_TWO_SIDED,
  BV_TABLE_NAN_FIRST,
  BV_TABLE_NAN_LAST,
  BV_TABLE_INF_LAST_TWO_SIDED,
  BV_TABLE_NINF_MIDDLE_TWO_SIDED,
  BV_O_IS_TABLE,
  BV_O_OVER_TABLE_END
} bv_kind;

/* desc_level 1: attn_gau_workspace_size must answer the same status (every validation status but
 * those of the pointers: the bias table's pointer, length and entries are part of the descriptor) */
#define BV(k, s, lvl) .fault = (k), .expect = (s), .desc_level = (lvl)
static const tu_bad_case bv_cases[] = {
    {.name = "normalize 2", BV(BV_NORMALIZE_2, ATTN_E_BAD_ARGUMENT, 1)},
    {.name = "normalize -1", BV(BV_NORMALIZE_NEG, ATTN_E_BAD_ARGUMENT, 1)},
    {.name = "bias kind 3", BV(BV_BIAS_KIND_3, ATTN_E_BAD_BIAS, 1)},
    {.name = "bias kind -1", BV(BV_BIAS_KIND_NEG, ATTN_E_BAD_BIAS, 1)},
    {.name = "beta NaN", BV(BV_BETA_NAN, ATTN_E_BAD_BIAS, 1)},
    {.name = "beta +inf", BV(BV_BETA_INF, ATTN_E_BAD_BIAS, 1)},
    {.name = "beta -inf", BV(BV_BETA_NINF, ATTN_E_BAD_BIAS, 1)},
    {.name = "causal table NULL", BV(BV_TABLE_NULL, ATTN_E_BAD_BIAS, 1)},
    {.name = "two-sided table NULL", BV(BV_TABLE_NULL_TWO_SIDED, ATTN_E_BAD_BIAS, 1)},
    {.name = "causal table L 0", BV(BV_L_0, ATTN_E_BAD_BIAS, 1)},
    {.name = "two-sided table L 0", BV(BV_L_0_TWO_SIDED, ATTN_E_BAD_BIAS, 1)},
    {.name = "two-sided table 2L - 1 overflows", BV(BV_L_OVERFLOW_TWO_SIDED, ATTN_E_BAD_BIAS, 1)},
    {.name = "causal table[0] NaN", BV(BV_TABLE_NAN_FIRST, ATTN_E_BAD_BIAS, 1)},
    {.name = "causal table[L-1] NaN", BV(BV_TABLE_NAN_LAST, ATTN_E_BAD_BIAS, 1)},
    {.name = "two-sided table[2L-2] +inf", BV(BV_TABLE_INF_LAST_TWO_SIDED, ATTN_E_BAD_BIAS, 1)},
    {.name = "two-sided table[L] -inf", BV(BV_TABLE_NINF_MIDDLE_TWO_SIDED, ATTN_E_BAD_BIAS, 1)},
    {.name = "o is the bias table", BV(BV_O_IS_TABLE, ATTN_E_ALIASING, 0)},
    {.name = "o ends inside the bias table", BV(BV_O_OVER_TABLE_END, ATTN_E_ALIASING, 0)},
};
#define BV_NOWN (sizeof bv_cases / sizeof bv_cases[0])

enum { NQ = 5, NKV = 7, HQ = 4, HKV = 2, D = 8, DV = 6, BL = 5 };
/* the table buffer: 2 BL - 1 entries used; room for an o span (NQ HQ DV = 120) on either side */
enum { TABLE_BUF = 512, TABLE_AT = 200 };

/* Applies one of GAU's own faults to the descriptor, the table buffer or the call's o. */
static void gau_bad_apply(tu_bad *b, int fault, attn_gau_desc *d, float *tbuf) {
  switch ((bv_kind)fault) {
    case BV_NORMALIZE_2:
      d->normalize = 2;
      break;
    case BV_NORMALIZE_NEG:
      d->normalize = -1;
      break;
    case BV_BIAS_KIND_3:
      d->bias = (attn_gau_bias)3;
      break;
    case BV_BIAS_KIND_NEG:
      d->bias = (attn_gau_bias)-1;
      break;
    case BV_BETA_NAN:
      d->bias = ATTN_GAU_BIAS_SCALAR;
      d->beta = NAN;
      break;
    case BV_BETA_INF:
      d->bias = ATTN_GAU_BIAS_SCALAR;
      d->beta = INFINITY;
      break;
    case BV_BETA_NINF:
      d->bias = ATTN_GAU_BIAS_SCALAR;
      d->beta = -INFINITY;
      break;
    case BV_TABLE_NULL:
      d->bias_table = NULL;
      break;
    case BV_TABLE_NULL_TWO_SIDED:
      d->bias = ATTN_GAU_BIAS_TWO_SIDED;
      d->bias_table = NULL;
      break;
    case BV_L_0:
      d->bias_len = 0;
      break;
    case BV_L_0_TWO_SIDED:
      d->bias = ATTN_GAU_BIAS_TWO_SIDED;
      d->bias_len = 0;
      break;
    case BV_L_OVERFLOW_TWO_SIDED:
      d->bias = ATTN_GAU_BIAS_TWO_SIDED;
      d->bias_len = SIZE_MAX / 2 + 1;
      break;
    case BV_TABLE_NAN_FIRST:
      tbuf[TABLE_AT] = NAN;
      break;
    case BV_TABLE_NAN_LAST:
      tbuf[TABLE_AT + BL - 1] = NAN;
      break;
    case BV_TABLE_INF_LAST_TWO_SIDED: /* beyond the L entries a causal table would read */
      d->bias = ATTN_GAU_BIAS_TWO_SIDED;
      tbuf[TABLE_AT + 2 * BL - 2] = INFINITY;
      break;
    case BV_TABLE_NINF_MIDDLE_TWO_SIDED:
      d->bias = ATTN_GAU_BIAS_TWO_SIDED;
      tbuf[TABLE_AT + BL] = -INFINITY;
      break;
    case BV_O_IS_TABLE:
      b->o_arg = tbuf + TABLE_AT;
      break;
    case BV_O_OVER_TABLE_END: /* o's span (NQ HQ DV floats) ends on the table's last entry */
      b->o_arg = tbuf + TABLE_AT + BL - NQ * HQ * DV;
      break;
    default:
      break; /* a shared fault (tu_bad_apply) */
  }
}

START_TEST(gau_rejects_bad_input) {
  const tu_bad_case *c = tu_bad_row((size_t)_i, 0, bv_cases);
  tu_rng rng;
  tu_rng_seed(&rng, 100 + (uint64_t)_i);
  float *tbuf = malloc(sizeof(float) * TABLE_BUF), *tcopy = malloc(sizeof(float) * TABLE_BUF);
  ck_assert(tbuf && tcopy);
  for (size_t e = 0; e < TABLE_BUF; ++e) tbuf[e] = tu_rng_range(&rng, -0.5f, 0.5f);
  attn_gau_desc d;
  ck_assert_int_eq(attn_gau_desc_init(&d, NQ, NKV, HQ, HKV, D, DV), ATTN_OK);
  d.mask = attn_mask_causal();
  d.bias = ATTN_GAU_BIAS_CAUSAL;
  d.bias_table = tbuf + TABLE_AT;
  d.bias_len = BL;
  d.normalize = 1;
  size_t need = 0;
  ck_assert_int_eq(attn_gau_workspace_size(&d, &need), ATTN_OK);
  tu_bad b;
  tu_bad_make(&b, &rng, &d.shape, 2, 0, need);
  tu_bad_apply(&b, c->fault, &d.shape, &d.scale, NULL);
  gau_bad_apply(&b, c->fault, &d, tbuf);
  memcpy(tcopy, tbuf, sizeof(float) * TABLE_BUF);
  const attn_gau_desc *dp = b.desc_null ? NULL : &d;
  tu_bad_assert_status(c, "attn_gau", attn_gau(dp, b.q, b.k, b.v, b.o_arg, b.ws_arg, b.ws_size));
  size_t bytes = TU_BAD_UNTOUCHED;
  tu_bad_assert_query(c, "attn_gau_workspace_size", attn_gau_workspace_size(&d, &bytes), bytes);
  /* nothing written: o still all sentinel, inputs and the table unchanged, guards intact */
  tu_bad_assert_untouched(&b);
  tu_assert_same_bits("bias table buffer after a rejected call", tcopy, tbuf, sizeof(float) * TABLE_BUF);
  tu_bad_free(&b);
  free(tbuf);
  free(tcopy);
}
END_TEST

static Suite *gau_suite(attn_isa isa) {
  Suite *s = suite_create(attn_isa_name(isa));
  size_t work[GAU_NCASES];
  for (size_t i = 0; i < GAU_NCASES; ++i) {
    const gau_case *c = &gau_cases[i];
    work[i] = c->n_q * c->n_kv * c->h_q * (c->d + c->dv);
  }
  const size_t nsel = tu_select_rows(GAU_NCASES, work, gau_sel);
  size_t ndecode = 0;
  for (size_t i = 0; i < GAU_NPROPS; ++i)
    if (gau_props[i].mask.right == 0) gau_decode_sel[ndecode++] = i;
  TCase *tc = tu_tcase("reference");
  tcase_add_loop_test(tc, gau_matches_reference, 0, (int)nsel);
  tcase_add_test(tc, gau_shared_inputs);
  tcase_add_test(tc, gau_decode_row_stride_zero);
  tcase_add_loop_test(tc, gau_flash_quad, 0, (int)FLASH_NCASES);
  tcase_add_loop_test(tc, gau_su_form, 0, (int)SU_NCASES);
  tcase_add_test(tc, gau_chunk_local_g4_n10);
  tcase_add_test(tc, gau_bias_lookup_exact);
  suite_add_tcase(s, tc);
  tc = tu_tcase("sparsity");
  tcase_add_test(tc, gau_very_negative_bias_gives_zeros);
  tcase_add_test(tc, gau_beta_zero_partial_sparsity);
  suite_add_tcase(s, tc);
  tc = tu_tcase("mask");
  tcase_add_loop_test(tc, gau_mask_skips_outside_keys, 0, (int)SKIP_NCASES);
  tcase_add_test(tc, gau_rows_without_keys_are_empty);
  suite_add_tcase(s, tc);
  tc = tu_tcase("properties");
  tcase_add_loop_test(tc, gau_decode_matches_prefill, 0, (int)ndecode);
  tcase_add_loop_test(tc, gau_chunked_matches_prefill, 0, (int)GAU_NPROPS);
  tcase_add_loop_test(tc, gau_pieces_match_one_call, 0, (int)ndecode);
  suite_add_tcase(s, tc);
  tc = tu_tcase("nonfinite");
  tcase_add_test(tc, gau_nonfinite_small_cases);
  tcase_add_test(tc, gau_nonfinite_score_in_unmasked_block);
  tcase_add_loop_test(tc, gau_nonfinite_policy, 0, (int)NF_NCASES);
  suite_add_tcase(s, tc);
  tc = tu_tcase("api");
  tcase_add_test(tc, gau_desc_init_defaults);
  tcase_add_test(tc, gau_workspace_independent_of_lengths);
  tcase_add_test(tc, gau_workspace_size_null_pointers);
  tcase_add_test(tc, gau_scalar_bias_ignores_table_fields);
  suite_add_tcase(s, tc);
  tc = tu_tcase("bad_input");
  tcase_add_loop_test(tc, gau_rejects_bad_input, 0, (int)tu_bad_rows(0, BV_NOWN));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_main(gau_suite); }
