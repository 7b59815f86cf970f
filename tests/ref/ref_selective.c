/* Float64 reference of selective attention (ref_selective.h): the mask F from the paper's
 * pseudo-code (S of head h_sel, masked, shifted down one row, cumulative sum down the columns),
 * then for every (query, head) an explicit softmax of s - F over the visible keys. */
#include "ref_selective.h"

#include <math.h>
#include <stdlib.h>

/* relu that keeps a NaN and turns -inf into NaN (attn.h: a non-finite score of head h_sel, from a
 * non-finite input, reaches F; -inf is such a score, not relu's limit 0). */
static double relu(double x) { return x > 0.0 ? x : x == -INFINITY ? NAN : x <= 0.0 ? 0.0 : x; }

/* scale a . b in double and its magnitude |scale| sum_t |a_t b_t|. */
static void ref_dot(const float *a, const float *b, size_t d, double scale, double *s, double *g) {
  double dot = 0.0, adot = 0.0;
  for (size_t t = 0; t < d; ++t) {
    const double x = (double)a[t] * (double)b[t];
    dot += x;
    adot += fabs(x);
  }
  *s = scale * dot;
  *g = fabs(scale) * adot;
}

static void *xmalloc(size_t count, size_t size) {
  void *p = malloc((count ? count : 1) * size);
  if (!p) abort();
  return p;
}

/* The keys one query row sees: n of them, with rows, mask values and magnitudes behind them. */
typedef struct sel_keys {
  size_t n;
  const float *const *k, *const *v;
  size_t khs, vhs;
  const double *F, *G; /* G may be NULL */
} sel_keys;

typedef struct sel_dims {
  size_t h_q, h_kv, d, dv;
  double scale;
} sel_dims;

/* Every head of one query row (q: head 0, head stride qhs) into row `row` of the outputs. */
static void sel_row(const sel_dims *dm, const float *q, size_t qhs, const sel_keys *ks, const ref_selective_out *out,
                    size_t row) {
  const size_t group = dm->h_q / dm->h_kv, n = ks->n, dv = dm->dv;
  double *x = xmalloc(n, sizeof(double)), *a = xmalloc(n, sizeof(double)), *w = xmalloc(n, sizeof(double));
  for (size_t h = 0; h < dm->h_q; ++h) {
    const size_t hk = h / group, r = row * dm->h_q + h, ob = r * dv;
    const float *qh = q + h * qhs;
    double m = -INFINITY, smax = 0.0;
    int qk_bad = !ref_row_finite(qh, dm->d), v_bad = 0; /* softmax's non-finite policy */
    for (size_t j = 0; j < n; ++j) {
      const float *kj = ks->k[j] + hk * ks->khs;
      qk_bad |= !ref_row_finite(kj, dm->d);
      v_bad |= !ref_row_finite(ks->v[j] + hk * ks->vhs, dv);
      double s, g;
      ref_dot(qh, kj, dm->d, dm->scale, &s, &g);
      x[j] = s - ks->F[j];
      if (x[j] > m) m = x[j];
      if (g > smax) smax = g;
      a[j] = g + (ks->G ? ks->G[j] : 0.0);
    }
    if (out->sabs) out->sabs[r] = n ? smax : 0.0;
    if (n == 0 || qk_bad || v_bad) {
      for (size_t c = 0; c < dv; ++c) {
        out->o[ob + c] = n == 0 ? 0.0 : NAN;
        if (out->oscale) out->oscale[ob + c] = 0.0;
        if (out->oarg) out->oarg[ob + c] = 0.0;
        if (out->of) out->of[ob + c] = 0.0;
      }
      if (out->larg) out->larg[r] = 0.0;
      if (out->lf) out->lf[r] = 0.0;
      if (n == 0 || qk_bad) {
        if (out->lse) out->lse[r] = n == 0 ? -INFINITY : NAN;
        if (out->sabs) out->sabs[r] = 0.0;
        continue;
      }
    }
    double l = 0.0;
    for (size_t j = 0; j < n; ++j) {
      w[j] = exp(x[j] - m);
      l += w[j];
    }
    double larg = 0.0, lf = 0.0;
    for (size_t j = 0; j < n; ++j) {
      w[j] /= l;                 /* the probability p_j */
      if (w[j] == 0.0) continue; /* a key F masks whole (F = +inf): no error reaches the row */
      larg += w[j] * a[j];
      lf += w[j] * ks->F[j];
    }
    if (out->lse) out->lse[r] = m + log(l);
    if (out->larg) out->larg[r] = larg;
    if (out->lf) out->lf[r] = lf;
    for (size_t c = 0; c < dv && !v_bad; ++c) {
      double acc = 0.0, aacc = 0.0;
      for (size_t j = 0; j < n; ++j) {
        const double vj = (double)ks->v[j][hk * ks->vhs + c];
        acc += w[j] * vj;
        aacc += w[j] * fabs(vj);
      }
      out->o[ob + c] = acc;
      if (out->oscale) out->oscale[ob + c] = aacc;
      double sarg = 0.0, sf = 0.0;
      for (size_t j = 0; j < n; ++j) {
        if (w[j] == 0.0) continue;
        const double mag = fabs((double)ks->v[j][hk * ks->vhs + c]) + fabs(acc);
        sarg += w[j] * a[j] * mag;
        sf += w[j] * ks->F[j] * mag;
      }
      if (out->oarg) out->oarg[ob + c] = sarg;
      if (out->of) out->of[ob + c] = sf;
    }
  }
  free(x);
  free(a);
  free(w);
}

void ref_selective(const ref_selective_problem *p, const ref_selective_out *out) {
  const size_t nq = p->n_q, nkv = p->n_kv, group = p->h_q / p->h_kv;
  const long long p0 = (long long)nkv - (long long)nq; /* position of query row 0 */
  const size_t hs = p->h_sel, hks = hs / group;
  /* S (and the magnitudes g behind it) of the call's queries: head h_sel, zero unless 0 < j < p */
  double *S = xmalloc(nq * nkv, sizeof(double)), *Sg = xmalloc(nq * nkv, sizeof(double));
  for (size_t i = 0; i < nq; ++i)
    for (size_t j = 0; j < nkv; ++j) {
      double s = 0.0, g = 0.0;
      if (j > 0 && (long long)j < p0 + (long long)i)
        ref_dot(p->q + i * p->lq.row_stride + hs * p->lq.head_stride,
                p->k + j * p->lk.row_stride + hks * p->lk.head_stride, p->d, p->scale, &s, &g);
      S[i * nkv + j] = relu(s);
      Sg[i * nkv + j] = g;
    }
  /* shifted down one row: row 0 is the state of the earlier queries (f0 for their keys) */
  double *Sh = xmalloc(nq * nkv, sizeof(double)), *Gh = xmalloc(nq * nkv, sizeof(double));
  for (size_t j = 0; j < nkv; ++j) {
    Sh[j] = p->f0 && (long long)j < p0 ? (double)p->f0[j] : 0.0;
    Gh[j] = 0.0;
  }
  for (size_t i = 1; i < nq; ++i)
    for (size_t j = 0; j < nkv; ++j) {
      Sh[i * nkv + j] = S[(i - 1) * nkv + j];
      Gh[i * nkv + j] = Sg[(i - 1) * nkv + j];
    }
  /* cumulative sum down the columns: F of row i (and G, the magnitudes behind it) */
  double *F = xmalloc(nq * nkv, sizeof(double)), *G = xmalloc(nq * nkv, sizeof(double));
  for (size_t j = 0; j < nkv; ++j) {
    double run = 0.0, grun = 0.0;
    for (size_t i = 0; i < nq; ++i) {
      run += Sh[i * nkv + j];
      grun += Gh[i * nkv + j];
      F[i * nkv + j] = run;
      G[i * nkv + j] = grun;
    }
    /* the column sums after the call: one row further */
    if (out->f) out->f[j] = run + S[(nq - 1) * nkv + j];
    if (out->fg) out->fg[j] = grun + Sg[(nq - 1) * nkv + j];
  }
  const float **kp = (const float **)xmalloc(nkv, sizeof(float *)),
              **vp = (const float **)xmalloc(nkv, sizeof(float *));
  for (size_t j = 0; j < nkv; ++j) {
    kp[j] = p->k + j * p->lk.row_stride;
    vp[j] = p->v + j * p->lv.row_stride;
  }
  const sel_dims dm = {p->h_q, p->h_kv, p->d, p->dv, p->scale};
  for (size_t i = 0; i < nq; ++i) {
    const long long pos = p0 + (long long)i;
    const size_t n = pos < 0 ? 0 : (size_t)pos + 1 < nkv ? (size_t)pos + 1 : nkv; /* keys 0 .. pos */
    if (out->F)
      for (size_t j = 0; j < nkv; ++j) out->F[i * nkv + j] = j < n ? F[i * nkv + j] : 0.0;
    const sel_keys ks = {n, kp, vp, p->lk.head_stride, p->lv.head_stride, F + i * nkv, G + i * nkv};
    sel_row(&dm, p->q + i * p->lq.row_stride, p->lq.head_stride, &ks, out, i);
  }
  free(kp);
  free(vp);
  free(S);
  free(Sg);
  free(Sh);
  free(Gh);
  free(F);
  free(G);
}

void ref_selective_live_attend(const ref_selective_live *p, const ref_selective_out *out) {
  const size_t group = p->h_q / p->h_kv, hks = p->h_sel / group;
  const sel_dims dm = {p->h_q, p->h_kv, p->d, p->dv, p->scale};
  const sel_keys ks = {p->n, p->k, p->v, p->k_head_stride, p->v_head_stride, p->F, p->G};
  sel_row(&dm, p->q, p->q_head_stride, &ks, out, 0);
  for (size_t i = 0; i < p->n && (out->f || out->fg); ++i) {
    double s, g;
    ref_dot(p->q + p->h_sel * p->q_head_stride, p->k[i] + hks * p->k_head_stride, p->d, p->scale, &s, &g);
    if (out->f) out->f[i] = relu(s);
    if (out->fg) out->fg[i] = g;
  }
}
