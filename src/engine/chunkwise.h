/*
 * The chunkwise engine: linear attention and everything with a matrix-valued state (the linear
 * family's feature maps today; decay, gates and FLASH's linear part plug in their own state
 * transition). Per state head (one per distinct key head / value head pair), with W = dv + 1 when
 * normalised (V is augmented with a ones column, so the products that give S also give z, and
 * phi(q).z comes out as column dv of the output) and W = dv otherwise:
 *   absorb (keys only):   Kf = psi(K_c) (C x m),  Va = [V_c | 1] (C x W),  S = T(S) + Kf^T Va
 *   query chunk:          QfT = phi(Q_c)^T (m x C), written transposed by the map
 *     causal (intra):     AT = Kf QfT (C x C, AT[j][i] = psi(k_j).phi(q_i)), masked and weighted by
 *                         the transition (zero where j > i), O = AT^T Va
 *     every query:        O (+)= QfT^T S
 *     o_i = s O[i][0:dv] / (s O[i][dv] + eps)   (un-normalised: o_i = s O[i][0:dv])
 * A one-token chunk (the recurrent decode step) uses the transition's step instead, one pass over
 * S per output head. Bottom-right alignment: with n_q < n_kv the first n_kv - n_q keys are
 * absorbed before any query; with n_q > n_kv the first n_q - n_kv queries see only the incoming
 * state. Tasks are state heads: each owns its state slab and its output heads.
 */
#ifndef ATTN_ENGINE_CHUNKWISE_H
#define ATTN_ENGINE_CHUNKWISE_H

#include "engine/featmap.h"

/* How the state moves from one token to the next: S_t = T(S_{t-1}) + psi(k_t) v_t^T. */
typedef struct attn_transition {
  /* Intra-chunk weights of queries [i0, i1) of a chunk against its keys j < i1: AT[j][i] =
   * at[j * ld + i] holds psi(k_j).phi(q_i); zero the pairs j > i and weight the others by the
   * transition between key j and query i. */
  void (*intra)(float *at, size_t ld, size_t i0, size_t i1);
  /* S (m x W, row stride lds) = T over the chunk (S) + Kf^T Va, for a chunk of cn keys
   * (Kf: cn x m rows, Va: cn x W rows). */
  void (*absorb)(const struct attn_ukernels *uk, size_t m, size_t W, size_t cn, const float *kf, const float *va,
                 float *s, size_t lds);
  /* One token: out = a va + qf^T S (S as on entry), then, when kf is not NULL, S = T(S) + kf va^T
   * (attn_linear_step_fn). */
  void (*step)(const struct attn_ukernels *uk, size_t m, size_t W, const float *qf, const float *kf, const float *va,
               float a, float *s, size_t lds, float *out);
} attn_transition;

/* Plain linear attention: T = identity. */
ATTN_INTERNAL extern const attn_transition attn_transition_identity;

typedef struct attn_chunkwise_plan {
  const attn_shape *shape;
  const attn_featmap *fm;
  const attn_transition *tr;
  int causal, normalize;
  float scale, eps;
  size_t m, W, lds, C;     /* features, augmented value width, state row stride, chunk */
  size_t heads, per;       /* state heads, output heads per state head */
  size_t qdiv, kdiv, vdiv; /* output head / qdiv = query head; state head / kdiv, / vdiv */
  size_t off_kf, off_va, off_qt, off_at, off_oc, off_s, off_fm; /* scratch layout, in floats */
  size_t scratch_bytes;                                         /* per worker */
  size_t state_floats;                                          /* heads * m * lds */
} attn_chunkwise_plan;

/* Sizes that do not depend on the path (shape validated, H given): state heads and floats. */
ATTN_INTERNAL attn_status attn_chunkwise_shape(attn_chunkwise_plan *p, const attn_shape *s, size_t H,
                                               const attn_featmap *fm, size_t m_req, int causal, int normalize,
                                               float scale, float eps, const attn_transition *tr);
/* The scratch layout for a chunk size (0: the path's default). */
ATTN_INTERNAL attn_status attn_chunkwise_plan_make(attn_chunkwise_plan *p, size_t chunk,
                                                   const struct attn_ukernels *uk);

typedef struct attn_chunkwise_io {
  const float *q, *k, *v;
  float *o;
  float *state; /* heads slabs of m x lds floats, or NULL: an empty prefix, nothing kept */
} attn_chunkwise_io;

/* Tasks of a plan: one per state head. */
static inline size_t attn_chunkwise_tasks(const attn_chunkwise_plan *p) { return p->heads; }
/* Run task `task` (a state head) with a worker's scratch (scratch_bytes, 64-byte aligned). */
ATTN_INTERNAL void attn_chunkwise_run(const attn_chunkwise_plan *p, const struct attn_ukernels *uk,
                                      const attn_chunkwise_io *io, size_t task, float *scratch);

#endif
