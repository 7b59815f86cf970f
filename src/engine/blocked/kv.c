/* The blocked engine's K/V access: rows in place, packed per worker (attn_blk_pack), converted from fp16 /
 * bf16 / int8 into scratch, and the scores of a key block (K_blk times the packed queries). */
#include "engine/blocked/internal.h"

/* Which key head the worker's packed K and V hold (attn_blk_pack): that head + 1, 0 for none (reset
 * by attn_blocked_run_all at every call). */
static size_t *blk_pack_tag(const blk_task *t) { return (size_t *)(void *)(t->ws + t->p->wl.ptag); }

/* Rows [j0, j0 + n) of key (value 0) or value (value 1) head h of a converted type into dst
 * (n x w floats, w = d or dv): the path's half, int8 (with each row's scale) or q8_0 kernel. */
static void blk_convert(const blk_task *t, int value, int64_t j0, size_t n, size_t h, float *dst) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const attn_layout l = value ? s->v : s->k;
  const size_t w = value ? s->dv : s->d;
  const void *row = blk_row(t, value ? t->io->v : t->io->k, l, j0, h);
  if (p->kv_type == ATTN_I8) {
    const attn_layout sl = t->io->scales;
    const float *sc = (value ? t->io->v_scales : t->io->k_scales) + (size_t)j0 * sl.row_stride + h * sl.head_stride;
    t->uk->i8_cvt(n, w, row, l.row_stride, sc, sl.row_stride, dst);
  } else if (p->kv_type == ATTN_Q8_0) {
    t->uk->q8_cvt(n, w, row, l.row_stride, dst);
  } else {
    p->kv.to_f32(n, w, row, l.row_stride, dst);
  }
}

/* Pack keys [0, pack_keys) of the task's key head into the worker's scratch (fp32, rows of d and
 * dv floats), unless it holds them already (a plan with p->pack: one key head per task). */
void attn_blk_pack(const blk_task *t) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  size_t *tag = blk_pack_tag(t);
  if (*tag == t->h0 + 1) return;
  const size_t n = p->pack_keys;
  const void *k = blk_row(t, t->io->k, s->k, 0, t->h0), *v = blk_row(t, t->io->v, s->v, 0, t->h0);
  float *pk = t->ws + p->wl.pk, *pv = t->ws + p->wl.pv;
  if (p->kv_type == ATTN_F32) {
    for (size_t j = 0; j < n; j++) {
      memcpy(pk + j * s->d, (const float *)k + j * s->k.row_stride, s->d * sizeof(float));
      memcpy(pv + j * s->dv, (const float *)v + j * s->v.row_stride, s->dv * sizeof(float));
    }
  } else {
    blk_convert(t, 0, 0, n, t->h0, pk);
    blk_convert(t, 1, 0, n, t->h0, pv);
  }
  *tag = t->h0 + 1;
}

/* Rows [j0, j0 + jn) of key (value 0) or value (value 1) head h as fp32: from the worker's packed
 * rows where they hold them (*ld: d or dv); else in place for fp32 (*ld: the layout's row
 * stride), converted by the path's conversion kernel into the scratch at wl.kc / wl.vc (bc x w
 * floats, *ld = w) for half and int8 types. */
const float *attn_blk_kv(const blk_task *t, int value, int64_t j0, size_t jn, size_t h, size_t *ld) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t w = value ? s->dv : s->d;
  if (p->pack && j0 >= 0 && (size_t)j0 + jn <= p->pack_keys && *blk_pack_tag(t) == h + 1) {
    *ld = w;
    return t->ws + (value ? p->wl.pv : p->wl.pk) + (size_t)j0 * w;
  }
  if (p->kv_type == ATTN_F32) {
    const attn_layout l = value ? s->v : s->k;
    *ld = l.row_stride;
    return blk_row(t, value ? t->io->v : t->io->k, l, j0, h);
  }
  float *dst = t->ws + (value ? p->wl.vc : p->wl.kc);
  blk_convert(t, value, j0, jn, h, dst);
  *ld = w;
  return dst;
}

/* ST (jn x n, row stride ldst) = K_blk B for keys [j0, j0 + jn) of key head h, B (d x n, row
 * stride ldb): K read in place (fp32), or converted BLK_HALF_K_KEYS keys at a time into the K
 * scratch, each chunk's rows of ST at once (the rows of a GEMM are independent: the same result). */
void attn_blk_scores(const blk_task *t, int64_t j0, size_t jn, size_t h, size_t n, const float *b, size_t ldb,
                     float *st, size_t ldst) {
  const attn_shape *s = t->p->shape;
  const size_t step = t->p->kv_type != ATTN_F32 ? BLK_HALF_K_KEYS : jn;
  for (size_t a = 0; a < jn; a += step) {
    const size_t cn = attn_min_sz(step, jn - a);
    size_t ldk;
    const float *kb = attn_blk_kv(t, 0, j0 + (int64_t)a, cn, h, &ldk);
    t->uk->gemm(cn, n, s->d, kb, ldk, 1, b, ldb, st + a * ldst, ldst, NULL, 0);
  }
}
