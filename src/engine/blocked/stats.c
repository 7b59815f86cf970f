/* The blocked engine's per-row statistics (attn.h, analysis): each row's entropy, sparsity and count
 * from the sums its step kept, and a statistics call's checks of its outputs. */
#include "engine/blocked/internal.h"
#include "engine/blocked_call.h"
#include "engine/blocked/mask.h"

#include <float.h>

/* The statistics of row r (token t at position pos, head h) from its sums (attn.h, analysis):
 * entropy log W - L / W within [0, log n], sparsity W / sqrt(n W2) within [1/sqrt(n), 1], n the
 * keys the mask shows it; both NaN unless W > 0 and W, W2 = sum w^2 > 0 and L = sum w log w are
 * finite (no visible key, all weights 0, a non-finite weight, or sums beyond float's range: GAU
 * weights above ~1e18 or all below ~1e-19). */
void attn_blk_stats(const attn_blocked_plan *p, const float *rs, size_t R, size_t r, int64_t pos,
                    const attn_row_stats *st, size_t t, size_t h) {
  const size_t *at = p->step->stats_at;
  const int64_t lo = vis_lo(p, pos) > 0 ? vis_lo(p, pos) : 0, last = (int64_t)p->shape->n_kv - 1,
                hi = vis_hi(p, pos) < last ? vis_hi(p, pos) : last;
  const double n = hi >= lo ? (double)(hi - lo + 1) : 0.0;
  double W = rs[at[0] * R + r], W2 = rs[at[1] * R + r], L = rs[at[2] * R + r];
  if (p->stats_sinks) { /* the sink's weight w = e^(sink - m) out of every sum: the keys' remain */
    const double x = (double)p->stats_sinks[h] - (double)rs[r], w = exp(x);
    W -= w, W2 -= w * w, L -= w * x;
  }
  double ent = NAN, sp = NAN;
  if (W > 0.0 && W <= FLT_MAX && W2 > 0.0 && W2 <= FLT_MAX && fabs(L) <= FLT_MAX) {
    ent = fmin(fmax(log(W) - L / W, 0.0), log(n));
    sp = fmin(fmax(W / sqrt(n * W2), 1.0 / sqrt(n)), 1.0);
  }
  const size_t e = t * st->layout.row_stride + h * st->layout.head_stride;
  if (st->entropy) st->entropy[e] = (float)ent;
  if (st->sparsity) st->sparsity[e] = (float)sp;
  if (st->count) st->count[e] = (float)n;
}

attn_status attn_blocked_stats_outputs(const attn_blocked_call *c, const attn_row_stats *stats, void **out,
                                       size_t *out_bytes, size_t *n) {
  size_t bytes;
  const attn_status st = attn_row_stats_check(stats, c->plan.shape->n_q, c->sp.H, &bytes);
  if (st) return st;
  float *const a[] = {stats->entropy, stats->sparsity, stats->count};
  for (size_t i = 0; i < 3; i++) out[*n] = a[i], out_bytes[(*n)++] = bytes;
  return ATTN_OK;
}
