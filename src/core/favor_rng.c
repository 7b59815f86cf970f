/*
 * The FAVOR+ random matrix W of a seed (the contract: include/attn.h, attn_linear_favor_matrix).
 * Portability is the point of this file: every value comes from integer operations and correctly
 * rounded IEEE double + - * / and sqrt, in a fixed order, evaluated in double (FLT_EVAL_METHOD 0)
 * and never contracted into FMA (src/meson.build builds this file alone with -ffp-contract=off;
 * the pragma below says the same to compilers that honour it). No other libm function enters: the
 * log of the Gaussian sampler is computed here. So a seed gives the same W bit for bit on every
 * platform and path; tests/check_internal.c pins golden bits, and CI checks them on AArch64.
 */
#include "core/favor_rng.h"

#include <float.h>

#if defined(__clang__) || !defined(__GNUC__) /* GCC ignores the pragma (with a warning): it has the flag */
#pragma STDC FP_CONTRACT OFF
#endif

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "favor_rng.c needs double expressions evaluated in double (x86-32: -msse2 -mfpmath=sse)"
#endif

/* ---- uniform numbers: xoshiro256** seeded by splitmix64 (Vigna's reference algorithms) ---- */
/* Gaussian pairs the sampler makes at a time (gaussian below). */
#define FAVOR_PAIRS 32

typedef struct favor_rng {
  uint64_t s[4];                  /* xoshiro256** state */
  double normal[2 * FAVOR_PAIRS]; /* Gaussians made ahead, handed out in order from `next` */
  size_t next;
} favor_rng;

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
  const uint64_t result = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return result;
}

/* The four state words are four successive splitmix64 outputs: splitmix64 is a bijection of its
 * counter, so they are distinct and the state is never the all-zero one xoshiro must avoid. */
static void rng_seed(favor_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
  r->next = 2 * FAVOR_PAIRS; /* none made yet */
}

/* Uniform in [0, 1): the top 53 bits, scaled exactly. */
static double uniform(favor_rng *r) { return (double)(xoshiro_next(r->s) >> 11) * 0x1p-53; }

/* ---- natural log ---- */
/*
 * x = 2^e m with m in [sqrt(1/2), sqrt(2)] (exact bit operations), f = m - 1 (exact: Sterbenz),
 * t = f / (2 + f) = (m - 1) / (m + 1), ln m = 2 atanh t = 2 t (1 + t^2/3 + t^4/5 + ...). With
 * |t| <= 0.1716, t^2 <= 0.0295 and the eleven terms up to t^22/23 leave a truncation below 1e-19
 * of the result. The sum is evaluated as fdlibm's e_log.c does (same identity, its order of
 * operations: 2t = f - t f = f - hfsq + t hfsq with hfsq = f^2/2, so the exact f comes first and
 * the rounded terms are at most a fifth of it), which keeps the error below 1 ulp; e ln 2 is added
 * with ln 2 split so that e * ln2_hi is exact for every exponent.
 */
double attn_favor_log(double x) {
  static const double ln2_hi = 0x1.62e42feep-1;       /* 6.93147180369123816490e-01, 32 significant bits */
  static const double ln2_lo = 0x1.a39ef35793c76p-33; /* ln 2 - ln2_hi */
  static const double sqrt2 = 0x1.6a09e667f3bcdp+0;   /* sqrt(2) rounded (up) */
  static const double c[11] = {2.0 / 3,  2.0 / 5,  2.0 / 7,  2.0 / 9,  2.0 / 11, 2.0 / 13,
                               2.0 / 15, 2.0 / 17, 2.0 / 19, 2.0 / 21, 2.0 / 23}; /* 2/(2k+1), k >= 1 */
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  int e = (int)(b >> 52) - 1023; /* x > 0: no sign bit */
  if ((b >> 52) == 0) {          /* subnormal: scale into the normal range (exact) */
    x *= 0x1p54;
    memcpy(&b, &x, sizeof b);
    e = (int)(b >> 52) - 1023 - 54;
  }
  b = (b & UINT64_C(0x000fffffffffffff)) | UINT64_C(0x3ff0000000000000); /* the mantissa, in [1, 2) */
  double m;
  memcpy(&m, &b, sizeof m);
  static const double halve[2] = {1.0, 0.5};
  const int big = m > sqrt2; /* into [sqrt(1/2), sqrt(2)] (exact), without a branch (half the time each way) */
  m *= halve[big];
  e += big;
  const double f = m - 1.0, t = f / (2.0 + f), z = t * t, hfsq = 0.5 * f * f;
  double p = c[10];
  for (int k = 9; k >= 0; k--) p = c[k] + z * p;
  const double r = z * p; /* 2 atanh(t) = 2t + t r */
  const double de = (double)e;
  return de * ln2_hi - ((hfsq - (t * (hfsq + r) + de * ln2_lo)) - f);
}

/* ---- standard Gaussians: Marsaglia's polar method ---- */
/*
 * The sequence: pairs of uniforms u then v mapped to [-1, 1), a pair with s = u^2 + v^2 >= 1 or
 * s == 0 rejected, and for each accepted one the two Gaussians u f, then v f, with
 * f = sqrt(-2 ln(s) / s). They are made FAVOR_PAIRS pairs at a time: first the accepted pairs
 * (the rejection branch-free: a pair is written, and kept by moving on past it), then their
 * factors in a loop with no branch and no dependence between pairs, so the pairs' logs overlap
 * (one at a time, each waited on its log's chain of eleven multiply-adds and a mispredicted
 * rejection). The same operations on the same uniforms: the same Gaussians, in the same order.
 */
static void rng_refill(favor_rng *r) {
  double u[FAVOR_PAIRS], v[FAVOR_PAIRS], s[FAVOR_PAIRS];
  for (size_t n = 0; n < FAVOR_PAIRS;) {
    const double a = 2.0 * uniform(r) - 1.0; /* u then v: separate statements fix the order of the draws */
    const double b = 2.0 * uniform(r) - 1.0;
    u[n] = a, v[n] = b, s[n] = a * a + b * b;
    n += (s[n] < 1.0) & (s[n] != 0.0);
  }
  for (size_t i = 0; i < FAVOR_PAIRS; i++) {
    const double f = sqrt(-2.0 * attn_favor_log(s[i]) / s[i]);
    r->normal[2 * i] = u[i] * f;
    r->normal[2 * i + 1] = v[i] * f;
  }
  r->next = 0;
}

static double gaussian(favor_rng *r) {
  if (r->next == 2 * FAVOR_PAIRS) rng_refill(r);
  return r->normal[r->next++];
}

static double sum_squares(const double *x, size_t n) {
  double s = 0;
  for (size_t k = 0; k < n; k++) s += x[k] * x[k];
  return s;
}

/* ---- the matrix ---- */
size_t attn_favor_scratch_doubles(size_t d) {
  size_t n;
  if (!attn_mul_ok(d, d, &n) || n > SIZE_MAX / sizeof(double)) return 0;
  return n;
}

/* Rows per group of the Gram-Schmidt below: that many independent sums in flight. */
#define FAVOR_GROUP 8

/* Row x minus its projection onto row y (one step of modified Gram-Schmidt): the dot product in
 * k order, then x[k] - dot y[k]. */
static void favor_project(double *restrict x, const double *restrict y, size_t d) {
  double dot = 0;
  for (size_t k = 0; k < d; k++) dot += x[k] * y[k];
  for (size_t k = 0; k < d; k++) x[k] -= dot * y[k];
}

/* favor_project of rows x, x + d, ... (FAVOR_GROUP of them) onto y, their sums interleaved: the
 * same operations in the same order for each row, so the same bits as one row at a time, but
 * eight dependency chains instead of one (the sums are bound by the adder's latency). */
static void favor_project_group(double *restrict x, const double *restrict y, size_t d) {
  const double *x0 = x, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d, *x4 = x3 + d, *x5 = x4 + d, *x6 = x5 + d,
               *x7 = x6 + d;
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0; /* in registers, not memory */
  for (size_t k = 0; k < d; k++) {
    const double yk = y[k];
    s0 += x0[k] * yk, s1 += x1[k] * yk, s2 += x2[k] * yk, s3 += x3[k] * yk;
    s4 += x4[k] * yk, s5 += x5[k] * yk, s6 += x6[k] * yk, s7 += x7[k] * yk;
  }
  const double dot[FAVOR_GROUP] = {s0, s1, s2, s3, s4, s5, s6, s7};
  for (size_t g = 0; g < FAVOR_GROUP; g++) {
    double *restrict xg = x + g * d;
    const double c = dot[g];
    for (size_t k = 0; k < d; k++) xg[k] -= c * y[k];
  }
}

/* The d orthonormal rows of a block, in q (d x d). Each row takes d Gaussians, is projected onto
 * every earlier row in order (modified Gram-Schmidt: each projection uses the row as the earlier
 * ones left it) and normalised; a row (nearly) in the span of the earlier ones is redrawn, and so
 * is an all-zero row (before == after == 0), which has no direction to normalise. That is the
 * definition; it runs FAVOR_GROUP rows at a time: a group's rows are drawn one after another (the
 * generator's state after each kept), projected together onto the rows before the group
 * (favor_project_group), then each onto the group's earlier rows in order and tested. A row that
 * fails ends the group there: the next group starts at it with the generator as its own draws
 * left it, which is where its redraw takes its Gaussians (the later rows' speculative draws are
 * dropped). So each row sees the draws and the operations of the row-at-a-time definition. */
static void favor_block(favor_rng *r, size_t d, double *q) {
  for (size_t i = 0; i < d;) {
    const size_t n = attn_min_sz(FAVOR_GROUP, d - i);
    favor_rng drawn[FAVOR_GROUP];
    double before[FAVOR_GROUP];
    for (size_t g = 0; g < n; g++) {
      double *x = q + (i + g) * d;
      for (size_t k = 0; k < d; k++) x[k] = gaussian(r);
      before[g] = sqrt(sum_squares(x, d));
      drawn[g] = *r;
    }
    for (size_t j = 0; j < i; j++) {
      if (n == FAVOR_GROUP)
        favor_project_group(q + i * d, q + j * d, d);
      else
        for (size_t g = 0; g < n; g++) favor_project(q + (i + g) * d, q + j * d, d);
    }
    size_t g = 0;
    for (; g < n; g++) {
      double *x = q + (i + g) * d;
      for (size_t j = i; j < i + g; j++) favor_project(x, q + j * d, d);
      const double after = sqrt(sum_squares(x, d));
      if (!(after >= 1e-3 * before[g] && after > 0)) break;
      for (size_t k = 0; k < d; k++) x[k] /= after;
    }
    if (g < n) *r = drawn[g]; /* row i + g is redrawn, from the draws after its own */
    i += g;
  }
}

void attn_favor_generate(size_t m, size_t d, uint64_t seed, int sqrt_d_norms, float *w, double *scratch) {
  favor_rng r;
  rng_seed(&r, seed);
  const double sqrt_d = sqrt((double)d);
  double *const q = scratch; /* the block's orthonormal rows, d x d */
  for (size_t b0 = 0; b0 < m; b0 += d) {
    const size_t rows = attn_min_sz(d, m - b0); /* the last block is cut here, after all its draws */
    /* Every row of the block, even past the cut: its redraws come before the norms' Gaussians. */
    favor_block(&r, d, q);
    /* The norms, one per row of the block (all d drawn, as documented, even when it is cut). */
    for (size_t i = 0; i < d; i++) {
      double norm = sqrt_d;
      if (!sqrt_d_norms) { /* chi with d degrees of freedom */
        double s = 0;
        for (size_t k = 0; k < d; k++) {
          const double g = gaussian(&r);
          s += g * g;
        }
        norm = sqrt(s);
      }
      if (i < rows)
        for (size_t k = 0; k < d; k++) w[(b0 + i) * d + k] = (float)(q[i * d + k] * norm);
    }
  }
}
