/* avx512 path: element-wise feature maps, chunkwise engine (src/simd/featmap_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_FEATMAP_NAME attn_f32_featmap_ukernel__avx512
#include "simd/featmap_tmpl.h"
