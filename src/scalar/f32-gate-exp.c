/* scalar path: per-feature gate factors, chunkwise engine (src/simd/vexp_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_GATE_EXP_NAME attn_f32_gate_exp_ukernel__scalar
#include "simd/vexp_tmpl.h"
