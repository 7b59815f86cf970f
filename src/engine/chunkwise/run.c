/* The chunkwise engine's entry (engine/chunkwise.h): every state head of a plan, on the schedule the
 * plan chose: a task per head, the scan by head groups, or the waves. */
#include "engine/chunkwise/internal.h"

static void cw_par_task(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  attn_chunkwise_run(c->p, c->uk, c->io, task, c->ws + worker * c->p->worker_floats);
}

void attn_chunkwise_run_all(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                            float *ws) {
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
