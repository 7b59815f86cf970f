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
 * Per-row statistics (attn.h, analysis; io.stats): the step's kernel also accumulates, in more
 * row state, the running sums W = sum w, sum w^2 and sum w log w of the row's weights (the
 * weights themselves are never stored), and each row's entropy log W - (sum w log w) / W and
 * sparsity W / sqrt(n sum w^2) come from them at the end, n the row's visible keys from the
 * mask. Same pass, no n x n buffer; without io.stats nothing of it runs.
 * A boundary block whose V holds a non-finite value in a row some token cannot see takes P V per
 * token over that token's visible keys only, so a hidden value never meets its zero weight.
 * K and V stored as fp16, bf16 or int8 (attn_shape.kv_type; int8: ATTN_I8 with io's scales per
 * row, ATTN_Q8_0 blocks): per key block and head, the block's V rows
 * are converted (the path's f16_cvt / bf16_cvt kernel) into fp32 scratch of bc x dv floats, and
 * its K rows 24 keys at a time into scratch of 24 x d floats (L1-resident), each chunk's rows of
 * ST computed at once; the GEMM, the step and P V run on the scratch as they would on fp32 K and
 * V read in place (the hidden-V check included), with the fp32 call's results: a decode streams
 * each block once, reading half the bytes; the selection GEMM of a task without h_sel's key head
 * converts that head's K the same way. Feature maps (linear attention) take fp32 only.
 * Packed K/V: where a head's key rows are not contiguous fp32 (token-major with several heads:
 * a row of every head between two of one head's, or half types) and a call has several query
 * blocks, a worker copies the first BLK_PACK_KEYS keys of the task's key head into its scratch
 * (converted to fp32) when it first takes a task of that head, and every query block of the head
 * reads them from there; tasks run head by head (blocked/schedule.c). One head's rows 2 KiB apart
 * (8 heads of 64) fill 1/8 of the cache's sets and 1/8 of every page, so its K and V neither stay
 * in L2 across query blocks nor stream well; packed, they run as fast as head-major K/V (a half
 * K/V converted once per head instead of once per query block; measured: f2e37fa). Below
 * BLK_PACK_MIN_QBLOCKS query blocks the copy does not pay. The same values are read in the same
 * order: the same bits.
 * When a call has fewer query tokens than a block (decode, short chunks), and in every selective
 * call (so that F is computed once per key block), several heads (as many as keep their state
 * within ~256 KiB) advance through the key blocks together, so K and V stream in memory order.
 * With threads, a few-rows call (at most BLK_FEW_ROWS rows per key head) whose key ranges give
 * fewer tasks than workers takes its heads in one group per worker instead (heads are independent:
 * the same bits). The workspace query reserves for every n_q and n_kv (reserve_bytes); a call lays
 * out only what its own plan uses (scratch_bytes: a decode's rows, packing only where it packs).
 * The code: engine/blocked/, one file per concern (engine/blocked/internal.h lists them).
 */
#ifndef ATTN_ENGINE_BLOCKED_H
#define ATTN_ENGINE_BLOCKED_H

#include "engine/act.h"
#include "engine/featmap.h"

/* A block of scores handed to a score step: ST (nk keys x nq rows, stride ld), whose row jj is
 * key j0 + jj and column r query token p0 + r / g (absolute positions, bottom-right), with the
 * plan's step parameters. */
typedef struct attn_step_block {
  float *st;
  size_t nk, nq, ld;
  int masked;         /* ST holds masked (-inf) pairs (see attn_softmax_block_fn) */
  const float *bm;    /* exponential feature maps: each row's offset of these scores (the true score
                       is st * exp(bm[r]); -inf: the row sees none of these keys); NULL otherwise */
  int64_t j0, p0;     /* positions of the first key and of the first column's token */
  size_t g;           /* columns per query token (the GQA group) */
  size_t h, t;        /* column r is query head h + r % g of token t + r / g (the caller's rows:
                         io.t_base + the call's token) */
  const void *params; /* the plan's step_params */
  float *strip;       /* a step with `strip`: (keys per block + 2 tokens per block) * g floats */
  int stats;          /* the call wants statistics: the step's kernel accumulates them too */
} attn_step_block;

/* Which rows a row state holds, for init: row r is query head h + r % g; `first` is 1 when the
 * state starts at the first key of each row's range (a key split, engine/blocked/, gives later
 * ranges 0), so that a term counted once per row (a softmax sink) is counted once. */
typedef struct attn_step_rows {
  const void *params; /* the plan's step_params */
  size_t h, g;
  int first;
} attn_step_rows;

/*
 * A score step: what turns a block of scores into weights, and per-row state into outputs.
 * Row state is `row_floats` arrays of R floats each (R = rows per block), in one region, then
 * `stats_floats` more for the statistics (zeroed by the engine when the call wants them, and
 * reserved either way, so that the plain and the statistics calls share one workspace size).
 */
typedef struct attn_score_step {
  size_t row_floats;
  int strip; /* wants attn_step_block.strip (scratch per block, e.g. for a positional bias) */
  /* Reset the row state of `rows` rows (array stride R) to the empty prefix. */
  void (*init)(float *rs, size_t R, size_t rows, const struct attn_step_rows *w);
  /* ST in place into P^T; update the row state. Returns the per-row factor for acc
   * (diag(alpha) acc + P V) or NULL for plain accumulation. */
  const float *(*step)(const struct attn_ukernels *uk, const attn_step_block *b, float *rs, size_t R);
  /* Row r's outputs from its accumulator (dv floats) and row state: o (dv floats), and the one
   * per-row float `aux` when not NULL. params: the plan's step_params. */
  void (*finish)(const float *acc, const float *rs, size_t R, size_t r, size_t dv, float *o, float *aux,
                 const void *params);
  /* Statistics (0: the step has none): the arrays of row state they add, and the arrays holding
   * each row's sum w, sum w^2 and sum w log w at the end. */
  size_t stats_floats;
  size_t stats_at[3];
  /* Key ranges (NULL: the step cannot split a row's keys): fold the state of a later range of
   * `rows` rows (acc2 rows x dv, row state arrays of stride R2) into that of the keys before it
   * (acc, stride R), as if one state had seen both; `stats`: the statistics' sums too. The same
   * arithmetic whatever the strides, so that a fold is bit-identical wherever its parts lie. */
  void (*merge)(float *acc, float *rs, size_t R, const float *acc2, const float *rs2, size_t R2, size_t rows, size_t dv,
                int stats);
  /* 1: the step is softmax_block's on row state m, l, alpha (statistics q2, e after them) and
   * nothing else, so that a few-rows plan may take an unmasked block through few_fused */
  int fusable;
} attn_score_step;

/* The online-softmax score step (ops/softmax.c): row state m, l, alpha; finish writes o = acc / l
 * and the LSE m + log l, zeros and -inf for l = 0, NaN and NaN for l = NaN. Merge uses its finish.
 * Statistics: q2 = sum p^2 and e = sum p (s - m) of p = exp(s - m), beside l = sum p. */
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
  float xs; /* the map's input scale (attn_fm_args.xs; W^T comes with the call: attn_blocked_io) */
  size_t m; /* feature size (fm->size of d and the caller's m) */
} attn_blocked_features;

/* One worker's scratch regions, offsets in floats from the worker's base (0 floats when the
 * call has no use for one). */
typedef struct attn_blocked_worker_layout {
  size_t st;                   /* a block's scores ST (bc x R) */
  size_t heads;                /* the head regions (attn_blocked_head_layout each, head_floats apart) */
  size_t kf;                   /* feature map: psi(K_blk) */
  size_t ku, km, fms, cb, tmp; /* exponential maps: u(K_blk), its running maxima, map scratch, c, temp */
  size_t strip;                /* the step's strip */
  size_t qs, ss, fz, run;      /* selection: scale Q_sel^T (d x tb), its scores, F (bc x tb), the keys'
                                   running sums (bc) */
  size_t kc, vc;               /* half K/V: converted K rows (24 x d), the block's V rows (bc x dv; paged
                                   fp32 too: a block's rows across pages) */
  size_t vg, vg_scales;        /* paged few-rows plans: a run of few_pv's keys across a page boundary
                                   (rows of dv elements; ATTN_I8 scales vg_scales floats after vg) */
  size_t fg, fg_scales;        /* paged fused plans: a step of few_fused's keys across a page boundary,
                                   its K rows, then its V rows (elements of kv_type), and fg_scales
                                   floats after fg their ATTN_I8 scales (K's, then V's) */
  size_t sth;                  /* few blocks of several heads: hg heads' ST (bc x R each) */
  size_t pk, pv, ptag;         /* packed K (BLK_PACK_KEYS x d), V (x dv), which head they hold (a size_t
                                   at ptag: head + 1, 0 for none) */
  size_t fold;                 /* when the step can split: hg heads of a range's state (cr rows) */
  size_t qc, oc;               /* half queries: a task's rows of g query heads, converted (tb g x d);
                                   half outputs: a row before its conversion (dv) */
} attn_blocked_worker_layout;

/* One head's region (blk_head), offsets in floats from its start. */
typedef struct attn_blocked_head_layout {
  size_t qt;     /* scaled Q^T (m x R; few-rows plans: the rows, R x d) */
  size_t acc;    /* accumulators (R x dv) */
  size_t rs;     /* the step's row state (R rows per array) */
  size_t uq, bm; /* exponential maps: u(Q) (R x m), bm (R) */
  size_t cz;     /* dsoftmax: c | z */
} attn_blocked_head_layout;

/* A planned call: sizes, mask in positions, per-worker scratch layout. */
typedef struct attn_blocked_plan {
  const attn_shape *shape;
  const attn_score_step *step;
  const void *step_params; /* handed to the step's finish */
  const attn_featmap *fm;  /* NULL: scale * q . k */
  int sel;                 /* selective attention (attn_blocked_select) */
  size_t sel_kv, sel_gi;   /* its key head, and its place in that head's group */
  float fm_xs;             /* the map's input scale */
  size_t m;                /* features (d without a map) */
  int xm, dsm;             /* exponential map; dsoftmax */
  float scale;
  int64_t left, right, chunk; /* mask, clamped to what positions can reach (chunk 0: none) */
  size_t g, tb, R, bc;        /* GQA group, tokens per block, rows per block (tb g), keys per block */
  size_t hg, groups, qblocks; /* heads advancing together, head groups, query blocks */
  /* The strategies, chosen once here (blocked/pass.c holds them): how a head's key block is read,
   * and where its scores come from; whether the heads of a task go a block at a time together. */
  enum { BLK_BLOCK_SCORED, BLK_BLOCK_XMAP } block; /* scores, extras, step; or exponential-map sub-blocks */
  enum { BLK_SCORES_GEMM, BLK_SCORES_FEW, BLK_SCORES_FEATURE } scores; /* Q^T GEMM; few_scores; psi(K) GEMM */
  int heads_together;            /* few rows, no selection: attn_blk_block_heads for a task of 2+ heads */
  int fused;                     /* heads together, one query row a key head (no GQA, one token), a
                                    head-major cache (paged or not; any K/V type), a fusable step: an
                                    unmasked block through few_fused (attn_blk_fused) */
  attn_blocked_worker_layout wl; /* each worker's scratch */
  attn_blocked_head_layout hl;   /* each head's region within it, head_floats each */
  size_t head_floats;
  size_t slots;       /* after the workers' scratch, with threads: every range's state, per task */
  attn_dtype kv_type; /* K and V elements (shape.kv_type), for the few-rows kernels */
  int paged;          /* K/V in pages (attn_blocked_spec.paged): the calls' io must give them */
  struct {
    size_t size;             /* bytes of an element (ATTN_Q8_0: a block of 32 values) */
    attn_f16_cvt_fn *to_f32; /* half rows into fp32 (the path's kernel); NULL: fp32 or int8 */
  } kv;                      /* the K/V element type's trait, chosen at plan time */
  int few;                   /* at most BLK_FEW_ROWS rows per task and no feature map: scores by few_scores
                               and an unmasked block's P V by few_pv, K and V read in place (half: a
                               masked block's V converted for the GEMM); a head's hl.qt holds the
                               scaled query rows (R x d) instead of their transpose */
  int views;                 /* no feature map, selection or few-rows scores: a boundary block's keys in
                               sub-blocks, each with the tokens that see it (attn_blk_boundary) */
  int pack;                  /* views, several query blocks and a head's K or V rows not contiguous
                               fp32: keys [0, pack_keys) of the task's key head packed (attn_blk_pack) */
  size_t pack_keys;          /* min(n_kv, BLK_PACK_KEYS) */
  const float *stats_sinks;  /* softmax with sinks (per query head): the sums hold the sink's weight
                               w = e^(sink - m) too (row state array 0 is m); the statistics take
                               w, w^2 and w (sink - m) back out: the keys' only */
  size_t split;              /* key ranges per task (1: none; a short call over many keys: attn.h, threads; a
                             * selection: the most, each task its own, blocked/schedule.c blk_ranges) */
  size_t cr;                 /* rows of a range's stored state (ATTN_SPLIT_TOKENS g; a selection: >= R), per head */
  size_t slot_floats;        /* one range's state of a head group (hg heads) */
  size_t workers;            /* scratch regions (attn_shape.threads; 1 without) */
  size_t worker_floats;      /* one worker's scratch, a multiple of 16 floats */
  size_t scratch_bytes;      /* the workspace this call lays out and uses (its own rows, ranges, packing) */
  size_t reserve_bytes;      /* the workspace query's answer: reserved for any n_q and n_kv, >= scratch_bytes */
} attn_blocked_plan;

/*
 * Selective attention (spec 6): every head's scores are reduced by F_pj = sum over the queries k
 * with j < k < p of relu(s^(h_sel)_kj) (0 for j = 0), the selection of query head h_sel. Per task
 * and key block the engine computes head h_sel's scores of the block's tokens (its own GEMM, or
 * the columns of that head's tile when the task holds its key head), F for every (key, token)
 * pair as io->sel_f[j] (the sum over the queries before the block) plus an exclusive running sum
 * over the block's tokens, subtracts it from every head's tile before the step, and the last
 * head group of a query block stores the sums over its tokens back into sel_f. Query blocks must
 * run in order: the only sequential dependency of the engine. Each block's keys are split into
 * ranges (blocked/schedule.c, blk_ranges) whose F are independent: the ranges run in parallel, each
 * range's head groups in order on one worker (a key's F read by every group before the last
 * one stores it), and their states are merged in range order.
 */
typedef struct attn_blocked_select {
  size_t h_sel; /* the selecting query head (< h_q) */
} attn_blocked_select;

/* What a variant asks of the engine, everything a plan is made from (designated initialisers;
 * the optional parts NULL when off). */
typedef struct attn_blocked_spec {
  const attn_shape *shape; /* validated: h_k == h_v dividing h_q */
  attn_mask mask;
  float scale;
  const attn_score_step *step;
  const void *step_params;           /* handed to the step's finish */
  const attn_blocked_features *feat; /* a feature map (windowed linear attention), or NULL */
  const attn_blocked_select *sel;    /* selective attention's selection, or NULL */
  const float *stats_sinks;          /* softmax's sinks, taken out of its statistics, or NULL */
  int paged;                         /* K/V come in pages (attn_blocked_io.pages): scratch for them */
} attn_blocked_spec;

/* Plan a call. */
ATTN_INTERNAL attn_status attn_blocked_plan_make(attn_blocked_plan *p, const attn_blocked_spec *spec,
                                                 const struct attn_ukernels *uk);

typedef struct attn_blocked_io {
  const void *q;     /* elements of shape.q_type */
  const void *k, *v; /* elements of the plan's kv_type */
  void *o;           /* elements of shape.o_type */
  float *aux;        /* one float per (query, head), or NULL */
  attn_layout aux_layout;
  float *sel_f;                     /* selection (attn_blocked_select): F_j of every key, in/out (n_kv floats) */
  const attn_row_stats *stats;      /* per-row statistics (validated: attn_blocked_stats_outputs), or NULL */
  const float *fm_wt;               /* FAVOR+'s W^T (d x m) for a feature map that takes one, or NULL */
  const float *k_scales, *v_scales; /* ATTN_I8: a scale per (key, key head), layout `scales` */
  attn_layout scales;
  /* Paged K/V (NULL table: k, v and the scales hold the keys in order): key j of head h lies in
   * page table[j / size] at row j % size, the page's first row `k` (or `v`, `scales`) elements
   * from k (v, the scales); the layouts give the rows and heads within a page. The engine reads
   * every run of a page's rows in place and gives the bits of the call whose keys lie in order. */
  struct {
    const int32_t *table;
    size_t size, k, v, scales;
  } pages;
  size_t t_base; /* the call's token 0 in the caller's rows (a batch's packed rows): the steps' t */
} attn_blocked_io;

/* Every task of a plan on the call's workspace (64-byte aligned base, scratch_bytes - 64): on the
 * shape's threads (a selection: query blocks in order, each one's key ranges in parallel), each
 * worker on its own scratch;
 * a split's ranges run as tasks of their own and are folded in order (range 0 first) by the
 * calling thread, as the same fold runs without threads. */
ATTN_INTERNAL void attn_blocked_run_all(const attn_blocked_plan *p, const struct attn_ukernels *uk,
                                        const attn_blocked_io *io, float *ws);

#endif
