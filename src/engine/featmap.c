/* The registry of feature maps (engine/featmap.h). Element-wise maps run on the path's featmap
 * micro-kernel; exp and dsoftmax are its scaled identity followed by the engine's offsets; favor
 * adds its random projection on the GEMM micro-kernel. */
#include "engine/featmap.h"

/* m = d, no scratch. */
static size_t fm_size_d(size_t d, size_t m) { return m == 0 || m == d ? d : 0; }
static size_t fm_no_scratch(size_t rows, size_t d, size_t m) {
  (void)rows, (void)d, (void)m;
  return 0;
}

/* out = map(xs in): the element-wise maps themselves, and the pre-exponential features of exp
 * (x' = xs x) and dsoftmax (xs = 1: x). */
#define ATTN_ELEMENTWISE_MAP_(fn, ID)                                                                             \
  static void fn(const struct attn_ukernels *uk, const attn_fm_args *a, int key, size_t rows, size_t d, size_t m, \
                 const float *in, size_t in_rs, float *out, size_t out_rs, size_t out_cs, float *scratch) {       \
    (void)key, (void)m, (void)scratch;                                                                            \
    uk->featmap(ID, rows, d, a->xs, in, in_rs, out, out_rs, out_cs);                                              \
  }
ATTN_ELEMENTWISE_MAP_(fm_identity, ATTN_FEATURE_IDENTITY)
ATTN_ELEMENTWISE_MAP_(fm_elu1, ATTN_FEATURE_ELU1)
ATTN_ELEMENTWISE_MAP_(fm_relu, ATTN_FEATURE_RELU)
#undef ATTN_ELEMENTWISE_MAP_

/* FAVOR+: m is the caller's (any >= 1; 4d by default). */
static size_t fm_size_favor(size_t d, size_t m) {
  if (m) return m;
  return d <= SIZE_MAX / 4 ? 4 * d : 0;
}
static size_t fm_scratch_favor(size_t rows, size_t d, size_t m) {
  (void)m;
  return rows * d; /* x' rows; the caller checked rows * d when it planned its own buffers */
}
/* u = W x' (queries), W x' - |x'|^2 / 2 (keys), x' = xs x; the per-row constants of the map
 * (-|q'|^2 / 2 and 1 / sqrt(m)) cancel in a normalised row. */
static void fm_favor(const struct attn_ukernels *uk, const attn_fm_args *a, int key, size_t rows, size_t d, size_t m,
                     const float *in, size_t in_rs, float *out, size_t out_rs, size_t out_cs, float *scratch) {
  (void)out_cs; /* row-major */
  uk->featmap(ATTN_FEATURE_IDENTITY, rows, d, a->xs, in, in_rs, scratch, d, 1);
  uk->gemm(rows, m, d, scratch, d, 1, a->wt, m, out, out_rs, NULL, 0);
  if (!key) return;
  for (size_t r = 0; r < rows; r++) {
    const float *x = scratch + r * d;
    float n2 = 0.0f;
    for (size_t t = 0; t < d; t++) n2 += x[t] * x[t];
    const float h = 0.5f * n2;
    float *u = out + r * out_rs;
    for (size_t f = 0; f < m; f++) u[f] -= h;
  }
}

static const attn_featmap registry[ATTN_FEATURE_COUNT] = {
    [ATTN_FEATURE_IDENTITY] = {ATTN_FEATURE_IDENTITY, 0, ATTN_EXPF_QUERY, 1, fm_size_d, fm_no_scratch, fm_identity},
    [ATTN_FEATURE_ELU1] = {ATTN_FEATURE_ELU1, 0, ATTN_EXPF_QUERY, 1, fm_size_d, fm_no_scratch, fm_elu1},
    [ATTN_FEATURE_RELU] = {ATTN_FEATURE_RELU, 0, ATTN_EXPF_QUERY, 1, fm_size_d, fm_no_scratch, fm_relu},
    [ATTN_FEATURE_EXP] = {ATTN_FEATURE_EXP, 1, ATTN_EXPF_QUERY, 1, fm_size_d, fm_no_scratch, fm_identity},
    [ATTN_FEATURE_FAVOR] = {ATTN_FEATURE_FAVOR, 1, ATTN_EXPF_QUERY, 1, fm_size_favor, fm_scratch_favor, fm_favor},
    [ATTN_FEATURE_DSOFTMAX] = {ATTN_FEATURE_DSOFTMAX, 1, ATTN_EXPF_SOFTMAX, 0, fm_size_d, fm_no_scratch, fm_identity},
};

const attn_featmap *attn_featmap_get(attn_feature_map id) {
  if ((int)id < 0 || (int)id >= ATTN_FEATURE_COUNT || !registry[id].apply) return NULL;
  return &registry[id];
}
