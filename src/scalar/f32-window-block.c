/* scalar path: windowed linear attention's score step (src/simd/window_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_WINDOW_BLOCK_NAME attn_f32_window_block_ukernel__scalar
#include "simd/window_tmpl.h"
