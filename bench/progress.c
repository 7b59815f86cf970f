/* progress.c: the sweep's progress line on stderr (points done, the total, time elapsed and an
 * estimate of the time left), redrawn in place on a terminal, a plain line every few points
 * otherwise. The estimate adds up the points' expected cost (a model of one call from its counted
 * work and this machine's measured limits, times the calls a measurement makes) and scales it by
 * how the points done so far compared with their own expected cost. */
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "bench.h"

/* The fraction of a path's FMA peak (or of the read bandwidth) an attn call is assumed to reach,
 * and that of the machine's peak a baseline (naive attention, a token-by-token loop) reaches; the
 * scale from the points done corrects both. */
#define ASSUMED_FRACTION          0.2
#define ASSUMED_BASELINE_FRACTION 0.05
/* A decode row's copies of its cache cost this many passes of their bytes at the read bandwidth
 * to make: the first touch's page faults, the write and the read. */
#define COPY_PASSES 6
/* Points between two plain lines when stderr is not a terminal. */
#define PLAIN_EVERY 10

/* Seconds one call of row is expected to take; 0 when nothing bounds it. */
static double expected_call(const bench_results *r, const bench_row *row) {
  const double peak = row->baseline ? r->limits.machine_peak : r->limits.peak[row->isa];
  const double fraction = row->baseline ? ASSUMED_BASELINE_FRACTION : ASSUMED_FRACTION;
  const double compute = peak > 0 ? row->cost.flops * 1e-9 / (fraction * peak) : 0;
  const double memory = r->limits.bw > 0 ? row->cost.bytes * 1e-9 / (ASSUMED_FRACTION * r->limits.bw) : 0;
  return compute > memory ? compute : memory;
}

double bench_row_expected_seconds(const bench_results *r, const bench_row *row, double max_call_time) {
  const double call = expected_call(r, row);
  if (max_call_time > 0 && call > 2 * max_call_time) return 0; /* most likely skipped */
  const bench_timing *t = &r->timing;
  const double sampling = t->min_time > t->min_reps * call ? t->min_time : t->min_reps * call;
  /* calibration (doubling the calls until a sample lasts min_time / 20) and the warm-up */
  double cost = sampling + (t->warmup + 2) * call + t->min_time / 10;
  /* a decode row first makes copies of its cache (bench_cache_copies) */
  if (row->var->mode == BENCH_DECODE && row->var->kind != BENCH_LINEAR_STEP && r->limits.bw > 0)
    cost += COPY_PASSES * (double)bench_cache_copies((size_t)row->cost.bytes) * row->cost.bytes * 1e-9 / r->limits.bw;
  return cost;
}

static void fmt_clock(char *buf, size_t len, double s) {
  if (!(s >= 0) || !isfinite(s)) s = 0;
  const long t = lround(s);
  snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

void bench_progress_start(bench_progress *p, const bench_results *r, double max_call_time) {
  *p = (bench_progress){0};
  p->tty = isatty(STDERR_FILENO);
  p->shares_stdout = p->tty && isatty(STDOUT_FILENO);
  p->max_call_time = max_call_time;
  p->start = bench_now();
  for (size_t i = 0; i < r->count; i++) p->expect_left += bench_row_expected_seconds(r, &r->rows[i], max_call_time);
}

void bench_progress_add(bench_progress *p, const bench_results *r, const bench_row *row) {
  p->expect_left += bench_row_expected_seconds(r, row, p->max_call_time);
}

void bench_progress_clear(bench_progress *p) {
  if (p->shown && p->shares_stdout) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->shown = 0;
  }
}

void bench_progress_done(bench_progress *p, const bench_results *r, const bench_row *row, size_t done, size_t total) {
  const double e = bench_row_expected_seconds(r, row, p->max_call_time);
  p->expect_done += e;
  p->expect_left = p->expect_left > e ? p->expect_left - e : 0;
  if (done >= total) p->expect_left = 0;
  const double elapsed = bench_now() - p->start;
  /* how the points done compared with their expected cost; 1 until there is something to compare */
  const double scale = p->expect_done > 0.5 ? elapsed / p->expect_done : 1;
  char el[32], left[32];
  fmt_clock(el, sizeof el, elapsed);
  fmt_clock(left, sizeof left, scale * p->expect_left);
  p->done = done;
  if (p->tty) {
    fprintf(stderr, "\r\033[K[%zu/%zu points, %s elapsed, ~%s left]", done, total, el, left);
    p->shown = 1;
  } else if (done % PLAIN_EVERY == 0) {
    fprintf(stderr, "attn-bench: %zu/%zu points, %s elapsed, ~%s left\n", done, total, el, left);
  }
  fflush(stderr);
}

void bench_progress_end(bench_progress *p) {
  char el[32];
  fmt_clock(el, sizeof el, bench_now() - p->start);
  if (p->shown) fputs("\r\033[K", stderr);
  if (!p->tty) fprintf(stderr, "attn-bench: %zu points in %s\n", p->done, el);
  fflush(stderr);
  p->shown = 0;
}
