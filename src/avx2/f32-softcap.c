/* avx2 path: softmax's logit soft-cap (src/simd/vexp_tmpl.h). */
#include "simd/vf_avx2.h"
#define ATTN_SOFTCAP_NAME attn_f32_softcap_ukernel__avx2
#include "simd/vexp_tmpl.h"
