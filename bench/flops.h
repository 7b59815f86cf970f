/*
 * flops.h: the one place where the bench counts work. Every GFLOP/s, tokens/s and GB/s figure the
 * bench prints, writes or plots is computed from bench_cost_of() below; nothing else counts.
 *
 * Conventions (per call, one thread; --threads T multiplies by T):
 *
 *   variant                    flops                                              bytes
 *   -------------------------  -------------------------------------------------  -------------------
 *   softmax (full, causal,     P * h_q * (2 d + 2 dv)                              Q + K_vis + V_vis + O
 *   windowed, decode)          P = exact number of visible (query, key) pairs
 *                              with bottom-right alignment; 2d for q.k, 2dv for
 *                              p*v. exp, max and the row sums are not counted.
 *   linear bidirectional       h_kv * 2 n_kv m dva   (S = psi(K)^T [V 1])          Q + K + V + O
 *                            + h_q  * 2 n_q  m dva   (O = phi(Q) S)
 *   FLASH's exclusive form     the bidirectional count with n_kv the keys of complete
 *   (causal, linear part)      chunks of G (those absorbed); every query reads a state
 *   linear causal (prefill)    chunkwise, with the chunk C the library reports      Q + K + V + O
 *                              for the row's path (attn_linear_chunk_size: 48 on
 *                              AVX2 and NEON, 64 on scalar). Per chunk of c tokens:
 *                              h_q  * (c (c+1) m    QK^T, the c (c+1) / 2 causal pairs
 *                                    + c (c+1) dva  A [V 1], the same pairs
 *                                    + 2 c m dva)   Q S
 *                              (the library skips most of the zero triangle; counting
 *                              only the causal pairs keeps GFLOP/s a rate of useful work)
 *                            + h_kv * 2 c m dva     S += K^T [V 1]
 *   linear, Mamba-2's layer    the causal formulas with h_q the value heads h_kv    Q, K: one head each;
 *   (qk_shared: C and B one    (each state head computes its products from the      V, O: h_kv heads
 *   head for every head)       shared q and k rows)
 *   linear decode step         the causal formula with n = 1 (c = 1)              state read + written
 *                                                                                + q, k, v, o rows
 *   linear gated (causal       the ungated count of the same shape and path         + the log gates
 *   prefill and decode step)   (same chunk): gates are not counted (below)
 *   delta rule (attn_delta:    chunkwise (spec 8), with the chunk C the library      Q + K + V + O
 *   GDN, KDA, DeltaNet;        reports for the row's path (attn_delta_chunk_size).   + log gates + beta
 *   prefill and decode step)   Per chunk of c tokens and value head:                 + the state read
 *                              c (2 c d + c (d + dv) / 2 + c dv / 2 + 3 d dv)          and written
 *                              multiply-adds, 2 flops each (L and A as c x c        + the checkpoints
 *                              products, U, W, A Delta as half ones; Delta, Q S_0    written
 *                              and S_C as GEMMs); the solve for T, the gates and
 *                              the normalisation of q and k are not counted. A
 *                              decode step is c = 1 (3 d dv + ...: the recurrence).
 *                              Checkpoints at chunk boundaries change no chunk, so
 *                              not the count.
 *
 *   m   = feature size (= d for identity and elu1).
 *   dva = dv + 1 when normalised (the library augments V with a ones column so the same product
 *         yields z), dv when un-normalised.
 *   Feature maps (elu1's exp) and the final division are not counted.
 *   Decay and gates (attn_linear_gated: RetNet's fixed decay, a scalar or a per-feature gate per
 *   token) add work the library must do (the exp of the log gates, the cumulative decays, scaling
 *   the products and the state), but a gated call is counted with the same useful flops as the
 *   ungated form, with the chunk the ungated form uses on the path: a gated row and its ungated
 *   twin of the same shape have the same count, so their GFLOP/s compare as times do (the ratio
 *   is the cost of the gate). Its bytes add the log gates read once (n_kv h_kv floats, m per
 *   token and head for per-feature gates; one per head for a fixed decay).
 *   Bytes are the compulsory traffic: every input element read once and every output element
 *   written once (K_vis/V_vis: the key/value rows visible to at least one query), fp32. For softmax
 *   decode this is essentially the K and V cache; for the linear step it is the state.
 *   Baselines (naive attention through OpenBLAS or oneDNN, the recurrent loop) are credited with
 *   the count of the library variant they stand in for, so their GFLOP/s are effective rates
 *   (naive attention computes every masked score too); compare times.
 *   tokens = n_q (queries answered per call).
 */
#ifndef ATTN_BENCH_FLOPS_H
#define ATTN_BENCH_FLOPS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

typedef enum bench_kind {
  BENCH_SOFTMAX,     /**< attn_softmax: prefill (n_q = n_kv) or decode (n_q = 1) */
  BENCH_LINEAR,      /**< attn_linear prefill, bidirectional or causal (no incoming state) */
  BENCH_LINEAR_STEP, /**< attn_linear causal, n_q = n_kv = 1, continuing a state */
  BENCH_BLAS,        /**< baseline: sgemm, row softmax in C, sgemm (OpenBLAS) */
  BENCH_ONEDNN,      /**< baseline: matmul, softmax, matmul primitives (oneDNN) */
  BENCH_RECURRENT,   /**< baseline: one-pass recurrent loop per token (causal linear) */
  BENCH_DELTA,       /**< attn_delta prefill (n tokens, continuing a state) */
  BENCH_DELTA_STEP,  /**< attn_delta decode step: n = 1, continuing a state */
  BENCH_DELTA_LOOP   /**< baseline: the delta rule token by token, two passes over the state */
} bench_kind;

/** A delta-rule shape (attn_delta or its token loop). */
static inline int bench_kind_delta(bench_kind k) {
  return k == BENCH_DELTA || k == BENCH_DELTA_STEP || k == BENCH_DELTA_LOOP;
}

/** The shape of one measured call. */
typedef struct bench_shape {
  bench_kind kind;
  size_t n_q, n_kv, h_q, h_kv, d, dv, m;
  size_t window_left, window_right; /**< softmax and its baselines (ATTN_UNBOUNDED: no bound) */
  int causal, normalize;            /**< linear and recurrent */
  attn_feature_map map;             /**< linear and recurrent */
  size_t chunk;                     /**< causal linear: the chunk the library uses on the row's path */
  attn_gate_kind gate;              /**< causal linear and recurrent: decay or gate (ATTN_GATE_NONE: none) */
  int fixed_decay;                  /**< with a SCALAR gate: one fixed decay per head (RetNet) */
  size_t exclusive;                 /**< causal linear: FLASH's exclusive_chunk (0: none) */
  int stats;                        /**< softmax, GAU, selective: the *_stats call (per-row statistics) */
  attn_dtype kv_type;               /**< softmax: K and V's element type (ATTN_F32 unless a half or int8 row) */
  int kv_head_major;                /**< softmax: K and V [heads][n][d] (--kv-layout head), else [n][heads][d] */
  int qkv_head_major;               /**< linear and recurrent: Q, K, V and O [heads][n][d] (--linear-layout
                                         head), else [n][heads][d] */
  int options;                      /**< softmax: 1 sinks, soft cap 30 and ALiBi slopes, 2 a key-padding
                                         bias row (the options' cost; their few flops per pair are not
                                         counted) */
  int paged;                        /**< softmax: through attn_softmax_batch, the cache as pages */
  size_t seqs;                      /**< softmax: n_q rows and n_kv keys as this many equal sequences,
                                         each with its own cache (0 or 1: one sequence), in one
                                         attn_softmax_batch call */
  int seq_calls;                    /**< softmax with seqs > 1: one attn_softmax call per sequence */
  attn_dtype qo_type;               /**< softmax: Q and O's element type (ATTN_F32 unless a half row) */
  int qk_shared;                    /**< linear and recurrent: Q and K have h_q heads (Mamba-2: one, C and B
                                         shared by every head), V, O, the gates and the states h_kv; else
                                         Q and O h_q, K and V h_kv */
  /* Delta rule (bench_kind_delta): h_q = h_k key heads (q and k rows of d), h_kv = h_v value
   * heads (v and o rows of dv, gates, beta and one d x dv state each). */
  attn_delta_gate delta_gate; /**< PLAIN (DeltaNet), SCALAR (GDN), FEATURE (KDA) */
  int checkpoints;            /**< 1: a checkpoint after every chunk (attn_checkpoints) */
} bench_shape;

/** A linear shape's output heads (and states: h_kv with qk_shared, Mamba-2's) and key heads. */
static inline size_t bench_linear_out_heads(const bench_shape *s) { return s->qk_shared ? s->h_kv : s->h_q; }
static inline size_t bench_linear_k_heads(const bench_shape *s) { return s->qk_shared ? s->h_q : s->h_kv; }

typedef struct bench_cost {
  double flops, bytes, tokens;
  double kv_rows; /**< key/value rows visible to at least one query (softmax) */
} bench_cost;

/** Keys visible to query i (bottom-right alignment): [*lo, *hi]; returns their count (0: none). */
static inline size_t bench_visible_range(size_t n_q, size_t n_kv, size_t left, size_t right, size_t i, size_t *lo,
                                         size_t *hi) {
  long long p = (long long)n_kv - (long long)n_q + (long long)i;
  long long a = (left == ATTN_UNBOUNDED || (long long)left >= p) ? 0 : p - (long long)left;
  long long b =
      (right == ATTN_UNBOUNDED || p + (long long)right >= (long long)n_kv) ? (long long)n_kv - 1 : p + (long long)right;
  if (b < a) return 0;
  *lo = (size_t)a;
  *hi = (size_t)b;
  return (size_t)(b - a + 1);
}

/** Exact number of visible (query, key) pairs for one head; *kv_rows: keys visible to any query. */
static inline double bench_visible_pairs(size_t n_q, size_t n_kv, size_t left, size_t right, double *kv_rows) {
  double pairs = 0;
  size_t first = SIZE_MAX, last = 0, lo = 0, hi = 0;
  for (size_t i = 0; i < n_q; i++) {
    size_t count = bench_visible_range(n_q, n_kv, left, right, i, &lo, &hi);
    if (!count) continue;
    pairs += (double)count;
    if (lo < first) first = lo;
    if (hi > last) last = hi;
  }
  if (kv_rows) *kv_rows = first == SIZE_MAX ? 0.0 : (double)(last - first + 1);
  return pairs;
}

/** Chunkwise causal linear attention over n tokens (n_q = n_kv = n), chunk C. */
static inline double bench_linear_causal_flops(size_t n, size_t h_q, size_t h_kv, size_t m, size_t dva, size_t chunk) {
  double f = 0;
  for (size_t done = 0; done < n; done += chunk) {
    double c = (double)(n - done < chunk ? n - done : chunk);
    f += (double)h_q * (c * (c + 1) * (double)m + c * (c + 1) * (double)dva + 2 * c * (double)m * (double)dva);
    f += (double)h_kv * 2 * c * (double)m * (double)dva;
  }
  return f;
}

/** Chunkwise delta rule over n tokens, h_v value heads, chunk C (spec 8's multiply-adds, x 2). */
static inline double bench_delta_flops(size_t n, size_t h_v, size_t d, size_t dv, size_t chunk) {
  double f = 0;
  const double dk = (double)d, dvv = (double)dv;
  for (size_t done = 0; done < n; done += chunk) {
    const double c = (double)(n - done < chunk ? n - done : chunk);
    f += 2.0 * c * (2 * c * dk + c * (dk + dvv) / 2 + c * dvv / 2 + 3 * dk * dvv);
  }
  return f * (double)h_v;
}

/** Checkpoints a delta-rule prefill of n tokens writes with one after every chunk of C. */
static inline size_t bench_delta_checkpoints(size_t n, size_t chunk) { return chunk ? n / chunk : 0; }

static inline bench_cost bench_cost_of(const bench_shape *s) {
  bench_cost c = {0, 0, (double)s->n_q, (double)s->n_kv};
  const double f4 = sizeof(float);
  double q_o = (double)s->n_q * (double)s->h_q * (double)(s->d + s->dv) * (s->qo_type == ATTN_F32 ? f4 : 2.0);
  size_t dva = s->normalize ? s->dv + 1 : s->dv;
  /* linear: the output heads, and K's (Mamba-2's shape: one of each of Q and K for h_kv outputs) */
  const size_t h_out = bench_linear_out_heads(s), h_k = bench_linear_k_heads(s);
  switch (s->kind) {
    case BENCH_SOFTMAX:
    case BENCH_BLAS:
    case BENCH_ONEDNN: {
      const size_t seqs = s->seqs > 1 ? s->seqs : 1; /* each sequence its share of the rows and keys */
      double pairs = bench_visible_pairs(s->n_q / seqs, s->n_kv / seqs, s->window_left, s->window_right, &c.kv_rows);
      pairs *= (double)seqs, c.kv_rows *= (double)seqs;
      c.flops = pairs * (double)s->h_q * (double)(2 * s->d + 2 * s->dv);
      /* fp16 / bf16 K and V: 2 bytes; int8: 1 and a float scale per row; q8_0: 34 bytes per 32 */
      const double fkv = s->kv_type == ATTN_F32    ? f4
                         : s->kv_type == ATTN_I8   ? 1.0
                         : s->kv_type == ATTN_Q8_0 ? 34.0 / 32
                                                   : 2.0;
      const double rows_extra = s->kv_type == ATTN_I8 ? 2.0 * f4 : 0.0;
      c.bytes = q_o + c.kv_rows * (double)s->h_kv * ((double)(s->d + s->dv) * fkv + rows_extra);
      break;
    }
    case BENCH_LINEAR:
    case BENCH_LINEAR_STEP:
    case BENCH_RECURRENT:
      if (s->kind == BENCH_LINEAR && s->window_left != ATTN_UNBOUNDED) { /* windowed: the visible pairs */
        double pairs = bench_visible_pairs(s->n_q, s->n_kv, s->window_left, s->window_right, &c.kv_rows);
        c.flops = pairs * (double)s->h_q * (double)(2 * s->m + 2 * dva);
      } else if ((s->causal && !s->exclusive) || s->kind != BENCH_LINEAR)
        c.flops = bench_linear_causal_flops(s->n_q, h_out, s->h_kv, s->m, dva, s->chunk ? s->chunk : 1);
      else { /* bidirectional; the exclusive form absorbs its complete chunks only */
        const size_t absorbed = s->exclusive ? s->n_kv / s->exclusive * s->exclusive : s->n_kv;
        c.flops =
            2.0 * (double)s->m * (double)dva * ((double)s->h_kv * (double)absorbed + (double)s->h_q * (double)s->n_q);
      }
      if (s->map == ATTN_FEATURE_FAVOR) /* the random projections of keys and queries: W x, m x d */
        c.flops +=
            2.0 * (double)s->m * (double)s->d * ((double)s->h_kv * (double)s->n_kv + (double)s->h_q * (double)s->n_q);
      c.bytes = ((double)s->n_q * ((double)s->h_q * (double)s->d + (double)h_out * (double)s->dv) +
                 (double)s->n_kv * ((double)h_k * (double)s->d + (double)s->h_kv * (double)s->dv)) *
                f4;
      if (s->gate != ATTN_GATE_NONE) /* the log gates */
        c.bytes += (s->fixed_decay ? 1.0 : (double)s->n_kv) * (double)s->h_kv *
                   (s->gate == ATTN_GATE_FEATURE ? (double)s->m : 1.0) * f4;
      if (s->kind != BENCH_LINEAR && s->n_q == 1) /* a decode step: the state round trip */
        c.bytes += 2.0 * (double)s->h_kv * (double)s->m * (double)dva * f4;
      break;
    case BENCH_DELTA:
    case BENCH_DELTA_STEP:
    case BENCH_DELTA_LOOP: {
      const double n = (double)s->n_q, state = (double)s->h_kv * (double)s->d * (double)s->dv * f4;
      c.flops = bench_delta_flops(s->n_q, s->h_kv, s->d, s->dv, s->chunk ? s->chunk : 1);
      c.bytes = n * (double)s->h_q * 2.0 * (double)s->d * f4 + n * (double)s->h_kv * 2.0 * (double)s->dv * f4;
      c.bytes += n * (double)s->h_kv *
                 (1.0 + (s->delta_gate == ATTN_DELTA_FEATURE  ? (double)s->d
                         : s->delta_gate == ATTN_DELTA_SCALAR ? 1.0
                                                              : 0.0)) *
                 f4;          /* beta and the log gates */
      c.bytes += 2.0 * state; /* the state read and written */
      if (s->checkpoints) c.bytes += (double)bench_delta_checkpoints(s->n_q, s->chunk) * state;
      break;
    }
  }
  return c;
}

#endif
