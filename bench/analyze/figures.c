/* The SVG figures (gnuplot over the CSV files): sparsity against each setting's parameter, the
 * closed form as a line and the measurements as points; rank against m, the window and d;
 * entropy and sparsity histograms. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyze.h"

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                     "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static const an_table *table(const an_doc *doc, const char *name) {
  for (int i = 0; i < doc->ntables; i++)
    if (strcmp(doc->tables[i].name, name) == 0) return &doc->tables[i];
  return NULL;
}

static int col(const an_table *t, const char *name) {
  for (int c = 0; c < t->ncols; c++)
    if (strcmp(t->cols[c], name) == 0) return c;
  return 0;
}

/* A cell of the first row whose column `key` reads `value`; NaN when none. */
static double lookup(const an_table *t, const char *key, const char *value, const char *want) {
  int kc = col(t, key), wc = col(t, want);
  for (size_t r = 0; t && r < an_rows(t); r++)
    if (strcmp(t->cells[r * t->ncols + kc].s, value) == 0) return t->cells[r * t->ncols + wc].v;
  return NAN;
}

/* Measured points (with error bars) of one setting of a sparsity table, and of its beyond rows. */
static void sp_points(an_plot *p, const an_doc *doc, const char *tab, const char *setting, const char *color,
                      const char *title) {
  char csv[96];
  an_plot_csv(csv, sizeof csv, doc, tab);
  an_plot_printf(p,
                 ", '%s' using 3:(strcol(1) eq '%s' ? $5 : 1/0):6 with yerrorbars pt 7 ps 0.8 lc rgb '%s' title '%s'",
                 csv, setting, color, title);
  const an_table *b = table(doc, "beyond");
  if (!b || !isfinite(lookup(b, "setting", setting, "x"))) return;
  an_plot_csv(csv, sizeof csv, doc, "beyond");
  an_plot_printf(
      p, ", '%s' using 3:(strcol(1) eq '%s' ? $5 : 1/0) with points pt 6 ps 1 lc rgb '%s' title '%s, beyond reach'",
      csv, setting, color, title);
}

int an_sparsity_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len) {
  an_plot p = {{0}, NULL};
  an_plot_begin(&p, o->out_dir, "sparsity", 1500, 900, 2, 3,
                "Sparsity S = E|a|/sqrt(E a^2): closed forms (lines) and attn's kernels (points)");
  an_plot_printf(&p, "Phi(x) = norm(x)\nphi(x) = exp(-x*x/2)/sqrt(2*pi)\nset ylabel 'S'\nset key bottom left\n");
  an_plot_printf(&p, "set title 'softmax: exp(-sigma^2|q|^2/2)'\nset xlabel 'sigma |q|'\nset logscale y\n");
  const an_table *soft = table(doc, "softmax");
  double n = soft && an_rows(soft) ? soft->cells[col(soft, "n_kv")].v : NAN, reach = sqrt(log(0.01 * n + 1) / 4);
  if (isfinite(reach)) /* where n keys stop reaching the closed form (sparsity.c) */
    an_plot_printf(&p,
                   "set arrow 1 from %.4g, graph 0 to %.4g, graph 1 nohead dt 3 lc rgb 'gray40'\n"
                   "set label 1 'reach of %.0f keys' at %.4g, graph 0.92 offset 0.5,0 font ',9'\n",
                   reach, reach, n, reach);
  an_plot_printf(&p, "plot [0:3.1] exp(-x*x/2) lc rgb 'black' title 'closed form'");
  sp_points(&p, doc, "softmax", "softmax", colors[0], "measured");
  an_plot_printf(&p, "\nunset logscale y\nunset arrow 1\nunset label 1\n");
  an_plot_printf(&p, "set title 'plain linear: a = q.k + beta'\nset xlabel 'beta / gamma'\n");
  an_plot_printf(&p,
                 "plot [-3.2:3.2] [0.7:1.02] (sqrt(2/pi)*exp(-x*x/2) + x*erf(x/sqrt(2)))/sqrt(x*x+1) lc rgb "
                 "'black' title 'closed form'");
  sp_points(&p, doc, "linear", "linear", colors[1], "measured");
  an_plot_printf(&p, "\nset title 'GAU: relu(q.k + beta)^2'\nset xlabel 'beta / gamma'\n");
  an_plot_printf(&p,
                 "plot [-2.2:3.2] [0:1] ((x*x+1)*Phi(x) + x*phi(x)) / sqrt((x**4 + 6*x*x + 3)*Phi(x) + "
                 "(x**3 + 5*x)*phi(x)) lc rgb 'black' title 'closed form'");
  sp_points(&p, doc, "gau", "gau", colors[2], "measured");
  /* Non-negative linear: each map's |q~|_2/|q~|_1 from one of its rows, r = x sqrt(1/S^2 - 1). */
  const an_table *nn = table(doc, "nonneg");
  an_plot_printf(&p,
                 "\nset title 'non-negative linear: 1/sqrt(1 + (s|q~|_2/(mu|q~|_1))^2)'\nset xlabel 'mu / s "
                 "of the key features'\nset logscale x\nplot [0.1:10] [0:1] 1/0 notitle");
  static const char *const maps[] = {"relu", "elu1", "exp"};
  for (int m = 0; m < 3 && nn; m++) {
    double x = lookup(nn, "setting", maps[m], "x"), s = lookup(nn, "setting", maps[m], "closed_form");
    if (isfinite(x))
      an_plot_printf(&p, ", 1/sqrt(1 + (%.6g/x)**2) lc rgb '%s' title '%s closed form'", x * sqrt(1 / (s * s) - 1),
                     colors[3 + m], maps[m]);
    sp_points(&p, doc, "nonneg", maps[m], colors[3 + m], maps[m]);
  }
  an_plot_printf(&p,
                 "\nset title 'decay: a_j ~ lambda^(n-j), exact'\nset xlabel 'n'\nset logscale x 4\n"
                 "plot [1:5000] [0:1.05] 1/0 notitle");
  static const double lambdas[] = {0.5, 0.9, 0.99, 0.999};
  for (int l = 0; l < 4; l++) {
    char setting[32];
    snprintf(setting, sizeof setting, "decay %g", lambdas[l]);
    an_plot_printf(&p, ", sqrt((1-%g**x)*(1+%g)/(x*(1-%g)*(1+%g**x))) lc rgb '%s' title 'lambda %g'", lambdas[l],
                   lambdas[l], lambdas[l], lambdas[l], colors[l], lambdas[l]);
    char csv[96];
    an_plot_csv(csv, sizeof csv, doc, "decay");
    an_plot_printf(&p, ", '%s' using 3:(strcol(1) eq '%s' ? $5 : 1/0) with points pt 7 lc rgb '%s' notitle", csv,
                   setting, colors[l]);
  }
  an_plot_printf(&p, "\nunset logscale\n");
  return an_plot_end(&p, o->plots, msg, len);
}

int an_rank_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len) {
  an_plot p = {{0}, NULL};
  char csv[96];
  an_plot_begin(&p, o->out_dir, "rank", 1500, 520, 1, 3,
                "Numerical rank (tol = n eps_32) of attn's attention matrices");
  an_plot_printf(&p, "set logscale xy 2\nset key top left\nset ylabel 'rank'\n");
  /* Rank against m, with softmax's rank against d at the same n beside it. */
  const an_table *lm = table(doc, "linear_m");
  double n = lm && an_rows(lm) ? lm->cells[col(lm, "n")].v : 512;
  an_plot_csv(csv, sizeof csv, doc, "linear_m");
  an_plot_printf(&p, "set title 'linear attention against m (n = %.0f)'\nset xlabel 'm (softmax: d)'\n", n);
  an_plot_printf(&p, "plot [1.5:300] [1:%g] x lc rgb 'black' dt 2 title 'rank = m'", n * 2);
  static const char *const maps[] = {"identity", "elu1", "relu", "exp", "favor", "dsoftmax"};
  for (int m = 0; m < 6; m++)
    an_plot_printf(&p, ", '%s' using 3:(strcol(1) eq '%s' ? $5 : 1/0) with linespoints lc rgb '%s' title '%s'", csv,
                   maps[m], colors[m], maps[m]);
  an_plot_csv(csv, sizeof csv, doc, "softmax");
  an_plot_printf(&p, ", '%s' using 2:($1 == %.0f ? $4 : 1/0) with linespoints lw 2 lc rgb 'black' title 'softmax'\n",
                 csv, n);
  /* Rank against the window (keys seen), the causal mask's rank as a dashed line. */
  const an_table *w = table(doc, "window");
  an_plot_csv(csv, sizeof csv, doc, "window");
  an_plot_printf(&p,
                 "set title 'windowed linear attention (d = m = 16; full mask at n)'\nset xlabel 'keys seen, 2r + "
                 "1'\n");
  an_plot_printf(&p, "plot [0.8:%g] [8:%g] 16 lc rgb 'black' dt 2 title 'm', %g lc rgb 'gray60' dt 2 title 'n'",
                 1.5 * n, n * 2, n);
  static const char *const wmaps[] = {"elu1", "exp", "relu"};
  for (int m = 0; m < 3; m++) {
    an_plot_printf(&p,
                   ", '%s' using 4:(strcol(1) eq '%s' && strcol(2) ne 'causal' ? $5 : 1/0) with linespoints lc rgb "
                   "'%s' title '%s'",
                   csv, wmaps[m], colors[m + 1], wmaps[m]);
    for (size_t r = 0; w && r < an_rows(w); r++)
      if (strcmp(w->cells[r * w->ncols].s, wmaps[m]) == 0 && strcmp(w->cells[r * w->ncols + 1].s, "causal") == 0)
        an_plot_printf(&p, ", %g lc rgb '%s' dt 3 title '%s causal'", w->cells[r * w->ncols + 4].v, colors[m + 1],
                       wmaps[m]);
  }
  /* Softmax against d, one line per n. */
  an_plot_csv(csv, sizeof csv, doc, "softmax");
  an_plot_printf(&p, "\nset title 'softmax attention against d (tol = n eps_32)'\nset xlabel 'd'\n");
  an_plot_printf(&p, "plot [0.8:80] x lc rgb 'black' dt 2 title 'rank(QK^T) = d'");
  for (int i = 0, nn = 64; nn <= 1024; nn *= 2, i++)
    an_plot_printf(&p, ", '%s' using 2:($1 == %d ? $4 : 1/0) with linespoints lc rgb '%s' title 'n = %d'", csv, nn,
                   colors[i], nn);
  an_plot_printf(&p, "\nunset logscale\n");
  return an_plot_end(&p, o->plots, msg, len);
}

int an_entropy_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len) {
  an_plot p = {{0}, NULL};
  const an_table *t = table(doc, "entropy_hist");
  an_plot_begin(&p, o->out_dir, "entropy", 1400, 560, 1, 2, "Rows of every variant on the same inputs");
  an_plot_printf(&p, "set key top left font ',8'\nset ylabel 'fraction of rows'\n");
  for (int h = 0; h < 2 && t; h++) {
    char csv[96];
    an_plot_csv(csv, sizeof csv, doc, h ? "sparsity_hist" : "entropy_hist");
    an_plot_printf(&p, "set title '%s'\nset xlabel '%s'\nplot ", h ? "sparsity S" : "normalised entropy H / log n_i",
                   h ? "S" : "H / log n_i");
    for (int c = 2; c < t->ncols; c++)
      an_plot_printf(&p, "%s'%s' using (($1+$2)/2):%d with linespoints lc rgb '%s' dt %d pt %d ps 0.6",
                     c > 2 ? ", " : "", csv, c + 1, colors[(c - 2) % 10], c - 2 >= 10 ? 2 : 1, c % 7);
    an_plot_printf(&p, "\n");
  }
  return an_plot_end(&p, o->plots, msg, len);
}
