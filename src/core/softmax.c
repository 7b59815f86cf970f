/*
 * Softmax attention driver (VARIANTS.md sections 1-2), written once for every ISA path.
 *
 * Per block of query rows (tb tokens x the g query heads of a GQA group, so one pass over K/V
 * serves the whole group; a decode step is one block) and per key/value head:
 *   Q^T is packed once per block, pre-scaled:          QT = scale * Q^T          (d x R)
 *   for each key block inside the window's range:      ST = K_blk * QT            (gemm, Bc x R)
 *     boundary blocks only: masked pairs set to -inf
 *     online softmax down the columns of ST:            P^T, alpha, m, l          (softmax_block)
 *     acc = diag(alpha) acc + P V_blk                   (gemm with A = P^T read transposed)
 *   o = acc / l,  lse = m + log l  (zeros and -inf for rows with no visible key).
 * Non-finite inputs (the policy in attn.h): a NaN or infinite q or k makes a logit NaN or +-inf;
 * -inf logits of visible pairs become NaN (in the kernel, or in the mask step of boundary blocks),
 * so -inf only ever means "masked", and a NaN or +inf logit leaves l = NaN: the epilogue writes a
 * NaN row. A non-finite v shows in acc, and the epilogue writes a NaN row. A boundary block whose
 * V holds a non-finite value takes P V per token over that token's visible keys only, so that a
 * value a row cannot see never meets its zero weight (0 * NaN); a scan of the V rows that some
 * token of the block cannot see decides, and finite V (the common case) keeps the one product.
 * Computing ST = K Q^T rather than S = Q K^T means neither K nor V is ever packed or copied:
 * K rows are read in place as the broadcast operand and V rows in place as the vector operand.
 * Key blocks wholly outside [p_first - left, p_last + right] are never touched.
 * When a call has fewer query tokens than a block (decode, short chunks) the per-head work per key
 * block is small, so several heads (as many as keep their state within ~256 KiB) advance through
 * the key blocks together: the step then streams K and V in memory order instead of striding
 * over the whole cache once per head.
 */
#include <math.h>

#include "core/internal.h"

typedef struct sm_plan {
  size_t g, tb, R, bc;  /* GQA group size, tokens per block, rows per block, key block */
  size_t hg;            /* key/value heads that advance together when n_q < tb */
  size_t off_st;        /* shared logits block, then hg per-head regions of head_floats: */
  size_t off_heads, head_floats, off_qt, off_acc, off_m, off_l, off_al; /* offsets within a region */
  size_t ws_bytes;
} sm_plan;

enum { SM_HEAD_GROUP_FLOATS = 65536 }; /* 256 KiB of per-head state for heads advancing together */

static attn_status sm_plan_make(const attn_softmax_desc *d, const struct attn_ukernels *uk, sm_plan *p) {
  p->g = d->h_q / d->h_kv;
  p->tb = attn_max_sz(1, uk->q_block / p->g);
  p->bc = uk->kv_block;
  size_t dr, bcr, rdv, heads;
  if (!attn_mul_ok(p->tb, p->g, &p->R) || !attn_mul_ok(d->d, p->R, &dr) || !attn_mul_ok(p->bc, p->R, &bcr) ||
      !attn_mul_ok(p->R, d->dv, &rdv))
    return ATTN_E_SIZE_OVERFLOW;
  attn_ws h = {0, 0}; /* one head's region */
  p->off_qt = attn_ws_take(&h, dr);
  p->off_acc = attn_ws_take(&h, rdv);
  p->off_m = attn_ws_take(&h, p->R);
  p->off_l = attn_ws_take(&h, p->R);
  p->off_al = attn_ws_take(&h, p->R);
  if (h.overflow) return ATTN_E_SIZE_OVERFLOW;
  p->head_floats = h.floats;
  p->hg = attn_max_sz(1, attn_min_sz(d->h_kv, SM_HEAD_GROUP_FLOATS / p->head_floats));
  attn_ws w = {0, 0};
  p->off_st = attn_ws_take(&w, bcr);
  if (!attn_mul_ok(p->hg, p->head_floats, &heads)) return ATTN_E_SIZE_OVERFLOW;
  p->off_heads = attn_ws_take(&w, heads);
  return attn_ws_bytes(&w, &p->ws_bytes) ? ATTN_OK : ATTN_E_SIZE_OVERFLOW;
}

typedef struct sm_spans {
  size_t q, k, v, o, lse; /* element spans */
} sm_spans;

static attn_status sm_validate(const attn_softmax_desc *d, sm_spans *s) {
  attn_status st;
  if (!d) return ATTN_E_NULL_POINTER;
  if (!d->n_q || !d->n_kv || !d->h_q || !d->h_kv || !d->d || !d->dv) return ATTN_E_ZERO_SIZE;
  if (d->h_q % d->h_kv) return ATTN_E_BAD_HEADS;
  if (!isfinite(d->scale)) return ATTN_E_BAD_SCALE;
  if ((st = attn_check_input(d->n_q, d->h_q, d->d, d->q, &s->q)) ||
      (st = attn_check_input(d->n_kv, d->h_kv, d->d, d->k, &s->k)) ||
      (st = attn_check_input(d->n_kv, d->h_kv, d->dv, d->v, &s->v)) ||
      (st = attn_check_output(d->n_q, d->h_q, d->dv, d->o, &s->o)) ||
      (st = attn_check_output(d->n_q, d->h_q, 1, d->lse, &s->lse)))
    return st;
  return ATTN_OK;
}

attn_status attn_softmax_desc_init(attn_softmax_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                                   size_t dim, size_t dv) {
  if (!d) return ATTN_E_NULL_POINTER;
  *d = (attn_softmax_desc){0};
  d->n_q = n_q;
  d->n_kv = n_kv;
  d->h_q = h_q;
  d->h_kv = h_kv;
  d->d = dim;
  d->dv = dv;
  d->scale = dim ? (float)(1.0 / sqrt((double)dim)) : 1.0f;
  d->window_left = ATTN_UNBOUNDED;
  d->window_right = ATTN_UNBOUNDED;
  attn_default_layouts(h_q, h_kv, dim, dv, &d->q, &d->k, &d->v, &d->o);
  d->lse = (attn_layout){h_q, 1};
  return ATTN_OK;
}

attn_status attn_softmax_workspace_size(const attn_softmax_desc *d, size_t *bytes) {
  sm_spans s;
  sm_plan p;
  attn_status st = sm_validate(d, &s);
  if (st) return st;
  if (!bytes) return ATTN_E_NULL_POINTER;
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  if ((st = sm_plan_make(d, uk, &p))) return st;
  *bytes = p.ws_bytes;
  return ATTN_OK;
}

/* Clamp a window side to what positions can reach, so int64 arithmetic cannot overflow. */
static int64_t clamp_window(size_t w, size_t reach) { return (int64_t)(w < reach ? w : reach); }

/* Set the masked pairs of a boundary block to -inf, and turn -inf logits of visible pairs (from
 * non-finite input) into NaN, so that -inf means "masked" only. Key j sees the tokens ti with
 * j - right <= p0 + ti <= j + left, one contiguous range, so each key row is two fills. */
static void sm_block_mask(float *st, size_t ldst, size_t jn, int64_t j0, size_t tn, size_t g, int64_t p0,
                          int64_t wl, int64_t wr) {
  const size_t rows = tn * g;
  for (size_t jj = 0; jj < jn; jj++) {
    const int64_t j = j0 + (int64_t)jj;
    const int64_t a = j - wr - p0, b = j + wl - p0; /* visible tokens [a, b] */
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
 * zero weight (0 * NaN). Token ti sees keys p0 + ti - left .. p0 + ti + right. */
static void sm_pv_exact(const struct attn_ukernels *uk, const float *pt, size_t jn, int64_t j0, size_t tn,
                        size_t g, int64_t p0, int64_t wl, int64_t wr, const float *vb, size_t ldv, float *acc,
                        size_t dv, const float *alpha) {
  const size_t rows = tn * g;
  const int64_t jl = j0 + (int64_t)jn - 1;
  for (size_t ti = 0; ti < tn; ti++) {
    const int64_t pos = p0 + (int64_t)ti;
    const int64_t a = pos - wl > j0 ? pos - wl : j0, b = pos + wr < jl ? pos + wr : jl;
    const size_t first = b >= a ? (size_t)(a - j0) : 0, count = b >= a ? (size_t)(b - a + 1) : 0;
    uk->gemm(g, dv, count, pt + first * rows + ti * g, 1, rows, vb + first * ldv, ldv, acc + ti * g * dv, dv,
             alpha + ti * g, 1);
  }
}

static int64_t sm_clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* 1 when every V row of a boundary block that some token of the block cannot see is finite: the
 * last token (p1) cannot see keys before p1 - left, the first (p0) keys after p0 + right; the keys
 * between are visible to every token, and a non-finite value there reaches its rows anyway. */
static int sm_hidden_v_finite(const float *vb, size_t ldv, size_t dv, int64_t j0, size_t jn, int64_t p0, int64_t p1,
                              int64_t wl, int64_t wr) {
  const int64_t je = j0 + (int64_t)jn;
  const int64_t a = sm_clamp(p1 - wl, j0, je); /* [j0, a): hidden from the last token */
  const int64_t b = sm_clamp(p0 + wr + 1, a, je); /* [b, je): hidden from the first */
  return attn_rows_finite(vb, (size_t)(a - j0), dv, ldv) &&
         (b == je || attn_rows_finite(vb + (size_t)(b - j0) * ldv, (size_t)(je - b), dv, ldv));
}

/* o and lse of one row from its accumulator: o = acc / l, lse = m + log l. l = 0 (no visible key):
 * zeros and -inf. l NaN (the row used a non-finite q or k): NaN and NaN. A non-finite acc (a
 * visible v was non-finite): the whole o row NaN, lse as computed. */
static void sm_row_out(const float *acc, float m, float l, size_t dv, float *orow, float *lse) {
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

static void sm_run(const attn_softmax_desc *d, const sm_plan *p, const struct attn_ukernels *uk, const float *q,
                   const float *k, const float *v, float *o, float *lse, float *ws) {
  float *st = ws + p->off_st;
  const size_t g = p->g, D = d->d, DV = d->dv;
  const int64_t nq = (int64_t)d->n_q, nkv = (int64_t)d->n_kv;
  const int64_t wl = clamp_window(d->window_left, d->n_q + d->n_kv);
  const int64_t wr = clamp_window(d->window_right, d->n_q + d->n_kv);
  const size_t hg = d->n_q < p->tb ? p->hg : 1;
  for (size_t t0 = 0; t0 < d->n_q; t0 += p->tb) {
    /* rows of this block; also the leading dimension of QT and ST (a decode step: 1 x 1 x g) */
    const size_t tn = attn_min_sz(p->tb, d->n_q - t0), rows = tn * g;
    const int64_t p0 = nkv - nq + (int64_t)t0, p1 = p0 + (int64_t)tn - 1;
    const int64_t lo = p0 - wl > 0 ? p0 - wl : 0, hi = p1 + wr < nkv - 1 ? p1 + wr : nkv - 1;
    for (size_t h0 = 0; h0 < d->h_kv; h0 += hg) {
      const size_t hn = attn_min_sz(hg, d->h_kv - h0);
      for (size_t hh = 0; hh < hn; hh++) {
        float *reg = ws + p->off_heads + hh * p->head_floats;
        float *qt = reg + p->off_qt, *acc = reg + p->off_acc, *m = reg + p->off_m, *l = reg + p->off_l;
        for (size_t ti = 0; ti < tn; ti++)
          for (size_t gi = 0; gi < g; gi++) {
            const float *qr = q + (t0 + ti) * d->q.row_stride + ((h0 + hh) * g + gi) * d->q.head_stride;
            float *col = qt + ti * g + gi;
            for (size_t x = 0; x < D; x++) col[x * rows] = qr[x] * d->scale;
          }
        for (size_t r = 0; r < rows; r++) {
          m[r] = -INFINITY;
          l[r] = 0.0f;
        }
        for (size_t x = 0; x < rows * DV; x++) acc[x] = 0.0f;
      }
      for (int64_t j0 = lo; j0 <= hi; j0 += (int64_t)p->bc) {
        const size_t jn = (size_t)(hi + 1 - j0 < (int64_t)p->bc ? hi + 1 - j0 : (int64_t)p->bc);
        const int masked = j0 < p1 - wl || j0 + (int64_t)jn - 1 > p0 + wr;
        for (size_t hh = 0; hh < hn; hh++) {
          float *reg = ws + p->off_heads + hh * p->head_floats;
          const float *kb = k + (size_t)j0 * d->k.row_stride + (h0 + hh) * d->k.head_stride;
          const float *vb = v + (size_t)j0 * d->v.row_stride + (h0 + hh) * d->v.head_stride;
          uk->gemm(jn, rows, D, kb, d->k.row_stride, 1, reg + p->off_qt, rows, st, rows, NULL, 0);
          if (masked) sm_block_mask(st, rows, jn, j0, tn, g, p0, wl, wr);
          uk->softmax_block(jn, rows, st, rows, reg + p->off_m, reg + p->off_l, reg + p->off_al, masked);
          if (masked && !sm_hidden_v_finite(vb, d->v.row_stride, DV, j0, jn, p0, p1, wl, wr))
            sm_pv_exact(uk, st, jn, j0, tn, g, p0, wl, wr, vb, d->v.row_stride, reg + p->off_acc, DV,
                        reg + p->off_al);
          else
            uk->gemm(rows, DV, jn, st, 1, rows, vb, d->v.row_stride, reg + p->off_acc, DV, reg + p->off_al, 1);
        }
      }
      for (size_t hh = 0; hh < hn; hh++) {
        const float *reg = ws + p->off_heads + hh * p->head_floats;
        const float *acc = reg + p->off_acc, *m = reg + p->off_m, *l = reg + p->off_l;
        for (size_t ti = 0; ti < tn; ti++)
          for (size_t gi = 0; gi < g; gi++) {
            const size_t r = ti * g + gi, h = (h0 + hh) * g + gi;
            sm_row_out(acc + r * DV, m[r], l[r], DV, o + (t0 + ti) * d->o.row_stride + h * d->o.head_stride,
                       lse ? lse + (t0 + ti) * d->lse.row_stride + h * d->lse.head_stride : NULL);
          }
      }
    }
  }
}

attn_status attn_softmax(const attn_softmax_desc *d, const float *q, const float *k, const float *v, float *o,
                         float *lse, void *workspace, size_t workspace_size) {
  sm_spans s;
  sm_plan p;
  attn_status st = sm_validate(d, &s);
  if (st) return st;
  if (!q || !k || !v || !o || !workspace) return ATTN_E_NULL_POINTER;
  const struct attn_ukernels *uk = attn_dispatch();
  if (!uk) return ATTN_E_UNSUPPORTED_ISA;
  if ((st = sm_plan_make(d, uk, &p))) return st;
  if (workspace_size < p.ws_bytes) return ATTN_E_WORKSPACE_TOO_SMALL;
  const size_t F = sizeof(float);
  const void *in[3] = {q, k, v};
  const size_t in_n[3] = {s.q * F, s.k * F, s.v * F};
  for (int i = 0; i < 3; i++)
    if (attn_overlap(o, s.o * F, in[i], in_n[i]) || (lse && attn_overlap(lse, s.lse * F, in[i], in_n[i])) ||
        attn_overlap(workspace, workspace_size, in[i], in_n[i]))
      return ATTN_E_ALIASING;
  if (attn_overlap(o, s.o * F, workspace, workspace_size) ||
      (lse && (attn_overlap(lse, s.lse * F, o, s.o * F) || attn_overlap(lse, s.lse * F, workspace, workspace_size))))
    return ATTN_E_ALIASING;
  sm_run(d, &p, uk, q, k, v, o, lse, attn_ws_base(workspace));
  return ATTN_OK;
}
