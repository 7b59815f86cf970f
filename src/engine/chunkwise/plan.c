/* The chunkwise engine's plan (engine/chunkwise.h): state heads and sizes from the shape, then the
 * scratch layout for a chunk size, with the schedule the scan takes (by head groups or in waves). */
#include "engine/chunkwise/internal.h"

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
                             .fm_xs = fm->offsets ? sqrtf(scale) : 1.0f,
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
  size_t mw;
  p->recurrent = p->causal && !p->xg && !p->fm->offsets &&
                 (chunk == 1 || (!chunk && p->g.kind == ATTN_GATE_FEATURE && attn_mul_ok(p->m, p->W, &mw) &&
                                 mw <= uk->linear_recurrent));
  p->C = chunk && !p->recurrent ? chunk : uk->linear_chunk;
  p->decode = p->causal && !p->xg && !p->fm->offsets && p->per == 1 && p->shape->n_q == 1 && p->shape->n_kv == 1;
  p->ldw = attn_line_floats(p->W); /* W <= dv + 1 <= SIZE_MAX / 4 */
  p->direct = !p->normalize && p->out_scale == 1.0f && p->shape->o_type == ATTN_F32;
  size_t cm, cw, cc, ms;
  if (!attn_mul_ok(p->C, p->m, &cm) || !attn_mul_ok(p->C, p->ldw, &cw) || !attn_mul_ok(p->C, p->C, &cc) ||
      !attn_mul_ok(p->m, p->lds, &ms))
    return cw_overflow(p, "workspace");
  attn_ws w = {.floats = 0, .overflow = 0};
  p->wl.kf = attn_ws_take(&w, cm);
  p->wl.va = attn_ws_take(&w, cw);
  p->wl.qt = attn_ws_take(&w, cm);
  p->wl.at = attn_ws_take(&w, cc);
  p->wl.oc = attn_ws_take(&w, cw);
  p->wl.s = attn_ws_take(&w, ms); /* one head's S when the caller keeps no state */
  p->wl.fm = attn_ws_take(&w, p->fm->scratch(p->C, p->shape->d, p->m));
  if (p->g.kind != ATTN_GATE_NONE || p->g.beta) {
    const int feat = p->g.kind == ATTN_GATE_FEATURE;
    p->wl.b = attn_ws_take(&w, 2 * (feat ? cm : p->C)); /* doubles */
    p->wl.wt = attn_ws_take(&w, cc);
    p->wl.din = attn_ws_take(&w, p->C);
    p->wl.dout = attn_ws_take(&w, p->C);
    p->wl.dc = attn_ws_take(&w, p->m);
    p->wl.ks = attn_ws_take(&w, feat ? cm : 0); /* key factors, then query factors and their exponents */
    (void)attn_ws_take(&w, feat ? cm : 0);
    (void)attn_ws_take(&w, feat ? cm : 0);
  }
  p->wl.gx = attn_ws_take(&w, p->recurrent && p->g.kind != ATTN_GATE_NONE ? cm : 0);
  p->ldr = attn_line_floats(p->lds); /* lds <= SIZE_MAX / 4 */
  size_t mr;
  if (!attn_mul_ok(p->m, p->ldr, &mr)) return cw_overflow(p, "workspace");
  if (p->fm->offsets) {
    p->wl.ku = attn_ws_take(&w, cm);
    p->wl.qu = attn_ws_take(&w, cm);
    p->wl.cp = attn_ws_take(&w, p->m);
    p->wl.cn = attn_ws_take(&w, p->m);
    p->wl.run = attn_ws_take(&w, p->m);
  }
  /* The scan (engine/chunkwise.h): a causal prefill of 2+ chunks, or FLASH's exclusive form over 2+ rounds. */
  const attn_shape *s = p->shape;
  const size_t aligned = attn_min_sz(s->n_q, s->n_kv);
  p->scan_chunks = p->scan_wave = p->scan_group = p->scan_groups = p->sl.b = 0;
  if (p->xg && s->n_kv > p->xg) /* FLASH's exclusive form: 2+ rounds */
    p->scan_chunks = (s->n_kv + p->xg - 1) / p->xg;
  else if (p->causal && !p->xg && (p->recurrent ? aligned >= CW_REC_COPY_MIN : aligned > p->C))
    p->scan_chunks = (aligned + p->C - 1) / p->C;                      /* the recurrence: its chunks by head groups */
  if (p->scan_chunks && !p->recurrent) p->wl.d = attn_ws_take(&w, ms); /* a chunk's local state, run per head */
  if (p->scan_chunks && p->fm->offsets) p->wl.dl = attn_ws_take(&w, p->m); /* and its offsets */
  p->workers = attn_workers(p->shape->threads);
  /* Waves only where the heads alone would not keep the workers busy (results do not depend on it). */
  const size_t W = p->workers, H = p->heads;
  const int waves = p->scan_chunks && !p->recurrent && W > 1 && H % W && H < 4 * W;
  /* The scan by head groups gathers token-major rows (a head's rows further apart than its heads)
   * where each head has its own query, key and value head and a group has 2+ heads. The scratch
   * is kept whatever the layout, so that the workspace size depends on the shape alone. */
  const size_t group_heads = H ? (H + attn_min_sz(W, H) - 1) / attn_min_sz(W, H) : 0;
  p->gather = p->wl.g = 0;
  p->gathered =
      s->q.head_stride < s->q.row_stride && s->k.head_stride < s->k.row_stride && s->v.head_stride < s->v.row_stride;
  if (p->scan_chunks && !waves && !p->xg && p->per == 1 && p->qdiv == 1 && p->kdiv == 1 && p->vdiv == 1 &&
      group_heads >= 2) {
    size_t g;
    p->gather = attn_min_sz(group_heads, ATTN_GATHER);
    if (!attn_mul_ok(p->C, 2 * s->d + s->dv, &g) || !attn_mul_ok(g + 3 * ATTN_GATHER_PAD, p->gather, &g))
      return cw_overflow(p, "workspace");
    g += 3 * ATTN_GATHER_PAD; /* cw_gather_block of d, d and dv */
    p->wl.g = attn_ws_take(&w, g);
  }
  if (waves) {
    /* a chunk's slot: D (then S before it), Kf (maps with offsets: their pre-exponential
     * features), Va and Va's finiteness */
    attn_ws slot = {.floats = 0, .overflow = 0};
    (void)attn_ws_take(&slot, ms);
    if (!p->xg) { /* the exclusive form has no intra part: D alone */
      p->sl.kf = attn_ws_take(&slot, cm);
      p->sl.va = attn_ws_take(&slot, cw);
      p->sl.fin = attn_ws_take(&slot, 1);
    }
    if (p->fm->offsets) { /* the chunk's Kf at its own offsets, and those offsets */
      p->sl.kl = attn_ws_take(&slot, cm);
      p->sl.dl = attn_ws_take(&slot, p->m);
    }
    if (!p->xg && p->g.kind == ATTN_GATE_FEATURE) p->sl.b = attn_ws_take(&slot, 2 * cm); /* doubles */
    p->scan_slot = slot.floats;
    /* groups of ATTN_SCAN_PER_WORKER per worker and head, within [ATTN_SCAN_GROUP_MIN, _MAX] chunks */
    size_t per, gc = (p->scan_chunks * H + ATTN_SCAN_PER_WORKER * W - 1) / (ATTN_SCAN_PER_WORKER * W);
    gc = gc < ATTN_SCAN_GROUP_MIN ? ATTN_SCAN_GROUP_MIN : gc > ATTN_SCAN_GROUP_MAX ? ATTN_SCAN_GROUP_MAX : gc;
    p->scan_group = attn_min_sz(gc, p->scan_chunks);
    p->scan_groups = (p->scan_chunks + p->scan_group - 1) / p->scan_group;
    if (slot.overflow || !attn_mul_ok(p->scan_group + 1, p->scan_slot, &per)) return cw_overflow(p, "workspace");
    p->wl.slots = attn_ws_take(&w, per); /* the group's chunks' slots, and one for a chunk run alone */
    p->wl.x = attn_ws_take(&w, ms);      /* the state moving through a group */
  }
  /* Intra scores shared by heads that read the same query and key rows (share_at): element-wise
   * maps (features of the rows alone), no per-feature gate (its scores carry the gates), one
   * output head per state head, the scan by head groups (waves and gathers compute their own). */
  p->share_at = p->causal && !p->xg && !p->recurrent && !p->fm->offsets && p->g.kind != ATTN_GATE_FEATURE &&
                p->per == 1 && p->qdiv > 1 && p->kdiv > 1 && p->scan_chunks && !waves && !p->gather;
  p->wl.at0 = attn_ws_take(&w, p->share_at ? cc : 0);
  size_t cd, rd; /* the half queries' and outputs' rows */
  if (!attn_mul_ok(p->C, s->d, &cd) || !attn_mul_ok(CW_ROW_BATCH, s->dv, &rd)) return cw_overflow(p, "workspace");
  p->wl.qc = attn_ws_take(&w, s->q_type != ATTN_F32 ? cd : 0);
  p->wl.oh = attn_ws_take(&w, s->o_type != ATTN_F32 ? rd : 0);
  p->worker_floats = w.floats;
  size_t total;
  if (w.overflow || !attn_mul_ok(w.floats, p->workers, &total)) return cw_overflow(p, "workspace");
  attn_ws all = {.floats = total, .overflow = 0};
  size_t states;
  if (p->scan_chunks) { /* the heads' states (without a caller's; the recurrence: rows of whole lines) */
    if (!attn_mul_ok(H, p->recurrent ? mr : ms, &states)) return cw_overflow(p, "workspace");
    p->scan_region = attn_ws_take(&all, states);
  }
  if (waves) { /* then heads x scan_wave groups' states after them and their statuses */
    attn_ws after = {.floats = 0, .overflow = 0};
    (void)attn_ws_take(&after, ms);
    p->scan_status = attn_ws_take(&after, 1);
    p->scan_after = after.floats;
    size_t hs, slots;
    if (after.overflow || !attn_mul_ok(H, p->scan_after, &hs)) return cw_overflow(p, "workspace");
    const size_t fit = ATTN_SCAN_FLOATS / hs;
    p->scan_wave = attn_min_sz(p->scan_groups, fit ? fit : 1);
    if (!attn_mul_ok(hs, p->scan_wave, &slots)) return cw_overflow(p, "workspace");
    p->after_region = attn_ws_take(&all, slots);
  }
  return !all.overflow && attn_ws_bytes(&all, &p->scratch_bytes) ? ATTN_OK : cw_overflow(p, "workspace");
}
