/*
 * Windowed linear attention (attn.h: any mask but full and causal) on the blocked score engine:
 * its score steps, for the element-wise maps and for the exponential maps, and its plan.
 */
#include "ops/linear_internal.h"

/* A mask other than full and causal: windowed linear attention on the blocked engine. */
int attn_lin_windowed(const attn_linear_desc *d) {
  const attn_mask k = d->mask;
  return !attn_mask_is_causal(k) && !(k.left == ATTN_UNBOUNDED && k.right == ATTN_UNBOUNDED && k.chunk == 0);
}

/* Windowed linear attention's score step (engine/blocked.h): the scores phi(q_i) . psi(k_j) are
 * the weights themselves; per row the running denominator sum_j of them. */
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

/* o = s acc / (s den + eps) (zero denominator: 0; one whose factor overflows, subnormal: divided
 * in double), or s acc; a non-finite acc: a NaN row. */
static void lw_finish(const float *acc, const float *rs, size_t R, size_t r, size_t dv, float *orow, float *aux,
                      const void *params) {
  (void)R, (void)aux;
  const attn_lin_window_params *lp = params;
  const float den = lp->normalize ? lp->scale * rs[r] + lp->eps : 1.0f;
  const float f = lp->scale * (den == 0.0f ? 0.0f : 1.0f / den);
  if (!attn_rows_finite(acc, 1, dv, 0) || isnan(den)) {
    attn_fill_nan(orow, dv);
    return;
  }
  if (!isfinite(f) && isfinite(den)) { /* (scale 0: 0 inf) */
    attn_row_div(dv, acc, lp->scale, den, orow);
    return;
  }
  for (size_t x = 0; x < dv; x++) orow[x] = acc[x] * f;
}

static const attn_score_step lin_window_step = {1, 0, lw_init, lw_step, lw_finish, 0, {0, 0, 0}, NULL, 0};

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

static const attn_score_step lin_xwindow_step = {4, 0, lx_init, lx_step, lw_finish, 0, {0, 0, 0}, NULL, 0};

/* The blocked plan of a windowed call (m: the map's feature size; favor's W^T comes with the call). */
attn_status attn_lin_window_plan(const attn_linear_desc *d, size_t m, attn_blocked_plan *bp,
                                 const attn_lin_window_params *lp, const struct attn_ukernels *uk) {
  const attn_featmap *fm = attn_featmap_get(d->feature_map);
  const attn_blocked_features feat = {.fm = fm, .xs = fm->offsets ? sqrtf(d->scale) : 1.0f, .m = m};
  const attn_blocked_spec spec = {.shape = &d->shape,
                                  .mask = d->mask,
                                  .scale = 1.0f,
                                  .step = fm->offsets ? &lin_xwindow_step : &lin_window_step,
                                  .step_params = lp,
                                  .feat = &feat};
  return attn_blocked_plan_make(bp, &spec, uk);
}

/* The windowed step's parameters: exponential maps are normalised and scale their inputs. */
attn_lin_window_params attn_lin_window_params_of(const attn_linear_desc *d) {
  const int x = attn_featmap_get(d->feature_map)->offsets;
  return (attn_lin_window_params){x ? 1.0f : d->scale, d->eps, x ? 1 : d->normalize};
}
