/*
 * Selective attention (attn.h, spec 6): softmax attention's blocked engine and score step with
 * the engine's selection (engine/blocked.h, attn_blocked_select): per key block, head h_sel's
 * scores give F, which every head's scores lose before the online softmax. This file holds the
 * descriptor, its validation and the caller's F array. Statistics (attn_selective_stats): the
 * softmax step's, over the reduced logits s - F.
 */
#include "ops/selcache_internal.h"

attn_status attn_selective_desc_init(attn_selective_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                                     size_t dim, size_t dv) {
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  *d = (attn_selective_desc){0};
  attn_blocked_desc_defaults(&d->shape, &d->scale, n_q, n_kv, h_q, h_kv, dim, dv);
  d->lse = (attn_layout){h_q, 1};
  return ATTN_OK;
}

/* The descriptor's checks (attn_blocked_call_check and h_sel), without a plan. */
attn_status attn_sel_check(const attn_selective_desc *d, attn_blocked_call *c) {
  attn_status st;
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  if ((st = attn_blocked_call_check(c, &d->shape, d->scale, &d->lse, 0))) return st;
  if (d->h_sel >= d->shape.h_q)
    return attn_fail(ATTN_E_BAD_HEADS, "desc.h_sel %zu >= shape.h_q %zu", d->h_sel, d->shape.h_q);
  return ATTN_OK;
}

/* The blocked plan of a checked selective call of d's fields over shape s (d's, or a batch
 * record's: the plan points at s). */
attn_status attn_sel_plan(const attn_selective_desc *d, const attn_shape *s, const struct attn_ukernels *uk,
                          attn_blocked_plan *p) {
  const attn_blocked_select sel = {d->h_sel};
  const attn_blocked_spec spec = {
      .shape = s, .mask = attn_mask_causal(), .scale = d->scale, .step = &attn_softmax_score_step, .sel = &sel};
  return attn_blocked_plan_make(p, &spec, uk);
}

/* The checks and the blocked plan of a selective call. */
attn_status attn_sel_prepare(const attn_selective_desc *d, attn_blocked_call *c) {
  attn_status st = attn_sel_check(d, c);
  if (st) return st;
  return attn_sel_plan(d, &d->shape, c->uk, &c->plan);
}

ATTN_BLOCKED_WS_QUERIES(attn_selective, attn_selective_desc, attn_blocked_call, attn_sel_prepare, plan)

/* attn_selective, with the statistics when `want` (stats validated; NULL is then an error). */
static attn_status sel_run(const attn_selective_desc *d, const void *q, const void *k, const void *v, void *o,
                           float *lse, float *f, int want, const attn_row_stats *stats, void *workspace,
                           size_t workspace_size) {
  attn_blocked_call c;
  attn_status st = attn_sel_prepare(d, &c);
  if (st) return st;
  if (!q || !k || !v || !o || !f || !workspace)
    return attn_fail_null("q k v o f workspace", (const void *[]){q, k, v, o, f, workspace});
  if (workspace_size < c.plan.scratch_bytes)
    return attn_fail_ws("workspace_size", workspace_size, c.plan.scratch_bytes);
  const size_t nkv = d->shape.n_kv, f_bytes = nkv * sizeof(float); /* nkv <= span of k: no overflow */
  void *out[7] = {o, lse, workspace, f};
  size_t out_bytes[7] = {c.sp.o * c.sp.o_elem, c.aux_span * sizeof(float), workspace_size, f_bytes}, n = 4;
  if (want && (st = attn_blocked_stats_outputs(&c, stats, out, out_bytes, &n))) return st;
  if ((st = attn_check_io(&c.sp, q, k, v, out, out_bytes, n)))
    return attn_fail_io("o lse workspace f stats.entropy stats.sparsity stats.count", &c.sp, q, k, v, out, out_bytes,
                        n);
  /* the call's own keys start with F = 0 (no query before them has selected them) */
  const size_t first_new = d->shape.n_q < nkv ? nkv - d->shape.n_q : 0;
  for (size_t j = first_new; j < nkv; j++) f[j] = 0.0f;
  const attn_blocked_io io = {
      .q = q, .k = k, .v = v, .o = o, .aux = lse, .aux_layout = d->lse, .sel_f = f, .stats = want ? stats : NULL};
  attn_blocked_run_all(&c.plan, c.uk, &io, attn_ws_base(workspace));
  return ATTN_OK;
}

attn_status attn_selective(const attn_selective_desc *d, const void *q, const void *k, const void *v, void *o,
                           float *lse, float *f, void *workspace, size_t workspace_size) {
  return sel_run(d, q, k, v, o, lse, f, 0, NULL, workspace, workspace_size);
}

attn_status attn_selective_stats(const attn_selective_desc *d, const void *q, const void *k, const void *v, void *o,
                                 float *lse, float *f, const attn_row_stats *stats, void *workspace,
                                 size_t workspace_size) {
  return sel_run(d, q, k, v, o, lse, f, 1, stats, workspace, workspace_size);
}
