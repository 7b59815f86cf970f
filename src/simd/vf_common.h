/*
 * What every vector shim derives from its primitives; included at the end of each vf_*.h.
 * A shim whose element-wise arithmetic maps one-to-one onto intrinsics named after the
 * operation defines ATTN_VF_BINARY(op) (a definition of vf_<op>(a, b)) before including this, and
 * gets vf_add, vf_sub, vf_mul, vf_max and vf_min from it.
 */
#ifndef ATTN_VF_COMMON_H
#define ATTN_VF_COMMON_H

#ifdef ATTN_VF_BINARY
ATTN_VF_BINARY(add)
ATTN_VF_BINARY(sub)
ATTN_VF_BINARY(mul)
ATTN_VF_BINARY(max)
ATTN_VF_BINARY(min)
#endif

/* exp's scaling (simd/exp_tmpl.h), unless the shim has its own (ATTN_VF_EXP_SCALE): n from x
 * clamped below at lo (vf_pow2b needs n >= -126), then y 2^n where x >= lo (or NaN), +0 where
 * x < lo (n integral, in [-126, 127]; nb = n + 1.5 * 2^23, whose bits hold it). */
#ifndef ATTN_VF_EXP_SCALE
static inline vf vf_exp_nclamp(vf x, vf lo) { return vf_max(x, lo); }
static inline vf vf_exp_scale(vf y, vf n, vf nb, vf x, vf lo) {
  (void)n;
  return vf_select(vf_lt(x, lo), vf_zero(), vf_mul(y, vf_pow2b(nb)));
}
#endif

/* w (1 .. ATTN_VL) floats: a full vector, or the first w lanes with the rest 0 (never reading or
 * writing past p[w-1]). */
static inline vf vf_load_w(const float *p, size_t w) { return w == ATTN_VL ? vf_load(p) : vf_load_n(p, w); }
static inline void vf_store_w(float *p, vf v, size_t w) {
  if (w == ATTN_VL)
    vf_store(p, v);
  else
    vf_store_n(p, v, w);
}

/* w lanes to p[0], p[cs], p[2 cs], ...: a vector store when cs == 1 (rows of a row-major matrix),
 * lane by lane otherwise (a column of a transposed one). */
static inline void vf_store_strided(float *p, size_t cs, vf v, size_t w) {
  if (cs == 1) {
    vf_store_w(p, v, w);
  } else {
    float t[ATTN_VL];
    vf_store(t, v);
    for (size_t i = 0; i < w; i++) p[i * cs] = t[i];
  }
}

/* Its twin: w floats from p[0], p[cs], p[2 cs], ... (the rest 0): a vector load when cs == 1,
 * lane by lane otherwise. */
static inline vf vf_load_strided(const float *p, size_t cs, size_t w) {
  if (cs == 1) return vf_load_w(p, w);
  float t[ATTN_VL];
  for (size_t i = 0; i < w; i++) t[i] = p[i * cs];
  return vf_load_w(t, w);
}

/* Lane 0 (through memory: where it is used, once per row or per column). */
static inline float vf_first(vf a) {
  float t[ATTN_VL];
  vf_store(t, a);
  return t[0];
}

/* Largest lane (NaN lanes ignored unless lane 0 is NaN); once per row, so through memory. */
static inline float vf_hmax(vf a) {
  float t[ATTN_VL];
  vf_store(t, a);
  float m = t[0];
  for (size_t i = 1; i < ATTN_VL; i++) m = t[i] > m ? t[i] : m;
  return m;
}

#endif
