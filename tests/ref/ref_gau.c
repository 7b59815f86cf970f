/* Float64 reference of GAU relu^2 attention (attn_ref.h): for every (query, head) an explicit sum
 * over the visible keys of t_i relu(scale q_i . k_j + bias_ij)^2 v_j, straight from the formula. */
#include "attn_ref.h"

#include <math.h>
#include <stdlib.h>

/* 2^-10: a score within this fraction of its magnitude g from 0 may change side in fp32. */
#define REF_GAU_NEAR 0x1p-10

double ref_gau_bias_at(const ref_gau_problem *p, size_t i, size_t j) {
  const long long pos = (long long)p->n_kv - (long long)p->n_q + (long long)i;
  const long long off = pos - (long long)j, len = (long long)p->bias_len;
  long long idx;
  switch (p->bias) {
    case REF_GAU_BIAS_CAUSAL:
      idx = off < 0 ? 0 : off > len - 1 ? len - 1 : off;
      return (double)p->table[idx];
    case REF_GAU_BIAS_TWO_SIDED:
      idx = off + len - 1;
      idx = idx < 0 ? 0 : idx > 2 * len - 2 ? 2 * len - 2 : idx;
      return (double)p->table[idx];
    case REF_GAU_BIAS_SCALAR:
    default:
      return p->beta;
  }
}

/* One (query, head): x_j and g_j of every key, visibility, the count, and the policy flags. */
typedef struct gau_row {
  size_t count;
  int qk_bad, v_bad;
} gau_row;

static gau_row gau_scores(const ref_gau_problem *p, size_t i, size_t h, double *x, double *g, unsigned char *vis) {
  const size_t hk = h / (p->h_q / p->h_kv);
  const float *qi = p->q + i * p->lq.row_stride + h * p->lq.head_stride;
  gau_row r = {0, !ref_row_finite(qi, p->d), 0};
  for (size_t j = 0; j < p->n_kv; ++j) {
    vis[j] = (unsigned char)ref_visible(i, j, p->n_q, p->n_kv, p->left, p->right, p->chunk);
    x[j] = 0.0;
    g[j] = 0.0;
    if (!vis[j]) continue;
    const float *kj = p->k + j * p->lk.row_stride + hk * p->lk.head_stride;
    r.qk_bad |= !ref_row_finite(kj, p->d);
    r.v_bad |= !ref_row_finite(p->v + j * p->lv.row_stride + hk * p->lv.head_stride, p->dv);
    double dot = 0.0, adot = 0.0;
    for (size_t t = 0; t < p->d; ++t) {
      dot += (double)qi[t] * (double)kj[t];
      adot += fabs((double)qi[t] * (double)kj[t]);
    }
    x[j] = p->scale * dot + ref_gau_bias_at(p, i, j);
    g[j] = fabs(p->scale) * adot;
    ++r.count;
  }
  return r;
}

void ref_gau(const ref_gau_problem *p, double *o, double *oscale, double *oarg, double *onear) {
  const size_t n = p->n_kv ? p->n_kv : 1;
  double *x = malloc(sizeof(double) * n), *g = malloc(sizeof(double) * n);
  unsigned char *vis = malloc(n);
  if (!x || !g || !vis) abort();
  for (size_t i = 0; i < p->n_q; ++i) {
    for (size_t h = 0; h < p->h_q; ++h) {
      const size_t hk = h / (p->h_q / p->h_kv), out = (i * p->h_q + h) * p->dv;
      const gau_row row = gau_scores(p, i, h, x, g, vis);
      const int bad = row.count > 0 && (row.qk_bad || row.v_bad);
      const double t = p->normalize && row.count > 0 ? 1.0 / (double)row.count : 1.0;
      for (size_t c = 0; c < p->dv; ++c) {
        double acc = 0.0, aacc = 0.0, arg = 0.0, near = 0.0;
        for (size_t j = 0; j < p->n_kv && !bad; ++j) {
          if (!vis[j]) continue;
          const double vj = (double)p->v[j * p->lv.row_stride + hk * p->lv.head_stride + c];
          const double r = x[j] > 0.0 ? x[j] : 0.0, av = fabs(vj);
          acc += r * r * vj;
          aacc += r * r * av;
          arg += 2.0 * r * g[j] * av;
          if (fabs(x[j]) <= REF_GAU_NEAR * g[j]) near += g[j] * g[j] * av;
        }
        o[out + c] = bad ? NAN : t * acc;
        if (oscale) oscale[out + c] = bad ? 0.0 : t * aacc;
        if (oarg) oarg[out + c] = bad ? 0.0 : t * arg;
        if (onear) onear[out + c] = bad ? 0.0 : t * near;
      }
    }
  }
  free(x);
  free(g);
  free(vis);
}

double ref_gau_weight(const ref_gau_problem *p, size_t i, size_t h, size_t j) {
  const size_t n = p->n_kv ? p->n_kv : 1;
  double *x = malloc(sizeof(double) * n), *g = malloc(sizeof(double) * n);
  unsigned char *vis = malloc(n);
  if (!x || !g || !vis) abort();
  const gau_row row = gau_scores(p, i, h, x, g, vis);
  double w = 0.0;
  if (row.qk_bad) {
    w = NAN;
  } else if (vis[j]) {
    const double r = x[j] > 0.0 ? x[j] : 0.0;
    w = r * r * (p->normalize ? 1.0 / (double)row.count : 1.0);
  }
  free(x);
  free(g);
  free(vis);
  return w;
}
