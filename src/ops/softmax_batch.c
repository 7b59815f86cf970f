/* Softmax attention over a batch of sequences (attn.h, attn_softmax_batch): the descriptor's
 * checks as one call over all rows, then the batch's (ops/batch.c), a plan per sequence run by
 * the blocked engine's batch schedule. */
#include "ops/batch_internal.h"
#include "ops/softmax_internal.h"

typedef ATTN_OB_CALL(sm_call) smb_call; /* a validated batch */

static attn_status smb_plan(const ob_variant *v, const attn_shape *s, int paged, attn_blocked_plan *p) {
  return attn_softmax_plan(v->desc, v->call, s, paged, p);
}

static attn_status smb_prepare(const attn_softmax_desc *d, const attn_batch *bt, float *lse, smb_call *m) {
  attn_status st;
  if ((st = attn_softmax_prepare(d, &m->c))) return st;
  const int i8 = d->shape.kv_type == ATTN_I8;
  m->b.v = (ob_variant){.desc = d,
                        .call = &m->c,
                        .plan = smb_plan,
                        .aux = lse,
                        .aux_layout = d->lse,
                        .k_scales = i8 ? d->k_scales : NULL,
                        .v_scales = i8 ? d->v_scales : NULL,
                        .scale_layout = d->scale_layout,
                        .scale_floats = m->c.scale_floats};
  if ((st = attn_ob_prepare(&d->shape, &m->c.b.sp, bt, &m->b.v, &m->b.x))) return st;
  m->c.scale_floats = m->b.x.scale_floats; /* the pool's, when paged */
  /* the bias: every packed row, each sequence's keys */
  if (d->bias &&
      attn_layout_span(d->shape.n_q, d->shape.h_q, attn_max_sz(m->b.x.max_kv, 1), d->bias_layout, &m->c.bias_floats))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "desc.bias_layout: the bias tensor's span overflows");
  return ATTN_OK;
}

attn_status attn_softmax_batch_workspace_size(const attn_softmax_desc *d, const attn_batch *bt, size_t *bytes) {
  smb_call m;
  return attn_ob_ws_answer(smb_prepare(d, bt, NULL, &m), &m.b, bytes);
}

attn_status attn_softmax_batch(const attn_softmax_desc *d, const attn_batch *bt, const void *q, const void *k,
                               const void *v, void *o, float *lse, void *workspace, size_t workspace_size) {
  smb_call m;
  attn_status st = smb_prepare(d, bt, lse, &m);
  if (st) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, workspace_size, m.b.x.bytes))) return st;
  const attn_spans *sp = &m.b.x.sp;
  void *out[3] = {o, lse, workspace};
  const size_t out_bytes[3] = {sp->o * sp->o_elem, m.c.b.aux_span * sizeof(float), workspace_size};
  static const char out_names[] = "o lse workspace";
  if ((st = attn_check_io(sp, q, k, v, out, out_bytes, 3)))
    return attn_fail_io(out_names, sp, q, k, v, out, out_bytes, 3);
  if ((st = attn_softmax_check_inputs(d, &m.c, out_names, out, out_bytes, 3))) return st;
  if ((st = attn_ob_check_arrays(bt, &m.b.x, out_names, out, out_bytes, 3))) return st;
  attn_ob_run(&d->shape, bt, &m.b.v, &m.b.x, m.c.b.uk, q, k, v, o, workspace);
  return ATTN_OK;
}
