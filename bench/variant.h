/*
 * variant.h: the interface every benchmark adapter implements (bench/variants/<family>.c).
 *
 * An adapter runs one family of attn calls (softmax, linear) and lists its variants: the named
 * cases the sweep measures (a mask, a feature map, prefill or decode). For each variant it says
 * which sizes are swept, builds the shape of one call (for its own attn call or for a baseline
 * standing in for it), completes that shape with what flops.h needs from the library and counts
 * the work (flops.h stays the only place that counts), and sets up, runs and tears down one
 * measured call. The baselines a variant is compared with are a field of the variant; the
 * baselines' own calls are in baselines.c and baseline_onednn.c. bench_attn.c knows no variant:
 * it loops over the table of adapters.
 */
#ifndef ATTN_BENCH_VARIANT_H
#define ATTN_BENCH_VARIANT_H

#include <stddef.h>

#include "attn.h"
#include "flops.h"

struct bench_work;

/** One measured call: everything but the shared buffers (q, k, v, o), which work.c owns. */
typedef struct bench_call {
  /** Make what the call needs on w's filled buffers (descriptor, workspace, state, scratch).
   *  0 on success; otherwise err says why. */
  int (*setup)(struct bench_work *w, char *err, size_t errlen);
  /** One timed repetition: one call. A failure is recorded in w (bench_work_status). */
  void (*run)(struct bench_work *w);
  /** Release what setup made beyond w->impl, w->workspace and w->scratch (work.c frees those);
   *  NULL when there is nothing else. Also called after a failed setup. */
  void (*teardown)(struct bench_work *w);
  /** After the measurement: what the row's note should say of the call's state (e.g. a pruned
   *  cache's live tokens and bytes), or NULL. */
  void (*describe)(const struct bench_work *w, char *note, size_t len);
} bench_call;

typedef enum bench_mode { BENCH_PREFILL, BENCH_DECODE } bench_mode;

struct bench_adapter;

/** One case of an adapter: a name in --variants, the tables and every output file. */
/** Mamba-2's layer as the linear_mamba2 rows take it (Mamba-2 130M, ngroups 1): C and B one head
 *  of d = N (the sweep's --d), shared by BENCH_MAMBA2_HEADS heads of x of BENCH_MAMBA2_P. */
#define BENCH_MAMBA2_HEADS 24
#define BENCH_MAMBA2_P     64

typedef struct bench_variant {
  const char *name;
  const struct bench_adapter *adapter; /**< the adapter that runs it */
  bench_mode mode;
  bench_kind kind;      /**< the shape kind of its attn rows: BENCH_SOFTMAX, BENCH_LINEAR or BENCH_LINEAR_STEP */
  int causal;           /**< softmax: right bound 0; linear: causal mask */
  int windowed;         /**< softmax: causal window of --window keys */
  attn_feature_map map; /**< linear */
  int normalize;        /**< linear */
  int quadratic;        /**< capped by --quad-n-max */
  const char *partner;  /**< linear prefill: the softmax variant of the crossover */
  unsigned baselines;   /**< bit (1u << b) for every bench_base its rows are compared with */
  const char *help;
  attn_gate_kind gate; /**< linear, causal: decay or gate (attn_linear_gated); ATTN_GATE_NONE: none */
  int fixed_decay;     /**< with ATTN_GATE_SCALAR: one fixed decay per head, RetNet's
                             (attn_retnet_log_decays, gate row stride 0); 0: a gate per token */
  size_t exclusive;    /**< linear, causal: FLASH's exclusive_chunk (0: none) */
  int qk_shared;       /**< linear: Mamba-2's layer (bench_shape.qk_shared) whatever --heads and --kv-heads:
                            C and B one head of d (N), BENCH_MAMBA2_HEADS heads of x of BENCH_MAMBA2_P */
} bench_variant;

/** What the command line says about the shapes of the sweep. */
typedef struct bench_sweep {
  const size_t *sizes; /**< explicit prefill sizes (--sizes), sorted; nsizes = 0: powers of two */
  size_t nsizes;
  const size_t *caches; /**< explicit decode caches (--caches), sorted; ncaches = 0: powers of two */
  size_t ncaches;
  size_t n_min, n_max, quad_n_max, cache_min, cache_max;
  size_t heads, kv_heads, window;
  int kv_head_major;  /**< --kv-layout head: softmax K/V [heads][n][d] */
  int qkv_head_major; /**< --linear-layout head: linear Q, K, V and O [heads][n][d] */
  /* The delta rule's rows model a model's layer: their own sizes, d and heads. */
  const size_t *delta_sizes; /**< prefill sizes (--delta-sizes) */
  size_t ndelta_sizes;
  const size_t *delta_d; /**< d = dv (--delta-d) */
  size_t ndelta_d;
  size_t delta_hk, delta_hv; /**< key and value heads (--delta-heads) */
} bench_sweep;

/** A family of variants and how to measure them. */
typedef struct bench_adapter {
  const char *name; /**< its --variants group */
  const bench_variant *variants;
  size_t count;
  /** The sizes v is measured at (prefill n, decode cache, or one step), at most BENCH_MAX_SIZES;
   *  returns how many. */
  size_t (*sizes)(const bench_variant *v, const bench_sweep *sw, size_t *out);
  /** The shape of one call of v at size n and head dimension d; kind: v->kind for the attn call,
   *  a baseline's kind for the baseline standing in for it. */
  bench_shape (*shape)(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d);
  /** Complete s with what the count needs from the library on path isa (ATTN_ISA_NONE: a
   *  baseline, credited like the default path) and count its work (flops.h). */
  bench_cost (*cost)(bench_shape *s, attn_isa isa);
  bench_call call; /**< its attn call */
  /** The head dimensions v is measured at, at most BENCH_MAX_SIZES; returns how many. NULL: the
   *  sweep's --d. */
  size_t (*dims)(const bench_variant *v, const bench_sweep *sw, const size_t *d, size_t nd, size_t *out);
} bench_adapter;

/** Most sizes a variant sweeps (and most values of a command-line list). */
#define BENCH_MAX_SIZES 64
/** Most variants over all adapters. */
#define BENCH_MAX_VARIANTS 96

/** Latency mode (--latency): the threads every attn call of a row runs on (NULL: the calling
 *  thread alone), and the threads the baselines may use (OpenBLAS, oneDNN); 1 otherwise. */
extern const attn_threads *bench_call_threads;
extern int bench_call_workers;

/* The adapters (bench/variants/). */
extern const bench_adapter bench_softmax_adapter;
extern const bench_adapter bench_linear_adapter;
extern const bench_adapter bench_gau_adapter;
extern const bench_adapter bench_selective_adapter;
extern const bench_adapter bench_delta_adapter;

/* Helpers the adapters share (variant.c). */

/** The sizes of a prefill (up to --quad-n-max for quadratic variants) or decode variant. */
size_t bench_sweep_sizes(const bench_variant *v, const bench_sweep *sw, size_t *out);
/** The shape every adapter starts from: n_q = n_kv = n, the heads of the sweep, d = dv, v's
 *  mask flag, map, normaliser and gate; no window bound, no feature size, no chunk. */
bench_shape bench_shape_start(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d);
/** The place of v in a list of variants (n when it is not there). */
size_t bench_variant_index(const bench_variant *const *list, size_t n, const bench_variant *v);
/** The count of a shape that needs nothing from the library. */
bench_cost bench_cost_plain(bench_shape *s, attn_isa isa);

#endif
