/* avx512 path: online-softmax block step, blocked score engine (src/simd/softmax_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_SOFTMAX_NAME attn_f32_softmax_block_ukernel__avx512
#include "simd/softmax_tmpl.h"
