/*
 * Decayed and gated causal linear attention (attn_linear_gated) on the ISA path named by
 * ATTN_ISA, beyond the case table of check_linear_gates.c: TCases "properties" (chunkwise vs
 * token-by-token decode, decode steps bit for bit the recurrence (chunk 1), prefill or random
 * pieces then decode, per-feature gates with equal entries vs the scalar gate, zero gates vs
 * attn_linear) and "bad_input" (the exact status of every bad argument, nothing written).
 * Helpers: tests/common/gated_util.h.
 *
 * TOLERANCES: a comparison of two library results (decode vs prefill, pieces vs one call,
 * per-feature vs scalar gates, zero gates vs attn_linear) allows each its bound (tol_gated,
 * tests/common/tolerances.h): TOL_PROPERTY_FACTOR (2) times the bound, with the error model of the
 * finer computation (step_chunk 1 when one side decodes token by token).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "gated_util.h"
#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* Properties                                                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct gp_case {
  size_t chunk;
  gt_gk gate;
  int beta, mild;
  gt_map map;
  size_t h_q, h_k, h_v, h_g, d, dv;
} gp_case;

#define PH(q, k, v, g) .h_q = (q), .h_k = (k), .h_v = (v), .h_g = (g)
static const gp_case gp_cases[] = {
    {.chunk = 1, .gate = K_SCALAR, BETA, .map = M_ID, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 7, .gate = K_FEATURE, BETA, .map = M_ID, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 64, .gate = K_SCALAR, MILD, .map = M_ELU, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 64, .gate = K_FEATURE, BETA, MILD, .map = M_ID, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 0, .gate = K_FEATURE, .map = M_RELU, PH(2, 2, 2, 0), .d = 16, .dv = 16},
    {.chunk = 0, .gate = K_SCALAR, BETA, MILD, .map = M_ID, PH(1, 1, 4, 4), .d = 16, .dv = 8},
    {.chunk = 7, .gate = K_FEATURE, BETA, MILD, .map = M_ELU, PH(4, 2, 2, 4), .d = 8, .dv = 8},
    {.chunk = 1, .gate = K_FEATURE, BETA, MILD, .map = M_ID, PH(1, 1, 4, 4), .d = 9, .dv = 7},
    {.chunk = 64, .gate = K_SCALAR, BETA, .map = M_ID, PH(2, 2, 8, 4), .d = 8, .dv = 8},
    {.chunk = 0, .gate = K_SCALAR, MILD, .map = M_ELU, PH(1, 1, 1, 0), .d = 33, .dv = 9},
    {.chunk = 0, .gate = K_FEATURE, BETA, MILD, .map = M_ID, PH(2, 2, 2, 0), .d = 64, .dv = 64},
};
#define GP_NCASES (sizeof gp_cases / sizeof gp_cases[0])

static size_t gp_tokens(void) { return tu_small() ? 80 : 200; }

/* n tokens of inputs, one causal call over them into a fresh state, and the reference of the
 * outputs and of the state with the error model of token-by-token decode (step_chunk 1). */
typedef struct gt_seq {
  gt_inputs in;
  attn_linear_desc d; /* n tokens */
  size_t n, hd, C;
  lu_state st;
  tu_tensor o;
  double *got, *sgot; /* the call's outputs and state as double */
  gt_ref ro, rs;
} gt_seq;

static void gp_desc(attn_linear_desc *d, const gp_case *c, size_t n_q, size_t n_kv) {
  gt_desc(d, n_q, n_kv, c->h_q, c->h_k, c->h_v, c->h_g, c->d, c->dv, gt_fm(c->map), gt_norm(c->map), gt_kind(c->gate),
          c->beta, c->chunk);
}

static void gt_seq_make(gt_seq *s, const gp_case *c, size_t n, uint64_t seed) {
  tu_rng rng = tu_rng_of(seed);
  s->n = n;
  gp_desc(&s->d, c, n, n);
  const gt_gatespec spec = {.kind = gt_kind(c->gate),
                            .beta = c->beta,
                            .layout = GL_T,
                            .fill = GF_UNIFORM,
                            .lo = c->mild ? -0.05f : -3.0f,
                            .hi = 0.0f};
  gt_inputs_make(&s->in, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &s->d, &spec);
  const gt_view v = gt_all(&s->in);
  gt_bind(&s->d, &v);
  s->C = gt_chunk(&s->d);
  lu_state_make(&s->st, &s->d);
  gt_call(&s->d, &v, TU_TOKEN_MAJOR, &s->st.s, 0, &s->o);
  s->hd = lu_out_heads(&s->d) * c->dv;
  s->got = malloc(sizeof(double) * n * s->hd);
  ck_assert_ptr_nonnull(s->got);
  tu_tensor_to_double(&s->o, s->got);
  s->sgot = lu_state_to_double(&s->st.s);
  const ref_gated_problem p = gt_problem(&s->d, &v, NULL, s->C, 1);
  gt_ref_output(&s->ro, &p);
  gt_ref_state(&s->rs, &p);
}

static void gt_seq_free(gt_seq *s) {
  gt_ref_free(&s->ro);
  gt_ref_free(&s->rs);
  free(s->got);
  free(s->sgot);
  tu_tensor_free(&s->o);
  lu_state_free(&s->st);
  tu_gated_free(&s->in);
}

/* tokens [a, a + len) of the sequence as one call continuing state */
static void gt_seq_piece(const gt_seq *s, const gp_case *c, size_t a, size_t len, attn_linear_state *state,
                         tu_tensor *o) {
  attn_linear_desc d;
  gp_desc(&d, c, len, len);
  const gt_view v = gt_slice(&s->in, a, len, a, len);
  gt_call(&d, &v, TU_TOKEN_MAJOR, state, 0, o);
}

/* A state that absorbed the whole sequence by other calls: its token count, and its sums against
 * the one call's state (each within its bound) and against the reference. */
static void gt_seq_check_state(const gt_seq *s, const attn_linear_state *st, const char *what) {
  char buf[128];
  ck_assert_uint_eq(st->tokens, s->n);
  const tu_tensor view = lu_state_view(st);
  snprintf(buf, sizeof buf, "%s vs one call", what);
  gt_compare("gated.state", buf, &view, s->sgot, &s->rs, 0, s->n, 0, TOL_PROPERTY_FACTOR);
  snprintf(buf, sizeof buf, "%s vs reference", what);
  gt_compare("gated.state", buf, &view, s->rs.o, &s->rs, 0, s->n, 0, 1.0);
}

/* Chunkwise prefill (the case's chunk) equals n_q = n_kv = 1 calls carrying the state: outputs
 * row by row and the final states; the prefill is also checked against the reference. */
START_TEST(gated_chunkwise_matches_recurrent) {
  const gp_case *c = &gp_cases[_i];
  gt_seq s;
  gt_seq_make(&s, c, gp_tokens(), 20000 + (uint64_t)_i);
  gt_compare("gated.o", "prefill vs reference", &s.o, s.ro.o, &s.ro, 0, s.n, c->d, 1.0);
  const tu_tensor pv = lu_state_view(&s.st.s);
  gt_compare("gated.state", "prefill state vs reference", &pv, s.rs.o, &s.rs, 0, s.n, 0, 1.0);
  lu_state dec;
  lu_state_make(&dec, &s.d);
  for (size_t t = 0; t < s.n; ++t) {
    tu_tensor o;
    gt_seq_piece(&s, c, t, 1, &dec.s, &o);
    gt_compare("gated.o", "decode step vs prefill row", &o, s.got + t * s.hd, &s.ro, t * s.hd, s.n, c->d,
               TOL_PROPERTY_FACTOR);
    tu_tensor_free(&o);
  }
  gt_seq_check_state(&s, &dec.s, "decoded state");
  lu_state_free(&dec);
  gt_seq_free(&s);
}
END_TEST

/* A one-token call is the recurrence's step: one call over the n tokens with chunk 1 and n
 * one-token calls carrying a state give the same bits, every output row and the final state (a
 * decode step takes its own path, attn_cw_decode, on the recurrence's kernel and rows). */
START_TEST(gated_decode_is_the_recurrence) {
  gp_case c = gp_cases[_i];
  c.chunk = 1;
  gt_seq s;
  gt_seq_make(&s, &c, gp_tokens(), 20500 + (uint64_t)_i);
  lu_state dec;
  lu_state_make(&dec, &s.d);
  for (size_t t = 0; t < s.n; ++t) {
    tu_tensor o;
    gt_seq_piece(&s, &c, t, 1, &dec.s, &o);
    for (size_t h = 0; h < o.h; ++h) /* each head's row, against the recurrence's row t */
      tu_assert_same_bits("a decode step's output row", tu_at(&o, 0, h, 0), tu_at(&s.o, t, h, 0), o.w * sizeof(float));
    tu_tensor_free(&o);
  }
  tu_assert_same_bits("the decoded state", dec.s.data, s.st.s.data, dec.bytes);
  lu_state_free(&dec);
  gt_seq_free(&s);
}
END_TEST

/* Calls carrying the state equal the one call over all n tokens: the first 3n/4 tokens as one
 * prefill (even loop index; prefill 150 of 200) or in pieces of random sizes 1 .. 70 (odd), then
 * n/4 decode steps, each also against the reference. */
START_TEST(gated_pieces_then_decode) {
  const gp_case *c = &gp_cases[_i / 2];
  const int random = _i % 2;
  gt_seq s;
  gt_seq_make(&s, c, gp_tokens(), (random ? 22000 : 21000) + (uint64_t)(_i / 2));
  tu_rng rng = tu_rng_of(22500 + (uint64_t)(_i / 2));
  const size_t a = s.n * 3 / 4;
  lu_state st;
  lu_state_make(&st, &s.d);
  size_t t = 0, pieces = 0;
  while (t < s.n) {
    size_t len = 1;
    if (t < a) {
      len = random ? 1 + (size_t)(tu_rng_next(&rng) % 70) : a;
      if (len > a - t) len = a - t;
    }
    tu_tensor o;
    gt_seq_piece(&s, c, t, len, &st.s, &o);
    const char *what = t >= a ? "decode after the prefill" : random ? "a piece" : "the prefill";
    char buf[96];
    snprintf(buf, sizeof buf, "%s vs one call", what);
    gt_compare("gated.o", buf, &o, s.got + t * s.hd, &s.ro, t * s.hd, s.n, c->d, TOL_PROPERTY_FACTOR);
    snprintf(buf, sizeof buf, "%s vs reference", what);
    gt_compare("gated.o", buf, &o, s.ro.o + t * s.hd, &s.ro, t * s.hd, s.n, c->d, 1.0);
    tu_tensor_free(&o);
    t += len;
    ++pieces;
  }
  if (random) ck_assert_uint_gt(pieces, 2);
  gt_seq_check_state(&s, &st.s, random ? "state after pieces" : "state after prefill + decode");
  lu_state_free(&st);
  gt_seq_free(&s);
}
END_TEST

/* Per-feature gates whose m entries are equal equal the scalar gate (outputs and states), with
 * and without beta, an incoming state, for chunks default, 1, 7 and 64. */
START_TEST(gated_feature_equal_is_scalar) {
  static const size_t chunks[] = {0, 1, 7, 64};
  const size_t n = tu_small() ? 70 : 130, dd = 16, dv = 12, prefix = 20;
  const int beta = _i % 2, elu = (_i / 2) % 2;
  const size_t chunk = chunks[_i / 4];
  tu_rng rng = tu_rng_of(23000 + (uint64_t)_i);
  attn_linear_desc ds, df;
  const attn_feature_map fm = elu ? ATTN_FEATURE_ELU1 : ATTN_FEATURE_IDENTITY;
  gt_desc(&ds, n, n, 2, 2, 4, 4, dd, dv, fm, elu, ATTN_GATE_SCALAR, beta, chunk);
  gt_desc(&df, n, n, 2, 2, 4, 4, dd, dv, fm, elu, ATTN_GATE_FEATURE, beta, chunk);
  const gt_gatespec spec = {.kind = ATTN_GATE_SCALAR, .beta = beta, .layout = GL_T, .lo = -1.0f, .hi = 0.0f};
  gt_inputs x;
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n + prefix, n + prefix, &ds, &spec);
  tu_tensor gf; /* the same gates broadcast over the m features */
  gt_tensor_alloc(&gf, GL_T, n + prefix, 4, dd);
  for (size_t t = 0; t < n + prefix; ++t)
    for (size_t h = 0; h < 4; ++h)
      for (size_t f = 0; f < dd; ++f) *tu_at(&gf, t, h, f) = *tu_at(&x.g, t, h, 0);
  gt_view vs[2], vf[2];
  vs[0] = gt_slice(&x, 0, prefix, 0, prefix);
  vs[1] = gt_slice(&x, prefix, n, prefix, n);
  for (int k = 0; k < 2; ++k) {
    vf[k] = vs[k];
    vf[k].g = tu_rows_view(&gf, k ? prefix : 0, k ? n : prefix);
  }
  gt_bind(&ds, &vs[1]);
  gt_bind(&df, &vf[1]);
  lu_state ss, sf;
  lu_state_make(&ss, &ds);
  lu_state_make(&sf, &df);
  attn_linear_desc ps = ds, pf = df;
  ps.shape.n_q = ps.shape.n_kv = pf.shape.n_q = pf.shape.n_kv = prefix;
  tu_tensor os, of;
  gt_call(&ps, &vs[0], TU_TOKEN_MAJOR, &ss.s, 0, &os);
  gt_call(&pf, &vf[0], TU_TOKEN_MAJOR, &sf.s, 0, &of);
  tu_tensor_free(&os);
  tu_tensor_free(&of);
  double *s0 = lu_state_to_double(&ss.s);
  gt_call(&ds, &vs[1], TU_TOKEN_MAJOR, &ss.s, 0, &os);
  gt_call(&df, &vf[1], TU_TOKEN_MAJOR, &sf.s, 0, &of);
  const size_t C = gt_chunk(&ds);
  const ref_gated_problem p = gt_problem(&ds, &vs[1], s0, C, C);
  gt_ref r, rs;
  gt_ref_output(&r, &p);
  gt_ref_state(&rs, &p);
  double *gs = malloc(sizeof(double) * r.count);
  ck_assert_ptr_nonnull(gs);
  tu_tensor_to_double(&os, gs);
  gt_compare("gated.o", "scalar gate vs reference", &os, r.o, &r, 0, n + prefix, dd, 1.0);
  gt_compare("gated.o", "equal per-feature gates vs scalar gate", &of, gs, &r, 0, n + prefix, dd, TOL_PROPERTY_FACTOR);
  double *sgs = lu_state_to_double(&ss.s);
  const tu_tensor sfv = lu_state_view(&sf.s);
  gt_compare("gated.state", "equal per-feature gates vs scalar gate: state", &sfv, sgs, &rs, 0, n + prefix, 0,
             TOL_PROPERTY_FACTOR);
  free(sgs);
  free(gs);
  free(s0);
  gt_ref_free(&r);
  gt_ref_free(&rs);
  tu_tensor_free(&os);
  tu_tensor_free(&of);
  tu_tensor_free(&gf);
  lu_state_free(&ss);
  lu_state_free(&sf);
  tu_gated_free(&x);
}
END_TEST

/* Log gates of exactly 0 (no decay, SCALAR and FEATURE, row stride 0 or not) with beta = 1
 * equal plain attn_linear (outputs and states), for identity and elu1. */
START_TEST(gated_zero_gates_are_plain_linear) {
  const int feature = _i % 2, elu = (_i / 2) % 2, row0 = (_i / 4) % 2;
  const size_t n = 97, dd = 8, dv = 8;
  tu_rng rng = tu_rng_of(24000 + (uint64_t)_i);
  attn_linear_desc dg, dl;
  const attn_feature_map fm = elu ? ATTN_FEATURE_ELU1 : ATTN_FEATURE_IDENTITY;
  gt_desc(&dg, n, n, 4, 2, 2, 0, dd, dv, fm, elu, feature ? ATTN_GATE_FEATURE : ATTN_GATE_SCALAR, 1, 7);
  gt_desc(&dl, n, n, 4, 2, 2, 0, dd, dv, fm, elu, ATTN_GATE_NONE, 0, 7);
  const gt_gatespec spec = {.kind = dg.gate, .beta = 1, .layout = row0 ? GL_R0 : GL_T, .fill = GF_CONST, .lo = 0.0f};
  gt_inputs x;
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &dg, &spec);
  for (size_t t = 0; t < n; ++t)
    for (size_t h = 0; h < 4; ++h) *tu_at(&x.b, t, h, 0) = 1.0f;
  tu_gated_snapshot(&x);
  const gt_view v = gt_all(&x);
  gt_view vl = v; /* no gate, no beta: attn_linear's descriptor keeps its defaults for them */
  memset(&vl.g, 0, sizeof vl.g);
  memset(&vl.b, 0, sizeof vl.b);
  gt_bind(&dg, &v);
  gt_bind(&dl, &vl);
  lu_state sg, sl;
  lu_state_make(&sg, &dg);
  lu_state_make(&sl, &dl);
  tu_tensor og, ol;
  gt_call(&dg, &v, TU_TOKEN_MAJOR, &sg.s, 0, &og);
  attn_linear_desc dd2 = dl;
  tu_tensor_alloc(&ol, TU_TOKEN_MAJOR, n, 4, dv, 1);
  dd2.shape.o = ol.l;
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&dd2, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_linear(&dd2, v.q.data, v.k.data, v.v.data, ol.data, &sl.s, w, ws), ATTN_OK);
  tu_free(w);
  const ref_gated_problem p = gt_problem(&dg, &v, NULL, 7, 7);
  gt_ref r, rs;
  gt_ref_output(&r, &p);
  gt_ref_state(&rs, &p);
  /* the gated state has L = lcm(2, 2, 4) = 4 heads, the plain one lcm(2, 2) = 2: gated state head
   * s holds key and value head s / 2, as plain state head s / 2 does */
  ck_assert_uint_eq(sg.s.heads, 4);
  ck_assert_uint_eq(sl.s.heads, 2);
  const size_t hrow = sl.s.m * sl.s.ld;
  double *gl = malloc(sizeof(double) * r.count), *sls = malloc(sizeof(double) * 4 * hrow);
  ck_assert(gl && sls);
  for (size_t h = 0; h < 4; ++h)
    for (size_t e = 0; e < hrow; ++e) sls[h * hrow + e] = (double)sl.s.data[(h / 2) * hrow + e];
  tu_tensor_to_double(&ol, gl);
  gt_compare("gated.o", "zero gates vs reference", &og, r.o, &r, 0, n, dd, 1.0);
  gt_compare("gated.o", "zero gates vs attn_linear", &og, gl, &r, 0, n, dd, TOL_PROPERTY_FACTOR);
  const tu_tensor sgv = lu_state_view(&sg.s);
  gt_compare("gated.state", "zero gates vs attn_linear: state", &sgv, sls, &rs, 0, n, 0, TOL_PROPERTY_FACTOR);
  free(gl);
  free(sls);
  gt_ref_free(&r);
  gt_ref_free(&rs);
  tu_tensor_free(&og);
  tu_tensor_free(&ol);
  lu_state_free(&sg);
  lu_state_free(&sl);
  tu_gated_free(&x);
}
END_TEST

/* Mamba-2's layer: C and B (q and k) one head read by every state head. The scan by head groups
 * computes a chunk's intra scores once for such a run of heads (plan share_at) and copies them to
 * the others: every bit as a call whose q and k rows are repeated for each head, where each head
 * computes its own (chunks 0, 7, 64 and several chunks: the copies run; a scalar gate, none, beta;
 * elu+1 normalised and identity; a prefix then a second call continuing the state; 1 and 3
 * workers in check_parallel's thread hook are covered by the engine's tasks: heads in groups). */
START_TEST(gated_shared_qk_bit_exact) {
  static const size_t chunks[] = {0, 7, 64};
  const size_t n = tu_small() ? 90 : 150, H = 5, dd = 16, dv = 12, prefix = 23;
  const size_t chunk = chunks[_i % 3];
  const int elu = (_i / 3) % 2, gated = _i / 6 != 1, beta = _i / 6 == 2;
  tu_rng rng = tu_rng_of(24000 + (uint64_t)_i);
  const attn_feature_map fm = elu ? ATTN_FEATURE_ELU1 : ATTN_FEATURE_IDENTITY;
  const attn_gate_kind gk = gated ? ATTN_GATE_SCALAR : ATTN_GATE_NONE;
  attn_linear_desc ds, dr; /* shared q and k, and repeated */
  gt_desc(&ds, n, n, 1, 1, H, H, dd, dv, fm, elu, gk, beta, chunk);
  gt_desc(&dr, n, n, H, H, H, H, dd, dv, fm, elu, gk, beta, chunk);
  const gt_gatespec spec = {.kind = gk, .beta = beta, .layout = GL_T, .lo = -1.0f, .hi = 0.0f};
  gt_inputs x;
  gt_inputs_make(&x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, n, n, &ds, &spec);
  tu_tensor qr, kr; /* q and k repeated for every head */
  tu_tensor_alloc(&qr, TU_TOKEN_MAJOR, n, H, dd, 0);
  tu_tensor_alloc(&kr, TU_TOKEN_MAJOR, n, H, dd, 0);
  for (size_t t = 0; t < n; ++t)
    for (size_t h = 0; h < H; ++h)
      for (size_t f = 0; f < dd; ++f)
        *tu_at(&qr, t, h, f) = *tu_at(&x.x.q, t, 0, f), *tu_at(&kr, t, h, f) = *tu_at(&x.x.k, t, 0, f);
  lu_state ss, sr;
  lu_state_make(&ss, &ds);
  lu_state_make(&sr, &dr);
  for (int part = 0; part < 2; ++part) { /* the prefix, then the rest continuing the state */
    const size_t t0 = part ? prefix : 0, len = part ? n - prefix : prefix;
    gt_view vs = gt_slice(&x, t0, len, t0, len), vr = vs;
    vr.q = tu_rows_view(&qr, t0, len), vr.k = tu_rows_view(&kr, t0, len);
    attn_linear_desc a = ds, b = dr;
    a.shape.n_q = a.shape.n_kv = b.shape.n_q = b.shape.n_kv = len;
    gt_bind(&a, &vs);
    gt_bind(&b, &vr);
    tu_tensor os, orr;
    gt_call(&a, &vs, TU_TOKEN_MAJOR, &ss.s, 0, &os);
    gt_call(&b, &vr, TU_TOKEN_MAJOR, &sr.s, 0, &orr);
    for (size_t t = 0; t < len; ++t)
      for (size_t h = 0; h < H; ++h)
        ck_assert_msg(!memcmp(tu_at(&os, t, h, 0), tu_at(&orr, t, h, 0), dv * sizeof(float)),
                      "chunk %zu elu %d gate %d beta %d part %d: row %zu head %zu differs", chunk, elu, gated, beta,
                      part, t, h);
    tu_tensor_free(&os);
    tu_tensor_free(&orr);
  }
  ck_assert_uint_eq(lu_state_floats(&ss.s), lu_state_floats(&sr.s));
  ck_assert_msg(!memcmp(ss.s.data, sr.s.data, lu_state_floats(&ss.s) * sizeof(float)), "states differ");
  lu_state_free(&ss);
  lu_state_free(&sr);
  tu_tensor_free(&qr);
  tu_tensor_free(&kr);
  tu_gated_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row mutates one argument of a valid gated causal call with a state; the call */
/* answers the row's status (and, for descriptor faults, so does every size query), and neither */
/* o nor the state (struct and data) nor any input is written.                                   */
/* ------------------------------------------------------------------------------------------ */
enum { BNQ = 5, BNKV = 7, BHQ = 4, BHK = 2, BD = 8, BDV = 6 };

/* The gated call's arguments the rows' edits change, and the objects they name: the descriptor,
 * the arguments, the log gates. */
typedef struct gb_args {
  const float *g, *beta;
  float *o;
  attn_linear_state *s;
} gb_args;
enum { OB_D, OB_ARG, OB_GATE, OB_N };
enum { GB_GATED, GB_UNGATED /* attn_linear, not attn_linear_gated */, GB_STATE_H_G2 /* a state made with h_g 2 */ };

typedef struct gb_case {
  const char *name;
  attn_status expect;
  int desc_level; /* workspace_size, state_size, feature_size and chunk_size answer the same */
  int call;       /* GB_GATED, GB_UNGATED or GB_STATE_H_G2 */
  tu_edit edit[TU_EDITS];
  int feature;      /* 1: a FEATURE gate */
  lu_bad_value bad; /* in the last feature with feature (0: none) */
} gb_case;

#define GB(s, lvl)  .expect = (s), .desc_level = (lvl), .call = GB_GATED
#define GB_BAD(v)   .expect = ATTN_E_BAD_GATE, .desc_level = 0, .bad = (v)
#define D_I(m, val) TU_SET_I(OB_D, attn_linear_desc, m, val)
#define D_Z(m, val) TU_SET_Z(OB_D, attn_linear_desc, m, val)
#define ARG_NUL(m)  TU_NUL(OB_ARG, gb_args, m)
#define NOSTATE     ARG_NUL(s)
static const gb_case gb_cases[] = {
    {"log_gate NULL (SCALAR)", GB(ATTN_E_NULL_POINTER, 0), {ARG_NUL(g)}},
    {"log_gate NULL (FEATURE)", GB(ATTN_E_NULL_POINTER, 0), {ARG_NUL(g)}, .feature = 1},
    {"beta NULL with desc.beta", GB(ATTN_E_NULL_POINTER, 0), {ARG_NUL(beta)}},
    LU_BAD_LOG_GATE_ROWS(GB_BAD),
    {"a per-feature log gate +0.5 (last feature)", GB_BAD(LU_GATE_HALF), .feature = 1},
    {"a per-feature log gate NaN (last feature)", GB_BAD(LU_GATE_NAN), .feature = 1},
    {"a beta 0", GB_BAD(LU_BETA_0)},
    {"a beta NaN", GB_BAD(LU_BETA_NAN)},
    {"a beta -0.5", GB_BAD(LU_BETA_NEG)},
    {"a beta +inf", GB_BAD(LU_BETA_INF)},
    {"gate kind 3", GB(ATTN_E_BAD_GATE, 1), {D_I(gate, 3)}},
    {"gate kind -1", GB(ATTN_E_BAD_GATE, 1), {D_I(gate, -1)}},
    {"desc.beta 2", GB(ATTN_E_BAD_GATE, 1), {D_I(beta, 2)}},
    {"desc.beta -1", GB(ATTN_E_BAD_GATE, 1), {D_I(beta, -1)}},
    /* a bidirectional call takes no state */
    {"a gate with the full mask",
     GB(ATTN_E_BAD_WINDOW, 1),
     {D_Z(mask.left, ATTN_UNBOUNDED), D_Z(mask.right, ATTN_UNBOUNDED), NOSTATE}},
    /* the state was made for elu1 */
    {"a gate with the exp map", GB(ATTN_E_BAD_FEATURE_MAP, 1), {D_I(feature_map, ATTN_FEATURE_EXP), NOSTATE}},
    {"h_g 3 with H 4", GB(ATTN_E_BAD_HEADS, 1), {D_Z(h_g, 3), NOSTATE}},
    {"FEATURE gate head stride m - 1", GB(ATTN_E_BAD_STRIDE, 1), {D_Z(gate_layout.head_stride, BD - 1)}, .feature = 1},
    {"FEATURE gate row stride m - 1 (not 0)",
     GB(ATTN_E_BAD_STRIDE, 1),
     {D_Z(gate_layout.row_stride, BD - 1)},
     .feature = 1},
    {"a state made with another h_g (L 2, not 4)", .expect = ATTN_E_STATE_MISMATCH, .call = GB_STATE_H_G2},
    {"attn_linear with a gate", .expect = ATTN_E_BAD_ARGUMENT, .call = GB_UNGATED, .edit = {D_I(beta, 0)}},
    {"attn_linear with beta", .expect = ATTN_E_BAD_ARGUMENT, .call = GB_UNGATED, .edit = {D_I(gate, ATTN_GATE_NONE)}},
    {"o inside the log gates", GB(ATTN_E_ALIASING, 0), {TU_PTR(OB_ARG, gb_args, o, OB_GATE, 3)}},
};
#define GB_NCASES (sizeof gb_cases / sizeof gb_cases[0])

START_TEST(gated_rejects_bad_input) {
  const gb_case *c = &gb_cases[_i];
  tu_rng rng = tu_rng_of(26000 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, BNQ, BNKV, BHQ, BHK, BHK, BD, BDV);
  lu_gate_inputs g;
  lu_gate_inputs_make(&g, &rng, BNKV, BHQ, BD, 0.1f, 2.0f);
  attn_linear_desc d;
  gt_desc(&d, BNQ, BNKV, BHQ, BHK, BHK, BHQ, BD, BDV, ATTN_FEATURE_ELU1, 1, ATTN_GATE_SCALAR, 1, 0);
  d.gate_layout.row_stride = BHQ;
  d.gate_layout.head_stride = 1;
  d.beta_layout.row_stride = BHQ;
  d.beta_layout.head_stride = 1;
  lu_bad_call b;
  lu_bad_call_make(&b, &d, &rng, BNQ, BHQ, BDV);
  gb_args a = {g.lg, g.beta, b.o.data, &b.st.s};
  if (c->feature) d.gate = ATTN_GATE_FEATURE;
  lu_gate_inputs_fault(&g, c->feature, c->bad, &d.gate_layout);
  tu_edits_apply(c->edit, TU_EDITS, (void *[]){&d, &a, g.lg}, OB_N);
  if (c->call == GB_STATE_H_G2) {
    attn_linear_desc ad = d;
    ad.h_g = 2; /* L = lcm(2, 2, 2) = 2 state heads instead of 4 */
    lu_state_make_filled(&b.alt, &ad, &rng);
    ck_assert_uint_eq(b.alt.s.heads, 2);
    a.s = &b.alt.s;
  }
  /* snapshots: the state (struct and data) and the gate inputs */
  lu_bad_call_take(&b, a.s);
  lu_gate_inputs_take(&g);
  const attn_status got =
      c->call == GB_UNGATED ? attn_linear(&d, x.q.data, x.k.data, x.v.data, a.o, a.s, b.ws, b.need)
                            : attn_linear_gated(&d, x.q.data, x.k.data, x.v.data, a.g, a.beta, a.o, a.s, b.ws, b.need);
  ck_assert_msg(got == c->expect, "%s: got %s (%d), want %s (%d)", c->name, attn_status_string(got), (int)got,
                attn_status_string(c->expect), (int)c->expect);
  if (c->desc_level) lu_assert_queries(&d, c->expect);
  lu_bad_call_finish(&b, &x);
  lu_gate_inputs_check(&g);
  lu_gate_inputs_free(&g);
  tu_qkv_free(&x);
}
END_TEST

/* attn_retnet_log_decays: heads 0 and a NULL output; nothing written on error. */
START_TEST(gated_retnet_decays_bad_input) {
  float lg[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  ck_assert_int_eq(attn_retnet_log_decays(0, lg), ATTN_E_ZERO_SIZE);
  ck_assert(lg[0] == 1.0f && lg[1] == 2.0f && lg[2] == 3.0f && lg[3] == 4.0f);
  ck_assert_int_eq(attn_retnet_log_decays(4, NULL), ATTN_E_NULL_POINTER);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"properties", gated_chunkwise_matches_recurrent, (int)GP_NCASES},
    {"properties", gated_pieces_then_decode, (int)(2 * GP_NCASES)},
    {"properties", gated_decode_is_the_recurrence, (int)GP_NCASES}, {"properties", gated_feature_equal_is_scalar, 16},
    {"properties", gated_zero_gates_are_plain_linear, 8},
    {"properties", gated_shared_qk_bit_exact, 9},
  {"bad_input", gated_rejects_bad_input, (int)GB_NCASES}, {"bad_input", gated_retnet_decays_bad_input, 1})
/* clang-format on */
