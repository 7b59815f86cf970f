/* FLASH's chunk-exclusive causal form (engine/chunkwise.h): its rounds, their queries' outputs from
 * the state before the round, and their keys absorbed. */
#include "engine/chunkwise/internal.h"

/* FLASH's chunk-exclusive causal form (plan xg = G), round k: the queries at key positions
 * [kG, (k+1)G) (the first round also those before every key) are [*qa, *qb); they read the state as
 * it was before the round's keys. Returns whether those keys are then absorbed: only a complete
 * chunk is, and the rounds end with the first that is not. */
int attn_cw_xround(const attn_chunkwise_plan *p, size_t k, size_t *qa, size_t *qb) {
  const size_t nkv = p->shape->n_kv, G = p->xg, c0 = k * G, c1 = attn_min_sz(nkv, c0 + G);
  const int64_t off = (int64_t)nkv - (int64_t)p->shape->n_q; /* query t sits at key position off + t */
  const int64_t a = k == 0 ? 0 : (int64_t)c0 - off, b = (int64_t)c1 - off;
  *qa = a < 0 ? 0 : (size_t)a, *qb = b < 0 ? 0 : (size_t)b;
  return c1 - c0 == G;
}

/* The exclusive form: outputs of queries [qa, qb) of state head h from S (no intra term). */
void attn_cw_xquery(const cw_ctx *x, const float *S, size_t h, size_t qa, size_t qb) {
  const attn_chunkwise_plan *p = x->p;
  for (size_t gi = 0; gi < p->per; gi++)
    for (size_t i0 = qa; i0 < qb; i0 += p->C)
      attn_cw_query(x, S, h * p->per + gi, i0, attn_min_sz(p->C, qb - i0), 0, 1);
}

/* The exclusive form: round k's G keys absorbed into T, C at a time: accumulated into S (the
 * serial loop), or T = their local state D (the scan, engine/chunkwise.h). */
void attn_cw_xabsorb(const cw_ctx *x, float *T, size_t k, int accumulate) {
  const attn_chunkwise_plan *p = x->p;
  const size_t c0 = k * p->xg, c1 = c0 + p->xg;
  for (size_t j0 = c0; j0 < c1; j0 += p->C) {
    const size_t cn = attn_min_sz(p->C, c1 - j0);
    attn_cw_load_kv(x, j0, cn);
    attn_cw_absorb_to(x, x->kf, T, cn, accumulate || j0 > c0);
  }
}
