/* The SVG figures of the approx, pooling, depth and selective subcommands (gnuplot over their
 * CSV files; see figures.c for the first three). */
#include <stdio.h>
#include <string.h>

#include "analyze.h"

static const char *const col2[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};

static int has_table(const an_doc *doc, const char *name) {
  for (int i = 0; i < doc->ntables; i++)
    if (strcmp(doc->tables[i].name, name) == 0) return 1;
  return 0;
}

int an_approx_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len) {
  an_plot p = {{0}, NULL};
  char csv[96];
  const int cross = has_table(doc, "crossover");
  an_plot_begin(&p, o->out_dir, "approx", cross ? 1500 : 1000, 480, 1, cross ? 3 : 2,
                "FAVOR+ against softmax; elu1 and dsoftmax against exp");
  an_plot_csv(csv, sizeof csv, doc, "favor");
  an_plot_printf(&p,
                 "set logscale xy\nset key bottom left\nset title 'FAVOR+ matrix error (d = 16)'\n"
                 "set xlabel 'm'\nset ylabel '|A_favor - A_softmax|_F / |A_softmax|_F'\nplot 1/0 notitle");
  static const char *const feats[] = {"orthogonal", "iid"};
  for (int s = 0; s < 2; s++)
    for (int f = 0; f < 2; f++)
      an_plot_printf(&p,
                     ", '%s' using 3:($1 == %s && strcol(2) eq '%s' ? $5 : 1/0):6 with yerrorlines lc rgb '%s' dt %d "
                     "title 'sd %s, %s'",
                     csv, s ? "1" : "0.5", feats[f], col2[2 * s + f], f + 1, s ? "1" : "0.5", feats[f]);
  an_plot_printf(&p, ", 2/sqrt(x) lc rgb 'gray60' dt 3 title '~ 1/sqrt(m)'\n");
  an_plot_csv(csv, sizeof csv, doc, "taylor");
  an_plot_printf(&p,
                 "set title 'distance from the exp map (n = 256, d = 16)'\nset xlabel 'input sd'\n"
                 "set ylabel '|A - A_exp|_F / |A_exp - 1/n|_F'\nset key top left\nplot x*0.6 lc rgb 'gray60' dt 3 "
                 "title '~ sd'");
  an_plot_printf(&p, ", '%s' using 1:(strcol(2) eq 'elu1' ? $4 : 1/0) with linespoints lc rgb '%s' title 'elu1'", csv,
                 col2[0]);
  an_plot_printf(&p,
                 ", '%s' using 1:(strcol(2) eq 'dsoftmax' ? $4 : 1/0) with linespoints lc rgb '%s' title 'dsoftmax'\n",
                 csv, col2[1]);
  if (cross) {
    an_plot_csv(csv, sizeof csv, doc, "crossover");
    an_plot_printf(&p,
                   "set title 'time, d = 64, FAVOR+ m = 256'\nset xlabel 'n'\nset ylabel 'ms'\nset logscale x 2\n"
                   "plot 1/0 notitle");
    static const char *const masks[] = {"full", "causal"};
    for (int m = 0; m < 2; m++)
      an_plot_printf(&p,
                     ", '%s' using 2:(strcol(1) eq '%s' ? $3 : 1/0) with linespoints lc rgb '%s' dt %d title "
                     "'softmax %s', '%s' using 2:(strcol(1) eq '%s' ? $4 : 1/0) with linespoints lc rgb '%s' dt %d "
                     "title 'favor %s'",
                     csv, masks[m], col2[0], m + 1, masks[m], csv, masks[m], col2[1], m + 1, masks[m]);
    an_plot_printf(&p, "\n");
  }
  an_plot_printf(&p, "unset logscale\n");
  return an_plot_end(&p, o->plots, msg, len);
}

int an_pooling_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len) {
  an_plot p = {{0}, NULL};
  char csv[96];
  an_plot_csv(csv, sizeof csv, doc, "pooling");
  an_plot_begin(&p, o->out_dir, "pooling", 1100, 480, 1, 2, "Linear attention against average pooling");
  static const char *const names[] = {"softmax", "softmax", "softmax", "elu1", "elu1",
                                      "elu1",    "favor",   "favor",   "favor"};
  static const int dm[][2] = {{4, 4}, {16, 16}, {64, 64}, {4, 4}, {16, 16}, {64, 64}, {16, 16}, {16, 64}, {16, 256}};
  for (int panel = 0; panel < 2; panel++) {
    an_plot_printf(&p, "set logscale x 2\n%s\nset key %s font ',8'\nset xlabel 'n'\n",
                   panel ? "unset logscale y" : "set logscale y", panel ? "bottom right" : "bottom left");
    an_plot_printf(&p, "set title '%s'\nset ylabel '%s'\nplot 1/0 notitle",
                   panel ? "mean row sparsity S" : "distance of the outputs from the mean value",
                   panel ? "S" : "dist (0: average pooling)");
    for (int v = 0; v < 9; v++)
      an_plot_printf(&p,
                     ", '%s' using 4:(strcol(1) eq '%s' && $2 == %d && $3 == %d ? $%d : 1/0) with linespoints lc "
                     "rgb '%s' dt %d title '%s d %d m %d'",
                     csv, names[v], dm[v][0], dm[v][1], panel ? 5 : 7, col2[v / 3 * 2 + (v % 3 == 2)], v % 3 + 1,
                     names[v], dm[v][0], dm[v][1]);
    if (!panel) an_plot_printf(&p, ", 1/sqrt(x) lc rgb 'gray60' dt 3 title '~ 1/sqrt(n)'");
    an_plot_printf(&p, "\n");
  }
  an_plot_printf(&p, "unset logscale\n");
  return an_plot_end(&p, o->plots, msg, len);
}

int an_depth_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len) {
  an_plot p = {{0}, NULL};
  char csv[96];
  an_plot_csv(csv, sizeof csv, doc, "depth");
  an_plot_begin(&p, o->out_dir, "depth", 700, 480, 1, 1, "Rank collapse of stacked softmax layers");
  an_plot_printf(&p,
                 "set logscale y\nset yrange [1e-12:2]\nset key bottom left\nset xlabel 'layers'\n"
                 "set ylabel '|X - 1 xbar^T|_F / |X|_F'\nset title 'geometric mean and range over draws (0 shown at "
                 "the bottom)'\n");
  an_plot_printf(&p,
                 "plot '%s' using 1:($2 < 1e-12 ? 1e-12 : $2):($3 < 1e-12 ? 1e-12 : $3):4 with yerrorlines lc rgb "
                 "'%s' title 'pure attention', '%s' using 1:5:6:7 with yerrorlines lc rgb '%s' title 'with residual "
                 "connections'\n",
                 csv, col2[1], csv, col2[0]);
  return an_plot_end(&p, o->plots, msg, len);
}

int an_selective_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len) {
  an_plot p = {{0}, NULL};
  char csv[96];
  an_plot_csv(csv, sizeof csv, doc, "pruning");
  an_plot_begin(&p, o->out_dir, "selective", 1100, 480, 1, 2, "Selective attention's pruning cache");
  for (int panel = 0; panel < 2; panel++) {
    an_plot_printf(&p,
                   "set logscale xy\nset key top left\nset xlabel 'memory saving (x)'\nset ylabel '%s'\n"
                   "set title '%s against attn_selective over the whole context'\n",
                   panel ? "mean relative error" : "largest relative error", panel ? "mean" : "largest");
    an_plot_printf(&p,
                   "plot '%s' using 8:($2 == 0 ? $%d : 1/0) with linespoints lc rgb '%s' title 'tau (no budget)', "
                   "'' using 8:($2 == 0 ? $%d : 1/0):(sprintf('%%s', strcol(1))) with labels offset 1,0.6 font ',8' "
                   "notitle, '%s' using 8:($2 > 0 ? $%d : 1/0) with linespoints lc rgb '%s' title 'budget (tau inf)'\n",
                   csv, 3 + panel, col2[0], 3 + panel, csv, 3 + panel, col2[1]);
  }
  an_plot_printf(&p, "unset logscale\n");
  return an_plot_end(&p, o->plots, msg, len);
}
