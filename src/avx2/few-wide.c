/* avx2 path: scores of many query rows of a key head, rows in the vectors' lanes, over K read
 * in place (src/simd/fewwide_tmpl.h). */
#include "simd/vf_avx2.h"
#define ATTN_FEW_WIDE_NAME attn_few_scores_wide_ukernel__avx2
#include "simd/fewwide_tmpl.h"
