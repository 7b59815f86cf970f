/*
 * Linear attention's state and API on the ISA path named by ATTN_ISA. TCases: "state" (the
 * state's layout against the reference, and the contracts of attn_linear_state_init, _reset and
 * _copy), "api" (descriptor defaults, feature and state sizes, size queries, chunk sizes,
 * reentrancy) and "bad_input" (the exact status of every bad argument, nothing written).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LU_SHORT_NAMES /* linear_util.h: T, H, ELU, FAV, SIZES, ... */
#include "bad_input.h"
#include "linear_util.h"
#include "test_util.h"
#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* The state: layout and management                                                            */
/* ------------------------------------------------------------------------------------------ */
/* For separate key and value head counts and both modes: attn_linear_state_size is
 * L * m * (dv + 2) floats with L = lcm(h_k, h_v) (lu_state_make), a causal prefill leaves S and z
 * of the reference in the documented places, and the offset column (dv + 1) stays exactly 0
 * for identity and elu1, as does z (column dv) when not normalised. */
START_TEST(linear_state_layout) {
  static const size_t heads[][3] = {{4, 2, 2}, {2, 2, 8}, {8, 2, 4}, {4, 4, 1}, {6, 2, 3}, {1, 2, 4}};
  const size_t *hh = heads[_i / 2];
  const int normalize = _i % 2;
  tu_rng rng = tu_rng_of(9700 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, 37, 37, hh[0], hh[1], hh[2], 8, 5);
  attn_linear_desc d;
  lu_desc(&d, 37, 37, hh[0], hh[1], hh[2], 8, 5, normalize ? ELU : ID, CAUSAL, normalize, 16);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, &st.s, 0, &o);
  for (size_t r = 0; r < st.s.heads * st.s.m; ++r) {
    const float *row = st.s.data + r * st.s.ld;
    ck_assert_msg(row[st.s.dv + 1] == 0.0f, "state row %zu: offset %g", r, (double)row[st.s.dv + 1]);
    if (!normalize) ck_assert_msg(row[st.s.dv] == 0.0f, "state row %zu: z %g un-normalised", r, (double)row[st.s.dv]);
  }
  lu_check_state("state layout", &d, &x.k, &x.v, NULL, 0, &st.s);
  lu_check_output("state layout", &d, &x.q, &x.k, &x.v, NULL, 0, &o);
  tu_tensor_free(&o);
  lu_state_free(&st);
  tu_qkv_free(&x);
}
END_TEST

enum { NQ = 5, NKV = 7, HQ = 4, HKV = 2, D = 8, DV = 6 };
#define STATE_FLOATS ((size_t)HKV * D * (DV + 2)) /* L = HKV state heads of the default shape */

START_TEST(state_init_contract) {
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_linear_state_size(&d, &bytes), ATTN_OK);
  ck_assert_uint_eq(bytes, sizeof(float) * STATE_FLOATS);
  void *mem = tu_alloc(bytes, 0);
  attn_linear_state s;
  ck_assert_int_eq(attn_linear_state_init(NULL, &d, mem, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init(&s, NULL, mem, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init(&s, &d, NULL, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init(&s, &d, mem, bytes - 1), ATTN_E_WORKSPACE_TOO_SMALL);
  attn_linear_desc bad = d;
  bad.shape.d = 0;
  ck_assert_int_eq(attn_linear_state_init(&s, &bad, mem, bytes), ATTN_E_ZERO_SIZE);
  bad = d;
  bad.shape.h_q = 3;
  ck_assert_int_eq(attn_linear_state_init(&s, &bad, mem, bytes), ATTN_E_BAD_HEADS);
  bad = d;
  bad.m = D + 1;
  ck_assert_int_eq(attn_linear_state_init(&s, &bad, mem, bytes), ATTN_E_BAD_FEATURE_MAP);
  tu_assert_guards("state memory after rejected inits", mem);
  /* any float-aligned memory works: 4 bytes past a 64-byte boundary */
  void *mem2 = tu_alloc(bytes, 4);
  ck_assert_int_eq(attn_linear_state_init(&s, &d, mem2, bytes), ATTN_OK);
  ck_assert_ptr_eq(s.data, mem2);
  ck_assert_uint_eq(s.tokens, 0);
  ck_assert_uint_eq(s.heads, HKV);
  ck_assert_uint_eq(s.ld, DV + 2);
  for (size_t e = 0; e < STATE_FLOATS; ++e) ck_assert(s.data[e] == 0.0f);
  tu_assert_guards("state memory", mem2);
  tu_free(mem2);
  tu_free(mem);
}
END_TEST

START_TEST(state_reset_contract) {
  tu_rng rng = tu_rng_of(400);
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  lu_state st;
  lu_state_make_filled(&st, &d, &rng);
  ck_assert_int_eq(attn_linear_state_reset(NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_reset(&st.s), ATTN_OK);
  ck_assert_uint_eq(st.s.tokens, 0);
  ck_assert_uint_eq(st.s.heads, HKV);
  ck_assert_ptr_eq(st.s.data, st.mem);
  for (size_t e = 0; e < STATE_FLOATS; ++e) ck_assert(st.s.data[e] == 0.0f); /* offsets included */
  tu_assert_guards("state memory", st.mem);
  tu_free(st.mem);
}
END_TEST

START_TEST(state_copy_contract) {
  tu_rng rng = tu_rng_of(401);
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  lu_state a, b, wrong_dv, wrong_mode, wrong_heads;
  lu_state_make_filled(&a, &d, &rng);
  lu_state_make_filled(&b, &d, &rng);
  attn_linear_desc dd;
  ck_assert_int_eq(attn_linear_desc_init(&dd, NQ, NKV, HQ, HKV, D, DV + 1, ATTN_FEATURE_ELU1), ATTN_OK);
  lu_state_make_filled(&wrong_dv, &dd, &rng);
  dd = d;
  dd.normalize = 0;
  lu_state_make_filled(&wrong_mode, &dd, &rng);
  dd = d;
  ck_assert_int_eq(attn_shape_init(&dd.shape, NQ, NKV, HQ, HKV, HQ, D, DV), ATTN_OK); /* L = 4 */
  lu_state_make_filled(&wrong_heads, &dd, &rng);
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
  ck_assert_int_eq(attn_linear_state_copy(&b.s, &wrong_heads.s), ATTN_E_STATE_MISMATCH);
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
  /* a real copy: bitwise data (offsets included), tokens, dst keeps its pointer */
  a.s.tokens = 1234;
  ck_assert_int_eq(attn_linear_state_copy(&b.s, &a.s), ATTN_OK);
  ck_assert_ptr_eq(b.s.data, b.mem);
  ck_assert_uint_eq(b.s.tokens, 1234);
  tu_assert_same_bits("copied state", a.mem, b.mem, sizeof(float) * STATE_FLOATS);
  lu_state *all[] = {&a, &b, &wrong_dv, &wrong_mode, &wrong_heads};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
    tu_assert_guards("state memory", all[i]->mem);
    tu_free(all[i]->mem);
  }
  free(a_before);
  free(b_before);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Aligned states (attn_linear_state_init_aligned): rows of dv + 2 floats rounded up to 16       */
/* ------------------------------------------------------------------------------------------ */
/* Sizes and binding for odd, aligned and wide rows; refusals (nothing written); copies only
 * between states of one kind; a call refuses rows of any third width. */
START_TEST(state_aligned_contract) {
  static const size_t dvs[] = {1, 5, 14, 30, 64, 65};
  for (size_t i = 0; i < sizeof dvs / sizeof dvs[0]; ++i) {
    attn_linear_desc d;
    ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, dvs[i], ATTN_FEATURE_ELU1), ATTN_OK);
    size_t bytes = 0, plain = 0;
    ck_assert_int_eq(attn_linear_state_size_aligned(&d, &bytes), ATTN_OK);
    ck_assert_int_eq(attn_linear_state_size(&d, &plain), ATTN_OK);
    ck_assert_uint_eq(bytes, sizeof(float) * HKV * D * lu_state_ld_aligned(dvs[i]));
    ck_assert_uint_eq(plain, sizeof(float) * HKV * D * (dvs[i] + 2));
    float *mem = tu_alloc(bytes, 0);
    attn_linear_state s;
    memset(&s, 0xAB, sizeof s);
    ck_assert_int_eq(attn_linear_state_init_aligned(&s, &d, mem, bytes), ATTN_OK);
    ck_assert_uint_eq(s.heads, HKV);
    ck_assert_uint_eq(s.m, D);
    ck_assert_uint_eq(s.dv, dvs[i]);
    ck_assert_uint_eq(s.ld, lu_state_ld_aligned(dvs[i]));
    ck_assert_int_eq(s.feature_map, ATTN_FEATURE_ELU1);
    ck_assert_int_eq(s.normalize, 1);
    ck_assert_uint_eq(s.tokens, 0);
    ck_assert_ptr_eq(s.data, mem);
    for (size_t e = 0; e < bytes / sizeof(float); ++e) ck_assert(mem[e] == 0.0f);
    tu_assert_guards("aligned state memory", mem);
    tu_free(mem);
  }
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_linear_state_size_aligned(&d, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_size_aligned(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_size_aligned(&d, &bytes), ATTN_OK);
  attn_linear_desc bad = d;
  bad.shape.dv = 0;
  size_t untouched = 77;
  ck_assert_int_eq(attn_linear_state_size_aligned(&bad, &untouched), ATTN_E_ZERO_SIZE);
  ck_assert_uint_eq(untouched, 77);
  /* refusals: misaligned memory (16 bytes past a line), a byte too few, NULLs, a bad descriptor */
  float *off = tu_alloc(bytes, 16), *mem = tu_alloc(bytes, 0);
  attn_linear_state s, before;
  memset(&s, 0xAB, sizeof s);
  before = s;
  ck_assert_int_eq(attn_linear_state_init_aligned(&s, &d, off, bytes), ATTN_E_BAD_ARGUMENT);
  ck_assert_int_eq(attn_linear_state_init_aligned(&s, &d, mem, bytes - 1), ATTN_E_WORKSPACE_TOO_SMALL);
  ck_assert_int_eq(attn_linear_state_init_aligned(&s, &d, NULL, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init_aligned(NULL, &d, mem, bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_linear_state_init_aligned(&s, &bad, mem, bytes), ATTN_E_ZERO_SIZE);
  tu_assert_same_bits("state struct after refusals", &before, &s, sizeof s);
  for (size_t e = 0; e < bytes / sizeof(float); ++e) {
    uint32_t a, b;
    memcpy(&a, off + e, sizeof a);
    memcpy(&b, mem + e, sizeof b);
    ck_assert_msg(a == TU_SENTINEL_BITS && b == TU_SENTINEL_BITS, "memory written by a refused init at %zu", e);
  }
  /* copies: aligned to aligned (bits, tokens), never across kinds */
  tu_rng rng = tu_rng_of(411);
  lu_state plain_st;
  lu_state_make_filled(&plain_st, &d, &rng);
  float *mem2 = tu_alloc(bytes, 0);
  attn_linear_state a2;
  ck_assert_int_eq(attn_linear_state_init_aligned(&s, &d, mem, bytes), ATTN_OK);
  ck_assert_int_eq(attn_linear_state_init_aligned(&a2, &d, mem2, bytes), ATTN_OK);
  for (size_t e = 0; e < bytes / sizeof(float); ++e) mem[e] = tu_rng_range(&rng, 0.0f, 1.0f);
  s.tokens = 21;
  ck_assert_int_eq(attn_linear_state_copy(&a2, &s), ATTN_OK);
  ck_assert_uint_eq(a2.tokens, 21);
  tu_assert_same_bits("aligned copy", mem, mem2, bytes);
  ck_assert_int_eq(attn_linear_state_copy(&plain_st.s, &s), ATTN_E_STATE_MISMATCH);
  ck_assert_int_eq(attn_linear_state_copy(&s, &plain_st.s), ATTN_E_STATE_MISMATCH);
  /* a call refuses a state whose rows are neither dv + 2 nor the aligned width */
  attn_linear_desc one = d;
  one.shape.n_q = one.shape.n_kv = 1;
  size_t ws_bytes;
  ck_assert_int_eq(attn_linear_workspace_size(&one, &ws_bytes), ATTN_OK);
  float *ws = tu_alloc(ws_bytes, 0), *in = tu_alloc(sizeof(float) * HQ * D, 0),
        *o = tu_alloc(sizeof(float) * HQ * DV, 0);
  for (size_t e = 0; e < HQ * D; ++e) in[e] = 0.25f;
  attn_linear_state wide = a2;
  wide.ld = lu_state_ld_aligned(DV) + 16;
  ck_assert_int_eq(attn_linear(&one, in, in, in, o, &wide, ws, ws_bytes), ATTN_E_STATE_MISMATCH);
  wide.ld = DV + 3;
  ck_assert_int_eq(attn_linear(&one, in, in, in, o, &wide, ws, ws_bytes), ATTN_E_STATE_MISMATCH);
  tu_assert_same_bits("aligned state after refused calls", mem, mem2, bytes);
  ck_assert_int_eq(attn_linear(&one, in, in, in, o, &a2, ws, ws_bytes), ATTN_OK); /* its workspace serves it */
  ck_assert_uint_eq(a2.tokens, 22);
  void *blocks[] = {off, mem, mem2, ws, in, o};
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; ++i) {
    tu_assert_guards("aligned contract memory", blocks[i]);
    tu_free(blocks[i]);
  }
  lu_state_free(&plain_st);
}
END_TEST

/* A sequence of calls (a prefill of 37 tokens, three decode steps, a prefill of 9, a prefill of
 * 20 with checkpoints after its tokens 4 and 12) on a state of dv + 2 rows and on an aligned one:
 * every output and checkpoint the same bits, the states the same bits row by row, and the aligned
 * state after the first prefill within the float64 reference's tolerance (ungated rows). The rows
 * cover the engine's schedules: chunks and the scan, the recurrence (by head groups, in place on
 * aligned rows), one-token steps, offsets, FAVOR+'s 4d rows, GQA and Mamba2's heads, threads. */
typedef struct al_case {
  attn_feature_map fm;
  attn_gate_kind gate;
  int beta, normalize;
  size_t h_q, h_k, h_v, h_g, d, dv, chunk, threads;
} al_case;

static const al_case AL_CASES[] = {
    {ID, ATTN_GATE_FEATURE, 0, 0, 4, 4, 4, 0, 16, 16, 0, 1}, /* GLA: the recurrence by head groups */
    {ID, ATTN_GATE_FEATURE, 1, 0, 3, 3, 3, 0, 8, 5, 0, 2},   /* odd dv, beta, two threads */
    {ID, ATTN_GATE_SCALAR, 1, 0, 2, 2, 6, 6, 8, 14, 0, 1},   /* Mamba2: 2 groups, 6 heads, dv + 2 = 16 */
    {ID, ATTN_GATE_SCALAR, 0, 1, 4, 2, 2, 0, 8, 30, 16, 2},  /* GQA, normalised, chunks of 16 */
    {ELU, ATTN_GATE_NONE, 0, 1, 4, 2, 2, 0, 8, 6, 0, 1},     /* chunks and the scan */
    {ELU, ATTN_GATE_NONE, 0, 1, 8, 8, 8, 0, 4, 3, 0, 2},     /* the scan's waves and gathers */
    {RELU, ATTN_GATE_NONE, 0, 0, 3, 3, 3, 0, 7, 9, 1, 2},    /* chunk 1: the recurrence on any map */
    {EXPM, ATTN_GATE_NONE, 0, 1, 2, 2, 2, 0, 8, 6, 0, 1},    /* offsets (column dv + 1) */
    {FAV, ATTN_GATE_NONE, 0, 1, 2, 1, 1, 0, 8, 4, 0, 2},     /* m = 4d rows */
};
enum { AL_N = 69, AL_CK = 2 };

/* One call of rows [t0, t0 + n) on state s (checkpoints: ck), output into o's rows. */
static void al_call(const attn_linear_desc *base, const tu_qkv *x, const float *lg, const float *beta, float *o,
                    size_t t0, size_t n, attn_linear_state *s, const attn_checkpoints *ck) {
  attn_linear_desc d = *base;
  d.shape.n_q = d.shape.n_kv = n;
  size_t ws_bytes;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &ws_bytes), ATTN_OK);
  void *ws = tu_alloc(ws_bytes, 0);
  const attn_shape *sh = &d.shape;
  const float *gl = lg ? lg + t0 * d.gate_layout.row_stride : NULL,
              *bt = beta ? beta + t0 * d.beta_layout.row_stride : NULL;
  ck_assert_int_eq(attn_linear_checkpointed(&d, x->q.data + t0 * sh->q.row_stride, x->k.data + t0 * sh->k.row_stride,
                                            x->v.data + t0 * sh->v.row_stride, gl, bt, o + t0 * sh->o.row_stride, s, ck,
                                            ws, ws_bytes),
                   ATTN_OK);
  tu_assert_guards("workspace", ws);
  tu_free(ws);
}

START_TEST(state_aligned_same_bits) {
  const al_case *c = &AL_CASES[_i];
  tu_rng rng = tu_rng_of(9800 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, AL_N, AL_N, c->h_q, c->h_k, c->h_v, c->d, c->dv);
  attn_linear_desc d;
  lu_desc(&d, AL_N, AL_N, c->h_q, c->h_k, c->h_v, c->d, c->dv, c->fm, CAUSAL, c->normalize, c->chunk);
  const size_t H = lu_max3(c->h_q, c->h_k, c->h_v), hg = c->h_g ? c->h_g : H;
  if (c->h_g) ck_assert_int_eq(attn_shape_init(&d.shape, AL_N, AL_N, c->h_q, c->h_k, c->h_v, c->d, c->dv), ATTN_OK);
  const size_t m = lu_feature_size(&d), gw = c->gate == ATTN_GATE_FEATURE ? m : 1;
  d.gate = c->gate;
  d.beta = c->beta;
  d.h_g = c->h_g;
  d.gate_layout = (attn_layout){hg * gw, gw};
  d.beta_layout = (attn_layout){hg, 1};
  float *lg = malloc(sizeof(float) * AL_N * hg * gw), *beta = malloc(sizeof(float) * AL_N * hg);
  ck_assert(lg && beta);
  for (size_t e = 0; e < AL_N * hg * gw; ++e) lg[e] = tu_rng_range(&rng, -0.5f, 0.0f);
  for (size_t e = 0; e < AL_N * hg; ++e) beta[e] = tu_rng_range(&rng, 0.5f, 1.5f);
  d.shape.o = (attn_layout){H * c->dv, c->dv};
  attn_pool *pool = NULL;
  attn_threads th;
  if (c->threads > 1) {
    ck_assert_int_eq(attn_pool_create(c->threads, &pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
    d.shape.threads = &th;
  }
  lu_state a;
  lu_state_make(&a, &d);
  size_t bytes;
  ck_assert_int_eq(attn_linear_state_size_aligned(&d, &bytes), ATTN_OK);
  float *mem = tu_alloc(bytes, 0);
  attn_linear_state b;
  ck_assert_int_eq(attn_linear_state_init_aligned(&b, &d, mem, bytes), ATTN_OK);
  float *oa = tu_alloc(sizeof(float) * AL_N * H * c->dv, 0), *ob = tu_alloc(sizeof(float) * AL_N * H * c->dv, 0);
  const size_t after[AL_CK] = {4, 12}, plain_floats = a.bytes / sizeof(float);
  float *cka = malloc(a.bytes * AL_CK), *ckb = malloc(bytes * AL_CK), *compact = malloc(a.bytes);
  ck_assert(cka && ckb && compact);
  static const size_t pieces[][2] = {{0, 37}, {37, 1}, {38, 1}, {39, 1}, {40, 9}, {49, 20}};
  const int gated = c->gate != ATTN_GATE_NONE || c->beta;
  for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; ++i) {
    const size_t t0 = pieces[i][0], n = pieces[i][1];
    const attn_checkpoints cka_ = {AL_CK, after, cka}, ckb_ = {AL_CK, after, ckb};
    const int last = i + 1 == sizeof pieces / sizeof pieces[0];
    al_call(&d, &x, gated ? lg : NULL, gated ? beta : NULL, oa, t0, n, &a.s, last ? &cka_ : NULL);
    al_call(&d, &x, gated ? lg : NULL, gated ? beta : NULL, ob, t0, n, &b, last ? &ckb_ : NULL);
    ck_assert_uint_eq(a.s.tokens, b.tokens);
    if (i == 0 && !gated) { /* the aligned state against the reference, through its compact image */
      attn_linear_desc d0 = d;
      d0.shape.n_q = d0.shape.n_kv = n;
      const tu_qkv x0 = tu_qkv_rows(&x, 0, n, n);
      const attn_linear_state cs = lu_state_compact(&b, compact);
      lu_check_state("aligned state after a prefill", &d0, &x0.k, &x0.v, NULL, 0, &cs);
    }
  }
  tu_assert_same_bits("outputs on an aligned state", oa, ob, sizeof(float) * AL_N * H * c->dv);
  attn_linear_state cs = lu_state_compact(&b, compact);
  tu_assert_same_bits("aligned state's rows", a.s.data, cs.data, a.bytes);
  for (size_t i = 0; i < AL_CK; ++i) {
    attn_linear_state img = b;
    img.data = ckb + i * (bytes / sizeof(float));
    cs = lu_state_compact(&img, compact);
    tu_assert_same_bits("an aligned state's checkpoint", cka + i * plain_floats, compact, a.bytes);
  }
  void *blocks[] = {mem, oa, ob};
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; ++i) {
    tu_assert_guards("aligned run memory", blocks[i]);
    tu_free(blocks[i]);
  }
  lu_state_free(&a);
  if (pool) attn_pool_destroy(pool);
  free(cka);
  free(ckb);
  free(compact);
  free(lg);
  free(beta);
  tu_qkv_free(&x);
}
END_TEST

/* FLASH's chunk-exclusive form (rounds of G = 8 absorbed when complete) on both kinds of state:
 * calls of whole rounds, the last with checkpoints at round ends; outputs, checkpoints and states
 * the same bits. */
START_TEST(state_aligned_flash_same_bits) {
  enum { G = 8, N = 64, HH = 3, DD = 8, DVV = 7 };
  tu_rng rng = tu_rng_of(9900);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, N, N, HH, HH, HH, DD, DVV);
  attn_linear_desc d;
  lu_desc(&d, N, N, HH, HH, HH, DD, DVV, ID, CAUSAL, 0, 0);
  d.exclusive_chunk = G;
  d.scale = 1.0f / G;
  lu_state a;
  lu_state_make(&a, &d);
  size_t bytes;
  ck_assert_int_eq(attn_linear_state_size_aligned(&d, &bytes), ATTN_OK);
  float *mem = tu_alloc(bytes, 0), *oa = tu_alloc(sizeof(float) * N * HH * DVV, 0),
        *ob = tu_alloc(sizeof(float) * N * HH * DVV, 0);
  attn_linear_state b;
  ck_assert_int_eq(attn_linear_state_init_aligned(&b, &d, mem, bytes), ATTN_OK);
  const size_t after[2] = {7, 15};
  float *cka = malloc(a.bytes * 2), *ckb = malloc(bytes * 2), *compact = malloc(a.bytes);
  ck_assert(cka && ckb && compact);
  const attn_checkpoints ca = {2, after, cka}, cb = {2, after, ckb};
  static const size_t pieces[][2] = {{0, 32}, {32, 8}, {40, 24}};
  for (size_t i = 0; i < 3; ++i) {
    al_call(&d, &x, NULL, NULL, oa, pieces[i][0], pieces[i][1], &a.s, i == 2 ? &ca : NULL);
    al_call(&d, &x, NULL, NULL, ob, pieces[i][0], pieces[i][1], &b, i == 2 ? &cb : NULL);
    ck_assert_uint_eq(a.s.tokens, b.tokens);
  }
  tu_assert_same_bits("FLASH outputs on an aligned state", oa, ob, sizeof(float) * N * HH * DVV);
  (void)lu_state_compact(&b, compact);
  tu_assert_same_bits("FLASH: an aligned state's rows", a.s.data, compact, a.bytes);
  for (size_t i = 0; i < 2; ++i) {
    attn_linear_state img = b;
    img.data = ckb + i * (bytes / sizeof(float));
    (void)lu_state_compact(&img, compact);
    tu_assert_same_bits("FLASH: an aligned state's checkpoint", cka + i * (a.bytes / sizeof(float)), compact, a.bytes);
  }
  void *blocks[] = {mem, oa, ob};
  for (size_t i = 0; i < 3; ++i) {
    tu_assert_guards("FLASH aligned run memory", blocks[i]);
    tu_free(blocks[i]);
  }
  lu_state_free(&a);
  free(cka);
  free(ckb);
  free(compact);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Descriptor defaults, size queries, reentrancy                                               */
/* ------------------------------------------------------------------------------------------ */
START_TEST(linear_desc_init_defaults) {
  attn_linear_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_linear_desc_init(&d, 5, 9, 6, 2, 64, 40, ATTN_FEATURE_ELU1), ATTN_OK);
  tu_assert_shape_defaults("linear shape defaults", &d.shape, 64);
  ck_assert_uint_eq(d.shape.h_k, 2);
  ck_assert_uint_eq(d.shape.h_v, 2);
  ck_assert_int_eq(d.feature_map, ATTN_FEATURE_ELU1);
  ck_assert_int_eq(attn_mask_is_causal(d.mask), 1);
  ck_assert_uint_eq(d.m, 0);
  ck_assert(d.scale == 1.0f);
  ck_assert_int_eq(d.normalize, 1);
  ck_assert(d.eps == 1e-6f);
  ck_assert_uint_eq(d.chunk, 0);
  ck_assert_int_eq(d.favor_source, ATTN_FAVOR_SEED_CHI);
  ck_assert_uint_eq(d.favor_seed, 0);
  ck_assert_ptr_null(d.favor_w);
  ck_assert_int_eq(attn_linear_desc_init(&d, 1, 1, 1, 1, 1, 1, ATTN_FEATURE_IDENTITY), ATTN_OK);
  ck_assert_int_eq(d.feature_map, ATTN_FEATURE_IDENTITY);
  ck_assert_int_eq(attn_linear_desc_init(NULL, 1, 1, 1, 1, 1, 1, ATTN_FEATURE_ELU1), ATTN_E_NULL_POINTER);
  /* every map: scale 1/sqrt(d) (float) for exp and favor, else 1; eps 0 for dsoftmax, else 1e-6;
   * m 0 (favor: 4d), the seed source (chi) with seed 0 and no W */
  static const size_t ds[] = {1, 7, 64, 65};
  for (int fm = 0; fm < ATTN_FEATURE_COUNT; ++fm)
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; ++i) {
      memset(&d, 0xCD, sizeof d);
      ck_assert_int_eq(attn_linear_desc_init(&d, 5, 9, 6, 2, ds[i], 40, (attn_feature_map)fm), ATTN_OK);
      tu_assert_shape_defaults("linear shape defaults", &d.shape, ds[i]);
      const float scale = fm == EXPM || fm == FAV ? 1.0f / sqrtf((float)ds[i]) : 1.0f;
      ck_assert_msg(d.scale == scale, "map %d d %zu: scale %.9g, expected %.9g", fm, ds[i], (double)d.scale,
                    (double)scale);
      ck_assert_msg(d.eps == (fm == DSM ? 0.0f : 1e-6f), "map %d: eps %g", fm, (double)d.eps);
      ck_assert_int_eq(d.feature_map, fm);
      ck_assert_int_eq(attn_mask_is_causal(d.mask), 1);
      ck_assert_int_eq(d.normalize, 1);
      ck_assert_uint_eq(d.m, 0);
      ck_assert_uint_eq(d.chunk, 0);
      ck_assert_int_eq(d.favor_source, ATTN_FAVOR_SEED_CHI);
      ck_assert_uint_eq(d.favor_seed, 0);
      ck_assert_ptr_null(d.favor_w);
      size_t m = 0;
      ck_assert_int_eq(attn_linear_feature_size(&d, &m), ATTN_OK); /* the defaults are valid */
      ck_assert_uint_eq(m, fm == FAV ? 4 * ds[i] : ds[i]);
    }
}
END_TEST

/* Feature size: m = d for every map but favor, whether m is left 0 or set to d; favor: 4d when
 * m is 0, else m (any m >= 1: 1, 37, d, 4d, 5d + 3). The state size follows: L * m * (dv + 2). */
START_TEST(linear_feature_size_is_d) {
  static const size_t ds[] = {1, 7, 64, 65, 128};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; ++i)
    for (int fm = 0; fm < ATTN_FEATURE_COUNT; ++fm) {
      const size_t favor_ms[] = {0, 1, 37, ds[i], 4 * ds[i], 5 * ds[i] + 3};
      const size_t tries = fm == FAV ? sizeof favor_ms / sizeof favor_ms[0] : 2;
      for (size_t t = 0; t < tries; ++t) {
        attn_linear_desc d;
        lu_desc(&d, 3, 3, 2, 1, 1, ds[i], 5, (attn_feature_map)fm, CAUSAL, NORM, 0);
        d.m = fm == FAV ? favor_ms[t] : t ? ds[i] : 0;
        const size_t want = fm != FAV ? ds[i] : d.m ? d.m : 4 * ds[i];
        size_t m = 0, bytes = 0;
        ck_assert_int_eq(attn_linear_feature_size(&d, &m), ATTN_OK);
        ck_assert_msg(m == want, "map %d d %zu desc.m %zu: feature size %zu, expected %zu", fm, ds[i], d.m, m, want);
        ck_assert_int_eq(attn_linear_state_size(&d, &bytes), ATTN_OK);
        ck_assert_uint_eq(bytes, sizeof(float) * 1 * want * (5 + 2));
      }
    }
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

/* The chunk a call uses: the descriptor's when set, else the active path's documented default
 * (64 on the scalar path, 48 on the AVX2 and NEON paths; a path added later documents its own, and
 * until then only its range is checked); 1 (the recurrence) for per-feature gates over a state of
 * at most 64 x 65 floats (the scalar path: 128 x 129), and for chunk 1. */
START_TEST(linear_chunk_size_contract) {
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  size_t c = 0;
  ck_assert_int_eq(attn_linear_chunk_size(&d, &c), ATTN_OK);
  const attn_isa isa = attn_isa_get();
  if (isa == ATTN_ISA_SCALAR)
    ck_assert_uint_eq(c, 64);
  else if (isa == ATTN_ISA_AVX2 || isa == ATTN_ISA_NEON)
    ck_assert_uint_eq(c, 48);
  else
    ck_assert(c >= 1 && c <= ATTN_LINEAR_MAX_CHUNK);
  attn_linear_desc g = d; /* per-feature gates: the recurrence up to the path's state size */
  g.gate = ATTN_GATE_FEATURE;
  g.gate_layout = (attn_layout){HKV * D, D};
  ck_assert_int_eq(attn_linear_chunk_size(&g, &c), ATTN_OK);
  ck_assert_uint_eq(c, 1);
  const size_t big = isa == ATTN_ISA_SCALAR ? 129 : 65; /* m W = 129 x 130 or 65 x 66: chunks again */
  ck_assert_int_eq(attn_linear_desc_init(&g, NQ, NKV, HQ, HKV, big, big, ATTN_FEATURE_ELU1), ATTN_OK);
  g.gate = ATTN_GATE_FEATURE;
  g.gate_layout = (attn_layout){HKV * big, big};
  ck_assert_int_eq(attn_linear_chunk_size(&g, &c), ATTN_OK);
  ck_assert_uint_eq(c, isa == ATTN_ISA_SCALAR ? 64u : isa == ATTN_ISA_AVX2 || isa == ATTN_ISA_NEON ? 48u : c);
  ck_assert(c > 1);
  g.chunk = 1;
  ck_assert_int_eq(attn_linear_chunk_size(&g, &c), ATTN_OK);
  ck_assert_uint_eq(c, 1);
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

/* Reentrancy: threads running causal prefills (each with its own output, workspace and state,
 * over its own inputs; GQA and Mamba2-style heads) equal the serial results bit for bit, outputs
 * and states alike. */
enum { RE_THREADS = 4, RE_N = 67, RE_D = 16, RE_REPS = 20 };
typedef struct ln_job {
  const tu_qkv *x;
  size_t h_q, h_k, h_v;
} ln_job;
static size_t ln_job_floats(const ln_job *j) {
  return (size_t)RE_N * lu_max3(j->h_q, j->h_k, j->h_v) * RE_D + ref_lcm(j->h_k, j->h_v) * RE_D * (RE_D + 2);
}

static int ln_job_run(const void *arg, float *out) {
  const ln_job *j = arg;
  attn_linear_desc d;
  size_t ws = 0, sb = 0;
  if (attn_linear_desc_init(&d, RE_N, RE_N, j->h_q, j->h_k, RE_D, RE_D, ATTN_FEATURE_ELU1) != ATTN_OK ||
      attn_shape_init(&d.shape, RE_N, RE_N, j->h_q, j->h_k, j->h_v, RE_D, RE_D) != ATTN_OK ||
      attn_linear_workspace_size(&d, &ws) != ATTN_OK || attn_linear_state_size(&d, &sb) != ATTN_OK)
    return -1;
  void *w = malloc(ws + 1), *mem = malloc(sb);
  attn_linear_state st;
  int rc = -1;
  if (w && mem && attn_linear_state_init(&st, &d, mem, sb) == ATTN_OK) {
    rc = 0;
    for (int rep = 0; rep < RE_REPS && rc == 0; ++rep) {
      rc |= (int)attn_linear_state_reset(&st);
      rc |= (int)attn_linear(&d, j->x->q.data, j->x->k.data, j->x->v.data, out, &st, w, ws);
    }
    memcpy(out + ln_job_floats(j) - sb / sizeof(float), mem, sb);
  }
  free(w);
  free(mem);
  return rc;
}

START_TEST(linear_concurrent_calls_match_serial) {
  tu_rng rng = tu_rng_of(501);
  tu_qkv x[RE_THREADS];
  ln_job jobs[RE_THREADS];
  const void *args[RE_THREADS];
  for (int t = 0; t < RE_THREADS; ++t) {
    jobs[t] = t % 2 ? (ln_job){&x[t], 2, 2, 8} : (ln_job){&x[t], 8, 2, 8}; /* same output size */
    tu_qkv_make(&x[t], T, TU_DATA_UNIFORM, &rng, RE_N, RE_N, jobs[t].h_q, jobs[t].h_k, jobs[t].h_v, RE_D, RE_D);
    args[t] = &jobs[t];
  }
  tu_assert_reentrant("threaded linear vs serial", ln_job_run, args, RE_THREADS, ln_job_floats(&jobs[0]));
  for (int t = 0; t < RE_THREADS; ++t) tu_qkv_free(&x[t]);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid causal call with a state; the call (and,  */
/* for descriptor faults, every size query) answers the row's status, and neither o nor the     */
/* state (struct and data) is written.                                                          */
/* ------------------------------------------------------------------------------------------ */
/* The call's arguments, which the rows' edits change. */
typedef struct lv_args {
  const attn_linear_desc *d;
  const float *q, *k, *v;
  float *o;
  attn_linear_state *s;
  void *ws;
  size_t ws_size;
} lv_args;
/* The objects the edits name: the descriptor, the arguments, the state, the descriptor of the
 * state's own (ALT: a state of another shape or mode, made from it when a row edits it), the
 * caller's W buffer, the inputs, o and the workspace. */
enum { OB_D, OB_ARG, OB_STATE, OB_ALT, OB_W, OB_Q, OB_K, OB_V, OB_O, OB_WS, OB_N };

typedef struct lv_case {
  const char *name;
  attn_status expect;
  int desc_level; /* workspace_size, state_size, feature_size and chunk_size must answer the same */
  int xmap;       /* the map of the valid call (0: elu1) */
  tu_edit edit[TU_EDITS];
  tu_edit pre[2]; /* edits of the valid call, before its state and workspace are made */
} lv_case;

#define LV(s, lvl)        .expect = (s), .desc_level = (lvl), .xmap = 0
#define LVX(s, lvl, map)  .expect = (s), .desc_level = (lvl), .xmap = (map)
#define D_Z(m, val)       TU_SET_Z(OB_D, attn_linear_desc, m, val)
#define D_I(m, val)       TU_SET_I(OB_D, attn_linear_desc, m, val)
#define D_F(m, val)       TU_SET_F(OB_D, attn_linear_desc, m, val)
#define SH(m, val)        D_Z(shape.m, val)
#define MASK(l, r, g)     D_Z(mask.left, l), D_Z(mask.right, r), D_Z(mask.chunk, g)
#define ARG_NUL(m)        TU_NUL(OB_ARG, lv_args, m)
#define ARG_PTR(m, to, k) TU_PTR(OB_ARG, lv_args, m, to, k)
#define NOSTATE           ARG_NUL(s)
#define ST_PTR(to, k)     TU_PTR(OB_STATE, attn_linear_state, data, to, k)
#define ALT_Z(m, val)     TU_SET_Z(OB_ALT, attn_linear_desc, m, val)
#define ALT_I(m, val)     TU_SET_I(OB_ALT, attn_linear_desc, m, val)
#define W(i, val)         TU_ELEM_F(OB_W, i, val)
#define W_CALLER(src)     D_I(favor_source, src), TU_PTR(OB_D, attn_linear_desc, favor_w, OB_W, 0)
#define U                 ATTN_UNBOUNDED
static const lv_case lv_cases[] = {
    TU_NULL_ARG_ROWS(LV, ARG_NUL),
    {"workspace NULL", LV(ATTN_E_NULL_POINTER, 0), {ARG_NUL(ws)}},
    {"state data NULL", LV(ATTN_E_NULL_POINTER, 0), {TU_NUL(OB_STATE, attn_linear_state, data)}},
    {"n_q 0", LV(ATTN_E_ZERO_SIZE, 1), {SH(n_q, 0)}},
    {"n_kv 0", LV(ATTN_E_ZERO_SIZE, 1), {SH(n_kv, 0)}},
    {"h_q 0", LV(ATTN_E_ZERO_SIZE, 1), {SH(h_q, 0)}},
    {"h_k 0", LV(ATTN_E_ZERO_SIZE, 1), {SH(h_k, 0), NOSTATE}},
    {"h_v 0", LV(ATTN_E_ZERO_SIZE, 1), {SH(h_v, 0), NOSTATE}},
    {"d 0", LV(ATTN_E_ZERO_SIZE, 1), {SH(d, 0), NOSTATE}},
    {"dv 0", LV(ATTN_E_ZERO_SIZE, 1), {SH(dv, 0), NOSTATE}},
    {"n_q SIZE_MAX/2", LV(ATTN_E_SIZE_OVERFLOW, 1), {SH(n_q, SIZE_MAX / 2)}},
    {"n_kv SIZE_MAX/2", LV(ATTN_E_SIZE_OVERFLOW, 1), {SH(n_kv, SIZE_MAX / 2)}},
    {"k row stride huge", LV(ATTN_E_SIZE_OVERFLOW, 1), {SH(k.row_stride, SIZE_MAX / 4)}},
    {"q row stride < d", LV(ATTN_E_BAD_STRIDE, 1), {SH(q.row_stride, D - 1)}},
    {"v head stride < dv", LV(ATTN_E_BAD_STRIDE, 1), {SH(v.head_stride, DV - 1)}},
    {"o layout overlaps itself", LV(ATTN_E_BAD_STRIDE, 1), {SH(o.row_stride, DV), SH(o.head_stride, DV)}},
    {"h_q 3, h_k = h_v 2", LV(ATTN_E_BAD_HEADS, 1), {SH(h_q, 3)}},
    {"h_v 3 does not divide H 4", LV(ATTN_E_BAD_HEADS, 1), {SH(h_v, 3)}},
    {"h_k 3 does not divide H 4", LV(ATTN_E_BAD_HEADS, 1), {SH(h_k, 3)}},
    {"eps NaN", LV(ATTN_E_BAD_EPS, 1), {D_F(eps, NAN)}},
    {"eps negative", LV(ATTN_E_BAD_EPS, 1), {D_F(eps, -1e-6f)}},
    {"eps +inf", LV(ATTN_E_BAD_EPS, 1), {D_F(eps, INFINITY)}},
    {"scale NaN", LV(ATTN_E_BAD_SCALE, 1), {D_F(scale, NAN)}},
    {"scale +inf", LV(ATTN_E_BAD_SCALE, 1), {D_F(scale, INFINITY)}},
    {"scale -inf", LV(ATTN_E_BAD_SCALE, 1), {D_F(scale, -INFINITY)}},
    {"feature map COUNT", LV(ATTN_E_BAD_FEATURE_MAP, 1), {D_I(feature_map, ATTN_FEATURE_COUNT), NOSTATE}},
    {"feature map -1", LV(ATTN_E_BAD_FEATURE_MAP, 1), {D_I(feature_map, -1), NOSTATE}},
    {"feature map 99", LV(ATTN_E_BAD_FEATURE_MAP, 1), {D_I(feature_map, 99), NOSTATE}},
    {"m = d + 1", LV(ATTN_E_BAD_FEATURE_MAP, 1), {D_Z(m, D + 1)}},
    {"m = 1 < d", LV(ATTN_E_BAD_FEATURE_MAP, 1), {D_Z(m, 1)}},
    /* masks other than full and causal, with the call's state: windowed linear attention keeps
     * none, for every map (attn.h, since 0.4.0) */
    {"elu1 mask: causal window (3, 0), a state", LV(ATTN_E_BAD_ARGUMENT, 0), {MASK(3, 0, 0)}},
    {"exp mask: causal window (3, 0), a state", LVX(ATTN_E_BAD_ARGUMENT, 0, EXPM), {MASK(3, 0, 0)}},
    {"dsoftmax mask: right 5, a state", LVX(ATTN_E_BAD_ARGUMENT, 0, DSM), {MASK(U, 5, 0)}},
    {"favor mask: diagonal (0, 0), a state", LVX(ATTN_E_BAD_ARGUMENT, 0, FAV), {MASK(0, 0, 0)}},
    {"exp mask: causal chunk 16, a state", LVX(ATTN_E_BAD_ARGUMENT, 0, EXPM), {D_Z(mask.chunk, 16)}},
    {"dsoftmax mask: full chunk 16, a state", LVX(ATTN_E_BAD_ARGUMENT, 0, DSM), {MASK(U, U, 16)}},
    {"normalize 2", LV(ATTN_E_BAD_ARGUMENT, 1), {D_I(normalize, 2), NOSTATE}},
    {"normalize -1", LV(ATTN_E_BAD_ARGUMENT, 1), {D_I(normalize, -1), NOSTATE}},
    {"chunk above ATTN_LINEAR_MAX_CHUNK", LV(ATTN_E_BAD_ARGUMENT, 1), {D_Z(chunk, ATTN_LINEAR_MAX_CHUNK + 1)}},
    {"workspace one byte short", LV(ATTN_E_WORKSPACE_TOO_SMALL, 0), {TU_ADD(OB_ARG, lv_args, ws_size, -1)}},
    {"o is q", LV(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_Q, 0)}},
    {"o inside k", LV(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_K, 5)}},
    {"o is v", LV(ATTN_E_ALIASING, 0), {ARG_PTR(o, OB_V, 0)}},
    {"state with another dv", LV(ATTN_E_STATE_MISMATCH, 0), {ALT_Z(shape.dv, DV - 1)}},
    {"state with another head count", LV(ATTN_E_STATE_MISMATCH, 0), {ALT_Z(shape.h_k, 1), ALT_Z(shape.h_v, 1)}},
    {"state with other value heads (L 4)", LV(ATTN_E_STATE_MISMATCH, 0), {ALT_Z(shape.h_v, HQ)}},
    {"state with another feature size", LV(ATTN_E_STATE_MISMATCH, 0), {ALT_Z(shape.d, D + 1)}},
    {"state with another feature map", LV(ATTN_E_STATE_MISMATCH, 0), {ALT_I(feature_map, ATTN_FEATURE_IDENTITY)}},
    {"state with another normalize mode", LV(ATTN_E_STATE_MISMATCH, 0), {ALT_I(normalize, 0)}},
    {"state passed to bidirectional", LV(ATTN_E_BAD_ARGUMENT, 0), {MASK(U, U, 0)}},
    {"state data inside o", LV(ATTN_E_ALIASING, 0), {ST_PTR(OB_O, 2)}},
    {"state data is k", LV(ATTN_E_ALIASING, 0), {ST_PTR(OB_K, 0)}},
    {"state data inside the workspace",
     LV(ATTN_E_ALIASING, 0),
     {ST_PTR(OB_WS, 8), TU_ADD(OB_ARG, lv_args, ws_size, 4096)}},
    /* the exponential maps (rows with .xmap: the valid call uses that map, and its state) */
    {"exp un-normalised", LVX(ATTN_E_BAD_NORMALIZATION, 1, EXPM), {D_I(normalize, 0), NOSTATE}},
    {"favor un-normalised", LVX(ATTN_E_BAD_NORMALIZATION, 1, FAV), {D_I(normalize, 0), NOSTATE}},
    {"dsoftmax un-normalised", LVX(ATTN_E_BAD_NORMALIZATION, 1, DSM), {D_I(normalize, 0), NOSTATE}},
    {"exp scale 0", LVX(ATTN_E_BAD_SCALE, 1, EXPM), {D_F(scale, 0.0f)}},
    {"exp scale -1", LVX(ATTN_E_BAD_SCALE, 1, EXPM), {D_F(scale, -1.0f)}},
    {"exp scale NaN", LVX(ATTN_E_BAD_SCALE, 1, EXPM), {D_F(scale, NAN)}},
    {"exp scale +inf", LVX(ATTN_E_BAD_SCALE, 1, EXPM), {D_F(scale, INFINITY)}},
    {"favor scale 0", LVX(ATTN_E_BAD_SCALE, 1, FAV), {D_F(scale, 0.0f)}},
    {"favor scale -1", LVX(ATTN_E_BAD_SCALE, 1, FAV), {D_F(scale, -1.0f)}},
    {"favor scale -inf", LVX(ATTN_E_BAD_SCALE, 1, FAV), {D_F(scale, -INFINITY)}},
    {"favor scale NaN", LVX(ATTN_E_BAD_SCALE, 1, FAV), {D_F(scale, NAN)}},
    {"dsoftmax scale 2", LVX(ATTN_E_BAD_SCALE, 1, DSM), {D_F(scale, 2.0f)}},
    {"dsoftmax scale 0.5", LVX(ATTN_E_BAD_SCALE, 1, DSM), {D_F(scale, 0.5f)}},
    {"dsoftmax scale 0", LVX(ATTN_E_BAD_SCALE, 1, DSM), {D_F(scale, 0.0f)}},
    {"dsoftmax scale NaN", LVX(ATTN_E_BAD_SCALE, 1, DSM), {D_F(scale, NAN)}},
    {"dsoftmax eps 1e-6", LVX(ATTN_E_BAD_EPS, 1, DSM), {D_F(eps, 1e-6f)}},
    {"dsoftmax eps NaN", LVX(ATTN_E_BAD_EPS, 1, DSM), {D_F(eps, NAN)}},
    {"dsoftmax eps negative", LVX(ATTN_E_BAD_EPS, 1, DSM), {D_F(eps, -1e-6f)}},
    {"exp eps negative", LVX(ATTN_E_BAD_EPS, 1, EXPM), {D_F(eps, -1e-6f)}},
    {"favor eps +inf", LVX(ATTN_E_BAD_EPS, 1, FAV), {D_F(eps, INFINITY)}},
    {"feature map 6 (after dsoftmax)", LVX(ATTN_E_BAD_FEATURE_MAP, 1, DSM), {D_I(feature_map, 6), NOSTATE}},
    {"exp m = 1", LVX(ATTN_E_BAD_FEATURE_MAP, 1, EXPM), {D_Z(m, 1)}},
    {"exp m = d + 1", LVX(ATTN_E_BAD_FEATURE_MAP, 1, EXPM), {D_Z(m, D + 1)}},
    {"exp m = 2d", LVX(ATTN_E_BAD_FEATURE_MAP, 1, EXPM), {D_Z(m, 2 * D)}},
    {"dsoftmax m = 1", LVX(ATTN_E_BAD_FEATURE_MAP, 1, DSM), {D_Z(m, 1)}},
    {"dsoftmax m = 2d", LVX(ATTN_E_BAD_FEATURE_MAP, 1, DSM), {D_Z(m, 2 * D)}},
    {"favor source 99", LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV), {D_I(favor_source, 99)}},
    {"favor source -1", LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV), {D_I(favor_source, -1)}},
    {"favor caller W NULL",
     LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV),
     {D_I(favor_source, ATTN_FAVOR_CALLER), TU_NUL(OB_D, attn_linear_desc, favor_w)}},
    {"favor caller W^T NULL",
     LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV),
     {D_I(favor_source, ATTN_FAVOR_CALLER_T), TU_NUL(OB_D, attn_linear_desc, favor_w)}},
    /* the W rows: a valid call with the caller's W (m = 4d by default: 4 * D * D floats) */
    {"favor caller W^T with a NaN",
     LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV),
     {W_CALLER(ATTN_FAVOR_CALLER_T), W(4 * D * D - 2, NAN)}},
    {"favor caller W with a NaN", LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV), {W(5, NAN)}, {W_CALLER(ATTN_FAVOR_CALLER)}},
    {"favor caller W with +inf",
     LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV),
     {W(4 * D * D / 2, INFINITY)},
     {W_CALLER(ATTN_FAVOR_CALLER)}},
    {"favor caller W, last element -inf",
     LVX(ATTN_E_BAD_FEATURE_MATRIX, 1, FAV),
     {W(4 * D * D - 1, -INFINITY)},
     {W_CALLER(ATTN_FAVOR_CALLER)}},
    /* the call: m 128; its state: made for m 64 */
    {"favor state m 64 used with m 128", LVX(ATTN_E_STATE_MISMATCH, 0, FAV), {ALT_Z(m, 64)}, {D_Z(m, 128)}},
    /* a state of the same shape (m = d) made for another exponential map */
    {"favor state (m = d) used with exp", LVX(ATTN_E_STATE_MISMATCH, 0, EXPM), {ALT_I(feature_map, FAV), ALT_Z(m, D)}},
    {"exp state used with dsoftmax", LVX(ATTN_E_STATE_MISMATCH, 0, DSM), {ALT_I(feature_map, EXPM), ALT_Z(m, D)}},
    {"exp: state with another normalize mode", LVX(ATTN_E_STATE_MISMATCH, 0, EXPM), {ALT_I(normalize, 0)}},
    {"favor: state with another head count",
     LVX(ATTN_E_STATE_MISMATCH, 0, FAV),
     {ALT_Z(shape.h_k, 1), ALT_Z(shape.h_v, 1)}},
    {"dsoftmax: o is q", LVX(ATTN_E_ALIASING, 0, DSM), {ARG_PTR(o, OB_Q, 0)}},
    {"favor: workspace one byte short",
     LVX(ATTN_E_WORKSPACE_TOO_SMALL, 0, FAV),
     {TU_ADD(OB_ARG, lv_args, ws_size, -1)}},
    {"favor mask: causal window (3, 0), a state", LVX(ATTN_E_BAD_ARGUMENT, 0, FAV), {MASK(3, 0, 0)}},
    {"favor mask: full chunk 16, a state", LVX(ATTN_E_BAD_ARGUMENT, 0, FAV), {MASK(U, U, 16)}},
    {"exp mask: right 5, a state", LVX(ATTN_E_BAD_ARGUMENT, 0, EXPM), {MASK(U, 5, 0)}},
};
#define LV_NCASES (sizeof lv_cases / sizeof lv_cases[0])

START_TEST(linear_rejects_bad_input) {
  const lv_case *c = &lv_cases[_i];
  tu_rng rng = tu_rng_of(300 + (uint64_t)_i);
  /* inputs big enough that an aliased output fits inside them; v has room for h_v up to HQ */
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, 2 * NQ * HQ, 2 * NKV * HQ, HQ, HKV, HQ, D, DV);
  attn_linear_desc d;
  const attn_feature_map base_map = c->xmap ? (attn_feature_map)c->xmap : ELU;
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, base_map), ATTN_OK);
  float wbuf[8 * D * D]; /* the caller's W of the W rows */
  for (size_t e = 0; e < sizeof wbuf / sizeof wbuf[0]; ++e) wbuf[e] = tu_rng_range(&rng, -1.0f, 1.0f);
  void *obj[OB_N] = {[OB_D] = &d, [OB_W] = wbuf};
  tu_edits_apply(c->pre, 2, obj, OB_N); /* the valid call */
  lu_bad_call b;
  lu_bad_call_make(&b, &d, &rng, NQ, HQ, DV);
  lv_args a = {&d, x.q.data, x.k.data, x.v.data, b.o.data, &b.st.s, b.ws, b.need};
  attn_linear_desc ad = d;
  obj[OB_ARG] = &a;
  obj[OB_STATE] = &b.st.s;
  obj[OB_ALT] = &ad;
  obj[OB_Q] = x.q.data;
  obj[OB_K] = x.k.data;
  obj[OB_V] = x.v.data;
  obj[OB_O] = b.o.data;
  obj[OB_WS] = b.ws;
  tu_edits_apply(c->edit, TU_EDITS, obj, OB_N);
  if (tu_edits_touch(c->edit, TU_EDITS, OB_ALT)) { /* a state of another shape or mode, from a valid descriptor */
    attn_linear_desc fresh;
    ck_assert_int_eq(attn_linear_desc_init(&fresh, NQ, NKV, HQ, HKV, D, DV, ad.feature_map), ATTN_OK);
    const attn_shape *as = &ad.shape;
    ck_assert_int_eq(attn_shape_init(&fresh.shape, NQ, NKV, HQ, as->h_k, as->h_v, as->d, as->dv), ATTN_OK);
    fresh.normalize = ad.normalize;
    fresh.m = ad.m;
    if (!ad.normalize && lu_xmap(ad.feature_map)) fresh.feature_map = ELU; /* a valid un-normalised state */
    lu_state_make_filled(&b.alt, &fresh, &rng);
    a.s = &b.alt.s;
  }
  lu_bad_call_take(&b, a.s); /* the state that goes in (struct and data) */
  ck_assert_int_eq(attn_linear(a.d, a.q, a.k, a.v, a.o, a.s, a.ws, a.ws_size), c->expect);
  if (c->desc_level) lu_assert_queries(&d, c->expect);
  lu_bad_call_finish(&b, &x);
  tu_qkv_free(&x);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"state", linear_state_layout, 12}, {"state", state_init_contract, 1}, {"state", state_reset_contract, 1},
    {"state", state_copy_contract, 1}, {"state", state_aligned_contract, 1},
    {"state", state_aligned_same_bits, (int)(sizeof AL_CASES / sizeof AL_CASES[0])},
    {"state", state_aligned_flash_same_bits, 1},
  {"api", linear_desc_init_defaults, 1}, {"api", linear_feature_size_is_d, 1},
    {"api", linear_size_queries_null_pointers, 1}, {"api", linear_chunk_size_contract, 1},
    {"api", linear_concurrent_calls_match_serial, 1},
  {"bad_input", linear_rejects_bad_input, (int)LV_NCASES})
/* clang-format on */
