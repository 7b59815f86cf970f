/*
 * Multi-threaded calls (attn.h, threads), on the path ATTN_ISA forces: every compute call gives
 * bit for bit the same outputs (o, LSE, statistics, states, F) with threads as without, whatever
 * the number of workers and whoever runs which task:
 *   - the library's pool with 1, 2, 3 and 8 workers;
 *   - "shuffle": a parallel-for on the calling thread that runs the tasks in a scrambled order,
 *     each as a different worker of 5, so that a result depending on task order, on which worker's
 *     scratch a task used or on a scratch left over from another task would differ;
 *   - "spawn": a parallel-for that starts one pthread per worker for each call (another engine's
 *     pool: tasks claimed from an atomic counter);
 *   - "backward": the same threads, each running a fixed share of the tasks (w, w + 4, ...) from
 *     its last to its first, at the same time as the others: a task may run before, during or after
 *     any task it depends on (the chunk scan's waves: a group whose task has not started is
 *     computed by the task that needs it, never waited for).
 * The calls: softmax prefill (causal GQA with LSE, full, window) and short calls whose keys are
 * split into ranges (decode over 9000 keys, 3 tokens over 20000, a window), softmax and GAU
 * statistics, GAU with a table, linear attention (causal with a state, bidirectional, windowed,
 * gated; the chunk scan of causal prefill, per head and in waves, with maps with offsets, and
 * FLASH's exclusive form's),
 * selective attention (prefill, a chunk, statistics and the cache's step: each query block's keys
 * in ranges run in parallel) and the pool's own statuses. Run under
 * ThreadSanitizer by `scripts/test-all.sh tsan` (suite threads).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getcpu, sched_getaffinity (pool_pin) */
#endif
#include <pthread.h>
#if defined(__linux__)
#include <sched.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_ref.h"
#include "test_util.h"

/* ---- thread providers ---- */
enum { PROVIDERS = 7 };
static const char *const provider_names[PROVIDERS] = {"pool1",   "pool2", "pool3",   "pool8",
                                                      "shuffle", "spawn", "backward"};

static void shuffle_for(void *pool, attn_task_fn fn, void *ctx, size_t tasks) {
  (void)pool;
  /* a permutation: i -> (i * 7 + 3) mod tasks when 7 is prime to tasks, else reversed */
  const int coprime = tasks % 7 != 0;
  for (size_t k = 0; k < tasks; k++) {
    const size_t i = coprime ? (k * 7 + 3) % tasks : tasks - 1 - k;
    fn(ctx, i, (k * 3 + 1) % 5);
  }
}

typedef struct spawn_job {
  attn_task_fn fn;
  void *ctx;
  size_t tasks;
  atomic_size_t next;
  int backward; /* each worker its own share, last task first */
} spawn_job;
typedef struct spawn_arg {
  spawn_job *job;
  size_t worker;
} spawn_arg;

enum { SPAWN_WORKERS = 4 };
static void *spawn_main(void *a) {
  const spawn_arg *s = a;
  const spawn_job *j = s->job;
  if (j->backward) {
    for (size_t k = (j->tasks + SPAWN_WORKERS - 1 - s->worker) / SPAWN_WORKERS; k-- > 0;)
      j->fn(j->ctx, s->worker + k * SPAWN_WORKERS, s->worker);
    return NULL;
  }
  for (size_t i; (i = atomic_fetch_add(&s->job->next, 1)) < j->tasks;) j->fn(j->ctx, i, s->worker);
  return NULL;
}

static void spawn_run(attn_task_fn fn, void *ctx, size_t tasks, int backward) {
  spawn_job job = {fn, ctx, tasks, 0, backward};
  pthread_t th[SPAWN_WORKERS];
  spawn_arg args[SPAWN_WORKERS];
  for (size_t w = 0; w < SPAWN_WORKERS; w++) {
    args[w] = (spawn_arg){&job, w};
    ck_assert_int_eq(pthread_create(&th[w], NULL, spawn_main, &args[w]), 0);
  }
  for (size_t w = 0; w < SPAWN_WORKERS; w++) ck_assert_int_eq(pthread_join(th[w], NULL), 0);
}
static void spawn_for(void *pool, attn_task_fn fn, void *ctx, size_t tasks) {
  (void)pool;
  spawn_run(fn, ctx, tasks, 0);
}
static void backward_for(void *pool, attn_task_fn fn, void *ctx, size_t tasks) {
  (void)pool;
  spawn_run(fn, ctx, tasks, 1);
}

typedef struct provider {
  attn_threads th;
  attn_pool *pool;
} provider;

static void provider_make(provider *p, int which) {
  static const size_t pool_threads[] = {1, 2, 3, 8};
  p->pool = NULL;
  if (which < 4) {
    ck_assert_int_eq(attn_pool_create(pool_threads[which], &p->pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(p->pool, &p->th), ATTN_OK);
    ck_assert_uint_eq(p->th.workers, pool_threads[which]);
  } else if (which == 4) {
    p->th = (attn_threads){shuffle_for, NULL, 5};
  } else {
    p->th = (attn_threads){which == 5 ? spawn_for : backward_for, NULL, SPAWN_WORKERS};
  }
}

static void provider_free(provider *p) { attn_pool_destroy(p->pool); }

/* ---- one call's outputs, compared byte for byte ---- */
enum { MAX_OUT = 6 };
typedef struct outs {
  float *buf[MAX_OUT];
  size_t floats[MAX_OUT];
  size_t n;
} outs;

static float *outs_add(outs *o, size_t floats) {
  ck_assert_int_lt(o->n, MAX_OUT);
  float *b = malloc(floats * sizeof(float));
  ck_assert_ptr_nonnull(b);
  for (size_t i = 0; i < floats; i++) b[i] = -12345.0f;
  o->buf[o->n] = b, o->floats[o->n++] = floats;
  return b;
}

static void outs_free(outs *o) {
  for (size_t i = 0; i < o->n; i++) free(o->buf[i]);
  o->n = 0;
}

static void outs_assert_same(const char *call, const char *prov, const outs *a, const outs *b) {
  ck_assert_uint_eq(a->n, b->n);
  for (size_t i = 0; i < a->n; i++)
    for (size_t e = 0; memcmp(a->buf[i], b->buf[i], a->floats[i] * sizeof(float)) && e < a->floats[i]; e++)
      ck_assert_msg(memcmp(&a->buf[i][e], &b->buf[i][e], sizeof(float)) == 0,
                    "%s with %s: output %zu element %zu differs: %.9g threaded, %.9g alone", call, prov, i, e,
                    (double)b->buf[i][e], (double)a->buf[i][e]);
}

/* ---- the calls ---- */
typedef enum call_kind {
  C_SOFTMAX,
  C_SM_OPTS,
  C_SM_STATS,
  C_GAU,
  C_GAU_STATS,
  C_LINEAR,
  C_GATED,
  C_GATED_FEAT,
  C_GATED_SHARED, /* Mamba-2's layer: q and k head 0 read by every value head, a scalar gate */
  C_SELECTIVE,
  C_SEL_STATS,
  C_SELCACHE /* n_kv - 1 tokens loaded into a selective cache, then a step with the last one */
} call_kind;

typedef struct pcase {
  const char *name;
  call_kind kind;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;
  attn_feature_map map; /* linear */
  int state;            /* linear: keep a state (with a prefix absorbed first) */
  attn_dtype kv;        /* softmax, GAU: K and V's element type (F32: 0) */
  size_t xg;            /* linear: FLASH's exclusive_chunk (0: none) */
  int jumps;            /* linear: keys [n_kv / 2, n_kv / 2 + 7) scaled by 300 (offsets leap) */
} pcase;

#define FULL \
  { ATTN_UNBOUNDED, ATTN_UNBOUNDED, 0 }
#define CAUSAL \
  { ATTN_UNBOUNDED, 0, 0 }
static const pcase pcases[] = {
    {"softmax prefill causal gqa", C_SOFTMAX, 301, 301, 4, 2, 24, 20, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax prefill full", C_SOFTMAX, 130, 200, 2, 2, 16, 16, FULL, 0, 0, ATTN_F32, 0, 0},
    {"softmax prefill window", C_SOFTMAX, 257, 257, 3, 1, 8, 8, {40, 3, 0}, 0, 0, ATTN_F32, 0, 0},
    {"softmax decode split", C_SOFTMAX, 1, 9000, 8, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax 3 tokens split", C_SOFTMAX, 3, 20000, 2, 1, 8, 8, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax decode window split", C_SOFTMAX, 1, 12000, 4, 4, 8, 8, {6000, 0, 0}, 0, 0, ATTN_F32, 0, 0},
    {"softmax options prefill", C_SM_OPTS, 150, 150, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax options decode split", C_SM_OPTS, 1, 9000, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax decode split fp16", C_SOFTMAX, 1, 9000, 8, 2, 16, 16, CAUSAL, 0, 0, ATTN_F16, 0, 0},
    /* 16 heads advancing together in a decode step (15 per group with a block's rows on the
     * AVX-512 path), their key ranges' states stored per group and folded */
    {"softmax decode split 16 heads", C_SOFTMAX, 1, 4500, 16, 16, 32, 32, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    /* a decode over a short cache (no key ranges): its heads in groups, one per worker up to
     * one per key head; the same bits as all heads in one group; 3 tokens (a speculative block) */
    {"softmax decode short 8 heads", C_SOFTMAX, 1, 1000, 8, 8, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax decode short gqa fp16", C_SOFTMAX, 1, 700, 12, 3, 16, 16, CAUSAL, 0, 0, ATTN_F16, 0, 0},
    {"softmax 3 tokens short", C_SOFTMAX, 3, 1500, 6, 6, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"gau decode short", C_GAU, 1, 900, 4, 4, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax prefill bf16", C_SOFTMAX, 200, 200, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_BF16, 0, 0},
    {"gau decode split fp16", C_GAU, 1, 9000, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F16, 0, 0},
    {"softmax stats prefill", C_SM_STATS, 150, 150, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"softmax stats decode split", C_SM_STATS, 2, 9000, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"gau prefill table", C_GAU, 200, 200, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"gau decode split", C_GAU, 1, 9000, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"gau stats decode split", C_GAU_STATS, 1, 9000, 2, 1, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"linear causal state", C_LINEAR, 200, 200, 6, 3, 16, 12, CAUSAL, ATTN_FEATURE_ELU1, 1, ATTN_F32, 0, 0},
    {"linear full", C_LINEAR, 100, 150, 4, 4, 16, 16, FULL, ATTN_FEATURE_IDENTITY, 0, ATTN_F32, 0, 0},
    {"linear window exp", C_LINEAR, 180, 180, 2, 2, 8, 8, {31, 0, 0}, ATTN_FEATURE_EXP, 0, ATTN_F32, 0, 0},
    {"linear gated", C_GATED, 200, 200, 4, 4, 16, 16, CAUSAL, ATTN_FEATURE_IDENTITY, 1, ATTN_F32, 0, 0},
    /* the chunk scan: one state head (its chunks in waves), three (waves on 2 and 8 workers, per
     * head on 3), bottom-right with keys before the first query, a last chunk of one token */
    {"linear scan one head", C_LINEAR, 700, 700, 1, 1, 16, 12, CAUSAL, ATTN_FEATURE_ELU1, 1, ATTN_F32, 0, 0},
    {"linear scan keys first", C_LINEAR, 321, 450, 2, 1, 8, 8, CAUSAL, ATTN_FEATURE_RELU, 0, ATTN_F32, 0, 0},
    {"linear scan gated one head", C_GATED, 577, 577, 1, 1, 16, 16, CAUSAL, ATTN_FEATURE_IDENTITY, 1, ATTN_F32, 0, 0},
    /* heads in groups per worker, each group's run of heads sharing a chunk's intra scores */
    {"linear scan gated shared q k", C_GATED_SHARED, 450, 450, 5, 5, 16, 12, CAUSAL, ATTN_FEATURE_IDENTITY, 1, ATTN_F32,
     0, 0},
    {"linear scan feature gates beta", C_GATED_FEAT, 500, 500, 3, 3, 16, 16, CAUSAL, ATTN_FEATURE_ELU1, 1, ATTN_F32, 0,
     0},
    /* maps with offsets: each chunk's outputs from the state before it (raised in place, or a
     * copy where the guard cuts the chunk), the states merged at their larger offsets; with keys
     * whose features leap by ~100 mid-sequence (chunks cut, rows emptied by the merge's raise) */
    {"linear scan exp one head", C_LINEAR, 700, 700, 1, 1, 16, 12, CAUSAL, ATTN_FEATURE_EXP, 1, ATTN_F32, 0, 0},
    {"linear scan exp jumps", C_LINEAR, 700, 700, 1, 1, 16, 12, CAUSAL, ATTN_FEATURE_EXP, 1, ATTN_F32, 0, 1},
    {"linear scan dsoftmax jumps heads", C_LINEAR, 500, 500, 3, 3, 8, 8, CAUSAL, ATTN_FEATURE_DSOFTMAX, 0, ATTN_F32, 0,
     1},
    {"linear scan favor heads", C_LINEAR, 300, 300, 3, 3, 8, 8, CAUSAL, ATTN_FEATURE_FAVOR, 0, ATTN_F32, 0, 0},
    {"linear scan dsoftmax keys first", C_LINEAR, 321, 450, 2, 1, 8, 8, CAUSAL, ATTN_FEATURE_DSOFTMAX, 0, ATTN_F32, 0,
     0},
    /* FLASH's exclusive form, its rounds as a scan: one head (waves), rounds of more than one
     * engine chunk, with a state (two calls); three heads with keys first and a short last round */
    {"linear flash one head", C_LINEAR, 700, 700, 1, 1, 16, 12, CAUSAL, ATTN_FEATURE_IDENTITY, 1, ATTN_F32, 100, 0},
    {"linear flash heads keys first", C_LINEAR, 321, 470, 3, 3, 8, 8, CAUSAL, ATTN_FEATURE_RELU, 0, ATTN_F32, 45, 0},
    {"selective prefill", C_SELECTIVE, 200, 200, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    /* selection: each query block's keys in ranges run in parallel (2 .. 3 ranges at the end; 4
     * for the cache's step over 9000 slots), two or three head groups at d = 128 on SIMD paths */
    {"selective prefill ranges", C_SELECTIVE, 800, 800, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"selective chunk ranges groups", C_SELECTIVE, 100, 700, 6, 6, 128, 128, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"selective stats ranges", C_SEL_STATS, 600, 600, 2, 1, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
    {"selective cache step ranges", C_SELCACHE, 9000, 9000, 4, 2, 16, 16, CAUSAL, 0, 0, ATTN_F32, 0, 0},
};
enum { NPCASES = sizeof pcases / sizeof pcases[0] };

/* Inputs of a case (shared read-only by every run). */
typedef struct pinputs {
  tu_qkv x;
  float *gates, *beta, *bias_table, *f_init; /* gates: [n_kv][H] scalar or [n_kv][H][d] per feature */
  uint16_t *kh, *vh;                         /* K and V in 16 bits (pcase.kv), or NULL */
} pinputs;

static void inputs_make(const pcase *c, pinputs *in, size_t idx) {
  tu_rng rng = tu_rng_of(4242 + idx);
  tu_qkv_make(&in->x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  for (size_t j = c->n_kv / 2; c->jumps && j < c->n_kv / 2 + 7; j++) /* token-major rows */
    for (size_t e = 0; e < c->h_kv * c->d; e++) in->x.k.data[j * c->h_kv * c->d + e] *= 300.0f;
  if (c->jumps) tu_qkv_snapshot(&in->x);
  const size_t H = c->h_q;
  in->gates = malloc(sizeof(float) * c->n_kv * H * c->d); /* per-feature gates at most */
  in->beta = malloc(sizeof(float) * c->n_kv * H);
  in->bias_table = malloc(sizeof(float) * 64);
  in->f_init = malloc(sizeof(float) * c->n_kv);
  ck_assert(in->gates && in->beta && in->bias_table && in->f_init);
  for (size_t i = 0; i < c->n_kv * H * c->d; i++) in->gates[i] = tu_rng_range(&rng, -0.2f, -0.001f);
  for (size_t i = 0; i < c->n_kv * H; i++) in->beta[i] = tu_rng_range(&rng, 0.5f, 1.5f);
  for (size_t i = 0; i < 64; i++) in->bias_table[i] = tu_rng_range(&rng, -0.5f, 0.5f);
  /* F of the keys before the call (a chunk, the cache's tokens): sums of relu'd scores */
  const size_t carried = c->kind == C_SELCACHE ? c->n_kv : c->n_kv - c->n_q;
  for (size_t i = 0; i < c->n_kv; i++) in->f_init[i] = i < carried && i ? tu_rng_range(&rng, 0.0f, 2.0f) : 0.0f;
  in->kh = in->vh = NULL;
  if (c->kv != ATTN_F32) { /* token-major contiguous: the same strides in elements */
    const size_t nk = c->n_kv * c->h_kv * c->d, nv = c->n_kv * c->h_kv * c->dv;
    in->kh = malloc(nk * sizeof(uint16_t));
    in->vh = malloc(nv * sizeof(uint16_t));
    ck_assert(in->kh && in->vh);
    for (size_t i = 0; i < nk; i++)
      in->kh[i] = c->kv == ATTN_F16 ? hr_f16_bits(in->x.k.data[i]) : hr_bf16_bits(in->x.k.data[i]);
    for (size_t i = 0; i < nv; i++)
      in->vh[i] = c->kv == ATTN_F16 ? hr_f16_bits(in->x.v.data[i]) : hr_bf16_bits(in->x.v.data[i]);
  }
}

static void inputs_free(pinputs *in) {
  tu_qkv_free(&in->x);
  tu_free_all((void *[]){in->gates, in->beta, in->bias_table, in->f_init, in->kh, in->vh}, 6);
}

/* The blocked engine's calls of a case: its mask and K/V type, on the threads th. */
static void blocked_case(attn_shape *shape, attn_mask *mask, const pcase *c, const attn_threads *th) {
  *mask = c->mask, shape->threads = th, shape->kv_type = c->kv;
}

static attn_row_stats stats_of(outs *o, size_t rows, size_t h) {
  attn_row_stats st;
  float *e = outs_add(o, rows), *sp = outs_add(o, rows), *n = outs_add(o, rows);
  ck_assert_int_eq(attn_row_stats_init(&st, h, e, sp, n), ATTN_OK);
  return st;
}

/* Run case c with threads th (NULL: none) into fresh outputs; also checks that a workspace one
 * byte short is refused and that the threaded workspace is at least the plain one. */
static void run_case(const pcase *c, const pinputs *in, const attn_threads *th, outs *o) {
  const tu_qkv *x = &in->x;
  const float *q = x->q.data;
  const void *k = in->kh ? (const void *)in->kh : x->k.data, *v = in->vh ? (const void *)in->vh : x->v.data;
  const size_t rows = c->n_q * c->h_q;
  float *out = outs_add(o, rows * c->dv);
  size_t ws = 0;
  void *w = NULL;
  attn_status st = ATTN_OK;
  switch (c->kind) {
    case C_SOFTMAX:
    case C_SM_OPTS:
    case C_SM_STATS: {
      attn_softmax_desc d;
      ck_assert_int_eq(attn_softmax_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
      blocked_case(&d.shape, &d.mask, c, th);
      if (c->kind == C_SM_OPTS) { /* every option (their arrays: the inputs' spare floats) */
        d.sinks = in->bias_table, d.alibi_slopes = in->bias_table + 8, d.softcap = 3.0f;
        d.bias = in->gates, d.bias_layout = (attn_layout){0, c->n_kv}; /* [h][n_kv], every query */
      }
      float *lse = outs_add(o, rows);
      TU_CALL_WS(attn_softmax, &d, &ws);
      w = tu_alloc(ws, 0);
      if (c->kind != C_SM_STATS) {
        ck_assert_int_eq(attn_softmax(&d, q, k, v, out, lse, w, ws - 1), ATTN_E_WORKSPACE_TOO_SMALL);
        st = attn_softmax(&d, q, k, v, out, lse, w, ws);
      } else {
        const attn_row_stats s = stats_of(o, rows, c->h_q);
        st = attn_softmax_stats(&d, q, k, v, out, lse, &s, w, ws);
      }
      break;
    }
    case C_GAU:
    case C_GAU_STATS: {
      attn_gau_desc d;
      ck_assert_int_eq(attn_gau_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
      blocked_case(&d.shape, &d.mask, c, th);
      if (c->kind == C_GAU) d.bias = ATTN_GAU_BIAS_CAUSAL, d.bias_table = in->bias_table, d.bias_len = 64;
      d.normalize = c->kind == C_GAU_STATS;
      TU_CALL_WS(attn_gau, &d, &ws);
      w = tu_alloc(ws, 0);
      if (c->kind == C_GAU) {
        st = attn_gau(&d, q, k, v, out, w, ws);
      } else {
        const attn_row_stats s = stats_of(o, rows, c->h_q);
        st = attn_gau_stats(&d, q, k, v, out, &s, w, ws);
      }
      break;
    }
    case C_LINEAR:
    case C_GATED:
    case C_GATED_FEAT:
    case C_GATED_SHARED: {
      attn_linear_desc d;
      ck_assert_int_eq(attn_linear_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->map), ATTN_OK);
      if (c->kind == C_GATED_SHARED) { /* the tensors' q and k head 0, h_kv value and output heads */
        const attn_layout ql = d.shape.q, kl = d.shape.k;
        ck_assert_int_eq(attn_shape_init(&d.shape, c->n_q, c->n_kv, 1, 1, c->h_kv, c->d, c->dv), ATTN_OK);
        d.shape.q = ql, d.shape.k = kl, d.shape.o = (attn_layout){c->h_kv * c->dv, c->dv};
        d.gate = ATTN_GATE_SCALAR, d.normalize = 0, d.gate_layout = (attn_layout){c->h_kv, 1};
      }
      d.mask = c->mask;
      d.shape.threads = th;
      d.exclusive_chunk = c->xg;
      if (c->kind == C_GATED) d.gate = ATTN_GATE_SCALAR, d.normalize = 0;
      if (c->kind == C_GATED_FEAT) {
        d.gate = ATTN_GATE_FEATURE, d.beta = 1;
        d.gate_layout = (attn_layout){c->h_q * c->d, c->d};
      }
      attn_linear_state state, *sp = NULL;
      size_t sb = 0;
      float *smem = NULL;
      if (c->state) {
        ck_assert_int_eq(attn_linear_state_size(&d, &sb), ATTN_OK);
        smem = outs_add(o, sb / sizeof(float));
        ck_assert_int_eq(attn_linear_state_init(&state, &d, smem, sb), ATTN_OK);
        sp = &state;
      }
      ck_assert_int_eq(attn_linear_workspace_size(&d, &ws), ATTN_OK);
      w = tu_alloc(ws, 0);
      for (int pass = 0; pass < (c->state ? 2 : 1); pass++) /* with a state: two calls, continuing */
        st = c->kind == C_LINEAR ? attn_linear(&d, q, k, v, out, sp, w, ws)
                                 : attn_linear_gated(&d, q, k, v, in->gates, d.beta ? in->beta : NULL, out, sp, w, ws);
      break;
    }
    case C_SELECTIVE:
    case C_SEL_STATS: {
      attn_selective_desc d;
      ck_assert_int_eq(attn_selective_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
      d.shape.threads = th;
      d.h_sel = c->h_q > 4 ? 5 : 1; /* 6 heads: in the last head group */
      float *lse = outs_add(o, rows), *f = outs_add(o, c->n_kv);
      memcpy(f, in->f_init, c->n_kv * sizeof(float));
      TU_CALL_WS(attn_selective, &d, &ws);
      w = tu_alloc(ws, 0);
      if (c->kind == C_SELECTIVE) {
        st = attn_selective(&d, q, k, v, out, lse, f, w, ws);
      } else {
        const attn_row_stats sts = stats_of(o, rows, c->h_q);
        st = attn_selective_stats(&d, q, k, v, out, lse, f, &sts, w, ws);
      }
      break;
    }
    case C_SELCACHE: {
      attn_selective_desc dl, d1;
      const size_t n = c->n_kv - 1, qs = x->q.l.row_stride, ks = x->k.l.row_stride, vs = x->v.l.row_stride;
      ck_assert_int_eq(attn_selective_desc_init(&dl, n, n, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
      ck_assert_int_eq(attn_selective_desc_init(&d1, 1, 1, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
      d1.shape.threads = th;
      dl.h_sel = d1.h_sel = 1;
      attn_selcache cache;
      size_t mem;
      ck_assert_int_eq(attn_selcache_size(c->n_kv, c->h_kv, c->d, c->dv, &mem), ATTN_OK);
      float *cm = outs_add(o, mem / sizeof(float)), *lse = outs_add(o, c->h_q);
      ck_assert_int_eq(attn_selcache_init(&cache, c->n_kv, c->h_kv, c->d, c->dv, INFINITY, 0, cm, mem), ATTN_OK);
      ck_assert_int_eq(attn_selcache_load(&cache, &dl, x->k.data, x->v.data, in->f_init), ATTN_OK);
      ck_assert_int_eq(attn_selcache_workspace_size(&d1, &cache, &ws), ATTN_OK);
      w = tu_alloc(ws, 0);
      st = attn_selcache_step(&d1, &cache, q + n * qs, x->k.data + n * ks, x->v.data + n * vs, out, lse, w, ws);
      break;
    }
  }
  ck_assert_int_eq(st, ATTN_OK);
  tu_assert_guards("parallel workspace", w);
  tu_free(w);
  tu_qkv_assert_unchanged(x);
}

START_TEST(parallel_bit_identical) {
  const pcase *c = &pcases[_i];
  pinputs in;
  inputs_make(c, &in, (size_t)_i);
  outs alone = {0};
  run_case(c, &in, NULL, &alone);
  for (int pv = 0; pv < PROVIDERS; pv++) {
    /* under qemu (ATTN_TEST_SCALE=small): 3 workers, 8, and the shuffled order; every provider
     * runs natively, in the emulation build and under the sanitizers */
    if (tu_small() && pv != 2 && pv != 3 && pv != 4) continue;
    provider p;
    provider_make(&p, pv);
    outs got = {0};
    run_case(c, &in, &p.th, &got);
    outs_assert_same(c->name, provider_names[pv], &alone, &got);
    outs_free(&got);
    provider_free(&p);
  }
  outs_free(&alone);
  inputs_free(&in);
}
END_TEST

/* The workspace grows with the workers and does not depend on n_q or n_kv; a decode's own is small. */
START_TEST(parallel_workspace_sizes) {
  attn_softmax_desc d;
  size_t one, two, eight, other;
  ck_assert_int_eq(attn_softmax_desc_init(&d, 1, 100, 8, 2, 64, 64), ATTN_OK);
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &one), ATTN_OK);
  attn_threads th = {shuffle_for, NULL, 2};
  d.shape.threads = &th;
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &two), ATTN_OK);
  th.workers = 8;
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &eight), ATTN_OK);
  ck_assert_uint_gt(two, one);
  ck_assert_uint_gt(eight, two);
  d.shape.n_q = 5000, d.shape.n_kv = 100000;
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &other), ATTN_OK);
  ck_assert_uint_eq(other, eight);
  /* many heads: a call shorter than a query block groups more of them (engine/blocked/), in the same
   * workspace, on every path */
  static const size_t shapes[][3] = {{24, 24, 128}, {48, 12, 64}, {40, 40, 128}, {300, 300, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int threaded = 0; threaded < 2; threaded++) {
      size_t first = 0, bytes = 0;
      for (size_t n_q = 1; n_q <= 5000; n_q = n_q < 8 ? n_q + 1 : n_q * 5) {
        ck_assert_int_eq(attn_softmax_desc_init(&d, n_q, 6000, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][2]),
                         ATTN_OK);
        d.shape.threads = threaded ? &th : NULL;
        ck_assert_int_eq(attn_softmax_workspace_size(&d, &bytes), ATTN_OK);
        if (n_q == 1) first = bytes;
        ck_assert_msg(bytes == first, "shape %zu threads %d: n_q %zu needs %zu bytes, n_q 1 %zu", i, threaded, n_q,
                      bytes, first);
      }
    }
  /* A decode step's own workspace (attn_softmax_call_workspace_size) holds its rows, not a
   * prefill's: at d = dv = 128, 8 heads of 8, over 1k and 32k keys, within the bounds attn.h's
   * figures (33 - 662 KiB on AVX-512) leave room for every path's blocks; and a decode runs in it. */
  static const size_t workers[3] = {1, 2, 8}, bound_kib[3] = {96, 512, 1024};
  for (size_t w = 0; w < 3; w++)
    for (size_t n_kv = 1024; n_kv <= 32768; n_kv *= 32) {
      ck_assert_int_eq(attn_softmax_desc_init(&d, 1, n_kv, 8, 8, 128, 128), ATTN_OK);
      th.workers = workers[w];
      d.shape.threads = w ? &th : NULL;
      size_t any = 0, own = 0;
      ck_assert_int_eq(attn_softmax_workspace_size(&d, &any), ATTN_OK);
      ck_assert_int_eq(attn_softmax_call_workspace_size(&d, &own), ATTN_OK);
      ck_assert_msg(own <= bound_kib[w] << 10 && own <= any / 8, "%zu workers, %zu keys: %zu bytes (any n_q: %zu)",
                    workers[w], n_kv, own, any);
    }
}
END_TEST

/* Bad threads: a clear status, outputs untouched. */
START_TEST(parallel_rejects_bad_threads) {
  tu_rng rng = tu_rng_of(9);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, 10, 10, 2, 1, 1, 8, 8);
  float o[10 * 2 * 8], ws[4096];
  const attn_threads bad[] = {{NULL, NULL, 2}, {shuffle_for, NULL, 0}, {shuffle_for, NULL, ATTN_MAX_WORKERS + 1}};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    attn_softmax_desc d;
    attn_linear_desc l;
    size_t bytes = 0;
    ck_assert_int_eq(attn_softmax_desc_init(&d, 10, 10, 2, 1, 8, 8), ATTN_OK);
    ck_assert_int_eq(attn_linear_desc_init(&l, 10, 10, 2, 1, 8, 8, ATTN_FEATURE_ELU1), ATTN_OK);
    d.shape.threads = &bad[b];
    l.shape.threads = &bad[b];
    for (size_t e = 0; e < sizeof o / sizeof o[0]; e++) o[e] = 7.0f;
    ck_assert_int_eq(attn_softmax_workspace_size(&d, &bytes), ATTN_E_BAD_ARGUMENT);
    ck_assert_int_eq(attn_softmax(&d, x.q.data, x.k.data, x.v.data, o, NULL, ws, sizeof ws), ATTN_E_BAD_ARGUMENT);
    ck_assert_int_eq(attn_linear(&l, x.q.data, x.k.data, x.v.data, o, NULL, ws, sizeof ws), ATTN_E_BAD_ARGUMENT);
    for (size_t e = 0; e < sizeof o / sizeof o[0]; e++) ck_assert_float_eq(o[e], 7.0f);
  }
  tu_qkv_free(&x);
}
END_TEST

/* Bad gates with threads: the check reads the gates in slices on the call's workers (16384
 * elements each), so a gate tensor of several slices, packed and strided (each row followed by
 * NaN padding the check must not read), has one bad value put in turn at its first element, in a
 * middle slice and at its last element (a log gate: +0.5, NaN, -inf; a beta: 0, NaN): every
 * provider answers ATTN_E_BAD_GATE with o untouched, and the good tensors ATTN_OK. */
START_TEST(parallel_rejects_bad_gates) {
  enum { N = 300, H = 2, D = 64, PAD = 5 };
  tu_rng rng = tu_rng_of(17);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, N, N, H, H, H, D, D);
  static float gates[N * (H * D + PAD)], beta[N * H], o[N * H * D];
  for (int strided = 0; strided < 2; strided++) {
    const size_t grs = H * D + (strided ? PAD : 0);
    for (size_t t = 0; t < N; t++)
      for (size_t e = 0; e < grs; e++) gates[t * grs + e] = e < H * D ? tu_rng_range(&rng, -0.2f, 0.0f) : NAN;
    for (size_t e = 0; e < N * H; e++) beta[e] = tu_rng_range(&rng, 0.5f, 1.0f);
    const size_t last = (N - 1) * grs + H * D - 1, at[] = {0, 20000 / grs * grs + 7, last};
    const float bad_gate[] = {0.5f, NAN, -INFINITY}, bad_beta[] = {0.0f, NAN};
    for (int which = 0; which < PROVIDERS; which++) {
      provider pr;
      provider_make(&pr, which);
      attn_linear_desc d;
      ck_assert_int_eq(attn_linear_desc_init(&d, N, N, H, H, D, D, ATTN_FEATURE_ELU1), ATTN_OK);
      d.gate = ATTN_GATE_FEATURE;
      d.gate_layout = (attn_layout){grs, D};
      d.beta = 1;
      d.shape.threads = &pr.th;
      size_t bytes;
      ck_assert_int_eq(attn_linear_workspace_size(&d, &bytes), ATTN_OK);
      void *ws = malloc(bytes);
      ck_assert_ptr_nonnull(ws);
      for (size_t c = 0; c < 3 * 3 + 3 * 2 + 1; c++) {
        const int on_beta = c >= 9 && c < 15, good = c == 15;
        const size_t i = good ? 0 : on_beta ? (c == 9 || c == 12 ? 0 : c == 10 || c == 13 ? N : N * H - 1) : at[c % 3];
        float *slot = on_beta ? beta + i : gates + i, keep = *slot;
        if (!good) *slot = on_beta ? bad_beta[(c - 9) / 3] : bad_gate[c / 3];
        for (size_t e = 0; e < N * H * D; e++) o[e] = 7.0f;
        const attn_status st = attn_linear_gated(&d, x.q.data, x.k.data, x.v.data, gates, beta, o, NULL, ws, bytes);
        *slot = keep;
        ck_assert_msg(st == (good ? ATTN_OK : ATTN_E_BAD_GATE), "%s, strided %d, case %zu: status %d",
                      provider_names[which], strided, c, (int)st);
        for (size_t e = 0; !good && e < N * H * D; e++) ck_assert_float_eq(o[e], 7.0f);
      }
      free(ws);
      provider_free(&pr);
    }
  }
  tu_qkv_free(&x);
}
END_TEST

/* Packed K/V (engine/blocked.h): where a head's K/V rows are not contiguous fp32 (token-major
 * with several heads, or half types) and a call has several query blocks, each worker copies the
 * first 4096 keys of a head into its scratch. The same values in the same order: token-major
 * calls (packed) give the bits of the same data head-major (fp32: read in place), with and
 * without threads, for softmax (with its LSE) and GAU, fp32 / fp16 / bf16, GQA, every mask kind,
 * a chunk of queries after a prefix (n_q < n_kv) and n_kv past the packed keys (4096 + 211). */
enum { PK_NQ = 300, PK_NKV = 4096 + 211, PK_HQ = 4, PK_HK = 2, PK_D = 16 };

/* Token-major [n][h][w] elements (4-byte or 2-byte) to head-major [h][n][w]. */
static void *pk_head_major(const void *x, size_t n, size_t h, size_t w, size_t es) {
  char *y = malloc(n * h * w * es);
  ck_assert_ptr_nonnull(y);
  for (size_t t = 0; t < n; t++)
    for (size_t c = 0; c < h; c++) memcpy(y + ((c * n + t) * w) * es, (const char *)x + ((t * h + c) * w) * es, w * es);
  return y;
}

START_TEST(packed_kv_same_bits) {
  if (tu_small() && _i % 4) return; /* under qemu: 6 of the 24 cases, every type, variant and mask among them */
  const int dtype = _i % 3, variant = _i / 3 % 2, mask_kind = _i / 6;
  tu_rng rng = tu_rng_of(31 + (uint64_t)_i);
  const size_t nk = (size_t)PK_NKV * PK_HK * PK_D;
  float *q = malloc((size_t)PK_NQ * PK_HQ * PK_D * sizeof(float)), *kf = malloc(nk * sizeof(float)),
        *vf = malloc(nk * sizeof(float));
  uint16_t *kh = malloc(nk * sizeof(uint16_t)), *vh = malloc(nk * sizeof(uint16_t));
  ck_assert(q && kf && vf && kh && vh);
  for (size_t e = 0; e < (size_t)PK_NQ * PK_HQ * PK_D; e++) q[e] = tu_rng_range(&rng, -1.5f, 1.5f);
  for (size_t e = 0; e < nk; e++) {
    kf[e] = tu_rng_range(&rng, -1.5f, 1.5f), vf[e] = tu_rng_range(&rng, -1.0f, 1.0f);
    kh[e] = dtype == 1 ? hr_f16_bits(kf[e]) : hr_bf16_bits(kf[e]);
    vh[e] = dtype == 1 ? hr_f16_bits(vf[e]) : hr_bf16_bits(vf[e]);
  }
  const size_t es = dtype ? sizeof(uint16_t) : sizeof(float);
  const void *k_tm = dtype ? (const void *)kh : (const void *)kf, *v_tm = dtype ? (const void *)vh : (const void *)vf;
  void *k_hm = pk_head_major(k_tm, PK_NKV, PK_HK, PK_D, es), *v_hm = pk_head_major(v_tm, PK_NKV, PK_HK, PK_D, es);
  const attn_mask masks[] = {attn_mask_causal(), attn_mask_full(), attn_mask_window(700, 0), {ATTN_UNBOUNDED, 0, 128}};
  provider pr;
  provider_make(&pr, 2); /* pool3 */
  enum { OUTS = PK_NQ * PK_HQ * PK_D };
  static float o[3][OUTS], lse[3][PK_NQ * PK_HQ];
  for (int run = 0; run < 3; run++) { /* token-major, head-major, token-major on 3 threads */
    attn_shape sh;
    ck_assert_int_eq(attn_shape_init(&sh, PK_NQ, PK_NKV, PK_HQ, PK_HK, PK_HK, PK_D, PK_D), ATTN_OK);
    sh.kv_type = (attn_dtype)dtype;
    if (run == 1) sh.k = sh.v = (attn_layout){PK_D, (size_t)PK_NKV * PK_D};
    if (run == 2) sh.threads = &pr.th;
    const void *k = run == 1 ? k_hm : k_tm, *v = run == 1 ? v_hm : v_tm;
    size_t bytes;
    void *ws;
    for (size_t e = 0; e < OUTS; e++) o[run][e] = -7.0f;
    if (variant == 0) {
      attn_softmax_desc d;
      ck_assert_int_eq(attn_softmax_desc_init(&d, PK_NQ, PK_NKV, PK_HQ, PK_HK, PK_D, PK_D), ATTN_OK);
      d.shape = sh, d.mask = masks[mask_kind];
      ck_assert_int_eq(attn_softmax_workspace_size(&d, &bytes), ATTN_OK);
      ck_assert_ptr_nonnull(ws = malloc(bytes));
      ck_assert_int_eq(attn_softmax(&d, q, k, v, o[run], lse[run], ws, bytes), ATTN_OK);
    } else {
      attn_gau_desc d;
      ck_assert_int_eq(attn_gau_desc_init(&d, PK_NQ, PK_NKV, PK_HQ, PK_HK, PK_D, PK_D), ATTN_OK);
      d.shape = sh, d.mask = masks[mask_kind], d.normalize = 1;
      ck_assert_int_eq(attn_gau_workspace_size(&d, &bytes), ATTN_OK);
      ck_assert_ptr_nonnull(ws = malloc(bytes));
      ck_assert_int_eq(attn_gau(&d, q, k, v, o[run], ws, bytes), ATTN_OK);
    }
    free(ws);
  }
  char what[96];
  for (int run = 1; run < 3; run++) {
    snprintf(what, sizeof what, "dtype %d variant %d mask %d: %s", dtype, variant, mask_kind,
             run == 1 ? "token-major against head-major" : "3 threads against none");
    tu_assert_same_bits(what, o[0], o[run], sizeof o[0]);
    if (variant == 0) tu_assert_same_bits(what, lse[0], lse[run], sizeof lse[0]);
  }
  provider_free(&pr);
  free(k_hm), free(v_hm), free(q), free(kf), free(vf), free(kh), free(vh);
}
END_TEST

static void count_task(void *ctx, size_t i, size_t w) {
  atomic_int *hits = ctx;
  ck_assert_uint_lt(w, 3);
  atomic_fetch_add(&hits[i], 1);
}

/* The pool: statuses, and its parallel-for runs every task exactly once on workers < threads. */
START_TEST(pool_api) {
  attn_pool *p = NULL;
  attn_threads th;
  ck_assert_int_eq(attn_pool_create(2, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_pool_create(0, &p), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_pool_create(ATTN_MAX_WORKERS + 1, &p), ATTN_E_BAD_ARGUMENT);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(attn_pool_threads(NULL, &th), ATTN_E_NULL_POINTER);
  attn_pool_destroy(NULL);
  ck_assert_int_eq(attn_pool_create(3, &p), ATTN_OK);
  ck_assert_int_eq(attn_pool_threads(p, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_pool_threads(p, &th), ATTN_OK);
  ck_assert_uint_eq(th.workers, 3);
  enum { T = 1000 };
  static atomic_int hits[T];
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < T; i++) atomic_store(&hits[i], 0);
    const size_t tasks = round == 0 ? 0 : round == 1 ? 1 : (size_t)(T - round);
    th.parallel_for(th.pool, count_task, hits, tasks);
    for (size_t i = 0; i < T; i++) ck_assert_int_eq(atomic_load(&hits[i]), i < tasks ? 1 : 0);
  }
  attn_pool_destroy(p);
  ck_assert_str_eq(attn_status_string(ATTN_E_SYSTEM), "the system refused memory or a thread");
}
END_TEST

#if defined(__linux__)
typedef struct pin_seen {
  atomic_int bad; /* a task of worker w > 0 ran off its CPU */
  int cpu[2];     /* the CPUs the two workers (1, 2) were pinned to */
} pin_seen;

static void pin_task(void *ctx, size_t i, size_t w) {
  pin_seen *s = ctx;
  (void)i;
  volatile double x = 0; /* long enough that both workers take tasks */
  for (int k = 0; k < 20000; k++) x += k;
  (void)x;
  const int cpu = sched_getcpu(); /* -1 where the system cannot tell (an emulator): not checked */
  if (w > 0 && cpu >= 0 && cpu != s->cpu[(w - 1) % 2]) atomic_store(&s->bad, 1);
}
#endif

/* attn_pool_pin: statuses; pinned workers run their tasks on their CPUs (chosen among those this
 * process may use: a container's cpuset need not hold CPU 0). */
START_TEST(pool_pin) {
  attn_pool *p = NULL;
  const int one[] = {0}, neg[] = {0, -1};
  ck_assert_int_eq(attn_pool_pin(NULL, one, 1), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_pool_create(3, &p), ATTN_OK);
  ck_assert_int_eq(attn_pool_pin(p, NULL, 1), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_pool_pin(p, one, 0), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_pool_pin(p, neg, 2), ATTN_E_BAD_ARGUMENT);
#if defined(__linux__)
  const int huge[] = {CPU_SETSIZE};
  ck_assert_int_eq(attn_pool_pin(p, huge, 1), ATTN_E_BAD_ARGUMENT);
  cpu_set_t allowed;
  ck_assert_int_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  pin_seen seen = {0, {-1, -1}};
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
    if (CPU_ISSET(c, &allowed)) seen.cpu[k++] = c;
  if (seen.cpu[1] < 0) seen.cpu[1] = seen.cpu[0]; /* one CPU: both workers on it */
  ck_assert_int_eq(attn_pool_pin(p, seen.cpu, 2), ATTN_OK);
  attn_threads th;
  ck_assert_int_eq(attn_pool_threads(p, &th), ATTN_OK);
  for (int round = 0; round < 20; round++) th.parallel_for(th.pool, pin_task, &seen, 64);
  ck_assert_msg(!atomic_load(&seen.bad), "a pinned worker ran a task off its CPU (%d, %d)", seen.cpu[0], seen.cpu[1]);
  /* pinned or not, the same bits: a pinned pool's softmax against an unpinned one's */
  tu_rng rng = tu_rng_of(23);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, 200, 200, 4, 2, 2, 16, 16);
  attn_pool *free_pool = NULL;
  attn_threads fth;
  ck_assert_int_eq(attn_pool_create(3, &free_pool), ATTN_OK);
  ck_assert_int_eq(attn_pool_threads(free_pool, &fth), ATTN_OK);
  static float o[2][200 * 4 * 16];
  for (int k = 0; k < 2; k++) {
    attn_softmax_desc d;
    ck_assert_int_eq(attn_softmax_desc_init(&d, 200, 200, 4, 2, 16, 16), ATTN_OK);
    d.shape.threads = k ? &fth : &th;
    size_t bytes;
    ck_assert_int_eq(attn_softmax_workspace_size(&d, &bytes), ATTN_OK);
    void *ws = malloc(bytes);
    ck_assert_ptr_nonnull(ws);
    ck_assert_int_eq(attn_softmax(&d, x.q.data, x.k.data, x.v.data, o[k], NULL, ws, bytes), ATTN_OK);
    free(ws);
  }
  tu_assert_same_bits("pinned against unpinned", o[0], o[1], sizeof o[0]);
  attn_pool_destroy(free_pool);
  tu_qkv_free(&x);
#endif
  attn_pool_destroy(p);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"bit_identical", parallel_bit_identical, (int)NPCASES}, {"bit_identical", packed_kv_same_bits, (int)(3 * 2 * 4)},
  {"api", parallel_workspace_sizes, 1}, {"api", parallel_rejects_bad_threads, 1},
    {"api", parallel_rejects_bad_gates, 1}, {"api", pool_api, 1}, {"api", pool_pin, 1})
/* clang-format on */
