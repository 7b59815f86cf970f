/*
 * The fuzz_batch target's third variant: attn_selcache_step_batch and its workspace query.
 *
 * From the bytes: 1-4 caches (capacity 2-24 slots; tau +inf or 0.25-4; a budget or none), heads
 * (GQA, the selecting head), widths, the K/V and Q/O types (fp32, fp16, bf16), threads (none, or
 * the library's pool of 2 or 3 workers), each cache's own tokens stepped alone first (so that the
 * caches differ in length and in what they evicted), then 1-4 batched steps, each with one fault
 * or none (a cache given twice, a full cache, shape.n_q not the count, one byte less of
 * workspace). Every cache has a twin stepped by attn_selcache_step without threads. Checks: the
 * call's status; with a fault, no byte of o, lse or any cache (report and memory) changed;
 * otherwise o and lse bit for bit those of the twins' steps, and every cache's report and whole
 * memory its twin's (as attn.h promises). The single step is checked against the float64
 * reference by the selective_cache suite.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_batch.h"

enum { SC_MAXB = 4, SC_MAX_CAP = 24, SC_MAX_D = 24 };

/* n values drawn from the bytes in type t, in a buffer of their own. */
static void *sc_draw(fz_in *in, attn_dtype t, size_t n, float amp) {
  void *p = fz_calloc(n ? n : 1, fz_float_size(t));
  fz_draw_typed(in, t, p, n, amp);
  return p;
}

/* A one-token step of cache c (twin or setup), without threads. */
static void sc_step1(const attn_selective_desc *d1, attn_selcache *c, const void *q, const void *k, const void *v,
                     void *o, float *lse) {
  size_t w = 0;
  fz_check_status("selcache_workspace_size", attn_selcache_workspace_size(d1, c, &w), ATTN_OK);
  void *ws = fz_alloc(w, 0);
  fz_check_status("selcache_step", attn_selcache_step(d1, c, q, k, v, o, lse, ws, w), ATTN_OK);
  fz_free(ws);
}

/* The caches' reports equal, field by field (the struct has padding). */
static int sc_same_report(const attn_selcache *a, const attn_selcache *b) {
  return a->capacity == b->capacity && a->h_kv == b->h_kv && a->d == b->d && a->dv == b->dv &&
         !memcmp(&a->tau, &b->tau, sizeof a->tau) && a->budget == b->budget && a->live == b->live &&
         a->tokens == b->tokens && a->evicted == b->evicted;
}

/* Bytes equal. */
static void sc_same(const char *what, size_t step, const void *a, const void *b, size_t bytes) {
  if (memcmp(a, b, bytes)) fz_fail("selcache batch step %zu: %s differs from the caches' own steps", step, what);
}

void fb_selcache(fz_in *in) {
  const attn_dtype types[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
  const size_t B = 1 + fz_pick(in, SC_MAXB), h_kv = 1 + fz_pick(in, 3), h_q = h_kv * (1 + fz_pick(in, 3));
  const size_t d = fz_size(in, SC_MAX_D), dv = fz_size(in, SC_MAX_D), h_sel = fz_pick(in, h_q);
  const attn_dtype kt = types[fz_pick(in, 3)], qt = types[fz_pick(in, 3)];
  const size_t ek = fz_float_size(kt), eq = fz_float_size(qt), steps = 1 + fz_pick(in, 4);
  attn_selective_desc d1, db;
  fz_check_status("desc_init", attn_selective_desc_init(&d1, 1, 1, h_q, h_kv, d, dv), ATTN_OK);
  d1.h_sel = h_sel, d1.shape.kv_type = kt, d1.shape.q_type = d1.shape.o_type = qt;
  db = d1;
  db.shape.n_q = db.shape.n_kv = B;
  db.shape.q = (attn_layout){h_q * d, d}, db.shape.k = (attn_layout){h_kv * d, d};
  db.shape.v = (attn_layout){h_kv * dv, dv}, db.shape.o = (attn_layout){h_q * dv, dv};
  db.lse = (attn_layout){h_q, 1};
  /* the caches and their twins, each first stepped alone through its own tokens */
  attn_selcache a[SC_MAXB], t[SC_MAXB], *caches[SC_MAXB];
  void *am[SC_MAXB], *tm[SC_MAXB];
  size_t mb[SC_MAXB];
  float *o1 = fz_calloc(h_q * dv, 4), *l1 = fz_calloc(h_q, sizeof(float));
  for (size_t b = 0; b < B; b++) {
    const size_t cap = 2 + fz_pick(in, SC_MAX_CAP - 1);
    const float tau = fz_pick(in, 3) ? INFINITY : 0.25f + (float)fz_pick(in, 16) / 4;
    const size_t budget = cap > 3 && fz_pick(in, 2) ? 2 + fz_pick(in, cap - 3) : 0; /* 2 .. cap - 2 */
    fz_check_status("selcache_size", attn_selcache_size(cap, h_kv, d, dv, &mb[b]), ATTN_OK);
    am[b] = fz_calloc(mb[b], 1), tm[b] = fz_calloc(mb[b], 1);
    fz_check_status("selcache_init", attn_selcache_init(&a[b], cap, h_kv, d, dv, tau, budget, am[b], mb[b]), ATTN_OK);
    fz_check_status("selcache_init", attn_selcache_init(&t[b], cap, h_kv, d, dv, tau, budget, tm[b], mb[b]), ATTN_OK);
    const size_t pre = fz_pick(in, cap); /* tokens before the batch, while a slot stays free */
    for (size_t s = 0; s < pre && (budget || a[b].live + 1 < cap); s++) {
      void *q = sc_draw(in, qt, h_q * d, 2.0f), *k = sc_draw(in, kt, h_kv * d, 1.0f),
           *v = sc_draw(in, kt, h_kv * dv, 1.0f);
      sc_step1(&d1, &a[b], q, k, v, o1, l1);
      sc_step1(&d1, &t[b], q, k, v, o1, l1); /* the twin alike: the same memory, byte for byte */
      free(q), free(k), free(v);
    }
    caches[b] = &a[b];
  }
  const size_t w = fz_pick(in, 3);
  attn_pool *pool = NULL;
  attn_threads th;
  if (w) fz_check_status("pool_create", attn_pool_create(w + 1, &pool), ATTN_OK);
  if (w) fz_check_status("pool_threads", attn_pool_threads(pool, &th), ATTN_OK);
  db.shape.threads = w ? &th : NULL;
  size_t bytes = SIZE_MAX;
  fz_check_status("batch workspace_size", attn_selcache_step_batch_workspace_size(&db, caches, B, &bytes), ATTN_OK);
  const size_t osz = B * h_q * dv * eq;
  unsigned char *o = fz_calloc(osz, 1), *ob = fz_calloc(osz, 1), *want = fz_calloc(osz, 1);
  float *lse = fz_calloc(B * h_q, sizeof(float)), *lb = fz_calloc(B * h_q, sizeof(float));
  float *wl = fz_calloc(B * h_q, sizeof(float));
  for (size_t s = 0; s < steps; s++) {
    unsigned char *q = sc_draw(in, qt, B * h_q * d, 2.0f), *k = sc_draw(in, kt, B * h_kv * d, 1.0f),
                  *v = sc_draw(in, kt, B * h_kv * dv, 1.0f);
    memset(o, 0xa5, osz), memset(lse, 0xa5, B * h_q * sizeof(float));
    memcpy(ob, o, osz), memcpy(lb, lse, B * h_q * sizeof(float));
    attn_selcache before[SC_MAXB];
    for (size_t b = 0; b < B; b++) before[b] = a[b];
    attn_selective_desc dc = db;
    attn_selcache *cs[SC_MAXB];
    memcpy(cs, caches, sizeof cs);
    attn_status expect = ATTN_OK;
    size_t give = bytes;
    int full = 0; /* a cache without a budget and without a free slot: the step is refused */
    for (size_t b = 0; b < B; b++) full |= a[b].live == a[b].capacity;
    const size_t fault = full ? 3 : fz_pick(in, 8); /* at most one fault */
    if (full)
      expect = ATTN_E_WORKSPACE_TOO_SMALL;
    else if (fault == 0 && B > 1)
      cs[B - 1] = cs[0], expect = ATTN_E_ALIASING;
    else if (fault == 1)
      dc.shape.n_q = B + 1, expect = ATTN_E_BAD_ARGUMENT;
    else if (fault == 2)
      give = bytes - 1, expect = ATTN_E_WORKSPACE_TOO_SMALL;
    void *ws = fz_alloc(bytes, fz_pick(in, 64));
    const attn_status st = attn_selcache_step_batch(&dc, cs, B, q, k, v, o, lse, ws, give);
    fz_free(ws);
    if (st != expect)
      fz_fail("selcache batch step %zu: %s, expected %s", s, attn_status_name(st), attn_status_name(expect));
    if (st != ATTN_OK) { /* nothing changed: o, lse, every cache (its twin holds the old state) */
      sc_same("o written on error", s, o, ob, osz);
      sc_same("lse written on error", s, lse, lb, B * h_q * sizeof(float));
      for (size_t b = 0; b < B; b++) {
        if (!sc_same_report(&a[b], &before[b]) || a[b].memory != before[b].memory)
          fz_fail("selcache batch step %zu: cache %zu's report changed on error", s, b);
        sc_same("a cache's memory changed on error", s, a[b].memory, t[b].memory, mb[b]);
      }
    } else {
      for (size_t b = 0; b < B; b++) {
        sc_step1(&d1, &t[b], q + b * h_q * d * eq, k + b * h_kv * d * ek, v + b * h_kv * dv * ek,
                 want + b * h_q * dv * eq, wl + b * h_q);
        if (!sc_same_report(&a[b], &t[b]))
          fz_fail(
              "selcache batch step %zu: cache %zu's report (live %zu, evicted %zu) differs from its own step's "
              "(live %zu, evicted %zu)",
              s, b, a[b].live, a[b].evicted, t[b].live, t[b].evicted);
        sc_same("a cache's memory", s, a[b].memory, t[b].memory, mb[b]);
      }
      sc_same("o", s, o, want, osz);
      sc_same("lse", s, lse, wl, B * h_q * sizeof(float));
    }
    free(q), free(k), free(v);
    if (full) break;
  }
  attn_pool_destroy(pool);
  for (size_t b = 0; b < B; b++) free(am[b]), free(tm[b]);
  free(o1), free(l1), free(o), free(ob), free(want), free(lse), free(lb), free(wl);
}
