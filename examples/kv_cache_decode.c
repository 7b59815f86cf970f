/* kv_cache_decode: one decode step (one new query token) over a KV cache stored in fp16, run on
 * several threads.
 *
 * Shows: converting fp32 keys and values into an fp16 cache with attn_f32_to_f16, reading that
 * cache directly (attn_shape.kv_type = ATTN_F16: the kernels convert it exactly, block by block),
 * and giving one call several threads through attn_shape.threads, in the two ways attn.h offers:
 *   (a) the caller's own parallel-for: here an OpenMP adapter (built when the compiler has OpenMP);
 *   (b) the library's pool: attn_pool_create, attn_pool_threads.
 * The library cuts the call into tasks whose boundaries never depend on the number of workers, so
 * both runs give the same bits as a call without threads (checked with memcmp); the result is
 * checked against a double-precision loop over the cached fp16 values.
 *
 * Build by hand: cc -std=c11 -O2 kv_cache_decode.c $(pkg-config --cflags --libs --static attn) -fopenmp */
#include <attn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* 4500 cached tokens: more than 2 x ATTN_SPLIT_KEYS, so the step also splits its keys into ranges
 * that run as parallel tasks and are merged in a fixed order. */
enum { N = 4500, HQ = 8, HKV = 2, D = 64, POOL_THREADS = 4 };

static float rnd(uint32_t *s) { /* uniform in [-1, 1), fixed seed */
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* The larger of two errors; a NaN wins and stays (fmax would drop it), so a NaN output fails. */
static double max_err(double err, double e) { return (e > err || isnan(e)) ? e : err; }

#ifdef _OPENMP
/* (a) An attn_threads.parallel_for over OpenMP: call fn once per task, each on some thread of the
 * team, with that thread's number as the worker index. The team is capped at the worker count
 * the library was promised (pool points to it), so every index is < workers, and two tasks never
 * run at once with the same index. */
static void omp_parallel_for(void *pool, attn_task_fn fn, void *context, size_t tasks) {
  const int workers = (int)*(const size_t *)pool;
#pragma omp parallel for num_threads(workers) schedule(dynamic, 1)
  for (size_t i = 0; i < tasks; i++) fn(context, i, (size_t)omp_get_thread_num());
}
#endif

/* One decode step with the given threads (NULL: the calling thread alone); the workspace depends
 * on the workers, so it is sized for each call. */
static attn_status decode(attn_softmax_desc desc, const attn_threads *threads, const float *q, const uint16_t *k,
                          const uint16_t *v, float *o) {
  size_t bytes = 0;
  desc.shape.threads = threads;
  attn_status st = attn_softmax_workspace_size(&desc, &bytes);
  void *ws = st == ATTN_OK ? malloc(bytes) : NULL;
  if (st == ATTN_OK) st = ws ? attn_softmax(&desc, q, k, v, o, NULL, ws, bytes) : ATTN_E_SYSTEM;
  free(ws);
  return st;
}

int main(void) {
  static float q[HQ * D], kf[N * HKV * D], vf[N * HKV * D], o_serial[HQ * D], o_omp[HQ * D], o_pool[HQ * D];
  static uint16_t k16[N * HKV * D], v16[N * HKV * D]; /* the fp16 cache, [token][head][dim] */
  uint32_t seed = 11;
  for (size_t i = 0; i < HQ * D; i++) q[i] = rnd(&seed);
  /* Values in [0, 1): an output averages thousands of them, and a mean away from 0 keeps the
   * check below sensitive to a lost or doubled key. */
  for (size_t i = 0; i < N * HKV * D; i++) kf[i] = rnd(&seed), vf[i] = 0.5f + 0.5f * rnd(&seed);

  /* Fill the cache: fp32 to fp16, round to nearest even. */
  attn_status st = attn_f32_to_f16(kf, k16, N * HKV * D);
  if (st == ATTN_OK) st = attn_f32_to_f16(vf, v16, N * HKV * D);

  /* The step: n_q = 1 query (the newest token, which sees every cached key) over n_kv = N keys. */
  attn_softmax_desc desc;
  if (st == ATTN_OK) st = attn_softmax_desc_init(&desc, 1, N, HQ, HKV, D, D);
  desc.shape.kv_type = ATTN_F16; /* k and v are uint16_t fp16 bits; q and o stay fp32 */
  if (st == ATTN_OK) st = decode(desc, NULL, q, k16, v16, o_serial);

  /* (a) OpenMP: workers = the team size OpenMP would use, at most ATTN_MAX_WORKERS. */
  size_t omp_workers = 0;
#ifdef _OPENMP
  omp_workers = (size_t)omp_get_max_threads();
  if (omp_workers > ATTN_MAX_WORKERS) omp_workers = ATTN_MAX_WORKERS;
  const attn_threads omp_threads = {omp_parallel_for, &omp_workers, omp_workers};
  if (st == ATTN_OK) st = decode(desc, &omp_threads, q, k16, v16, o_omp);
#endif

  /* (b) The library's pool: POOL_THREADS workers, the calling thread being worker 0. Create it
   * once and reuse it for every call; destroy it when done. */
  attn_pool *pool = NULL;
  attn_threads pool_threads;
  if (st == ATTN_OK) st = attn_pool_create(POOL_THREADS, &pool);
  if (st == ATTN_OK) st = attn_pool_threads(pool, &pool_threads);
  if (st == ATTN_OK) st = decode(desc, &pool_threads, q, k16, v16, o_pool);
  attn_pool_destroy(pool);
  if (st != ATTN_OK) {
    printf("kv_cache_decode: %s\n", attn_status_string(st));
    return 1;
  }

  /* Same bits whatever the threads. */
  const int same_pool = memcmp(o_pool, o_serial, sizeof o_serial) == 0;
  const int same_omp = omp_workers == 0 || memcmp(o_omp, o_serial, sizeof o_serial) == 0;

  /* Reference in double over the values the cache holds (fp16 converts to fp32 exactly). */
  static float kc[N * HKV * D], vc[N * HKV * D];
  static double p[N];
  st = attn_f16_to_f32(k16, kc, N * HKV * D);
  if (st == ATTN_OK) st = attn_f16_to_f32(v16, vc, N * HKV * D);
  if (st != ATTN_OK) {
    printf("kv_cache_decode: %s\n", attn_status_string(st));
    return 1;
  }
  double err = 0.0;
  for (size_t h = 0; h < HQ; h++) {
    const size_t g = h / (HQ / HKV);
    double mx = -INFINITY, sum = 0.0;
    for (size_t j = 0; j < N; j++) {
      p[j] = 0.0;
      for (size_t c = 0; c < D; c++) p[j] += (double)q[h * D + c] * kc[(j * HKV + g) * D + c];
      p[j] /= sqrt((double)D);
      mx = fmax(mx, p[j]);
    }
    for (size_t j = 0; j < N; j++) sum += (p[j] = exp(p[j] - mx));
    for (size_t c = 0; c < D; c++) {
      double acc = 0.0;
      for (size_t j = 0; j < N; j++) acc += p[j] * vc[(j * HKV + g) * D + c];
      err = max_err(err, fabs(acc / sum - o_serial[h * D + c]));
    }
  }

  /* Tolerance: logits are fp32 sums of D = 64 products, outputs fp32 weighted sums of N = 4500
   * values (merged from key ranges), plus exp's 2^-22 relative error: well under 2e-5. */
  const double tol = 2e-5;
  const int ok = err <= tol && same_pool && same_omp; /* false for NaN */
  char omp_note[64] = "OpenMP not built";
  if (omp_workers)
    snprintf(omp_note, sizeof omp_note, "OpenMP (%zu workers) %s", omp_workers, same_omp ? "same" : "DIFFERENT");
  printf("kv_cache_decode: max |err| %.1e (tolerance %.0e); bits vs the serial call: %s, pool (%d workers) %s: %s\n",
         err, tol, omp_note, POOL_THREADS, same_pool ? "same" : "DIFFERENT", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
