/*
 * Selective attention (attn.h, spec 6): softmax attention's blocked engine and score step with
 * the engine's selection (engine/blocked.h, attn_blocked_select): per key block, head h_sel's
 * scores give F, which every head's scores lose before the online softmax. This file holds the
 * descriptor, its validation and the caller's F array. Statistics (attn_selective_stats): the
 * softmax step's, over the reduced logits s - F.
 */
#include "engine/blocked.h"
#include "simd/vf_scalar.h"

attn_status attn_selective_desc_init(attn_selective_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                                     size_t dim, size_t dv) {
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  *d = (attn_selective_desc){0};
  attn_shape_init(&d->shape, n_q, n_kv, h_q, h_kv, h_kv, dim, dv);
  d->scale = dim ? (float)(1.0 / sqrt((double)dim)) : 1.0f;
  d->lse = (attn_layout){h_q, 1};
  return ATTN_OK;
}

/* The descriptor's checks (attn_blocked_call_check and h_sel), without a plan. */
static attn_status sel_check(const attn_selective_desc *d, attn_blocked_call *c) {
  attn_status st;
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  if ((st = attn_blocked_call_check(c, &d->shape, d->scale, &d->lse))) return st;
  if (d->h_sel >= d->shape.h_q)
    return attn_fail(ATTN_E_BAD_HEADS, "desc.h_sel %zu >= shape.h_q %zu", d->h_sel, d->shape.h_q);
  return ATTN_OK;
}

static attn_status sel_prepare(const attn_selective_desc *d, attn_blocked_call *c) {
  attn_status st = sel_check(d, c);
  if (st) return st;
  const attn_blocked_select sel = {d->h_sel};
  return attn_blocked_plan_make(&c->plan, &d->shape, attn_mask_causal(), d->scale, &attn_softmax_score_step, NULL, NULL,
                                &sel, c->uk);
}

attn_status attn_selective_workspace_size(const attn_selective_desc *d, size_t *bytes) {
  attn_blocked_call c;
  attn_status st = sel_prepare(d, &c);
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = c.plan.scratch_bytes;
  return ATTN_OK;
}

/* attn_selective, with the statistics when `want` (stats validated; NULL is then an error). */
static attn_status sel_run(const attn_selective_desc *d, const float *q, const void *k, const void *v, float *o,
                           float *lse, float *f, int want, const attn_row_stats *stats, void *workspace,
                           size_t workspace_size) {
  attn_blocked_call c;
  attn_status st = sel_prepare(d, &c);
  if (st) return st;
  if (!q || !k || !v || !o || !f || !workspace)
    return attn_fail_null("q k v o f workspace", (const void *[]){q, k, v, o, f, workspace});
  if (workspace_size < c.plan.scratch_bytes)
    return attn_fail_ws("workspace_size", workspace_size, c.plan.scratch_bytes);
  const size_t nkv = d->shape.n_kv, f_bytes = nkv * sizeof(float); /* nkv <= span of k: no overflow */
  void *out[7] = {o, lse, workspace, f};
  size_t out_bytes[7] = {c.sp.o * sizeof(float), c.aux_span * sizeof(float), workspace_size, f_bytes}, n = 4;
  if (want && (st = attn_blocked_stats_outputs(&c, stats, out, out_bytes, &n))) return st;
  if ((st = attn_check_io(&c.sp, q, k, v, out, out_bytes, n)))
    return attn_fail_io("o lse workspace f stats.entropy stats.sparsity stats.count", &c.sp, q, k, v, out, out_bytes,
                        n);
  /* the call's own keys start with F = 0 (no query before them has selected them) */
  const size_t first_new = d->shape.n_q < nkv ? nkv - d->shape.n_q : 0;
  for (size_t j = first_new; j < nkv; j++) f[j] = 0.0f;
  const attn_blocked_io io = {q, k, v, o, lse, d->lse, f, want ? stats : NULL};
  attn_blocked_run_all(&c.plan, c.uk, &io, attn_ws_base(workspace));
  return ATTN_OK;
}

attn_status attn_selective(const attn_selective_desc *d, const float *q, const void *k, const void *v, float *o,
                           float *lse, float *f, void *workspace, size_t workspace_size) {
  return sel_run(d, q, k, v, o, lse, f, 0, NULL, workspace, workspace_size);
}

attn_status attn_selective_stats(const attn_selective_desc *d, const float *q, const void *k, const void *v, float *o,
                                 float *lse, float *f, const attn_row_stats *stats, void *workspace,
                                 size_t workspace_size) {
  return sel_run(d, q, k, v, o, lse, f, 1, stats, workspace, workspace_size);
}

/* ---- the selective KV cache (attn_selcache) ---- */

/* Its memory: K [capacity][h_kv][d], V [capacity][h_kv][dv], F [capacity] floats, then a
 * position per slot (uint64, through memcpy: the memory need only be float-aligned). Live tokens
 * fill slots 0 .. live-1; BOS, never evicted, stays in slot 0. */
typedef struct sc_view {
  float *k, *v, *f;
  unsigned char *pos;
  size_t rk, rv; /* floats of a slot's K and V rows */
} sc_view;

static attn_status sc_bytes(size_t capacity, size_t h_kv, size_t d, size_t dv, size_t *bytes) {
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

static sc_view sc_view_of(const attn_selcache *c) {
  float *base = c->memory;
  const size_t rk = c->h_kv * c->d, rv = c->h_kv * c->dv;
  float *k = base, *v = k + c->capacity * rk, *f = v + c->capacity * rv;
  return (sc_view){k, v, f, (unsigned char *)(f + c->capacity), rk, rv};
}

static uint64_t sc_pos(const sc_view *w, size_t slot) {
  uint64_t p;
  memcpy(&p, w->pos + slot * sizeof p, sizeof p);
  return p;
}
static void sc_set_pos(const sc_view *w, size_t slot, uint64_t p) { memcpy(w->pos + slot * sizeof p, &p, sizeof p); }

attn_status attn_selcache_size(size_t capacity, size_t h_kv, size_t d, size_t dv, size_t *bytes) {
  size_t b = 0;
  attn_status st = sc_bytes(capacity, h_kv, d, dv, &b);
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = b;
  return ATTN_OK;
}

attn_status attn_selcache_init(attn_selcache *c, size_t capacity, size_t h_kv, size_t d, size_t dv, float tau,
                               size_t budget, void *memory, size_t bytes) {
  size_t need = 0;
  attn_status st = sc_bytes(capacity, h_kv, d, dv, &need);
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
static void sc_evict(attn_selcache *c) {
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
static int sc_matches(const attn_selcache *c, const attn_selective_desc *d) {
  return c->h_kv == d->shape.h_k && c->d == d->shape.d && c->dv == d->shape.dv;
}

static int sc_valid(const attn_selcache *c) {
  size_t b;
  return c->memory && !sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &b) && c->live <= c->capacity;
}

/* Why sc_valid refused the cache `name`. */
static ATTN_COLD attn_status sc_invalid(const char *name, const attn_selcache *c) {
  if (!c->memory) return attn_fail(ATTN_E_BAD_ARGUMENT, "%s->memory is NULL: not initialised", name);
  if (c->live > c->capacity)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "%s->live %zu > %s->capacity %zu", name, c->live, name, c->capacity);
  return attn_fail(ATTN_E_BAD_ARGUMENT, "%s: capacity %zu, h_kv %zu, d %zu, dv %zu are not a cache's sizes", name,
                   c->capacity, c->h_kv, c->d, c->dv);
}

/* Why sc_matches refused the cache for desc. */
static ATTN_COLD attn_status sc_mismatch(const attn_selcache *c, const attn_selective_desc *d) {
  const size_t have[] = {c->h_kv, c->d, c->dv}, want[] = {d->shape.h_k, d->shape.d, d->shape.dv};
  size_t i = 0;
  while (i < 2 && have[i] == want[i]) i++;
  static const char *const names[] = {"h_kv", "d", "dv"}, *const fields[] = {"h_k", "d", "dv"};
  return attn_fail(ATTN_E_STATE_MISMATCH, "cache has %s %zu, the call's shape.%s is %zu", names[i], have[i], fields[i],
                   want[i]);
}

/* Copy n token rows of h heads x w elements from a tensor (layout l, elements of type ty) into
 * slots [s0, s0 + n): fp32 copied, fp16 / bf16 converted (exactly) by the path's kernel. */
static void sc_put(const struct attn_ukernels *uk, float *dst, size_t rows_floats, size_t s0, const void *src,
                   attn_layout l, attn_dtype ty, size_t n, size_t h, size_t w) {
  for (size_t t = 0; t < n; t++)
    for (size_t hh = 0; hh < h; hh++) {
      const size_t e = t * l.row_stride + hh * l.head_stride;
      float *to = dst + (s0 + t) * rows_floats + hh * w;
      if (ty == ATTN_F32)
        memcpy(to, (const float *)src + e, w * sizeof(float));
      else
        (ty == ATTN_F16 ? uk->f16_cvt : uk->bf16_cvt)(1, w, (const uint16_t *)src + e, 0, to);
    }
}

attn_status attn_selcache_load(attn_selcache *c, const attn_selective_desc *d, const void *k, const void *v,
                               const float *f) {
  attn_blocked_call call;
  attn_status st = sel_prepare(d, &call);
  if (st) return st;
  if (!c || !k || !v || !f) return attn_fail_null("cache k v f", (const void *[]){c, k, v, f});
  if (!sc_valid(c)) return sc_invalid("cache", c);
  if (!sc_matches(c, d)) return sc_mismatch(c, d);
  const size_t n = d->shape.n_kv;
  if (n > c->capacity - c->live)
    return attn_fail(ATTN_E_WORKSPACE_TOO_SMALL, "shape.n_kv %zu > the cache's %zu free slots (capacity %zu)", n,
                     c->capacity - c->live, c->capacity);
  size_t mem, fn;
  (void)sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &mem);
  if (!attn_add_ok(c->tokens, n, &fn) || fn > (size_t)PTRDIFF_MAX / sizeof(float))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "cache->tokens %zu + shape.n_kv %zu overflows", c->tokens, n);
  if (attn_overlap(c->memory, mem, k, call.sp.k * call.sp.kv_elem))
    return attn_fail(ATTN_E_ALIASING, "cache memory overlaps input k");
  if (attn_overlap(c->memory, mem, v, call.sp.v * call.sp.kv_elem))
    return attn_fail(ATTN_E_ALIASING, "cache memory overlaps input v");
  if (attn_overlap(c->memory, mem, f, fn * sizeof(float)))
    return attn_fail(ATTN_E_ALIASING, "cache memory overlaps input f");
  const sc_view w = sc_view_of(c);
  for (size_t e = 0; e < c->live; e++) w.f[e] = f[sc_pos(&w, e)]; /* the live tokens' F now */
  sc_put(call.uk, w.k, w.rk, c->live, k, d->shape.k, d->shape.kv_type, n, c->h_kv, c->d);
  sc_put(call.uk, w.v, w.rv, c->live, v, d->shape.v, d->shape.kv_type, n, c->h_kv, c->dv);
  for (size_t t = 0; t < n; t++) {
    w.f[c->live + t] = f[c->tokens + t];
    sc_set_pos(&w, c->live + t, (uint64_t)(c->tokens + t));
  }
  c->live += n;
  c->tokens += n;
  sc_evict(c);
  return ATTN_OK;
}

/* The descriptor of a step's attention over the live slots (n_kv = live) in the cache's layout. */
static attn_selective_desc sc_step_desc(const attn_selective_desc *d, const attn_selcache *c, size_t live) {
  attn_selective_desc s = *d;
  s.shape.n_kv = live;
  s.shape.k = (attn_layout){c->h_kv * c->d, c->d};
  s.shape.v = (attn_layout){c->h_kv * c->dv, c->dv};
  s.shape.kv_type = ATTN_F32; /* the cache holds fp32 K and V, whatever the new token's type */
  return s;
}

attn_status attn_selcache_workspace_size(const attn_selective_desc *d, const attn_selcache *c, size_t *bytes) {
  if (!d || !c) return attn_fail_null("desc cache", (const void *[]){d, c});
  if (!sc_valid(c)) return sc_invalid("cache", c);
  if (!sc_matches(c, d)) return sc_mismatch(c, d);
  const attn_selective_desc s = sc_step_desc(d, c, c->capacity);
  return attn_selective_workspace_size(&s, bytes);
}

attn_status attn_selcache_step(const attn_selective_desc *d, attn_selcache *c, const float *q, const void *k,
                               const void *v, float *o, float *lse, void *workspace, size_t workspace_size) {
  if (!d || !c) return attn_fail_null("desc cache", (const void *[]){d, c});
  attn_blocked_call in; /* the new token's tensors, checked as a one-token call of desc (no plan) */
  attn_status st = sel_check(d, &in);
  if (st) return st;
  if (d->shape.n_q != 1 || d->shape.n_kv != 1)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.n_q %zu, shape.n_kv %zu: a cache step takes one token (1, 1)",
                     d->shape.n_q, d->shape.n_kv);
  if (!sc_valid(c)) return sc_invalid("cache", c);
  if (!sc_matches(c, d)) return sc_mismatch(c, d);
  if (!q || !k || !v || !o || !workspace)
    return attn_fail_null("q k v o workspace", (const void *[]){q, k, v, o, workspace});
  if (c->live >= c->capacity)
    return attn_fail(ATTN_E_WORKSPACE_TOO_SMALL, "the cache is full: live %zu = capacity %zu", c->live, c->capacity);
  const attn_selective_desc s = sc_step_desc(d, c, c->live + 1);
  attn_blocked_call call;
  if ((st = sel_prepare(&s, &call))) return st;
  if (workspace_size < call.plan.scratch_bytes)
    return attn_fail_ws("workspace_size", workspace_size, call.plan.scratch_bytes);
  size_t mem;
  (void)sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &mem);
  void *out[] = {o, lse, workspace, c->memory};
  const size_t out_bytes[] = {in.sp.o * sizeof(float), in.aux_span * sizeof(float), workspace_size, mem};
  if ((st = attn_check_io(&in.sp, q, k, v, out, out_bytes, 4)))
    return attn_fail_io("o lse workspace cache_memory", &in.sp, q, k, v, out, out_bytes, 4);
  /* (1) the new token in the next slot, F = 0; attention over the live slots with the current F,
   * (2) whose selection the engine adds to F of every slot but BOS (slot 0) and the new one */
  const sc_view w = sc_view_of(c);
  sc_put(call.uk, w.k, w.rk, c->live, k, d->shape.k, d->shape.kv_type, 1, c->h_kv, c->d);
  sc_put(call.uk, w.v, w.rv, c->live, v, d->shape.v, d->shape.kv_type, 1, c->h_kv, c->dv);
  w.f[c->live] = 0.0f;
  sc_set_pos(&w, c->live, (uint64_t)c->tokens);
  c->live++;
  c->tokens++;
  const attn_blocked_io io = {q, w.k, w.v, o, lse, d->lse, w.f, NULL};
  attn_blocked_run_all(&call.plan, call.uk, &io, attn_ws_base(workspace));
  sc_evict(c); /* (3) */
  return ATTN_OK;
}

attn_status attn_selcache_copy(attn_selcache *dst, const attn_selcache *src) {
  if (!dst || !src) return attn_fail_null("dst src", (const void *[]){dst, src});
  if (!sc_valid(dst)) return sc_invalid("dst", dst);
  if (!sc_valid(src)) return sc_invalid("src", src);
  if (dst->capacity != src->capacity || dst->h_kv != src->h_kv || dst->d != src->d || dst->dv != src->dv)
    return attn_fail(ATTN_E_STATE_MISMATCH,
                     "dst (capacity %zu, h_kv %zu, d %zu, dv %zu) and src (%zu, %zu, %zu, %zu) differ", dst->capacity,
                     dst->h_kv, dst->d, dst->dv, src->capacity, src->h_kv, src->d, src->dv);
  if (dst->memory != src->memory) {
    size_t mem;
    (void)sc_bytes(src->capacity, src->h_kv, src->d, src->dv, &mem);
    if (attn_overlap(dst->memory, mem, src->memory, mem))
      return attn_fail(ATTN_E_ALIASING, "dst->memory overlaps src->memory (and is not the same)");
    memcpy(dst->memory, src->memory, mem);
  }
  void *keep = dst->memory;
  *dst = *src;
  dst->memory = keep;
  return ATTN_OK;
}
