/* avx512 path: GAU relu^2 block step, blocked score engine (src/simd/gau_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_GAU_NAME attn_f32_gau_block_ukernel__avx512
#include "simd/gau_tmpl.h"
