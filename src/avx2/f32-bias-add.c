/* avx2 path: softmax's bias tensor added to a block of scores (src/simd/bias_tmpl.h). */
#include "simd/vf_avx2.h"
#define ATTN_BIAS_ADD_NAME attn_f32_bias_add_ukernel__avx2
#include "simd/bias_tmpl.h"
