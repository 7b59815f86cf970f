/* The blocked engine's call layer (engine/blocked/call.c, stats.c): what the variants over one
 * attn_shape on this engine (softmax, GAU, selective) check, answer and plan alike. */
#ifndef ATTN_ENGINE_BLOCKED_CALL_H
#define ATTN_ENGINE_BLOCKED_CALL_H

#include "engine/blocked.h"

/* A call of a variant over one attn_shape on this engine (softmax, GAU, selective): its spans,
 * the span of its optional one-float-per-row output, its plan and path. */
typedef struct attn_blocked_call {
  attn_spans sp;
  size_t aux_span;
  attn_blocked_plan plan;
  const struct attn_ukernels *uk;
} attn_blocked_call;

/* The checks such variants share, in their order: the shape, int8 K/V only where `int8`
 * (ATTN_E_BAD_DTYPE), h_k == h_v dividing h_q (ATTN_E_BAD_HEADS), a finite scale
 * (ATTN_E_BAD_SCALE), the optional output's layout (aux NULL: none), then the active path
 * (ATTN_E_UNSUPPORTED_ISA). The caller then checks its own fields and makes c->plan. */
ATTN_INTERNAL attn_status attn_blocked_call_check(attn_blocked_call *c, const attn_shape *s, float scale,
                                                  const attn_layout *aux, int int8);

/* The defaults every descriptor of this engine starts from: shape = attn_shape_init's with h_k =
 * h_v = h_kv, *scale = 1/sqrt(dim) rounded from double (1 for dim 0). */
ATTN_INTERNAL void attn_blocked_desc_defaults(attn_shape *shape, float *scale, size_t n_q, size_t n_kv, size_t h_q,
                                              size_t h_kv, size_t dim, size_t dv);

/* A workspace query's answer: st (the variant's checks and plan), then bytes NULL
 * (ATTN_E_NULL_POINTER), else *bytes = p->reserve_bytes (any call of the shape's sizes), or with
 * `call` p->scratch_bytes (this call's own; p is read only when st is ATTN_OK). */
ATTN_INTERNAL attn_status attn_blocked_ws_answer(attn_status st, const attn_blocked_plan *p, int call, size_t *bytes);
/* A variant's two workspace queries (attn.h): name##_workspace_size and name##_call_workspace_size,
 * over prepare(desc, &call) (its checks and plan; call_t's plan at call.plan). */
#define ATTN_BLOCKED_WS_QUERIES(name, desc_t, call_t, prepare, plan)       \
  attn_status name##_workspace_size(const desc_t *d, size_t *bytes) {      \
    call_t c;                                                              \
    return attn_blocked_ws_answer(prepare(d, &c), &c.plan, 0, bytes);      \
  }                                                                        \
  attn_status name##_call_workspace_size(const desc_t *d, size_t *bytes) { \
    call_t c;                                                              \
    return attn_blocked_ws_answer(prepare(d, &c), &c.plan, 1, bytes);      \
  }

/* A statistics call's checks (attn_row_stats_check over the call's n_q x h_q rows: stats NULL or
 * all three arrays NULL, a layout overlapping itself, arrays overlapping each other) and its
 * arrays appended to the call's outputs out[*n ..] (bytes in out_bytes), for attn_check_io. */
ATTN_INTERNAL attn_status attn_blocked_stats_outputs(const attn_blocked_call *c, const attn_row_stats *stats,
                                                     void **out, size_t *out_bytes, size_t *n);

#endif
