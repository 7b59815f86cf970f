/*
 * The selective KV cache (attn.h: attn_selcache): its memory and sizes, and the pruning that
 * keeps the tokens worth keeping (spec 6).
 */
#include "ops/selcache_internal.h"
#include "simd/vf_scalar.h"

attn_status attn_sc_bytes(size_t capacity, size_t h_kv, size_t d, size_t dv, size_t *bytes) {
  size_t rk, rv, row, fl, b;
  if (!capacity || !h_kv || !d || !dv)
    return attn_fail(ATTN_E_ZERO_SIZE, "%s is 0", !capacity ? "capacity" : !h_kv ? "h_kv" : !d ? "d" : "dv");
  if (!attn_mul_ok(h_kv, d, &rk) || !attn_mul_ok(h_kv, dv, &rv) || !attn_add_ok(rk, rv, &row) ||
      !attn_add_ok(row, 1, &row) || !attn_mul_ok(capacity, row, &fl) || !attn_mul_ok(fl, sizeof(float), &b) ||
      capacity > SIZE_MAX / sizeof(uint64_t) || !attn_add_ok(b, capacity * sizeof(uint64_t), bytes) ||
      *bytes > (size_t)PTRDIFF_MAX)
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "a cache of capacity %zu, h_kv %zu, d %zu, dv %zu overflows", capacity, h_kv,
                     d, dv);
  return ATTN_OK;
}

attn_status attn_selcache_size(size_t capacity, size_t h_kv, size_t d, size_t dv, size_t *bytes) {
  size_t b = 0;
  attn_status st = attn_sc_bytes(capacity, h_kv, d, dv, &b);
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = b;
  return ATTN_OK;
}

attn_status attn_selcache_init(attn_selcache *c, size_t capacity, size_t h_kv, size_t d, size_t dv, float tau,
                               size_t budget, void *memory, size_t bytes) {
  size_t need = 0;
  attn_status st = attn_sc_bytes(capacity, h_kv, d, dv, &need);
  if (st) return st;
  if (!c || !memory) return attn_fail_null("cache memory", (const void *[]){c, memory});
  if (bytes < need) return attn_fail_ws("bytes", bytes, need);
  if (isnan(tau)) return attn_fail(ATTN_E_BAD_ARGUMENT, "tau is NaN");
  if (budget == 1 || (budget && budget > capacity - 1))
    return attn_fail(ATTN_E_BAD_ARGUMENT, "budget %zu: must be 0 (none) or 2 .. capacity - 1 = %zu", budget,
                     capacity - 1);
  if ((uintptr_t)memory % sizeof(float))
    return attn_fail(ATTN_E_BAD_ARGUMENT, "memory %p is not float-aligned", memory);
  *c = (attn_selcache){capacity, h_kv, d, dv, tau, budget, 0, 0, 0, memory};
  return ATTN_OK;
}

attn_status attn_selcache_live_bytes(const attn_selcache *c, size_t *bytes) {
  if (!c || !bytes) return attn_fail_null("cache bytes", (const void *[]){c, bytes});
  *bytes = c->live * ((c->h_kv * (c->d + c->dv) + 1) * sizeof(float) + sizeof(uint64_t));
  return ATTN_OK;
}

/* Slot `to` takes slot `from`'s token (one token's rows: never the cache). */
static void sc_move(const sc_view *w, size_t from, size_t to) {
  memcpy(w->k + to * w->rk, w->k + from * w->rk, w->rk * sizeof(float));
  memcpy(w->v + to * w->rv, w->v + from * w->rv, w->rv * sizeof(float));
  w->f[to] = w->f[from];
  sc_set_pos(w, to, sc_pos(w, from));
}

static void sc_evict_slot(attn_selcache *c, const sc_view *w, size_t e) {
  if (e != c->live - 1) sc_move(w, c->live - 1, e);
  c->live--;
  c->evicted++;
}

/* The portable vector shim (GNU C vectors: SSE2 on x86-64, Advanced SIMD on AArch64; no ISA
 * flags) for the victim's scans, as compilers do not vectorise a float maximum that must keep
 * NaN semantics. SC_UNROLL vectors per iteration: independent chains. */
enum { SC_UNROLL = 4, SC_GROUP = SC_UNROLL * ATTN_VL };

/* The largest number among F of slots [lo, hi) (NaN skipped; -inf when there is none). */
static float sc_max(const float *f, size_t lo, size_t hi) {
  vf acc[SC_UNROLL];
  for (size_t u = 0; u < SC_UNROLL; u++) acc[u] = vf_set1(-INFINITY);
  size_t e = lo;
  for (; e + SC_GROUP <= hi; e += SC_GROUP)
    for (size_t u = 0; u < SC_UNROLL; u++)
      acc[u] = vf_max(vf_load(f + e + u * ATTN_VL), acc[u]); /* x > acc ? x : acc */
  float m = -INFINITY;
  for (size_t u = 0; u < SC_UNROLL; u++)
    for (size_t i = 0; i < ATTN_VL; i++) m = acc[u][i] > m ? acc[u][i] : m;
  for (; e < hi; e++) m = f[e] > m ? f[e] : m;
  return m;
}

/* Whether one of the SC_GROUP values at f equals x. */
static int sc_group_has(const float *f, float x) {
  const vf v = vf_set1(x);
  vmask hit = vf_eq(vf_load(f), v);
  for (size_t u = 1; u < SC_UNROLL; u++) hit |= vf_eq(vf_load(f + u * ATTN_VL), v);
  int any = 0;
  for (size_t i = 0; i < ATTN_VL; i++) any |= hit[i] != 0;
  return any;
}

/* The slot the budget evicts: the largest F among slots 1 .. live-1 but `newest`, the oldest of
 * equal ones; a NaN F ranks below every number (as it is never >= tau), so NaN slots go only
 * when nothing else is left, the oldest first. SIZE_MAX when no slot qualifies. Two vector
 * passes: the maximum, then the groups of slots holding it, searched one slot at a time for the
 * oldest holder (and every slot when all are NaN). */
static size_t sc_budget_victim(const sc_view *w, size_t live, size_t newest) {
  const float *f = w->f, a = sc_max(f, 1, newest < live ? newest : live), b = sc_max(f, newest + 1, live);
  const float mx = a > b ? a : b;
  size_t best = SIZE_MAX;
  uint64_t best_pos = UINT64_MAX;
  for (size_t g0 = 1; g0 < live; g0 += SC_GROUP) {
    const size_t g1 = live - g0 < SC_GROUP ? live : g0 + SC_GROUP;
    if (mx != -INFINITY && g1 - g0 == SC_GROUP && !sc_group_has(f + g0, mx)) continue;
    for (size_t e = g0; e < g1; e++) {
      const float x = f[e];
      if (e == newest || !(x == mx || (mx == -INFINITY && x != x))) continue;
      const uint64_t pos = sc_pos(w, e);
      if (pos < best_pos) best = e, best_pos = pos;
    }
  }
  return best;
}

/* Eviction (spec 6, step 3): F >= tau, then the budget (sc_budget_victim); BOS and the newest
 * token stay. BOS is slot 0 for good (slot 0 is never evicted, so never refilled); the newest
 * starts in the last slot and moves only when that slot refills another. */
void attn_sc_evict(attn_selcache *c) {
  const sc_view w = sc_view_of(c);
  size_t newest = c->live - 1;
  for (size_t e = 1; c->tau != INFINITY && e < c->live;) {
    if (e != newest && w.f[e] >= c->tau) {
      if (newest == c->live - 1) newest = e; /* the last slot (the newest) moves into e */
      sc_evict_slot(c, &w, e);               /* slot e now holds another token: look at it again */
      if (newest == e) e++;
    } else {
      e++;
    }
  }
  while (c->budget && c->live > c->budget) {
    const size_t best = sc_budget_victim(&w, c->live, newest);
    if (best == SIZE_MAX) break;
    if (newest == c->live - 1) newest = best;
    sc_evict_slot(c, &w, best);
  }
}

/* The cache's shape against a descriptor's. */
