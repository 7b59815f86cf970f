/*
 * A batch of selective caches stepped in one call (attn.h: attn_selcache_step_batch): every
 * cache's step as attn_selcache_step makes it (ops/selcache_call.c), the attention of all of them
 * in one dispatch of the blocked engine's batch schedule (engine/blocked_batch.h), each sequence
 * whole on one worker. Checked in full before any cache changes.
 */
#include "engine/blocked_batch.h"
#include "ops/selcache_internal.h"

/* A checked batch: the new tokens' call (desc over count tokens: their spans), the engine's batch
 * over each cache's step and the workspace (the records, then the engine's). */
typedef struct scb_call {
  attn_blocked_call in;
  attn_blocked_batch eb;
  size_t rec_bytes, bytes;
} scb_call;

/* Cache b's step: its plan over `live` slots (the step's own, or capacity for the workspace query). */
static attn_status scb_plan(const attn_selective_desc *d, const attn_selcache *c, size_t live,
                            attn_blocked_call *call) {
  const attn_selective_desc s = attn_sc_step_desc(d, c, live);
  return attn_sel_prepare(&s, call);
}

/* The descriptor, the caches (each valid, matching, distinct; not full unless sizing) and the
 * workspace of their steps (sizing: for steps over every slot). */
static attn_status scb_prepare(const attn_selective_desc *d, attn_selcache *const *caches, size_t count, int sizing,
                               scb_call *x) {
  attn_status st;
  if (!d || !caches) return attn_fail_null("desc caches", (const void *[]){d, caches});
  if (!count) return attn_fail(ATTN_E_ZERO_SIZE, "count is 0");
  if ((st = attn_sel_check(d, &x->in))) return st;
  if (d->shape.n_q != count || d->shape.n_kv != count)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.n_q %zu, shape.n_kv %zu: a batch step takes one token a cache (%zu)",
                     d->shape.n_q, d->shape.n_kv, count);
  x->eb = (attn_blocked_batch){0};
  for (size_t b = 0; b < count; b++) {
    const attn_selcache *c = caches[b];
    if (!c) return attn_fail(ATTN_E_NULL_POINTER, "caches[%zu] is NULL", b);
    if ((st = attn_sc_check(c, d, "caches[b]"))) return st;
    if (!sizing && c->live >= c->capacity)
      return attn_fail(ATTN_E_WORKSPACE_TOO_SMALL, "caches[%zu] is full: live %zu = capacity %zu", b, c->live,
                       c->capacity);
    size_t mem;
    (void)attn_sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &mem);
    for (size_t a = 0; a < b; a++) {
      size_t ma;
      (void)attn_sc_bytes(caches[a]->capacity, caches[a]->h_kv, caches[a]->d, caches[a]->dv, &ma);
      if (attn_overlap(c->memory, mem, caches[a]->memory, ma))
        return attn_fail(ATTN_E_ALIASING, "caches[%zu] and caches[%zu] share memory (a cache steps once a call)", a, b);
    }
    attn_blocked_call call;
    if ((st = scb_plan(d, c, sizing ? c->capacity : c->live + 1, &call))) return st;
    if (attn_blocked_batch_add(&x->eb, &call.plan))
      return attn_fail(ATTN_E_SIZE_OVERFLOW, "the batch's workspace overflows");
  }
  if (attn_blocked_batch_bytes(&x->eb, &x->rec_bytes, &x->bytes))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the batch's workspace overflows");
  return ATTN_OK;
}

attn_status attn_selcache_step_batch_workspace_size(const attn_selective_desc *d, attn_selcache *const *caches,
                                                    size_t count, size_t *bytes) {
  scb_call x;
  const attn_status st = scb_prepare(d, caches, count, 1, &x);
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = x.bytes;
  return ATTN_OK;
}

/* No cache's memory overlaps q, k, v (their spans), o, lse or the workspace. */
static attn_status scb_check_memory(const scb_call *x, attn_selcache *const *caches, size_t count, const void *q,
                                    const void *k, const void *v, void *const *out, const size_t *out_bytes) {
  static const char *const names[] = {"o", "lse", "workspace"};
  const void *const in[] = {q, k, v};
  const size_t in_bytes[] = {x->in.sp.q * x->in.sp.q_elem, x->in.sp.k * x->in.sp.kv_elem,
                             x->in.sp.v * x->in.sp.kv_elem};
  for (size_t b = 0; b < count; b++) {
    const attn_selcache *c = caches[b];
    size_t mem;
    (void)attn_sc_bytes(c->capacity, c->h_kv, c->d, c->dv, &mem);
    for (size_t i = 0; i < 3; i++) {
      if (attn_overlap(c->memory, mem, in[i], in_bytes[i]))
        return attn_fail(ATTN_E_ALIASING, "caches[%zu]'s memory overlaps input %c", b, "qkv"[i]);
      if (out[i] && attn_overlap(c->memory, mem, out[i], out_bytes[i]))
        return attn_fail(ATTN_E_ALIASING, "caches[%zu]'s memory overlaps %s", b, names[i]);
    }
  }
  return ATTN_OK;
}

attn_status attn_selcache_step_batch(const attn_selective_desc *d, attn_selcache *const *caches, size_t count,
                                     const void *q, const void *k, const void *v, void *o, float *lse, void *workspace,
                                     size_t workspace_size) {
  scb_call x;
  attn_status st = scb_prepare(d, caches, count, 0, &x);
  if (st) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, 0, 0))) return st; /* its size: checked below */
  if (workspace_size < x.bytes) return attn_fail_ws("workspace_size", workspace_size, x.bytes);
  const attn_spans *sp = &x.in.sp;
  void *out[] = {o, lse, workspace};
  const size_t out_bytes[] = {sp->o * sp->o_elem, x.in.aux_span * sizeof(float), workspace_size};
  if ((st = attn_check_io(sp, q, k, v, out, out_bytes, 3)))
    return attn_fail_io("o lse workspace", sp, q, k, v, out, out_bytes, 3);
  if ((st = scb_check_memory(&x, caches, count, q, k, v, out, out_bytes))) return st;
  /* every new token into its cache (F = 0), and its step's record: the attention over its live
   * slots, whose selection the engine adds to F (attn_selcache_step's (1) and (2)) */
  char *base = (char *)attn_ws_base(workspace);
  attn_blocked_seq *recs = (attn_blocked_seq *)(void *)base;
  const size_t ke = attn_dtype_size(d->shape.kv_type);
  for (size_t b = 0; b < count; b++) {
    attn_selcache *c = caches[b];
    const sc_view w = sc_view_of(c);
    attn_sc_put(x.in.uk, w.k, w.rk, c->live, (const char *)k + b * d->shape.k.row_stride * ke, d->shape.k,
                d->shape.kv_type, 1, c->h_kv, c->d);
    attn_sc_put(x.in.uk, w.v, w.rv, c->live, (const char *)v + b * d->shape.v.row_stride * ke, d->shape.v,
                d->shape.kv_type, 1, c->h_kv, c->dv);
    w.f[c->live] = 0.0f;
    sc_set_pos(&w, c->live, (uint64_t)c->tokens);
    c->live++;
    c->tokens++;
    attn_blocked_seq *r = &recs[b];
    r->shape = attn_sc_step_desc(d, c, c->live).shape;
    (void)attn_sel_plan(d, &r->shape, x.in.uk, &r->plan); /* as scb_prepare planned it */
    r->io = (attn_blocked_io){.q = attn_act_at(q, sp->q_elem, d->shape.q, b, 0),
                              .k = w.k,
                              .v = w.v,
                              .o = (void *)attn_act_at(o, sp->o_elem, d->shape.o, b, 0),
                              .aux = lse ? lse + b * d->lse.row_stride : NULL,
                              .aux_layout = d->lse,
                              .sel_f = w.f};
  }
  x.eb.seqs = recs;
  attn_blocked_batch_place(&x.eb);
  attn_blocked_run_batch(&x.eb, d->shape.threads, x.in.uk, (float *)(void *)(base + x.rec_bytes));
  for (size_t b = 0; b < count; b++) attn_sc_evict(caches[b]); /* (3) */
  return ATTN_OK;
}
