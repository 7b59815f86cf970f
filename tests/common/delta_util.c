/* The delta-rule suites' shared helpers (delta_util.h). */
#include "delta_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linear_util.h"
#include "tolerances.h"

void dt_aux_alloc(tu_tensor *t, tu_layout_kind kind, size_t n, size_t h, size_t w, int row0) {
  tu_tensor_alloc(t, kind == TU_PACKED_QKV ? TU_TOKEN_MAJOR : kind, row0 ? 1 : n, h, w, 0);
  if (row0) {
    t->n = n;
    t->l.row_stride = 0;
  }
}

void dt_in_make(dt_in *in, const dt_spec *s, tu_rng *r, size_t n, size_t hk, size_t hv, size_t d, size_t dv) {
  memset(in, 0, sizeof *in);
  tu_qkv_make(&in->x, s->layout, TU_DATA_UNIFORM, r, n, n, hk, hk, hv, d, dv);
  if (s->small_keys) {
    const float f = (float)(1.0 / sqrt((double)d));
    for (size_t t = 0; t < n; ++t)
      for (size_t h = 0; h < hk; ++h)
        for (size_t c = 0; c < d; ++c) *tu_at(&in->x.k, t, h, c) *= f;
    tu_qkv_snapshot(&in->x);
  }
  if (s->gate != ATTN_DELTA_PLAIN) {
    const size_t w = s->gate == ATTN_DELTA_FEATURE ? d : 1;
    const float lo = s->glo == 0.0f && s->ghi == 0.0f ? -0.5f : s->glo,
                hi = s->glo == 0.0f && s->ghi == 0.0f ? 0.0f : s->ghi;
    dt_aux_alloc(&in->g, s->layout, n, hv, w, s->row0);
    for (size_t t = 0; t < in->g.n; ++t)
      for (size_t h = 0; h < hv; ++h)
        for (size_t f = 0; f < w; ++f)
          *tu_at(&in->g, t, h, f) = s->split && f % 2 == 0 ? tu_rng_range(r, -0.05f, 0.0f) : tu_rng_range(r, lo, hi);
  }
  const int bdef = s->blo == 0.0f && s->bhi == 0.0f;
  dt_aux_alloc(&in->b, s->layout, n, hv, 1, 0);
  size_t e = 0;
  for (size_t t = 0; t < in->b.n; ++t)
    for (size_t h = 0; h < hv; ++h, ++e) {
      const float lo = bdef ? 0.05f : s->blo, hi = bdef ? 1.0f : s->bhi;
      *tu_at(&in->b, t, h, 0) = s->beta0 && e % 3 == 1 ? 0.0f : lo == hi ? lo : tu_rng_range(r, lo, hi);
    }
  tu_gated_snapshot(in);
}

/* ------------------------------------------------------------------------------------------ */
/* Descriptors, states, calls                                                                  */
/* ------------------------------------------------------------------------------------------ */
void dt_desc(attn_delta_desc *d, size_t hk, size_t hv, size_t dd, size_t dv, attn_delta_gate gate, size_t chunk,
             int l2) {
  ck_assert_int_eq(attn_delta_desc_init(d, 1, hk, hv, dd, dv, gate), ATTN_OK);
  d->chunk = chunk;
  d->qk_l2norm = l2;
}

/* The descriptor of a call on tokens [t0, t0 + n) of in: sizes, the tensors' layouts, o
 * token-major [n][h_v][dv]. */
attn_delta_desc dt_bind(const attn_delta_desc *base, const dt_in *in, size_t n) {
  attn_delta_desc d = *base;
  d.shape.n_q = d.shape.n_kv = n;
  d.shape.q = in->x.q.l;
  d.shape.k = in->x.k.l;
  d.shape.v = in->x.v.l;
  d.shape.o = tu_layout(TU_TOKEN_MAJOR, n, d.shape.h_v, d.shape.dv);
  if (in->g.data) d.gate_layout = in->g.l;
  d.beta_layout = in->b.l;
  return d;
}

size_t dt_chunk(const attn_delta_desc *d) {
  size_t c = 0;
  ck_assert_int_eq(attn_delta_chunk_size(d, &c), ATTN_OK);
  ck_assert(c >= 1 && c <= ATTN_LINEAR_MAX_CHUNK);
  if (d->chunk) ck_assert_uint_eq(c, d->chunk);
  return c;
}

/* A guarded state of attn_delta_state_size bytes: zero, or values in [-1, 1) (fill). */
float *dt_state(const attn_delta_desc *d, tu_rng *r, int fill) {
  size_t bytes = 0;
  ck_assert_int_eq(attn_delta_state_size(d, &bytes), ATTN_OK);
  ck_assert_uint_eq(bytes, sizeof(float) * dt_state_floats(d));
  float *s = tu_alloc(bytes, 0);
  for (size_t e = 0; e < dt_state_floats(d); ++e) s[e] = fill ? tu_rng_range(r, -1.0f, 1.0f) : 0.0f;
  return s;
}

float *dt_copy_state(const attn_delta_desc *d, const float *from) {
  float *s = tu_alloc(sizeof(float) * dt_state_floats(d), 0);
  memcpy(s, from, sizeof(float) * dt_state_floats(d));
  return s;
}

/* attn_delta on tokens [t0, t0 + n): o freshly allocated (guarded, token-major), a workspace of
 * exactly the reported size; asserts ATTN_OK, guards, no gap of o written, inputs unchanged. */
void dt_call(const attn_delta_desc *base, const dt_in *in, size_t t0, size_t n, float *state,
             const attn_checkpoints *ck, tu_tensor *o) {
  const attn_delta_desc d = dt_bind(base, in, n);
  size_t need = 0;
  ck_assert_int_eq(attn_delta_workspace_size(&d, &need), ATTN_OK);
  tu_tensor_alloc(o, TU_TOKEN_MAJOR, n, d.shape.h_v, d.shape.dv, 1);
  void *ws = tu_alloc(need, 0);
  const attn_status st = attn_delta(&d, dt_row(&in->x.q, t0), dt_row(&in->x.k, t0), dt_row(&in->x.v, t0),
                                    dt_row(&in->g, t0), dt_row(&in->b, t0), o->data, state, ck, ws, need);
  ck_assert_msg(st == ATTN_OK, "attn_delta (tokens %zu..%zu): %s: %s", t0, t0 + n, attn_status_string(st),
                attn_last_error());
  tu_assert_output_clean("o", o);
  tu_assert_guards("workspace", ws);
  if (state) tu_assert_guards("state", state);
  if (ck && ck->count) tu_assert_guards("checkpoint states", ck->states);
  tu_free(ws);
  tu_gated_assert_unchanged(in);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference and comparison                                                                    */
/* ------------------------------------------------------------------------------------------ */
ref_delta_problem dt_problem(const attn_delta_desc *d, const dt_in *in, size_t t0, size_t n, const float *s0,
                             size_t C) {
  const ref_delta_problem p = {.n = n,
                               .h_k = d->shape.h_k,
                               .h_v = d->shape.h_v,
                               .d = d->shape.d,
                               .dv = d->shape.dv,
                               .q = dt_row(&in->x.q, t0),
                               .k = dt_row(&in->x.k, t0),
                               .v = dt_row(&in->x.v, t0),
                               .lq = tu_ref_layout(&in->x.q),
                               .lk = tu_ref_layout(&in->x.k),
                               .lv = tu_ref_layout(&in->x.v),
                               .gate = (ref_delta_gate)d->gate,
                               .log_gate = dt_row(&in->g, t0),
                               .lg = tu_ref_layout(&in->g),
                               .beta = dt_row(&in->b, t0),
                               .lb = tu_ref_layout(&in->b),
                               .scale = (double)d->scale,
                               .qk_l2norm = d->qk_l2norm,
                               .s0 = s0,
                               .chunk = C};
  return p;
}

double *dt_doubles(size_t count) {
  double *p = calloc(count ? count : 1, sizeof(double));
  ck_assert_ptr_nonnull(p);
  return p;
}

void dt_ref_run(dt_ref *r, const attn_delta_desc *d, const dt_in *in, size_t t0, size_t n, const float *s0, size_t C,
                size_t count, const size_t *after) {
  const size_t outs = n * d->shape.h_v * d->shape.dv, sf = dt_state_floats(d);
  r->o = dt_doubles(outs);
  r->os = dt_doubles(outs);
  r->s = dt_doubles(sf);
  r->ss = dt_doubles(sf);
  r->ck = dt_doubles(count * sf);
  r->cks = dt_doubles(count * sf);
  const ref_delta_problem p = dt_problem(d, in, t0, n, s0, C);
  const ref_delta_out out = {r->o, r->os, r->s, r->ss, count, after, r->ck, r->cks};
  ref_delta(&p, &out);
}

void dt_ref_free(dt_ref *r) { tu_free_all((void *[]){r->o, r->os, r->s, r->ss, r->ck, r->cks}, 6); }

/* got against expect (the reference or another library result) within factor times
 * tol_delta(d, C) scale + TOL_DT_FLOOR, scale the reference's. */
void dt_compare(const char *family, const char *what, const tu_tensor *got, const double *expect, const double *scale,
                size_t d, size_t C, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *sc = dt_doubles(count), *tol = dt_doubles(count);
  for (size_t e = 0; e < count; ++e) {
    sc[e] = scale[e] > 0.0 ? scale[e] : 1.0;
    tol[e] = factor * (scale[e] > 0.0 ? tol_delta(d, C) + TOL_DT_FLOOR / scale[e] : TOL_DT_FLOOR);
  }
  tu_compare(family, what, got, expect, sc, tol);
  free(sc);
  free(tol);
}

/* A state [h_v][d][dv] as a tensor (tokens = value heads, heads = key channels). */
tu_tensor dt_state_view(const attn_delta_desc *d, float *s) {
  tu_tensor t;
  memset(&t, 0, sizeof t);
  t.data = s;
  t.n = d->shape.h_v;
  t.h = d->shape.d;
  t.w = d->shape.dv;
  t.l = tu_layout(TU_TOKEN_MAJOR, t.n, t.h, t.w);
  t.span = t.n * t.h * t.w;
  return t;
}

void dt_check_state(const char *what, const attn_delta_desc *d, float *s, const double *ref, const double *scale,
                    size_t C, double factor) {
  const tu_tensor v = dt_state_view(d, s);
  dt_compare("delta.state", what, &v, ref, scale, d->shape.d, C, factor);
}

void dt_assert_finite(const char *what, const float *x, size_t count) {
  for (size_t e = 0; e < count; ++e) ck_assert_msg(isfinite(x[e]), "%s: element %zu is %g", what, e, (double)x[e]);
}

const dt_pcase dt_pcases[] = {
    {ATTN_DELTA_PLAIN, 1, 0, 1, 1, 16, 16},   {ATTN_DELTA_SCALAR, 1, 0, 2, 4, 16, 16},
    {ATTN_DELTA_FEATURE, 1, 0, 1, 3, 16, 16}, {ATTN_DELTA_FEATURE, 1, 16, 2, 4, 5, 7},
    {ATTN_DELTA_SCALAR, 0, 16, 1, 1, 64, 64}, {ATTN_DELTA_PLAIN, 0, 7, 1, 2, 16, 8},
    {ATTN_DELTA_FEATURE, 0, 0, 1, 1, 64, 32},
};
const size_t dt_npcases = sizeof dt_pcases / sizeof dt_pcases[0];

void dt_pcase_setup(const dt_pcase *p, uint64_t seed, size_t n_of_c_mul, long n_of_c_add, attn_delta_desc *d, dt_in *in,
                    size_t *C, size_t *n, tu_rng *rng) {
  tu_rng_seed(rng, seed);
  dt_desc(d, p->hk, p->hv, p->d, p->dv, p->gate, p->chunk, p->l2);
  *C = dt_chunk(d);
  *n = (size_t)((long)(n_of_c_mul * *C) + n_of_c_add);
  const dt_spec s = {.gate = p->gate, .layout = TU_TOKEN_MAJOR, .small_keys = !p->l2};
  dt_in_make(in, &s, rng, *n, p->hk, p->hv, p->d, p->dv);
}
