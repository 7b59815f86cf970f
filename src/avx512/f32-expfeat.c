/* avx512 path: exponential feature maps with offsets, chunkwise engine (src/simd/expfeat_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_EXPFEAT_NAME attn_f32_expfeat_ukernel__avx512
#include "simd/expfeat_tmpl.h"
