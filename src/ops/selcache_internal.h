/*
 * The selective KV cache's internals (attn.h: attn_selcache), shared by its two files,
 * selcache.c (its memory, sizes and the pruning) and selcache_call.c (load, step and copy).
 */
#ifndef ATTN_OPS_SELCACHE_INTERNAL_H
#define ATTN_OPS_SELCACHE_INTERNAL_H

#include <string.h>

#include "engine/blocked_call.h"

/* Selective attention's checks of a descriptor (no plan), and those with its blocked plan
 * (selective.c): the cache's calls run on them. */
ATTN_INTERNAL attn_status attn_sel_check(const attn_selective_desc *d, attn_blocked_call *c);
ATTN_INTERNAL attn_status attn_sel_prepare(const attn_selective_desc *d, attn_blocked_call *c);
ATTN_INTERNAL attn_status attn_sel_plan(const attn_selective_desc *d, const attn_shape *s,
                                        const struct attn_ukernels *uk, attn_blocked_plan *p);

/* Its memory: K [capacity][h_kv][d], V [capacity][h_kv][dv], F [capacity] floats, then a
 * position per slot (uint64, through memcpy: the memory need only be float-aligned). Live tokens
 * fill slots 0 .. live-1; BOS, never evicted, stays in slot 0. */
typedef struct sc_view {
  float *k, *v, *f;
  unsigned char *pos;
  size_t rk, rv; /* floats of a slot's K and V rows */
} sc_view;

/* Bytes of a cache's memory (statuses: zero sizes, overflow). */
ATTN_INTERNAL attn_status attn_sc_bytes(size_t capacity, size_t h_kv, size_t d, size_t dv, size_t *bytes);
/* Prune to the budget and tau (the step's and the load's last act). */
ATTN_INTERNAL void attn_sc_evict(attn_selcache *c);

/* The cache `name` is initialised (ATTN_E_BAD_ARGUMENT) and, desc non-NULL, of desc's heads and
 * widths (ATTN_E_STATE_MISMATCH). */
ATTN_INTERNAL attn_status attn_sc_check(const attn_selcache *c, const attn_selective_desc *d, const char *name);
/* Copy n token rows of h heads x w elements from a tensor (layout l, elements of type ty) into
 * slots [s0, s0 + n) of K or V (dst, rows_floats a slot): fp32 copied, fp16 / bf16 converted
 * (exactly) by the path's kernel. */
ATTN_INTERNAL void attn_sc_put(const struct attn_ukernels *uk, float *dst, size_t rows_floats, size_t s0,
                               const void *src, attn_layout l, attn_dtype ty, size_t n, size_t h, size_t w);

/* The descriptor of one step's attention over `live` slots of c (one query) in the cache's layout:
 * fp32 K and V, whatever the new token's type. */
static inline attn_selective_desc attn_sc_step_desc(const attn_selective_desc *d, const attn_selcache *c, size_t live) {
  attn_selective_desc s = *d;
  s.shape.n_q = 1;
  s.shape.n_kv = live;
  s.shape.k = (attn_layout){c->h_kv * c->d, c->d};
  s.shape.v = (attn_layout){c->h_kv * c->dv, c->dv};
  s.shape.kv_type = ATTN_F32;
  return s;
}

static inline sc_view sc_view_of(const attn_selcache *c) {
  float *base = c->memory;
  const size_t rk = c->h_kv * c->d, rv = c->h_kv * c->dv;
  float *k = base, *v = k + c->capacity * rk, *f = v + c->capacity * rv;
  return (sc_view){k, v, f, (unsigned char *)(f + c->capacity), rk, rv};
}

static inline uint64_t sc_pos(const sc_view *w, size_t slot) {
  uint64_t p;
  memcpy(&p, w->pos + slot * sizeof p, sizeof p);
  return p;
}
static inline void sc_set_pos(const sc_view *w, size_t slot, uint64_t p) {
  memcpy(w->pos + slot * sizeof p, &p, sizeof p);
}

#endif
