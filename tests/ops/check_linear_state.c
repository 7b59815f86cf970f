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
 * until then only its range is checked). */
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
#define HUGE_N (SIZE_MAX / 2)

typedef enum lv_kind {
  LV_DESC_NULL,
  LV_Q_NULL,
  LV_K_NULL,
  LV_V_NULL,
  LV_O_NULL,
  LV_WS_NULL,
  LV_STATE_DATA_NULL,
  LV_NQ_0,
  LV_NKV_0,
  LV_HQ_0,
  LV_HK_0,
  LV_HV_0,
  LV_D_0,
  LV_DV_0,
  LV_NQ_HUGE,
  LV_NKV_HUGE,
  LV_KROW_HUGE,
  LV_QROW_SMALL,
  LV_VHEAD_SMALL,
  LV_O_SELF_OVERLAP,
  LV_HEADS_3_2,
  LV_HV_3,
  LV_HK_3,
  LV_EPS_NAN,
  LV_EPS_NEG,
  LV_EPS_INF,
  LV_SCALE_NAN,
  LV_SCALE_INF,
  LV_SCALE_NINF,
  LV_FM_COUNT,
  LV_FM_NEG,
  LV_FM_99,
  LV_M_D_PLUS_1,
  LV_M_1,
  LV_MASK_WINDOW,
  LV_MASK_RIGHT,
  LV_MASK_DIAGONAL,
  LV_MASK_CHUNK_CAUSAL,
  LV_MASK_CHUNK_FULL,
  LV_NORM_2,
  LV_NORM_NEG,
  LV_CHUNK_TOO_BIG,
  LV_WS_SMALL,
  LV_O_IS_Q,
  LV_O_IN_K,
  LV_O_IS_V,
  LV_STATE_DV,
  LV_STATE_HEADS,
  LV_STATE_HV,
  LV_STATE_D,
  LV_STATE_MAP,
  LV_STATE_NORM,
  LV_STATE_BIDIR,
  LV_STATE_IN_O,
  LV_STATE_IS_K,
  LV_STATE_IN_WS,
  /* the exponential maps (rows with .xmap: the valid call uses that map, and its state) */
  LV_UNNORM,
  LV_SCALE_0,
  LV_SCALE_NEG,
  LV_SCALE_2,
  LV_SCALE_HALF,
  LV_EPS_1E6,
  LV_FM_6,
  LV_M_2D,
  LV_FAVOR_SRC_99,
  LV_FAVOR_SRC_NEG,
  LV_FAVOR_W_NULL,
  LV_FAVOR_WT_NULL,
  LV_FAVOR_WT_NAN,
  LV_FAVOR_W_NAN,
  LV_FAVOR_W_INF,
  LV_FAVOR_W_NINF_LAST,
  LV_STATE_FAVOR_M,
  LV_STATE_MAP_EXP
} lv_kind;

typedef struct lv_case {
  const char *name;
  lv_kind kind;
  attn_status expect;
  int desc_level; /* workspace_size, state_size, feature_size and chunk_size must answer the same */
  int xmap;       /* the map of the valid call (0: elu1) */
} lv_case;

#define LV(k, s, lvl)       .kind = (k), .expect = (s), .desc_level = (lvl)
#define LVX(k, s, lvl, map) .kind = (k), .expect = (s), .desc_level = (lvl), .xmap = (map)
static const lv_case lv_cases[] = {
    {.name = "desc NULL", LV(LV_DESC_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "q NULL", LV(LV_Q_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "k NULL", LV(LV_K_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "v NULL", LV(LV_V_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "o NULL", LV(LV_O_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "workspace NULL", LV(LV_WS_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "state data NULL", LV(LV_STATE_DATA_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "n_q 0", LV(LV_NQ_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "n_kv 0", LV(LV_NKV_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "h_q 0", LV(LV_HQ_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "h_k 0", LV(LV_HK_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "h_v 0", LV(LV_HV_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "d 0", LV(LV_D_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "dv 0", LV(LV_DV_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "n_q SIZE_MAX/2", LV(LV_NQ_HUGE, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "n_kv SIZE_MAX/2", LV(LV_NKV_HUGE, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "k row stride huge", LV(LV_KROW_HUGE, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "q row stride < d", LV(LV_QROW_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "v head stride < dv", LV(LV_VHEAD_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "o layout overlaps itself", LV(LV_O_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 1)},
    {.name = "h_q 3, h_k = h_v 2", LV(LV_HEADS_3_2, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_v 3 does not divide H 4", LV(LV_HV_3, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_k 3 does not divide H 4", LV(LV_HK_3, ATTN_E_BAD_HEADS, 1)},
    {.name = "eps NaN", LV(LV_EPS_NAN, ATTN_E_BAD_EPS, 1)},
    {.name = "eps negative", LV(LV_EPS_NEG, ATTN_E_BAD_EPS, 1)},
    {.name = "eps +inf", LV(LV_EPS_INF, ATTN_E_BAD_EPS, 1)},
    {.name = "scale NaN", LV(LV_SCALE_NAN, ATTN_E_BAD_SCALE, 1)},
    {.name = "scale +inf", LV(LV_SCALE_INF, ATTN_E_BAD_SCALE, 1)},
    {.name = "scale -inf", LV(LV_SCALE_NINF, ATTN_E_BAD_SCALE, 1)},
    {.name = "feature map COUNT", LV(LV_FM_COUNT, ATTN_E_BAD_FEATURE_MAP, 1)},
    {.name = "feature map -1", LV(LV_FM_NEG, ATTN_E_BAD_FEATURE_MAP, 1)},
    {.name = "feature map 99", LV(LV_FM_99, ATTN_E_BAD_FEATURE_MAP, 1)},
    {.name = "m = d + 1", LV(LV_M_D_PLUS_1, ATTN_E_BAD_FEATURE_MAP, 1)},
    {.name = "m = 1 < d", LV(LV_M_1, ATTN_E_BAD_FEATURE_MAP, 1)},
    /* masks other than full and causal, with the call's state: windowed linear attention keeps
     * none, for every map (attn.h, since 0.4.0) */
    {.name = "elu1 mask: causal window (3, 0), a state", LV(LV_MASK_WINDOW, ATTN_E_BAD_ARGUMENT, 0)},
    {.name = "exp mask: causal window (3, 0), a state", LVX(LV_MASK_WINDOW, ATTN_E_BAD_ARGUMENT, 0, EXPM)},
    {.name = "dsoftmax mask: right 5, a state", LVX(LV_MASK_RIGHT, ATTN_E_BAD_ARGUMENT, 0, DSM)},
    {.name = "favor mask: diagonal (0, 0), a state", LVX(LV_MASK_DIAGONAL, ATTN_E_BAD_ARGUMENT, 0, FAV)},
    {.name = "exp mask: causal chunk 16, a state", LVX(LV_MASK_CHUNK_CAUSAL, ATTN_E_BAD_ARGUMENT, 0, EXPM)},
    {.name = "dsoftmax mask: full chunk 16, a state", LVX(LV_MASK_CHUNK_FULL, ATTN_E_BAD_ARGUMENT, 0, DSM)},
    {.name = "normalize 2", LV(LV_NORM_2, ATTN_E_BAD_ARGUMENT, 1)},
    {.name = "normalize -1", LV(LV_NORM_NEG, ATTN_E_BAD_ARGUMENT, 1)},
    {.name = "chunk above ATTN_LINEAR_MAX_CHUNK", LV(LV_CHUNK_TOO_BIG, ATTN_E_BAD_ARGUMENT, 1)},
    {.name = "workspace one byte short", LV(LV_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0)},
    {.name = "o is q", LV(LV_O_IS_Q, ATTN_E_ALIASING, 0)},
    {.name = "o inside k", LV(LV_O_IN_K, ATTN_E_ALIASING, 0)},
    {.name = "o is v", LV(LV_O_IS_V, ATTN_E_ALIASING, 0)},
    {.name = "state with another dv", LV(LV_STATE_DV, ATTN_E_STATE_MISMATCH, 0)},
    {.name = "state with another head count", LV(LV_STATE_HEADS, ATTN_E_STATE_MISMATCH, 0)},
    {.name = "state with other value heads (L 4)", LV(LV_STATE_HV, ATTN_E_STATE_MISMATCH, 0)},
    {.name = "state with another feature size", LV(LV_STATE_D, ATTN_E_STATE_MISMATCH, 0)},
    {.name = "state with another feature map", LV(LV_STATE_MAP, ATTN_E_STATE_MISMATCH, 0)},
    {.name = "state with another normalize mode", LV(LV_STATE_NORM, ATTN_E_STATE_MISMATCH, 0)},
    {.name = "state passed to bidirectional", LV(LV_STATE_BIDIR, ATTN_E_BAD_ARGUMENT, 0)},
    {.name = "state data inside o", LV(LV_STATE_IN_O, ATTN_E_ALIASING, 0)},
    {.name = "state data is k", LV(LV_STATE_IS_K, ATTN_E_ALIASING, 0)},
    {.name = "state data inside the workspace", LV(LV_STATE_IN_WS, ATTN_E_ALIASING, 0)},
    /* the exponential maps */
    {.name = "exp un-normalised", LVX(LV_UNNORM, ATTN_E_BAD_NORMALIZATION, 1, EXPM)},
    {.name = "favor un-normalised", LVX(LV_UNNORM, ATTN_E_BAD_NORMALIZATION, 1, FAV)},
    {.name = "dsoftmax un-normalised", LVX(LV_UNNORM, ATTN_E_BAD_NORMALIZATION, 1, DSM)},
    {.name = "exp scale 0", LVX(LV_SCALE_0, ATTN_E_BAD_SCALE, 1, EXPM)},
    {.name = "exp scale -1", LVX(LV_SCALE_NEG, ATTN_E_BAD_SCALE, 1, EXPM)},
    {.name = "exp scale NaN", LVX(LV_SCALE_NAN, ATTN_E_BAD_SCALE, 1, EXPM)},
    {.name = "exp scale +inf", LVX(LV_SCALE_INF, ATTN_E_BAD_SCALE, 1, EXPM)},
    {.name = "favor scale 0", LVX(LV_SCALE_0, ATTN_E_BAD_SCALE, 1, FAV)},
    {.name = "favor scale -1", LVX(LV_SCALE_NEG, ATTN_E_BAD_SCALE, 1, FAV)},
    {.name = "favor scale -inf", LVX(LV_SCALE_NINF, ATTN_E_BAD_SCALE, 1, FAV)},
    {.name = "favor scale NaN", LVX(LV_SCALE_NAN, ATTN_E_BAD_SCALE, 1, FAV)},
    {.name = "dsoftmax scale 2", LVX(LV_SCALE_2, ATTN_E_BAD_SCALE, 1, DSM)},
    {.name = "dsoftmax scale 0.5", LVX(LV_SCALE_HALF, ATTN_E_BAD_SCALE, 1, DSM)},
    {.name = "dsoftmax scale 0", LVX(LV_SCALE_0, ATTN_E_BAD_SCALE, 1, DSM)},
    {.name = "dsoftmax scale NaN", LVX(LV_SCALE_NAN, ATTN_E_BAD_SCALE, 1, DSM)},
    {.name = "dsoftmax eps 1e-6", LVX(LV_EPS_1E6, ATTN_E_BAD_EPS, 1, DSM)},
    {.name = "dsoftmax eps NaN", LVX(LV_EPS_NAN, ATTN_E_BAD_EPS, 1, DSM)},
    {.name = "dsoftmax eps negative", LVX(LV_EPS_NEG, ATTN_E_BAD_EPS, 1, DSM)},
    {.name = "exp eps negative", LVX(LV_EPS_NEG, ATTN_E_BAD_EPS, 1, EXPM)},
    {.name = "favor eps +inf", LVX(LV_EPS_INF, ATTN_E_BAD_EPS, 1, FAV)},
    {.name = "feature map 6 (after dsoftmax)", LVX(LV_FM_6, ATTN_E_BAD_FEATURE_MAP, 1, DSM)},
    {.name = "exp m = 1", LVX(LV_M_1, ATTN_E_BAD_FEATURE_MAP, 1, EXPM)},
    {.name = "exp m = d + 1", LVX(LV_M_D_PLUS_1, ATTN_E_BAD_FEATURE_MAP, 1, EXPM)},
    {.name = "exp m = 2d", LVX(LV_M_2D, ATTN_E_BAD_FEATURE_MAP, 1, EXPM)},
    {.name = "dsoftmax m = 1", LVX(LV_M_1, ATTN_E_BAD_FEATURE_MAP, 1, DSM)},
    {.name = "dsoftmax m = 2d", LVX(LV_M_2D, ATTN_E_BAD_FEATURE_MAP, 1, DSM)},
    {.name = "favor source 99", LVX(LV_FAVOR_SRC_99, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor source -1", LVX(LV_FAVOR_SRC_NEG, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor caller W NULL", LVX(LV_FAVOR_W_NULL, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor caller W^T NULL", LVX(LV_FAVOR_WT_NULL, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor caller W^T with a NaN", LVX(LV_FAVOR_WT_NAN, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor caller W with a NaN", LVX(LV_FAVOR_W_NAN, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor caller W with +inf", LVX(LV_FAVOR_W_INF, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor caller W, last element -inf", LVX(LV_FAVOR_W_NINF_LAST, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV)},
    {.name = "favor state m 64 used with m 128", LVX(LV_STATE_FAVOR_M, ATTN_E_STATE_MISMATCH, 0, FAV)},
    {.name = "favor state (m = d) used with exp", LVX(LV_STATE_MAP_EXP, ATTN_E_STATE_MISMATCH, 0, EXPM)},
    {.name = "exp state used with dsoftmax", LVX(LV_STATE_MAP_EXP, ATTN_E_STATE_MISMATCH, 0, DSM)},
    {.name = "exp: state with another normalize mode", LVX(LV_STATE_NORM, ATTN_E_STATE_MISMATCH, 0, EXPM)},
    {.name = "favor: state with another head count", LVX(LV_STATE_HEADS, ATTN_E_STATE_MISMATCH, 0, FAV)},
    {.name = "dsoftmax: o is q", LVX(LV_O_IS_Q, ATTN_E_ALIASING, 0, DSM)},
    {.name = "favor: workspace one byte short", LVX(LV_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0, FAV)},
    {.name = "favor mask: causal window (3, 0), a state", LVX(LV_MASK_WINDOW, ATTN_E_BAD_ARGUMENT, 0, FAV)},
    {.name = "favor mask: full chunk 16, a state", LVX(LV_MASK_CHUNK_FULL, ATTN_E_BAD_ARGUMENT, 0, FAV)},
    {.name = "exp mask: right 5, a state", LVX(LV_MASK_RIGHT, ATTN_E_BAD_ARGUMENT, 0, EXPM)},
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
  /* a valid FAVOR+ call with the caller's W (the W rows change it); seed rows change the source */
  float wbuf[8 * D * D];
  for (size_t e = 0; e < sizeof wbuf / sizeof wbuf[0]; ++e) wbuf[e] = tu_rng_range(&rng, -1.0f, 1.0f);
  const int w_row = c->kind == LV_FAVOR_W_NAN || c->kind == LV_FAVOR_W_INF || c->kind == LV_FAVOR_W_NINF_LAST;
  if (w_row) {
    d.favor_source = ATTN_FAVOR_CALLER;
    d.favor_w = wbuf; /* m = 4d by default: 4 * D * D floats */
  }
  if (c->kind == LV_STATE_FAVOR_M) d.m = 128;
  lu_state st, alt;
  lu_state_make_filled(&st, &d, &rng);
  size_t need = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &need), ATTN_OK);
  tu_tensor o;
  tu_tensor_alloc(&o, T, NQ, HQ, DV, 1);
  void *ws = tu_alloc(need + 4096, 0);
  const float *q = x.q.data, *k = x.k.data, *v = x.v.data;
  float *op = o.data;
  size_t ws_size = need;
  const attn_linear_desc *dp = &d;
  attn_linear_state *sp = &st.s;
  attn_shape *s = &d.shape;
  int have_alt = 0;
  attn_linear_desc ad = d;
  switch (c->kind) {
    case LV_DESC_NULL:
      dp = NULL;
      break;
    case LV_Q_NULL:
      q = NULL;
      break;
    case LV_K_NULL:
      k = NULL;
      break;
    case LV_V_NULL:
      v = NULL;
      break;
    case LV_O_NULL:
      op = NULL;
      break;
    case LV_WS_NULL:
      break; /* pointer set below */
    case LV_STATE_DATA_NULL:
      st.s.data = NULL;
      break;
    case LV_NQ_0:
      s->n_q = 0;
      break;
    case LV_NKV_0:
      s->n_kv = 0;
      break;
    case LV_HQ_0:
      s->h_q = 0;
      break;
    case LV_HK_0:
      s->h_k = 0;
      sp = NULL;
      break;
    case LV_HV_0:
      s->h_v = 0;
      sp = NULL;
      break;
    case LV_D_0:
      s->d = 0;
      sp = NULL;
      break;
    case LV_DV_0:
      s->dv = 0;
      sp = NULL;
      break;
    case LV_NQ_HUGE:
      s->n_q = HUGE_N;
      break;
    case LV_NKV_HUGE:
      s->n_kv = HUGE_N;
      break;
    case LV_KROW_HUGE:
      s->k.row_stride = SIZE_MAX / 4;
      break;
    case LV_QROW_SMALL:
      s->q.row_stride = D - 1;
      break;
    case LV_VHEAD_SMALL:
      s->v.head_stride = DV - 1;
      break;
    case LV_O_SELF_OVERLAP:
      s->o.row_stride = DV;
      s->o.head_stride = DV;
      break;
    case LV_HEADS_3_2:
      s->h_q = 3;
      break;
    case LV_HV_3:
      s->h_v = 3;
      break;
    case LV_HK_3:
      s->h_k = 3;
      break;
    case LV_EPS_NAN:
      d.eps = NAN;
      break;
    case LV_EPS_NEG:
      d.eps = -1e-6f;
      break;
    case LV_EPS_INF:
      d.eps = INFINITY;
      break;
    case LV_SCALE_NAN:
      d.scale = NAN;
      break;
    case LV_SCALE_INF:
      d.scale = INFINITY;
      break;
    case LV_SCALE_NINF:
      d.scale = -INFINITY;
      break;
    case LV_FM_COUNT:
      d.feature_map = ATTN_FEATURE_COUNT;
      sp = NULL;
      break;
    case LV_FM_NEG:
      d.feature_map = (attn_feature_map)-1;
      sp = NULL;
      break;
    case LV_FM_99:
      d.feature_map = (attn_feature_map)99;
      sp = NULL;
      break;
    case LV_M_D_PLUS_1:
      d.m = D + 1;
      break;
    case LV_M_1:
      d.m = 1;
      break;
    case LV_MASK_WINDOW:
      d.mask = attn_mask_window(3, 0);
      break;
    case LV_MASK_RIGHT:
      d.mask = attn_mask_window(ATTN_UNBOUNDED, 5);
      break;
    case LV_MASK_DIAGONAL:
      d.mask = attn_mask_window(0, 0);
      break;
    case LV_MASK_CHUNK_CAUSAL:
      d.mask.chunk = 16;
      break;
    case LV_MASK_CHUNK_FULL:
      d.mask = attn_mask_full();
      d.mask.chunk = 16;
      break;
    case LV_NORM_2:
      d.normalize = 2;
      sp = NULL;
      break;
    case LV_NORM_NEG:
      d.normalize = -1;
      sp = NULL;
      break;
    case LV_CHUNK_TOO_BIG:
      d.chunk = ATTN_LINEAR_MAX_CHUNK + 1;
      break;
    case LV_WS_SMALL:
      ck_assert_uint_gt(need, 0);
      ws_size = need - 1;
      break;
    case LV_O_IS_Q:
      op = x.q.data;
      break;
    case LV_O_IN_K:
      op = x.k.data + 5;
      break;
    case LV_O_IS_V:
      op = x.v.data;
      break;
    case LV_STATE_DV:
      ad.shape.dv = DV - 1;
      have_alt = 1;
      break;
    case LV_STATE_HEADS:
      ad.shape.h_k = ad.shape.h_v = 1;
      have_alt = 1;
      break;
    case LV_STATE_HV:
      ad.shape.h_v = HQ;
      have_alt = 1;
      break;
    case LV_STATE_D:
      ad.shape.d = D + 1;
      have_alt = 1;
      break;
    case LV_STATE_MAP:
      ad.feature_map = ATTN_FEATURE_IDENTITY;
      have_alt = 1;
      break;
    case LV_STATE_NORM:
      ad.normalize = 0;
      have_alt = 1;
      break;
    case LV_STATE_BIDIR:
      d.mask = attn_mask_full();
      break;
    case LV_STATE_IN_O:
      st.s.data = o.data + 2;
      break;
    case LV_STATE_IS_K:
      st.s.data = x.k.data;
      break;
    case LV_STATE_IN_WS:
      st.s.data = (float *)ws + 8;
      ws_size = need + 4096;
      break;
    case LV_UNNORM:
      d.normalize = 0;
      sp = NULL;
      break;
    case LV_SCALE_0:
      d.scale = 0.0f;
      break;
    case LV_SCALE_NEG:
      d.scale = -1.0f;
      break;
    case LV_SCALE_2:
      d.scale = 2.0f;
      break;
    case LV_SCALE_HALF:
      d.scale = 0.5f;
      break;
    case LV_EPS_1E6:
      d.eps = 1e-6f;
      break;
    case LV_FM_6:
      d.feature_map = (attn_feature_map)6;
      sp = NULL;
      break;
    case LV_M_2D:
      d.m = 2 * D;
      break;
    case LV_FAVOR_SRC_99:
      d.favor_source = (attn_favor_source)99;
      break;
    case LV_FAVOR_SRC_NEG:
      d.favor_source = (attn_favor_source)-1;
      break;
    case LV_FAVOR_W_NULL:
      d.favor_source = ATTN_FAVOR_CALLER;
      d.favor_w = NULL;
      break;
    case LV_FAVOR_W_NAN:
      wbuf[5] = NAN;
      break;
    case LV_FAVOR_WT_NULL:
      d.favor_source = ATTN_FAVOR_CALLER_T;
      d.favor_w = NULL;
      break;
    case LV_FAVOR_WT_NAN:
      d.favor_source = ATTN_FAVOR_CALLER_T;
      d.favor_w = wbuf;
      wbuf[4 * D * D - 2] = NAN;
      break;
    case LV_FAVOR_W_INF:
      wbuf[4 * D * D / 2] = INFINITY;
      break;
    case LV_FAVOR_W_NINF_LAST:
      wbuf[4 * D * D - 1] = -INFINITY;
      break;
    case LV_STATE_FAVOR_M: /* the call: m 128; its state: made for m 64 */
      ad.m = 64;
      have_alt = 1;
      break;
    case LV_STATE_MAP_EXP: /* a state of the same shape (m = d) made for another exponential map */
      ad.feature_map = base_map == EXPM ? FAV : EXPM;
      ad.m = D;
      have_alt = 1;
      break;
  }
  if (have_alt) { /* a state of another shape or mode, from a valid descriptor */
    attn_linear_desc fresh;
    ck_assert_int_eq(attn_linear_desc_init(&fresh, NQ, NKV, HQ, HKV, D, DV, ad.feature_map), ATTN_OK);
    const attn_shape *as = &ad.shape;
    ck_assert_int_eq(attn_shape_init(&fresh.shape, NQ, NKV, HQ, as->h_k, as->h_v, as->d, as->dv), ATTN_OK);
    fresh.normalize = ad.normalize;
    fresh.m = ad.m;
    if (!ad.normalize && lu_xmap(ad.feature_map)) fresh.feature_map = ELU; /* a valid un-normalised state */
    lu_state_make_filled(&alt, &fresh, &rng);
    sp = &alt.s;
  }
  lu_rejected untouched; /* the state that goes in (struct and data) */
  lu_rejected_take(&untouched, sp, have_alt ? alt.mem : st.mem, have_alt ? alt.bytes : st.bytes);
  ck_assert_int_eq(attn_linear(dp, q, k, v, op, sp, c->kind == LV_WS_NULL ? NULL : ws, ws_size), c->expect);
  if (c->desc_level) lu_assert_queries(&d, c->expect);
  lu_rejected_check(&untouched, &o, ws, &x);
  if (have_alt) tu_free(alt.mem);
  tu_free(st.mem);
  tu_free(ws);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"state", linear_state_layout, 12}, {"state", state_init_contract, 1}, {"state", state_reset_contract, 1},
    {"state", state_copy_contract, 1},
  {"api", linear_desc_init_defaults, 1}, {"api", linear_feature_size_is_d, 1},
    {"api", linear_size_queries_null_pointers, 1}, {"api", linear_chunk_size_contract, 1},
    {"api", linear_concurrent_calls_match_serial, 1},
  {"bad_input", linear_rejects_bad_input, (int)LV_NCASES})
/* clang-format on */
