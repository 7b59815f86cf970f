/*
 * Linear attention and its state, on the ISA path named by ATTN_ISA, against the float64
 * reference. TCases: "reference" (the shape table, outputs and states; separate query, key and
 * value head counts; scale), "properties" (chunkwise prefill vs recurrent decode for several chunk
 * sizes, prefill state continuing into decode, bit-exact snapshot / restore, a prefill split in
 * two calls), "state" (the state's layout and management), "api" (descriptor defaults, size
 * queries, reentrancy) and "bad_input" (the exact status of every bad argument, nothing written).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

};
#define LN_NCASES (sizeof ln_cases / sizeof ln_cases[0])
static size_t ln_sel[LN_NCASES];

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */
#define ELU    ATTN_FEATURE_ELU1
#define ID     ATTN_FEATURE_IDENTITY
#define RELU   ATTN_FEATURE_RELU
#define CAUSAL 1
#define BIDIR  0
#define NORM   1
#define UNNORM 0

static size_t max3(size_t a, size_t b, size_t c) {
  const size_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}
/* Output heads H = max(h_q, h_k, h_v). */
static size_t ln_out_heads(const attn_linear_desc *d) { return max3(d->shape.h_q, d->shape.h_k, d->shape.h_v); }
/* State heads L = lcm(h_k, h_v), computed here independently of the library. */
static size_t ln_state_heads(size_t h_k, size_t h_v) {
  size_t l = h_k;
  while (l % h_v) l += h_k;
  return l;
}

static void ln_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t dd,
                    size_t dv, attn_feature_map fm, int causal, int normalize, size_t chunk) {
  ck_assert_int_eq(attn_linear_desc_init(d, n_q, n_kv, h_q, h_k, dd, dv, fm), ATTN_OK);
  ck_assert_int_eq(attn_shape_init(&d->shape, n_q, n_kv, h_q, h_k, h_v, dd, dv), ATTN_OK);
  d->mask = causal ? attn_mask_causal() : attn_mask_full();
  d->normalize = normalize;
  d->chunk = chunk;
}

typedef struct ln_state {
  attn_linear_state s;
  void *mem;
} ln_state;

static size_t state_floats(const attn_linear_state *s) { return s->heads * s->m * s->ld; }

/* A bound state in guarded memory of exactly attn_linear_state_size bytes; checks the documented
 * shape (L = lcm(h_k, h_v) state heads of m = d rows of ld = dv + 2 floats: S | z | offset), the
 * size L * m * (dv + 2) floats, and that it starts zeroed. */
static void ln_state_make(ln_state *st, const attn_linear_desc *d) {
  const attn_shape *sh = &d->shape;
  const size_t L = ln_state_heads(sh->h_k, sh->h_v);
  size_t bytes = 0;
  ck_assert_int_eq(attn_linear_state_size(d, &bytes), ATTN_OK);
  ck_assert_uint_eq(bytes, sizeof(float) * L * sh->d * (sh->dv + 2));
  st->mem = tu_alloc(bytes, 0);
  memset(&st->s, 0xAB, sizeof st->s);
  ck_assert_int_eq(attn_linear_state_init(&st->s, d, st->mem, bytes), ATTN_OK);
  ck_assert_uint_eq(st->s.heads, L);
  ck_assert_uint_eq(st->s.m, sh->d);
  ck_assert_uint_eq(st->s.dv, sh->dv);
  ck_assert_uint_eq(st->s.ld, sh->dv + 2);
  ck_assert_int_eq(st->s.feature_map, d->feature_map);
  ck_assert_int_eq(st->s.normalize, d->normalize);
  ck_assert_uint_eq(st->s.tokens, 0);
  ck_assert_ptr_eq(st->s.data, st->mem);
  for (size_t e = 0; e < state_floats(&st->s); ++e) ck_assert(st->s.data[e] == 0.0f);
  tu_assert_guards("state init", st->mem);
}

static void ln_state_free(ln_state *st) { tu_free(st->mem); }

static double *ln_state_to_double(const attn_linear_state *s) {
  double *out = malloc(sizeof(double) * state_floats(s));
  ck_assert_ptr_nonnull(out);
  for (size_t e = 0; e < state_floats(s); ++e) out[e] = (double)s->data[e];
  return out;
}

/* The state's documented layout, row r = h * m + p at data[r * ld]: S[h][p][c] in columns
 * c < dv, z in column dv, the offset in column dv + 1, as a [heads * m][1][ld] tensor. */
static tu_tensor state_view(const attn_linear_state *s) {
  tu_tensor t;
  memset(&t, 0, sizeof t);
  t.data = s->data;
  t.n = s->heads * s->m;
  t.h = 1;
  t.w = s->ld;
  t.l.row_stride = s->ld;
  t.l.head_stride = s->ld;
  t.span = t.n * t.w;
  return t;
}

/* attn_linear with q, k, v as given, o ([n_q][H][dv]) freshly allocated (guarded) in layout okind;
 * asserts ATTN_OK, guards of o, workspace (exact size) and state memory, untouched gaps of o. */
static void ln_call(const attn_linear_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                    tu_layout_kind okind, attn_linear_state *state, size_t misalign, tu_tensor *o) {
  attn_linear_desc dd = *desc;
  tu_tensor_alloc(o, okind, dd.shape.n_q, ln_out_heads(&dd), dd.shape.dv, 1);
  tu_shape_layouts(&dd.shape, q, k, v, o);
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(attn_linear(&dd, q->data, k->data, v->data, o->data, state, w, ws), ATTN_OK);
  tu_assert_guards("linear workspace", w);
  tu_free(w);
  tu_assert_output_clean("linear o", o);
  if (state) tu_assert_guards("linear state memory", state->data);
}

static ref_linear_problem ln_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                                     const tu_tensor *v, const double *s0) {
  const attn_shape *s = &d->shape;
  const ref_linear_problem p = {.n_q = s->n_q,
                                .n_kv = s->n_kv,
                                .h_q = s->h_q,
                                .h_k = s->h_k,
                                .h_v = s->h_v,
                                .d = s->d,
                                .dv = s->dv,
                                .feature_map = tu_ref_map(d->feature_map),
                                .causal = attn_mask_is_causal(d->mask),
                                .normalize = d->normalize,
                                .eps = (double)d->eps,
                                .scale = (double)d->scale,
                                .q = q->data,
                                .k = k->data,
                                .v = v->data,
                                .lq = tu_ref_layout(q),
                                .lk = tu_ref_layout(k),
                                .lv = tu_ref_layout(v),
                                .s0 = s0};
  return p;
}

/* The one output comparison: got against expected values (the reference or another library
 * result) with the reference's scales; tol1 from tolerances.h. */
static void ln_compare(const char *family, const char *what, const tu_tensor *got, const double *expect,
                       const double *scale, double tol1, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *tol = tu_dup(tol1 * factor, count);
  tu_compare(family, what, got, expect, scale, tol);
  free(tol);
}

/* Reference outputs and scales of a problem, then the comparison; prefix counts the key tokens
 * behind the incoming state. */
static void ln_check_output(const char *what, const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                            const tu_tensor *v, const double *s0, size_t prefix, const tu_tensor *got) {
  const ref_linear_problem p = ln_problem(d, q, k, v, s0);
  const size_t count = d->shape.n_q * ln_out_heads(d) * d->shape.dv;
  double *ro = malloc(sizeof(double) * count), *rs = malloc(sizeof(double) * count);
  ck_assert(ro && rs);
  ref_linear(&p, ro, rs);
  ln_compare("linear.o", what, got, ro, rs, tol_linear_o(prefix + d->shape.n_kv, d->shape.d), 1.0);
  free(ro);
  free(rs);
}

/* The state after a call against the reference: s0 plus this call's keys; tokens counted; the
 * offset column (and z when not normalised) must be exactly 0 (their reference scale is 0). */
static void ln_check_state(const char *what, const attn_linear_desc *d, const tu_tensor *k, const tu_tensor *v,
                           const double *s0, size_t prefix, const attn_linear_state *s) {
  const ref_linear_problem p = ln_problem(d, k, k, v, s0);
  const size_t count = state_floats(s);
  double *rs = malloc(sizeof(double) * count), *sc = malloc(sizeof(double) * count);
  ck_assert(rs && sc);
  ref_linear_state(&p, rs, sc);
  ck_assert_uint_eq(s->tokens, prefix + d->shape.n_kv);
  ck_assert_uint_eq(s->heads, ln_state_heads(d->shape.h_k, d->shape.h_v));
  ck_assert_uint_eq(s->m, d->shape.d);
  ck_assert_uint_eq(s->dv, d->shape.dv);
  ck_assert_uint_eq(s->ld, d->shape.dv + 2);
  const tu_tensor view = state_view(s);
  ln_compare("linear.state", what, &view, rs, sc, tol_linear_state(prefix + d->shape.n_kv), 1.0);
  free(rs);
  free(sc);
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
  ln_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv,
          c->identity ? ID
          : c->relu   ? RELU
                      : ELU,
          !c->bidir, !c->unnorm, c->chunk);
  d.m = c->m;
  if (c->set_eps) d.eps = c->eps;
  if (c->set_scale) d.scale = c->scale;
  ln_state st;
  attn_linear_state *state = NULL;
  double *s0 = NULL;
  if (!c->bidir && !c->no_state) {
    ln_state_make(&st, &d);
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
    s0 = ln_state_to_double(state);
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
  tu_tensor_free(&o);
  tu_qkv_free(&x);
  if (state) ln_state_free(&st);
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
  float scale; /* 0: the default 1 */
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
};
#define LN_NPROPS (sizeof ln_props / sizeof ln_props[0])

static void ln_prop_desc(attn_linear_desc *d, const ln_prop_case *c, size_t n_q, size_t n_kv) {
  ln_desc(d, n_q, n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, c->fm, CAUSAL, c->normalize, c->chunk);
  if (c->scale != 0.0f) d->scale = c->scale;
}

/* n + 1 tokens of inputs; a causal prefill over the first n into a fresh state. */
typedef struct ln_full {
  tu_qkv x;           /* n + 1 tokens */
  tu_tensor q, k, v;  /* views of the first n */
  attn_linear_desc d; /* n tokens */
  ln_state st;
  tu_tensor o;
  double *got, *ref, *scale; /* prefill output as double, reference, scales ([n][H][dv]) */
  size_t hd;                 /* floats per output token: H * dv */
} ln_full;

static void ln_full_make(ln_full *f, const ln_prop_case *c, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_qkv_make(&f->x, T, TU_DATA_UNIFORM, &rng, c->n + 1, c->n + 1, c->h_q, c->h_k, c->h_v, c->d, c->dv);
  f->q = tu_rows_view(&f->x.q, 0, c->n);
  f->k = tu_rows_view(&f->x.k, 0, c->n);
  f->v = tu_rows_view(&f->x.v, 0, c->n);
  ln_prop_desc(&f->d, c, c->n, c->n);
  ln_state_make(&f->st, &f->d);
  ln_call(&f->d, &f->q, &f->k, &f->v, T, &f->st.s, 0, &f->o);
  f->hd = ln_out_heads(&f->d) * c->dv;
  const size_t count = c->n * f->hd;
  f->got = malloc(sizeof(double) * count);
  f->ref = malloc(sizeof(double) * count);
  f->scale = malloc(sizeof(double) * count);
  ck_assert(f->got && f->ref && f->scale);
  tu_tensor_to_double(&f->o, f->got);
  const ref_linear_problem p = ln_problem(&f->d, &f->q, &f->k, &f->v, NULL);
  ref_linear(&p, f->ref, f->scale);
}

static void ln_full_free(ln_full *f) {
  free(f->got);
  free(f->ref);
  free(f->scale);
  tu_tensor_free(&f->o);
  ln_state_free(&f->st);
  tu_qkv_free(&f->x);
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
  ln_compare("linear.o", "prefill", &f.o, f.ref, f.scale, tol_linear_o(c->n, c->d), 1.0);
  ln_state dec;
  ln_state_make(&dec, &f.d);
  const size_t hd = f.hd;
  for (size_t t = 0; t < c->n; ++t) {
    tu_tensor o;
    ln_decode_step(c, &f.x, t, &dec.s, &o);
    ln_compare("linear.o", "decode step vs prefill row", &o, f.got + t * hd, f.scale + t * hd, tol_linear_o(c->n, c->d),
               TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(dec.s.tokens, f.st.s.tokens);
  double *sp = ln_state_to_double(&f.st.s);
  const ref_linear_problem p = ln_problem(&f.d, &f.q, &f.k, &f.v, NULL);
  double *rs = malloc(sizeof(double) * state_floats(&dec.s));
  double *sc = malloc(sizeof(double) * state_floats(&dec.s));
  ck_assert(rs && sc);
  ref_linear_state(&p, rs, sc);
  const tu_tensor view = state_view(&dec.s);
  ln_compare("linear.state", "decoded state vs prefill state", &view, sp, sc, tol_linear_state(c->n),
             TOL_PROPERTY_FACTOR);
  free(rs);
  free(sc);
  free(sp);
  ln_state_free(&dec);
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
  const ref_linear_problem p = ln_problem(&whole, &f.x.q, &f.x.k, &f.x.v, NULL);
  const size_t count = (c->n + 1) * f.hd, hd = f.hd;
  double *ro = malloc(sizeof(double) * count), *rsc = malloc(sizeof(double) * count);
  ck_assert(ro && rsc);
  ref_linear(&p, ro, rsc);
  ln_compare("linear.o", "decode after prefill", &o, ro + c->n * hd, rsc + c->n * hd, tol_linear_o(c->n + 1, c->d),
             1.0);
  ln_check_state("state after prefill + decode", &whole, &f.x.k, &f.x.v, NULL, 0, &f.st.s);
  free(ro);
  free(rsc);
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
  ln_state st, snap;
  ln_state_make(&st, &f.d);
  ln_state_make(&snap, &f.d);
  const size_t bytes = sizeof(float) * state_floats(&st.s);
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
  ln_state_free(&snap);
  ln_state_free(&st);
  ln_full_free(&f);
}
END_TEST

/* A prefill split in two calls (rows [0, a) then [a, n) continuing the state) equals one call. */
START_TEST(linear_split_prefill_matches_one_call) {
  const ln_prop_case *c = &ln_props[_i];
  ln_full f;
  ln_full_make(&f, c, 11000 + (uint64_t)_i);
  const size_t a = c->split, n = c->n, hd = f.hd;
  ln_state st;
  ln_state_make(&st, &f.d);
  const size_t part[2][2] = {{0, a}, {a, n - a}};
  for (int s = 0; s < 2; ++s) {
    attn_linear_desc d = f.d;
    d.shape.n_q = d.shape.n_kv = part[s][1];
    const tu_tensor q = tu_rows_view(&f.q, part[s][0], part[s][1]), k = tu_rows_view(&f.k, part[s][0], part[s][1]),
                    v = tu_rows_view(&f.v, part[s][0], part[s][1]);
    tu_tensor o;
    ln_call(&d, &q, &k, &v, T, &st.s, 0, &o);
    ln_compare("linear.o", "split prefill vs one call", &o, f.got + part[s][0] * hd, f.scale + part[s][0] * hd,
               tol_linear_o(n, c->d), TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  ck_assert_uint_eq(st.s.tokens, n);
  ln_check_state("state after split prefill", &f.d, &f.k, &f.v, NULL, 0, &st.s);
  ln_state_free(&st);
  ln_full_free(&f);
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
  ln_compare("linear.elu1", "elu1 sweep: o = phi(q)", &o, ro, rs, TOL_EXP_SWEEP_ELU1, 1.0);
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
 * (un-normalised) and elu1 (normalised): every row matches the reference, which makes the rows
 * that use the value NaN; causal rows before it are exact. Then one decode step continues from
 * the state: NaN when the prefill's poisoned k or v is in the state (every later token sees it). */
START_TEST(linear_nonfinite_policy) {
  const lnf_case *c = &lnf_cases[_i];
  for (int elu = 0; elu < 2; ++elu)
    for (int pc = 0; pc < TU_POISON_CASES; ++pc) {
      tu_rng rng;
      tu_rng_seed(&rng, 9500 + (uint64_t)_i);
      const size_t n1 = c->n_kv + 1; /* the prefill's keys and one decode token */
      tu_qkv x;
      tu_qkv_make(&x, T, TU_DATA_UNIFORM, &rng, c->n_q + 1, n1, c->h_q, c->h_k, c->h_v, c->d, c->dv);
      char poison[64], what[96];
      tu_qkv_poison(&x, pc, 1, poison, sizeof poison); /* not in the decode token */
      attn_linear_desc d;
      ln_desc(&d, c->n_q, c->n_kv, c->h_q, c->h_k, c->h_v, c->d, c->dv, elu ? ELU : ID, !c->bidir, elu, c->chunk);
      ln_state st;
      if (!c->bidir) ln_state_make(&st, &d);
      const tu_tensor q0 = tu_rows_view(&x.q, 0, c->n_q), k0 = tu_rows_view(&x.k, 0, c->n_kv);
      const tu_tensor v0 = tu_rows_view(&x.v, 0, c->n_kv);
      tu_tensor o;
      ln_call(&d, &q0, &k0, &v0, T, c->bidir ? NULL : &st.s, 0, &o);
      tu_qkv_assert_unchanged(&x);
      snprintf(what, sizeof what, "%s %s: %s", c->name, elu ? "elu1" : "identity", poison);
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
        const ref_linear_problem p = ln_problem(&whole, &x.q, &x.k, &x.v, NULL);
        const size_t hd = ln_out_heads(&d) * c->dv, all = whole.shape.n_q * hd;
        double *ro = malloc(sizeof(double) * all), *rsc = malloc(sizeof(double) * all);
        ck_assert(ro && rsc);
        ref_linear(&p, ro, rsc);
        ln_compare("linear.o", what, &o, ro + c->n_q * hd, rsc + c->n_q * hd, tol_linear_o(n1, c->d), 1.0);
        free(ro);
        free(rsc);
        tu_tensor_free(&o);
        ln_state_free(&st);
      }
      tu_qkv_free(&x);
    }
}
END_TEST

/* eps = 0: a normalised row whose denominator is exactly 0 gives zeros (as softmax does for a
 * row with no visible key): n_q > n_kv leaves the first rows without a key. */
START_TEST(linear_eps0_empty_rows_are_zero) {
  tu_rng rng;
  tu_rng_seed(&rng, 9600);
  tu_qkv x;
  tu_qkv_make(&x, T, POS, &rng, 9, 4, 2, 1, 1, 8, 8);
  for (int with_state = 0; with_state < 2; ++with_state) {
    attn_linear_desc d;
    ln_desc(&d, 9, 4, 2, 1, 1, 8, 8, ELU, CAUSAL, NORM, 0);
    d.eps = 0.0f;
    ln_state st;
    if (with_state) ln_state_make(&st, &d);
    tu_tensor o;
    ln_call(&d, &x.q, &x.k, &x.v, T, with_state ? &st.s : NULL, 0, &o);
    for (size_t i = 0; i < 5; ++i)
      for (size_t h = 0; h < 2; ++h)
        for (size_t c = 0; c < 8; ++c)
          ck_assert_msg(*tu_at(&o, i, h, c) == 0.0f, "row %zu: %g", i, (double)*tu_at(&o, i, h, c));
    ln_check_output("eps = 0, rows without keys", &d, &x.q, &x.k, &x.v, NULL, 0, &o);
    tu_tensor_free(&o);
    if (with_state) ln_state_free(&st);
  }
  tu_qkv_free(&x);
}
END_TEST

/* Feature size: m = d for identity and elu1, whether m is left 0 or set to d. */
START_TEST(linear_feature_size_is_d) {
  static const size_t ds[] = {1, 7, 64, 65, 128};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; ++i)
    for (int fm = 0; fm < ATTN_FEATURE_COUNT; ++fm)
      for (int explicit_m = 0; explicit_m < 2; ++explicit_m) {
        attn_linear_desc d;
        ln_desc(&d, 3, 3, 2, 1, 1, ds[i], 5, (attn_feature_map)fm, CAUSAL, NORM, 0);
        d.m = explicit_m ? ds[i] : 0;
        size_t m = 0;
        ck_assert_int_eq(attn_linear_feature_size(&d, &m), ATTN_OK);
        ck_assert_uint_eq(m, ds[i]);
      }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The state: layout and management                                                            */
/* ------------------------------------------------------------------------------------------ */
/* For separate key and value head counts and both modes: attn_linear_state_size is
 * L * m * (dv + 2) floats with L = lcm(h_k, h_v) (ln_state_make), a causal prefill leaves S and z
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
  ln_state st;
  ln_state_make(&st, &d);
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
  ln_state_free(&st);
  tu_qkv_free(&x);
}
END_TEST

enum { NQ = 5, NKV = 7, HQ = 4, HKV = 2, D = 8, DV = 6 };
#define STATE_FLOATS ((size_t)HKV * D * (DV + 2)) /* L = HKV state heads of the default shape */

typedef struct api_state {
  attn_linear_state s;
  void *mem;
  size_t bytes;
} api_state;

/* A state bound to guarded memory and filled with a non-trivial prefix, so that an unwanted
 * write shows. */
static void api_state_make(api_state *st, const attn_linear_desc *d, tu_rng *r) {
  ck_assert_int_eq(attn_linear_state_size(d, &st->bytes), ATTN_OK);
  st->mem = tu_alloc(st->bytes, 0);
  ck_assert_int_eq(attn_linear_state_init(&st->s, d, st->mem, st->bytes), ATTN_OK);
  for (size_t e = 0; e < st->bytes / sizeof(float); ++e) st->s.data[e] = tu_rng_range(r, 0.0f, 1.0f);
  st->s.tokens = 11;
}

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
  api_state st;
  api_state_make(&st, &d, &rng);
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
  api_state a, b, wrong_dv, wrong_mode, wrong_heads;
  api_state_make(&a, &d, &rng);
  api_state_make(&b, &d, &rng);
  attn_linear_desc dd;
  ck_assert_int_eq(attn_linear_desc_init(&dd, NQ, NKV, HQ, HKV, D, DV + 1, ATTN_FEATURE_ELU1), ATTN_OK);
  api_state_make(&wrong_dv, &dd, &rng);
  dd = d;
  dd.normalize = 0;
  api_state_make(&wrong_mode, &dd, &rng);
  dd = d;
  ck_assert_int_eq(attn_shape_init(&dd.shape, NQ, NKV, HQ, HKV, HQ, D, DV), ATTN_OK); /* L = 4 */
  api_state_make(&wrong_heads, &dd, &rng);
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
  api_state *all[] = {&a, &b, &wrong_dv, &wrong_mode, &wrong_heads};
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
  ck_assert_int_eq(attn_linear_desc_init(&d, 1, 1, 1, 1, 1, 1, ATTN_FEATURE_IDENTITY), ATTN_OK);
  ck_assert_int_eq(d.feature_map, ATTN_FEATURE_IDENTITY);
  ck_assert_int_eq(attn_linear_desc_init(NULL, 1, 1, 1, 1, 1, 1, ATTN_FEATURE_ELU1), ATTN_E_NULL_POINTER);
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
  return (size_t)RE_N * max3(j->h_q, j->h_k, j->h_v) * RE_D + ln_state_heads(j->h_k, j->h_v) * RE_D * (RE_D + 2);
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
  LV_STATE_IN_WS
} lv_kind;

typedef struct lv_case {
  const char *name;
  lv_kind kind;
  attn_status expect;
  int desc_level; /* workspace_size, state_size, feature_size and chunk_size must answer the same */
} lv_case;

#define LV(k, s, lvl) .kind = (k), .expect = (s), .desc_level = (lvl)
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
    {.name = "mask: causal window (3, 0)", LV(LV_MASK_WINDOW, ATTN_E_BAD_WINDOW, 1)},
    {.name = "mask: right 5", LV(LV_MASK_RIGHT, ATTN_E_BAD_WINDOW, 1)},
    {.name = "mask: diagonal (0, 0)", LV(LV_MASK_DIAGONAL, ATTN_E_BAD_WINDOW, 1)},
    {.name = "mask: causal chunk 16", LV(LV_MASK_CHUNK_CAUSAL, ATTN_E_BAD_WINDOW, 1)},
    {.name = "mask: full chunk 16", LV(LV_MASK_CHUNK_FULL, ATTN_E_BAD_WINDOW, 1)},
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
  ck_assert_int_eq(attn_linear_desc_init(&d, NQ, NKV, HQ, HKV, D, DV, ATTN_FEATURE_ELU1), ATTN_OK);
  api_state st, alt;
  api_state_make(&st, &d, &rng);
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
      sp = NULL;
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
  }
  if (have_alt) { /* a state of another shape or mode, from a valid descriptor */
    attn_linear_desc fresh;
    ck_assert_int_eq(attn_linear_desc_init(&fresh, NQ, NKV, HQ, HKV, D, DV, ad.feature_map), ATTN_OK);
    const attn_shape *as = &ad.shape;
    ck_assert_int_eq(attn_shape_init(&fresh.shape, NQ, NKV, HQ, as->h_k, as->h_v, as->d, as->dv), ATTN_OK);
    fresh.normalize = ad.normalize;
    api_state_make(&alt, &fresh, &rng);
    sp = &alt.s;
  }
  /* snapshot of the state that goes in (struct and data) */
  attn_linear_state before;
  memset(&before, 0, sizeof before);
  float *data_before = NULL;
  size_t data_bytes = 0;
  if (sp) {
    memcpy(&before, sp, sizeof before);
    data_bytes = have_alt ? alt.bytes : st.bytes;
    data_before = malloc(data_bytes);
    ck_assert_ptr_nonnull(data_before);
    memcpy(data_before, have_alt ? alt.mem : st.mem, data_bytes);
  }
  ck_assert_int_eq(attn_linear(dp, q, k, v, op, sp, c->kind == LV_WS_NULL ? NULL : ws, ws_size), c->expect);
  if (c->desc_level) {
    size_t bytes = 12345, m = 12345;
    ck_assert_int_eq(attn_linear_workspace_size(&d, &bytes), c->expect);
    ck_assert_int_eq(attn_linear_state_size(&d, &bytes), c->expect);
    ck_assert_int_eq(attn_linear_feature_size(&d, &m), c->expect);
    ck_assert_int_eq(attn_linear_chunk_size(&d, &m), c->expect);
    ck_assert_uint_eq(bytes, 12345); /* untouched on error */
    ck_assert_uint_eq(m, 12345);
  }
  tu_tensor pristine;
  tu_tensor_alloc(&pristine, T, NQ, HQ, DV, 1);
  tu_assert_same_bits("o after a rejected call", pristine.data, o.data, sizeof(float) * o.span);
  tu_assert_guards("o", o.owner);
  tu_assert_guards("workspace", ws);
  tu_qkv_assert_unchanged(&x);
  if (sp) {
    tu_assert_same_bits("state struct after a rejected call", &before, sp, sizeof before);
    tu_assert_same_bits("state data after a rejected call", data_before, have_alt ? alt.mem : st.mem, data_bytes);
    tu_assert_guards("state memory", have_alt ? alt.mem : st.mem);
  }
  free(data_before);
  tu_tensor_free(&pristine);
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
    work[i] = c->n_q * (c->n_kv + c->prefix) * max3(c->h_q, c->h_k, c->h_v) * (c->d + c->dv);
  }
  const size_t nsel = tu_select_rows(LN_NCASES, work, ln_sel);
  TCase *tc = tu_tcase("reference");
  tcase_add_loop_test(tc, linear_matches_reference, 0, (int)nsel);
  tcase_add_test(tc, linear_feature_size_is_d);
  tcase_add_test(tc, linear_elu1_accuracy_sweep);
  tcase_add_loop_test(tc, linear_nonfinite_policy, 0, (int)LNF_NCASES);
  tcase_add_test(tc, linear_eps0_empty_rows_are_zero);
  suite_add_tcase(s, tc);
  tc = tu_tcase("properties");
  tcase_add_loop_test(tc, linear_chunkwise_matches_recurrent, 0, (int)LN_NPROPS);
  tcase_add_loop_test(tc, linear_prefill_state_continues_decode, 0, (int)LN_NPROPS);
  tcase_add_loop_test(tc, linear_snapshot_restore_bit_exact, 0, (int)(2 * LN_NPROPS));
  tcase_add_loop_test(tc, linear_split_prefill_matches_one_call, 0, (int)LN_NPROPS);
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
