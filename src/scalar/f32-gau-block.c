/* scalar path: GAU relu^2 block step, blocked score engine (src/simd/gau_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_GAU_NAME attn_f32_gau_block_ukernel__scalar
#include "simd/gau_tmpl.h"
