/* avx512 path: vector exp (src/simd/vexp_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_VEXP_NAME attn_f32_vexp_ukernel__avx512
#include "simd/vexp_tmpl.h"
