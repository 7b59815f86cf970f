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
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
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

static const char *lin_gate_name(attn_gate_kind g) {
  return g == ATTN_GATE_SCALAR ? "ATTN_GATE_SCALAR" : g == ATTN_GATE_FEATURE ? "ATTN_GATE_FEATURE" : "ATTN_GATE_NONE";
}

/* Why a gate tensor's layout was refused; a per-feature gate's m values per head need their own
 * strides (attn_linear_desc_init's gate_layout is a scalar gate's). */
static ATTN_COLD attn_status lin_gate_layout_fail(attn_status st, const attn_linear_desc *d,
                                                  const attn_chunkwise_plan *p, int beta) {
  const lin_gate_tensor t = lin_gate_of(d, p, beta);
  attn_fail_layout(st, beta ? "desc.beta_layout" : "desc.gate_layout",
                   beta || d->gate != ATTN_GATE_FEATURE ? NULL : "m", t.rows, p->g.h_g, t.width, t.l);
  if (beta || d->gate != ATTN_GATE_FEATURE || st != ATTN_E_BAD_STRIDE) return st;
  return attn_fail_more(st,
                        ": a per-feature gate has m log gates per head: [n_kv][h_g][m] is gate_layout {h_g m, m} = "
                        "{%zu, %zu} (row_stride 0: the same gates for every token)",
                        p->g.h_g * t.width, t.width);
}

/* Its span in elements (and the stride checks). */
static attn_status lin_gate_span(const attn_linear_desc *d, const attn_chunkwise_plan *p, int beta, size_t *span) {
  const lin_gate_tensor t = lin_gate_of(d, p, beta);
  const attn_status st = attn_check_input(t.rows, p->g.h_g, t.width, t.l, span);
  return st ? lin_gate_layout_fail(st, d, p, beta) : ATTN_OK;
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

/* Why lin_validate refused the values of scale, eps or the map's W (after the checks before). */
static ATTN_COLD attn_status lin_scale_fail(const attn_linear_desc *d) {
  if (!isfinite(d->scale)) return attn_fail(ATTN_E_BAD_SCALE, "desc.scale %g: must be finite", (double)d->scale);
  if (d->feature_map == ATTN_FEATURE_DSOFTMAX)
    return attn_fail(ATTN_E_BAD_SCALE, "desc.scale %g: dsoftmax takes 1", (double)d->scale);
  return attn_fail(ATTN_E_BAD_SCALE, "desc.scale %g: the exp and favor maps take a positive temperature",
                   (double)d->scale);
}

static ATTN_COLD attn_status lin_eps_fail(const attn_linear_desc *d) {
  if (d->feature_map == ATTN_FEATURE_DSOFTMAX && isfinite(d->eps) && d->eps > 0.0f)
    return attn_fail(ATTN_E_BAD_EPS, "desc.eps %g: dsoftmax takes 0", (double)d->eps);
  return attn_fail(ATTN_E_BAD_EPS, "desc.eps %g: must be finite and >= 0", (double)d->eps);
}

static ATTN_COLD attn_status lin_map_fail(const char *what, const attn_linear_desc *d) {
  return attn_fail(ATTN_E_BAD_FEATURE_MAP, "%s needs an element-wise map (identity, elu1, relu), not feature_map %d",
                   what, (int)d->feature_map);
}

/* The validation of lin_validate before the plan: the descriptor's fields, in order. */
static attn_status lin_fields(const attn_linear_desc *d, const attn_featmap *fm, const attn_spans *sp, int gated) {
  if (!fm)
    return attn_fail(ATTN_E_BAD_FEATURE_MAP, "desc.feature_map %d: not an attn_feature_map", (int)d->feature_map);
  /* Any other mask than full and causal is a window: the blocked engine's heads (h_k == h_v
   * dividing h_q), no gate. */
  if (lin_windowed(d) && (d->shape.h_k != d->shape.h_v || sp->H != d->shape.h_q))
    return attn_fail(ATTN_E_BAD_HEADS, "a windowed mask needs shape.h_k = shape.h_v dividing shape.h_q (%zu, %zu, %zu)",
                     d->shape.h_k, d->shape.h_v, d->shape.h_q);
  if (d->normalize != 0 && d->normalize != 1)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.normalize %d: must be 0 or 1", d->normalize);
  if (d->chunk > ATTN_LINEAR_MAX_CHUNK)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.chunk %zu > ATTN_LINEAR_MAX_CHUNK %d", d->chunk, ATTN_LINEAR_MAX_CHUNK);
  if ((unsigned)d->gate > ATTN_GATE_FEATURE)
    return attn_fail(ATTN_E_BAD_GATE, "desc.gate %d: not an attn_gate_kind", (int)d->gate);
  if (d->beta != 0 && d->beta != 1) return attn_fail(ATTN_E_BAD_GATE, "desc.beta %d: must be 0 or 1", d->beta);
  /* Gates, then FLASH's chunk-exclusive form (no gate): causal, element-wise maps. */
  const int causal = attn_mask_is_causal(d->mask);
  if (gated && !causal) return attn_fail(ATTN_E_BAD_WINDOW, "a gate or beta needs the causal mask");
  if (gated && fm->offsets) return lin_map_fail("a gate or beta", d);
  if (d->exclusive_chunk && !causal) return attn_fail(ATTN_E_BAD_WINDOW, "desc.exclusive_chunk needs the causal mask");
  if (d->exclusive_chunk && gated) return attn_fail(ATTN_E_BAD_WINDOW, "desc.exclusive_chunk takes no gate or beta");
  if (d->exclusive_chunk && fm->offsets) return lin_map_fail("desc.exclusive_chunk", d);
  /* Exponential maps are normalised only: their offsets would not cancel otherwise. */
  if (fm->offsets && !d->normalize)
    return attn_fail(
        ATTN_E_BAD_NORMALIZATION,
        "desc.normalize 0: the exponential maps (exp, favor, dsoftmax) are normalised only (feature_map %d)",
        (int)d->feature_map);
  const int dsoftmax = d->feature_map == ATTN_FEATURE_DSOFTMAX;
  if (!isfinite(d->scale) || (dsoftmax ? d->scale != 1.0f : fm->offsets && !(d->scale > 0.0f)))
    return lin_scale_fail(d);
  if (!isfinite(d->eps) || d->eps < 0.0f || (dsoftmax && d->eps != 0.0f)) return lin_eps_fail(d);
  if (d->feature_map != ATTN_FEATURE_FAVOR) return ATTN_OK;
  if ((unsigned)d->favor_source > ATTN_FAVOR_CALLER_T)
    return attn_fail(ATTN_E_BAD_FEATURE_MATRIX, "desc.favor_source %d: not an attn_favor_source", (int)d->favor_source);
  if (d->favor_source >= ATTN_FAVOR_CALLER && !d->favor_w)
    return attn_fail(ATTN_E_BAD_FEATURE_MATRIX, "desc.favor_w is NULL with a caller's matrix (favor_source %d)",
                     (int)d->favor_source);
  return ATTN_OK;
}

/* Validation and the sizes that do not depend on the path; spans of the tensors in *sp. */
static attn_status lin_validate(const attn_linear_desc *d, attn_spans *sp, attn_chunkwise_plan *p) {
  attn_status st;
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  const int gated = d->gate != ATTN_GATE_NONE || d->beta;
  if ((st = attn_shape_check(&d->shape, gated ? d->h_g : 0, sp))) return st;
  if (d->shape.kv_type != ATTN_F32) /* fp32 K and V only */
    return attn_fail(ATTN_E_BAD_DTYPE, "shape.kv_type %d: linear attention takes ATTN_F32 K and V only",
                     (int)d->shape.kv_type);
  const attn_featmap *fm = attn_featmap_get(d->feature_map);
  if ((st = lin_fields(d, fm, sp, gated))) return st;
  const int full = d->mask.left == ATTN_UNBOUNDED && d->mask.right == ATTN_UNBOUNDED && d->mask.chunk == 0;
  const int favor = d->feature_map == ATTN_FEATURE_FAVOR, caller_w = favor && d->favor_source >= ATTN_FAVOR_CALLER;
  /* h_g joined H in the shape check */
  const attn_chunkwise_gates g = {d->gate, d->beta, gated ? (d->h_g ? d->h_g : sp->H) : 1, d->gate_layout,
                                  d->beta_layout};
  st = attn_chunkwise_shape(p, &d->shape, sp->H, fm, d->m, !full, d->normalize, d->scale, d->eps, &g);
  p->xg = d->exclusive_chunk;
  size_t span;
  if (!st && d->gate != ATTN_GATE_NONE) st = lin_gate_span(d, p, 0, &span);
  if (!st && d->beta) st = lin_gate_span(d, p, 1, &span);
  if (st || !favor) return st;
  size_t md;
  if (!attn_mul_ok(p->m, d->shape.d, &md) || md > SIZE_MAX / sizeof(float))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "FAVOR+'s W: m %zu x d %zu floats overflows", p->m, d->shape.d);
  if (caller_w && !attn_rows_finite(d->favor_w, 1, md, md)) {
    const size_t i = attn_first_nonfinite(d->favor_w, md);
    return attn_fail(ATTN_E_BAD_FEATURE_MATRIX, "desc.favor_w[%zu] = %g: must be finite", i, (double)d->favor_w[i]);
  }
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

static ATTN_COLD attn_status lin_ws_overflow(const attn_linear_desc *d, size_t m) {
  return attn_fail(ATTN_E_SIZE_OVERFLOW, "the FAVOR+ workspace of m %zu, d %zu overflows size_t", m, d->shape.d);
}

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
    if (!dbl || dbl > SIZE_MAX / 2) return lin_ws_overflow(d, m);
    (void)attn_ws_take(&g, 2 * dbl);
    if (!attn_ws_bytes(&g, &gen)) return lin_ws_overflow(d, m);
  }
  size_t wt_bytes;
  if (w.overflow || !attn_mul_ok(l->wt_floats, sizeof(float), &wt_bytes) ||
      !attn_add_ok(wt_bytes, attn_max_sz(engine_bytes, gen), &l->bytes))
    return lin_ws_overflow(d, m);
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
  if (!out)
    return attn_fail(ATTN_E_NULL_POINTER, "%s is NULL",
                     what == LIN_FEATURES ? "m"
                     : what == LIN_CHUNK  ? "chunk"
                                          : "bytes");
  if (what == LIN_FEATURES || what == LIN_STATE_BYTES) {
    *out = what == LIN_FEATURES ? p.m : p.state_floats * sizeof(float);
    return ATTN_OK;
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
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
  if (!s || !memory) return attn_fail_null("state memory", (const void *[]){s, memory});
  if (bytes < p.state_floats * sizeof(float)) return attn_fail_ws("bytes", bytes, p.state_floats * sizeof(float));
  *s = lin_state_of(d, &p, (float *)memory);
  memset(memory, 0, p.state_floats * sizeof(float));
  return ATTN_OK;
}

attn_status attn_linear_state_reset(attn_linear_state *s) {
  if (!s || !s->data) return attn_fail(ATTN_E_NULL_POINTER, "%s is NULL", s ? "state->data" : "state");
  memset(s->data, 0, state_bytes(s));
  s->tokens = 0;
  return ATTN_OK;
}

static int state_same_shape(const attn_linear_state *a, const attn_linear_state *b) {
  return a->heads == b->heads && a->m == b->m && a->dv == b->dv && a->ld == b->ld && a->feature_map == b->feature_map &&
         a->normalize == b->normalize;
}

/* The first field in which state a differs from b: "<a_is> 2 heads, <b_is> 8", "<a_is> dv 5,
 * <b_is> 6" (b: the state the call needs, or another state). */
static ATTN_COLD attn_status state_mismatch(const attn_linear_state *a, const attn_linear_state *b, const char *a_is,
                                            const char *b_is) {
  const size_t x[] = {a->heads, a->m, a->dv, a->ld, (size_t)a->feature_map, (size_t)a->normalize};
  const size_t y[] = {b->heads, b->m, b->dv, b->ld, (size_t)b->feature_map, (size_t)b->normalize};
  size_t i = 0;
  while (i < 5 && x[i] == y[i]) i++;
  if (i == 0) return attn_fail(ATTN_E_STATE_MISMATCH, "%s %zu heads, %s %zu", a_is, x[0], b_is, y[0]);
  const char *what;
  const int len = (int)attn_name_at("heads m dv ld feature_map normalize", i, &what);
  return attn_fail(ATTN_E_STATE_MISMATCH, "%s %.*s %zu, %s %zu", a_is, len, what, x[i], b_is, y[i]);
}

attn_status attn_linear_state_copy(attn_linear_state *dst, const attn_linear_state *src) {
  if (!dst || !src) return attn_fail_null("dst src", (const void *[]){dst, src});
  if (!dst->data || !src->data) return attn_fail(ATTN_E_NULL_POINTER, "%s->data is NULL", dst->data ? "src" : "dst");
  if (!state_same_shape(dst, src)) return state_mismatch(dst, src, "dst has", "src");
  const size_t n = state_bytes(src);
  if (dst->data != src->data) {
    if (attn_overlap(dst->data, n, src->data, n))
      return attn_fail(ATTN_E_ALIASING, "dst->data overlaps src->data (and is not the same)");
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

/* The first bad log gate (then beta) that lin_check_gates found, in token, head, feature order. */
static ATTN_COLD attn_status lin_bad_gate(const attn_linear_desc *d, const attn_chunkwise_plan *p, const float *lg,
                                          const float *beta) {
  for (int which = 0; which < 2; which++) {
    const float *x = which ? beta : lg;
    const lin_gate_tensor g = lin_gate_of(d, p, which);
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
  return atomic_load_explicit(&c.bad, memory_order_relaxed) ? lin_bad_gate(d, p, lg, beta) : ATTN_OK;
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

/* A gate or beta that desc asks for is NULL: through attn_linear (gated 0), the wrong call. */
static ATTN_COLD attn_status lin_gates_null(const attn_linear_desc *d, const float *log_gate, int gated) {
  if (!gated && d->gate != ATTN_GATE_NONE)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.gate is %s: call attn_linear_gated", lin_gate_name(d->gate));
  if (!gated) return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.beta is 1: call attn_linear_gated");
  if (d->gate != ATTN_GATE_NONE && !log_gate)
    return attn_fail(ATTN_E_NULL_POINTER, "log_gate is NULL: desc.gate is %s", lin_gate_name(d->gate));
  return attn_fail(ATTN_E_NULL_POINTER, "beta is NULL: desc.beta is 1");
}

/* attn_linear (gated 0: a descriptor with a gate or beta is the wrong call) and attn_linear_gated. */
static attn_status lin_run(const attn_linear_desc *d, const float *q, const float *k, const float *v,
                           const float *log_gate, const float *beta, float *o, attn_linear_state *state,
                           void *workspace, size_t workspace_size, int gated) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = lin_validate(d, &sp, &p);
  if (st) return st;
  if (!q || !k || !v || !o || !workspace)
    return attn_fail_null("q k v o workspace", (const void *[]){q, k, v, o, workspace});
  if ((d->gate != ATTN_GATE_NONE && !log_gate) || (d->beta && !beta)) return lin_gates_null(d, log_gate, gated);
  if (d->gate == ATTN_GATE_NONE) log_gate = NULL;
  if (!d->beta) beta = NULL;
  if ((st = lin_check_gates(d, &p, log_gate, beta))) return st;
  /* A window runs on the blocked engine and keeps no state (the caller keeps K and V). */
  const int windowed = lin_windowed(d);
  if (state && (windowed || !p.causal))
    return attn_fail(ATTN_E_BAD_ARGUMENT, "state must be NULL: a %s call keeps no state",
                     windowed ? "windowed" : "bidirectional");
  if (state) {
    if (!state->data) return attn_fail(ATTN_E_NULL_POINTER, "state->data is NULL");
    const attn_linear_state want = lin_state_of(d, &p, NULL);
    if (!state_same_shape(state, &want)) return state_mismatch(state, &want, "state has", "the call needs");
    if (p.xg && state->tokens % p.xg)
      return attn_fail(ATTN_E_STATE_MISMATCH, "state->tokens %zu: not a multiple of desc.exclusive_chunk %zu",
                       state->tokens, p.xg);
  }
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return attn_fail_isa();
  const lin_window_params lp = lin_window_params_of(d);
  attn_blocked_plan bp;
  lin_ws l;
  if ((st = lin_plan(d, &p, &bp, &lp, uk, &l))) return st;
  if (workspace_size < l.bytes) return attn_fail_ws("workspace_size", workspace_size, l.bytes);
  static const char out_names[] = "o workspace state->data";
  void *out[] = {o, workspace, state ? state->data : NULL};
  const size_t out_bytes[] = {sp.o * sizeof(float), workspace_size, p.state_floats * sizeof(float)};
  if ((st = attn_check_io(&sp, q, k, v, out, out_bytes, 3)))
    return attn_fail_io(out_names, &sp, q, k, v, out, out_bytes, 3);
  for (int which = 0; which < 2; which++) { /* the gates are inputs too */
    const float *x = which ? beta : log_gate;
    size_t span;
    if (!x) continue;
    (void)lin_gate_span(d, &p, which, &span); /* validated */
    for (size_t a = 0; a < 3; a++)
      if (out[a] && attn_overlap(x, span * sizeof(float), out[a], out_bytes[a])) {
        const char *name;
        const int len = (int)attn_name_at(out_names, a, &name);
        return attn_fail(ATTN_E_ALIASING, "%.*s overlaps input %s", len, name, which ? "beta" : "log_gate");
      }
  }
  if (d->feature_map == ATTN_FEATURE_FAVOR && d->favor_source >= ATTN_FAVOR_CALLER &&
      attn_overlap(d->favor_w, p.m * d->shape.d * sizeof(float), workspace, workspace_size))
    return attn_fail(ATTN_E_ALIASING, "workspace overlaps input desc.favor_w");
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

attn_status attn_linear(const attn_linear_desc *d, const float *q, const float *k, const float *v, float *o,
                        attn_linear_state *state, void *workspace, size_t workspace_size) {
  return lin_run(d, q, k, v, NULL, NULL, o, state, workspace, workspace_size, 0);
}

attn_status attn_linear_gated(const attn_linear_desc *d, const float *q, const float *k, const float *v,
                              const float *log_gate, const float *beta, float *o, attn_linear_state *state,
                              void *workspace, size_t workspace_size) {
  return lin_run(d, q, k, v, log_gate, beta, o, state, workspace, workspace_size, 1);
}

attn_status attn_linear_favor_matrix(const attn_linear_desc *d, float *w, size_t w_floats, void *workspace,
                                     size_t workspace_size) {
  attn_spans sp;
  attn_chunkwise_plan p;
  attn_status st = lin_validate(d, &sp, &p);
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
  lin_ws l;
  if ((st = lin_plan(d, &p, &bp, NULL, uk, &l))) return st;
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

attn_status attn_retnet_log_decays(size_t heads, float *log_gamma) {
  if (!log_gamma) return attn_fail(ATTN_E_NULL_POINTER, "log_gamma is NULL");
  if (!heads) return attn_fail(ATTN_E_ZERO_SIZE, "heads is 0");
  for (size_t h = 0; h < heads; h++) log_gamma[h] = (float)log1p(-ldexp(1.0, -5 - (int)attn_min_sz(h, 2000)));
  return ATTN_OK;
}
