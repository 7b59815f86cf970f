/* scalar path: vector log (src/simd/vexp_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_VLOG_NAME attn_f32_vlog_ukernel__scalar
#include "simd/vexp_tmpl.h"
