/*
 * exp(x) on a vector, written once against the vf_* shim (included by the kernel templates).
 *
 * Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, with ln2 split in two (C1 exact in
 * 9 bits, so n*C1 is exact for |n| <= 2^15), then e^r by a polynomial of degree 6, then scaling
 * by 2^n (vf_exp_scale: the exponent field, or AVX-512's vscalefps). n comes from x clamped to
 * [lo, hi] (so the integer conversion never sees NaN or a huge value, whatever vf_min/vf_max do
 * with NaN on a path; AVX-512 clamps to hi only: vscalefps takes any n, and its zero mask clears
 * the lanes below lo), but r from x itself, so a NaN input stays NaN and values above hi overflow
 * to +inf through the arithmetic, at no extra cost.
 * What is asserted (tests/check_internal.c, every path):
 *   x in [-87.33, 88.375]: relative error at most 2^-22 against double exp (2 ulp of the result
 *                          just above a power of two, up to 4 ulp just below the next one);
 *   x < -87.3365 (and -inf): +0;   x >= 89 (and +inf): +inf;   NaN: NaN.
 * Between 88.375 and 89 the result is approximate (r leaves the reduced range); the library only
 * takes exp of arguments <= 0, or < 0 in its feature maps. The log below is its companion.
 */
#ifndef ATTN_EXP_TMPL_H
#define ATTN_EXP_TMPL_H

/* exp(x), and in *xc the argument n is taken from, x clamped to [-87.3365, 88.375]: where the
 * result is not 0, xc is x itself (for x <= 88.375), so y * xc is exactly the product x exp(x)
 * of the result, and 0 where the result underflows (x < -87.3365 or -inf: xc stays finite). The
 * streamed statistics use it for sum p (s - m) at no extra cost; attn_vexp_ drops it (and the
 * compiler the lower clamp with it on AVX-512). nonpos (a constant): the caller's x is <= 0 or
 * NaN (softmax's s - max), so the upper clamp is left out. Operations per vector: the clamp
 * (none with nonpos), n (2: the rounding as the sum with 1.5 * 2^23, one FMA and a subtraction,
 * where vroundps / vrndscaleps take 2 uops on Intel cores), r (2), e^r (6 FMAs), the scaling
 * (vf_exp_scale; AVX-512: vscalefps under the comparison's mask, 2; the other paths: 6 with the
 * lower clamp: 2^n from nb's bits in 2, a product and a select on the comparison). */
static inline __attribute__((always_inline)) vf attn_vexp_core_(vf x, vf *xc_out, int nonpos) {
  const vf lo = vf_set1(-87.3365478515625f);              /* just above ln(FLT_MIN): 2^n stays normal */
  const vf xh = nonpos ? x : vf_min(x, vf_set1(88.375f)); /* n <= 127: 2^n stays finite */
  const vf magic = vf_set1(12582912.0f);                  /* exact integers up to 2^22 in magnitude */
  const vf nb = vf_fma(vf_exp_nclamp(xh, lo), vf_set1(1.44269504088896341f), magic), n = vf_sub(nb, magic);
  vf r = vf_fma(n, vf_set1(-0.693359375f), x);
  r = vf_fma(n, vf_set1(2.12194440e-4f), r);
  /* e^r = 1 + r p(r) on |r| <= ln2 / 2, p of degree 5 by Horner: coefficients fitted for the
   * least largest relative error of e^r (a weighted least-squares fit iterated to minimax: 2^-28.9
   * before rounding; 2^-23.4 in float arithmetic over every 7th float of [-87.33, 88.375] against
   * double exp, against 2^-23.0 for the Cephes degree-7 form 1 + r + r^2 P(r) it replaced, two
   * operations longer) */
  vf p = vf_set1(1.384361531e-03f);
  p = vf_fma(p, r, vf_set1(8.374197409e-03f));
  p = vf_fma(p, r, vf_set1(4.166800529e-02f));
  p = vf_fma(p, r, vf_set1(1.666643023e-01f));
  p = vf_fma(p, r, vf_set1(4.999999404e-01f));
  p = vf_fma(p, r, vf_set1(1.0f));
  const vf y = vf_fma(p, r, vf_set1(1.0f));
  *xc_out = vf_max(xh, lo);
  return vf_exp_scale(y, n, nb, x, lo);
}

static inline __attribute__((always_inline)) vf attn_vexp_xc_(vf x, vf *xc_out) {
  return attn_vexp_core_(x, xc_out, 0);
}

/* exp(x) for x <= 0 or NaN (softmax: a logit less its row's running max), one operation shorter. */
static inline __attribute__((always_inline)) vf attn_vexp_np_xc_(vf x, vf *xc_out) {
  return attn_vexp_core_(x, xc_out, 1);
}
static inline vf attn_vexp_np_(vf x) {
  vf xc;
  return attn_vexp_np_xc_(x, &xc);
}

static inline vf attn_vexp_(vf x) {
  vf xc;
  return attn_vexp_xc_(x, &xc);
}

/*
 * log(x) for positive normal x; finite for 0 and subnormals (GAU's statistics multiply it by the
 * weight: 0 log 0 = 0), unspecified for other inputs. x = z 2^k with z in [0.6992, 1.3984)
 * (vf_logsplit: integer operations only), then log z = 2 atanh(s) with s = (z - 1) / (z + 1) in
 * [-0.178, 0.166] (z - 1 exact), 2 atanh(s) = 2s + s^3 P(s^2), P the series' next four terms
 * (2/3, 2/5, 2/7, 2/9: the first left out is below 2^-30 of the result), then k ln2 in one FMA
 * (float's ln2 is 1.7e-9 off: below 2^-27 of |log x| >= 0.336 where k != 0). Asserted (tests/check_internal.c,
 * every path): relative error at most 2^-22 against double log over the positive normal floats;
 * log 1 = 0 exactly. About a dozen operations and one division per vector.
 */
static inline __attribute__((always_inline)) vf attn_vlog_(vf x) {
  vf k;
  const vf z = vf_logsplit(x, &k), one = vf_set1(1.0f);
  const vf s = vf_div(vf_sub(z, one), vf_add(z, one)), t = vf_mul(s, s);
  vf p = vf_fma(vf_set1(2.0f / 9.0f), t, vf_set1(2.0f / 7.0f));
  p = vf_fma(p, t, vf_set1(2.0f / 5.0f));
  p = vf_fma(p, t, vf_set1(2.0f / 3.0f));
  return vf_fma(k, vf_set1(0.693147182f), vf_fma(vf_mul(s, t), p, vf_add(s, s)));
}

#endif
