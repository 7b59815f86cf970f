/* Per-row statistics through the explicit matrix (attn.h: attn_matrix_stats): the matrix, then
 * each row's entropy, sparsity and count over the keys its mask shows it. */
#include <math.h>

#include "ops/matrix_internal.h"

attn_status attn_matrix_stats_workspace_size(const attn_call *call, size_t *bytes) {
  return attn_mx_workspace_bytes(call, 1, bytes);
}

/* Floor division of a position by a width g >= 1 (positions may be negative). */
static int64_t mx_floor_div(int64_t x, int64_t g) { return x / g - (x % g < 0); }

/* The keys [*lo, *hi) the mask shows query i (bottom-right), and for linear attention's
 * chunk-exclusive form only those of earlier chunks. Bounds are clamped to what positions reach
 * (every position lies in [-n_q, n_kv)), which changes no answer. */
static void mx_visible(const mx_plan *p, size_t i, size_t *lo, size_t *hi) {
  const size_t reach = p->n_q + p->n_kv; /* the spans fit: no overflow */
  const int64_t pos = (int64_t)p->n_kv - (int64_t)p->n_q + (int64_t)i, n = (int64_t)p->n_kv;
  int64_t a = pos - (int64_t)attn_min_sz(p->mask.left, reach), b = pos + (int64_t)attn_min_sz(p->mask.right, reach);
  if (p->mask.chunk) {
    const int64_t g = (int64_t)attn_min_sz(p->mask.chunk, reach), start = mx_floor_div(pos, g) * g;
    a = a > start ? a : start;
    b = b < start + g - 1 ? b : start + g - 1;
  }
  if (p->xchunk) {
    const int64_t g = (int64_t)attn_min_sz(p->xchunk, reach), before = mx_floor_div(pos, g) * g - 1;
    b = b < before ? b : before;
  }
  a = a > 0 ? a : 0;
  b = b < n - 1 ? b : n - 1;
  *lo = (size_t)a;
  *hi = b >= a ? (size_t)b + 1 : (size_t)a;
}

/* Statistics of one row's weights w[lo, hi), in double: W = sum |w|, entropy -sum p log p
 * (p = |w| / W), sparsity W / sqrt(n sum w^2); NaN without a key, with W = 0 or a non-finite w. */
static void mx_row_stats(const float *w, size_t lo, size_t hi, double *entropy, double *sparsity) {
  double W = 0.0, W2 = 0.0;
  for (size_t j = lo; j < hi; j++) {
    const double x = w[j];
    W += fabs(x);
    W2 += x * x;
  }
  *entropy = *sparsity = NAN;
  if (!(W > 0.0) || !isfinite(W2)) return; /* no key, W = 0, or a NaN or an infinity */
  double h = 0.0;
  for (size_t j = lo; j < hi; j++) {
    const double q = fabs((double)w[j]) / W;
    if (q > 0.0) h -= q * log(q);
  }
  *entropy = h;
  *sparsity = W / sqrt((double)(hi - lo) * W2);
}

attn_status attn_matrix_stats(const attn_call *call, const attn_row_stats *stats, void *workspace,
                              size_t workspace_size) {
  mx_plan p;
  attn_status st = attn_mx_prepare(call, 1, &p);
  if (st) return st;
  size_t sb;
  if ((st = attn_row_stats_check(stats, p.n_q, p.H, &sb))) return st;
  void *out[] = {stats->entropy, stats->sparsity, stats->count, workspace};
  const size_t out_bytes[] = {sb, sb, sb, workspace_size};
  if ((st = attn_mx_check_io(call, &p, out, out_bytes, 4, workspace_size))) return st;
  float *a = attn_ws_base(workspace) + p.off_mat;
  if ((st = attn_mx_compute(call, &p, a, workspace, workspace_size))) return st;
  const attn_layout al = p.d.shape.o, sl = stats->layout;
  for (size_t i = 0; i < p.n_q; i++) {
    size_t lo, hi;
    mx_visible(&p, i, &lo, &hi);
    for (size_t h = 0; h < p.H; h++) {
      double e, s;
      mx_row_stats(a + i * al.row_stride + h * al.head_stride, lo, hi, &e, &s);
      const size_t at = i * sl.row_stride + h * sl.head_stride;
      if (stats->entropy) stats->entropy[at] = (float)e;
      if (stats->sparsity) stats->sparsity[at] = (float)s;
      if (stats->count) stats->count[at] = (float)(hi - lo);
    }
  }
  return ATTN_OK;
}
