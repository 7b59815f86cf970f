/*
 * Per-row statistics of the streamed kernels (attn_softmax_stats, attn_gau_stats,
 * attn_selective_stats; attn.h "Analysis"), on the ISA path named by ATTN_ISA: entropy, sparsity
 * and count against ref_row_stats_of over float64 weights computed here from q and k (selective:
 * and the reference's F, tests/ref/ref_selective.h; GAU: the reference's bias), with the bounds of
 * tests/common/tolerances.h. TCases: "reference" (the case table; every call also runs plain, and
 * o, lse and f must be the same bits), "exact" (one key, uniform rows), "properties" (decode steps
 * = prefill rows), "nonfinite" (the policy), "api" (reentrancy), "bad_input" (the shared rows and
 * the statistics' own, through the three calls: the status, nothing written).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "ref/ref_selective.h"
#include "test_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

typedef enum st_kind { SM, GAU, SEL } st_kind;
static const char *const st_names[] = {"softmax", "gau", "selective"};

typedef struct st_case {
  const char *name;
  st_kind kind;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask; /* softmax, GAU (selective is causal) */
  float scale;    /* with set_scale; otherwise the default 1/sqrt(d) */
  int set_scale;
  tu_data data;
  tu_layout_kind layout; /* inputs, outputs and the statistics' arrays */
  float beta;            /* GAU: the scalar bias */
  int table, normalize;  /* GAU: a causal bias table of n_kv floats; Su's normalisation */
  size_t h_sel;          /* selective */
  unsigned arrays;       /* the arrays passed: bit 0 entropy, 1 sparsity, 2 count (0: all) */
} st_case;

#define HEADS(q, kv) .h_q = (q), .h_kv = (kv)
#define ST(k)        .kind = (k)

/* Sizes 1, 7, 37, 97, 200 around the blocks (48 / 96 keys on SIMD paths, 32 / 64 scalar); every
 * mask kind, GQA, chunked prefill (n_q < n_kv), rows that see no key (n_q > n_kv, windows,
 * chunks at negative positions), logits to +-80 (uniform data at scale 8, d = 64) and in [90, 100]
 * (large data at scale 1), GAU rows all zero (a bias below every score), strided statistics. */
static const st_case st_cases[] = {
    /* softmax */
    {"sm_n1", ST(SM), SIZES(1, 1, 8, 8), HEADS(1, 1), .mask = FULL},
    {"sm_n7_causal", ST(SM), SIZES(7, 7, 7, 7), HEADS(1, 1), .mask = CAUSAL},
    /* key splits (attn.h, threads): the statistics' sums folded across ranges */
    {"sm_split4_decode_gqa", ST(SM), SIZES(1, 9000, 8, 8), HEADS(4, 2), .mask = CAUSAL},
    {"sm_split16_nq3_window", ST(SM), SIZES(3, 40000, 4, 4), HEADS(1, 1), .mask = WINDOW(35000, 0)},
    {"gau_split2_decode", ST(GAU), SIZES(1, 4200, 8, 8), HEADS(2, 1), .mask = CAUSAL, .normalize = 1},
    {"sm_n37_full_gqa", ST(SM), SIZES(37, 37, 16, 16), HEADS(4, 2), .mask = FULL},
    {"sm_n97_causal_padded", ST(SM), SIZES(97, 97, 64, 64), HEADS(2, 1), .mask = CAUSAL, .layout = P},
    {"sm_n200_causal", ST(SM), SIZES(200, 200, 64, 64), HEADS(1, 1), .mask = CAUSAL},
    {"sm_window_15_0", ST(SM), SIZES(200, 200, 16, 16), HEADS(2, 2), .mask = WINDOW(15, 0), .layout = H},
    {"sm_window_3_2", ST(SM), SIZES(97, 97, 8, 8), HEADS(1, 1), .mask = WINDOW(3, 2)},
    {"sm_chunk7_causal", ST(SM), SIZES(97, 97, 16, 16), HEADS(2, 1), .mask = MASK(U, 0, 7)},
    {"sm_chunk64_full_gqa", ST(SM), SIZES(130, 130, 8, 8), HEADS(4, 2), .mask = MASK(U, U, 64)},
    {"sm_chunked_37_of_200", ST(SM), SIZES(37, 200, 32, 32), HEADS(2, 1), .mask = CAUSAL},
    {"sm_decode_1_of_97", ST(SM), SIZES(1, 97, 64, 64), HEADS(4, 2), .mask = CAUSAL},
    {"sm_nq40_nkv10_causal", ST(SM), SIZES(40, 10, 16, 16), HEADS(1, 1), .mask = CAUSAL},
    {"sm_chunk3_nq_gt_nkv", ST(SM), SIZES(20, 8, 8, 8), HEADS(1, 1), .mask = MASK(U, U, 3)},
    {"sm_logits_80", ST(SM), SIZES(97, 97, 64, 64), HEADS(1, 1), .mask = CAUSAL, SCALE(8.0f)},
    {"sm_logits_90_100", ST(SM), SIZES(97, 97, 64, 64), HEADS(1, 1), .mask = FULL, SCALE(1.0f), .data = LRG},
    {"sm_entropy_only", ST(SM), SIZES(37, 37, 8, 8), HEADS(2, 2), .mask = CAUSAL, .arrays = 1},
    {"sm_sparsity_count", ST(SM), SIZES(37, 37, 8, 8), HEADS(2, 2), .mask = CAUSAL, .arrays = 6},
    /* GAU */
    {"gau_n1", ST(GAU), SIZES(1, 1, 8, 8), HEADS(1, 1), .mask = FULL, .beta = 0.5f},
    {"gau_n7_causal_su", ST(GAU), SIZES(7, 7, 7, 7), HEADS(1, 1), .mask = CAUSAL, .normalize = 1},
    {"gau_n37_full_gqa", ST(GAU), SIZES(37, 37, 16, 16), HEADS(4, 2), .mask = FULL},
    {"gau_n97_causal_table", ST(GAU), SIZES(97, 97, 64, 64), HEADS(2, 1), .mask = CAUSAL, .table = 1, .layout = P},
    {"gau_n200_causal_su", ST(GAU), SIZES(200, 200, 64, 64), HEADS(1, 1), .mask = CAUSAL, .normalize = 1},
    {"gau_window_15_0", ST(GAU), SIZES(200, 200, 16, 16), HEADS(2, 2), .mask = WINDOW(15, 0), .layout = H},
    {"gau_flash_chunk64", ST(GAU), SIZES(130, 130, 16, 16), HEADS(2, 1), .mask = MASK(U, 0, 64), SCALE(1.0f / 64),
     .table = 1},
    {"gau_chunked_37_of_200", ST(GAU), SIZES(37, 200, 32, 32), HEADS(2, 1), .mask = CAUSAL, .beta = 0.1f},
    {"gau_decode_1_of_97", ST(GAU), SIZES(1, 97, 64, 64), HEADS(4, 2), .mask = CAUSAL, .table = 1},
    {"gau_nq40_nkv10", ST(GAU), SIZES(40, 10, 16, 16), HEADS(1, 1), .mask = CAUSAL},
    {"gau_all_zero", ST(GAU), SIZES(37, 37, 16, 16), HEADS(2, 1), .mask = CAUSAL, .beta = -100.0f},
    {"gau_some_zero", ST(GAU), SIZES(97, 97, 16, 16), HEADS(2, 1), .mask = WINDOW(3, 0), .beta = -0.3f},
    {"gau_logits_80", ST(GAU), SIZES(97, 97, 64, 64), HEADS(1, 1), .mask = CAUSAL, SCALE(8.0f)},
    {"gau_wide", ST(GAU), SIZES(97, 97, 16, 16), HEADS(1, 1), .mask = FULL, .data = WIDE},
    /* selective */
    {"sel_n1", ST(SEL), SIZES(1, 1, 8, 8), HEADS(1, 1)},
    {"sel_n7", ST(SEL), SIZES(7, 7, 7, 7), HEADS(2, 1), .h_sel = 1},
    {"sel_n37_gqa", ST(SEL), SIZES(37, 37, 16, 16), HEADS(4, 2), .h_sel = 2},
    {"sel_n97_padded", ST(SEL), SIZES(97, 97, 64, 64), HEADS(2, 1), .layout = P},
    {"sel_n200", ST(SEL), SIZES(200, 200, 64, 64), HEADS(2, 2), .h_sel = 1, .layout = H},
    {"sel_chunked_37_of_200", ST(SEL), SIZES(37, 200, 32, 32), HEADS(2, 1)},
    {"sel_decode_1_of_97", ST(SEL), SIZES(1, 97, 64, 64), HEADS(4, 2), .h_sel = 3},
    {"sel_nq40_nkv10", ST(SEL), SIZES(40, 10, 16, 16), HEADS(1, 1)},
    {"sel_logits_80", ST(SEL), SIZES(97, 97, 64, 64), HEADS(2, 1), SCALE(8.0f)},
    {"sel_positive", ST(SEL), SIZES(130, 130, 16, 16), HEADS(2, 1), .data = POS, .arrays = 3},
    /* a selection's key ranges (2 for the last query blocks; 4 in a decode call), folded */
    {"sel_ranges_n600", ST(SEL), SIZES(600, 600, 16, 16), HEADS(2, 1), .h_sel = 1},
    {"sel_ranges_decode_1_of_9000", ST(SEL), SIZES(1, 9000, 8, 8), HEADS(4, 2), .h_sel = 3},
};
#define ST_NCASES (sizeof st_cases / sizeof st_cases[0])
static size_t st_sel[ST_NCASES];

/* ------------------------------------------------------------------------------------------ */
/* A call of any of the three                                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct st_desc {
  st_kind kind;
  attn_softmax_desc sm;
  attn_gau_desc gau;
  attn_selective_desc sel;
  float *table; /* GAU's bias table (n_kv floats), or NULL */
} st_desc;

/* The descriptor's shape (writable through a writable d), mask and scale. */
static attn_shape *st_shape(const st_desc *d) {
  const attn_shape *s = d->kind == SM ? &d->sm.shape : d->kind == GAU ? &d->gau.shape : &d->sel.shape;
  return (attn_shape *)s;
}
static attn_mask st_mask(const st_desc *d) {
  return d->kind == SM ? d->sm.mask : d->kind == GAU ? d->gau.mask : attn_mask_causal();
}
static double st_scale(const st_desc *d) {
  return d->kind == SM ? d->sm.scale : d->kind == GAU ? d->gau.scale : d->sel.scale;
}

static void st_desc_make(st_desc *d, const st_case *c, tu_rng *r) {
  memset(d, 0, sizeof *d);
  d->kind = c->kind;
  if (c->kind == SM) {
    ck_assert_int_eq(attn_softmax_desc_init(&d->sm, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
    d->sm.mask = c->mask;
    if (c->set_scale) d->sm.scale = c->scale;
  } else if (c->kind == GAU) {
    ck_assert_int_eq(attn_gau_desc_init(&d->gau, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
    d->gau.mask = c->mask;
    if (c->set_scale) d->gau.scale = c->scale;
    d->gau.beta = c->beta;
    d->gau.normalize = c->normalize;
    if (c->table) { /* a decreasing table, + and - */
      d->table = malloc(sizeof(float) * c->n_kv);
      ck_assert_ptr_nonnull(d->table);
      for (size_t x = 0; x < c->n_kv; x++)
        d->table[x] = 0.3f - 0.5f * (float)x / (float)c->n_kv + 0.05f * tu_rng_range(r, -1, 1);
      d->gau.bias = ATTN_GAU_BIAS_CAUSAL;
      d->gau.bias_table = d->table;
      d->gau.bias_len = c->n_kv;
    }
  } else {
    ck_assert_int_eq(attn_selective_desc_init(&d->sel, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
    d->sel.h_sel = c->h_sel;
    if (c->set_scale) d->sel.scale = c->scale;
  }
}

static attn_status st_ws_size(const st_desc *d, size_t *bytes) {
  size_t any = 0; /* the call's own bytes, within the any-n_q answer */
  const attn_status st = d->kind == SM    ? attn_softmax_call_workspace_size(&d->sm, bytes)
                         : d->kind == GAU ? attn_gau_call_workspace_size(&d->gau, bytes)
                                          : attn_selective_call_workspace_size(&d->sel, bytes);
  const attn_status sa = d->kind == SM    ? attn_softmax_workspace_size(&d->sm, &any)
                         : d->kind == GAU ? attn_gau_workspace_size(&d->gau, &any)
                                          : attn_selective_workspace_size(&d->sel, &any);
  ck_assert_int_eq(st, sa);
  if (st == ATTN_OK) ck_assert_uint_le(*bytes, any);
  return st;
}

/* The plain call (!with) or the statistics call of kind's descriptor in d (NULL: none). */
static attn_status st_invoke(st_kind kind, const st_desc *d, const float *q, const float *k, const float *v, float *o,
                             float *lse, float *f, int with, const attn_row_stats *stats, void *ws, size_t wsz) {
  const attn_softmax_desc *sm = d ? &d->sm : NULL;
  const attn_gau_desc *gau = d ? &d->gau : NULL;
  const attn_selective_desc *sel = d ? &d->sel : NULL;
  switch (kind) {
    case SM:
      return with ? attn_softmax_stats(sm, q, k, v, o, lse, stats, ws, wsz)
                  : attn_softmax(sm, q, k, v, o, lse, ws, wsz);
    case GAU:
      return with ? attn_gau_stats(gau, q, k, v, o, stats, ws, wsz) : attn_gau(gau, q, k, v, o, ws, wsz);
    default:
      return with ? attn_selective_stats(sel, q, k, v, o, lse, f, stats, ws, wsz)
                  : attn_selective(sel, q, k, v, o, lse, f, ws, wsz);
  }
}

/* One call's outputs: o, lse (softmax, selective), f (selective: n_kv floats), the statistics. */
typedef struct st_out {
  tu_tensor o, lse, st[3]; /* st: entropy, sparsity, count ([n_q][H][1], guarded) */
  float *f;
  int with;
} st_out;

/* Runs desc over q, k, v (their layouts go into the descriptor) with outputs in layout kind,
 * f's carried part from f0 (selective), with or without the statistics (the arrays of `arrays`),
 * on a workspace of exactly the reported size; asserts ATTN_OK, guards and untouched gaps. */
static void st_call(const st_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                    tu_layout_kind kind, const float *f0, int with, unsigned arrays, st_out *r) {
  st_desc dd = *desc;
  attn_shape *s = st_shape(&dd);
  memset(r, 0, sizeof *r);
  r->with = with;
  tu_tensor_alloc(&r->o, kind, s->n_q, s->h_q, s->dv, 1);
  tu_shape_layouts(s, q, k, v, &r->o);
  const int has_lse = dd.kind != GAU;
  if (has_lse) {
    tu_tensor_alloc(&r->lse, kind, s->n_q, s->h_q, 1, 1);
    if (dd.kind == SM) dd.sm.lse = r->lse.l;
    if (dd.kind == SEL) dd.sel.lse = r->lse.l;
  }
  if (dd.kind == SEL) {
    r->f = tu_alloc(sizeof(float) * s->n_kv, 0);
    tu_fill_sentinel(r->f, s->n_kv);
    if (f0 && s->n_kv > s->n_q) memcpy(r->f, f0, sizeof(float) * (s->n_kv - s->n_q));
  }
  attn_row_stats stats;
  float *a[3] = {NULL, NULL, NULL};
  for (int i = 0; with && i < 3; i++)
    if (!arrays || (arrays >> i & 1)) tu_tensor_alloc(&r->st[i], kind, s->n_q, s->h_q, 1, 1), a[i] = r->st[i].data;
  ck_assert_int_eq(attn_row_stats_init(&stats, s->h_q, a[0], a[1], a[2]), ATTN_OK);
  stats.layout = tu_layout(kind, s->n_q, s->h_q, 1);
  size_t ws = 0;
  ck_assert_int_eq(st_ws_size(&dd, &ws), ATTN_OK);
  void *w = tu_alloc(ws, 0);
  ck_assert_int_eq(st_invoke(dd.kind, &dd, q->data, k->data, v->data, r->o.data, has_lse ? r->lse.data : NULL, r->f,
                             with, &stats, w, ws),
                   ATTN_OK);
  tu_assert_guards("workspace", w);
  tu_free(w);
  tu_assert_output_clean("o", &r->o);
  if (has_lse) tu_assert_output_clean("lse", &r->lse);
  if (r->f) tu_assert_guards("f", r->f);
  for (int i = 0; i < 3; i++)
    if (r->st[i].data) tu_assert_output_clean("statistics", &r->st[i]);
}

static void st_out_free(st_out *r) {
  tu_tensor_free(&r->o);
  tu_tensor_free(&r->lse);
  for (int i = 0; i < 3; i++) tu_tensor_free(&r->st[i]);
  if (r->f) tu_free(r->f);
}

/* The statistics call's o, lse and f are the plain call's bits. */
static void st_assert_same_outputs(const st_out *a, const st_out *b, size_t n_kv) {
  tu_assert_same_bits("o with statistics", a->o.data, b->o.data, sizeof(float) * a->o.span);
  if (a->lse.data) tu_assert_same_bits("lse with statistics", a->lse.data, b->lse.data, sizeof(float) * a->lse.span);
  if (a->f) tu_assert_same_bits("f with statistics", a->f, b->f, sizeof(float) * n_kv);
}

/* ------------------------------------------------------------------------------------------ */
/* The reference: weights in double, ref_row_stats_of, the bounds                               */
/* ------------------------------------------------------------------------------------------ */
/* What every row's weights need: the problem's tensors, and for selective the reference's F of
 * every (row, key) and G, the sum of the selecting head's dot-product magnitudes behind it. */
typedef struct st_ref {
  const st_desc *d;
  const tu_tensor *q, *k;
  double *F, *G; /* selective: [n_q][n_kv] */
} st_ref;

static double st_dot(const tu_tensor *q, size_t i, size_t hq, const tu_tensor *k, size_t j, size_t hk, size_t d,
                     double *mag) {
  double s = 0, m = 0;
  for (size_t t = 0; t < d; t++) {
    const double x = (double)*tu_at(q, i, hq, t) * *tu_at(k, j, hk, t);
    s += x, m += fabs(x);
  }
  *mag = m;
  return s;
}

static void st_ref_make(st_ref *r, const st_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                        const float *f0) {
  memset(r, 0, sizeof *r);
  r->d = d, r->q = q, r->k = k;
  if (d->kind != SEL) return;
  const attn_shape *s = &d->sel.shape;
  const size_t nq = s->n_q, nkv = s->n_kv, hk = d->sel.h_sel / (s->h_q / s->h_k);
  r->F = calloc(nq * nkv, sizeof(double));
  r->G = calloc(nq * nkv, sizeof(double));
  double *o = malloc(sizeof(double) * nq * s->h_q * s->dv);
  ck_assert(r->F && r->G && o);
  const ref_selective_problem p = tu_selective_problem(&d->sel, q, k, v, f0);
  const ref_selective_out out = {.o = o, .F = r->F};
  ref_selective(&p, &out);
  free(o);
  /* G_ij: over the call's queries k with 0 < j < p_k < p_i, |scale| sum |q_k k_j| of head h_sel
   * (row i - 1 adds its selection of key j to the rows after it) */
  for (size_t i = 1; i < nq; i++)
    for (size_t j = 0; j < nkv; j++) {
      double g = 0;
      const long long pk = (long long)nkv - (long long)nq + (long long)i - 1;
      if (j > 0 && (long long)j < pk) st_dot(q, i - 1, d->sel.h_sel, k, j, hk, s->d, &g);
      r->G[i * nkv + j] = r->G[(i - 1) * nkv + j] + fabs((double)d->sel.scale) * g;
    }
}

static void st_ref_free(st_ref *r) { free(r->F), free(r->G); }

/* Row (i, h)'s weights w[j] relative to what the library accumulates (softmax, selective:
 * exp(s - F - M), M the row's largest visible logit; GAU: relu(x)^2 without t_i), NaN where the
 * logit is not finite; vis[j] the mask; dw[j] each weight's error bound (tolerances.h). */
static void st_weights(const st_ref *r, size_t i, size_t h, double *w, double *dw, unsigned char *vis) {
  const st_desc *d = r->d;
  const attn_shape *s = st_shape(d);
  const attn_mask m = st_mask(d);
  const double scale = st_scale(d);
  const size_t nkv = s->n_kv, hk = h / (s->h_q / s->h_k);
  ref_gau_problem gp;
  if (d->kind == GAU) gp = tu_gau_problem(&d->gau, r->q, r->k, r->q);
  double mx = -INFINITY, sabs = 0;
  for (size_t j = 0; j < nkv; j++) { /* logits in w, their magnitudes g in dw */
    vis[j] = (unsigned char)ref_visible(i, j, s->n_q, nkv, m.left, m.right, m.chunk);
    if (!vis[j]) continue;
    double g;
    const double x = scale * st_dot(r->q, i, h, r->k, j, hk, s->d, &g);
    w[j] = d->kind == SEL ? x - r->F[i * nkv + j] : d->kind == GAU ? x + ref_gau_bias_at(&gp, i, j) : x;
    if (!isfinite(w[j])) w[j] = NAN; /* a non-finite q or k (selective: or F) poisons the row */
    dw[j] = fabs(scale) * g;
    mx = fmax(mx, w[j]), sabs = fmax(sabs, dw[j]);
  }
  for (size_t j = 0; j < nkv; j++) {
    if (!vis[j]) continue;
    if (d->kind == GAU) {
      const double rl = w[j] > 0 ? w[j] : isnan(w[j]) ? NAN : 0.0;
      w[j] = rl * rl;
      dw[j] = tol_stats_dw_gau(w[j], s->d, dw[j]);
    } else {
      w[j] = exp(w[j] - mx);
      dw[j] = d->kind == SM
                  ? tol_stats_dw_softmax(w[j], s->d, sabs)
                  : tol_stats_dw_selective(w[j], nkv, s->d, dw[j], r->G[i * nkv + j], r->F[i * nkv + j], sabs);
    }
  }
}

/* Expected statistics of every row ([n_q][H] each) and the bounds: entropy absolute, sparsity
 * relative (times the expected value), count exact. */
typedef struct st_expect {
  double *v[3], *tol[3], *scale[3];
} st_expect;

static void st_expect_make(st_expect *e, const st_ref *r, size_t rows_from, size_t rows) {
  const attn_shape *s = st_shape(r->d);
  const size_t H = s->h_q, nkv = s->n_kv;
  for (int a = 0; a < 3; a++) {
    e->v[a] = malloc(sizeof(double) * rows * H);
    e->tol[a] = malloc(sizeof(double) * rows * H);
    e->scale[a] = malloc(sizeof(double) * rows * H);
    ck_assert(e->v[a] && e->tol[a] && e->scale[a]);
  }
  double *w = malloc(sizeof(double) * nkv), *dw = malloc(sizeof(double) * nkv);
  unsigned char *vis = malloc(nkv);
  ck_assert(w && dw && vis);
  for (size_t i = 0; i < rows; i++)
    for (size_t h = 0; h < H; h++) {
      const size_t x = i * H + h;
      st_weights(r, rows_from + i, h, w, dw, vis);
      const ref_row_stats rs = ref_row_stats_of(w, vis, nkv);
      double W = 0, W2 = 0, own = 0, ws = 0, ss = 0;
      for (size_t j = 0; j < nkv; j++)
        if (vis[j]) W += w[j], W2 += w[j] * w[j];
      for (size_t j = 0; isfinite(rs.entropy) && j < nkv; j++) {
        if (!vis[j]) continue;
        const double p = w[j] / W, pe = fmax(p, dw[j] / W);
        if (p > 0) own += p * fabs(log(w[j]));
        if (pe > 0) ws += dw[j] / W * (fabs(log(pe)) + rs.entropy + 2.0);
        ss += dw[j] * (1.0 / W + w[j] / W2);
      }
      own += fabs(log(W));
      e->v[0][x] = rs.entropy, e->v[1][x] = rs.sparsity, e->v[2][x] = rs.count;
      e->tol[0][x] = tol_stats_entropy((size_t)rs.count, own, ws);
      e->tol[1][x] = tol_stats_sparsity((size_t)rs.count, ss);
      e->tol[2][x] = 0.0;
      e->scale[0][x] = e->scale[2][x] = 1.0;
      e->scale[1][x] = isfinite(rs.sparsity) ? rs.sparsity : 1.0;
    }
  free(w), free(dw), free(vis);
}

static void st_expect_free(st_expect *e) {
  for (int a = 0; a < 3; a++) free(e->v[a]), free(e->tol[a]), free(e->scale[a]);
}

static const char *const st_stat_names[] = {"entropy", "sparsity", "count"};

/* got's statistics (rows from its first) against expected values (the reference's, or another
 * call's) with the bounds of e, times factor. */
static void st_compare(const char *what, st_kind kind, const st_out *got, const double *const *expect,
                       const st_expect *e, size_t row0, double factor) {
  const size_t rows = got->o.n, H = got->o.h;
  double *tol = malloc(sizeof(double) * rows * H);
  ck_assert_ptr_nonnull(tol);
  for (int a = 0; a < 3; a++) {
    if (!got->st[a].data) continue;
    char family[48];
    snprintf(family, sizeof family, "stats.%s.%s", st_names[kind], st_stat_names[a]);
    for (size_t x = 0; x < rows * H; x++) tol[x] = factor * e->tol[a][row0 * H + x];
    tu_compare(family, what, &got->st[a], expect[a] + row0 * H, e->scale[a] + row0 * H, tol);
  }
  free(tol);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
/* f's carried part for a chunked selective call: non-negative sums, as earlier queries leave. */
static float *st_f0(const st_case *c, tu_rng *r) {
  float *f0 = calloc(c->n_kv + 1, sizeof(float));
  ck_assert_ptr_nonnull(f0);
  for (size_t j = 1; c->kind == SEL && j + c->n_q < c->n_kv; j++) f0[j] = tu_rng_range(r, 0.0f, 2.0f);
  return f0;
}

/* A case's inputs (poison_case >= 0: one element of q, k or v made non-finite, tu_qkv_poison),
 * its plain and statistics calls (same bits), and the statistics against the reference. */
static void st_run_case(const st_case *c, uint64_t seed, int poison_case) {
  tu_rng rng = tu_rng_of(seed);
  tu_qkv x = tu_qkv_of(c->layout, c->data, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  char what[128];
  snprintf(what, sizeof what, "%s", c->name);
  if (poison_case >= 0) {
    char p[64];
    tu_qkv_poison(&x, poison_case, 0, p, sizeof p);
    snprintf(what, sizeof what, "%s: %s", c->name, p);
  }
  st_desc d;
  st_desc_make(&d, c, &rng);
  float *f0 = st_f0(c, &rng);
  st_out plain, with;
  st_call(&d, &x.q, &x.k, &x.v, c->layout, f0, 0, 0, &plain);
  st_call(&d, &x.q, &x.k, &x.v, c->layout, f0, 1, c->arrays, &with);
  tu_qkv_assert_unchanged(&x);
  st_assert_same_outputs(&plain, &with, c->n_kv);
  st_ref r;
  st_ref_make(&r, &d, &x.q, &x.k, &x.v, f0);
  st_expect e;
  st_expect_make(&e, &r, 0, c->n_q);
  st_compare(what, c->kind, &with, (const double *const *)e.v, &e, 0, 1.0);
  st_expect_free(&e);
  st_ref_free(&r);
  st_out_free(&plain);
  st_out_free(&with);
  free(f0);
  free(d.table);
  tu_qkv_free(&x);
}

START_TEST(stats_match_reference) { st_run_case(&st_cases[st_sel[_i]], 7000 + st_sel[_i], -1); }
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Exact values: one key (entropy 0, sparsity 1, count 1) and uniform rows (q = 0: every logit 0;  */
/* GAU every weight beta^2): entropy log n, sparsity 1, within the bounds of their sums.          */
/* ------------------------------------------------------------------------------------------ */
START_TEST(stats_exact_rows) {
  const st_kind kind = (st_kind)_i;
  enum { N = 37, HQ = 2, DD = 8 };
  const st_case c = {"exact", kind, SIZES(N, N, DD, DD), HEADS(HQ, 1), .mask = CAUSAL, .beta = 0.5f};
  tu_rng rng = tu_rng_of(7500 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, N, N, HQ, 1, 1, DD, DD);
  for (size_t i = 0; i < N; i++)
    for (size_t h = 0; h < HQ; h++)
      for (size_t t = 0; t < DD; t++) *tu_at(&x.q, i, h, t) = 0.0f;
  tu_qkv_snapshot(&x);
  st_desc d;
  st_desc_make(&d, &c, &rng);
  st_out r;
  st_call(&d, &x.q, &x.k, &x.v, T, NULL, 1, 0, &r);
  for (size_t i = 0; i < N; i++)
    for (size_t h = 0; h < HQ; h++) {
      const double n = (double)(i + 1), ent = *tu_at(&r.st[0], i, h, 0), sp = *tu_at(&r.st[1], i, h, 0);
      ck_assert_msg(*tu_at(&r.st[2], i, h, 0) == (float)n, "%s row %zu: count %g", st_names[kind], i,
                    (double)*tu_at(&r.st[2], i, h, 0));
      if (i == 0) {
        ck_assert_msg(ent == 0.0 && sp == 1.0, "%s one key: entropy %g sparsity %g", st_names[kind], ent, sp);
        continue;
      }
      ck_assert_msg(fabs(ent - log(n)) <= tol_stats_entropy((size_t)n, log(n), 0.0),
                    "%s row %zu: entropy %.9g, log n %.9g", st_names[kind], i, ent, log(n));
      ck_assert_msg(fabs(sp - 1.0) <= tol_stats_sparsity((size_t)n, 0.0), "%s row %zu: sparsity %.9g", st_names[kind],
                    i, sp);
    }
  st_out_free(&r);
  free(d.table);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Decode steps (n_q = 1 over a growing cache; selective: f carried from step to step) give the */
/* rows of the prefill's statistics, within twice the bound.                                    */
/* ------------------------------------------------------------------------------------------ */
static const st_case st_props[] = {
    {"sm_decode_window", ST(SM), SIZES(60, 60, 16, 16), HEADS(4, 2), .mask = WINDOW(20, 0)},
    {"sm_decode_chunk7", ST(SM), SIZES(50, 50, 8, 8), HEADS(2, 1), .mask = MASK(U, 0, 7)},
    {"gau_decode_table", ST(GAU), SIZES(60, 60, 16, 16), HEADS(2, 1), .mask = CAUSAL, .table = 1, .normalize = 1},
    {"sel_decode", ST(SEL), SIZES(60, 60, 16, 16), HEADS(4, 2), .h_sel = 1},
};
#define ST_NPROPS (sizeof st_props / sizeof st_props[0])

START_TEST(stats_decode_matches_prefill) {
  const st_case *c = &st_props[_i];
  tu_rng rng = tu_rng_of(7600 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  st_desc d;
  st_desc_make(&d, c, &rng);
  st_out full;
  st_call(&d, &x.q, &x.k, &x.v, T, NULL, 1, 0, &full);
  st_ref r;
  st_ref_make(&r, &d, &x.q, &x.k, &x.v, NULL);
  st_expect e;
  st_expect_make(&e, &r, 0, c->n_q);
  st_compare("prefill", c->kind, &full, (const double *const *)e.v, &e, 0, 1.0);
  double *got[3];
  for (int a = 0; a < 3; a++) {
    got[a] = malloc(sizeof(double) * c->n_q * c->h_q);
    ck_assert_ptr_nonnull(got[a]);
    tu_tensor_to_double(&full.st[a], got[a]);
  }
  float *f = calloc(c->n_kv, sizeof(float));
  for (size_t t = 0; t < c->n_q; t++) {
    st_desc dt = d;
    attn_shape *s = st_shape(&dt);
    s->n_q = 1, s->n_kv = t + 1;
    const tu_tensor q = tu_rows_view(&x.q, t, 1), k = tu_rows_view(&x.k, 0, t + 1), v = tu_rows_view(&x.v, 0, t + 1);
    st_out step;
    st_call(&dt, &q, &k, &v, T, f, 1, 0, &step);
    if (step.f) memcpy(f, step.f, sizeof(float) * (t + 1)); /* the next step's carried F */
    /* the expected values (the prefill's row t) and the reference's bounds of row t */
    st_compare("decode step vs prefill row", c->kind, &step, (const double *const *)got, &e, t, TOL_PROPERTY_FACTOR);
    st_out_free(&step);
  }
  for (int a = 0; a < 3; a++) free(got[a]);
  free(f);
  st_expect_free(&e);
  st_ref_free(&r);
  st_out_free(&full);
  free(d.table);
  tu_qkv_free(&x);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Non-finite inputs: q, k or v x NaN, +inf, -inf x early, late (tu_qkv_poison): a row whose      */
/* weights use the value (q, or k of a visible key; selective: through F too) gets NaN entropy   */
/* and sparsity, every other row (v's included: weights do not use v) is as the reference.       */
/* ------------------------------------------------------------------------------------------ */
static const st_case st_nf[] = {
    {"sm_causal_130_gqa", ST(SM), SIZES(130, 130, 16, 9), HEADS(4, 2), .mask = CAUSAL},
    {"sm_window_7_0", ST(SM), SIZES(100, 100, 8, 8), HEADS(1, 1), .mask = WINDOW(7, 0)},
    {"sm_decode", ST(SM), SIZES(1, 100, 16, 16), HEADS(4, 1), .mask = CAUSAL},
    {"gau_chunk7", ST(GAU), SIZES(100, 100, 8, 8), HEADS(2, 1), .mask = MASK(U, 0, 7)},
    {"gau_full_gqa", ST(GAU), SIZES(60, 60, 16, 9), HEADS(4, 2), .mask = FULL},
    {"sel_causal_100", ST(SEL), SIZES(100, 100, 16, 16), HEADS(2, 1), .h_sel = 1},
};
#define ST_NNF (sizeof st_nf / sizeof st_nf[0])

START_TEST(stats_nonfinite_policy) {
  for (int pc = 0; pc < TU_POISON_CASES; pc++) st_run_case(&st_nf[_i], 7700 + (uint64_t)_i, pc);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: the shared rows (bad_input.h) through the statistics calls, then the statistics'    */
/* own; the call answers the row's status and writes nothing: o, lse, f and the statistics'       */
/* arrays keep their bytes, the inputs too.                                                      */
/* ------------------------------------------------------------------------------------------ */
enum { BNQ = 5, BNKV = 9, STAT_FLOATS = BNQ * TU_BAD_HQ };
/* The statistics' own rows: edits of the attn_row_stats (RS), of the call's pointer to it (OB_SP),
 * pointing a field n floats into an object (the arrays, f, GAU's table). The fault tags the kinds
 * a row runs for. */
enum { SF_ALL = TU_BAD_OWN, SF_LSE /* softmax, selective */, SF_SEL, SF_GAU };
enum { OB_RS = TU_OB_OWN, OB_SP, OB_ARR, OB_F, OB_TABLE };
#define BAD(f, s)         .fault = (f), .expect = (s), .desc_level = 0
#define RS_NUL(m)         TU_NUL(OB_RS, attn_row_stats, m)
#define RS_PTR(m, to, k)  TU_PTR(OB_RS, attn_row_stats, m, to, k)
#define RS_LAYOUT(m, val) TU_SET_Z(OB_RS, attn_row_stats, layout.m, val)
static const tu_bad_case st_bad_own[] = {
    {"stats NULL", BAD(SF_ALL, ATTN_E_NULL_POINTER), {TU_ELEM_P(OB_SP, 0, TU_OBJ_NONE, 0)}},
    {"all three arrays NULL", BAD(SF_ALL, ATTN_E_NULL_POINTER), {RS_NUL(entropy), RS_NUL(sparsity), RS_NUL(count)}},
    {"stats row stride 0", BAD(SF_ALL, ATTN_E_BAD_STRIDE), {RS_LAYOUT(row_stride, 0)}},
    {"stats heads overlap the next token",
     BAD(SF_ALL, ATTN_E_BAD_STRIDE),
     {RS_LAYOUT(row_stride, TU_BAD_HQ - 1), RS_LAYOUT(head_stride, 1)}},
    {"entropy inside q", BAD(SF_ALL, ATTN_E_ALIASING), {RS_PTR(entropy, TU_OB_Q, 3)}},
    {"sparsity is k", BAD(SF_ALL, ATTN_E_ALIASING), {RS_PTR(sparsity, TU_OB_K, 0)}},
    {"count inside v", BAD(SF_ALL, ATTN_E_ALIASING), {RS_PTR(count, TU_OB_V, 1)}},
    {"entropy inside o", BAD(SF_ALL, ATTN_E_ALIASING), {RS_PTR(entropy, TU_OB_O, 2)}},
    {"sparsity inside the workspace", BAD(SF_ALL, ATTN_E_ALIASING), {RS_PTR(sparsity, TU_OB_WS, 5)}},
    {"count is entropy", BAD(SF_ALL, ATTN_E_ALIASING), {RS_PTR(count, OB_ARR, 0)}},
    {"sparsity inside entropy", BAD(SF_ALL, ATTN_E_ALIASING), {RS_PTR(sparsity, OB_ARR, STAT_FLOATS - 1)}},
    {"count inside lse", BAD(SF_LSE, ATTN_E_ALIASING), {RS_PTR(count, TU_OB_LSE_DATA, 1)}},
    {"entropy inside f", BAD(SF_SEL, ATTN_E_ALIASING), {RS_PTR(entropy, OB_F, 2)}},
    {"count inside the bias table", BAD(SF_GAU, ATTN_E_ALIASING), {RS_PTR(count, OB_TABLE, 1)}},
};
#define ST_NOWN (sizeof st_bad_own / sizeof st_bad_own[0])

/* The rows of a kind: the shared ones (with an lse but for GAU), then its own (lse, f and the table
 * rows only where the kind has them). */
static size_t st_bad_rows(st_kind kind, size_t *row, size_t max) {
  const size_t shared = tu_bad_rows(kind != GAU, 0);
  size_t n = 0;
  for (size_t i = 0; i < shared + ST_NOWN && n < max; i++) {
    if (i >= shared) {
      const int f = st_bad_own[i - shared].fault;
      if ((f == SF_LSE && kind == GAU) || (f == SF_SEL && kind != SEL) || (f == SF_GAU && kind != GAU)) continue;
    }
    row[n++] = i;
  }
  return n;
}

START_TEST(stats_reject_bad_input) {
  const st_kind kind = (st_kind)(_i % 3);
  size_t rows[128];
  const size_t nrows = st_bad_rows(kind, rows, 128);
  if ((size_t)_i / 3 >= nrows) return; /* the kinds have different row counts */
  const tu_bad_case *c = tu_bad_row(rows[_i / 3], kind != GAU, st_bad_own);
  tu_rng rng = tu_rng_of(7800 + (uint64_t)_i);
  const st_case sc = {"bad",          kind,      SIZES(BNQ, BNKV, TU_BAD_D, TU_BAD_DV), HEADS(TU_BAD_HQ, TU_BAD_HKV),
                      .mask = CAUSAL, .table = 1};
  st_desc d;
  st_desc_make(&d, &sc, &rng);
  attn_shape *s = st_shape(&d);
  size_t need = 0;
  ck_assert_int_eq(st_ws_size(&d, &need), ATTN_OK);
  tu_bad b;
  tu_bad_make(&b, &rng, s, 4, kind != GAU, need);
  /* f (selective: a carried state, then the sentinel) and the statistics' arrays (all sentinel) */
  float *f = tu_alloc(sizeof(float) * BNKV, 0), *arr = tu_alloc(sizeof(float) * 3 * STAT_FLOATS, 0);
  tu_fill_sentinel(f, BNKV);
  tu_fill_sentinel(arr, 3 * STAT_FLOATS);
  for (size_t j = 0; j < BNKV - BNQ; j++) f[j] = 0.25f * (float)j;
  unsigned char *before = malloc(sizeof(float) * (BNKV + 3 * STAT_FLOATS));
  ck_assert_ptr_nonnull(before);
  memcpy(before, f, sizeof(float) * BNKV);
  memcpy(before + sizeof(float) * BNKV, arr, sizeof(float) * 3 * STAT_FLOATS);
  attn_row_stats stats;
  ck_assert_int_eq(attn_row_stats_init(&stats, TU_BAD_HQ, arr, arr + STAT_FLOATS, arr + 2 * STAT_FLOATS), ATTN_OK);
  const attn_row_stats *sp = &stats;
  float *scale = d.kind == SM ? &d.sm.scale : d.kind == GAU ? &d.gau.scale : &d.sel.scale; /* for tu_bad_apply */
  attn_layout *lse = d.kind == SM ? &d.sm.lse : d.kind == SEL ? &d.sel.lse : NULL;
  tu_bad_apply(&b, c, s, scale, lse, (void *[]){&stats, (void *)&sp, arr, f, d.table}, 5);
  char call[64];
  snprintf(call, sizeof call, "attn_%s_stats", st_names[kind]);
  tu_bad_assert_status(
      c, call,
      st_invoke(kind, b.desc_null ? NULL : &d, b.q, b.k, b.v, b.o_arg, b.lse_arg, f, 1, sp, b.ws_arg, b.ws_size));
  tu_bad_assert_untouched(&b);
  tu_assert_same_bits("f after a rejected call", before, f, sizeof(float) * BNKV);
  tu_assert_same_bits("statistics after a rejected call", before + sizeof(float) * BNKV, arr,
                      sizeof(float) * 3 * STAT_FLOATS);
  tu_assert_guards("f", f);
  tu_assert_guards("statistics", arr);
  free(before);
  tu_free(f);
  tu_free(arr);
  free(d.table);
  tu_bad_free(&b);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Reentrancy: threads running the three calls at once over shared inputs, each with its own o, */
/* f, workspace and statistics, give the serial results bit for bit.                            */
/* ------------------------------------------------------------------------------------------ */
enum { RE_THREADS = 3, RE_N = 67, RE_H = 2, RE_D = 16 };
static const st_case st_re_cases[RE_THREADS] = {
    {"re_sm", ST(SM), SIZES(RE_N, RE_N, RE_D, RE_D), HEADS(RE_H, 1), .mask = MASK(U, 0, 7)},
    {"re_gau", ST(GAU), SIZES(RE_N, RE_N, RE_D, RE_D), HEADS(RE_H, 1), .mask = CAUSAL},
    {"re_sel", ST(SEL), SIZES(RE_N, RE_N, RE_D, RE_D), HEADS(RE_H, 1), .h_sel = 1},
};
typedef struct st_job {
  const st_desc *d;
  const tu_qkv *x;
} st_job;

/* out: the three statistics' arrays, token-major, one after the other. */
static int st_job_run(const void *arg, float *out) {
  const st_job *j = arg;
  const size_t rows = RE_N * RE_H;
  size_t ws = 0;
  if (st_ws_size(j->d, &ws) != ATTN_OK) return -1;
  float *o = malloc(sizeof(float) * rows * RE_D), *lse = malloc(sizeof(float) * rows), *f = calloc(RE_N, sizeof(float));
  void *w = malloc(ws);
  attn_row_stats stats;
  attn_row_stats_init(&stats, RE_H, out, out + rows, out + 2 * rows);
  int rc = o && lse && f && w ? 0 : -1;
  for (int rep = 0; rep < 10 && rc == 0; rep++)
    rc = (int)st_invoke(j->d->kind, j->d, j->x->q.data, j->x->k.data, j->x->v.data, o, j->d->kind == GAU ? NULL : lse,
                        f, 1, &stats, w, ws);
  free(o), free(lse), free(f), free(w);
  return rc;
}

START_TEST(stats_concurrent_calls_match_serial) {
  tu_rng rng = tu_rng_of(7900);
  tu_qkv x[RE_THREADS];
  st_desc d[RE_THREADS];
  st_job jobs[RE_THREADS];
  const void *args[RE_THREADS];
  for (int t = 0; t < RE_THREADS; t++) {
    tu_qkv_make(&x[t], T, TU_DATA_UNIFORM, &rng, RE_N, RE_N, RE_H, 1, 1, RE_D, RE_D);
    st_desc_make(&d[t], &st_re_cases[t], &rng);
    jobs[t] = (st_job){&d[t], &x[t]};
    args[t] = &jobs[t];
  }
  tu_assert_reentrant("threaded statistics vs serial", st_job_run, args, RE_THREADS, (size_t)3 * RE_N * RE_H);
  for (int t = 0; t < RE_THREADS; t++) tu_qkv_free(&x[t]), free(d[t].table);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"reference", stats_match_reference, (int)TU_SELECT_CASES(st_cases, st_sel, dv)},
  {"exact", stats_exact_rows, 3},
  {"properties", stats_decode_matches_prefill, (int)ST_NPROPS},
  {"nonfinite", stats_nonfinite_policy, (int)ST_NNF},
  {"api", stats_concurrent_calls_match_serial, 1},
  {"bad_input", stats_reject_bad_input, 3 * (int)(tu_bad_rows(1, 0) + ST_NOWN)})
/* clang-format on */
