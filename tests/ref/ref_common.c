/* Float64 reference (attn_ref.h): what every variant shares, the finiteness test and the mask. */
#include "attn_ref.h"

#include <math.h>

int ref_row_finite(const float *x, size_t n) {
  for (size_t t = 0; t < n; ++t)
    if (!isfinite(x[t])) return 0;
  return 1;
}

/* floor(a / b) for b > 0, also for negative a (C's division truncates toward 0). */
static long long floor_div(long long a, long long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

int ref_visible(size_t i, size_t j, size_t n_q, size_t n_kv, size_t left, size_t right, size_t chunk) {
  /* p_i = (n_kv - n_q) + i may be negative: signed arithmetic (test sizes are small). */
  const long long reach = (long long)(n_q + n_kv);
  const long long p = (long long)n_kv - (long long)n_q + (long long)i;
  const long long jj = (long long)j;
  /* a side wider than both lengths bounds nothing (and must not wrap to a negative number) */
  if (left <= n_q + n_kv && jj < p - (long long)left) return 0;
  if (right <= n_q + n_kv && jj > p + (long long)right) return 0;
  if (chunk > 0) {
    /* Positions lie in [-n_q, n_kv): a chunk wider than n_q + n_kv splits them exactly as one of
     * width n_q + n_kv does (chunk 0 holds [0, n_kv), chunk -1 the negative positions), so the
     * width is clamped to keep it a positive long long. */
    const long long g = chunk < (size_t)reach ? (long long)chunk : reach;
    if (floor_div(jj, g) != floor_div(p, g)) return 0;
  }
  return 1;
}

ref_row_stats ref_row_stats_of(const double *w, const unsigned char *visible, size_t n_kv) {
  double n = 0, W = 0, W2 = 0;
  int finite = 1;
  for (size_t j = 0; j < n_kv; ++j) {
    if (!visible[j]) continue;
    n += 1;
    finite &= isfinite(w[j]) != 0;
    W += fabs(w[j]);
    W2 += w[j] * w[j];
  }
  ref_row_stats r = {NAN, NAN, n};
  if (n == 0 || !finite || W == 0) return r;
  double h = 0;
  for (size_t j = 0; j < n_kv; ++j) {
    if (!visible[j] || w[j] == 0) continue;
    const double p = fabs(w[j]) / W;
    h -= p * log(p);
  }
  r.entropy = h;
  r.sparsity = W / sqrt(n * W2);
  return r;
}
