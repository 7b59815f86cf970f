/* avx512 path: scores and P V for few query rows over K/V read in place, fp32 or converted in
 * registers from fp16 / bf16 (src/simd/fewrows_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_FEW_SCORES_NAME attn_few_scores_ukernel__avx512
#define ATTN_FEW_PV_NAME     attn_few_pv_ukernel__avx512
/* A GQA group's P V, 32 keys of a head before the next (8: the template's default). Measured on a
 * Zen 5 guest, 8 heads of d = 128 over 64k fp32 tokens: 32 query heads 34-35 -> 27-30 ms, 16
 * heads 30-32 -> 26-28 ms; in cache 15-20% faster. The AVX2 path measured 12-20% slower with 32
 * over 64k tokens (and 10-25% faster in cache), so it keeps 8. */
#define ATTN_HKV_JC_ROWS 32
#include "simd/fewrows_tmpl.h"
