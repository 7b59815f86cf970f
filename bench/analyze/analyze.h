/*
 * attn-analyze: the seeds' claims about attention (spec 7), measured through attn's kernels.
 * Subcommands: sparsity (Monte Carlo against seed 000's closed forms), rank (seed 001's rank
 * experiments, SVD through LAPACK), entropy (per-row entropy and sparsity histograms of every
 * variant on the same inputs). Each fills a document of tables that output.c writes as a readable
 * table, Markdown, CSV and JSON, and a gnuplot script rendered to SVG when gnuplot is installed.
 */
#ifndef ATTN_ANALYZE_H
#define ATTN_ANALYZE_H

#include <stddef.h>
#include <stdint.h>

#include <attn.h>

/* ---- options ------------------------------------------------------------------------------- */
typedef struct an_opts {
  int quick;           /* small samples, for the test suite */
  uint64_t seed;       /* base seed of every draw */
  const char *out_dir; /* where the files go */
  int plots;           /* write gnuplot scripts and run gnuplot */
} an_opts;

/* ---- random numbers and replicate statistics (stats.c) -------------------------------------- */
typedef struct an_rng {
  uint64_t x;
  int have;
  double spare;
} an_rng;

void an_rng_seed(an_rng *r, uint64_t seed);
double an_uniform(an_rng *r);                                              /* [0, 1) */
double an_gauss(an_rng *r);                                                /* N(0, 1) */
void an_fill_gauss(an_rng *r, float *x, size_t n, double mean, double sd); /* N(mean, sd^2) */
void an_direction(an_rng *r, float *x, size_t d, double norm);             /* uniform direction, |x| = norm */
void an_shuffle(an_rng *r, float *x, size_t n);                            /* a uniform random permutation */

/* Mean and standard error over independent replicates (Welford). */
typedef struct an_acc {
  double n, mean, m2;
} an_acc;
void an_acc_add(an_acc *a, double x);
double an_acc_se(const an_acc *a);

/* Mean of the finite values of x[0 .. n) (NaN rows are skipped, spec 7); NaN when none. */
double an_mean_finite(const float *x, size_t n, size_t stride);

/* ---- closed forms (closed.c) ---------------------------------------------------------------- */
double an_phi(double t); /* standard normal pdf */
double an_Phi(double t); /* standard normal cdf */
/* M_k = E[X^k 1{X > 0}], X ~ N(mean, sd^2), k = 0 .. kmax (kmax <= 8). */
void an_relu_moments(double mean, double sd, int kmax, double *m);

/* Spec 7's closed forms, as printed there. */
double an_S_softmax(double sigma_q);                           /* exp(-sigma^2 |q|^2 / 2), scale 1 */
double an_S_linear(double beta, double gamma);                 /* a ~ N(beta, gamma^2) */
double an_S_nonneg(double mu, double s, double l2, double l1); /* features mean mu, std s; |q~|_2, |q~|_1 */
double an_S_decay(double lambda, double n);                    /* a_j ~ lambda^(n-j), exact */
double an_S_gau(double beta, double gamma);                    /* relu(N(beta, gamma^2))^2 */

/* Checks of the closed forms against their moments and known values; seed 000's printed forms
 * (read literally) beside the re-derived ones and the measured linear and decay tables. */
struct an_doc;
struct an_table;
void an_closed_self_check(struct an_doc *doc);
void an_printed_forms(struct an_doc *doc, const struct an_table *lin);

/* Raw moments E|a|^k, k = 0..4, of one weight a under each setting: the closed form is
 * mu[1] / sqrt(mu[2]); the others give the sample's standard error and bias (an_theory). */
typedef struct an_mom {
  double mu[5];
} an_mom;
an_mom an_mom_softmax(double sigma_q);
an_mom an_mom_linear(double beta, double gamma);
an_mom an_mom_gau(double beta, double gamma);
/* Non-negative linear: a = sum_f c_f phi(X_f), X_f ~ N(mean, sd^2) iid, phi one of the maps
 * relu, elu1, exp (attn_feature_map); also the feature's mean and std. */
an_mom an_mom_nonneg(attn_feature_map map, double mean, double sd, const double *c, size_t d, double *feat_mu,
                     double *feat_s);
double an_feature(attn_feature_map map, double x); /* phi(x) of relu, elu1, exp (scale 1) */

/* What a sample of n keys per row gives for a setting: the per-row estimator's relative
 * standard deviation and bias (delta method), and v2 = Var(a^2) / E[a^2]^2, which says whether n
 * keys reach the closed form (spec: n >> v2). */
typedef struct an_theory {
  double S, rel_sd_row, rel_bias, v2;
} an_theory;
an_theory an_theory_of(an_mom m, double n);

/* ---- tables and documents (output.c) ------------------------------------------------------- */
#define AN_MAX_COLS   16
#define AN_MAX_TABLES 16
#define AN_MAX_NOTES  24

typedef struct an_cell {
  double v;   /* the number (NaN for text) */
  char s[48]; /* the shown text */
  int is_num;
} an_cell;

typedef struct an_table {
  char name[40]; /* file stem: <doc>_<name>.csv */
  char title[200];
  int ncols;
  char cols[AN_MAX_COLS][32];
  an_cell *cells; /* nrows x ncols */
  size_t ncells, cap;
  char note[1200]; /* shown under the table */
  int hide;        /* only in the files, not on the terminal */
} an_table;

typedef struct an_doc {
  char name[24]; /* subcommand: file stem */
  char title[160];
  an_table tables[AN_MAX_TABLES];
  int ntables;
  char notes[AN_MAX_NOTES][400];
  int nnotes;
  int checks, failures; /* the assertions this document made */
} an_doc;

void an_doc_init(an_doc *doc, const char *name, const char *title);
void an_doc_free(an_doc *doc);
/* A new table; cols is a comma-separated list of column names. */
an_table *an_table_new(an_doc *doc, const char *name, const char *title, const char *cols);
void an_put(an_table *t, double v, const char *fmt); /* a number, shown with fmt */
void an_puts(an_table *t, const char *s);            /* a text cell */
size_t an_rows(const an_table *t);
void an_note(an_doc *doc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record one assertion; returns ok. A failure is also noted. */
int an_check(an_doc *doc, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Print the doc as readable tables; write <dir>/<name>.md, .json and <name>_<table>.csv. */
void an_doc_print(const an_doc *doc);
int an_doc_write(const an_doc *doc, const char *dir);

/* gnuplot (plot.c): a script <dir>/<name>.gp; run gnuplot on it when plots are on and gnuplot is
 * found. Returns 1 with an SVG, 0 when skipped (message in msg), -1 on error. */
typedef struct an_plot {
  char path[1024];
  void *f; /* FILE * of the script while it is written */
} an_plot;
int an_plot_begin(an_plot *p, const char *dir, const char *name, int width, int height, int rows, int cols,
                  const char *title);
int an_plot_end(an_plot *p, int run, char *msg, size_t msglen);
void an_plot_printf(an_plot *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A CSV of the doc, as gnuplot names it in a script (written next to it). */
void an_plot_csv(char *buf, size_t len, const an_doc *doc, const char *table);

/* ---- LAPACK (svd.c) ---------------------------------------------------------------------- */
/* Singular values (descending) of the rows x cols matrix a (row-major doubles, overwritten) into
 * sv[min(rows, cols)], through LAPACK's dgesdd. 0 on success. */
int an_svd(size_t rows, size_t cols, double *a, double *sv);
/* #{sv_k > tol * sv_0}. */
size_t an_rank(const double *sv, size_t k, double tol);
/* Numerical rank of a row-major float matrix (converted to double) with tol, and optionally its
 * rank with a second tolerance (tol2 > 0; -1 in *rank2 otherwise). -1 on failure. */
long an_rank_f32(const float *a, size_t rows, size_t cols, size_t ld, double tol, double tol2, long *rank2);
void an_lapack_single_thread(void);

/* ---- subcommands ---------------------------------------------------------------------------- */
int an_sparsity(const an_opts *o, an_doc *doc);
int an_rank_cmd(const an_opts *o, an_doc *doc);
int an_entropy(const an_opts *o, an_doc *doc);
int an_sparsity_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len);
int an_rank_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len);
int an_entropy_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len);

/* Shared helpers of the drivers (stats.c): an aligned, zeroed buffer; a workspace that grows and
 * is reused; a failed call noted; and the explicit matrix and its statistics on such a
 * workspace (the matrix n_q x n_kv, row stride n_kv, one output head). */
void *an_alloc(size_t bytes);
typedef struct an_buf {
  void *p;
  size_t bytes;
} an_buf;
void *an_grow(an_buf *b, size_t bytes);
int an_call_ok(an_doc *doc, attn_status st, const char *what);
attn_status an_matrix(const attn_call *call, float *a, size_t n_kv, an_buf *ws);
attn_status an_matrix_stats(const attn_call *call, const attn_row_stats *st, an_buf *ws);

/* Outputs of one softmax or linear call on a growing workspace (attn_softmax, attn_linear with
 * no state), and the relative Frobenius distance |a - ref|_F / |ref|_F of n floats, in double. */
attn_status an_softmax_out(const attn_softmax_desc *sd, const float *q, const float *k, const float *v, float *o,
                           an_buf *ws);
attn_status an_linear_out(const attn_linear_desc *ld, const float *q, const float *k, const float *v, float *o,
                          an_buf *ws);
double an_rel_fro(const float *a, const float *ref, size_t n);
/* Elapsed seconds of a monotonic clock. */
double an_now(void);

/* The subcommands of the claims not in spec 7's list: FAVOR+ and the feature maps against
 * softmax (favor.c, taylor.c), linear attention against average pooling (pooling.c), rank
 * collapse with depth (depth.c), selective attention and its pruning cache (selective.c); and
 * their figures (figures2.c). */
int an_approx(const an_opts *o, an_doc *doc);
void an_favor_error(const an_opts *o, an_doc *doc, an_rng *rng, an_buf *ws);
void an_favor_crossover(const an_opts *o, an_doc *doc, an_rng *rng, an_buf *ws);
void an_taylor(const an_opts *o, an_doc *doc, an_rng *rng, an_buf *ws);
int an_pooling(const an_opts *o, an_doc *doc);
int an_depth(const an_opts *o, an_doc *doc);
int an_selective_cmd(const an_opts *o, an_doc *doc);
int an_approx_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len);
int an_pooling_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len);
int an_depth_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len);
int an_selective_plot(const an_opts *o, const an_doc *doc, char *msg, size_t len);

#endif
