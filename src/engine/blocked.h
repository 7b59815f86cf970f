/*
 * The blocked score engine: every variant whose output row is a weighted sum of value rows, the
 * weights a function of the scores s_ij = scale * q_i . k_j over the keys a mask lets row i see
 * (softmax and sliding-window attention; windowed linear attention, whose scores are
 * phi(q_i) . psi(k_j) with an element-wise feature map; GAU relu^2, FLASH's quadratic part and
 * selective attention plug in their own score step).
 *
 * Per task (one block of query rows x one group of key/value heads; the boundaries depend only on
 * the problem and the path's tunings, never on a thread count):
 *   QT = scale * Q^T of each head's rows, packed once                       (d x R)
 *        (with a feature map: phi(Q)^T, m x R)
 *   for each key block that some row of the block can see:
 *     ST = K_blk QT                       (GEMM micro-kernel, keys x rows; K read in place, or
 *                                          psi(K_blk) written to scratch with a feature map)
 *     boundary blocks: masked pairs -> -inf, and -inf scores of visible pairs -> NaN, so -inf
 *     means "masked" only
 *     P^T, alpha = score step (ST in place, per-row state)                   (the extension point)
 *     acc = diag(alpha) acc + P V_blk     (alpha NULL: acc += P V_blk; V read in place)
 *   each row: the step's epilogue writes o (and one optional float per row, e.g. the LSE).
 * A boundary block whose V holds a non-finite value in a row some token cannot see takes P V per
 * token over that token's visible keys only, so a hidden value never meets its zero weight.
 * When a call has fewer query tokens than a block (decode, short chunks), several heads (as many
 * as keep their state within ~256 KiB) advance through the key blocks together, so K and V stream
 * in memory order.
 */
#ifndef ATTN_ENGINE_BLOCKED_H
#define ATTN_ENGINE_BLOCKED_H

#include "engine/featmap.h"

/*
 * A score step: what turns a block of scores into weights, and per-row state into outputs.
 * Row state is `row_floats` arrays of R floats each (R = rows per block), in one region.
 */
typedef struct attn_score_step {
  size_t row_floats;
  /* Reset the row state of `rows` rows (array stride R) to the empty prefix. */
  void (*init)(float *rs, size_t R, size_t rows);
  /* ST (nk keys x nq rows, stride ld) in place into P^T; update the row state. Returns the
   * per-row factor for acc (diag(alpha) acc + P V) or NULL for plain accumulation. masked:
   * whether ST holds masked (-inf) pairs (see attn_softmax_block_fn). bm: with an exponential
   * feature map, each row's offset of these scores (the true score is st * exp(bm[r]); -inf: the
   * row sees none of these keys), NULL otherwise. */
  const float *(*step)(const struct attn_ukernels *uk, size_t nk, size_t nq, float *st, size_t ld, float *rs, size_t R,
                       int masked, const float *bm);
  /* Row r's outputs from its accumulator (dv floats) and row state: o (dv floats), and the one
   * per-row float `aux` when not NULL. params: the plan's step_params. */
  void (*finish)(const float *acc, const float *rs, size_t R, size_t r, size_t dv, float *o, float *aux,
                 const void *params);
} attn_score_step;

/* The online-softmax score step (ops/softmax.c): row state m, l, alpha; finish writes o = acc / l
 * and the LSE m + log l, zeros and -inf for l = 0, NaN and NaN for l = NaN. Merge uses its finish. */
ATTN_INTERNAL extern const attn_score_step attn_softmax_score_step;

/*
 * Scores through a feature map: s_ij = phi(q_i) . psi(k_j) over m features.
 * Element-wise maps (m = d): phi(Q)^T packed once, psi(K_blk) per key block.
 * Exponential maps (exp, favor, dsoftmax; spec 3.2 and 3.4), exact per row over the keys it sees:
 * the pre-features u of the block's keys are split into sub-blocks (a boundary block where some
 * feature spreads more than ATTN_OFFSET_GUARD; one sub-block otherwise); per sub-block c_f = its
 * keys' largest u_f, psi = exp(u - c) in (e^-40, 1], and each row's offset bm = the largest
 * x_f + u_jf over the keys it sees there (a max-plus pass on boundary blocks, max_f (x_f + c_f)
 * elsewhere), phi = exp(x + c - bm), so a visible score is sum_f exp(x_f + u_jf - bm) <= m and
 * the step's running maximum of bm is the row's exact offset M. A key a row cannot see never
 * enters its offsets, and phi <= e^40 keeps the masked products finite.
 * dsoftmax first sums each token's visible keys per feature (offset c_tf, z_tf, the column
 * softmax's denominator), then runs as above with x_f = q_f - c_tf - log z_tf, so that the score
 * of key j is softmax(q) . (e_j / z) up to a row factor, and the step's normalisation (the weights
 * sum to 1 exactly) removes the factor.
 */
typedef struct attn_blocked_features {
  const attn_featmap *fm;
  attn_fm_args fa;
  size_t m; /* feature size (fm->size of d and the caller's m) */
} attn_blocked_features;

/* A planned call: sizes, mask in positions, per-worker scratch layout. */
typedef struct attn_blocked_plan {
  const attn_shape *shape;
  const attn_score_step *step;
  const void *step_params; /* handed to the step's finish */
  const attn_featmap *fm;  /* NULL: scale * q . k */
  attn_fm_args fa;
  size_t m;    /* features (d without a map) */
  int xm, dsm; /* exponential map; dsoftmax */
  float scale;
  int64_t left, right, chunk; /* mask, clamped to what positions can reach (chunk 0: none) */
  size_t g, tb, R, bc;        /* GQA group, tokens per block, rows per block (tb g), keys per block */
  size_t hg, groups, qblocks; /* heads advancing together, head groups, query blocks */
  size_t off_st, off_heads, head_floats, off_qt, off_acc, off_rs; /* scratch layout, in floats */
  size_t off_kf;                                                  /* feature map: psi(K_blk) */
  size_t off_ku, off_km, off_fms, off_cb, off_tmp;                /* exponential maps: u(K_blk), its running
                                                     maxima, map scratch, c, temp */
  size_t off_uq, off_bm, off_cz;                                  /* per head: u(Q) (R x m), bm (R), dsoftmax c | z */
  size_t scratch_bytes;                                           /* per worker */
} attn_blocked_plan;

/* Plan a call (the shape already validated: h_k == h_v dividing h_q). */
ATTN_INTERNAL attn_status attn_blocked_plan_make(attn_blocked_plan *p, const attn_shape *shape, attn_mask mask,
                                                 float scale, const attn_score_step *step, const void *step_params,
                                                 const attn_blocked_features *feat, const struct attn_ukernels *uk);
/* Tasks of a plan: 0 .. count-1, each independent of the others (disjoint output rows). */
static inline size_t attn_blocked_tasks(const attn_blocked_plan *p) { return p->qblocks * p->groups; }

typedef struct attn_blocked_io {
  const float *q, *k, *v;
  float *o;
  float *aux; /* one float per (query, head), or NULL */
  attn_layout aux_layout;
} attn_blocked_io;

/* Run task `task` with a worker's scratch (scratch_bytes, 64-byte aligned). */
ATTN_INTERNAL void attn_blocked_run(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                    const attn_blocked_io *io, size_t task, float *scratch);

#endif
