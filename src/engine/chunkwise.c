/* The chunkwise engine (engine/chunkwise.h), written once for every ISA path, feature map and
 * state transition. Every product is one call of the path's GEMM micro-kernel. */
#include "engine/chunkwise.h"

/* ---- the identity transition (plain linear attention) ---- */
static void id_intra(float *at, size_t ld, size_t i0, size_t i1) {
  for (size_t j = i0 + 1; j < i1; j++) memset(at + j * ld + i0, 0, (j - i0) * sizeof(float)); /* j > i */
}
static void id_absorb(const struct attn_ukernels *uk, size_t m, size_t W, size_t cn, const float *kf, const float *va,
                      float *s, size_t lds) {
  uk->gemm(m, W, cn, kf, 1, m, va, W, s, lds, NULL, 1); /* Kf read transposed through A's strides */
}
static void id_step(const struct attn_ukernels *uk, size_t m, size_t W, const float *qf, const float *kf,
                    const float *va, float a, float *s, size_t lds, float *out) {
  uk->linear_step(m, W, qf, kf, va, a, s, lds, out);
}
const attn_transition attn_transition_identity = {id_intra, id_absorb, id_step};

static size_t gcd_sz(size_t a, size_t b) {
  while (b) {
    const size_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

attn_status attn_chunkwise_shape(attn_chunkwise_plan *p, const attn_shape *s, size_t H, const attn_featmap *fm,
                                 size_t m_req, int causal, int normalize, float scale, float eps,
                                 const attn_transition *tr) {
  *p = (attn_chunkwise_plan){
      .shape = s, .fm = fm, .tr = tr, .causal = causal, .normalize = normalize, .scale = scale, .eps = eps};
  if (!(p->m = fm->size(s->d, m_req))) return ATTN_E_BAD_FEATURE_MAP;
  p->heads = s->h_k / gcd_sz(s->h_k, s->h_v) * s->h_v; /* lcm: divides H, so no overflow */
  p->per = H / p->heads;
  p->qdiv = H / s->h_q;
  p->kdiv = p->heads / s->h_k;
  p->vdiv = p->heads / s->h_v;
  p->lds = s->dv + 2; /* S | z | offset; cannot overflow: dv <= span of v <= PTRDIFF_MAX / 4 */
  p->W = normalize ? s->dv + 1 : s->dv;
  size_t hm;
  if (!attn_mul_ok(p->heads, p->m, &hm) || !attn_mul_ok(hm, p->lds, &p->state_floats) ||
      p->state_floats > SIZE_MAX / sizeof(float))
    return ATTN_E_SIZE_OVERFLOW;
  return ATTN_OK;
}

attn_status attn_chunkwise_plan_make(attn_chunkwise_plan *p, size_t chunk, const struct attn_ukernels *uk) {
  p->C = chunk ? chunk : uk->linear_chunk;
  size_t cm, cw, cc, ms;
  if (!attn_mul_ok(p->C, p->m, &cm) || !attn_mul_ok(p->C, p->W, &cw) || !attn_mul_ok(p->C, p->C, &cc) ||
      !attn_mul_ok(p->m, p->lds, &ms))
    return ATTN_E_SIZE_OVERFLOW;
  attn_ws w = {0, 0};
  p->off_kf = attn_ws_take(&w, cm);
  p->off_va = attn_ws_take(&w, cw);
  p->off_qt = attn_ws_take(&w, cm);
  p->off_at = attn_ws_take(&w, cc);
  p->off_oc = attn_ws_take(&w, cw);
  p->off_s = attn_ws_take(&w, ms); /* one head's S when the caller keeps no state */
  p->off_fm = attn_ws_take(&w, p->fm->scratch(p->C, p->shape->d, p->m));
  return attn_ws_bytes(&w, &p->scratch_bytes) ? ATTN_OK : ATTN_E_SIZE_OVERFLOW;
}

typedef struct cw_ctx {
  const attn_chunkwise_plan *p;
  const struct attn_ukernels *uk;
  const attn_chunkwise_io *io;
  float *kf, *va, *qt, *at, *oc, *fs;
  size_t hk, hv; /* key and value heads of the task's state head */
} cw_ctx;

/* Kf = psi(K[j0 .. j0+cn)) and Va = [V | 1]. A V row with a non-finite value becomes NaN in every
 * column (z's included), so every output that uses it is NaN in every column. Returns 1 when
 * every V row was finite. */
static int cw_load_kv(const cw_ctx *x, size_t j0, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  p->fm->apply(x->uk, cn, s->d, p->m, x->io->k + j0 * s->k.row_stride + x->hk * s->k.head_stride, s->k.row_stride,
               x->kf, p->m, 1, x->fs);
  int finite = 1;
  for (size_t j = 0; j < cn; j++) {
    float *row = x->va + j * p->W;
    const float *src = x->io->v + (j0 + j) * s->v.row_stride + x->hv * s->v.head_stride;
    if (attn_copy_finite(row, src, s->dv)) {
      if (p->normalize) row[s->dv] = 1.0f;
    } else {
      attn_fill_nan(row, p->W);
      finite = 0;
    }
  }
  return finite;
}

/* o rows t0 .. t0+cn of output head h from the chunk's O rows: s O[0:dv] / (s O[dv] + eps), or
 * s O[0:dv]. A denominator of exactly 0 (eps = 0 and no visible key, or features orthogonal to z)
 * gives 0. */
static void cw_store(const cw_ctx *x, size_t h, size_t t0, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  for (size_t i = 0; i < cn; i++) {
    const float *src = x->oc + i * p->W;
    float *dst = x->io->o + (t0 + i) * s->o.row_stride + h * s->o.head_stride;
    const float den = p->normalize ? p->scale * src[s->dv] + p->eps : 1.0f;
    const float inv = den == 0.0f ? 0.0f : 1.0f / den;
    const float f = p->scale * inv; /* with scale 1, exactly inv */
    for (size_t c = 0; c < s->dv; c++) dst[c] = src[c] * f;
  }
}

/* Query features of rows t0 .. t0+cn of output head h, into qt (element (r, f) at r rs + f cs). */
static void cw_load_q(const cw_ctx *x, size_t h, size_t t0, size_t cn, size_t rs, size_t cs) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  p->fm->apply(x->uk, cn, s->d, p->m, x->io->q + t0 * s->q.row_stride + h / p->qdiv * s->q.head_stride, s->q.row_stride,
               x->qt, rs, cs, x->fs);
}

/* Output rows t0 .. t0+cn of output head h. intra: causal contributions of the loaded chunk;
 * va_finite: whether every Va row of the chunk is finite (cw_load_kv). */
static void cw_query(const cw_ctx *x, const float *S, size_t h, size_t t0, size_t cn, int intra, int va_finite) {
  const attn_chunkwise_plan *p = x->p;
  const struct attn_ukernels *uk = x->uk;
  /* The intra product reads phi(Q)^T as the GEMM's B operand (rows contiguous): features are
   * written transposed. Without it, row-major features are written (contiguous stores, not a
   * scatter) and read as A through its strides; the products are the same, in the same order. */
  const size_t qrs = intra ? 1 : p->m, qcs = intra ? cn : 1;
  cw_load_q(x, h, t0, cn, qrs, qcs);
  /* Causal part, in query blocks [i0, i1) of one GEMM tile width: block i0 needs only keys j < i1
   * (AT[j][i] = psi(k_j).phi(q_i) for j <= i), so the zero triangle is mostly never computed. */
  for (size_t i0 = 0; intra && i0 < cn; i0 += uk->gemm_nr) {
    const size_t i1 = attn_min_sz(cn, i0 + uk->gemm_nr);
    uk->gemm(i1, i1 - i0, p->m, x->kf, p->m, 1, x->qt + i0, cn, x->at + i0, cn, NULL, 0);
    p->tr->intra(x->at, cn, i0, i1);
    if (va_finite) uk->gemm(i1 - i0, p->W, i1, x->at + i0, 1, cn, x->va, p->W, x->oc + i0 * p->W, p->W, NULL, 0);
  }
  /* A non-finite V row: each row i multiplies only keys j <= i, so a later key's NaN never meets
   * its zero weight (0 * NaN). */
  for (size_t i = 0; intra && !va_finite && i < cn; i++)
    uk->gemm(1, p->W, i + 1, x->at + i, 1, cn, x->va, p->W, x->oc + i * p->W, p->W, NULL, 0);
  uk->gemm(cn, p->W, p->m, x->qt, qrs, qcs, S, p->lds, x->oc, p->W, NULL, intra);
  cw_store(x, h, t0, cn);
}

/* A one-token causal chunk (a decode step): one pass over S per output head, the last one also
 * applying the update. */
static void cw_step(const cw_ctx *x, float *S, size_t h0, size_t i, size_t j) {
  const attn_chunkwise_plan *p = x->p;
  cw_load_kv(x, j, 1);
  for (size_t gi = 0; gi < p->per; gi++) {
    cw_load_q(x, h0 + gi, i, 1, p->m, 1);
    float a;
    x->uk->gemm(1, 1, p->m, x->qt, p->m, 1, x->kf, 1, &a, 1, NULL, 0); /* phi(q) . psi(k) */
    p->tr->step(x->uk, p->m, p->W, x->qt, gi + 1 == p->per ? x->kf : NULL, x->va, a, S, p->lds, x->oc);
    cw_store(x, h0 + gi, i, 1);
  }
}

void attn_chunkwise_run(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                        size_t task, float *ws) {
  const attn_shape *s = p->shape;
  const cw_ctx x = {p,
                    uk,
                    io,
                    ws + p->off_kf,
                    ws + p->off_va,
                    ws + p->off_qt,
                    ws + p->off_at,
                    ws + p->off_oc,
                    ws + p->off_fm,
                    task / p->kdiv,
                    task / p->vdiv};
  const size_t C = p->C, per = p->per, h0 = task * per, slab = p->m * p->lds;
  /* Causal bottom-right: keys before the first query's position, queries before the first key. */
  const size_t pre_k = p->causal && s->n_kv > s->n_q ? s->n_kv - s->n_q : 0;
  const size_t pre_q = p->causal && s->n_q > s->n_kv ? s->n_q - s->n_kv : 0;
  float *S = io->state ? io->state + task * slab : ws + p->off_s;
  if (!io->state) memset(S, 0, slab * sizeof(float));
  const size_t absorb_end = p->causal ? pre_k : s->n_kv;
  for (size_t j0 = 0; j0 < absorb_end; j0 += C) {
    const size_t cn = attn_min_sz(C, absorb_end - j0);
    cw_load_kv(&x, j0, cn);
    p->tr->absorb(uk, p->m, p->W, cn, x.kf, x.va, S, p->lds);
  }
  const size_t state_only_end = p->causal ? pre_q : s->n_q;
  for (size_t gi = 0; gi < per; gi++)
    for (size_t i0 = 0; i0 < state_only_end; i0 += C)
      cw_query(&x, S, h0 + gi, i0, attn_min_sz(C, state_only_end - i0), 0, 1);
  if (!p->causal) return;
  const size_t aligned = s->n_kv - pre_k; /* == n_q - pre_q */
  for (size_t t0 = 0; t0 < aligned; t0 += C) {
    const size_t cn = attn_min_sz(C, aligned - t0);
    if (cn == 1) {
      cw_step(&x, S, h0, pre_q + t0, pre_k + t0);
      continue;
    }
    const int va_finite = cw_load_kv(&x, pre_k + t0, cn);
    for (size_t gi = 0; gi < per; gi++) cw_query(&x, S, h0 + gi, pre_q + t0, cn, 1, va_finite);
    p->tr->absorb(uk, p->m, p->W, cn, x.kf, x.va, S, p->lds);
  }
}
