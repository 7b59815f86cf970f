/* The checks every call of the blocked engine starts with (attn_blocked_call_check). */
#include <math.h>

#include "engine/blocked/internal.h"
#include "engine/blocked_call.h"

attn_status attn_blocked_call_check(attn_blocked_call *c, const attn_shape *s, float scale, const attn_layout *aux,
                                    int int8) {
  attn_status st;
  c->aux_span = 0;
  if ((st = attn_shape_check(s, 0, &c->sp))) return st;
  if (!int8 && (s->kv_type == ATTN_I8 || s->kv_type == ATTN_Q8_0))
    return attn_fail(ATTN_E_BAD_DTYPE,
                     "shape.kv_type %d: int8 K/V are softmax's only (ATTN_F32, ATTN_F16, ATTN_BF16 here)",
                     (int)s->kv_type);
  if (s->h_k != s->h_v)
    return attn_fail(ATTN_E_BAD_HEADS, "shape.h_k %zu != shape.h_v %zu: this variant needs one value head per key head",
                     s->h_k, s->h_v);
  if (c->sp.H != s->h_q)
    return attn_fail(ATTN_E_BAD_HEADS, "shape.h_q %zu < shape.h_k %zu: key heads must divide the query heads", s->h_q,
                     s->h_k);
  if (!isfinite(scale)) return attn_fail(ATTN_E_BAD_SCALE, "desc.scale %g: must be finite", (double)scale);
  if (aux && (st = attn_check_output(s->n_q, s->h_q, 1, *aux, &c->aux_span)))
    return attn_fail_layout(st, "desc.lse", NULL, s->n_q, s->h_q, 1, *aux);
  return (c->uk = attn_dispatch()) ? ATTN_OK : attn_fail_isa();
}

attn_status attn_blocked_ws_answer(attn_status st, const attn_blocked_plan *p, int call, size_t *bytes) {
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = call ? p->scratch_bytes : p->reserve_bytes;
  return ATTN_OK;
}

void attn_blocked_desc_defaults(attn_shape *shape, float *scale, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                                size_t dim, size_t dv) {
  attn_shape_init(shape, n_q, n_kv, h_q, h_kv, h_kv, dim, dv);
  *scale = dim ? (float)(1.0 / sqrt((double)dim)) : 1.0f;
}
