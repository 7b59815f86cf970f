/* `sparsity`: seed 000's settings run through attn's kernels, each beside its closed form (spec
 * 7). A row's sparsity S_i = mean|w| / sqrt(mean w^2) over its keys comes from the library (the
 * streamed statistics of softmax and GAU, the explicit matrix's statistics of linear attention);
 * "measured" is its mean over the rows of R independent replicates (fresh keys), "se" the
 * standard error of that mean from the spread of the replicates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

#define SP_COLS "setting,parameter,x,closed_form,measured,se,rel_diff,tol,bias_pred,n_kv,rows,check"

typedef struct sp_cfg {
  size_t n_stream, rows_stream; /* softmax and GAU: keys per row, rows per call */
  size_t n_mat, rows_mat;       /* linear attention through the explicit matrix */
  size_t n_decay, reps, d;
  double sigma; /* key standard deviation */
  int quick;
} sp_cfg;

/* A point is within the sample's reach when Var(a^2) / E[a^2]^2 <= n / 100: the ratio's bias is
 * then below about 0.4% (an_theory_of); further out a finite row misses the heavy tail that
 * holds E a^2 and S comes out too large. */
static int reachable(an_mom m, double n) { return an_theory_of(m, n).v2 <= 0.01 * n; }

/* One row: the closed form, the replicates' mean and SE, and the check. The tolerance is derived
 * from the sample, in the full run as in --quick: the predicted finite-n bias plus 5 standard
 * errors (the larger of the replicates' and the independent-rows one); a fixed 1% would let a
 * 0.5% temperature error pass at many standard errors. */
static void sp_row(an_doc *doc, an_table *t, const char *setting, const char *param, double x, double closed,
                   an_mom mom, const an_acc *acc, double n, double rows, int exact) {
  an_theory th = an_theory_of(mom, n);
  double meas = acc->mean, se = exact ? NAN : an_acc_se(acc), diff = meas / closed - 1;
  double se_rows = closed * th.rel_sd_row / sqrt(rows);
  double tol = exact ? 1e-4 /* float32 weights */ : fabs(th.rel_bias) + 5 * fmax(se, se_rows) / closed + 1e-4;
  const int beyond = strcmp(t->name, "beyond") == 0; /* beyond the sample's reach: shown, not checked */
  int ok = fabs(diff) <= tol;
  an_puts(t, setting);
  an_puts(t, param);
  an_put(t, x, "%.4g");
  an_put(t, closed, "%.5f");
  an_put(t, meas, "%.5f");
  an_put(t, se, "%.5f");
  an_put(t, diff, "%+.4f");
  an_put(t, beyond ? NAN : tol, "%.4f");
  an_put(t, exact ? NAN : th.rel_bias, "%+.3g");
  an_put(t, n, "%.0f");
  an_put(t, rows, "%.0f");
  if (beyond) {
    an_puts(t, "not checked");
    return;
  }
  an_puts(t, ok ? "ok" : "FAIL");
  an_check(doc, ok, "%s %s = %g: measured %.5f, closed form %.5f (%+.2f%%, tol %.2f%%)", setting, param, x, meas,
           closed, 100 * diff, 100 * tol);
}

/* ---- softmax and GAU: the streamed statistics ------------------------------------------------ */
static const double soft_g_full[] = {0.25, 0.5, 0.75, 0.875, 1, 1.125, 1.25, 1.5, 1.75, 2, 2.5, 3};
static const double soft_g_quick[] = {0.25, 0.5, 0.75, 1, 1.5, 2};
static const double gau_b[] = {-2, -1.5, -1, -0.5, 0, 0.5, 1, 2, 3};
static const double lin_b[] = {-3, -2, -1, -0.5, 0, 0.5, 1, 2, 3};
#define NSOFT_MAX 12
#define NB        9

static int streamed(an_doc *doc, const sp_cfg *c, an_rng *rng, an_table *soft, an_table *gau, an_table *beyond) {
  const size_t n = c->n_stream, rows = c->rows_stream, d = c->d;
  const double *gs = c->quick ? soft_g_quick : soft_g_full;
  const size_t ng = c->quick ? sizeof soft_g_quick / sizeof *gs : sizeof soft_g_full / sizeof *gs;
  attn_softmax_desc sd;
  attn_gau_desc gd;
  attn_softmax_desc_init(&sd, rows, n, 1, 1, d, 1);
  attn_gau_desc_init(&gd, rows, n, 1, 1, d, 1);
  sd.scale = gd.scale = 1; /* a_j = exp(q.k_j), relu(q.k_j + beta)^2 */
  size_t b1 = 0, b2 = 0;
  attn_softmax_workspace_size(&sd, &b1);
  attn_gau_workspace_size(&gd, &b2);
  float *k = an_alloc(n * d * 4), *v = an_alloc(n * 4), *q = an_alloc(rows * d * 4), *o = an_alloc(rows * 4);
  float *S = an_alloc(rows * 4);
  void *ws = an_alloc(b1 > b2 ? b1 : b2);
  an_acc acc_s[NSOFT_MAX] = {{0}}, acc_g[NB] = {{0}};
  attn_row_stats st;
  attn_row_stats_init(&st, 1, NULL, S, NULL);
  int ok = k && v && q && o && S && ws;
  for (size_t r = 0; ok && r < c->reps; r++) {
    an_fill_gauss(rng, k, n * d, 0, c->sigma);
    for (size_t i = 0; ok && i < ng + NB; i++) {
      int is_gau = i >= ng;
      double qnorm = (is_gau ? 1 : gs[i]) / c->sigma; /* GAU: gamma = sigma |q| = 1 */
      for (size_t row = 0; row < rows; row++) an_direction(rng, q + row * d, d, qnorm);
      attn_status s;
      if (is_gau) {
        gd.beta = (float)gau_b[i - ng];
        s = attn_gau_stats(&gd, q, k, v, o, &st, ws, b2);
      } else {
        s = attn_softmax_stats(&sd, q, k, v, o, NULL, &st, ws, b1);
      }
      ok = an_call_ok(doc, s, is_gau ? "attn_gau_stats" : "attn_softmax_stats");
      an_acc_add(is_gau ? &acc_g[i - ng] : &acc_s[i], an_mean_finite(S, rows, 1));
    }
  }
  const double rows_all = (double)(rows * c->reps);
  for (size_t i = 0; ok && i < ng; i++) {
    an_mom m = an_mom_softmax(gs[i]);
    sp_row(doc, reachable(m, (double)n) ? soft : beyond, "softmax", "sigma|q|", gs[i], an_S_softmax(gs[i]), m,
           &acc_s[i], (double)n, rows_all, 0);
  }
  for (size_t i = 0; ok && i < NB; i++) {
    an_mom m = an_mom_gau(gau_b[i], 1);
    sp_row(doc, reachable(m, (double)n) ? gau : beyond, "gau", "beta/gamma", gau_b[i], an_S_gau(gau_b[i], 1), m,
           &acc_g[i], (double)n, rows_all, 0);
  }
  free(k), free(v), free(q), free(o), free(S), free(ws);
  return ok ? 0 : -1;
}

/* ---- linear attention: the explicit matrix's statistics ---------------------------------------- */
/* Mean row sparsity of one linear call (its desc, q, k; a gate when log_gate is given). */
static double matrix_S(an_doc *doc, const attn_linear_desc *ld, const float *q, const float *k, const float *log_gate,
                       float *S, size_t rows, an_buf *ws) {
  attn_call call = {ATTN_KIND_LINEAR, ld, q, k, log_gate, NULL, NULL};
  attn_row_stats st;
  attn_row_stats_init(&st, 1, NULL, S, NULL);
  return an_call_ok(doc, an_matrix_stats(&call, &st, ws), "attn_matrix_stats (linear)") ? an_mean_finite(S, rows, 1)
                                                                                        : NAN;
}

/* Plain linear a_j = q.k_j + beta: the identity map, un-normalised, with beta as a constant
 * feature (q gets beta, every key 1: d + 1 dimensions). */
static int plain_linear(an_doc *doc, const sp_cfg *c, an_rng *rng, an_table *t, an_buf *ws) {
  const size_t n = c->n_mat, rows = c->rows_mat, d1 = c->d + 1;
  attn_linear_desc ld;
  attn_linear_desc_init(&ld, rows, n, 1, 1, d1, 1, ATTN_FEATURE_IDENTITY);
  ld.mask = attn_mask_full();
  ld.normalize = 0;
  float *k = an_alloc(n * d1 * 4), *q = an_alloc(rows * d1 * 4), *S = an_alloc(rows * 4);
  an_acc acc[NB] = {{0}};
  int ok = k && q && S;
  for (size_t r = 0; ok && r < c->reps; r++) {
    for (size_t j = 0; j < n; j++) {
      an_fill_gauss(rng, k + j * d1, c->d, 0, c->sigma);
      k[j * d1 + c->d] = 1;
    }
    for (size_t i = 0; ok && i < NB; i++) {
      for (size_t row = 0; row < rows; row++) {
        an_direction(rng, q + row * d1, c->d, 1 / c->sigma); /* gamma = sigma |q| = 1 */
        q[row * d1 + c->d] = (float)lin_b[i];
      }
      double m = matrix_S(doc, &ld, q, k, NULL, S, rows, ws);
      ok = isfinite(m);
      an_acc_add(&acc[i], m);
    }
  }
  for (size_t i = 0; ok && i < NB; i++)
    sp_row(doc, t, "linear", "beta/gamma", lin_b[i], an_S_linear(lin_b[i], 1), an_mom_linear(lin_b[i], 1), &acc[i],
           (double)n, (double)(rows * c->reps), 0);
  free(k), free(q), free(S);
  return ok ? 0 : -1;
}

/* Non-negative linear: keys N(mean, sd^2) per coordinate, so the key features phi(k) have mean mu
 * and std s (closed.c); every row's query is a permutation of one q0, so q~ = phi(q) has the same
 * |q~|_2 / |q~|_1 in every row. Normalised (S does not see a row factor). */
typedef struct nn_point {
  attn_feature_map map;
  double mean, sd;
} nn_point;

static const nn_point nn_full[] = {
    {ATTN_FEATURE_RELU, -1, 1}, {ATTN_FEATURE_RELU, -0.5, 1}, {ATTN_FEATURE_RELU, 0, 1},  {ATTN_FEATURE_RELU, 0.5, 1},
    {ATTN_FEATURE_RELU, 1, 1},  {ATTN_FEATURE_RELU, 2, 1},    {ATTN_FEATURE_ELU1, -2, 1}, {ATTN_FEATURE_ELU1, -1, 1},
    {ATTN_FEATURE_ELU1, 0, 1},  {ATTN_FEATURE_ELU1, 1, 1},    {ATTN_FEATURE_ELU1, 2, 1},  {ATTN_FEATURE_EXP, 0, 0.25},
    {ATTN_FEATURE_EXP, 0, 0.5}, {ATTN_FEATURE_EXP, 0, 0.75},  {ATTN_FEATURE_EXP, 0, 1},
};
static const nn_point nn_quick[] = {{ATTN_FEATURE_RELU, 0, 1},
                                    {ATTN_FEATURE_RELU, 1, 1},
                                    {ATTN_FEATURE_ELU1, -1, 1},
                                    {ATTN_FEATURE_ELU1, 1, 1},
                                    {ATTN_FEATURE_EXP, 0, 0.5}};

static const char *map_name(attn_feature_map m) {
  return m == ATTN_FEATURE_RELU ? "relu" : m == ATTN_FEATURE_ELU1 ? "elu1" : "exp";
}

static int nonneg_linear(an_doc *doc, const sp_cfg *c, an_rng *rng, an_table *t, an_table *beyond, an_buf *ws) {
  const size_t n = c->n_mat, rows = c->rows_mat, d = c->d;
  const nn_point *pts = c->quick ? nn_quick : nn_full;
  const size_t np = c->quick ? sizeof nn_quick / sizeof *pts : sizeof nn_full / sizeof *pts;
  float *k = an_alloc(n * d * 4), *q = an_alloc(rows * d * 4), *q0 = an_alloc(d * 4), *S = an_alloc(rows * 4);
  int ok = k && q && q0 && S;
  if (ok) an_fill_gauss(rng, q0, d, 0, 1);
  for (size_t i = 0; ok && i < np; i++) {
    attn_linear_desc ld;
    attn_linear_desc_init(&ld, rows, n, 1, 1, d, 1, pts[i].map);
    ld.mask = attn_mask_full();
    ld.scale = 1; /* exp: phi(x) = exp(x) */
    an_acc acc = {0};
    for (size_t r = 0; ok && r < c->reps; r++) {
      an_fill_gauss(rng, k, n * d, pts[i].mean, pts[i].sd);
      for (size_t row = 0; row < rows; row++) {
        memcpy(q + row * d, q0, d * 4);
        an_shuffle(rng, q + row * d, d);
      }
      double m = matrix_S(doc, &ld, q, k, NULL, S, rows, ws);
      ok = isfinite(m);
      an_acc_add(&acc, m);
    }
    double cf[1024], l1 = 0, l2 = 0, mu, s;
    for (size_t f = 0; f < d; f++) cf[f] = an_feature(pts[i].map, q0[f]), l1 += cf[f], l2 += cf[f] * cf[f];
    an_mom m = an_mom_nonneg(pts[i].map, pts[i].mean, pts[i].sd, cf, d, &mu, &s);
    double closed = an_S_nonneg(mu, s, sqrt(l2), l1);
    an_check(doc, fabs(closed / an_theory_of(m, 1).S - 1) < 1e-9, "%s closed form against its moments",
             map_name(pts[i].map));
    char param[64];
    snprintf(param, sizeof param, "mu/s; keys mean %g sd %g", pts[i].mean, pts[i].sd);
    if (ok)
      sp_row(doc, reachable(m, (double)n) ? t : beyond, map_name(pts[i].map), param, mu / s, closed, m, &acc, (double)n,
             (double)(rows * c->reps), 0);
  }
  free(k), free(q), free(q0), free(S);
  return ok ? 0 : -1;
}

/* Decay: a RetNet-style scalar gate, log gamma = log lambda, with d = 1 and q = k = 1 (identity
 * map, un-normalised, causal), so row i's weights are lambda^(i - j), j <= i: one call gives
 * every n up to n_decay (row n - 1 sees n keys). Exact: no sampling. */
static int decay(an_doc *doc, const sp_cfg *c, an_table *t, an_buf *ws) {
  static const double lambdas[] = {0.5, 0.9, 0.99, 0.999};
  const size_t n = c->n_decay;
  float *one = an_alloc(n * 4), *S = an_alloc(n * 4);
  int ok = one && S;
  for (size_t i = 0; i < n && ok; i++) one[i] = 1;
  for (size_t l = 0; ok && l < 4; l++) {
    attn_linear_desc ld;
    attn_linear_desc_init(&ld, n, n, 1, 1, 1, 1, ATTN_FEATURE_IDENTITY);
    ld.normalize = 0;
    ld.gate = ATTN_GATE_SCALAR;
    ld.gate_layout.row_stride = 0; /* one lambda for every token */
    float lg = (float)log(lambdas[l]);
    ok = isfinite(matrix_S(doc, &ld, one, one, &lg, S, n, ws));
    char setting[32];
    snprintf(setting, sizeof setting, "decay %g", lambdas[l]);
    for (size_t m = 1; ok && m <= n; m *= 4) {
      an_acc acc = {0};
      an_acc_add(&acc, S[m - 1]);
      sp_row(doc, t, setting, "n", (double)m, an_S_decay(exp((double)lg), (double)m), an_mom_softmax(0), &acc,
             (double)m, 1, 1);
    }
  }
  free(one), free(S);
  return ok ? 0 : -1;
}

int an_sparsity(const an_opts *o, an_doc *doc) {
  sp_cfg c = {65536, 32, 4096, 64, 4096, 32, 16, 1.0, o->quick};
  if (o->quick) c = (sp_cfg){16384, 16, 1024, 32, 1024, 8, 16, 1.0, 1};
  an_doc_init(doc, "sparsity", "Sparsity S = E|a| / sqrt(E a^2): seed 000's closed forms against attn's kernels");
  an_rng rng;
  an_rng_seed(&rng, o->seed);
  an_buf ws = {0};
  an_closed_self_check(doc);
  an_table *soft = an_table_new(
      doc, "softmax", "Softmax, a_j = exp(q.k_j), keys N(0, sigma^2 I): S = exp(-sigma^2 |q|^2 / 2)", SP_COLS);
  an_table *lin = an_table_new(
      doc, "linear", "Plain linear, a_j = q.k_j + beta (identity map, un-normalised), gamma = sigma |q| = 1", SP_COLS);
  an_table *gau = an_table_new(doc, "gau", "GAU, a_j = relu(q.k_j + beta)^2, gamma = sigma |q| = 1", SP_COLS);
  an_table *nn =
      an_table_new(doc, "nonneg",
                   "Non-negative linear, a_j = phi(q).phi(k_j): S = 1 / sqrt(1 + (s |q~|_2 / (mu |q~|_1))^2)", SP_COLS);
  an_table *dec =
      an_table_new(doc, "decay", "Decay, a_j ~ lambda^(n-j) (scalar gate, q.k_j = 1): exact for finite n", SP_COLS);
  an_table *bey =
      an_table_new(doc, "beyond", "Beyond the sample's reach (Var(a^2)/E[a^2]^2 > n/100): shown, not checked", SP_COLS);
  int rc = streamed(doc, &c, &rng, soft, gau, bey); /* in this order: one stream of random numbers */
  rc |= plain_linear(doc, &c, &rng, lin, &ws);
  rc |= nonneg_linear(doc, &c, &rng, nn, bey, &ws);
  rc |= decay(doc, &c, dec, &ws);
  free(ws.p);
  an_printed_forms(doc, lin);
  snprintf(soft->note, sizeof soft->note,
           "d = %zu, scale 1, sigma = %g; each replicate draws fresh keys, and every row a fresh query direction "
           "with |q| = x / sigma (attn_softmax_stats, %zu keys a row). S here depends on sigma|q| only.",
           c.d, c.sigma, c.n_stream);
  snprintf(
      gau->note, sizeof gau->note,
      "attn_gau_stats with the scalar bias beta, scale 1, no normalisation, on the softmax run's keys (%zu a row).",
      c.n_stream);
  snprintf(lin->note, sizeof lin->note,
           "attn_matrix_stats of attn_linear (identity map, un-normalised, full mask) in d + 1 = %zu dimensions: q = "
           "(q, beta), k = (k, 1). S is symmetric in beta and never below sqrt(2/pi) = 0.798.",
           c.d + 1);
  snprintf(nn->note, sizeof nn->note,
           "x = mu/s of the key features phi(k), k ~ N(mean, sd^2) per coordinate; q0 ~ N(0, 1) drawn once (d = %zu), "
           "every row a permutation of it; normalised, full mask, attn_matrix_stats.",
           c.d);
  snprintf(dec->note, sizeof dec->note,
           "attn_linear_gated's scalar gate (row stride 0) through attn_matrix_stats: row n - 1 of one causal call "
           "of %zu tokens has the n weights lambda^(n-1-j). Exact, so the tolerance is float32's (1e-4).",
           c.n_decay);
  snprintf(bey->note, sizeof bey->note,
           "With n keys a row, the ratio's relative bias is about (3/8) Var(a^2)/E[a^2]^2 / n (delta method, "
           "'bias_pred'); for softmax Var(a^2)/E[a^2]^2 = exp(4 sigma^2 |q|^2) - 1, so n = %zu keys reach "
           "sigma|q| = %.2f only: the rows here miss the heavy tail that holds E a^2 and S comes out too large.",
           c.n_stream, sqrt(log(0.01 * (double)c.n_stream + 1) / 4));
  an_note(doc,
          "Sample: %zu replicates; softmax and GAU %zu rows x %zu keys a replicate (streamed), linear %zu rows x %zu "
          "keys (explicit matrix). "
          "se = standard error of the mean from the replicates' spread; tol: %s.",
          c.reps, c.rows_stream, c.n_stream, c.rows_mat, c.n_mat,
          "derived from the sample (|bias_pred| + 5 se, se the larger of the replicates' and the independent rows' "
          "+ 1e-4)");
  return rc ? -1 : 0;
}
