/* avx512 path: vector log (src/simd/vexp_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_VLOG_NAME attn_f32_vlog_ukernel__avx512
#include "simd/vexp_tmpl.h"
