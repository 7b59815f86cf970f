/* neon path: element-wise feature maps, chunkwise engine (src/simd/featmap_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_FEATMAP_NAME attn_f32_featmap_ukernel__neon
#include "simd/featmap_tmpl.h"
