/* Float64 reference of linear attention (attn_ref.h): every output row is an explicit sum over
 * the keys it sees (plus the incoming state), never a chunkwise or recurrent form. The
 * exponential maps are written from their stabilised definition (attn_ref.h): offsets are the
 * maxima over the keys each row sees, never the library's per-chunk ones. */
#include "attn_ref.h"

#include <math.h>
#include <stdlib.h>

double ref_feature(ref_feature_map fm, double x) {
  if (fm == REF_FM_ELU1) return x >= 0.0 ? x + 1.0 : exp(x);
  if (fm == REF_FM_RELU) return x > 0.0 ? x : 0.0;
  return x;
}

size_t ref_lcm(size_t a, size_t b) {
  size_t x = a, y = b; /* gcd by Euclid */
  while (y) {
    const size_t t = x % y;
    x = y;
    y = t;
  }
  return a / x * b;
}

static size_t max3(size_t a, size_t b, size_t c) {
  const size_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}

/* L = lcm(h_k, h_v): one state head per distinct (key head, value head) pair. */
static size_t state_heads(const ref_linear_problem *p) { return ref_lcm(p->h_k, p->h_v); }

/* The incoming state takes part in causal calls only (a windowed call keeps none). */
static int uses_state(const ref_linear_problem *p) { return p->causal && !p->windowed && p->s0; }

/* Key j visible to query i: the window (ref_visible), causal (j <= p_i) or every key. */
static int linear_visible(const ref_linear_problem *p, size_t i, size_t j) {
  if (p->windowed) return ref_visible(i, j, p->n_q, p->n_kv, p->left, p->right, p->chunk);
  return !p->causal || ref_visible(i, j, p->n_q, p->n_kv, REF_UNBOUNDED, 0, 0);
}

static void *xmalloc(size_t count, size_t size) {
  const size_t bytes = count * size;
  void *ptr = malloc(bytes ? bytes : 1);
  if (!ptr) abort();
  return ptr;
}

/* The keys query i sees, in ascending order, into vis (n_kv entries); returns their count. A row's
 * keys are listed once and serve all its heads (visibility does not depend on the head). */
static size_t visible_keys(const ref_linear_problem *p, size_t i, size_t *vis) {
  size_t count = 0;
  for (size_t j = 0; j < p->n_kv; ++j)
    if (linear_visible(p, i, j)) vis[count++] = j;
  return count;
}

/* Whether each of the n_kv rows of every head of x (heads, d floats each) is finite: [heads][n_kv]. */
static unsigned char *rows_finite(const float *x, const ref_layout *l, size_t heads, size_t n, size_t d) {
  unsigned char *fin = xmalloc(heads * n, 1);
  for (size_t h = 0; h < heads; ++h)
    for (size_t j = 0; j < n; ++j)
      fin[h * n + j] = (unsigned char)ref_row_finite(x + j * l->row_stride + h * l->head_stride, d);
  return fin;
}

static int exp_map(ref_feature_map fm) { return fm == REF_FM_EXP || fm == REF_FM_FAVOR || fm == REF_FM_DSOFTMAX; }

static size_t feature_size(const ref_linear_problem *p) { return p->m ? p->m : p->d; }

/* ------------------------------------------------------------------------------------------ */
/* Elementwise maps: identity, elu1, relu                                                      */
/* ------------------------------------------------------------------------------------------ */
static void linear_elementwise(const ref_linear_problem *p, double *o, double *oscale) {
  const size_t H = max3(p->h_q, p->h_k, p->h_v), L = state_heads(p), m = p->d, w = p->dv + 2, n = p->n_kv;
  double *phi = xmalloc(m, sizeof(double));
  double *num = xmalloc(p->dv, sizeof(double));
  double *anum = xmalloc(p->dv, sizeof(double));
  /* psi(k_j) of every key of every key head, [h_k][n_kv][m], and which K and V rows are finite */
  double *psi = xmalloc(p->h_k * n * m, sizeof(double));
  for (size_t hk = 0; hk < p->h_k; ++hk)
    for (size_t j = 0; j < n; ++j)
      for (size_t t = 0; t < m; ++t)
        psi[(hk * n + j) * m + t] =
            ref_feature(p->feature_map, (double)p->k[j * p->lk.row_stride + hk * p->lk.head_stride + t]);
  unsigned char *kfin = rows_finite(p->k, &p->lk, p->h_k, n, p->d), *vfin = rows_finite(p->v, &p->lv, p->h_v, n, p->dv);
  size_t *vis = xmalloc(n, sizeof(size_t));
  for (size_t i = 0; i < p->n_q; ++i) {
    const size_t nvis = visible_keys(p, i, vis);
    for (size_t h = 0; h < H; ++h) {
      const size_t hq = h / (H / p->h_q), hk = h / (H / p->h_k), hv = h / (H / p->h_v), hs = h / (H / L);
      const float *qi = p->q + i * p->lq.row_stride + hq * p->lq.head_stride;
      /* s phi(q): the scale multiplies the query's features, numerator and denominator alike */
      for (size_t t = 0; t < m; ++t) phi[t] = p->scale * ref_feature(p->feature_map, (double)qi[t]);
      double den = 0.0, aden = 0.0;
      int bad = !ref_row_finite(qi, p->d); /* the non-finite policy */
      for (size_t c = 0; c < p->dv; ++c) num[c] = anum[c] = 0.0;
      if (uses_state(p)) {
        const double *s0 = p->s0 + hs * m * w;
        for (size_t e = 0; e < m * w; ++e) bad |= !isfinite(s0[e]);
        for (size_t t = 0; t < m; ++t) {
          for (size_t c = 0; c < p->dv; ++c) {
            num[c] += phi[t] * s0[t * w + c];
            anum[c] += fabs(phi[t] * s0[t * w + c]);
          }
          den += phi[t] * s0[t * w + p->dv];
          aden += fabs(phi[t] * s0[t * w + p->dv]);
        }
      }
      for (size_t x = 0; x < nvis; ++x) {
        const size_t j = vis[x];
        const double *pj = psi + (hk * n + j) * m;
        const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
        bad |= !kfin[hk * n + j] || !vfin[hv * n + j];
        double a = 0.0, aa = 0.0;
        for (size_t t = 0; t < m; ++t) {
          a += phi[t] * pj[t];
          aa += fabs(phi[t] * pj[t]);
        }
        for (size_t c = 0; c < p->dv; ++c) {
          num[c] += a * (double)vj[c];
          anum[c] += aa * fabs((double)vj[c]);
        }
        den += a;
        aden += aa;
      }
      const size_t out = (i * H + h) * p->dv;
      for (size_t c = 0; c < p->dv; ++c) {
        if (bad) {
          o[out + c] = NAN;
          if (oscale) oscale[out + c] = 0.0;
        } else if (p->normalize && den + p->eps == 0.0) { /* a zero denominator gives 0 */
          o[out + c] = 0.0;
          if (oscale) oscale[out + c] = anum[c];
        } else if (p->normalize) {
          const double dd = den + p->eps;
          o[out + c] = num[c] / dd;
          if (oscale) oscale[out + c] = (anum[c] + fabs(o[out + c]) * aden) / fabs(dd);
        } else {
          o[out + c] = num[c];
          if (oscale) oscale[out + c] = anum[c];
        }
      }
    }
  }
  free(phi);
  free(num);
  free(anum);
  free(psi);
  free(kfin);
  free(vfin);
  free(vis);
}

static void state_elementwise(const ref_linear_problem *p, double *s, double *sscale) {
  const size_t L = state_heads(p), m = p->d, w = p->dv + 2, total = L * m * w;
  for (size_t e = 0; e < total; ++e) {
    s[e] = p->s0 ? p->s0[e] : 0.0;
    if (sscale) sscale[e] = p->s0 ? fabs(p->s0[e]) : 0.0;
  }
  for (size_t hs = 0; hs < L; ++hs) {
    const size_t hk = hs / (L / p->h_k), hv = hs / (L / p->h_v);
    for (size_t j = 0; j < p->n_kv; ++j) {
      const float *kj = p->k + j * p->lk.row_stride + hk * p->lk.head_stride;
      const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
      for (size_t t = 0; t < m; ++t) {
        const double ps = ref_feature(p->feature_map, (double)kj[t]);
        double *row = s + (hs * m + t) * w, *srow = sscale ? sscale + (hs * m + t) * w : NULL;
        for (size_t c = 0; c < p->dv; ++c) {
          row[c] += ps * (double)vj[c];
          if (srow) srow[c] += fabs(ps * (double)vj[c]);
        }
        if (p->normalize) {
          row[p->dv] += ps;
          if (srow) srow[p->dv] += fabs(ps);
        }
      }
    }
  }
  /* z is not kept un-normalised, and identity and elu1 keep no offset: both columns are 0 */
  for (size_t r = 0; r < L * m; ++r)
    for (size_t c = p->normalize ? p->dv + 1 : p->dv; c < w; ++c) {
      s[r * w + c] = 0.0;
      if (sscale) sscale[r * w + c] = 0.0;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Exponential maps: exp, favor, dsoftmax                                                      */
/* ------------------------------------------------------------------------------------------ */
/* Pre-exponential features of one row x (d floats) into u[m], and the magnitude of their own
 * rounding errors into e[m] (favor's float dot products of length d; 0 for exp and dsoftmax).
 * key: favor subtracts |x'|^2 / 2 (a query's is a constant of its row and cancels). */
static void pre_features(const ref_linear_problem *p, const float *x, int key, double *u, double *e, double *xp) {
  const size_t d = p->d, m = feature_size(p);
  if (p->feature_map == REF_FM_DSOFTMAX) {
    for (size_t f = 0; f < m; ++f) {
      u[f] = (double)x[f];
      e[f] = 0.0;
    }
    return;
  }
  /* x' = fl32(fl32(sqrt(scale)) x): the product of two floats is exact in double, so the cast
   * rounds it once, as a float multiplication does */
  const float xs = sqrtf((float)p->scale);
  double n2 = 0.0;
  for (size_t t = 0; t < d; ++t) {
    xp[t] = (double)(float)((double)xs * (double)x[t]);
    n2 += xp[t] * xp[t];
  }
  if (p->feature_map == REF_FM_EXP) {
    for (size_t f = 0; f < m; ++f) {
      u[f] = xp[f];
      e[f] = 0.0;
    }
    return;
  }
  const double rd = sqrt((double)d), half = key ? 0.5 * n2 : 0.0;
  for (size_t f = 0; f < m; ++f) {
    const float *wf = p->favor_w + f * d;
    double dot = 0.0, adot = 0.0;
    for (size_t t = 0; t < d; ++t) {
      dot += (double)wf[t] * xp[t];
      adot += fabs((double)wf[t] * xp[t]);
    }
    u[f] = dot - half;
    e[f] = rd * (adot + half);
  }
}

/* Features of every key of every key head: u and e [h_k][n_kv][m], b = |u| + e (a key's share of
 * the argument magnitude g), whether each key row is finite, and the exponentials exp(u_jf - c_f)
 * at the offsets c of the row last asked for (key_exps). */
typedef struct key_features {
  double *u, *e, *b; /* u owns the allocation of u, e, b, x and at (five arrays of h_k n_kv m) */
  unsigned char *finite;
  double *x, *at; /* [h_k][n_kv][m]: x = exp(u - at), at the offset x was taken at (NaN: none yet) */
} key_features;

static void key_features_make(const ref_linear_problem *p, key_features *kf) {
  const size_t m = feature_size(p), n = p->n_kv;
  const size_t size = p->h_k * n * m;
  kf->u = xmalloc(5 * size, sizeof(double));
  kf->e = kf->u + size;
  kf->b = kf->e + size;
  kf->x = kf->b + size;
  kf->at = kf->x + size;
  kf->finite = rows_finite(p->k, &p->lk, p->h_k, n, p->d);
  double *xp = xmalloc(p->d, sizeof(double));
  for (size_t hk = 0; hk < p->h_k; ++hk)
    for (size_t j = 0; j < n; ++j) {
      const float *kj = p->k + j * p->lk.row_stride + hk * p->lk.head_stride;
      const size_t r = (hk * n + j) * m;
      pre_features(p, kj, 1, kf->u + r, kf->e + r, xp);
      for (size_t f = 0; f < m; ++f) kf->b[r + f] = fabs(kf->u[r + f]) + kf->e[r + f];
    }
  for (size_t e = 0; e < p->h_k * n * m; ++e) kf->at[e] = NAN;
  free(xp);
}

/* exp(u_jf - c_f) for the keys j of key head hk that a row sees (vis), [n_kv][m]. A row's terms
 * are exp(a_f + u_jf - M) = exp(a_f + c_f - M) exp(u_jf - c_f), both factors at most 1 (c_f is the
 * largest u_jf the row sees, M the largest a_f + c_f), so the product loses nothing to overflow or
 * underflow that the single exponential would not. An entry is computed again only when its
 * offset has changed since: never for bidirectional rows, when a new largest feature arrives for
 * causal ones. Entries of keys the row does not see may hold anything (they are not read). */
static const double *key_exps(key_features *kf, size_t hk, size_t n, size_t m, const double *c, const size_t *vis,
                              size_t nvis) {
  double *x = kf->x + hk * n * m, *at = kf->at + hk * n * m;
  const double *u = kf->u + hk * n * m;
  for (size_t v = 0; v < nvis; ++v)
    for (size_t f = 0, e = vis[v] * m; f < m; ++f, ++e)
      if (at[e] != c[f]) {
        x[e] = exp(u[e] - c[f]);
        at[e] = c[f];
      }
  return x;
}

static void key_features_free(key_features *kf) {
  free(kf->u);
  free(kf->finite);
}

static void linear_exp_maps(const ref_linear_problem *p, double *o, double *oscale, double *oarg) {
  const size_t H = max3(p->h_q, p->h_k, p->h_v), L = state_heads(p), m = feature_size(p), w = p->dv + 2;
  const size_t n = p->n_kv, dv = p->dv;
  const int dsm = p->feature_map == REF_FM_DSOFTMAX;
  key_features kf;
  key_features_make(p, &kf);
  double *a = xmalloc(m, sizeof(double)), *eq = xmalloc(m, sizeof(double)), *xp = xmalloc(p->d, sizeof(double));
  double *c = xmalloc(m, sizeof(double)), *z = xmalloc(m, sizeof(double)), *zg = xmalloc(m, sizeof(double));
  double *num = xmalloc(dv, sizeof(double)), *anum = xmalloc(dv, sizeof(double));
  double *gnum = xmalloc(dv, sizeof(double)), *vmax = xmalloc(dv, sizeof(double));
  double *qx = xmalloc(m, sizeof(double)), *qg = xmalloc(m, sizeof(double));
  unsigned char *vfin = rows_finite(p->v, &p->lv, p->h_v, n, dv);
  size_t *vis = xmalloc(n, sizeof(size_t));
  for (size_t i = 0; i < p->n_q; ++i) {
    const size_t nvis = visible_keys(p, i, vis);
    for (size_t h = 0; h < H; ++h) {
      const size_t hq = h / (H / p->h_q), hk = h / (H / p->h_k), hv = h / (H / p->h_v), hs = h / (H / L);
      const float *qi = p->q + i * p->lq.row_stride + hq * p->lq.head_stride;
      const double *s0 = uses_state(p) ? p->s0 + hs * m * w : NULL;
      const double *U = kf.u + hk * n * m, *BK = kf.b + hk * n * m;
      const size_t out = (i * H + h) * dv;
      /* the non-finite policy: q_i, the incoming state of the head, every visible k_j and v_j */
      int bad = !ref_row_finite(qi, p->d);
      for (size_t e = 0; s0 && e < m * w; ++e) bad |= !isfinite(s0[e]);
      for (size_t x = 0; x < nvis && !bad; ++x) bad = !kf.finite[hk * n + vis[x]] || !vfin[hv * n + vis[x]];
      if (bad) {
        for (size_t col = 0; col < dv; ++col) {
          o[out + col] = NAN;
          if (oscale) oscale[out + col] = 0.0;
          if (oarg) oarg[out + col] = 0.0;
        }
        continue;
      }
      /* offsets: the largest feature this row sees, the incoming state's included */
      for (size_t f = 0; f < m; ++f) c[f] = s0 && s0[f * w + dv] > 0.0 ? s0[f * w + dv + 1] : -INFINITY;
      for (size_t x = 0; x < nvis; ++x)
        for (size_t f = 0; f < m; ++f) c[f] = U[vis[x] * m + f] > c[f] ? U[vis[x] * m + f] : c[f];
      const double *X = key_exps(&kf, hk, n, m, c, vis, nvis); /* exp(u_jf - c_f) */
      for (size_t col = 0; col < dv; ++col) num[col] = anum[col] = gnum[col] = vmax[col] = 0.0;
      if (!dsm) {
        pre_features(p, qi, 0, a, eq, xp);
        double M = -INFINITY;
        for (size_t f = 0; f < m; ++f)
          if (c[f] > -INFINITY) M = fmax(M, a[f] + c[f]);
        double den = 0.0, aden = 0.0, gden = 0.0;
        if (M > -INFINITY) {
          for (size_t f = 0; s0 && f < m; ++f) {
            const double *r = s0 + f * w;
            if (!(r[dv] > 0.0)) continue;
            const double t = exp(a[f] + r[dv + 1] - M);
            const double g = fabs(a[f]) + fabs(r[dv + 1]) + fabs(c[f]) + fabs(M) + eq[f];
            for (size_t col = 0; col < dv; ++col) {
              num[col] += t * r[col];
              anum[col] += t * fabs(r[col]);
              gnum[col] += t * g * fabs(r[col]);
            }
            den += t * r[dv];
            aden += t * fabs(r[dv]);
            gden += t * g * fabs(r[dv]);
          }
          /* a term is qx_f exp(u_jf - c_f), its argument magnitude qg_f + |u_jf| + e_jf */
          for (size_t f = 0; f < m; ++f) {
            qx[f] = c[f] > -INFINITY ? exp(a[f] + c[f] - M) : 0.0;
            qg[f] = fabs(a[f]) + fabs(c[f]) + fabs(M) + eq[f];
          }
          for (size_t x = 0; x < nvis; ++x) {
            const size_t j = vis[x];
            const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
            double kw = 0.0, kg = 0.0; /* key j's weight sum_f phi_f psi_jf, and its g-weighted sum */
            for (size_t f = 0; f < m; ++f) {
              const double t = qx[f] * X[j * m + f];
              kw += t;
              kg += t * (qg[f] + BK[j * m + f]);
            }
            for (size_t col = 0; col < dv; ++col) {
              num[col] += kw * (double)vj[col];
              anum[col] += kw * fabs((double)vj[col]);
              gnum[col] += kg * fabs((double)vj[col]);
            }
            den += kw;
            aden += kw;
            gden += kg;
          }
        }
        const double dd = den + p->eps;
        for (size_t col = 0; col < dv; ++col) {
          const double v = dd == 0.0 ? 0.0 : num[col] / dd; /* a zero denominator gives 0 */
          o[out + col] = v;
          if (oscale) oscale[out + col] = dd == 0.0 ? anum[col] : (anum[col] + fabs(v) * aden) / fabs(dd);
          if (oarg) oarg[out + col] = dd == 0.0 ? 0.0 : (gnum[col] + fabs(v) * gden) / fabs(dd);
        }
        continue;
      }
      /* dsoftmax: the query's softmax over features (weights P = a), then per feature the
       * column softmax over the visible keys (and the state): Z_f and its g-weighted sum */
      double qmax = -INFINITY, qsum = 0.0;
      for (size_t f = 0; f < m; ++f) qmax = fmax(qmax, (double)qi[f]);
      for (size_t f = 0; f < m; ++f) qsum += a[f] = exp((double)qi[f] - qmax);
      for (size_t f = 0; f < m; ++f) {
        a[f] /= qsum;
        eq[f] = fabs((double)qi[f]) + fabs(qmax);
        z[f] = zg[f] = 0.0;
      }
      for (size_t f = 0; s0 && f < m; ++f) {
        const double *r = s0 + f * w;
        if (!(r[dv] > 0.0)) continue;
        const double t = exp(r[dv + 1] - c[f]);
        z[f] += t * r[dv];
        zg[f] += t * r[dv] * (fabs(r[dv + 1]) + fabs(c[f]));
        for (size_t col = 0; col < dv; ++col) vmax[col] = fmax(vmax[col], fabs(r[col]) / r[dv]);
      }
      for (size_t x = 0; x < nvis; ++x) {
        const size_t j = vis[x];
        const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
        for (size_t col = 0; col < dv; ++col) vmax[col] = fmax(vmax[col], fabs((double)vj[col]));
        for (size_t f = 0; f < m; ++f) {
          const double t = X[j * m + f];
          z[f] += t;
          zg[f] += t * (fabs(U[j * m + f]) + fabs(c[f]));
        }
      }
      /* the state's share: sum_f P_f e^(c0 - c) S0_f / Z_f */
      double gsum = 0.0, qgs = 0.0; /* sum_f P_f (Zg_f / Z_f), sum_f P_f Gq_f over present features */
      for (size_t f = 0; f < m; ++f) {
        if (!(z[f] > 0.0)) continue; /* nothing visible: the feature contributes 0 */
        gsum += a[f] * zg[f] / z[f];
        qgs += a[f] * eq[f];
        if (!s0 || !(s0[f * w + dv] > 0.0)) continue;
        const double *r = s0 + f * w;
        const double om = a[f] * exp(r[dv + 1] - c[f]) / z[f], g = fabs(r[dv + 1]) + fabs(c[f]);
        for (size_t col = 0; col < dv; ++col) {
          num[col] += om * r[col];
          anum[col] += om * fabs(r[col]);
          gnum[col] += om * g * fabs(r[col]);
        }
      }
      for (size_t x = 0; x < nvis; ++x) {
        const size_t j = vis[x];
        const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
        double om = 0.0, omg = 0.0; /* key j's weight sum_f P_f e_jf / Z_f, and g-weighted */
        for (size_t f = 0; f < m; ++f) {
          const double t = a[f] * X[j * m + f] / z[f];
          om += t;
          omg += t * (fabs(U[j * m + f]) + fabs(c[f]));
        }
        for (size_t col = 0; col < dv; ++col) {
          num[col] += om * (double)vj[col];
          anum[col] += om * fabs((double)vj[col]);
          gnum[col] += omg * fabs((double)vj[col]);
        }
      }
      for (size_t col = 0; col < dv; ++col) {
        o[out + col] = num[col];
        /* sum_j omega_j |v_j| bounds sum_f P_f |R_f| (R_f's own sums and quotient) and, with |o|,
         * the weights' sum_f P_f |R_f - o| */
        if (oscale) oscale[out + col] = anum[col] + fabs(num[col]);
        if (oarg) oarg[out + col] = gnum[col] + vmax[col] * gsum + (vmax[col] + fabs(num[col])) * qgs;
      }
    }
  }
  key_features_free(&kf);
  free(qx);
  free(qg);
  free(vfin);
  free(vis);
  free(a);
  free(eq);
  free(xp);
  free(c);
  free(z);
  free(zg);
  free(num);
  free(anum);
  free(gnum);
  free(vmax);
}

static void state_exp_maps(const ref_linear_problem *p, double *s, double *sscale, double *sarg) {
  const size_t L = state_heads(p), m = feature_size(p), w = p->dv + 2, n = p->n_kv, dv = p->dv;
  const int favor = p->feature_map == REF_FM_FAVOR;
  key_features kf;
  key_features_make(p, &kf);
  for (size_t hs = 0; hs < L; ++hs) {
    const size_t hk = hs / (L / p->h_k), hv = hs / (L / p->h_v);
    const double *U = kf.u + hk * n * m, *EK = kf.e + hk * n * m;
    for (size_t f = 0; f < m; ++f) {
      const size_t r = (hs * m + f) * w;
      const double *r0 = p->s0 ? p->s0 + r : NULL;
      const int has0 = r0 && r0[dv] > 0.0;
      double c = has0 ? r0[dv + 1] : -INFINITY, emax = 0.0;
      for (size_t j = 0; j < n; ++j) {
        c = fmax(c, U[j * m + f]);
        emax = fmax(emax, EK[j * m + f]);
      }
      for (size_t col = 0; col <= dv; ++col) {
        s[r + col] = 0.0;
        if (sscale) sscale[r + col] = 0.0;
        if (sarg) sarg[r + col] = 0.0;
      }
      if (c == -INFINITY) { /* nothing absorbed: the zero state */
        s[r + dv + 1] = 0.0;
        if (sscale) sscale[r + dv + 1] = 0.0;
        if (sarg) sarg[r + dv + 1] = 0.0;
        continue;
      }
      if (has0) {
        const double t = exp(r0[dv + 1] - c), g = fabs(r0[dv + 1]) + fabs(c);
        for (size_t col = 0; col <= dv; ++col) {
          s[r + col] += t * r0[col];
          if (sscale) sscale[r + col] += t * fabs(r0[col]);
          if (sarg) sarg[r + col] += t * g * fabs(r0[col]);
        }
      }
      for (size_t j = 0; j < n; ++j) {
        const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
        const double t = exp(U[j * m + f] - c), g = fabs(U[j * m + f]) + fabs(c) + EK[j * m + f];
        for (size_t col = 0; col < dv; ++col) {
          s[r + col] += t * (double)vj[col];
          if (sscale) sscale[r + col] += t * fabs((double)vj[col]);
          if (sarg) sarg[r + col] += t * g * fabs((double)vj[col]);
        }
        s[r + dv] += t;
        if (sscale) sscale[r + dv] += t;
        if (sarg) sarg[r + dv] += t * g;
      }
      /* the offset: exact for exp and dsoftmax, one float dot product away for favor */
      s[r + dv + 1] = c;
      if (sscale) sscale[r + dv + 1] = favor ? fabs(c) + emax : 0.0;
      if (sarg) sarg[r + dv + 1] = favor ? fabs(c) + emax : 0.0;
    }
  }
  key_features_free(&kf);
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                */
/* ------------------------------------------------------------------------------------------ */
/* The argument scales of the elementwise maps: 0 (no exponent). x may be NULL. */
static void zero(double *x, size_t count) {
  for (size_t e = 0; x && e < count; ++e) x[e] = 0.0;
}

void ref_linear_ex(const ref_linear_problem *p, double *o, double *oscale, double *oarg) {
  if (exp_map(p->feature_map)) {
    linear_exp_maps(p, o, oscale, oarg);
    return;
  }
  linear_elementwise(p, o, oscale);
  zero(oarg, p->n_q * max3(p->h_q, p->h_k, p->h_v) * p->dv);
}

void ref_linear(const ref_linear_problem *p, double *o, double *oscale) { ref_linear_ex(p, o, oscale, NULL); }

void ref_linear_state_ex(const ref_linear_problem *p, double *s, double *sscale, double *sarg) {
  if (exp_map(p->feature_map)) {
    state_exp_maps(p, s, sscale, sarg);
    return;
  }
  state_elementwise(p, s, sscale);
  zero(sarg, state_heads(p) * p->d * (p->dv + 2));
}

void ref_linear_state(const ref_linear_problem *p, double *s, double *sscale) {
  ref_linear_state_ex(p, s, sscale, NULL);
}
