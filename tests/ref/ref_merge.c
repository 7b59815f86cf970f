/* Float64 reference of the merge of partial softmax results (attn_ref.h): per row, the weights
 * exp(lse_c - M) of every part, summed directly. */
#include "attn_ref.h"

#include <math.h>

void ref_merge(size_t rows, size_t dv, size_t parts, const float *const *o_parts, size_t o_stride,
               const float *const *lse_parts, size_t lse_stride, double *o, double *lse, double *oscale,
               double *lscale) {
  for (size_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    int lse_bad = 0, o_bad = 0; /* the non-finite policy: NaN or +inf LSE; non-finite used o */
    for (size_t c = 0; c < parts; ++c) {
      const double l = (double)lse_parts[c][r * lse_stride];
      if (isnan(l) || l == INFINITY)
        lse_bad = 1;
      else if (l > -INFINITY && !ref_row_finite(o_parts[c] + r * o_stride, dv))
        o_bad = 1;
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
          if (w > 0.0) acc += w * (1.0 + fabs(x)) * (fabs((double)o_parts[c][r * o_stride + e]) + fabs(o[r * dv + e]));
        }
        oscale[r * dv + e] = acc / wsum;
      }
    }
    const double l = m + log(wsum);
    if (lse) lse[r] = l;
    if (lscale) lscale[r] = 1.0 + fabs(l) + wx / wsum;
  }
}
