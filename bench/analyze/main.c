/* attn-analyze: options, the subcommands, the files and the summary. See --help. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analyze.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: attn-analyze [sparsity|rank|entropy|approx|pooling|depth|selective|all ...] [options]\n"
      "The seeds' claims (000-002) measured through attn's kernels (spec 7):\n"
      "  sparsity  Monte Carlo of seed 000's settings (softmax, plain linear, GAU, non-negative linear with\n"
      "            relu/elu1/exp maps, decay) beside each closed form; every row checked; the printed forms\n"
      "  rank      seed 001's rank experiments: exp(x x^T) for n = 100 over many draws, softmax against n and d,\n"
      "            linear attention against m, windowed and causal linear attention\n"
      "  entropy   per-row entropy and sparsity of every variant on the same inputs; S against H\n"
      "  approx    FAVOR+ against softmax as m grows (and its speed crossover), elu1 and dsoftmax against exp\n"
      "  pooling   linear attention against average pooling as n and m grow\n"
      "  depth     rank collapse of stacked softmax layers, with and without residual connections\n"
      "  selective seed 002: the variable-assignment example, and the pruning cache's error against memory\n"
      "  all       every one (default)\n"
      "options:\n"
      "  --quick         small samples (the test suite's run, a few seconds); no timing\n"
      "  --out-dir DIR   where the Markdown, CSV, JSON, gnuplot scripts and SVGs go (default bench-results/analysis)\n"
      "  --seed N        base seed of every draw (default 1)\n"
      "  --no-plot       no gnuplot scripts or SVGs (without gnuplot installed they are skipped anyway)\n"
      "  --help\n"
      "Exit status 1 when any check fails (a closed form missed, a rank out of its bounds, ...).\n");
}

/* The largest |rel_diff| over the checked sparsity rows. */
static void sparsity_headline(an_doc *doc) {
  double worst = 0, worst_se = 0;
  size_t rows = 0;
  const char *where = "";
  for (int i = 0; i < doc->ntables; i++) {
    const an_table *t = &doc->tables[i];
    if (strcmp(t->name, "beyond") == 0 || strcmp(t->name, "printed") == 0) continue;
    for (size_t r = 0; r < an_rows(t); r++, rows++) {
      const an_cell *c = &t->cells[r * t->ncols];
      if (fabs(c[6].v) >= worst) worst = fabs(c[6].v), worst_se = c[5].v / c[3].v, where = t->name;
    }
  }
  an_note(doc, "%zu rows checked; largest |measured / closed form - 1| = %.3f%% (%s, its se %.3f%%)", rows, 100 * worst,
          where, 100 * worst_se);
}

int main(int argc, char **argv) {
  an_opts o = {0, 1, "bench-results/analysis", 1};
  enum { NSUB = 7 };
  int want[NSUB] = {0}, any = 0;
  static const char *const names[NSUB] = {"sparsity", "rank", "entropy", "approx", "pooling", "depth", "selective"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int sub = -1;
    for (int s = 0; s < NSUB; s++)
      if (strcmp(a, names[s]) == 0) sub = s;
    if (sub >= 0) {
      want[sub] = any = 1;
    } else if (strcmp(a, "all") == 0) {
      for (int s = 0; s < NSUB; s++) want[s] = any = 1;
    } else if (strcmp(a, "--quick") == 0) {
      o.quick = 1;
    } else if (strcmp(a, "--no-plot") == 0) {
      o.plots = 0;
    } else if ((strcmp(a, "--out-dir") == 0 || strcmp(a, "--seed") == 0) && i + 1 < argc) {
      if (a[2] == 'o')
        o.out_dir = argv[++i];
      else
        o.seed = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "attn-analyze: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  for (int s = 0; s < NSUB && !any; s++) want[s] = 1;
  an_lapack_single_thread();
  printf("attn-analyze: attn %s, ISA path %s, %s run, seed %llu\n", attn_version_string(),
         attn_isa_name(attn_isa_get()), o.quick ? "quick" : "full", (unsigned long long)o.seed);
  typedef int (*run_fn)(const an_opts *, an_doc *);
  typedef int (*plot_fn)(const an_opts *, const an_doc *, char *, size_t);
  static const run_fn runs[NSUB] = {an_sparsity, an_rank_cmd, an_entropy,      an_approx,
                                    an_pooling,  an_depth,    an_selective_cmd};
  static const plot_fn plots[NSUB] = {an_sparsity_plot, an_rank_plot,  an_entropy_plot,  an_approx_plot,
                                      an_pooling_plot,  an_depth_plot, an_selective_plot};
  static an_doc docs[NSUB];
  char summary[NSUB][600];
  int failures = 0;
  for (int s = 0; s < NSUB; s++) {
    if (!want[s]) continue;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = runs[s](&o, &docs[s]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (s == 0) sparsity_headline(&docs[s]);
    an_doc_print(&docs[s]);
    char plot[400] = "plots off";
    int wr = an_doc_write(&docs[s], o.out_dir);
    if (o.plots && wr == 0 && plots[s](&o, &docs[s], plot, sizeof plot) < 0) wr = -1;
    int bad = docs[s].failures + (rc != 0) + (wr != 0);
    failures += bad;
    snprintf(summary[s], sizeof summary[s], "%-9s %3d checks, %d failed, %.1f s; %s/%s.{md,json}, %s_*.csv; %s",
             names[s], docs[s].checks, bad, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
             o.out_dir, names[s], names[s], plot);
  }
  printf("\n== attn-analyze summary\n");
  for (int s = 0; s < NSUB; s++) {
    if (!want[s]) continue;
    printf("%s\n", summary[s]);
    for (int i = 0; i < docs[s].nnotes; i++)
      if (strncmp(docs[s].notes[i], "FAILED", 6) == 0 || (s == 0 && i == docs[s].nnotes - 1))
        printf("  %s\n", docs[s].notes[i]);
    an_doc_free(&docs[s]);
  }
  printf("%s\n", failures ? "attn-analyze: SOME CHECKS FAILED" : "attn-analyze: all checks passed");
  return failures ? 1 : 0;
}
