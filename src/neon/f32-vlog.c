/* neon path: vector log (src/simd/vexp_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_VLOG_NAME attn_f32_vlog_ukernel__neon
#include "simd/vexp_tmpl.h"
