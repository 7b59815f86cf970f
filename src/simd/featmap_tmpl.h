/*
 * Element-wise feature maps (contract: attn_featmap_fn in core/ukernels.h), written once against
 * the vf_* shim. Include the path's shim, define ATTN_FEATMAP_NAME, then include.
 */
#include "core/ukernels.h"
#include "simd/exp_tmpl.h"
#include "simd/transpose_tmpl.h"

/* Every map gives NaN for a non-finite input: y + 0 * x is y for finite x and NaN for an infinite
 * or NaN x (one FMA), so a NaN or an infinity in q or k reaches every output that uses it as NaN. */
static inline vf attn_featmap_apply_(attn_feature_map map, vf x) {
  vf y;
  switch (map) {
    case ATTN_FEATURE_ELU1:
      y = vf_select(vf_ge(x, vf_zero()), vf_add(x, vf_set1(1.0f)), attn_vexp_(x));
      break;
    case ATTN_FEATURE_RELU:
      y = vf_max(x, vf_zero()); /* a NaN x gives 0 here on x86; the FMA below makes it NaN */
      break;
    case ATTN_FEATURE_IDENTITY:
    default:
      y = x;
      break;
  }
  return vf_fma(x, vf_zero(), y);
}

/* Instantiated twice (input scale or not, a compile-time constant after inlining), so the plain
 * maps pay no multiply and no test in their loop. */
static inline __attribute__((always_inline)) void attn_featmap_rows_(attn_feature_map map, size_t rows, size_t cols,
                                                                     float a, const int scaled, const float *in,
                                                                     size_t in_rs, float *out, size_t out_rs,
                                                                     size_t out_cs) {
  const vf av = vf_set1(a);
  for (size_t r = 0; r < rows; r++) {
    const float *x = in + r * in_rs;
    float *y = out + r * out_rs;
    for (size_t c = 0; c < cols; c += ATTN_VL) {
      const size_t w = cols - c < ATTN_VL ? cols - c : ATTN_VL;
      const vf xv = vf_load_w(x + c, w);
      const vf fx = attn_featmap_apply_(map, scaled ? vf_mul(av, xv) : xv);
      vf_store_strided(y + c * out_cs, out_cs, fx, w);
    }
  }
}

static inline __attribute__((always_inline)) void attn_featmap_scaled_(attn_feature_map map, size_t rows, size_t cols,
                                                                       float a, const float *in, size_t in_rs,
                                                                       float *out, size_t out_rs, size_t out_cs) {
  if (a == 1.0f)
    attn_featmap_rows_(map, rows, cols, 1.0f, 0, in, in_rs, out, out_rs, out_cs);
  else
    attn_featmap_rows_(map, rows, cols, a, 1, in, in_rs, out, out_rs, out_cs);
}

/* The map as a constant in each loop too (GCC does not unswitch it: the switch ran once per
 * vector, 9 instructions of the identity map's ~50 per vector on the AVX2 path). */
static void attn_featmap_any_(attn_feature_map map, size_t rows, size_t cols, float a, const float *in, size_t in_rs,
                              float *out, size_t out_rs, size_t out_cs) {
  switch (map) {
    case ATTN_FEATURE_ELU1:
      attn_featmap_scaled_(ATTN_FEATURE_ELU1, rows, cols, a, in, in_rs, out, out_rs, out_cs);
      break;
    case ATTN_FEATURE_RELU:
      attn_featmap_scaled_(ATTN_FEATURE_RELU, rows, cols, a, in, in_rs, out, out_rs, out_cs);
      break;
    default:
      attn_featmap_scaled_(ATTN_FEATURE_IDENTITY, rows, cols, a, in, in_rs, out, out_rs, out_cs);
      break;
  }
}

void ATTN_FEATMAP_NAME(attn_feature_map map, size_t rows, size_t cols, float a, const float *in, size_t in_rs,
                       float *out, size_t out_rs, size_t out_cs) {
  /* A transposed output (out_rs == 1: the intra product's phi(Q)^T) takes ATTN_VL rows at a time
   * row-major on the stack, then stores them through vector transposes, not lane by lane. */
  if (out_rs == 1 && out_cs != 1 && cols <= ATTN_TR_TILE_COLS) {
    float t[ATTN_VL * ATTN_TR_TILE_COLS];
    for (size_t r0 = 0; r0 < rows; r0 += ATTN_VL) {
      const size_t nr = rows - r0 < ATTN_VL ? rows - r0 : ATTN_VL;
      attn_featmap_any_(map, nr, cols, a, in + r0 * in_rs, in_rs, t, cols, 1);
      attn_tr_block_(ATTN_TR_COPY, cols, nr, 1, out + r0, out_cs, t, cols, 0);
    }
    return;
  }
  attn_featmap_any_(map, rows, cols, a, in, in_rs, out, out_rs, out_cs);
}
