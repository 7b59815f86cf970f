/* avx512 path: fp16 and bf16 to fp32 conversion of K/V blocks (src/simd/cvt_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_F16_CVT_NAME  attn_f16_cvt_ukernel__avx512
#define ATTN_BF16_CVT_NAME attn_bf16_cvt_ukernel__avx512
#include "simd/cvt_tmpl.h"
