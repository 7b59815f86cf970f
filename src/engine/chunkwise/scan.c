/* The scan (engine/chunkwise.h): the state update and a chunk's outputs that both schedules share,
 * each head's lead, and the scan by head groups, chunk after chunk. */
#include "engine/chunkwise/internal.h"

/* The scan's state update on rows [f0, f1): S = dC (.) S + D (dC_f = g[f gs], or 1 when g is
 * NULL); with keep, D gets S as it was (the state before D's chunk). The same operations, in the
 * same order, whichever way the scan is scheduled. */
void attn_cw_scan_update(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *D,
                         const float *g, size_t gs, size_t f0, size_t f1, int keep) {
  if (f1 > f0)
    uk->rows_axpby(f1 - f0, p->W, S + f0 * p->lds, p->lds, D + f0 * p->lds, p->lds, g ? g + f0 * gs : NULL, gs, NULL, 0,
                   1, keep);
}

/* Maps with offsets, the outputs of a chunk (aligned tokens t0 .. t0+cn of state head h) from S,
 * the state before it, and its loaded keys (KU: pre-exponential features, VA: Va; va_finite as
 * attn_cw_load_kv said; KL, dl: its features at its own offsets and those, attn_cw_scan_local; KL may be
 * x0->kf). When no key raises an offset past the guard, the chunk runs at once on S itself: S
 * rises to c = max(its offsets, dl) in place (attn_cw_raise, the first step of attn_cw_scan_merge, so S
 * merges afterwards to the same bits as if it had not risen) and Kf = KL exp(dl - c) (no
 * exponential per key again). Otherwise the serial loop over the chunk, cut where attn_cw_guard says,
 * on T, a copy of S that is then dropped (the state moves by attn_cw_scan_merge). */
void attn_cw_scan_outputs(const cw_ctx *x0, float *S, float *T, size_t h, size_t t0, size_t cn, float *KU,
                          const float *KL, const float *dl, float *VA, int va_finite) {
  const attn_chunkwise_plan *p = x0->p;
  const size_t m = p->m;
  cw_ctx x = *x0;
  const size_t q0 = cw_pre_q(p) + t0, k0 = cw_pre_k(p) + t0;
  x.ku = KU, x.va = VA;
  if (cn > 1 && attn_cw_guard(&x, S, cn, dl) == cn) {
    attn_cw_offsets_of(p, S, x.cp);
    float *restrict g = x.rn;
    for (size_t f = 0; f < m; f++) {
      x.cn[f] = dl[f] > x.cp[f] ? dl[f] : x.cp[f];
      g[f] = dl[f] == x.cn[f] ? 1.0f : expf(dl[f] - x.cn[f]);
    }
    attn_cw_raise(&x, S);
    x.uk->rows_cols(ATTN_COLS_SCALE, cn, m, x.kf, m, KL, m, g);
    for (size_t gi = 0; gi < p->per; gi++) attn_cw_query(&x, S, h * p->per + gi, q0, cn, 1, va_finite);
    return;
  }
  memcpy(T, S, m * p->lds * sizeof(float));
  for (size_t u0 = 0, len; u0 < cn; u0 += len) {
    x.ku = KU + u0 * p->m, x.va = VA + u0 * p->W;
    len = cn - u0 > 1 ? attn_cw_guard(&x, T, cn - u0, dl) : 1;
    if (len == 1) {
      attn_cw_step_loaded(&x, T, h * p->per, q0 + u0, k0 + u0);
      continue;
    }
    attn_cw_key_offsets(&x, T, len);
    for (size_t gi = 0; gi < p->per; gi++) attn_cw_query(&x, T, h * p->per + gi, q0 + u0, len, 1, va_finite);
    if (u0 + len < cn) cw_absorb(&x, T, len);
  }
}

/* Phase 0, per head: the state (zeroed when the caller keeps none) and what precedes the chunks. */
void attn_cw_scan_lead(void *ctx, size_t h, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  float *S = cw_scan_state(c, h);
  if (!c->io->state) memset(S, 0, p->m * p->lds * sizeof(float));
  const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, c->ws + worker * p->worker_floats);
  if (!p->xg) attn_cw_lead(&x, S, h * p->per); /* the exclusive form's rounds start at key 0 */
}

/* The scan without waves, task t of G: heads [t H / G, (t+1) H / G) chunk after chunk, each chunk
 * for every head of the group before the next (token-major inputs: the heads of a row are
 * adjacent, so a row's lines are used while they are in cache, not fetched once per head). */
void attn_cw_scan_heads(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  const size_t G = attn_min_sz(p->workers, p->heads), h0 = task * p->heads / G, h1 = (task + 1) * p->heads / G;
  float *ws = c->ws + worker * p->worker_floats, *D = ws + p->wl.d;
  const size_t C = p->C, pre_k = cw_pre_k(p), pre_q = cw_pre_q(p), aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv);
  for (size_t h = h0; h < h1; h++) attn_cw_scan_lead(ctx, h, worker);
  for (size_t k = 0, qa, qb, full = 1; p->xg && full; k++) /* the exclusive form, round by round */
    for (size_t h = h0; h < h1; h++) {
      const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
      float *S = cw_scan_state(c, h);
      full = (size_t)attn_cw_xround(p, k, &qa, &qb);
      attn_cw_xquery(&x, S, h, qa, qb);
      if (!full) continue;
      attn_cw_xabsorb(&x, D, k, 0);
      attn_cw_scan_update(p, c->uk, S, D, NULL, 1, 0, p->m, 0);
    }
  for (size_t t0 = 0; !p->xg && t0 < aligned; t0 += C) {
    const size_t cn = attn_min_sz(C, aligned - t0);
    for (size_t h = h0, a = h0; h < h1; h++) {
      cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
      if (!p->gather || !p->gathered) {
        attn_cw_prefetch_chunk(&x, h, t0 / C + 1, 1, 1);
      } else { /* the group's heads ATTN_GATHER at a time, their rows gathered first */
        if (h == a + p->gather || h == h0) {
          a = h;
          attn_cw_gather(&x, ws + p->wl.g, a, attn_min_sz(h1, a + p->gather), t0, cn);
        }
        attn_cw_gathered(&x, ws + p->wl.g, a, h, t0);
      }
      float *S = cw_scan_state(c, h);
      const int va_finite = attn_cw_load_kv(&x, pre_k + t0, cn);
      if (p->fm->offsets) { /* as the waves' steps 1, 4 and 3 */
        attn_cw_scan_local(&x, x.ku, D, cn, ws + p->wl.dl);
        attn_cw_scan_outputs(&x, S, ws + p->wl.s, h, t0, cn, x.ku, x.kf, ws + p->wl.dl, x.va, va_finite);
        attn_cw_scan_merge(p, c->uk, S, D, 0, p->m, 0);
        continue;
      }
      if (cw_gated(p)) attn_cw_gates(&x, pre_k + t0, cn, CW_FOR_BOTH);
      for (size_t gi = 0; gi < p->per; gi++) attn_cw_query(&x, S, h * p->per + gi, pre_q + t0, cn, 1, va_finite);
      attn_cw_absorb_to(&x, x.kf, D, cn, 0);
      attn_cw_scan_update(p, c->uk, S, D, p->g.kind != ATTN_GATE_NONE ? x.dc : NULL, 1, 0, p->m, 0);
    }
  }
}
