/*
 * bench.h: shared types of the attn benchmark harness (attn-bench).
 *
 *   bench_attn.c  command line, the sweep plan over the table of adapters, crossover search, main
 *   variant.h     the adapter interface; variant.c the helpers the adapters share
 *   variants/     one adapter per family of attn calls: softmax.c (full, causal, window, decode),
 *                 linear.c (identity and elu+1, bidirectional and causal, decayed and gated,
 *                 the decode step), gau.c, selective.c, delta.c (the delta rule: GDN, KDA,
 *                 DeltaNet prefill, checkpoints and the decode step)
 *   timing.c      the one timing loop (CLOCK_MONOTONIC, calibration, warm-up, statistics) and the
 *                 worker pool behind --threads and --pin
 *   work.c        buffers of one measured call and the one kernel that repeats its call
 *   baselines.c   naive OpenBLAS attention and the one-pass recurrent linear loop (built for the
 *                 native ISA), and the baseline list
 *   baseline_delta.c  the delta rule's token loop (built for the native ISA, 512-bit vectors)
 *   vec.h         the two token loops' vectors (the compiler's generic vector type) and tiles
 *   baseline_onednn.c  naive attention through oneDNN's matmul and softmax primitives
 *   sysinfo.c     machine, build and run description; peak and bandwidth probes
 *   report.c      the one row printer, tables, CSV, JSON and Markdown
 *   summary.c     the families, the one-screen summary and summary.md
 *   plot.c        the gnuplot plot: one panel per family (SVG, PNG)
 *   progress.c    the progress line while the sweep runs
 *   flops.h       the one flop/byte table
 */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H

#include <stddef.h>
#include <stdio.h>

#include "attn.h"
#include "flops.h"
#include "variant.h"

/* ------------------------------------------------------------------------------------------ */
/* Timing (timing.c)                                                                           */
/* ------------------------------------------------------------------------------------------ */

/** A measured kernel: run the work `iters` times on one thread's context. */
typedef void (*bench_kernel)(void *ctx, size_t iters);

typedef struct bench_timing {
  double min_time;     /**< keep sampling until this many seconds are spent (and min_reps) */
  unsigned min_reps;   /**< at least this many samples */
  unsigned max_reps;   /**< at most this many samples */
  unsigned warmup;     /**< untimed runs before sampling (calibration runs count) */
  double noisy_spread; /**< a result whose spread exceeds this is flagged noisy */
} bench_timing;

/** Seconds per iteration (one call), over the samples. */
typedef struct bench_stats {
  double median, min, max, q1, q3;
  double spread;     /**< (q3 - q1) / median: interquartile range relative to the median */
  unsigned reps;     /**< samples */
  size_t iters;      /**< calls per sample */
  double cpu_share;  /**< process CPU time / (wall time x threads) while measuring: < 1 when
                         other tasks took the CPU */
  double other_load; /**< CPUs kept busy by other tasks while measuring (from /proc/stat; NAN if
                          unknown, resolution one clock tick): co-runners share L3, memory and clock */
  int noisy;         /**< spread > noisy_spread, or cpu_share < 0.9 */
} bench_stats;

typedef struct bench_pool bench_pool;

/** Start threads - 1 workers (the caller is worker 0). pin_cpu < 0: no pinning; otherwise worker
 *  t is pinned to CPU (pin_cpu + t) mod (CPUs online). NULL on failure (message in err). */
bench_pool *bench_pool_create(int threads, int pin_cpu, char *err, size_t errlen);
void bench_pool_destroy(bench_pool *pool);
int bench_pool_threads(const bench_pool *pool);
/** CPUs online (at least 1). */
int bench_online_cpus(void);

/** Time fn on every worker at once (ctx[t] for worker t): calibrate calls per sample, warm up,
 *  then sample until the timing's limits are met. A sample is wall time from the release of all
 *  workers to the last one finishing, divided by the calls per sample. */
void bench_measure(bench_pool *pool, const bench_timing *timing, bench_kernel fn, void *const *ctx, bench_stats *out);

/** CLOCK_MONOTONIC in seconds. */
double bench_now(void);
/** The median of v[0 .. n) (n >= 1), which it sorts in place (bench_measure's quantile). */
double bench_median(double *v, size_t n);

/* ------------------------------------------------------------------------------------------ */
/* Work: buffers and the kernel for one measured call (work.c)                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct bench_work {
  bench_shape s;
  const bench_call *call; /**< the adapter's attn call or a baseline's */
  float *q, *k, *v, *o;
  float *gate; /**< log gates when s.gate != ATTN_GATE_NONE (NULL otherwise): [n_kv][h_kv][width],
                    width m for per-feature gates, 1 for scalar ones; a fixed decay: h_kv floats,
                    RetNet's (layout: bench_gate_layout). A delta-rule shape: [n][h_v][1 or d]
                    (bench_delta_gate_width), NULL for DeltaNet */
  float *beta; /**< a delta-rule shape: beta, [n][h_v]; Mamba-2's layer (qk_shared): dt, [n][h_kv];
                    NULL otherwise */
  void *workspace;
  size_t workspace_bytes;
  void *impl;          /**< the call's own data: its descriptor and state, oneDNN's primitives */
  float *scratch;      /**< baselines: score matrix, or recurrent state + features */
  attn_status status;  /**< first failure seen by an attn call (ATTN_OK otherwise) */
  const char *failure; /**< first failure seen by a baseline (NULL otherwise) */
  /* decode: copies of the K/V cache that the calls take in turn (bench_work_copy_cache) */
  char *copies; /**< `ncopies` copies of K (kbytes) then V (vbytes); NULL: the call's own */
  size_t ncopies, turn, kbytes, vbytes;
} bench_work;

/** Floats per token and value head of a delta-rule shape's log gates: d (KDA), 1 (GDN), 0. */
static inline size_t bench_delta_gate_width(const bench_shape *s) {
  return s->delta_gate == ATTN_DELTA_FEATURE ? s->d : s->delta_gate == ATTN_DELTA_SCALAR ? 1 : 0;
}
/** A decode step (one token continuing a state, no cache): the linear and delta-rule steps and
 *  the baselines standing in for them. */
static inline int bench_shape_step(const bench_shape *s) {
  return s->kind == BENCH_LINEAR_STEP || s->kind == BENCH_DELTA_STEP ||
         ((s->kind == BENCH_RECURRENT || s->kind == BENCH_DELTA_LOOP) && s->n_q == 1);
}
/** Whether v's rows are decode steps (no cache length). */
static inline int bench_variant_step(const bench_variant *v) {
  return v->kind == BENCH_LINEAR_STEP || v->kind == BENCH_DELTA_STEP;
}

/** Floats per token and head of s's log gates: m for per-feature gates, 1 for scalar ones. */
static inline size_t bench_gate_width(const bench_shape *s) { return s->gate == ATTN_GATE_FEATURE ? s->m : 1; }
/** The layout of bench_work's log gates: [n_kv][h_kv][width], or {0, 1} for a fixed decay (one
 *  per head for every token). Gate head g goes with key/value head g. */
static inline attn_layout bench_gate_layout(const bench_shape *s) {
  const size_t width = bench_gate_width(s);
  return s->fixed_decay ? (attn_layout){0, 1} : (attn_layout){s->h_kv * width, width};
}

/** The layout of a tensor in bench_work's buffers (heads of width w over n tokens): [n][heads][w],
 *  or [heads][n][w] with head_major (each head's rows contiguous: --kv-layout head for softmax's
 *  K and V, --linear-layout head for a linear call's Q, K, V and O, which the recurrent baseline
 *  reads the same way). The same elements either way. */
static inline attn_layout bench_layout(int head_major, size_t n, size_t heads, size_t w) {
  return head_major ? (attn_layout){w, n * w} : (attn_layout){heads * w, w};
}

/** Allocate and fill the buffers of one call (and its log gates, when s has a gate), then set up
 *  `call` on them. 0 on success; otherwise err says why. */
int bench_work_init(bench_work *w, const bench_shape *s, const bench_call *call, unsigned seed, char *err,
                    size_t errlen);
void bench_work_free(bench_work *w);
/** The one kernel: runs w's call `iters` times (ctx is a bench_work). */
void bench_work_run(void *ctx, size_t iters);

/* Helpers for the calls' setup and run. */

/** 64-byte aligned, zeroed (first touch outside the timed region); NULL when out of memory. With
 *  bench_hugepages, buffers of 2 MiB and more are 2 MiB aligned and advised MADV_HUGEPAGE (Linux
 *  transparent huge pages) before that touch. */
void *bench_alloc64(size_t bytes);
/** --hugepages: set once, before the first allocation. */
extern int bench_hugepages;
/** Whether this build can advise huge pages (Linux's MADV_HUGEPAGE). */
int bench_hugepages_supported(void);
/** The kernel's transparent huge page mode (always, madvise, never; "unknown" without
 *  /sys/kernel/mm/transparent_hugepage) into buf. */
const char *bench_thp_mode(char *buf, size_t len);
/** w->impl: `bytes` zeroed bytes for the call's own data; NULL (err says why) when out of memory. */
void *bench_work_impl(bench_work *w, size_t bytes, char *err, size_t errlen);
/** After the call's *_workspace_size query (status st, function `what`) filled
 *  w->workspace_bytes: allocate the workspace. 0 on success; otherwise err says why. */
int bench_work_workspace(bench_work *w, attn_status st, const char *what, char *err, size_t errlen);
/** "what: status" in err; returns -1. */
int bench_work_fail(char *err, size_t errlen, const char *what, attn_status st);
/** Decode rows read their K/V cache from memory, as an engine's decode step does (each layer's
 *  cache read once per step, the other layers' in between): a decode work keeps copies of its
 *  cache and each call reads the next one. bench_decode_copies: the copies wanted (--decode-copies;
 *  0, the default: as many as make twice the last-level cache together with the other works
 *  measured at once, bench_concurrent_works; 1: one cache that every call reads again, served
 *  from L2 / L3 where it fits). */
extern size_t bench_decode_copies;
extern size_t bench_concurrent_works;
/** Copies of a cache of `bytes` for one work: bench_decode_copies, or its rule when 0. */
size_t bench_cache_copies(size_t bytes);
/** Set up w's copies of a cache whose K (kbytes from k) and V (vbytes from v) a decode call
 *  reads, in the stored type (bench_cache_copies of them; one: none made, the call reads k and v).
 *  0 on success; otherwise err says why. */
int bench_work_copy_cache(bench_work *w, const void *k, size_t kbytes, const void *v, size_t vbytes, char *err,
                          size_t errlen);
/** The K and V this call reads: *k and *v themselves without copies, else the next copy's. */
void bench_work_cache(bench_work *w, const void **k, const void **v);
/** The state a delta-rule decode row starts from (the library's and the baseline's alike):
 *  `count` floats uniform in [-0.1, 0.1) from a fixed seed. */
void bench_delta_state_fill(float *state, size_t count);
/** Record the first failing status of w's attn calls. */
static inline void bench_work_status(bench_work *w, attn_status st) {
  if (st != ATTN_OK && w->status == ATTN_OK) w->status = st;
}

/* ------------------------------------------------------------------------------------------ */
/* Baselines (baselines.c, baseline_onednn.c)                                                   */
/* ------------------------------------------------------------------------------------------ */

/** The baselines, in the order of every report's columns. */
typedef enum bench_base {
  BENCH_BASE_OPENBLAS,  /**< naive softmax attention: OpenBLAS sgemm, vectorised row softmax, sgemm */
  BENCH_BASE_ONEDNN,    /**< naive softmax attention: oneDNN matmul, softmax, matmul primitives */
  BENCH_BASE_RECURRENT, /**< causal linear attention: one-pass recurrent loop */
  BENCH_BASE_DELTA,     /**< the delta rule: token loop, two passes over the state per token */
  BENCH_BASE_COUNT
} bench_base;

typedef struct bench_baseline_info {
  const char *name;       /**< the impl name of its rows: "openblas", "onednn", "recurrent" */
  const char *what;       /**< the algorithm, one line */
  bench_kind kind;        /**< the shape kind of its rows */
  int softmax;            /**< stands in for softmax prefill: an n_q x n_kv score matrix per thread */
  int available;          /**< built in and usable in this run */
  const bench_call *call; /**< set up, run and tear down one of its calls */
  char ran_on[256];       /**< what ran: library, version, core or ISA, threads */
  char flags[128];        /**< compiler flags of the bench's own code in it */
  char absent[128];       /**< why it is not available */
} bench_baseline_info;

/** Limit the baseline libraries to one thread per call and describe what each runs on. */
void bench_baselines_init(bench_baseline_info out[BENCH_BASE_COUNT]);
/** The baseline whose rows have shape kind `kind`; BENCH_BASE_COUNT if none. */
bench_base bench_baseline_of(bench_kind kind);
/** Largest score matrix the softmax baselines allocate per thread, in bytes. */
#define BENCH_BLAS_MAX_BYTES ((size_t)1 << 30)
/** Set up w->scratch, the memory the OpenBLAS, oneDNN and recurrent baselines work in. */
int bench_baseline_scratch(bench_work *w, char *err, size_t errlen);
/** The oneDNN baseline's call (baseline_onednn.c): primitives and memory objects for w->s are
 *  made in setup; only where bench_baselines_init reported it available. */
extern const bench_call bench_onednn_call;
/** The delta rule's token loop (baseline_delta.c). */
extern const bench_call bench_delta_loop_call;
/** Fill info's availability and ran_on for oneDNN (baseline_onednn.c). */
void bench_onednn_describe(bench_baseline_info *info);

/* ------------------------------------------------------------------------------------------ */
/* Machine, build and limits (sysinfo.c)                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct bench_sysinfo {
  char cpu[128];
  int cores;
  char isas[128]; /**< e.g. "scalar(native) avx2(native) neon(emulated)" */
  char compiler[160];
  char flags[256];
  char version[32];
  char git[64];
  char date[40]; /**< UTC, ISO 8601 */
  char hostname[64];
  double load_start, load_end;
} bench_sysinfo;

void bench_sysinfo_fill(bench_sysinfo *info);
double bench_loadavg(void);
/** The largest CPU cache's bytes (sysfs; 32 MiB where it cannot be read). */
size_t bench_llc_bytes(void);
/** Bytes that a pass over comes from memory rather than a cache: twice the last-level cache,
 *  128 MiB at least (the read-bandwidth probes' buffers, the decode rows' copies in all). */
size_t bench_memory_bytes(void);

/** One FMA peak probe: a path's (scalar, avx2, avx512, neon) or a machine probe, measured at
 *  the start and again at the end of the run. */
typedef struct bench_probe {
  const char *name;
  attn_isa path;     /**< the library path it bounds; ATTN_ISA_NONE for a machine probe */
  double start, end; /**< GFLOP/s for the pool's threads, each the best of several trials */
} bench_probe;

#define BENCH_MAX_PROBES 4

typedef struct bench_limits {
  bench_probe probe[BENCH_MAX_PROBES]; /**< the probes this CPU runs natively */
  size_t nprobes;
  double peak[ATTN_ISA_COUNT]; /**< per path: its probe's start figure; 0: not measured */
  double machine_peak;         /**< best start figure over all probes */
  double drift;                /**< largest |end / start - 1| over the probes */
  double bw;                   /**< read bandwidth GB/s for the pool's threads */
} bench_limits;

/** Measure every probe this CPU runs natively (end = 0 until bench_measure_peaks_end). */
void bench_measure_peaks(bench_pool *pool, bench_limits *l);
/** Measure them again at the end of the run, and the drift. */
void bench_measure_peaks_end(bench_pool *pool, bench_limits *l);
/** Read bandwidth in GB/s: every pool thread sums its own buffer (total `bytes`), best sample. */
double bench_measure_bandwidth(bench_pool *pool, size_t bytes, double seconds);

/* ------------------------------------------------------------------------------------------ */
/* Variants, rows, results (bench_attn.c, report.c)                                             */
/* ------------------------------------------------------------------------------------------ */

typedef enum bench_row_state { ROW_PENDING, ROW_OK, ROW_SKIPPED, ROW_FAILED } bench_row_state;

typedef struct bench_row {
  const bench_variant *var;
  const char *impl; /**< path name ("avx2", "scalar", ...) or baseline name */
  attn_isa isa;     /**< path; ATTN_ISA_NONE for baselines */
  int native;       /**< the path runs the CPU's own instructions (baselines: 1) */
  int baseline;     /**< a baseline row */
  int extra;        /**< added by the crossover search below the sweep */
  unsigned retried; /**< measured again because it was noisy */
  bench_shape shape;
  bench_cost cost; /**< per call, one thread */
  bench_row_state state;
  char note[160];
  bench_stats st;
  const struct bench_row *base[BENCH_BASE_COUNT]; /**< attn rows: the baseline rows of the same
                                                       shape, set when the sweep is done */
} bench_row;

typedef struct bench_crossover {
  const bench_variant *linear, *softmax;
  attn_isa isa;
  size_t d;
  double n_star;             /**< > 0: interpolated n*; 0: none */
  int where;                 /**< 0: found; -1: linear faster at every n; 1: softmax faster at every n */
  size_t n_lo, n_hi;         /**< common range measured */
  double ratio_lo, ratio_hi; /**< t_linear / t_softmax at n_lo and n_hi */
} bench_crossover;

typedef struct bench_results {
  char command[512]; /**< the command line */
  bench_row *rows;
  size_t count, cap;
  bench_crossover *cross;
  size_t ncross;
  bench_limits limits;
  bench_sysinfo info;
  bench_baseline_info base[BENCH_BASE_COUNT];
  const bench_variant *const *vars; /**< every variant, in the order of the reports */
  size_t nvars;
  int threads;
  int pin;
  int hugepages;    /**< --hugepages: large buffers advised MADV_HUGEPAGE */
  int call_threads; /**< --latency: each attn call runs on this many threads (one sequence); 0: off */
  bench_timing timing;
  size_t window;
  int noisy_run;
  char noise_note[384];
  double elapsed;
} bench_results;

/* report.c */
double bench_row_gflops(const bench_results *r, const bench_row *row);
double bench_row_tokens(const bench_results *r, const bench_row *row);
double bench_row_gbps(const bench_results *r, const bench_row *row);
double bench_row_frac_peak(const bench_results *r, const bench_row *row);
double bench_row_frac_machine_peak(const bench_results *r, const bench_row *row);
/** Baseline time / attn time for an attn row and baseline b; NAN if not measured. */
double bench_row_speedup(const bench_row *row, bench_base b);
double bench_row_frac_bw(const bench_results *r, const bench_row *row);
void bench_print_header(FILE *f, const bench_results *r);
void bench_print_row_header(FILE *f);
void bench_print_row(FILE *f, const bench_results *r, const bench_row *row, size_t index, size_t total);
/** The FMA peak of every probe, the machine's best peak and the bandwidth; at_end: start -> end
 *  of every probe and the largest drift. */
void bench_print_limits(FILE *f, const bench_results *r, int at_end);
/** Every baseline row with the speedup of each path, the range per baseline, and where attn
 *  loses. */
void bench_print_baselines(FILE *f, const bench_results *r);
void bench_print_crossovers(FILE *f, const bench_results *r);
/** The cost of a feature: each variant that is another plus one feature (a delta-rule prefill
 *  with a checkpoint at every chunk), its time over its twin's at the same path, d and n. */
void bench_print_twins(FILE *f, const bench_results *r);
/** The twin of v (the same call without the feature) and the feature, or NULL. */
const char *bench_twin_of(const bench_variant *v, const char **feature);
/** The ok attn row of the variant named `name` on row's path, d and n; NULL if none. */
const bench_row *bench_row_like(const bench_results *r, const bench_row *row, const char *name);
int bench_write_csv(const char *path, const bench_results *r);
int bench_write_json(const char *path, const bench_results *r);
int bench_write_markdown(const char *path, const bench_results *r);
/** "1.5 ms", "230 us": a time in seconds, or "-" when it is not positive. */
const char *bench_fmt_time(char *buf, size_t len, double s);
/** "512", "2k", "1.5k": a token count. */
const char *bench_fmt_n(char *buf, size_t len, double n);
/** A crossover's n*: "1488", "< 128", or past the range (terse: "> 64k"; else "none in range (> 64k)"). */
const char *bench_crossover_text(char *buf, size_t len, const bench_crossover *c, int terse);

/* ---- families, summary, plot (summary.c, plot.c) ---- */

/** The families the summary and the plot group variants into, in their order. */
typedef enum bench_family {
  BENCH_FAM_SOFTMAX, /**< softmax prefill */
  BENCH_FAM_LINEAR,  /**< linear attention's feature maps, bidirectional, causal and windowed */
  BENCH_FAM_GATED,   /**< decayed and gated linear attention */
  BENCH_FAM_GAU,     /**< GAU, FLASH's linear part, selective attention */
  BENCH_FAM_DECODE,  /**< every decode row: over a cache, or the linear step */
  BENCH_FAM_DELTA,   /**< the delta rule (GDN, KDA, DeltaNet): prefill, checkpoints, decode step; not
                          plotted (its rows have their own d and heads) */
  BENCH_FAM_COUNT
} bench_family;

bench_family bench_family_of(const bench_variant *v);
const char *bench_family_name(bench_family f);
/** The path the summary and the plot show: the one `auto` picks when the results have it, else
 *  the measured path with the highest FMA peak. */
attn_isa bench_shown_path(const bench_results *r);
/** The ok attn row of v on isa at head dimension d and size n (n_kv); NULL if none. */
const bench_row *bench_find_row(const bench_results *r, const bench_variant *v, attn_isa isa, size_t d, size_t n);

/** A file the run wrote, for the summary's list. */
typedef struct bench_file {
  const char *what, *path;
} bench_file;

/** The one-screen summary (it starts with the line "== attn-bench summary"): the machine, per
 *  family the best figure on the shown path against its baselines and the peak, the crossovers,
 *  the files. */
void bench_print_summary(FILE *f, const bench_results *r, const bench_file *files, size_t nfiles);
/** The same as one Markdown table (a row per family) under a caption line naming the machine,
 *  date and git revision, for the README. 0 on success. */
int bench_write_summary(const char *path, const bench_results *r);

/** Write the gnuplot script next to svg (svg with ".gp") and run gnuplot if it is on PATH: small
 *  multiples, one panel per family, to the SVG and, where gnuplot has pngcairo, a PNG beside it
 *  (svg with ".png", into png). Returns 1 if the SVG was made, 0 if gnuplot is missing, -1 on
 *  error; msg says which. */
int bench_write_plot(const char *svg, const bench_results *r, char *png, size_t pnglen, char *msg, size_t msglen);

/* ---- the progress line (progress.c) ---- */

typedef struct bench_progress {
  int tty;                         /**< stderr is a terminal: one line redrawn in place */
  int shares_stdout;               /**< stdout is a terminal too: clear the line before a row */
  int shown;                       /**< the line is on the terminal now */
  size_t done;                     /**< points done at the last update */
  double start;                    /**< bench_now() when the sweep started */
  double expect_done, expect_left; /**< expected seconds of the points done, and still to run */
  double max_call_time;
} bench_progress;

/** Seconds measuring row is expected to take (0: expected to be skipped). */
double bench_row_expected_seconds(const bench_results *r, const bench_row *row, double max_call_time);
/** Start with every planned row of r. */
void bench_progress_start(bench_progress *p, const bench_results *r, double max_call_time);
/** A row planned after the start (the crossover's search below the sweep). */
void bench_progress_add(bench_progress *p, const bench_results *r, const bench_row *row);
/** Take the line off the terminal before something is printed to stdout. */
void bench_progress_clear(bench_progress *p);
/** A row is finished: `done` of `total`; redraw the line. */
void bench_progress_done(bench_progress *p, const bench_results *r, const bench_row *row, size_t done, size_t total);
/** The sweep is over: clear the line. */
void bench_progress_end(bench_progress *p);

#endif
