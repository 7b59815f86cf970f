/*
 * Linear attention and its state, on the ISA path named by ATTN_ISA, against the float64
 * reference. Every feature map: identity, elu1, relu, and the exponential maps exp, favor
 * (FAVOR+) and dsoftmax (exact per-feature offsets in the state). TCases: "reference" (the shape
 * table, outputs and states; separate query, key and value head counts; scale; the non-finite
 * policy; rows without keys), "properties" (chunkwise prefill vs recurrent decode for several
 * chunk sizes, prefill state continuing into decode, bit-exact snapshot / restore, a prefill split
 * in two calls), "exponential" (FAVOR+ against its float64 formula, seed sources against the W
 * of attn_linear_favor_matrix and its transpose, the matrix's properties and contract; exp and
 * favor with features up to +-150; dsoftmax against softmax_rows(Q) softmax_cols(K)^T V, with
 * v = 1, and its shift invariances), "window" (windowed linear attention, any mask but full and
 * causal, on every map: a reference table, every mask at every size around the blocks as square
 * calls, chunked prefill and decode, windows that bound nothing vs the chunkwise calls, a sliding
 * window in random pieces then decode steps vs one call, the non-finite policy with visible and
 * hidden keys, exp, favor and dsoftmax with features up to +-150 and keys far above the rest at
 * the edges of the engine's blocks, the workspace of the exponential maps, and the statuses of
 * what a window refuses), "state" (the state's layout and management), "api" (descriptor
 * defaults, size queries, reentrancy) and "bad_input" (the exact status of every bad argument,
 * nothing written).
 * FAVOR+ states are compared through their offset-free sums (ln_state_rebase): the library's
 * offsets come from its own float dot products; exp's and dsoftmax's offsets must be exact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linear_util.h"
#include "test_util.h"
#include "tolerances.h"

#define T                       TU_TOKEN_MAJOR
#define H                       TU_HEAD_MAJOR
#define P                       TU_PADDED
#define HP                      TU_HEAD_PADDED
#define PK                      TU_PACKED_QKV
#define POS                     TU_DATA_POSITIVE
#define WIDE                    TU_DATA_WIDE
#define SIZES(nq, nkv, dd, ddv) .n_q = (nq), .n_kv = (nkv), .d = (dd), .dv = (ddv)
#define HEADS(q, k, v)          .h_q = (q), .h_k = (k), .h_v = (v)
#define EPS(x)                  .eps = (x), .set_eps = 1
#define SCALE(x)                .scale = (x), .set_scale = 1
#define XEXP                    .xmap = ATTN_FEATURE_EXP
#define XFAV                    .xmap = ATTN_FEATURE_FAVOR
#define XDSM                    .xmap = ATTN_FEATURE_DSOFTMAX
#define WCALLER                 .wsrc = 2
#define WSQRTD(s)               .wsrc = 1, .seed = (s)

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
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */
#define ELU    ATTN_FEATURE_ELU1
#define ID     ATTN_FEATURE_IDENTITY
#define RELU   ATTN_FEATURE_RELU
#define EXPM   ATTN_FEATURE_EXP
#define FAV    ATTN_FEATURE_FAVOR
#define DSM    ATTN_FEATURE_DSOFTMAX
#define CAUSAL 1
#define BIDIR  0
#define NORM   1
#define UNNORM 0

static size_t max3(size_t a, size_t b, size_t c) {
  const size_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}
/* The exponential maps: exact per-feature offsets in the state (column dv + 1). */
static int ln_xmap(attn_feature_map fm) { return fm == EXPM || fm == FAV || fm == DSM; }
static void ln_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t dd,
                    size_t dv, attn_feature_map fm, int causal, int normalize, size_t chunk) {
  ck_assert_int_eq(attn_linear_desc_init(d, n_q, n_kv, h_q, h_k, dd, dv, fm), ATTN_OK);
  ck_assert_int_eq(attn_shape_init(&d->shape, n_q, n_kv, h_q, h_k, h_v, dd, dv), ATTN_OK);
  d->mask = causal ? attn_mask_causal() : attn_mask_full();
  d->normalize = normalize;
  d->chunk = chunk;
}

/* FAVOR+ source of a test: 0 leaves the seed source (chi) with `seed`, 1 sets SEED_SQRT_D with
 * `seed`, 2 sets ATTN_FAVOR_CALLER with m x d Gaussian floats from rng, returned (the caller
 * frees them; NULL otherwise). No-op for the other maps. d->m must be set first. */
static float *ln_set_favor(attn_linear_desc *d, int wsrc, uint64_t seed, tu_rng *rng) {
  if (d->feature_map != FAV) return NULL;
  d->favor_seed = seed;
  if (wsrc == 1) d->favor_source = ATTN_FAVOR_SEED_SQRT_D;
  if (wsrc != 2) return NULL;
  const size_t count = lu_feature_size(d) * d->shape.d;
  float *w = malloc(sizeof(float) * count);
  ck_assert_ptr_nonnull(w);
  tu_fill_gauss(w, count, rng, 1.0);
  d->favor_source = ATTN_FAVOR_CALLER;
  d->favor_w = w;
  return w;
}

/* The W a FAVOR+ descriptor uses: the caller's, or what attn_linear_favor_matrix writes for its
 * seed source (test linear_favor_seed_equals_caller shows that a seed call is a caller call with
 * that W, bit for bit), cached per (source, seed, m, d) for the process. NULL for other maps. */
typedef struct ln_wentry {
  attn_favor_source src;
  uint64_t seed;
  size_t m, d;
  float *w;
} ln_wentry;
enum { LN_WCACHE = 16 };
static ln_wentry ln_wcache[LN_WCACHE];
static size_t ln_wcount;

static const float *ln_favor_w(const attn_linear_desc *d) {
  if (d->feature_map != FAV) return NULL;
  if (d->favor_source == ATTN_FAVOR_CALLER) return d->favor_w;
  /* W does not depend on the mask: asked of the causal descriptor, whose workspace is the
   * chunkwise engine's (linear_window_xmap_workspace asks a windowed one) */
  attn_linear_desc causal = *d;
  causal.mask = attn_mask_causal();
  d = &causal;
  const size_t m = lu_feature_size(d), dd = d->shape.d;
  for (size_t i = 0; i < LN_WCACHE; ++i) {
    const ln_wentry *e = &ln_wcache[i];
    if (e->w && e->src == d->favor_source && e->seed == d->favor_seed && e->m == m && e->d == dd) return e->w;
  }
  ln_wentry *e = &ln_wcache[ln_wcount++ % LN_WCACHE];
  free(e->w);
  e->src = d->favor_source;
  e->seed = d->favor_seed;
  e->m = m;
  e->d = dd;
  e->w = malloc(sizeof(float) * m * dd);
  ck_assert_ptr_nonnull(e->w);
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(d, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear_favor_matrix(d, e->w, m * dd, mem, ws), ATTN_OK);
  tu_free(mem);
  return e->w;
}

/* FAVOR+ states carry offsets c_f that come from the library's float dot products, so two
 * states (the reference's and the library's, or two of the library's) agree on the offset-free
 * sums S_f exp(c_f), not on S_f: re-express S and z of `s` (and their scales) in the offsets of
 * `target` (S exp(c - c_target), in double); the offset columns stay as they are and are compared
 * directly (favor: within a dot product's rounding; exp and dsoftmax: exactly, so these never
 * call this). rows = heads * m, ld = dv + 2. */
static void ln_state_rebase(double *s, double *scale, double *arg, size_t rows, size_t dv, const float *target) {
  const size_t ld = dv + 2;
  for (size_t r = 0; r < rows; ++r) {
    const double f = exp(s[r * ld + dv + 1] - (double)target[r * ld + dv + 1]);
    for (size_t c = 0; c <= dv; ++c) {
      s[r * ld + c] *= f;
      if (scale) scale[r * ld + c] *= f;
      if (arg) arg[r * ld + c] *= f;
    }
  }
}

/* attn_linear with q, k, v as given (linear_util.h: o freshly allocated in layout okind, memory
 * checks). */
static void ln_call(const attn_linear_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                    tu_layout_kind okind, attn_linear_state *state, size_t misalign, tu_tensor *o) {
  lu_call(desc, q, k, v, NULL, NULL, okind, state, misalign, o);
}

static ref_linear_problem ln_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                                     const tu_tensor *v, const double *s0) {
  return lu_ref_problem(d, q, k, v, s0, lu_feature_size(d), ln_favor_w(d));
}

/* Report family of a comparison (ATTN_TEST_REPORT): one per map group, outputs and states. */
static const char *ln_family(attn_feature_map fm, int state) {
  switch (fm) {
    case EXPM:
      return state ? "linear.exp.state" : "linear.exp.o";
    case FAV:
      return state ? "linear.favor.state" : "linear.favor.o";
    case DSM:
      return state ? "linear.dsoftmax.state" : "linear.dsoftmax.o";
    default:
      return state ? "linear.state" : "linear.o";
  }
}

/* The tolerance of every element (tolerances.h, by map: the exponential maps' grows with the
 * weighted size of their exponents, arg / scale), times factor. */
static double *ln_tols(attn_feature_map fm, int state, size_t n_tokens, size_t m, const double *scale,
                       const double *arg, size_t count, double factor) {
  double *t = malloc(sizeof(double) * (count ? count : 1));
  ck_assert_ptr_nonnull(t);
  for (size_t e = 0; e < count; ++e) {
    double tol;
    if (!ln_xmap(fm))
      tol = state ? tol_linear_state(n_tokens) : tol_linear_o(n_tokens, m);
    else
      tol = state ? tol_linear_xp_state(n_tokens, scale[e], arg[e]) : tol_linear_xp_o(n_tokens, m, scale[e], arg[e]);
    t[e] = factor * tol;
  }
  return t;
}

/* The one output comparison: got against expected values (the reference or another library
 * result) with the reference's scales and argument scales (exponential maps); n_tokens: the
 * tokens behind the sums; factor: 1 against the reference, TOL_PROPERTY_FACTOR between two
 * library results. */
static void ln_compare(const char *what, attn_feature_map fm, size_t n_tokens, size_t m, const tu_tensor *got,
                       const double *expect, const double *scale, const double *arg, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *tol = ln_tols(fm, 0, n_tokens, m, scale, arg, count, factor);
  tu_compare(ln_family(fm, 0), what, got, expect, scale, tol);
  free(tol);
}

/* Reference output of a problem: values, scales, argument scales ([n_q][H][dv]). */
typedef struct ln_ref {
  double *o, *scale, *arg;
} ln_ref;

static void ln_ref_output(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                          const double *s0, ln_ref *r) {
  const ref_linear_problem p = ln_problem(d, q, k, v, s0);
  const size_t count = d->shape.n_q * lu_out_heads(d) * d->shape.dv;
  r->o = malloc(sizeof(double) * count);
  r->scale = malloc(sizeof(double) * count);
  r->arg = malloc(sizeof(double) * count);
  ck_assert(r->o && r->scale && r->arg);
  ref_linear_ex(&p, r->o, r->scale, r->arg);
}

static void ln_ref_free(ln_ref *r) {
  free(r->o);
  free(r->scale);
  free(r->arg);
}

/* Reference outputs and scales of a problem, then the comparison; prefix counts the key tokens
 * behind the incoming state. */
static void ln_check_output(const char *what, const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                            const tu_tensor *v, const double *s0, size_t prefix, const tu_tensor *got) {
  ln_ref r;
  ln_ref_output(d, q, k, v, s0, &r);
  ln_compare(what, d->feature_map, prefix + d->shape.n_kv, lu_feature_size(d), got, r.o, r.scale, r.arg, 1.0);
  ln_ref_free(&r);
}

/* A state against expected values (the reference's state, or another library state as doubles)
 * with the reference's scales; favor: expected re-expressed in the offsets of s first. The offset
 * column's scale is 0 for exp and dsoftmax: exact. */
static void ln_compare_state(const char *what, attn_feature_map fm, size_t n_tokens, const attn_linear_state *s,
                             double *expect, double *scale, double *arg, double factor) {
  const size_t count = lu_state_floats(s);
  if (fm == FAV) ln_state_rebase(expect, scale, arg, s->heads * s->m, s->dv, s->data);
  double *tol = ln_tols(fm, 1, n_tokens, s->m, scale, arg, count, factor);
  const tu_tensor view = lu_state_view(s);
  tu_compare(ln_family(fm, 1), what, &view, expect, scale, tol);
  free(tol);
}

/* The state after a call against the reference: s0 plus this call's keys; tokens counted; the
 * offset column (and z when not normalised) must be exactly 0 for the elementwise maps, exactly
 * the reference's offsets for exp and dsoftmax (their reference scale is 0). */
static void ln_check_state(const char *what, const attn_linear_desc *d, const tu_tensor *k, const tu_tensor *v,
                           const double *s0, size_t prefix, const attn_linear_state *s) {
  const ref_linear_problem p = ln_problem(d, k, k, v, s0);
  const size_t count = lu_state_floats(s);
  double *rs = malloc(sizeof(double) * count), *sc = malloc(sizeof(double) * count);
  double *sa = malloc(sizeof(double) * count);
  ck_assert(rs && sc && sa);
  ck_assert_uint_eq(s->tokens, prefix + d->shape.n_kv);
  ck_assert_uint_eq(s->heads, lu_state_heads(d));
  ck_assert_uint_eq(s->m, lu_feature_size(d));
  ck_assert_uint_eq(s->dv, d->shape.dv);
  ck_assert_uint_eq(s->ld, d->shape.dv + 2);
  ref_linear_state_ex(&p, rs, sc, sa);
  ln_compare_state(what, d->feature_map, prefix + d->shape.n_kv, s, rs, sc, sa, 1.0);
  free(rs);
  free(sc);
  free(sa);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
START_TEST(linear_matches_reference) {
  const size_t idx = ln_sel[_i];
  const ln_case *c = &ln_cases[idx];
  tu_rng rng;
  tu_rng_seed(&rng, 7000 + idx);
  attn_linear_desc d;
  const attn_feature_map fm = c->xmap ? (attn_feature_map)c->xmap : c->identity ? ID : c->relu ? RELU : ELU;
  ln_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, fm, !c->bidir, !c->unnorm, c->chunk);
  d.m = c->m;
  if (c->set_eps) d.eps = c->eps;
  if (c->set_scale) d.scale = c->scale;
  float *w = ln_set_favor(&d, c->wsrc, c->seed, &rng);
  lu_state st;
  attn_linear_state *state = NULL;
  double *s0 = NULL;
  if (!c->bidir && !c->no_state) {
    lu_state_make(&st, &d);
    state = &st.s;
  }
  if (c->prefix) {
    ck_assert_ptr_nonnull(state); /* a prefix lives in a state */
    tu_qkv px;
    tu_qkv_make(&px, T, c->data, &rng, c->prefix, c->prefix, c->h_q, c->h_k, c->h_v, c->d, c->dv);
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = c->prefix;
    tu_tensor po;
    ln_call(&pd, &px.q, &px.k, &px.v, T, state, 0, &po);
    ck_assert_uint_eq(state->tokens, c->prefix);
    s0 = lu_state_to_double(state);
    tu_tensor_free(&po);
    tu_qkv_free(&px);
  }
  tu_qkv x;
  tu_qkv_make(&x, c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, c->layout == PK ? T : c->layout, state, (idx % 2) * 4, &o);
  tu_qkv_assert_unchanged(&x);
  ln_check_output(c->name, &d, &x.q, &x.k, &x.v, s0, c->prefix, &o);
  if (state) ln_check_state(c->name, &d, &x.k, &x.v, s0, c->prefix, state);
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
  ln_desc(d, n_q, n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, c->fm, CAUSAL, c->normalize, c->chunk);
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
  ln_ref ref;  /* its reference */
  size_t hd;   /* floats per output token: H * dv */
  size_t m;    /* feature size */
} ln_full;

static void ln_full_make(ln_full *f, const ln_prop_case *c, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_qkv_make(&f->x, T, TU_DATA_UNIFORM, &rng, c->n + 1, c->n + 1, c->h_q, c->h_k, c->h_v, c->d, c->dv);
  f->q = tu_rows_view(&f->x.q, 0, c->n);
  f->k = tu_rows_view(&f->x.k, 0, c->n);
  f->v = tu_rows_view(&f->x.v, 0, c->n);
  ln_prop_w_make(c, &rng);
  ln_prop_desc(&f->d, c, c->n, c->n);
  f->m = lu_feature_size(&f->d);
  lu_state_make(&f->st, &f->d);
  ln_call(&f->d, &f->q, &f->k, &f->v, T, &f->st.s, 0, &f->o);
  f->hd = lu_out_heads(&f->d) * c->dv;
  f->got = malloc(sizeof(double) * c->n * f->hd);
  ck_assert_ptr_nonnull(f->got);
  tu_tensor_to_double(&f->o, f->got);
  ln_ref_output(&f->d, &f->q, &f->k, &f->v, NULL, &f->ref);
}

static void ln_full_free(ln_full *f) {
  free(f->got);
  ln_ref_free(&f->ref);
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
  ln_call(&d, &q, &k, &v, T, state, 0, o);
}

/* Chunkwise prefill equals token-by-token decode (outputs row by row, and the final states). */
START_TEST(linear_chunkwise_matches_recurrent) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 8000 + (uint64_t)_i);
  ln_compare("prefill", c->fm, c->n, f.m, &f.o, f.ref.o, f.ref.scale, f.ref.arg, 1.0);
  lu_state dec;
  lu_state_make(&dec, &f.d);
  const size_t hd = f.hd;
  for (size_t t = 0; t < c->n; ++t) {
    tu_tensor o;
    ln_decode_step(c, &f.x, t, &dec.s, &o);
    ln_compare("decode step vs prefill row", c->fm, c->n, f.m, &o, f.got + t * hd, f.ref.scale + t * hd,
               f.ref.arg + t * hd, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(dec.s.tokens, f.st.s.tokens);
  double *sp = lu_state_to_double(&f.st.s);
  const ref_linear_problem p = ln_problem(&f.d, &f.q, &f.k, &f.v, NULL);
  const size_t count = lu_state_floats(&dec.s);
  double *rs = malloc(sizeof(double) * count), *sc = malloc(sizeof(double) * count);
  double *sa = malloc(sizeof(double) * count);
  ck_assert(rs && sc && sa);
  ref_linear_state_ex(&p, rs, sc, sa);
  ln_compare_state("decoded state vs prefill state", c->fm, c->n, &dec.s, sp, sc, sa, TOL_PROPERTY_FACTOR);
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
  ln_check_state("prefill state", &f.d, &f.k, &f.v, NULL, 0, &f.st.s);
  tu_tensor o;
  ln_decode_step(c, &f.x, c->n, &f.st.s, &o);
  ck_assert_uint_eq(f.st.s.tokens, c->n + 1);
  /* reference: row n of the whole n + 1 token causal sequence */
  attn_linear_desc whole;
  ln_prop_desc(&whole, c, c->n + 1, c->n + 1);
  ln_ref r;
  ln_ref_output(&whole, &f.x.q, &f.x.k, &f.x.v, NULL, &r);
  const size_t hd = f.hd;
  ln_compare("decode after prefill", c->fm, c->n + 1, f.m, &o, r.o + c->n * hd, r.scale + c->n * hd, r.arg + c->n * hd,
             1.0);
  ln_check_state("state after prefill + decode", &whole, &f.x.k, &f.x.v, NULL, 0, &f.st.s);
  ln_ref_free(&r);
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
  ln_call(&d, &q0, &k0, &v0, T, &st.s, 0, &o0);
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
  ln_call(&d, &q1, &k1, &v1, T, &st.s, 0, &o1);
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
  ln_call(&d, &q1, &k1, &v1, T, &st.s, 0, &o2);
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
    ln_call(&d, &q, &k, &v, T, &st.s, 0, &o);
    ln_compare("split prefill vs one call", c->fm, n, f.m, &o, f.got + part[s][0] * hd, f.ref.scale + part[s][0] * hd,
               f.ref.arg + part[s][0] * hd, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(st.s.tokens, n);
  ln_check_state("state after split prefill", &f.d, &f.k, &f.v, NULL, 0, &st.s);
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
    ln_call(&d, &x[k].q, &x[k].k, &x[k].v, kinds[k], &st[k].s, 0, &o[k]);
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

/* elu1 accuracy through the public API: d = dv = 1, one key 0 (psi = 1) with value 1, so the
 * un-normalised bidirectional output is phi(q) itself; q sweeps [-87, 30] (exp branch below 0). */
enum { ELU_SWEEP = 2001 };
START_TEST(linear_elu1_accuracy_sweep) {
  tu_tensor q, k, v, o;
  tu_tensor_alloc(&q, T, ELU_SWEEP, 1, 1, 0);
  tu_tensor_alloc(&k, T, 1, 1, 1, 0);
  tu_tensor_alloc(&v, T, 1, 1, 1, 0);
  for (size_t i = 0; i < ELU_SWEEP; ++i) *tu_at(&q, i, 0, 0) = (float)(-87.0 + 117.0 * (double)i / (ELU_SWEEP - 1));
  *tu_at(&k, 0, 0, 0) = 0.0f;
  *tu_at(&v, 0, 0, 0) = 1.0f;
  attn_linear_desc d;
  ln_desc(&d, ELU_SWEEP, 1, 1, 1, 1, 1, 1, ELU, BIDIR, UNNORM, 0);
  ln_call(&d, &q, &k, &v, T, NULL, 0, &o);
  const ref_linear_problem p = ln_problem(&d, &q, &k, &v, NULL);
  double *ro = malloc(sizeof(double) * ELU_SWEEP), *rs = malloc(sizeof(double) * ELU_SWEEP);
  ck_assert(ro && rs);
  ref_linear(&p, ro, rs);
  double *tol = tu_dup(TOL_EXP_SWEEP_ELU1, ELU_SWEEP);
  tu_compare("linear.elu1", "elu1 sweep: o = phi(q)", &o, ro, rs, tol);
  free(tol);
  free(ro);
  free(rs);
  tu_tensor_free(&o);
  tu_tensor_free(&q);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
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
 * key and value heads (a poisoned value head reaches only the output heads that read it). */
static const lnf_case lnf_cases[] = {
    {.name = "causal_100_gqa", SIZES(100, 100, 8, 7), HEADS(4, 2, 2)},
    {.name = "causal_70_chunk16", SIZES(70, 70, 9, 16), HEADS(1, 1, 1), .chunk = 16},
    {.name = "chunk_30_of_50", SIZES(30, 50, 8, 8), HEADS(2, 2, 2)},
    {.name = "bidir_40", SIZES(40, 40, 8, 5), HEADS(2, 1, 1), .bidir = 1},
    {.name = "heads_2_2_8", SIZES(60, 60, 8, 8), HEADS(2, 2, 8), .chunk = 16},
    {.name = "heads_8_2_4_bidir", SIZES(30, 40, 8, 8), HEADS(8, 2, 4), .bidir = 1},
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

START_TEST(linear_nonfinite_policy) {
  const lnf_case *c = &lnf_cases[_i / LNF_NMAPS];
  const attn_feature_map fm = lnf_maps[_i % LNF_NMAPS];
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng;
    tu_rng_seed(&rng, 9500 + (uint64_t)_i);
    const size_t n1 = c->n_kv + 1; /* the prefill's keys and one decode token */
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, c->n_q + 1, n1, c->h_q, c->h_k, c->h_v, c->d, c->dv);
    char poison[64], what[96];
    tu_qkv_poison(&x, pc, 1, poison, sizeof poison); /* not in the decode token */
    attn_linear_desc d;
    ln_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, fm, !c->bidir, fm != ID, c->chunk);
    lu_state st;
    if (!c->bidir) lu_state_make(&st, &d);
    const tu_tensor q0 = tu_rows_view(&x.q, 0, c->n_q), k0 = tu_rows_view(&x.k, 0, c->n_kv);
    const tu_tensor v0 = tu_rows_view(&x.v, 0, c->n_kv);
    tu_tensor o;
    ln_call(&d, &q0, &k0, &v0, T, c->bidir ? NULL : &st.s, 0, &o);
    tu_qkv_assert_unchanged(&x);
    snprintf(what, sizeof what, "%s map %d: %s", c->name, (int)fm, poison);
    ln_check_output(what, &d, &q0, &k0, &v0, NULL, 0, &o);
    tu_tensor_free(&o);
    if (!c->bidir) { /* the decode step after it: row n_q of the whole sequence */
      attn_linear_desc step = d;
      step.shape.n_q = step.shape.n_kv = 1;
      const tu_tensor q1 = tu_rows_view(&x.q, c->n_q, 1), k1 = tu_rows_view(&x.k, c->n_kv, 1);
      const tu_tensor v1 = tu_rows_view(&x.v, c->n_kv, 1);
      ln_call(&step, &q1, &k1, &v1, T, &st.s, 0, &o);
      attn_linear_desc whole = d;
      whole.shape.n_q = c->n_q + 1;
      whole.shape.n_kv = n1;
      const size_t hd = lu_out_heads(&d) * c->dv;
      ln_ref r;
      ln_ref_output(&whole, &x.q, &x.k, &x.v, NULL, &r);
      ln_compare(what, fm, n1, lu_feature_size(&d), &o, r.o + c->n_q * hd, r.scale + c->n_q * hd, r.arg + c->n_q * hd,
                 1.0);
      ln_ref_free(&r);
      tu_tensor_free(&o);
      lu_state_free(&st);
    }
    tu_qkv_free(&x);
  }
}
END_TEST

/* eps = 0: a normalised row whose denominator is exactly 0 gives zeros (as softmax does for a
 * row with no visible key): n_q > n_kv leaves the first rows without a key. For elu1 and the
 * exponential maps (dsoftmax: a feature with nothing visible contributes 0). */
static const attn_feature_map eps0_maps[] = {ELU, EXPM, FAV, DSM};
START_TEST(linear_eps0_empty_rows_are_zero) {
  tu_rng rng;
  tu_rng_seed(&rng, 9600);
  tu_qkv x;
  tu_qkv_make(&x, T, POS, &rng, 9, 4, 2, 1, 1, 8, 8);
  for (int with_state = 0; with_state < 2; ++with_state) {
    attn_linear_desc d;
    ln_desc(&d, 9, 4, 2, 1, 1, 8, 8, eps0_maps[_i], CAUSAL, NORM, 0);
    d.eps = 0.0f;
    lu_state st;
    if (with_state) lu_state_make(&st, &d);
    tu_tensor o;
    ln_call(&d, &x.q, &x.k, &x.v, T, with_state ? &st.s : NULL, 0, &o);
    for (size_t i = 0; i < 5; ++i)
      for (size_t h = 0; h < 2; ++h)
        for (size_t c = 0; c < 8; ++c)
          ck_assert_msg(*tu_at(&o, i, h, c) == 0.0f, "row %zu: %g", i, (double)*tu_at(&o, i, h, c));
    ln_check_output("eps = 0, rows without keys", &d, &x.q, &x.k, &x.v, NULL, 0, &o);
    tu_tensor_free(&o);
    if (with_state) lu_state_free(&st);
  }
  tu_qkv_free(&x);
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
        ln_desc(&d, 3, 3, 2, 1, 1, ds[i], 5, (attn_feature_map)fm, CAUSAL, NORM, 0);
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

/* ------------------------------------------------------------------------------------------ */
/* FAVOR+: the float64 formula, seed sources and the matrix                                    */
/* ------------------------------------------------------------------------------------------ */
/* The unstabilised FAVOR+ formula in double, straight from attn.h, for moderate inputs (every
 * exponential finite): phi(x)_f = exp((W x')_f - |x'|^2 / 2) / sqrt(m), x' = sqrt(scale) x
 * rounded to float as the library documents (fl32(sqrtf(scale) x)), o_i = sum_j (phi(q_i).phi(k_j))
 * v_j / sum_j phi(q_i).phi(k_j) (eps = 0) over the keys row i sees. One head, contiguous layouts. */
static void favor_formula(size_t n_q, size_t n_kv, size_t d, size_t dv, size_t m, const float *w, double scale,
                          int causal, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v, double *o) {
  double *pk = malloc(sizeof(double) * n_kv * m), *pq = malloc(sizeof(double) * m);
  ck_assert(pk && pq);
  const float xs = sqrtf((float)scale);
  for (int side = 0; side < 2; ++side) {
    const size_t rows = side ? n_q : n_kv;
    for (size_t r = 0; r < rows; ++r) {
      const float *x = side ? tu_at(q, r, 0, 0) : tu_at(k, r, 0, 0);
      double n2 = 0.0, xp[64];
      for (size_t t = 0; t < d; ++t) {
        xp[t] = (double)(xs * x[t]);
        n2 += xp[t] * xp[t];
      }
      double *phi = side ? pq : pk + r * m;
      for (size_t f = 0; f < m; ++f) {
        double dot = 0.0;
        for (size_t t = 0; t < d; ++t) dot += (double)w[f * d + t] * xp[t];
        phi[f] = exp(dot - 0.5 * n2) / sqrt((double)m);
      }
      if (!side) continue;
      double den = 0.0;
      for (size_t c = 0; c < dv; ++c) o[r * dv + c] = 0.0;
      for (size_t j = 0; j < n_kv; ++j) {
        if (causal && !ref_visible(r, j, n_q, n_kv, REF_UNBOUNDED, 0, 0)) continue;
        double kern = 0.0;
        for (size_t f = 0; f < m; ++f) kern += pq[f] * pk[j * m + f];
        for (size_t c = 0; c < dv; ++c) o[r * dv + c] += kern * (double)*tu_at(v, j, 0, c);
        den += kern;
      }
      for (size_t c = 0; c < dv; ++c) o[r * dv + c] = den > 0.0 ? o[r * dv + c] / den : 0.0;
    }
  }
  free(pk);
  free(pq);
}

/* FAVOR+ with the caller's W (Gaussian floats) and eps = 0 equals the float64 formula, causal
 * (chunk 7 and the path's default) and bidirectional, m = 4d, 37 and 1; the reference agrees
 * with the formula to 1e-12 (it is written in another, stabilised, form). */
START_TEST(linear_favor_caller_w_formula) {
  static const size_t ms[] = {0, 37, 1};
  const size_t n = 90, dd = 12, dv = 6, m0 = ms[_i % 3];
  const int mode = _i / 3; /* 0 causal default chunk, 1 causal chunk 7, 2 bidirectional */
  tu_rng rng;
  tu_rng_seed(&rng, 12000 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, 1, 1, 1, dd, dv);
  attn_linear_desc d;
  ln_desc(&d, n, n, 1, 1, 1, dd, dv, FAV, mode < 2, NORM, mode == 1 ? 7 : 0);
  d.eps = 0.0f;
  d.m = m0;
  float *w = ln_set_favor(&d, 2, 0, &rng);
  const size_t m = lu_feature_size(&d);
  lu_state st;
  if (mode < 2) lu_state_make(&st, &d);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, mode < 2 ? &st.s : NULL, 0, &o);
  double *fo = malloc(sizeof(double) * n * dv);
  ck_assert_ptr_nonnull(fo);
  favor_formula(n, n, dd, dv, m, w, (double)d.scale, mode < 2, &x.q, &x.k, &x.v, fo);
  ln_ref r;
  ln_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r);
  for (size_t e = 0; e < n * dv; ++e)
    ck_assert_msg(fabs(r.o[e] - fo[e]) <= 1e-12 * (r.scale[e] + 1e-300), "reference %.17g vs formula %.17g at %zu",
                  r.o[e], fo[e], e);
  ln_compare("favor caller W, eps 0: float64 formula", FAV, n, m, &o, fo, r.scale, r.arg, 1.0);
  if (mode < 2) {
    ln_check_state("favor caller W state", &d, &x.k, &x.v, NULL, 0, &st.s);
    lu_state_free(&st);
  }
  ln_ref_free(&r);
  free(fo);
  free(w);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* A seed source is the caller source with the W attn_linear_favor_matrix writes for the same
 * descriptor, and the caller source is ATTN_FAVOR_CALLER_T with W transposed: outputs and states
 * equal bit for bit, for both seed sources, m = 4d and 37, a causal prefill continued by a decode
 * step, and a bidirectional call. */
START_TEST(linear_favor_seed_equals_caller) {
  const attn_favor_source src = _i % 2 ? ATTN_FAVOR_SEED_SQRT_D : ATTN_FAVOR_SEED_CHI;
  const size_t m0 = (_i / 2) % 2 ? 37 : 0, n = 70, dd = 9, dv = 5;
  const int bidir = _i / 4;
  tu_rng rng;
  tu_rng_seed(&rng, 12100 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n + 1, n + 1, 4, 2, 2, dd, dv);
  attn_linear_desc ds;
  ln_desc(&ds, n, n, 4, 2, 2, dd, dv, FAV, !bidir, NORM, 0);
  ds.m = m0;
  ds.favor_source = src;
  ds.favor_seed = 0x5EED0000u + (uint64_t)_i;
  const size_t m = lu_feature_size(&ds);
  float *w = malloc(sizeof(float) * m * dd);
  ck_assert_ptr_nonnull(w);
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&ds, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear_favor_matrix(&ds, w, m * dd, mem, ws), ATTN_OK);
  tu_free(mem);
  float *wt = malloc(sizeof(float) * m * dd);
  ck_assert_ptr_nonnull(wt);
  for (size_t f = 0; f < m; ++f)
    for (size_t t = 0; t < dd; ++t) wt[t * m + f] = w[f * dd + t];
  attn_linear_desc dc[3] = {ds, ds, ds}; /* seed, caller W, caller W^T */
  dc[1].favor_source = ATTN_FAVOR_CALLER;
  dc[1].favor_w = w;
  dc[2].favor_source = ATTN_FAVOR_CALLER_T;
  dc[2].favor_w = wt;
  static const char *names[3] = {"seed", "caller W from favor_matrix", "caller W^T"};
  lu_state st[3];
  tu_tensor o[3];
  const tu_tensor q0 = tu_rows_view(&x.q, 0, n), k0 = tu_rows_view(&x.k, 0, n), v0 = tu_rows_view(&x.v, 0, n);
  const tu_tensor q1 = tu_rows_view(&x.q, n, 1), k1 = tu_rows_view(&x.k, n, 1), v1 = tu_rows_view(&x.v, n, 1);
  for (int c = 0; c < 3; ++c) {
    if (!bidir) lu_state_make(&st[c], &dc[c]);
    ln_call(&dc[c], &q0, &k0, &v0, T, bidir ? NULL : &st[c].s, 0, &o[c]);
  }
  ln_check_output("seed source", &ds, &q0, &k0, &v0, NULL, 0, &o[0]);
  char what[96];
  for (int c = 1; c < 3; ++c) {
    snprintf(what, sizeof what, "o: %s vs %s", names[0], names[c]);
    tu_assert_same_bits(what, o[0].data, o[c].data, sizeof(float) * o[0].span);
    if (!bidir) {
      snprintf(what, sizeof what, "state: %s vs %s", names[0], names[c]);
      tu_assert_same_bits(what, st[0].s.data, st[c].s.data, sizeof(float) * lu_state_floats(&st[0].s));
    }
  }
  for (int c = 0; c < 3; ++c) tu_tensor_free(&o[c]);
  if (!bidir) { /* a decode step on each state */
    for (int c = 0; c < 3; ++c) {
      attn_linear_desc step = dc[c];
      step.shape.n_q = step.shape.n_kv = 1;
      ln_call(&step, &q1, &k1, &v1, T, &st[c].s, 0, &o[c]);
    }
    for (int c = 1; c < 3; ++c) {
      snprintf(what, sizeof what, "decode step: %s vs %s", names[0], names[c]);
      tu_assert_same_bits(what, o[0].data, o[c].data, sizeof(float) * o[0].span);
      snprintf(what, sizeof what, "state after decode: %s vs %s", names[0], names[c]);
      tu_assert_same_bits(what, st[0].s.data, st[c].s.data, sizeof(float) * lu_state_floats(&st[0].s));
    }
    for (int c = 0; c < 3; ++c) {
      tu_tensor_free(&o[c]);
      lu_state_free(&st[c]);
    }
  }
  free(wt);
  free(w);
  tu_qkv_free(&x);
}
END_TEST

/* attn_linear_favor_matrix: statuses (nothing written on error), exactly m * d floats written,
 * deterministic, a smaller m is a prefix of a larger one, rows orthogonal within each block of d,
 * row norms sqrt(d) (SEED_SQRT_D) or chi-distributed with d degrees of freedom (SEED_CHI, whose
 * first block has the same directions: the same Gaussians are drawn first). */
static float *fm_matrix(size_t dd, size_t m, attn_favor_source src, uint64_t seed) {
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, 3, 3, 1, 1, dd, 4, FAV), ATTN_OK);
  d.m = m;
  d.favor_source = src;
  d.favor_seed = seed;
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  float *w = tu_alloc(sizeof(float) * m * dd, 0);
  ck_assert_int_eq(attn_linear_favor_matrix(&d, w, m * dd, mem, ws), ATTN_OK);
  tu_assert_guards("favor_matrix workspace", mem);
  tu_assert_guards("favor_matrix W", w);
  for (size_t e = 0; e < m * dd; ++e)
    ck_assert_msg(isfinite(w[e]), "W[%zu] = %g not written or not finite", e, (double)w[e]);
  tu_free(mem);
  return w;
}

static double fm_dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t t = 0; t < n; ++t) s += (double)a[t] * (double)b[t];
  return s;
}

START_TEST(linear_favor_matrix_properties) {
  static const size_t ds[] = {1, 7, 16, 33};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; ++i) {
    const size_t dd = ds[i], m = 3 * dd + 5;
    float *chi = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 42), *sq = fm_matrix(dd, m, ATTN_FAVOR_SEED_SQRT_D, 42);
    float *again = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 42), *other = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 43);
    float *prefix = fm_matrix(dd, 2 * dd + 1, ATTN_FAVOR_SEED_CHI, 42);
    tu_assert_same_bits("favor_matrix: the same seed twice", chi, again, sizeof(float) * m * dd);
    tu_assert_same_bits("favor_matrix: m rows are the first m rows of a larger m", prefix, chi,
                        sizeof(float) * (2 * dd + 1) * dd);
    ck_assert_msg(memcmp(chi, other, sizeof(float) * m * dd) != 0, "seeds 42 and 43 give the same W");
    for (size_t r = 0; r < m; ++r) {
      const double nsq = sqrt(fm_dot(sq + r * dd, sq + r * dd, dd)),
                   nchi = sqrt(fm_dot(chi + r * dd, chi + r * dd, dd));
      ck_assert_msg(fabs(nsq - sqrt((double)dd)) <= 1e-6 * sqrt((double)dd), "d %zu row %zu: SEED_SQRT_D norm %.9g", dd,
                    r, nsq);
      ck_assert_msg(nchi > 0.0, "d %zu row %zu: zero row", dd, r);
      for (size_t s = r + 1; s < m && s / dd == r / dd; ++s) { /* orthogonal within a block */
        const double c = fm_dot(sq + r * dd, sq + s * dd, dd) / (double)dd;
        const double cc =
            fm_dot(chi + r * dd, chi + s * dd, dd) / (nchi * sqrt(fm_dot(chi + s * dd, chi + s * dd, dd)));
        ck_assert_msg(fabs(c) <= 1e-6 && fabs(cc) <= 1e-6, "d %zu rows %zu, %zu: cosines %.3g %.3g", dd, r, s, c, cc);
      }
      if (r < dd) /* the first block: the same directions */
        for (size_t t = 0; t < dd; ++t)
          ck_assert_msg(fabs(chi[r * dd + t] / nchi - sq[r * dd + t] / nsq) <= 1e-6, "d %zu row %zu: directions differ",
                        dd, r);
    }
    tu_free(chi);
    tu_free(sq);
    tu_free(again);
    tu_free(other);
    tu_free(prefix);
  }
  /* chi norms: |W_r|^2 has mean d and variance 2d; over 512 rows the mean of |W_r|^2 / d lies
   * within 6 standard deviations (6 sqrt(2 / (d 512))) of 1 */
  const size_t dd = 16, m = 512;
  float *chi = fm_matrix(dd, m, ATTN_FAVOR_SEED_CHI, 7);
  double mean = 0.0, spread = 0.0;
  for (size_t r = 0; r < m; ++r) {
    const double x = fm_dot(chi + r * dd, chi + r * dd, dd) / (double)dd;
    mean += x / (double)m;
    spread = fmax(spread, fabs(x - 1.0));
  }
  ck_assert_msg(fabs(mean - 1.0) <= 6.0 * sqrt(2.0 / (double)(dd * m)), "chi norms: mean |W_r|^2 / d = %.4f", mean);
  ck_assert_msg(spread > 0.05, "chi norms all equal (spread %.3g): not drawn", spread);
  tu_free(chi);
}
END_TEST

START_TEST(linear_favor_matrix_contract) {
  const size_t dd = 8, m = 32;
  attn_linear_desc d;
  ck_assert_int_eq(attn_linear_desc_init(&d, 3, 3, 1, 1, dd, 4, FAV), ATTN_OK);
  size_t need = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&d, &need), ATTN_OK);
  void *ws = tu_alloc(need + 256, 0);
  float *w = tu_alloc(sizeof(float) * (m * dd + 16), 0);
  const float *pristine = tu_alloc(sizeof(float) * (m * dd + 16), 0);
  const size_t wbytes = sizeof(float) * (m * dd + 16);
  attn_linear_desc bad = d;
#define FM_EXPECT(desc, wp, wf, wsp, wsz, status)                                         \
  do {                                                                                    \
    ck_assert_int_eq(attn_linear_favor_matrix((desc), (wp), (wf), (wsp), (wsz)), status); \
    tu_assert_same_bits("W after a rejected favor_matrix", pristine, w, wbytes);          \
    tu_assert_guards("W", w);                                                             \
    tu_assert_guards("favor_matrix workspace", ws);                                       \
  } while (0)
  FM_EXPECT(NULL, w, m * dd, ws, need, ATTN_E_NULL_POINTER);
  FM_EXPECT(&d, NULL, m * dd, ws, need, ATTN_E_NULL_POINTER);
  FM_EXPECT(&d, w, m * dd - 1, ws, need, ATTN_E_WORKSPACE_TOO_SMALL);
  if (need > 0) {
    FM_EXPECT(&d, w, m * dd, ws, need - 1, ATTN_E_WORKSPACE_TOO_SMALL);
    FM_EXPECT(&d, w, m * dd, NULL, need, ATTN_E_NULL_POINTER);
    FM_EXPECT(&d, (float *)ws + 4, m * dd, ws, need + 256, ATTN_E_ALIASING);
  }
  for (int fm = 0; fm < ATTN_FEATURE_COUNT; ++fm) {
    if (fm == FAV) continue;
    ck_assert_int_eq(attn_linear_desc_init(&bad, 3, 3, 1, 1, dd, 4, (attn_feature_map)fm), ATTN_OK);
    FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_FEATURE_MATRIX);
  }
  bad = d;
  bad.favor_source = ATTN_FAVOR_CALLER;
  bad.favor_w = pristine;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_FEATURE_MATRIX);
  bad = d;
  bad.favor_source = (attn_favor_source)99;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_FEATURE_MATRIX);
  bad = d;
  bad.shape.d = 0;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_ZERO_SIZE);
  bad = d;
  bad.scale = 0.0f;
  FM_EXPECT(&bad, w, m * dd, ws, need, ATTN_E_BAD_SCALE);
#undef FM_EXPECT
  /* success: exactly m * d floats, the rest of the buffer untouched */
  ck_assert_int_eq(attn_linear_favor_matrix(&d, w, m * dd + 16, ws, need), ATTN_OK);
  for (size_t e = 0; e < m * dd; ++e) ck_assert(isfinite(w[e]));
  tu_assert_same_bits("W past m * d floats", pristine + m * dd, w + m * dd, sizeof(float) * 16);
  tu_assert_guards("W", w);
  tu_assert_guards("favor_matrix workspace", ws);
  tu_free(ws);
  tu_free(w);
  tu_free((void *)pristine);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* exp and favor under stress: features up to +-150, exact stabilisation                        */
/* ------------------------------------------------------------------------------------------ */
/* Inputs are designed as target features T (n x d): exp's x' = T; favor's W x' = T with
 * W = 100 Q (Q orthonormal rows from the test's own Gram-Schmidt, m = d), x' = Q^T T / 100, so
 * that its features u = T - |x'|^2 / 2 follow the same pattern (|x'|^2 / 2 <= 9). x = x' / xs.
 * Patterns:
 *   0 wide: q, k in [-150, 150];
 *   1 low feature: keys' feature 0 in [-110, -90], the rest in [-10, 10]; queries' feature 0 in
 *     [140, 150]: the term that matters is 100 below every other key feature (a single
 *     per-head maximum would underflow it to 0);
 *   2 high key: everything in [-5, 5] but keys 17, 66 and 101 (mid-chunk for chunks 48 and 7),
 *     100 above the rest in every feature: queries before them in their chunk must be exact;
 *   3 the same 30 above (below a chunk-split guard of 40: a query that used the raised offset
 *     would see its denominator shrink by e^-30, and eps with it grow by e^30);
 *   4 the same, feature 0 only, 100 above.
 * Causal with chunk 48 and 7, and bidirectional; eps the default, 0 and 0.5 (eps is added to the
 * denominator stabilised with the offsets of the keys the row sees, >= 1). */
enum { XS_N = 120, XS_D = 8, XS_DV = 4, XS_PATTERNS = 5 };

static void xs_orthonormal(tu_rng *rng, double *Q, size_t d) {
  for (size_t r = 0; r < d; ++r) {
    double nrm = 0.0;
    do {
      for (size_t t = 0; t < d; ++t) Q[r * d + t] = tu_rng_gauss(rng);
      for (size_t s = 0; s < r; ++s) {
        double dot = 0.0;
        for (size_t t = 0; t < d; ++t) dot += Q[r * d + t] * Q[s * d + t];
        for (size_t t = 0; t < d; ++t) Q[r * d + t] -= dot * Q[s * d + t];
      }
      nrm = 0.0;
      for (size_t t = 0; t < d; ++t) nrm += Q[r * d + t] * Q[r * d + t];
      nrm = sqrt(nrm);
    } while (nrm < 1e-3);
    for (size_t t = 0; t < d; ++t) Q[r * d + t] /= nrm;
  }
}

/* favor's caller W = 100 Q (Q orthonormal rows), m = d, into the descriptor. */
static void xs_favor(tu_rng *rng, attn_linear_desc *d, double *Q, float *w) {
  xs_orthonormal(rng, Q, XS_D);
  for (size_t e = 0; e < XS_D * XS_D; ++e) w[e] = (float)(100.0 * Q[e]);
  d->m = XS_D;
  d->favor_source = ATTN_FAVOR_CALLER;
  d->favor_w = w;
}

/* The target features of one query (key 0) or key row; high: a key the pattern raises. */
static void xs_target(tu_rng *rng, int pattern, int key, int high, double *T) {
  for (size_t f = 0; f < XS_D; ++f) {
    double lo = -5.0, hi = 5.0;
    if (pattern == 0) lo = -150.0, hi = 150.0;
    if (pattern == 1) {
      lo = -10.0, hi = 10.0;
      if (f == 0) lo = key ? -110.0 : 140.0, hi = key ? -90.0 : 150.0;
    }
    double t = lo + (hi - lo) * (double)tu_rng_range(rng, 0.0f, 1.0f);
    if (high && (pattern == 2 || (pattern == 4 && f == 0))) t += 100.0;
    if (high && pattern == 3) t += 30.0;
    T[f] = t;
  }
}

/* q and k (one head) from target features: x = x' / xs with x' = T (exp; dsoftmax, whose xs is
 * 1: its pre-features are k itself), or for favor (Q given) x' = Q^T T / 100, so that W x' = T.
 * The keys raised: high[j], or with high NULL keys 17, 66 and 101 (mid-chunk for chunks 48 and
 * 7). Then a fresh snapshot of the inputs. */
static void xs_fill(tu_rng *rng, tu_qkv *x, int pattern, const double *Q, float xs, const unsigned char *high) {
  for (int key = 0; key < 2; ++key)
    for (size_t j = 0; j < (key ? x->k.n : x->q.n); ++j) {
      double T[XS_D], xp[XS_D];
      xs_target(rng, pattern, key, key && (high ? high[j] : j == 17 || j == 66 || j == 101), T);
      for (size_t t = 0; t < XS_D; ++t) {
        xp[t] = T[t];
        if (Q) { /* x' = Q^T T / 100: W x' = T */
          xp[t] = 0.0;
          for (size_t f = 0; f < XS_D; ++f) xp[t] += Q[f * XS_D + t] * T[f] / 100.0;
        }
        *tu_at(key ? &x->k : &x->q, j, 0, t) = (float)(xp[t] / (double)xs);
      }
    }
  tu_qkv_snapshot(x);
}

START_TEST(linear_exp_favor_stress) {
  const int favor = _i % 2, mode = (_i / 2) % 3, pattern = (_i / 6) % XS_PATTERNS, eps = _i / (6 * XS_PATTERNS);
  tu_rng rng;
  tu_rng_seed(&rng, 13000 + (uint64_t)_i);
  attn_linear_desc d;
  ln_desc(&d, XS_N, XS_N, 1, 1, 1, XS_D, XS_DV, favor ? FAV : EXPM, mode < 2, NORM, mode == 0 ? 48 : mode == 1 ? 7 : 0);
  if (eps) d.eps = eps == 1 ? 0.0f : 0.5f; /* 0.5: a misplaced eps (added to a denominator with other offsets) shows */
  float w[XS_D * XS_D];
  double Q[XS_D * XS_D];
  if (favor) xs_favor(&rng, &d, Q, w);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, XS_N, XS_N, 1, 1, 1, XS_D, XS_DV);
  xs_fill(&rng, &x, pattern, favor ? Q : NULL, sqrtf(d.scale), NULL);
  lu_state st;
  if (mode < 2) lu_state_make(&st, &d);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, mode < 2 ? &st.s : NULL, 0, &o);
  char what[96];
  snprintf(what, sizeof what, "%s stress: pattern %d, %s, eps %g", favor ? "favor" : "exp", pattern,
           mode == 0   ? "causal chunk 48"
           : mode == 1 ? "causal chunk 7"
                       : "bidirectional",
           (double)d.eps);
  for (size_t i = 0; i < XS_N; ++i)
    for (size_t c = 0; c < XS_DV; ++c)
      ck_assert_msg(isfinite(*tu_at(&o, i, 0, c)), "%s: o[%zu][%zu] = %g", what, i, c, (double)*tu_at(&o, i, 0, c));
  ln_check_output(what, &d, &x.q, &x.k, &x.v, NULL, 0, &o);
  if (mode < 2) {
    ln_check_state(what, &d, &x.k, &x.v, NULL, 0, &st.s);
    lu_state_free(&st);
  }
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST
#define XS_NRUNS (2 * 3 * XS_PATTERNS * 3)

/* ------------------------------------------------------------------------------------------ */
/* dsoftmax                                                                                    */
/* ------------------------------------------------------------------------------------------ */
/* Bidirectional dsoftmax is softmax_rows(Q) (softmax_cols(K)^T V), computed here directly in
 * double (one head): the library within tolerance, the reference to 1e-12. */
START_TEST(linear_dsoftmax_bidir_formula) {
  const size_t n_q = 37, n_kv = 53, dd = 11, dv = 7;
  tu_rng rng;
  tu_rng_seed(&rng, 14000 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, _i ? WIDE : TU_DATA_UNIFORM, &rng, n_q, n_kv, 1, 1, 1, dd, dv);
  attn_linear_desc d;
  ln_desc(&d, n_q, n_kv, 1, 1, 1, dd, dv, DSM, BIDIR, NORM, 0);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
  /* softmax_cols(K)^T V: dd x dv */
  double kv[11 * 7], *fo = malloc(sizeof(double) * n_q * dv);
  ck_assert_ptr_nonnull(fo);
  for (size_t f = 0; f < dd; ++f) {
    double mx = -INFINITY, z = 0.0;
    for (size_t j = 0; j < n_kv; ++j) mx = fmax(mx, (double)*tu_at(&x.k, j, 0, f));
    for (size_t c = 0; c < dv; ++c) kv[f * dv + c] = 0.0;
    for (size_t j = 0; j < n_kv; ++j) {
      const double e = exp((double)*tu_at(&x.k, j, 0, f) - mx);
      z += e;
      for (size_t c = 0; c < dv; ++c) kv[f * dv + c] += e * (double)*tu_at(&x.v, j, 0, c);
    }
    for (size_t c = 0; c < dv; ++c) kv[f * dv + c] /= z;
  }
  for (size_t i = 0; i < n_q; ++i) {
    double mx = -INFINITY, z = 0.0, p[11];
    for (size_t f = 0; f < dd; ++f) mx = fmax(mx, (double)*tu_at(&x.q, i, 0, f));
    for (size_t f = 0; f < dd; ++f) z += p[f] = exp((double)*tu_at(&x.q, i, 0, f) - mx);
    for (size_t c = 0; c < dv; ++c) {
      fo[i * dv + c] = 0.0;
      for (size_t f = 0; f < dd; ++f) fo[i * dv + c] += p[f] / z * kv[f * dv + c];
    }
  }
  ln_ref r;
  ln_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r);
  for (size_t e = 0; e < n_q * dv; ++e)
    ck_assert_msg(fabs(r.o[e] - fo[e]) <= 1e-12 * r.scale[e], "reference %.17g vs formula %.17g at %zu", r.o[e], fo[e],
                  e);
  ln_compare("dsoftmax bidirectional: softmax_rows(Q) softmax_cols(K)^T V", DSM, n_kv, dd, &o, fo, r.scale, r.arg, 1.0);
  ln_ref_free(&r);
  free(fo);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* With every v = 1 each R_f is 1 and every output is 1: causal (default chunk and 7, with a
 * prefix in the state) and bidirectional, keys over [-30, 30]. */
START_TEST(linear_dsoftmax_ones) {
  const int mode = _i; /* 0 causal default, 1 causal chunk 7 + prefix, 2 bidirectional */
  const size_t n = 100, dd = 16, dv = 5, prefix = mode == 1 ? 33 : 0;
  tu_rng rng;
  tu_rng_seed(&rng, 14100 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, WIDE, &rng, n + prefix, n + prefix, 2, 1, 1, dd, dv);
  for (size_t j = 0; j < n + prefix; ++j)
    for (size_t c = 0; c < dv; ++c) *tu_at(&x.v, j, 0, c) = 1.0f;
  tu_qkv_snapshot(&x);
  attn_linear_desc d;
  ln_desc(&d, n, n, 2, 1, 1, dd, dv, DSM, mode < 2, NORM, mode == 1 ? 7 : 0);
  lu_state st;
  double *s0 = NULL;
  if (mode < 2) lu_state_make(&st, &d);
  if (prefix) {
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = prefix;
    const tu_tensor pq = tu_rows_view(&x.q, 0, prefix), pk = tu_rows_view(&x.k, 0, prefix);
    const tu_tensor pv = tu_rows_view(&x.v, 0, prefix);
    tu_tensor po;
    ln_call(&pd, &pq, &pk, &pv, T, &st.s, 0, &po);
    tu_tensor_free(&po);
    s0 = lu_state_to_double(&st.s);
  }
  const tu_tensor q = tu_rows_view(&x.q, prefix, n), k = tu_rows_view(&x.k, prefix, n);
  const tu_tensor v = tu_rows_view(&x.v, prefix, n);
  tu_tensor o;
  ln_call(&d, &q, &k, &v, T, mode < 2 ? &st.s : NULL, 0, &o);
  ln_ref r;
  ln_ref_output(&d, &q, &k, &v, s0, &r);
  double *ones = tu_dup(1.0, n * 2 * dv);
  ln_compare("dsoftmax with v = 1: o = 1", DSM, n + prefix, dd, &o, ones, r.scale, r.arg, 1.0);
  free(ones);
  ln_ref_free(&r);
  free(s0);
  tu_tensor_free(&o);
  if (mode < 2) lu_state_free(&st);
  tu_qkv_free(&x);
}
END_TEST

/* dsoftmax is invariant to a constant added to one key feature column (every key) or to one
 * query row: the library's results agree within the sum of both bounds. Causal (chunk 7 and the
 * default) and bidirectional; constants 40 and -25.5, added exactly (inputs on a 2^-12 grid). */
static void ds_quantise(tu_tensor *t) {
  for (size_t i = 0; i < t->n; ++i)
    for (size_t h = 0; h < t->h; ++h)
      for (size_t c = 0; c < t->w; ++c) *tu_at(t, i, h, c) = ldexpf(roundf(ldexpf(*tu_at(t, i, h, c), 12)), -12);
}

START_TEST(linear_dsoftmax_shift_invariance) {
  const int mode = _i % 3, query = _i / 3;
  const size_t n = 90, dd = 9, dv = 6;
  tu_rng rng;
  tu_rng_seed(&rng, 14200 + (uint64_t)_i);
  tu_qkv x, y;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, 2, 2, 2, dd, dv);
  tu_rng_seed(&rng, 14200 + (uint64_t)_i);
  tu_qkv_make(&y, T, TU_DATA_UNIFORM, &rng, n, n, 2, 2, 2, dd, dv);
  ds_quantise(&x.q);
  ds_quantise(&x.k);
  ds_quantise(&y.q);
  ds_quantise(&y.k);
  tu_qkv_snapshot(&x);
  for (size_t j = 0; j < n; ++j)
    for (size_t h = 0; h < 2; ++h) {
      if (query)
        for (size_t f = 0; f < dd; ++f) *tu_at(&y.q, j, h, f) += j % 2 ? 40.0f : -25.5f;
      else
        *tu_at(&y.k, j, h, 3 + h) += h ? 40.0f : -25.5f;
    }
  tu_qkv_snapshot(&y);
  attn_linear_desc d;
  ln_desc(&d, n, n, 2, 2, 2, dd, dv, DSM, mode < 2, NORM, mode == 1 ? 7 : 0);
  tu_tensor o1, o2;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o1);
  ln_call(&d, &y.q, &y.k, &y.v, T, NULL, 0, &o2);
  ln_ref r1, r2;
  ln_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r1);
  ln_ref_output(&d, &y.q, &y.k, &y.v, NULL, &r2);
  const size_t count = n * 2 * dv;
  double *t1 = ln_tols(DSM, 0, n, dd, r1.scale, r1.arg, count, 1.0);
  double *t2 = ln_tols(DSM, 0, n, dd, r2.scale, r2.arg, count, 1.0);
  double *bound = malloc(sizeof(double) * count), *got1 = malloc(sizeof(double) * count);
  ck_assert(bound && got1);
  for (size_t e = 0; e < count; ++e) bound[e] = t1[e] * r1.scale[e] + t2[e] * r2.scale[e];
  tu_tensor_to_double(&o1, got1);
  double *unit = tu_dup(1.0, count);
  tu_compare("linear.dsoftmax.o",
             query ? "dsoftmax: a constant added to query rows" : "dsoftmax: a constant added to a key column", &o2,
             got1, bound, unit);
  for (size_t e = 0; e < count; ++e) /* and the reference is invariant too */
    ck_assert_msg(fabs(r1.o[e] - r2.o[e]) <= 1e-12 * (r1.scale[e] + r2.scale[e]), "reference not invariant at %zu", e);
  free(unit);
  free(bound);
  free(got1);
  free(t1);
  free(t2);
  ln_ref_free(&r1);
  ln_ref_free(&r2);
  tu_tensor_free(&o1);
  tu_tensor_free(&o2);
  tu_qkv_free(&x);
  tu_qkv_free(&y);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* FLASH's chunk-exclusive causal form (attn_linear_desc.exclusive_chunk, attn.h, 0.4.0)        */
/* ------------------------------------------------------------------------------------------ */
/* Cases {n_q, n_kv, h_q, h_kv, d, dv, G}; the maps rotate: identity un-normalised (FLASH's),
 * elu1 and relu normalised. The issue's g = 4, n = 10; chunks around the path's linear chunk
 * (48 on AVX2 and NEON, 64 scalar) and the blocks; chunked prefill and decode (bottom-right) at a
 * chunk's last and first token; n_q > n_kv; G = 1 (every earlier key); G beyond n (no key). */
static const size_t fx_cases[][7] = {
    {10, 10, 1, 1, 8, 8, 4},   {130, 130, 4, 2, 16, 16, 4}, {97, 97, 2, 1, 7, 5, 48},     {130, 130, 4, 4, 9, 13, 49},
    {40, 97, 4, 1, 8, 8, 7},   {1, 64, 2, 2, 8, 8, 16},     {1, 65, 2, 2, 8, 8, 16},      {30, 10, 2, 1, 8, 8, 4},
    {50, 50, 1, 1, 16, 16, 1}, {64, 64, 2, 1, 8, 8, 200},   {150, 150, 1, 1, 16, 16, 70},
};
#define FX_NCASES (sizeof fx_cases / sizeof fx_cases[0])
static const attn_feature_map fx_fm[3] = {ID, ELU, RELU};

static void fx_desc(attn_linear_desc *d, const size_t *c, size_t map) {
  ln_desc(d, c[0], c[1], c[2], c[3], c[3], c[4], c[5], fx_fm[map], CAUSAL, map != 0, 0);
  d->exclusive_chunk = c[6];
  d->scale = 1.0f / (float)c[6];
}

/* The chunk start of position p (p < 0: before every key, 0). */
static size_t fx_chunk_start(int64_t p, size_t G) { return p < 0 ? 0 : (size_t)p / G * G; }

/* Row i of a chunk-exclusive call is the bidirectional call of its query over the keys before its
 * chunk (the float64 reference of that call), and exactly 0 when there are none. */
START_TEST(linear_flash_exclusive_matches_reference) {
  const size_t *c = fx_cases[_i / 3], map = (size_t)_i % 3, G = c[6];
  tu_rng rng;
  tu_rng_seed(&rng, 17000 + (uint64_t)_i);
  attn_linear_desc d;
  fx_desc(&d, c, map);
  tu_qkv x;
  tu_qkv_make(&x, _i % 2 ? H : T, TU_DATA_UNIFORM, &rng, c[0], c[1], c[2], c[3], c[3], c[4], c[5]);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, (size_t)_i % 2 * 4, &o);
  tu_qkv_assert_unchanged(&x);
  for (size_t i = 0; i < c[0]; ++i) {
    const size_t cs = fx_chunk_start((int64_t)c[1] - (int64_t)c[0] + (int64_t)i, G);
    const tu_tensor row = tu_rows_view(&o, i, 1);
    char what[96];
    snprintf(what, sizeof what, "G %zu, map %zu, row %zu over %zu keys", G, map, i, cs);
    if (cs == 0) {
      for (size_t h = 0; h < c[2]; ++h)
        for (size_t col = 0; col < c[5]; ++col)
          ck_assert_msg(*tu_at(&row, 0, h, col) == 0.0f, "%s: %g", what, (double)*tu_at(&row, 0, h, col));
      continue;
    }
    attn_linear_desc rd = d;
    rd.exclusive_chunk = 0;
    rd.mask = attn_mask_full();
    rd.shape.n_q = 1;
    rd.shape.n_kv = cs;
    const tu_tensor q = tu_rows_view(&x.q, i, 1), k = tu_rows_view(&x.k, 0, cs), v = tu_rows_view(&x.v, 0, cs);
    ln_ref r;
    ln_ref_output(&rd, &q, &k, &v, NULL, &r);
    ln_compare(what, d.feature_map, cs, c[4], &row, r.o, r.scale, r.arg, 1.0);
    ln_ref_free(&r);
  }
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* A sequence in pieces with a state, each call passing the keys from the state's absorbed
 * boundary (the tokens of an incomplete chunk again): prefill of 37 tokens, a chunk of 20, then
 * decode steps; outputs equal one call's, the state's tokens are the complete chunks, and the
 * final state equals the one call's. */
START_TEST(linear_flash_pieces_then_decode) {
  static const size_t Gs[] = {4, 16, 7, 48};
  const size_t map = (size_t)_i % 3, G = Gs[_i / 3], n = 67, hq = 4, hkv = 2, dd = 8, dv = 8, hd = hq * dv;
  const size_t c[7] = {n, n, hq, hkv, dd, dv, G};
  tu_rng rng;
  tu_rng_seed(&rng, 17100 + (uint64_t)_i);
  attn_linear_desc d;
  fx_desc(&d, c, map);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  lu_state one_s, s;
  lu_state_make(&one_s, &d);
  lu_state_make(&s, &d);
  tu_tensor one;
  ln_call(&d, &x.q, &x.k, &x.v, T, &one_s.s, 0, &one);
  ck_assert_uint_eq(one_s.s.tokens, n / G * G);
  double *got = malloc(sizeof(double) * n * hd), *sc = malloc(sizeof(double) * n * hd);
  ck_assert(got && sc);
  tu_tensor_to_double(&one, got);
  ln_ref r; /* the scales of the one call's rows (the reference of the exclusive form: the test above) */
  attn_linear_desc rd = d;
  rd.exclusive_chunk = 0;
  ln_ref_output(&rd, &x.q, &x.k, &x.v, NULL, &r);
  for (size_t e = 0; e < n * hd; ++e) sc[e] = r.scale[e] + fabs(got[e]);
  for (size_t t = 0, len; t < n; t += len) {
    len = t == 0 ? 37 : t == 37 ? 20 : 1;
    const size_t from = s.s.tokens;
    ck_assert_uint_eq(from % G, 0);
    attn_linear_desc pd = d;
    pd.shape.n_q = len;
    pd.shape.n_kv = t + len - from;
    const tu_tensor q = tu_rows_view(&x.q, t, len), k = tu_rows_view(&x.k, from, t + len - from),
                    v = tu_rows_view(&x.v, from, t + len - from);
    tu_tensor o;
    ln_call(&pd, &q, &k, &v, T, &s.s, 0, &o);
    ck_assert_uint_eq(s.s.tokens, (t + len) / G * G);
    char what[96];
    snprintf(what, sizeof what, "G %zu map %zu: piece at %zu (%zu) vs one call", G, map, t, len);
    ln_compare(what, d.feature_map, n, dd, &o, got + t * hd, sc + t * hd, NULL, TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  const size_t count = lu_state_floats(&s.s);
  for (size_t e = 0; e < count; ++e) /* the same chunks absorbed in the same pieces: bit for bit */
    ck_assert_msg(s.s.data[e] == one_s.s.data[e], "G %zu map %zu: state[%zu] %g vs %g", G, map, e, (double)s.s.data[e],
                  (double)one_s.s.data[e]);
  free(got);
  free(sc);
  ln_ref_free(&r);
  tu_tensor_free(&one);
  lu_state_free(&one_s);
  lu_state_free(&s);
  tu_qkv_free(&x);
}
END_TEST

/* FLASH (spec 5) as the sum of its two documented calls, against the brute-force formula in
 * double: o_i = sum_{j in i's chunk, j <= p_i} relu(q_i.k_j / G + b[p_i - j])^2 v_j (attn_gau,
 * chunk-local causal mask, causal Toeplitz table) + sum_{j < chunk start} (q'_i.k'_j / G) v_j
 * (attn_linear, identity, un-normalised, exclusive chunk G). n = 10 with g = 4 (the issue's),
 * and n = 130 with G = 48 and 7; GQA 4 : 2. */
START_TEST(linear_flash_sum_matches_formula) {
  static const size_t ns[] = {10, 130, 130}, Gs[] = {4, 48, 7};
  const size_t n = ns[_i], G = Gs[_i], hq = 4, hkv = 2, dd = 8, dv = 8, grp = hq / hkv;
  tu_rng rng;
  tu_rng_seed(&rng, 17200 + (uint64_t)_i);
  tu_qkv x, y; /* x: the quadratic part's q, k, v; y: the linear part's q', k' (its v unused: v is shared) */
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  tu_qkv_make(&y, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  float table[48];
  for (size_t e = 0; e < G; ++e) table[e] = (float)(tu_rng_next(&rng) % 2001) * 1e-4f - 0.1f; /* in [-0.1, 0.1] */
  attn_gau_desc gd;
  ck_assert_int_eq(attn_gau_desc_init(&gd, n, n, hq, hkv, dd, dv), ATTN_OK);
  gd.mask = (attn_mask){ATTN_UNBOUNDED, 0, G};
  gd.scale = 1.0f / (float)G;
  gd.bias = ATTN_GAU_BIAS_CAUSAL;
  gd.bias_table = table;
  gd.bias_len = G;
  size_t ws = 0;
  ck_assert_int_eq(attn_gau_workspace_size(&gd, &ws), ATTN_OK);
  void *mem = tu_alloc(ws, 0);
  float *quad = malloc(sizeof(float) * n * hq * dv), *lin = malloc(sizeof(float) * n * hq * dv);
  ck_assert(quad && lin);
  ck_assert_int_eq(attn_gau(&gd, x.q.data, x.k.data, x.v.data, quad, mem, ws), ATTN_OK);
  tu_free(mem);
  attn_linear_desc ld;
  const size_t c[7] = {n, n, hq, hkv, dd, dv, G};
  fx_desc(&ld, c, 0);
  ck_assert_int_eq(attn_linear_workspace_size(&ld, &ws), ATTN_OK);
  mem = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear(&ld, y.q.data, y.k.data, x.v.data, lin, NULL, mem, ws), ATTN_OK);
  tu_free(mem);
  for (size_t i = 0; i < n; ++i)
    for (size_t h = 0; h < hq; ++h) {
      const size_t hk = h / grp, cs = i / G * G;
      for (size_t col = 0; col < dv; ++col) {
        double ref = 0.0, mag = 0.0;
        for (size_t j = 0; j <= i; ++j) {
          double s = 0.0, sa = 0.0;
          const tu_qkv *a = j >= cs ? &x : &y;
          for (size_t f = 0; f < dd; ++f) {
            const double p = (double)*tu_at(&a->q, i, h, f) * (double)*tu_at(&a->k, j, hk, f);
            s += p;
            sa += fabs(p);
          }
          s /= (double)G, sa /= (double)G;
          double w, wm;
          if (j >= cs) { /* the quadratic part */
            const double z = s + (double)table[i - j < G ? i - j : G - 1];
            w = z > 0.0 ? z * z : 0.0;
            wm = (fabs(z) + sa) * (fabs(z) + sa);
          } else {
            w = s, wm = sa;
          }
          const double vv = (double)*tu_at(&x.v, j, hk, col);
          ref += w * vv;
          mag += wm * fabs(vv);
        }
        const size_t e = (i * hq + h) * dv + col;
        const double got = (double)quad[e] + (double)lin[e];
        /* each term's error is a few float roundings of its magnitude: the dot product over d, the
         * square, the sums over n keys (tolerances.h: tol_linear_o's n + d roundings, doubled for
         * the square) */
        const double tol = 2.0 * tol_linear_o(n, dd) * mag + 1e-30;
        ck_assert_msg(fabs(got - ref) <= tol, "FLASH n %zu G %zu (%zu,%zu,%zu): %.9g vs %.9g (tol %.3g)", n, G, i, h,
                      col, got, ref, tol);
      }
    }
  free(quad);
  free(lin);
  tu_qkv_free(&x);
  tu_qkv_free(&y);
}
END_TEST

/* What the exclusive form refuses, output untouched: another mask than causal, a gate, an
 * exponential map, a state whose absorbed tokens are not whole chunks. */
START_TEST(linear_flash_rejects_bad_input) {
  const size_t n = 20, G = 4;
  const size_t c[7] = {n, n, 2, 2, 8, 8, G};
  tu_rng rng;
  tu_rng_seed(&rng, 17300 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, 2, 2, 2, 8, 8);
  attn_linear_desc d;
  fx_desc(&d, c, 0);
  lu_state s;
  lu_state_make(&s, &d);
  attn_status want = ATTN_E_BAD_WINDOW;
  float log_gate[20 * 2];
  for (size_t e = 0; e < 40; ++e) log_gate[e] = -0.1f;
  const float *lg = NULL;
  attn_linear_state *sp = NULL;
  switch (_i) {
    case 0:
      d.mask = attn_mask_full();
      break;
    case 1:
      d.mask = attn_mask_window(3, 0);
      break;
    case 2:
      d.mask = (attn_mask){ATTN_UNBOUNDED, 0, 4};
      break;
    case 3:
      d.gate = ATTN_GATE_SCALAR;
      d.gate_layout = (attn_layout){2, 1};
      lg = log_gate;
      break;
    case 4:
      d.feature_map = EXPM;
      d.normalize = 1;
      d.scale = 0.5f;
      want = ATTN_E_BAD_FEATURE_MAP;
      break;
    default: /* a state with 3 absorbed tokens */
      s.s.tokens = 3;
      sp = &s.s;
      want = ATTN_E_STATE_MISMATCH;
      break;
  }
  size_t ws = 1 << 20;
  void *mem = tu_alloc(ws, 0);
  float *o = malloc(sizeof(float) * n * 2 * 8);
  ck_assert_ptr_nonnull(o);
  for (size_t e = 0; e < n * 16; ++e) o[e] = 12345.0f;
  ck_assert_int_eq(attn_linear_gated(&d, x.q.data, x.k.data, x.v.data, lg, NULL, o, sp, mem, ws), want);
  for (size_t e = 0; e < n * 16; ++e) ck_assert(o[e] == 12345.0f);
  free(o);
  tu_free(mem);
  lu_state_free(&s);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Windowed linear attention: any mask but full and causal, every map (attn.h, 0.4.0)          */
/* ------------------------------------------------------------------------------------------ */
/* The maps of the window tests: the six that every rotation covers (identity un-normalised, elu1
 * and relu normalised, exp, favor with the seed source (chi, seed 0) and m = 4d, dsoftmax), and
 * the other modes of the element-wise maps for a few rows. A descriptor starts from
 * attn_linear_desc_init's defaults of its map: scale 1/sqrt(d) for exp and favor, scale 1 and
 * eps 0 for dsoftmax, scale 1 and eps 1e-6 otherwise. */
typedef enum lw_map { W_ID = 0, W_ELU, W_RELU, W_EXP, W_FAV, W_DSM, W_ELU_UN, W_RELU_UN, W_ID_NORM, W_NMAPS } lw_map;
#define LW_NROT 6 /* the maps of the rotations: W_ID .. W_DSM */
static const attn_feature_map lw_fm[W_NMAPS] = {ID, ELU, RELU, EXPM, FAV, DSM, ELU, RELU, ID};
static const int lw_norm[W_NMAPS] = {UNNORM, NORM, NORM, NORM, NORM, NORM, UNNORM, UNNORM, NORM};
/* The window map of an attn_feature_map of the bad-input rows (0: elu1). */
static lw_map lw_map_of(int fm) { return fm == EXPM ? W_EXP : fm == FAV ? W_FAV : fm == DSM ? W_DSM : W_ELU; }

#define WU ATTN_UNBOUNDED
/* A windowed descriptor: h_k = h_v = h_kv, no state, the mask (left, right, chunk). */
static void lw_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv,
                    lw_map map, attn_mask mask) {
  ln_desc(d, n_q, n_kv, h_q, h_kv, h_kv, dd, dv, lw_fm[map], BIDIR, lw_norm[map], 0);
  d->mask = mask;
}

/* Report family of a windowed comparison (ATTN_TEST_REPORT): the element-wise maps together, each
 * exponential map on its own. */
static const char *lw_family(attn_feature_map fm) {
  switch (fm) {
    case EXPM:
      return "linear.window.exp.o";
    case FAV:
      return "linear.window.favor.o";
    case DSM:
      return "linear.window.dsoftmax.o";
    default:
      return "linear.window.o";
  }
}

/* got against expect with the reference's scales and argument scales of the same problem
 * (tolerances.h, windowed linear attention: tol_linear_o, or tol_linear_xp_o for the exponential
 * maps, with the n_kv keys a row can see at most and the descriptor's feature size). */
static void lw_compare(const char *what, const attn_linear_desc *d, const tu_tensor *got, const double *expect,
                       const double *scale, const double *arg, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *tol = ln_tols(d->feature_map, 0, d->shape.n_kv, lu_feature_size(d), scale, arg, count, factor);
  tu_compare(lw_family(d->feature_map), what, got, expect, scale, tol);
  free(tol);
}

/* A windowed call's output against the reference of its descriptor (ref_visible's mask). */
static void lw_check(const char *what, const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                     const tu_tensor *v, const tu_tensor *got) {
  ln_ref r;
  ln_ref_output(d, q, k, v, NULL, &r);
  lw_compare(what, d, got, r.o, r.scale, r.arg, 1.0);
  ln_ref_free(&r);
}

/* The reference table (WIN: the mask); scale and eps are the map's defaults (lw_desc) unless set
 * (SCALE, EPS); layout token-major and data uniform unless set; favor: W from the seed source
 * (chi, seed 0) and m = 4d unless set (m; WCALLER, WSQRTD as in ln_case). n around the blocked
 * engine's blocks (48 / 96 rows on AVX2 and NEON, 32 / 64 on the scalar path): 1, 7, 47, 48, 49,
 * 97, 130. */
typedef struct lw_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  lw_map map;
  attn_mask mask;
  tu_layout_kind layout;
  tu_data data;
  float scale, eps;
  int set_scale, set_eps;
  size_t m;      /* favor: 0 the default 4d */
  int wsrc;      /* favor: as ln_case.wsrc */
  uint64_t seed; /* favor: the seed of a seed source */
} lw_case;

#define WIN(l, r, c)  .mask = {(l), (r), (c)}
#define WHEADS(q, kv) .h_q = (q), .h_kv = (kv)
static const lw_case lw_cases[] = {
    /* decode (n_q = 1) and chunked prefill (n_q < n_kv), bottom-right */
    {.name = "decode_1_of_130_w3_0", SIZES(1, 130, 16, 16), WHEADS(4, 2), .map = W_ELU, WIN(3, 0, 0)},
    {.name = "decode_1_of_97_c7_causal", SIZES(1, 97, 8, 8), WHEADS(1, 1), .map = W_ID, WIN(WU, 0, 7)},
    {.name = "decode_1_of_48_0_U", SIZES(1, 48, 7, 5), WHEADS(4, 1), .map = W_RELU, WIN(0, WU, 0)},
    {.name = "decode_1_of_49_U_4", SIZES(1, 49, 9, 13), WHEADS(2, 2), .map = W_ELU, WIN(WU, 4, 0)},
    {.name = "decode_1_of_7_17_2_c4", SIZES(1, 7, 8, 8), WHEADS(4, 2), .map = W_ID, WIN(17, 2, 4)},
    {.name = "chunked_20_of_97_5_9", SIZES(20, 97, 16, 16), WHEADS(4, 2), .map = W_ELU, WIN(5, 9, 0)},
    {.name = "chunked_48_of_130_17_2", SIZES(48, 130, 7, 5), WHEADS(1, 1), .map = W_ID, WIN(17, 2, 0)},
    {.name = "chunked_7_of_49_c4", SIZES(7, 49, 8, 8), WHEADS(4, 4), .map = W_RELU, WIN(WU, WU, 4)},
    {.name = "chunked_47_of_130_U_4", SIZES(47, 130, 9, 13), WHEADS(4, 1), .map = W_RELU, WIN(WU, 4, 0)},
    {.name = "chunked_97_of_130_5_9_c7", SIZES(97, 130, 16, 16), WHEADS(2, 1), .map = W_ELU, WIN(5, 9, 7)},
    {.name = "chunked_49_of_97_0_0", SIZES(49, 97, 8, 8), WHEADS(4, 2), .map = W_ELU, WIN(0, 0, 0)},
    /* n_q > n_kv: the first rows sit before every key and see none (zeros, eps 0 included) */
    {.name = "nq30_nkv10_3_0_eps0", SIZES(30, 10, 8, 8), WHEADS(2, 2), .map = W_ELU, WIN(3, 0, 0), EPS(0.0f)},
    {.name = "nq20_nkv5_c4", SIZES(20, 5, 8, 8), WHEADS(1, 1), .map = W_ID, WIN(WU, WU, 4)},
    {.name = "nq49_nkv48_0_U_relu", SIZES(49, 48, 8, 8), WHEADS(4, 2), .map = W_RELU, WIN(0, WU, 0)},
    /* strided and padded layouts (packed QKV: n_q = n_kv) */
    {.name = "head_major_17_2", SIZES(49, 49, 16, 16), WHEADS(4, 2), .map = W_ELU, WIN(17, 2, 0), .layout = H},
    {.name = "padded_c7_causal", SIZES(97, 97, 7, 5), WHEADS(4, 1), .map = W_RELU, WIN(WU, 0, 7), .layout = P},
    {.name = "head_padded_5_9", SIZES(48, 130, 9, 13), WHEADS(2, 2), .map = W_ID, WIN(5, 9, 0), .layout = HP},
    {.name = "packed_3_0", SIZES(130, 130, 16, 16), WHEADS(4, 2), .map = W_ELU, WIN(3, 0, 0), .layout = PK},
    {.name = "packed_17_2_c4", SIZES(47, 47, 8, 8), WHEADS(4, 4), .map = W_RELU, WIN(17, 2, 4), .layout = PK},
    /* the scale multiplies phi(q) */
    {.name = "scale_0.7_id_0_0", SIZES(49, 49, 8, 8), WHEADS(4, 2), .map = W_ID, WIN(0, 0, 0), SCALE(0.7f)},
    {.name = "scale_0.7_elu_5_9", SIZES(97, 97, 16, 16), WHEADS(1, 1), .map = W_ELU, WIN(5, 9, 0), SCALE(0.7f)},
    {.name = "scale_0.7_relu_c7", SIZES(130, 130, 7, 5), WHEADS(4, 1), .map = W_RELU, WIN(WU, WU, 7), SCALE(0.7f)},
    /* eps 0: rows whose denominator is exactly 0 (relu features that never meet) give zeros */
    {.name = "eps0_elu_3_0", SIZES(97, 97, 16, 16), WHEADS(4, 2), .map = W_ELU, WIN(3, 0, 0), EPS(0.0f)},
    {.name = "eps0_relu_0_0", SIZES(130, 130, 8, 8), WHEADS(2, 1), .map = W_RELU, WIN(0, 0, 0), EPS(0.0f)},
    {.name = "eps0_relu_d1_c4_causal", SIZES(97, 97, 1, 3), WHEADS(1, 1), .map = W_RELU, WIN(WU, 0, 4), EPS(0.0f)},
    {.name = "eps0_relu_d2_3_0", SIZES(48, 48, 2, 5), WHEADS(4, 2), .map = W_RELU, WIN(3, 0, 0), EPS(0.0f)},
    /* odd widths */
    {.name = "d65_dv33_17_2", SIZES(49, 49, 65, 33), WHEADS(2, 1), .map = W_ELU, WIN(17, 2, 0)},
    {.name = "d1_dv1_5_9_id", SIZES(130, 130, 1, 1), WHEADS(1, 1), .map = W_ID, WIN(5, 9, 0)},
    {.name = "d3_dv7_U_4_relu", SIZES(48, 48, 3, 7), WHEADS(4, 2), .map = W_RELU, WIN(WU, 4, 0)},
    {.name = "d33_dv9_0_U", SIZES(97, 97, 33, 9), WHEADS(4, 1), .map = W_ID, WIN(0, WU, 0)},
    /* heads: MQA 8 : 1 */
    {.name = "mqa_8_1_0_U", SIZES(97, 97, 8, 8), WHEADS(8, 1), .map = W_ELU, WIN(0, WU, 0)},
    /* data: elu1 over its whole range, identity normalised on positive data, un-normalised maps */
    {.name = "elu_wide_17_2_c7", SIZES(97, 97, 16, 16), WHEADS(2, 2), .map = W_ELU, WIN(17, 2, 7), .data = WIDE},
    {.name = "id_norm_pos_5_9", SIZES(97, 97, 16, 16), WHEADS(4, 2), .map = W_ID_NORM, WIN(5, 9, 0), .data = POS},
    {.name = "elu_unnorm_3_0", SIZES(130, 130, 8, 8), WHEADS(2, 1), .map = W_ELU_UN, WIN(3, 0, 0)},
    {.name = "relu_unnorm_c4", SIZES(49, 49, 8, 8), WHEADS(4, 4), .map = W_RELU_UN, WIN(WU, WU, 4)},
    /* sides and widths beyond every position: finite, but bounding nothing */
    {.name = "left_1000_right_0", SIZES(130, 130, 8, 8), WHEADS(1, 1), .map = W_ELU, WIN(1000, 0, 0)},
    {.name = "left_max-1_right_3", SIZES(48, 97, 8, 8), WHEADS(2, 1), .map = W_ID, WIN(WU - 1, 3, 0)},
    {.name = "chunk_max/2", SIZES(47, 97, 8, 8), WHEADS(4, 2), .map = W_RELU, WIN(WU, WU, WU / 2)},
    {.name = "right_max-1_chunk_7", SIZES(49, 49, 8, 8), WHEADS(2, 2), .map = W_ELU, WIN(2, WU - 1, 7)},
    /* exp: normalised over the keys each row sees, with that row's offsets (x' = sqrt(scale) x,
     * scale 1/sqrt(d) by default); decode, chunked prefill, layouts, rows without keys (zeros, eps
     * 0 included), eps 0.5, wide and large data, odd widths, MQA */
    {.name = "exp_decode_1_of_130_3_0", SIZES(1, 130, 16, 16), WHEADS(4, 2), .map = W_EXP, WIN(3, 0, 0)},
    {.name = "exp_chunked_20_of_97_5_9", SIZES(20, 97, 16, 16), WHEADS(4, 2), .map = W_EXP, WIN(5, 9, 0)},
    {.name = "exp_97_17_2", SIZES(97, 97, 8, 8), WHEADS(2, 1), .map = W_EXP, WIN(17, 2, 0)},
    {.name = "exp_padded_c7_causal", SIZES(97, 97, 7, 5), WHEADS(4, 1), .map = W_EXP, WIN(WU, 0, 7), .layout = P},
    {.name = "exp_packed_17_2_c4", SIZES(47, 47, 8, 8), WHEADS(4, 4), .map = W_EXP, WIN(17, 2, 4), .layout = PK},
    {.name = "exp_head_major_49_of_130_0_U",
     SIZES(49, 130, 9, 13),
     WHEADS(2, 2),
     .map = W_EXP,
     WIN(0, WU, 0),
     .layout = H},
    {.name = "exp_nq30_nkv10_3_0_eps0", SIZES(30, 10, 8, 8), WHEADS(2, 2), .map = W_EXP, WIN(3, 0, 0), EPS(0.0f)},
    {.name = "exp_eps0.5_U_4", SIZES(130, 130, 16, 16), WHEADS(4, 2), .map = W_EXP, WIN(WU, 4, 0), EPS(0.5f)},
    {.name = "exp_scale1_wide_c7",
     SIZES(97, 97, 16, 16),
     WHEADS(2, 2),
     .map = W_EXP,
     WIN(WU, WU, 7),
     SCALE(1.0f),
     .data = WIDE},
    {.name = "exp_large_0_0",
     SIZES(48, 48, 16, 16),
     WHEADS(1, 1),
     .map = W_EXP,
     WIN(0, 0, 0),
     SCALE(1.0f),
     .data = TU_DATA_LARGE},
    {.name = "exp_d65_dv33_3_0", SIZES(49, 49, 65, 33), WHEADS(2, 1), .map = W_EXP, WIN(3, 0, 0)},
    {.name = "exp_mqa_8_1_d1_5_9", SIZES(97, 97, 1, 3), WHEADS(8, 1), .map = W_EXP, WIN(5, 9, 0)},
    /* favor: the seed source (chi, m = 4d), the caller's W, SEED_SQRT_D with m = 3, m = 2d + 1 */
    {.name = "favor_49_17_2", SIZES(49, 49, 8, 8), WHEADS(4, 2), .map = W_FAV, WIN(17, 2, 0)},
    {.name = "favor_decode_1_of_97_c7_causal", SIZES(1, 97, 8, 8), WHEADS(2, 1), .map = W_FAV, WIN(WU, 0, 7)},
    {.name = "favor_caller_w_97_of_130_5_9_c7",
     SIZES(97, 130, 16, 16),
     WHEADS(2, 1),
     .map = W_FAV,
     WIN(5, 9, 7),
     WCALLER},
    {.name = "favor_sqrt_d_m3_c4",
     SIZES(130, 130, 9, 13),
     WHEADS(4, 2),
     .map = W_FAV,
     WIN(WU, WU, 4),
     WSQRTD(12345),
     .m = 3},
    {.name = "favor_m15_48_of_97_0_U", SIZES(48, 97, 7, 5), WHEADS(4, 1), .map = W_FAV, WIN(0, WU, 0), .m = 15},
    {.name = "favor_nq49_nkv48_3_0_eps0", SIZES(49, 48, 8, 8), WHEADS(4, 2), .map = W_FAV, WIN(3, 0, 0), EPS(0.0f)},
    {.name = "favor_head_padded_wide_5_9",
     SIZES(48, 130, 8, 8),
     WHEADS(2, 2),
     .map = W_FAV,
     WIN(5, 9, 0),
     .layout = HP,
     .data = WIDE},
    /* dsoftmax: each key feature column softmaxed over the keys the row sees (scale 1, eps 0) */
    {.name = "dsm_packed_3_0", SIZES(130, 130, 16, 16), WHEADS(4, 2), .map = W_DSM, WIN(3, 0, 0), .layout = PK},
    {.name = "dsm_c7_causal", SIZES(97, 97, 8, 8), WHEADS(1, 1), .map = W_DSM, WIN(WU, 0, 7)},
    {.name = "dsm_0_0", SIZES(49, 49, 9, 13), WHEADS(2, 2), .map = W_DSM, WIN(0, 0, 0)},
    {.name = "dsm_nq20_nkv5_c4", SIZES(20, 5, 8, 8), WHEADS(1, 1), .map = W_DSM, WIN(WU, WU, 4)},
    {.name = "dsm_decode_1_of_49_U_4", SIZES(1, 49, 9, 13), WHEADS(2, 2), .map = W_DSM, WIN(WU, 4, 0)},
    {.name = "dsm_wide_17_2_c7", SIZES(97, 97, 16, 16), WHEADS(2, 2), .map = W_DSM, WIN(17, 2, 7), .data = WIDE},
    {.name = "dsm_mqa_8_1_5_9", SIZES(97, 97, 8, 8), WHEADS(8, 1), .map = W_DSM, WIN(5, 9, 0)},
    {.name = "dsm_d1_left_1000", SIZES(130, 130, 1, 3), WHEADS(1, 1), .map = W_DSM, WIN(1000, 0, 0)},
};
#define LW_NCASES (sizeof lw_cases / sizeof lw_cases[0])
static size_t lw_sel[LW_NCASES];

START_TEST(linear_window_matches_reference) {
  const size_t idx = lw_sel[_i];
  const lw_case *c = &lw_cases[idx];
  tu_rng rng;
  tu_rng_seed(&rng, 15000 + idx);
  attn_linear_desc d;
  lw_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->map, c->mask);
  if (c->set_scale) d.scale = c->scale;
  if (c->set_eps) d.eps = c->eps;
  d.m = c->m;
  float *w = ln_set_favor(&d, c->wsrc, c->seed, &rng);
  tu_qkv x;
  tu_qkv_make(&x, c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, c->layout == PK ? T : c->layout, NULL, (idx % 2) * 4, &o);
  tu_qkv_assert_unchanged(&x);
  lw_check(c->name, &d, &x.q, &x.k, &x.v, &o);
  /* rows that see no key (before every key, or in a chunk of their own) are exactly 0 */
  for (size_t i = 0; i < c->n_q; ++i) {
    size_t seen = 0;
    for (size_t j = 0; j < c->n_kv; ++j)
      seen += (size_t)ref_visible(i, j, c->n_q, c->n_kv, c->mask.left, c->mask.right, c->mask.chunk);
    for (size_t h = 0; !seen && h < c->h_q; ++h)
      for (size_t col = 0; col < c->dv; ++col)
        ck_assert_msg(*tu_at(&o, i, h, col) == 0.0f, "%s: row %zu sees no key: %g", c->name, i,
                      (double)*tu_at(&o, i, h, col));
  }
  free(w);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* Every mask at every key count n around the blocks, as a square call (n_q = n), a chunked
 * prefill (n_q = (n + 2) / 3, bottom-right) and a decode step (n_q = 1); the maps, heads and
 * widths rotate with the run: windows (0, 0), (3, 0), (17, 2), (5, 9), (0, U), (U, 4), and
 * chunk-local widths 4 and 7, alone (bidirectional and causal) and with a window. The map is
 * (mask + size + form) mod 6: over its 7 sizes and 3 forms every mask meets each of the six maps
 * of the rotation (W_ID .. W_DSM), at several sizes. */
static const attn_mask lw_masks[] = {{0, 0, 0},   {3, 0, 0},  {17, 2, 0}, {5, 9, 0},   {0, WU, 0}, {WU, 4, 0},
                                     {WU, WU, 4}, {WU, 0, 4}, {17, 2, 4}, {WU, WU, 7}, {WU, 0, 7}, {5, 9, 7}};
static const size_t lw_sizes[] = {1, 7, 47, 48, 49, 97, 130};
#define LW_NMASKS (sizeof lw_masks / sizeof lw_masks[0])
#define LW_NSIZES (sizeof lw_sizes / sizeof lw_sizes[0])
#define LW_NSWEEP (3 * LW_NMASKS * LW_NSIZES)
static const size_t lw_heads[][2] = {{1, 1}, {4, 2}, {4, 1}};
static const size_t lw_widths[][2] = {{7, 5}, {16, 16}, {9, 13}, {1, 3}};
static size_t lw_sweep_sel[LW_NSWEEP];
/* The query count of a sweep run: 0 square, 1 chunked prefill, 2 decode. */
static size_t lw_sweep_nq(size_t form, size_t n) { return form == 0 ? n : form == 1 ? (n + 2) / 3 : 1; }

START_TEST(linear_window_sweep) {
  const size_t run = lw_sweep_sel[_i], form = run % 3, mi = run / 3 / LW_NSIZES, si = run / 3 % LW_NSIZES;
  const size_t n = lw_sizes[si], n_q = lw_sweep_nq(form, n);
  const lw_map map = (lw_map)((mi + si + form) % LW_NROT);
  const size_t *hh = lw_heads[(mi + form) % 3], *ww = lw_widths[(mi + 2 * si + form) % 4];
  tu_rng rng;
  tu_rng_seed(&rng, 15500 + run);
  attn_linear_desc d;
  lw_desc(&d, n_q, n, hh[0], hh[1], ww[0], ww[1], map, lw_masks[mi]);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n_q, n, hh[0], hh[1], hh[1], ww[0], ww[1]);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, (run % 2) * 4, &o);
  char what[96];
  snprintf(what, sizeof what, "mask (%zu, %zu, chunk %zu), n_q %zu, n_kv %zu, map %d", lw_masks[mi].left,
           lw_masks[mi].right, lw_masks[mi].chunk, n_q, n, (int)map);
  lw_check(what, &d, &x.q, &x.k, &x.v, &o);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* A window that bounds nothing is the unmasked call: (n, n) and chunk n equal the bidirectional
 * call and (n, 0) the causal one (chunkwise engine, no state), n = n_q + n_kv, within both bounds,
 * and each the reference. Maps (the six of the rotation) x shapes: square at a block size, chunked
 * prefill, decode. favor's W is the same in every call of a run: by shape, the seed source (chi,
 * seed 0, m = 4d), the caller's W (drawn once), SEED_SQRT_D with seed 99 and m = 2d + 1. */
static const size_t lw_unb_shapes[][6] = {{130, 130, 4, 2, 16, 16}, {40, 97, 2, 1, 7, 5}, {1, 64, 4, 4, 9, 13}};

static void lw_unb_favor(attn_linear_desc *d, size_t shape, float **w, tu_rng *rng) {
  if (d->feature_map != FAV) return;
  if (shape == 2) {
    d->m = 2 * d->shape.d + 1;
    (void)ln_set_favor(d, 1, 99, rng);
  } else if (shape == 1 && !*w) {
    *w = ln_set_favor(d, 2, 0, rng);
  } else if (shape == 1) {
    d->favor_source = ATTN_FAVOR_CALLER;
    d->favor_w = *w;
  }
}

START_TEST(linear_window_unbounded_agrees) {
  const lw_map map = (lw_map)(_i % LW_NROT);
  const size_t shape = (size_t)_i / LW_NROT, *sh = lw_unb_shapes[shape], reach = sh[0] + sh[1];
  tu_rng rng;
  tu_rng_seed(&rng, 16000 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, sh[0], sh[1], sh[2], sh[3], sh[3], sh[4], sh[5]);
  const attn_mask plain[2] = {attn_mask_full(), attn_mask_causal()};
  const attn_mask bounded[3] = {attn_mask_window(reach, reach), {WU, WU, reach}, attn_mask_window(reach, 0)};
  tu_tensor o[2];
  ln_ref r[2];
  float *w = NULL;
  for (int c = 0; c < 2; ++c) { /* the chunkwise calls */
    attn_linear_desc d;
    lw_desc(&d, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], map, plain[c]);
    lw_unb_favor(&d, shape, &w, &rng);
    ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o[c]);
    ln_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r[c]);
  }
  for (int b = 0; b < 3; ++b) {
    const int c = b == 2; /* the plain call it stands for */
    attn_linear_desc d;
    lw_desc(&d, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], map, bounded[b]);
    lw_unb_favor(&d, shape, &w, &rng);
    ck_assert(lu_windowed(d.mask));
    tu_tensor ow;
    ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &ow);
    double *expect = malloc(sizeof(double) * o[c].n * o[c].h * o[c].w);
    ck_assert_ptr_nonnull(expect);
    tu_tensor_to_double(&o[c], expect);
    char what[96];
    snprintf(what, sizeof what, "window %d vs the %s call, map %d", b, c ? "causal" : "bidirectional", (int)map);
    lw_compare(what, &d, &ow, expect, r[c].scale, r[c].arg, TOL_PROPERTY_FACTOR);
    snprintf(what, sizeof what, "window %d vs reference, map %d", b, (int)map);
    lw_compare(what, &d, &ow, r[c].o, r[c].scale, r[c].arg, 1.0);
    free(expect);
    tu_tensor_free(&ow);
  }
  for (int c = 0; c < 2; ++c) {
    ln_ref_free(&r[c]);
    tu_tensor_free(&o[c]);
  }
  free(w);
  tu_qkv_free(&x);
}
END_TEST

/* A causal sliding window (w - 1, 0) (and the causal chunk-local mask of width 7) computed as
 * random pieces (1 .. 40) of queries over the keys so far (n_q = piece, n_kv = tokens so far: chunked
 * prefill without a state), then decode steps (n_q = 1), equals the one call over all n tokens,
 * row for row, and the reference; the six maps of the rotation. */
static const attn_mask lw_piece_masks[] = {{0, 0, 0}, {16, 0, 0}, {63, 0, 0}, {WU, 0, 7}};
#define LW_NPIECE (LW_NROT * (sizeof lw_piece_masks / sizeof lw_piece_masks[0]))

START_TEST(linear_window_pieces) {
  const lw_map map = (lw_map)(_i % LW_NROT);
  const attn_mask mask = lw_piece_masks[_i / LW_NROT];
  const size_t n = tu_small() ? 90 : 200, a = n * 3 / 4, hq = 4, hkv = 2, dd = 16, dv = 8, hd = hq * dv;
  tu_rng rng;
  tu_rng_seed(&rng, 16500 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  attn_linear_desc d;
  lw_desc(&d, n, n, hq, hkv, dd, dv, map, mask);
  tu_tensor one;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &one);
  ln_ref r;
  ln_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r);
  lw_compare("one call vs reference", &d, &one, r.o, r.scale, r.arg, 1.0);
  double *got = malloc(sizeof(double) * n * hd);
  ck_assert_ptr_nonnull(got);
  tu_tensor_to_double(&one, got);
  size_t t = 0, pieces = 0;
  while (t < n) {
    size_t len = 1;
    if (t < a) {
      len = 1 + (size_t)(tu_rng_next(&rng) % 40);
      if (len > a - t) len = a - t;
    }
    attn_linear_desc pd = d;
    pd.shape.n_q = len;
    pd.shape.n_kv = t + len;
    const tu_tensor q = tu_rows_view(&x.q, t, len), k = tu_rows_view(&x.k, 0, t + len),
                    v = tu_rows_view(&x.v, 0, t + len);
    tu_tensor o;
    ln_call(&pd, &q, &k, &v, T, NULL, 0, &o);
    char what[96];
    snprintf(what, sizeof what, "%s at token %zu vs one call", len == 1 && t >= a ? "decode" : "piece", t);
    lw_compare(what, &d, &o, got + t * hd, r.scale + t * hd, r.arg + t * hd, TOL_PROPERTY_FACTOR);
    snprintf(what, sizeof what, "%s at token %zu vs reference", len == 1 && t >= a ? "decode" : "piece", t);
    lw_compare(what, &d, &o, r.o + t * hd, r.scale + t * hd, r.arg + t * hd, 1.0);
    tu_tensor_free(&o);
    t += len;
    ++pieces;
  }
  ck_assert_uint_ge(pieces, n - a + 2); /* the decode steps and two prefill pieces or more */
  free(got);
  ln_ref_free(&r);
  tu_tensor_free(&one);
  tu_qkv_free(&x);
}
END_TEST

/* The non-finite policy with windows: one element of q, k or v NaN, +inf or -inf, early or late
 * (tu_qkv_poison): the rows that use it (q_i, or a k_j / v_j they see) are NaN, every other row
 * equals the reference, the poisoned key included when the row cannot see it (the exponential
 * maps: an offset taken over a hidden +inf or NaN key must not reach the row, and a visible -inf
 * key, whose exponential is 0, still makes it NaN). The six maps of the rotation. */
typedef struct lwf_case {
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;
} lwf_case;
static const lwf_case lwf_cases[] = {
    {SIZES(100, 100, 8, 7), WHEADS(4, 2), WIN(3, 0, 0)}, {SIZES(30, 120, 8, 8), WHEADS(2, 2), WIN(5, 9, 0)},
    {SIZES(97, 97, 9, 16), WHEADS(2, 1), WIN(WU, 0, 7)}, {SIZES(60, 60, 8, 5), WHEADS(1, 1), WIN(0, 0, 0)},
    {SIZES(70, 70, 8, 8), WHEADS(4, 4), WIN(17, 2, 4)},  {SIZES(49, 130, 8, 8), WHEADS(4, 2), WIN(WU, WU, 7)},
};
#define LWF_NCASES (sizeof lwf_cases / sizeof lwf_cases[0])

START_TEST(linear_window_nonfinite_policy) {
  const lwf_case *c = &lwf_cases[_i / LW_NROT];
  const lw_map map = (lw_map)(_i % LW_NROT);
  for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
    tu_rng rng;
    tu_rng_seed(&rng, 17500 + (uint64_t)_i);
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
    char poison[64], what[128];
    tu_qkv_poison(&x, pc, 0, poison, sizeof poison);
    attn_linear_desc d;
    lw_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, map, c->mask);
    tu_tensor o;
    ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
    tu_qkv_assert_unchanged(&x);
    snprintf(what, sizeof what, "mask (%zu, %zu, chunk %zu), map %d: %s", c->mask.left, c->mask.right, c->mask.chunk,
             (int)map, poison);
    lw_check(what, &d, &x.q, &x.k, &x.v, &o);
    tu_tensor_free(&o);
    tu_qkv_free(&x);
  }
}
END_TEST

/* Keys no query can see hold NaN and infinities in k and v (every head, every column): every
 * output is finite and equals the reference of the clean inputs. Chunked prefill (bottom-right)
 * with a causal window (5, 0) and with chunk-local width 7: keys 0 .. 114 (window) and 0 .. 83
 * (chunks) are hidden from all the queries. The six maps of the rotation. */
START_TEST(linear_window_hidden_nonfinite) {
  const lw_map map = (lw_map)(_i % LW_NROT);
  const int chunked = _i / LW_NROT;
  const size_t n_q = 10, n_kv = chunked ? 97 : 130, hidden = chunked ? 84 : 115, hq = 4, hkv = 2, dd = 8, dv = 8;
  const attn_mask mask = chunked ? (attn_mask){WU, WU, 7} : attn_mask_window(5, 0);
  tu_rng rng;
  tu_rng_seed(&rng, 17800 + (uint64_t)_i);
  tu_qkv x, clean;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n_q, n_kv, hq, hkv, hkv, dd, dv);
  tu_rng_seed(&rng, 17800 + (uint64_t)_i);
  tu_qkv_make(&clean, T, TU_DATA_UNIFORM, &rng, n_q, n_kv, hq, hkv, hkv, dd, dv);
  static const float bad[3] = {NAN, INFINITY, -INFINITY};
  for (size_t j = 0; j < hidden; ++j)
    for (size_t h = 0; h < hkv; ++h) {
      for (size_t t = 0; t < dd; ++t) *tu_at(&x.k, j, h, t) = bad[(j + t) % 3];
      for (size_t t = 0; t < dv; ++t) *tu_at(&x.v, j, h, t) = bad[(j + t + 1) % 3];
    }
  tu_qkv_snapshot(&x);
  attn_linear_desc d;
  lw_desc(&d, n_q, n_kv, hq, hkv, dd, dv, map, mask);
  for (size_t j = 0; j < hidden; ++j) /* the premise: no query sees them */
    for (size_t i = 0; i < n_q; ++i) ck_assert(!ref_visible(i, j, n_q, n_kv, mask.left, mask.right, mask.chunk));
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
  tu_qkv_assert_unchanged(&x);
  for (size_t i = 0; i < n_q; ++i)
    for (size_t h = 0; h < hq; ++h)
      for (size_t col = 0; col < dv; ++col)
        ck_assert_msg(isfinite(*tu_at(&o, i, h, col)), "row %zu head %zu: %g", i, h, (double)*tu_at(&o, i, h, col));
  ln_ref r;
  ln_ref_output(&d, &clean.q, &clean.k, &clean.v, NULL, &r);
  lw_compare(chunked ? "hidden non-finite keys, chunk 7" : "hidden non-finite keys, window (5, 0)", &d, &o, r.o,
             r.scale, r.arg, 1.0);
  ln_ref_free(&r);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
  tu_qkv_free(&clean);
}
END_TEST

/* The exact guarantee for keys a row cannot see with the exponential maps (attn.h, "Exact
 * stabilisation"): their offsets are shared by a block of rows, so a hidden key may move a row's
 * last bits, but never more than rounding and never by a NaN or an infinity. Key 50 of 100 gets
 * k + 30 in every feature (its exponentials e^30 times the others') or NaN; every row that cannot
 * see it stays finite and within 1e-6 of its largest element of the clean call's row (0.6.0's
 * audit measured at most 4e-7). exp and FAVOR+, causal (chunkwise), window (5, 0) and chunk-local
 * 16 (blocked). */
START_TEST(linear_xmap_hidden_key_rounding) {
  enum { N = 100, J = 50, HQ = 2, HKV = 1, DD = 8, DV = 8 };
  static const attn_mask masks[3] = {{WU, 0, 0}, {5, 0, 0}, {WU, WU, 16}};
  const attn_feature_map fm = _i % 2 ? FAV : EXPM;
  const attn_mask mask = masks[_i / 2];
  for (int nan = 0; nan < 2; ++nan) {
    tu_rng rng;
    tu_rng_seed(&rng, 17900 + (uint64_t)_i);
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, DD, DV);
    attn_linear_desc d;
    ln_desc(&d, N, N, HQ, HKV, HKV, DD, DV, fm, _i / 2 == 0 ? CAUSAL : BIDIR, NORM, 0);
    if (_i / 2) d.mask = mask;
    tu_tensor o0, o1;
    ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o0);
    for (size_t t = 0; t < DD; ++t) *tu_at(&x.k, J, 0, t) = nan ? NAN : *tu_at(&x.k, J, 0, t) + 30.0f;
    tu_qkv_snapshot(&x);
    ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o1);
    size_t hidden_rows = 0;
    for (size_t i = 0; i < N; ++i) {
      if (ref_visible(i, J, N, N, mask.left, mask.right, mask.chunk)) continue;
      hidden_rows++;
      for (size_t h = 0; h < HQ; ++h) {
        double big = 0.0;
        for (size_t c = 0; c < DV; ++c) big = fmax(big, fabs(*tu_at(&o0, i, h, c)));
        for (size_t c = 0; c < DV; ++c) {
          const double a = *tu_at(&o0, i, h, c), b = *tu_at(&o1, i, h, c);
          ck_assert_msg(isfinite(b) && fabs(a - b) <= 1e-6 * big, "map %d mask (%zu, %zu, %zu), key %s: row %zu head %zu col %zu: %.9g, clean %.9g",
                        (int)fm, mask.left, mask.right, mask.chunk, nan ? "NaN" : "+30", i, h, c, b, a);
        }
      }
    }
    ck_assert_uint_ge(hidden_rows, J); /* the premise: half the rows or more cannot see key 50 */
    tu_tensor_free(&o0);
    tu_tensor_free(&o1);
    tu_qkv_free(&x);
  }
}
END_TEST

/* The masks of the tests at the edges of the engine's blocks below: windows (3, 0), (17, 2),
 * (5, 9) and chunk-local width 7 (chunks 42 .. 48, 49 .. 55 and 91 .. 97 put keys 47 to 49 and 95
 * to 97 at a chunk's end or start). */
static const attn_mask lwx_masks[] = {{3, 0, 0}, {17, 2, 0}, {5, 9, 0}, {WU, WU, 7}};
#define LWX_NMASKS (sizeof lwx_masks / sizeof lwx_masks[0])

/* Non-finite keys and values at the edges of the engine's blocks, each visible to some rows of a
 * query block and hidden from the others (square calls, n = 120: query blocks of 48 rows on AVX2
 * and NEON, 32 on the scalar path; a key block starts at the first key its query block sees): k
 * of key 47 is +inf in every feature of every head (an offset or a maximum taken over it would be
 * +inf), k of key 49 -inf (its exponential would be 0 and hide it), k of key 96 NaN, v of key 95
 * NaN. The rows that see one are NaN, every other row is finite and matches the reference; the
 * six maps of the rotation x the four masks. */
START_TEST(linear_window_edge_nonfinite) {
  const lw_map map = (lw_map)(_i % LW_NROT);
  const attn_mask mask = lwx_masks[_i / LW_NROT];
  const size_t n = 120, hq = 4, hkv = 2, dd = 8, dv = 8;
  static const size_t bad_keys[4] = {47, 49, 95, 96};
  tu_rng rng;
  tu_rng_seed(&rng, 17900 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  for (size_t h = 0; h < hkv; ++h) {
    for (size_t t = 0; t < dd; ++t) {
      *tu_at(&x.k, 47, h, t) = INFINITY;
      *tu_at(&x.k, 49, h, t) = -INFINITY;
      *tu_at(&x.k, 96, h, t) = NAN;
    }
    for (size_t t = 0; t < dv; ++t) *tu_at(&x.v, 95, h, t) = NAN;
  }
  tu_qkv_snapshot(&x);
  attn_linear_desc d;
  lw_desc(&d, n, n, hq, hkv, dd, dv, map, mask);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
  tu_qkv_assert_unchanged(&x);
  char what[96];
  snprintf(what, sizeof what, "non-finite keys at block edges, mask (%zu, %zu, chunk %zu), map %d", mask.left,
           mask.right, mask.chunk, (int)map);
  lw_check(what, &d, &x.q, &x.k, &x.v, &o);
  for (size_t i = 0; i < n; ++i) { /* the premise: rows beside them that see none are finite */
    int seen = 0;
    for (size_t b = 0; b < 4; ++b) seen |= ref_visible(i, bad_keys[b], n, n, mask.left, mask.right, mask.chunk);
    for (size_t h = 0; h < hq; ++h)
      for (size_t col = 0; col < dv; ++col)
        ck_assert_msg(seen ? isnan(*tu_at(&o, i, h, col)) : isfinite(*tu_at(&o, i, h, col)), "%s: row %zu: %g", what, i,
                      (double)*tu_at(&o, i, h, col));
  }
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

/* exp, favor (the caller's W = 100 Q of linear_exp_favor_stress, m = d, so that the features are
 * the targets) and dsoftmax (its pre-features are k itself) with windows, on the stress test's
 * patterns (xs_target; square calls of XS_N = 120 tokens, one head):
 *   0 wide: q, k in [-150, 150];
 *   1 low feature: the keys' feature 0 100 below their others, which the queries rely on (their
 *     feature 0 is the largest, in [140, 150]);
 *   2 high keys: every feature 100 above the rest; 3 the same 30 above (below the engine's
 *     sub-block guard of 40); 4 feature 0 only, 100 above;
 * the raised keys of patterns 2 to 4 sit at 47 + e and 95 + e, e = 0, 1, 2 (one call each): at the
 * edges of the query blocks (48 rows on AVX2 and NEON; 32 on the scalar path, where 95 | 96 is an
 * edge and 47 .. 49 the middle of a block), so that each lies in a boundary key block that some
 * rows of a query block see and others do not; masks lwx_masks. eps: the default, 0 and 0.5 for
 * exp and favor (0.5: added to a denominator stabilised with other offsets than the row's own, it
 * shows); dsoftmax has none. Every output is finite and within the bound of the reference (log
 * space, float64). Runs: 7 map and eps variants x 4 masks x 5 patterns. */
#define LWX_NVARIANTS 7
#define LWX_NRUNS     (LWX_NVARIANTS * LWX_NMASKS * XS_PATTERNS)

START_TEST(linear_window_xmap_stress) {
  const int variant = _i % LWX_NVARIANTS, pattern = _i / (LWX_NVARIANTS * (int)LWX_NMASKS);
  const attn_mask mask = lwx_masks[(size_t)(_i / LWX_NVARIANTS) % LWX_NMASKS];
  const lw_map map = variant < 3 ? W_EXP : variant < 6 ? W_FAV : W_DSM;
  static const float eps[3] = {1e-6f, 0.0f, 0.5f};
  for (int e = 0; e < (pattern >= 2 ? 3 : 1); ++e) { /* patterns 0 and 1 raise no key */
    tu_rng rng;
    tu_rng_seed(&rng, 19000 + 3 * (uint64_t)_i + (uint64_t)e);
    attn_linear_desc d;
    lw_desc(&d, XS_N, XS_N, 1, 1, XS_D, XS_DV, map, mask);
    if (map != W_DSM) d.eps = eps[variant % 3];
    float w[XS_D * XS_D];
    double Q[XS_D * XS_D];
    if (map == W_FAV) xs_favor(&rng, &d, Q, w);
    unsigned char high[XS_N] = {0};
    high[47 + e] = high[95 + e] = 1;
    tu_qkv x;
    tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, XS_N, XS_N, 1, 1, 1, XS_D, XS_DV);
    xs_fill(&rng, &x, pattern, map == W_FAV ? Q : NULL, sqrtf(d.scale), high);
    tu_tensor o;
    ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
    char what[160];
    snprintf(what, sizeof what,
             "%s window stress: pattern %d, keys %d and %d raised, mask (%zu, %zu, chunk %zu), eps %g",
             map == W_EXP   ? "exp"
             : map == W_FAV ? "favor"
                            : "dsoftmax",
             pattern, 47 + e, 95 + e, mask.left, mask.right, mask.chunk, (double)d.eps);
    for (size_t i = 0; i < XS_N; ++i)
      for (size_t c = 0; c < XS_DV; ++c)
        ck_assert_msg(isfinite(*tu_at(&o, i, 0, c)), "%s: o[%zu][%zu] = %g", what, i, c, (double)*tu_at(&o, i, 0, c));
    lw_check(what, &d, &x.q, &x.k, &x.v, &o);
    tu_tensor_free(&o);
    tu_qkv_free(&x);
  }
}
END_TEST

/* The workspace and size queries of the exponential maps with a window (exp; favor from the seed
 * sources chi and SEED_SQRT_D with m = 37, from the caller's W and its W^T; dsoftmax), window
 * (3, 0) and chunk-local width 4 (GQA 4 : 2, n_q 30 of n_kv 50): every size query answers
 * (lu_assert_queries), the feature size and the state size are those of the same descriptor with
 * the causal mask, a call with exactly the workspace it reports runs (lu_call: guards intact, at
 * a 4-byte offset) and matches the reference, and attn_linear_favor_matrix takes the windowed
 * descriptor with that workspace (attn.h: "at least attn_linear_workspace_size(desc) bytes") and
 * writes the causal descriptor's W. (A workspace one byte short: rows of the bad-input table.) */
START_TEST(linear_window_xmap_workspace) {
  const int kind = _i % 6; /* exp; favor: chi, sqrt(d) with m 37, the caller's W, its W^T; dsoftmax */
  const attn_mask mask = _i / 6 ? (attn_mask){WU, WU, 4} : attn_mask_window(3, 0);
  const size_t n_q = 30, n_kv = 50, hq = 4, hkv = 2, dd = 8, dv = 6;
  tu_rng rng;
  tu_rng_seed(&rng, 19500 + (uint64_t)_i);
  attn_linear_desc d;
  lw_desc(&d, n_q, n_kv, hq, hkv, dd, dv, kind == 0 ? W_EXP : kind == 5 ? W_DSM : W_FAV, mask);
  float *w = NULL, *wt = NULL;
  if (kind == 2) {
    d.m = 37;
    (void)ln_set_favor(&d, 1, 4242, &rng);
  }
  if (kind == 3 || kind == 4) w = ln_set_favor(&d, 2, 0, &rng);
  if (kind == 4) { /* the same W, transposed */
    const size_t m = lu_feature_size(&d);
    wt = malloc(sizeof(float) * m * dd);
    ck_assert_ptr_nonnull(wt);
    for (size_t f = 0; f < m; ++f)
      for (size_t t = 0; t < dd; ++t) wt[t * m + f] = w[f * dd + t];
    d.favor_source = ATTN_FAVOR_CALLER_T;
    d.favor_w = wt;
  }
  lu_assert_queries(&d, ATTN_OK);
  attn_linear_desc causal = d;
  causal.mask = attn_mask_causal();
  size_t m = 0, mc = 0, sb = 0, sbc = 0, need = 0;
  ck_assert_int_eq(attn_linear_feature_size(&d, &m), ATTN_OK);
  ck_assert_int_eq(attn_linear_feature_size(&causal, &mc), ATTN_OK);
  ck_assert_int_eq(attn_linear_state_size(&d, &sb), ATTN_OK);
  ck_assert_int_eq(attn_linear_state_size(&causal, &sbc), ATTN_OK);
  ck_assert_uint_eq(m, mc);
  ck_assert_uint_eq(sb, sbc);
  ck_assert_int_eq(attn_linear_workspace_size(&d, &need), ATTN_OK);
  ck_assert_uint_gt(need, 0);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, n_q, n_kv, hq, hkv, hkv, dd, dv);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, NULL, 4, &o);
  attn_linear_desc dref = d; /* the reference takes W itself */
  if (kind == 4) {
    dref.favor_source = ATTN_FAVOR_CALLER;
    dref.favor_w = w;
  }
  lw_check("exponential map with a window: exactly the reported workspace", &dref, &x.q, &x.k, &x.v, &o);
  if (kind == 1 || kind == 2) { /* a seed source: favor_matrix with the windowed descriptor */
    float *got = tu_alloc(sizeof(float) * m * dd, 0);
    void *ws = tu_alloc(need, 0);
    ck_assert_int_eq(attn_linear_favor_matrix(&d, got, m * dd, ws, need), ATTN_OK);
    tu_assert_guards("favor_matrix workspace (windowed descriptor)", ws);
    tu_assert_guards("favor_matrix W (windowed descriptor)", got);
    tu_assert_same_bits("favor_matrix: windowed vs causal descriptor", ln_favor_w(&causal), got,
                        sizeof(float) * m * dd);
    tu_free(ws);
    tu_free(got);
  }
  tu_tensor_free(&o);
  tu_qkv_free(&x);
  free(wt);
  free(w);
}
END_TEST

/* Bad input with windows: each row changes one thing of a valid windowed call (elu1, or the row's
 * exponential map with its defaults; window (3, 0) unless the row names another mask; h_q 4,
 * h_k = h_v 2, no state); the call answers the row's status (and, for descriptor faults, every size
 * query too), and nothing is written. */
typedef enum lwb_kind {
  LWB_UNNORM,
  LWB_EPS_HALF,
  LWB_FAVOR_W_NULL,
  LWB_HK_NE_HV,
  LWB_HV_NE_HK,
  LWB_HK_GT_HQ,
  LWB_HQ_3,
  LWB_STATE,
  LWB_STATE_CHUNK,
  LWB_GATE_SCALAR,
  LWB_GATE_FEATURE,
  LWB_BETA,
  LWB_GATE_UNGATED_CALL,
  LWB_WS_SMALL,
  LWB_O_IS_K
} lwb_kind;

typedef struct lwb_case {
  const char *name;
  lwb_kind kind;
  attn_status expect;
  int desc_level;
  attn_mask mask;
  int xmap; /* the map of the valid call (0: elu1) */
} lwb_case;

#define LWB(k, s, lvl)       .kind = (k), .expect = (s), .desc_level = (lvl)
#define LWBX(k, s, lvl, map) .kind = (k), .expect = (s), .desc_level = (lvl), .xmap = (map)
static const lwb_case lwb_cases[] = {
    /* the exponential maps take windows (0.4.0); what they still refuse with one (the state and the
     * un-normalised mode as without a window, a gate or beta as the element-wise maps do) */
    {.name = "exp with window (0, 0) and a state", LWBX(LWB_STATE, ATTN_E_BAD_ARGUMENT, 0, EXPM), WIN(0, 0, 0)},
    {.name = "dsoftmax with causal chunk 7 and a state",
     LWBX(LWB_STATE_CHUNK, ATTN_E_BAD_ARGUMENT, 0, DSM),
     WIN(WU, 0, 7)},
    {.name = "exp un-normalised with window (3, 0)", LWBX(LWB_UNNORM, ATTN_E_BAD_NORMALIZATION, 1, EXPM), WIN(3, 0, 0)},
    {.name = "favor un-normalised with chunk 4", LWBX(LWB_UNNORM, ATTN_E_BAD_NORMALIZATION, 1, FAV), WIN(WU, WU, 4)},
    {.name = "dsoftmax eps 0.5 with window (5, 9)", LWBX(LWB_EPS_HALF, ATTN_E_BAD_EPS, 1, DSM), WIN(5, 9, 0)},
    {.name = "favor caller W NULL with window (17, 2)",
     LWBX(LWB_FAVOR_W_NULL, ATTN_E_BAD_FEATURE_MATRIX, 1, FAV),
     WIN(17, 2, 0)},
    {.name = "favor with window (3, 0) and a SCALAR gate",
     LWBX(LWB_GATE_SCALAR, ATTN_E_BAD_WINDOW, 1, FAV),
     WIN(3, 0, 0)},
    {.name = "exp with chunk 4 and beta", LWBX(LWB_BETA, ATTN_E_BAD_WINDOW, 1, EXPM), WIN(WU, WU, 4)},
    {.name = "dsoftmax h_k 2 != h_v 1", LWBX(LWB_HK_NE_HV, ATTN_E_BAD_HEADS, 1, DSM), WIN(3, 0, 0)},
    {.name = "favor window workspace one byte short",
     LWBX(LWB_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0, FAV),
     WIN(17, 2, 4)},
    {.name = "exp window workspace one byte short",
     LWBX(LWB_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0, EXPM),
     WIN(3, 0, 0)},
    {.name = "dsoftmax window workspace one byte short",
     LWBX(LWB_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0, DSM),
     WIN(5, 9, 7)},
    {.name = "favor: o is k with a window", LWBX(LWB_O_IS_K, ATTN_E_ALIASING, 0, FAV), WIN(3, 0, 0)},
    /* the element-wise maps */
    {.name = "h_k 2 != h_v 1", LWB(LWB_HK_NE_HV, ATTN_E_BAD_HEADS, 1), WIN(3, 0, 0)},
    {.name = "h_k 1 != h_v 2, chunk 7", LWB(LWB_HV_NE_HK, ATTN_E_BAD_HEADS, 1), WIN(WU, 0, 7)},
    {.name = "h_k = h_v 8 > h_q 4", LWB(LWB_HK_GT_HQ, ATTN_E_BAD_HEADS, 1), WIN(17, 2, 0)},
    {.name = "h_q 3 with h_kv 2", LWB(LWB_HQ_3, ATTN_E_BAD_HEADS, 1), WIN(3, 0, 0)},
    {.name = "a state with window (3, 0)", LWB(LWB_STATE, ATTN_E_BAD_ARGUMENT, 0), WIN(3, 0, 0)},
    {.name = "a state with causal chunk 7", LWB(LWB_STATE_CHUNK, ATTN_E_BAD_ARGUMENT, 0), WIN(WU, 0, 7)},
    {.name = "a SCALAR gate with window (3, 0)", LWB(LWB_GATE_SCALAR, ATTN_E_BAD_WINDOW, 1), WIN(3, 0, 0)},
    {.name = "a FEATURE gate with chunk 4", LWB(LWB_GATE_FEATURE, ATTN_E_BAD_WINDOW, 1), WIN(WU, WU, 4)},
    {.name = "beta with window (5, 9)", LWB(LWB_BETA, ATTN_E_BAD_WINDOW, 1), WIN(5, 9, 0)},
    {.name = "a gate with a window through attn_linear",
     LWB(LWB_GATE_UNGATED_CALL, ATTN_E_BAD_WINDOW, 1),
     WIN(3, 0, 0)},
    {.name = "window workspace one byte short", LWB(LWB_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0), WIN(17, 2, 4)},
    {.name = "o is k with a window", LWB(LWB_O_IS_K, ATTN_E_ALIASING, 0), WIN(3, 0, 0)},
};
#define LWB_NCASES (sizeof lwb_cases / sizeof lwb_cases[0])

START_TEST(linear_window_rejects_bad_input) {
  const lwb_case *c = &lwb_cases[_i];
  enum { WNQ = 5, WNKV = 7, WHQ = 4, WHKV = 2, WD = 8, WDV = 6, WHMAX = 8 };
  tu_rng rng;
  tu_rng_seed(&rng, 18500 + (uint64_t)_i);
  /* inputs with room for up to 8 heads and for o inside k */
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, WNQ * WHMAX, WNKV * WHMAX, WHMAX, WHMAX, WHMAX, WD, WDV);
  attn_linear_desc d;
  lw_desc(&d, WNQ, WNKV, WHQ, WHKV, WD, WDV, lw_map_of(c->xmap), c->mask);
  /* valid gates (SCALAR [n_kv][H][1], FEATURE [n_kv][H][m]) and betas */
  float lg[WNKV * WHQ * WD], beta[WNKV * WHQ];
  for (size_t e = 0; e < sizeof lg / sizeof lg[0]; ++e) lg[e] = tu_rng_range(&rng, -3.0f, 0.0f);
  for (size_t e = 0; e < sizeof beta / sizeof beta[0]; ++e) beta[e] = tu_rng_range(&rng, 0.1f, 2.0f);
  lu_state st;
  memset(&st, 0, sizeof st);
  attn_linear_state *sp = NULL;
  int gated_call = 0;
  const float *op_k = NULL;
  switch (c->kind) {
    case LWB_UNNORM:
      d.normalize = 0;
      break;
    case LWB_EPS_HALF:
      d.eps = 0.5f;
      break;
    case LWB_FAVOR_W_NULL:
      d.favor_source = ATTN_FAVOR_CALLER;
      d.favor_w = NULL;
      break;
    case LWB_HK_NE_HV: /* heads change with the default layouts of their counts */
      ck_assert_int_eq(attn_shape_init(&d.shape, WNQ, WNKV, WHQ, WHKV, 1, WD, WDV), ATTN_OK);
      break;
    case LWB_HV_NE_HK:
      ck_assert_int_eq(attn_shape_init(&d.shape, WNQ, WNKV, WHQ, 1, WHKV, WD, WDV), ATTN_OK);
      break;
    case LWB_HK_GT_HQ:
      ck_assert_int_eq(attn_shape_init(&d.shape, WNQ, WNKV, WHQ, WHMAX, WHMAX, WD, WDV), ATTN_OK);
      break;
    case LWB_HQ_3:
      ck_assert_int_eq(attn_shape_init(&d.shape, WNQ, WNKV, 3, WHKV, WHKV, WD, WDV), ATTN_OK);
      break;
    case LWB_STATE:
    case LWB_STATE_CHUNK:
      break;
    case LWB_GATE_SCALAR:
      d.gate = ATTN_GATE_SCALAR;
      gated_call = 1;
      break;
    case LWB_GATE_FEATURE:
      d.gate = ATTN_GATE_FEATURE;
      d.gate_layout.row_stride = (size_t)WHQ * WD;
      d.gate_layout.head_stride = WD;
      gated_call = 1;
      break;
    case LWB_BETA:
      d.beta = 1;
      gated_call = 1;
      break;
    case LWB_GATE_UNGATED_CALL:
      d.gate = ATTN_GATE_SCALAR;
      break;
    case LWB_WS_SMALL:
    case LWB_O_IS_K:
      op_k = x.k.data;
      break;
  }
  if (c->kind == LWB_STATE || c->kind == LWB_STATE_CHUNK) {
    /* a state of the call's shape and map (bound with the causal mask) */
    attn_linear_desc sd = d;
    sd.mask = attn_mask_causal();
    lu_state_make_filled(&st, &sd, &rng);
    sp = &st.s;
  }
  /* the workspace of the valid windowed call (the row's own when it is valid as a descriptor) */
  attn_linear_desc valid;
  lw_desc(&valid, WNQ, WNKV, WHQ, WHKV, WD, WDV, lw_map_of(c->xmap), c->mask);
  size_t need = 0;
  ck_assert_int_eq(attn_linear_workspace_size(c->desc_level ? &valid : &d, &need), ATTN_OK);
  ck_assert_uint_gt(need, 0);
  const size_t ws_size = c->kind == LWB_WS_SMALL ? need - 1 : need;
  void *ws = tu_alloc(need, 0);
  tu_tensor o;
  tu_tensor_alloc(&o, T, WNQ, WHMAX, WDV, 1);
  float *op = c->kind == LWB_O_IS_K ? (float *)op_k : o.data;
  lu_rejected untouched;
  lu_rejected_take(&untouched, sp, st.mem, st.bytes);
  const attn_status got = gated_call
                              ? attn_linear_gated(&d, x.q.data, x.k.data, x.v.data, lg, beta, op, sp, ws, ws_size)
                              : attn_linear(&d, x.q.data, x.k.data, x.v.data, op, sp, ws, ws_size);
  ck_assert_msg(got == c->expect, "%s: got %s, want %s", c->name, attn_status_string(got),
                attn_status_string(c->expect));
  lu_assert_queries(&d, c->desc_level ? c->expect : ATTN_OK);
  lu_rejected_check(&untouched, &o, ws, &x);
  if (sp) tu_free(st.mem);
  tu_free(ws);
  tu_tensor_free(&o);
  tu_qkv_free(&x);
}
END_TEST

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
  tu_rng rng;
  tu_rng_seed(&rng, 9700 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, 37, 37, hh[0], hh[1], hh[2], 8, 5);
  attn_linear_desc d;
  ln_desc(&d, 37, 37, hh[0], hh[1], hh[2], 8, 5, normalize ? ELU : ID, CAUSAL, normalize, 16);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  ln_call(&d, &x.q, &x.k, &x.v, T, &st.s, 0, &o);
  for (size_t r = 0; r < st.s.heads * st.s.m; ++r) {
    const float *row = st.s.data + r * st.s.ld;
    ck_assert_msg(row[st.s.dv + 1] == 0.0f, "state row %zu: offset %g", r, (double)row[st.s.dv + 1]);
    if (!normalize) ck_assert_msg(row[st.s.dv] == 0.0f, "state row %zu: z %g un-normalised", r, (double)row[st.s.dv]);
  }
  ln_check_state("state layout", &d, &x.k, &x.v, NULL, 0, &st.s);
  ln_check_output("state layout", &d, &x.q, &x.k, &x.v, NULL, 0, &o);
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
  tu_rng rng;
  tu_rng_seed(&rng, 400);
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
  tu_rng rng;
  tu_rng_seed(&rng, 401);
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
  attn_shape want;
  ck_assert_int_eq(attn_shape_init(&want, 5, 9, 6, 2, 2, 64, 40), ATTN_OK); /* h_k = h_v = h_kv */
  tu_assert_same_bits("linear shape defaults", &want, &d.shape, sizeof want);
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
      ck_assert_int_eq(attn_shape_init(&want, 5, 9, 6, 2, 2, ds[i], 40), ATTN_OK);
      tu_assert_same_bits("linear shape defaults", &want, &d.shape, sizeof want);
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
  return (size_t)RE_N * max3(j->h_q, j->h_k, j->h_v) * RE_D + ref_lcm(j->h_k, j->h_v) * RE_D * (RE_D + 2);
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
  tu_rng rng;
  tu_rng_seed(&rng, 501);
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
  tu_rng rng;
  tu_rng_seed(&rng, 300 + (uint64_t)_i);
  /* inputs big enough that an aliased output fits inside them; v has room for h_v up to HQ */
  tu_qkv x;
  tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, 2 * NQ * HQ, 2 * NKV * HQ, HQ, HKV, HQ, D, DV);
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
    if (!ad.normalize && ln_xmap(ad.feature_map)) fresh.feature_map = ELU; /* a valid un-normalised state */
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

static Suite *linear_suite(attn_isa isa) {
  Suite *s = suite_create(attn_isa_name(isa));
  size_t work[LN_NCASES];
  for (size_t i = 0; i < LN_NCASES; ++i) {
    const ln_case *c = &ln_cases[i];
    const size_t m = c->xmap == FAV ? (c->m ? c->m : 4 * c->d) : c->d; /* favor's reference: m per pair */
    work[i] = c->n_q * (c->n_kv + c->prefix) * max3(c->h_q, c->h_k, c->h_v) * (m + c->dv);
  }
  const size_t nsel = tu_select_rows(LN_NCASES, work, ln_sel);
  size_t lw_work[LW_NCASES], sweep_work[LW_NSWEEP];
  for (size_t i = 0; i < LW_NCASES; ++i) {
    const lw_case *c = &lw_cases[i];
    const size_t m = c->map == W_FAV ? (c->m ? c->m : 4 * c->d) : c->d;
    lw_work[i] = c->n_q * c->n_kv * c->h_q * (m + c->dv);
  }
  for (size_t r = 0; r < LW_NSWEEP; ++r) {
    const size_t form = r % 3, mi = r / 3 / LW_NSIZES, si = r / 3 % LW_NSIZES, n = lw_sizes[si];
    const size_t *ww = lw_widths[(mi + 2 * si + form) % 4];
    const size_t m = (mi + si + form) % LW_NROT == W_FAV ? 4 * ww[0] : ww[0];
    sweep_work[r] = lw_sweep_nq(form, n) * n * lw_heads[(mi + form) % 3][0] * (m + ww[1]);
  }
  const size_t lw_nsel = tu_select_rows(LW_NCASES, lw_work, lw_sel);
  const size_t lw_nsweep = tu_select_rows(LW_NSWEEP, sweep_work, lw_sweep_sel);
  TCase *tc = tu_tcase("reference");
  tcase_add_loop_test(tc, linear_matches_reference, 0, (int)nsel);
  tcase_add_test(tc, linear_feature_size_is_d);
  tcase_add_test(tc, linear_elu1_accuracy_sweep);
  tcase_add_loop_test(tc, linear_nonfinite_policy, 0, (int)(LNF_NCASES * LNF_NMAPS));
  tcase_add_loop_test(tc, linear_eps0_empty_rows_are_zero, 0, (int)(sizeof eps0_maps / sizeof eps0_maps[0]));
  suite_add_tcase(s, tc);
  tc = tu_tcase("exponential");
  tcase_add_loop_test(tc, linear_favor_caller_w_formula, 0, 9);
  tcase_add_loop_test(tc, linear_favor_seed_equals_caller, 0, 8);
  tcase_add_test(tc, linear_favor_matrix_properties);
  tcase_add_test(tc, linear_favor_matrix_contract);
  tcase_add_loop_test(tc, linear_exp_favor_stress, 0, XS_NRUNS);
  tcase_add_loop_test(tc, linear_dsoftmax_bidir_formula, 0, 2);
  tcase_add_loop_test(tc, linear_dsoftmax_ones, 0, 3);
  tcase_add_loop_test(tc, linear_dsoftmax_shift_invariance, 0, 6);
  suite_add_tcase(s, tc);
  tc = tu_tcase("properties");
  tcase_add_loop_test(tc, linear_chunkwise_matches_recurrent, 0, (int)LN_NPROPS);
  tcase_add_loop_test(tc, linear_prefill_state_continues_decode, 0, (int)LN_NPROPS);
  tcase_add_loop_test(tc, linear_snapshot_restore_bit_exact, 0, (int)(2 * LN_NPROPS));
  tcase_add_loop_test(tc, linear_split_prefill_matches_one_call, 0, (int)LN_NPROPS);
  tcase_add_loop_test(tc, linear_layout_bit_exact, 0, (int)LN_NPROPS);
  suite_add_tcase(s, tc);
  tc = tu_tcase("window");
  tcase_add_loop_test(tc, linear_window_matches_reference, 0, (int)lw_nsel);
  tcase_add_loop_test(tc, linear_window_sweep, 0, (int)lw_nsweep);
  tcase_add_loop_test(tc, linear_window_unbounded_agrees, 0, 3 * LW_NROT);
  tcase_add_loop_test(tc, linear_window_pieces, 0, (int)LW_NPIECE);
  tcase_add_loop_test(tc, linear_window_nonfinite_policy, 0, (int)(LW_NROT * LWF_NCASES));
  tcase_add_loop_test(tc, linear_window_hidden_nonfinite, 0, 2 * LW_NROT);
  tcase_add_loop_test(tc, linear_xmap_hidden_key_rounding, 0, 6);
  tcase_add_loop_test(tc, linear_window_edge_nonfinite, 0, (int)(LW_NROT * LWX_NMASKS));
  tcase_add_loop_test(tc, linear_window_xmap_stress, 0, (int)LWX_NRUNS);
  tcase_add_loop_test(tc, linear_window_xmap_workspace, 0, 2 * 6);
  tcase_add_loop_test(tc, linear_window_rejects_bad_input, 0, (int)LWB_NCASES);
  suite_add_tcase(s, tc);
  tc = tu_tcase("flash");
  tcase_add_loop_test(tc, linear_flash_exclusive_matches_reference, 0, (int)(3 * FX_NCASES));
  tcase_add_loop_test(tc, linear_flash_pieces_then_decode, 0, 12);
  tcase_add_loop_test(tc, linear_flash_sum_matches_formula, 0, 3);
  tcase_add_loop_test(tc, linear_flash_rejects_bad_input, 0, 6);
  suite_add_tcase(s, tc);
  tc = tu_tcase("state");
  tcase_add_loop_test(tc, linear_state_layout, 0, 12);
  tcase_add_test(tc, state_init_contract);
  tcase_add_test(tc, state_reset_contract);
  tcase_add_test(tc, state_copy_contract);
  suite_add_tcase(s, tc);
  tc = tu_tcase("api");
  tcase_add_test(tc, linear_desc_init_defaults);
  tcase_add_test(tc, linear_size_queries_null_pointers);
  tcase_add_test(tc, linear_chunk_size_contract);
  tcase_add_test(tc, linear_concurrent_calls_match_serial);
  suite_add_tcase(s, tc);
  tc = tu_tcase("bad_input");
  tcase_add_loop_test(tc, linear_rejects_bad_input, 0, (int)LV_NCASES);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_main(linear_suite); }
