/*
 * variants/linear.c: the adapter of attn_linear. Prefill with the identity map (un-normalised)
 * and the elu+1 map (normalised), each bidirectional and causal (chunkwise), the relu map
 * (normalised) causal, and the recurrent
 * decode step continuing a state. The causal prefill and the step are compared with the
 * one-pass recurrent loop.
 */
#include <stdlib.h>

#include "bench.h"

#define RECURRENT (1u << BENCH_BASE_RECURRENT)

static const bench_variant variants[] = {
    {"linear_identity", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 0, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     "softmax_full", 0, "linear, bidirectional, identity map, un-normalised"},
    {"linear_identity_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), identity map, un-normalised"},
    {"linear_elu1", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 0, 0, ATTN_FEATURE_ELU1, 1, 0, "softmax_full",
     0, "linear, bidirectional, elu+1 map, normalised"},
    {"linear_elu1_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_ELU1, 1, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), elu+1 map, normalised"},
    {"linear_relu_causal", &bench_linear_adapter, BENCH_PREFILL, BENCH_LINEAR, 1, 0, ATTN_FEATURE_RELU, 1, 0,
     "softmax_causal", RECURRENT, "linear, causal (chunkwise), relu map, normalised"},
    {"linear_identity_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_IDENTITY, 0,
     0, NULL, RECURRENT, "recurrent step (causal, n_q = n_kv = 1, continuing a state), identity"},
    {"linear_elu1_decode", &bench_linear_adapter, BENCH_DECODE, BENCH_LINEAR_STEP, 1, 0, ATTN_FEATURE_ELU1, 1, 0, NULL,
     RECURRENT, "recurrent step (causal, n_q = n_kv = 1, continuing a state), elu+1"},
};

/* The descriptor of a shape: its mask, map and normaliser, and chunk 0 (the path's default, which
 * the flop count takes from attn_linear_chunk_size). */
static void linear_desc(const bench_shape *s, attn_linear_desc *desc) {
  attn_linear_desc_init(desc, s->n_q, s->n_kv, s->h_q, s->h_kv, s->d, s->dv, s->map);
  desc->mask = s->causal ? attn_mask_causal() : attn_mask_full();
  desc->normalize = s->normalize;
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
  attn_linear_desc desc;
  linear_desc(&s, &desc);
  if (attn_linear_feature_size(&desc, &s.m) != ATTN_OK) s.m = d;
  return s;
}

/* The chunkwise count depends on the chunk attn_linear uses on the row's path, so ask that path;
 * the process-wide path is restored afterwards. */
static bench_cost linear_cost(bench_shape *s, attn_isa isa) {
  attn_linear_desc desc;
  const attn_isa prev = attn_isa_get();
  linear_desc(s, &desc);
  if (isa == ATTN_ISA_NONE) isa = ATTN_ISA_AUTO; /* a baseline row: credited like the native path */
  if (attn_isa_set(isa) != ATTN_OK || attn_linear_chunk_size(&desc, &s->chunk) != ATTN_OK) s->chunk = 0;
  attn_isa_set(prev == ATTN_ISA_NONE ? ATTN_ISA_AUTO : prev);
  return bench_cost_of(s);
}

typedef struct linear_call {
  attn_linear_desc desc;
  attn_linear_state state;
  void *state_mem;
  attn_linear_state *carried; /* the step continues its state; a prefill starts from none (NULL) */
} linear_call;

static int linear_setup(bench_work *w, char *err, size_t errlen) {
  linear_call *c = bench_work_impl(w, sizeof *c, err, errlen);
  if (!c) return -1;
  linear_desc(&w->s, &c->desc);
  attn_status st = attn_linear_workspace_size(&c->desc, &w->workspace_bytes);
  if (bench_work_workspace(w, st, "attn_linear_workspace_size", err, errlen)) return -1;
  if (w->s.kind != BENCH_LINEAR_STEP) return 0;
  size_t bytes = 0;
  if ((st = attn_linear_state_size(&c->desc, &bytes)))
    return bench_work_fail(err, errlen, "attn_linear_state_size", st);
  if (!(c->state_mem = bench_alloc64(bytes))) {
    snprintf(err, errlen, "out of memory for the state");
    return -1;
  }
  if ((st = attn_linear_state_init(&c->state, &c->desc, c->state_mem, bytes)))
    return bench_work_fail(err, errlen, "attn_linear_state_init", st);
  c->carried = &c->state;
  return 0;
}

static void linear_run(bench_work *w) {
  linear_call *c = w->impl;
  bench_work_status(w, attn_linear(&c->desc, w->q, w->k, w->v, w->o, c->carried, w->workspace, w->workspace_bytes));
}

static void linear_teardown(bench_work *w) {
  linear_call *c = w->impl;
  if (c) free(c->state_mem);
}

const bench_adapter bench_linear_adapter = {
    "linear",     variants,    sizeof variants / sizeof variants[0],        linear_sizes,
    linear_shape, linear_cost, {linear_setup, linear_run, linear_teardown},
};
