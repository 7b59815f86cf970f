/*
 * Gated DeltaNet (Qwen3-Next's linear-attention layer) with attn_delta: a prompt's prefill that
 * keeps the state at the end of a shared prefix (prefix caching), a second prompt that starts
 * from that checkpoint instead of the prefix's tokens, and a speculative block of four draft
 * tokens whose per-token checkpoints let the engine roll back to the last accepted one.
 * Checks every output against a plain double loop of the recurrence, to 1e-5: the outputs are
 * O(0.1) and with |k| = 1 and beta < 1 each token's update is a contraction, so fp32's rounding
 * (~1e-7 relative per product) does not grow with the sequence.
 */
#include <attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H_K = 2, H_V = 4, D = 32, N = 100, PREFIX = 64, DRAFT = 4, ACCEPT = 2 };

/* The recurrence in double, one token at a time (attn.h's definition), for value head h. */
static void ref_token(double *S, const float *q, const float *k, const float *v, float g, float beta, float scale,
                      double *o) {
  double qn = 0, kn = 0, u[D];
  for (int f = 0; f < D; f++) qn += (double)q[f] * q[f];
  for (int f = 0; f < D; f++) kn += (double)k[f] * k[f];
  qn = 1 / sqrt(qn + 1e-6), kn = 1 / sqrt(kn + 1e-6);
  for (int f = 0; f < D * D; f++) S[f] *= exp(g); /* decay */
  for (int c = 0; c < D; c++) {
    u[c] = 0;
    for (int f = 0; f < D; f++) u[c] += S[f * D + c] * k[f] * kn;
  }
  for (int f = 0; f < D; f++)
    for (int c = 0; c < D; c++) S[f * D + c] += k[f] * kn * beta * (v[c] - u[c]);
  for (int c = 0; c < D; c++) {
    o[c] = 0;
    for (int f = 0; f < D; f++) o[c] += S[f * D + c] * q[f] * qn * scale;
  }
}

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Token t's inputs, token-major: q, k [t][H_K][D]; v [t][H_V][D]; log gate and beta [t][H_V]. */
typedef struct seq {
  float q[N + DRAFT][H_K][D], k[N + DRAFT][H_K][D], v[N + DRAFT][H_V][D], g[N + DRAFT][H_V], beta[N + DRAFT][H_V];
} seq;

static int check(const char *what, const seq *x, size_t t0, size_t n, const float *o, double *S) {
  double worst = 0;
  for (size_t t = t0; t < t0 + n; t++)
    for (int h = 0; h < H_V; h++) {
      double r[D];
      ref_token(S + h * D * D, x->q[t][h / (H_V / H_K)], x->k[t][h / (H_V / H_K)], x->v[t][h], x->g[t][h],
                x->beta[t][h], 1.0f / sqrtf(D), r);
      for (int c = 0; c < D; c++) {
        const double e = fabs(o[((t - t0) * H_V + h) * D + c] - r[c]);
        if (!(e <= worst)) worst = e; /* NaN too */
      }
    }
  printf("%-44s max |attn - double loop| = %.1e\n", what, worst);
  return worst < 1e-5;
}

int main(void) {
  static seq x;
  unsigned s = 7;
  for (size_t t = 0; t < N + DRAFT; t++)
    for (int h = 0; h < H_V; h++) {
      for (int f = 0; f < D; f++)
        x.v[t][h][f] = frand(&s), x.q[t][h % H_K][f] = frand(&s), x.k[t][h % H_K][f] = frand(&s);
      x.g[t][h] = -0.1f * fabsf(frand(&s)); /* log gates <= 0 */
      x.beta[t][h] = 0.5f + 0.4f * frand(&s);
    }

  /* The prompt: N tokens, the state kept after token PREFIX - 1 (the shared prefix's end). */
  attn_delta_desc d;
  attn_delta_desc_init(&d, N, H_K, H_V, D, D, ATTN_DELTA_SCALAR); /* qk_l2norm = 1, scale 1/sqrt(D) */
  size_t state_bytes, ws_bytes;
  attn_delta_state_size(&d, &state_bytes);  /* H_V * D * D floats: [h_v][d_k][d_v] */
  attn_delta_workspace_size(&d, &ws_bytes); /* scratch: no allocation inside */
  float *state = calloc(1, state_bytes), *prefix_state = malloc(state_bytes), *o = malloc(N * H_V * D * sizeof(float));
  void *ws = malloc(ws_bytes);
  const size_t after_prefix[] = {PREFIX - 1};
  const attn_checkpoints ck = {1, after_prefix, prefix_state};
  attn_status st = attn_delta(&d, &x.q[0][0][0], &x.k[0][0][0], &x.v[0][0][0], &x.g[0][0], &x.beta[0][0], o, state, &ck,
                              ws, ws_bytes);
  if (st != ATTN_OK) return fprintf(stderr, "%s: %s\n", attn_status_name(st), attn_last_error()), 1;
  double *S = calloc(H_V * D * D, sizeof(double)), *S_prefix = malloc(H_V * D * D * sizeof(double));
  int ok = check("prompt of 100 tokens", &x, 0, PREFIX, o, S);
  memcpy(S_prefix, S, H_V * D * D * sizeof(double));
  ok &= check("prompt, after the prefix", &x, PREFIX, N - PREFIX, o + PREFIX * H_V * D, S);

  /* A second prompt sharing the prefix: start from the checkpoint, prefill only the rest. */
  attn_delta_desc rest = d;
  rest.shape.n_q = rest.shape.n_kv = N - PREFIX;
  float *state2 = malloc(state_bytes);
  memcpy(state2, prefix_state, state_bytes);
  st = attn_delta(&rest, &x.q[PREFIX][0][0], &x.k[PREFIX][0][0], &x.v[PREFIX][0][0], &x.g[PREFIX][0],
                  &x.beta[PREFIX][0], o, state2, NULL, ws, ws_bytes);
  if (st != ATTN_OK) return fprintf(stderr, "%s: %s\n", attn_status_name(st), attn_last_error()), 1;
  memcpy(S, S_prefix, H_V * D * D * sizeof(double));
  ok &= check("the same tokens from the prefix's checkpoint", &x, PREFIX, N - PREFIX, o, S);

  /* Speculative decoding: DRAFT tokens in one call, a checkpoint after each; ACCEPT are kept,
   * so the state rolls back to checkpoint ACCEPT - 1, and decoding goes on from there. */
  attn_delta_desc spec = d;
  spec.shape.n_q = spec.shape.n_kv = DRAFT;
  float *drafts = malloc(DRAFT * state_bytes);
  const size_t each[DRAFT] = {0, 1, 2, 3};
  const attn_checkpoints per_token = {DRAFT, each, drafts};
  st = attn_delta(&spec, &x.q[N][0][0], &x.k[N][0][0], &x.v[N][0][0], &x.g[N][0], &x.beta[N][0], o, state2, &per_token,
                  ws, ws_bytes);
  if (st != ATTN_OK) return fprintf(stderr, "%s: %s\n", attn_status_name(st), attn_last_error()), 1;
  ok &= check("a speculative block of 4 draft tokens", &x, N, ACCEPT, o, S);
  memcpy(state2, drafts + (ACCEPT - 1) * (state_bytes / sizeof(float)), state_bytes); /* roll back */
  attn_delta_desc step = d;
  step.shape.n_q = step.shape.n_kv = 1; /* a decode step: the recurrence itself */
  st = attn_delta(&step, &x.q[N + ACCEPT][0][0], &x.k[N + ACCEPT][0][0], &x.v[N + ACCEPT][0][0], &x.g[N + ACCEPT][0],
                  &x.beta[N + ACCEPT][0], o, state2, NULL, ws, ws_bytes);
  if (st != ATTN_OK) return fprintf(stderr, "%s: %s\n", attn_status_name(st), attn_last_error()), 1;
  ok &= check("2 accepted, rolled back, then a decode step", &x, N + ACCEPT, 1, o, S);

  free(state), free(prefix_state), free(o), free(ws), free(S), free(S_prefix), free(state2), free(drafts);
  puts(ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
