/* Batched calls of the blocked engine's variants (attn.h, attn_batch: softmax, GAU): the batch's
 * checks, each sequence's shape, io and plan, and the run, written once (ops/batch.c); a variant
 * gives its plan over a sequence's shape and its io beyond q, k, v and o. */
#ifndef ATTN_OPS_BATCH_INTERNAL_H
#define ATTN_OPS_BATCH_INTERNAL_H

#include "engine/blocked_batch.h"

/* A variant's part of a batch. */
typedef struct ob_variant {
  const void *desc, *call; /* its descriptor and its checked call over the whole descriptor */
  /* Its plan over a sequence's shape (paged: K/V in pages), as its own call would make it. */
  attn_status (*plan)(const struct ob_variant *v, const attn_shape *s, int paged, attn_blocked_plan *p);
  float *aux;                       /* one float per packed row and head (softmax's LSE), or NULL */
  attn_layout aux_layout;           /* its layout */
  const float *k_scales, *v_scales; /* ATTN_I8: the scales of the keys in order, or of the pool */
  attn_layout scale_layout;
  size_t scale_floats; /* the scale arrays' span over shape.n_kv keys (0: none) */
} ob_variant;

/* A validated batch: the spans (q and o the descriptor's; k, v and the scales the pool's when
 * paged), the page table's entries read, the longest sequence, the engine's batch and the
 * workspace (the records, then the engine's). */
typedef struct ob_call {
  attn_spans sp;
  size_t scale_floats, table_n, max_kv;
  attn_blocked_batch eb;
  size_t rec_bytes, bytes;
} ob_call;

/* A variant's batch: its part and the batch's. */
typedef struct ob_batch {
  ob_variant v;
  ob_call x;
} ob_batch;
/* A variant's batch call: its checked call over the whole descriptor (call_t), then the batch. */
#define ATTN_OB_CALL(call_t) \
  struct {                   \
    call_t c;                \
    ob_batch b;              \
  }

/* The batch's checks over a validated shape s (spans sp) and each sequence planned for the
 * workspace (every status of attn_softmax_batch's batch arrays). */
ATTN_INTERNAL attn_status attn_ob_prepare(const attn_shape *s, const attn_spans *sp, const attn_batch *bt,
                                          const ob_variant *v, ob_call *x);
/* A batch workspace query's answer: st (the variant's checks, then attn_ob_prepare's), then bytes
 * NULL (ATTN_E_NULL_POINTER), else *bytes = the batch's workspace. */
ATTN_INTERNAL attn_status attn_ob_ws_answer(attn_status st, const ob_batch *b, size_t *bytes);
/* ATTN_E_ALIASING when one of the n outputs (names space-separated) overlaps the batch's arrays. */
ATTN_INTERNAL attn_status attn_ob_check_arrays(const attn_batch *bt, const ob_call *x, const char *out_names,
                                               void *const *out, const size_t *out_bytes, size_t n);
/* Every sequence with query rows, planned into its record on the workspace, run in one dispatch. */
ATTN_INTERNAL void attn_ob_run(const attn_shape *s, const attn_batch *bt, const ob_variant *v, ob_call *x,
                               const struct attn_ukernels *uk, const void *q, const void *k, const void *vv, void *o,
                               void *workspace);

#endif
