/*
 * Linear attention (attn.h): the chunkwise engine with a feature map from the registry and the
 * identity state transition. This file holds what is linear attention's own: its descriptor,
 * validation, and the caller-owned state (S | z | offset rows per state head, engine/chunkwise.h).
 */
#include "engine/chunkwise.h"

attn_status attn_linear_desc_init(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dim,
                                  size_t dv, attn_feature_map feature_map) {
  if (!d) return ATTN_E_NULL_POINTER;
  *d = (attn_linear_desc){0};
  attn_shape_init(&d->shape, n_q, n_kv, h_q, h_kv, h_kv, dim, dv);
  d->mask = attn_mask_causal();
  d->feature_map = feature_map;
  d->scale = 1.0f;
  d->normalize = 1;
  d->eps = 1e-6f;
  return ATTN_OK;
}

/* Validation and the sizes that do not depend on the path; spans of the tensors in *sp. */
static attn_status lin_validate(const attn_linear_desc *d, attn_spans *sp, attn_chunkwise_plan *p) {
  attn_status st;
  if (!d) return ATTN_E_NULL_POINTER;
  if ((st = attn_shape_check(&d->shape, sp))) return st;
  const attn_featmap *fm = attn_featmap_get(d->feature_map);
  if (!fm) return ATTN_E_BAD_FEATURE_MAP;
  const int full = d->mask.left == ATTN_UNBOUNDED && d->mask.right == ATTN_UNBOUNDED && d->mask.chunk == 0;
  if (!full && !attn_mask_is_causal(d->mask)) return ATTN_E_BAD_WINDOW;
  if ((d->normalize != 0 && d->normalize != 1) || d->chunk > ATTN_LINEAR_MAX_CHUNK) return ATTN_E_BAD_ARGUMENT;
  if (!isfinite(d->scale)) return ATTN_E_BAD_SCALE;
  if (!isfinite(d->eps) || d->eps < 0.0f) return ATTN_E_BAD_EPS;
  return attn_chunkwise_shape(p, &d->shape, sp->H, fm, d->m, !full, d->normalize, d->scale, d->eps,
                              &attn_transition_identity);
}

/* Sizes a caller can ask for a descriptor: the first two do not depend on the path. */
typedef enum lin_size { LIN_FEATURES, LIN_STATE_BYTES, LIN_WORKSPACE_BYTES, LIN_CHUNK } lin_size;

static attn_status lin_size_of(const attn_linear_desc *d, lin_size what, size_t *out) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = lin_validate(d, &sp, &p);
  if (st) return st;
  if (!out) return ATTN_E_NULL_POINTER;
  if (what == LIN_FEATURES || what == LIN_STATE_BYTES) {
    *out = what == LIN_FEATURES ? p.m : p.state_floats * sizeof(float);
    return ATTN_OK;
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  if ((st = attn_chunkwise_plan_make(&p, d->chunk, uk))) return st;
  *out = what == LIN_CHUNK ? p.C : p.scratch_bytes;
  return ATTN_OK;
}

attn_status attn_linear_feature_size(const attn_linear_desc *d, size_t *m) { return lin_size_of(d, LIN_FEATURES, m); }
attn_status attn_linear_state_size(const attn_linear_desc *d, size_t *bytes) {
  return lin_size_of(d, LIN_STATE_BYTES, bytes);
}
attn_status attn_linear_workspace_size(const attn_linear_desc *d, size_t *bytes) {
  return lin_size_of(d, LIN_WORKSPACE_BYTES, bytes);
}
attn_status attn_linear_chunk_size(const attn_linear_desc *d, size_t *chunk) {
  return lin_size_of(d, LIN_CHUNK, chunk);
}

static size_t state_bytes(const attn_linear_state *s) { return s->heads * s->m * s->ld * sizeof(float); }

/* The state a descriptor's plan describes, bound to data. */
static attn_linear_state lin_state_of(const attn_linear_desc *d, const attn_chunkwise_plan *p, float *data) {
  return (attn_linear_state){p->heads, p->m, d->shape.dv, p->lds, d->feature_map, d->normalize, 0, data};
}

attn_status attn_linear_state_init(attn_linear_state *s, const attn_linear_desc *d, void *memory, size_t bytes) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = lin_validate(d, &sp, &p);
  if (st) return st;
  if (!s || !memory) return ATTN_E_NULL_POINTER;
  if (bytes < p.state_floats * sizeof(float)) return ATTN_E_WORKSPACE_TOO_SMALL;
  *s = lin_state_of(d, &p, (float *)memory);
  memset(memory, 0, p.state_floats * sizeof(float));
  return ATTN_OK;
}

attn_status attn_linear_state_reset(attn_linear_state *s) {
  if (!s || !s->data) return ATTN_E_NULL_POINTER;
  memset(s->data, 0, state_bytes(s));
  s->tokens = 0;
  return ATTN_OK;
}

static int state_same_shape(const attn_linear_state *a, const attn_linear_state *b) {
  return a->heads == b->heads && a->m == b->m && a->dv == b->dv && a->ld == b->ld && a->feature_map == b->feature_map &&
         a->normalize == b->normalize;
}

attn_status attn_linear_state_copy(attn_linear_state *dst, const attn_linear_state *src) {
  if (!dst || !src || !dst->data || !src->data) return ATTN_E_NULL_POINTER;
  if (!state_same_shape(dst, src)) return ATTN_E_STATE_MISMATCH;
  const size_t n = state_bytes(src);
  if (dst->data != src->data) {
    if (attn_overlap(dst->data, n, src->data, n)) return ATTN_E_ALIASING;
    memcpy(dst->data, src->data, n);
  }
  dst->tokens = src->tokens;
  return ATTN_OK;
}

attn_status attn_linear(const attn_linear_desc *d, const float *q, const float *k, const float *v, float *o,
                        attn_linear_state *state, void *workspace, size_t workspace_size) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = lin_validate(d, &sp, &p);
  if (st) return st;
  if (!q || !k || !v || !o || !workspace) return ATTN_E_NULL_POINTER;
  if (state && !p.causal) return ATTN_E_BAD_ARGUMENT;
  if (state) {
    if (!state->data) return ATTN_E_NULL_POINTER;
    const attn_linear_state want = lin_state_of(d, &p, NULL);
    if (!state_same_shape(state, &want)) return ATTN_E_STATE_MISMATCH;
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  if ((st = attn_chunkwise_plan_make(&p, d->chunk, uk))) return st;
  if (workspace_size < p.scratch_bytes) return ATTN_E_WORKSPACE_TOO_SMALL;
  void *out[] = {o, workspace, state ? state->data : NULL};
  const size_t out_bytes[] = {sp.o * sizeof(float), workspace_size, p.state_floats * sizeof(float)};
  if ((st = attn_check_io(&sp, q, k, v, out, out_bytes, 3))) return st;
  const attn_chunkwise_io io = {q, k, v, o, state ? state->data : NULL};
  float *ws = attn_ws_base(workspace);
  for (size_t t = 0, n = attn_chunkwise_tasks(&p); t < n; t++) attn_chunkwise_run(&p, uk, &io, t, ws);
  if (state) state->tokens += d->shape.n_kv;
  return ATTN_OK;
}
