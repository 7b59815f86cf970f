/* summary.c: the families the variants fall into, and the run in one screen: the machine, per
 * family the best point on the shown path against its baselines and the measured peak, the
 * crossovers and the files; the same as one Markdown table (summary.md) for the README. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

bench_family bench_family_of(const bench_variant *v) {
  if (v->adapter == &bench_delta_adapter) return BENCH_FAM_DELTA;
  if (v->mode == BENCH_DECODE) return BENCH_FAM_DECODE;
  if (v->adapter == &bench_softmax_adapter) return BENCH_FAM_SOFTMAX;
  if (v->adapter == &bench_linear_adapter)
    return v->gate != ATTN_GATE_NONE ? BENCH_FAM_GATED : v->exclusive ? BENCH_FAM_GAU : BENCH_FAM_LINEAR;
  return BENCH_FAM_GAU; /* GAU and selective attention */
}

const char *bench_family_name(bench_family f) {
  static const char *const names[BENCH_FAM_COUNT] = {"softmax", "linear maps", "gated/decayed linear",
                                                     "GAU, FLASH, selective", "decode", "delta rule"};
  return f < BENCH_FAM_COUNT ? names[f] : "?";
}

attn_isa bench_shown_path(const bench_results *r) {
  const attn_isa best = attn_isa_get();
  attn_isa top = ATTN_ISA_NONE;
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    if (row->baseline) continue;
    if (row->isa == best) return best;
    if (top == ATTN_ISA_NONE || r->limits.peak[row->isa] > r->limits.peak[top]) top = row->isa;
  }
  return top;
}

const bench_row *bench_find_row(const bench_results *r, const bench_variant *v, attn_isa isa, size_t d, size_t n) {
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    if (row->var == v && !row->baseline && row->isa == isa && row->shape.d == d && row->shape.n_kv == n &&
        row->state == ROW_OK)
      return row;
  }
  return NULL;
}

/* A decode row that reads its whole cache (a selective budget reads only its live tokens, a
 * linear step its state): the rows whose bandwidth the summary compares. */
static int reads_cache(const bench_row *row) {
  return row->var->kind != BENCH_LINEAR_STEP && row->cost.bytes >= 2.0 * (double)row->shape.n_kv * row->shape.d;
}

/* The family's best point on isa at d among the sweep's sizes (not the crossover's search below
 * them): prefill the highest GFLOP/s, decode the highest GB/s of a row reading its whole cache;
 * NULL if none. */
static const bench_row *best_row(const bench_results *r, bench_family fam, attn_isa isa, size_t d) {
  const bench_row *best = NULL;
  double top = 0;
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    if (row->baseline || row->extra || row->isa != isa || row->shape.d != d || row->state != ROW_OK ||
        bench_family_of(row->var) != fam || (fam == BENCH_FAM_DECODE && !reads_cache(row)) ||
        (fam != BENCH_FAM_DECODE && row->var->mode == BENCH_DECODE))
      continue;
    const double x = fam == BENCH_FAM_DECODE ? bench_row_gbps(r, row) : bench_row_gflops(r, row);
    if (x > top) top = x, best = row;
  }
  return best;
}

/* The family's speedups over baseline b on isa at d: range and losses. */
typedef struct family_range {
  size_t count, losses;
  double lo, hi;
} family_range;

static family_range range_of(const bench_results *r, bench_family fam, bench_base b, attn_isa isa, size_t d) {
  family_range g = {0, 0, INFINITY, 0};
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    if (row->baseline || row->isa != isa || row->shape.d != d || bench_family_of(row->var) != fam) continue;
    const double x = bench_row_speedup(row, b);
    if (!isfinite(x)) continue;
    g.count++, g.losses += x < 1;
    if (x < g.lo) g.lo = x;
    if (x > g.hi) g.hi = x;
  }
  return g;
}

/* "onednn 3.39x here, 1.32x..48.2x over 9 (2 slower)" for every baseline the family has. */
static void baselines_text(char *buf, size_t len, const bench_results *r, bench_family fam, const bench_row *best,
                           attn_isa isa, size_t d) {
  size_t used = 0;
  buf[0] = 0;
  for (int b = 0; b < BENCH_BASE_COUNT && used < len; b++) {
    const family_range g = range_of(r, fam, (bench_base)b, isa, d);
    if (!g.count) continue;
    const double here = best ? bench_row_speedup(best, (bench_base)b) : NAN;
    char at[32] = "", losses[48] = "";
    if (isfinite(here)) snprintf(at, sizeof at, " %.2fx here,", here);
    if (g.losses) snprintf(losses, sizeof losses, " (%zu slower)", g.losses);
    used += (size_t)snprintf(buf + used, len - used, "%s%s%s %.2fx..%.2fx over %zu%s", used ? "; " : "",
                             r->base[b].name, at, g.lo, g.hi, g.count, losses);
  }
}

/* The point's place and size: "softmax_causal, n = 8k" or "softmax_decode, 32k cached"; a
 * delta-rule row, which has its own d and heads, says them: "delta_gdn, n = 2k, d 128, 16/32 h". */
static const char *point_text(char *buf, size_t len, const bench_row *row) {
  char n[16];
  bench_fmt_n(n, sizeof n, (double)row->shape.n_kv);
  if (bench_kind_delta(row->shape.kind))
    snprintf(buf, len, "%s%s%s, d %zu, %zu/%zu h", row->var->name, bench_variant_step(row->var) ? "" : ", n = ",
             bench_variant_step(row->var) ? "" : n, row->shape.d, row->shape.h_q, row->shape.h_kv);
  else
    snprintf(buf, len, row->var->mode == BENCH_DECODE ? "%s, %s cached" : "%s, n = %s", row->var->name, n);
  return buf;
}

/* The figure and its fraction: GFLOP/s of the path's FMA peak, or decode GB/s of the bandwidth. */
static void figure_text(char *fig, size_t flen, char *frac, size_t rlen, const bench_results *r, const bench_row *row) {
  if (row->var->mode == BENCH_DECODE) {
    snprintf(fig, flen, "%.3g GB/s", bench_row_gbps(r, row));
    snprintf(frac, rlen, "%.0f%% of bw", 100 * bench_row_frac_bw(r, row));
  } else {
    snprintf(fig, flen, "%.1f GFLOP/s", bench_row_gflops(r, row));
    snprintf(frac, rlen, "%.0f%% of peak", 100 * bench_row_frac_peak(r, row));
  }
}

static size_t first_d(const bench_results *r) {
  for (size_t i = 0; i < r->count; i++)
    if (!r->rows[i].baseline && !bench_kind_delta(r->rows[i].shape.kind)) return r->rows[i].shape.d;
  for (size_t i = 0; i < r->count; i++) /* only delta-rule rows */
    if (!r->rows[i].baseline) return r->rows[i].shape.d;
  return 0;
}

/* The d a family is shown at: the first d, or for the delta rule (its own d) its first row's. */
static size_t family_d(const bench_results *r, bench_family fam, size_t d) {
  for (size_t i = 0; fam == BENCH_FAM_DELTA && i < r->count; i++)
    if (!r->rows[i].baseline && bench_family_of(r->rows[i].var) == fam) return r->rows[i].shape.d;
  return d;
}

/* The delta rule's decode step and its checkpoints' cost on isa at d, one line ("" if neither). */
static void delta_text(char *buf, size_t len, const bench_results *r, attn_isa isa, size_t d) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < r->count && used < len; i++) {
    const bench_row *row = &r->rows[i];
    if (row->baseline || row->isa != isa || row->shape.d != d || row->state != ROW_OK ||
        bench_family_of(row->var) != BENCH_FAM_DELTA)
      continue;
    const char *feature, *twin = bench_twin_of(row->var, &feature);
    const bench_row *other = twin ? bench_row_like(r, row, twin) : NULL;
    char t[16], n[16];
    const double x = bench_row_speedup(row, BENCH_BASE_DELTA);
    if (bench_variant_step(row->var))
      used += (size_t)snprintf(buf + used, len - used, "%s%s %s/step (%.3g GB/s%s%.2fx)", used ? "; " : "",
                               row->var->name, bench_fmt_time(t, sizeof t, row->st.median), bench_row_gbps(r, row),
                               isfinite(x) ? ", vs delta_loop " : "", isfinite(x) ? x : 0.0);
    else if (other)
      used += (size_t)snprintf(buf + used, len - used, "%s%s at n = %s: %.3fx %s's time", used ? "; " : "",
                               row->var->name, bench_fmt_n(n, sizeof n, (double)row->shape.n_q),
                               row->st.median / other->st.median, twin);
  }
}

static size_t points_measured(const bench_results *r) {
  size_t n = 0;
  for (size_t i = 0; i < r->count; i++) n += r->rows[i].state == ROW_OK;
  return n;
}

void bench_print_summary(FILE *f, const bench_results *r, const bench_file *files, size_t nfiles) {
  const attn_isa isa = bench_shown_path(r);
  const size_t d = first_d(r);
  const bench_sysinfo *i = &r->info;
  char text[512], a[64], b[32], c[32], t[16];
  fprintf(f, "\n== attn-bench summary\n");
  fprintf(f, "machine: %s, %d CPUs online; path shown: %s (FMA peak %.0f GFLOP/s), read %.1f GB/s, %d thread%s\n",
          i->cpu, i->cores, attn_isa_name(isa), r->limits.peak[isa > ATTN_ISA_AUTO ? isa : 0], r->limits.bw, r->threads,
          r->threads > 1 ? "s" : "");
  fprintf(f, "run:     attn %s (git %s), %s; %zu of %zu points measured in %ld:%02ld; %s\n", i->version, i->git,
          i->date, points_measured(r), r->count, lround(r->elapsed) / 60, lround(r->elapsed) % 60,
          r->noisy_run ? "NOISY (see the run quality line)" : "quiet");
  fprintf(f, "%-22s %-34s %10s %15s %12s\n", "family", "best point (d, path above)", "time", "figure", "fraction");
  for (int fam = 0; fam < BENCH_FAM_COUNT; fam++) {
    const size_t fd = family_d(r, (bench_family)fam, d);
    const bench_row *best = best_row(r, (bench_family)fam, isa, fd);
    baselines_text(text, sizeof text, r, (bench_family)fam, best, isa, fd);
    if (!best && !text[0]) continue;
    if (best) {
      figure_text(b, sizeof b, c, sizeof c, r, best);
      fprintf(f, "%-22s %-34s %10s %15s %12s\n", bench_family_name((bench_family)fam), point_text(a, sizeof a, best),
              bench_fmt_time(t, sizeof t, best->st.median), b, c);
    } else {
      fprintf(f, "%-22s (no point reading a whole cache)\n", bench_family_name((bench_family)fam));
    }
    fprintf(f, "  %s%s\n", text[0] ? "vs " : "", text[0] ? text : "no baseline for this family");
    if (fam == BENCH_FAM_DELTA) {
      delta_text(text, sizeof text, r, isa, fd);
      if (text[0]) fprintf(f, "  %s\n", text);
    }
  }
  /* the crossovers by softmax partner, wrapped */
  for (size_t k = 0; k < r->ncross; k++) {
    const bench_crossover *x = &r->cross[k];
    size_t first = 0;
    while (first < k && r->cross[first].softmax != x->softmax) first++;
    if (x->isa != isa || x->d != d || first < k) continue;
    int col = fprintf(f, "crossover n* vs %s (linear faster above):", x->softmax->name), items = 0;
    for (size_t j = k; j < r->ncross; j++) {
      const bench_crossover *y = &r->cross[j];
      if (y->isa != isa || y->d != d || y->softmax != x->softmax) continue;
      char item[96];
      const int w = snprintf(item, sizeof item, "%s %s", y->linear->name, bench_crossover_text(a, sizeof a, y, 1));
      if (items++) col += fprintf(f, ",");
      col = col + 1 + w > 100 ? fprintf(f, "\n    %s", item) - 1 : col + fprintf(f, " %s", item);
    }
    fprintf(f, "\n");
  }
  for (size_t k = 0; k < nfiles; k++)
    if (files[k].path) fprintf(f, "%-9s %s\n", files[k].what, files[k].path);
}

/* The README's points: one per kind of call a reader asks about, at the largest swept size up to
 * n (prefill) or the cache (decode); a point the run did not measure is left out. */
static const struct {
  const char *variant;
  size_t n;
} readme_points[] = {
    {"softmax_causal", 8192},     {"softmax_full", 8192},         {"linear_elu1_causal", 8192},
    {"linear_gla_causal", 8192},  {"linear_retnet_causal", 8192}, {"gau_causal", 8192},
    {"selective_causal", 8192},   {"softmax_decode", 32768},      {"softmax_decode_f16", 32768},
    {"delta_gdn", 8192},
};

static const bench_row *readme_row(const bench_results *r, const char *name, size_t n, attn_isa isa, size_t d) {
  const bench_row *pick = NULL;
  for (size_t k = 0; k < r->count; k++) {
    const bench_row *row = &r->rows[k];
    if (row->baseline || row->extra || row->isa != isa || row->state != ROW_OK || strcmp(row->var->name, name) != 0 ||
        row->shape.d != family_d(r, bench_family_of(row->var), d) || row->shape.n_kv > n)
      continue;
    if (!pick || row->shape.n_kv > pick->shape.n_kv) pick = row;
  }
  return pick;
}

int bench_write_summary(const char *path, const bench_results *r) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const attn_isa isa = bench_shown_path(r);
  const size_t d = first_d(r);
  const bench_sysinfo *i = &r->info;
  fprintf(f,
          "attn %s on %s (%d CPUs online), path %s, d = %zu, %zu head%s, %d thread%s; %.10s, git %s%s. Time per "
          "call (median); GFLOP/s as a fraction of this path's FMA peak measured in the run, decode GB/s of the "
          "read bandwidth measured in the run; speedup = baseline time / attn time for the same shape (below 1: "
          "attn is slower). Written by attn-bench (bench/README.md).\n\n",
          i->version, i->cpu, i->cores, attn_isa_name(isa), d, r->count ? r->rows[0].shape.h_q : 0,
          r->count && r->rows[0].shape.h_q > 1 ? "s" : "", r->threads, r->threads > 1 ? "s" : "", i->date, i->git,
          r->noisy_run ? " (a noisy run)" : "");
  fprintf(f, "| call | time | figure | speedup over the baselines |\n|---|---|---|---|\n");
  char a[64], b[32], c[32], t[16], n[32];
  for (size_t k = 0; k < sizeof readme_points / sizeof readme_points[0]; k++) {
    const bench_row *row = readme_row(r, readme_points[k].variant, readme_points[k].n, isa, d);
    if (!row) continue;
    char vs[256] = "";
    size_t used = 0;
    for (int bb = 0; bb < BENCH_BASE_COUNT && used < sizeof vs; bb++) {
      const double x = bench_row_speedup(row, (bench_base)bb);
      if (isfinite(x))
        used += (size_t)snprintf(vs + used, sizeof vs - used, "%s%s %.2fx", used ? ", " : "", r->base[bb].name, x);
    }
    figure_text(b, sizeof b, c, sizeof c, r, row);
    fprintf(f, "| %s | %s | %s (%s) | %s |\n", point_text(a, sizeof a, row), bench_fmt_time(t, sizeof t, row->st.median),
            b, c, vs[0] ? vs : "-");
  }
  /* the crossovers: where linear attention becomes faster than softmax attention */
  char cross[512] = "";
  size_t used = 0;
  for (size_t k = 0; k < r->ncross && used < sizeof cross; k++) {
    const bench_crossover *x = &r->cross[k];
    if (x->isa != isa || x->d != d) continue;
    used += (size_t)snprintf(cross + used, sizeof cross - used, "%s%s %s (vs %s)", used ? ", " : "", x->linear->name,
                             bench_crossover_text(n, sizeof n, x, 1), x->softmax->name);
  }
  if (cross[0]) fprintf(f, "| crossover n*, linear faster from | | %s | |\n", cross);
  return fclose(f) ? -1 : 0;
}
