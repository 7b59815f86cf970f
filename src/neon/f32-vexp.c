/* neon path: vector exp (src/simd/vexp_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_VEXP_NAME attn_f32_vexp_ukernel__neon
#include "simd/vexp_tmpl.h"
