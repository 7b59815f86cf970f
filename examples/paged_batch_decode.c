/* paged_batch_decode: one decode step of a serving loop: every running sequence's new token over
 * its own KV cache, in one call, the caches in pages of a shared fp16 pool, on the caller's own
 * thread pool.
 *
 * Shows: a paged KV cache as vLLM and FlashInfer keep it (a pool [pages][page_size][h_kv][d], a
 * page table per sequence, pages handed out in any order), attn_batch describing the step (one
 * query row per sequence, each sequence's cache length), attn_softmax_batch_workspace_size and
 * attn_softmax_batch, and an attn_threads over the caller's pool (a few pthreads here): one
 * dispatch takes every sequence's tasks. The result is checked bit for bit against attn_softmax on
 * each sequence alone (its cache copied out contiguously) and against a double-precision loop
 * over the cached fp16 values.
 *
 * Build by hand: cc -std=c11 -O2 paged_batch_decode.c $(pkg-config --cflags --libs --static attn) -lpthread */
#include <attn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 5, HQ = 8, HKV = 2, D = 64, PAGE = 16, POOL_PAGES = 200, WORKERS = 3 };
static const size_t LENS[B] = {700, 33, 1200, 16, 451}; /* cached tokens of each sequence */

static float rnd(uint32_t *s) { /* uniform in [-1, 1), fixed seed */
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* ---- the caller's thread pool: WORKERS - 1 pthreads and the calling thread ---- */
typedef struct pool {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  attn_task_fn fn;
  void *ctx;
  size_t tasks, next, running, generation;
  int quit;
  pthread_t th[WORKERS - 1];
} pool;

/* Take tasks until none is left; `worker` is this thread's fixed index (< WORKERS). */
static void pool_drain(pool *p, size_t worker) {
  for (;;) {
    pthread_mutex_lock(&p->mu);
    const size_t i = p->next < p->tasks ? p->next++ : SIZE_MAX;
    pthread_mutex_unlock(&p->mu);
    if (i == SIZE_MAX) return;
    p->fn(p->ctx, i, worker);
  }
}

typedef struct pool_arg {
  pool *p;
  size_t worker;
} pool_arg;

static void *pool_thread(void *arg) {
  const pool_arg *a = arg;
  pool *p = a->p;
  size_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->quit && p->generation == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    pool_drain(p, a->worker);
    pthread_mutex_lock(&p->mu);
    if (--p->running == 0) pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

/* attn_threads.parallel_for: publish the job, drain it as worker 0, wait for the others. */
static void pool_parallel_for(void *ctx, attn_task_fn fn, void *context, size_t tasks) {
  pool *p = ctx;
  pthread_mutex_lock(&p->mu);
  p->fn = fn, p->ctx = context, p->tasks = tasks, p->next = 0, p->running = WORKERS - 1, p->generation++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  pool_drain(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->running) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

int main(void) {
  /* The pool of pages, [page][token in page][kv head][dim] in fp16, and each sequence's pages. */
  static uint16_t kpool[POOL_PAGES * PAGE * HKV * D], vpool[POOL_PAGES * PAGE * HKV * D];
  static int32_t table[B][POOL_PAGES];
  static float q[B * HQ * D], o[B * HQ * D], o_alone[B * HQ * D];
  uint32_t seed = 5;
  size_t next_page = 0, max_pages = 0;
  attn_status st = ATTN_OK;
  for (size_t b = 0; b < B; b++) { /* pages handed out interleaved, as a serving loop grows caches */
    const size_t n = (LENS[b] + PAGE - 1) / PAGE;
    for (size_t i = 0; i < n; i++) table[b][i] = (int32_t)((next_page++ * 7) % POOL_PAGES);
    max_pages = n > max_pages ? n : max_pages;
  }
  if (next_page > POOL_PAGES) return 1; /* 7 is prime to POOL_PAGES' factors: distinct pages */
  for (size_t i = 0; i < POOL_PAGES * PAGE * HKV * D && st == ATTN_OK; i++) {
    const float kv[2] = {rnd(&seed), 0.5f + 0.5f * rnd(&seed)};
    uint16_t h[2];
    st = attn_f32_to_f16(kv, h, 2);
    kpool[i] = h[0], vpool[i] = h[1];
  }
  for (size_t i = 0; i < B * HQ * D; i++) q[i] = rnd(&seed);

  /* The step: row b of q and o is sequence b's new token; its keys are its cache (bottom-right: the
   * new token sees all of them). desc gives what every sequence shares; with pages, shape.n_kv is
   * a page's tokens and the K/V layouts are a page's. */
  size_t q_offsets[B + 1], lens[B];
  for (size_t b = 0; b <= B; b++) q_offsets[b] = b;
  for (size_t b = 0; b < B; b++) lens[b] = LENS[b];
  attn_softmax_desc desc;
  if (st == ATTN_OK) st = attn_softmax_desc_init(&desc, B, PAGE, HQ, HKV, D, D);
  desc.shape.kv_type = ATTN_F16;
  attn_batch batch;
  if (st == ATTN_OK) st = attn_batch_init(&batch);
  batch.count = B, batch.q_offsets = q_offsets, batch.kv_lens = lens;
  batch.page_table = &table[0][0], batch.table_stride = POOL_PAGES, batch.page_size = PAGE;
  batch.pages = POOL_PAGES, batch.k_page_stride = batch.v_page_stride = PAGE * HKV * D;

  /* The caller's pool as the call's threads. */
  pool p = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};
  pool_arg args[WORKERS - 1];
  for (size_t w = 1; w < WORKERS; w++) {
    args[w - 1] = (pool_arg){&p, w};
    if (pthread_create(&p.th[w - 1], NULL, pool_thread, &args[w - 1])) return 1;
  }
  const attn_threads threads = {pool_parallel_for, &p, WORKERS};
  desc.shape.threads = &threads;
  size_t bytes = 0;
  if (st == ATTN_OK) st = attn_softmax_batch_workspace_size(&desc, &batch, &bytes);
  void *ws = st == ATTN_OK ? malloc(bytes) : NULL;
  if (st == ATTN_OK) st = ws ? attn_softmax_batch(&desc, &batch, q, kpool, vpool, o, NULL, ws, bytes) : ATTN_E_SYSTEM;
  free(ws);
  pthread_mutex_lock(&p.mu);
  p.quit = 1;
  pthread_cond_broadcast(&p.go);
  pthread_mutex_unlock(&p.mu);
  for (size_t w = 1; w < WORKERS; w++) pthread_join(p.th[w - 1], NULL);

  /* Each sequence alone: its cache copied out of its pages, one attn_softmax call, no threads;
   * then a double loop over the fp16 values. */
  static uint16_t kc[1200 * HKV * D], vc[1200 * HKV * D];
  static float kf[1200 * HKV * D], vf[1200 * HKV * D];
  static double w[1200];
  double err = 0.0;
  for (size_t b = 0; b < B && st == ATTN_OK; b++) {
    const size_t n = LENS[b], row = HKV * D;
    for (size_t j = 0; j < n; j++) {
      const size_t at = ((size_t)table[b][j / PAGE] * PAGE + j % PAGE) * row;
      memcpy(kc + j * row, kpool + at, row * sizeof(uint16_t)), memcpy(vc + j * row, vpool + at, row * sizeof(uint16_t));
    }
    attn_softmax_desc d1;
    st = attn_softmax_desc_init(&d1, 1, n, HQ, HKV, D, D);
    d1.shape.kv_type = ATTN_F16;
    size_t b1 = 0;
    if (st == ATTN_OK) st = attn_softmax_call_workspace_size(&d1, &b1);
    void *w1 = st == ATTN_OK ? malloc(b1) : NULL;
    if (st == ATTN_OK) st = w1 ? attn_softmax(&d1, q + b * HQ * D, kc, vc, o_alone + b * HQ * D, NULL, w1, b1) : ATTN_E_SYSTEM;
    free(w1);
    if (st == ATTN_OK) st = attn_f16_to_f32(kc, kf, n * row);
    if (st == ATTN_OK) st = attn_f16_to_f32(vc, vf, n * row);
    for (size_t h = 0; h < HQ && st == ATTN_OK; h++) {
      const size_t g = h / (HQ / HKV);
      double mx = -INFINITY, sum = 0.0;
      for (size_t j = 0; j < n; j++) {
        double s = 0.0;
        for (size_t c = 0; c < D; c++) s += (double)q[(b * HQ + h) * D + c] * kf[j * row + g * D + c];
        w[j] = s / sqrt((double)D);
        mx = fmax(mx, w[j]);
      }
      for (size_t j = 0; j < n; j++) sum += (w[j] = exp(w[j] - mx));
      for (size_t c = 0; c < D; c++) {
        double acc = 0.0;
        for (size_t j = 0; j < n; j++) acc += w[j] * vf[j * row + g * D + c];
        const double e = fabs(acc / sum - o[(b * HQ + h) * D + c]);
        err = (e > err || isnan(e)) ? e : err;
      }
    }
  }
  if (st != ATTN_OK) {
    printf("paged_batch_decode: %s\n", attn_status_string(st));
    return 1;
  }
  /* Tolerance: fp32 logits of D = 64 products and weighted sums of up to 1200 values in [0, 1),
   * plus exp's 2^-22 relative error: well under 2e-5. */
  const double tol = 2e-5;
  const int same = memcmp(o, o_alone, sizeof o) == 0, ok = same && err <= tol; /* false for NaN */
  printf("paged_batch_decode: %d sequences, %zu pages of %d tokens, %d workers: max |err| %.1e (tolerance %.0e); "
         "bits vs each sequence alone: %s: %s\n",
         B, next_page, PAGE, WORKERS, err, tol, same ? "same" : "DIFFERENT", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
