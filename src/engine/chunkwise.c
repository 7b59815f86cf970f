/* The chunkwise engine (engine/chunkwise.h), written once for every ISA path, feature map and
 * gate. Every product is one call of the path's GEMM micro-kernel. */
#include "engine/chunkwise.h"

#include <stdatomic.h>

/* Rows per rows_axpby call where each row's factors are computed first (on the stack). */
#define CW_ROW_BATCH 64

static size_t gcd_sz(size_t a, size_t b) {
  while (b) {
    const size_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* A plan whose state or workspace does not fit in size_t. */
static ATTN_COLD attn_status cw_overflow(const attn_chunkwise_plan *p, const char *what) {
  return attn_fail(ATTN_E_SIZE_OVERFLOW, "the %s of m %zu, dv %zu, chunk %zu overflows size_t", what, p->m,
                   p->shape->dv, p->C);
}

attn_status attn_chunkwise_shape(attn_chunkwise_plan *p, const attn_shape *s, size_t H, const attn_featmap *fm,
                                 size_t m_req, int causal, int normalize, float scale, float eps,
                                 const attn_chunkwise_gates *g) {
  /* Exponential maps take the scale as their temperature (x' = sqrt(scale) x, both sides);
   * element-wise maps multiply phi(q) by it, which is one factor on the output. */
  *p = (attn_chunkwise_plan){.shape = s,
                             .fm = fm,
                             .g = *g,
                             .fa = {fm->offsets ? sqrtf(scale) : 1.0f, NULL},
                             .causal = causal,
                             .normalize = normalize,
                             .divide = normalize && fm->divide,
                             .out_scale = fm->offsets ? 1.0f : scale,
                             .eps = eps};
  if (!(p->m = fm->size(s->d, m_req)))
    return attn_fail(ATTN_E_BAD_FEATURE_MAP, "desc.m %zu: feature_map %d cannot use it (all but favor take 0 or d %zu)",
                     m_req, (int)fm->id, s->d);
  p->heads = s->h_k / gcd_sz(s->h_k, s->h_v) * s->h_v; /* lcm: divides H, so no overflow */
  p->heads = p->heads / gcd_sz(p->heads, g->h_g) * g->h_g;
  p->per = H / p->heads;
  p->gdiv = p->heads / g->h_g;
  p->qdiv = H / s->h_q;
  p->kdiv = p->heads / s->h_k;
  p->vdiv = p->heads / s->h_v;
  p->lds = s->dv + 2; /* S | z | offset; cannot overflow: dv <= span of v <= PTRDIFF_MAX / 4 */
  p->W = normalize ? s->dv + 1 : s->dv;
  size_t hm;
  if (!attn_mul_ok(p->heads, p->m, &hm) || !attn_mul_ok(hm, p->lds, &p->state_floats) ||
      p->state_floats > SIZE_MAX / sizeof(float))
    return cw_overflow(p, "state");
  return ATTN_OK;
}

attn_status attn_chunkwise_plan_make(attn_chunkwise_plan *p, size_t chunk, const struct attn_ukernels *uk) {
  p->C = chunk ? chunk : uk->linear_chunk;
  size_t cm, cw, cc, ms;
  if (!attn_mul_ok(p->C, p->m, &cm) || !attn_mul_ok(p->C, p->W, &cw) || !attn_mul_ok(p->C, p->C, &cc) ||
      !attn_mul_ok(p->m, p->lds, &ms))
    return cw_overflow(p, "workspace");
  attn_ws w = {0, 0};
  p->off_kf = attn_ws_take(&w, cm);
  p->off_va = attn_ws_take(&w, cw);
  p->off_qt = attn_ws_take(&w, cm);
  p->off_at = attn_ws_take(&w, cc);
  p->off_oc = attn_ws_take(&w, cw);
  p->off_s = attn_ws_take(&w, ms); /* one head's S when the caller keeps no state */
  p->off_fm = attn_ws_take(&w, p->fm->scratch(p->C, p->shape->d, p->m));
  if (p->g.kind != ATTN_GATE_NONE || p->g.beta) {
    const int feat = p->g.kind == ATTN_GATE_FEATURE;
    p->off_b = attn_ws_take(&w, 2 * (feat ? cm : p->C)); /* doubles */
    p->off_wt = attn_ws_take(&w, cc);
    p->off_din = attn_ws_take(&w, p->C);
    p->off_dout = attn_ws_take(&w, p->C);
    p->off_dc = attn_ws_take(&w, p->m);
    p->off_ks = attn_ws_take(&w, feat ? cm : 0); /* key factors, then query factors and their exponents */
    (void)attn_ws_take(&w, feat ? cm : 0);
    (void)attn_ws_take(&w, feat ? cm : 0);
  }
  if (p->fm->offsets) {
    p->off_ku = attn_ws_take(&w, cm);
    p->off_qu = attn_ws_take(&w, cm);
    p->off_cp = attn_ws_take(&w, p->m);
    p->off_cn = attn_ws_take(&w, p->m);
    p->off_run = attn_ws_take(&w, p->m);
  }
  /* The scan (engine/chunkwise.h): a causal prefill of 2+ chunks, or FLASH's exclusive form over 2+ rounds. */
  const attn_shape *s = p->shape;
  const size_t aligned = attn_min_sz(s->n_q, s->n_kv);
  p->scan_chunks = p->scan_wave = p->scan_group = p->scan_groups = p->scan_b = 0;
  if (p->xg && s->n_kv > p->xg) /* FLASH's exclusive form: 2+ rounds */
    p->scan_chunks = (s->n_kv + p->xg - 1) / p->xg;
  else if (p->causal && !p->xg && aligned > p->C)
    p->scan_chunks = (aligned + p->C - 1) / p->C;
  if (p->scan_chunks) p->off_d = attn_ws_take(&w, ms);                      /* a chunk's local state, run per head */
  if (p->scan_chunks && p->fm->offsets) p->off_dl = attn_ws_take(&w, p->m); /* and its offsets */
  p->workers = attn_workers(p->shape->threads);
  /* Waves only where the heads alone would not keep the workers busy (results do not depend on it). */
  const size_t W = p->workers, H = p->heads;
  const int waves = p->scan_chunks && W > 1 && H % W && H < 4 * W;
  /* The scan by head groups gathers token-major rows (a head's rows further apart than its heads)
   * where each head has its own query, key and value head and a group has 2+ heads. The scratch
   * is kept whatever the layout, so that the workspace size depends on the shape alone. */
  const size_t group_heads = H ? (H + attn_min_sz(W, H) - 1) / attn_min_sz(W, H) : 0;
  p->gather = p->off_g = 0;
  p->gathered =
      s->q.head_stride < s->q.row_stride && s->k.head_stride < s->k.row_stride && s->v.head_stride < s->v.row_stride;
  if (p->scan_chunks && !waves && !p->xg && p->per == 1 && p->qdiv == 1 && p->kdiv == 1 && p->vdiv == 1 &&
      group_heads >= 2) {
    size_t g;
    p->gather = attn_min_sz(group_heads, ATTN_GATHER);
    if (!attn_mul_ok(p->C, 2 * s->d + s->dv, &g) || !attn_mul_ok(g + 3 * ATTN_GATHER_PAD, p->gather, &g))
      return cw_overflow(p, "workspace");
    g += 3 * ATTN_GATHER_PAD; /* cw_gather_block of d, d and dv */
    p->off_g = attn_ws_take(&w, g);
  }
  if (waves) {
    attn_ws slot = {0, 0}; /* a chunk's slot: D (then S before it), Kf (maps with offsets: their
                              pre-exponential features), Va and Va's finiteness */
    (void)attn_ws_take(&slot, ms);
    if (!p->xg) { /* the exclusive form has no intra part: D alone */
      p->scan_kf = attn_ws_take(&slot, cm);
      p->scan_va = attn_ws_take(&slot, cw);
      p->scan_fin = attn_ws_take(&slot, 1);
    }
    if (p->fm->offsets) { /* the chunk's Kf at its own offsets, and those offsets */
      p->scan_kl = attn_ws_take(&slot, cm);
      p->scan_dl = attn_ws_take(&slot, p->m);
    }
    if (!p->xg && p->g.kind == ATTN_GATE_FEATURE) p->scan_b = attn_ws_take(&slot, 2 * cm); /* doubles */
    p->scan_slot = slot.floats;
    /* groups of ATTN_SCAN_PER_WORKER per worker and head, within [ATTN_SCAN_GROUP_MIN, _MAX] chunks */
    size_t per, gc = (p->scan_chunks * H + ATTN_SCAN_PER_WORKER * W - 1) / (ATTN_SCAN_PER_WORKER * W);
    gc = gc < ATTN_SCAN_GROUP_MIN ? ATTN_SCAN_GROUP_MIN : gc > ATTN_SCAN_GROUP_MAX ? ATTN_SCAN_GROUP_MAX : gc;
    p->scan_group = attn_min_sz(gc, p->scan_chunks);
    p->scan_groups = (p->scan_chunks + p->scan_group - 1) / p->scan_group;
    if (slot.overflow || !attn_mul_ok(p->scan_group + 1, p->scan_slot, &per)) return cw_overflow(p, "workspace");
    p->off_slots = attn_ws_take(&w, per); /* the group's chunks' slots, and one for a chunk run alone */
    p->off_x = attn_ws_take(&w, ms);      /* the state moving through a group */
  }
  p->worker_floats = w.floats;
  size_t total;
  if (w.overflow || !attn_mul_ok(w.floats, p->workers, &total)) return cw_overflow(p, "workspace");
  attn_ws all = {total, 0};
  size_t states;
  if (p->scan_chunks) {
    if (!attn_mul_ok(H, ms, &states)) return cw_overflow(p, "workspace");
    p->off_scan = attn_ws_take(&all, states); /* the heads' states (without a caller's) */
  }
  if (waves) { /* then heads x scan_wave groups' states after them and their statuses */
    attn_ws after = {0, 0};
    (void)attn_ws_take(&after, ms);
    p->scan_status = attn_ws_take(&after, 1);
    p->scan_after = after.floats;
    size_t hs, slots;
    if (after.overflow || !attn_mul_ok(H, p->scan_after, &hs)) return cw_overflow(p, "workspace");
    const size_t fit = ATTN_SCAN_FLOATS / hs;
    p->scan_wave = attn_min_sz(p->scan_groups, fit ? fit : 1);
    if (!attn_mul_ok(hs, p->scan_wave, &slots)) return cw_overflow(p, "workspace");
    p->off_after = attn_ws_take(&all, slots);
  }
  return !all.overflow && attn_ws_bytes(&all, &p->scratch_bytes) ? ATTN_OK : cw_overflow(p, "workspace");
}

typedef struct cw_ctx {
  const attn_chunkwise_plan *p;
  const struct attn_ukernels *uk;
  const attn_chunkwise_io *io;
  float *kf, *va, *qt, *at, *oc, *fs;
  float *ku, *qu;            /* exponential maps: pre-exponential key and query features (C x m) */
  float *cp, *cn, *rn;       /* exponential maps: offsets before and after the chunk, running row (m) */
  double *b;                 /* gates: the chunk's cumulative log gates (C, or C x m per-feature) */
  float *wt, *din;           /* gates: intra weights (C x C; factored: cw_factored), state-product row scales (C) */
  float *dout, *dc;          /* gates: absorb key-row scales (C), state row scales (m) */
  float *ks;                 /* per-feature gates: block factors */
  size_t hk, hv, hg;         /* key, value and gate heads of the task's state head */
  const float *gq, *gk, *gv; /* gathered rows of the head (cw_gather; NULL: the inputs in place): */
  size_t g0q, g0k;           /* query row t at gq + (t - g0q) d, key row j at gk + (j - g0k) d */
} cw_ctx;

/* Row j of the task's key and value heads, row t of query head hq: in place, or gathered. */
static const float *cw_k_row(const cw_ctx *x, size_t j) {
  const attn_shape *s = x->p->shape;
  return x->gk ? x->gk + (j - x->g0k) * s->d : x->io->k + j * s->k.row_stride + x->hk * s->k.head_stride;
}
static const float *cw_v_row(const cw_ctx *x, size_t j) {
  const attn_shape *s = x->p->shape;
  return x->gv ? x->gv + (j - x->g0k) * s->dv : x->io->v + j * s->v.row_stride + x->hv * s->v.head_stride;
}
static const float *cw_q_row(const cw_ctx *x, size_t hq, size_t t) {
  const attn_shape *s = x->p->shape;
  return x->gq ? x->gq + (t - x->g0q) * s->d : x->io->q + t * s->q.row_stride + hq * s->q.head_stride;
}

/* ---- decay and gates (engine/chunkwise.h) ---- */
static int cw_gated(const attn_chunkwise_plan *p) { return p->g.kind != ATTN_GATE_NONE || p->g.beta; }

/* What a chunk's gates are computed for (cw_gates): its absorb, its outputs, or both; with
 * CW_B_KEPT, a per-feature gate's b is already in x->b (the waves' slot keeps it from the absorb). */
enum { CW_FOR_ABSORB = 1, CW_FOR_QUERY = 2, CW_FOR_BOTH = 3, CW_B_KEPT = 4 };

/* cur = prev + g, m doubles (g floats), in a function of its own so that the loop vectorises
 * (GCC did not along b's rows, m doubles apart, without knowing m). */
static void cw_sum_row(size_t m, double *restrict cur, const double *restrict prev, const float *restrict g) {
  for (size_t f = 0; f < m; f++) cur[f] = prev[f] + g[f];
}

/* Whether a chunk's intra weights (scalar gate or beta alone) come factored (cw_gates' b of its
 * cn keys): beta_j exp(b_i - b_j) = dout_j exp(b_i - b_last), the keys' factor dout_j (<= beta_j,
 * the absorb's) on the rows of the block's scores and the queries' g_i = exp(b_i - b_last) (>= 1)
 * on the output rows, with the state's part scaled by exp(b_last) (not din_i) before it: no C x C
 * exps or copies and no element-wise pass over the weights. Only while the chunk's decay stays
 * within ATTN_GATE_SPAN (as the per-feature gates' factors), so that no factor overflows or
 * becomes subnormal; beyond it, the weights one by one (wt). The same choice whatever the
 * threads: it depends on the chunk alone. */
static int cw_factored(const cw_ctx *x, size_t cn) {
  return x->p->g.kind != ATTN_GATE_FEATURE && x->b[cn - 1] >= -ATTN_GATE_SPAN;
}

/* The decay quantities of the chunk of keys j0 .. j0+cn: b (inclusive cumulative log gates, in
 * double: differences of sums of up to C terms keep their precision), and from it din, dout, dc
 * and (for the outputs) wt (scalar gate, or beta alone with b = 0), or dout and (for the absorb)
 * dc (per-feature gate; the absorb takes its key factors from b). The same values whatever `uses`
 * adds. */
static void cw_gates(const cw_ctx *x, size_t j0, size_t cn, int uses) {
  const attn_chunkwise_plan *p = x->p;
  const attn_chunkwise_gates *g = &p->g;
  const size_t m = p->m, grs = g->layout.row_stride, brs = g->blayout.row_stride;
  const float *lg = x->io->log_gate ? x->io->log_gate + j0 * grs + x->hg * g->layout.head_stride : NULL;
  const float *bt = g->beta ? x->io->beta + j0 * brs + x->hg * g->blayout.head_stride : NULL;
  double *b = x->b;
  if (g->kind == ATTN_GATE_FEATURE) {
    for (size_t f = 0; !(uses & CW_B_KEPT) && f < m; f++) b[f] = lg[f];
    for (size_t c = 1; !(uses & CW_B_KEPT) && c < cn; c++) cw_sum_row(m, b + c * m, b + (c - 1) * m, lg + c * grs);
    /* beta: the intra part's and the absorb's row factors */
    for (size_t c = 0; c < cn; c++) x->dout[c] = bt ? bt[c * brs] : 1.0f;
    if (!(uses & CW_FOR_ABSORB)) return;
    /* dC = exp(B_last) (the keys' exp(B_last - B) is cw_absorb_to's, the queries' exp(B)
     * cw_query_feature's) */
    x->uk->gate_exp(1, m, b + (cn - 1) * m, m, NULL, 0, NULL, 0, x->dc, m);
    return;
  }
  for (size_t c = 0; c < cn; c++) b[c] = (c ? b[c - 1] : 0.0) + (lg ? lg[c * grs] : 0.0f);
  const int factored = (uses & CW_FOR_QUERY) && cw_factored(x, cn);
  /* One gate for every token (grs 0: RetNet's fixed decay), or none: wt[j][i] depends on i - j
   * alone, so row 0's exps serve every row (b_i - b_j taken as b_(i-j) - b_0). */
  const int toeplitz = !lg || grs == 0;
  for (size_t j = 0; (uses & CW_FOR_QUERY) && !factored && j < cn; j++) { /* wt[j][i] = beta_j exp(b_i - b_j), i >= j */
    float *row = x->wt + j * cn;
    if (toeplitz && j) {
      memcpy(row + j, x->wt, (cn - j) * sizeof(float));
    } else {
      for (size_t i = j; i < cn; i++) row[i] = (float)(b[i] - b[j]);
      x->uk->vexp(cn - j, row + j, row + j);
    }
  }
  for (size_t j = 0; (uses & CW_FOR_QUERY) && !factored && bt && j < cn; j++) /* after the copies of row 0 */
    for (size_t i = j; i < cn; i++) x->wt[j * cn + i] *= bt[j * brs];
  /* din = exp(b), dout = beta exp(b_last - b), through the path's vector exp (not libm's expf,
   * two calls per token) */
  for (size_t c = 0; c < cn; c++) x->din[c] = (float)b[c], x->dout[c] = (float)(b[cn - 1] - b[c]);
  x->uk->vexp(cn, x->din, x->din);
  x->uk->vexp(cn, x->dout, x->dout);
  for (size_t c = 0; bt && c < cn; c++) x->dout[c] *= bt[c * brs];
  for (size_t f = 0; f < m; f++) x->dc[f] = x->din[cn - 1];
  if (factored) { /* g_i = exp(b_i - b_last) in wt[0, cn), exp(b_last) in wt[C, C + cn) */
    float *g = x->wt, *e = x->wt + p->C;
    for (size_t c = 0; c < cn; c++) g[c] = (float)(b[c] - b[cn - 1]), e[c] = x->din[cn - 1];
    x->uk->vexp(cn, g, g);
  }
}

/* S = dC (.) S + (Kf (.) dout)^T Va for a chunk of cn keys (Kf is scaled in place); with
 * accumulate 0, S = (Kf (.) dout)^T Va (a scan's chunk-local state, engine/chunkwise.h). */
static void cw_absorb_to(const cw_ctx *x, float *kf, float *S, size_t cn, int accumulate) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  const float *a = kf;
  if (p->g.kind == ATTN_GATE_FEATURE) { /* Kf (.) exp(B_last - B), rows times beta, in the scratch's kf */
    x->uk->gate_exp(cn, m, x->b, m, x->b + (cn - 1) * m, 1, kf, m, x->kf, m);
    if (p->g.beta) x->uk->rows_axpby(cn, m, x->kf, m, x->kf, m, NULL, 0, x->dout, 1, 0, 0);
    a = x->kf;
  } else if (cw_gated(p)) { /* row c scaled by dout[c] */
    x->uk->rows_axpby(cn, m, x->kf, m, kf, m, NULL, 0, x->dout, 1, 0, 0);
    a = x->kf;
  }
  const float *dc = accumulate && p->g.kind != ATTN_GATE_NONE ? x->dc : NULL;
  x->uk->gemm(m, p->W, cn, a, 1, m, x->va, p->W, S, p->lds, dc, accumulate);
}

static void cw_absorb(const cw_ctx *x, float *S, size_t cn) { cw_absorb_to(x, x->kf, S, cn, 1); }

/* Kf = psi(K[j0 .. j0+cn)) (exponential maps: their pre-exponential features, in ku; see
 * cw_key_offsets) and Va = [V | 1]. A V row with a non-finite value becomes NaN in every column
 * (z's included), so every output that uses it is NaN in every column. Returns 1 when every V row
 * was finite. */
static int cw_load_kv(const cw_ctx *x, size_t j0, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  p->fm->apply(x->uk, &p->fa, 1, cn, s->d, p->m, cw_k_row(x, j0), x->gk ? s->d : s->k.row_stride,
               p->fm->offsets ? x->ku : x->kf, p->m, 1, x->fs);
  const float *v = cw_v_row(x, j0);
  const size_t ldv = x->gv ? s->dv : s->v.row_stride;
  const int finite = x->uk->rows_copy(cn, s->dv, x->va, p->W, v, ldv);
  for (size_t j = 0; p->normalize && j < cn; j++) x->va[j * p->W + s->dv] = 1.0f;
  for (size_t j = 0; !finite && j < cn; j++) /* the rows with a non-finite value */
    if (!attn_rows_finite(v + j * ldv, 1, s->dv, 0)) attn_fill_nan(x->va + j * p->W, p->W);
  return finite;
}

/* The effective offsets of S: c_f, or -inf for a feature nothing was absorbed into (z_f == 0;
 * the zeroed memory of an empty state). */
static void cw_offsets_of(const attn_chunkwise_plan *p, const float *S, float *c) {
  const size_t dv = p->shape->dv;
  for (size_t f = 0; f < p->m; f++) c[f] = S[f * p->lds + dv] == 0.0f ? -INFINITY : S[f * p->lds + dv + 1];
}

/* Exponential maps, causal chunk of cn >= 2 keys (pre-exponential features in ku): the length of
 * the chunk to run, cut before the first key that raises an offset more than ATTN_OFFSET_GUARD
 * above its value at the chunk's start (the first key's feature, for a feature without one).
 * kmax (or NULL): an upper bound of each feature over the keys (their maxima, +inf counted, NaN
 * not: cw_scan_local's offsets); where no feature's bound passes the guard, no key can, and the
 * keys are not read. */
static size_t cw_guard(const cw_ctx *x, const float *S, size_t cn, const float *kmax) {
  const attn_chunkwise_plan *p = x->p;
  float *base = x->rn;
  cw_offsets_of(p, S, base);
  int pass = 0;
  for (size_t f = 0; f < p->m; f++) {
    base[f] = (base[f] == -INFINITY ? x->ku[f] : base[f]) + ATTN_OFFSET_GUARD;
    pass |= kmax && kmax[f] > base[f];
  }
  if (kmax && !pass) return cn;
  for (size_t r = 1; r < cn; r++) {
    const float *u = x->ku + r * p->m;
    int raise = 0;
    for (size_t f = 0; f < p->m; f++) raise |= u[f] > base[f];
    if (raise) return r;
  }
  return cn;
}

/* The rows of S (and z) whose offset rises from cp to cn, rescaled by exp(cp - cn); a row whose z
 * underflows to 0 is emptied; the new offsets stored. */
static void cw_raise(const cw_ctx *x, float *S) {
  const attn_chunkwise_plan *p = x->p;
  const size_t dv = p->shape->dv;
  for (size_t f = 0; f < p->m; f++) {
    if (!(x->cn[f] > x->cp[f])) continue;
    float *row = S + f * p->lds;
    const float a = expf(x->cp[f] - x->cn[f]); /* 0 for an empty row */
    for (size_t c = 0; c <= dv; c++) row[c] *= a;
    if (row[dv] == 0.0f) memset(row, 0, dv * sizeof(float));
    row[dv + 1] = x->cn[f];
  }
}

/* Exponential maps, keys ku[0 .. cn): cp = the offsets before them, cn = after (the largest
 * feature so far); rows of S (and z) whose offset rises are rescaled by exp(cp - cn) (a row whose
 * z underflows to 0 is emptied), the new offsets stored; then Kf = exp(ku - cn) <= 1. */
static void cw_key_offsets(const cw_ctx *x, float *S, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  cw_offsets_of(p, S, x->cp);
  memcpy(x->cn, x->cp, m * sizeof(float));
  for (size_t r = 0; r < cn; r++) {
    const float *u = x->ku + r * m;
    for (size_t f = 0; f < m; f++) x->cn[f] = u[f] > x->cn[f] ? u[f] : x->cn[f];
  }
  cw_raise(x, S);
  x->uk->expfeat(ATTN_EXPF_KEYS, cn, m, x->ku, m, NULL, 0, NULL, x->cn, x->kf, m, 1);
}

/* o rows t0 .. t0+cn of output head h from the chunk's O rows (each first multiplied by g[i] when
 * g is not NULL: cw_factored): s O[0:dv] / (s O[dv] + eps), or s O[0:dv]. A denominator of
 * exactly 0 (eps = 0 and no visible key, or features orthogonal to z) gives 0. */
static void cw_store(const cw_ctx *x, size_t h, size_t t0, size_t cn, const float *g) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  float f[CW_ROW_BATCH]; /* the rows' factors */
  for (size_t i0 = 0; i0 < cn; i0 += CW_ROW_BATCH) {
    const size_t rn = attn_min_sz(CW_ROW_BATCH, cn - i0);
    for (size_t i = 0; i < rn; i++) {
      const float gi = g ? g[i0 + i] : 1.0f;
      const float den = p->divide ? p->out_scale * (gi * x->oc[(i0 + i) * p->W + s->dv]) + p->eps : 1.0f;
      const float inv = den == 0.0f ? 0.0f : 1.0f / den;
      f[i] = g ? p->out_scale * inv * gi : p->out_scale * inv; /* with scale 1 and no g, exactly inv */
    }
    x->uk->rows_axpby(rn, s->dv, x->io->o + (t0 + i0) * s->o.row_stride + h * s->o.head_stride, s->o.row_stride,
                      x->oc + i0 * p->W, p->W, NULL, 0, f, 1, 0, 0);
  }
}

/* Query features of rows t0 .. t0+cn of output head h, into qt (element (r, f) at r rs + f cs).
 * Exponential maps: intra, the chunk's keys (cw_key_offsets done) are visible row by row (row r
 * sees keys 0 .. r); otherwise only S. */
static void cw_load_q(const cw_ctx *x, const float *S, size_t h, size_t t0, size_t cn, size_t rs, size_t cs,
                      int intra) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  const float *q = cw_q_row(x, h / p->qdiv, t0);
  const size_t ldq = x->gq ? s->d : s->q.row_stride;
  if (!p->fm->offsets) {
    p->fm->apply(x->uk, &p->fa, 0, cn, s->d, p->m, q, ldq, x->qt, rs, cs, x->fs);
    return;
  }
  const size_t m = p->m;
  p->fm->apply(x->uk, &p->fa, 0, cn, s->d, m, q, ldq, x->qu, m, 1, x->fs);
  if (p->fm->query == ATTN_EXPF_SOFTMAX) { /* running denominators: z, then the chunk's keys */
    for (size_t f = 0; f < m; f++) x->rn[f] = S[f * p->lds + s->dv];
    x->uk->expfeat(ATTN_EXPF_SOFTMAX, cn, m, x->qu, m, intra ? x->kf : NULL, m, x->rn, NULL, x->qt, rs, cs);
    return;
  }
  /* running offsets: those before the chunk, then its keys; features use the chunk's offsets */
  if (!intra) cw_offsets_of(p, S, x->cn);
  memcpy(x->rn, intra ? x->cp : x->cn, m * sizeof(float));
  x->uk->expfeat(ATTN_EXPF_QUERY, cn, m, x->qu, m, intra ? x->ku : NULL, m, x->rn, x->cn, x->qt, rs, cs);
}

/* Intra weights of query block [i0, i1) (AT[j][i], j < i1): zero where j > i, and with gates or
 * beta, weighted by wt[j][i], or (factored) row j by dout_j. */
static void cw_intra_weights(const cw_ctx *x, size_t cn, size_t i0, size_t i1, int factored) {
  if (factored) {
    x->uk->rows_axpby(i1, i1 - i0, x->at + i0, cn, x->at + i0, cn, NULL, 0, x->dout, 1, 0, 0);
    for (size_t j = i0 + 1; j < i1; j++) memset(x->at + j * cn + i0, 0, (j - i0) * sizeof(float));
    return;
  }
  const int gated = cw_gated(x->p);
  for (size_t j = 0; j < i1; j++) {
    float *row = x->at + j * cn;
    if (j > i0) memset(row + i0, 0, (j - i0) * sizeof(float));
    for (size_t i = j > i0 ? j : i0; gated && i < i1; i++) row[i] *= x->wt[j * cn + i];
  }
}

/* Per-feature gates, a causal chunk of cn rows (query features row-major in qt, the chunk's Kf,
 * Va, B loaded): O = (Qf (.) exp(B)) S, then per query block I = [i0, i1) the intra part over
 * keys j < i1 (engine/chunkwise.h): AT = Ks Qs^T with Ks_j = beta_j psi_j (.) exp(B_i0 - B_j) and
 * Qs_i = phi_i (.) exp(B_i - B_i0). Ks is kept from block to block: moving its reference row from
 * i0' to i0 multiplies it by exp(B_i0 - B_i0') <= 1 per feature, so only new keys take exps. */
static void cw_query_feature(const cw_ctx *x, const float *S, size_t cn, int va_finite) {
  const attn_chunkwise_plan *p = x->p;
  const struct attn_ukernels *uk = x->uk;
  const size_t m = p->m, W = p->W, ld = attn_min_sz(uk->gemm_nr, p->C);
  const double *B = x->b;
  float *ks = x->ks, *qs = ks + p->C * m, *tmp = qs + p->C * m;
  uk->gate_exp(cn, m, B, m, NULL, 0, x->qt, m, ks, m); /* Qf (.) exp(B) */
  uk->gemm(cn, W, m, ks, m, 1, S, p->lds, x->oc, W, NULL, 0);
  size_t done = 0, ref = 0; /* rows of Ks made, and the row their exponents are measured from */
  for (size_t i0 = 0; i0 < cn; i0 += ld) {
    const size_t i1 = attn_min_sz(cn, i0 + ld), ni = i1 - i0;
    const double *Bn = B + i0 * m;
    double span = 0.0;
    for (size_t f = 0; f < m; f++) { /* fmax's choice (a NaN difference is passed over), inlined */
      const double d = Bn[f] - B[(i1 - 1) * m + f];
      span = d > span ? d : span;
    }
    /* The block's own keys join the factorised product only while their factors stay in range. */
    const size_t jn = span <= ATTN_GATE_SPAN ? i1 : i0;
    if (done && ref != i0) { /* move the kept rows' reference to i0 */
      uk->gate_exp(1, m, Bn, m, B + ref * m, 0, NULL, 0, tmp, m);
      uk->rows_cols(ATTN_COLS_SCALE, done, m, ks, m, ks, m, tmp);
    }
    if (jn > done) { /* new rows: beta_j psi_jf exp(B_i0,f - B_jf) */
      uk->gate_exp(jn - done, m, B + done * m, m, Bn, 1, x->kf + done * m, m, ks + done * m, m);
      if (p->g.beta) /* rows times beta, as the absorb's */
        uk->rows_axpby(jn - done, m, ks + done * m, m, ks + done * m, m, NULL, 0, x->dout + done, 1, 0, 0);
    }
    done = jn, ref = i0; /* jn >= i0 >= the rows made before */
    /* query factors: phi_if exp(B_if - B_i0,f), then transposed (row i of tmp into column i) */
    uk->gate_exp(ni, m, B + i0 * m, m, Bn, 0, x->qt + i0 * m, m, tmp, m);
    uk->transpose(ATTN_TR_COPY, m, ni, 1, qs, ld, tmp, m, 0);
    if (jn) uk->gemm(jn, ni, m, ks, m, 1, qs, ld, x->at, ld, NULL, 0); /* AT[j][i - i0], j < jn */
    for (size_t j = i0; j < i1; j++) {
      float *row = x->at + j * ld;
      memset(row, 0, (j - i0) * sizeof(float));     /* i < j */
      for (size_t i = j; jn == i0 && i < i1; i++) { /* per element: every exponent <= 0 */
        uk->gate_exp(1, m, B + i * m, m, B + j * m, 0, NULL, 0, tmp, m);
        float a = 0.0f;
        for (size_t f = 0; f < m; f++) a += x->qt[i * m + f] * x->kf[j * m + f] * tmp[f];
        row[i - i0] = a * x->dout[j];
      }
    }
    if (va_finite) {
      uk->gemm(ni, W, i1, x->at, 1, ld, x->va, W, x->oc + i0 * W, W, NULL, 1);
    } else { /* a non-finite V row: row i multiplies only keys j <= i (see cw_query) */
      for (size_t i = i0; i < i1; i++)
        uk->gemm(1, W, i + 1, x->at + (i - i0), 1, ld, x->va, W, x->oc + i * W, W, NULL, 1);
    }
  }
}

/* Output rows t0 .. t0+cn of output head h. intra: causal contributions of the loaded chunk;
 * va_finite: whether every Va row of the chunk is finite (cw_load_kv). */
static void cw_query(const cw_ctx *x, const float *S, size_t h, size_t t0, size_t cn, int intra, int va_finite) {
  const attn_chunkwise_plan *p = x->p;
  const struct attn_ukernels *uk = x->uk;
  const int feat = intra && p->g.kind == ATTN_GATE_FEATURE;
  /* The intra product reads phi(Q)^T as the GEMM's B operand (rows contiguous): features are
   * written transposed. Without it (or with per-feature gates, whose products read them as A),
   * row-major features are written (contiguous stores, not a scatter) and read as A through its
   * strides. */
  const size_t qrs = intra && !feat ? 1 : p->m, qcs = intra && !feat ? cn : 1;
  cw_load_q(x, S, h, t0, cn, qrs, qcs, intra);
  if (feat) {
    cw_query_feature(x, S, cn, va_finite);
    cw_store(x, h, t0, cn, NULL);
    return;
  }
  /* The state's part first; the causal part adds onto it, scaling it by din (the decay from the
   * chunk's start to each row) through the GEMM's row scale; factored (cw_factored), by
   * exp(b_last), and the rows by g at the store. */
  uk->gemm(cn, p->W, p->m, x->qt, qrs, qcs, S, p->lds, x->oc, p->W, NULL, 0);
  const int factored = intra && cw_gated(p) && cw_factored(x, cn);
  const float *din = factored ? x->wt + p->C : intra && p->g.kind != ATTN_GATE_NONE ? x->din : NULL;
  /* Causal part, in query blocks [i0, i1) of one GEMM tile width: block i0 needs only keys j < i1
   * (AT[j][i] = psi(k_j).phi(q_i) for j <= i), so the zero triangle is mostly never computed. */
  for (size_t i0 = 0; intra && i0 < cn; i0 += uk->gemm_nr) {
    const size_t i1 = attn_min_sz(cn, i0 + uk->gemm_nr);
    uk->gemm(i1, i1 - i0, p->m, x->kf, p->m, 1, x->qt + i0, cn, x->at + i0, cn, NULL, 0);
    cw_intra_weights(x, cn, i0, i1, factored);
    if (va_finite)
      uk->gemm(i1 - i0, p->W, i1, x->at + i0, 1, cn, x->va, p->W, x->oc + i0 * p->W, p->W, din ? din + i0 : NULL, 1);
  }
  /* A non-finite V row: each row i multiplies only keys j <= i, so a later key's NaN never meets
   * its zero weight (0 * NaN). */
  for (size_t i = 0; intra && !va_finite && i < cn; i++)
    uk->gemm(1, p->W, i + 1, x->at + i, 1, cn, x->va, p->W, x->oc + i * p->W, p->W, din ? din + i : NULL, 1);
  cw_store(x, h, t0, cn, factored ? x->wt : NULL);
}

/* FLASH's chunk-exclusive causal form (plan xg = G), round k: the queries at key positions
 * [kG, (k+1)G) (the first round also those before every key) are [*qa, *qb); they read the state as
 * it was before the round's keys. Returns whether those keys are then absorbed: only a complete
 * chunk is, and the rounds end with the first that is not. */
static int cw_xround(const attn_chunkwise_plan *p, size_t k, size_t *qa, size_t *qb) {
  const size_t nkv = p->shape->n_kv, G = p->xg, c0 = k * G, c1 = attn_min_sz(nkv, c0 + G);
  const int64_t off = (int64_t)nkv - (int64_t)p->shape->n_q; /* query t sits at key position off + t */
  const int64_t a = k == 0 ? 0 : (int64_t)c0 - off, b = (int64_t)c1 - off;
  *qa = a < 0 ? 0 : (size_t)a, *qb = b < 0 ? 0 : (size_t)b;
  return c1 - c0 == G;
}

/* The exclusive form: outputs of queries [qa, qb) of state head h from S (no intra term). */
static void cw_xquery(const cw_ctx *x, const float *S, size_t h, size_t qa, size_t qb) {
  const attn_chunkwise_plan *p = x->p;
  for (size_t gi = 0; gi < p->per; gi++)
    for (size_t i0 = qa; i0 < qb; i0 += p->C) cw_query(x, S, h * p->per + gi, i0, attn_min_sz(p->C, qb - i0), 0, 1);
}

/* The exclusive form: round k's G keys absorbed into T, C at a time: accumulated into S (the
 * serial loop), or T = their local state D (the scan, engine/chunkwise.h). */
static void cw_xabsorb(const cw_ctx *x, float *T, size_t k, int accumulate) {
  const attn_chunkwise_plan *p = x->p;
  const size_t c0 = k * p->xg, c1 = c0 + p->xg;
  for (size_t j0 = c0; j0 < c1; j0 += p->C) {
    const size_t cn = attn_min_sz(p->C, c1 - j0);
    cw_load_kv(x, j0, cn);
    cw_absorb_to(x, x->kf, T, cn, accumulate || j0 > c0);
  }
}

/* The exclusive form without the scan (one round, or none): round after round. */
static void cw_run_exclusive(const cw_ctx *x, float *S, size_t h) {
  for (size_t k = 0, qa, qb;; k++) {
    const int full = cw_xround(x->p, k, &qa, &qb);
    cw_xquery(x, S, h, qa, qb);
    if (!full) break;
    cw_xabsorb(x, S, k, 1);
  }
}

/* A one-token causal chunk (a decode step), its key loaded (cw_load_kv): one pass over S per
 * output head, the last one also applying the update S = G S + beta psi(k) v^T. With gates, out = a v + (G phi(q))^T S (S as on
 * entry), a = phi(q) . beta psi(k): the query's features carry the decay. */
static void cw_step_loaded(const cw_ctx *x, float *S, size_t h0, size_t i, size_t j) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  if (p->fm->offsets) cw_key_offsets(x, S, 1);
  const float *gr = NULL; /* the decay of S's rows */
  if (cw_gated(p)) {
    const attn_chunkwise_gates *g = &p->g;
    if (g->beta) {
      const float bt = x->io->beta[j * g->blayout.row_stride + x->hg * g->blayout.head_stride];
      for (size_t f = 0; f < m; f++) x->kf[f] *= bt;
    }
    if (g->kind != ATTN_GATE_NONE) {
      const float *lg = x->io->log_gate + j * g->layout.row_stride + x->hg * g->layout.head_stride;
      for (size_t f = 0; f < m; f++) x->dc[f] = lg[g->kind == ATTN_GATE_FEATURE ? f : 0];
      x->uk->vexp(m, x->dc, x->dc);
      gr = x->dc;
    }
  }
  for (size_t gi = 0; gi < p->per; gi++) {
    cw_load_q(x, S, h0 + gi, i, 1, m, 1, 1);
    float a;
    x->uk->gemm(1, 1, m, x->qt, m, 1, x->kf, 1, &a, 1, NULL, 0); /* phi(q) . psi(k) */
    for (size_t f = 0; gr && f < m; f++) x->qt[f] *= gr[f];
    x->uk->linear_step(m, p->W, x->qt, gi + 1 == p->per ? x->kf : NULL, x->va, a, S, p->lds, x->oc, gr);
    cw_store(x, h0 + gi, i, 1, NULL);
  }
}

/* The step with key j loaded first. */
static void cw_step(const cw_ctx *x, float *S, size_t h0, size_t i, size_t j) {
  cw_load_kv(x, j, 1);
  cw_step_loaded(x, S, h0, i, j);
}

/* The scan's state update on rows [f0, f1): S = dC (.) S + D (dC_f = g[f gs], or 1 when g is
 * NULL); with keep, D gets S as it was (the state before D's chunk). The same operations, in the
 * same order, whichever way the scan is scheduled. */
static void cw_scan_update(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *D,
                           const float *g, size_t gs, size_t f0, size_t f1, int keep) {
  if (f1 > f0)
    uk->rows_axpby(f1 - f0, p->W, S + f0 * p->lds, p->lds, D + f0 * p->lds, p->lds, g ? g + f0 * gs : NULL, gs, NULL, 0,
                   1, keep);
}

/* The context of state head `task` on a worker's scratch ws. */
static cw_ctx cw_ctx_of(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                        size_t task, float *ws) {
  return (cw_ctx){p,
                  uk,
                  io,
                  ws + p->off_kf,
                  ws + p->off_va,
                  ws + p->off_qt,
                  ws + p->off_at,
                  ws + p->off_oc,
                  ws + p->off_fm,
                  ws + p->off_ku,
                  ws + p->off_qu,
                  ws + p->off_cp,
                  ws + p->off_cn,
                  ws + p->off_run,
                  (double *)(void *)(ws + p->off_b),
                  ws + p->off_wt,
                  ws + p->off_din,
                  ws + p->off_dout,
                  ws + p->off_dc,
                  ws + p->off_ks,
                  task / p->kdiv,
                  task / p->vdiv,
                  task / p->gdiv,
                  NULL,
                  NULL,
                  NULL,
                  0,
                  0};
}

/* Causal bottom-right alignment: keys before the first query's position, queries before the
 * first key; the rest (aligned) pairs query pre_q + t with key pre_k + t. */
static size_t cw_pre_k(const attn_chunkwise_plan *p) {
  const attn_shape *s = p->shape;
  return p->causal && s->n_kv > s->n_q ? s->n_kv - s->n_q : 0;
}
static size_t cw_pre_q(const attn_chunkwise_plan *p) {
  const attn_shape *s = p->shape;
  return p->causal && s->n_q > s->n_kv ? s->n_q - s->n_kv : 0;
}

/* Maps with offsets, the scan's update on rows [f0, f1): S and D (a chunk's local state, with its
 * own offsets) both move to the larger offsets, c = max(c_S, c_D) per row (an empty row's offset
 * is -inf; a row empty in both stays empty). S moves first, as cw_raise moves it: scaled by
 * exp(c_S - c), and emptied when its z underflows to 0; then S += D exp(c_D - c). So a row that a
 * chunk's outputs already raised in place (cw_scan_outputs) merges to the same bits as one that was
 * not raised. With keep, D gets S as it was. */
static void cw_scan_merge(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *D, size_t f0,
                          size_t f1, int keep) {
  const size_t dv = p->shape->dv, lds = p->lds;
  float fa[CW_ROW_BATCH], fb[CW_ROW_BATCH], off[CW_ROW_BATCH]; /* the rows' factors and new offsets */
  unsigned char done[CW_ROW_BATCH];                            /* rows merged on their own (emptied) */
  for (size_t g0 = f0; g0 < f1; g0 += CW_ROW_BATCH) {
    const size_t g1 = attn_min_sz(f1, g0 + CW_ROW_BATCH);
    for (size_t f = g0; f < g1; f++) {
      float *restrict s = S + f * lds, *restrict d = D + f * lds;
      const float cs = s[dv] == 0.0f ? -INFINITY : s[dv + 1], cd = d[dv] == 0.0f ? -INFINITY : d[dv + 1];
      const float c = cd > cs ? cd : cs;
      /* the larger side's factor is exactly 1 */
      const float a = c == -INFINITY ? 0.0f : cs == c ? 1.0f : expf(cs - c);
      const float b = c == -INFINITY ? 0.0f : cd == c ? 1.0f : expf(cd - c);
      fa[f - g0] = a, fb[f - g0] = b, off[f - g0] = c;
      done[f - g0] = a * s[dv] == 0.0f;
      if (done[f - g0]) { /* S's row at c holds nothing (cw_raise's rule): 0 + b D */
        for (size_t e = 0; e <= dv; e++) {
          const float t = d[e], v = s[e];
          if (keep) d[e] = v;
          s[e] = 0.0f + b * t;
        }
        if (keep) d[dv + 1] = s[dv + 1];
      }
    }
    for (size_t f = g0; f < g1;) { /* the other rows, runs of them at once */
      size_t e = f;
      while (e < g1 && !done[e - g0]) e++;
      if (e > f) {
        for (size_t r = f; keep && r < e; r++) D[r * lds + dv + 1] = S[r * lds + dv + 1];
        uk->rows_axpby(e - f, dv + 1, S + f * lds, lds, D + f * lds, lds, fa + (f - g0), 1, fb + (f - g0), 1, 1, keep);
      }
      f = e + 1;
    }
    for (size_t f = g0; f < g1; f++) {
      float *s = S + f * lds;
      s[dv + 1] = off[f - g0];
      if (s[dv] == 0.0f) memset(s, 0, (dv + 2) * sizeof(float));
    }
  }
}

/* Maps with offsets, a chunk's local state from its pre-exponential key features KU (cn rows,
 * x->va its Va): offsets c_f = max_j KU[j][f] (into c, and D's column dv + 1), its features
 * Kf = exp(KU - c) (into x->kf), D = Kf^T Va. */
static void cw_scan_local(const cw_ctx *x, const float *KU, float *D, size_t cn, float *c) {
  const attn_chunkwise_plan *p = x->p;
  const size_t m = p->m;
  for (size_t f = 0; f < m; f++) c[f] = -INFINITY;
  x->uk->rows_cols(ATTN_COLS_MAX, cn, m, NULL, 0, KU, m, c);
  x->uk->expfeat(ATTN_EXPF_KEYS, cn, m, KU, m, NULL, 0, NULL, c, x->kf, m, 1);
  x->uk->gemm(m, p->W, cn, x->kf, 1, m, x->va, p->W, D, p->lds, NULL, 0);
  for (size_t f = 0; f < m; f++) D[f * p->lds + p->shape->dv + 1] = c[f];
}

/* Maps with offsets, the outputs of a chunk (aligned tokens t0 .. t0+cn of state head h) from S,
 * the state before it, and its loaded keys (KU: pre-exponential features, VA: Va; va_finite as
 * cw_load_kv said; KL, dl: its features at its own offsets and those, cw_scan_local; KL may be
 * x0->kf). When no key raises an offset past the guard, the chunk runs at once on S itself: S
 * rises to c = max(its offsets, dl) in place (cw_raise, the first step of cw_scan_merge, so S
 * merges afterwards to the same bits as if it had not risen) and Kf = KL exp(dl - c) (no
 * exponential per key again). Otherwise the serial loop over the chunk, cut where cw_guard says,
 * on T, a copy of S that is then dropped (the state moves by cw_scan_merge). */
static void cw_scan_outputs(const cw_ctx *x0, float *S, float *T, size_t h, size_t t0, size_t cn, float *KU,
                            const float *KL, const float *dl, float *VA, int va_finite) {
  const attn_chunkwise_plan *p = x0->p;
  const size_t m = p->m;
  cw_ctx x = *x0;
  const size_t q0 = cw_pre_q(p) + t0, k0 = cw_pre_k(p) + t0;
  x.ku = KU, x.va = VA;
  if (cn > 1 && cw_guard(&x, S, cn, dl) == cn) {
    cw_offsets_of(p, S, x.cp);
    float *restrict g = x.rn;
    for (size_t f = 0; f < m; f++) {
      x.cn[f] = dl[f] > x.cp[f] ? dl[f] : x.cp[f];
      g[f] = dl[f] == x.cn[f] ? 1.0f : expf(dl[f] - x.cn[f]);
    }
    cw_raise(&x, S);
    x.uk->rows_cols(ATTN_COLS_SCALE, cn, m, x.kf, m, KL, m, g);
    for (size_t gi = 0; gi < p->per; gi++) cw_query(&x, S, h * p->per + gi, q0, cn, 1, va_finite);
    return;
  }
  memcpy(T, S, m * p->lds * sizeof(float));
  for (size_t u0 = 0, len; u0 < cn; u0 += len) {
    x.ku = KU + u0 * p->m, x.va = VA + u0 * p->W;
    len = cn - u0 > 1 ? cw_guard(&x, T, cn - u0, dl) : 1;
    if (len == 1) {
      cw_step_loaded(&x, T, h * p->per, q0 + u0, k0 + u0);
      continue;
    }
    cw_key_offsets(&x, T, len);
    for (size_t gi = 0; gi < p->per; gi++) cw_query(&x, T, h * p->per + gi, q0 + u0, len, 1, va_finite);
    if (u0 + len < cn) cw_absorb(&x, T, len);
  }
}

/* Software prefetch (into L2) of n floats from a, for reading: the next chunk's input rows. */
static void cw_prefetch_span(const float *a, size_t n) {
  for (size_t i = 0; i < n; i += 16) __builtin_prefetch(a + i, 0, 2);
}

/* Software prefetch (into L2) of rows [t, t + cn) of the queries of output heads [h0, h0 + per)
 * (tq; SIZE_MAX: none) and of x's keys and values (tk; SIZE_MAX: none): the next chunk's, issued
 * while this one computes, so that its loads do not wait on memory. */
static void cw_prefetch_rows(const cw_ctx *x, size_t h0, size_t tq, size_t tk, size_t cn) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  for (size_t j = 0; tk != SIZE_MAX && j < cn; j++) {
    cw_prefetch_span(x->io->k + (tk + j) * s->k.row_stride + x->hk * s->k.head_stride, s->d);
    cw_prefetch_span(x->io->v + (tk + j) * s->v.row_stride + x->hv * s->v.head_stride, s->dv);
  }
  for (size_t j = 0; tq != SIZE_MAX && j < cn; j++)
    for (size_t gi = 0; gi < p->per; gi++)
      cw_prefetch_span(x->io->q + (tq + j) * s->q.row_stride + (h0 + gi) / p->qdiv * s->q.head_stride, s->d);
}

/* What comes before a causal call's aligned chunks (all of a non-causal call): the keys absorbed
 * before any query, then the queries that read only that state. */
static void cw_lead(const cw_ctx *x, float *S, size_t h0) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  const size_t C = p->C, absorb_end = p->causal ? cw_pre_k(p) : s->n_kv;
  for (size_t j0 = 0; j0 < absorb_end; j0 += C) {
    const size_t cn = attn_min_sz(C, absorb_end - j0);
    if (j0 + C < absorb_end) cw_prefetch_rows(x, h0, SIZE_MAX, j0 + C, attn_min_sz(C, absorb_end - j0 - C));
    cw_load_kv(x, j0, cn);
    if (p->fm->offsets) cw_key_offsets(x, S, cn);
    if (cw_gated(p)) cw_gates(x, j0, cn, CW_FOR_ABSORB);
    cw_absorb(x, S, cn);
  }
  const size_t state_only_end = p->causal ? cw_pre_q(p) : s->n_q;
  for (size_t i0 = 0; i0 < state_only_end; i0 += C) {
    if (i0 + C < state_only_end) cw_prefetch_rows(x, h0, i0 + C, SIZE_MAX, attn_min_sz(C, state_only_end - i0 - C));
    for (size_t gi = 0; gi < p->per; gi++) cw_query(x, S, h0 + gi, i0, attn_min_sz(C, state_only_end - i0), 0, 1);
  }
}

void attn_chunkwise_run(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                        size_t task, float *ws) {
  const attn_shape *s = p->shape;
  const cw_ctx x = cw_ctx_of(p, uk, io, task, ws);
  const size_t C = p->C, h0 = task * p->per, slab = p->m * p->lds, pre_k = cw_pre_k(p), pre_q = cw_pre_q(p);
  float *S = io->state ? io->state + task * slab : ws + p->off_s;
  if (!io->state) memset(S, 0, slab * sizeof(float));
  if (p->xg) {
    cw_run_exclusive(&x, S, task);
    return;
  }
  cw_lead(&x, S, h0);
  if (!p->causal) return;
  const size_t aligned = s->n_kv - pre_k; /* == n_q - pre_q */
  for (size_t t0 = 0, cn; t0 < aligned; t0 += cn) {
    cn = attn_min_sz(C, aligned - t0);
    int va_finite = 1;
    if (cn > 1) {
      va_finite = cw_load_kv(&x, pre_k + t0, cn); /* of the whole chunk: conservative when cut */
      if (p->fm->offsets) cn = cw_guard(&x, S, cn, NULL);
    }
    if (cn == 1) {
      cw_step(&x, S, h0, pre_q + t0, pre_k + t0);
      continue;
    }
    if (p->fm->offsets) cw_key_offsets(&x, S, cn);
    if (cw_gated(p)) cw_gates(&x, pre_k + t0, cn, CW_FOR_BOTH);
    for (size_t gi = 0; gi < p->per; gi++) cw_query(&x, S, h0 + gi, pre_q + t0, cn, 1, va_finite);
    cw_absorb(&x, S, cn);
  }
}

typedef struct cw_par {
  const attn_chunkwise_plan *p;
  const struct attn_ukernels *uk;
  const attn_chunkwise_io *io;
  float *ws;
  size_t c0, wn; /* the scan's waves: the wave's first group and its groups */
} cw_par;

static void cw_par_task(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  attn_chunkwise_run(c->p, c->uk, c->io, task, c->ws + worker * c->p->worker_floats);
}

/* ---- the scan (engine/chunkwise.h) ---- */
static float *cw_scan_state(const cw_par *c, size_t h) {
  const size_t slab = c->p->m * c->p->lds;
  return c->io->state ? c->io->state + h * slab : c->ws + c->p->off_scan + h * slab;
}

/* Chunk k's first aligned token and length, and its gates on x (cw_gates' uses); a per-feature
 * gate's b in the slot's (the absorb makes it, the outputs read it). */
static void cw_slot_chunk(const attn_chunkwise_plan *p, cw_ctx *x, float *slot, size_t k, int uses, size_t *t0,
                          size_t *cn) {
  const size_t aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv);
  *t0 = k * p->C, *cn = attn_min_sz(p->C, aligned - *t0);
  if (p->scan_b) {
    x->b = (double *)(void *)(slot + p->scan_b);
    if (uses == CW_FOR_QUERY) uses |= CW_B_KEPT;
  }
  if (cw_gated(p)) cw_gates(x, cw_pre_k(p) + *t0, *cn, uses);
}

/* Step 1 of chunk k (engine/chunkwise.h, the waves): its local state D = (Kf (.) dout)^T Va in
 * the slot, with dC in column dv + 1 (maps with offsets: at its own offsets, and their
 * pre-exponential Kf kept), its Kf and Va kept for step 4. */
static void cw_slot_absorb(const cw_ctx *x0, float *slot, size_t k) {
  const attn_chunkwise_plan *p = x0->p;
  cw_ctx x = *x0;
  if (p->xg) { /* the exclusive form: a complete round's D, through the worker's Kf and Va */
    size_t qa, qb;
    if (cw_xround(p, k, &qa, &qb)) cw_xabsorb(&x, slot, k, 0);
    return;
  }
  size_t t0, cn;
  float *D = slot, *kf = D + p->scan_kf;
  cw_slot_chunk(p, &x, slot, k, CW_FOR_ABSORB, &t0, &cn);
  if (p->fm->offsets) { /* the pre-exponential features and Kf, kept for step 4; D at its own offsets */
    x.ku = kf, x.va = D + p->scan_va, x.kf = D + p->scan_kl;
    D[p->scan_fin] = (float)cw_load_kv(&x, cw_pre_k(p) + t0, cn);
    cw_scan_local(&x, kf, D, cn, D + p->scan_dl);
    return;
  }
  x.kf = kf, x.va = D + p->scan_va;
  D[p->scan_fin] = (float)cw_load_kv(&x, cw_pre_k(p) + t0, cn);
  x.kf = x0->kf; /* where a gated absorb scales the features */
  cw_absorb_to(&x, kf, D, cn, 0);
  for (size_t f = 0; p->g.kind != ATTN_GATE_NONE && f < p->m; f++) D[f * p->lds + p->shape->dv + 1] = x.dc[f];
}

/* Step 3 of chunk k: S moves past it, S = dC (.) S + D (maps with offsets: their merge); with
 * keep, the slot gets S as it was, the state before the chunk. */
static void cw_slot_combine(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, float *S, float *slot,
                            size_t k, int keep) {
  size_t qa, qb;
  if (p->xg && !cw_xround(p, k, &qa, &qb)) { /* the exclusive form's last round: kept, not absorbed */
    if (keep) memcpy(slot, S, p->m * p->lds * sizeof(float));
    return;
  }
  if (p->fm->offsets)
    cw_scan_merge(p, uk, S, slot, 0, p->m, keep);
  else
    cw_scan_update(p, uk, S, slot, p->g.kind != ATTN_GATE_NONE ? slot + p->shape->dv + 1 : NULL, p->lds, 0, p->m, keep);
}

/* Step 4 of chunk k of head h: its outputs from its slot (S before it, Kf, Va); maps with offsets
 * may need a copy of S (m x lds floats of the worker's scratch). */
static void cw_slot_query(const cw_ctx *x0, float *slot, size_t h, size_t k, float *copy) {
  const attn_chunkwise_plan *p = x0->p;
  cw_ctx x = *x0;
  if (p->xg) { /* the exclusive form: the round's queries from the state before its keys */
    size_t qa, qb;
    (void)cw_xround(p, k, &qa, &qb);
    cw_xquery(&x, slot, h, qa, qb);
    return;
  }
  size_t t0, cn;
  float *S = slot;
  cw_slot_chunk(p, &x, slot, k, CW_FOR_QUERY, &t0, &cn);
  const int finite = S[p->scan_fin] != 0.0f;
  if (p->fm->offsets) { /* on the slot's S, raised in place, or (a chunk that is cut) on a copy in scratch */
    cw_scan_outputs(&x, S, copy, h, t0, cn, S + p->scan_kf, S + p->scan_kl, S + p->scan_dl, S + p->scan_va, finite);
    return;
  }
  x.kf = S + p->scan_kf, x.va = S + p->scan_va; /* read only: maps without offsets */
  for (size_t gi = 0; gi < p->per; gi++) cw_query(&x, S, h * p->per + gi, cw_pre_q(p) + t0, cn, 1, finite);
}

/* Phase 0, per head: the state (zeroed when the caller keeps none) and what precedes the chunks. */
static void cw_scan_lead(void *ctx, size_t h, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  float *S = cw_scan_state(c, h);
  if (!c->io->state) memset(S, 0, p->m * p->lds * sizeof(float));
  const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, c->ws + worker * p->worker_floats);
  if (!p->xg) cw_lead(&x, S, h * p->per); /* the exclusive form's rounds start at key 0 */
}

/* ---- the waves: groups of chunks, each group's steps on one worker ---- */
/* A group's status in a wave: nobody has started it, its state after it is being computed, known. */
enum { CW_FREE, CW_BUSY, CW_DONE };

/* The state after slot i's group of head h (of the wave), and its status. */
static float *cw_wave_after(const cw_par *c, size_t h, size_t i) {
  const attn_chunkwise_plan *p = c->p;
  return c->ws + p->off_after + (h * p->scan_wave + i) * p->scan_after;
}
static atomic_int *cw_wave_status(const cw_par *c, size_t h, size_t i) {
  return (atomic_int *)(void *)(cw_wave_after(c, h, i) + c->p->scan_status);
}

/* Chunks [*k0, *k1) of slot i's group. */
static void cw_wave_span(const cw_par *c, size_t i, size_t *k0, size_t *k1) {
  *k0 = (c->c0 + i) * c->p->scan_group, *k1 = attn_min_sz(c->p->scan_chunks, *k0 + c->p->scan_group);
}

/* X = the state before slot i's group of head h: the nearest earlier group's state after it that
 * is known, or being computed by its task (waited for: that task waits only on earlier ones), or
 * the wave's entry state (step 2); groups between that nobody has started are computed here
 * (steps 1 and 3 on the worker's spare slot) and published. The same bits whoever computes what. */
static void cw_wave_before(const cw_par *c, const cw_ctx *x, size_t h, size_t i, float *X, float *spare) {
  const attn_chunkwise_plan *p = c->p;
  size_t j = i;
  while (j > 0) {
    atomic_int *st = cw_wave_status(c, h, j - 1);
    int seen = CW_FREE;
    if (atomic_compare_exchange_strong_explicit(st, &seen, CW_BUSY, memory_order_acq_rel, memory_order_acquire)) {
      j--; /* nobody had started group j: computed below */
      continue;
    }
    while (seen != CW_DONE) {
      attn_cpu_relax();
      seen = atomic_load_explicit(st, memory_order_acquire);
    }
    break;
  }
  memcpy(X, j ? cw_wave_after(c, h, j - 1) : cw_scan_state(c, h), p->m * p->lds * sizeof(float));
  for (; j < i; j++) {
    size_t k0, k1;
    cw_wave_span(c, j, &k0, &k1);
    for (size_t k = k0; k < k1; k++) {
      cw_slot_absorb(x, spare, k);
      cw_slot_combine(p, x->uk, X, spare, k, 0);
    }
    memcpy(cw_wave_after(c, h, j), X, p->m * p->lds * sizeof(float));
    atomic_store_explicit(cw_wave_status(c, h, j), CW_DONE, memory_order_release);
  }
}

/* Software prefetch of aligned chunk k's rows of head h: with `queries` its query rows, with
 * `keys` its key and value rows (nothing past the aligned tokens; FLASH's rounds: none). */
static void cw_prefetch_chunk(const cw_ctx *x, size_t h, size_t k, int queries, int keys) {
  const attn_chunkwise_plan *p = x->p;
  const size_t aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv), t0 = k * p->C;
  if (p->xg || t0 >= aligned) return;
  cw_prefetch_rows(x, h * p->per, queries ? cw_pre_q(p) + t0 : SIZE_MAX, keys ? cw_pre_k(p) + t0 : SIZE_MAX,
                   attn_min_sz(p->C, aligned - t0));
}

/* A wave's task: head h's group c0 + i. Its chunks' local states first, in the worker's slots
 * (nothing waits for this); then the state before the group (cw_wave_before), the slots get the
 * state before each chunk as the state moves through them, the state after the group is
 * published for the next group's task, and the chunks' outputs come from the slots. Only a
 * group's state after it moves between workers. A group another task already computed (a task
 * that ran first, out of order) runs its chunks one at a time on the spare slot. */
static void cw_wave_task(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  const size_t i = task / p->heads, h = task % p->heads;
  float *ws = c->ws + worker * p->worker_floats, *slots = ws + p->off_slots, *X = ws + p->off_x;
  float *spare = slots + p->scan_group * p->scan_slot;
  const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
  atomic_int *st = cw_wave_status(c, h, i);
  size_t k0, k1;
  cw_wave_span(c, i, &k0, &k1);
  int seen = CW_FREE;
  if (!atomic_compare_exchange_strong_explicit(st, &seen, CW_BUSY, memory_order_acq_rel, memory_order_acquire)) {
    cw_wave_before(c, &x, h, i, X, spare);
    for (size_t k = k0; k < k1; k++) {
      cw_slot_absorb(&x, spare, k);
      cw_slot_combine(p, c->uk, X, spare, k, 1);
      cw_slot_query(&x, spare, h, k, ws + p->off_s);
    }
    return;
  }
  cw_prefetch_chunk(&x, h, k0, 0, 1);
  for (size_t k = k0; k < k1; k++) {
    if (k + 1 < k1) cw_prefetch_chunk(&x, h, k + 1, 0, 1);
    cw_slot_absorb(&x, slots + (k - k0) * p->scan_slot, k);
  }
  float *A = cw_wave_after(c, h, i); /* the state moves in place: nobody reads it before CW_DONE */
  cw_wave_before(c, &x, h, i, A, spare);
  for (size_t k = k0; k < k1; k++) cw_slot_combine(p, c->uk, A, slots + (k - k0) * p->scan_slot, k, 1);
  atomic_store_explicit(st, CW_DONE, memory_order_release);
  cw_prefetch_chunk(&x, h, k0, 1, 0);
  for (size_t k = k0; k < k1; k++) {
    if (k + 1 < k1) cw_prefetch_chunk(&x, h, k + 1, 1, 0);
    cw_slot_query(&x, slots + (k - k0) * p->scan_slot, h, k, ws + p->off_s);
  }
}

/* Floats of a gathered head's rows of width w, and of a gathered tensor (gather heads), each
 * followed by ATTN_GATHER_PAD floats (so that the blocks do not start at the same offset in a
 * 4 KiB page: 2-3% faster on a Zen 5 guest). */
static size_t cw_gather_head(const attn_chunkwise_plan *p, size_t w) { return p->C * w + ATTN_GATHER_PAD; }
static size_t cw_gather_block(const attn_chunkwise_plan *p, size_t w) {
  return p->gather * cw_gather_head(p, w) + ATTN_GATHER_PAD;
}

/* Gather the query, key and value rows of aligned chunk [t0, t0 + cn) of heads [a, b) (each head
 * its own query, key and value head) into g: the rows in order, each head's slices copied to the
 * head's contiguous rows (cw_gather_block floats of queries, then of keys, then of values). */
static void cw_gather(const cw_ctx *x0, float *g, size_t a, size_t b, size_t t0, size_t cn) {
  const attn_chunkwise_plan *p = x0->p;
  const attn_shape *s = p->shape;
  const size_t pre_k = cw_pre_k(p), pre_q = cw_pre_q(p);
  float *gq = g, *gk = gq + cw_gather_block(p, s->d), *gv = gk + cw_gather_block(p, s->d);
  const size_t sq = cw_gather_head(p, s->d), sv = cw_gather_head(p, s->dv);
  for (size_t j = 0; j < cn; j++) {
    const float *q = x0->io->q + (pre_q + t0 + j) * s->q.row_stride,
                *k = x0->io->k + (pre_k + t0 + j) * s->k.row_stride,
                *v = x0->io->v + (pre_k + t0 + j) * s->v.row_stride;
    for (size_t h = a; h < b; h++) {
      memcpy(gq + (h - a) * sq + j * s->d, q + h * s->q.head_stride, s->d * sizeof(float));
      memcpy(gk + (h - a) * sq + j * s->d, k + h * s->k.head_stride, s->d * sizeof(float));
      memcpy(gv + (h - a) * sv + j * s->dv, v + h * s->v.head_stride, s->dv * sizeof(float));
    }
  }
}

/* x for head h of a gathered group starting at head a (cw_gather's blocks in g). */
static void cw_gathered(cw_ctx *x, const float *g, size_t a, size_t h, size_t t0) {
  const attn_chunkwise_plan *p = x->p;
  const attn_shape *s = p->shape;
  const size_t bq = cw_gather_block(p, s->d);
  x->gq = g + (h - a) * cw_gather_head(p, s->d);
  x->gk = g + bq + (h - a) * cw_gather_head(p, s->d);
  x->gv = g + 2 * bq + (h - a) * cw_gather_head(p, s->dv);
  x->g0q = cw_pre_q(p) + t0;
  x->g0k = cw_pre_k(p) + t0;
}

/* The scan without waves, task t of G: heads [t H / G, (t+1) H / G) chunk after chunk, each chunk
 * for every head of the group before the next (token-major inputs: the heads of a row are
 * adjacent, so a row's lines are used while they are in cache, not fetched once per head). */
static void cw_scan_heads(void *ctx, size_t task, size_t worker) {
  const cw_par *c = ctx;
  const attn_chunkwise_plan *p = c->p;
  const size_t G = attn_min_sz(p->workers, p->heads), h0 = task * p->heads / G, h1 = (task + 1) * p->heads / G;
  float *ws = c->ws + worker * p->worker_floats, *D = ws + p->off_d;
  const size_t C = p->C, pre_k = cw_pre_k(p), pre_q = cw_pre_q(p), aligned = attn_min_sz(p->shape->n_q, p->shape->n_kv);
  for (size_t h = h0; h < h1; h++) cw_scan_lead(ctx, h, worker);
  for (size_t k = 0, qa, qb, full = 1; p->xg && full; k++) /* the exclusive form, round by round */
    for (size_t h = h0; h < h1; h++) {
      const cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
      float *S = cw_scan_state(c, h);
      full = (size_t)cw_xround(p, k, &qa, &qb);
      cw_xquery(&x, S, h, qa, qb);
      if (!full) continue;
      cw_xabsorb(&x, D, k, 0);
      cw_scan_update(p, c->uk, S, D, NULL, 1, 0, p->m, 0);
    }
  for (size_t t0 = 0; !p->xg && t0 < aligned; t0 += C) {
    const size_t cn = attn_min_sz(C, aligned - t0);
    for (size_t h = h0, a = h0; h < h1; h++) {
      cw_ctx x = cw_ctx_of(p, c->uk, c->io, h, ws);
      if (!p->gather || !p->gathered) {
        cw_prefetch_chunk(&x, h, t0 / C + 1, 1, 1);
      } else { /* the group's heads ATTN_GATHER at a time, their rows gathered first */
        if (h == a + p->gather || h == h0) {
          a = h;
          cw_gather(&x, ws + p->off_g, a, attn_min_sz(h1, a + p->gather), t0, cn);
        }
        cw_gathered(&x, ws + p->off_g, a, h, t0);
      }
      float *S = cw_scan_state(c, h);
      const int va_finite = cw_load_kv(&x, pre_k + t0, cn);
      if (p->fm->offsets) { /* as the waves' steps 1, 4 and 3 */
        cw_scan_local(&x, x.ku, D, cn, ws + p->off_dl);
        cw_scan_outputs(&x, S, ws + p->off_s, h, t0, cn, x.ku, x.kf, ws + p->off_dl, x.va, va_finite);
        cw_scan_merge(p, c->uk, S, D, 0, p->m, 0);
        continue;
      }
      if (cw_gated(p)) cw_gates(&x, pre_k + t0, cn, CW_FOR_BOTH);
      for (size_t gi = 0; gi < p->per; gi++) cw_query(&x, S, h * p->per + gi, pre_q + t0, cn, 1, va_finite);
      cw_absorb_to(&x, x.kf, D, cn, 0);
      cw_scan_update(p, c->uk, S, D, p->g.kind != ATTN_GATE_NONE ? x.dc : NULL, 1, 0, p->m, 0);
    }
  }
}

void attn_chunkwise_run_all(const attn_chunkwise_plan *p, const struct attn_ukernels *uk, const attn_chunkwise_io *io,
                            float *ws) {
  cw_par c = {p, uk, io, ws, 0, 0};
  const attn_threads *th = p->shape->threads;
  if (!p->scan_chunks) {
    attn_parallel(th, p->heads, cw_par_task, &c);
    return;
  }
  if (!p->scan_group) {
    attn_parallel(th, attn_min_sz(p->workers, p->heads), cw_scan_heads, &c);
    return;
  }
  attn_parallel(th, p->heads, cw_scan_lead, &c);
  for (; c.c0 < p->scan_groups; c.c0 += c.wn) {
    c.wn = attn_min_sz(p->scan_wave, p->scan_groups - c.c0);
    for (size_t h = 0; h < p->heads; h++)
      for (size_t i = 0; i < c.wn; i++) atomic_init(cw_wave_status(&c, h, i), CW_FREE);
    attn_parallel(th, c.wn * p->heads, cw_wave_task, &c);
    for (size_t h = 0; h < p->heads; h++)
      memcpy(cw_scan_state(&c, h), cw_wave_after(&c, h, c.wn - 1), p->m * p->lds * sizeof(float));
  }
}
