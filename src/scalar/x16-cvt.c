/* scalar path: fp16 and bf16 to fp32 conversion of K/V blocks, and fp32 rows
 * to fp16 and bf16 (src/simd/cvt_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_F16_CVT_NAME      attn_f16_cvt_ukernel__scalar
#define ATTN_BF16_CVT_NAME     attn_bf16_cvt_ukernel__scalar
#define ATTN_F32_F16_CVT_NAME  attn_f32_f16_cvt_ukernel__scalar
#define ATTN_F32_BF16_CVT_NAME attn_f32_bf16_cvt_ukernel__scalar
#define ATTN_I8_CVT_NAME       attn_i8_cvt_ukernel__scalar
#define ATTN_Q8_CVT_NAME       attn_q8_cvt_ukernel__scalar
#include "simd/cvt_tmpl.h"
