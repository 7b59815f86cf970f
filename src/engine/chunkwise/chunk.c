/* The per-chunk steps (engine/chunkwise.h): a chunk's keys and values loaded, absorbed into a
 * state, and a chunk of queries' outputs from a state and the chunk's own keys. */
#include "engine/chunkwise/internal.h"

/* S = dC (.) S + (Kf (.) dout)^T Va for a chunk of cn keys (kf unchanged: the scaled features go
 * to x's qt, free until the next outputs load their queries); with accumulate 0,
 * S = (Kf (.) dout)^T Va (a scan's chunk-local state, engine/chunkwise.h). */
void attn_cw_absorb_to(const cw_ctx *x, float *kf, float *S, size_t cn, int accumulate) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  const float *a = kf;
  if (p->g.kind == ATTN_GATE_FEATURE) { /* Kf (.) exp(B_last - B), rows times beta */
    x->uk->gate_exp(cn, m, x->b, m, x->b + (cn - 1) * m, 1, kf, m, x->qt, m);
    if (p->g.beta) x->uk->rows_axpby(cn, m, x->qt, m, x->qt, m, NULL, 0, x->dout, 1, 0, 0);
    a = x->qt;
  } else if (cw_gated(p)) { /* row c scaled by dout[c] */
    x->uk->rows_axpby(cn, m, x->qt, m, kf, m, NULL, 0, x->dout, 1, 0, 0);
    a = x->qt;
  }
  const float *dc = accumulate && p->g.kind != ATTN_GATE_NONE ? x->dc : NULL;
  x->uk->gemm(m, p->W, cn, a, 1, m, x->va, p->ldw, S, p->lds, dc, accumulate);
}

/* Kf = psi(K[j0 .. j0+cn)) (exponential maps: their pre-exponential features, in ku; see
 * attn_cw_key_offsets) and Va = [V | 1]. A V row with a non-finite value becomes NaN in every column
 * (z's included), so every output that uses it is NaN in every column. Returns 1 when every V row
 * was finite. */
int attn_cw_load_kv(const cw_ctx *x, size_t j0, size_t cn) {
  attn_cw_load_k(x, j0, cn);
  return attn_cw_load_v(x, j0, cn);
}

/* Kf alone (attn_cw_load_kv). */
void attn_cw_load_k(const cw_ctx *x, size_t j0, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  p->fm->apply(x->uk, &x->fa, 1, cn, s->d, p->m, cw_k_row(x, j0), x->gk ? s->d : s->k.row_stride,
               p->fm->offsets ? x->ku : x->kf, p->m, 1, x->fs);
}

/* Va = [V | 1] alone (attn_cw_load_kv). */
int attn_cw_load_v(const cw_ctx *x, size_t j0, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  const float *v = cw_v_row(x, j0);
  const size_t ldv = x->gv ? s->dv : s->v.row_stride;
  const int finite = x->uk->rows_copy(cn, s->dv, x->va, p->ldw, v, ldv);
  for (size_t j = 0; p->normalize && j < cn; j++) x->va[j * p->ldw + s->dv] = 1.0f;
  for (size_t j = 0; !finite && j < cn; j++) /* the rows with a non-finite value */
    if (!attn_rows_finite(v + j * ldv, 1, s->dv, 0)) attn_fill_nan(x->va + j * p->ldw, p->W);
  return finite;
}

/* o rows t0 .. t0+cn of output head h from the chunk's O rows: s O[0:dv] / (s O[dv] + eps), or
 * s O[0:dv]. A denominator of exactly 0 (eps = 0 and no visible key, or features orthogonal to z)
 * gives 0; one whose factor overflows (subnormal) is divided row by row in double
 * (attn_row_div). */
void attn_cw_store(const cw_ctx *x, size_t h, size_t t0, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  float f[CW_ROW_BATCH], dn[CW_ROW_BATCH]; /* the rows' factors; a row's denominator when f overflowed */
  for (size_t i0 = 0; i0 < cn; i0 += CW_ROW_BATCH) {
    const size_t rn = attn_min_sz(CW_ROW_BATCH, cn - i0);
    int tiny = 0;
    for (size_t i = 0; i < rn; i++) {
      const float den = p->divide ? p->out_scale * x->oc[(i0 + i) * p->ldw + s->dv] + p->eps : 1.0f;
      const float inv = den == 0.0f ? 0.0f : 1.0f / den;
      f[i] = p->out_scale * inv;                             /* with scale 1, exactly inv */
      dn[i] = !isfinite(f[i]) && isfinite(den) ? den : 0.0f; /* (scale 0: 0 inf) */
      tiny |= dn[i] != 0.0f;
    }
    void *o = (void *)attn_act_at(x->io->o, attn_act_size(s->o_type), s->o, t0 + i0, h);
    const int direct = s->o_type == ATTN_F32; /* else the fp32 rows, then rounded */
    float *of = direct ? o : x->oh;
    const size_t ldo = direct ? s->o.row_stride : s->dv;
    x->uk->rows_axpby(rn, s->dv, of, ldo, x->oc + i0 * p->ldw, p->ldw, NULL, 0, f, 1, 0, 0);
    for (size_t i = 0; tiny && i < rn; i++)
      if (dn[i] != 0.0f) attn_row_div(s->dv, x->oc + (i0 + i) * p->ldw, (double)p->out_scale, dn[i], of + i * ldo);
    if (!direct) attn_act_out(x->uk, s->o_type, rn, s->dv, x->oh, s->dv, o, s->o.row_stride);
  }
}

/* Query features of rows t0 .. t0+cn of output head h, into qt (element (r, f) at r rs + f cs).
 * Exponential maps: intra, the chunk's keys (attn_cw_key_offsets done) are visible row by row (row r
 * sees keys 0 .. r); otherwise only S. */
void attn_cw_load_q(const cw_ctx *x, const float *S, size_t h, size_t t0, size_t cn, size_t rs, size_t cs, int intra) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  size_t ldq;
  const float *q = cw_q_rows(x, h / p->qdiv, t0, cn, &ldq);
  if (!p->fm->offsets) {
    p->fm->apply(x->uk, &x->fa, 0, cn, s->d, p->m, q, ldq, x->qt, rs, cs, x->fs);
    return;
  }
  const size_t m = p->m;
  p->fm->apply(x->uk, &x->fa, 0, cn, s->d, m, q, ldq, x->qu, m, 1, x->fs);
  if (p->fm->query == ATTN_EXPF_SOFTMAX) { /* running denominators: z, then the chunk's keys */
    for (size_t f = 0; f < m; f++) x->rn[f] = S[f * p->lds + s->dv];
    x->uk->expfeat(ATTN_EXPF_SOFTMAX, cn, m, x->qu, m, intra ? x->kf : NULL, m, x->rn, NULL, x->qt, rs, cs);
    return;
  }
  /* running offsets: those before the chunk, then its keys; features use the chunk's offsets */
  if (!intra) attn_cw_offsets_of(p, S, x->cn);
  memcpy(x->rn, intra ? x->cp : x->cn, m * sizeof(float));
  x->uk->expfeat(ATTN_EXPF_QUERY, cn, m, x->qu, m, intra ? x->ku : NULL, m, x->rn, x->cn, x->qt, rs, cs);
}

/* Intra weights of query block [i0, i1) (AT[j][i], j < i1): zero where j > i, and with gates or
 * beta, weighted by wt[j][i], or (factored) row j by dout_j and column i by g_i (wt[i]). */
static void cw_intra_weights(const cw_ctx *x, size_t cn, size_t i0, size_t i1, int factored) {
  if (factored) {
    x->uk->rows_axpby(i1, i1 - i0, x->at + i0, cn, x->at + i0, cn, NULL, 0, x->dout, 1, 0, 0);
    x->uk->rows_cols(ATTN_COLS_SCALE, i1, i1 - i0, x->at + i0, cn, x->at + i0, cn, x->wt + i0);
    for (size_t j = i0 + 1; j < i1; j++) memset(x->at + j * cn + i0, 0, (j - i0) * sizeof(float));
    return;
  }
  const int gated = cw_gated(x->p);
  for (size_t j = 0; j < i1; j++) {
    float *row = x->at + j * cn;
    if (j > i0) memset(row + i0, 0, (j - i0) * sizeof(float));
    for (size_t i = j > i0 ? j : i0; gated && i < i1; i++) row[i] *= x->wt[j * cn + i];
  }
}

/* Per-feature gates, a causal chunk of cn rows (query features row-major in qt, the chunk's Kf,
 * Va, B loaded): O = (Qf (.) exp(B)) S, then per query block I = [i0, i1) the intra part over
 * keys j < i1 (engine/chunkwise.h): AT = Ks Qs^T with Ks_j = beta_j psi_j (.) exp(B_i0 - B_j) and
 * Qs_i = phi_i (.) exp(B_i - B_i0). Ks is kept from block to block: moving its reference row from
 * i0' to i0 multiplies it by exp(B_i0 - B_i0') <= 1 per feature, so only new keys take exps.
 * O's rows go to oc, lw apart (o's rows, or x->oc: cw_out_rows). */
static void cw_query_feature(const cw_ctx *x, const float *S, size_t cn, int va_finite, float *oc, size_t lw) {
  const attn_chunkwise_plan *p = x->p;
  const struct attn_ukernels *uk = x->uk;
  const size_t m = p->m, W = p->W, ld = attn_min_sz(uk->gemm_nr, p->C);
  const double *B = x->b;
  float *ks = x->ks, *qs = ks + p->C * m, *tmp = qs + p->C * m;
  uk->gate_exp(cn, m, B, m, NULL, 0, x->qt, m, ks, m); /* Qf (.) exp(B) */
  uk->gemm(cn, W, m, ks, m, 1, S, p->lds, oc, lw, NULL, 0);
  size_t done = 0, ref = 0; /* rows of Ks made, and the row their exponents are measured from */
  for (size_t i0 = 0; i0 < cn; i0 += ld) {
    const size_t i1 = attn_min_sz(cn, i0 + ld), ni = i1 - i0;
    const double *Bn = B + i0 * m;
    double span = 0.0;
    for (size_t f = 0; f < m; f++) { /* fmax's choice (a NaN difference is passed over), inlined */
      const double d = Bn[f] - B[(i1 - 1) * m + f];
      span = d > span ? d : span;
    }
    /* The block's own keys join the factorised product only while their factors stay in range. */
    const size_t jn = span <= ATTN_GATE_SPAN ? i1 : i0;
    if (done && ref != i0) { /* move the kept rows' reference to i0 */
      uk->gate_exp(1, m, Bn, m, B + ref * m, 0, NULL, 0, tmp, m);
      uk->rows_cols(ATTN_COLS_SCALE, done, m, ks, m, ks, m, tmp);
    }
    if (jn > done) { /* new rows: beta_j psi_jf exp(B_i0,f - B_jf) */
      uk->gate_exp(jn - done, m, B + done * m, m, Bn, 1, x->kf + done * m, m, ks + done * m, m);
      if (p->g.beta) /* rows times beta, as the absorb's */
        uk->rows_axpby(jn - done, m, ks + done * m, m, ks + done * m, m, NULL, 0, x->dout + done, 1, 0, 0);
    }
    done = jn, ref = i0; /* jn >= i0 >= the rows made before */
    /* query factors: phi_if exp(B_if - B_i0,f), then transposed (row i of tmp into column i) */
    uk->gate_exp(ni, m, B + i0 * m, m, Bn, 0, x->qt + i0 * m, m, tmp, m);
    uk->transpose(ATTN_TR_COPY, m, ni, 1, qs, ld, tmp, m, 0);
    if (jn) uk->gemm(jn, ni, m, ks, m, 1, qs, ld, x->at, ld, NULL, 0); /* AT[j][i - i0], j < jn */
    for (size_t j = i0; j < i1; j++) {
      float *row = x->at + j * ld;
      memset(row, 0, (j - i0) * sizeof(float));     /* i < j */
      for (size_t i = j; jn == i0 && i < i1; i++) { /* per element: every exponent <= 0 */
        uk->gate_exp(1, m, B + i * m, m, B + j * m, 0, NULL, 0, tmp, m);
        float a = 0.0f;
        for (size_t f = 0; f < m; f++) a += x->qt[i * m + f] * x->kf[j * m + f] * tmp[f];
        row[i - i0] = a * x->dout[j];
      }
    }
    if (va_finite) {
      uk->gemm(ni, W, i1, x->at, 1, ld, x->va, p->ldw, oc + i0 * lw, lw, NULL, 1);
    } else { /* a non-finite V row: row i multiplies only keys j <= i (see attn_cw_query) */
      for (size_t i = i0; i < i1; i++)
        uk->gemm(1, W, i + 1, x->at + (i - i0), 1, ld, x->va, p->ldw, oc + i * lw, lw, NULL, 1);
    }
  }
}

/* Rows 0 .. rows-1 of w columns, ld apart: a query block's intra scores into or out of at0. */
static void cw_at_copy(float *dst, const float *src, size_t ld, size_t rows, size_t w) {
  for (size_t j = 0; j < rows; j++) memcpy(dst + j * ld, src + j * ld, w * sizeof(float));
}

/* Output rows t0 .. t0+cn of output head h. intra: causal contributions of the loaded chunk;
 * va_finite: whether every Va row of the chunk is finite (attn_cw_load_kv). */
void attn_cw_query(const cw_ctx *x, const float *S, size_t h, size_t t0, size_t cn, int intra, int va_finite) {
  const attn_chunkwise_plan *p = x->p;
  const struct attn_ukernels *uk = x->uk;
  const int feat = intra && p->g.kind == ATTN_GATE_FEATURE;
  /* The intra product reads phi(Q)^T as the GEMM's B operand (rows contiguous): features are
   * written transposed. Without it (or with per-feature gates, whose products read them as A),
   * row-major features are written (contiguous stores, not a scatter) and read as A through its
   * strides. */
  const size_t qrs = intra && !feat ? 1 : p->m, qcs = intra && !feat ? cn : 1;
  attn_cw_load_q(x, S, h, t0, cn, qrs, qcs, intra);
  size_t lo;
  if (feat) {
    float *out = cw_out_rows(x, p->direct, h, t0, &lo);
    cw_query_feature(x, S, cn, va_finite, out, lo);
    if (!p->direct) attn_cw_store(x, h, t0, cn);
    return;
  }
  /* The state's part first; the causal part adds onto it, scaling it by din (the decay from the
   * chunk's start to each row) through the GEMM's row scale (factored, cw_factored: the intra
   * weights carry the rows' g_i, so that the rows need no pass of their own at the store). */
  const int factored = intra && cw_gated(p) && cw_factored(x, cn), direct = p->direct;
  float *out = cw_out_rows(x, direct, h, t0, &lo);
  uk->gemm(cn, p->W, p->m, x->qt, qrs, qcs, S, p->lds, out, lo, NULL, 0);
  const float *din = intra && p->g.kind != ATTN_GATE_NONE ? x->din : NULL;
  /* Causal part, in query blocks [i0, i1) of one GEMM tile width: block i0 needs only keys j < i1
   * (AT[j][i] = psi(k_j).phi(q_i) for j <= i), so the zero triangle is mostly never computed. */
  for (size_t i0 = 0; intra && i0 < cn; i0 += uk->gemm_nr) {
    const size_t i1 = attn_min_sz(cn, i0 + uk->gemm_nr);
    if (x->at_keep == CW_AT_REUSE)
      cw_at_copy(x->at + i0, x->at0 + i0, cn, i1, i1 - i0);
    else
      uk->gemm(i1, i1 - i0, p->m, x->kf, p->m, 1, x->qt + i0, cn, x->at + i0, cn, NULL, 0);
    if (x->at_keep == CW_AT_KEEP) cw_at_copy(x->at0 + i0, x->at + i0, cn, i1, i1 - i0);
    cw_intra_weights(x, cn, i0, i1, factored);
    if (va_finite)
      uk->gemm(i1 - i0, p->W, i1, x->at + i0, 1, cn, x->va, p->ldw, out + i0 * lo, lo, din ? din + i0 : NULL, 1);
  }
  /* A non-finite V row: each row i multiplies only keys j <= i, so a later key's NaN never meets
   * its zero weight (0 * NaN). */
  for (size_t i = 0; intra && !va_finite && i < cn; i++)
    uk->gemm(1, p->W, i + 1, x->at + i, 1, cn, x->va, p->ldw, out + i * lo, lo, din ? din + i : NULL, 1);
  if (!direct) attn_cw_store(x, h, t0, cn);
}
