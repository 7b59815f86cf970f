/* The scan (engine/chunkwise.h): each head's lead, and the scan by head groups, chunk after chunk. */
#include "engine/chunkwise/internal.h"

/* Phase 0, per head: the state (zeroed when the caller keeps none) and what precedes the chunks. */
void attn_cw_scan_lead(void *ctx, size_t h, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  float *S = cw_scan_state(c, h);
  if (!c->io->state) memset(S, 0, p->m * p->lds * sizeof(float));
  const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, c->ws + worker * p->worker_floats);
  if (!p->xg) attn_cw_lead(&x, S, h * p->per); /* the exclusive form's rounds start at key 0 */
}

/* The recurrence by head groups keeps each head's state in the scan's region with rows of whole
 * cache lines (ldr; the step kernel's rows then never straddle two lines): the state in before
 * the chunks, after its lead (on the caller's state, or a zero one in the worker's scratch), out
 * to the caller's after them; a caller's state whose rows are on lines already (an aligned state)
 * is used in place. The same arithmetic either way, so the same bits. */
static int cw_rec_direct(const cw_par *c) {
  return c->io->state && c->p->lds == c->p->ldr && !((uintptr_t)c->io->state % 64);
}
static float *cw_rec_state(const cw_par *c, size_t h) {
  const attn_chunkwise_plan *p = c->p;
  return cw_rec_direct(c) ? c->io->state + h * p->m * p->lds : c->ws + p->scan_region + h * p->m * p->ldr;
}

static void cw_rec_copy(const attn_chunkwise_plan *p, float *dst, size_t ldd, const float *src, size_t lds) {
  for (size_t f = 0; f < p->m; f++) memcpy(dst + f * ldd, src + f * lds, p->lds * sizeof(float));
}

static void cw_rec_in(const cw_par *c, size_t h, size_t worker) {
  const attn_chunkwise_plan *p = c->p;
  float *ws = c->ws + worker * p->worker_floats, *S = c->io->state ? c->io->state + h * p->m * p->lds : ws + p->wl.s;
  if (!c->io->state) memset(S, 0, p->m * p->lds * sizeof(float));
  const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
  attn_cw_lead(&x, S, h * p->per);
  if (!cw_rec_direct(c)) cw_rec_copy(p, cw_rec_state(c, h), p->ldr, S, p->lds);
}

/* The scan without waves, task t of G: heads [t H / G, (t+1) H / G) chunk after chunk, each chunk
 * for every head of the group before the next (token-major inputs: the heads of a row are
 * adjacent, so a row's lines are used while they are in cache, not fetched once per head). */
void attn_cw_scan_heads(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  const cw_transition *tr = attn_cw_transition(p);
  const size_t G = attn_min_sz(p->workers, p->heads), h0 = task * p->heads / G, h1 = (task + 1) * p->heads / G;
  float *ws = c->ws + worker * p->worker_floats;
  for (size_t h = h0; h < h1; h++)
    if (p->recurrent)
      cw_rec_in(c, h, worker);
    else
      attn_cw_scan_lead(ctx, h, worker);
  for (size_t k = 0; k < p->scan_chunks; k++)
    for (size_t h = h0, a = h0; h < h1; h++) {
      cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
      x.ls = p->recurrent ? p->ldr : p->lds;
      if (!p->gather || !p->gathered) {
        attn_cw_prefetch_chunk(&x, h, k + 1, 1, 1);
      } else { /* the group's heads ATTN_GATHER at a time, their rows gathered first */
        const size_t t0 = k * p->C, cn = attn_min_sz(p->C, attn_min_sz(p->shape->n_q, p->shape->n_kv) - t0);
        if (h == a + p->gather || h == h0) {
          a = h;
          attn_cw_gather(&x, ws + p->wl.g, a, attn_min_sz(h1, a + p->gather), t0, cn);
        }
        attn_cw_gathered(&x, ws + p->wl.g, a, h, t0);
      }
      if (p->share_at) /* the run's first head keeps the chunk's intra scores, the others copy them */
        x.at_keep = h > h0 && cw_same_qk(p, h, h - 1)       ? CW_AT_REUSE
                    : h + 1 < h1 && cw_same_qk(p, h, h + 1) ? CW_AT_KEEP
                                                            : 0;
      cw_chunk ck = attn_cw_chunk_in_scratch(&x, ws, k);
      (void)attn_cw_chunk(tr, &x, p->recurrent ? cw_rec_state(c, h) : cw_scan_state(c, h), &ck, h, ws + p->wl.s);
    }
  for (size_t h = h0; p->recurrent && c->io->state && !cw_rec_direct(c) && h < h1; h++)
    cw_rec_copy(p, c->io->state + h * p->m * p->lds, p->lds, cw_rec_state(c, h), p->ldr);
}
