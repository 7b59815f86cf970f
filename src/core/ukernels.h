/*
 * Micro-kernel contracts and the dispatch table. Drivers in src/core/ call micro-kernels only
 * through a table fetched once per public call. Strides are in elements. Micro-kernels never
 * allocate, never fail, and handle any size (edges included); preconditions are the callers'.
 */
#ifndef ATTN_CORE_UKERNELS_H
#define ATTN_CORE_UKERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#if defined(__GNUC__)
#define ATTN_INTERNAL __attribute__((visibility("hidden")))
#else
#define ATTN_INTERNAL
#endif

/*
 * GEMM: C[m x n] = A[m x k] * B[k x n]                                 (accumulate == 0)
 *       C[m x n] = diag(row_scale) C + A * B   (row_scale NULL: plain +=) (accumulate != 0)
 * A(i, p) = a[i * rsa + p * csa] (any strides: A is read one element at a time, broadcast, or
 * with rsa == 1 a vector of rows at a time; only A's m x k elements are read);
 * B(p, j) = b[p * ldb + j] (rows contiguous, loaded as vectors); C(i, j) = c[i * ldc + j].
 * k == 0 is allowed (C = 0, or C scaled). C must not overlap A. C may be B itself (the same
 * pointer, ldc == ldb) when k == 1: every tile loads its row of B before it stores C.
 */
typedef void attn_gemm_fn(size_t m, size_t n, size_t k, const float *a, size_t rsa, size_t csa, const float *b,
                          size_t ldb, float *c, size_t ldc, const float *row_scale, int accumulate);

/*
 * One online-softmax step over a block of transposed logits ST (nk keys x nq queries, row stride
 * ldst). Per query column c, with running max m[c] and sum l[c]:
 *   M' = max(m, max_j ST[j][c]);  alpha[c] = exp(m - M');  ST[j][c] = exp(ST[j][c] - M');
 *   l = l * alpha + sum_j ST[j][c];  m = M'.
 * masked != 0: -inf marks a masked pair (the caller wrote it after turning any -inf logit of a
 * visible pair into NaN). A column with every entry -inf and m = -inf stays m = -inf, l = 0,
 * P = 0 (alpha = 0). masked == 0: no pair is masked, and a -inf entry is treated as NaN.
 * A NaN entry, or a +inf one (exp(inf - inf)), makes that column's P and l NaN, and l stays NaN
 * in every later step: l is the driver's poison flag for rows that used a non-finite input.
 * Statistics (stats not NULL; NULL: none, at no cost): two more running sums per column,
 * q2 = stats[c] and e = stats[lds + c], of the weights p = exp(s - M) relative to the running max,
 *   q2 = alpha^2 q2 + sum_j p_j^2;   e = alpha (e - l_old (M' - m)) + sum_j p_j (s_j - M')
 * (the old terms vanish where alpha = 0; a masked or underflowing p adds 0), so that at the end
 * sum p log p = e, and the row's entropy and sparsity follow from l, q2 and e (attn.h, analysis).
 * P, m, l and alpha are the same bits with or without statistics.
 */
typedef void attn_softmax_block_fn(size_t nk, size_t nq, float *st, size_t ldst, float *m, float *l, float *alpha,
                                   float *stats, size_t lds, int masked);

/*
 * GAU's relu^2 score step on a block ST (nk keys x nq rows, stride ld), in place:
 *   ST[j][r] = relu(ST[j][r] + b)^2,  b = bias[j * bias_ld + r] (bias_ld may be negative), or
 *   beta when bias is NULL;
 * with masked != 0 a -inf pair is masked: weight 0, not counted; with masked == 0 a -inf (from a
 * non-finite input) becomes NaN; NaN stays NaN. count[r] += the pairs of column r counted.
 * Statistics (stats not NULL; NULL: none, at no cost): the weights w written (masked: 0) are
 * added to three running sums per column, stats[r] += sum w, stats[lds + r] += sum w^2 and
 * stats[2 lds + r] += sum w log w (0 log 0 = 0); ST and count are the same bits with or without.
 */
typedef void attn_gau_block_fn(size_t nk, size_t nq, float *st, size_t ld, float beta, const float *bias,
                               ptrdiff_t bias_ld, float *count, float *stats, size_t lds, int masked);

/* Element-wise feature map of rows x cols: out(r, c) = map(a * in(r, c)) with
 * out(r, c) = out[r*out_rs + c*out_cs], map identity, elu1 or relu (a = 1: exactly map(in)).
 * A non-finite input element gives NaN. */
typedef void attn_featmap_fn(attn_feature_map map, size_t rows, size_t cols, float a, const float *in, size_t in_rs,
                             float *out, size_t out_rs, size_t out_cs);

/*
 * Exponential features with per-feature offsets (the exp, favor and dsoftmax maps), rows x m;
 * u(r, f) = u[r*ldu + f] the pre-exponential features, out(r, f) = out[r*out_rs + f*out_cs]:
 *   KEYS:    out(r, f) = exp(u(r, f) - c[f]).
 *   QUERY:   per row r: when kin, run[f] = max(run[f], kin(r, f)) first (kin(r, f) = kin[r*ldk + f]);
 *            M = max_f (u(r, f) + run[f]);  out(r, f) = exp(u(r, f) + c[f] - M)  (0 when M = -inf).
 *   SOFTMAX: per row r: when kin, run[f] += kin(r, f) first; out(r, f) = softmax_f(u(r, .)) / run[f]
 *            (0 where run[f] == 0).
 *   SCALED:  out(r, f) = exp(u(r, f) + c[f] - run[r]) with run[r] given per row (0 when run[r] = -inf).
 *   MAX:     run[0] = max(run[0], max over r < rows, f < m of u(r, f) + c[f]); out and kin unused
 *            (the blocked engine's exact row offsets: u the keys' pre-features, c a query's).
 *   RANGE:   per feature f, over the rows' finite u(r, f) (NaN and infinities skipped):
 *            run[f] = max(run[f], max_r u(r, f)) and, out not NULL, out[f] = min(out[f], min_r
 *            u(r, f)); c, kin, out_rs and out_cs unused (the blocked engine's key offsets and
 *            spreads). The values are exact; a zero's sign may differ from a scalar loop's.
 * run: m floats, updated in place (running offsets or denominators), rows floats for SCALED, one
 * for MAX; c: m floats (-inf: a feature without offset, whose features are 0). A non-finite
 * u(r, f) makes out(r, f) NaN.
 */
typedef enum attn_expfeat_mode {
  ATTN_EXPF_KEYS,
  ATTN_EXPF_QUERY,
  ATTN_EXPF_SOFTMAX,
  ATTN_EXPF_SCALED,
  ATTN_EXPF_MAX,
  ATTN_EXPF_RANGE
} attn_expfeat_mode;
typedef void attn_expfeat_fn(attn_expfeat_mode mode, size_t rows, size_t m, const float *u, size_t ldu,
                             const float *kin, size_t ldk, float *run, const float *c, float *out, size_t out_rs,
                             size_t out_cs);

/*
 * One recurrent step of linear attention on a state S (m x w, row stride lds), for one query:
 *   kf NULL:  out[c] = a * va[c] + sum_p qf[p] S[p][c]      (S read only; g unused)
 *   kf given: S[p][c] = g[p] * S[p][c] + kf[p] * va[c]      (g NULL: S[p][c] is not multiplied),
 *             then out[c] = sum_p qf[p] S[p][c] on the updated S (a unused): in exact arithmetic
 *             (qf . kf) va + (qf g)^T S on S as it was, with one read of each element.
 * One pass over S. out must not overlap S.
 */
typedef void attn_linear_step_fn(size_t m, size_t w, const float *qf, const float *kf, const float *va, float a,
                                 float *s, size_t lds, float *out, const float *g);
/*
 * n recurrent steps in turn on one state (the chunkwise engine's recurrence and decode step),
 * token u's rows at qf + u m, kf + u m (m floats each), va + u ldv (w), its decays g + u m (m; with
 * gscalar, g[u] for every row; g NULL: no decay), its output at out + u ldo (w):
 *   S[p][c] = g[p] S[p][c] + kf[p] va[c],   then   out[c] = sum_p qf[p] S[p][c]
 * (S after the token's update: in exact arithmetic attn_linear_step_fn's (qf . kf) va + (qf g)^T S
 * on S before it, with one read of each state element). out must not overlap S.
 */
typedef void attn_linear_recur_fn(size_t n, size_t m, size_t w, const float *qf, const float *kf, const float *va,
                                  size_t ldv, const float *g, int gscalar, float *s, size_t lds, float *out,
                                  size_t ldo);

/* Per-feature gate factors (chunkwise engine): y[r][f] = exp(d) x[r][f] for r < rows, f < m, with
 * d = (float)(a[r][f] - c[f]) (the difference in double, one rounding), negated when neg (so
 * exactly (float)(c[f] - a[r][f])); c NULL reads as 0, x NULL as 1. Row strides lda (doubles),
 * ldx and ldy (floats); y may be x with the same stride. */
typedef void attn_gate_exp_fn(size_t rows, size_t m, const double *a, size_t lda, const double *c, int neg,
                              const float *x, size_t ldx, float *y, size_t ldy);

/* y[i] = exp(x[i]) with the library's vectorised exp (the one every kernel inlines). Tests assert its
 * error bound on every path through this slot. */
typedef void attn_vexp_fn(size_t n, const float *x, float *y);
/* y[i] = log(x[i]) with the library's vectorised log (GAU's statistics inline it), for positive
 * normal x[i]; finite for 0 and subnormals; other inputs unspecified. Exposed for its tests, as
 * vexp. */
typedef void attn_vlog_fn(size_t n, const float *x, float *y);
/* Softmax's logit options (attn.h's order) over a block of scores ST (nk keys x nq query columns,
 * row stride ld), in place, one pass:
 *   the soft cap, where c > 0 (finite): x = c tanh(x / c) for finite x, through the vectorised
 *     exp: tanh y = 1 - 2 / (e^(2y) + 1), with 2y clamped to [-88, 88] (tanh 44 is 1 in float).
 *     Infinite and NaN x stay as they are (-inf is a hidden pair; +inf and NaN from non-finite
 *     inputs must still reach the row);
 *   ALiBi, where sl is not NULL: x += sl[col] ((float)(d0 + j) - tk[col]) for key row j, one
 *     multiply-add (fused where the path has FMA). With d0 + j the key's position minus the
 *     block's first token's and tk[col] the column's token offset from that token, the distance
 *     j - p_i is exact below 2^24.
 * c = 0 and sl NULL change nothing (tk is read only with sl). */
typedef void attn_logit_opts_fn(size_t nk, size_t nq, float *st, size_t ld, float c, const float *sl, const float *tk,
                                int64_t d0);
/* Rows of a matrix into the columns of a block ST (nk rows x nq columns, row stride ld), in place:
 * column c takes the nk floats x_c = x + (c / g) rs + (c % g) hs, and
 *   ATTN_TR_COPY:          ST[j][c] = x_c[j] (a transpose: GLA's query factors; g = 1, hs = 0);
 *   ATTN_TR_ADD_MASKED:    ST[j][c] += x_c[j] where ST[j][c] is not -inf (softmax's bias tensor
 *                          on a block the engine masked: -inf marks a hidden pair, which stays
 *                          -inf whatever the bias holds there, NaN and infinities included;
 *                          column c is token c / g, head c % g of its group);
 *   ATTN_TR_ADD_NAN_NINF:  the same after turning a -inf ST[j][c] into NaN (a score block the
 *                          engine did not mask: a -inf score there comes from an infinite input
 *                          and must end NaN, before a -inf bias can mean "hidden").
 * One addition per element (a scalar loop's bits); COPY never reads ST. rs and hs may be 0 (a row
 * or head broadcast); g >= 1. Reads only the nk floats of each column's row. */
typedef enum attn_transpose_mode { ATTN_TR_COPY, ATTN_TR_ADD_MASKED, ATTN_TR_ADD_NAN_NINF } attn_transpose_mode;
typedef void attn_transpose_fn(attn_transpose_mode mode, size_t nk, size_t nq, size_t g, float *st, size_t ld,
                               const float *x, size_t rs, size_t hs);

/* Windowed linear attention's score step (ops/linear.c) over a block of transposed weights ST (nk
 * keys x nq query columns, row stride ldst): per column c and key j in order,
 *   ST[j][c] = ST[j][c] == -inf ? hidden : ST[j][c] fac[c]   (fac NULL: ST[j][c] as it is),
 *   den[c] += ST[j][c],
 * hidden = 0 when masked (-inf marks a masked pair), NaN otherwise (an infinite input). Each
 * column's sum runs over the keys in order, as the scalar loop it replaces: the same bits on
 * every path. */
typedef void attn_window_block_fn(size_t nk, size_t nq, float *st, size_t ldst, const float *fac, float *den,
                                  int masked);

/* Rows element-wise (the chunkwise engine's state updates and merges, and its output rows): for
 * r < rows, c < cols, with y(r, c) = y[r * ldy + c], x(r, c) = x[r * ldx + c], A = a[r * as]
 * (a NULL: 1) and B = b[r * bs] (b NULL: 1),
 *   accumulate:   y(r, c) = A y(r, c) + B x(r, c), and with keep x(r, c) = y(r, c) as it was;
 *   otherwise:    y(r, c) = B x(r, c) (x read only; keep unused).
 * Each product and the sum are rounded on their own (no FMA), as the plain C loops they replace
 * (built without contraction) round them: the same bits on every path. A row of y must not
 * overlap a row of x, but without accumulate y may be x itself (y = x, ldy = ldx: y = B y). */
typedef void attn_rows_axpby_fn(size_t rows, size_t cols, float *y, size_t ldy, float *x, size_t ldx, const float *a,
                                size_t as, const float *b, size_t bs, int accumulate, int keep);

/* Rows copied with a finiteness test (the chunkwise engine's value rows): y(r, c) = x(r, c) for
 * r < rows, c < cols, the same bits (a row of y must not overlap a row of x; y's other elements
 * are not written). Returns 1 when every x(r, c) is finite, 0 when some is infinite or NaN (y is
 * the copy either way). */
typedef int attn_rows_copy_fn(size_t rows, size_t cols, float *y, size_t ldy, const float *x, size_t ldx);

/* Rows against a vector of their columns (the chunkwise engine's per-feature factors and offsets),
 * for r < rows, c < cols, x(r, c) = x[r * ldx + c]:
 *   SCALE: y[r * ldy + c] = x(r, c) * v[c] (y may be x with the same stride);
 *   MAX:   v[c] = x(r, c) > v[c] ? x(r, c) : v[c], row after row (a NaN x passed over, +inf
 *          taken); y unused.
 * Exactly the plain loops' values on every path. */
typedef enum attn_cols_mode { ATTN_COLS_SCALE, ATTN_COLS_MAX } attn_cols_mode;
typedef void attn_rows_cols_fn(attn_cols_mode mode, size_t rows, size_t cols, float *y, size_t ldy, const float *x,
                               size_t ldx, float *v);

/* Selective attention's F over a block of the blocked engine (spec 6): for each key row jj < jn,
 * with x_k = relu(x[jj * ldx + k * step]) (NaN kept, -0 and negatives 0) for first_jj <= k < tn
 * and 0 before,
 *   fz[jj * tn + ti] = run[jj] + x_0 + ... + x_(ti-1)   (exclusive: a token's own selection is not
 *                                                         in its F),
 * and run[jj] becomes run[jj] + x_0 + ... + x_(tn-1). first_jj = tn for row 0 when bos (BOS is
 * never masked), else d0 + jj clamped to [0, tn] (the first token that follows the key). Sums
 * are taken a vector of tokens at a time, an in-register running sum (simd/vf_*.h vf_prefix)
 * plus the carry: each path's own rounding, the same for any jn, task split or thread count. An
 * infinity or NaN reaches only later tokens of its row. fz overlaps neither x nor run.
 * y not NULL: each token's F is also subtracted from its group of step scores,
 * y[jj * ldx + ti * step + i] -= fz[jj * tn + ti] for i < step, where x must be y + c for a
 * column c < step (the blocked engine's tile of h_sel's key head, c h_sel's place in the group);
 * each element of x is read before y's element at the same address is written. */
typedef void attn_select_scan_fn(size_t jn, size_t tn, const float *x, size_t ldx, size_t step, int64_t d0, int bos,
                                 float *run, float *fz, float *y);

/* K/V element conversion (attn_shape.kv_type): rows x cols 16-bit patterns x (row stride ldx
 * elements) into fp32 y, contiguous (row stride cols). Exact on every path (every fp16 and bf16
 * value is a float): subnormals, infinities and signed zeros keep their values. x and y must not
 * overlap. f16: IEEE binary16, a NaN keeping its sign and payload, made quiet (F16C's and NEON's
 * result; the other paths set the quiet bit); bf16: the upper half of a binary32 (a 16-bit shift,
 * NaNs too). The same bits on every path (attn_f16_to_f32 / attn_bf16_to_f32 promise them). */
typedef void attn_f16_cvt_fn(size_t rows, size_t cols, const uint16_t *x, size_t ldx, float *y);
typedef void attn_bf16_cvt_fn(size_t rows, size_t cols, const uint16_t *x, size_t ldx, float *y);
/* The other way, one row (attn_f32_to_f16 / attn_f32_to_bf16): n floats x rounded to 16-bit
 * patterns y, to nearest, ties to even (fp16: overflow to infinity at 65520, subnormals rounded
 * as any value; bf16: to infinity from the midpoint above its largest value). A NaN keeps its sign
 * and its fraction's top bits, made quiet (fp16 0x7e00 | frac >> 13, bf16 0x0040 | bits >> 16):
 * hardware conversions' result. The same bits on every path (in the default rounding mode, which
 * an emulated path's subnormals rely on). x and y must not overlap. */
/* int8 K/V rows into fp32 (rows x cols floats, contiguous): i8_cvt y[r][c] = s[r lds] x[r ldx + c]
 * (ATTN_I8); q8_cvt: rows of cols / 32 q8_0 blocks, ldx in blocks (ATTN_Q8_0). Each value one
 * rounded float product, the same on every path. */
typedef void attn_i8_cvt_fn(size_t rows, size_t cols, const int8_t *x, size_t ldx, const float *s, size_t lds,
                            float *y);
typedef void attn_q8_cvt_fn(size_t rows, size_t cols, const uint8_t *x, size_t ldx, float *y);
typedef void attn_f32_f16_cvt_fn(size_t n, const float *x, uint16_t *y);
typedef void attn_f32_bf16_cvt_fn(size_t n, const float *x, uint16_t *y);

/*
 * Scores and P V for few query rows (the blocked engine's decode steps, up to BLK_FEW_ROWS rows:
 * engine/blocked/) with K and V read in place, elements of type `type` (ATTN_F32, or ATTN_F16 /
 * ATTN_BF16 converted in registers exactly as attn_f16_cvt_fn's; strides count elements):
 *   few_scores: st[j * ldst + r] = sum_p K(j, p) q[r * ldq + p], K(j, p) = k[j * ldk + p]
 *               (nk keys, nq rows of d elements, vectorised along d; st overlaps neither);
 *   few_pv:     acc[r * lda + c] = s_r acc[r * lda + c] + sum_j pt[j * ldp + r] V(j, c),
 *               V(j, c) = v[j * ldv + c], s_r = alpha[r] (alpha NULL: 1, a plain +=)
 *               (nq rows, dv columns, nk keys; acc overlaps neither pt nor alpha).
 * hd (NULL: one head; ATTN_I8 needs it, for its scales) runs hd->n heads at once, head h's operands hd->(k, q, s) or hd->(p, v, a,
 * al) elements or floats after head 0's (alpha: al floats): a few keys of every head before the
 * next keys, so that heads side by side in a token's row are read in one sweep along memory, and
 * heads far apart as parallel streams. Per head, few_scores gives the same bits as a one-head
 * call; few_pv without hd is the GEMM's arithmetic per element (the sum over j in order, then
 * the scaled old value added: blocks read in place and blocks converted into scratch agree), with
 * hd (one head too: a head's bits do not depend on its group) it scales acc first and adds the
 * sums of short runs of keys. The engine calls them for
 * every element type, so an fp16 call and an fp32 call on the same values give the same bits.
 * nk == 0 is allowed (st untouched; acc scaled). pf: where the rows ahead are prefetched (the
 * table's few_pf, a CPU's tuning); it changes no result.
 */
typedef enum attn_few_pf {
  ATTN_FEW_PF_L1 = 0, /* into L1 (half rows of a far stride into L2) */
  ATTN_FEW_PF_L2 = 1  /* into L2 only; none for one head whose rows lie at most 128 bytes apart */
} attn_few_pf;
typedef struct attn_few_heads {
  size_t n;           /* heads (at least 1) */
  size_t k, q, s;     /* few_scores: head strides of k (elements), q and st (floats) */
  size_t p, v, a, al; /* few_pv: of pt (floats), v (elements), acc and alpha (floats) */
  const float *sc;    /* ATTN_I8: the scale of head 0's first row (k or v), row stride sld, head shd */
  size_t sld, shd;
} attn_few_heads;
typedef void attn_few_scores_fn(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nk, size_t nq,
                                size_t d, const void *k, size_t ldk, const float *q, size_t ldq, float *st,
                                size_t ldst);
/* few_scores_wide: st[j * ldst + r] = sum_p K(j, p) qt[p * ldq + r] for nq <= 32 rows (Q
 * transposed: rows in the vectors' lanes, no reduction; each score one FMA chain along p = 0 ..
 * d - 1), otherwise few_scores' contract (types, hd with hd->q the head stride of qt, bits of a
 * one-head call per head, fp16 bits = fp32 bits of the converted values). */
typedef void attn_few_scores_wide_fn(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nk, size_t nq,
                                     size_t d, const void *k, size_t ldk, const float *qt, size_t ldq, float *st,
                                     size_t ldst);
typedef void attn_few_pv_fn(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nq, size_t dv, size_t nk,
                            const float *pt, size_t ldp, const void *v, size_t ldv, float *acc, size_t lda,
                            const float *alpha);
/* few_fused: a decode step's unmasked key block for one query row of each of hd->n heads (NULL:
 * one) over K and V rows in place of type `type` (few_scores' and few_pv's types and strides;
 * head h's k + h hd->k: nk rows of d; v + h hd->v: nk rows of dv; q + h hd->q: its scaled row of
 * d floats; ATTN_I8: ksc and vsc the scales of head 0's first K and V rows, hd->sld and hd->shd
 * apart), the plain online-softmax step (softmax_block's, unmasked) taken every few_fused_keys
 * keys: for each run [a, a + n) of them from the first key and each head h, with rs_h = rs + h
 * hd->a and acc_h = acc + h hd->a, exactly
 *   few_scores(type, pf, NULL, n, 1, d, k_h + a ldk, ldk, q_h, d, st_h, 1);
 *   softmax_block(n, 1, st_h, 1, rs_h, rs_h + 1, rs_h + 2, stats ? rs_h + 3 : NULL, 1, 0);
 *   few_pv(type, pf, NULL, 1, dv, n, st_h, 1, v_h + a ldv, ldv, acc_h, dv, rs_h + 2);
 * (the same bits, whatever hd->n: a head's do not depend on its group; a half or int8 call the
 * fp32 call's on the converted values), the heads' scores of a run before their steps and P V
 * (one head's up to 64 keys ahead), acc in registers between the runs where one head's row
 * fits. rs_h: the row's m, l, alpha (with stats, the statistics' two sums after them); st: 64
 * hd->n floats of scratch. A key block goes through one call instead of three, a few keys at a
 * time through the scores, the step and P V (simd/fewfused_tmpl.h). */
typedef void attn_few_fused_fn(attn_dtype type, attn_few_pf pf, const attn_few_heads *hd, size_t nk, size_t d,
                               size_t dv, const void *k, size_t ldk, const void *v, size_t ldv, const float *ksc,
                               const float *vsc, const float *q, float *st, float *rs, int stats, float *acc);

/*
 * The table's slots, grouped by family: KERNEL(slot) is a pointer of type attn_<slot>_fn,
 * TUNING(slot) a size_t, each next to the kernels it tunes. The kernels and tunings of every path
 * are listed in src/ukernels.inc; core/ukernels_table.c builds one table per path from them.
 */
/* clang-format off */
#define ATTN_UKERNEL_SLOTS(KERNEL, TUNING)                                                  \
  /* GEMM; gemm_nr: its register tile's columns */                                         \
  KERNEL(gemm) TUNING(gemm_nr)                                                              \
  /* blocked score engine: score steps; query rows and keys per block */                    \
  KERNEL(softmax_block) KERNEL(gau_block) KERNEL(window_block) TUNING(q_block) TUNING(q_block_wide) TUNING(kv_block) \
  /* chunkwise engine: feature maps, one-token state step, per-feature gate factors, rows   \
     element-wise (state updates, merges, output rows), rows copied with a finiteness test  \
     (value rows), rows against a vector of columns; default causal chunk */               \
  KERNEL(featmap) KERNEL(expfeat) KERNEL(linear_step) KERNEL(linear_recur) KERNEL(gate_exp) KERNEL(rows_axpby)   \
  KERNEL(rows_copy) KERNEL(rows_cols)                                                       \
  TUNING(linear_chunk) TUNING(linear_recurrent) TUNING(delta_chunk)                                                  \
  /* vector helpers: vexp, vlog (what the kernels inline, exposed for their tests);        \
     logit_opts (softmax's cap and ALiBi, over a block of scores); transpose (rows into a   \
     block's columns: softmax's bias, GLA's query factors) */                               \
  KERNEL(vexp) KERNEL(vlog) KERNEL(logit_opts) KERNEL(transpose)                            \
  /* selective attention: F's running sums over a block of scores */                        \
  KERNEL(select_scan)                                                                       \
  /* K/V conversion of fp16 / bf16 blocks into fp32 scratch; fp32 rows to fp16 / bf16 */     \
  KERNEL(f16_cvt) KERNEL(bf16_cvt) KERNEL(i8_cvt) KERNEL(q8_cvt) KERNEL(f32_f16_cvt) KERNEL(f32_bf16_cvt)                 \
  /* few query rows: scores and P V over K/V in place (every K/V type); scores of many rows,  \
     rows in lanes, from few_wide_rows rows of a key head */                                \
  KERNEL(few_scores) KERNEL(few_scores_wide) TUNING(few_wide_rows)                          \
  KERNEL(few_pv) TUNING(few_pv_run) TUNING(few_pv_run_rows)                                 \
  /* one query row of one head over fp32 rows: scores, step and P V fused, keys per step */  \
  KERNEL(few_fused) TUNING(few_fused_keys)                                                  \
  /* their prefetch policy (attn_few_pf): the path's, then the CPU's (attn_ukernels_tune) */ \
  TUNING(few_pf)
/* clang-format on */

struct attn_ukernels {
  attn_isa isa;
#define ATTN_SLOT_KERNEL_(slot) attn_##slot##_fn *slot;
#define ATTN_SLOT_TUNING_(slot) size_t slot;
  ATTN_UKERNEL_SLOTS(ATTN_SLOT_KERNEL_, ATTN_SLOT_TUNING_)
#undef ATTN_SLOT_KERNEL_
#undef ATTN_SLOT_TUNING_
};

/* Every micro-kernel of src/ukernels.inc, declared with its slot's type (so each kernel file's
 * definition is checked against its contract). */
#define ATTN_GEMM(isa, name, mr, nr)  ATTN_INTERNAL attn_gemm_fn name;
#define ATTN_UKERNEL(isa, slot, name) ATTN_INTERNAL attn_##slot##_fn name;
#define ATTN_TUNING(isa, slot, value)
#include "ukernels.inc"
#undef ATTN_GEMM
#undef ATTN_UKERNEL
#undef ATTN_TUNING

/* Fill *t with the table of path isa: the scalar path's kernels and tunings, then those isa lists
 * (core/ukernels_table.c, compiled without ISA flags: it stores addresses and numbers and runs no
 * path's code, so it is safe on any CPU). */
ATTN_INTERNAL void attn_ukernels_init(struct attn_ukernels *t, attn_isa isa);
/* Then the tunings that depend on the CPU rather than the path (cpu: attn_cpu_features' bits):
 * on AMD's cores the few-rows kernels prefetch into L2 (few_pf). */
ATTN_INTERNAL void attn_ukernels_tune(struct attn_ukernels *t, uint32_t cpu);

#endif
