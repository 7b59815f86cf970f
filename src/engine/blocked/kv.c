/* The blocked engine's K/V access: rows in place, packed per worker (attn_blk_pack), converted from fp16 /
 * bf16 / int8 into scratch, and the scores of a key block (K_blk times the packed queries). */
#include "engine/blocked/internal.h"

/* Which key head the worker's packed K and V hold (attn_blk_pack): that head + 1, 0 for none
 * (reset by the schedule at every call, and a batch's whenever a worker changes sequence). */
static size_t *blk_pack_tag(const blk_task *t) { return (size_t *)(void *)(t->ws + t->p->wl.ptag); }
static int blk_packed(const blk_task *t, size_t h) { return *blk_pack_tag(t) == h + 1; }

/* Rows [j0, j0 + n) of key (value 0) or value (value 1) head h into dst (n x w floats, w = d or
 * dv), run by run of each page: copied (fp32), or the path's half, int8 (with each row's scale)
 * or q8_0 kernel. Rows are converted one by one: the same values however the runs fall. */
static void blk_convert(const blk_task *t, int value, int64_t j0, size_t n, size_t h, float *dst) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const attn_layout l = value ? s->v : s->k;
  const size_t w = value ? s->dv : s->d;
  for (size_t a = 0, run; a < n; a += run) {
    const int64_t j = j0 + (int64_t)a;
    const void *row = blk_kv_row(t, value, j, h, &run);
    run = attn_min_sz(run, n - a);
    float *out = dst + a * w;
    if (p->kv_type == ATTN_F32) {
      for (size_t r = 0; r < run; r++) memcpy(out + r * w, (const float *)row + r * l.row_stride, w * sizeof(float));
    } else if (p->kv_type == ATTN_I8) {
      t->uk->i8_cvt(run, w, row, l.row_stride, blk_scale(t, value, j, h), t->io->scales.row_stride, out);
    } else if (p->kv_type == ATTN_Q8_0) {
      t->uk->q8_cvt(run, w, row, l.row_stride, out);
    } else {
      p->kv.to_f32(run, w, row, l.row_stride, out);
    }
  }
}

/* Pack keys [0, pack_keys) of the task's key head into the worker's scratch (fp32, rows of d and
 * dv floats), unless it holds them already (a plan with p->pack: one key head per task). */
void attn_blk_pack(const blk_task *t) {
  const attn_blocked_plan *p = t->p;
  if (blk_packed(t, t->h0)) return;
  blk_convert(t, 0, 0, p->pack_keys, t->h0, t->ws + p->wl.pk);
  blk_convert(t, 1, 0, p->pack_keys, t->h0, t->ws + p->wl.pv);
  *blk_pack_tag(t) = t->h0 + 1;
}

/* Rows [j0, j0 + jn) of key (value 0) or value (value 1) head h as fp32: from the worker's packed
 * rows where they hold them (*ld: d or dv); else in place for fp32 rows in one run (*ld: the
 * layout's row stride); else (half and int8 types, fp32 rows across pages) converted or copied
 * into the scratch at wl.kc / wl.vc (bc x w floats, *ld = w). */
const float *attn_blk_kv(const blk_task *t, int value, int64_t j0, size_t jn, size_t h, size_t *ld) {
  const attn_blocked_plan *p = t->p;
  const attn_shape *s = p->shape;
  const size_t w = value ? s->dv : s->d;
  if (p->pack && j0 >= 0 && (size_t)j0 + jn <= p->pack_keys && blk_packed(t, h)) {
    *ld = w;
    return t->ws + (value ? p->wl.pv : p->wl.pk) + (size_t)j0 * w;
  }
  size_t run;
  const void *row = blk_kv_row(t, value, j0, h, &run);
  if (p->kv_type == ATTN_F32 && run >= jn) {
    *ld = (value ? s->v : s->k).row_stride;
    return row;
  }
  float *dst = t->ws + (value ? p->wl.vc : p->wl.kc);
  blk_convert(t, value, j0, jn, h, dst);
  *ld = w;
  return dst;
}

/* ST (jn x n, row stride ldst) = K_blk B for keys [j0, j0 + jn) of key head h, B (d x n, row
 * stride ldb): K read in place (fp32), or converted BLK_HALF_K_KEYS keys at a time into the K
 * scratch, each chunk's rows of ST at once, a chunk never across pages (the rows of a GEMM are
 * independent: the same result however they are cut). */
void attn_blk_scores(const blk_task *t, int64_t j0, size_t jn, size_t h, size_t n, const float *b, size_t ldb,
                     float *st, size_t ldst) {
  const attn_shape *s = t->p->shape;
  const size_t step = t->p->kv_type != ATTN_F32 ? BLK_HALF_K_KEYS : jn;
  for (size_t a = 0, run; a < jn; a += attn_min_sz(step, attn_min_sz(run, jn - a))) {
    (void)blk_kv_row(t, 0, j0 + (int64_t)a, h, &run); /* a chunk within one page: read in place */
    const size_t cn = attn_min_sz(step, attn_min_sz(run, jn - a));
    size_t ldk;
    const float *kb = attn_blk_kv(t, 0, j0 + (int64_t)a, cn, h, &ldk);
    t->uk->gemm(cn, n, s->d, kb, ldk, 1, b, ldb, st + a * ldst, ldst, NULL, 0);
  }
}
