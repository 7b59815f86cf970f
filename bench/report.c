/* report.c: the results as tables: the one row printer (stdout, while it runs), the baseline and
 * crossover tables, CSV, JSON and Markdown (the summary is summary.c's, the plot plot.c's). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* ---- derived metrics (all from flops.h via row->cost) ---------------------------------------- */

static double per_second(const bench_results *r, const bench_row *row, double amount) {
  return row->state == ROW_OK && row->st.median > 0 ? amount * r->threads / row->st.median : NAN;
}
double bench_row_gflops(const bench_results *r, const bench_row *row) {
  return per_second(r, row, row->cost.flops) * 1e-9;
}
double bench_row_tokens(const bench_results *r, const bench_row *row) { return per_second(r, row, row->cost.tokens); }
double bench_row_gbps(const bench_results *r, const bench_row *row) {
  return per_second(r, row, row->cost.bytes) * 1e-9;
}
/* Attn rows against their path's peak; baselines, built for the machine's best ISA, against the
 * machine's best peak. */
double bench_row_frac_peak(const bench_results *r, const bench_row *row) {
  double peak = row->baseline ? r->limits.machine_peak : r->limits.peak[row->isa];
  return peak > 0 ? bench_row_gflops(r, row) / peak : NAN;
}
/* Every row against the best FMA peak of any probe, AVX-512 included: how much of the core. */
double bench_row_frac_machine_peak(const bench_results *r, const bench_row *row) {
  return r->limits.machine_peak > 0 ? bench_row_gflops(r, row) / r->limits.machine_peak : NAN;
}
double bench_row_frac_bw(const bench_results *r, const bench_row *row) {
  return r->limits.bw > 0 ? bench_row_gbps(r, row) / r->limits.bw : NAN;
}
double bench_row_speedup(const bench_row *row, bench_base b) {
  const bench_row *base = row->base[b];
  return row->state == ROW_OK && base && base->state == ROW_OK && row->st.median > 0 ? base->st.median / row->st.median
                                                                                     : NAN;
}

/* ---- formatting ----------------------------------------------------------------------------- */

const char *bench_fmt_time(char *buf, size_t len, double s) {
  if (!(s > 0))
    snprintf(buf, len, "-");
  else if (s < 1e-6)
    snprintf(buf, len, "%.1f ns", s * 1e9);
  else if (s < 1e-3)
    snprintf(buf, len, "%.2f us", s * 1e6);
  else if (s < 1)
    snprintf(buf, len, "%.2f ms", s * 1e3);
  else
    snprintf(buf, len, "%.3f s", s);
  return buf;
}

static const char *fmt_si(char *buf, size_t len, double v) {
  if (!isfinite(v))
    snprintf(buf, len, "-");
  else if (v >= 1e9)
    snprintf(buf, len, "%.2fG", v * 1e-9);
  else if (v >= 1e6)
    snprintf(buf, len, "%.2fM", v * 1e-6);
  else if (v >= 1e3)
    snprintf(buf, len, "%.2fk", v * 1e-3);
  else
    snprintf(buf, len, "%.1f", v);
  return buf;
}

/* Token counts as people write them: 128, 1k, 64k (k = 1024). */
const char *bench_fmt_n(char *buf, size_t len, double n) {
  if (n >= 1024 && fmod(n, 1024) == 0)
    snprintf(buf, len, "%.0fk", n / 1024);
  else if (n >= 1024)
    snprintf(buf, len, "%.1fk", n / 1024);
  else
    snprintf(buf, len, "%.0f", n);
  return buf;
}

static const char *fmt_num(char *buf, size_t len, const char *fmt, double v) {
  if (!isfinite(v))
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, fmt, v);
  return buf;
}

/* Append a formatted item to a comma-separated list. */
static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used && used + 2 < len) strcat(buf, ", "), used += 2;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

/* What a baseline is and ran on, or why it is absent: one line. */
static const char *baseline_text(char *buf, size_t len, const bench_baseline_info *b) {
  if (!b->available)
    snprintf(buf, len, "%s: not available: %s", b->name, b->absent);
  else
    snprintf(buf, len, "%s: %s; %s%s%s", b->name, b->what, b->ran_on, b->flags[0] ? "; own code built with " : "",
             b->flags);
  return buf;
}

/* ---- stdout ---------------------------------------------------------------------------------- */

void bench_print_header(FILE *f, const bench_results *r) {
  const bench_sysinfo *i = &r->info;
  fprintf(f, "attn-bench: attn %s (git %s), %s\n", i->version, i->git, i->date);
  fprintf(f, "machine:  %s, %d CPUs online; paths: %s\n", i->cpu, i->cores, i->isas);
  fprintf(f, "compiler: %s; %s\n", i->compiler, i->flags);
  fprintf(f, "run:      %s\n", r->command);
  if (r->call_threads)
    fprintf(f,
            "          one call on %d threads (--latency: its own attn_pool), min-time %g s, reps >= %u, warm-up %u, "
            "load %.2f\n",
            r->call_threads, r->timing.min_time, r->timing.min_reps, r->timing.warmup, i->load_start);
  else
    fprintf(f, "          %d thread%s%s, min-time %g s, reps >= %u, warm-up %u, load %.2f\n", r->threads,
            r->threads > 1 ? "s (independent sequences, aggregate throughput)" : "", r->pin >= 0 ? ", pinned" : "",
            r->timing.min_time, r->timing.min_reps, r->timing.warmup, i->load_start);
  char thp[32];
  fprintf(f, "memory:   %s (transparent huge pages: %s)\n",
          r->hugepages ? "buffers of 2 MiB and more advised MADV_HUGEPAGE (--hugepages)" : "default pages",
          bench_thp_mode(thp, sizeof thp));
  if (bench_decode_copies == 1)
    fprintf(f, "decode:   every call reads the same K/V cache (--decode-copies 1: from L2 / L3 where it fits)\n");
  else if (bench_decode_copies)
    fprintf(f, "decode:   each call reads the next of %zu copies of its K/V cache (--decode-copies)\n",
            bench_decode_copies);
  else
    fprintf(f,
            "decode:   each call reads the next of its K/V cache's copies, twice the %.0f MiB last-level cache in all "
            "(from memory, as an engine's step reads each layer's cache)\n",
            (double)bench_llc_bytes() / 1048576.0);
  for (int b = 0; b < BENCH_BASE_COUNT; b++) {
    char text[512];
    fprintf(f, "%-9s %s\n", b ? "" : "baseline:", baseline_text(text, sizeof text, &r->base[b]));
  }
}

void bench_print_limits(FILE *f, const bench_results *r, int at_end) {
  const bench_limits *l = &r->limits;
  fprintf(f, "%s (GFLOP/s, best of several short trials each):\n",
          at_end ? "FMA peaks, start -> end of the run" : "Limits: FMA peak per probe");
  for (size_t k = 0; k < l->nprobes; k++) {
    const bench_probe *p = &l->probe[k];
    fprintf(f, "  %-7s %7.1f", p->name, p->start);
    if (at_end) fprintf(f, " -> %7.1f (%+.1f%%)", p->end, 100 * (p->end / p->start - 1));
    fprintf(f, "  %s\n", p->path == ATTN_ISA_NONE ? "machine probe (no attn path)" : "path peak");
  }
  if (at_end)
    fprintf(f, "  largest drift %.1f%% (> 5%% makes the run noisy)\n", 100 * l->drift);
  else
    fprintf(f, "  machine best peak %.1f GFLOP/s; read bandwidth %.1f GB/s\n", l->machine_peak, l->bw);
}

void bench_print_row_header(FILE *f) {
  fprintf(f, "%-9s %-24s %-9s %4s %7s %7s %10s %10s %6s %8s %6s %6s %8s %7s %5s  %s\n", "", "variant", "impl", "d",
          "n_q", "n_kv", "median", "min", "spread", "GFLOP/s", "%peak", "%mach", "tok/s", "GB/s", "%bw", "note");
}

void bench_print_row(FILE *f, const bench_results *r, const bench_row *row, size_t index, size_t total) {
  char prog[24], nq[16], nkv[16], med[16], mn[16], spr[16], gf[16], pk[16], mpk[16], tok[16], gb[16], bw[16];
  snprintf(prog, sizeof prog, "[%zu/%zu]", index, total);
  bench_fmt_n(nq, sizeof nq, (double)row->shape.n_q);
  if (bench_shape_step(&row->shape))
    snprintf(nkv, sizeof nkv, "state");
  else
    bench_fmt_n(nkv, sizeof nkv, (double)row->shape.n_kv);
  int ok = row->state == ROW_OK;
  char flags[256];
  snprintf(flags, sizeof flags, "%s", row->note);
  if (ok && row->st.noisy) append(flags, sizeof flags, "noisy");
  if (row->retried) append(flags, sizeof flags, "retried");
  if (ok && row->st.other_load > 0.3) append(flags, sizeof flags, "other tasks busy %.1f CPU", row->st.other_load);
  if (!row->native) append(flags, sizeof flags, "emulated path (native=0)");
  if (row->extra) append(flags, sizeof flags, "below the sweep, for the crossover");
  fprintf(f, "%-9s %-24s %-9s %4zu %7s %7s %10s %10s %6s %8s %6s %6s %8s %7s %5s  %s\n", prog, row->var->name,
          row->impl, row->shape.d, nq, nkv, bench_fmt_time(med, sizeof med, ok ? row->st.median : 0),
          bench_fmt_time(mn, sizeof mn, ok ? row->st.min : 0),
          fmt_num(spr, sizeof spr, "%.1f%%", ok ? 100 * row->st.spread : NAN),
          fmt_num(gf, sizeof gf, "%.2f", bench_row_gflops(r, row)),
          fmt_num(pk, sizeof pk, "%.0f%%", 100 * bench_row_frac_peak(r, row)),
          fmt_num(mpk, sizeof mpk, "%.0f%%", 100 * bench_row_frac_machine_peak(r, row)),
          fmt_si(tok, sizeof tok, bench_row_tokens(r, row)), fmt_num(gb, sizeof gb, "%.2f", bench_row_gbps(r, row)),
          fmt_num(bw, sizeof bw, "%.0f%%", 100 * bench_row_frac_bw(r, row)), flags);
}

/* Paths present in the results, in id order. */
static size_t paths_in(const bench_results *r, attn_isa *out) {
  size_t n = 0;
  for (int isa = ATTN_ISA_SCALAR; isa < ATTN_ISA_COUNT; isa++)
    for (size_t i = 0; i < r->count; i++)
      if (!r->rows[i].baseline && r->rows[i].isa == (attn_isa)isa) {
        out[n++] = (attn_isa)isa;
        break;
      }
  return n;
}

static const bench_row *attn_row(const bench_results *r, const bench_row *like, attn_isa isa) {
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    if (!row->baseline && row->isa == isa && row->var == like->var && row->shape.d == like->shape.d &&
        row->shape.n_q == like->shape.n_q && row->shape.n_kv == like->shape.n_kv)
      return row;
  }
  return NULL;
}

/* Where an attn path stands against baseline b on one variant and d: the speedup range over the
 * sizes measured, and how many points it loses (speedup < 1). */
typedef struct ratio_range {
  size_t count, losses;
  double lo, hi;
  size_t n_lo, n_hi; /* where lo and hi were measured */
} ratio_range;

static ratio_range speedup_range(const bench_results *r, bench_base b, const bench_variant *v, attn_isa isa, size_t d) {
  ratio_range g = {0, 0, INFINITY, -INFINITY, 0, 0};
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    double x = row->baseline || row->var != v || row->isa != isa || row->shape.d != d ? NAN : bench_row_speedup(row, b);
    if (!isfinite(x)) continue;
    g.count++;
    g.losses += x < 1;
    if (x < g.lo) g.lo = x, g.n_lo = row->shape.n_q;
    if (x > g.hi) g.hi = x, g.n_hi = row->shape.n_q;
  }
  return g;
}

/* Head dimensions present in the results, in order of appearance. */
static size_t dims_in(const bench_results *r, size_t *out, size_t cap) {
  size_t nd = 0;
  for (size_t k = 0; k < r->count; k++) {
    size_t j = 0;
    while (j < nd && out[j] != r->rows[k].shape.d) j++;
    if (j == nd && nd < cap) out[nd++] = r->rows[k].shape.d;
  }
  return nd;
}

/* Per baseline, variant, path and d: the speedup range, and every point where attn is slower.
 * Plain text, or Markdown table rows (md). Returns the number of losing points. */
/* Writes the ranges; returns the points where a path is slower than a baseline, those of the
 * default path (the one `auto` picks here) in *default_losses. */
static size_t write_ranges(FILE *f, const bench_results *r, int md, size_t *default_losses) {
  attn_isa paths[ATTN_ISA_COUNT];
  size_t np = paths_in(r, paths), ds[64], nd = dims_in(r, ds, 64), losses = 0;
  const attn_isa def = attn_isa_get(); /* main restores `auto` before it reports */
  *default_losses = 0;
  char lo[16], hi[16], x[48];
  for (int b = 0; b < BENCH_BASE_COUNT; b++) {
    if (!r->base[b].available) {
      fprintf(f, md ? "| %s | not available: %s | | | | |\n" : "  %-9s not available: %s\n", r->base[b].name,
              r->base[b].absent);
      continue;
    }
    for (size_t v = 0; v < r->nvars; v++)
      for (size_t p = 0; p < np; p++)
        for (size_t k = 0; k < nd; k++) {
          ratio_range g = speedup_range(r, (bench_base)b, r->vars[v], paths[p], ds[k]);
          if (!g.count) continue;
          losses += g.losses;
          if (paths[p] == def) *default_losses += g.losses;
          const int step = bench_variant_step(r->vars[v]); /* one point, no n */
          snprintf(lo, sizeof lo, "step");
          snprintf(hi, sizeof hi, "step");
          if (!step) bench_fmt_n(lo, sizeof lo, (double)g.n_lo), bench_fmt_n(hi, sizeof hi, (double)g.n_hi);
          snprintf(x, sizeof x, "%zu of %zu", g.losses, g.count);
          fprintf(f,
                  md ? "| %s | %s | %s | %zu | %.2fx (n = %s) .. %.2fx (n = %s) | %s |\n"
                     : "  %-9s %-24s %-7s d %-4zu %.2fx (n = %s) .. %.2fx (n = %s); slower at %s points\n",
                  r->base[b].name, r->vars[v]->name, attn_isa_name(paths[p]), ds[k], g.lo, lo, g.hi, hi,
                  g.losses ? x : "no");
        }
  }
  return losses;
}

void bench_print_baselines(FILE *f, const bench_results *r) {
  attn_isa paths[ATTN_ISA_COUNT];
  size_t np = paths_in(r, paths), shown = 0;
  char n[16], t[16], x[16];
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *b = &r->rows[i];
    if (!b->baseline || !r->base[bench_baseline_of(b->shape.kind)].available) continue;
    if (!shown++) {
      fprintf(f, "\nBaselines: speedup = baseline time / attn time, same shape, same run (< 1: attn is slower)\n");
      fprintf(f, "%-24s %-9s %4s %7s %10s", "variant", "baseline", "d", "n", "base time");
      for (size_t p = 0; p < np; p++) fprintf(f, " %8s", attn_isa_name(paths[p]));
      fprintf(f, "\n");
    }
    fprintf(f, "%-24s %-9s %4zu %7s %10s", b->var->name, b->impl, b->shape.d,
            bench_variant_step(b->var) ? "step" : bench_fmt_n(n, sizeof n, (double)b->shape.n_q),
            b->state == ROW_OK ? bench_fmt_time(t, sizeof t, b->st.median) : "-");
    if (b->state != ROW_OK) {
      fprintf(f, " %s\n", b->note);
      continue;
    }
    for (size_t p = 0; p < np; p++) {
      const bench_row *a = attn_row(r, b, paths[p]);
      fprintf(f, " %8s",
              fmt_num(x, sizeof x, "%.2fx", a ? bench_row_speedup(a, bench_baseline_of(b->shape.kind)) : NAN));
    }
    fprintf(f, "\n");
  }
  if (!shown && r->count)
    fprintf(f, "\nBaselines: none measured (--no-baselines, no variant has one, or none built)\n");
  fprintf(f, "\nSpeedup ranges per baseline (baseline time / attn time over the sizes measured):\n");
  size_t def_losses, losses = write_ranges(f, r, 0, &def_losses);
  if (losses)
    fprintf(f,
            "attn is SLOWER than a baseline at %zu point%s (speedup < 1 above): %zu on the default path (%s), "
            "%zu on the others.\n",
            losses, losses > 1 ? "s" : "", def_losses, attn_isa_name(attn_isa_get()), losses - def_losses);
  else if (shown)
    fprintf(f, "attn is faster than every baseline at every point measured.\n");
}

/* Variants that are another plus one feature, by name (a variant missing from the run is skipped). */
static const struct {
  const char *variant, *twin, *feature;
} twins[] = {
    {"delta_gdn_ckpt", "delta_gdn", "a checkpoint at every chunk boundary"},
};

const char *bench_twin_of(const bench_variant *v, const char **feature) {
  for (size_t k = 0; k < sizeof twins / sizeof twins[0]; k++)
    if (!strcmp(v->name, twins[k].variant)) {
      if (feature) *feature = twins[k].feature;
      return twins[k].twin;
    }
  return NULL;
}

const bench_row *bench_row_like(const bench_results *r, const bench_row *row, const char *name) {
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *x = &r->rows[i];
    if (!x->baseline && x->state == ROW_OK && x->isa == row->isa && x->shape.d == row->shape.d &&
        x->shape.n_q == row->shape.n_q && x->shape.n_kv == row->shape.n_kv && !strcmp(x->var->name, name))
      return x;
  }
  return NULL;
}

void bench_print_twins(FILE *f, const bench_results *r) {
  size_t shown = 0;
  for (size_t k = 0; k < r->count; k++) {
    const bench_row *row = &r->rows[k];
    const char *feature, *twin = bench_twin_of(row->var, &feature);
    const bench_row *other = twin && !row->baseline && row->state == ROW_OK ? bench_row_like(r, row, twin) : NULL;
    if (!other) continue;
    if (!shown++)
      fprintf(f, "\nThe cost of a feature: time with it / time without it (same path, d and n, same run)\n%-24s %-24s "
                 "%-7s %4s %7s %8s  %s\n",
              "variant", "vs", "path", "d", "n", "ratio", "feature");
    char n[16];
    fprintf(f, "%-24s %-24s %-7s %4zu %7s %8.3f  %s\n", row->var->name, twin, row->impl, row->shape.d,
            bench_fmt_n(n, sizeof n, (double)row->shape.n_q), row->st.median / other->st.median, feature);
  }
}

const char *bench_crossover_text(char *buf, size_t len, const bench_crossover *c, int terse) {
  char a[16];
  if (c->where == 0)
    snprintf(buf, len, "%.0f", c->n_star);
  else if (c->where < 0)
    snprintf(buf, len, "< %s", bench_fmt_n(a, sizeof a, (double)c->n_lo));
  else
    snprintf(buf, len, terse ? "> %s" : "none in range (> %s)", bench_fmt_n(a, sizeof a, (double)c->n_hi));
  return buf;
}

void bench_print_crossovers(FILE *f, const bench_results *r) {
  char nstar[48], lo[16], hi[16];
  fprintf(f,
          "\nCrossover: linear attention becomes faster than softmax attention at n* tokens\n"
          "(median time per call; n* interpolated log-linearly between the bracketing sizes)\n");
  if (!r->ncross) {
    fprintf(f, "  none: needs a linear prefill variant and its softmax partner in --variants\n");
    return;
  }
  fprintf(f, "%-24s %-15s %-7s %4s %22s %10s %10s\n", "linear variant", "vs softmax", "path", "d", "n*", "t_lin/t_sm",
          "t_lin/t_sm");
  fprintf(f, "%-24s %-15s %-7s %4s %22s %10s %10s\n", "", "", "", "", "", "at n_min", "at n_max");
  for (size_t i = 0; i < r->ncross; i++) {
    const bench_crossover *c = &r->cross[i];
    char rlo[32], rhi[32];
    snprintf(rlo, sizeof rlo, "%.2f@%s", c->ratio_lo, bench_fmt_n(lo, sizeof lo, (double)c->n_lo));
    snprintf(rhi, sizeof rhi, "%.2f@%s", c->ratio_hi, bench_fmt_n(hi, sizeof hi, (double)c->n_hi));
    fprintf(f, "%-24s %-15s %-7s %4zu %22s %10s %10s\n", c->linear->name, c->softmax->name, attn_isa_name(c->isa), c->d,
            bench_crossover_text(nstar, sizeof nstar, c, 0), rlo, rhi);
  }
}

static const char *state_name(bench_row_state s) {
  return s == ROW_OK ? "ok" : s == ROW_SKIPPED ? "skipped" : s == ROW_FAILED ? "failed" : "pending";
}

/* ---- The result columns: one table feeds the CSV and the JSON rows ------------------------- */

typedef struct column {
  const char *name;
  const char *(*text)(const bench_results *r, const bench_row *row); /* a string column, or */
  double (*num)(const bench_results *r, const bench_row *row);       /* a number (NaN: empty) */
} column;

static int row_ok(const bench_row *row) { return row->state == ROW_OK; }
static double window_num(size_t w) { return w == ATTN_UNBOUNDED ? NAN : (double)w; }

#define TEXT_COL(col, expr)                                                    \
  static const char *col_##col(const bench_results *r, const bench_row *row) { \
    (void)r, (void)row;                                                        \
    return (expr);                                                             \
  }
#define NUM_COL(col, expr)                                                \
  static double col_##col(const bench_results *r, const bench_row *row) { \
    (void)r, (void)row;                                                   \
    return (double)(expr);                                                \
  }
TEXT_COL(variant, row->var->name)
TEXT_COL(mode, row->var->mode == BENCH_DECODE ? "decode" : "prefill")
TEXT_COL(isa, row->baseline ? "none" : row->impl)
TEXT_COL(impl, row->impl)
NUM_COL(native, row->native)
NUM_COL(baseline, row->baseline)
NUM_COL(extra, row->extra)
NUM_COL(threads, r->threads)
NUM_COL(n_q, row->shape.n_q)
NUM_COL(n_kv, row->shape.n_kv)
NUM_COL(heads, row->shape.h_q)
NUM_COL(kv_heads, row->shape.h_kv)
NUM_COL(d, row->shape.d)
NUM_COL(dv, row->shape.dv)
NUM_COL(feature_size, row->shape.m)
NUM_COL(causal, row->var->causal)
NUM_COL(window_left, window_num(row->shape.window_left))
NUM_COL(window_right, window_num(row->shape.window_right))
TEXT_COL(state, state_name(row->state))
TEXT_COL(note, row->note)
NUM_COL(retried, row->retried)
NUM_COL(reps, row_ok(row) ? row->st.reps : NAN)
NUM_COL(calls_per_rep, row_ok(row) ? (double)row->st.iters : NAN)
NUM_COL(median_ns, row_ok(row) ? row->st.median * 1e9 : NAN)
NUM_COL(min_ns, row_ok(row) ? row->st.min * 1e9 : NAN)
NUM_COL(max_ns, row_ok(row) ? row->st.max * 1e9 : NAN)
NUM_COL(spread, row_ok(row) ? row->st.spread : NAN)
NUM_COL(cpu_share, row_ok(row) ? row->st.cpu_share : NAN)
NUM_COL(other_load, row_ok(row) ? row->st.other_load : NAN)
NUM_COL(noisy, row_ok(row) && row->st.noisy)
NUM_COL(flops, row->cost.flops)
NUM_COL(bytes, row->cost.bytes)
NUM_COL(tokens, row->cost.tokens)
NUM_COL(gflops, bench_row_gflops(r, row))
NUM_COL(tokens_per_s, bench_row_tokens(r, row))
NUM_COL(gbps, bench_row_gbps(r, row))
NUM_COL(frac_peak, bench_row_frac_peak(r, row))
NUM_COL(frac_machine_peak, bench_row_frac_machine_peak(r, row))
NUM_COL(frac_bw, bench_row_frac_bw(r, row))
#undef TEXT_COL
#undef NUM_COL

#define TEXT(col) \
  { #col, col_##col, NULL }
#define NUM(col) \
  { #col, NULL, col_##col }
static const column columns[] = {
    TEXT(variant),
    TEXT(mode),
    TEXT(isa),
    TEXT(impl),
    NUM(native),
    NUM(baseline),
    NUM(extra),
    NUM(threads),
    NUM(n_q),
    NUM(n_kv),
    NUM(heads),
    NUM(kv_heads),
    NUM(d),
    NUM(dv),
    NUM(feature_size),
    NUM(causal),
    NUM(window_left),
    NUM(window_right),
    TEXT(state),
    TEXT(note),
    NUM(retried),
    NUM(reps),
    NUM(calls_per_rep),
    NUM(median_ns),
    NUM(min_ns),
    NUM(max_ns),
    NUM(spread),
    NUM(cpu_share),
    NUM(other_load),
    NUM(noisy),
    NUM(flops),
    NUM(bytes),
    NUM(tokens),
    NUM(gflops),
    NUM(tokens_per_s),
    NUM(gbps),
    NUM(frac_peak),
    NUM(frac_machine_peak),
    NUM(frac_bw),
};
#undef TEXT
#undef NUM
enum { NCOLUMNS = sizeof columns / sizeof columns[0] };

/* After the table, two columns per baseline: <name>_median_ns and speedup_vs_<name>. */
static double baseline_median_ns(const bench_row *row, bench_base b) {
  return isfinite(bench_row_speedup(row, b)) ? row->base[b]->st.median * 1e9 : NAN;
}

/* ---- CSV ------------------------------------------------------------------------------------- */

static void csv_value(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.9g", v);
}
/* A quoted CSV field ("" inside). */
static void csv_text(FILE *f, const char *v) {
  fputc('"', f);
  for (; *v; v++) fprintf(f, *v == '"' ? "\"\"" : "%c", *v);
  fputc('"', f);
}

int bench_write_csv(const char *path, const bench_results *r) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const bench_sysinfo *i = &r->info;
  fprintf(f,
          "# attn-bench, attn %s, git %s, %s\n# cpu: %s; cpus online: %d; paths: %s\n"
          "# compiler: %s; %s\n# command: %s\n# threads: %d; run quality: %s\n",
          i->version, i->git, i->date, i->cpu, i->cores, i->isas, i->compiler, i->flags, r->command, r->threads,
          r->noise_note);
  for (size_t k = 0; k < r->limits.nprobes; k++) {
    const bench_probe *p = &r->limits.probe[k];
    fprintf(f, "# peak %s: %.2f GFLOP/s at the start, %.2f at the end (%+.1f%%); %s\n", p->name, p->start, p->end,
            100 * (p->end / p->start - 1), p->path == ATTN_ISA_NONE ? "machine probe" : "path peak");
  }
  fprintf(f, "# machine best peak: %.2f GFLOP/s\n# read bandwidth: %.2f GB/s\n", r->limits.machine_peak, r->limits.bw);
  for (int b = 0; b < BENCH_BASE_COUNT; b++) {
    char text[512];
    fprintf(f, "# baseline %s\n", baseline_text(text, sizeof text, &r->base[b]));
  }
  for (size_t c = 0; c < NCOLUMNS; c++) fprintf(f, "%s%s", c ? "," : "", columns[c].name);
  for (int b = 0; b < BENCH_BASE_COUNT; b++)
    fprintf(f, ",%s_median_ns,speedup_vs_%s", r->base[b].name, r->base[b].name);
  fprintf(f, "\n");
  for (size_t k = 0; k < r->count; k++) {
    const bench_row *row = &r->rows[k];
    for (size_t c = 0; c < NCOLUMNS; c++) {
      if (c) fputc(',', f);
      if (columns[c].text)
        csv_text(f, columns[c].text(r, row));
      else
        csv_value(f, columns[c].num(r, row));
    }
    for (int b = 0; b < BENCH_BASE_COUNT; b++) {
      fputc(',', f);
      csv_value(f, baseline_median_ns(row, (bench_base)b));
      fputc(',', f);
      csv_value(f, bench_row_speedup(row, (bench_base)b));
    }
    fprintf(f, "\n");
  }
  return fclose(f) ? -1 : 0;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void json_str(FILE *f, const char *key, const char *v, int comma) {
  fprintf(f, "\"%s\": \"", key);
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fprintf(f, "\"%s", comma ? ", " : "");
}

static void json_num(FILE *f, const char *key, double v, int comma) {
  if (isfinite(v))
    fprintf(f, "\"%s\": %.9g%s", key, v, comma ? ", " : "");
  else
    fprintf(f, "\"%s\": null%s", key, comma ? ", " : "");
}

/* "key": {"path": GFLOP/s, ...}, over the paths whose peak was measured. */
static void json_peaks(FILE *f, const char *key, const double *peaks) {
  int first = 1;
  fprintf(f, "\"%s\": {", key);
  for (int isa = ATTN_ISA_SCALAR; isa < ATTN_ISA_COUNT; isa++)
    if (peaks[isa] > 0) {
      if (!first) fprintf(f, ", ");
      json_num(f, attn_isa_name((attn_isa)isa), peaks[isa], 0);
      first = 0;
    }
  fprintf(f, "}, ");
}

int bench_write_json(const char *path, const bench_results *r) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const bench_sysinfo *i = &r->info;
  fprintf(f, "{\n  \"machine\": {");
  json_str(f, "cpu", i->cpu, 1);
  json_num(f, "cpus_online", i->cores, 1);
  json_str(f, "paths", i->isas, 0);
  fprintf(f, "},\n  \"build\": {");
  json_str(f, "compiler", i->compiler, 1);
  json_str(f, "flags", i->flags, 1);
  json_str(f, "attn_version", i->version, 1);
  json_str(f, "git_revision", i->git, 0);
  fprintf(f, "},\n  \"baselines\": [");
  for (int b = 0; b < BENCH_BASE_COUNT; b++) {
    const bench_baseline_info *bi = &r->base[b];
    fprintf(f, "%s\n    {", b ? "," : "");
    json_str(f, "name", bi->name, 1);
    json_str(f, "what", bi->what, 1);
    json_num(f, "available", bi->available, 1);
    json_str(f, "ran_on", bi->ran_on, 1);
    json_str(f, "flags", bi->flags, 1);
    json_str(f, "absent", bi->absent, 0);
    fprintf(f, "}");
  }
  fprintf(f, "],\n  \"run\": {");
  json_str(f, "date", i->date, 1);
  json_str(f, "command", r->command, 1);
  json_num(f, "threads", r->threads, 1);
  json_num(f, "pin_cpu", r->pin, 1);
  json_num(f, "hugepages", r->hugepages, 1);
  json_num(f, "decode_copies", (double)bench_decode_copies, 1);
  json_num(f, "llc_bytes", (double)bench_llc_bytes(), 1);
  json_num(f, "min_time_s", r->timing.min_time, 1);
  json_num(f, "min_reps", r->timing.min_reps, 1);
  json_num(f, "warmup", r->timing.warmup, 1);
  json_num(f, "noisy_spread", r->timing.noisy_spread, 1);
  json_num(f, "window", (double)r->window, 1);
  json_num(f, "elapsed_s", r->elapsed, 1);
  json_num(f, "noisy", r->noisy_run, 1);
  json_str(f, "quality", r->noise_note, 0);
  fprintf(f, "},\n  \"limits\": {");
  json_peaks(f, "peak_gflops", r->limits.peak);
  fprintf(f, "\"probes\": [");
  for (size_t k = 0; k < r->limits.nprobes; k++) {
    const bench_probe *p = &r->limits.probe[k];
    fprintf(f, "%s{", k ? ", " : "");
    json_str(f, "name", p->name, 1);
    json_str(f, "path", p->path == ATTN_ISA_NONE ? "" : attn_isa_name(p->path), 1);
    json_num(f, "start_gflops", p->start, 1);
    json_num(f, "end_gflops", p->end, 1);
    json_num(f, "drift", p->end / p->start - 1, 0);
    fprintf(f, "}");
  }
  fprintf(f, "], ");
  json_num(f, "machine_peak_gflops", r->limits.machine_peak, 1);
  json_num(f, "largest_drift", r->limits.drift, 1);
  json_num(f, "read_bandwidth_gbps", r->limits.bw, 0);
  fprintf(f, "},\n  \"results\": [\n");
  for (size_t k = 0; k < r->count; k++) {
    const bench_row *row = &r->rows[k];
    fprintf(f, "    {");
    for (size_t c = 0; c < NCOLUMNS; c++) {
      if (columns[c].text)
        json_str(f, columns[c].name, columns[c].text(r, row), 1);
      else
        json_num(f, columns[c].name, columns[c].num(r, row), 1);
    }
    for (int b = 0; b < BENCH_BASE_COUNT; b++) {
      char key[2][64];
      snprintf(key[0], sizeof key[0], "%s_median_ns", r->base[b].name);
      snprintf(key[1], sizeof key[1], "speedup_vs_%s", r->base[b].name);
      json_num(f, key[0], baseline_median_ns(row, (bench_base)b), 1);
      json_num(f, key[1], bench_row_speedup(row, (bench_base)b), b + 1 < BENCH_BASE_COUNT);
    }
    fprintf(f, "}%s\n", k + 1 < r->count ? "," : "");
  }
  fprintf(f, "  ],\n  \"crossovers\": [\n");
  for (size_t k = 0; k < r->ncross; k++) {
    const bench_crossover *c = &r->cross[k];
    fprintf(f, "    {");
    json_str(f, "linear", c->linear->name, 1);
    json_str(f, "softmax", c->softmax->name, 1);
    json_str(f, "isa", attn_isa_name(c->isa), 1);
    json_num(f, "d", (double)c->d, 1);
    json_num(f, "n_star", c->where == 0 ? c->n_star : NAN, 1);
    json_str(f, "found", c->where == 0 ? "yes" : c->where < 0 ? "below range" : "above range", 1);
    json_num(f, "n_min", (double)c->n_lo, 1);
    json_num(f, "n_max", (double)c->n_hi, 1);
    json_num(f, "ratio_at_n_min", c->ratio_lo, 1);
    json_num(f, "ratio_at_n_max", c->ratio_hi, 0);
    fprintf(f, "}%s\n", k + 1 < r->ncross ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return fclose(f) ? -1 : 0;
}

/* ---- Markdown -------------------------------------------------------------------------------- */

/* One cell of a pivot; base: the baseline of speedup cells (BENCH_BASE_COUNT otherwise). */
typedef const char *(*md_cell)(char *buf, size_t len, const bench_results *r, const bench_row *row, bench_base base);

static const char *cell_gflops(char *buf, size_t len, const bench_results *r, const bench_row *row, bench_base base) {
  (void)base;
  if (row->state != ROW_OK) return "-";
  snprintf(buf, len, "%.1f (%.0f%% / %.0f%%)%s", bench_row_gflops(r, row), 100 * bench_row_frac_peak(r, row),
           100 * bench_row_frac_machine_peak(r, row), row->st.noisy ? "~" : "");
  return buf;
}

static const char *cell_time(char *buf, size_t len, const bench_results *r, const bench_row *row, bench_base base) {
  (void)r, (void)base;
  if (row->state != ROW_OK) return "-";
  bench_fmt_time(buf, len, row->st.median);
  if (row->st.noisy) strncat(buf, "~", len - strlen(buf) - 1);
  return buf;
}

static const char *cell_decode(char *buf, size_t len, const bench_results *r, const bench_row *row, bench_base base) {
  char t[16];
  (void)base;
  if (row->state != ROW_OK) return "-";
  snprintf(buf, len, "%s tok/s, %.1f GB/s (%.0f%%)%s", fmt_si(t, sizeof t, bench_row_tokens(r, row)),
           bench_row_gbps(r, row), 100 * bench_row_frac_bw(r, row), row->st.noisy ? "~" : "");
  return buf;
}

/* Speedup over the baseline; "**0.93x (slower)**" where attn loses. */
static const char *cell_speedup(char *buf, size_t len, const bench_results *r, const bench_row *row, bench_base base) {
  (void)r;
  const double x = bench_row_speedup(row, base);
  if (!isfinite(x)) return row->base[base] && row->base[base]->state != ROW_OK ? "skipped" : "-";
  if (x < 1)
    snprintf(buf, len, "**%.2fx (slower)**", x);
  else
    snprintf(buf, len, "%.2fx", x);
  return buf;
}

/* One pivot: rows = sizes of the given mode, columns = variants present, for one path and d.
 * base < BENCH_BASE_COUNT: only the variants and sizes that have that baseline's rows. */
static void md_pivot(FILE *f, const bench_results *r, attn_isa isa, size_t d, bench_mode mode, bench_base base,
                     md_cell cell, const char *title) {
  const bench_variant *cols[32];
  size_t nc = 0;
  size_t sizes[256], ns = 0;
  const int with_base = base < BENCH_BASE_COUNT;
  for (size_t v = 0; v < r->nvars && nc < 32; v++) {
    const bench_variant *var = r->vars[v];
    if (var->mode != mode || bench_variant_step(var)) continue;
    int present = 0;
    for (size_t i = 0; i < r->count && !present; i++) {
      const bench_row *row = &r->rows[i];
      present =
          row->var == var && !row->baseline && row->isa == isa && row->shape.d == d && (!with_base || row->base[base]);
    }
    if (present) cols[nc++] = var;
  }
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    if (row->baseline || row->isa != isa || row->shape.d != d || row->var->mode != mode) continue;
    if (bench_variant_step(row->var) || (with_base && !row->base[base])) continue;
    size_t n = mode == BENCH_DECODE ? row->shape.n_kv : row->shape.n_q, k = 0;
    while (k < ns && sizes[k] != n) k++;
    if (k == ns && ns < 256) sizes[ns++] = n;
  }
  if (!nc || !ns) return;
  for (size_t a = 1; a < ns; a++) /* insertion sort, few sizes */
    for (size_t b = a; b > 0 && sizes[b - 1] > sizes[b]; b--) {
      size_t t = sizes[b];
      sizes[b] = sizes[b - 1];
      sizes[b - 1] = t;
    }
  fprintf(f, "\n%s, path `%s`, d = %zu:\n\n| %s |", title, attn_isa_name(isa), d, mode == BENCH_DECODE ? "cache" : "n");
  for (size_t c = 0; c < nc; c++) fprintf(f, " %s |", cols[c]->name);
  fprintf(f, "\n|---:|");
  for (size_t c = 0; c < nc; c++) fprintf(f, "---:|");
  fprintf(f, "\n");
  for (size_t s = 0; s < ns; s++) {
    char nb[16], cb[64];
    fprintf(f, "| %s |", bench_fmt_n(nb, sizeof nb, (double)sizes[s]));
    for (size_t c = 0; c < nc; c++) {
      const bench_row *hit = NULL;
      for (size_t i = 0; i < r->count && !hit; i++) {
        const bench_row *row = &r->rows[i];
        size_t n = mode == BENCH_DECODE ? row->shape.n_kv : row->shape.n_q;
        if (row->var == cols[c] && !row->baseline && row->isa == isa && row->shape.d == d && n == sizes[s]) hit = row;
      }
      fprintf(f, " %s |", hit ? cell(cb, sizeof cb, r, hit, base) : "");
    }
    fprintf(f, "\n");
  }
}

int bench_write_markdown(const char *path, const bench_results *r) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const bench_sysinfo *i = &r->info;
  const bench_limits *l = &r->limits;
  attn_isa paths[ATTN_ISA_COUNT];
  size_t np = paths_in(r, paths), ds[64], nd = dims_in(r, ds, 64);
  const bench_base none = BENCH_BASE_COUNT;
  fprintf(f, "# attn benchmark results\n\n");
  fprintf(f, "- Date: %s\n- Machine: %s, %d CPUs online; paths: %s\n", i->date, i->cpu, i->cores, i->isas);
  fprintf(f, "- Build: attn %s (git %s); %s; %s\n", i->version, i->git, i->compiler, i->flags);
  fprintf(f, "- Command: `%s` (%d thread%s, %.0f s)\n", r->command, r->threads, r->threads > 1 ? "s" : "", r->elapsed);
  fprintf(f, "- Run quality: %s\n", r->noise_note);
  fprintf(f,
          "- Limits measured in the same run (FMA peaks: best of several short trials, at the start -> "
          "at the end):");
  for (size_t k = 0; k < l->nprobes; k++)
    fprintf(f, " %s %.1f -> %.1f GFLOP/s (%+.1f%%%s);", l->probe[k].name, l->probe[k].start, l->probe[k].end,
            100 * (l->probe[k].end / l->probe[k].start - 1),
            l->probe[k].path == ATTN_ISA_NONE ? ", machine probe: no attn path" : "");
  fprintf(f, " machine best peak %.1f GFLOP/s; read bandwidth %.1f GB/s.\n", l->machine_peak, l->bw);
  for (int b = 0; b < BENCH_BASE_COUNT; b++) {
    char text[512];
    fprintf(f, "- Baseline %s\n", baseline_text(text, sizeof text, &r->base[b]));
  }
  fprintf(f,
          "- Flop and byte counts: `bench/flops.h` (softmax: visible pairs x (2d + 2dv); linear causal: "
          "chunkwise with the chunk the library reports for each path, attn_linear_chunk_size). `~` marks "
          "a noisy cell (IQR > %.0f%% of the median, or CPU taken by other tasks).\n",
          100 * r->timing.noisy_spread);

  fprintf(f,
          "\n## Crossover: where linear attention becomes faster\n\n"
          "| linear variant | vs | path | d | n* | t_lin / t_softmax at smallest n | at largest n |\n"
          "|---|---|---|---:|---:|---:|---:|\n");
  for (size_t k = 0; k < r->ncross; k++) {
    const bench_crossover *c = &r->cross[k];
    char ns[48], lo[16], hi[16];
    fprintf(f, "| %s | %s | %s | %zu | %s | %.2f (n = %s) | %.2f (n = %s) |\n", c->linear->name, c->softmax->name,
            attn_isa_name(c->isa), c->d, bench_crossover_text(ns, sizeof ns, c, 0), c->ratio_lo,
            bench_fmt_n(lo, sizeof lo, (double)c->n_lo), c->ratio_hi, bench_fmt_n(hi, sizeof hi, (double)c->n_hi));
  }
  fprintf(f, "\n## Prefill\n");
  for (size_t p = 0; p < np; p++)
    for (size_t k = 0; k < nd; k++) {
      md_pivot(f, r, paths[p], ds[k], BENCH_PREFILL, none, cell_gflops,
               "GFLOP/s (fraction of the path's FMA peak / of the machine's best peak)");
      md_pivot(f, r, paths[p], ds[k], BENCH_PREFILL, none, cell_time, "Time per call (median)");
    }
  fprintf(f, "\n## Decode\n");
  for (size_t p = 0; p < np; p++)
    for (size_t k = 0; k < nd; k++)
      md_pivot(f, r, paths[p], ds[k], BENCH_DECODE, none, cell_decode,
               "One query over a cache: tokens/s, GB/s (fraction of read bandwidth)");
  fprintf(f,
          "\nThe fraction is of the read bandwidth measured above (a plain loop over a buffer larger than the "
          "last-level cache). Each softmax or GAU decode call reads its cache from memory (copies taken in turn) "
          "unless the run says otherwise (--decode-copies 1: the cache read again, from L2/L3 where it fits, can "
          "exceed 100%%); a selective decode steps one pruning cache.\n");
  fprintf(f,
          "\nLinear attention recurrent step (O(1) in the context length):\n\n"
          "| variant | path | d | time | tokens/s | state GB/s | vs recurrent loop "
          "|\n|---|---|---:|---:|---:|---:|---:|\n");
  for (size_t k = 0; k < r->count; k++) {
    const bench_row *row = &r->rows[k];
    char t[16], tok[16], sp[32];
    if (row->baseline || row->var->kind != BENCH_LINEAR_STEP || row->state != ROW_OK) continue;
    fprintf(f, "| %s | %s | %zu | %s | %s | %.1f | %s |\n", row->var->name, row->impl, row->shape.d,
            bench_fmt_time(t, sizeof t, row->st.median), fmt_si(tok, sizeof tok, bench_row_tokens(r, row)),
            bench_row_gbps(r, row), cell_speedup(sp, sizeof sp, r, row, BENCH_BASE_RECURRENT));
  }
  for (size_t k = 0, shown = 0; k < r->count; k++) {
    const bench_row *row = &r->rows[k];
    char t[16], tok[16], sp[32];
    if (row->baseline || row->var->kind != BENCH_DELTA_STEP || row->state != ROW_OK) continue;
    if (!shown++)
      fprintf(f, "\nDelta-rule decode step (each step reads the next of its state's copies, from memory):\n\n"
                 "| variant | path | d | heads (k/v) | time | tokens/s | state GB/s | vs delta_loop "
                 "|\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    fprintf(f, "| %s | %s | %zu | %zu/%zu | %s | %s | %.1f | %s |\n", row->var->name, row->impl, row->shape.d,
            row->shape.h_q, row->shape.h_kv, bench_fmt_time(t, sizeof t, row->st.median),
            fmt_si(tok, sizeof tok, bench_row_tokens(r, row)), bench_row_gbps(r, row),
            cell_speedup(sp, sizeof sp, r, row, BENCH_BASE_DELTA));
  }
  for (size_t k = 0, shown = 0; k < r->count; k++) {
    const bench_row *row = &r->rows[k];
    const char *feature, *twin = bench_twin_of(row->var, &feature);
    const bench_row *other = twin && !row->baseline && row->state == ROW_OK ? bench_row_like(r, row, twin) : NULL;
    char n[16];
    if (other && !shown++)
      fprintf(f, "\n## The cost of a feature\n\nTime of the call with the feature / time of the same call without "
                 "it (same path, d and n, same run).\n\n| variant | feature | vs | path | d | n | ratio |\n"
                 "|---|---|---|---|---:|---:|---:|\n");
    if (other)
      fprintf(f, "| %s | %s | %s | %s | %zu | %s | %.3f |\n", row->var->name, feature, twin, row->impl, row->shape.d,
              bench_fmt_n(n, sizeof n, (double)row->shape.n_q), row->st.median / other->st.median);
  }
  fprintf(f,
          "\n## Baselines\n\nSpeedup = baseline time / attn time, same shape, same run; below 1 "
          "(**bold**) attn is slower.\n\n| baseline | variant | path | d | speedup range | slower at |\n"
          "|---|---|---|---:|---|---|\n");
  size_t def_losses;
  write_ranges(f, r, 1, &def_losses);
  for (int b = 0; b < BENCH_BASE_COUNT; b++) {
    char title[256];
    snprintf(title, sizeof title, "Speedup over %s (%s)", r->base[b].name, r->base[b].what);
    for (size_t p = 0; p < np && r->base[b].available; p++)
      for (size_t k = 0; k < nd; k++)
        md_pivot(f, r, paths[p], ds[k], BENCH_PREFILL, (bench_base)b, cell_speedup, title);
  }
  return fclose(f) ? -1 : 0;
}
