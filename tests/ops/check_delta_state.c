/*
 * State checkpoints (attn_delta, attn_linear_checkpointed) and the delta rule's threads and bad
 * input, on the ISA path named by ATTN_ISA. TCases: "checkpoints" (restoring checkpoint i and
 * calling on the rest gives the checkpointed call's bits; checkpoint states against the float64
 * reference; 1, 2, 3, 8 workers and a scrambled parallel-for give the same bits; the same for
 * attn_linear_checkpointed) and "bad_input" (the status of every bad argument; nothing written).
 *
 * TOLERANCES: tests/common/tolerances.h (delta rule): |got - ref| <= tol_delta(d, C) * scale +
 * TOL_DT_FLOOR with scale the reference's error scale (ref_delta.h). Two library results (decode
 * vs prefill, pieces vs one call) may each be off by the bound: TOL_PROPERTY_FACTOR times it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "linear_util.h"
#include "test_util.h"
#include "tolerances.h"

#include "delta_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Checkpoints and threads                                                                     */
/* ------------------------------------------------------------------------------------------ */
/* A parallel-for on the calling thread that runs the tasks in a scrambled order, each as another
 * of 5 workers (tests/check_parallel.c's "shuffle"). */
static void dt_shuffle_for(void *pool, attn_task_fn fn, void *ctx, size_t tasks) {
  (void)pool;
  const int coprime = tasks % 7 != 0;
  for (size_t k = 0; k < tasks; k++) fn(ctx, coprime ? (k * 7 + 3) % tasks : tasks - 1 - k, (k * 3 + 1) % 5);
}

/* The checkpoint positions of a call of n tokens with chunk C: the first token, inside the first
 * chunk, a chunk's end, inside the second, two in a row, the last token. */
static size_t dt_afters(size_t n, size_t C, size_t *after) {
  const size_t want[] = {0, 3, C - 1, C + 4, 2 * C - 1, 2 * C, 2 * C + 1, n - 1};
  size_t count = 0;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i)
    if (want[i] < n && (count == 0 || want[i] > after[count - 1])) after[count++] = want[i];
  return count;
}

/* One checkpointed call from a random state: its checkpoint states against the reference; then for
 * each checkpoint i, a call from a copy of it on the tokens after it (with the later checkpoints,
 * shifted) must give the same bits: o rows, later checkpoints and the final state. Cases: the
 * property configurations, without threads and on a pool of 3. */
START_TEST(delta_checkpoint_restore) {
  const dt_pcase *p = &dt_pcases[_i % dt_npcases];
  attn_delta_desc d;
  dt_in in;
  size_t C, n;
  tu_rng rng;
  dt_pcase_setup(p, 45000 + (uint64_t)_i, 2, 7, &d, &in, &C, &n, &rng);
  attn_pool *pool = NULL;
  attn_threads th;
  if (_i >= (int)dt_npcases) {
    ck_assert_int_eq(attn_pool_create(3, &pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
    d.shape.threads = &th;
  }
  size_t after[8];
  const size_t count = dt_afters(n, C, after), sf = dt_state_floats(&d), row = p->hv * p->dv;
  float *st = dt_state(&d, &rng, 1), *s0 = dt_copy_state(&d, st);
  float *cks = tu_alloc(sizeof(float) * count * sf, 0);
  const attn_checkpoints ck = {count, after, cks};
  tu_tensor o;
  dt_call(&d, &in, 0, n, st, &ck, &o);
  dt_ref r;
  dt_ref_run(&r, &d, &in, 0, n, s0, C, count, after);
  dt_compare("delta.o", "checkpointed call", &o, r.o, r.os, p->d, C, 1.0);
  dt_check_state("checkpointed call's state", &d, st, r.s, r.ss, C, 1.0);
  char what[128];
  for (size_t i = 0; i < count; ++i) {
    snprintf(what, sizeof what, "checkpoint %zu (after token %zu, C %zu, case %d)", i, after[i], C, _i);
    dt_check_state(what, &d, cks + i * sf, r.ck + i * sf, r.cks + i * sf, C, 1.0);
  }
  tu_assert_same_bits("checkpoint after the last token vs the final state", cks + (count - 1) * sf, st,
                      sizeof(float) * sf);
  for (size_t i = 0; i + 1 < count; ++i) {
    const size_t t0 = after[i] + 1, rest = count - 1 - i;
    size_t later[8];
    for (size_t j = 0; j < rest; ++j) later[j] = after[i + 1 + j] - t0;
    float *rs = dt_copy_state(&d, cks + i * sf), *rck = tu_alloc(sizeof(float) * rest * sf, 0);
    const attn_checkpoints ck2 = {rest, later, rck};
    tu_tensor o2;
    dt_call(&d, &in, t0, n - t0, rs, &ck2, &o2);
    snprintf(what, sizeof what, "restored checkpoint %zu (tokens %zu..%zu, case %d): o", i, t0, n, _i);
    tu_assert_same_bits(what, tu_at(&o, t0, 0, 0), o2.data, sizeof(float) * (n - t0) * row);
    snprintf(what, sizeof what, "restored checkpoint %zu: final state", i);
    tu_assert_same_bits(what, st, rs, sizeof(float) * sf);
    snprintf(what, sizeof what, "restored checkpoint %zu: later checkpoints", i);
    tu_assert_same_bits(what, cks + (i + 1) * sf, rck, sizeof(float) * rest * sf);
    tu_tensor_free(&o2);
    tu_free(rs);
    tu_free(rck);
  }
  dt_ref_free(&r);
  tu_tensor_free(&o);
  tu_free(st);
  tu_free(s0);
  tu_free(cks);
  attn_pool_destroy(pool);
  tu_gated_free(&in);
}
END_TEST

/* Threads: pools of 1, 2, 3 and 8 workers and a scrambled parallel-for give the bits of the call
 * without threads (o, final state, checkpoints): a prefill with checkpoints, a decode step, a
 * speculative block. */
START_TEST(delta_threads_bit_identical) {
  static const struct {
    attn_delta_gate gate;
    size_t hk, hv, cn, nb, d, dv, chunk;
  } tc[] = {{ATTN_DELTA_FEATURE, 2, 6, 3, 5, 16, 16, 0},
            {ATTN_DELTA_SCALAR, 1, 8, 0, 1, 64, 64, 0},
            {ATTN_DELTA_PLAIN, 3, 3, 0, 5, 5, 7, 0},
            {ATTN_DELTA_SCALAR, 2, 4, 4, 3, 16, 8, 16}};
  tu_rng rng = tu_rng_of(46000 + (uint64_t)_i);
  attn_delta_desc d;
  dt_desc(&d, tc[_i].hk, tc[_i].hv, tc[_i].d, tc[_i].dv, tc[_i].gate, tc[_i].chunk, 1);
  const size_t C = dt_chunk(&d), n = tc[_i].cn * C + tc[_i].nb, sf = dt_state_floats(&d);
  const dt_spec s = {.gate = tc[_i].gate, .layout = TU_TOKEN_MAJOR};
  dt_in in;
  dt_in_make(&in, &s, &rng, n, tc[_i].hk, tc[_i].hv, tc[_i].d, tc[_i].dv);
  size_t after[8];
  const size_t count = dt_afters(n, C, after);
  float *s0 = dt_state(&d, &rng, 1), *st[6], *ck[6];
  tu_tensor o[6];
  for (int w = 0; w < 6; ++w) { /* none, pools of 1, 2, 3, 8, shuffle */
    static const size_t workers[] = {0, 1, 2, 3, 8};
    attn_pool *pool = NULL;
    attn_threads th = {dt_shuffle_for, NULL, 5};
    attn_delta_desc dw = d;
    if (w >= 1 && w <= 4) {
      ck_assert_int_eq(attn_pool_create(workers[w], &pool), ATTN_OK);
      ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
    }
    dw.shape.threads = w ? &th : NULL;
    st[w] = dt_copy_state(&d, s0);
    ck[w] = tu_alloc(sizeof(float) * count * sf, 0);
    const attn_checkpoints cp = {count, after, ck[w]};
    dt_call(&dw, &in, 0, n, st[w], &cp, &o[w]);
    attn_pool_destroy(pool);
    if (w == 0) continue;
    char what[96];
    snprintf(what, sizeof what, "threads %d vs none: o (case %d)", w, _i);
    tu_assert_same_bits(what, o[0].data, o[w].data, sizeof(float) * o[0].span);
    snprintf(what, sizeof what, "threads %d vs none: state", w);
    tu_assert_same_bits(what, st[0], st[w], sizeof(float) * sf);
    snprintf(what, sizeof what, "threads %d vs none: checkpoints", w);
    tu_assert_same_bits(what, ck[0], ck[w], sizeof(float) * count * sf);
  }
  for (int w = 0; w < 6; ++w) {
    tu_tensor_free(&o[w]);
    tu_free(st[w]);
    tu_free(ck[w]);
  }
  tu_free(s0);
  tu_gated_free(&in);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row changes one argument of a valid call (n 5, h_k 2, h_v 4, d 8, dv 6,      */
/* SCALAR gates, a state, checkpoints after tokens 1 and 3); the call answers the row's status   */
/* (descriptor rows: every size query too, without writing its output), and o, the state, the    */
/* checkpoint states and every input are unchanged.                                              */
/* ------------------------------------------------------------------------------------------ */
enum { BN = 5, BHK = 2, BHV = 4, BD = 8, BDV = 6 };

/* The call's arguments, which the rows' edits change, and the objects the edits name: the
 * descriptor, the arguments, the checkpoints and their after array, the buffers. */
typedef struct db_args {
  const attn_delta_desc *d;
  const float *q, *k, *v, *g, *beta;
  float *o, *s;
  void *ws;
  size_t ws_size;
} db_args;
enum { OB_D, OB_ARG, OB_CK, OB_AFTER, OB_Q, OB_K, OB_V, OB_O, OB_STATE, OB_WS, OB_GATE, OB_N };

typedef struct db_case {
  const char *name;
  attn_status expect;
  int desc_level;
  tu_edit edit[TU_EDITS];
  int feature;      /* 1: a FEATURE gate */
  lu_bad_value bad; /* the row's bad log gate or beta at the last token's last head (lu_poison_gate);
                       in the last channel with feature (0: none) */
} db_case;

#define DB(s, lvl)        .expect = (s), .desc_level = (lvl)
#define DB_BAD(v)         .expect = ATTN_E_BAD_GATE, .desc_level = 0, .bad = (v)
#define D_I(m, val)       TU_SET_I(OB_D, attn_delta_desc, m, val)
#define SH(m, val)        TU_SET_Z(OB_D, attn_delta_desc, shape.m, val)
#define ARG_NUL(m)        TU_NUL(OB_ARG, db_args, m)
#define ARG_PTR(m, to, k) TU_PTR(OB_ARG, db_args, m, to, k)
#define WS_ROOM           TU_ADD(OB_ARG, db_args, ws_size, 4096)
#define CK_NUL(m)         TU_NUL(OB_CK, attn_checkpoints, m)
#define CK_AT(to, k)      TU_PTR(OB_CK, attn_checkpoints, states, to, k)
#define AFTER(i, val)     TU_ELEM_Z(OB_AFTER, i, val)
static const db_case db_cases[] = {
    TU_NULL_ARG_ROWS(DB, ARG_NUL),
    {"beta NULL", DB(ATTN_E_NULL_POINTER, 0), {ARG_NUL(beta)}},
    {"log_gate NULL (SCALAR)", DB(ATTN_E_NULL_POINTER, 0), {ARG_NUL(g)}},
    {"workspace NULL", DB(ATTN_E_NULL_POINTER, 0), {ARG_NUL(ws)}},
    {"n 0", DB(ATTN_E_ZERO_SIZE, 1), {SH(n_q, 0), SH(n_kv, 0)}},
    {"d 0", DB(ATTN_E_ZERO_SIZE, 1), {SH(d, 0)}},
    {"dv 0", DB(ATTN_E_ZERO_SIZE, 1), {SH(dv, 0)}},
    {"h_q 4 != h_k 2", DB(ATTN_E_BAD_HEADS, 1), {SH(h_q, 4), SH(q.row_stride, 4 * BD)}},
    {"h_v 3 not a multiple of h_k 2", DB(ATTN_E_BAD_HEADS, 1), {SH(h_v, 3)}},
    {"h_k 4 above h_v 2",
     DB(ATTN_E_BAD_HEADS, 1),
     {SH(h_q, 4), SH(h_k, 4), SH(h_v, 2), SH(q.row_stride, 4 * BD), SH(k.row_stride, 4 * BD)}},
    {"n_q 4 != n_kv 5", DB(ATTN_E_BAD_ARGUMENT, 1), {SH(n_q, BN - 1)}},
    LU_BAD_LOG_GATE_ROWS(DB_BAD),
    {"a FEATURE log gate +0.5 (last channel)", DB_BAD(LU_GATE_HALF), .feature = 1},
    {"a FEATURE log gate NaN (last channel)", DB_BAD(LU_GATE_NAN), .feature = 1},
    {"a beta -0.5", DB_BAD(LU_BETA_NEG)},
    {"a beta NaN", DB_BAD(LU_BETA_NAN)},
    {"a beta +inf", DB_BAD(LU_BETA_INF)},
    {"log_gate given to PLAIN", DB(ATTN_E_BAD_GATE, 0), {D_I(gate, ATTN_DELTA_PLAIN)}},
    {"gate kind 3", DB(ATTN_E_BAD_GATE, 1), {D_I(gate, 3)}},
    {"gate kind -1", DB(ATTN_E_BAD_GATE, 1), {D_I(gate, -1)}},
    {"qk_l2norm 2", DB(ATTN_E_BAD_ARGUMENT, 1), {D_I(qk_l2norm, 2)}},
    {"qk_l2norm -1", DB(ATTN_E_BAD_ARGUMENT, 1), {D_I(qk_l2norm, -1)}},
    {"chunk ATTN_LINEAR_MAX_CHUNK + 1",
     DB(ATTN_E_BAD_ARGUMENT, 1),
     {TU_SET_Z(OB_D, attn_delta_desc, chunk, ATTN_LINEAR_MAX_CHUNK + 1)}},
    {"kv_type ATTN_F16", DB(ATTN_E_BAD_DTYPE, 1), {TU_SET_I(OB_D, attn_delta_desc, shape.kv_type, ATTN_F16)}},
    {"scale NaN", DB(ATTN_E_BAD_SCALE, 1), {TU_SET_F(OB_D, attn_delta_desc, scale, NAN)}},
    {"scale +inf", DB(ATTN_E_BAD_SCALE, 1), {TU_SET_F(OB_D, attn_delta_desc, scale, INFINITY)}},
    {"q row stride < d", DB(ATTN_E_BAD_STRIDE, 1), {SH(q.row_stride, BD - 1)}},
    {"FEATURE gate head stride d - 1",
     DB(ATTN_E_BAD_STRIDE, 1),
     {TU_SET_Z(OB_D, attn_delta_desc, gate_layout.head_stride, BD - 1)},
     .feature = 1},
    {"workspace one byte short", DB(ATTN_E_WORKSPACE_TOO_SMALL, 0), {TU_ADD(OB_ARG, db_args, ws_size, -1)}},
    {"o is q", DB(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_Q, 0)}},
    {"o inside v", DB(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_V, 5)}},
    {"o inside the state", DB(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_STATE, 2)}},
    {"o inside the workspace", DB(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_WS, 4), WS_ROOM}},
    {"o inside the log gates", DB(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_GATE, 3)}},
    {"state is k", DB(ATTN_E_ALIASING, 0), {ARG_PTR(s, OB_K, 0)}},
    {"state inside the workspace", DB(ATTN_E_ALIASING, 0), {ARG_PTR(s, OB_WS, 8), WS_ROOM}},
    {"checkpoint states inside o", DB(ATTN_E_ALIASING, 0), {CK_AT(OB_O, 7)}},
    {"checkpoint states are the state", DB(ATTN_E_ALIASING, 0), {CK_AT(OB_STATE, 0)}},
    {"checkpoint states inside q", DB(ATTN_E_ALIASING, 0), {CK_AT(OB_Q, 0)}},
    {"checkpoints {3, 1}", DB(ATTN_E_BAD_ARGUMENT, 0), {AFTER(0, 3), AFTER(1, 1)}},
    {"checkpoints {2, 2}", DB(ATTN_E_BAD_ARGUMENT, 0), {AFTER(0, 2), AFTER(1, 2)}},
    {"checkpoints {1, n}", DB(ATTN_E_BAD_ARGUMENT, 0), {AFTER(1, BN)}},
    {"checkpoints' after NULL", DB(ATTN_E_NULL_POINTER, 0), {CK_NUL(after)}},
    {"checkpoints' states NULL", DB(ATTN_E_NULL_POINTER, 0), {CK_NUL(states)}},
};
#define DB_NCASES (sizeof db_cases / sizeof db_cases[0])

/* Every size query answers want; on an error none writes its output. */
static void db_assert_queries(const attn_delta_desc *d, attn_status want) {
  size_t ws = 777, st = 777, c = 777;
  ck_assert_int_eq(attn_delta_workspace_size(d, &ws), want);
  ck_assert_int_eq(attn_delta_state_size(d, &st), want);
  ck_assert_int_eq(attn_delta_chunk_size(d, &c), want);
  if (want != ATTN_OK) ck_assert(ws == 777 && st == 777 && c == 777);
}

START_TEST(delta_rejects_bad_input) {
  const db_case *c = &db_cases[_i];
  tu_rng rng = tu_rng_of(48000 + (uint64_t)_i);
  tu_qkv x; /* q, k [n][h_k][d]; v [n][h_v][dv] */
  tu_qkv_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, BN, BN, BHK, BHK, BHV, BD, BDV);
  const size_t sf = (size_t)BHV * BD * BDV;
  lu_gate_inputs g;
  lu_gate_inputs_make(&g, &rng, BN, BHV, BD, 0.0f, 1.0f);
  float *lg = g.lg, *beta = g.beta;
  attn_delta_desc d;
  dt_desc(&d, BHK, BHV, BD, BDV, ATTN_DELTA_SCALAR, 0, 1);
  d.shape.n_q = d.shape.n_kv = BN;
  size_t need = 0;
  ck_assert_int_eq(attn_delta_workspace_size(&d, &need), ATTN_OK);
  ck_assert_uint_gt(need, 0);
  tu_tensor o;
  tu_tensor_alloc(&o, TU_TOKEN_MAJOR, BN, BHV, BDV, 1);
  void *ws = tu_alloc(need + 4096, 0);
  float *state = dt_state(&d, &rng, 1), *cks = tu_alloc(sizeof(float) * 2 * sf, 0);
  size_t after[2] = {1, 3};
  attn_checkpoints ck = {2, after, cks};
  db_args a = {&d, x.q.data, x.k.data, x.v.data, lg, beta, o.data, state, ws, need};
  if (c->feature) d.gate = ATTN_DELTA_FEATURE;
  lu_gate_inputs_fault(&g, c->feature, c->bad, &d.gate_layout);
  void *obj[OB_N] = {&d, &a, &ck, after, x.q.data, x.k.data, x.v.data, o.data, state, ws, lg};
  tu_edits_apply(c->edit, TU_EDITS, obj, OB_N);
  tu_qkv_snapshot(&x);
  lu_gate_inputs_take(&g);
  float *state0 = malloc(sizeof(float) * sf);
  ck_assert(state0);
  memcpy(state0, state, sizeof(float) * sf);
  const attn_status got = attn_delta(a.d, a.q, a.k, a.v, a.g, a.beta, a.o, a.s, &ck, a.ws, a.ws_size);
  ck_assert_msg(got == c->expect, "%s: got %s (%d), want %s (%d)", c->name, attn_status_string(got), (int)got,
                attn_status_string(c->expect), (int)c->expect);
  ck_assert_msg(attn_last_error()[0] != '\0', "%s: no error detail", c->name);
  if (c->desc_level) db_assert_queries(&d, c->expect);
  for (size_t e = 0; e < o.span; ++e) ck_assert_msg(isnan(o.data[e]), "%s: o written at %zu", c->name, e);
  tu_assert_guards("o", o.owner);
  tu_assert_guards("workspace", ws);
  tu_assert_same_bits("state after a rejected call", state0, state, sizeof(float) * sf);
  tu_assert_guards("state", state);
  for (size_t e = 0; e < 2 * sf; ++e) ck_assert_msg(isnan(cks[e]), "%s: checkpoint state written at %zu", c->name, e);
  tu_assert_guards("checkpoint states", cks);
  tu_qkv_assert_unchanged(&x);
  lu_gate_inputs_check(&g);
  free(state0);
  tu_free(state);
  tu_free(cks);
  tu_free(ws);
  tu_tensor_free(&o);
  lu_gate_inputs_free(&g);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* attn_linear_checkpointed: GLA (identity, un-normalised, FEATURE gates) and elu1 normalised   */
/* without gates; h 2, d 16, dv 8, causal.                                                      */
/* ------------------------------------------------------------------------------------------ */
static void lc_desc(attn_linear_desc *d, int gla, size_t n) {
  ck_assert_int_eq(attn_linear_desc_init(d, n, n, 2, 2, 16, 8, gla ? ATTN_FEATURE_IDENTITY : ATTN_FEATURE_ELU1),
                   ATTN_OK);
  d->mask = attn_mask_causal();
  if (gla) {
    d->normalize = 0;
    d->gate = ATTN_GATE_FEATURE;
    d->gate_layout = (attn_layout){2 * 16, 16};
  }
}

typedef struct lc_in {
  tu_qkv x;
  tu_tensor g, none; /* log gates [n][2][16] (GLA only); none: no beta */
} lc_in;

static void lc_in_make(lc_in *in, int gla, size_t n, tu_rng *r) {
  memset(in, 0, sizeof *in);
  tu_qkv_make(&in->x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, r, n, n, 2, 2, 2, 16, 8);
  if (gla) {
    tu_tensor_alloc(&in->g, TU_TOKEN_MAJOR, n, 2, 16, 0);
    tu_tensor_fill(&in->g, r, -0.3f, 0.0f);
  }
}

static void lc_call(const attn_linear_desc *base, const lc_in *in, size_t t0, size_t n, attn_linear_state *st,
                    const attn_checkpoints *ck, tu_tensor *o) {
  attn_linear_desc d = *base;
  d.shape.n_q = d.shape.n_kv = n;
  size_t need = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &need), ATTN_OK);
  tu_tensor_alloc(o, TU_TOKEN_MAJOR, n, 2, 8, 1);
  void *ws = tu_alloc(need, 0);
  const attn_status s =
      attn_linear_checkpointed(&d, tu_at(&in->x.q, t0, 0, 0), tu_at(&in->x.k, t0, 0, 0), tu_at(&in->x.v, t0, 0, 0),
                               dt_row(&in->g, t0), NULL, o->data, st, ck, ws, need);
  ck_assert_msg(s == ATTN_OK, "attn_linear_checkpointed: %s: %s", attn_status_string(s), attn_last_error());
  tu_assert_output_clean("o", o);
  tu_assert_guards("workspace", ws);
  tu_free(ws);
  tu_qkv_assert_unchanged(&in->x);
}

/* Restores each of the first n_restore of count checkpoints (after: their tokens, from token pre
 * on; cks: their states, sf floats each), calls on the tokens after it up to n, and asserts the
 * checkpointed call's bits: o, the final state st and its token count, the later checkpoints. */
static void lc_restore_and_continue(const char *label, const attn_linear_desc *d, const lc_in *in, size_t pre, size_t n,
                                    const size_t *after, size_t count, size_t n_restore, const float *cks, size_t sf,
                                    const tu_tensor *o, const lu_state *st) {
  char what[128];
  for (size_t i = 0; i < n_restore; ++i) {
    const size_t t0 = after[i] + 1, rest = count - 1 - i;
    size_t later[8];
    ck_assert_uint_le(rest, 8);
    for (size_t j = 0; j < rest; ++j) later[j] = after[i + 1 + j] - t0;
    lu_state rs;
    lu_state_make(&rs, d);
    memcpy(rs.s.data, cks + i * sf, sizeof(float) * sf);
    rs.s.tokens = pre + t0;
    float *rck = tu_alloc(sizeof(float) * (rest ? rest : 1) * sf, 0);
    const attn_checkpoints ck2 = {rest, later, rck};
    tu_tensor o2;
    lc_call(d, in, pre + t0, n - t0, &rs.s, &ck2, &o2);
    snprintf(what, sizeof what, "%s: restored checkpoint %zu: o", label, i);
    tu_assert_same_bits(what, tu_at(o, t0, 0, 0), o2.data, sizeof(float) * (n - t0) * 16);
    snprintf(what, sizeof what, "%s: restored checkpoint %zu: state", label, i);
    tu_assert_same_bits(what, st->s.data, rs.s.data, sizeof(float) * sf);
    ck_assert_uint_eq(rs.s.tokens, st->s.tokens);
    snprintf(what, sizeof what, "%s: restored checkpoint %zu: later checkpoints", label, i);
    if (rest) tu_assert_same_bits(what, cks + (i + 1) * sf, rck, sizeof(float) * rest * sf);
    tu_tensor_free(&o2);
    tu_free(rck);
    lu_state_free(&rs);
  }
}

/* A prefix of 10 tokens (ck NULL), then 2C + 7 tokens with checkpoints: each checkpoint against
 * the gated reference's state after its token; restoring checkpoint i (its image in a bound
 * state's data, tokens = 10 + after[i] + 1) and calling on the rest with the later checkpoints
 * gives the same bits. Case bit 0: GLA; bit 1: a pool of 2 workers. */
START_TEST(linear_checkpoint_restore) {
  const int gla = _i & 1;
  const size_t pre = 10;
  tu_rng rng = tu_rng_of(49000 + (uint64_t)_i);
  attn_linear_desc d;
  lc_desc(&d, gla, 1);
  size_t C = 0;
  ck_assert_int_eq(attn_linear_chunk_size(&d, &C), ATTN_OK);
  const size_t n = 2 * C + 7;
  attn_pool *pool = NULL;
  attn_threads th;
  if (_i & 2) {
    ck_assert_int_eq(attn_pool_create(2, &pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
    d.shape.threads = &th;
  }
  lc_in in;
  lc_in_make(&in, gla, pre + n, &rng);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  lc_call(&d, &in, 0, pre, &st.s, NULL, &o);
  tu_tensor_free(&o);
  ck_assert_uint_eq(st.s.tokens, pre);
  double *s0 = lu_state_to_double(&st.s);
  size_t after[8];
  const size_t count = dt_afters(n, C, after), sf = lu_state_floats(&st.s), ld = st.s.ld;
  float *cks = tu_alloc(sizeof(float) * count * sf, 0);
  const attn_checkpoints ck = {count, after, cks};
  lc_call(&d, &in, pre, n, &st.s, &ck, &o);
  ck_assert_uint_eq(st.s.tokens, pre + n);
  tu_assert_same_bits("last checkpoint vs final state", cks + (count - 1) * sf, st.s.data, sizeof(float) * sf);
  char what[128];
  for (size_t i = 0; i < count; ++i) { /* against the reference */
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = after[i] + 1;
    const tu_tensor q = tu_rows_view(&in.x.q, pre, after[i] + 1), k = tu_rows_view(&in.x.k, pre, after[i] + 1);
    const tu_tensor v = tu_rows_view(&in.x.v, pre, after[i] + 1);
    const tu_tensor g = in.g.data ? tu_rows_view(&in.g, pre, after[i] + 1) : in.g;
    const ref_gated_problem p = lu_gated_problem(&pd, &q, &k, &v, &g, NULL, s0, C, C);
    double *r = dt_doubles(6 * sf), *tol = r + 5 * sf;
    const ref_gated_scales sc = {r + sf, r + 2 * sf, r + 3 * sf, r + 4 * sf, NULL};
    ck_assert_uint_eq(ref_gated_state_heads(&p) * 16 * ld, sf);
    ref_gated_state(&p, r, &sc);
    for (size_t e = 0; e < sf; ++e)
      tol[e] = tol_gated(pre + after[i] + 1, 0, sc.abs[e], sc.log[e], sc.step[e], sc.tiny[e], 1.0);
    tu_tensor view;
    memset(&view, 0, sizeof view);
    view.data = cks + i * sf;
    view.n = sf / ld;
    view.h = 1;
    view.w = ld;
    view.l = (attn_layout){ld, ld};
    snprintf(what, sizeof what, "linear checkpoint %zu (after token %zu, gla %d)", i, after[i], gla);
    tu_compare("linear.ckpt", what, &view, r, sc.abs, tol);
    free(r);
  }
  snprintf(what, sizeof what, "linear (gla %d)", gla);
  lc_restore_and_continue(what, &d, &in, pre, n, after, count, count - 1, cks, sf, &o, &st);
  tu_tensor_free(&o);
  tu_free(cks);
  free(s0);
  lu_state_free(&st);
  attn_pool_destroy(pool);
  tu_qkv_free(&in.x);
  tu_tensor_free(&in.g);
}
END_TEST

/* FLASH's linear part (exclusive_chunk G = 8, identity map, un-normalised, scale 1/G): a state
 * of one round, then 5 rounds and 3 tokens with checkpoints at round ends (after tokens 7, 23,
 * 39); restoring each and calling on the rest gives the checkpointed call's bits (o, the later
 * checkpoints, the final state and its token count); the call itself equals plain attn_linear
 * calls over the same pieces. */
START_TEST(linear_checkpoint_flash) {
  const size_t G = 8, n = 5 * G + 3;
  tu_rng rng = tu_rng_of(49500);
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, G, G, 2, 2, 16, 8, ATTN_FEATURE_IDENTITY), ATTN_OK);
  d.normalize = 0, d.scale = 1.0f / (float)G, d.exclusive_chunk = G;
  lc_in in;
  memset(&in, 0, sizeof in);
  tu_qkv_make(&in.x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, G + n, G + n, 2, 2, 2, 16, 8);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  lc_call(&d, &in, 0, G, &st.s, NULL, &o);
  tu_tensor_free(&o);
  const size_t after[3] = {G - 1, 3 * G - 1, 5 * G - 1}, sf = lu_state_floats(&st.s);
  float *cks = tu_alloc(sizeof(float) * 3 * sf, 0);
  const attn_checkpoints ck = {3, after, cks};
  lu_state plain;
  lu_state_make(&plain, &d);
  memcpy(plain.s.data, st.s.data, sizeof(float) * sf);
  plain.s.tokens = st.s.tokens;
  lc_call(&d, &in, G, n, &st.s, &ck, &o);
  ck_assert_uint_eq(st.s.tokens, G + 5 * G);
  char what[128];
  for (size_t i = 0, t0 = 0; i <= 3; ++i) { /* the same pieces through attn_linear */
    const size_t t1 = i < 3 ? after[i] + 1 : n;
    tu_tensor op;
    lc_call(&d, &in, G + t0, t1 - t0, &plain.s, NULL, &op);
    snprintf(what, sizeof what, "flash: piece %zu vs the checkpointed call", i);
    tu_assert_same_bits(what, tu_at(&o, t0, 0, 0), op.data, sizeof(float) * (t1 - t0) * 16);
    if (i < 3)
      tu_assert_same_bits("flash: checkpoint vs the piece's state", cks + i * sf, plain.s.data, sizeof(float) * sf);
    tu_tensor_free(&op);
    t0 = t1;
  }
  lc_restore_and_continue("flash", &d, &in, G, n, after, 3, 3, cks, sf, &o, &st);
  tu_tensor_free(&o);
  tu_free(cks);
  lu_state_free(&st);
  lu_state_free(&plain);
  tu_qkv_free(&in.x);
}
END_TEST

/* Bad arguments of attn_linear_checkpointed (elu1 without gates unless named; n 6, checkpoints
 * after tokens 1 and 4): the status, and nothing written (o, the state, the checkpoint states). */
/* The call's state and workspace size, which the rows' edits change, and the objects they name. */
typedef struct lb_args {
  attn_linear_state *s;
  size_t ws_size;
} lb_args;
enum { LB_D, LB_ARG, LB_CK, LB_AFTER, LB_STATE, LB_O, LB_WS, LB_K, LB_N };
#define LB_MASK(l, r)   TU_SET_Z(LB_D, attn_linear_desc, mask.left, l), TU_SET_Z(LB_D, attn_linear_desc, mask.right, r)
#define LB_CK_AT(to, k) TU_PTR(LB_CK, attn_checkpoints, states, to, k)
enum { LB_TOKENS = 6 };
static const struct {
  const char *name;
  attn_status expect;
  int gla; /* a GLA call (without its log gates) */
  tu_edit edit[TU_EDITS];
} lb_cases[] = {
    {"a window", ATTN_E_BAD_ARGUMENT, 0, {LB_MASK(2, 0)}},
    {"the full mask", ATTN_E_BAD_ARGUMENT, 0, {LB_MASK(ATTN_UNBOUNDED, ATTN_UNBOUNDED)}},
    {"n_q 5 != n_kv 6", ATTN_E_BAD_ARGUMENT, 0, {TU_SET_Z(LB_D, attn_linear_desc, shape.n_q, LB_TOKENS - 1)}},
    {"state NULL", ATTN_E_NULL_POINTER, 0, {TU_NUL(LB_ARG, lb_args, s)}},
    {"exclusive_chunk 4, checkpoints not at rounds' ends",
     ATTN_E_BAD_ARGUMENT,
     0,
     {TU_SET_Z(LB_D, attn_linear_desc, exclusive_chunk, 4)}},
    {"checkpoints {4, 1}", ATTN_E_BAD_ARGUMENT, 0, {TU_ELEM_Z(LB_AFTER, 0, 4), TU_ELEM_Z(LB_AFTER, 1, 1)}},
    {"checkpoints {1, n}", ATTN_E_BAD_ARGUMENT, 0, {TU_ELEM_Z(LB_AFTER, 1, LB_TOKENS)}},
    {"checkpoints' after NULL", ATTN_E_NULL_POINTER, 0, {TU_NUL(LB_CK, attn_checkpoints, after)}},
    {"checkpoints' states NULL", ATTN_E_NULL_POINTER, 0, {TU_NUL(LB_CK, attn_checkpoints, states)}},
    {"checkpoint states inside the state", ATTN_E_ALIASING, 0, {LB_CK_AT(LB_STATE, 3)}},
    {"checkpoint states inside o", ATTN_E_ALIASING, 0, {LB_CK_AT(LB_O, 1)}},
    {"checkpoint states inside the workspace",
     ATTN_E_ALIASING,
     0,
     {LB_CK_AT(LB_WS, 2), TU_ADD(LB_ARG, lb_args, ws_size, 4096)}},
    {"checkpoint states are k", ATTN_E_ALIASING, 0, {LB_CK_AT(LB_K, 0)}},
    {"GLA: log_gate NULL", ATTN_E_NULL_POINTER, 1, {{0}}},
};
#define LB_NCASES (sizeof lb_cases / sizeof lb_cases[0])

START_TEST(linear_checkpointed_rejects) {
  const int gla = lb_cases[_i].gla;
  const size_t n = LB_TOKENS;
  tu_rng rng = tu_rng_of(50000 + (uint64_t)_i);
  attn_linear_desc d;
  lc_desc(&d, gla, n);
  lc_in in;
  lc_in_make(&in, gla, n, &rng);
  lu_bad_call b;
  lu_bad_call_make(&b, &d, &rng, n, 2, 8);
  const size_t sf = lu_state_floats(&b.st.s);
  float *cks = tu_alloc(sizeof(float) * 2 * sf, 0);
  size_t after[2] = {1, 4};
  attn_checkpoints ck = {2, after, cks};
  lb_args a = {&b.st.s, b.need};
  void *obj[LB_N] = {&d, &a, &ck, after, b.st.s.data, b.o.data, b.ws, in.x.k.data};
  tu_edits_apply(lb_cases[_i].edit, TU_EDITS, obj, LB_N);
  lu_bad_call_take(&b, a.s);
  const attn_status got = attn_linear_checkpointed(&d, in.x.q.data, in.x.k.data, in.x.v.data, NULL, NULL, b.o.data, a.s,
                                                   &ck, b.ws, a.ws_size);
  ck_assert_msg(got == lb_cases[_i].expect, "%s: got %s, want %s", lb_cases[_i].name, attn_status_string(got),
                attn_status_string(lb_cases[_i].expect));
  lu_bad_call_finish(&b, &in.x);
  for (size_t e = 0; e < 2 * sf; ++e) ck_assert_msg(isnan(cks[e]), "%s: checkpoint written", lb_cases[_i].name);
  tu_assert_guards("checkpoint states", cks);
  tu_free(cks);
  tu_qkv_free(&in.x);
  tu_tensor_free(&in.g);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"checkpoints", delta_checkpoint_restore, (int)(2 * dt_npcases)}, {"checkpoints", delta_threads_bit_identical, 4},
    {"checkpoints", linear_checkpoint_restore, 4}, {"checkpoints", linear_checkpoint_flash, 1},
  {"bad_input", delta_rejects_bad_input, (int)DB_NCASES}, {"bad_input", linear_checkpointed_rejects, (int)LB_NCASES})
/* clang-format on */
