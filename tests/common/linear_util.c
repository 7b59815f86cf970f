/* Shared helpers of the linear attention suites and fuzzers: see linear_util.h. */
#include "linear_util.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Heads and masks                                                                             */
/* ------------------------------------------------------------------------------------------ */
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

int lu_gated(const attn_linear_desc *d) { return d->gate != ATTN_GATE_NONE || d->beta; }

size_t lu_out_heads(const attn_linear_desc *d) {
  const size_t H = max_sz(d->shape.h_q, max_sz(d->shape.h_k, d->shape.h_v));
  return lu_gated(d) ? max_sz(H, d->h_g) : H;
}

size_t lu_gate_heads(const attn_linear_desc *d) { return d->h_g ? d->h_g : lu_out_heads(d); }

size_t lu_state_heads(const attn_linear_desc *d) {
  const size_t kv = ref_lcm(d->shape.h_k, d->shape.h_v);
  return lu_gated(d) ? ref_lcm(kv, lu_gate_heads(d)) : kv;
}

int lu_windowed(attn_mask m) {
  const int full = m.left == ATTN_UNBOUNDED && m.right == ATTN_UNBOUNDED && m.chunk == 0;
  return !full && !attn_mask_is_causal(m);
}

size_t lu_feature_size(const attn_linear_desc *d) {
  size_t m = 0;
  ck_assert_int_eq(attn_linear_feature_size(d, &m), ATTN_OK);
  return m;
}

/* ------------------------------------------------------------------------------------------ */
/* States                                                                                      */
/* ------------------------------------------------------------------------------------------ */
size_t lu_state_floats(const attn_linear_state *s) { return s->heads * s->m * s->ld; }

/* Bind st to fresh guarded memory of exactly the reported size, which must be L * m * (dv + 2)
 * floats; the struct is scribbled over first, so that every field must come from the init. */
static void state_bind(lu_state *st, const attn_linear_desc *d) {
  const size_t L = lu_state_heads(d), m = lu_feature_size(d);
  ck_assert_int_eq(attn_linear_state_size(d, &st->bytes), ATTN_OK);
  ck_assert_uint_eq(st->bytes, sizeof(float) * L * m * (d->shape.dv + 2));
  st->mem = tu_alloc(st->bytes, 0);
  memset(&st->s, 0xAB, sizeof st->s);
  ck_assert_int_eq(attn_linear_state_init(&st->s, d, st->mem, st->bytes), ATTN_OK);
  ck_assert_uint_eq(st->s.heads, L);
  ck_assert_uint_eq(st->s.m, m);
  ck_assert_uint_eq(st->s.dv, d->shape.dv);
  ck_assert_uint_eq(st->s.ld, d->shape.dv + 2);
  ck_assert_int_eq(st->s.feature_map, d->feature_map);
  ck_assert_int_eq(st->s.normalize, d->normalize);
  ck_assert_uint_eq(st->s.tokens, 0);
  ck_assert_ptr_eq(st->s.data, st->mem);
}

void lu_state_make(lu_state *st, const attn_linear_desc *d) {
  state_bind(st, d);
  for (size_t e = 0; e < lu_state_floats(&st->s); ++e) ck_assert(st->s.data[e] == 0.0f);
  tu_assert_guards("state init", st->mem);
}

void lu_state_make_filled(lu_state *st, const attn_linear_desc *d, tu_rng *r) {
  state_bind(st, d);
  for (size_t e = 0; e < st->bytes / sizeof(float); ++e) st->s.data[e] = tu_rng_range(r, 0.0f, 1.0f);
  st->s.tokens = 11;
}

void lu_state_free(lu_state *st) {
  tu_assert_guards("state memory", st->mem);
  tu_free(st->mem);
  st->mem = NULL;
}

double *lu_state_to_double(const attn_linear_state *s) {
  const size_t count = lu_state_floats(s);
  double *out = malloc(sizeof(double) * (count ? count : 1));
  ck_assert_ptr_nonnull(out);
  for (size_t e = 0; e < count; ++e) out[e] = (double)s->data[e];
  return out;
}

tu_tensor lu_state_view(const attn_linear_state *s) {
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

/* ------------------------------------------------------------------------------------------ */
/* Calls                                                                                       */
/* ------------------------------------------------------------------------------------------ */
static const float *data_of(const tu_tensor *t) { return t ? t->data : NULL; }

void lu_call(const attn_linear_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
             const tu_tensor *g, const tu_tensor *b, tu_layout_kind okind, attn_linear_state *state, size_t misalign,
             tu_tensor *o) {
  attn_linear_desc dd = *desc;
  tu_tensor_alloc(o, okind, dd.shape.n_q, lu_out_heads(&dd), dd.shape.dv, 1);
  tu_shape_layouts(&dd.shape, q, k, v, o);
  if (data_of(g)) dd.gate_layout = g->l;
  if (data_of(b)) dd.beta_layout = b->l;
  size_t ws = 0;
  ck_assert_int_eq(attn_linear_workspace_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  const attn_status st =
      lu_gated(&dd) ? attn_linear_gated(&dd, q->data, k->data, v->data, data_of(g), data_of(b), o->data, state, w, ws)
                    : attn_linear(&dd, q->data, k->data, v->data, o->data, state, w, ws);
  ck_assert_msg(st == ATTN_OK, "%s: %s", lu_gated(&dd) ? "attn_linear_gated" : "attn_linear", attn_status_string(st));
  tu_assert_guards("linear workspace", w);
  tu_free(w);
  tu_assert_output_clean("linear o", o);
  if (state) tu_assert_guards("linear state memory", state->data);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference problems                                                                          */
/* ------------------------------------------------------------------------------------------ */
/* The fields both reference problems share: sizes, map, mode, eps, scale, inputs and layouts. */
#define LU_PROBLEM_COMMON(d, q, k, v)                                                                                  \
  .n_q = (d)->shape.n_q, .n_kv = (d)->shape.n_kv, .h_q = (d)->shape.h_q, .h_k = (d)->shape.h_k, .h_v = (d)->shape.h_v, \
  .d = (d)->shape.d, .dv = (d)->shape.dv, .feature_map = tu_ref_map((d)->feature_map), .normalize = (d)->normalize,    \
  .eps = (double)(d)->eps, .scale = (double)(d)->scale, .q = (q)->data, .k = (k)->data, .v = (v)->data,                \
  .lq = tu_ref_layout(q), .lk = tu_ref_layout(k), .lv = tu_ref_layout(v)

ref_linear_problem lu_ref_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                                  const double *s0, size_t m, const float *favor_w) {
  const ref_linear_problem p = {LU_PROBLEM_COMMON(d, q, k, v),
                                .causal = attn_mask_is_causal(d->mask),
                                .windowed = lu_windowed(d->mask),
                                .left = d->mask.left,
                                .right = d->mask.right,
                                .chunk = d->mask.chunk,
                                .s0 = s0,
                                .m = m,
                                .favor_w = favor_w};
  return p;
}

ref_gated_problem lu_gated_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                                   const tu_tensor *v, const tu_tensor *g, const tu_tensor *b, const double *s0,
                                   size_t chunk, size_t step_chunk) {
  const ref_layout none = {0, 0};
  const ref_gated_problem p = {LU_PROBLEM_COMMON(d, q, k, v),
                               .h_g = d->h_g,
                               .gate = d->gate == ATTN_GATE_FEATURE  ? REF_GATE_FEATURE
                                       : d->gate == ATTN_GATE_SCALAR ? REF_GATE_SCALAR
                                                                     : REF_GATE_NONE,
                               .log_gate = d->gate != ATTN_GATE_NONE ? data_of(g) : NULL,
                               .lg = data_of(g) ? tu_ref_layout(g) : none,
                               .beta = d->beta ? data_of(b) : NULL,
                               .lb = data_of(b) ? tu_ref_layout(b) : none,
                               .s0 = s0,
                               .chunk = chunk,
                               .step_chunk = step_chunk};
  return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Size queries                                                                                */
/* ------------------------------------------------------------------------------------------ */
void lu_assert_queries(const attn_linear_desc *d, attn_status want) {
  const size_t untouched = 12345;
  size_t out[4] = {untouched, untouched, untouched, untouched};
  const attn_status got[4] = {attn_linear_workspace_size(d, &out[0]), attn_linear_state_size(d, &out[1]),
                              attn_linear_feature_size(d, &out[2]), attn_linear_chunk_size(d, &out[3])};
  static const char *names[4] = {"workspace_size", "state_size", "feature_size", "chunk_size"};
  for (int i = 0; i < 4; ++i) {
    ck_assert_msg(got[i] == want, "attn_linear_%s: %s, expected %s", names[i], attn_status_string(got[i]),
                  attn_status_string(want));
    if (want != ATTN_OK) ck_assert_msg(out[i] == untouched, "attn_linear_%s wrote its output on error", names[i]);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Rejected calls                                                                              */
/* ------------------------------------------------------------------------------------------ */
void lu_rejected_take(lu_rejected *r, const attn_linear_state *sp, const void *mem, size_t bytes) {
  memset(r, 0, sizeof *r);
  r->sp = sp;
  if (!sp) return;
  r->before = *sp;
  r->mem = mem;
  r->bytes = bytes;
  r->copy = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(r->copy);
  memcpy(r->copy, mem, bytes);
}

void lu_rejected_check(lu_rejected *r, const tu_tensor *o, const void *ws, const tu_qkv *x) {
  const float sentinel = tu_sentinel();
  for (size_t e = 0; e < o->span; ++e)
    ck_assert_msg(memcmp(&o->data[e], &sentinel, sizeof sentinel) == 0, "o[%zu] written by a rejected call", e);
  tu_assert_guards("o", o->owner);
  tu_assert_guards("workspace", ws);
  tu_qkv_assert_unchanged(x);
  if (r->sp) {
    tu_assert_same_bits("state struct after a rejected call", &r->before, r->sp, sizeof r->before);
    tu_assert_same_bits("state data after a rejected call", r->copy, r->mem, r->bytes);
    tu_assert_guards("state memory", r->mem);
  }
  free(r->copy);
  r->copy = NULL;
}
