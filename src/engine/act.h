/* Activations at the engines' edges (attn_shape.q_type and o_type): query rows into fp32 as a
 * task reads them, output rows from fp32 as it writes them. Half rows convert exactly into fp32
 * (the path's f16_cvt / bf16_cvt) and fp32 rounds to nearest even into them (f32_f16_cvt /
 * f32_bf16_cvt): a half call's outputs are the fp32 call's on the converted queries, rounded. */
#ifndef ATTN_ENGINE_ACT_H
#define ATTN_ENGINE_ACT_H

#include "core/internal.h"

struct attn_ukernels;

/* Element (t, h) of a [tokens x heads x width] tensor of `size`-byte elements at x (layout l). */
static inline const void *attn_act_at(const void *x, size_t size, attn_layout l, size_t t, size_t h) {
  return (const char *)x + (t * l.row_stride + h * l.head_stride) * size;
}

/* rows x w elements of type `type` at x (row stride ld elements) into fp32 y (row stride w). */
ATTN_INTERNAL void attn_act_in(const struct attn_ukernels *uk, attn_dtype type, size_t rows, size_t w, const void *x,
                               size_t ld, float *y);
/* rows x w floats at x (row stride ldx) into elements of type `type` at y (row stride ldy). */
ATTN_INTERNAL void attn_act_out(const struct attn_ukernels *uk, attn_dtype type, size_t rows, size_t w, const float *x,
                                size_t ldx, void *y, size_t ldy);

#endif
