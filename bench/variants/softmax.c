/*
 * variants/softmax.c: the adapter of attn_softmax. Prefill with the full, causal and sliding
 * window masks, and decode (one query over a growing K/V cache). The prefill variants are
 * compared with naive attention through OpenBLAS and through oneDNN. softmax_causal_stats is
 * softmax_causal through attn_softmax_stats (entropy, sparsity and count of every row): the cost
 * of the statistics beside its plain row.
 */
#include "bench.h"

#define NAIVE_BASELINES ((1u << BENCH_BASE_OPENBLAS) | (1u << BENCH_BASE_ONEDNN))

static const bench_variant variants[] = {
    {"softmax_full", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 0, 0, ATTN_FEATURE_IDENTITY, 0, 1, NULL,
     NAIVE_BASELINES, "softmax attention, every key visible (attn_mask_full)", ATTN_GATE_NONE, 0},
    {"softmax_causal", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 1, NULL,
     NAIVE_BASELINES, "softmax attention, causal (attn_mask_causal: left unbounded, right 0)", ATTN_GATE_NONE, 0},
    {"softmax_window", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 1, ATTN_FEATURE_IDENTITY, 0, 0, NULL,
     NAIVE_BASELINES, "causal sliding window of --window keys (attn_mask_window(W - 1, 0))", ATTN_GATE_NONE, 0},
    {"softmax_causal_stats", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 1,
     NULL, 0, "softmax_causal with per-row statistics (attn_softmax_stats)", ATTN_GATE_NONE, 0},
    {"softmax_decode", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0, NULL, 0,
     "one query over a K/V cache of --cache-min .. --cache-max tokens", ATTN_GATE_NONE, 0},
};

/* The mask's bounds live in the shape (bottom-right aligned), where flops.h counts the visible
 * pairs and the naive baselines mask their scores. */
static bench_shape softmax_shape(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d) {
  bench_shape s = bench_shape_start(v, sw, kind, n, d);
  if (v->windowed) s.window_left = sw->window - 1;
  if (v->causal) s.window_right = 0;
  if (v->mode == BENCH_DECODE) s.n_q = 1;
  s.stats = v == &variants[3];
  return s;
}

/* The descriptor, and with statistics their arrays (three of n_q x h_q floats after it). */
typedef struct softmax_impl {
  attn_softmax_desc desc;
  attn_row_stats stats;
  float arrays[];
} softmax_impl;

static int softmax_setup(bench_work *w, char *err, size_t errlen) {
  const bench_shape *s = &w->s;
  const size_t rows = s->n_q * s->h_q;
  softmax_impl *im = bench_work_impl(w, sizeof *im + (s->stats ? 3 * rows * sizeof(float) : 0), err, errlen);
  if (!im) return -1;
  attn_softmax_desc *desc = &im->desc;
  attn_softmax_desc_init(desc, s->n_q, s->n_kv, s->h_q, s->h_kv, s->d, s->dv);
  desc->shape.threads = bench_call_threads;
  desc->mask = attn_mask_window(s->window_left, s->window_right);
  attn_row_stats_init(&im->stats, s->h_q, im->arrays, im->arrays + rows, im->arrays + 2 * rows);
  return bench_work_workspace(w, attn_softmax_workspace_size(desc, &w->workspace_bytes), "attn_softmax_workspace_size",
                              err, errlen);
}

static void softmax_run(bench_work *w) {
  const softmax_impl *im = w->impl;
  bench_work_status(
      w, w->s.stats
             ? attn_softmax_stats(&im->desc, w->q, w->k, w->v, w->o, NULL, &im->stats, w->workspace, w->workspace_bytes)
             : attn_softmax(&im->desc, w->q, w->k, w->v, w->o, NULL, w->workspace, w->workspace_bytes));
}

const bench_adapter bench_softmax_adapter = {
    "softmax",     variants,         sizeof variants / sizeof variants[0],     bench_sweep_sizes,
    softmax_shape, bench_cost_plain, {softmax_setup, softmax_run, NULL, NULL},
};
