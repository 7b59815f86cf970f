/* Activations at the engines' edges (engine/act.h). */
#include "engine/act.h"

#include "core/ukernels.h"

void attn_act_in(const struct attn_ukernels *uk, attn_dtype type, size_t rows, size_t w, const void *x, size_t ld,
                 float *y) {
  if (type == ATTN_F16) {
    uk->f16_cvt(rows, w, x, ld, y);
  } else if (type == ATTN_BF16) {
    uk->bf16_cvt(rows, w, x, ld, y);
  } else {
    for (size_t r = 0; r < rows; r++) memcpy(y + r * w, (const float *)x + r * ld, w * sizeof(float));
  }
}

void attn_act_out(const struct attn_ukernels *uk, attn_dtype type, size_t rows, size_t w, const float *x, size_t ldx,
                  void *y, size_t ldy) {
  for (size_t r = 0; r < rows; r++) {
    if (type == ATTN_F16)
      uk->f32_f16_cvt(w, x + r * ldx, (uint16_t *)y + r * ldy);
    else if (type == ATTN_BF16)
      uk->f32_bf16_cvt(w, x + r * ldx, (uint16_t *)y + r * ldy);
    else
      memcpy((float *)y + r * ldy, x + r * ldx, w * sizeof(float));
  }
}
