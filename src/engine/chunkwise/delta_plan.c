/* The delta rule's plan (engine/chunkwise.h): heads, chunk and one worker's scratch regions. */
#include "engine/chunkwise/delta.h"

attn_status attn_delta_plan_make(attn_delta_plan *p, const attn_shape *s, attn_delta_gate gate, attn_layout gl,
                                 attn_layout bl, float scale, int l2norm, size_t chunk,
                                 const struct attn_ukernels *uk) {
  *p = (attn_delta_plan){.shape = s,
                         .gate = gate,
                         .gl = gl,
                         .bl = bl,
                         .scale = scale,
                         .l2norm = l2norm,
                         .C = chunk ? chunk : uk->delta_chunk,
                         .kdiv = s->h_v / s->h_k,
                         .workers = attn_workers(s->threads)};
  const size_t C = p->C, d = s->d, dv = s->dv;
  size_t cd, cdv, hf, sf;
  if (!attn_mul_ok(C, d, &cd) || !attn_mul_ok(C, dv, &cdv) || !attn_mul_ok(d, dv, &hf) ||
      !attn_mul_ok(hf, s->h_v, &sf) || sf > SIZE_MAX / sizeof(float))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the delta rule's state or workspace of d %zu, dv %zu overflows size_t", d,
                     dv);
  p->head_floats = hf;
  attn_ws w = {.floats = 0, .overflow = 0};
  attn_delta_scratch *a = &p->at;
  /* pairs one product makes or reads together: K above Q (their Gram rows L above A), beta V
   * beside -beta K e^B (one product with X gives U beside W'), rows of ldvk = dv + d floats */
  p->ldvk = d + dv; /* cannot overflow: both spans fit */
  size_t cvk = 0;
  if (!attn_mul_ok(C, p->ldvk, &cvk)) w.overflow = 1;
  a->k = attn_ws_take(&w, 2 * cd), a->q = a->k + cd;
  a->l = attn_ws_take(&w, 2 * C * C), a->a = a->l + C * C;
  a->vb = attn_ws_take(&w, cvk), a->kg = a->vb + dv;
  a->u = attn_ws_take(&w, cvk), a->w = a->u + dv;
  a->kn = attn_ws_take(&w, cd);
  a->kt = attn_ws_take(&w, cd);
  a->kr = attn_ws_take(&w, cd);
  a->x = attn_ws_take(&w, C * C);
  a->b = attn_ws_take(&w, 2 * (gate == ATTN_DELTA_FEATURE ? cd : C)); /* doubles */
  a->rs = attn_ws_take(&w, d);
  a->e = attn_ws_take(&w, 5 * d + 2 * dv + 2 * ATTN_DELTA_SUB * d + 3 * C);
  /* Heads per task: as many as keep their states within ATTN_DELTA_GROUP_BYTES, no more than an
   * even share of the workers', and whole groups of a key head's value heads where that fits. */
  size_t g = attn_max_sz(1, ATTN_DELTA_GROUP_BYTES / (hf * sizeof(float)));
  g = attn_min_sz(g, (s->h_v + p->workers - 1) / p->workers);
  if (g > p->kdiv) g -= g % p->kdiv;
  p->group = g;
  size_t gf = 0;
  if (!attn_mul_ok(g, hf, &gf)) w.overflow = 1;
  a->s0 = attn_ws_take(&w, gf); /* the group's zero states when the caller keeps none */
  a->oc = attn_ws_take(&w, s->o_type != ATTN_F32 ? cdv : 0);
  p->worker_floats = w.floats;
  size_t all = 0;
  if (w.overflow || !attn_mul_ok(p->worker_floats, p->workers, &all)) w.overflow = 1;
  w.floats = all;
  if (!attn_ws_bytes(&w, &p->scratch_bytes))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the delta rule's workspace of d %zu, dv %zu overflows size_t", d, dv);
  return ATTN_OK;
}
