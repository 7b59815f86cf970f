/*
 * Float64 reference of decayed and gated causal linear attention (attn_linear_gated; spec
 * VARIANTS.md section 4), written from the definition, naively: every output element is an
 * explicit sum over the keys its query sees, each key's decay the exponential of the sum of the
 * log gates between it and the query, computed in double directly for every (key, query) pair.
 * No chunkwise form, no recurrence, no cumulative sum over the sequence. It does not include
 * <attn.h> (layouts and feature maps are the reference's own types, attn_ref.h).
 *
 * Definition. Heads H = max(h_q, h_k, h_v, h_g) (h_g = 0: H); output head h reads query head
 * h / (H / h_q), key head h / (H / h_k), value head h / (H / h_v), gate head h / (H / h_g).
 * Query i sits at p_i = n_kv - n_q + i and sees keys j <= p_i. phi = psi = the elementwise map
 * (identity, elu1, relu; m = d); s = scale. Log gates lg(t, g) (SCALAR: element t rs + g hs;
 * FEATURE: lg(t, g, f) at t rs + g hs + f; NONE: 0). beta_j = beta(t, g) or 1.
 *   D_f(j, p)  = exp(sum_{t=j+1..p} lg(t, f))            (per feature f for FEATURE gates)
 *   Ds_f(p)    = exp(sum_{t=0..p} lg(t, f))  for p >= 0, 1 for p < 0 (the incoming state's decay)
 *   o_i = s sum_f phi_f(q_i) [Ds_f(p_i) S0_f + sum_{j<=p_i} beta_j D_f(j, p_i) psi_f(k_j) v_j]
 *   normalised: divided by s sum_f phi_f(q_i) [Ds_f(p_i) z0_f + sum_j beta_j D_f(j, p_i) psi_f(k_j)]
 *   + eps; an exact 0 denominator gives 0. Non-finite inputs (attn.h): a row whose q_i, a k_j or
 *   v_j with j <= p_i, or its head's incoming state holds a NaN or an infinity is NaN (every key
 *   j <= p_i is visible, whatever its decay); the state is left to double arithmetic.
 * State heads L = lcm(h_k, h_v, h_g); output head h uses state head h / (H / L), which holds key
 * head s / (L / h_k), value head s / (L / h_v), gate head s / (L / h_g); each is m rows of
 * dv + 2 doubles: S | z | offset (0 for these maps), the library's state layout.
 *
 * ERROR SCALES (tests/ops/check_linear_gates.c states the tolerances built on them). For every
 * term x of a sum (a key j's phi_f beta_j D_f psi_f v_jc, or the state's phi_f Ds_f S0_fc):
 *   abs:  sum |x|                         (the rounding of the products and sums themselves);
 *   log:  sum |x| Lambda                  (the rounding of the log-gate arguments of exp);
 *   step: sum |x| steps                   (one exp and one product per gate application);
 *   tiny: sum |x| over the terms whose decay is below 2^-126 (lost to a flushing float exp).
 * With L_jp = -sum_{t=j+1..p} lg (>= 0), G(j) = sum |lg(t)| over the `chunk` tokens up to and
 * including j (a bound on the magnitude of a chunk-local cumulative sum at j, wherever the chunk
 * starts), and n_jp = min(p - j, chunk) (the additions between j and p within a chunk):
 *   Lambda_jp = sqrt(n_jp) (G(j) + L_jp) + L_jp  for j < p, 0 for j = p (b_p - b_p is exact);
 *   steps_jp  = (p - j) / step_chunk + 2         for j < p, 1 for j = p;
 *   the incoming state at p >= 0: Lambda = sqrt(min(p + 1, chunk)) L_s + L_s with
 *   L_s = -sum_{t=0..p} lg, steps = (p + 1) / step_chunk + 2; at p < 0 (S0 undecayed): 0 and 0.
 * Gate NONE: Lambda = steps = 0. Normalised rows: each of the four is (N + |o| Z) / |den|, N the
 * numerator's sum and Z the denominator's (first-order bound of a quotient), like ref_linear.
 */
#ifndef ATTN_REF_GATED_H
#define ATTN_REF_GATED_H

#include <stddef.h>

#include "attn_ref.h"

typedef enum ref_gate_kind { REF_GATE_NONE = 0, REF_GATE_SCALAR = 1, REF_GATE_FEATURE = 2 } ref_gate_kind;

typedef struct ref_gated_problem {
  size_t n_q, n_kv, h_q, h_k, h_v, h_g, d, dv; /* h_g 0: H */
  ref_feature_map feature_map;                 /* identity, elu1 or relu */
  int normalize;
  double eps, scale;
  const float *q, *k, *v;
  ref_layout lq, lk, lv;
  ref_gate_kind gate;
  const float *log_gate; /* gate != NONE */
  ref_layout lg;
  const float *beta; /* NULL: every beta is 1 */
  ref_layout lb;
  const double *s0; /* incoming state [L][m][dv + 2], NULL: the empty prefix */
  /* The error model only (they do not change o): the widest chunk of the computation (the window
   * of G) and the narrowest one (1 for token-by-token decode); 0 is taken as 1. */
  size_t chunk, step_chunk;
} ref_gated_problem;

/** The error scales of a result, each of its shape; any may be NULL. */
typedef struct ref_gated_scales {
  double *abs, *log, *step;
  double *tiny;  /* sum |x| over the terms whose decay is below 2^-126 (FLT_MIN): a float exp that
                    flushes below e^-87.33 may drop them entirely */
  double *floor; /* what an absolute error of the sums becomes in the result: 1, or for a quotient
                    (1 + |o|) / |den + eps| (a numerator and a denominator in float's subnormal
                    range give a quotient far above it; not for ref_gated_state) */
} ref_gated_scales;

/** Output heads H = max(h_q, h_k, h_v, h_g). Without gate and beta h_g is not used. */
size_t ref_gated_heads(const ref_gated_problem *p);
/** State heads L = lcm(h_k, h_v, h_g) (h_g 0: H); lcm(h_k, h_v) without gate and beta. */
size_t ref_gated_state_heads(const ref_gated_problem *p);

/** o [n_q][H][dv] and its error scales (sc may be NULL). */
void ref_gated(const ref_gated_problem *p, double *o, const ref_gated_scales *sc);

/**
 * The state after the call, [L][m][dv + 2]: S_f = Ds_f(n_kv - 1) S0_f + sum_j beta_j
 * D_f(j, n_kv - 1) psi_f(k_j) v_j, z likewise (0 when not normalised), offset 0, and its error
 * scales (sc may be NULL) with p = n_kv - 1.
 */
void ref_gated_state(const ref_gated_problem *p, double *s, const ref_gated_scales *sc);

#endif /* ATTN_REF_GATED_H */
