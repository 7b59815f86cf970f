/* Shared helpers of the attn libFuzzer targets: see fuzz_common.h. */
#include "fuzz_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#endif
#ifdef FZ_ASAN
#include <sanitizer/asan_interface.h>
#define FZ_POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define FZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FZ_POISON(p, n)   ((void)(p), (void)(n))
#define FZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ------------------------------------------------------------------------------------------ */
/* Reading the fuzz bytes                                                                      */
/* ------------------------------------------------------------------------------------------ */
void fz_init(fz_in *in, const uint8_t *data, size_t size) {
  in->p = data;
  in->n = size < FZ_HEADER_BYTES ? size : FZ_HEADER_BYTES;
  in->pos = 0;
  in->vals = data + in->n;
  in->nvals = size - in->n;
  in->vpos = 0;
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the whole input seeds the value RNG */
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  tu_rng_seed(&in->rng, h);
}

unsigned fz_u8(fz_in *in) { return in->pos < in->n ? in->p[in->pos++] : 0u; }

size_t fz_pick(fz_in *in, size_t count) { return fz_u8(in) % count; }

size_t fz_size(fz_in *in, size_t max) {
  const size_t b = fz_u8(in); /* quadratic: half of the bytes give sizes below max / 4 */
  return 1 + b * b * (max - 1) / (255 * 255);
}

float fz_value(fz_in *in, float lo, float hi) {
  if (in->vpos < in->nvals) return lo + (hi - lo) * (float)in->vals[in->vpos++] / 255.0f;
  return tu_rng_range(&in->rng, lo, hi);
}

/* ------------------------------------------------------------------------------------------ */
/* Failure reports and the environment                                                         */
/* ------------------------------------------------------------------------------------------ */
void fz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "attn fuzz (path %s): ", attn_isa_name(attn_isa_get()));
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

void fz_check_status(const char *what, attn_status got, attn_status want) {
  FZ_CHECK(got == want, "%s: status %d (%s), expected %d (%s)", what, (int)got, attn_status_string(got), (int)want,
           attn_status_string(want));
}

int fz_nonfinite(void) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("ATTN_FUZZ_NONFINITE");
    on = e && strcmp(e, "1") == 0;
  }
  return on;
}

attn_isa fz_set_isa(fz_in *in) {
  attn_isa paths[ATTN_ISA_COUNT];
  size_t count = 0;
  for (int i = ATTN_ISA_AUTO + 1; i < ATTN_ISA_COUNT; ++i)
    if (attn_isa_available((attn_isa)i, NULL)) paths[count++] = (attn_isa)i;
  FZ_CHECK(count > 0, "no runnable ISA path");
  const attn_isa isa = paths[fz_pick(in, count)];
  fz_check_status("attn_isa_set(runnable path)", attn_isa_set(isa), ATTN_OK);
  FZ_CHECK(attn_isa_get() == isa, "attn_isa_get() = %d after attn_isa_set(%d)", (int)attn_isa_get(), (int)isa);
  return isa;
}

/* ------------------------------------------------------------------------------------------ */
/* Expected status                                                                             */
/* ------------------------------------------------------------------------------------------ */
void fz_expect_fault(fz_expect *e, attn_status status) {
  e->faults++;
  e->status = status;
}

void fz_check_expect(const char *what, attn_status got, const fz_expect *e) {
  if (e->faults >= 2) {
    FZ_CHECK(got != ATTN_OK, "%s: returned ATTN_OK with %d faults injected (last: %s)", what, e->faults,
             attn_status_string(e->status));
    return;
  }
  fz_check_status(what, got, e->faults ? e->status : ATTN_OK);
}

int fz_fault_count(fz_in *in) {
  const unsigned b = fz_u8(in);
  return b < 154 ? 0 : (b < 230 ? 1 : 2);
}

/* ------------------------------------------------------------------------------------------ */
/* Shapes and head counts                                                                      */
/* ------------------------------------------------------------------------------------------ */
size_t fz_heads_out(size_t h_q, size_t h_k, size_t h_v) {
  const size_t h = h_q > h_k ? h_q : h_k;
  return h > h_v ? h : h_v;
}

int fz_heads_valid(size_t h_q, size_t h_k, size_t h_v) {
  if (!h_q || !h_k || !h_v) return 0;
  const size_t H = fz_heads_out(h_q, h_k, h_v);
  return H % h_q == 0 && H % h_k == 0 && H % h_v == 0;
}

size_t fz_state_heads(size_t h_k, size_t h_v) { return ref_lcm(h_k, h_v); }

size_t fz_divisor(fz_in *in, size_t h) {
  size_t divs[64], count = 0;
  for (size_t x = 1; x <= h && count < 64; ++x)
    if (h % x == 0) divs[count++] = x;
  return divs[fz_pick(in, count)];
}

void fz_break_heads(fz_in *in, attn_shape *s) {
  size_t *h[3] = {&s->h_q, &s->h_k, &s->h_v};
  const size_t i = fz_pick(in, 3), j = (i + 1 + fz_pick(in, 2)) % 3;
  size_t p = 2 + fz_pick(in, 4);
  do { /* ends: once p exceeds the third count, p does not divide the largest, p + 1 */
    *h[i] = p;
    *h[j] = p + 1;
    ++p;
  } while (fz_heads_valid(s->h_q, s->h_k, s->h_v));
}

void fz_check_ws_query(const char *what, attn_status st, size_t got, size_t need, const fz_expect *e,
                       attn_status null_st) {
  fz_check_expect(what, st, e);
  FZ_CHECK(got == SIZE_MAX || got == need, "workspace_size: %zu here, %zu with the default layouts", got, need);
  if (e->faults == 0) fz_check_status("workspace_size(bytes NULL)", null_st, ATTN_E_NULL_POINTER);
}

attn_isa fz_begin(fz_in *in, const uint8_t *data, size_t size) {
  fz_init(in, data, size);
  return fz_set_isa(in);
}

fz_kv_sizes fz_draw_kv_sizes(fz_in *in, size_t max_n, size_t max_d, size_t max_h, size_t work_limit) {
  fz_kv_sizes z; /* one statement a size: the order of the draws is the bytes' meaning */
  z.h_kv = fz_size(in, max_h);
  z.h_q = z.h_kv * fz_size(in, max_h / z.h_kv);
  z.n_q = fz_size(in, max_n);
  z.n_kv = fz_size(in, max_n);
  z.d = fz_size(in, max_d);
  z.dv = fz_size(in, max_d);
  while (z.n_q * z.n_kv * z.h_q * (z.d + z.dv) > work_limit) {
    if (z.n_q >= z.n_kv)
      z.n_q = (z.n_q + 1) / 2;
    else
      z.n_kv = (z.n_kv + 1) / 2;
  }
  return z;
}

void fz_check_shape_defaults(const char *what, const attn_shape *s, size_t n_q, size_t n_kv, size_t h_q, size_t h_k,
                             size_t h_v, size_t d, size_t dv) {
  FZ_CHECK(
      s->n_q == n_q && s->n_kv == n_kv && s->h_q == h_q && s->h_k == h_k && s->h_v == h_v && s->d == d && s->dv == dv,
      "%s: sizes not copied", what);
  const attn_layout want[4] = {tu_layout(TU_TOKEN_MAJOR, n_q, h_q, d), tu_layout(TU_TOKEN_MAJOR, n_kv, h_k, d),
                               tu_layout(TU_TOKEN_MAJOR, n_kv, h_v, dv),
                               tu_layout(TU_TOKEN_MAJOR, n_q, fz_heads_out(h_q, h_k, h_v), dv)};
  const attn_layout got[4] = {s->q, s->k, s->v, s->o};
  for (int i = 0; i < 4; ++i)
    FZ_CHECK(got[i].row_stride == want[i].row_stride && got[i].head_stride == want[i].head_stride,
             "%s: layout %d is {%zu, %zu}, not token-major {%zu, %zu}", what, i, got[i].row_stride, got[i].head_stride,
             want[i].row_stride, want[i].head_stride);
}

void fz_call_bind(fz_call *c, attn_shape *shape, attn_layout *lse, const fz_qkv *x, const tu_tensor *o, void *ws,
                  size_t ws_bytes) {
  c->shape = shape;
  attn_layout *const l[5] = {&shape->q, &shape->k, &shape->v, &shape->o, lse};
  const tu_tensor *t[4] = {&x->q, &x->k, &x->v, o};
  for (int i = 0; i < 5; ++i) {
    c->l[i] = l[i];
    c->ln[i] = i < 4 ? t[i]->n : x->q.n; /* lse: a row per query token and query head */
    c->lh[i] = i < 4 ? t[i]->h : x->q.h;
    c->lw[i] = i < 4 ? t[i]->w : 1;
  }
  c->q = x->q.data;
  c->k = x->k.data;
  c->v = x->v.data;
  c->o = o->data;
  c->ws = ws;
  c->ws_bytes = ws_bytes;
}

void fz_scale_fault(fz_in *in, fz_call *c, float *scale) {
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  *scale = bad[fz_pick(in, 3)];
  fz_expect_fault(&c->query, ATTN_E_BAD_SCALE);
  fz_expect_fault(&c->call, ATTN_E_BAD_SCALE);
}

void fz_kv_heads_fault(fz_in *in, fz_call *c) {
  attn_shape *s = c->shape;
  if (s->h_k != s->h_v || (s->h_k == 1 && s->h_q <= 1)) return;
  if (s->h_k > 1) {
    const size_t g = fz_divisor(in, s->h_k);
    switch (fz_pick(in, 3)) {
      case 0:
        s->h_q = g < s->h_k ? g : 1;
        break; /* H = h_k > h_q */
      case 1:
        s->h_k = 1;
        break;
      default:
        s->h_v = 1;
        break;
    }
  } else {
    const int key = fz_u8(in) & 1; /* h_k or h_v = h_q, the other 1 */
    *(key ? &s->h_k : &s->h_v) = s->h_q;
    attn_layout *l = key ? &s->k : &s->v;
    l->head_stride = key ? s->d : s->dv; /* its head stride was free with one head */
  }
  fz_expect_fault(&c->query, ATTN_E_BAD_HEADS);
  fz_expect_fault(&c->call, ATTN_E_BAD_HEADS);
}

/* A stride fault on layout i of c: below the width, or huge (the span overflows). */
static int break_stride(fz_in *in, fz_call *c, size_t i, int overflow) {
  attn_layout *l = c->l[i];
  if (!l || (c->ln[i] == 1 && c->lh[i] == 1)) return 0;
  size_t *s = c->ln[i] > 1 && (c->lh[i] == 1 || (fz_u8(in) & 1)) ? &l->row_stride : &l->head_stride;
  *s = overflow ? SIZE_MAX / 2 + fz_u8(in) : fz_pick(in, c->lw[i]);
  return 1;
}

void fz_common_fault(fz_in *in, fz_call *c, int fault) {
  switch (fault) {
    case FZ_NULL_DESC:
      c->null_desc = 1;
      fz_expect_fault(&c->query, ATTN_E_NULL_POINTER);
      fz_expect_fault(&c->call, ATTN_E_NULL_POINTER);
      return;
    case FZ_NULL_POINTER:
      switch (fz_pick(in, 5)) {
        case 0:
          c->q = NULL;
          break;
        case 1:
          c->k = NULL;
          break;
        case 2:
          c->v = NULL;
          break;
        case 3:
          c->o = NULL;
          break;
        default:
          c->ws = NULL;
          break;
      }
      fz_expect_fault(&c->call, ATTN_E_NULL_POINTER);
      return;
    case FZ_ZERO_SIZE: {
      attn_shape *s = c->shape;
      size_t *sizes[7] = {&s->n_q, &s->n_kv, &s->h_q, &s->h_k, &s->h_v, &s->d, &s->dv};
      *sizes[fz_pick(in, 7)] = 0;
      fz_expect_fault(&c->query, ATTN_E_ZERO_SIZE);
      fz_expect_fault(&c->call, ATTN_E_ZERO_SIZE);
      return;
    }
    case FZ_BAD_HEADS:
      fz_break_heads(in, c->shape);
      fz_expect_fault(&c->query, ATTN_E_BAD_HEADS);
      fz_expect_fault(&c->call, ATTN_E_BAD_HEADS);
      return;
    case FZ_BAD_STRIDE:
    case FZ_OVERFLOW: {
      const size_t i = fz_pick(in, 5);
      const int overflow = fault == FZ_OVERFLOW;
      if (!break_stride(in, c, i, overflow)) {
        if (!overflow) return;
        c->shape->n_q = SIZE_MAX / 2; /* q is checked first: its span overflows whatever its strides */
        if (c->shape->q.row_stride < c->shape->d) c->shape->q.row_stride = c->shape->d;
      }
      const attn_status st = overflow ? ATTN_E_SIZE_OVERFLOW : ATTN_E_BAD_STRIDE;
      fz_expect_fault(&c->query, st);
      fz_expect_fault(&c->call, st);
      return;
    }
    case FZ_ALIAS:
      switch (fz_pick(in, 4)) {
        case 0:
          c->o = (float *)c->q;
          break;
        case 1:
          c->o = (float *)c->v;
          break;
        case 2:
          c->ws = (void *)c->k;
          break;
        default:
          c->ws = c->o;
          break;
      }
      fz_expect_fault(&c->call, ATTN_E_ALIASING);
      return;
    case FZ_WS_SMALL:
      c->ws_bytes = fz_pick(in, 256) * c->ws_bytes / 256;
      fz_expect_fault(&c->call, ATTN_E_WORKSPACE_TOO_SMALL);
      return;
    default:
      return;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Layouts                                                                                     */
/* ------------------------------------------------------------------------------------------ */
/* A stride for a dimension of count 1, which the library must ignore. */
static size_t free_stride(fz_in *in, size_t w) {
  const size_t pick[5] = {0, 1, w - 1, SIZE_MAX / 3, SIZE_MAX};
  return pick[fz_pick(in, 5)];
}

/* One side of a mask. */
static size_t mask_side(fz_in *in, size_t max_n) {
  switch (fz_pick(in, 6)) {
    case 0:
      return ATTN_UNBOUNDED;
    case 1:
      return 0;
    case 2:
      return SIZE_MAX - 1 - fz_u8(in); /* huge but not ATTN_UNBOUNDED: clamped by the library */
    default:
      return fz_u8(in) % max_n;
  }
}

attn_mask fz_mask(fz_in *in, size_t max_n) {
  attn_mask m; /* one statement a field: the order of the draws is the bytes' meaning */
  m.left = mask_side(in, max_n);
  m.right = mask_side(in, max_n);
  switch (fz_pick(in, 6)) { /* the chunk-local width */
    case 3:
      m.chunk = 1 + fz_u8(in) % 16;
      break;
    case 4:
      m.chunk = fz_size(in, max_n);
      break;
    case 5:
      m.chunk = SIZE_MAX - fz_u8(in) % 2;
      break;
    default:
      m.chunk = 0;
      break;
  }
  return m;
}

attn_layout fz_layout(fz_in *in, size_t n, size_t h, size_t w, int output) {
  const unsigned kind = fz_u8(in) % 6;
  if (kind < 4) {
    const tu_layout_kind kinds[4] = {TU_TOKEN_MAJOR, TU_HEAD_MAJOR, TU_PADDED, TU_HEAD_PADDED};
    return tu_layout(kinds[kind], n, h, w);
  }
  attn_layout l = tu_layout(TU_TOKEN_MAJOR, n, h, w);
  if (kind == 5) {
    if (n == 1) l.row_stride = free_stride(in, w);
    if (h == 1) l.head_stride = free_stride(in, w);
    return l;
  }
  if (!output) { /* any strides >= w: rows and heads may overlap one another */
    l.row_stride = w + fz_pick(in, 64);
    l.head_stride = w + fz_pick(in, 64);
    return l;
  }
  /* An inner dimension with a padded stride, the outer one just past it (sometimes short of it). */
  const int heads_inner = fz_u8(in) & 1;
  const size_t inner_count = heads_inner ? h : n;
  const size_t inner = w + fz_pick(in, 8);
  const size_t outer_min = (inner_count - 1) * inner + w;
  const size_t shrink = fz_pick(in, 4) == 0 ? fz_pick(in, 2 * w + 1) : 0;
  const size_t outer = outer_min + fz_pick(in, 8) - (shrink < outer_min ? shrink : outer_min - 1);
  l.head_stride = heads_inner ? inner : outer;
  l.row_stride = heads_inner ? outer : inner;
  return l;
}

/* The header's output-layout rule, as attn_check_output applies it: every stride of a dimension
 * of count > 1 at least the width, and with both counts > 1 the larger stride at least
 * (count of the smaller-stride dimension - 1) x smaller stride + width. */
static int header_rule_ok(size_t n, size_t h, size_t w, attn_layout l) {
  if ((n > 1 && l.row_stride < w) || (h > 1 && l.head_stride < w)) return 0;
  if (n == 1 || h == 1) return 1;
  const int rows_inner = l.row_stride < l.head_stride;
  const size_t s1 = rows_inner ? l.row_stride : l.head_stride, n1 = rows_inner ? n : h;
  const size_t s2 = rows_inner ? l.head_stride : l.row_stride;
  return (s2 - w) / s1 >= n1 - 1; /* s2 >= s1 >= w */
}

/* Exact: mark every element (test sizes keep the span small). A layout with a stride below the
 * width overlaps whenever its count is above 1. */
static int overlaps(size_t n, size_t h, size_t w, attn_layout l) {
  if ((n > 1 && l.row_stride < w) || (h > 1 && l.head_stride < w)) return 1;
  if (n == 1 || h == 1) return 0;
  const size_t span = tu_span(n, h, w, l);
  unsigned char *mark = fz_calloc(span, 1);
  int hit = 0;
  for (size_t i = 0; i < n && !hit; ++i)
    for (size_t j = 0; j < h && !hit; ++j)
      for (size_t c = 0; c < w && !hit; ++c) {
        unsigned char *m = mark + i * l.row_stride + j * l.head_stride + c;
        hit = *m;
        *m = 1;
      }
  free(mark);
  return hit;
}

void fz_expect_output_layout(fz_expect *e, size_t n, size_t h, size_t w, attn_layout l) {
  const int ok = header_rule_ok(n, h, w, l);
  FZ_CHECK(!ok || !overlaps(n, h, w, l), "harness: the header's rule accepts an overlapping layout");
  if (!ok) fz_expect_fault(e, ATTN_E_BAD_STRIDE);
}

/* ------------------------------------------------------------------------------------------ */
/* Snapshots                                                                                   */
/* ------------------------------------------------------------------------------------------ */
void fz_snap_take(fz_snap *s, const void *p, size_t bytes) {
  s->p = p;
  s->bytes = bytes;
  s->copy = fz_calloc(bytes, 1);
  if (bytes) memcpy(s->copy, p, bytes);
}

void fz_snap_check(const fz_snap *s, const char *what) {
  if (!s->copy || s->bytes == 0 || memcmp(s->copy, s->p, s->bytes) == 0) return;
  size_t i = 0;
  while (((const unsigned char *)s->copy)[i] == ((const unsigned char *)s->p)[i]) ++i;
  fz_fail("%s changed: first at byte %zu of %zu", what, i, s->bytes);
}

void fz_snap_free(fz_snap *s) {
  free(s->copy);
  s->copy = NULL;
}

void fz_watch_take(fz_watch *w, const tu_tensor *o, const tu_tensor *lse, const void *ws, size_t need) {
  w->o_owner = o->owner;
  w->lse_owner = lse ? lse->owner : NULL;
  w->ws_owner = ws;
  fz_snap_take(&w->o, o->owner, sizeof(float) * o->span);
  fz_snap_take(&w->lse, w->lse_owner, lse ? sizeof(float) * lse->span : 0);
  fz_snap_take(&w->ws, ws, need);
}

void fz_watch_check(const fz_watch *w, const char *what, attn_status st, const fz_expect *e, const fz_qkv *x) {
  fz_check_expect(what, st, e);
  fz_qkv_check_unchanged(x);
  FZ_CHECK(fz_guards_intact(w->ws_owner), "workspace guard zone written");
  if (st == ATTN_OK) return;
  fz_snap_check(&w->o, "o after an error");
  fz_snap_check(&w->lse, "lse after an error");
  fz_snap_check(&w->ws, "workspace after an error");
  FZ_CHECK(fz_guards_intact(w->o_owner) && (!w->lse_owner || fz_guards_intact(w->lse_owner)),
           "guard zone written on error");
}

void fz_watch_free(fz_watch *w) {
  fz_snap_free(&w->o);
  fz_snap_free(&w->lse);
  fz_snap_free(&w->ws);
}

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */
static void tensor_set(tu_tensor *t, float *data, size_t n, size_t h, size_t w, attn_layout l) {
  *t = (tu_tensor){data, n, h, w, l, tu_span(n, h, w, l), NULL, 0};
}

static float *input_buffer(size_t floats) {
  float *p = fz_calloc(floats, sizeof(float));
  tu_fill_sentinel(p, floats);
  return p;
}

size_t fz_float_size(attn_dtype t) { return t == ATTN_F32 ? 4 : 2; }

void fz_draw_typed(fz_in *in, attn_dtype t, void *dst, size_t n, float amp) {
  float *x = fz_calloc(n ? n : 1, sizeof(float));
  for (size_t e = 0; e < n; e++) x[e] = fz_value(in, -amp, amp);
  if (t == ATTN_F32) memcpy(dst, x, n * sizeof(float));
  if (t == ATTN_F16) fz_check_status("f32_to_f16", attn_f32_to_f16(x, dst, n), ATTN_OK);
  if (t == ATTN_BF16) fz_check_status("f32_to_bf16", attn_f32_to_bf16(x, dst, n), ATTN_OK);
  free(x);
}

void fz_tensor_fill(fz_in *in, tu_tensor *t, float lo, float hi) {
  for (size_t i = 0; i < t->n; ++i)
    for (size_t h = 0; h < t->h; ++h)
      for (size_t c = 0; c < t->w; ++c) *tu_at(t, i, h, c) = fz_value(in, lo, hi);
}

void fz_output_alloc(fz_in *in, tu_tensor *t, size_t n, size_t h, size_t w, attn_layout l) {
  tensor_set(t, NULL, n, h, w, l);
  t->guarded = 1;
  t->owner = fz_alloc(sizeof(float) * t->span, sizeof(float) * fz_pick(in, 16));
  t->data = t->owner;
}

int fz_row_nonfinite(const tu_tensor *t, size_t token, size_t head) {
  for (size_t c = 0; c < t->w; ++c)
    if (!isfinite(*tu_at(t, token, head, c))) return 1;
  return 0;
}

void fz_inject_nonfinite(fz_in *in, tu_tensor *t) {
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  for (size_t k = fz_pick(in, 4); k > 0; --k) {
    const size_t i = fz_pick(in, 256) % t->n, h = fz_pick(in, 256) % t->h, c = fz_pick(in, 256) % t->w;
    *tu_at(t, i, h, c) = bad[fz_pick(in, 3)];
  }
}

void fz_qkv_alloc(fz_in *in, fz_qkv *x, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t d,
                  size_t dv) {
  memset(x, 0, sizeof *x);
  if (n_q == n_kv && fz_pick(in, 5) == 0) { /* packed QKV: one row holds q, k and v of a token */
    const size_t row = h_q * d + h_k * d + h_v * dv;
    const attn_layout lq = {row, d}, lk = {row, d}, lv = {row, dv};
    x->packed = input_buffer(tu_span(n_q, 1, row, lq));
    tensor_set(&x->q, x->packed, n_q, h_q, d, lq);
    tensor_set(&x->k, x->q.data + h_q * d, n_kv, h_k, d, lk);
    tensor_set(&x->v, x->k.data + h_k * d, n_kv, h_v, dv, lv);
    return;
  }
  tu_tensor *t[3] = {&x->q, &x->k, &x->v};
  const size_t n[3] = {n_q, n_kv, n_kv}, h[3] = {h_q, h_k, h_v}, w[3] = {d, d, dv};
  for (int i = 0; i < 3; ++i) {
    const attn_layout l = fz_layout(in, n[i], h[i], w[i], 0);
    tensor_set(t[i], NULL, n[i], h[i], w[i], l);
    t[i]->owner = t[i]->data = input_buffer(t[i]->span);
  }
}

void fz_qkv_make(fz_in *in, fz_qkv *x, attn_shape *s, float lo, float hi, float vamp) {
  fz_qkv_alloc(in, x, s->n_q, s->n_kv, s->h_q, s->h_k, s->h_v, s->d, s->dv);
  s->q = x->q.l;
  s->k = x->k.l;
  s->v = x->v.l;
  fz_tensor_fill(in, &x->q, lo, hi);
  fz_tensor_fill(in, &x->k, lo, hi);
  fz_tensor_fill(in, &x->v, -vamp, vamp);
  if (fz_nonfinite()) {
    fz_inject_nonfinite(in, &x->q);
    fz_inject_nonfinite(in, &x->k);
    fz_inject_nonfinite(in, &x->v);
  }
  fz_qkv_snapshot(x);
}

void fz_qkv_snapshot(fz_qkv *x) {
  tu_tensor *t[3] = {&x->q, &x->k, &x->v};
  for (int i = 0; i < 3; ++i) fz_snap_free(&x->snap[i]);
  if (x->packed) { /* one buffer, from the first q element to the end of the last v row */
    fz_snap_take(&x->snap[0], x->packed, sizeof(float) * (size_t)(x->v.data + x->v.span - x->q.data));
    return;
  }
  for (int i = 0; i < 3; ++i) fz_snap_take(&x->snap[i], t[i]->data, sizeof(float) * t[i]->span);
}

void fz_qkv_check_unchanged(const fz_qkv *x) {
  const char *names[3] = {"input q", "input k", "input v"};
  for (int i = 0; i < 3; ++i) fz_snap_check(&x->snap[i], x->packed ? "packed QKV input" : names[i]);
}

void fz_qkv_free(fz_qkv *x) {
  for (int i = 0; i < 3; ++i) fz_snap_free(&x->snap[i]);
  free(x->packed);
  fz_tensor_free(&x->q);
  fz_tensor_free(&x->k);
  fz_tensor_free(&x->v);
}

void fz_check_output_clean(const char *what, const tu_tensor *t) {
  FZ_CHECK(fz_guards_intact(t->owner), "%s: the library wrote into a guard zone", what);
  unsigned char *mark = fz_calloc(t->span, 1);
  for (size_t i = 0; i < t->n; ++i)
    for (size_t h = 0; h < t->h; ++h) memset(mark + (tu_at(t, i, h, 0) - t->data), 1, t->w);
  for (size_t e = 0; e < t->span; ++e) {
    uint32_t bits;
    memcpy(&bits, t->data + e, sizeof bits);
    FZ_CHECK(mark[e] || bits == TU_SENTINEL_BITS, "%s: gap element %zu of the strided output was written", what, e);
  }
  free(mark);
}

/* ------------------------------------------------------------------------------------------ */
/* Comparison                                                                                  */
/* ------------------------------------------------------------------------------------------ */
void fz_compare(const char *what, const tu_tensor *got, const double *ref, const double *scale, const double *tol,
                const unsigned char *skip_rows) {
  size_t e = 0;
  for (size_t i = 0; i < got->n; ++i)
    for (size_t h = 0; h < got->h; ++h)
      for (size_t c = 0; c < got->w; ++c, ++e) {
        const size_t row = i * got->h + h;
        const double g = (double)*tu_at(got, i, h, c), r = ref[e];
        const double bound = tol[row] * (scale ? scale[e] : 1.0);
        int ok;
        if (skip_rows && skip_rows[row]) continue;
        if (!isfinite(r))
          ok = isnan(r) ? isnan(g) : g == r;
        else
          ok = fabs(g - r) <= bound; /* false for NaN */
        FZ_CHECK(ok, "%s: token %zu head %zu col %zu: got %.9g, reference %.9g, |err| %.3g > bound %.3g", what, i, h, c,
                 g, r, fabs(g - r), bound);
      }
}

/* Guarded blocks: [header: raw pointer, body bytes][front guard][body][back guard], the body at
 * 64-byte alignment + misalign. Guard byte i holds GUARD_BYTE(i). */
#define GUARD_BYTE(i) ((unsigned char)(0x5Au ^ (unsigned)(i)))
typedef struct fz_block {
  void *raw;
  size_t bytes;
} fz_block;

/* The header, at any alignment (the body may be misaligned). */
static fz_block block_of(const void *p) {
  fz_block b;
  memcpy(&b, (const unsigned char *)p - FZ_GUARD_BYTES - sizeof b, sizeof b);
  return b;
}

void *fz_alloc(size_t bytes, size_t misalign) {
  const size_t lead = (sizeof(fz_block) + FZ_GUARD_BYTES + 63) / 64 * 64 + misalign % 64;
  unsigned char *raw = fz_calloc(lead + bytes + FZ_GUARD_BYTES + 64, 1);
  unsigned char *p = (unsigned char *)(((uintptr_t)raw + 63) & ~(uintptr_t)63) + lead;
  const fz_block blk = {raw, bytes};
  memcpy(p - FZ_GUARD_BYTES - sizeof blk, &blk, sizeof blk);
  for (size_t i = 0; i < FZ_GUARD_BYTES; ++i) p[-1 - (ptrdiff_t)i] = p[bytes + i] = GUARD_BYTE(i);
  const uint32_t sentinel = TU_SENTINEL_BITS; /* p may be misaligned for a float: byte copies */
  for (size_t i = 0; i + sizeof sentinel <= bytes; i += sizeof sentinel) memcpy(p + i, &sentinel, sizeof sentinel);
  FZ_POISON(p - FZ_GUARD_BYTES, FZ_GUARD_BYTES);
  FZ_POISON(p + bytes, FZ_GUARD_BYTES);
  return p;
}

int fz_guards_intact(const void *p) {
  const unsigned char *b = p;
  const size_t bytes = block_of(p).bytes;
  FZ_UNPOISON(b - FZ_GUARD_BYTES, FZ_GUARD_BYTES);
  FZ_UNPOISON(b + bytes, FZ_GUARD_BYTES);
  int ok = 1;
  for (size_t i = 0; i < FZ_GUARD_BYTES; ++i)
    ok &= b[-1 - (ptrdiff_t)i] == GUARD_BYTE(i) && b[bytes + i] == GUARD_BYTE(i);
  FZ_POISON(b - FZ_GUARD_BYTES, FZ_GUARD_BYTES);
  FZ_POISON(b + bytes, FZ_GUARD_BYTES);
  return ok;
}

void fz_free(void *p) {
  if (!p) return;
  const fz_block blk = block_of(p);
  FZ_UNPOISON((unsigned char *)p - FZ_GUARD_BYTES, FZ_GUARD_BYTES);
  FZ_UNPOISON((unsigned char *)p + blk.bytes, FZ_GUARD_BYTES);
  free(blk.raw);
}

void fz_tensor_free(tu_tensor *t) {
  if (t->guarded)
    fz_free(t->owner);
  else
    free(t->owner);
  t->owner = t->data = NULL;
}

void *fz_calloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  FZ_CHECK(p != NULL, "out of memory (%zu x %zu bytes)", count, size);
  return p;
}

double *fz_doubles(size_t count) { return fz_calloc(count, sizeof(double)); }

void fz_free_all(void *const *p, size_t count) {
  for (size_t i = 0; i < count; ++i) free(p[i]);
}
