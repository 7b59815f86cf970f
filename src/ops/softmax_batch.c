/* Softmax attention over a batch of sequences (attn.h, attn_softmax_batch): the descriptor's
 * checks as one call over all rows, the batch's offsets, lengths and pages, then a plan per
 * sequence run by the blocked engine's batch schedule (engine/blocked.h). */
#include "ops/softmax_internal.h"

attn_status attn_batch_init(attn_batch *batch) {
  if (!batch) return attn_fail(ATTN_E_NULL_POINTER, "batch is NULL");
  *batch = (attn_batch){0};
  return ATTN_OK;
}

/* A validated batch: the whole descriptor's call, the pool's spans, the engine's batch sizes. */
typedef struct smb_call {
  sm_call c;
  attn_spans sp;  /* q, o as the descriptor's; k, v the pool's (paged) */
  size_t table_n; /* page table entries read (paged) */
  attn_blocked_batch eb;
  size_t rec_bytes; /* the records, in whole 64-byte lines */
  size_t bytes;     /* the workspace */
} smb_call;

static int smb_paged(const attn_batch *bt) { return bt->page_size > 0; }

/* Sequence b's query rows and keys. */
static size_t smb_nq(const attn_batch *bt, size_t b) { return bt->q_offsets[b + 1] - bt->q_offsets[b]; }
static size_t smb_nkv(const attn_batch *bt, size_t b) {
  return smb_paged(bt) ? bt->kv_lens[b] : bt->kv_offsets[b + 1] - bt->kv_offsets[b];
}

/* The batch's arrays: offsets in order and within the tensors, pages within the pool. */
static attn_status smb_check_seqs(const attn_softmax_desc *d, const attn_batch *bt, smb_call *x, size_t *max_kv) {
  const int paged = smb_paged(bt);
  *max_kv = 0, x->table_n = 0;
  if (!bt->q_offsets || (paged ? !bt->kv_lens || !bt->page_table : !bt->kv_offsets))
    return attn_fail(ATTN_E_NULL_POINTER, "batch.%s is NULL",
                     !bt->q_offsets ? "q_offsets"
                     : !paged       ? "kv_offsets"
                     : !bt->kv_lens ? "kv_lens"
                                    : "page_table");
  if (paged && bt->pages == 0) return attn_fail(ATTN_E_ZERO_SIZE, "batch.pages is 0");
  if (paged && d->shape.n_kv != bt->page_size)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.n_kv %zu != batch.page_size %zu: with pages, the shape is a page's",
                     d->shape.n_kv, bt->page_size);
  for (size_t b = 0; b <= bt->count; b++) {
    const size_t qo = bt->q_offsets[b];
    if ((b && qo < bt->q_offsets[b - 1]) || qo > d->shape.n_q)
      return attn_fail(ATTN_E_BAD_ARGUMENT, "batch.q_offsets[%zu] = %zu: offsets must not decrease nor pass n_q %zu", b,
                       qo, d->shape.n_q);
    if (!paged && ((b && bt->kv_offsets[b] < bt->kv_offsets[b - 1]) || bt->kv_offsets[b] > d->shape.n_kv))
      return attn_fail(ATTN_E_BAD_ARGUMENT, "batch.kv_offsets[%zu] = %zu: offsets must not decrease nor pass n_kv %zu",
                       b, bt->kv_offsets[b], d->shape.n_kv);
  }
  for (size_t b = 0; b < bt->count; b++) {
    const size_t nkv = smb_nkv(bt, b);
    if (smb_nq(bt, b) && !nkv) return attn_fail(ATTN_E_ZERO_SIZE, "sequence %zu has query rows but no key", b);
    *max_kv = attn_max_sz(*max_kv, nkv);
    if (!paged) continue;
    const size_t need = nkv / bt->page_size + (nkv % bt->page_size != 0);
    if (need > bt->table_stride)
      return attn_fail(ATTN_E_BAD_ARGUMENT, "sequence %zu: %zu keys take %zu pages, batch.table_stride is %zu", b, nkv,
                       need, bt->table_stride);
    size_t row, end;
    if (!attn_mul_ok(b, bt->table_stride, &row) || !attn_add_ok(row, need, &end) || end > PTRDIFF_MAX / sizeof(int32_t))
      return attn_fail(ATTN_E_SIZE_OVERFLOW, "batch.page_table: row %zu's entries overflow", b);
    x->table_n = attn_max_sz(x->table_n, end);
    for (size_t i = 0; i < need; i++) {
      const int32_t pg = bt->page_table[row + i];
      if (pg < 0 || (uint64_t)pg >= (uint64_t)bt->pages)
        return attn_fail(ATTN_E_BAD_ARGUMENT, "batch.page_table[%zu][%zu] = %ld: pages are 0 .. %zu", b, i, (long)pg,
                         bt->pages - 1);
    }
  }
  return ATTN_OK;
}

/* The pool's span in elements: pages - 1 page strides past one page's span; 0 on overflow. */
static size_t smb_pool(size_t pages, size_t stride, size_t page_span) {
  size_t a, r;
  return attn_mul_ok(pages - 1, stride, &a) && attn_add_ok(a, page_span, &r) ? r : 0;
}

/* Sequence b's shape and io within the batch's tensors. */
static void smb_seq(const attn_softmax_desc *d, const attn_batch *bt, size_t b, const void *q, const void *k,
                    const void *v, void *o, float *lse, attn_blocked_seq *r) {
  const attn_shape *s = &d->shape;
  const int paged = smb_paged(bt);
  const size_t q0 = bt->q_offsets[b], k0 = paged ? 0 : bt->kv_offsets[b], es = attn_dtype_size(s->kv_type);
  r->shape = *s;
  r->shape.n_q = smb_nq(bt, b), r->shape.n_kv = smb_nkv(bt, b);
  const int i8 = s->kv_type == ATTN_I8;
  const size_t s0 = k0 * d->scale_layout.row_stride;
  r->io = (attn_blocked_io){.q = q ? attn_act_at(q, attn_act_size(s->q_type), s->q, q0, 0) : NULL,
                            .k = k ? (const char *)k + k0 * s->k.row_stride * es : NULL,
                            .v = v ? (const char *)v + k0 * s->v.row_stride * es : NULL,
                            .o = o ? (void *)attn_act_at(o, attn_act_size(s->o_type), s->o, q0, 0) : NULL,
                            .aux = lse ? lse + q0 * d->lse.row_stride : NULL,
                            .aux_layout = d->lse,
                            .k_scales = i8 ? d->k_scales + s0 : NULL,
                            .v_scales = i8 ? d->v_scales + s0 : NULL,
                            .scales = d->scale_layout,
                            .t_base = q0};
  if (paged)
    r->io.pages.table = bt->page_table + b * bt->table_stride, r->io.pages.size = bt->page_size,
    r->io.pages.k = bt->k_page_stride, r->io.pages.v = bt->v_page_stride, r->io.pages.scales = bt->scale_page_stride;
}

static attn_status smb_prepare(const attn_softmax_desc *d, const attn_batch *bt, smb_call *x) {
  attn_status st;
  size_t max_kv;
  if ((st = attn_softmax_prepare(d, &x->c))) return st;
  if (!bt) return attn_fail(ATTN_E_NULL_POINTER, "batch is NULL");
  if (!bt->count) return attn_fail(ATTN_E_ZERO_SIZE, "batch.count is 0");
  if ((st = smb_check_seqs(d, bt, x, &max_kv))) return st;
  const attn_shape *s = &d->shape;
  x->sp = x->c.b.sp;
  if (smb_paged(bt)) { /* the pool: pages of the shape's (one page's) span */
    const size_t sk = smb_pool(bt->pages, bt->k_page_stride, x->sp.k),
                 sv = smb_pool(bt->pages, bt->v_page_stride, x->sp.v);
    const size_t ss = x->c.scale_floats ? smb_pool(bt->pages, bt->scale_page_stride, x->c.scale_floats) : 0;
    if (!sk || !sv || (x->c.scale_floats && !ss) || sk > PTRDIFF_MAX / x->sp.kv_elem ||
        sv > PTRDIFF_MAX / x->sp.kv_elem || ss > PTRDIFF_MAX / sizeof(float))
      return attn_fail(ATTN_E_SIZE_OVERFLOW, "the pool of %zu pages overflows", bt->pages);
    x->sp.k = sk, x->sp.v = sv, x->c.scale_floats = ss;
  }
  /* the bias: every packed row, each sequence's keys */
  if (d->bias && attn_layout_span(s->n_q, s->h_q, attn_max_sz(max_kv, 1), d->bias_layout, &x->c.bias_floats))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "desc.bias_layout: the bias tensor's span overflows");
  /* every sequence's plan, for the workspace (each planned again into its record by the call) */
  x->eb = (attn_blocked_batch){0};
  for (size_t b = 0; b < bt->count; b++) {
    if (!smb_nq(bt, b)) continue;
    attn_blocked_seq r;
    smb_seq(d, bt, b, NULL, NULL, NULL, NULL, NULL, &r);
    if ((st = attn_softmax_plan(d, &x->c, &r.shape, smb_paged(bt), &r.plan))) return st;
    if (attn_blocked_batch_add(&x->eb, &r.plan))
      return attn_fail(ATTN_E_SIZE_OVERFLOW, "the batch's workspace overflows");
  }
  size_t floats, rec, fb;
  if (attn_blocked_batch_size(&x->eb, &floats) || !attn_mul_ok(x->eb.count, sizeof(attn_blocked_seq), &rec) ||
      rec > SIZE_MAX - 63 || !attn_mul_ok(floats, sizeof(float), &fb))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the batch's workspace overflows");
  x->rec_bytes = (rec + 63) / 64 * 64;
  if (!attn_add_ok(x->rec_bytes, fb, &x->bytes) || !attn_add_ok(x->bytes, 64, &x->bytes))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the batch's workspace overflows");
  return ATTN_OK;
}

attn_status attn_softmax_batch_workspace_size(const attn_softmax_desc *d, const attn_batch *bt, size_t *bytes) {
  smb_call x;
  const attn_status st = smb_prepare(d, bt, &x);
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = x.bytes;
  return ATTN_OK;
}

attn_status attn_softmax_batch(const attn_softmax_desc *d, const attn_batch *bt, const void *q, const void *k,
                               const void *v, void *o, float *lse, void *workspace, size_t workspace_size) {
  smb_call x;
  attn_status st = smb_prepare(d, bt, &x);
  if (st) return st;
  if ((st = attn_check_call_memory(q, k, v, o, workspace, workspace_size, x.bytes))) return st;
  void *out[3] = {o, lse, workspace};
  const size_t out_bytes[3] = {x.sp.o * x.sp.o_elem, x.c.b.aux_span * sizeof(float), workspace_size};
  static const char out_names[] = "o lse workspace";
  if ((st = attn_check_io(&x.sp, q, k, v, out, out_bytes, 3)))
    return attn_fail_io(out_names, &x.sp, q, k, v, out, out_bytes, 3);
  if ((st = attn_softmax_check_inputs(d, &x.c, out_names, out, out_bytes, 3))) return st;
  const int paged = smb_paged(bt);
  const void *const in[3] = {bt->q_offsets, paged ? (const void *)bt->kv_lens : bt->kv_offsets,
                             paged ? bt->page_table : NULL};
  const size_t in_bytes[3] = {(bt->count + 1) * sizeof(size_t), (bt->count + !paged) * sizeof(size_t),
                              x.table_n * sizeof(int32_t)};
  if ((st = attn_check_extra_inputs("batch.q_offsets batch.kv_lens/kv_offsets batch.page_table", in, in_bytes, 3,
                                    out_names, out, out_bytes, 3)))
    return st;
  /* the records, then the engine's workspace */
  char *base = (char *)attn_ws_base(workspace);
  attn_blocked_seq *recs = (attn_blocked_seq *)(void *)base;
  size_t n = 0;
  for (size_t b = 0; b < bt->count; b++) {
    if (!smb_nq(bt, b)) continue;
    attn_blocked_seq *r = &recs[n++];
    smb_seq(d, bt, b, q, k, v, o, lse, r);
    (void)attn_softmax_plan(d, &x.c, &r->shape, paged, &r->plan); /* planned as by smb_prepare */
  }
  x.eb.seqs = recs;
  attn_blocked_batch_place(&x.eb);
  attn_blocked_run_batch(&x.eb, d->shape.threads, x.c.b.uk, (float *)(void *)(base + x.rec_bytes));
  return ATTN_OK;
}
