/* The scalar path: every micro-kernel instantiated from the src/simd templates. GEMM: plain C; 4x8 tile of 4-lane arrays. */
#include "simd/vf_scalar.h"
#define ATTN_ISA_ID ATTN_ISA_SCALAR
#define ATTN_ISA_SUFFIX scalar
#define ATTN_GEMM_MR 4
#define ATTN_GEMM_NV 2
#define ATTN_Q_BLOCK 32
#define ATTN_KV_BLOCK 64
#define ATTN_LINEAR_CHUNK 64
#include "simd/ukernels_tmpl.h"
