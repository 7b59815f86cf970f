/*
 * check_baselines.c: the bench's own token loops compute what attn computes (test
 * `bench-baselines`). A baseline that computes something else says nothing, and a fast one is
 * easy to get wrong: the recurrent loop (every map, gate, normaliser (not the identity map's,
 * whose denominator phi(q)^T z takes either sign and may vanish), layout, a group of query
 * heads, a dv that is not whole tiles; a prefill then decode steps that continue its state)
 * against attn_linear_gated with a state, Mamba-2's shape (q and k shared by every state head) too, and the delta loop (GDN, KDA, DeltaNet, grouped value
 * heads, a d and dv that are not whole tiles) against attn_delta, on the same inputs. Tolerance:
 * 1e-4 of the largest output plus 1e-5 (float sums of ~100 terms of size ~1 in two orders; the
 * loops are built with -ffast-math).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

static float *fill(size_t n, unsigned *s, float lo, float hi) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; p && i < n; i++) p[i] = lo + (hi - lo) * 0.5f * (frand(s) + 1.0f);
  return p;
}

/* Largest |a - b| over n against the tolerance of b's largest |b|; prints the case when it fails. */
static int agree(const char *what, const float *a, const float *b, size_t n) {
  double err = 0, big = 0;
  for (size_t i = 0; i < n; i++) {
    const double e = fabs((double)a[i] - b[i]);
    err = e > err || e != e ? e : err;
    big = fabs(b[i]) > big ? fabs(b[i]) : big;
  }
  if (err <= 1e-4 * big + 1e-5) return 0;
  printf("FAIL %s: largest error %.3g, largest output %.3g\n", what, err, big);
  return 1;
}

/* A causal shape of n tokens (prefill), m = d. */
static bench_shape check_shape(bench_kind kind, size_t n, size_t h_q, size_t h_kv, size_t d, size_t dv,
                               int head_major) {
  bench_shape s;
  memset(&s, 0, sizeof s);
  s.kind = kind, s.n_q = s.n_kv = n, s.h_q = h_q, s.h_kv = h_kv, s.d = s.m = d, s.dv = dv;
  s.causal = 1, s.qkv_head_major = head_major;
  return s;
}

/* The recurrent loop against attn_linear_gated: a prefill of n tokens, then `steps` decode steps.
 * shared: Mamba-2's shape (bench_shape.qk_shared: q and k one head, three state heads). */
static int check_recurrent(const bench_call *loop, attn_feature_map map, int normalize, attn_gate_kind gate, int fixed,
                           size_t group, size_t dv, int head_major, int shared) {
  const size_t n = 37, steps = 3, all = n + steps, d = 48;
  const size_t hv = shared ? 3 : 2, hk = shared ? 1 : hv, hq = shared ? 1 : hv * group, ho = shared ? hv : hq;
  bench_shape s = check_shape(BENCH_RECURRENT, n, hq, hv, d, dv, head_major);
  s.normalize = normalize, s.map = map, s.gate = gate, s.fixed_decay = fixed, s.qk_shared = shared;
  unsigned seed = 7;
  const size_t gw = bench_gate_width(&s);
  float *q = fill(all * hq * d, &seed, -1, 1), *k = fill(all * hk * d, &seed, -1, 1);
  float *v = fill(all * hv * dv, &seed, -1, 1), *lg = fill(all * hv * gw, &seed, -0.5f, -0.01f);
  float *o = calloc(all * ho * dv, sizeof *o), *ref = calloc(all * ho * dv, sizeof *ref);
  float *dt = shared ? fill(all * hv, &seed, 0.05f, 1.0f) : NULL; /* Mamba-2's dt, its beta: [n][h_v] */
  char name[160];
  snprintf(name, sizeof name, "recurrent map %d norm %d gate %d%s group %zu dv %zu %s%s", (int)map, normalize,
           (int)gate, fixed ? " fixed" : "", group, dv, head_major ? "head-major" : "token-major",
           shared ? " shared q, k" : "");
  int bad = 1;
  attn_linear_desc desc;
  attn_linear_state st;
  size_t sb = 0, wb = 0;
  void *sm = NULL, *ws = NULL;
  bench_work w = {.s = s, .gate = gate != ATTN_GATE_NONE ? lg : NULL};
  char err[128];
  if (!q || !k || !v || !lg || !o || !ref || (shared && !dt) || loop->setup(&w, err, sizeof err)) goto done;
  /* both run one call of n tokens, then one call per token; head-major rows are per call */
  for (size_t t0 = 0, len = n; t0 < all; t0 += len, len = 1) {
    const attn_layout ql = bench_layout(head_major, len, hq, d), kl = bench_layout(head_major, len, hk, d),
                      vl = bench_layout(head_major, len, hv, dv), ol = bench_layout(head_major, len, ho, dv);
    float *cq = q + t0 * hq * d, *ck = k + t0 * hk * d, *cv = v + t0 * hv * dv, *cl = lg + t0 * hv * gw;
    w.s.n_q = w.s.n_kv = len;
    w.q = cq, w.k = ck, w.v = cv, w.o = o + t0 * ho * dv;
    if (gate != ATTN_GATE_NONE) w.gate = fixed ? lg : cl;
    w.beta = dt ? dt + t0 * hv : NULL;
    loop->run(&w);
    attn_linear_desc_init(&desc, len, len, hq, hk, d, dv, map);
    desc.shape.h_v = hv;
    desc.shape.q = ql, desc.shape.k = kl, desc.shape.v = vl, desc.shape.o = ol;
    desc.mask = attn_mask_causal();
    desc.normalize = normalize;
    if (gate != ATTN_GATE_NONE) {
      desc.gate = gate, desc.h_g = hv;
      desc.gate_layout = fixed ? (attn_layout){0, 1} : (attn_layout){hv * gw, gw};
    }
    if (dt) desc.beta = 1, desc.beta_layout = (attn_layout){hv, 1};
    if (!sm) {
      if (attn_linear_state_size(&desc, &sb) || !(sm = malloc(sb)) || attn_linear_state_init(&st, &desc, sm, sb))
        goto done;
    }
    size_t need;
    if (attn_linear_workspace_size(&desc, &need)) goto done;
    if (need > wb) {
      free(ws);
      if (!(ws = malloc(wb = need))) goto done;
    }
    const attn_status rc = attn_linear_gated(&desc, cq, ck, cv, gate != ATTN_GATE_NONE ? (fixed ? lg : cl) : NULL,
                                             w.beta, ref + t0 * ho * dv, &st, ws, wb);
    if (rc != ATTN_OK) {
      printf("FAIL %s: attn_linear_gated: %s\n", name, attn_status_name(rc));
      goto done;
    }
  }
  bad = agree(name, o, ref, all * ho * dv);
done:
  if (bad && !o) printf("FAIL %s: out of memory\n", name);
  free(q), free(k), free(v), free(lg), free(o), free(ref), free(dt), free(sm), free(ws), free(w.scratch);
  return bad;
}

/* The delta loop's prefill (from a zero state) against attn_delta's. */
static int check_delta(attn_delta_gate gate, size_t d, size_t dv, size_t group, int head_major) {
  const size_t n = 29, hk = 2, hv = hk * group;
  bench_shape s = check_shape(BENCH_DELTA_LOOP, n, hk, hv, d, dv, head_major);
  s.delta_gate = gate;
  unsigned seed = 11;
  const size_t gw = bench_delta_gate_width(&s);
  float *q = fill(n * hk * d, &seed, -1, 1), *k = fill(n * hk * d, &seed, -1, 1), *v = fill(n * hv * dv, &seed, -1, 1);
  float *lg = fill(n * hv * gw, &seed, -0.5f, -0.01f), *beta = fill(n * hv, &seed, 0.05f, 1.0f);
  float *o = calloc(n * hv * dv, sizeof *o), *ref = calloc(n * hv * dv, sizeof *ref);
  char name[128];
  snprintf(name, sizeof name, "delta gate %d d %zu dv %zu group %zu %s", (int)gate, d, dv, group,
           head_major ? "head-major" : "token-major");
  int bad = 1;
  bench_work w = {.s = s, .q = q, .k = k, .v = v, .o = o, .gate = gw ? lg : NULL, .beta = beta};
  attn_delta_desc desc;
  attn_delta_desc_init(&desc, n, hk, hv, d, dv, gate);
  desc.shape.q = desc.shape.k = bench_layout(head_major, n, hk, d);
  desc.shape.v = desc.shape.o = bench_layout(head_major, n, hv, dv);
  size_t sb, wb;
  float *S = NULL;
  void *ws = NULL;
  char err[128];
  if (!q || !k || !v || !lg || !beta || !o || !ref || bench_delta_loop_call.setup(&w, err, sizeof err)) goto done;
  bench_delta_loop_call.run(&w);
  if (attn_delta_state_size(&desc, &sb) || attn_delta_workspace_size(&desc, &wb) || !(S = calloc(1, sb)) ||
      !(ws = malloc(wb ? wb : 1)))
    goto done;
  const attn_status rc = attn_delta(&desc, q, k, v, gw ? lg : NULL, beta, ref, S, NULL, ws, wb);
  if (rc != ATTN_OK) {
    printf("FAIL %s: attn_delta: %s\n", name, attn_status_name(rc));
    goto done;
  }
  bad = agree(name, o, ref, n * hv * dv);
done:
  free(q), free(k), free(v), free(lg), free(beta), free(o), free(ref), free(S), free(ws), free(w.scratch);
  return bad;
}

int main(void) {
  bench_baseline_info info[BENCH_BASE_COUNT];
  bench_baselines_init(info);
  const bench_call *loop = info[BENCH_BASE_RECURRENT].call;
  static const attn_feature_map maps[] = {ATTN_FEATURE_IDENTITY, ATTN_FEATURE_ELU1, ATTN_FEATURE_RELU};
  static const attn_gate_kind gates[] = {ATTN_GATE_NONE, ATTN_GATE_SCALAR, ATTN_GATE_FEATURE};
  int bad = 0, cases = 0;
  for (size_t mi = 0; mi < 3; mi++)
    for (int norm = 0; norm <= (maps[mi] != ATTN_FEATURE_IDENTITY); norm++) /* identity's phi^T z may vanish */
      for (size_t gi = 0; gi < 3; gi++)
        for (int fixed = 0; fixed <= (gates[gi] == ATTN_GATE_SCALAR); fixed++)
          for (size_t group = 1; group <= 2; group++)
            for (size_t dv = 40; dv <= 64; dv += 24)
              for (int hm = 0; hm < 2; hm++, cases++)
                bad += check_recurrent(loop, maps[mi], norm, gates[gi], fixed, group, dv, hm, 0);
  /* Mamba-2's shape (the linear_mamba2 rows): q and k shared by every state head, a scalar gate, dt as beta */
  for (size_t dv = 40; dv <= 64; dv += 24)
    for (int hm = 0; hm < 2; hm++, cases++)
      bad += check_recurrent(loop, ATTN_FEATURE_IDENTITY, 0, ATTN_GATE_SCALAR, 0, 1, dv, hm, 1);
  static const attn_delta_gate dg[] = {ATTN_DELTA_PLAIN, ATTN_DELTA_SCALAR, ATTN_DELTA_FEATURE};
  for (size_t gi = 0; gi < 3; gi++)
    for (size_t d = 37; d <= 64; d += 27)
      for (size_t group = 1; group <= 2; group++)
        for (int hm = 0; hm < 2; hm++, cases++) bad += check_delta(dg[gi], d, d == 64 ? 64 : 50, group, hm);
  printf("%d of %d baseline cases agree with attn\n", cases - bad, cases);
  return bad != 0;
}
