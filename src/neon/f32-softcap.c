/* neon path: softmax's logit soft-cap (src/simd/vexp_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_SOFTCAP_NAME attn_f32_softcap_ukernel__neon
#include "simd/vexp_tmpl.h"
