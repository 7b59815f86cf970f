/*
 * Selective attention (attn_selective), on the ISA path named by ATTN_ISA, against the float64
 * reference (tests/ref/ref_selective.h). TCases: "reference" (the shape table: o, lse and the
 * returned f; a hand-computed case), "nonfinite", "properties" (F's structure through f, head
 * isolation of the selection, prefill + chunk + decode = one call), "api" and "bad_input" (the
 * exact status of every bad argument, outputs untouched). The selective KV cache
 * (attn_selcache_*): check_selective_cache.c; the helpers of both: tests/common/selective_util.h.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "selective_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

#define HEADS(q, kv, s) .h_q = (q), .h_kv = (kv), .h_sel = (s)

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
typedef struct sel_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv, h_sel;
  tu_layout_kind layout;
  float scale;
  int set_scale;
  tu_data data;
  int no_lse;
  int f0_random; /* n_q < n_kv: the carried column sums drawn in [0, 2) (BOS 0), not the prefix's */
} sel_case;

/* Query blocks are 48 rows and key blocks 96 on SIMD paths, 32 / 64 on scalar: sequence lengths
 * 1, 7, 47, 48, 49, 64, 96, 97, 130 sit on and around them. n_q < n_kv continues a prefix whose
 * column sums come from the reference (rounded to float, as the library would carry them). */
static const sel_case sel_cases[] = {
    {.name = "n1_d8", SIZES(1, 1, 8, 8), HEADS(1, 1, 0)},
    {.name = "n2_d4_gqa", SIZES(2, 2, 4, 4), HEADS(2, 1, 1)},
    {.name = "n7_d7_gqa", SIZES(7, 7, 7, 7), HEADS(4, 2, 3)},
    {.name = "n31_d16", SIZES(31, 31, 16, 16), HEADS(1, 1, 0)},
    {.name = "n47_d16", SIZES(47, 47, 16, 16), HEADS(2, 1, 1)},
    {.name = "n48_d64", SIZES(48, 48, 64, 64), HEADS(2, 2, 0)},
    {.name = "n49_d8_gqa", SIZES(49, 49, 8, 8), HEADS(4, 2, 2)},
    {.name = "n64_d128", SIZES(64, 64, 128, 128), HEADS(1, 1, 0)},
    {.name = "n96_d9_mha", SIZES(96, 96, 9, 9), HEADS(3, 3, 2)},
    {.name = "n97_d32_gqa", SIZES(97, 97, 32, 32), HEADS(6, 2, 5)},
    {.name = "n130_d16", SIZES(130, 130, 16, 16), HEADS(2, 1, 1)},
    {.name = "n130_d65", SIZES(130, 130, 65, 65), HEADS(1, 1, 0)},
    {.name = "d1", SIZES(50, 50, 1, 1), HEADS(2, 2, 1)},
    {.name = "d8_dv13_mqa", SIZES(50, 50, 8, 13), HEADS(4, 1, 3)},
    {.name = "d64_dv7", SIZES(33, 33, 64, 7), HEADS(2, 1, 0)},
    /* data: strong selection (every score positive: F grows linearly), large and wide scores */
    {.name = "positive_n97", SIZES(97, 97, 16, 16), HEADS(2, 1, 0), .data = POS},
    {.name = "positive_n130_gqa", SIZES(130, 130, 8, 8), HEADS(4, 2, 1), .data = POS},
    {.name = "large_n49_scale1", SIZES(49, 49, 8, 8), HEADS(1, 1, 0), SCALE(1.0f), .data = LRG},
    {.name = "wide_n40", SIZES(40, 40, 8, 8), HEADS(2, 1, 1), .data = WIDE},
    {.name = "scale_-0.5", SIZES(60, 60, 16, 16), HEADS(2, 1, 0), SCALE(-0.5f)},
    {.name = "scale_0", SIZES(30, 30, 8, 8), HEADS(2, 1, 1), SCALE(0.0f)},
    {.name = "scale_3", SIZES(40, 40, 16, 16), HEADS(1, 1, 0), SCALE(3.0f)},
    /* chunked prefill (n_q < n_kv) with the carried state, decode */
    {.name = "chunk_20_of_100", SIZES(20, 100, 32, 32), HEADS(2, 1, 1)},
    {.name = "chunk_49_of_145", SIZES(49, 145, 8, 8), HEADS(1, 1, 0)},
    {.name = "chunk_48_of_97_positive", SIZES(48, 97, 16, 16), HEADS(4, 2, 3), .data = POS},
    {.name = "decode_1_of_97_gqa", SIZES(1, 97, 64, 64), HEADS(4, 2, 3)},
    {.name = "decode_1_of_2", SIZES(1, 2, 16, 16), HEADS(2, 1, 0)},
    {.name = "decode_1_of_1", SIZES(1, 1, 16, 16), HEADS(2, 1, 1)},
    /* n_q > n_kv: the first rows see no key (zeros, LSE -inf) */
    {.name = "nq40_nkv10", SIZES(40, 10, 16, 16), HEADS(2, 1, 1)},
    /* layouts */
    {.name = "head_major", SIZES(37, 37, 16, 16), HEADS(2, 2, 1), .layout = H},
    {.name = "padded_gqa", SIZES(49, 49, 13, 11), HEADS(4, 2, 2), .layout = P},
    {.name = "head_padded", SIZES(33, 33, 7, 9), HEADS(3, 1, 2), .layout = HP},
    {.name = "packed_gqa", SIZES(41, 41, 8, 8), HEADS(4, 2, 1), .layout = PK},
    {.name = "chunk_head_major", SIZES(30, 80, 8, 8), HEADS(2, 1, 0), .layout = H},
    /* lse = NULL */
    {.name = "no_lse", SIZES(47, 47, 8, 8), HEADS(2, 1, 1), .no_lse = 1},
    /* the keys of each query block in ranges (whole key blocks) folded in order: >= 256 keys each,
     * 2 ranges for the last blocks, 5 for a chunk; >= 2048 for calls of <= 4 tokens: 4 for a
     * decode call (the carried F drawn: the prefix's reference would cost 9000^2); d = 128 with 6
     * heads puts h_sel's key head in the second head group on the SIMD paths (5 + 1 heads with
     * 48-row blocks, 3 + 3 with 64), whose F the first group reads before the last one stores it */
    {.name = "ranges_n700_gqa", SIZES(700, 700, 16, 16), HEADS(4, 2, 3)},
    {.name = "ranges_chunk_64_of_1500", SIZES(64, 1500, 16, 16), HEADS(2, 1, 1)},
    {.name = "ranges_decode_1_of_9000_gqa", SIZES(1, 9000, 32, 32), HEADS(4, 2, 3), .f0_random = 1},
    {.name = "ranges_3_of_8300_f0_drawn", SIZES(3, 8300, 16, 16), HEADS(2, 2, 1), .f0_random = 1},
    {.name = "ranges_groups_n520_d128", SIZES(520, 520, 128, 128), HEADS(6, 6, 5)},
};
#define SEL_NCASES (sizeof sel_cases / sizeof sel_cases[0])
static size_t sel_sel[SEL_NCASES];

START_TEST(selective_matches_reference) {
  const size_t idx = sel_sel[_i];
  const sel_case *c = &sel_cases[idx];
  tu_rng rng = tu_rng_of(1000 + idx);
  /* chunked: inputs for every position, the call reads rows [start, n_kv) of q */
  const int chunked = c->n_q < c->n_kv;
  const size_t nq_all = chunked ? c->n_kv : c->n_q, start = chunked ? c->n_kv - c->n_q : 0;
  tu_qkv x = tu_qkv_of(c->layout, c->data, &rng, nq_all, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  attn_selective_desc d;
  sel_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  if (c->set_scale) d.scale = c->scale;
  /* the carried state of the prefix [0, start): its column sums, from the reference */
  float *f0 = NULL;
  if (chunked && c->f0_random) {
    f0 = malloc(sizeof(float) * start);
    ck_assert_ptr_nonnull(f0);
    for (size_t j = 0; j < start; ++j) f0[j] = j ? tu_rng_range(&rng, 0.0f, 2.0f) : 0.0f;
  } else if (chunked) {
    attn_selective_desc dp = d;
    dp.shape.n_q = dp.shape.n_kv = start;
    const tu_tensor qp = tu_rows_view(&x.q, 0, start), kp = tu_rows_view(&x.k, 0, start),
                    vp = tu_rows_view(&x.v, 0, start);
    sel_ref pre;
    sel_ref_compute(&dp, &qp, &kp, &vp, NULL, &pre);
    f0 = malloc(sizeof(float) * start);
    ck_assert_ptr_nonnull(f0);
    for (size_t j = 0; j < start; ++j) f0[j] = (float)pre.f[j];
    sel_ref_free(&pre);
  }
  const tu_tensor q = tu_rows_view(&x.q, start, c->n_q);
  const tu_layout_kind okind = c->layout == PK ? T : c->layout;
  sel_res res;
  sel_run(&d, &q, &x.k, &x.v, okind, !c->no_lse, f0, (idx % 2) * 4, &res);
  tu_qkv_assert_unchanged(&x);
  sel_ref ref;
  sel_ref_compute(&d, &q, &x.k, &x.v, f0, &ref);
  sel_compare(c->name, c->n_kv, c->d, &res.o, c->no_lse ? NULL : &res.lse, ref.o, ref.lse,
              sel_scales_at(&ref, 0, c->h_q, c->dv), 1.0);
  sel_compare_f(c->name, c->n_kv, c->d, res.f, c->n_kv, ref.f, ref.f, ref.fg, 1.0);
  /* F_p0 = 0 and the last key's column is empty: exactly 0 */
  ck_assert_msg(res.f[0] == 0.0f, "%s: f[0] = %g", c->name, (double)res.f[0]);
  ck_assert_msg(res.f[c->n_kv - 1] == 0.0f, "%s: f[last] = %g", c->name, (double)res.f[c->n_kv - 1]);
  sel_ref_free(&ref);
  sel_res_free(&res);
  free(f0);
  tu_qkv_free(&x);
}
END_TEST

/* A case computed by hand: one head, d = dv = 1, scale 1, q = 1 everywhere, keys {1, 2, 3, -1},
 * values {1, 2, 4, 8}. S_kj = relu(k_j) for 0 < j < k: S_21 = 2, S_31 = 2, S_32 = 3 (BOS never,
 * no token itself). F of query 3: {0, S_21 = 2, 0 (F_p,p-1), 0} -> logits {1, 0, 3, -1}; query 2:
 * F = 0 everywhere (F_21 sums over 1 < k < 2: nothing) -> logits {1, 2, 3}. Returned f = {0, 4, 3,
 * 0}: exact in float. Without the shift (F_pj including S_pj), without the BOS or the diagonal
 * rule, the logits of row 3 would differ by 2 or 3. */
START_TEST(selective_hand_computed) {
  static const float q[4] = {1, 1, 1, 1}, k[4] = {1, 2, 3, -1}, v[4] = {1, 2, 4, 8};
  attn_selective_desc d;
  sel_desc(&d, 4, 4, 1, 1, 1, 1, 0);
  d.scale = 1.0f;
  size_t ws = 0;
  ck_assert_int_eq(attn_selective_workspace_size(&d, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 0);
  float o[4], lse[4], f[4] = {NAN, NAN, NAN, NAN};
  ck_assert_int_eq(attn_selective(&d, q, k, v, o, lse, f, w, ws), ATTN_OK);
  tu_free(w);
  const double e = exp(1.0);
  const double x3[4] = {1, 0, 3, -1}, x2[3] = {1, 2, 3};
  double n3 = 0, l3 = 0, n2 = 0, l2 = 0;
  for (int j = 0; j < 4; ++j) {
    n3 += exp(x3[j]) * v[j];
    l3 += exp(x3[j]);
  }
  for (int j = 0; j < 3; ++j) {
    n2 += exp(x2[j]) * v[j];
    l2 += exp(x2[j]);
  }
  const double want_o[4] = {1.0, (1.0 * e + 2.0 * e * e) / (e + e * e), n2 / l2, n3 / l3};
  const double want_lse[4] = {1.0, log(e + e * e), log(l2), log(l3)};
  for (int i = 0; i < 4; ++i) {
    ck_assert_msg(fabs(o[i] - want_o[i]) <= 1e-6 * fabs(want_o[i]), "o[%d] = %.9g, want %.9g", i, (double)o[i],
                  want_o[i]);
    ck_assert_msg(fabs(lse[i] - want_lse[i]) <= 1e-6 * fabs(want_lse[i]) + 1e-6, "lse[%d] = %.9g, want %.9g", i,
                  (double)lse[i], want_lse[i]);
  }
  ck_assert_msg(f[0] == 0.0f && f[1] == 4.0f && f[2] == 3.0f && f[3] == 0.0f, "f = {%g, %g, %g, %g}, want {0, 4, 3, 0}",
                (double)f[0], (double)f[1], (double)f[2], (double)f[3]);
}
END_TEST

/* Non-finite inputs: softmax's policy (a row that uses a non-finite q_i or k_j is NaN, a
 * non-finite v_j makes o NaN), and through F: a NaN or -inf score of head h_sel reaches F as NaN,
 * so every later row that sees the selected keys is NaN; a +inf one is +inf in F (checked apart).
 * h_sel is the last head (the one tu_qkv_poison poisons) or 0. */
typedef struct nf_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, h_sel;
} nf_case;
static const nf_case nf_cases[] = {
    {"causal_130_gqa_hsel_last", 130, 130, 4, 2, 16, 3},
    {"causal_60_hsel_0", 60, 60, 2, 1, 8, 0},
    {"chunk_20_of_100_hsel_last", 20, 100, 2, 1, 16, 1},
    {"decode_1_of_50", 1, 50, 4, 2, 8, 3},
};
#define NF_NCASES (sizeof nf_cases / sizeof nf_cases[0])

START_TEST(selective_nonfinite_policy) {
  const nf_case *c = &nf_cases[_i];
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng = tu_rng_of(9000 + (uint64_t)_i);
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->d);
    char poison[64], what[128];
    tu_qkv_poison(&x, pc, 0, poison, sizeof poison);
    attn_selective_desc d;
    sel_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->d, c->h_sel);
    /* a chunk carries a finite state: zeros for the earlier keys (as if they selected nothing) */
    float *f0 = calloc(c->n_kv, sizeof(float));
    ck_assert_ptr_nonnull(f0);
    sel_res res;
    sel_run(&d, &x.q, &x.k, &x.v, T, 1, f0, 0, &res);
    tu_qkv_assert_unchanged(&x);
    sel_ref ref;
    sel_ref_compute(&d, &x.q, &x.k, &x.v, f0, &ref);
    /* an infinite selection (F = +inf for a later row: the reference gives the key weight 0,
     * attn.h's policy NaN) is stated apart by selective_infinite_selection_is_nan; an infinite k
     * selects +inf for some queries and NaN (-inf scores) for others, so look at F row by row */
    int inf_f = 0;
    for (size_t j = 0; j < c->n_kv; ++j) inf_f |= ref.f[j] == INFINITY;
    for (size_t e = 0; e < c->n_q * c->n_kv; ++e) inf_f |= ref.F[e] == INFINITY;
    if (inf_f) {
      sel_ref_free(&ref);
      sel_res_free(&res);
      free(f0);
      tu_qkv_free(&x);
      continue;
    }
    snprintf(what, sizeof what, "%s: %s", c->name, poison);
    sel_compare(what, c->n_kv, c->d, &res.o, &res.lse, ref.o, ref.lse, sel_scales_at(&ref, 0, c->h_q, c->d), 1.0);
    sel_compare_f(what, c->n_kv, c->d, res.f, c->n_kv, ref.f, ref.f, ref.fg, 1.0);
    sel_ref_free(&ref);
    sel_res_free(&res);
    free(f0);
    tu_qkv_free(&x);
  }
}
END_TEST

/* An infinite score of head h_sel: q_10 of h_sel is +inf (loop 0) or -inf (loop 1) and every key
 * of its key head positive, so the scores s_10,j are +inf or -inf for 0 < j < 10. attn.h's policy:
 * a non-finite score of h_sel reaches F (+inf: S = +inf, F = +inf; -inf, an infinite input like
 * any other, not relu's limit 0: S = NaN, F = NaN; f[1..9] as the reference), and a row whose
 * logit meets a non-finite F is NaN (as for any non-finite input it sees; the definition's limit
 * would give those keys weight 0). So: rows before 10 equal the reference, row 10 is NaN in head
 * h_sel only (its own q), and every head of every later row is NaN (each sees keys 1..9). */
START_TEST(selective_infinite_selection_is_nan) {
  enum { N = 40, HQ = 2, HKV = 2, DD = 8, HS = 1, PQ = 10 };
  tu_rng rng = tu_rng_of(9100);
  tu_qkv x = tu_qkv_of(T, TU_DATA_POSITIVE, &rng, N, N, HQ, HKV, HKV, DD, DD);
  for (size_t e = 0; e < DD; ++e) *tu_at(&x.q, PQ, HS, e) = _i ? -INFINITY : INFINITY;
  tu_qkv_snapshot(&x);
  attn_selective_desc d;
  sel_desc(&d, N, N, HQ, HKV, DD, DD, HS);
  sel_res res;
  sel_run(&d, &x.q, &x.k, &x.v, T, 1, NULL, 0, &res);
  sel_ref ref;
  sel_ref_compute(&d, &x.q, &x.k, &x.v, NULL, &ref);
  for (size_t j = 1; j < PQ; ++j) ck_assert(_i ? isnan(ref.f[j]) : ref.f[j] == INFINITY);
  sel_compare_f("f after an infinite selection", N, DD, res.f, N, ref.f, ref.f, ref.fg, 1.0);
  const tu_tensor before = tu_rows_view(&res.o, 0, PQ), lb = tu_rows_view(&res.lse, 0, PQ);
  sel_compare("rows before the infinite selection", N, DD, &before, &lb, ref.o, ref.lse, sel_scales_at(&ref, 0, HQ, DD),
              1.0);
  for (size_t i = PQ; i < N; ++i)
    for (size_t h = 0; h < HQ; ++h)
      for (size_t c = 0; c < DD; ++c) {
        const float got = *tu_at(&res.o, i, h, c);
        if (i == PQ && h != HS) continue; /* row 10's other head: finite, F before it is finite */
        ck_assert_msg(isnan(got), "row %zu head %zu col %zu: %g, want NaN", i, h, c, (double)got);
      }
  for (size_t h = 0; h < HQ; ++h)
    for (size_t c = 0; h != HS && c < DD; ++c) ck_assert(isfinite(*tu_at(&res.o, PQ, h, c)));
  sel_ref_free(&ref);
  sel_res_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* 0.6.0's audit case, in one prefill call and in five decode calls carrying f: 5 tokens, d = 1,
 * every k 1, q = {1, 1, 1, x, 1}. x = +inf, NaN and -inf all make row 3 (its own q) and row 4 (F
 * of keys 1 and 2 non-finite) NaN; rows 0-2 stay finite. Before 0.6.1 x = -inf selected nothing
 * (relu's limit), and row 4 was finite. */
START_TEST(selective_neg_inf_selection_reaches_f) {
  enum { N = 5 };
  static const float xs[3] = {INFINITY, NAN, -INFINITY};
  for (int xi = 0; xi < 3; ++xi)
    for (int decode = 0; decode < 2; ++decode) {
      float q[N] = {1, 1, 1, xs[xi], 1}, k[N] = {1, 1, 1, 1, 1}, v[N] = {0.5f, -1, 2, 3, -4}, o[N], lse[N], f[N] = {0};
      for (size_t i = decode ? 0 : N - 1; i < N; ++i) {
        attn_selective_desc d;
        const size_t nq = decode ? 1 : N, nkv = decode ? i + 1 : N;
        sel_desc(&d, nq, nkv, 1, 1, 1, 1, 0);
        size_t ws;
        ck_assert_int_eq(attn_selective_workspace_size(&d, &ws), ATTN_OK);
        void *w = malloc(ws);
        ck_assert_int_eq(
            attn_selective(&d, decode ? q + i : q, k, v, decode ? o + i : o, decode ? lse + i : lse, f, w, ws),
            ATTN_OK);
        free(w);
      }
      for (size_t i = 0; i < N; ++i)
        ck_assert_msg(isnan(o[i]) == (i >= 3), "x %g, %s: row %zu o %g", (double)xs[xi], decode ? "decode" : "prefill",
                      i, (double)o[i]);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties of F (through f), the selection's heads, pieces vs one call                       */
/* ------------------------------------------------------------------------------------------ */
/* The reference's own F has the structure of the definition (F_p0 = 0, F_pp = 0, F_p,p-1 = 0,
 * columns non-decreasing), and the library's decode calls, carrying f, show it where f can:
 * before the call at p, f[p-1] is exactly 0 (F_p,p-1); after it f[0] and f[p] are exactly 0 and
 * no column decreased; every output row matches the reference of the whole sequence, and the
 * final f its column sums. */
START_TEST(selective_f_structure_through_decode) {
  enum { N = 60, HQ = 4, HKV = 2, DD = 16, HS = 2 };
  tu_rng rng = tu_rng_of(2100);
  tu_qkv x;
  attn_selective_desc dfull;
  sel_inputs(&x, &dfull, &rng, TU_DATA_UNIFORM, N, HQ, HKV, DD, DD, HS);
  sel_ref ref;
  sel_ref_compute(&dfull, &x.q, &x.k, &x.v, NULL, &ref);
  for (size_t i = 0; i < N; ++i) {
    ck_assert(ref.F[i * N + 0] == 0.0 && ref.F[i * N + i] == 0.0);
    if (i > 0) ck_assert(ref.F[i * N + i - 1] == 0.0);
    for (size_t j = 0; i > 0 && j < N; ++j) ck_assert(ref.F[i * N + j] >= ref.F[(i - 1) * N + j] || j > i);
  }
  float *f = malloc(sizeof(float) * N);
  ck_assert_ptr_nonnull(f);
  for (size_t t = 0; t < N; ++t) {
    if (t > 0) ck_assert_msg(f[t - 1] == 0.0f, "before step %zu: f[%zu] = %g", t, t - 1, (double)f[t - 1]);
    attn_selective_desc d;
    sel_desc(&d, 1, t + 1, HQ, HKV, DD, DD, HS);
    const tu_tensor q = tu_rows_view(&x.q, t, 1), k = tu_rows_view(&x.k, 0, t + 1), v = tu_rows_view(&x.v, 0, t + 1);
    sel_res res;
    sel_run(&d, &q, &k, &v, T, 1, f, 4, &res);
    char what[64];
    snprintf(what, sizeof what, "decode step %zu vs reference row", t);
    sel_compare(what, N, DD, &res.o, &res.lse, ref.o + t * HQ * DD, ref.lse + t * HQ, sel_scales_at(&ref, t, HQ, DD),
                1.0);
    ck_assert_msg(res.f[0] == 0.0f && res.f[t] == 0.0f, "step %zu: f[0] = %g, f[%zu] = %g", t, (double)res.f[0], t,
                  (double)res.f[t]);
    for (size_t j = 0; j < t; ++j)
      ck_assert_msg(res.f[j] >= f[j], "step %zu: column %zu decreased from %.9g to %.9g", t, j, (double)f[j],
                    (double)res.f[j]);
    memcpy(f, res.f, sizeof(float) * (t + 1));
    sel_res_free(&res);
  }
  sel_compare_f("f after decode", N, DD, f, N, ref.f, ref.f, ref.fg, 1.0);
  tu_qkv_assert_unchanged(&x);
  free(f);
  sel_ref_free(&ref);
  tu_qkv_free(&x);
}
END_TEST

/* The selection is one query's business: a new q_p of head h_sel changes no row <= p of any other
 * head and no row < p of h_sel (bit for bit: F_pj sums queries before p only), nor f of keys >= p;
 * with scores that select (positive data) it changes some later row of another head. */
typedef struct iso_case {
  size_t n, h_q, h_kv, d, h_sel, p;
} iso_case;
static const iso_case iso_cases[] = {
    {.n = 70, .h_q = 4, .h_kv = 2, .d = 16, .h_sel = 1, .p = 30},
    {.n = 70, .h_q = 4, .h_kv = 2, .d = 16, .h_sel = 2, .p = 47},
    {.n = 100, .h_q = 2, .h_kv = 1, .d = 8, .h_sel = 0, .p = 48},
    {.n = 100, .h_q = 3, .h_kv = 3, .d = 9, .h_sel = 2, .p = 96},
    {.n = 50, .h_q = 2, .h_kv = 2, .d = 8, .h_sel = 1, .p = 1},
    {.n = 50, .h_q = 2, .h_kv = 1, .d = 8, .h_sel = 0, .p = 0},
    {.n = 50, .h_q = 2, .h_kv = 1, .d = 8, .h_sel = 1, .p = 49},
};
#define ISO_NCASES (sizeof iso_cases / sizeof iso_cases[0])

START_TEST(selective_selecting_query_isolation) {
  const iso_case *c = &iso_cases[_i];
  tu_rng rng = tu_rng_of(2200 + (uint64_t)_i);
  tu_qkv x;
  attn_selective_desc d;
  sel_inputs(&x, &d, &rng, TU_DATA_POSITIVE, c->n, c->h_q, c->h_kv, c->d, c->d, c->h_sel);
  sel_res a, b;
  sel_run(&d, &x.q, &x.k, &x.v, T, 1, NULL, 0, &a);
  for (size_t e = 0; e < c->d; ++e) *tu_at(&x.q, c->p, c->h_sel, e) = 1.0f + tu_rng_range(&rng, 0.0f, 1.0f);
  tu_qkv_snapshot(&x);
  sel_run(&d, &x.q, &x.k, &x.v, T, 1, NULL, 0, &b);
  int later_changed = 0;
  for (size_t i = 0; i < c->n; ++i)
    for (size_t h = 0; h < c->h_q; ++h) {
      const int same_o = !memcmp(tu_at(&a.o, i, h, 0), tu_at(&b.o, i, h, 0), sizeof(float) * c->d);
      const int same_l = !memcmp(tu_at(&a.lse, i, h, 0), tu_at(&b.lse, i, h, 0), sizeof(float));
      if (i < c->p || (i == c->p && h != c->h_sel))
        ck_assert_msg(same_o && same_l, "row %zu head %zu changed by q of head %zu at %zu", i, h, c->h_sel, c->p);
      else if (i > c->p && h != c->h_sel && !(same_o && same_l))
        later_changed = 1;
    }
  for (size_t j = c->p; j < c->n; ++j)
    ck_assert_msg(!memcmp(&a.f[j], &b.f[j], sizeof(float)), "f[%zu] changed: %.9g -> %.9g", j, (double)a.f[j],
                  (double)b.f[j]);
  /* a later row of another head sees keys 1 .. p-1 with the new F (none when p < 2 or p is last) */
  if (c->p >= 2 && c->p + 1 < c->n)
    ck_assert_msg(later_changed, "no row after %zu of another head changed: the selection does not reach them", c->p);
  sel_ref ref;
  sel_ref_compute(&d, &x.q, &x.k, &x.v, NULL, &ref);
  sel_compare("after the new selecting query", c->n, c->d, &b.o, &b.lse, ref.o, ref.lse,
              sel_scales_at(&ref, 0, c->h_q, c->d), 1.0);
  sel_compare_f("after the new selecting query", c->n, c->d, b.f, c->n, ref.f, ref.f, ref.fg, 1.0);
  sel_ref_free(&ref);
  sel_res_free(&a);
  sel_res_free(&b);
  tu_qkv_free(&x);
}
END_TEST

/* A prefill of 37 tokens, a chunk of 20 (n_q < n_kv, the state carried in f) and 10 decode steps
 * equal one 67-token call: every row within twice the bound, f too; and each piece matches the
 * reference of the whole sequence. */
typedef struct pieces_case {
  size_t h_q, h_kv, d, dv, h_sel;
  tu_data data;
} pieces_case;
static const pieces_case pieces_cases[] = {
    {.h_q = 4, .h_kv = 2, .d = 16, .dv = 16, .h_sel = 3},
    {.h_q = 1, .h_kv = 1, .d = 64, .dv = 64, .h_sel = 0},
    {.h_q = 6, .h_kv = 1, .d = 8, .dv = 12, .h_sel = 2},
    {.h_q = 2, .h_kv = 1, .d = 16, .dv = 16, .h_sel = 1, .data = POS},
};
#define PIECES_NCASES (sizeof pieces_cases / sizeof pieces_cases[0])

START_TEST(selective_pieces_match_one_call) {
  enum { N = 67, A = 37, B = 20 };
  const pieces_case *c = &pieces_cases[_i];
  tu_rng rng = tu_rng_of(2300 + (uint64_t)_i);
  tu_qkv x;
  attn_selective_desc dw;
  sel_inputs(&x, &dw, &rng, c->data, N, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  sel_res whole;
  sel_run(&dw, &x.q, &x.k, &x.v, T, 1, NULL, 0, &whole);
  sel_ref ref;
  sel_ref_compute(&dw, &x.q, &x.k, &x.v, NULL, &ref);
  sel_compare("one call", N, c->d, &whole.o, &whole.lse, ref.o, ref.lse, sel_scales_at(&ref, 0, c->h_q, c->dv), 1.0);
  double *wo = sel_tensor_double(&whole.o), *wl = sel_tensor_double(&whole.lse);
  const size_t hd = c->h_q * c->dv;
  /* the pieces: [0, A), [A, A + B), then one token at a time */
  size_t starts[2 + N - A - B], ends[2 + N - A - B], np = 0;
  starts[np] = 0, ends[np++] = A;
  starts[np] = A, ends[np++] = A + B;
  for (size_t t = A + B; t < N; ++t) starts[np] = t, ends[np++] = t + 1;
  float *f = malloc(sizeof(float) * N);
  ck_assert_ptr_nonnull(f);
  for (size_t pc = 0; pc < np; ++pc) {
    const size_t s0 = starts[pc], nq = ends[pc] - s0, nkv = ends[pc];
    attn_selective_desc d;
    sel_desc(&d, nq, nkv, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
    const tu_tensor q = tu_rows_view(&x.q, s0, nq), k = tu_rows_view(&x.k, 0, nkv), v = tu_rows_view(&x.v, 0, nkv);
    sel_res r;
    sel_run(&d, &q, &k, &v, T, 1, f, 0, &r);
    char what[64];
    snprintf(what, sizeof what, "piece [%zu, %zu) vs one call", s0, nkv);
    const sel_scales sc = sel_scales_at(&ref, s0, c->h_q, c->dv);
    sel_compare(what, N, c->d, &r.o, &r.lse, wo + s0 * hd, wl + s0 * c->h_q, sc, TOL_PROPERTY_FACTOR);
    snprintf(what, sizeof what, "piece [%zu, %zu) vs reference", s0, nkv);
    sel_compare(what, N, c->d, &r.o, &r.lse, ref.o + s0 * hd, ref.lse + s0 * c->h_q, sc, 1.0);
    memcpy(f, r.f, sizeof(float) * nkv);
    sel_res_free(&r);
  }
  double *wf = sel_dalloc(N);
  for (size_t j = 0; j < N; ++j) wf[j] = (double)whole.f[j];
  sel_compare_f("f of the pieces vs one call", N, c->d, f, N, wf, ref.f, ref.fg, TOL_PROPERTY_FACTOR);
  sel_compare_f("f of the pieces vs reference", N, c->d, f, N, ref.f, ref.f, ref.fg, 1.0);
  tu_qkv_assert_unchanged(&x);
  free(wf);
  free(f);
  free(wo);
  free(wl);
  sel_ref_free(&ref);
  sel_res_free(&whole);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* API: defaults, workspace, sizes                                                             */
/* ------------------------------------------------------------------------------------------ */
START_TEST(selective_desc_init_defaults) {
  attn_selective_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_selective_desc_init(&d, 5, 9, 6, 2, 64, 40), ATTN_OK);
  tu_assert_shape_defaults("selective shape defaults", &d.shape, 64);
  ck_assert(fabs((double)d.scale - 0.125) <= 0x1p-24);
  ck_assert_uint_eq(d.h_sel, 0);
  ck_assert_uint_eq(d.lse.row_stride, 6);
  ck_assert_uint_eq(d.lse.head_stride, 1);
  ck_assert_int_eq(attn_selective_desc_init(NULL, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER);
}
END_TEST

/* attn_selective's workspace does not depend on n_q or n_kv; the cache's is attn_selective's for
 * n_kv = capacity. */
START_TEST(selective_workspace_sizes) {
  static const size_t n[][2] = {{1, 1}, {7, 3}, {100, 1000}, {1000, 100}, {48, 96}};
  size_t first = 0;
  for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
    attn_selective_desc d;
    sel_desc(&d, n[i][0], n[i][1], 4, 2, 64, 32, 3);
    size_t ws = 0;
    ck_assert_int_eq(attn_selective_workspace_size(&d, &ws), ATTN_OK);
    if (i == 0) first = ws;
    ck_assert_uint_eq(ws, first);
  }
  sc_fix s;
  sc_fix_init(&s, 20, 2, 64, 32, INFINITY, 0, 0);
  attn_selective_desc d1, dc;
  sel_desc(&d1, 1, 1, 4, 2, 64, 32, 3);
  sel_desc(&dc, 1, 20, 4, 2, 64, 32, 3);
  size_t a = 0, b = 0;
  ck_assert_int_eq(attn_selcache_workspace_size(&d1, &s.c, &a), ATTN_OK);
  ck_assert_int_eq(attn_selective_workspace_size(&dc, &b), ATTN_OK);
  ck_assert_uint_eq(a, b);
  ck_assert_int_eq(attn_selective_workspace_size(&d1, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_workspace_size(NULL, &s.c, &a), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_workspace_size(&d1, NULL, &a), ATTN_E_NULL_POINTER);
  sc_fix_free(&s);
}
END_TEST

/* attn_selcache_size and init: the statuses of each argument; a failed init leaves the struct and
 * the memory untouched; budget = capacity - 1 is the largest valid one. */

/* ------------------------------------------------------------------------------------------ */
/* Bad input of attn_selective: each row mutates one argument of a valid chunked call (its f    */
/* holds a carried state): every shared row of bad_input.h (the lse ones included), then the    */
/* rows of h_sel and f; the call answers the row's status and writes nothing: o, lse and f keep */
/* their bytes, the inputs too.                                                                 */
/* ------------------------------------------------------------------------------------------ */
enum { BNQ = 5, BNKV = 9, BHQ = 4, BHKV = 2, BD = 8, BDV = 6, BSEL = 3 };
/* f's buffer: room for o or lse inside it */
#define BF_FLOATS ((size_t)4 * BNKV * BHQ * BDV)

/* Selective's own rows: edits of the descriptor (h_sel), of the call's f (F: f points n floats
 * into an object) and of the shared arguments (ARG). */
enum { OB_DESC = TU_OB_OWN, OB_FBUF, OB_FP };
#define BS(s, lvl)    .fault = TU_BAD_OWN, .expect = (s), .desc_level = (lvl)
#define HSEL(val)     TU_SET_Z(OB_DESC, attn_selective_desc, h_sel, val)
#define F(to, n)      TU_ELEM_P(OB_FP, 0, to, n)
#define ARG(f, to, n) TU_PTR(TU_OB_BAD, tu_bad, f, to, n)
static const tu_bad_case bs_cases[] = {
    {"f NULL", BS(ATTN_E_NULL_POINTER, 0), {F(TU_OBJ_NONE, 0)}},
    {"h_sel = h_q", BS(ATTN_E_BAD_HEADS, 1), {HSEL(BHQ)}},
    {"h_sel SIZE_MAX", BS(ATTN_E_BAD_HEADS, 1), {HSEL(SIZE_MAX)}},
    {"f inside q", BS(ATTN_E_ALIASING, 0), {F(TU_OB_Q, 3)}},
    {"f inside k", BS(ATTN_E_ALIASING, 0), {F(TU_OB_K, 5)}},
    {"f inside v", BS(ATTN_E_ALIASING, 0), {F(TU_OB_V, 0)}},
    {"f inside o", BS(ATTN_E_ALIASING, 0), {F(TU_OB_O, 7)}},
    {"f inside lse", BS(ATTN_E_ALIASING, 0), {F(TU_OB_LSE_DATA, 2)}},
    {"f inside workspace",
     BS(ATTN_E_ALIASING, 0),
     {F(TU_OB_WS, 4), TU_ADD(TU_OB_BAD, tu_bad, ws_size, TU_BAD_WS_ROOM)}},
    {"o overlaps f", BS(ATTN_E_ALIASING, 0), {ARG(o_arg, OB_FBUF, BNKV - 1)}}, /* o's first element is f's last */
    {"lse inside f", BS(ATTN_E_ALIASING, 0), {ARG(lse_arg, OB_FBUF, 2)}},
};
#define BS_NOWN (sizeof bs_cases / sizeof bs_cases[0])

START_TEST(selective_rejects_bad_input) {
  const tu_bad_case *c = tu_bad_row((size_t)_i, 1, bs_cases);
  tu_rng rng = tu_rng_of(4000 + (uint64_t)_i);
  attn_selective_desc d;
  sel_desc(&d, BNQ, BNKV, BHQ, BHKV, BD, BDV, BSEL);
  size_t need = 0;
  TU_CALL_WS(attn_selective, &d, &need);
  tu_bad b;
  tu_bad_make(&b, &rng, &d.shape, 4, 1, need);
  /* f: a carried state for the 4 earlier keys, the sentinel for the call's own; room to alias */
  float *fbuf = tu_alloc(sizeof(float) * BF_FLOATS, 0);
  tu_fill_sentinel(fbuf, BF_FLOATS);
  for (size_t j = 0; j < BNKV - BNQ; ++j) fbuf[j] = (float)j * 0.25f;
  unsigned char *f_before = malloc(sizeof(float) * BF_FLOATS);
  ck_assert_ptr_nonnull(f_before);
  memcpy(f_before, fbuf, sizeof(float) * BF_FLOATS);
  float *fp = fbuf;
  tu_bad_apply(&b, c, &d.shape, &d.scale, &d.lse, (void *[]){&d, fbuf, &fp}, 3);
  /* a shared fault that leaves h_sel no longer below h_q gets h_sel 0, so that the row tests its
   * own fault, not h_sel */
  if (c->fault < TU_BAD_OWN && d.shape.h_q && d.h_sel >= d.shape.h_q) d.h_sel = 0;
  const attn_selective_desc *dp = b.desc_null ? NULL : &d;
  tu_bad_assert_status(c, "attn_selective",
                       attn_selective(dp, b.q, b.k, b.v, b.o_arg, b.lse_arg, fp, b.ws_arg, b.ws_size));
  size_t bytes = TU_BAD_UNTOUCHED;
  tu_bad_assert_query(c, "attn_selective_workspace_size", attn_selective_workspace_size(&d, &bytes), bytes);
  tu_bad_assert_untouched(&b);
  tu_assert_same_bits("f after a rejected call", f_before, fbuf, sizeof(float) * BF_FLOATS);
  tu_assert_guards("f", fbuf);
  free(f_before);
  tu_free(fbuf);
  tu_bad_free(&b);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"reference", selective_matches_reference, (int)TU_SELECT_CASES(sel_cases, sel_sel, dv)},
    {"reference", selective_hand_computed, 1},
  {"nonfinite", selective_nonfinite_policy, (int)NF_NCASES}, {"nonfinite", selective_infinite_selection_is_nan, 2},
    {"nonfinite", selective_neg_inf_selection_reaches_f, 1},
  {"properties", selective_f_structure_through_decode, 1},
    {"properties", selective_selecting_query_isolation, (int)ISO_NCASES},
    {"properties", selective_pieces_match_one_call, (int)PIECES_NCASES},
  {"api", selective_desc_init_defaults, 1}, {"api", selective_workspace_sizes, 1},
  {"bad_input", selective_rejects_bad_input, (int)tu_bad_rows(1, BS_NOWN)})
/* clang-format on */
