/* `approx`, part 1: FAVOR+ (Performer, seed 001) against softmax attention. The relative
 * Frobenius error of attn's FAVOR+ attention matrix (attn_matrix of the favor map) and of its
 * output (attn_linear) against softmax attention's (attn_matrix, attn_softmax) on the same q, k, v,
 * as the feature count m grows: orthogonal features (the library's seed source, block-orthogonal
 * rows with chi norms) and iid Gaussian ones (the caller's W), at two input scales. Then the
 * sequence length where FAVOR+ with m = 4d becomes faster than softmax attention: a measurement,
 * never checked (time depends on the machine). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "analyze.h"

static const size_t fav_m_full[] = {16, 32, 64, 128, 256, 1024}, fav_m_quick[] = {16, 64, 256};
static const double fav_sd[] = {0.5, 1};

/* FAVOR+ descriptor: bidirectional, m features, W from the library's seed (orthogonal) or w (iid). */
static attn_linear_desc favor_desc(size_t n, size_t d, size_t dv, size_t m, int iid, uint64_t seed, const float *w) {
  attn_linear_desc ld;
  attn_linear_desc_init(&ld, n, n, 1, 1, d, dv, ATTN_FEATURE_FAVOR);
  ld.mask = attn_mask_full();
  ld.m = m;
  ld.favor_source = iid ? ATTN_FAVOR_CALLER : ATTN_FAVOR_SEED_CHI;
  ld.favor_seed = seed;
  ld.favor_w = w;
  return ld;
}

void an_favor_error(const an_opts *o, an_doc *doc, an_rng *rng, an_buf *ws) {
  const size_t d = 16, dv = 16, n = o->quick ? 128 : 512, reps = o->quick ? 2 : 6;
  const size_t *ms = o->quick ? fav_m_quick : fav_m_full, nm = o->quick ? 3 : 6, mmax = ms[nm - 1];
  an_table *t = an_table_new(doc, "favor", "FAVOR+ against softmax attention: relative Frobenius error against m",
                             "input_sd,features,m,m_over_d,err_matrix,se_matrix,err_output,se_output");
  float *q = an_alloc(n * d * 4), *k = an_alloc(n * d * 4), *v = an_alloc(n * dv * 4), *w = an_alloc(mmax * d * 4);
  float *A = an_alloc(n * n * 4), *B = an_alloc(n * n * 4), *O = an_alloc(n * dv * 4), *P = an_alloc(n * dv * 4);
  an_acc acc[2][2][6][2] = {{{{{0}}}}}; /* [sd][iid][m][matrix, output] */
  int ok = q && k && v && w && A && B && O && P;
  for (size_t si = 0; ok && si < 2; si++)
    for (size_t r = 0; ok && r < reps; r++) {
      an_fill_gauss(rng, q, n * d, 0, fav_sd[si]);
      an_fill_gauss(rng, k, n * d, 0, fav_sd[si]);
      an_fill_gauss(rng, v, n * dv, 0, 1);
      attn_softmax_desc sd;
      attn_softmax_desc_init(&sd, n, n, 1, 1, d, dv); /* full mask, scale 1/sqrt(d), as favor's */
      attn_call sc = {ATTN_KIND_SOFTMAX, &sd, q, k, NULL, NULL, NULL};
      ok = an_call_ok(doc, an_matrix(&sc, A, n, ws), "attn_matrix (softmax)") &&
           an_call_ok(doc, an_softmax_out(&sd, q, k, v, O, ws), "attn_softmax");
      an_fill_gauss(rng, w, mmax * d, 0, 1); /* iid rows; the first m of them for each m */
      for (int iid = 0; ok && iid < 2; iid++)
        for (size_t mi = 0; ok && mi < nm; mi++) {
          attn_linear_desc ld = favor_desc(n, d, dv, ms[mi], iid, o->seed * 1000 + r, w);
          attn_call fc = {ATTN_KIND_LINEAR, &ld, q, k, NULL, NULL, NULL};
          ok = an_call_ok(doc, an_matrix(&fc, B, n, ws), "attn_matrix (favor)") &&
               an_call_ok(doc, an_linear_out(&ld, q, k, v, P, ws), "attn_linear (favor)");
          an_acc_add(&acc[si][iid][mi][0], an_rel_fro(B, A, n * n));
          an_acc_add(&acc[si][iid][mi][1], an_rel_fro(P, O, n * dv));
        }
    }
  for (size_t si = 0; ok && si < 2; si++)
    for (int iid = 0; iid < 2; iid++)
      for (size_t mi = 0; mi < nm; mi++) {
        an_put(t, fav_sd[si], "%.2g");
        an_puts(t, iid ? "iid" : "orthogonal");
        an_put(t, (double)ms[mi], "%.0f");
        an_put(t, (double)ms[mi] / (double)d, "%.4g");
        for (int e = 0; e < 2; e++) {
          an_put(t, acc[si][iid][mi][e].mean, "%.4f");
          an_put(t, an_acc_se(&acc[si][iid][mi][e]), "%.4f");
        }
      }
  /* The checks: the Monte Carlo error falls with m (about 1/sqrt(m) at the small scale); it is
   * larger at unit variance, where exp's heavy tail needs far more features. */
  for (int iid = 0; ok && iid < 2; iid++) {
    const char *f = iid ? "iid" : "orthogonal";
    const an_acc *lo = &acc[0][iid][0][0], *hi = &acc[0][iid][nm - 1][0];
    an_check(doc, hi->mean < 0.5 * lo->mean,
             "FAVOR+ (%s, sd 0.5): error %.3f at m = %zu, not below half of %.3f at %zu", f, hi->mean, mmax, lo->mean,
             ms[0]);
    for (size_t mi = 0; mi < nm; mi++)
      an_check(doc, acc[1][iid][mi][0].mean > acc[0][iid][mi][0].mean,
               "FAVOR+ (%s, m = %zu): error at input sd 1 (%.3f) not above sd 0.5 (%.3f)", f, ms[mi],
               acc[1][iid][mi][0].mean, acc[0][iid][mi][0].mean);
  }
  const size_t m4 = o->quick ? 1 : 2; /* m = 4d */
  snprintf(
      t->note, sizeof t->note,
      "d = %zu, n = %zu, q, k ~ N(0, sd^2), v ~ N(0, 1) (dv = %zu), bidirectional, scale 1/sqrt(d) for both; "
      "%zu replicates (fresh inputs and W). err = |A_favor - A_softmax|_F / |A_softmax|_F (matrix, attn_matrix) "
      "and |O_favor - O_softmax|_F / |O_softmax|_F (output, attn_linear against attn_softmax). At m = 4d = 64: "
      "matrix error %.3f (orthogonal) / %.3f (iid) at sd 0.5, %.3f / %.3f at sd 1; at m = %zu: %.3f / %.3f at "
      "sd 1. Checked: the error falls below half from m = %zu to %zu at sd 0.5, and is larger at sd 1 for every m.",
      d, n, dv, reps, acc[0][0][m4][0].mean, acc[0][1][m4][0].mean, acc[1][0][m4][0].mean, acc[1][1][m4][0].mean, mmax,
      acc[1][0][nm - 1][0].mean, acc[1][1][nm - 1][0].mean, ms[0], mmax);
  free(q), free(k), free(v), free(w), free(A), free(B), free(O), free(P);
}

/* The best of three timings of one call (seconds). */
static double best_time(int softmax, const attn_softmax_desc *sd, const attn_linear_desc *ld, const float *q,
                        const float *k, const float *v, float *o, an_buf *ws, attn_status *st) {
  double best = INFINITY;
  for (int r = 0; r < 3; r++) {
    double t0 = an_now();
    *st = softmax ? an_softmax_out(sd, q, k, v, o, ws) : an_linear_out(ld, q, k, v, o, ws);
    best = fmin(best, an_now() - t0);
  }
  return best;
}

void an_favor_crossover(const an_opts *o, an_doc *doc, an_rng *rng, an_buf *ws) {
  const size_t d = 64, dv = 64, nmax = o->quick ? 512 : 8192;
  an_table *t = an_table_new(doc, "crossover", "Time of softmax attention and FAVOR+ (m = 4d) against n, one head",
                             "mask,n,softmax_ms,favor_ms,favor_over_softmax");
  float *q = an_alloc(nmax * d * 4), *k = an_alloc(nmax * d * 4), *v = an_alloc(nmax * dv * 4);
  float *out = an_alloc(nmax * dv * 4);
  size_t cross[2] = {0, 0};
  if (!(q && k && v && out)) return;
  an_fill_gauss(rng, q, nmax * d, 0, 1), an_fill_gauss(rng, k, nmax * d, 0, 1), an_fill_gauss(rng, v, nmax * dv, 0, 1);
  for (int causal = 0; causal < 2; causal++)
    for (size_t n = 128; n <= nmax; n *= 2) {
      attn_softmax_desc sd;
      attn_softmax_desc_init(&sd, n, n, 1, 1, d, dv);
      attn_linear_desc ld = favor_desc(n, d, dv, 4 * d, 0, 1, NULL);
      sd.mask = ld.mask = causal ? attn_mask_causal() : attn_mask_full();
      attn_status s1, s2;
      double ts = best_time(1, &sd, &ld, q, k, v, out, ws, &s1), tf = best_time(0, &sd, &ld, q, k, v, out, ws, &s2);
      if (!an_call_ok(doc, s1, "attn_softmax") || !an_call_ok(doc, s2, "attn_linear (favor)")) break;
      an_puts(t, causal ? "causal" : "full");
      an_put(t, (double)n, "%.0f");
      an_put(t, 1e3 * ts, "%.3f");
      an_put(t, 1e3 * tf, "%.3f");
      an_put(t, tf / ts, "%.3f");
      if (tf < ts && !cross[causal]) cross[causal] = n;
      if (tf > ts) cross[causal] = 0; /* the first n from which FAVOR+ stays faster */
    }
  snprintf(t->note, sizeof t->note,
           "d = dv = 64, m = 4d = 256, one head, one thread, the best of 3 calls (attn_softmax; attn_linear with the "
           "favor map, W built from its seed at every call). FAVOR+ is faster from n = %zu (bidirectional) and n = "
           "%zu (causal) on (0: not within n <= %zu). Measured, not checked: it depends on the machine and ISA path.",
           cross[0], cross[1], nmax);
  free(q), free(k), free(v), free(out);
}
