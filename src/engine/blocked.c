/* The blocked score engine (engine/blocked.h), written once for every ISA path and every score
 * step. Positions are absolute (bottom-right: token t of the call sits at n_kv - n_q + t). */
#include "engine/blocked.h"

enum { BLK_HEAD_GROUP_FLOATS = 65536 }; /* 256 KiB of per-head state for heads advancing together */

/* Clamp a mask size to what positions can reach, so int64 arithmetic cannot overflow. */
static int64_t clamp_reach(size_t w, size_t reach) { return (int64_t)(w < reach ? w : reach); }

static int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
static int64_t chunk_start(const attn_blocked_plan *p, int64_t pos) { return floor_div(pos, p->chunk) * p->chunk; }

/* The mask's interval around a position: [lo(pos, back), hi(pos, fwd)] cut to pos's chunk. Keys
 * visible to position pos are [lo(pos, left), hi(pos, right)]; read the other way, the positions
 * that see key j are [lo(j, right), hi(j, left)]. Both ends are nondecreasing in pos. */
static int64_t mask_lo(const attn_blocked_plan *p, int64_t pos, int64_t back) {
  const int64_t lo = pos - back, cs = p->chunk ? chunk_start(p, pos) : lo;
  return cs > lo ? cs : lo;
}
static int64_t mask_hi(const attn_blocked_plan *p, int64_t pos, int64_t fwd) {
  const int64_t hi = pos + fwd, ce = p->chunk ? chunk_start(p, pos) + p->chunk - 1 : hi;
  return ce < hi ? ce : hi;
}
static int64_t vis_lo(const attn_blocked_plan *p, int64_t pos) { return mask_lo(p, pos, p->left); }
static int64_t vis_hi(const attn_blocked_plan *p, int64_t pos) { return mask_hi(p, pos, p->right); }

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

attn_status attn_blocked_plan_make(attn_blocked_plan *p, const attn_shape *s, attn_mask mask, float scale,
                                   const attn_score_step *step, const void *step_params,
                                   const attn_blocked_features *feat, const struct attn_ukernels *uk) {
  *p = (attn_blocked_plan){.shape = s, .step = step, .step_params = step_params, .scale = scale};
  if (feat) p->fm = feat->fm, p->fa = feat->fa;
  const size_t reach = s->n_q + s->n_kv; /* cannot overflow: both spans fit in PTRDIFF_MAX / 4 */
  p->left = clamp_reach(mask.left, reach);
  p->right = clamp_reach(mask.right, reach);
  p->chunk = clamp_reach(mask.chunk, reach);
  p->g = s->h_q / s->h_k;
  p->tb = attn_max_sz(1, uk->q_block / p->g);
  p->bc = uk->kv_block;
  size_t dr, bcr, rdv, rsf, heads;
  if (!attn_mul_ok(p->tb, p->g, &p->R) || !attn_mul_ok(s->d, p->R, &dr) || !attn_mul_ok(p->bc, p->R, &bcr) ||
      !attn_mul_ok(p->R, s->dv, &rdv) || !attn_mul_ok(p->R, step->row_floats, &rsf))
    return ATTN_E_SIZE_OVERFLOW;
  attn_ws h = {0, 0}; /* one head's region */
  p->off_qt = attn_ws_take(&h, dr);
  p->off_acc = attn_ws_take(&h, rdv);
  p->off_rs = attn_ws_take(&h, rsf);
  if (h.overflow) return ATTN_E_SIZE_OVERFLOW;
  p->head_floats = h.floats;
  /* Heads advance together only when the call has fewer tokens than a block; the scratch holds
   * the group either way, so its size does not depend on n_q (a prefill's workspace serves the
   * decode steps after it). */
  const size_t hg = attn_max_sz(1, attn_min_sz(s->h_k, BLK_HEAD_GROUP_FLOATS / p->head_floats));
  p->hg = s->n_q < p->tb ? hg : 1;
  p->groups = (s->h_k + p->hg - 1) / p->hg;
  p->qblocks = (s->n_q + p->tb - 1) / p->tb;
  attn_ws w = {0, 0};
  p->off_st = attn_ws_take(&w, bcr);
  size_t kfn = 0;
  if (p->fm && !attn_mul_ok(p->bc, s->d, &kfn)) return ATTN_E_SIZE_OVERFLOW;
  p->off_kf = attn_ws_take(&w, kfn);
  if (!attn_mul_ok(hg, p->head_floats, &heads)) return ATTN_E_SIZE_OVERFLOW;
  p->off_heads = attn_ws_take(&w, heads);
  return attn_ws_bytes(&w, &p->scratch_bytes) ? ATTN_OK : ATTN_E_SIZE_OVERFLOW;
}

/* Set the masked pairs of a boundary block to -inf, and turn -inf scores of visible pairs (from
 * non-finite input) into NaN, so that -inf means "masked" only. The tokens that see key j are one
 * contiguous range, so each key row is at most three fills. */
static void blk_mask(const attn_blocked_plan *p, float *st, size_t ldst, size_t jn, int64_t j0, size_t tn, int64_t p0) {
  const size_t g = p->g, rows = tn * g;
  for (size_t jj = 0; jj < jn; jj++) {
    const int64_t j = j0 + (int64_t)jj;
    const int64_t a = mask_lo(p, j, p->right) - p0,
                  b = mask_hi(p, j, p->left) - p0; /* visible tokens [a, b] of the block */
    const size_t lo = a <= 0 ? 0 : (a >= (int64_t)tn ? rows : (size_t)a * g);
    const size_t hi = b < 0 ? 0 : (b >= (int64_t)tn - 1 ? rows : (size_t)(b + 1) * g);
    float *row = st + jj * ldst;
    if (hi <= lo) {
      for (size_t c = 0; c < rows; c++) row[c] = -INFINITY;
    } else {
      for (size_t c = 0; c < lo; c++) row[c] = -INFINITY;
      for (size_t c = lo; c < hi; c++) row[c] = row[c] == -INFINITY ? NAN : row[c];
      for (size_t c = hi; c < rows; c++) row[c] = -INFINITY;
    }
  }
}

/* acc = diag(alpha) acc + P V_blk for a boundary block whose V rows hold a non-finite value: each
 * token's rows multiply only the keys that token sees, so a value it cannot see never meets its
 * zero weight (0 * NaN). */
static void blk_pv_exact(const attn_blocked_plan *p, const struct attn_ukernels *uk, const float *pt, size_t jn,
                         int64_t j0, size_t tn, int64_t p0, const float *vb, size_t ldv, float *acc,
                         const float *alpha) {
  const size_t g = p->g, rows = tn * g, dv = p->shape->dv;
  const int64_t jl = j0 + (int64_t)jn - 1;
  for (size_t ti = 0; ti < tn; ti++) {
    const int64_t pos = p0 + (int64_t)ti;
    const int64_t a = clamp64(vis_lo(p, pos), j0, jl + 1), b = clamp64(vis_hi(p, pos), j0 - 1, jl);
    const size_t first = b >= a ? (size_t)(a - j0) : 0, count = b >= a ? (size_t)(b - a + 1) : 0;
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

void attn_blocked_run(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                      size_t task, float *ws) {
  const attn_shape *s = p->shape;
  const attn_score_step *sp = p->step;
  float *st = ws + p->off_st;
  const size_t g = p->g, D = s->d, DV = s->dv, R = p->R;
  const size_t t0 = task / p->groups * p->tb, h0 = task % p->groups * p->hg;
  const size_t tn = attn_min_sz(p->tb, s->n_q - t0), rows = tn * g; /* rows: also ld of QT and ST */
  const size_t hn = attn_min_sz(p->hg, s->h_k - h0);
  const int64_t nkv = (int64_t)s->n_kv;
  const int64_t p0 = nkv - (int64_t)s->n_q + (int64_t)t0, p1 = p0 + (int64_t)tn - 1;
  const int64_t lo = vis_lo(p, p0) > 0 ? vis_lo(p, p0) : 0, hi = vis_hi(p, p1) < nkv - 1 ? vis_hi(p, p1) : nkv - 1;
  const int64_t full_lo = vis_lo(p, p1), full_hi = vis_hi(p, p0); /* keys every row of the block sees */
  for (size_t hh = 0; hh < hn; hh++) {
    float *reg = ws + p->off_heads + hh * p->head_floats;
    float *qt = reg + p->off_qt, *acc = reg + p->off_acc;
    for (size_t gi = 0; p->fm && gi < g; gi++) /* phi(q) of each head of the group, transposed */
      p->fm->apply(uk, &p->fa, 0, tn, D, D, io->q + t0 * s->q.row_stride + ((h0 + hh) * g + gi) * s->q.head_stride,
                   s->q.row_stride, qt + gi, g, rows, NULL);
    for (size_t ti = 0; !p->fm && ti < tn; ti++)
      for (size_t gi = 0; gi < g; gi++) {
        const float *qr = io->q + (t0 + ti) * s->q.row_stride + ((h0 + hh) * g + gi) * s->q.head_stride;
        float *col = qt + ti * g + gi;
        for (size_t x = 0; x < D; x++) col[x * rows] = qr[x] * p->scale;
      }
    sp->init(reg + p->off_rs, R, rows);
    for (size_t x = 0; x < rows * DV; x++) acc[x] = 0.0f;
  }
  for (int64_t j0 = lo; j0 <= hi; j0 += (int64_t)p->bc) {
    const size_t jn = (size_t)(hi + 1 - j0 < (int64_t)p->bc ? hi + 1 - j0 : (int64_t)p->bc);
    const int masked = j0 < full_lo || j0 + (int64_t)jn - 1 > full_hi;
    for (size_t hh = 0; hh < hn; hh++) {
      float *reg = ws + p->off_heads + hh * p->head_floats;
      const float *kb = io->k + (size_t)j0 * s->k.row_stride + (h0 + hh) * s->k.head_stride;
      const float *vb = io->v + (size_t)j0 * s->v.row_stride + (h0 + hh) * s->v.head_stride;
      if (p->fm) { /* psi(K_blk), read in place otherwise */
        p->fm->apply(uk, &p->fa, 1, jn, D, D, kb, s->k.row_stride, ws + p->off_kf, D, 1, NULL);
        uk->gemm(jn, rows, D, ws + p->off_kf, D, 1, reg + p->off_qt, rows, st, rows, NULL, 0);
      } else {
        uk->gemm(jn, rows, D, kb, s->k.row_stride, 1, reg + p->off_qt, rows, st, rows, NULL, 0);
      }
      if (masked) blk_mask(p, st, rows, jn, j0, tn, p0);
      const float *alpha = sp->step(uk, jn, rows, st, rows, reg + p->off_rs, R, masked);
      if (masked && !blk_hidden_v_finite(p, vb, s->v.row_stride, j0, jn, p0, p1))
        blk_pv_exact(p, uk, st, jn, j0, tn, p0, vb, s->v.row_stride, reg + p->off_acc, alpha);
      else
        uk->gemm(rows, DV, jn, st, 1, rows, vb, s->v.row_stride, reg + p->off_acc, DV, alpha, 1);
    }
  }
  for (size_t hh = 0; hh < hn; hh++) {
    const float *reg = ws + p->off_heads + hh * p->head_floats;
    for (size_t ti = 0; ti < tn; ti++)
      for (size_t gi = 0; gi < g; gi++) {
        const size_t r = ti * g + gi, h = (h0 + hh) * g + gi;
        sp->finish(reg + p->off_acc + r * DV, reg + p->off_rs, R, r, DV,
                   io->o + (t0 + ti) * s->o.row_stride + h * s->o.head_stride,
                   io->aux ? io->aux + (t0 + ti) * io->aux_layout.row_stride + h * io->aux_layout.head_stride : NULL,
                   p->step_params);
      }
  }
}
