/*
 * GAU relu^2 attention (attn_gau: scalar and relative-position biases, normalised or not, every
 * mask), on the ISA path named by ATTN_ISA, against the float64 reference (tests/ref/ref_gau.c).
 * TCases: "reference" (the shape table and the named forms: FLASH's quadratic part, Su's
 * normalised causal form, chunk-local masks, the bias lookups read back exactly), "api" (descriptor
 * defaults, workspace) and "bad_input" (the exact status of every bad argument, nothing written).
 * Sparsity, masks, properties and non-finite inputs: check_gau_props.c; the helpers of both:
 * tests/common/gau_util.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "gau_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
/* Query blocks are 48 rows and key blocks 96 on SIMD paths, 32 / 64 on scalar; vectors are 8
 * (AVX2) and 4 (NEON) floats: sizes sit on, below and above each of them. Every mask kind, both
 * bias tables (L = 1, L below and above the lengths), beta of both signs and 0, normalize 0 and
 * 1, large arguments (|x| up to ~1e3: r^2 ~ 1e6, still far inside float). */
static const gau_case gau_cases[] = {
    /* sizes: 1, primes, around vector widths and block sizes */
    {.name = "n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1), .mask = FULL, BETA(0.5f)},
    {.name = "n1_d8_causal_norm", SIZES(1, 1, 8, 8), HEADS(1, 1), .mask = CAUSAL, NORM, BETA(0.25f)},
    {.name = "n3_d65", SIZES(3, 3, 65, 65), HEADS(1, 1), .mask = FULL},
    /* key splits (attn.h, threads): 2 and 16 ranges, a window, a table, normalised */
    {.name = "split2_decode_norm", SIZES(1, 4500, 8, 8), HEADS(2, 1), .mask = CAUSAL, NORM, BETA(0.1f)},
    {.name = "split16_nq3_ctab", SIZES(3, 40000, 4, 5), HEADS(2, 2), .mask = CAUSAL, CTAB(64)},
    {.name = "split_nq4_window", SIZES(4, 12000, 8, 8), HEADS(4, 2), .mask = WINDOW(5000, 0), NORM},
    {.name = "n5_d3_dv5_ctab", SIZES(5, 5, 3, 5), HEADS(1, 1), .mask = CAUSAL, CTAB(3)},
    {.name = "n7_d7_causal", SIZES(7, 7, 7, 7), HEADS(1, 1), .mask = CAUSAL, BETA(0.1f)},
    {.name = "n8_d8_ttab", SIZES(8, 8, 8, 8), HEADS(2, 2), .mask = FULL, TTAB(4)},
    {.name = "n31_d1_norm", SIZES(31, 31, 1, 1), HEADS(1, 1), .mask = FULL, NORM, BETA(0.2f)},
    {.name = "n32_d64_causal", SIZES(32, 32, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {.name = "n33_d65_gqa", SIZES(33, 33, 65, 65), HEADS(2, 1), .mask = FULL, BETA(-0.1f)},
    {.name = "n47_d64_causal_ctab", SIZES(47, 47, 64, 64), HEADS(1, 1), .mask = CAUSAL, CTAB(16)},
    {.name = "n48_d8_norm", SIZES(48, 48, 8, 8), HEADS(1, 1), .mask = FULL, NORM},
    {.name = "n49_d7_causal", SIZES(49, 49, 7, 7), HEADS(2, 2), .mask = CAUSAL, BETA(0.3f)},
    {.name = "n95_d64_ttab", SIZES(95, 95, 64, 64), HEADS(1, 1), .mask = FULL, TTAB(32)},
    {.name = "n96_d128_causal_norm", SIZES(96, 96, 128, 128), HEADS(1, 1), .mask = CAUSAL, NORM, BETA(0.05f)},
    {.name = "n97_d8_gqa", SIZES(97, 97, 8, 8), HEADS(2, 1), .mask = FULL, BETA(0.5f)},
    {.name = "n130_d65_causal_ctab", SIZES(130, 130, 65, 65), HEADS(1, 1), .mask = CAUSAL, CTAB(200)},
    {.name = "n193_d64_causal", SIZES(193, 193, 64, 64), HEADS(1, 1), .mask = CAUSAL, NORM},
    {.name = "nq97_nkv289_d32", SIZES(97, 289, 32, 32), HEADS(1, 1), .mask = FULL, TTAB(50)},
    /* head widths, dv != d */
    {.name = "d1_causal", SIZES(50, 50, 1, 1), HEADS(2, 2), .mask = CAUSAL, BETA(0.1f)},
    {.name = "d3_dv1", SIZES(50, 50, 3, 1), HEADS(2, 2), .mask = CAUSAL, CTAB(7)},
    {.name = "d65_dv3_causal", SIZES(50, 50, 65, 3), HEADS(2, 2), .mask = CAUSAL},
    {.name = "d64_dv7", SIZES(33, 33, 64, 7), HEADS(1, 1), .mask = FULL, NORM},
    {.name = "d8_dv65", SIZES(49, 70, 8, 65), HEADS(2, 1), .mask = FULL, TTAB(9)},
    {.name = "d1_dv128_causal", SIZES(20, 20, 1, 128), HEADS(1, 1), .mask = CAUSAL, BETA(0.5f)},
    /* heads: GQA, MQA */
    {.name = "gqa_4_2_causal", SIZES(37, 37, 16, 16), HEADS(4, 2), .mask = CAUSAL, CTAB(8), NORM},
    {.name = "mqa_6_1", SIZES(50, 50, 64, 32), HEADS(6, 1), .mask = FULL, BETA(0.1f)},
    {.name = "mqa_6_1_causal_ttab", SIZES(50, 50, 8, 8), HEADS(6, 1), .mask = CAUSAL, TTAB(5)},
    /* chunked prefill (n_q < n_kv) and decode, bottom-right */
    {.name = "chunk_16_of_100", SIZES(16, 100, 32, 32), HEADS(2, 1), .mask = CAUSAL, CTAB(40)},
    {.name = "chunk_49_of_145_norm", SIZES(49, 145, 8, 8), HEADS(1, 1), .mask = CAUSAL, NORM},
    {.name = "decode_1_of_97_gqa", SIZES(1, 97, 64, 64), HEADS(4, 2), .mask = CAUSAL, CTAB(64)},
    {.name = "decode_1_of_130_ttab", SIZES(1, 130, 16, 16), HEADS(2, 1), .mask = CAUSAL, TTAB(20), NORM},
    {.name = "decode_1_of_1", SIZES(1, 1, 16, 16), HEADS(2, 1), .mask = CAUSAL, BETA(0.5f)},
    /* n_q > n_kv: the first n_q - n_kv rows sit at negative positions */
    {.name = "nq40_nkv10_causal", SIZES(40, 10, 16, 16), HEADS(1, 1), .mask = CAUSAL, NORM},
    {.name = "nq97_nkv48_causal_ctab", SIZES(97, 48, 8, 8), HEADS(2, 1), .mask = CAUSAL, CTAB(10)},
    {.name = "nq30_nkv7_full_ttab", SIZES(30, 7, 8, 8), HEADS(1, 1), .mask = FULL, TTAB(6), NORM},
    /* windows (left, right) */
    {.name = "win_3_0", SIZES(70, 70, 16, 16), HEADS(2, 1), .mask = WINDOW(3, 0), BETA(0.2f)},
    {.name = "win_3_0_norm_ctab", SIZES(130, 130, 8, 8), HEADS(1, 1), .mask = WINDOW(3, 0), CTAB(3), NORM},
    {.name = "win_17_2", SIZES(130, 130, 16, 16), HEADS(1, 1), .mask = WINDOW(17, 2), TTAB(5)},
    {.name = "win_17_2_chunked", SIZES(33, 130, 16, 16), HEADS(2, 2), .mask = WINDOW(17, 2), NORM},
    {.name = "win_5_9", SIZES(97, 97, 9, 9), HEADS(1, 1), .mask = WINDOW(5, 9), TTAB(12), NORM},
    {.name = "win_0_U", SIZES(49, 49, 8, 8), HEADS(1, 1), .mask = WINDOW(0, U), CTAB(4)},
    {.name = "win_U_4", SIZES(97, 97, 8, 8), HEADS(2, 1), .mask = WINDOW(U, 4), TTAB(7), NORM},
    {.name = "win_0_0_nq_gt_nkv", SIZES(20, 8, 8, 8), HEADS(1, 1), .mask = WINDOW(0, 0), BETA(0.3f)},
    {.name = "win_2_5_decode", SIZES(1, 50, 8, 8), HEADS(1, 1), .mask = WINDOW(2, 5), TTAB(3)},
    /* chunk-local masks (chunks counted from key 0) */
    {.name = "chunk4_full", SIZES(10, 10, 8, 8), HEADS(1, 1), .mask = MASK(U, U, 4), BETA(0.1f)},
    {.name = "chunk4_causal", SIZES(10, 10, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 4), NORM},
    {.name = "chunk4_full_130_ttab", SIZES(130, 130, 16, 16), HEADS(2, 1), .mask = MASK(U, U, 4), TTAB(4)},
    {.name = "chunk7_full", SIZES(97, 97, 16, 16), HEADS(2, 2), .mask = MASK(U, U, 7), NORM},
    {.name = "chunk7_causal_ctab", SIZES(100, 100, 16, 16), HEADS(2, 1), .mask = MASK(U, 0, 7), CTAB(7)},
    {.name = "chunk7_causal_chunked", SIZES(30, 130, 9, 9), HEADS(1, 1), .mask = MASK(U, 0, 7), NORM},
    {.name = "chunk7_decode", SIZES(1, 100, 64, 64), HEADS(4, 2), .mask = MASK(U, 0, 7), CTAB(7)},
    {.name = "chunk3_causal_nq_gt_nkv", SIZES(20, 8, 8, 8), HEADS(1, 1), .mask = MASK(U, 0, 3), NORM},
    {.name = "chunk64_causal", SIZES(200, 200, 16, 16), HEADS(1, 1), .mask = MASK(U, 0, 64), CTAB(64)},
    {.name = "chunk100_full_gqa", SIZES(130, 130, 8, 12), HEADS(4, 2), .mask = MASK(U, U, 100), TTAB(100)},
    /* bias: beta of both signs and 0, tables with L = 1 and L above the lengths */
    {.name = "beta_pos", SIZES(49, 49, 16, 16), HEADS(1, 1), .mask = CAUSAL, BETA(1.0f)},
    {.name = "beta_neg", SIZES(49, 49, 16, 16), HEADS(1, 1), .mask = FULL, BETA(-0.3f)},
    {.name = "beta_0_norm", SIZES(49, 49, 16, 16), HEADS(1, 1), .mask = CAUSAL, BETA(0.0f), NORM},
    {.name = "ctab_L1", SIZES(50, 50, 8, 8), HEADS(1, 1), .mask = CAUSAL, CTAB(1)},
    {.name = "ctab_L1_full", SIZES(50, 50, 8, 8), HEADS(1, 1), .mask = FULL, CTAB(1)},
    {.name = "ttab_L1", SIZES(50, 50, 8, 8), HEADS(1, 1), .mask = FULL, TTAB(1), NORM},
    {.name = "ctab_full_reads_0_ahead", SIZES(60, 60, 8, 8), HEADS(1, 1), .mask = FULL, CTAB(20)},
    {.name = "ttab_L_gt_n", SIZES(40, 40, 8, 8), HEADS(1, 1), .mask = FULL, TTAB(300), .amp = 2.0f},
    {.name = "ctab_L_gt_n_chunked", SIZES(20, 60, 8, 8), HEADS(1, 1), .mask = CAUSAL, CTAB(1000), .amp = 2.0f},
    /* scales */
    {.name = "scale_-0.5", SIZES(33, 33, 16, 16), HEADS(1, 1), .mask = FULL, SCALE(-0.5f), BETA(0.2f)},
    {.name = "scale_0_causal", SIZES(20, 20, 8, 8), HEADS(1, 1), .mask = CAUSAL, SCALE(0.0f), CTAB(8)},
    {.name = "scale_3_norm", SIZES(40, 40, 32, 32), HEADS(1, 1), .mask = FULL, SCALE(3.0f), NORM},
    /* large arguments: |x| up to ~1e3 (scale 10 on q.k ~ 95; wide data: q.k up to ~3e3 / sqrt(8)) */
    {.name = "large_d64", SIZES(65, 65, 64, 64), HEADS(1, 1), .mask = FULL, SCALE(10.0f), .data = LRG},
    {.name = "large_d8_causal_norm", SIZES(49, 49, 8, 8), HEADS(2, 1), .mask = CAUSAL, SCALE(10.0f), .data = LRG, NORM},
    {.name = "wide_d8_causal", SIZES(97, 97, 8, 8), HEADS(1, 1), .mask = CAUSAL, .data = WIDE, CTAB(9), .amp = 50.0f},
    {.name = "wide_d1_full", SIZES(97, 97, 1, 1), HEADS(1, 1), .mask = FULL, .data = WIDE, BETA(-100.0f)},
    {.name = "wide_d65_chunk7", SIZES(60, 60, 65, 65), HEADS(1, 1), .mask = MASK(U, 0, 7), .data = WIDE, NORM},
    {.name = "positive_d64_norm", SIZES(100, 100, 64, 64), HEADS(1, 1), .mask = CAUSAL, .data = POS, NORM},
    /* layouts: head-major, prime padding, packed QKV [n][3][H][d] */
    {.name = "head_major", SIZES(37, 37, 16, 16), HEADS(2, 2), .mask = CAUSAL, .layout = H, CTAB(5)},
    {.name = "head_major_gqa", SIZES(50, 60, 8, 12), HEADS(4, 2), .mask = FULL, .layout = H, NORM},
    {.name = "padded_causal", SIZES(49, 49, 13, 11), HEADS(2, 1), .mask = CAUSAL, .layout = P, TTAB(6)},
    {.name = "head_padded", SIZES(33, 33, 7, 9), HEADS(3, 1), .mask = WINDOW(5, 9), .layout = HP, BETA(0.2f)},
    {.name = "packed_mha_causal", SIZES(40, 40, 16, 16), HEADS(4, 4), .mask = CAUSAL, .layout = PK, NORM},
    {.name = "packed_gqa_chunk4", SIZES(41, 41, 8, 8), HEADS(4, 2), .mask = MASK(U, U, 4), .layout = PK, CTAB(4)},
    {.name = "packed_mqa_dv", SIZES(30, 30, 64, 32), HEADS(6, 1), .mask = CAUSAL, .layout = PK, TTAB(8)},
};
#define GAU_NCASES (sizeof gau_cases / sizeof gau_cases[0])
static size_t gau_sel[GAU_NCASES];

START_TEST(gau_matches_reference) {
  const size_t idx = gau_sel[_i];
  const gau_case *c = &gau_cases[idx];
  gau_setup s;
  gau_setup_make(&s, c, 1000 + idx);
  gau_check_call(c->name, &s.d, &s.x, c->layout == PK ? T : c->layout, gau_misalign[idx % 4]);
  gau_setup_free(&s);
}
END_TEST

/* Inputs may overlap one another: q = k = v, one buffer. */
START_TEST(gau_shared_inputs) {
  tu_rng rng = tu_rng_of(77);
  tu_tensor t;
  tu_tensor_alloc(&t, T, 45, 2, 16, 0);
  tu_tensor_fill(&t, &rng, -1.0f, 1.0f);
  float *table = gau_table_make(ATTN_GAU_BIAS_CAUSAL, 10, 0.0f, &rng);
  attn_gau_desc d;
  gau_desc(&d, 45, 45, 2, 2, 16, 16, attn_mask_causal());
  d.bias = ATTN_GAU_BIAS_CAUSAL;
  d.bias_table = table;
  d.bias_len = 10;
  tu_tensor o;
  gau_call(&d, &t, &t, &t, T, 0, &o);
  gau_ref ref;
  gau_ref_compute(&d, &t, &t, &t, &ref);
  gau_compare("gau.o", "q=k=v", &o, ref.o, &ref, 45, 16, 1.0);
  gau_ref_free(&ref);
  tu_tensor_free(&o);
  tu_tensor_free(&t);
  free(table);
}
END_TEST

/* A decode query's row stride is unconstrained (the count of rows is 1): 0 is valid. */
START_TEST(gau_decode_row_stride_zero) {
  tu_rng rng = tu_rng_of(78);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, 1, 30, 4, 2, 2, 8, 8);
  x.q.l.row_stride = 0;
  attn_gau_desc d;
  gau_desc(&d, 1, 30, 4, 2, 8, 8, attn_mask_causal());
  d.normalize = 1;
  gau_check_call("q row stride 0", &d, &x, T, 0);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The named forms                                                                             */
/* ------------------------------------------------------------------------------------------ */
/* FLASH's quadratic part (Hua et al. 2022): scale 1/n with n a training-length constant (1/512,
 * never the current number of keys) or 1/g of the chunk-local mask, a relative-position table
 * (the causal Toeplitz one, or an expanded two-sided one for the bidirectional form), t = 1.
 * Wide data makes q.k ~ +-1e3, so that q.k / 512 is of the order of the bias. */
/* A row of FLASH: wide data, one scale, one table, amplitude 1. */
#define FLASH(sizes, heads, mask_, scale_, table) \
  sizes, heads, .mask = mask_, SCALE(scale_), .data = WIDE, table, .amp = 1.0f
static const gau_case flash_cases[] = {
    {.name = "flash causal 1/512 Toeplitz L=128",
     FLASH(SIZES(200, 200, 64, 64), HEADS(1, 1), CAUSAL, 1.0f / 512, CTAB(128))},
    {.name = "flash causal 1/n_kv GQA", FLASH(SIZES(97, 97, 32, 32), HEADS(2, 1), CAUSAL, 1.0f / 97, CTAB(64))},
    {.name = "flash chunk g=64 causal 1/64",
     FLASH(SIZES(150, 150, 32, 32), HEADS(1, 1), MASK(U, 0, 64), 1.0f / 64, CTAB(64))},
    {.name = "flash chunk g=4 bidirectional 1/4 two-sided",
     FLASH(SIZES(130, 130, 16, 16), HEADS(1, 1), MASK(U, U, 4), 0.25f, TTAB(4))},
    {.name = "flash decode chunk g=32",
     FLASH(SIZES(1, 100, 64, 64), HEADS(4, 2), MASK(U, 0, 32), 1.0f / 512, CTAB(32))},
};
#define FLASH_NCASES (sizeof flash_cases / sizeof flash_cases[0])

START_TEST(gau_flash_quad) {
  gau_setup s;
  gau_setup_make(&s, &flash_cases[_i], 1500 + (uint64_t)_i);
  ck_assert_int_eq(s.d.normalize, 0);
  gau_check_call(flash_cases[_i].name, &s.d, &s.x, T, gau_misalign[_i % 4]);
  gau_setup_free(&s);
}
END_TEST

/* Su's form (bert4keras): scale 1/sqrt(d) (the descriptor's default), causal, normalised by the
 * count: row i = sum_{j <= i} relu(q_i . k_j / sqrt(d))^2 v_j / (i + 1). Checked against the
 * reference and against that closed formula, written out here (n_q = n_kv, no bias). */
static const struct {
  size_t n, h_q, h_kv, d, dv;
} su_cases[] = {{97, 1, 1, 64, 64}, {130, 4, 2, 7, 9}, {49, 2, 2, 128, 16}};
#define SU_NCASES (sizeof su_cases / sizeof su_cases[0])

START_TEST(gau_su_form) {
  const size_t n = su_cases[_i].n, hq = su_cases[_i].h_q, hkv = su_cases[_i].h_kv, dd = su_cases[_i].d,
               dv = su_cases[_i].dv;
  tu_rng rng = tu_rng_of(1600 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  attn_gau_desc d;
  gau_desc(&d, n, n, hq, hkv, dd, dv, attn_mask_causal());
  d.normalize = 1;
  tu_tensor o;
  gau_call(&d, &x.q, &x.k, &x.v, T, 4, &o);
  gau_ref ref;
  gau_ref_compute(&d, &x.q, &x.k, &x.v, &ref);
  gau_compare("gau.o", "Su's form vs reference", &o, ref.o, &ref, n, dd, 1.0);
  /* the closed formula, in double, with the exact 1/sqrt(d) (the descriptor holds it rounded to
   * float: a relative 2u on each square, inside the bound's constant) */
  double *su = malloc(sizeof(double) * n * hq * dv);
  ck_assert_ptr_nonnull(su);
  for (size_t i = 0; i < n; ++i)
    for (size_t h = 0; h < hq; ++h)
      for (size_t c = 0; c < dv; ++c) {
        double acc = 0.0;
        for (size_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (size_t f = 0; f < dd; ++f)
            dot += (double)*tu_at(&x.q, i, h, f) * (double)*tu_at(&x.k, j, h / (hq / hkv), f);
          const double r = fmax(dot / sqrt((double)dd), 0.0);
          acc += r * r * (double)*tu_at(&x.v, j, h / (hq / hkv), c);
        }
        su[(i * hq + h) * dv + c] = acc / (double)(i + 1);
      }
  gau_compare("gau.o", "Su's form vs closed formula", &o, su, &ref, n, dd, 1.0);
  free(su);
  gau_ref_free(&ref);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* Chunk-local masks with g = 4 over n = 10 (chunks {0..3}, {4..7}, {8, 9}), bidirectional and
 * causal: q = k = 1 (d = 1), scale 1, beta 0 make every visible weight exactly 1, and v_j = j + 1,
 * so that o_i is exactly the sum of (j + 1) over the keys row i sees (small integers: exact in
 * any order), and with normalize the mean of them. The expectation is written from the chunk
 * definition, not with the reference's mask. Also n_q = 3 < n_kv (rows at positions 7, 8, 9). */
START_TEST(gau_chunk_local_g4_n10) {
  enum { N = 10, G = 4 };
  float q[N], k[N], v[N];
  for (int j = 0; j < N; ++j) {
    q[j] = k[j] = 1.0f;
    v[j] = (float)(j + 1);
  }
  for (int form = 0; form < 8; ++form) {
    const int causal = form & 1, normalize = (form >> 1) & 1, nq = (form & 4) ? 3 : N;
    attn_gau_desc d;
    gau_desc(&d, (size_t)nq, N, 1, 1, 1, 1, (attn_mask)MASK(U, causal ? 0 : U, G));
    d.scale = 1.0f;
    d.normalize = normalize;
    tu_tensor qt = {.data = q + (N - nq), .n = (size_t)nq, .h = 1, .w = 1, .l = {1, 1}, .span = (size_t)nq};
    tu_tensor kt = {.data = k, .n = N, .h = 1, .w = 1, .l = {1, 1}, .span = N};
    tu_tensor vt = {.data = v, .n = N, .h = 1, .w = 1, .l = {1, 1}, .span = N};
    tu_tensor o;
    gau_call(&d, &qt, &kt, &vt, T, 0, &o);
    for (int i = 0; i < nq; ++i) {
      const int p = N - nq + i;
      double sum = 0.0, count = 0.0;
      for (int j = 0; j < N; ++j)
        if (j / G == p / G && (!causal || j <= p)) {
          sum += j + 1;
          count += 1.0;
        }
      const double want = normalize ? sum / count : sum, got = (double)*tu_at(&o, (size_t)i, 0, 0);
      ck_assert_msg(normalize ? fabs(got - want) <= 4.0 * TOL_U * want : got == want,
                    "chunk 4, n_q %d, %s%s: row %d (position %d): got %.9g, want %.9g", nq,
                    causal ? "causal" : "bidirectional", normalize ? ", normalised" : "", i, p, got, want);
    }
    tu_tensor_free(&o);
  }
}
END_TEST

/* The bias lookups read back exactly: q = 0 makes every score exactly the bias, and v = I (dv =
 * n_kv) puts the weight of key j in column j: o_ij = A_ij = relu(bias_ij)^2 where j is visible, 0
 * elsewhere. Table entries are multiples of 1/8 (their squares are exact floats), so the library
 * must match exactly, for both table kinds with L = 1, L = 3 (clamped) and L above the lengths,
 * the scalar beta, full / causal / windowed / chunk-local masks, n_q = n_kv and n_q < n_kv. */
START_TEST(gau_bias_lookup_exact) {
  static const struct {
    attn_gau_bias kind;
    size_t len;
    float beta;
  } biases[] = {{ATTN_GAU_BIAS_CAUSAL, 1, 0},     {ATTN_GAU_BIAS_CAUSAL, 3, 0},    {ATTN_GAU_BIAS_CAUSAL, 20, 0},
                {ATTN_GAU_BIAS_TWO_SIDED, 1, 0},  {ATTN_GAU_BIAS_TWO_SIDED, 3, 0}, {ATTN_GAU_BIAS_TWO_SIDED, 20, 0},
                {ATTN_GAU_BIAS_SCALAR, 0, 0.375f}};
  static const attn_mask masks[] = {FULL, CAUSAL, WINDOW(2, 3), MASK(U, U, 5)};
  enum { NKV = 12, D = 3 };
  float table[39];
  for (int t = 0; t < 39; ++t) table[t] = 0.125f * (float)((t * 7) % 13 - 4); /* -0.5 .. 1, varied */
  tu_rng rng = tu_rng_of(1700);
  tu_tensor q, k, v;
  tu_tensor_alloc(&q, T, NKV, 1, D, 0);
  tu_tensor_alloc(&k, T, NKV, 1, D, 0);
  tu_tensor_alloc(&v, T, NKV, 1, NKV, 0);
  tu_tensor_fill(&k, &rng, -1.0f, 1.0f);
  for (size_t i = 0; i < NKV; ++i) {
    for (size_t c = 0; c < D; ++c) *tu_at(&q, i, 0, c) = 0.0f;
    for (size_t c = 0; c < NKV; ++c) *tu_at(&v, i, 0, c) = i == c ? 1.0f : 0.0f;
  }
  for (size_t b = 0; b < sizeof biases / sizeof biases[0]; ++b)
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; ++m)
      for (size_t nq = NKV; nq > 0; nq = nq == NKV ? 5 : 0) { /* 12, then 5 */
        attn_gau_desc d;
        gau_desc(&d, nq, NKV, 1, 1, D, NKV, masks[m]);
        d.bias = biases[b].kind;
        d.beta = biases[b].beta;
        d.bias_table = biases[b].kind == ATTN_GAU_BIAS_SCALAR ? NULL : table;
        d.bias_len = biases[b].len;
        const tu_tensor qv = tu_rows_view(&q, NKV - nq, nq);
        tu_tensor o;
        gau_call(&d, &qv, &k, &v, T, 0, &o);
        const ref_gau_problem p = tu_gau_problem(&d, &qv, &k, &v);
        for (size_t i = 0; i < nq; ++i)
          for (size_t j = 0; j < NKV; ++j) {
            const double want = ref_gau_weight(&p, i, 0, j), got = (double)*tu_at(&o, i, 0, j);
            ck_assert_msg(got == want, "bias %zu (kind %d, L %zu), mask %zu, n_q %zu: A[%zu][%zu] got %.9g want %.9g",
                          b, (int)biases[b].kind, biases[b].len, m, nq, i, j, got, want);
          }
        tu_tensor_free(&o);
      }
  tu_tensor_free(&q);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Descriptor defaults, workspace                                                              */
/* ------------------------------------------------------------------------------------------ */
START_TEST(gau_desc_init_defaults) {
  attn_gau_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_gau_desc_init(&d, 5, 9, 6, 2, 64, 40), ATTN_OK);
  tu_assert_shape_defaults("gau shape defaults", &d.shape, 64);
  ck_assert(d.mask.left == ATTN_UNBOUNDED && d.mask.right == ATTN_UNBOUNDED && d.mask.chunk == 0);
  ck_assert(fabs((double)d.scale - 0.125) <= 0x1p-24);
  ck_assert_int_eq(d.bias, ATTN_GAU_BIAS_SCALAR);
  ck_assert(d.beta == 0.0f);
  ck_assert_ptr_null(d.bias_table);
  ck_assert_uint_eq(d.bias_len, 0);
  ck_assert_int_eq(d.normalize, 0);
  ck_assert_int_eq(attn_gau_desc_init(&d, 3, 3, 1, 1, 7, 7), ATTN_OK);
  ck_assert(fabs((double)d.scale - 1.0 / sqrt(7.0)) <= 0x1p-24);
  ck_assert_int_eq(attn_gau_desc_init(NULL, 1, 1, 1, 1, 1, 1), ATTN_E_NULL_POINTER);
}
END_TEST

/* The size depends on d, dv, the heads and the path, not on n_q or n_kv (nor on the bias or the
 * normalisation, which need no per-row memory beyond softmax's). */
START_TEST(gau_workspace_independent_of_lengths) {
  static const size_t n[][2] = {{1, 1}, {7, 3}, {100, 1000}, {1000, 100}, {48, 96}};
  static const float table[9] = {0};
  size_t first = 0;
  for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
    attn_gau_desc d;
    gau_desc(&d, n[i][0], n[i][1], 4, 2, 64, 32, attn_mask_causal());
    if (i % 2) {
      d.bias = ATTN_GAU_BIAS_TWO_SIDED;
      d.bias_table = table;
      d.bias_len = 5;
      d.normalize = 1;
    }
    size_t ws = 0;
    ck_assert_int_eq(attn_gau_workspace_size(&d, &ws), ATTN_OK);
    if (i == 0) first = ws;
    ck_assert_uint_eq(ws, first);
  }
}
END_TEST

START_TEST(gau_workspace_size_null_pointers) {
  attn_gau_desc d;
  ck_assert_int_eq(attn_gau_desc_init(&d, 5, 7, 4, 2, 8, 6), ATTN_OK);
  size_t bytes = 0;
  ck_assert_int_eq(attn_gau_workspace_size(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_gau_workspace_size(&d, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

/* The scalar bias reads no table: a table pointer to NaNs with L = 0 beside SCALAR is ignored. */
START_TEST(gau_scalar_bias_ignores_table_fields) {
  static const float nan_table[3] = {NAN, NAN, NAN};
  tu_rng rng = tu_rng_of(7100);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, 30, 30, 2, 1, 1, 8, 8);
  attn_gau_desc d;
  gau_desc(&d, 30, 30, 2, 1, 8, 8, attn_mask_causal());
  d.beta = 0.25f;
  d.bias_table = nan_table;
  d.bias_len = 0;
  gau_check_call("scalar bias beside a NaN table, L 0", &d, &x, T, 0);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid call (causal mask, a causal bias table of */
/* L = 5, normalised): every shared row of bad_input.h (no lse), then GAU's own; the call (and,  */
/* for descriptor faults, attn_gau_workspace_size) answers the row's status and writes nothing. */
/* ------------------------------------------------------------------------------------------ */
enum { NQ = 5, NKV = 7, HQ = 4, HKV = 2, D = 8, DV = 6, BL = 5 };
/* the table buffer: 2 BL - 1 entries used; room for an o span (NQ HQ DV = 120) on either side */
enum { TABLE_BUF = 512, TABLE_AT = 200 };

/* GAU's own rows: edits of the descriptor (GD_*) and of the table buffer (TB: the index of an entry
 * from the table's start). desc_level 1: attn_gau_workspace_size must answer the same status
 * (every validation status but those of the pointers: the bias table's pointer, length and
 * entries are part of the descriptor). */
enum { OB_DESC = TU_OB_OWN, OB_TBUF };
#define BV(s, lvl)       .fault = TU_BAD_OWN, .expect = (s), .desc_level = (lvl)
#define GD_I(f, val)     TU_SET_I(OB_DESC, attn_gau_desc, f, val)
#define GD_F(f, val)     TU_SET_F(OB_DESC, attn_gau_desc, f, val)
#define GD_Z(f, val)     TU_SET_Z(OB_DESC, attn_gau_desc, f, val)
#define TB(i, val)       TU_ELEM_F(OB_TBUF, TABLE_AT + (i), val)
#define SCALAR_BETA(val) GD_I(bias, ATTN_GAU_BIAS_SCALAR), GD_F(beta, val)
#define TWO_SIDED        GD_I(bias, ATTN_GAU_BIAS_TWO_SIDED)
static const tu_bad_case bv_cases[] = {
    {"normalize 2", BV(ATTN_E_BAD_ARGUMENT, 1), {GD_I(normalize, 2)}},
    {"normalize -1", BV(ATTN_E_BAD_ARGUMENT, 1), {GD_I(normalize, -1)}},
    {"bias kind 3", BV(ATTN_E_BAD_BIAS, 1), {GD_I(bias, 3)}},
    {"bias kind -1", BV(ATTN_E_BAD_BIAS, 1), {GD_I(bias, -1)}},
    {"beta NaN", BV(ATTN_E_BAD_BIAS, 1), {SCALAR_BETA(NAN)}},
    {"beta +inf", BV(ATTN_E_BAD_BIAS, 1), {SCALAR_BETA(INFINITY)}},
    {"beta -inf", BV(ATTN_E_BAD_BIAS, 1), {SCALAR_BETA(-INFINITY)}},
    {"causal table NULL", BV(ATTN_E_BAD_BIAS, 1), {TU_NUL(OB_DESC, attn_gau_desc, bias_table)}},
    {"two-sided table NULL", BV(ATTN_E_BAD_BIAS, 1), {TWO_SIDED, TU_NUL(OB_DESC, attn_gau_desc, bias_table)}},
    {"causal table L 0", BV(ATTN_E_BAD_BIAS, 1), {GD_Z(bias_len, 0)}},
    {"two-sided table L 0", BV(ATTN_E_BAD_BIAS, 1), {TWO_SIDED, GD_Z(bias_len, 0)}},
    {"two-sided table 2L - 1 overflows", BV(ATTN_E_BAD_BIAS, 1), {TWO_SIDED, GD_Z(bias_len, SIZE_MAX / 2 + 1)}},
    {"causal table[0] NaN", BV(ATTN_E_BAD_BIAS, 1), {TB(0, NAN)}},
    {"causal table[L-1] NaN", BV(ATTN_E_BAD_BIAS, 1), {TB(BL - 1, NAN)}},
    /* beyond the L entries a causal table would read */
    {"two-sided table[2L-2] +inf", BV(ATTN_E_BAD_BIAS, 1), {TWO_SIDED, TB(2 * BL - 2, INFINITY)}},
    {"two-sided table[L] -inf", BV(ATTN_E_BAD_BIAS, 1), {TWO_SIDED, TB(BL, -INFINITY)}},
    {"o is the bias table", BV(ATTN_E_ALIASING, 0), {TU_PTR(TU_OB_BAD, tu_bad, o_arg, OB_TBUF, TABLE_AT)}},
    /* o's span (NQ HQ DV floats) ends on the table's last entry */
    {"o ends inside the bias table",
     BV(ATTN_E_ALIASING, 0),
     {TU_PTR(TU_OB_BAD, tu_bad, o_arg, OB_TBUF, TABLE_AT + BL - NQ * HQ * DV)}},
};
#define BV_NOWN (sizeof bv_cases / sizeof bv_cases[0])

START_TEST(gau_rejects_bad_input) {
  const tu_bad_case *c = tu_bad_row((size_t)_i, 0, bv_cases);
  tu_rng rng = tu_rng_of(100 + (uint64_t)_i);
  float *tbuf = malloc(sizeof(float) * TABLE_BUF), *tcopy = malloc(sizeof(float) * TABLE_BUF);
  ck_assert(tbuf && tcopy);
  for (size_t e = 0; e < TABLE_BUF; ++e) tbuf[e] = tu_rng_range(&rng, -0.5f, 0.5f);
  attn_gau_desc d;
  ck_assert_int_eq(attn_gau_desc_init(&d, NQ, NKV, HQ, HKV, D, DV), ATTN_OK);
  d.mask = attn_mask_causal();
  d.bias = ATTN_GAU_BIAS_CAUSAL;
  d.bias_table = tbuf + TABLE_AT;
  d.bias_len = BL;
  d.normalize = 1;
  size_t need = 0;
  TU_CALL_WS(attn_gau, &d, &need);
  tu_bad b;
  tu_bad_make(&b, &rng, &d.shape, 2, 0, need);
  tu_bad_apply(&b, c, &d.shape, &d.scale, NULL, (void *[]){&d, tbuf}, 2);
  memcpy(tcopy, tbuf, sizeof(float) * TABLE_BUF);
  const attn_gau_desc *dp = b.desc_null ? NULL : &d;
  tu_bad_assert_status(c, "attn_gau", attn_gau(dp, b.q, b.k, b.v, b.o_arg, b.ws_arg, b.ws_size));
  size_t bytes = TU_BAD_UNTOUCHED;
  tu_bad_assert_query(c, "attn_gau_workspace_size", attn_gau_workspace_size(&d, &bytes), bytes);
  /* nothing written: o still all sentinel, inputs and the table unchanged, guards intact */
  tu_bad_assert_untouched(&b);
  tu_assert_same_bits("bias table buffer after a rejected call", tcopy, tbuf, sizeof(float) * TABLE_BUF);
  tu_bad_free(&b);
  free(tbuf);
  free(tcopy);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"reference", gau_matches_reference, (int)TU_SELECT_CASES(gau_cases, gau_sel, dv)},
    {"reference", gau_shared_inputs, 1}, {"reference", gau_decode_row_stride_zero, 1},
    {"reference", gau_flash_quad, (int)FLASH_NCASES}, {"reference", gau_su_form, (int)SU_NCASES},
    {"reference", gau_chunk_local_g4_n10, 1}, {"reference", gau_bias_lookup_exact, 1},
  {"api", gau_desc_init_defaults, 1}, {"api", gau_workspace_independent_of_lengths, 1},
    {"api", gau_workspace_size_null_pointers, 1}, {"api", gau_scalar_bias_ignores_table_fields, 1},
  {"bad_input", gau_rejects_bad_input, (int)tu_bad_rows(0, BV_NOWN)})
/* clang-format on */
