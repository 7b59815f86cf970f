/*
 * variants/gau.c: the adapter of attn_gau (GAU relu^2 attention). Prefill with the full mask
 * (un-normalised, scalar bias 0), causal in Su's form (scale 1/sqrt(d), normalised by the visible
 * count) and over a causal sliding window of --window keys with a causal bias table (FLASH's
 * relative-position form), beside the softmax variants of the same masks: the same engine and
 * GEMM micro-kernel, so the difference is the score step; and a decode step (Su's form) beside
 * softmax_decode. gau_causal_stats is gau_causal through attn_gau_stats (per-row statistics).
 */
#include "bench.h"

static const bench_variant variants[] = {
    {"gau_full", &bench_gau_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 0, 0, ATTN_FEATURE_IDENTITY, 0, 1, NULL, 0,
     "GAU relu^2 attention, every key visible, scalar bias 0, un-normalised", ATTN_GATE_NONE, 0, 0, 0},
    {"gau_causal", &bench_gau_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 1, 1, NULL, 0,
     "GAU relu^2 attention, causal, Su's form (scale 1/sqrt(d), divided by the visible count)", ATTN_GATE_NONE, 0, 0,
     0},
    {"gau_causal_stats", &bench_gau_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 1, 1, NULL, 0,
     "gau_causal with per-row statistics (attn_gau_stats)", ATTN_GATE_NONE, 0, 0, 0},
    {"gau_window", &bench_gau_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 1, ATTN_FEATURE_IDENTITY, 0, 0, NULL, 0,
     "GAU relu^2 attention, causal sliding window of --window keys, a causal bias table of W floats", ATTN_GATE_NONE, 0,
     0, 0},
    {"gau_decode", &bench_gau_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 1, 0, NULL, 0,
     "GAU relu^2 decode step in Su's form: one query over the whole cache (beside softmax_decode)", ATTN_GATE_NONE, 0,
     0, 0},
};

/* As softmax's: the mask's bounds in the shape, where flops.h counts the visible pairs. */
static bench_shape gau_shape(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d) {
  bench_shape s = bench_shape_start(v, sw, kind, n, d);
  if (v->windowed) s.window_left = sw->window - 1;
  if (v->causal) s.window_right = 0;
  if (v->mode == BENCH_DECODE) s.n_q = 1;
  s.stats = v == &variants[2];
  return s;
}

/* The descriptor and, after it in the work's implementation block, the window's bias table (one
 * float per offset 0 .. W-1) or the statistics' arrays (three of n_q x h_q floats). */
typedef struct gau_impl {
  attn_gau_desc desc;
  attn_row_stats stats;
  float table[];
} gau_impl;

static int gau_setup(bench_work *w, char *err, size_t errlen) {
  const bench_shape *s = &w->s;
  const size_t L = s->window_left != ATTN_UNBOUNDED ? s->window_left + 1 : 0;
  const size_t rows = s->n_q * s->h_q, extra = s->stats ? 3 * rows : L;
  gau_impl *g = bench_work_impl(w, sizeof *g + extra * sizeof(float), err, errlen);
  if (!g) return -1;
  attn_row_stats_init(&g->stats, s->h_q, g->table, g->table + rows, g->table + 2 * rows);
  attn_gau_desc *desc = &g->desc;
  attn_gau_desc_init(desc, s->n_q, s->n_kv, s->h_q, s->h_kv, s->d, s->dv);
  desc->shape.threads = bench_call_threads;
  desc->mask = attn_mask_window(s->window_left, s->window_right);
  desc->normalize = s->normalize;
  if (L) { /* a decreasing bias: nearer keys count more */
    for (size_t r = 0; r < L; r++) g->table[r] = -0.5f * (float)r / (float)L;
    desc->bias = ATTN_GAU_BIAS_CAUSAL;
    desc->bias_table = g->table;
    desc->bias_len = L;
  }
  const size_t nk = s->n_kv * s->h_kv;
  if (s->n_q == 1 &&
      bench_work_copy_cache(w, w->k, nk * s->d * sizeof(float), w->v, nk * s->dv * sizeof(float), err, errlen))
    return -1;
  return bench_work_workspace(w, attn_gau_workspace_size(desc, &w->workspace_bytes), "attn_gau_workspace_size", err,
                              errlen);
}

static void gau_run(bench_work *w) {
  const gau_impl *g = w->impl;
  const void *k = w->k, *v = w->v;
  bench_work_cache(w, &k, &v);
  bench_work_status(w, w->s.stats
                           ? attn_gau_stats(&g->desc, w->q, k, v, w->o, &g->stats, w->workspace, w->workspace_bytes)
                           : attn_gau(&g->desc, w->q, k, v, w->o, w->workspace, w->workspace_bytes));
}

const bench_adapter bench_gau_adapter = {
    "gau",     variants,         sizeof variants / sizeof variants[0], bench_sweep_sizes,
    gau_shape, bench_cost_plain, {gau_setup, gau_run, NULL, NULL},     NULL,
};
