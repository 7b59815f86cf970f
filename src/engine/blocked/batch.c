/* A batch of sequences on the blocked engine (engine/blocked_batch.h, attn_blocked_run_batch): one
 * parallel-for over every sequence's tasks, each run exactly as its own call runs it. */
#include "engine/blocked/internal.h"
#include "engine/blocked_batch.h"

/* Whether a plan runs whole on one worker: a selection over several query blocks or head groups
 * (selective attention: F runs along the tokens, and its head groups must read F of a key before
 * the last one writes it: attn_blk_run_select_serial, the bits of its own call at any threads).
 * One block of one group (a cache's decode step) is a task like any other, its key ranges
 * writing F of disjoint keys. */
static int blk_whole(const attn_blocked_plan *p) { return p->sel && p->qblocks * p->groups > 1; }
/* Tasks of a sequence's plan (query blocks x head groups) and the items they give. */
static size_t blk_tasks(const attn_blocked_plan *p) { return blk_whole(p) ? 1 : p->qblocks * p->groups; }
static size_t blk_items(const attn_blocked_batch *b, const attn_blocked_plan *p) {
  return blk_tasks(p) * (b->spread && !blk_whole(p) ? p->split : 1);
}

int attn_blocked_batch_add(attn_blocked_batch *b, const attn_blocked_plan *p) {
  const size_t tasks = blk_tasks(p);
  size_t f = 0;
  if (p->split > 1 && !blk_whole(p) && !attn_mul_ok(tasks * p->split, p->slot_floats, &f)) return 1; /* split: <= 16 */
  if (!attn_add_ok(b->tasks, tasks, &b->tasks) || !attn_add_ok(b->split_slots, f, &b->split_slots)) return 1;
  b->workers = p->workers;
  b->worker_floats = attn_max_sz(b->worker_floats, p->worker_floats);
  b->count++;
  return 0;
}

/* Whether ranges spread, and the workspace the batch runs in (the workers' scratch, the slots,
 * each worker's last sequence), in floats after a 64-byte aligned base; nonzero on overflow. */
static int blk_batch_size(attn_blocked_batch *b, size_t *floats) {
  /* Ranges in parallel only where the batch's tasks cannot fill the workers (as a single call
   * splits a decode's keys); otherwise a split task's ranges run one after another on its worker,
   * with no slots. The same folds in the same order either way. */
  b->spread = b->workers > 1 && b->tasks < b->workers;
  b->slots = b->spread ? (b->split_slots + 15) / 16 * 16 : 0; /* whole lines: the size_t after */
  size_t all;
  if (b->spread && b->slots < b->split_slots) return 1;
  if (!attn_mul_ok(b->worker_floats, b->workers, &all) || all > SIZE_MAX - b->slots - 2 * ATTN_MAX_WORKERS) return 1;
  *floats = all + b->slots + 2 * b->workers; /* then each worker's last sequence (a size_t in 2 floats) */
  return 0;
}

int attn_blocked_batch_bytes(attn_blocked_batch *b, size_t *rec_bytes, size_t *bytes) {
  size_t floats, rec, fb;
  if (blk_batch_size(b, &floats) || !attn_mul_ok(b->count, sizeof(attn_blocked_seq), &rec) || rec > SIZE_MAX - 63 ||
      !attn_mul_ok(floats, sizeof(float), &fb))
    return 1;
  *rec_bytes = (rec + 63) / 64 * 64;
  return !attn_add_ok(*rec_bytes, fb, bytes) || !attn_add_ok(*bytes, 64, bytes);
}

void attn_blocked_batch_place(attn_blocked_batch *b) {
  size_t items = 0, slots = 0;
  for (size_t i = 0; i < b->count; i++) {
    attn_blocked_seq *q = &b->seqs[i];
    const attn_blocked_plan *p = &q->plan;
    q->item0 = items, q->slot0 = slots;
    items += blk_items(b, p);
    if (b->spread && p->split > 1 && !blk_whole(p)) slots += blk_tasks(p) * p->split * p->slot_floats;
  }
  b->items = items;
}

typedef struct blk_batch_run {
  const attn_blocked_batch *b;
  const struct attn_ukernels *uk;
  float *ws;
} blk_batch_run;

/* The sequence holding item i: the last whose first item is at most i. */
static const attn_blocked_seq *blk_seq_of(const attn_blocked_batch *b, size_t i) {
  size_t lo = 0, hi = b->count - 1;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (b->seqs[mid].item0 <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return &b->seqs[lo];
}

static void blk_batch_item(void *ctx, size_t i, size_t worker) {
  const blk_batch_run *c = ctx;
  const attn_blocked_batch *b = c->b;
  const attn_blocked_seq *q = blk_seq_of(b, i);
  const attn_blocked_plan *p = &q->plan;
  float *ws = c->ws + worker * b->worker_floats;
  const size_t k = i - q->item0;
  /* the worker's packed head (attn_blk_pack): forgotten when it moves to another sequence, whose
   * plan may keep other data where this one keeps its tag */
  size_t *owner = (size_t *)(void *)(c->ws + b->workers * b->worker_floats + b->slots) + worker;
  if (*owner != (size_t)(q - b->seqs) + 1) {
    *owner = (size_t)(q - b->seqs) + 1;
    if (p->pack) *(size_t *)(void *)(ws + p->wl.ptag) = 0;
  }
  if (blk_whole(p))
    attn_blk_run_select_serial(p, c->uk, &q->io, ws);
  else if (p->split == 1)
    attn_blk_run_task(p, c->uk, &q->io, attn_blk_par_order(p, k), ws);
  else if (!b->spread)
    attn_blk_run_serial(p, c->uk, &q->io, k, ws);
  else
    attn_blk_store_range(p, c->uk, &q->io, k / p->split, k % p->split, ws,
                         c->ws + b->workers * b->worker_floats + q->slot0 + k / p->split * p->split * p->slot_floats);
}

void attn_blocked_run_batch(const attn_blocked_batch *b, const attn_threads *threads, const struct attn_ukernels *uk,
                            float *ws) {
  if (b->workers == 1) { /* one after another, each as its own call */
    for (size_t i = 0; i < b->count; i++) attn_blocked_run_all(&b->seqs[i].plan, uk, &b->seqs[i].io, ws);
    return;
  }
  /* no worker has run a sequence yet */
  memset(ws + b->workers * b->worker_floats + b->slots, 0, b->workers * sizeof(size_t));
  blk_batch_run c = {b, uk, ws};
  attn_parallel(threads, b->items, blk_batch_item, &c);
  for (size_t i = 0; b->spread && i < b->count; i++) { /* the split tasks' folds, in range order */
    const attn_blocked_seq *q = &b->seqs[i];
    const attn_blocked_plan *p = &q->plan;
    const float *slots = ws + b->workers * b->worker_floats + q->slot0;
    for (size_t task = 0; p->split > 1 && !blk_whole(p) && task < blk_tasks(p); task++)
      attn_blk_fold_slots(p, uk, &q->io, task, p->split, slots + task * p->split * p->slot_floats, ws);
  }
}
