/*
 * Windowed linear attention (any mask but full and causal, on the blocked engine) on every map,
 * on the ISA path named by ATTN_ISA, against the float64 reference. TCase "window": a reference
 * table, every mask at every size around the blocks as square calls, chunked prefill and decode,
 * windows that bound nothing vs the chunkwise calls, a sliding window in random pieces then decode
 * steps vs one call, the non-finite policy with visible and hidden keys, exp, favor and dsoftmax
 * with features up to +-150 and keys far above the rest at the edges of the engine's blocks, the
 * workspace of the exponential maps, and the statuses of what a window refuses.
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
  lu_desc(d, n_q, n_kv, h_q, h_kv, h_kv, dd, dv, lw_fm[map], BIDIR, lw_norm[map], 0);
  d->mask = mask;
}

/* Report family of a windowed comparison (ATTN_TEST_REPORT): the element-wise maps together, each
 * exponential map on its own. */
static const char *lw_family(attn_feature_map fm) {
  return fm == EXPM  ? "linear.window.exp.o"
         : fm == FAV ? "linear.window.favor.o"
         : fm == DSM ? "linear.window.dsoftmax.o"
                     : "linear.window.o";
}

/* got against expect with the reference's scales and argument scales of the same problem
 * (tolerances.h, windowed linear attention: tol_linear_o, or tol_linear_xp_o for the exponential
 * maps, with the n_kv keys a row can see at most and the descriptor's feature size). */
static void lw_compare(const char *what, const attn_linear_desc *d, const tu_tensor *got, const double *expect,
                       const double *scale, const double *arg, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *tol = lu_tols(d->feature_map, 0, d->shape.n_kv, lu_feature_size(d), scale, arg, count, factor);
  tu_compare(lw_family(d->feature_map), what, got, expect, scale, tol);
  free(tol);
}

/* A windowed call's output against the reference of its descriptor (ref_visible's mask). */
static void lw_check(const char *what, const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                     const tu_tensor *v, const tu_tensor *got) {
  lu_ref r;
  lu_ref_output(d, q, k, v, NULL, &r);
  lw_compare(what, d, got, r.o, r.scale, r.arg, 1.0);
  lu_ref_free(&r);
}

/* The reference table (WIN: the mask); scale and eps are the map's defaults (lw_desc) unless set
 * (SCALE, EPS); layout token-major and data uniform unless set; favor: W from the seed source
 * (chi, seed 0) and m = 4d unless set (m; WCALLER, WSQRTD: lu_set_favor's wsrc). n around the blocked
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
  int wsrc;      /* favor: lu_set_favor's wsrc */
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
  tu_rng rng = tu_rng_of(15000 + idx);
  attn_linear_desc d;
  lw_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->map, c->mask);
  if (c->set_scale) d.scale = c->scale;
  if (c->set_eps) d.eps = c->eps;
  d.m = c->m;
  float *w = lu_set_favor(&d, c->wsrc, c->seed, &rng);
  tu_qkv x = tu_qkv_of(c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, c->layout == PK ? T : c->layout, NULL, (idx % 2) * 4, &o);
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
  tu_rng rng = tu_rng_of(15500 + run);
  attn_linear_desc d;
  lw_desc(&d, n_q, n, hh[0], hh[1], ww[0], ww[1], map, lw_masks[mi]);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n_q, n, hh[0], hh[1], hh[1], ww[0], ww[1]);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, (run % 2) * 4, &o);
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
    (void)lu_set_favor(d, 1, 99, rng);
  } else if (shape == 1 && !*w) {
    *w = lu_set_favor(d, 2, 0, rng);
  } else if (shape == 1) {
    d->favor_source = ATTN_FAVOR_CALLER;
    d->favor_w = *w;
  }
}

START_TEST(linear_window_unbounded_agrees) {
  const lw_map map = (lw_map)(_i % LW_NROT);
  const size_t shape = (size_t)_i / LW_NROT, *sh = lw_unb_shapes[shape], reach = sh[0] + sh[1];
  tu_rng rng = tu_rng_of(16000 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, sh[0], sh[1], sh[2], sh[3], sh[3], sh[4], sh[5]);
  const attn_mask plain[2] = {attn_mask_full(), attn_mask_causal()};
  const attn_mask bounded[3] = {attn_mask_window(reach, reach), {WU, WU, reach}, attn_mask_window(reach, 0)};
  tu_tensor o[2];
  lu_ref r[2];
  float *w = NULL;
  for (int c = 0; c < 2; ++c) { /* the chunkwise calls */
    attn_linear_desc d;
    lw_desc(&d, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], map, plain[c]);
    lw_unb_favor(&d, shape, &w, &rng);
    lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o[c]);
    lu_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r[c]);
  }
  for (int b = 0; b < 3; ++b) {
    const int c = b == 2; /* the plain call it stands for */
    attn_linear_desc d;
    lw_desc(&d, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], map, bounded[b]);
    lw_unb_favor(&d, shape, &w, &rng);
    ck_assert(lu_windowed(d.mask));
    tu_tensor ow;
    lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &ow);
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
    lu_ref_free(&r[c]);
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
  tu_rng rng = tu_rng_of(16500 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
  attn_linear_desc d;
  lw_desc(&d, n, n, hq, hkv, dd, dv, map, mask);
  tu_tensor one;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &one);
  lu_ref r;
  lu_ref_output(&d, &x.q, &x.k, &x.v, NULL, &r);
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
    lu_call_plain(&pd, &q, &k, &v, T, NULL, 0, &o);
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
  lu_ref_free(&r);
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
    tu_rng rng = tu_rng_of(17500 + (uint64_t)_i);
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
    char poison[64], what[128];
    tu_qkv_poison(&x, pc, 0, poison, sizeof poison);
    attn_linear_desc d;
    lw_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, map, c->mask);
    tu_tensor o;
    lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
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
  tu_rng rng = tu_rng_of(17800 + (uint64_t)_i);
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
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
  tu_qkv_assert_unchanged(&x);
  for (size_t i = 0; i < n_q; ++i)
    for (size_t h = 0; h < hq; ++h)
      for (size_t col = 0; col < dv; ++col)
        ck_assert_msg(isfinite(*tu_at(&o, i, h, col)), "row %zu head %zu: %g", i, h, (double)*tu_at(&o, i, h, col));
  lu_ref r;
  lu_ref_output(&d, &clean.q, &clean.k, &clean.v, NULL, &r);
  lw_compare(chunked ? "hidden non-finite keys, chunk 7" : "hidden non-finite keys, window (5, 0)", &d, &o, r.o,
             r.scale, r.arg, 1.0);
  lu_ref_free(&r);
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
    tu_rng rng = tu_rng_of(17900 + (uint64_t)_i);
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, DD, DV);
    attn_linear_desc d;
    lu_desc(&d, N, N, HQ, HKV, HKV, DD, DV, fm, _i / 2 == 0 ? CAUSAL : BIDIR, NORM, 0);
    if (_i / 2) d.mask = mask;
    tu_tensor o0, o1;
    lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o0);
    for (size_t t = 0; t < DD; ++t) *tu_at(&x.k, J, 0, t) = nan ? NAN : *tu_at(&x.k, J, 0, t) + 30.0f;
    tu_qkv_snapshot(&x);
    lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o1);
    size_t hidden_rows = 0;
    for (size_t i = 0; i < N; ++i) {
      if (ref_visible(i, J, N, N, mask.left, mask.right, mask.chunk)) continue;
      hidden_rows++;
      for (size_t h = 0; h < HQ; ++h) {
        double big = 0.0;
        for (size_t c = 0; c < DV; ++c) big = fmax(big, fabs(*tu_at(&o0, i, h, c)));
        for (size_t c = 0; c < DV; ++c) {
          const double a = *tu_at(&o0, i, h, c), b = *tu_at(&o1, i, h, c);
          ck_assert_msg(isfinite(b) && fabs(a - b) <= 1e-6 * big,
                        "map %d mask (%zu, %zu, %zu), key %s: row %zu head %zu col %zu: %.9g, clean %.9g", (int)fm,
                        mask.left, mask.right, mask.chunk, nan ? "NaN" : "+30", i, h, c, b, a);
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
  tu_rng rng = tu_rng_of(17900 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n, n, hq, hkv, hkv, dd, dv);
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
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
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
 * patterns (lu_xs_fill; square calls of LU_XS_N = 120 tokens, one head):
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
#define LWX_NRUNS     (LWX_NVARIANTS * LWX_NMASKS * LU_XS_PATTERNS)

START_TEST(linear_window_xmap_stress) {
  const int variant = _i % LWX_NVARIANTS, pattern = _i / (LWX_NVARIANTS * (int)LWX_NMASKS);
  const attn_mask mask = lwx_masks[(size_t)(_i / LWX_NVARIANTS) % LWX_NMASKS];
  const lw_map map = variant < 3 ? W_EXP : variant < 6 ? W_FAV : W_DSM;
  static const float eps[3] = {1e-6f, 0.0f, 0.5f};
  for (int e = 0; e < (pattern >= 2 ? 3 : 1); ++e) { /* patterns 0 and 1 raise no key */
    tu_rng rng = tu_rng_of(19000 + 3 * (uint64_t)_i + (uint64_t)e);
    attn_linear_desc d;
    lw_desc(&d, LU_XS_N, LU_XS_N, 1, 1, LU_XS_D, LU_XS_DV, map, mask);
    if (map != W_DSM) d.eps = eps[variant % 3];
    float w[LU_XS_D * LU_XS_D];
    double Q[LU_XS_D * LU_XS_D];
    if (map == W_FAV) lu_xs_favor(&rng, &d, Q, w);
    unsigned char high[LU_XS_N] = {0};
    high[47 + e] = high[95 + e] = 1;
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, LU_XS_N, LU_XS_N, 1, 1, 1, LU_XS_D, LU_XS_DV);
    lu_xs_fill(&rng, &x, pattern, map == W_FAV ? Q : NULL, sqrtf(d.scale), high);
    tu_tensor o;
    lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 0, &o);
    char what[160];
    snprintf(what, sizeof what,
             "%s window stress: pattern %d, keys %d and %d raised, mask (%zu, %zu, chunk %zu), eps %g",
             map == W_EXP   ? "exp"
             : map == W_FAV ? "favor"
                            : "dsoftmax",
             pattern, 47 + e, 95 + e, mask.left, mask.right, mask.chunk, (double)d.eps);
    for (size_t i = 0; i < LU_XS_N; ++i)
      for (size_t c = 0; c < LU_XS_DV; ++c)
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
  tu_rng rng = tu_rng_of(19500 + (uint64_t)_i);
  attn_linear_desc d;
  lw_desc(&d, n_q, n_kv, hq, hkv, dd, dv, kind == 0 ? W_EXP : kind == 5 ? W_DSM : W_FAV, mask);
  float *w = NULL, *wt = NULL;
  if (kind == 2) {
    d.m = 37;
    (void)lu_set_favor(&d, 1, 4242, &rng);
  }
  if (kind == 3 || kind == 4) w = lu_set_favor(&d, 2, 0, &rng);
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
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n_q, n_kv, hq, hkv, hkv, dd, dv);
  tu_tensor o;
  lu_call_plain(&d, &x.q, &x.k, &x.v, T, NULL, 4, &o);
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
    tu_assert_same_bits("favor_matrix: windowed vs causal descriptor", lu_favor_w(&causal), got,
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
#define LWB_FAV(k, s)        LWBX(k, s, 1, FAV)
#define LWB_SHORT(map)       LWBX(LWB_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0, map)
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
     LWB_FAV(LWB_FAVOR_W_NULL, ATTN_E_BAD_FEATURE_MATRIX),
     WIN(17, 2, 0)},
    {.name = "favor with window (3, 0) and a SCALAR gate", LWB_FAV(LWB_GATE_SCALAR, ATTN_E_BAD_WINDOW), WIN(3, 0, 0)},
    {.name = "exp with chunk 4 and beta", LWBX(LWB_BETA, ATTN_E_BAD_WINDOW, 1, EXPM), WIN(WU, WU, 4)},
    {.name = "dsoftmax h_k 2 != h_v 1", LWBX(LWB_HK_NE_HV, ATTN_E_BAD_HEADS, 1, DSM), WIN(3, 0, 0)},
    {.name = "favor window workspace one byte short", LWB_SHORT(FAV), WIN(17, 2, 4)},
    {.name = "exp window workspace one byte short", LWB_SHORT(EXPM), WIN(3, 0, 0)},
    {.name = "dsoftmax window workspace one byte short", LWB_SHORT(DSM), WIN(5, 9, 7)},
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
  tu_rng rng = tu_rng_of(18500 + (uint64_t)_i);
  /* inputs with room for up to 8 heads and for o inside k */
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, WNQ * WHMAX, WNKV * WHMAX, WHMAX, WHMAX, WHMAX, WD, WDV);
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

static Suite *linear_window_suite(attn_isa isa) {
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
  /* clang-format off */
  return TU_SUITE(isa,
    {"window", linear_window_matches_reference, (int)lw_nsel}, {"window", linear_window_sweep, (int)lw_nsweep},
      {"window", linear_window_unbounded_agrees, (int)(3 * LW_NROT)}, {"window", linear_window_pieces, (int)LW_NPIECE},
      {"window", linear_window_nonfinite_policy, (int)(LW_NROT * LWF_NCASES)},
      {"window", linear_window_hidden_nonfinite, (int)(2 * LW_NROT)}, {"window", linear_xmap_hidden_key_rounding, 6},
      {"window", linear_window_edge_nonfinite, (int)(LW_NROT * LWX_NMASKS)},
      {"window", linear_window_xmap_stress, (int)LWX_NRUNS}, {"window", linear_window_xmap_workspace, (int)(2 * 6)},
      {"window", linear_window_rejects_bad_input, (int)LWB_NCASES});
  /* clang-format on */
}

int main(void) { return tu_main(linear_window_suite); }
