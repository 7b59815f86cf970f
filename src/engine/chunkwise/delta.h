/* The delta rule's transition (engine/chunkwise.h, its last section): the private interface of
 * its files, each calling only those listed before it (and the chunkwise engine's transition.c,
 * whose per-chunk routine runs its phases):
 *   delta_plan.c   the plan and the scratch layout
 *   delta_local.c  a chunk's local phase: rows, decays, L, A, X = (I + L)^-1, U and W'
 *   delta_chunk.c  the transition (load, local, outputs, absorb, step) and its schedule */
#ifndef ATTN_ENGINE_CHUNKWISE_DELTA_H
#define ATTN_ENGINE_CHUNKWISE_DELTA_H

#include "engine/chunkwise/internal.h"

/* One value head's task on a worker's scratch: its regions, heads and state. */
typedef struct dl_ctx {
  const attn_delta_plan *p;
  const struct attn_ukernels *uk;
  const attn_delta_io *io;
  float *q, *k, *kg, *kn, *kt, *kr, *w, *vb, *u, *l, *a, *x, *rs, *e;
  float *oc; /* half outputs: the rows in fp32 first */
  double *b;
  size_t h, hk; /* value head, key head */
} dl_ctx;

static inline const float *dl_row(const float *base, attn_layout l, size_t t, size_t h) {
  return base + t * l.row_stride + h * l.head_stride;
}

/* Rows [j0, j0 + cn) of the head's q, k (normalised, q scaled) and v (times beta) into the
 * scratch; 0 when one of them holds a non-finite value (nothing else is then computed). */
ATTN_INTERNAL int attn_delta_load(const dl_ctx *x, size_t j0, size_t cn);
/* The local phase of a loaded chunk: b, L (into x->l, then X into x->x), A, U, W' and, from the
 * decays, kn (with a decay only), the queries' decayed rows (in q) and the state's row scales (rs). */
ATTN_INTERNAL void attn_delta_local(const dl_ctx *x, size_t j0, size_t cn);
/* Token t's normalised, scaled query and normalised key into qv and kv (d floats each); a row
 * that holds a non-finite element comes out NaN in every element (the non-finite policy). */
ATTN_INTERNAL void attn_delta_token(const dl_ctx *x, size_t t, float *qv, float *kv);

#endif
