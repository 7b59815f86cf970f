/*
 * Delta-rule attention (attn.h: attn_delta; spec 8): the descriptor, its validation, the gates'
 * values, the checkpoints, and the run on the chunkwise engine's delta transition.
 */
#include <float.h>
#include <math.h>

#include "engine/chunkwise.h"

attn_status attn_delta_desc_init(attn_delta_desc *d, size_t n, size_t h_k, size_t h_v, size_t dim, size_t dv,
                                 attn_delta_gate gate) {
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  *d = (attn_delta_desc){0};
  attn_shape_init(&d->shape, n, n, h_k, h_k, h_v, dim, dv);
  d->gate = gate;
  d->gate_layout = (attn_layout){h_v * (gate == ATTN_DELTA_FEATURE ? dim : 1), gate == ATTN_DELTA_FEATURE ? dim : 1};
  d->beta_layout = (attn_layout){h_v, 1};
  d->scale = dim ? (float)(1.0 / sqrt((double)dim)) : 1.0f;
  d->qk_l2norm = 1;
  return ATTN_OK;
}

/* The gate (beta = 0) or beta tensor: rows (1 with a row stride of 0), h_v heads of width floats. */
typedef struct dl_tensor {
  attn_layout l;
  size_t rows, width;
} dl_tensor;

static dl_tensor dl_tensor_of(const attn_delta_desc *d, int beta) {
  const attn_layout l = beta ? d->beta_layout : d->gate_layout;
  const size_t rows = l.row_stride || beta ? d->shape.n_kv : 1;
  return (dl_tensor){l, rows, !beta && d->gate == ATTN_DELTA_FEATURE ? d->shape.d : 1};
}

/* The descriptor's fields, the shape and the gate and beta layouts; spans in sp and span[2]. */
static attn_status dl_validate(const attn_delta_desc *d, attn_spans *sp, size_t span[2]) {
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  attn_status st = attn_shape_check(&d->shape, 0, sp);
  if (st) return st;
  const attn_shape *s = &d->shape;
  if (s->h_q != s->h_k || s->h_v % s->h_k)
    return attn_fail(ATTN_E_BAD_HEADS, "shape.h_q %zu, h_k %zu, h_v %zu: the delta rule needs h_q = h_k dividing h_v",
                     s->h_q, s->h_k, s->h_v);
  if (s->n_q != s->n_kv)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.n_q %zu != n_kv %zu: the call's tokens are its queries and keys",
                     s->n_q, s->n_kv);
  if (s->kv_type != ATTN_F32)
    return attn_fail(ATTN_E_BAD_DTYPE, "shape.kv_type %d: the delta rule takes ATTN_F32 K and V", (int)s->kv_type);
  if ((unsigned)d->gate > ATTN_DELTA_FEATURE)
    return attn_fail(ATTN_E_BAD_GATE, "desc.gate %d: not an attn_delta_gate", (int)d->gate);
  if (!isfinite(d->scale)) return attn_fail(ATTN_E_BAD_SCALE, "desc.scale %g: must be finite", (double)d->scale);
  if (d->qk_l2norm != 0 && d->qk_l2norm != 1)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.qk_l2norm %d: must be 0 or 1", d->qk_l2norm);
  if (d->chunk > ATTN_LINEAR_MAX_CHUNK)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.chunk %zu > ATTN_LINEAR_MAX_CHUNK %d", d->chunk, ATTN_LINEAR_MAX_CHUNK);
  span[0] = 0;
  for (int beta = d->gate == ATTN_DELTA_PLAIN; beta < 2; beta++) {
    const dl_tensor t = dl_tensor_of(d, beta);
    if ((st = attn_check_input(t.rows, s->h_v, t.width, t.l, &span[beta])))
      return attn_fail_layout(st, beta ? "desc.beta_layout" : "desc.gate_layout", beta ? NULL : "d", t.rows, s->h_v,
                              t.width, t.l);
  }
  return ATTN_OK;
}

/* Every log gate finite and <= 0, every beta finite and >= 0 (NaN fails both): the first bad one. */
static attn_status dl_check_values(const attn_delta_desc *d, const float *lg, const float *beta) {
  for (int which = lg ? 0 : 1; which < 2; which++) {
    const dl_tensor t = dl_tensor_of(d, which);
    const float *x = which ? beta : lg;
    const float lo = which ? 0.0f : -FLT_MAX, hi = which ? FLT_MAX : 0.0f;
    const int packed = t.l.head_stride == t.width && t.l.row_stride == d->shape.h_v * t.width;
    if (packed && attn_all_within(x, t.rows * d->shape.h_v * t.width, lo, hi)) continue; /* the default layouts */
    for (size_t r = 0; r < t.rows; r++)
      for (size_t h = 0; h < d->shape.h_v; h++) {
        const float *e = x + r * t.l.row_stride + h * t.l.head_stride;
        if (attn_all_within(e, t.width, lo, hi)) continue;
        for (size_t f = 0;; f++)
          if (which ? !(e[f] >= 0.0f && e[f] <= FLT_MAX) : !(e[f] <= 0.0f && e[f] >= -FLT_MAX))
            return which
                       ? attn_fail(ATTN_E_BAD_GATE, "beta[token %zu, head %zu] = %g: must be finite and >= 0", r, h,
                                   (double)e[f])
                       : attn_fail(ATTN_E_BAD_GATE, "log_gate[token %zu, head %zu, %zu] = %g: must be finite and <= 0",
                                   r, h, f, (double)e[f]);
      }
  }
  return ATTN_OK;
}

/* The validated plan of a descriptor on the active path. */
static attn_status dl_plan(const attn_delta_desc *d, attn_spans *sp, size_t span[2], attn_delta_plan *p) {
  attn_status st = dl_validate(d, sp, span);
  if (st) return st;
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
  return attn_delta_plan_make(p, &d->shape, d->gate, d->gate_layout, d->beta_layout, d->scale, d->qk_l2norm, d->chunk,
                              uk);
}

/* The sizes a plan gives: 0 state bytes, 1 workspace bytes, 2 the chunk. */
static attn_status dl_size(const attn_delta_desc *d, int which, size_t *out) {
  attn_spans sp;
  size_t span[2];
  attn_delta_plan p;
  const attn_status st = dl_plan(d, &sp, span, &p);
  if (st) return st;
  if (!out) return attn_fail(ATTN_E_NULL_POINTER, "%s is NULL", which == 2 ? "chunk" : "bytes");
  *out = which == 0 ? p.head_floats * d->shape.h_v * sizeof(float) : which == 1 ? p.scratch_bytes : p.C;
  return ATTN_OK; /* the state's bytes are checked by the plan */
}

attn_status attn_delta_state_size(const attn_delta_desc *d, size_t *bytes) { return dl_size(d, 0, bytes); }
attn_status attn_delta_workspace_size(const attn_delta_desc *d, size_t *bytes) { return dl_size(d, 1, bytes); }
attn_status attn_delta_chunk_size(const attn_delta_desc *d, size_t *chunk) { return dl_size(d, 2, chunk); }

attn_status attn_delta(const attn_delta_desc *d, const void *q, const float *k, const float *v, const float *log_gate,
                       const float *beta, void *o, float *state, const attn_checkpoints *ck, void *workspace,
                       size_t workspace_size) {
  attn_spans sp;
  size_t span[2];
  attn_delta_plan p;
  attn_status st = dl_plan(d, &sp, span, &p);
  if (st) return st;
  if (!q || !k || !v || !beta || !o || !workspace)
    return attn_fail_null("q k v beta o workspace", (const void *[]){q, k, v, beta, o, workspace});
  if (d->gate == ATTN_DELTA_PLAIN && log_gate)
    return attn_fail(ATTN_E_BAD_GATE, "log_gate given with desc.gate ATTN_DELTA_PLAIN (no decay)");
  if (d->gate != ATTN_DELTA_PLAIN && !log_gate)
    return attn_fail(ATTN_E_NULL_POINTER, "log_gate is NULL: desc.gate %d has a decay", (int)d->gate);
  const size_t state_bytes = p.head_floats * d->shape.h_v * sizeof(float);
  size_t ck_bytes = 0;
  if ((st = attn_check_checkpoints(ck, d->shape.n_q, state_bytes, &ck_bytes))) return st;
  if ((st = dl_check_values(d, log_gate, beta))) return st;
  if (workspace_size < p.scratch_bytes) return attn_fail_ws("workspace_size", workspace_size, p.scratch_bytes);
  static const char out_names[] = "o workspace state ck->states";
  void *out[] = {o, workspace, state, ck_bytes ? ck->states : NULL};
  const size_t out_bytes[] = {sp.o * sp.o_elem, workspace_size, state_bytes, ck_bytes};
  if ((st = attn_check_io(&sp, q, k, v, out, out_bytes, 4)))
    return attn_fail_io(out_names, &sp, q, k, v, out, out_bytes, 4);
  const void *gin[] = {log_gate, beta};
  const size_t gin_bytes[] = {span[0] * sizeof(float), span[1] * sizeof(float)};
  if ((st = attn_check_extra_inputs("log_gate beta", gin, gin_bytes, 2, out_names, out, out_bytes, 4))) return st;
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
  const attn_delta_io io = {
      .q = q, .k = k, .v = v, .log_gate = log_gate, .beta = beta, .o = o, .state = state, .ck = ck_bytes ? ck : NULL};
  attn_delta_run_all(&p, uk, &io, attn_ws_base(workspace));
  return ATTN_OK;
}
