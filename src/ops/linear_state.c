/*
 * Linear attention's caller-owned state (attn.h, attn_linear_state: S | z | offset rows per state
 * head, engine/chunkwise.h): the sizes a caller asks of a descriptor, and the state's binding
 * (rows of dv + 2 floats, or on 64-byte lines), reset, copy and shape checks.
 */
#include "ops/linear_internal.h"

/* Sizes a caller can ask for a descriptor: the first three do not depend on the path. */
typedef enum lin_size {
  LIN_FEATURES,
  LIN_STATE_BYTES,
  LIN_STATE_ALIGNED_BYTES,
  LIN_WORKSPACE_BYTES,
  LIN_CHUNK
} lin_size;

attn_status attn_lin_plan_ld(attn_chunkwise_plan *p, size_t ld) {
  size_t hm;
  if (!attn_mul_ok(p->heads, p->m, &hm) || !attn_mul_ok(hm, ld, &p->state_floats) ||
      p->state_floats > SIZE_MAX / sizeof(float))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the state of %zu heads of m %zu rows of %zu floats overflows size_t",
                     p->heads, p->m, ld);
  p->lds = ld;
  return ATTN_OK;
}

static attn_status lin_size_of(const attn_linear_desc *d, lin_size what, size_t *out) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = attn_lin_validate(d, &sp, &p);
  if (st) return st;
  if (!out)
    return attn_fail(ATTN_E_NULL_POINTER, "%s is NULL",
                     what == LIN_FEATURES ? "m"
                     : what == LIN_CHUNK  ? "chunk"
                                          : "bytes");
  if (what == LIN_STATE_ALIGNED_BYTES && (st = attn_lin_plan_ld(&p, attn_lin_ld_aligned(d->shape.dv)))) return st;
  if (what == LIN_FEATURES || what == LIN_STATE_BYTES || what == LIN_STATE_ALIGNED_BYTES) {
    *out = what == LIN_FEATURES ? p.m : p.state_floats * sizeof(float);
    return ATTN_OK;
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
  if (what == LIN_CHUNK) {
    if ((st = attn_chunkwise_plan_make(&p, d->chunk, uk))) return st;
    *out = p.recurrent ? 1 : p.C;
    return ATTN_OK;
  }
  attn_blocked_plan bp;
  attn_lin_ws l;
  if ((st = attn_lin_plan(d, &p, &bp, NULL, uk, &l))) return st;
  *out = l.bytes;
  return ATTN_OK;
}

attn_status attn_linear_feature_size(const attn_linear_desc *d, size_t *m) { return lin_size_of(d, LIN_FEATURES, m); }
attn_status attn_linear_state_size(const attn_linear_desc *d, size_t *bytes) {
  return lin_size_of(d, LIN_STATE_BYTES, bytes);
}
attn_status attn_linear_state_size_aligned(const attn_linear_desc *d, size_t *bytes) {
  return lin_size_of(d, LIN_STATE_ALIGNED_BYTES, bytes);
}
attn_status attn_linear_workspace_size(const attn_linear_desc *d, size_t *bytes) {
  return lin_size_of(d, LIN_WORKSPACE_BYTES, bytes);
}
attn_status attn_linear_chunk_size(const attn_linear_desc *d, size_t *chunk) {
  return lin_size_of(d, LIN_CHUNK, chunk);
}

static size_t state_bytes(const attn_linear_state *s) { return s->heads * s->m * s->ld * sizeof(float); }

/* The state a descriptor's plan describes, bound to data. */
attn_linear_state attn_lin_state_of(const attn_linear_desc *d, const attn_chunkwise_plan *p, float *data) {
  return (attn_linear_state){p->heads, p->m, d->shape.dv, p->lds, d->feature_map, d->normalize, 0, data};
}

/* Bind memory to a state of the descriptor's shape with rows of dv + 2 floats, or (aligned) on
 * 64-byte lines. */
static attn_status lin_state_init(attn_linear_state *s, const attn_linear_desc *d, void *memory, size_t bytes,
                                  int aligned) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = attn_lin_validate(d, &sp, &p);
  if (st) return st;
  if (aligned && (st = attn_lin_plan_ld(&p, attn_lin_ld_aligned(d->shape.dv)))) return st;
  if (!s || !memory) return attn_fail_null("state memory", (const void *[]){s, memory});
  if (aligned && (uintptr_t)memory % 64)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "memory %p: an aligned state needs memory aligned to 64 bytes", memory);
  if (bytes < p.state_floats * sizeof(float)) return attn_fail_ws("bytes", bytes, p.state_floats * sizeof(float));
  *s = attn_lin_state_of(d, &p, (float *)memory);
  memset(memory, 0, p.state_floats * sizeof(float));
  return ATTN_OK;
}

attn_status attn_linear_state_init(attn_linear_state *s, const attn_linear_desc *d, void *memory, size_t bytes) {
  return lin_state_init(s, d, memory, bytes, 0);
}
attn_status attn_linear_state_init_aligned(attn_linear_state *s, const attn_linear_desc *d, void *memory,
                                           size_t bytes) {
  return lin_state_init(s, d, memory, bytes, 1);
}

attn_status attn_linear_state_reset(attn_linear_state *s) {
  if (!s || !s->data) return attn_fail(ATTN_E_NULL_POINTER, "%s is NULL", s ? "state->data" : "state");
  memset(s->data, 0, state_bytes(s));
  s->tokens = 0;
  return ATTN_OK;
}

attn_status attn_lin_state_check(const attn_linear_desc *d, const attn_chunkwise_plan *p, const attn_linear_state *s,
                                 size_t *ld) {
  if (!s->data) return attn_fail(ATTN_E_NULL_POINTER, "state->data is NULL");
  attn_linear_state want = attn_lin_state_of(d, p, NULL);
  want.ld = s->ld == attn_lin_ld_aligned(d->shape.dv) ? s->ld : d->shape.dv + 2; /* either kind of rows */
  if (!attn_lin_state_same_shape(s, &want)) return attn_lin_state_mismatch(s, &want, "state has", "the call needs");
  *ld = s->ld;
  return ATTN_OK;
}

int attn_lin_state_same_shape(const attn_linear_state *a, const attn_linear_state *b) {
  return a->heads == b->heads && a->m == b->m && a->dv == b->dv && a->ld == b->ld && a->feature_map == b->feature_map &&
         a->normalize == b->normalize;
}

/* The first field in which state a differs from b: "<a_is> 2 heads, <b_is> 8", "<a_is> dv 5,
 * <b_is> 6" (b: the state the call needs, or another state). */
ATTN_COLD attn_status attn_lin_state_mismatch(const attn_linear_state *a, const attn_linear_state *b, const char *a_is,
                                              const char *b_is) {
  const size_t x[] = {a->heads, a->m, a->dv, a->ld, (size_t)a->feature_map, (size_t)a->normalize};
  const size_t y[] = {b->heads, b->m, b->dv, b->ld, (size_t)b->feature_map, (size_t)b->normalize};
  size_t i = 0;
  while (i < 5 && x[i] == y[i]) i++;
  if (i == 0) return attn_fail(ATTN_E_STATE_MISMATCH, "%s %zu heads, %s %zu", a_is, x[0], b_is, y[0]);
  const char *what;
  const int len = (int)attn_name_at("heads m dv ld feature_map normalize", i, &what);
  return attn_fail(ATTN_E_STATE_MISMATCH, "%s %.*s %zu, %s %zu", a_is, len, what, x[i], b_is, y[i]);
}

attn_status attn_linear_state_copy(attn_linear_state *dst, const attn_linear_state *src) {
  if (!dst || !src) return attn_fail_null("dst src", (const void *[]){dst, src});
  if (!dst->data || !src->data) return attn_fail(ATTN_E_NULL_POINTER, "%s->data is NULL", dst->data ? "src" : "dst");
  if (!attn_lin_state_same_shape(dst, src)) return attn_lin_state_mismatch(dst, src, "dst has", "src");
  const size_t n = state_bytes(src);
  if (dst->data != src->data) {
    if (attn_overlap(dst->data, n, src->data, n))
      return attn_fail(ATTN_E_ALIASING, "dst->data overlaps src->data (and is not the same)");
    memcpy(dst->data, src->data, n);
  }
  dst->tokens = src->tokens;
  return ATTN_OK;
}
