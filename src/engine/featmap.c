/* The registry of feature maps (engine/featmap.h). Element-wise maps (identity, elu1, relu) run on the
 * path's featmap micro-kernel; maps with their own products or reductions add their entries here. */
#include "engine/featmap.h"

/* Element-wise maps: m = d, no scratch, no offsets. */
static size_t fm_size_d(size_t d, size_t m) { return m == 0 || m == d ? d : 0; }
static size_t fm_no_scratch(size_t rows, size_t d, size_t m) {
  (void)rows, (void)d, (void)m;
  return 0;
}

#define ATTN_ELEMENTWISE_MAP_(fn, ID)                                                                            \
  static void fn(const struct attn_ukernels *uk, size_t rows, size_t d, size_t m, const float *in, size_t in_rs, \
                 float *out, size_t out_rs, size_t out_cs, float *scratch) {                                     \
    (void)m, (void)scratch;                                                                                      \
    uk->featmap(ID, rows, d, in, in_rs, out, out_rs, out_cs);                                                    \
  }
ATTN_ELEMENTWISE_MAP_(fm_identity, ATTN_FEATURE_IDENTITY)
ATTN_ELEMENTWISE_MAP_(fm_elu1, ATTN_FEATURE_ELU1)
ATTN_ELEMENTWISE_MAP_(fm_relu, ATTN_FEATURE_RELU)
#undef ATTN_ELEMENTWISE_MAP_

static const attn_featmap registry[ATTN_FEATURE_COUNT] = {
    [ATTN_FEATURE_IDENTITY] = {ATTN_FEATURE_IDENTITY, 0, fm_size_d, fm_no_scratch, fm_identity},
    [ATTN_FEATURE_ELU1] = {ATTN_FEATURE_ELU1, 0, fm_size_d, fm_no_scratch, fm_elu1},
    [ATTN_FEATURE_RELU] = {ATTN_FEATURE_RELU, 0, fm_size_d, fm_no_scratch, fm_relu},
};

const attn_featmap *attn_featmap_get(attn_feature_map id) {
  if ((int)id < 0 || (int)id >= ATTN_FEATURE_COUNT || !registry[id].apply) return NULL;
  return &registry[id];
}
