/* The blocked engine's plan (engine/blocked.h, attn_blocked_plan_make): block sizes, head groups,
 * key ranges, and the layout of each worker's scratch and of the workspace. */
#include "engine/blocked/internal.h"
#include "engine/blocked/mask.h"

/* One head's region for R rows (blk_head): the scaled queries (m x R), the accumulators (R x dv),
 * the step's row state (R rows each), with an exponential map u(Q) and bm, with dsoftmax c | z
 * (tbm2). R is at most the rows of a block, whose products the plan checked. Sets the offsets and
 * head_floats; nonzero on overflow. */
static int blk_head_layout(attn_blocked_plan *p, size_t R, const attn_score_step *step, size_t tbm2) {
  const size_t m = p->m, mr = m * R;
  attn_ws h = {0, 0};
  p->hl.qt = attn_ws_take(&h, mr);
  p->hl.acc = attn_ws_take(&h, R * p->shape->dv);
  p->hl.rs = attn_ws_take(&h, R * (step->row_floats + step->stats_floats));
  p->hl.uq = attn_ws_take(&h, p->xm ? mr : 0);
  p->hl.bm = attn_ws_take(&h, p->xm ? R : 0);
  p->hl.cz = attn_ws_take(&h, p->dsm ? tbm2 : 0);
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

/* Whether each key head's K and V rows lie apart from the other heads' (a head-major cache, or
 * head-major pages), rather than interleaved in each token's row (token-major); one key head is
 * both. */
static int blk_head_major(const attn_shape *s) {
  return s->h_k == 1 || (s->k.head_stride >= s->k.row_stride && s->v.head_stride >= s->v.row_stride);
}
/* The same, and each head's rows contiguous: a head-major cache, not paged. */
static int blk_heads_apart(const attn_blocked_plan *p) {
  return !p->paged && p->shape->h_k > 1 && blk_head_major(p->shape);
}
/* Whether a few-rows plan of R rows a key head takes an unmasked block through few_fused: one row
 * (no GQA, one token), a fusable step and a head-major cache, paged or not (the same bits either
 * way), whatever the K/V type (half and int8 calls keep the fp32 call's bits). Token-major caches
 * keep their blocks: there a group of heads' 96-key sweeps along each token's row ran faster than
 * 16-key steps (measured: see simd/fewfused_tmpl.h); so do GQA groups and speculative blocks
 * (R > 1): the same steps over 4 rows a key head ran 0.63-0.78x their blocks, fp32 and fp16, 32 /
 * 8 heads of 128 over 16k keys (measured: against 6489f94, alternated in one process). */
static int blk_fusable(const attn_shape *s, const attn_score_step *step, size_t R) {
  return R == 1 && step->fusable && blk_head_major(s);
}

/* The regions a worker's scratch holds, in floats, and the workspace's range slots. */
typedef struct blk_sizes {
  size_t st, fms, sth, heads, fold;      /* scores, map scratch, heads' scores, head regions, a fold
                                           region */
  size_t slot_heads_floats, slot_ranges; /* with threads: ph floats per head of the groups, ranges */
  int pack;                              /* packed K and V */
  size_t few_run;                        /* few_pv's keys at a time, when some n_q runs a few-rows plan */
  size_t fused_keys;                     /* paged, fused: few_fused's keys a step (its rows gathered) */
} blk_sizes;

/* Each worker's scratch layout (p->wl, worker_floats, slots) for sizes z, and the workspace's
 * bytes; nonzero on overflow. */
static int blk_lay_out(attn_blocked_plan *p, const blk_sizes *z, size_t *bytes) {
  const attn_shape *s = p->shape;
  const size_t m = p->m, bc = p->bc, tb = p->tb;
  const int converted = s->kv_type != ATTN_F32; /* half and int8 K/V */
  attn_ws w = {0, 0};
  size_t bcm, strip, dtb, dr, bctb, bcd, bcdv, pkd, pkdv, slots = 0, total;
  if (!attn_mul_ok(bc, m, &bcm) || !attn_mul_ok(bc + 2 * tb, p->g, &strip) || !attn_mul_ok(s->d, tb, &dtb) ||
      !attn_mul_ok(dtb, p->g, &dr) || !attn_mul_ok(bc, tb, &bctb) || !attn_mul_ok(bc, s->d, &bcd) ||
      !attn_mul_ok(bc, s->dv, &bcdv) || !attn_mul_ok(BLK_PACK_KEYS, s->d, &pkd) ||
      !attn_mul_ok(BLK_PACK_KEYS, s->dv, &pkdv) || !attn_mul_ok(z->slot_heads_floats, z->slot_ranges, &slots))
    return 1;
  p->wl.st = attn_ws_take(&w, z->st);
  p->wl.kf = attn_ws_take(&w, p->fm ? bcm : 0);
  p->wl.ku = attn_ws_take(&w, p->xm ? bcm : 0);
  p->wl.km = attn_ws_take(&w, p->xm ? bcm : 0);
  p->wl.fms = attn_ws_take(&w, z->fms);
  p->wl.cb = attn_ws_take(&w, p->xm ? m : 0);
  p->wl.tmp = attn_ws_take(&w, p->xm ? 3 * m : 0);
  p->wl.strip = attn_ws_take(&w, p->step->strip ? strip : 0);
  p->wl.qs = attn_ws_take(&w, p->sel ? dtb : 0);
  p->wl.ss = attn_ws_take(&w, p->sel ? bctb : 0);
  p->wl.fz = attn_ws_take(&w, p->sel ? bctb : 0);
  p->wl.run = attn_ws_take(&w, p->sel ? bc : 0);
  /* half and int8 K/V: the block's converted rows (no scratch for fp32, read in place) */
  p->wl.kc = attn_ws_take(&w, converted ? bcd / bc * attn_min_sz(bc, BLK_HALF_K_KEYS) : 0);
  p->wl.vc = attn_ws_take(&w, converted || p->paged ? bcdv : 0);
  /* paged few-rows blocks: one run of few_pv's keys (fp32 rows bound every type's) and its scales */
  const size_t jc = attn_max_sz(z->few_run, 1);
  p->wl.vg_scales = jc * s->dv; /* jc <= 32: no overflow beside bc dv */
  p->wl.vg = attn_ws_take(&w, p->paged && z->few_run ? p->wl.vg_scales + jc : 0);
  /* paged fused plans: a step's K and V rows (fp32 bound every type's) and their scales; its
   * product, fused_keys (d + dv + 2), checked by the plan */
  p->wl.fg_scales = z->fused_keys * (s->d + s->dv);
  p->wl.fg = attn_ws_take(&w, z->fused_keys ? p->wl.fg_scales + 2 * z->fused_keys : 0);
  p->wl.sth = attn_ws_take(&w, z->sth); /* `few` blocks of several heads: every head's ST */
  p->wl.pk = attn_ws_take(&w, z->pack ? pkd : 0);
  p->wl.pv = attn_ws_take(&w, z->pack ? pkdv : 0);
  p->wl.ptag = attn_ws_take(&w, z->pack ? sizeof(size_t) : 0); /* floats enough for a size_t */
  p->wl.heads = attn_ws_take(&w, z->heads);
  p->wl.fold = attn_ws_take(&w, z->fold);
  p->wl.qc = attn_ws_take(&w, s->q_type != ATTN_F32 ? dr : 0);
  p->wl.oc = attn_ws_take(&w, s->o_type != ATTN_F32 ? s->dv : 0);
  p->worker_floats = w.floats;
  if (w.overflow || !attn_mul_ok(w.floats, p->workers, &total)) return 1;
  attn_ws all = {total, 0};
  p->slots = attn_ws_take(&all, slots);
  return !attn_ws_bytes(&all, bytes);
}

/* A plan whose workspace does not fit in size_t. */
static ATTN_COLD attn_status blk_overflow(const attn_shape *s) {
  return attn_fail(ATTN_E_SIZE_OVERFLOW, "the workspace of n_q %zu, h_q %zu, d %zu, dv %zu overflows size_t", s->n_q,
                   s->h_q, s->d, s->dv);
}

attn_status attn_blocked_plan_make(attn_blocked_plan *p, const attn_blocked_spec *spec,
                                   const struct attn_ukernels *uk) {
  const attn_shape *s = spec->shape;
  const attn_mask mask = spec->mask;
  const attn_score_step *step = spec->step;
  const attn_blocked_features *feat = spec->feat;
  const attn_blocked_select *sel = spec->sel;
  *p = (attn_blocked_plan){.shape = s,
                           .step = step,
                           .step_params = spec->step_params,
                           .scale = spec->scale,
                           .m = s->d,
                           .stats_sinks = spec->stats_sinks,
                           .paged = spec->paged};
  if (feat) p->fm = feat->fm, p->fm_xs = feat->xs, p->m = feat->m;
  p->xm = p->fm && p->fm->offsets;
  p->dsm = p->xm && p->fm->query == ATTN_EXPF_SOFTMAX;
  const size_t reach = s->n_q + s->n_kv; /* cannot overflow: both spans fit in PTRDIFF_MAX / 4 */
  p->left = clamp_reach(mask.left, reach);
  p->right = clamp_reach(mask.right, reach);
  p->chunk = clamp_reach(mask.chunk, reach);
  p->g = s->h_q / s->h_k;
  /* wide rows: ukernels.inc's q_block_wide, whatever the mask (the workspace a descriptor asks
   * depends on its sizes, not on its mask) */
  p->tb = attn_max_sz(1, (s->d + s->dv >= 256 ? uk->q_block_wide : uk->q_block) / p->g);
  if (sel) p->sel = 1, p->sel_kv = sel->h_sel / p->g, p->sel_gi = sel->h_sel % p->g;
  p->bc = uk->kv_block;
  const size_t m = p->m;
  size_t mr, bcr, rdv, rsf, bcm, tbm2, fr, fkd;
  if (!attn_mul_ok(p->tb, p->g, &p->R) || !attn_mul_ok(m, p->R, &mr) || !attn_mul_ok(p->bc, p->R, &bcr) ||
      !attn_mul_ok(p->R, s->dv, &rdv) || !attn_mul_ok(p->R, step->row_floats + step->stats_floats, &rsf) ||
      !attn_mul_ok(p->bc, m, &bcm) || !attn_mul_ok(2 * p->tb, m, &tbm2) ||
      !attn_mul_ok(attn_max_sz(p->bc, p->tb), s->d, &fr) || !attn_mul_ok(uk->few_fused_keys, s->d + s->dv + 2, &fkd) ||
      m > SIZE_MAX / 4)
    return blk_overflow(s);
  if (blk_head_layout(p, p->R, step, tbm2)) return blk_overflow(s);
  /* Heads advance together when the call has fewer tokens than a block, and always with a
   * selection (its F is then computed once per key block for the whole group, not once per head
   * group): hg heads of a block's rows within BLK_HEAD_GROUP_FLOATS. A few-rows call (n_q g <=
   * BLK_FEW_ROWS, a decode step) lays each head's region out for its own rows and groups as many
   * heads as BLK_SHORT_GROUP_FLOATS holds with their scores and folded states (blk_short_group):
   * a decode step with all of a token's heads reads K and V along memory, where groups (7 + 1
   * heads of 8 with a block's 64 rows on the AVX-512 path: 8.4k floats a head) each sweep the
   * whole cache again for their share of every token's row. The workspace does not depend on n_q (a prefill's serves the decode steps after it): it is
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
    /* A head-major cache: one head a group, its K and V read as two streams, where a group's
     * few_scores and few_pv read two streams a head of it, which the hardware's prefetchers
     * followed badly; a head's rows being contiguous, no group sweeps the cache again. Over 16k
     * keys from memory, 8 key heads: GQA 32/8 fp32 1.25-1.36x, 4 query rows 1.3x, fp16 MHA
     * 1.1-1.18x, d = 64 1.1-1.14x; fp32 MHA at d = 128 0.93-1.05x, the sign varying from run to
     * run (measured: 76ef476, both alternated in one process). */
    p->hg = blk_heads_apart(p) ? 1 : blk_short_group(p, p->head_floats, more);
  } else if (s->n_q < p->tb) {
    p->hg = hg;
  }
  p->qblocks = (s->n_q + p->tb - 1) / p->tb;
  p->kv_type = s->kv_type;
  p->kv.size = attn_dtype_size(s->kv_type);
  p->kv.to_f32 = s->kv_type == ATTN_F16 ? uk->f16_cvt : s->kv_type == ATTN_BF16 ? uk->bf16_cvt : NULL;
  p->few = !p->fm && attn_min_sz(p->tb, s->n_q) * p->g <= BLK_FEW_ROWS;
  p->views = !p->fm && !p->sel && !p->few;
  p->block = p->xm ? BLK_BLOCK_XMAP : BLK_BLOCK_SCORED;
  p->scores = p->fm ? BLK_SCORES_FEATURE : p->few ? BLK_SCORES_FEW : BLK_SCORES_GEMM;
  p->heads_together = p->few && !p->sel;
  p->fused = p->heads_together && blk_fusable(s, step, p->R);
  p->pack_keys = attn_min_sz(s->n_kv, BLK_PACK_KEYS);
  /* Key ranges: a step that can fold them and no map; one query block of at most
   * ATTN_SPLIT_TOKENS tokens, in ranges of whole key blocks, at least ATTN_SPLIT_KEYS keys each;
   * with a selection, every task (blk_ranges: up to BLK_SPLIT_MAX ranges, per query block). */
  p->split = sel && can_split ? BLK_SPLIT_MAX : 1;
  if (can_split && !sel && s->n_q <= ATTN_SPLIT_TOKENS && s->n_q <= p->tb) {
    const int64_t nkv = (int64_t)s->n_kv, p0 = nkv - (int64_t)s->n_q, p1 = nkv - 1;
    const int64_t lo = vis_lo(p, p0) > 0 ? vis_lo(p, p0) : 0, hi = vis_hi(p, p1) < nkv - 1 ? vis_hi(p, p1) : nkv - 1;
    const size_t span = hi >= lo ? (size_t)(hi - lo + 1) : 0;
    p->split =
        attn_max_sz(1, attn_min_sz(BLK_SPLIT_MAX, attn_min_sz(span / ATTN_SPLIT_KEYS, (span + p->bc - 1) / p->bc)));
  }
  p->workers = attn_workers(s->threads);
  /* A few-rows call on threads whose key ranges alone give fewer tasks than workers: its heads
   * in that many groups (at most one per key head), so that a decode over a short cache uses the
   * threads too. Heads are independent (each its own rows, state and outputs): grouping them
   * otherwise changes no bit, while the key ranges (which do) stay the problem's alone. */
  if (p->heads_together && p->workers > 1 && p->split < p->workers) {
    const size_t want = attn_min_sz(s->h_k, (p->workers + p->split - 1) / p->split);
    if ((s->h_k + p->hg - 1) / p->hg < want) p->hg = (s->h_k + want - 1) / want;
  }
  p->groups = (s->h_k + p->hg - 1) / p->hg;
  const int scattered = s->kv_type != ATTN_F32 || s->k.row_stride != s->d || s->v.row_stride != s->dv || p->paged;
  p->pack = !p->fm && !p->sel && p->views && p->hg == 1 && p->qblocks >= BLK_PACK_MIN_QBLOCKS && scattered;
  /* the map's scratch for up to max(bc, tb) rows: favor's x' rows, fr floats (checked above) */
  const size_t fms = p->fm ? p->fm->scratch(attn_max_sz(p->bc, p->tb), s->d, m) : 0;
  /* a range's state: cr rows of a head (ph floats) */
  size_t ph = 0;
  if (can_split && !attn_mul_ok(p->cr, s->dv + row_arrays, &ph)) return blk_overflow(s);
  p->slot_floats = ph * p->hg; /* p->hg <= hg_res */
  /* with threads, a few-rows plan's groups hold at most h_k + hg - 1 heads (the last one short) */
  if (few_heads && p->workers > 1) gh_res = attn_max_sz(gh_res, s->h_k + hg_res - 1);
  /* The workspace query's answer: reserved for every n_q and n_kv (a prefill's serves the decode
   * steps after it), then the call's own layout, no more than this call uses (its rows' heads and
   * scores, packing only where it packs, its key ranges), which the call checks. */
  const blk_sizes reserve = {bcr,
                             fms,
                             st_head * hg_res,
                             heads_res,
                             ph * hg_res,
                             can_split && p->workers > 1 ? ph * gh_res : 0,
                             BLK_SPLIT_MAX,
                             !p->fm && !p->sel,
                             few_heads ? attn_max_sz(uk->few_pv_run, uk->few_pv_run_rows) : 0,
                             few_heads && p->paged && blk_fusable(s, step, p->g) ? uk->few_fused_keys : 0};
  if (blk_lay_out(p, &reserve, &p->reserve_bytes)) return blk_overflow(s);
  const size_t rows_st = p->bc * p->R; /* bc x R: checked with the block's R above, R <= it */
  const blk_sizes own = {rows_st,
                         fms,
                         p->heads_together ? rows_st * p->hg : 0,
                         p->hg * p->head_floats,
                         p->split > 1 ? p->slot_floats : 0,
                         p->split > 1 && p->workers > 1 ? ph * p->groups * p->hg : 0,
                         p->split,
                         p->pack,
                         p->heads_together ? attn_max_sz(uk->few_pv_run, uk->few_pv_run_rows) : 0,
                         p->fused && p->paged ? uk->few_fused_keys : 0};
  if (blk_lay_out(p, &own, &p->scratch_bytes)) return blk_overflow(s);
  return ATTN_OK;
}
