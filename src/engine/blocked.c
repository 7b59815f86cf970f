/* The blocked score engine (engine/blocked.h), written once for every ISA path and every score
 * step. Positions are absolute (bottom-right: token t of the call sits at n_kv - n_q + t). */
#include "engine/blocked.h"

#include <float.h>
#include <math.h>

enum {
  BLK_HEAD_GROUP_FLOATS = 65536, /* 256 KiB of per-head state for heads advancing together */
  /* 256 KiB for the heads of a few-rows call shorter than a query block: each its region for the
   * call's rows, its scores and its key ranges' folded state (blk_short_group) */
  BLK_SHORT_GROUP_FLOATS = 65536,
  BLK_SPLIT_MAX = 16, /* key ranges of a split call (or selection task), at most */
  /* Selection: each query block's keys in ranges of at least this many keys (whole key blocks),
   * so that a selective call's one sequential chain (its query blocks) still gives threads work;
   * a range's fold costs ~dv + 5 flops per row against ~2 (d + dv) per key and row. */
  BLK_SEL_RANGE_KEYS = 256
};
/* Boundary blocks of a plan without selection, feature map or few-rows scores: keys taken this
 * many at a time, each sub-block with only the tokens that see some of its keys (blk_boundary). */
enum { BLK_BOUNDARY_KEYS = 32 };
/* Half K: keys converted at a time for the scores (a multiple of every GEMM tile's rows: 4, 6, 8),
 * so that the converted rows stay in L1 (12 KiB at d = 128) between the conversion and the GEMM. */
enum { BLK_HALF_K_KEYS = 24 };
/* Packed K/V (engine/blocked.h): the keys of a head a worker holds packed (2 MiB of fp32 K and V
 * at d = dv = 64), and the query blocks a call needs for packing to pay (each packed key is read
 * by up to that many of them). */
enum { BLK_PACK_KEYS = 4096, BLK_PACK_MIN_QBLOCKS = 8 };
/* Rows per task up to which scores and P V read K and V in place, half ones converted in registers
 * (decode steps: the GQA group of a token); more rows reuse a block enough to pay for a GEMM tile
 * and, half, a conversion into scratch. */
enum { BLK_FEW_ROWS = 8 };

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

/* One head's region for R rows (blk_head): the scaled queries (m x R), the accumulators (R x dv),
 * the step's row state (R rows each), with an exponential map u(Q) and bm, with dsoftmax c | z
 * (tbm2). R is at most the rows of a block, whose products the plan checked. Sets the offsets and
 * head_floats; nonzero on overflow. */
static int blk_head_layout(attn_blocked_plan *p, size_t R, const attn_score_step *step, size_t tbm2) {
  const size_t m = p->m, mr = m * R;
  attn_ws h = {0, 0};
  p->off_qt = attn_ws_take(&h, mr);
  p->off_acc = attn_ws_take(&h, R * p->shape->dv);
  p->off_rs = attn_ws_take(&h, R * (step->row_floats + step->stats_floats));
  p->off_uq = attn_ws_take(&h, p->xm ? mr : 0);
  p->off_bm = attn_ws_take(&h, p->xm ? R : 0);
  p->off_cz = attn_ws_take(&h, p->dsm ? tbm2 : 0);
  p->head_floats = h.floats;
  return h.overflow;
}
/* The floats of one head's region for R rows (the plan's layout unchanged). */
static size_t blk_head_floats(const attn_blocked_plan *p, size_t R, const attn_score_step *step, size_t tbm2) {
  attn_blocked_plan t = *p;
  return blk_head_layout(&t, R, step, tbm2) ? SIZE_MAX : t.head_floats;
}
/* Heads advancing together in a few-rows call of n_q < tb tokens: as many as
 * BLK_SHORT_GROUP_FLOATS holds of regions of hf floats (n_q g rows) plus `more` floats each
 * (scores, the folded state of a key range; at least one head). */
static size_t blk_short_group(const attn_blocked_plan *p, size_t hf, size_t more) {
  const size_t per = hf > SIZE_MAX - more ? SIZE_MAX : hf + more;
  return attn_max_sz(1, attn_min_sz(p->shape->h_k, BLK_SHORT_GROUP_FLOATS / per));
}

/* A plan whose workspace does not fit in size_t. */
static ATTN_COLD attn_status blk_overflow(const attn_shape *s) {
  return attn_fail(ATTN_E_SIZE_OVERFLOW, "the workspace of n_q %zu, h_q %zu, d %zu, dv %zu overflows size_t", s->n_q,
                   s->h_q, s->d, s->dv);
}

attn_status attn_blocked_plan_make(attn_blocked_plan *p, const attn_shape *s, attn_mask mask, float scale,
                                   const attn_score_step *step, const void *step_params,
                                   const attn_blocked_features *feat, const attn_blocked_select *sel,
                                   const struct attn_ukernels *uk) {
  *p = (attn_blocked_plan){.shape = s, .step = step, .step_params = step_params, .scale = scale, .m = s->d};
  if (feat) p->fm = feat->fm, p->fa = feat->fa, p->m = feat->m;
  p->xm = p->fm && p->fm->offsets;
  p->dsm = p->xm && p->fm->query == ATTN_EXPF_SOFTMAX;
  const size_t reach = s->n_q + s->n_kv; /* cannot overflow: both spans fit in PTRDIFF_MAX / 4 */
  p->left = clamp_reach(mask.left, reach);
  p->right = clamp_reach(mask.right, reach);
  p->chunk = clamp_reach(mask.chunk, reach);
  p->g = s->h_q / s->h_k;
  p->tb = attn_max_sz(1, uk->q_block / p->g);
  if (sel) p->sel = 1, p->sel_kv = sel->h_sel / p->g, p->sel_gi = sel->h_sel % p->g;
  p->bc = uk->kv_block;
  const size_t m = p->m;
  size_t mr, bcr, rdv, rsf, bcm, tbm2, fr, fms;
  if (!attn_mul_ok(p->tb, p->g, &p->R) || !attn_mul_ok(m, p->R, &mr) || !attn_mul_ok(p->bc, p->R, &bcr) ||
      !attn_mul_ok(p->R, s->dv, &rdv) || !attn_mul_ok(p->R, step->row_floats + step->stats_floats, &rsf) ||
      !attn_mul_ok(p->bc, m, &bcm) || !attn_mul_ok(2 * p->tb, m, &tbm2) ||
      !attn_mul_ok(attn_max_sz(p->bc, p->tb), s->d, &fr) || m > SIZE_MAX / 4)
    return blk_overflow(s);
  if (blk_head_layout(p, p->R, step, tbm2)) return blk_overflow(s);
  /* Heads advance together when the call has fewer tokens than a block, and always with a
   * selection (its F is then computed once per key block for the whole group, not once per head
   * group): hg heads of a block's rows within BLK_HEAD_GROUP_FLOATS. A few-rows call (n_q g <=
   * BLK_FEW_ROWS, a decode step) lays each head's region out for its own rows and groups as many
   * heads as BLK_SHORT_GROUP_FLOATS holds with their scores and folded states (blk_short_group):
   * a decode step with all of a token's heads reads K and V along memory, where groups (7 + 1
   * heads of 8 with a block's 64 rows on the AVX-512 path: 8.4k floats a head) each sweep the
   * whole cache again for their share of every token's row. Measured on a Zen 5 guest (8 heads,
   * token-major, 64k-256k cached tokens): fp32 decode 1.2-1.5x faster, fp16 1.25-1.55x. The
   * workspace does not depend on n_q (a prefill's serves the decode steps after it): it is
   * reserved for the largest of the groupings any n_q takes (heads_res floats of regions, hg_res
   * heads, gh_res heads in whole groups). */
  const size_t hf = p->head_floats, hg = attn_max_sz(1, attn_min_sz(s->h_k, BLK_HEAD_GROUP_FLOATS / hf));
  const int few_heads = !p->fm && !sel && p->g <= BLK_FEW_ROWS; /* some n_q runs a few-rows plan */
  const size_t st_head = few_heads ? p->bc * BLK_FEW_ROWS : 0;
  /* a key range's folded state: cr rows of a head (ph floats; the products are checked below) */
  const int can_split = step->merge && !p->fm;
  const size_t row_arrays = step->row_floats + step->stats_floats;
  p->cr = ATTN_SPLIT_TOKENS * p->g; /* g <= h_q: no overflow with the products below checked */
  if (sel) p->cr = attn_max_sz(p->cr, p->R);
  const size_t ph_est = can_split && p->cr <= SIZE_MAX / (s->dv + row_arrays + 1) ? p->cr * (s->dv + row_arrays) : 0;
  const size_t more = st_head + ph_est; /* a head's floats beside its region in a short group */
  size_t heads_res = hg * hf, hg_res = hg, gh_res = (s->h_k + hg - 1) / hg * hg; /* hg hf <= max(hf, BLK) */
  for (size_t nq = 1; few_heads && nq < p->tb && nq * p->g <= BLK_FEW_ROWS; nq++) {
    /* h f <= BLK_SHORT_GROUP_FLOATS, or h = 1 and f <= hf */
    const size_t f = blk_head_floats(p, nq * p->g, step, tbm2), h = blk_short_group(p, f, more);
    heads_res = attn_max_sz(heads_res, h * f);
    hg_res = attn_max_sz(hg_res, h);
    gh_res = attn_max_sz(gh_res, (s->h_k + h - 1) / h * h);
  }
  p->hg = sel ? hg : 1;
  if (few_heads && s->n_q < p->tb && s->n_q * p->g <= BLK_FEW_ROWS) {
    p->R = attn_max_sz(1, s->n_q) * p->g;
    if (blk_head_layout(p, p->R, step, tbm2)) return blk_overflow(s);
    p->hg = blk_short_group(p, p->head_floats, more);
  } else if (s->n_q < p->tb) {
    p->hg = hg;
  }
  p->groups = (s->h_k + p->hg - 1) / p->hg;
  p->qblocks = (s->n_q + p->tb - 1) / p->tb;
  /* the map's scratch for up to max(bc, tb) rows: favor's x' rows, fr floats (checked above) */
  fms = p->fm ? p->fm->scratch(attn_max_sz(p->bc, p->tb), s->d, m) : 0;
  attn_ws w = {0, 0};
  p->off_st = attn_ws_take(&w, bcr);
  p->off_kf = attn_ws_take(&w, p->fm ? bcm : 0);
  p->off_ku = attn_ws_take(&w, p->xm ? bcm : 0);
  p->off_km = attn_ws_take(&w, p->xm ? bcm : 0);
  p->off_fms = attn_ws_take(&w, fms);
  p->off_cb = attn_ws_take(&w, p->xm ? m : 0);
  p->off_tmp = attn_ws_take(&w, p->xm ? 3 * m : 0);
  size_t strip;
  if (!attn_mul_ok(p->bc + 2 * p->tb, p->g, &strip)) return blk_overflow(s);
  p->off_strip = attn_ws_take(&w, step->strip ? strip : 0);
  size_t dtb, bctb;
  if (!attn_mul_ok(s->d, p->tb, &dtb) || !attn_mul_ok(p->bc, p->tb, &bctb)) return blk_overflow(s);
  p->off_qs = attn_ws_take(&w, p->sel ? dtb : 0);
  p->off_ss = attn_ws_take(&w, p->sel ? bctb : 0);
  p->off_fz = attn_ws_take(&w, p->sel ? bctb : 0);
  p->off_run = attn_ws_take(&w, p->sel ? p->bc : 0);
  /* half K/V: the block's converted rows (no scratch for fp32, read in place) */
  size_t bcd, bcdv;
  p->kv_type = s->kv_type;
  const int half = s->kv_type != ATTN_F32;
  if (!attn_mul_ok(p->bc, s->d, &bcd) || !attn_mul_ok(p->bc, s->dv, &bcdv)) return blk_overflow(s);
  p->off_kc = attn_ws_take(&w, half ? bcd / p->bc * attn_min_sz(p->bc, BLK_HALF_K_KEYS) : 0);
  p->off_vc = attn_ws_take(&w, half ? bcdv : 0);
  size_t sth; /* `few` blocks of several heads: every head's ST, BLK_FEW_ROWS rows at most (any n_q) */
  if (!attn_mul_ok(hg_res, st_head, &sth)) return blk_overflow(s);
  p->off_sth = attn_ws_take(&w, sth);
  p->few = !p->fm && attn_min_sz(p->tb, s->n_q) * p->g <= BLK_FEW_ROWS;
  p->views = !p->fm && !p->sel && !p->few;
  /* Packed K/V: reserved for every call that may pack (no map, no selection: whatever n_q and
   * n_kv, as the workspace depends on neither); used where a head's rows are not contiguous fp32
   * and several query blocks read them. */
  size_t pkd, pkdv;
  const int may_pack = !p->fm && !p->sel;
  if (!attn_mul_ok(BLK_PACK_KEYS, s->d, &pkd) || !attn_mul_ok(BLK_PACK_KEYS, s->dv, &pkdv)) return blk_overflow(s);
  p->off_pk = attn_ws_take(&w, may_pack ? pkd : 0);
  p->off_pv = attn_ws_take(&w, may_pack ? pkdv : 0);
  p->off_ptag = attn_ws_take(&w, may_pack ? sizeof(size_t) : 0); /* floats enough for a size_t */
  p->pack_keys = attn_min_sz(s->n_kv, BLK_PACK_KEYS);
  const int scattered = half || s->k.row_stride != s->d || s->v.row_stride != s->dv;
  p->pack = may_pack && p->views && p->hg == 1 && p->qblocks >= BLK_PACK_MIN_QBLOCKS && scattered;
  p->off_heads = attn_ws_take(&w, heads_res);
  /* Key ranges: a step that can fold them and no map; one query block of at most
   * ATTN_SPLIT_TOKENS tokens, in ranges of whole key blocks, at least ATTN_SPLIT_KEYS keys each;
   * with a selection, every task (blk_ranges: up to BLK_SPLIT_MAX ranges, per query block). The
   * fold region (and, with threads, every range's state) is reserved whatever n_q and n_kv are. */
  p->split = sel && can_split ? BLK_SPLIT_MAX : 1;
  if (can_split && !sel && s->n_q <= ATTN_SPLIT_TOKENS && s->n_q <= p->tb) {
    const int64_t nkv = (int64_t)s->n_kv, p0 = nkv - (int64_t)s->n_q, p1 = nkv - 1;
    const int64_t lo = vis_lo(p, p0) > 0 ? vis_lo(p, p0) : 0, hi = vis_hi(p, p1) < nkv - 1 ? vis_hi(p, p1) : nkv - 1;
    const size_t span = hi >= lo ? (size_t)(hi - lo + 1) : 0;
    p->split =
        attn_max_sz(1, attn_min_sz(BLK_SPLIT_MAX, attn_min_sz(span / ATTN_SPLIT_KEYS, (span + p->bc - 1) / p->bc)));
  }
  /* a range's state: cr rows of a head (ph floats); per worker a fold region of the largest
   * group; with threads, every group's (p->hg heads, slot_floats) of every range */
  size_t ph = 0, fold = 0;
  if (can_split && (!attn_mul_ok(p->cr, s->dv + row_arrays, &ph) || !attn_mul_ok(ph, hg_res, &fold)))
    return blk_overflow(s);
  p->slot_floats = ph * p->hg; /* p->hg <= hg_res */
  p->off_fold = attn_ws_take(&w, fold);
  p->worker_floats = w.floats;
  p->workers = attn_workers(s->threads);
  size_t total, slots = 0, bytes;
  if (can_split && p->workers > 1 && (!attn_mul_ok(ph, gh_res, &slots) || !attn_mul_ok(slots, BLK_SPLIT_MAX, &slots)))
    return blk_overflow(s);
  if (w.overflow || !attn_mul_ok(w.floats, p->workers, &total)) return blk_overflow(s);
  attn_ws all = {total, 0};
  p->off_slots = attn_ws_take(&all, slots);
  if (!attn_ws_bytes(&all, &bytes)) return blk_overflow(s);
  p->scratch_bytes = bytes;
  return ATTN_OK;
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

/* The keys of [j0, j0 + jn) that position pos sees: [*first, *first + count) of the block. */
static size_t blk_visible(const attn_blocked_plan *p, int64_t pos, int64_t j0, size_t jn, size_t *first) {
  const int64_t jl = j0 + (int64_t)jn - 1;
  const int64_t a = clamp64(vis_lo(p, pos), j0, jl + 1), b = clamp64(vis_hi(p, pos), j0 - 1, jl);
  *first = b >= a ? (size_t)(a - j0) : 0;
  return b >= a ? (size_t)(b - a + 1) : 0;
}

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

/* The statistics of row r (token t at position pos, head h) from its sums (attn.h, analysis):
 * entropy log W - L / W within [0, log n], sparsity W / sqrt(n W2) within [1/sqrt(n), 1], n the
 * keys the mask shows it; both NaN unless W > 0 and W, W2 = sum w^2 > 0 and L = sum w log w are
 * finite (no visible key, all weights 0, a non-finite weight, or sums beyond float's range: GAU
 * weights above ~1e18 or all below ~1e-19). */
static void blk_stats(const attn_blocked_plan *p, const float *rs, size_t R, size_t r, int64_t pos,
                      const attn_row_stats *st, size_t t, size_t h) {
  const size_t *at = p->step->stats_at;
  const int64_t lo = vis_lo(p, pos) > 0 ? vis_lo(p, pos) : 0, last = (int64_t)p->shape->n_kv - 1,
                hi = vis_hi(p, pos) < last ? vis_hi(p, pos) : last;
  const double n = hi >= lo ? (double)(hi - lo + 1) : 0.0;
  double W = rs[at[0] * R + r], W2 = rs[at[1] * R + r], L = rs[at[2] * R + r];
  if (p->stats_sinks) { /* the sink's weight w = e^(sink - m) out of every sum: the keys' remain */
    const double x = (double)p->stats_sinks[h] - (double)rs[r], w = exp(x);
    W -= w, W2 -= w * w, L -= w * x;
  }
  double ent = NAN, sp = NAN;
  if (W > 0.0 && W <= FLT_MAX && W2 > 0.0 && W2 <= FLT_MAX && fabs(L) <= FLT_MAX) {
    ent = fmin(fmax(log(W) - L / W, 0.0), log(n));
    sp = fmin(fmax(W / sqrt(n * W2), 1.0 / sqrt(n)), 1.0);
  }
  const size_t e = t * st->layout.row_stride + h * st->layout.head_stride;
  if (st->entropy) st->entropy[e] = (float)ent;
  if (st->sparsity) st->sparsity[e] = (float)sp;
  if (st->count) st->count[e] = (float)n;
}

/* One task's fixed quantities. */
typedef struct blk_task {
  const attn_blocked_plan *p;
  const struct attn_ukernels *uk;
  const attn_blocked_io *io;
  float *ws;
  size_t h0, hn, tn, rows, t0; /* key heads h0 .. h0 + hn - 1; tokens t0 .. t0 + tn - 1 of the call */
  int64_t p0, p1;
  int last_group; /* the last head group of its query block (selection: it stores F) */
  /* A view (blk_boundary) of tokens t0 .. t0 + tn - 1 within its task: its first row among the
   * head regions' rows (Q^T columns, row state, accumulator rows), and the task's rows (Q^T's
   * row stride). A whole task: 0 and rows. */
  size_t c0, ldq;
} blk_task;

static float *blk_head(const blk_task *t, size_t hh) { return t->ws + t->p->off_heads + hh * t->p->head_floats; }

/* Row j0 of key/value head h of x (K or V, layout l), in place: elements of shape.kv_type. */
static const void *blk_row(const blk_task *t, const void *x, attn_layout l, int64_t j0, size_t h) {
  const size_t e = (size_t)j0 * l.row_stride + h * l.head_stride;
  return t->p->kv_type == ATTN_F32 ? (const void *)((const float *)x + e) : (const void *)((const uint16_t *)x + e);
}

/* Which key head the worker's packed K and V hold (blk_pack): that head + 1, 0 for none (reset
 * by attn_blocked_run_all at every call). */
static size_t *blk_pack_tag(const blk_task *t) { return (size_t *)(void *)(t->ws + t->p->off_ptag); }

/* Pack keys [0, pack_keys) of the task's key head into the worker's scratch (fp32, rows of d and
 * dv floats), unless it holds them already (a plan with p->pack: one key head per task). */
static void blk_pack(const blk_task *t) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  size_t *tag = blk_pack_tag(t);
  if (*tag == t->h0 + 1) return;
  const size_t n = p->pack_keys;
  const void *k = blk_row(t, t->io->k, s->k, 0, t->h0), *v = blk_row(t, t->io->v, s->v, 0, t->h0);
  float *pk = t->ws + p->off_pk, *pv = t->ws + p->off_pv;
  if (p->kv_type == ATTN_F32) {
    for (size_t j = 0; j < n; j++) {
      memcpy(pk + j * s->d, (const float *)k + j * s->k.row_stride, s->d * sizeof(float));
      memcpy(pv + j * s->dv, (const float *)v + j * s->v.row_stride, s->dv * sizeof(float));
    }
  } else {
    attn_f16_cvt_fn *cvt = p->kv_type == ATTN_F16 ? t->uk->f16_cvt : t->uk->bf16_cvt;
    cvt(n, s->d, k, s->k.row_stride, pk);
    cvt(n, s->dv, v, s->v.row_stride, pv);
  }
  *tag = t->h0 + 1;
}

/* Rows [j0, j0 + jn) of key (value 0) or value (value 1) head h as fp32: from the worker's packed
 * rows where they hold them (*ld: d or dv); else in place for fp32 (*ld: the layout's row
 * stride), converted by the path's conversion kernel into the scratch at off_kc / off_vc (bc x w
 * floats, *ld = w) for half types. */
static const float *blk_kv(const blk_task *t, int value, int64_t j0, size_t jn, size_t h, size_t *ld) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t w = value ? s->dv : s->d;
  if (p->pack && j0 >= 0 && (size_t)j0 + jn <= p->pack_keys && *blk_pack_tag(t) == h + 1) {
    *ld = w;
    return t->ws + (value ? p->off_pv : p->off_pk) + (size_t)j0 * w;
  }
  const attn_layout l = value ? s->v : s->k;
  const void *row = blk_row(t, value ? t->io->v : t->io->k, l, j0, h);
  if (p->kv_type == ATTN_F32) {
    *ld = l.row_stride;
    return row;
  }
  float *dst = t->ws + (value ? p->off_vc : p->off_kc);
  (p->kv_type == ATTN_F16 ? t->uk->f16_cvt : t->uk->bf16_cvt)(jn, w, row, l.row_stride, dst);
  *ld = w;
  return dst;
}

/* ST (jn x n, row stride ldst) = K_blk B for keys [j0, j0 + jn) of key head h, B (d x n, row
 * stride ldb): K read in place (fp32), or converted BLK_HALF_K_KEYS keys at a time into the K
 * scratch, each chunk's rows of ST at once (the rows of a GEMM are independent: the same result). */
static void blk_scores(const blk_task *t, int64_t j0, size_t jn, size_t h, size_t n, const float *b, size_t ldb,
                       float *st, size_t ldst) {
  const attn_shape *s = t->p->shape;
  const size_t step = t->p->kv_type == ATTN_F32 ? jn : BLK_HALF_K_KEYS;
  for (size_t a = 0; a < jn; a += step) {
    const size_t cn = attn_min_sz(step, jn - a);
    size_t ldk;
    const float *kb = blk_kv(t, 0, j0 + (int64_t)a, cn, h, &ldk);
    t->uk->gemm(cn, n, s->d, kb, ldk, 1, b, ldb, st + a * ldst, ldst, NULL, 0);
  }
}

/* The mask and the score step of head hh on ST (jn keys x rows, at st): P^T in place; returns the
 * step's factor for acc (NULL: plain accumulation). */
static const float *blk_step(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, float *st,
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
                             t->t0,
                             p->step_params,
                             t->ws + p->off_strip,
                             t->io->stats != NULL};
  return p->step->step(t->uk, &b, blk_head(t, hh) + p->off_rs + t->c0, p->R);
}

/* acc (head hh) = alpha acc + P V from P^T at st: V rows vb (fp32, row stride ldv), or vh (rows of
 * shape.kv_type read in place by few_pv: an unmasked block of a `few` plan). */
static void blk_pv(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *st, const float *alpha,
                   const float *vb, const void *vh, size_t ldv) {
  const attn_blocked_plan *p = t->p;
  const size_t rows = t->rows, DV = p->shape->dv;
  float *acc = blk_head(t, hh) + p->off_acc + t->c0 * DV;
  if (vh)
    t->uk->few_pv(p->kv_type, NULL, rows, DV, jn, st, rows, vh, ldv, acc, DV, alpha);
  else if (masked && !blk_hidden_v_finite(p, vb, ldv, j0, jn, t->p0, t->p1))
    blk_pv_exact(p, t->uk, st, jn, j0, t->tn, t->p0, vb, ldv, acc, alpha);
  else
    t->uk->gemm(rows, DV, jn, st, 1, rows, vb, ldv, acc, DV, alpha, 1);
}

/* Scores of keys [j0, j0 + jn) (ST, jn x rows, in the worker's off_st), their mask, the step and
 * acc += P V (blk_pv's V). */
static void blk_accumulate(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *vb,
                           const void *vh, size_t ldv, const float *bm) {
  float *st = t->ws + t->p->off_st;
  const float *alpha = blk_step(t, hh, j0, jn, masked, st, bm);
  blk_pv(t, hh, j0, jn, masked, st, alpha, vb, vh, ldv);
}

/* A `few` block of every head of the task at once (no selection, no map): the scores of all heads
 * key after key (few_scores over the heads: with heads side by side in a token's row, one sweep
 * along memory), each head's step on its own ST (off_sth), then P V of all heads the same way
 * (unmasked) or head by head (masked: V converted where half). */
static void blk_block_heads(const blk_task *t, int64_t j0, size_t jn, int masked) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t rows = t->rows, hs = p->bc * BLK_FEW_ROWS;
  float *sth = t->ws + p->off_sth;
  const attn_few_heads hk = {t->hn, s->k.head_stride, p->head_floats, hs, 0, 0, 0, 0};
  t->uk->few_scores(p->kv_type, &hk, jn, rows, s->d, blk_row(t, t->io->k, s->k, j0, t->h0), s->k.row_stride,
                    blk_head(t, 0) + p->off_qt, s->d, sth, rows);
  const float *alpha0 = NULL;
  for (size_t hh = 0; hh < t->hn; hh++) {
    const float *alpha = blk_step(t, hh, j0, jn, masked, sth + hh * hs, NULL);
    if (hh == 0) alpha0 = alpha;
    if (masked) {
      size_t ldv;
      const float *vb = blk_kv(t, 1, j0, jn, t->h0 + hh, &ldv);
      blk_pv(t, hh, j0, jn, masked, sth + hh * hs, alpha, vb, NULL, ldv);
    }
  }
  if (masked) return;
  /* every head's factor lies at the same place of its region (the step's row state) */
  const attn_few_heads hv = {t->hn, 0, 0, 0, hs, s->v.head_stride, p->head_floats, p->head_floats};
  t->uk->few_pv(p->kv_type, &hv, rows, s->dv, jn, sth, rows, blk_row(t, t->io->v, s->v, j0, t->h0), s->v.row_stride,
                blk_head(t, 0) + p->off_acc, s->dv, alpha0);
}

/* Exponential maps: the end b of the sub-block of u rows [a, jn) (m floats each) that starts at a,
 * where every feature's finite values spread at most ATTN_OFFSET_GUARD (at least one key: a
 * single row spreads 0); mn and mx end as each feature's finite minimum and maximum over [a, b). */
static size_t blk_split(const struct attn_ukernels *uk, size_t m, const float *u, size_t a, size_t jn, float *mn,
                        float *mx) {
  for (size_t f = 0; f < m; f++) mn[f] = INFINITY, mx[f] = -INFINITY;
  /* the common case first: the whole rest within the guard */
  uk->expfeat(ATTN_EXPF_RANGE, jn - a, m, u + a * m, m, NULL, 0, mx, NULL, mn, 0, 0);
  int within = 1;
  for (size_t f = 0; f < m; f++) within &= !(mx[f] - mn[f] > ATTN_OFFSET_GUARD);
  if (within) return jn;
  for (size_t f = 0; f < m; f++) mn[f] = INFINITY, mx[f] = -INFINITY;
  size_t j = a;
  for (; j < jn; j++) {
    const float *r = u + j * m;
    int cut = 0;
    for (size_t f = 0; f < m; f++) {
      const float x = r[f], lo = x < mn[f] ? x : mn[f], hi = x > mx[f] ? x : mx[f];
      cut |= isfinite(x) && hi - lo > ATTN_OFFSET_GUARD;
    }
    if (cut) break;
    for (size_t f = 0; f < m; f++)
      if (isfinite(r[f])) mn[f] = r[f] < mn[f] ? r[f] : mn[f], mx[f] = r[f] > mx[f] ? r[f] : mx[f];
  }
  return j > a ? j : a + 1;
}

/* Each row's offset over the keys of a boundary sub-block it sees: the largest x_f + u_jf. When
 * one edge of the window cuts the sub-block, every token sees a prefix (or every one a suffix) of
 * it, and the running maxima of u over the keys give each row's in O(m); otherwise a max-plus
 * pass per row. Rows that see none of the keys keep -inf. */
static void blk_row_offsets(const blk_task *t, int64_t j0, size_t jn, const float *ku, const float *uq, float *bm) {
  const attn_blocked_plan *p = t->p;
  const size_t m = p->m, g = p->g;
  int prefix = 1, suffix = 1;
  for (size_t ti = 0; ti < t->tn; ti++) {
    size_t first;
    const size_t count = blk_visible(p, t->p0 + (int64_t)ti, j0, jn, &first);
    prefix &= !count || first == 0;
    suffix &= !count || first + count == jn;
  }
  float *km = t->ws + p->off_km;
  if (prefix || suffix) {
    const size_t j0s = prefix ? 0 : jn - 1;
    for (size_t f = 0; f < m; f++) km[j0s * m + f] = ku[j0s * m + f];
    for (size_t s = 1; s < jn; s++) {
      const size_t j = prefix ? s : jn - 1 - s, prev = prefix ? j - 1 : j + 1;
      const float *u = ku + j * m, *a = km + prev * m;
      float *o = km + j * m;
      for (size_t f = 0; f < m; f++) o[f] = u[f] > a[f] ? u[f] : a[f];
    }
  }
  for (size_t ti = 0; ti < t->tn; ti++) {
    size_t first;
    const size_t count = blk_visible(p, t->p0 + (int64_t)ti, j0, jn, &first);
    if (!count) continue;
    for (size_t r = ti * g; r < (ti + 1) * g; r++)
      if (prefix || suffix)
        t->uk->expfeat(ATTN_EXPF_MAX, 1, m, km + (prefix ? count - 1 : first) * m, m, NULL, 0, bm + r, uq + r * m, NULL,
                       0, 0);
      else
        t->uk->expfeat(ATTN_EXPF_MAX, count, m, ku + first * m, m, NULL, 0, bm + r, uq + r * m, NULL, 0, 0);
  }
}

/* dsoftmax, first pass: each token's running column sums over the keys of a sub-block it sees,
 * c_t = max(c_t, cb), z_t = z_t e^(c_t - c) + (sum of its psi rows) e^(cb - c). cb may exceed the
 * visible keys' largest feature by the sub-block's spread (< e^40): c and z only need to agree. */
static void blk_column_sums(const blk_task *t, float *reg, int64_t j0, size_t jn, int masked, const float *kf,
                            const float *cb) {
  const attn_blocked_plan *p = t->p;
  const size_t m = p->m;
  float *cz = reg + p->off_cz, *sum = t->ws + p->off_tmp, *e1 = sum + m, *e2 = e1 + m;
  for (size_t ti = 0; ti < t->tn; ti++) {
    size_t first = 0, count = jn;
    if (masked && !(count = blk_visible(p, t->p0 + (int64_t)ti, j0, jn, &first))) continue;
    if (ti == 0 || masked) {
      for (size_t f = 0; f < m; f++) sum[f] = 0.0f;
      for (size_t j = first; j < first + count; j++)
        for (size_t f = 0; f < m; f++) sum[f] += kf[j * m + f];
    }
    float *c = cz + ti * m, *z = cz + (t->tn + ti) * m;
    for (size_t f = 0; f < m; f++) {
      const float cn = c[f] > cb[f] ? c[f] : cb[f];
      e1[f] = cn == -INFINITY ? 0.0f : c[f] - cn;
      e2[f] = cn == -INFINITY ? 0.0f : cb[f] - cn;
      c[f] = cn;
    }
    t->uk->vexp(m, e1, e1);
    t->uk->vexp(m, e2, e2);
    for (size_t f = 0; f < m; f++) z[f] = z[f] * e1[f] + sum[f] * e2[f];
  }
}

/* Exponential maps: keys [j0, j0 + jn) of one sub-block, u(K) rows ku (attn_blocked_features in
 * engine/blocked.h): psi with the sub-block's offsets cb (the features' finite maxima: kmax when
 * the caller has them, blk_split's), then (pass 0) each row's offset bm, phi, the scores and the
 * step, or (pass 1, dsoftmax) the column sums. */
static void blk_exp_keys(const blk_task *t, size_t hh, int64_t j0, size_t jn, int masked, const float *ku,
                         const float *vb, int pass, const float *kmax) {
  float *reg = blk_head(t, hh);
  const attn_blocked_plan *p = t->p;
  const struct attn_ukernels *uk = t->uk;
  const size_t m = p->m, rows = t->rows;
  float *kf = t->ws + p->off_kf, *cb = t->ws + p->off_cb;
  if (kmax) { /* a copy: kmax lies in scratch that the column sums reuse */
    memcpy(cb, kmax, m * sizeof(float));
  } else { /* the finite features' maxima: a non-finite key stays its own */
    for (size_t f = 0; f < m; f++) cb[f] = -INFINITY;
    uk->expfeat(ATTN_EXPF_RANGE, jn, m, ku, m, NULL, 0, cb, NULL, NULL, 0, 0);
  }
  uk->expfeat(ATTN_EXPF_KEYS, jn, m, ku, m, NULL, 0, NULL, cb, kf, m, 1);
  if (pass) {
    blk_column_sums(t, reg, j0, jn, masked, kf, cb);
    return;
  }
  float *uq = reg + p->off_uq, *bm = reg + p->off_bm, *qt = reg + p->off_qt;
  for (size_t r = 0; r < rows; r++) bm[r] = -INFINITY;
  if (masked) {
    blk_row_offsets(t, j0, jn, ku, uq, bm);
  } else { /* every key visible: max_f (x_f + cb_f) */
    for (size_t r = 0; r < rows; r++) uk->expfeat(ATTN_EXPF_MAX, 1, m, uq + r * m, m, NULL, 0, bm + r, cb, NULL, 0, 0);
  }
  uk->expfeat(ATTN_EXPF_SCALED, rows, m, uq, m, NULL, 0, bm, cb, qt, 1, rows);
  uk->gemm(jn, rows, m, kf, m, 1, qt, rows, t->ws + p->off_st, rows, NULL, 0);
  blk_accumulate(t, hh, j0, jn, masked, vb, NULL, p->shape->v.row_stride, bm);
}

/* relu with NaN kept and -inf made NaN (a selection: a non-finite score reaches F), branch-free:
 * the bits of y, cleared where y <= 0 (random signs would mispredict a branch half the time). */
static inline float blk_relu(float y) {
  y = y == -INFINITY ? NAN : y;
  uint32_t u;
  memcpy(&u, &y, sizeof u);
  u &= (uint32_t)0 - (uint32_t) !(y <= 0.0f);
  memcpy(&y, &u, sizeof y);
  return y;
}

/* Selection: F of the block's (key, token) pairs (fz, jn x tn) from head h_sel's scores (src:
 * row jj of key j0 + jj, its token ti at src[jj * ld + ti * step]): F_pj = sel_f[j] + the relu'd
 * scores of the block's earlier tokens k with j < k (none for j = 0), through the path's
 * select_scan kernel. A NaN or an infinity reaches only the later tokens of its key. The last
 * head group stores each key's sum over all the block's tokens. */
static int blk_select_f(const blk_task *t, int64_t j0, size_t jn, const float *src, size_t ld, size_t step, float *y) {
  const attn_blocked_plan *p = t->p;
  const size_t tn = t->tn;
  float *fz = t->ws + p->off_fz, *run = t->ws + p->off_run, *f = t->io->sel_f;
  if (tn == 1) { /* a decode step: F is sel_f itself; keys 0 < j < p0 take the token's selection */
    const int64_t a = j0 > 1 ? j0 : 1, e = j0 + (int64_t)jn, b = t->p0 < e ? t->p0 : e;
    memcpy(fz, f + j0, jn * sizeof(float));
    const size_t n = t->last_group && b > a ? (size_t)(b - a) : 0;
    float *fa = f + a;
    src += (size_t)(a - j0) * ld;
    if (ld == 1) /* contiguous: a vector loop */
      for (size_t i = 0; i < n; i++) fa[i] += blk_relu(src[i]);
    else
      for (size_t i = 0; i < n; i++) fa[i] += blk_relu(src[i * ld]);
    return 0;
  }
  memcpy(run, f + j0, jn * sizeof(float));
  /* token ti selects key j when ti >= j - p0 + 1 */
  t->uk->select_scan(jn, tn, src, ld, step, j0 - t->p0 + 1, j0 == 0, run, fz, y);
  if (t->last_group) memcpy(f + j0, run, jn * sizeof(float));
  return y != NULL;
}

/* Selection: F of keys [j0, j0 + jn) from head h_sel's scores: the columns of its key head's tile
 * when the task holds it (st, already computed; F is then subtracted from that tile in the same
 * pass, except in a decode step), else their own GEMM. Returns whether st has lost F. */
static int blk_select(const blk_task *t, int64_t j0, size_t jn, float *st) {
  const attn_blocked_plan *p = t->p;
  if (st) return blk_select_f(t, j0, jn, st + p->sel_gi, t->rows, p->g, st);
  float *ss = t->ws + p->off_ss;
  /* half K: converted into the K scratch, free again (the head's scores are done) */
  blk_scores(t, j0, jn, p->sel_kv, t->tn, t->ws + p->off_qs, t->tn, ss, t->tn);
  return blk_select_f(t, j0, jn, ss, t->tn, 1, NULL);
}

/* A row of ST (tn tokens x g heads) minus F of its key (tn floats), g a constant where inlined. */
static inline __attribute__((always_inline)) void blk_sub_group(float *row, const float *fr, size_t tn, size_t g) {
  for (size_t ti = 0; ti < tn; ti++)
    for (size_t gi = 0; gi < g; gi++) row[ti * g + gi] -= fr[ti];
}

/* Selection: every head's scores minus F (column r of ST is token r / g). The common GQA groups
 * get loops with a constant g, which compilers vectorise; g == 1 is one flat pass. */
static void blk_select_apply(const blk_task *t, float *st, size_t jn) {
  const size_t tn = t->tn, g = t->p->g, rows = t->rows;
  const float *fz = t->ws + t->p->off_fz;
  if (g == 1) { /* ST is jn x tn, as F */
    for (size_t e = 0; e < jn * tn; e++) st[e] -= fz[e];
    return;
  }
  for (size_t jj = 0; jj < jn; jj++) {
    float *row = st + jj * rows;
    const float *fr = fz + jj * tn;
    switch (g) {
      case 2:
        blk_sub_group(row, fr, tn, 2);
        break;
      case 4:
        blk_sub_group(row, fr, tn, 4);
        break;
      case 8:
        blk_sub_group(row, fr, tn, 8);
        break;
      default:
        blk_sub_group(row, fr, tn, g);
        break;
    }
  }
}

/* 1 when some token at [p0, p1] cannot see some key of [ka, kb]: a boundary block (masked). */
static int blk_masked(const attn_blocked_plan *p, int64_t p0, int64_t p1, int64_t ka, int64_t kb) {
  return ka < vis_lo(p, p1) || kb > vis_hi(p, p0);
}

/* Head hh's scaled Q^T from the task's (or view's) first row: d x rows, row stride t->ldq. */
static const float *blk_qt(const blk_task *t, size_t hh) { return blk_head(t, hh) + t->p->off_qt + t->c0; }

/* A boundary block of head hh (plans with p->views): its keys BLK_BOUNDARY_KEYS at a time, each
 * sub-block with a view of the tokens that see some of its keys, [first(a), last(b)] for keys
 * [a, b] (a key's tokens are a range whose ends grow with the key, so no token outside sees
 * one); a sub-block no token sees is skipped. The tokens left out would take P = 0 for every key,
 * alpha = 1 and l + 0, a step that changes no bit of their state (nor GAU's counts and sums); the
 * others take the block as smaller blocks (the same values up to rounding, the same bits for any
 * thread count: the sub-blocks follow the keys and the mask alone). What is saved: the scores of
 * pairs no token sees, under a causal mask about half the diagonal's (measured on an Intel Xeon
 * guest, AVX-512, d = 64: causal prefill 4.6% faster at n = 1k, 2-3% at 2k; a window of 256
 * keys, 8-11%). */
static void blk_boundary(const blk_task *t, size_t hh, int64_t j0, size_t jn, const float *vb, size_t ldv) {
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
    blk_scores(&v, ka, b - a, v.h0 + hh, v.rows, blk_qt(&v, hh), v.ldq, v.ws + p->off_st, v.rows);
    blk_accumulate(&v, hh, ka, b - a, masked, vb + a * ldv, NULL, ldv, NULL);
  }
}

/* One pass over the key blocks some row of the task sees (pass 1: dsoftmax's column sums). */
static void blk_pass(const blk_task *t, int64_t lo, int64_t hi, int pass) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t D = s->d, m = p->m, rows = t->rows;
  float *ku = t->ws + p->off_ku, *kf = t->ws + p->off_kf, *tmp = t->ws + p->off_tmp;
  for (int64_t j0 = lo; j0 <= hi; j0 += (int64_t)p->bc) {
    const size_t jn = (size_t)(hi + 1 - j0 < (int64_t)p->bc ? hi + 1 - j0 : (int64_t)p->bc);
    const int masked = blk_masked(p, t->p0, t->p1, j0, j0 + (int64_t)jn - 1);
    if (p->few && !p->sel && t->hn > 1) {
      blk_block_heads(t, j0, jn, masked);
      continue;
    }
    /* heads in order, h_sel's key head first when the task holds it (selection) */
    const int sel_here = p->sel && p->sel_kv >= t->h0 && p->sel_kv < t->h0 + t->hn;
    const size_t hs = sel_here ? p->sel_kv - t->h0 : 0;
    for (size_t hi_order = 0; hi_order < t->hn; hi_order++) {
      const size_t hh = !sel_here ? hi_order : hi_order == 0 ? hs : hi_order <= hs ? hi_order - 1 : hi_order;
      float *reg = blk_head(t, hh);
      /* fp32: K and V in place; fp16 / bf16 (no feature map: fp32 only): V's block rows converted
       * into scratch, K's in chunks by blk_scores */
      size_t ldv = s->v.row_stride, ldk = s->k.row_stride;
      const float *kb = p->fm ? blk_row(t, t->io->k, s->k, j0, t->h0 + hh) : NULL;
      const int vfew = p->few && !masked; /* V in place: a masked block's P V needs fp32 rows */
      const void *vh = vfew ? blk_row(t, t->io->v, s->v, j0, t->h0 + hh) : NULL;
      const float *vb = vfew ? NULL : blk_kv(t, 1, j0, jn, t->h0 + hh, &ldv);
      if (p->xm) { /* sub-blocks of bounded spread where some row sees only part of the block */
        p->fm->apply(t->uk, &p->fa, 1, jn, D, m, kb, ldk, ku, m, 1, t->ws + p->off_fms);
        for (size_t a = 0, b; a < jn; a = b) {
          b = masked ? blk_split(t->uk, m, ku, a, jn, tmp, tmp + m) : jn;
          blk_exp_keys(t, hh, j0 + (int64_t)a, b - a, masked, ku + a * m, vb + a * ldv, pass, masked ? tmp + m : NULL);
        }
        continue;
      }
      if (masked && p->views) {
        blk_boundary(t, hh, j0, jn, vb, ldv);
        continue;
      }
      if (p->fm) { /* psi(K_blk), read in place otherwise */
        p->fm->apply(t->uk, &p->fa, 1, jn, D, D, kb, ldk, kf, D, 1, NULL);
        t->uk->gemm(jn, rows, D, kf, D, 1, reg + p->off_qt, rows, t->ws + p->off_st, rows, NULL, 0);
      } else if (p->few) {
        t->uk->few_scores(p->kv_type, NULL, jn, rows, D, blk_row(t, t->io->k, s->k, j0, t->h0 + hh), ldk,
                          reg + p->off_qt, D, t->ws + p->off_st, rows);
      } else {
        blk_scores(t, j0, jn, t->h0 + hh, rows, blk_qt(t, hh), t->ldq, t->ws + p->off_st, rows);
      }
      if (p->sel) { /* the first head of the order is h_sel's key head when the task holds it */
        const int applied = hi_order == 0 && blk_select(t, j0, jn, sel_here ? t->ws + p->off_st : NULL);
        if (!applied) blk_select_apply(t, t->ws + p->off_st, jn);
      }
      blk_accumulate(t, hh, j0, jn, masked, vb, vh, ldv, NULL);
    }
  }
}

/* dsoftmax after its first pass: each row's query pre-features x_f = q_f - c_tf - log z_tf (-inf
 * for a feature no visible key has; NaN for a NaN sum). */
static void blk_dsoftmax_queries(const blk_task *t, float *reg) {
  const attn_blocked_plan *p = t->p;
  const size_t m = p->m;
  const float *cz = reg + p->off_cz;
  float *uq = reg + p->off_uq;
  for (size_t r = 0; r < t->rows; r++) {
    const size_t ti = r / p->g;
    const float *c = cz + ti * m, *z = cz + (t->tn + ti) * m;
    float *x = uq + r * m;
    for (size_t f = 0; f < m; f++) x[f] = z[f] > 0.0f ? x[f] - c[f] - logf(z[f]) : z[f] == 0.0f ? -INFINITY : NAN;
  }
}

/* Task `task` (query block task / groups, head group task % groups) on a worker's scratch ws. */
static blk_task blk_task_of(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                            size_t task, float *ws) {
  const attn_shape *s = p->shape;
  const size_t t0 = task / p->groups * p->tb, h0 = task % p->groups * p->hg;
  const size_t tn = attn_min_sz(p->tb, s->n_q - t0);
  const int64_t p0 = (int64_t)s->n_kv - (int64_t)s->n_q + (int64_t)t0;
  return (blk_task){p,
                    uk,
                    io,
                    ws,
                    h0,
                    attn_min_sz(p->hg, s->h_k - h0),
                    tn,
                    tn * p->g,
                    t0,
                    p0,
                    p0 + (int64_t)tn - 1,
                    task % p->groups == p->groups - 1,
                    0,
                    tn * p->g};
}

/* The keys some row of the task sees: [*lo, *hi] (empty when hi < lo). */
static void blk_task_keys(const blk_task *t, int64_t *lo, int64_t *hi) {
  const int64_t last = (int64_t)t->p->shape->n_kv - 1, a = vis_lo(t->p, t->p0), b = vis_hi(t->p, t->p1);
  *lo = a > 0 ? a : 0;
  *hi = b < last ? b : last;
}

/* The key ranges of a task: the plan's split; with a selection, its own: at least
 * BLK_SEL_RANGE_KEYS keys per range (ATTN_SPLIT_KEYS in calls of at most ATTN_SPLIT_TOKENS tokens,
 * as softmax splits them: a few rows' range costs too little to pay for a parallel-for), whole
 * key blocks, BLK_SPLIT_MAX at most (p->split). */
static size_t blk_ranges(const blk_task *t) {
  const attn_blocked_plan *p = t->p;
  if (!p->sel) return p->split;
  int64_t a, b;
  blk_task_keys(t, &a, &b);
  const size_t span = b >= a ? (size_t)(b - a + 1) : 0;
  const size_t keys = p->shape->n_q <= ATTN_SPLIT_TOKENS ? ATTN_SPLIT_KEYS : BLK_SEL_RANGE_KEYS;
  return attn_max_sz(1, attn_min_sz(p->split, attn_min_sz(span / keys, (span + p->bc - 1) / p->bc)));
}

/* Range r of a split task's keys: its share of the key blocks, whole blocks, in order. */
static void blk_range(const blk_task *t, size_t r, int64_t *lo, int64_t *hi) {
  int64_t a, b;
  blk_task_keys(t, &a, &b);
  const int64_t bc = (int64_t)t->p->bc, nb = (b - a + bc) / bc, S = (int64_t)blk_ranges(t);
  const int64_t r0 = (int64_t)r * nb / S, r1 = ((int64_t)r + 1) * nb / S;
  *lo = a + r0 * bc;
  *hi = a + r1 * bc - 1 < b ? a + r1 * bc - 1 : b;
}

/* scale * Q^T of `cols` query rows (d x cols, row stride cols, at qt): column c is token c / g,
 * head c % g of the rows from q (the query layout's strides). A vector transpose, then the scale:
 * each element rounded once, as a scalar product (the strided scalar pack this replaces took ~1 us
 * of a task's ~2.4 us fixed cost on a Zen 5 guest, a query block of 64 rows, d = 64). */
static void blk_pack_qt(const blk_task *t, float *qt, size_t cols, size_t g, const float *q) {
  const attn_shape *s = t->p->shape;
  t->uk->transpose(ATTN_TR_COPY, s->d, cols, g, qt, cols, q, s->q.row_stride, s->q.head_stride);
  t->uk->rows_axpby(s->d, cols, qt, cols, qt, cols, NULL, 0, &t->p->scale, 0, 0, 0);
}

/* Each head's scaled Q^T (or its features; `queries`: 0 when the scratch already holds this
 * task's, see blk_run_serial), empty row state and accumulator. `first`: the state starts at the
 * first key of each row's range (attn_step_rows). */
static void blk_begin(const blk_task *t, int first, int queries) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const attn_blocked_io *io = t->io;
  const attn_score_step *sp = p->step;
  const size_t g = p->g, D = s->d, DV = s->dv, R = p->R, m = p->m, tn = t->tn, rows = t->rows, t0 = t->t0;
  float *ws = t->ws;
  /* selection by a task without h_sel's key head: scale Q_sel^T for its own GEMM (blk_select) */
  const int sel_gemm = queries && p->sel && !(p->sel_kv >= t->h0 && p->sel_kv < t->h0 + t->hn);
  if (sel_gemm)
    blk_pack_qt(t, ws + p->off_qs, tn, 1,
                io->q + t0 * s->q.row_stride + (p->sel_kv * g + p->sel_gi) * s->q.head_stride);
  for (size_t hh = 0; hh < t->hn; hh++) {
    float *reg = blk_head(t, hh);
    float *qt = reg + p->off_qt, *acc = reg + p->off_acc;
    for (size_t gi = 0; queries && p->fm && gi < g; gi++) { /* u(q) row-major, or phi(q) transposed */
      const float *qh = io->q + t0 * s->q.row_stride + ((t->h0 + hh) * g + gi) * s->q.head_stride;
      if (p->xm)
        p->fm->apply(t->uk, &p->fa, 0, tn, D, m, qh, s->q.row_stride, reg + p->off_uq + gi * m, g * m, 1,
                     ws + p->off_fms);
      else
        p->fm->apply(t->uk, &p->fa, 0, tn, D, D, qh, s->q.row_stride, qt + gi, g, rows, NULL);
    }
    if (queries && !p->fm) { /* column r = ti g + gi of d x rows; few: row r of R x d */
      const float *qh = io->q + t0 * s->q.row_stride + (t->h0 + hh) * g * s->q.head_stride;
      if (!p->few)
        blk_pack_qt(t, qt, rows, g, qh);
      else
        for (size_t ti = 0; ti < tn; ti++)
          for (size_t gi = 0; gi < g; gi++) {
            const float *qr = qh + ti * s->q.row_stride + gi * s->q.head_stride;
            float *row = qt + (ti * g + gi) * D;
            for (size_t x = 0; x < D; x++) row[x] = qr[x] * p->scale;
          }
    }
    const attn_step_rows w = {p->step_params, (t->h0 + hh) * g, g, first};
    float *srs = reg + p->off_rs + sp->row_floats * R; /* the statistics' sums start at 0 (init may */
    for (size_t x = 0; io->stats && x < sp->stats_floats * R; x++) srs[x] = 0.0f; /* count a sink's) */
    sp->init(reg + p->off_rs, R, rows, &w);
    for (size_t x = 0; x < rows * DV; x++) acc[x] = 0.0f;
    float *cz = reg + p->off_cz;
    for (size_t x = 0; p->dsm && x < tn * m; x++) cz[x] = -INFINITY, cz[tn * m + x] = 0.0f;
  }
}

/* Keys [lo, hi] into every head's state (dsoftmax: its column sums first). */
static void blk_keys(const blk_task *t, int64_t lo, int64_t hi) {
  if (t->p->dsm) {
    blk_pass(t, lo, hi, 1);
    for (size_t hh = 0; hh < t->hn; hh++) blk_dsoftmax_queries(t, blk_head(t, hh));
  }
  blk_pass(t, lo, hi, 0);
}

/* A head's state in a fold or slot region (cr rows: acc cr x dv, then the row state arrays). */
static float *blk_folded(const attn_blocked_plan *p, float *region, size_t hh) {
  return region + hh * p->cr * (p->shape->dv + p->step->row_floats + p->step->stats_floats);
}

/* Every head's state (rows of the head regions) into a fold or slot region. */
static void blk_store(const blk_task *t, float *region) {
  const attn_blocked_plan *p = t->p;
  const size_t DV = p->shape->dv, rsf = p->step->row_floats + p->step->stats_floats, cr = p->cr;
  for (size_t hh = 0; hh < t->hn; hh++) {
    const float *reg = blk_head(t, hh);
    float *f = blk_folded(p, region, hh);
    memcpy(f, reg + p->off_acc, t->rows * DV * sizeof(float));
    for (size_t a = 0; a < rsf; a++) memcpy(f + cr * DV + a * cr, reg + p->off_rs + a * p->R, t->rows * sizeof(float));
  }
}

/* Outputs (and statistics) of every row from a state: the head regions (fold NULL) or a fold
 * region. */
static void blk_end(const blk_task *t, float *fold) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const attn_blocked_io *io = t->io;
  const size_t g = p->g, DV = s->dv, stride = fold ? p->cr : p->R;
  for (size_t hh = 0; hh < t->hn; hh++) {
    float *reg = blk_head(t, hh), *acc = fold ? blk_folded(p, fold, hh) : reg + p->off_acc;
    const float *rs = fold ? acc + p->cr * DV : reg + p->off_rs;
    for (size_t ti = 0; ti < t->tn; ti++)
      for (size_t gi = 0; gi < g; gi++) {
        const size_t r = ti * g + gi, h = (t->h0 + hh) * g + gi, tok = t->t0 + ti;
        p->step->finish(acc + r * DV, rs, stride, r, DV, io->o + tok * s->o.row_stride + h * s->o.head_stride,
                        io->aux ? io->aux + tok * io->aux_layout.row_stride + h * io->aux_layout.head_stride : NULL,
                        p->step_params);
        if (io->stats) blk_stats(p, rs, stride, r, t->p0 + (int64_t)ti, io->stats, tok, h);
      }
  }
}

/* Fold range states into `fold`: src a slot region (cr rows) or, src NULL, the head regions. */
static void blk_fold(const blk_task *t, float *fold, const float *src) {
  const attn_blocked_plan *p = t->p;
  const size_t DV = p->shape->dv, cr = p->cr;
  for (size_t hh = 0; hh < t->hn; hh++) {
    float *f = blk_folded(p, fold, hh);
    const float *reg = blk_head(t, hh), *acc2 = src ? blk_folded(p, (float *)src, hh) : reg + p->off_acc;
    const float *rs2 = src ? acc2 + cr * DV : reg + p->off_rs;
    p->step->merge(f, f + cr * DV, cr, acc2, rs2, src ? cr : p->R, t->rows, DV, t->io->stats != NULL);
  }
}

/* One task, whole (no split), on a worker's scratch. */
static void blk_run_task(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                         size_t task, float *ws) {
  const blk_task t = blk_task_of(p, uk, io, task, ws);
  int64_t lo, hi;
  blk_task_keys(&t, &lo, &hi);
  if (p->pack && lo < (int64_t)p->pack_keys && lo <= hi) blk_pack(&t);
  blk_begin(&t, 1, 1);
  blk_keys(&t, lo, hi);
  blk_end(&t, NULL);
}

/* One range of a split task into the head regions (`queries`: as blk_begin's). */
static blk_task blk_run_range(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                              size_t task, size_t r, float *ws, int queries) {
  const blk_task t = blk_task_of(p, uk, io, task, ws);
  int64_t lo, hi;
  blk_range(&t, r, &lo, &hi);
  blk_begin(&t, r == 0, queries);
  blk_keys(&t, lo, hi);
  return t;
}

/* One task on the calling thread: whole, or its ranges one after another, each folded into the
 * fold region in order (range 0 first), as the threaded fold folds the ranges' slots. The ranges
 * share the scratch, so range 0's queries serve the others: a split plan has no feature map
 * (can_split), and its key blocks only read the scaled Q. */
static void blk_run_serial(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                           size_t task, float *ws) {
  blk_task t = blk_task_of(p, uk, io, task, ws);
  const size_t S = blk_ranges(&t);
  if (S == 1) {
    blk_run_task(p, uk, io, task, ws);
    return;
  }
  float *fold = ws + p->off_fold;
  for (size_t r = 0; r < S; r++) {
    t = blk_run_range(p, uk, io, task, r, ws, r == 0);
    if (r == 0)
      blk_store(&t, fold);
    else
      blk_fold(&t, fold, NULL);
  }
  blk_end(&t, fold);
}

typedef struct blk_par {
  const attn_blocked_plan *p;
  const struct attn_ukernels *uk;
  const attn_blocked_io *io;
  float *ws;
  size_t qb; /* a selection's query block */
} blk_par;

/* Range r of head group G's task (query block task / groups) stored into its slot. */
static void blk_par_range(const blk_par *c, size_t task, size_t r, float *ws) {
  const attn_blocked_plan *p = c->p;
  const blk_task t = blk_run_range(p, c->uk, c->io, task, r, ws, 1); /* ws last held any task's */
  blk_store(&t, c->ws + p->off_slots + ((task % p->groups) * p->split + r) * p->slot_floats);
}

/* The outputs of a split task from its ranges' slots, folded in range order (calling thread). */
static void blk_par_fold(const blk_par *c, size_t task, size_t S) {
  const attn_blocked_plan *p = c->p;
  const blk_task t = blk_task_of(p, c->uk, c->io, task, c->ws);
  const float *slot = c->ws + p->off_slots + (task % p->groups) * p->split * p->slot_floats;
  float *fold = c->ws + p->off_fold;
  memcpy(fold, slot, p->slot_floats * sizeof(float));
  for (size_t r = 1; r < S; r++) blk_fold(&t, fold, slot + r * p->slot_floats);
  blk_end(&t, fold);
}

/* A task of the parallel-for: a whole task, or (split) one range stored into its slot. */
static void blk_par_task(void *ctx, size_t i, size_t worker) {
  const blk_par *c = ctx;
  const attn_blocked_plan *p = c->p;
  float *ws = c->ws + worker * p->worker_floats;
  if (p->split == 1) { /* the last query blocks first: under a causal mask they cost the most */
    const size_t last = p->qblocks - 1;
    /* packed K/V: head by head, so that a worker packs a head once for its run of its tasks */
    blk_run_task(p, c->uk, c->io,
                 p->pack ? (last - i % p->qblocks) * p->groups + i / p->qblocks : p->qblocks * p->groups - 1 - i, ws);
    return;
  }
  blk_par_range(c, i / p->split, i % p->split, ws); /* one query block: task = head group */
}

/* A selection's range r of query block c->qb: every head group's, in order, so that the last
 * group stores F of the range's keys after the others have read it (ranges hold disjoint keys). */
static void blk_par_sel_range(void *ctx, size_t r, size_t worker) {
  const blk_par *c = ctx;
  const attn_blocked_plan *p = c->p;
  for (size_t G = 0; G < p->groups; G++) blk_par_range(c, c->qb * p->groups + G, r, c->ws + worker * p->worker_floats);
}

/* A selection: query blocks in order (F runs along the tokens); with threads, each block's key
 * ranges in parallel, then every head group's fold. Tasks group-major within a block, as the
 * serial order reads F of a key before its last group writes it. */
static void blk_run_select(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                           float *ws) {
  for (size_t qb = 0; qb < p->qblocks; qb++) {
    const blk_task t = blk_task_of(p, uk, io, qb * p->groups, ws);
    const size_t S = blk_ranges(&t);
    if (p->workers > 1 && S > 1) {
      blk_par c = {p, uk, io, ws, qb};
      attn_parallel(p->shape->threads, S, blk_par_sel_range, &c);
      for (size_t G = 0; G < p->groups; G++) blk_par_fold(&c, qb * p->groups + G, S);
      continue;
    }
    for (size_t G = 0; G < p->groups; G++) blk_run_serial(p, uk, io, qb * p->groups + G, ws);
  }
}

void attn_blocked_run_all(const attn_blocked_plan *p, const struct attn_ukernels *uk, const attn_blocked_io *io,
                          float *ws) {
  const size_t tasks = p->qblocks * p->groups, S = p->split;
  for (size_t w = 0; p->pack && w < p->workers; w++) /* no worker holds a packed head yet */
    *(size_t *)(void *)(ws + w * p->worker_floats + p->off_ptag) = 0;
  if (p->sel) {
    blk_run_select(p, uk, io, ws);
    return;
  }
  if (p->workers > 1) {
    blk_par c = {p, uk, io, ws, 0};
    attn_parallel(p->shape->threads, tasks * S, blk_par_task, &c);
    for (size_t task = 0; S > 1 && task < tasks; task++) blk_par_fold(&c, task, S); /* in range order */
    return;
  }
  /* Tasks are independent (the same bits in any order). Where a head's key rows lie closer
   * together than a token's heads (head-major K/V), or its K and V are packed, one head group's
   * query blocks after another, so that its K and V stay in L2 across them where they fit (and a
   * head is packed once); otherwise (token-major in place: a plan that does not pack, such as a
   * few query blocks) by query block (the rows of one head there fill only a fraction of the
   * cache's sets, and the heads of a token share its pages). Measured on an Intel Xeon guest (8
   * heads, n = 1k, causal, AVX-512): head by head 6% faster with head-major K/V, 1.5% slower
   * token-major in place. */
  const attn_shape *s = p->shape;
  if (s->k.row_stride < s->k.head_stride || p->pack) {
    for (size_t G = 0; G < p->groups; G++)
      for (size_t qb = 0; qb < p->qblocks; qb++) blk_run_serial(p, uk, io, qb * p->groups + G, ws);
    return;
  }
  for (size_t task = 0; task < tasks; task++) blk_run_serial(p, uk, io, task, ws);
}

attn_status attn_blocked_call_check(attn_blocked_call *c, const attn_shape *s, float scale, const attn_layout *aux) {
  attn_status st;
  c->aux_span = 0;
  if ((st = attn_shape_check(s, 0, &c->sp))) return st;
  if (s->h_k != s->h_v)
    return attn_fail(ATTN_E_BAD_HEADS, "shape.h_k %zu != shape.h_v %zu: this variant needs one value head per key head",
                     s->h_k, s->h_v);
  if (c->sp.H != s->h_q)
    return attn_fail(ATTN_E_BAD_HEADS, "shape.h_q %zu < shape.h_k %zu: key heads must divide the query heads", s->h_q,
                     s->h_k);
  if (!isfinite(scale)) return attn_fail(ATTN_E_BAD_SCALE, "desc.scale %g: must be finite", (double)scale);
  if (aux && (st = attn_check_output(s->n_q, s->h_q, 1, *aux, &c->aux_span)))
    return attn_fail_layout(st, "desc.lse", NULL, s->n_q, s->h_q, 1, *aux);
  return (c->uk = attn_dispatch()) ? ATTN_OK : attn_fail_isa();
}

attn_status attn_blocked_stats_outputs(const attn_blocked_call *c, const attn_row_stats *stats, void **out,
                                       size_t *out_bytes, size_t *n) {
  size_t bytes;
  const attn_status st = attn_row_stats_check(stats, c->plan.shape->n_q, c->sp.H, &bytes);
  if (st) return st;
  float *const a[] = {stats->entropy, stats->sparsity, stats->count};
  for (size_t i = 0; i < 3; i++) out[*n] = a[i], out_bytes[(*n)++] = bytes;
  return ATTN_OK;
}
