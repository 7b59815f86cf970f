/* Shared helpers of the selective attention suites: see selective_util.h. */
#include "selective_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tolerances.h"

/* ------------------------------------------------------------------------------------------ */
/* Running the library and the reference                                                       */
/* ------------------------------------------------------------------------------------------ */
void sel_desc(attn_selective_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv,
              size_t h_sel) {
  ck_assert_int_eq(attn_selective_desc_init(d, n_q, n_kv, h_q, h_kv, dd, dv), ATTN_OK);
  d->h_sel = h_sel;
}

/* Token-major inputs of n tokens from r (q [n][h_q][dd], k [n][h_kv][dd], v [n][h_kv][dv]) and the
 * descriptor of one call over all of them. */
void sel_inputs(tu_qkv *x, attn_selective_desc *d, tu_rng *r, tu_data data, size_t n, size_t h_q, size_t h_kv,
                size_t dd, size_t dv, size_t h_sel) {
  tu_qkv_make(x, TU_TOKEN_MAJOR, data, r, n, n, h_q, h_kv, h_kv, dd, dv);
  sel_desc(d, n, n, h_q, h_kv, dd, dv, h_sel);
}

/* attn_selective with q, k, v as given, o and lse freshly allocated (guarded, sentinel-filled) in
 * layout okind, f guarded: its first n_kv - n_q entries copied from f_in (the carried state), the
 * call's own entries left at the sentinel (a NaN: their input must be ignored). Asserts ATTN_OK,
 * intact guards (o, lse, f, the exactly-sized workspace at `misalign`) and untouched gaps. */
void sel_run(const attn_selective_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
             tu_layout_kind okind, int with_lse, const float *f_in, size_t misalign, sel_res *r) {
  attn_selective_desc dd = *desc;
  r->has_lse = with_lse;
  tu_outputs_alloc(&dd.shape, &dd.lse, q, k, v, okind, &r->o, with_lse ? &r->lse : NULL);
  const size_t nkv = dd.shape.n_kv, first_new = dd.shape.n_q < nkv ? nkv - dd.shape.n_q : 0;
  r->n_kv = nkv;
  r->f = tu_alloc(sizeof(float) * nkv, 0);
  tu_fill_sentinel(r->f, nkv);
  if (f_in) memcpy(r->f, f_in, sizeof(float) * first_new);
  size_t ws = 0;
  TU_CALL_WS(attn_selective, &dd, &ws);
  void *w = tu_alloc(ws, misalign);
  ck_assert_int_eq(
      attn_selective(&dd, q->data, k->data, v->data, r->o.data, with_lse ? r->lse.data : NULL, r->f, w, ws), ATTN_OK);
  tu_assert_guards("selective workspace", w);
  tu_free(w);
  tu_assert_guards("selective f", r->f);
  tu_assert_output_clean("selective o", &r->o);
  if (with_lse) tu_assert_output_clean("selective lse", &r->lse);
}

void sel_res_free(sel_res *r) {
  tu_tensor_free(&r->o);
  if (r->has_lse) tu_tensor_free(&r->lse);
  tu_free(r->f);
}

double *sel_dalloc(size_t n) {
  double *p = malloc(sizeof(double) * (n ? n : 1));
  ck_assert_ptr_nonnull(p);
  return p;
}

static ref_selective_out sel_ref_out(sel_ref *r, size_t rows, size_t dv, size_t n_q, size_t n_kv) {
  r->o = sel_dalloc(rows * dv);
  r->oscale = sel_dalloc(rows * dv);
  r->oarg = sel_dalloc(rows * dv);
  r->of = sel_dalloc(rows * dv);
  r->lse = sel_dalloc(rows);
  r->sabs = sel_dalloc(rows);
  r->larg = sel_dalloc(rows);
  r->lf = sel_dalloc(rows);
  r->f = sel_dalloc(n_kv);
  r->fg = sel_dalloc(n_kv);
  r->F = sel_dalloc(n_q * n_kv);
  return (ref_selective_out){r->o, r->lse, r->oscale, r->oarg, r->of, r->sabs, r->larg, r->lf, r->f, r->fg, r->F};
}

/* The reference of a call of desc (its sizes, scale, h_sel) over these tensors, f0 the state. */
void sel_ref_compute(const attn_selective_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                     const float *f0, sel_ref *r) {
  const attn_shape *s = &d->shape;
  const ref_selective_problem p = tu_selective_problem(d, q, k, v, f0);
  const ref_selective_out out = sel_ref_out(r, s->n_q * s->h_q, s->dv, s->n_q, s->n_kv);
  ref_selective(&p, &out);
}

void sel_ref_free(sel_ref *r) {
  double *all[] = {r->o, r->lse, r->oscale, r->oarg, r->of, r->sabs, r->larg, r->lf, r->f, r->fg, r->F};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
}

/* The error scales of some rows (pointers at the first row's [h_q][dv] and [h_q] entries). */

sel_scales sel_scales_at(const sel_ref *r, size_t row, size_t h_q, size_t dv) {
  const size_t a = row * h_q * dv, b = row * h_q;
  return (sel_scales){r->oscale + a, r->oarg + a, r->of + a, r->sabs + b, r->larg + b, r->lf + b};
}

/* got's o (and lse) against expected values, with the scales of got's rows; n the tokens behind the
 * results, bounds times factor. */
void sel_compare(const char *what, size_t n, size_t d, const tu_tensor *o, const tu_tensor *lse, const double *exp_o,
                 const double *exp_lse, sel_scales sc, double factor) {
  const size_t rows = o->n * o->h, dv = o->w;
  double *scale = sel_dalloc(rows * dv), *tol = sel_dalloc(rows * dv);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < dv; ++c) {
      const size_t e = r * dv + c;
      const double b = factor * tol_selective_o(n, d, sc.oscale[e], sc.sabs[r], sc.oarg[e], sc.of[e]);
      scale[e] = sc.oscale[e] > 0.0 ? sc.oscale[e] : 1.0;
      tol[e] = b / scale[e];
    }
  tu_compare("selective.o", what, o, exp_o, scale, tol);
  if (lse && exp_lse) {
    for (size_t r = 0; r < rows; ++r) {
      scale[r] = 1.0;
      tol[r] = factor * tol_selective_lse(n, d, sc.sabs[r], isinf(exp_lse[r]) ? 0.0 : exp_lse[r], sc.larg[r], sc.lf[r]);
    }
    tu_compare("selective.lse", what, lse, exp_lse, scale, tol);
  }
  free(scale);
  free(tol);
}

/* The n floats of f against expected column sums; fr and fg the reference's f and its magnitudes
 * (the bound: tol_selective_f; 0, i.e. exact, for a column nothing was added to). */
void sel_compare_f(const char *what, size_t n_tokens, size_t d, float *f, size_t n, const double *expect,
                   const double *fr, const double *fg, double factor) {
  tu_tensor t;
  memset(&t, 0, sizeof t);
  t.data = f;
  t.n = n;
  t.h = 1;
  t.w = 1;
  t.l = (attn_layout){1, 1};
  t.span = n;
  double *scale = sel_dalloc(n), *tol = sel_dalloc(n);
  for (size_t j = 0; j < n; ++j) {
    if (!isfinite(fg[j])) { /* poisoned data: no finite bound (the value must still be right where inf or NaN) */
      scale[j] = 1.0;
      tol[j] = INFINITY;
      continue;
    }
    const double b = factor * tol_selective_f(n_tokens, d, fr[j], fg[j]);
    scale[j] = fabs(fr[j]) + fg[j] > 0.0 ? fabs(fr[j]) + fg[j] : 1.0;
    tol[j] = b / scale[j];
  }
  tu_compare("selective.f", what, &t, expect, scale, tol);
  free(scale);
  free(tol);
}

double *sel_tensor_double(const tu_tensor *t) {
  double *p = sel_dalloc(t->n * t->h * t->w);
  tu_tensor_to_double(t, p);
  return p;
}

/* ------------------------------------------------------------------------------------------ */
/* The selective cache                                                                         */
/* ------------------------------------------------------------------------------------------ */

size_t sc_token_bytes(size_t h_kv, size_t d, size_t dv) {
  return (h_kv * (d + dv) + 1) * sizeof(float) + sizeof(uint64_t);
}

void sc_fix_init(sc_fix *s, size_t cap, size_t h_kv, size_t d, size_t dv, float tau, size_t budget, size_t misalign) {
  ck_assert_int_eq(attn_selcache_size(cap, h_kv, d, dv, &s->bytes), ATTN_OK);
  ck_assert_uint_ge(s->bytes, cap * sc_token_bytes(h_kv, d, dv));
  s->mem = tu_alloc(s->bytes, misalign);
  memset(&s->c, 0xA5, sizeof s->c);
  ck_assert_int_eq(attn_selcache_init(&s->c, cap, h_kv, d, dv, tau, budget, s->mem, s->bytes), ATTN_OK);
  ck_assert(s->c.capacity == cap && s->c.h_kv == h_kv && s->c.d == d && s->c.dv == dv && s->c.budget == budget);
  ck_assert(s->c.tau == tau || (isnan(s->c.tau) && isnan(tau)));
  ck_assert(s->c.live == 0 && s->c.tokens == 0 && s->c.evicted == 0 && s->c.memory == s->mem);
}

void sc_fix_free(sc_fix *s) {
  tu_assert_guards("cache memory", s->mem);
  tu_free(s->mem);
}

/* One step with token t of x (its q, k, v rows) into o and lse (1 x h_q); desc1 gives the sizes
 * (n_q = n_kv = 1) and h_sel. */
attn_status sc_step_token(const attn_selective_desc *desc1, attn_selcache *c, const tu_qkv *x, size_t t, tu_tensor *o,
                          tu_tensor *lse, size_t misalign) {
  attn_selective_desc dd = *desc1;
  const tu_tensor q = tu_rows_view(&x->q, t, 1), k = tu_rows_view(&x->k, t, 1), v = tu_rows_view(&x->v, t, 1);
  tu_shape_layouts(&dd.shape, &q, &k, &v, o);
  dd.lse = lse->l;
  size_t ws = 0;
  ck_assert_int_eq(attn_selcache_workspace_size(&dd, c, &ws), ATTN_OK);
  void *w = tu_alloc(ws, misalign);
  const attn_status st = attn_selcache_step(&dd, c, q.data, k.data, v.data, o->data, lse->data, w, ws);
  tu_assert_guards("cache step workspace", w);
  tu_free(w);
  return st;
}

/* Prefill [0, n) with attn_selective, then attn_selcache_load of its keys, values and f. */
void sc_prefill_load(sc_fix *s, const tu_qkv *x, size_t n, size_t h_q, size_t h_kv, size_t d, size_t dv, size_t h_sel,
                     float *f_out) {
  attn_selective_desc dp;
  sel_desc(&dp, n, n, h_q, h_kv, d, dv, h_sel);
  const tu_tensor q = tu_rows_view(&x->q, 0, n), k = tu_rows_view(&x->k, 0, n), v = tu_rows_view(&x->v, 0, n);
  sel_res r;
  sel_run(&dp, &q, &k, &v, TU_TOKEN_MAJOR, 1, NULL, 0, &r);
  memcpy(f_out, r.f, sizeof(float) * n);
  tu_shape_layouts(&dp.shape, &q, &k, &v, &r.o);
  ck_assert_int_eq(attn_selcache_load(&s->c, &dp, k.data, v.data, r.f), ATTN_OK);
  sel_res_free(&r);
}

void sc_check_report(const sc_fix *s, size_t live, size_t tokens, size_t evicted) {
  ck_assert_msg(s->c.live == live && s->c.tokens == tokens && s->c.evicted == evicted,
                "cache report live %zu tokens %zu evicted %zu, expected %zu %zu %zu", s->c.live, s->c.tokens,
                s->c.evicted, live, tokens, evicted);
  size_t lb = 0;
  ck_assert_int_eq(attn_selcache_live_bytes(&s->c, &lb), ATTN_OK);
  ck_assert_uint_eq(lb, live * sc_token_bytes(s->c.h_kv, s->c.d, s->c.dv));
}
