/*
 * Float64 reference for the attn test suites.
 *
 * Written directly from the definitions in include/attn.h, naively: every output element is an
 * explicit sum over the keys visible to its query, in double precision. It shares no code and no
 * algorithm with the library (no blocking, no online softmax, no chunkwise form), and it does not
 * include <attn.h>: layouts are described by its own struct. Inputs are float (as the library's);
 * every computation is in double.
 *
 * Besides the result, each function can return an ERROR SCALE per element: the magnitude that
 * floating-point rounding errors are proportional to (sums of absolute values of the terms).
 * Tolerances (tests/common/tolerances.h) are relative to these scales, never to a possibly cancelling
 * result.
 */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include <stddef.h>

/** "No bound" for a window side, the same value as the library's (SIZE_MAX). */
#define REF_UNBOUNDED ((size_t)-1)

/** Strides in elements of a [tokens][heads][width] tensor. */
typedef struct ref_layout {
  size_t row_stride;
  size_t head_stride;
} ref_layout;

/** 1 when the n floats at x are all finite. */
int ref_row_finite(const float *x, size_t n);

/*
 * The non-finite policy (the library's, attn.h): a row that uses a NaN or an infinity is NaN in
 * every output element. Softmax: a non-finite q_i, or k_j of a visible key, makes o_i and lse_i
 * NaN; a non-finite v_j of a visible key makes o_i NaN (lse_i as usual). Keys a row cannot see
 * never affect it. Merge: a NaN or +inf part LSE makes o and lse NaN; a non-finite o row of a
 * non-empty part (lse > -inf) makes o NaN; empty parts are never read. Linear: a non-finite q_i,
 * k_j or v_j of a visible key, or a non-finite incoming state of its head, makes o_i NaN.
 */

/** Key j visible to query i under bottom-right alignment (p_i = n_kv - n_q + i), window
 * (left, right) and chunk-local width `chunk` (0: none): p_i - left <= j <= p_i + right and,
 * when chunk > 0, floor(j / chunk) == floor(p_i / chunk) (floor division, also for p_i < 0). */
int ref_visible(size_t i, size_t j, size_t n_q, size_t n_kv, size_t left, size_t right, size_t chunk);

/* ------------------------------------------------------------------------------------------ */
/* Softmax attention (ref_softmax.c)                                                           */
/* ------------------------------------------------------------------------------------------ */
typedef struct ref_softmax_problem {
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  double scale;
  size_t window_left, window_right;
  size_t chunk; /* chunk-local mask width, 0: none (see ref_visible) */
  const float *q, *k, *v;
  ref_layout lq, lk, lv;
} ref_softmax_problem;

/**
 * o:      [n_q][h_q][dv] contiguous; zeros for rows with no visible key.
 * lse:    [n_q][h_q] natural-log LSE, -INFINITY for rows with no visible key (may be NULL).
 * oscale: [n_q][h_q][dv], sum_j p_ij |v_jc| (may be NULL): the error scale of o.
 * sabs:   [n_q][h_q], max over visible j of |scale| * sum_t |q_it k_jt| (may be NULL): the
 *         magnitude of the logits' own rounding errors (and of |s_ij|).
 */
void ref_softmax(const ref_softmax_problem *p, double *o, double *lse, double *oscale, double *sabs);

/**
 * Merge of partial results over disjoint key sets (ref_merge.c):
 *   M = max_c lse_c, w_c = exp(lse_c - M), o = sum_c w_c o_c / sum_c w_c, lse = M + log sum_c w_c.
 * o_parts[c]: rows x dv, row stride o_stride; lse_parts[c]: stride lse_stride.
 * o: [rows][dv] contiguous; lse: [rows]; rows whose parts are all -inf give zeros and -inf.
 * oscale [rows][dv]: sum_c w_c (1 + |x_c|) (|o_c| + |o|) / sum_c w_c with x_c = lse_c - M.
 * lscale [rows]:     1 + |lse| + sum_c w_c |x_c| / sum_c w_c (0 for -inf rows).
 * Either scale may be NULL.
 */
void ref_merge(size_t rows, size_t dv, size_t parts, const float *const *o_parts, size_t o_stride,
               const float *const *lse_parts, size_t lse_stride, double *o, double *lse, double *oscale,
               double *lscale);

/* ------------------------------------------------------------------------------------------ */
/* Linear attention (ref_linear.c)                                                             */
/* ------------------------------------------------------------------------------------------ */
typedef enum ref_feature_map { REF_FM_IDENTITY = 0, REF_FM_ELU1 = 1, REF_FM_RELU = 2 } ref_feature_map;

/** phi(x): identity, elu1 (x + 1 for x >= 0, exp(x) for x < 0) or relu (max(x, 0)). */
double ref_feature(ref_feature_map fm, double x);

/*
 * Heads: H = max(h_q, h_k, h_v) output heads; output head h reads query head h / (H / h_q), key
 * head h / (H / h_k), value head h / (H / h_v). State heads: L = lcm(h_k, h_v); output head h uses
 * state head h / (H / L), which holds key head s / (L / h_k) and value head s / (L / h_v).
 */
typedef struct ref_linear_problem {
  size_t n_q, n_kv, h_q, h_k, h_v, d, dv; /* feature size m = d for both maps */
  ref_feature_map feature_map;
  int causal;    /* 1: key j visible to query i iff j <= p_i (bottom-right); 0: all keys */
  int normalize; /* 1: divide by s phi(q).z + eps */
  double eps;
  double scale; /* s: multiplies phi(q) (the library's default is 1) */
  const float *q, *k, *v;
  ref_layout lq, lk, lv;
  /* Optional incoming state (causal only), [L][m][dv + 2]: columns 0..dv-1 hold S0, column dv
   * holds z0, column dv + 1 the feature offset (0 for identity and elu1: ignored here), the
   * same layout as the library's state. NULL: the empty prefix. */
  const double *s0;
} ref_linear_problem;

/**
 * o:      [n_q][H][dv] contiguous. Normalised rows whose denominator s phi.z + eps is exactly 0
 *         (eps = 0 and no visible key) are 0.
 * oscale: [n_q][H][dv] (may be NULL). With A_c = sum_p |phi_p| (|S0_pc| + sum_j |psi_jp| |v_jc|)
 *         and B = sum_p |phi_p| (|z0_p| + sum_j |psi_jp|): A_c un-normalised, and
 *         (A_c + |o_c| B) / |phi.z + eps| normalised (first-order bound of the quotient).
 */
void ref_linear(const ref_linear_problem *p, double *o, double *oscale);

/**
 * The state after the call: s0 (or zero) plus sum over all n_kv keys of psi(k_j) v_j^T (columns
 * 0..dv-1), psi(k_j) (column dv; zero when !normalize) and the offset (column dv + 1: 0),
 * [L][m][dv + 2].
 * sscale (may be NULL): |S0| + sum_j |psi_jp| |v_jc| (and |z0| + sum_j |psi_jp|), same shape.
 */
void ref_linear_state(const ref_linear_problem *p, double *s, double *sscale);

#endif /* ATTN_REF_H */
