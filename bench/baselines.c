/*
 * baselines.c: the reference implementations the library is compared with in the same run, and
 * the list of all baselines (oneDNN's code is in baseline_onednn.c).
 *
 * This file is built alone with ATTN_BENCH_BASELINE_FLAGS (bench/meson.build: -O3 -ffast-math,
 * plus -march=native when not cross-compiling), so its loops use the machine's widest vectors and
 * gcc vectorises expf through glibc's libmvec, as a reviewer would build a baseline.
 *
 * - Naive softmax attention through OpenBLAS (when built with it): per query head
 *   S = scale Q K^T (cblas_sgemm, n_q x n_kv scores), a row softmax over each row's visible keys
 *   (masked entries set to 0), O = P V (cblas_sgemm). OpenBLAS runs on one thread
 *   (openblas_set_num_threads(1)) so it compares with one library call; --threads T runs T of them.
 * - Causal linear attention as a one-pass recurrent loop: per token and key/value head, one sweep
 *   down the state rows p updates S[p] += psi_p(k) v and accumulates o += phi_p(q) S[p] (the
 *   group's first query head; its other heads read the updated rows in a sweep of their own); the
 *   normaliser keeps z = sum psi(k) apart (z += psi(k), o / (phi(q)^T z + eps)). Same feature maps
 *   and normaliser as the library. Decayed and gated (attn_linear_gated's S_t = G_t(S_{t-1}) +
 *   psi(k_t) [v_t 1]): the decay is fused into the same sweep, S[p] = g_p S[p] + psi_p(k) v,
 *   z_p = g_p z_p + psi_p(k), with g_p = gamma = exp(log gate) for a scalar gate (RetNet's fixed
 *   decay included) and alpha_p = exp(log gate_p) for a per-feature gate, the exps taken per
 *   token and head (1 or m expf), as CPU runtimes run these models token by token. The sweep goes
 *   by tiles of columns whose accumulators stay in registers (rec_tile, vec.h).
 * - The delta rule token by token: baseline_delta.c (built with its own flags).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "bench_config.h"
#include "vec.h"

#if defined(ATTN_BENCH_HAVE_OPENBLAS)
#include <cblas.h>
#endif

/* The normaliser's eps, as attn_linear_desc_init sets it. */
#define RECURRENT_EPS 1e-6f

static void blas_run(bench_work *w);
static void recurrent_run(bench_work *w);
static const bench_call blas_call = {bench_baseline_scratch, blas_run, NULL, NULL};
static const bench_call recurrent_call = {bench_baseline_scratch, recurrent_run, NULL, NULL};

static const bench_baseline_info base_list[BENCH_BASE_COUNT] = {
    [BENCH_BASE_OPENBLAS] = {"openblas", "naive attention: OpenBLAS sgemm, row softmax (vectorised expf), sgemm",
                             BENCH_BLAS, 1, 0, &blas_call, "", "", ""},
    [BENCH_BASE_ONEDNN] = {"onednn", "naive attention: oneDNN matmul, softmax (accurate), matmul primitives",
                           BENCH_ONEDNN, 1, 0, &bench_onednn_call, "", "", ""},
    [BENCH_BASE_RECURRENT] = {"recurrent", "causal linear attention: one-pass recurrent loop per token",
                              BENCH_RECURRENT, 0, 1, &recurrent_call, "", "", ""},
    [BENCH_BASE_DELTA] = {"delta_loop", "the delta rule token by token: two passes over the state per token",
                          BENCH_DELTA_LOOP, 0, 1, &bench_delta_loop_call, "", "", ""},
};

void bench_baselines_init(bench_baseline_info out[BENCH_BASE_COUNT]) {
  memcpy(out, base_list, sizeof base_list);
  bench_baseline_info *blas = &out[BENCH_BASE_OPENBLAS], *rec = &out[BENCH_BASE_RECURRENT];
#if defined(ATTN_BENCH_HAVE_OPENBLAS)
  openblas_set_num_threads(bench_call_workers);
  blas->available = 1;
  /* An OpenBLAS older than the CPU falls back to old kernels (0.3.21 runs Prescott's SSE3 ones on
   * a 2023 Xeon): say so, since the baseline is then unfair (OPENBLAS_CORETYPE picks a core). */
  static const char *const pre_avx2[] = {"Prescott",    "Core2",     "Penryn", "Dunnington",  "Nehalem",   "Atom",
                                         "Barcelona",   "Opteron",   "Bobcat", "Sandybridge", "Bulldozer", "Piledriver",
                                         "Steamroller", "Excavator", "Katmai", "Coppermine",  "Northwood"};
  /* Likewise an AVX2 core on a CPU with AVX-512 (an OPENBLAS_CORETYPE=Haswell in the environment of
   * a Zen 5 guest, where 0.3.21 on its own picks Cooperlake). */
  static const char *const with_avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  const char *core = openblas_get_corename();
  int old = 0, wide = 0, native = 0;
  for (size_t i = 0; core && i < sizeof pre_avx2 / sizeof pre_avx2[0]; i++) old |= strcasecmp(core, pre_avx2[i]) == 0;
  for (size_t i = 0; core && i < sizeof with_avx512 / sizeof with_avx512[0]; i++)
    wide |= strcasecmp(core, with_avx512[i]) == 0;
  const int avx2 = attn_isa_available(ATTN_ISA_AVX2, &native) && native;
  const int avx512 = attn_isa_available(ATTN_ISA_AVX512, &native) && native;
  snprintf(blas->ran_on, sizeof blas->ran_on, "OpenBLAS core %s%s, %d thread%s (%s)", core ? core : "?",
           old && avx2       ? " (older than this CPU: UNFAIR, set OPENBLAS_CORETYPE, e.g. Haswell or SkylakeX)"
           : avx512 && !wide ? " (without AVX-512 on an AVX-512 CPU: UNFAIR, set OPENBLAS_CORETYPE=SkylakeX)"
                             : "",
           bench_call_workers, bench_call_workers > 1 ? "s" : "", openblas_get_config());
#else
  snprintf(blas->absent, sizeof blas->absent, "built without OpenBLAS (install libopenblas-dev and reconfigure)");
#endif
  snprintf(blas->flags, sizeof blas->flags, "%s", ATTN_BENCH_BASELINE_FLAGS);
  snprintf(rec->flags, sizeof rec->flags, "%s", ATTN_BENCH_BASELINE_FLAGS);
  snprintf(rec->ran_on, sizeof rec->ran_on, "the bench's C code, 1 thread");
  snprintf(out[BENCH_BASE_DELTA].flags, sizeof out[BENCH_BASE_DELTA].flags, "%s", ATTN_BENCH_DELTA_FLAGS);
  snprintf(out[BENCH_BASE_DELTA].ran_on, sizeof out[BENCH_BASE_DELTA].ran_on, "the bench's C code, 1 thread");
  bench_onednn_describe(&out[BENCH_BASE_ONEDNN]);
}

bench_base bench_baseline_of(bench_kind kind) {
  for (int b = 0; b < BENCH_BASE_COUNT; b++)
    if (base_list[b].kind == kind) return (bench_base)b;
  return BENCH_BASE_COUNT;
}

/* Floats of scratch: the score matrix of the naive baselines, or the recurrent loop's states and
 * z, then phi(q) of a group, psi(k), v (padded), the group's outputs and the gate's factors. */
static size_t rec_ld(const bench_shape *s);
/* Query heads per key/value head: h_q / h_kv, or one output per state head with Mamba-2's shared
 * q and k (qk_shared). */
static size_t rec_group(const bench_shape *s) { return s->qk_shared ? 1 : s->h_q / s->h_kv; }
static size_t scratch_floats(const bench_shape *s) {
  if (s->kind == BENCH_BLAS || s->kind == BENCH_ONEDNN) return s->n_q * s->n_kv;
  const size_t ld = rec_ld(s), group = rec_group(s); /* S, z, phi, psi, v, acc, alpha */
  return s->h_kv * s->m * (ld + 1) + group * s->m + s->m + ld + group * ld + s->m;
}

int bench_baseline_scratch(bench_work *w, char *err, size_t errlen) {
  if (!(w->scratch = bench_alloc64(scratch_floats(&w->s) * sizeof(float)))) {
    snprintf(err, errlen, "out of memory for the baseline's scratch");
    return -1;
  }
  return 0;
}

#if defined(ATTN_BENCH_HAVE_OPENBLAS)
/* Softmax of each score row over its visible keys [lo, hi]; every other entry becomes 0. */
static void softmax_rows(float *scores, const bench_shape *s) {
  for (size_t i = 0; i < s->n_q; i++) {
    float *row = scores + i * s->n_kv;
    size_t lo = 0, hi = 0;
    if (!bench_visible_range(s->n_q, s->n_kv, s->window_left, s->window_right, i, &lo, &hi)) {
      memset(row, 0, s->n_kv * sizeof *row);
      continue;
    }
    float mx = row[lo], sum = 0;
    for (size_t j = lo + 1; j <= hi; j++) mx = row[j] > mx ? row[j] : mx;
    for (size_t j = lo; j <= hi; j++) sum += (row[j] = expf(row[j] - mx));
    const float inv = 1.0f / sum;
    for (size_t j = lo; j <= hi; j++) row[j] *= inv;
    memset(row, 0, lo * sizeof *row);
    memset(row + hi + 1, 0, (s->n_kv - hi - 1) * sizeof *row);
  }
}
#endif

static void blas_run(bench_work *w) {
#if defined(ATTN_BENCH_HAVE_OPENBLAS)
  const bench_shape *s = &w->s;
  const size_t group = s->h_q / s->h_kv;
  const float scale = 1.0f / sqrtf((float)s->d);
  float *scores = w->scratch;
  for (size_t h = 0; h < s->h_q; h++) {
    const size_t g = h / group;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->n_q, (int)s->n_kv, (int)s->d, scale, w->q + h * s->d,
                (int)(s->h_q * s->d), w->k + g * s->d, (int)(s->h_kv * s->d), 0.0f, scores, (int)s->n_kv);
    softmax_rows(scores, s);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->n_q, (int)s->dv, (int)s->n_kv, 1.0f, scores,
                (int)s->n_kv, w->v + g * s->dv, (int)(s->h_kv * s->dv), 0.0f, w->o + h * s->dv, (int)(s->h_q * s->dv));
  }
#else
  (void)w;
#endif
}

static void feature(float *restrict out, const float *restrict x, size_t m, attn_feature_map map) {
  if (map == ATTN_FEATURE_ELU1)
    for (size_t p = 0; p < m; p++) out[p] = x[p] >= 0 ? x[p] + 1.0f : expf(x[p]);
  else if (map == ATTN_FEATURE_RELU)
    for (size_t p = 0; p < m; p++) out[p] = x[p] > 0 ? x[p] : 0.0f;
  else
    for (size_t p = 0; p < m; p++) out[p] = x[p];
}

/* A tile of BV_NV vectors of state columns keeps its accumulators and v in registers while it
 * sweeps down the state rows, so each row tile is loaded and stored once per token and the
 * accumulators never go through memory (an inner loop over every column per row instead stores
 * the accumulators with each row: several times slower, CHANGELOG 0.11.3). */

/* The state's row stride: dv rounded up to whole tiles (the padding columns stay 0: v is padded). */
static size_t rec_ld(const bench_shape *s) { return bv_tiles(s->dv); }

/* One tile of columns of one key/value head's state (m rows, stride ld), one token: with update,
 * S[p] = g_p S[p] + psi_p v (g_p: g[p * gs], or 1 when g is NULL) and acc = phi^T S (S after the
 * update); without, acc = phi^T S alone (a group's further query heads). */
static inline __attribute__((always_inline)) void rec_tile(size_t m, float *restrict S, size_t ld,
                                                           const float *restrict g, size_t gs,
                                                           const float *restrict psi, const float *restrict phi,
                                                           const float *restrict va, float *restrict out, int update) {
  bv acc[BV_NV], vv[BV_NV];
  for (int i = 0; i < BV_NV; i++) acc[i] = (bv){0}, vv[i] = bv_load(va + i * BV_VL);
  for (size_t p = 0; p < m; p++) {
    float *restrict row = S + p * ld;
    const bv qp = bv_set1(phi[p]);
    if (update) {
      const bv kp = bv_set1(psi[p]), gp = bv_set1(g ? g[p * gs] : 1.0f);
      for (int i = 0; i < BV_NV; i++) {
        const bv sv = (g ? gp * bv_load(row + i * BV_VL) : bv_load(row + i * BV_VL)) + kp * vv[i];
        bv_store(row + i * BV_VL, sv);
        acc[i] += qp * sv;
      }
    } else
      for (int i = 0; i < BV_NV; i++) acc[i] += qp * bv_load(row + i * BV_VL);
  }
  for (int i = 0; i < BV_NV; i++) bv_store(out + i * BV_VL, acc[i]);
}

/* One token of key/value head g's state S (and z): every tile updated with the group's first
 * query head's output, then the group's other heads read the updated tiles. */
static void rec_token(const bench_shape *s, float *S, float *z, const float *g, size_t gs, const float *psi,
                      const float *phi, const float *va, float *acc, size_t group) {
  const size_t m = s->m, ld = rec_ld(s);
  for (size_t c0 = 0; c0 < ld; c0 += BV_TILE) {
    if (g)
      rec_tile(m, S + c0, ld, g, gs, psi, phi, va + c0, acc + c0, 1);
    else
      rec_tile(m, S + c0, ld, NULL, 0, psi, phi, va + c0, acc + c0, 1);
    for (size_t j = 1; j < group; j++)
      rec_tile(m, S + c0, ld, NULL, 0, psi, phi + j * m, va + c0, acc + j * ld + c0, 0);
  }
  if (!s->normalize) return;
  for (size_t p = 0; p < m; p++) z[p] = (g ? g[p * gs] * z[p] : z[p]) + psi[p]; /* z = g z + psi */
}

static void recurrent_run(bench_work *w) {
  const bench_shape *s = &w->s;
  const size_t m = s->m, dv = s->dv, ld = rec_ld(s), group = rec_group(s);
  const size_t ho = bench_linear_out_heads(s), hk = bench_linear_k_heads(s);
  float *const state = w->scratch, *const zs = state + s->h_kv * m * ld;
  float *restrict phi = zs + s->h_kv * m, *restrict psi = phi + group * m;
  float *restrict va = psi + m, *restrict acc = va + ld, *restrict alpha = acc + group * ld;
  const attn_gate_kind gate = s->gate;
  /* The log gates of token t, gate head g (the gate head of key/value head g): lg[0] or lg[0..m) */
  const attn_layout gl = bench_gate_layout(s), ql = bench_layout(s->qkv_head_major, s->n_q, s->h_q, s->d),
                    kl = bench_layout(s->qkv_head_major, s->n_kv, hk, s->d),
                    vl = bench_layout(s->qkv_head_major, s->n_kv, s->h_kv, dv),
                    ol = bench_layout(s->qkv_head_major, s->n_q, ho, dv);
  if (s->n_q > 1) memset(state, 0, s->h_kv * m * (ld + 1) * sizeof *state); /* a fresh prefill: S and z */
  memset(va + dv, 0, (ld - dv) * sizeof *va);                               /* v's padding */
  for (size_t t = 0; t < s->n_q; t++) {
    for (size_t g = 0; g < s->h_kv; g++) {
      const size_t h0 = g * group; /* the group's first query head (and output head) */
      const size_t qh = s->qk_shared ? 0 : h0, kh = s->qk_shared ? 0 : g;
      feature(psi, w->k + t * kl.row_stride + kh * kl.head_stride, m, s->map);
      if (s->qk_shared && w->beta) /* Mamba-2's dt, [n][h_kv] */
        for (size_t p = 0; p < m; p++) psi[p] *= w->beta[t * s->h_kv + g];
      for (size_t j = 0; j < group; j++)
        feature(phi + j * m, w->q + t * ql.row_stride + (qh + j) * ql.head_stride, m, s->map);
      memcpy(va, w->v + t * vl.row_stride + g * vl.head_stride, dv * sizeof *va);
      const float *lg = gate != ATTN_GATE_NONE ? w->gate + t * gl.row_stride + g * gl.head_stride : NULL;
      if (gate == ATTN_GATE_FEATURE)
        for (size_t p = 0; p < m; p++) alpha[p] = expf(lg[p]);
      else if (gate == ATTN_GATE_SCALAR)
        alpha[0] = expf(lg[0]);
      rec_token(s, state + g * m * ld, zs + g * m, lg ? alpha : NULL, gate == ATTN_GATE_FEATURE, psi, phi, va, acc,
                group);
      for (size_t j = 0; j < group; j++) { /* o = acc / (phi^T z + eps) */
        float den = RECURRENT_EPS;
        for (size_t p = 0; s->normalize && p < m; p++) den += phi[j * m + p] * zs[g * m + p];
        const float inv = s->normalize ? 1.0f / den : 1.0f;
        float *ot = w->o + t * ol.row_stride + (h0 + j) * ol.head_stride;
        for (size_t c = 0; c < dv; c++) ot[c] = acc[j * ld + c] * inv;
      }
    }
  }
}
