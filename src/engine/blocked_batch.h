/* The blocked engine's batches (varlen and paged calls of its variants: ops/batch.c), over its
 * plans and io (engine/blocked.h). */
#ifndef ATTN_ENGINE_BLOCKED_BATCH_H
#define ATTN_ENGINE_BLOCKED_BATCH_H

#include "engine/blocked.h"

/*
 * Batches (varlen and paged calls): B sequences, each its own shape (n_q, n_kv; the batch's heads,
 * widths and strides), plan and io, run in one dispatch. Each sequence's tasks are exactly those
 * of its own call (its plan, made with the batch's threads), so every output bit is that call's.
 * Without threads the sequences run one after another, each as attn_blocked_run_all; with
 * threads one parallel-for takes every sequence's tasks (a split task's ranges one after another
 * on its worker), or, when the whole batch has fewer tasks than workers, every range of every
 * split task (each stored in its slot and folded in order after it, as a single call does).
 */
typedef struct attn_blocked_seq {
  attn_shape shape;
  attn_blocked_plan plan; /* over shape */
  attn_blocked_io io;
  size_t item0; /* its first item of the parallel-for (attn_blocked_batch_place) */
  size_t slot0; /* spread: its split tasks' slots, floats from the batch's slots */
} attn_blocked_seq;

typedef struct attn_blocked_batch {
  attn_blocked_seq *seqs; /* count records, each planned (sequences with n_q = 0 left out) */
  size_t count;
  size_t workers;       /* of the threads every plan was made with */
  size_t worker_floats; /* the largest plan's worker scratch */
  size_t tasks;         /* every plan's tasks */
  size_t split_slots;   /* floats of every split task's range slots */
  int spread;           /* split tasks' ranges in parallel (fewer tasks than workers) */
  size_t items;         /* tasks of the parallel-for */
  size_t slots;         /* floats of the ranges' slots when spread, after the workers' scratch */
} attn_blocked_batch;

/* A batch's sizes, sequence by sequence: start from {0} (seqs NULL), add each plan (the same
 * threads for all), then attn_blocked_batch_bytes; nonzero on overflow. */
ATTN_INTERNAL int attn_blocked_batch_add(attn_blocked_batch *b, const attn_blocked_plan *p);
/* Whether ranges spread, and the workspace of the batch's run from its caller's workspace: a
 * record per sequence added (attn_blocked_seq, in whole 64-byte lines: *rec_bytes), then the
 * engine's floats (the workers' scratch, the slots, each worker's last sequence), with room to
 * align the base to 64 bytes: *bytes in all; nonzero on overflow. */
ATTN_INTERNAL int attn_blocked_batch_bytes(attn_blocked_batch *b, size_t *rec_bytes, size_t *bytes);
/* The records' items and slots (b->seqs set, b->count records, after attn_blocked_batch_bytes). */
ATTN_INTERNAL void attn_blocked_batch_place(attn_blocked_batch *b);

/* Every sequence of a planned batch on the workspace `ws` (the floats after the records). */
ATTN_INTERNAL void attn_blocked_run_batch(const attn_blocked_batch *b, const attn_threads *threads,
                                          const struct attn_ukernels *uk, float *ws);

#endif
