/*
 * Queries and outputs stored as fp16 or bf16 (attn_shape.q_type and o_type, 0.10.0), per ISA
 * path (ATTN_ISA), for every variant that takes them: softmax (prefill, decode, a window, GQA,
 * LSE, sinks with ALiBi and a soft cap) and its batch, GAU, selective attention and its cache's
 * decode steps, linear attention (element-wise and exponential maps, a prefill then a decode
 * step carrying the state, the scan's gathered rows, a window, per-feature gates, checkpoints)
 * and the delta rule (chunks, then the token step), without and with threads. Part of the
 * kv_half executable (its main lists these rows).
 *
 * The engines convert a task's query rows exactly into fp32 and round each output row once from
 * fp32 (src/engine/act.h), so a call's outputs are the fp32 call's on the rounded queries,
 * rounded to the output type. That is the check, bit for bit (NaN as NaN), against the fp32
 * call of the same variant, the rounding done by the tests' own converter (half_ref.h); every
 * fp32 output beside o (LSE, F, states, checkpoints) must equal the fp32 call's bit for bit too.
 * The fp32 calls are those the variants' suites check against their float64 references; the
 * softmax rows' half outputs are checked against the float64 reference here as well, with the
 * fp32 bound plus the output type's rounding (half an ulp of the reference value).
 * The queries' gaps hold NaN patterns and the outputs' gaps a NaN sentinel: a misread poisons the
 * output and a stray write shows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_tests.h"
#include "test_util.h"
#include "tolerances.h"

#define UNB ATTN_UNBOUNDED
enum { V_SOFTMAX, V_BATCH, V_GAU, V_SELECTIVE, V_SELCACHE, V_LINEAR, V_GLA, V_CKPT, V_DELTA };
enum { OUT_SENTINEL = 0x7fa5, OUT_TAIL = 64 }; /* a NaN in both types; elements past o's span */

typedef struct qo_case {
  const char *name;
  int var;
  attn_dtype qt, ot;
  size_t n_q, n_kv, h_q, h_kv, d, dv; /* delta: h_q value heads, h_kv key heads, n_q tokens */
  size_t left, right;                 /* mask (softmax, batch, GAU, linear) */
  tu_layout_kind lay;                 /* q, k, v; o is padded (head-padded for head-major inputs) */
  int opt;        /* softmax: sinks, ALiBi, soft cap; GAU: bias table; linear: the feature map; delta: gate */
  size_t workers; /* 0: no threads */
} qo_case;

#define F16 ATTN_F16
#define B16 ATTN_BF16
#define F32 ATTN_F32
static const qo_case qo_cases[] = {
    {"softmax f16 causal gqa padded", V_SOFTMAX, F16, F16, 53, 211, 4, 2, 65, 17, UNB, 0, TU_PADDED, 0, 0},
    {"softmax bf16 full head-major", V_SOFTMAX, B16, B16, 37, 70, 3, 3, 33, 9, UNB, UNB, TU_HEAD_MAJOR, 0, 0},
    {"softmax f16 q fp32 o window", V_SOFTMAX, F16, F32, 70, 150, 3, 1, 16, 8, 20, 3, TU_HEAD_PADDED, 0, 0},
    {"softmax fp32 q bf16 o options", V_SOFTMAX, F32, B16, 40, 120, 4, 2, 32, 16, UNB, 0, TU_TOKEN_MAJOR, 1, 0},
    {"softmax f16 decode gqa", V_SOFTMAX, F16, F16, 1, 1333, 8, 2, 64, 64, UNB, 0, TU_TOKEN_MAJOR, 0, 0},
    {"softmax bf16 verify threads", V_SOFTMAX, B16, B16, 5, 4444, 8, 2, 128, 128, UNB, 0, TU_TOKEN_MAJOR, 0, 3},
    {"softmax f16 prefill threads", V_SOFTMAX, F16, B16, 300, 300, 4, 4, 64, 64, UNB, 0, TU_TOKEN_MAJOR, 0, 2},
    {"batch f16 varlen", V_BATCH, F16, F16, 61, 240, 4, 2, 32, 24, UNB, 0, TU_PADDED, 0, 0},
    {"batch bf16 threads", V_BATCH, B16, F32, 9, 3000, 8, 2, 64, 64, UNB, 0, TU_TOKEN_MAJOR, 0, 3},
    {"gau f16 causal", V_GAU, F16, F16, 45, 130, 4, 2, 19, 11, UNB, 0, TU_PADDED, 0, 0},
    {"gau bf16 table decode", V_GAU, B16, B16, 1, 400, 2, 2, 16, 20, UNB, 0, TU_HEAD_MAJOR, 1, 0},
    {"selective f16 prefill gqa", V_SELECTIVE, F16, F16, 150, 150, 4, 2, 24, 13, UNB, 0, TU_PADDED, 0, 0},
    {"selective bf16 head groups threads", V_SELECTIVE, B16, B16, 60, 60, 4, 4, 256, 256, UNB, 0, TU_TOKEN_MAJOR, 0, 2},
    {"selcache f16 steps", V_SELCACHE, F16, B16, 6, 36, 4, 2, 24, 13, UNB, 0, TU_TOKEN_MAJOR, 0, 0},
    {"linear elu1 f16 then a step", V_LINEAR, F16, F16, 150, 150, 4, 2, 32, 24, UNB, 0, TU_PADDED, ATTN_FEATURE_ELU1,
     0},
    {"linear exp bf16 then a step", V_LINEAR, B16, B16, 100, 100, 2, 2, 16, 16, UNB, 0, TU_HEAD_MAJOR, ATTN_FEATURE_EXP,
     0},
    {"linear relu f16 gathered scan", V_LINEAR, F16, B16, 200, 200, 4, 4, 32, 32, UNB, 0, TU_TOKEN_MAJOR,
     ATTN_FEATURE_RELU, 0},
    {"linear elu1 bf16 waves", V_LINEAR, B16, F16, 260, 260, 2, 2, 16, 16, UNB, 0, TU_TOKEN_MAJOR, ATTN_FEATURE_ELU1,
     3},
    {"linear elu1 f16 window", V_LINEAR, F16, F16, 90, 90, 2, 1, 16, 8, 20, 0, TU_PADDED, ATTN_FEATURE_ELU1, 0},
    {"linear exp bf16 full", V_LINEAR, B16, F32, 40, 70, 2, 2, 16, 16, UNB, UNB, TU_TOKEN_MAJOR, ATTN_FEATURE_EXP, 0},
    {"gla f16 per-feature", V_GLA, F16, F16, 130, 130, 4, 2, 32, 16, UNB, 0, TU_PADDED, 0, 0},
    {"gla bf16 identity one head per state", V_GLA, B16, F16, 90, 90, 3, 3, 32, 24, UNB, 0, TU_TOKEN_MAJOR, 0, 0},
    {"linear checkpoints bf16", V_CKPT, B16, B16, 120, 120, 2, 2, 16, 16, UNB, 0, TU_TOKEN_MAJOR, ATTN_FEATURE_ELU1, 0},
    {"delta f16 scalar", V_DELTA, F16, F16, 70, 70, 4, 2, 32, 24, UNB, 0, TU_PADDED, ATTN_DELTA_SCALAR, 0},
    {"delta bf16 feature threads", V_DELTA, B16, F16, 50, 50, 4, 4, 16, 16, UNB, 0, TU_TOKEN_MAJOR, ATTN_DELTA_FEATURE,
     2},
};
#define QO_NCASES (sizeof qo_cases / sizeof qo_cases[0])

/* Heads of a case's tensors: q, k, v and the outputs H. */
typedef struct qo_heads {
  size_t q, k, v, H;
} qo_heads;
static qo_heads heads_of(const qo_case *c) {
  if (c->var == V_DELTA) return (qo_heads){c->h_kv, c->h_kv, c->h_q, c->h_q};
  return (qo_heads){c->h_q, c->h_kv, c->h_kv, c->h_q};
}

/* One call of a case: its inputs (q as the call reads it, of type qt), its output (of type ot,
 * layout ol) and its fp32 outputs beside it (aux), on the threads th (NULL: none). */
typedef struct qo_run {
  const qo_case *c;
  const tu_qkv *x;
  const float *g, *b; /* log gates and beta (GLA, delta) */
  const void *q;
  attn_dtype qt, ot;
  void *o;
  attn_layout ol;
  float *aux;
  const attn_threads *th;
} qo_run;

static void *ws_of(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

/* Element (t, h) of a tensor of type ty at base (layout l). */
static const void *elem(const void *base, attn_dtype ty, attn_layout l, size_t t, size_t h) {
  return (const char *)base + (t * l.row_stride + h * l.head_stride) * (ty == F32 ? 4 : 2);
}

static void shape_of(attn_shape *s, const qo_run *r) {
  s->q = r->x->q.l, s->k = r->x->k.l, s->v = r->x->v.l, s->o = r->ol;
  s->q_type = r->qt, s->o_type = r->ot;
  s->threads = r->th;
}

/* ---- softmax, its batch ---- */
static const float sinks[8] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f, 0.25f, 3.0f};
static const float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f, 0.0078125f, 0.00390625f};

static attn_softmax_desc sm_desc(const qo_run *r) {
  const qo_case *c = r->c;
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  d.mask.left = c->left, d.mask.right = c->right;
  d.lse = (attn_layout){c->h_q, 1};
  if (c->opt) d.sinks = sinks, d.alibi_slopes = slopes, d.softcap = 30.0f;
  shape_of(&d.shape, r);
  return d;
}

static void run_softmax(const qo_run *r) {
  const attn_softmax_desc d = sm_desc(r);
  size_t b;
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &b), ATTN_OK);
  void *ws = ws_of(b);
  ck_assert_int_eq(attn_softmax(&d, r->q, r->x->k.data, r->x->v.data, r->o, r->aux, ws, b), ATTN_OK);
  free(ws);
}

/* Three sequences: a prefill, a decode step and the rest, each over its third of the keys. */
static void run_batch(const qo_run *r) {
  const qo_case *c = r->c;
  const attn_softmax_desc d = sm_desc(r);
  const size_t qo[4] = {0, c->n_q / 2, c->n_q / 2 + 1, c->n_q}, ko[4] = {0, c->n_kv / 3, 2 * c->n_kv / 3, c->n_kv};
  attn_batch bt;
  ck_assert_int_eq(attn_batch_init(&bt), ATTN_OK);
  bt.count = 3, bt.q_offsets = qo, bt.kv_offsets = ko;
  size_t b;
  ck_assert_int_eq(attn_softmax_batch_workspace_size(&d, &bt, &b), ATTN_OK);
  void *ws = ws_of(b);
  ck_assert_int_eq(attn_softmax_batch(&d, &bt, r->q, r->x->k.data, r->x->v.data, r->o, r->aux, ws, b), ATTN_OK);
  free(ws);
}

/* ---- GAU ---- */
static const float gau_table[] = {0.3f, -0.2f, 0.1f, 0.05f, -0.4f, 0.25f, 0.0f, -0.1f, 0.2f};

static void run_gau(const qo_run *r) {
  const qo_case *c = r->c;
  attn_gau_desc d;
  ck_assert_int_eq(attn_gau_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  d.mask.left = c->left, d.mask.right = c->right, d.beta = 0.05f;
  if (c->opt) d.bias = ATTN_GAU_BIAS_TWO_SIDED, d.bias_table = gau_table, d.bias_len = 5;
  shape_of(&d.shape, r);
  size_t b;
  ck_assert_int_eq(attn_gau_workspace_size(&d, &b), ATTN_OK);
  void *ws = ws_of(b);
  ck_assert_int_eq(attn_gau(&d, r->q, r->x->k.data, r->x->v.data, r->o, ws, b), ATTN_OK);
  free(ws);
}

/* ---- selective attention and its cache ---- */
static attn_selective_desc sel_desc(const qo_run *r, size_t n_q, size_t n_kv) {
  attn_selective_desc d;
  ck_assert_int_eq(attn_selective_desc_init(&d, n_q, n_kv, r->c->h_q, r->c->h_kv, r->c->d, r->c->dv), ATTN_OK);
  d.h_sel = r->c->h_q - 1;
  d.lse = (attn_layout){r->c->h_q, 1};
  shape_of(&d.shape, r);
  return d;
}

/* aux: LSE (n_q h_q), then F (n_kv). */
static void run_selective(const qo_run *r) {
  const qo_case *c = r->c;
  const attn_selective_desc d = sel_desc(r, c->n_q, c->n_kv);
  float *f = r->aux + c->n_q * c->h_q;
  memset(f, 0, c->n_kv * sizeof(float));
  size_t b;
  ck_assert_int_eq(attn_selective_workspace_size(&d, &b), ATTN_OK);
  void *ws = ws_of(b);
  ck_assert_int_eq(attn_selective(&d, r->q, r->x->k.data, r->x->v.data, r->o, r->aux, f, ws, b), ATTN_OK);
  free(ws);
}

/* A cache loaded with the first n_kv - n_q tokens (F from an fp32 prefill), then a step for each
 * of the last n_q tokens; aux: each step's LSE, then the cache's memory. */
static size_t selcache_bytes(const qo_case *c) {
  size_t bytes;
  ck_assert_int_eq(attn_selcache_size(c->n_kv, c->h_kv, c->d, c->dv, &bytes), ATTN_OK);
  return bytes;
}

static void run_selcache(const qo_run *r) {
  const qo_case *c = r->c;
  const size_t n0 = c->n_kv - c->n_q, mb = selcache_bytes(c);
  qo_run pre = *r;
  pre.qt = pre.ot = F32, pre.th = NULL;
  attn_selective_desc dp = sel_desc(&pre, n0, n0);
  dp.shape.o = (attn_layout){c->h_q * c->dv, c->dv};
  float *f = calloc(c->n_kv, sizeof(float)), *po = malloc(sizeof(float) * n0 * c->h_q * c->dv);
  float *mem = (float *)(r->aux + c->n_q * c->h_q);
  ck_assert(f && po);
  size_t b;
  ck_assert_int_eq(attn_selective_workspace_size(&dp, &b), ATTN_OK);
  void *ws = ws_of(b);
  ck_assert_int_eq(attn_selective(&dp, r->x->q.data, r->x->k.data, r->x->v.data, po, NULL, f, ws, b), ATTN_OK);
  free(ws);
  attn_selcache cache;
  memset(mem, 0, mb);
  ck_assert_int_eq(attn_selcache_init(&cache, c->n_kv, c->h_kv, c->d, c->dv, INFINITY, 0, mem, mb), ATTN_OK);
  ck_assert_int_eq(attn_selcache_load(&cache, &dp, r->x->k.data, r->x->v.data, f), ATTN_OK);
  attn_selective_desc ds = sel_desc(r, 1, 1);
  ck_assert_int_eq(attn_selcache_workspace_size(&ds, &cache, &b), ATTN_OK);
  ws = ws_of(b);
  for (size_t st = 0; st < c->n_q; st++) {
    const size_t tok = n0 + st;
    ck_assert_int_eq(attn_selcache_step(&ds, &cache, elem(r->q, r->qt, r->x->q.l, tok, 0), tu_at(&r->x->k, tok, 0, 0),
                                        tu_at(&r->x->v, tok, 0, 0), (void *)elem(r->o, r->ot, r->ol, st, 0),
                                        r->aux + st * c->h_q, ws, b),
                     ATTN_OK);
  }
  free(ws), free(f), free(po);
}

/* ---- linear attention ---- */
static attn_linear_desc lin_desc(const qo_run *r, size_t n) {
  const qo_case *c = r->c;
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, n, n, c->h_q, c->h_kv, c->d, c->dv, (attn_feature_map)c->opt), ATTN_OK);
  d.mask.left = c->left, d.mask.right = c->right;
  d.shape.n_kv = c->n_kv - c->n_q + n; /* full attention: all keys */
  if (r->c->var == V_GLA) {
    d.gate = ATTN_GATE_FEATURE, d.h_g = c->h_q;
    d.gate_layout = (attn_layout){c->h_q * c->d, c->d};
  }
  shape_of(&d.shape, r);
  return d;
}

/* A causal call carries a state: tokens [0, n - 1), then the last one alone (the decode step);
 * aux: the state after both (and, with checkpoints, those). Other masks: one call, no state. */
static void run_linear(const qo_run *r) {
  const qo_case *c = r->c;
  const int causal = c->right == 0 && c->left == UNB;
  attn_linear_desc d = lin_desc(r, c->n_q);
  size_t b, sb;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &b), ATTN_OK);
  void *ws = ws_of(b);
  if (!causal) {
    ck_assert_int_eq(attn_linear(&d, r->q, r->x->k.data, r->x->v.data, r->o, NULL, ws, b), ATTN_OK);
    free(ws);
    return;
  }
  ck_assert_int_eq(attn_linear_state_size(&d, &sb), ATTN_OK);
  float *ck_states = r->aux + sb / sizeof(float);
  attn_linear_state st;
  ck_assert_int_eq(attn_linear_state_init(&st, &d, r->aux, sb), ATTN_OK);
  const size_t parts[2][2] = {{0, c->n_q - 1}, {c->n_q - 1, c->n_q}};
  for (int p = 0; p < 2; p++) {
    const size_t t0 = parts[p][0], n = parts[p][1] - t0;
    attn_linear_desc dp = lin_desc(r, n);
    const float *g = r->g ? r->g + t0 * dp.gate_layout.row_stride : NULL;
    const void *q = elem(r->q, r->qt, r->x->q.l, t0, 0);
    void *o = (void *)elem(r->o, r->ot, r->ol, t0, 0);
    const float *k = tu_at(&r->x->k, t0, 0, 0), *v = tu_at(&r->x->v, t0, 0, 0);
    const size_t after[2] = {n / 3, n / 2};
    const attn_checkpoints ck = {2, after, ck_states};
    if (c->var == V_CKPT && p == 0)
      ck_assert_int_eq(attn_linear_checkpointed(&dp, q, k, v, NULL, NULL, o, &st, &ck, ws, b), ATTN_OK);
    else
      ck_assert_int_eq(attn_linear_gated(&dp, q, k, v, g, NULL, o, &st, ws, b), ATTN_OK);
  }
  free(ws);
}

/* ---- the delta rule: tokens [0, n - 1) in chunks, then the last by the token step ---- */
static attn_delta_desc delta_desc(const qo_run *r, size_t n) {
  const qo_case *c = r->c;
  attn_delta_desc d;
  ck_assert_int_eq(attn_delta_desc_init(&d, n, c->h_kv, c->h_q, c->d, c->dv, (attn_delta_gate)c->opt), ATTN_OK);
  d.gate_layout.row_stride = c->h_q * (c->opt == ATTN_DELTA_FEATURE ? c->d : 1);
  shape_of(&d.shape, r);
  return d;
}

static void run_delta(const qo_run *r) {
  const qo_case *c = r->c;
  const size_t parts[2][2] = {{0, c->n_q - 1}, {c->n_q - 1, c->n_q}};
  memset(r->aux, 0, c->h_q * c->d * c->dv * sizeof(float));
  for (int p = 0; p < 2; p++) {
    const size_t t0 = parts[p][0];
    const attn_delta_desc d = delta_desc(r, parts[p][1] - t0);
    size_t b;
    ck_assert_int_eq(attn_delta_workspace_size(&d, &b), ATTN_OK);
    void *ws = ws_of(b);
    ck_assert_int_eq(
        attn_delta(&d, elem(r->q, r->qt, r->x->q.l, t0, 0), tu_at(&r->x->k, t0, 0, 0), tu_at(&r->x->v, t0, 0, 0),
                   r->g + t0 * d.gate_layout.row_stride, r->b + t0 * d.beta_layout.row_stride,
                   (void *)elem(r->o, r->ot, r->ol, t0, 0), r->aux, NULL, ws, b),
        ATTN_OK);
    free(ws);
  }
}

typedef void (*qo_run_fn)(const qo_run *r);
static const qo_run_fn runs[] = {run_softmax, run_batch,  run_gau,    run_selective, run_selcache,
                                 run_linear,  run_linear, run_linear, run_delta};

/* Floats of a case's fp32 outputs beside o. */
static size_t aux_floats(const qo_case *c, const tu_qkv *x) {
  const qo_heads hd = heads_of(c);
  switch (c->var) {
    case V_SOFTMAX:
    case V_BATCH:
      return c->n_q * c->h_q;
    case V_SELECTIVE:
      return c->n_q * c->h_q + c->n_kv;
    case V_SELCACHE:
      return c->n_q * c->h_q + selcache_bytes(c) / sizeof(float) + 1;
    case V_LINEAR:
    case V_GLA:
    case V_CKPT: {
      qo_run r = {.c = c, .x = x, .qt = F32, .ot = F32, .ol = {hd.H * c->dv, c->dv}};
      const attn_linear_desc d = lin_desc(&r, c->n_q);
      size_t sb;
      ck_assert_int_eq(attn_linear_state_size(&d, &sb), ATTN_OK);
      return 3 * (sb / sizeof(float)); /* the state, two checkpoints */
    }
    case V_DELTA:
      return hd.v * c->d * c->dv;
    default:
      return 0;
  }
}

/* got (the case's o, type ot) against the fp32 call's o32 rounded to ot, element by element, and
 * the gaps of a half o untouched. */
static void assert_rounded(const qo_case *c, const void *got, const tu_tensor *o32) {
  for (size_t t = 0; t < o32->n; t++)
    for (size_t h = 0; h < o32->h; h++)
      for (size_t x = 0; x < o32->w; x++) {
        const float want = *tu_at(o32, t, h, x);
        const size_t e = (size_t)(tu_at(o32, t, h, x) - o32->data);
        if (c->ot == F32) {
          const float g = ((const float *)got)[e];
          ck_assert_msg((isnan(g) && isnan(want)) || memcmp(&g, &want, sizeof g) == 0,
                        "%s: o(%zu, %zu, %zu) = %a, the fp32 call's %a", c->name, t, h, x, (double)g, (double)want);
        } else {
          const uint16_t g = ((const uint16_t *)got)[e], w = tu_half_bits(c->ot, want);
          ck_assert_msg((isnan(tu_half_value(c->ot, g)) && isnan(want)) || g == w,
                        "%s: o(%zu, %zu, %zu) = 0x%04x, the fp32 call's %a rounds to 0x%04x", c->name, t, h, x, g,
                        (double)want, w);
        }
      }
}

/* Half o's elements outside the layout (gaps and OUT_TAIL past the span) still the sentinel. */
static void assert_half_clean(const char *name, const uint16_t *o, const tu_tensor *o32) {
  unsigned char *mark = calloc(o32->span + OUT_TAIL, 1);
  ck_assert_ptr_nonnull(mark);
  for (size_t t = 0; t < o32->n; t++)
    for (size_t h = 0; h < o32->h; h++)
      for (size_t x = 0; x < o32->w; x++) mark[tu_at(o32, t, h, x) - o32->data] = 1;
  for (size_t e = 0; e < o32->span + OUT_TAIL; e++)
    ck_assert_msg(mark[e] || o[e] == OUT_SENTINEL, "%s: element %zu outside o written", name, e);
  free(mark);
}

/* Softmax rows: the half o decoded, against the float64 reference within the fp32 bound plus
 * half an ulp of the output type (relative 2^-11 fp16, 2^-8 bf16; fp16's subnormal step 2^-25). */
static void check_reference(const qo_case *c, const qo_run *r, const tu_tensor *o32, const void *got) {
  const attn_softmax_desc d = sm_desc(r);
  tu_softmax_ref ref;
  tu_softmax_ref_compute(&d, &r->x->q, &r->x->k, &r->x->v, &ref);
  tu_tensor od = *o32;
  od.data = malloc(sizeof(float) * o32->span), od.owner = NULL;
  ck_assert_ptr_nonnull(od.data);
  const size_t rows = c->n_q * c->h_q;
  double *tol = malloc(sizeof(double) * rows * c->dv), *sc = malloc(sizeof(double) * rows * c->dv);
  ck_assert(tol && sc);
  const double u = c->ot == F16 ? ldexp(1.0, -11) : c->ot == B16 ? ldexp(1.0, -8) : 0.0;
  for (size_t t = 0; t < c->n_q; t++)
    for (size_t h = 0; h < c->h_q; h++)
      for (size_t x = 0; x < c->dv; x++) {
        const size_t e = (size_t)(tu_at(o32, t, h, x) - o32->data), i = (t * c->h_q + h) * c->dv + x;
        *tu_at(&od, t, h, x) =
            c->ot == F32 ? ((const float *)got)[e] : (float)tu_half_value(c->ot, ((const uint16_t *)got)[e]);
        sc[i] = ref.oscale[i] > 0.0 ? ref.oscale[i] : 1.0;
        tol[i] = tol_softmax_o(c->n_kv, c->d, ref.sabs[t * c->h_q + h]) * ref.oscale[i] / sc[i] +
                 (u * fabs(ref.o[i]) + (u ? ldexp(1.0, -25) : 0.0)) / sc[i];
      }
  tu_compare("qo_half.softmax.o", c->name, &od, ref.o, sc, tol);
  free(od.data), free(tol), free(sc);
  tu_softmax_ref_free(&ref);
}

START_TEST(qo_half_matches_fp32) {
  const qo_case *c = &qo_cases[_i];
  const qo_heads hd = heads_of(c);
  tu_rng rng;
  tu_rng_seed(&rng, 0x90a1f + (uint64_t)_i);
  tu_qkv x;
  /* the selective cache's prefill reads every token's query; the delta rule has n_q tokens */
  const size_t nq_in = c->var == V_SELCACHE ? c->n_kv : c->n_q, nkv_in = c->var == V_DELTA ? c->n_q : c->n_kv;
  tu_qkv_make(&x, c->lay, TU_DATA_UNIFORM, &rng, nq_in, nkv_in, hd.q, hd.k, hd.v, c->d, c->dv);
  uint16_t *qh = c->qt != F32 ? tu_half_of(&x.q, c->qt) : NULL; /* x.q now holds the rounded values */
  tu_qkv_snapshot(&x);
  uint16_t *qcopy = qh ? malloc(sizeof(uint16_t) * x.q.span) : NULL;
  if (qh) memcpy(qcopy, qh, sizeof(uint16_t) * x.q.span);
  /* gates and beta: GLA's per-feature log gates, the delta rule's gates and beta */
  const size_t gw = c->var == V_GLA || c->opt == ATTN_DELTA_FEATURE ? c->d : 1;
  float *g = malloc(sizeof(float) * c->n_q * hd.H * gw), *b = malloc(sizeof(float) * c->n_q * hd.H);
  ck_assert(g && b);
  for (size_t e = 0; e < c->n_q * hd.H * gw; e++) g[e] = tu_rng_range(&rng, -0.3f, -0.01f);
  for (size_t e = 0; e < c->n_q * hd.H; e++) b[e] = tu_rng_range(&rng, 0.1f, 0.9f);
  attn_pool *pool = NULL;
  attn_threads th;
  if (c->workers) {
    ck_assert_int_eq(attn_pool_create(c->workers, &pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
  }
  const tu_layout_kind okind = c->lay == TU_HEAD_MAJOR || c->lay == TU_HEAD_PADDED ? TU_HEAD_PADDED : TU_PADDED;
  tu_tensor o32, o;
  tu_tensor_alloc(&o32, okind, c->n_q, hd.H, c->dv, 1);
  tu_tensor_alloc(&o, okind, c->n_q, hd.H, c->dv, 1); /* the case's o when fp32 */
  uint16_t *oh = malloc(sizeof(uint16_t) * (o32.span + OUT_TAIL));
  ck_assert_ptr_nonnull(oh);
  for (size_t e = 0; e < o32.span + OUT_TAIL; e++) oh[e] = OUT_SENTINEL;
  const size_t na = aux_floats(c, &x);
  float *aux32 = calloc(na + 1, sizeof(float)), *aux = calloc(na + 1, sizeof(float));
  ck_assert(aux32 && aux);
  const qo_run r32 = {c, &x, g, b, x.q.data, F32, F32, o32.data, o32.l, aux32, NULL};
  const qo_run r = {c,
                    &x,
                    g,
                    b,
                    qh ? (const void *)qh : x.q.data,
                    c->qt,
                    c->ot,
                    c->ot == F32 ? (void *)o.data : oh,
                    o32.l,
                    aux,
                    c->workers ? &th : NULL};
  runs[c->var](&r32);
  runs[c->var](&r);
  const void *got = c->ot == F32 ? (const void *)o.data : oh;
  assert_rounded(c, got, &o32);
  if (c->ot == F32)
    tu_assert_output_clean("o", &o);
  else
    assert_half_clean(c->name, oh, &o32);
  for (size_t e = 0; e < na; e++)
    ck_assert_msg((isnan(aux[e]) && isnan(aux32[e])) || memcmp(aux + e, aux32 + e, sizeof(float)) == 0,
                  "%s: fp32 output %zu (LSE, F, state) %a, the fp32 call's %a", c->name, e, (double)aux[e],
                  (double)aux32[e]);
  tu_qkv_assert_unchanged(&x);
  if (qh) ck_assert_msg(memcmp(qh, qcopy, sizeof(uint16_t) * x.q.span) == 0, "%s: q written", c->name);
  if (c->var == V_SOFTMAX) check_reference(c, &r, &o32, got);
  if (pool) attn_pool_destroy(pool);
  free(aux32), free(aux), free(oh), free(qh), free(qcopy), free(g), free(b);
  tu_tensor_free(&o32), tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* ---- bad types, and aliasing counted in the types' bytes ---- */
typedef struct qo_bad {
  int var; /* V_SOFTMAX, V_GAU, V_LINEAR, V_DELTA, or -1: attn_matrix */
  int q_type, o_type;
} qo_bad;
static const qo_bad bad_rows[] = {
    {V_SOFTMAX, ATTN_I8, F32},
    {V_SOFTMAX, F32, ATTN_Q8_0},
    {V_SOFTMAX, 7, F16},
    {V_GAU, F16, 9},
    {V_SELECTIVE, ATTN_I8, F16},
    {V_LINEAR, -1, F32},
    {V_LINEAR, F16, ATTN_I8},
    {V_DELTA, ATTN_Q8_0, F16},
    {-1, F16, F32},
    {-1, F32, B16},
};

START_TEST(qo_half_bad_type) {
  const qo_bad *w = &bad_rows[_i];
  enum { N = 6, HH = 2, D = 8 };
  float q[N * HH * D], k[N * HH * D], v[N * HH * D], o[N * HH * D + 64], ws[1 << 14], f[N];
  for (size_t e = 0; e < sizeof q / sizeof q[0]; e++) q[e] = k[e] = v[e] = 0.01f * (float)(e % 17);
  for (size_t e = 0; e < sizeof o / sizeof o[0]; e++) o[e] = 1234.5f;
  memset(f, 0, sizeof f);
  attn_shape *s;
  attn_status st;
  attn_softmax_desc sd;
  attn_gau_desc gd;
  attn_selective_desc ld;
  attn_linear_desc nd;
  attn_delta_desc dd;
  attn_softmax_desc_init(&sd, N, N, HH, HH, D, D);
  attn_gau_desc_init(&gd, N, N, HH, HH, D, D);
  attn_selective_desc_init(&ld, N, N, HH, HH, D, D);
  attn_linear_desc_init(&nd, N, N, HH, HH, D, D, ATTN_FEATURE_ELU1);
  attn_delta_desc_init(&dd, N, HH, HH, D, D, ATTN_DELTA_PLAIN);
  s = w->var == V_SOFTMAX     ? &sd.shape
      : w->var == V_GAU       ? &gd.shape
      : w->var == V_SELECTIVE ? &ld.shape
      : w->var == V_LINEAR    ? &nd.shape
      : w->var == V_DELTA     ? &dd.shape
                              : &sd.shape;
  s->q_type = (attn_dtype)w->q_type, s->o_type = (attn_dtype)w->o_type;
  switch (w->var) {
    case V_SOFTMAX:
      st = attn_softmax(&sd, q, k, v, o, NULL, ws, sizeof ws);
      break;
    case V_GAU:
      st = attn_gau(&gd, q, k, v, o, ws, sizeof ws);
      break;
    case V_SELECTIVE:
      st = attn_selective(&ld, q, k, v, o, NULL, f, ws, sizeof ws);
      break;
    case V_LINEAR:
      st = attn_linear(&nd, q, k, v, o, NULL, ws, sizeof ws);
      break;
    case V_DELTA:
      st = attn_delta(&dd, q, k, v, NULL, f, o, NULL, NULL, ws, sizeof ws);
      break;
    default: {
      const attn_call call = {.kind = ATTN_KIND_SOFTMAX, .desc = &sd, .q = q, .k = k};
      st = attn_matrix(&call, o, (attn_layout){HH * N, N}, ws, sizeof ws);
    }
  }
  ck_assert_msg(st == ATTN_E_BAD_DTYPE, "row %d: %s", _i, attn_status_name(st));
  for (size_t e = 0; e < sizeof o / sizeof o[0]; e++) ck_assert_msg(o[e] == 1234.5f, "row %d: o written", _i);
}
END_TEST

/* An output right after a half q's bytes (inside the span an fp32 q would have) is accepted; one
 * overlapping q's last element is refused; a half o is measured in its own bytes. */
START_TEST(qo_half_aliasing_in_bytes) {
  const attn_dtype ty = _i ? B16 : F16;
  enum { N = 8, D = 4, QB = N * D * sizeof(uint16_t) };
  attn_softmax_desc sd;
  attn_softmax_desc_init(&sd, N, N, 1, 1, D, D);
  size_t wsb;
  ck_assert_int_eq(attn_softmax_workspace_size(&sd, &wsb), ATTN_OK);
  float k[N * D], v[N * D], qf[N * D], o_ok[N * D];
  for (size_t e = 0; e < N * D; e++) k[e] = 0.1f * (float)(e % 7), v[e] = 0.2f * (float)(e % 5);
  char *buf = malloc(QB + N * D * sizeof(float) + wsb + 64);
  ck_assert_ptr_nonnull(buf);
  void *ws = buf + QB + N * D * sizeof(float);
  uint16_t *q = (uint16_t *)(void *)buf;
  for (size_t e = 0; e < N * D; e++) q[e] = tu_half_bits(ty, 0.25f * (float)(e % 9));
  for (size_t e = 0; e < N * D; e++) qf[e] = (float)tu_half_value(ty, q[e]);
  ck_assert_int_eq(attn_softmax(&sd, qf, k, v, o_ok, NULL, ws, wsb), ATTN_OK);
  sd.shape.q_type = ty;
  float *o = (float *)(void *)(buf + QB); /* the first float after q's bytes */
  ck_assert_int_eq(attn_softmax(&sd, q, k, v, o, NULL, ws, wsb), ATTN_OK);
  tu_assert_same_bits("o after a half q", o, o_ok, sizeof o_ok);
  ck_assert_int_eq(attn_softmax(&sd, q, k, v, (float *)(void *)(buf + QB - 4), NULL, ws, wsb), ATTN_E_ALIASING);
  /* a half o: its N D halves, then the workspace right after them; one float earlier overlaps */
  sd.shape.q_type = F32, sd.shape.o_type = ty;
  uint16_t *oh = (uint16_t *)(void *)buf;
  ck_assert_int_eq(attn_softmax(&sd, qf, k, v, oh, NULL, buf + QB, wsb), ATTN_OK);
  for (size_t e = 0; e < N * D; e++) ck_assert_uint_eq(oh[e], tu_half_bits(ty, o_ok[e]));
  ck_assert_int_eq(attn_softmax(&sd, qf, k, v, oh, NULL, buf + QB - 4, wsb), ATTN_E_ALIASING);
  free(buf);
}
END_TEST

tu_entry qo_half_row(size_t i) {
  const tu_entry rows[] = {{"qo_half", qo_half_matches_fp32, (int)QO_NCASES},
                           {"qo_half", qo_half_bad_type, (int)(sizeof bad_rows / sizeof bad_rows[0])},
                           {"qo_half", qo_half_aliasing_in_bytes, 2}};
  return rows[i];
}
