/*
 * Softmax attention (plain, sliding-window and chunk-local masks), on the ISA path named by
 * ATTN_ISA, against the float64 reference. TCases: "reference" (the shape table), "mask" (keys
 * outside the mask are never read; rows that see no key), "properties" (decode / chunked prefill /
 * split-KV merge reproduce the full prefill), "nonfinite", "exp", "api" (descriptor defaults,
 * workspace, reentrancy) and "bad_input" (the exact status of every bad argument, nothing
 * written).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "test_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

#define HEADS(q, kv) .h_q = (q), .h_kv = (kv)

/* Softmax needs h_k == h_v (one count, h_kv, dividing h_q); unequal counts are bad input. */
typedef struct sm_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;        /* every row states it ({0, 0, 0} is the diagonal-only window) */
  tu_layout_kind layout; /* default: token-major */
  float scale;           /* with set_scale; otherwise the default 1/sqrt(d) */
  int set_scale;
  tu_data data; /* default: uniform in [-1, 1) */
  int no_lse;   /* 1: lse = NULL */
} sm_case;

/* Query blocks are 48 rows and key blocks 96 on SIMD paths, 32 / 64 on scalar; vectors are 8
 * (AVX2) and 4 (NEON) floats: sizes sit on, below and above each of them. Chunk-local masks
 * count chunks from key 0: widths 1, 3, 7 (inside a block), 64 (a scalar key block), 100
 * (straddling blocks), with causal and windowed forms, n_q < n_kv, n_q > n_kv and decode. */
static const sm_case sm_cases[] = {
    /* sizes: 1, primes, around vector widths and block sizes */
    {.name = "n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1), .mask = FULL},
    {.name = "n1_d8_causal", SIZES(1, 1, 8, 8), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n2_d7_causal", SIZES(2, 2, 7, 7), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n3_d65", SIZES(3, 3, 65, 65), HEADS(1, 1), .mask = FULL},
    {.name = "n4_d4_causal", SIZES(4, 4, 4, 4), HEADS(2, 1), .mask = CAUSAL},
    {.name = "n5_d3_dv5", SIZES(5, 5, 3, 5), HEADS(1, 1), .mask = FULL},
    {.name = "n7_d8_causal", SIZES(7, 7, 8, 8), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n8_d8", SIZES(8, 8, 8, 8), HEADS(2, 2), .mask = FULL},
    {.name = "n9_d9_causal", SIZES(9, 9, 9, 9), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n13_d64_causal", SIZES(13, 13, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n31_d1", SIZES(31, 31, 1, 1), HEADS(1, 1), .mask = FULL},
    {.name = "n32_d128_causal", SIZES(32, 32, 128, 128), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n33_d65", SIZES(33, 33, 65, 65), HEADS(2, 1), .mask = FULL},
    {.name = "n47_d64_causal", SIZES(47, 47, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n48_d8", SIZES(48, 48, 8, 8), HEADS(1, 1), .mask = FULL},
    {.name = "n49_d7_causal", SIZES(49, 49, 7, 7), HEADS(2, 2), .mask = CAUSAL},
    {.name = "n63_d65", SIZES(63, 63, 65, 65), HEADS(1, 1), .mask = FULL},
    {.name = "n64_d64_causal", SIZES(64, 64, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n65_d1_causal", SIZES(65, 65, 1, 1), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n95_d64", SIZES(95, 95, 64, 64), HEADS(1, 1), .mask = FULL},
    {.name = "n96_d128_causal", SIZES(96, 96, 128, 128), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n97_d8", SIZES(97, 97, 8, 8), HEADS(2, 1), .mask = FULL},
    {.name = "n127_d7_causal", SIZES(127, 127, 7, 7), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n128_d64", SIZES(128, 128, 64, 64), HEADS(1, 1), .mask = FULL},
    {.name = "n129_d65_causal", SIZES(129, 129, 65, 65), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n193_d64_causal", SIZES(193, 193, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n289_d128", SIZES(289, 289, 128, 128), HEADS(1, 1), .mask = FULL},
    /* wide rows (d + dv >= 256): the paths' q_block_wide rows a block (AVX-512: 128), GQA's
     * groups and a last block cut short; d + dv = 255 keeps q_block */
    {.name = "n301_d128_gqa_wide_causal", SIZES(301, 301, 128, 128), HEADS(4, 2), .mask = CAUSAL},
    {.name = "n150_d100_dv156", SIZES(150, 150, 100, 156), HEADS(2, 1), .mask = FULL},
    {.name = "n150_d100_dv155_causal", SIZES(150, 150, 100, 155), HEADS(1, 1), .mask = CAUSAL},
    {.name = "nq97_nkv289_d32", SIZES(97, 289, 32, 32), HEADS(1, 1), .mask = FULL},
    /* head widths */
    {.name = "d1", SIZES(50, 50, 1, 1), HEADS(2, 2), .mask = CAUSAL},
    {.name = "d7", SIZES(50, 50, 7, 7), HEADS(2, 2), .mask = CAUSAL},
    {.name = "d8", SIZES(50, 50, 8, 8), HEADS(2, 2), .mask = CAUSAL},
    {.name = "d64", SIZES(50, 50, 64, 64), HEADS(2, 2), .mask = CAUSAL},
    {.name = "d65", SIZES(50, 50, 65, 65), HEADS(2, 2), .mask = CAUSAL},
    {.name = "d128", SIZES(50, 50, 128, 128), HEADS(2, 2), .mask = CAUSAL},
    /* dv != d */
    {.name = "d64_dv7", SIZES(33, 33, 64, 7), HEADS(1, 1), .mask = FULL},
    {.name = "d8_dv65", SIZES(49, 70, 8, 65), HEADS(2, 1), .mask = FULL},
    {.name = "d1_dv128_causal", SIZES(20, 20, 1, 128), HEADS(1, 1), .mask = CAUSAL},
    {.name = "d65_dv16_causal", SIZES(30, 30, 65, 16), HEADS(2, 1), .mask = CAUSAL},
    /* heads: GQA, MQA, MHA */
    {.name = "gqa_4_2_causal", SIZES(37, 37, 16, 16), HEADS(4, 2), .mask = CAUSAL},
    {.name = "mqa_6_1", SIZES(50, 50, 64, 32), HEADS(6, 1), .mask = FULL},
    {.name = "mqa_6_1_causal", SIZES(50, 50, 8, 8), HEADS(6, 1), .mask = CAUSAL},
    {.name = "mha_3_3_causal", SIZES(17, 17, 24, 24), HEADS(3, 3), .mask = CAUSAL},
    /* chunked prefill (n_q < n_kv) and decode, bottom-right */
    {.name = "chunk_16_of_100", SIZES(16, 100, 32, 32), HEADS(2, 1), .mask = CAUSAL},
    {.name = "chunk_49_of_145", SIZES(49, 145, 8, 8), HEADS(1, 1), .mask = CAUSAL},
    {.name = "chunk_48_of_200", SIZES(48, 200, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {.name = "decode_1_of_97_gqa", SIZES(1, 97, 64, 64), HEADS(4, 2), .mask = CAUSAL},
    {.name = "decode_1_of_1", SIZES(1, 1, 16, 16), HEADS(2, 1), .mask = CAUSAL},
    /* calls shorter than a query block lay each head's scratch out for their own rows, so more
     * heads advance together: 24 wide heads in one group (3 per group with a block's rows on the
     * AVX-512 path), 40 heads of 7 rows in two groups (36 + 4), GQA 48 / 12 with 2 tokens */
    {.name = "decode_24_heads_together", SIZES(1, 300, 128, 128), HEADS(24, 24), .mask = CAUSAL},
    /* speculative blocks: 2 - 8 tokens of up to 32 rows per key head read K and V in place */
    {.name = "verify_5_gqa4", SIZES(5, 777, 64, 40), HEADS(8, 2), .mask = CAUSAL},
    {.name = "verify_8_gqa4_window", SIZES(8, 500, 16, 16), HEADS(4, 1), .mask = WINDOW(100, 0)},
    {.name = "verify_7_mha", SIZES(7, 4200, 24, 24), HEADS(3, 3), .mask = CAUSAL},
    {.name = "few7_40_heads_groups", SIZES(7, 150, 128, 128), HEADS(40, 40), .mask = CAUSAL},
    {.name = "few2_gqa_48_12", SIZES(2, 150, 64, 64), HEADS(48, 12), .mask = CAUSAL},
    /* key splits (attn.h, threads: at most ATTN_SPLIT_TOKENS tokens over >= 2 ATTN_SPLIT_KEYS
     * keys): 2, 4 and 16 ranges, ranges a window empties for some rows, GQA, large logits */
    {.name = "split2_decode_4097", SIZES(1, 4097, 16, 16), HEADS(2, 1), .mask = CAUSAL},
    {.name = "split4_decode_gqa", SIZES(1, 9001, 8, 7), HEADS(4, 2), .mask = FULL},
    {.name = "split16_nq3_causal", SIZES(3, 40000, 4, 5), HEADS(1, 1), .mask = CAUSAL},
    {.name = "split_nq4_window", SIZES(4, 12000, 8, 8), HEADS(2, 2), .mask = WINDOW(5000, 0)},
    {.name = "split_nq2_chunk", SIZES(2, 10000, 8, 8), HEADS(1, 1), .mask = {ATTN_UNBOUNDED, 0, 4500}},
    {.name = "split_large_logits", SIZES(1, 8500, 16, 16), HEADS(2, 1), .mask = CAUSAL, .data = TU_DATA_LARGE},
    /* n_q > n_kv: the first n_q - n_kv rows see no key (zeros, LSE -inf) */
    {.name = "nq40_nkv10_causal", SIZES(40, 10, 16, 16), HEADS(1, 1), .mask = CAUSAL},
    {.name = "nq97_nkv48_causal", SIZES(97, 48, 8, 8), HEADS(2, 1), .mask = CAUSAL},
    {.name = "nq5_nkv1_causal", SIZES(5, 1, 7, 7), HEADS(1, 1), .mask = CAUSAL},
    /* windows (left, right) */
    {.name = "win_0_0", SIZES(30, 30, 16, 16), HEADS(1, 1), .mask = WINDOW(0, 0)},
    {.name = "win_1_0", SIZES(50, 50, 16, 16), HEADS(1, 1), .mask = WINDOW(1, 0)},
    {.name = "win_3_2", SIZES(70, 70, 16, 16), HEADS(2, 1), .mask = WINDOW(3, 2)},
    {.name = "win_3_2_chunk", SIZES(20, 90, 8, 8), HEADS(1, 1), .mask = WINDOW(3, 2)},
    {.name = "win_wider_than_seq", SIZES(40, 40, 8, 8), HEADS(1, 1), .mask = WINDOW(500, 500)},
    {.name = "win_slide_8", SIZES(100, 100, 8, 8), HEADS(1, 1), .mask = WINDOW(7, 0)},
    {.name = "win_slide_16_long", SIZES(200, 200, 64, 64), HEADS(1, 1), .mask = WINDOW(15, 0)},
    {.name = "win_0_0_nq_gt_nkv", SIZES(20, 8, 8, 8), HEADS(1, 1), .mask = WINDOW(0, 0)},
    {.name = "win_0_unbounded", SIZES(40, 40, 8, 8), HEADS(1, 1), .mask = WINDOW(0, U)},
    {.name = "win_2_5_decode", SIZES(1, 50, 8, 8), HEADS(1, 1), .mask = WINDOW(2, 5)},
    {.name = "win_4_1_block_edges", SIZES(130, 130, 8, 8), HEADS(1, 1), .mask = WINDOW(4, 1)},
    /* chunk-local masks */
    {.name = "chunk1_causal", SIZES(50, 50, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 1)},
    {.name = "chunk1_full", SIZES(20, 20, 7, 5), HEADS(2, 1), .mask = MASK(U, U, 1)},
    {.name = "chunk3_full", SIZES(40, 40, 16, 16), HEADS(2, 2), .mask = MASK(U, U, 3)},
    {.name = "chunk3_causal_nq_gt_nkv", SIZES(20, 8, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 3)},
    {.name = "chunk3_full_nq_gt_nkv", SIZES(12, 7, 8, 8), HEADS(1, 1), .mask = MASK(U, U, 3)},
    {.name = "chunk7_causal", SIZES(100, 100, 16, 16), HEADS(2, 1), .mask = MASK(U, 0, 7)},
    {.name = "chunk7_win_2_1", SIZES(70, 70, 8, 8), HEADS(1, 1), .mask = MASK(2, 1, 7)},
    {.name = "chunk7_win_3_0_chunked", SIZES(30, 130, 9, 9), HEADS(1, 1), .mask = MASK(3, 0, 7)},
    {.name = "chunk7_decode", SIZES(1, 100, 64, 64), HEADS(4, 2), .mask = MASK(U, 0, 7)},
    {.name = "chunk64_causal", SIZES(200, 200, 16, 16), HEADS(1, 1), .mask = MASK(U, 0, 64)},
    {.name = "chunk64_full_gqa", SIZES(130, 130, 8, 12), HEADS(4, 2), .mask = MASK(U, U, 64)},
    {.name = "chunk64_chunked_30_of_200", SIZES(30, 200, 32, 32), HEADS(1, 1), .mask = MASK(U, 0, 64)},
    {.name = "chunk64_decode_at_64", SIZES(1, 65, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 64)},
    {.name = "chunk64_win_10_5", SIZES(150, 150, 8, 8), HEADS(1, 1), .mask = MASK(10, 5, 64)},
    {.name = "chunk100_causal", SIZES(250, 250, 64, 64), HEADS(1, 1), .mask = MASK(U, 0, 100)},
    {.name = "chunk100_full", SIZES(130, 130, 16, 16), HEADS(2, 1), .mask = MASK(U, U, 100)},
    {.name = "chunk100_nq_gt_nkv", SIZES(150, 120, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 100)},
    {.name = "chunk100_decode", SIZES(1, 333, 16, 16), HEADS(2, 2), .mask = MASK(U, 0, 100)},
    {.name = "chunk100_win_30_0_padded", SIZES(120, 230, 13, 11), HEADS(2, 1), .mask = MASK(30, 0, 100), .layout = P},
    {.name = "chunk_wider_than_seq", SIZES(40, 40, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 1000)},
    {.name = "chunk_unbounded_nq_gt_nkv", SIZES(30, 10, 8, 8), HEADS(1, 1), .mask = MASK(U, U, U)},
    {.name = "chunk7_large_logits", SIZES(60, 60, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 7), SCALE(1.0f), .data = LRG},
    {.name = "chunk3_no_lse_head_major",
     SIZES(37, 37, 16, 16),
     HEADS(2, 2),
     .mask = MASK(U, 0, 3),
     .layout = H,
     .no_lse = 1},
    /* large logits (scale 1, q.k in ~[90, 100]): finite and accurate only with max subtraction */
    {.name = "large_d64", SIZES(65, 65, 64, 64), HEADS(1, 1), .mask = FULL, SCALE(1.0f), .data = LRG},
    {.name = "large_d64_causal", SIZES(65, 65, 64, 64), HEADS(1, 1), .mask = CAUSAL, SCALE(1.0f), .data = LRG},
    {.name = "large_d8_causal", SIZES(40, 40, 8, 8), HEADS(2, 1), .mask = CAUSAL, SCALE(1.0f), .data = LRG},
    {.name = "large_d1", SIZES(97, 97, 1, 1), HEADS(1, 1), .mask = FULL, SCALE(1.0f), .data = LRG},
    {.name = "large_d7_decode", SIZES(1, 150, 7, 7), HEADS(1, 1), .mask = CAUSAL, SCALE(1.0f), .data = LRG},
    {.name = "large_d128_causal", SIZES(200, 200, 128, 128), HEADS(1, 1), .mask = CAUSAL, SCALE(1.0f), .data = LRG},
    /* layouts: head-major, prime padding, packed QKV [n][3][H][d] */
    {.name = "head_major", SIZES(37, 37, 16, 16), HEADS(2, 2), .mask = CAUSAL, .layout = H},
    {.name = "head_major_gqa", SIZES(50, 60, 8, 12), HEADS(4, 2), .mask = FULL, .layout = H},
    {.name = "padded_causal", SIZES(49, 49, 13, 11), HEADS(2, 1), .mask = CAUSAL, .layout = P},
    {.name = "head_padded", SIZES(33, 33, 7, 9), HEADS(3, 1), .mask = FULL, .layout = HP},
    {.name = "packed_mha_causal", SIZES(40, 40, 16, 16), HEADS(4, 4), .mask = CAUSAL, .layout = PK},
    {.name = "packed_gqa", SIZES(41, 41, 8, 8), HEADS(4, 2), .mask = FULL, .layout = PK},
    {.name = "packed_mqa_dv", SIZES(30, 30, 64, 32), HEADS(6, 1), .mask = CAUSAL, .layout = PK},
    /* non-default scale */
    {.name = "scale_0.37_causal", SIZES(33, 33, 16, 16), HEADS(1, 1), .mask = CAUSAL, SCALE(0.37f)},
    {.name = "scale_-0.5", SIZES(33, 33, 16, 16), HEADS(1, 1), .mask = FULL, SCALE(-0.5f)},
    {.name = "scale_0_causal", SIZES(20, 20, 8, 8), HEADS(1, 1), .mask = CAUSAL, SCALE(0.0f)},
    {.name = "scale_3", SIZES(40, 40, 32, 32), HEADS(1, 1), .mask = FULL, SCALE(3.0f)},
    /* lse = NULL */
    {.name = "no_lse_causal", SIZES(47, 47, 8, 8), HEADS(2, 1), .mask = CAUSAL, .no_lse = 1},
    {.name = "no_lse_padded", SIZES(50, 50, 9, 9), HEADS(1, 1), .mask = FULL, .layout = P, .no_lse = 1},

};
#define SM_NCASES (sizeof sm_cases / sizeof sm_cases[0])
static size_t sm_sel[SM_NCASES];

/* ------------------------------------------------------------------------------------------ */
/* Running the library and the reference                                                       */
/* ------------------------------------------------------------------------------------------ */
typedef struct sm_result {
  tu_tensor o, lse;
  int has_lse;
} sm_result;

/* attn_softmax with q, k, v as given (their strides go into desc), o and lse freshly allocated
 * (guarded, sentinel-filled) in layout okind; asserts ATTN_OK, intact guards around o, lse and
 * the exactly-sized workspace, and untouched gaps of o and lse. */
static void sm_call(const attn_softmax_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                    tu_layout_kind okind, int with_lse, size_t misalign, sm_result *r) {
  attn_softmax_desc dd = *desc;
  r->has_lse = with_lse;
  tu_outputs_alloc(&dd.shape, &dd.lse, q, k, v, okind, &r->o, with_lse ? &r->lse : NULL);
  size_t ws = 0;
  TU_CALL_WS(attn_softmax, &dd, &ws);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(attn_softmax(&dd, q->data, k->data, v->data, r->o.data, with_lse ? r->lse.data : NULL, w, ws),
                   ATTN_OK);
  tu_assert_guards("softmax workspace", w);
  tu_free(w);
  tu_assert_output_clean("softmax o", &r->o);
  if (with_lse) tu_assert_output_clean("softmax lse", &r->lse);
}

static void sm_result_free(sm_result *r) {
  tu_tensor_free(&r->o);
  if (r->has_lse) tu_tensor_free(&r->lse);
}

/* The one softmax comparison: got's o (and lse) against expected values (the reference, or
 * another library result for a property) with the reference's error scales, all given for got's
 * rows ([got rows][h_q][dv] and [got rows][h_q]), bounds times factor. */
static void sm_compare(const char *what, const attn_softmax_desc *d, const sm_result *got, const double *exp_o,
                       const double *exp_lse, const double *oscale, const double *sabs, double factor) {
  const attn_shape *s = &d->shape;
  const size_t rows = got->o.n * s->h_q;
  double *tol = calloc(rows * s->dv, sizeof(double));
  ck_assert_ptr_nonnull(tol);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < s->dv; ++c) tol[r * s->dv + c] = factor * tol_softmax_o(s->n_kv, s->d, sabs[r]);
  tu_compare("softmax.o", what, &got->o, exp_o, oscale, tol);
  if (got->has_lse && exp_lse) {
    double *one = tu_dup(1.0, rows);
    for (size_t r = 0; r < rows; ++r)
      tol[r] = factor * tol_softmax_lse(s->n_kv, s->d, sabs[r], isinf(exp_lse[r]) ? 0 : exp_lse[r]);
    tu_compare("softmax.lse", what, &got->lse, exp_lse, one, tol);
    free(one);
  }
  free(tol);
}

/* Compares a call's result with the float64 reference of the call over q, k, v (factor 1). */
static void sm_check_ref(const char *what, const attn_softmax_desc *d, const sm_result *res, const tu_tensor *q,
                         const tu_tensor *k, const tu_tensor *v) {
  tu_softmax_ref ref;
  tu_softmax_ref_compute(d, q, k, v, &ref);
  sm_compare(what, d, res, ref.o, ref.lse, ref.oscale, ref.sabs, 1.0);
  tu_softmax_ref_free(&ref);
}

static void sm_desc(attn_softmax_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv,
                    attn_mask mask) {
  ck_assert_int_eq(attn_softmax_desc_init(d, n_q, n_kv, h_q, h_kv, dd, dv), ATTN_OK);
  d->mask = mask;
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
START_TEST(softmax_matches_reference) {
  const size_t idx = sm_sel[_i];
  const sm_case *c = &sm_cases[idx];
  tu_rng rng = tu_rng_of(1000 + idx);
  tu_qkv x = tu_qkv_of(c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  attn_softmax_desc d;
  sm_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->mask);
  if (c->set_scale) d.scale = c->scale;
  const tu_layout_kind okind = c->layout == PK ? T : c->layout;
  sm_result res;
  sm_call(&d, &x.q, &x.k, &x.v, okind, !c->no_lse, (idx % 2) * 4, &res);
  tu_qkv_assert_unchanged(&x);
  sm_check_ref(c->name, &d, &res, &x.q, &x.k, &x.v);
  sm_result_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* Inputs may overlap one another: q = k = v, one buffer. */
START_TEST(softmax_shared_inputs) {
  tu_rng rng = tu_rng_of(77);
  tu_tensor t;
  tu_tensor_alloc(&t, T, 45, 2, 16, 0);
  tu_tensor_fill(&t, &rng, -1.0f, 1.0f);
  attn_softmax_desc d;
  sm_desc(&d, 45, 45, 2, 2, 16, 16, attn_mask_causal());
  sm_result res;
  sm_call(&d, &t, &t, &t, T, 1, 0, &res);
  sm_check_ref("q=k=v", &d, &res, &t, &t, &t);
  sm_result_free(&res);
  tu_tensor_free(&t);
}
END_TEST

/* A decode query's row stride is unconstrained (the count of rows is 1): 0 is valid. */
START_TEST(softmax_decode_row_stride_zero) {
  tu_rng rng = tu_rng_of(78);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, 1, 30, 4, 2, 2, 8, 8);
  x.q.l.row_stride = 0;
  attn_softmax_desc d;
  sm_desc(&d, 1, 30, 4, 2, 8, 8, attn_mask_causal());
  sm_result res;
  sm_call(&d, &x.q, &x.k, &x.v, T, 1, 0, &res);
  sm_check_ref("q row stride 0", &d, &res, &x.q, &x.k, &x.v);
  sm_result_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties against the full causal prefill                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct sm_prop_case {
  size_t n, h_q, h_kv, d, dv;
  size_t wl, chunk; /* the causal prefill's mask: {wl, 0, chunk} */
  size_t start;     /* chunked prefill: first query row; merge: split point a */
} sm_prop_case;

static const sm_prop_case sm_props[] = {
    {.n = 50, .h_q = 1, .h_kv = 1, .d = 8, .dv = 8, .wl = U, .start = 25},
    {.n = 97, .h_q = 4, .h_kv = 2, .d = 64, .dv = 64, .wl = U, .start = 96},
    {.n = 100, .h_q = 2, .h_kv = 1, .d = 16, .dv = 16, .wl = 20, .start = 49},
    {.n = 49, .h_q = 6, .h_kv = 1, .d = 7, .dv = 9, .wl = U, .start = 1},
    {.n = 65, .h_q = 1, .h_kv = 1, .d = 65, .dv = 65, .wl = U, .start = 64},
    {.n = 130, .h_q = 1, .h_kv = 1, .d = 8, .dv = 8, .wl = 30, .start = 33},
    {.n = 100, .h_q = 2, .h_kv = 1, .d = 16, .dv = 16, .wl = U, .chunk = 7, .start = 49},
    {.n = 130, .h_q = 1, .h_kv = 1, .d = 8, .dv = 8, .wl = 10, .chunk = 64, .start = 33},
    {.n = 97, .h_q = 4, .h_kv = 2, .d = 64, .dv = 64, .wl = U, .chunk = 100, .start = 96},
    {.n = 60, .h_q = 1, .h_kv = 1, .d = 9, .dv = 9, .wl = U, .chunk = 1, .start = 30},
};
#define SM_NPROPS (sizeof sm_props / sizeof sm_props[0])

static attn_mask sm_prop_mask(const sm_prop_case *c) {
  const attn_mask m = {c->wl, 0, c->chunk};
  return m;
}

/* Builds inputs, the full causal prefill (masked by sm_prop_mask), its reference. */
typedef struct sm_full {
  const sm_prop_case *c;
  tu_qkv x;
  attn_softmax_desc d;
  sm_result res;
  tu_softmax_ref ref;
  double *got; /* the prefill's o as double, [n][h_q][dv] */
  double *got_lse;
} sm_full;

static void sm_full_make(sm_full *f, const sm_prop_case *c, uint64_t seed) {
  tu_rng rng = tu_rng_of(seed);
  f->c = c;
  tu_qkv_make(&f->x, T, TU_DATA_UNIFORM, &rng, c->n, c->n, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  sm_desc(&f->d, c->n, c->n, c->h_q, c->h_kv, c->d, c->dv, sm_prop_mask(c));
  sm_call(&f->d, &f->x.q, &f->x.k, &f->x.v, T, 1, 0, &f->res);
  tu_softmax_ref_compute(&f->d, &f->x.q, &f->x.k, &f->x.v, &f->ref);
  sm_compare("full prefill", &f->d, &f->res, f->ref.o, f->ref.lse, f->ref.oscale, f->ref.sabs, 1.0);
  f->got = malloc(sizeof(double) * c->n * c->h_q * c->dv);
  f->got_lse = malloc(sizeof(double) * c->n * c->h_q);
  ck_assert(f->got && f->got_lse);
  tu_tensor_to_double(&f->res.o, f->got);
  tu_tensor_to_double(&f->res.lse, f->got_lse);
}

static void sm_full_free(sm_full *f) {
  free(f->got);
  free(f->got_lse);
  tu_softmax_ref_free(&f->ref);
  sm_result_free(&f->res);
  tu_qkv_free(&f->x);
}

/* A property part (tu_prop_part_fn) of the full causal prefill ctx: o and lse. */
static void sm_prop_part(const void *ctx, const char *what, tu_prop_kind kind, size_t step, size_t q0, size_t nq,
                         size_t nkv) {
  (void)kind, (void)step;
  const sm_full *f = ctx;
  const sm_prop_case *c = f->c;
  const size_t hd = c->h_q * c->dv;
  attn_softmax_desc d;
  sm_desc(&d, nq, nkv, c->h_q, c->h_kv, c->d, c->dv, sm_prop_mask(c));
  const tu_qkv w = tu_qkv_rows(&f->x, q0, nq, nkv);
  sm_result res;
  sm_call(&d, &w.q, &w.k, &w.v, T, 1, 0, &res);
  sm_compare(what, &d, &res, f->got + q0 * hd, f->got_lse + q0 * c->h_q, f->ref.oscale + q0 * hd,
             f->ref.sabs + q0 * c->h_q, TOL_PROPERTY_FACTOR);
  sm_result_free(&res);
}

/* Decode steps (n_q = 1 over a growing cache) reproduce the rows of the full causal prefill: the
 * step's query sits at the same position, so the same window and chunk apply. */
START_TEST(softmax_decode_matches_prefill) {
  sm_full f;
  sm_full_make(&f, &sm_props[_i], 2000 + (uint64_t)_i);
  tu_prop_decode(&f, f.c->n, sm_prop_part);
  tu_qkv_assert_unchanged(&f.x);
  sm_full_free(&f);
}
END_TEST

/* Chunked prefill (rows [start, n) over all n keys, n_q < n_kv) equals those rows of the full one. */
START_TEST(softmax_chunked_matches_prefill) {
  sm_full f;
  sm_full_make(&f, &sm_props[_i], 3000 + (uint64_t)_i);
  tu_prop_chunked(&f, f.c->n, f.c->start, sm_prop_part);
  sm_full_free(&f);
}
END_TEST

/* Split-KV: keys [0, a) and [a, n) computed apart, merged with their LSE, equal the whole.
 * Causal bottom-right alignment across the split: the first part needs window_right = n - a,
 * the second is plain causal (its rows i < a see nothing: LSE -inf, merged correctly). */
START_TEST(softmax_merge_halves_matches_whole) {
  const sm_prop_case *c = &sm_props[_i];
  sm_prop_case full = *c;
  full.wl = U;    /* a left bound on the first part would need a negative window */
  full.chunk = 0; /* chunks count from each call's key 0: the first part's could not line up */
  sm_full f;
  sm_full_make(&f, &full, 4000 + (uint64_t)_i);
  const size_t a = c->start, n = c->n, rows = n * c->h_q;
  attn_softmax_desc da, db;
  sm_desc(&da, n, a, c->h_q, c->h_kv, c->d, c->dv, attn_mask_window(U, n - a));
  sm_desc(&db, n, n - a, c->h_q, c->h_kv, c->d, c->dv, attn_mask_causal());
  const tu_tensor ka = tu_rows_view(&f.x.k, 0, a), va = tu_rows_view(&f.x.v, 0, a);
  const tu_tensor kb = tu_rows_view(&f.x.k, a, n - a), vb = tu_rows_view(&f.x.v, a, n - a);
  sm_result ra, rb, merged;
  sm_call(&da, &f.x.q, &ka, &va, T, 1, 0, &ra);
  sm_call(&db, &f.x.q, &kb, &vb, T, 1, 0, &rb);
  tu_tensor_alloc(&merged.o, T, n, c->h_q, c->dv, 1);
  tu_tensor_alloc(&merged.lse, T, n, c->h_q, 1, 1);
  merged.has_lse = 1;
  const float *op[2] = {ra.o.data, rb.o.data}, *lp[2] = {ra.lse.data, rb.lse.data};
  ck_assert_int_eq(attn_softmax_merge(rows, c->dv, 2, op, c->dv, lp, 1, merged.o.data, c->dv, merged.lse.data, 1),
                   ATTN_OK);
  tu_assert_output_clean("merge o", &merged.o);
  tu_assert_output_clean("merge lse", &merged.lse);
  sm_compare("merge of two key halves vs whole", &f.d, &merged, f.ref.o, f.ref.lse, f.ref.oscale, f.ref.sabs,
             TOL_PROPERTY_FACTOR);
  sm_result_free(&ra);
  sm_result_free(&rb);
  sm_result_free(&merged);
  sm_full_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Masks: keys outside them are never read; rows that see no key                              */
/* ------------------------------------------------------------------------------------------ */
typedef struct skip_case {
  size_t n_q, n_kv, d;
  attn_mask mask;
} skip_case;
static const skip_case skip_cases[] = {
    {.n_q = 1, .n_kv = 400, .d = 64, .mask = WINDOW(10, 0)},  {.n_q = 20, .n_kv = 400, .d = 8, .mask = WINDOW(10, 0)},
    {.n_q = 1, .n_kv = 300, .d = 7, .mask = WINDOW(0, 0)},    {.n_q = 48, .n_kv = 500, .d = 16, .mask = WINDOW(31, 0)},
    {.n_q = 5, .n_kv = 400, .d = 9, .mask = WINDOW(3, 2)},    {.n_q = 20, .n_kv = 500, .d = 8, .mask = MASK(U, 0, 100)},
    {.n_q = 1, .n_kv = 400, .d = 16, .mask = MASK(U, U, 64)}, {.n_q = 48, .n_kv = 600, .d = 16, .mask = MASK(5, 0, 7)},
    {.n_q = 3, .n_kv = 350, .d = 8, .mask = MASK(U, 0, 3)},
};
#define SKIP_NCASES (sizeof skip_cases / sizeof skip_cases[0])

/* Keys (and values) before the first visible one minus a whole key block (96 or 64 rows) are
 * NaN: a kernel that skips the blocks outside the mask (window or chunk), as documented, never
 * sees them. Row 0 sees the earliest keys (both ends of the mask grow with the position). */
START_TEST(softmax_mask_skips_outside_keys) {
  const skip_case *c = &skip_cases[_i];
  tu_rng rng = tu_rng_of(6000 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, 2, 1, 1, c->d, c->d);
  size_t first_visible = 0;
  while (!ref_visible(0, first_visible, c->n_q, c->n_kv, c->mask.left, c->mask.right, c->mask.chunk)) ++first_visible;
  ck_assert_uint_gt(first_visible, 96);
  for (size_t j = 0; j < first_visible - 96; ++j)
    for (size_t e = 0; e < c->d; ++e) {
      *tu_at(&x.k, j, 0, e) = NAN;
      *tu_at(&x.v, j, 0, e) = NAN;
    }
  tu_qkv_snapshot(&x);
  attn_softmax_desc d;
  sm_desc(&d, c->n_q, c->n_kv, 2, 1, c->d, c->d, c->mask);
  sm_result res;
  sm_call(&d, &x.q, &x.k, &x.v, T, 1, 0, &res);
  tu_qkv_assert_unchanged(&x);
  sm_check_ref("NaN keys outside the mask", &d, &res, &x.q, &x.k, &x.v);
  sm_result_free(&res);
  tu_qkv_free(&x);
}
END_TEST

/* Rows that see no key get exactly zeros and LSE -inf: n_q > n_kv puts the first queries at
 * negative positions, which lie in no chunk of the keys (chunk -1 and below) even when the
 * window is unbounded on both sides; a window (0, 0) with n_q > n_kv empties them too. */
START_TEST(softmax_rows_without_keys_are_empty) {
  static const attn_mask masks[] = {MASK(U, U, 3), MASK(U, 0, 7), MASK(U, U, U), WINDOW(0, 0), CAUSAL};
  enum { NQ = 13, NKV = 5, HQ = 2, DD = 8 };
  tu_rng rng = tu_rng_of(6100);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, NQ, NKV, HQ, 1, 1, DD, DD);
  for (size_t m = 0; m < sizeof masks / sizeof masks[0]; ++m) {
    attn_softmax_desc d;
    sm_desc(&d, NQ, NKV, HQ, 1, DD, DD, masks[m]);
    sm_result res;
    sm_call(&d, &x.q, &x.k, &x.v, T, 1, 0, &res);
    for (size_t i = 0; i < NQ - NKV; ++i) /* positions -8 .. -1 */
      for (size_t h = 0; h < HQ; ++h) {
        ck_assert_msg(*tu_at(&res.lse, i, h, 0) == -INFINITY, "mask %zu row %zu: lse %g", m, i,
                      (double)*tu_at(&res.lse, i, h, 0));
        for (size_t c = 0; c < DD; ++c)
          ck_assert_msg(*tu_at(&res.o, i, h, c) == 0.0f, "mask %zu row %zu: o %g", m, i,
                        (double)*tu_at(&res.o, i, h, c));
      }
    sm_check_ref("rows without keys", &d, &res, &x.q, &x.k, &x.v);
    sm_result_free(&res);
  }
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Non-finite inputs: the policy of attn.h on every path                                        */
/* ------------------------------------------------------------------------------------------ */
/* The audit's case: causal, n = 2, d = dv = 1, q = k = {1, 1}, v = {1, NaN}. Query 0 sees only
 * key 0: o[0] = 1 and lse[0] = 1 exactly; query 1 sees the NaN: o[1] is NaN and lse[1] =
 * 1 + log 2 (v does not enter the LSE). The same with the window (0, 0): o[1] NaN, lse[1] = 1. */
START_TEST(softmax_invisible_nan_value_is_ignored) {
  static const float q[2] = {1, 1}, k[2] = {1, 1}, v[2] = {1, NAN};
  for (int win = 0; win < 2; ++win) {
    attn_softmax_desc d;
    sm_desc(&d, 2, 2, 1, 1, 1, 1, attn_mask_window(win ? 0 : U, 0));
    size_t ws = 0;
    ck_assert_int_eq(attn_softmax_workspace_size(&d, &ws), ATTN_OK);
    void *w = tu_alloc(ws, 0);
    float o[2], lse[2];
    ck_assert_int_eq(attn_softmax(&d, q, k, v, o, lse, w, ws), ATTN_OK);
    tu_free(w);
    ck_assert_msg(o[0] == 1.0f && lse[0] == 1.0f, "window %d: o[0] %g lse[0] %g", win, o[0], lse[0]);
    ck_assert_msg(isnan(o[1]), "window %d: o[1] %g", win, o[1]);
    ck_assert_float_eq_tol(lse[1], win ? 1.0f : 1.0f + logf(2.0f), 1e-6f);
  }
}
END_TEST

typedef struct nf_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;
} nf_case;
/* Shapes whose boundary key blocks (96 / 64 keys) hold the poisoned token: causal prefill across
 * blocks, GQA, a sliding window, chunked prefill, decode, n_q > n_kv, full attention, and
 * chunk-local masks (a poisoned key poisons only its own chunk's rows). */
static const nf_case nf_cases[] = {
    {.name = "causal_130_gqa", SIZES(130, 130, 16, 9), HEADS(4, 2), .mask = CAUSAL},
    {.name = "window_7_0", SIZES(150, 150, 8, 8), HEADS(1, 1), .mask = WINDOW(7, 0)},
    {.name = "window_3_2", SIZES(70, 70, 7, 5), HEADS(2, 1), .mask = WINDOW(3, 2)},
    {.name = "chunk_20_of_120", SIZES(20, 120, 16, 16), HEADS(2, 2), .mask = CAUSAL},
    {.name = "decode_1_of_100_gqa", SIZES(1, 100, 64, 64), HEADS(4, 1), .mask = CAUSAL},
    {.name = "nq50_nkv30_causal", SIZES(50, 30, 8, 8), HEADS(1, 1), .mask = CAUSAL},
    {.name = "full_60", SIZES(60, 60, 9, 9), HEADS(2, 1), .mask = FULL},
    {.name = "chunk7_causal_150", SIZES(150, 150, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 7)},
    {.name = "chunk64_full_gqa", SIZES(130, 130, 16, 9), HEADS(4, 2), .mask = MASK(U, U, 64)},
};
#define NF_NCASES (sizeof nf_cases / sizeof nf_cases[0])

/* For each of q, k, v, each of NaN, +inf, -inf, and a token early in the sequence and one late,
 * one element is poisoned; every row must match the reference, which applies the policy: rows
 * that use the value are NaN (lse NaN unless it is in v), every other row is exact as usual. */
START_TEST(softmax_nonfinite_policy) {
  const nf_case *c = &nf_cases[_i];
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng = tu_rng_of(9000 + (uint64_t)_i);
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
    char poison[64], what[96];
    tu_qkv_poison(&x, pc, 0, poison, sizeof poison);
    attn_softmax_desc d;
    sm_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->mask);
    sm_result res;
    sm_call(&d, &x.q, &x.k, &x.v, T, 1, 0, &res);
    tu_qkv_assert_unchanged(&x);
    snprintf(what, sizeof what, "%s: %s", c->name, poison);
    sm_check_ref(what, &d, &res, &x.q, &x.k, &x.v);
    sm_result_free(&res);
    tu_qkv_free(&x);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* exp accuracy through the public API                                                          */
/* ------------------------------------------------------------------------------------------ */
/* d = dv = 1, scale 1, keys {0, 1}, values {0, 1}: query x has logits {0, x} and output
 * o = e^x / (1 + e^x), so o carries exp's relative error (times 1 - o) almost undiluted. The
 * queries sweep x over [-87, 87] (e^-87 is still a normal float). */
enum { EXP_SWEEP = 4001 };
START_TEST(softmax_exp_accuracy_sweep) {
  tu_tensor q, k, v;
  tu_tensor_alloc(&q, T, EXP_SWEEP, 1, 1, 0);
  tu_tensor_alloc(&k, T, 2, 1, 1, 0);
  tu_tensor_alloc(&v, T, 2, 1, 1, 0);
  for (size_t i = 0; i < EXP_SWEEP; ++i) *tu_at(&q, i, 0, 0) = (float)(-87.0 + 174.0 * (double)i / (EXP_SWEEP - 1));
  *tu_at(&q, EXP_SWEEP / 2, 0, 0) = -0x1p-30f; /* tiny argument next to 0 */
  *tu_at(&k, 0, 0, 0) = 0.0f;
  *tu_at(&k, 1, 0, 0) = 1.0f;
  *tu_at(&v, 0, 0, 0) = 0.0f;
  *tu_at(&v, 1, 0, 0) = 1.0f;
  attn_softmax_desc d;
  sm_desc(&d, EXP_SWEEP, 2, 1, 1, 1, 1, attn_mask_full());
  d.scale = 1.0f;
  sm_result res;
  sm_call(&d, &q, &k, &v, T, 1, 0, &res);
  tu_softmax_ref ref;
  tu_softmax_ref_compute(&d, &q, &k, &v, &ref);
  double *tol = tu_dup(TOL_EXP_SWEEP_SOFTMAX, EXP_SWEEP);
  tu_compare("softmax.exp", "exp sweep: o = e^x / (1 + e^x)", &res.o, ref.o, ref.oscale, tol);
  free(tol);
  tu_softmax_ref_free(&ref);
  sm_result_free(&res);
  tu_tensor_free(&q);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Workspace                                                                                   */
/* ------------------------------------------------------------------------------------------ */
/* The size depends on d, dv, h_q / h_kv and the path, not on n_q or n_kv. */
START_TEST(softmax_workspace_independent_of_lengths) {
  static const size_t n[][2] = {{1, 1}, {7, 3}, {100, 1000}, {1000, 100}, {48, 96}};
  size_t first = 0;
  for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
    attn_softmax_desc d;
    sm_desc(&d, n[i][0], n[i][1], 4, 2, 64, 32, attn_mask_causal());
    size_t ws = 0;
    ck_assert_int_eq(attn_softmax_workspace_size(&d, &ws), ATTN_OK);
    if (i == 0) first = ws;
    ck_assert_uint_eq(ws, first);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Descriptor defaults, size queries, reentrancy                                               */
/* ------------------------------------------------------------------------------------------ */
START_TEST(softmax_desc_init_defaults) {
  attn_softmax_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_softmax_desc_init(&d, 5, 9, 6, 2, 64, 40), ATTN_OK);
  tu_assert_shape_defaults("softmax shape defaults", &d.shape, 64);
  ck_assert_uint_eq(d.shape.h_k, 2);
  ck_assert_uint_eq(d.shape.h_v, 2);
  ck_assert_uint_eq(d.shape.o.row_stride, 6 * 40);
  ck_assert(d.mask.left == ATTN_UNBOUNDED && d.mask.right == ATTN_UNBOUNDED && d.mask.chunk == 0);
  ck_assert(fabs((double)d.scale - 0.125) <= 0x1p-24);
  ck_assert_uint_eq(d.lse.row_stride, 6);
  ck_assert_uint_eq(d.lse.head_stride, 1);
  ck_assert_int_eq(attn_softmax_desc_init(&d, 3, 3, 1, 1, 7, 7), ATTN_OK);
  ck_assert(fabs((double)d.scale - 1.0 / sqrt(7.0)) <= 0x1p-24);
  ck_assert_int_eq(attn_softmax_desc_init(NULL, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER);
}
END_TEST

enum { NQ = 5, NKV = 7, HQ = 4, HKV = 2, D = 8, DV = 6 };

START_TEST(softmax_workspace_size_null_pointers) {
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, NQ, NKV, HQ, HKV, D, DV), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_softmax_workspace_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_softmax_workspace_size(&d, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

/* Reentrancy: threads running causal and chunk-local calls at once, each with its own output and
 * workspace over shared inputs, equal the serial results bit for bit. */
enum { RE_THREADS = 4, RE_N = 67, RE_H = 2, RE_D = 16, RE_REPS = 20 };
typedef struct sm_job {
  const tu_qkv *x;
  attn_mask mask;
} sm_job;

static int sm_job_run(const void *arg, float *out) {
  const sm_job *j = arg;
  attn_softmax_desc d;
  size_t ws = 0;
  if (attn_softmax_desc_init(&d, RE_N, RE_N, RE_H, RE_H, RE_D, RE_D) != ATTN_OK) return -1;
  d.mask = j->mask;
  if (attn_softmax_workspace_size(&d, &ws) != ATTN_OK) return -1;
  void *w = malloc(ws + 1);
  int rc = w ? 0 : -1;
  for (int rep = 0; rep < RE_REPS && rc == 0; ++rep)
    rc = (int)attn_softmax(&d, j->x->q.data, j->x->k.data, j->x->v.data, out, NULL, w, ws);
  free(w);
  return rc;
}

START_TEST(softmax_concurrent_calls_match_serial) {
  tu_rng rng = tu_rng_of(500);
  tu_qkv x[RE_THREADS];
  sm_job jobs[RE_THREADS];
  const void *args[RE_THREADS];
  for (int t = 0; t < RE_THREADS; ++t) {
    tu_qkv_make(&x[t], T, TU_DATA_UNIFORM, &rng, RE_N, RE_N, RE_H, RE_H, RE_H, RE_D, RE_D);
    jobs[t] = (sm_job){&x[t], t % 2 ? attn_mask_causal() : (attn_mask)MASK(U, 0, 7)};
    args[t] = &jobs[t];
  }
  tu_assert_reentrant("threaded softmax vs serial", sm_job_run, args, RE_THREADS, (size_t)RE_N * RE_H * RE_D);
  for (int t = 0; t < RE_THREADS; ++t) tu_qkv_free(&x[t]);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid call (bad_input.h: every shared row, the */
/* lse ones included); the call (and, for descriptor faults, attn_softmax_workspace_size)       */
/* answers the row's status and writes nothing.                                                */
/* ------------------------------------------------------------------------------------------ */
START_TEST(softmax_rejects_bad_input) {
  const tu_bad_case *c = tu_bad_row((size_t)_i, 1, NULL);
  tu_rng rng = tu_rng_of(100 + (uint64_t)_i);
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, NQ, NKV, HQ, HKV, D, DV), ATTN_OK);
  d.mask = attn_mask_causal();
  size_t need = 0;
  TU_CALL_WS(attn_softmax, &d, &need);
  tu_bad b;
  tu_bad_make(&b, &rng, &d.shape, 2, 1, need);
  tu_bad_apply(&b, c, &d.shape, &d.scale, &d.lse, NULL, 0);
  const attn_softmax_desc *dp = b.desc_null ? NULL : &d;
  tu_bad_assert_status(c, "attn_softmax", attn_softmax(dp, b.q, b.k, b.v, b.o_arg, b.lse_arg, b.ws_arg, b.ws_size));
  size_t bytes = TU_BAD_UNTOUCHED;
  tu_bad_assert_query(c, "attn_softmax_workspace_size", attn_softmax_workspace_size(&d, &bytes), bytes);
  tu_bad_assert_untouched(&b);
  tu_bad_free(&b);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"reference", softmax_matches_reference, (int)TU_SELECT_CASES(sm_cases, sm_sel, dv)},
    {"reference", softmax_shared_inputs, 1}, {"reference", softmax_decode_row_stride_zero, 1},
  {"mask", softmax_mask_skips_outside_keys, (int)SKIP_NCASES}, {"mask", softmax_rows_without_keys_are_empty, 1},
  {"properties", softmax_decode_matches_prefill, (int)SM_NPROPS},
    {"properties", softmax_chunked_matches_prefill, (int)SM_NPROPS},
    {"properties", softmax_merge_halves_matches_whole, (int)SM_NPROPS},
  {"nonfinite", softmax_invisible_nan_value_is_ignored, 1}, {"nonfinite", softmax_nonfinite_policy, (int)NF_NCASES},
  {"exp", softmax_exp_accuracy_sweep, 1},
  {"api", softmax_desc_init_defaults, 1}, {"api", softmax_workspace_independent_of_lengths, 1},
    {"api", softmax_workspace_size_null_pointers, 1}, {"api", softmax_concurrent_calls_match_serial, 1},
  {"bad_input", softmax_rejects_bad_input, (int)tu_bad_rows(1, 0)})
/* clang-format on */
