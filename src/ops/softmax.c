/*
 * Softmax and sliding-window attention (attn.h): the blocked score engine with the online-softmax
 * score step. Per row: running max m, running sum l, and the rescale factor alpha of the block
 * (the step kernel's outputs); o = acc / l, lse = m + log l.
 * Non-finite inputs (the policy in attn.h): a NaN or infinite q or k makes a score NaN or +-inf;
 * the engine turns -inf scores of visible pairs into NaN on boundary blocks and the kernel does on
 * unmasked ones, and a NaN or +inf score leaves l = NaN: the epilogue writes a NaN row. A non-finite
 * v shows in acc, and the epilogue writes a NaN row.
 * Statistics (attn_softmax_stats): the same step with the kernel's statistics, row state
 * m, l, alpha, q2, e (engine/blocked.h): W = l, sum w^2 = q2 and sum w log w = e for the weights
 * w = exp(s - m), so the entropy is log l - e / l (the LSE minus the mean logit) and the sparsity
 * l / sqrt(n q2). A row whose l is NaN or 0 gets NaN for both.
 */
#include "engine/blocked.h"

static void sm_init(float *rs, size_t R, size_t rows, const attn_step_rows *w) {
  (void)w;
  for (size_t r = 0; r < rows; r++) {
    rs[r] = -INFINITY; /* m */
    rs[R + r] = 0.0f;  /* l */
  }
}

static const float *sm_step(const struct attn_ukernels *uk, const attn_step_block *b, float *rs, size_t R) {
  uk->softmax_block(b->nk, b->nq, b->st, b->ld, rs, rs + R, rs + 2 * R, b->stats ? rs + 3 * R : NULL, R, b->masked);
  return rs + 2 * R;
}

/* o = acc / l, lse = m + log l. l = 0 (no visible key): zeros and -inf. l NaN (the row used a
 * non-finite q or k): NaN and NaN. A non-finite acc (a visible v was non-finite): the whole o row
 * NaN, lse as computed. */
static void sm_finish(const float *acc, const float *rs, size_t R, size_t r, size_t dv, float *orow, float *lse,
                      const void *params) {
  (void)params;
  const float m = rs[r], l = rs[R + r];
  if (l > 0.0f) {
    const float inv = 1.0f / l;
    if (attn_rows_finite(acc, 1, dv, 0)) {
      for (size_t x = 0; x < dv; x++) orow[x] = acc[x] * inv;
    } else {
      attn_fill_nan(orow, dv);
    }
    if (lse) *lse = m + logf(l);
  } else if (l == 0.0f) {
    for (size_t x = 0; x < dv; x++) orow[x] = 0.0f;
    if (lse) *lse = -INFINITY;
  } else {
    attn_fill_nan(orow, dv);
    if (lse) *lse = NAN;
  }
}

/* A later key range's state (m2, l2, acc2; statistics q2, e) into an earlier one's: with M the
 * larger maximum, each side's weights scale by a = e^(m - M), so l = a l1 + b l2, acc likewise,
 * sum w^2 by a^2 and sum w log w = a (e1 + l1 (m1 - M)) + the same of part 2. A side whose
 * maximum is -inf (no visible key yet) weighs 0; an empty later range changes nothing. NaN and
 * +inf maxima (non-finite scores) make l NaN, as one state would. */
static void sm_merge(float *acc, float *rs, size_t R, const float *acc2, const float *rs2, size_t R2, size_t rows,
                     size_t dv, int stats) {
  for (size_t r = 0; r < rows; r++) {
    const float m1 = rs[r], m2 = rs2[r], l1 = rs[R + r], l2 = rs2[R2 + r];
    if (m2 == -INFINITY && l2 == 0.0f) continue;
    const float M = m1 > m2 ? m1 : m2, a = m1 == -INFINITY ? 0.0f : expf(m1 - M), b = expf(m2 - M);
    rs[r] = M;
    rs[R + r] = a * l1 + b * l2;
    float *o = acc + r * dv;
    const float *o2 = acc2 + r * dv;
    for (size_t x = 0; x < dv; x++) o[x] = a * o[x] + b * o2[x];
    if (!stats) continue;
    rs[3 * R + r] = a * a * rs[3 * R + r] + b * b * rs2[3 * R2 + r];
    const float e1 = a > 0.0f ? a * (rs[4 * R + r] + l1 * (m1 - M)) : 0.0f;
    rs[4 * R + r] = e1 + b * (rs2[4 * R2 + r] + l2 * (m2 - M));
  }
}

const attn_score_step attn_softmax_score_step = {3, 0, sm_init, sm_step, sm_finish, 2, {1, 3, 4}, sm_merge};

attn_status attn_softmax_desc_init(attn_softmax_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dim,
                                   size_t dv) {
  if (!d) return ATTN_E_NULL_POINTER;
  *d = (attn_softmax_desc){0};
  attn_shape_init(&d->shape, n_q, n_kv, h_q, h_kv, h_kv, dim, dv);
  d->mask = attn_mask_full();
  d->scale = dim ? (float)(1.0 / sqrt((double)dim)) : 1.0f;
  d->lse = (attn_layout){h_q, 1};
  return ATTN_OK;
}

static attn_status sm_prepare(const attn_softmax_desc *d, attn_blocked_call *c) {
  attn_status st;
  if (!d) return ATTN_E_NULL_POINTER;
  if ((st = attn_blocked_call_check(c, &d->shape, d->scale, &d->lse))) return st;
  return attn_blocked_plan_make(&c->plan, &d->shape, d->mask, d->scale, &attn_softmax_score_step, NULL, NULL, NULL,
                                c->uk);
}

attn_status attn_softmax_workspace_size(const attn_softmax_desc *d, size_t *bytes) {
  attn_blocked_call c;
  attn_status st = sm_prepare(d, &c);
  if (st) return st;
  if (!bytes) return ATTN_E_NULL_POINTER;
  *bytes = c.plan.scratch_bytes;
  return ATTN_OK;
}

/* attn_softmax, with the statistics when `want` (stats validated; NULL is then an error). */
static attn_status sm_run(const attn_softmax_desc *d, const float *q, const void *k, const void *v, float *o,
                          float *lse, int want, const attn_row_stats *stats, void *workspace, size_t workspace_size) {
  attn_blocked_call c;
  attn_status st = sm_prepare(d, &c);
  if (st) return st;
  if (!q || !k || !v || !o || !workspace) return ATTN_E_NULL_POINTER;
  if (workspace_size < c.plan.scratch_bytes) return ATTN_E_WORKSPACE_TOO_SMALL;
  void *out[6] = {o, lse, workspace};
  size_t out_bytes[6] = {c.sp.o * sizeof(float), c.aux_span * sizeof(float), workspace_size}, n = 3;
  if (want && (st = attn_blocked_stats_outputs(&c, stats, out, out_bytes, &n))) return st;
  if ((st = attn_check_io(&c.sp, q, k, v, out, out_bytes, n))) return st;
  const attn_blocked_io io = {q, k, v, o, lse, d->lse, NULL, want ? stats : NULL};
  attn_blocked_run_all(&c.plan, c.uk, &io, attn_ws_base(workspace));
  return ATTN_OK;
}

attn_status attn_softmax(const attn_softmax_desc *d, const float *q, const void *k, const void *v, float *o, float *lse,
                         void *workspace, size_t workspace_size) {
  return sm_run(d, q, k, v, o, lse, 0, NULL, workspace, workspace_size);
}

attn_status attn_softmax_stats(const attn_softmax_desc *d, const float *q, const void *k, const void *v, float *o,
                               float *lse, const attn_row_stats *stats, void *workspace, size_t workspace_size) {
  return sm_run(d, q, k, v, o, lse, 1, stats, workspace, workspace_size);
}
