/*
 * Runtime dispatch under a forced environment. Unlike the other executables this one never skips:
 * ATTN_TEST_EXPECT says what the environment must produce.
 *   ATTN_TEST_EXPECT=unsupported  ATTN_ISA names an unknown path (bogus) or one this CPU cannot
 *                                 run (avx2 under qemu -cpu Nehalem): attn_isa_get() is NONE,
 *                                 every compute call and workspace query answers
 *                                 ATTN_E_UNSUPPORTED_ISA without writing (attn_last_error names
 *                                 the variable and its value), and attn_isa_set
 *                                 (ATTN_ISA_AUTO) recovers.
 *   ATTN_TEST_EXPECT=<path name>  the active path must be that one (e.g. scalar for ATTN_ISA=auto
 *                                 on a CPU without AVX2), paths this CPU cannot run are refused
 *                                 by attn_isa_set, and results are correct.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linear_util.h"
#include "test_util.h"
#include "tolerances.h"

enum { N = 37, HQ = 2, HKV = 1, D = 16, WS_BYTES = 1 << 20 };

static const char *expect_env(void) {
  const char *e = getenv("ATTN_TEST_EXPECT");
  return e ? e : "";
}

/* Softmax (causal) and linear (causal elu1) on small inputs, against the reference. */
static void assert_results_correct(void) {
  tu_rng rng = tu_rng_of(42);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, D, D);
  const size_t count = (size_t)N * HQ * D;
  double *ro = malloc(sizeof(double) * count), *rs = malloc(sizeof(double) * count);
  double *sabs = malloc(sizeof(double) * N * HQ), *tol = malloc(sizeof(double) * count);
  ck_assert(ro && rs && sabs && tol);
  tu_tensor o;
  tu_tensor_alloc(&o, TU_TOKEN_MAJOR, N, HQ, D, 1);
  void *ws = tu_alloc(WS_BYTES, 0);
  size_t need = 0;

  attn_softmax_desc sd;
  ck_assert_int_eq(attn_softmax_desc_init(&sd, N, N, HQ, HKV, D, D), ATTN_OK);
  sd.mask = attn_mask_causal();
  ck_assert_int_eq(attn_softmax_workspace_size(&sd, &need), ATTN_OK);
  ck_assert_uint_le(need, WS_BYTES);
  ck_assert_int_eq(attn_softmax(&sd, x.q.data, x.k.data, x.v.data, o.data, NULL, ws, need), ATTN_OK);
  const ref_softmax_problem sp = tu_softmax_problem(&sd, &x.q, &x.k, &x.v);
  ref_softmax(&sp, ro, NULL, rs, sabs);
  for (size_t e = 0; e < count; ++e) tol[e] = tol_softmax_o(N, D, sabs[e / D]);
  tu_compare("softmax.o", "dispatch", &o, ro, rs, tol);

  attn_linear_desc ld;
  ck_assert_int_eq(attn_linear_desc_init(&ld, N, N, HQ, HKV, D, D, ATTN_FEATURE_ELU1), ATTN_OK);
  ck_assert_int_eq(attn_linear_workspace_size(&ld, &need), ATTN_OK);
  ck_assert_uint_le(need, WS_BYTES);
  ck_assert_int_eq(attn_linear(&ld, x.q.data, x.k.data, x.v.data, o.data, NULL, ws, need), ATTN_OK);
  const ref_linear_problem lp = lu_problem(&ld, &x.q, &x.k, &x.v, NULL);
  ref_linear(&lp, ro, rs);
  for (size_t e = 0; e < count; ++e) tol[e] = tol_linear_o(N, D);
  tu_compare("linear.o", "dispatch", &o, ro, rs, tol);
  tu_assert_output_clean("o", &o);
  tu_assert_guards("workspace", ws);

  tu_free(ws);
  tu_tensor_free(&o);
  free(ro);
  free(rs);
  free(sabs);
  free(tol);
  tu_qkv_free(&x);
}

/* ------------------------------------------------------------------------------------------ */
/* ATTN_TEST_EXPECT=unsupported                                                                */
/* ------------------------------------------------------------------------------------------ */
/* The detail of a call refused for the environment (attn_last_error): the variable's value, and
 * for a value that is no path's name every name it takes. */
static void assert_env_detail(void) {
  const char *env = getenv("ATTN_ISA");
  char want[256];
  if (attn_isa_from_name(env) == ATTN_ISA_NONE) {
    char names[128] = "";
    for (int i = ATTN_ISA_AUTO + 1; i < ATTN_ISA_COUNT; ++i) {
      strcat(names, attn_isa_name((attn_isa)i));
      strcat(names, ", ");
    }
    snprintf(want, sizeof want, "ATTN_ISA=%s: not a path name (%sauto)", env, names);
  } else {
    snprintf(want, sizeof want, "ATTN_ISA=%s: this CPU cannot run that path", env);
  }
  ck_assert_str_eq(attn_last_error(), want);
}

START_TEST(unsupported_active_path_is_none) {
  ck_assert_int_eq(attn_isa_get(), ATTN_ISA_NONE);
  const char *env = getenv("ATTN_ISA");
  ck_assert_ptr_nonnull(env);
  const attn_isa named = attn_isa_from_name(env);
  if (named != ATTN_ISA_NONE) { /* a real path this CPU cannot run */
    ck_assert_int_eq(attn_isa_available(named, NULL), 0);
    ck_assert_int_eq(attn_isa_set(named), ATTN_E_UNSUPPORTED_ISA);
    char want[96];
    snprintf(want, sizeof want, "isa %s: this CPU cannot run that path", env);
    ck_assert_str_eq(attn_last_error(), want);
    ck_assert_int_eq(attn_isa_get(), ATTN_ISA_NONE);
  }
}
END_TEST

START_TEST(unsupported_every_call_refused) {
  tu_rng rng = tu_rng_of(43);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, D, D);
  tu_tensor o, lse;
  tu_tensor_alloc(&o, TU_TOKEN_MAJOR, N, HQ, D, 1);
  tu_tensor_alloc(&lse, TU_TOKEN_MAJOR, N, HQ, 1, 1);
  void *ws = tu_alloc(WS_BYTES, 0);
  size_t bytes = 12345;

  attn_softmax_desc sd;
  ck_assert_int_eq(attn_softmax_desc_init(&sd, N, N, HQ, HKV, D, D), ATTN_OK);
  ck_assert_int_eq(attn_softmax_workspace_size(&sd, &bytes), ATTN_E_UNSUPPORTED_ISA);
  ck_assert_int_eq(attn_softmax(&sd, x.q.data, x.k.data, x.v.data, o.data, lse.data, ws, WS_BYTES),
                   ATTN_E_UNSUPPORTED_ISA);
  assert_env_detail();

  const float *op[2] = {x.q.data, x.k.data}, *lp[2] = {x.v.data, x.v.data + 100};
  ck_assert_int_eq(attn_softmax_merge(N, D, 2, op, D, lp, 1, o.data, D, lse.data, 1), ATTN_E_UNSUPPORTED_ISA);

  attn_linear_desc ld;
  ck_assert_int_eq(attn_linear_desc_init(&ld, N, N, HQ, HKV, D, D, ATTN_FEATURE_ELU1), ATTN_OK);
  ck_assert_int_eq(attn_linear_workspace_size(&ld, &bytes), ATTN_E_UNSUPPORTED_ISA);
  ck_assert_int_eq(attn_linear_chunk_size(&ld, &bytes), ATTN_E_UNSUPPORTED_ISA);
  ck_assert_int_eq(attn_linear(&ld, x.q.data, x.k.data, x.v.data, o.data, NULL, ws, WS_BYTES), ATTN_E_UNSUPPORTED_ISA);
  assert_env_detail();
  ld.mask = attn_mask_full();
  ck_assert_int_eq(attn_linear(&ld, x.q.data, x.k.data, x.v.data, o.data, NULL, ws, WS_BYTES), ATTN_E_UNSUPPORTED_ISA);

  tu_tensor pristine;
  tu_tensor_alloc(&pristine, TU_TOKEN_MAJOR, N, HQ, D, 1);
  tu_assert_same_bits("o after refused calls", pristine.data, o.data, sizeof(float) * o.span);
  tu_assert_same_bits("lse after refused calls", pristine.data, lse.data, sizeof(float) * lse.span);
  tu_qkv_assert_unchanged(&x);
  tu_assert_guards("workspace", ws);
  ck_assert_int_eq(attn_isa_get(), ATTN_ISA_NONE);
  tu_tensor_free(&pristine);
  tu_free(ws);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  tu_qkv_free(&x);
}
END_TEST

/* attn_isa_set(ATTN_ISA_AUTO) picks the best native path and calls work again. */
START_TEST(unsupported_recovers_with_auto) {
  ck_assert_int_eq(attn_isa_set(ATTN_ISA_AUTO), ATTN_OK);
  const attn_isa now = attn_isa_get();
  int native = 0;
  ck_assert_int_gt(now, ATTN_ISA_AUTO);
  ck_assert_int_eq(attn_isa_available(now, &native), 1);
  ck_assert_int_eq(native, 1);
  assert_results_correct();
}
END_TEST

/* An explicit runnable path recovers too. */
START_TEST(unsupported_recovers_with_scalar) {
  ck_assert_int_eq(attn_isa_set(ATTN_ISA_SCALAR), ATTN_OK);
  ck_assert_int_eq(attn_isa_get(), ATTN_ISA_SCALAR);
  assert_results_correct();
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* ATTN_TEST_EXPECT=<path>                                                                     */
/* ------------------------------------------------------------------------------------------ */
START_TEST(expected_path_active) {
  const attn_isa want = attn_isa_from_name(expect_env());
  ck_assert_int_gt(want, ATTN_ISA_AUTO);
  ck_assert_int_eq(attn_isa_get(), want);
#if defined(__x86_64__) || defined(__i386__)
  /* auto prefers AVX2 wherever it can run (it is native on x86): scalar means no AVX2 here */
  const char *env = getenv("ATTN_ISA");
  if (want == ATTN_ISA_SCALAR && (!env || !*env || strcmp(env, "auto") == 0)) {
    ck_assert_int_eq(attn_isa_available(ATTN_ISA_AVX2, NULL), 0);
  }
#endif
  for (int i = ATTN_ISA_SCALAR; i < ATTN_ISA_COUNT; ++i) {
    if (attn_isa_available((attn_isa)i, NULL)) continue;
    ck_assert_int_eq(attn_isa_set((attn_isa)i), ATTN_E_UNSUPPORTED_ISA);
    ck_assert_int_eq(attn_isa_get(), want);
  }
}
END_TEST

START_TEST(expected_path_results_correct) {
  ck_assert_int_eq(attn_isa_get(), attn_isa_from_name(expect_env()));
  assert_results_correct();
}
END_TEST

int main(void) {
  const char *expect = expect_env();
  if (!*expect) return 77; /* only meaningful under a forced environment */
  Suite *s = suite_create("dispatch");
  TCase *tc = tu_tcase(expect);
  if (strcmp(expect, "unsupported") == 0) {
    tcase_add_test(tc, unsupported_active_path_is_none);
    tcase_add_test(tc, unsupported_every_call_refused);
    tcase_add_test(tc, unsupported_recovers_with_auto);
    tcase_add_test(tc, unsupported_recovers_with_scalar);
  } else {
    tcase_add_test(tc, expected_path_active);
    tcase_add_test(tc, expected_path_results_correct);
  }
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
