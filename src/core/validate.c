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

void attn_default_layouts(size_t h_q, size_t h_kv, size_t d, size_t dv, attn_layout *q, attn_layout *k, attn_layout *v,
                          attn_layout *o) {
  *q = (attn_layout){h_q * d, d};
  *k = (attn_layout){h_kv * d, d};
  *v = (attn_layout){h_kv * dv, dv};
  *o = (attn_layout){h_q * dv, dv};
}
