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
 * bounds leave a margin of about 2x or more). gcc 12 -O2, seeds fixed. x86-64 native: AVX2
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
 *   linear.window 3.13e-07 [0.15]    3.13e-07 [0.15]    3.13e-07 [0.15]  (windows, 0.3.0: ~5.2u)
 *   window exp.o  1.45e-05 [0.47]    1.45e-05 [0.49]    1.45e-05 [0.47]  (stress: features to +-150)
 *     no stress   1.86e-06 [0.14]    1.86e-06 [0.13]    1.86e-06 [0.14]
 *   window fav.o  2.10e-05 [0.21]    1.38e-05 [0.20]    2.10e-05 [0.22]  (stress)
 *     no stress   1.06e-05 [0.07]    1.06e-05 [0.07]    1.06e-05 [0.07]
 *   window dsm.o  7.06e-06 [0.27]    7.06e-06 [0.45]    7.06e-06 [0.45]  (stress)
 *     no stress   1.70e-06 [0.09]    1.70e-06 [0.09]    1.70e-06 [0.09]
 *   exp.o         1.51e-05 [0.35]    1.51e-05 [0.37]    1.51e-05 [0.35]  (stress: features to +-150)
 *     no stress   1.75e-06 [0.12]    1.75e-06 [0.12]    1.75e-06 [0.12]  (wide and large data)
 *   exp.state     5.06e-07 [0.29]    5.51e-07 [0.26]    5.51e-07 [0.26]
 *   favor.o       1.76e-05 [0.17]    2.37e-05 [0.15]    1.76e-05 [0.17]  (stress)
 *     no stress   1.55e-05 [0.07]    1.55e-05 [0.09]    1.55e-05 [0.07]  (|x'|^2 / 2 of wide data)
 *   favor.state   2.93e-05 [0.25]    2.94e-05 [0.25]    2.93e-05 [0.25]  (in the library's offsets)
 *   dsoftmax.o    3.00e-07 [0.14]    3.36e-07 [0.15]    3.00e-07 [0.14]
 *   dsoftmax.st.  3.82e-07 [0.26]    3.82e-07 [0.26]    3.82e-07 [0.26]
 * x86-64 figures of the 0.2.0 suites (chunk-local masks, separate key / value heads and linear
 * scales included; the exponential maps and the windows: 0.3.0, gcc 12 -O3 release build); the
 * unit-data rows were measured on the 0.1 suites, as was aarch64 under qemu-user (NEON native,
 * AVX2 emulated), whose maxima matched x86-64 within 2e-6. The window row's bracket is over the
 * reference comparisons and the library-vs-library ones (each against twice the bound) alike.
 * The 2e-5 of softmax comes from the large-logit cases (|s| ~ 95 with scale 1): there the fp32
 * logits themselves carry ~1e-5 relative error, which the bound accounts for through sabs.
 * K and V stored as fp16 / bf16 (tests/ops/check_kv_half.c, 0.6.0): the reference reads the
 * rounded values (the tests' own rounding, tests/common/half_ref.h) as doubles, and the bounds are
 * the fp32 ones above, factor 1, unchanged: the library converts every half value exactly (each is
 * a float), so a half call rounds exactly where the fp32 call on the rounded values does; the
 * suite also requires that fp32 call's result bit for bit (NaN as NaN). The rounding of the inputs
 * to half precision is not an error of the library and is outside every bound. Observed (gcc 12,
 * x86-64, emulation build): err/scale <= 2.1e-07 [0.11] for softmax.o, 6.3e-07 [0.19] lse, 2.7e-07
 * [0.08] gau.o, 1.8e-07 [0.06] selective.o, 2.9e-07 [0.06] selective.lse, on every path.
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

/* Sums of EQUAL terms (inputs of repeated values, as fuzzers make them: tests/fuzz only). The
 * GEMM sums each output along k in one FMA chain and a state sums its tokens one chunk after the
 * other; equal terms round the same way over long stretches of such a chain, so their errors add
 * up instead of growing as sqrt(n): 124 equal terms err by up to 31.5u (13u on average) in one
 * FMA chain (a simulation), and an output is the ratio of two sums (phi.S / phi.z). fuzz_linear
 * found a call at 50u against a bound of 49.9u (exp map, d = 124, one key: every term of both
 * sums equal) and a state at 36u against 28u (FAVOR+, 200 equal keys summed one by one). The
 * fuzz harness adds n / 2 u for sums of n terms; the Check suites' random inputs round with random
 * signs and keep the bounds above. */
#define TOL_EQ 0.5
static inline double tol_equal_terms(size_t n) { return TOL_U * TOL_EQ * (double)n; }

static inline double tol_linear_o(size_t n_tokens, size_t m) {
  return TOL_U * (TOL_LIN_C0 + TOL_LIN_CN * sqrt((double)n_tokens) + TOL_LIN_CM * sqrt((double)m));
}

/* State S (and z), scale |S0| + sum_j |psi_jp| |v_jc|: a sum of n_tokens products. */
static inline double tol_linear_state(size_t n_tokens) {
  return TOL_U * (TOL_LIN_C0 + TOL_LIN_CN * sqrt((double)n_tokens));
}

/* ------------------------------------------------------------------------------------------ */
/* Windowed linear attention (a mask neither full nor causal), element-wise maps: the blocked     */
/* engine of softmax attention with the scores s_ij = phi(q_i) . psi(k_j) (one GEMM dot product of */
/* length m = d per pair, fp32), acc_i = sum_j s_ij v_j and den_i = sum_j s_ij over the visible   */
/* keys of each key block, accumulated block after block, then o = s acc / (s den + eps). The    */
/* reference's scale is the one of the other linear modes (A_c un-normalised, (A_c + |o_c| B) /  */
/* |phi.z + eps| normalised, over the visible keys): every rounding is of a term of those         */
/* magnitudes. tol_linear_o applies as it is, with n the keys behind the sums (at most n_kv; the */
/* tests pass n_kv):                                                                           */
/* - C0: the feature map (elu1's exp, 4u), the scale and the eps, the reciprocal, the product by  */
/*   it and the output rounding;                                                                  */
/* - CM sqrt(m): each score is a dot product of length m, a relative error of ~sqrt(m) u in every */
/*   term of both sums (random signs, as the suites' every dot product);                           */
/* - CN sqrt(n): the sums over the visible keys, blocked (within a block by the GEMM, across      */
/*   blocks one addition per block), at most one rounding per key, ~sqrt(n) in practice.          */
/* A comparison of two library results (a window that bounds nothing vs the chunkwise call,       */
/* pieces vs one call) allows each its bound (TOL_PROPERTY_FACTOR).                               */
/* Exponential maps with a window (exp, favor, dsoftmax; 0.4.0): tol_linear_xp_o below, with the  */
/* reference's argument scales (its offsets: the maxima over the keys each row sees), n = n_kv    */
/* and m the feature size (report families linear.window.exp.o, .favor.o and .dsoftmax.o). The    */
/* engine forms each score as phi . psi with the key offsets of a sub-block (a boundary block is  */
/* cut where a feature's spread would pass ATTN_OFFSET_GUARD = 40) and each row's offset over the */
/* keys it sees, then rescales across blocks as softmax attention does: the error sources of the  */
/* chunkwise form, which CA already weighs. Its key offsets may exceed the reference's by up to   */
/* that guard (a key of the sub-block that the row cannot see): the stress test's key 30 above    */
/* the rest, in a sub-block that some rows of a query block see only in part, is the suite's      */
/* worst case (0.49 of its bound; a key 39 above makes the spread pass 40 and its sub-block be    */
/* cut: 0.43).                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------------------------ */
/* Linear attention, exponential maps (exp, favor, dsoftmax), exactly stabilised (attn.h): every */
/* term is exp(argument) with argument <= 0 against the row's own offsets. Two sources of error: */
/* - the sums, as for the elementwise maps (scale: oscale / sscale of the reference, the terms'   */
/*   magnitudes): a constant (exp's 4u for phi and for psi, the rescale exp(c - c') of S and z   */
/*   when a chunk raises an offset, the products, the division), sqrt(n) for the n tokens of the  */
/*   state, sqrt(m) for the feature sums;                                                        */
/* - the arguments: an exponent is formed from a few floats of its size (x', the offsets c, the   */
/*   row maximum; favor adds the float dot products W x' of length d and |x'|^2), so it carries   */
/*   an absolute error of a few u times their magnitudes, and exp turns that into the same       */
/*   RELATIVE error of its term. The reference weights every term by that magnitude g (|a| + |u| */
/*   + |c| + |M|, + sqrt(d) sum_t |W_ft x'_t| for favor: attn_ref.h) into oarg / sarg, so that     */
/*   oarg / oscale is the terms' weighted mean of g; the bound is                                 */
/*     tol = u (C0 + CN sqrt(n) + CM sqrt(m) + CA * arg / scale)     (times scale).               */
/* The library's own offsets may exceed the reference's (a later key of the same chunk raises   */
/* them, by at most the 40 of its chunk-split guard): that adds to the arguments' magnitude; it */
/* shows only where the arguments are large already (the stress test's key 30 above the rest    */
/* in the middle of a chunk is the chunkwise worst case: 0.37 of its bound; windows: 0.49), so  */
/* CA covers it.                                                                                 */
/* Constants: C0 12 as for the elementwise maps (two exponentials of 4u each, the rescale, the   */
/* division and the output; the realised errors stay near 4u), CN = CM = 1 (random-walk sums:   */
/* the blocked sums observed stay well inside), CA = 2 (each exponent is at most two roundings   */
/* of magnitudes that g counts once; favor's dot products carry their sqrt(d) inside g).         */
/* FAVOR+ states: the library's offsets c_f come from its own float dot products, so a state is  */
/* compared through its offset-free sums: the expected S and z are re-expressed in the library's */
/* offsets (S exp(c - c_lib), in double) and the offset column itself within u (C0 + CA) times   */
/* |c| + the largest dot-product magnitude (tests/ops/check_linear.c, ln_state_rebase).          */
/* ------------------------------------------------------------------------------------------ */
#define TOL_LXP_C0 12.0
#define TOL_LXP_CN 1.0
#define TOL_LXP_CM 1.0
#define TOL_LXP_CA 2.0

static inline double tol_linear_xp_o(size_t n_tokens, size_t m, double scale, double arg) {
  const double base = TOL_LXP_C0 + TOL_LXP_CN * sqrt((double)n_tokens) + TOL_LXP_CM * sqrt((double)m);
  return TOL_U * (base + (scale > 0.0 ? TOL_LXP_CA * arg / scale : 0.0));
}

/* State S and z of the exponential maps: a sum of n_tokens terms (and the rescales); the offset
 * column is exact for exp and dsoftmax (its scale is 0) and, for favor, a float dot product away
 * (scale = arg = |c| + sqrt(d) (sum_t |W_ft k'_t| + |k'|^2 / 2): tol = u (C0 + ... + CA)). */
static inline double tol_linear_xp_state(size_t n_tokens, double scale, double arg) {
  const double base = TOL_LXP_C0 + TOL_LXP_CN * sqrt((double)n_tokens);
  return TOL_U * (base + (scale > 0.0 ? TOL_LXP_CA * arg / scale : 0.0));
}

/*
 * Gated linear attention (attn_linear_gated; tests/ops/check_linear_gates.c, tests/fuzz). Every
 * comparison is |got - expect| <= tol * scale with scale the reference's ERROR SCALE abs (sum of
 * the absolute values of the terms, tests/ref/ref_gated.h) and (tol_gated)
 *   tol = u (C0 + CN sqrt(n) + CM sqrt(m)) + (u (LOG log + STEP step) + tiny + floor) / abs
 * (a state: the same without the sqrt(m) term), u = 2^-24, n the tokens behind the result
 * (incoming state included), m = d the feature size, and log, step, tiny the reference's other
 * scales (the same terms weighted by their Lambda, by their gate applications, and the terms whose
 * decay is below FLT_MIN):
 *   - C0, CN, CM (TOL_GT_*): the bounds of ungated linear attention (above: TOL_LIN_C0 12,
 *     TOL_LIN_CN 1.5, TOL_LIN_CM 1.5, for the same reasons: the feature map, the output rounding,
 *     the division; state sums over n tokens; dot products of length m), plus 2 in the constant
 *     for the two products every gated term adds (by beta and by its decay).
 *   - LOG, per unit of Lambda: a decay is exp of a difference of chunk-local cumulative sums of
 *     log gates (spec section 4); an absolute error e of that argument is a relative error e of the
 *     decay. Lambda (ref_gated.h) bounds that error in units of u: the roundings of the partial
 *     sums between key and query (each at most u times a partial sum <= G(j) + L_jp; random-walk
 *     sum, sqrt(#additions), as the other suites), and the subtraction and the caller's own rounding
 *     of its log gates (Mamba2's fl(dt A): u/2 per unit of L_jp), the L_jp term.
 *   - STEP, per gate application: exp of a log gate or of a chunk's total decay (<= 4u, the
 *     library's documented exp) and the product by it (u). With a fixed gate (row stride 0) exp's
 *     error repeats with the same sign, so the steps count linearly (ref_gated.h: (p - j) /
 *     step_chunk + 2).
 *   - tiny (factor 1): a term whose decay is below FLT_MIN = 2^-126 may be lost whole (the
 *     library's exp gives 0 below e^-87.33); floor = TOL_GT_FLOOR e^TOL_GT_SPAN (n + m + 2): every
 *     rounding of a result in float's subnormal range errs by up to 2^-150 absolutely, not
 *     relatively (products of decays near e^-100 and sums of them), and a chunk's factored
 *     weights (attn.h: a key factor and a query factor while the chunk decays by at most e^-60;
 *     per-feature gates' block factors alike) hold a term up to e^60 below its value until the
 *     other factor restores it, so that rounding happens up to e^60 lower (a term of 1e-21
 *     beside a chunk decay of e^-59 came out 0: found by the fuzzer). Both matter only for
 *     sums that are themselves that small (below about 1e-19: features that vanish, beside
 *     strong decays). The floor errs the sums; a normalised output is their quotient, so it
 *     takes the floor times (1 + |o|) / |den + eps| (ref_gated_scales.floor): a numerator and a
 *     denominator of ~1e-42 (relu at d = 1, eps 0, gates of -20) gave an o of -9.37 that erred
 *     by 1.2e-4 relatively, and an eps of 1e-3 beside a denominator below 1 lifts an absolute
 *     floor the sums meet by up to 1 / eps (both found by the fuzzer:
 *     tests/fuzz/corpus/linear/subnormal-quotient*).
 * A comparison of two library results (decode vs prefill, pieces vs one call, per-feature vs
 * scalar gates, zero gates vs attn_linear) allows each its bound: TOL_PROPERTY_FACTOR (2) times
 * the bound, with the error model of the finer computation (step_chunk 1 when one side decodes
 * token by token).
 *
 * OBSERVED (ATTN_TEST_REPORT=1 prints "ATTN_ERR family isa max-err/scale max-err/bound what"):
 * gcc 12 -O3 (release), x86-64 native (AVX2 native, NEON through SIMDe), seeds fixed:
 *   family          scalar            avx2              neon
 *   gated.o         4.41e-07 [0.14]   8.11e-07 [0.23]   7.87e-07 [0.24]
 *   gated.state     6.38e-07 [0.15]   5.51e-07 [0.14]   6.38e-07 [0.14]
 *   gated.retnet    1.17e-07 [0.04]   1.36e-07 [0.05]   1.17e-07 [0.04]
 *   gated.mamba2    1.94e-07 [0.08]   1.94e-07 [0.07]   1.94e-07 [0.08]
 * (state err/scale leaves out elements of ~1e-45 whose terms the float exp flushed: there it
 * reaches 1, within the tiny and floor allowances.) Without the LOG and STEP terms every case
 * still passes, at most 0.29 of the remaining bound (neon): the library's exp is far inside its documented 4u,
 * and the chunk-local sums stay short; the two terms are the worst case that the documentation
 * allows, not what this build realises.
 */
#define TOL_GT_C0    14.0
#define TOL_GT_CN    1.5
#define TOL_GT_CM    1.5
#define TOL_GT_LOG   1.0
/* STEP: 5 (one exp, one product) until fuzz inputs (tests/fuzz/corpus/linear/factored-gate-steps*:
 * elu+1 at d = 1, normalised with eps, a scalar gate, 8 output heads of one
 * state head) erred by up to 1.044 of the bound: within a chunk a decay is applied as the
 * factored weights' two exps (the key's factor and the query's) and two products, 10. */
#define TOL_GT_STEP  10.0
#define TOL_GT_FLOOR 0x1p-149
#define TOL_GT_SPAN  60.0 /* the factored weights' span (attn.h, attn_linear_gated: e^60) */

/* The relative bound of one element (times abs gives the bound): n_tokens behind the result, m
 * the feature size (0 for a state: no dot product), abs, log, step, tiny and floor the element's
 * scales from the reference (ref_gated_scales; floor 1 for a state). */
static inline double tol_gated(size_t n_tokens, size_t m, double s_abs, double s_log, double s_step, double s_tiny,
                               double s_floor) {
  const double base = TOL_U * (TOL_GT_C0 + TOL_GT_CN * sqrt((double)n_tokens) + TOL_GT_CM * sqrt((double)m));
  const double subnormal = TOL_GT_FLOOR * exp(TOL_GT_SPAN) * (double)(n_tokens + m + 2) * s_floor;
  const double extra = TOL_U * (TOL_GT_LOG * s_log + TOL_GT_STEP * s_step) + s_tiny + subnormal;
  return base + (s_abs > 0.0 ? extra / s_abs : 0.0);
}

/* ------------------------------------------------------------------------------------------ */
/* GAU relu^2 attention (attn_gau; tests/ops/check_gau.c): o_ic = t_i sum_j r_ij^2 v_jc with      */
/* r = relu(x), x_ij = scale q_i . k_j + bias_ij, on the blocked engine of softmax attention (fp32 */
/* GEMM scores, the relu^2 step, fp32 GEMM of the weights by v, block after block). There is no  */
/* exp and no running maximum: an error of the score is not amplified, it moves its term by      */
/* 2 r |dx| |v| (first order). The reference (attn_ref.h, ref_gau) gives three error scales per   */
/* element, each a sum over the visible keys times t_i:                                          */
/*   oscale = sum_j r^2 |v|        the terms' magnitudes,                                        */
/*   oarg   = sum_j 2 r g |v|      g = |scale| sum_f |q_f k_f|: the score's error is a few u g,   */
/*   onear  = sum_j g^2 |v|        over the keys within 2^-10 g of the kink (x ~ 0): there the   */
/*                                 library's score may fall on the other side of 0, and the term */
/*                                 errs by up to e^2 (r <= e), not 2 r e;                        */
/* and the absolute bound is                                                                     */
/*   u (C0 + CN sqrt(n)) oscale + u E oarg + (u E)^2 onear,   E = CS sqrt(d) + CF,              */
/* - C0: relative roundings every term or the row carries once: the bias addition (u |x| = u r,  */
/*   twice that in r^2), the square, the product by v, t_i = 1 / count and the product by it,     */
/*   the additions of the per-block partial sums and the output;                                 */
/* - CN sqrt(n): the sum over the n visible keys (a GEMM within a key block, one addition per     */
/*   block across them; random-walk rounding, as for softmax);                                    */
/* - E: the score's own error in units of u g, the dot product of length d (sqrt(d): random       */
/*   signs, as every dot product of the suites) plus CF for the roundings every score carries    */
/*   whatever d is (the scale's product, q pre-scaled or the sum scaled; dominant at d = 1..4).   */
/* The constants are softmax's (TOL_SM_C0, TOL_SM_CN, TOL_SM_CS, TOL_SM_CF): the same engine and */
/* GEMM round the same products; relu^2 replaces exp (4u) by a square (u), which C0 keeps.       */
/* check_gau compares with scale = oscale and tol = bound / oscale (scale 1 and tol = bound where */
/* oscale is 0: only the near-kink term is left, and the report's err/scale is then absolute).   */
/* Library-vs-library properties (decode vs prefill, chunked prefill vs one call) allow each its */
/* bound: TOL_PROPERTY_FACTOR.                                                                   */
/* OBSERVED (ATTN_TEST_REPORT=1; gcc 12 -O3 release, x86-64: AVX2 native, NEON through SIMDe):   */
/*   family     scalar             avx2               neon                                       */
/*   gau.o      1.23e-04 [0.23]    1.66e-04 [0.23]    1.23e-04 [0.23]                             */
/*   gau.prop   1.86e-06 [0.08]    2.99e-05 [0.08]    3.92e-06 [0.08]   (vs twice the bound)     */
/* The err/scale maxima are elements whose terms sit near the kink (r small beside g: oarg and    */
/* onear dominate their bound); the largest shares come from normalised causal rows (positive     */
/* data d = 64, GQA d = 16); wide data, |x| ~ 1e3 and FLASH's 1/512 stay below 0.18.             */
/* ------------------------------------------------------------------------------------------ */
#define TOL_GAU_C0 8.0
#define TOL_GAU_CN 1.0
#define TOL_GAU_CS 1.0
#define TOL_GAU_CF 4.0

/* E: the score's error in units of u g (g = |scale| sum_f |q_f k_f|). */
static inline double tol_gau_score(size_t d) { return TOL_GAU_CS * sqrt((double)d) + TOL_GAU_CF; }

/* The absolute bound of one output element from the reference's scales, n the visible keys
 * behind the sum (at most n_kv: the tests pass n_kv). */
static inline double tol_gau_bound(size_t n, size_t d, double oscale, double oarg, double onear) {
  const double e = TOL_U * tol_gau_score(d);
  return TOL_U * (TOL_GAU_C0 + TOL_GAU_CN * sqrt((double)n)) * oscale + e * oarg + e * e * onear;
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

/* ------------------------------------------------------------------------------------------ */
/* Selective attention (attn_selective, attn_selcache_step; tests/ops/check_selective.c): softmax */
/* attention whose logits are s_pj - F_pj, F a float running sum of up to n relu'd float dot      */
/* products of head h_sel (tests/ref/ref_selective.h). The logit's error is therefore, in units   */
/* of u: E (g_pj + G_pj) (the dot product of the pair, g = |scale| sum |q k|, and the n dot       */
/* products behind F, G = their sum of g: relu is 1-Lipschitz; E = CS sqrt(d) + CF as softmax's)  */
/* plus (CN sqrt(n) + CF) F_pj (F's running sum, random-walk over its additions, and the         */
/* subtraction s - F). A logit error e_j moves o by sum_j p_j e_j (v_j - o): the reference weights */
/* each key's magnitudes by its probability (oarg, of, larg, lf), so a key that F has all but     */
/* masked (large F, tiny p_j) costs nothing. Bounds (absolute):                                   */
/*   o:   u ((C0 + CN sqrt(n) + CF sabs) oscale + E oarg + (CN sqrt(n) + CF) of)                 */
/*   lse: u (LSE_C0 + CN sqrt(n) + CF sabs + 2 |lse| + E larg + (CN sqrt(n) + CF) lf)           */
/*   f:   u ((CN sqrt(n) + 2) f + E fg)    (the column sums the call returns, fg = sum of g)      */
/* with softmax's constants (same engine, same exp) and n the tokens behind the result (a cache   */
/* step passes the tokens appended so far). Library-vs-library properties: TOL_PROPERTY_FACTOR.   */
/* ------------------------------------------------------------------------------------------ */
static inline double tol_selective_e(size_t d) { return TOL_SM_CS * sqrt((double)d) + TOL_SM_CF; }

static inline double tol_selective_o(size_t n, size_t d, double oscale, double sabs, double oarg, double of) {
  const double rn = sqrt((double)n);
  return TOL_U * ((TOL_SM_C0 + TOL_SM_CN * rn + TOL_SM_CF * sabs) * oscale + tol_selective_e(d) * oarg +
                  (TOL_SM_CN * rn + TOL_SM_CF) * of);
}

static inline double tol_selective_lse(size_t n, size_t d, double sabs, double lse, double larg, double lf) {
  const double rn = sqrt((double)n);
  return TOL_U * (TOL_LSE_C0 + TOL_SM_CN * rn + TOL_SM_CF * sabs + 2.0 * fabs(lse) + tol_selective_e(d) * larg +
                  (TOL_SM_CN * rn + TOL_SM_CF) * lf);
}

static inline double tol_selective_f(size_t n, size_t d, double f, double fg) {
  return TOL_U * ((TOL_SM_CN * sqrt((double)n) + 2.0) * fabs(f) + tol_selective_e(d) * fg);
}

/* ------------------------------------------------------------------------------------------ */
/* Per-row statistics (attn_softmax_stats, attn_gau_stats, attn_selective_stats;                 */
/* tests/ops/check_stats.c; 0.5.0). The library accumulates, per row and in fp32, W = sum w,     */
/* sum w^2 and L = sum w log w of its weights (softmax and selective: w = exp(s - M) relative to */
/* the running maximum, L = sum w (s - M) from exp's own argument, rescaled as M grows; GAU:     */
/* w = relu(x)^2, L through the library's log), then H = log W - L / W and S = W / sqrt(n W2) in  */
/* double. The test takes the reference weights w_j in double, in the same normalisation, with    */
/* each weight's absolute error bound dw_j from its variant's error model, and bounds:            */
/*   entropy (absolute): u (C0 + CN sqrt(n)) (1 + own) + sum_j dw_j / W (|log p_j| + H + 2)        */
/*   sparsity (relative): u (C0 + CN sqrt(n)) + sum_j dw_j (1 / W + w_j / W2)                      */
/* with p_j = w_j / W (at least dw_j / W where a weight may leave 0: GAU's kink) and               */
/* own = |log W| + sum_j p_j |log w_j|.                                                            */
/* - The first terms are the evaluation's own roundings: exp's 4u per weight (softmax; twice in   */
/*   w^2), log's 4u |log w| (GAU: own's second part), the rounding of s - M (u |s - M| relative,  */
/*   of size own), the rescales of e and l across key blocks (a few u each), the sums over the n   */
/*   visible keys (blocked: sqrt(n) u, as every sum of the suites) and the final log and          */
/*   division: C0 = 16 (twice softmax's 8: the entropy rounds two sums and a log).                */
/* - The second terms carry the weights' errors from the scores (first order): dH = -sum_j (log  */
/*   p_j + 1) dp_j and dp_j = dw_j / W - p_j dW / W give |dH| <= sum_j dw_j / W (|log p_j| + H +  */
/*   2); d log S = dW / W - dW2 / (2 W2) with dW2 = 2 sum w dw. Per variant:                     */
/*     softmax:   dw = w u tol_softmax_logit(d, sabs) (the logit's error: dot product, scale,   */
/*                s - M; sabs the row's largest |scale| sum |q k|);                              */
/*     selective: dw = w u (E (g + G) + (CN sqrt(n) + CF) F + CF sabs) (tol_selective_o's logit  */
/*                error of s - F: the pair's dot product g, the G of the dot products behind F,  */
/*                F's running sum and the subtraction);                                          */
/*     GAU:       dw = 2 r e + e^2 + 2u w with e = u tol_gau_score(d) g, r = sqrt(w) (the score's */
/*                error through the square, the kink where r < e, the bias addition).            */
/* Count is exact (an integer from the mask). Library-vs-library properties (decode vs prefill)  */
/* allow TOL_PROPERTY_FACTOR times the bound.                                                   */
/* OBSERVED (ATTN_TEST_REPORT=1; gcc 12, -O3 and -O0 alike; x86-64: AVX2 native, NEON through    */
/* SIMDe): the largest error (entropy absolute, sparsity relative) [its share of the bound]:     */
/*   family              scalar            avx2              neon                               */
/*   softmax entropy     3.44e-06 [0.037]  4.50e-06 [0.040]  3.44e-06 [0.037]                   */
/*   softmax sparsity    2.12e-06 [0.195]  2.64e-06 [0.177]  2.12e-06 [0.177]                   */
/*   gau entropy         4.16e-06 [0.087]  4.06e-06 [0.098]  4.16e-06 [0.087]                   */
/*   gau sparsity        5.07e-07 [0.120]  4.51e-07 [0.137]  5.07e-07 [0.120]                   */
/*   selective entropy   2.18e-06 [0.023]  3.24e-06 [0.023]  2.18e-06 [0.023]                   */
/*   selective sparsity  1.06e-06 [0.042]  2.25e-06 [0.046]  1.06e-06 [0.044]                   */
/* The entropy's bound is mostly its score term, the worst case of every logit erring by the     */
/* model's full amount in the direction that moves H; the realised errors are of random sign.    */
/* Dropping the rescale of e when the running maximum grows errs by 0.007 to 0.12 nats (caught). */
/* ------------------------------------------------------------------------------------------ */
#define TOL_ST_C0 16.0
#define TOL_ST_CN 1.0

static inline double tol_stats_base(size_t n) { return TOL_U * (TOL_ST_C0 + TOL_ST_CN * sqrt((double)n)); }
static inline double tol_stats_entropy(size_t n, double own, double wsens) {
  return tol_stats_base(n) * (1.0 + own) + wsens;
}
static inline double tol_stats_sparsity(size_t n, double ssens) { return tol_stats_base(n) + ssens; }

static inline double tol_stats_dw_softmax(double w, size_t d, double sabs) {
  return w * TOL_U * tol_softmax_logit(d, sabs);
}
static inline double tol_stats_dw_selective(double w, size_t n, size_t d, double g, double G, double F, double sabs) {
  return w * TOL_U * (tol_selective_e(d) * (g + G) + (TOL_SM_CN * sqrt((double)n) + TOL_SM_CF) * F + TOL_SM_CF * sabs);
}
static inline double tol_stats_dw_gau(double w, size_t d, double g) {
  const double e = TOL_U * tol_gau_score(d) * g;
  return 2.0 * sqrt(w) * e + e * e + 2.0 * TOL_U * w;
}

/* ------------------------------------------------------------------------------------------ */
/* Delta rule (attn_delta; tests/ops/check_delta.c): the library's fp32 chunkwise form (a unit-   */
/* lower-triangular solve per chunk, then GEMMs) or its fp32 recurrence (decode) against the      */
/* float64 token recurrence (tests/ref/ref_delta.h). Bound: |got - ref| <= tol_delta(d, C) scale  */
/* + TOL_DT_FLOOR with scale the reference's: column c of the state follows a map of 2-norm <=    */
/* the token's largest decay (I - beta k k^T is a contraction for beta |k|^2 in [0, 2]), so an     */
/* error made at one token only shrinks later; the scale sums, in quadrature over the tokens and  */
/* damped by the decays, the magnitudes each token rounds (|S~| (1 + G), G the chunk-local log-   */
/* gate sum whose rounding is a relative error of the decays, and |k| |delta|), times |scale| |q|  */
/* for an output. Per unit of that scale: C0 for the roundings every token makes whatever its    */
/* sizes (normalisation of q and k, the decay, beta, the subtraction, the update, the output),    */
/* CD sqrt(d) for the dot products of length d (S~^T k, S^T q, W S_0, K^T Delta), CC sqrt(C) for  */
/* the chunk's sums over up to C tokens (the forward substitution, T V, A Delta). CD and CC are   */
/* 1/2, not 1: the scale takes 2-norm products |q| |S[:, c]| (Cauchy-Schwarz), which exceed the    */
/* sums of |terms| a dot product's rounding is proportional to, and ignores the contraction.      */
/* FLOOR: a float exp flushes decays below e^-87.3 to 0, and subnormal products round absolutely  */
/* (gates of -60 and -200 per token).                                                            */
/* OBSERVED (ATTN_TEST_REPORT=1; gcc 12 -O2 debugoptimized, x86-64: AVX2 and AVX-512 native, NEON */
/* through SIMDe; default chunks 16 scalar and avx512, 12 avx2 and neon): largest err/scale [share */
/* of the bound]                                                                                 */
/*   family        scalar            avx2              avx512            neon                    */
/*   delta.o       1.38e-07 [0.29]   1.15e-07 [0.27]   1.34e-07 [0.28]   1.20e-07 [0.27]         */
/*   delta.state   5.75e-08 [0.12]   7.74e-08 [0.17]   5.75e-08 [0.12]   7.74e-08 [0.17]         */
/*   delta.long    7.34e-08 [0.12]   7.09e-08 [0.12]   7.07e-08 [0.12]   7.34e-08 [0.13]         */
/*   delta.prop    4.63e-08 [0.05]   4.17e-08 [0.05]   4.17e-08 [0.05]   5.83e-08 [0.06]         */
/* (delta.long: 4096 tokens, d 64; delta.prop: decode or pieces against one call, twice the bound) */
/* The largest shares are strong per-channel decays (-20 per token) and chunk 2 at d = 5, beta 2   */
/* and plain rows stay below 0.2: every case errs by ~1-2.5u of its scale.                       */
/* ------------------------------------------------------------------------------------------ */
#define TOL_DT_C0    4.0
#define TOL_DT_CD    0.5
#define TOL_DT_CC    0.5
#define TOL_DT_FLOOR 0x1p-110

static inline double tol_delta(size_t d, size_t chunk) {
  return TOL_U * (TOL_DT_C0 + TOL_DT_CD * sqrt((double)d) + TOL_DT_CC * sqrt((double)chunk));
}

#endif /* ATTN_TEST_TOLERANCES_H */
