/* chunked_prefill_merge: the two shapes of softmax attention an inference engine runs besides a
 * plain prefill.
 *
 * 1. Chunked prefill: the first PREFIX tokens' keys and values are already cached, and a chunk of
 *    CHUNK new tokens attends over the cache plus itself (n_q < n_kv). The causal mask is aligned
 *    bottom-right: new query i sits at position n_kv - n_q + i and sees keys 0 .. that position.
 * 2. Split-KV decode: one query over all N keys, computed as two calls over two halves of the keys,
 *    each returning its log-sum-exp (LSE), then merged with attn_softmax_merge. The merge gives the
 *    one-call result (within rounding) and the LSE of all the keys.
 * Both are checked against a plain double-precision loop.
 *
 * Build by hand: cc -std=c11 -O2 chunked_prefill_merge.c $(pkg-config --cflags --libs --static attn) */
#include <attn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { PREFIX = 192, CHUNK = 64, N = PREFIX + CHUNK, HQ = 4, HKV = 2, D = 64, SPLIT = 160 };

static float rnd(uint32_t *s) { /* uniform in [-1, 1), fixed seed */
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* The larger of two errors; a NaN wins and stays (fmax would drop it), so a NaN output fails. */
static double max_err(double err, double e) { return (e > err || isnan(e)) ? e : err; }

/* Reference: query row qi of head h (K/V head g) over keys [lo, hi) in double; returns its LSE. */
static double ref_row(const float *qi, const float *k, const float *v, size_t g, size_t lo, size_t hi, double *out) {
  double s[N], mx = -INFINITY, sum = 0.0;
  for (size_t j = lo; j < hi; j++) {
    s[j] = 0.0;
    for (size_t c = 0; c < D; c++) s[j] += (double)qi[c] * k[(j * HKV + g) * D + c];
    s[j] /= sqrt((double)D);
    mx = fmax(mx, s[j]);
  }
  for (size_t j = lo; j < hi; j++) sum += (s[j] = exp(s[j] - mx));
  for (size_t c = 0; c < D; c++) {
    out[c] = 0.0;
    for (size_t j = lo; j < hi; j++) out[c] += s[j] * v[(j * HKV + g) * D + c] / sum;
  }
  return mx + log(sum);
}

/* One softmax call over n_q queries and n_kv keys, with the workspace it asks for. */
static attn_status run(const attn_softmax_desc *desc, const float *q, const float *k, const float *v, float *o,
                       float *lse) {
  size_t bytes = 0;
  attn_status st = attn_softmax_workspace_size(desc, &bytes);
  void *ws = st == ATTN_OK ? malloc(bytes) : NULL;
  if (st == ATTN_OK) st = ws ? attn_softmax(desc, q, k, v, o, lse, ws, bytes) : ATTN_E_SYSTEM;
  free(ws);
  return st;
}

int main(void) {
  /* The whole sequence's q, k, v in the token-major layout [token][head][dim]. */
  static float q[N * HQ * D], k[N * HKV * D], v[N * HKV * D];
  static float o_chunk[CHUNK * HQ * D], o_parts[2][HQ * D], lse_parts[2][HQ], o_merged[HQ * D], lse_merged[HQ];
  static float o_one[HQ * D], lse_one[HQ];
  uint32_t seed = 3;
  for (size_t i = 0; i < N * HQ * D; i++) q[i] = rnd(&seed);
  for (size_t i = 0; i < N * HKV * D; i++) k[i] = rnd(&seed), v[i] = rnd(&seed);

  /* 1. Chunked prefill: n_q = CHUNK new queries (the last CHUNK rows of q) over n_kv = N keys. */
  attn_softmax_desc desc;
  attn_status st = attn_softmax_desc_init(&desc, CHUNK, N, HQ, HKV, D, D);
  desc.mask = attn_mask_causal(); /* bottom-right: new query i sits at position PREFIX + i */
  if (st == ATTN_OK) st = run(&desc, q + PREFIX * HQ * D, k, v, o_chunk, NULL);

  /* 2. Split-KV decode of the last token (position N - 1, which sees every key): part 0 has keys
   *    0 .. SPLIT-1, part 1 keys SPLIT .. N-1. Each part is a full-mask call with its own LSE. */
  const float *q_last = q + (N - 1) * HQ * D;
  const size_t part_lo[2] = {0, SPLIT}, part_n[2] = {SPLIT, N - SPLIT};
  for (int c = 0; c < 2 && st == ATTN_OK; c++) {
    st = attn_softmax_desc_init(&desc, 1, part_n[c], HQ, HKV, D, D);
    if (st == ATTN_OK)
      st = run(&desc, q_last, k + part_lo[c] * HKV * D, v + part_lo[c] * HKV * D, o_parts[c], lse_parts[c]);
  }
  /* Merge: HQ rows (one per head) of D floats; the rows are D apart and the LSEs 1 apart. */
  const float *o_ptrs[2] = {o_parts[0], o_parts[1]}, *lse_ptrs[2] = {lse_parts[0], lse_parts[1]};
  if (st == ATTN_OK) st = attn_softmax_merge(HQ, D, 2, o_ptrs, D, lse_ptrs, 1, o_merged, D, lse_merged, 1);
  /* The same decode as one call over all N keys, for comparison. */
  if (st == ATTN_OK) st = attn_softmax_desc_init(&desc, 1, N, HQ, HKV, D, D);
  if (st == ATTN_OK) st = run(&desc, q_last, k, v, o_one, lse_one);
  if (st != ATTN_OK) {
    printf("chunked_prefill_merge: %s\n", attn_status_string(st));
    return 1;
  }

  /* Check the chunk against the double loop: new query i (position p = PREFIX + i) sees keys 0..p. */
  double ref[D], err_chunk = 0.0, err_merge = 0.0, err_vs_one = 0.0;
  for (size_t i = 0; i < CHUNK; i++)
    for (size_t h = 0; h < HQ; h++) {
      const size_t p = PREFIX + i, g = h / (HQ / HKV);
      ref_row(q + (p * HQ + h) * D, k, v, g, 0, p + 1, ref);
      for (size_t c = 0; c < D; c++) err_chunk = max_err(err_chunk, fabs(ref[c] - o_chunk[(i * HQ + h) * D + c]));
    }
  /* Check the merged decode against the double loop over all keys, and against the one call. */
  for (size_t h = 0; h < HQ; h++) {
    const double lse = ref_row(q_last + h * D, k, v, h / (HQ / HKV), 0, N, ref);
    err_merge = max_err(err_merge, fabs(lse - lse_merged[h]));
    err_vs_one = max_err(err_vs_one, fabs((double)lse_one[h] - lse_merged[h]));
    for (size_t c = 0; c < D; c++) {
      err_merge = max_err(err_merge, fabs(ref[c] - o_merged[h * D + c]));
      err_vs_one = max_err(err_vs_one, fabs((double)o_one[h * D + c] - o_merged[h * D + c]));
    }
  }

  /* Tolerances: against double, logits are fp32 sums of D = 64 products and outputs fp32 sums of
   * up to N = 256 weighted values (plus exp's 2^-22 relative error): 2e-5 is ample. The merge
   * against the single call differs only by the merge's rescaling of two fp32 partial results. */
  const double tol = 2e-5, tol_one = 1e-5;
  const int ok = err_chunk <= tol && err_merge <= tol && err_vs_one <= tol_one; /* false for NaN */
  printf(
      "chunked_prefill_merge: max |err| chunk %.1e, merged decode %.1e (tolerance %.0e), merged vs one call "
      "%.1e (tolerance %.0e): %s\n",
      err_chunk, err_merge, tol, err_vs_one, tol_one, ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
