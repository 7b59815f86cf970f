/* scalar path: element-wise feature maps, chunkwise engine (src/simd/featmap_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_FEATMAP_NAME attn_f32_featmap_ukernel__scalar
#include "simd/featmap_tmpl.h"
