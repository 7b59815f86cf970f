/*
 * Error reporting on the ISA path named by ATTN_ISA: attn_status_name, and the detail that
 * attn_last_error gives of the last failed call on a thread (exact texts of representative
 * failures, one buffer per thread, kept across successful calls, outputs untouched on error).
 * The shared bad-input tables (tests/common/bad_input.c) check that every refused call of
 * softmax, GAU and selective attention sets a detail of its own.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "core/status_list.h"

/* ------------------------------------------------------------------------------------------ */
/* Status names                                                                                */
/* ------------------------------------------------------------------------------------------ */
START_TEST(status_names_match_the_enum) {
#define NAME_ROW_(status, text) {status, #status},
  static const struct {
    attn_status s;
    const char *name;
  } rows[] = {ATTN_STATUS_LIST(NAME_ROW_)};
  const size_t n = sizeof rows / sizeof rows[0];
  for (size_t i = 0; i < n; ++i) {
    ck_assert_str_eq(attn_status_name(rows[i].s), rows[i].name);
    for (size_t j = 0; j < i; ++j) ck_assert_str_ne(attn_status_name(rows[i].s), attn_status_name(rows[j].s));
  }
  static const int out_of_range[] = {-1, (int)n, 1000};
  for (size_t i = 0; i < 3; ++i)
    ck_assert_str_eq(attn_status_name((attn_status)out_of_range[i]), "ATTN_UNKNOWN_STATUS");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Exact details                                                                               */
/* ------------------------------------------------------------------------------------------ */
/* attn_isa_set's detail for an id that is no path. */
static const char *isa_id_text(int id) {
  static char text[96];
  snprintf(text, sizeof text, "isa %d: not ATTN_ISA_AUTO or a path id (1 .. %d)", id, ATTN_ISA_COUNT - 1);
  return text;
}

#define ASSERT_FAILS(call, status, text)                                                            \
  do {                                                                                              \
    const attn_status got_ = (call);                                                                \
    ck_assert_msg(got_ == (status), "%s: got %s, want %s", #call, attn_status_name(got_), #status); \
    ck_assert_str_eq(attn_last_error(), text);                                                      \
  } while (0)

/* Softmax with the shared bad-input buffers (tu_bad): the detail of a stride, a workspace one
 * byte short, an aliased output and a NULL input, and nothing written. */
START_TEST(softmax_details_and_nothing_written) {
  static const struct {
    int fault;
    attn_status expect;
    const char *text; /* NULL: the workspace's, formatted below */
  } rows[] = {
      {TU_BAD_KROW_SMALL, ATTN_E_BAD_STRIDE, "shape.k.row_stride 7 < d 8"},
      {TU_BAD_VHEAD_SMALL, ATTN_E_BAD_STRIDE, "shape.v.head_stride 5 < dv 6"},
      {TU_BAD_O_SELF_OVERLAP, ATTN_E_BAD_STRIDE,
       "shape.o overlaps itself: row_stride 6 < (4 heads - 1) x head_stride 6 + dv 6 = 24"},
      {TU_BAD_HEADS_3_2, ATTN_E_BAD_HEADS, "shape.h_k 2 does not divide the output heads H 3"},
      {TU_BAD_SCALE_NAN, ATTN_E_BAD_SCALE, "desc.scale nan: must be finite"},
      {TU_BAD_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, NULL},
      {TU_BAD_O_IS_Q, ATTN_E_ALIASING, "o overlaps input q"},
      {TU_BAD_LSE_IN_O, ATTN_E_ALIASING, "o overlaps output lse"},
      {TU_BAD_K_NULL, ATTN_E_NULL_POINTER, "k is NULL"},
      {TU_BAD_DV_0, ATTN_E_ZERO_SIZE, "shape.dv is 0"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    attn_softmax_desc d;
    ck_assert_int_eq(attn_softmax_desc_init(&d, 5, 7, TU_BAD_HQ, TU_BAD_HKV, TU_BAD_D, TU_BAD_DV), ATTN_OK);
    size_t need = 0;
    TU_CALL_WS(attn_softmax, &d, &need);
    tu_rng rng = tu_rng_of(11 + i);
    tu_bad b;
    tu_bad_make(&b, &rng, &d.shape, 2, 1, need);
    tu_bad_apply(&b, tu_bad_row((size_t)rows[i].fault, 1, NULL), &d.shape, &d.scale, &d.lse, NULL, 0);
    char ws_text[96];
    snprintf(ws_text, sizeof ws_text, "workspace_size %zu B < %zu B needed", need - 1, need);
    ASSERT_FAILS(attn_softmax(&d, b.q, b.k, b.v, b.o_arg, b.lse_arg, b.ws_arg, b.ws_size), rows[i].expect,
                 rows[i].text ? rows[i].text : ws_text);
    tu_bad_assert_untouched(&b);
    tu_bad_free(&b);
  }
}
END_TEST

START_TEST(softmax_option_details) {
  enum { N = 3, H = 2, D = 4 };
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, N, N, H, H, D, D), ATTN_OK);
  size_t bytes = 0;
  const float sinks[H] = {0.5f, INFINITY};
  d.sinks = sinks;
  ASSERT_FAILS(attn_softmax_workspace_size(&d, &bytes), ATTN_E_BAD_BIAS, "desc.sinks[1] = inf: must be finite");
  d.sinks = NULL;
  d.softcap = -2.0f;
  ASSERT_FAILS(attn_softmax_workspace_size(&d, &bytes), ATTN_E_BAD_SCALE,
               "desc.softcap -2: must be 0 (none) or positive and finite");
}
END_TEST

/* A linear descriptor of N tokens, h heads, d = dv = D, elu1, causal, and its workspace. */
enum { LN = 4, LD = 4 };
static void *linear_setup(attn_linear_desc *d, size_t h, size_t *ws_bytes) {
  ck_assert_int_eq(attn_linear_desc_init(d, LN, LN, h, h, LD, LD, ATTN_FEATURE_ELU1), ATTN_OK);
  ck_assert_int_eq(attn_linear_workspace_size(d, ws_bytes), ATTN_OK);
  void *ws = malloc(*ws_bytes);
  ck_assert_ptr_nonnull(ws);
  return ws;
}

static float *filled(size_t n, float value) {
  float *x = malloc(sizeof(float) * n);
  ck_assert_ptr_nonnull(x);
  for (size_t i = 0; i < n; ++i) x[i] = value;
  return x;
}

/* A state made for 2 heads, given to a call of 8: the state's and the call's head counts. */
START_TEST(linear_state_heads_detail) {
  attn_linear_desc small, big;
  size_t ws_bytes, state_bytes;
  void *ws_small = linear_setup(&small, 2, &ws_bytes);
  void *ws = linear_setup(&big, 8, &ws_bytes);
  ck_assert_int_eq(attn_linear_state_size(&small, &state_bytes), ATTN_OK);
  float *mem = filled(state_bytes / sizeof(float), 0.0f);
  attn_linear_state st;
  ck_assert_int_eq(attn_linear_state_init(&st, &small, mem, state_bytes), ATTN_OK);
  float *q = filled(LN * 8 * LD, 0.25f), *o = filled(LN * 8 * LD, -7.0f);
  ASSERT_FAILS(attn_linear(&big, q, q, q, o, &st, ws, ws_bytes), ATTN_E_STATE_MISMATCH,
               "state has 2 heads, the call needs 8");
  for (size_t i = 0; i < LN * 8 * LD; ++i) ck_assert_float_eq(o[i], -7.0f); /* nothing written */
  free(q);
  free(o);
  free(mem);
  free(ws);
  free(ws_small);
}
END_TEST

/* Gates: a positive log gate (its token and head), a gated descriptor given to attn_linear, and a
 * per-feature gate left with attn_linear_desc_init's scalar gate layout. */
START_TEST(linear_gate_details) {
  enum { H = 2 };
  attn_linear_desc d;
  size_t ws_bytes;
  void *ws = linear_setup(&d, H, &ws_bytes);
  float *q = filled(LN * H * LD, 0.25f), *o = filled(LN * H * LD, -7.0f), *lg = filled(LN * H * LD, -0.1f);
  d.gate = ATTN_GATE_SCALAR;
  lg[1 * H + 0] = 0.5f; /* token 1, head 0 of the default [n_kv][H] layout */
  ASSERT_FAILS(attn_linear_gated(&d, q, q, q, lg, NULL, o, NULL, ws, ws_bytes), ATTN_E_BAD_GATE,
               "log_gate[token 1, head 0] = 0.5: must be finite and <= 0");
  d.gate = ATTN_GATE_FEATURE;
  size_t bytes = 0;
  ASSERT_FAILS(attn_linear_workspace_size(&d, &bytes), ATTN_E_BAD_STRIDE,
               "desc.gate_layout.row_stride 2 < m 4: a per-feature gate has m log gates per head: [n_kv][h_g][m] is "
               "gate_layout {h_g m, m} = {8, 4} (row_stride 0: the same gates for every token)");
  d.gate_layout = (attn_layout){H * LD, LD};
  ASSERT_FAILS(attn_linear(&d, q, q, q, o, NULL, ws, ws_bytes), ATTN_E_BAD_ARGUMENT,
               "desc.gate is ATTN_GATE_FEATURE: call attn_linear_gated");
  d.gate = ATTN_GATE_NONE;
  d.beta = 1;
  ASSERT_FAILS(attn_linear(&d, q, q, q, o, NULL, ws, ws_bytes), ATTN_E_BAD_ARGUMENT,
               "desc.beta is 1: call attn_linear_gated");
  for (size_t i = 0; i < LN * H * LD; ++i) ck_assert_float_eq(o[i], -7.0f);
  free(lg);
  free(q);
  free(o);
  free(ws);
}
END_TEST

START_TEST(other_details) {
  ASSERT_FAILS(attn_isa_set((attn_isa)42), ATTN_E_BAD_ARGUMENT, isa_id_text(42));
  attn_pool *pool = NULL;
  char text[96];
  snprintf(text, sizeof text, "threads %d > ATTN_MAX_WORKERS %d", ATTN_MAX_WORKERS + 1, ATTN_MAX_WORKERS);
  ASSERT_FAILS(attn_pool_create(ATTN_MAX_WORKERS + 1, &pool), ATTN_E_BAD_ARGUMENT, text);
  float part[2 * 6] = {0}, lse[2] = {0}, out[2 * 6];
  const float *o_parts[1] = {part}, *lse_parts[1] = {lse};
  ASSERT_FAILS(attn_softmax_merge(2, 6, 1, o_parts, 5, lse_parts, 1, out, 6, NULL, 0), ATTN_E_BAD_STRIDE,
               "o_stride 5 < the row's 6 floats");
  ASSERT_FAILS(attn_shape_init(NULL, 1, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER, "shape is NULL");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* One detail per thread, kept across successful calls                                         */
/* ------------------------------------------------------------------------------------------ */
typedef struct thread_probe {
  char before[256], after[256];
} thread_probe;

static void *other_thread(void *arg) {
  thread_probe *p = arg;
  snprintf(p->before, sizeof p->before, "%s", attn_last_error());
  (void)attn_isa_set((attn_isa)-9);
  snprintf(p->after, sizeof p->after, "%s", attn_last_error());
  return NULL;
}

START_TEST(detail_is_per_thread) {
  ASSERT_FAILS(attn_isa_set((attn_isa)42), ATTN_E_BAD_ARGUMENT, isa_id_text(42));
  thread_probe p;
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, other_thread, &p), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_str_eq(p.before, ""); /* a new thread has no failure yet */
  ck_assert_str_eq(p.after, isa_id_text(-9));
  ck_assert_str_eq(attn_last_error(), isa_id_text(42));
}
END_TEST

START_TEST(detail_kept_after_success) {
  ASSERT_FAILS(attn_isa_set((attn_isa)42), ATTN_E_BAD_ARGUMENT, isa_id_text(42));
  attn_softmax_desc d;
  size_t bytes = 0;
  ck_assert_int_eq(attn_softmax_desc_init(&d, 1, 512, 1, 1, 64, 64), ATTN_OK);
  ck_assert_int_eq(attn_softmax_workspace_size(&d, &bytes), ATTN_OK);
  ck_assert_str_eq(attn_last_error(), isa_id_text(42));
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"names", status_names_match_the_enum, 1},
  {"details", softmax_details_and_nothing_written, 1}, {"details", softmax_option_details, 1},
    {"details", linear_state_heads_detail, 1}, {"details", linear_gate_details, 1}, {"details", other_details, 1},
  {"threads", detail_is_per_thread, 1}, {"threads", detail_kept_after_success, 1})
/* clang-format on */
