/* neon path: exponential feature maps with offsets, chunkwise engine (src/simd/expfeat_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_EXPFEAT_NAME attn_f32_expfeat_ukernel__neon
#include "simd/expfeat_tmpl.h"
