/*
 * Recurrent linear-attention step and run of steps (contracts: attn_linear_step_fn and
 * attn_linear_recur_fn in core/ukernels.h), written once against the vf_* shim: one pass over the
 * state reads each element once for the output and, when kf is given, writes it once updated.
 * Include the path's vf_* shim, define ATTN_STEP_NAME and ATTN_RECUR_NAME, then include.
 */
#include "core/ukernels.h"

/* Column vectors per sweep down the state; a read-only sweep (no kf: the delta rule's u = S^T k,
 * the pass that brings a state in from memory) takes twice as many where the path has 32
 * registers, so that it reads whole rows of 128 floats in order (AVX-512: Gated DeltaNet's step,
 * 32 heads of 128 x 128, 1.17x; sweeps that update the state ran no faster so, from L2 slower;
 * measured: d258ed4). Columns do not depend on their sweep: the same bits. */
enum { ATTN_STEP_NV = 4 };

/* One sweep down the state over nv whole vectors of columns from c0 (nv a compile-time constant
 * after inlining, as decay: a test of g inside the inner loop made the plain step ~1.6x slower,
 * and per-vector tests of the columns left cost as much), and with t1 column ct (a row's tail; nv
 * may then be 0). With post (kf given), the output reads each row after its update (the run's
 * form): one load of each state vector, where reading the row before it for the output made the
 * compiler load it twice, once into each product (measured: 8a27730, +10%). */
static inline __attribute__((always_inline)) void attn_step_block_(size_t m, size_t c0, size_t nv, const float *qf,
                                                                   const float *kf, const float *va, float a, float *s,
                                                                   size_t lds, float *out, const float *g,
                                                                   const int decay, const int gs, const int post,
                                                                   const int t1, size_t ct) {
  vf acc[2 * ATTN_STEP_NV], vv[2 * ATTN_STEP_NV];
  for (size_t v = 0; v < nv; v++) {
    vv[v] = vf_load(va + c0 + v * ATTN_VL);
    acc[v] = post ? vf_zero() : vf_mul(vf_set1(a), vv[v]);
  }
  const float vt = t1 ? va[ct] : 0.0f;
  float at = post ? 0.0f : a * vt;
  for (size_t p = 0; p < m; p++) {
    float *row = s + p * lds + c0;
    const size_t gi = gs ? 0 : p; /* a scalar gate: one decay for every row */
    const float qs = qf[p], ks = kf ? kf[p] : 0.0f, gsc = decay ? g[gi] : 1.0f;
    const vf qp = vf_set1(qs), kp = vf_set1(ks), gp = vf_set1(gsc);
#pragma GCC unroll 8
    for (size_t v = 0; v < nv; v++) {
      float *sp = row + v * ATTN_VL;
      vf sv = vf_load(sp);
      if (!post) acc[v] = vf_fma(qp, sv, acc[v]);
      if (kf) {
        sv = vf_fma(kp, vv[v], decay ? vf_mul(gp, sv) : sv);
        vf_store(sp, sv);
      }
      if (post) acc[v] = vf_fma(qp, sv, acc[v]);
    }
    if (t1) { /* the tail column ct: one lane's roundings of the vector columns' */
      float *e = s + p * lds + ct;
      float sv = *e;
      if (!post) at = vf_fma1(qs, sv, at);
      if (kf) *e = sv = vf_fma1(ks, vt, decay ? gsc * sv : sv);
      if (post) at = vf_fma1(qs, sv, at);
    }
  }
  for (size_t v = 0; v < nv; v++) vf_store(out + c0 + v * ATTN_VL, acc[v]);
  if (t1) out[ct] = at;
}

/* The sweep, instantiated per decay and form: whole sweeps of ATTN_STEP_NV vectors, then one
 * vector at a time, then the last w mod ATTN_VL columns (a normalised state row is dv + 1 wide)
 * one at a time, each through scalar operations with one lane's roundings (vf_fma1: masked loads
 * and stores of a row's last element cost more, on AMD's cores above all, and so did whole-vector
 * operations on one lane there, 6% of a normalised step of 64; measured: 8a27730). */
static inline __attribute__((always_inline)) void attn_step_sweep_(size_t m, size_t w, const float *qf, const float *kf,
                                                                   const float *va, float a, float *s, size_t lds,
                                                                   float *out, const float *g, const int decay,
                                                                   const int gs, const int post) {
  const size_t full = w / ATTN_VL * ATTN_VL;
  /* one tail column after whole vectors (a normalised row of dv = a multiple of ATTN_VL: z) goes
   * with the last sweep, whose rows are then in L1: a sweep of its own read each row's line again
   * and ran its m FMAs as one chain alone (measured: b6c34a0) */
  const int fuse = full && w - full == 1;
  size_t c0 = 0;
  /* sweeps of nv_ vectors while whole ones fit, the last of them taking the fused column */
#define ATTN_STEP_SWEEPS_(nv_)                                                                 \
  do {                                                                                         \
    for (; c0 + (nv_)*ATTN_VL <= full; c0 += (nv_)*ATTN_VL) {                                  \
      if (fuse && c0 + (nv_)*ATTN_VL == full)                                                  \
        attn_step_block_(m, c0, nv_, qf, kf, va, a, s, lds, out, g, decay, gs, post, 1, full); \
      else                                                                                     \
        attn_step_block_(m, c0, nv_, qf, kf, va, a, s, lds, out, g, decay, gs, post, 0, 0);    \
    }                                                                                          \
  } while (0)
#if ATTN_VREGS >= 32
  if (!kf) ATTN_STEP_SWEEPS_(2 * ATTN_STEP_NV);
#endif
  ATTN_STEP_SWEEPS_(ATTN_STEP_NV);
  /* what is left of the whole vectors two at a time, then one: each sweep's sums are a chain of m
   * dependent FMAs per vector, so a sweep of one vector waits on its chain (per-feature gates,
   * against one vector a sweep: AVX-512 rows of 32 / 33 / 48 columns 1.49x / 1.70x / 1.23x,
   * AVX2 rows of 16 / 24 1.41x / 1.39x; a sweep of 3 as well made the whole sweeps 4-5% slower,
   * code size; measured: 409fde7) */
  ATTN_STEP_SWEEPS_(2);
  ATTN_STEP_SWEEPS_(1);
#undef ATTN_STEP_SWEEPS_
  /* the other tail columns, each a sweep of no vector and that one column */
  for (size_t c = fuse ? w : full; c < w; c++)
    attn_step_block_(m, 0, 0, qf, kf, va, a, s, lds, out, g, decay, gs, post, 1, c);
}

void ATTN_STEP_NAME(size_t m, size_t w, const float *qf, const float *kf, const float *va, float a, float *s,
                    size_t lds, float *out, const float *g) {
  if (kf && g)
    attn_step_sweep_(m, w, qf, kf, va, a, s, lds, out, g, 1, 0, 1);
  else if (kf)
    attn_step_sweep_(m, w, qf, kf, va, a, s, lds, out, NULL, 0, 0, 1);
  else
    attn_step_sweep_(m, w, qf, NULL, va, a, s, lds, out, NULL, 0, 0, 0);
}

void ATTN_RECUR_NAME(size_t n, size_t m, size_t w, const float *qf, const float *kf, const float *va, size_t ldv,
                     const float *g, int gscalar, float *s, size_t lds, float *out, size_t ldo) {
  for (size_t u = 0; u < n; u++) {
    const float *q = qf + u * m, *k = kf + u * m;
    if (g && gscalar)
      attn_step_sweep_(m, w, q, k, va + u * ldv, 0.0f, s, lds, out + u * ldo, g + u, 1, 1, 1);
    else if (g)
      attn_step_sweep_(m, w, q, k, va + u * ldv, 0.0f, s, lds, out + u * ldo, g + u * m, 1, 0, 1);
    else
      attn_step_sweep_(m, w, q, k, va + u * ldv, 0.0f, s, lds, out + u * ldo, NULL, 0, 0, 1);
  }
}
