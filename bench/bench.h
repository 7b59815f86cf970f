/*
 * bench.h: shared types of the attn benchmark harness (attn-bench).
 *
 *   bench_attn.c  command line, the sweep plan, crossover search, main
 *   timing.c      the one timing loop (CLOCK_MONOTONIC, calibration, warm-up, statistics) and the
 *                 worker pool behind --threads and --pin
 *   work.c        buffers and the one kernel entry point for every measured call (attn and baselines)
 *   baselines.c   naive OpenBLAS attention and the plain C recurrent linear loop
 *   sysinfo.c     machine, build and run description; peak and bandwidth probes
 *   report.c      the one row printer, tables, CSV, JSON, Markdown and the gnuplot SVG
 *   flops.h       the one flop/byte table
 */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H

#include <stddef.h>
#include <stdio.h>

#include "attn.h"
#include "flops.h"

/* ------------------------------------------------------------------------------------------ */
/* Timing (timing.c)                                                                           */
/* ------------------------------------------------------------------------------------------ */

/** A measured kernel: run the work `iters` times on one thread's context. */
typedef void (*bench_kernel)(void *ctx, size_t iters);

typedef struct bench_timing {
  double min_time;      /**< keep sampling until this many seconds are spent (and min_reps) */
  unsigned min_reps;    /**< at least this many samples */
  unsigned max_reps;    /**< at most this many samples */
  unsigned warmup;      /**< untimed runs before sampling (calibration runs count) */
  double noisy_spread;  /**< a result whose spread exceeds this is flagged noisy */
} bench_timing;

/** Seconds per iteration (one call), over the samples. */
typedef struct bench_stats {
  double median, min, max, q1, q3;
  double spread; /**< (q3 - q1) / median: interquartile range relative to the median */
  unsigned reps; /**< samples */
  size_t iters;  /**< calls per sample */
  double cpu_share; /**< process CPU time / (wall time x threads) while measuring: < 1 when
                         other tasks took the CPU */
  double other_load; /**< CPUs kept busy by other tasks while measuring (from /proc/stat; NAN if
                          unknown, resolution one clock tick): co-runners share L3, memory and clock */
  int noisy;     /**< spread > noisy_spread, or cpu_share < 0.9 */
} bench_stats;

typedef struct bench_pool bench_pool;

/** Start threads - 1 workers (the caller is worker 0). pin_cpu < 0: no pinning; otherwise worker
 *  t is pinned to CPU (pin_cpu + t) mod (CPUs online). NULL on failure (message in err). */
bench_pool *bench_pool_create(int threads, int pin_cpu, char *err, size_t errlen);
void bench_pool_destroy(bench_pool *pool);
int bench_pool_threads(const bench_pool *pool);

/** Time fn on every worker at once (ctx[t] for worker t): calibrate calls per sample, warm up,
 *  then sample until the timing's limits are met. A sample is wall time from the release of all
 *  workers to the last one finishing, divided by the calls per sample. */
void bench_measure(bench_pool *pool, const bench_timing *timing, bench_kernel fn, void *const *ctx,
                   bench_stats *out);

/** CLOCK_MONOTONIC in seconds. */
double bench_now(void);

/* ------------------------------------------------------------------------------------------ */
/* Work: buffers and the kernel for one measured call (work.c, baselines.c)                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct bench_work {
  bench_shape s;
  float *q, *k, *v, *o;
  void *workspace;
  size_t workspace_bytes;
  attn_softmax_desc sdesc;
  attn_linear_desc ldesc;
  attn_linear_state state; /**< linear decode step */
  void *state_mem;
  float *scratch;          /**< baselines: BLAS score matrix, or recurrent state + features */
  attn_status status;      /**< first failure seen by the kernel (ATTN_OK otherwise) */
} bench_work;

/** Allocate and fill the buffers of one call. 0 on success; otherwise err says why. */
int bench_work_init(bench_work *w, const bench_shape *s, unsigned seed, char *err, size_t errlen);
void bench_work_free(bench_work *w);
/** The one kernel: runs the call w->s describes `iters` times (ctx is a bench_work). */
void bench_work_run(void *ctx, size_t iters);

/** Whether the OpenBLAS baseline was compiled in. */
int bench_have_openblas(void);
/** Baselines (baselines.c); called by bench_work_run. */
void bench_baseline_blas(bench_work *w);
void bench_baseline_recurrent(bench_work *w);
/** Scratch floats a baseline needs. */
size_t bench_baseline_scratch(const bench_shape *s);
/** Largest score matrix the BLAS baseline allocates per thread, in bytes. */
#define BENCH_BLAS_MAX_BYTES ((size_t)1 << 30)

/* ------------------------------------------------------------------------------------------ */
/* Machine, build and limits (sysinfo.c)                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct bench_sysinfo {
  char cpu[128];
  int cores;
  char isas[128];     /**< e.g. "scalar(native) avx2(native) neon(emulated)" */
  char compiler[160];
  char flags[256];
  char version[32];
  char git[64];
  char date[40];      /**< UTC, ISO 8601 */
  char hostname[64];
  double load_start, load_end;
} bench_sysinfo;

void bench_sysinfo_fill(bench_sysinfo *info);
double bench_loadavg(void);

typedef struct bench_limits {
  double peak[ATTN_ISA_COUNT];     /**< GFLOP/s for the pool's threads, 0: not measured */
  double peak_end[ATTN_ISA_COUNT]; /**< re-measured at the end (noise check) */
  double bw;                       /**< read bandwidth GB/s for the pool's threads */
  double best_peak;
} bench_limits;

/** Flops per iteration and kernel of the peak probe for a path; 0 if none is built. */
int bench_peak_probe(attn_isa isa, bench_kernel *fn, double *flops_per_iter);
/** Measure the peak of one path (GFLOP/s, all pool threads together). 0 if no probe. */
double bench_measure_peak(bench_pool *pool, attn_isa isa, double seconds);
/** Read bandwidth in GB/s: every pool thread sums its own buffer (total `bytes`), best sample. */
double bench_measure_bandwidth(bench_pool *pool, size_t bytes, double seconds);

/* ------------------------------------------------------------------------------------------ */
/* Variants, rows, results (bench_attn.c, report.c)                                             */
/* ------------------------------------------------------------------------------------------ */

typedef enum bench_mode { BENCH_PREFILL, BENCH_DECODE } bench_mode;

typedef struct bench_variant {
  const char *name;
  bench_mode mode;
  bench_kind kind;              /**< BENCH_SOFTMAX, BENCH_LINEAR or BENCH_LINEAR_STEP */
  int causal;                   /**< softmax: right bound 0; linear: causal */
  int windowed;                 /**< softmax: causal window of --window keys */
  attn_feature_map map;         /**< linear */
  int normalize;                /**< linear */
  int quadratic;                /**< capped by --quad-n-max */
  const char *partner;          /**< linear prefill: the softmax variant of the crossover */
  const char *help;
} bench_variant;

extern const bench_variant bench_variants[];
extern const size_t bench_variant_count;

typedef enum bench_row_state { ROW_PENDING, ROW_OK, ROW_SKIPPED, ROW_FAILED } bench_row_state;

typedef struct bench_row {
  const bench_variant *var;
  const char *impl;   /**< path name ("avx2", "scalar", ...) or baseline ("openblas", "plain-c") */
  attn_isa isa;       /**< path; ATTN_ISA_NONE for baselines */
  int native;         /**< the path runs the CPU's own instructions (baselines: 1) */
  int baseline;       /**< a baseline row */
  int extra;          /**< added by the crossover search below the sweep */
  unsigned retried;   /**< measured again because it was noisy */
  bench_shape shape;
  bench_cost cost;    /**< per call, one thread */
  bench_row_state state;
  char note[160];
  bench_stats st;
  double base_time;   /**< attn rows: the baseline's median seconds (0: none) */
  const char *base_impl;
  char base_note[160]; /**< why there is no baseline ratio */
} bench_row;

typedef struct bench_crossover {
  const bench_variant *linear, *softmax;
  attn_isa isa;
  size_t d;
  double n_star;     /**< > 0: interpolated n*; 0: none */
  int where;         /**< 0: found; -1: linear faster at every n; 1: softmax faster at every n */
  size_t n_lo, n_hi; /**< common range measured */
  double ratio_lo, ratio_hi; /**< t_linear / t_softmax at n_lo and n_hi */
} bench_crossover;

typedef struct bench_results {
  char command[512];  /**< the command line */
  bench_row *rows;
  size_t count, cap;
  bench_crossover *cross;
  size_t ncross;
  bench_limits limits;
  bench_sysinfo info;
  int threads;
  int pin;
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
double bench_row_frac_bw(const bench_results *r, const bench_row *row);
void bench_print_header(FILE *f, const bench_results *r);
void bench_print_row_header(FILE *f);
void bench_print_row(FILE *f, const bench_results *r, const bench_row *row, size_t index, size_t total);
void bench_print_baselines(FILE *f, const bench_results *r);
void bench_print_crossovers(FILE *f, const bench_results *r);
int bench_write_csv(const char *path, const bench_results *r);
int bench_write_json(const char *path, const bench_results *r);
int bench_write_markdown(const char *path, const bench_results *r);
/** Write the gnuplot script next to svg (svg with ".gp") and run gnuplot if it is on PATH.
 *  Returns 1 if the SVG was made, 0 if gnuplot is missing, -1 on error; msg says which. */
int bench_write_plot(const char *svg, const bench_results *r, char *msg, size_t msglen);

#endif
