/*
 * Error bounds of the attn test suites, each against the float64 reference (tests/ref).
 *
 * Every bound has the form |got - ref| <= tol * scale, where `scale` is an ERROR SCALE computed by
 * the reference in double (a sum of absolute values of the terms that are rounded, see
 * attn_ref.h) and `tol` is a multiple of the fp32 unit roundoff u = 2^-24 ~ 5.96e-8 that grows
 * with the sizes as rounding errors do: sqrt(n) for sums of n terms (random-sign rounding errors
 * add like a random walk; blocked and chunked summation keeps the worst case far from n*u),
 * sqrt(d) for dot products of length d, and |s| for large logits (exp(s - M) turns an absolute
 * logit error of |s| * O(u) into a relative one). The library's exp has relative error <= 2^-22 = 4u,
 * which is inside the constant terms.
 *
 * OBSERVED (ATTN_TEST_REPORT=1 prints one line per comparison): the largest err/scale over the
 * whole suite, and in brackets the largest err/bound (how much of its bound a case used; the
 * bounds leave a margin of about 2.4x or more). gcc 12 -O2, seeds fixed. x86-64 native: AVX2
 * native, NEON emulated by SIMDe (SSE2).
 *
 *   family        scalar             avx2               neon
 *   softmax.o     2.33e-05 [0.27]    1.80e-05 [0.26]    2.33e-05 [0.27]
 *     unit data   2.70e-07           2.80e-07           2.80e-07         (no large logits, scale <= 1)
 *   softmax.lse   3.30e-05 [0.33]    2.54e-05 [0.27]    3.30e-05 [0.33]  (absolute, nats)
 *     unit data   6.11e-07           6.78e-07           6.67e-07
 *   softmax exp   1.94e-07 [0.41]    1.94e-07 [0.41]    1.94e-07 [0.41]  (~3.3u: exp within 2^-22 = 4u)
 *   merge.o       1.09e-07 [0.15]    1.09e-07 [0.15]    1.09e-07 [0.15]
 *   merge.lse     7.96e-08 [0.09]    7.96e-08 [0.09]    7.96e-08 [0.09]
 *   linear.o      3.43e-07 [0.13]    3.92e-07 [0.12]    3.43e-07 [0.13]
 *   linear.state  5.34e-07 [0.28]    5.34e-07 [0.22]    5.34e-07 [0.25]
 *   linear elu1   1.15e-07 [0.39]    1.15e-07 [0.39]    1.15e-07 [0.39]  (~1.9u)
 * x86-64 figures of the 0.2.0 suites (chunk-local masks, separate key / value heads and linear
 * scales included); the unit-data rows were measured on the 0.1 suites, as was aarch64 under
 * qemu-user (NEON native, AVX2 emulated), whose maxima matched x86-64 within 2e-6.
 * The 2e-5 of softmax comes from the large-logit cases (|s| ~ 95 with scale 1): there the fp32
 * logits themselves carry ~1e-5 relative error, which the bound accounts for through sabs.
 */
#ifndef ATTN_TEST_TOLERANCES_H
#define ATTN_TEST_TOLERANCES_H

#include <math.h>
#include <stddef.h>

/** fp32 unit roundoff 2^-24. */
#define TOL_U (1.0 / 16777216.0)

/* ------------------------------------------------------------------------------------------ */
/* Softmax attention: o_i = sum_j p_ij v_j, scale_ic = sum_j p_ij |v_jc| (>= |o_ic|).          */
/* ------------------------------------------------------------------------------------------ */
/* Constant part: exp (<= 4u per weight), the final division by L and the output rounding,
 * the online rescaling exp(M - M') once per key block (a few u each). */
#define TOL_SM_C0 8.0
/* Summation of the n_kv weighted values and of L in fp32, blocked: ~sqrt(n_kv) * u. */
#define TOL_SM_CN 1.0
/* Logit error: s_ij = scale * q.k in fp32 carries up to ~d * u * sum_t |q_t k_t| of rounding
 * (~sqrt(d) * u * that with rounding errors of random sign); a perturbation ds_j of the logits
 * moves o by at most 2 max|ds| * sum_j p_j |v_j| (the weight itself and the normaliser), and
 * exp(s - M) rounds s - M to u * |s - M| <= 2u * sabs. sabs is the per-row max of
 * |scale| * sum_t |q_t k_t| (~95 in the large-logit cases). The term used is
 * (sqrt(d) + TOL_SM_CF) * u * sabs: sqrt(d) for the dot product, and TOL_SM_CF for the roundings
 * every logit carries whatever d is (q * scale, the product, s - M in exp's argument), which
 * dominate at d = 1..4 (the fuzzer reached the sqrt(d)-only bound at d = 1, scale -16). The
 * realised errors of the suites stay below 0.4 of the whole bound. */
#define TOL_SM_CS 1.0
#define TOL_SM_CF 4.0

static inline double tol_softmax_logit(size_t d, double sabs) {
  return (TOL_SM_CS * sqrt((double)d) + TOL_SM_CF) * sabs;
}
static inline double tol_softmax_o(size_t n_kv, size_t d, double sabs) {
  return TOL_U * (TOL_SM_C0 + TOL_SM_CN * sqrt((double)n_kv) + tol_softmax_logit(d, sabs));
}

/* LSE = M + log L, absolute error: the logit error of M (same term as above), the relative error
 * of L (log turns it into an absolute one: same constant and sqrt(n_kv) terms), and the final
 * rounding of a value of size |lse| (2u|lse|). */
#define TOL_LSE_C0 16.0 /* the log adds its own few ulp of a value up to ~|lse| */
static inline double tol_softmax_lse(size_t n_kv, size_t d, double sabs, double lse) {
  return TOL_U * (TOL_LSE_C0 + TOL_SM_CN * sqrt((double)n_kv) + tol_softmax_logit(d, sabs) + 2.0 * fabs(lse));
}

/* ------------------------------------------------------------------------------------------ */
/* Merge: o = sum_c w_c o_c / W. The reference's scale already carries the (1 + |lse_c - M|)     */
/* sensitivity of w_c = exp(lse_c - M) (the fp32 subtraction rounds x to u|x|, exp multiplies  */
/* that into a relative error of the weight) and the |o_c| + |o| of the quotient; what is left */
/* is exp's 4u, the division, and two roundings per part (the weight sum and the output are     */
/* sums over the parts; the fuzzer reached a parts-independent 6u with 8 parts).               */
/* ------------------------------------------------------------------------------------------ */
static inline double tol_merge_o(size_t parts) { return TOL_U * (6.0 + 2.0 * (double)parts); }
/* lse = M + log W: scale 1 + |lse| + sum_c w_c |x_c| / W, same terms. */
static inline double tol_merge_lse(size_t parts) { return TOL_U * (4.0 + 2.0 * (double)parts); }

/* ------------------------------------------------------------------------------------------ */
/* Linear attention. Scale (reference): A_c = sum_p |phi_p| (|S0_pc| + sum_j |psi_jp| |v_jc|)  */
/* un-normalised, (A_c + |o_c| B) / |phi.z + eps| normalised: both the chunkwise form (S built  */
/* by n_kv rank-1/rank-C updates, then phi^T S) and the intra-chunk form (phi.psi then times v)  */
/* round terms of exactly these magnitudes.                                                    */
/* ------------------------------------------------------------------------------------------ */
/* Feature map (elu1: exp <= 4u, x + 1 one rounding), output rounding, the division. */
#define TOL_LIN_C0 12.0
/* State accumulation over n tokens (prefix included): sequential across chunks, so up to one
 * rounding per token in the worst case, ~sqrt(n) in practice. */
#define TOL_LIN_CN 1.5
/* Dot products of length m (phi.psi within a chunk, phi^T S across). */
#define TOL_LIN_CM 1.5

static inline double tol_linear_o(size_t n_tokens, size_t m) {
  return TOL_U * (TOL_LIN_C0 + TOL_LIN_CN * sqrt((double)n_tokens) + TOL_LIN_CM * sqrt((double)m));
}

/* State S (and z), scale |S0| + sum_j |psi_jp| |v_jc|: a sum of n_tokens products. */
static inline double tol_linear_state(size_t n_tokens) {
  return TOL_U * (TOL_LIN_C0 + TOL_LIN_CN * sqrt((double)n_tokens));
}

/* ------------------------------------------------------------------------------------------ */
/* exp itself, read through the public API (sweeps over its whole argument range). The library   */
/* documents and asserts a relative error of at most 2^-22 = 4u (2 to 4 ulp of the result).      */
/* ------------------------------------------------------------------------------------------ */
/* Softmax with logits {0, x}: o = e^x / (1 + e^x) relative to |o| (= its scale): 4u of exp, one
 * rounding each for 1 + e^x, the reciprocal, the product and the output. */
#define TOL_EXP_SWEEP_SOFTMAX (8.0 * TOL_U)
/* Linear elu1 with psi = 1, v = 1: o = phi(q) relative to |o|: 4u of exp (x + 1: one rounding). */
#define TOL_EXP_SWEEP_ELU1 (5.0 * TOL_U)

/* ------------------------------------------------------------------------------------------ */
/* Properties compare two library results (e.g. decode vs prefill), each within its bound of  */
/* the reference: by the triangle inequality they differ by at most twice the bound.            */
/* ------------------------------------------------------------------------------------------ */
#define TOL_PROPERTY_FACTOR 2.0

#endif /* ATTN_TEST_TOLERANCES_H */
