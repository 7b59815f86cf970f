/*
 * GAU relu^2 attention (attn.h, spec 5): the blocked engine of softmax attention with a score
 * step of its own. The engine hands the step scale * q.k per visible pair (masked pairs -inf);
 * the step adds the bias (a scalar, or a relative-position table read at p_i - j), squares the
 * relu in place and counts the visible keys per row; the engine accumulates P V without a
 * rescale (no running maximum: nothing here grows like an exponential), and the finish applies
 * t_i (1, or 1 / count).
 * Statistics (attn_gau_stats): the kernel also sums w, w^2 and w log w of w = relu(s + b)^2 per
 * row (t_i cancels in both statistics), in three more arrays of row state.
 */
#include "engine/blocked_call.h"
#include "ops/batch_internal.h"

attn_status attn_gau_desc_init(attn_gau_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dim,
                               size_t dv) {
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  *d = (attn_gau_desc){0};
  attn_blocked_desc_defaults(&d->shape, &d->scale, n_q, n_kv, h_q, h_kv, dim, dv);
  d->mask = attn_mask_full();
  d->bias = ATTN_GAU_BIAS_SCALAR;
  return ATTN_OK;
}

/* The step's parameters: the bias (a table of `len` floats read at clamp(p_i - j + shift, 0,
 * len - 1); no table: beta) and the normalisation. */
typedef struct gau_params {
  float beta;
  const float *table;
  int64_t shift, len;
  int normalize;
} gau_params;

/* Row state: the count of visible keys. */
static void gau_init(float *rs, size_t R, size_t rows, const attn_step_rows *w) {
  (void)w;
  (void)R;
  for (size_t r = 0; r < rows; r++) rs[r] = 0.0f;
}

/* P = relu(S + bias)^2 in place, on the path's gau_block kernel (masked pairs weigh 0 and are not
 * counted). A table's bias of key row jj and token ti is T[clamp(base - jj + ti)]: read in place
 * (a row stride of -1) when one token per column and no clamping; otherwise from the strip, the
 * block's clamped entries each repeated for the g columns of a token. */
static const float *gau_step(const struct attn_ukernels *uk, const attn_step_block *b, float *rs, size_t R) {
  const gau_params *gp = b->params;
  float *sums = b->stats ? rs + R : NULL;
  if (!gp->table) {
    uk->gau_block(b->nk, b->nq, b->st, b->ld, gp->beta, NULL, 0, rs, sums, R, b->masked);
    return NULL;
  }
  const size_t g = b->g, tokens = b->nq / g;
  const int64_t base = b->p0 - b->j0 + gp->shift, lo = base - (int64_t)b->nk + 1, hi = base + (int64_t)tokens - 1;
  if (g == 1 && lo >= 0 && hi < gp->len) {
    uk->gau_block(b->nk, b->nq, b->st, b->ld, 0.0f, gp->table + base, -1, rs, sums, R, b->masked);
    return NULL;
  }
  for (int64_t x = lo; x <= hi; x++) {
    const float t = gp->table[x < 0 ? 0 : x >= gp->len ? gp->len - 1 : x];
    for (size_t gi = 0; gi < g; gi++) b->strip[(size_t)(x - lo) * g + gi] = t;
  }
  uk->gau_block(b->nk, b->nq, b->st, b->ld, 0.0f, b->strip + (b->nk - 1) * g, -(ptrdiff_t)g, rs, sums, R, b->masked);
  return NULL;
}

/* o = t acc, t = 1 or 1 / count (no visible key: zeros); a non-finite acc: a NaN row. */
static void gau_finish(const float *acc, const float *rs, size_t R, size_t r, size_t dv, float *orow, float *aux,
                       const void *params) {
  (void)R, (void)aux;
  const gau_params *gp = params;
  if (!attn_rows_finite(acc, 1, dv, 0)) {
    attn_fill_nan(orow, dv);
    return;
  }
  const float t = rs[r] == 0.0f ? 0.0f : gp->normalize ? 1.0f / rs[r] : 1.0f;
  for (size_t x = 0; x < dv; x++) orow[x] = acc[x] * t;
}

/* A later key range's state into an earlier one's: GAU's weights are absolute, so the counts,
 * the statistics' sums and the accumulators add. */
static void gau_merge(float *acc, float *rs, size_t R, const float *acc2, const float *rs2, size_t R2, size_t rows,
                      size_t dv, int stats) {
  for (size_t a = 0; a < (stats ? 4u : 1u); a++)
    for (size_t r = 0; r < rows; r++) rs[a * R + r] += rs2[a * R2 + r];
  for (size_t x = 0; x < rows * dv; x++) acc[x] += acc2[x];
}

static const attn_score_step gau_score_step = {1, 1, gau_init, gau_step, gau_finish, 3, {1, 2, 3}, gau_merge, 0};

/* A validated call planned on the active path. */
typedef struct gau_call {
  attn_blocked_call b;
  gau_params gp;
  size_t table_floats;
} gau_call;

/* The bias of a descriptor: its table's length in floats (0 for a scalar), its parameters. */
static attn_status gau_bias(const attn_gau_desc *d, gau_call *c) {
  c->gp = (gau_params){d->beta, NULL, 0, 1, d->normalize};
  c->table_floats = 0;
  if (d->bias == ATTN_GAU_BIAS_SCALAR)
    return isfinite(d->beta) ? ATTN_OK : attn_fail(ATTN_E_BAD_BIAS, "desc.beta %g: must be finite", (double)d->beta);
  if ((unsigned)d->bias > ATTN_GAU_BIAS_TWO_SIDED)
    return attn_fail(ATTN_E_BAD_BIAS, "desc.bias %d: not an attn_gau_bias kind", (int)d->bias);
  if (!d->bias_table) return attn_fail(ATTN_E_BAD_BIAS, "desc.bias_table is NULL with a table bias");
  if (d->bias_len == 0) return attn_fail(ATTN_E_BAD_BIAS, "desc.bias_len is 0 with a table bias");
  const int two = d->bias == ATTN_GAU_BIAS_TWO_SIDED;
  if (d->bias_len > (SIZE_MAX / sizeof(float) + 1) / 2 || d->bias_len > (size_t)INT64_MAX / 2)
    return attn_fail(ATTN_E_BAD_BIAS, "desc.bias_len %zu: too long for a table", d->bias_len);
  c->table_floats = two ? 2 * d->bias_len - 1 : d->bias_len;
  if (!attn_rows_finite(d->bias_table, 1, c->table_floats, 0)) {
    const size_t i = attn_first_nonfinite(d->bias_table, c->table_floats);
    return attn_fail(ATTN_E_BAD_BIAS, "desc.bias_table[%zu] = %g: must be finite", i, (double)d->bias_table[i]);
  }
  c->gp.table = d->bias_table;
  c->gp.len = (int64_t)c->table_floats;
  c->gp.shift = two ? (int64_t)d->bias_len - 1 : 0;
  return ATTN_OK;
}

/* The plan of a checked call over a shape (a batch's sequence: paged, K/V in pages). */
static attn_status gau_plan(const attn_gau_desc *d, const gau_call *c, const attn_shape *s, int paged,
                            attn_blocked_plan *p) {
  const attn_blocked_spec spec = {
      .shape = s, .mask = d->mask, .scale = d->scale, .step = &gau_score_step, .step_params = &c->gp, .paged = paged};
  return attn_blocked_plan_make(p, &spec, c->b.uk);
}

static attn_status gau_prepare(const attn_gau_desc *d, gau_call *c) {
  attn_status st;
  if (!d) return attn_fail(ATTN_E_NULL_POINTER, "desc is NULL");
  if ((st = attn_blocked_call_check(&c->b, &d->shape, d->scale, NULL, 0))) return st;
  if (d->normalize != 0 && d->normalize != 1)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "desc.normalize %d: must be 0 or 1", d->normalize);
  if ((st = gau_bias(d, c))) return st;
  return gau_plan(d, c, &d->shape, 0, &c->b.plan);
}

ATTN_BLOCKED_WS_QUERIES(attn_gau, attn_gau_desc, gau_call, gau_prepare, b.plan)

/* attn_gau, with the statistics when `want` (stats validated; NULL is then an error). */
static attn_status gau_run(const attn_gau_desc *d, const void *q, const void *k, const void *v, void *o, int want,
                           const attn_row_stats *stats, void *workspace, size_t workspace_size) {
  gau_call c;
  attn_status st = gau_prepare(d, &c);
  if (st) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, workspace_size, c.b.plan.scratch_bytes))) return st;
  void *out[5] = {o, workspace};
  size_t out_bytes[5] = {c.b.sp.o * c.b.sp.o_elem, workspace_size}, n = 2;
  if (want && (st = attn_blocked_stats_outputs(&c.b, stats, out, out_bytes, &n))) return st;
  static const char out_names[] = "o workspace stats.entropy stats.sparsity stats.count";
  if ((st = attn_check_io(&c.b.sp, q, k, v, out, out_bytes, n)))
    return attn_fail_io(out_names, &c.b.sp, q, k, v, out, out_bytes, n);
  const void *const in[1] = {d->bias_table}; /* the table is an input too */
  const size_t in_bytes[1] = {c.table_floats * sizeof(float)};
  if ((st = attn_check_extra_inputs("desc.bias_table", in, in_bytes, 1, out_names, out, out_bytes, n))) return st;
  const attn_blocked_io io = {.q = q, .k = k, .v = v, .o = o, .stats = want ? stats : NULL};
  attn_blocked_run_all(&c.b.plan, c.b.uk, &io, attn_ws_base(workspace));
  return ATTN_OK;
}

attn_status attn_gau(const attn_gau_desc *d, const void *q, const void *k, const void *v, void *o, void *workspace,
                     size_t workspace_size) {
  return gau_run(d, q, k, v, o, 0, NULL, workspace, workspace_size);
}

attn_status attn_gau_stats(const attn_gau_desc *d, const void *q, const void *k, const void *v, void *o,
                           const attn_row_stats *stats, void *workspace, size_t workspace_size) {
  return gau_run(d, q, k, v, o, 1, stats, workspace, workspace_size);
}

/* ---- batches (attn_gau_batch): the shared batch layer (ops/batch.c) over gau_plan ---- */
typedef ATTN_OB_CALL(gau_call) gaub_call;

static attn_status gaub_plan(const ob_variant *v, const attn_shape *s, int paged, attn_blocked_plan *p) {
  return gau_plan(v->desc, v->call, s, paged, p);
}

static attn_status gaub_prepare(const attn_gau_desc *d, const attn_batch *bt, gaub_call *m) {
  attn_status st;
  if ((st = gau_prepare(d, &m->c))) return st;
  m->b.v = (ob_variant){.desc = d, .call = &m->c, .plan = gaub_plan};
  return attn_ob_prepare(&d->shape, &m->c.b.sp, bt, &m->b.v, &m->b.x);
}

attn_status attn_gau_batch_workspace_size(const attn_gau_desc *d, const attn_batch *bt, size_t *bytes) {
  gaub_call m;
  return attn_ob_ws_answer(gaub_prepare(d, bt, &m), &m.b, bytes);
}

attn_status attn_gau_batch(const attn_gau_desc *d, const attn_batch *bt, const void *q, const void *k, const void *v,
                           void *o, void *workspace, size_t workspace_size) {
  gaub_call m;
  attn_status st = gaub_prepare(d, bt, &m);
  if (st) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, workspace_size, m.b.x.bytes))) return st;
  const attn_spans *sp = &m.b.x.sp;
  void *out[2] = {o, workspace};
  const size_t out_bytes[2] = {sp->o * sp->o_elem, workspace_size};
  static const char out_names[] = "o workspace";
  if ((st = attn_check_io(sp, q, k, v, out, out_bytes, 2)))
    return attn_fail_io(out_names, sp, q, k, v, out, out_bytes, 2);
  const void *const in[1] = {d->bias_table};
  const size_t in_bytes[1] = {m.c.table_floats * sizeof(float)};
  if ((st = attn_check_extra_inputs("desc.bias_table", in, in_bytes, 1, out_names, out, out_bytes, 2))) return st;
  if ((st = attn_ob_check_arrays(bt, &m.b.x, out_names, out, out_bytes, 2))) return st;
  attn_ob_run(&d->shape, bt, &m.b.v, &m.b.x, m.c.b.uk, q, k, v, o, workspace);
  return ATTN_OK;
}
