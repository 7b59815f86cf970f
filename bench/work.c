/* work.c: buffers of one measured call and the one kernel that runs it (attn or a baseline). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void *alloc64(size_t bytes) {
  size_t rounded = (bytes + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (p) memset(p, 0, rounded ? rounded : 64); /* first touch outside the timed region */
  return p;
}

/* Uniform floats in [-1, 1) from a xorshift32 stream: deterministic per seed. */
static void fill_uniform(float *p, size_t count, uint32_t *state) {
  uint32_t x = *state ? *state : 0x9e3779b9u;
  for (size_t i = 0; i < count; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (float)(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  *state = x;
}

static int fail(char *err, size_t errlen, const char *what, attn_status st) {
  snprintf(err, errlen, "%s: %s", what, attn_status_string(st));
  return -1;
}

int bench_work_init(bench_work *w, const bench_shape *s, unsigned seed, char *err, size_t errlen) {
  memset(w, 0, sizeof *w);
  w->s = *s;
  const size_t nq = s->n_q * s->h_q, nkv = s->n_kv * s->h_kv;
  w->q = alloc64(nq * s->d * sizeof(float));
  w->k = alloc64(nkv * s->d * sizeof(float));
  w->v = alloc64(nkv * s->dv * sizeof(float));
  w->o = alloc64(nq * s->dv * sizeof(float));
  if (!w->q || !w->k || !w->v || !w->o) {
    snprintf(err, errlen, "out of memory for the inputs");
    return -1;
  }
  uint32_t rng = 0x12345u + 7919u * seed;
  fill_uniform(w->q, nq * s->d, &rng);
  fill_uniform(w->k, nkv * s->d, &rng);
  fill_uniform(w->v, nkv * s->dv, &rng);

  attn_status st = ATTN_OK;
  switch (s->kind) {
  case BENCH_SOFTMAX:
    attn_softmax_desc_init(&w->sdesc, s->n_q, s->n_kv, s->h_q, s->h_kv, s->d, s->dv);
    w->sdesc.window_left = s->window_left;
    w->sdesc.window_right = s->window_right;
    if ((st = attn_softmax_workspace_size(&w->sdesc, &w->workspace_bytes)))
      return fail(err, errlen, "attn_softmax_workspace_size", st);
    break;
  case BENCH_LINEAR:
  case BENCH_LINEAR_STEP:
    attn_linear_desc_init(&w->ldesc, s->n_q, s->n_kv, s->h_q, s->h_kv, s->d, s->dv, s->map);
    w->ldesc.causal = s->causal;
    w->ldesc.normalize = s->normalize;
    w->ldesc.chunk = 0; /* the path's default, which the flop table takes from attn_linear_chunk_size */
    if ((st = attn_linear_workspace_size(&w->ldesc, &w->workspace_bytes)))
      return fail(err, errlen, "attn_linear_workspace_size", st);
    if (s->kind == BENCH_LINEAR_STEP) {
      size_t bytes = 0;
      if ((st = attn_linear_state_size(&w->ldesc, &bytes)))
        return fail(err, errlen, "attn_linear_state_size", st);
      if (!(w->state_mem = alloc64(bytes))) break;
      if ((st = attn_linear_state_init(&w->state, &w->ldesc, w->state_mem, bytes)))
        return fail(err, errlen, "attn_linear_state_init", st);
    }
    break;
  case BENCH_BLAS:
  case BENCH_ONEDNN:
  case BENCH_RECURRENT:
    if (!(w->scratch = alloc64(bench_baseline_scratch(s) * sizeof(float)))) {
      snprintf(err, errlen, "out of memory for the baseline's scratch");
      return -1;
    }
    if (s->kind == BENCH_ONEDNN && bench_onednn_init(w, err, errlen)) return -1;
    break;
  }
  if (w->workspace_bytes && !(w->workspace = alloc64(w->workspace_bytes))) {
    snprintf(err, errlen, "out of memory for the workspace");
    return -1;
  }
  if (s->kind == BENCH_LINEAR_STEP && !w->state_mem) {
    snprintf(err, errlen, "out of memory for the state");
    return -1;
  }
  return 0;
}

void bench_work_free(bench_work *w) {
  bench_onednn_free(w);
  free(w->q);
  free(w->k);
  free(w->v);
  free(w->o);
  free(w->workspace);
  free(w->state_mem);
  free(w->scratch);
  memset(w, 0, sizeof *w);
}

void bench_work_run(void *ctx, size_t iters) {
  bench_work *w = ctx;
  attn_status st = ATTN_OK;
  for (size_t i = 0; i < iters; i++) {
    switch (w->s.kind) {
    case BENCH_SOFTMAX:
      st = attn_softmax(&w->sdesc, w->q, w->k, w->v, w->o, NULL, w->workspace, w->workspace_bytes);
      break;
    case BENCH_LINEAR:
      st = attn_linear(&w->ldesc, w->q, w->k, w->v, w->o, NULL, w->workspace, w->workspace_bytes);
      break;
    case BENCH_LINEAR_STEP:
      st = attn_linear(&w->ldesc, w->q, w->k, w->v, w->o, &w->state, w->workspace,
                       w->workspace_bytes);
      break;
    case BENCH_BLAS:
      bench_baseline_blas(w);
      break;
    case BENCH_ONEDNN:
      bench_onednn_run(w);
      break;
    case BENCH_RECURRENT:
      bench_baseline_recurrent(w);
      break;
    }
    if (st != ATTN_OK && w->status == ATTN_OK) w->status = st;
  }
}
