/* neon path: scores and P V for few query rows over K/V read in place, fp32 or converted in
 * registers from fp16 / bf16 (src/simd/fewrows_tmpl.h). */
#include "simd/vf_neon.h"
#define ATTN_FEW_SCORES_NAME attn_few_scores_ukernel__neon
#define ATTN_FEW_PV_NAME     attn_few_pv_ukernel__neon
#include "simd/fewrows_tmpl.h"
