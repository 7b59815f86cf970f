/*
 * Batched softmax attention (attn_softmax_batch, 0.9.0), per ISA path: varlen batches of
 * prefills, chunked prefills over a cached prefix, decode steps and speculative blocks, K/V
 * contiguous per sequence or in pages of a shared pool (token-major and head-major pages, page
 * sizes that cut few_pv's runs of keys and key blocks anywhere), every K/V type, the options,
 * key ranges spread over threads or run on one worker; bad batches. Part of the kv_half
 * executable (its main lists these rows).
 *
 * Inputs: each sequence's K and V rows drawn as floats and stored in the case's type (the
 * library's converters for fp16 / bf16; int8 quantised here with a scale per (token, head);
 * q8_0 with an fp16 block scale), with their float twins (the dequantised values). The pool's
 * spare pages, the unused table entries (-1) and the rows after the contiguous sequences hold NaN
 * patterns (bytes 0xff: a NaN float, fp16, bf16 or q8_0 scale; NaN int8 scales), so a row read
 * from the wrong place poisons the output.
 * Checks, per case:
 *   - bit for bit against attn_softmax on each sequence alone (its keys contiguous, head-major
 *     where the pages are, no threads): attn.h promises that call's bits for any pages and thread
 *     count (NaN compares as NaN);
 *   - each sequence against the float64 reference of its twins with the softmax suite's bounds;
 *   - the rows no sequence holds, the guards and the inputs untouched.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv_tests.h"
#include "test_util.h"
#include "tolerances.h"

#define UNB ATTN_UNBOUNDED
enum { MAXB = 4, SPARE_ROWS = 2, SPARE_PAGES = 3, GAP_ROWS = 3 };
typedef enum { CONTIG, PAGED_TOKEN, PAGED_HEAD } kv_store;
typedef struct pg_case {
  const char *name;
  size_t B, nq[MAXB], nkv[MAXB];
  size_t h_q, h_kv, d, dv;
  attn_dtype ty;
  size_t left, right;
  kv_store store;
  size_t page;    /* tokens per page (paged) */
  size_t threads; /* the batch on a pool of this many workers (0: none) */
  int opts;       /* sinks, ALiBi, soft cap and a bias (GAU: a two-sided bias table) */
  float qs;       /* query scale: large logits */
  int gau;        /* attn_gau_batch instead of attn_softmax_batch */
} pg_case;

/* clang-format off */
static const pg_case pg_cases[] = {
  /* name, B, n_q, n_kv, h_q, h_kv, d, dv, type, left, right, store, page, threads, opts, qs, gau */
  {"decode paged", 4, {1, 1, 1, 1}, {300, 17, 1000, 64}, 8, 2, 64, 64, ATTN_F32, UNB, 0, PAGED_TOKEN, 16, 0, 0, 1, 0},
  {"decode paged threads", 4, {1, 1, 1, 1}, {300, 17, 1000, 64}, 8, 8, 32, 32, ATTN_F32, UNB, 0, PAGED_TOKEN, 16, 3,
   0, 1, 0},
  {"decode head-major page 5", 3, {1, 1, 1}, {101, 7, 260}, 4, 4, 32, 24, ATTN_F32, UNB, 0, PAGED_HEAD, 5, 0, 0, 4, 0},
  {"prefill varlen gqa", 4, {37, 0, 70, 5}, {37, 9, 100, 400}, 4, 2, 24, 13, ATTN_F32, UNB, 0, CONTIG, 0, 2, 0, 1, 0},
  {"chunked prefill f16 window", 2, {40, 3}, {250, 90}, 4, 2, 32, 32, ATTN_F16, 60, 0, PAGED_TOKEN, 32, 2, 0, 1, 0},
  {"verify i8 page 7", 3, {4, 6, 1}, {500, 300, 77}, 8, 2, 32, 32, ATTN_I8, UNB, 0, PAGED_TOKEN, 7, 3, 0, 1, 0},
  {"decode q8_0 head-major", 2, {1, 2}, {400, 129}, 4, 2, 64, 32, ATTN_Q8_0, UNB, 0, PAGED_HEAD, 16, 0, 0, 1, 0},
  {"options paged", 2, {3, 20}, {130, 60}, 4, 2, 16, 16, ATTN_F32, UNB, 0, PAGED_TOKEN, 16, 2, 1, 1, 0},
  {"prefill packed pages", 2, {530, 600}, {530, 700}, 2, 1, 16, 16, ATTN_BF16, UNB, 0, PAGED_TOKEN, 64, 2, 0, 1, 0},
  {"key ranges spread", 2, {1, 1}, {9000, 5000}, 4, 2, 16, 16, ATTN_BF16, UNB, 0, CONTIG, 0, 3, 0, 1, 0},
  {"key ranges per worker", 3, {1, 2, 1}, {9000, 5000, 4100}, 4, 2, 16, 16, ATTN_F16, UNB, 0, PAGED_HEAD, 48, 2, 0, 1,
   0},
  {"gau decode paged", 4, {1, 1, 1, 1}, {300, 17, 1000, 64}, 8, 2, 64, 64, ATTN_F16, UNB, 0, PAGED_TOKEN, 16, 0, 0, 1,
   1},
  {"gau chunked table head-major", 3, {30, 1, 7}, {200, 90, 7}, 4, 2, 32, 24, ATTN_BF16, UNB, 0, PAGED_HEAD, 7, 2, 1,
   1, 1},
  {"gau prefill varlen window", 3, {37, 0, 70}, {37, 9, 100}, 4, 4, 16, 16, ATTN_F32, 20, 3, CONTIG, 0, 3, 0, 1, 1},
};
/* clang-format on */
#define PG_NCASES (sizeof pg_cases / sizeof pg_cases[0])

/* Bytes of one stored element of a type (a q8_0 element: a block of 32 values). */
static size_t el_bytes(attn_dtype ty) {
  return ty == ATTN_F32 ? 4 : ty == ATTN_F16 || ty == ATTN_BF16 ? 2 : ty == ATTN_I8 ? 1 : 34;
}
static size_t el_width(attn_dtype ty, size_t w) { return ty == ATTN_Q8_0 ? w / 32 : w; }

static int8_t q_of(float x, float s) {
  const double r = s == 0.0f ? 0.0 : nearbyint((double)x / (double)s);
  return (int8_t)(r > 127.0 ? 127 : r < -128.0 ? -128 : r);
}

/* One row of w floats x stored as type ty into dst (el_width elements), x replaced by its twin;
 * *scale: ATTN_I8's row scale. */
static void store_row(attn_dtype ty, float *x, size_t w, unsigned char *dst, float *scale) {
  if (ty == ATTN_F32) {
    memcpy(dst, x, w * sizeof(float));
  } else if (ty == ATTN_F16 || ty == ATTN_BF16) {
    uint16_t *h = (uint16_t *)(void *)dst;
    ck_assert_int_eq(ty == ATTN_F16 ? attn_f32_to_f16(x, h, w) : attn_f32_to_bf16(x, h, w), ATTN_OK);
    ck_assert_int_eq(ty == ATTN_F16 ? attn_f16_to_f32(h, x, w) : attn_bf16_to_f32(h, x, w), ATTN_OK);
  } else if (ty == ATTN_I8) {
    float amax = 0.0f;
    for (size_t e = 0; e < w; e++) amax = fmaxf(amax, fabsf(x[e]));
    const float s = amax / 127.0f;
    *scale = s;
    for (size_t e = 0; e < w; e++) {
      const int8_t q = q_of(x[e], s);
      dst[e] = (unsigned char)q;
      x[e] = s * (float)q;
    }
  } else { /* q8_0 */
    for (size_t b0 = 0; b0 < w; b0 += 32) {
      float amax = 0.0f;
      for (size_t e = b0; e < b0 + 32; e++) amax = fmaxf(amax, fabsf(x[e]));
      const float want = amax / 127.0f;
      uint16_t hb;
      float s;
      ck_assert_int_eq(attn_f32_to_f16(&want, &hb, 1), ATTN_OK);
      ck_assert_int_eq(attn_f16_to_f32(&hb, &s, 1), ATTN_OK);
      unsigned char *blk = dst + b0 / 32 * 34;
      memcpy(blk, &hb, 2);
      for (size_t e = b0; e < b0 + 32; e++) {
        const int8_t q = q_of(x[e], s);
        blk[2 + e - b0] = (unsigned char)q;
        x[e] = s * (float)q;
      }
    }
  }
}

/* One sequence: q, and K / V twins (token-major, floats) and stored rows (contiguous: the
 * per-sequence call's own K/V, in the pool's layout of heads: seq_row) with ATTN_I8 scales. */
typedef struct pg_seq {
  tu_tensor q, k, v;
  unsigned char *ks, *vs;
  float *ksc, *vsc;
} pg_seq;

/* The stored row of key j, head h of a sequence of nkv keys: head-major where the pool's pages
 * are (attn.h promises the bits of the call alone over a cache of the same layout of heads),
 * token-major otherwise. */
static size_t seq_row(const pg_case *c, size_t nkv, size_t j, size_t h) {
  return c->store == PAGED_HEAD ? h * nkv + j : j * c->h_kv + h;
}

static void seq_make(const pg_case *c, size_t b, tu_rng *r, pg_seq *s) {
  const size_t nq = c->nq[b] ? c->nq[b] : 1, nkv = c->nkv[b];
  tu_tensor_alloc(&s->q, TU_TOKEN_MAJOR, nq, c->h_q, c->d, 0);
  tu_tensor_alloc(&s->k, TU_TOKEN_MAJOR, nkv, c->h_kv, c->d, 0);
  tu_tensor_alloc(&s->v, TU_TOKEN_MAJOR, nkv, c->h_kv, c->dv, 0);
  tu_tensor_fill(&s->q, r, -c->qs, c->qs);
  tu_tensor_fill(&s->k, r, -1.0f, 1.0f);
  tu_tensor_fill(&s->v, r, -1.0f, 1.0f);
  const size_t kb = el_width(c->ty, c->d) * el_bytes(c->ty), vb = el_width(c->ty, c->dv) * el_bytes(c->ty);
  s->ks = malloc(nkv * c->h_kv * kb), s->vs = malloc(nkv * c->h_kv * vb);
  s->ksc = malloc(nkv * c->h_kv * sizeof(float)), s->vsc = malloc(nkv * c->h_kv * sizeof(float));
  ck_assert(s->ks && s->vs && s->ksc && s->vsc);
  for (size_t j = 0; j < nkv; j++)
    for (size_t h = 0; h < c->h_kv; h++) {
      const size_t e = seq_row(c, nkv, j, h);
      store_row(c->ty, tu_at(&s->k, j, h, 0), c->d, s->ks + e * kb, s->ksc + e);
      store_row(c->ty, tu_at(&s->v, j, h, 0), c->dv, s->vs + e * vb, s->vsc + e);
    }
}

static void seq_free(pg_seq *s) {
  tu_tensor_free(&s->q), tu_tensor_free(&s->k), tu_tensor_free(&s->v);
  free(s->ks), free(s->vs), free(s->ksc), free(s->vsc);
}

/* The batch's K/V: contiguous (sequences GAP_ROWS apart) or pages of a pool in shuffled order. */
typedef struct pg_store {
  unsigned char *k, *v;
  float *ksc, *vsc;
  attn_layout kl, vl, sl; /* rows and heads (within a page) in elements; scales in floats */
  size_t kv_off[MAXB + 1], lens[MAXB];
  int32_t *table;
  size_t stride, pages, kps, vps, sps, rows; /* rows: contiguous K/V rows, or page_size */
} pg_store;

/* Element offset of key j, head h of sequence b (its page's from the table), and its scale's. */
static size_t at_el(const pg_case *c, const pg_store *p, size_t b, size_t j, size_t h, int value, size_t *sc) {
  const attn_layout l = value ? p->vl : p->kl;
  if (c->store == CONTIG) {
    const size_t row = p->kv_off[b] + j;
    *sc = row * p->sl.row_stride + h;
    return row * l.row_stride + h * l.head_stride;
  }
  const size_t pg = (size_t)p->table[b * p->stride + j / c->page], o = j % c->page;
  *sc = pg * p->sps + o * p->sl.row_stride + h;
  return pg * (value ? p->vps : p->kps) + o * l.row_stride + h * l.head_stride;
}

static void store_make(const pg_case *c, pg_seq *seqs, tu_rng *r, pg_store *p) {
  memset(p, 0, sizeof *p);
  const size_t wk = el_width(c->ty, c->d), wv = el_width(c->ty, c->dv), eb = el_bytes(c->ty), P = c->page;
  size_t k_el, v_el, s_n;
  if (c->store == CONTIG) {
    for (size_t b = 0; b < c->B; b++) p->kv_off[b + 1] = p->kv_off[b] + c->nkv[b];
    p->rows = p->kv_off[c->B] + GAP_ROWS; /* rows past the last sequence: NaN */
    p->kl = (attn_layout){c->h_kv * wk, wk}, p->vl = (attn_layout){c->h_kv * wv, wv};
    k_el = p->rows * c->h_kv * wk, v_el = p->rows * c->h_kv * wv;
  } else {
    size_t need = 0;
    for (size_t b = 0; b < c->B; b++) {
      const size_t n = (c->nkv[b] + P - 1) / P;
      need += n, p->stride = n + 2 > p->stride ? n + 2 : p->stride;
    }
    p->pages = need + SPARE_PAGES, p->rows = P;
    p->table = malloc(c->B * p->stride * sizeof(int32_t));
    int32_t *perm = malloc(p->pages * sizeof(int32_t));
    ck_assert(p->table && perm);
    for (size_t i = 0; i < p->pages; i++) perm[i] = (int32_t)i;
    for (size_t i = p->pages - 1; i > 0; i--) { /* shuffled: pages out of order */
      const size_t j = tu_rng_next(r) % (i + 1);
      const int32_t t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    for (size_t e = 0; e < c->B * p->stride; e++) p->table[e] = -1; /* never read */
    for (size_t b = 0, next = 0; b < c->B; b++)
      for (size_t i = 0; i < (c->nkv[b] + P - 1) / P; i++) p->table[b * p->stride + i] = perm[next++];
    free(perm);
    if (c->store == PAGED_TOKEN)
      p->kl = (attn_layout){c->h_kv * wk, wk}, p->vl = (attn_layout){c->h_kv * wv, wv};
    else
      p->kl = (attn_layout){wk, P * wk}, p->vl = (attn_layout){wv, P * wv};
    p->kps = P * c->h_kv * wk, p->vps = P * c->h_kv * wv, p->sps = P * c->h_kv;
    k_el = p->pages * p->kps, v_el = p->pages * p->vps;
  }
  p->sl = (attn_layout){c->h_kv, 1};
  s_n = (c->store == CONTIG ? p->rows : p->pages * P) * c->h_kv;
  p->k = malloc(k_el * eb), p->v = malloc(v_el * eb);
  p->ksc = malloc(s_n * sizeof(float)), p->vsc = malloc(s_n * sizeof(float));
  ck_assert(p->k && p->v && p->ksc && p->vsc);
  memset(p->k, 0xff, k_el * eb), memset(p->v, 0xff, v_el * eb); /* NaN in every type */
  for (size_t e = 0; e < s_n; e++) p->ksc[e] = p->vsc[e] = NAN;
  for (size_t b = 0; b < c->B; b++) {
    p->lens[b] = c->nkv[b];
    for (size_t j = 0; j < c->nkv[b]; j++)
      for (size_t h = 0; h < c->h_kv; h++) {
        size_t sk, sv;
        const size_t ek = at_el(c, p, b, j, h, 0, &sk), ev = at_el(c, p, b, j, h, 1, &sv),
                     e = seq_row(c, c->nkv[b], j, h);
        memcpy(p->k + ek * eb, seqs[b].ks + e * wk * eb, wk * eb);
        memcpy(p->v + ev * eb, seqs[b].vs + e * wv * eb, wv * eb);
        p->ksc[sk] = seqs[b].ksc[e], p->vsc[sv] = seqs[b].vsc[e];
      }
  }
}

static void store_free(pg_store *p) { free(p->k), free(p->v), free(p->ksc), free(p->vsc), free(p->table); }

/* got and want equal: same bits, or both NaN. */
static void same_bits(const char *what, const char *name, const float *got, const float *want, size_t n) {
  for (size_t e = 0; e < n; e++) {
    if (isnan(got[e]) && isnan(want[e])) continue;
    ck_assert_msg(memcmp(got + e, want + e, sizeof(float)) == 0, "%s %s: element %zu: batch %a, alone %a", name, what,
                  e, (double)got[e], (double)want[e]);
  }
}

/* The options of a case (one array of each, shared by every sequence). */
typedef struct pg_opts {
  float sinks[8], slopes[8];
  float *bias;
  attn_layout bl;
} pg_opts;

static void opts_apply(const pg_case *c, pg_opts *op, attn_softmax_desc *d, size_t q0) {
  if (!c->opts) return;
  d->sinks = op->sinks, d->alibi_slopes = op->slopes, d->softcap = 9.0f;
  d->bias = op->bias + q0 * op->bl.row_stride, d->bias_layout = op->bl;
}

/* GAU's descriptor of a case (n_q rows over n_kv keys of the case's type and layouts). */
static const float gau_table[] = {0.3f, -0.2f, 0.1f, 0.05f, -0.4f, 0.25f, 0.0f, -0.1f, 0.2f};
static attn_gau_desc gau_desc(const pg_case *c, size_t n_q, size_t n_kv, attn_layout kl, attn_layout vl) {
  attn_gau_desc g;
  ck_assert_int_eq(attn_gau_desc_init(&g, n_q, n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  g.mask = attn_mask_window(c->left, c->right);
  g.shape.kv_type = c->ty, g.shape.k = kl, g.shape.v = vl;
  if (c->opts) g.bias = ATTN_GAU_BIAS_TWO_SIDED, g.bias_table = gau_table, g.bias_len = 5;
  return g;
}

/* GAU: sequence b's o (rows at got, [n_q][h_q][dv]) against the float64 reference of its twins. */
static void gau_reference(const pg_case *c, pg_seq *s, size_t b, const float *got) {
  attn_gau_desc g = gau_desc(c, c->nq[b], c->nkv[b], s->k.l, s->v.l);
  g.shape.kv_type = ATTN_F32;
  const ref_gau_problem p = tu_gau_problem(&g, &s->q, &s->k, &s->v);
  const size_t count = c->nq[b] * c->h_q * c->dv;
  double *ro = malloc(sizeof(double) * count * 6);
  ck_assert_ptr_nonnull(ro);
  double *os = ro + count, *oa = os + count, *on = oa + count, *sc = on + count, *tol = sc + count;
  ref_gau(&p, ro, os, oa, on);
  for (size_t e = 0; e < count; e++) {
    sc[e] = os[e] > 0.0 ? os[e] : 1.0;
    tol[e] = tol_gau_bound(c->nkv[b], c->d, os[e], oa[e], on[e]) / sc[e];
  }
  tu_tensor t = {
      .data = (float *)got, .n = c->nq[b], .h = c->h_q, .w = c->dv, .l = {c->h_q * c->dv, c->dv}, .span = count};
  tu_compare("kv_paged.gau.o", c->name, &t, ro, sc, tol);
  free(ro);
}

START_TEST(kv_paged_batch) {
  const pg_case *c = &pg_cases[_i];
  tu_rng rng = tu_rng_of(0x9a6e + (uint64_t)_i);
  pg_seq seqs[MAXB];
  size_t q_off[MAXB + 1] = {0}, max_kv = 0;
  for (size_t b = 0; b < c->B; b++) {
    seq_make(c, b, &rng, &seqs[b]);
    q_off[b + 1] = q_off[b] + c->nq[b];
    max_kv = c->nkv[b] > max_kv ? c->nkv[b] : max_kv;
  }
  const size_t N = q_off[c->B], rows = N + SPARE_ROWS, H = c->h_q, DV = c->dv;
  pg_opts op = {.bl = {H * max_kv, max_kv}};
  for (size_t h = 0; h < 8; h++) op.sinks[h] = 0.3f * (float)h - 1.0f, op.slopes[h] = 0.05f * (float)(h + 1);
  op.bias = malloc(sizeof(float) * rows * H * max_kv);
  ck_assert_ptr_nonnull(op.bias);
  for (size_t e = 0; e < rows * H * max_kv; e++) op.bias[e] = tu_rng_range(&rng, -2.0f, 2.0f);
  pg_store st;
  store_make(c, seqs, &rng, &st);

  /* the packed queries, and each sequence alone */
  float *q = malloc(sizeof(float) * rows * H * c->d), *want = malloc(sizeof(float) * rows * H * DV);
  float *want_lse = malloc(sizeof(float) * rows * H);
  ck_assert(q && want && want_lse);
  for (size_t e = 0; e < rows * H * c->d; e++) q[e] = 0.0f;
  for (size_t b = 0; b < c->B; b++) {
    if (!c->nq[b]) continue;
    memcpy(q + q_off[b] * H * c->d, seqs[b].q.data, c->nq[b] * H * c->d * sizeof(float));
    const size_t wk = el_width(c->ty, c->d), wv = el_width(c->ty, c->dv), n = c->nkv[b];
    const int hm = c->store == PAGED_HEAD; /* seq_row's layout */
    const attn_layout kl = hm ? (attn_layout){wk, n * wk} : (attn_layout){c->h_kv * wk, wk},
                      vl = hm ? (attn_layout){wv, n * wv} : (attn_layout){c->h_kv * wv, wv},
                      sl = hm ? (attn_layout){1, n} : (attn_layout){c->h_kv, 1};
    if (c->gau) {
      const attn_gau_desc g = gau_desc(c, c->nq[b], c->nkv[b], kl, vl);
      size_t ws = 0;
      TU_CALL_WS(attn_gau, &g, &ws);
      void *w = malloc(ws);
      ck_assert_int_eq(attn_gau(&g, seqs[b].q.data, seqs[b].ks, seqs[b].vs, want + q_off[b] * H * DV, w, ws), ATTN_OK);
      free(w);
      continue;
    }
    attn_softmax_desc d;
    ck_assert_int_eq(attn_softmax_desc_init(&d, c->nq[b], c->nkv[b], H, c->h_kv, c->d, c->dv), ATTN_OK);
    d.mask = attn_mask_window(c->left, c->right);
    d.shape.kv_type = c->ty;
    d.shape.k = kl, d.shape.v = vl;
    d.k_scales = seqs[b].ksc, d.v_scales = seqs[b].vsc, d.scale_layout = sl;
    opts_apply(c, &op, &d, q_off[b]);
    size_t ws = 0;
    TU_CALL_WS(attn_softmax, &d, &ws);
    void *w = malloc(ws);
    ck_assert_int_eq(attn_softmax(&d, seqs[b].q.data, seqs[b].ks, seqs[b].vs, want + q_off[b] * H * DV,
                                  want_lse + q_off[b] * H, w, ws),
                     ATTN_OK);
    free(w);
  }

  /* the batch */
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, rows, st.rows, H, c->h_kv, c->d, c->dv), ATTN_OK);
  d.mask = attn_mask_window(c->left, c->right);
  d.shape.kv_type = c->ty;
  d.shape.k = st.kl, d.shape.v = st.vl;
  d.k_scales = st.ksc, d.v_scales = st.vsc, d.scale_layout = st.sl;
  opts_apply(c, &op, &d, 0);
  attn_batch bt;
  ck_assert_int_eq(attn_batch_init(&bt), ATTN_OK);
  bt.count = c->B, bt.q_offsets = q_off;
  if (c->store == CONTIG) {
    bt.kv_offsets = st.kv_off;
  } else {
    bt.kv_lens = st.lens, bt.page_table = st.table, bt.table_stride = st.stride, bt.page_size = c->page;
    bt.pages = st.pages, bt.k_page_stride = st.kps, bt.v_page_stride = st.vps, bt.scale_page_stride = st.sps;
  }
  attn_pool *pool = NULL;
  attn_threads th;
  if (c->threads) {
    ck_assert_int_eq(attn_pool_create(c->threads, &pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
    d.shape.threads = &th;
  }
  attn_gau_desc g = gau_desc(c, rows, st.rows, st.kl, st.vl);
  g.shape.threads = d.shape.threads;
  size_t wsb = 0;
  ck_assert_int_eq(
      c->gau ? attn_gau_batch_workspace_size(&g, &bt, &wsb) : attn_softmax_batch_workspace_size(&d, &bt, &wsb),
      ATTN_OK);
  void *w = tu_alloc(wsb, 0);
  float *o = tu_alloc(sizeof(float) * rows * H * DV, 0), *lse = tu_alloc(sizeof(float) * rows * H, 0);
  tu_fill_sentinel(o, rows * H * DV), tu_fill_sentinel(lse, rows * H);
  for (size_t less = 1; less < 2; less--) { /* one byte short of the workspace, then enough */
    const attn_status got = c->gau ? attn_gau_batch(&g, &bt, q, st.k, st.v, o, w, wsb - less)
                                   : attn_softmax_batch(&d, &bt, q, st.k, st.v, o, lse, w, wsb - less);
    ck_assert_int_eq(got, less ? ATTN_E_WORKSPACE_TOO_SMALL : ATTN_OK);
  }
  attn_pool_destroy(pool);
  tu_assert_guards("batch workspace", w), tu_assert_guards("batch o", o), tu_assert_guards("batch lse", lse);
  same_bits("o", c->name, o, want, N * H * DV);
  if (!c->gau) same_bits("lse", c->name, lse, want_lse, N * H);
  const float sent = tu_sentinel();
  for (size_t e = N * H * DV; e < rows * H * DV; e++)
    ck_assert_msg(memcmp(o + e, &sent, sizeof sent) == 0, "%s: o[%zu] past the batch's rows written", c->name, e);

  /* each sequence against the float64 reference of its twins */
  for (size_t b = 0; b < c->B; b++) {
    if (!c->nq[b]) continue;
    if (c->gau) {
      gau_reference(c, &seqs[b], b, o + q_off[b] * H * DV);
      continue;
    }
    attn_softmax_desc db;
    ck_assert_int_eq(attn_softmax_desc_init(&db, c->nq[b], c->nkv[b], H, c->h_kv, c->d, c->dv), ATTN_OK);
    db.mask = attn_mask_window(c->left, c->right);
    opts_apply(c, &op, &db, q_off[b]);
    tu_softmax_ref ref;
    tu_softmax_ref_compute(&db, &seqs[b].q, &seqs[b].k, &seqs[b].v, &ref);
    const size_t n = c->nq[b] * H;
    tu_tensor got = {.data = o + q_off[b] * H * DV, .n = c->nq[b], .h = H, .w = DV, .l = {H * DV, DV}, .span = n * DV};
    double *tol = malloc(sizeof(double) * n * DV), *one = malloc(sizeof(double) * n);
    ck_assert(tol && one);
    for (size_t r = 0; r < n; r++)
      for (size_t e = 0; e < DV; e++) tol[r * DV + e] = tol_softmax_o(c->nkv[b], c->d, ref.sabs[r]);
    tu_compare("kv_paged.o", c->name, &got, ref.o, ref.oscale, tol);
    tu_tensor gl = {.data = lse + q_off[b] * H, .n = c->nq[b], .h = H, .w = 1, .l = {H, 1}, .span = n};
    for (size_t r = 0; r < n; r++)
      one[r] = 1.0, tol[r] = tol_softmax_lse(c->nkv[b], c->d, ref.sabs[r], isfinite(ref.lse[r]) ? ref.lse[r] : 0);
    tu_compare("kv_paged.lse", c->name, &gl, ref.lse, one, tol);
    free(tol), free(one);
    tu_softmax_ref_free(&ref);
  }
  tu_free(w), tu_free(o), tu_free(lse);
  free(q), free(want), free(want_lse), free(op.bias);
  store_free(&st);
  for (size_t b = 0; b < c->B; b++) seq_free(&seqs[b]);
}
END_TEST

/* Bad batches: a status, nothing written. A valid paged decode of two sequences, then each row's
 * fault (a field of the batch or the descriptor set to a value; SIZE_MAX: unchanged). */
enum { BD_H = 2, BD_D = 8, BD_P = 4, BD_PAGES = 4 };
typedef enum {
  F_NONE,
  F_COUNT,
  F_QOFF_NULL,
  F_TABLE_NULL,
  F_TABLE1,
  F_STRIDE,
  F_NKV,
  F_QOFF1,
  F_QOFF2,
  F_LEN1,
  F_CONTIG,
  F_PAGES,
  F_O_IN_POOL,
  F_O_ON_TABLE,
  F_KPS
} bd_field;
static const struct {
  bd_field field;
  long long value;
  attn_status want;
} bd_rows[] = {
    {F_NONE, 0, ATTN_OK},
    {F_COUNT, 0, ATTN_E_ZERO_SIZE},
    {F_QOFF_NULL, 0, ATTN_E_NULL_POINTER},
    {F_TABLE_NULL, 0, ATTN_E_NULL_POINTER},
    {F_TABLE1, BD_PAGES, ATTN_E_BAD_ARGUMENT}, /* a page past the pool */
    {F_TABLE1, -1, ATTN_E_BAD_ARGUMENT},       /* a negative page */
    {F_STRIDE, 1, ATTN_E_BAD_ARGUMENT},        /* a row shorter than sequence 0's 2 pages */
    {F_NKV, BD_P + 1, ATTN_E_BAD_ARGUMENT},    /* shape.n_kv not the page size */
    {F_QOFF1, 3, ATTN_E_BAD_ARGUMENT},         /* offsets decrease */
    {F_QOFF2, 5, ATTN_E_BAD_ARGUMENT},         /* past shape.n_q */
    {F_LEN1, 0, ATTN_E_ZERO_SIZE},             /* query rows without keys */
    {F_CONTIG, 0, ATTN_E_BAD_ARGUMENT},        /* contiguous offsets that decrease */
    {F_PAGES, 0, ATTN_E_ZERO_SIZE},
    {F_O_IN_POOL, 0, ATTN_E_ALIASING},
    {F_O_ON_TABLE, 0, ATTN_E_ALIASING},
    {F_KPS, (long long)(SIZE_MAX / 4), ATTN_E_SIZE_OVERFLOW}, /* the pool's span */
};
START_TEST(kv_paged_bad) {
  static float q[4 * BD_H * BD_D], o[4 * BD_H * BD_D], lse[4 * BD_H];
  static float pool[BD_PAGES * BD_P * BD_H * BD_D];
  static char ws[1 << 20];
  for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) o[i] = -7.0f;
  size_t q_off[3] = {0, 1, 2}, lens[2] = {5, 3}, kv_off[3] = {0, 2, 1};
  int32_t table[4] = {2, 0, 1, 3};
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, 4, BD_P, BD_H, BD_H, BD_D, BD_D), ATTN_OK);
  d.mask = attn_mask_causal();
  attn_batch b = {.count = 2,
                  .q_offsets = q_off,
                  .kv_lens = lens,
                  .page_table = table,
                  .table_stride = 2,
                  .page_size = BD_P,
                  .pages = BD_PAGES,
                  .k_page_stride = BD_P * BD_H * BD_D,
                  .v_page_stride = BD_P * BD_H * BD_D};
  attn_softmax_desc dd = d;
  float *po = o;
  const long long x = bd_rows[_i].value;
  const attn_status want = bd_rows[_i].want;
  switch (bd_rows[_i].field) { /* the row's one fault */
    case F_NONE:
      break;
    case F_COUNT:
      b.count = (size_t)x;
      break;
    case F_QOFF_NULL:
      b.q_offsets = NULL;
      break;
    case F_TABLE_NULL:
      b.page_table = NULL;
      break;
    case F_TABLE1:
      table[1] = (int32_t)x;
      break;
    case F_STRIDE:
      b.table_stride = (size_t)x;
      break;
    case F_NKV:
      dd.shape.n_kv = (size_t)x;
      break;
    case F_QOFF1:
      q_off[1] = (size_t)x;
      break;
    case F_QOFF2:
      q_off[2] = (size_t)x;
      break;
    case F_LEN1:
      lens[1] = (size_t)x;
      break;
    case F_CONTIG:
      b.page_size = 0, b.kv_offsets = kv_off;
      break;
    case F_PAGES:
      b.pages = (size_t)x;
      break;
    case F_O_IN_POOL:
      po = pool + 8;
      break;
    case F_O_ON_TABLE:
      po = (float *)(void *)table;
      break;
    case F_KPS:
      b.k_page_stride = (size_t)x;
      break;
  }
  unsigned char before[sizeof o];
  memcpy(before, po == o ? (void *)o : (void *)po, po == (float *)(void *)table ? sizeof table : sizeof before);
  const attn_status got = attn_softmax_batch(&dd, &b, q, pool, pool, po, lse, ws, sizeof ws);
  ck_assert_msg(got == want, "row %d: status %d, want %d", _i, (int)got, (int)want);
  if (want == ATTN_OK) return;
  ck_assert_msg(memcmp(before, po, po == (float *)(void *)table ? sizeof table : sizeof before) == 0,
                "row %d: o written", _i);
  size_t bytes;
  if (want != ATTN_E_ALIASING) ck_assert_int_eq(attn_softmax_batch_workspace_size(&dd, &b, &bytes), want);
  ck_assert_int_eq(attn_softmax_batch_workspace_size(&d, NULL, &bytes), ATTN_E_NULL_POINTER);
}
END_TEST

tu_entry kv_paged_row(size_t i) {
  const tu_entry rows[] = {{"paged", kv_paged_batch, (int)PG_NCASES},
                           {"paged", kv_paged_bad, (int)(sizeof bd_rows / sizeof bd_rows[0])}};
  return rows[i];
}
