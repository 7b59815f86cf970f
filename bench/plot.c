/* plot.c: the gnuplot plot, small multiples: one panel per family (softmax; linear maps; gated and
 * decayed linear; GAU, FLASH and selective; decode) and one of prefill GFLOP/s against the FMA
 * peak. A panel shows at most PANEL_SERIES series, all on the shown path (bench_shown_path) and
 * the first head dimension: the family's representative variants, the baselines of its first
 * variant that has them (dashed), the softmax partner as a reference (dotted) and the crossover n*
 * as a vertical line. A point that was skipped or failed is written as NaN, so its line breaks
 * instead of reaching for it. The script writes the SVG and, where gnuplot has pngcairo, a PNG. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

#define PANEL_SERIES 6

/* Each family's variants in the order a panel takes them; others of the family fill a panel
 * whose representatives were not measured. */
static const char *const representatives[BENCH_FAM_COUNT][PANEL_SERIES] = {
    {"softmax_causal", "softmax_full", "softmax_window", "softmax_causal_stats"},
    {"linear_elu1_causal", "linear_elu1", "linear_exp_causal", "linear_favor_causal"},
    {"linear_gla_causal", "linear_gla_scalar_causal", "linear_retnet_causal"},
    {"gau_causal", "gau_window", "selective_causal", "linear_flash_causal", "gau_full"},
    {"softmax_decode", "softmax_decode_f16", "gau_decode", "selective_decode_k256", "linear_elu1_decode"},
    {NULL}, /* the delta rule: not plotted (its own d and heads) */
};
static const char *const titles[BENCH_FAM_COUNT] = {"Softmax prefill", "Linear attention: feature maps",
                                                    "Decayed and gated linear attention",
                                                    "GAU, FLASH's linear part, selective", "Decode: one query",
                                                    "Delta rule"};
static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
static const int base_points[BENCH_BASE_COUNT] = {4, 8, 12, 6}; /* openblas, onednn, recurrent, delta_loop */

/* A gnuplot single-quoted string ('' stands for '). */
static void gp_quote(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

/* One line of a panel: a variant on the shown path, one of its baselines, or a reference. */
typedef struct series {
  const bench_variant *v;
  const char *impl; /* baseline name, or NULL for the attn path */
  int block;        /* its datablock: $s<block> */
  int kind;         /* 0 attn, 1 baseline, 2 softmax reference */
  int color;
  int base; /* kind 1: its bench_base */
} series;

typedef struct plot_ctx {
  FILE *f;
  const bench_results *r;
  attn_isa isa;
  size_t d;
  int blocks;
  double ylo, yhi; /* the panel's values so far (0: none) */
} plot_ctx;

static int matches(const plot_ctx *p, const bench_row *row, const bench_variant *v, const char *impl) {
  return row->var == v && row->shape.d == p->d &&
         (impl ? row->baseline && !strcmp(row->impl, impl) : !row->baseline && row->isa == p->isa);
}

static int present(const plot_ctx *p, const bench_variant *v, const char *impl) {
  for (size_t i = 0; i < p->r->count; i++)
    if (matches(p, &p->r->rows[i], v, impl) && p->r->rows[i].state == ROW_OK) return 1;
  return 0;
}

static const bench_variant *variant_named(const bench_results *r, const char *name) {
  for (size_t i = 0; name && i < r->nvars; i++)
    if (!strcmp(r->vars[i]->name, name)) return r->vars[i];
  return NULL;
}

static void widen_y(plot_ctx *p, double y) {
  if (!(y > 0) || !isfinite(y)) return;
  if (!(p->ylo > 0) || y < p->ylo) p->ylo = y;
  if (y > p->yhi) p->yhi = y;
}

/* The y range of a log axis: the values with a margin, and room above them for the key (top right,
 * inside), which then covers no line. */
static void gp_yrange(FILE *f, const plot_ctx *p) {
  if (!(p->ylo > 0)) return;
  const double lo = p->ylo / 1.6, top = p->yhi * 1.6;
  fprintf(f, "  set yrange [%.6g:%.6g]\n", lo, lo * pow(top / lo, 1 / 0.66));
}

/* Write a series' rows as a datablock, n (or the cache) against the metric, NaN where a planned
 * point was not measured; widen [*lo, *hi] to its n. A linear step has no n: its one figure goes
 * in as a flat line over the x range given. */
static void write_block(plot_ctx *p, series *s, double (*metric)(const bench_results *, const bench_row *), double *lo,
                        double *hi) {
  const bench_results *r = p->r;
  s->block = p->blocks++;
  fprintf(p->f, "$s%d << EOD\n", s->block);
  double last = 0;
  for (;;) { /* rows in n order: the next larger n each time (the plan's order is per series anyway) */
    const bench_row *next = NULL;
    for (size_t i = 0; i < r->count; i++) {
      const bench_row *row = &r->rows[i];
      if (matches(p, row, s->v, s->impl) && (double)row->shape.n_kv > last &&
          (!next || row->shape.n_kv < next->shape.n_kv))
        next = row;
    }
    if (!next) break;
    last = (double)next->shape.n_kv;
    const double y = next->state == ROW_OK ? metric(r, next) : NAN;
    widen_y(p, y);
    if (s->v->kind == BENCH_LINEAR_STEP) {
      if (isfinite(y)) fprintf(p->f, "%g %.6g\n%g %.6g\n", *lo, y, *hi, y);
      break;
    }
    if (isfinite(y))
      fprintf(p->f, "%g %.6g\n", last, y);
    else
      fprintf(p->f, "%g NaN\n", last);
    if (isfinite(y) && (!(*lo > 0) || last < *lo)) *lo = last;
    if (isfinite(y) && last > *hi) *hi = last;
  }
  fprintf(p->f, "EOD\n");
}

/* The series of a family's panel: up to PANEL_SERIES, the baselines of the first variant that has
 * any and the softmax partner of the first with a crossover taking their places first. */
static size_t panel_series(plot_ctx *p, bench_family fam, series *out, const bench_crossover **cross) {
  const bench_results *r = p->r;
  const bench_variant *cand[BENCH_MAX_VARIANTS];
  size_t nc = 0, n = 0;
  for (int k = 0; k < PANEL_SERIES; k++) {
    const bench_variant *v = variant_named(r, representatives[fam][k]);
    if (v && present(p, v, NULL)) cand[nc++] = v;
  }
  for (size_t i = 0; !nc && i < r->nvars && nc < PANEL_SERIES; i++)
    if (bench_family_of(r->vars[i]) == fam && present(p, r->vars[i], NULL)) cand[nc++] = r->vars[i];
  if (!nc) return 0;
  series extra[PANEL_SERIES];
  size_t ne = 0;
  *cross = NULL;
  for (size_t i = 0; i < nc && !ne; i++) /* the baselines of the first candidate that has any */
    for (int b = 0; b < BENCH_BASE_COUNT && ne < 2; b++)
      if (present(p, cand[i], r->base[b].name)) extra[ne++] = (series){cand[i], r->base[b].name, 0, 1, (int)i, b};
  for (size_t i = 0; i < nc && !*cross; i++) /* the crossover of the first candidate that has one */
    for (size_t k = 0; k < r->ncross && !*cross; k++)
      if (r->cross[k].linear == cand[i] && r->cross[k].isa == p->isa && r->cross[k].d == p->d) *cross = &r->cross[k];
  const bench_variant *ref = fam != BENCH_FAM_SOFTMAX && fam != BENCH_FAM_DECODE
                                 ? variant_named(r, *cross ? (*cross)->softmax->name : "softmax_causal")
                                 : NULL;
  if (ref && present(p, ref, NULL)) extra[ne++] = (series){ref, NULL, 0, 2, 0, 0};
  for (size_t i = 0; i < nc && n + ne < PANEL_SERIES; i++) out[n] = (series){cand[i], NULL, 0, 0, (int)n, 0}, n++;
  for (size_t i = 0; i < ne; i++) out[n++] = extra[i];
  return n;
}

/* Powers-of-two x tics over [lo, hi], labelled 512, 2k, 32k. */
static void gp_xaxis(FILE *f, double lo, double hi, const char *label) {
  char n[16];
  double step = hi / lo > 4096 ? 8 : hi / lo > 256 ? 4 : 2, x = 1;
  while (x * 2 <= lo) x *= 2;
  fprintf(f, "  set xrange [%g:%g]\n  set xlabel '%s'\n  set xtics (", lo / 1.4, hi * 1.4, label);
  for (int first = 1; x <= hi * 1.0001; x *= step, first = 0)
    fprintf(f, "%s'%s' %g", first ? "" : ", ", bench_fmt_n(n, sizeof n, x), x);
  fprintf(f, ") nomirror\n");
}

static void gp_plot(FILE *f, const series *s, size_t n, const char *extra) {
  fprintf(f, "  plot ");
  for (size_t i = 0; i < n; i++) {
    char title[96];
    if (s[i].kind == 1)
      snprintf(title, sizeof title, "%s (for %s)", s[i].impl, s[i].v->name);
    else
      snprintf(title, sizeof title, "%s%s", s[i].v->name, s[i].kind == 2 ? " (reference)" : "");
    const int step = s[i].v->kind == BENCH_LINEAR_STEP;
    char points[32] = "";
    if (!step && s[i].kind != 2)
      snprintf(points, sizeof points, " pt %d ps 0.8", s[i].kind == 1 ? base_points[s[i].base] : 7);
    fprintf(f, "%s$s%d using 1:2 with %s lc rgb '%s' dt %d lw %s%s title ", i ? ", \\\n       " : "", s[i].block,
            points[0] ? "linespoints" : "lines", s[i].kind == 2 ? "#999999" : colors[s[i].color % 6],
            s[i].kind == 1   ? 2
            : s[i].kind == 2 ? 3
                             : 1,
            s[i].kind == 0 ? "2" : "1.5", points);
    gp_quote(f, title);
  }
  fprintf(f, "%s%s\n", n && extra[0] ? ", \\\n       " : "", extra);
}

/* One family's panel; the datablocks it plots were written before the output loop (*pre). */
static void family_panel(plot_ctx *p, FILE *pre, bench_family fam, FILE *body) {
  series s[PANEL_SERIES];
  const bench_crossover *cross;
  FILE *f = p->f;
  p->f = pre;
  const size_t n = panel_series(p, fam, s, &cross);
  double lo = 0, hi = 0;
  p->ylo = p->yhi = 0;
  for (size_t i = 0; i < n; i++)
    if (s[i].v->kind != BENCH_LINEAR_STEP) write_block(p, &s[i], bench_row_tokens, &lo, &hi);
  if (!(lo > 0)) lo = 1024, hi = 32768;
  if (!(hi > lo)) hi = 2 * lo;
  for (size_t i = 0; i < n; i++)
    if (s[i].v->kind == BENCH_LINEAR_STEP)
      write_block(p, &s[i], bench_row_tokens, &(double){lo / 1.4}, &(double){hi * 1.4});
  p->f = f;
  if (!n) return;
  char title[160];
  snprintf(title, sizeof title, "%s", titles[fam]);
  fprintf(body, "  set title ");
  gp_quote(body, title);
  fprintf(body, "\n  set ylabel '%s'\n  set format y '%%.0s%%c'\n", "tokens/s");
  gp_yrange(body, p);
  gp_xaxis(body, lo, hi, fam == BENCH_FAM_DECODE ? "cached tokens" : "n (tokens)");
  if (cross && cross->where == 0 && cross->n_star > lo / 1.4 && cross->n_star < hi * 1.4) {
    fprintf(body, "  set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 4 lw 1.5 lc rgb 'black'\n", cross->n_star,
            cross->n_star);
    const int right = log(cross->n_star / lo) > log(hi / lo) / 2; /* the label on the side with room */
    fprintf(body, "  set label 'n* = %.0f: %s vs %s' at %.6g, graph 0.05 %s offset %s,0 font ',9'\n", cross->n_star,
            cross->linear->name, cross->softmax->name, cross->n_star, right ? "right" : "left", right ? "-0.5" : "0.5");
  } else if (cross) {
    char t[32];
    bench_fmt_n(t, sizeof t, (double)(cross->where < 0 ? cross->n_lo : cross->n_hi));
    fprintf(body, "  set label 'n* %s %s: %s vs %s' at graph 0.03, graph 0.05 font ',9'\n",
            cross->where < 0 ? "<" : ">", t, cross->linear->name, cross->softmax->name);
  }
  gp_plot(body, s, n, "");
  fprintf(body, "  unset arrow\n  unset label\n");
}

/* The last panel: GFLOP/s of each prefill family's first series against the path's FMA peak. */
static void peak_panel(plot_ctx *p, FILE *pre, FILE *body) {
  series s[PANEL_SERIES];
  size_t n = 0;
  double lo = 0, hi = 0;
  FILE *f = p->f;
  p->f = pre;
  p->ylo = p->yhi = 0;
  widen_y(p, p->r->limits.peak[p->isa]);
  for (int fam = 0; fam < BENCH_FAM_DECODE && n < PANEL_SERIES; fam++) {
    const bench_crossover *cross;
    series all[PANEL_SERIES];
    if (!panel_series(p, (bench_family)fam, all, &cross)) continue;
    s[n] = all[0];
    s[n].color = (int)n;
    write_block(p, &s[n++], bench_row_gflops, &lo, &hi);
  }
  p->f = f;
  const double peak = p->r->limits.peak[p->isa];
  if (!n) return;
  fprintf(body, "  set title 'Prefill GFLOP/s against the %s FMA peak (bench/flops.h)'\n", attn_isa_name(p->isa));
  fprintf(body, "  set ylabel 'GFLOP/s'\n  set format y '%%g'\n");
  gp_yrange(body, p);
  gp_xaxis(body, lo, hi, "n (tokens)");
  char extra[160] = "";
  if (peak > 0)
    snprintf(extra, sizeof extra, "%.6g with lines dt 2 lw 1.5 lc rgb 'black' title 'FMA peak %.0f'", peak, peak);
  gp_plot(body, s, n, extra);
}

static int write_gp(const char *gp, const char *svg, const char *png, const bench_results *r) {
  FILE *f = fopen(gp, "w");
  if (!f) return -1;
  char *text = NULL;
  size_t len = 0;
  FILE *body = open_memstream(&text, &len);
  if (!body) {
    fclose(f);
    return -1;
  }
  plot_ctx p = {f, r, bench_shown_path(r), 0, 0, 0, 0};
  for (size_t i = 0; i < r->count && !p.d; i++)
    if (!r->rows[i].baseline) p.d = r->rows[i].shape.d;
  const bench_sysinfo *i = &r->info;
  char title[512];
  snprintf(title, sizeof title, "attn %s (git %s) on %s, path %s, d = %zu, %d thread%s, %.10s", i->version, i->git,
           i->cpu, attn_isa_name(p.isa), p.d, r->threads, r->threads > 1 ? "s" : "", i->date);
  fprintf(f, "# attn-bench plot; run: gnuplot %s\n", gp);
  for (int fam = 0; fam < BENCH_FAM_COUNT; fam++)
    if (fam != BENCH_FAM_DELTA) family_panel(&p, f, (bench_family)fam, body);
  peak_panel(&p, f, body);
  fclose(body);
  fprintf(f, "outs = strstrt(GPVAL_TERMINALS, 'pngcairo') ? 'svg png' : 'svg'\ndo for [out in outs] {\n");
  fprintf(f,
          "  if (out eq 'svg') {\n    set terminal svg size 1560,980 dynamic font 'Helvetica,11' noenhanced "
          "background rgb 'white'\n    set output ");
  gp_quote(f, svg);
  fprintf(f,
          "\n  } else {\n    set terminal pngcairo size 1560,980 font 'Helvetica,10' noenhanced background rgb "
          "'white'\n    set output ");
  gp_quote(f, png);
  fprintf(f, "\n  }\n  set multiplot layout 2,3 title ");
  gp_quote(f, title);
  fprintf(f,
          "\n  set logscale xy\n  set grid\n  set key top right font ',9' samplen 2.5 spacing 0.9 "
          "opaque box lc rgb '#cccccc'\n");
  fwrite(text, 1, len, f);
  free(text);
  fprintf(f, "  unset multiplot\n  set output\n}\n");
  return fclose(f) ? -1 : 0;
}

int bench_write_plot(const char *svg, const bench_results *r, char *png, size_t pnglen, char *msg, size_t msglen) {
  char gp[PATH_MAX + 1200];
  size_t len = strlen(svg);
  const int ext = len > 4 && strcmp(svg + len - 4, ".svg") == 0;
  snprintf(gp, sizeof gp, "%.*s.gp", (int)(ext ? len - 4 : len), svg);
  snprintf(png, pnglen, "%.*s.png", (int)(ext ? len - 4 : len), svg);
  unlink(png); /* so that its presence afterwards says gnuplot made it */
  if (write_gp(gp, svg, png, r)) {
    snprintf(msg, msglen, "cannot write %s: %s", gp, strerror(errno));
    png[0] = 0;
    return -1;
  }
  pid_t pid;
  char *argv[] = {"gnuplot", gp, NULL};
  int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ), status = 0;
  if (rc) {
    snprintf(msg, msglen, "gnuplot not found (install gnuplot-nox); the script is %s", gp);
    png[0] = 0;
    return 0;
  }
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(msg, msglen, "gnuplot failed on %s", gp);
    png[0] = 0;
    return -1;
  }
  struct stat st;
  if (stat(png, &st)) png[0] = 0;
  snprintf(msg, msglen, "%s%s%s (gnuplot script %s)", svg, png[0] ? " and " : "", png, gp);
  return 1;
}
