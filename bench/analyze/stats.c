/* Random numbers (splitmix64, a 64-bit generator that passes BigCrush; Gaussians by Marsaglia's
 * polar method), replicate statistics and the drivers' small helpers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analyze.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void an_rng_seed(an_rng *r, uint64_t seed) {
  r->x = seed;
  r->have = 0;
}

double an_uniform(an_rng *r) { return (double)(splitmix64(&r->x) >> 11) * 0x1p-53; }

double an_gauss(an_rng *r) {
  if (r->have) {
    r->have = 0;
    return r->spare;
  }
  double u, v, s;
  do {
    u = 2 * an_uniform(r) - 1;
    v = 2 * an_uniform(r) - 1;
    s = u * u + v * v;
  } while (s >= 1 || s == 0);
  double f = sqrt(-2 * log(s) / s);
  r->spare = v * f;
  r->have = 1;
  return u * f;
}

void an_fill_gauss(an_rng *r, float *x, size_t n, double mean, double sd) {
  for (size_t i = 0; i < n; i++) x[i] = (float)(mean + sd * an_gauss(r));
}

void an_direction(an_rng *r, float *x, size_t d, double norm) {
  double ss, g[1024];
  do {
    ss = 0;
    for (size_t i = 0; i < d && i < 1024; i++) g[i] = an_gauss(r), ss += g[i] * g[i];
  } while (ss == 0);
  for (size_t i = 0; i < d && i < 1024; i++) x[i] = (float)(norm * g[i] / sqrt(ss));
}

void an_shuffle(an_rng *r, float *x, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(an_uniform(r) * (double)i);
    float t = x[i - 1];
    x[i - 1] = x[j];
    x[j] = t;
  }
}

void an_acc_add(an_acc *a, double x) {
  a->n += 1;
  double delta = x - a->mean;
  a->mean += delta / a->n;
  a->m2 += delta * (x - a->mean);
}

double an_acc_se(const an_acc *a) { return a->n > 1 ? sqrt(a->m2 / (a->n - 1) / a->n) : NAN; }

double an_mean_finite(const float *x, size_t n, size_t stride) {
  double sum = 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(x[i * stride])) sum += x[i * stride], k++;
  return k ? sum / (double)k : NAN;
}

void *an_alloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (p) memset(p, 0, rounded ? rounded : 64);
  return p;
}

int an_call_ok(an_doc *doc, attn_status st, const char *what) {
  return st == ATTN_OK || an_check(doc, 0, "%s: %s", what, attn_status_string(st));
}

void *an_grow(an_buf *b, size_t bytes) {
  if (bytes > b->bytes || !b->p) {
    free(b->p);
    b->p = aligned_alloc(64, (bytes + 64) / 64 * 64);
    b->bytes = b->p ? bytes : 0;
  }
  return b->p;
}

/* ws grown to *bytes when s is ATTN_OK (the status of the size query that wrote *bytes, evaluated
 * before this call reads it); s, or ATTN_E_NULL_POINTER when it cannot grow. */
static attn_status an_ws_ready(an_buf *ws, attn_status s, const size_t *bytes) {
  return s != ATTN_OK || an_grow(ws, *bytes) ? s : ATTN_E_NULL_POINTER;
}

attn_status an_matrix(const attn_call *call, float *a, size_t n_kv, an_buf *ws) {
  size_t bytes = 0;
  const attn_status s = an_ws_ready(ws, attn_matrix_workspace_size(call, &bytes), &bytes);
  return s != ATTN_OK ? s : attn_matrix(call, a, (attn_layout){n_kv, n_kv}, ws->p, bytes);
}

attn_status an_matrix_stats(const attn_call *call, const attn_row_stats *st, an_buf *ws) {
  size_t bytes = 0;
  const attn_status s = an_ws_ready(ws, attn_matrix_stats_workspace_size(call, &bytes), &bytes);
  return s != ATTN_OK ? s : attn_matrix_stats(call, st, ws->p, bytes);
}

attn_status an_softmax_out(const attn_softmax_desc *sd, const float *q, const float *k, const float *v, float *o,
                           an_buf *ws) {
  size_t bytes = 0;
  const attn_status s = an_ws_ready(ws, attn_softmax_workspace_size(sd, &bytes), &bytes);
  return s != ATTN_OK ? s : attn_softmax(sd, q, k, v, o, NULL, ws->p, bytes);
}

attn_status an_linear_out(const attn_linear_desc *ld, const float *q, const float *k, const float *v, float *o,
                          an_buf *ws) {
  size_t bytes = 0;
  const attn_status s = an_ws_ready(ws, attn_linear_workspace_size(ld, &bytes), &bytes);
  return s != ATTN_OK ? s : attn_linear(ld, q, k, v, o, NULL, ws->p, bytes);
}

double an_rel_fro(const float *a, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)a[i] - ref[i];
    num += e * e, den += (double)ref[i] * ref[i];
  }
  return sqrt(num / den);
}

double an_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
