/*
 * Public API contract on the ISA path named by ATTN_ISA: version, status strings, ISA selection,
 * descriptor defaults, argument validation of every entry point (the exact status for each bad
 * input, and no output or state written), state management, and concurrent calls.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "core/status_list.h"
#include "isa_list.h"

#define HUGE_N (SIZE_MAX / 2)

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
  ck_assert_uint_eq(ATTN_VERSION_NUMBER,
                    ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH);
}
END_TEST

#define STATUS_ONE_(status, text) +1
enum { N_STATUS = 0 ATTN_STATUS_LIST(STATUS_ONE_) }; /* ATTN_OK .. the last status */

START_TEST(status_strings_distinct_and_never_null) {
  const char *unknown = attn_status_string((attn_status)N_STATUS);
  ck_assert_ptr_nonnull(unknown);
  ck_assert_str_eq(unknown, "unknown status");
  for (int s = 0; s < N_STATUS; ++s) {
    const char *str = attn_status_string((attn_status)s);
    ck_assert_msg(str != NULL && str[0] != '\0', "status %d: empty string", s);
    ck_assert_msg(strcmp(str, unknown) != 0, "status %d is described as unknown", s);
    for (int t = 0; t < s; ++t)
      ck_assert_msg(strcmp(str, attn_status_string((attn_status)t)) != 0,
                    "statuses %d and %d share a description", t, s);
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
#if defined(__x86_64__) || defined(__i386__)
  native = 7;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_NEON, &native), 1); /* SIMDe emulation */
  ck_assert_int_eq(native, 0);
#elif defined(__aarch64__)
  native = 7;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_NEON, &native), 1);
  ck_assert_int_eq(native, 1);
  native = 7;
  ck_assert_int_eq(attn_isa_available(ATTN_ISA_AVX2, &native), 1); /* SIMDe emulation */
  ck_assert_int_eq(native, 0);
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
/* Descriptor defaults                                                                         */
/* ------------------------------------------------------------------------------------------ */
/* The default token-major layouts: [n][h][d] for q, k and [n][h][dv] for v, o. */
static void assert_token_major(const attn_layout *q, const attn_layout *k, const attn_layout *v,
                               const attn_layout *o, size_t hq, size_t hkv, size_t d, size_t dv) {
  ck_assert_uint_eq(q->row_stride, hq * d);
  ck_assert_uint_eq(q->head_stride, d);
  ck_assert_uint_eq(k->row_stride, hkv * d);
  ck_assert_uint_eq(k->head_stride, d);
  ck_assert_uint_eq(v->row_stride, hkv * dv);
  ck_assert_uint_eq(v->head_stride, dv);
  ck_assert_uint_eq(o->row_stride, hq * dv);
  ck_assert_uint_eq(o->head_stride, dv);
}

START_TEST(softmax_desc_init_defaults) {
  attn_softmax_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_softmax_desc_init(&d, 5, 9, 6, 2, 64, 40), ATTN_OK);
  ck_assert_uint_eq(d.n_q, 5);
  ck_assert_uint_eq(d.n_kv, 9);
  ck_assert_uint_eq(d.h_q, 6);
  ck_assert_uint_eq(d.h_kv, 2);
  ck_assert_uint_eq(d.d, 64);
  ck_assert_uint_eq(d.dv, 40);
  ck_assert(fabs((double)d.scale - 0.125) <= 0x1p-24);
  ck_assert_uint_eq(d.window_left, ATTN_UNBOUNDED);
  ck_assert_uint_eq(d.window_right, ATTN_UNBOUNDED);
  assert_token_major(&d.q, &d.k, &d.v, &d.o, 6, 2, 64, 40);
  ck_assert_uint_eq(d.lse.row_stride, 6);
  ck_assert_uint_eq(d.lse.head_stride, 1);
  ck_assert_int_eq(attn_softmax_desc_init(&d, 3, 3, 1, 1, 7, 7), ATTN_OK);
  ck_assert(fabs((double)d.scale - 1.0 / sqrt(7.0)) <= 0x1p-24);
  ck_assert_int_eq(attn_softmax_desc_init(NULL, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER);
}
END_TEST

START_TEST(linear_desc_init_defaults) {
  attn_linear_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_linear_desc_init(&d, 5, 9, 6, 2, 64, 40, ATTN_FEATURE_ELU1), ATTN_OK);
  ck_assert_uint_eq(d.n_q, 5);
  ck_assert_uint_eq(d.n_kv, 9);
  ck_assert_uint_eq(d.h_q, 6);
  ck_assert_uint_eq(d.h_kv, 2);
  ck_assert_uint_eq(d.d, 64);
  ck_assert_uint_eq(d.dv, 40);
  ck_assert_int_eq(d.feature_map, ATTN_FEATURE_ELU1);
  ck_assert_int_eq(d.causal, 1);
  ck_assert_int_eq(d.normalize, 1);
  ck_assert(d.eps == 1e-6f);
  ck_assert_uint_eq(d.chunk, 0);
  assert_token_major(&d.q, &d.k, &d.v, &d.o, 6, 2, 64, 40);
  ck_assert_int_eq(attn_linear_desc_init(&d, 1, 1, 1, 1, 1, 1, ATTN_FEATURE_IDENTITY), ATTN_OK);
  ck_assert_int_eq(d.feature_map, ATTN_FEATURE_IDENTITY);
  ck_assert_int_eq(attn_linear_desc_init(NULL, 1, 1, 1, 1, 1, 1, ATTN_FEATURE_ELU1),
                   ATTN_E_NULL_POINTER);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Softmax validation                                                                          */
/* ------------------------------------------------------------------------------------------ */
enum { NQ = 5, NKV = 7, HQ = 4, HKV = 2, D = 8, DV = 6 };

typedef enum sv_kind {
  SV_DESC_NULL, SV_Q_NULL, SV_K_NULL, SV_V_NULL, SV_O_NULL, SV_WS_NULL,
  SV_NQ_0, SV_NKV_0, SV_HQ_0, SV_HKV_0, SV_D_0, SV_DV_0,
  SV_NQ_HUGE, SV_NKV_HUGE, SV_NQ_PTRDIFF, SV_QROW_HUGE, SV_OHEAD_HUGE,
  SV_QROW_SMALL, SV_QHEAD_SMALL, SV_KROW_SMALL, SV_KHEAD_SMALL, SV_VROW_SMALL, SV_VHEAD_SMALL,
  SV_OROW_SMALL, SV_O_SELF_OVERLAP, SV_O_HEADS_INTERLEAVE, SV_LSE_SELF_OVERLAP, SV_LSE_ROW_0,
  SV_HEADS_3_2, SV_HEADS_4_3, SV_HEADS_2_4,
  SV_SCALE_NAN, SV_SCALE_INF, SV_SCALE_NINF,
  SV_WS_SMALL,
  SV_O_IS_Q, SV_O_IN_K, SV_O_IS_V, SV_LSE_IN_O, SV_LSE_IS_Q, SV_O_IN_WS
} sv_kind;

typedef struct sv_case {
  const char *name;
  sv_kind kind;
  attn_status expect;
  int desc_level; /* attn_softmax_workspace_size must answer the same */
} sv_case;

static const sv_case sv_cases[] = {
  {"desc NULL", SV_DESC_NULL, ATTN_E_NULL_POINTER, 0},
  {"q NULL", SV_Q_NULL, ATTN_E_NULL_POINTER, 0},
  {"k NULL", SV_K_NULL, ATTN_E_NULL_POINTER, 0},
  {"v NULL", SV_V_NULL, ATTN_E_NULL_POINTER, 0},
  {"o NULL", SV_O_NULL, ATTN_E_NULL_POINTER, 0},
  {"workspace NULL", SV_WS_NULL, ATTN_E_NULL_POINTER, 0},
  {"n_q 0", SV_NQ_0, ATTN_E_ZERO_SIZE, 1},
  {"n_kv 0", SV_NKV_0, ATTN_E_ZERO_SIZE, 1},
  {"h_q 0", SV_HQ_0, ATTN_E_ZERO_SIZE, 1},
  {"h_kv 0", SV_HKV_0, ATTN_E_ZERO_SIZE, 1},
  {"d 0", SV_D_0, ATTN_E_ZERO_SIZE, 1},
  {"dv 0", SV_DV_0, ATTN_E_ZERO_SIZE, 1},
  {"n_q SIZE_MAX/2", SV_NQ_HUGE, ATTN_E_SIZE_OVERFLOW, 1},
  {"n_kv SIZE_MAX/2", SV_NKV_HUGE, ATTN_E_SIZE_OVERFLOW, 1},
  {"q and o bytes above PTRDIFF_MAX", SV_NQ_PTRDIFF, ATTN_E_SIZE_OVERFLOW, 1},
  {"q row stride huge", SV_QROW_HUGE, ATTN_E_SIZE_OVERFLOW, 1},
  {"o head stride huge", SV_OHEAD_HUGE, ATTN_E_SIZE_OVERFLOW, 1},
  {"q row stride < d", SV_QROW_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"q head stride < d", SV_QHEAD_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"k row stride < d", SV_KROW_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"k head stride < d", SV_KHEAD_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"v row stride < dv", SV_VROW_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"v head stride < dv", SV_VHEAD_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"o row stride < dv", SV_OROW_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"o rows overlap heads", SV_O_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 1},
  {"o heads run into next token", SV_O_HEADS_INTERLEAVE, ATTN_E_BAD_STRIDE, 1},
  {"lse layout overlaps itself", SV_LSE_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 0},
  {"lse row stride 0", SV_LSE_ROW_0, ATTN_E_BAD_STRIDE, 0},
  {"h_q 3, h_kv 2", SV_HEADS_3_2, ATTN_E_BAD_HEADS, 1},
  {"h_q 4, h_kv 3", SV_HEADS_4_3, ATTN_E_BAD_HEADS, 1},
  {"h_q 2, h_kv 4", SV_HEADS_2_4, ATTN_E_BAD_HEADS, 1},
  {"scale NaN", SV_SCALE_NAN, ATTN_E_BAD_SCALE, 1},
  {"scale +inf", SV_SCALE_INF, ATTN_E_BAD_SCALE, 1},
  {"scale -inf", SV_SCALE_NINF, ATTN_E_BAD_SCALE, 1},
  {"workspace one byte short", SV_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0},
  {"o is q", SV_O_IS_Q, ATTN_E_ALIASING, 0},
  {"o inside k", SV_O_IN_K, ATTN_E_ALIASING, 0},
  {"o is v", SV_O_IS_V, ATTN_E_ALIASING, 0},
  {"lse inside o", SV_LSE_IN_O, ATTN_E_ALIASING, 0},
  {"lse is q", SV_LSE_IS_Q, ATTN_E_ALIASING, 0},
  {"o inside workspace", SV_O_IN_WS, ATTN_E_ALIASING, 0},
};
#define SV_NCASES (sizeof sv_cases / sizeof sv_cases[0])

/* Input buffers big enough that an aliased output fits inside them. */
static void big_inputs(tu_qkv *x, tu_rng *r) {
  tu_qkv_make(x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, r, 2 * NQ * HQ, 2 * NKV * HQ, HQ, HKV, D, DV);
}

START_TEST(softmax_rejects_bad_input) {
  const sv_case *c = &sv_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 100 + (uint64_t)_i);
  tu_qkv x;
  big_inputs(&x, &rng);
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, NQ, NKV, HQ, HKV, D, DV), ATTN_OK);
  d.window_right = 0;
  size_t need = 0;
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &need), ATTN_OK);
  tu_tensor o, lse;
  tu_tensor_alloc(&o, TU_TOKEN_MAJOR, NQ, HQ, DV, 1);
  tu_tensor_alloc(&lse, TU_TOKEN_MAJOR, NQ, HQ, 1, 1);
  void *ws = tu_alloc(need + 4096, 0);
  const float *q = x.q.data, *k = x.k.data, *v = x.v.data;
  float *op = o.data, *lp = lse.data;
  size_t ws_size = need;
  const attn_softmax_desc *dp = &d;
  switch (c->kind) {
  case SV_DESC_NULL: dp = NULL; break;
  case SV_Q_NULL: q = NULL; break;
  case SV_K_NULL: k = NULL; break;
  case SV_V_NULL: v = NULL; break;
  case SV_O_NULL: op = NULL; break;
  case SV_WS_NULL: break; /* pointer set below */
  case SV_NQ_0: d.n_q = 0; break;
  case SV_NKV_0: d.n_kv = 0; break;
  case SV_HQ_0: d.h_q = 0; break;
  case SV_HKV_0: d.h_kv = 0; break;
  case SV_D_0: d.d = 0; break;
  case SV_DV_0: d.dv = 0; break;
  case SV_NQ_HUGE: d.n_q = HUGE_N; break;
  case SV_NKV_HUGE: d.n_kv = HUGE_N; break;
  case SV_NQ_PTRDIFF: /* q: 128 bytes per token, o: 96: element counts fit, byte counts do not */
    d.n_q = SIZE_MAX / 512 * 3;
    break;
  case SV_QROW_HUGE: d.q.row_stride = SIZE_MAX / 4; break;
  case SV_OHEAD_HUGE: d.o.head_stride = SIZE_MAX / 2; d.o.row_stride = DV; break;
  case SV_QROW_SMALL: d.q.row_stride = D - 1; break;
  case SV_QHEAD_SMALL: d.q.head_stride = D - 1; break;
  case SV_KROW_SMALL: d.k.row_stride = D - 1; break;
  case SV_KHEAD_SMALL: d.k.head_stride = D - 1; break;
  case SV_VROW_SMALL: d.v.row_stride = DV - 1; break;
  case SV_VHEAD_SMALL: d.v.head_stride = DV - 1; break;
  case SV_OROW_SMALL: d.o.row_stride = DV - 1; d.o.head_stride = NQ * DV; break;
  case SV_O_SELF_OVERLAP: d.o.row_stride = DV; d.o.head_stride = DV; break;
  case SV_O_HEADS_INTERLEAVE: d.o.head_stride = 2 * DV; break; /* row stride HQ * DV */
  case SV_LSE_SELF_OVERLAP: d.lse.row_stride = 1; d.lse.head_stride = 1; break;
  case SV_LSE_ROW_0: d.lse.row_stride = 0; break;
  case SV_HEADS_3_2: d.h_q = 3; break;
  case SV_HEADS_4_3: d.h_kv = 3; break;
  case SV_HEADS_2_4: d.h_q = 2; d.h_kv = 4; break;
  case SV_SCALE_NAN: d.scale = NAN; break;
  case SV_SCALE_INF: d.scale = INFINITY; break;
  case SV_SCALE_NINF: d.scale = -INFINITY; break;
  case SV_WS_SMALL: ck_assert_uint_gt(need, 0); ws_size = need - 1; break;
  case SV_O_IS_Q: op = x.q.data; break;
  case SV_O_IN_K: op = x.k.data + 3; break;
  case SV_O_IS_V: op = x.v.data; break;
  case SV_LSE_IN_O: lp = o.data + 10; break;
  case SV_LSE_IS_Q: lp = x.q.data; break;
  case SV_O_IN_WS: op = (float *)ws; ws_size = need + 4096; break;
  }
  ck_assert_int_eq(attn_softmax(dp, q, k, v, op, lp, c->kind == SV_WS_NULL ? NULL : ws, ws_size),
                   c->expect);
  if (c->desc_level) {
    size_t bytes = 0;
    ck_assert_int_eq(attn_softmax_workspace_size(&d, &bytes), c->expect);
  }
  /* nothing written: o and lse still all sentinel, inputs unchanged, guards intact */
  tu_tensor pristine;
  tu_tensor_alloc(&pristine, TU_TOKEN_MAJOR, NQ, HQ, DV, 1);
  tu_assert_same_bits("o after a rejected call", pristine.data, o.data, sizeof(float) * o.span);
  tu_assert_same_bits("lse after a rejected call", pristine.data, lse.data,
                      sizeof(float) * lse.span);
  tu_assert_guards("o", o.owner);
  tu_assert_guards("lse", lse.owner);
  tu_assert_guards("workspace", ws);
  tu_qkv_assert_unchanged(&x);
  tu_tensor_free(&pristine);
  tu_free(ws);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  tu_qkv_free(&x);
}
END_TEST

START_TEST(softmax_workspace_size_null_pointers) {
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, NQ, NKV, HQ, HKV, D, DV), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_softmax_workspace_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_softmax_workspace_size(&d, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Merge validation                                                                            */
/* ------------------------------------------------------------------------------------------ */
enum { MROWS = 6, MDV = 5 };
typedef enum mv_kind {
  MV_OPARTS_NULL, MV_OPART1_NULL, MV_LPARTS_NULL, MV_LPART0_NULL, MV_O_NULL,
  MV_ROWS_0, MV_DV_0, MV_PARTS_0, MV_ROWS_HUGE, MV_OSTRIDE_HUGE,
  MV_OSTRIDE_SMALL, MV_OUTSTRIDE_SMALL, MV_LSTRIDE_0, MV_LOUTSTRIDE_0,
  MV_O_IN_PART0, MV_O_IS_PART1_OTHER_STRIDE, MV_LOUT_IN_LPART0, MV_LOUT_IN_O, MV_O_IS_LPART0,
  MV_IN_PLACE_OK
} mv_kind;

typedef struct mv_case {
  const char *name;
  mv_kind kind;
  attn_status expect;
} mv_case;

static const mv_case mv_cases[] = {
  {"o_parts NULL", MV_OPARTS_NULL, ATTN_E_NULL_POINTER},
  {"o_parts[1] NULL", MV_OPART1_NULL, ATTN_E_NULL_POINTER},
  {"lse_parts NULL", MV_LPARTS_NULL, ATTN_E_NULL_POINTER},
  {"lse_parts[0] NULL", MV_LPART0_NULL, ATTN_E_NULL_POINTER},
  {"o NULL", MV_O_NULL, ATTN_E_NULL_POINTER},
  {"rows 0", MV_ROWS_0, ATTN_E_ZERO_SIZE},
  {"dv 0", MV_DV_0, ATTN_E_ZERO_SIZE},
  {"parts 0", MV_PARTS_0, ATTN_E_ZERO_SIZE},
  {"rows SIZE_MAX/2", MV_ROWS_HUGE, ATTN_E_SIZE_OVERFLOW},
  {"o_stride huge", MV_OSTRIDE_HUGE, ATTN_E_SIZE_OVERFLOW},
  {"o_stride < dv", MV_OSTRIDE_SMALL, ATTN_E_BAD_STRIDE},
  {"out_stride < dv", MV_OUTSTRIDE_SMALL, ATTN_E_BAD_STRIDE},
  {"lse_stride 0", MV_LSTRIDE_0, ATTN_E_BAD_STRIDE},
  {"lse_out_stride 0", MV_LOUTSTRIDE_0, ATTN_E_BAD_STRIDE},
  {"o inside o_parts[0]", MV_O_IN_PART0, ATTN_E_ALIASING},
  {"o is o_parts[1] with another stride", MV_O_IS_PART1_OTHER_STRIDE, ATTN_E_ALIASING},
  {"lse_out inside lse_parts[0]", MV_LOUT_IN_LPART0, ATTN_E_ALIASING},
  {"lse_out inside o", MV_LOUT_IN_O, ATTN_E_ALIASING},
  {"o is lse_parts[0]", MV_O_IS_LPART0, ATTN_E_ALIASING},
  {"in place (o is o_parts[1], lse_out is lse_parts[1])", MV_IN_PLACE_OK, ATTN_OK},
};
#define MV_NCASES (sizeof mv_cases / sizeof mv_cases[0])

START_TEST(merge_rejects_bad_input) {
  const mv_case *c = &mv_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 200 + (uint64_t)_i);
  /* parts and outputs: guarded, with room for the strided cases */
  const size_t cap = 2 * MROWS * (MDV + 1) + 8;
  float *po[2], *pl[2], *out, *lout;
  for (int p = 0; p < 2; ++p) {
    po[p] = tu_alloc(sizeof(float) * cap, 0);
    pl[p] = tu_alloc(sizeof(float) * cap, 0);
    for (size_t e = 0; e < cap; ++e) {
      po[p][e] = tu_rng_range(&rng, -1.0f, 1.0f);
      pl[p][e] = tu_rng_range(&rng, -2.0f, 2.0f);
    }
  }
  out = tu_alloc(sizeof(float) * cap, 0);
  lout = tu_alloc(sizeof(float) * cap, 0);
  float *copy = malloc(sizeof(float) * cap * 6);
  ck_assert_ptr_nonnull(copy);
  float *const all[6] = {po[0], po[1], pl[0], pl[1], out, lout};
  for (int b = 0; b < 6; ++b) memcpy(copy + b * cap, all[b], sizeof(float) * cap);
  const float *opv[2] = {po[0], po[1]}, *lpv[2] = {pl[0], pl[1]};
  const float *const *op = opv, *const *lp = lpv;
  size_t rows = MROWS, dv = MDV, parts = 2, os = MDV, ls = 1, outs = MDV, louts = 1;
  float *o = out, *lo = lout;
  switch (c->kind) {
  case MV_OPARTS_NULL: op = NULL; break;
  case MV_OPART1_NULL: opv[1] = NULL; break;
  case MV_LPARTS_NULL: lp = NULL; break;
  case MV_LPART0_NULL: lpv[0] = NULL; break;
  case MV_O_NULL: o = NULL; break;
  case MV_ROWS_0: rows = 0; break;
  case MV_DV_0: dv = 0; break;
  case MV_PARTS_0: parts = 0; break;
  case MV_ROWS_HUGE: rows = HUGE_N; break;
  case MV_OSTRIDE_HUGE: os = SIZE_MAX / 4; break;
  case MV_OSTRIDE_SMALL: os = MDV - 1; break;
  case MV_OUTSTRIDE_SMALL: outs = MDV - 1; break;
  case MV_LSTRIDE_0: ls = 0; break;
  case MV_LOUTSTRIDE_0: louts = 0; break;
  case MV_O_IN_PART0: o = po[0] + 1; break;
  case MV_O_IS_PART1_OTHER_STRIDE: o = po[1]; outs = MDV + 1; break;
  case MV_LOUT_IN_LPART0: lo = pl[0] + 1; break;
  case MV_LOUT_IN_O: lo = out + 3; break;
  case MV_O_IS_LPART0: o = pl[0]; break;
  case MV_IN_PLACE_OK: o = po[1]; lo = pl[1]; break;
  }
  ck_assert_int_eq(attn_softmax_merge(rows, dv, parts, op, os, lp, ls, o, outs, lo, louts),
                   c->expect);
  for (int b = 0; b < 6; ++b) {
    tu_assert_guards("merge buffer", all[b]);
    if (c->expect != ATTN_OK)
      tu_assert_same_bits("merge buffer after a rejected call", copy + b * cap, all[b],
                          sizeof(float) * cap);
  }
  if (c->expect == ATTN_OK) { /* in place wrote only o_parts[1] and lse_parts[1] */
    ck_assert_int_ne(memcmp(copy + 1 * cap, po[1], sizeof(float) * MROWS * MDV), 0);
    const int untouched[4] = {0, 2, 4, 5};
    for (int b = 0; b < 4; ++b)
      tu_assert_same_bits("merge buffer not written in place", copy + untouched[b] * cap,
                          all[untouched[b]], sizeof(float) * cap);
  }
  for (int b = 0; b < 6; ++b) tu_free(all[b]);
  free(copy);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Linear validation                                                                           */
/* ------------------------------------------------------------------------------------------ */
typedef enum lv_kind {
  LV_DESC_NULL, LV_Q_NULL, LV_K_NULL, LV_V_NULL, LV_O_NULL, LV_WS_NULL, LV_STATE_DATA_NULL,
  LV_NQ_0, LV_NKV_0, LV_HQ_0, LV_HKV_0, LV_D_0, LV_DV_0,
  LV_NQ_HUGE, LV_NKV_HUGE, LV_KROW_HUGE,
  LV_QROW_SMALL, LV_VHEAD_SMALL, LV_O_SELF_OVERLAP,
  LV_HEADS_3_2,
  LV_EPS_NAN, LV_EPS_NEG, LV_EPS_INF,
  LV_FM_COUNT, LV_FM_NEG, LV_FM_99,
  LV_CAUSAL_2, LV_CAUSAL_NEG, LV_NORM_2, LV_NORM_NEG, LV_CHUNK_TOO_BIG,
  LV_WS_SMALL,
  LV_O_IS_Q, LV_O_IN_K, LV_O_IS_V,
  LV_STATE_DV, LV_STATE_HEADS, LV_STATE_D, LV_STATE_MAP, LV_STATE_NORM,
  LV_STATE_BIDIR, LV_STATE_IN_O, LV_STATE_IS_K, LV_STATE_IN_WS
} lv_kind;

typedef struct lv_case {
  const char *name;
  lv_kind kind;
  attn_status expect;
  int desc_level; /* workspace_size, state_size and feature_size must answer the same */
} lv_case;

static const lv_case lv_cases[] = {
  {"desc NULL", LV_DESC_NULL, ATTN_E_NULL_POINTER, 0},
  {"q NULL", LV_Q_NULL, ATTN_E_NULL_POINTER, 0},
  {"k NULL", LV_K_NULL, ATTN_E_NULL_POINTER, 0},
  {"v NULL", LV_V_NULL, ATTN_E_NULL_POINTER, 0},
  {"o NULL", LV_O_NULL, ATTN_E_NULL_POINTER, 0},
  {"workspace NULL", LV_WS_NULL, ATTN_E_NULL_POINTER, 0},
  {"state data NULL", LV_STATE_DATA_NULL, ATTN_E_NULL_POINTER, 0},
  {"n_q 0", LV_NQ_0, ATTN_E_ZERO_SIZE, 1},
  {"n_kv 0", LV_NKV_0, ATTN_E_ZERO_SIZE, 1},
  {"h_q 0", LV_HQ_0, ATTN_E_ZERO_SIZE, 1},
  {"h_kv 0", LV_HKV_0, ATTN_E_ZERO_SIZE, 1},
  {"d 0", LV_D_0, ATTN_E_ZERO_SIZE, 1},
  {"dv 0", LV_DV_0, ATTN_E_ZERO_SIZE, 1},
  {"n_q SIZE_MAX/2", LV_NQ_HUGE, ATTN_E_SIZE_OVERFLOW, 1},
  {"n_kv SIZE_MAX/2", LV_NKV_HUGE, ATTN_E_SIZE_OVERFLOW, 1},
  {"k row stride huge", LV_KROW_HUGE, ATTN_E_SIZE_OVERFLOW, 1},
  {"q row stride < d", LV_QROW_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"v head stride < dv", LV_VHEAD_SMALL, ATTN_E_BAD_STRIDE, 1},
  {"o layout overlaps itself", LV_O_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 1},
  {"h_q 3, h_kv 2", LV_HEADS_3_2, ATTN_E_BAD_HEADS, 1},
  {"eps NaN", LV_EPS_NAN, ATTN_E_BAD_EPS, 1},
  {"eps negative", LV_EPS_NEG, ATTN_E_BAD_EPS, 1},
  {"eps +inf", LV_EPS_INF, ATTN_E_BAD_EPS, 1},
  {"feature map COUNT", LV_FM_COUNT, ATTN_E_BAD_FEATURE_MAP, 1},
  {"feature map -1", LV_FM_NEG, ATTN_E_BAD_FEATURE_MAP, 1},
  {"feature map 99", LV_FM_99, ATTN_E_BAD_FEATURE_MAP, 1},
  {"causal 2", LV_CAUSAL_2, ATTN_E_BAD_ARGUMENT, 1},
  {"causal -1", LV_CAUSAL_NEG, ATTN_E_BAD_ARGUMENT, 1},
  {"normalize 2", LV_NORM_2, ATTN_E_BAD_ARGUMENT, 1},
  {"normalize -1", LV_NORM_NEG, ATTN_E_BAD_ARGUMENT, 1},
  {"chunk above ATTN_LINEAR_MAX_CHUNK", LV_CHUNK_TOO_BIG, ATTN_E_BAD_ARGUMENT, 1},
  {"workspace one byte short", LV_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0},
  {"o is q", LV_O_IS_Q, ATTN_E_ALIASING, 0},
  {"o inside k", LV_O_IN_K, ATTN_E_ALIASING, 0},
  {"o is v", LV_O_IS_V, ATTN_E_ALIASING, 0},
  {"state with another dv", LV_STATE_DV, ATTN_E_STATE_MISMATCH, 0},
  {"state with another head count", LV_STATE_HEADS, ATTN_E_STATE_MISMATCH, 0},
  {"state with another feature size", LV_STATE_D, ATTN_E_STATE_MISMATCH, 0},
  {"state with another feature map", LV_STATE_MAP, ATTN_E_STATE_MISMATCH, 0},
  {"state with another normalize mode", LV_STATE_NORM, ATTN_E_STATE_MISMATCH, 0},
  {"state passed to bidirectional", LV_STATE_BIDIR, ATTN_E_BAD_ARGUMENT, 0},
  {"state data inside o", LV_STATE_IN_O, ATTN_E_ALIASING, 0},
  {"state data is k", LV_STATE_IS_K, ATTN_E_ALIASING, 0},
  {"state data inside the workspace", LV_STATE_IN_WS, ATTN_E_ALIASING, 0},
};
#define LV_NCASES (sizeof lv_cases / sizeof lv_cases[0])

typedef struct api_state {
  attn_linear_state s;
  void *mem;
  size_t bytes;
} api_state;

static void api_state_make(api_state *st, const attn_linear_desc *d, tu_rng *r) {
  ck_assert_int_eq(attn_linear_state_size(d, &st->bytes), ATTN_OK);
  st->mem = tu_alloc(st->bytes, 0);
  ck_assert_int_eq(attn_linear_state_init(&st->s, d, st->mem, st->bytes), ATTN_OK);
  /* a non-trivial prefix, so that an unwanted write shows */
  for (size_t e = 0; e < st->bytes / sizeof(float); ++e)
    st->s.data[e] = tu_rng_range(r, 0.0f, 1.0f);
  st->s.tokens = 11;
}

START_TEST(linear_rejects_bad_input) {
  const lv_case *c = &lv_cases[_i];
  tu_rng rng;
  tu_rng_seed(&rng, 300 + (uint64_t)_i);
  tu_qkv x;
  big_inputs(&x, &rng);
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  api_state st, alt;
  api_state_make(&st, &d, &rng);
  size_t need = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &need), ATTN_OK);
  tu_tensor o;
  tu_tensor_alloc(&o, TU_TOKEN_MAJOR, NQ, HQ, DV, 1);
  void *ws = tu_alloc(need + 4096, 0);
  const float *q = x.q.data, *k = x.k.data, *v = x.v.data;
  float *op = o.data;
  size_t ws_size = need;
  const attn_linear_desc *dp = &d;
  attn_linear_state *sp = &st.s;
  int have_alt = 0;
  attn_linear_desc ad = d;
  switch (c->kind) {
  case LV_DESC_NULL: dp = NULL; break;
  case LV_Q_NULL: q = NULL; break;
  case LV_K_NULL: k = NULL; break;
  case LV_V_NULL: v = NULL; break;
  case LV_O_NULL: op = NULL; break;
  case LV_WS_NULL: break; /* pointer set below */
  case LV_STATE_DATA_NULL: st.s.data = NULL; break;
  case LV_NQ_0: d.n_q = 0; break;
  case LV_NKV_0: d.n_kv = 0; break;
  case LV_HQ_0: d.h_q = 0; break;
  case LV_HKV_0: d.h_kv = 0; sp = NULL; break;
  case LV_D_0: d.d = 0; sp = NULL; break;
  case LV_DV_0: d.dv = 0; sp = NULL; break;
  case LV_NQ_HUGE: d.n_q = HUGE_N; break;
  case LV_NKV_HUGE: d.n_kv = HUGE_N; break;
  case LV_KROW_HUGE: d.k.row_stride = SIZE_MAX / 4; break;
  case LV_QROW_SMALL: d.q.row_stride = D - 1; break;
  case LV_VHEAD_SMALL: d.v.head_stride = DV - 1; break;
  case LV_O_SELF_OVERLAP: d.o.row_stride = DV; d.o.head_stride = DV; break;
  case LV_HEADS_3_2: d.h_q = 3; break;
  case LV_EPS_NAN: d.eps = NAN; break;
  case LV_EPS_NEG: d.eps = -1e-6f; break;
  case LV_EPS_INF: d.eps = INFINITY; break;
  case LV_FM_COUNT: d.feature_map = ATTN_FEATURE_COUNT; sp = NULL; break;
  case LV_FM_NEG: d.feature_map = (attn_feature_map)-1; sp = NULL; break;
  case LV_FM_99: d.feature_map = (attn_feature_map)99; sp = NULL; break;
  case LV_CAUSAL_2: d.causal = 2; sp = NULL; break;
  case LV_CAUSAL_NEG: d.causal = -1; sp = NULL; break;
  case LV_NORM_2: d.normalize = 2; sp = NULL; break;
  case LV_NORM_NEG: d.normalize = -1; sp = NULL; break;
  case LV_CHUNK_TOO_BIG: d.chunk = ATTN_LINEAR_MAX_CHUNK + 1; break;
  case LV_WS_SMALL: ck_assert_uint_gt(need, 0); ws_size = need - 1; break;
  case LV_O_IS_Q: op = x.q.data; break;
  case LV_O_IN_K: op = x.k.data + 5; break;
  case LV_O_IS_V: op = x.v.data; break;
  case LV_STATE_DV: ad.dv = DV - 1; have_alt = 1; break;
  case LV_STATE_HEADS: ad.h_kv = 1; have_alt = 1; break;
  case LV_STATE_D: ad.d = D + 1; have_alt = 1; break;
  case LV_STATE_MAP: ad.feature_map = ATTN_FEATURE_IDENTITY; have_alt = 1; break;
  case LV_STATE_NORM: ad.normalize = 0; have_alt = 1; break;
  case LV_STATE_BIDIR: d.causal = 0; break;
  case LV_STATE_IN_O: st.s.data = o.data + 2; break;
  case LV_STATE_IS_K: st.s.data = x.k.data; break;
  case LV_STATE_IN_WS: st.s.data = (float *)ws + 8; ws_size = need + 4096; break;
  }
  if (have_alt) { /* a state of another shape or mode, from a valid descriptor */
    attn_linear_desc fresh;
    ck_assert_int_eq(attn_linear_desc_init(&fresh, NQ, NKV, HQ, ad.h_kv, ad.d, ad.dv, ad.feature_map),
                     ATTN_OK);
    fresh.normalize = ad.normalize;
    api_state_make(&alt, &fresh, &rng);
    sp = &alt.s;
  }
  /* snapshot of the state that goes in (struct and data) */
  attn_linear_state before;
  memset(&before, 0, sizeof before);
  float *data_before = NULL;
  size_t data_bytes = 0;
  if (sp) {
    memcpy(&before, sp, sizeof before);
    data_bytes = (have_alt ? alt.bytes : st.bytes);
    data_before = malloc(data_bytes);
    ck_assert_ptr_nonnull(data_before);
    memcpy(data_before, have_alt ? alt.mem : st.mem, data_bytes);
  }
  ck_assert_int_eq(attn_linear(dp, q, k, v, op, sp, c->kind == LV_WS_NULL ? NULL : ws, ws_size),
                   c->expect);
  if (c->desc_level) {
    size_t bytes = 0, m = 0;
    ck_assert_int_eq(attn_linear_workspace_size(&d, &bytes), c->expect);
    ck_assert_int_eq(attn_linear_state_size(&d, &bytes), c->expect);
    ck_assert_int_eq(attn_linear_feature_size(&d, &m), c->expect);
    ck_assert_int_eq(attn_linear_chunk_size(&d, &m), c->expect);
  }
  tu_tensor pristine;
  tu_tensor_alloc(&pristine, TU_TOKEN_MAJOR, NQ, HQ, DV, 1);
  tu_assert_same_bits("o after a rejected call", pristine.data, o.data, sizeof(float) * o.span);
  tu_assert_guards("o", o.owner);
  tu_assert_guards("workspace", ws);
  tu_qkv_assert_unchanged(&x);
  if (sp) {
    tu_assert_same_bits("state struct after a rejected call", &before, sp, sizeof before);
    tu_assert_same_bits("state data after a rejected call", data_before,
                        have_alt ? alt.mem : st.mem, data_bytes);
    tu_assert_guards("state memory", have_alt ? alt.mem : st.mem);
  }
  free(data_before);
  tu_tensor_free(&pristine);
  if (have_alt) tu_free(alt.mem);
  tu_free(st.mem);
  tu_free(ws);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

START_TEST(linear_size_queries_null_pointers) {
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_linear_workspace_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_workspace_size(&d, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_size(&d, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_feature_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_feature_size(&d, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_chunk_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_chunk_size(&d, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

/* The chunk a call uses: the descriptor's when set, else the active path's documented default. */
START_TEST(linear_chunk_size_contract) {
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  size_t c = 0;
  ck_assert_int_eq(attn_linear_chunk_size(&d, &c), ATTN_OK);
  ck_assert_uint_eq(c, attn_isa_get() == ATTN_ISA_SCALAR ? 64 : 48);
  const size_t set[] = {1, 7, 48, ATTN_LINEAR_MAX_CHUNK};
  for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) {
    d.chunk = set[i];
    ck_assert_int_eq(attn_linear_chunk_size(&d, &c), ATTN_OK);
    ck_assert_uint_eq(c, set[i]);
  }
  d.chunk = ATTN_LINEAR_MAX_CHUNK + 1;
  c = 12345;
  ck_assert_int_eq(attn_linear_chunk_size(&d, &c), ATTN_E_BAD_ARGUMENT);
  ck_assert_uint_eq(c, 12345); /* untouched on error */
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* State management                                                                            */
/* ------------------------------------------------------------------------------------------ */
START_TEST(state_init_contract) {
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_linear_state_size(&d, &bytes), ATTN_OK);
  ck_assert_uint_ge(bytes, sizeof(float) * HKV * D * (DV + 1));
  void *mem = tu_alloc(bytes, 0);
  attn_linear_state s;
  ck_assert_int_eq(attn_linear_state_init(NULL, &d, mem, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init(&s, NULL, mem, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init(&s, &d, NULL, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init(&s, &d, mem, bytes - 1), ATTN_E_WORKSPACE_TOO_SMALL);
  attn_linear_desc bad = d;
  bad.d = 0;
  ck_assert_int_eq(attn_linear_state_init(&s, &bad, mem, bytes), ATTN_E_ZERO_SIZE);
  bad = d;
  bad.h_q = 3;
  ck_assert_int_eq(attn_linear_state_init(&s, &bad, mem, bytes), ATTN_E_BAD_HEADS);
  tu_assert_guards("state memory after rejected inits", mem);
  /* any float-aligned memory works: 4 bytes past a 64-byte boundary */
  void *mem2 = tu_alloc(bytes, 4);
  ck_assert_int_eq(attn_linear_state_init(&s, &d, mem2, bytes), ATTN_OK);
  ck_assert_ptr_eq(s.data, mem2);
  ck_assert_uint_eq(s.tokens, 0);
  for (size_t e = 0; e < HKV * D * (DV + 1); ++e) ck_assert(s.data[e] == 0.0f);
  tu_assert_guards("state memory", mem2);
  tu_free(mem2);
  tu_free(mem);
}
END_TEST

START_TEST(state_reset_contract) {
  tu_rng rng;
  tu_rng_seed(&rng, 400);
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  api_state st;
  api_state_make(&st, &d, &rng);
  ck_assert_int_eq(attn_linear_state_reset(NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_reset(&st.s), ATTN_OK);
  ck_assert_uint_eq(st.s.tokens, 0);
  ck_assert_uint_eq(st.s.heads, HKV);
  ck_assert_ptr_eq(st.s.data, st.mem);
  for (size_t e = 0; e < HKV * D * (DV + 1); ++e) ck_assert(st.s.data[e] == 0.0f);
  tu_assert_guards("state memory", st.mem);
  tu_free(st.mem);
}
END_TEST

START_TEST(state_copy_contract) {
  tu_rng rng;
  tu_rng_seed(&rng, 401);
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  api_state a, b, wrong_dv, wrong_mode;
  api_state_make(&a, &d, &rng);
  api_state_make(&b, &d, &rng);
  attn_linear_desc dd;
  ck_assert_int_eq(attn_linear_desc_init(&dd, NQ, NKV, HQ, HKV, D, DV + 1, ATTN_FEATURE_ELU1),
                   ATTN_OK);
  api_state_make(&wrong_dv, &dd, &rng);
  dd = d;
  dd.normalize = 0;
  api_state_make(&wrong_mode, &dd, &rng);
  const size_t bytes = a.bytes;
  float *b_before = malloc(bytes);
  ck_assert_ptr_nonnull(b_before);
  memcpy(b_before, b.mem, bytes);
  ck_assert_int_eq(attn_linear_state_copy(NULL, &a.s), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_copy(&b.s, NULL), ATTN_E_NULL_POINTER);
  attn_linear_state unbound = b.s;
  unbound.data = NULL;
  ck_assert_int_eq(attn_linear_state_copy(&unbound, &a.s), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_copy(&b.s, &wrong_dv.s), ATTN_E_STATE_MISMATCH);
  ck_assert_int_eq(attn_linear_state_copy(&b.s, &wrong_mode.s), ATTN_E_STATE_MISMATCH);
  ck_assert_int_eq(attn_linear_state_copy(&wrong_mode.s, &b.s), ATTN_E_STATE_MISMATCH);
  /* overlapping data that is not the same buffer */
  attn_linear_state shifted = a.s;
  shifted.data = a.s.data + 1;
  float *a_before = malloc(bytes);
  ck_assert_ptr_nonnull(a_before);
  memcpy(a_before, a.mem, bytes);
  ck_assert_int_eq(attn_linear_state_copy(&shifted, &a.s), ATTN_E_ALIASING);
  tu_assert_same_bits("src after a rejected overlapping copy", a_before, a.mem, bytes);
  tu_assert_same_bits("dst after rejected copies", b_before, b.mem, bytes);
  /* the same buffer is a no-op */
  ck_assert_int_eq(attn_linear_state_copy(&a.s, &a.s), ATTN_OK);
  tu_assert_same_bits("self copy", a_before, a.mem, bytes);
  /* a real copy: bitwise data, tokens, dst keeps its pointer */
  a.s.tokens = 1234;
  ck_assert_int_eq(attn_linear_state_copy(&b.s, &a.s), ATTN_OK);
  ck_assert_ptr_eq(b.s.data, b.mem);
  ck_assert_uint_eq(b.s.tokens, 1234);
  tu_assert_same_bits("copied state", a.mem, b.mem, sizeof(float) * HKV * D * (DV + 1));
  api_state *all[4] = {&a, &b, &wrong_dv, &wrong_mode};
  for (int i = 0; i < 4; ++i) {
    tu_assert_guards("state memory", all[i]->mem);
    tu_free(all[i]->mem);
  }
  free(a_before);
  free(b_before);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Concurrency: reentrant calls from several threads equal the serial results bit for bit      */
/* ------------------------------------------------------------------------------------------ */
enum { THREADS = 4, CN = 67, CH = 2, CD = 16 };

typedef struct job {
  const tu_qkv *x;
  float *o_sm, *o_ln;
  int status;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  attn_softmax_desc sd;
  attn_linear_desc ld;
  size_t ws1 = 0, ws2 = 0, sb = 0;
  j->status = -1;
  if (attn_softmax_desc_init(&sd, CN, CN, CH, CH, CD, CD) != ATTN_OK) return NULL;
  sd.window_right = 0;
  if (attn_linear_desc_init(&ld, CN, CN, CH, CH, CD, CD, ATTN_FEATURE_ELU1) != ATTN_OK) return NULL;
  if (attn_softmax_workspace_size(&sd, &ws1) != ATTN_OK) return NULL;
  if (attn_linear_workspace_size(&ld, &ws2) != ATTN_OK) return NULL;
  if (attn_linear_state_size(&ld, &sb) != ATTN_OK) return NULL;
  void *w1 = malloc(ws1 + 1), *w2 = malloc(ws2 + 1), *mem = malloc(sb);
  attn_linear_state st;
  int rc = -1;
  if (w1 && w2 && mem && attn_linear_state_init(&st, &ld, mem, sb) == ATTN_OK) {
    rc = 0;
    for (int rep = 0; rep < 20 && rc == 0; ++rep) {
      rc |= (int)attn_softmax(&sd, j->x->q.data, j->x->k.data, j->x->v.data, j->o_sm, NULL, w1, ws1);
      rc |= (int)attn_linear_state_reset(&st);
      rc |= (int)attn_linear(&ld, j->x->q.data, j->x->k.data, j->x->v.data, j->o_ln, &st, w2, ws2);
    }
  }
  free(w1);
  free(w2);
  free(mem);
  j->status = rc;
  return NULL;
}

START_TEST(concurrent_calls_match_serial) {
  tu_rng rng;
  tu_rng_seed(&rng, 500);
  tu_qkv x[THREADS];
  const size_t count = (size_t)CN * CH * CD;
  float *out = malloc(sizeof(float) * count * 2 * (THREADS + 1));
  ck_assert_ptr_nonnull(out);
  job jobs[THREADS], serial[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    tu_qkv_make(&x[t], TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, CN, CN, CH, CH, CD, CD);
    jobs[t] = (job){&x[t], out + (size_t)t * 2 * count, out + (size_t)t * 2 * count + count, -1};
  }
  for (int t = 0; t < THREADS; ++t) ck_assert_int_eq(pthread_create(&th[t], NULL, run_job, &jobs[t]), 0);
  for (int t = 0; t < THREADS; ++t) ck_assert_int_eq(pthread_join(th[t], NULL), 0);
  float *ser = out + (size_t)THREADS * 2 * count;
  for (int t = 0; t < THREADS; ++t) {
    ck_assert_int_eq(jobs[t].status, 0);
    serial[t] = (job){&x[t], ser, ser + count, -1};
    run_job(&serial[t]);
    ck_assert_int_eq(serial[t].status, 0);
    tu_assert_same_bits("threaded softmax vs serial", jobs[t].o_sm, ser, sizeof(float) * count);
    tu_assert_same_bits("threaded linear vs serial", jobs[t].o_ln, ser + count, sizeof(float) * count);
  }
  for (int t = 0; t < THREADS; ++t) tu_qkv_free(&x[t]);
  free(out);
}
END_TEST

static Suite *api_suite(attn_isa isa) {
  Suite *s = suite_create(attn_isa_name(isa));
  TCase *tc = tu_tcase("basics");
  tcase_add_test(tc, version_matches_macros);
  tcase_add_test(tc, status_strings_distinct_and_never_null);
  tcase_add_test(tc, isa_names_round_trip);
  tcase_add_test(tc, isa_environment_honoured);
  tcase_add_test(tc, isa_available_contract);
  tcase_add_test(tc, isa_set_contract);
  tcase_add_test(tc, softmax_desc_init_defaults);
  tcase_add_test(tc, linear_desc_init_defaults);
  suite_add_tcase(s, tc);
  tc = tu_tcase("validation");
  tcase_add_loop_test(tc, softmax_rejects_bad_input, 0, (int)SV_NCASES);
  tcase_add_test(tc, softmax_workspace_size_null_pointers);
  tcase_add_loop_test(tc, merge_rejects_bad_input, 0, (int)MV_NCASES);
  tcase_add_loop_test(tc, linear_rejects_bad_input, 0, (int)LV_NCASES);
  tcase_add_test(tc, linear_size_queries_null_pointers);
  tcase_add_test(tc, linear_chunk_size_contract);
  suite_add_tcase(s, tc);
  tc = tu_tcase("state");
  tcase_add_test(tc, state_init_contract);
  tcase_add_test(tc, state_reset_contract);
  tcase_add_test(tc, state_copy_contract);
  suite_add_tcase(s, tc);
  tc = tu_tcase("threads");
  tcase_add_test(tc, concurrent_calls_match_serial);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_main(api_suite); }
