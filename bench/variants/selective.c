/*
 * variants/selective.c: the adapter of attn_selective and the selective KV cache. Prefill
 * (causal, head 0 selecting) beside softmax_causal, and decode steps with context pruning over
 * contexts of --cache-min .. --cache-max tokens: a budget of K live tokens (K = 256, 1024) and a
 * threshold tau = 8, beside softmax_decode (one query over the whole cache). The decode setup
 * runs the whole context through attn_selcache_step (untimed), so the timed steps are those of a
 * cache that has seen n tokens; each timed step appends one more token (its q, k and v cycle
 * through n rows). Selection happens on these inputs: the
 * bench's uniform data in [-1, 1) give head 0 logits of standard deviation ~0.33 (d = 64), so
 * every query adds ~0.13 to F of each earlier token and the oldest tokens reach the largest F.
 * selective_causal_stats is selective_causal through attn_selective_stats (per-row statistics).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench.h"

static const bench_variant variants[] = {
    {"selective_causal", &bench_selective_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 1,
     NULL, 0, "selective attention prefill (causal, query head 0 selecting; F as running column sums)", ATTN_GATE_NONE,
     0, 0, 0},
    {"selective_causal_stats", &bench_selective_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0,
     1, NULL, 0, "selective_causal with per-row statistics (attn_selective_stats)", ATTN_GATE_NONE, 0, 0, 0},
    {"selective_decode_k256", &bench_selective_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "selective decode step, pruning cache with a budget of 256 live tokens (flops over them)", ATTN_GATE_NONE,
     0, 0, 0},
    {"selective_decode_k1024", &bench_selective_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "selective decode step, pruning cache with a budget of 1024 live tokens (flops over them)",
     ATTN_GATE_NONE, 0, 0, 0},
    {"selective_decode_tau", &bench_selective_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "selective decode step, pruning by F >= 8 (flops counted over the whole context; live in the note)",
     ATTN_GATE_NONE, 0, 0, 0},
};

/* A variant's budget (0: none) and threshold. */
static size_t sel_budget(const bench_variant *v) { return v == &variants[2] ? 256 : v == &variants[3] ? 1024 : 0; }

/* Causal; a budget's decode counts its live keys (a window of K keys, flops.h), tau's the context. */
static bench_shape sel_shape(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d) {
  bench_shape s = bench_shape_start(v, sw, kind, n, d);
  s.window_right = 0;
  s.stats = v == &variants[1];
  if (v->mode == BENCH_DECODE) {
    s.n_q = 1;
    if (sel_budget(v)) s.window_left = sel_budget(v) - 1;
  }
  return s;
}

typedef struct sel_impl {
  attn_selective_desc desc; /* prefill: the call; decode: one step (n_q = n_kv = 1) */
  attn_selcache cache;
  void *memory;
  size_t mem_bytes, next; /* decode: the cache's memory, the next q/k/v row */
  float *qs;              /* decode: a query per context row (n_kv x h_q x d), uniform in [-1, 1) */
  float *f;               /* prefill: F's column sums (n_kv floats) */
  float *arrays;          /* prefill with statistics: their three arrays of n_q x h_q floats */
  attn_row_stats stats;
} sel_impl;

static void sel_step(bench_work *w, sel_impl *im) {
  const bench_shape *s = &w->s;
  const size_t row = im->next++ % s->n_kv;
  bench_work_status(w,
                    attn_selcache_step(&im->desc, &im->cache, im->qs + row * s->h_q * s->d, w->k + row * s->h_kv * s->d,
                                       w->v + row * s->h_kv * s->dv, w->o, NULL, w->workspace, w->workspace_bytes));
}

static int sel_setup(bench_work *w, char *err, size_t errlen) {
  sel_impl *im = bench_work_impl(w, sizeof *im, err, errlen);
  if (!im) return -1;
  const bench_shape *s = &w->s;
  attn_selective_desc_init(&im->desc, s->n_q, s->n_kv, s->h_q, s->h_kv, s->d, s->dv);
  im->desc.shape.threads = bench_call_threads;
  if (s->n_q > 1) { /* prefill */
    const size_t rows = s->n_q * s->h_q;
    if (!(im->f = bench_alloc64(s->n_kv * sizeof(float))) ||
        (s->stats && !(im->arrays = bench_alloc64(3 * rows * sizeof(float))))) {
      snprintf(err, errlen, "out of memory for F");
      return -1;
    }
    if (im->arrays) attn_row_stats_init(&im->stats, s->h_q, im->arrays, im->arrays + rows, im->arrays + 2 * rows);
    return bench_work_workspace(w, attn_selective_workspace_size(&im->desc, &w->workspace_bytes),
                                "attn_selective_workspace_size", err, errlen);
  }
  /* decode: the shape's window is the budget (sel_shape), none for the threshold's variant */
  const size_t budget = s->window_left != ATTN_UNBOUNDED ? s->window_left + 1 : 0;
  const size_t capacity = budget ? budget + 1 : s->n_kv + 1;
  if (!(im->qs = bench_alloc64(s->n_kv * s->h_q * s->d * sizeof(float)))) {
    snprintf(err, errlen, "out of memory for the queries");
    return -1;
  }
  uint32_t x = 0x2545f491u; /* xorshift32: uniform in [-1, 1), as the work's buffers */
  for (size_t e = 0; e < s->n_kv * s->h_q * s->d; e++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    im->qs[e] = (float)(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  attn_shape_init(&im->desc.shape, 1, 1, s->h_q, s->h_kv, s->h_kv, s->d, s->dv);
  attn_status st = attn_selcache_size(capacity, s->h_kv, s->d, s->dv, &im->mem_bytes);
  if (st) return bench_work_fail(err, errlen, "attn_selcache_size", st);
  if (!(im->memory = bench_alloc64(im->mem_bytes))) {
    snprintf(err, errlen, "out of memory for the cache");
    return -1;
  }
  st = attn_selcache_init(&im->cache, capacity, s->h_kv, s->d, s->dv, budget ? INFINITY : 8.0f, budget, im->memory,
                          im->mem_bytes);
  if (st) return bench_work_fail(err, errlen, "attn_selcache_init", st);
  if (bench_work_workspace(w, attn_selcache_workspace_size(&im->desc, &im->cache, &w->workspace_bytes),
                           "attn_selcache_workspace_size", err, errlen))
    return -1;
  for (size_t t = 0; t < s->n_kv; t++) sel_step(w, im); /* the context, untimed */
  return w->status ? bench_work_fail(err, errlen, "attn_selcache_step", w->status) : 0;
}

static void sel_run(bench_work *w) {
  sel_impl *im = w->impl;
  if (im->f) {
    bench_work_status(w, im->arrays ? attn_selective_stats(&im->desc, w->q, w->k, w->v, w->o, NULL, im->f, &im->stats,
                                                           w->workspace, w->workspace_bytes)
                                    : attn_selective(&im->desc, w->q, w->k, w->v, w->o, NULL, im->f, w->workspace,
                                                     w->workspace_bytes));
    return;
  }
  sel_step(w, im);
}

static void sel_teardown(bench_work *w) {
  sel_impl *im = w->impl;
  if (!im) return;
  free(im->f);
  free(im->arrays);
  free(im->qs);
  free(im->memory);
}

/* Decode: the live tokens and the bytes the cache keeps, against the whole context's. */
static void sel_describe(const bench_work *w, char *note, size_t len) {
  const sel_impl *im = w->impl;
  if (!im || im->f) return;
  size_t live = 0;
  attn_selcache_live_bytes(&im->cache, &live);
  const double all = (double)im->cache.tokens * (double)live / (double)(im->cache.live ? im->cache.live : 1);
  snprintf(note, len, "live %zu of %zu tokens, %.0f KiB kept (%.1f%%)", im->cache.live, im->cache.tokens,
           (double)live / 1024.0, all > 0 ? 100.0 * (double)live / all : 0.0);
}

const bench_adapter bench_selective_adapter = {
    "selective",
    variants,
    sizeof variants / sizeof variants[0],
    bench_sweep_sizes,
    sel_shape,
    bench_cost_plain,
    {sel_setup, sel_run, sel_teardown, sel_describe},
    NULL,
};
