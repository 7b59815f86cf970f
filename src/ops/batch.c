/* Batched calls of the blocked engine's variants (ops/batch_internal.h): the batch's offsets,
 * lengths and pages checked, each sequence's shape, io and plan, one dispatch of the engine's
 * batch schedule (engine/blocked.h). */
#include "ops/batch_internal.h"

attn_status attn_batch_init(attn_batch *batch) {
  if (!batch) return attn_fail(ATTN_E_NULL_POINTER, "batch is NULL");
  *batch = (attn_batch){0};
  return ATTN_OK;
}

static int ob_paged(const attn_batch *bt) { return bt->page_size > 0; }

/* Sequence b's query rows and keys. */
static size_t ob_nq(const attn_batch *bt, size_t b) { return bt->q_offsets[b + 1] - bt->q_offsets[b]; }
static size_t ob_nkv(const attn_batch *bt, size_t b) {
  return ob_paged(bt) ? bt->kv_lens[b] : bt->kv_offsets[b + 1] - bt->kv_offsets[b];
}

/* The batch's arrays: offsets in order and within the tensors, pages within the pool. */
static attn_status ob_check_seqs(const attn_shape *s, const attn_batch *bt, ob_call *x) {
  const int paged = ob_paged(bt);
  x->max_kv = 0, x->table_n = 0;
  if (!bt->q_offsets || (paged ? !bt->kv_lens || !bt->page_table : !bt->kv_offsets))
    return attn_fail(ATTN_E_NULL_POINTER, "batch.%s is NULL",
                     !bt->q_offsets ? "q_offsets"
                     : !paged       ? "kv_offsets"
                     : !bt->kv_lens ? "kv_lens"
                                    : "page_table");
  if (paged && bt->pages == 0) return attn_fail(ATTN_E_ZERO_SIZE, "batch.pages is 0");
  if (paged && s->n_kv != bt->page_size)
    return attn_fail(ATTN_E_BAD_ARGUMENT, "shape.n_kv %zu != batch.page_size %zu: with pages, the shape is a page's",
                     s->n_kv, bt->page_size);
  for (size_t b = 0; b <= bt->count; b++) {
    const size_t qo = bt->q_offsets[b];
    if ((b && qo < bt->q_offsets[b - 1]) || qo > s->n_q)
      return attn_fail(ATTN_E_BAD_ARGUMENT, "batch.q_offsets[%zu] = %zu: offsets must not decrease nor pass n_q %zu", b,
                       qo, s->n_q);
    if (!paged && ((b && bt->kv_offsets[b] < bt->kv_offsets[b - 1]) || bt->kv_offsets[b] > s->n_kv))
      return attn_fail(ATTN_E_BAD_ARGUMENT, "batch.kv_offsets[%zu] = %zu: offsets must not decrease nor pass n_kv %zu",
                       b, bt->kv_offsets[b], s->n_kv);
  }
  for (size_t b = 0; b < bt->count; b++) {
    const size_t nkv = ob_nkv(bt, b);
    if (ob_nq(bt, b) && !nkv) return attn_fail(ATTN_E_ZERO_SIZE, "sequence %zu has query rows but no key", b);
    x->max_kv = attn_max_sz(x->max_kv, nkv);
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
static size_t ob_pool(size_t pages, size_t stride, size_t page_span) {
  size_t a, r;
  return attn_mul_ok(pages - 1, stride, &a) && attn_add_ok(a, page_span, &r) ? r : 0;
}

/* Sequence b's shape and io within the batch's tensors. */
static void ob_seq(const attn_shape *s, const attn_batch *bt, const ob_variant *v, size_t b, const void *q,
                   const void *k, const void *vv, void *o, attn_blocked_seq *r) {
  const int paged = ob_paged(bt);
  const size_t q0 = bt->q_offsets[b], k0 = paged ? 0 : bt->kv_offsets[b], es = attn_dtype_size(s->kv_type);
  r->shape = *s;
  r->shape.n_q = ob_nq(bt, b), r->shape.n_kv = ob_nkv(bt, b);
  const size_t s0 = k0 * v->scale_layout.row_stride;
  r->io = (attn_blocked_io){.q = q ? attn_act_at(q, attn_act_size(s->q_type), s->q, q0, 0) : NULL,
                            .k = k ? (const char *)k + k0 * s->k.row_stride * es : NULL,
                            .v = vv ? (const char *)vv + k0 * s->v.row_stride * es : NULL,
                            .o = o ? (void *)attn_act_at(o, attn_act_size(s->o_type), s->o, q0, 0) : NULL,
                            .aux = v->aux ? v->aux + q0 * v->aux_layout.row_stride : NULL,
                            .aux_layout = v->aux_layout,
                            .k_scales = v->k_scales ? v->k_scales + s0 : NULL,
                            .v_scales = v->v_scales ? v->v_scales + s0 : NULL,
                            .scales = v->scale_layout,
                            .t_base = q0};
  if (paged)
    r->io.pages.table = bt->page_table + b * bt->table_stride, r->io.pages.size = bt->page_size,
    r->io.pages.k = bt->k_page_stride, r->io.pages.v = bt->v_page_stride, r->io.pages.scales = bt->scale_page_stride;
}

attn_status attn_ob_prepare(const attn_shape *s, const attn_spans *sp, const attn_batch *bt, const ob_variant *v,
                            ob_call *x) {
  attn_status st;
  if (!bt) return attn_fail(ATTN_E_NULL_POINTER, "batch is NULL");
  if (!bt->count) return attn_fail(ATTN_E_ZERO_SIZE, "batch.count is 0");
  if ((st = ob_check_seqs(s, bt, x))) return st;
  x->sp = *sp, x->scale_floats = v->scale_floats;
  if (ob_paged(bt)) { /* the pool: pages of the shape's (one page's) span */
    const size_t sk = ob_pool(bt->pages, bt->k_page_stride, x->sp.k),
                 sv = ob_pool(bt->pages, bt->v_page_stride, x->sp.v);
    const size_t ss = v->scale_floats ? ob_pool(bt->pages, bt->scale_page_stride, v->scale_floats) : 0;
    if (!sk || !sv || (v->scale_floats && !ss) || sk > PTRDIFF_MAX / x->sp.kv_elem ||
        sv > PTRDIFF_MAX / x->sp.kv_elem || ss > PTRDIFF_MAX / sizeof(float))
      return attn_fail(ATTN_E_SIZE_OVERFLOW, "the pool of %zu pages overflows", bt->pages);
    x->sp.k = sk, x->sp.v = sv, x->scale_floats = ss;
  }
  /* every sequence's plan, for the workspace (each planned again into its record by the call) */
  x->eb = (attn_blocked_batch){0};
  for (size_t b = 0; b < bt->count; b++) {
    if (!ob_nq(bt, b)) continue;
    attn_blocked_seq r;
    ob_seq(s, bt, v, b, NULL, NULL, NULL, NULL, &r);
    if ((st = v->plan(v, &r.shape, ob_paged(bt), &r.plan))) return st;
    if (attn_blocked_batch_add(&x->eb, &r.plan))
      return attn_fail(ATTN_E_SIZE_OVERFLOW, "the batch's workspace overflows");
  }
  if (attn_blocked_batch_bytes(&x->eb, &x->rec_bytes, &x->bytes))
    return attn_fail(ATTN_E_SIZE_OVERFLOW, "the batch's workspace overflows");
  return ATTN_OK;
}

attn_status attn_ob_ws_answer(attn_status st, const ob_batch *b, size_t *bytes) {
  if (st) return st;
  if (!bytes) return attn_fail(ATTN_E_NULL_POINTER, "bytes is NULL");
  *bytes = b->x.bytes;
  return ATTN_OK;
}

attn_status attn_ob_check_arrays(const attn_batch *bt, const ob_call *x, const char *out_names, void *const *out,
                                 const size_t *out_bytes, size_t n) {
  const int paged = ob_paged(bt);
  const void *const in[3] = {bt->q_offsets, paged ? (const void *)bt->kv_lens : bt->kv_offsets,
                             paged ? bt->page_table : NULL};
  const size_t in_bytes[3] = {(bt->count + 1) * sizeof(size_t), (bt->count + !paged) * sizeof(size_t),
                              x->table_n * sizeof(int32_t)};
  return attn_check_extra_inputs("batch.q_offsets batch.kv_lens/kv_offsets batch.page_table", in, in_bytes, 3,
                                 out_names, out, out_bytes, n);
}

void attn_ob_run(const attn_shape *s, const attn_batch *bt, const ob_variant *v, ob_call *x,
                 const struct attn_ukernels *uk, const void *q, const void *k, const void *vv, void *o,
                 void *workspace) {
  char *base = (char *)attn_ws_base(workspace);
  attn_blocked_seq *recs = (attn_blocked_seq *)(void *)base;
  size_t n = 0;
  for (size_t b = 0; b < bt->count; b++) {
    if (!ob_nq(bt, b)) continue;
    attn_blocked_seq *r = &recs[n++];
    ob_seq(s, bt, v, b, q, k, vv, o, r);
    (void)v->plan(v, &r->shape, ob_paged(bt), &r->plan); /* planned as by attn_ob_prepare */
  }
  x->eb.seqs = recs;
  attn_blocked_batch_place(&x->eb);
  attn_blocked_run_batch(&x->eb, s->threads, uk, (float *)(void *)(base + x->rec_bytes));
}
