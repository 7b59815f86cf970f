/* Float64 reference: see attn_ref.h. Deliberately naive and direct from VARIANTS.md. */
#include "attn_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const float *row_of(const float *base, ref_layout l, size_t token, size_t head) {
  return base + token * l.row_stride + head * l.head_stride;
}

int ref_row_finite(const float *x, size_t n) {
  for (size_t t = 0; t < n; ++t)
    if (!isfinite(x[t])) return 0;
  return 1;
}

int ref_visible(size_t i, size_t j, size_t n_q, size_t n_kv, size_t left, size_t right) {
  /* p_i = (n_kv - n_q) + i may be negative: signed arithmetic (test sizes are small). */
  const long long p = (long long)n_kv - (long long)n_q + (long long)i;
  const long long jj = (long long)j;
  /* a side wider than both lengths bounds nothing (and must not wrap to a negative number) */
  if (left <= n_q + n_kv && jj < p - (long long)left) return 0;
  if (right <= n_q + n_kv && jj > p + (long long)right) return 0;
  return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Softmax                                                                                     */
/* ------------------------------------------------------------------------------------------ */
void ref_softmax(const ref_softmax_problem *p, double *o, double *lse, double *oscale,
                 double *sabs) {
  const size_t group = p->h_q / p->h_kv;
  double *s = malloc(sizeof(double) * (p->n_kv ? p->n_kv : 1));
  double *pw = malloc(sizeof(double) * (p->n_kv ? p->n_kv : 1));
  unsigned char *vis = malloc(p->n_kv ? p->n_kv : 1);
  for (size_t i = 0; i < p->n_q; ++i) {
    for (size_t h = 0; h < p->h_q; ++h) {
      const size_t hk = h / group;
      const float *qi = row_of(p->q, p->lq, i, h);
      const size_t out = (i * p->h_q + h) * p->dv;
      double m = -INFINITY, amax = 0.0;
      size_t count = 0;
      int qk_bad = !ref_row_finite(qi, p->d), v_bad = 0; /* the non-finite policy */
      for (size_t j = 0; j < p->n_kv; ++j) {
        vis[j] = (unsigned char)ref_visible(i, j, p->n_q, p->n_kv, p->window_left, p->window_right);
        if (!vis[j]) continue;
        const float *kj = row_of(p->k, p->lk, j, hk);
        qk_bad |= !ref_row_finite(kj, p->d);
        v_bad |= !ref_row_finite(row_of(p->v, p->lv, j, hk), p->dv);
        double dot = 0.0, adot = 0.0;
        for (size_t t = 0; t < p->d; ++t) {
          dot += (double)qi[t] * (double)kj[t];
          adot += fabs((double)qi[t] * (double)kj[t]);
        }
        s[j] = p->scale * dot;
        if (s[j] > m) m = s[j];
        if (fabs(p->scale) * adot > amax) amax = fabs(p->scale) * adot;
        ++count;
      }
      if (sabs) sabs[i * p->h_q + h] = amax;
      if (count == 0) {
        for (size_t c = 0; c < p->dv; ++c) {
          o[out + c] = 0.0;
          if (oscale) oscale[out + c] = 0.0;
        }
        if (lse) lse[i * p->h_q + h] = -INFINITY;
        continue;
      }
      if (qk_bad || v_bad) { /* NaN row; the LSE does not depend on v */
        for (size_t c = 0; c < p->dv; ++c) {
          o[out + c] = NAN;
          if (oscale) oscale[out + c] = 0.0;
        }
        if (sabs && qk_bad) sabs[i * p->h_q + h] = 0.0;
        if (qk_bad) {
          if (lse) lse[i * p->h_q + h] = NAN;
          continue;
        }
      }
      /* Two passes: max (above), then exponentials relative to it. */
      double l = 0.0;
      for (size_t j = 0; j < p->n_kv; ++j) {
        pw[j] = vis[j] ? exp(s[j] - m) : 0.0;
        l += pw[j];
      }
      for (size_t c = 0; c < p->dv && !v_bad; ++c) {
        double acc = 0.0, aacc = 0.0;
        for (size_t j = 0; j < p->n_kv; ++j) {
          if (!vis[j]) continue;
          const double vj = (double)row_of(p->v, p->lv, j, hk)[c];
          acc += pw[j] * vj;
          aacc += pw[j] * fabs(vj);
        }
        o[out + c] = acc / l;
        if (oscale) oscale[out + c] = aacc / l;
      }
      if (lse) lse[i * p->h_q + h] = m + log(l);
    }
  }
  free(s);
  free(pw);
  free(vis);
}

void ref_merge(size_t rows, size_t dv, size_t parts, const float *const *o_parts, size_t o_stride,
               const float *const *lse_parts, size_t lse_stride, double *o, double *lse,
               double *oscale, double *lscale) {
  for (size_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    int lse_bad = 0, o_bad = 0; /* the non-finite policy: NaN or +inf LSE; non-finite used o */
    for (size_t c = 0; c < parts; ++c) {
      const double l = (double)lse_parts[c][r * lse_stride];
      if (isnan(l) || l == INFINITY) lse_bad = 1;
      else if (l > -INFINITY && !ref_row_finite(o_parts[c] + r * o_stride, dv)) o_bad = 1;
      if (l > m) m = l;
    }
    if (lse_bad || o_bad) {
      for (size_t e = 0; e < dv; ++e) {
        o[r * dv + e] = NAN;
        if (oscale) oscale[r * dv + e] = 0.0;
      }
      if (lse_bad) {
        if (lse) lse[r] = NAN;
        if (lscale) lscale[r] = 0.0;
        continue;
      }
    }
    if (m == -INFINITY) {
      for (size_t e = 0; e < dv; ++e) {
        o[r * dv + e] = 0.0;
        if (oscale) oscale[r * dv + e] = 0.0;
      }
      if (lse) lse[r] = -INFINITY;
      if (lscale) lscale[r] = 0.0;
      continue;
    }
    double wsum = 0.0, wx = 0.0;
    for (size_t c = 0; c < parts; ++c) {
      const double x = (double)lse_parts[c][r * lse_stride] - m;
      const double w = exp(x); /* exp(-inf) = 0 */
      wsum += w;
      if (w > 0.0) wx += w * fabs(x);
    }
    for (size_t e = 0; e < dv && !o_bad; ++e) {
      double acc = 0.0;
      for (size_t c = 0; c < parts; ++c) {
        const double w = exp((double)lse_parts[c][r * lse_stride] - m);
        if (w > 0.0) acc += w * (double)o_parts[c][r * o_stride + e]; /* empty parts are not read */
      }
      o[r * dv + e] = acc / wsum;
    }
    if (oscale && !o_bad) {
      for (size_t e = 0; e < dv; ++e) {
        double acc = 0.0;
        for (size_t c = 0; c < parts; ++c) {
          const double x = (double)lse_parts[c][r * lse_stride] - m;
          const double w = exp(x);
          if (w > 0.0)
            acc += w * (1.0 + fabs(x)) * (fabs((double)o_parts[c][r * o_stride + e]) + fabs(o[r * dv + e]));
        }
        oscale[r * dv + e] = acc / wsum;
      }
    }
    const double l = m + log(wsum);
    if (lse) lse[r] = l;
    if (lscale) lscale[r] = 1.0 + fabs(l) + wx / wsum;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Linear attention                                                                            */
/* ------------------------------------------------------------------------------------------ */
double ref_feature(ref_feature_map fm, double x) {
  if (fm == REF_FM_ELU1) return x >= 0.0 ? x + 1.0 : exp(x);
  return x;
}

static int linear_visible(const ref_linear_problem *p, size_t i, size_t j) {
  return !p->causal || ref_visible(i, j, p->n_q, p->n_kv, REF_UNBOUNDED, 0);
}

void ref_linear(const ref_linear_problem *p, double *o, double *oscale) {
  const size_t group = p->h_q / p->h_kv, m = p->d, w = p->dv + 1;
  double *phi = malloc(sizeof(double) * m);
  double *psi = malloc(sizeof(double) * m);
  double *num = malloc(sizeof(double) * p->dv);
  double *anum = malloc(sizeof(double) * p->dv);
  for (size_t i = 0; i < p->n_q; ++i) {
    for (size_t h = 0; h < p->h_q; ++h) {
      const size_t hk = h / group;
      const float *qi = row_of(p->q, p->lq, i, h);
      for (size_t t = 0; t < m; ++t) phi[t] = ref_feature(p->feature_map, (double)qi[t]);
      double den = 0.0, aden = 0.0;
      int bad = !ref_row_finite(qi, p->d); /* the non-finite policy */
      for (size_t c = 0; c < p->dv; ++c) num[c] = anum[c] = 0.0;
      if (p->causal && p->s0) {
        const double *s0 = p->s0 + hk * m * w;
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
      for (size_t j = 0; j < p->n_kv; ++j) {
        if (!linear_visible(p, i, j)) continue;
        const float *kj = row_of(p->k, p->lk, j, hk);
        const float *vj = row_of(p->v, p->lv, j, hk);
        bad |= !ref_row_finite(kj, p->d) || !ref_row_finite(vj, p->dv);
        double a = 0.0, aa = 0.0;
        for (size_t t = 0; t < m; ++t) {
          psi[t] = ref_feature(p->feature_map, (double)kj[t]);
          a += phi[t] * psi[t];
          aa += fabs(phi[t] * psi[t]);
        }
        for (size_t c = 0; c < p->dv; ++c) {
          num[c] += a * (double)vj[c];
          anum[c] += aa * fabs((double)vj[c]);
        }
        den += a;
        aden += aa;
      }
      const size_t out = (i * p->h_q + h) * p->dv;
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
  free(psi);
  free(num);
  free(anum);
}

void ref_linear_state(const ref_linear_problem *p, double *s, double *sscale) {
  const size_t m = p->d, w = p->dv + 1, total = p->h_kv * m * w;
  for (size_t e = 0; e < total; ++e) {
    s[e] = p->s0 ? p->s0[e] : 0.0;
    if (sscale) sscale[e] = p->s0 ? fabs(p->s0[e]) : 0.0;
  }
  for (size_t hk = 0; hk < p->h_kv; ++hk) {
    for (size_t j = 0; j < p->n_kv; ++j) {
      const float *kj = row_of(p->k, p->lk, j, hk);
      const float *vj = row_of(p->v, p->lv, j, hk);
      for (size_t t = 0; t < m; ++t) {
        const double ps = ref_feature(p->feature_map, (double)kj[t]);
        double *row = s + (hk * m + t) * w;
        for (size_t c = 0; c < p->dv; ++c) {
          row[c] += ps * (double)vj[c];
          if (sscale) sscale[(hk * m + t) * w + c] += fabs(ps * (double)vj[c]);
        }
        if (p->normalize) {
          row[p->dv] += ps;
          if (sscale) sscale[(hk * m + t) * w + p->dv] += fabs(ps);
        }
      }
    }
  }
  if (!p->normalize) {
    for (size_t e = p->dv; e < total; e += w) {
      s[e] = 0.0;
      if (sscale) sscale[e] = 0.0;
    }
  }
}
