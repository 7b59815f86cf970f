/* The transitions (engine/chunkwise.h): a chunk's phases for maps without offsets (any gate), for
 * maps with offsets and for FLASH's exclusive rounds, each for the scan (a local state, then a
 * combine) and for the serial loop (absorbed in place), and the per-chunk routine that runs a
 * transition's phases on one worker. Every schedule (the serial loop, the scan by head groups,
 * the waves; the delta rule's groups) takes its chunk steps from here. */
#include "engine/chunkwise/internal.h"

/* The scan's state update: S = dC (.) S + D (dC_f = g[f lds], D's column dv + 1, or 1 when g is
 * NULL); with keep, D gets S as it was (the state before D's chunk). The same operations, in the
 * same order, whichever way the scan is scheduled. */
static void cw_scan_update(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *D,
                           const float *g, int keep) {
  uk->rows_axpby(p->m, p->W, S, p->lds, D, p->lds, g, p->lds, NULL, 0, 1, keep);
}

/* Maps with offsets, the outputs of a chunk (aligned tokens t0 .. t0+cn of state head h) from S,
 * the state before it, and its loaded keys (KU: pre-exponential features, VA: Va; va_finite as
 * attn_cw_load_kv said; KL, dl: its features at its own offsets and those, attn_cw_scan_local; KL may be
 * x0->kf). When no key raises an offset past the guard, the chunk runs at once on S itself: S
 * rises to c = max(its offsets, dl) in place (attn_cw_raise, the first step of attn_cw_scan_merge, so S
 * merges afterwards to the same bits as if it had not risen) and Kf = KL exp(dl - c) (no
 * exponential per key again). Otherwise the serial loop over the chunk, cut where attn_cw_guard says,
 * on T, a copy of S that is then dropped (the state moves by attn_cw_scan_merge). */
static void cw_scan_outputs(const cw_ctx *x0, float *S, float *T, size_t h, size_t t0, size_t cn, float *KU,
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
    x.ku = KU + u0 * p->m, x.va = VA + u0 * p->ldw;
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

/* x with chunk c's rows (Kf, Va) and, per-feature gates, its kept b. */
static cw_ctx cw_on(const cw_ctx *x0, const cw_chunk *c) {
  cw_ctx x = *x0;
  x.kf = c->kf, x.va = c->va;
  if (c->b) x.b = c->b;
  return x;
}

/* The rows (CW_FOR_ABSORB: keys, pre-exponential with offsets, and values) and the gates of the
 * uses asked for; a per-feature gate's b is kept in the chunk's when it has one (its absorb
 * makes it, its outputs read it). */
static int cw_load(const void *vx, const float *S, cw_chunk *c, int uses) {
  const cw_ctx *x0 = vx;
  const attn_chunkwise_plan *p = x0->p;
  (void)S;
  cw_ctx x = cw_on(x0, c);
  if (c->b && !(uses & CW_FOR_ABSORB)) uses |= CW_B_KEPT;
  if (uses & CW_FOR_ABSORB) {
    x.ku = c->kf;
    c->finite = attn_cw_load_kv(&x, cw_pre_k(p) + c->t0, c->cn);
  }
  if (cw_gated(p)) attn_cw_gates(&x, cw_pre_k(p) + c->t0, c->cn, uses);
  return 1;
}

/* Maps without offsets. D = (Kf (.) dout)^T Va, dC in its column dv + 1. */
static void cw_plain_local(const void *vx, const cw_chunk *c) {
  const cw_ctx *x0 = vx;
  const attn_chunkwise_plan *p = x0->p;
  const cw_ctx x = cw_on(x0, c);
  attn_cw_absorb_to(&x, c->kf, c->D, c->cn, 0);
  for (size_t f = 0; p->g.kind != ATTN_GATE_NONE && f < p->m; f++) c->D[f * p->lds + p->shape->dv + 1] = x.dc[f];
}

static void cw_plain_outputs(const void *vx, float *S, const cw_chunk *c, size_t h, float *copy) {
  const cw_ctx *x0 = vx;
  const attn_chunkwise_plan *p = x0->p;
  const cw_ctx x = cw_on(x0, c);
  (void)copy;
  for (size_t gi = 0; gi < p->per; gi++)
    attn_cw_query(&x, S, h * p->per + gi, cw_pre_q(p) + c->t0, c->cn, 1, c->finite);
}

/* S = dC (.) S + D; with keep, D gets S as it was (the state before the chunk). */
static void cw_plain_combine(const void *vx, float *S, const cw_chunk *c, int keep) {
  const cw_ctx *x = vx;
  const attn_chunkwise_plan *p = x->p;
  const float *g = p->g.kind != ATTN_GATE_NONE ? c->D + p->shape->dv + 1 : NULL;
  cw_scan_update(p, x->uk, S, c->D, g, keep);
}

/* Maps with offsets: D at the chunk's own offsets (kl: Kf at them, dl: those), the outputs on S
 * raised in place or on a copy (cw_scan_outputs), the merge at the larger offsets. */
static void cw_offsets_local(const void *vx, const cw_chunk *c) {
  cw_ctx x = *(const cw_ctx *)vx;
  x.kf = c->kl, x.va = c->va;
  attn_cw_scan_local(&x, c->kf, c->D, c->cn, c->dl);
}

static void cw_offsets_outputs(const void *x, float *S, const cw_chunk *c, size_t h, float *copy) {
  cw_scan_outputs(x, S, copy, h, c->t0, c->cn, c->kf, c->kl, c->dl, c->va, c->finite);
}

static void cw_offsets_combine(const void *vx, float *S, const cw_chunk *c, int keep) {
  const cw_ctx *x = vx;
  attn_cw_scan_merge(x->p, x->uk, S, c->D, 0, x->p->m, keep);
}

/* FLASH's exclusive form: chunk k is round k, its keys absorbed only when complete. */
static int cw_excl_load(const void *x, const float *S, cw_chunk *c, int uses) {
  (void)x, (void)S, (void)c, (void)uses;
  return 1;
}

static void cw_excl_local(const void *vx, const cw_chunk *c) {
  const cw_ctx *x = vx;
  size_t qa, qb;
  if (attn_cw_xround(x->p, c->k, &qa, &qb)) attn_cw_xabsorb(x, c->D, c->k, 0);
}

static void cw_excl_outputs(const void *vx, float *S, const cw_chunk *c, size_t h, float *copy) {
  const cw_ctx *x = vx;
  size_t qa, qb;
  (void)copy;
  (void)attn_cw_xround(x->p, c->k, &qa, &qb);
  attn_cw_xquery(x, S, h, qa, qb);
}

static void cw_excl_combine(const void *vx, float *S, const cw_chunk *c, int keep) {
  const cw_ctx *x = vx;
  const attn_chunkwise_plan *p = x->p;
  size_t qa, qb;
  if (attn_cw_xround(p, c->k, &qa, &qb))
    cw_scan_update(p, x->uk, S, c->D, NULL, keep);
  else if (keep) /* the last round: kept, not absorbed */
    memcpy(c->D, S, p->m * p->lds * sizeof(float));
}

/* The serial loop (no scan): the chunk's rows and gates in the worker's scratch, its outputs from
 * S, then S past it in place (cw_absorb: one GEMM that scales S by dC as it adds the chunk). A
 * one-token chunk takes the step kernel. Maps with offsets (never gated) cut the chunk where
 * attn_cw_guard says (against S), and raise S to the chunk's offsets before its outputs. */
static int cw_serial_load(const void *vx, const float *S, cw_chunk *c, int uses) {
  const cw_ctx *x = vx;
  const attn_chunkwise_plan *p = x->p;
  (void)S;
  if (c->cn == 1) return 0;
  c->finite = attn_cw_load_kv(x, cw_pre_k(p) + c->t0, c->cn);
  if (cw_gated(p)) attn_cw_gates(x, cw_pre_k(p) + c->t0, c->cn, uses);
  return 1;
}

/* c->finite stays the whole chunk's: conservative when cut. */
static int cw_serial_load_cut(const void *x, const float *S, cw_chunk *c, int uses) {
  if (!cw_serial_load(x, S, c, uses)) return 0;
  c->cn = attn_cw_guard(x, S, c->cn, NULL);
  return c->cn > 1;
}

static void cw_serial_outputs(const void *vx, float *S, const cw_chunk *c, size_t h, float *copy) {
  const cw_ctx *x = vx;
  const attn_chunkwise_plan *p = x->p;
  (void)copy;
  for (size_t gi = 0; gi < p->per; gi++) attn_cw_query(x, S, h * p->per + gi, cw_pre_q(p) + c->t0, c->cn, 1, c->finite);
}

static void cw_serial_outputs_raised(const void *x, float *S, const cw_chunk *c, size_t h, float *copy) {
  attn_cw_key_offsets(x, S, c->cn);
  cw_serial_outputs(x, S, c, h, copy);
}

static void cw_serial_absorb(const void *x, float *S, const cw_chunk *c) { cw_absorb(x, S, c->cn); }

static void cw_serial_step(const void *vx, float *S, const cw_chunk *c, size_t h, size_t u) {
  const cw_ctx *x = vx;
  const attn_chunkwise_plan *p = x->p;
  const size_t j = cw_pre_k(p) + c->t0 + u;
  attn_cw_load_kv(x, j, 1);
  attn_cw_step_loaded(x, S, h * p->per, cw_pre_q(p) + c->t0 + u, j);
}

/* The recurrence: the chunk's rows, beta in its key features and its gates' decay factors loaded
 * at once, then token by token (the step kernel on its loaded rows). */
static int cw_rec_load(const void *vx, const float *S, cw_chunk *c, int uses) {
  const cw_ctx *x = vx;
  const size_t j0 = cw_pre_k(x->p) + c->t0;
  (void)S, (void)uses;
  c->finite = attn_cw_load_kv(x, j0, c->cn);
  (void)attn_cw_step_factors(x, j0, c->cn, x->kf, x->gx, 0);
  return 0;
}

/* One output head per state head: the whole chunk with its first token (its query features, the
 * kernel's run of steps over its rows, its outputs); otherwise each token's, head by head. */
static void cw_rec_step(const void *vx, float *S, const cw_chunk *c, size_t h, size_t u) {
  const cw_ctx *x = vx;
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m, i0 = cw_pre_q(p) + c->t0;
  const float *g = p->g.kind != ATTN_GATE_NONE ? x->gx : NULL;
  if (p->per != 1) {
    attn_cw_step_rows(x, S, h * p->per, i0 + u, x->kf + u * m, x->va + u * p->ldw, g ? g + u * m : NULL);
    return;
  }
  if (u) return;
  attn_cw_load_q(x, S, h, i0, c->cn, m, 1, 1);
  size_t lo;
  float *out = cw_out_rows(x, p->direct, h, i0, &lo);
  x->uk->linear_recur(c->cn, m, p->W, x->qt, x->kf, x->va, p->ldw, g, 0, S, x->ls, out, lo);
  if (!p->direct) attn_cw_store(x, h, i0, c->cn);
}

/* FLASH's rounds without the scan: round k's queries from S, then its keys absorbed into S when
 * the round is complete. */
static void cw_excl_absorb(const void *x, float *S, const cw_chunk *c) {
  size_t qa, qb;
  if (attn_cw_xround(((const cw_ctx *)x)->p, c->k, &qa, &qb)) attn_cw_xabsorb(x, S, c->k, 1);
}

/* clang-format off */
static const cw_transition cw_plain = {
    .load = cw_load, .local = cw_plain_local, .outputs = cw_plain_outputs, .combine = cw_plain_combine};
static const cw_transition cw_offsets = {
    .load = cw_load, .local = cw_offsets_local, .outputs = cw_offsets_outputs, .combine = cw_offsets_combine};
static const cw_transition cw_exclusive = {
    .load = cw_excl_load, .local = cw_excl_local, .outputs = cw_excl_outputs, .combine = cw_excl_combine};
static const cw_transition cw_serial = {
    .load = cw_serial_load, .outputs = cw_serial_outputs, .absorb = cw_serial_absorb, .step = cw_serial_step};
static const cw_transition cw_serial_offsets = {
    .load = cw_serial_load_cut, .outputs = cw_serial_outputs_raised, .absorb = cw_serial_absorb, .step = cw_serial_step};
static const cw_transition cw_excl_serial = {
    .load = cw_excl_load, .outputs = cw_excl_outputs, .absorb = cw_excl_absorb};
static const cw_transition cw_recurrent = {.load = cw_rec_load, .step = cw_rec_step};
/* clang-format on */

const cw_transition *attn_cw_transition(const attn_chunkwise_plan *p) {
  if (p->recurrent) return &cw_recurrent;
  if (!p->scan_chunks) return p->xg ? &cw_excl_serial : p->fm->offsets ? &cw_serial_offsets : &cw_serial;
  return p->xg ? &cw_exclusive : p->fm->offsets ? &cw_offsets : &cw_plain;
}

/* Chunk k (FLASH: round k) of the scan in the worker's scratch: D (wl.d), the rows where x loads
 * them, the offsets in wl.dl. */
cw_chunk attn_cw_chunk_in_scratch(const cw_ctx *x, float *ws, size_t k) {
  const attn_chunkwise_plan *p = x->p;
  const size_t aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv);
  return (cw_chunk){.k = k,
                    .t0 = k * p->C,
                    .cn = p->xg ? 0 : attn_min_sz(p->C, aligned - k * p->C),
                    .D = ws + p->wl.d,
                    .kf = p->fm->offsets ? x->ku : x->kf,
                    .va = x->va,
                    .kl = x->kf,
                    .dl = ws + p->wl.dl,
                    .b = NULL,
                    .finite = 1};
}
