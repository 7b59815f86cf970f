/*
 * Linear attention (attn.h): the chunkwise engine with a feature map from the registry and the
 * identity state transition. This file holds what is linear attention's own: its descriptor,
 * validation, and the caller-owned state (S | z | offset rows per state head, engine/chunkwise.h).
 */
#include <float.h>
#include <stdatomic.h>

#include "core/favor_rng.h"
#include "engine/blocked.h"
#include "engine/chunkwise.h"

attn_status attn_linear_desc_init(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dim,
                                  size_t dv, attn_feature_map feature_map) {
  if (!d) return ATTN_E_NULL_POINTER;
  *d = (attn_linear_desc){0};
  attn_shape_init(&d->shape, n_q, n_kv, h_q, h_kv, h_kv, dim, dv);
  d->mask = attn_mask_causal();
  d->feature_map = feature_map;
  const int temperature = feature_map == ATTN_FEATURE_EXP || feature_map == ATTN_FEATURE_FAVOR;
  d->scale = temperature && dim ? 1.0f / sqrtf((float)dim) : 1.0f;
  d->normalize = 1;
  d->eps = feature_map == ATTN_FEATURE_DSOFTMAX ? 0.0f : 1e-6f;
  d->favor_source = ATTN_FAVOR_SEED_CHI;
  const size_t H = attn_max_sz(h_q, h_kv);
  d->gate_layout = (attn_layout){H, 1};
  d->beta_layout = (attn_layout){H, 1};
  return ATTN_OK;
}

/* The log gates (beta = 0) or beta (beta = 1) of a call planned in p (its gate heads and m): rows
 * (a row stride of 0 is one row for every token), h_g heads of width floats, layout. */
typedef struct lin_gate_tensor {
  attn_layout l;
  size_t rows, width;
} lin_gate_tensor;

static lin_gate_tensor lin_gate_of(const attn_linear_desc *d, const attn_chunkwise_plan *p, int beta) {
  const attn_layout l = beta ? d->beta_layout : d->gate_layout;
  return (lin_gate_tensor){l, l.row_stride ? d->shape.n_kv : 1, !beta && d->gate == ATTN_GATE_FEATURE ? p->m : 1};
}

/* Its span in elements (and the stride checks). */
static attn_status lin_gate_span(const attn_linear_desc *d, const attn_chunkwise_plan *p, int beta, size_t *span) {
  const lin_gate_tensor t = lin_gate_of(d, p, beta);
  return attn_check_input(t.rows, p->g.h_g, t.width, t.l, span);
}

/* A mask other than full and causal: windowed linear attention on the blocked engine. */
static int lin_windowed(const attn_linear_desc *d) {
  const attn_mask k = d->mask;
  return !attn_mask_is_causal(k) && !(k.left == ATTN_UNBOUNDED && k.right == ATTN_UNBOUNDED && k.chunk == 0);
}

/* Windowed linear attention's score step (engine/blocked.h): the scores phi(q_i) . psi(k_j) are
 * the weights themselves; per row the running denominator sum_j of them. */
typedef struct lin_window_params {
  float scale, eps;
  int normalize;
} lin_window_params;

static void lw_init(float *rs, size_t R, size_t rows, const attn_step_rows *w) {
  (void)w;
  (void)R;
  for (size_t r = 0; r < rows; r++) rs[r] = 0.0f;
}

/* Masked pairs (-inf on boundary blocks) weigh 0; any other -inf (from an infinite input) is NaN,
 * as the engine's convention says. */
static const float *lw_step(const struct attn_ukernels *uk, const attn_step_block *b, float *rs, size_t R) {
  (void)R;
  uk->window_block(b->nk, b->nq, b->st, b->ld, NULL, rs, b->masked);
  return NULL;
}

/* o = s acc / (s den + eps) (zero denominator: 0), or s acc; a non-finite acc: a NaN row. */
static void lw_finish(const float *acc, const float *rs, size_t R, size_t r, size_t dv, float *orow, float *aux,
                      const void *params) {
  (void)R, (void)aux;
  const lin_window_params *lp = params;
  const float den = lp->normalize ? lp->scale * rs[r] + lp->eps : 1.0f;
  const float f = lp->scale * (den == 0.0f ? 0.0f : 1.0f / den);
  if (!attn_rows_finite(acc, 1, dv, 0) || isnan(den)) {
    attn_fill_nan(orow, dv);
    return;
  }
  for (size_t x = 0; x < dv; x++) orow[x] = acc[x] * f;
}

static const attn_score_step lin_window_step = {1, 0, lw_init, lw_step, lw_finish, 0, {0, 0, 0}, NULL};

/* The exponential maps' step: the engine hands each row's offset bm of the block's scores
 * (engine/blocked.h); row state den, M (the running offset: at the end the row's exact one, so
 * eps meets the stabilised sums of spec 3.2), alpha = exp(M_old - M) and the block's factor
 * exp(bm - M). Finished by lw_finish with scale 1. */
static void lx_init(float *rs, size_t R, size_t rows, const attn_step_rows *w) {
  (void)w;
  for (size_t r = 0; r < rows; r++) rs[r] = 0.0f, rs[R + r] = -INFINITY;
}

static const float *lx_step(const struct attn_ukernels *uk, const attn_step_block *b, float *rs, size_t R) {
  float *den = rs, *M = rs + R, *alpha = rs + 2 * R, *fac = rs + 3 * R;
  for (size_t c = 0; c < b->nq; c++) { /* a NaN bm (non-finite input) makes fac NaN, so the row NaN */
    const float x = b->bm[c], mn = x > M[c] ? x : M[c];
    alpha[c] = M[c] == mn ? 1.0f : expf(M[c] - mn);
    fac[c] = x == -INFINITY ? 0.0f : expf(x - mn);
    M[c] = mn;
    den[c] *= alpha[c];
  }
  uk->window_block(b->nk, b->nq, b->st, b->ld, fac, den, b->masked);
  return alpha;
}

static const attn_score_step lin_xwindow_step = {4, 0, lx_init, lx_step, lw_finish, 0, {0, 0, 0}, NULL};

/* The blocked plan of a windowed call (m: the map's feature size; favor's W^T is set later). */
static attn_status lin_window_plan(const attn_linear_desc *d, size_t m, attn_blocked_plan *bp,
                                   const lin_window_params *lp, const struct attn_ukernels *uk) {
  const attn_featmap *fm = attn_featmap_get(d->feature_map);
  const attn_blocked_features feat = {fm, {fm->offsets ? sqrtf(d->scale) : 1.0f, NULL}, m};
  return attn_blocked_plan_make(bp, &d->shape, d->mask, 1.0f, fm->offsets ? &lin_xwindow_step : &lin_window_step, lp,
                                &feat, NULL, uk);
}

/* The windowed step's parameters: exponential maps are normalised and scale their inputs. */
static lin_window_params lin_window_params_of(const attn_linear_desc *d) {
  const int x = attn_featmap_get(d->feature_map)->offsets;
  return (lin_window_params){x ? 1.0f : d->scale, d->eps, x ? 1 : d->normalize};
}

/* Validation and the sizes that do not depend on the path; spans of the tensors in *sp. */
static attn_status lin_validate(const attn_linear_desc *d, attn_spans *sp, attn_chunkwise_plan *p) {
  attn_status st;
  if (!d) return ATTN_E_NULL_POINTER;
  const int gated = d->gate != ATTN_GATE_NONE || d->beta;
  if ((st = attn_shape_check(&d->shape, gated ? d->h_g : 0, sp))) return st;
  if (d->shape.kv_type != ATTN_F32) return ATTN_E_BAD_DTYPE; /* fp32 K and V only */
  const attn_featmap *fm = attn_featmap_get(d->feature_map);
  if (!fm) return ATTN_E_BAD_FEATURE_MAP;
  const int full = d->mask.left == ATTN_UNBOUNDED && d->mask.right == ATTN_UNBOUNDED && d->mask.chunk == 0;
  /* Any other mask than full and causal is a window: the blocked engine's heads (h_k == h_v
   * dividing h_q), no gate. */
  if (lin_windowed(d) && (d->shape.h_k != d->shape.h_v || sp->H != d->shape.h_q)) return ATTN_E_BAD_HEADS;
  if ((d->normalize != 0 && d->normalize != 1) || d->chunk > ATTN_LINEAR_MAX_CHUNK) return ATTN_E_BAD_ARGUMENT;
  if ((unsigned)d->gate > ATTN_GATE_FEATURE || (d->beta != 0 && d->beta != 1)) return ATTN_E_BAD_GATE;
  attn_chunkwise_gates g = {d->gate, d->beta, 1, d->gate_layout, d->beta_layout};
  if (gated) { /* causal, element-wise maps; h_g joined H in the shape check */
    if (!attn_mask_is_causal(d->mask)) return ATTN_E_BAD_WINDOW;
    if (fm->offsets) return ATTN_E_BAD_FEATURE_MAP;
    g.h_g = d->h_g ? d->h_g : sp->H;
  }
  /* FLASH's chunk-exclusive form: causal, element-wise maps, no gate. */
  if (d->exclusive_chunk && (!attn_mask_is_causal(d->mask) || gated)) return ATTN_E_BAD_WINDOW;
  if (d->exclusive_chunk && fm->offsets) return ATTN_E_BAD_FEATURE_MAP;
  /* Exponential maps are normalised only: their offsets would not cancel otherwise. */
  if (fm->offsets && !d->normalize) return ATTN_E_BAD_NORMALIZATION;
  if (!isfinite(d->scale)) return ATTN_E_BAD_SCALE;
  const int dsoftmax = d->feature_map == ATTN_FEATURE_DSOFTMAX, favor = d->feature_map == ATTN_FEATURE_FAVOR;
  if (dsoftmax ? d->scale != 1.0f : fm->offsets && !(d->scale > 0.0f)) return ATTN_E_BAD_SCALE;
  if (!isfinite(d->eps) || d->eps < 0.0f || (dsoftmax && d->eps != 0.0f)) return ATTN_E_BAD_EPS;
  const int caller_w = d->favor_source == ATTN_FAVOR_CALLER || d->favor_source == ATTN_FAVOR_CALLER_T;
  if (favor && ((unsigned)d->favor_source > ATTN_FAVOR_CALLER_T || (caller_w && !d->favor_w)))
    return ATTN_E_BAD_FEATURE_MATRIX;
  st = attn_chunkwise_shape(p, &d->shape, sp->H, fm, d->m, !full, d->normalize, d->scale, d->eps, &g);
  p->xg = d->exclusive_chunk;
  size_t span;
  if (!st && d->gate != ATTN_GATE_NONE) st = lin_gate_span(d, p, 0, &span);
  if (!st && d->beta) st = lin_gate_span(d, p, 1, &span);
  if (st || !favor) return st;
  size_t md;
  if (!attn_mul_ok(p->m, d->shape.d, &md) || md > SIZE_MAX / sizeof(float)) return ATTN_E_SIZE_OVERFLOW;
  if (caller_w && !attn_rows_finite(d->favor_w, 1, md, md)) return ATTN_E_BAD_FEATURE_MATRIX;
  return ATTN_OK;
}

/* The workspace: for FAVOR+ (unless the caller gives W^T), W^T (d x m floats) first, then the
 * engine's scratch, which the generator of a seed source uses before the engine does (W, then its
 * doubles). */
typedef struct lin_ws {
  size_t wt_floats;    /* W^T region (0 without favor) */
  size_t gen_w_floats; /* generator: W region (0 without a seed source), its doubles follow */
  size_t bytes;        /* the whole workspace */
} lin_ws;

static attn_status lin_ws_plan(const attn_linear_desc *d, size_t m, size_t engine_bytes, lin_ws *l) {
  *l = (lin_ws){0, 0, engine_bytes};
  if (d->feature_map != ATTN_FEATURE_FAVOR || d->favor_source == ATTN_FAVOR_CALLER_T) return ATTN_OK;
  attn_ws w = {0, 0};
  const size_t md = m * d->shape.d; /* checked by lin_validate */
  (void)attn_ws_take(&w, md);
  l->wt_floats = w.floats;
  size_t gen = 0;
  if (d->favor_source < ATTN_FAVOR_CALLER) {
    attn_ws g = {0, 0};
    (void)attn_ws_take(&g, md);
    l->gen_w_floats = g.floats;
    const size_t dbl = attn_favor_scratch_doubles(d->shape.d);
    if (!dbl || dbl > SIZE_MAX / 2) return ATTN_E_SIZE_OVERFLOW;
    (void)attn_ws_take(&g, 2 * dbl);
    if (!attn_ws_bytes(&g, &gen)) return ATTN_E_SIZE_OVERFLOW;
  }
  size_t wt_bytes;
  if (w.overflow || !attn_mul_ok(l->wt_floats, sizeof(float), &wt_bytes) ||
      !attn_add_ok(wt_bytes, attn_max_sz(engine_bytes, gen), &l->bytes))
    return ATTN_E_SIZE_OVERFLOW;
  return ATTN_OK;
}

/* The engine's plan of a call (a window: bp; otherwise p gets its chunk) and the workspace. */
static attn_status lin_plan(const attn_linear_desc *d, attn_chunkwise_plan *p, attn_blocked_plan *bp,
                            const lin_window_params *lp, const struct attn_ukernels *uk, lin_ws *l) {
  const int w = lin_windowed(d);
  attn_status st = w ? lin_window_plan(d, p->m, bp, lp, uk) : attn_chunkwise_plan_make(p, d->chunk, uk);
  return st ? st : lin_ws_plan(d, p->m, w ? bp->scratch_bytes : p->scratch_bytes, l);
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
  if (what == LIN_CHUNK) {
    if ((st = attn_chunkwise_plan_make(&p, d->chunk, uk))) return st;
    *out = p.C;
    return ATTN_OK;
  }
  attn_blocked_plan bp;
  lin_ws l;
  if ((st = lin_plan(d, &p, &bp, NULL, uk, &l))) return st;
  *out = l.bytes;
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
    if (which)
      for (size_t f = f0; f < f1; f++) ok &= (e[f] > 0.0f) & (e[f] <= FLT_MAX);
    else
      for (size_t f = f0; f < f1; f++) ok &= (e[f] <= 0.0f) & (e[f] >= -FLT_MAX);
    i += f1 - f0;
  }
  if (!ok) atomic_store_explicit(&c->bad, 1, memory_order_relaxed);
}

/* Every log gate finite and <= 0, every beta finite and > 0 (NaN fails both comparisons); on the
 * call's threads (a pass over every gate, before anything is written). */
static attn_status lin_check_gates(const attn_linear_desc *d, const attn_chunkwise_plan *p, const float *lg,
                                   const float *beta) {
  lin_check c = {{lg, beta}, {{0, 0}, {0, 0}}, p->g.h_g, {0, 0}, {0, 0}, {0, 0}, 0};
  atomic_init(&c.bad, 0);
  for (int which = 0; which < 2; which++) {
    if (!c.x[which]) continue;
    const lin_gate_tensor g = lin_gate_of(d, p, which);
    /* packed heads and rows (the default layouts) as one run, so the loop vectorises over it */
    const int packed = g.l.head_stride == g.width && g.l.row_stride == p->g.h_g * g.width;
    c.l[which] = g.l;
    c.runs[which] = packed ? 1 : g.rows * p->g.h_g;
    c.len[which] = packed ? g.rows * p->g.h_g * g.width : g.width;
    c.tasks[which] = (c.runs[which] * c.len[which] + LIN_CHECK_SLICE - 1) / LIN_CHECK_SLICE;
  }
  attn_parallel(d->shape.threads, c.tasks[0] + c.tasks[1], lin_check_task, &c);
  return atomic_load_explicit(&c.bad, memory_order_relaxed) ? ATTN_E_BAD_GATE : ATTN_OK;
}

attn_status attn_linear(const attn_linear_desc *d, const float *q, const float *k, const float *v, float *o,
                        attn_linear_state *state, void *workspace, size_t workspace_size) {
  return attn_linear_gated(d, q, k, v, NULL, NULL, o, state, workspace, workspace_size);
}

/* FAVOR+'s W^T (d x m, the projection GEMM's B operand) at the workspace's start: the caller's
 * W^T as given, or the caller's W or the seed's transposed (the generator runs in the space after
 * the W^T region, which the engine uses later). Returns W^T; NULL for other maps. */
static const float *lin_favor_wt(const attn_linear_desc *d, size_t m, const lin_ws *l, float *ws) {
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

attn_status attn_linear_gated(const attn_linear_desc *d, const float *q, const float *k, const float *v,
                              const float *log_gate, const float *beta, float *o, attn_linear_state *state,
                              void *workspace, size_t workspace_size) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = lin_validate(d, &sp, &p);
  if (st) return st;
  if (!q || !k || !v || !o || !workspace) return ATTN_E_NULL_POINTER;
  if ((d->gate != ATTN_GATE_NONE && !log_gate) || (d->beta && !beta)) return ATTN_E_NULL_POINTER;
  if (d->gate == ATTN_GATE_NONE) log_gate = NULL;
  if (!d->beta) beta = NULL;
  if ((st = lin_check_gates(d, &p, log_gate, beta))) return st;
  /* A window runs on the blocked engine and keeps no state (the caller keeps K and V). */
  const int windowed = lin_windowed(d);
  if (state && (windowed || !p.causal)) return ATTN_E_BAD_ARGUMENT;
  if (state) {
    if (!state->data) return ATTN_E_NULL_POINTER;
    const attn_linear_state want = lin_state_of(d, &p, NULL);
    if (!state_same_shape(state, &want) || (p.xg && state->tokens % p.xg)) return ATTN_E_STATE_MISMATCH;
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  const lin_window_params lp = lin_window_params_of(d);
  attn_blocked_plan bp;
  lin_ws l;
  if ((st = lin_plan(d, &p, &bp, &lp, uk, &l))) return st;
  if (workspace_size < l.bytes) return ATTN_E_WORKSPACE_TOO_SMALL;
  void *out[] = {o, workspace, state ? state->data : NULL};
  const size_t out_bytes[] = {sp.o * sizeof(float), workspace_size, p.state_floats * sizeof(float)};
  if ((st = attn_check_io(&sp, q, k, v, out, out_bytes, 3))) return st;
  for (int which = 0; which < 2; which++) { /* the gates are inputs too */
    const float *x = which ? beta : log_gate;
    size_t span;
    if (!x) continue;
    (void)lin_gate_span(d, &p, which, &span); /* validated */
    for (size_t a = 0; a < 3; a++)
      if (out[a] && attn_overlap(x, span * sizeof(float), out[a], out_bytes[a])) return ATTN_E_ALIASING;
  }
  if (d->feature_map == ATTN_FEATURE_FAVOR && d->favor_source >= ATTN_FAVOR_CALLER &&
      attn_overlap(d->favor_w, p.m * d->shape.d * sizeof(float), workspace, workspace_size))
    return ATTN_E_ALIASING;
  float *ws = attn_ws_base(workspace);
  const float *wt = lin_favor_wt(d, p.m, &l, ws);
  ws += l.wt_floats;
  if (windowed) {
    bp.fa.wt = wt;
    const attn_blocked_io io = {q, k, v, o, NULL, {0, 0}, NULL, NULL};
    attn_blocked_run_all(&bp, uk, &io, ws);
    return ATTN_OK;
  }
  p.fa.wt = wt;
  const attn_chunkwise_io io = {q, k, v, o, state ? state->data : NULL, log_gate, beta};
  attn_chunkwise_run_all(&p, uk, &io, ws);
  if (state) state->tokens += p.xg ? d->shape.n_kv / p.xg * p.xg : d->shape.n_kv; /* the absorbed keys */
  return ATTN_OK;
}

attn_status attn_linear_favor_matrix(const attn_linear_desc *d, float *w, size_t w_floats, void *workspace,
                                     size_t workspace_size) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = lin_validate(d, &sp, &p);
  if (st) return st;
  if (d->feature_map != ATTN_FEATURE_FAVOR || d->favor_source >= ATTN_FAVOR_CALLER) return ATTN_E_BAD_FEATURE_MATRIX;
  if (!w || !workspace) return ATTN_E_NULL_POINTER;
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  attn_blocked_plan bp;
  lin_ws l;
  if ((st = lin_plan(d, &p, &bp, NULL, uk, &l))) return st;
  const size_t md = p.m * d->shape.d;
  if (w_floats < md || workspace_size < l.bytes) return ATTN_E_WORKSPACE_TOO_SMALL;
  if (attn_overlap(w, md * sizeof(float), workspace, workspace_size)) return ATTN_E_ALIASING;
  float *gw = attn_ws_base(workspace) + l.wt_floats;
  attn_favor_generate(p.m, d->shape.d, d->favor_seed, d->favor_source == ATTN_FAVOR_SEED_SQRT_D, w,
                      (double *)(void *)(gw + l.gen_w_floats));
  return ATTN_OK;
}

attn_status attn_retnet_log_decays(size_t heads, float *log_gamma) {
  if (!log_gamma) return ATTN_E_NULL_POINTER;
  if (!heads) return ATTN_E_ZERO_SIZE;
  for (size_t h = 0; h < heads; h++) log_gamma[h] = (float)log1p(-ldexp(1.0, -5 - (int)attn_min_sz(h, 2000)));
  return ATTN_OK;
}
