/* avx2 path: softmax's logit options, the soft cap and ALiBi (src/simd/vexp_tmpl.h). */
#include "simd/vf_avx2.h"
#define ATTN_LOGIT_OPTS_NAME attn_f32_logit_opts_ukernel__avx2
#include "simd/vexp_tmpl.h"
