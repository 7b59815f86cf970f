/* The blocked engine's block step: the mask and the score step on a block's scores, P V (exact where a
 * hidden value is not finite), a few-rows block of every head at once, and a boundary block in
 * sub-blocks of the tokens that see them. */
#include "engine/blocked/internal.h"
#include "engine/blocked/mask.h"

/* acc = diag(alpha) acc + P V_blk for a boundary block whose V rows hold a non-finite value: each
 * token's rows multiply only the keys that token sees, so a value it cannot see never meets its
 * zero weight (0 * NaN). */
static void blk_pv_exact(const attn_blocked_plan *p, const struct attn_ukernels *uk, const float *pt, size_t jn,
                         int64_t j0, size_t tn, int64_t p0, const float *vb, size_t ldv, float *acc,
                         const float *alpha) {
  const size_t g = p->g, rows = tn * g, dv = p->shape->dv;
  for (size_t ti = 0; ti < tn; ti++) {
    size_t first;
    const size_t count = blk_visible(p, p0 + (int64_t)ti, j0, jn, &first);
    uk->gemm(g, dv, count, pt + first * rows + ti * g, 1, rows, vb + first * ldv, ldv, acc + ti * g * dv, dv,
             alpha ? alpha + ti * g : NULL, 1);
  }
}

/* 1 when every V row of a boundary block that some token of the block cannot see is finite: the
 * last token (p1) sees no key before vis_lo(p1), the first (p0) none after vis_hi(p0); the keys
 * between are visible to every token, and a non-finite value there reaches its rows anyway. */
static int blk_hidden_v_finite(const attn_blocked_plan *p, const float *vb, size_t ldv, int64_t j0, size_t jn,
                               int64_t p0, int64_t p1) {
  const size_t dv = p->shape->dv;
  const int64_t je = j0 + (int64_t)jn;
  const int64_t a = clamp64(vis_lo(p, p1), j0, je);    /* [j0, a): hidden from the last token */
  const int64_t b = clamp64(vis_hi(p, p0) + 1, a, je); /* [b, je): hidden from the first */
  return attn_rows_finite(vb, (size_t)(a - j0), dv, ldv) &&
         (b == je || attn_rows_finite(vb + (size_t)(b - j0) * ldv, (size_t)(je - b), dv, ldv));
}

/* The mask and the score step of head hh on ST (jn keys x rows, at st): P^T in place; returns the
 * step's factor for acc (NULL: plain accumulation). */
const float *attn_blk_step(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, float *st,
                           const float *bm) {
  const attn_blocked_plan *p = t->p;
  const size_t rows = t->rows;
  if (masked) blk_mask(p, st, rows, jn, j0, t->tn, t->p0);
  const attn_step_block b = {st,
                             jn,
                             rows,
                             rows,
                             masked,
                             bm,
                             j0,
                             t->p0,
                             p->g,
                             (t->h0 + hh) * p->g,
                             t->io->t_base + t->t0,
                             p->step_params,
                             t->ws + p->wl.strip,
                             t->io->stats != NULL};
  return p->step->step(t->uk, &b, blk_head(t, hh) + p->hl.rs + t->c0, p->R);
}

/* acc (head hh) = alpha acc + P V from P^T at st: V rows vb (fp32, row stride ldv), or vh (rows of
 * shape.kv_type read in place by few_pv: an unmasked block of a `few` plan). */
void attn_blk_pv(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *st, const float *alpha,
                 const float *vb, const void *vh, size_t ldv) {
  const attn_blocked_plan *p = t->p;
  const size_t rows = t->rows, DV = p->shape->dv;
  float *acc = blk_head(t, hh) + p->hl.acc + t->c0 * DV;
  if (vh)
    t->uk->few_pv(p->kv_type, blk_few_pf(t), NULL, rows, DV, jn, st, rows, vh, ldv, acc, DV, alpha);
  else if (masked && !blk_hidden_v_finite(p, vb, ldv, j0, jn, t->p0, t->p1))
    blk_pv_exact(p, t->uk, st, jn, j0, t->tn, t->p0, vb, ldv, acc, alpha);
  else
    t->uk->gemm(rows, DV, jn, st, 1, rows, vb, ldv, acc, DV, alpha, 1);
}

/* Rows j .. j + n of K (which 0) or V (1) of head h, w elements each, one after another into dst,
 * and with sc (ATTN_I8) their scales: a run of keys across a page boundary, gathered. */
static void blk_gather(const blk_task *t, int which, int64_t j, size_t n, size_t h, size_t w, char *dst, float *sc) {
  const size_t bytes = w * t->p->kv.size;
  for (size_t r = 0; r < n; r++) {
    memcpy(dst + r * bytes, blk_row(t, which, j + (int64_t)r, h), bytes);
    if (sc) sc[r] = *blk_scale(t, which, j + (int64_t)r, h);
  }
}

/* P V of an unmasked `few` block of every head from their P^T (sth, hs floats a head): few_pv over
 * the heads in one sweep, run by run of a page. few_pv adds a few keys at a time from its first
 * (uk->few_pv_run, _rows), so a block is cut only after whole runs of them; a run of keys across a
 * page boundary is gathered, head by head, into scratch (wl.vg: its rows and ATTN_I8 scales) and
 * added from there: the bits of the block read in one piece. */
static void blk_pv_heads(const blk_task *t, int64_t j0, size_t jn, const float *sth, size_t hs, const float *alpha) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t rows = t->rows, jc = rows == 1 ? t->uk->few_pv_run : t->uk->few_pv_run_rows;
  const int i8 = p->kv_type == ATTN_I8;
  /* every head's factor lies at the same place of its region (the step's row state) */
  attn_few_heads hv = {.n = t->hn, .p = hs, .v = s->v.head_stride, .a = p->head_floats, .al = p->head_floats};
  hv.sld = t->io->scales.row_stride, hv.shd = t->io->scales.head_stride;
  float *acc = blk_head(t, 0) + p->hl.acc;
  for (size_t a = 0, n, run; a < jn; a += n, alpha = NULL) {
    const void *v = blk_kv_row(t, 1, j0 + (int64_t)a, t->h0, &run);
    n = run >= jn - a ? jn - a : run - run % jc; /* whole runs of few_pv's keys, or the block's last */
    if (n) {
      hv.sc = i8 ? blk_scale(t, 1, j0 + (int64_t)a, t->h0) : NULL;
      t->uk->few_pv(p->kv_type, blk_few_pf(t), &hv, rows, s->dv, n, sth + a * rows, rows, v, s->v.row_stride, acc,
                    s->dv, alpha);
      continue;
    }
    n = attn_min_sz(jc, jn - a); /* keys [a, a + n) lie across a page boundary */
    const size_t w = attn_dtype_width(p->kv_type, s->dv);
    char *vg = (char *)(void *)(t->ws + p->wl.vg);
    float *sg = t->ws + p->wl.vg + p->wl.vg_scales;
    for (size_t hh = 0; hh < t->hn; hh++) {
      blk_gather(t, 1, j0 + (int64_t)a, n, t->h0 + hh, w, vg, i8 ? sg : NULL);
      const attn_few_heads h1 = {.n = 1, .sc = i8 ? sg : NULL, .sld = 1};
      t->uk->few_pv(p->kv_type, blk_few_pf(t), &h1, rows, s->dv, n, sth + hh * hs + a * rows, rows, vg, w,
                    acc + hh * p->head_floats, s->dv, alpha ? alpha + hh * p->head_floats : NULL);
    }
  }
}

/* Scores of nk keys from k (a run of rows in place) against the task's rows (qt: as attn_blk_begin
 * laid them out, blk_few_wide) into st (nk x rows), of one head or hd's heads. */
void attn_blk_few_scores(const blk_task *t, const attn_few_heads *hd, size_t nk, const void *k, const float *qt,
                         float *st) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  if (blk_few_wide(t))
    t->uk->few_scores_wide(p->kv_type, blk_few_pf(t), hd, nk, t->rows, s->d, k, s->k.row_stride, qt, t->rows, st,
                           t->rows);
  else
    t->uk->few_scores(p->kv_type, blk_few_pf(t), hd, nk, t->rows, s->d, k, s->k.row_stride, qt, s->d, st, t->rows);
}

/* A `few` block of every head of the task at once (no selection, no map): the scores of all heads
 * key after key (few_scores over the heads: with heads side by side in a token's row, one sweep
 * along memory; run by run of a page, keys being independent), each head's step on its own ST
 * (wl.sth), then P V of all heads the same way (unmasked) or head by head (masked: V converted
 * where half). */
void attn_blk_block_heads(const blk_task *t, int64_t j0, size_t jn, int masked) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t rows = t->rows, hs = p->bc * p->R; /* a few-rows plan's R: its rows */
  float *sth = t->ws + p->wl.sth;
  const int i8 = p->kv_type == ATTN_I8;
  attn_few_heads hk = {.n = t->hn, .k = s->k.head_stride, .q = p->head_floats, .s = hs};
  hk.sld = t->io->scales.row_stride, hk.shd = t->io->scales.head_stride;
  for (size_t a = 0, run; a < jn; a += run) {
    const void *k = blk_kv_row(t, 0, j0 + (int64_t)a, t->h0, &run);
    run = attn_min_sz(run, jn - a);
    hk.sc = i8 ? blk_scale(t, 0, j0 + (int64_t)a, t->h0) : NULL;
    attn_blk_few_scores(t, &hk, run, k, blk_head(t, 0) + p->hl.qt, sth + a * rows);
  }
  const float *alpha0 = NULL;
  for (size_t hh = 0; hh < t->hn; hh++) {
    const float *alpha = attn_blk_step(t, hh, j0, jn, masked, sth + hh * hs, NULL);
    if (hh == 0) alpha0 = alpha;
    if (masked) {
      size_t ldv;
      const float *vb = attn_blk_kv(t, 1, j0, jn, t->h0 + hh, &ldv);
      attn_blk_pv(t, hh, j0, jn, masked, sth + hh * hs, alpha, vb, NULL, ldv);
    }
  }
  if (!masked) blk_pv_heads(t, j0, jn, sth, hs, alpha0);
}

/* An unmasked block of a fused plan (p->fused: one query row a key head) through few_fused,
 * every head of the task at once (as attn_blk_block_heads reads them: along each token's row, or
 * as parallel streams) run by run of a page, each run cut after whole steps of few_fused_keys
 * keys; a step across a page boundary has its K and V rows (and ATTN_I8 scales) gathered into
 * scratch (wl.fg), head by head. The steps, hence the bits, follow the block alone, whatever the
 * pages, the layout and the head groups. Scores in wl.sth: bc >= 64 floats a head (every path's
 * kv_block), few_fused's 64. */
void attn_blk_fused(const blk_task *t, int64_t j0, size_t jn) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t fk = t->uk->few_fused_keys, d = s->d, dv = s->dv;
  const int stats = t->io->stats != NULL, i8 = p->kv_type == ATTN_I8;
  const attn_few_pf pf = blk_few_pf(t);
  float *st = t->ws + p->wl.sth, *h0 = blk_head(t, 0);
  attn_few_heads hd = {
      .n = t->hn, .k = s->k.head_stride, .q = p->head_floats, .v = s->v.head_stride, .a = p->head_floats};
  hd.sld = t->io->scales.row_stride, hd.shd = t->io->scales.head_stride;
  for (size_t a = 0, n; a < jn; a += n) {
    const int64_t j = j0 + (int64_t)a;
    size_t rk, rv;
    const void *k = blk_kv_row(t, 0, j, t->h0, &rk), *v = blk_kv_row(t, 1, j, t->h0, &rv);
    const size_t run = attn_min_sz(attn_min_sz(rk, rv), jn - a);
    n = run == jn - a ? run : run - run % fk;
    if (n) {
      t->uk->few_fused(p->kv_type, pf, &hd, n, d, dv, k, s->k.row_stride, v, s->v.row_stride,
                       i8 ? blk_scale(t, 0, j, t->h0) : NULL, i8 ? blk_scale(t, 1, j, t->h0) : NULL, h0 + p->hl.qt, st,
                       h0 + p->hl.rs, stats, h0 + p->hl.acc);
      continue;
    }
    n = attn_min_sz(fk, jn - a); /* keys [a, a + n) lie across a page boundary */
    const size_t wk = attn_dtype_width(p->kv_type, d), wv = attn_dtype_width(p->kv_type, dv);
    char *kg = (char *)(void *)(t->ws + p->wl.fg), *vg = kg + fk * wk * p->kv.size;
    float *sg = t->ws + p->wl.fg + p->wl.fg_scales;
    const attn_few_heads one = {.n = 1, .sld = 1};
    for (size_t hh = 0; hh < t->hn; hh++) {
      float *head = blk_head(t, hh);
      blk_gather(t, 0, j, n, t->h0 + hh, wk, kg, i8 ? sg : NULL);
      blk_gather(t, 1, j, n, t->h0 + hh, wv, vg, i8 ? sg + fk : NULL);
      t->uk->few_fused(p->kv_type, pf, &one, n, d, dv, kg, wk, vg, wv, i8 ? sg : NULL, i8 ? sg + fk : NULL,
                       head + p->hl.qt, st, head + p->hl.rs, stats, head + p->hl.acc);
    }
  }
}

/* A boundary block of head hh (plans with p->views): its keys BLK_BOUNDARY_KEYS at a time, each
 * sub-block with a view of the tokens that see some of its keys, [first(a), last(b)] for keys
 * [a, b] (a key's tokens are a range whose ends grow with the key, so no token outside sees
 * one); a sub-block no token sees is skipped. The tokens left out would take P = 0 for every key,
 * alpha = 1 and l + 0, a step that changes no bit of their state (nor GAU's counts and sums); the
 * others take the block as smaller blocks (the same values up to rounding, the same bits for any
 * thread count: the sub-blocks follow the keys and the mask alone). What is saved: the scores of
 * pairs no token sees, under a causal mask about half the diagonal's. */
void attn_blk_boundary(const blk_task *t, size_t hh, int64_t j0, size_t jn, const float *vb, size_t ldv) {
  const attn_blocked_plan *p = t->p;
  const size_t g = p->g;
  for (size_t a = 0, b; a < jn; a = b) {
    b = attn_min_sz(jn, a + BLK_BOUNDARY_KEYS);
    const int64_t ka = j0 + (int64_t)a, kb = j0 + (int64_t)b - 1;
    const int64_t ta = clamp64(mask_lo(p, ka, p->right) - t->p0, 0, (int64_t)t->tn),
                  tb = clamp64(mask_hi(p, kb, p->left) - t->p0 + 1, ta, (int64_t)t->tn);
    if (tb == ta) continue;
    blk_task v = *t;
    v.t0 = t->t0 + (size_t)ta, v.tn = (size_t)(tb - ta), v.rows = v.tn * g;
    v.p0 = t->p0 + ta, v.p1 = v.p0 + (int64_t)v.tn - 1, v.c0 = t->c0 + (size_t)ta * g;
    const int masked = blk_masked(p, v.p0, v.p1, ka, kb);
    attn_blk_scores(&v, ka, b - a, v.h0 + hh, v.rows, blk_qt(&v, hh), v.ldq, v.ws + p->wl.st, v.rows);
    blk_accumulate(&v, hh, ka, b - a, masked, vb + a * ldv, NULL, ldv, NULL);
  }
}
