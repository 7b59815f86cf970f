/* The one-token chunk (the decode step) and, for the serial loop and the scan, what precedes a
 * state head's aligned chunks (engine/chunkwise.h). */
#include "engine/chunkwise/internal.h"

/* A one-token causal chunk (a decode step), its key loaded (attn_cw_load_kv): one pass over S per
 * output head, the last one also applying the update S = G S + beta psi(k) v^T. With gates, out = a v + (G phi(q))^T S (S as on
 * entry), a = phi(q) . beta psi(k): the query's features carry the decay. */
void attn_cw_step_loaded(const cw_ctx *x, float *S, size_t h0, size_t i, size_t j) {
  if (x->p->fm->offsets) attn_cw_key_offsets(x, S, 1);
  attn_cw_step_rows(x, S, h0, i, x->kf, x->va, attn_cw_step_factors(x, j, 1, x->kf, x->dc, 0));
}

/* Key row j's features src times its beta (this state head's gate head) into dst (m floats; dst
 * may be src). */
static void cw_beta_row(const cw_ctx *x, size_t j, const float *src, float *dst) {
  const attn_chunkwise_gates *gs = &x->p->g;
  const float bt = x->io->beta[j * gs->blayout.row_stride + x->hg * gs->blayout.head_stride];
  for (size_t f = 0; f < x->p->m; f++) dst[f] = src[f] * bt;
}

/* Key rows j0 .. j0 + cn's decay of S's rows into g (cn x m: exp(log gate); a scalar gate's m
 * times, or with one, once per token: cn floats). Returns g, or NULL without a gate. */
static const float *cw_gate_factors(const cw_ctx *x, size_t j0, size_t cn, float *g, int one) {
  const attn_chunkwise_gates *gs = &x->p->g;
  const size_t m = x->p->m;
  if (gs->kind == ATTN_GATE_NONE) return NULL;
  const int feat = gs->kind == ATTN_GATE_FEATURE;
  const float *lg = x->io->log_gate + x->hg * gs->layout.head_stride;
  for (size_t u = 0; u < cn; u++) {
    float *gu = g + (!feat && one ? u : u * m);
    x->uk->vexp(feat ? m : 1, lg + (j0 + u) * gs->layout.row_stride, gu);
    for (size_t f = 1; !feat && !one && f < m; f++) gu[f] = gu[0];
  }
  return g;
}

/* Key rows j0 .. j0 + cn's per-token factors: beta into their features kf (cn x m), and their
 * decay of S's rows into g (cw_gate_factors). Returns g, or NULL without a gate. */
const float *attn_cw_step_factors(const cw_ctx *x, size_t j0, size_t cn, float *kf, float *g, int one) {
  for (size_t u = 0; x->p->g.beta && u < cn; u++) cw_beta_row(x, j0 + u, kf + u * x->p->m, kf + u * x->p->m);
  return cw_gate_factors(x, j0, cn, g, one);
}

/* One query's features qf against S (row stride x->ls) into out (W floats), with key row kf (beta
 * in it) and va, the decay g of S's rows (NULL: none): with update, S moves past the key and out
 * = phi(q)^T S after it; without, out = a v + (g phi(q))^T S, a = phi(q) . kf (qf becomes
 * g phi(q)): the same in exact arithmetic. */
static void cw_step_one(const cw_ctx *x, float *S, float *qf, float *kf, const float *va, const float *g, float *out,
                        int update) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  if (update) {
    x->uk->linear_step(m, p->W, qf, kf, va, 0.0f, S, x->ls, out, g);
    return;
  }
  float a;
  x->uk->gemm(1, 1, m, qf, m, 1, kf, 1, &a, 1, NULL, 0); /* phi(q) . psi(k) */
  for (size_t f = 0; g && f < m; f++) qf[f] *= g[f];
  x->uk->linear_step(m, p->W, qf, NULL, va, a, S, x->ls, out, NULL);
}

/* Query i of output heads h0 .. h0 + per against S, and S past key row kf, va (cw_step_one). */
void attn_cw_step_rows(const cw_ctx *x, float *S, size_t h0, size_t i, float *kf, const float *va, const float *g) {
  const attn_chunkwise_plan *p = x->p;
  for (size_t gi = 0; gi < p->per; gi++) {
    attn_cw_load_q(x, S, h0 + gi, i, 1, p->m, 1, 1);
    cw_step_one(x, S, x->qt, kf, va, g, cw_out_rows(x, p->direct, h0 + gi, i, NULL), gi + 1 == p->per);
    if (!p->direct) attn_cw_store(x, h0 + gi, i, 1);
  }
}

/* What comes before a causal call's aligned chunks (all of a non-causal call): the keys absorbed
 * before any query, then the queries that read only that state. */
void attn_cw_lead(const cw_ctx *x, float *S, size_t h0) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  const size_t C = p->C, absorb_end = p->causal ? cw_pre_k(p) : s->n_kv;
  for (size_t j0 = 0; j0 < absorb_end; j0 += C) {
    const size_t cn = attn_min_sz(C, absorb_end - j0);
    if (j0 + C < absorb_end) attn_cw_prefetch_rows(x, h0, SIZE_MAX, j0 + C, attn_min_sz(C, absorb_end - j0 - C));
    attn_cw_load_kv(x, j0, cn);
    if (p->fm->offsets) attn_cw_key_offsets(x, S, cn);
    if (cw_gated(p)) attn_cw_gates(x, j0, cn, CW_FOR_ABSORB);
    cw_absorb(x, S, cn);
  }
  const size_t state_only_end = p->causal ? cw_pre_q(p) : s->n_q;
  for (size_t i0 = 0; i0 < state_only_end; i0 += C) {
    if (i0 + C < state_only_end)
      attn_cw_prefetch_rows(x, h0, i0 + C, SIZE_MAX, attn_min_sz(C, state_only_end - i0 - C));
    for (size_t gi = 0; gi < p->per; gi++) attn_cw_query(x, S, h0 + gi, i0, attn_min_sz(C, state_only_end - i0), 0, 1);
  }
}

/* A one-token call's state head h (the plan's decode: one output head per state head, a map
 * without offsets): the features of its key (beta in them) and query, its value row, its decay
 * (a scalar gate: one exp), then one call of the recurrence kernel, which makes the output and
 * moves S in one pass over it. An identity map's rows are read in place, and so is an
 * un-normalised value row, when their values are all finite (otherwise the map's NaN features
 * and Va's NaN row, as every call makes them: the non-finite policy); un-scaled fp32 outputs
 * are written in place. What attn_cw_decode_facts found for every head is not asked again. */
void attn_cw_decode(const cw_ctx *x, float *S, size_t h) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  const unsigned fin = x->io->dec_finite;
  const int identity = p->fm->id == ATTN_FEATURE_IDENTITY;
  const float *kf = cw_k_row(x, 0), *va = cw_v_row(x, 0);
  if (!identity || !((fin & CW_DEC_K) || attn_rows_finite(kf, 1, m, 0))) {
    attn_cw_load_k(x, 0, 1);
    kf = x->kf;
  }
  if (p->g.beta) { /* beta times the features, from the row in place where the map is its copy */
    cw_beta_row(x, 0, kf, x->kf);
    kf = x->kf;
  }
  /* a scalar gate: one float */
  const float *g = x->io->dec_g ? x->io->dec_g + x->hg : cw_gate_factors(x, 0, 1, x->dc, 1);
  if (p->normalize || !((fin & CW_DEC_V) || attn_rows_finite(va, 1, p->shape->dv, 0))) {
    (void)attn_cw_load_v(x, 0, 1);
    va = x->va;
  }
  size_t ldq;
  const float *qf = identity ? cw_q_rows(x, h / p->qdiv, 0, 1, &ldq) : NULL;
  if (!qf || !((fin & CW_DEC_Q) || attn_rows_finite(qf, 1, m, 0))) {
    attn_cw_load_q(x, S, h, 0, 1, m, 1, 1);
    qf = x->qt;
  }
  x->uk->linear_recur(1, m, p->W, qf, kf, va, 0, g, p->g.kind == ATTN_GATE_SCALAR, S, x->ls,
                      cw_out_rows(x, p->direct, h, 0, NULL), 0);
  if (!p->direct) attn_cw_store(x, h, 0, 1);
}

/* A decode step's facts about every head, made once before its tasks (into *dio, a copy of io;
 * g: CW_DEC_G_MAX floats): whether all of the token's fp32 query rows, key rows and value rows
 * are finite, each tensor checked as one array (heads that share one q and one k row, as
 * Mamba-2's, checked once rather than once a head); and the scalar gates' factors in one vexp
 * call (lane by lane the same bits as a head's own call; beta, where there is one, scales each
 * head's key row in attn_cw_decode). A head whose fact is not
 * set checks its own rows, as before. */
const attn_chunkwise_io *attn_cw_decode_facts(const attn_chunkwise_plan *p, const struct attn_ukernels *uk,
                                              const attn_chunkwise_io *io, attn_chunkwise_io *dio, float *g) {
  const attn_shape *s = p->shape;
  const attn_chunkwise_gates *gs = &p->g;
  *dio = *io;
  dio->dec_finite = 0;
  dio->dec_g = NULL;
  if (p->fm->id == ATTN_FEATURE_IDENTITY) {
    if (s->q_type == ATTN_F32 && attn_rows_finite(io->q, s->h_q, s->d, s->q.head_stride)) dio->dec_finite |= CW_DEC_Q;
    if (attn_rows_finite(io->k, s->h_k, s->d, s->k.head_stride)) dio->dec_finite |= CW_DEC_K;
  }
  if (!p->normalize && attn_rows_finite(io->v, s->h_v, s->dv, s->v.head_stride)) dio->dec_finite |= CW_DEC_V;
  if (gs->kind == ATTN_GATE_SCALAR && gs->h_g <= CW_DEC_G_MAX) {
    for (size_t h = 0; h < gs->h_g; h++) g[h] = io->log_gate[h * gs->layout.head_stride];
    uk->vexp(gs->h_g, g, g);
    dio->dec_g = g;
  }
  return dio;
}
