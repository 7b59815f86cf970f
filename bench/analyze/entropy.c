/* `entropy`: per-row entropy and sparsity of every variant on the same inputs (q, k ~ N(0, 1)),
 * as histograms and a summary. Softmax, GAU and selective attention through their streamed
 * statistics, cross-checked against the explicit matrix's; linear attention (every map, RetNet's
 * decay) through the explicit matrix. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

#define NBINS 20
#define NVAR  13

typedef struct variant {
  const char *name, *mask;
  attn_kind kind;
  attn_feature_map map; /* LINEAR */
  int full, gate;       /* bidirectional; RetNet's gate */
} variant;

static const variant variants[NVAR] = {
    {"softmax", "causal", ATTN_KIND_SOFTMAX, 0, 0, 0},
    {"selective", "causal", ATTN_KIND_SELECTIVE, 0, 0, 0},
    {"gau", "causal", ATTN_KIND_GAU, 0, 0, 0},
    {"identity", "causal", ATTN_KIND_LINEAR, ATTN_FEATURE_IDENTITY, 0, 0},
    {"relu", "causal", ATTN_KIND_LINEAR, ATTN_FEATURE_RELU, 0, 0},
    {"elu1", "causal", ATTN_KIND_LINEAR, ATTN_FEATURE_ELU1, 0, 0},
    {"exp", "causal", ATTN_KIND_LINEAR, ATTN_FEATURE_EXP, 0, 0},
    {"favor", "causal", ATTN_KIND_LINEAR, ATTN_FEATURE_FAVOR, 0, 0},
    {"dsoftmax", "causal", ATTN_KIND_LINEAR, ATTN_FEATURE_DSOFTMAX, 0, 0},
    {"retnet", "causal", ATTN_KIND_LINEAR, ATTN_FEATURE_IDENTITY, 0, 1},
    {"softmax", "full", ATTN_KIND_SOFTMAX, 0, 1, 0},
    {"elu1", "full", ATTN_KIND_LINEAR, ATTN_FEATURE_ELU1, 1, 0},
    {"exp", "full", ATTN_KIND_LINEAR, ATTN_FEATURE_EXP, 1, 0},
};

/* The descriptors of every kind, filled for one variant. */
typedef struct descs {
  attn_softmax_desc sm;
  attn_selective_desc sel;
  attn_gau_desc gau;
  attn_linear_desc lin;
  float log_gate;
} descs;

static const void *desc_of(const variant *v, descs *ds, size_t n, size_t d) {
  attn_mask mask = v->full ? attn_mask_full() : attn_mask_causal();
  switch (v->kind) {
    case ATTN_KIND_SOFTMAX:
      attn_softmax_desc_init(&ds->sm, n, n, 1, 1, d, 1);
      ds->sm.mask = mask;
      return &ds->sm;
    case ATTN_KIND_SELECTIVE:
      attn_selective_desc_init(&ds->sel, n, n, 1, 1, d, 1);
      return &ds->sel;
    case ATTN_KIND_GAU: /* Su's form: scale 1/sqrt(d), divided by the visible count */
      attn_gau_desc_init(&ds->gau, n, n, 1, 1, d, 1);
      ds->gau.mask = mask;
      ds->gau.normalize = 1;
      return &ds->gau;
    default:
      attn_linear_desc_init(&ds->lin, n, n, 1, 1, d, 1, v->map);
      ds->lin.mask = mask;
      ds->lin.normalize = v->map != ATTN_FEATURE_IDENTITY;
      if (v->gate) {
        ds->lin.gate = ATTN_GATE_SCALAR;
        ds->lin.gate_layout.row_stride = 0;
        attn_retnet_log_decays(1, &ds->log_gate); /* lambda = 1 - 2^-5 */
      }
      return &ds->lin;
  }
}

/* The streamed statistics of softmax, selective and GAU (one call each). */
static attn_status streamed(const variant *v, const void *desc, size_t n, const float *q, const float *k,
                            const attn_row_stats *st) {
  size_t bytes = 0;
  attn_status s = v->kind == ATTN_KIND_SOFTMAX ? attn_softmax_workspace_size(desc, &bytes)
                  : v->kind == ATTN_KIND_GAU   ? attn_gau_workspace_size(desc, &bytes)
                                               : attn_selective_workspace_size(desc, &bytes);
  float *vv = an_alloc(n * 4), *o = an_alloc(n * 4), *f = an_alloc(n * 4);
  void *ws = an_alloc(bytes);
  if (s == ATTN_OK && !(vv && o && f && ws)) s = ATTN_E_NULL_POINTER;
  if (s == ATTN_OK)
    s = v->kind == ATTN_KIND_SOFTMAX ? attn_softmax_stats(desc, q, k, vv, o, NULL, st, ws, bytes)
        : v->kind == ATTN_KIND_GAU   ? attn_gau_stats(desc, q, k, vv, o, st, ws, bytes)
                                     : attn_selective_stats(desc, q, k, vv, o, NULL, f, st, ws, bytes);
  free(vv), free(o), free(f), free(ws);
  return s;
}

/* The explicit matrix's statistics of the same call (every kind). */
static attn_status matrix_stats(const variant *v, const void *desc, const descs *ds, const float *q, const float *k,
                                const attn_row_stats *st, an_buf *ws) {
  attn_call call = {v->kind, desc, q, k, v->gate ? &ds->log_gate : NULL, NULL, NULL};
  return an_matrix_stats(&call, st, ws);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Spearman's rank correlation of x and y over n pairs (average ranks for ties), in double. */
static const float *rank_key;
static int cmp_idx(const void *a, const void *b) {
  float x = rank_key[*(const size_t *)a], y = rank_key[*(const size_t *)b];
  return (x > y) - (x < y);
}
static void ranks(const float *x, size_t n, size_t *idx, double *r) {
  for (size_t i = 0; i < n; i++) idx[i] = i;
  rank_key = x;
  qsort(idx, n, sizeof *idx, cmp_idx);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && x[idx[j + 1]] == x[idx[i]]) j++;
    for (size_t k = i; k <= j; k++) r[idx[k]] = 0.5 * (double)(i + j);
    i = j + 1;
  }
}
static double spearman(const float *x, const float *y, size_t n) {
  size_t *idx = malloc(n * sizeof *idx);
  double *rx = malloc(n * sizeof *rx), *ry = malloc(n * sizeof *ry), sxy = 0, sxx = 0, syy = 0,
         m = 0.5 * (double)(n - 1);
  if (idx && rx && ry) {
    ranks(x, n, idx, rx), ranks(y, n, idx, ry);
    for (size_t i = 0; i < n; i++)
      sxy += (rx[i] - m) * (ry[i] - m), sxx += (rx[i] - m) * (rx[i] - m), syy += (ry[i] - m) * (ry[i] - m);
  }
  free(idx), free(rx), free(ry);
  return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

/* The q-quantile of the sorted finite values. */
static double quantile(const float *sorted, size_t n, double q) {
  return n ? sorted[(size_t)(q * (double)(n - 1))] : NAN;
}

/* The orderings the analysis reports, and S against H. Variant indices as in variants[]. */
static void entropy_checks(an_doc *doc, const double *s, const double *hn, const double *sa, const double *rho) {
  /* Causal rows, sparsest first: selective, GAU, softmax, elu1 by S and by H / log n alike. */
  static const int chain[] = {1, 2, 0, 5};
  for (int i = 0; i + 1 < 4; i++) {
    const int a = chain[i], b = chain[i + 1];
    an_check(doc, s[a] < s[b] && hn[a] < hn[b], "%s (S %.3f, H/log n %.3f) not sparser than %s (%.3f, %.3f)",
             variants[a].name, s[a], hn[a], variants[b].name, s[b], hn[b]);
  }
  /* A causal elu1 row is as dense as a bidirectional one over its keys; the mask's zeros alone make
   * the causal matrix sparser (over all n keys about 2/3 of the full matrix's S). */
  an_check(doc, fabs(s[5] - s[11]) < 0.01 && sa[5] < 0.75 * sa[11],
           "elu1 causal against full: S %.3f / %.3f over the visible keys, %.3f / %.3f over all", s[5], s[11], sa[5],
           sa[11]);
  /* S and H measure the same concentration: over rows of one length (the full mask) their ranks
   * agree almost exactly; over causal rows of lengths 1..n each is normalised differently (S's
   * floor 1/sqrt(n_i), H's ceiling log n_i), so the agreement is weaker but never reversed. */
  for (int v = 0; v < NVAR; v++)
    an_check(doc, rho[v] > (variants[v].full ? 0.9 : 0), "%s %s: Spearman(S, H / log n) = %.3f", variants[v].name,
             variants[v].mask, rho[v]);
}

int an_entropy(const an_opts *o, an_doc *doc) {
  const size_t n = o->quick ? 256 : 1024, d = 64;
  an_doc_init(doc, "entropy", "Entropy and sparsity of each variant's rows on the same inputs");
  an_table *sum =
      an_table_new(doc, "summary", "Per-row entropy H (nats) and sparsity S, every variant on the same q, k",
                   "variant,mask,rows,mean_H,mean_H_over_log_n,mean_S,S_q25,S_median,S_q75,mean_S_all_keys,"
                   "stream_vs_matrix_dS,stream_vs_matrix_dH,spearman_S_H");
  char cols[400] = "bin_lo,bin_hi";
  for (int i = 0; i < NVAR; i++)
    snprintf(cols + strlen(cols), sizeof cols - strlen(cols), ",%s%s", variants[i].name,
             variants[i].full ? "_full" : "");
  an_table *hh = an_table_new(doc, "entropy_hist", "Histogram of H / log(n_i): fraction of rows per bin", cols);
  an_table *hs = an_table_new(doc, "sparsity_hist", "Histogram of S: fraction of rows per bin", cols);
  hh->hide = hs->hide = 1;
  an_rng rng;
  an_rng_seed(&rng, o->seed + 2);
  float *q = an_alloc(n * d * 4), *k = an_alloc(n * d * 4), *H = an_alloc(n * 4), *S = an_alloc(n * 4);
  float *C = an_alloc(n * 4), *H2 = an_alloc(n * 4), *S2 = an_alloc(n * 4), *sorted = an_alloc(n * 4);
  double hist[2][NVAR][NBINS] = {{{0}}}, mean_s[NVAR] = {0}, mean_hn[NVAR] = {0}, mean_sa[NVAR] = {0}, rho_v[NVAR];
  an_buf ws = {0};
  if (!(q && k && H && S && C && H2 && S2 && sorted)) return -1;
  an_fill_gauss(&rng, q, n * d, 0, 1);
  an_fill_gauss(&rng, k, n * d, 0, 1);
  for (int vi = 0; vi < NVAR; vi++) {
    const variant *v = &variants[vi];
    descs ds;
    const void *desc = desc_of(v, &ds, n, d);
    attn_row_stats st, st2;
    attn_row_stats_init(&st, 1, H, S, C);
    attn_row_stats_init(&st2, 1, H2, S2, NULL);
    const int stream = v->kind != ATTN_KIND_LINEAR;
    if (!an_call_ok(doc, stream ? streamed(v, desc, n, q, k, &st) : matrix_stats(v, desc, &ds, q, k, &st, &ws),
                    stream ? "streamed stats" : "attn_matrix_stats"))
      continue;
    double dS = NAN, dH = NAN;
    if (stream && an_call_ok(doc, matrix_stats(v, desc, &ds, q, k, &st2, &ws), "attn_matrix_stats")) {
      dS = dH = 0;
      for (size_t i = 0; i < n; i++) dS = fmax(dS, fabs(S[i] - S2[i])), dH = fmax(dH, fabs(H[i] - H2[i]));
      an_check(doc, dS <= 1e-4 && dH <= 1e-3, "%s %s: streamed and matrix statistics differ by %.2g (S), %.2g (H)",
               v->name, v->mask, dS, dH);
    }
    double mh = 0, mhn = 0, ms = 0, msa = 0;
    size_t rows = 0, rows_h = 0, pairs = 0;
    for (size_t i = 0; i < n; i++) /* S against H / log n_i over the rows with 2 keys or more */
      if (isfinite(S[i]) && C[i] >= 2) S2[pairs] = S[i], H2[pairs++] = (float)(H[i] / log(C[i]));
    const double rho = spearman(S2, H2, pairs);
    for (size_t i = 0; i < n; i++) {
      if (!isfinite(S[i])) continue;
      sorted[rows++] = S[i];
      ms += S[i], mh += H[i], msa += S[i] * sqrt(C[i] / (double)n);
      hist[1][vi][(int)fmin(NBINS - 1, S[i] * NBINS)] += 1;
      if (C[i] >= 2) {
        double hn = H[i] / log(C[i]);
        mhn += hn, rows_h++;
        hist[0][vi][(int)fmin(NBINS - 1, fmax(0, hn) * NBINS)] += 1;
      }
    }
    for (int b = 0; b < NBINS; b++) hist[0][vi][b] /= (double)rows_h, hist[1][vi][b] /= (double)rows;
    qsort(sorted, rows, sizeof *sorted, cmp_float);
    an_puts(sum, v->name);
    an_puts(sum, v->mask);
    an_put(sum, (double)rows, "%.0f");
    an_put(sum, mh / (double)rows, "%.3f");
    an_put(sum, mhn / (double)rows_h, "%.3f");
    an_put(sum, ms / (double)rows, "%.3f");
    an_put(sum, quantile(sorted, rows, 0.25), "%.3f");
    an_put(sum, quantile(sorted, rows, 0.5), "%.3f");
    an_put(sum, quantile(sorted, rows, 0.75), "%.3f");
    an_put(sum, msa / (double)rows, "%.3f");
    an_put(sum, dS, "%.1e");
    an_put(sum, dH, "%.1e");
    an_put(sum, rho, "%.3f");
    mean_s[vi] = ms / (double)rows, mean_hn[vi] = mhn / (double)rows_h, mean_sa[vi] = msa / (double)rows;
    rho_v[vi] = rho;
  }
  entropy_checks(doc, mean_s, mean_hn, mean_sa, rho_v);
  for (int b = 0; b < NBINS; b++)
    for (int h = 0; h < 2; h++) {
      an_table *t = h ? hs : hh;
      an_put(t, (double)b / NBINS, "%.2f");
      an_put(t, (double)(b + 1) / NBINS, "%.2f");
      for (int vi = 0; vi < NVAR; vi++) an_put(t, hist[h][vi][b], "%.3f");
    }
  free(q), free(k), free(H), free(S), free(C), free(H2), free(S2), free(sorted), free(ws.p);
  snprintf(sum->note, sizeof sum->note,
           "n = %zu tokens, d = 64, q, k ~ N(0, 1) shared by every variant, one head. Softmax, selective (head 0 "
           "selecting) and GAU (Su's form: scale 1/sqrt(d), divided by the count) at scale 1/sqrt(d), through their "
           "streamed statistics (stream_vs_matrix: the largest difference from attn_matrix_stats on the same call); "
           "linear attention (identity un-normalised, the other maps normalised, exp and favor at scale 1/sqrt(d), "
           "favor m = 4d; retnet: identity with the scalar decay 1 - 2^-5) through attn_matrix_stats. H / log n_i "
           "is 1 for a uniform row; S over the visible keys is in [1/sqrt(n_i), 1]; mean_S_all_keys counts the masked "
           "keys as zeros (S sqrt(n_i / n)).",
           n);
  return 0;
}
