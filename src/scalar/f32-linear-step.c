/* scalar path: one-token linear-attention state step, chunkwise engine (src/simd/step_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_STEP_NAME attn_f32_linear_step_ukernel__scalar
#include "simd/step_tmpl.h"
