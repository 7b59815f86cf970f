/*
 * Instantiates every micro-kernel of one ISA path from the shared templates and defines that
 * path's dispatch table as constant data. An ISA file (src/<isa>/ukernels.c) includes its vf_*
 * shim, defines the tuning macros below, and includes this file:
 *   ATTN_ISA_ID        the attn_isa value          ATTN_ISA_SUFFIX   name suffix (scalar, avx2, ...)
 *   ATTN_GEMM_MR       GEMM tile rows              ATTN_GEMM_NV      GEMM tile columns, in vectors
 *   ATTN_Q_BLOCK       softmax query block         ATTN_KV_BLOCK     softmax key block
 *   ATTN_LINEAR_CHUNK  default causal linear chunk
 * Adding a path (e.g. AVX-512) means a new shim and a new ISA file, not new algorithms.
 */
#include "core/ukernels.h"

#define ATTN_CAT3_(a, b, c) a##b##c
#define ATTN_CAT3(a, b, c) ATTN_CAT3_(a, b, c)
#define ATTN_UK(op) ATTN_CAT3(attn_f32_, op, ATTN_CAT3(_ukernel__, ATTN_ISA_SUFFIX, ))

#define ATTN_GEMM_NAME ATTN_UK(gemm)
#define ATTN_SOFTMAX_NAME ATTN_UK(softmax_block)
#define ATTN_FEATMAP_NAME ATTN_UK(featmap)
#define ATTN_VEXP_NAME ATTN_UK(vexp)
#define ATTN_STEP_NAME ATTN_UK(linear_step)

ATTN_INTERNAL attn_gemm_fn ATTN_GEMM_NAME;
ATTN_INTERNAL attn_softmax_block_fn ATTN_SOFTMAX_NAME;
ATTN_INTERNAL attn_featmap_fn ATTN_FEATMAP_NAME;
ATTN_INTERNAL attn_vexp_fn ATTN_VEXP_NAME;
ATTN_INTERNAL attn_linear_step_fn ATTN_STEP_NAME;

#include "simd/gemm_tmpl.h"
#include "simd/softmax_tmpl.h"
#include "simd/featmap_tmpl.h"
#include "simd/step_tmpl.h"

_Static_assert(ATTN_Q_BLOCK % ATTN_GEMM_MR == 0 && ATTN_Q_BLOCK % (ATTN_GEMM_NV * ATTN_VL) == 0,
               "query block must be a multiple of the GEMM tile");
_Static_assert(ATTN_KV_BLOCK % ATTN_GEMM_MR == 0, "key block must be a multiple of the GEMM rows");

const struct attn_ukernels ATTN_CAT3(attn_ukernels_, ATTN_ISA_SUFFIX, ) = {
    .isa = ATTN_ISA_ID,
    .vec_lanes = ATTN_VL,
    .gemm_mr = ATTN_GEMM_MR,
    .gemm_nr = ATTN_GEMM_NV * ATTN_VL,
    .q_block = ATTN_Q_BLOCK,
    .kv_block = ATTN_KV_BLOCK,
    .linear_chunk = ATTN_LINEAR_CHUNK,
    .gemm = ATTN_GEMM_NAME,
    .softmax_block = ATTN_SOFTMAX_NAME,
    .featmap = ATTN_FEATMAP_NAME,
    .linear_step = ATTN_STEP_NAME,
    .vexp = ATTN_VEXP_NAME,
};
