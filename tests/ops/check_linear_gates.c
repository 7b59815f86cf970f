/*
 * Decayed and gated causal linear attention (attn_linear_gated, attn_retnet_log_decays; spec
 * VARIANTS.md section 4) on the ISA path named by ATTN_ISA, against the float64 reference of
 * tests/ref/ref_gated.c (explicit sums over the keys, every decay the exponential of the log-gate
 * sum of its own (key, query) pair). TCases: "reference" (the case table: maps, SCALAR and
 * FEATURE gates, beta, separate query / key / value / gate heads, sizes around the chunk sizes,
 * n_q != n_kv, incoming states, gate layouts, chunk sizes), "models" (RetNet against its parallel
 * form, Mamba2 against the SSD recurrence, both computed here in double) and "extreme" (log gates
 * of -5 and -20 per token, decays below e^-300 within a chunk, features that do not decay beside
 * features that decay by e^-20 per token). Properties and bad input: check_linear_gates_props.c;
 * the helpers of both: tests/common/gated_util.h.
 *
 * TOLERANCES: tests/common/tolerances.h (gated linear attention: the error model, its constants
 * and the figures observed), |got - expect| <= tol_gated(...) * abs with abs the reference's
 * error scale.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gated_util.h"
#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
/* Every field left out is the default: identity un-normalised, SCALAR gate, no beta, log gates
 * uniform in [-3, 0), token-major gate layout, default chunk, token-major uniform q, k, v, no
 * incoming state. mild: log gates in [-0.05, 0) (long memory: the state and far keys matter). */
typedef struct gt_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_k, h_v, h_g, d, dv;
  gt_map map;
  gt_gk gate;
  int beta, mild;
  size_t chunk, prefix;
  gt_glayout glayout;
  tu_layout_kind layout;
  tu_data data;
  float scale;  /* 0: the default 1 */
  float gconst; /* not 0: this log gate for every token (and feature) */
} gt_case;

#define SIZES(nq, nkv, dd, ddv) .n_q = (nq), .n_kv = (nkv), .d = (dd), .dv = (ddv)
#define HEADS(q, k, v, g)       .h_q = (q), .h_k = (k), .h_v = (v), .h_g = (g)
#define GL(x)                   .glayout = GL_##x
#define QKV(x)                  .layout = TU_##x
#define SPAN(c, g)              .chunk = (c), .gconst = (g)
#define ELU_NOGATE              .map = M_ELU, .gate = K_NONE

static const gt_case gt_cases[] = {
    /* sizes around the chunk sizes (48 AVX2 / NEON, 64 scalar), odd widths */
    {.name = "n1_d1", SIZES(1, 1, 1, 1), HEADS(1, 1, 1, 0)},
    {.name = "n2_d7_feature", SIZES(2, 2, 7, 7), HEADS(1, 1, 1, 0), FEAT},
    {.name = "n47_d9_mild", SIZES(47, 47, 9, 9), HEADS(1, 1, 1, 0), MILD},
    {.name = "n48_d33_feature", SIZES(48, 48, 33, 33), HEADS(1, 1, 1, 0), FEAT, MILD},
    {.name = "n49_d64_beta", SIZES(49, 49, 64, 64), HEADS(1, 1, 1, 0), BETA},
    {.name = "n63_d65_feature_beta", SIZES(63, 63, 65, 65), HEADS(1, 1, 1, 0), FEAT, BETA, MILD},
    {.name = "n64_d7_elu", SIZES(64, 64, 7, 7), HEADS(2, 2, 2, 0), .map = M_ELU, MILD},
    {.name = "n65_d9_relu_feature", SIZES(65, 65, 9, 9), HEADS(2, 2, 2, 0), .map = M_RELU, FEAT},
    {.name = "n100_d33_elu_feature_beta", SIZES(100, 100, 33, 33), HEADS(1, 1, 1, 0), .map = M_ELU, FEAT, BETA},
    {.name = "n200_d64_beta_mild", SIZES(200, 200, 64, 64), HEADS(1, 1, 1, 0), BETA, MILD},
    {.name = "n200_d65_feature_mild", SIZES(200, 200, 65, 65), HEADS(1, 1, 1, 0), FEAT, MILD},
    {.name = "d1_dv65", SIZES(70, 70, 1, 65), HEADS(2, 1, 1, 0), MILD},
    {.name = "d65_dv1_feature", SIZES(70, 70, 65, 1), HEADS(1, 1, 1, 0), FEAT, MILD},
    {.name = "d33_dv7_relu_beta", SIZES(70, 70, 33, 7), HEADS(1, 1, 1, 0), .map = M_RELU, BETA, MILD},
    {.name = "d7_dv9_elu_unnorm", SIZES(50, 50, 7, 9), HEADS(1, 1, 1, 0), .map = M_ELU_UN, FEAT, MILD},
    {.name = "d9_dv33_relu_unnorm", SIZES(50, 50, 9, 33), HEADS(1, 1, 1, 0), .map = M_RELU_UN, BETA},
    {.name = "id_norm_pos", SIZES(50, 50, 16, 16), HEADS(1, 1, 1, 0), .map = M_ID_NORM, .data = TU_DATA_POSITIVE, MILD},
    /* heads: Mamba2 (q = C, k = B shared by a group of value heads, gate and beta per head),
     * GQA with a per-query-head gate, a gate shared by all heads or by pairs, more gate heads
     * than anything else (H = h_g) */
    {.name = "mamba2_g1_h4", SIZES(100, 100, 16, 8), HEADS(1, 1, 4, 4), BETA},
    {.name = "mamba2_g2_h8_c7", SIZES(65, 65, 16, 8), HEADS(2, 2, 8, 8), BETA, MILD, .chunk = 7},
    {.name = "mamba2_g1_h4_feature", SIZES(70, 70, 9, 7), HEADS(1, 1, 4, 4), FEAT, BETA, MILD},
    {.name = "mamba2_g2_h8_hg0", SIZES(49, 49, 8, 8), HEADS(2, 2, 8, 0), BETA, MILD},
    {.name = "gqa_4_2_2_g4_elu", SIZES(70, 70, 16, 16), HEADS(4, 2, 2, 4), .map = M_ELU, MILD},
    {.name = "gqa_4_2_2_g4_feature_relu", SIZES(50, 50, 8, 8), HEADS(4, 2, 2, 4), .map = M_RELU, FEAT, BETA},
    {.name = "gqa_4_2_2_g4_id", SIZES(65, 65, 16, 16), HEADS(4, 2, 2, 4), MILD, BETA},
    {.name = "gate_shared_h_g1", SIZES(50, 50, 8, 8), HEADS(4, 4, 4, 1), MILD},
    {.name = "gate_pairs_h_g2", SIZES(50, 50, 8, 8), HEADS(4, 2, 4, 2), FEAT, BETA, MILD},
    {.name = "heads_2_2_8_g4", SIZES(40, 40, 8, 8), HEADS(2, 2, 8, 4), BETA, MILD},
    {.name = "heads_1_2_4_g2", SIZES(40, 40, 8, 8), HEADS(1, 2, 4, 2), .map = M_ELU, MILD},
    {.name = "gate_heads_only_4", SIZES(40, 40, 8, 8), HEADS(1, 1, 1, 4), FEAT, MILD},
    /* n_q < n_kv (chunked prefill, bottom-right), decode, n_q > n_kv */
    {.name = "chunked_10_of_75", SIZES(10, 75, 16, 16), HEADS(1, 1, 1, 0), .map = M_ELU, MILD},
    {.name = "decode_1_of_64_feature", SIZES(1, 64, 8, 8), HEADS(2, 1, 1, 2), FEAT, BETA, MILD},
    {.name = "chunked_48_of_200_c64", SIZES(48, 200, 16, 16), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 64},
    {.name = "nq20_nkv5_prefix", SIZES(20, 5, 8, 8), HEADS(1, 1, 1, 0), MILD, .prefix = 30},
    {.name = "nq97_nkv48_feature_prefix", SIZES(97, 48, 8, 8), HEADS(2, 1, 1, 0), FEAT, MILD, .prefix = 10},
    {.name = "nq20_nkv5_elu_prefix", SIZES(20, 5, 8, 8), HEADS(2, 2, 2, 0), .map = M_ELU, BETA, MILD, .prefix = 9},
    /* incoming states */
    {.name = "prefix30_n20_elu", SIZES(20, 20, 16, 16), HEADS(2, 1, 1, 0), .map = M_ELU, MILD, .prefix = 30},
    {.name = "prefix64_decode_feature", SIZES(1, 1, 8, 8), HEADS(2, 2, 2, 0), FEAT, BETA, MILD, .prefix = 64},
    {.name = "prefix100_chunked_c7", SIZES(10, 75, 8, 8), HEADS(1, 1, 1, 0), MILD, .chunk = 7, .prefix = 100},
    {.name = "prefix40_mamba2", SIZES(33, 33, 16, 8), HEADS(1, 1, 4, 4), BETA, MILD, .prefix = 40},
    /* gate layouts: padded, head-major, row stride 0 (a fixed decay per head, RetNet) */
    {.name = "gate_padded", SIZES(60, 60, 8, 8), HEADS(2, 2, 2, 0), .glayout = GL_P, BETA, MILD},
    {.name = "gate_padded_feature", SIZES(60, 60, 9, 7), HEADS(2, 1, 2, 2), FEAT, BETA, GL(P), QKV(PADDED)},
    {.name = "gate_head_major_feature", SIZES(50, 50, 8, 8), HEADS(2, 2, 2, 2), FEAT, MILD, .glayout = GL_HM},
    {.name = "gate_row0", SIZES(100, 100, 16, 16), HEADS(4, 4, 4, 4), MILD, .glayout = GL_R0},
    {.name = "gate_row0_padded_feature", SIZES(70, 70, 8, 8), HEADS(2, 2, 2, 2), FEAT, MILD, .glayout = GL_R0P},
    {.name = "gate_row0_head_major_qkv", SIZES(50, 50, 8, 8), HEADS(2, 2, 2, 0), MILD, GL(R0), QKV(HEAD_MAJOR)},
    {.name = "gate_padded_packed_qkv", SIZES(41, 41, 8, 8), HEADS(4, 2, 2, 4), BETA, MILD, GL(P), QKV(PACKED_QKV)},
    /* chunk sizes */
    {.name = "chunk1_feature", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 1},
    {.name = "chunk7_beta", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), BETA, MILD, .chunk = 7},
    {.name = "chunk7_feature_elu", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), .map = M_ELU, FEAT, .chunk = 7},
    {.name = "chunk64_feature", SIZES(129, 129, 64, 64), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 64},
    {.name = "chunk64_scalar", SIZES(200, 200, 16, 16), HEADS(1, 1, 1, 0), MILD, .chunk = 64},
    {.name = "chunk256_feature", SIZES(300, 300, 8, 8), HEADS(1, 1, 1, 0), FEAT, MILD, .chunk = 256},
    {.name = "chunk_default_relu_feature", SIZES(97, 97, 16, 16), HEADS(1, 1, 1, 0), .map = M_RELU, FEAT, BETA},
    /* a chunk of 16 decaying by e^-59.5 (scalar gate: the weights factored, factors up to
     * e^59.5) and by e^-61.5 (beyond ATTN_GATE_SPAN: element by element) */
    {.name = "span_59.5_c16_beta", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), BETA, .chunk = 16, .gconst = -3.71875f},
    {.name = "span_59.5_c16_elu_norm", SIZES(100, 100, 8, 8), HEADS(1, 1, 1, 0), .map = M_ELU, SPAN(16, -3.71875f)},
    {.name = "span_61.5_c16", SIZES(100, 100, 16, 16), HEADS(1, 1, 1, 0), .chunk = 16, .gconst = -3.84375f},
    /* no gate, through attn_linear_gated: beta alone, and nothing (plain linear attention) */
    {.name = "beta_only", SIZES(70, 70, 8, 8), HEADS(2, 2, 2, 0), .gate = K_NONE, BETA},
    {.name = "beta_only_elu_prefix", SIZES(30, 30, 8, 8), HEADS(2, 2, 2, 0), ELU_NOGATE, BETA, .prefix = 20},
    {.name = "no_gate_no_beta", SIZES(70, 70, 8, 8), HEADS(2, 2, 2, 0), .map = M_ELU, .gate = K_NONE},
    /* the scale s multiplies phi(q) */
    {.name = "scale_0.25_feature", SIZES(50, 50, 16, 16), HEADS(1, 1, 1, 0), FEAT, MILD, .scale = 0.25f},
    {.name = "scale_-2_elu_norm", SIZES(50, 50, 8, 8), HEADS(1, 1, 1, 0), .map = M_ELU, MILD, .scale = -2.0f},
};
#define GT_NCASES (sizeof gt_cases / sizeof gt_cases[0])
static size_t gt_sel[GT_NCASES];

static void gt_case_desc(attn_linear_desc *d, const gt_case *c, size_t n_q, size_t n_kv) {
  gt_desc(d, n_q, n_kv, c->h_q, c->h_k, c->h_v, c->h_g, c->d, c->dv, gt_fm(c->map), gt_norm(c->map), gt_kind(c->gate),
          c->beta, c->chunk);
  if (c->scale != 0.0f) d->scale = c->scale;
}

static gt_gatespec gt_case_spec(const gt_case *c, gt_glayout layout) {
  const gt_gatespec s = {.kind = gt_kind(c->gate),
                         .beta = c->beta,
                         .layout = layout,
                         .fill = c->gconst != 0.0f ? GF_CONST : GF_UNIFORM,
                         .lo = c->gconst != 0.0f ? c->gconst
                               : c->mild         ? -0.05f
                                                 : -3.0f,
                         .hi = 0.0f};
  return s;
}

/* One case against the reference, with the chunk it names, or `chunk` when that is not 0. Returns
 * the chunk to run it with again: where the default ran it by the recurrence (per-feature gates, a
 * small state), the chunks it would otherwise take (the path's chunk with a scalar gate); else 0. */
static size_t gt_run_case(size_t idx, size_t chunk) {
  const gt_case *c = &gt_cases[idx];
  tu_rng rng = tu_rng_of(17000 + idx);
  attn_linear_desc d;
  gt_case_desc(&d, c, c->n_q, c->n_kv);
  if (chunk) d.chunk = chunk;
  const gt_gatespec spec = gt_case_spec(c, c->glayout);
  gt_inputs x;
  gt_inputs_make(&x, c->layout, c->data, &rng, c->n_q, c->n_kv, &d, &spec);
  const gt_view v = gt_all(&x);
  gt_bind(&d, &v);
  lu_state st;
  lu_state_make(&st, &d);
  double *s0 = NULL;
  if (c->prefix) { /* earlier tokens, absorbed into the state by a call of their own */
    gt_inputs px;
    const gt_gatespec pspec = gt_case_spec(c, GL_T);
    gt_inputs_make(&px, TU_TOKEN_MAJOR, c->data, &rng, c->prefix, c->prefix, &d, &pspec);
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = c->prefix;
    const gt_view pv = gt_all(&px);
    tu_tensor po;
    gt_call(&pd, &pv, TU_TOKEN_MAJOR, &st.s, 0, &po);
    ck_assert_uint_eq(st.s.tokens, c->prefix);
    s0 = lu_state_to_double(&st.s);
    tu_tensor_free(&po);
    tu_gated_free(&px);
  }
  tu_tensor o;
  gt_call(&d, &v, c->layout == TU_PACKED_QKV ? TU_TOKEN_MAJOR : c->layout, &st.s, (idx % 2) * 4, &o);
  tu_gated_assert_unchanged(&x);
  const size_t C = gt_chunk(&d);
  size_t again = 0;
  if (!d.chunk && C == 1) {
    attn_linear_desc e = d;
    e.gate = ATTN_GATE_SCALAR; /* its layout reads element 0 of each per-feature row */
    again = gt_chunk(&e);
  }
  gt_check_output(c->name, &d, &v, s0, c->prefix, C, C, &o);
  gt_check_state(c->name, &d, &v, s0, c->prefix, C, C, &st.s);
  free(s0);
  tu_tensor_free(&o);
  lu_state_free(&st);
  tu_gated_free(&x);
  return again;
}

/* Each case as it names its chunk, and a case the default runs by the recurrence in chunks too. */
START_TEST(gated_matches_reference) {
  const size_t idx = gt_sel[_i], again = gt_run_case(idx, 0);
  if (again) ck_assert_uint_eq(gt_run_case(idx, again), 0);
}
END_TEST

/* attn_linear_desc_init's gate defaults: no gate, no beta, layouts [n_kv][H][1]. */
START_TEST(gated_desc_init_defaults) {
  attn_linear_desc d;
  memset(&d, 0xCD, sizeof d);
  ck_assert_int_eq(attn_linear_desc_init(&d, 5, 9, 6, 2, 16, 8, ATTN_FEATURE_IDENTITY), ATTN_OK);
  ck_assert_int_eq(d.gate, ATTN_GATE_NONE);
  ck_assert_int_eq(d.beta, 0);
  ck_assert_uint_eq(d.gate_layout.row_stride, 6);
  ck_assert_uint_eq(d.gate_layout.head_stride, 1);
  ck_assert_uint_eq(d.beta_layout.row_stride, 6);
  ck_assert_uint_eq(d.beta_layout.head_stride, 1);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Models: RetNet and Mamba2, each against its own form computed here in double                 */
/* ------------------------------------------------------------------------------------------ */
/* attn_retnet_log_decays: log(1 - 2^(-5-h)) as log1p in double, rounded; nothing past `heads`. */
START_TEST(gated_retnet_decays) {
  float lg[17];
  for (size_t heads = 1; heads <= 16; ++heads) {
    for (size_t h = 0; h < 17; ++h) lg[h] = 12345.0f;
    ck_assert_int_eq(attn_retnet_log_decays(heads, lg), ATTN_OK);
    for (size_t h = 0; h < heads; ++h) {
      const float want = (float)log1p(-ldexp(1.0, -5 - (int)h));
      ck_assert_msg(lg[h] == want, "heads %zu: lg[%zu] = %.9g, want %.9g", heads, h, (double)lg[h], (double)want);
      ck_assert(lg[h] < 0.0f);
    }
    for (size_t h = heads; h < 17; ++h) ck_assert(lg[h] == 12345.0f);
  }
}
END_TEST

/* RetNet retention: H = 4 heads, n = 130, identity un-normalised, scale 1/sqrt(d), the decays of
 * attn_retnet_log_decays as a SCALAR gate of layout {0, 1}:
 *   o_i = sum_{j <= i} (q_i . k_j / sqrt(d)) gamma_h^(i - j) v_j   (gamma_h = exp(lg[h]))
 * written out here in double, for the default chunk, 7, 64 and 1, h_g 4 or 0; then the same
 * sequence decoded token by token. */
START_TEST(gated_retnet_parallel_form) {
  static const size_t chunks[] = {0, 7, 64, 1};
  const size_t n = tu_small() ? 70 : 130, Hh = 4, dd = 16, dv = 16;
  tu_rng rng = tu_rng_of(18000 + (uint64_t)_i);
  float lg[4];
  ck_assert_int_eq(attn_retnet_log_decays(Hh, lg), ATTN_OK);
  /* loop 4..7: other fixed decays, whose gamma is not a short float (RetNet's 1 - 2^(-5-h) are):
   * the recurrent form then repeats exp's rounding error at every step */
  if (_i >= 4)
    for (size_t h = 0; h < Hh; ++h) lg[h] = -0.0123f - 0.0071f * (float)h;
  attn_linear_desc d;
  gt_desc(&d, n, n, Hh, Hh, Hh, _i % 2 ? 0 : Hh, dd, dv, ATTN_FEATURE_IDENTITY, 0, ATTN_GATE_SCALAR, 0, chunks[_i % 4]);
  d.scale = (float)(1.0 / sqrt((double)dd));
  gt_inputs x;
  const gt_gatespec none = {.kind = ATTN_GATE_NONE};
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &d, &none);
  /* the gate: 4 floats, row stride 0, head stride 1 */
  tu_tensor g;
  memset(&g, 0, sizeof g);
  g.data = lg;
  g.n = n;
  g.h = Hh;
  g.w = 1;
  g.l.row_stride = 0;
  g.l.head_stride = 1;
  g.span = Hh;
  gt_view v = gt_all(&x);
  v.g = g;
  gt_bind(&d, &v);
  ck_assert_uint_eq(d.gate_layout.row_stride, 0);
  ck_assert_uint_eq(d.gate_layout.head_stride, 1);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  gt_call(&d, &v, TU_TOKEN_MAJOR, &st.s, 0, &o);
  /* the parallel form */
  const size_t count = n * Hh * dv;
  double *par = calloc(count, sizeof(double));
  ck_assert_ptr_nonnull(par);
  for (size_t h = 0; h < Hh; ++h) {
    const double gamma = exp((double)lg[h]);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j <= i; ++j) {
        double qk = 0.0;
        for (size_t t = 0; t < dd; ++t) qk += (double)*tu_at(&x.x.q, i, h, t) * (double)*tu_at(&x.x.k, j, h, t);
        const double w = (double)d.scale * qk * pow(gamma, (double)(i - j));
        for (size_t c = 0; c < dv; ++c) par[(i * Hh + h) * dv + c] += w * (double)*tu_at(&x.x.v, j, h, c);
      }
  }
  const size_t C = gt_chunk(&d);
  const ref_gated_problem p = gt_problem(&d, &v, NULL, C, C);
  gt_ref r;
  gt_ref_output(&r, &p);
  /* the reference itself agrees with the parallel form (both double) */
  for (size_t e = 0; e < count; ++e)
    ck_assert_msg(fabs(r.o[e] - par[e]) <= 1e-12 * (r.abs[e] + 1e-300), "reference vs RetNet parallel form at %zu", e);
  gt_compare("gated.retnet", "RetNet parallel form", &o, par, &r, 0, n, dd, 1.0);
  gt_check_state("RetNet state", &d, &v, NULL, 0, C, C, &st.s);
  gt_ref_free(&r);
  /* the recurrent form: n decode steps from an empty state, each row against the parallel form
   * (the same float gamma applied n times: the error model of token-by-token decode) */
  const ref_gated_problem pd = gt_problem(&d, &v, NULL, C, 1);
  gt_ref_output(&r, &pd);
  lu_state dec;
  lu_state_make(&dec, &d);
  for (size_t t = 0; t < n; ++t) {
    attn_linear_desc sd = d;
    sd.shape.n_q = sd.shape.n_kv = 1;
    gt_view sv = gt_slice(&x, t, 1, t, 1);
    sv.g = g; /* row stride 0: the same 4 floats */
    tu_tensor od;
    gt_call(&sd, &sv, TU_TOKEN_MAJOR, &dec.s, 0, &od);
    gt_compare("gated.retnet", "RetNet decode vs parallel form", &od, par + t * Hh * dv, &r, t * Hh * dv, n, dd, 1.0);
    tu_tensor_free(&od);
  }
  gt_ref_free(&r);
  lu_state_free(&dec);
  free(par);
  tu_tensor_free(&o);
  lu_state_free(&st);
  tu_gated_free(&x);
}
END_TEST

/* Mamba2 (SSD): q = C, k = B, v = x, beta = dt in [0.01, 0.5), log gamma = fl(dt A_h) with A_h
 * in [-4, -0.5) per head, scale 1, identity, un-normalised, h_q = h_k = groups, h_v = h_g = 4
 * heads, against the recurrence run here in double:
 *   h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T,   y_t = C_t^T h_t
 * (exp(dt A) in double from the float dt and A, as the model defines it); the final state is h_n.
 * Loop: groups 1 and 2 x chunks default, 7, 64. */
START_TEST(gated_mamba2_ssd) {
  static const size_t chunks[] = {0, 7, 64};
  const size_t G = 1 + (size_t)_i % 2, Hh = 4, N = 16, P = 8, n = tu_small() ? 64 : 100;
  tu_rng rng = tu_rng_of(19000 + (uint64_t)_i);
  attn_linear_desc d;
  gt_desc(&d, n, n, G, G, Hh, Hh, N, P, ATTN_FEATURE_IDENTITY, 0, ATTN_GATE_SCALAR, 1, chunks[_i / 2]);
  d.scale = 1.0f;
  gt_inputs x;
  const gt_gatespec spec = {.kind = ATTN_GATE_SCALAR, .beta = 1, .layout = GL_T, .fill = GF_CONST, .lo = -1.0f};
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &d, &spec);
  float A[4];
  for (size_t h = 0; h < Hh; ++h) A[h] = tu_rng_range(&rng, -4.0f, -0.5f);
  for (size_t t = 0; t < n; ++t)
    for (size_t h = 0; h < Hh; ++h) {
      const float dt = tu_rng_range(&rng, 0.01f, 0.5f);
      *tu_at(&x.b, t, h, 0) = dt;
      *tu_at(&x.g, t, h, 0) = dt * A[h]; /* what a caller passes: the float product */
    }
  tu_gated_snapshot(&x);
  const gt_view v = gt_all(&x);
  gt_bind(&d, &v);
  lu_state st;
  lu_state_make(&st, &d);
  tu_tensor o;
  gt_call(&d, &v, TU_TOKEN_MAJOR, &st.s, 0, &o);
  tu_gated_assert_unchanged(&x);
  /* the SSD recurrence, per head, in double */
  const size_t count = n * Hh * P, w = P + 2;
  double *y = malloc(sizeof(double) * count), *hs = malloc(sizeof(double) * Hh * N * w);
  ck_assert(y && hs);
  for (size_t e = 0; e < Hh * N * w; ++e) hs[e] = 0.0;
  for (size_t h = 0; h < Hh; ++h) {
    const size_t g = h / (Hh / G);
    double *S = hs + h * N * w; /* the state's layout: row f, columns c < P (z and offset 0) */
    for (size_t t = 0; t < n; ++t) {
      const double dt = (double)*tu_at(&x.b, t, h, 0), a = exp(dt * (double)A[h]);
      for (size_t f = 0; f < N; ++f)
        for (size_t c = 0; c < P; ++c)
          S[f * w + c] = a * S[f * w + c] + dt * (double)*tu_at(&x.x.k, t, g, f) * (double)*tu_at(&x.x.v, t, h, c);
      for (size_t c = 0; c < P; ++c) {
        double acc = 0.0;
        for (size_t f = 0; f < N; ++f) acc += (double)*tu_at(&x.x.q, t, g, f) * S[f * w + c];
        y[(t * Hh + h) * P + c] = acc;
      }
    }
  }
  /* scales from the reference (step_chunk 1: the recurrence above is token by token, but it is
   * exact in double; the library's form is the chunkwise one) */
  const size_t C = gt_chunk(&d);
  const ref_gated_problem p = gt_problem(&d, &v, NULL, C, C);
  gt_ref r, rs;
  gt_ref_output(&r, &p);
  gt_ref_state(&rs, &p);
  /* the reference agrees with the SSD recurrence up to the rounding of fl(dt A) (<= u/2 |dt A|
   * per token): both in double */
  for (size_t e = 0; e < count; ++e)
    ck_assert_msg(fabs(r.o[e] - y[e]) <= TOL_U * (r.abs[e] + r.log[e]) + 1e-300, "reference vs SSD at %zu", e);
  ck_assert_uint_eq(st.s.heads, Hh); /* lcm(G, 4, 4) */
  gt_compare("gated.mamba2", "Mamba2 SSD y", &o, y, &r, 0, n, N, 1.0);
  const tu_tensor sv = lu_state_view(&st.s);
  gt_compare("gated.mamba2", "Mamba2 SSD final state", &sv, hs, &rs, 0, n, 0, 1.0);
  gt_ref_free(&r);
  gt_ref_free(&rs);
  free(y);
  free(hs);
  tu_tensor_free(&o);
  lu_state_free(&st);
  tu_gated_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Extreme gates: nothing overflows, nothing is lost                                            */
/* ------------------------------------------------------------------------------------------ */
typedef struct gx_case {
  const char *name;
  gt_gk gate;
  gt_fill fill;
  float lo, hi;
  gt_glayout glayout;
  gt_map map;
  int beta;
  size_t n, chunk, prefix, decode;
} gx_case;

static const gx_case gx_cases[] = {
    /* -5 per token over a chunk of 64: exp(+320) in a naive factorisation */
    {"lg -5, chunk 64", K_SCALAR, GF_CONST, -5.0f, 0.0f, GL_T, M_ID, 0, 200, 64, 0, 4},
    {"lg -5, chunk 64, feature", K_FEATURE, GF_CONST, -5.0f, 0.0f, GL_T, M_ID, 1, 200, 64, 0, 4},
    {"lg -5 per head (row stride 0), chunk 64", K_SCALAR, GF_CONST, -5.0f, 0.0f, GL_R0, M_ELU, 0, 200, 64, 10, 4},
    /* down to -20 per token */
    {"lg in [-20, 0), default chunk", K_SCALAR, GF_UNIFORM, -20.0f, 0.0f, GL_T, M_ELU, 0, 200, 0, 0, 4},
    {"lg in [-20, 0), chunk 64, feature", K_FEATURE, GF_UNIFORM, -20.0f, 0.0f, GL_T, M_ID, 1, 200, 64, 0, 4},
    {"lg in [-20, 0), chunk 256, feature", K_FEATURE, GF_UNIFORM, -20.0f, 0.0f, GL_T, M_ELU, 0, 300, 256, 0, 0},
    /* -20 per token, chunk 64: a chunk's decay is e^-1280, far below e^-300 (double's range) */
    {"lg -20, chunk 64, incoming state", K_SCALAR, GF_CONST, -20.0f, 0.0f, GL_T, M_ID, 1, 130, 64, 40, 8},
    {"lg -20, chunk 64, feature", K_FEATURE, GF_CONST, -20.0f, 0.0f, GL_T, M_ELU, 0, 130, 64, 40, 8},
    {"lg -20, chunk 256", K_SCALAR, GF_CONST, -20.0f, 0.0f, GL_T, M_RELU, 0, 256, 256, 0, 0},
    /* features that never decay beside features that decay by e^-20 per token */
    {"features 0 | -20, chunk 64", K_FEATURE, GF_SPLIT, -20.0f, 0.0f, GL_T, M_ID, 0, 200, 64, 30, 8},
    {"features 0 | -20, chunk 256", K_FEATURE, GF_SPLIT, -20.0f, 0.0f, GL_T, M_ELU, 1, 300, 256, 0, 0},
    {"features 0 | -20, default chunk", K_FEATURE, GF_SPLIT, -20.0f, 0.0f, GL_T, M_ID, 1, 200, 0, 0, 4},
    {"features mild | -20, chunk 64", K_FEATURE, GF_MIXED, -20.0f, 0.0f, GL_T, M_ID, 1, 200, 64, 20, 8},
    {"features mild | -20, chunk 7", K_FEATURE, GF_MIXED, -20.0f, 0.0f, GL_T, M_ELU, 0, 200, 7, 0, 4},
};
#define GX_NCASES (sizeof gx_cases / sizeof gx_cases[0])

/* A prefix call, the main call, then `decode` steps: every output and state finite, and each
 * against the reference. */
START_TEST(gated_extreme_gates) {
  const gx_case *c = &gx_cases[_i];
  const size_t n = tu_small() && c->n > 130 ? 130 : c->n, nall = c->prefix + n + c->decode, dd = 16, dv = 8;
  const size_t hq = 2, hk = 2, hv = 4, hg = 4;
  tu_rng rng = tu_rng_of(25000 + (uint64_t)_i);
  attn_linear_desc d;
  gt_desc(&d, n, n, hq, hk, hv, hg, dd, dv, gt_fm(c->map), gt_norm(c->map), gt_kind(c->gate), c->beta, c->chunk);
  const gt_gatespec spec = {
      .kind = d.gate, .beta = c->beta, .layout = c->glayout, .fill = c->fill, .lo = c->lo, .hi = c->hi};
  gt_inputs x;
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, nall, nall, &d, &spec);
  const gt_view v = gt_slice(&x, c->prefix, n, c->prefix, n);
  gt_bind(&d, &v);
  const size_t C = gt_chunk(&d);
  lu_state st;
  lu_state_make(&st, &d);
  double *s0 = NULL;
  tu_tensor o;
  char what[160];
  if (c->prefix) {
    attn_linear_desc pd = d;
    pd.shape.n_q = pd.shape.n_kv = c->prefix;
    const gt_view pv = gt_slice(&x, 0, c->prefix, 0, c->prefix);
    gt_call(&pd, &pv, TU_TOKEN_MAJOR, &st.s, 0, &o);
    gt_assert_output_finite(c->name, &o);
    snprintf(what, sizeof what, "%s: prefix", c->name);
    gt_check_output(what, &pd, &pv, NULL, 0, C, C, &o);
    tu_tensor_free(&o);
    s0 = lu_state_to_double(&st.s);
  }
  gt_call(&d, &v, TU_TOKEN_MAJOR, &st.s, 0, &o);
  gt_assert_output_finite(c->name, &o);
  gt_assert_finite(c->name, st.s.data, lu_state_floats(&st.s));
  gt_check_output(c->name, &d, &v, s0, c->prefix, C, C, &o);
  snprintf(what, sizeof what, "%s: state", c->name);
  gt_check_state(what, &d, &v, s0, c->prefix, C, C, &st.s);
  tu_tensor_free(&o);
  for (size_t t = 0; t < c->decode; ++t) { /* decode steps, each against the whole sequence's row */
    free(s0);
    s0 = lu_state_to_double(&st.s);
    attn_linear_desc sd = d;
    sd.shape.n_q = sd.shape.n_kv = 1;
    const size_t at = c->prefix + n + t;
    const gt_view sv = gt_slice(&x, at, 1, at, 1);
    gt_call(&sd, &sv, TU_TOKEN_MAJOR, &st.s, 0, &o);
    gt_assert_output_finite(c->name, &o);
    snprintf(what, sizeof what, "%s: decode step %zu", c->name, t);
    gt_check_output(what, &sd, &sv, s0, at, 1, 1, &o);
    tu_tensor_free(&o);
  }
  gt_assert_finite(c->name, st.s.data, lu_state_floats(&st.s));
  free(s0);
  lu_state_free(&st);
  tu_gated_free(&x);
}
END_TEST

static Suite *gates_suite(attn_isa isa) {
  size_t work[GT_NCASES];
  for (size_t i = 0; i < GT_NCASES; ++i) { /* the heads: the largest of h_q, h_k, h_v and h_g */
    const gt_case *c = &gt_cases[i];
    const size_t hqk = c->h_q > c->h_k ? c->h_q : c->h_k, hvg = c->h_v > c->h_g ? c->h_v : c->h_g;
    work[i] = c->n_q * (c->n_kv + c->prefix) * (hqk > hvg ? hqk : hvg) * (c->d + c->dv);
  }
  const size_t nsel = tu_select_rows(GT_NCASES, work, gt_sel);
  /* clang-format off */
  return TU_SUITE(isa,
    {"reference", gated_matches_reference, (int)nsel}, {"reference", gated_desc_init_defaults, 1},
    {"models", gated_retnet_decays, 1}, {"models", gated_retnet_parallel_form, 8}, {"models", gated_mamba2_ssd, 6},
    {"extreme", gated_extreme_gates, (int)GX_NCASES});
  /* clang-format on */
}

int main(void) { return tu_main(gates_suite); }
