/* gqa_prefill: causal softmax attention over a whole prompt with grouped-query heads (GQA).
 *
 * Shows: attn_softmax_desc_init with fewer key/value heads than query heads, the causal mask, the
 * token-major layout [token][head][dim] that desc_init writes, the workspace that
 * attn_softmax_workspace_size asks for, and the log-sum-exp (LSE) output that a later merge or a
 * backward pass needs. The result is checked against a plain double-precision loop.
 *
 * Build by hand: cc -std=c11 -O2 gqa_prefill.c $(pkg-config --cflags --libs --static attn) */
#include <attn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 300, HQ = 8, HKV = 2, D = 128 }; /* 8 query heads share 2 K/V heads: groups of 4 */

/* Uniform floats in [-1, 1) from a fixed seed, so every run sees the same inputs. */
static float rnd(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* The larger of two errors; a NaN wins and stays (fmax would drop it), so a NaN output fails. */
static double max_err(double err, double e) { return (e > err || isnan(e)) ? e : err; }

int main(void) {
  float *q = malloc(sizeof(float) * N * HQ * D), *k = malloc(sizeof(float) * N * HKV * D);
  float *v = malloc(sizeof(float) * N * HKV * D), *o = malloc(sizeof(float) * N * HQ * D);
  float *lse = malloc(sizeof(float) * N * HQ);
  double *p = malloc(sizeof(double) * N);
  if (!q || !k || !v || !o || !lse || !p) return 1;
  uint32_t seed = 1;
  for (size_t i = 0; i < (size_t)N * HQ * D; i++) q[i] = rnd(&seed);
  for (size_t i = 0; i < (size_t)N * HKV * D; i++) k[i] = rnd(&seed), v[i] = rnd(&seed);

  /* One descriptor for the whole call: n_q = n_kv = N (a prompt), HQ query heads over HKV
   * key/value heads, head width D for q, k and v. desc_init sets scale 1/sqrt(D), a full mask and
   * token-major layouts (q row stride HQ*D, head stride D; LSE [token][head]). */
  attn_softmax_desc desc;
  attn_status st = attn_softmax_desc_init(&desc, N, N, HQ, HKV, D, D);
  desc.mask = attn_mask_causal(); /* query i sees keys 0..i */

  /* Scratch memory: its size depends on the heads, widths and ISA path, not on N. */
  size_t ws_bytes = 0;
  void *ws = NULL;
  if (st == ATTN_OK) st = attn_softmax_workspace_size(&desc, &ws_bytes);
  if (st == ATTN_OK && !(ws = malloc(ws_bytes))) return 1;
  if (st == ATTN_OK) st = attn_softmax(&desc, q, k, v, o, lse, ws, ws_bytes);
  if (st != ATTN_OK) {
    printf("gqa_prefill: %s\n", attn_status_string(st));
    return 1;
  }

  /* Reference in double: query head h reads K/V head h / (HQ / HKV); row i sees keys j <= i. */
  double err = 0.0;
  const double scale = 1.0 / sqrt((double)D);
  for (size_t i = 0; i < N; i++) {
    for (size_t h = 0; h < HQ; h++) {
      const size_t g = h / (HQ / HKV);
      const float *qi = q + (i * HQ + h) * D;
      double mx = -INFINITY, sum = 0.0;
      for (size_t j = 0; j <= i; j++) {
        const float *kj = k + (j * HKV + g) * D;
        double s = 0.0;
        for (size_t c = 0; c < D; c++) s += (double)qi[c] * kj[c];
        p[j] = s * scale;
        if (p[j] > mx) mx = p[j];
      }
      for (size_t j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
      for (size_t c = 0; c < D; c++) {
        double acc = 0.0;
        for (size_t j = 0; j <= i; j++) acc += p[j] * v[(j * HKV + g) * D + c];
        err = max_err(err, fabs(acc / sum - o[(i * HQ + h) * D + c]));
      }
      err = max_err(err, fabs(mx + log(sum) - lse[i * HQ + h]));
    }
  }

  /* Tolerance: each logit is an fp32 sum of D = 128 products and each output an fp32 weighted sum
   * of up to N = 300 values (plus the vectorised exp's 2^-22 relative error): a few 1e-6 at most. */
  const double tol = 2e-5;
  const int ok = err <= tol; /* false for a NaN too */
  printf("gqa_prefill: max |err| %.1e (tolerance %.0e): %s\n", err, tol, ok ? "ok" : "MISMATCH");
  free(q), free(k), free(v), free(o), free(lse), free(p), free(ws);
  return ok ? 0 : 1;
}
