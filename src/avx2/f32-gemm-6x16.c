/* avx2 path: GEMM with a 6x16 register tile (src/simd/gemm_tmpl.h). */
#include "simd/vf_avx2.h"
#define ATTN_GEMM_NAME attn_f32_gemm_ukernel_6x16__avx2
#include "simd/gemm_tmpl.h"
