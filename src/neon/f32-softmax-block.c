/* neon path: online-softmax block step, blocked score engine (src/simd/softmax_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_SOFTMAX_NAME attn_f32_softmax_block_ukernel__neon
#include "simd/softmax_tmpl.h"
