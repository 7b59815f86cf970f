/* scalar path: online-softmax block step, blocked score engine (src/simd/softmax_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_SOFTMAX_NAME attn_f32_softmax_block_ukernel__scalar
#include "simd/softmax_tmpl.h"
