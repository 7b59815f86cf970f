/* The neon path: every micro-kernel instantiated from the src/simd templates. GEMM: 6x16 tile: 24 q-register accumulators + 4 B vectors + 1 broadcast of 32 registers. */
#include "simd/vf_neon.h"
#define ATTN_ISA_ID ATTN_ISA_NEON
#define ATTN_ISA_SUFFIX neon
#define ATTN_GEMM_MR 6
#define ATTN_GEMM_NV 4
#define ATTN_Q_BLOCK 48
#define ATTN_KV_BLOCK 96
#define ATTN_LINEAR_CHUNK 48
#include "simd/ukernels_tmpl.h"
