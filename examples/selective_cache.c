/* selective_cache: selective attention, and its KV cache that prunes the tokens the model has
 * selected away so that decode keeps a fixed budget of live tokens.
 *
 * Selective attention (attn.h): the selecting head h_sel's scores, relu'd, accumulate into a mask
 *   F_pj = sum_{j < k < p} relu(s^(h_sel)_kj)   (BOS, token 0, is never selected; F_pp = 0)
 * that every head subtracts from its logits: o_p = sum_{j <= p} softmax_j(s_pj - F_pj) v_j.
 * The library carries F as one running column sum per key (the array f).
 *
 * Shows: a prefill of PROMPT tokens with attn_selective (which returns f), an attn_selcache bound
 * to caller memory and loaded with the prefill's K, V and f, then STEPS decode steps with
 * attn_selcache_step under a budget of BUDGET live tokens: once more than BUDGET tokens are live,
 * each step evicts the one with the largest F. The prefill and every step before the first
 * eviction equal full selective attention over the whole sequence; they are checked against a
 * double-precision loop of the definition above. Later steps attend over the kept tokens only.
 *
 * Build by hand: cc -std=c11 -O2 selective_cache.c $(pkg-config --cflags --libs --static attn) */
#include <attn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { PROMPT = 40, STEPS = 16, L = PROMPT + STEPS, BUDGET = 48, HQ = 4, HKV = 2, D = 32, H_SEL = 0 };

static float rnd(uint32_t *s) { /* uniform in [-1, 1), fixed seed */
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* The larger of two errors; a NaN wins and stays (fmax would drop it), so a NaN output fails. */
static double max_err(double err, double e) { return (e > err || isnan(e)) ? e : err; }

int main(void) {
  static float q[L * HQ * D], k[L * HKV * D], v[L * HKV * D], o[L * HQ * D], f[PROMPT];
  static double ref[L * HQ * D], fcol[L], s[HQ][L];
  uint32_t seed = 7;
  for (size_t i = 0; i < L * HQ * D; i++) q[i] = rnd(&seed);
  for (size_t i = 0; i < L * HKV * D; i++) k[i] = rnd(&seed), v[i] = rnd(&seed);

  /* Prefill: tokens 0 .. PROMPT-1, a fresh sequence (f all zero); causal, scale 1/sqrt(D). */
  attn_selective_desc desc;
  size_t ws_bytes = 0, mem_bytes = 0, step_ws_bytes = 0;
  void *ws = NULL, *mem = NULL, *step_ws = NULL;
  attn_status st = attn_selective_desc_init(&desc, PROMPT, PROMPT, HQ, HKV, D, D);
  desc.h_sel = H_SEL;
  if (st == ATTN_OK) st = attn_selective_workspace_size(&desc, &ws_bytes);
  if (st == ATTN_OK && !(ws = malloc(ws_bytes))) st = ATTN_E_SYSTEM;
  if (st == ATTN_OK) st = attn_selective(&desc, q, k, v, o, NULL, f, ws, ws_bytes);

  /* The cache: BUDGET + 1 slots (a step needs one for its new token), no threshold (tau = +inf),
   * at most BUDGET live tokens after each step. Load it with the prefill's K, V and f. */
  attn_selcache cache;
  if (st == ATTN_OK) st = attn_selcache_size(BUDGET + 1, HKV, D, D, &mem_bytes);
  if (st == ATTN_OK && !(mem = malloc(mem_bytes))) st = ATTN_E_SYSTEM;
  if (st == ATTN_OK) st = attn_selcache_init(&cache, BUDGET + 1, HKV, D, D, INFINITY, BUDGET, mem, mem_bytes);
  if (st == ATTN_OK) st = attn_selcache_load(&cache, &desc, k, v, f);

  /* Decode: one token per step (n_q = n_kv = 1). steps_exact counts the steps whose output is
   * full selective attention's: those that start before any token was evicted. */
  attn_selective_desc step;
  size_t steps_exact = 0;
  if (st == ATTN_OK) st = attn_selective_desc_init(&step, 1, 1, HQ, HKV, D, D);
  step.h_sel = H_SEL;
  if (st == ATTN_OK) st = attn_selcache_workspace_size(&step, &cache, &step_ws_bytes);
  if (st == ATTN_OK && !(step_ws = malloc(step_ws_bytes))) st = ATTN_E_SYSTEM;
  for (size_t t = PROMPT; t < L && st == ATTN_OK; t++) {
    if (cache.evicted == 0) steps_exact++;
    st = attn_selcache_step(&step, &cache, q + t * HQ * D, k + t * HKV * D, v + t * HKV * D, o + t * HQ * D, NULL,
                            step_ws, step_ws_bytes);
  }
  if (st != ATTN_OK) {
    printf("selective_cache: %s\n", attn_status_string(st));
    return 1;
  }

  /* Reference over the whole sequence without pruning. Before query p, fcol[j] holds
   * sum_{j < k < p} relu(s^(h_sel)_kj), which is F_pj; query p then adds its own selections. */
  for (size_t p = 0; p < L; p++) {
    for (size_t h = 0; h < HQ; h++) {
      const size_t g = h / (HQ / HKV);
      double mx = -INFINITY, sum = 0.0;
      for (size_t j = 0; j <= p; j++) {
        double dot = 0.0;
        for (size_t c = 0; c < D; c++) dot += (double)q[(p * HQ + h) * D + c] * k[(j * HKV + g) * D + c];
        s[h][j] = dot / sqrt((double)D);
        mx = fmax(mx, s[h][j] - fcol[j]);
      }
      for (size_t c = 0; c < D; c++) ref[(p * HQ + h) * D + c] = 0.0;
      for (size_t j = 0; j <= p; j++) {
        const double w = exp(s[h][j] - fcol[j] - mx);
        sum += w;
        for (size_t c = 0; c < D; c++) ref[(p * HQ + h) * D + c] += w * v[(j * HKV + g) * D + c];
      }
      for (size_t c = 0; c < D; c++) ref[(p * HQ + h) * D + c] /= sum;
    }
    for (size_t j = 1; j < p; j++) fcol[j] += fmax(s[H_SEL][j], 0.0); /* not BOS, not itself */
  }

  /* Compare the prefill rows and the exact steps' rows. */
  double err = 0.0;
  for (size_t i = 0; i < (PROMPT + steps_exact) * HQ * D; i++) err = max_err(err, fabs(ref[i] - o[i]));
  /* Tolerance: logits are fp32 sums of D = 32 products minus F, itself an fp32 sum of up to L
   * relu'd logits (a few units), and outputs fp32 weighted sums of up to L values: rounding stays
   * near 1e-6. */
  const double tol = 2e-5;
  const int ok = err <= tol && steps_exact >= 1 && cache.live == BUDGET && cache.evicted == L - BUDGET;
  printf(
      "selective_cache: max |err| %.1e over the prefill and %zu exact steps (tolerance %.0e); %zu live tokens "
      "of budget %d after %d steps, %zu evicted: %s\n",
      err, steps_exact, tol, cache.live, BUDGET, STEPS, cache.evicted, ok ? "ok" : "MISMATCH");
  free(ws), free(mem), free(step_ws);
  return ok ? 0 : 1;
}
