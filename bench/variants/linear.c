/*
 * variants/linear.c: the adapter of attn_linear and attn_linear_gated. Prefill with the identity
 * map (un-normalised) and the elu+1 map (normalised), each bidirectional and causal (chunkwise),
 * the relu, exp and dsoftmax maps causal, FAVOR+ (m = 4d) bidirectional and causal, elu+1 and exp
 * over a causal sliding window, decayed and gated causal prefill (identity, un-normalised:
 * RetNet's fixed decay per head, a scalar gate per token and head as in simple GLA and Mamba2, a
 * per-feature gate as in GLA), FLASH's chunk-exclusive linear part (causal, G = 256), and the recurrent
 * decode step continuing an aligned state (ungated, scalar gate, per-feature gate); Mamba-2's layer
 * (C and B shared by 24 heads, bench.h's BENCH_MAMBA2_*, its dt as beta), prefill and step. The causal prefill and
 * the step are compared with the one-pass recurrent loop.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define RECURRENT (1u << BENCH_BASE_RECURRENT)

static const bench_variant variants[] = {
    {"linear_identity", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 0, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     "softmax_full", 0, "linear, bidirectional, identity map, un-normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_identity_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), identity map, un-normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_elu1", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 0, 0, ATTN_FEATURE_ELU1, 1, 0, "softmax_full",
     0, "linear, bidirectional, elu+1 map, normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_elu1_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_ELU1, 1, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), elu+1 map, normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_relu_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_RELU, 1, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), relu map, normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_exp_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_EXP, 1, 0,
     "softmax_causal", 0, "linear, causal (chunkwise), exp map (stabilised offsets), normalised", ATTN_GATE_NONE, 0, 0,
     0},
    {"linear_favor", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 0, 0, ATTN_FEATURE_FAVOR, 1, 0, "softmax_full",
     0, "linear, bidirectional, FAVOR+ map (m = 4d, W^T built once), normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_favor_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_FAVOR, 1, 0,
     "softmax_causal", 0, "linear, causal (chunkwise), FAVOR+ map (m = 4d, W^T built once), normalised", ATTN_GATE_NONE,
     0, 0, 0},
    {"linear_dsoftmax_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_DSOFTMAX, 1, 0,
     "softmax_causal", 0, "linear, causal (chunkwise), dsoftmax (efficient attention), self-normalised", ATTN_GATE_NONE,
     0, 0, 0},
    {"linear_elu1_window", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 1, ATTN_FEATURE_ELU1, 1, 0, NULL, 0,
     "linear, causal sliding window of --window keys (blocked engine), elu+1 map, normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_exp_window", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 1, ATTN_FEATURE_EXP, 1, 0, NULL, 0,
     "linear, causal sliding window of --window keys (blocked engine), exp map (offsets per row), normalised",
     ATTN_GATE_NONE, 0, 0, 0},
    {"linear_retnet_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), identity, RetNet's fixed decay per head",
     ATTN_GATE_SCALAR, 1, 0, 0},
    {"linear_gla_scalar_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), identity, scalar gate per token and head",
     ATTN_GATE_SCALAR, 0, 0, 0},
    {"linear_gla_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), identity, per-feature gate per token and head (GLA)",
     ATTN_GATE_FEATURE, 0, 0, 0},
    {"linear_mamba2_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, RECURRENT,
     "Mamba-2's layer (causal, chunkwise): C, B one head of N = d shared by 24 heads of x of P = 64, identity, "
     "a scalar gate per token and head, dt as beta",
     ATTN_GATE_SCALAR, 0, 0, 1},
    {"linear_flash_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0, NULL,
     0, "FLASH's linear part: causal, chunk-exclusive (G = 256), identity, un-normalised", ATTN_GATE_NONE, 0, 256, 0},
    {"linear_identity_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_IDENTITY, 0,
     0, NULL, RECURRENT, "recurrent step (causal, n_q = n_kv = 1, continuing a state), identity", ATTN_GATE_NONE, 0, 0,
     0},
    {"linear_elu1_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_ELU1, 1, 0, NULL,
     RECURRENT, "recurrent step (causal, n_q = n_kv = 1, continuing a state), elu+1", ATTN_GATE_NONE, 0, 0, 0},
    {"linear_favor_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_FAVOR, 1, 0,
     NULL, 0, "recurrent step (causal, n_q = n_kv = 1, continuing a state), FAVOR+ (m = 4d, the caller's W^T)",
     ATTN_GATE_NONE, 0, 0, 0},
    {"linear_gla_scalar_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_IDENTITY, 0,
     0, NULL, RECURRENT, "recurrent step (causal, n_q = n_kv = 1, continuing a state), identity, scalar gate",
     ATTN_GATE_SCALAR, 0, 0, 0},
    {"linear_gla_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, RECURRENT, "recurrent step (causal, n_q = n_kv = 1, continuing a state), identity, per-feature gate",
     ATTN_GATE_FEATURE, 0, 0, 0},
    {"linear_mamba2_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, RECURRENT, "Mamba-2's layer (linear_mamba2_causal), one decode step continuing its 24 states",
     ATTN_GATE_SCALAR, 0, 0, 1},
};

/* The descriptor of a shape: its mask, map, normaliser and gate, and chunk 0 (the path's default,
 * which the flop count takes from attn_linear_chunk_size). The gate has one head per key/value
 * head (h_g = h_kv, which is H without grouped queries), so the library keeps one state per
 * key/value head like the recurrent baseline, and reads work.c's [n_kv][h_kv][width] log gates
 * (RetNet: one fixed decay per head, row stride 0). Mamba-2's layer (qk_shared): h_q = h_k = 1,
 * h_v = h_g = the h_kv output heads. */
static void linear_desc(const bench_shape *s, attn_linear_desc *desc) {
  const size_t hk = bench_linear_k_heads(s), ho = bench_linear_out_heads(s);
  attn_linear_desc_init(desc, s->n_q, s->n_kv, s->h_q, hk, s->d, s->dv, s->map);
  desc->shape.h_v = s->h_kv;
  desc->shape.threads = bench_call_threads;
  desc->shape.q = bench_layout(s->qkv_head_major, s->n_q, s->h_q, s->d);
  desc->shape.k = bench_layout(s->qkv_head_major, s->n_kv, hk, s->d);
  desc->shape.v = bench_layout(s->qkv_head_major, s->n_kv, s->h_kv, s->dv);
  desc->shape.o = bench_layout(s->qkv_head_major, s->n_q, ho, s->dv);
  desc->mask = s->window_left != ATTN_UNBOUNDED ? attn_mask_window(s->window_left, s->window_right)
               : s->causal                      ? attn_mask_causal()
                                                : attn_mask_full();
  desc->normalize = s->normalize;
  desc->exclusive_chunk = s->exclusive;
  if (s->qk_shared) { /* Mamba-2's dt as beta, [n_kv][h_kv] */
    desc->beta = 1;
    desc->beta_layout = (attn_layout){s->h_kv, 1};
  }
  if (s->gate == ATTN_GATE_NONE) return;
  desc->gate = s->gate;
  desc->h_g = s->h_kv;
  desc->gate_layout = bench_gate_layout(s);
}

/* The step is one token whatever the context before it: one point. */
static size_t linear_sizes(const bench_variant *v, const bench_sweep *sw, size_t *out) {
  if (v->kind != BENCH_LINEAR_STEP) return bench_sweep_sizes(v, sw, out);
  out[0] = 1;
  return 1;
}

/* The feature size m from the library (public API), d if it cannot say. */
static bench_shape linear_shape(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d) {
  bench_shape s = bench_shape_start(v, sw, kind, n, d);
  if (v->windowed) s.window_left = sw->window - 1, s.window_right = 0; /* a causal window of --window keys */
  attn_linear_desc desc;
  linear_desc(&s, &desc);
  if (attn_linear_feature_size(&desc, &s.m) != ATTN_OK) s.m = d;
  return s;
}

/* The chunkwise count depends on the chunk attn_linear uses on the row's path, so ask that path;
 * the process-wide path is restored afterwards. A gated shape is counted as its ungated form, with
 * that form's chunk (flops.h). */
static bench_cost linear_cost(bench_shape *s, attn_isa isa) {
  attn_linear_desc desc;
  const attn_isa prev = attn_isa_get();
  bench_shape ungated = *s;
  ungated.gate = ATTN_GATE_NONE;
  linear_desc(&ungated, &desc);
  if (isa == ATTN_ISA_NONE) isa = ATTN_ISA_AUTO; /* a baseline row: credited like the native path */
  if (attn_isa_set(isa) != ATTN_OK || attn_linear_chunk_size(&desc, &s->chunk) != ATTN_OK) s->chunk = 0;
  attn_isa_set(prev == ATTN_ISA_NONE ? ATTN_ISA_AUTO : prev);
  return bench_cost_of(s);
}

typedef struct linear_call {
  attn_linear_desc desc;
  attn_linear_state state;
  void *state_mem;
  float *favor_w;             /* FAVOR+: W^T, built once from the seed and passed as the caller's (as a model would) */
  attn_linear_state *carried; /* the step continues its state; a prefill starts from none (NULL) */
} linear_call;

static int linear_setup(bench_work *w, char *err, size_t errlen) {
  linear_call *c = bench_work_impl(w, sizeof *c, err, errlen);
  if (!c) return -1;
  linear_desc(&w->s, &c->desc);
  attn_status st = attn_linear_workspace_size(&c->desc, &w->workspace_bytes);
  if (bench_work_workspace(w, st, "attn_linear_workspace_size", err, errlen)) return -1;
  if (c->desc.feature_map == ATTN_FEATURE_FAVOR) {
    const size_t floats = w->s.m * w->s.d;
    if (!(c->favor_w = bench_alloc64(floats * sizeof(float)))) {
      snprintf(err, errlen, "out of memory for W");
      return -1;
    }
    if ((st = attn_linear_favor_matrix(&c->desc, c->favor_w, floats, w->workspace, w->workspace_bytes)))
      return bench_work_fail(err, errlen, "attn_linear_favor_matrix", st);
    float *wt = w->workspace; /* W^T, the layout the kernels read: no copy per call */
    for (size_t f = 0; f < w->s.m; f++)
      for (size_t t = 0; t < w->s.d; t++) wt[t * w->s.m + f] = c->favor_w[f * w->s.d + t];
    memcpy(c->favor_w, wt, floats * sizeof(float));
    c->desc.favor_source = ATTN_FAVOR_CALLER_T;
    c->desc.favor_w = c->favor_w;
    if ((st = attn_linear_workspace_size(&c->desc, &w->workspace_bytes))) /* no room for the generator now */
      return bench_work_fail(err, errlen, "attn_linear_workspace_size", st);
  }
  if (w->s.kind != BENCH_LINEAR_STEP) return 0;
  size_t bytes = 0;
  /* an aligned state (rows on whole lines), as an engine that decodes keeps it */
  if ((st = attn_linear_state_size_aligned(&c->desc, &bytes)))
    return bench_work_fail(err, errlen, "attn_linear_state_size_aligned", st);
  if (!(c->state_mem = bench_alloc64(bytes))) {
    snprintf(err, errlen, "out of memory for the state");
    return -1;
  }
  if ((st = attn_linear_state_init_aligned(&c->state, &c->desc, c->state_mem, bytes)))
    return bench_work_fail(err, errlen, "attn_linear_state_init_aligned", st);
  c->carried = &c->state;
  return 0;
}

static void linear_run(bench_work *w) {
  linear_call *c = w->impl;
  bench_work_status(w, attn_linear_gated(&c->desc, w->q, w->k, w->v, w->gate, w->beta, w->o, c->carried, w->workspace,
                                         w->workspace_bytes));
}

static void linear_teardown(bench_work *w) {
  linear_call *c = w->impl;
  if (c) free(c->state_mem), free(c->favor_w);
}

const bench_adapter bench_linear_adapter = {
    "linear",
    variants,
    sizeof variants / sizeof variants[0],
    linear_sizes,
    linear_shape,
    linear_cost,
    {linear_setup, linear_run, linear_teardown, NULL},
    NULL,
};
