/* The scan's waves (engine/chunkwise.h): groups of chunks, a task per head and group, each task's
 * steps on one worker, and only each group's state after it moving between workers. */
#include "engine/chunkwise/internal.h"

#include <stdatomic.h>

/* Chunk k's first aligned token and length, and its gates on x (attn_cw_gates' uses); a per-feature
 * gate's b in the slot's (the absorb makes it, the outputs read it). */
static void cw_slot_chunk(const attn_chunkwise_plan *p, cw_ctx *x, float *slot, size_t k, int uses, size_t *t0,
                          size_t *cn) {
  const size_t aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv);
  *t0 = k * p->C, *cn = attn_min_sz(p->C, aligned - *t0);
  if (p->sl.b) {
    x->b = (double *)(void *)(slot + p->sl.b);
    if (uses == CW_FOR_QUERY) uses |= CW_B_KEPT;
  }
  if (cw_gated(p)) attn_cw_gates(x, cw_pre_k(p) + *t0, *cn, uses);
}

/* Step 1 of chunk k (engine/chunkwise.h, the waves): its local state D = (Kf (.) dout)^T Va in
 * the slot, with dC in column dv + 1 (maps with offsets: at its own offsets, and their
 * pre-exponential Kf kept), its Kf and Va kept for step 4. */
static void cw_slot_absorb(const cw_ctx *x0, float *slot, size_t k) {
  const attn_chunkwise_plan *p = x0->p;
  cw_ctx x = *x0;
  if (p->xg) { /* the exclusive form: a complete round's D, through the worker's Kf and Va */
    size_t qa, qb;
    if (attn_cw_xround(p, k, &qa, &qb)) attn_cw_xabsorb(&x, slot, k, 0);
    return;
  }
  size_t t0, cn;
  float *D = slot, *kf = D + p->sl.kf;
  cw_slot_chunk(p, &x, slot, k, CW_FOR_ABSORB, &t0, &cn);
  if (p->fm->offsets) { /* the pre-exponential features and Kf, kept for step 4; D at its own offsets */
    x.ku = kf, x.va = D + p->sl.va, x.kf = D + p->sl.kl;
    D[p->sl.fin] = (float)attn_cw_load_kv(&x, cw_pre_k(p) + t0, cn);
    attn_cw_scan_local(&x, kf, D, cn, D + p->sl.dl);
    return;
  }
  x.kf = kf, x.va = D + p->sl.va;
  D[p->sl.fin] = (float)attn_cw_load_kv(&x, cw_pre_k(p) + t0, cn);
  x.kf = x0->kf; /* where a gated absorb scales the features */
  attn_cw_absorb_to(&x, kf, D, cn, 0);
  for (size_t f = 0; p->g.kind != ATTN_GATE_NONE && f < p->m; f++) D[f * p->lds + p->shape->dv + 1] = x.dc[f];
}

/* Step 3 of chunk k: S moves past it, S = dC (.) S + D (maps with offsets: their merge); with
 * keep, the slot gets S as it was, the state before the chunk. */
static void cw_slot_combine(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *slot,
                            size_t k, int keep) {
  size_t qa, qb;
  if (p->xg && !attn_cw_xround(p, k, &qa, &qb)) { /* the exclusive form's last round: kept, not absorbed */
    if (keep) memcpy(slot, S, p->m * p->lds * sizeof(float));
    return;
  }
  if (p->fm->offsets)
    attn_cw_scan_merge(p, uk, S, slot, 0, p->m, keep);
  else
    attn_cw_scan_update(p, uk, S, slot, p->g.kind != ATTN_GATE_NONE ? slot + p->shape->dv + 1 : NULL, p->lds, 0, p->m,
                        keep);
}

/* Step 4 of chunk k of head h: its outputs from its slot (S before it, Kf, Va); maps with offsets
 * may need a copy of S (m x lds floats of the worker's scratch). */
static void cw_slot_query(const cw_ctx *x0, float *slot, size_t h, size_t k, float *copy) {
  const attn_chunkwise_plan *p = x0->p;
  cw_ctx x = *x0;
  if (p->xg) { /* the exclusive form: the round's queries from the state before its keys */
    size_t qa, qb;
    (void)attn_cw_xround(p, k, &qa, &qb);
    attn_cw_xquery(&x, slot, h, qa, qb);
    return;
  }
  size_t t0, cn;
  float *S = slot;
  cw_slot_chunk(p, &x, slot, k, CW_FOR_QUERY, &t0, &cn);
  const int finite = S[p->sl.fin] != 0.0f;
  if (p->fm->offsets) { /* on the slot's S, raised in place, or (a chunk that is cut) on a copy in scratch */
    attn_cw_scan_outputs(&x, S, copy, h, t0, cn, S + p->sl.kf, S + p->sl.kl, S + p->sl.dl, S + p->sl.va, finite);
    return;
  }
  x.kf = S + p->sl.kf, x.va = S + p->sl.va; /* read only: maps without offsets */
  for (size_t gi = 0; gi < p->per; gi++) attn_cw_query(&x, S, h * p->per + gi, cw_pre_q(p) + t0, cn, 1, finite);
}

/* A group's status in a wave: nobody has started it, its state after it is being computed, known. */
enum { CW_FREE, CW_BUSY, CW_DONE };

/* The state after slot i's group of head h (of the wave), and its status. */
static float *cw_wave_after(const cw_par *c, size_t h, size_t i) {
  const attn_chunkwise_plan *p = c->p;
  return c->ws + p->after_region + (h * p->scan_wave + i) * p->scan_after;
}
static atomic_int *cw_wave_status(const cw_par *c, size_t h, size_t i) {
  return (atomic_int *)(void *)(cw_wave_after(c, h, i) + c->p->scan_status);
}

/* Chunks [*k0, *k1) of slot i's group. */
static void cw_wave_span(const cw_par *c, size_t i, size_t *k0, size_t *k1) {
  *k0 = (c->c0 + i) * c->p->scan_group, *k1 = attn_min_sz(c->p->scan_chunks, *k0 + c->p->scan_group);
}

/* X = the state before slot i's group of head h: the nearest earlier group's state after it that
 * is known, or being computed by its task (waited for: that task waits only on earlier ones), or
 * the wave's entry state (step 2); groups between that nobody has started are computed here
 * (steps 1 and 3 on the worker's spare slot) and published. The same bits whoever computes what. */
static void cw_wave_before(const cw_par *c, const cw_ctx *x, size_t h, size_t i, float *X, float *spare) {
  const attn_chunkwise_plan *p = c->p;
  size_t j = i;
  while (j > 0) {
    atomic_int *st = cw_wave_status(c, h, j - 1);
    int seen = CW_FREE;
    if (atomic_compare_exchange_strong_explicit(st, &seen, CW_BUSY, memory_order_acq_rel, memory_order_acquire)) {
      j--; /* nobody had started group j: computed below */
      continue;
    }
    while (seen != CW_DONE) {
      attn_cpu_relax();
      seen = atomic_load_explicit(st, memory_order_acquire);
    }
    break;
  }
  memcpy(X, j ? cw_wave_after(c, h, j - 1) : cw_scan_state(c, h), p->m * p->lds * sizeof(float));
  for (; j < i; j++) {
    size_t k0, k1;
    cw_wave_span(c, j, &k0, &k1);
    for (size_t k = k0; k < k1; k++) {
      cw_slot_absorb(x, spare, k);
      cw_slot_combine(p, x->uk, X, spare, k, 0);
    }
    memcpy(cw_wave_after(c, h, j), X, p->m * p->lds * sizeof(float));
    atomic_store_explicit(cw_wave_status(c, h, j), CW_DONE, memory_order_release);
  }
}

/* A wave's task: head h's group c0 + i. Its chunks' local states first, in the worker's slots
 * (nothing waits for this); then the state before the group (cw_wave_before), the slots get the
 * state before each chunk as the state moves through them, the state after the group is
 * published for the next group's task, and the chunks' outputs come from the slots. Only a
 * group's state after it moves between workers. A group another task already computed (a task
 * that ran first, out of order) runs its chunks one at a time on the spare slot. */
static void cw_wave_task(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  const size_t i = task / p->heads, h = task % p->heads;
  float *ws = c->ws + worker * p->worker_floats, *slots = ws + p->wl.slots, *X = ws + p->wl.x;
  float *spare = slots + p->scan_group * p->scan_slot;
  const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
  atomic_int *st = cw_wave_status(c, h, i);
  size_t k0, k1;
  cw_wave_span(c, i, &k0, &k1);
  int seen = CW_FREE;
  if (!atomic_compare_exchange_strong_explicit(st, &seen, CW_BUSY, memory_order_acq_rel, memory_order_acquire)) {
    cw_wave_before(c, &x, h, i, X, spare);
    for (size_t k = k0; k < k1; k++) {
      cw_slot_absorb(&x, spare, k);
      cw_slot_combine(p, c->uk, X, spare, k, 1);
      cw_slot_query(&x, spare, h, k, ws + p->wl.s);
    }
    return;
  }
  attn_cw_prefetch_chunk(&x, h, k0, 0, 1);
  for (size_t k = k0; k < k1; k++) {
    if (k + 1 < k1) attn_cw_prefetch_chunk(&x, h, k + 1, 0, 1);
    cw_slot_absorb(&x, slots + (k - k0) * p->scan_slot, k);
  }
  float *A = cw_wave_after(c, h, i); /* the state moves in place: nobody reads it before CW_DONE */
  cw_wave_before(c, &x, h, i, A, spare);
  for (size_t k = k0; k < k1; k++) cw_slot_combine(p, c->uk, A, slots + (k - k0) * p->scan_slot, k, 1);
  atomic_store_explicit(st, CW_DONE, memory_order_release);
  attn_cw_prefetch_chunk(&x, h, k0, 1, 0);
  for (size_t k = k0; k < k1; k++) {
    if (k + 1 < k1) attn_cw_prefetch_chunk(&x, h, k + 1, 1, 0);
    cw_slot_query(&x, slots + (k - k0) * p->scan_slot, h, k, ws + p->wl.s);
  }
}

/* The waves (engine/chunkwise.h): every head's lead, then wave after wave up to scan_wave groups of
 * every head, each wave's last states after them becoming the heads' states. */
void attn_cw_waves(cw_par *c) {
  const attn_chunkwise_plan *p = c->p;
  const attn_threads *th = p->shape->threads;
  attn_parallel(th, p->heads, attn_cw_scan_lead, c);
  for (; c->c0 < p->scan_groups; c->c0 += c->wn) {
    c->wn = attn_min_sz(p->scan_wave, p->scan_groups - c->c0);
    for (size_t h = 0; h < p->heads; h++)
      for (size_t i = 0; i < c->wn; i++) atomic_init(cw_wave_status(c, h, i), CW_FREE);
    attn_parallel(th, c->wn * p->heads, cw_wave_task, c);
    for (size_t h = 0; h < p->heads; h++)
      memcpy(cw_scan_state(c, h), cw_wave_after(c, h, c->wn - 1), p->m * p->lds * sizeof(float));
  }
}
