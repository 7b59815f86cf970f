/* Shared helpers of the linear attention suites and fuzzers: see linear_util.h. */
#include "linear_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tolerances.h"

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

size_t lu_state_ld_aligned(size_t dv) { return (dv + 2 + 15) / 16 * 16; }

attn_linear_state lu_state_compact(const attn_linear_state *s, float *out) {
  attn_linear_state c = *s;
  c.ld = s->dv + 2;
  c.data = out;
  for (size_t r = 0; r < s->heads * s->m; ++r) memcpy(out + r * c.ld, s->data + r * s->ld, c.ld * sizeof(float));
  return c;
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

void lu_bad_call_make(lu_bad_call *b, const attn_linear_desc *d, tu_rng *r, size_t n_q, size_t heads, size_t dv) {
  memset(b, 0, sizeof *b);
  lu_state_make_filled(&b->st, d, r);
  ck_assert_int_eq(attn_linear_workspace_size(d, &b->need), ATTN_OK);
  tu_tensor_alloc(&b->o, TU_TOKEN_MAJOR, n_q, heads, dv, 1);
  b->ws = tu_alloc(b->need + 4096, 0);
}

void lu_bad_call_take(lu_bad_call *b, const attn_linear_state *sp) {
  const lu_state *owner = sp == &b->alt.s ? &b->alt : &b->st;
  lu_rejected_take(&b->untouched, sp, owner->mem, owner->bytes);
}

void lu_bad_call_finish(lu_bad_call *b, const tu_qkv *x) {
  lu_rejected_check(&b->untouched, &b->o, b->ws, x);
  if (b->alt.mem) lu_state_free(&b->alt);
  lu_state_free(&b->st);
  tu_free(b->ws);
  tu_tensor_free(&b->o);
}

/* ------------------------------------------------------------------------------------------ */
/* The plain linear suites (check_linear*.c): descriptors, calls, reference comparisons         */
/* ------------------------------------------------------------------------------------------ */
size_t lu_max3(size_t a, size_t b, size_t c) {
  const size_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}

int lu_xmap(attn_feature_map fm) {
  return fm == ATTN_FEATURE_EXP || fm == ATTN_FEATURE_FAVOR || fm == ATTN_FEATURE_DSOFTMAX;
}

void lu_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t dd, size_t dv,
             attn_feature_map fm, int causal, int normalize, size_t chunk) {
  ck_assert_int_eq(attn_linear_desc_init(d, n_q, n_kv, h_q, h_k, dd, dv, fm), ATTN_OK);
  ck_assert_int_eq(attn_shape_init(&d->shape, n_q, n_kv, h_q, h_k, h_v, dd, dv), ATTN_OK);
  d->mask = causal ? attn_mask_causal() : attn_mask_full();
  d->normalize = normalize;
  d->chunk = chunk;
}

float *lu_set_favor(attn_linear_desc *d, int wsrc, uint64_t seed, tu_rng *rng) {
  if (d->feature_map != ATTN_FEATURE_FAVOR) return NULL;
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

/* lu_favor_w's matrices, cached per (source, seed, m, d) for the process. */
typedef struct lu_wentry {
  attn_favor_source src;
  uint64_t seed;
  size_t m, d;
  float *w;
} lu_wentry;
enum { LU_WCACHE = 16 };
static lu_wentry lu_wcache[LU_WCACHE];
static size_t lu_wcount;

const float *lu_favor_w(const attn_linear_desc *d) {
  if (d->feature_map != ATTN_FEATURE_FAVOR) return NULL;
  if (d->favor_source == ATTN_FAVOR_CALLER) return d->favor_w;
  /* W does not depend on the mask: asked of the causal descriptor, whose workspace is the
   * chunkwise engine's (linear_window_xmap_workspace asks a windowed one) */
  attn_linear_desc causal = *d;
  causal.mask = attn_mask_causal();
  d = &causal;
  const size_t m = lu_feature_size(d), dd = d->shape.d;
  for (size_t i = 0; i < LU_WCACHE; ++i) {
    const lu_wentry *e = &lu_wcache[i];
    if (e->w && e->src == d->favor_source && e->seed == d->favor_seed && e->m == m && e->d == dd) return e->w;
  }
  lu_wentry *e = &lu_wcache[lu_wcount++ % LU_WCACHE];
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
static void lu_state_rebase(double *s, double *scale, double *arg, size_t rows, size_t dv, const float *target) {
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

void lu_call_plain(const attn_linear_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                   tu_layout_kind okind, attn_linear_state *state, size_t misalign, tu_tensor *o) {
  lu_call(desc, q, k, v, NULL, NULL, okind, state, misalign, o);
}

ref_linear_problem lu_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                              const double *s0) {
  return lu_ref_problem(d, q, k, v, s0, lu_feature_size(d), lu_favor_w(d));
}

/* Report family of a comparison (ATTN_TEST_REPORT): one per map group, outputs and states. */
static const char *lu_family(attn_feature_map fm, int state) {
  switch (fm) {
    case ATTN_FEATURE_EXP:
      return state ? "linear.exp.state" : "linear.exp.o";
    case ATTN_FEATURE_FAVOR:
      return state ? "linear.favor.state" : "linear.favor.o";
    case ATTN_FEATURE_DSOFTMAX:
      return state ? "linear.dsoftmax.state" : "linear.dsoftmax.o";
    default:
      return state ? "linear.state" : "linear.o";
  }
}

double *lu_tols(attn_feature_map fm, int state, size_t n_tokens, size_t m, const double *scale, const double *arg,
                size_t count, double factor) {
  double *t = malloc(sizeof(double) * (count ? count : 1));
  ck_assert_ptr_nonnull(t);
  for (size_t e = 0; e < count; ++e) {
    double tol;
    if (!lu_xmap(fm))
      tol = state ? tol_linear_state(n_tokens) : tol_linear_o(n_tokens, m);
    else
      tol = state ? tol_linear_xp_state(n_tokens, scale[e], arg[e]) : tol_linear_xp_o(n_tokens, m, scale[e], arg[e]);
    t[e] = factor * tol;
  }
  return t;
}

void lu_compare(const char *what, attn_feature_map fm, size_t n_tokens, size_t m, const tu_tensor *got,
                const double *expect, const double *scale, const double *arg, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *tol = lu_tols(fm, 0, n_tokens, m, scale, arg, count, factor);
  tu_compare(lu_family(fm, 0), what, got, expect, scale, tol);
  free(tol);
}

void lu_ref_output(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                   const double *s0, lu_ref *r) {
  const ref_linear_problem p = lu_problem(d, q, k, v, s0);
  const size_t count = d->shape.n_q * lu_out_heads(d) * d->shape.dv;
  r->o = malloc(sizeof(double) * count);
  r->scale = malloc(sizeof(double) * count);
  r->arg = malloc(sizeof(double) * count);
  ck_assert(r->o && r->scale && r->arg);
  ref_linear_ex(&p, r->o, r->scale, r->arg);
}

void lu_ref_free(lu_ref *r) {
  free(r->o);
  free(r->scale);
  free(r->arg);
}

void lu_check_output(const char *what, const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                     const tu_tensor *v, const double *s0, size_t prefix, const tu_tensor *got) {
  lu_ref r;
  lu_ref_output(d, q, k, v, s0, &r);
  lu_compare(what, d->feature_map, prefix + d->shape.n_kv, lu_feature_size(d), got, r.o, r.scale, r.arg, 1.0);
  lu_ref_free(&r);
}

void lu_compare_state(const char *what, attn_feature_map fm, size_t n_tokens, const attn_linear_state *s,
                      double *expect, double *scale, double *arg, double factor) {
  const size_t count = lu_state_floats(s);
  if (fm == ATTN_FEATURE_FAVOR) lu_state_rebase(expect, scale, arg, s->heads * s->m, s->dv, s->data);
  double *tol = lu_tols(fm, 1, n_tokens, s->m, scale, arg, count, factor);
  const tu_tensor view = lu_state_view(s);
  tu_compare(lu_family(fm, 1), what, &view, expect, scale, tol);
  free(tol);
}

void lu_check_state(const char *what, const attn_linear_desc *d, const tu_tensor *k, const tu_tensor *v,
                    const double *s0, size_t prefix, const attn_linear_state *s) {
  const ref_linear_problem p = lu_problem(d, k, k, v, s0);
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
  lu_compare_state(what, d->feature_map, prefix + d->shape.n_kv, s, rs, sc, sa, 1.0);
  free(rs);
  free(sc);
  free(sa);
}

/* ------------------------------------------------------------------------------------------ */
/* Exponential maps under stress: designed features                                            */
/* ------------------------------------------------------------------------------------------ */
/* Orthonormal rows Q (d x d) by Gram-Schmidt on Gaussian rows. */
static void lu_xs_orthonormal(tu_rng *rng, double *Q, size_t d) {
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

void lu_xs_favor(tu_rng *rng, attn_linear_desc *d, double *Q, float *w) {
  lu_xs_orthonormal(rng, Q, LU_XS_D);
  for (size_t e = 0; e < LU_XS_D * LU_XS_D; ++e) w[e] = (float)(100.0 * Q[e]);
  d->m = LU_XS_D;
  d->favor_source = ATTN_FAVOR_CALLER;
  d->favor_w = w;
}

/* The target features of one query (key 0) or key row; high: a key the pattern raises. */
static void lu_xs_target(tu_rng *rng, int pattern, int key, int high, double *T) {
  for (size_t f = 0; f < LU_XS_D; ++f) {
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

void lu_xs_fill(tu_rng *rng, tu_qkv *x, int pattern, const double *Q, float xs, const unsigned char *high) {
  for (int key = 0; key < 2; ++key)
    for (size_t j = 0; j < (key ? x->k.n : x->q.n); ++j) {
      double T[LU_XS_D], xp[LU_XS_D];
      lu_xs_target(rng, pattern, key, key && (high ? high[j] : j == 17 || j == 66 || j == 101), T);
      for (size_t t = 0; t < LU_XS_D; ++t) {
        xp[t] = T[t];
        if (Q) { /* x' = Q^T T / 100: W x' = T */
          xp[t] = 0.0;
          for (size_t f = 0; f < LU_XS_D; ++f) xp[t] += Q[f * LU_XS_D + t] * T[f] / 100.0;
        }
        *tu_at(key ? &x->k : &x->q, j, 0, t) = (float)(xp[t] / (double)xs);
      }
    }
  tu_qkv_snapshot(x);
}

void lu_poison_gate(lu_bad_value bad, float *lg, float *beta, size_t at) {
  static const float gates[] = {0.25f, 0.5f, 1e-30f, NAN, -INFINITY, INFINITY}, betas[] = {0.0f, -0.5f, NAN, INFINITY};
  ck_assert(bad > LU_BAD_NONE && bad <= LU_BETA_INF);
  if (bad < LU_BETA_0)
    lg[at] = gates[bad - LU_GATE_POS];
  else
    beta[at] = betas[bad - LU_BETA_0];
}

void lu_gate_inputs_make(lu_gate_inputs *g, tu_rng *r, size_t n, size_t h, size_t m, float beta_lo, float beta_hi) {
  g->gfloats = n * h * m;
  g->bfloats = n * h;
  g->feat = (attn_layout){h * m, m};
  g->lg = malloc(sizeof(float) * g->gfloats);
  g->beta = malloc(sizeof(float) * g->bfloats);
  g->lg0 = g->beta0 = NULL;
  ck_assert(g->lg && g->beta);
  for (size_t e = 0; e < g->gfloats; ++e) g->lg[e] = tu_rng_range(r, -3.0f, 0.0f);
  for (size_t e = 0; e < g->bfloats; ++e) g->beta[e] = tu_rng_range(r, beta_lo, beta_hi);
}

void lu_gate_inputs_fault(lu_gate_inputs *g, int feature, lu_bad_value bad, attn_layout *layout) {
  if (feature) *layout = g->feat;
  if (bad != LU_BAD_NONE) lu_poison_gate(bad, g->lg, g->beta, feature ? g->gfloats - 1 : g->bfloats - 1);
}

void lu_gate_inputs_take(lu_gate_inputs *g) {
  g->lg0 = malloc(sizeof(float) * g->gfloats);
  g->beta0 = malloc(sizeof(float) * g->bfloats);
  ck_assert(g->lg0 && g->beta0);
  memcpy(g->lg0, g->lg, sizeof(float) * g->gfloats);
  memcpy(g->beta0, g->beta, sizeof(float) * g->bfloats);
}

void lu_gate_inputs_check(const lu_gate_inputs *g) {
  tu_assert_same_bits("log gates after a rejected call", g->lg0, g->lg, sizeof(float) * g->gfloats);
  tu_assert_same_bits("beta after a rejected call", g->beta0, g->beta, sizeof(float) * g->bfloats);
}

void lu_gate_inputs_free(lu_gate_inputs *g) {
  free(g->lg);
  free(g->beta);
  free(g->lg0);
  free(g->beta0);
}
