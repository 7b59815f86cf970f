/* timing.c: the one timing loop of the bench, and the worker pool behind --threads and --pin. */
#define _GNU_SOURCE /* CPU_SET, pthread_setaffinity_np */
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process: compared with wall time it shows time lost to other tasks. */
static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds the whole machine spent busy (all CPUs, from /proc/stat); < 0 if unknown. Minus this
 * process's CPU time it is what other tasks used, which slows a measurement even on another core
 * (shared L3, memory bandwidth, clock). */
static double machine_busy_seconds(void) {
  FILE *f = fopen("/proc/stat", "r");
  unsigned long long v[8] = {0};
  int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                     &v[7])
            : 0;
  if (f) fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (n < 8 || hz <= 0) return -1;
  /* user nice system idle iowait irq softirq steal: everything but idle and iowait */
  return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

struct bench_pool {
  int threads;
  int pin_cpu;
  pthread_t *tids;
  pthread_barrier_t start, done;
  bench_kernel fn; /* written by worker 0 before the start barrier */
  void *const *ctx;
  size_t iters;
  int stop;
};

typedef struct worker_arg {
  bench_pool *pool;
  int index;
} worker_arg;

static int pin_to(pthread_t thread, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(thread, sizeof set, &set);
}

int bench_online_cpus(void) {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > INT_MAX / 2 ? INT_MAX / 2 : (int)n;
}

static void *worker_main(void *p) {
  worker_arg arg = *(worker_arg *)p;
  free(p);
  bench_pool *pool = arg.pool;
  for (;;) {
    pthread_barrier_wait(&pool->start);
    if (pool->stop) break;
    pool->fn(pool->ctx[arg.index], pool->iters);
    pthread_barrier_wait(&pool->done);
  }
  return NULL;
}

bench_pool *bench_pool_create(int threads, int pin_cpu, char *err, size_t errlen) {
  bench_pool *pool = calloc(1, sizeof *pool);
  if (!pool || !(pool->tids = calloc((size_t)threads, sizeof *pool->tids))) {
    snprintf(err, errlen, "out of memory");
    free(pool);
    return NULL;
  }
  pool->threads = threads;
  pool->pin_cpu = pin_cpu;
  if (pthread_barrier_init(&pool->start, NULL, (unsigned)threads) ||
      pthread_barrier_init(&pool->done, NULL, (unsigned)threads)) {
    snprintf(err, errlen, "cannot create the thread barriers");
    return NULL; /* the caller exits */
  }
  const int ncpu = bench_online_cpus();
  if (pin_cpu >= 0) {
    int rc = pin_to(pthread_self(), pin_cpu % (int)ncpu);
    if (rc) {
      snprintf(err, errlen, "cannot pin to CPU %d: %s", pin_cpu % (int)ncpu, strerror(rc));
      return NULL;
    }
  }
  for (int t = 1; t < threads; t++) {
    worker_arg *arg = malloc(sizeof *arg);
    if (!arg) {
      snprintf(err, errlen, "out of memory");
      return NULL;
    }
    *arg = (worker_arg){pool, t};
    int rc = pthread_create(&pool->tids[t], NULL, worker_main, arg);
    if (rc) {
      /* Workers already started wait on a barrier that can no longer fill: the caller exits. */
      snprintf(err, errlen, "cannot start worker thread %d: %s", t, strerror(rc));
      free(arg);
      return NULL;
    }
    if (pin_cpu >= 0 && (rc = pin_to(pool->tids[t], (pin_cpu + t) % (int)ncpu))) {
      snprintf(err, errlen, "cannot pin worker %d to CPU %d: %s", t, (pin_cpu + t) % (int)ncpu, strerror(rc));
      return NULL;
    }
  }
  return pool;
}

void bench_pool_destroy(bench_pool *pool) {
  if (!pool) return;
  pool->stop = 1;
  pthread_barrier_wait(&pool->start);
  for (int t = 1; t < pool->threads; t++) pthread_join(pool->tids[t], NULL);
  pthread_barrier_destroy(&pool->start);
  pthread_barrier_destroy(&pool->done);
  free(pool->tids);
  free(pool);
}

int bench_pool_threads(const bench_pool *pool) { return pool->threads; }

/* One sample: every worker runs fn `iters` times; wall time until the last one is done. */
static double run_once(bench_pool *pool, bench_kernel fn, void *const *ctx, size_t iters) {
  pool->fn = fn;
  pool->ctx = ctx;
  pool->iters = iters;
  if (pool->threads == 1) {
    double t0 = bench_now();
    fn(ctx[0], iters);
    return bench_now() - t0;
  }
  double t0 = bench_now();
  pthread_barrier_wait(&pool->start);
  fn(ctx[0], iters);
  pthread_barrier_wait(&pool->done);
  return bench_now() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Quantile of sorted samples, linear interpolation. */
static double quantile(const double *v, unsigned n, double q) {
  double pos = q * (double)(n - 1);
  unsigned i = (unsigned)pos;
  if (i + 1 >= n) return v[n - 1];
  return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

double bench_median(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return quantile(v, (unsigned)n, 0.5);
}

void bench_measure(bench_pool *pool, const bench_timing *timing, bench_kernel fn, void *const *ctx, bench_stats *out) {
  /* Calibrate: grow the calls per sample until one sample lasts target seconds. A sample of at
   * least 1/20 of the minimum time keeps timer and barrier overhead negligible and still gives
   * about 20 samples. Calibration runs are warm-up runs. */
  const double target = timing->min_time / 20 > 1e-4 ? timing->min_time / 20 : 1e-4;
  const double wall0 = bench_now(), cpu0 = cpu_seconds(), busy0 = machine_busy_seconds();
  size_t iters = 1;
  unsigned warm = 0;
  double t = run_once(pool, fn, ctx, iters);
  warm++;
  while (t < target && iters < ((size_t)1 << 40)) {
    double grow = t > 0 ? 1.2 * target / t : 10.0;
    if (grow > 10) grow = 10;
    if (grow < 2) grow = 2;
    iters = (size_t)ceil((double)iters * grow);
    t = run_once(pool, fn, ctx, iters);
    warm++;
  }
  for (; warm < timing->warmup; warm++) run_once(pool, fn, ctx, iters);

  unsigned cap = timing->max_reps > timing->min_reps ? timing->max_reps : timing->min_reps;
  double *samples = malloc(cap * sizeof *samples);
  if (!samples) {
    *out = (bench_stats){0};
    return;
  }
  unsigned n = 0;
  double spent = 0;
  while (n < cap && (n < timing->min_reps || spent < timing->min_time)) {
    double s = run_once(pool, fn, ctx, iters);
    spent += s;
    samples[n++] = s / (double)iters;
  }
  qsort(samples, n, sizeof *samples, cmp_double);
  out->reps = n;
  out->iters = iters;
  out->min = samples[0];
  out->max = samples[n - 1];
  out->median = quantile(samples, n, 0.5);
  out->q1 = quantile(samples, n, 0.25);
  out->q3 = quantile(samples, n, 0.75);
  out->spread = out->median > 0 ? (out->q3 - out->q1) / out->median : 0;
  const double wall = bench_now() - wall0, cpu = cpu_seconds() - cpu0, busy1 = machine_busy_seconds();
  out->cpu_share = wall > 0 ? cpu / (wall * pool->threads) : 1;
  out->other_load = busy0 >= 0 && busy1 >= 0 && wall > 0 ? (busy1 - busy0 - cpu) / wall : NAN;
  if (out->other_load < 0) out->other_load = 0;
  out->noisy = out->spread > timing->noisy_spread || out->cpu_share < 0.9;
  free(samples);
}
