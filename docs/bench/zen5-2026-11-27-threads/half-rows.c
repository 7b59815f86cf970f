/*
 * Reads of half rows against whole rows (README.md here, half-rows.txt): N rows of 2 KiB, summed
 * with AVX-512 loads, five passes. Mode 0: thread w reads half w (1 KiB) of every row, as two
 * workers of a chunk scan read their heads of token-major rows of 8 heads (d = 64). Mode 1:
 * thread w reads every byte of rows [w N / 2, (w + 1) N / 2). One thread: thread 0's share, the
 * same bytes in both modes. Threads pinned to CPUs 0 and 1.
 * Build: gcc -O2 -mavx512f half-rows.c -o half-rows -lpthread; run: ./half-rows N MODE THREADS
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ROW = 512, HALF = 256, PASSES = 5 }; /* floats */

static size_t n_rows;
static const float *buf;
static int mode;
static double sums[2];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static __m512 sum_floats(__m512 s, const float *p, size_t n) {
  for (size_t i = 0; i < n; i += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(p + i));
  return s;
}

static void *reader(void *arg) {
  const size_t w = (size_t)arg;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(w, &cpus);
  pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
  __m512 s = _mm512_setzero_ps();
  for (int pass = 0; pass < PASSES; pass++) {
    if (mode == 0)
      for (size_t r = 0; r < n_rows; r++) s = sum_floats(s, buf + r * ROW + w * HALF, HALF);
    else
      for (size_t r = w * n_rows / 2; r < (w + 1) * n_rows / 2; r++) s = sum_floats(s, buf + r * ROW, ROW);
  }
  sums[w] = _mm512_reduce_add_ps(s); /* used, so that the loads are not dropped */
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s ROWS MODE THREADS\n", argv[0]);
    return 2;
  }
  n_rows = strtoul(argv[1], NULL, 10), mode = atoi(argv[2]);
  const int threads = atoi(argv[3]) == 1 ? 1 : 2;
  float *b = aligned_alloc(4096, n_rows * ROW * sizeof(float));
  if (!b) return 1;
  for (size_t i = 0; i < n_rows * ROW; i++) b[i] = 1.0f;
  buf = b;
  for (int k = 0; k < 3; k++) {
    pthread_t tid[2];
    const double t0 = now();
    for (long w = 0; w < threads; w++) pthread_create(&tid[w], NULL, reader, (void *)w);
    for (int w = 0; w < threads; w++) pthread_join(tid[w], NULL);
    const double t = now() - t0, bytes = PASSES * (double)n_rows * (threads == 1 ? 1024.0 : 2048.0);
    printf("rows %zu mode %d threads %d: %.2f ms, %.1f GB/s (sum %g)\n", n_rows, mode, threads, t * 1e3,
           bytes / t / 1e9, sums[0] + sums[1]);
  }
  free(b);
  return 0;
}
