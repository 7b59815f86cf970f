/* avx512 path: GEMM with a 8x32 register tile (src/simd/gemm_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_GEMM_NAME attn_f32_gemm_ukernel_8x32__avx512
#include "simd/gemm_tmpl.h"
