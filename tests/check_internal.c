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

#include "core/internal.h"
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
#if defined(__x86_64__) || defined(__i386__)
  const int has = (attn_cpu_features() & ATTN_CPU_X86_AVX2_FMA) != 0;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_AVX2, NULL), has);
  ck_assert_int_eq(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), has);
  ck_assert_int_eq(native, uk->isa == ATTN_ISA_NEON ? 0 : 1);
#elif defined(__aarch64__)
  ck_assert_int_eq(native, uk->isa == ATTN_ISA_AVX2 ? 0 : 1);
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
START_TEST(softmax_block_steps) {
  const size_t nqs[] = {1, 3, 4, 5, 8, 9, 17, 48};
  const size_t nq = nqs[_i], ld = nq + 3, nk = 13;
  float *m = galloc(nq), *l = galloc(nq), *al = galloc(nq), *st = galloc(nk * ld);
  double *rm = malloc(nq * sizeof(double)), *rl = malloc(nq * sizeof(double));
  for (size_t c = 0; c < nq; c++) {
    m[c] = -INFINITY;
    l[c] = 0;
    rm[c] = -INFINITY;
    rl[c] = 0;
  }
  for (int step = 0; step < 4; step++) {
    float *keep = malloc(nk * ld * sizeof(float));
    for (size_t j = 0; j < nk; j++)
      for (size_t c = 0; c < ld; c++) {
        float s = 20.0f * frand() + (step == 2 ? 60.0f : 0.0f); /* a jump of the max in step 2 */
        if (c == 0 && step < 2) s = -INFINITY;                  /* column 0: empty at first */
        if (c == nq - 1 && nq > 2) s = -INFINITY;               /* last column: always empty */
        if ((j + c + (size_t)step) % 5 == 0) s = -INFINITY;     /* scattered masked pairs */
        st[j * ld + c] = keep[j * ld + c] = s;
      }
    uk->softmax_block(nk, nq, st, ld, m, l, al, 1);
    for (size_t c = 0; c < nq; c++) {
      double mx = rm[c];
      for (size_t j = 0; j < nk; j++) mx = fmax(mx, keep[j * ld + c]);
      const double alpha = mx == -INFINITY ? 0.0 : exp(rm[c] - mx);
      double sum = 0;
      for (size_t j = 0; j < nk; j++) {
        const double p = mx == -INFINITY ? 0.0 : exp((double)keep[j * ld + c] - mx);
        sum += p;
        /* exp's bound plus the rounding of the fp32 difference s - m (|s - m| * 2^-24) */
        const double tol =
            p == 0.0 ? 0.0 : p * (4 * EXP_RTOL + fabs((double)keep[j * ld + c] - mx) * 5.960464477539063e-08) + 1e-37;
        ck_assert_msg(fabs(st[j * ld + c] - p) <= tol, "P[%zu][%zu] %g vs %g", j, c, st[j * ld + c], p);
      }
      const double atol =
          alpha == 0.0 ? 0.0 : alpha * (4 * EXP_RTOL + fabs(rm[c] - mx) * 5.960464477539063e-08) + 1e-37;
      ck_assert_msg(fabs(al[c] - alpha) <= atol, "alpha[%zu] %.9g vs %.9g (m %.9g -> %.9g)", c, al[c], alpha, rm[c],
                    mx);
      rl[c] = rl[c] * alpha + sum;
      rm[c] = mx;
      ck_assert(m[c] == (float)mx);
      ck_assert_msg(fabs(l[c] - rl[c]) <= 1e-5 * rl[c], "l[%zu] %g vs %g", c, l[c], rl[c]);
    }
    for (size_t j = 0; j < nk; j++)
      for (size_t c = nq; c < ld; c++) ck_assert(st[j * ld + c] == keep[j * ld + c]); /* padding */
    free(keep);
  }
  if (nq > 2) {
    ck_assert(m[nq - 1] == -INFINITY);
    ck_assert(l[nq - 1] == 0.0f);
  }
  gcheck_free(m);
  gcheck_free(l);
  gcheck_free(al);
  gcheck_free(st);
  free(rm);
  free(rl);
}
END_TEST

/* ---- recurrent linear step: out = a va + qf^T S (S on entry), then S += kf va^T ---- */
START_TEST(linear_step_widths) {
  const size_t ws[] = {1, 3, 4, 7, 8, 9, 16, 31, 32, 33, 65, 70};
  const size_t w = ws[_i], m = 13, lds = w + 3;
  float *s = galloc(m * lds), *s0 = malloc(m * lds * sizeof(float)), *out = galloc(w);
  float qf[13], kf[13], *va = malloc(w * sizeof(float));
  for (size_t i = 0; i < m * lds; i++) s[i] = s0[i] = frand();
  for (size_t p = 0; p < m; p++) {
    qf[p] = frand();
    kf[p] = frand();
  }
  for (size_t c = 0; c < w; c++) va[c] = frand();
  const float a = 0.625f;
  for (int update = 0; update < 2; update++) {
    uk->linear_step(m, w, qf, update ? kf : NULL, va, a, s, lds, out);
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
        const double prod = c < w && update ? (double)kf[p] * va[c] : 0.0, old = s0[p * lds + c];
        /* one fused or two separate roundings: bounded by 2u (|S| + |kf va|), exact when untouched */
        if (!(fabs(s[p * lds + c] - (old + prod)) <= 2 * 5.960464477539063e-08 * (fabs(old) + fabs(prod))) &&
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
  enum { NK = 7, NQ = 11, LD = 13 };
  const float bad[] = {NAN, INFINITY, -INFINITY};
  for (int masked = 0; masked < 2; masked++)
    for (size_t b = 0; b < 3; b++) {
      float *m = galloc(NQ), *l = galloc(NQ), *al = galloc(NQ), *st = galloc(NK * LD);
      for (size_t c = 0; c < NQ; c++) {
        m[c] = -INFINITY;
        l[c] = 0;
      }
      for (int step = 0; step < 2; step++) {
        for (size_t i = 0; i < NK * LD; i++) st[i] = 4.0f * frand();
        if (step == 0) st[3 * LD + 5] = bad[b]; /* column 5, first step only */
        uk->softmax_block(NK, NQ, st, LD, m, l, al, masked);
        for (size_t c = 0; c < NQ; c++) {
          const int poisoned = c == 5 && !(masked && b == 2); /* masked -inf: a masked pair */
          ck_assert_msg(poisoned ? isnan(l[c]) : isfinite(l[c]) && l[c] > 0, "masked %d bad %zu step %d col %zu: l %g",
                        masked, b, step, c, l[c]);
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
  const size_t rows = 5, cols = 1 + (size_t)_i * 3; /* 1, 4, 7, 10, 13, 16, 19 */
  const size_t in_rs = cols + 2;
  float *in = malloc(rows * in_rs * sizeof(float));
  for (size_t i = 0; i < rows * in_rs; i++) in[i] = 6.0f * frand();
  in[0] = 0.0f;
  const float nonfinite[] = {NAN, INFINITY, -INFINITY}; /* every map gives NaN for them */
  for (size_t i = 0; i < 3; i++) in[(1 + i) * in_rs + (cols - 1) * (i % 2)] = nonfinite[i];
  for (int map = 0; map < ATTN_FEATURE_COUNT; map++)
    for (int trans = 0; trans < 2; trans++) {
      const size_t out_rs = trans ? 1 : cols + 1, out_cs = trans ? rows + 1 : 1;
      const size_t n = trans ? cols * out_cs : rows * out_rs;
      float *out = galloc(n);
      uk->featmap((attn_feature_map)map, rows, cols, in, in_rs, out, out_rs, out_cs);
      for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
          const double x = in[r * in_rs + c];
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
  suite_add_tcase(s, t);
  t = tu_tcase("gemm");
  tcase_add_loop_test(t, gemm_shapes, 0, (int)NGS);
  tcase_add_test(t, gemm_in_place_row);
  suite_add_tcase(s, t);
  t = tu_tcase("softmax_block");
  tcase_add_loop_test(t, softmax_block_steps, 0, 8);
  tcase_add_test(t, softmax_block_nonfinite);
  suite_add_tcase(s, t);
  t = tu_tcase("linear_step");
  tcase_add_loop_test(t, linear_step_widths, 0, 12);
  suite_add_tcase(s, t);
  t = tu_tcase("featmap");
  tcase_add_loop_test(t, featmap_maps, 0, 7);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_main(internal_suite); }
