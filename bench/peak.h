/*
 * peak.h: single-core floating-point peak probes, one per ISA path native on this host.
 *
 * Each probe runs `iters` iterations of independent multiply-add chains (enough to cover latency x
 * throughput of two FMA pipes) and returns a value derived from the accumulators so the work
 * cannot be optimised away. The AVX2, NEON and AVX-512 probes share one body, peak_tmpl.h, over the
 * library's vf_* shim of their path (bench/peak_path.c.in). The harness
 * times them with its common timing loop; flops per iteration are given by the matching macro.
 * Each probe lives in its own file so only it gets the ISA's compiler flags (-mavx2 -mfma for
 * AVX2, -mavx512f for AVX-512; nothing for scalar).
 */
#ifndef ATTN_BENCH_PEAK_H
#define ATTN_BENCH_PEAK_H

#include <stddef.h>

/** Each probe bench/peak_<name>.c defines bench_peak_<name>, which runs `iters` iterations,
 *  and bench_peak_<name>_flops, the flops of one iteration. */
#define BENCH_PEAK_DECLARE(name)         \
  float bench_peak_##name(size_t iters); \
  extern const double bench_peak_##name##_flops;

/** Chains of the vector path probes: 2 FMA pipes x 4-cycle latency = 8 in flight, 12 covers it
 *  (AVX2 + FMA: 12 ymm chains x 8 lanes x 2 flops (vfmadd); AVX-512: 12 zmm chains x 16 lanes;
 *  NEON: 12 q-register chains x 4 lanes x 2 flops (fmla)). */
#define BENCH_PEAK_CHAINS 12

/** Plain C at the build's baseline flags (what the scalar path's compiler can reach; on x86-64
 *  gcc vectorises it to SSE2 multiply + add, whose chain latency is mul + add, so it takes 14
 *  chains: 14 x 4 lanes x 2 flops). */
#define BENCH_PEAK_SCALAR_CHAINS 14

#endif
