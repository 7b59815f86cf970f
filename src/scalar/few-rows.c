/* scalar path: scores and P V for few query rows over K/V read in place, fp32 or converted in
 * registers from fp16 / bf16, and the two fused for one row over fp32 rows (src/simd/fewrows_tmpl.h,
 * src/simd/fewfused_tmpl.h). */
#include "simd/vf_scalar.h"
#define ATTN_FEW_SCORES_NAME attn_few_scores_ukernel__scalar
#define ATTN_FEW_PV_NAME     attn_few_pv_ukernel__scalar
#define ATTN_FEW_FUSED_NAME  attn_few_fused_ukernel__scalar
#include "simd/fewrows_tmpl.h"
