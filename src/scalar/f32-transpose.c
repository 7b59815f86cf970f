/* scalar path: rows of a matrix into the columns of a block, copied or added (src/simd/transpose_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_TRANSPOSE_NAME attn_f32_transpose_ukernel__scalar
#include "simd/transpose_tmpl.h"
