/* Shared helpers of the attn Check suites: see test_util.h. */
#include "test_util.h"

#include "half_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */
attn_layout tu_layout(tu_layout_kind kind, size_t n, size_t h, size_t w) {
  attn_layout l;
  switch (kind) {
    case TU_HEAD_MAJOR:
      l.row_stride = w;
      l.head_stride = n * w;
      break;
    case TU_PADDED:
      l.head_stride = w + 3;
      l.row_stride = h * (w + 3) + 7;
      break;
    case TU_HEAD_PADDED:
      l.row_stride = w + 5;
      l.head_stride = n * (w + 5) + 11;
      break;
    case TU_TOKEN_MAJOR:
    case TU_PACKED_QKV:
    default:
      l.row_stride = h * w;
      l.head_stride = w;
      break;
  }
  return l;
}

size_t tu_span(size_t n, size_t h, size_t w, attn_layout l) {
  return (n - 1) * l.row_stride + (h - 1) * l.head_stride + w;
}

static void tensor_init(tu_tensor *t, size_t n, size_t h, size_t w, attn_layout l) {
  t->n = n;
  t->h = h;
  t->w = w;
  t->l = l;
  t->span = tu_span(n, h, w, l);
  t->owner = NULL;
  t->guarded = 0;
  t->data = NULL;
}

static void *input_alloc(size_t count) {
  float *p = malloc(sizeof(float) * (count ? count : 1));
  ck_assert_ptr_nonnull(p);
  tu_fill_sentinel(p, count);
  return p;
}

void tu_tensor_alloc(tu_tensor *t, tu_layout_kind kind, size_t n, size_t h, size_t w, int guarded) {
  tensor_init(t, n, h, w, tu_layout(kind, n, h, w));
  t->guarded = guarded;
  t->owner = guarded ? tu_alloc(sizeof(float) * t->span, 0) : input_alloc(t->span);
  t->data = t->owner;
}

void tu_tensor_free(tu_tensor *t) {
  if (t->owner) {
    if (t->guarded)
      tu_free(t->owner);
    else
      free(t->owner);
  }
  t->owner = NULL;
  t->data = NULL;
}

float *tu_at(const tu_tensor *t, size_t token, size_t head, size_t c) {
  return t->data + token * t->l.row_stride + head * t->l.head_stride + c;
}

tu_tensor tu_rows_view(const tu_tensor *t, size_t first, size_t n) {
  tu_tensor v = *t;
  v.data = tu_at(t, first, 0, 0);
  v.n = n;
  v.span = tu_span(n, t->h, t->w, t->l);
  v.owner = NULL;
  return v;
}

tu_qkv tu_qkv_rows(const tu_qkv *x, size_t q0, size_t nq, size_t nkv) {
  tu_qkv w;
  memset(&w, 0, sizeof w);
  w.q = tu_rows_view(&x->q, q0, nq);
  w.k = tu_rows_view(&x->k, 0, nkv);
  w.v = tu_rows_view(&x->v, 0, nkv);
  return w;
}

void tu_prop_decode(const void *ctx, size_t n, tu_prop_part_fn part) {
  for (size_t t = 0; t < n; ++t) {
    char what[128];
    snprintf(what, sizeof what, "decode step %zu vs prefill row", t);
    part(ctx, what, TU_PROP_DECODE, t, t, 1, t + 1);
  }
}

void tu_prop_chunked(const void *ctx, size_t n, size_t start, tu_prop_part_fn part) {
  part(ctx, "chunked prefill vs prefill rows", TU_PROP_CHUNKED, 0, start, n - start, n);
}

void tu_prop_pieces(const void *ctx, const size_t cuts[4], tu_prop_part_fn part) {
  for (size_t piece = 0; piece < 3; ++piece) {
    const size_t r0 = cuts[piece], r1 = cuts[piece + 1];
    if (r1 <= r0) continue;
    char what[128];
    snprintf(what, sizeof what, "piece [%zu, %zu) over %zu keys vs one call", r0, r1, r1);
    part(ctx, what, TU_PROP_PIECES, piece, r0, r1 - r0, r1);
  }
}

void tu_tensor_fill(tu_tensor *t, tu_rng *r, float lo, float hi) {
  for (size_t i = 0; i < t->n; ++i)
    for (size_t h = 0; h < t->h; ++h)
      for (size_t c = 0; c < t->w; ++c) *tu_at(t, i, h, c) = tu_rng_range(r, lo, hi);
}

double tu_rng_gauss(tu_rng *r) {
  /* two uniforms in (0, 1] and [0, 1) from 53 bits each */
  const double u1 = ((double)(tu_rng_next(r) >> 11) + 1.0) * 0x1p-53;
  const double u2 = (double)(tu_rng_next(r) >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tu_fill_gauss(float *x, size_t count, tu_rng *r, double sigma) {
  for (size_t i = 0; i < count; ++i) x[i] = (float)(sigma * tu_rng_gauss(r));
}

void tu_tensor_to_double(const tu_tensor *t, double *out) {
  size_t e = 0;
  for (size_t i = 0; i < t->n; ++i)
    for (size_t h = 0; h < t->h; ++h)
      for (size_t c = 0; c < t->w; ++c) out[e++] = (double)*tu_at(t, i, h, c);
}

void tu_assert_output_clean(const char *what, const tu_tensor *t) {
  if (t->guarded) tu_assert_guards(what, t->owner);
  unsigned char *mark = calloc(t->span, 1);
  ck_assert_ptr_nonnull(mark);
  for (size_t i = 0; i < t->n; ++i)
    for (size_t h = 0; h < t->h; ++h)
      for (size_t c = 0; c < t->w; ++c) mark[(size_t)(tu_at(t, i, h, c) - t->data)] = 1;
  size_t bad = SIZE_MAX;
  for (size_t e = 0; e < t->span && bad == SIZE_MAX; ++e) {
    uint32_t bits;
    memcpy(&bits, t->data + e, sizeof bits);
    if (!mark[e] && bits != TU_SENTINEL_BITS) bad = e;
  }
  free(mark);
  ck_assert_msg(bad == SIZE_MAX, "%s: the library wrote a gap element (offset %zu) of a strided output", what, bad);
}

/* ------------------------------------------------------------------------------------------ */
/* Inputs                                                                                      */
/* ------------------------------------------------------------------------------------------ */
static void fill_qk(tu_tensor *t, tu_data data, tu_rng *r, size_t d) {
  switch (data) {
    case TU_DATA_POSITIVE:
      tu_tensor_fill(t, r, 0.0f, 1.0f);
      break;
    case TU_DATA_WIDE:
      tu_tensor_fill(t, r, -30.0f, 30.0f);
      break;
    case TU_DATA_LARGE: {
      /* q_t, k_t = c (1 + 0.02 u), c^2 d = 95: q.k in 95 * [0.98^2, 1.02^2] = [91.2, 98.8]. */
      const double c = sqrt(95.0 / (double)d);
      for (size_t i = 0; i < t->n; ++i)
        for (size_t h = 0; h < t->h; ++h)
          for (size_t e = 0; e < t->w; ++e)
            *tu_at(t, i, h, e) = (float)(c * (1.0 + 0.02 * tu_rng_range(r, -1.0f, 1.0f)));
      break;
    }
    case TU_DATA_UNIFORM:
    default:
      tu_tensor_fill(t, r, -1.0f, 1.0f);
      break;
  }
}

tu_qkv tu_qkv_of(tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv, size_t h_q, size_t h_k,
                 size_t h_v, size_t d, size_t dv) {
  tu_qkv x;
  tu_qkv_make(&x, kind, data, r, n_q, n_kv, h_q, h_k, h_v, d, dv);
  return x;
}

void tu_qkv_make(tu_qkv *x, tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv, size_t h_q,
                 size_t h_k, size_t h_v, size_t d, size_t dv) {
  memset(x, 0, sizeof *x);
  if (kind == TU_PACKED_QKV) {
    ck_assert_uint_eq(n_q, n_kv);
    const size_t row = h_q * d + h_k * d + h_v * dv;
    const attn_layout lq = {row, d}, lk = {row, d}, lv = {row, dv};
    x->packed_bytes = sizeof(float) * n_q * row;
    x->packed = input_alloc(n_q * row);
    tensor_init(&x->q, n_q, h_q, d, lq);
    tensor_init(&x->k, n_kv, h_k, d, lk);
    tensor_init(&x->v, n_kv, h_v, dv, lv);
    x->q.data = (float *)x->packed;
    x->k.data = x->q.data + h_q * d;
    x->v.data = x->k.data + h_k * d;
  } else {
    tu_tensor_alloc(&x->q, kind, n_q, h_q, d, 0);
    tu_tensor_alloc(&x->k, kind, n_kv, h_k, d, 0);
    tu_tensor_alloc(&x->v, kind, n_kv, h_v, dv, 0);
  }
  fill_qk(&x->q, data, r, d);
  fill_qk(&x->k, data, r, d);
  if (data == TU_DATA_POSITIVE)
    tu_tensor_fill(&x->v, r, 0.0f, 1.0f);
  else
    tu_tensor_fill(&x->v, r, -1.0f, 1.0f);
  tu_qkv_snapshot(x);
}

static size_t qkv_parts(const tu_qkv *x, const void **p, size_t *bytes) {
  if (x->packed) {
    p[0] = x->packed;
    bytes[0] = x->packed_bytes;
    return 1;
  }
  const tu_tensor *t[3] = {&x->q, &x->k, &x->v};
  for (int i = 0; i < 3; ++i) {
    p[i] = t[i]->data;
    bytes[i] = sizeof(float) * t[i]->span;
  }
  return 3;
}

void tu_qkv_poison(tu_qkv *x, int poison_case, size_t tail, char *what, size_t len) {
  static const float bad[3] = {NAN, INFINITY, -INFINITY};
  const int which = poison_case / 6, b = (poison_case / 2) % 3, late = poison_case % 2;
  tu_tensor *t = which == 0 ? &x->q : which == 1 ? &x->k : &x->v;
  const size_t count = t->n - tail, tok = late ? count - 1 - count / 3 : count / 5, col = (size_t)b % t->w;
  *tu_at(t, tok, t->h - 1, col) = bad[b];
  tu_qkv_snapshot(x);
  snprintf(what, len, "%c[%zu][%zu][%zu] = %g", "qkv"[which], tok, t -> h - 1, col, (double)bad[b]);
}

void tu_qkv_snapshot(tu_qkv *x) {
  const void *p[3];
  size_t bytes[3], total = 0;
  const size_t parts = qkv_parts(x, p, bytes);
  for (size_t i = 0; i < parts; ++i) total += bytes[i];
  free(x->copy);
  x->copy = malloc(total ? total : 1);
  ck_assert_ptr_nonnull(x->copy);
  x->copy_bytes = total;
  unsigned char *c = x->copy;
  for (size_t i = 0; i < parts; ++i) {
    memcpy(c, p[i], bytes[i]);
    c += bytes[i];
  }
}

void tu_qkv_assert_unchanged(const tu_qkv *x) {
  const void *p[3];
  size_t bytes[3];
  const size_t parts = qkv_parts(x, p, bytes);
  const unsigned char *c = x->copy;
  for (size_t i = 0; i < parts; ++i) {
    tu_assert_same_bits("input buffer (const) after the call", c, p[i], bytes[i]);
    c += bytes[i];
  }
}

void tu_qkv_free(tu_qkv *x) {
  if (x->packed) {
    free(x->packed);
  } else {
    tu_tensor_free(&x->q);
    tu_tensor_free(&x->k);
    tu_tensor_free(&x->v);
  }
  free(x->copy);
  memset(x, 0, sizeof *x);
}

/* A copy of a gate or beta tensor's span (NULL without data). */
static float *gated_copy(const tu_tensor *t) {
  if (!t->data) return NULL;
  float *c = malloc(sizeof(float) * t->span);
  ck_assert_ptr_nonnull(c);
  memcpy(c, t->data, sizeof(float) * t->span);
  return c;
}

void tu_gated_snapshot(tu_gated_in *in) {
  free(in->gcopy);
  free(in->bcopy);
  in->gcopy = gated_copy(&in->g);
  in->bcopy = gated_copy(&in->b);
  tu_qkv_snapshot(&in->x);
}

void tu_gated_assert_unchanged(const tu_gated_in *in) {
  tu_qkv_assert_unchanged(&in->x);
  if (in->g.data) tu_assert_same_bits("log gates (const) after the call", in->gcopy, in->g.data, 4 * in->g.span);
  if (in->b.data) tu_assert_same_bits("beta (const) after the call", in->bcopy, in->b.data, 4 * in->b.span);
}

void tu_gated_free(tu_gated_in *in) {
  tu_qkv_free(&in->x);
  tu_tensor_free(&in->g);
  tu_tensor_free(&in->b);
  tu_free_all((void *[]){in->gcopy, in->bcopy}, 2);
}

void tu_assert_shape_defaults(const char *what, const attn_shape *got, size_t d) {
  attn_shape want;
  ck_assert_int_eq(attn_shape_init(&want, 5, 9, 6, 2, 2, d, 40), ATTN_OK);
  tu_assert_same_bits(what, &want, got, sizeof want);
}

void tu_free_all(void *const *p, size_t count) {
  for (size_t i = 0; i < count; ++i) free(p[i]);
}

void tu_shape_layouts(attn_shape *s, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v, const tu_tensor *o) {
  s->q = q->l;
  s->k = k->l;
  s->v = v->l;
  s->o = o->l;
}

void tu_outputs_alloc(attn_shape *s, attn_layout *lse_layout, const tu_tensor *q, const tu_tensor *k,
                      const tu_tensor *v, tu_layout_kind okind, tu_tensor *o, tu_tensor *lse) {
  tu_tensor_alloc(o, okind, s->n_q, s->h_q, s->dv, 1);
  if (lse) tu_tensor_alloc(lse, okind, s->n_q, s->h_q, 1, 1);
  tu_shape_layouts(s, q, k, v, o);
  if (lse) *lse_layout = lse->l;
}

ref_feature_map tu_ref_map(attn_feature_map map) {
  /* No default: -Wswitch names a map added to attn.h and not here. No Check assertion either: the
   * fuzzers call this outside a Check runner. */
  switch (map) {
    case ATTN_FEATURE_IDENTITY:
    case ATTN_FEATURE_COUNT:
      break;
    case ATTN_FEATURE_ELU1:
      return REF_FM_ELU1;
    case ATTN_FEATURE_RELU:
      return REF_FM_RELU;
    case ATTN_FEATURE_EXP:
      return REF_FM_EXP;
    case ATTN_FEATURE_FAVOR:
      return REF_FM_FAVOR;
    case ATTN_FEATURE_DSOFTMAX:
      return REF_FM_DSOFTMAX;
  }
  return REF_FM_IDENTITY;
}

ref_layout tu_ref_layout(const tu_tensor *t) {
  const ref_layout l = {t->l.row_stride, t->l.head_stride};
  return l;
}

/* The fields the softmax-like references share: a descriptor's sizes and scale, and tensors
 * q, k, v with their layouts. */
#define TU_PROBLEM_COMMON(dsc, q_, k_, v_)                                                                     \
  .n_q = (dsc)->shape.n_q, .n_kv = (dsc)->shape.n_kv, .h_q = (dsc)->shape.h_q, .h_kv = (dsc)->shape.h_k,       \
  .d = (dsc)->shape.d, .dv = (dsc)->shape.dv, .scale = (double)(dsc)->scale, .q = (q_)->data, .k = (k_)->data, \
  .v = (v_)->data, .lq = tu_ref_layout(q_), .lk = tu_ref_layout(k_), .lv = tu_ref_layout(v_)

ref_gau_problem tu_gau_problem(const attn_gau_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v) {
  const ref_gau_problem p = {TU_PROBLEM_COMMON(d, q, k, v), .left = d->mask.left,          .right = d->mask.right,
                             .chunk = d->mask.chunk,        .bias = (ref_gau_bias)d->bias, .beta = (double)d->beta,
                             .table = d->bias_table,        .bias_len = d->bias_len,       .normalize = d->normalize};
  return p;
}

ref_softmax_problem tu_softmax_problem(const attn_softmax_desc *d, const tu_tensor *q, const tu_tensor *k,
                                       const tu_tensor *v) {
  const ref_softmax_problem p = {TU_PROBLEM_COMMON(d, q, k, v),
                                 .window_left = d->mask.left,
                                 .window_right = d->mask.right,
                                 .chunk = d->mask.chunk,
                                 .sinks = d->sinks,
                                 .alibi = d->alibi_slopes,
                                 .bias = d->bias,
                                 .softcap = (double)d->softcap,
                                 .bias_rs = d->bias_layout.row_stride,
                                 .bias_hs = d->bias_layout.head_stride};
  return p;
}

ref_selective_problem tu_selective_problem(const attn_selective_desc *d, const tu_tensor *q, const tu_tensor *k,
                                           const tu_tensor *v, const float *f0) {
  const ref_selective_problem p = {TU_PROBLEM_COMMON(d, q, k, v), .h_sel = d->h_sel, .f0 = f0};
  return p;
}

static double *tu_doubles(size_t count) {
  double *p = malloc(sizeof(double) * (count ? count : 1));
  ck_assert_ptr_nonnull(p);
  return p;
}

void tu_softmax_ref_compute(const attn_softmax_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                            tu_softmax_ref *r) {
  const ref_softmax_problem p = tu_softmax_problem(d, q, k, v);
  const size_t rows = d->shape.n_q * d->shape.h_q;
  r->o = tu_doubles(rows * d->shape.dv);
  r->oscale = tu_doubles(rows * d->shape.dv);
  r->lse = tu_doubles(rows);
  r->sabs = tu_doubles(rows);
  ref_softmax(&p, r->o, r->lse, r->oscale, r->sabs);
}

void tu_softmax_ref_free(tu_softmax_ref *r) { tu_free_all((void *[]){r->o, r->lse, r->oscale, r->sabs}, 4); }

/* ------------------------------------------------------------------------------------------ */
/* Comparison                                                                                  */
/* ------------------------------------------------------------------------------------------ */
void tu_compare(const char *family, const char *what, const tu_tensor *got, const double *ref, const double *scale,
                const double *tol) {
  size_t fails = 0, first = 0, ft = 0, fh = 0, fc = 0, e = 0;
  double max_rel = 0.0, max_util = 0.0;
  for (size_t i = 0; i < got->n; ++i) {
    for (size_t h = 0; h < got->h; ++h) {
      for (size_t c = 0; c < got->w; ++c, ++e) {
        const double g = (double)*tu_at(got, i, h, c);
        const double r = ref[e];
        const double bound = tol[e] * scale[e];
        int ok;
        if (isnan(r)) {
          ok = isnan(g); /* the non-finite policy: NaN where the reference is NaN */
        } else if (isinf(r)) {
          ok = g == r;
        } else {
          const double err = fabs(g - r);
          ok = err <= bound; /* false for NaN */
          if (ok && scale[e] > 0.0) {
            if (err / scale[e] > max_rel) max_rel = err / scale[e];
            if (err / bound > max_util) max_util = err / bound;
          }
        }
        if (!ok && fails++ == 0) {
          first = e;
          ft = i;
          fh = h;
          fc = c;
        }
      }
    }
  }
  if (getenv("ATTN_TEST_REPORT"))
    fprintf(stderr, "ATTN_ERR %s %s %.3e %.3f %s\n", family, attn_isa_name(attn_isa_get()), max_rel, max_util, what);
  ck_assert_msg(fails == 0,
                "%s %s: %zu of %zu elements out of tolerance; first at token %zu head %zu col %zu: "
                "got %.9g ref %.9g |err| %.3g > bound %.3g (tol %.3g x scale %.3g)",
                family, what, fails, e, ft, fh, fc, (double)*tu_at(got, ft, fh, fc), ref[first],
                fabs((double)*tu_at(got, ft, fh, fc) - ref[first]), tol[first] * scale[first], tol[first],
                scale[first]);
}

size_t tu_select_cases(const void *rows, size_t count, size_t stride, const size_t at[5], size_t *sel) {
  size_t n = 0, one;
  for (size_t i = 0; i < count; ++i) { /* runs while the suite is built: no ck_assert here */
    const char *row = (const char *)rows + i * stride;
    size_t f[5];
    for (int j = 0; j < 5; ++j) memcpy(&f[j], row + at[j], sizeof(size_t));
    const size_t work = f[0] * f[1] * f[2] * (f[3] + f[4]);
    if (tu_select_rows(1, &work, &one)) sel[n++] = i;
  }
  return n;
}

double *tu_dup(double value, size_t count) {
  double *p = malloc(sizeof(double) * (count ? count : 1));
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i < count; ++i) p[i] = value;
  return p;
}

uint16_t tu_half_bits(attn_dtype ty, float x) {
  return ty == ATTN_F16 ? hr_f16_bits(hr_f16_round((double)x)) : hr_bf16_bits(x);
}

double tu_half_value(attn_dtype ty, uint16_t h) { return ty == ATTN_F16 ? hr_f16_value(h) : hr_bf16_value(h); }

uint16_t *tu_half_of(tu_tensor *t, attn_dtype ty) {
  uint16_t *h = malloc(sizeof(uint16_t) * (t->span ? t->span : 1));
  ck_assert_ptr_nonnull(h);
  for (size_t e = 0; e < t->span; e++) h[e] = ty == ATTN_F16 ? 0x7e55 : 0x7fd5; /* NaN gaps */
  for (size_t i = 0; i < t->n; i++)
    for (size_t a = 0; a < t->h; a++)
      for (size_t c = 0; c < t->w; c++) {
        float *x = tu_at(t, i, a, c);
        const uint16_t b = tu_half_bits(ty, *x);
        *x = (float)tu_half_value(ty, b);
        h[(size_t)(x - t->data)] = b;
      }
  return h;
}
