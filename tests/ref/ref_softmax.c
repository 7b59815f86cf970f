/* Float64 reference of softmax attention (attn_ref.h): for every (query, head) an explicit sum
 * over the visible keys, in two passes (the maximum logit, then the weights relative to it). */
#include "attn_ref.h"

#include <math.h>
#include <stdlib.h>

void ref_softmax(const ref_softmax_problem *p, double *o, double *lse, double *oscale, double *sabs) {
  const size_t group = p->h_q / p->h_kv;
  double *s = malloc(sizeof(double) * (p->n_kv ? p->n_kv : 1));
  double *pw = malloc(sizeof(double) * (p->n_kv ? p->n_kv : 1));
  unsigned char *vis = malloc(p->n_kv ? p->n_kv : 1);
  for (size_t i = 0; i < p->n_q; ++i) {
    for (size_t h = 0; h < p->h_q; ++h) {
      const size_t hk = h / group;
      const float *qi = p->q + i * p->lq.row_stride + h * p->lq.head_stride;
      const size_t out = (i * p->h_q + h) * p->dv;
      double m = -INFINITY, amax = 0.0;
      size_t count = 0, read = 0;
      int qk_bad = !ref_row_finite(qi, p->d), v_bad = 0; /* the non-finite policy */
      for (size_t j = 0; j < p->n_kv; ++j) {
        vis[j] = (unsigned char)ref_visible(i, j, p->n_q, p->n_kv, p->window_left, p->window_right, p->chunk);
        if (!vis[j]) continue;
        ++read; /* the mask shows it: read, even if a -inf bias hides it */
        const float *kj = p->k + j * p->lk.row_stride + hk * p->lk.head_stride;
        qk_bad |= !ref_row_finite(kj, p->d);
        v_bad |= !ref_row_finite(p->v + j * p->lv.row_stride + hk * p->lv.head_stride, p->dv);
        double dot = 0.0, adot = 0.0;
        for (size_t t = 0; t < p->d; ++t) {
          dot += (double)qi[t] * (double)kj[t];
          adot += fabs((double)qi[t] * (double)kj[t]);
        }
        s[j] = p->scale * dot;
        double mag = fabs(p->scale) * adot;
        if (p->softcap > 0) s[j] = p->softcap * tanh(s[j] / p->softcap), mag += 2.0 * p->softcap;
        if (p->alibi) {
          const double a = (double)p->alibi[h] * ((double)j - ((double)p->n_kv - (double)p->n_q + (double)i));
          s[j] += a, mag += fabs(a);
        }
        if (p->bias) {
          const double b = (double)p->bias[i * p->bias_rs + h * p->bias_hs + j];
          if (b == -INFINITY) { /* hidden by the bias */
            vis[j] = 0;
            continue;
          }
          qk_bad |= !isfinite(b);
          s[j] += b, mag += isfinite(b) ? fabs(b) : 0.0;
        }
        if (s[j] > m) m = s[j];
        if (mag > amax) amax = mag;
        ++count;
      }
      const double sink = p->sinks ? (double)p->sinks[h] : -INFINITY;
      if (count == 0 && ((read && (qk_bad || v_bad)) || p->sinks)) {
        /* no key left, but a key hidden only by a -inf bias is still read (its non-finite k makes
         * o and lse NaN, its non-finite v o), or only the sink: zeros, lse = sink */
        for (size_t c = 0; c < p->dv; ++c) {
          o[out + c] = read && (qk_bad || v_bad) ? NAN : 0.0;
          if (oscale) oscale[out + c] = 0.0;
        }
        if (lse) lse[i * p->h_q + h] = read && qk_bad ? NAN : sink;
        if (sabs) sabs[i * p->h_q + h] = read && qk_bad ? 0.0 : amax;
        continue;
      }
      if (p->sinks && !qk_bad && sink > m) m = sink;
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
      double l = p->sinks ? exp(sink - m) : 0.0;
      for (size_t j = 0; j < p->n_kv; ++j) {
        pw[j] = vis[j] ? exp(s[j] - m) : 0.0;
        l += pw[j];
      }
      for (size_t c = 0; c < p->dv && !v_bad; ++c) {
        double acc = 0.0, aacc = 0.0;
        for (size_t j = 0; j < p->n_kv; ++j) {
          if (!vis[j]) continue;
          const double vj = (double)p->v[j * p->lv.row_stride + hk * p->lv.head_stride + c];
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
