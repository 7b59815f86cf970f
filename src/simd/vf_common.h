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

/* Rounding to fp16 and bf16 (the f32_f16_cvt / f32_bf16_cvt kernels, simd/cvt_tmpl.h): ATTN_VL
 * floats into ATTN_VL 16-bit patterns at p, to nearest, ties to even, written once on the shim's
 * 32-bit integer lanes (vu_*: lanes below 2^31 compare alike signed or not). A NaN keeps its sign
 * and its payload's leading bits and is made quiet, as F16C's and NEON's conversions do, so a shim
 * with its own instruction (ATTN_VF_TO_F16) gives the same bits. fp16, per |x| (a = its bits):
 *   a < 2^-14 (subnormal or zero):  |x| + 0.5 rounds |x| to a multiple of 2^-24 in the float
 *                                   addition itself (the default rounding mode), and the sum's low
 *                                   bits are that multiple (F. Giesen's method);
 *   2^-14 <= a < 65520:             rebias the exponent (127 -> 15) and round the 13 dropped bits
 *                                   in integers: + 0xfff, + the kept lowest bit (ties to even);
 *                                   a carry moves into the exponent, as it should;
 *   65520 (the midpoint above 65504) <= a <= inf: infinity;  NaN: 0x7e00 | the fraction's top
 *                                   10 bits. */
#ifndef ATTN_VF_TO_F16
static inline void vf_to_f16(uint16_t *p, vf x) {
  const vu u = vu_of(x), a = vu_and(u, vu_set1(0x7fffffffu));
  const vu sub = vu_add(vu_of(vf_add(vf_of(a), vf_set1(0.5f))), vu_set1(0u - 0x3f000000u));
  const vu odd = vu_and(vu_srl(a, 13), vu_set1(1u));
  const vu nrm = vu_srl(vu_add(vu_add(a, vu_set1(0xfffu - 0x38000000u)), odd), 13);
  vu h = vu_gt_select(vu_set1(0x38800000u), a, sub, nrm);
  h = vu_gt_select(a, vu_set1(0x477fefffu), vu_set1(0x7c00u), h);
  h = vu_gt_select(a, vu_set1(0x7f800000u), vu_or(vu_and(vu_srl(a, 13), vu_set1(0x3ffu)), vu_set1(0x7e00u)), h);
  vu_store_u16(p, vu_or(h, vu_and(vu_srl(u, 16), vu_set1(0x8000u))));
}
#endif
/* bf16: the upper half of the float rounded on the lower (+ 0x7fff, + the kept lowest bit; a
 * carry into the exponent is right, up to infinity), except NaN: its upper half made quiet (a
 * rounding carry could turn it into infinity). No ISA of the paths has a bf16 conversion in its
 * flags (AVX-512 BF16 is not AVX-512F), so every path uses this. */
static inline void vf_to_bf16(uint16_t *p, vf x) {
  const vu u = vu_of(x), a = vu_and(u, vu_set1(0x7fffffffu)), hi = vu_srl(u, 16);
  const vu r = vu_srl(vu_add(vu_add(u, vu_set1(0x7fffu)), vu_and(hi, vu_set1(1u))), 16);
  vu_store_u16(p, vu_gt_select(a, vu_set1(0x7f800000u), vu_or(hi, vu_set1(0x40u)), r));
}

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

/* One lane of vf_fma on floats, its roundings, unless the shim has a scalar instruction
 * (ATTN_VF_FMA1). */
#ifndef ATTN_VF_FMA1
static inline float vf_fma1(float a, float b, float c) { return vf_first(vf_fma(vf_set1(a), vf_set1(b), vf_set1(c))); }
#endif

/* Largest lane (NaN lanes ignored unless lane 0 is NaN); once per row, so through memory. */
static inline float vf_hmax(vf a) {
  float t[ATTN_VL];
  vf_store(t, a);
  float m = t[0];
  for (size_t i = 1; i < ATTN_VL; i++) m = t[i] > m ? t[i] : m;
  return m;
}

/* CALL(S, LDS, MASKED, STATS) with MASKED and STATS compile-time constants (0 or 1) for the four
 * cases of (masked, stats != NULL), S and LDS stats and lds, or NULL and 0 without: an always-
 * inlined score body specialised four ways, each without the branches it does not need. */
#define ATTN_SPECIALISE4(masked, stats, lds, CALL)                                                                     \
  do {                                                                                                                 \
    if ((stats) && (masked))                                                                                           \
      CALL(stats, lds, 1, 1);                                                                                          \
    else if (stats)                                                                                                    \
      CALL(stats, lds, 0, 1);                                                                                          \
    else if (masked)                                                                                                   \
      CALL(NULL, 0, 1, 0);                                                                                             \
    else                                                                                                               \
      CALL(NULL, 0, 0, 0);                                                                                             \
  } while (0)

/* One rank-1 update of a tile of accumulators, the inner step of the GEMM and few_scores_wide
 * tiles: acc[r][v] += a(r) b[v] for r < nr rows and v < nv vectors, a(r) a scalar (an expression
 * of r_, broadcast once per row), b the row's nv vectors. Constant nr and nv unroll it whole and
 * keep acc in registers. */
#define ATTN_VF_RANK1(acc, nr, nv, a_of_r_, b)                                              \
  _Pragma("GCC unroll 16") for (size_t r_ = 0; r_ < (nr); r_++) {                          \
    const vf a_ = vf_set1(a_of_r_);                                                        \
    _Pragma("GCC unroll 16") for (size_t v_ = 0; v_ < (nv); v_++) {                        \
      (acc)[r_][v_] = vf_fma(a_, (b)[v_], (acc)[r_][v_]);                                  \
    }                                                                                      \
  }

#endif
