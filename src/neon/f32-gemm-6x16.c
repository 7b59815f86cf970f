/* neon path: GEMM with a 6x16 register tile (src/simd/gemm_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_GEMM_NAME attn_f32_gemm_ukernel_6x16__neon
#include "simd/gemm_tmpl.h"
