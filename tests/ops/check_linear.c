/*
 * Linear attention and its state, on the ISA path named by ATTN_ISA, against the float64
 * reference: the shape table and the core properties. Every feature map: identity, elu1, relu,
 * and the exponential maps exp, favor (FAVOR+) and dsoftmax (exact per-feature offsets in the
 * state). TCases: "reference" (the shape table, outputs and states; separate query, key and value
 * head counts; scale; the non-finite policy; rows without keys) and "properties" (chunkwise
 * prefill vs recurrent decode for several chunk sizes, prefill state continuing into decode,
 * bit-exact snapshot / restore, a prefill split in two calls, token-major vs head-major inputs).
 * The other plain linear suites: check_linear_maps.c (elu1's accuracy; FAVOR+, exp and dsoftmax
 * against their formulas and under stress), check_linear_window.c (windowed linear attention),
 * check_linear_flash.c (FLASH's chunk-exclusive form), check_linear_state.c (the state, the
 * descriptor's defaults, size queries, reentrancy, bad input); gates and decays:
 * check_linear_gates.c. Their shared helpers: tests/common/linear_util.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LU_SHORT_NAMES /* linear_util.h: T, H, ELU, FAV, SIZES, ... */
#include "linear_util.h"
#include "test_util.h"
#include "tolerances.h"

/* Every field left out is the descriptor's default: causal, elu1, normalised, default chunk, eps
 * and scale, feature size; token-major uniform data; a state passed (causal). */
typedef struct ln_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_k, h_v, d, dv;
  int identity;     /* 1: identity map, 0: elu1 (or relu) */
  int relu;         /* 1: relu map */
  int bidir;        /* 1: full mask (state NULL), 0: causal */
  int unnorm;       /* 1: normalize = 0 */
  size_t chunk;     /* 0: the path's default */
  size_t m;         /* 0: the map's own */
  float eps, scale; /* with set_eps / set_scale */
  int set_eps, set_scale;
  tu_layout_kind layout;
  tu_data data;
  size_t prefix; /* causal: tokens absorbed into the state by an earlier call */
  int no_state;  /* causal: 1 pass NULL */
  int xmap;      /* an exponential map (exp, favor, dsoftmax) instead of elu1 / identity / relu */
  int wsrc;      /* favor's W: 0 seed (chi), 1 seed (norms sqrt(d)), 2 the caller's Gaussian floats */
  uint64_t seed; /* favor: the seed of a seed source */
} ln_case;

/* Chunk 64 (scalar) or 48 by default: sizes around them; vectors of 8 and 4 floats for d. */
static const ln_case ln_cases[] = {
    /* causal, elu1, normalised, default chunk: sizes */
    {.name = "n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1, 1)},
    {.name = "n2_d7", SIZES(2, 2, 7, 7), HEADS(1, 1, 1)},
    {.name = "n7_d8", SIZES(7, 7, 8, 8), HEADS(1, 1, 1)},
    {.name = "n8_d64", SIZES(8, 8, 64, 64), HEADS(1, 1, 1)},
    {.name = "n9_d65", SIZES(9, 9, 65, 65), HEADS(1, 1, 1)},
    {.name = "n31_d128", SIZES(31, 31, 128, 128), HEADS(1, 1, 1)},
    {.name = "n47_d1", SIZES(47, 47, 1, 1), HEADS(1, 1, 1)},
    {.name = "n48_d7", SIZES(48, 48, 7, 7), HEADS(2, 1, 1)},
    {.name = "n49_d8", SIZES(49, 49, 8, 8), HEADS(1, 1, 1)},
    {.name = "n63_d64", SIZES(63, 63, 64, 64), HEADS(1, 1, 1)},
    {.name = "n64_d65", SIZES(64, 64, 65, 65), HEADS(1, 1, 1)},
    {.name = "n65_d128", SIZES(65, 65, 128, 128), HEADS(1, 1, 1)},
    {.name = "n95_d8", SIZES(95, 95, 8, 8), HEADS(2, 2, 2)},
    {.name = "n96_d7", SIZES(96, 96, 7, 7), HEADS(1, 1, 1)},
    {.name = "n97_d64", SIZES(97, 97, 64, 64), HEADS(1, 1, 1)},
    {.name = "n127_d65", SIZES(127, 127, 65, 65), HEADS(1, 1, 1)},
    {.name = "n128_d8", SIZES(128, 128, 8, 8), HEADS(1, 1, 1)},
    {.name = "n129_d64", SIZES(129, 129, 64, 64), HEADS(1, 1, 1)},
    {.name = "n200_d128", SIZES(200, 200, 128, 128), HEADS(1, 1, 1)},
    {.name = "n257_d64", SIZES(257, 257, 64, 64), HEADS(1, 1, 1)},
    /* head widths */
    {.name = "d1", SIZES(70, 70, 1, 1), HEADS(2, 1, 1)},
    {.name = "d3_dv4", SIZES(70, 70, 3, 4), HEADS(2, 1, 1)},
    {.name = "d4_dv5", SIZES(70, 70, 4, 5), HEADS(2, 1, 1)},
    {.name = "d5_dv3_unnorm", SIZES(70, 70, 5, 3), HEADS(2, 1, 1), .identity = 1, .unnorm = 1},
    {.name = "d7", SIZES(70, 70, 7, 7), HEADS(2, 1, 1)},
    {.name = "d8", SIZES(70, 70, 8, 8), HEADS(2, 1, 1)},
    {.name = "d64", SIZES(70, 70, 64, 64), HEADS(2, 1, 1)},
    {.name = "d65", SIZES(70, 70, 65, 65), HEADS(2, 1, 1)},
    {.name = "d128", SIZES(70, 70, 128, 128), HEADS(2, 1, 1)},
    /* dv != d */
    {.name = "d64_dv7", SIZES(50, 50, 64, 7), HEADS(1, 1, 1)},
    {.name = "d8_dv65", SIZES(65, 65, 8, 65), HEADS(2, 1, 1)},
    {.name = "d1_dv128", SIZES(33, 33, 1, 128), HEADS(1, 1, 1)},
    /* bidirectional (state must be NULL) */
    {.name = "bidir_30x50", SIZES(30, 50, 16, 16), HEADS(1, 1, 1), .bidir = 1},
    {.name = "bidir_1x1", SIZES(1, 1, 8, 8), HEADS(1, 1, 1), .bidir = 1},
    {.name = "bidir_65x17_d65", SIZES(65, 17, 65, 65), HEADS(2, 1, 1), .bidir = 1},
    {.name = "bidir_id_unnorm", SIZES(129, 129, 64, 64), HEADS(1, 1, 1), .identity = 1, .bidir = 1, .unnorm = 1},
    {.name = "bidir_id_unnorm_dv", SIZES(40, 100, 7, 9), HEADS(2, 2, 2), .identity = 1, .bidir = 1, .unnorm = 1},
    {.name = "bidir_elu_unnorm", SIZES(64, 64, 8, 8), HEADS(1, 1, 1), .bidir = 1, .unnorm = 1},
    {.name = "bidir_gqa_4_2", SIZES(37, 45, 16, 8), HEADS(4, 2, 2), .bidir = 1},
    {.name = "bidir_wide", SIZES(50, 50, 16, 16), HEADS(1, 1, 1), .bidir = 1, .data = WIDE},
    /* un-normalised causal */
    {.name = "id_unnorm_n47_d64", SIZES(47, 47, 64, 64), HEADS(1, 1, 1), .identity = 1, .unnorm = 1},
    {.name = "id_unnorm_n64_d128", SIZES(64, 64, 128, 128), HEADS(1, 1, 1), .identity = 1, .unnorm = 1},
    {.name = "id_unnorm_n65_d8", SIZES(65, 65, 8, 8), HEADS(2, 1, 1), .identity = 1, .unnorm = 1},
    {.name = "id_unnorm_n129_d65", SIZES(129, 129, 65, 65), HEADS(1, 1, 1), .identity = 1, .unnorm = 1},
    {.name = "elu_unnorm_n100", SIZES(100, 100, 16, 16), HEADS(1, 1, 1), .unnorm = 1},
    /* identity normalised (positive data keeps the denominator away from 0) */
    {.name = "id_norm_pos", SIZES(50, 50, 16, 16), HEADS(1, 1, 1), .identity = 1, .data = POS},
    {.name = "id_norm_pos_bidir", SIZES(30, 30, 8, 8), HEADS(2, 2, 2), .identity = 1, .bidir = 1, .data = POS},
    /* elu1 over its whole range (exp branch down to e^-30) */
    {.name = "elu_wide", SIZES(70, 70, 16, 16), HEADS(1, 1, 1), .data = WIDE},
    /* chunk sizes */
    {.name = "chunk1", SIZES(100, 100, 16, 16), HEADS(1, 1, 1), .chunk = 1},
    {.name = "chunk7", SIZES(100, 100, 16, 16), HEADS(1, 1, 1), .chunk = 7},
    {.name = "chunk48", SIZES(97, 97, 8, 8), HEADS(1, 1, 1), .chunk = 48},
    {.name = "chunk64", SIZES(129, 129, 64, 64), HEADS(1, 1, 1), .chunk = 64},
    {.name = "chunk256", SIZES(129, 129, 8, 8), HEADS(1, 1, 1), .chunk = 256},
    {.name = "chunk256_n300", SIZES(300, 300, 32, 32), HEADS(1, 1, 1), .chunk = 256},
    {.name = "chunk7_id_unnorm", SIZES(65, 65, 8, 8), HEADS(1, 1, 1), .identity = 1, .unnorm = 1, .chunk = 7},
    /* n_q < n_kv (chunked prefill, bottom-right) and decode */
    {.name = "chunked_10_of_75", SIZES(10, 75, 16, 16), HEADS(1, 1, 1)},
    {.name = "decode_1_of_64", SIZES(1, 64, 8, 8), HEADS(2, 1, 1)},
    {.name = "chunked_48_of_200", SIZES(48, 200, 64, 64), HEADS(1, 1, 1)},
    {.name = "chunked_63_of_129_c7", SIZES(63, 129, 8, 8), HEADS(1, 1, 1), .chunk = 7},
    /* n_q > n_kv: the first rows see no key of this call */
    {.name = "nq20_nkv5", SIZES(20, 5, 8, 8), HEADS(1, 1, 1)},
    {.name = "nq20_nkv5_prefix", SIZES(20, 5, 8, 8), HEADS(1, 1, 1), .prefix = 30},
    {.name = "nq97_nkv48_unnorm", SIZES(97, 48, 8, 8), HEADS(2, 1, 1), .identity = 1, .unnorm = 1},
    /* heads */
    {.name = "gqa_4_2", SIZES(37, 37, 16, 16), HEADS(4, 2, 2)},
    {.name = "mqa_6_1", SIZES(50, 50, 64, 32), HEADS(6, 1, 1)},
    {.name = "mha_3_3", SIZES(17, 17, 24, 24), HEADS(3, 3, 3)},
    {.name = "gqa_4_2_unnorm_c7", SIZES(70, 70, 8, 8), HEADS(4, 2, 2), .identity = 1, .unnorm = 1, .chunk = 7},
    /* separate key and value heads: Mamba2 style (q, k shared by groups of value heads), value
   * heads fewer than key heads, and lcm(h_k, h_v) state heads above both counts */
    {.name = "heads_2_2_8", SIZES(70, 70, 16, 8), HEADS(2, 2, 8)},
    {.name = "heads_2_2_8_bidir", SIZES(40, 55, 8, 12), HEADS(2, 2, 8), .bidir = 1},
    {.name = "heads_2_2_8_prefix", SIZES(20, 20, 8, 8), HEADS(2, 2, 8), .prefix = 30},
    {.name = "heads_2_2_8_chunked", SIZES(10, 75, 8, 8), HEADS(2, 2, 8), .chunk = 7},
    {.name = "heads_8_2_4", SIZES(65, 65, 8, 8), HEADS(8, 2, 4)},
    {.name = "heads_8_2_4_bidir", SIZES(30, 50, 16, 7), HEADS(8, 2, 4), .bidir = 1},
    {.name = "heads_8_2_4_unnorm", SIZES(49, 49, 8, 8), HEADS(8, 2, 4), .identity = 1, .unnorm = 1, .chunk = 16},
    {.name = "heads_4_4_1", SIZES(50, 50, 16, 16), HEADS(4, 4, 1)},
    {.name = "heads_4_4_1_bidir", SIZES(33, 40, 8, 8), HEADS(4, 4, 1), .bidir = 1},
    {.name = "heads_6_2_3_lcm", SIZES(40, 40, 8, 8), HEADS(6, 2, 3), .prefix = 9},
    {.name = "heads_1_2_4", SIZES(30, 30, 8, 8), HEADS(1, 2, 4)},
    {.name = "heads_2_2_8_decode", SIZES(1, 64, 8, 8), HEADS(2, 2, 8)},
    {.name = "heads_2_2_8_head_major", SIZES(37, 37, 8, 8), HEADS(2, 2, 8), .layout = H},
    {.name = "heads_8_2_4_packed", SIZES(41, 41, 8, 8), HEADS(8, 2, 4), .layout = PK},
    {.name = "heads_4_4_1_padded_nq_gt_nkv", SIZES(20, 6, 7, 5), HEADS(4, 4, 1), .layout = P, .prefix = 11},
    /* scale s != 1: it multiplies phi(q), so normalised rows change only through eps */
    {.name = "scale_0.5_eps_0.5", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), SCALE(0.5f), EPS(0.5f)},
    {.name = "scale_4_eps_0.5_bidir", SIZES(30, 45, 8, 8), HEADS(2, 1, 1), .bidir = 1, SCALE(4.0f), EPS(0.5f)},
    {.name = "scale_0.125_norm", SIZES(70, 70, 16, 16), HEADS(2, 2, 2), SCALE(0.125f)},
    {.name = "scale_-2_id_unnorm", SIZES(65, 65, 8, 8), HEADS(1, 1, 1), .identity = 1, .unnorm = 1, SCALE(-2.0f)},
    {.name = "scale_3_elu_unnorm_prefix", SIZES(20, 20, 8, 8), HEADS(2, 2, 8), .unnorm = 1, SCALE(3.0f), .prefix = 25},
    {.name = "scale_0_norm", SIZES(20, 20, 8, 8), HEADS(1, 1, 1), SCALE(0.0f)},
    /* an explicit feature size m = d (the only one identity and elu1 take) */
    {.name = "m_eq_d", SIZES(50, 50, 16, 16), HEADS(2, 1, 1), .m = 16},
    {.name = "m_eq_d_bidir_id", SIZES(30, 30, 7, 7), HEADS(1, 1, 1), .m = 7, .identity = 1, .bidir = 1, .unnorm = 1},
    /* eps */
    {.name = "eps_0.5", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), EPS(0.5f)},
    {.name = "eps_0", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), EPS(0.0f)},
    {.name = "eps_2_bidir", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), .bidir = 1, EPS(2.0f)},
    /* an incoming state (earlier tokens) and no state */
    {.name = "prefix30_n20", SIZES(20, 20, 16, 16), HEADS(2, 1, 1), .prefix = 30},
    {.name = "prefix64_decode", SIZES(1, 1, 8, 8), HEADS(2, 2, 2), .prefix = 64},
    {.name = "prefix100_chunked", SIZES(10, 75, 8, 8), HEADS(1, 1, 1), .chunk = 7, .prefix = 100},
    {.name = "prefix5_id_unnorm", SIZES(33, 33, 8, 8), HEADS(1, 1, 1), .identity = 1, .unnorm = 1, .prefix = 5},
    {.name = "no_state_causal", SIZES(40, 40, 8, 8), HEADS(2, 1, 1), .no_state = 1},
    /* layouts */
    {.name = "head_major", SIZES(37, 37, 16, 16), HEADS(2, 2, 2), .layout = H},
    {.name = "padded", SIZES(49, 49, 13, 11), HEADS(2, 1, 1), .chunk = 7, .layout = P},
    {.name = "head_padded_bidir", SIZES(33, 40, 7, 9), HEADS(3, 1, 1), .bidir = 1, .layout = HP},
    {.name = "packed_mha", SIZES(40, 40, 16, 16), HEADS(4, 4, 4), .layout = PK},
    {.name = "packed_gqa_unnorm", SIZES(41, 41, 8, 8), HEADS(4, 2, 2), .identity = 1, .unnorm = 1, .layout = PK},
    /* relu: normalised (uniform data gives rows whose features are all 0: output 0) and not */
    {.name = "relu_norm", SIZES(70, 70, 16, 16), HEADS(2, 1, 1), .relu = 1},
    {.name = "relu_norm_pos", SIZES(97, 97, 64, 64), HEADS(1, 1, 1), .relu = 1, .data = POS},
    {.name = "relu_unnorm", SIZES(65, 65, 8, 8), HEADS(2, 2, 2), .relu = 1, .unnorm = 1},
    {.name = "relu_bidir", SIZES(30, 50, 16, 16), HEADS(1, 1, 1), .relu = 1, .bidir = 1},
    {.name = "relu_bidir_unnorm_d1", SIZES(40, 40, 1, 5), HEADS(2, 1, 1), .relu = 1, .bidir = 1, .unnorm = 1},
    {.name = "relu_chunk7_prefix", SIZES(50, 50, 8, 8), HEADS(1, 1, 1), .relu = 1, .chunk = 7, .prefix = 20},
    {.name = "relu_decode", SIZES(1, 64, 8, 8), HEADS(2, 1, 1), .relu = 1},
    {.name = "relu_heads_2_2_8", SIZES(40, 40, 8, 8), HEADS(2, 2, 8), .relu = 1, .data = POS},
    {.name = "relu_eps_0", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), .relu = 1, EPS(0.0f)},
    /* exp: exp(x'), x' = sqrt(scale) x, scale 1/sqrt(d) by default; sizes around the chunks */
    {.name = "exp_n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1, 1), XEXP},
    {.name = "exp_n47_d7", SIZES(47, 47, 7, 7), HEADS(2, 1, 1), XEXP},
    {.name = "exp_n48_d8", SIZES(48, 48, 8, 8), HEADS(1, 1, 1), XEXP},
    {.name = "exp_n49_d64", SIZES(49, 49, 64, 64), HEADS(1, 1, 1), XEXP},
    {.name = "exp_n64_d65", SIZES(64, 64, 65, 65), HEADS(1, 1, 1), XEXP},
    {.name = "exp_n65_d16_gqa", SIZES(65, 65, 16, 16), HEADS(4, 2, 2), XEXP},
    {.name = "exp_n97_d33_c7", SIZES(97, 97, 33, 9), HEADS(1, 1, 1), XEXP, .chunk = 7},
    {.name = "exp_n129_d128", SIZES(129, 129, 128, 128), HEADS(1, 1, 1), XEXP},
    {.name = "exp_n200_d16_c64", SIZES(200, 200, 16, 16), HEADS(1, 1, 1), XEXP, .chunk = 64},
    {.name = "exp_chunk1", SIZES(60, 60, 8, 8), HEADS(1, 1, 1), XEXP, .chunk = 1},
    {.name = "exp_chunk256", SIZES(129, 129, 8, 8), HEADS(1, 1, 1), XEXP, .chunk = 256},
    {.name = "exp_bidir_30x50", SIZES(30, 50, 16, 16), HEADS(1, 1, 1), XEXP, .bidir = 1},
    {.name = "exp_bidir_heads_8_2_4", SIZES(30, 50, 16, 7), HEADS(8, 2, 4), XEXP, .bidir = 1},
    {.name = "exp_heads_2_2_8", SIZES(70, 70, 16, 8), HEADS(2, 2, 8), XEXP},
    {.name = "exp_heads_6_2_3_prefix", SIZES(40, 40, 8, 8), HEADS(6, 2, 3), XEXP, .prefix = 9},
    {.name = "exp_prefix30", SIZES(20, 20, 16, 16), HEADS(2, 1, 1), XEXP, .prefix = 30},
    {.name = "exp_prefix64_decode", SIZES(1, 1, 8, 8), HEADS(2, 2, 2), XEXP, .prefix = 64},
    {.name = "exp_prefix100_chunked", SIZES(10, 75, 8, 8), HEADS(1, 1, 1), XEXP, .chunk = 7, .prefix = 100},
    {.name = "exp_nq20_nkv5_prefix", SIZES(20, 5, 8, 8), HEADS(1, 1, 1), XEXP, .prefix = 30},
    {.name = "exp_nq20_nkv5", SIZES(20, 5, 8, 8), HEADS(1, 1, 1), XEXP},
    {.name = "exp_decode_1_of_64", SIZES(1, 64, 8, 8), HEADS(2, 1, 1), XEXP},
    {.name = "exp_no_state", SIZES(40, 40, 8, 8), HEADS(2, 1, 1), XEXP, .no_state = 1},
    {.name = "exp_padded", SIZES(49, 49, 13, 11), HEADS(2, 1, 1), XEXP, .chunk = 7, .layout = P},
    {.name = "exp_head_padded_bidir", SIZES(33, 40, 7, 9), HEADS(3, 1, 1), XEXP, .bidir = 1, .layout = HP},
    {.name = "exp_packed_mha", SIZES(40, 40, 16, 16), HEADS(4, 4, 4), XEXP, .layout = PK},
    {.name = "exp_head_major", SIZES(37, 37, 16, 16), HEADS(2, 2, 2), XEXP, .layout = H},
    {.name = "exp_eps0", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), XEXP, EPS(0.0f)},
    {.name = "exp_eps0.5_bidir", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), XEXP, .bidir = 1, EPS(0.5f)},
    {.name = "exp_eps0.5_c7_prefix", SIZES(60, 60, 8, 8), HEADS(2, 1, 1), XEXP, EPS(0.5f), .chunk = 7, .prefix = 20},
    {.name = "exp_eps2_wide", SIZES(70, 70, 8, 8), HEADS(1, 1, 1), XEXP, EPS(2.0f), .data = WIDE},
    {.name = "exp_scale1_wide", SIZES(70, 70, 16, 16), HEADS(1, 1, 1), XEXP, SCALE(1.0f), .data = WIDE},
    {.name = "exp_scale0.01_wide", SIZES(50, 50, 8, 8), HEADS(1, 1, 1), XEXP, SCALE(0.01f), .data = WIDE},
    {.name = "exp_wide_c7", SIZES(70, 70, 16, 16), HEADS(2, 1, 1), XEXP, .chunk = 7, .data = WIDE},
    {.name = "exp_large", SIZES(60, 60, 16, 16), HEADS(1, 1, 1), XEXP, SCALE(1.0f), .data = TU_DATA_LARGE},
    {.name = "exp_m_eq_d", SIZES(50, 50, 16, 16), HEADS(2, 1, 1), XEXP, .m = 16},
    /* favor: m = 4d by default, seed (chi) W; explicit m, caller W, seed sources */
    {.name = "favor_n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1, 1), XFAV},
    {.name = "favor_n47_d7", SIZES(47, 47, 7, 7), HEADS(2, 1, 1), XFAV},
    {.name = "favor_n48_d8", SIZES(48, 48, 8, 8), HEADS(1, 1, 1), XFAV},
    {.name = "favor_n49_d16_m1", SIZES(49, 49, 16, 16), HEADS(1, 1, 1), XFAV, .m = 1},
    {.name = "favor_n64_d7_m37", SIZES(64, 64, 7, 7), HEADS(1, 1, 1), XFAV, .m = 37},
    {.name = "favor_n65_d16_m_eq_d", SIZES(65, 65, 16, 16), HEADS(4, 2, 2), XFAV, .m = 16},
    {.name = "favor_n97_d64", SIZES(97, 97, 64, 64), HEADS(1, 1, 1), XFAV},
    {.name = "favor_n129_d65_m37", SIZES(129, 129, 65, 65), HEADS(1, 1, 1), XFAV, .m = 37},
    {.name = "favor_n100_d8_c7", SIZES(100, 100, 8, 8), HEADS(1, 1, 1), XFAV, .chunk = 7},
    {.name = "favor_chunk1", SIZES(50, 50, 8, 8), HEADS(1, 1, 1), XFAV, .chunk = 1},
    {.name = "favor_caller_w", SIZES(70, 70, 8, 8), HEADS(2, 1, 1), XFAV, WCALLER},
    {.name = "favor_caller_w_m37_bidir", SIZES(40, 55, 9, 8), HEADS(2, 2, 2), XFAV, WCALLER, .m = 37, .bidir = 1},
    {.name = "favor_caller_w_m1_prefix", SIZES(30, 30, 8, 8), HEADS(1, 1, 1), XFAV, WCALLER, .m = 1, .prefix = 20},
    {.name = "favor_sqrt_d_seed", SIZES(65, 65, 16, 16), HEADS(1, 1, 1), XFAV, WSQRTD(12345)},
    {.name = "favor_chi_seed_77", SIZES(49, 49, 8, 8), HEADS(2, 1, 1), XFAV, .seed = 77},
    {.name = "favor_bidir_30x50", SIZES(30, 50, 16, 16), HEADS(1, 1, 1), XFAV, .bidir = 1},
    {.name = "favor_heads_2_2_8", SIZES(40, 40, 8, 8), HEADS(2, 2, 8), XFAV},
    {.name = "favor_heads_8_2_4_bidir", SIZES(30, 40, 8, 5), HEADS(8, 2, 4), XFAV, .bidir = 1},
    {.name = "favor_prefix30", SIZES(20, 20, 8, 8), HEADS(2, 1, 1), XFAV, .prefix = 30},
    {.name = "favor_prefix64_decode", SIZES(1, 1, 8, 8), HEADS(2, 2, 2), XFAV, .prefix = 64},
    {.name = "favor_prefix50_chunked_m37",
     SIZES(10, 75, 8, 8),
     HEADS(1, 1, 1),
     XFAV,
     .m = 37,
     .chunk = 7,
     .prefix = 50},
    {.name = "favor_nq20_nkv5", SIZES(20, 5, 8, 8), HEADS(1, 1, 1), XFAV},
    {.name = "favor_padded", SIZES(49, 49, 13, 11), HEADS(2, 1, 1), XFAV, .chunk = 7, .layout = P},
    {.name = "favor_packed_gqa", SIZES(41, 41, 8, 8), HEADS(4, 2, 2), XFAV, .layout = PK},
    {.name = "favor_head_major_bidir", SIZES(33, 40, 7, 9), HEADS(3, 1, 1), XFAV, .bidir = 1, .layout = H},
    {.name = "favor_eps0", SIZES(40, 40, 8, 8), HEADS(1, 1, 1), XFAV, EPS(0.0f)},
    {.name = "favor_eps0.5_wide_prefix",
     SIZES(50, 50, 8, 8),
     HEADS(1, 1, 1),
     XFAV,
     EPS(0.5f),
     .data = WIDE,
     .prefix = 30},
    {.name = "favor_scale1_wide", SIZES(50, 50, 8, 8), HEADS(1, 1, 1), XFAV, SCALE(1.0f), .data = WIDE},
    {.name = "favor_wide_caller_m37", SIZES(64, 64, 16, 16), HEADS(1, 1, 1), XFAV, WCALLER, .m = 37, .data = WIDE},
    /* dsoftmax: no scale, no eps; each key feature column softmaxed over the visible keys */
    {.name = "dsm_n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1, 1), XDSM},
    {.name = "dsm_n47_d7", SIZES(47, 47, 7, 7), HEADS(2, 1, 1), XDSM},
    {.name = "dsm_n48_d8", SIZES(48, 48, 8, 8), HEADS(1, 1, 1), XDSM},
    {.name = "dsm_n49_d64", SIZES(49, 49, 64, 64), HEADS(1, 1, 1), XDSM},
    {.name = "dsm_n64_d65", SIZES(64, 64, 65, 65), HEADS(1, 1, 1), XDSM},
    {.name = "dsm_n65_d16_gqa", SIZES(65, 65, 16, 16), HEADS(4, 2, 2), XDSM},
    {.name = "dsm_n97_d33_c7", SIZES(97, 97, 33, 9), HEADS(1, 1, 1), XDSM, .chunk = 7},
    {.name = "dsm_n129_d128", SIZES(129, 129, 128, 128), HEADS(1, 1, 1), XDSM},
    {.name = "dsm_chunk1", SIZES(60, 60, 8, 8), HEADS(1, 1, 1), XDSM, .chunk = 1},
    {.name = "dsm_bidir_30x50", SIZES(30, 50, 16, 16), HEADS(1, 1, 1), XDSM, .bidir = 1},
    {.name = "dsm_bidir_heads_8_2_4", SIZES(30, 50, 16, 7), HEADS(8, 2, 4), XDSM, .bidir = 1},
    {.name = "dsm_heads_2_2_8", SIZES(70, 70, 16, 8), HEADS(2, 2, 8), XDSM},
    {.name = "dsm_prefix30", SIZES(20, 20, 16, 16), HEADS(2, 1, 1), XDSM, .prefix = 30},
    {.name = "dsm_prefix64_decode", SIZES(1, 1, 8, 8), HEADS(2, 2, 2), XDSM, .prefix = 64},
    {.name = "dsm_prefix100_chunked", SIZES(10, 75, 8, 8), HEADS(1, 1, 1), XDSM, .chunk = 7, .prefix = 100},
    {.name = "dsm_nq20_nkv5", SIZES(20, 5, 8, 8), HEADS(1, 1, 1), XDSM},
    {.name = "dsm_nq20_nkv5_prefix", SIZES(20, 5, 8, 8), HEADS(1, 1, 1), XDSM, .prefix = 11},
    {.name = "dsm_no_state", SIZES(40, 40, 8, 8), HEADS(2, 1, 1), XDSM, .no_state = 1},
    {.name = "dsm_padded", SIZES(49, 49, 13, 11), HEADS(2, 1, 1), XDSM, .chunk = 7, .layout = P},
    {.name = "dsm_packed_gqa", SIZES(41, 41, 8, 8), HEADS(4, 2, 2), XDSM, .layout = PK},
    {.name = "dsm_head_padded_bidir", SIZES(33, 40, 7, 9), HEADS(3, 1, 1), XDSM, .bidir = 1, .layout = HP},
    {.name = "dsm_wide", SIZES(70, 70, 16, 16), HEADS(1, 1, 1), XDSM, .data = WIDE},
    {.name = "dsm_wide_bidir", SIZES(50, 60, 8, 8), HEADS(2, 1, 1), XDSM, .bidir = 1, .data = WIDE},
    {.name = "dsm_m_eq_d", SIZES(50, 50, 16, 16), HEADS(2, 1, 1), XDSM, .m = 16},
};
#define LN_NCASES (sizeof ln_cases / sizeof ln_cases[0])
static size_t ln_sel[LN_NCASES];

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
START_TEST(linear_matches_reference) {
  const size_t idx = ln_sel[_i];
  const ln_case *c = &ln_cases[idx];
  tu_rng rng = tu_rng_of(7000 + idx);
  attn_linear_desc d;
  const attn_feature_map fm = c->xmap ? (attn_feature_map)c->xmap : c->identity ? ID : c->relu ? RELU : ELU;
  lu_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, fm, !c->bidir, !c->unnorm, c->chunk);
  d.m = c->m;
  if (c->set_eps) d.eps = c->eps;
  if (c->set_scale) d.scale = c->scale;
  float *w = lu_set_favor(&d, c->wsrc, c->seed, &rng);
  lu_state st;
  attn_linear_state *state = NULL;
  double *s0 = NULL;
  if (!c->bidir && !c->no_state) {
    lu_state_make(&st, &d);
    state = &st.s;
  }
  if (c->prefix) {
    ck_assert_ptr_nonnull(state); /* a prefix lives in a state */
    tu_qkv px = tu_qkv_of(T, c->data, &rng, c->prefix, c->prefix, c->h_q, c->h_k, c->h_v, c->d, c->dv);
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = c->prefix;
    tu_tensor po;
    lu_call_plain(&pd, &px.q, &px.k, &px.v, T, state, 0, &po);
    ck_assert_uint_eq(state->tokens, c->prefix);
    s0 = lu_state_to_double(state);
    tu_tensor_free(&po);
    tu_qkv_free(&px);
  }
  tu_qkv x = tu_qkv_of(c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, c->layout == PK ? T : c->layout, state, (idx % 2) * 4, &o);
  tu_qkv_assert_unchanged(&x);
  lu_check_output(c->name, &d, &x.q, &x.k, &x.v, s0, c->prefix, &o);
  if (state) lu_check_state(c->name, &d, &x.k, &x.v, s0, c->prefix, state);
  free(s0);
  free(w);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
  if (state) lu_state_free(&st);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties                                                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct ln_prop_case {
  size_t n, h_q, h_k, h_v, d, dv;
  attn_feature_map fm;
  int normalize;
  size_t chunk, split;
  float scale; /* 0: the default (1, or 1/sqrt(d) for exp and favor) */
  size_t m;    /* favor: 0 the default 4d */
  int wsrc;    /* favor: as ln_case.wsrc (2: the caller's W, the same for every call of a case) */
} ln_prop_case;

#define PHEADS(q, k, v) .h_q = (q), .h_k = (k), .h_v = (v)
static const ln_prop_case ln_props[] = {
    {.n = 100, PHEADS(1, 1, 1), .d = 16, .dv = 16, .fm = ELU, .normalize = NORM, .chunk = 1, .split = 37},
    {.n = 100, PHEADS(2, 1, 1), .d = 8, .dv = 8, .fm = ELU, .normalize = NORM, .chunk = 7, .split = 50},
    {.n = 129, PHEADS(1, 1, 1), .d = 64, .dv = 64, .fm = ELU, .normalize = NORM, .chunk = 64, .split = 64},
    {.n = 97, PHEADS(4, 2, 2), .d = 16, .dv = 24, .fm = ELU, .normalize = NORM, .split = 96},
    {.n = 65, PHEADS(1, 1, 1), .d = 65, .dv = 7, .fm = ID, .normalize = UNNORM, .split = 1},
    {.n = 80, PHEADS(6, 1, 1), .d = 8, .dv = 8, .fm = ELU, .normalize = UNNORM, .chunk = 7, .split = 79},
    {.n = 130, PHEADS(2, 2, 2), .d = 7, .dv = 9, .fm = ELU, .normalize = NORM, .split = 65},
    /* separate key and value heads, and a scale */
    {.n = 90, PHEADS(2, 2, 8), .d = 8, .dv = 8, .fm = ELU, .normalize = NORM, .split = 45},
    {.n = 70, PHEADS(8, 2, 4), .d = 8, .dv = 5, .fm = ELU, .normalize = NORM, .chunk = 7, .split = 30},
    {.n = 66, PHEADS(4, 4, 1), .d = 9, .dv = 8, .fm = ID, .normalize = UNNORM, .chunk = 16, .split = 33},
    {.n = 60, PHEADS(6, 2, 3), .d = 8, .dv = 8, .fm = ELU, .normalize = NORM, .split = 20, .scale = 0.25f},
    {.n = 75, PHEADS(2, 2, 8), .d = 8, .dv = 8, .fm = ID, .normalize = UNNORM, .chunk = 7, .split = 40, .scale = -1.5f},
    {.n = 90, PHEADS(2, 1, 1), .d = 8, .dv = 8, .fm = RELU, .normalize = NORM, .chunk = 7, .split = 33},
    {.n = 64, PHEADS(4, 2, 4), .d = 16, .dv = 8, .fm = RELU, .normalize = UNNORM, .split = 50},
    /* the exponential maps: chunk sizes 1, 7, 64 and the path's default */
    {.n = 100, PHEADS(1, 1, 1), .d = 16, .dv = 16, .fm = EXPM, .normalize = NORM, .chunk = 1, .split = 37},
    {.n = 100, PHEADS(2, 1, 1), .d = 8, .dv = 8, .fm = EXPM, .normalize = NORM, .chunk = 7, .split = 50},
    {.n = 129, PHEADS(1, 1, 1), .d = 64, .dv = 64, .fm = EXPM, .normalize = NORM, .chunk = 64, .split = 64},
    {.n = 97, PHEADS(8, 2, 4), .d = 7, .dv = 9, .fm = EXPM, .normalize = NORM, .split = 49, .scale = 1.0f},
    {.n = 100, PHEADS(1, 1, 1), .d = 8, .dv = 8, .fm = FAV, .normalize = NORM, .chunk = 1, .split = 37},
    {.n = 100, PHEADS(2, 1, 1), .d = 8, .dv = 8, .fm = FAV, .normalize = NORM, .chunk = 7, .split = 50, .m = 37},
    {.n = 129, PHEADS(1, 1, 1), .d = 16, .dv = 16, .fm = FAV, .normalize = NORM, .chunk = 64, .split = 64},
    {.n = 97, PHEADS(4, 2, 2), .d = 9, .dv = 8, .fm = FAV, .normalize = NORM, .split = 48, .m = 1, .wsrc = 2},
    {.n = 90, PHEADS(2, 2, 8), .d = 8, .dv = 8, .fm = FAV, .normalize = NORM, .split = 45, .wsrc = 1},
    {.n = 100, PHEADS(1, 1, 1), .d = 16, .dv = 16, .fm = DSM, .normalize = NORM, .chunk = 1, .split = 37},
    {.n = 100, PHEADS(2, 1, 1), .d = 8, .dv = 8, .fm = DSM, .normalize = NORM, .chunk = 7, .split = 50},
    {.n = 129, PHEADS(1, 1, 1), .d = 64, .dv = 64, .fm = DSM, .normalize = NORM, .chunk = 64, .split = 64},
    {.n = 97, PHEADS(8, 2, 4), .d = 7, .dv = 9, .fm = DSM, .normalize = NORM, .split = 49},
};
#define LN_NPROPS (sizeof ln_props / sizeof ln_props[0])

/* The caller's W of the current property case (wsrc 2), shared by every call of the case. */
static float *ln_prop_w;

/* The case's W (wsrc 2: Gaussian, m x d, drawn from r after the inputs); nothing otherwise. */
static void ln_prop_w_make(const ln_prop_case *c, tu_rng *r) {
  if (c->fm != FAV || c->wsrc != 2) return;
  const size_t count = (c->m ? c->m : 4 * c->d) * c->d;
  ln_prop_w = malloc(sizeof(float) * count);
  ck_assert_ptr_nonnull(ln_prop_w);
  tu_fill_gauss(ln_prop_w, count, r, 1.0);
}

static void ln_prop_desc(attn_linear_desc *d, const ln_prop_case *c, size_t n_q, size_t n_kv) {
  lu_desc(d, n_q, n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, c->fm, CAUSAL, c->normalize, c->chunk);
  if (c->scale != 0.0f) d->scale = c->scale;
  d->m = c->m;
  if (c->fm == FAV && c->wsrc == 1) d->favor_source = ATTN_FAVOR_SEED_SQRT_D;
  if (c->fm == FAV && c->wsrc == 2) {
    ck_assert_ptr_nonnull(ln_prop_w);
    d->favor_source = ATTN_FAVOR_CALLER;
    d->favor_w = ln_prop_w;
  }
}

/* n + 1 tokens of inputs; a causal prefill over the first n into a fresh state. */
typedef struct ln_full {
  tu_qkv x;           /* n + 1 tokens */
  tu_tensor q, k, v;  /* views of the first n */
  attn_linear_desc d; /* n tokens */
  lu_state st;
  tu_tensor o;
  double *got; /* prefill output as double ([n][H][dv]) */
  lu_ref ref;  /* its reference */
  size_t hd;   /* floats per output token: H * dv */
  size_t m;    /* feature size */
} ln_full;

static void ln_full_make(ln_full *f, const ln_prop_case *c, uint64_t seed) {
  tu_rng rng = tu_rng_of(seed);
  tu_qkv_make(&f->x, T, TU_DATA_UNIFORM, &rng, c->n + 1, c->n + 1, c->h_q, c->h_k, c->h_v, c->d, c->dv);
  f->q = tu_rows_view(&f->x.q, 0, c->n);
  f->k = tu_rows_view(&f->x.k, 0, c->n);
  f->v = tu_rows_view(&f->x.v, 0, c->n);
  ln_prop_w_make(c, &rng);
  ln_prop_desc(&f->d, c, c->n, c->n);
  f->m = lu_feature_size(&f->d);
  lu_state_make(&f->st, &f->d);
  lu_call_plain(&f->d, &f->q, &f->k, &f->v, T, &f->st.s, 0, &f->o);
  f->hd = lu_out_heads(&f->d) * c->dv;
  f->got = malloc(sizeof(double) * c->n * f->hd);
  ck_assert_ptr_nonnull(f->got);
  tu_tensor_to_double(&f->o, f->got);
  lu_ref_output(&f->d, &f->q, &f->k, &f->v, NULL, &f->ref);
}

static void ln_full_free(ln_full *f) {
  free(f->got);
  lu_ref_free(&f->ref);
  tu_tensor_free(&f->o);
  lu_state_free(&f->st);
  tu_qkv_free(&f->x);
  free(ln_prop_w);
  ln_prop_w = NULL;
}

/* One token at a time (n_q = n_kv = 1, the recurrent form) continuing a state. */
static void ln_decode_step(const ln_prop_case *c, const tu_qkv *x, size_t t, attn_linear_state *state, tu_tensor *o) {
  attn_linear_desc d;
  ln_prop_desc(&d, c, 1, 1);
  const tu_tensor q = tu_rows_view(&x->q, t, 1), k = tu_rows_view(&x->k, t, 1), v = tu_rows_view(&x->v, t, 1);
  lu_call_plain(&d, &q, &k, &v, T, state, 0, o);
}

/* Chunkwise prefill equals token-by-token decode (outputs row by row, and the final states). */
START_TEST(linear_chunkwise_matches_recurrent) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 8000 + (uint64_t)_i);
  lu_compare("prefill", c->fm, c->n, f.m, &f.o, f.ref.o, f.ref.scale, f.ref.arg, 1.0);
  lu_state dec;
  lu_state_make(&dec, &f.d);
  const size_t hd = f.hd;
  for (size_t t = 0; t < c->n; ++t) {
    tu_tensor o;
    ln_decode_step(c, &f.x, t, &dec.s, &o);
    lu_compare("decode step vs prefill row", c->fm, c->n, f.m, &o, f.got + t * hd, f.ref.scale + t * hd,
               f.ref.arg + t * hd, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(dec.s.tokens, f.st.s.tokens);
  double *sp = lu_state_to_double(&f.st.s);
  const ref_linear_problem p = lu_problem(&f.d, &f.q, &f.k, &f.v, NULL);
  const size_t count = lu_state_floats(&dec.s);
  double *rs = malloc(sizeof(double) * count), *sc = malloc(sizeof(double) * count);
  double *sa = malloc(sizeof(double) * count);
  ck_assert(rs && sc && sa);
  ref_linear_state_ex(&p, rs, sc, sa);
  lu_compare_state("decoded state vs prefill state", c->fm, c->n, &dec.s, sp, sc, sa, TOL_PROPERTY_FACTOR);
  free(rs);
  free(sc);
  free(sa);
  free(sp);
  lu_state_free(&dec);
  ln_full_free(&f);
}
END_TEST

/* A prefill's state continues into decode: its state is the reference sum over the n tokens,
 * and the next decode step from it gives the reference output of token n + 1. */
START_TEST(linear_prefill_state_continues_decode) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 9000 + (uint64_t)_i);
  lu_check_state("prefill state", &f.d, &f.k, &f.v, NULL, 0, &f.st.s);
  tu_tensor o;
  ln_decode_step(c, &f.x, c->n, &f.st.s, &o);
  ck_assert_uint_eq(f.st.s.tokens, c->n + 1);
  /* reference: row n of the whole n + 1 token causal sequence */
  attn_linear_desc whole;
  ln_prop_desc(&whole, c, c->n + 1, c->n + 1);
  lu_ref r;
  lu_ref_output(&whole, &f.x.q, &f.x.k, &f.x.v, NULL, &r);
  const size_t hd = f.hd;
  lu_compare("decode after prefill", c->fm, c->n + 1, f.m, &o, r.o + c->n * hd, r.scale + c->n * hd, r.arg + c->n * hd,
             1.0);
  lu_check_state("state after prefill + decode", &whole, &f.x.k, &f.x.v, NULL, 0, &f.st.s);
  lu_ref_free(&r);
  tu_tensor_free(&o);
  ln_full_free(&f);
}
END_TEST

/* Snapshot, run more, restore, run again: identical outputs and states, bit for bit. Tokens
 * [0, split) are absorbed first; "more" is the multi-token call over [split, n + 1). Loop index
 * odd: snapshot and restore by attn_linear_state_copy; even: by memcpy of the struct and data. */
START_TEST(linear_snapshot_restore_bit_exact) {
  const ln_prop_case *c = &ln_props[_i / 2];
  const int by_copy = _i % 2;
  ln_full f;
  ln_full_make(&f, c, 10000 + (uint64_t)_i);
  const size_t a = c->split, rest = c->n + 1 - a;
  lu_state st, snap;
  lu_state_make(&st, &f.d);
  lu_state_make(&snap, &f.d);
  const size_t bytes = sizeof(float) * lu_state_floats(&st.s);
  attn_linear_desc d = f.d;
  d.shape.n_q = d.shape.n_kv = a;
  tu_tensor o0, o1, o2;
  const tu_tensor q0 = tu_rows_view(&f.x.q, 0, a), k0 = tu_rows_view(&f.x.k, 0, a), v0 = tu_rows_view(&f.x.v, 0, a);
  lu_call_plain(&d, &q0, &k0, &v0, T, &st.s, 0, &o0);
  attn_linear_state saved = st.s;
  if (by_copy) {
    ck_assert_int_eq(attn_linear_state_copy(&snap.s, &st.s), ATTN_OK);
    ck_assert_ptr_eq(snap.s.data, snap.mem); /* dst keeps its own data pointer */
    ck_assert_uint_eq(snap.s.tokens, a);
    tu_assert_same_bits("state copy", snap.s.data, st.s.data, bytes);
    tu_assert_guards("state copy dst", snap.mem);
  } else {
    memcpy(snap.s.data, st.s.data, bytes);
  }
  d.shape.n_q = d.shape.n_kv = rest;
  const tu_tensor q1 = tu_rows_view(&f.x.q, a, rest), k1 = tu_rows_view(&f.x.k, a, rest),
                  v1 = tu_rows_view(&f.x.v, a, rest);
  lu_call_plain(&d, &q1, &k1, &v1, T, &st.s, 0, &o1);
  float *after = malloc(bytes);
  ck_assert_ptr_nonnull(after);
  memcpy(after, st.s.data, bytes);
  ck_assert_uint_eq(st.s.tokens, c->n + 1);
  if (by_copy) {
    ck_assert_int_eq(attn_linear_state_copy(&st.s, &snap.s), ATTN_OK);
    ck_assert_ptr_eq(st.s.data, st.mem);
  } else {
    st.s = saved;
    memcpy(st.s.data, snap.s.data, bytes);
  }
  ck_assert_uint_eq(st.s.tokens, a);
  lu_call_plain(&d, &q1, &k1, &v1, T, &st.s, 0, &o2);
  tu_assert_same_bits("output after restore", o1.data, o2.data, sizeof(float) * o1.span);
  tu_assert_same_bits("state after restore and rerun", after, st.s.data, bytes);
  ck_assert_uint_eq(st.s.tokens, c->n + 1);
  free(after);
  tu_tensor_free(&o0);
  tu_tensor_free(&o1);
  tu_tensor_free(&o2);
  lu_state_free(&snap);
  lu_state_free(&st);
  ln_full_free(&f);
}
END_TEST

/* A prefill split in two calls (rows [0, a) then [a, n) continuing the state) equals one call. */
START_TEST(linear_split_prefill_matches_one_call) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 11000 + (uint64_t)_i);
  const size_t a = c->split, n = c->n, hd = f.hd;
  lu_state st;
  lu_state_make(&st, &f.d);
  const size_t part[2][2] = {{0, a}, {a, n - a}};
  for (int s = 0; s < 2; ++s) {
    attn_linear_desc d = f.d;
    d.shape.n_q = d.shape.n_kv = part[s][1];
    const tu_tensor q = tu_rows_view(&f.q, part[s][0], part[s][1]), k = tu_rows_view(&f.k, part[s][0], part[s][1]),
                    v = tu_rows_view(&f.v, part[s][0], part[s][1]);
    tu_tensor o;
    lu_call_plain(&d, &q, &k, &v, T, &st.s, 0, &o);
    lu_compare("split prefill vs one call", c->fm, n, f.m, &o, f.got + part[s][0] * hd, f.ref.scale + part[s][0] * hd,
               f.ref.arg + part[s][0] * hd, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(st.s.tokens, n);
  lu_check_state("state after split prefill", &f.d, &f.k, &f.v, NULL, 0, &st.s);
  lu_state_free(&st);
  ln_full_free(&f);
}
END_TEST

/* The layout changes addresses only: the same logical inputs token-major and head-major (each
 * head's rows contiguous, outputs too) give the same outputs and state, bit for bit (attn.h's
 * attn_linear notes head-major inputs as faster for several heads; the engine's order of
 * operations does not depend on the strides). */
START_TEST(linear_layout_bit_exact) {
  const ln_prop_case *c = &ln_props[_i];
  const tu_layout_kind kinds[2] = {T, H};
  tu_qkv x[2];
  tu_tensor o[2];
  lu_state st[2];
  attn_linear_desc d;
  for (int k = 0; k < 2; ++k) {
    tu_rng rng;
    tu_rng_seed(&rng, 11500 + (uint64_t)_i); /* the same draws in the same logical order */
    tu_qkv_make(&x[k], kinds[k], TU_DATA_UNIFORM, &rng, c->n, c->n, c->h_q, c->h_k, c->h_v, c->d, c->dv);
    if (k == 0) ln_prop_w_make(c, &rng);
    ln_prop_desc(&d, c, c->n, c->n);
    lu_state_make(&st[k], &d);
    lu_call_plain(&d, &x[k].q, &x[k].k, &x[k].v, kinds[k], &st[k].s, 0, &o[k]);
  }
  const size_t heads = lu_out_heads(&d);
  for (size_t t = 0; t < c->n; ++t)
    for (size_t h = 0; h < heads; ++h)
      tu_assert_same_bits("output row, token-major vs head-major", tu_at(&o[0], t, h, 0), tu_at(&o[1], t, h, 0),
                          sizeof(float) * c->dv);
  tu_assert_same_bits("state, token-major vs head-major inputs", st[0].s.data, st[1].s.data,
                      sizeof(float) * lu_state_floats(&st[0].s));
  for (int k = 0; k < 2; ++k) {
    tu_tensor_free(&o[k]);
    lu_state_free(&st[k]);
    tu_qkv_free(&x[k]);
  }
  free(ln_prop_w);
  ln_prop_w = NULL;
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Non-finite inputs and zero denominators: the policy of attn.h on every path                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct lnf_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_k, h_v, d, dv;
  int bidir;
  size_t chunk;
} lnf_case;
/* Causal chunks of the path's default size and of 16, GQA, n_q < n_kv, bidirectional, separate
 * key and value heads (a poisoned value head reaches only the output heads that read it), the
 * recurrence (chunk 1). */
static const lnf_case lnf_cases[] = {
    {.name = "causal_100_gqa", SIZES(100, 100, 8, 7), HEADS(4, 2, 2)},
    {.name = "causal_70_chunk16", SIZES(70, 70, 9, 16), HEADS(1, 1, 1), .chunk = 16},
    {.name = "chunk_30_of_50", SIZES(30, 50, 8, 8), HEADS(2, 2, 2)},
    {.name = "bidir_40", SIZES(40, 40, 8, 5), HEADS(2, 1, 1), .bidir = 1},
    {.name = "heads_2_2_8", SIZES(60, 60, 8, 8), HEADS(2, 2, 8), .chunk = 16},
    {.name = "heads_8_2_4_bidir", SIZES(30, 40, 8, 8), HEADS(8, 2, 4), .bidir = 1},
    /* chunk 1: the recurrence (maps without offsets), its rows in place (heads gathered, or one
     * head) or loaded (two output heads per state head) */
    {.name = "recurrence_50", SIZES(50, 50, 8, 8), HEADS(2, 2, 2), .chunk = 1},
    {.name = "recurrence_1head_45", SIZES(45, 45, 16, 9), HEADS(1, 1, 1), .chunk = 1},
    {.name = "recurrence_gqa_40_of_60", SIZES(40, 60, 8, 6), HEADS(4, 2, 2), .chunk = 1},
};
#define LNF_NCASES (sizeof lnf_cases / sizeof lnf_cases[0])

/* One element of q, k or v is NaN, +inf or -inf, early or late in the sequence, for identity
 * (un-normalised), elu1 (normalised) and the exponential maps (exp, favor, dsoftmax, whose
 * exponentials of -inf would otherwise hide the value): every row matches the reference, which
 * makes the rows that use the value NaN; causal rows before it are exact. Then one decode step
 * continues from the state: NaN when the prefill's poisoned k or v is in the state (every later
 * token sees it). */
static const attn_feature_map lnf_maps[] = {ID, ELU, EXPM, FAV, DSM};
#define LNF_NMAPS (sizeof lnf_maps / sizeof lnf_maps[0])

/* The decode step after a causal prefill of d's shape on state st: query row n_q, key row n_kv of
 * x, one token, its output against the reference's row of the whole sequence; the inputs
 * unchanged. */
static void lnf_step_check(const char *what, const lnf_case *c, const attn_linear_desc *d, const tu_qkv *x,
                           lu_state *st) {
  attn_linear_desc step = *d;
  step.shape.n_q = step.shape.n_kv = 1;
  const tu_tensor q1 = tu_rows_view(&x->q, c->n_q, 1), k1 = tu_rows_view(&x->k, c->n_kv, 1);
  const tu_tensor v1 = tu_rows_view(&x->v, c->n_kv, 1);
  tu_tensor o;
  lu_call_plain(&step, &q1, &k1, &v1, T, &st->s, 0, &o);
  tu_qkv_assert_unchanged(x);
  attn_linear_desc whole = *d;
  whole.shape.n_q = c->n_q + 1;
  whole.shape.n_kv = c->n_kv + 1;
  const size_t hd = lu_out_heads(d) * c->dv;
  lu_ref r;
  lu_ref_output(&whole, &x->q, &x->k, &x->v, NULL, &r);
  lu_compare(what, d->feature_map, whole.shape.n_kv, lu_feature_size(d), &o, r.o + c->n_q * hd, r.scale + c->n_q * hd,
             r.arg + c->n_q * hd, 1.0);
  lu_ref_free(&r);
  tu_tensor_free(&o);
}

START_TEST(linear_nonfinite_policy) {
  const lnf_case *c = &lnf_cases[_i / LNF_NMAPS];
  const attn_feature_map fm = lnf_maps[_i % LNF_NMAPS];
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng = tu_rng_of(9500 + (uint64_t)_i);
    const size_t n1 = c->n_kv + 1; /* the prefill's keys and one decode token */
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q + 1, n1, c->h_q, c->h_k, c->h_v, c->d, c->dv);
    char poison[64], what[96];
    tu_qkv_poison(&x, pc, 1, poison, sizeof poison); /* not in the decode token */
    attn_linear_desc d;
    lu_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, fm, !c->bidir, fm != ID, c->chunk);
    lu_state st;
    if (!c->bidir) lu_state_make(&st, &d);
    const tu_tensor q0 = tu_rows_view(&x.q, 0, c->n_q), k0 = tu_rows_view(&x.k, 0, c->n_kv);
    const tu_tensor v0 = tu_rows_view(&x.v, 0, c->n_kv);
    tu_tensor o;
    lu_call_plain(&d, &q0, &k0, &v0, T, c->bidir ? NULL : &st.s, 0, &o);
    tu_qkv_assert_unchanged(&x);
    snprintf(what, sizeof what, "%s map %d: %s", c->name, (int)fm, poison);
    lu_check_output(what, &d, &q0, &k0, &v0, NULL, 0, &o);
    tu_tensor_free(&o);
    if (!c->bidir) { /* the decode step after it: row n_q of the whole sequence */
      lnf_step_check(what, c, &d, &x, &st);
      lu_state_free(&st);
    }
    tu_qkv_free(&x);
  }
}
END_TEST

/* The decode token itself poisoned (q, k or v x NaN, +inf, -inf, in the last head) after a clean
 * prefill: the step's rows that use it are NaN in every column, the others match the reference
 * (a one-token step reads its rows in place where it can, so this is its own path). */
START_TEST(linear_nonfinite_decode_token) {
  const lnf_case *c = &lnf_cases[_i / LNF_NMAPS];
  const attn_feature_map fm = lnf_maps[_i % LNF_NMAPS];
  if (c->bidir) return; /* no state to step on */
  for (int pc = 0; pc < 9; ++pc) {
    for (int normalize = 0; normalize < (fm == ID ? 2 : 1); ++normalize) {
      tu_rng rng = tu_rng_of(9550 + (uint64_t)_i);
      tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q + 1, c->n_kv + 1, c->h_q, c->h_k, c->h_v, c->d, c->dv);
      static const float bad[3] = {NAN, INFINITY, -INFINITY};
      tu_tensor *t = pc / 3 == 0 ? &x.q : pc / 3 == 1 ? &x.k : &x.v;
      *tu_at(t, t->n - 1, t->h - 1, (size_t)pc % t->w) = bad[pc % 3];
      tu_qkv_snapshot(&x);
      attn_linear_desc d;
      lu_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, fm, CAUSAL, fm != ID || normalize, c->chunk);
      lu_state st;
      lu_state_make(&st, &d);
      const tu_tensor q0 = tu_rows_view(&x.q, 0, c->n_q), k0 = tu_rows_view(&x.k, 0, c->n_kv);
      const tu_tensor v0 = tu_rows_view(&x.v, 0, c->n_kv);
      tu_tensor o;
      lu_call_plain(&d, &q0, &k0, &v0, T, &st.s, 0, &o);
      tu_tensor_free(&o);
      char what[96];
      snprintf(what, sizeof what, "%s map %d normalize %d: %c of the decode token = %g", c->name, (int)fm, normalize,
               "qkv"[pc / 3], (double)bad[pc % 3]);
      lnf_step_check(what, c, &d, &x, &st);
      lu_state_free(&st);
      tu_qkv_free(&x);
    }
  }
}
END_TEST

/* eps = 0: a normalised row whose denominator is exactly 0 gives zeros (as softmax does for a
 * row with no visible key): n_q > n_kv leaves the first rows without a key. For elu1 and the
 * exponential maps (dsoftmax: a feature with nothing visible contributes 0). */
static const attn_feature_map eps0_maps[] = {ELU, EXPM, FAV, DSM};
START_TEST(linear_eps0_empty_rows_are_zero) {
  tu_rng rng = tu_rng_of(9600);
  tu_qkv x = tu_qkv_of(T, POS, &rng, 9, 4, 2, 1, 1, 8, 8);
  for (int with_state = 0; with_state < 2; ++with_state) {
    attn_linear_desc d;
    lu_desc(&d, 9, 4, 2, 1, 1, 8, 8, eps0_maps[_i], CAUSAL, NORM, 0);
    d.eps = 0.0f;
    lu_state st;
    if (with_state) lu_state_make(&st, &d);
    tu_tensor o;
    lu_call_plain(&d, &x.q, &x.k, &x.v, T, with_state ? &st.s : NULL, 0, &o);
    for (size_t i = 0; i < 5; ++i)
      for (size_t h = 0; h < 2; ++h)
        for (size_t c = 0; c < 8; ++c)
          ck_assert_msg(*tu_at(&o, i, h, c) == 0.0f, "row %zu: %g", i, (double)*tu_at(&o, i, h, c));
    lu_check_output("eps = 0, rows without keys", &d, &x.q, &x.k, &x.v, NULL, 0, &o);
    tu_tensor_free(&o);
    if (with_state) lu_state_free(&st);
  }
  tu_qkv_free(&x);
}
END_TEST

/* eps = 0 and a subnormal denominator: q = 2^-70 and k = 2^-72 in each of 4 relu features make
 * every weight 2^-140, whose reciprocal overflows a float; the row's quotient does not (the mean of
 * the visible values). Every sum here is a small integer times 2^-149's multiples, so every path
 * computes it exactly and the output must be the quotient rounded once: tolerance 0. Chunkwise
 * (default chunk, the recurrence, chunk 8), decode token by token, a window, and the gated
 * stores (a scalar gate, a per-feature gate with beta; log gates 0, beta 1: exact); and scale 0
 * with a subnormal eps (0 times an infinite reciprocal): zeros. */
enum { TD_N = 20, TD_D = 4, TD_DV = 3, TD_LEFT = 5 };
typedef struct td_case {
  const char *name;
  size_t chunk;
  int decode, window;
  attn_gate_kind gate;
  int beta, zero; /* zero: scale 0, eps 2^-135 */
} td_case;
static const td_case td_cases[] = {
    {"chunkwise", 0, 0, 0, ATTN_GATE_NONE, 0, 0},
    {"recurrence", 1, 0, 0, ATTN_GATE_NONE, 0, 0},
    {"chunk 8", 8, 0, 0, ATTN_GATE_NONE, 0, 0},
    {"decode", 0, 1, 0, ATTN_GATE_NONE, 0, 0},
    {"window", 0, 0, 1, ATTN_GATE_NONE, 0, 0},
    {"scalar gate", 8, 0, 0, ATTN_GATE_SCALAR, 0, 0},
    {"feature gate, beta", 8, 0, 0, ATTN_GATE_FEATURE, 1, 0},
    {"scale 0, chunkwise", 8, 0, 0, ATTN_GATE_NONE, 0, 1},
    {"scale 0, window", 0, 0, 1, ATTN_GATE_NONE, 0, 1},
};
START_TEST(linear_eps0_subnormal_denominator) {
  const td_case *c = &td_cases[_i];
  tu_rng rng = tu_rng_of(9700);
  tu_qkv x = tu_qkv_of(T, POS, &rng, TD_N, TD_N, 1, 1, 1, TD_D, TD_DV);
  for (size_t t = 0; t < TD_N; ++t)
    for (size_t f = 0; f < TD_D; ++f) *tu_at(&x.q, t, 0, f) = 0x1p-70f, *tu_at(&x.k, t, 0, f) = 0x1p-72f;
  for (size_t t = 0; t < TD_N; ++t)
    for (size_t e = 0; e < TD_DV; ++e) *tu_at(&x.v, t, 0, e) = (float)((int)((t * 7 + e * 3) % 9) - 4);
  attn_linear_desc d;
  lu_desc(&d, TD_N, TD_N, 1, 1, 1, TD_D, TD_DV, ATTN_FEATURE_RELU, CAUSAL, NORM, c->chunk);
  d.eps = c->zero ? 0x1p-135f : 0.0f;
  d.scale = c->zero ? 0.0f : d.scale;
  if (c->window) d.mask = attn_mask_window(TD_LEFT, 0);
  tu_tensor g = {0}, b = {0};
  d.gate = c->gate;
  d.beta = c->beta;
  if (c->gate != ATTN_GATE_NONE) {
    const size_t gw = c->gate == ATTN_GATE_FEATURE ? TD_D : 1;
    tu_tensor_alloc(&g, T, TD_N, 1, gw, 0);
    for (size_t t = 0; t < TD_N; ++t)
      for (size_t f = 0; f < gw; ++f) *tu_at(&g, t, 0, f) = 0.0f;
    d.gate_layout = g.l;
  }
  if (c->beta) {
    tu_tensor_alloc(&b, T, TD_N, 1, 1, 0);
    for (size_t t = 0; t < TD_N; ++t) *tu_at(&b, t, 0, 0) = 1.0f;
    d.beta_layout = b.l;
  }
  lu_state st;
  lu_state_make(&st, &d);
  for (size_t t0 = 0; t0 < TD_N;) { /* one call, or one per token */
    const size_t n = c->decode ? 1 : TD_N;
    attn_linear_desc dt = d;
    dt.shape.n_q = dt.shape.n_kv = n;
    const tu_tensor q = tu_rows_view(&x.q, t0, n), k = tu_rows_view(&x.k, t0, n), v = tu_rows_view(&x.v, t0, n);
    const tu_tensor gt = g.data ? tu_rows_view(&g, t0, n) : g, bt = b.data ? tu_rows_view(&b, t0, n) : b;
    tu_tensor o;
    lu_call(&dt, &q, &k, &v, &gt, &bt, T, c->window ? NULL : &st.s, 0, &o);
    for (size_t i = 0; i < n; ++i) {
      const size_t t = t0 + i, first = c->window && t > TD_LEFT ? t - TD_LEFT : 0;
      for (size_t e = 0; e < TD_DV; ++e) {
        double sum = 0.0;
        for (size_t j = first; j <= t; ++j) sum += *tu_at(&x.v, j, 0, e);
        const float want = c->zero ? 0.0f : (float)(sum / (double)(t + 1 - first)), got = *tu_at(&o, i, 0, e);
        ck_assert_msg(got == want, "%s: row %zu column %zu: %g, want %g", c->name, t, e, (double)got, (double)want);
      }
    }
    tu_tensor_free(&o);
    t0 += n;
  }
  lu_state_free(&st);
  tu_tensor_free(&g);
  tu_tensor_free(&b);
  tu_qkv_free(&x);
}
END_TEST

static Suite *linear_suite(attn_isa isa) {
  size_t work[LN_NCASES];
  for (size_t i = 0; i < LN_NCASES; ++i) {
    const ln_case *c = &ln_cases[i];
    const size_t m = c->xmap == FAV ? (c->m ? c->m : 4 * c->d) : c->d; /* favor's reference: m per pair */
    work[i] = c->n_q * (c->n_kv + c->prefix) * lu_max3(c->h_q, c->h_k, c->h_v) * (m + c->dv);
  }
  const size_t nsel = tu_select_rows(LN_NCASES, work, ln_sel);
  /* clang-format off */
  return TU_SUITE(isa,
    {"reference", linear_matches_reference, (int)nsel},
      {"reference", linear_nonfinite_policy, (int)(LNF_NCASES * LNF_NMAPS)},
      {"reference", linear_nonfinite_decode_token, (int)(LNF_NCASES * LNF_NMAPS)},
      {"reference", linear_eps0_empty_rows_are_zero, (int)(sizeof eps0_maps / sizeof eps0_maps[0])},
      {"reference", linear_eps0_subnormal_denominator, (int)(sizeof td_cases / sizeof td_cases[0])},
    {"properties", linear_chunkwise_matches_recurrent, (int)LN_NPROPS},
      {"properties", linear_prefill_state_continues_decode, (int)LN_NPROPS},
      {"properties", linear_snapshot_restore_bit_exact, (int)(2 * LN_NPROPS)},
      {"properties", linear_split_prefill_matches_one_call, (int)LN_NPROPS},
      {"properties", linear_layout_bit_exact, (int)LN_NPROPS});
  /* clang-format on */
}

int main(void) { return tu_main(linear_suite); }
