/*
 * attn_selcache_step_batch (0.11.0): a batch of selective caches stepped in one call, on the ISA
 * path named by ATTN_ISA. Part of the selective_cache executable (its TU_MAIN lists these rows).
 * "batch": B caches of different lengths (prefills of 1 to 40 tokens), with and without pruning
 * (a budget, a finite tau), fp32 / fp16 / bf16 K/V, Q and O, large logits, GQA, the library's
 * pool or no threads, a cache long enough for its keys to go in ranges (ATTN_SPLIT_KEYS), heads
 * wide enough (d = 4096) to go in two groups; several steps in a row (state continuity: each step appends, attends,
 * selects and evicts). Every step must equal attn_selcache_step on a twin cache per sequence, bit
 * for bit: o, lse, the cache's report and its whole memory (the single step's own suite holds it
 * to the float64 reference and to attn_selective). The twins step without threads: the batch's
 * bits must not depend on them. "batch_bad": every bad argument's status, nothing written.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "selcache_tests.h"
#include "selective_util.h"

enum { SB_MAX = 6 };
typedef struct sb_case {
  const char *name;
  size_t h_q, h_kv, d, dv, h_sel, count, steps;
  attn_dtype kv, qo;
  size_t workers;  /* 0: no threads */
  float tau;       /* INFINITY: no tau eviction */
  size_t budget;   /* 0: none */
  float logit_mul; /* queries scaled: large logits */
  size_t long_n;   /* 0, or sequence 0's prefill: past 2 ATTN_SPLIT_KEYS, its keys in ranges */
} sb_case;

#define F32 ATTN_F32
#define F16 ATTN_F16
#define B16 ATTN_BF16
static const sb_case sb_cases[] = {
    {"mha fp32", 2, 2, 16, 16, 1, 3, 4, F32, F32, 0, INFINITY, 0, 1.0f, 0},
    {"gqa fp32 threads", 4, 2, 32, 24, 3, 5, 3, F32, F32, 3, INFINITY, 0, 1.0f, 0},
    {"budget and tau threads", 4, 1, 16, 16, 0, 4, 6, F32, F32, 2, 1.5f, 12, 1.0f, 0},
    {"half kv", 2, 1, 64, 64, 1, 6, 3, F16, F32, 0, INFINITY, 20, 1.0f, 0},
    {"bf16 kv qo threads", 8, 2, 24, 40, 5, 4, 3, B16, B16, 3, 4.0f, 0, 1.0f, 0},
    {"fp16 qo large logits", 3, 3, 9, 7, 2, 1, 5, F32, F16, 0, INFINITY, 0, 40.0f, 0},
    {"odd widths budget", 6, 3, 33, 17, 4, 5, 4, F16, F16, 2, INFINITY, 9, 1.0f, 0},
    {"heads in two groups threads", 16, 2, 4096, 4096, 3, 2, 2, F32, F32, 2, INFINITY, 0, 1.0f, 0},
    {"long cache key ranges threads", 2, 1, 8, 8, 1, 2, 2, F32, B16, 3, INFINITY, 0, 1.0f, 2 * ATTN_SPLIT_KEYS + 300},
};
#define SB_NCASES (sizeof sb_cases / sizeof sb_cases[0])

/* n values of type ty from x (rounded to it when half): a malloc'd buffer of ty's elements. */
static void *sb_typed(attn_dtype ty, const float *x, size_t n) {
  if (ty == ATTN_F32) {
    float *r = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(r);
    memcpy(r, x, n * sizeof(float));
    return r;
  }
  uint16_t *r = malloc(n * sizeof(uint16_t));
  ck_assert_ptr_nonnull(r);
  for (size_t i = 0; i < n; i++) r[i] = tu_half_bits(ty, x[i]);
  return r;
}

static size_t sb_size(attn_dtype ty) { return ty == ATTN_F32 ? sizeof(float) : sizeof(uint16_t); }

/* The cache's report and memory equal its twin's. */
static void sb_same_cache(const char *name, size_t step, size_t b, const sc_fix *a, const sc_fix *t) {
  attn_selcache x = a->c, y = t->c;
  x.memory = y.memory = NULL;
  ck_assert_msg(!memcmp(&x, &y, sizeof x),
                "%s step %zu: cache %zu's report differs (live %zu / %zu, evicted %zu / %zu)", name, step, b, a->c.live,
                t->c.live, a->c.evicted, t->c.evicted);
  ck_assert_msg(!memcmp(a->mem, t->mem, a->bytes), "%s step %zu: cache %zu's memory differs", name, step, b);
}

START_TEST(selcache_batch_equals_steps) {
  const sb_case *c = &sb_cases[_i];
  const size_t B = c->count;
  tu_rng rng = tu_rng_of(7100 + (uint64_t)_i);
  sc_fix a[SB_MAX], t[SB_MAX];
  attn_selcache *caches[SB_MAX];
  ck_assert_uint_le(B, SB_MAX);
  for (size_t b = 0; b < B; b++) { /* prefills of different lengths, the twin loaded alike */
    const size_t n = b == 0 && c->long_n ? c->long_n : 1 + (b * 13 + (size_t)_i * 5) % 40, cap = n + c->steps + 1;
    tu_qkv x;
    attn_selective_desc dp;
    sel_inputs(&x, &dp, &rng, TU_DATA_UNIFORM, n, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
    float *f = calloc(n, sizeof(float));
    ck_assert_ptr_nonnull(f);
    sc_fix_init(&a[b], cap, c->h_kv, c->d, c->dv, c->tau, c->budget && c->budget < cap - 1 ? c->budget : 0, b % 3 * 4);
    sc_fix_init(&t[b], cap, c->h_kv, c->d, c->dv, c->tau, a[b].c.budget, 0);
    if (c->long_n || c->d > 1024) /* loaded with F = 0, no quadratic prefill (slow under qemu) */
      ck_assert_int_eq(attn_selcache_load(&a[b].c, &dp, x.k.data, x.v.data, f), ATTN_OK);
    else
      sc_prefill_load(&a[b], &x, n, c->h_q, c->h_kv, c->d, c->dv, c->h_sel, f);
    ck_assert_int_eq(attn_selcache_copy(&t[b].c, &a[b].c), ATTN_OK);
    caches[b] = &a[b].c;
    free(f);
    tu_qkv_free(&x);
  }
  attn_pool *pool = NULL;
  attn_threads th;
  if (c->workers) {
    ck_assert_int_eq(attn_pool_create(c->workers, &pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
  }
  attn_selective_desc d, d1;
  sel_desc(&d, B, B, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  sel_desc(&d1, 1, 1, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  d.shape.kv_type = d1.shape.kv_type = c->kv;
  d.shape.q_type = d.shape.o_type = d1.shape.q_type = d1.shape.o_type = c->qo;
  d.shape.threads = pool ? &th : NULL;
  const size_t nq = B * c->h_q * c->d, nk = B * c->h_kv * c->d, nv = B * c->h_kv * c->dv, no = B * c->h_q * c->dv;
  const size_t qs = sb_size(c->qo), ks = sb_size(c->kv);
  size_t ws = 0;
  ck_assert_int_eq(attn_selcache_step_batch_workspace_size(&d, caches, B, &ws), ATTN_OK);
  for (size_t s = 0; s < c->steps; s++) {
    float *xq = malloc(nq * sizeof(float)), *xk = malloc(nk * sizeof(float)), *xv = malloc(nv * sizeof(float));
    ck_assert(xq && xk && xv);
    for (size_t i = 0; i < nq; i++) xq[i] = c->logit_mul * tu_rng_range(&rng, -1.0f, 1.0f);
    for (size_t i = 0; i < nk; i++) xk[i] = tu_rng_range(&rng, -1.0f, 1.0f);
    for (size_t i = 0; i < nv; i++) xv[i] = tu_rng_range(&rng, -1.0f, 1.0f);
    char *q = sb_typed(c->qo, xq, nq), *k = sb_typed(c->kv, xk, nk), *v = sb_typed(c->kv, xv, nv);
    char *o = tu_alloc(no * qs, 4), *o1 = malloc(c->h_q * c->dv * qs);
    float *lse = (float *)(void *)tu_alloc(B * c->h_q * sizeof(float), 8), *lse1 = malloc(c->h_q * sizeof(float));
    void *w = tu_alloc(ws, s % 2 * 4);
    ck_assert(o1 && lse1);
    ck_assert_int_eq(attn_selcache_step_batch(&d, caches, B, q, k, v, o, lse, w, ws), ATTN_OK);
    tu_assert_guards("batch workspace", w);
    tu_assert_guards("batch o", o);
    tu_assert_guards("batch lse", lse);
    for (size_t b = 0; b < B; b++) {
      size_t w1n = 0;
      ck_assert_int_eq(attn_selcache_workspace_size(&d1, &t[b].c, &w1n), ATTN_OK);
      void *w1 = malloc(w1n ? w1n : 1);
      ck_assert_ptr_nonnull(w1);
      ck_assert_int_eq(attn_selcache_step(&d1, &t[b].c, q + b * c->h_q * c->d * qs, k + b * c->h_kv * c->d * ks,
                                          v + b * c->h_kv * c->dv * ks, o1, lse1, w1, w1n),
                       ATTN_OK);
      free(w1);
      ck_assert_msg(!memcmp(o + b * c->h_q * c->dv * qs, o1, c->h_q * c->dv * qs), "%s step %zu: o of sequence %zu",
                    c->name, s, b);
      ck_assert_msg(!memcmp(lse + b * c->h_q, lse1, c->h_q * sizeof(float)), "%s step %zu: lse of sequence %zu",
                    c->name, s, b);
      for (size_t h = 0; h < c->h_q; h++) ck_assert_msg(!isnan(lse1[h]), "%s: a NaN lse", c->name);
      sb_same_cache(c->name, s, b, &a[b], &t[b]);
    }
    free(xq), free(xk), free(xv), free(q), free(k), free(v), free(o1), free(lse1);
    tu_free(o), tu_free(lse), tu_free(w);
  }
  size_t evicted = 0;
  for (size_t b = 0; b < B; b++) evicted += a[b].c.evicted;
  if (c->budget || isfinite(c->tau)) ck_assert_msg(evicted > 0, "%s: no eviction to compare", c->name);
  for (size_t b = 0; b < B; b++) sc_fix_free(&a[b]), sc_fix_free(&t[b]);
  if (pool) attn_pool_destroy(pool);
}
END_TEST

/* Bad arguments: each row breaks one thing of a valid batch of 3 caches (h_q 4, h_kv 2, d 8, dv
 * 8); the exact status, and o, lse and every cache untouched. */
enum {
  SBB_COUNT0,
  SBB_CACHES_NULL,
  SBB_ENTRY_NULL,
  SBB_NQ,
  SBB_NKV,
  SBB_SAME_CACHE,
  SBB_FULL,
  SBB_WS_SMALL,
  SBB_MISMATCH,
  SBB_UNINIT,
  SBB_O_IN_CACHE,
  SBB_CACHE_IN_Q,
  SBB_HSEL,
  SBB_Q_NULL,
  SBB_ROWS
};
static const attn_status sbb_expect[SBB_ROWS] = {
    [SBB_COUNT0] = ATTN_E_ZERO_SIZE,         [SBB_CACHES_NULL] = ATTN_E_NULL_POINTER,
    [SBB_ENTRY_NULL] = ATTN_E_NULL_POINTER,  [SBB_NQ] = ATTN_E_BAD_ARGUMENT,
    [SBB_NKV] = ATTN_E_BAD_ARGUMENT,         [SBB_SAME_CACHE] = ATTN_E_ALIASING,
    [SBB_FULL] = ATTN_E_WORKSPACE_TOO_SMALL, [SBB_WS_SMALL] = ATTN_E_WORKSPACE_TOO_SMALL,
    [SBB_MISMATCH] = ATTN_E_STATE_MISMATCH,  [SBB_UNINIT] = ATTN_E_BAD_ARGUMENT,
    [SBB_O_IN_CACHE] = ATTN_E_ALIASING,      [SBB_CACHE_IN_Q] = ATTN_E_ALIASING,
    [SBB_HSEL] = ATTN_E_BAD_HEADS,           [SBB_Q_NULL] = ATTN_E_NULL_POINTER,
};

START_TEST(selcache_batch_rejects_bad_input) {
  enum { H = 4, HK = 2, D = 8, N = 3, CAP = 8 };
  tu_rng rng = tu_rng_of(7200 + (uint64_t)_i);
  sc_fix f[N + 1];
  attn_selcache *caches[N + 1];
  tu_qkv x;
  attn_selective_desc dp;
  sel_inputs(&x, &dp, &rng, TU_DATA_UNIFORM, CAP, H, HK, D, D, 1);
  float pf[CAP];
  for (size_t b = 0; b <= N; b++) {
    const size_t hk = b == N && _i == SBB_MISMATCH ? 1 : HK;
    sc_fix_init(&f[b], CAP, hk, D, D, INFINITY, 0, 0);
    caches[b] = &f[b].c;
    if (hk == HK) sc_prefill_load(&f[b], &x, _i == SBB_FULL && b == 1 ? CAP : 2 + b, H, HK, D, D, 1, pf);
  }
  attn_selective_desc d;
  sel_desc(&d, N, N, H, HK, D, D, 1);
  float q[N * H * D], k[N * HK * D], v[N * HK * D], o[N * H * D], lse[N * H];
  for (size_t i = 0; i < N * H * D; i++) q[i] = tu_rng_range(&rng, -1.0f, 1.0f), o[i] = 7.0f;
  for (size_t i = 0; i < N * HK * D; i++) k[i] = v[i] = tu_rng_range(&rng, -1.0f, 1.0f);
  for (size_t i = 0; i < N * H; i++) lse[i] = 7.0f;
  size_t ws = 0;
  ck_assert_int_eq(attn_selcache_step_batch_workspace_size(&d, caches, N, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 0);
  size_t count = N, wsize = ws;
  const void *qp = q;
  void *op = o;
  attn_selcache *const *cp = caches;
  attn_selcache uninit = f[0].c;
  switch (_i) {
    case SBB_COUNT0:
      count = 0;
      break;
    case SBB_CACHES_NULL:
      cp = NULL;
      break;
    case SBB_ENTRY_NULL:
      caches[1] = NULL;
      break;
    case SBB_NQ:
      d.shape.n_q = N + 1;
      break;
    case SBB_NKV:
      d.shape.n_kv = N - 1;
      break;
    case SBB_SAME_CACHE:
      caches[2] = caches[0];
      break;
    case SBB_FULL:
      break; /* caches[1] loaded to capacity */
    case SBB_WS_SMALL:
      wsize = ws - 1;
      break;
    case SBB_MISMATCH:
      caches[2] = &f[N].c;
      break;
    case SBB_UNINIT:
      uninit.memory = NULL, caches[1] = &uninit;
      break;
    case SBB_O_IN_CACHE:
      op = f[2].mem;
      break;
    case SBB_CACHE_IN_Q:
      qp = f[1].mem;
      break;
    case SBB_HSEL:
      d.h_sel = H;
      break;
    case SBB_Q_NULL:
      qp = NULL;
      break;
    default:
      ck_abort();
  }
  attn_selcache before[N + 1];
  void *mem_before[N + 1];
  for (size_t b = 0; b <= N; b++) {
    before[b] = f[b].c;
    mem_before[b] = malloc(f[b].bytes);
    ck_assert_ptr_nonnull(mem_before[b]);
    memcpy(mem_before[b], f[b].mem, f[b].bytes);
  }
  const attn_status st = attn_selcache_step_batch(&d, cp, count, qp, k, v, op, lse, w, wsize);
  ck_assert_msg(st == sbb_expect[_i], "row %d: status %d (%s), expected %d (%s)", _i, (int)st, attn_status_string(st),
                (int)sbb_expect[_i], attn_status_string(sbb_expect[_i]));
  if (_i != SBB_COUNT0 && _i != SBB_CACHES_NULL && _i != SBB_ENTRY_NULL && _i != SBB_Q_NULL) {
    size_t bytes = 0; /* the workspace query agrees on the batch's own faults */
    const attn_status sq = attn_selcache_step_batch_workspace_size(&d, cp, count, &bytes);
    if (_i == SBB_NQ || _i == SBB_NKV || _i == SBB_SAME_CACHE || _i == SBB_MISMATCH || _i == SBB_UNINIT ||
        _i == SBB_HSEL)
      ck_assert_int_eq(sq, sbb_expect[_i]);
  }
  for (size_t i = 0; i < N * H * D; i++) ck_assert_msg(o[i] == 7.0f, "row %d: o written", _i);
  for (size_t i = 0; i < N * H; i++) ck_assert_msg(lse[i] == 7.0f, "row %d: lse written", _i);
  for (size_t b = 0; b <= N; b++) {
    tu_assert_same_bits("cache report after a rejected batch", &before[b], &f[b].c, sizeof before[b]);
    tu_assert_same_bits("cache memory after a rejected batch", mem_before[b], f[b].mem, f[b].bytes);
    free(mem_before[b]);
    sc_fix_free(&f[b]);
  }
  tu_assert_guards("workspace", w);
  tu_free(w);
  tu_qkv_free(&x);
}
END_TEST

tu_entry selcache_batch_row(size_t i) {
  const tu_entry rows[] = {{"batch", selcache_batch_equals_steps, (int)SB_NCASES},
                           {"batch_bad", selcache_batch_rejects_bad_input, SBB_ROWS}};
  return rows[i];
}
