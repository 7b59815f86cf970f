/*
 * Linear attention driver (VARIANTS.md section 3), written once for every ISA path.
 *
 * Per key/value head, with W = dv + 1 when normalised (V is augmented with a ones column, so the
 * same products that give S also give z, and phi(q).z comes out as column dv of the output) and
 * W = dv otherwise; the state S of one head is m x (dv + 1), z being its last column:
 *   absorb (keys only):   Kf = psi(K_c) (C x m),  Va = [V_c | 1] (C x W),   S += Kf^T Va
 *   query chunk:          QfT = phi(Q_c)^T (m x C), written transposed by the feature kernel
 *     causal (intra):     AT = Kf QfT (C x C, AT[j][i] = psi(k_j).phi(q_i)), zero where j > i,
 *                         O = AT^T Va
 *     every query:        O (+)= QfT^T S
 *     o_i = O[i][0:dv] / (O[i][dv] + eps)   (un-normalised: o_i = O[i][0:dv])
 * Every product is one call of the path's GEMM micro-kernel: nothing here is per-ISA. A one-token
 * chunk (the recurrent decode step) uses the step micro-kernel instead, which makes one pass over
 * S per query head: out = (phi(q).psi(k)) [v 1] + phi(q)^T S, then S += psi(k) [v 1]^T.
 *
 * Bottom-right alignment: with n_q < n_kv the first n_kv - n_q keys are absorbed before any
 * query; with n_q > n_kv the first n_q - n_kv queries see only the incoming state.
 */
#include <math.h>
#include <string.h>

#include "core/internal.h"

typedef struct lin_plan {
  size_t m, W, ldS, C, g;
  size_t off_kf, off_va, off_qt, off_at, off_oc, off_s;
  size_t ws_bytes;
  size_t state_floats;
  size_t span_q, span_k, span_v, span_o;
} lin_plan;

static attn_status feature_size(const attn_linear_desc *d, size_t *m) {
  switch (d->feature_map) {
    case ATTN_FEATURE_IDENTITY:
    case ATTN_FEATURE_ELU1:
      *m = d->d;
      return ATTN_OK;
    default:
      return ATTN_E_BAD_FEATURE_MAP;
  }
}

/* Validation and sizes that do not depend on the ISA path. */
static attn_status lin_validate(const attn_linear_desc *d, lin_plan *p) {
  attn_status st;
  if (!d) return ATTN_E_NULL_POINTER;
  if (!d->n_q || !d->n_kv || !d->h_q || !d->h_kv || !d->d || !d->dv) return ATTN_E_ZERO_SIZE;
  if (d->h_q % d->h_kv) return ATTN_E_BAD_HEADS;
  if ((st = feature_size(d, &p->m))) return st;
  if ((d->causal != 0 && d->causal != 1) || (d->normalize != 0 && d->normalize != 1) ||
      d->chunk > ATTN_LINEAR_MAX_CHUNK)
    return ATTN_E_BAD_ARGUMENT;
  if (!isfinite(d->eps) || d->eps < 0.0f) return ATTN_E_BAD_EPS;
  if ((st = attn_check_input(d->n_q, d->h_q, d->d, d->q, &p->span_q)) ||
      (st = attn_check_input(d->n_kv, d->h_kv, d->d, d->k, &p->span_k)) ||
      (st = attn_check_input(d->n_kv, d->h_kv, d->dv, d->v, &p->span_v)) ||
      (st = attn_check_output(d->n_q, d->h_q, d->dv, d->o, &p->span_o)))
    return st;
  p->g = d->h_q / d->h_kv;
  p->ldS = d->dv + 1; /* cannot overflow: dv <= span_v <= PTRDIFF_MAX / 4 */
  p->W = d->normalize ? p->ldS : d->dv;
  size_t hm, sf, sb;
  if (!attn_mul_ok(d->h_kv, p->m, &hm) || !attn_mul_ok(hm, p->ldS, &sf) || !attn_mul_ok(sf, sizeof(float), &sb))
    return ATTN_E_SIZE_OVERFLOW;
  p->state_floats = sf;
  return ATTN_OK;
}

/* Workspace layout for a path's chunk size. */
static attn_status lin_plan_make(const attn_linear_desc *d, const struct attn_ukernels *uk, lin_plan *p) {
  p->C = d->chunk ? d->chunk : uk->linear_chunk;
  size_t cm, cw, cc, ms;
  if (!attn_mul_ok(p->C, p->m, &cm) || !attn_mul_ok(p->C, p->W, &cw) || !attn_mul_ok(p->C, p->C, &cc) ||
      !attn_mul_ok(p->m, p->ldS, &ms))
    return ATTN_E_SIZE_OVERFLOW;
  attn_ws w = {0, 0};
  p->off_kf = attn_ws_take(&w, cm);
  p->off_va = attn_ws_take(&w, cw);
  p->off_qt = attn_ws_take(&w, cm);
  p->off_at = attn_ws_take(&w, cc);
  p->off_oc = attn_ws_take(&w, cw);
  p->off_s = attn_ws_take(&w, ms); /* one head's S when the caller keeps no state */
  return attn_ws_bytes(&w, &p->ws_bytes) ? ATTN_OK : ATTN_E_SIZE_OVERFLOW;
}

attn_status attn_linear_desc_init(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                                  size_t dim, size_t dv, attn_feature_map feature_map) {
  if (!d) return ATTN_E_NULL_POINTER;
  *d = (attn_linear_desc){0};
  d->n_q = n_q;
  d->n_kv = n_kv;
  d->h_q = h_q;
  d->h_kv = h_kv;
  d->d = dim;
  d->dv = dv;
  d->feature_map = feature_map;
  d->causal = 1;
  d->normalize = 1;
  d->eps = 1e-6f;
  d->chunk = 0;
  attn_default_layouts(h_q, h_kv, dim, dv, &d->q, &d->k, &d->v, &d->o);
  return ATTN_OK;
}

attn_status attn_linear_feature_size(const attn_linear_desc *d, size_t *m) {
  lin_plan p;
  attn_status st = lin_validate(d, &p);
  if (st) return st;
  if (!m) return ATTN_E_NULL_POINTER;
  *m = p.m;
  return ATTN_OK;
}

attn_status attn_linear_state_size(const attn_linear_desc *d, size_t *bytes) {
  lin_plan p;
  attn_status st = lin_validate(d, &p);
  if (st) return st;
  if (!bytes) return ATTN_E_NULL_POINTER;
  *bytes = p.state_floats * sizeof(float);
  return ATTN_OK;
}

static size_t state_floats(const attn_linear_state *s) { return s->heads * s->m * (s->dv + 1); }

attn_status attn_linear_state_init(attn_linear_state *s, const attn_linear_desc *d, void *memory, size_t bytes) {
  lin_plan p;
  attn_status st = lin_validate(d, &p);
  if (st) return st;
  if (!s || !memory) return ATTN_E_NULL_POINTER;
  if (bytes < p.state_floats * sizeof(float)) return ATTN_E_WORKSPACE_TOO_SMALL;
  *s = (attn_linear_state){d->h_kv, p.m, d->dv, d->feature_map, d->normalize, 0, (float *)memory};
  memset(memory, 0, p.state_floats * sizeof(float));
  return ATTN_OK;
}

attn_status attn_linear_state_reset(attn_linear_state *s) {
  if (!s || !s->data) return ATTN_E_NULL_POINTER;
  memset(s->data, 0, state_floats(s) * sizeof(float));
  s->tokens = 0;
  return ATTN_OK;
}

attn_status attn_linear_state_copy(attn_linear_state *dst, const attn_linear_state *src) {
  if (!dst || !src || !dst->data || !src->data) return ATTN_E_NULL_POINTER;
  if (dst->heads != src->heads || dst->m != src->m || dst->dv != src->dv || dst->feature_map != src->feature_map ||
      dst->normalize != src->normalize)
    return ATTN_E_STATE_MISMATCH;
  const size_t n = state_floats(src) * sizeof(float);
  if (dst->data != src->data) {
    if (attn_overlap(dst->data, n, src->data, n)) return ATTN_E_ALIASING;
    memcpy(dst->data, src->data, n);
  }
  dst->tokens = src->tokens;
  return ATTN_OK;
}

/* Validation, then the plan on the active path (shared by the query functions). */
static attn_status lin_plan_active(const attn_linear_desc *d, const void *out, lin_plan *p) {
  attn_status st = lin_validate(d, p);
  if (st) return st;
  if (!out) return ATTN_E_NULL_POINTER;
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  return lin_plan_make(d, uk, p);
}

attn_status attn_linear_workspace_size(const attn_linear_desc *d, size_t *bytes) {
  lin_plan p;
  attn_status st = lin_plan_active(d, bytes, &p);
  if (st == ATTN_OK) *bytes = p.ws_bytes;
  return st;
}

attn_status attn_linear_chunk_size(const attn_linear_desc *d, size_t *chunk) {
  lin_plan p;
  attn_status st = lin_plan_active(d, chunk, &p);
  if (st == ATTN_OK) *chunk = p.C;
  return st;
}

typedef struct lin_ctx {
  const attn_linear_desc *d;
  const lin_plan *p;
  const struct attn_ukernels *uk;
  float *kf, *va, *qt, *at, *oc;
} lin_ctx;

/* Kf = psi(K[j0 .. j0+cn)) and Va = [V | 1] of key/value head hk. A V row with a non-finite
 * value becomes NaN in every column (z's included), so every output that uses it is NaN in every
 * column. Returns 1 when every V row was finite. */
static int lin_load_kv(const lin_ctx *x, const float *k, const float *v, size_t hk, size_t j0, size_t cn) {
  const attn_linear_desc *d = x->d;
  x->uk->featmap(d->feature_map, cn, d->d, k + j0 * d->k.row_stride + hk * d->k.head_stride, d->k.row_stride,
                 x->kf, x->p->m, 1);
  int finite = 1;
  for (size_t j = 0; j < cn; j++) {
    float *row = x->va + j * x->p->W;
    const float *src = v + (j0 + j) * d->v.row_stride + hk * d->v.head_stride;
    if (attn_copy_finite(row, src, d->dv)) {
      if (d->normalize) row[d->dv] = 1.0f;
    } else {
      attn_fill_nan(row, x->p->W);
      finite = 0;
    }
  }
  return finite;
}

/* S += Kf^T Va (Kf read transposed through the GEMM's A strides). */
static void lin_absorb(const lin_ctx *x, float *S, size_t cn) {
  x->uk->gemm(x->p->m, x->p->W, cn, x->kf, 1, x->p->m, x->va, x->p->W, S, x->p->ldS, NULL, 1);
}

/* o rows i0 .. i0+cn of query head h from the chunk's O rows: O[0:dv] / (O[dv] + eps), or O[0:dv].
 * A denominator of exactly 0 (eps = 0 and no visible key, or features orthogonal to z) gives 0. */
static void lin_store(const lin_ctx *x, float *o, size_t h, size_t i0, size_t cn) {
  const attn_linear_desc *d = x->d;
  for (size_t i = 0; i < cn; i++) {
    const float *src = x->oc + i * x->p->W;
    float *dst = o + (i0 + i) * d->o.row_stride + h * d->o.head_stride;
    const float den = d->normalize ? src[d->dv] + d->eps : 1.0f;
    const float inv = den == 0.0f ? 0.0f : 1.0f / den;
    for (size_t c = 0; c < d->dv; c++) dst[c] = src[c] * inv;
  }
}

/* Output rows t0 .. t0+cn of query head h. intra: causal contributions of the loaded chunk;
 * va_finite: whether every Va row of the chunk is finite (lin_load_kv). */
static void lin_query(const lin_ctx *x, const float *q, float *o, const float *S, size_t h, size_t t0, size_t cn,
                      int intra, int va_finite) {
  const attn_linear_desc *d = x->d;
  const lin_plan *p = x->p;
  x->uk->featmap(d->feature_map, cn, d->d, q + t0 * d->q.row_stride + h * d->q.head_stride, d->q.row_stride,
                 x->qt, 1, cn);
  /* Causal part, in query blocks [i0, i1) of one GEMM tile width: block i0 needs only keys j < i1
   * (AT[j][i] = psi(k_j).phi(q_i) for j <= i), so the zero triangle is mostly never computed. */
  for (size_t i0 = 0; intra && i0 < cn; i0 += x->uk->gemm_nr) {
    const size_t i1 = attn_min_sz(cn, i0 + x->uk->gemm_nr);
    x->uk->gemm(i1, i1 - i0, p->m, x->kf, p->m, 1, x->qt + i0, cn, x->at + i0, cn, NULL, 0);
    for (size_t j = i0 + 1; j < i1; j++) memset(x->at + j * cn + i0, 0, (j - i0) * sizeof(float)); /* j > i */
    if (va_finite)
      x->uk->gemm(i1 - i0, p->W, i1, x->at + i0, 1, cn, x->va, p->W, x->oc + i0 * p->W, p->W, NULL, 0);
  }
  /* A non-finite V row: each row i multiplies only keys j <= i, so a later key's NaN never meets
   * its zero weight (0 * NaN). */
  for (size_t i = 0; intra && !va_finite && i < cn; i++)
    x->uk->gemm(1, p->W, i + 1, x->at + i, 1, cn, x->va, p->W, x->oc + i * p->W, p->W, NULL, 0);
  x->uk->gemm(cn, p->W, p->m, x->qt, 1, cn, S, p->ldS, x->oc, p->W, NULL, intra);
  lin_store(x, o, h, t0, cn);
}

/* A one-token causal chunk (a decode step): the recurrent step kernel makes one pass over S per
 * query head, the group's last head also applying the update S += psi(k) [v 1]^T. */
static void lin_step(const lin_ctx *x, const float *q, const float *k, const float *v, float *o, float *S, size_t hk,
                     size_t i, size_t j) {
  const attn_linear_desc *d = x->d;
  const lin_plan *p = x->p;
  lin_load_kv(x, k, v, hk, j, 1);
  for (size_t gi = 0; gi < p->g; gi++) {
    const size_t h = hk * p->g + gi;
    x->uk->featmap(d->feature_map, 1, d->d, q + i * d->q.row_stride + h * d->q.head_stride, d->q.row_stride, x->qt,
                   p->m, 1);
    float a;
    x->uk->gemm(1, 1, p->m, x->qt, p->m, 1, x->kf, 1, &a, 1, NULL, 0); /* phi(q) . psi(k) */
    x->uk->linear_step(p->m, p->W, x->qt, gi + 1 == p->g ? x->kf : NULL, x->va, a, S, p->ldS, x->oc);
    lin_store(x, o, h, i, 1);
  }
}

static void lin_run(const attn_linear_desc *d, const lin_plan *p, const struct attn_ukernels *uk, const float *q,
                    const float *k, const float *v, float *o, attn_linear_state *state, float *ws) {
  const lin_ctx x = {d, p, uk, ws + p->off_kf, ws + p->off_va, ws + p->off_qt, ws + p->off_at, ws + p->off_oc};
  const size_t C = p->C, g = p->g, slab = p->m * p->ldS;
  /* Causal bottom-right: keys before the first query's position, queries before the first key. */
  const size_t pre_k = d->causal && d->n_kv > d->n_q ? d->n_kv - d->n_q : 0;
  const size_t pre_q = d->causal && d->n_q > d->n_kv ? d->n_q - d->n_kv : 0;
  for (size_t hk = 0; hk < d->h_kv; hk++) {
    float *S = state ? state->data + hk * slab : ws + p->off_s;
    if (!state) memset(S, 0, slab * sizeof(float));
    const size_t absorb_end = d->causal ? pre_k : d->n_kv;
    for (size_t j0 = 0; j0 < absorb_end; j0 += C) {
      const size_t cn = attn_min_sz(C, absorb_end - j0);
      lin_load_kv(&x, k, v, hk, j0, cn);
      lin_absorb(&x, S, cn);
    }
    const size_t state_only_end = d->causal ? pre_q : d->n_q;
    for (size_t gi = 0; gi < g; gi++)
      for (size_t i0 = 0; i0 < state_only_end; i0 += C)
        lin_query(&x, q, o, S, hk * g + gi, i0, attn_min_sz(C, state_only_end - i0), 0, 1);
    if (!d->causal) continue;
    const size_t aligned = d->n_kv - pre_k; /* == d->n_q - pre_q */
    for (size_t t0 = 0; t0 < aligned; t0 += C) {
      const size_t cn = attn_min_sz(C, aligned - t0);
      if (cn == 1) {
        lin_step(&x, q, k, v, o, S, hk, pre_q + t0, pre_k + t0);
        continue;
      }
      const int va_finite = lin_load_kv(&x, k, v, hk, pre_k + t0, cn);
      for (size_t gi = 0; gi < g; gi++) lin_query(&x, q, o, S, hk * g + gi, pre_q + t0, cn, 1, va_finite);
      lin_absorb(&x, S, cn);
    }
  }
  if (state) state->tokens += d->n_kv;
}

attn_status attn_linear(const attn_linear_desc *d, const float *q, const float *k, const float *v, float *o,
                        attn_linear_state *state, void *workspace, size_t workspace_size) {
  lin_plan p;
  attn_status st = lin_validate(d, &p);
  if (st) return st;
  if (!q || !k || !v || !o || !workspace) return ATTN_E_NULL_POINTER;
  if (state && !d->causal) return ATTN_E_BAD_ARGUMENT;
  if (state) {
    if (!state->data) return ATTN_E_NULL_POINTER;
    if (state->heads != d->h_kv || state->m != p.m || state->dv != d->dv || state->feature_map != d->feature_map ||
        state->normalize != d->normalize)
      return ATTN_E_STATE_MISMATCH;
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  if ((st = lin_plan_make(d, uk, &p))) return st;
  if (workspace_size < p.ws_bytes) return ATTN_E_WORKSPACE_TOO_SMALL;
  const size_t F = sizeof(float);
  const void *in[3] = {q, k, v};
  const size_t in_n[3] = {p.span_q * F, p.span_k * F, p.span_v * F};
  const size_t sb = state ? p.state_floats * F : 0;
  for (int i = 0; i < 3; i++)
    if (attn_overlap(o, p.span_o * F, in[i], in_n[i]) || attn_overlap(workspace, workspace_size, in[i], in_n[i]) ||
        (state && attn_overlap(state->data, sb, in[i], in_n[i])))
      return ATTN_E_ALIASING;
  if (attn_overlap(o, p.span_o * F, workspace, workspace_size) ||
      (state && (attn_overlap(state->data, sb, o, p.span_o * F) || attn_overlap(state->data, sb, workspace, workspace_size))))
    return ATTN_E_ALIASING;
  lin_run(d, &p, uk, q, k, v, o, state, attn_ws_base(workspace));
  return ATTN_OK;
}
