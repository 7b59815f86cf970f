/*
 * White-box tests, per ISA path (ATTN_ISA picks the path; exit 77 = SKIP when it cannot run here;
 * the shared state, main, RNG and guard zones come from tests/common/internal_util.h). Every kernel
 * is compared with a double-precision loop written here, on edge shapes, with guard zones around
 * every output: a kernel must write only its output elements (including the padding between rows,
 * which it must leave alone).
 * This file: CPU detection (the decoder on recorded CPUID values), the element-wise helpers (exp
 * and log against their error bounds, the logit options, transposition, gate factors) and the
 * fp16 / bf16 converters on every 16-bit pattern.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "half_ref.h"
#include "internal_util.h"

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

/* The vendor (CPUID.0's EBX, EDX, ECX) and the tuning it selects: AMD's cores prefetch the
 * few-rows kernels' rows into L2, every other CPU keeps each path's own policy. */
START_TEST(cpu_vendor_tunes) {
  ck_assert_uint_eq(attn_cpu_vendor_x86(0x68747541, 0x69746e65, 0x444d4163), ATTN_CPU_X86_AMD); /* AuthenticAMD */
  ck_assert_uint_eq(attn_cpu_vendor_x86(0x6f677948, 0x6e65476e, 0x656e6975), ATTN_CPU_X86_AMD); /* HygonGenuine */
  ck_assert_uint_eq(attn_cpu_vendor_x86(0x756e6547, 0x49656e69, 0x6c65746e), 0);                /* GenuineIntel */
  ck_assert_uint_eq(attn_cpu_vendor_x86(0x68747541, 0x444d4163, 0x69746e65), 0); /* AMD's registers out of order */
  ck_assert_uint_eq(attn_cpu_vendor_x86(0, 0, 0), 0);
  for (int isa = ATTN_ISA_AUTO + 1; isa < ATTN_ISA_COUNT; isa++) {
    struct attn_ukernels t, amd;
    attn_ukernels_init(&t, (attn_isa)isa);
    ck_assert_uint_eq(t.few_pf, ATTN_FEW_PF_L1);
    amd = t;
    attn_ukernels_tune(&t, ATTN_CPU_X86_AVX2_FMA | ATTN_CPU_X86_AVX512);
    ck_assert_uint_eq(t.few_pf, ATTN_FEW_PF_L1);
    attn_ukernels_tune(&amd, ATTN_CPU_X86_AVX2_FMA | ATTN_CPU_X86_AMD);
    ck_assert_uint_eq(amd.few_pf, ATTN_FEW_PF_L2);
    /* and nothing else changed */
#define CPU_SAME_(slot) ck_assert_msg(amd.slot == t.slot || &amd.slot == (void *)&amd.few_pf, "tune changed " #slot);
    ATTN_UKERNEL_SLOTS(CPU_SAME_, CPU_SAME_)
#undef CPU_SAME_
  }
  /* the active table is tuned for this CPU */
  ck_assert_uint_eq(uk->few_pf, (attn_cpu_features() & ATTN_CPU_X86_AMD) ? ATTN_FEW_PF_L2 : ATTN_FEW_PF_L1);
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
/* Bound: EXP_RTOL (internal_util.h). The measured maximum is asserted, not printed. */
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

static Suite *internal_vector_suite(attn_isa active) {
  ti_setup(active);
  /* clang-format off */
  return TU_SUITE(active,
    {"cpu", cpu_decode_recorded, 1}, {"cpu", cpu_detect_consistent, 1}, {"cpu", cpu_vendor_tunes, 1},
    {"exp", vexp_error_bound, 1}, {"exp", vexp_edges, 1}, {"exp", vlog_error_bound, 1}, {"exp", logit_opts_values, 1},
      {"exp", transpose_values, 1}, {"exp", gate_exp_values, 1},
    {"cvt", cvt_all_patterns, 2}, {"cvt", cvt_reference_self_check, 1});
  /* clang-format on */
}

int main(void) { return tu_main(internal_vector_suite); }
