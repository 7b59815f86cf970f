/*
 * The chunkwise engine: linear attention and everything with a matrix-valued state (the linear
 * family's feature maps, decay and gates; FLASH's linear part next). Per state head (one per
 * distinct key / value / gate head triple), with W = dv + 1 when normalised (V is augmented with
 * a ones column, so the products that give S also give z, and phi(q).z comes out as column dv of
 * the output) and W = dv otherwise, per chunk of C tokens:
 *   absorb (keys only):   Kf = psi(K_c) (C x m),  Va = [V_c | 1] (C x W),
 *                         S = dC (.) S + (Kf (.) dout)^T Va
 *   query chunk:          O = din (.) (Qf S) + intra,  Qf = phi(Q_c)
 *     intra (causal):     AT = Kf Qf^T (C x C, AT[j][i] = psi(k_j).phi(q_i), Qf written transposed),
 *                         zero where j > i, weighted by wt[j][i] = beta_j exp(b_i - b_j); O += AT^T Va
 *     o_i = s O[i][0:dv] / (s O[i][dv] + eps)   (un-normalised: o_i = s O[i][0:dv])
 * with the chunk's decay (spec 4): b the inclusive cumulative sum of the chunk's log gates (reset
 * at every chunk), din_r = exp(b_r), dout_c = beta_c exp(b_last - b_c), dC = exp(b_last); all
 * ones without gates. A scalar gate (or beta alone) whose chunk decays by at most ATTN_GATE_SPAN
 * (b_last >= -ATTN_GATE_SPAN) takes wt factored, wt[j][i] = dout_j g_i with g_i = exp(b_i -
 * b_last): AT's rows times dout and its columns times g (no C x C exps); beyond that span, wt
 * element by element. Per-feature gates (B: C x m)
 * weight every feature: the state product reads Qf (.) exp(B), the absorb Kf (.) beta
 * exp(B_last - B) and dC = exp(B_last) per row, and the intra part runs per query block
 * I = [i0, i1) as (Qf_I (.) exp(B_I - B_i0)) (Kf (.) exp(B_i0 - B))^T over the keys before i1
 * (exponents <= 0 for earlier keys), with per-element exponentials for the block's own keys when
 * its decay spans more than ATTN_GATE_SPAN (no factor overflows).
 * Exponential maps (engine/featmap.h) keep per-feature offsets c in the state (S and z stored
 * scaled by exp(-c)): before a chunk's outputs, c rises to the chunk's largest key feature and the
 * rows of S and z are rescaled; key features are exp(u - c) <= 1; a query's features are
 * exp(u + c - M) with M its maximum of u + (the offsets of the keys it sees), so every term of a
 * row is at most 1 and the largest is 1. A chunk whose keys raise an offset by more than
 * ATTN_OFFSET_GUARD above its start is cut before that key (queries earlier in the chunk would
 * otherwise pay for a key they cannot see).
 * A one-token chunk (the recurrent decode step) uses the step kernel instead (S = G S + beta psi
 * v^T, one pass over S per output head). A one-token call (plan `decode`: one output head per
 * state head, a map without offsets) is each head's step in one call of the recurrence kernel
 * (attn_cw_decode): its q . k and decayed query in the kernel, an identity map's rows and an
 * un-normalised v row read in place when finite, a scalar gate as one exp.
 * The recurrence (plan `recurrent`: a causal call of a map
 * without offsets, outside FLASH's form, with chunk 1, or chunk 0, per-feature gates and a state
 * of at most the path's linear_recurrent floats) runs every token so, C rows loaded at once, on a
 * copy of S with rows of whole cache lines (ldr) when the call has CW_REC_COPY_MIN+ tokens: per
 * token it costs one pass over S, 5 m W flops, against the chunks' 4 m W + 2 C (m + W) and, with
 * per-feature gates, their C x m factors and exponentials; while S stays in L1 the pass is the
 * cheaper. Tasks are its state heads, as the serial loop's (no scan: one head's tokens run on one
 * worker). Bottom-right alignment: with n_q < n_kv the first n_kv - n_q keys are
 * absorbed before any query; with n_q > n_kv the first n_q - n_kv queries see only the incoming
 * state. Tasks are state heads: each owns its state slab and its output heads.
 *
 * The scan. A causal call whose aligned part spans 2+ chunks runs its chunks as a scan (FLASH's exclusive form: its rounds of xg keys are the chunks, see
 * below): each chunk's local state D_c = (Kf (.) dout)^T Va is computed on its own (not
 * accumulated into S), the chunk's outputs read S_c, the state before it, and
 * S_{c+1} = dC (.) S_c + D_c (chunkwise/transition.c). The arithmetic is fixed by the problem; how it is
 * scheduled is not, and does not change a bit of the result:
 *  - by head groups (one worker, or heads enough for the workers: a multiple of them or 4x as
 *    many): one group of adjacent heads per worker, chunk after chunk, each chunk for every head
 *    of the group, D_c in the worker's scratch. Token-major inputs of a plain head mapping (every
 *    head its own query, key and value head) are first gathered a chunk at a time, ATTN_GATHER
 *    heads at once: the chunk's rows read in order, each head's slice copied into the worker's
 *    scratch (attn_cw_gather), so the head's passes read contiguous rows (a head's own rows are a row
 *    of all heads apart, which reads far slower than contiguous rows; gathered, the call runs as
 *    fast as with head-major inputs);
 *  - in waves (otherwise): the chunks in groups of scan_group (chosen for the workers: about
 *    ATTN_SCAN_PER_WORKER groups each), a task per head and group, up to scan_wave groups of
 *    every head per parallel-for. A task runs on one worker, with the group's chunks in slots of
 *    its scratch:
 *      1. per chunk: Kf and Va into the chunk's slot, D_c and dC (nothing waits for this);
 *      2. the state before the group: the group before's state after it, published by that
 *         group's task (waited for: a task waits only on earlier groups, so some task always
 *         progresses), or, for groups no task has started (a parallel-for that runs tasks out of
 *         order, or on fewer threads), computed here and published;
 *      3. in chunk order: the slot gets S_c, then S = dC (.) S + D_c; the state after the group
 *         is published (the next group's task is waiting for it: a few passes over S per group
 *         are the only serial part);
 *      4. per chunk: its outputs from its slot (S_c, Kf, Va).
 *    Only each group's state after it moves between workers (the three phases per wave
 *    that came before moved every chunk's D, S_c, Kf and Va between workers: 2 threads ran one
 *    head 1.0-1.5x faster than one, the groups 1.5-2.0x). A task whose group another task already computed runs its chunks one at a
 *    time (steps 1, 3 and 4 per chunk on a spare slot): the same bits.
 * Both run the same GEMMs as the serial loop plus one pass over each D_c; the waves compute the
 * gates' decays twice (the intra weights in step 4 only; a per-feature gate's cumulative log gates
 * b, C x m doubles, are kept in the slot by step 1 for step 4, where summing them again took a
 * tenth of GLA's work on 2 threads) and keep each chunk in a slot between steps. FLASH's exclusive form over 2+ rounds (n_kv > xg) is the same scan without the intra
 * part: round k's queries read S_k, D_k sums round k's keys C at a time, and only complete rounds
 * are added (the last, incomplete round only keeps S in its slot); exclusive calls of one round
 * keep the serial loop. Maps with offsets: D_c carries its own offsets (the chunk's largest key
 * feature, so its largest term is 1) and S_{c+1} is the merge of S_c and D_c at the larger
 * offsets (attn_cw_scan_merge, like two LSE partials: S first moves to the larger offsets as
 * attn_cw_raise moves it, then D is added); a chunk's outputs run the serial loop over the chunk alone
 * (cut where attn_cw_guard says, which depends only on S_c and the chunk). A chunk that is not cut
 * runs at once on S_c itself, raised in place to its offsets (the slot's S_c, or, by head groups,
 * the state, whose merge then finds it already raised: the same bits); a chunk that is cut runs
 * on a copy of S_c in the worker's scratch, which is then dropped. The slot keeps the chunk's
 * pre-exponential key features in Kf's place, and its Kf at its own offsets with those offsets
 * (a chunk that is not cut takes its Kf from them, one multiply per element, instead of its
 * exponentials again; their maxima also spare attn_cw_guard its scan of the keys).
 * The code: engine/chunkwise/, a file per concern (its internal.h lists them and their layers).
 */
#ifndef ATTN_ENGINE_CHUNKWISE_H
#define ATTN_ENGINE_CHUNKWISE_H

#include "engine/act.h"
#include "engine/featmap.h"

/* How the state moves from one token to the next, S_t = G_t(S_{t-1}) + beta_t psi(k_t) v_t^T
 * (attn.h, attn_linear_gated): the gate G (none, a scalar or a per-feature decay per key token
 * and gate head, in log space) and the optional input scale beta, both caller arrays. */
typedef struct attn_chunkwise_gates {
  attn_gate_kind kind;
  int beta;
  size_t h_g;                  /* gate heads (1 when neither gate nor beta) */
  attn_layout layout, blayout; /* of the log gates and of beta */
} attn_chunkwise_gates;

/* The scan's waves: groups of ATTN_SCAN_GROUP_MIN .. _MAX chunks, about ATTN_SCAN_PER_WORKER
 * groups (of all heads) per worker; their states after them in at most ATTN_SCAN_FLOATS floats. */
#define ATTN_SCAN_PER_WORKER 8
#define ATTN_SCAN_GROUP_MIN  2
#define ATTN_SCAN_GROUP_MAX  8
#define ATTN_SCAN_FLOATS     ((size_t)1 << 21)
/* Heads gathered at once by the scan by head groups (a chunk of 48 rows of 8 heads with d = dv =
 * 64: 288 KiB of queries, keys and values, within a core's L2). */
#define ATTN_GATHER     8
#define ATTN_GATHER_PAD 16

/* Per-feature gates: the largest decay (natural log) a query block's own keys may span for the
 * factorised product: its factors stay within e^+-60 of 1, far inside fp32's range. */
#define ATTN_GATE_SPAN 60.0

/* One worker's scratch regions, offsets in floats from its base (0 floats where unused). */
typedef struct attn_chunkwise_worker_layout {
  size_t kf, va, qt, at, oc, s, fm; /* a chunk's key features (C x m), values (C x W), query features
                                       transposed, the intra scores, output rows, a state (m x lds) when
                                       the caller keeps none, the map's scratch */
  size_t ku, qu, cp, cn, run;       /* exponential maps: pre-exponential key and query features, the
                                       offsets before and after the chunk, the running row */
  size_t b, wt, din, dout, dc, ks;  /* gates: cumulative log gates, intra weights, row scales, block
                                       factors */
  size_t d;                         /* the scan by head groups: a chunk's local state, m x lds */
  size_t dl;                        /* maps with offsets, the scan by head groups: a chunk's own offsets (m) */
  size_t g;                         /* the scan by head groups: the gathered heads' chunk rows (attn_cw_gather) */
  size_t slots, x;                  /* the waves: scan_group + 1 chunk slots, and the state moving through a
                                       group */
  size_t qc, oh;                    /* half queries: a chunk's rows converted (C x d); half outputs: a batch
                                       of rows before their conversion (CW_ROW_BATCH x dv) */
  size_t gx;                        /* the recurrence with a gate: its rows' decay factors (C x m) */
  size_t at0;                       /* share_at: a chunk's intra scores before their weights (C x C) */
} attn_chunkwise_worker_layout;

/* A chunk's slot in the waves, offsets from the slot: its D, then S before it (m x lds) at 0, and */
typedef struct attn_chunkwise_slot_layout {
  size_t kf, va, fin; /* its Kf (C x m), its Va (C x W), whether Va is finite */
  size_t kl, dl;      /* maps with offsets: its Kf at its own offsets (C x m), those (m) */
  size_t b;           /* per-feature gates: its cumulative log gates (C x m doubles), made by its absorb
                         and read by its outputs (0: none kept) */
} attn_chunkwise_slot_layout;

typedef struct attn_chunkwise_plan {
  const attn_shape *shape;
  const attn_featmap *fm;
  attn_chunkwise_gates g;
  float fm_xs;                     /* the map's input scale (attn_fm_args.xs; W^T comes with the call) */
  int causal, normalize;           /* normalize: z is kept (V gets its ones column) */
  int divide;                      /* outputs divide by phi(q).z + eps */
  float out_scale, eps;            /* outputs are out_scale times the quotient (the scale of element-wise maps) */
  int direct;                      /* fp32 outputs that are O itself (no z, scale 1): the products write o's rows */
  size_t m, W, lds, C;             /* features, augmented value width, state row stride, chunk (the
                                      recurrence: rows loaded at once) */
  size_t ldw;                      /* the row stride of a chunk's Va and O rows: W rounded up to 16 floats
                                      (whole lines: the GEMMs' B and C rows then never straddle two) */
  int recurrent;                   /* causal, token by token (the step kernel), C rows loaded at once */
  int decode;                      /* a one-token causal call, one output head per state head, a map
                                      without offsets: each head's step in one kernel call (attn_cw_decode) */
  size_t ldr;                      /* the recurrence by head groups: the row stride of its states
                                      (lds in whole 64-byte lines) */
  size_t xg;                       /* FLASH's chunk-exclusive form: queries see the keys of earlier chunks
                              of xg tokens only, a chunk is absorbed when complete; 0: none */
  size_t heads, per;               /* state heads, output heads per state head */
  size_t qdiv, kdiv, vdiv;         /* output head / qdiv = query head; state head / kdiv, / vdiv */
  size_t gdiv;                     /* state head / gdiv = gate head */
  attn_chunkwise_worker_layout wl; /* each worker's scratch */
  size_t workers, worker_floats;   /* scratch regions (attn_shape.threads; 1 without), floats of each */
  size_t scan_chunks;              /* the scan: aligned chunks (FLASH's exclusive form: rounds; 0: no scan) */
  size_t scan_group, scan_groups;  /* the waves: chunks per group (0: by head groups), groups */
  size_t scan_wave;                /* the waves: groups per wave */
  size_t scan_region;              /* the scan's region: heads states (used without the caller's) */
  size_t after_region, scan_after, scan_status; /* the waves, at after_region: heads x scan_wave groups'
                                                states after them (m x lds) and at scan_status their
                                                status (an atomic int), scan_after floats each */
  size_t scan_slot;                             /* the waves: a chunk's slot, scan_slot floats */
  attn_chunkwise_slot_layout sl;                /* its regions */
  size_t gather;                                /* the scan by head groups: heads gathered at once (0: none) */
  int gathered;                                 /* with gather: the inputs are token-major, so the rows are gathered */
  int share_at;                                 /* the scan by head groups: consecutive state heads may read the
                                                   same query and key rows (Mamba-2's C and B, one head for all):
                                                   the first of such a run keeps a chunk's intra scores before
                                                   their weights (wl.at0), the others copy them instead of
                                                   computing the same product again (the same bits) */
  size_t scratch_bytes;                         /* the whole workspace: workers regions, then the scan's */
  size_t state_floats;                          /* heads * m * lds */
} attn_chunkwise_plan;

/* Sizes that do not depend on the path (shape validated, H given): state heads and floats. */
ATTN_INTERNAL attn_status attn_chunkwise_shape(attn_chunkwise_plan *p, const attn_shape *s, size_t H,
                                               const attn_featmap *fm, size_t m_req, int causal, int normalize,
                                               float scale, float eps, const attn_chunkwise_gates *g);
/* The scratch layout for a chunk size (0: the path's default; 1, or 0 with per-feature gates, a
 * map without offsets and a state of at most the path's linear_recurrent floats: the recurrence). */
ATTN_INTERNAL attn_status attn_chunkwise_plan_make(attn_chunkwise_plan *p, size_t chunk,
                                                   const struct attn_ukernels *uk);

typedef struct attn_chunkwise_io {
  const void *q; /* elements of shape.q_type */
  const float *k, *v;
  void *o;                      /* elements of shape.o_type */
  float *state;                 /* heads slabs of m x lds floats, or NULL: an empty prefix, nothing kept */
  const float *log_gate, *beta; /* the gates' arrays (plan g), or NULL */
  const float *fm_wt;           /* FAVOR+'s W^T (d x m), or NULL */
  /* a decode step's facts about every head at once (attn_chunkwise_run_all sets them; callers
   * leave them 0): CW_DEC_Q, _K, _V where every fp32 query, key or value row of the token is
   * finite, and the scalar gates' factors exp(log gate), one per gate head (NULL: none) */
  unsigned dec_finite;
  const float *dec_g;
} attn_chunkwise_io;
enum { CW_DEC_Q = 1, CW_DEC_K = 2, CW_DEC_V = 4 };

/* Run task `task` (a state head) with a worker's scratch (worker_floats, 64-byte aligned). */
ATTN_INTERNAL void attn_chunkwise_run(const attn_chunkwise_plan *p, const struct attn_ukernels *uk,
                                      const attn_chunkwise_io *io, size_t task, float *scratch);
/* Every state head of a plan, on the shape's threads (one task per head; each owns its state
 * slab and output heads; or the scan's tasks), worker w on ws + w * worker_floats. */
ATTN_INTERNAL void attn_chunkwise_run_all(const attn_chunkwise_plan *p, const struct attn_ukernels *uk,
                                          const attn_chunkwise_io *io, float *ws);

/* ---- The delta rule's transition (spec 8; attn.h attn_delta) ----
 * A state per value head, S (d x dv, row stride dv), moved by S_t = (I - beta k k^T) D_t S_{t-1}
 * + beta k v^T. Per chunk of cn tokens (cut at every checkpoint) the transition's phases (run by the
 * engine's per-chunk routine, chunkwise/internal.h) are:
 *   load     the keys' and queries' rows (L2-normalised, q scaled);
 *   local    (the chunk alone): the cumulative log decays B, L = strict-lower (K K^T (.) e^(B_r -
 *            B_c)) beta_r and A = lower (Q K^T (.) e^(B_r - B_c)), X = (I + L)^-1 by forward
 *            substitution, then U = X (beta V) and W' = -X (beta K (.) e^B);
 *   outputs  (with S_0): Delta = U + W' S_0, O = (Q (.) e^B) S_0 + A Delta;
 *   absorb   S = diag(e^B_last) S_0 + (K (.) e^(B_last - B))^T Delta.
 * Per-channel decays (FEATURE) build L and A by query sub-blocks of ATTN_DELTA_SUB rows whose every
 * factor is e^(<= 0) (the block's first row as reference), element by element inside a block
 * whose own decay spans more than ATTN_GATE_SPAN. A one-token chunk, and a chunk whose q, k or v
 * holds a non-finite value, runs the recurrence token by token (two passes of the step kernel
 * over S). Tasks are groups of value heads, each run chunk-major (a chunk for every head of the
 * group, then the next chunk). */
#define ATTN_DELTA_SUB 16
/* A task's value heads: states of at most this many bytes together (kept in a core's L2 while
 * the group's chunks run), at least one head. */
#define ATTN_DELTA_GROUP_BYTES ((size_t)1 << 19)

/* The scratch regions of one worker, offsets in floats (attn_ws_take). */
typedef struct attn_delta_scratch {
  size_t q, k, kg, kn, kt, kr, w; /* C x d each (kt: d x C) */
  size_t vb, u;                   /* C x dv each */
  size_t l, a, x;                 /* C x C each */
  size_t b;                       /* cumulative log decays: C (SCALAR) or C x d (FEATURE) doubles */
  size_t rs, e, s0;               /* d row scales; the step's vectors (5 d + 2 dv); a zero state (d x dv) */
  size_t oc;                      /* half outputs: a chunk's rows before their conversion (C x dv) */
} attn_delta_scratch;

typedef struct attn_delta_plan {
  const attn_shape *shape;
  attn_delta_gate gate;
  attn_layout gl, bl; /* log gates (row_stride 0: one row for every token), beta */
  float scale;
  int l2norm;
  size_t C;              /* chunk */
  size_t kdiv;           /* value heads per key head */
  size_t head_floats;    /* d x dv: one value head's state */
  size_t group;          /* value heads per task (run chunk-major over them) */
  size_t ldvk;           /* row stride of the vb | kg and u | w regions: dv + d */
  attn_delta_scratch at; /* one worker's regions */
  size_t workers, worker_floats, scratch_bytes;
} attn_delta_plan;

typedef struct attn_delta_io {
  const void *q; /* elements of shape.q_type */
  const float *k, *v, *log_gate, *beta;
  void *o;                    /* elements of shape.o_type */
  float *state;               /* h_v x d x dv, or NULL: zero, nothing kept */
  const attn_checkpoints *ck; /* NULL or count 0: none */
} attn_delta_io;

/* The plan of a validated call (shape: n tokens, h_q = h_k dividing h_v, d, dv) for a chunk
 * (0: the path's delta_chunk). */
ATTN_INTERNAL attn_status attn_delta_plan_make(attn_delta_plan *p, const attn_shape *s, attn_delta_gate gate,
                                               attn_layout gl, attn_layout bl, float scale, int l2norm, size_t chunk,
                                               const struct attn_ukernels *uk);
/* Every value head of a plan on the shape's threads, worker w on ws + w * worker_floats. */
ATTN_INTERNAL void attn_delta_run_all(const attn_delta_plan *p, const struct attn_ukernels *uk, const attn_delta_io *io,
                                      float *ws);

#endif
