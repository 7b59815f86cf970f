/* The inputs' rows (engine/chunkwise.h): software prefetch of the next chunk's, and the scan by
 * head groups' gather of token-major rows into contiguous ones. */
#include "engine/chunkwise/internal.h"

/* Software prefetch (into L2) of n bytes from a, for reading: the next chunk's input rows. */
static void cw_prefetch_span(const void *a, size_t n) {
  for (size_t i = 0; i < n; i += 64) __builtin_prefetch((const char *)a + i, 0, 2);
}

/* Software prefetch (into L2) of rows [t, t + cn) of the queries of output heads [h0, h0 + per)
 * (tq; SIZE_MAX: none) and of x's keys and values (tk; SIZE_MAX: none): the next chunk's, issued
 * while this one computes, so that its loads do not wait on memory. */
void attn_cw_prefetch_rows(const cw_ctx *x, size_t h0, size_t tq, size_t tk, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  for (size_t j = 0; tk != SIZE_MAX && j < cn; j++) {
    cw_prefetch_span(x->io->k + (tk + j) * s->k.row_stride + x->hk * s->k.head_stride, s->d * sizeof(float));
    cw_prefetch_span(x->io->v + (tk + j) * s->v.row_stride + x->hv * s->v.head_stride, s->dv * sizeof(float));
  }
  const size_t E = attn_act_size(s->q_type);
  for (size_t j = 0; tq != SIZE_MAX && j < cn; j++)
    for (size_t gi = 0; gi < p->per; gi++)
      cw_prefetch_span(attn_act_at(x->io->q, E, s->q, tq + j, (h0 + gi) / p->qdiv), s->d * E);
}

/* Software prefetch of aligned chunk k's rows of head h: with `queries` its query rows, with
 * `keys` its key and value rows (nothing past the aligned tokens; FLASH's rounds: none). */
void attn_cw_prefetch_chunk(const cw_ctx *x, size_t h, size_t k, int queries, int keys) {
  const attn_chunkwise_plan *p = x->p;
  const size_t aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv), t0 = k * p->C;
  if (p->xg || t0 >= aligned) return;
  attn_cw_prefetch_rows(x, h * p->per, queries ? cw_pre_q(p) + t0 : SIZE_MAX, keys ? cw_pre_k(p) + t0 : SIZE_MAX,
                        attn_min_sz(p->C, aligned - t0));
}

/* Floats of a gathered head's rows of width w, and of a gathered tensor (gather heads), each
 * followed by ATTN_GATHER_PAD floats (so that the blocks do not start at the same offset in a
 * 4 KiB page, where they would compete for the same cache sets). */
static size_t cw_gather_head(const attn_chunkwise_plan *p, size_t w) { return p->C * w + ATTN_GATHER_PAD; }
static size_t cw_gather_block(const attn_chunkwise_plan *p, size_t w) {
  return p->gather * cw_gather_head(p, w) + ATTN_GATHER_PAD;
}

/* Gather the query, key and value rows of aligned chunk [t0, t0 + cn) of heads [a, b) (each head
 * its own query, key and value head) into g: the rows in order, each head's slices copied to the
 * head's contiguous rows (cw_gather_block floats of queries, then of keys, then of values). */
void attn_cw_gather(const cw_ctx *x0, float *g, size_t a, size_t b, size_t t0, size_t cn) {
  const attn_chunkwise_plan *p = x0->p;
  const attn_shape *s = p->shape;
  const size_t pre_k = cw_pre_k(p), pre_q = cw_pre_q(p);
  float *gq = g, *gk = gq + cw_gather_block(p, s->d), *gv = gk + cw_gather_block(p, s->d);
  const size_t sq = cw_gather_head(p, s->d), sv = cw_gather_head(p, s->dv);
  const int q32 = s->q_type == ATTN_F32; /* half queries: converted head by head below */
  const size_t E = attn_act_size(s->q_type);
  for (size_t j = 0; j < cn; j++) {
    const float *q = attn_act_at(x0->io->q, E, s->q, pre_q + t0 + j, 0),
                *k = x0->io->k + (pre_k + t0 + j) * s->k.row_stride,
                *v = x0->io->v + (pre_k + t0 + j) * s->v.row_stride;
    for (size_t h = a; h < b; h++) {
      if (q32) memcpy(gq + (h - a) * sq + j * s->d, q + h * s->q.head_stride, s->d * sizeof(float));
      memcpy(gk + (h - a) * sq + j * s->d, k + h * s->k.head_stride, s->d * sizeof(float));
      memcpy(gv + (h - a) * sv + j * s->dv, v + h * s->v.head_stride, s->dv * sizeof(float));
    }
  }
  for (size_t h = a; !q32 && h < b; h++)
    attn_act_in(x0->uk, s->q_type, cn, s->d, attn_act_at(x0->io->q, E, s->q, pre_q + t0, h), s->q.row_stride,
                gq + (h - a) * sq);
}

/* x for head h of a gathered group starting at head a (attn_cw_gather's blocks in g). */
void attn_cw_gathered(cw_ctx *x, const float *g, size_t a, size_t h, size_t t0) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  const size_t bq = cw_gather_block(p, s->d);
  x->gq = g + (h - a) * cw_gather_head(p, s->d);
  x->gk = g + bq + (h - a) * cw_gather_head(p, s->d);
  x->gv = g + 2 * bq + (h - a) * cw_gather_head(p, s->dv);
  x->g0q = cw_pre_q(p) + t0;
  x->g0k = cw_pre_k(p) + t0;
}
