/*
 * exp(x) on a vector, written once against the vf_* shim (included by the kernel templates).
 *
 * Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, with ln2 split in two (C1 exact in
 * 9 bits, so n*C1 is exact for |n| <= 2^15), then e^r = 1 + r + r^2 P(r), P of degree 5 (the
 * Cephes expf coefficients), then scaling by 2^n built in the exponent field.
 * Domain: x in [-87.33, 88]: relative error below 2 ulp (tests assert 2^-22 against double exp
 * over the whole range). x < -87.33 (including -inf) gives +0; x > 88 saturates at exp(88).
 * NaN is not an expected input (callers mask with -inf).
 */
#ifndef ATTN_EXP_TMPL_H
#define ATTN_EXP_TMPL_H

static inline vf attn_vexp_(vf x) {
  const vf lo = vf_set1(-87.3365478515625f); /* just above ln(FLT_MIN): 2^n stays normal */
  const vmask under = vf_lt(x, lo);
  x = vf_max(vf_min(x, vf_set1(88.0f)), lo);
  const vf n = vf_round(vf_mul(x, vf_set1(1.44269504088896341f)));
  vf r = vf_fma(n, vf_set1(-0.693359375f), x);
  r = vf_fma(n, vf_set1(2.12194440e-4f), r);
  vf p = vf_set1(1.9875691500e-4f);
  p = vf_fma(p, r, vf_set1(1.3981999507e-3f));
  p = vf_fma(p, r, vf_set1(8.3334519073e-3f));
  p = vf_fma(p, r, vf_set1(4.1665795894e-2f));
  p = vf_fma(p, r, vf_set1(1.6666665459e-1f));
  p = vf_fma(p, r, vf_set1(5.0000001201e-1f));
  const vf y = vf_fma(p, vf_mul(r, r), vf_add(r, vf_set1(1.0f)));
  return vf_select(under, vf_zero(), vf_mul(y, vf_pow2i(n)));
}

#endif
