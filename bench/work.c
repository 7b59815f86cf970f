/* work.c: buffers of one measured call and the one kernel that repeats its call (an adapter's attn
 * call or a baseline's), and the helpers the calls' setups share. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__linux__) && defined(MADV_HUGEPAGE)
#define BENCH_HAVE_MADV_HUGEPAGE 1
#else
#define BENCH_HAVE_MADV_HUGEPAGE 0
#endif

#include "bench.h"

int bench_hugepages = 0;

int bench_hugepages_supported(void) { return BENCH_HAVE_MADV_HUGEPAGE; }

enum { BENCH_HUGE = 2u << 20 }; /* x86-64's and AArch64's (4 KiB granule) huge page */

void *bench_alloc64(size_t bytes) {
  const int huge = bench_hugepages && bytes >= BENCH_HUGE;
  const size_t align = huge ? BENCH_HUGE : 64;
  size_t rounded = (bytes + align - 1) & ~(align - 1);
  void *p = aligned_alloc(align, rounded ? rounded : align);
#if BENCH_HAVE_MADV_HUGEPAGE
  if (p && huge) (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice: refused or ignored, the pages stay small */
#endif
  if (p) memset(p, 0, rounded ? rounded : align); /* first touch outside the timed region */
  return p;
}

const char *bench_thp_mode(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f) return buf;
  char line[128];
  if (fgets(line, sizeof line, f)) { /* "always [madvise] never": the bracketed word */
    const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
    if (a && b) snprintf(buf, len, "%.*s", (int)(b - a - 1), a + 1);
  }
  fclose(f);
  return buf;
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

/* Standard normal samples from the same stream (Box-Muller over pairs of uniforms). */
static void fill_normal(float *p, size_t count, uint32_t *state) {
  float u[2];
  for (size_t i = 0; i < count; i += 2) {
    fill_uniform(u, 2, state);
    /* 0.5 (1 - u) is in (0, 1]: its log is finite and <= 0 */
    const double r = sqrt(-2.0 * log(0.5 * (1.0 - (double)u[0]))), a = 3.14159265358979 * (double)u[1];
    p[i] = (float)(r * cos(a));
    if (i + 1 < count) p[i + 1] = (float)(r * sin(a));
  }
}

/* A delta-rule shape's gates and beta, as the models make them: beta = sigmoid(x) and log gates
 * -0.1 softplus(x) (x standard normal; decays exp(g) in about (0.8, 1), mean ~0.93). */
static int fill_delta(bench_work *w, uint32_t *rng, char *err, size_t errlen) {
  const bench_shape *s = &w->s;
  const size_t rows = s->n_kv * s->h_kv, gates = rows * bench_delta_gate_width(s);
  w->beta = bench_alloc64(rows * sizeof(float));
  if (gates) w->gate = bench_alloc64(gates * sizeof(float));
  if (!w->beta || (gates && !w->gate)) {
    snprintf(err, errlen, "out of memory for the gates and beta");
    return -1;
  }
  fill_normal(w->beta, rows, rng);
  for (size_t i = 0; i < rows; i++) w->beta[i] = (float)(1.0 / (1.0 + exp(-(double)w->beta[i])));
  if (!gates) return 0;
  fill_normal(w->gate, gates, rng);
  for (size_t i = 0; i < gates; i++) w->gate[i] = (float)(-0.1 * log1p(exp((double)w->gate[i])));
  return 0;
}

void bench_delta_state_fill(float *state, size_t count) {
  uint32_t rng = 0x2545f491u;
  fill_uniform(state, count, &rng);
  for (size_t i = 0; i < count; i++) state[i] *= 0.1f;
}

int bench_work_fail(char *err, size_t errlen, const char *what, attn_status st) {
  snprintf(err, errlen, "%s: %s", what, attn_status_string(st));
  return -1;
}

void *bench_work_impl(bench_work *w, size_t bytes, char *err, size_t errlen) {
  if (!(w->impl = bench_alloc64(bytes))) snprintf(err, errlen, "out of memory for the call's data");
  return w->impl;
}

int bench_work_workspace(bench_work *w, attn_status st, const char *what, char *err, size_t errlen) {
  if (st != ATTN_OK) return bench_work_fail(err, errlen, what, st);
  if (w->workspace_bytes && !(w->workspace = bench_alloc64(w->workspace_bytes))) {
    snprintf(err, errlen, "out of memory for the workspace");
    return -1;
  }
  return 0;
}

int bench_work_init(bench_work *w, const bench_shape *s, const bench_call *call, unsigned seed, char *err,
                    size_t errlen) {
  memset(w, 0, sizeof *w);
  w->s = *s;
  w->call = call;
  /* A delta-rule shape's o has its h_kv value heads (and k its h_q key heads: fewer than allocated),
   * and so has Mamba-2's (qk_shared) */
  const size_t nq = s->n_q * s->h_q, nkv = s->n_kv * s->h_kv;
  const size_t no = bench_kind_delta(s->kind) ? nkv : s->n_q * bench_linear_out_heads(s);
  w->q = bench_alloc64(nq * s->d * sizeof(float));
  w->k = bench_alloc64(nkv * s->d * sizeof(float));
  w->v = bench_alloc64(nkv * s->dv * sizeof(float));
  w->o = bench_alloc64(no * s->dv * sizeof(float));
  if (!w->q || !w->k || !w->v || !w->o) {
    snprintf(err, errlen, "out of memory for the inputs");
    return -1;
  }
  uint32_t rng = 0x12345u + 7919u * seed;
  fill_uniform(w->q, nq * s->d, &rng);
  fill_uniform(w->k, nkv * s->d, &rng);
  fill_uniform(w->v, nkv * s->dv, &rng);
  if (bench_kind_delta(s->kind) && fill_delta(w, &rng, err, errlen)) return -1;
  if (s->gate != ATTN_GATE_NONE) { /* log gates: RetNet's fixed decays, or uniform in [-0.3, -0.01) */
    const size_t count = s->fixed_decay ? s->h_kv : nkv * bench_gate_width(s);
    if (!(w->gate = bench_alloc64(count * sizeof(float)))) {
      snprintf(err, errlen, "out of memory for the log gates");
      return -1;
    }
    attn_status st = ATTN_OK;
    if (s->fixed_decay)
      st = attn_retnet_log_decays(s->h_kv, w->gate);
    else {
      fill_uniform(w->gate, count, &rng);
      for (size_t i = 0; i < count; i++) w->gate[i] = -0.155f + 0.145f * w->gate[i];
    }
    if (st != ATTN_OK) return bench_work_fail(err, errlen, "attn_retnet_log_decays", st);
  }
  if (s->qk_shared) { /* Mamba-2's dt, its beta: softplus(x - 2), x standard normal (about 0.05 to 0.5) */
    if (!(w->beta = bench_alloc64(nkv * sizeof(float)))) {
      snprintf(err, errlen, "out of memory for dt");
      return -1;
    }
    fill_normal(w->beta, nkv, &rng);
    for (size_t i = 0; i < nkv; i++) w->beta[i] = (float)log1p(exp((double)w->beta[i] - 2.0));
  }
  return call->setup(w, err, errlen);
}

size_t bench_decode_copies = 0, bench_concurrent_works = 1;

/* At most this many bytes of copies per work, whatever the rule asks (the rule's bench_memory_bytes
 * is 520-600 MiB on today's 260-300 MiB L3 servers). */
#define BENCH_COPIES_MAX_BYTES ((size_t)3 << 30)
size_t bench_cache_copies(size_t bytes) {
  if (!bytes) return 1;
  size_t c = bench_decode_copies;
  if (!c) { /* bench_memory_bytes across the works running at once */
    const size_t works = bench_concurrent_works ? bench_concurrent_works : 1;
    const size_t want = bench_memory_bytes() / works;
    c = (want + bytes - 1) / bytes;
  }
  if (c > BENCH_COPIES_MAX_BYTES / bytes) c = BENCH_COPIES_MAX_BYTES / bytes;
  return c ? c : 1;
}

int bench_work_copy_cache(bench_work *w, const void *k, size_t kbytes, const void *v, size_t vbytes, char *err,
                          size_t errlen) {
  const size_t n = bench_cache_copies(kbytes + vbytes);
  w->ncopies = 1, w->turn = 0, w->kbytes = kbytes, w->vbytes = vbytes;
  if (n < 2) return 0;
  if (!(w->copies = bench_alloc64(n * (kbytes + vbytes)))) {
    snprintf(err, errlen, "out of memory for %zu copies of the K/V cache", n);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    memcpy(w->copies + i * (kbytes + vbytes), k, kbytes);
    memcpy(w->copies + i * (kbytes + vbytes) + kbytes, v, vbytes);
  }
  w->ncopies = n;
  return 0;
}

void bench_work_cache(bench_work *w, const void **k, const void **v) {
  if (!w->copies) return;
  const char *c = w->copies + w->turn * (w->kbytes + w->vbytes);
  *k = c, *v = c + w->kbytes;
  w->turn = w->turn + 1 == w->ncopies ? 0 : w->turn + 1;
}

void bench_work_free(bench_work *w) {
  if (w->call && w->call->teardown) w->call->teardown(w);
  free(w->q);
  free(w->k);
  free(w->v);
  free(w->o);
  free(w->gate);
  free(w->beta);
  free(w->workspace);
  free(w->impl);
  free(w->scratch);
  free(w->copies);
  memset(w, 0, sizeof *w);
}

void bench_work_run(void *ctx, size_t iters) {
  bench_work *w = ctx;
  for (size_t i = 0; i < iters; i++) w->call->run(w);
}
