/*
 * White-box tests of the micro-kernels and CPU detection, per ISA path (ATTN_ISA picks the path;
 * exit 77 = SKIP when it cannot run here; the main, RNG and guard zones come from tests/common).
 * Every kernel is compared with a double-precision loop written here, on edge shapes, with guard
 * zones around every output: a kernel must write only its output elements (including the padding
 * between rows, which it must leave alone).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/favor_rng.h"
#include "core/internal.h"
#include "half_ref.h"
#include "harness.h"

static const struct attn_ukernels *uk;
static tu_rng rng; /* seeded once before the tests fork: every test sees the same sequence */
static float frand(void) { return tu_rng_range(&rng, -1.0f, 1.0f); }
/* n floats between guard zones (harness.h); gcheck_free asserts the zones intact, then frees. */
static float *galloc(size_t n) { return tu_alloc(n * sizeof(float), 0); }
static void gcheck_free(float *p) {
  tu_assert_guards("kernel output", p);
  tu_free(p);
}

/* ---- CPU detection: the decoder on values recorded from real and emulated CPUs ---- */
START_TEST(cpu_decode_recorded) {
  /* AMD EPYC (Zen 3, this project's CI machine): AVX2 + FMA, OS saves YMM. */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xd, 0xfffa3203, 0x219c07ab, 0x7), ATTN_CPU_X86_AVX2_FMA);
  /* qemu -cpu Haswell */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xd, 0xfed83203, 0x3a9, 0x7), ATTN_CPU_X86_AVX2_FMA);
  /* qemu -cpu SandyBridge: AVX but no FMA / AVX2 */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xd, 0x9e982203, 0x0, 0x7), 0);
  /* qemu -cpu Nehalem: no AVX, no OSXSAVE */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xb, 0x80982201, 0x0, 0x0), 0);
  /* Haswell bits but the OS does not save YMM state (XCR0 = x87 | SSE) */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xd, 0xfed83203, 0x3a9, 0x3), 0);
  /* Haswell bits with OSXSAVE cleared: XCR0 must not be trusted */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xd, 0xfed83203 & ~(1u << 27), 0x3a9, 0x7), 0);
  /* leaf 7 not reported: its register contents are meaningless */
  ck_assert_uint_eq(attn_cpu_decode_x86(0x6, 0xfed83203, 0x3a9, 0x7), 0);
  /* FMA bit alone missing */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xd, 0xfed83203 & ~(1u << 12), 0x3a9, 0x7), 0);
  /* ... without F16C (K/V stored as fp16 need vcvtph2ps on the AVX2 path): no AVX2 path. */
  ck_assert_uint_eq(attn_cpu_decode_x86(0xd, 0xfed83203 & ~(1u << 29), 0x3a9, 0x7), 0);
  /* AMD EPYC (Zen 4, family 25 model 17, KVM guest): AVX-512 F/DQ/BW/VL, OS saves opmask and ZMM */
  ck_assert_uint_eq(attn_cpu_decode_x86(0x1c, 0xfffa3203, 0xf1bf07ab, 0xe7),
                    ATTN_CPU_X86_AVX2_FMA | ATTN_CPU_X86_AVX512);
  /* the same CPU under an OS that saves YMM but not ZMM state: AVX2 only */
  ck_assert_uint_eq(attn_cpu_decode_x86(0x1c, 0xfffa3203, 0xf1bf07ab, 0x7), ATTN_CPU_X86_AVX2_FMA);
  /* AVX-512F without BW (Knights Landing-like leaf 7): not the AVX-512 the paths need */
  ck_assert_uint_eq(attn_cpu_decode_x86(0x1c, 0xfffa3203, 0xf1bf07ab & ~(1u << 30), 0xe7), ATTN_CPU_X86_AVX2_FMA);
}
END_TEST

START_TEST(cpu_detect_consistent) {
  int native = -1;
  const int avail = attn_isa_available(uk->isa, &native);
  ck_assert_int_eq(avail, 1);
#if defined(ATTN_TEST_EMULATION) /* every path but scalar through SIMDe, on any CPU */
  ck_assert_int_eq(native, uk->isa == ATTN_ISA_SCALAR);
#elif defined(__x86_64__) || defined(__i386__)
  const uint32_t f = attn_cpu_features();
  const int has = (f & ATTN_CPU_X86_AVX2_FMA) != 0;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_AVX2, NULL), has);
  ck_assert_int_eq(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), has);
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_AVX512, NULL), (f & ATTN_CPU_X86_AVX512) != 0);
  if (f & ATTN_CPU_X86_AVX512) ck_assert(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"));
  ck_assert_int_eq(native, uk->isa == ATTN_ISA_NEON ? 0 : 1);
#elif defined(__aarch64__)
  ck_assert_int_eq(native, uk->isa == ATTN_ISA_AVX2 || uk->isa == ATTN_ISA_AVX512 ? 0 : 1);
#endif
}
END_TEST

/* ---- exp: relative error bound over the whole domain, and its edges ---- */
/* Bound: relative error 2^-22 against double exp over [-87.33, 88.375]. In ulps of the result that
 * is 2 ulp just above a power of two and up to 4 ulp just below the next one (an ulp is 2^-23 of
 * the binade's lower end). The measured maximum is asserted, not printed. */
static const double EXP_RTOL = 2.384185791015625e-07; /* 2^-22 */
START_TEST(vexp_error_bound) {
  enum { N = 1 << 16 };
  float *x = malloc(N * sizeof(float)), *y = galloc(N);
  double worst = 0;
  float worst_x = 0, worst_y = 0;
  for (int pass = 0; pass < 40; pass++) {
    const double lo = -87.33, hi = 88.375;
    for (int i = 0; i < N; i++) x[i] = (float)(lo + (hi - lo) * ((double)(pass * N + i) / (40.0 * N - 1)));
    uk->vexp(N, x, y);
    for (int i = 0; i < N; i++) { /* one assertion after the sweep: each ck_assert costs a syscall */
      const double rel = fabs((double)y[i] - exp((double)x[i])) / exp((double)x[i]);
      if (!(rel <= worst)) {
        worst = rel;
        worst_x = x[i];
        worst_y = y[i];
      }
    }
  }
  ck_assert_msg(worst <= EXP_RTOL, "exp(%.9g) = %.9g, rel error %.3g", worst_x, worst_y, worst);
  ck_assert(worst > 0); /* the comparison really ran */
  gcheck_free(y);
  free(x);
}
END_TEST

START_TEST(vexp_edges) {
  const float in[] = {0.0f,    -0.0f,  1.0f,    -1.0f,    -87.33f,   88.375f, /* finite results */
                      -87.34f, -88.0f, -100.0f, -1e30f,   -INFINITY,          /* +0 */
                      89.0f,   100.0f, 1e30f,   INFINITY,                     /* +inf */
                      NAN,     -NAN};                                         /* NaN */
  const size_t n = sizeof in / sizeof in[0];
  float *y = galloc(n);
  uk->vexp(n, in, y);
  ck_assert_float_eq(y[0], 1.0f);
  ck_assert_float_eq(y[1], 1.0f);
  ck_assert(fabs(y[2] - M_E) <= 1e-6);
  for (size_t i = 3; i < 6; i++)
    ck_assert_msg(fabs(y[i] - exp((double)in[i])) <= EXP_RTOL * exp((double)in[i]), "exp(%g) = %g", in[i], y[i]);
  for (size_t i = 6; i < 11; i++) ck_assert_msg(y[i] == 0.0f, "exp(%g) = %g, want 0", in[i], y[i]);
  for (size_t i = 11; i < 15; i++) ck_assert_msg(y[i] == INFINITY, "exp(%g) = %g, want inf", in[i], y[i]);
  for (size_t i = 15; i < n; i++) ck_assert_msg(isnan(y[i]), "exp(NaN) = %g, want NaN", y[i]);
  gcheck_free(y);
}
END_TEST

/* ---- logit options: the soft cap c tanh(x / c) and ALiBi, in place, against double ---- */
/* The cap's bound: |error| <= 2^-20 c. tanh = 1 - 2 / (e + 1) with e = exp(2x / c): exp's 2^-22
 * relative error moves 2 / (e + 1) by at most 2^-22 * 2e / (e + 1)^2 <= 2^-23; the sum, quotient
 * and difference round by at most 2^-23 each (values up to 2); the argument's two roundings (2 / c,
 * the product) move tanh by at most 2^-23 |y| sech^2 y <= 2^-24; the final product by c, 2^-24 c.
 * About 5.5 x 2^-23 c in all; 8 x 2^-23 asserted. ALiBi adds s (j + d0 - t), whose distance is an
 * exact integer: one multiply-add, or a product and a sum where the path has no FMA, so at most
 * 2^-23 (|x'| + |s dist|) beyond the capped x' (2^-22 asserted). Widths 1 .. 67 (every vector
 * tail) over 3 or 37 rows, contiguous or spaced ld = nq + 5 apart: the gaps between rows and the
 * guard zones stay as they were, and non-finite values stay (the cap) or take the sum (ALiBi:
 * -inf stays -inf). */
START_TEST(logit_opts_values) {
  static const float caps[] = {30.0f, 1.0f, 0.37f, 1e-3f, 5e4f, 0.0f};
  enum { N = 67, GAP = 5 };
  for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++)
    for (int alibi = 0; alibi < 2; alibi++) {
      const float c = caps[ci];
      const int64_t d0 = alibi ? (int64_t)ci * 37 - 90 : 0;
      for (size_t nq = 1; nq <= N; nq++) {
        /* 3 or 37 key rows (a narrow block goes down its columns, a vector of keys at a time);
         * rows apart, or contiguous (the cap alone then runs as one loop) */
        const size_t nk = nq % 2 ? 3 : 37, ld = nq + (nq % 4 < 2 ? GAP : 0), len = (nk - 1) * ld + nq;
        float *x = galloc(len), *in = malloc(len * sizeof(float)), sl[N], tk[N];
        for (size_t i = 0; i < nq; i++) sl[i] = tu_rng_range(&rng, -2.0f, 0.0f), tk[i] = (float)(i / 3);
        for (size_t i = 0; i < len; i++) { /* -4c .. 4c (-4 .. 4 without a cap), then the edges in turn */
          static const float edge[] = {INFINITY, -INFINITY, NAN, 1e30f, -1e30f, FLT_MAX, 0.0f, -0.0f};
          in[i] = i % 5 == 4 ? edge[(i / 5 + nq) % 8] : (c > 0.0f ? c : 1.0f) * tu_rng_range(&rng, -4.0f, 4.0f);
          x[i] = in[i];
        }
        uk->logit_opts(nk, nq, x, ld, c, alibi ? sl : NULL, tk, d0);
        for (size_t i = 0; i < len; i++) {
          const size_t j = i / ld, col = i % ld; /* ld >= nq: exact */
          if (col >= nq) {                       /* a gap between rows */
            ck_assert_msg(memcmp(&x[i], &in[i], sizeof x[i]) == 0, "cap %g: the gap at %zu changed", c, i);
            continue;
          }
          double want = in[i], add = 0.0;
          if (c > 0.0f && isfinite(in[i])) want = (double)c * tanh((double)in[i] / c);
          if (alibi) add = (double)sl[col] * ((double)(d0 + (int64_t)j) - (double)tk[col]);
          if (!isfinite(want)) {
            const double w2 = want + add;
            ck_assert_msg(isnan(w2) ? isnan(x[i]) : x[i] == w2, "cap %g: %g became %g", c, in[i], x[i]);
            continue;
          }
          const double bound = (c > 0.0f ? 0x1p-20 * c : 0.0) + (alibi ? 0x1p-22 * (fabs(want) + fabs(add)) : 0.0);
          ck_assert_msg(fabs((double)x[i] - (want + add)) <= bound,
                        "cap %g, alibi %d, x %.9g: %.9g, want %.9g (nq %zu, i %zu)", (double)c, alibi, (double)in[i],
                        (double)x[i], want + add, nq, i);
          if (c > 0.0f && !alibi)
            ck_assert_msg(fabsf(x[i]) <= c, "cap %g, x %.9g: %.9g beyond the cap", (double)c, (double)in[i],
                          (double)x[i]);
        }
        gcheck_free(x);
        free(in);
      }
    }
}
END_TEST

/* ---- transpose: rows of a matrix into a block's columns, copied or added ---- */
/* Bit for bit against the scalar loop (a copy, or one addition per element, with -inf turned into
 * NaN first or kept as it is whatever is added). Rows 1 .. 35 and columns 1 .. 37 (every tail of every path, tiles whole and
 * cut, blocks narrower than a vector), groups g = 1, 3 and 4, row and head strides 0 (broadcast)
 * or not, rows spaced ld = nq + 3 apart (the gaps stay), non-finite values on both sides, guard
 * zones around the block and the source (nothing past a column's nk floats). */
START_TEST(transpose_values) {
  enum { NQ = 37, GAP = 3 };
  static const size_t gs[] = {1, 3, 4};
  const size_t NK = 2 * 16 + 3; /* the widest path's 16 lanes */
  for (int mode = ATTN_TR_COPY; mode <= ATTN_TR_ADD_NAN_NINF; mode++)
    for (size_t gi = 0; gi < 3; gi++)
      for (int bc = 0; bc < 4; bc++)
        for (size_t nk = 1; nk <= NK; nk += 1 + (nk > 5))
          for (size_t nq = gs[gi]; nq <= NQ; nq += gs[gi]) {
            const size_t g = gs[gi], ld = nq + GAP, len = (nk - 1) * ld + nq;
            const size_t hs = bc & 1 ? 0 : nk + 2, rs = bc & 2 ? 0 : g * (nk + 2) + 1;
            const size_t blen = (nq / g - 1) * rs + (g - 1) * hs + nk;
            float *st = galloc(len), *want = malloc(len * sizeof(float)), *x = galloc(blen);
            for (size_t i = 0; i < blen; i++)
              x[i] = i % 11 == 7 ? (i % 3 ? -INFINITY : NAN) : tu_rng_range(&rng, -3.0f, 3.0f);
            for (size_t i = 0; i < len; i++)
              st[i] = want[i] = i % 13 == 5 ? (i % 2 ? INFINITY : -INFINITY) : tu_rng_range(&rng, -10.0f, 10.0f);
            for (size_t j = 0; j < nk; j++)
              for (size_t c = 0; c < nq; c++) {
                float *w = &want[j * ld + c];
                const float v = x[c / g * rs + c % g * hs + j];
                if (mode == ATTN_TR_ADD_MASKED && *w == -INFINITY) continue; /* hidden: stays */
                if (mode == ATTN_TR_ADD_NAN_NINF && *w == -INFINITY) *w = NAN;
                *w = mode == ATTN_TR_COPY ? v : *w + v;
              }
            uk->transpose((attn_transpose_mode)mode, nk, nq, g, st, ld, x, rs, hs);
            tu_assert_same_bits("transpose block", want, st, len * sizeof(float));
            gcheck_free(st);
            gcheck_free(x);
            free(want);
          }
}
END_TEST

/* ---- gate factors: exp of double differences, times x ---- */
/* y[r][f] = exp((float)(+-(a - c))) x against double: exp's 2^-22 relative bound plus one rounding
 * of the product by x (2^-24): 2^-21 asserted. The differences of large a and c (10^6 + small) tell
 * a difference taken in double from one of two floats (0.3 against 0.3125). Every tail of the
 * path's width, c and x NULL or not, y in place of x, guarded outputs. */
START_TEST(gate_exp_values) {
  enum { R = 3, M = 37 };
  double a[R * M], c[M];
  for (size_t f = 0; f < M; f++) c[f] = f % 3 ? 1e6 : tu_rng_range(&rng, -30.0f, 0.0f);
  for (size_t e = 0; e < R * M; e++) a[e] = c[e % M] + tu_rng_range(&rng, -20.0f, 20.0f) + 1e-3 * (double)(e % 7);
  for (size_t m = 1; m <= M; m++)
    for (int v = 0; v < 8; v++) { /* neg, c NULL, x NULL */
      const int neg = v & 1, has_c = v & 2, has_x = v & 4;
      float *y = galloc(R * m), x[R * M];
      for (size_t e = 0; e < R * m; e++) y[e] = x[e] = tu_rng_range(&rng, -2.0f, 2.0f);
      /* rows of lda = M doubles; y (and x) rows of m floats; with x, y is x (in place) */
      uk->gate_exp(R, m, a, M, has_c ? c : NULL, neg, has_x ? y : NULL, m, y, m);
      for (size_t r = 0; r < R; r++)
        for (size_t f = 0; f < m; f++) {
          const double diff = a[r * M + f] - (has_c ? c[f] : 0.0);
          const float d = (float)(neg ? -diff : diff);
          const double want = exp((double)d) * (has_x ? (double)x[r * m + f] : 1.0);
          const double got = y[r * m + f];
          ck_assert_msg(fabs(got - want) <= 0x1p-21 * fabs(want) || (isinf(want) && got == want),
                        "m %zu v %d r %zu f %zu: %.9g, want %.9g", m, v, r, f, got, want);
        }
      gcheck_free(y);
    }
}
END_TEST

/* ---- log: relative error bound over the positive normal floats ---- */
/* Bound: relative error 2^-22 against double log (as exp's): every binade from FLT_MIN to
 * FLT_MAX at 2^12 mantissas each, and 1 +- k 2^-24 and 1 +- k 2^-23 next to the root, where
 * log x ~ x - 1 must keep its relative accuracy (measured: 2.3 x 2^-24, next to 1). log 1 = 0
 * exactly; 0 and subnormals give finite values. */
START_TEST(vlog_error_bound) {
  enum { M = 4096, NEAR = 8192 };
  float *x = malloc((M + 2 * NEAR) * sizeof(float)), *y = galloc(M + 2 * NEAR);
  double worst = 0;
  float worst_x = 0, worst_y = 0;
  for (int e = -126; e <= 128; e++) { /* e = 128: the values next to 1 */
    size_t n = 0;
    if (e < 128)
      for (int i = 0; i < M; i++) x[n++] = ldexpf(1.0f + ((float)i + 0.5f * frand() + 0.5f) / M, e);
    else
      for (int i = 1; i <= NEAR; i++) x[n++] = 1.0f + (float)ldexp(i, -24) * (i % 2 ? -1.0f : 2.0f);
    for (size_t i = 0; i < n; i++) x[i] = fminf(fmaxf(x[i], FLT_MIN), FLT_MAX);
    uk->vlog(n, x, y);
    for (size_t i = 0; i < n; i++) {
      const double ref = log((double)x[i]), rel = fabs((double)y[i] - ref) / fabs(ref);
      if (!(rel <= worst)) worst = rel, worst_x = x[i], worst_y = y[i];
    }
  }
  ck_assert_msg(worst <= EXP_RTOL, "log(%.9g) = %.9g, rel error %.3g", worst_x, worst_y, worst);
  ck_assert(worst > 0);
  const float edges[] = {1.0f, FLT_MIN, FLT_MAX, 2.0f, 0.5f, (float)M_SQRT2, (float)M_SQRT1_2};
  float ye[7];
  uk->vlog(7, edges, ye);
  ck_assert_msg(ye[0] == 0.0f, "log 1 = %g", ye[0]);
  for (size_t i = 1; i < 7; i++)
    ck_assert_msg(fabs(ye[i] - log((double)edges[i])) <= EXP_RTOL * fabs(log((double)edges[i])), "log(%g) = %.9g",
                  edges[i], ye[i]);
  const float tiny[] = {0.0f, 1e-40f, FLT_TRUE_MIN}; /* finite (GAU multiplies it by its zero weight) */
  uk->vlog(3, tiny, ye);
  for (size_t i = 0; i < 3; i++) ck_assert_msg(isfinite(ye[i]), "log(%g) = %g, want finite", tiny[i], ye[i]);
  gcheck_free(y);
  free(x);
}
END_TEST

/* ---- GEMM: every edge of the register tile, strides, modes ---- */
static const size_t gemm_sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 33, 47, 48, 49};
#define NGS (sizeof gemm_sizes / sizeof gemm_sizes[0])

static void gemm_case(size_t m, size_t n, size_t k, int a_trans, int mode) {
  /* mode 0: overwrite, 1: +=, 2: row-scaled += */
  /* n == 1 with ldb == 1 and untransposed A takes the kernel's dot-product loop */
  const size_t lda = k + 3, ldat = m + 5, ldb = n == 1 && !a_trans ? 1 : n + 2, ldc = n + 7;
  const size_t asz = (a_trans ? k * ldat : m * lda) + 1;
  float *a = malloc(asz * sizeof(float)), *b = malloc((k * ldb + 1) * sizeof(float));
  float *c = galloc(m * ldc), *c0 = malloc(m * ldc * sizeof(float)), *rs = malloc(m * sizeof(float));
  for (size_t i = 0; i < asz; i++) a[i] = frand();
  for (size_t i = 0; i < k * ldb + 1; i++) b[i] = frand();
  for (size_t i = 0; i < m * ldc; i++) c[i] = c0[i] = frand();
  for (size_t i = 0; i < m; i++) rs[i] = frand();
  const size_t rsa = a_trans ? 1 : lda, csa = a_trans ? ldat : 1;
  uk->gemm(m, n, k, a, rsa, csa, b, ldb, c, ldc, mode == 2 ? rs : NULL, mode != 0);
  size_t bad_i = SIZE_MAX, bad_j = 0;
  double bad_ref = 0;
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < ldc; j++) {
      if (j >= n) { /* padding between rows is not the kernel's */
        if (c[i * ldc + j] != c0[i * ldc + j] && bad_i == SIZE_MAX) {
          bad_i = i;
          bad_j = j;
          bad_ref = c0[i * ldc + j];
        }
        continue;
      }
      double ref = 0, mag = 0;
      for (size_t p = 0; p < k; p++) {
        const double t = (double)a[i * rsa + p * csa] * b[p * ldb + j];
        ref += t;
        mag += fabs(t);
      }
      const double old = c0[i * ldc + j] * (mode == 2 ? (double)rs[i] : 1.0);
      if (mode) {
        ref += old;
        mag += fabs(old);
      }
      /* fp32 accumulation of k + 1 terms: |err| <= (k + 2) * 2^-24 * sum |terms| */
      const double tol = (double)(k + 2) * 5.960464477539063e-08 * mag + 1e-30;
      if (!(fabs(c[i * ldc + j] - ref) <= tol) && bad_i == SIZE_MAX) {
        bad_i = i;
        bad_j = j;
        bad_ref = ref;
      }
    }
  }
  ck_assert_msg(bad_i == SIZE_MAX, "gemm m=%zu n=%zu k=%zu trans=%d mode=%d at (%zu,%zu): %g, want %g", m, n, k,
                a_trans, mode, bad_i, bad_j, bad_i == SIZE_MAX ? 0.0 : c[bad_i * ldc + bad_j], bad_ref);
  gcheck_free(c);
  free(a);
  free(b);
  free(c0);
  free(rs);
}

START_TEST(gemm_shapes) {
  const size_t m = gemm_sizes[_i % NGS];
  for (size_t jn = 0; jn < NGS; jn += 2)
    for (size_t kk = 0; kk < 5; kk++) {
      const size_t ks[] = {0, 1, 7, 64, 97};
      gemm_case(m, gemm_sizes[jn], ks[kk], (int)(kk & 1), (int)((jn / 2 + kk) % 3));
    }
}
END_TEST

/* The last column or two of a block, with A read transposed, run along the rows (gemm_tmpl.h):
 * [V | 1]'s ones column of a normalised linear map. Against the float64 reference (gemm_case), and
 * bit for bit against the same columns computed inside a wider block's tile. */
START_TEST(gemm_last_columns) {
  const size_t nr = uk->gemm_nr, ms[] = {1, 2, 5, 8, 15, 16, 17, 31, 33, 64, 65, 97};
  const size_t m = ms[_i % (sizeof ms / sizeof ms[0])];
  for (size_t q = 0; q < 3; q++)
    for (size_t extra = 1; extra <= 2; extra++)
      for (int mode = 0; mode < 3; mode++) {
        const size_t ks[] = {1, 7, 64};
        const size_t n = q * nr + extra, k = ks[(q + extra + (size_t)mode) % 3], wide = q * nr + nr / 2 + 3;
        gemm_case(m, n, k, 1, mode);
        /* the same product over `wide` columns: its first n columns in a tile */
        const size_t ldat = m + 5, ldb = wide + 1, ldc = wide + 2;
        float *a = malloc(k * ldat * sizeof(float)), *b = malloc(k * ldb * sizeof(float));
        float *c1 = galloc(m * ldc), *c2 = galloc(m * ldc), *rs = malloc(m * sizeof(float));
        for (size_t i = 0; i < k * ldat; i++) a[i] = frand();
        for (size_t i = 0; i < k * ldb; i++) b[i] = frand();
        for (size_t i = 0; i < m * ldc; i++) c1[i] = c2[i] = frand();
        for (size_t i = 0; i < m; i++) rs[i] = frand();
        uk->gemm(m, n, k, a, 1, ldat, b, ldb, c1, ldc, mode == 2 ? rs : NULL, mode != 0);
        uk->gemm(m, wide, k, a, 1, ldat, b, ldb, c2, ldc, mode == 2 ? rs : NULL, mode != 0);
        for (size_t i = 0; i < m; i++)
          for (size_t j = 0; j < n; j++)
            ck_assert_msg(c1[i * ldc + j] == c2[i * ldc + j], "m=%zu n=%zu k=%zu mode=%d (%zu,%zu): %a, tile %a", m, n,
                          k, mode, i, j, (double)c1[i * ldc + j], (double)c2[i * ldc + j]);
        gcheck_free(c1);
        gcheck_free(c2);
        free(a);
        free(b);
        free(rs);
      }
}
END_TEST

START_TEST(gemm_in_place_row) {
  /* merge relies on C == B for a one-row, k = 1 product: C = w * C */
  float *c = galloc(37);
  float ref[37];
  for (int i = 0; i < 37; i++) ref[i] = c[i] = frand();
  const float w = 0.375f;
  uk->gemm(1, 37, 1, &w, 0, 0, c, 0, c, 0, NULL, 0);
  for (int i = 0; i < 37; i++) ck_assert_float_eq(c[i], w * ref[i]);
  gcheck_free(c);
}
END_TEST

/* ---- online softmax block: against a double recurrence, with masked entries and columns ---- */
/* Loop index 0..7: columns with padding (ld = nq + 3); 8..10: one contiguous column (nq = ld = 1:
 * a decode step) over 3, 16 and 37 keys (a tail only, whole vectors, both); 11..14: 2, 4, 8 and 4
 * contiguous columns (ld = nq: a GQA decode step) over 13, 13, 13 and 16 keys (a tail, whole
 * vectors on some paths); 8..14 take the flat path where nq divides the vector. Every step runs
 * twice, without and with the statistics (q2 and e, stride nq + 2): P, m, l and alpha must be the
 * same bits, and q2 = sum p^2, e = sum p (s - m) (p relative to the running max) follow the
 * double recurrence. */
START_TEST(softmax_block_steps) {
  static const size_t nqs[] = {1, 3, 4, 5, 8, 9, 17, 48, 1, 1, 1, 2, 4, 8, 4};
  static const size_t nks[] = {13, 13, 13, 13, 13, 13, 13, 13, 3, 16, 37, 13, 13, 13, 16};
  const int row = _i >= 8 && _i < 11, flat = _i >= 11;
  const size_t nq = nqs[_i], nk = nks[_i], lds = nq + 2;
  size_t ld = nq + 3;
  if (row) ld = 1;
  if (flat) ld = nq;
  float *m = galloc(nq), *l = galloc(nq), *al = galloc(nq), *st = galloc(nk * ld);
  float *m2 = galloc(nq), *l2 = galloc(nq), *al2 = galloc(nq), *st2 = galloc(nk * ld), *sts = galloc(2 * lds);
  double *rm = malloc(nq * sizeof(double)), *rl = malloc(nq * sizeof(double));
  double *rq = malloc(nq * sizeof(double)), *re = malloc(nq * sizeof(double)), *rea = malloc(nq * sizeof(double));
  for (size_t c = 0; c < nq; c++) {
    m[c] = m2[c] = -INFINITY;
    l[c] = l2[c] = 0;
    rm[c] = -INFINITY;
    rl[c] = rq[c] = re[c] = rea[c] = 0;
  }
  for (size_t c = 0; c < 2 * lds; c++) sts[c] = c % lds < nq ? 0.0f : 7.0f; /* the padding must stay */
  for (int step = 0; step < 4; step++) {
    float *keep = malloc(nk * ld * sizeof(float));
    for (size_t j = 0; j < nk; j++)
      for (size_t c = 0; c < ld; c++) {
        float s = 20.0f * frand() + (step == 2 ? 60.0f : 0.0f); /* a jump of the max in step 2 */
        if (c == 0 && step < 2) s = -INFINITY;                  /* column 0: empty at first */
        if (c == nq - 1 && nq > 2) s = -INFINITY;               /* last column: always empty */
        if ((j + c + (size_t)step) % 5 == 0) s = -INFINITY;     /* scattered masked pairs */
        st[j * ld + c] = st2[j * ld + c] = keep[j * ld + c] = s;
      }
    uk->softmax_block(nk, nq, st, ld, m, l, al, NULL, 0, 1);
    uk->softmax_block(nk, nq, st2, ld, m2, l2, al2, sts, lds, 1);
    tu_assert_same_bits("P with statistics", st, st2, nk * ld * sizeof(float));
    tu_assert_same_bits("m with statistics", m, m2, nq * sizeof(float));
    tu_assert_same_bits("l with statistics", l, l2, nq * sizeof(float));
    tu_assert_same_bits("alpha with statistics", al, al2, nq * sizeof(float));
    for (size_t c = 0; c < nq; c++) {
      double mx = rm[c];
      for (size_t j = 0; j < nk; j++) mx = fmax(mx, keep[j * ld + c]);
      const double alpha = mx == -INFINITY ? 0.0 : exp(rm[c] - mx);
      double sum = 0, sq = 0, se = 0, sea = 0;
      for (size_t j = 0; j < nk; j++) {
        const double p = mx == -INFINITY ? 0.0 : exp((double)keep[j * ld + c] - mx);
        sum += p;
        sq += p * p;
        se += p == 0.0 ? 0.0 : p * ((double)keep[j * ld + c] - mx);
        sea += p == 0.0 ? 0.0 : p * fabs((double)keep[j * ld + c] - mx);
        /* exp's bound plus the rounding of the fp32 difference s - m (|s - m| * 2^-24) */
        const double tol =
            p == 0.0 ? 0.0 : p * (4 * EXP_RTOL + fabs((double)keep[j * ld + c] - mx) * 5.960464477539063e-08) + 1e-37;
        ck_assert_msg(fabs(st[j * ld + c] - p) <= tol, "P[%zu][%zu] %g vs %g", j, c, st[j * ld + c], p);
      }
      const double atol =
          alpha == 0.0 ? 0.0 : alpha * (4 * EXP_RTOL + fabs(rm[c] - mx) * 5.960464477539063e-08) + 1e-37;
      ck_assert_msg(fabs(al[c] - alpha) <= atol, "alpha[%zu] %.9g vs %.9g (m %.9g -> %.9g)", c, al[c], alpha, rm[c],
                    mx);
      const double shift = alpha == 0.0 ? 0.0 : rl[c] * (mx - rm[c]); /* the old terms' s - m grew */
      re[c] = (alpha == 0.0 ? 0.0 : alpha * (re[c] - shift)) + se;
      rea[c] = (alpha == 0.0 ? 0.0 : alpha * (rea[c] + shift)) + sea;
      rq[c] = rq[c] * alpha * alpha + sq;
      rl[c] = rl[c] * alpha + sum;
      rm[c] = mx;
      ck_assert(m[c] == (float)mx);
      ck_assert_msg(fabs(l[c] - rl[c]) <= 1e-5 * rl[c], "l[%zu] %g vs %g", c, l[c], rl[c]);
      /* q2: as l, twice exp's error per term; e: each term carries exp's error and the rounding of
       * s - m (|s - m| u relative, |s - m| <= 80 here), relative to the sum of |terms| */
      ck_assert_msg(fabs(sts[c] - rq[c]) <= 2e-5 * rq[c], "q2[%zu] %g vs %g", c, sts[c], rq[c]);
      ck_assert_msg(fabs(sts[lds + c] - re[c]) <= 2e-5 * rea[c], "e[%zu] %.9g vs %.9g (scale %g)", c, sts[lds + c],
                    re[c], rea[c]);
    }
    for (size_t c = nq; c < lds; c++) ck_assert(sts[c] == 7.0f && sts[lds + c] == 7.0f);
    for (size_t j = 0; j < nk; j++)
      for (size_t c = nq; c < ld; c++) ck_assert(st[j * ld + c] == keep[j * ld + c]); /* padding */
    free(keep);
  }
  if (nq > 2) {
    ck_assert(m[nq - 1] == -INFINITY);
    ck_assert(l[nq - 1] == 0.0f);
    ck_assert(sts[nq - 1] == 0.0f && sts[lds + nq - 1] == 0.0f); /* an empty column's sums stay 0 */
  }
  float *bufs[] = {m, l, al, st, m2, l2, al2, st2, sts};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gcheck_free(bufs[i]);
  free(rm), free(rl), free(rq), free(re), free(rea);
}
END_TEST

/* ---- recurrent linear step: out = a va + qf^T S (S on entry), then S = g S + kf va^T ---- */
START_TEST(linear_step_widths) {
  const size_t ws[] = {1, 3, 4, 7, 8, 9, 16, 31, 32, 33, 65, 70};
  const size_t w = ws[_i], m = 13, lds = w + 3;
  float *s = galloc(m * lds), *s0 = malloc(m * lds * sizeof(float)), *out = galloc(w);
  float qf[13], kf[13], gr[13], *va = malloc(w * sizeof(float));
  for (size_t p = 0; p < m; p++) {
    qf[p] = frand();
    kf[p] = frand();
    gr[p] = 0.5f + 0.5f * frand(); /* a decay in (0, 1] */
  }
  for (size_t c = 0; c < w; c++) va[c] = frand();
  const float a = 0.625f;
  for (int update = 0; update < 4; update++) { /* no update, update, and both with a decay g */
    const float *g = update >= 2 ? gr : NULL;
    for (size_t i = 0; i < m * lds; i++) s[i] = s0[i] = frand();
    uk->linear_step(m, w, qf, update % 2 ? kf : NULL, va, a, s, lds, out, g);
    size_t bad = SIZE_MAX;
    for (size_t c = 0; c < w; c++) {
      double ref = (double)a * va[c], mag = fabs(ref);
      for (size_t p = 0; p < m; p++) {
        ref += (double)qf[p] * s0[p * lds + c];
        mag += fabs((double)qf[p] * s0[p * lds + c]);
      }
      if (!(fabs(out[c] - ref) <= (m + 2) * 5.960464477539063e-08 * mag) && bad == SIZE_MAX) bad = c;
    }
    ck_assert_msg(bad == SIZE_MAX, "step out w=%zu update=%d at %zu", w, update, bad);
    for (size_t p = 0; p < m; p++)
      for (size_t c = 0; c < lds; c++) {
        const double prod = c < w && update % 2 ? (double)kf[p] * va[c] : 0.0;
        const double old = s0[p * lds + c] * (c < w && update == 3 ? (double)gr[p] : 1.0);
        /* one fused or two separate roundings: bounded by 2u (|S| + |kf va|), exact when untouched */
        if (!(fabs(s[p * lds + c] - (old + prod)) <= 3 * 5.960464477539063e-08 * (fabs(old) + fabs(prod))) &&
            bad == SIZE_MAX)
          bad = p * lds + c;
      }
    ck_assert_msg(bad == SIZE_MAX, "step state w=%zu update=%d at element %zu (padding must not change)", w, update,
                  bad);
  }
  gcheck_free(s);
  gcheck_free(out);
  free(s0);
  free(va);
}
END_TEST

/* ---- online softmax block, non-finite logits: masked == 0 takes -inf as a logit (NaN); a NaN
 * or +inf logit makes its column's l NaN, and l stays NaN in later steps; other columns are
 * untouched by them ---- */
START_TEST(softmax_block_nonfinite) {
  /* loop index 0: 7 keys x 11 columns (ld 13), the bad logit in column 5; 1, 2: one contiguous
   * column (a decode step's path) of 19 keys, and of 3 (fewer than a vector), the bad logit in it;
   * 3: 7 keys x 4 contiguous columns (the flat path), the bad logit in column 2; 4: 13 keys x 11
   * columns (the column path's max chains, a tail row after them). The bad logit sits in each row
   * in turn (the chains see it first, last or in the tail). */
  static const size_t shapes[][4] = {{7, 11, 13, 5}, {19, 1, 1, 0}, {3, 1, 1, 0}, {7, 4, 4, 2}, {13, 11, 13, 5}};
  const size_t NK = shapes[_i][0], NQ = shapes[_i][1], LD = shapes[_i][2], BC = shapes[_i][3];
  const float bad[] = {NAN, INFINITY, -INFINITY, 1.0f}; /* and a finite control */
  for (size_t row = 0; row < NK; row++)
    for (int masked = 0; masked < 2; masked++)
      for (size_t b = 0; b < 4; b++) {
        float *m = galloc(NQ), *l = galloc(NQ), *al = galloc(NQ), *st = galloc(NK * LD);
        for (size_t c = 0; c < NQ; c++) {
          m[c] = -INFINITY;
          l[c] = 0;
        }
        for (int step = 0; step < 2; step++) {
          for (size_t i = 0; i < NK * LD; i++) st[i] = 4.0f * frand();
          if (step == 0) st[row * LD + BC] = bad[b]; /* column BC, first step only */
          uk->softmax_block(NK, NQ, st, LD, m, l, al, NULL, 0, masked);
          for (size_t c = 0; c < NQ; c++) {
            const int poisoned = c == BC && b < 3 && !(masked && b == 2); /* masked -inf: a masked pair */
            ck_assert_msg(poisoned ? isnan(l[c]) : isfinite(l[c]) && l[c] > 0,
                          "masked %d bad %zu in row %zu step %d col %zu: l %g", masked, b, row, step, c, l[c]);
          }
        }
        gcheck_free(m);
        gcheck_free(l);
        gcheck_free(al);
        gcheck_free(st);
      }
}
END_TEST

/* ---- feature maps, row-major and transposed output ---- */
START_TEST(featmap_maps) {
  /* 37 rows: a transposed output in several tiles of rows and a partial one (featmap_tmpl.h) */
  /* cols 1 .. 19, and 131 / 140: wider than the kernels' transposing tile (lane by lane) */
  const size_t rows = _i % 2 ? 37 : 5, cols = _i < 7 ? 1 + (size_t)_i * 3 : 131 + 9 * (size_t)(_i - 7);
  const size_t in_rs = cols + 2;
  float *in = malloc(rows * in_rs * sizeof(float));
  for (size_t i = 0; i < rows * in_rs; i++) in[i] = 6.0f * frand();
  in[0] = 0.0f;
  const float nonfinite[] = {NAN, INFINITY, -INFINITY}; /* every map gives NaN for them */
  for (size_t i = 0; i < 3; i++) in[(1 + i) * in_rs + (cols - 1) * (i % 2)] = nonfinite[i];
  /* the element-wise maps, with input scale 1 (exactly the map) and 0.75 (the map of fl(0.75 x)) */
  for (int map = 0; map <= ATTN_FEATURE_RELU; map++)
    for (int trans = 0; trans < 4; trans++) {
      const float a = trans < 2 ? 1.0f : 0.75f;
      const size_t out_rs = trans % 2 ? 1 : cols + 1, out_cs = trans % 2 ? rows + 1 : 1;
      const size_t n = trans % 2 ? cols * out_cs : rows * out_rs;
      float *out = galloc(n);
      uk->featmap((attn_feature_map)map, rows, cols, a, in, in_rs, out, out_rs, out_cs);
      for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
          const double x = (double)(a * in[r * in_rs + c]);
          const double ref = !isfinite(x)                   ? NAN
                             : map == ATTN_FEATURE_IDENTITY ? x
                             : map == ATTN_FEATURE_RELU     ? (x > 0 ? x : 0.0)
                                                            : (x >= 0 ? x + 1 : exp(x));
          const double got = out[r * out_rs + c * out_cs];
          ck_assert_msg(isnan(ref) ? isnan(got) : fabs(got - ref) <= EXP_RTOL * fabs(ref), "map %d (%zu,%zu): %g vs %g",
                        map, r, c, got, ref);
        }
      gcheck_free(out);
    }
  free(in);
}
END_TEST

/* ---- exponential features with offsets (exp, favor, dsoftmax): the three modes ---- */
START_TEST(expfeat_modes) {
  const size_t rows = _i % 2 ? 35 : 6, m = _i < 7 ? 1 + (size_t)_i * 3 : 131 + 9 * (size_t)(_i - 7); /* as above */
  const size_t ldu = m + 1, ldk = m + 2;
  float *u = malloc(rows * ldu * sizeof(float)), *kin = malloc(rows * ldk * sizeof(float));
  float *c = malloc(m * sizeof(float)), *run0 = malloc(m * sizeof(float));
  for (size_t i = 0; i < rows * ldu; i++) u[i] = 30.0f * frand();
  for (size_t i = 0; i < rows * ldk; i++) kin[i] = 15.0f + 15.0f * frand(); /* >= 0, as key features are */
  for (size_t f = 0; f < m; f++) c[f] = 30.0f * frand(), run0[f] = f % 3 == 1 ? -INFINITY : 30.0f * frand();
  u[2 * ldu + m - 1] = NAN; /* a non-finite input: NaN where it is used */
  for (int mode = ATTN_EXPF_KEYS; mode <= ATTN_EXPF_SOFTMAX; mode++)
    for (int trans = 0; trans < 2; trans++)
      for (int with_k = 0; with_k < 2; with_k++) {
        const size_t out_rs = trans ? 1 : m + 1, out_cs = trans ? rows + 1 : 1;
        float *out = galloc(trans ? m * out_cs : rows * out_rs), *run = galloc(m);
        double *rr = malloc(m * sizeof(double));
        for (size_t f = 0; f < m; f++) /* SOFTMAX: positive denominators, one of them 0 */
          rr[f] = run[f] = mode == ATTN_EXPF_SOFTMAX
                               ? (f == 1 ? 0.0f : 1.0f + fabsf(run0[f] == -INFINITY ? 2.0f : run0[f]))
                               : run0[f];
        uk->expfeat((attn_expfeat_mode)mode, rows, m, u, ldu, with_k ? kin : NULL, ldk, run, c, out, out_rs, out_cs);
        for (size_t r = 0; r < rows; r++) {
          const float *ur = u + r * ldu, *kr = kin + r * ldk;
          for (size_t f = 0; with_k && mode != ATTN_EXPF_KEYS && f < m; f++)
            rr[f] = mode == ATTN_EXPF_QUERY ? fmax(rr[f], kr[f]) : rr[f] + kr[f];
          double mx = -INFINITY, sum = 0.0;
          int bad = 0;
          for (size_t f = 0; f < m; f++) {
            bad |= isnan(ur[f]);
            if (!isnan(ur[f])) mx = fmax(mx, mode == ATTN_EXPF_QUERY ? ur[f] + rr[f] : ur[f]);
          }
          for (size_t f = 0; f < m; f++) sum += exp(ur[f] - mx);
          for (size_t f = 0; f < m; f++) {
            double ref, tol = 4 * EXP_RTOL + 1e-7 * 60; /* exp within 2^-22, of an argument rounded at ~60 */
            if (mode == ATTN_EXPF_KEYS)
              ref = exp((double)ur[f] - c[f]);
            else if (mode == ATTN_EXPF_QUERY)
              ref = mx == -INFINITY ? 0.0 : exp((double)ur[f] + c[f] - mx), tol += 1e-7 * 60;
            else
              ref = rr[f] == 0.0 ? 0.0 : exp(ur[f] - mx) / sum / rr[f], tol += 1e-7 * 60 + 8 * EXP_RTOL;
            if (isnan(ur[f]) || (bad && mode != ATTN_EXPF_KEYS)) ref = NAN;
            const double got = out[r * out_rs + f * out_cs];
            if (isnan(ref) && !isnan(ur[f]))
              continue; /* a NaN elsewhere in a query row: this feature is not promised NaN */
            ck_assert_msg(isnan(ref) ? isnan(got) : fabs(got - ref) <= tol * fabs(ref) + 1e-37,
                          "mode %d m %zu (%zu,%zu): %g vs %g", mode, m, r, f, got, ref);
          }
        }
        for (size_t f = 0; mode != ATTN_EXPF_KEYS && f < m; f++)
          ck_assert_msg(
              run[f] == (float)rr[f] || (mode == ATTN_EXPF_SOFTMAX && fabs(run[f] - rr[f]) <= 1e-6 * fabs(rr[f])),
              "mode %d: run[%zu] = %g vs %g", mode, f, run[f], rr[f]);
        free(rr);
        gcheck_free(out);
        gcheck_free(run);
      }
  /* QUERY with no offset anywhere (an empty state, nothing visible): every feature is 0 */
  float *run = galloc(m), *out = galloc(m), *none = galloc(m);
  for (size_t f = 0; f < m; f++) run[f] = none[f] = -INFINITY;
  uk->expfeat(ATTN_EXPF_QUERY, 1, m, u, ldu, NULL, 0, run, none, out, m, 1);
  for (size_t f = 0; f < m; f++) ck_assert_msg(out[f] == 0.0f, "empty: %g", out[f]);
  gcheck_free(run);
  gcheck_free(out);
  gcheck_free(none);
  free(u), free(kin), free(c), free(run0);
}
END_TEST

/* ---- the blocked engine's exponential modes: SCALED (given row offsets), MAX (max-plus), RANGE ---- */
START_TEST(expfeat_scaled_max) {
  const size_t rows = _i % 2 ? 37 : 7, m = _i < 7 ? 1 + (size_t)_i * 3 : 131 + 9 * (size_t)(_i - 7); /* as above */
  const size_t ldu = m + 3;
  float *u = malloc(rows * ldu * sizeof(float)), *c = malloc(m * sizeof(float)), *run = galloc(rows);
  for (size_t i = 0; i < rows * ldu; i++) u[i] = 60.0f * frand();
  for (size_t f = 0; f < m; f++) c[f] = f % 4 == 2 ? -INFINITY : 60.0f * frand();
  u[3 * ldu + m / 2] = NAN; /* row 3: NaN where used, and a NaN row maximum */
  for (int trans = 0; trans < 2; trans++) {
    const size_t out_rs = trans ? 1 : m + 1, out_cs = trans ? rows + 1 : 1;
    float *out = galloc(trans ? m * out_cs : rows * out_rs);
    for (size_t r = 0; r < rows; r++) { /* row offsets: -inf (row 1: features 0), NaN (row 5), else
                                          * up to 40 below the row's max (features up to e^40, as phi) */
      double mx = -INFINITY;
      for (size_t f = 0; f < m; f++) mx = fmax(mx, (double)u[r * ldu + f] + c[f]);
      run[r] = r == 1 ? -INFINITY : r == 5 ? NAN : (float)(mx - 20.0 - 20.0 * frand());
    }
    uk->expfeat(ATTN_EXPF_SCALED, rows, m, u, ldu, NULL, 0, run, c, out, out_rs, out_cs);
    for (size_t r = 0; r < rows; r++)
      for (size_t f = 0; f < m; f++) {
        const double x = u[r * ldu + f], arg = x + c[f] - run[r];
        const double ref = isnan(x) || isnan(run[r]) ? NAN : run[r] == -INFINITY ? 0.0 : exp(arg);
        const double got = out[r * out_rs + f * out_cs], tol = 4 * EXP_RTOL + 1e-7 * 180;
        ck_assert_msg(isnan(ref) ? isnan(got) : fabs(got - ref) <= tol * fabs(ref) + 1e-37,
                      "SCALED m %zu (%zu,%zu): %g vs %g", m, r, f, got, ref);
      }
    gcheck_free(out);
  }
  /* MAX: run[0] = max(run[0], max over rows and features of u + c), rows 0 .. k-1 (no NaN row) */
  for (size_t k = 0; k <= 3; k++)
    for (int start = 0; start < 2; start++) {
      run[0] = start ? 10.0f : -INFINITY;
      double ref = run[0];
      for (size_t r = 0; r < k; r++)
        for (size_t f = 0; f < m; f++) ref = fmax(ref, (double)u[r * ldu + f] + c[f]);
      uk->expfeat(ATTN_EXPF_MAX, k, m, u, ldu, NULL, 0, run, c, NULL, 0, 0);
      ck_assert_msg(run[0] == (float)ref, "MAX m %zu rows %zu: %g vs %g", m, k, run[0], ref);
    }
  gcheck_free(run);
  /* RANGE: each feature's finite maximum and minimum over rows 0 .. k-1 (row 3 has a NaN; +inf
   * and -inf added in rows 2 and 4 are skipped too), from starting values or from -inf / +inf,
   * the minimum optional (out NULL); guard zones on both. */
  u[2 * ldu + m - 1] = INFINITY, u[4 * ldu] = -INFINITY;
  for (size_t k = 0; k <= rows; k++)
    for (int start = 0; start < 3; start++) {
      float *hi = galloc(m), *lo = galloc(m);
      for (size_t f = 0; f < m; f++) hi[f] = start == 1 ? 5.0f : -INFINITY, lo[f] = start == 1 ? -5.0f : INFINITY;
      float *want_hi = malloc(m * sizeof(float)), *want_lo = malloc(m * sizeof(float));
      for (size_t f = 0; f < m; f++) {
        want_hi[f] = hi[f], want_lo[f] = lo[f];
        for (size_t r = 0; r < k; r++) {
          const float x = u[r * ldu + f];
          if (!isfinite(x)) continue;
          want_hi[f] = x > want_hi[f] ? x : want_hi[f];
          want_lo[f] = x < want_lo[f] ? x : want_lo[f];
        }
      }
      uk->expfeat(ATTN_EXPF_RANGE, k, m, u, ldu, NULL, 0, hi, NULL, start == 2 ? NULL : lo, 0, 0);
      for (size_t f = 0; f < m; f++) {
        ck_assert_msg(hi[f] == want_hi[f], "RANGE m %zu rows %zu feature %zu: max %g, want %g", m, k, f, (double)hi[f],
                      (double)want_hi[f]);
        ck_assert_msg(start == 2 ? lo[f] == INFINITY : lo[f] == want_lo[f],
                      "RANGE m %zu rows %zu feature %zu: min %g, want %g", m, k, f, (double)lo[f], (double)want_lo[f]);
      }
      gcheck_free(hi);
      gcheck_free(lo);
      free(want_hi), free(want_lo);
    }
  free(u), free(c);
}
END_TEST

/* ---- windowed linear attention's score step: -inf pairs hidden, weights scaled, column sums ---- */
/* The contract promises the scalar loop's bits (each column's sum in key order, one product per
 * weight), so the reference is that loop in float and the comparison is exact. Loop index: nk x
 * nq from 1 x 1 to 43 x 73 (every path's four-strip loop and its tails) with padded rows (ld =
 * nq + 3: the padding must stay untouched; guard zones cover only the ends, so the whole array is
 * compared), -inf entries (masked pairs, or infinite inputs when unmasked: NaN), a NaN entry,
 * fac NULL or not. */
START_TEST(window_block_values) {
  const size_t nk = 1 + (size_t)_i * 7, nq = 1 + (size_t)_i * 12, ld = nq + 3;
  float *in = malloc(nk * ld * sizeof(float)), *fac = malloc(nq * sizeof(float)), *den0 = malloc(nq * sizeof(float));
  for (size_t e = 0; e < nk * ld; e++) in[e] = e % 11 == 3 ? -INFINITY : 4.0f * frand();
  in[(nk / 2) * ld + nq / 2] = NAN;
  for (size_t c = 0; c < nq; c++) fac[c] = 3.0f * frand(), den0[c] = 2.0f * frand();
  for (int masked = 0; masked < 2; masked++)
    for (int use_fac = 0; use_fac < 2; use_fac++) {
      float *st = galloc(nk * ld), *den = galloc(nq), *want = malloc(nk * ld * sizeof(float)), wden[80];
      memcpy(st, in, nk * ld * sizeof(float));
      memcpy(want, in, nk * ld * sizeof(float));
      memcpy(den, den0, nq * sizeof(float));
      memcpy(wden, den0, nq * sizeof(float));
      for (size_t j = 0; j < nk; j++)
        for (size_t c = 0; c < nq; c++) {
          const float x = want[j * ld + c];
          want[j * ld + c] = x == -INFINITY ? (masked ? 0.0f : NAN) : use_fac ? x * fac[c] : x;
          wden[c] += want[j * ld + c];
        }
      uk->window_block(nk, nq, st, ld, use_fac ? fac : NULL, den, masked);
      tu_assert_same_bits("window_block weights", want, st, nk * ld * sizeof(float));
      tu_assert_same_bits("window_block sums", wden, den, nq * sizeof(float));
      gcheck_free(st);
      gcheck_free(den);
      free(want);
    }
  free(in), free(fac), free(den0);
}
END_TEST

/* ---- the chunkwise engine's rows element-wise: y = A y + B x, with keep; y = B x ---- */
/* The contract promises a plain C loop's bits (products and the sum rounded on their own), so
 * the reference is that loop, one rounding per statement, and the comparison is exact. Loop
 * index: 1..8 rows, cols across every path's vector width and tails (1 .. 65), padded rows (the
 * padding must stay untouched: whole arrays compared), A and B strided or NULL, every mode, and
 * non-finite values: +inf in y (a zero A gives NaN: 0 inf), NaN in x, -0, a subnormal. */
START_TEST(rows_axpby_values) {
  static const size_t colsv[] = {1, 3, 8, 15, 16, 17, 33, 65};
  const size_t rows = 1 + (size_t)_i, cols = colsv[_i], ldy = cols + 5, ldx = cols + 3, as = 2, bs = 3;
  float *y0 = malloc(rows * ldy * sizeof(float)), *x0 = malloc(rows * ldx * sizeof(float));
  float a[2 * 8], b[3 * 8];
  for (size_t e = 0; e < rows * ldy; e++) y0[e] = 8.0f * frand() - 4.0f;
  for (size_t e = 0; e < rows * ldx; e++) x0[e] = 8.0f * frand() - 4.0f;
  for (size_t e = 0; e < 2 * 8; e++) a[e] = 2.0f * frand();
  for (size_t e = 0; e < 3 * 8; e++) b[e] = 2.0f * frand() - 1.0f;
  y0[0] = INFINITY, y0[(rows - 1) * ldy + cols / 2] = -0.0f, x0[(rows - 1) * ldx + cols - 1] = NAN;
  x0[cols / 2] = 1e-40f;
  a[0] = rows > 1 ? 0.5f : 0.0f, a[(rows - 1) * as] = 0.0f; /* a zero A: its row's +inf or values vanish or NaN */
  for (int mode = 0; mode < 16; mode++) {
    const int acc = mode & 1, keep = mode >> 1 & 1, use_a = mode >> 2 & 1, use_b = mode >> 3 & 1;
    float *y = galloc(rows * ldy), *x = galloc(rows * ldx);
    float *wy = malloc(rows * ldy * sizeof(float)), *wx = malloc(rows * ldx * sizeof(float));
    memcpy(y, y0, rows * ldy * sizeof(float)), memcpy(wy, y0, rows * ldy * sizeof(float));
    memcpy(x, x0, rows * ldx * sizeof(float)), memcpy(wx, x0, rows * ldx * sizeof(float));
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        const float A = use_a ? a[r * as] : 1.0f, B = use_b ? b[r * bs] : 1.0f;
        const float t = B * wx[r * ldx + c];
        if (!acc) {
          wy[r * ldy + c] = t;
          continue;
        }
        const float v = wy[r * ldy + c], p = A * v;
        if (keep) wx[r * ldx + c] = v;
        wy[r * ldy + c] = p + t;
      }
    uk->rows_axpby(rows, cols, y, ldy, x, ldx, use_a ? a : NULL, as, use_b ? b : NULL, bs, acc, keep);
    tu_assert_same_bits("rows_axpby y", wy, y, rows * ldy * sizeof(float));
    tu_assert_same_bits("rows_axpby x", wx, x, rows * ldx * sizeof(float));
    if (!acc) { /* in place: y = B y */
      uk->rows_axpby(rows, cols, x, ldx, x, ldx, NULL, 0, use_b ? b : NULL, bs, 0, 0);
      for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) wx[r * ldx + c] = (use_b ? b[r * bs] : 1.0f) * wx[r * ldx + c];
      tu_assert_same_bits("rows_axpby in place", wx, x, rows * ldx * sizeof(float));
    }
    gcheck_free(y);
    gcheck_free(x);
    free(wy), free(wx);
  }
  free(y0), free(x0);
}
END_TEST

/* ---- the chunkwise engine's value rows: y = x, and whether every x is finite ---- */
/* Loop index: 0..8 rows, cols across every path's vector width, its four-vector steps and tails
 * (1 .. 130), padded rows (y's padding must stay untouched: whole arrays compared; x's is NaN,
 * which must not be read). The copy is exact (same bits, -0 and a subnormal included) and the
 * answer is 1; then one non-finite value (+inf, -inf, NaN) at each of several places (first
 * element, a middle lane, the last column, the last row) makes it 0 with the copy still exact. */
START_TEST(rows_copy_values) {
  static const size_t colsv[] = {1, 3, 8, 15, 17, 33, 64, 65, 130};
  const size_t rows = (size_t)_i, cols = colsv[_i], ldy = cols + 5, ldx = cols + 3;
  const size_t nx = (rows ? rows : 1) * ldx, ny = (rows ? rows : 1) * ldy;
  float *x = galloc(nx), *y = galloc(ny), *want = malloc(ny * sizeof(float));
  for (size_t e = 0; e < nx; e++) x[e] = 8.0f * frand() - 4.0f;
  x[0] = -0.0f, x[cols / 2] = 1e-40f;
  for (size_t e = 0; e < nx; e++) /* past each row: NaN, which must not be read */
    if (e % ldx >= cols) x[e] = NAN;
  const float bad[3] = {INFINITY, -INFINITY, NAN};
  const size_t at[4] = {0, cols / 2, cols - 1, rows ? (rows - 1) * ldx + cols / 3 : 0};
  for (int t = -1; t < 12; t++) { /* t = -1: every value finite */
    const size_t e = t < 0 ? 0 : at[t / 3];
    const float keep = x[e];
    if (t >= 0) x[e] = bad[t % 3];
    for (size_t q = 0; q < ny; q++) y[q] = want[q] = (float)q; /* the padding's values */
    for (size_t r = 0; r < rows; r++) memcpy(want + r * ldy, x + r * ldx, cols * sizeof(float));
    const int finite = uk->rows_copy(rows, cols, y, ldy, x, ldx);
    tu_assert_same_bits("rows_copy y", want, y, ny * sizeof(float));
    ck_assert_int_eq(finite, t < 0 || rows == 0);
    x[e] = keep;
  }
  gcheck_free(x);
  gcheck_free(y);
  free(want);
}
END_TEST

/* ---- rows against a vector of their columns: y = x (.) v per column; v = running column max ---- */
/* The plain loops are the reference, compared bit for bit. Loop index: 1..9 rows, cols across
 * every path's vector width and tails (1 .. 130), padded rows (y's padding untouched; x's NaN,
 * never read), SCALE out of place and in place, MAX with NaN (passed over), +inf, -inf, -0 against
 * +0 (the comparison keeps the running value) and a subnormal. */
START_TEST(rows_cols_values) {
  static const size_t colsv[] = {1, 3, 8, 15, 17, 33, 64, 65, 130};
  const size_t rows = 1 + (size_t)_i, cols = colsv[_i], ldy = cols + 5, ldx = cols + 3;
  float *x = galloc(rows * ldx), *y = galloc(rows * ldy), *v = galloc(cols);
  float *want = malloc(rows * ldy * sizeof(float)), *wv = malloc(cols * sizeof(float));
  for (size_t e = 0; e < rows * ldx; e++) x[e] = e % ldx >= cols ? NAN : 8.0f * frand() - 4.0f;
  for (size_t c = 0; c < cols; c++) v[c] = 2.0f * frand() - 1.0f;
  x[cols / 2] = NAN, x[cols - 1] = INFINITY, x[(rows - 1) * ldx] = -INFINITY, x[(rows - 1) * ldx + cols / 3] = 1e-40f;
  v[0] = 0.0f, x[0] = -0.0f;                                                /* -0 > +0 is false: +0 kept */
  if (cols > 2) v[cols - 2] = -0.0f, x[(rows - 1) * ldx + cols - 2] = 0.0f; /* and -0 kept against +0 */
  /* SCALE, out of place, then in place */
  for (size_t q = 0; q < rows * ldy; q++) y[q] = want[q] = (float)q;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) want[r * ldy + c] = x[r * ldx + c] * v[c];
  uk->rows_cols(ATTN_COLS_SCALE, rows, cols, y, ldy, x, ldx, v);
  tu_assert_same_bits("rows_cols scale", want, y, rows * ldy * sizeof(float));
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) want[r * ldy + c] = y[r * ldy + c] * v[c];
  uk->rows_cols(ATTN_COLS_SCALE, rows, cols, y, ldy, y, ldy, v);
  tu_assert_same_bits("rows_cols scale in place", want, y, rows * ldy * sizeof(float));
  /* MAX */
  memcpy(wv, v, cols * sizeof(float));
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) wv[c] = x[r * ldx + c] > wv[c] ? x[r * ldx + c] : wv[c];
  uk->rows_cols(ATTN_COLS_MAX, rows, cols, NULL, 0, x, ldx, v);
  tu_assert_same_bits("rows_cols max", wv, v, cols * sizeof(float));
  gcheck_free(x);
  gcheck_free(y);
  gcheck_free(v);
  free(want), free(wv);
}
END_TEST

/* ---- GAU's relu^2 block step: bias scalar / strided (negative stride too), masking, counts ---- */
/* Loop index 0..7: 1 x 1 .. 36 x 22 with padding (ld = nq + 3); 8..10: one contiguous column
 * (nq = ld = 1, a decode step's own path) of 3, 16 and 37 keys. Each mode runs again with the
 * statistics (from nonzero starting sums, stride nq + 1): ST and the counts the same bits, and
 * the sums of w, w^2 and w log w added over the column's weights (NaN where one is NaN). */
START_TEST(gau_block_steps) {
  const size_t row_nk[] = {3, 16, 37};
  const int row = _i >= 8;
  const size_t nk = row ? row_nk[_i - 8] : 1 + (size_t)_i * 5, nq = row ? 1 : 1 + (size_t)_i * 3;
  const size_t ld = row ? 1 : nq + 3, lds = nq + 1;
  float *st = galloc(nk * ld), *cnt = galloc(nq), *in = malloc(nk * ld * sizeof(float));
  float *st2 = galloc(nk * ld), *cnt2 = galloc(nq), *sums = galloc(3 * lds);
  float *bias = malloc((nk + nq + 8) * sizeof(float));
  for (size_t e = 0; e < nk + nq + 8; e++) bias[e] = 3.0f * frand();
  for (int mode = 0; mode < 6; mode++) { /* bias: scalar, stride +1 (rows apart by nq), stride -1; masked or not */
    const int masked = mode % 2, kind = mode / 2;
    for (size_t j = 0; j < nk; j++)
      for (size_t r = 0; r < nq; r++) {
        float x = 4.0f * frand();
        if ((j + 2 * r) % 7 == 3) x = -INFINITY; /* masked (or, unmasked, a non-finite input) */
        if ((j * 3 + r) % 11 == 5) x = NAN;
        in[j * ld + r] = st[j * ld + r] = st2[j * ld + r] = x;
      }
    for (size_t r = 0; r < nq; r++) cnt[r] = cnt2[r] = (float)r;
    for (size_t e = 0; e < 3 * lds; e++) sums[e] = e % lds < nq ? 0.5f * (float)(e / lds + 1) : 7.0f;
    const float beta = -0.7f;
    const float *b = kind == 0 ? NULL : kind == 1 ? bias : bias + nk + 4;
    const ptrdiff_t bld = kind == 0 ? 0 : kind == 1 ? 1 : -1;
    uk->gau_block(nk, nq, st, ld, beta, b, bld, cnt, NULL, 0, masked);
    uk->gau_block(nk, nq, st2, ld, beta, b, bld, cnt2, sums, lds, masked);
    tu_assert_same_bits("GAU weights with statistics", st, st2, nk * ld * sizeof(float));
    tu_assert_same_bits("GAU counts with statistics", cnt, cnt2, nq * sizeof(float));
    for (size_t r = 0; r < nq; r++) {
      double want_cnt = (double)r, ws[3] = {0.5, 1.0, 1.5}, mag[3] = {0.5, 1.0, 1.5};
      for (size_t j = 0; j < nk; j++) {
        const float x = in[j * ld + r];
        const float bb = b ? b[(ptrdiff_t)j * bld + (ptrdiff_t)r] : beta;
        const double y = (double)(x + bb); /* the kernel's float sum: the square is then within 1 ulp */
        double ref = isnan(y) ? NAN : y > 0 ? y * y : 0.0;
        if (x == -INFINITY) ref = masked ? 0.0 : NAN;
        want_cnt += !(masked && x == -INFINITY);
        const double got = st[j * ld + r];
        ck_assert_msg(isnan(ref) ? isnan(got) : fabs(got - ref) <= 1e-6 * fabs(ref), "mode %d (%zu,%zu): %g vs %g",
                      mode, j, r, got, ref);
        const double w = got, lw = w > 0 ? w * log(w) : w == 0 ? 0.0 : NAN; /* the kernel's own weight */
        ws[0] += w, ws[1] += w * w, ws[2] += lw;
        mag[0] += fabs(w), mag[1] += w * w, mag[2] += fabs(lw) + w * (1.0 + fabs(log(fmax(w, 1e-30))));
      }
      ck_assert_msg(cnt[r] == (float)want_cnt, "mode %d count %zu: %g vs %g", mode, r, cnt[r], want_cnt);
      /* fp32 sums of nk + 1 terms (each within a few u, log's 4u) relative to their magnitudes */
      for (size_t i = 0; i < 3; i++) {
        const double got = sums[i * lds + r];
        ck_assert_msg(isnan(ws[i]) ? isnan(got) : fabs(got - ws[i]) <= (double)(nk + 8) * 6e-8 * mag[i],
                      "mode %d sum %zu col %zu: %.9g vs %.9g", mode, i, r, got, ws[i]);
      }
    }
    for (size_t e = 0; e < 3 * lds; e++)
      if (e % lds >= nq) ck_assert_msg(sums[e] == 7.0f, "sums padding %zu", e);
  }
  free(in), free(bias);
  float *bufs[] = {st, cnt, st2, cnt2, sums};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gcheck_free(bufs[i]);
}
END_TEST

/* ---- FAVOR+ random matrix (src/core/favor_rng.c): its log, golden bits, structure, statistics ---- */
/* W from the generator, in a guarded buffer; the scratch is guarded too, so a generator that writes
 * past m x d floats or past attn_favor_scratch_doubles(d) doubles fails here. */
static float *favor_w(size_t m, size_t d, uint64_t seed, int sqrt_d) {
  const size_t nd = attn_favor_scratch_doubles(d);
  ck_assert(nd > 0);
  double *scratch = tu_alloc(nd * sizeof(double), 0);
  float *w = galloc(m * d);
  attn_favor_generate(m, d, seed, sqrt_d, w, scratch);
  tu_assert_guards("favor scratch", scratch);
  tu_free(scratch);
  return w;
}
static double dot_f(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t k = 0; k < n; k++) s += (double)a[k] * b[k];
  return s;
}

START_TEST(favor_log_vs_libm) {
  /* Within 2 ulp of libm's log (relative 4.5e-16; the log measures 0.8 ulp against logl): powers
   * of two times mantissas spread over [1, 2) for exponents -1022 .. 1023, x = 1 +- k 2^-52 and
   * 1 +- 2^-p (where f = x - 1 is tiny and the log is f itself), both sides of sqrt(2), and a few
   * subnormals. log(1) is exactly 0. */
  double worst = 0, worst_x = 0;
  int count = 0;
  for (int e = -1022; e <= 1023; e += 3)
    for (int j = 0; j < 48; j++) {
      const unsigned frac = ((unsigned)j * 7919u + (unsigned)(e + 1022) * 104729u) % 4096u;
      const double x = ldexp(1.0 + (double)frac / 4096 + j * 0x1p-40, e);
      const double ref = log(x), rel = fabs(attn_favor_log(x) - ref) / fabs(ref);
      count++;
      if (ref != 0 && !(rel <= worst)) {
        worst = rel;
        worst_x = x;
      }
    }
  for (int k = 1; k <= 4000; k++) {
    const double xs[] = {1.0 + k * 0x1p-52,
                         1.0 - k * 0x1p-53,
                         1.0 + ldexp(1.0, -(k % 53)) * (1 + k * 0x1p-30),
                         1.0 - ldexp(1.0, -1 - (k % 52)),
                         M_SQRT2 + (k - 2000) * 0x1p-50,
                         ldexp(k, -1074)};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
      const double ref = log(xs[i]), rel = fabs(attn_favor_log(xs[i]) - ref) / fabs(ref);
      count++;
      if (!(rel <= worst)) {
        worst = rel;
        worst_x = xs[i];
      }
    }
  }
  ck_assert_msg(worst <= 4.5e-16, "log(%a) = %a, libm %a, rel error %.3g", worst_x, attn_favor_log(worst_x),
                log(worst_x), worst);
  ck_assert(count > 30000 && worst > 0); /* the comparison really ran */
  ck_assert(attn_favor_log(1.0) == 0.0);
}
END_TEST

/* FNV-1a (64-bit) over the floats' bit patterns, each taken least significant byte first (the
 * same on every platform). */
static uint64_t favor_fnv1a(const float *w, size_t n) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (size_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, w + i, sizeof b);
    for (int k = 0; k < 4; k++) {
      h ^= (b >> (8 * k)) & 0xffu;
      h *= UINT64_C(0x100000001b3);
    }
  }
  return h;
}

START_TEST(favor_golden_bits) {
  /* Produced by this implementation on x86-64 (GCC 12 -O3 and -O0, Clang 14 -O3 and
   * -march=native all agree) when the generator was written; the same bits must come out on
   * every platform (CI runs this suite on AArch64 under qemu). A change here changes every
   * stored W: the generator is a documented format. Elements: first, second, row 1, middle two,
   * last row, last. */
  static const struct {
    uint64_t seed;
    size_t m, d;
    int sqrt_d;
    uint64_t fnv;
    size_t at[7];
    uint32_t bits[7];
  } cases[] = {
      {42,
       10,
       4,
       0,
       UINT64_C(0x0fb49e883326762b),
       {0, 1, 4, 20, 23, 36, 39},
       {0xc0097b25, 0xbf1fed65, 0x3f3931dc, 0x3fe17f41, 0xbe96dabf, 0xbf5fb463, 0x3f8e517f}},
      {7,
       70,
       64,
       1,
       UINT64_C(0x413f39fc11912ba6),
       {0, 1, 64, 2240, 2243, 4416, 4479},
       {0x3f7b8170, 0xbf8ab6a4, 0x3ec148c1, 0x3fec19e8, 0x3fa3d730, 0x3efb260a, 0x3e41956b}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float *w = favor_w(cases[c].m, cases[c].d, cases[c].seed, cases[c].sqrt_d);
    for (size_t i = 0; i < 7; i++) {
      uint32_t b;
      memcpy(&b, w + cases[c].at[i], sizeof b);
      ck_assert_msg(b == cases[c].bits[i], "seed %llu: W[%zu] = %a (0x%08x), want 0x%08x",
                    (unsigned long long)cases[c].seed, cases[c].at[i], w[cases[c].at[i]], b, cases[c].bits[i]);
    }
    const uint64_t h = favor_fnv1a(w, cases[c].m * cases[c].d);
    ck_assert_msg(h == cases[c].fnv, "seed %llu: FNV-1a %016llx, want %016llx", (unsigned long long)cases[c].seed,
                  (unsigned long long)h, (unsigned long long)cases[c].fnv);
    gcheck_free(w);
  }
}
END_TEST

START_TEST(favor_redraw_bits) {
  /* Seeds where the generator redraws a row (it fell within 1e-3 of the span of the rows before
   * it), found by a search over seeds with the row-at-a-time generator of 0.6.0, whose W these
   * hashes are. The generator now draws rows eight at a time ahead of their projections, and a
   * redraw must take the Gaussians the rows after it had drawn, exactly as one row at a time:
   * d = 3, row 1 redrawn (row 2's early draws dropped; chi and sqrt(d) norms, the second call
   * with a cut second block); d = 9, row 7 redrawn, the last of a full group of eight; d = 10,
   * row 8 redrawn after a full group (row 9's early draws dropped), a cut second block. */
  static const struct {
    uint64_t seed;
    size_t m, d;
    int sqrt_d;
    uint64_t fnv;
  } cases[] = {
      {137086, 3, 3, 0, UINT64_C(0xa7ed2fe33a9cea1d)},
      {137086, 5, 3, 1, UINT64_C(0xbef3763263518da6)},
      {12042, 9, 9, 0, UINT64_C(0xd4f5d65c4055d60b)},
      {13609, 13, 10, 0, UINT64_C(0x84e67c49655280b2)},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float *w = favor_w(cases[c].m, cases[c].d, cases[c].seed, cases[c].sqrt_d);
    const uint64_t h = favor_fnv1a(w, cases[c].m * cases[c].d);
    ck_assert_msg(h == cases[c].fnv, "seed %llu, m %zu, d %zu: FNV-1a %016llx, want %016llx",
                  (unsigned long long)cases[c].seed, cases[c].m, cases[c].d, (unsigned long long)h,
                  (unsigned long long)cases[c].fnv);
    gcheck_free(w);
  }
}
END_TEST

START_TEST(favor_blocks_orthogonal) {
  /* m = 3d + 5: three full blocks and one cut at 5 rows. Rows of one block are orthogonal (the
   * float rounding of W leaves about 1e-7 of |w_r||w_s|); rows of different blocks are not (they
   * are independent draws: their largest |cosine| is near 1/2 or more). SQRT_D: every row norm is
   * sqrt(d). */
  const size_t ds[] = {16, 64};
  for (size_t di = 0; di < 2; di++)
    for (int sq = 0; sq < 2; sq++) {
      const size_t d = ds[di], m = 3 * d + 5;
      float *w = favor_w(m, d, 1000 + di, sq);
      double worst = 0, cross = 0, norm_dev = 0;
      for (size_t r = 0; r < m; r++) {
        const double nr = sqrt(dot_f(w + r * d, w + r * d, d));
        norm_dev = fmax(norm_dev, fabs(nr / sqrt((double)d) - 1));
        for (size_t s = r + 1; s < m; s++) {
          const double ns = sqrt(dot_f(w + s * d, w + s * d, d));
          const double cosine = fabs(dot_f(w + r * d, w + s * d, d)) / (nr * ns);
          if (r / d == s / d)
            worst = fmax(worst, cosine);
          else
            cross = fmax(cross, cosine);
        }
      }
      ck_assert_msg(worst <= 1e-5, "d %zu sqrt_d %d: |cos| %.3g within a block", d, sq, worst);
      ck_assert_msg(cross > 0.1, "d %zu sqrt_d %d: |cos| at most %.3g across blocks", d, sq, cross);
      if (sq) ck_assert_msg(norm_dev <= 1e-6, "d %zu: a row norm is sqrt(d) (1 %+.3g)", d, norm_dev);
      gcheck_free(w);
    }
}
END_TEST

START_TEST(favor_chi_norms) {
  /* SEED_CHI row norms: |w_r|^2 is chi-squared with d degrees of freedom (mean d, variance 2d),
   * independently for every row. Over 200 seeds of m = d = 32, N = 6400 rows: the sample mean has
   * standard error sqrt(2d / N) = 0.1 and must be within 4 of them of d; the sample variance
   * (standard error sqrt((mu4 - (2d)^2) / N) = 1.23 with mu4 = 12 d (d + 4), the chi-squared
   * fourth central moment) within 4 of them of 2d, which a constant norm (variance 0) fails.
   * Fixed seeds: measured mean 32.011 (0.11 SE off), variance 63.68 (0.26 SE off); chi norms with
   * d - 1 degrees of freedom fail the mean by 10 SE, norms 3% too large by 20 SE. */
  enum { D = 32, SEEDS = 200 };
  const double n = (double)D * SEEDS;
  double sum = 0, sum2 = 0;
  for (uint64_t seed = 0; seed < SEEDS; seed++) {
    float *w = favor_w(D, D, seed, 0);
    for (size_t r = 0; r < D; r++) {
      const double q = dot_f(w + r * D, w + r * D, D);
      sum += q;
      sum2 += q * q;
    }
    gcheck_free(w);
  }
  const double mean = sum / n, var = (sum2 - n * mean * mean) / (n - 1);
  const double se_mean = sqrt(2.0 * D / n), se_var = sqrt((12.0 * D * (D + 4) - 4.0 * D * D) / n);
  ck_assert_msg(fabs(mean - D) <= 4 * se_mean, "mean |w|^2 %.4f, want %d +- %.3f", mean, D, 4 * se_mean);
  ck_assert_msg(fabs(var - 2.0 * D) <= 4 * se_var, "variance of |w|^2 %.3f, want %d +- %.3f", var, 2 * D, 4 * se_var);
}
END_TEST

START_TEST(favor_prefix_and_seeds) {
  enum { D = 16, M = 100, MP = 37 };
  for (int sq = 0; sq < 2; sq++) {
    /* W(37) is the first 37 rows of W(100), bit for bit (the cut block draws everything). */
    float *big = favor_w(M, D, 5, sq), *small = favor_w(MP, D, 5, sq);
    tu_assert_same_bits("W(37) vs W(100)", small, big, sizeof(float) * MP * D);
    /* Another seed: another matrix, element by element. */
    float *other = favor_w(M, D, 6, sq);
    size_t same = 0;
    for (size_t i = 0; i < M * D; i++) same += other[i] == big[i];
    ck_assert_msg(same <= M * D / 100, "seeds 5 and 6 share %zu of %d elements", same, M * D);
    gcheck_free(big);
    gcheck_free(small);
    gcheck_free(other);
  }
  /* The norms are drawn after the block's directions, so the two sources share the directions of
   * block 0 and then part ways (the chi norms consumed Gaussians). */
  float *chi = favor_w(2 * D, D, 9, 0), *sqd = favor_w(2 * D, D, 9, 1);
  for (size_t r = 0; r < 2 * D; r++) {
    const double nc = sqrt(dot_f(chi + r * D, chi + r * D, D)), ns = sqrt(dot_f(sqd + r * D, sqd + r * D, D));
    const double cosine = dot_f(chi + r * D, sqd + r * D, D) / (nc * ns);
    if (r < D)
      ck_assert_msg(cosine >= 1 - 1e-9, "row %zu: chi and sqrt_d directions differ (cos %.12f)", r, cosine);
    else
      ck_assert_msg(cosine < 0.99, "row %zu: block 1 repeats across sources (cos %.12f)", r, cosine);
  }
  gcheck_free(chi);
  gcheck_free(sqd);
  /* d = 1: every orthonormal row is +-1, so SQRT_D gives +-1 exactly, with both signs. */
  float *w1 = favor_w(64, 1, 3, 1);
  size_t pos = 0;
  for (size_t r = 0; r < 64; r++) {
    ck_assert_msg(fabsf(w1[r]) == 1.0f, "d = 1: W[%zu] = %g", r, w1[r]);
    pos += w1[r] > 0;
  }
  ck_assert(pos > 0 && pos < 64);
  gcheck_free(w1);
}
END_TEST

START_TEST(favor_unbiased) {
  /* FAVOR+ (positive random features): phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m), x' = sqrt(scale) x,
   * scale = 1/sqrt(d), has E[phi(q).phi(k)] = exp(q'.k') = exp(q.k / sqrt(d)) because every row of
   * W is marginally N(0, I) (orthogonal directions, chi norms). d = 16, m = 64, computed in double
   * from the float W; pairs with |q|, |k| near 2 at several angles; the mean over 500 fixed seeds
   * must be within 3 standard errors (sample sd / sqrt(500)) of the exact value. Measured SE
   * 0.083, 0.012, 0.0036 (3.7, 1.2, 0.63 % of exp(q'.k') = 2.23, 1, 0.57; the first pair's
   * estimator is heavy-tailed, |q' + k'|^2 = 3.6), the means 0.82, 0.56, 1.67 SE off. Biased
   * matrices fail: norms 3% too large or small, chi with d - 1 degrees, or constant norms sqrt(d)
   * (whose rows are not Gaussian) fail it on at least two of the three pairs, by 3.3 to 10 SE. */
  enum { D = 16, M = 64, SEEDS = 500, PAIRS = 3 };
  const double nq[PAIRS] = {2.0, 2.0, 1.5}, nk[PAIRS] = {2.0, 2.0, 2.5}, cs[PAIRS] = {0.8, 0.0, -0.6};
  double a[D], b[D], an = 0, bn = 0, ab = 0;
  for (int i = 0; i < D; i++) { /* two orthonormal directions */
    a[i] = sin(1.0 + i);
    b[i] = cos(2.0 + 3.0 * i);
    an += a[i] * a[i];
  }
  for (int i = 0; i < D; i++) {
    a[i] /= sqrt(an);
    ab += a[i] * b[i];
  }
  for (int i = 0; i < D; i++) b[i] -= ab * a[i];
  for (int i = 0; i < D; i++) bn += b[i] * b[i];
  for (int i = 0; i < D; i++) b[i] /= sqrt(bn);
  double qs[PAIRS][D], ks[PAIRS][D], want[PAIRS]; /* already scaled: q' = sqrt(scale) q */
  const double rs = sqrt(1.0 / sqrt((double)D));
  for (int p = 0; p < PAIRS; p++) {
    double qk = 0;
    for (int i = 0; i < D; i++) {
      qs[p][i] = rs * nq[p] * a[i];
      ks[p][i] = rs * nk[p] * (cs[p] * a[i] + sqrt(1 - cs[p] * cs[p]) * b[i]);
      qk += qs[p][i] * ks[p][i];
    }
    want[p] = exp(qk);
  }
  double sum[PAIRS] = {0}, sum2[PAIRS] = {0};
  for (uint64_t seed = 0; seed < SEEDS; seed++) {
    float *w = favor_w(M, D, 100 + seed, 0);
    for (int p = 0; p < PAIRS; p++) {
      double q2 = 0, k2 = 0, est = 0;
      for (int i = 0; i < D; i++) {
        q2 += qs[p][i] * qs[p][i];
        k2 += ks[p][i] * ks[p][i];
      }
      for (size_t r = 0; r < M; r++) {
        double wq = 0, wk = 0;
        for (int i = 0; i < D; i++) {
          wq += (double)w[r * D + i] * qs[p][i];
          wk += (double)w[r * D + i] * ks[p][i];
        }
        est += exp(wq - q2 / 2) * exp(wk - k2 / 2) / M; /* phi_r(q) phi_r(k), sqrt(m)^2 = m */
      }
      sum[p] += est;
      sum2[p] += est * est;
    }
    gcheck_free(w);
  }
  for (int p = 0; p < PAIRS; p++) {
    const double mean = sum[p] / SEEDS, sd = sqrt((sum2[p] - SEEDS * mean * mean) / (SEEDS - 1));
    const double se = sd / sqrt((double)SEEDS);
    ck_assert_msg(se > 0 && fabs(mean - want[p]) <= 3 * se, "pair %d: mean %.6f, want %.6f +- 3 x %.6f", p, mean,
                  want[p], se);
  }
}
END_TEST

/* ---- K/V conversion (f16_cvt, bf16_cvt): every 16-bit pattern against tests/common/half_ref.h ---- */
/* One float against the exact value of its pattern: equal bits for every number (so -0 stays -0
 * and a subnormal keeps its value), NaN for a NaN pattern (its payload is not checked). */
static void cvt_check(const char *what, uint16_t h, float got, double want) {
  if (isnan(want)) {
    ck_assert_msg(isnan(got), "%s 0x%04x: got %a, want NaN", what, (unsigned)h, (double)got);
    return;
  }
  const float w = (float)want; /* exact: every fp16 / bf16 value is a float */
  ck_assert_msg(memcmp(&got, &w, sizeof w) == 0 && (double)w == want, "%s 0x%04x: got %a, want %a", what, (unsigned)h,
                (double)got, want);
}

/* All 65536 patterns as 256 rows of 256 (contiguous), then strided odd shapes (a row stride
 * above the width, widths below, at and above the path's vector and its double) with guard
 * zones: the kernel writes exactly rows x cols floats and converts tails as the bulk. */
START_TEST(cvt_all_patterns) {
  const int bf = _i;
  attn_f16_cvt_fn *cvt = bf ? uk->bf16_cvt : uk->f16_cvt;
  const char *what = bf ? "bf16" : "f16";
  uint16_t *x = malloc(65536 * sizeof(uint16_t));
  ck_assert_ptr_nonnull(x);
  for (uint32_t i = 0; i < 65536; i++) x[i] = (uint16_t)i;
  float *y = galloc(65536);
  cvt(256, 256, x, 256, y);
  for (uint32_t i = 0; i < 65536; i++)
    cvt_check(what, (uint16_t)i, y[i], bf ? hr_bf16_value((uint16_t)i) : hr_f16_value((uint16_t)i));
  gcheck_free(y);
  static const size_t widths[] = {1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 65, 128};
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
    const size_t cols = widths[wi], rows = 5, ld = cols + 3;
    const uint16_t *src = x + (wi * 4099) % (65536 - rows * ld); /* a spread of patterns, odd offsets */
    float *o = galloc(rows * cols);
    cvt(rows, cols, src, ld, o);
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        const uint16_t h = src[r * ld + c];
        cvt_check(what, h, o[r * cols + c], bf ? hr_bf16_value(h) : hr_f16_value(h));
      }
    gcheck_free(o);
  }
  free(x);
}
END_TEST

/* The test-side converter itself: rounding ties to even, overflow, subnormals, round trips. */
START_TEST(cvt_reference_self_check) {
  ck_assert(hr_f16_round(1.0 + ldexp(1.0, -11)) == 1.0);                       /* tie: even (down) */
  ck_assert(hr_f16_round(1.0 + 3 * ldexp(1.0, -11)) == 1.0 + ldexp(1.0, -9));  /* tie: even (up) */
  ck_assert(hr_f16_round(65519.0) == 65504.0 && isinf(hr_f16_round(65520.0))); /* overflow at 65520 */
  ck_assert(hr_f16_round(ldexp(1.0, -25)) == 0.0 && hr_f16_round(ldexp(1.5, -25)) == ldexp(1.0, -24));
  for (uint32_t i = 0; i < 65536; i++) {
    const double v = hr_f16_value((uint16_t)i);
    if (isnan(v)) continue;
    ck_assert_msg(hr_f16_round(v) == v && hr_f16_bits(v) == i, "f16 0x%04x", (unsigned)i);
  }
  ck_assert_uint_eq(hr_bf16_bits(1.0f + 0x1p-8f), 0x3f80); /* tie: even (down) */
  ck_assert_uint_eq(hr_bf16_bits(1.0f + 0x3p-8f), 0x3f82); /* tie: even (up) */
  ck_assert_uint_eq(hr_bf16_bits(FLT_MAX), 0x7f80);        /* rounds up to inf */
}
END_TEST

/* ---- few query rows (few_scores, few_pv): K/V in place as fp32, fp16 or bf16 ---- */
/* Shapes around every tile edge (4 keys, up to 4 rows, 4 vectors of columns, the vector's tail),
 * strides above the widths, guard zones around both outputs (padding between rows untouched).
 * Against a double loop over the rounded values, with the GEMM's bound; then the claims the
 * engine relies on: a half call gives the bits of the fp32 call on the converted values, and
 * one head's few_pv gives the GEMM's bits (check_kv_half's bit-for-bit test needs both). */
static uint16_t few_bits(attn_dtype ty, float x) {
  return ty == ATTN_F16 ? hr_f16_bits(hr_f16_round((double)x)) : hr_bf16_bits(x);
}
static double few_value(attn_dtype ty, uint16_t h) { return ty == ATTN_F16 ? hr_f16_value(h) : hr_bf16_value(h); }

/* n elements of type ty from x (rounded to it; x becomes the rounded values): a float buffer, or
 * the 16-bit patterns in *h. */
static const void *few_store(attn_dtype ty, float *x, size_t n, uint16_t **h) {
  *h = NULL;
  if (ty == ATTN_F32) return x;
  *h = malloc((n + 1) * sizeof(uint16_t));
  ck_assert_ptr_nonnull(*h);
  for (size_t i = 0; i < n; i++) (*h)[i] = few_bits(ty, x[i]), x[i] = (float)few_value(ty, (*h)[i]);
  return *h;
}

static void few_case(attn_dtype ty, size_t nk, size_t nq, size_t d, size_t dv, int scaled) {
  const size_t ldk = d + 3, ldq = d + 1, ldst = nq + 2, ldp = nq + 1, ldv = dv + 5, lda = dv + 3;
  const size_t nkk = nk * ldk + 1, nvv = nk * ldv + 1;
  float *k = malloc(nkk * sizeof(float)), *v = malloc(nvv * sizeof(float)), *q = malloc(nq * ldq * sizeof(float));
  float *pt = malloc((nk * ldp + 1) * sizeof(float)), *al = malloc(nq * sizeof(float));
  float *st = galloc(nk * ldst + 1), *acc = galloc(nq * lda), *acc0 = malloc(nq * lda * sizeof(float));
  for (size_t i = 0; i < nkk; i++) k[i] = frand();
  for (size_t i = 0; i < nvv; i++) v[i] = frand();
  for (size_t i = 0; i < nq * ldq; i++) q[i] = frand();
  for (size_t i = 0; i < nk * ldp + 1; i++) pt[i] = frand() + 1.0f; /* weights in [0, 2) */
  for (size_t i = 0; i < nq; i++) al[i] = frand();
  for (size_t i = 0; i < nk * ldst + 1; i++) st[i] = 7.0f;
  for (size_t i = 0; i < nq * lda; i++) acc[i] = acc0[i] = frand();
  uint16_t *kh, *vh;
  const void *kx = few_store(ty, k, nkk, &kh), *vx = few_store(ty, v, nvv, &vh);
  const float *alpha = scaled ? al : NULL;
  uk->few_scores(ty, NULL, nk, nq, d, kx, ldk, q, ldq, st, ldst);
  uk->few_pv(ty, NULL, nq, dv, nk, pt, ldp, vx, ldv, acc, lda, alpha);
  for (size_t j = 0; j < nk; j++)
    for (size_t r = 0; r < ldst; r++) {
      const float got = st[j * ldst + r];
      if (r >= nq) { /* padding */
        ck_assert_msg(got == 7.0f, "few_scores wrote padding (%zu, %zu)", j, r);
        continue;
      }
      double ref = 0, mag = 0;
      for (size_t p = 0; p < d; p++)
        ref += (double)k[j * ldk + p] * q[r * ldq + p], mag += fabs(k[j * ldk + p] * q[r * ldq + p]);
      const double tol = (double)(d + 2) * 5.960464477539063e-08 * mag + 1e-30;
      ck_assert_msg(fabs(got - ref) <= tol, "few_scores %d nk=%zu nq=%zu d=%zu at (%zu,%zu): %a, want %a", (int)ty, nk,
                    nq, d, j, r, (double)got, ref);
    }
  for (size_t r = 0; r < nq; r++)
    for (size_t c = 0; c < lda; c++) {
      const float got = acc[r * lda + c];
      if (c >= dv) {
        ck_assert_msg(memcmp(&got, &acc0[r * lda + c], sizeof got) == 0, "few_pv wrote padding (%zu, %zu)", r, c);
        continue;
      }
      const double old = (double)acc0[r * lda + c] * (scaled ? (double)al[r] : 1.0);
      double ref = old, mag = fabs(old);
      for (size_t j = 0; j < nk; j++)
        ref += (double)pt[j * ldp + r] * v[j * ldv + c], mag += fabs(pt[j * ldp + r] * v[j * ldv + c]);
      const double tol = (double)(nk + 2) * 5.960464477539063e-08 * mag + 1e-30;
      ck_assert_msg(fabs(got - ref) <= tol, "few_pv %d nq=%zu dv=%zu nk=%zu at (%zu,%zu): %a, want %a", (int)ty, nq, dv,
                    nk, r, c, (double)got, ref);
    }
  /* the same bits: fp32 on the rounded values (scores, P V), and the GEMM (P V) */
  float *st2 = malloc((nk * ldst + 1) * sizeof(float)), *acc2 = malloc(nq * lda * sizeof(float));
  memcpy(st2, st, (nk * ldst + 1) * sizeof(float));
  memcpy(acc2, acc0, nq * lda * sizeof(float));
  uk->few_scores(ATTN_F32, NULL, nk, nq, d, k, ldk, q, ldq, st2, ldst);
  uk->few_pv(ATTN_F32, NULL, nq, dv, nk, pt, ldp, v, ldv, acc2, lda, alpha);
  ck_assert_msg(memcmp(st2, st, (nk * ldst + 1) * sizeof(float)) == 0, "few_scores %d: not the fp32 bits", (int)ty);
  ck_assert_msg(memcmp(acc2, acc, nq * lda * sizeof(float)) == 0, "few_pv %d: not the fp32 bits", (int)ty);
  memcpy(acc2, acc0, nq * lda * sizeof(float));
  uk->gemm(nq, dv, nk, pt, 1, ldp, v, ldv, acc2, lda, alpha, 1);
  ck_assert_msg(memcmp(acc2, acc, nq * lda * sizeof(float)) == 0, "few_pv %d nq=%zu dv=%zu nk=%zu: not the GEMM's bits",
                (int)ty, nq, dv, nk);
  gcheck_free(st);
  gcheck_free(acc);
  free(st2), free(acc2), free(acc0), free(k), free(v), free(q), free(pt), free(al), free(kh), free(vh);
}

/* Several heads at once (attn_few_heads): heads side by side in a token's row (K and V), with
 * their own q, ST, P, acc and alpha regions; per head, the scores are the bits of a one-head call
 * and P V follows the float64 loop; a half call gives the fp32 call's bits; guard zones around
 * every output region. */
static void few_heads_case(attn_dtype ty, size_t nh, size_t nk, size_t nq, size_t d, size_t dv, int scaled) {
  const size_t hk = d + 1, ldk = nh * hk + 2, hv = dv + 2, ldv = nh * hv + 1;
  const size_t ldq = d + 1, hq = nq * ldq + 5, ldst = nq + 1, hs = nk * ldst + 3;
  const size_t ldp = nq + 2, hp = nk * ldp + 1, lda = dv + 3, ha = nq * lda + 4, hal = nq + 1;
  const size_t nkk = nk * ldk + 1, nvv = nk * ldv + 1;
  float *k = malloc(nkk * sizeof(float)), *v = malloc(nvv * sizeof(float)), *q = malloc(nh * hq * sizeof(float));
  float *pt = malloc((nh * hp + 1) * sizeof(float)), *al = malloc(nh * hal * sizeof(float));
  float *st = galloc(nh * hs), *acc = galloc(nh * ha), *acc0 = malloc(nh * ha * sizeof(float));
  float *one = malloc((hs + 1) * sizeof(float));
  for (size_t i = 0; i < nkk; i++) k[i] = frand();
  for (size_t i = 0; i < nvv; i++) v[i] = frand();
  for (size_t i = 0; i < nh * hq; i++) q[i] = frand();
  for (size_t i = 0; i < nh * hp + 1; i++) pt[i] = frand() + 1.0f;
  for (size_t i = 0; i < nh * hal; i++) al[i] = frand();
  for (size_t i = 0; i < nh * hs; i++) st[i] = 7.0f;
  for (size_t i = 0; i < nh * ha; i++) acc[i] = acc0[i] = frand();
  uint16_t *kh, *vh;
  const void *kx = few_store(ty, k, nkk, &kh), *vx = few_store(ty, v, nvv, &vh);
  const attn_few_heads hdk = {nh, hk, hq, hs, 0, 0, 0, 0}, hdv = {nh, 0, 0, 0, hp, hv, ha, hal};
  uk->few_scores(ty, &hdk, nk, nq, d, kx, ldk, q, ldq, st, ldst);
  uk->few_pv(ty, &hdv, nq, dv, nk, pt, ldp, vx, ldv, acc, lda, scaled ? al : NULL);
  const size_t es = ty == ATTN_F32 ? sizeof(float) : sizeof(uint16_t);
  for (size_t h = 0; h < nh; h++) {
    for (size_t i = 0; i < hs; i++) one[i] = 7.0f;
    uk->few_scores(ty, NULL, nk, nq, d, (const char *)kx + h * hk * es, ldk, q + h * hq, ldq, one, ldst);
    ck_assert_msg(memcmp(one, st + h * hs, hs * sizeof(float)) == 0, "few_scores %d heads=%zu: head %zu differs",
                  (int)ty, nh, h);
    for (size_t r = 0; r < nq; r++)
      for (size_t c = 0; c < lda; c++) {
        const float got = acc[h * ha + r * lda + c], was = acc0[h * ha + r * lda + c];
        if (c >= dv) {
          ck_assert_msg(memcmp(&got, &was, sizeof got) == 0, "few_pv heads wrote padding (%zu, %zu, %zu)", h, r, c);
          continue;
        }
        const double old = (double)was * (scaled ? (double)al[h * hal + r] : 1.0);
        double ref = old, mag = fabs(old);
        for (size_t j = 0; j < nk; j++) {
          const double t = (double)pt[h * hp + j * ldp + r] * v[j * ldv + h * hv + c];
          ref += t, mag += fabs(t);
        }
        const double tol = (double)(nk + 3) * 5.960464477539063e-08 * mag + 1e-30;
        ck_assert_msg(fabs(got - ref) <= tol, "few_pv %d heads=%zu nq=%zu dv=%zu nk=%zu at (%zu,%zu,%zu): %a, want %a",
                      (int)ty, nh, nq, dv, nk, h, r, c, (double)got, ref);
      }
  }
  float *acc2 = malloc(nh * ha * sizeof(float));
  memcpy(acc2, acc0, nh * ha * sizeof(float));
  uk->few_pv(ATTN_F32, &hdv, nq, dv, nk, pt, ldp, v, ldv, acc2, lda, scaled ? al : NULL);
  ck_assert_msg(memcmp(acc2, acc, nh * ha * sizeof(float)) == 0, "few_pv %d heads: not the fp32 bits", (int)ty);
  gcheck_free(st);
  gcheck_free(acc);
  free(acc2), free(acc0), free(one), free(k), free(v), free(q), free(pt), free(al), free(kh), free(vh);
}

START_TEST(few_rows_heads) {
  const attn_dtype ty = _i == 0 ? ATTN_F32 : _i == 1 ? ATTN_F16 : ATTN_BF16;
  static const size_t nhs[] = {2, 3, 7};
  /* key counts around a head's key steps in P V (8 keys for one row; 32 for several rows on the
   * AVX-512 path): within one step, a step and a tail, several steps and a tail */
  static const size_t nks[] = {1, 5, 8, 17, 40, 64, 97};
  static const size_t nqs[] = {1, 3, 4, 8};
  static const size_t ds[] = {3, 16, 33, 64, 72};
  for (size_t a = 0; a < sizeof nhs / sizeof nhs[0]; a++)
    for (size_t b = 0; b < sizeof nks / sizeof nks[0]; b++)
      for (size_t c = 0; c < sizeof nqs / sizeof nqs[0]; c++)
        few_heads_case(ty, nhs[a], nks[b], nqs[c], ds[(a + b + c) % 5], ds[(a + 2 * b + c + 1) % 5],
                       (int)((a + b + c) % 2));
}
END_TEST

START_TEST(few_rows_shapes) {
  const attn_dtype ty = _i == 0 ? ATTN_F32 : _i == 1 ? ATTN_F16 : ATTN_BF16;
  static const size_t nks[] = {0, 1, 3, 4, 5, 9, 40};
  static const size_t nqs[] = {1, 2, 3, 4, 5, 8, 9};
  static const size_t ds[] = {1, 3, 4, 7, 8, 15, 16, 17, 33, 64, 65, 72};
  for (size_t a = 0; a < sizeof nks / sizeof nks[0]; a++)
    for (size_t b = 0; b < sizeof nqs / sizeof nqs[0]; b++)
      for (size_t c = 0; c < sizeof ds / sizeof ds[0]; c += 1 + (a + b) % 2)
        few_case(ty, nks[a], nqs[b], ds[c], ds[(c + 5) % (sizeof ds / sizeof ds[0])], (int)((a + b + c) % 2));
}
END_TEST

/* ---- selective attention's selection sums: exclusive running sums of relu'd rows ---- */
/* The reference: row jj's first follower (tn for BOS, else d0 + jj clamped to [0, tn]), then
 * fz = run + the relu'd values of the tokens before, in double. */
static size_t sel_first(size_t jj, size_t tn, int64_t d0, int bos) {
  const int64_t d = d0 + (int64_t)jj;
  return bos && jj == 0 ? tn : d <= 0 ? 0 : d < (int64_t)tn ? (size_t)d : tn;
}

/* Every tn 1 .. 67 (each vector tail of every path), 1-5 rows, the first follower before, inside
 * and after the block, BOS or not, rows contiguous (step 1) or a column of a head group (step 3)
 * with padded rows, guard zones around fz and run. Pass 0: multiples of 1/8 in [-4, 4] and run in
 * [0, 8]: every partial sum is exact in float (at most 67 terms of 2^-3 granularity below 2^10),
 * so F must equal the reference bit for bit, whatever the path's order of additions; an off-by-one
 * token, a lost carry or a relu that lets a negative through shows as a whole term. Pass 1:
 * random floats in [-2, 2]: each F is a sum of at most tn + 1 non-negative floats, so any order
 * is within (tn + 1) 2^-24 of the exact sum (the recursive-summation bound; all terms share a
 * sign); that is asserted. Each case runs again with y (F subtracted from every score of the
 * token's group in place, x inside y, step 3 reading the group's middle column). */
START_TEST(select_scan_values) {
  enum { T = 67, STEP = 3, J = 5 };
  const int exact = _i == 0;
  for (size_t tn = 1; tn <= T; tn++)
    for (size_t step = 1; step <= STEP; step += STEP - 1) {
      const size_t jn = 1 + tn % J, ldx = tn * step + 2, col = step / 2; /* x: column col of each group */
      const int64_t d0s[] = {-3, 0, 1, (int64_t)tn / 2, (int64_t)tn - 1, (int64_t)tn + 2};
      float *x = galloc(jn * ldx);
      for (size_t e = 0; e < jn * ldx; e++)
        x[e] = exact ? (float)((int)(tu_rng_next(&rng) % 65) - 32) / 8.0f : tu_rng_range(&rng, -2.0f, 2.0f);
      for (size_t di = 0; di < sizeof d0s / sizeof d0s[0]; di++)
        for (int bos = 0; bos < 2; bos++) {
          float *fz = galloc(jn * tn), *run = galloc(jn), run0[J];
          for (size_t jj = 0; jj < jn; jj++)
            run[jj] = run0[jj] = exact ? (float)(tu_rng_next(&rng) % 65) / 8.0f : tu_rng_range(&rng, 0.0f, 8.0f);
          uk->select_scan(jn, tn, x + col, ldx, step, d0s[di], bos, run, fz, NULL);
          for (size_t jj = 0; jj < jn; jj++) {
            const size_t first = sel_first(jj, tn, d0s[di], bos);
            double acc = run0[jj];
            for (size_t ti = 0; ti <= tn; ti++) {
              const float got = ti < tn ? fz[jj * tn + ti] : run[jj];
              const double tol = exact ? 0.0 : (double)(tn + 1) * 0x1p-24 * acc;
              ck_assert_msg(fabs((double)got - acc) <= tol,
                            "tn %zu step %zu d0 %lld bos %d row %zu token %zu: %.9g, want %.9g", tn, step,
                            (long long)d0s[di], bos, jj, ti, (double)got, acc);
              const float v = ti < tn ? x[jj * ldx + col + ti * step] : 0.0f;
              if (ti >= first && v > 0.0f) acc += v;
            }
          }
          /* again with y: the same F and sums, bit for bit, and every score of each token's group
           * minus its F in place (x read from the tile it updates); the rows' padding untouched */
          float *y = galloc(jn * ldx), *fz2 = galloc(jn * tn), *run2 = galloc(jn);
          memcpy(y, x, jn * ldx * sizeof(float));
          memcpy(run2, run0, jn * sizeof(float));
          uk->select_scan(jn, tn, y + col, ldx, step, d0s[di], bos, run2, fz2, y);
          tu_assert_same_bits("select_scan F with y", fz, fz2, jn * tn * sizeof(float));
          tu_assert_same_bits("select_scan sums with y", run, run2, jn * sizeof(float));
          for (size_t jj = 0; jj < jn; jj++)
            for (size_t e = 0; e < ldx; e++) {
              const size_t ti = e / step;
              const float want = ti < tn ? x[jj * ldx + e] - fz[jj * tn + ti] : x[jj * ldx + e];
              ck_assert_msg(!memcmp(&y[jj * ldx + e], &want, sizeof want),
                            "tn %zu step %zu row %zu element %zu: %.9g, want %.9g", tn, step, jj, e,
                            (double)y[jj * ldx + e], (double)want);
            }
          gcheck_free(y);
          gcheck_free(fz2);
          gcheck_free(run2);
          gcheck_free(fz);
          gcheck_free(run);
        }
      gcheck_free(x);
    }
}
END_TEST

/* Non-finite selections: +inf and NaN reach only the later tokens of their row (their own F
 * leaves them out), -inf (a score from an infinite input) reaches them as NaN, and a NaN or -inf
 * before the row's first follower (a masked pair) is never read into F. */
START_TEST(select_scan_nonfinite) {
  enum { TN = 37, JN = 3 };
  for (size_t k = 0; k < TN; k += 5) {
    float x[JN * TN], fz[JN * TN], run[JN] = {0.5f, 0.5f, 0.5f};
    for (size_t e = 0; e < JN * TN; e++) x[e] = 0.25f;
    x[0 * TN + k] = INFINITY, x[1 * TN + k] = NAN, x[2 * TN + k] = -INFINITY;
    uk->select_scan(JN, TN, x, TN, 1, -2, 0, run, fz, NULL); /* every row followed from token 0 */
    for (size_t ti = 0; ti < TN; ti++) {
      const float a = fz[0 * TN + ti], b = fz[1 * TN + ti], c = fz[2 * TN + ti];
      ck_assert_msg(ti <= k ? isfinite(a) : a == INFINITY, "inf at %zu: token %zu has %g", k, ti, (double)a);
      ck_assert_msg(ti <= k ? isfinite(b) : isnan(b), "NaN at %zu: token %zu has %g", k, ti, (double)b);
      ck_assert_msg(ti <= k ? c == 0.5f + 0.25f * (float)ti : isnan(c), "-inf at %zu: token %zu has %g", k, ti, (double)c);
    }
    ck_assert(run[0] == INFINITY && isnan(run[1]) && isnan(run[2]));
    if (k == 0) continue;
    for (int bad = 0; bad < 2; bad++) {
      x[k - 1] = bad ? -INFINITY : NAN; /* row 0 alone, followed from token k: k - 1 is never read */
      run[0] = 0.5f;
      uk->select_scan(1, TN, x, TN, 1, (int64_t)k, 0, run, fz, NULL);
      for (size_t ti = 0; ti < TN; ti++)
        ck_assert_msg(ti <= k ? fz[ti] == 0.5f : fz[ti] == INFINITY, "%g before the first follower %zu: token %zu has %g",
                      (double)x[k - 1], k, ti, (double)fz[ti]);
    }
  }
}
END_TEST

static Suite *internal_suite(attn_isa active) {
  uk = attn_ukernels_for(active); /* not NULL: tu_main checked that the path runs here */
  tu_rng_seed(&rng, 1);
  Suite *s = suite_create(attn_isa_name(uk->isa));
  TCase *t = tu_tcase("cpu");
  tcase_add_test(t, cpu_decode_recorded);
  tcase_add_test(t, cpu_detect_consistent);
  suite_add_tcase(s, t);
  t = tu_tcase("exp");
  tcase_add_test(t, vexp_error_bound);
  tcase_add_test(t, vexp_edges);
  tcase_add_test(t, vlog_error_bound);
  tcase_add_test(t, logit_opts_values);
  tcase_add_test(t, transpose_values);
  tcase_add_test(t, gate_exp_values);
  tcase_add_loop_test(t, select_scan_values, 0, 2);
  tcase_add_test(t, select_scan_nonfinite);
  suite_add_tcase(s, t);
  t = tu_tcase("cvt");
  tcase_add_loop_test(t, cvt_all_patterns, 0, 2);
  tcase_add_test(t, cvt_reference_self_check);
  tcase_add_loop_test(t, few_rows_shapes, 0, 3);
  tcase_add_loop_test(t, few_rows_heads, 0, 3);
  suite_add_tcase(s, t);
  t = tu_tcase("gemm");
  tcase_add_loop_test(t, gemm_shapes, 0, (int)NGS);
  tcase_add_loop_test(t, gemm_last_columns, 0, 12);
  tcase_add_test(t, gemm_in_place_row);
  suite_add_tcase(s, t);
  t = tu_tcase("softmax_block");
  tcase_add_loop_test(t, softmax_block_steps, 0, 15);
  tcase_add_loop_test(t, softmax_block_nonfinite, 0, 5);
  tcase_add_loop_test(t, gau_block_steps, 0, 11);
  tcase_add_loop_test(t, window_block_values, 0, 7);
  suite_add_tcase(s, t);
  t = tu_tcase("linear_step");
  tcase_add_loop_test(t, linear_step_widths, 0, 12);
  tcase_add_loop_test(t, rows_axpby_values, 0, 8);
  tcase_add_loop_test(t, rows_copy_values, 0, 9);
  tcase_add_loop_test(t, rows_cols_values, 0, 9);
  suite_add_tcase(s, t);
  t = tu_tcase("featmap");
  tcase_add_loop_test(t, featmap_maps, 0, 9);
  tcase_add_loop_test(t, expfeat_modes, 0, 9);
  tcase_add_loop_test(t, expfeat_scaled_max, 0, 9);
  suite_add_tcase(s, t);
  t = tu_tcase("favor");
  tcase_add_test(t, favor_log_vs_libm);
  tcase_add_test(t, favor_golden_bits);
  tcase_add_test(t, favor_redraw_bits);
  tcase_add_test(t, favor_blocks_orthogonal);
  tcase_add_test(t, favor_chi_norms);
  tcase_add_test(t, favor_prefix_and_seeds);
  tcase_add_test(t, favor_unbiased);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_main(internal_suite); }
