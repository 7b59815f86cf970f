/* neon path: one-token linear-attention state step and runs of them, chunkwise engine (src/simd/step_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_STEP_NAME attn_f32_linear_step_ukernel__neon
#define ATTN_RECUR_NAME attn_f32_linear_recur_ukernel__neon
#include "simd/step_tmpl.h"
