/* Row conversions between fp32 and fp16 / bf16 (attn.h: attn_f32_to_f16 and the three others):
 * validation, then one call of the active path's kernel (n elements are one row). */
#include "core/internal.h"

/* n elements of xs bytes at x into n of ys bytes at y: NULL (with n > 0), a span past
 * PTRDIFF_MAX (no object is that large, and the byte spans below must not wrap), overlap in
 * bytes; then the active path. n == 0 passes and the caller touches nothing. */
static attn_status cvt_check(const void *x, size_t xs, const void *y, size_t ys, size_t n,
                             const struct attn_ukernels **uk) {
  if (n && (!x || !y)) return attn_fail_null("x y", (const void *[]){x, y});
  if (n > PTRDIFF_MAX / 4) return attn_fail(ATTN_E_SIZE_OVERFLOW, "n %zu: the row's bytes overflow", n);
  if (attn_overlap(x, n * xs, y, n * ys)) return attn_fail(ATTN_E_ALIASING, "y overlaps input x");
  return (*uk = attn_dispatch()) ? ATTN_OK : attn_fail_isa();
}

attn_status attn_f32_to_f16(const float *x, uint16_t *y, size_t n) {
  const struct attn_ukernels *uk = NULL;
  const attn_status st = cvt_check(x, sizeof *x, y, sizeof *y, n, &uk);
  if (st == ATTN_OK && n) uk->f32_f16_cvt(n, x, y);
  return st;
}

attn_status attn_f32_to_bf16(const float *x, uint16_t *y, size_t n) {
  const struct attn_ukernels *uk = NULL;
  const attn_status st = cvt_check(x, sizeof *x, y, sizeof *y, n, &uk);
  if (st == ATTN_OK && n) uk->f32_bf16_cvt(n, x, y);
  return st;
}

attn_status attn_f16_to_f32(const uint16_t *x, float *y, size_t n) {
  const struct attn_ukernels *uk = NULL;
  const attn_status st = cvt_check(x, sizeof *x, y, sizeof *y, n, &uk);
  if (st == ATTN_OK && n) uk->f16_cvt(1, n, x, n, y);
  return st;
}

attn_status attn_bf16_to_f32(const uint16_t *x, float *y, size_t n) {
  const struct attn_ukernels *uk = NULL;
  const attn_status st = cvt_check(x, sizeof *x, y, sizeof *y, n, &uk);
  if (st == ATTN_OK && n) uk->bf16_cvt(1, n, x, n, y);
  return st;
}
