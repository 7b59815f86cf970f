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
 * k_j or v_j of a visible key, or a non-finite incoming state of its head, makes o_i NaN. GAU:
 * a non-finite q_i, k_j or v_j of a visible key makes o_i NaN, even where relu makes the weight 0.
 */

/** Key j visible to query i under bottom-right alignment (p_i = n_kv - n_q + i), window
 * (left, right) and chunk-local width `chunk` (0: none): p_i - left <= j <= p_i + right and,
 * when chunk > 0, floor(j / chunk) == floor(p_i / chunk) (floor division, also for p_i < 0). */
int ref_visible(size_t i, size_t j, size_t n_q, size_t n_kv, size_t left, size_t right, size_t chunk);

/**
 * Row statistics of attention weights (attn.h, analysis; spec 7), in double: over the keys with
 * visible[j] != 0 (n of them), W = sum |w_j|, entropy = -sum p_j log p_j with p_j = |w_j| / W
 * (0 log 0 = 0), sparsity = W / sqrt(n sum w_j^2), count = n. Entropy and sparsity are NaN when
 * n == 0, W == 0 or a visible weight is not finite. Masked weights are never read.
 */
typedef struct ref_row_stats {
  double entropy, sparsity, count;
} ref_row_stats;
ref_row_stats ref_row_stats_of(const double *w, const unsigned char *visible, size_t n_kv);

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
  /* Options (attn.h, attn_softmax_desc; all off when zero): s = scale q.k, then
   * s = softcap tanh(s / softcap), s += alibi[h] (j - p_i), s += bias[i rs + h hs + j]; a bias of
   * -inf hides the pair; a sink per head joins every row's denominator (o = 0, lse = sink when no
   * key is visible). The error scale sabs then also counts |alibi term| + |bias| and 2 softcap. */
  const float *sinks, *alibi, *bias;
  double softcap;
  size_t bias_rs, bias_hs;
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
typedef enum ref_feature_map {
  REF_FM_IDENTITY = 0,
  REF_FM_ELU1 = 1,
  REF_FM_RELU = 2,
  REF_FM_EXP = 3,     /* exp(x'), x' = sqrt(scale) x: the "exponential maps" below */
  REF_FM_FAVOR = 4,   /* FAVOR+: exp(W x' - |x'|^2 / 2) / sqrt(m) */
  REF_FM_DSOFTMAX = 5 /* softmax(q) over features; each key feature column softmaxed over the keys */
} ref_feature_map;

/** lcm(a, b) of two counts >= 1: the state heads of linear attention, one per distinct pair of
 *  key and value heads (and gate heads, ref_gated.h). */
size_t ref_lcm(size_t a, size_t b);

/** phi(x) of the elementwise maps: identity, elu1 (x + 1 for x >= 0, exp(x) for x < 0) or relu
 *  (max(x, 0)); x itself for the exponential maps (they are not elementwise: see below). */
double ref_feature(ref_feature_map fm, double x);

/*
 * Heads: H = max(h_q, h_k, h_v) output heads; output head h reads query head h / (H / h_q), key
 * head h / (H / h_k), value head h / (H / h_v). State heads: L = lcm(h_k, h_v); output head h uses
 * state head h / (H / L), which holds key head s / (L / h_k) and value head s / (L / h_v).
 *
 * The exponential maps (exp, favor, dsoftmax) are computed from their definitions in attn.h, in
 * the exactly stabilised form the library documents, so that features far beyond float's range
 * of exp (+-150 and more) have a finite reference:
 * - x' = fl32(fl32(sqrt(scale)) * x) (the library rounds the map's input to float; the reference
 *   uses that float, so that its offsets are the library's, bit for bit, for exp);
 * - pre-exponential key features u_jf: exp x'_jf (m = d); favor (W x'_j)_f - |x'_j|^2 / 2 (W the
 *   m x d floats of favor_w, the dot products in double); dsoftmax k_jf (no scale);
 * - query features a_if: exp x'_if; favor (W q'_i)_f (its -|q'|^2 / 2 and 1 / sqrt(m) are
 *   constants of the row and cancel); dsoftmax: softmax_f(q_i) is the weight of feature f;
 * - offsets: c_if = max(c0_f if z0_f > 0, max over the keys j row i sees of u_jf) (-inf: the
 *   feature has nothing, and contributes nothing); the incoming state stores S0 and z0 scaled by
 *   exp(-c0_f), c0_f in column dv + 1;
 * - exp, favor: M_i = max_f (a_if + c_if);
 *   N_i = sum_f exp(a_if + c0_f - M_i) S0_f + sum_j sum_f exp(a_if + u_jf - M_i) v_j, D_i the same
 *   with z0_f and 1; o_i = N_i / (D_i + eps) (0 when D_i + eps == 0). Every exponent is <= 0 and
 *   D_i >= 1 when row i sees a key;
 * - dsoftmax: o_i = sum_f softmax_f(q_i) R_if with R_if = (S0_f e^(c0_f - c_if) + sum_j
 *   e^(k_jf - c_if) v_j) / (z0_f e^(c0_f - c_if) + sum_j e^(k_jf - c_if)); no scale, no eps; a
 *   feature with nothing visible contributes 0.
 * These maps are normalised only (the library rejects normalize = 0); the reference ignores
 * normalize for them.
 */
typedef struct ref_linear_problem {
  size_t n_q, n_kv, h_q, h_k, h_v, d, dv;
  ref_feature_map feature_map;
  int causal; /* 1: key j visible to query i iff j <= p_i (bottom-right); 0: all keys */
  /* Windowed linear attention (any other mask): 1: key j visible to query i iff
   * ref_visible(i, j, n_q, n_kv, left, right, chunk) (the mask of softmax attention); causal and
   * s0 are then not read (a windowed call keeps no state). 0 (what callers that leave these
   * fields out get): causal or full as above. */
  int windowed;
  size_t left, right, chunk;
  int normalize; /* 1: divide by s phi(q).z + eps */
  double eps;
  double scale; /* elementwise maps: s multiplies phi(q) (the library's default is 1); exp and
                   favor: the temperature (x' = sqrt(scale) x); dsoftmax: unused */
  const float *q, *k, *v;
  ref_layout lq, lk, lv;
  /* Optional incoming state (causal only), [L][m][dv + 2]: columns 0..dv-1 hold S0, column dv
   * holds z0, column dv + 1 the feature offset c0 (0 for the elementwise maps: ignored there),
   * the same layout as the library's state. NULL: the empty prefix. */
  const double *s0;
  size_t m;             /* feature size; 0: d (favor: pass the rows of favor_w) */
  const float *favor_w; /* favor: W, m x d floats, row-major */
} ref_linear_problem;

/**
 * o:      [n_q][H][dv] contiguous. Normalised rows whose denominator is exactly 0 (eps = 0 and no
 *         visible key) are 0.
 * oscale: [n_q][H][dv] (may be NULL): the magnitude of the terms the result sums.
 *         Elementwise maps: with A_c = sum_p |phi_p| (|S0_pc| + sum_j |psi_jp| |v_jc|) and
 *         B = sum_p |phi_p| (|z0_p| + sum_j |psi_jp|): A_c un-normalised, and
 *         (A_c + |o_c| B) / |phi.z + eps| normalised (first-order bound of the quotient).
 *         exp, favor: the same with the stabilised terms w_ijf = exp(a_if + u_jf - M_i) (and
 *         exp(a_if + c0_f - M_i) for the state), D_i + eps as the denominator.
 *         dsoftmax: sum_j omega_ij |v_jc| (+ the state's share) + |o_c|, omega_ij =
 *         sum_f softmax_f(q_i) e^(k_jf - c_if) / Z_if the weight of key j (they sum to 1 with the
 *         state's): it bounds sum_f softmax_f |R_ifc| and so the error of every R_if and of the
 *         feature weights.
 */
void ref_linear(const ref_linear_problem *p, double *o, double *oscale);

/**
 * ref_linear plus, for the exponential maps, oarg [n_q][H][dv] (may be NULL; 0 for the
 * elementwise maps): the same sums as oscale with every term weighted by the magnitude of the
 * arguments of the exponentials that make it, in units whose rounding error is u each:
 *   exp, favor:  g_ijf = |a_if| + |u_jf| + |c_if| + |M_i| (+ for favor sqrt(d) sum_t |W_ft q'_t|
 *                + sqrt(d) (sum_t |W_ft k'_t| + |k'|^2 / 2): the rounding of the float dot products
 *                of length d, which random-walk like every dot product of the suites);
 *                state terms |a_if| + |c0_f| + |c_if| + |M_i| (+ the query's dot product);
 *   dsoftmax:    |k_jf| + |c_if| per key term, |c0_f| + |c_if| per state term, and
 *                |q_if| + max_f q_if for the query's softmax; the perturbed terms of R_if move
 *                it by their weight times |v_j| + |R_if|, |R_if| bounded by Vmax_c, the largest
 *                |v_jc| (or |S0_fc| / z0_f) the row sees.
 * An absolute error of u g in an exponent is a relative error of u g in its term, so the error
 * of o that comes from the exponents is about u * oarg (tests/common/tolerances.h).
 */
void ref_linear_ex(const ref_linear_problem *p, double *o, double *oscale, double *oarg);

/**
 * The state after the call, [L][m][dv + 2].
 * Elementwise maps: s0 (or zero) plus sum over all n_kv keys of psi(k_j) v_j^T (columns
 * 0..dv-1), psi(k_j) (column dv; zero when !normalize) and the offset (column dv + 1: 0).
 * sscale (may be NULL): |S0| + sum_j |psi_jp| |v_jc| (and |z0| + sum_j |psi_jp|), same shape.
 * Exponential maps: c_f = max(c0_f if z0_f > 0, max_j u_jf over all n_kv keys),
 * S_f = S0_f exp(c0_f - c_f) + sum_j exp(u_jf - c_f) v_j, z_f the same with z0_f and 1, column
 * dv + 1 = c_f. sscale: the same sums of absolute values; for the offset column 0 for exp and
 * dsoftmax (the library's c_f is the max of the same floats: exact) and, for favor,
 * |c_f| + max_j sqrt(d) (sum_t |W_ft k'_t| + |k'_j|^2 / 2) (the library's own float dot products).
 */
void ref_linear_state(const ref_linear_problem *p, double *s, double *sscale);

/**
 * ref_linear_state plus sarg (may be NULL), same shape: the terms of sscale weighted by the
 * magnitudes of their exponents' arguments, |u_jf| + |c_f| (+ favor's sqrt(d) (sum_t |W_ft k'_t|
 * + |k'|^2 / 2)) per key, |c0_f| + |c_f| for the incoming state; 0 for the elementwise maps. For
 * favor's offset column it equals sscale.
 */
void ref_linear_state_ex(const ref_linear_problem *p, double *s, double *sscale, double *sarg);

/* ------------------------------------------------------------------------------------------ */
/* GAU relu^2 attention (ref_gau.c)                                                            */
/* ------------------------------------------------------------------------------------------ */
/* The bias kinds, the same values as the library's attn_gau_bias. */
typedef enum ref_gau_bias {
  REF_GAU_BIAS_SCALAR = 0,   /* bias_ij = beta */
  REF_GAU_BIAS_CAUSAL = 1,   /* bias_ij = table[clamp(p_i - j, 0, L - 1)] */
  REF_GAU_BIAS_TWO_SIDED = 2 /* bias_ij = table[clamp(p_i - j + L - 1, 0, 2L - 2)] */
} ref_gau_bias;

typedef struct ref_gau_problem {
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  double scale;
  size_t left, right, chunk; /* the mask (ref_visible) */
  ref_gau_bias bias;
  double beta;        /* SCALAR */
  const float *table; /* CAUSAL: L floats; TWO_SIDED: 2L - 1 */
  size_t bias_len;    /* L >= 1 for the table kinds */
  int normalize;      /* 1: t_i = 1 / (keys row i sees); 0: t_i = 1 */
  const float *q, *k, *v;
  ref_layout lq, lk, lv;
} ref_gau_problem;

/**
 * o_i = t_i sum_j relu(x_ij)^2 v_j over the keys j visible to query i (ref_visible), with
 * x_ij = scale q_i . k_j + bias_ij (p_i = n_kv - n_q + i; the relative offset p_i - j may be
 * negative under a non-causal mask), query head h reading key / value head h / (h_q / h_kv).
 * Rows with no visible key are 0; rows that see a non-finite q_i, k_j or v_j are NaN (scales 0).
 * o:      [n_q][h_q][dv] contiguous.
 * oscale: (may be NULL) t_i sum_j r_ij^2 |v_jc| (r = relu(x)): the magnitude of the terms; the
 *         roundings of the squares, of t_i, of the bias addition (u |x| = u r on a positive
 *         argument) and of the sums are relative to it.
 * oarg:   (may be NULL) t_i sum_j 2 r_ij g_ij |v_jc| with g_ij = |scale| sum_f |q_if k_jf|: an
 *         absolute error e_ij of the score moves the term by 2 r e |v| (first order), and e_ij is
 *         a few u times g_ij (the dot product of length d in fp32 and the product by the scale).
 * onear:  (may be NULL) t_i sum_j g_ij^2 |v_jc| over the visible keys whose argument is close to
 *         the relu's kink, |x_ij| <= 2^-10 g_ij: there the library's score may fall on the other
 *         side of 0 and the term's error is up to e^2 (r <= e), not 2 r e. Farther keys cannot
 *         change side under any error of the bounds (a few hundred u, far below 2^-10).
 */
void ref_gau(const ref_gau_problem *p, double *o, double *oscale, double *oarg, double *onear);

/** The weight A_ij = t_i relu(x_ij)^2 of key j for query i, head h (0 when j is hidden); NaN when
 *  the row sees a non-finite q or k. */
double ref_gau_weight(const ref_gau_problem *p, size_t i, size_t h, size_t j);

/** bias_ij of query i and key j (the table lookup or beta; no mask). */
double ref_gau_bias_at(const ref_gau_problem *p, size_t i, size_t j);

#endif /* ATTN_REF_H */
