/*
 * The explicit analysis functions (attn.h, analysis; spec 7): attn_matrix and attn_matrix_stats
 * with their workspace queries, on the ISA path named by ATTN_ISA, against the float64 references
 * of every variant (tests/ref). TCases: "reference" (the case table: every kind and its forms,
 * odd sizes, masked pairs, rows without keys, the NaN rows of the statistics), "api" (the size
 * limit, the workspace queries, reentrancy). "bad_input" (the exact status of every bad argument,
 * nothing written): check_analysis_bad_input.c; the helpers of both: tests/common/analysis_util.h.
 *
 * REFERENCE. Every variant's output is linear in V, so its float64 reference with V = the
 * identity (dv = n_kv, one identity per value head) is the reference matrix: ref_softmax,
 * ref_linear_ex, ref_gated, ref_gau and ref_selective, each computed from its own definition
 * (tests/ref), never from the library's matrix. FLASH's chunk-exclusive linear form: each row is
 * the bidirectional reference of its query over the keys of the earlier chunks (check_linear.c's
 * reference of that form).
 *
 * TOLERANCES (tests/common/tolerances.h). The matrix is the variant's output for V = I, so each
 * element is compared with that variant's own output bound and the reference's error scales for
 * that V: softmax tol_softmax_o (scale oscale = the weight itself), linear tol_linear_o /
 * tol_linear_xp_o, gated tol_gated, GAU tol_gau_bound, selective tol_selective_o. A masked pair
 * has a zero scale, hence a zero bound: it must be exactly 0 (and so must every element of a row
 * that sees no key).
 * Statistics, two comparisons:
 *  - against ref_row_stats_of on the LIBRARY's own matrix (attn_matrix on the same path: the
 *    same numbers), which isolates the statistics: they are computed in double and rounded
 *    once to float, so entropy and sparsity within 2^-23 of their value (one rounding, plus a
 *    margin for a different summation order in double), the count exactly;
 *  - against ref_row_stats_of on the REFERENCE matrix, with a bound propagated from the matrix
 *    bounds e_j (|w'_j - w_j| <= e_j, the bounds just asserted): with W = sum |w_j|, E = sum e_j,
 *    the distributions p = |w| / W and p' = |w'| / W' are T = 1/2 |p - p'|_1 <= E / (W - E) apart,
 *    and the entropy moves by at most T log(n - 1) + h(T) (the Fannes-Audenaert continuity bound,
 *    h the binary entropy, n the visible keys); sparsity W / (sqrt(n) |w|_2) moves within
 *    [(W - E) / (sqrt(n) (|w|_2 + |e|_2)), (W + E) / (sqrt(n) (|w|_2 - |e|_2))] (triangle
 *    inequality of both norms); plus 2u of the value for the final rounding. Where the relative
 *    error of the row is too large for a bound (E >= W), the documented ranges [0, log n] and
 *    [1/sqrt(n), 1] are asserted instead. NaN where the reference is NaN (no visible key, W = 0,
 *    a non-finite weight), and the count exactly (the mask's, whatever the weights).
 * OBSERVED (ATTN_TEST_REPORT=1; gcc 12 -O3 release, x86-64: AVX2 native, NEON through SIMDe):
 * max err/scale [largest share of the bound]
 *   family               scalar             avx2               neon
 *   analysis.softmax     3.55e-05 [0.51]    4.37e-05 [0.63]    3.55e-05 [0.51]   (large logits, d 64)
 *   analysis.linear      3.87e-07 [0.12]    4.87e-07 [0.11]    4.87e-07 [0.12]
 *   analysis.gau         1.40e-04 [0.25]    1.91e-04 [0.22]    1.40e-04 [0.25]
 *   analysis.selective   4.82e-06 [0.09]    4.72e-06 [0.09]    4.72e-06 [0.09]
 *   entropy, sparsity vs the library's matrix: [0.49] on every path (one rounding to float: at
 *   most half of 2^-23); vs the reference matrix: [0.007] and [0.033] (the propagated bounds are
 *   worst cases). Softmax uses more of its bound than check_softmax's o (0.27): with V = I an
 *   element is one weight, whose logit error no sum over values averages out.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis_util.h"
#include "linear_util.h"
#include "ref/ref_gated.h"
#include "ref/ref_selective.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

/* ------------------------------------------------------------------------------------------ */
/* Case table                                                                                  */
/* ------------------------------------------------------------------------------------------ */
/* Every field left out is the default: token-major uniform inputs, token-major matrix, the
 * descriptor's default scale; linear: normalised; GAU: scalar bias 0. */
typedef struct an_case {
  const char *name;
  attn_kind kind;
  size_t n_q, n_kv, h_q, h_kv, d;
  size_t h_v, h_g; /* linear: value heads (0: h_kv) and gate heads */
  attn_mask mask;  /* selective and gated rows state CAUSAL (their only mask) */
  tu_layout_kind layout, alayout;
  tu_data data;
  float scale;
  int set_scale;
  /* linear */
  attn_feature_map map;
  int unnorm;
  size_t xchunk, m;
  int favor_seed; /* favor: W from a seed (written by attn_linear_favor_matrix); else the caller's */
  attn_gate_kind gate;
  int beta, retnet; /* retnet: SCALAR gate of attn_retnet_log_decays, gate row stride 0 */
  /* GAU */
  attn_gau_bias bias;
  float gbeta;
  size_t bias_len;
  int gnorm;
  /* selective */
  int carried; /* F of the keys before the call (random, non-negative) */
  size_t h_sel;
  /* a non-finite input: q (1) or k (2) element [ptok][phead][0] = pval */
  int poison;
  size_t ptok, phead;
  float pval;
  int nan_rows; /* the case must have rows with NaN statistics */
} an_case;

#define SM                 .kind = ATTN_KIND_SOFTMAX
#define LIN                .kind = ATTN_KIND_LINEAR
#define GAU                .kind = ATTN_KIND_GAU
#define SEL                .kind = ATTN_KIND_SELECTIVE
#define HEADS(q, kv)       .h_q = (q), .h_kv = (kv)
#define DIMS(nq, nkv, dd)  .n_q = (nq), .n_kv = (nkv), .d = (dd)
#define MAP(x)             .map = ATTN_FEATURE_##x
#define UNNORM             .unnorm = 1
#define RAW                MAP(IDENTITY), UNNORM
#define GATED(g)           .mask = CAUSAL, .gate = ATTN_GATE_##g
#define NAN_ROWS           .nan_rows = 1
#define XCHUNK(g)          .xchunk = (g)
#define CTAB(l)            .bias = ATTN_GAU_BIAS_CAUSAL, .bias_len = (l)
#define TTAB(l)            .bias = ATTN_GAU_BIAS_TWO_SIDED, .bias_len = (l)
#define POISON(w, t, h, x) .poison = (w), .ptok = (t), .phead = (h), .pval = (x), .nan_rows = 1

static const an_case an_cases[] = {
    /* softmax: full, causal, window, chunk-local, GQA, n_q < n_kv and n_q > n_kv, large logits */
    {.name = "sm_n1", SM, DIMS(1, 1, 1), HEADS(1, 1), .mask = FULL},
    {.name = "sm_n7_full_hm", SM, DIMS(7, 7, 7), HEADS(2, 2), .mask = FULL, .alayout = H},
    {.name = "sm_n37_causal_gqa_padded", SM, DIMS(37, 37, 16), HEADS(4, 2), .mask = CAUSAL, .layout = P, .alayout = P},
    {.name = "sm_n97_window_5_2", SM, DIMS(97, 97, 8), HEADS(2, 1), .mask = WINDOW(5, 2)},
    {.name = "sm_n40_chunk7_causal", SM, DIMS(40, 40, 8), HEADS(1, 1), .mask = MASK(U, 0, 7), .alayout = HP},
    {.name = "sm_chunked_10_of_97", SM, DIMS(10, 97, 64), HEADS(4, 2), .mask = CAUSAL},
    {.name = "sm_decode_1_of_97_mqa", SM, DIMS(1, 97, 32), HEADS(4, 1), .mask = CAUSAL},
    {.name = "sm_nq20_nkv7_causal", SM, DIMS(20, 7, 8), HEADS(2, 1), .mask = CAUSAL, .nan_rows = 1},
    {.name = "sm_large_logits", SM, DIMS(37, 37, 64), HEADS(1, 1), .mask = FULL, .data = LRG, SCALE(1.0f)},
    {.name = "sm_packed_causal", SM, DIMS(37, 37, 8), HEADS(2, 1), .mask = CAUSAL, .layout = PK},
    {.name = "sm_n200_causal_gqa", SM, DIMS(200, 200, 16), HEADS(2, 1), .mask = CAUSAL},
    /* linear: every map, bidirectional, causal, windowed, chunk-exclusive, separate heads */
    {.name = "lin_identity_unnorm_full", LIN, DIMS(37, 37, 8), HEADS(2, 2), .mask = FULL, MAP(IDENTITY), UNNORM},
    {.name = "lin_elu1_causal", LIN, DIMS(37, 37, 16), HEADS(1, 1), .mask = CAUSAL, MAP(ELU1), .alayout = H},
    {.name = "lin_relu_window_4_0", LIN, DIMS(40, 40, 8), HEADS(2, 1), .mask = WINDOW(4, 0), MAP(RELU)},
    {.name = "lin_relu_unnorm_n97_gqa", LIN, DIMS(97, 97, 8), HEADS(4, 2), .mask = CAUSAL, MAP(RELU), UNNORM},
    {.name = "lin_exp_causal", LIN, DIMS(37, 37, 8), HEADS(1, 1), .mask = CAUSAL, MAP(EXP)},
    {.name = "lin_exp_window_6_3", LIN, DIMS(40, 40, 8), HEADS(1, 1), .mask = WINDOW(6, 3), MAP(EXP)},
    {.name = "lin_favor_full_caller", LIN, DIMS(20, 30, 4), HEADS(2, 1), .mask = FULL, MAP(FAVOR)},
    {.name = "lin_favor_causal_seed", LIN, DIMS(37, 37, 8), HEADS(1, 1), .mask = CAUSAL, MAP(FAVOR), .favor_seed = 1},
    {.name = "lin_dsoftmax_causal", LIN, DIMS(37, 37, 8), HEADS(1, 1), .mask = CAUSAL, MAP(DSOFTMAX)},
    {.name = "lin_dsoftmax_full", LIN, DIMS(20, 20, 7), HEADS(2, 2), .mask = FULL, MAP(DSOFTMAX)},
    {.name = "lin_flash_exclusive_4", LIN, DIMS(37, 37, 8), HEADS(1, 1), .mask = CAUSAL, RAW, XCHUNK(4), SCALE(0.25f)},
    {.name = "lin_exclusive_7_chunked_elu1", LIN, DIMS(10, 40, 8), HEADS(2, 1), .mask = CAUSAL, MAP(ELU1), .xchunk = 7},
    {.name = "lin_heads_4_2_4_elu1", LIN, DIMS(37, 37, 8), HEADS(4, 2), .h_v = 4, .mask = CAUSAL, MAP(ELU1)},
    {.name = "lin_elu1_causal_n200", LIN, DIMS(200, 200, 8), HEADS(1, 1), .mask = CAUSAL, MAP(ELU1)},
    {.name = "lin_nq20_nkv7_causal", LIN, DIMS(20, 7, 8), HEADS(1, 1), .mask = CAUSAL, MAP(ELU1), .nan_rows = 1},
    /* gated linear: scalar gate, RetNet's fixed decays (gate row stride 0), per-feature gate, beta */
    {.name = "gated_scalar", LIN, DIMS(37, 37, 8), HEADS(1, 1), RAW, GATED(SCALAR)},
    {.name = "gated_retnet", LIN, DIMS(40, 40, 8), HEADS(4, 4), RAW, GATED(SCALAR), .retnet = 1},
    {.name = "gated_gla_feature_elu1", LIN, DIMS(37, 37, 8), HEADS(1, 1), MAP(ELU1), GATED(FEATURE)},
    {.name = "gated_mamba2_beta", LIN, DIMS(37, 37, 8), HEADS(1, 1), .h_v = 4, .h_g = 4, RAW, GATED(SCALAR), .beta = 1},
    {.name = "gated_chunked_7_of_97_relu_beta", LIN, DIMS(7, 97, 8), HEADS(2, 2), MAP(RELU), GATED(SCALAR), .beta = 1},
    /* GAU: scalar bias, both tables, normalised, chunk-local (FLASH's quadratic part) */
    {.name = "gau_scalar_full", GAU, DIMS(37, 37, 16), HEADS(2, 1), .mask = FULL, .gbeta = 0.1f},
    {.name = "gau_causal_table", GAU, DIMS(40, 40, 8), HEADS(1, 1), .mask = CAUSAL, CTAB(8)},
    {.name = "gau_two_sided_table", GAU, DIMS(37, 37, 8), HEADS(2, 2), .mask = FULL, TTAB(5), .alayout = P},
    {.name = "gau_su_normalised_n97", GAU, DIMS(97, 97, 16), HEADS(1, 1), .mask = CAUSAL, .gnorm = 1, .gbeta = 0.05f},
    {.name = "gau_flash_chunk8", GAU, DIMS(40, 40, 8), HEADS(1, 1), .mask = MASK(U, 0, 8), CTAB(8), SCALE(0.125f)},
    {.name = "gau_window_17_2_n200", GAU, DIMS(200, 200, 16), HEADS(1, 1), .mask = WINDOW(17, 2), TTAB(5), .gnorm = 1},
    {.name = "gau_nq20_nkv7_causal", GAU, DIMS(20, 7, 8), HEADS(1, 1), .mask = CAUSAL, .gbeta = 0.2f, .nan_rows = 1},
    {.name = "gau_negative_bias_zero_rows",
     GAU,
     DIMS(20, 20, 8),
     HEADS(2, 1),
     .mask = CAUSAL,
     .gbeta = -1e2f,
     NAN_ROWS},
    /* selective: a fresh sequence, a carried F, decode */
    {.name = "sel_n1", SEL, DIMS(1, 1, 4), HEADS(1, 1), .mask = CAUSAL},
    {.name = "sel_fresh_gqa", SEL, DIMS(37, 37, 16), HEADS(4, 2), .mask = CAUSAL, .h_sel = 1},
    {.name = "sel_carried_10_of_40", SEL, DIMS(10, 40, 8), HEADS(2, 1), .mask = CAUSAL, .carried = 1},
    {.name = "sel_decode_1_of_97", SEL, DIMS(1, 97, 8), HEADS(2, 2), .mask = CAUSAL, .carried = 1, .h_sel = 1},
    {.name = "sel_fresh_n130", SEL, DIMS(130, 130, 8), HEADS(2, 1), .mask = CAUSAL},
    {.name = "sel_nq20_nkv7", SEL, DIMS(20, 7, 8), HEADS(1, 1), .mask = CAUSAL, .nan_rows = 1},
    /* non-finite inputs: the rows that use them are NaN, the others unaffected */
    {.name = "nf_sm_q_nan", SM, DIMS(20, 20, 8), HEADS(2, 1), .mask = CAUSAL, POISON(1, 5, 1, NAN)},
    {.name = "nf_sm_k_inf", SM, DIMS(20, 20, 8), HEADS(2, 1), .mask = WINDOW(3, 0), POISON(2, 9, 0, INFINITY)},
    {.name = "nf_lin_k_nan", LIN, DIMS(20, 20, 8), HEADS(1, 1), .mask = CAUSAL, MAP(ELU1), POISON(2, 9, 0, NAN)},
    {.name = "nf_gau_k_ninf",
     GAU,
     DIMS(20, 20, 8),
     HEADS(1, 1),
     .mask = MASK(U, U, 8),
     .gbeta = 0.1f,
     POISON(2, 3, 0, -INFINITY)},
    {.name = "nf_sel_q_sel_nan", SEL, DIMS(20, 20, 8), HEADS(2, 1), .mask = CAUSAL, POISON(1, 4, 0, NAN)},
};
#define AN_NCASES (sizeof an_cases / sizeof an_cases[0])
static size_t an_sel[AN_NCASES];

/* The row of a case by name (the tests beside the table pick theirs so). */
static size_t an_find(const char *name) {
  for (size_t i = 0; i < AN_NCASES; ++i)
    if (!strcmp(an_cases[i].name, name)) return i;
  ck_abort_msg("no case %s", name);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Inputs and calls                                                                            */
/* ------------------------------------------------------------------------------------------ */
typedef struct an_inputs {
  tu_qkv x;       /* q and k (v is not an input of the analysis) */
  tu_tensor vI;   /* the identity [n_kv][h_v][n_kv]: the references' V */
  tu_tensor g, b; /* log gates and beta (data NULL: none) */
  float *table;   /* GAU's bias table */
  float *favor_w; /* FAVOR+'s W, m x d */
  float *f;       /* selective: F on entry (NULL: fresh) */
  const float *extra[4];
  size_t extra_n[4], nextra;
  float *copy[4]; /* snapshots of the extra inputs */
  an_desc d;      /* the reference's descriptor: dv = n_kv, v the identity */
  an_desc cd;     /* the call's: dv 0 and v, o {0, 0} (documented as ignored) */
  attn_call call;
  size_t heads, h_v; /* output heads H, value heads */
} an_inputs;

static void an_extra(an_inputs *in, const float *p, size_t n) {
  in->extra[in->nextra] = p;
  in->extra_n[in->nextra++] = n;
}

static void an_linear_make(const an_case *c, an_inputs *in, tu_rng *r, size_t idx) {
  attn_linear_desc *l = &in->d.lin;
  ck_assert_int_eq(attn_linear_desc_init(l, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->n_kv, c->map), ATTN_OK);
  ck_assert_int_eq(attn_shape_init(&l->shape, c->n_q, c->n_kv, c->h_q, c->h_kv, in->h_v, c->d, c->n_kv), ATTN_OK);
  l->mask = c->mask;
  l->normalize = !c->unnorm;
  l->exclusive_chunk = c->xchunk;
  l->m = c->m;
  if (c->set_scale) l->scale = c->scale;
  l->gate = c->gate;
  l->beta = c->beta;
  l->h_g = c->h_g;
  const size_t hg = lu_gate_heads(l);
  if (c->retnet) { /* one gamma per head for every token: row stride 0 */
    memset(&in->g, 0, sizeof in->g);
    in->g = (tu_tensor){an_floats(hg), c->n_kv, hg, 1, {0, 1}, hg, NULL, 0};
    in->g.owner = in->g.data;
    ck_assert_int_eq(attn_retnet_log_decays(hg, in->g.data), ATTN_OK);
  } else if (c->gate != ATTN_GATE_NONE) {
    tu_tensor_alloc(&in->g, T, c->n_kv, hg, c->gate == ATTN_GATE_FEATURE ? c->d : 1, 0);
    tu_tensor_fill(&in->g, r, -0.4f, 0.0f);
  }
  if (c->beta) {
    tu_tensor_alloc(&in->b, T, c->n_kv, hg, 1, 0);
    tu_tensor_fill(&in->b, r, 0.5f, 1.5f);
  }
  if (in->g.data) {
    l->gate_layout = in->g.l;
    an_extra(in, in->g.data, in->g.span);
  }
  if (in->b.data) {
    l->beta_layout = in->b.l;
    an_extra(in, in->b.data, in->b.span);
  }
  if (c->map != ATTN_FEATURE_FAVOR) return;
  const size_t m = c->m ? c->m : 4 * c->d, md = m * c->d;
  in->favor_w = an_floats(md);
  if (!c->favor_seed) {
    tu_fill_gauss(in->favor_w, md, r, 1.0);
    l->favor_source = ATTN_FAVOR_CALLER;
    l->favor_w = in->favor_w;
    an_extra(in, in->favor_w, md);
    return;
  }
  l->favor_seed = 1000 + idx; /* the reference reads the W that the seed gives */
  l->shape.q = in->x.q.l;
  l->shape.k = in->x.k.l;
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(l, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear_favor_matrix(l, in->favor_w, md, mem, ws), ATTN_OK);
  tu_free(mem);
}

/* The inputs, descriptors and call of a case (seeded by its index). */
static void an_make(const an_case *c, size_t idx, an_inputs *in) {
  memset(in, 0, sizeof *in);
  tu_rng r = tu_rng_of(31000 + idx);
  in->h_v = c->h_v ? c->h_v : c->h_kv;
  tu_qkv_make(&in->x, c->layout, c->data, &r, c->n_q, c->n_kv, c->h_q, c->h_kv, in->h_v, c->d, 1);
  if (c->poison) {
    *tu_at(c->poison == 1 ? &in->x.q : &in->x.k, c->ptok, c->phead, 0) = c->pval;
    tu_qkv_snapshot(&in->x);
  }
  an_desc *d = &in->d;
  switch (c->kind) {
    case ATTN_KIND_SOFTMAX:
      ck_assert_int_eq(attn_softmax_desc_init(&d->sm, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->n_kv), ATTN_OK);
      d->sm.mask = c->mask;
      if (c->set_scale) d->sm.scale = c->scale;
      break;
    case ATTN_KIND_LINEAR:
      an_linear_make(c, in, &r, idx);
      break;
    case ATTN_KIND_GAU:
      ck_assert_int_eq(attn_gau_desc_init(&d->gau, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->n_kv), ATTN_OK);
      d->gau.mask = c->mask;
      d->gau.bias = c->bias;
      d->gau.beta = c->gbeta;
      d->gau.normalize = c->gnorm;
      if (c->set_scale) d->gau.scale = c->scale;
      if (c->bias != ATTN_GAU_BIAS_SCALAR) {
        const size_t count = c->bias == ATTN_GAU_BIAS_CAUSAL ? c->bias_len : 2 * c->bias_len - 1;
        in->table = an_floats(count);
        for (size_t e = 0; e < count; ++e) in->table[e] = tu_rng_range(&r, -0.5f, 0.5f);
        d->gau.bias_table = in->table;
        d->gau.bias_len = c->bias_len;
        an_extra(in, in->table, count);
      }
      break;
    default:
      ck_assert_int_eq(attn_selective_desc_init(&d->sel, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->n_kv), ATTN_OK);
      d->sel.h_sel = c->h_sel;
      if (c->set_scale) d->sel.scale = c->scale;
      if (c->carried) { /* the keys before the call carry F; the call's own entries are never read */
        in->f = an_floats(c->n_kv);
        tu_fill_sentinel(in->f, c->n_kv);
        for (size_t j = 0; j + c->n_q < c->n_kv; ++j) in->f[j] = tu_rng_range(&r, 0.0f, 3.0f);
        an_extra(in, in->f, c->n_kv);
      }
      break;
  }
  tu_tensor_alloc(&in->vI, T, c->n_kv, in->h_v, c->n_kv, 0);
  for (size_t j = 0; j < c->n_kv; ++j)
    for (size_t h = 0; h < in->h_v; ++h)
      for (size_t col = 0; col < c->n_kv; ++col) *tu_at(&in->vI, j, h, col) = j == col ? 1.0f : 0.0f;
  d->shape.q = in->x.q.l;
  d->shape.k = in->x.k.l;
  d->shape.v = in->vI.l;
  in->heads = c->kind == ATTN_KIND_LINEAR ? lu_out_heads(&d->lin) : c->h_q;
  d->shape.o = (attn_layout){in->heads * c->n_kv, c->n_kv};
  in->cd = *d;
  in->cd.shape.dv = 0;
  in->cd.shape.v = in->cd.shape.o = (attn_layout){0, 0};
  in->call = (attn_call){c->kind, &in->cd, in->x.q.data, in->x.k.data, in->g.data, in->b.data, in->f};
  for (size_t e = 0; e < in->nextra; ++e) {
    in->copy[e] = an_floats(in->extra_n[e]);
    memcpy(in->copy[e], in->extra[e], sizeof(float) * in->extra_n[e]);
  }
}

static void an_assert_inputs_unchanged(const an_inputs *in) {
  tu_qkv_assert_unchanged(&in->x);
  for (size_t e = 0; e < in->nextra; ++e)
    tu_assert_same_bits("an input (gate, beta, W, bias table or f) after the call", in->copy[e], in->extra[e],
                        sizeof(float) * in->extra_n[e]);
}

static void an_free(an_inputs *in) {
  tu_qkv_free(&in->x);
  tu_tensor_free(&in->vI);
  tu_tensor_free(&in->g);
  tu_tensor_free(&in->b);
  free(in->table);
  free(in->favor_w);
  free(in->f);
  for (size_t e = 0; e < in->nextra; ++e) free(in->copy[e]);
}

/* Workspace misalignments (bytes) the calls cycle through. */
static const size_t an_misalign[4] = {0, 4, 1, 36};

/* attn_matrix into a fresh guarded, sentinel-filled [n_q][H][n_kv] tensor of layout kind, with a
 * workspace of exactly the queried size: ATTN_OK, guards intact, no gap written. */
static void an_matrix(const an_inputs *in, tu_layout_kind kind, size_t misalign, tu_tensor *a) {
  tu_tensor_alloc(a, kind, in->d.shape.n_q, in->heads, in->d.shape.n_kv, 1);
  size_t ws = 0;
  ck_assert_int_eq(attn_matrix_workspace_size(&in->call, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  const attn_status st = attn_matrix(&in->call, a->data, a->l, w, ws);
  ck_assert_msg(st == ATTN_OK, "attn_matrix: %s", attn_status_string(st));
  tu_assert_guards("matrix workspace", w);
  tu_free(w);
  tu_assert_output_clean("matrix a", a);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference matrix                                                                            */
/* ------------------------------------------------------------------------------------------ */
/* The reference matrix [n_q][H][n_kv], and per element the scale and tolerance of its bound. */
typedef struct an_ref {
  double *w, *scale, *tol;
  size_t count;
} an_ref;

static double *an_doubles(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  ck_assert_ptr_nonnull(p);
  return p;
}

static void an_ref_alloc(an_ref *r, size_t count) {
  r->count = count;
  r->w = an_doubles(count);
  r->scale = an_doubles(count);
  r->tol = an_doubles(count);
}

static void an_ref_free(an_ref *r) {
  free(r->w);
  free(r->scale);
  free(r->tol);
}

/* Scale and tolerance of a bound b on an element of scale s: the bound itself where s is 0 (b
 * must then be 0 too, or only a near-kink term is left: GAU). */
static void an_set_bound(an_ref *r, size_t e, double s, double b) {
  r->scale[e] = s > 0.0 ? s : 1.0;
  r->tol[e] = b / r->scale[e];
}

static void an_ref_softmax(const an_case *c, const an_inputs *in, an_ref *r) {
  const ref_softmax_problem p = tu_softmax_problem(&in->d.sm, &in->x.q, &in->x.k, &in->vI);
  double *sabs = an_doubles(c->n_q * c->h_q);
  ref_softmax(&p, r->w, NULL, r->scale, sabs);
  for (size_t e = 0; e < r->count; ++e) r->tol[e] = tol_softmax_o(c->n_kv, c->d, sabs[e / c->n_kv]);
  free(sabs);
}

static int an_xmap(attn_feature_map m) {
  return m == ATTN_FEATURE_EXP || m == ATTN_FEATURE_FAVOR || m == ATTN_FEATURE_DSOFTMAX;
}

/* Ungated linear attention over queries q and keys k (rows of the identity as V) into w, scale
 * and tol from element 0 on; n_keys: the keys behind the sums. */
static void an_ref_linear_rows(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                               const float *favor_w, double *w, double *scale, double *tol) {
  const size_t m = lu_feature_size(d), count = d->shape.n_q * lu_out_heads(d) * d->shape.dv;
  const ref_linear_problem p = lu_ref_problem(d, q, k, v, NULL, m, favor_w);
  double *arg = an_doubles(count);
  ref_linear_ex(&p, w, scale, arg);
  for (size_t e = 0; e < count; ++e)
    tol[e] =
        an_xmap(d->feature_map) ? tol_linear_xp_o(d->shape.n_kv, m, scale[e], arg[e]) : tol_linear_o(d->shape.n_kv, m);
  free(arg);
}

static int64_t an_floor_div(int64_t x, int64_t g) { return x / g - (x % g < 0); }

static void an_ref_linear(const an_case *c, const an_inputs *in, an_ref *r) {
  const attn_linear_desc *d = &in->d.lin;
  if (lu_gated(d)) {
    size_t chunk = 0;
    ck_assert_int_eq(attn_linear_chunk_size(d, &chunk), ATTN_OK);
    const ref_gated_problem p = lu_gated_problem(d, &in->x.q, &in->x.k, &in->vI, &in->g, &in->b, NULL, chunk, chunk);
    double *log = an_doubles(r->count), *step = an_doubles(r->count), *tiny = an_doubles(r->count);
    double *flr = an_doubles(r->count);
    const ref_gated_scales sc = {r->scale, log, step, tiny, flr};
    ref_gated(&p, r->w, &sc);
    for (size_t e = 0; e < r->count; ++e)
      r->tol[e] = tol_gated(c->n_kv, c->d, r->scale[e], log[e], step[e], tiny[e], flr[e]);
    free(flr);
    free(log);
    free(step);
    free(tiny);
    return;
  }
  if (!c->xchunk) {
    an_ref_linear_rows(d, &in->x.q, &in->x.k, &in->vI, in->favor_w, r->w, r->scale, r->tol);
    return;
  }
  /* chunk-exclusive: row i is the bidirectional call of its query over the keys before its chunk */
  const size_t row = in->heads * c->n_kv;
  for (size_t i = 0; i < c->n_q; ++i) {
    const int64_t pos = (int64_t)c->n_kv - (int64_t)c->n_q + (int64_t)i, g = (int64_t)c->xchunk;
    const size_t cs = pos < 0 ? 0 : (size_t)(an_floor_div(pos, g) * g);
    if (cs == 0) continue; /* no key: exactly 0 (scale and bound 0) */
    attn_linear_desc rd = *d;
    rd.exclusive_chunk = 0;
    rd.mask = attn_mask_full();
    rd.shape.n_q = 1;
    rd.shape.n_kv = cs;
    const tu_tensor q = tu_rows_view(&in->x.q, i, 1), k = tu_rows_view(&in->x.k, 0, cs),
                    v = tu_rows_view(&in->vI, 0, cs);
    an_ref_linear_rows(&rd, &q, &k, &v, in->favor_w, r->w + i * row, r->scale + i * row, r->tol + i * row);
  }
}

static void an_ref_gau(const an_case *c, const an_inputs *in, an_ref *r) {
  const ref_gau_problem p = tu_gau_problem(&in->d.gau, &in->x.q, &in->x.k, &in->vI);
  double *oscale = an_doubles(r->count), *oarg = an_doubles(r->count), *onear = an_doubles(r->count);
  ref_gau(&p, r->w, oscale, oarg, onear);
  for (size_t e = 0; e < r->count; ++e)
    an_set_bound(r, e, oscale[e], tol_gau_bound(c->n_kv, c->d, oscale[e], oarg[e], onear[e]));
  free(oscale);
  free(oarg);
  free(onear);
}

static void an_ref_selective(const an_case *c, const an_inputs *in, an_ref *r) {
  const ref_selective_problem p = tu_selective_problem(&in->d.sel, &in->x.q, &in->x.k, &in->vI, in->f);
  double *oscale = an_doubles(r->count), *oarg = an_doubles(r->count), *of = an_doubles(r->count);
  double *sabs = an_doubles(c->n_q * c->h_q);
  ref_selective_out out = {0};
  out.o = r->w;
  out.oscale = oscale;
  out.oarg = oarg;
  out.of = of;
  out.sabs = sabs;
  ref_selective(&p, &out);
  for (size_t e = 0; e < r->count; ++e)
    an_set_bound(r, e, oscale[e], tol_selective_o(c->n_kv, c->d, oscale[e], sabs[e / c->n_kv], oarg[e], of[e]));
  free(oscale);
  free(oarg);
  free(of);
  free(sabs);
}

static void an_reference(const an_case *c, const an_inputs *in, an_ref *r) {
  an_ref_alloc(r, c->n_q * in->heads * c->n_kv);
  switch (c->kind) {
    case ATTN_KIND_SOFTMAX:
      an_ref_softmax(c, in, r);
      break;
    case ATTN_KIND_LINEAR:
      an_ref_linear(c, in, r);
      break;
    case ATTN_KIND_GAU:
      an_ref_gau(c, in, r);
      break;
    default:
      an_ref_selective(c, in, r);
      break;
  }
}

static const char *an_family(attn_kind kind) {
  static const char *names[] = {"analysis.softmax", "analysis.linear", "analysis.gau", "analysis.selective"};
  return names[kind];
}

/* ------------------------------------------------------------------------------------------ */
/* Statistics                                                                                  */
/* ------------------------------------------------------------------------------------------ */
/* Key j visible to query i: the case's mask, and for the chunk-exclusive form only the keys of
 * earlier chunks (attn.h). */
static int an_visible(const an_case *c, size_t i, size_t j) {
  if (!ref_visible(i, j, c->n_q, c->n_kv, c->mask.left, c->mask.right, c->mask.chunk)) return 0;
  if (!c->xchunk) return 1;
  const int64_t pos = (int64_t)c->n_kv - (int64_t)c->n_q + (int64_t)i, g = (int64_t)c->xchunk;
  return an_floor_div((int64_t)j, g) < an_floor_div(pos, g);
}

/* Fannes-Audenaert: the entropies of two distributions over n outcomes T apart in total
 * variation differ by at most T log(n - 1) + h(T) (T <= 1 - 1/n; log n otherwise). */
static double an_entropy_bound(double tv, size_t n) {
  if (n <= 1 || tv <= 0.0) return 0.0;
  if (tv >= 1.0 - 1.0 / (double)n) return log((double)n);
  return tv * log((double)(n - 1)) - tv * log(tv) - (1.0 - tv) * log1p(-tv);
}

/* The expected statistics of one row: exactly ref_row_stats_of of the reference row, with the
 * bounds propagated from the element bounds e (see the header comment); *ranged: the bound is
 * too loose and only the documented ranges are asserted. */
typedef struct an_row_bound {
  ref_row_stats s;
  double be, bs;
  int ranged;
} an_row_bound;

static an_row_bound an_row_expect(const double *w, const double *e, const unsigned char *vis, size_t n_kv) {
  an_row_bound b = {ref_row_stats_of(w, vis, n_kv), 0.0, 0.0, 0};
  if (isnan(b.s.entropy)) return b;
  double W = 0.0, E = 0.0, w2 = 0.0, e2 = 0.0;
  for (size_t j = 0; j < n_kv; ++j) {
    if (!vis[j]) continue;
    W += fabs(w[j]);
    E += e[j];
    w2 += w[j] * w[j];
    e2 += e[j] * e[j];
  }
  const double n = b.s.count, rw = sqrt(w2), re = sqrt(e2);
  if (E >= W || re >= rw) {
    b.ranged = 1;
    return b;
  }
  b.be = an_entropy_bound(E / (W - E), (size_t)n) + 2.0 * TOL_U * b.s.entropy;
  const double hi = (W + E) / (sqrt(n) * (rw - re)), lo = (W - E) / (sqrt(n) * (rw + re));
  b.bs = fmax(hi - b.s.sparsity, b.s.sparsity - lo) + 2.0 * TOL_U * b.s.sparsity;
  return b;
}

/* attn_matrix_stats of a case against ref_row_stats_of of the library's own matrix a (tight) and
 * of the reference r (propagated bounds); the count exactly; the rows the case promises NaN. */
static void an_check_stats(const an_case *c, const an_inputs *in, const tu_tensor *a, const an_ref *r, size_t idx) {
  static const tu_layout_kind kinds[3] = {T, H, P};
  const size_t rows = c->n_q * in->heads, n = c->n_kv;
  an_stats st;
  an_stats_alloc(&st, kinds[idx % 3], c->n_q, in->heads);
  size_t ws = 0;
  ck_assert_int_eq(attn_matrix_stats_workspace_size(&in->call, &ws), ATTN_OK);
  void *w = tu_alloc(ws, an_misalign[(idx + 1) % 4]);
  const attn_status status = attn_matrix_stats(&in->call, &st.rs, w, ws);
  ck_assert_msg(status == ATTN_OK, "%s: attn_matrix_stats: %s", c->name, attn_status_string(status));
  tu_assert_guards("matrix_stats workspace", w);
  tu_free(w);
  an_assert_inputs_unchanged(in);
  tu_assert_output_clean("stats entropy", &st.e);
  tu_assert_output_clean("stats sparsity", &st.s);
  tu_assert_output_clean("stats count", &st.c);
  double *ent = an_doubles(rows), *spa = an_doubles(rows), *cnt = an_doubles(rows), *te = an_doubles(rows),
         *ts = an_doubles(rows), *one = an_doubles(rows), *row = an_doubles(n), *err = an_doubles(n);
  unsigned char *vis = malloc(n);
  ck_assert_ptr_nonnull(vis);
  char what[128];
  for (int pass = 0; pass < 2; ++pass) { /* 0: the library's own matrix, 1: the reference's */
    for (size_t i = 0; i < c->n_q; ++i)
      for (size_t h = 0; h < in->heads; ++h) {
        const size_t rr = i * in->heads + h, at = rr * n;
        for (size_t j = 0; j < n; ++j) {
          vis[j] = (unsigned char)an_visible(c, i, j);
          row[j] = pass ? r->w[at + j] : (double)*tu_at(a, i, h, j);
          err[j] = r->tol[at + j] * r->scale[at + j];
        }
        an_row_bound b = an_row_expect(row, err, vis, n);
        if (!pass) b.be = 0x1p-23 * fabs(b.s.entropy) + 0x1p-60, b.bs = 0x1p-23 * b.s.sparsity, b.ranged = 0;
        if (b.ranged) { /* the documented ranges: [0, log n] and [1/sqrt(n), 1] */
          const double ln = log(b.s.count), lo = 1.0 / sqrt(b.s.count);
          b.s.entropy = 0.5 * ln;
          b.be = 0.5 * ln + 1e-6;
          b.s.sparsity = 0.5 * (1.0 + lo);
          b.bs = 0.5 * (1.0 - lo) + 1e-6;
        }
        ent[rr] = b.s.entropy;
        spa[rr] = b.s.sparsity;
        cnt[rr] = b.s.count;
        te[rr] = b.be;
        ts[rr] = b.bs;
        one[rr] = 1.0;
      }
    snprintf(what, sizeof what, "%s: entropy vs the %s matrix", c->name, pass ? "reference" : "library's");
    tu_compare("analysis.entropy", what, &st.e, ent, one, te);
    snprintf(what, sizeof what, "%s: sparsity vs the %s matrix", c->name, pass ? "reference" : "library's");
    tu_compare("analysis.sparsity", what, &st.s, spa, one, ts);
    memset(te, 0, sizeof(double) * rows);
    snprintf(what, sizeof what, "%s: count (exact)", c->name);
    tu_compare("analysis.count", what, &st.c, cnt, one, te);
  }
  if (c->nan_rows) {
    size_t nan = 0;
    for (size_t i = 0; i < c->n_q; ++i)
      for (size_t h = 0; h < in->heads; ++h) nan += isnan(*tu_at(&st.e, i, h, 0)) && isnan(*tu_at(&st.s, i, h, 0));
    ck_assert_msg(nan > 0, "%s: no row with NaN statistics", c->name);
  }
  free(ent);
  free(spa);
  free(cnt);
  free(te);
  free(ts);
  free(one);
  free(row);
  free(err);
  free(vis);
  an_stats_free(&st);
}

/* ------------------------------------------------------------------------------------------ */
/* The reference table                                                                         */
/* ------------------------------------------------------------------------------------------ */
START_TEST(analysis_matches_reference) {
  const size_t idx = an_sel[_i];
  const an_case *c = &an_cases[idx];
  an_inputs in;
  an_make(c, idx, &in);
  tu_tensor a;
  an_matrix(&in, c->alayout, an_misalign[idx % 4], &a);
  an_assert_inputs_unchanged(&in);
  an_ref r;
  an_reference(c, &in, &r);
  tu_compare(an_family(c->kind), c->name, &a, r.w, r.scale, r.tol);
  an_check_stats(c, &in, &a, &r, idx);
  an_ref_free(&r);
  tu_tensor_free(&a);
  an_free(&in);
}
END_TEST

/* Only some of the three arrays: the others are not written (and may be NULL). */
START_TEST(analysis_stats_partial) {
  const size_t idx = an_find("sm_n37_causal_gqa_padded");
  const an_case *c = &an_cases[idx];
  an_inputs in;
  an_make(c, idx, &in);
  tu_tensor a;
  an_matrix(&in, T, 0, &a);
  size_t ws = 0;
  ck_assert_int_eq(attn_matrix_stats_workspace_size(&in.call, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 0);
  for (int which = 0; which < 3; ++which) {
    an_stats st;
    an_stats_alloc(&st, T, c->n_q, in.heads);
    attn_row_stats rs = st.rs;
    float *keep = which == 0 ? rs.entropy : which == 1 ? rs.sparsity : rs.count;
    rs.entropy = rs.sparsity = rs.count = NULL;
    *(which == 0 ? &rs.entropy : which == 1 ? &rs.sparsity : &rs.count) = keep;
    ck_assert_int_eq(attn_matrix_stats(&in.call, &rs, w, ws), ATTN_OK);
    const tu_tensor *t[3] = {&st.e, &st.s, &st.c};
    for (int o = 0; o < 3; ++o)
      for (size_t i = 0; i < c->n_q; ++i)
        for (size_t h = 0; h < in.heads; ++h) {
          const float x = *tu_at(t[o], i, h, 0);
          if (o != which) {
            ck_assert_msg(memcmp(&x, &(float){tu_sentinel()}, sizeof x) == 0, "array %d written", o);
          } else if (o == 2) {
            ck_assert(x == (float)(i + 1 + c->n_kv - c->n_q)); /* causal: keys 0 .. p_i */
          } else {
            ck_assert_msg(isfinite(x) && x >= 0.0f, "row %zu head %zu: %g", i, h, (double)x);
          }
        }
    an_stats_free(&st);
  }
  tu_assert_guards("matrix_stats workspace", w);
  tu_free(w);
  tu_tensor_free(&a);
  an_free(&in);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* API: the size limit, the queries, reentrancy                                                */
/* ------------------------------------------------------------------------------------------ */
START_TEST(analysis_size_limit_and_queries) {
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, 1, ATTN_MATRIX_MAX_KV, 2, 1, 8, 0), ATTN_OK);
  const attn_call call = {ATTN_KIND_SOFTMAX, &d, NULL, NULL, NULL, NULL, NULL};
  size_t b1 = 0, b2 = 0;
  /* at the limit the queries answer (the matrix workspace holds n_kv^2 floats of the identity) */
  ck_assert_int_eq(attn_matrix_workspace_size(&call, &b1), ATTN_OK);
  ck_assert_uint_ge(b1, (size_t)ATTN_MATRIX_MAX_KV * ATTN_MATRIX_MAX_KV * sizeof(float));
  ck_assert_int_eq(attn_matrix_stats_workspace_size(&call, &b2), ATTN_OK);
  ck_assert_uint_ge(b2, b1 + 2 * ATTN_MATRIX_MAX_KV * sizeof(float)); /* plus the n_q x H x n_kv matrix */
  /* one above it */
  d.shape.n_kv = ATTN_MATRIX_MAX_KV + 1;
  b1 = b2 = AN_UNTOUCHED;
  ck_assert_int_eq(attn_matrix_workspace_size(&call, &b1), ATTN_E_TOO_LARGE);
  ck_assert_int_eq(attn_matrix_stats_workspace_size(&call, &b2), ATTN_E_TOO_LARGE);
  ck_assert(b1 == AN_UNTOUCHED && b2 == AN_UNTOUCHED);
  /* a NULL output of a valid query */
  d.shape.n_kv = 5;
  ck_assert_int_eq(attn_matrix_workspace_size(&call, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_matrix_stats_workspace_size(&call, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

/* Concurrent calls on shared inputs with their own workspaces and outputs: the same bits as the
 * same calls one after another. */
typedef struct an_job {
  const attn_call *call;
  size_t n_q, heads, n_kv, ws;
} an_job;

static int an_job_run(const void *arg, float *out) {
  const an_job *j = arg;
  void *w = malloc(j->ws);
  if (!w) return -1;
  const attn_status st = attn_matrix(j->call, out, (attn_layout){j->heads * j->n_kv, j->n_kv}, w, j->ws);
  free(w);
  return st == ATTN_OK ? 0 : (int)st;
}

START_TEST(analysis_reentrant) {
  static const char *names[] = {"sm_n97_window_5_2", "lin_relu_unnorm_n97_gqa", "gated_gla_feature_elu1",
                                "gau_two_sided_table", "sel_carried_10_of_40"};
  const size_t idx = an_find(names[_i]);
  const an_case *c = &an_cases[idx];
  an_inputs in;
  an_make(c, idx, &in);
  an_job job = {&in.call, c->n_q, in.heads, c->n_kv, 0};
  ck_assert_int_eq(attn_matrix_workspace_size(&in.call, &job.ws), ATTN_OK);
  const void *args[4] = {&job, &job, &job, &job};
  tu_assert_reentrant(c->name, an_job_run, args, 4, c->n_q * in.heads * c->n_kv);
  an_free(&in);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"reference", analysis_matches_reference, (int)TU_SELECT_CASES(an_cases, an_sel, n_kv)},
    {"reference", analysis_stats_partial, 1},
  {"api", analysis_size_limit_and_queries, 1}, {"api", analysis_reentrant, 5})
/* clang-format on */
