/*
 * The feature-map registry of linear attention (attn.h, attn_feature_map): what the chunkwise
 * engine needs to know of a map, without a switch in the engine. A map has its own feature size
 * m (from d and the caller's request), may carry per-feature offsets in the state (the exact
 * stabilisation of exponential maps), may need scratch, and applies itself to rows of q or k,
 * writing features in any layout (row-major for keys, transposed for queries).
 */
#ifndef ATTN_ENGINE_FEATMAP_H
#define ATTN_ENGINE_FEATMAP_H

#include "core/internal.h"

typedef struct attn_featmap {
  attn_feature_map id;
  int offsets; /* 1: the state's offset column holds running per-feature maxima */
  /* Feature size for input width d and requested size m (0: the map's own); 0 if it cannot use m. */
  size_t (*size)(size_t d, size_t m);
  /* Scratch floats one apply of up to `rows` rows needs. */
  size_t (*scratch)(size_t rows, size_t d, size_t m);
  /* out(r, f) = out[r * out_rs + f * out_cs] = the map of input row r (d floats, row stride
   * in_rs), for r < rows, f < m. A non-finite input element makes its features NaN. */
  void (*apply)(const struct attn_ukernels *uk, size_t rows, size_t d, size_t m, const float *in, size_t in_rs,
                float *out, size_t out_rs, size_t out_cs, float *scratch);
} attn_featmap;

/* The map with id `id`, or NULL when unknown. */
ATTN_INTERNAL const attn_featmap *attn_featmap_get(attn_feature_map id);

#endif
