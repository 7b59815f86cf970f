/* gla_mamba2: gated linear attention through attn_linear_gated, in its two common forms.
 *
 * GLA (per-feature gate): S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,  o_t = scale q_t^T S_t.
 * Mamba2 / SSD (one scalar gate per value head): with C, B shared by the heads of a group and
 *   x, dt, A per head:  S_t = exp(dt_t A) S_{t-1} + dt_t B_t x_t^T,  y_t = C_t^T S_t
 *   (attn.h's mapping: q = C, k = B, v = x, beta = dt, log gamma = dt A, scale 1, identity map,
 *   un-normalised, h_q = h_k = groups, h_v = h_g = heads; the caller adds the D x skip term).
 * Each runs a prefill of PROMPT tokens into an attn_linear_state, then STEPS decode calls of one
 * token that continue from that state (an aligned one: its rows on whole 64-byte lines, which
 * the decode step reads and writes fastest). Every output is checked against the token-by-token
 * recurrence above in double.
 *
 * Build by hand: cc -std=c11 -O2 gla_mamba2.c $(pkg-config --cflags --libs --static attn) */
#include <attn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { PROMPT = 100, STEPS = 4, T = PROMPT + STEPS };
enum { H = 4, DK = 32, DV = 32 };        /* GLA: heads, key and value widths */
enum { G = 1, HM = 4, NS = 16, P = 32 }; /* Mamba2: groups, heads, state size N, head dim P */

static float rnd(uint32_t *s) { /* uniform in [-1, 1), fixed seed */
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* The larger of two errors; a NaN wins and stays (fmax would drop it), so a NaN output fails. */
static double max_err(double err, double e) { return (e > err || isnan(e)) ? e : err; }

/* Prefill then decode: the prefill call covers tokens 0 .. PROMPT-1 (desc as given), then one
 * call per token with n_q = n_kv = 1, each input advanced by its row stride. */
static attn_status prefill_and_decode(attn_linear_desc desc, const float *q, const float *k, const float *v,
                                      const float *log_gate, const float *beta, float *o) {
  attn_linear_state state;
  size_t state_bytes = 0, ws_bytes = 0, step_ws_bytes = 0;
  void *state_mem = NULL, *ws = NULL;
  attn_linear_desc step = desc;
  step.shape.n_q = step.shape.n_kv = 1;
  attn_status st = attn_linear_state_size_aligned(&desc, &state_bytes); /* a multiple of 64 */
  if (st == ATTN_OK) st = attn_linear_workspace_size(&desc, &ws_bytes);
  if (st == ATTN_OK) st = attn_linear_workspace_size(&step, &step_ws_bytes);
  if (step_ws_bytes > ws_bytes) ws_bytes = step_ws_bytes;
  if (st == ATTN_OK && (!(state_mem = aligned_alloc(64, state_bytes)) || !(ws = malloc(ws_bytes)))) st = ATTN_E_SYSTEM;
  if (st == ATTN_OK) st = attn_linear_state_init_aligned(&state, &desc, state_mem, state_bytes); /* empty prefix */
  if (st == ATTN_OK) st = attn_linear_gated(&desc, q, k, v, log_gate, beta, o, &state, ws, ws_bytes);
  for (size_t t = PROMPT; t < T && st == ATTN_OK; t++)
    st = attn_linear_gated(&step, q + t * desc.shape.q.row_stride, k + t * desc.shape.k.row_stride,
                           v + t * desc.shape.v.row_stride, log_gate + t * desc.gate_layout.row_stride,
                           beta ? beta + t * desc.beta_layout.row_stride : NULL, o + t * desc.shape.o.row_stride,
                           &state, ws, ws_bytes);
  free(state_mem);
  free(ws);
  return st;
}

int main(void) {
  static float q[T * H * DK], k[T * H * DK], v[T * H * DV], la[T * H * DK], o[T * H * DV];
  static float c_[T * G * NS], b_[T * G * NS], x[T * HM * P], dt[T * HM], ldec[T * HM], y[T * HM * P];
  static double s[H][DK][DV], s2[HM][NS][P]; /* the reference's states, zero: the empty prefix */
  uint32_t seed = 5;

  /* ---- GLA: H heads, per-feature log gates log alpha in [-0.25, -0.01) ---- */
  for (size_t i = 0; i < T * H * DK; i++) {
    q[i] = rnd(&seed), k[i] = rnd(&seed);
    la[i] = -0.13f + 0.12f * rnd(&seed);
  }
  for (size_t i = 0; i < T * H * DV; i++) v[i] = rnd(&seed);
  attn_linear_desc gla;
  attn_status st = attn_linear_desc_init(&gla, PROMPT, PROMPT, H, H, DK, DV, ATTN_FEATURE_IDENTITY);
  gla.normalize = 0;                           /* GLA is un-normalised */
  gla.scale = 1.0f / sqrtf(DK);                /* multiplies q */
  gla.gate = ATTN_GATE_FEATURE;                /* one log alpha per key feature */
  gla.gate_layout = (attn_layout){H * DK, DK}; /* [token][head][DK], like k */
  if (st == ATTN_OK) st = prefill_and_decode(gla, q, k, v, la, NULL, o);

  /* ---- Mamba2: HM heads in G group(s); C, B: [token][group][NS], x: [token][head][P] ---- */
  float a[HM]; /* A_h < 0 (a Mamba2 checkpoint stores A_log = log(-A)) */
  for (size_t h = 0; h < HM; h++) a[h] = -0.5f - 0.25f * (float)h;
  for (size_t i = 0; i < T * G * NS; i++) c_[i] = rnd(&seed), b_[i] = rnd(&seed);
  for (size_t i = 0; i < T * HM * P; i++) x[i] = rnd(&seed);
  for (size_t i = 0; i < T * HM; i++) {
    dt[i] = 0.15f + 0.1f * rnd(&seed); /* dt > 0 (softplus output in a model) */
    ldec[i] = dt[i] * a[i % HM];       /* log gamma = dt A */
  }
  attn_linear_desc m2;
  if (st == ATTN_OK) st = attn_linear_desc_init(&m2, PROMPT, PROMPT, G, G, NS, P, ATTN_FEATURE_IDENTITY);
  /* Heads: h_q = h_k = G, h_v = HM; attn_shape_init writes the token-major layouts for them (o, like
   * x, gets HM heads). */
  if (st == ATTN_OK) st = attn_shape_init(&m2.shape, PROMPT, PROMPT, G, G, HM, NS, P);
  m2.normalize = 0;
  m2.scale = 1.0f;
  m2.gate = ATTN_GATE_SCALAR; /* one log gamma per (token, head) */
  m2.h_g = HM;                /* gate and beta heads: the value heads */
  m2.gate_layout = (attn_layout){HM, 1};
  m2.beta = 1; /* beta = dt scales each key's input */
  m2.beta_layout = (attn_layout){HM, 1};
  if (st == ATTN_OK) st = prefill_and_decode(m2, c_, b_, x, ldec, dt, y);
  if (st != ATTN_OK) {
    printf("gla_mamba2: %s\n", attn_status_string(st));
    return 1;
  }

  /* Reference: the recurrences, token by token, in double. */
  double err_gla = 0.0, err_m2 = 0.0;
  for (size_t t = 0; t < T; t++)
    for (size_t h = 0; h < H; h++) {
      const size_t r = t * H + h;
      for (size_t f = 0; f < DK; f++)
        for (size_t c = 0; c < DV; c++)
          s[h][f][c] = exp(la[r * DK + f]) * s[h][f][c] + (double)k[r * DK + f] * v[r * DV + c];
      for (size_t c = 0; c < DV; c++) {
        double acc = 0.0;
        for (size_t f = 0; f < DK; f++) acc += (double)q[r * DK + f] * s[h][f][c];
        err_gla = max_err(err_gla, fabs(acc / sqrt((double)DK) - o[r * DV + c]));
      }
    }
  for (size_t t = 0; t < T; t++)
    for (size_t h = 0; h < HM; h++) {
      const size_t r = t * HM + h, g = t * G + h / (HM / G); /* the head's row of C and B */
      for (size_t n = 0; n < NS; n++)
        for (size_t c = 0; c < P; c++)
          s2[h][n][c] = exp(ldec[r]) * s2[h][n][c] + (double)dt[r] * b_[g * NS + n] * x[r * P + c];
      for (size_t c = 0; c < P; c++) {
        double acc = 0.0;
        for (size_t n = 0; n < NS; n++) acc += (double)c_[g * NS + n] * s2[h][n][c];
        err_m2 = max_err(err_m2, fabs(acc - y[r * P + c]));
      }
    }

  /* Tolerance: each output (of order 1 here) is an fp32 sum over DK or NS features of states that
   * are fp32 sums of decayed terms from earlier tokens (the gates leave a few dozen that count),
   * summed chunk-wise in another order than the recurrence: a few fp32 ulps of the terms. */
  const double tol = 2e-5;
  const int ok = err_gla <= tol && err_m2 <= tol; /* false for NaN */
  printf("gla_mamba2: max |err| GLA %.1e, Mamba2 %.1e (tolerance %.0e): %s\n", err_gla, err_m2, tol,
         ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
