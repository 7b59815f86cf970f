/* Softmax attention's call (ops/softmax.c), shared with its batched form (ops/softmax_batch.c). */
#ifndef ATTN_OPS_SOFTMAX_INTERNAL_H
#define ATTN_OPS_SOFTMAX_INTERNAL_H

#include "engine/blocked_call.h"

/* The options' step parameters (attn_softmax_desc's sinks, ALiBi, bias, cap). */
typedef struct sm_opts {
  const float *sinks, *alibi, *bias;
  attn_layout bl;
  float softcap;
} sm_opts;

/* A validated call planned on the active path, with its options (the step's parameters). */
typedef struct sm_call {
  attn_blocked_call b;
  sm_opts op;
  size_t bias_floats;  /* the bias tensor's span (0: none) */
  size_t scale_floats; /* ATTN_I8: each scale array's span (0: not read) */
} sm_call;

/* Every check of attn_softmax's descriptor, and its plan (c->b.plan over d->shape). */
ATTN_INTERNAL attn_status attn_softmax_prepare(const attn_softmax_desc *d, sm_call *c);
/* A plan of the prepared call's step over another shape (a batch's sequence; paged: K/V in pages). */
ATTN_INTERNAL attn_status attn_softmax_plan(const attn_softmax_desc *d, const sm_call *c, const attn_shape *s,
                                            int paged, attn_blocked_plan *p);
/* ATTN_E_ALIASING when an option array or an int8 scale array (c's spans) overlaps one of the n
 * outputs (names space-separated). */
ATTN_INTERNAL attn_status attn_softmax_check_inputs(const attn_softmax_desc *d, const sm_call *c, const char *out_names,
                                                    void *const *out, const size_t *out_bytes, size_t n);

#endif
