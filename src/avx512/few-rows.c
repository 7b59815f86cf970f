/* avx512 path: scores and P V for few query rows over K/V read in place, fp32 or converted in
 * registers from fp16 / bf16, and the two fused for one row over fp32 rows (src/simd/fewrows_tmpl.h,
 * src/simd/fewfused_tmpl.h). */
#include "simd/vf_avx512.h"
#define ATTN_FEW_SCORES_NAME attn_few_scores_ukernel__avx512
#define ATTN_FEW_PV_NAME     attn_few_pv_ukernel__avx512
#define ATTN_FEW_FUSED_NAME  attn_few_fused_ukernel__avx512
/* A GQA group's P V, 32 keys of a head before the next (8: the template's default): faster from
 * memory on this path, slower on AVX2, which keeps 8 (measured: 82996a3). */
#define ATTN_HKV_JC_ROWS 32
/* P V over more than four rows (a GQA group's speculative block) in tiles of 6 rows x 4 vectors
 * (24 of the 32 registers): 16-32 rows 139-152 -> 151-167 GFLOP/s from L1 (4 rows: 8 were slower). */
#define ATTN_HKV_PV_QR 6
#include "simd/fewrows_tmpl.h"
