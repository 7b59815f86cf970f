/* Argument validation shared by every public entry point. */
#include "core/internal.h"

attn_status attn_layout_span(size_t rows, size_t heads, size_t width, attn_layout l, size_t *span) {
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
  return attn_layout_span(rows, heads, width, l, span);
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

attn_status attn_fail_layout(attn_status st, const char *name, const char *wname, size_t rows, size_t heads,
                             size_t width, attn_layout l) {
  const char *wn = wname ? wname : "", *sp = wname ? " " : "";
  if (st == ATTN_E_ZERO_SIZE)
    return attn_fail(st, "%s: %zu rows x %zu heads x %s%s%zu: a size is 0", name, rows, heads, wn, sp, width);
  if (st != ATTN_E_BAD_STRIDE)
    return attn_fail(st, "%s: %zu rows x %zu heads at row_stride %zu, head_stride %zu: the span overflows", name, rows,
                     heads, l.row_stride, l.head_stride);
  if (rows > 1 && l.row_stride < width)
    return attn_fail(st, "%s.row_stride %zu < %s%s%zu", name, l.row_stride, wn, sp, width);
  if (heads > 1 && l.head_stride < width)
    return attn_fail(st, "%s.head_stride %zu < %s%s%zu", name, l.head_stride, wn, sp, width);
  const int rows_inner = l.row_stride < l.head_stride; /* attn_check_output's inner block */
  const size_t s1 = rows_inner ? l.row_stride : l.head_stride, n1 = rows_inner ? rows : heads;
  return attn_fail(st, "%s overlaps itself: %s %zu < (%zu %s - 1) x %s %zu + %s%s%zu = %zu", name,
                   rows_inner ? "head_stride" : "row_stride", rows_inner ? l.head_stride : l.row_stride, n1,
                   rows_inner ? "rows" : "heads", rows_inner ? "row_stride" : "head_stride", s1, wn, sp, width,
                   (n1 - 1) * s1 + width);
}

static size_t max3(size_t a, size_t b, size_t c) { return attn_max_sz(a, attn_max_sz(b, c)); }

attn_status attn_shape_init(attn_shape *s, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t d,
                            size_t dv) {
  if (!s) return attn_fail(ATTN_E_NULL_POINTER, "shape is NULL");
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

/* The first of the shape's sizes that is 0. */
static ATTN_COLD attn_status shape_zero(const attn_shape *s) {
  const size_t v[] = {s->n_q, s->n_kv, s->h_q, s->h_k, s->h_v, s->d, s->dv};
  size_t i = 0;
  while (v[i]) i++;
  const char *name;
  const size_t len = attn_name_at("n_q n_kv h_q h_k h_v d dv", i, &name);
  return attn_fail(ATTN_E_ZERO_SIZE, "shape.%.*s is 0", (int)len, name);
}

static ATTN_COLD attn_status shape_threads(const attn_threads *t) {
  if (!t->parallel_for) return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.threads->parallel_for is NULL");
  return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.threads->workers %zu: must be 1 .. %d (ATTN_MAX_WORKERS)", t->workers,
                   ATTN_MAX_WORKERS);
}

/* The first head count (h_q, h_k, h_v, then h_extra as h_g) that does not divide H. */
static ATTN_COLD attn_status shape_heads(const attn_shape *s, size_t h_extra, size_t H) {
  const size_t v[] = {s->h_q, s->h_k, s->h_v, h_extra};
  size_t i = 0;
  while (H % v[i] == 0) i++;
  const char *name;
  const size_t len = attn_name_at("shape.h_q shape.h_k shape.h_v desc.h_g", i, &name);
  return attn_fail(ATTN_E_BAD_HEADS, "%.*s %zu does not divide the output heads H %zu", (int)len, name, v[i], H);
}

/* Why tensor i (q, k, v, o) of the shape failed its layout check st. It takes the shape, not the
 * values, so that the success path keeps nothing alive for it across the checks' calls. */
static ATTN_COLD attn_status shape_layout(attn_status st, const attn_shape *s, const attn_spans *sp, int i) {
  switch (i) {
    case 0:
      return attn_fail_layout(st, "shape.q", "d", s->n_q, s->h_q, s->d, s->q);
    case 1: /* widths in elements (q8_0: blocks) */
      return attn_fail_layout(st, "shape.k", "d", s->n_kv, s->h_k, attn_dtype_width(s->kv_type, s->d), s->k);
    case 2:
      return attn_fail_layout(st, "shape.v", "dv", s->n_kv, s->h_v, attn_dtype_width(s->kv_type, s->dv), s->v);
    default:
      return attn_fail_layout(st, "shape.o", "dv", s->n_q, sp->H, s->dv, s->o);
  }
}

attn_status attn_shape_check(const attn_shape *s, size_t h_extra, attn_spans *sp) {
  attn_status st;
  if (!s->n_q || !s->n_kv || !s->h_q || !s->h_k || !s->h_v || !s->d || !s->dv) return shape_zero(s);
  if (s->threads && (!s->threads->parallel_for || !s->threads->workers || s->threads->workers > ATTN_MAX_WORKERS))
    return shape_threads(s->threads);
  if (!(sp->kv_elem = attn_dtype_size(s->kv_type)))
    return attn_fail(ATTN_E_BAD_DTYPE, "shape.kv_type %d: not an attn_dtype", (int)s->kv_type);
  if (s->kv_type == ATTN_Q8_0 && (s->d % ATTN_Q8_0_VALUES || s->dv % ATTN_Q8_0_VALUES))
    return attn_fail(ATTN_E_BAD_DTYPE, "shape.kv_type ATTN_Q8_0: d %zu and dv %zu must be multiples of 32", s->d,
                     s->dv);
  if (!(sp->q_elem = attn_act_size(s->q_type)) || !(sp->o_elem = attn_act_size(s->o_type)))
    return attn_fail(ATTN_E_BAD_DTYPE, "shape.q_type %d or o_type %d: not ATTN_F32, ATTN_F16 or ATTN_BF16",
                     (int)s->q_type, (int)s->o_type);
  sp->H = attn_max_sz(max3(s->h_q, s->h_k, s->h_v), h_extra);
  if (sp->H % s->h_q || sp->H % s->h_k || sp->H % s->h_v || (h_extra && sp->H % h_extra))
    return shape_heads(s, h_extra, sp->H);
  if ((st = attn_check_input(s->n_q, s->h_q, s->d, s->q, &sp->q))) return shape_layout(st, s, sp, 0);
  const size_t kw = attn_dtype_width(s->kv_type, s->d), vw = attn_dtype_width(s->kv_type, s->dv);
  if ((st = attn_check_input(s->n_kv, s->h_k, kw, s->k, &sp->k))) return shape_layout(st, s, sp, 1);
  if ((st = attn_check_input(s->n_kv, s->h_v, vw, s->v, &sp->v))) return shape_layout(st, s, sp, 2);
  if (sp->kv_elem > sizeof(float) && (sp->k > PTRDIFF_MAX / sp->kv_elem || sp->v > PTRDIFF_MAX / sp->kv_elem))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "shape.k or shape.v: %zu or %zu blocks of %zu bytes overflow", sp->k, sp->v,
                     sp->kv_elem);
  if ((st = attn_check_output(s->n_q, sp->H, s->dv, s->o, &sp->o))) return shape_layout(st, s, sp, 3);
  return ATTN_OK;
}

/* The first overlap attn_check_io refuses, in its order: output *a with input *b (b < 3: q, k,
 * v) or with output *b - 3. Returns 0 when there is none. */
static inline int io_overlap(const attn_spans *sp, const void *q, const void *k, const void *v, void *const *out,
                             const size_t *out_bytes, size_t n_out, size_t *a, size_t *b) {
  const size_t E = sp->kv_elem; /* spans fit in PTRDIFF_MAX / sizeof(float) */
  const void *in[] = {q, k, v};
  const size_t in_bytes[] = {sp->q * sp->q_elem, sp->k * E, sp->v * E};
  for (*a = 0; *a < n_out; ++*a) {
    if (!out[*a]) continue;
    for (*b = 0; *b < 3; ++*b)
      if (attn_overlap(out[*a], out_bytes[*a], in[*b], in_bytes[*b])) return 1;
    for (*b = *a + 4; *b < n_out + 3; ++*b)
      if (out[*b - 3] && attn_overlap(out[*a], out_bytes[*a], out[*b - 3], out_bytes[*b - 3])) return 1;
  }
  return 0;
}

attn_status attn_check_io(const attn_spans *sp, const void *q, const void *k, const void *v, void *const *out,
                          const size_t *out_bytes, size_t n_out) {
  size_t a, b;
  return io_overlap(sp, q, k, v, out, out_bytes, n_out, &a, &b) ? ATTN_E_ALIASING : ATTN_OK;
}

attn_status attn_fail_io(const char *names, const attn_spans *sp, const void *q, const void *k, const void *v,
                         void *const *out, const size_t *out_bytes, size_t n_out) {
  size_t a, b;
  if (!io_overlap(sp, q, k, v, out, out_bytes, n_out, &a, &b))
    return attn_fail(ATTN_E_ALIASING, "an output overlaps an input or another output");
  const char *a_name, *b_name;
  const int a_len = (int)attn_name_at(names, a, &a_name);
  if (b < 3) return attn_fail(ATTN_E_ALIASING, "%.*s overlaps input %c", a_len, a_name, "qkv"[b]);
  const int b_len = (int)attn_name_at(names, b - 3, &b_name);
  return attn_fail(ATTN_E_ALIASING, "%.*s overlaps output %.*s", a_len, a_name, b_len, b_name);
}

attn_status attn_row_stats_check(const attn_row_stats *s, size_t n_q, size_t heads, size_t *bytes) {
  if (!s) return attn_fail(ATTN_E_NULL_POINTER, "stats is NULL");
  if (!s->entropy && !s->sparsity && !s->count)
    return attn_fail(ATTN_E_NULL_POINTER, "stats.entropy, stats.sparsity and stats.count are all NULL");
  size_t span;
  const attn_status st = attn_check_output(n_q, heads, 1, s->layout, &span);
  if (st) return attn_fail_layout(st, "stats.layout", NULL, n_q, heads, 1, s->layout);
  *bytes = span * sizeof(float);
  const float *a[] = {s->entropy, s->sparsity, s->count};
  static const char *const names[] = {"entropy", "sparsity", "count"};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = i + 1; j < 3; j++)
      if (a[i] && a[j] && attn_overlap(a[i], *bytes, a[j], *bytes))
        return attn_fail(ATTN_E_ALIASING, "stats.%s overlaps output stats.%s", names[i], names[j]);
  return ATTN_OK;
}

attn_status attn_check_checkpoints(const attn_checkpoints *ck, size_t n, size_t state_bytes, size_t *bytes) {
  *bytes = 0;
  if (!ck || !ck->count) return ATTN_OK;
  if (!ck->after || !ck->states) return attn_fail_null("ck->after ck->states", (const void *[]){ck->after, ck->states});
  for (size_t i = 0; i < ck->count; i++) {
    if (ck->after[i] >= n)
      return attn_fail(ATTN_E_BAD_ARGUMENT, "ck->after[%zu] = %zu: not below the call's %zu tokens", i, ck->after[i],
                       n);
    if (i && ck->after[i] <= ck->after[i - 1])
      return attn_fail(ATTN_E_BAD_ARGUMENT, "ck->after[%zu] = %zu after %zu: must increase strictly", i, ck->after[i],
                       ck->after[i - 1]);
  }
  if (!attn_mul_ok(ck->count, state_bytes, bytes))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "%zu checkpoints of %zu bytes overflow size_t", ck->count, state_bytes);
  return ATTN_OK;
}

attn_status attn_check_call_memory(const void *q, const void *k, const void *v, const void *o, const void *workspace,
                                   size_t workspace_size, size_t need) {
  if (!q || !k || !v || !o || !workspace)
    return attn_fail_null("q k v o workspace", (const void *[]){q, k, v, o, workspace});
  if (workspace_size < need) return attn_fail_ws("workspace_size", workspace_size, need);
  return ATTN_OK;
}

attn_status attn_check_extra_inputs(const char *in_names, const void *const *in, const size_t *in_bytes, size_t n_in,
                                    const char *out_names, void *const *out, const size_t *out_bytes, size_t n_out) {
  for (size_t i = 0; i < n_in; i++)
    for (size_t a = 0; in[i] && a < n_out; a++)
      if (out[a] && attn_overlap(in[i], in_bytes[i], out[a], out_bytes[a])) {
        const char *on, *inn;
        const int ol = (int)attn_name_at(out_names, a, &on), il = (int)attn_name_at(in_names, i, &inn);
        return attn_fail(ATTN_E_ALIASING, "%.*s overlaps input %.*s", ol, on, il, inn);
      }
  return ATTN_OK;
}
