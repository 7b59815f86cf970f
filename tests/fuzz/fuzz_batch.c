/*
 * libFuzzer target: attn_softmax_batch and attn_gau_batch with their workspace queries; and
 * attn_selcache_step_batch (fuzz_selcache_batch.c).
 *
 * From the bytes: the ISA path, the variant, 1-4 sequences (0-40 query rows, 1-160 keys each),
 * heads (GQA), widths, the mask, K/V contiguous or in pages (1-24 tokens, token-major or
 * head-major, shuffled, spare pages), the K/V, query and output types (fp32, fp16, bf16), threads
 * (none, or the library's pool of 2 or 3 workers), and one fault or none (a page index outside
 * the pool, a decreasing offset, one byte less of workspace). Checks: the call's status; with a
 * fault, no output byte written; otherwise every sequence's o (and softmax's LSE) bit for bit
 * that of the variant's call on that sequence alone with its keys contiguous (head-major where
 * the pages are) and no threads (as attn.h promises), and the rows no sequence holds untouched. The per-sequence calls are checked
 * against the float64 reference by the softmax and GAU targets.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_batch.h"

enum { MAXB = 4, MAX_NQ = 40, MAX_KV = 160, MAX_D = 40, SPARE = 2 };

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* One call of the variant: a sequence alone (bt NULL) or the batch. */
typedef struct fb_call {
  int gau;
  attn_softmax_desc sd;
  attn_gau_desc gd;
} fb_call;

static attn_status fb_ws(fb_call *c, const attn_batch *bt, size_t *bytes) {
  if (c->gau) return bt ? attn_gau_batch_workspace_size(&c->gd, bt, bytes) : attn_gau_workspace_size(&c->gd, bytes);
  return bt ? attn_softmax_batch_workspace_size(&c->sd, bt, bytes) : attn_softmax_workspace_size(&c->sd, bytes);
}

static attn_status fb_run(fb_call *c, const attn_batch *bt, const void *q, const void *k, const void *v, void *o,
                          float *lse, void *ws, size_t bytes) {
  if (c->gau) return bt ? attn_gau_batch(&c->gd, bt, q, k, v, o, ws, bytes) : attn_gau(&c->gd, q, k, v, o, ws, bytes);
  return bt ? attn_softmax_batch(&c->sd, bt, q, k, v, o, lse, ws, bytes)
            : attn_softmax(&c->sd, q, k, v, o, lse, ws, bytes);
}

/* The descriptor of n_q rows over n_kv keys (the shape's sizes and K/V layouts set). */
static fb_call fb_desc(int gau, const attn_shape *base, attn_mask m, size_t n_q, size_t n_kv, attn_layout kl,
                       attn_layout vl, const attn_threads *th) {
  fb_call c = {.gau = gau};
  attn_shape *s = gau ? &c.gd.shape : &c.sd.shape;
  if (gau)
    attn_gau_desc_init(&c.gd, n_q, n_kv, base->h_q, base->h_k, base->d, base->dv), c.gd.mask = m;
  else
    attn_softmax_desc_init(&c.sd, n_q, n_kv, base->h_q, base->h_k, base->d, base->dv), c.sd.mask = m;
  s->kv_type = base->kv_type, s->q_type = base->q_type, s->o_type = base->o_type;
  s->k = kl, s->v = vl, s->threads = th;
  return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  fz_begin(&in, data, size);
  const attn_dtype types[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
  const int variant = (int)fz_pick(&in, 3), gau = variant == 1;
  if (variant == 2) {
    fb_selcache(&in);
    return 0;
  }
  const size_t B = 1 + fz_pick(&in, MAXB), h_kv = 1 + fz_pick(&in, 3), h_q = h_kv * (1 + fz_pick(&in, 4));
  const size_t d = fz_size(&in, MAX_D), dv = fz_size(&in, MAX_D);
  attn_shape base;
  attn_shape_init(&base, 1, 1, h_q, h_kv, h_kv, d, dv);
  base.kv_type = types[fz_pick(&in, 3)], base.q_type = types[fz_pick(&in, 3)], base.o_type = types[fz_pick(&in, 3)];
  const attn_mask mask = fz_mask(&in, MAX_KV);
  const size_t P = fz_pick(&in, 3) ? 1 + fz_pick(&in, 24) : 0; /* tokens per page; 0: contiguous */
  const int head_major = P && fz_pick(&in, 2);
  size_t nq[MAXB], nkv[MAXB], qo[MAXB + 1] = {0}, ko[MAXB + 1] = {0}, pages = SPARE, max_pages = 1;
  for (size_t b = 0; b < B; b++) {
    nq[b] = fz_pick(&in, 4) ? fz_pick(&in, 3) : fz_size(&in, MAX_NQ); /* mostly decode steps */
    nkv[b] = fz_size(&in, MAX_KV);
    qo[b + 1] = qo[b] + nq[b], ko[b + 1] = ko[b] + nkv[b];
    if (P) pages += (nkv[b] + P - 1) / P, max_pages = max_sz(max_pages, (nkv[b] + P - 1) / P);
  }
  const size_t rows = qo[B] + 1, E = fz_float_size(base.kv_type), eq = fz_float_size(base.q_type),
               eo = fz_float_size(base.o_type);
  /* K/V: each sequence's rows token-major and contiguous, then stored in the batch's pool */
  attn_layout kl = {h_kv * d, d}, vl = {h_kv * dv, dv};
  unsigned char *ks = fz_calloc(ko[B] * h_kv * d + 1, E), *vs = fz_calloc(ko[B] * h_kv * dv + 1, E);
  fz_draw_typed(&in, base.kv_type, ks, ko[B] * h_kv * d, 1.0f);
  fz_draw_typed(&in, base.kv_type, vs, ko[B] * h_kv * dv, 1.0f);
  const size_t pk = P ? pages * P * h_kv * d : ko[B] * h_kv * d, pv = P ? pages * P * h_kv * dv : ko[B] * h_kv * dv;
  unsigned char *kp = ks, *vp = vs;
  int32_t *table = NULL;
  attn_layout pkl = kl, pvl = vl;
  if (P) {
    kp = fz_calloc(pk, E), vp = fz_calloc(pv, E), table = fz_calloc(B * max_pages, sizeof(int32_t));
    memset(kp, 0xff, pk * E), memset(vp, 0xff, pv * E); /* NaN: a misread page poisons o */
    int32_t *perm = fz_calloc(pages, sizeof(int32_t));
    for (size_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    for (size_t i = pages - 1; i > 0; i--) {
      const size_t j = fz_pick(&in, i + 1);
      const int32_t t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    if (head_major) pkl = (attn_layout){d, P * d}, pvl = (attn_layout){dv, P * dv};
    for (size_t b = 0, next = 0; b < B; b++)
      for (size_t j = 0; j < nkv[b]; j++) {
        if (j % P == 0) table[b * max_pages + j / P] = perm[next++];
        const size_t pg = (size_t)table[b * max_pages + j / P];
        for (size_t h = 0; h < h_kv; h++) {
          const size_t src = (ko[b] + j) * h_kv + h;
          memcpy(kp + (pg * P * h_kv * d + (j % P) * pkl.row_stride + h * pkl.head_stride) * E, ks + src * d * E,
                 d * E);
          memcpy(vp + (pg * P * h_kv * dv + (j % P) * pvl.row_stride + h * pvl.head_stride) * E, vs + src * dv * E,
                 dv * E);
        }
      }
    free(perm);
  }
  unsigned char *q = fz_calloc(rows * h_q * d, eq);
  fz_draw_typed(&in, base.q_type, q, rows * h_q * d, 2.0f);
  const size_t osz = rows * h_q * dv * eo;
  unsigned char *want = fz_calloc(osz, 1), *o = fz_calloc(osz, 1), *before = fz_calloc(osz, 1);
  float *wl = fz_calloc(rows * h_q, sizeof(float)), *lse = fz_calloc(rows * h_q, sizeof(float));
  memset(o, 0xa5, osz), memset(lse, 0xa5, rows * h_q * sizeof(float));
  memcpy(before, o, osz);
  /* each sequence alone, contiguous, no threads; head-major where the pages are (attn.h promises
   * the bits of a cache of the same layout of heads) */
  for (size_t b = 0; b < B; b++) {
    if (!nq[b]) continue;
    const size_t n = nkv[b];
    const unsigned char *kb = ks + ko[b] * h_kv * d * E, *vb = vs + ko[b] * h_kv * dv * E;
    unsigned char *kh = NULL, *vh = NULL;
    if (head_major) {
      kh = fz_calloc(n * h_kv * d + 1, E), vh = fz_calloc(n * h_kv * dv + 1, E);
      for (size_t j = 0; j < n; j++)
        for (size_t h = 0; h < h_kv; h++) {
          memcpy(kh + (h * n + j) * d * E, kb + (j * h_kv + h) * d * E, d * E);
          memcpy(vh + (h * n + j) * dv * E, vb + (j * h_kv + h) * dv * E, dv * E);
        }
      kb = kh, vb = vh;
    }
    fb_call c = fb_desc(gau, &base, mask, nq[b], n, head_major ? (attn_layout){d, n * d} : kl,
                        head_major ? (attn_layout){dv, n * dv} : vl, NULL);
    size_t bytes;
    fz_check_status("workspace_size (alone)", fb_ws(&c, NULL, &bytes), ATTN_OK);
    void *ws = fz_alloc(bytes, 0);
    fz_check_status(
        "alone",
        fb_run(&c, NULL, q + qo[b] * h_q * d * eq, kb, vb, want + qo[b] * h_q * dv * eo, wl + qo[b] * h_q, ws, bytes),
        ATTN_OK);
    fz_free(ws);
    free(kh), free(vh);
  }
  /* the batch */
  const size_t w = fz_pick(&in, 3);
  attn_pool *pool = NULL;
  attn_threads th;
  if (w) fz_check_status("pool_create", attn_pool_create(w + 1, &pool), ATTN_OK);
  if (w) fz_check_status("pool_threads", attn_pool_threads(pool, &th), ATTN_OK);
  fb_call c = fb_desc(gau, &base, mask, rows, P ? P : ko[B], P ? pkl : kl, P ? pvl : vl, w ? &th : NULL);
  attn_batch bt;
  attn_batch_init(&bt);
  bt.count = B, bt.q_offsets = qo;
  size_t lens[MAXB];
  if (P) {
    for (size_t b = 0; b < B; b++) lens[b] = nkv[b];
    bt.kv_lens = lens, bt.page_table = table, bt.table_stride = max_pages, bt.page_size = P, bt.pages = pages;
    bt.k_page_stride = P * h_kv * d, bt.v_page_stride = P * h_kv * dv;
  } else {
    bt.kv_offsets = ko;
  }
  size_t bytes;
  fz_check_status("batch workspace_size", fb_ws(&c, &bt, &bytes), ATTN_OK);
  void *ws = fz_alloc(bytes, fz_pick(&in, 64));
  attn_status expect = ATTN_OK;
  size_t give = bytes;
  switch (fz_pick(&in, 8)) { /* at most one fault */
    case 0:
      if (P) table[fz_pick(&in, B) * max_pages] = fz_pick(&in, 2) ? -1 : (int32_t)pages, expect = ATTN_E_BAD_ARGUMENT;
      break;
    case 1:
      if (B > 1 && qo[1] > 0) qo[1] = qo[2] + 1 > rows ? rows : qo[2] + 1, expect = ATTN_E_BAD_ARGUMENT;
      break;
    case 2:
      give = bytes - 1, expect = ATTN_E_WORKSPACE_TOO_SMALL;
      break;
    default:
      break;
  }
  const attn_status st = fb_run(&c, &bt, q, kp, vp, o, lse, ws, give);
  if (expect != ATTN_OK && st == ATTN_OK) fz_fail("batch: fault not refused");
  if (expect == ATTN_OK && st != ATTN_OK) fz_fail("batch: %s", attn_status_name(st));
  if (st != ATTN_OK) {
    if (memcmp(o, before, osz)) fz_fail("batch: o written on error %s", attn_status_name(st));
  } else {
    for (size_t e = 0; e < qo[B] * h_q * dv; e++) {
      const unsigned char *g = o + e * eo, *x = want + e * eo;
      float gf = 0, xf = 0;
      if (eo == 4) memcpy(&gf, g, 4), memcpy(&xf, x, 4);
      const int both_nan = eo == 4 ? gf != gf && xf != xf : 0;
      if (!both_nan && memcmp(g, x, eo)) fz_fail("batch o element %zu differs from the sequence's own call", e);
    }
    if (memcmp(o + qo[B] * h_q * dv * eo, before + qo[B] * h_q * dv * eo, (rows - qo[B]) * h_q * dv * eo))
      fz_fail("batch: a row past the sequences written");
    for (size_t e = 0; !gau && e < qo[B] * h_q; e++)
      if (memcmp(lse + e, wl + e, sizeof(float)) && !(lse[e] != lse[e] && wl[e] != wl[e]))
        fz_fail("batch lse %zu differs", e);
  }
  attn_pool_destroy(pool);
  fz_free(ws);
  free(q), free(want), free(o), free(before), free(wl), free(lse), free(ks), free(vs);
  if (P) free(kp), free(vp), free(table);
  return 0;
}
