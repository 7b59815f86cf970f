/* The scan's waves (engine/chunkwise.h): groups of chunks, a task per head and group, each task's
 * steps on one worker, and only each group's state after it moving between workers. */
#include "engine/chunkwise/internal.h"

#include <stdatomic.h>

/* Chunk k in a slot: D (then S before it) at 0, its rows, offsets and b at the slot layout's places. */
static cw_chunk cw_slot_chunk(const attn_chunkwise_plan *p, float *slot, size_t k) {
  const size_t aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv);
  return (cw_chunk){.k = k,
                    .t0 = k * p->C,
                    .cn = p->xg ? 0 : attn_min_sz(p->C, aligned - k * p->C),
                    .D = slot,
                    .kf = slot + p->sl.kf,
                    .va = slot + p->sl.va,
                    .kl = slot + p->sl.kl,
                    .dl = slot + p->sl.dl,
                    .b = p->sl.b ? (double *)(void *)(slot + p->sl.b) : NULL,
                    .finite = p->xg || slot[p->sl.fin] != 0.0f};
}

/* Step 1 of chunk k (engine/chunkwise.h, the waves): its rows and local state in the slot, kept
 * for step 4 with Va's finiteness. */
static void cw_slot_absorb(const cw_ctx *x, const cw_transition *tr, float *slot, size_t k) {
  cw_chunk c = cw_slot_chunk(x->p, slot, k);
  (void)tr->load(x, NULL, &c, CW_FOR_ABSORB);
  tr->local(x, &c);
  if (!x->p->xg) slot[x->p->sl.fin] = (float)c.finite;
}

/* Step 3 of chunk k: S moves past it; with keep, the slot gets S as it was. */
static void cw_slot_combine(const cw_ctx *x, const cw_transition *tr, float *S, float *slot, size_t k, int keep) {
  const cw_chunk c = cw_slot_chunk(x->p, slot, k);
  tr->combine(x, S, &c, keep);
}

/* Step 4 of chunk k of head h: its outputs from its slot (S before it, its rows); copy: m x lds
 * floats of the worker's scratch. */
static void cw_slot_query(const cw_ctx *x, const cw_transition *tr, float *slot, size_t h, size_t k, float *copy) {
  cw_chunk c = cw_slot_chunk(x->p, slot, k);
  (void)tr->load(x, NULL, &c, CW_FOR_QUERY);
  tr->outputs(x, slot, &c, h, copy);
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
  const cw_transition *tr = attn_cw_transition(p);
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
      cw_slot_absorb(x, tr, spare, k);
      cw_slot_combine(x, tr, X, spare, k, 0);
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
  const cw_transition *tr = attn_cw_transition(p);
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
      cw_chunk ck = cw_slot_chunk(p, spare, k);
      (void)attn_cw_chunk(tr, &x, X, &ck, h, ws + p->wl.s);
    }
    return;
  }
  attn_cw_prefetch_chunk(&x, h, k0, 0, 1);
  for (size_t k = k0; k < k1; k++) {
    if (k + 1 < k1) attn_cw_prefetch_chunk(&x, h, k + 1, 0, 1);
    cw_slot_absorb(&x, tr, slots + (k - k0) * p->scan_slot, k);
  }
  float *A = cw_wave_after(c, h, i); /* the state moves in place: nobody reads it before CW_DONE */
  cw_wave_before(c, &x, h, i, A, spare);
  for (size_t k = k0; k < k1; k++) cw_slot_combine(&x, tr, A, slots + (k - k0) * p->scan_slot, k, 1);
  atomic_store_explicit(st, CW_DONE, memory_order_release);
  attn_cw_prefetch_chunk(&x, h, k0, 1, 0);
  for (size_t k = k0; k < k1; k++) {
    if (k + 1 < k1) attn_cw_prefetch_chunk(&x, h, k + 1, 1, 0);
    cw_slot_query(&x, tr, slots + (k - k0) * p->scan_slot, h, k, ws + p->wl.s);
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
