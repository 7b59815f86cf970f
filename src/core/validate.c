/* Argument validation shared by every public entry point. */
#include "core/internal.h"

static attn_status span_of(size_t rows, size_t heads, size_t width, attn_layout l, size_t *span) {
  size_t a, b, s;
  if (!attn_mul_ok(rows - 1, l.row_stride, &a) || !attn_mul_ok(heads - 1, l.head_stride, &b) ||
      !attn_add_ok(a, b, &s) || !attn_add_ok(s, width, &s) || s > PTRDIFF_MAX / sizeof(float))
    return ATTN_E_SIZE_OVERFLOW;
  *span = s;
  return ATTN_OK;
}

attn_status attn_check_input(size_t rows, size_t heads, size_t width, attn_layout l, size_t *span) {
  if (rows == 0 || heads == 0 || width == 0) return ATTN_E_ZERO_SIZE;
  if ((rows > 1 && l.row_stride < width) || (heads > 1 && l.head_stride < width)) return ATTN_E_BAD_STRIDE;
  return span_of(rows, heads, width, l, span);
}

attn_status attn_check_output(size_t rows, size_t heads, size_t width, attn_layout l, size_t *span) {
  attn_status st = attn_check_input(rows, heads, width, l, span);
  if (st != ATTN_OK || rows == 1 || heads == 1) return st;
  /* Both strides matter: the inner (smaller-stride) block must fit inside one outer step. */
  size_t s1 = l.head_stride, n1 = heads, s2 = l.row_stride;
  if (l.row_stride < l.head_stride) {
    s1 = l.row_stride;
    n1 = rows;
    s2 = l.head_stride;
  }
  size_t inner;
  if (!attn_mul_ok(n1 - 1, s1, &inner) || !attn_add_ok(inner, width, &inner)) return ATTN_E_SIZE_OVERFLOW;
  return s2 >= inner ? ATTN_OK : ATTN_E_BAD_STRIDE;
}

int attn_overlap(const void *a, size_t na_bytes, const void *b, size_t nb_bytes) {
  const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
  if (na_bytes == 0 || nb_bytes == 0) return 0;
  return pa < pb + nb_bytes && pb < pa + na_bytes;
}

static size_t max3(size_t a, size_t b, size_t c) { return attn_max_sz(a, attn_max_sz(b, c)); }

attn_status attn_shape_init(attn_shape *s, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t d,
                            size_t dv) {
  if (!s) return ATTN_E_NULL_POINTER;
  const size_t H = max3(h_q, h_k, h_v);
  memset(s, 0, sizeof *s); /* padding too (kv_type leaves some): shapes compare bytewise */
  s->n_q = n_q, s->n_kv = n_kv, s->h_q = h_q, s->h_k = h_k, s->h_v = h_v, s->d = d, s->dv = dv;
  s->q = (attn_layout){h_q * d, d};
  s->k = (attn_layout){h_k * d, d};
  s->v = (attn_layout){h_v * dv, dv};
  s->o = (attn_layout){H * dv, dv};
  s->kv_type = ATTN_F32;
  s->threads = NULL;
  return ATTN_OK;
}

attn_status attn_shape_check(const attn_shape *s, size_t h_extra, attn_spans *sp) {
  attn_status st;
  if (!s->n_q || !s->n_kv || !s->h_q || !s->h_k || !s->h_v || !s->d || !s->dv) return ATTN_E_ZERO_SIZE;
  if (s->threads && (!s->threads->parallel_for || !s->threads->workers || s->threads->workers > ATTN_MAX_WORKERS))
    return ATTN_E_BAD_ARGUMENT;
  if (!(sp->kv_elem = attn_dtype_size(s->kv_type))) return ATTN_E_BAD_DTYPE;
  sp->H = attn_max_sz(max3(s->h_q, s->h_k, s->h_v), h_extra);
  if (sp->H % s->h_q || sp->H % s->h_k || sp->H % s->h_v || (h_extra && sp->H % h_extra)) return ATTN_E_BAD_HEADS;
  if ((st = attn_check_input(s->n_q, s->h_q, s->d, s->q, &sp->q)) ||
      (st = attn_check_input(s->n_kv, s->h_k, s->d, s->k, &sp->k)) ||
      (st = attn_check_input(s->n_kv, s->h_v, s->dv, s->v, &sp->v)) ||
      (st = attn_check_output(s->n_q, sp->H, s->dv, s->o, &sp->o)))
    return st;
  return ATTN_OK;
}

attn_status attn_check_io(const attn_spans *sp, const float *q, const void *k, const void *v, void *const *out,
                          const size_t *out_bytes, size_t n_out) {
  const size_t F = sizeof(float), E = sp->kv_elem; /* spans fit in PTRDIFF_MAX / sizeof(float) */
  const void *in[] = {q, k, v};
  const size_t in_bytes[] = {sp->q * F, sp->k * E, sp->v * E};
  for (size_t a = 0; a < n_out; a++) {
    if (!out[a]) continue;
    for (size_t i = 0; i < 3; i++)
      if (attn_overlap(out[a], out_bytes[a], in[i], in_bytes[i])) return ATTN_E_ALIASING;
    for (size_t b = a + 1; b < n_out; b++)
      if (out[b] && attn_overlap(out[a], out_bytes[a], out[b], out_bytes[b])) return ATTN_E_ALIASING;
  }
  return ATTN_OK;
}
