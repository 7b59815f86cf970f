/* Float64 reference of delta-rule attention: see ref_delta.h. */
#include "ref_delta.h"

#include <math.h>
#include <stdlib.h>

static double *rd_alloc(size_t count) {
  double *p = calloc(count ? count : 1, sizeof(double));
  if (!p) abort(); /* no Check assertion: the fuzzers may use the reference too */
  return p;
}

/* Log gate g(t, h, f) (0 for PLAIN; SCALAR reads f = 0). */
static double rd_gate(const ref_delta_problem *p, size_t t, size_t h, size_t f) {
  if (p->gate == REF_DELTA_PLAIN) return 0.0;
  const size_t at = t * p->lg.row_stride + h * p->lg.head_stride + (p->gate == REF_DELTA_FEATURE ? f : 0);
  return (double)p->log_gate[at];
}

/* A row of n floats as doubles, L2-normalised (x / sqrt(sum x^2 + 1e-6)) when norm; returns 1 when
 * every float is finite. */
static int rd_row(const float *x, size_t n, int norm, double *out) {
  int finite = 1;
  double ss = 0.0;
  for (size_t f = 0; f < n; ++f) {
    out[f] = (double)x[f];
    finite &= isfinite(x[f]) != 0;
    ss += out[f] * out[f];
  }
  if (norm) {
    const double r = 1.0 / sqrt(ss + 1e-6);
    for (size_t f = 0; f < n; ++f) out[f] *= r;
  }
  return finite;
}

static double rd_norm(const double *x, size_t n) {
  double ss = 0.0;
  for (size_t f = 0; f < n; ++f) ss += x[f] * x[f];
  return sqrt(ss);
}

/* The state S of one head (d x dv), or NaN when poisoned, and its error scales, into s / sc (either
 * may be NULL) at head h of an [h_v][d][dv] array. */
static void rd_put_state(const ref_delta_problem *p, size_t h, const double *S, const double *e2, int poisoned,
                         double *s, double *sc) {
  const size_t d = p->d, dv = p->dv, base = h * d * dv;
  for (size_t f = 0; f < d; ++f)
    for (size_t c = 0; c < dv; ++c) {
      if (s) s[base + f * dv + c] = poisoned ? NAN : S[f * dv + c];
      if (sc) sc[base + f * dv + c] = poisoned ? 0.0 : sqrt(e2[c]);
    }
}

void ref_delta(const ref_delta_problem *p, const ref_delta_out *out) {
  const size_t n = p->n, d = p->d, dv = p->dv, hv = p->h_v, group = hv / p->h_k;
  const size_t C = p->chunk ? p->chunk : 1, per = hv * d * dv;
  double *S = rd_alloc(d * dv), *q = rd_alloc(d), *k = rd_alloc(d), *dl = rd_alloc(dv), *e2 = rd_alloc(dv);
  double *cn = rd_alloc(dv), *gsum = rd_alloc(n + 1);
  for (size_t h = 0; h < hv; ++h) {
    const size_t kh = h / group;
    int poisoned = 0;
    for (size_t e = 0; e < d * dv; ++e) {
      S[e] = p->s0 ? (double)p->s0[h * d * dv + e] : 0.0;
      if (!isfinite(S[e])) poisoned = 1;
    }
    for (size_t c = 0; c < dv; ++c) {
      e2[c] = 0.0;
      for (size_t f = 0; f < d; ++f) e2[c] += poisoned ? 0.0 : S[f * dv + c] * S[f * dv + c];
    }
    /* gsum[t]: sum of max_f |g| over the tokens before t (the error model's G windows) */
    gsum[0] = 0.0;
    for (size_t t = 0; t < n; ++t) {
      double m = 0.0;
      for (size_t f = 0; f < (p->gate == REF_DELTA_FEATURE ? d : 1); ++f) m = fmax(m, fabs(rd_gate(p, t, h, f)));
      gsum[t + 1] = gsum[t] + m;
    }
    size_t ci = 0;
    for (size_t t = 0; t < n; ++t) {
      const size_t lo = t + 1 >= C ? t + 1 - C : 0, hi = t + C < n ? t + C : n;
      const double G = gsum[hi] - gsum[lo];
      const int qfin = rd_row(p->q + t * p->lq.row_stride + kh * p->lq.head_stride, d, p->qk_l2norm, q);
      const int kfin = rd_row(p->k + t * p->lk.row_stride + kh * p->lk.head_stride, d, p->qk_l2norm, k);
      const float *v = p->v + t * p->lv.row_stride + h * p->lv.head_stride;
      const double beta = (double)p->beta[t * p->lb.row_stride + h * p->lb.head_stride];
      if (!kfin || !ref_row_finite(v, dv)) poisoned = 1;
      if (!poisoned) {
        double amax = 1.0; /* ||D_t||_2 */
        if (p->gate != REF_DELTA_PLAIN) {
          amax = 0.0;
          for (size_t f = 0; f < d; ++f) {
            const double a = exp(rd_gate(p, t, h, f));
            amax = fmax(amax, a);
            for (size_t c = 0; c < dv; ++c) S[f * dv + c] *= a;
          }
        }
        for (size_t c = 0; c < dv; ++c) {
          double sk = 0.0, ss = 0.0;
          for (size_t f = 0; f < d; ++f) {
            sk += S[f * dv + c] * k[f];
            ss += S[f * dv + c] * S[f * dv + c];
          }
          cn[c] = sqrt(ss);
          dl[c] = beta * ((double)v[c] - sk);
        }
        for (size_t f = 0; f < d; ++f)
          for (size_t c = 0; c < dv; ++c) S[f * dv + c] += k[f] * dl[c];
        const double kn = rd_norm(k, d);
        for (size_t c = 0; c < dv; ++c) {
          const double m = cn[c] * (1.0 + G) + kn * fabs(dl[c]);
          e2[c] = amax * amax * e2[c] + m * m;
        }
      }
      const double qn = rd_norm(q, d);
      for (size_t c = 0; c < dv; ++c) {
        const size_t at = (t * hv + h) * dv + c;
        double o = 0.0;
        for (size_t f = 0; f < d; ++f) o += q[f] * S[f * dv + c];
        const int nan = poisoned || !qfin;
        if (out->o) out->o[at] = nan ? NAN : p->scale * o;
        if (out->oscale) out->oscale[at] = nan ? 0.0 : fabs(p->scale) * qn * sqrt(e2[c]);
      }
      if (ci < out->count && out->after[ci] == t) {
        rd_put_state(p, h, S, e2, poisoned, out->ck ? out->ck + ci * per : NULL,
                     out->ckscale ? out->ckscale + ci * per : NULL);
        ++ci;
      }
    }
    rd_put_state(p, h, S, e2, poisoned, out->s, out->sscale);
  }
  free(S);
  free(q);
  free(k);
  free(dl);
  free(e2);
  free(cn);
  free(gsum);
}
