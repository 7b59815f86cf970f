/*
 * Decayed and gated causal linear attention (attn_linear_gated, attn_retnet_log_decays; spec
 * VARIANTS.md section 4) on the ISA path named by ATTN_ISA, against the float64 reference of
 * tests/ref/ref_gated.c (explicit sums over the keys, every decay the exponential of the log-gate
 * sum of its own (key, query) pair). TCases: "reference" (the case table: maps, SCALAR and
 * FEATURE gates, beta, separate query / key / value / gate heads, sizes around the chunk sizes,
 * n_q != n_kv, incoming states, gate layouts, chunk sizes), "models" (RetNet against its parallel
 * form, Mamba2 against the SSD recurrence, both computed here in double), "properties" (chunkwise
 * vs token-by-token decode, prefill or random pieces then decode, per-feature gates with
 * equal entries vs the scalar gate, zero gates vs attn_linear), "extreme" (log gates of -5 and
 * -20 per token, decays below e^-300 within a chunk, features that do not decay beside features
 * that decay by e^-20 per token) and "bad_input" (the exact status of every bad argument, nothing
 * written).
 *
 * TOLERANCES: tests/common/tolerances.h (gated linear attention: the error model, its constants
 * and the figures observed), |got - expect| <= tol_gated(...) * abs with abs the reference's
 * error scale. A comparison of two library results (decode vs prefill, pieces vs one call,
 * per-feature vs scalar gates, zero gates vs attn_linear) allows each its bound:
 * TOL_PROPERTY_FACTOR (2) times the bound, with the error model of the finer computation
 * (step_chunk 1 when one side decodes token by token).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linear_util.h"
#include "ref/ref_gated.h"
#include "test_util.h"
#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* Heads, descriptors, tensors                                                                  */
/* ------------------------------------------------------------------------------------------ */
static void gt_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t h_g,
                    size_t dd, size_t dv, attn_feature_map fm, int normalize, attn_gate_kind gate, int beta,
                    size_t chunk) {
  ck_assert_int_eq(attn_linear_desc_init(d, n_q, n_kv, h_q, h_k, dd, dv, fm), ATTN_OK);
  ck_assert_int_eq(attn_shape_init(&d->shape, n_q, n_kv, h_q, h_k, h_v, dd, dv), ATTN_OK);
  d->mask = attn_mask_causal();
  d->normalize = normalize;
  d->chunk = chunk;
  d->gate = gate;
  d->h_g = h_g;
  d->beta = beta;
}

/* Layouts of the gate and beta tensors [n_kv][h_g][w] (w = m for FEATURE gates, 1 otherwise). */
typedef enum gt_glayout {
  GL_T = 0, /* token-major contiguous */
  GL_P,     /* padded: head w + 3, row h (w + 3) + 5 */
  GL_HM,    /* head-major: row w, head n w */
  GL_R0,    /* row stride 0 (the same gate for every token), head w */
  GL_R0P    /* row stride 0, padded heads w + 2 */
} gt_glayout;

static attn_layout gt_layout(gt_glayout kind, size_t n, size_t h, size_t w) {
  attn_layout l;
  switch (kind) {
    case GL_P:
      l.head_stride = w + 3;
      l.row_stride = h * (w + 3) + 5;
      break;
    case GL_HM:
      l.row_stride = w;
      l.head_stride = n * w;
      break;
    case GL_R0:
      l.row_stride = 0;
      l.head_stride = w;
      break;
    case GL_R0P:
      l.row_stride = 0;
      l.head_stride = w + 2;
      break;
    case GL_T:
    default:
      l.row_stride = h * w;
      l.head_stride = w;
      break;
  }
  return l;
}

/* An input tensor of exactly its span (no guard: ASan sees an over-read), gaps set to the
 * sentinel NaN: a library that reads a gap (or a row past n_kv) fails. */
static void gt_tensor_alloc(tu_tensor *t, gt_glayout kind, size_t n, size_t h, size_t w) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->h = h;
  t->w = w;
  t->l = gt_layout(kind, n, h, w);
  t->span = tu_span(n, h, w, t->l);
  t->owner = malloc(sizeof(float) * t->span);
  ck_assert_ptr_nonnull(t->owner);
  tu_fill_sentinel(t->owner, t->span);
  t->data = t->owner;
}

/* How log gates are drawn. */
typedef enum gt_fill {
  GF_UNIFORM = 0, /* uniform in [lo, hi) */
  GF_CONST,       /* lo everywhere */
  GF_SPLIT,       /* FEATURE: 0 in even features, lo in odd ones */
  GF_MIXED        /* FEATURE: odd features lo, even ones uniform in [-0.05, 0) */
} gt_fill;

typedef struct gt_gatespec {
  attn_gate_kind kind;
  int beta;
  gt_glayout layout;
  gt_fill fill;
  float lo, hi;
} gt_gatespec;

static void gt_fill_gates(tu_tensor *g, const gt_gatespec *s, tu_rng *r) {
  for (size_t t = 0; t < g->n; ++t)
    for (size_t h = 0; h < g->h; ++h)
      for (size_t f = 0; f < g->w; ++f) {
        float x = s->lo;
        switch (s->fill) {
          case GF_UNIFORM:
            x = tu_rng_range(r, s->lo, s->hi);
            break;
          case GF_CONST:
            break;
          case GF_SPLIT:
            x = f % 2 ? s->lo : 0.0f;
            break;
          case GF_MIXED:
            x = f % 2 ? s->lo : tu_rng_range(r, -0.05f, 0.0f);
            break;
        }
        *tu_at(g, t, h, f) = x;
      }
}

/* q, k, v, log gates and beta of one call (g.data / b.data NULL: no gate / no beta). */
typedef struct gt_inputs {
  tu_qkv x;
  tu_tensor g, b;
  float *gcopy, *bcopy;
} gt_inputs;

typedef struct gt_view {
  tu_tensor q, k, v, g, b;
} gt_view;

static void gt_inputs_snapshot(gt_inputs *in) {
  free(in->gcopy);
  free(in->bcopy);
  in->gcopy = in->bcopy = NULL;
  if (in->g.data) {
    in->gcopy = malloc(sizeof(float) * in->g.span);
    ck_assert_ptr_nonnull(in->gcopy);
    memcpy(in->gcopy, in->g.data, sizeof(float) * in->g.span);
  }
  if (in->b.data) {
    in->bcopy = malloc(sizeof(float) * in->b.span);
    ck_assert_ptr_nonnull(in->bcopy);
    memcpy(in->bcopy, in->b.data, sizeof(float) * in->b.span);
  }
  tu_qkv_snapshot(&in->x);
}

static void gt_inputs_make(gt_inputs *in, tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv,
                           const attn_linear_desc *d, const gt_gatespec *s) {
  memset(in, 0, sizeof *in);
  const attn_shape *sh = &d->shape;
  tu_qkv_make(&in->x, kind, data, r, n_q, n_kv, sh->h_q, sh->h_k, sh->h_v, sh->d, sh->dv);
  const size_t hg = lu_gate_heads(d);
  if (s->kind != ATTN_GATE_NONE) {
    gt_tensor_alloc(&in->g, s->layout, n_kv, hg, s->kind == ATTN_GATE_FEATURE ? sh->d : 1);
    gt_fill_gates(&in->g, s, r);
  }
  if (s->beta) {
    const gt_glayout bl = s->layout == GL_P || s->layout == GL_HM ? s->layout : GL_T;
    gt_tensor_alloc(&in->b, bl, n_kv, hg, 1);
    tu_tensor_fill(&in->b, r, 0.1f, 2.0f);
  }
  gt_inputs_snapshot(in);
}

static void gt_inputs_assert_unchanged(const gt_inputs *in) {
  tu_qkv_assert_unchanged(&in->x);
  if (in->g.data) tu_assert_same_bits("log gates (const) after the call", in->gcopy, in->g.data, 4 * in->g.span);
  if (in->b.data) tu_assert_same_bits("beta (const) after the call", in->bcopy, in->b.data, 4 * in->b.span);
}

static void gt_inputs_free(gt_inputs *in) {
  tu_qkv_free(&in->x);
  tu_tensor_free(&in->g);
  tu_tensor_free(&in->b);
  free(in->gcopy);
  free(in->bcopy);
}

static tu_tensor gt_rows(const tu_tensor *t, size_t first, size_t n) {
  if (!t->data) return *t;
  return tu_rows_view(t, first, n);
}

/* Queries [q0, q0 + nq), keys (and their gates and betas) [k0, k0 + nk). */
static gt_view gt_slice(const gt_inputs *in, size_t q0, size_t nq, size_t k0, size_t nk) {
  gt_view v;
  v.q = tu_rows_view(&in->x.q, q0, nq);
  v.k = tu_rows_view(&in->x.k, k0, nk);
  v.v = tu_rows_view(&in->x.v, k0, nk);
  v.g = gt_rows(&in->g, k0, nk);
  v.b = gt_rows(&in->b, k0, nk);
  return v;
}

static gt_view gt_all(const gt_inputs *in) { return gt_slice(in, 0, in->x.q.n, 0, in->x.k.n); }

/* Point the descriptor's layouts at the tensors (o's at its own default token-major layout). */
static void gt_bind(attn_linear_desc *d, const gt_view *v) {
  d->shape.q = v->q.l;
  d->shape.k = v->k.l;
  d->shape.v = v->v.l;
  d->shape.o.row_stride = lu_out_heads(d) * d->shape.dv;
  d->shape.o.head_stride = d->shape.dv;
  if (v->g.data) d->gate_layout = v->g.l;
  if (v->b.data) d->beta_layout = v->b.l;
}

static size_t gt_chunk(const attn_linear_desc *d) {
  size_t c = 0;
  ck_assert_int_eq(attn_linear_chunk_size(d, &c), ATTN_OK);
  ck_assert(c >= 1 && c <= ATTN_LINEAR_MAX_CHUNK);
  return c;
}

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                       */
/* ------------------------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------------------------ */
/* Calls, reference, comparison                                                                */
/* ------------------------------------------------------------------------------------------ */
/* attn_linear_gated over a view (linear_util.h: o freshly allocated in layout okind, memory
 * checks); without a gate or beta too. */
static void gt_call(const attn_linear_desc *desc, const gt_view *v, tu_layout_kind okind, attn_linear_state *state,
                    size_t misalign, tu_tensor *o) {
  lu_call(desc, &v->q, &v->k, &v->v, &v->g, &v->b, okind, state, misalign, o);
}

static ref_gated_problem gt_problem(const attn_linear_desc *d, const gt_view *v, const double *s0, size_t chunk,
                                    size_t step_chunk) {
  return lu_gated_problem(d, &v->q, &v->k, &v->v, &v->g, &v->b, s0, chunk, step_chunk);
}

/* A reference result and its four error scales. */
typedef struct gt_ref {
  double *o, *abs, *log, *step, *tiny;
  size_t count;
} gt_ref;

static ref_gated_scales gt_ref_alloc(gt_ref *r, size_t count) {
  r->count = count;
  r->o = malloc(sizeof(double) * (5 * count + 1));
  ck_assert_ptr_nonnull(r->o);
  r->abs = r->o + count;
  r->log = r->abs + count;
  r->step = r->log + count;
  r->tiny = r->step + count;
  const ref_gated_scales sc = {r->abs, r->log, r->step, r->tiny};
  return sc;
}

static void gt_ref_output(gt_ref *r, const ref_gated_problem *p) {
  const ref_gated_scales sc = gt_ref_alloc(r, p->n_q * ref_gated_heads(p) * p->dv);
  ref_gated(p, r->o, &sc);
}

static void gt_ref_state(gt_ref *r, const ref_gated_problem *p) {
  const ref_gated_scales sc = gt_ref_alloc(r, ref_gated_state_heads(p) * p->d * (p->dv + 2));
  ref_gated_state(p, r->o, &sc);
}

static void gt_ref_free(gt_ref *r) { free(r->o); }

/* got against expect (the reference, or another library result) with the scales of r from
 * element `off` on; m = 0: a state (no dot product of length m). */
static void gt_compare(const char *family, const char *what, const tu_tensor *got, const double *expect,
                       const gt_ref *r, size_t off, size_t n_tokens, size_t m, double factor) {
  const size_t count = got->n * got->h * got->w;
  ck_assert_uint_le(off + count, r->count);
  double *tol = malloc(sizeof(double) * (count + 1));
  ck_assert_ptr_nonnull(tol);
  for (size_t e = 0; e < count; ++e)
    tol[e] = factor * tol_gated(n_tokens, m, r->abs[off + e], r->log[off + e], r->step[off + e], r->tiny[off + e]);
  tu_compare(family, what, got, expect, r->abs + off, tol);
  free(tol);
}

/* The output of a call against the reference. */
static void gt_check_output(const char *what, const attn_linear_desc *d, const gt_view *v, const double *s0,
                            size_t prefix, size_t chunk, size_t step_chunk, const tu_tensor *got) {
  const ref_gated_problem p = gt_problem(d, v, s0, chunk, step_chunk);
  gt_ref r;
  gt_ref_output(&r, &p);
  gt_compare("gated.o", what, got, r.o, &r, 0, prefix + d->shape.n_kv, d->shape.d, 1.0);
  gt_ref_free(&r);
}

/* The state after a call against the reference: shape, token count, S and z; z (un-normalised)
 * and the offset column must be exactly 0 (reference scale 0). */
static void gt_check_state(const char *what, const attn_linear_desc *d, const gt_view *v, const double *s0,
                           size_t prefix, size_t chunk, size_t step_chunk, const attn_linear_state *s) {
  ck_assert_uint_eq(s->tokens, prefix + d->shape.n_kv);
  ck_assert_uint_eq(s->heads, lu_state_heads(d));
  ck_assert_uint_eq(s->m, d->shape.d);
  ck_assert_uint_eq(s->dv, d->shape.dv);
  ck_assert_uint_eq(s->ld, d->shape.dv + 2);
  const ref_gated_problem p = gt_problem(d, v, s0, chunk, step_chunk);
  gt_ref r;
  gt_ref_state(&r, &p);
  const tu_tensor view = lu_state_view(s);
  gt_compare("gated.state", what, &view, r.o, &r, 0, prefix + d->shape.n_kv, 0, 1.0);
  gt_ref_free(&r);
}

static void gt_assert_finite(const char *what, const float *x, size_t count) {
  for (size_t e = 0; e < count; ++e) ck_assert_msg(isfinite(x[e]), "%s: element %zu is %g", what, e, (double)x[e]);
}

static void gt_assert_output_finite(const char *what, const tu_tensor *o) {
  for (size_t i = 0; i < o->n; ++i)
    for (size_t h = 0; h < o->h; ++h) gt_assert_finite(what, tu_at(o, i, h, 0), o->w);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
typedef enum gt_map {
  M_ID = 0,  /* identity, un-normalised (RetNet, GLA, Mamba2) */
  M_ELU,     /* elu1, normalised */
  M_RELU,    /* relu, normalised */
  M_ELU_UN,  /* elu1, un-normalised */
  M_RELU_UN, /* relu, un-normalised */
  M_ID_NORM  /* identity, normalised (positive data) */
} gt_map;

static attn_feature_map gt_fm(gt_map m) {
  return m == M_ELU || m == M_ELU_UN     ? ATTN_FEATURE_ELU1
         : m == M_RELU || m == M_RELU_UN ? ATTN_FEATURE_RELU
                                         : ATTN_FEATURE_IDENTITY;
}
static int gt_norm(gt_map m) { return m == M_ELU || m == M_RELU || m == M_ID_NORM; }

typedef enum gt_gk { K_SCALAR = 0, K_FEATURE, K_NONE } gt_gk;
static attn_gate_kind gt_kind(gt_gk k) {
  return k == K_FEATURE ? ATTN_GATE_FEATURE : k == K_NONE ? ATTN_GATE_NONE : ATTN_GATE_SCALAR;
}

/* Every field left out is the default: identity un-normalised, SCALAR gate, no beta, log gates
 * uniform in [-3, 0), token-major gate layout, default chunk, token-major uniform q, k, v, no
 * incoming state. mild: log gates in [-0.05, 0) (long memory: the state and far keys matter). */
typedef struct gt_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_k, h_v, h_g, d, dv;
  gt_map map;
  gt_gk gate;
  int beta, mild;
  size_t chunk, prefix;
  gt_glayout glayout;
  tu_layout_kind layout;
  tu_data data;
  float scale;  /* 0: the default 1 */
  float gconst; /* not 0: this log gate for every token (and feature) */
} gt_case;

#define SIZES(nq, nkv, dd, ddv) .n_q = (nq), .n_kv = (nkv), .d = (dd), .dv = (ddv)
#define HEADS(q, k, v, g)       .h_q = (q), .h_k = (k), .h_v = (v), .h_g = (g)
#define FEAT                    .gate = K_FEATURE
#define BETA                    .beta = 1
#define MILD                    .mild = 1

static const gt_case gt_cases[] = {
    /* sizes around the chunk sizes (48 AVX2 / NEON, 64 scalar), odd widths */
    {.name = "n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1, 1, 0)},
    {.name = "n2_d7_feature", SIZES(2, 2, 7, 7), HEADS(1, 1, 1, 0), FEAT},
    {.name = "n47_d9_mild", SIZES(47, 47, 9, 9), HEADS(1, 1, 1, 0), MILD},
    {.name = "n48_d33_feature", SIZES(48, 48, 33, 33), HEADS(1, 1, 1, 0), FEAT, MILD},
    {.name = "n49_d64_beta", SIZES(49, 49, 64, 64), HEADS(1, 1, 1, 0), BETA},
    {.name = "n63_d65_feature_beta", SIZES(63, 63, 65, 65), HEADS(1, 1, 1, 0), FEAT, BETA, MILD},
    {.name = "n64_d7_elu", SIZES(64, 64, 7, 7), HEADS(2, 2, 2, 0), .map = M_ELU, MILD},
    {.name = "n65_d9_relu_feature", SIZES(65, 65, 9, 9), HEADS(2, 2, 2, 0), .map = M_RELU, FEAT},
    {.name = "n100_d33_elu_feature_beta", SIZES(100, 100, 33, 33), HEADS(1, 1, 1, 0), .map = M_ELU, FEAT, BETA},
    {.name = "n200_d64_beta_mild", SIZES(200, 200, 64, 64), HEADS(1, 1, 1, 0), BETA, MILD},
    {.name = "n200_d65_feature_mild", SIZES(200, 200, 65, 65), HEADS(1, 1, 1, 0), FEAT, MILD},
    {.name = "d1_dv65", SIZES(70, 70, 1, 65), HEADS(2, 1, 1, 0), MILD},
    {.name = "d65_dv1_feature", SIZES(70, 70, 65, 1), HEADS(1, 1, 1, 0), FEAT, MILD},
    {.name = "d33_dv7_relu_beta", SIZES(70, 70, 33, 7), HEADS(1, 1, 1, 0), .map = M_RELU, BETA, MILD},
    {.name = "d7_dv9_elu_unnorm", SIZES(50, 50, 7, 9), HEADS(1, 1, 1, 0), .map = M_ELU_UN, FEAT, MILD},
    {.name = "d9_dv33_relu_unnorm", SIZES(50, 50, 9, 33), HEADS(1, 1, 1, 0), .map = M_RELU_UN, BETA},
    {.name = "id_norm_pos", SIZES(50, 50, 16, 16), HEADS(1, 1, 1, 0), .map = M_ID_NORM, .data = TU_DATA_POSITIVE, MILD},
    /* heads: Mamba2 (q = C, k = B shared by a group of value heads, gate and beta per head),
     * GQA with a per-query-head gate, a gate shared by all heads or by pairs, more gate heads
     * than anything else (H = h_g) */
    {.name = "mamba2_g1_h4", SIZES(100, 100, 16, 8), HEADS(1, 1, 4, 4), BETA},
    {.name = "mamba2_g2_h8_c7", SIZES(65, 65, 16, 8), HEADS(2, 2, 8, 8), BETA, MILD, .chunk = 7},
    {.name = "mamba2_g1_h4_feature", SIZES(70, 70, 9, 7), HEADS(1, 1, 4, 4), FEAT, BETA, MILD},
    {.name = "mamba2_g2_h8_hg0", SIZES(49, 49, 8, 8), HEADS(2, 2, 8, 0), BETA, MILD},
    {.name = "gqa_4_2_2_g4_elu", SIZES(70, 70, 16, 16), HEADS(4, 2, 2, 4), .map = M_ELU, MILD},
    {.name = "gqa_4_2_2_g4_feature_relu", SIZES(50, 50, 8, 8), HEADS(4, 2, 2, 4), .map = M_RELU, FEAT, BETA},
    {.name = "gqa_4_2_2_g4_id", SIZES(65, 65, 16, 16), HEADS(4, 2, 2, 4), MILD, BETA},
    {.name = "gate_shared_h_g1", SIZES(50, 50, 8, 8), HEADS(4, 4, 4, 1), MILD},
    {.name = "gate_pairs_h_g2", SIZES(50, 50, 8, 8), HEADS(4, 2, 4, 2), FEAT, BETA, MILD},
    {.name = "heads_2_2_8_g4", SIZES(40, 40, 8, 8), HEADS(2, 2, 8, 4), BETA, MILD},
    {.name = "heads_1_2_4_g2", SIZES(40, 40, 8, 8), HEADS(1, 2, 4, 2), .map = M_ELU, MILD},
    {.name = "gate_heads_only_4", SIZES(40, 40, 8, 8), HEADS(1, 1, 1, 4), FEAT, MILD},
    /* n_q < n_kv (chunked prefill, bottom-right), decode, n_q > n_kv */
    {.name = "chunked_10_of_75", SIZES(10, 75, 16, 16), HEADS(1, 1, 1, 0), .map = M_ELU, MILD},
    {.name = "decode_1_of_64_feature", SIZES(1, 64, 8, 8), HEADS(2, 1, 1, 2), FEAT, BETA, MILD},
    {.name = "chunked_48_of_200_c64", SIZES(48, 200, 16, 16), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 64},
    {.name = "nq20_nkv5_prefix", SIZES(20, 5, 8, 8), HEADS(1, 1, 1, 0), MILD, .prefix = 30},
    {.name = "nq97_nkv48_feature_prefix", SIZES(97, 48, 8, 8), HEADS(2, 1, 1, 0), FEAT, MILD, .prefix = 10},
    {.name = "nq20_nkv5_elu_prefix", SIZES(20, 5, 8, 8), HEADS(2, 2, 2, 0), .map = M_ELU, BETA, MILD, .prefix = 9},
    /* incoming states */
    {.name = "prefix30_n20_elu", SIZES(20, 20, 16, 16), HEADS(2, 1, 1, 0), .map = M_ELU, MILD, .prefix = 30},
    {.name = "prefix64_decode_feature", SIZES(1, 1, 8, 8), HEADS(2, 2, 2, 0), FEAT, BETA, MILD, .prefix = 64},
    {.name = "prefix100_chunked_c7", SIZES(10, 75, 8, 8), HEADS(1, 1, 1, 0), MILD, .chunk = 7, .prefix = 100},
    {.name = "prefix40_mamba2", SIZES(33, 33, 16, 8), HEADS(1, 1, 4, 4), BETA, MILD, .prefix = 40},
    /* gate layouts: padded, head-major, row stride 0 (a fixed decay per head, RetNet) */
    {.name = "gate_padded", SIZES(60, 60, 8, 8), HEADS(2, 2, 2, 0), .glayout = GL_P, BETA, MILD},
    {.name = "gate_padded_feature",
     SIZES(60, 60, 9, 7),
     HEADS(2, 1, 2, 2),
     FEAT,
     BETA,
     .glayout = GL_P,
     .layout = TU_PADDED},
    {.name = "gate_head_major_feature", SIZES(50, 50, 8, 8), HEADS(2, 2, 2, 2), FEAT, MILD, .glayout = GL_HM},
    {.name = "gate_row0", SIZES(100, 100, 16, 16), HEADS(4, 4, 4, 4), MILD, .glayout = GL_R0},
    {.name = "gate_row0_padded_feature", SIZES(70, 70, 8, 8), HEADS(2, 2, 2, 2), FEAT, MILD, .glayout = GL_R0P},
    {.name = "gate_row0_head_major_qkv",
     SIZES(50, 50, 8, 8),
     HEADS(2, 2, 2, 0),
     MILD,
     .glayout = GL_R0,
     .layout = TU_HEAD_MAJOR},
    {.name = "gate_padded_packed_qkv",
     SIZES(41, 41, 8, 8),
     HEADS(4, 2, 2, 4),
     BETA,
     MILD,
     .glayout = GL_P,
     .layout = TU_PACKED_QKV},
    /* chunk sizes */
    {.name = "chunk1_feature", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 1},
    {.name = "chunk7_beta", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), BETA, MILD, .chunk = 7},
    {.name = "chunk7_feature_elu", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), .map = M_ELU, FEAT, .chunk = 7},
    {.name = "chunk64_feature", SIZES(129, 129, 64, 64), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 64},
    {.name = "chunk64_scalar", SIZES(200, 200, 16, 16), HEADS(1, 1, 1, 0), MILD, .chunk = 64},
    {.name = "chunk256_feature", SIZES(300, 300, 8, 8), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 256},
    {.name = "chunk_default_relu_feature", SIZES(97, 97, 16, 16), HEADS(1, 1, 1, 0), .map = M_RELU, FEAT, BETA},
    /* a chunk of 16 decaying by e^-59.5 (scalar gate: the weights factored, factors up to
     * e^59.5) and by e^-61.5 (beyond ATTN_GATE_SPAN: element by element) */
    {.name = "span_59.5_c16_beta", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), BETA, .chunk = 16, .gconst = -3.71875f},
    {.name = "span_59.5_c16_elu_norm",
     SIZES(100, 100, 8, 8),
     HEADS(1, 1, 1, 0),
     .map = M_ELU,
     .chunk = 16,
     .gconst = -3.71875f},
    {.name = "span_61.5_c16", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), .chunk = 16, .gconst = -3.84375f},
    /* no gate, through attn_linear_gated: beta alone, and nothing (plain linear attention) */
    {.name = "beta_only", SIZES(70, 70, 8, 8), HEADS(2, 2, 2, 0), .gate = K_NONE, BETA},
    {.name = "beta_only_elu_prefix",
     SIZES(30, 30, 8, 8),
     HEADS(2, 2, 2, 0),
     .map = M_ELU,
     .gate = K_NONE,
     BETA,
     .prefix = 20},
    {.name = "no_gate_no_beta", SIZES(70, 70, 8, 8), HEADS(2, 2, 2, 0), .map = M_ELU, .gate = K_NONE},
    /* the scale s multiplies phi(q) */
    {.name = "scale_0.25_feature", SIZES(50, 50, 16, 16), HEADS(1, 1, 1, 0), FEAT, MILD, .scale = 0.25f},
    {.name = "scale_-2_elu_norm", SIZES(50, 50, 8, 8), HEADS(1, 1, 1, 0), .map = M_ELU, MILD, .scale = -2.0f},
};
#define GT_NCASES (sizeof gt_cases / sizeof gt_cases[0])
static size_t gt_sel[GT_NCASES];

static void gt_case_desc(attn_linear_desc *d, const gt_case *c, size_t n_q, size_t n_kv) {
  gt_desc(d, n_q, n_kv, c->h_q, c->h_k, c->h_v, c->h_g, c->d, c->dv, gt_fm(c->map), gt_norm(c->map), gt_kind(c->gate),
          c->beta, c->chunk);
  if (c->scale != 0.0f) d->scale = c->scale;
}

static gt_gatespec gt_case_spec(const gt_case *c, gt_glayout layout) {
  const gt_gatespec s = {.kind = gt_kind(c->gate),
                         .beta = c->beta,
                         .layout = layout,
                         .fill = c->gconst != 0.0f ? GF_CONST : GF_UNIFORM,
                         .lo = c->gconst != 0.0f ? c->gconst
                               : c->mild         ? -0.05f
                                                 : -3.0f,
                         .hi = 0.0f};
  return s;
}

START_TEST(gated_matches_reference) {
  const size_t idx = gt_sel[_i];
  const gt_case *c = &gt_cases[idx];
  tu_rng rng;
  tu_rng_seed(&rng, 17000 + idx);
  attn_linear_desc d;
  gt_case_desc(&d, c, c->n_q, c->n_kv);
  const gt_gatespec spec = gt_case_spec(c, c->glayout);
  gt_inputs x;
  gt_inputs_make(&x, c->layout, c->data, &rng, c->n_q, c->n_kv, &d, &spec);
  const gt_view v = gt_all(&x);
  gt_bind(&d, &v);
  lu_state st;
  lu_state_make(&st, &d);
  double *s0 = NULL;
  if (c->prefix) { /* earlier tokens, absorbed into the state by a call of their own */
    gt_inputs px;
    const gt_gatespec pspec = gt_case_spec(c, GL_T);
    gt_inputs_make(&px, TU_TOKEN_MAJOR, c->data, &rng, c->prefix, c->prefix, &d, &pspec);
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = c->prefix;
    const gt_view pv = gt_all(&px);
    tu_tensor po;
    gt_call(&pd, &pv, TU_TOKEN_MAJOR, &st.s, 0, &po);
    ck_assert_uint_eq(st.s.tokens, c->prefix);
    s0 = lu_state_to_double(&st.s);
    tu_tensor_free(&po);
    gt_inputs_free(&px);
  }
  tu_tensor o;
  gt_call(&d, &v, c->layout == TU_PACKED_QKV ? TU_TOKEN_MAJOR : c->layout, &st.s, (idx % 2) * 4, &o);
  gt_inputs_assert_unchanged(&x);
  const size_t C = gt_chunk(&d);
  gt_check_output(c->name, &d, &v, s0, c->prefix, C, C, &o);
  gt_check_state(c->name, &d, &v, s0, c->prefix, C, C, &st.s);
  free(s0);
  tu_tensor_free(&o);
  lu_state_free(&st);
  gt_inputs_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Models: RetNet and Mamba2, each against its own form computed here in double                 */
/* ------------------------------------------------------------------------------------------ */
/* attn_retnet_log_decays: log(1 - 2^(-5-h)) as log1p in double, rounded; nothing past `heads`. */
START_TEST(gated_retnet_decays) {
  float lg[17];
  for (size_t heads = 1; heads <= 16; ++heads) {
    for (size_t h = 0; h < 17; ++h) lg[h] = 12345.0f;
    ck_assert_int_eq(attn_retnet_log_decays(heads, lg), ATTN_OK);
    for (size_t h = 0; h < heads; ++h) {
      const float want = (float)log1p(-ldexp(1.0, -5 - (int)h));
      ck_assert_msg(lg[h] == want, "heads %zu: lg[%zu] = %.9g, want %.9g", heads, h, (double)lg[h], (double)want);
      ck_assert(lg[h] < 0.0f);
    }
    for (size_t h = heads; h < 17; ++h) ck_assert(lg[h] == 12345.0f);
  }
}
END_TEST

/* RetNet retention: H = 4 heads, n = 130, identity un-normalised, scale 1/sqrt(d), the decays of
 * attn_retnet_log_decays as a SCALAR gate of layout {0, 1}:
 *   o_i = sum_{j <= i} (q_i . k_j / sqrt(d)) gamma_h^(i - j) v_j   (gamma_h = exp(lg[h]))
 * written out here in double, for the default chunk, 7, 64 and 1, h_g 4 or 0; then the same
 * sequence decoded token by token. */
START_TEST(gated_retnet_parallel_form) {
  static const size_t chunks[] = {0, 7, 64, 1};
  const size_t n = tu_small() ? 70 : 130, Hh = 4, dd = 16, dv = 16;
  tu_rng rng;
  tu_rng_seed(&rng, 18000 + (uint64_t)_i);
  float lg[4];
  ck_assert_int_eq(attn_retnet_log_decays(Hh, lg), ATTN_OK);
  /* loop 4..7: other fixed decays, whose gamma is not a short float (RetNet's 1 - 2^(-5-h) are):
   * the recurrent form then repeats exp's rounding error at every step */
  if (_i >= 4)
    for (size_t h = 0; h < Hh; ++h) lg[h] = -0.0123f - 0.0071f * (float)h;
  attn_linear_desc d;
  gt_desc(&d, n, n, Hh, Hh, Hh, _i % 2 ? 0 : Hh, dd, dv, ATTN_FEATURE_IDENTITY, 0, ATTN_GATE_SCALAR, 0, chunks[_i % 4]);
  d.scale = (float)(1.0 / sqrt((double)dd));
  gt_inputs x;
  const gt_gatespec none = {.kind = ATTN_GATE_NONE};
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &d, &none);
  /* the gate: 4 floats, row stride 0, head stride 1 */
  tu_tensor g;
  memset(&g, 0, sizeof g);
  g.data = lg;
  g.n = n;
  g.h = Hh;
  g.w = 1;
  g.l.row_stride = 0;
  g.l.head_stride = 1;
  g.span = Hh;
  gt_view v = gt_all(&x);
  v.g = g;
  gt_bind(&d, &v);
  ck_assert_uint_eq(d.gate_layout.row_stride, 0);
  ck_assert_uint_eq(d.gate_layout.head_stride, 1);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  gt_call(&d, &v, TU_TOKEN_MAJOR, &st.s, 0, &o);
  /* the parallel form */
  const size_t count = n * Hh * dv;
  double *par = calloc(count, sizeof(double));
  ck_assert_ptr_nonnull(par);
  for (size_t h = 0; h < Hh; ++h) {
    const double gamma = exp((double)lg[h]);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j <= i; ++j) {
        double qk = 0.0;
        for (size_t t = 0; t < dd; ++t) qk += (double)*tu_at(&x.x.q, i, h, t) * (double)*tu_at(&x.x.k, j, h, t);
        const double w = (double)d.scale * qk * pow(gamma, (double)(i - j));
        for (size_t c = 0; c < dv; ++c) par[(i * Hh + h) * dv + c] += w * (double)*tu_at(&x.x.v, j, h, c);
      }
  }
  const size_t C = gt_chunk(&d);
  const ref_gated_problem p = gt_problem(&d, &v, NULL, C, C);
  gt_ref r;
  gt_ref_output(&r, &p);
  /* the reference itself agrees with the parallel form (both double) */
  for (size_t e = 0; e < count; ++e)
    ck_assert_msg(fabs(r.o[e] - par[e]) <= 1e-12 * (r.abs[e] + 1e-300), "reference vs RetNet parallel form at %zu", e);
  gt_compare("gated.retnet", "RetNet parallel form", &o, par, &r, 0, n, dd, 1.0);
  gt_check_state("RetNet state", &d, &v, NULL, 0, C, C, &st.s);
  gt_ref_free(&r);
  /* the recurrent form: n decode steps from an empty state, each row against the parallel form
   * (the same float gamma applied n times: the error model of token-by-token decode) */
  const ref_gated_problem pd = gt_problem(&d, &v, NULL, C, 1);
  gt_ref_output(&r, &pd);
  lu_state dec;
  lu_state_make(&dec, &d);
  for (size_t t = 0; t < n; ++t) {
    attn_linear_desc sd = d;
    sd.shape.n_q = sd.shape.n_kv = 1;
    gt_view sv = gt_slice(&x, t, 1, t, 1);
    sv.g = g; /* row stride 0: the same 4 floats */
    tu_tensor od;
    gt_call(&sd, &sv, TU_TOKEN_MAJOR, &dec.s, 0, &od);
    gt_compare("gated.retnet", "RetNet decode vs parallel form", &od, par + t * Hh * dv, &r, t * Hh * dv, n, dd, 1.0);
    tu_tensor_free(&od);
  }
  gt_ref_free(&r);
  lu_state_free(&dec);
  free(par);
  tu_tensor_free(&o);
  lu_state_free(&st);
  gt_inputs_free(&x);
}
END_TEST

/* Mamba2 (SSD): q = C, k = B, v = x, beta = dt in [0.01, 0.5), log gamma = fl(dt A_h) with A_h
 * in [-4, -0.5) per head, scale 1, identity, un-normalised, h_q = h_k = groups, h_v = h_g = 4
 * heads, against the recurrence run here in double:
 *   h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T,   y_t = C_t^T h_t
 * (exp(dt A) in double from the float dt and A, as the model defines it); the final state is h_n.
 * Loop: groups 1 and 2 x chunks default, 7, 64. */
START_TEST(gated_mamba2_ssd) {
  static const size_t chunks[] = {0, 7, 64};
  const size_t G = 1 + (size_t)_i % 2, Hh = 4, N = 16, P = 8, n = tu_small() ? 64 : 100;
  tu_rng rng;
  tu_rng_seed(&rng, 19000 + (uint64_t)_i);
  attn_linear_desc d;
  gt_desc(&d, n, n, G, G, Hh, Hh, N, P, ATTN_FEATURE_IDENTITY, 0, ATTN_GATE_SCALAR, 1, chunks[_i / 2]);
  d.scale = 1.0f;
  gt_inputs x;
  const gt_gatespec spec = {.kind = ATTN_GATE_SCALAR, .beta = 1, .layout = GL_T, .fill = GF_CONST, .lo = -1.0f};
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &d, &spec);
  float A[4];
  for (size_t h = 0; h < Hh; ++h) A[h] = tu_rng_range(&rng, -4.0f, -0.5f);
  for (size_t t = 0; t < n; ++t)
    for (size_t h = 0; h < Hh; ++h) {
      const float dt = tu_rng_range(&rng, 0.01f, 0.5f);
      *tu_at(&x.b, t, h, 0) = dt;
      *tu_at(&x.g, t, h, 0) = dt * A[h]; /* what a caller passes: the float product */
    }
  gt_inputs_snapshot(&x);
  const gt_view v = gt_all(&x);
  gt_bind(&d, &v);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  gt_call(&d, &v, TU_TOKEN_MAJOR, &st.s, 0, &o);
  gt_inputs_assert_unchanged(&x);
  /* the SSD recurrence, per head, in double */
  const size_t count = n * Hh * P, w = P + 2;
  double *y = malloc(sizeof(double) * count), *hs = malloc(sizeof(double) * Hh * N * w);
  ck_assert(y && hs);
  for (size_t e = 0; e < Hh * N * w; ++e) hs[e] = 0.0;
  for (size_t h = 0; h < Hh; ++h) {
    const size_t g = h / (Hh / G);
    double *S = hs + h * N * w; /* the state's layout: row f, columns c < P (z and offset 0) */
    for (size_t t = 0; t < n; ++t) {
      const double dt = (double)*tu_at(&x.b, t, h, 0), a = exp(dt * (double)A[h]);
      for (size_t f = 0; f < N; ++f)
        for (size_t c = 0; c < P; ++c)
          S[f * w + c] = a * S[f * w + c] + dt * (double)*tu_at(&x.x.k, t, g, f) * (double)*tu_at(&x.x.v, t, h, c);
      for (size_t c = 0; c < P; ++c) {
        double acc = 0.0;
        for (size_t f = 0; f < N; ++f) acc += (double)*tu_at(&x.x.q, t, g, f) * S[f * w + c];
        y[(t * Hh + h) * P + c] = acc;
      }
    }
  }
  /* scales from the reference (step_chunk 1: the recurrence above is token by token, but it is
   * exact in double; the library's form is the chunkwise one) */
  const size_t C = gt_chunk(&d);
  const ref_gated_problem p = gt_problem(&d, &v, NULL, C, C);
  gt_ref r, rs;
  gt_ref_output(&r, &p);
  gt_ref_state(&rs, &p);
  /* the reference agrees with the SSD recurrence up to the rounding of fl(dt A) (<= u/2 |dt A|
   * per token): both in double */
  for (size_t e = 0; e < count; ++e)
    ck_assert_msg(fabs(r.o[e] - y[e]) <= TOL_U * (r.abs[e] + r.log[e]) + 1e-300, "reference vs SSD at %zu", e);
  ck_assert_uint_eq(st.s.heads, Hh); /* lcm(G, 4, 4) */
  gt_compare("gated.mamba2", "Mamba2 SSD y", &o, y, &r, 0, n, N, 1.0);
  const tu_tensor sv = lu_state_view(&st.s);
  gt_compare("gated.mamba2", "Mamba2 SSD final state", &sv, hs, &rs, 0, n, 0, 1.0);
  gt_ref_free(&r);
  gt_ref_free(&rs);
  free(y);
  free(hs);
  tu_tensor_free(&o);
  lu_state_free(&st);
  gt_inputs_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties                                                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct gp_case {
  size_t chunk;
  gt_gk gate;
  int beta, mild;
  gt_map map;
  size_t h_q, h_k, h_v, h_g, d, dv;
} gp_case;

#define PH(q, k, v, g) .h_q = (q), .h_k = (k), .h_v = (v), .h_g = (g)
static const gp_case gp_cases[] = {
    {.chunk = 1, .gate = K_SCALAR, BETA, .map = M_ID, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 7, .gate = K_FEATURE, BETA, .map = M_ID, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 64, .gate = K_SCALAR, MILD, .map = M_ELU, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 64, .gate = K_FEATURE, BETA, MILD, .map = M_ID, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 0, .gate = K_FEATURE, .map = M_RELU, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 0, .gate = K_SCALAR, BETA, MILD, .map = M_ID, PH(1, 1, 4, 4), .d = 16, .dv = 8},
    {.chunk = 7, .gate = K_FEATURE, BETA, MILD, .map = M_ELU, PH(4, 2, 2, 4), .d = 8, .dv = 8},
    {.chunk = 1, .gate = K_FEATURE, BETA, MILD, .map = M_ID, PH(1, 1, 4, 4), .d = 9, .dv = 7},
    {.chunk = 64, .gate = K_SCALAR, BETA, .map = M_ID, PH(2, 2, 8, 4), .d = 8, .dv = 8},
    {.chunk = 0, .gate = K_SCALAR, MILD, .map = M_ELU, PH(1, 1, 1, 0), .d = 33, .dv = 9},
    {.chunk = 0, .gate = K_FEATURE, BETA, MILD, .map = M_ID, PH(2, 2, 2, 0), .d = 64, .dv = 64},
};
#define GP_NCASES (sizeof gp_cases / sizeof gp_cases[0])

static size_t gp_tokens(void) { return tu_small() ? 80 : 200; }

/* n tokens of inputs, one causal call over them into a fresh state, and the reference of the
 * outputs and of the state with the error model of token-by-token decode (step_chunk 1). */
typedef struct gt_seq {
  gt_inputs in;
  attn_linear_desc d; /* n tokens */
  size_t n, hd, C;
  lu_state st;
  tu_tensor o;
  double *got, *sgot; /* the call's outputs and state as double */
  gt_ref ro, rs;
} gt_seq;

static void gp_desc(attn_linear_desc *d, const gp_case *c, size_t n_q, size_t n_kv) {
  gt_desc(d, n_q, n_kv, c->h_q, c->h_k, c->h_v, c->h_g, c->d, c->dv, gt_fm(c->map), gt_norm(c->map), gt_kind(c->gate),
          c->beta, c->chunk);
}

static void gt_seq_make(gt_seq *s, const gp_case *c, size_t n, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  s->n = n;
  gp_desc(&s->d, c, n, n);
  const gt_gatespec spec = {.kind = gt_kind(c->gate),
                            .beta = c->beta,
                            .layout = GL_T,
                            .fill = GF_UNIFORM,
                            .lo = c->mild ? -0.05f : -3.0f,
                            .hi = 0.0f};
  gt_inputs_make(&s->in, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &s->d, &spec);
  const gt_view v = gt_all(&s->in);
  gt_bind(&s->d, &v);
  s->C = gt_chunk(&s->d);
  lu_state_make(&s->st, &s->d);
  gt_call(&s->d, &v, TU_TOKEN_MAJOR, &s->st.s, 0, &s->o);
  s->hd = lu_out_heads(&s->d) * c->dv;
  s->got = malloc(sizeof(double) * n * s->hd);
  ck_assert_ptr_nonnull(s->got);
  tu_tensor_to_double(&s->o, s->got);
  s->sgot = lu_state_to_double(&s->st.s);
  const ref_gated_problem p = gt_problem(&s->d, &v, NULL, s->C, 1);
  gt_ref_output(&s->ro, &p);
  gt_ref_state(&s->rs, &p);
}

static void gt_seq_free(gt_seq *s) {
  gt_ref_free(&s->ro);
  gt_ref_free(&s->rs);
  free(s->got);
  free(s->sgot);
  tu_tensor_free(&s->o);
  lu_state_free(&s->st);
  gt_inputs_free(&s->in);
}

/* tokens [a, a + len) of the sequence as one call continuing state */
static void gt_seq_piece(const gt_seq *s, const gp_case *c, size_t a, size_t len, attn_linear_state *state,
                         tu_tensor *o) {
  attn_linear_desc d;
  gp_desc(&d, c, len, len);
  const gt_view v = gt_slice(&s->in, a, len, a, len);
  gt_call(&d, &v, TU_TOKEN_MAJOR, state, 0, o);
}

/* A state that absorbed the whole sequence by other calls: its token count, and its sums against
 * the one call's state (each within its bound) and against the reference. */
static void gt_seq_check_state(const gt_seq *s, const attn_linear_state *st, const char *what) {
  char buf[128];
  ck_assert_uint_eq(st->tokens, s->n);
  const tu_tensor view = lu_state_view(st);
  snprintf(buf, sizeof buf, "%s vs one call", what);
  gt_compare("gated.state", buf, &view, s->sgot, &s->rs, 0, s->n, 0, TOL_PROPERTY_FACTOR);
  snprintf(buf, sizeof buf, "%s vs reference", what);
  gt_compare("gated.state", buf, &view, s->rs.o, &s->rs, 0, s->n, 0, 1.0);
}

/* Chunkwise prefill (the case's chunk) equals n_q = n_kv = 1 calls carrying the state: outputs
 * row by row and the final states; the prefill is also checked against the reference. */
START_TEST(gated_chunkwise_matches_recurrent) {
  const gp_case *c = &gp_cases[_i];
  gt_seq s;
  gt_seq_make(&s, c, gp_tokens(), 20000 + (uint64_t)_i);
  gt_compare("gated.o", "prefill vs reference", &s.o, s.ro.o, &s.ro, 0, s.n, c->d, 1.0);
  const tu_tensor pv = lu_state_view(&s.st.s);
  gt_compare("gated.state", "prefill state vs reference", &pv, s.rs.o, &s.rs, 0, s.n, 0, 1.0);
  lu_state dec;
  lu_state_make(&dec, &s.d);
  for (size_t t = 0; t < s.n; ++t) {
    tu_tensor o;
    gt_seq_piece(&s, c, t, 1, &dec.s, &o);
    gt_compare("gated.o", "decode step vs prefill row", &o, s.got + t * s.hd, &s.ro, t * s.hd, s.n, c->d,
               TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  gt_seq_check_state(&s, &dec.s, "decoded state");
  lu_state_free(&dec);
  gt_seq_free(&s);
}
END_TEST

/* Calls carrying the state equal the one call over all n tokens: the first 3n/4 tokens as one
 * prefill (even loop index; prefill 150 of 200) or in pieces of random sizes 1 .. 70 (odd), then
 * n/4 decode steps, each also against the reference. */
START_TEST(gated_pieces_then_decode) {
  const gp_case *c = &gp_cases[_i / 2];
  const int random = _i % 2;
  gt_seq s;
  gt_seq_make(&s, c, gp_tokens(), (random ? 22000 : 21000) + (uint64_t)(_i / 2));
  tu_rng rng;
  tu_rng_seed(&rng, 22500 + (uint64_t)(_i / 2));
  const size_t a = s.n * 3 / 4;
  lu_state st;
  lu_state_make(&st, &s.d);
  size_t t = 0, pieces = 0;
  while (t < s.n) {
    size_t len = 1;
    if (t < a) {
      len = random ? 1 + (size_t)(tu_rng_next(&rng) % 70) : a;
      if (len > a - t) len = a - t;
    }
    tu_tensor o;
    gt_seq_piece(&s, c, t, len, &st.s, &o);
    const char *what = t >= a ? "decode after the prefill" : random ? "a piece" : "the prefill";
    char buf[96];
    snprintf(buf, sizeof buf, "%s vs one call", what);
    gt_compare("gated.o", buf, &o, s.got + t * s.hd, &s.ro, t * s.hd, s.n, c->d, TOL_PROPERTY_FACTOR);
    snprintf(buf, sizeof buf, "%s vs reference", what);
    gt_compare("gated.o", buf, &o, s.ro.o + t * s.hd, &s.ro, t * s.hd, s.n, c->d, 1.0);
    tu_tensor_free(&o);
    t += len;
    ++pieces;
  }
  if (random) ck_assert_uint_gt(pieces, 2);
  gt_seq_check_state(&s, &st.s, random ? "state after pieces" : "state after prefill + decode");
  lu_state_free(&st);
  gt_seq_free(&s);
}
END_TEST

/* Per-feature gates whose m entries are equal equal the scalar gate (outputs and states), with
 * and without beta, an incoming state, for chunks default, 1, 7 and 64. */
START_TEST(gated_feature_equal_is_scalar) {
  static const size_t chunks[] = {0, 1, 7, 64};
  const size_t n = tu_small() ? 70 : 130, dd = 16, dv = 12, prefix = 20;
  const int beta = _i % 2, elu = (_i / 2) % 2;
  const size_t chunk = chunks[_i / 4];
  tu_rng rng;
  tu_rng_seed(&rng, 23000 + (uint64_t)_i);
  attn_linear_desc ds, df;
  const attn_feature_map fm = elu ? ATTN_FEATURE_ELU1 : ATTN_FEATURE_IDENTITY;
  gt_desc(&ds, n, n, 2, 2, 4, 4, dd, dv, fm, elu, ATTN_GATE_SCALAR, beta, chunk);
  gt_desc(&df, n, n, 2, 2, 4, 4, dd, dv, fm, elu, ATTN_GATE_FEATURE, beta, chunk);
  const gt_gatespec spec = {.kind = ATTN_GATE_SCALAR, .beta = beta, .layout = GL_T, .lo = -1.0f, .hi = 0.0f};
  gt_inputs x;
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n + prefix, n + prefix, &ds, &spec);
  tu_tensor gf; /* the same gates broadcast over the m features */
  gt_tensor_alloc(&gf, GL_T, n + prefix, 4, dd);
  for (size_t t = 0; t < n + prefix; ++t)
    for (size_t h = 0; h < 4; ++h)
      for (size_t f = 0; f < dd; ++f) *tu_at(&gf, t, h, f) = *tu_at(&x.g, t, h, 0);
  gt_view vs[2], vf[2];
  vs[0] = gt_slice(&x, 0, prefix, 0, prefix);
  vs[1] = gt_slice(&x, prefix, n, prefix, n);
  for (int k = 0; k < 2; ++k) {
    vf[k] = vs[k];
    vf[k].g = tu_rows_view(&gf, k ? prefix : 0, k ? n : prefix);
  }
  gt_bind(&ds, &vs[1]);
  gt_bind(&df, &vf[1]);
  lu_state ss, sf;
  lu_state_make(&ss, &ds);
  lu_state_make(&sf, &df);
  attn_linear_desc ps = ds, pf = df;
  ps.shape.n_q = ps.shape.n_kv = pf.shape.n_q = pf.shape.n_kv = prefix;
  tu_tensor os, of;
  gt_call(&ps, &vs[0], TU_TOKEN_MAJOR, &ss.s, 0, &os);
  gt_call(&pf, &vf[0], TU_TOKEN_MAJOR, &sf.s, 0, &of);
  tu_tensor_free(&os);
  tu_tensor_free(&of);
  double *s0 = lu_state_to_double(&ss.s);
  gt_call(&ds, &vs[1], TU_TOKEN_MAJOR, &ss.s, 0, &os);
  gt_call(&df, &vf[1], TU_TOKEN_MAJOR, &sf.s, 0, &of);
  const size_t C = gt_chunk(&ds);
  const ref_gated_problem p = gt_problem(&ds, &vs[1], s0, C, C);
  gt_ref r, rs;
  gt_ref_output(&r, &p);
  gt_ref_state(&rs, &p);
  double *gs = malloc(sizeof(double) * r.count);
  ck_assert_ptr_nonnull(gs);
  tu_tensor_to_double(&os, gs);
  gt_compare("gated.o", "scalar gate vs reference", &os, r.o, &r, 0, n + prefix, dd, 1.0);
  gt_compare("gated.o", "equal per-feature gates vs scalar gate", &of, gs, &r, 0, n + prefix, dd, TOL_PROPERTY_FACTOR);
  double *sgs = lu_state_to_double(&ss.s);
  const tu_tensor sfv = lu_state_view(&sf.s);
  gt_compare("gated.state", "equal per-feature gates vs scalar gate: state", &sfv, sgs, &rs, 0, n + prefix, 0,
             TOL_PROPERTY_FACTOR);
  free(sgs);
  free(gs);
  free(s0);
  gt_ref_free(&r);
  gt_ref_free(&rs);
  tu_tensor_free(&os);
  tu_tensor_free(&of);
  tu_tensor_free(&gf);
  lu_state_free(&ss);
  lu_state_free(&sf);
  gt_inputs_free(&x);
}
END_TEST

/* Log gates of exactly 0 (no decay, SCALAR and FEATURE, row stride 0 or not) with beta = 1
 * equal plain attn_linear (outputs and states), for identity and elu1. */
START_TEST(gated_zero_gates_are_plain_linear) {
  const int feature = _i % 2, elu = (_i / 2) % 2, row0 = (_i / 4) % 2;
  const size_t n = 97, dd = 8, dv = 8;
  tu_rng rng;
  tu_rng_seed(&rng, 24000 + (uint64_t)_i);
  attn_linear_desc dg, dl;
  const attn_feature_map fm = elu ? ATTN_FEATURE_ELU1 : ATTN_FEATURE_IDENTITY;
  gt_desc(&dg, n, n, 4, 2, 2, 0, dd, dv, fm, elu, feature ? ATTN_GATE_FEATURE : ATTN_GATE_SCALAR, 1, 7);
  gt_desc(&dl, n, n, 4, 2, 2, 0, dd, dv, fm, elu, ATTN_GATE_NONE, 0, 7);
  const gt_gatespec spec = {.kind = dg.gate, .beta = 1, .layout = row0 ? GL_R0 : GL_T, .fill = GF_CONST, .lo = 0.0f};
  gt_inputs x;
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &dg, &spec);
  for (size_t t = 0; t < n; ++t)
    for (size_t h = 0; h < 4; ++h) *tu_at(&x.b, t, h, 0) = 1.0f;
  gt_inputs_snapshot(&x);
  const gt_view v = gt_all(&x);
  gt_view vl = v; /* no gate, no beta: attn_linear's descriptor keeps its defaults for them */
  memset(&vl.g, 0, sizeof vl.g);
  memset(&vl.b, 0, sizeof vl.b);
  gt_bind(&dg, &v);
  gt_bind(&dl, &vl);
  lu_state sg, sl;
  lu_state_make(&sg, &dg);
  lu_state_make(&sl, &dl);
  tu_tensor og, ol;
  gt_call(&dg, &v, TU_TOKEN_MAJOR, &sg.s, 0, &og);
  attn_linear_desc dd2 = dl;
  tu_tensor_alloc(&ol, TU_TOKEN_MAJOR, n, 4, dv, 1);
  dd2.shape.o = ol.l;
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&dd2, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear(&dd2, v.q.data, v.k.data, v.v.data, ol.data, &sl.s, w, ws), ATTN_OK);
  tu_free(w);
  const ref_gated_problem p = gt_problem(&dg, &v, NULL, 7, 7);
  gt_ref r, rs;
  gt_ref_output(&r, &p);
  gt_ref_state(&rs, &p);
  /* the gated state has L = lcm(2, 2, 4) = 4 heads, the plain one lcm(2, 2) = 2: gated state head
   * s holds key and value head s / 2, as plain state head s / 2 does */
  ck_assert_uint_eq(sg.s.heads, 4);
  ck_assert_uint_eq(sl.s.heads, 2);
  const size_t hrow = sl.s.m * sl.s.ld;
  double *gl = malloc(sizeof(double) * r.count), *sls = malloc(sizeof(double) * 4 * hrow);
  ck_assert(gl && sls);
  for (size_t h = 0; h < 4; ++h)
    for (size_t e = 0; e < hrow; ++e) sls[h * hrow + e] = (double)sl.s.data[(h / 2) * hrow + e];
  tu_tensor_to_double(&ol, gl);
  gt_compare("gated.o", "zero gates vs reference", &og, r.o, &r, 0, n, dd, 1.0);
  gt_compare("gated.o", "zero gates vs attn_linear", &og, gl, &r, 0, n, dd, TOL_PROPERTY_FACTOR);
  const tu_tensor sgv = lu_state_view(&sg.s);
  gt_compare("gated.state", "zero gates vs attn_linear: state", &sgv, sls, &rs, 0, n, 0, TOL_PROPERTY_FACTOR);
  free(gl);
  free(sls);
  gt_ref_free(&r);
  gt_ref_free(&rs);
  tu_tensor_free(&og);
  tu_tensor_free(&ol);
  lu_state_free(&sg);
  lu_state_free(&sl);
  gt_inputs_free(&x);
}
END_TEST

/* attn_linear_desc_init's gate defaults: no gate, no beta, layouts [n_kv][H][1]. */
START_TEST(gated_desc_init_defaults) {
  attn_linear_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_linear_desc_init(&d, 5, 9, 6, 2, 16, 8, ATTN_FEATURE_IDENTITY), ATTN_OK);
  ck_assert_int_eq(d.gate, ATTN_GATE_NONE);
  ck_assert_int_eq(d.beta, 0);
  ck_assert_uint_eq(d.gate_layout.row_stride, 6);
  ck_assert_uint_eq(d.gate_layout.head_stride, 1);
  ck_assert_uint_eq(d.beta_layout.row_stride, 6);
  ck_assert_uint_eq(d.beta_layout.head_stride, 1);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Extreme gates: nothing overflows, nothing is lost                                            */
/* ------------------------------------------------------------------------------------------ */
typedef struct gx_case {
  const char *name;
  gt_gk gate;
  gt_fill fill;
  float lo, hi;
  gt_glayout glayout;
  gt_map map;
  int beta;
  size_t n, chunk, prefix, decode;
} gx_case;

static const gx_case gx_cases[] = {
    /* -5 per token over a chunk of 64: exp(+320) in a naive factorisation */
    {"lg -5, chunk 64", K_SCALAR, GF_CONST, -5.0f, 0.0f, GL_T, M_ID, 0, 200, 64, 0, 4},
    {"lg -5, chunk 64, feature", K_FEATURE, GF_CONST, -5.0f, 0.0f, GL_T, M_ID, 1, 200, 64, 0, 4},
    {"lg -5 per head (row stride 0), chunk 64", K_SCALAR, GF_CONST, -5.0f, 0.0f, GL_R0, M_ELU, 0, 200, 64, 10, 4},
    /* down to -20 per token */
    {"lg in [-20, 0), default chunk", K_SCALAR, GF_UNIFORM, -20.0f, 0.0f, GL_T, M_ELU, 0, 200, 0, 0, 4},
    {"lg in [-20, 0), chunk 64, feature", K_FEATURE, GF_UNIFORM, -20.0f, 0.0f, GL_T, M_ID, 1, 200, 64, 0, 4},
    {"lg in [-20, 0), chunk 256, feature", K_FEATURE, GF_UNIFORM, -20.0f, 0.0f, GL_T, M_ELU, 0, 300, 256, 0, 0},
    /* -20 per token, chunk 64: a chunk's decay is e^-1280, far below e^-300 (double's range) */
    {"lg -20, chunk 64, incoming state", K_SCALAR, GF_CONST, -20.0f, 0.0f, GL_T, M_ID, 1, 130, 64, 40, 8},
    {"lg -20, chunk 64, feature", K_FEATURE, GF_CONST, -20.0f, 0.0f, GL_T, M_ELU, 0, 130, 64, 40, 8},
    {"lg -20, chunk 256", K_SCALAR, GF_CONST, -20.0f, 0.0f, GL_T, M_RELU, 0, 256, 256, 0, 0},
    /* features that never decay beside features that decay by e^-20 per token */
    {"features 0 | -20, chunk 64", K_FEATURE, GF_SPLIT, -20.0f, 0.0f, GL_T, M_ID, 0, 200, 64, 30, 8},
    {"features 0 | -20, chunk 256", K_FEATURE, GF_SPLIT, -20.0f, 0.0f, GL_T, M_ELU, 1, 300, 256, 0, 0},
    {"features 0 | -20, default chunk", K_FEATURE, GF_SPLIT, -20.0f, 0.0f, GL_T, M_ID, 1, 200, 0, 0, 4},
    {"features mild | -20, chunk 64", K_FEATURE, GF_MIXED, -20.0f, 0.0f, GL_T, M_ID, 1, 200, 64, 20, 8},
    {"features mild | -20, chunk 7", K_FEATURE, GF_MIXED, -20.0f, 0.0f, GL_T, M_ELU, 0, 200, 7, 0, 4},
};
#define GX_NCASES (sizeof gx_cases / sizeof gx_cases[0])

/* A prefix call, the main call, then `decode` steps: every output and state finite, and each
 * against the reference. */
START_TEST(gated_extreme_gates) {
  const gx_case *c = &gx_cases[_i];
  const size_t n = tu_small() && c->n > 130 ? 130 : c->n, nall = c->prefix + n + c->decode, dd = 16, dv = 8;
  const size_t hq = 2, hk = 2, hv = 4, hg = 4;
  tu_rng rng;
  tu_rng_seed(&rng, 25000 + (uint64_t)_i);
  attn_linear_desc d;
  gt_desc(&d, n, n, hq, hk, hv, hg, dd, dv, gt_fm(c->map), gt_norm(c->map), gt_kind(c->gate), c->beta, c->chunk);
  const gt_gatespec spec = {
      .kind = d.gate, .beta = c->beta, .layout = c->glayout, .fill = c->fill, .lo = c->lo, .hi = c->hi};
  gt_inputs x;
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, nall, nall, &d, &spec);
  const gt_view v = gt_slice(&x, c->prefix, n, c->prefix, n);
  gt_bind(&d, &v);
  const size_t C = gt_chunk(&d);
  lu_state st;
  lu_state_make(&st, &d);
  double *s0 = NULL;
  tu_tensor o;
  char what[160];
  if (c->prefix) {
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = c->prefix;
    const gt_view pv = gt_slice(&x, 0, c->prefix, 0, c->prefix);
    gt_call(&pd, &pv, TU_TOKEN_MAJOR, &st.s, 0, &o);
    gt_assert_output_finite(c->name, &o);
    snprintf(what, sizeof what, "%s: prefix", c->name);
    gt_check_output(what, &pd, &pv, NULL, 0, C, C, &o);
    tu_tensor_free(&o);
    s0 = lu_state_to_double(&st.s);
  }
  gt_call(&d, &v, TU_TOKEN_MAJOR, &st.s, 0, &o);
  gt_assert_output_finite(c->name, &o);
  gt_assert_finite(c->name, st.s.data, lu_state_floats(&st.s));
  gt_check_output(c->name, &d, &v, s0, c->prefix, C, C, &o);
  snprintf(what, sizeof what, "%s: state", c->name);
  gt_check_state(what, &d, &v, s0, c->prefix, C, C, &st.s);
  tu_tensor_free(&o);
  for (size_t t = 0; t < c->decode; ++t) { /* decode steps, each against the whole sequence's row */
    free(s0);
    s0 = lu_state_to_double(&st.s);
    attn_linear_desc sd = d;
    sd.shape.n_q = sd.shape.n_kv = 1;
    const size_t at = c->prefix + n + t;
    const gt_view sv = gt_slice(&x, at, 1, at, 1);
    gt_call(&sd, &sv, TU_TOKEN_MAJOR, &st.s, 0, &o);
    gt_assert_output_finite(c->name, &o);
    snprintf(what, sizeof what, "%s: decode step %zu", c->name, t);
    gt_check_output(what, &sd, &sv, s0, at, 1, 1, &o);
    tu_tensor_free(&o);
  }
  gt_assert_finite(c->name, st.s.data, lu_state_floats(&st.s));
  free(s0);
  lu_state_free(&st);
  gt_inputs_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid gated causal call with a state; the call */
/* answers the row's status (and, for descriptor faults, so does every size query), and neither */
/* o nor the state (struct and data) nor any input is written.                                   */
/* ------------------------------------------------------------------------------------------ */
enum { BNQ = 5, BNKV = 7, BHQ = 4, BHK = 2, BD = 8, BDV = 6 };

typedef enum gb_kind {
  GB_GATE_NULL,
  GB_GATE_NULL_FEATURE,
  GB_BETA_NULL,
  GB_GATE_POS,
  GB_GATE_TINY_POS,
  GB_GATE_NAN,
  GB_GATE_NINF,
  GB_GATE_PINF,
  GB_GATE_POS_FEATURE,
  GB_GATE_NAN_FEATURE,
  GB_BETA_0,
  GB_BETA_NAN,
  GB_BETA_NEG,
  GB_BETA_INF,
  GB_KIND_3,
  GB_KIND_NEG,
  GB_BETA_FLAG_2,
  GB_BETA_FLAG_NEG,
  GB_FULL_MASK,
  GB_EXP_MAP,
  GB_HG_3,
  GB_FEAT_HEAD_STRIDE,
  GB_FEAT_ROW_STRIDE,
  GB_STATE_HG,
  GB_UNGATED_GATE,
  GB_UNGATED_BETA,
  GB_O_IN_GATE
} gb_kind;

typedef struct gb_case {
  const char *name;
  gb_kind kind;
  attn_status expect;
  int desc_level; /* workspace_size, state_size, feature_size and chunk_size answer the same */
} gb_case;

#define GB(k, s, lvl) .kind = (k), .expect = (s), .desc_level = (lvl)
static const gb_case gb_cases[] = {
    {.name = "log_gate NULL (SCALAR)", GB(GB_GATE_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "log_gate NULL (FEATURE)", GB(GB_GATE_NULL_FEATURE, ATTN_E_NULL_POINTER, 0)},
    {.name = "beta NULL with desc.beta", GB(GB_BETA_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "a log gate +0.25", GB(GB_GATE_POS, ATTN_E_BAD_GATE, 0)},
    {.name = "a log gate +1e-30", GB(GB_GATE_TINY_POS, ATTN_E_BAD_GATE, 0)},
    {.name = "a log gate NaN", GB(GB_GATE_NAN, ATTN_E_BAD_GATE, 0)},
    {.name = "a log gate -inf", GB(GB_GATE_NINF, ATTN_E_BAD_GATE, 0)},
    {.name = "a log gate +inf", GB(GB_GATE_PINF, ATTN_E_BAD_GATE, 0)},
    {.name = "a per-feature log gate +0.5 (last feature)", GB(GB_GATE_POS_FEATURE, ATTN_E_BAD_GATE, 0)},
    {.name = "a per-feature log gate NaN (last feature)", GB(GB_GATE_NAN_FEATURE, ATTN_E_BAD_GATE, 0)},
    {.name = "a beta 0", GB(GB_BETA_0, ATTN_E_BAD_GATE, 0)},
    {.name = "a beta NaN", GB(GB_BETA_NAN, ATTN_E_BAD_GATE, 0)},
    {.name = "a beta -0.5", GB(GB_BETA_NEG, ATTN_E_BAD_GATE, 0)},
    {.name = "a beta +inf", GB(GB_BETA_INF, ATTN_E_BAD_GATE, 0)},
    {.name = "gate kind 3", GB(GB_KIND_3, ATTN_E_BAD_GATE, 1)},
    {.name = "gate kind -1", GB(GB_KIND_NEG, ATTN_E_BAD_GATE, 1)},
    {.name = "desc.beta 2", GB(GB_BETA_FLAG_2, ATTN_E_BAD_GATE, 1)},
    {.name = "desc.beta -1", GB(GB_BETA_FLAG_NEG, ATTN_E_BAD_GATE, 1)},
    {.name = "a gate with the full mask", GB(GB_FULL_MASK, ATTN_E_BAD_WINDOW, 1)},
    {.name = "a gate with the exp map", GB(GB_EXP_MAP, ATTN_E_BAD_FEATURE_MAP, 1)},
    {.name = "h_g 3 with H 4", GB(GB_HG_3, ATTN_E_BAD_HEADS, 1)},
    {.name = "FEATURE gate head stride m - 1", GB(GB_FEAT_HEAD_STRIDE, ATTN_E_BAD_STRIDE, 1)},
    {.name = "FEATURE gate row stride m - 1 (not 0)", GB(GB_FEAT_ROW_STRIDE, ATTN_E_BAD_STRIDE, 1)},
    {.name = "a state made with another h_g (L 2, not 4)", GB(GB_STATE_HG, ATTN_E_STATE_MISMATCH, 0)},
    {.name = "attn_linear with a gate", GB(GB_UNGATED_GATE, ATTN_E_BAD_ARGUMENT, 0)},
    {.name = "attn_linear with beta", GB(GB_UNGATED_BETA, ATTN_E_BAD_ARGUMENT, 0)},
    {.name = "o inside the log gates", GB(GB_O_IN_GATE, ATTN_E_ALIASING, 0)},
};
#define GB_NCASES (sizeof gb_cases / sizeof gb_cases[0])

START_TEST(gated_rejects_bad_input) {
  const gb_case *c = &gb_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 26000 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, BNQ, BNKV, BHQ, BHK, BHK, BD, BDV);
  /* valid gates for SCALAR ({H, 1}) and FEATURE ({H m, m}) layouts, and betas */
  const size_t gfloats = (size_t)BNKV * BHQ * BD, bfloats = (size_t)BNKV * BHQ;
  float *lg = malloc(sizeof(float) * gfloats), *beta = malloc(sizeof(float) * bfloats);
  ck_assert(lg && beta);
  for (size_t e = 0; e < gfloats; ++e) lg[e] = tu_rng_range(&rng, -3.0f, 0.0f);
  for (size_t e = 0; e < bfloats; ++e) beta[e] = tu_rng_range(&rng, 0.1f, 2.0f);
  attn_linear_desc d;
  gt_desc(&d, BNQ, BNKV, BHQ, BHK, BHK, BHQ, BD, BDV, ATTN_FEATURE_ELU1, 1, ATTN_GATE_SCALAR, 1, 0);
  d.gate_layout.row_stride = BHQ;
  d.gate_layout.head_stride = 1;
  d.beta_layout.row_stride = BHQ;
  d.beta_layout.head_stride = 1;
  const attn_layout feat = {(size_t)BHQ * BD, BD};
  lu_state st, alt;
  memset(&alt, 0, sizeof alt);
  lu_state_make_filled(&st, &d, &rng);
  size_t need = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &need), ATTN_OK);
  tu_tensor o;
  tu_tensor_alloc(&o, TU_TOKEN_MAJOR, BNQ, BHQ, BDV, 1);
  void *ws = tu_alloc(need + 4096, 0);
  const float *gp = lg, *bp = beta;
  float *op = o.data;
  attn_linear_state *sp = &st.s;
  int have_alt = 0, ungated = 0;
  const size_t last = (size_t)(BNKV - 1) * BHQ + (BHQ - 1); /* the last token's last head */
  switch (c->kind) {
    case GB_GATE_NULL:
      gp = NULL;
      break;
    case GB_GATE_NULL_FEATURE:
      d.gate = ATTN_GATE_FEATURE;
      d.gate_layout = feat;
      gp = NULL;
      break;
    case GB_BETA_NULL:
      bp = NULL;
      break;
    case GB_GATE_POS:
      lg[last] = 0.25f;
      break;
    case GB_GATE_TINY_POS:
      lg[last] = 1e-30f;
      break;
    case GB_GATE_NAN:
      lg[last] = NAN;
      break;
    case GB_GATE_NINF:
      lg[last] = -INFINITY;
      break;
    case GB_GATE_PINF:
      lg[last] = INFINITY;
      break;
    case GB_GATE_POS_FEATURE:
      d.gate = ATTN_GATE_FEATURE;
      d.gate_layout = feat;
      lg[gfloats - 1] = 0.5f;
      break;
    case GB_GATE_NAN_FEATURE:
      d.gate = ATTN_GATE_FEATURE;
      d.gate_layout = feat;
      lg[gfloats - 1] = NAN;
      break;
    case GB_BETA_0:
      beta[last] = 0.0f;
      break;
    case GB_BETA_NAN:
      beta[last] = NAN;
      break;
    case GB_BETA_NEG:
      beta[last] = -0.5f;
      break;
    case GB_BETA_INF:
      beta[last] = INFINITY;
      break;
    case GB_KIND_3:
      d.gate = (attn_gate_kind)3;
      break;
    case GB_KIND_NEG:
      d.gate = (attn_gate_kind)-1;
      break;
    case GB_BETA_FLAG_2:
      d.beta = 2;
      break;
    case GB_BETA_FLAG_NEG:
      d.beta = -1;
      break;
    case GB_FULL_MASK:
      d.mask = attn_mask_full();
      sp = NULL; /* a bidirectional call takes no state */
      break;
    case GB_EXP_MAP:
      d.feature_map = ATTN_FEATURE_EXP;
      sp = NULL; /* the state was made for elu1 */
      break;
    case GB_HG_3:
      d.h_g = 3;
      sp = NULL;
      break;
    case GB_FEAT_HEAD_STRIDE:
      d.gate = ATTN_GATE_FEATURE;
      d.gate_layout = feat;
      d.gate_layout.head_stride = BD - 1;
      break;
    case GB_FEAT_ROW_STRIDE:
      d.gate = ATTN_GATE_FEATURE;
      d.gate_layout = feat;
      d.gate_layout.row_stride = BD - 1;
      break;
    case GB_STATE_HG: {
      attn_linear_desc ad = d;
      ad.h_g = 2; /* L = lcm(2, 2, 2) = 2 state heads instead of 4 */
      lu_state_make_filled(&alt, &ad, &rng);
      ck_assert_uint_eq(alt.s.heads, 2);
      have_alt = 1;
      sp = &alt.s;
      break;
    }
    case GB_UNGATED_GATE:
      d.beta = 0;
      ungated = 1;
      break;
    case GB_UNGATED_BETA:
      d.gate = ATTN_GATE_NONE;
      ungated = 1;
      break;
    case GB_O_IN_GATE:
      op = lg + 3;
      break;
  }
  /* snapshots: the state (struct and data) and the gate inputs */
  lu_rejected untouched;
  lu_rejected_take(&untouched, sp, have_alt ? alt.mem : st.mem, have_alt ? alt.bytes : st.bytes);
  float *lg_before = malloc(sizeof(float) * gfloats), *beta_before = malloc(sizeof(float) * bfloats);
  ck_assert(lg_before && beta_before);
  memcpy(lg_before, lg, sizeof(float) * gfloats);
  memcpy(beta_before, beta, sizeof(float) * bfloats);
  const attn_status got = ungated ? attn_linear(&d, x.q.data, x.k.data, x.v.data, op, sp, ws, need)
                                  : attn_linear_gated(&d, x.q.data, x.k.data, x.v.data, gp, bp, op, sp, ws, need);
  ck_assert_msg(got == c->expect, "%s: got %s (%d), want %s (%d)", c->name, attn_status_string(got), (int)got,
                attn_status_string(c->expect), (int)c->expect);
  if (c->desc_level) lu_assert_queries(&d, c->expect);
  lu_rejected_check(&untouched, &o, ws, &x);
  tu_assert_same_bits("log gates after a rejected call", lg_before, lg, sizeof(float) * gfloats);
  tu_assert_same_bits("beta after a rejected call", beta_before, beta, sizeof(float) * bfloats);
  free(lg_before);
  free(beta_before);
  if (have_alt) tu_free(alt.mem);
  tu_free(st.mem);
  tu_free(ws);
  tu_tensor_free(&o);
  free(lg);
  free(beta);
  tu_qkv_free(&x);
}
END_TEST

/* attn_retnet_log_decays: heads 0 and a NULL output; nothing written on error. */
START_TEST(gated_retnet_decays_bad_input) {
  float lg[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  ck_assert_int_eq(attn_retnet_log_decays(0, lg), ATTN_E_ZERO_SIZE);
  ck_assert(lg[0] == 1.0f && lg[1] == 2.0f && lg[2] == 3.0f && lg[3] == 4.0f);
  ck_assert_int_eq(attn_retnet_log_decays(4, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

static Suite *gates_suite(attn_isa isa) {
  Suite *s = suite_create(attn_isa_name(isa));
  size_t work[GT_NCASES];
  for (size_t i = 0; i < GT_NCASES; ++i) {
    const gt_case *c = &gt_cases[i];
    size_t H = c->h_q;
    const size_t other[3] = {c->h_k, c->h_v, c->h_g};
    for (int t = 0; t < 3; ++t) H = other[t] > H ? other[t] : H;
    work[i] = c->n_q * (c->n_kv + c->prefix) * H * (c->d + c->dv);
  }
  const size_t nsel = tu_select_rows(GT_NCASES, work, gt_sel);
  TCase *tc = tu_tcase("reference");
  tcase_add_loop_test(tc, gated_matches_reference, 0, (int)nsel);
  tcase_add_test(tc, gated_desc_init_defaults);
  suite_add_tcase(s, tc);
  tc = tu_tcase("models");
  tcase_add_test(tc, gated_retnet_decays);
  tcase_add_loop_test(tc, gated_retnet_parallel_form, 0, 8);
  tcase_add_loop_test(tc, gated_mamba2_ssd, 0, 6);
  suite_add_tcase(s, tc);
  tc = tu_tcase("properties");
  tcase_add_loop_test(tc, gated_chunkwise_matches_recurrent, 0, (int)GP_NCASES);
  tcase_add_loop_test(tc, gated_pieces_then_decode, 0, (int)(2 * GP_NCASES));
  tcase_add_loop_test(tc, gated_feature_equal_is_scalar, 0, 16);
  tcase_add_loop_test(tc, gated_zero_gates_are_plain_linear, 0, 8);
  suite_add_tcase(s, tc);
  tc = tu_tcase("extreme");
  tcase_add_loop_test(tc, gated_extreme_gates, 0, (int)GX_NCASES);
  suite_add_tcase(s, tc);
  tc = tu_tcase("bad_input");
  tcase_add_loop_test(tc, gated_rejects_bad_input, 0, (int)GB_NCASES);
  tcase_add_test(tc, gated_retnet_decays_bad_input);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_main(gates_suite); }
