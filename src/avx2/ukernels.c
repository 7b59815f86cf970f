/* The avx2 path: every micro-kernel instantiated from the src/simd templates. GEMM: 6x16 tile: 12 ymm accumulators + 2 B vectors + 1 broadcast of 16 registers. */
#include "simd/vf_avx2.h"
#define ATTN_ISA_ID ATTN_ISA_AVX2
#define ATTN_ISA_SUFFIX avx2
#define ATTN_GEMM_MR 6
#define ATTN_GEMM_NV 2
#define ATTN_Q_BLOCK 48
#define ATTN_KV_BLOCK 96
#define ATTN_LINEAR_CHUNK 48
#include "simd/ukernels_tmpl.h"
