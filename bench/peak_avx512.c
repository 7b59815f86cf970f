/*
 * Peak probe for the machine's AVX-512 FMA units: compiled alone with -mavx512f (x86 only). The
 * library has no AVX-512 path, so this is a limit of the machine, not of a path; the harness runs
 * it only where the CPU and the OS support AVX-512. The shim is the four operations the probe body
 * (peak_tmpl.h) uses, on native intrinsics.
 */
#include <immintrin.h>

#define ATTN_VL 16
typedef __m512 vf;
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float vf_hsum(vf a) { return _mm512_reduce_add_ps(a); }

#define BENCH_PEAK_NAME    bench_peak_avx512
#define BENCH_PEAK_NCHAINS BENCH_PEAK_AVX512_CHAINS
#include "peak_tmpl.h"
