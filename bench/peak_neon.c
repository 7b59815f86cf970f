/* Peak probe for the NEON path: compiled alone (Arm only; -mfpu=neon-vfpv4 on 32-bit Arm). */
#include "simd/vf_neon.h"
#define BENCH_PEAK_NAME bench_peak_neon
#define BENCH_PEAK_NCHAINS BENCH_PEAK_CHAINS
#include "peak_tmpl.h"
