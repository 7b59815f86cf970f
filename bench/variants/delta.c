/*
 * variants/delta.c: the adapter of attn_delta, the delta rule (spec 8): Gated DeltaNet (a scalar
 * gate per token and value head, Qwen3-Next), Kimi Delta Attention (a gate per key channel) and
 * DeltaNet (no decay) prefill, GDN prefill with a checkpoint at every chunk boundary (the cost of
 * attn_checkpoints, against delta_gdn: bench_print_twins), and the decode step of GDN and KDA.
 * Its rows model a model's layer, so they have their own sizes, d and heads (--delta-sizes,
 * --delta-d, --delta-heads; by default Qwen3-Next's 16 key and 32 value heads at d = dv = 128
 * and 64). Inputs as the models make them (work.c): q, k uniform, L2-normalised in the call
 * (qk_l2norm), beta = sigmoid(N(0, 1)), log gates -0.1 softplus(N(0, 1)). A prefill continues its
 * state from call to call (a chunked prefill); a decode step takes the next of its state's copies,
 * as many as make twice the last-level cache (bench_cache_copies: every step reads its state from
 * memory, as an engine's step reads each layer's). Every row is compared with the token loop
 * (baselines.c), which does the same.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define LOOP (1u << BENCH_BASE_DELTA)

/* A row of the table: every delta variant is causal and runs on this adapter. */
#define DELTA_VARIANT(name_, mode_, kind_, baselines_, help_)                                  \
  {                                                                                            \
    .name = name_, .adapter = &bench_delta_adapter, .mode = mode_, .kind = kind_, .causal = 1, \
    .baselines = baselines_, .help = help_                                                     \
  }

static const bench_variant variants[] = {
    DELTA_VARIANT("delta_gdn", BENCH_PREFILL, BENCH_DELTA, LOOP,
                  "Gated DeltaNet prefill (scalar gate per token and value head; Qwen3-Next)"),
    DELTA_VARIANT("delta_kda", BENCH_PREFILL, BENCH_DELTA, LOOP,
                  "Kimi Delta Attention prefill (a gate per key channel)"),
    DELTA_VARIANT("delta_net", BENCH_PREFILL, BENCH_DELTA, LOOP, "DeltaNet prefill (no decay)"),
    DELTA_VARIANT("delta_gdn_ckpt", BENCH_PREFILL, BENCH_DELTA, 0,
                  "delta_gdn with a checkpoint at every chunk boundary (attn_checkpoints)"),
    DELTA_VARIANT("delta_gdn_decode", BENCH_DECODE, BENCH_DELTA_STEP, LOOP,
                  "Gated DeltaNet decode step (n = 1, continuing a state)"),
    DELTA_VARIANT("delta_kda_decode", BENCH_DECODE, BENCH_DELTA_STEP, LOOP,
                  "Kimi Delta Attention decode step (n = 1, continuing a state)"),
};

/* Each variant's gate and checkpoints, in the order of variants[]. */
static const struct {
  attn_delta_gate gate;
  int checkpoints;
} props[] = {{ATTN_DELTA_SCALAR, 0}, {ATTN_DELTA_FEATURE, 0}, {ATTN_DELTA_PLAIN, 0},
             {ATTN_DELTA_SCALAR, 1}, {ATTN_DELTA_SCALAR, 0},  {ATTN_DELTA_FEATURE, 0}};

static size_t delta_sizes(const bench_variant *v, const bench_sweep *sw, size_t *out) {
  if (v->mode == BENCH_DECODE) {
    out[0] = 1;
    return 1;
  }
  for (size_t i = 0; i < sw->ndelta_sizes; i++) out[i] = sw->delta_sizes[i];
  return sw->ndelta_sizes;
}

static size_t delta_dims(const bench_variant *v, const bench_sweep *sw, const size_t *d, size_t nd, size_t *out) {
  (void)v, (void)d, (void)nd;
  for (size_t i = 0; i < sw->ndelta_d; i++) out[i] = sw->delta_d[i];
  return sw->ndelta_d;
}

static bench_shape delta_shape(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d) {
  bench_shape s = bench_shape_start(v, sw, kind, n, d);
  const size_t i = (size_t)(v - variants);
  s.h_q = sw->delta_hk;
  s.h_kv = sw->delta_hv;
  s.m = d;
  s.gate = ATTN_GATE_NONE; /* work.c makes the delta rule's own gates and beta */
  s.delta_gate = props[i].gate;
  s.checkpoints = kind == BENCH_DELTA_LOOP ? 0 : props[i].checkpoints;
  return s;
}

static void delta_desc(const bench_shape *s, attn_delta_desc *desc) {
  attn_delta_desc_init(desc, s->n_q, s->h_q, s->h_kv, s->d, s->dv, s->delta_gate);
  desc->shape.threads = bench_call_threads;
  desc->shape.q = desc->shape.k = bench_layout(s->qkv_head_major, s->n_q, s->h_q, s->d);
  desc->shape.v = desc->shape.o = bench_layout(s->qkv_head_major, s->n_q, s->h_kv, s->dv);
}

/* The count's chunk is the one attn_delta uses on the row's path (a baseline: the default path's). */
static bench_cost delta_cost(bench_shape *s, attn_isa isa) {
  attn_delta_desc desc;
  const attn_isa prev = attn_isa_get();
  delta_desc(s, &desc);
  if (isa == ATTN_ISA_NONE) isa = ATTN_ISA_AUTO;
  if (attn_isa_set(isa) != ATTN_OK || attn_delta_chunk_size(&desc, &s->chunk) != ATTN_OK) s->chunk = 64;
  attn_isa_set(prev == ATTN_ISA_NONE ? ATTN_ISA_AUTO : prev);
  return bench_cost_of(s);
}

typedef struct delta_call {
  attn_delta_desc desc;
  float *state; /* a prefill's state, carried from call to call; a decode step's first copy */
  size_t state_bytes;
  attn_checkpoints ck;
  size_t *after;
} delta_call;

static int delta_setup(bench_work *w, char *err, size_t errlen) {
  delta_call *c = bench_work_impl(w, sizeof *c, err, errlen);
  if (!c) return -1;
  delta_desc(&w->s, &c->desc);
  attn_status st = attn_delta_workspace_size(&c->desc, &w->workspace_bytes);
  if (bench_work_workspace(w, st, "attn_delta_workspace_size", err, errlen)) return -1;
  if ((st = attn_delta_state_size(&c->desc, &c->state_bytes)))
    return bench_work_fail(err, errlen, "attn_delta_state_size", st);
  if (!(c->state = bench_alloc64(c->state_bytes))) {
    snprintf(err, errlen, "out of memory for the state");
    return -1;
  }
  if (w->s.checkpoints) { /* after every chunk: tokens C - 1, 2C - 1, ... */
    size_t chunk = 0;
    if ((st = attn_delta_chunk_size(&c->desc, &chunk)))
      return bench_work_fail(err, errlen, "attn_delta_chunk_size", st);
    c->ck.count = bench_delta_checkpoints(w->s.n_q, chunk);
    if (!c->ck.count) return 0;
    c->after = malloc(c->ck.count * sizeof *c->after);
    c->ck.states = bench_alloc64(c->ck.count * c->state_bytes);
    if (!c->after || !c->ck.states) {
      snprintf(err, errlen, "out of memory for %zu checkpoints", c->ck.count);
      return -1;
    }
    for (size_t i = 0; i < c->ck.count; i++) c->after[i] = (i + 1) * chunk - 1;
    c->ck.after = c->after;
  }
  if (w->s.kind != BENCH_DELTA_STEP) return 0;
  bench_delta_state_fill(c->state, c->state_bytes / sizeof(float));
  return bench_work_copy_cache(w, c->state, c->state_bytes, c->state, 0, err, errlen);
}

static void delta_run(bench_work *w) {
  delta_call *c = w->impl;
  float *state = c->state;
  if (w->copies) { /* a decode step: the next copy of its state */
    const void *k = NULL, *v = NULL;
    bench_work_cache(w, &k, &v);
    state = (float *)(uintptr_t)k;
  }
  bench_work_status(w, attn_delta(&c->desc, w->q, w->k, w->v, w->gate, w->beta, w->o, state,
                                  c->ck.count ? &c->ck : NULL, w->workspace, w->workspace_bytes));
}

static void delta_teardown(bench_work *w) {
  delta_call *c = w->impl;
  if (c) free(c->state), free(c->after), free(c->ck.states);
}

static void delta_describe(const bench_work *w, char *note, size_t len) {
  const delta_call *c = w->impl;
  if (c->ck.count)
    snprintf(note, len, "%zu checkpoints, %.3g MiB", c->ck.count,
             (double)c->ck.count * (double)c->state_bytes / 1048576.0);
  else if (w->s.kind == BENCH_DELTA_STEP)
    snprintf(note, len, "state %.3g MiB, %zu cop%s", (double)c->state_bytes / 1048576.0, w->ncopies,
             w->ncopies == 1 ? "y" : "ies");
}

const bench_adapter bench_delta_adapter = {
    "delta",
    variants,
    sizeof variants / sizeof variants[0],
    delta_sizes,
    delta_shape,
    delta_cost,
    {delta_setup, delta_run, delta_teardown, delta_describe},
    delta_dims,
};
