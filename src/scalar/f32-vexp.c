/* scalar path: vector exp (src/simd/vexp_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_VEXP_NAME attn_f32_vexp_ukernel__scalar
#include "simd/vexp_tmpl.h"
