/*
 * The selective KV cache's calls (attn.h): load (a prefill's keys), step (a decode step over the
 * live tokens) and copy.
 */
#include "ops/selcache_internal.h"

static int sc_matches(const attn_selcache *c, const attn_selective_desc *d) {
  return c->h_kv == d->shape.h_k && c->d == d->shape.d && c->dv == d->shape.dv;
}

static int sc_valid(const attn_selcache *c) {
  size_t b;
  return c->memory && !attn_sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &b) && c->live <= c->capacity;
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

/* The cache `name` is initialised (ATTN_E_BAD_ARGUMENT) and, desc non-NULL, of its heads and widths
 * (ATTN_E_STATE_MISMATCH). */
attn_status attn_sc_check(const attn_selcache *c, const attn_selective_desc *d, const char *name) {
  if (!sc_valid(c)) return sc_invalid(name, c);
  if (d && !sc_matches(c, d)) return sc_mismatch(c, d);
  return ATTN_OK;
}

/* Copy n token rows of h heads x w elements from a tensor (layout l, elements of type ty) into
 * slots [s0, s0 + n): fp32 copied, fp16 / bf16 converted (exactly) by the path's kernel. */
void attn_sc_put(const struct attn_ukernels *uk, float *dst, size_t rows_floats, size_t s0, const void *src,
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
  attn_status st = attn_sel_prepare(d, &call);
  if (st) return st;
  if (!c || !k || !v || !f) return attn_fail_null("cache k v f", (const void *[]){c, k, v, f});
  if ((st = attn_sc_check(c, d, "cache"))) return st;
  const size_t n = d->shape.n_kv;
  if (n > c->capacity - c->live)
    return attn_fail(ATTN_E_WORKSPACE_TOO_SMALL, "shape.n_kv %zu > the cache's %zu free slots (capacity %zu)", n,
                     c->capacity - c->live, c->capacity);
  size_t mem, fn;
  (void)attn_sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &mem);
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
  attn_sc_put(call.uk, w.k, w.rk, c->live, k, d->shape.k, d->shape.kv_type, n, c->h_kv, c->d);
  attn_sc_put(call.uk, w.v, w.rv, c->live, v, d->shape.v, d->shape.kv_type, n, c->h_kv, c->dv);
  for (size_t t = 0; t < n; t++) {
    w.f[c->live + t] = f[c->tokens + t];
    sc_set_pos(&w, c->live + t, (uint64_t)(c->tokens + t));
  }
  c->live += n;
  c->tokens += n;
  attn_sc_evict(c);
  return ATTN_OK;
}

attn_status attn_selcache_workspace_size(const attn_selective_desc *d, const attn_selcache *c, size_t *bytes) {
  if (!d || !c) return attn_fail_null("desc cache", (const void *[]){d, c});
  attn_status st;
  if ((st = attn_sc_check(c, d, "cache"))) return st;
  const attn_selective_desc s = attn_sc_step_desc(d, c, c->capacity);
  return attn_selective_workspace_size(&s, bytes);
}

attn_status attn_selcache_step(const attn_selective_desc *d, attn_selcache *c, const void *q, const void *k,
                               const void *v, void *o, float *lse, void *workspace, size_t workspace_size) {
  if (!d || !c) return attn_fail_null("desc cache", (const void *[]){d, c});
  attn_blocked_call in; /* the new token's tensors, checked as a one-token call of desc (no plan) */
  attn_status st = attn_sel_check(d, &in);
  if (st) return st;
  if (d->shape.n_q != 1 || d->shape.n_kv != 1)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.n_q %zu, shape.n_kv %zu: a cache step takes one token (1, 1)",
                     d->shape.n_q, d->shape.n_kv);
  if ((st = attn_sc_check(c, d, "cache"))) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, 0, 0))) return st; /* its size: checked below */
  if (c->live >= c->capacity)
    return attn_fail(ATTN_E_WORKSPACE_TOO_SMALL, "the cache is full: live %zu = capacity %zu", c->live, c->capacity);
  const attn_selective_desc s = attn_sc_step_desc(d, c, c->live + 1);
  attn_blocked_call call;
  if ((st = attn_sel_prepare(&s, &call))) return st;
  if (workspace_size < call.plan.scratch_bytes)
    return attn_fail_ws("workspace_size", workspace_size, call.plan.scratch_bytes);
  size_t mem;
  (void)attn_sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &mem);
  void *out[] = {o, lse, workspace, c->memory};
  const size_t out_bytes[] = {in.sp.o * in.sp.o_elem, in.aux_span * sizeof(float), workspace_size, mem};
  if ((st = attn_check_io(&in.sp, q, k, v, out, out_bytes, 4)))
    return attn_fail_io("o lse workspace cache_memory", &in.sp, q, k, v, out, out_bytes, 4);
  /* (1) the new token in the next slot, F = 0; attention over the live slots with the current F,
   * (2) whose selection the engine adds to F of every slot but BOS (slot 0) and the new one */
  const sc_view w = sc_view_of(c);
  attn_sc_put(call.uk, w.k, w.rk, c->live, k, d->shape.k, d->shape.kv_type, 1, c->h_kv, c->d);
  attn_sc_put(call.uk, w.v, w.rv, c->live, v, d->shape.v, d->shape.kv_type, 1, c->h_kv, c->dv);
  w.f[c->live] = 0.0f;
  sc_set_pos(&w, c->live, (uint64_t)c->tokens);
  c->live++;
  c->tokens++;
  const attn_blocked_io io = {.q = q, .k = w.k, .v = w.v, .o = o, .aux = lse, .aux_layout = d->lse, .sel_f = w.f};
  attn_blocked_run_all(&call.plan, call.uk, &io, attn_ws_base(workspace));
  attn_sc_evict(c); /* (3) */
  return ATTN_OK;
}

attn_status attn_selcache_copy(attn_selcache *dst, const attn_selcache *src) {
  if (!dst || !src) return attn_fail_null("dst src", (const void *[]){dst, src});
  attn_status st;
  if ((st = attn_sc_check(dst, NULL, "dst")) || (st = attn_sc_check(src, NULL, "src"))) return st;
  if (dst->capacity != src->capacity || dst->h_kv != src->h_kv || dst->d != src->d || dst->dv != src->dv)
    return attn_fail(ATTN_E_STATE_MISMATCH,
                     "dst (capacity %zu, h_kv %zu, d %zu, dv %zu) and src (%zu, %zu, %zu, %zu) differ", dst->capacity,
                     dst->h_kv, dst->d, dst->dv, src->capacity, src->h_kv, src->d, src->dv);
  if (dst->memory != src->memory) {
    size_t mem;
    (void)attn_sc_bytes(src->capacity, src->h_kv, src->d, src->dv, &mem);
    if (attn_overlap(dst->memory, mem, src->memory, mem))
      return attn_fail(ATTN_E_ALIASING, "dst->memory overlaps src->memory (and is not the same)");
    memcpy(dst->memory, src->memory, mem);
  }
  void *keep = dst->memory;
  *dst = *src;
  dst->memory = keep;
  return ATTN_OK;
}
