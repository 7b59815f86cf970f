/* sysinfo.c: what the run is (machine, build, library) and what the machine can do (FMA peak per
 * path, read bandwidth), measured in the same run with the same timing loop. */
#include <math.h>
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
  if (!cpuinfo_value(model_keys, info->cpu, sizeof info->cpu)) snprintf(info->cpu, sizeof info->cpu, "unknown");
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
  snprintf(info->flags, sizeof info->flags, "buildtype=%s optimization=%s c_std=%s c_args=[%s]%s", ATTN_BENCH_BUILDTYPE,
           ATTN_BENCH_OPTIMIZATION, ATTN_BENCH_C_STD, ATTN_BENCH_C_ARGS,
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

/* One probe per path of the ISA list native on this host (bench/meson.build). */
#define BENCH_PATH_PROBE(name, ID) \
  BENCH_PEAK_DECLARE(name)         \
  static void run_peak_##name(void *ctx, size_t iters) { *(volatile float *)ctx = bench_peak_##name(iters); }
ATTN_BENCH_PATH_PROBES
#undef BENCH_PATH_PROBE

/* Whether the library's path runs natively on this CPU. */
static int path_native(attn_isa isa) {
  int native = 0;
  return attn_isa_available(isa, &native) && native;
}

typedef struct probe_def {
  const char *name;
  attn_isa path; /* ATTN_ISA_NONE: a machine probe (an ISA without an attn path; none today) */
  bench_kernel fn;
  const double *flops; /* per iteration */
  int (*runs)(void);   /* machine probes: whether this CPU runs it (paths: path_native) */
} probe_def;

static const probe_def probe_defs[] = {
#define BENCH_PATH_PROBE(name, ID) {#name, ATTN_ISA_##ID, run_peak_##name, &bench_peak_##name##_flops, NULL},
    ATTN_BENCH_PATH_PROBES
#undef BENCH_PATH_PROBE
};

/* Peaks and bandwidth are best cases: they use the fastest sample (or trial). */
static bench_timing probe_timing(double seconds) {
  return (bench_timing){.min_time = seconds, .min_reps = 5, .max_reps = 100000, .warmup = 1, .noisy_spread = 1.0};
}

/* A peak is an upper bound that must hold still from the start of a run to its end, while these
 * guests change clock within seconds: each figure is the best of PEAK_ROUNDS short trials, a
 * trial's figure being its median sample (GFLOP/s, all pool threads together). The rounds go
 * through every probe in turn, so a slow spell of a few hundred milliseconds lowers one trial of
 * each probe rather than all the trials of one. */
#define PEAK_ROUNDS        7
#define PEAK_TRIAL_SECONDS 0.04

static double probe_trial(bench_pool *pool, const probe_def *p, void **ctx) {
  bench_stats st;
  const bench_timing timing = probe_timing(PEAK_TRIAL_SECONDS);
  bench_measure(pool, &timing, p->fn, ctx, &st);
  return st.median > 0 ? *p->flops * bench_pool_threads(pool) / st.median * 1e-9 : 0;
}

/* best[k] = the best trial of probe defs[k] over the rounds (0 where defs[k] is NULL). */
static void measure_probes(bench_pool *pool, const probe_def *const *defs, size_t n, double *best) {
  const int threads = bench_pool_threads(pool);
  float *sinks = calloc((size_t)threads, sizeof *sinks);
  void **ctx = calloc((size_t)threads, sizeof *ctx);
  for (size_t k = 0; k < n; k++) best[k] = 0;
  if (sinks && ctx) {
    for (int t = 0; t < threads; t++) ctx[t] = &sinks[t];
    for (int round = 0; round < PEAK_ROUNDS; round++)
      for (size_t k = 0; k < n; k++) {
        const double g = defs[k] ? probe_trial(pool, defs[k], ctx) : 0;
        if (g > best[k]) best[k] = g;
      }
  }
  free(sinks);
  free(ctx);
}

void bench_measure_peaks(bench_pool *pool, bench_limits *l) {
  const probe_def *defs[BENCH_MAX_PROBES];
  double best[BENCH_MAX_PROBES];
  size_t n = 0;
  for (size_t i = 0; i < sizeof probe_defs / sizeof probe_defs[0] && n < BENCH_MAX_PROBES; i++) {
    const probe_def *p = &probe_defs[i];
    if (p->runs ? p->runs() : path_native(p->path)) defs[n++] = p;
  }
  measure_probes(pool, defs, n, best);
  l->nprobes = n;
  l->machine_peak = 0;
  for (size_t k = 0; k < n; k++) {
    l->probe[k] = (bench_probe){defs[k]->name, defs[k]->path, best[k], 0};
    if (defs[k]->path != ATTN_ISA_NONE) l->peak[defs[k]->path] = best[k];
    if (best[k] > l->machine_peak) l->machine_peak = best[k];
  }
}

void bench_measure_peaks_end(bench_pool *pool, bench_limits *l) {
  const probe_def *defs[BENCH_MAX_PROBES];
  double best[BENCH_MAX_PROBES];
  for (size_t k = 0; k < l->nprobes; k++) {
    defs[k] = NULL;
    for (size_t i = 0; i < sizeof probe_defs / sizeof probe_defs[0]; i++)
      if (!strcmp(probe_defs[i].name, l->probe[k].name)) defs[k] = &probe_defs[i];
  }
  measure_probes(pool, defs, l->nprobes, best);
  l->drift = 0;
  for (size_t k = 0; k < l->nprobes; k++) {
    bench_probe *pr = &l->probe[k];
    pr->end = best[k];
    const double d = pr->start > 0 ? fabs(pr->end / pr->start - 1) : 0;
    if (d > l->drift) l->drift = d;
  }
}

size_t bench_llc_bytes(void) {
  static size_t llc; /* read once */
  if (llc) return llc;
  size_t best = 0;
  for (int i = 0; i < 16; i++) { /* cpu0's caches: the largest (the last level, shared) */
    char path[96], line[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(line, sizeof line, f)) {
      char *end;
      unsigned long long x = strtoull(line, &end, 10);
      x *= *end == 'K' ? 1024ull : *end == 'M' ? 1048576ull : *end == 'G' ? 1073741824ull : 1ull;
      if (x > best && x <= SIZE_MAX) best = (size_t)x;
    }
    fclose(f);
  }
  llc = best ? best : (size_t)32 << 20;
  return llc;
}

size_t bench_memory_bytes(void) {
  const size_t llc2 = 2 * bench_llc_bytes(), floor = (size_t)128 << 20;
  return llc2 > floor ? llc2 : floor;
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
    uint64_t *p = bench_alloc64(words * sizeof *p); /* the calls' pages: huge with --hugepages */
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
