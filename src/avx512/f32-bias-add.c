/* avx512 path: softmax's bias tensor added to a block of scores (src/simd/bias_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_BIAS_ADD_NAME attn_f32_bias_add_ukernel__avx512
#include "simd/bias_tmpl.h"
