/* Float64 reference of decayed and gated causal linear attention (ref_gated.h): every output
 * row is an explicit sum over the keys it sees plus the incoming state, each key's decay the
 * exponential of the sum of the log gates between the key and the query, summed in double for
 * that very pair (the sum for key j - 1 is the one for key j plus lg(j): the terms of
 * sum_{t=j..p} lg, in the order p, p - 1, ..., j). Never a chunkwise or recurrent form. */
#include "ref_gated.h"

#include <math.h>
#include <stdlib.h>

static void *xmalloc(size_t count, size_t size) {
  void *ptr = malloc(count * size != 0 ? count * size : 1);
  if (!ptr) abort();
  return ptr;
}

/* h_g counts only with a gate or beta */
static int gated(const ref_gated_problem *p) { return p->gate != REF_GATE_NONE || p->beta; }

size_t ref_gated_heads(const ref_gated_problem *p) {
  size_t h = p->h_q;
  if (p->h_k > h) h = p->h_k;
  if (p->h_v > h) h = p->h_v;
  if (gated(p) && p->h_g > h) h = p->h_g;
  return h;
}

static size_t gate_heads(const ref_gated_problem *p) { return p->h_g ? p->h_g : ref_gated_heads(p); }

size_t ref_gated_state_heads(const ref_gated_problem *p) {
  const size_t kv = ref_lcm(p->h_k, p->h_v);
  return gated(p) ? ref_lcm(kv, gate_heads(p)) : kv;
}

static size_t window(size_t c) { return c ? c : 1; }

/* lg(t, g, f): 0 without a gate; a SCALAR gate ignores f. */
static double log_gate(const ref_gated_problem *p, size_t t, size_t g, size_t f) {
  if (p->gate == REF_GATE_NONE) return 0.0;
  const float *x = p->log_gate + t * p->lg.row_stride + g * p->lg.head_stride;
  return (double)(p->gate == REF_GATE_FEATURE ? x[f] : x[0]);
}

static double beta_at(const ref_gated_problem *p, size_t t, size_t g) {
  return p->beta ? (double)p->beta[t * p->lb.row_stride + g * p->lb.head_stride] : 1.0;
}

/* G(j) of the error model, per gate head, key and feature: sum |lg(t)| over the `chunk` tokens
 * up to and including j, each sum written out. [h_g][n_kv][m] */
static double *window_sums(const ref_gated_problem *p) {
  const size_t hg = gate_heads(p), n = p->n_kv, m = p->d, C = window(p->chunk);
  double *g = xmalloc(hg * n * m, sizeof(double));
  for (size_t h = 0; h < hg; ++h)
    for (size_t j = 0; j < n; ++j)
      for (size_t f = 0; f < m; ++f) {
        double s = 0.0;
        for (size_t t = j + 1 > C ? j + 1 - C : 0; t <= j; ++t) s += fabs(log_gate(p, t, h, f));
        g[(h * n + j) * m + f] = s;
      }
  return g;
}

/* The error model's weights of key j seen from position p (j <= p), see ref_gated.h. lsum is
 * sum_{t=j+1..p} lg (<= 0), gj the window sum G(j). */
static double lambda_key(const ref_gated_problem *p, size_t j, long long pos, double lsum, double gj) {
  if (p->gate == REF_GATE_NONE || (long long)j == pos) return 0.0;
  const size_t gap = (size_t)(pos - (long long)j), C = window(p->chunk);
  const double l = -lsum;
  return sqrt((double)(gap < C ? gap : C)) * (gj + l) + l;
}

static double steps_key(const ref_gated_problem *p, size_t j, long long pos) {
  if (p->gate == REF_GATE_NONE) return 0.0;
  if ((long long)j == pos) return 1.0;
  return (double)(pos - (long long)j) / (double)window(p->step_chunk) + 2.0;
}

/* the incoming state's weights at position pos (lsum = sum_{t=0..pos} lg) */
static double lambda_state(const ref_gated_problem *p, long long pos, double lsum) {
  if (p->gate == REF_GATE_NONE || pos < 0) return 0.0;
  const size_t span = (size_t)pos + 1, C = window(p->chunk);
  return sqrt((double)(span < C ? span : C)) * -lsum - lsum;
}

static double steps_state(const ref_gated_problem *p, long long pos) {
  if (p->gate == REF_GATE_NONE || pos < 0) return 0.0;
  return (double)(pos + 1) / (double)window(p->step_chunk) + 2.0;
}

/* decays below FLT_MIN: a float exp may give 0 */
#define REF_TINY 0x1p-126

/* Running sums of one output row or state row: the value and the four error scales (abs, log,
 * step, tiny), for the numerator (dv columns) and the denominator. */
typedef struct acc {
  double *num, *sn[4];
  double den, sd[4];
} acc;

static void acc_init(acc *a, size_t dv) {
  a->num = xmalloc(5 * dv, sizeof(double));
  for (int k = 0; k < 4; ++k) a->sn[k] = a->num + (size_t)(k + 1) * dv;
}

static void acc_zero(acc *a, size_t dv) {
  for (size_t c = 0; c < 5 * dv; ++c) a->num[c] = 0.0;
  a->den = 0.0;
  for (int k = 0; k < 4; ++k) a->sd[k] = 0.0;
}

/* one term: weight w with its four scale weights sw (|w|, |w| Lambda, |w| steps, |w| if tiny)
 * times a row x of dv values and the denominator's value xd (1 for a key, z0_f for the state) */
static void acc_add(acc *a, size_t dv, double w, const double *sw, const double *x, double xd) {
  for (size_t c = 0; c < dv; ++c) {
    a->num[c] += w * x[c];
    for (int k = 0; k < 4; ++k) a->sn[k][c] += sw[k] * fabs(x[c]);
  }
  a->den += w * xd;
  for (int k = 0; k < 4; ++k) a->sd[k] += sw[k] * fabs(xd);
}

static void acc_free(acc *a) { free(a->num); }

static double *scale_ptr(const ref_gated_scales *sc, int k) {
  if (!sc) return NULL;
  return k == 0 ? sc->abs : k == 1 ? sc->log : k == 2 ? sc->step : sc->tiny;
}

/* the row's result at element `at`: un-normalised, or the quotient (zero denominator: 0), with
 * its scales ((N + |o| Z) / |den| for a quotient; the floor's factor (1 + |o|) / |den|) */
static void acc_store(const ref_gated_problem *p, const acc *a, double *o, const ref_gated_scales *sc, size_t at) {
  const double dd = a->den + p->eps;
  for (size_t c = 0; c < p->dv; ++c) {
    double r = a->num[c];
    if (p->normalize) r = dd != 0.0 ? a->num[c] / dd : 0.0;
    o[at + c] = r;
    for (int k = 0; k < 4; ++k) {
      double *out = scale_ptr(sc, k);
      if (!out) continue;
      out[at + c] = p->normalize && dd != 0.0 ? (a->sn[k][c] + fabs(r) * a->sd[k]) / fabs(dd) : a->sn[k][c];
    }
    if (sc && sc->floor) sc->floor[at + c] = p->normalize && dd != 0.0 ? (1.0 + fabs(r)) / fabs(dd) : 1.0;
  }
}

/* the four scale weights of a term x with decay D, Lambda lam and steps st */
static void term_weights(double *sw, double x, double D, double lam, double st) {
  sw[0] = fabs(x);
  sw[1] = fabs(x) * lam;
  sw[2] = fabs(x) * st;
  sw[3] = D < REF_TINY ? fabs(x) : 0.0;
}

/* The non-finite policy (attn.h): a row that uses a NaN or an infinity (q_i, the k_j and v_j of
 * every key j <= p_i, the incoming state of its head) is NaN; the gates cannot be (the library
 * refuses them). */
static int row_poisoned(const ref_gated_problem *p, const float *qi, long long pos, size_t hk, size_t hv, size_t hs) {
  const size_t m = p->d, w = p->dv + 2;
  if (!ref_row_finite(qi, p->d)) return 1;
  for (long long j = 0; j <= pos && j < (long long)p->n_kv; ++j)
    if (!ref_row_finite(p->k + (size_t)j * p->lk.row_stride + hk * p->lk.head_stride, p->d) ||
        !ref_row_finite(p->v + (size_t)j * p->lv.row_stride + hv * p->lv.head_stride, p->dv))
      return 1;
  for (size_t e = 0; p->s0 && e < m * w; ++e)
    if (!isfinite(p->s0[hs * m * w + e])) return 1;
  return 0;
}

void ref_gated(const ref_gated_problem *p, double *o, const ref_gated_scales *sc) {
  const size_t H = ref_gated_heads(p), hg_n = gate_heads(p), L = ref_gated_state_heads(p);
  const size_t m = p->d, dv = p->dv, w = dv + 2;
  double *gsum = window_sums(p);
  double *phi = xmalloc(m, sizeof(double)), *lsum = xmalloc(m, sizeof(double));
  double *vrow = xmalloc(dv, sizeof(double));
  acc a;
  acc_init(&a, dv);
  for (size_t i = 0; i < p->n_q; ++i) {
    const long long pos = (long long)p->n_kv - (long long)p->n_q + (long long)i;
    for (size_t h = 0; h < H; ++h) {
      const size_t hq = h / (H / p->h_q), hk = h / (H / p->h_k), hv = h / (H / p->h_v);
      const size_t hg = h / (H / hg_n), hs = h / (H / L);
      const float *qi = p->q + i * p->lq.row_stride + hq * p->lq.head_stride;
      for (size_t f = 0; f < m; ++f) {
        phi[f] = p->scale * ref_feature(p->feature_map, (double)qi[f]);
        lsum[f] = 0.0;
      }
      acc_zero(&a, dv);
      for (long long jj = pos; jj >= 0; --jj) {
        const size_t j = (size_t)jj;
        const float *kj = p->k + j * p->lk.row_stride + hk * p->lk.head_stride;
        const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
        const double b = beta_at(p, j, hg), st = steps_key(p, j, pos);
        double wt = 0.0, sw[4] = {0.0, 0.0, 0.0, 0.0}, tw[4];
        for (size_t f = 0; f < m; ++f) { /* lsum[f] = sum_{t=j+1..p} lg(t, f) */
          const double D = exp(lsum[f]);
          const double x = phi[f] * b * D * ref_feature(p->feature_map, (double)kj[f]);
          wt += x;
          term_weights(tw, x, D, lambda_key(p, j, pos, lsum[f], gsum[(hg * p->n_kv + j) * m + f]), st);
          for (int k = 0; k < 4; ++k) sw[k] += tw[k];
        }
        for (size_t c = 0; c < dv; ++c) vrow[c] = (double)vj[c];
        acc_add(&a, dv, wt, sw, vrow, 1.0);
        for (size_t f = 0; f < m; ++f) lsum[f] += log_gate(p, j, hg, f); /* now sum_{t=j..p} */
      }
      if (p->s0) { /* lsum = sum_{t=0..p} lg (0 when p < 0: S0 undecayed) */
        const double *s0 = p->s0 + hs * m * w;
        const double st = steps_state(p, pos);
        for (size_t f = 0; f < m; ++f) {
          const double D = exp(lsum[f]), x = phi[f] * D, lam = lambda_state(p, pos, lsum[f]);
          double tw[4];
          term_weights(tw, x, D, lam, st);
          for (size_t c = 0; c < dv; ++c) vrow[c] = s0[f * w + c];
          acc_add(&a, dv, x, tw, vrow, s0[f * w + dv]);
        }
      }
      if (row_poisoned(p, qi, pos, hk, hv, hs)) {
        for (size_t c = 0; c < dv; ++c) a.num[c] = NAN;
        a.den = NAN;
      }
      acc_store(p, &a, o, sc, (i * H + h) * dv);
    }
  }
  acc_free(&a);
  free(gsum);
  free(phi);
  free(lsum);
  free(vrow);
}

void ref_gated_state(const ref_gated_problem *p, double *s, const ref_gated_scales *sc) {
  const size_t hg_n = gate_heads(p), L = ref_gated_state_heads(p), m = p->d, dv = p->dv, w = dv + 2;
  const long long pos = (long long)p->n_kv - 1;
  /* z (column dv) only when normalised; the offset column stays 0 */
  const size_t cols = p->normalize ? dv + 1 : dv;
  double *gsum = window_sums(p);
  for (size_t e = 0; e < L * m * w; ++e) {
    s[e] = 0.0;
    for (int k = 0; k < 4; ++k)
      if (scale_ptr(sc, k)) scale_ptr(sc, k)[e] = 0.0;
  }
  for (size_t hs = 0; hs < L; ++hs) {
    const size_t hk = hs / (L / p->h_k), hv = hs / (L / p->h_v), hg = hs / (L / hg_n);
    for (size_t f = 0; f < m; ++f) {
      const size_t r = (hs * m + f) * w;
      double lsum = 0.0, tw[4];
      for (long long jj = pos; jj >= 0; --jj) { /* lsum = sum_{t=j+1..p} lg(t, f) */
        const size_t j = (size_t)jj;
        const float *kj = p->k + j * p->lk.row_stride + hk * p->lk.head_stride;
        const float *vj = p->v + j * p->lv.row_stride + hv * p->lv.head_stride;
        const double D = exp(lsum), x = beta_at(p, j, hg) * D * ref_feature(p->feature_map, (double)kj[f]);
        term_weights(tw, x, D, lambda_key(p, j, pos, lsum, gsum[(hg * p->n_kv + j) * m + f]), steps_key(p, j, pos));
        for (size_t c = 0; c < cols; ++c) {
          const double val = c < dv ? (double)vj[c] : 1.0;
          s[r + c] += x * val;
          for (int k = 0; k < 4; ++k)
            if (scale_ptr(sc, k)) scale_ptr(sc, k)[r + c] += tw[k] * fabs(val);
        }
        lsum += log_gate(p, j, hg, f);
      }
      if (p->s0) { /* lsum = sum_{t=0..p} lg */
        const double D = exp(lsum);
        term_weights(tw, D, D, lambda_state(p, pos, lsum), steps_state(p, pos));
        for (size_t c = 0; c < cols; ++c) {
          s[r + c] += D * p->s0[r + c];
          for (int k = 0; k < 4; ++k)
            if (scale_ptr(sc, k)) scale_ptr(sc, k)[r + c] += tw[k] * fabs(p->s0[r + c]);
        }
      }
    }
  }
  free(gsum);
}
