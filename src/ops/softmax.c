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
#include "ops/softmax_internal.h"

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

const attn_score_step attn_softmax_score_step = {3, 0, sm_init, sm_step, sm_finish, 2, {1, 3, 4}, sm_merge, 1};

/*
 * The options (attn.h): a second step over the same kernel, chosen only when an option is on.
 * Before the kernel, each visible pair's logit in ST is soft-capped, then ALiBi and the bias are
 * added; the kernel then runs as on a boundary block (-inf: hidden). On blocks the engine did not
 * mask, a -inf logit (from an infinite input) is turned into NaN first, as the kernel would, so
 * that -inf keeps meaning "hidden" (by the mask or by the bias). Sinks enter the first key range's
 * row state: m = sink, l = 1 (and 1 in the statistics' sum w^2); at the end the engine takes the
 * sink's weight e^(sink - m) back out of the statistics' sums (plan.stats_sinks).
 */

static int sm_opts_on(const attn_softmax_desc *d) {
  return d->sinks || d->alibi_slopes || d->bias || d->softcap != 0.0f;
}

static void sm_opt_init(float *rs, size_t R, size_t rows, const attn_step_rows *w) {
  sm_init(rs, R, rows, w);
  const sm_opts *op = w->params;
  if (!op->sinks || !w->first) return;
  for (size_t r = 0; r < rows; r++) {   /* the sink's weight 1 at m = sink in every sum: l, the */
    rs[r] = op->sinks[w->h + r % w->g]; /* statistics' sum w^2 (array 3; sum w log w = 0), so that */
    rs[R + r] = 1.0f;                   /* the kernel rescales it with the keys' */
    rs[3 * R + r] = 1.0f;
  }
}

/* The options on a block of scores ST (nk keys x nq columns), in the order of attn.h, in the
 * path's kernels: the cap and ALiBi (attn_logit_opts_fn), then the bias (attn_transpose_fn, adding). */
static const float *sm_opt_step(const struct attn_ukernels *uk, const attn_step_block *b, float *rs, size_t R) {
  const sm_opts *op = b->params;
  /* the strip holds (keys per block + 2 tokens per block) g >= 2 nq floats */
  const size_t g = b->g, nq = b->nq, nk = b->nk, ld = b->ld, tn = nq / g;
  float *st = b->st;
  /* A -inf logit of a visible pair (an infinite input) must end NaN: on a block the engine did not
   * mask the softmax kernel does it, unless a bias can hide pairs (-inf then means hidden): then
   * the bias kernel does, before it adds. The cap and ALiBi keep -inf as it is. */
  const int hide = b->masked || op->bias;
  /* The cap and ALiBi in one pass of the path's kernel. ALiBi's slope (j - p_i) per column: the
   * slope and the token's offset from the block's first (exact as floats) in two tables. */
  float *sl = NULL, *tk = NULL;
  if (op->alibi) {
    sl = b->strip, tk = b->strip + nq;
    for (size_t ti = 0; ti < tn; ti++)
      for (size_t gi = 0; gi < g; gi++) sl[ti * g + gi] = op->alibi[b->h + gi], tk[ti * g + gi] = (float)ti;
  }
  uk->logit_opts(nk, nq, st, ld, op->softcap, sl, tk, b->j0 - b->p0);
  if (op->bias)
    uk->transpose(b->masked ? ATTN_TR_ADD_MASKED : ATTN_TR_ADD_NAN_NINF, nk, nq, g, st, ld,
                  op->bias + b->t * op->bl.row_stride + b->h * op->bl.head_stride + b->j0, op->bl.row_stride,
                  op->bl.head_stride);
  uk->softmax_block(nk, nq, st, ld, rs, rs + R, rs + 2 * R, b->stats ? rs + 3 * R : NULL, R, hide);
  return rs + 2 * R;
}

/* sm_finish, except that a row left with no key (l = 0) whose acc is not finite (a key hidden only
 * by a -inf bias, with a non-finite v: 0 x NaN) is NaN: such keys are read (attn.h). */
static void sm_opt_finish(const float *acc, const float *rs, size_t R, size_t r, size_t dv, float *orow, float *lse,
                          const void *params) {
  sm_finish(acc, rs, R, r, dv, orow, lse, params);
  if (rs[R + r] == 0.0f && !attn_rows_finite(acc, 1, dv, 0)) attn_fill_nan(orow, dv);
}

static const attn_score_step sm_opt_step_def = {3, 1, sm_opt_init, sm_opt_step, sm_opt_finish, 2, {1, 3, 4}, sm_merge, 0};

attn_status attn_softmax_desc_init(attn_softmax_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dim,
                                   size_t dv) {
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  *d = (attn_softmax_desc){0};
  attn_blocked_desc_defaults(&d->shape, &d->scale, n_q, n_kv, h_q, h_kv, dim, dv);
  d->mask = attn_mask_full();
  d->lse = (attn_layout){h_q, 1};
  d->bias_layout = (attn_layout){h_q * n_kv, n_kv};
  d->scale_layout = (attn_layout){h_kv, 1};
  return ATTN_OK;
}

/* A sink or slope array (h_q floats, name) that is not finite: its first bad element. */
static ATTN_COLD attn_status sm_bad_array(const char *name, const float *x, size_t n) {
  const size_t i = attn_first_nonfinite(x, n);
  return attn_fail(ATTN_E_BAD_BIAS, "desc.%s[%zu] = %g: must be finite", name, i, (double)x[i]);
}

/* The options' checks: softcap (ATTN_E_BAD_SCALE), sinks and slopes (ATTN_E_BAD_BIAS), the bias
 * tensor's span (ATTN_E_SIZE_OVERFLOW). */
static attn_status sm_options(const attn_softmax_desc *d, sm_call *c) {
  const attn_shape *s = &d->shape;
  c->op = (sm_opts){d->sinks, d->alibi_slopes, d->bias, d->bias_layout, d->softcap};
  c->bias_floats = c->scale_floats = 0;
  if (s->kv_type == ATTN_I8) { /* the scales: one float per (key, key head) */
    if (!d->k_scales || !d->v_scales)
      return attn_fail(ATTN_E_NULL_POINTER, "desc.%s is NULL: ATTN_I8 K/V take a scale per (token, head)",
                       d->k_scales ? "v_scales" : "k_scales");
    /* any strides (0 broadcasts: a scale per head, or one per tensor) */
    if (attn_layout_span(s->n_kv, s->h_k, 1, d->scale_layout, &c->scale_floats))
      return attn_fail(ATTN_E_SIZE_OVERFLOW, "desc.scale_layout {%zu, %zu}: the scales' span overflows",
                       d->scale_layout.row_stride, d->scale_layout.head_stride);
  }
  if (!(d->softcap >= 0.0f) || !isfinite(d->softcap))
    return attn_fail(ATTN_E_BAD_SCALE, "desc.softcap %g: must be 0 (none) or positive and finite", (double)d->softcap);
  if (d->sinks && !attn_rows_finite(d->sinks, 1, s->h_q, 0)) return sm_bad_array("sinks", d->sinks, s->h_q);
  if (d->alibi_slopes && !attn_rows_finite(d->alibi_slopes, 1, s->h_q, 0))
    return sm_bad_array("alibi_slopes", d->alibi_slopes, s->h_q);
  if (d->bias && attn_layout_span(s->n_q, s->h_q, s->n_kv, d->bias_layout, &c->bias_floats))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "desc.bias_layout {%zu, %zu}: the bias tensor's span overflows",
                     d->bias_layout.row_stride, d->bias_layout.head_stride);
  return ATTN_OK;
}

attn_status attn_softmax_plan(const attn_softmax_desc *d, const sm_call *c, const attn_shape *s, int paged,
                              attn_blocked_plan *p) {
  const int on = sm_opts_on(d);
  const attn_blocked_spec spec = {.shape = s,
                                  .mask = d->mask,
                                  .scale = d->scale,
                                  .step = on ? &sm_opt_step_def : &attn_softmax_score_step,
                                  .step_params = on ? &c->op : NULL,
                                  .stats_sinks = d->sinks,
                                  .paged = paged};
  return attn_blocked_plan_make(p, &spec, c->b.uk);
}

attn_status attn_softmax_prepare(const attn_softmax_desc *d, sm_call *c) {
  attn_status st;
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  if ((st = attn_blocked_call_check(&c->b, &d->shape, d->scale, &d->lse, 1))) return st;
  if ((st = sm_options(d, c))) return st;
  return attn_softmax_plan(d, c, &d->shape, 0, &c->b.plan);
}

attn_status attn_softmax_check_inputs(const attn_softmax_desc *d, const sm_call *c, const char *out_names,
                                      void *const *out, const size_t *out_bytes, size_t n) {
  const int i8 = d->shape.kv_type == ATTN_I8;
  const void *const in[5] = {d->sinks, d->alibi_slopes, d->bias, i8 ? d->k_scales : NULL, i8 ? d->v_scales : NULL};
  const size_t in_bytes[5] = {d->shape.h_q * sizeof(float), d->shape.h_q * sizeof(float),
                              c->bias_floats * sizeof(float), c->scale_floats * sizeof(float),
                              c->scale_floats * sizeof(float)};
  return attn_check_extra_inputs("desc.sinks desc.alibi_slopes desc.bias desc.k_scales desc.v_scales", in, in_bytes, 5,
                                 out_names, out, out_bytes, n);
}

ATTN_BLOCKED_WS_QUERIES(attn_softmax, attn_softmax_desc, sm_call, attn_softmax_prepare, b.plan)

/* attn_softmax, with the statistics when `want` (stats validated; NULL is then an error). */
static attn_status sm_run(const attn_softmax_desc *d, const void *q, const void *k, const void *v, void *o, float *lse,
                          int want, const attn_row_stats *stats, void *workspace, size_t workspace_size) {
  sm_call c;
  attn_status st = attn_softmax_prepare(d, &c);
  if (st) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, workspace_size, c.b.plan.scratch_bytes))) return st;
  void *out[6] = {o, lse, workspace};
  size_t out_bytes[6] = {c.b.sp.o * c.b.sp.o_elem, c.b.aux_span * sizeof(float), workspace_size}, n = 3;
  if (want && (st = attn_blocked_stats_outputs(&c.b, stats, out, out_bytes, &n))) return st;
  static const char out_names[] = "o lse workspace stats.entropy stats.sparsity stats.count";
  if ((st = attn_check_io(&c.b.sp, q, k, v, out, out_bytes, n)))
    return attn_fail_io(out_names, &c.b.sp, q, k, v, out, out_bytes, n);
  /* the option arrays (and int8 scales) are inputs too */
  if ((st = attn_softmax_check_inputs(d, &c, out_names, out, out_bytes, n))) return st;
  const attn_blocked_io io = {.q = q,
                              .k = k,
                              .v = v,
                              .o = o,
                              .aux = lse,
                              .aux_layout = d->lse,
                              .stats = want ? stats : NULL,
                              .k_scales = d->k_scales,
                              .v_scales = d->v_scales,
                              .scales = d->scale_layout};
  attn_blocked_run_all(&c.b.plan, c.b.uk, &io, attn_ws_base(workspace));
  return ATTN_OK;
}

attn_status attn_softmax(const attn_softmax_desc *d, const void *q, const void *k, const void *v, void *o, float *lse,
                         void *workspace, size_t workspace_size) {
  return sm_run(d, q, k, v, o, lse, 0, NULL, workspace, workspace_size);
}

attn_status attn_softmax_stats(const attn_softmax_desc *d, const void *q, const void *k, const void *v, void *o,
                               float *lse, const attn_row_stats *stats, void *workspace, size_t workspace_size) {
  return sm_run(d, q, k, v, o, lse, 1, stats, workspace, workspace_size);
}
