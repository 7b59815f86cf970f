/*
 * The library's own thread pool (attn.h, threads) and the one place compute calls hand tasks to
 * a parallel-for (attn_parallel). A pool is threads - 1 background workers plus the thread that
 * calls parallel_for (worker 0). A call publishes its job under the pool's mutex, bumps the
 * generation and wakes the workers; tasks are claimed from an atomic counter, so each runs once;
 * the caller works too, then waits until every worker has left the job. A second mutex makes
 * calls from several threads run one after another.
 * Waiting spins briefly before it sleeps (ATTN_POOL_SPIN polls, a CPU pause each: some tens of
 * microseconds): a worker that has just finished a job watches the generation, the caller the
 * count of busy workers, so a compute call's parallel-fors in quick succession (a chunk scan's
 * phases, a split's ranges then its merge) are not each charged a sleep and a wake-up. A sleeper
 * is woken under the mutex as before, so nothing is missed whichever way a wait ends.
 * attn_pool_pin pins the background workers (Linux's thread affinity); the caller, worker 0,
 * pins itself.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET (attn_pool_pin) */
#endif
#include <pthread.h>
#if defined(__linux__)
#include <sched.h>
#endif
#include <stdatomic.h>
#include <stdlib.h>

#include "core/internal.h"

#define ATTN_POOL_SPIN 2000

struct attn_pool {
  pthread_mutex_t call; /* one parallel_for at a time */
  pthread_mutex_t m;
  pthread_cond_t wake, done;
  size_t threads, started;
  pthread_t *tid;
  /* the job (written under m before the generation moves) */
  attn_task_fn fn;
  void *ctx;
  size_t tasks;
  atomic_size_t next;
  atomic_size_t busy; /* background workers still in the job */
  atomic_ulong gen;   /* the job's generation: written under m, read while spinning */
  atomic_int stop;
};

typedef struct pool_worker_arg {
  attn_pool *pool;
  size_t index;
} pool_worker_arg;

static void pool_drain(attn_pool *p, size_t worker) {
  for (size_t i; (i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->tasks;)
    p->fn(p->ctx, i, worker);
}

static void *pool_main(void *arg) {
  pool_worker_arg *a = arg;
  attn_pool *p = a->pool;
  const size_t index = a->index;
  free(a);
  unsigned long seen = 0;
  for (;;) {
    for (int i = 0; i < ATTN_POOL_SPIN && atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
                    !atomic_load_explicit(&p->stop, memory_order_relaxed);
         i++)
      attn_cpu_relax();
    pthread_mutex_lock(&p->m);
    while (atomic_load_explicit(&p->gen, memory_order_relaxed) == seen && !atomic_load(&p->stop))
      pthread_cond_wait(&p->wake, &p->m);
    pthread_mutex_unlock(&p->m);
    if (atomic_load(&p->stop)) break;
    seen = atomic_load_explicit(&p->gen, memory_order_acquire);
    pool_drain(p, index);
    if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) { /* the last one out */
      pthread_mutex_lock(&p->m);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->m);
    }
  }
  return NULL;
}

static void pool_parallel_for(void *pool, attn_task_fn fn, void *context, size_t tasks) {
  attn_pool *p = pool;
  if (p->threads == 1 || tasks <= 1) {
    for (size_t i = 0; i < tasks; i++) fn(context, i, 0);
    return;
  }
  pthread_mutex_lock(&p->call);
  pthread_mutex_lock(&p->m);
  p->fn = fn, p->ctx = context, p->tasks = tasks;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->busy, p->threads - 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release); /* publishes the job */
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->m);
  pool_drain(p, 0);
  for (int i = 0; i < ATTN_POOL_SPIN && atomic_load_explicit(&p->busy, memory_order_acquire); i++) attn_cpu_relax();
  pthread_mutex_lock(&p->m);
  while (atomic_load_explicit(&p->busy, memory_order_acquire)) pthread_cond_wait(&p->done, &p->m);
  pthread_mutex_unlock(&p->m);
  pthread_mutex_unlock(&p->call);
}

static void pool_stop(attn_pool *p) {
  pthread_mutex_lock(&p->m);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->m);
  for (size_t i = 0; i < p->started; i++) pthread_join(p->tid[i], NULL);
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->m);
  pthread_mutex_destroy(&p->call);
  free(p->tid);
  free(p);
}

attn_status attn_pool_create(size_t threads, attn_pool **pool) {
  if (!pool) return attn_fail(ATTN_E_NULL_POINTER, "pool is NULL");
  if (!threads) return attn_fail(ATTN_E_ZERO_SIZE, "threads is 0");
  if (threads > ATTN_MAX_WORKERS)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "threads %zu > ATTN_MAX_WORKERS %d", threads, ATTN_MAX_WORKERS);
  attn_pool *p = calloc(1, sizeof *p);
  if (!p) return attn_fail(ATTN_E_SYSTEM, "no memory for the pool");
  p->threads = threads;
  p->tid = calloc(threads, sizeof *p->tid);
  if (!p->tid || pthread_mutex_init(&p->call, NULL)) {
    free(p->tid);
    free(p);
    return attn_fail(ATTN_E_SYSTEM, "no memory or mutex for the pool");
  }
  pthread_mutex_init(&p->m, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->next, 0);
  atomic_init(&p->busy, 0);
  atomic_init(&p->gen, 0);
  atomic_init(&p->stop, 0);
  for (size_t i = 1; i < threads; i++) {
    pool_worker_arg *a = malloc(sizeof *a);
    if (!a) break;
    a->pool = p, a->index = i;
    if (pthread_create(&p->tid[p->started], NULL, pool_main, a)) {
      free(a);
      break;
    }
    p->started++;
  }
  if (p->started != threads - 1) {
    const size_t started = p->started;
    pool_stop(p);
    return attn_fail(ATTN_E_SYSTEM, "the system gave %zu of the pool's %zu threads", started + 1, threads);
  }
  *pool = p;
  return ATTN_OK;
}

void attn_pool_destroy(attn_pool *pool) {
  if (pool) pool_stop(pool);
}

attn_status attn_pool_threads(attn_pool *pool, attn_threads *threads) {
  if (!pool || !threads) return attn_fail_null("pool threads", (const void *[]){pool, threads});
  *threads = (attn_threads){pool_parallel_for, pool, pool->threads};
  return ATTN_OK;
}

attn_status attn_pool_pin(attn_pool *pool, const int *cpus, size_t count) {
  if (!pool || !cpus) return attn_fail_null("pool cpus", (const void *[]){pool, cpus});
  if (!count) return attn_fail(ATTN_E_ZERO_SIZE, "count is 0");
#if defined(__linux__)
  for (size_t i = 0; i < count; i++)
    if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
      return attn_fail(ATTN_E_BAD_ARGUMENT, "cpus[%zu] = %d: not 0 .. %d", i, cpus[i], CPU_SETSIZE - 1);
  for (size_t w = 1; w < pool->threads; w++) { /* worker w is thread tid[w - 1] */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[(w - 1) % count], &set);
    if (pthread_setaffinity_np(pool->tid[w - 1], sizeof set, &set))
      return attn_fail(ATTN_E_SYSTEM, "the system refused CPU %d for worker %zu", cpus[(w - 1) % count], w);
  }
  return ATTN_OK;
#else
  for (size_t i = 0; i < count; i++)
    if (cpus[i] < 0) return attn_fail(ATTN_E_BAD_ARGUMENT, "cpus[%zu] = %d: negative", i, cpus[i]);
  return attn_fail(ATTN_E_SYSTEM, "no thread affinity on this system");
#endif
}

size_t attn_workers(const attn_threads *th) { return th ? th->workers : 1; }

void attn_parallel(const attn_threads *th, size_t tasks, attn_task_fn fn, void *ctx) {
  if (!th || th->workers == 1 || tasks <= 1) {
    for (size_t i = 0; i < tasks; i++) fn(ctx, i, 0);
    return;
  }
  th->parallel_for(th->pool, fn, ctx, tasks);
}
