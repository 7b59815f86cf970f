/* Minimal use of attn: causal softmax attention, then causal linear attention with a prefill
 * that hands its state to a decode step. Build against the installed library:
 *   cc example.c $(pkg-config --cflags --libs --static attn) -o example   (--static: libattn.a needs -lm -pthread)
 * or against a build tree:  cc example.c -Iinclude build/src/libattn.a -lm -lpthread */
#include <attn.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                \
  do {                                                             \
    attn_status st_ = (call);                                      \
    if (st_ != ATTN_OK) {                                          \
      fprintf(stderr, "%s: %s\n", #call, attn_status_string(st_)); \
      return 1;                                                    \
    }                                                              \
  } while (0)

int main(void) {
  enum { N = 100, H = 4, HKV = 2, D = 64 }; /* 100 tokens, 4 query heads sharing 2 K/V heads */
  float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * HKV * D);
  float *v = malloc(sizeof(float) * N * HKV * D), *o = malloc(sizeof(float) * N * H * D);
  for (int i = 0; i < N * H * D; i++) q[i] = (float)((unsigned)i * 7919u % 1000u) / 1000.0f - 0.5f;
  for (int i = 0; i < N * HKV * D; i++) {
    k[i] = (float)((unsigned)i * 104729u % 1000u) / 1000.0f - 0.5f;
    v[i] = (float)((unsigned)i * 1299709u % 1000u) / 1000.0f;
  }
  printf("attn %s, ISA path: %s\n", attn_version_string(), attn_isa_name(attn_isa_get()));

  /* Causal softmax attention over all heads; layouts default to [token][head][dim]. */
  attn_softmax_desc sd;
  CHECK(attn_softmax_desc_init(&sd, N, N, H, HKV, D, D));
  sd.mask = attn_mask_causal(); /* bottom-right aligned */
  size_t ws_bytes;
  CHECK(attn_softmax_workspace_size(&sd, &ws_bytes));
  void *ws = malloc(ws_bytes);
  CHECK(attn_softmax(&sd, q, k, v, o, NULL, ws, ws_bytes));
  printf("softmax  o[last token][head 0][0..3] = %.5f %.5f %.5f %.5f\n", o[(N - 1) * H * D], o[(N - 1) * H * D + 1],
         o[(N - 1) * H * D + 2], o[(N - 1) * H * D + 3]);

  /* Causal linear attention (elu+1 features; desc_init's mask is causal): prefill N-1 tokens, then
   * decode the last one. */
  attn_linear_desc ld;
  CHECK(attn_linear_desc_init(&ld, N - 1, N - 1, H, HKV, D, D, ATTN_FEATURE_ELU1));
  size_t state_bytes, lws_bytes;
  CHECK(attn_linear_state_size(&ld, &state_bytes));
  CHECK(attn_linear_workspace_size(&ld, &lws_bytes));
  attn_linear_state state;
  void *state_mem = malloc(state_bytes), *lws = malloc(lws_bytes);
  CHECK(attn_linear_state_init(&state, &ld, state_mem, state_bytes));
  CHECK(attn_linear(&ld, q, k, v, o, &state, lws, lws_bytes)); /* prefill */
  ld.shape.n_q = ld.shape.n_kv = 1;                            /* one decode step */
  CHECK(attn_linear(&ld, q + (N - 1) * H * D, k + (N - 1) * HKV * D, v + (N - 1) * HKV * D, o + (N - 1) * H * D, &state,
                    lws, lws_bytes));
  printf("linear   o[last token][head 0][0..3] = %.5f %.5f %.5f %.5f (state holds %llu tokens)\n", o[(N - 1) * H * D],
         o[(N - 1) * H * D + 1], o[(N - 1) * H * D + 2], o[(N - 1) * H * D + 3], (unsigned long long)state.tokens);

  free(q);
  free(k);
  free(v);
  free(o);
  free(ws);
  free(state_mem);
  free(lws);
  return 0;
}
