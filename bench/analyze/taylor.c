/* `approx`, part 2 (seed 001): 1 + elu(x) is exp's first-order Taylor expansion at 0, and the
 * double softmax (dsoftmax: softmax over q's features, each key feature column softmaxed over the
 * keys) differs from the exp map only in where it normalises. Both measured as the distance of
 * their attention matrices (attn_matrix, normalised, bidirectional) from the exp map's, against the
 * input scale; and the `approx` subcommand itself (this part, FAVOR+ and its crossover). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "analyze.h"

static const double tay_s_full[] = {0.0625, 0.125, 0.25, 0.5, 1, 2}, tay_s_quick[] = {0.0625, 0.125, 0.5, 1};

static int map_matrix(an_doc *doc, attn_feature_map map, size_t n, size_t d, const float *q, const float *k, float *a,
                      an_buf *ws) {
  attn_linear_desc ld;
  attn_linear_desc_init(&ld, n, n, 1, 1, d, 1, map);
  ld.mask = attn_mask_full();
  ld.scale = 1; /* exp: phi(x) = exp(x), the function 1 + elu(x) expands */
  attn_call c = {ATTN_KIND_LINEAR, &ld, q, k, NULL, NULL, NULL};
  return an_call_ok(doc, an_matrix(&c, a, n, ws), "attn_matrix (linear)");
}

/* |a - b|_F / |b - 1/n|_F: the distance measured against the reference's own departure from
 * uniform attention (every matrix here tends to uniform as the scale falls). */
static double rel_structure(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n * n; i++) {
    double e = (double)a[i] - b[i], u = (double)b[i] - 1.0 / (double)n;
    num += e * e, den += u * u;
  }
  return sqrt(num / den);
}

void an_taylor(const an_opts *o, an_doc *doc, an_rng *rng, an_buf *ws) {
  const size_t n = o->quick ? 128 : 256, d = 16, reps = o->quick ? 2 : 4;
  const double *ss = o->quick ? tay_s_quick : tay_s_full;
  const size_t ns = o->quick ? 4 : 6;
  an_table *t =
      an_table_new(doc, "taylor", "elu1 and dsoftmax against the exp map: matrix distance against input scale",
                   "input_sd,map,dist_over_exp,dist_over_structure,exp_structure");
  float *q = an_alloc(n * d * 4), *k = an_alloc(n * d * 4), *E = an_alloc(n * n * 4), *M = an_alloc(n * n * 4);
  double res[6][2][3] = {{{0}}}; /* [scale][elu1, dsoftmax][rel, structure, exp's structure] */
  static const attn_feature_map maps[2] = {ATTN_FEATURE_ELU1, ATTN_FEATURE_DSOFTMAX};
  int ok = q && k && E && M;
  for (size_t si = 0; ok && si < ns; si++)
    for (size_t r = 0; ok && r < reps; r++) {
      an_fill_gauss(rng, q, n * d, 0, ss[si]), an_fill_gauss(rng, k, n * d, 0, ss[si]);
      ok = map_matrix(doc, ATTN_FEATURE_EXP, n, d, q, k, E, ws);
      double u = 0;
      for (size_t i = 0; i < n * n; i++) u += ((double)E[i] - 1.0 / (double)n) * ((double)E[i] - 1.0 / (double)n);
      for (int mi = 0; ok && mi < 2; mi++) {
        ok = map_matrix(doc, maps[mi], n, d, q, k, M, ws);
        res[si][mi][0] += an_rel_fro(M, E, n * n) / (double)reps;
        res[si][mi][1] += rel_structure(M, E, n) / (double)reps;
        res[si][mi][2] += sqrt(u) / (double)reps; /* |1/n|_F = 1 */
      }
    }
  for (size_t si = 0; ok && si < ns; si++)
    for (int mi = 0; mi < 2; mi++) {
      an_put(t, ss[si], "%.4g");
      an_puts(t, mi ? "dsoftmax" : "elu1");
      an_put(t, res[si][mi][0], "%.3e");
      an_put(t, res[si][mi][1], "%.3e");
      an_put(t, res[si][mi][2], "%.3e");
    }
  /* Checks. 1 + x = exp(x) - x^2/2 - ...: elu1's matrix differs from exp's at second order in the
   * scale, so the distance over exp's own structure (first order) grows like the scale between
   * the two smallest scales (log-log slope 1, 0.7..1.3 accepted), and is small there. */
  double slope = log(res[1][0][1] / res[0][0][1]) / log(ss[1] / ss[0]);
  an_check(doc, ok && slope > 0.7 && slope < 1.3 && res[0][0][1] < 0.1,
           "elu1 against exp: distance %.3g at scale %g, log-log slope %.2f (first order expected)", res[0][0][1],
           ss[0], slope);
  /* dsoftmax equals the exp map when every key feature column has the same sum: close at small
   * scales, and never further than elu1 there. */
  an_check(doc, ok && res[0][1][1] < res[0][0][1], "dsoftmax against exp at scale %g: %.3g, not below elu1's %.3g",
           ss[0], res[0][1][1], res[0][0][1]);
  an_check(doc, ok && res[ns - 1][0][1] > 4 * res[0][0][1], "elu1 against exp: no growth with the scale (%.3g to %.3g)",
           res[0][0][1], res[ns - 1][0][1]);
  snprintf(t->note, sizeof t->note,
           "n = %zu, d = m = %zu, q, k ~ N(0, sd^2), normalised, bidirectional, scale 1 (exp: phi(x) = e^x), mean of "
           "%zu draws. dist_over_exp = |A - A_exp|_F / |A_exp|_F; dist_over_structure = |A - A_exp|_F / "
           "|A_exp - 1/n|_F, the distance against exp's own departure from uniform attention (both tend to uniform "
           "as sd falls); exp_structure = |A_exp - 1/n|_F / |1/n|_F. elu1: %.3g at sd %g, %.3g at sd %g (log-log "
           "slope %.2f); dsoftmax: %.3g and %.3g.",
           n, d, reps, res[0][0][1], ss[0], res[ns - 1][0][1], ss[ns - 1], slope, res[0][1][1], res[ns - 1][1][1]);
  free(q), free(k), free(E), free(M);
}

int an_approx(const an_opts *o, an_doc *doc) {
  an_doc_init(doc, "approx", "FAVOR+ and the feature maps against softmax and exp (seed 001)");
  an_rng rng;
  an_rng_seed(&rng, o->seed + 3);
  an_buf ws = {0};
  an_favor_error(o, doc, &rng, &ws);
  an_taylor(o, doc, &rng, &ws);
  if (!o->quick) an_favor_crossover(o, doc, &rng, &ws); /* timing: the full run only */
  free(ws.p);
  an_note(doc,
          "Performer's m = 4d is a rank argument (rank <= m, the `rank` subcommand); here the approximation "
          "itself. The crossover is timed in the full run only (never checked).");
  return 0;
}
