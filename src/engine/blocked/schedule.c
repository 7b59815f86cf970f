/* The blocked engine's schedule (attn_blocked_run_all): key ranges, tasks on the calling thread or
 * the shape's threads, a selection's query blocks in order, and the folds of split tasks. */
#include "engine/blocked/internal.h"

/* The key ranges of a task: the plan's split; with a selection, its own: at least
 * BLK_SEL_RANGE_KEYS keys per range (ATTN_SPLIT_KEYS in calls of at most ATTN_SPLIT_TOKENS tokens,
 * as softmax splits them: a few rows' range costs too little to pay for a parallel-for), whole
 * key blocks, BLK_SPLIT_MAX at most (p->split). */
static size_t blk_ranges(const blk_task *t) {
  const attn_blocked_plan *p = t->p;
  if (!p->sel) return p->split;
  int64_t a, b;
  attn_blk_task_keys(t, &a, &b);
  const size_t span = b >= a ? (size_t)(b - a + 1) : 0;
  const size_t keys = p->shape->n_q <= ATTN_SPLIT_TOKENS ? ATTN_SPLIT_KEYS : BLK_SEL_RANGE_KEYS;
  return attn_max_sz(1, attn_min_sz(p->split, attn_min_sz(span / keys, (span + p->bc - 1) / p->bc)));
}

/* Range r of a split task's keys: its share of the key blocks, whole blocks, in order. */
static void blk_range(const blk_task *t, size_t r, int64_t *lo, int64_t *hi) {
  int64_t a, b;
  attn_blk_task_keys(t, &a, &b);
  const int64_t bc = (int64_t)t->p->bc, nb = (b - a + bc) / bc, S = (int64_t)blk_ranges(t);
  const int64_t r0 = (int64_t)r * nb / S, r1 = ((int64_t)r + 1) * nb / S;
  *lo = a + r0 * bc;
  *hi = a + r1 * bc - 1 < b ? a + r1 * bc - 1 : b;
}

/* One task, whole (no split), on a worker's scratch. */
void attn_blk_run_task(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                       size_t task, float *ws) {
  const blk_task t = attn_blk_task_of(p, uk, io, task, ws);
  int64_t lo, hi;
  attn_blk_task_keys(&t, &lo, &hi);
  if (p->pack && lo < (int64_t)p->pack_keys && lo <= hi) attn_blk_pack(&t);
  attn_blk_begin(&t, 1, 1);
  attn_blk_keys(&t, lo, hi);
  attn_blk_end(&t, NULL);
}

/* One range of a split task into the head regions (`queries`: as attn_blk_begin's). */
static blk_task blk_run_range(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                              size_t task, size_t r, float *ws, int queries) {
  const blk_task t = attn_blk_task_of(p, uk, io, task, ws);
  int64_t lo, hi;
  blk_range(&t, r, &lo, &hi);
  attn_blk_begin(&t, r == 0, queries);
  attn_blk_keys(&t, lo, hi);
  return t;
}

/* One task on the calling thread: whole, or its ranges one after another, each folded into the
 * fold region in order (range 0 first), as the threaded fold folds the ranges' slots. The ranges
 * share the scratch, so range 0's queries serve the others: a split plan has no feature map
 * (can_split), and its key blocks only read the scaled Q. */
void attn_blk_run_serial(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                         size_t task, float *ws) {
  blk_task t = attn_blk_task_of(p, uk, io, task, ws);
  const size_t S = blk_ranges(&t);
  if (S == 1) {
    attn_blk_run_task(p, uk, io, task, ws);
    return;
  }
  float *fold = ws + p->wl.fold;
  for (size_t r = 0; r < S; r++) {
    t = blk_run_range(p, uk, io, task, r, ws, r == 0);
    if (r == 0)
      attn_blk_store(&t, fold);
    else
      attn_blk_fold(&t, fold, NULL);
  }
  attn_blk_end(&t, fold);
}

typedef struct blk_par {
  const attn_blocked_plan *p;
  const struct attn_ukernels *uk;
  const attn_blocked_io *io;
  float *ws;
  size_t qb; /* a selection's query block */
} blk_par;

/* Range r of a task stored into its slot (`slots`: the task's first, ranges slot_floats apart). */
void attn_blk_store_range(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                          size_t task, size_t r, float *ws, float *slots) {
  const blk_task t = blk_run_range(p, uk, io, task, r, ws, 1); /* ws last held any task's */
  attn_blk_store(&t, slots + r * p->slot_floats);
}

/* The outputs of a split task from its S ranges' slots, folded in range order (calling thread,
 * on the scratch ws of worker 0). */
void attn_blk_fold_slots(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                         size_t task, size_t S, const float *slots, float *ws) {
  const blk_task t = attn_blk_task_of(p, uk, io, task, ws);
  float *fold = ws + p->wl.fold;
  memcpy(fold, slots, p->slot_floats * sizeof(float));
  for (size_t r = 1; r < S; r++) attn_blk_fold(&t, fold, slots + r * p->slot_floats);
  attn_blk_end(&t, fold);
}

/* Head group G's slots of a call: a query block's groups hold them in turn (one query block
 * runs at a time where ranges split: selection, or a single query block). */
static float *blk_slots(const blk_par *c, size_t task) {
  return c->ws + c->p->slots + (task % c->p->groups) * c->p->split * c->p->slot_floats;
}
static void blk_par_range(const blk_par *c, size_t task, size_t r, float *ws) {
  attn_blk_store_range(c->p, c->uk, c->io, task, r, ws, blk_slots(c, task));
}
static void blk_par_fold(const blk_par *c, size_t task, size_t S) {
  attn_blk_fold_slots(c->p, c->uk, c->io, task, S, blk_slots(c, task), c->ws);
}

/* The i-th task of a plan without a split in a parallel-for's order: the last query blocks first
 * (under a causal mask they cost the most); packed K/V head by head, so that a worker packs a head
 * once for its run of its tasks. */
size_t attn_blk_par_order(const attn_blocked_plan *p, size_t i) {
  const size_t last = p->qblocks - 1;
  return p->pack ? (last - i % p->qblocks) * p->groups + i / p->qblocks : p->qblocks * p->groups - 1 - i;
}

/* A task of the parallel-for: a whole task, or (split) one range stored into its slot. */
static void blk_par_task(void *ctx, size_t i, size_t worker) {
  const blk_par *c = ctx;
  const attn_blocked_plan *p = c->p;
  float *ws = c->ws + worker * p->worker_floats;
  if (p->split == 1) {
    attn_blk_run_task(p, c->uk, c->io, attn_blk_par_order(p, i), ws);
    return;
  }
  blk_par_range(c, i / p->split, i % p->split, ws); /* one query block: task = head group */
}

/* A selection's range r of query block c->qb: every head group's, in order, so that the last
 * group stores F of the range's keys after the others have read it (ranges hold disjoint keys). */
static void blk_par_sel_range(void *ctx, size_t r, size_t worker) {
  const blk_par *c = ctx;
  const attn_blocked_plan *p = c->p;
  for (size_t G = 0; G < p->groups; G++) blk_par_range(c, c->qb * p->groups + G, r, c->ws + worker * p->worker_floats);
}

/* A selection on the calling thread: its query blocks in order, each block's head groups in order
 * (a split task's ranges one after another): the bits of the threaded run (blk_run_select). */
void attn_blk_run_select_serial(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                                float *ws) {
  for (size_t qb = 0; qb < p->qblocks; qb++)
    for (size_t G = 0; G < p->groups; G++) attn_blk_run_serial(p, uk, io, qb * p->groups + G, ws);
}

/* A selection: query blocks in order (F runs along the tokens); with threads, each block's key
 * ranges in parallel, then every head group's fold. Tasks group-major within a block, as the
 * serial order reads F of a key before its last group writes it. */
static void blk_run_select(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                           float *ws) {
  for (size_t qb = 0; qb < p->qblocks; qb++) {
    const blk_task t = attn_blk_task_of(p, uk, io, qb * p->groups, ws);
    const size_t S = blk_ranges(&t);
    if (p->workers > 1 && S > 1) {
      blk_par c = {p, uk, io, ws, qb};
      attn_parallel(p->shape->threads, S, blk_par_sel_range, &c);
      for (size_t G = 0; G < p->groups; G++) blk_par_fold(&c, qb * p->groups + G, S);
      continue;
    }
    for (size_t G = 0; G < p->groups; G++) attn_blk_run_serial(p, uk, io, qb * p->groups + G, ws);
  }
}

void attn_blocked_run_all(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                          float *ws) {
  const size_t tasks = p->qblocks * p->groups, S = p->split;
  for (size_t w = 0; p->pack && w < p->workers; w++) /* no worker holds a packed head yet */
    *(size_t *)(void *)(ws + w * p->worker_floats + p->wl.ptag) = 0;
  if (p->sel) {
    blk_run_select(p, uk, io, ws);
    return;
  }
  if (p->workers > 1) {
    blk_par c = {p, uk, io, ws, 0};
    attn_parallel(p->shape->threads, tasks * S, blk_par_task, &c);
    for (size_t task = 0; S > 1 && task < tasks; task++) blk_par_fold(&c, task, S); /* in range order */
    return;
  }
  /* Tasks are independent (the same bits in any order). Where a head's key rows lie closer
   * together than a token's heads (head-major K/V), or its K and V are packed, one head group's
   * query blocks after another, so that its K and V stay in L2 across them where they fit (and a
   * head is packed once); otherwise (token-major in place: a plan that does not pack, such as a
   * few query blocks) by query block (the rows of one head there fill only a fraction of the
   * cache's sets, and the heads of a token share its pages). */
  const attn_shape *s = p->shape;
  if (s->k.row_stride < s->k.head_stride || p->pack) {
    for (size_t G = 0; G < p->groups; G++)
      for (size_t qb = 0; qb < p->qblocks; qb++) attn_blk_run_serial(p, uk, io, qb * p->groups + G, ws);
    return;
  }
  for (size_t task = 0; task < tasks; task++) attn_blk_run_serial(p, uk, io, task, ws);
}
