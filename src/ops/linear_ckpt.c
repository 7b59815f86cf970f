/*
 * attn_linear_checkpointed (attn.h): a causal prefill cut after every checkpoint into calls of
 * its own, the state copied after each; restoring a checkpoint and calling on the rest is then
 * the same sequence of calls, bit for bit.
 */
#include "ops/linear_internal.h"

/* The call's piece of tokens [t0, t1): the descriptor and the inputs' and output's rows. */
typedef struct lin_piece {
  attn_linear_desc d;
  const void *q;
  const float *k, *v, *lg, *beta;
  void *o;
} lin_piece;

static lin_piece lin_piece_of(const attn_linear_desc *d, const void *q, const float *k, const float *v, const float *lg,
                              const float *beta, void *o, size_t t0, size_t t1) {
  const attn_shape *s = &d->shape;
  lin_piece c = {.d = *d,
                 .q = attn_act_at(q, attn_act_size(s->q_type), s->q, t0, 0),
                 .k = k + t0 * s->k.row_stride,
                 .v = v + t0 * s->v.row_stride,
                 .lg = lg ? lg + t0 * d->gate_layout.row_stride : NULL,
                 .beta = beta ? beta + t0 * d->beta_layout.row_stride : NULL,
                 .o = (void *)attn_act_at(o, attn_act_size(s->o_type), s->o, t0, 0)};
  c.d.shape.n_q = c.d.shape.n_kv = t1 - t0;
  return c;
}

attn_status attn_linear_checkpointed(const attn_linear_desc *d, const void *q, const float *k, const float *v,
                                     const float *log_gate, const float *beta, void *o, attn_linear_state *state,
                                     const attn_checkpoints *ck, void *workspace, size_t workspace_size) {
  if (!ck || !ck->count) return attn_lin_run(d, q, k, v, log_gate, beta, o, state, workspace, workspace_size, 1);
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = attn_lin_validate(d, &sp, &p);
  if (st) return st;
  const attn_shape *s = &d->shape;
  if (!p.causal || attn_lin_windowed(d) || s->n_q != s->n_kv)
    return attn_fail(ATTN_E_BAD_ARGUMENT,
                     "checkpoints need a causal call over its own tokens (n_q = n_kv %s %zu), without window",
                     s->n_q == s->n_kv ? "=" : "!=", s->n_kv);
  if (!state) return attn_fail(ATTN_E_NULL_POINTER, "state is NULL: checkpoints continue a caller's state");
  size_t ld; /* the state's rows are the checkpoints' */
  if ((st = attn_lin_state_check(d, &p, state, &ld)) || (st = attn_lin_plan_ld(&p, ld))) return st;
  const size_t state_bytes = p.state_floats * sizeof(float);
  size_t ck_bytes;
  if ((st = attn_check_checkpoints(ck, s->n_q, state_bytes, &ck_bytes))) return st;
  for (size_t i = 0; p.xg && i < ck->count; i++) /* FLASH's state holds whole rounds only */
    if ((ck->after[i] + 1) % p.xg)
      return attn_fail(ATTN_E_BAD_ARGUMENT,
                       "ck->after[%zu] = %zu: not the last token of a round of exclusive_chunk %zu", i, ck->after[i],
                       p.xg);
  /* Every piece validated before the first runs (its workspace, gates, aliasing, state): the
   * pieces' outputs and the checkpoints overlap nothing else, so a failure writes nothing. */
  void *out[] = {o, workspace, state->data, ck->states};
  const size_t out_bytes[] = {sp.o * sp.o_elem, workspace_size, state_bytes, ck_bytes};
  if ((st = attn_check_io(&sp, q, k, v, out, out_bytes, 4)))
    return attn_fail_io("o workspace state->data ck->states", &sp, q, k, v, out, out_bytes, 4);
  const void *gin[] = {d->gate != ATTN_GATE_NONE ? log_gate : NULL, d->beta ? beta : NULL};
  size_t gin_bytes[2] = {0, 0};
  for (int which = 0; which < 2; which++)
    if (gin[which] && !attn_lin_gate_span(d, &p, which, &gin_bytes[which])) gin_bytes[which] *= sizeof(float);
  void *const ck_out[] = {ck->states};
  if ((st = attn_check_extra_inputs("log_gate beta", gin, gin_bytes, 2, "ck->states", ck_out, &ck_bytes, 1))) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, 0, 0))) return st; /* its size: checked below */
  if ((d->gate != ATTN_GATE_NONE && !log_gate) || (d->beta && !beta))
    return attn_fail(ATTN_E_NULL_POINTER, "log_gate or beta is NULL where desc asks for it");
  if ((st = attn_lin_check_gates(d, &p, d->gate != ATTN_GATE_NONE ? log_gate : NULL, d->beta ? beta : NULL))) return st;
  for (size_t i = 0, t0 = 0; i <= ck->count; i++) { /* a dry run: the checks of every piece */
    const size_t t1 = i < ck->count ? ck->after[i] + 1 : s->n_q;
    if (t1 == t0) continue;
    const lin_piece c = lin_piece_of(d, q, k, v, log_gate, beta, o, t0, t1);
    size_t need;
    if ((st = attn_linear_workspace_size(&c.d, &need))) return st;
    if (workspace_size < need)
      return attn_fail_ws("workspace_size (for a piece between checkpoints)", workspace_size, need);
    t0 = t1;
  }
  for (size_t i = 0, t0 = 0; i <= ck->count; i++) {
    const size_t t1 = i < ck->count ? ck->after[i] + 1 : s->n_q;
    if (t1 > t0) {
      const lin_piece c = lin_piece_of(d, q, k, v, log_gate, beta, o, t0, t1);
      if ((st = attn_lin_run(&c.d, c.q, c.k, c.v, c.lg, c.beta, c.o, state, workspace, workspace_size, 1)))
        return st; /* the first piece's checks are the whole call's: only it can fail */
    }
    if (i < ck->count) memcpy(ck->states + i * p.state_floats, state->data, state_bytes);
    t0 = t1;
  }
  return ATTN_OK;
}
