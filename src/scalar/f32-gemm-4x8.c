/* scalar path: GEMM with a 4x8 register tile (src/simd/gemm_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_GEMM_NAME attn_f32_gemm_ukernel_4x8__scalar
#include "simd/gemm_tmpl.h"
