/*
 * The feature-map registry of linear attention (attn.h, attn_feature_map): what the chunkwise
 * engine needs to know of a map, without a switch in the engine. A map has its own feature size
 * m (from d and the caller's request) and may need scratch. Two kinds:
 *   - element-wise maps (identity, elu1, relu): apply writes the features themselves, in any
 *     layout (row-major for keys, transposed for queries);
 *   - exponential maps (exp, favor, dsoftmax): apply writes the pre-exponential features u
 *     (row-major), and the engine turns them into features with the per-feature offsets the
 *     state carries (spec 3.2: every stored term at most 1) through the path's expfeat kernel;
 *     `query` says how a query's features are made (attn_expfeat_mode).
 */
#ifndef ATTN_ENGINE_FEATMAP_H
#define ATTN_ENGINE_FEATMAP_H

#include "core/internal.h"

/* Largest rise of an offset within a causal chunk, and largest spread of a feature within a
 * boundary sub-block of the blocked engine (natural log units): a query then loses at most e^-40
 * of scale, far above fp32's range limits, and its terms stay exact to rounding. */
#define ATTN_OFFSET_GUARD 40.0f

/* A call's parameters of its map: the input scale (x' = xs x, 1 for most maps) and, for favor,
 * W^T (d x m, row-major). */
typedef struct attn_fm_args {
  float xs;
  const float *wt;
} attn_fm_args;

typedef struct attn_featmap {
  attn_feature_map id;
  int offsets;             /* 1: exponential map, with running per-feature maxima in the state */
  attn_expfeat_mode query; /* exponential maps: ATTN_EXPF_QUERY or ATTN_EXPF_SOFTMAX */
  int divide;              /* normalised output divides by phi(q).z + eps (dsoftmax: already normalised) */
  /* Feature size for input width d and requested size m (0: the map's own); 0 if it cannot use m. */
  size_t (*size)(size_t d, size_t m);
  /* Scratch floats one apply of up to `rows` rows needs. */
  size_t (*scratch)(size_t rows, size_t d, size_t m);
  /* out(r, f) = out[r * out_rs + f * out_cs] = the map (exponential maps: the pre-exponential
   * feature) of input row r (d floats, row stride in_rs), for r < rows, f < m; key != 0 for keys
   * (favor's keys carry -|x'|^2 / 2, which cancels for queries). Exponential maps write row-major
   * (out_cs == 1). A non-finite input element makes its features non-finite. */
  void (*apply)(const struct attn_ukernels *uk, const attn_fm_args *a, int key, size_t rows, size_t d, size_t m,
                const float *in, size_t in_rs, float *out, size_t out_rs, size_t out_cs, float *scratch);
} attn_featmap;

/* The map with id `id`, or NULL when unknown. */
ATTN_INTERNAL const attn_featmap *attn_featmap_get(attn_feature_map id);

#endif
