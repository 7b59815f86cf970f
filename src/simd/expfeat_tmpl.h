/*
 * Exponential features with per-feature offsets (contract: attn_expfeat_fn in core/ukernels.h),
 * written once against the vf_* shim: the exp, favor and dsoftmax maps of the chunkwise engine.
 * Include the path's shim, define ATTN_EXPFEAT_NAME, then include.
 */
#include <float.h>
#include <math.h>

#include "core/ukernels.h"
#include "simd/exp_tmpl.h"
#include "simd/transpose_tmpl.h"

/* max_f (u[f] + a[f]) (a NULL: max_f u[f]); -inf when every term is -inf. */
static inline float attn_expfeat_rowmax_(size_t m, const float *u, const float *a) {
  vf mv = vf_set1(-INFINITY);
  size_t f = 0;
  for (; f + ATTN_VL <= m; f += ATTN_VL) {
    const vf t = a ? vf_add(vf_load(u + f), vf_load(a + f)) : vf_load(u + f);
    mv = vf_max(mv, t);
  }
  float mx = vf_hmax(mv);
  for (; f < m; f++) {
    const float t = a ? u[f] + a[f] : u[f];
    mx = t > mx ? t : mx;
  }
  return mx;
}

/* out row = exp(u + c - mx) (every feature 0 for mx = -inf; NaN for a NaN or +inf mx, and where
 * u is non-finite). */
static inline void attn_expfeat_shifted_(size_t m, const float *ur, const float *c, float mx, float *orow,
                                         size_t out_cs) {
  const vf mv = vf_set1(mx == -INFINITY ? INFINITY : mx);
  for (size_t f = 0; f < m; f += ATTN_VL) {
    const size_t w = m - f < ATTN_VL ? m - f : ATTN_VL;
    const vf x = vf_load_w(ur + f, w);
    const vf e = attn_vexp_(vf_sub(vf_add(x, vf_load_w(c + f, w)), mv));
    vf_store_strided(orow + f * out_cs, out_cs, vf_fma(x, vf_zero(), e), w);
  }
}

/* The row modes (KEYS, SCALED, QUERY, SOFTMAX) over rows [0, rows), in order (the running
 * offsets and denominators take key row r before query row r). */
static inline __attribute__((always_inline)) void attn_expfeat_rows_(attn_expfeat_mode mode, size_t rows, size_t m,
                                                                     const float *u, size_t ldu, const float *kin,
                                                                     size_t ldk, float *run, const float *c, float *out,
                                                                     size_t out_rs, size_t out_cs) {
  for (size_t r = 0; r < rows; r++) {
    const float *ur = u + r * ldu;
    float *orow = out + r * out_rs;
    if (mode == ATTN_EXPF_KEYS) {
      for (size_t f = 0; f < m; f += ATTN_VL) {
        const size_t w = m - f < ATTN_VL ? m - f : ATTN_VL;
        const vf x = vf_load_w(ur + f, w);
        /* y + 0 * x: NaN for a non-finite x (exp(-inf - c) would be a silent 0) */
        const vf y = vf_fma(x, vf_zero(), attn_vexp_(vf_sub(x, vf_load_w(c + f, w))));
        vf_store_strided(orow + f * out_cs, out_cs, y, w);
      }
      continue;
    }
    /* The running offsets (QUERY: max) or denominators (SOFTMAX: sum) take key row r first. */
    if (kin) {
      const float *kr = kin + r * ldk;
      for (size_t f = 0; f < m; f += ATTN_VL) {
        const size_t w = m - f < ATTN_VL ? m - f : ATTN_VL;
        const vf a = vf_load_w(run + f, w), b = vf_load_w(kr + f, w);
        vf_store_w(run + f, mode == ATTN_EXPF_QUERY ? vf_max(a, b) : vf_add(a, b), w);
      }
    }
    if (mode == ATTN_EXPF_SCALED) {
      attn_expfeat_shifted_(m, ur, c, run[r], orow, out_cs);
    } else if (mode == ATTN_EXPF_QUERY) {
      /* No feature has an offset: nothing is visible, and exp(x + c - inf) makes every feature 0
       * (still NaN for a non-finite input). A NaN or +inf maximum makes every feature NaN. */
      attn_expfeat_shifted_(m, ur, c, attn_expfeat_rowmax_(m, ur, run), orow, out_cs);
    } else { /* ATTN_EXPF_SOFTMAX: softmax over the row, divided by the running denominators */
      const vf mv = vf_set1(attn_expfeat_rowmax_(m, ur, NULL));
      vf sv = vf_zero();
      float tail = 0.0f;
      for (size_t f = 0; f < m; f += ATTN_VL) {
        const size_t w = m - f < ATTN_VL ? m - f : ATTN_VL;
        const vf e = attn_vexp_(vf_sub(vf_load_w(ur + f, w), mv));
        if (w == ATTN_VL) {
          sv = vf_add(sv, e);
        } else { /* lanes past the row hold exp(0 - max): leave them out */
          float t[ATTN_VL];
          vf_store(t, e);
          for (size_t i = 0; i < w; i++) tail += t[i];
        }
      }
      const vf inv = vf_set1(1.0f / (vf_hsum(sv) + tail));
      for (size_t f = 0; f < m; f += ATTN_VL) {
        const size_t w = m - f < ATTN_VL ? m - f : ATTN_VL;
        const vf x = vf_load_w(ur + f, w), z = vf_load_w(run + f, w);
        const vf p = vf_div(vf_mul(attn_vexp_(vf_sub(x, mv)), inv), z);
        /* a feature no visible key has (z = 0) contributes nothing */
        vf_store_strided(orow + f * out_cs, out_cs, vf_fma(x, vf_zero(), vf_select(vf_eq(z, vf_zero()), vf_zero(), p)),
                         w);
      }
    }
  }
}

void ATTN_EXPFEAT_NAME(attn_expfeat_mode mode, size_t rows, size_t m, const float *u, size_t ldu, const float *kin,
                       size_t ldk, float *run, const float *c, float *out, size_t out_rs, size_t out_cs) {
  if (mode == ATTN_EXPF_MAX) {                             /* one vector maximum over the rows, one horizontal step */
    vf mv = vf_set1(-INFINITY), m1 = mv, m2 = mv, m3 = mv; /* four chains: vf_max's latency */
    float mx = run[0];
    for (size_t r = 0; r < rows; r++) {
      const float *ur = u + r * ldu;
      size_t f = 0;
      for (; f + 4 * ATTN_VL <= m; f += 4 * ATTN_VL) {
        mv = vf_max(mv, vf_add(vf_load(ur + f), vf_load(c + f)));
        m1 = vf_max(m1, vf_add(vf_load(ur + f + ATTN_VL), vf_load(c + f + ATTN_VL)));
        m2 = vf_max(m2, vf_add(vf_load(ur + f + 2 * ATTN_VL), vf_load(c + f + 2 * ATTN_VL)));
        m3 = vf_max(m3, vf_add(vf_load(ur + f + 3 * ATTN_VL), vf_load(c + f + 3 * ATTN_VL)));
      }
      for (; f + ATTN_VL <= m; f += ATTN_VL) mv = vf_max(mv, vf_add(vf_load(ur + f), vf_load(c + f)));
      for (; f < m; f++) {
        const float t = ur[f] + c[f];
        mx = t > mx ? t : mx;
      }
    }
    const float t = vf_hmax(vf_max(vf_max(mv, m1), vf_max(m2, m3)));
    run[0] = t > mx ? t : mx;
    return;
  }
  if (mode == ATTN_EXPF_RANGE) { /* a strip of features at a time, down the rows */
    const vf big = vf_set1(FLT_MAX), nbig = vf_set1(-FLT_MAX), inf = vf_set1(INFINITY), ninf = vf_set1(-INFINITY);
    for (size_t f = 0; f < m; f += ATTN_VL) {
      const size_t w = m - f < ATTN_VL ? m - f : ATTN_VL;
      vf hi = vf_load_w(run + f, w), lo = out ? vf_load_w(out + f, w) : inf;
      for (size_t r = 0; r < rows; r++) {
        const vf x = vf_load_w(u + r * ldu + f, w);
        hi = vf_max(hi, vf_select(vf_ge(big, x), x, ninf)); /* +inf and NaN fail: -inf */
        lo = vf_min(lo, vf_select(vf_ge(x, nbig), x, inf)); /* -inf and NaN fail: +inf */
      }
      vf_store_w(run + f, hi, w);
      if (out) vf_store_w(out + f, lo, w);
    }
    return;
  }
  /* A transposed output (out_rs == 1: the intra product's phi(Q)^T) takes ATTN_VL rows at a time
   * row-major on the stack, then stores them through vector transposes, not lane by lane. */
  if (out_rs == 1 && out_cs != 1 && m <= ATTN_TR_TILE_COLS) {
    float t[ATTN_VL * ATTN_TR_TILE_COLS];
    for (size_t r0 = 0; r0 < rows; r0 += ATTN_VL) {
      const size_t nr = rows - r0 < ATTN_VL ? rows - r0 : ATTN_VL;
      attn_expfeat_rows_(mode, nr, m, u + r0 * ldu, ldu, kin ? kin + r0 * ldk : NULL, ldk,
                         mode == ATTN_EXPF_SCALED ? run + r0 : run, c, t, m, 1);
      attn_tr_block_(ATTN_TR_COPY, m, nr, 1, out + r0, out_cs, t, m, 0);
    }
    return;
  }
  attn_expfeat_rows_(mode, rows, m, u, ldu, kin, ldk, run, c, out, out_rs, out_cs);
}
