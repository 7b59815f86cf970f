/*
 * variants/softmax.c: the adapter of attn_softmax. Prefill with the full, causal and sliding
 * window masks, and decode (one query over a growing K/V cache). The prefill variants are
 * compared with naive attention through OpenBLAS and through oneDNN. softmax_causal_stats is
 * softmax_causal through attn_softmax_stats (entropy, sparsity and count of every row): the cost
 * of the statistics beside its plain row; softmax_causal_opts and softmax_causal_bias the cost of
 * the options (sinks, cap and ALiBi; a bias tensor). softmax_verify is a speculative block of 4
 * tokens over the cache: its cost beside softmax_decode's (the cache is read once for all four).
 * softmax_decode_paged is softmax_decode through attn_softmax_batch over the cache as pages of 16
 * tokens (a page table, pages in order): the paged path's cost beside the contiguous one.
 * softmax_causal_bf16qo is softmax_causal with bf16 Q and O (the engines' edge conversions).
 * softmax_decode_batch is a decode step of 16 sequences, each with its own cache of n / 16
 * tokens, in one attn_softmax_batch call; softmax_decode_seqs the same step as 16 attn_softmax
 * calls, as an engine without the batch call makes them: both read the bytes softmax_decode reads
 * over n keys (the batch's gain is in its one dispatch to the threads).
 */
#include <math.h>
#include <string.h>

#include "bench.h"

#define NAIVE_BASELINES ((1u << BENCH_BASE_OPENBLAS) | (1u << BENCH_BASE_ONEDNN))

static const bench_variant variants[] = {
    {"softmax_full", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 0, 0, ATTN_FEATURE_IDENTITY, 0, 1, NULL,
     NAIVE_BASELINES, "softmax attention, every key visible (attn_mask_full)", ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_causal", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 1, NULL,
     NAIVE_BASELINES, "softmax attention, causal (attn_mask_causal: left unbounded, right 0)", ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_window", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 1, ATTN_FEATURE_IDENTITY, 0, 0, NULL,
     NAIVE_BASELINES, "causal sliding window of --window keys (attn_mask_window(W - 1, 0))", ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_causal_stats", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 1,
     NULL, 0, "softmax_causal with per-row statistics (attn_softmax_stats)", ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_decode", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0, NULL, 0,
     "one query over a K/V cache of --cache-min .. --cache-max tokens", ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_decode_f16", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0, NULL,
     0, "softmax_decode with the K/V cache stored as fp16 (shape.kv_type; half the bytes read)", ATTN_GATE_NONE, 0, 0,
     0},
    {"softmax_decode_bf16", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "softmax_decode with the K/V cache stored as bf16 (shape.kv_type; half the bytes read)", ATTN_GATE_NONE,
     0, 0, 0},
    {"softmax_causal_opts", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 1,
     NULL, 0, "softmax_causal with sinks, a soft cap (30) and ALiBi slopes (the options' cost)", ATTN_GATE_NONE, 0, 0,
     0},
    {"softmax_decode_opts", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "softmax_decode with sinks, a soft cap (30) and ALiBi slopes (the options' cost)", ATTN_GATE_NONE, 0, 0,
     0},
    {"softmax_causal_bias", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 1,
     NULL, 0, "softmax_causal with a key-padding bias (one float per key, broadcast over queries and heads)",
     ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_decode_i8", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0, NULL,
     0, "softmax_decode with an int8 cache and a float scale per token and head (ATTN_I8)", ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_decode_q8_0", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "softmax_decode with a q8_0 cache (llama.cpp's blocks of 32 values and an fp16 scale; ATTN_Q8_0)",
     ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_verify", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0, NULL, 0,
     "a speculative block: 4 new tokens (causal among themselves) over the cache (beside softmax_decode)",
     ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_causal_bf16qo", &bench_softmax_adapter, BENCH_PREFILL, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "softmax_causal with Q and O in bf16 (shape.q_type, o_type; converted at the kernels' edges)",
     ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_decode_paged", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "softmax_decode through attn_softmax_batch with the cache in pages of 16 tokens (a page table)",
     ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_decode_batch", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "a decode step of 16 sequences of n / 16 cached tokens each, in one attn_softmax_batch call",
     ATTN_GATE_NONE, 0, 0, 0},
    {"softmax_decode_seqs", &bench_softmax_adapter, BENCH_DECODE, BENCH_SOFTMAX, 1, 0, ATTN_FEATURE_IDENTITY, 0, 0,
     NULL, 0, "softmax_decode_batch's step as 16 attn_softmax calls, one per sequence", ATTN_GATE_NONE, 0, 0, 0},
};

/* Tokens of a page (softmax_decode_paged). */
enum { BENCH_PAGE_TOKENS = 16 };

/* Tokens of a speculative block (softmax_verify). */
enum { BENCH_VERIFY_TOKENS = 4 };

/* Sequences of softmax_decode_batch and softmax_decode_seqs. */
enum { BENCH_SEQS = 16 };

/* The mask's bounds live in the shape (bottom-right aligned), where flops.h counts the visible
 * pairs and the naive baselines mask their scores. */
static bench_shape softmax_shape(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d) {
  bench_shape s = bench_shape_start(v, sw, kind, n, d);
  if (v->windowed) s.window_left = sw->window - 1;
  if (v->causal) s.window_right = 0;
  s.seqs = v == &variants[15] || v == &variants[16] ? BENCH_SEQS : 1;
  s.seq_calls = v == &variants[16];
  if (v->mode == BENCH_DECODE) s.n_q = v == &variants[12] ? BENCH_VERIFY_TOKENS : s.seqs;
  s.stats = v == &variants[3];
  s.kv_type = v == &variants[5]    ? ATTN_F16
              : v == &variants[6]  ? ATTN_BF16
              : v == &variants[10] ? ATTN_I8
              : v == &variants[11] ? ATTN_Q8_0
                                   : ATTN_F32;
  s.options = v == &variants[7] || v == &variants[8] ? 1 : v == &variants[9] ? 2 : 0;
  s.qo_type = v == &variants[13] ? ATTN_BF16 : ATTN_F32;
  s.paged = v == &variants[14];
  return s;
}

enum { BENCH_OPT_HEADS = 256 };

/* The descriptor, and with statistics their arrays (three of n_q x h_q floats after it); with a
 * bias, its row of n_kv floats after those; with half or int8 K/V, the cache's K and V in that
 * type after those (kh, vh; ATTN_I8: each followed by its scales, so that a cache copy carries
 * its own, at `scales` bytes from its start). */
typedef struct softmax_impl {
  attn_softmax_desc desc;
  attn_row_stats stats;
  void *kh, *vh;
  uint16_t *qh, *oh;                                     /* softmax_causal_bf16qo: Q and O in bf16 */
  size_t scales;                                         /* ATTN_I8: bytes from a K or V copy's start to its scales */
  float sinks[BENCH_OPT_HEADS], slopes[BENCH_OPT_HEADS]; /* options: the first h_q (<= 256) */
  attn_batch batch;                                      /* softmax_decode_paged: one sequence in pages */
  size_t q_offsets[BENCH_SEQS + 1], kv_len;              /* softmax_decode_batch: BENCH_SEQS sequences */
  size_t kv_offsets[BENCH_SEQS + 1];
  attn_softmax_desc seq; /* softmax_decode_seqs: one sequence's step */
  int batched;           /* through attn_softmax_batch (paged or several sequences) */
  int32_t *table;        /* its pages in order: the cache's blocks of BENCH_PAGE_TOKENS tokens */
  float arrays[];
} softmax_impl;

/* A float as fp16 bits, to the nearest (ties away: the bench needs values, not IEEE rounding);
 * below fp16's normal range, 0. Inputs lie in [-1, 1). */
static uint16_t f16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a < 0x38800000u) return (uint16_t)sign; /* below 2^-14 */
  return (uint16_t)(sign | ((a - 0x38000000u + 0x1000u) >> 13));
}
static uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)((u + 0x8000u) >> 16);
}
static void to_half(attn_dtype t, const float *x, uint16_t *h, size_t n) {
  for (size_t i = 0; i < n; i++) h[i] = t == ATTN_F16 ? f16_bits(x[i]) : bf16_bits(x[i]);
}
/* Bytes of n values (a multiple of 32 for q8_0) in a cache type: int8 with its n / w scales of a
 * row of w values (ATTN_I8), q8_0 blocks, or 16-bit patterns. */
static size_t cache_bytes(attn_dtype t, size_t n, size_t w) {
  return t == ATTN_I8 ? n + n / w * sizeof(float) : t == ATTN_Q8_0 ? n / 32 * 34 : n * sizeof(uint16_t);
}
/* Inputs in [-1, 1) as int8 with the scale 1/127 (one per row of w values, stored after the n
 * values) or as q8_0 blocks of that scale in fp16. */
static void to_int8(attn_dtype t, const float *x, unsigned char *y, size_t n, size_t w) {
  for (size_t i = 0; i < n; i++) {
    const long q = lrintf(x[i] * 127.0f);
    const unsigned char b = (unsigned char)(int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
    if (t == ATTN_I8) {
      y[i] = b;
    } else {
      if (i % 32 == 0) {
        const uint16_t h = f16_bits(1.0f / 127.0f);
        memcpy(y + i / 32 * 34, &h, sizeof h);
      }
      y[i / 32 * 34 + 2 + i % 32] = b;
    }
  }
  const float s = 1.0f / 127.0f;
  for (size_t r = 0; t == ATTN_I8 && r < n / w; r++) memcpy(y + n + r * sizeof s, &s, sizeof s);
}

static int softmax_setup(bench_work *w, char *err, size_t errlen) {
  const bench_shape *s = &w->s;
  const size_t rows = s->n_q * s->h_q;
  const size_t nk = s->n_kv * s->h_kv * s->d, nv = s->n_kv * s->h_kv * s->dv;
  const size_t kb = cache_bytes(s->kv_type, nk, s->d),
               half = s->kv_type == ATTN_F32 ? 0 : kb + cache_bytes(s->kv_type, nv, s->dv);
  const size_t stats = s->stats ? 3 * rows : 0, bias = s->options == 2 ? s->n_kv : 0; /* floats of each */
  const int paged = s->paged;
  const size_t pages = paged ? (s->n_kv + BENCH_PAGE_TOKENS - 1) / BENCH_PAGE_TOKENS : 0;
  const size_t qo = s->qo_type == ATTN_F32 ? 0 : rows * (s->d + s->dv) * sizeof(uint16_t);
  softmax_impl *im = bench_work_impl(w, sizeof *im + (stats + bias + pages) * sizeof(float) + half + qo, err, errlen);
  if (!im) return -1;
  attn_softmax_desc *desc = &im->desc;
  attn_softmax_desc_init(desc, s->n_q, s->n_kv, s->h_q, s->h_kv, s->d, s->dv);
  desc->shape.threads = bench_call_threads;
  desc->shape.kv_type = s->kv_type;
  desc->shape.k = bench_layout(s->kv_head_major, s->n_kv, s->h_kv, s->d);
  desc->shape.v = bench_layout(s->kv_head_major, s->n_kv, s->h_kv, s->dv);
  im->kh = im->vh = NULL;
  im->qh = im->oh = NULL;
  if (qo) { /* Q in bf16 once here (not timed), O written as bf16 */
    im->qh = (uint16_t *)(void *)((unsigned char *)(im->arrays + stats + bias + pages) + half);
    im->oh = im->qh + rows * s->d;
    to_half(s->qo_type, w->q, im->qh, rows * s->d);
    desc->shape.q_type = desc->shape.o_type = s->qo_type;
  }
  im->scales = s->kv_type == ATTN_I8 ? nk : 0; /* (the scales' offset: the same in K and V when d = dv) */
  if (s->kv_type == ATTN_I8 && s->d != s->dv) return bench_work_fail(err, errlen, "int8 rows: d != dv", ATTN_OK);
  if (half) { /* the cache in 16 or 8 bits, converted once here (not timed) */
    im->kh = (void *)(im->arrays + stats + bias);
    im->vh = (unsigned char *)im->kh + kb;
    if (s->kv_type == ATTN_I8 || s->kv_type == ATTN_Q8_0) {
      to_int8(s->kv_type, w->k, im->kh, nk, s->d);
      to_int8(s->kv_type, w->v, im->vh, nv, s->dv);
      if (s->kv_type == ATTN_Q8_0) /* strides count blocks */
        desc->shape.k.row_stride /= 32, desc->shape.k.head_stride /= 32, desc->shape.v.row_stride /= 32,
            desc->shape.v.head_stride /= 32;
      desc->k_scales = desc->v_scales = (const float *)(const void *)((unsigned char *)im->kh + nk);
      desc->scale_layout = (attn_layout){s->h_kv, 1};
    } else {
      to_half(s->kv_type, w->k, im->kh, nk);
      to_half(s->kv_type, w->v, im->vh, nv);
    }
  }
  desc->mask = attn_mask_window(s->window_left, s->window_right);
  if (bias) { /* 0 for every key (a padding mask without padding): the bias path's whole cost */
    float *row = im->arrays + stats;
    memset(row, 0, bias * sizeof(float));
    desc->bias = row;
    desc->bias_layout = (attn_layout){0, 0};
  }
  if (s->options == 1) {
    if (s->h_q > BENCH_OPT_HEADS) return bench_work_fail(err, errlen, "options rows: more than 256 heads", ATTN_OK);
    for (size_t h = 0; h < s->h_q; h++) /* ALiBi's geometric slopes; sinks around the logits' size */
      im->slopes[h] = (float)pow(2.0, -8.0 * (double)(h + 1) / (double)s->h_q), im->sinks[h] = 1.0f;
    desc->sinks = im->sinks, desc->alibi_slopes = im->slopes, desc->softcap = 30.0f;
  }
  attn_row_stats_init(&im->stats, s->h_q, im->arrays, im->arrays + rows, im->arrays + 2 * rows);
  im->table = NULL;
  if (paged) { /* the cache's blocks of 16 tokens as pages, in order: the paged path's own cost */
    im->table = (int32_t *)(void *)(im->arrays + stats + bias);
    for (size_t p = 0; p < pages; p++) im->table[p] = (int32_t)p;
    im->q_offsets[0] = 0, im->q_offsets[1] = 1, im->kv_len = s->n_kv;
    im->batch = (attn_batch){.count = 1,
                             .q_offsets = im->q_offsets,
                             .kv_lens = &im->kv_len,
                             .page_table = im->table,
                             .table_stride = pages,
                             .page_size = BENCH_PAGE_TOKENS,
                             .pages = pages,
                             .k_page_stride = BENCH_PAGE_TOKENS * desc->shape.k.row_stride,
                             .v_page_stride = BENCH_PAGE_TOKENS * desc->shape.v.row_stride};
    if (s->kv_head_major || s->kv_type != ATTN_F32 || s->n_kv % BENCH_PAGE_TOKENS)
      return bench_work_fail(err, errlen, "paged rows: fp32 token-major caches of whole pages", ATTN_OK);
    desc->shape.n_kv = BENCH_PAGE_TOKENS;
  }
  im->batched = paged;
  if (s->seqs > 1) { /* the cache's n_kv tokens as s->seqs caches of n_kv / s->seqs, one new row each */
    const size_t per = s->n_kv / s->seqs;
    if (s->n_kv % s->seqs || s->kv_head_major || s->kv_type != ATTN_F32 || s->seqs > BENCH_SEQS)
      return bench_work_fail(err, errlen, "batch rows: fp32 token-major caches of 16 equal sequences", ATTN_OK);
    for (size_t b = 0; b <= s->seqs; b++) im->q_offsets[b] = b, im->kv_offsets[b] = b * per;
    im->batch = (attn_batch){.count = s->seqs, .q_offsets = im->q_offsets, .kv_offsets = im->kv_offsets};
    im->seq = *desc;
    im->seq.shape.n_q = 1, im->seq.shape.n_kv = per;
    im->batched = !s->seq_calls;
  }
  const size_t kbytes = half ? kb : nk * sizeof(float), vbytes = half ? half - kb : nv * sizeof(float);
  if ((s->n_q <= BENCH_VERIFY_TOKENS || s->seqs > 1) &&
      bench_work_copy_cache(w, half ? (const void *)im->kh : (const void *)w->k, kbytes,
                            half ? (const void *)im->vh : (const void *)w->v, vbytes, err, errlen))
    return -1;
  if (s->seq_calls)
    return bench_work_workspace(w, attn_softmax_workspace_size(&im->seq, &w->workspace_bytes),
                                "attn_softmax_workspace_size", err, errlen);
  if (im->batched)
    return bench_work_workspace(w, attn_softmax_batch_workspace_size(desc, &im->batch, &w->workspace_bytes),
                                "attn_softmax_batch_workspace_size", err, errlen);
  return bench_work_workspace(w, attn_softmax_workspace_size(desc, &w->workspace_bytes), "attn_softmax_workspace_size",
                              err, errlen);
}

static void softmax_run(bench_work *w) {
  const softmax_impl *im = w->impl;
  const void *k = im->kh ? (const void *)im->kh : w->k, *v = im->vh ? (const void *)im->vh : w->v;
  bench_work_cache(w, &k, &v);
  attn_softmax_desc d = im->desc;
  if (im->scales) /* this copy's own scales */
    d.k_scales = (const float *)(const void *)((const unsigned char *)k + im->scales),
    d.v_scales = (const float *)(const void *)((const unsigned char *)v + im->scales);
  if (im->batched) {
    bench_work_status(w, attn_softmax_batch(&d, &im->batch, w->q, k, v, w->o, NULL, w->workspace, w->workspace_bytes));
    return;
  }
  if (w->s.seq_calls) { /* each sequence's step alone: its row of q and o, its keys (token-major fp32) */
    const bench_shape *s = &w->s;
    for (size_t b = 0; b < s->seqs; b++)
      bench_work_status(
          w, attn_softmax(&im->seq, w->q + b * s->h_q * s->d, (const float *)k + im->kv_offsets[b] * s->h_kv * s->d,
                          (const float *)v + im->kv_offsets[b] * s->h_kv * s->dv, w->o + b * s->h_q * s->dv, NULL,
                          w->workspace, w->workspace_bytes));
    return;
  }
  const void *q = im->qh ? (const void *)im->qh : w->q;
  void *o = im->oh ? (void *)im->oh : w->o;
  bench_work_status(w, w->s.stats
                           ? attn_softmax_stats(&d, q, k, v, o, NULL, &im->stats, w->workspace, w->workspace_bytes)
                           : attn_softmax(&d, q, k, v, o, NULL, w->workspace, w->workspace_bytes));
}

const bench_adapter bench_softmax_adapter = {
    "softmax",     variants,         sizeof variants / sizeof variants[0],     bench_sweep_sizes,
    softmax_shape, bench_cost_plain, {softmax_setup, softmax_run, NULL, NULL}, NULL,
};
