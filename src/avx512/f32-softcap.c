/* avx512 path: softmax's logit soft-cap (src/simd/vexp_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_SOFTCAP_NAME attn_f32_softcap_ukernel__avx512
#include "simd/vexp_tmpl.h"
