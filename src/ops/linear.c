/*
 * Linear attention (attn.h): the chunkwise engine with a feature map from the registry and the
 * identity state transition. This file holds linear attention's descriptor, its validation and the
 * call's plan and workspace; the caller-owned state (S | z | offset rows per state head,
 * engine/chunkwise.h) is linear_state.c, the windowed form linear_window.c, the compute entry
 * points linear_call.c (internals shared between them: linear_internal.h).
 */
#include "core/favor_rng.h"
#include "ops/linear_internal.h"

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

attn_lin_gate_tensor attn_lin_gate_of(const attn_linear_desc *d, const attn_chunkwise_plan *p, int beta) {
  const attn_layout l = beta ? d->beta_layout : d->gate_layout;
  return (attn_lin_gate_tensor){l, l.row_stride ? d->shape.n_kv : 1, !beta && d->gate == ATTN_GATE_FEATURE ? p->m : 1};
}

/* Why a gate tensor's layout was refused; a per-feature gate's m values per head need their own
 * strides (attn_linear_desc_init's gate_layout is a scalar gate's). */
static ATTN_COLD attn_status lin_gate_layout_fail(attn_status st, const attn_linear_desc *d,
                                                  const attn_chunkwise_plan *p, int beta) {
  const attn_lin_gate_tensor t = attn_lin_gate_of(d, p, beta);
  attn_fail_layout(st, beta ? "desc.beta_layout" : "desc.gate_layout",
                   beta || d->gate != ATTN_GATE_FEATURE ? NULL : "m", t.rows, p->g.h_g, t.width, t.l);
  if (beta || d->gate != ATTN_GATE_FEATURE || st != ATTN_E_BAD_STRIDE) return st;
  return attn_fail_more(st,
                        ": a per-feature gate has m log gates per head: [n_kv][h_g][m] is gate_layout {h_g m, m} = "
                        "{%zu, %zu} (row_stride 0: the same gates for every token)",
                        p->g.h_g * t.width, t.width);
}

/* Its span in elements (and the stride checks). */
attn_status attn_lin_gate_span(const attn_linear_desc *d, const attn_chunkwise_plan *p, int beta, size_t *span) {
  const attn_lin_gate_tensor t = attn_lin_gate_of(d, p, beta);
  const attn_status st = attn_check_input(t.rows, p->g.h_g, t.width, t.l, span);
  return st ? lin_gate_layout_fail(st, d, p, beta) : ATTN_OK;
}

/* Why attn_lin_validate refused the values of scale, eps or the map's W (after the checks before). */
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

/* The validation of attn_lin_validate before the plan: the descriptor's fields, in order. */
static attn_status lin_fields(const attn_linear_desc *d, const attn_featmap *fm, const attn_spans *sp, int gated) {
  if (!fm)
    return attn_fail(ATTN_E_BAD_FEATURE_MAP, "desc.feature_map %d: not an attn_feature_map", (int)d->feature_map);
  /* Any other mask than full and causal is a window: the blocked engine's heads (h_k == h_v
   * dividing h_q), no gate. */
  if (attn_lin_windowed(d) && (d->shape.h_k != d->shape.h_v || sp->H != d->shape.h_q))
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
attn_status attn_lin_validate(const attn_linear_desc *d, attn_spans *sp, attn_chunkwise_plan *p) {
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
  if (!st && d->gate != ATTN_GATE_NONE) st = attn_lin_gate_span(d, p, 0, &span);
  if (!st && d->beta) st = attn_lin_gate_span(d, p, 1, &span);
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

static ATTN_COLD attn_status lin_ws_overflow(const attn_linear_desc *d, size_t m) {
  return attn_fail(ATTN_E_SIZE_OVERFLOW, "the FAVOR+ workspace of m %zu, d %zu overflows size_t", m, d->shape.d);
}

static attn_status lin_ws_plan(const attn_linear_desc *d, size_t m, size_t engine_bytes, attn_lin_ws *l) {
  *l = (attn_lin_ws){0, 0, engine_bytes};
  if (d->feature_map != ATTN_FEATURE_FAVOR || d->favor_source == ATTN_FAVOR_CALLER_T) return ATTN_OK;
  attn_ws w = {0, 0};
  const size_t md = m * d->shape.d; /* checked by attn_lin_validate */
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
attn_status attn_lin_plan(const attn_linear_desc *d, attn_chunkwise_plan *p, attn_blocked_plan *bp,
                          const attn_lin_window_params *lp, const struct attn_ukernels *uk, attn_lin_ws *l) {
  const int w = attn_lin_windowed(d);
  attn_status st =
      w ? attn_lin_window_plan(d, p->m, bp, lp, uk) : attn_lin_plan_ld(p, attn_lin_ld_aligned(d->shape.dv));
  if (!w && !st) st = attn_chunkwise_plan_make(p, d->chunk, uk);
  return st ? st : lin_ws_plan(d, p->m, w ? bp->reserve_bytes : p->scratch_bytes, l);
}

attn_status attn_retnet_log_decays(size_t heads, float *log_gamma) {
  if (!log_gamma) return attn_fail(ATTN_E_NULL_POINTER, "log_gamma is NULL");
  if (!heads) return attn_fail(ATTN_E_ZERO_SIZE, "heads is 0");
  for (size_t h = 0; h < heads; h++) log_gamma[h] = (float)log1p(-ldexp(1.0, -5 - (int)attn_min_sz(h, 2000)));
  return ATTN_OK;
}
