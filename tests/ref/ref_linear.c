/* Float64 reference of linear attention (attn_ref.h): every output row is an explicit sum over
 * the keys it sees (plus the incoming state), never a chunkwise or recurrent form. */
#include "attn_ref.h"

#include <math.h>
#include <stdlib.h>

double ref_feature(ref_feature_map fm, double x) {
  if (fm == REF_FM_ELU1) return x >= 0.0 ? x + 1.0 : exp(x);
  if (fm == REF_FM_RELU) return x > 0.0 ? x : 0.0;
  return x;
}

static size_t max3(size_t a, size_t b, size_t c) {
  const size_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}

/* L = lcm(h_k, h_v): one state head per distinct (key head, value head) pair. */
static size_t state_heads(const ref_linear_problem *p) {
  size_t a = p->h_k, b = p->h_v;
  while (b) {
    const size_t t = a % b;
    a = b;
    b = t;
  }
  return p->h_k / a * p->h_v;
}

static int linear_visible(const ref_linear_problem *p, size_t i, size_t j) {
  return !p->causal || ref_visible(i, j, p->n_q, p->n_kv, REF_UNBOUNDED, 0, 0);
}

void ref_linear(const ref_linear_problem *p, double *o, double *oscale) {
  const size_t H = max3(p->h_q, p->h_k, p->h_v), L = state_heads(p), m = p->d, w = p->dv + 2;
  double *phi = malloc(sizeof(double) * m);
  double *num = malloc(sizeof(double) * p->dv);
  double *anum = malloc(sizeof(double) * p->dv);
  for (size_t i = 0; i < p->n_q; ++i) {
    for (size_t h = 0; h < H; ++h) {
      const size_t hq = h / (H / p->h_q), hk = h / (H / p->h_k), hv = h / (H / p->h_v), hs = h / (H / L);
      const float *qi = p->q + i * p->lq.row_stride + hq * p->lq.head_stride;
      /* s phi(q): the scale multiplies the query's features, numerator and denominator alike */
      for (size_t t = 0; t < m; ++t) phi[t] = p->scale * ref_feature(p->feature_map, (double)qi[t]);
      double den = 0.0, aden = 0.0;
      int bad = !ref_row_finite(qi, p->d); /* the non-finite policy */
      for (size_t c = 0; c < p->dv; ++c) num[c] = anum[c] = 0.0;
      if (p->causal && p->s0) {
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
      for (size_t j = 0; j < p->n_kv; ++j) {
        if (!linear_visible(p, i, j)) continue;
        const float *kj = p->k + j * p->lk.row_stride + hk * p->lk.head_stride;
        const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
        bad |= !ref_row_finite(kj, p->d) || !ref_row_finite(vj, p->dv);
        double a = 0.0, aa = 0.0;
        for (size_t t = 0; t < m; ++t) {
          const double psi = ref_feature(p->feature_map, (double)kj[t]);
          a += phi[t] * psi;
          aa += fabs(phi[t] * psi);
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
}

void ref_linear_state(const ref_linear_problem *p, double *s, double *sscale) {
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
