/*
 * Float64 reference of selective attention (attn.h "Selective attention", spec section 6), written
 * from the definition and the paper's pseudo-code (Leviathan, Kalman, Matias 2024), independently
 * of the library: no blocking, no online softmax, no running column sums.
 *
 * With positions p (query, p_i = n_kv - n_q + i) and j (key), s^(h)_pj = scale q_p^(h) . k_j (key
 * head h / (h_q / h_kv)):
 *   S_kj = relu(s^(h_sel)_kj) for 0 < j < k, else 0;
 *   F_pj = sum_{j < k < p} S_kj;
 *   o_p^(h) = sum_{j <= p} softmax_j(s^(h)_pj - F_pj) v_j^(h), lse_p^(h) = log sum_j exp(s - F).
 * F is built as the pseudo-code does: the S matrix of the call's queries (head h_sel, masked:
 * zero where j = 0 or j >= p), shifted down one row (its first row is the carried state f0: the
 * column sums of the earlier queries), then summed cumulatively down the columns. relu keeps a
 * NaN (NaN scores of head h_sel reach F, as the library documents).
 *
 * ERROR SCALES (tests/common/tolerances.h, selective section). The logit of a pair is s - F:
 * besides the dot product's own rounding (a few u times g_pj = |scale| sum_t |q_t k_t|, as for
 * softmax), it carries F's: F is a float sum of up to n relu'd float dot products of head h_sel,
 * so its error is a few u times G_pj = sum_{j < k < p} g^(h_sel)_kj (relu is 1-Lipschitz: each
 * term errs by at most its score's error) plus the rounding of the running sum (u F_pj per
 * addition, random-walk over up to n additions), plus the subtraction (u |s - F|). A logit error
 * e_j moves o by sum_j p_j e_j (v_j - o) (first order), so the scales weight each key's
 * magnitudes by its probability p_j:
 *   oscale_c = sum_j p_j |v_jc|                           (the terms, as ref_softmax)
 *   oarg_c   = sum_j p_j (g_pj + G_pj) (|v_jc| + |o_c|)    (dot products behind s and F)
 *   of_c     = sum_j p_j F_pj (|v_jc| + |o_c|)             (F's own sums and the subtraction)
 *   sabs     = max_j g_pj                                  (the row maximum M, as ref_softmax)
 *   larg     = sum_j p_j (g_pj + G_pj), lf = sum_j p_j F_pj (the same for the LSE)
 * and for the returned column sums f_j: f_j itself (all terms >= 0) and fg_j = the sum of
 * g^(h_sel)_kj over the call's queries k behind it (the incoming f0 is exact: both sides read the
 * same floats).
 */
#ifndef ATTN_REF_SELECTIVE_H
#define ATTN_REF_SELECTIVE_H

#include <stddef.h>

#include "attn_ref.h"

typedef struct ref_selective_problem {
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  double scale;
  size_t h_sel; /* the selecting query head, < h_q */
  const float *q, *k, *v;
  ref_layout lq, lk, lv;
  /* The carried state: f0[j] = sum over the earlier queries k (k < n_kv - n_q) of S_kj, read for
   * the keys j < n_kv - n_q only (the call's own keys start at 0). NULL: zeros. */
  const float *f0;
} ref_selective_problem;

/* Outputs; every pointer but o may be NULL. Shapes: o, oscale, oarg, of [n_q][h_q][dv]; lse,
 * sabs, larg, lf [n_q][h_q]; f, fg [n_kv]; F [n_q][n_kv] (F_pj of query row i, 0 for hidden keys).
 * Rows that see no key: o 0, lse -inf, scales 0. */
typedef struct ref_selective_out {
  double *o, *lse;
  double *oscale, *oarg, *of;
  double *sabs, *larg, *lf;
  double *f, *fg;
  double *F;
} ref_selective_out;

/** The whole call: outputs of every query row and the column sums f the call returns. */
void ref_selective(const ref_selective_problem *p, const ref_selective_out *out);

/*
 * Attention of one query over a given set of live keys (the pruned decode of a selective cache):
 * key i of the set has its rows k[i] (h_kv heads, head stride k_head_stride) and v[i], and its
 * mask value F[i] (double; G[i] the dot-product magnitude behind it, for the scales; NULL: 0).
 * The query (h_q heads, head stride q_head_stride) sees every key of the set.
 * out: o, lse, oscale, oarg, of, sabs, larg, lf as above for the one row ([h_q][dv], [h_q]);
 * out->f[i] receives the query's selection relu(s^(h_sel)) against key i and out->fg[i] its
 * g^(h_sel) (for every key: the caller leaves out BOS and the query's own token); F unused.
 */
typedef struct ref_selective_live {
  size_t n, h_q, h_kv, d, dv;
  double scale;
  size_t h_sel;
  const float *q;
  size_t q_head_stride;
  const float *const *k;
  const float *const *v;
  size_t k_head_stride, v_head_stride;
  const double *F, *G;
} ref_selective_live;

void ref_selective_live_attend(const ref_selective_live *p, const ref_selective_out *out);

#endif /* ATTN_REF_SELECTIVE_H */
