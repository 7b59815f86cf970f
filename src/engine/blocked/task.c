/* A task of the blocked engine (one query block x one head group): its fixed quantities and keys,
 * its queries and empty state, and its state stored, folded and finished into outputs. */
#include "engine/blocked/internal.h"
#include "engine/blocked/mask.h"

/* Task `task` (query block task / groups, head group task % groups) on a worker's scratch ws. */
blk_task attn_blk_task_of(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                          size_t task, float *ws) {
  const attn_shape *s = p->shape;
  const size_t t0 = task / p->groups * p->tb, h0 = task % p->groups * p->hg;
  const size_t tn = attn_min_sz(p->tb, s->n_q - t0);
  const int64_t p0 = (int64_t)s->n_kv - (int64_t)s->n_q + (int64_t)t0;
  return (blk_task){.p = p,
                    .uk = uk,
                    .io = io,
                    .fa = {.xs = p->fm_xs, .wt = io->fm_wt},
                    .ws = ws,
                    .h0 = h0,
                    .hn = attn_min_sz(p->hg, s->h_k - h0),
                    .tn = tn,
                    .rows = tn * p->g,
                    .t0 = t0,
                    .p0 = p0,
                    .p1 = p0 + (int64_t)tn - 1,
                    .last_group = task % p->groups == p->groups - 1,
                    .c0 = 0,
                    .ldq = tn * p->g};
}

/* The keys some row of the task sees: [*lo, *hi] (empty when hi < lo). */
void attn_blk_task_keys(const blk_task *t, int64_t *lo, int64_t *hi) {
  const int64_t last = (int64_t)t->p->shape->n_kv - 1, a = vis_lo(t->p, t->p0), b = vis_hi(t->p, t->p1);
  *lo = a > 0 ? a : 0;
  *hi = b < last ? b : last;
}

/* The task's query rows (tokens t0 .. t0 + tn) of query heads [h, h + nh), fp32, and their layout
 * in *l: in place, or (half queries) converted into the worker's wl.qc, head by head. */
static const float *blk_queries(const blk_task *t, size_t h, size_t nh, attn_layout *l) {
  const attn_shape *s = t->p->shape;
  const void *q = attn_act_at(t->io->q, attn_act_size(s->q_type), s->q, t->t0, h);
  if (s->q_type == ATTN_F32) {
    *l = s->q;
    return q;
  }
  float *y = t->ws + t->p->wl.qc;
  for (size_t i = 0; i < nh; i++)
    attn_act_in(t->uk, s->q_type, t->tn, s->d, attn_act_at(q, sizeof(uint16_t), s->q, 0, i), s->q.row_stride,
                y + i * t->tn * s->d);
  *l = (attn_layout){s->d, t->tn * s->d};
  return y;
}

/* scale * Q^T of `cols` query rows (d x cols, row stride cols, at qt): column c is token c / g,
 * head c % g of the rows from q (layout l). A vector transpose, then the scale: each element
 * rounded once, as a scalar product (a strided scalar pack was a large share of a short task's
 * fixed cost). */
static void blk_pack_qt(const blk_task *t, float *qt, size_t cols, size_t g, const float *q, attn_layout l) {
  const attn_shape *s = t->p->shape;
  t->uk->transpose(ATTN_TR_COPY, s->d, cols, g, qt, cols, q, l.row_stride, l.head_stride);
  t->uk->rows_axpby(s->d, cols, qt, cols, qt, cols, NULL, 0, &t->p->scale, 0, 0, 0);
}

/* Each head's scaled Q^T (or its features; `queries`: 0 when the scratch already holds this
 * task's, see blk_run_serial), empty row state and accumulator. `first`: the state starts at the
 * first key of each row's range (attn_step_rows). */
void attn_blk_begin(const blk_task *t, int first, int queries) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const attn_blocked_io *io = t->io;
  const attn_score_step *sp = p->step;
  const size_t g = p->g, D = s->d, DV = s->dv, R = p->R, m = p->m, tn = t->tn, rows = t->rows;
  float *ws = t->ws;
  attn_layout l;
  /* selection by a task without h_sel's key head: scale Q_sel^T for its own GEMM (attn_blk_select) */
  const int sel_gemm = queries && p->sel && !(p->sel_kv >= t->h0 && p->sel_kv < t->h0 + t->hn);
  if (sel_gemm) {
    const float *qs = blk_queries(t, p->sel_kv * g + p->sel_gi, 1, &l);
    blk_pack_qt(t, ws + p->wl.qs, tn, 1, qs, l);
  }
  for (size_t hh = 0; hh < t->hn; hh++) {
    float *reg = blk_head(t, hh);
    float *qt = reg + p->hl.qt, *acc = reg + p->hl.acc;
    const float *qh = queries ? blk_queries(t, (t->h0 + hh) * g, g, &l) : NULL;
    for (size_t gi = 0; queries && p->fm && gi < g; gi++) { /* u(q) row-major, or phi(q) transposed */
      const float *qg = qh + gi * l.head_stride;
      if (p->xm)
        p->fm->apply(t->uk, &t->fa, 0, tn, D, m, qg, l.row_stride, reg + p->hl.uq + gi * m, g * m, 1, ws + p->wl.fms);
      else
        p->fm->apply(t->uk, &t->fa, 0, tn, D, D, qg, l.row_stride, qt + gi, g, rows, NULL);
    }
    if (queries && !p->fm) { /* column r = ti g + gi of d x rows; few: row r of R x d */
      if (!p->few || blk_few_wide(t))
        blk_pack_qt(t, qt, rows, g, qh, l);
      else
        for (size_t ti = 0; ti < tn; ti++)
          for (size_t gi = 0; gi < g; gi++) {
            const float *qr = qh + ti * l.row_stride + gi * l.head_stride;
            float *row = qt + (ti * g + gi) * D;
            for (size_t x = 0; x < D; x++) row[x] = qr[x] * p->scale;
          }
    }
    const attn_step_rows w = {p->step_params, (t->h0 + hh) * g, g, first};
    float *srs = reg + p->hl.rs + sp->row_floats * R; /* the statistics' sums start at 0 (init may */
    for (size_t x = 0; io->stats && x < sp->stats_floats * R; x++) srs[x] = 0.0f; /* count a sink's) */
    sp->init(reg + p->hl.rs, R, rows, &w);
    for (size_t x = 0; x < rows * DV; x++) acc[x] = 0.0f;
    float *cz = reg + p->hl.cz;
    for (size_t x = 0; p->dsm && x < tn * m; x++) cz[x] = -INFINITY, cz[tn * m + x] = 0.0f;
  }
}

/* A head's state in a fold or slot region (cr rows: acc cr x dv, then the row state arrays). */
static float *blk_folded(const attn_blocked_plan *p, float *region, size_t hh) {
  return region + hh * p->cr * (p->shape->dv + p->step->row_floats + p->step->stats_floats);
}

/* Every head's state (rows of the head regions) into a fold or slot region. */
void attn_blk_store(const blk_task *t, float *region) {
  const attn_blocked_plan *p = t->p;
  const size_t DV = p->shape->dv, rsf = p->step->row_floats + p->step->stats_floats, cr = p->cr;
  for (size_t hh = 0; hh < t->hn; hh++) {
    const float *reg = blk_head(t, hh);
    float *f = blk_folded(p, region, hh);
    memcpy(f, reg + p->hl.acc, t->rows * DV * sizeof(float));
    for (size_t a = 0; a < rsf; a++) memcpy(f + cr * DV + a * cr, reg + p->hl.rs + a * p->R, t->rows * sizeof(float));
  }
}

/* Outputs (and statistics) of every row from a state: the head regions (fold NULL) or a fold
 * region. */
void attn_blk_end(const blk_task *t, float *fold) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const attn_blocked_io *io = t->io;
  const size_t g = p->g, DV = s->dv, stride = fold ? p->cr : p->R, E = attn_act_size(s->o_type);
  for (size_t hh = 0; hh < t->hn; hh++) {
    float *reg = blk_head(t, hh), *acc = fold ? blk_folded(p, fold, hh) : reg + p->hl.acc;
    const float *rs = fold ? acc + p->cr * DV : reg + p->hl.rs;
    for (size_t ti = 0; ti < t->tn; ti++)
      for (size_t gi = 0; gi < g; gi++) {
        const size_t r = ti * g + gi, h = (t->h0 + hh) * g + gi, tok = t->t0 + ti;
        void *o = (void *)attn_act_at(io->o, E, s->o, tok, h);
        float *of = s->o_type == ATTN_F32 ? o : t->ws + p->wl.oc; /* half: the fp32 row, then rounded */
        p->step->finish(acc + r * DV, rs, stride, r, DV, of,
                        io->aux ? io->aux + tok * io->aux_layout.row_stride + h * io->aux_layout.head_stride : NULL,
                        p->step_params);
        if (s->o_type != ATTN_F32) attn_act_out(t->uk, s->o_type, 1, DV, of, DV, o, DV);
        if (io->stats) attn_blk_stats(p, rs, stride, r, t->p0 + (int64_t)ti, io->stats, tok, h);
      }
  }
}

/* Fold range states into `fold`: src a slot region (cr rows) or, src NULL, the head regions. */
void attn_blk_fold(const blk_task *t, float *fold, const float *src) {
  const attn_blocked_plan *p = t->p;
  const size_t DV = p->shape->dv, cr = p->cr;
  for (size_t hh = 0; hh < t->hn; hh++) {
    float *f = blk_folded(p, fold, hh);
    const float *reg = blk_head(t, hh), *acc2 = src ? blk_folded(p, (float *)src, hh) : reg + p->hl.acc;
    const float *rs2 = src ? acc2 + cr * DV : reg + p->hl.rs;
    p->step->merge(f, f + cr * DV, cr, acc2, rs2, src ? cr : p->R, t->rows, DV, t->io->stats != NULL);
  }
}
