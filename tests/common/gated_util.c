/* Shared helpers of the gated linear attention suites: see gated_util.h. */
#include "gated_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* Heads, descriptors, tensors                                                                  */
/* ------------------------------------------------------------------------------------------ */
void gt_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t h_g, size_t dd,
             size_t dv, attn_feature_map fm, int normalize, attn_gate_kind gate, int beta, size_t chunk) {
  ck_assert_int_eq(attn_linear_desc_init(d, n_q, n_kv, h_q, h_k, dd, dv, fm), ATTN_OK);
  ck_assert_int_eq(attn_shape_init(&d->shape, n_q, n_kv, h_q, h_k, h_v, dd, dv), ATTN_OK);
  d->mask = attn_mask_causal();
  d->normalize = normalize;
  d->chunk = chunk;
  d->gate = gate;
  d->h_g = h_g;
  d->beta = beta;
}

static attn_layout gt_layout(gt_glayout kind, size_t n, size_t h, size_t w) {
  /* token- and head-major are tu_layout's; the padded and row-stride-0 ones the gates' own */
  if (kind == GL_HM) return tu_layout(TU_HEAD_MAJOR, n, h, w);
  if (kind == GL_P) return (attn_layout){.row_stride = h * (w + 3) + 5, .head_stride = w + 3};
  if (kind == GL_R0 || kind == GL_R0P) return (attn_layout){.row_stride = 0, .head_stride = kind == GL_R0 ? w : w + 2};
  return tu_layout(TU_TOKEN_MAJOR, n, h, w);
}

/* An input tensor of exactly its span (no guard: ASan sees an over-read), gaps set to the
 * sentinel NaN: a library that reads a gap (or a row past n_kv) fails. */
void gt_tensor_alloc(tu_tensor *t, gt_glayout kind, size_t n, size_t h, size_t w) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->h = h;
  t->w = w;
  t->l = gt_layout(kind, n, h, w);
  t->span = tu_span(n, h, w, t->l);
  t->owner = malloc(sizeof(float) * t->span);
  ck_assert_ptr_nonnull(t->owner);
  tu_fill_sentinel(t->owner, t->span);
  t->data = t->owner;
}

static void gt_fill_gates(tu_tensor *g, const gt_gatespec *s, tu_rng *r) {
  for (size_t t = 0; t < g->n; ++t)
    for (size_t h = 0; h < g->h; ++h)
      for (size_t f = 0; f < g->w; ++f) {
        float x = s->lo;
        switch (s->fill) {
          case GF_UNIFORM:
            x = tu_rng_range(r, s->lo, s->hi);
            break;
          case GF_CONST:
            break;
          case GF_SPLIT:
            x = f % 2 ? s->lo : 0.0f;
            break;
          case GF_MIXED:
            x = f % 2 ? s->lo : tu_rng_range(r, -0.05f, 0.0f);
            break;
        }
        *tu_at(g, t, h, f) = x;
      }
}

void gt_inputs_make(gt_inputs *in, tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv,
                    const attn_linear_desc *d, const gt_gatespec *s) {
  memset(in, 0, sizeof *in);
  const attn_shape *sh = &d->shape;
  tu_qkv_make(&in->x, kind, data, r, n_q, n_kv, sh->h_q, sh->h_k, sh->h_v, sh->d, sh->dv);
  const size_t hg = lu_gate_heads(d);
  if (s->kind != ATTN_GATE_NONE) {
    gt_tensor_alloc(&in->g, s->layout, n_kv, hg, s->kind == ATTN_GATE_FEATURE ? sh->d : 1);
    gt_fill_gates(&in->g, s, r);
  }
  if (s->beta) {
    const gt_glayout bl = s->layout == GL_P || s->layout == GL_HM ? s->layout : GL_T;
    gt_tensor_alloc(&in->b, bl, n_kv, hg, 1);
    tu_tensor_fill(&in->b, r, 0.1f, 2.0f);
  }
  tu_gated_snapshot(in);
}

static tu_tensor gt_rows(const tu_tensor *t, size_t first, size_t n) {
  if (!t->data) return *t;
  return tu_rows_view(t, first, n);
}

/* Queries [q0, q0 + nq), keys (and their gates and betas) [k0, k0 + nk). */
gt_view gt_slice(const gt_inputs *in, size_t q0, size_t nq, size_t k0, size_t nk) {
  gt_view v;
  v.q = tu_rows_view(&in->x.q, q0, nq);
  v.k = tu_rows_view(&in->x.k, k0, nk);
  v.v = tu_rows_view(&in->x.v, k0, nk);
  v.g = gt_rows(&in->g, k0, nk);
  v.b = gt_rows(&in->b, k0, nk);
  return v;
}

gt_view gt_all(const gt_inputs *in) { return gt_slice(in, 0, in->x.q.n, 0, in->x.k.n); }

/* Point the descriptor's layouts at the tensors (o's at its own default token-major layout). */
void gt_bind(attn_linear_desc *d, const gt_view *v) {
  d->shape.q = v->q.l;
  d->shape.k = v->k.l;
  d->shape.v = v->v.l;
  d->shape.o.row_stride = lu_out_heads(d) * d->shape.dv;
  d->shape.o.head_stride = d->shape.dv;
  if (v->g.data) d->gate_layout = v->g.l;
  if (v->b.data) d->beta_layout = v->b.l;
}

size_t gt_chunk(const attn_linear_desc *d) {
  size_t c = 0;
  ck_assert_int_eq(attn_linear_chunk_size(d, &c), ATTN_OK);
  ck_assert(c >= 1 && c <= ATTN_LINEAR_MAX_CHUNK);
  return c;
}

/* ------------------------------------------------------------------------------------------ */
/* Calls, reference, comparison                                                                */
/* ------------------------------------------------------------------------------------------ */
/* attn_linear_gated over a view (linear_util.h: o freshly allocated in layout okind, memory
 * checks); without a gate or beta too. */
void gt_call(const attn_linear_desc *desc, const gt_view *v, tu_layout_kind okind, attn_linear_state *state,
             size_t misalign, tu_tensor *o) {
  lu_call(desc, &v->q, &v->k, &v->v, &v->g, &v->b, okind, state, misalign, o);
}

ref_gated_problem gt_problem(const attn_linear_desc *d, const gt_view *v, const double *s0, size_t chunk,
                             size_t step_chunk) {
  return lu_gated_problem(d, &v->q, &v->k, &v->v, &v->g, &v->b, s0, chunk, step_chunk);
}

static ref_gated_scales gt_ref_alloc(gt_ref *r, size_t count) {
  r->count = count;
  r->o = malloc(sizeof(double) * (6 * count + 1));
  ck_assert_ptr_nonnull(r->o);
  r->abs = r->o + count;
  r->log = r->abs + count;
  r->step = r->log + count;
  r->tiny = r->step + count;
  r->floor = r->tiny + count;
  for (size_t e = 0; e < count; ++e) r->floor[e] = 1.0; /* a state's: ref_gated_state leaves it */
  const ref_gated_scales sc = {r->abs, r->log, r->step, r->tiny, r->floor};
  return sc;
}

void gt_ref_output(gt_ref *r, const ref_gated_problem *p) {
  const ref_gated_scales sc = gt_ref_alloc(r, p->n_q * ref_gated_heads(p) * p->dv);
  ref_gated(p, r->o, &sc);
}

void gt_ref_state(gt_ref *r, const ref_gated_problem *p) {
  const ref_gated_scales sc = gt_ref_alloc(r, ref_gated_state_heads(p) * p->d * (p->dv + 2));
  ref_gated_state(p, r->o, &sc);
}

void gt_ref_free(gt_ref *r) { free(r->o); }

/* got against expect (the reference, or another library result) with the scales of r from
 * element `off` on; m = 0: a state (no dot product of length m). */
void gt_compare(const char *family, const char *what, const tu_tensor *got, const double *expect, const gt_ref *r,
                size_t off, size_t n_tokens, size_t m, double factor) {
  const size_t count = got->n * got->h * got->w;
  ck_assert_uint_le(off + count, r->count);
  double *tol = malloc(sizeof(double) * (count + 1));
  ck_assert_ptr_nonnull(tol);
  for (size_t e = 0; e < count; ++e)
    tol[e] = factor * tol_gated(n_tokens, m, r->abs[off + e], r->log[off + e], r->step[off + e], r->tiny[off + e],
                                  r->floor[off + e]);
  tu_compare(family, what, got, expect, r->abs + off, tol);
  free(tol);
}

/* The output of a call against the reference. */
void gt_check_output(const char *what, const attn_linear_desc *d, const gt_view *v, const double *s0, size_t prefix,
                     size_t chunk, size_t step_chunk, const tu_tensor *got) {
  const ref_gated_problem p = gt_problem(d, v, s0, chunk, step_chunk);
  gt_ref r;
  gt_ref_output(&r, &p);
  gt_compare("gated.o", what, got, r.o, &r, 0, prefix + d->shape.n_kv, d->shape.d, 1.0);
  gt_ref_free(&r);
}

/* The state after a call against the reference: shape, token count, S and z; z (un-normalised)
 * and the offset column must be exactly 0 (reference scale 0). */
void gt_check_state(const char *what, const attn_linear_desc *d, const gt_view *v, const double *s0, size_t prefix,
                    size_t chunk, size_t step_chunk, const attn_linear_state *s) {
  ck_assert_uint_eq(s->tokens, prefix + d->shape.n_kv);
  ck_assert_uint_eq(s->heads, lu_state_heads(d));
  ck_assert_uint_eq(s->m, d->shape.d);
  ck_assert_uint_eq(s->dv, d->shape.dv);
  ck_assert_uint_eq(s->ld, d->shape.dv + 2);
  const ref_gated_problem p = gt_problem(d, v, s0, chunk, step_chunk);
  gt_ref r;
  gt_ref_state(&r, &p);
  const tu_tensor view = lu_state_view(s);
  gt_compare("gated.state", what, &view, r.o, &r, 0, prefix + d->shape.n_kv, 0, 1.0);
  gt_ref_free(&r);
}

void gt_assert_finite(const char *what, const float *x, size_t count) {
  for (size_t e = 0; e < count; ++e) ck_assert_msg(isfinite(x[e]), "%s: element %zu is %g", what, e, (double)x[e]);
}

void gt_assert_output_finite(const char *what, const tu_tensor *o) {
  for (size_t i = 0; i < o->n; ++i)
    for (size_t h = 0; h < o->h; ++h) gt_assert_finite(what, tu_at(o, i, h, 0), o->w);
}

attn_feature_map gt_fm(gt_map m) {
  return m == M_ELU || m == M_ELU_UN     ? ATTN_FEATURE_ELU1
         : m == M_RELU || m == M_RELU_UN ? ATTN_FEATURE_RELU
                                         : ATTN_FEATURE_IDENTITY;
}
int gt_norm(gt_map m) { return m == M_ELU || m == M_RELU || m == M_ID_NORM; }

attn_gate_kind gt_kind(gt_gk k) {
  return k == K_FEATURE ? ATTN_GATE_FEATURE : k == K_NONE ? ATTN_GATE_NONE : ATTN_GATE_SCALAR;
}
