/* The delta rule's transition (engine/chunkwise.h): a chunk's phases for the per-chunk routine
 * (attn_cw_chunk), the token step, and the schedule: groups of value heads, chunk after chunk,
 * cut at the checkpoints. */
#include <math.h>

#include "engine/chunkwise/delta.h"

/* Load: the chunk's rows (a chunk of 2+ tokens whose q, k and v are finite; otherwise token by
 * token). Local: b, L, X, A, U, W' (attn_delta_local). */
static int dl_load(const void *vx, const float *S, cw_chunk *c, int uses) {
  (void)S, (void)uses;
  return c->cn > 1 && attn_delta_load(vx, c->t0, c->cn);
}

static void dl_local(const void *x, const cw_chunk *c) { attn_delta_local(x, c->t0, c->cn); }

/* Outputs: Delta = U + W' S (in u), O = Q_B S + A Delta (into the output rows). */
static void dl_outputs(const void *vx, float *S, const cw_chunk *c, size_t h, float *copy) {
  const dl_ctx *x = vx;
  const attn_delta_plan *p = x->p;
  const attn_shape *s = p->shape;
  const size_t d = s->d, dv = s->dv, C = p->C, cn = c->cn;
  (void)h, (void)copy;
  x->uk->gemm(cn, dv, d, x->w, p->ldvk, 1, S, dv, x->u, p->ldvk, NULL, 1);
  void *oy = (void *)attn_act_at(x->io->o, attn_act_size(s->o_type), s->o, c->t0, x->h);
  const int o32 = s->o_type == ATTN_F32; /* half outputs: the fp32 rows, then rounded */
  float *o = o32 ? oy : x->oc;
  const size_t ldo = o32 ? s->o.row_stride : dv;
  x->uk->gemm(cn, dv, d, x->q, d, 1, S, dv, o, ldo, NULL, 0);
  x->uk->gemm(cn, dv, cn, x->a, C, 1, x->u, p->ldvk, o, ldo, NULL, 1);
  if (!o32) attn_act_out(x->uk, s->o_type, cn, dv, o, dv, oy, s->o.row_stride);
}

/* Absorb: S = diag(rs) S + Kn^T Delta. */
static void dl_absorb(const void *vx, float *S, const cw_chunk *c) {
  const dl_ctx *x = vx;
  const attn_delta_plan *p = x->p;
  const size_t d = p->shape->d, dv = p->shape->dv;
  const int plain = p->gate == ATTN_DELTA_PLAIN; /* no decay: K itself, no row scales */
  x->uk->gemm(d, dv, c->cn, plain ? x->k : x->kn, 1, d, x->u, p->ldvk, S, dv, plain ? NULL : x->rs, 1);
}

/* Token t by the recurrence, two passes of the step kernel over S: u = S~^T k (S~ = D S, the
 * decay folded into k's factors), delta = beta (v - u); then S = D S + k delta^T and o = S^T q
 * in the same pass. */
static void dl_step(const void *vx, float *S, const cw_chunk *c, size_t h, size_t u0) {
  const dl_ctx *x = vx;
  const attn_delta_plan *p = x->p;
  const size_t t = c->t0 + u0;
  (void)h;
  const attn_shape *s = p->shape;
  const size_t d = s->d, dv = s->dv;
  float *qv = x->e, *kv = qv + d, *al = kv + d, *fa = al + d, *u = fa + 2 * d, *dl = u + dv;
  attn_delta_token(x, t, qv, kv);
  const float *v = dl_row(x->io->v, s->v, t, x->h);
  const float bt = *dl_row(x->io->beta, p->bl, t, x->h);
  const float *g = NULL;
  if (p->gate != ATTN_DELTA_PLAIN) {
    const float *lg = dl_row(x->io->log_gate, p->gl, t, x->h);
    for (size_t f = 0; f < d; f++) al[f] = lg[p->gate == ATTN_DELTA_FEATURE ? f : 0];
    x->uk->vexp(d, al, al);
    g = al;
  }
  for (size_t f = 0; f < d; f++) fa[f] = g ? g[f] * kv[f] : kv[f];
  x->uk->linear_step(d, dv, fa, NULL, v, 0.0f, S, dv, u, NULL);
  const float z = attn_rows_finite(v, 1, dv, dv) ? 0.0f : NAN; /* a non-finite v: every column of delta NaN */
  for (size_t c = 0; c < dv; c++) dl[c] = bt * (v[c] - u[c]) + z;
  void *oy = (void *)attn_act_at(x->io->o, attn_act_size(s->o_type), s->o, t, x->h);
  float *o = s->o_type == ATTN_F32 ? oy : x->oc; /* half outputs: the fp32 row, then rounded */
  x->uk->linear_step(d, dv, qv, kv, dl, 0.0f, S, dv, o, g);
  if (s->o_type != ATTN_F32) attn_act_out(x->uk, s->o_type, 1, dv, o, dv, oy, dv);
}

static const cw_transition dl_transition = {
    .load = dl_load, .local = dl_local, .outputs = dl_outputs, .absorb = dl_absorb, .step = dl_step};

/* A group of value heads [h0, h1): chunk after chunk (cut after every checkpoint, the states
 * copied there), each chunk for every head of the group, so that the chunk's rows of the
 * group's heads, side by side in a token-major input, are read together, while the group's
 * states stay in cache. Each head's arithmetic is its own: the same bits for any grouping. */
typedef struct dl_par {
  const attn_delta_plan *p;
  const struct attn_ukernels *uk;
  const attn_delta_io *io;
  float *ws;
} dl_par;

static void dl_group(void *ctx, size_t task, size_t worker) {
  const dl_par *c = ctx;
  const attn_delta_plan *p = c->p;
  const attn_delta_scratch *at = &p->at;
  float *ws = c->ws + worker * p->worker_floats;
  const size_t h0 = task * p->group, h1 = attn_min_sz(p->shape->h_v, h0 + p->group);
  dl_ctx x = {.p = p,
              .uk = c->uk,
              .io = c->io,
              .q = ws + at->q,
              .k = ws + at->k,
              .kg = ws + at->kg,
              .kn = ws + at->kn,
              .kt = ws + at->kt,
              .kr = ws + at->kr,
              .w = ws + at->w,
              .vb = ws + at->vb,
              .u = ws + at->u,
              .l = ws + at->l,
              .a = ws + at->a,
              .x = ws + at->x,
              .rs = ws + at->rs,
              .e = ws + at->e,
              .oc = ws + at->oc,
              .b = (double *)(void *)(ws + at->b)};
  const size_t n = p->shape->n_q, hf = p->head_floats;
  float *S0 = c->io->state ? c->io->state + h0 * hf : ws + at->s0; /* head h's state at S0 + (h - h0) hf */
  if (!c->io->state) memset(S0, 0, (h1 - h0) * hf * sizeof(float));
  const attn_checkpoints *ck = c->io->ck;
  const size_t nck = ck ? ck->count : 0;
  size_t ci = 0;
  for (size_t j0 = 0, j1; j0 < n; j0 = j1) {
    j1 = attn_min_sz(n, j0 + p->C);
    if (ci < nck && ck->after[ci] + 1 < j1) j1 = ck->after[ci] + 1;
    for (size_t h = h0; h < h1; h++) {
      float *S = S0 + (h - h0) * hf;
      x.h = h, x.hk = h / p->kdiv;
      cw_chunk ck = {.t0 = j0, .cn = j1 - j0}; /* the delta rule's rows live in x's regions */
      (void)attn_cw_chunk(&dl_transition, &x, S, &ck, h, NULL);
    }
    if (ci < nck && ck->after[ci] + 1 == j1) /* checkpoint ci: every head's state, the group's slabs */
      memcpy(ck->states + ci++ * hf * p->shape->h_v + h0 * hf, S0, (h1 - h0) * hf * sizeof(float));
  }
}

void attn_delta_run_all(const attn_delta_plan *p, const struct attn_ukernels *uk, const attn_delta_io *io, float *ws) {
  dl_par c = {.p = p, .uk = uk, .io = io, .ws = ws};
  attn_parallel(p->shape->threads, (p->shape->h_v + p->group - 1) / p->group, dl_group, &c);
}
