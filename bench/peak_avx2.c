/* Peak probe for the AVX2 path: compiled alone with -mavx2 -mfma (x86 only). */
#include "simd/vf_avx2.h"
#define BENCH_PEAK_NAME bench_peak_avx2
#define BENCH_PEAK_NCHAINS BENCH_PEAK_CHAINS
#include "peak_tmpl.h"
