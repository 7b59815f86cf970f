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
#include "bad_input.h"

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid call of its kind (n_q 5, n_kv 7, h_q 4, */
/* h_kv 2, d 8, causal; linear: identity with a scalar gate and beta; GAU: a causal table of 5; */
/* selective: a carried F); attn_matrix and/or attn_matrix_stats answer the row's status and    */
/* write nothing; for descriptor-level rows both size queries answer it too.                    */
/* ------------------------------------------------------------------------------------------ */
enum { BQ = 5, BKV = 7, BHQ = 4, BHKV = 2, BD = 8, BL = 5 };
/* Offsets (floats) of the inputs in one arena, which the aliasing faults point into. */
enum { AR_Q = 1024, AR_K = 2048, AR_G = 3072, AR_B = 3584, AR_T = 4096, AR_F = 4608, AR_FLOATS = 8192 };

enum { BI_MATRIX = 1, BI_STATS = 2, BI_BOTH = 3 };

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
  size_t need_matrix, need_stats;
  int ws_short; /* 1: the workspace one byte short of the function's need */
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

/* The objects the rows' edits name: the fixture, the descriptor's scale (of the row's kind), the
 * arena of the inputs, the workspace and the entropy array. */
enum { OB_FIX, OB_SCALE, OB_ARENA, OB_WS, OB_ENTROPY, OB_N };

typedef struct bi_case {
  const char *name;
  attn_kind kind;
  attn_status expect;
  int desc_level; /* the size queries answer the same status */
  int which;      /* BI_MATRIX, BI_STATS or both */
  tu_edit edit[TU_EDITS];
} bi_case;

#define BI(k, s, lvl, w) .kind = ATTN_KIND_##k, .expect = ATTN_E_##s, .desc_level = (lvl), .which = (w)
#define FX_Z(m, val)     TU_SET_Z(OB_FIX, bi_fixture, m, val)
#define FX_I(m, val)     TU_SET_I(OB_FIX, bi_fixture, m, val)
#define FX_NUL(m)        TU_NUL(OB_FIX, bi_fixture, m)
#define FX_PTR(m, to, k) TU_PTR(OB_FIX, bi_fixture, m, to, k)
#define SH(m, val)       FX_Z(d.shape.m, val)
#define SCALE_NAN        TU_ELEM_F(OB_SCALE, 0, NAN)
#define A_LAYOUT(r, h)   FX_Z(a_layout.row_stride, r), FX_Z(a_layout.head_stride, h)
#define A_AT(to, k)      FX_PTR(a_arg, to, k)
#define WS_AT(to, k)     FX_PTR(ws_arg, to, k)
#define BAD_A            A_LAYOUT(BKV - 1, BKV)
static const bi_case bi_cases[] = {
    {"call NULL", BI(SOFTMAX, NULL_POINTER, 1, BI_BOTH), {FX_NUL(call_arg)}},
    {"desc NULL", BI(SOFTMAX, NULL_POINTER, 1, BI_BOTH), {FX_NUL(call.desc)}},
    {"kind 4", BI(SOFTMAX, BAD_ARGUMENT, 1, BI_BOTH), {FX_I(call.kind, 4)}},
    {"kind -1", BI(GAU, BAD_ARGUMENT, 1, BI_BOTH), {FX_I(call.kind, -1)}},
    {"n_kv above the limit", BI(SOFTMAX, TOO_LARGE, 1, BI_BOTH), {SH(n_kv, ATTN_MATRIX_MAX_KV + 1)}},
    {"n_kv SIZE_MAX", BI(LINEAR, TOO_LARGE, 1, BI_BOTH), {SH(n_kv, SIZE_MAX)}},
    /* the limit before the variant's checks */
    {"n_kv above the limit, scale NaN",
     BI(SELECTIVE, TOO_LARGE, 1, BI_BOTH),
     {SCALE_NAN, SH(n_kv, ATTN_MATRIX_MAX_KV + 1)}},
    {"n_q 0", BI(GAU, ZERO_SIZE, 1, BI_BOTH), {SH(n_q, 0)}},
    {"d 0", BI(LINEAR, ZERO_SIZE, 1, BI_BOTH), {SH(d, 0)}},
    {"h_q 3 over h_kv 2",
     BI(SOFTMAX, BAD_HEADS, 1, BI_BOTH),
     {SH(h_q, 3), SH(q.row_stride, 3 * BD), SH(q.head_stride, BD)}},
    {"softmax scale NaN", BI(SOFTMAX, BAD_SCALE, 1, BI_BOTH), {SCALE_NAN}},
    {"linear scale NaN", BI(LINEAR, BAD_SCALE, 1, BI_BOTH), {SCALE_NAN}},
    {"GAU scale NaN", BI(GAU, BAD_SCALE, 1, BI_BOTH), {SCALE_NAN}},
    {"q row stride below d", BI(SELECTIVE, BAD_STRIDE, 1, BI_BOTH), {SH(q.row_stride, BD - 1)}},
    /* softmax: the lse layout is checked without an lse */
    {"softmax lse layout overlapping itself",
     BI(SOFTMAX, BAD_STRIDE, 1, BI_BOTH),
     {FX_Z(d.sm.lse.row_stride, 1), FX_Z(d.sm.lse.head_stride, 1)}},
    {"linear eps negative", BI(LINEAR, BAD_EPS, 1, BI_BOTH), {TU_SET_F(OB_FIX, bi_fixture, d.lin.eps, -1e-3f)}},
    {"a log gate positive", BI(LINEAR, BAD_GATE, 0, BI_BOTH), {TU_ELEM_F(OB_ARENA, AR_G + 3 * BHQ + 1, 0.25f)}},
    {"log gate NULL", BI(LINEAR, NULL_POINTER, 0, BI_BOTH), {FX_NUL(call.log_gate)}},
    {"beta NULL", BI(LINEAR, NULL_POINTER, 0, BI_BOTH), {FX_NUL(call.beta)}},
    {"GAU beta NaN",
     BI(GAU, BAD_BIAS, 1, BI_BOTH),
     {FX_I(d.gau.bias, ATTN_GAU_BIAS_SCALAR), TU_SET_F(OB_FIX, bi_fixture, d.gau.beta, NAN)}},
    {"selective h_sel = h_q", BI(SELECTIVE, BAD_HEADS, 1, BI_BOTH), {FX_Z(d.sel.h_sel, BHQ)}},
    {"a row stride below n_kv", BI(SOFTMAX, BAD_STRIDE, 0, BI_MATRIX), {A_LAYOUT(BKV * BHQ - 1, BKV)}},
    /* rows BKV apart, heads BKV apart: head 1 of row 0 is row 1's head 0 */
    {"a heads overlapping rows", BI(GAU, BAD_STRIDE, 0, BI_MATRIX), {A_LAYOUT(BKV, BKV)}},
    /* the variant's checks before a's layout; a's layout before the pointers */
    {"a layout bad and scale NaN", BI(SOFTMAX, BAD_SCALE, 0, BI_MATRIX), {SCALE_NAN, BAD_A}},
    {"a layout bad and q NULL", BI(LINEAR, BAD_STRIDE, 0, BI_MATRIX), {FX_NUL(call.q), BAD_A}},
    {"q NULL", BI(SOFTMAX, NULL_POINTER, 0, BI_BOTH), {FX_NUL(call.q)}},
    {"k NULL", BI(SELECTIVE, NULL_POINTER, 0, BI_BOTH), {FX_NUL(call.k)}},
    {"a NULL", BI(LINEAR, NULL_POINTER, 0, BI_MATRIX), {FX_NUL(a_arg)}},
    {"workspace NULL", BI(GAU, NULL_POINTER, 0, BI_BOTH), {FX_NUL(ws_arg)}},
    {"workspace one byte short", BI(SOFTMAX, WORKSPACE_TOO_SMALL, 0, BI_BOTH), {FX_I(ws_short, 1)}},
    {"workspace one byte short (linear)", BI(LINEAR, WORKSPACE_TOO_SMALL, 0, BI_BOTH), {FX_I(ws_short, 1)}},
    {"workspace one byte short (selective)", BI(SELECTIVE, WORKSPACE_TOO_SMALL, 0, BI_BOTH), {FX_I(ws_short, 1)}},
    {"a is q", BI(SOFTMAX, ALIASING, 0, BI_MATRIX), {A_AT(OB_ARENA, AR_Q)}},
    /* a's span (BQ BHQ BKV floats) ends on k's first element */
    {"a ends inside k", BI(SELECTIVE, ALIASING, 0, BI_MATRIX), {A_AT(OB_ARENA, AR_K + 1 - BQ * BHQ * BKV)}},
    {"a inside the workspace", BI(GAU, ALIASING, 0, BI_MATRIX), {A_AT(OB_WS, 16)}},
    {"workspace over q", BI(SOFTMAX, ALIASING, 0, BI_BOTH), {WS_AT(OB_ARENA, 0)}},
    {"workspace over q (linear)", BI(LINEAR, ALIASING, 0, BI_BOTH), {WS_AT(OB_ARENA, 0)}},
    {"a is the log gates", BI(LINEAR, ALIASING, 0, BI_MATRIX), {A_AT(OB_ARENA, AR_G)}},
    {"a is beta", BI(LINEAR, ALIASING, 0, BI_MATRIX), {A_AT(OB_ARENA, AR_B + 4)}},
    {"a is the bias table", BI(GAU, ALIASING, 0, BI_MATRIX), {A_AT(OB_ARENA, AR_T + BL - 1)}},
    {"a is f", BI(SELECTIVE, ALIASING, 0, BI_MATRIX), {A_AT(OB_ARENA, AR_F)}},
    {"workspace is f", BI(SELECTIVE, ALIASING, 0, BI_BOTH), {WS_AT(OB_ARENA, AR_F)}},
    {"stats NULL", BI(SOFTMAX, NULL_POINTER, 0, BI_STATS), {FX_NUL(rs_arg)}},
    {"stats arrays all NULL",
     BI(LINEAR, NULL_POINTER, 0, BI_STATS),
     {FX_NUL(rs.entropy), FX_NUL(rs.sparsity), FX_NUL(rs.count)}},
    {"stats layout overlapping itself",
     BI(GAU, BAD_STRIDE, 0, BI_STATS),
     {FX_Z(rs.layout.row_stride, 1), FX_Z(rs.layout.head_stride, 1)}},
    {"stats entropy is sparsity", BI(SELECTIVE, ALIASING, 0, BI_STATS), {FX_PTR(rs.sparsity, OB_ENTROPY, 0)}},
    {"stats count inside q", BI(SOFTMAX, ALIASING, 0, BI_STATS), {FX_PTR(rs.count, OB_ARENA, AR_Q + 7)}},
    {"stats sparsity inside the workspace", BI(LINEAR, ALIASING, 0, BI_STATS), {FX_PTR(rs.sparsity, OB_WS, 100)}},
    {"stats entropy is the bias table", BI(GAU, ALIASING, 0, BI_STATS), {FX_PTR(rs.entropy, OB_ARENA, AR_T)}},
};
#define BI_NCASES (sizeof bi_cases / sizeof bi_cases[0])

/* Applies a row's edits to the fixture (ws_size is set per call: the function's own need). */
static void bi_apply(bi_fixture *b, const bi_case *c) {
  float *scale = b->call.kind == ATTN_KIND_SOFTMAX  ? &b->d.sm.scale
                 : b->call.kind == ATTN_KIND_LINEAR ? &b->d.lin.scale
                 : b->call.kind == ATTN_KIND_GAU    ? &b->d.gau.scale
                                                    : &b->d.sel.scale;
  void *obj[OB_N] = {b, scale, b->arena, b->ws, b->rs.entropy};
  tu_edits_apply(c->edit, TU_EDITS, obj, OB_N);
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
    bi_apply(&b, c);
    memcpy(b.arena_copy, b.arena, sizeof(float) * b.arena_floats);
    const size_t need = which == BI_MATRIX ? b.need_matrix : b.need_stats;
    const size_t ws_size = need - (size_t)b.ws_short;
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
