/*
 * The explicit attention matrix of any variant and its per-row statistics (attn.h, analysis;
 * spec 7). Every variant's output is linear in V, so its call with V = the identity (dv = n_kv)
 * writes its weights: row i of head h is w_ij over the keys j, with every definition (softmax,
 * normalisation, scale, gates, beta, GAU's t_i, selective attention's F) exactly as the calls
 * apply it, on the active path. Nothing here knows a variant's mathematics; only the mask, to
 * count the keys each row sees.
 *
 * Workspace, 64-byte aligned regions from its aligned base: [the matrix (attn_matrix_stats only)]
 * [the identity tape] [F's copy (selective)] [the variant's own workspace].
 * The identity of every value head is one tape: ones at the multiples of n_kv + 1, with row stride
 * n_kv and head stride n_kv + 1 (legal input strides: both >= the row width n_kv). Element
 * (j, h, c) sits at j n_kv + h (n_kv + 1) + c = c - j (mod n_kv + 1), and |c - j| < n_kv: a one
 * exactly when c == j, for every head, in n_kv^2 + (h_v - 1)(n_kv + 1) floats.
 */
#include "ops/matrix_internal.h"

static const size_t mx_desc_bytes[] = {sizeof(attn_softmax_desc), sizeof(attn_linear_desc), sizeof(attn_gau_desc),
                                       sizeof(attn_selective_desc)};

/* Linear attention with a gate or beta (attn_linear_gated's heads and inputs). */
static int mx_gated(attn_kind kind, const mx_desc *d) {
  return kind == ATTN_KIND_LINEAR && (d->lin.gate != ATTN_GATE_NONE || d->lin.beta);
}

static attn_status mx_workspace_size(attn_kind kind, const mx_desc *d, size_t *bytes) {
  switch (kind) {
    case ATTN_KIND_SOFTMAX:
      return attn_softmax_workspace_size(&d->sm, bytes);
    case ATTN_KIND_LINEAR:
      return attn_linear_workspace_size(&d->lin, bytes);
    case ATTN_KIND_GAU:
      return attn_gau_workspace_size(&d->gau, bytes);
    default:
      return attn_selective_workspace_size(&d->sel, bytes);
  }
}

/* The variant's call with V = the tape and o = a (linear: a fresh sequence, no state). */
static attn_status mx_variant(const attn_call *c, const mx_desc *d, const float *tape, float *a, float *f, void *ws,
                              size_t ws_bytes) {
  switch (c->kind) {
    case ATTN_KIND_SOFTMAX:
      return attn_softmax(&d->sm, c->q, c->k, tape, a, NULL, ws, ws_bytes);
    case ATTN_KIND_LINEAR:
      return attn_linear_gated(&d->lin, c->q, c->k, tape, c->log_gate, c->beta, a, NULL, ws, ws_bytes);
    case ATTN_KIND_GAU:
      return attn_gau(&d->gau, c->q, c->k, tape, a, ws, ws_bytes);
    default:
      return attn_selective(&d->sel, c->q, c->k, tape, a, NULL, f, ws, ws_bytes);
  }
}

/*
 * The checks every analysis call starts with, in order: call and desc, the kind, the size limit,
 * then the variant's own (its *_workspace_size on the descriptor with V = the tape, dv = n_kv and
 * the default [n_q][H][n_kv] output layout). with_matrix: the workspace holds the matrix too.
 */
attn_status attn_mx_prepare(const attn_call *c, int with_matrix, mx_plan *p) {
  if (!c || !c->desc) return attn_fail(ATTN_E_NULL_POINTER, "%s is NULL", c ? "call->desc" : "call");
  if ((unsigned)c->kind > ATTN_KIND_SELECTIVE)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "call->kind %d: not an attn_kind", (int)c->kind);
  const attn_shape *cs = c->desc;
  if (cs->n_kv > ATTN_MATRIX_MAX_KV)
    return attn_fail(ATTN_E_TOO_LARGE, "shape.n_kv %zu > ATTN_MATRIX_MAX_KV %d", cs->n_kv, ATTN_MATRIX_MAX_KV);
  if (cs->kv_type != ATTN_F32) /* k is read as floats (attn_call.k) */
    return attn_fail(ATTN_E_BAD_DTYPE, "shape.kv_type %d: the analysis takes ATTN_F32 K only", (int)cs->kv_type);
  if (cs->q_type != ATTN_F32 || cs->o_type != ATTN_F32) /* q is read as floats, the matrix written as them */
    return attn_fail(ATTN_E_BAD_DTYPE, "shape.q_type %d, o_type %d: the analysis takes ATTN_F32 only", (int)cs->q_type,
                     (int)cs->o_type);
  memset(p, 0, sizeof *p);
  memcpy(&p->d, c->desc, mx_desc_bytes[c->kind]);
  attn_shape *s = &p->d.shape;
  const size_t n = s->n_kv;
  p->n_q = s->n_q;
  p->n_kv = n;
  p->H = attn_max_sz(attn_max_sz(s->h_q, s->h_k), attn_max_sz(s->h_v, mx_gated(c->kind, &p->d) ? p->d.lin.h_g : 0));
  s->dv = n;
  s->v = (attn_layout){n, n + 1};
  s->o = (attn_layout){SIZE_MAX, n}; /* the variant reports SIZE_OVERFLOW when H n overflows */
  (void)attn_mul_ok(p->H, n, &s->o.row_stride);
  size_t var_bytes;
  attn_status st = mx_workspace_size(c->kind, &p->d, &var_bytes);
  if (st) return st;
  /* validated: the spans fit (the tape is V's span, the matrix o's) */
  (void)attn_check_input(n, s->h_v, n, s->v, &p->tape);
  if (with_matrix) (void)attn_check_input(p->n_q, p->H, n, s->o, &p->matrix);
  p->mask = c->kind == ATTN_KIND_SOFTMAX  ? p->d.sm.mask
            : c->kind == ATTN_KIND_GAU    ? p->d.gau.mask
            : c->kind == ATTN_KIND_LINEAR ? p->d.lin.mask
                                          : attn_mask_causal();
  p->xchunk = c->kind == ATTN_KIND_LINEAR ? p->d.lin.exclusive_chunk : 0;
  attn_ws w = {0, 0};
  p->off_mat = attn_ws_take(&w, p->matrix);
  p->off_tape = attn_ws_take(&w, p->tape);
  p->off_f = attn_ws_take(&w, c->kind == ATTN_KIND_SELECTIVE ? n : 0);
  p->off_ws = w.floats;
  if (!attn_ws_bytes(&w, &p->bytes) || !attn_add_ok(p->bytes, var_bytes, &p->bytes))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the analysis workspace of n_q %zu x H %zu x n_kv %zu overflows size_t",
                     p->n_q, p->H, n);
  return ATTN_OK;
}

/* The inputs the weights read: q, k, and per kind the gates, FAVOR+'s W, the bias table or F. */
enum { MX_MAX_INPUTS = 5 };
typedef struct mx_inputs {
  const void *p[MX_MAX_INPUTS];
  size_t bytes[MX_MAX_INPUTS];
  size_t n;
} mx_inputs;

static void mx_add(mx_inputs *in, const void *p, size_t floats) {
  in->p[in->n] = p;
  in->bytes[in->n++] = floats * sizeof(float);
}

/* A log-gate or beta tensor of linear attention (validated by the variant: the span fits). */
static void mx_add_gate(mx_inputs *in, const attn_linear_desc *l, const float *x, int beta, size_t H) {
  const attn_layout lay = beta ? l->beta_layout : l->gate_layout;
  size_t m = 1, span;
  if (!beta && l->gate == ATTN_GATE_FEATURE) (void)attn_linear_feature_size(l, &m);
  (void)attn_check_input(lay.row_stride ? l->shape.n_kv : 1, l->h_g ? l->h_g : H, m, lay, &span);
  mx_add(in, x, span);
}

static mx_inputs mx_inputs_of(const attn_call *c, const mx_plan *p) {
  const attn_shape *s = &p->d.shape;
  mx_inputs in = {{0}, {0}, 0};
  size_t span;
  (void)attn_check_input(s->n_q, s->h_q, s->d, s->q, &span);
  mx_add(&in, c->q, span);
  (void)attn_check_input(s->n_kv, s->h_k, s->d, s->k, &span);
  mx_add(&in, c->k, span);
  const attn_linear_desc *l = &p->d.lin;
  const attn_gau_desc *g = &p->d.gau;
  switch (c->kind) {
    case ATTN_KIND_LINEAR:
      if (l->gate != ATTN_GATE_NONE) mx_add_gate(&in, l, c->log_gate, 0, p->H);
      if (l->beta) mx_add_gate(&in, l, c->beta, 1, p->H);
      if (l->feature_map == ATTN_FEATURE_FAVOR && l->favor_source >= ATTN_FAVOR_CALLER) {
        size_t m = 0;
        (void)attn_linear_feature_size(l, &m);
        mx_add(&in, l->favor_w, m * s->d);
      }
      break;
    case ATTN_KIND_GAU:
      if (g->bias != ATTN_GAU_BIAS_SCALAR)
        mx_add(&in, g->bias_table, g->bias == ATTN_GAU_BIAS_TWO_SIDED ? 2 * g->bias_len - 1 : g->bias_len);
      break;
    case ATTN_KIND_SELECTIVE:
      if (c->f) mx_add(&in, c->f, s->n_kv);
      break;
    default:
      break;
  }
  return in;
}

/* Output o of attn_matrix (n_out 2) or attn_matrix_stats (4), in mx_check_io's order. */
static ATTN_COLD const char *mx_out_name(size_t n_out, size_t o) {
  static const char *const names[] = {"a", "workspace", "stats.entropy", "stats.sparsity", "stats.count", "workspace"};
  return names[(n_out == 2 ? 0 : 2) + o];
}

/* Input i of mx_inputs_of: q, k, then the kind's own in its order. */
static ATTN_COLD const char *mx_input_name(const attn_call *c, size_t i) {
  if (i < 2) return i ? "call->k" : "call->q";
  if (c->kind == ATTN_KIND_GAU) return "desc.bias_table";
  if (c->kind == ATTN_KIND_SELECTIVE) return "call->f";
  const attn_linear_desc *l = (const attn_linear_desc *)(const void *)c->desc;
  static const char *const lin[] = {"call->log_gate", "call->beta", "desc.favor_w"};
  i -= 2;
  if (l->gate == ATTN_GATE_NONE) i++;
  if (i == 1 && !l->beta) i++;
  return lin[i];
}

/*
 * The checks of a call's pointers, in order: q, k and the workspace (and a gate or beta the
 * descriptor asks for) NULL, the workspace's size, then the outputs (NULL entries skipped; the
 * last is the workspace) overlapping an input or each other.
 */
attn_status attn_mx_check_io(const attn_call *c, const mx_plan *p, void *const *out, const size_t *out_bytes,
                             size_t n_out, size_t workspace_size) {
  if (!c->q || !c->k || !out[n_out - 1])
    return attn_fail_null("call->q call->k workspace", (const void *[]){c->q, c->k, out[n_out - 1]});
  if (mx_gated(c->kind, &p->d) && p->d.lin.gate != ATTN_GATE_NONE && !c->log_gate)
    return attn_fail(ATTN_E_NULL_POINTER, "call->log_gate is NULL with a gate");
  if (mx_gated(c->kind, &p->d) && p->d.lin.beta && !c->beta)
    return attn_fail(ATTN_E_NULL_POINTER, "call->beta is NULL with desc.beta 1");
  if (workspace_size < p->bytes) return attn_fail_ws("workspace_size", workspace_size, p->bytes);
  const mx_inputs in = mx_inputs_of(c, p);
  for (size_t o = 0; o < n_out; o++) {
    if (!out[o]) continue;
    for (size_t i = 0; i < in.n; i++)
      if (attn_overlap(out[o], out_bytes[o], in.p[i], in.bytes[i]))
        return attn_fail(ATTN_E_ALIASING, "%s overlaps input %s", mx_out_name(n_out, o), mx_input_name(c, i));
    for (size_t o2 = o + 1; o2 < n_out; o2++)
      if (out[o2] && attn_overlap(out[o], out_bytes[o], out[o2], out_bytes[o2]))
        return attn_fail(ATTN_E_ALIASING, "%s overlaps output %s", mx_out_name(n_out, o), mx_out_name(n_out, o2));
  }
  return ATTN_OK;
}

/* The matrix into a (layout p->d.shape.o): the tape and F's copy in the workspace, then the
 * variant's call on the rest of it. */
attn_status attn_mx_compute(const attn_call *c, const mx_plan *p, float *a, void *workspace, size_t workspace_size) {
  float *base = attn_ws_base(workspace), *tape = base + p->off_tape, *f = base + p->off_f;
  memset(tape, 0, p->tape * sizeof(float));
  for (size_t x = 0; x < p->tape; x += p->n_kv + 1) tape[x] = 1.0f;
  if (c->kind == ATTN_KIND_SELECTIVE) { /* the keys before the call: the caller's F (never written) */
    const size_t before = p->n_kv > p->n_q ? p->n_kv - p->n_q : 0;
    for (size_t j = 0; j < before; j++) f[j] = c->f ? c->f[j] : 0.0f;
  }
  char *ws = (char *)(base + p->off_ws);
  return mx_variant(c, &p->d, tape, a, f, ws, workspace_size - (size_t)(ws - (char *)workspace));
}

/* The workspace of attn_matrix (with_matrix 0) or attn_matrix_stats (1). */
attn_status attn_mx_workspace_bytes(const attn_call *call, int with_matrix, size_t *bytes) {
  mx_plan p;
  attn_status st = attn_mx_prepare(call, with_matrix, &p);
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = p.bytes;
  return ATTN_OK;
}

attn_status attn_matrix_workspace_size(const attn_call *call, size_t *bytes) {
  return attn_mx_workspace_bytes(call, 0, bytes);
}

attn_status attn_matrix(const attn_call *call, float *a, attn_layout layout, void *workspace, size_t workspace_size) {
  mx_plan p;
  attn_status st = attn_mx_prepare(call, 0, &p);
  if (st) return st;
  size_t span;
  if ((st = attn_check_output(p.n_q, p.H, p.n_kv, layout, &span)))
    return attn_fail_layout(st, "layout", "n_kv", p.n_q, p.H, p.n_kv, layout);
  if (!a) return attn_fail(ATTN_E_NULL_POINTER, "a is NULL");
  p.d.shape.o = layout;
  void *out[] = {a, workspace};
  const size_t out_bytes[] = {span * sizeof(float), workspace_size};
  if ((st = attn_mx_check_io(call, &p, out, out_bytes, 2, workspace_size))) return st;
  return attn_mx_compute(call, &p, a, workspace, workspace_size);
}
