/*
 * Rows element-wise (contract: attn_rows_axpby_fn in core/ukernels.h), written once against the
 * vf_* shim: y = A y + B x (or y = B x) a vector of columns at a time, then the row's last
 * columns one at a time (a state row is dv + 1 wide: a masked store per row costs more than the
 * few scalar steps on AMD's cores). Products and sums are separate multiplies and adds, never
 * fused. Also the rows' copy with a finiteness test (attn_rows_copy_fn): each value joins one of
 * four running sums as x * 0 (0 for a finite x, NaN for an infinite or NaN one), four so that the
 * sums' latency does not bound the copy. And rows against a vector of their columns
 * (attn_rows_cols_fn: a product, or a running maximum through a comparison and a select, so that
 * a NaN is passed over on every path as in the plain loop). Include the path's vf_* shim, define
 * ATTN_ROWS_AXPBY_NAME, ATTN_ROWS_COPY_NAME and ATTN_ROWS_COLS_NAME, then include.
 */
#include "core/ukernels.h"

void ATTN_ROWS_AXPBY_NAME(size_t rows, size_t cols, float *y, size_t ldy, float *x, size_t ldx, const float *a,
                          size_t as, const float *b, size_t bs, int accumulate, int keep) {
  const size_t full = cols / ATTN_VL * ATTN_VL;
  for (size_t r = 0; r < rows; r++) {
    float *yr = y + r * ldy, *xr = x + r * ldx;
    const float As = a ? a[r * as] : 1.0f, Bs = b ? b[r * bs] : 1.0f;
    const vf A = vf_set1(As), B = vf_set1(Bs);
    if (!accumulate) {
      for (size_t c = 0; c < full; c += ATTN_VL) vf_store(yr + c, vf_mul(B, vf_load(xr + c)));
      for (size_t c = full; c < cols; c++) yr[c] = Bs * xr[c];
    } else {
      for (size_t c = 0; c < full; c += ATTN_VL) {
        const vf t = vf_mul(B, vf_load(xr + c)), v = vf_load(yr + c);
        if (keep) vf_store(xr + c, v);
        vf_store(yr + c, vf_add(vf_mul(A, v), t));
      }
      for (size_t c = full; c < cols; c++) {
        const float t = Bs * xr[c], v = yr[c], p = As * v;
        if (keep) xr[c] = v;
        yr[c] = p + t;
      }
    }
  }
}

int ATTN_ROWS_COPY_NAME(size_t rows, size_t cols, float *y, size_t ldy, const float *x, size_t ldx) {
  const size_t full = cols / ATTN_VL * ATTN_VL;
  const vf zero = vf_zero();
  vf acc[4] = {zero, zero, zero, zero};
  float tail = 0.0f;
  for (size_t r = 0; r < rows; r++) {
    float *yr = y + r * ldy;
    const float *xr = x + r * ldx;
    size_t c = 0;
    for (; c + 4 * ATTN_VL <= full; c += 4 * ATTN_VL)
#pragma GCC unroll 4
      for (size_t u = 0; u < 4; u++) {
        const vf v = vf_load(xr + c + u * ATTN_VL);
        vf_store(yr + c + u * ATTN_VL, v);
        acc[u] = vf_fma(v, zero, acc[u]);
      }
    for (; c < full; c += ATTN_VL) {
      const vf v = vf_load(xr + c);
      vf_store(yr + c, v);
      acc[0] = vf_fma(v, zero, acc[0]);
    }
    for (; c < cols; c++) {
      yr[c] = xr[c];
      tail += xr[c] * 0.0f;
    }
  }
  return vf_hsum(vf_add(vf_add(acc[0], acc[1]), vf_add(acc[2], acc[3]))) + tail == 0.0f;
}

void ATTN_ROWS_COLS_NAME(attn_cols_mode mode, size_t rows, size_t cols, float *y, size_t ldy, const float *x,
                         size_t ldx, float *v) {
  const size_t full = cols / ATTN_VL * ATTN_VL;
  if (mode == ATTN_COLS_MAX) {
    for (size_t c = 0; c < full; c += ATTN_VL) {
      vf run = vf_load(v + c);
      for (size_t r = 0; r < rows; r++) {
        const vf u = vf_load(x + r * ldx + c);
        run = vf_select(vf_lt(run, u), u, run); /* u > run: NaN passed over */
      }
      vf_store(v + c, run);
    }
    for (size_t c = full; c < cols; c++)
      for (size_t r = 0; r < rows; r++) v[c] = x[r * ldx + c] > v[c] ? x[r * ldx + c] : v[c];
    return;
  }
  for (size_t r = 0; r < rows; r++) {
    float *yr = y + r * ldy;
    const float *xr = x + r * ldx;
    for (size_t c = 0; c < full; c += ATTN_VL) vf_store(yr + c, vf_mul(vf_load(xr + c), vf_load(v + c)));
    for (size_t c = full; c < cols; c++) yr[c] = xr[c] * v[c];
  }
}
