/* sysinfo.c: what the run is (machine, build, library) and what the machine can do (FMA peak per
 * path, read bandwidth), measured in the same run with the same timing loop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_config.h"
#include "bench_git.h"
#include "peak.h"

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
}

/* The value of the first "key : value" line of /proc/cpuinfo whose key is one of keys. */
static int cpuinfo_value(const char *const *keys, char *out, size_t outlen) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    for (const char *const *k = keys; *k && !found; k++) {
      if (strncmp(line, *k, strlen(*k)) == 0) {
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(out, outlen, "%s", v);
        trim(out);
        found = out[0] != 0;
      }
    }
  }
  fclose(f);
  return found;
}

double bench_loadavg(void) {
  double load = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &load) != 1) load = -1;
    fclose(f);
  }
  return load;
}

void bench_sysinfo_fill(bench_sysinfo *info) {
  memset(info, 0, sizeof *info);
  static const char *const model_keys[] = {"model name", "Processor", "cpu model", "Hardware", NULL};
  if (!cpuinfo_value(model_keys, info->cpu, sizeof info->cpu))
    snprintf(info->cpu, sizeof info->cpu, "unknown");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  info->cores = cores > 0 ? (int)cores : 1;
  size_t used = 0;
  for (int i = ATTN_ISA_SCALAR; i < ATTN_ISA_COUNT; i++) {
    int native = 0;
    if (!attn_isa_available((attn_isa)i, &native)) continue;
    int w = snprintf(info->isas + used, sizeof info->isas - used, "%s%s(%s)", used ? " " : "",
                     attn_isa_name((attn_isa)i), native ? "native" : "emulated");
    if (w > 0 && (size_t)w < sizeof info->isas - used) used += (size_t)w;
  }
#if defined(__clang__)
  snprintf(info->compiler, sizeof info->compiler, "clang %s", __clang_version__);
#elif defined(__GNUC__)
  snprintf(info->compiler, sizeof info->compiler, "gcc %s", __VERSION__);
#else
  snprintf(info->compiler, sizeof info->compiler, "%s", ATTN_BENCH_COMPILER);
#endif
  trim(info->compiler);
  snprintf(info->flags, sizeof info->flags, "buildtype=%s optimization=%s c_std=%s c_args=[%s]%s",
           ATTN_BENCH_BUILDTYPE, ATTN_BENCH_OPTIMIZATION, ATTN_BENCH_C_STD, ATTN_BENCH_C_ARGS,
#if defined(NDEBUG)
           " NDEBUG"
#else
           ""
#endif
  );
  snprintf(info->version, sizeof info->version, "%s", attn_version_string());
  snprintf(info->git, sizeof info->git, "%s", ATTN_BENCH_GIT_REVISION);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(info->date, sizeof info->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  info->load_start = bench_loadavg();
}

/* ---- peak probes ---------------------------------------------------------------------------- */

static void run_peak_scalar(void *ctx, size_t iters) { *(volatile float *)ctx = bench_peak_scalar(iters); }
#if defined(ATTN_BENCH_HAVE_PEAK_AVX2)
static void run_peak_avx2(void *ctx, size_t iters) { *(volatile float *)ctx = bench_peak_avx2(iters); }
#endif
#if defined(ATTN_BENCH_HAVE_PEAK_NEON)
static void run_peak_neon(void *ctx, size_t iters) { *(volatile float *)ctx = bench_peak_neon(iters); }
#endif

int bench_peak_probe(attn_isa isa, bench_kernel *fn, double *flops_per_iter) {
  switch (isa) {
  case ATTN_ISA_SCALAR:
    *fn = run_peak_scalar;
    *flops_per_iter = BENCH_PEAK_SCALAR_FLOPS;
    return 1;
#if defined(ATTN_BENCH_HAVE_PEAK_AVX2)
  case ATTN_ISA_AVX2:
    *fn = run_peak_avx2;
    *flops_per_iter = BENCH_PEAK_AVX2_FLOPS;
    return 1;
#endif
#if defined(ATTN_BENCH_HAVE_PEAK_NEON)
  case ATTN_ISA_NEON:
    *fn = run_peak_neon;
    *flops_per_iter = BENCH_PEAK_NEON_FLOPS;
    return 1;
#endif
  default:
    return 0;
  }
}

/* Peaks and bandwidth are best cases: they use the fastest sample. */
static bench_timing probe_timing(double seconds) {
  return (bench_timing){.min_time = seconds, .min_reps = 5, .max_reps = 100000, .warmup = 1,
                        .noisy_spread = 1.0};
}

double bench_measure_peak(bench_pool *pool, attn_isa isa, double seconds) {
  bench_kernel fn;
  double flops;
  int native = 0;
  if (!attn_isa_available(isa, &native) || !native || !bench_peak_probe(isa, &fn, &flops)) return 0;
  const int threads = bench_pool_threads(pool);
  float *sinks = calloc((size_t)threads, sizeof *sinks);
  void **ctx = calloc((size_t)threads, sizeof *ctx);
  double gflops = 0;
  if (sinks && ctx) {
    for (int t = 0; t < threads; t++) ctx[t] = &sinks[t];
    bench_timing timing = probe_timing(seconds);
    bench_stats st;
    bench_measure(pool, &timing, fn, ctx, &st);
    gflops = st.min > 0 ? flops * threads / st.min * 1e-9 : 0;
  }
  free(sinks);
  free(ctx);
  return gflops;
}

typedef struct bw_ctx {
  const uint64_t *p;
  size_t words;
  uint64_t sink;
} bw_ctx;

static void run_bandwidth(void *ctx, size_t iters) {
  bw_ctx *c = ctx;
  for (size_t it = 0; it < iters; it++) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= c->words; i += 4) {
      s0 += c->p[i];
      s1 += c->p[i + 1];
      s2 += c->p[i + 2];
      s3 += c->p[i + 3];
    }
    c->sink += s0 + s1 + s2 + s3;
  }
}

double bench_measure_bandwidth(bench_pool *pool, size_t bytes, double seconds) {
  const int threads = bench_pool_threads(pool);
  bw_ctx *c = calloc((size_t)threads, sizeof *c);
  void **ctx = calloc((size_t)threads, sizeof *ctx);
  double gbps = 0;
  int ok = c && ctx;
  const size_t words = bytes / sizeof(uint64_t) / (size_t)threads / 4 * 4;
  for (int t = 0; ok && t < threads; t++) {
    uint64_t *p = aligned_alloc(64, words * sizeof *p);
    if (!p) {
      ok = 0;
      break;
    }
    memset(p, 1, words * sizeof *p);
    c[t] = (bw_ctx){p, words, 0};
    ctx[t] = &c[t];
  }
  if (ok) {
    bench_timing timing = probe_timing(seconds);
    bench_stats st;
    bench_measure(pool, &timing, run_bandwidth, ctx, &st);
    gbps = st.min > 0 ? (double)(words * sizeof(uint64_t)) * threads / st.min * 1e-9 : 0;
  }
  for (int t = 0; c && t < threads; t++) free((void *)c[t].p);
  free(c);
  free(ctx);
  return gbps;
}
