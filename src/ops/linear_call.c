/*
 * Linear attention's compute entry points (attn.h): attn_linear, attn_linear_gated and
 * attn_linear_favor_matrix: the checks of a call's gates, states and memory, FAVOR+'s W^T, and
 * the run on the chunkwise or (windowed) blocked engine.
 */
#include <float.h>
#include <stdatomic.h>

#include "core/favor_rng.h"
#include "ops/linear_internal.h"

/* t (cols x rows) = w^T (w: rows x cols, row-major), in 8 x 8 tiles: both sides stay in a few
 * cache lines per tile. */
static void lin_transpose(size_t rows, size_t cols, const float *restrict w, float *restrict t) {
  for (size_t r0 = 0; r0 < rows; r0 += 8)
    for (size_t c0 = 0; c0 < cols; c0 += 8) {
      const size_t r1 = attn_min_sz(rows, r0 + 8), c1 = attn_min_sz(cols, c0 + 8);
      for (size_t c = c0; c < c1; c++)
        for (size_t r = r0; r < r1; r++) t[c * rows + r] = w[r * cols + c];
    }
}

/* Elements of a gate tensor one task of lin_check_gates reads. */
#define LIN_CHECK_SLICE 16384

/* lin_check_gates' tensors, each as runs of len elements (a run: a head's row, or every element
 * of packed heads and rows), cut into slices of LIN_CHECK_SLICE elements, a task each. */
typedef struct lin_check {
  const float *x[2]; /* log gates, beta (NULL: none) */
  attn_layout l[2];
  size_t h_g, runs[2], len[2], tasks[2];
  atomic_int bad;
} lin_check;

static void lin_check_task(void *ctx, size_t task, size_t worker) {
  (void)worker;
  lin_check *c = ctx;
  const int which = task >= c->tasks[0];
  const size_t len = c->len[which], total = c->runs[which] * len;
  const size_t a = (which ? task - c->tasks[0] : task) * LIN_CHECK_SLICE, b = attn_min_sz(total, a + LIN_CHECK_SLICE);
  int ok = 1;
  for (size_t i = a; i < b;) {
    const size_t run = i / len, f0 = i % len, f1 = attn_min_sz(len, f0 + (b - i));
    const float *e = c->x[which] + run / c->h_g * c->l[which].row_stride + run % c->h_g * c->l[which].head_stride;
    /* beta > 0 is beta >= the smallest subnormal */
    ok &=
        which ? attn_all_within(e + f0, f1 - f0, 0x1p-149f, FLT_MAX) : attn_all_within(e + f0, f1 - f0, -FLT_MAX, 0.0f);
    i += f1 - f0;
  }
  if (!ok) atomic_store_explicit(&c->bad, 1, memory_order_relaxed);
}

/* The first bad log gate (then beta) that lin_check_gates found, in token, head, feature order. */
static ATTN_COLD attn_status lin_bad_gate(const attn_linear_desc *d, const attn_chunkwise_plan *p, const float *lg,
                                          const float *beta) {
  for (int which = 0; which < 2; which++) {
    const float *x = which ? beta : lg;
    const attn_lin_gate_tensor g = attn_lin_gate_of(d, p, which);
    for (size_t t = 0; x && t < g.rows; t++)
      for (size_t h = 0; h < p->g.h_g; h++)
        for (size_t f = 0; f < g.width; f++) {
          const float e = x[t * g.l.row_stride + h * g.l.head_stride + f];
          if (which ? e > 0.0f && e <= FLT_MAX : e <= 0.0f && e >= -FLT_MAX) continue;
          if (which)
            return attn_fail(ATTN_E_BAD_GATE, "beta[token %zu, head %zu] = %g: must be finite and > 0", t, h,
                             (double)e);
          if (d->gate == ATTN_GATE_FEATURE)
            return attn_fail(ATTN_E_BAD_GATE,
                             "log_gate[token %zu, head %zu, feature %zu] = %g: must be finite and <= 0", t, h, f,
                             (double)e);
          return attn_fail(ATTN_E_BAD_GATE, "log_gate[token %zu, head %zu] = %g: must be finite and <= 0", t, h,
                           (double)e);
        }
  }
  return attn_fail(ATTN_E_BAD_GATE, "a log gate or beta is out of range");
}

/* Every log gate finite and <= 0, every beta finite and > 0 (NaN fails both comparisons); on the
 * call's threads (a pass over every gate, before anything is written). */
attn_status attn_lin_check_gates(const attn_linear_desc *d, const attn_chunkwise_plan *p, const float *lg,
                                 const float *beta) {
  lin_check c = {{lg, beta}, {{0, 0}, {0, 0}}, p->g.h_g, {0, 0}, {0, 0}, {0, 0}, 0};
  atomic_init(&c.bad, 0);
  for (int which = 0; which < 2; which++) {
    if (!c.x[which]) continue;
    const attn_lin_gate_tensor g = attn_lin_gate_of(d, p, which);
    /* packed heads and rows (the default layouts) as one run, so the loop vectorises over it */
    const int packed = g.l.head_stride == g.width && g.l.row_stride == p->g.h_g * g.width;
    c.l[which] = g.l;
    c.runs[which] = packed ? 1 : g.rows * p->g.h_g;
    c.len[which] = packed ? g.rows * p->g.h_g * g.width : g.width;
    c.tasks[which] = (c.runs[which] * c.len[which] + LIN_CHECK_SLICE - 1) / LIN_CHECK_SLICE;
  }
  attn_parallel(d->shape.threads, c.tasks[0] + c.tasks[1], lin_check_task, &c);
  return atomic_load_explicit(&c.bad, memory_order_relaxed) ? lin_bad_gate(d, p, lg, beta) : ATTN_OK;
}

/* FAVOR+'s W^T (d x m, the projection GEMM's B operand) at the workspace's start: the caller's
 * W^T as given, or the caller's W or the seed's transposed (the generator runs in the space after
 * the W^T region, which the engine uses later). Returns W^T; NULL for other maps. */
static const float *lin_favor_wt(const attn_linear_desc *d, size_t m, const attn_lin_ws *l, float *ws) {
  if (d->feature_map != ATTN_FEATURE_FAVOR) return NULL;
  if (!l->wt_floats) return d->favor_w; /* CALLER_T */
  const float *w = d->favor_w;
  if (d->favor_source < ATTN_FAVOR_CALLER) {
    float *gw = ws + l->wt_floats;
    attn_favor_generate(m, d->shape.d, d->favor_seed, d->favor_source == ATTN_FAVOR_SEED_SQRT_D, gw,
                        (double *)(void *)(gw + l->gen_w_floats));
    w = gw;
  }
  lin_transpose(m, d->shape.d, w, ws);
  return ws;
}

static const char *lin_gate_name(attn_gate_kind g) {
  return g == ATTN_GATE_SCALAR ? "ATTN_GATE_SCALAR" : g == ATTN_GATE_FEATURE ? "ATTN_GATE_FEATURE" : "ATTN_GATE_NONE";
}

/* A gate or beta that desc asks for is NULL: through attn_linear (gated 0), the wrong call. */
static ATTN_COLD attn_status lin_gates_null(const attn_linear_desc *d, const float *log_gate, int gated) {
  if (!gated && d->gate != ATTN_GATE_NONE)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.gate is %s: call attn_linear_gated", lin_gate_name(d->gate));
  if (!gated) return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.beta is 1: call attn_linear_gated");
  if (d->gate != ATTN_GATE_NONE && !log_gate)
    return attn_fail(ATTN_E_NULL_POINTER, "log_gate is NULL: desc.gate is %s", lin_gate_name(d->gate));
  return attn_fail(ATTN_E_NULL_POINTER, "beta is NULL: desc.beta is 1");
}

attn_status attn_lin_run(const attn_linear_desc *d, const void *q, const float *k, const float *v,
                         const float *log_gate, const float *beta, void *o, attn_linear_state *state, void *workspace,
                         size_t workspace_size, int gated) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = attn_lin_validate(d, &sp, &p);
  if (st) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, 0, 0))) return st; /* its size: checked below */
  if ((d->gate != ATTN_GATE_NONE && !log_gate) || (d->beta && !beta)) return lin_gates_null(d, log_gate, gated);
  if (d->gate == ATTN_GATE_NONE) log_gate = NULL;
  if (!d->beta) beta = NULL;
  if ((st = attn_lin_check_gates(d, &p, log_gate, beta))) return st;
  /* A window runs on the blocked engine and keeps no state (the caller keeps K and V). */
  const int windowed = attn_lin_windowed(d);
  if (state && (windowed || !p.causal))
    return attn_fail(ATTN_E_BAD_ARGUMENT, "state must be NULL: a %s call keeps no state",
                     windowed ? "windowed" : "bidirectional");
  size_t ld = attn_lin_ld_aligned(d->shape.dv); /* without a state: the scratch's rows, on lines */
  if (state) {
    if ((st = attn_lin_state_check(d, &p, state, &ld))) return st;
    if (p.xg && state->tokens % p.xg)
      return attn_fail(ATTN_E_STATE_MISMATCH, "state->tokens %zu: not a multiple of desc.exclusive_chunk %zu",
                       state->tokens, p.xg);
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
  const attn_lin_window_params lp = attn_lin_window_params_of(d);
  attn_blocked_plan bp;
  attn_lin_ws l;
  if ((st = attn_lin_plan(d, &p, &bp, &lp, uk, &l)) || (st = attn_lin_plan_ld(&p, ld))) return st;
  if (workspace_size < l.bytes) return attn_fail_ws("workspace_size", workspace_size, l.bytes);
  static const char out_names[] = "o workspace state->data";
  void *out[] = {o, workspace, state ? state->data : NULL};
  const size_t out_bytes[] = {sp.o * sp.o_elem, workspace_size, p.state_floats * sizeof(float)};
  if ((st = attn_check_io(&sp, q, k, v, out, out_bytes, 3)))
    return attn_fail_io(out_names, &sp, q, k, v, out, out_bytes, 3);
  const void *gin[] = {log_gate, beta}; /* the gates are inputs too */
  size_t gin_bytes[2] = {0, 0};
  for (int which = 0; which < 2; which++)
    if (gin[which] && !attn_lin_gate_span(d, &p, which, &gin_bytes[which])) gin_bytes[which] *= sizeof(float);
  if ((st = attn_check_extra_inputs("log_gate beta", gin, gin_bytes, 2, out_names, out, out_bytes, 3))) return st;
  if (d->feature_map == ATTN_FEATURE_FAVOR && d->favor_source >= ATTN_FAVOR_CALLER &&
      attn_overlap(d->favor_w, p.m * d->shape.d * sizeof(float), workspace, workspace_size))
    return attn_fail(ATTN_E_ALIASING, "workspace overlaps input desc.favor_w");
  float *ws = attn_ws_base(workspace);
  const float *wt = lin_favor_wt(d, p.m, &l, ws);
  ws += l.wt_floats;
  if (windowed) {
    const attn_blocked_io io = {.q = q, .k = k, .v = v, .o = o, .fm_wt = wt};
    attn_blocked_run_all(&bp, uk, &io, ws);
    return ATTN_OK;
  }
  const attn_chunkwise_io io = {.q = q,
                                .k = k,
                                .v = v,
                                .o = o,
                                .state = state ? state->data : NULL,
                                .log_gate = log_gate,
                                .beta = beta,
                                .fm_wt = wt};
  attn_chunkwise_run_all(&p, uk, &io, ws);
  if (state) state->tokens += p.xg ? d->shape.n_kv / p.xg * p.xg : d->shape.n_kv; /* the absorbed keys */
  return ATTN_OK;
}

attn_status attn_linear(const attn_linear_desc *d, const void *q, const float *k, const float *v, void *o,
                        attn_linear_state *state, void *workspace, size_t workspace_size) {
  return attn_lin_run(d, q, k, v, NULL, NULL, o, state, workspace, workspace_size, 0);
}

attn_status attn_linear_gated(const attn_linear_desc *d, const void *q, const float *k, const float *v,
                              const float *log_gate, const float *beta, void *o, attn_linear_state *state,
                              void *workspace, size_t workspace_size) {
  return attn_lin_run(d, q, k, v, log_gate, beta, o, state, workspace, workspace_size, 1);
}

attn_status attn_linear_favor_matrix(const attn_linear_desc *d, float *w, size_t w_floats, void *workspace,
                                     size_t workspace_size) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = attn_lin_validate(d, &sp, &p);
  if (st) return st;
  if (d->feature_map != ATTN_FEATURE_FAVOR)
    return attn_fail(ATTN_E_BAD_FEATURE_MATRIX, "desc.feature_map %d is not ATTN_FEATURE_FAVOR", (int)d->feature_map);
  if (d->favor_source >= ATTN_FAVOR_CALLER)
    return attn_fail(ATTN_E_BAD_FEATURE_MATRIX, "desc.favor_source %d is the caller's W: no seed to generate from",
                     (int)d->favor_source);
  if (!w || !workspace) return attn_fail_null("w workspace", (const void *[]){w, workspace});
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
  attn_blocked_plan bp;
  attn_lin_ws l;
  if ((st = attn_lin_plan(d, &p, &bp, NULL, uk, &l))) return st;
  const size_t md = p.m * d->shape.d;
  if (w_floats < md)
    return attn_fail(ATTN_E_WORKSPACE_TOO_SMALL, "w_floats %zu < m %zu x d %zu = %zu needed", w_floats, p.m, d->shape.d,
                     md);
  if (workspace_size < l.bytes) return attn_fail_ws("workspace_size", workspace_size, l.bytes);
  if (attn_overlap(w, md * sizeof(float), workspace, workspace_size))
    return attn_fail(ATTN_E_ALIASING, "w overlaps output workspace");
  float *gw = attn_ws_base(workspace) + l.wt_floats;
  attn_favor_generate(p.m, d->shape.d, d->favor_seed, d->favor_source == ATTN_FAVOR_SEED_SQRT_D, w,
                      (double *)(void *)(gw + l.gen_w_floats));
  return ATTN_OK;
}
