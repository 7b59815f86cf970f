/*
 * Bad input of the explicit analysis functions (attn.h, analysis: attn_matrix, attn_matrix_stats
 * and their workspace queries), on the ISA path named by ATTN_ISA: TCase "bad_input", the exact
 * status of every bad argument, nothing written. The results themselves: check_analysis.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analysis_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid call of its kind (n_q 5, n_kv 7, h_q 4, */
/* h_kv 2, d 8, causal; linear: identity with a scalar gate and beta; GAU: a causal table of 5; */
/* selective: a carried F); attn_matrix and/or attn_matrix_stats answer the row's status and    */
/* write nothing; for descriptor-level rows both size queries answer it too.                    */
/* ------------------------------------------------------------------------------------------ */
enum { BQ = 5, BKV = 7, BHQ = 4, BHKV = 2, BD = 8, BL = 5 };
/* Offsets (floats) of the inputs in one arena, which the aliasing faults point into. */
enum { AR_Q = 1024, AR_K = 2048, AR_G = 3072, AR_B = 3584, AR_T = 4096, AR_F = 4608, AR_FLOATS = 8192 };

typedef enum bi_fault {
  F_CALL_NULL,
  F_DESC_NULL,
  F_KIND_4,
  F_KIND_NEG,
  F_NKV_LIMIT,
  F_NKV_HUGE,
  F_NKV_LIMIT_SCALE_NAN, /* the limit before the variant's checks */
  F_NQ_0,
  F_D_0,
  F_HQ_3,
  F_SCALE_NAN,
  F_QROW_SMALL,
  F_LSE_LAYOUT, /* softmax: the lse layout is checked without an lse */
  F_EPS_NEG,
  F_GATE_POSITIVE,
  F_GATE_NULL,
  F_BETA_NULL,
  F_BIAS_NAN,
  F_HSEL_4,
  F_A_ROW_SMALL,
  F_A_OVERLAP,
  F_A_BAD_SCALE_NAN, /* the variant's checks before a's layout */
  F_A_BAD_Q_NULL,    /* a's layout before the pointers */
  F_Q_NULL,
  F_K_NULL,
  F_A_NULL,
  F_WS_NULL,
  F_WS_SMALL,
  F_A_IS_Q,
  F_A_ENDS_IN_K,
  F_A_IN_WS,
  F_WS_OVER_Q,
  F_A_IS_GATE,
  F_A_IS_BETA,
  F_A_IS_TABLE,
  F_A_IS_F,
  F_WS_IS_F,
  F_STATS_NULL,
  F_STATS_ALL_NULL,
  F_STATS_SELF_OVERLAP,
  F_STATS_SAME,
  F_STATS_IN_Q,
  F_STATS_IN_WS,
  F_STATS_IS_TABLE
} bi_fault;

enum { BI_MATRIX = 1, BI_STATS = 2, BI_BOTH = 3 };

typedef struct bi_case {
  const char *name;
  attn_kind kind;
  bi_fault fault;
  attn_status expect;
  int desc_level; /* the size queries answer the same status */
  int which;      /* BI_MATRIX, BI_STATS or both */
} bi_case;

#define BI(k, f, s, lvl, w) .kind = ATTN_KIND_##k, .fault = (f), .expect = ATTN_E_##s, .desc_level = (lvl), .which = (w)
static const bi_case bi_cases[] = {
    {.name = "call NULL", BI(SOFTMAX, F_CALL_NULL, NULL_POINTER, 1, BI_BOTH)},
    {.name = "desc NULL", BI(SOFTMAX, F_DESC_NULL, NULL_POINTER, 1, BI_BOTH)},
    {.name = "kind 4", BI(SOFTMAX, F_KIND_4, BAD_ARGUMENT, 1, BI_BOTH)},
    {.name = "kind -1", BI(GAU, F_KIND_NEG, BAD_ARGUMENT, 1, BI_BOTH)},
    {.name = "n_kv above the limit", BI(SOFTMAX, F_NKV_LIMIT, TOO_LARGE, 1, BI_BOTH)},
    {.name = "n_kv SIZE_MAX", BI(LINEAR, F_NKV_HUGE, TOO_LARGE, 1, BI_BOTH)},
    {.name = "n_kv above the limit, scale NaN", BI(SELECTIVE, F_NKV_LIMIT_SCALE_NAN, TOO_LARGE, 1, BI_BOTH)},
    {.name = "n_q 0", BI(GAU, F_NQ_0, ZERO_SIZE, 1, BI_BOTH)},
    {.name = "d 0", BI(LINEAR, F_D_0, ZERO_SIZE, 1, BI_BOTH)},
    {.name = "h_q 3 over h_kv 2", BI(SOFTMAX, F_HQ_3, BAD_HEADS, 1, BI_BOTH)},
    {.name = "softmax scale NaN", BI(SOFTMAX, F_SCALE_NAN, BAD_SCALE, 1, BI_BOTH)},
    {.name = "linear scale NaN", BI(LINEAR, F_SCALE_NAN, BAD_SCALE, 1, BI_BOTH)},
    {.name = "GAU scale NaN", BI(GAU, F_SCALE_NAN, BAD_SCALE, 1, BI_BOTH)},
    {.name = "q row stride below d", BI(SELECTIVE, F_QROW_SMALL, BAD_STRIDE, 1, BI_BOTH)},
    {.name = "softmax lse layout overlapping itself", BI(SOFTMAX, F_LSE_LAYOUT, BAD_STRIDE, 1, BI_BOTH)},
    {.name = "linear eps negative", BI(LINEAR, F_EPS_NEG, BAD_EPS, 1, BI_BOTH)},
    {.name = "a log gate positive", BI(LINEAR, F_GATE_POSITIVE, BAD_GATE, 0, BI_BOTH)},
    {.name = "log gate NULL", BI(LINEAR, F_GATE_NULL, NULL_POINTER, 0, BI_BOTH)},
    {.name = "beta NULL", BI(LINEAR, F_BETA_NULL, NULL_POINTER, 0, BI_BOTH)},
    {.name = "GAU beta NaN", BI(GAU, F_BIAS_NAN, BAD_BIAS, 1, BI_BOTH)},
    {.name = "selective h_sel = h_q", BI(SELECTIVE, F_HSEL_4, BAD_HEADS, 1, BI_BOTH)},
    {.name = "a row stride below n_kv", BI(SOFTMAX, F_A_ROW_SMALL, BAD_STRIDE, 0, BI_MATRIX)},
    {.name = "a heads overlapping rows", BI(GAU, F_A_OVERLAP, BAD_STRIDE, 0, BI_MATRIX)},
    {.name = "a layout bad and scale NaN", BI(SOFTMAX, F_A_BAD_SCALE_NAN, BAD_SCALE, 0, BI_MATRIX)},
    {.name = "a layout bad and q NULL", BI(LINEAR, F_A_BAD_Q_NULL, BAD_STRIDE, 0, BI_MATRIX)},
    {.name = "q NULL", BI(SOFTMAX, F_Q_NULL, NULL_POINTER, 0, BI_BOTH)},
    {.name = "k NULL", BI(SELECTIVE, F_K_NULL, NULL_POINTER, 0, BI_BOTH)},
    {.name = "a NULL", BI(LINEAR, F_A_NULL, NULL_POINTER, 0, BI_MATRIX)},
    {.name = "workspace NULL", BI(GAU, F_WS_NULL, NULL_POINTER, 0, BI_BOTH)},
    {.name = "workspace one byte short", BI(SOFTMAX, F_WS_SMALL, WORKSPACE_TOO_SMALL, 0, BI_BOTH)},
    {.name = "workspace one byte short (linear)", BI(LINEAR, F_WS_SMALL, WORKSPACE_TOO_SMALL, 0, BI_BOTH)},
    {.name = "workspace one byte short (selective)", BI(SELECTIVE, F_WS_SMALL, WORKSPACE_TOO_SMALL, 0, BI_BOTH)},
    {.name = "a is q", BI(SOFTMAX, F_A_IS_Q, ALIASING, 0, BI_MATRIX)},
    {.name = "a ends inside k", BI(SELECTIVE, F_A_ENDS_IN_K, ALIASING, 0, BI_MATRIX)},
    {.name = "a inside the workspace", BI(GAU, F_A_IN_WS, ALIASING, 0, BI_MATRIX)},
    {.name = "workspace over q", BI(SOFTMAX, F_WS_OVER_Q, ALIASING, 0, BI_BOTH)},
    {.name = "workspace over q (linear)", BI(LINEAR, F_WS_OVER_Q, ALIASING, 0, BI_BOTH)},
    {.name = "a is the log gates", BI(LINEAR, F_A_IS_GATE, ALIASING, 0, BI_MATRIX)},
    {.name = "a is beta", BI(LINEAR, F_A_IS_BETA, ALIASING, 0, BI_MATRIX)},
    {.name = "a is the bias table", BI(GAU, F_A_IS_TABLE, ALIASING, 0, BI_MATRIX)},
    {.name = "a is f", BI(SELECTIVE, F_A_IS_F, ALIASING, 0, BI_MATRIX)},
    {.name = "workspace is f", BI(SELECTIVE, F_WS_IS_F, ALIASING, 0, BI_BOTH)},
    {.name = "stats NULL", BI(SOFTMAX, F_STATS_NULL, NULL_POINTER, 0, BI_STATS)},
    {.name = "stats arrays all NULL", BI(LINEAR, F_STATS_ALL_NULL, NULL_POINTER, 0, BI_STATS)},
    {.name = "stats layout overlapping itself", BI(GAU, F_STATS_SELF_OVERLAP, BAD_STRIDE, 0, BI_STATS)},
    {.name = "stats entropy is sparsity", BI(SELECTIVE, F_STATS_SAME, ALIASING, 0, BI_STATS)},
    {.name = "stats count inside q", BI(SOFTMAX, F_STATS_IN_Q, ALIASING, 0, BI_STATS)},
    {.name = "stats sparsity inside the workspace", BI(LINEAR, F_STATS_IN_WS, ALIASING, 0, BI_STATS)},
    {.name = "stats entropy is the bias table", BI(GAU, F_STATS_IS_TABLE, ALIASING, 0, BI_STATS)},
};
#define BI_NCASES (sizeof bi_cases / sizeof bi_cases[0])

/* A valid call of a kind over the arena, and the arguments a fault changes. */
typedef struct bi_fixture {
  float *arena, *arena_copy;
  size_t arena_floats;
  an_desc d;
  attn_call call;
  const attn_call *call_arg;
  tu_tensor a;
  float *a_arg;
  attn_layout a_layout;
  an_stats st;
  attn_row_stats rs;
  const attn_row_stats *rs_arg;
  void *ws, *ws_arg;
  size_t need_matrix, need_stats, ws_size;
} bi_fixture;

static const float bi_zeros[BL] = {0};

static void bi_make(bi_fixture *b, attn_kind kind, tu_rng *r) {
  memset(b, 0, sizeof *b);
  an_desc *d = &b->d;
  switch (kind) {
    case ATTN_KIND_SOFTMAX:
      ck_assert_int_eq(attn_softmax_desc_init(&d->sm, BQ, BKV, BHQ, BHKV, BD, 3), ATTN_OK);
      d->sm.mask = attn_mask_causal();
      break;
    case ATTN_KIND_LINEAR:
      ck_assert_int_eq(attn_linear_desc_init(&d->lin, BQ, BKV, BHQ, BHKV, BD, 3, ATTN_FEATURE_IDENTITY), ATTN_OK);
      d->lin.normalize = 0;
      d->lin.gate = ATTN_GATE_SCALAR;
      d->lin.beta = 1;
      break;
    case ATTN_KIND_GAU:
      ck_assert_int_eq(attn_gau_desc_init(&d->gau, BQ, BKV, BHQ, BHKV, BD, 3), ATTN_OK);
      d->gau.mask = attn_mask_causal();
      d->gau.bias = ATTN_GAU_BIAS_CAUSAL;
      d->gau.bias_len = BL;
      d->gau.bias_table = bi_zeros; /* for the size queries; the arena's below */
      break;
    default:
      ck_assert_int_eq(attn_selective_desc_init(&d->sel, BQ, BKV, BHQ, BHKV, BD, 3), ATTN_OK);
      break;
  }
  b->call = (attn_call){kind, d, NULL, NULL, NULL, NULL, NULL};
  ck_assert_int_eq(attn_matrix_workspace_size(&b->call, &b->need_matrix), ATTN_OK);
  ck_assert_int_eq(attn_matrix_stats_workspace_size(&b->call, &b->need_stats), ATTN_OK);
  b->arena_floats = AR_FLOATS + b->need_stats / sizeof(float) + 64;
  b->arena = an_floats(b->arena_floats);
  b->arena_copy = an_floats(b->arena_floats);
  for (size_t e = 0; e < b->arena_floats; ++e) b->arena[e] = tu_rng_range(r, -0.5f, 0.5f);
  for (size_t e = 0; e < BKV * BHQ; ++e) {
    b->arena[AR_G + e] = tu_rng_range(r, -0.5f, -0.01f); /* log gates < 0 */
    b->arena[AR_B + e] = tu_rng_range(r, 0.5f, 1.5f);    /* beta > 0 */
  }
  if (kind == ATTN_KIND_GAU) d->gau.bias_table = b->arena + AR_T;
  b->call = (attn_call){kind,
                        d,
                        b->arena + AR_Q,
                        b->arena + AR_K,
                        kind == ATTN_KIND_LINEAR ? b->arena + AR_G : NULL,
                        kind == ATTN_KIND_LINEAR ? b->arena + AR_B : NULL,
                        kind == ATTN_KIND_SELECTIVE ? b->arena + AR_F : NULL};
  b->call_arg = &b->call;
  tu_tensor_alloc(&b->a, TU_TOKEN_MAJOR, BQ, BHQ, BKV, 1);
  b->a_arg = b->a.data;
  b->a_layout = b->a.l;
  an_stats_alloc(&b->st, TU_TOKEN_MAJOR, BQ, BHQ);
  b->rs = b->st.rs;
  b->rs_arg = &b->rs;
  b->ws = tu_alloc(b->need_stats, 0);
  b->ws_arg = b->ws;
}

/* Applies a fault to the fixture (ws_size is set per call: the function's own need). */
static void bi_apply(bi_fixture *b, bi_fault f) {
  attn_shape *s = &b->d.shape;
  float *scale = b->call.kind == ATTN_KIND_SOFTMAX  ? &b->d.sm.scale
                 : b->call.kind == ATTN_KIND_LINEAR ? &b->d.lin.scale
                 : b->call.kind == ATTN_KIND_GAU    ? &b->d.gau.scale
                                                    : &b->d.sel.scale;
  const attn_layout bad_a = {BKV - 1, BKV};
  switch (f) {
    case F_CALL_NULL:
      b->call_arg = NULL;
      break;
    case F_DESC_NULL:
      b->call.desc = NULL;
      break;
    case F_KIND_4:
      b->call.kind = (attn_kind)4;
      break;
    case F_KIND_NEG:
      b->call.kind = (attn_kind)-1;
      break;
    case F_NKV_LIMIT_SCALE_NAN:
      *scale = NAN;
      /* fall through */
    case F_NKV_LIMIT:
      s->n_kv = ATTN_MATRIX_MAX_KV + 1;
      break;
    case F_NKV_HUGE:
      s->n_kv = SIZE_MAX;
      break;
    case F_NQ_0:
      s->n_q = 0;
      break;
    case F_D_0:
      s->d = 0;
      break;
    case F_HQ_3:
      s->h_q = 3;
      s->q = (attn_layout){3 * BD, BD};
      break;
    case F_SCALE_NAN:
      *scale = NAN;
      break;
    case F_QROW_SMALL:
      s->q.row_stride = BD - 1;
      break;
    case F_LSE_LAYOUT:
      b->d.sm.lse = (attn_layout){1, 1};
      break;
    case F_EPS_NEG:
      b->d.lin.eps = -1e-3f;
      break;
    case F_GATE_POSITIVE:
      b->arena[AR_G + 3 * BHQ + 1] = 0.25f;
      break;
    case F_GATE_NULL:
      b->call.log_gate = NULL;
      break;
    case F_BETA_NULL:
      b->call.beta = NULL;
      break;
    case F_BIAS_NAN:
      b->d.gau.bias = ATTN_GAU_BIAS_SCALAR;
      b->d.gau.beta = NAN;
      break;
    case F_HSEL_4:
      b->d.sel.h_sel = BHQ;
      break;
    case F_A_ROW_SMALL:
      b->a_layout = (attn_layout){BKV * BHQ - 1, BKV};
      break;
    case F_A_OVERLAP: /* rows BKV apart, heads BKV apart: head 1 of row 0 is row 1's head 0 */
      b->a_layout = bad_a;
      b->a_layout.row_stride = BKV;
      break;
    case F_A_BAD_SCALE_NAN:
      *scale = NAN;
      b->a_layout = bad_a;
      break;
    case F_A_BAD_Q_NULL:
      b->call.q = NULL;
      b->a_layout = bad_a;
      break;
    case F_Q_NULL:
      b->call.q = NULL;
      break;
    case F_K_NULL:
      b->call.k = NULL;
      break;
    case F_A_NULL:
      b->a_arg = NULL;
      break;
    case F_WS_NULL:
      b->ws_arg = NULL;
      break;
    case F_A_IS_Q:
      b->a_arg = b->arena + AR_Q;
      break;
    case F_A_ENDS_IN_K: /* a's span (BQ BHQ BKV floats) ends on k's first element */
      b->a_arg = b->arena + AR_K + 1 - BQ * BHQ * BKV;
      break;
    case F_A_IN_WS:
      b->a_arg = (float *)b->ws + 16;
      break;
    case F_WS_OVER_Q:
      b->ws_arg = b->arena;
      break;
    case F_A_IS_GATE:
      b->a_arg = b->arena + AR_G;
      break;
    case F_A_IS_BETA:
      b->a_arg = b->arena + AR_B + 4;
      break;
    case F_A_IS_TABLE:
      b->a_arg = b->arena + AR_T + BL - 1;
      break;
    case F_A_IS_F:
      b->a_arg = b->arena + AR_F;
      break;
    case F_WS_IS_F:
      b->ws_arg = b->arena + AR_F;
      break;
    case F_STATS_NULL:
      b->rs_arg = NULL;
      break;
    case F_STATS_ALL_NULL:
      b->rs.entropy = b->rs.sparsity = b->rs.count = NULL;
      break;
    case F_STATS_SELF_OVERLAP:
      b->rs.layout = (attn_layout){1, 1};
      break;
    case F_STATS_SAME:
      b->rs.sparsity = b->rs.entropy;
      break;
    case F_STATS_IN_Q:
      b->rs.count = b->arena + AR_Q + 7;
      break;
    case F_STATS_IN_WS:
      b->rs.sparsity = (float *)b->ws + 100;
      break;
    case F_STATS_IS_TABLE:
      b->rs.entropy = b->arena + AR_T;
      break;
    default:
      break;
  }
}

static void bi_free(bi_fixture *b) {
  free(b->arena);
  free(b->arena_copy);
  tu_tensor_free(&b->a);
  an_stats_free(&b->st);
  tu_free(b->ws);
}

START_TEST(analysis_rejects_bad_input) {
  const bi_case *c = &bi_cases[_i];
  for (int which = BI_MATRIX; which <= BI_STATS; ++which) {
    if (!(c->which & which)) continue;
    tu_rng rng = tu_rng_of(500 + (uint64_t)_i);
    bi_fixture b;
    bi_make(&b, c->kind, &rng);
    bi_apply(&b, c->fault);
    memcpy(b.arena_copy, b.arena, sizeof(float) * b.arena_floats);
    const size_t need = which == BI_MATRIX ? b.need_matrix : b.need_stats;
    const size_t ws_size = c->fault == F_WS_SMALL ? need - 1 : need;
    const attn_status got = which == BI_MATRIX ? attn_matrix(b.call_arg, b.a_arg, b.a_layout, b.ws_arg, ws_size)
                                               : attn_matrix_stats(b.call_arg, b.rs_arg, b.ws_arg, ws_size);
    ck_assert_msg(got == c->expect, "%s: %s answered %s, expected %s", c->name,
                  which == BI_MATRIX ? "attn_matrix" : "attn_matrix_stats", attn_status_string(got),
                  attn_status_string(c->expect));
    if (c->desc_level) {
      size_t q1 = AN_UNTOUCHED, q2 = AN_UNTOUCHED;
      ck_assert_int_eq(attn_matrix_workspace_size(b.call_arg, &q1), c->expect);
      ck_assert_int_eq(attn_matrix_stats_workspace_size(b.call_arg, &q2), c->expect);
      ck_assert_msg(q1 == AN_UNTOUCHED && q2 == AN_UNTOUCHED, "%s: a size query wrote its output", c->name);
    }
    /* nothing written: a and the stats still all sentinel, the inputs unchanged, guards intact */
    const float sentinel = tu_sentinel();
    const tu_tensor *outs[4] = {&b.a, &b.st.e, &b.st.s, &b.st.c};
    for (int o = 0; o < 4; ++o) {
      for (size_t e = 0; e < outs[o]->span; ++e)
        ck_assert_msg(memcmp(outs[o]->data + e, &sentinel, sizeof sentinel) == 0, "%s: output %d written at %zu",
                      c->name, o, e);
      tu_assert_guards("an output after a rejected call", outs[o]->data);
    }
    tu_assert_same_bits("the inputs after a rejected call", b.arena_copy, b.arena, sizeof(float) * b.arena_floats);
    tu_assert_guards("the workspace after a rejected call", b.ws);
    bi_free(&b);
  }
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"bad_input", analysis_rejects_bad_input, (int)BI_NCASES})
/* clang-format on */
