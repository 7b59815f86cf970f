/*
 * baseline_delta.c: the delta rule (attn_delta: GDN, KDA, DeltaNet) token by token, the best plain
 * loop, the baseline of the delta-rule rows. Per token, q and k of each key head L2-normalised
 * once (x / sqrt(sum x^2 + 1e-6), as qk_l2norm); per value head, tile by tile of BV_TILE value
 * columns (vec.h), two passes down the tile's d rows with u, delta and the output in registers:
 * pass 1 decays row f (exp(g) for GDN, exp(g_f) for KDA, the exps taken per token and head;
 * DeltaNet only reads) and accumulates u = S~^T k; then delta = beta (v - u); pass 2 adds k_f
 * delta to row f and accumulates S^T q; o = scale S^T q. A column of S depends only on its own
 * column of u, so a tile's two passes need no other tile, and the tile (d x BV_TILE floats) stays
 * in L1 between them: the state streams through once per token. About 4 d dv flops per token and
 * head (plus d dv multiplications for the decay). A prefill continues its state like the
 * library's row; a decode step takes the next of its state's copies as the library's does.
 *
 * Built alone with ATTN_BENCH_DELTA_FLAGS (bench/meson.build): the baselines' flags, plus
 * -mprefer-vector-width=512 where the compiler takes it (gcc otherwise keeps AVX-512 CPUs to
 * 256-bit vectors; this loop streams its state faster at 512 bits, at d = 64 and 128).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "vec.h"

/* The scratch: the state (h_v x d x ld, ld = dv in whole tiles; a decode step's copies instead,
 * bench_work_copy_cache), then q and k of every key head normalised, v and o padded to ld, and
 * the decays. */
static size_t delta_ld(const bench_shape *s) { return bv_tiles(s->dv); }
static size_t delta_state_floats(const bench_shape *s) { return s->h_kv * s->d * delta_ld(s); }

static int delta_setup(bench_work *w, char *err, size_t errlen) {
  const bench_shape *s = &w->s;
  const size_t state = delta_state_floats(s);
  const size_t floats = state + 2 * s->h_q * s->d + 2 * delta_ld(s) + s->d;
  if (!(w->scratch = bench_alloc64(floats * sizeof(float)))) {
    snprintf(err, errlen, "out of memory for the baseline's scratch");
    return -1;
  }
  if (s->n_q != 1) return 0; /* a prefill: its state starts at zero and continues across calls */
  bench_delta_state_fill(w->scratch, state);
  return bench_work_copy_cache(w, w->scratch, state * sizeof(float), w->scratch, 0, err, errlen);
}

static void delta_describe(const bench_work *w, char *note, size_t len) {
  if (w->s.n_q == 1)
    snprintf(note, len, "state %.3g MiB, %zu cop%s", (double)delta_state_floats(&w->s) * 4 / 1048576.0, w->ncopies,
             w->ncopies == 1 ? "y" : "ies");
}

/* x / sqrt(sum x^2 + 1e-6), as attn_delta's qk_l2norm. */
static void delta_l2norm(float *restrict out, const float *restrict x, size_t d) {
  float ss = 0;
  for (size_t f = 0; f < d; f++) ss += x[f] * x[f];
  const float inv = 1.0f / sqrtf(ss + 1e-6f);
  for (size_t f = 0; f < d; f++) out[f] = x[f] * inv;
}

/* One tile of value columns (BV_TILE from c0) of one value head's d x dv state S (row f: key
 * channel f; row stride ld), one token, in two passes down the tile's rows, the tile staying in
 * L1 between them and u, delta and the output in registers: pass 1 decays each row, S[f] *=
 * alpha_f (alpha[0] for a scalar gate, alpha[f] per channel, none for DeltaNet: gw 0), and
 * accumulates u = S~^T k; delta = beta (v - u); pass 2 updates each row, S[f] += k_f delta, and
 * reads it back, o = scale S^T q. */
static inline __attribute__((always_inline)) void delta_tile(float *restrict S, size_t ld, const float *restrict k,
                                                             const float *restrict q, const float *restrict v,
                                                             float beta, const float *restrict alpha, size_t gw,
                                                             size_t d, float scale, float *restrict o) {
  bv u[BV_NV], acc[BV_NV];
  for (int i = 0; i < BV_NV; i++) u[i] = acc[i] = (bv){0};
  for (size_t f = 0; f < d; f++) {
    float *restrict row = S + f * ld;
    const bv kf = bv_set1(k[f]), a = bv_set1(gw ? alpha[gw == 1 ? 0 : f] : 1.0f);
    for (int i = 0; i < BV_NV; i++) {
      bv sv = bv_load(row + i * BV_VL);
      if (gw) bv_store(row + i * BV_VL, sv *= a);
      u[i] += kf * sv;
    }
  }
  for (int i = 0; i < BV_NV; i++) u[i] = bv_set1(beta) * (bv_load(v + i * BV_VL) - u[i]); /* u: delta */
  for (size_t f = 0; f < d; f++) {
    float *restrict row = S + f * ld;
    const bv kf = bv_set1(k[f]), qf = bv_set1(q[f]);
    for (int i = 0; i < BV_NV; i++) {
      const bv sv = bv_load(row + i * BV_VL) + kf * u[i];
      bv_store(row + i * BV_VL, sv);
      acc[i] += qf * sv;
    }
  }
  for (int i = 0; i < BV_NV; i++) bv_store(o + i * BV_VL, bv_set1(scale) * acc[i]);
}

/* One token of one value head: its tiles, the gated and ungated sweeps apart. */
static void delta_token(float *restrict S, size_t ld, const float *restrict k, const float *restrict q,
                        const float *restrict v, float beta, const float *restrict alpha, size_t gw, size_t d,
                        float scale, float *restrict o) {
  for (size_t c0 = 0; c0 < ld; c0 += BV_TILE)
    if (gw)
      delta_tile(S + c0, ld, k, q, v + c0, beta, alpha, gw, d, scale, o + c0);
    else
      delta_tile(S + c0, ld, k, q, v + c0, beta, NULL, 0, d, scale, o + c0);
}

static void delta_run(bench_work *w) {
  const bench_shape *s = &w->s;
  const size_t d = s->d, dv = s->dv, ld = delta_ld(s), hk = s->h_q, hv = s->h_kv, group = hv / hk;
  const size_t gw = bench_delta_gate_width(s);
  float *state = w->scratch;
  if (w->copies) { /* a decode step: the next copy of its state */
    const void *k = NULL, *v = NULL;
    bench_work_cache(w, &k, &v);
    state = (float *)(uintptr_t)k;
  }
  float *qn = w->scratch + delta_state_floats(s), *kn = qn + hk * d;
  float *vb = kn + hk * d, *ob = vb + ld, *alpha = ob + ld; /* v and o padded to whole tiles */
  memset(vb + dv, 0, (ld - dv) * sizeof *vb);
  const attn_layout ql = bench_layout(s->qkv_head_major, s->n_q, hk, d),
                    vl = bench_layout(s->qkv_head_major, s->n_q, hv, dv);
  const float scale = 1.0f / sqrtf((float)d);
  for (size_t t = 0; t < s->n_q; t++) {
    for (size_t h = 0; h < hk; h++) {
      delta_l2norm(qn + h * d, w->q + t * ql.row_stride + h * ql.head_stride, d);
      delta_l2norm(kn + h * d, w->k + t * ql.row_stride + h * ql.head_stride, d);
    }
    for (size_t h = 0; h < hv; h++) {
      const float *lg = gw ? w->gate + (t * hv + h) * gw : NULL;
      for (size_t f = 0; f < gw; f++) alpha[f] = expf(lg[f]);
      memcpy(vb, w->v + t * vl.row_stride + h * vl.head_stride, dv * sizeof *vb);
      delta_token(state + h * d * ld, ld, kn + (h / group) * d, qn + (h / group) * d, vb, w->beta[t * hv + h], alpha,
                  gw, d, scale, ob);
      memcpy(w->o + t * vl.row_stride + h * vl.head_stride, ob, dv * sizeof *ob);
    }
  }
}

const bench_call bench_delta_loop_call = {delta_setup, delta_run, NULL, delta_describe};
