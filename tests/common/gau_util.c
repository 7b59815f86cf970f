/* Shared helpers of the GAU suites: see gau_util.h. */
#include "gau_util.h"

#include <stdlib.h>
#include <string.h>

#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* Bias tables                                                                                 */
/* ------------------------------------------------------------------------------------------ */
/* Entries a table kind holds: L (causal), 2L - 1 (two-sided); 0 for the scalar bias. */
size_t gau_table_count(attn_gau_bias kind, size_t len) {
  return kind == ATTN_GAU_BIAS_CAUSAL ? len : kind == ATTN_GAU_BIAS_TWO_SIDED ? 2 * len - 1 : 0;
}

/* A table of the kind's count, uniform in [-amp, amp) (amp 0: 0.5), exactly sized (malloc: ASan
 * sees an over-read); NULL for the scalar bias. */
float *gau_table_make(attn_gau_bias kind, size_t len, float amp, tu_rng *r) {
  const size_t count = gau_table_count(kind, len);
  if (count == 0) return NULL;
  if (amp == 0.0f) amp = 0.5f;
  float *t = malloc(sizeof(float) * count);
  ck_assert_ptr_nonnull(t);
  for (size_t i = 0; i < count; ++i) t[i] = tu_rng_range(r, -amp, amp);
  return t;
}

/* ------------------------------------------------------------------------------------------ */
/* Running the library and the reference                                                       */
/* ------------------------------------------------------------------------------------------ */
void gau_desc(attn_gau_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv,
              attn_mask mask) {
  ck_assert_int_eq(attn_gau_desc_init(d, n_q, n_kv, h_q, h_kv, dd, dv), ATTN_OK);
  d->mask = mask;
}

/* Workspace misalignments (bytes) the calls cycle through: any alignment is documented to work. */
const size_t gau_misalign[4] = {0, 4, 1, 36};

/* attn_gau with q, k, v as given (their strides go into desc), o freshly allocated (guarded,
 * sentinel-filled) in layout okind; asserts ATTN_OK, intact guards around o and the exactly-sized
 * workspace (misaligned by `misalign` bytes), untouched gaps of o and an unchanged bias table. */
void gau_call(const attn_gau_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
              tu_layout_kind okind, size_t misalign, tu_tensor *o) {
  attn_gau_desc dd = *desc;
  tu_tensor_alloc(o, okind, dd.shape.n_q, dd.shape.h_q, dd.shape.dv, 1);
  tu_shape_layouts(&dd.shape, q, k, v, o);
  const size_t tcount = dd.bias_table ? gau_table_count(dd.bias, dd.bias_len) : 0;
  float *tcopy = malloc(sizeof(float) * (tcount ? tcount : 1));
  ck_assert_ptr_nonnull(tcopy);
  if (tcount) memcpy(tcopy, dd.bias_table, sizeof(float) * tcount);
  size_t ws = 0;
  TU_CALL_WS(attn_gau, &dd, &ws);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(attn_gau(&dd, q->data, k->data, v->data, o->data, w, ws), ATTN_OK);
  tu_assert_guards("gau workspace", w);
  tu_free(w);
  tu_assert_output_clean("gau o", o);
  if (tcount) tu_assert_same_bits("bias table (const) after the call", tcopy, dd.bias_table, sizeof(float) * tcount);
  free(tcopy);
}

void gau_ref_compute(const attn_gau_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v, gau_ref *r) {
  const ref_gau_problem p = tu_gau_problem(d, q, k, v);
  const size_t count = d->shape.n_q * d->shape.h_q * d->shape.dv;
  r->o = malloc(sizeof(double) * count);
  r->oscale = malloc(sizeof(double) * count);
  r->oarg = malloc(sizeof(double) * count);
  r->onear = malloc(sizeof(double) * count);
  ck_assert(r->o && r->oscale && r->oarg && r->onear);
  ref_gau(&p, r->o, r->oscale, r->oarg, r->onear);
}

void gau_ref_free(gau_ref *r) { tu_free_all((void *[]){r->o, r->oscale, r->oarg, r->onear}, 4); }

/* A view of a reference's scales from element `off` on (a property compares some rows only). */
gau_ref gau_ref_at(const gau_ref *r, size_t off) {
  const gau_ref v = {r->o + off, r->oscale + off, r->oarg + off, r->onear + off};
  return v;
}

/* The one GAU comparison: got (all its rows) against expected values (the reference, or another
 * library result for a property) with the reference's error scales for got's rows, n the keys
 * behind the sums, bounds times factor (tolerances.h, tol_gau_bound). */
void gau_compare(const char *family, const char *what, const tu_tensor *got, const double *expect, const gau_ref *sc,
                 size_t n, size_t d, double factor) {
  const size_t count = got->n * got->h * got->w;
  double *scale = malloc(sizeof(double) * count), *tol = malloc(sizeof(double) * count);
  ck_assert(scale && tol);
  for (size_t e = 0; e < count; ++e) {
    const double bound = factor * tol_gau_bound(n, d, sc->oscale[e], sc->oarg[e], sc->onear[e]);
    scale[e] = sc->oscale[e] > 0.0 ? sc->oscale[e] : 1.0;
    tol[e] = bound / scale[e];
  }
  tu_compare(family, what, got, expect, scale, tol);
  free(scale);
  free(tol);
}

/* Inputs, table and descriptor of a case. */

void gau_setup_make(gau_setup *s, const gau_case *c, uint64_t seed) {
  tu_rng rng = tu_rng_of(seed);
  tu_qkv_make(&s->x, c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  s->table = gau_table_make(c->bias, c->bias_len, c->amp, &rng);
  gau_desc(&s->d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv, c->mask);
  if (c->set_scale) s->d.scale = c->scale;
  s->d.bias = c->bias;
  s->d.beta = c->beta;
  s->d.bias_table = s->table;
  s->d.bias_len = c->bias_len;
  s->d.normalize = c->normalize;
}

void gau_setup_free(gau_setup *s) {
  tu_qkv_free(&s->x);
  free(s->table);
}

/* Runs a call (gau_call, output in okind) and compares it with the reference. */
void gau_check_call(const char *what, const attn_gau_desc *d, const tu_qkv *x, tu_layout_kind okind, size_t misalign) {
  tu_tensor o;
  gau_call(d, &x->q, &x->k, &x->v, okind, misalign, &o);
  tu_qkv_assert_unchanged(x);
  gau_ref ref;
  gau_ref_compute(d, &x->q, &x->k, &x->v, &ref);
  gau_compare("gau.o", what, &o, ref.o, &ref, d->shape.n_kv, d->shape.d, 1.0);
  gau_ref_free(&ref);
  tu_tensor_free(&o);
}
