/*
 * Float64 reference of delta-rule attention (attn_delta: DeltaNet, Gated DeltaNet, Kimi Delta
 * Attention; spec VARIANTS.md section 8), written from the TOKEN RECURRENCE of attn.h, naively: one
 * state S (d x dv doubles) per value head, updated token by token. No chunkwise form, no
 * triangular solve, no GEMM. It does not include <attn.h> (layouts are the reference's own type,
 * attn_ref.h); the suite binds a descriptor to a problem.
 *
 * Definition, per value head h (key head kh = h / (h_v / h_k)), token t:
 *   q, k  = the rows of key head kh, each divided by sqrt(sum x^2 + 1e-6) when qk_l2norm;
 *   S~    = D_t S_{t-1}: PLAIN D = I, SCALAR D = exp(g(t, h)) I, FEATURE D = diag(exp(g(t, h, f)));
 *   delta = beta(t, h) (v_t - S~^T k);   S_t = S~ + k delta^T;   o_t = scale S_t^T q.
 * Log gates at t rs + h hs (+ f for FEATURE), beta at t rs + h hs (ref_layout, row stride 0
 * repeats a row). The incoming state s0 is the library's float image [h_v][d][dv] (NULL: zeros).
 *
 * Non-finite inputs (attn.h's policy, applied explicitly rather than left to double arithmetic,
 * where inf - inf and 0 * inf would not give one NaN everywhere): a non-finite q at token t makes
 * o_t of the value heads reading that key head NaN; a non-finite k_t (key head kh) or v_t (value
 * head h) poisons head h from t on: its rows >= t and its later states are NaN; a non-finite
 * incoming state poisons its head from the start.
 *
 * ERROR SCALE. Column c of the state follows a linear map, S_t[:, c] = A_t S_{t-1}[:, c] +
 * beta k v_c with A_t = (I - beta k k^T) D_t, and ||A_t||_2 <= a_t = max_f exp(g(t, h, f)) when
 * 0 <= beta |k|^2 <= 2 (|k| = 1 with qk_l2norm; the suites keep |k| <= 1 without it). A rounding
 * error made at token t' reaches token t through A_t .. A_{t'+1}, so shrinks by the decays at
 * least. With rounding errors of random sign (the suites' convention, tolerances.h) they add in
 * quadrature:
 *   E2_t[c] = a_t^2 E2_{t-1}[c] + m_t[c]^2,  E2_0[c] = ||S0[:, c]||^2,
 *   m_t[c]  = ||S~[:, c]||_2 (1 + G_t) + ||k||_2 |delta_c|  (the magnitudes rounded at token t),
 *   G_t     = sum of max_f |g(t', h, f)| over the tokens t' within `chunk` - 1 of t on either side
 *             (any chunk that holds t): the chunk-local cumulative log gates B carry rounding
 *             errors of u |B| per addition, which become relative errors of the decays exp(B_r - B_c)
 *             of everything the state kept (S~), never of the token's own update (exp(0) is exact);
 * sscale_t[f][c] = sqrt(E2_t[c]) for every row f of column c, and the output's
 * oscale_t[c] = |scale| ||q||_2 sqrt(E2_t[c]) (Cauchy-Schwarz over the column's error, which also
 * bounds the dot product's own terms since ||S_t[:, c]|| <= m_t[c]). The tolerance (tolerances.h,
 * delta) is a multiple of u over these scales. The bound ignores the contraction of I - beta k k^T
 * (conservative for long sequences without decay).
 */
#ifndef ATTN_REF_DELTA_H
#define ATTN_REF_DELTA_H

#include <stddef.h>

#include "attn_ref.h"

typedef enum ref_delta_gate { REF_DELTA_PLAIN = 0, REF_DELTA_SCALAR = 1, REF_DELTA_FEATURE = 2 } ref_delta_gate;

typedef struct ref_delta_problem {
  size_t n, h_k, h_v, d, dv;
  const float *q, *k, *v;
  ref_layout lq, lk, lv;
  ref_delta_gate gate;
  const float *log_gate; /* SCALAR, FEATURE */
  ref_layout lg;
  const float *beta; /* never NULL */
  ref_layout lb;
  double scale;
  int qk_l2norm;
  const float *s0; /* incoming state [h_v][d][dv] floats; NULL: zeros */
  size_t chunk;    /* the error model's G window (the library's chunk); 0 is taken as 1 */
} ref_delta_problem;

/** Results; every pointer may be NULL. */
typedef struct ref_delta_out {
  double *o, *oscale; /* [n][h_v][dv] */
  double *s, *sscale; /* the state after the last token [h_v][d][dv] */
  /* the states after tokens after[i] (strictly increasing, < n): ck[i] at i h_v d dv */
  size_t count;
  const size_t *after;
  double *ck, *ckscale;
} ref_delta_out;

void ref_delta(const ref_delta_problem *p, const ref_delta_out *out);

#endif /* ATTN_REF_DELTA_H */
