/*
 * The public API that every variant shares, on the ISA path named by ATTN_ISA: version, status
 * strings, ISA selection, the shape block (attn_shape_init) and the mask helpers. Each variant's
 * own descriptor defaults, reference table, properties and bad-input table are in tests/ops.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_list.h"
#include "harness.h"
#include "isa_list.h"

/* ------------------------------------------------------------------------------------------ */
/* Version, status strings                                                                     */
/* ------------------------------------------------------------------------------------------ */
START_TEST(version_matches_macros) {
  ck_assert_uint_eq(attn_version_number(), ATTN_VERSION_NUMBER);
  ck_assert_ptr_nonnull(attn_version_string());
  ck_assert_str_eq(attn_version_string(), ATTN_VERSION_STRING);
  char buf[64];
  snprintf(buf, sizeof buf, "%d.%d.%d", ATTN_VERSION_MAJOR, ATTN_VERSION_MINOR, ATTN_VERSION_PATCH);
  ck_assert_str_eq(attn_version_string(), buf);
  ck_assert_uint_eq(ATTN_VERSION_NUMBER, ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH);
}
END_TEST

/* The count of statuses, from the library's one list of them (ATTN_OK .. the last one). */
#define STATUS_ONE_(status, text) +1
enum { N_STATUS = 0 ATTN_STATUS_LIST(STATUS_ONE_) };

START_TEST(status_strings_distinct_and_never_null) {
  const char *unknown = attn_status_string((attn_status)N_STATUS);
  ck_assert_ptr_nonnull(unknown);
  ck_assert_str_eq(unknown, "unknown status");
  for (int s = 0; s < N_STATUS; ++s) {
    const char *str = attn_status_string((attn_status)s);
    ck_assert_msg(str != NULL && str[0] != '\0', "status %d: empty string", s);
    ck_assert_msg(strcmp(str, unknown) != 0, "status %d is described as unknown", s);
    for (int t = 0; t < s; ++t)
      ck_assert_msg(strcmp(str, attn_status_string((attn_status)t)) != 0, "statuses %d and %d share a description", t,
                    s);
  }
  static const int out_of_range[] = {-1, -1000, N_STATUS + 1, 1000, INT32_MAX};
  for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; ++i) {
    const char *str = attn_status_string((attn_status)out_of_range[i]);
    ck_assert_ptr_nonnull(str);
    ck_assert_str_eq(str, "unknown status");
  }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* ISA selection                                                                               */
/* ------------------------------------------------------------------------------------------ */
/* The names come from the library's one list of paths, so a new path is covered once it is listed. */
START_TEST(isa_names_round_trip) {
#define ISA_NAME_(name, ID, host, cpu) [ATTN_ISA_##ID] = #name,
  static const char *names[ATTN_ISA_COUNT] = {[ATTN_ISA_AUTO] = "auto", ATTN_ISA_LIST(ISA_NAME_)};
  for (int i = ATTN_ISA_AUTO; i < ATTN_ISA_COUNT; ++i) {
    ck_assert_str_eq(attn_isa_name((attn_isa)i), names[i]);
    ck_assert_int_eq(attn_isa_from_name(attn_isa_name((attn_isa)i)), i);
  }
  ck_assert_str_eq(attn_isa_name(ATTN_ISA_NONE), "none");
  ck_assert_str_eq(attn_isa_name(ATTN_ISA_COUNT), "unknown");
  ck_assert_str_eq(attn_isa_name((attn_isa)-7), "unknown");
  ck_assert_str_eq(attn_isa_name((attn_isa)100), "unknown");
  ck_assert_int_eq(attn_isa_from_name(NULL), ATTN_ISA_NONE);
  ck_assert_int_eq(attn_isa_from_name(""), ATTN_ISA_NONE);
  ck_assert_int_eq(attn_isa_from_name("AVX2"), ATTN_ISA_NONE); /* case-sensitive */
  ck_assert_int_eq(attn_isa_from_name("bogus"), ATTN_ISA_NONE);
  ck_assert_int_eq(attn_isa_from_name("scalar "), ATTN_ISA_NONE);
}
END_TEST

/* The active path is the one ATTN_ISA named (main checked it before the suites too). */
START_TEST(isa_environment_honoured) {
  const char *env = getenv("ATTN_ISA");
  const attn_isa got = attn_isa_get();
  if (env && *env && strcmp(env, "auto") != 0) {
    ck_assert_int_eq(got, attn_isa_from_name(env));
  } else {
    int native = 0;
    ck_assert_int_eq(attn_isa_available(got, &native), 1);
    ck_assert_int_eq(native, 1);
  }
}
END_TEST

START_TEST(isa_available_contract) {
  int native = 7;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_AUTO, &native), 1);
  ck_assert_int_eq(native, 1);
  native = 7;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_SCALAR, &native), 1);
  ck_assert_int_eq(native, 1);
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_SCALAR, NULL), 1);
  static const int bad[] = {ATTN_ISA_NONE, ATTN_ISA_COUNT, 42, -9};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    native = 7;
    ck_assert_int_eq(attn_isa_available((attn_isa)bad[i], &native), 0);
    ck_assert_int_eq(native, 0);
  }
#if defined(ATTN_TEST_EMULATION) /* every path but scalar through SIMDe, on any CPU */
  for (int i = ATTN_ISA_SCALAR + 1; i < ATTN_ISA_COUNT; ++i) {
    native = 7;
    ck_assert_int_eq(attn_isa_available((attn_isa)i, &native), 1);
    ck_assert_int_eq(native, 0);
  }
#elif defined(__x86_64__) || defined(__i386__)
  native = 7;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_NEON, &native), 1); /* SIMDe emulation */
  ck_assert_int_eq(native, 0);
#elif defined(__aarch64__)
  native = 7;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_NEON, &native), 1);
  ck_assert_int_eq(native, 1);
  const attn_isa x86[] = {ATTN_ISA_AVX2, ATTN_ISA_AVX512};
  for (size_t i = 0; i < 2; ++i) {
    native = 7;
    ck_assert_int_eq(attn_isa_available(x86[i], &native), 1); /* SIMDe emulation */
    ck_assert_int_eq(native, 0);
  }
#endif
}
END_TEST

START_TEST(isa_set_contract) {
  const attn_isa start = attn_isa_get();
  static const int bad[] = {ATTN_ISA_NONE, ATTN_ISA_COUNT, 42, -9};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ck_assert_int_eq(attn_isa_set((attn_isa)bad[i]), ATTN_E_BAD_ARGUMENT);
    ck_assert_int_eq(attn_isa_get(), start);
  }
  for (int i = ATTN_ISA_SCALAR; i < ATTN_ISA_COUNT; ++i) {
    const attn_isa before = attn_isa_get();
    if (attn_isa_available((attn_isa)i, NULL)) {
      ck_assert_int_eq(attn_isa_set((attn_isa)i), ATTN_OK);
      ck_assert_int_eq(attn_isa_get(), i);
    } else {
      ck_assert_int_eq(attn_isa_set((attn_isa)i), ATTN_E_UNSUPPORTED_ISA);
      ck_assert_int_eq(attn_isa_get(), before);
    }
  }
  ck_assert_int_eq(attn_isa_set(ATTN_ISA_AUTO), ATTN_OK);
  int native = 0;
  const attn_isa best = attn_isa_get();
  ck_assert_int_ne(best, ATTN_ISA_AUTO);
  ck_assert_int_eq(attn_isa_available(best, &native), 1);
  ck_assert_int_eq(native, 1); /* auto never picks an emulated path */
  ck_assert_int_eq(attn_isa_set(start), ATTN_OK);
  ck_assert_int_eq(attn_isa_get(), start);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The shape block and the masks                                                               */
/* ------------------------------------------------------------------------------------------ */
/* Sizes copied, and token-major layouts ([n][heads][width]); o has H = max(h_q, h_k, h_v) heads. */
START_TEST(shape_init_defaults) {
  static const size_t heads[][3] = {{6, 2, 2}, {2, 2, 8}, {8, 2, 4}, {4, 4, 1}, {1, 1, 1}, {3, 6, 2}};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; ++i) {
    const size_t hq = heads[i][0], hk = heads[i][1], hv = heads[i][2];
    const size_t H = hq > hk ? (hq > hv ? hq : hv) : (hk > hv ? hk : hv);
    attn_shape s;
    memset(&s, 0xCD, sizeof s);
    ck_assert_int_eq(attn_shape_init(&s, 5, 9, hq, hk, hv, 64, 40), ATTN_OK);
    ck_assert_uint_eq(s.n_q, 5);
    ck_assert_uint_eq(s.n_kv, 9);
    ck_assert_uint_eq(s.h_q, hq);
    ck_assert_uint_eq(s.h_k, hk);
    ck_assert_uint_eq(s.h_v, hv);
    ck_assert_uint_eq(s.d, 64);
    ck_assert_uint_eq(s.dv, 40);
    ck_assert_uint_eq(s.q.row_stride, hq * 64);
    ck_assert_uint_eq(s.q.head_stride, 64);
    ck_assert_uint_eq(s.k.row_stride, hk * 64);
    ck_assert_uint_eq(s.k.head_stride, 64);
    ck_assert_uint_eq(s.v.row_stride, hv * 40);
    ck_assert_uint_eq(s.v.head_stride, 40);
    ck_assert_uint_eq(s.o.row_stride, H * 40);
    ck_assert_uint_eq(s.o.head_stride, 40);
  }
  ck_assert_int_eq(attn_shape_init(NULL, 1, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER);
}
END_TEST

START_TEST(mask_helpers) {
  const attn_mask full = attn_mask_full(), causal = attn_mask_causal(), win = attn_mask_window(7, 2);
  ck_assert(full.left == ATTN_UNBOUNDED && full.right == ATTN_UNBOUNDED && full.chunk == 0);
  ck_assert(causal.left == ATTN_UNBOUNDED && causal.right == 0 && causal.chunk == 0);
  ck_assert(win.left == 7 && win.right == 2 && win.chunk == 0);
  ck_assert_int_eq(attn_mask_is_causal(causal), 1);
  ck_assert_int_eq(attn_mask_is_causal(full), 0);
  ck_assert_int_eq(attn_mask_is_causal(win), 0);
  ck_assert_int_eq(attn_mask_is_causal(attn_mask_window(7, 0)), 0); /* a sliding window */
  ck_assert_int_eq(attn_mask_is_causal(attn_mask_window(ATTN_UNBOUNDED, 0)), 1);
  attn_mask chunked = causal;
  chunked.chunk = 64;
  ck_assert_int_eq(attn_mask_is_causal(chunked), 0); /* chunk-local is not plain causal */
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"basics", version_matches_macros, 1}, {"basics", status_strings_distinct_and_never_null, 1},
  {"isa", isa_names_round_trip, 1}, {"isa", isa_environment_honoured, 1}, {"isa", isa_available_contract, 1},
    {"isa", isa_set_contract, 1},
  {"shape", shape_init_defaults, 1}, {"shape", mask_helpers, 1})
/* clang-format on */
