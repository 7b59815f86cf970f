/* The chunkwise engine's entry (engine/chunkwise.h): the serial loop of one state head, and every
 * state head of a plan on the schedule the plan chose: a task per head (the serial loop), the scan
 * by head groups, or the waves. */
#include "engine/chunkwise/internal.h"

/* The serial loop of state head `task`: its lead, then its aligned chunks one after another, each
 * as long as the transition's load lets it be (FLASH's form: round after round, the last one
 * incomplete). */
void attn_chunkwise_run(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                        size_t task, float *ws) {
  const attn_shape *s = p->shape;
  const cw_ctx x = cw_ctx_of(p, uk, io, task, ws);
  const size_t slab = p->m * p->lds;
  float *S = io->state ? io->state + task * slab : ws + p->wl.s;
  if (!io->state) memset(S, 0, slab * sizeof(float));
  if (p->decode) {
    attn_cw_decode(&x, S, task);
    return;
  }
  const cw_transition *tr = attn_cw_transition(p);
  if (!p->xg) attn_cw_lead(&x, S, task * p->per);
  if (!p->causal) return;
  const size_t aligned = s->n_kv - cw_pre_k(p); /* == n_q - pre_q */
  for (size_t k = 0, t0 = 0; p->xg ? k <= s->n_kv / p->xg : t0 < aligned; k++) {
    /* the serial transitions read the rows where x has them: only the span and the round */
    cw_chunk c = {.k = k, .t0 = t0, .cn = p->xg ? 0 : attn_min_sz(p->C, aligned - t0), .finite = 1};
    t0 += attn_cw_chunk(tr, &x, S, &c, task, NULL);
  }
}

static void cw_par_task(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  attn_chunkwise_run(c->p, c->uk, c->io, task, c->ws + worker * c->p->worker_floats);
}

void attn_chunkwise_run_all(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                            float *ws) {
  attn_chunkwise_io dio;
  float g[CW_DEC_G_MAX];
  if (p->decode) io = attn_cw_decode_facts(p, uk, io, &dio, g);
  cw_par c = {.p = p, .uk = uk, .io = io, .ws = ws, .c0 = 0, .wn = 0};
  const attn_threads *th = p->shape->threads;
  if (!p->scan_chunks) {
    attn_parallel(th, p->heads, cw_par_task, &c);
    return;
  }
  if (!p->scan_group) {
    attn_parallel(th, attn_min_sz(p->workers, p->heads), attn_cw_scan_heads, &c);
    return;
  }
  attn_cw_waves(&c);
}
