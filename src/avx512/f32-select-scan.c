/* avx512 path: selective attention's selection sums (src/simd/select_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_SELECT_SCAN_NAME attn_f32_select_scan_ukernel__avx512
#include "simd/select_tmpl.h"
