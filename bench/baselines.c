/*
 * baselines.c: the two reference implementations the library is compared with, in the same run.
 *
 * - Naive softmax attention through OpenBLAS (when built with it): per query head
 *   S = scale Q K^T (cblas_sgemm, n_q x n_kv scores), a row softmax in C over each row's visible
 *   keys (masked entries set to 0), O = P V (cblas_sgemm). OpenBLAS runs on one thread
 *   (openblas_set_num_threads(1)) so it compares with one library call; --threads T runs T of them.
 * - Causal linear attention as a plain C recurrent loop: per token a rank-1 update of the state
 *   S += psi(k) [v 1]^T, then o = phi(q)^T S / (phi(q)^T z + eps): the structure of
 *   fast-transformers' CPU causal-product kernel. Compiled with the build's flags, no ISA flags.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

#if defined(ATTN_BENCH_HAVE_OPENBLAS)
#include <cblas.h>
#endif

size_t bench_baseline_scratch(const bench_shape *s) {
  if (s->kind == BENCH_BLAS) return s->n_q * s->n_kv;
  return s->h_kv * s->m * (s->dv + 1) + 2 * s->m; /* state, then phi(q) and psi(k) */
}

int bench_have_openblas(void) {
#if defined(ATTN_BENCH_HAVE_OPENBLAS)
  static int once;
  if (!once) {
    openblas_set_num_threads(1);
    once = 1;
  }
  return 1;
#else
  return 0;
#endif
}

void bench_baseline_blas(bench_work *w) {
#if defined(ATTN_BENCH_HAVE_OPENBLAS)
  const bench_shape *s = &w->s;
  const size_t group = s->h_q / s->h_kv;
  const float scale = 1.0f / sqrtf((float)s->d);
  float *scores = w->scratch;
  for (size_t h = 0; h < s->h_q; h++) {
    const size_t g = h / group;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->n_q, (int)s->n_kv, (int)s->d,
                scale, w->q + h * s->d, (int)(s->h_q * s->d), w->k + g * s->d,
                (int)(s->h_kv * s->d), 0.0f, scores, (int)s->n_kv);
    for (size_t i = 0; i < s->n_q; i++) {
      float *row = scores + i * s->n_kv;
      size_t lo = 0, hi = 0;
      if (!bench_visible_range(s->n_q, s->n_kv, s->window_left, s->window_right, i, &lo, &hi)) {
        memset(row, 0, s->n_kv * sizeof *row);
        continue;
      }
      float mx = row[lo], sum = 0;
      for (size_t j = lo + 1; j <= hi; j++) mx = row[j] > mx ? row[j] : mx;
      for (size_t j = lo; j <= hi; j++) sum += (row[j] = expf(row[j] - mx));
      const float inv = 1.0f / sum;
      for (size_t j = lo; j <= hi; j++) row[j] *= inv;
      memset(row, 0, lo * sizeof *row);
      memset(row + hi + 1, 0, (s->n_kv - hi - 1) * sizeof *row);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->n_q, (int)s->dv, (int)s->n_kv,
                1.0f, scores, (int)s->n_kv, w->v + g * s->dv, (int)(s->h_kv * s->dv), 0.0f,
                w->o + h * s->dv, (int)(s->h_q * s->dv));
  }
#else
  (void)w;
#endif
}

static void feature(float *out, const float *x, size_t m, attn_feature_map map) {
  for (size_t p = 0; p < m; p++)
    out[p] = map == ATTN_FEATURE_ELU1 ? (x[p] >= 0 ? x[p] + 1.0f : expf(x[p])) : x[p];
}

void bench_baseline_recurrent(bench_work *w) {
  const bench_shape *s = &w->s;
  const size_t m = s->m, dv = s->dv, cols = dv + 1, group = s->h_q / s->h_kv;
  float *state = w->scratch, *phi = state + s->h_kv * m * cols, *psi = phi + m;
  if (s->n_q > 1) memset(state, 0, s->h_kv * m * cols * sizeof *state); /* a fresh prefill */
  for (size_t t = 0; t < s->n_q; t++) {
    for (size_t g = 0; g < s->h_kv; g++) { /* S += psi(k_t) [v_t 1]^T */
      feature(psi, w->k + (t * s->h_kv + g) * s->d, m, s->map);
      const float *vt = w->v + (t * s->h_kv + g) * dv;
      float *sg = state + g * m * cols;
      for (size_t p = 0; p < m; p++) {
        float *row = sg + p * cols;
        for (size_t c = 0; c < dv; c++) row[c] += psi[p] * vt[c];
        row[dv] += psi[p];
      }
    }
    for (size_t h = 0; h < s->h_q; h++) { /* o_t = phi(q_t)^T S / (phi(q_t)^T z + eps) */
      feature(phi, w->q + (t * s->h_q + h) * s->d, m, s->map);
      const float *sg = state + (h / group) * m * cols;
      float *ot = w->o + (t * s->h_q + h) * dv, den = 0;
      memset(ot, 0, dv * sizeof *ot);
      for (size_t p = 0; p < m; p++) {
        const float *row = sg + p * cols;
        for (size_t c = 0; c < dv; c++) ot[c] += phi[p] * row[c];
        den += phi[p] * row[dv];
      }
      if (s->normalize) {
        const float inv = 1.0f / (den + 1e-6f);
        for (size_t c = 0; c < dv; c++) ot[c] *= inv;
      }
    }
  }
}
