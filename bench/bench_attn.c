/*
 * attn-bench: throughput of every attn variant on every native ISA path against sequence length,
 * decode, the linear/softmax crossover, and baselines (naive attention through OpenBLAS and
 * oneDNN, a one-pass recurrent loop), all in one run. See --help, and flops.h for how work is
 * counted. The variants and their calls live in adapters (variant.h, variants/); this file only
 * loops over them.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"

/* ------------------------------------------------------------------------------------------ */
/* Adapters and their variants                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Every family of attn calls the bench measures (bench/variants/). */
static const bench_adapter *const adapters[] = {&bench_softmax_adapter, &bench_linear_adapter, &bench_gau_adapter,
                                                &bench_selective_adapter, &bench_delta_adapter};
#define NADAPTERS (sizeof adapters / sizeof adapters[0])

/* Every variant of every adapter, prefill before decode (the sweep's order, and that of every
 * report), each mode in adapter order. */
static const bench_variant *variants[BENCH_MAX_VARIANTS];
static size_t nvariants;

/* Past BENCH_MAX_VARIANTS the table would lose its last rows without a word (0.10.0 lost the
 * delta rule's decode rows so, and the main job's sweep named one): a hard failure instead. */
static void list_variants(void) {
  for (int mode = BENCH_PREFILL; mode <= BENCH_DECODE; mode++)
    for (size_t a = 0; a < NADAPTERS; a++)
      for (size_t i = 0; i < adapters[a]->count; i++) {
        if (adapters[a]->variants[i].mode != (bench_mode)mode) continue;
        if (nvariants == BENCH_MAX_VARIANTS) {
          fprintf(stderr, "attn-bench: more than BENCH_MAX_VARIANTS (%d) variants: raise it (bench/variant.h)\n",
                  BENCH_MAX_VARIANTS);
          exit(1);
        }
        variants[nvariants++] = &adapters[a]->variants[i];
      }
}

static const bench_variant *find_variant(const char *name) {
  for (size_t i = 0; i < nvariants; i++)
    if (strcmp(variants[i]->name, name) == 0) return variants[i];
  return NULL;
}

static size_t variant_index(const bench_variant *v) { return bench_variant_index(variants, nvariants, v); }

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct options {
  int variant_on[BENCH_MAX_VARIANTS];
  int isa_on[ATTN_ISA_COUNT];
  size_t sizes[BENCH_MAX_SIZES], nsizes;   /* explicit --sizes */
  size_t caches[BENCH_MAX_SIZES], ncaches; /* explicit --caches */
  size_t n_min, n_max, quad_n_max, cache_min, cache_max;
  int n_max_set, quad_set;
  size_t d[BENCH_MAX_SIZES], nd;
  size_t heads, kv_heads, window;
  size_t delta_sizes[BENCH_MAX_SIZES], ndelta_sizes; /* the delta rule's rows */
  size_t delta_d[BENCH_MAX_SIZES], ndelta_d;
  size_t delta_heads[BENCH_MAX_SIZES], ndelta_heads;
  int kv_head_major;  /* --kv-layout head */
  int qkv_head_major; /* --linear-layout head */
  int threads, pin, latency, hugepages;
  size_t scaling[BENCH_MAX_SIZES], nscaling; /* --scaling: thread counts */
  double min_time, max_call_time, noisy;
  unsigned reps, warmup, retries, rounds;
  const char *out_dir, *csv, *json, *svg, *md;
  int baselines, plot, extend, quick, dry_run;
} options;

typedef struct opt_def {
  const char *name, *arg, *help;
} opt_def;

static const opt_def opt_defs[] = {
    {"variants", "LIST",
     "variants or groups to run, comma-separated (default: all).\n"
     "groups: all, prefill, decode, softmax, linear, gau, selective, delta"},
    {"isa", "LIST",
     "ISA paths, comma-separated: native (default: every path this CPU runs\n"
     "natively), best (the one `auto` picks), or names (scalar, avx2, avx512,\n"
     "neon). Emulated paths are marked native=0"},
    {"sizes", "LIST", "prefill sequence lengths (e.g. 128,1k,4k); overrides --n-min/--n-max"},
    {"n-min", "N", "smallest prefill n, powers of two from here (default 128)"},
    {"n-max", "N", "largest prefill n (default 65536)"},
    {"quad-n-max", "N",
     "largest n for softmax full and causal (default 16384, or --n-max if\n"
     "that is given)"},
    {"caches", "LIST", "decode cache lengths (e.g. 4k,32k); overrides --cache-min/--cache-max"},
    {"cache-min", "N", "smallest decode cache, powers of two from here (default 1024)"},
    {"cache-max", "N", "largest decode cache (default 131072)"},
    {"d", "LIST", "head dimensions d = dv, comma-separated (default 64)"},
    {"heads", "H", "query heads per sequence (default 1)"},
    {"kv-heads", "H", "key/value heads, dividing --heads (GQA; default = --heads)"},
    {"window", "W", "keys seen by softmax_window, itself included (default 256)"},
    {"delta-sizes", "LIST", "prefill sizes of the delta-rule rows (default 1k,4k,16k)"},
    {"delta-d", "LIST", "head dimensions d = dv of the delta-rule rows (default 128,64)"},
    {"delta-heads", "HK,HV",
     "key and value heads of the delta-rule rows, HK dividing HV (default 16,32:\n"
     "Qwen3-Next's linear-attention layers)"},
    {"kv-layout", "L",
     "softmax K/V layout: token ([n][heads][d], the default) or head ([heads][n][d]:\n"
     "each head's rows contiguous, as a per-head cache)"},
    {"linear-layout", "L",
     "linear Q, K, V and O layout: token ([n][heads][d], the default) or head\n"
     "([heads][n][d]: each head's rows contiguous); the recurrent baseline reads the same"},
    {"threads", "T",
     "run T independent sequences at once, one per thread, each with its own\n"
     "buffers and workspace; results are aggregate (default 1). A library call\n"
     "is single-threaded, so T > 1 measures throughput, not one call's latency"},
    {"latency", NULL,
     "with --threads T: time one call on T threads (its own attn_pool given\n"
     "through attn_shape.threads; the OpenBLAS and oneDNN baselines get T\n"
     "threads too, the recurrent loop one): latency, not throughput"},
    {"scaling", "LIST",
     "thread-scaling table instead of the sweep: one call of each selected\n"
     "variant at each size on each of these thread counts (e.g. 1,2,4,8,16),\n"
     "times and speedups over 1 thread measured in the same run, and each count's\n"
     "speedup from calls alternating with 1-thread ones (~5 ms a side, the\n"
     "median of the pairs' ratios); written to DIR/attn-scaling.md"},
    {"pin", "CPU",
     "pin thread t to CPU (CPU + t) mod online CPUs (default: no pinning); with\n"
     "--latency or --scaling, worker t of the call's attn_pool likewise (attn_pool_pin)"},
    {"hugepages", NULL,
     "allocate buffers of 2 MiB and more 2 MiB aligned and advise MADV_HUGEPAGE\n"
     "(Linux transparent huge pages, where the kernel's mode is madvise or\n"
     "always): a decode over a large cache then pays fewer TLB misses"},
    {"decode-copies", "N",
     "decode rows keep N copies of their K/V cache and each call reads the next\n"
     "(default 0: as many as make twice the last-level cache, so that every call\n"
     "reads its cache from memory as an engine's step does; 1: one cache, read\n"
     "again by every call, from L2 / L3 where it fits)"},
    {"min-time", "S", "seconds of samples per point, at least (default 0.2)"},
    {"reps", "N", "samples per point, at least (default 3)"},
    {"warmup", "N", "untimed runs before sampling, at least (default 1)"},
    {"rounds", "N",
     "measure in turn N times, keeping each row's best median (default 1): the sweep\n"
     "then runs each point's paths and baselines one after the other (a ratio\n"
     "between them sees the same stretch of a noisy machine); with --scaling, the\n"
     "thread counts"},
    {"retries", "N",
     "measure a noisy point again up to N times, keeping the steadiest attempt\n"
     "(default 1)"},
    {"max-call-time", "S",
     "skip points predicted (from the previous n) to take longer than S\n"
     "seconds per call (default 2; 0: no limit)"},
    {"noisy", "F", "flag rows whose spread (IQR / median) exceeds F (default 0.10)"},
    {"out-dir", "DIR",
     "directory of the default output files (default bench-results in the\n"
     "current directory; bench/run.sh passes <repository>/bench-results)"},
    {"csv", "PATH", "CSV output (default DIR/attn-bench.csv)"},
    {"json", "PATH", "JSON output (default DIR/attn-bench.json)"},
    {"md", "PATH", "Markdown results table (default DIR/attn-bench.md)"},
    {"svg", "PATH",
     "plot, made with gnuplot when it is installed (default DIR/attn-bench.svg;\n"
     "the gnuplot script is written next to it with .gp)"},
    {"no-baselines", NULL, "skip the baselines (OpenBLAS, oneDNN, recurrent loop)"},
    {"no-plot", NULL, "do not write the gnuplot script or the SVG"},
    {"no-extend", NULL,
     "do not measure below the sweep when linear already wins at its\n"
     "smallest n (the crossover then reads \"< n\")"},
    {"quick", NULL,
     "the representative sweep (bench/run.sh's default; below): every family's\n"
     "main cases on the best path, a few sizes, the baselines and the crossover,\n"
     "short samples; options given explicitly win over its parts"},
    {"dry-run", NULL,
     "check the options (a preset's too) and print the points the sweep would\n"
     "measure, then exit without measuring (the test suite runs --quick so)"},
    {"help", NULL, "show this help and exit"},
};

/* --quick, the representative sweep (bench/run.sh's default), as the options it stands for; each
 * applies unless the command line gives it (or, for the sizes and the caches, one of their
 * bounds). Every family's main cases: softmax (full, causal, window), the linear maps (elu+1 both
 * ways, exp, FAVOR+), decayed and gated linear attention (RetNet, a scalar and a per-feature
 * gate), GAU, selective and FLASH's linear part, decode over a cache (fp32, fp16, GAU, a selective
 * budget), two linear steps and Gated DeltaNet (one prefill size and the decode step, at d = 128
 * with Qwen3-Next's heads), each with its baselines; on the path `auto` picks, four prefill
 * sizes and two caches, short samples and no second try of a noisy point, so that a 2-core
 * machine runs it in a couple of minutes. */
static const char *const quick_preset[][2] = {
    {"variants",
     "softmax_full,softmax_causal,softmax_window,linear_elu1,linear_elu1_causal,linear_exp_causal,"
     "linear_favor_causal,linear_retnet_causal,linear_gla_scalar_causal,linear_gla_causal,gau_causal,"
     "gau_window,selective_causal,linear_flash_causal,softmax_decode,softmax_decode_f16,gau_decode,"
     "selective_decode_k256,linear_elu1_decode,linear_gla_decode,delta_gdn,delta_gdn_decode"},
    {"isa", "best"},
    {"sizes", "512,2k,8k,32k"},
    {"caches", "4k,32k"},
    {"min-time", "0.25"},
    {"retries", "1"},
    {"max-call-time", "0.5"},
    {"delta-sizes", "2k"},
    {"delta-d", "128"},
};

static void usage(FILE *f) {
  fprintf(f,
          "Usage: attn-bench [OPTIONS]\n\n"
          "Measures every attn variant on every native ISA path across sequence lengths, decode over\n"
          "growing caches, the n where linear attention overtakes softmax attention, and baselines\n"
          "(naive attention through OpenBLAS and through oneDNN, each where the build found it; a\n"
          "one-pass recurrent loop for causal linear attention, built for this CPU).\n"
          "Prints a table while it runs and writes CSV, JSON, Markdown and an SVG plot.\n"
          "Lists take commas; sizes take k and M suffixes (1k = 1024).\n\nOptions:\n");
  for (size_t i = 0; i < sizeof opt_defs / sizeof opt_defs[0]; i++) {
    char head[48];
    snprintf(head, sizeof head, "--%s%s%s", opt_defs[i].name, opt_defs[i].arg ? " " : "",
             opt_defs[i].arg ? opt_defs[i].arg : "");
    fprintf(f, "  %-22s", head);
    for (const char *p = opt_defs[i].help; *p; p++) {
      fputc(*p, f);
      if (*p == '\n') fprintf(f, "  %-22s", "");
    }
    fputc('\n', f);
  }
  fprintf(f, "\n--quick stands for (long values wrapped at commas):\n");
  for (size_t k = 0; k < sizeof quick_preset / sizeof quick_preset[0]; k++) {
    int col = fprintf(f, "  --%s ", quick_preset[k][0]);
    for (const char *p = quick_preset[k][1]; *p; p++) {
      fputc(*p, f), col++;
      if (*p == ',' && col > 64) fprintf(f, "\n%*s", 4 + (int)strlen(quick_preset[k][0]), ""), col = 0;
    }
    fputc('\n', f);
  }
  fprintf(f, "\nVariants:\n");
  for (size_t i = 0; i < nvariants; i++) fprintf(f, "  %-26s%s\n", variants[i]->name, variants[i]->help);
  fprintf(f,
          "\nTiming: CLOCK_MONOTONIC; calls per sample calibrated to >= min-time/20; warm-up; samples\n"
          "until --min-time and --reps are both reached; the median is reported with min and spread\n"
          "(IQR / median). Rows with spread > --noisy, or that lost > 10%% of their CPU time to\n"
          "other tasks, are flagged noisy and measured again (--retries). Flop and byte counts:\n"
          "see bench/flops.h.\n"
          "Exit status: 0 on success, 1 if a measurement failed, 2 on bad options.\n");
}

static void die_usage(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "attn-bench: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\nRun 'attn-bench --help' for the options.\n");
  exit(2);
}

/* A size with an optional k (1024) or M (1048576) suffix; > 0. */
static size_t parse_size(const char *opt, const char *s) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno || s[0] == '-') die_usage("--%s: '%s' is not a positive size", opt, s);
  if (*end == 'k' || *end == 'K')
    v *= 1024ull, end++;
  else if (*end == 'm' || *end == 'M')
    v *= 1048576ull, end++;
  if (*end || v == 0 || v > (1ull << 40)) die_usage("--%s: '%s' is not a positive size", opt, s);
  return (size_t)v;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return (x > y) - (x < y);
}

static size_t parse_size_list(const char *opt, const char *s, size_t *out) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", s);
  size_t n = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (n == BENCH_MAX_SIZES) die_usage("--%s: more than 64 values in '%s'", opt, s);
    out[n++] = parse_size(opt, tok);
  }
  if (!n) die_usage("--%s: empty list '%s'", opt, s);
  return n;
}

static double parse_double(const char *opt, const char *s, double lo) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v >= lo) || !isfinite(v)) die_usage("--%s: '%s' is not a valid number", opt, s);
  return v;
}

static int parse_int(const char *opt, const char *s, int lo, int hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi)
    die_usage("--%s: '%s' is not an integer in the allowed range (see --help)", opt, s);
  return (int)v;
}

/* Whether v is in a group: all, prefill, decode, or an adapter's name; -1 for no such group. */
static int group_has(const char *group, const bench_variant *v) {
  if (!strcmp(group, "all")) return 1;
  if (!strcmp(group, "prefill")) return v->mode == BENCH_PREFILL;
  if (!strcmp(group, "decode")) return v->mode == BENCH_DECODE;
  for (size_t a = 0; a < NADAPTERS; a++)
    if (!strcmp(group, adapters[a]->name)) return v->adapter == adapters[a];
  return -1;
}

static void parse_variants(options *o, const char *s) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", s);
  memset(o->variant_on, 0, sizeof o->variant_on);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    const bench_variant *v = find_variant(tok);
    if (v) {
      o->variant_on[variant_index(v)] = 1;
      continue;
    }
    if (group_has(tok, variants[0]) < 0) die_usage("--variants: unknown variant or group '%s'%s", tok, " (see --help)");
    for (size_t i = 0; i < nvariants; i++)
      if (group_has(tok, variants[i])) o->variant_on[i] = 1;
  }
}

static void parse_isas(options *o, const char *s) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  memset(o->isa_on, 0, sizeof o->isa_on);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    int native = 0;
    if (!strcmp(tok, "best")) { /* the path `auto` picks (ATTN_ISA may have set another) */
      const attn_isa best = attn_isa_get();
      if (best > ATTN_ISA_AUTO && best < ATTN_ISA_COUNT) o->isa_on[best] = 1;
      continue;
    }
    if (!strcmp(tok, "native")) {
      for (int i = ATTN_ISA_SCALAR; i < ATTN_ISA_COUNT; i++)
        if (attn_isa_available((attn_isa)i, &native) && native) o->isa_on[i] = 1;
      continue;
    }
    attn_isa isa = attn_isa_from_name(tok);
    if (isa <= ATTN_ISA_AUTO || isa >= ATTN_ISA_COUNT)
      die_usage("--isa: unknown path '%s'%s", tok, " (scalar, avx2, avx512, neon, native or best)");
    if (!attn_isa_available(isa, &native)) die_usage("--isa: path '%s' cannot run on this CPU%s", tok, "");
    o->isa_on[isa] = 1;
  }
}

static void defaults(options *o) {
  memset(o, 0, sizeof *o);
  parse_variants(o, "all");
  parse_isas(o, "native");
  o->n_min = 128;
  o->n_max = 65536;
  o->quad_n_max = 16384;
  o->cache_min = 1024;
  o->cache_max = 131072;
  o->d[0] = 64;
  o->nd = 1;
  o->heads = 1;
  o->window = 256;
  o->delta_sizes[0] = 1024, o->delta_sizes[1] = 4096, o->delta_sizes[2] = 16384, o->ndelta_sizes = 3;
  o->delta_d[0] = 128, o->delta_d[1] = 64, o->ndelta_d = 2;
  o->delta_heads[0] = 16, o->delta_heads[1] = 32, o->ndelta_heads = 2;
  o->threads = 1;
  o->pin = -1;
  o->min_time = 0.2;
  o->max_call_time = 2.0;
  o->noisy = 0.10;
  o->reps = 3;
  o->warmup = 1;
  o->retries = 1;
  o->rounds = 1;
  o->out_dir = "bench-results";
  o->baselines = 1;
  o->plot = 1;
  o->extend = 1;
}

/* Set one option from its name (without "--") and value (NULL for a flag). */
static void apply_opt(options *o, const char *name, const char *val) {
  if (!strcmp(name, "help"))
    usage(stdout), exit(0);
  else if (!strcmp(name, "variants"))
    parse_variants(o, val);
  else if (!strcmp(name, "isa"))
    parse_isas(o, val);
  else if (!strcmp(name, "sizes"))
    o->nsizes = parse_size_list(name, val, o->sizes);
  else if (!strcmp(name, "n-min"))
    o->n_min = parse_size(name, val);
  else if (!strcmp(name, "n-max"))
    o->n_max = parse_size(name, val), o->n_max_set = 1;
  else if (!strcmp(name, "quad-n-max"))
    o->quad_n_max = parse_size(name, val), o->quad_set = 1;
  else if (!strcmp(name, "cache-min"))
    o->cache_min = parse_size(name, val);
  else if (!strcmp(name, "cache-max"))
    o->cache_max = parse_size(name, val);
  else if (!strcmp(name, "d"))
    o->nd = parse_size_list(name, val, o->d);
  else if (!strcmp(name, "heads"))
    o->heads = parse_size(name, val);
  else if (!strcmp(name, "kv-heads"))
    o->kv_heads = parse_size(name, val);
  else if (!strcmp(name, "window"))
    o->window = parse_size(name, val);
  else if (!strcmp(name, "delta-sizes")) {
    o->ndelta_sizes = parse_size_list(name, val, o->delta_sizes);
    qsort(o->delta_sizes, o->ndelta_sizes, sizeof o->delta_sizes[0], cmp_size);
  } else if (!strcmp(name, "delta-d"))
    o->ndelta_d = parse_size_list(name, val, o->delta_d);
  else if (!strcmp(name, "delta-heads")) {
    o->ndelta_heads = parse_size_list(name, val, o->delta_heads);
    if (o->ndelta_heads != 2 || o->delta_heads[1] % o->delta_heads[0])
      die_usage("--delta-heads: '%s' is not HK,HV with HK dividing HV%s", val, "");
  }
  else if (!strcmp(name, "kv-layout")) {
    if (strcmp(val, "token") && strcmp(val, "head")) die_usage("--kv-layout: '%s' is not %s", val, "token or head");
    o->kv_head_major = !strcmp(val, "head");
  } else if (!strcmp(name, "linear-layout")) {
    if (strcmp(val, "token") && strcmp(val, "head")) die_usage("--linear-layout: '%s' is not %s", val, "token or head");
    o->qkv_head_major = !strcmp(val, "head");
  } else if (!strcmp(name, "threads"))
    o->threads = parse_int(name, val, 1, 1024);
  else if (!strcmp(name, "latency"))
    o->latency = 1;
  else if (!strcmp(name, "scaling"))
    o->nscaling = parse_size_list(name, val, o->scaling);
  else if (!strcmp(name, "decode-copies"))
    bench_decode_copies = (size_t)parse_int(name, val, 0, 1 << 20);
  else if (!strcmp(name, "hugepages")) {
    if (!bench_hugepages_supported()) die_usage("--hugepages: %s%s", "this system has no madvise(MADV_HUGEPAGE)", "");
    o->hugepages = 1;
  } else if (!strcmp(name, "pin"))
    o->pin = parse_int(name, val, 0, INT_MAX / 2);
  else if (!strcmp(name, "min-time"))
    o->min_time = parse_double(name, val, 0);
  else if (!strcmp(name, "reps"))
    o->reps = (unsigned)parse_int(name, val, 1, 100000);
  else if (!strcmp(name, "warmup"))
    o->warmup = (unsigned)parse_int(name, val, 0, 1000);
  else if (!strcmp(name, "rounds"))
    o->rounds = (unsigned)parse_int(name, val, 1, 100);
  else if (!strcmp(name, "retries"))
    o->retries = (unsigned)parse_int(name, val, 0, 100);
  else if (!strcmp(name, "max-call-time"))
    o->max_call_time = parse_double(name, val, 0);
  else if (!strcmp(name, "noisy"))
    o->noisy = parse_double(name, val, 0);
  else if (!strcmp(name, "out-dir"))
    o->out_dir = val;
  else if (!strcmp(name, "csv"))
    o->csv = val;
  else if (!strcmp(name, "json"))
    o->json = val;
  else if (!strcmp(name, "md"))
    o->md = val;
  else if (!strcmp(name, "svg"))
    o->svg = val;
  else if (!strcmp(name, "no-baselines"))
    o->baselines = 0;
  else if (!strcmp(name, "no-plot"))
    o->plot = 0;
  else if (!strcmp(name, "dry-run"))
    o->dry_run = 1;
  else if (!strcmp(name, "no-extend"))
    o->extend = 0;
  else if (!strcmp(name, "quick"))
    o->quick = 1;
  else if (!strcmp(name, "caches"))
    o->ncaches = parse_size_list(name, val, o->caches);
}

#define NOPTS (sizeof opt_defs / sizeof opt_defs[0])

static size_t opt_index(const char *name) {
  size_t j = 0;
  while (j < NOPTS && strcmp(opt_defs[j].name, name)) j++;
  return j;
}

/* Whether the command line gave a preset option, or one that sets the same thing (a bound of the
 * sizes or of the caches). */
static int preset_overridden(const int *given, const char *name) {
  static const char *const same[][3] = {{"sizes", "n-min", "n-max"}, {"caches", "cache-min", "cache-max"}};
  if (given[opt_index(name)]) return 1;
  for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
    if (!strcmp(same[k][0], name))
      for (int m = 1; m < 3; m++)
        if (given[opt_index(same[k][m])]) return 1;
  return 0;
}

static void parse_args(options *o, int argc, char **argv) {
  defaults(o);
  int given[NOPTS] = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) die_usage("unexpected argument '%s'%s", a, "");
    char name[64];
    const char *eq = strchr(a + 2, '='), *val = NULL;
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (len >= sizeof name) die_usage("unknown option '%s'%s", a, "");
    memcpy(name, a + 2, len);
    name[len] = 0;
    const size_t j = opt_index(name);
    if (j == NOPTS) die_usage("unknown option '--%s'%s", name, "");
    const opt_def *def = &opt_defs[j];
    if (def->arg) {
      if (eq)
        val = eq + 1;
      else if (i + 1 < argc)
        val = argv[++i];
      else
        die_usage("--%s needs a value (%s)", name, def->arg);
    } else if (eq) {
      die_usage("--%s takes no value%s", name, "");
    }
    given[j] = 1;
    apply_opt(o, name, val);
  }
  for (size_t k = 0; o->quick && k < sizeof quick_preset / sizeof quick_preset[0]; k++)
    if (!preset_overridden(given, quick_preset[k][0])) apply_opt(o, quick_preset[k][0], quick_preset[k][1]);
  if (o->nsizes) { /* explicit sizes: the largest is the limit unless a limit is given */
    qsort(o->sizes, o->nsizes, sizeof o->sizes[0], cmp_size);
    if (!o->n_max_set) o->n_max = o->sizes[o->nsizes - 1], o->n_max_set = 1;
  }
  if (o->ncaches) qsort(o->caches, o->ncaches, sizeof o->caches[0], cmp_size);
  if (o->n_max_set && !o->quad_set) o->quad_n_max = o->n_max;
  if (!o->kv_heads) o->kv_heads = o->heads;
  if (o->heads % o->kv_heads)
    die_usage("--kv-heads must divide --heads (%s)", "query head h reads kv head h / (H / H_kv)", "");
  if (!o->nsizes && o->n_min > o->n_max) die_usage("--n-min is above --n-max%s%s", "", "");
  if (o->cache_min > o->cache_max) die_usage("--cache-min is above --cache-max%s%s", "", "");
  int any = 0;
  for (int i = 0; i < ATTN_ISA_COUNT; i++) any |= o->isa_on[i];
  if (!any) die_usage("no ISA path selected%s%s", "", "");
}

/* ------------------------------------------------------------------------------------------ */
/* Plan and measurement                                                                         */
/* ------------------------------------------------------------------------------------------ */

typedef struct run_ctx {
  options opt;
  bench_results res;
  bench_pool *pool;
  size_t done; /* rows finished, for the progress counter */
  size_t planned;
  int failures;
  bench_progress progress;
} run_ctx;

static bench_row *push_row(bench_results *r) {
  if (r->count == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 256;
    bench_row *rows = realloc(r->rows, cap * sizeof *rows);
    if (!rows) {
      fprintf(stderr, "attn-bench: out of memory\n");
      exit(1);
    }
    r->rows = rows;
    r->cap = cap;
  }
  bench_row *row = &r->rows[r->count++];
  memset(row, 0, sizeof *row);
  return row;
}

/* What the options say about the shapes, for the adapters. */
static bench_sweep sweep_of(const options *o) {
  return (bench_sweep){o->sizes,       o->nsizes,        o->caches,          o->ncaches,        o->n_min,
                       o->n_max,       o->quad_n_max,    o->cache_min,       o->cache_max,      o->heads,
                       o->kv_heads,    o->window,        o->kv_head_major,   o->qkv_head_major, o->delta_sizes,
                       o->ndelta_sizes, o->delta_d,      o->ndelta_d,        o->delta_heads[0], o->delta_heads[1]};
}

/* The head dimensions v is measured at: its adapter's, or --d. */
static size_t variant_dims(const options *o, const bench_variant *v, size_t *out) {
  if (v->adapter->dims) {
    const bench_sweep sw = sweep_of(o);
    return v->adapter->dims(v, &sw, o->d, o->nd, out);
  }
  for (size_t i = 0; i < o->nd; i++) out[i] = o->d[i];
  return o->nd;
}

static bench_row *add_row(run_ctx *rc, const bench_variant *v, attn_isa isa, const char *baseline, bench_kind kind,
                          size_t n, size_t d) {
  bench_row *row = push_row(&rc->res);
  row->var = v;
  row->isa = isa;
  row->baseline = baseline != NULL;
  row->impl = baseline ? baseline : attn_isa_name(isa);
  if (baseline)
    row->native = 1;
  else
    attn_isa_available(isa, &row->native);
  const bench_sweep sw = sweep_of(&rc->opt);
  row->shape = v->adapter->shape(v, &sw, kind, n, d);
  row->cost = v->adapter->cost(&row->shape, isa);
  return row;
}

static int same_series(const bench_row *a, const bench_row *b) {
  return a->var == b->var && a->isa == b->isa && a->baseline == b->baseline && a->shape.d == b->shape.d &&
         a->shape.kind == b->shape.kind;
}

/* Decide whether a row is skipped before it runs; 1 if it is (note says why). */
static int skip_row(run_ctx *rc, bench_row *row, const bench_row *prev) {
  const options *o = &rc->opt;
  if (row->baseline) {
    const bench_baseline_info *base = &rc->res.base[bench_baseline_of(row->shape.kind)];
    if (!base->available) {
      snprintf(row->note, sizeof row->note, "skipped (%s)", base->absent);
      return 1;
    }
    if (base->softmax &&
        (double)row->shape.n_q * (double)row->shape.n_kv * sizeof(float) > (double)BENCH_BLAS_MAX_BYTES) {
      snprintf(row->note, sizeof row->note, "skipped (n x n memory > 1 GiB)");
      return 1;
    }
  }
  if (prev && prev->state == ROW_SKIPPED && strstr(prev->note, "max-call-time")) {
    snprintf(row->note, sizeof row->note, "%s", prev->note);
    return 1;
  }
  if (prev && prev->state == ROW_OK && o->max_call_time > 0 && prev->cost.flops > 0) {
    double predicted = prev->st.median * row->cost.flops / prev->cost.flops;
    if (predicted > o->max_call_time) {
      snprintf(row->note, sizeof row->note, "skipped (over --max-call-time %g s)", o->max_call_time);
      return 1;
    }
  }
  return 0;
}

static void measure_row(run_ctx *rc, bench_row *row) {
  const int threads = rc->opt.threads;
  const bench_call *call =
      row->baseline ? rc->res.base[bench_baseline_of(row->shape.kind)].call : &row->var->adapter->call;
  bench_work *work = calloc((size_t)threads, sizeof *work);
  void **ctx = calloc((size_t)threads, sizeof *ctx);
  char err[160] = "";
  attn_status st = ATTN_OK;
  row->state = ROW_FAILED;
  if (!work || !ctx) {
    snprintf(row->note, sizeof row->note, "out of memory");
    goto done;
  }
  if (!row->baseline && (st = attn_isa_set(row->isa)) != ATTN_OK) {
    snprintf(row->note, sizeof row->note, "attn_isa_set: %s", attn_status_string(st));
    goto done;
  }
  for (int t = 0; t < threads; t++) {
    ctx[t] = &work[t];
    if (bench_work_init(&work[t], &row->shape, call, (unsigned)t, err, sizeof err)) {
      snprintf(row->note, sizeof row->note, "%s", err);
      goto done;
    }
  }
  /* A noisy result is measured again (--retries); the steadiest attempt is kept. */
  bench_measure(rc->pool, &rc->res.timing, bench_work_run, ctx, &row->st);
  for (unsigned a = 0; a < rc->opt.retries && row->st.noisy; a++) {
    bench_stats again;
    bench_measure(rc->pool, &rc->res.timing, bench_work_run, ctx, &again);
    if (again.noisy < row->st.noisy || again.spread < row->st.spread) row->st = again;
    row->retried++;
  }
  for (int t = 0; t < threads; t++)
    if (work[t].status != ATTN_OK || work[t].failure) {
      snprintf(row->note, sizeof row->note, "call failed: %s",
               work[t].failure ? work[t].failure : attn_status_string(work[t].status));
      goto done;
    }
  row->state = ROW_OK;
  if (call->describe) call->describe(&work[0], row->note, sizeof row->note);
done:
  for (int t = 0; work && t < threads; t++) bench_work_free(&work[t]);
  free(work);
  free(ctx);
}

/* Skip or measure one planned row (its first round). */
static void start_row(run_ctx *rc, size_t index) {
  bench_row *row = &rc->res.rows[index];
  const bench_row *prev = NULL;
  for (size_t i = index; i-- > 0;)
    if (same_series(&rc->res.rows[i], row) && !rc->res.rows[i].extra) {
      prev = &rc->res.rows[i];
      break;
    }
  if (row->extra) prev = NULL;
  if (skip_row(rc, row, prev))
    row->state = ROW_SKIPPED;
  else
    measure_row(rc, row);
}

/* A further round of a measured row: its best median is kept (a failure stays a failure). */
static void remeasure_row(run_ctx *rc, bench_row *row) {
  if (row->state != ROW_OK) return;
  const bench_stats kept = row->st;
  measure_row(rc, row);
  if (row->state == ROW_OK && kept.median <= row->st.median) row->st = kept;
}

static void finish_row(run_ctx *rc, const bench_row *row) {
  if (row->state == ROW_FAILED) rc->failures++;
  bench_progress_clear(&rc->progress);
  bench_print_row(stdout, &rc->res, row, ++rc->done, rc->planned);
  fflush(stdout);
  bench_progress_done(&rc->progress, &rc->res, row, rc->done, rc->planned);
}

/* Run one planned row: skip or measure, then print it. */
static void run_row(run_ctx *rc, size_t index) {
  start_row(rc, index);
  finish_row(rc, &rc->res.rows[index]);
}

/* The same point: a variant (or a variant and its twin, the same call without a feature) at one
 * d and n. */
static int same_point(const bench_row *a, const bench_row *b) {
  const char *ta = bench_twin_of(a->var, NULL), *tb = bench_twin_of(b->var, NULL);
  return (a->var == b->var || (ta && !strcmp(ta, b->var->name)) || (tb && !strcmp(tb, a->var->name))) &&
         a->shape.d == b->shape.d && a->shape.n_q == b->shape.n_q && a->shape.n_kv == b->shape.n_kv;
}

/* The sweep with --rounds N > 1: each point (a variant at one d and n, with its twin) on every
 * selected path and baseline, those rows one after the other, N times; points in the order of their first
 * row in the plan, so that each series still grows in n (the --max-call-time prediction). */
static void run_rounds(run_ctx *rc) {
  const size_t count = rc->res.count;
  unsigned char *done = calloc(count ? count : 1, 1);
  size_t *group = malloc((count ? count : 1) * sizeof *group);
  if (!done || !group) {
    fprintf(stderr, "attn-bench: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < count; i++) {
    if (done[i]) continue;
    size_t ng = 0;
    for (size_t j = i; j < count; j++)
      if (!done[j] && same_point(&rc->res.rows[i], &rc->res.rows[j])) group[ng++] = j, done[j] = 1;
    for (size_t k = 0; k < ng; k++) start_row(rc, group[k]);
    for (unsigned round = 1; round < rc->opt.rounds; round++)
      for (size_t k = 0; k < ng; k++) remeasure_row(rc, &rc->res.rows[group[k]]);
    for (size_t k = 0; k < ng; k++) finish_row(rc, &rc->res.rows[group[k]]);
  }
  free(done);
  free(group);
}

/* All rows of the sweep, in series order (each series by growing n): every selected variant on
 * every selected path, then each baseline on the variants it stands in for. */
static void plan(run_ctx *rc) {
  const options *o = &rc->opt;
  const bench_sweep sw = sweep_of(o);
  size_t sizes[BENCH_MAX_SIZES], dims[BENCH_MAX_SIZES];
  for (int isa = ATTN_ISA_SCALAR; isa < ATTN_ISA_COUNT; isa++)
    for (size_t vi = 0; o->isa_on[isa] && vi < nvariants; vi++) {
      const bench_variant *v = variants[vi];
      const size_t nd = variant_dims(o, v, dims);
      for (size_t di = 0; o->variant_on[vi] && di < nd; di++) {
        size_t count = v->adapter->sizes(v, &sw, sizes);
        for (size_t i = 0; i < count; i++) add_row(rc, v, (attn_isa)isa, NULL, v->kind, sizes[i], dims[di]);
      }
    }
  if (!o->baselines) return;
  for (int b = 0; b < BENCH_BASE_COUNT; b++)
    for (size_t vi = 0; vi < nvariants; vi++) {
      const bench_variant *v = variants[vi];
      const bench_baseline_info *base = &rc->res.base[b];
      const size_t nd = variant_dims(o, v, dims);
      for (size_t di = 0; o->variant_on[vi] && (v->baselines >> b & 1u) && di < nd; di++) {
        size_t count = v->adapter->sizes(v, &sw, sizes);
        for (size_t i = 0; i < count; i++) add_row(rc, v, ATTN_ISA_NONE, base->name, base->kind, sizes[i], dims[di]);
      }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Baseline ratios and crossovers                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Point every attn row at the baseline rows of its variant and shape (after the last row is
 * added: the pointers index the final array). */
static void attach_baselines(bench_results *r) {
  for (size_t i = 0; i < r->count; i++) {
    bench_row *row = &r->rows[i];
    if (row->baseline) continue;
    for (size_t j = 0; j < r->count; j++) {
      const bench_row *b = &r->rows[j];
      if (b->baseline && b->var == row->var && b->shape.d == row->shape.d && b->shape.n_q == row->shape.n_q &&
          b->shape.n_kv == row->shape.n_kv)
        row->base[bench_baseline_of(b->shape.kind)] = b;
    }
  }
}

static const bench_row *find_ok(const bench_results *r, const bench_variant *v, attn_isa isa, size_t d, size_t n) {
  for (size_t i = 0; i < r->count; i++) {
    const bench_row *row = &r->rows[i];
    if (row->var == v && row->isa == isa && !row->baseline && row->shape.d == d && row->shape.n_q == n &&
        row->state == ROW_OK)
      return row;
  }
  return NULL;
}

/* n* for one (linear, softmax, isa, d): the last n where softmax is at least as fast, the next
 * one where linear is faster (and stays faster), interpolated log-linearly in log(t_lin/t_soft). */
static bench_crossover crossover(const bench_results *r, const bench_variant *lin, const bench_variant *soft,
                                 attn_isa isa, size_t d) {
  bench_crossover c = {lin, soft, isa, d, 0, 0, 0, 0, 0, 0};
  size_t ns[4 * BENCH_MAX_SIZES], count = 0;
  for (size_t i = 0; i < r->count && count < 4 * BENCH_MAX_SIZES; i++) {
    const bench_row *row = &r->rows[i];
    if (row->var == lin && row->isa == isa && !row->baseline && row->shape.d == d && row->state == ROW_OK &&
        find_ok(r, soft, isa, d, row->shape.n_q))
      ns[count++] = row->shape.n_q;
  }
  if (!count) {
    c.where = 2; /* nothing to compare */
    return c;
  }
  qsort(ns, count, sizeof ns[0], cmp_size);
  double y[4 * BENCH_MAX_SIZES];
  long last_soft = -1;
  for (size_t i = 0; i < count; i++) {
    y[i] = log(find_ok(r, lin, isa, d, ns[i])->st.median / find_ok(r, soft, isa, d, ns[i])->st.median);
    if (y[i] >= 0) last_soft = (long)i;
  }
  c.n_lo = ns[0];
  c.n_hi = ns[count - 1];
  c.ratio_lo = exp(y[0]);
  c.ratio_hi = exp(y[count - 1]);
  if (last_soft < 0)
    c.where = -1;
  else if ((size_t)last_soft == count - 1)
    c.where = 1;
  else {
    size_t k = (size_t)last_soft;
    double x0 = log((double)ns[k]), x1 = log((double)ns[k + 1]);
    c.n_star = exp(x0 + y[k] * (x1 - x0) / (y[k] - y[k + 1]));
  }
  return c;
}

static void compute_crossovers(run_ctx *rc) {
  bench_results *r = &rc->res;
  free(r->cross);
  r->cross = NULL;
  r->ncross = 0;
  size_t cap = nvariants * ATTN_ISA_COUNT * BENCH_MAX_SIZES;
  r->cross = calloc(cap, sizeof *r->cross);
  if (!r->cross) return;
  for (int isa = ATTN_ISA_SCALAR; isa < ATTN_ISA_COUNT; isa++) {
    if (!rc->opt.isa_on[isa]) continue;
    for (size_t vi = 0; vi < nvariants; vi++) {
      const bench_variant *lin = variants[vi];
      const bench_variant *soft = lin->partner ? find_variant(lin->partner) : NULL;
      if (!soft || !rc->opt.variant_on[vi] || !rc->opt.variant_on[variant_index(soft)]) continue;
      for (size_t di = 0; di < rc->opt.nd; di++) {
        bench_crossover c = crossover(r, lin, soft, (attn_isa)isa, rc->opt.d[di]);
        if (c.where != 2) r->cross[r->ncross++] = c;
      }
    }
  }
}

/* Where linear already wins at the smallest swept n, measure both variants at n/2, n/4, ...
 * (down to 8) until softmax wins, so the crossover is a measured n* rather than "< n". */
static void extend_crossovers(run_ctx *rc) {
  for (size_t ci = 0; ci < rc->res.ncross; ci++) {
    bench_crossover c = rc->res.cross[ci];
    if (c.where != -1) continue;
    for (size_t n = c.n_lo / 2; n >= 8; n /= 2) {
      const bench_variant *pair[2] = {c.softmax, c.linear};
      bench_row *rows[2];
      for (int k = 0; k < 2; k++) {
        rows[k] =
            find_ok(&rc->res, pair[k], c.isa, c.d, n) ? NULL : add_row(rc, pair[k], c.isa, NULL, pair[k]->kind, n, c.d);
        if (rows[k]) {
          rows[k]->extra = 1;
          rc->planned++;
          bench_progress_add(&rc->progress, &rc->res, rows[k]);
          run_row(rc, (size_t)(rows[k] - rc->res.rows));
        }
      }
      const bench_row *s = find_ok(&rc->res, c.softmax, c.isa, c.d, n);
      const bench_row *l = find_ok(&rc->res, c.linear, c.isa, c.d, n);
      if (!s || !l || s->st.median <= l->st.median) break;
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Main                                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* mkdir -p of the directory part of path. */
static void make_parent(const char *path) {
  char dir[1200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = 0;
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(dir, 0777);
      *p = '/';
    }
  mkdir(dir, 0777);
}

/* The output file `given`, or DIR/name: its directory is created and the path made absolute, so
 * the bench says exactly where it writes (left as given if that fails). */
static const char *out_path(const options *o, const char *given, const char *name, char *buf, size_t len) {
  char rel[1100], dir[PATH_MAX];
  if (given)
    snprintf(rel, sizeof rel, "%s", given);
  else
    snprintf(rel, sizeof rel, "%s/%s", o->out_dir, name);
  make_parent(rel);
  char *slash = strrchr(rel, '/');
  const char *base = slash ? slash + 1 : rel;
  if (slash) *slash = 0;
  const char *parent = !slash ? "." : slash == rel ? "/" : rel;
  if (realpath(parent, dir)) {
    snprintf(buf, len, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", base);
  } else {
    if (slash) *slash = '/';
    snprintf(buf, len, "%s", rel);
  }
  return buf;
}

static void limits(run_ctx *rc) {
  bench_limits *l = &rc->res.limits;
  printf("Measuring this machine's limits (%d thread%s)...\n", rc->opt.threads, rc->opt.threads > 1 ? "s" : "");
  fflush(stdout);
  bench_measure_peaks(rc->pool, l);
  l->bw = bench_measure_bandwidth(rc->pool, bench_memory_bytes(), 0.3); /* memory's, not a cache's */
}

/* The run is noisy when a probe's FMA peak moved by more than 5% between start and end, a fifth
 * of the rows are noisy, other tasks took more than 5% of this process's CPU, or other tasks kept
 * more than a quarter of a CPU busy on average while it measured. */
static void judge_noise(run_ctx *rc) {
  bench_results *r = &rc->res;
  size_t ok = 0, noisy = 0, known = 0;
  double share = 0, others = 0;
  for (size_t i = 0; i < r->count; i++)
    if (r->rows[i].state == ROW_OK) {
      ok++;
      noisy += (size_t)r->rows[i].st.noisy;
      share += r->rows[i].st.cpu_share;
      if (isfinite(r->rows[i].st.other_load)) others += r->rows[i].st.other_load, known++;
    }
  share = ok ? share / (double)ok : 1;
  others = known ? others / (double)known : 0;
  bench_measure_peaks_end(rc->pool, &r->limits);
  char drifts[160] = "";
  for (size_t k = 0; k < r->limits.nprobes; k++) {
    const bench_probe *p = &r->limits.probe[k];
    size_t used = strlen(drifts);
    snprintf(drifts + used, sizeof drifts - used, "%s%s %+.1f%%", used ? ", " : "", p->name,
             100 * (p->end / p->start - 1));
  }
  r->info.load_end = bench_loadavg();
  r->noisy_run = r->limits.drift > 0.05 || (ok && noisy * 5 > ok) || share < 0.95 || others > 0.25;
  snprintf(r->noise_note, sizeof r->noise_note,
           "%s: %zu of %zu rows noisy; CPU share %.0f%%; other tasks %.2f CPU on average; "
           "FMA peak end/start %s; load %.2f -> %.2f",
           r->noisy_run ? "NOISY" : "quiet", noisy, ok, 100 * share, others, drifts, r->info.load_start,
           r->info.load_end);
}

/* With --pin CPU, a call pool's workers 1 .. T - 1 pinned to CPUs CPU + 1 .. CPU + T - 1 (mod the
 * CPUs online), as --threads pins its own; worker 0, the calling thread, is on CPU. Unpinned, the
 * pool's threads would inherit the caller's one CPU where the caller pinned itself first. */
static attn_status pin_call_pool(const options *o, attn_pool *pool, size_t threads) {
  if (o->pin < 0 || threads < 2) return ATTN_OK;
  static int cpus[ATTN_MAX_WORKERS];
  const int ncpu = bench_online_cpus();
  for (size_t t = 1; t < threads; t++) cpus[t - 1] = (int)(((size_t)o->pin + t) % (size_t)ncpu);
  const attn_status st = attn_pool_pin(pool, cpus, threads - 1);
  if (st) fprintf(stderr, "attn-bench: cannot pin the call pool's threads: %s\n", attn_status_string(st));
  return st;
}

/* A call pool of `threads` workers (pinned as pin_call_pool says) and a work on it for `shape`;
 * 0 on success, else err says why (and nothing is left allocated). */
static int scaling_work(const options *o, const bench_variant *v, const bench_shape *shape, size_t threads,
                        attn_pool **pool, attn_threads *th, bench_work *w, char *err, size_t errlen) {
  *pool = NULL;
  if (attn_pool_create(threads, pool) != ATTN_OK || pin_call_pool(o, *pool, threads) != ATTN_OK ||
      attn_pool_threads(*pool, th) != ATTN_OK) {
    snprintf(err, errlen, "no pool of %zu threads", threads);
    attn_pool_destroy(*pool);
    return 1;
  }
  bench_call_threads = th;
  const int bad = bench_work_init(w, shape, &v->adapter->call, 0, err, errlen);
  bench_call_threads = NULL;
  if (bad) attn_pool_destroy(*pool);
  return bad;
}

/* The speedup of T = counts[t] over T = counts[0] from the two in alternation, for about
 * `seconds` and at least SCALING_PAIRS_MIN pairs: the median of the pairs' time ratios. A pair is
 * k calls on one side, then k on the other (sides alternating which goes first), each side's
 * median of its k; k is such that a side takes ~5 ms (1 for longer calls, at most 16), so that the
 * pool's wake-up from its sleep between sides (tens of microseconds) stays out of the medians.
 * The two sides of a pair run milliseconds apart, so a machine whose speed changes for seconds at
 * a time slows both sides of most pairs alike (the table's medians compare calls measured
 * seconds apart). NAN when a call fails. */
enum { SCALING_PAIRS_MIN = 3, SCALING_PAIRS_MAX = 4096, SCALING_SIDE_MAX = 16 };
static double scaling_pairs(const options *o, const bench_variant *v, const bench_shape *shape, size_t t,
                            double seconds) {
  attn_pool *pool[2];
  attn_threads th[2];
  bench_work w[2];
  char err[160];
  if (scaling_work(o, v, shape, o->scaling[0], &pool[0], &th[0], &w[0], err, sizeof err)) return NAN;
  if (scaling_work(o, v, shape, o->scaling[t], &pool[1], &th[1], &w[1], err, sizeof err)) {
    bench_work_free(&w[0]);
    attn_pool_destroy(pool[0]);
    return NAN;
  }
  static double ratio[SCALING_PAIRS_MAX];
  double side[2][SCALING_SIDE_MAX], one = 0;
  for (int i = 0; i < 2; i++) { /* warm: buffers touched, pools started; the 1-thread call's time */
    const double a = bench_now();
    bench_work_run(&w[i], 1);
    if (i == 0) one = bench_now() - a;
  }
  const size_t want = one >= 5e-3 ? 1 : (size_t)(5e-3 / (one > 1e-6 ? one : 1e-6)) + 1;
  const size_t k = want < SCALING_SIDE_MAX ? want : SCALING_SIDE_MAX;
  size_t n = 0;
  const double start = bench_now();
  while (n < SCALING_PAIRS_MAX && (n < SCALING_PAIRS_MIN || bench_now() - start < seconds)) {
    double med[2];
    for (int s = 0; s < 2; s++) {
      const int i = (int)(n & 1) ^ s; /* alternate which side goes first */
      for (size_t c = 0; c < k; c++) {
        const double a = bench_now();
        bench_work_run(&w[i], 1);
        side[i][c] = bench_now() - a;
      }
      med[i] = bench_median(side[i], k);
    }
    ratio[n++] = med[0] / med[1];
  }
  const int ok = w[0].status == ATTN_OK && !w[0].failure && w[1].status == ATTN_OK && !w[1].failure;
  for (int i = 0; i < 2; i++) bench_work_free(&w[i]), attn_pool_destroy(pool[i]);
  if (!ok) return NAN;
  return bench_median(ratio, n);
}

/* The machine's own scaling, the first rows of the --scaling table: for each thread count T, the
 * FMA peak of each selected path that runs natively and the read bandwidth, all T threads at once
 * on the CPUs the call pools use (bench_pool pins as pin_call_pool does), each cell the total and
 * its ratio to T = 1. A call's speedup is bounded by these rather than by T: a guest whose vCPUs
 * share cores or whose clock falls with more cores busy runs T FMA loops at less than T times one,
 * and a decode step reads its cache at what T readers get. The bandwidth buffer, split between the
 * threads, is the sweep's probe's (bench_memory_bytes). 0 on success. */
static int scaling_machine(const options *o, FILE *md) {
  double peak[BENCH_MAX_SIZES][ATTN_ISA_COUNT], bw[BENCH_MAX_SIZES];
  for (size_t t = 0; t < o->nscaling; t++) {
    char err[256];
    bench_pool *pool = bench_pool_create((int)o->scaling[t], o->pin, err, sizeof err);
    if (!pool) {
      fprintf(stderr, "attn-bench: %s\n", err);
      return 1;
    }
    bench_limits l = {0};
    bench_measure_peaks(pool, &l);
    for (int isa = 0; isa < ATTN_ISA_COUNT; isa++) peak[t][isa] = l.peak[isa];
    bw[t] = bench_measure_bandwidth(pool, bench_memory_bytes(), 0.3);
    bench_pool_destroy(pool);
  }
  for (int isa = -1; isa < ATTN_ISA_COUNT; isa++) { /* -1: the bandwidth row */
    if (isa >= 0 && !(o->isa_on[isa] && peak[0][isa] > 0)) continue;
    char name[48];
    if (isa < 0)
      snprintf(name, sizeof name, "read GB/s");
    else
      snprintf(name, sizeof name, "FMA GFLOP/s, %s", attn_isa_name((attn_isa)isa));
    printf("machine: %-42s", name);
    fprintf(md, "| machine: %s | | | | |", name);
    for (size_t t = 0; t < o->nscaling; t++) {
      const double x = isa < 0 ? bw[t] : peak[t][isa], x1 = isa < 0 ? bw[0] : peak[0][isa];
      char cell[48];
      snprintf(cell, sizeof cell, x > 0 && x1 > 0 ? "%.4g (%.2fx)" : "-", x, x / x1);
      printf("  %16s", cell);
      fprintf(md, " %s |", cell);
    }
    for (size_t t = 1; t < o->nscaling; t++) fprintf(md, " |");
    printf("\n");
    fprintf(md, "\n");
  }
  fflush(stdout);
  return 0;
}

/* --scaling: one call of each selected variant, size and path on each thread count (an attn_pool
 * per count, given through attn_shape.threads), in one run; a table of median times and speedups
 * over one thread, printed and written to DIR/attn-scaling.md. */
static int run_scaling(run_ctx *rc) {
  const options *o = &rc->opt;
  const bench_sweep sw = sweep_of(o);
  char path[PATH_MAX + 1200], rel[1100];
  snprintf(rel, sizeof rel, "%s/attn-scaling.md", o->out_dir);
  make_parent(rel);
  snprintf(path, sizeof path, "%s", rel);
  FILE *md = fopen(path, "w");
  if (!md) {
    fprintf(stderr, "attn-bench: cannot write %s: %s\n", path, strerror(errno));
    return 1;
  }
  const bench_sysinfo *i = &rc->res.info;
  fprintf(md, "# attn thread scaling\n\nattn %s (git %s), %s; %s, %d CPUs online; `%s`\n\n", i->version, i->git,
          i->date, i->cpu, i->cores, rc->res.command);
  fprintf(
      md,
      "One call on T threads (the library's attn_pool through attn_shape.threads); median time per call, "
      "and in parentheses the speedup over T = 1 measured in the same run. Paired: the median of the "
      "time ratios T = 1 / T of calls made in alternation (a few at a time, ~5 ms a side), robust to a "
      "machine whose speed changes for seconds at a time. The machine rows: the FMA peak of each path "
      "and the read bandwidth (a buffer twice the last-level cache) with all T threads running on the same CPUs, the "
      "bounds of a compute-bound and of a memory-bound call's speedup.\n\n| variant | path | n | d | heads |");
  printf(
      "\nThread scaling: one call on T threads (attn_pool); median ms per call (speedup over T = 1);\n"
      "paired: the median of T = 1 / T time ratios of calls in alternation\n");
  printf("%-24s %-7s %7s %4s %5s", "variant", "path", "n", "d", "heads");
  for (size_t t = 0; t < o->nscaling; t++) {
    char h[32];
    snprintf(h, sizeof h, "T=%zu", o->scaling[t]);
    printf("  %16s", h);
    fprintf(md, " T = %zu |", o->scaling[t]);
  }
  for (size_t t = 1; t < o->nscaling; t++) {
    char h[32];
    snprintf(h, sizeof h, "paired %zu", o->scaling[t]);
    printf("  %10s", h);
    fprintf(md, " paired, T = %zu |", o->scaling[t]);
  }
  printf("\n");
  fprintf(md, "\n|---|---|---|---|---|");
  for (size_t t = 0; t < 2 * o->nscaling - 1; t++) fprintf(md, "---|");
  fprintf(md, "\n");
  if (scaling_machine(o, md)) {
    fclose(md);
    return 1;
  }
  int failures = 0;
  size_t sizes[BENCH_MAX_SIZES], dims[BENCH_MAX_SIZES];
  for (int isa = ATTN_ISA_SCALAR; isa < ATTN_ISA_COUNT; isa++)
    for (size_t vi = 0; o->isa_on[isa] && vi < nvariants; vi++) {
      const size_t nd = variant_dims(o, variants[vi], dims);
      for (size_t di = 0; o->variant_on[vi] && di < nd; di++) {
        const bench_variant *v = variants[vi];
        const size_t count = v->adapter->sizes(v, &sw, sizes);
        for (size_t si = 0; si < count; si++) {
          const bench_shape shape = v->adapter->shape(v, &sw, v->kind, sizes[si], dims[di]);
          printf("%-24s %-7s %7zu %4zu %5zu", v->name, attn_isa_name((attn_isa)isa), sizes[si], dims[di], shape.h_q);
          fprintf(md, "| %s | %s | %zu | %zu | %zu |", v->name, attn_isa_name((attn_isa)isa), sizes[si], dims[di],
                  shape.h_q);
          fflush(stdout);
          /* The thread counts in turn, o->rounds times, each keeping its best median: on a machine
           * whose speed drifts, every count then sees the same stretches of it. */
          double best[BENCH_MAX_SIZES];
          char errs[BENCH_MAX_SIZES][160];
          for (size_t t = 0; t < o->nscaling; t++) best[t] = NAN, errs[t][0] = '\0';
          for (unsigned round = 0; round < o->rounds; round++)
            for (size_t t = 0; t < o->nscaling; t++) {
              attn_pool *pool;
              attn_threads th;
              bench_work w;
              char *err = errs[t];
              if (attn_isa_set((attn_isa)isa) != ATTN_OK) {
                snprintf(err, sizeof errs[t], "the path does not run here");
              } else if (!scaling_work(o, v, &shape, o->scaling[t], &pool, &th, &w, err, sizeof errs[t])) {
                void *ctx = &w;
                bench_stats st;
                bench_measure(rc->pool, &rc->res.timing, bench_work_run, &ctx, &st);
                if (w.status == ATTN_OK && !w.failure) {
                  if (!(st.median * 1e3 >= best[t])) best[t] = st.median * 1e3; /* NaN: the first */
                } else {
                  snprintf(err, sizeof errs[t], "call failed");
                }
                bench_work_free(&w);
                attn_pool_destroy(pool);
              }
            }
          double base = 0;
          for (size_t t = 0; t < o->nscaling; t++) {
            const double ms = errs[t][0] ? NAN : best[t];
            const char *err = errs[t];
            char cell[48];
            if (isnan(ms)) {
              snprintf(cell, sizeof cell, "failed");
              failures++;
              fprintf(stderr, "attn-bench: %s with %zu threads: %s\n", v->name, o->scaling[t], err);
            } else {
              if (t == 0) base = ms;
              snprintf(cell, sizeof cell, "%.3g (%.2fx)", ms, base > 0 ? base / ms : NAN);
            }
            printf("  %16s", cell);
            fprintf(md, " %s |", cell);
            fflush(stdout);
          }
          for (size_t t = 1; t < o->nscaling; t++) { /* the same path is still set */
            const double r =
                errs[0][0] || errs[t][0] ? NAN : scaling_pairs(o, v, &shape, t, 2 * o->rounds * o->min_time);
            char cell[32];
            snprintf(cell, sizeof cell, isnan(r) ? "-" : "%.2fx", r);
            printf("  %10s", cell);
            fprintf(md, " %s |", cell);
            fflush(stdout);
          }
          printf("\n");
          fprintf(md, "\n");
        }
      }
    }
  attn_isa_set(ATTN_ISA_AUTO);
  fclose(md);
  printf("\nwrote %s\n", path);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  static run_ctx rc;
  list_variants();
  parse_args(&rc.opt, argc, argv);
  const options *o = &rc.opt;
  bench_results *r = &rc.res;
  r->threads = o->nscaling ? 1 : o->threads;
  r->pin = o->pin;
  r->hugepages = bench_hugepages = o->hugepages;
  bench_concurrent_works = o->nscaling ? 1 : (size_t)o->threads; /* decode caches' copies share 2 LLC */
  r->window = o->window;
  r->vars = variants;
  r->nvars = nvariants;
  r->timing = (bench_timing){o->min_time, o->reps, 100000, o->warmup, o->noisy};
  bench_sysinfo_fill(&r->info);
  if (o->latency) bench_call_workers = o->threads;
  bench_baselines_init(r->base);
  for (int i = 0, used = 0; i < argc && used < (int)sizeof r->command - 1; i++) {
    int w =
        snprintf(r->command + used, sizeof r->command - (size_t)used, "%s%s", i ? " " : "", i ? argv[i] : "attn-bench");
    if (w > 0) used += w;
  }
  const double t0 = bench_now();

  char err[256];
  attn_pool *call_pool = NULL;
  attn_threads call_threads;
  if (o->latency && o->threads > 1 && !o->nscaling) { /* one sequence; each call on its own pool */
    if (attn_pool_create((size_t)o->threads, &call_pool) != ATTN_OK ||
        pin_call_pool(o, call_pool, (size_t)o->threads) != ATTN_OK ||
        attn_pool_threads(call_pool, &call_threads) != ATTN_OK) {
      fprintf(stderr, "attn-bench: cannot start a pool of %d threads\n", o->threads);
      return 1;
    }
    bench_call_threads = &call_threads;
    r->call_threads = o->threads;
    r->threads = 1;
  }
  if (!(rc.pool = bench_pool_create(r->threads, o->pin, err, sizeof err))) {
    fprintf(stderr, "attn-bench: %s\n", err);
    return 1;
  }
  bench_print_header(stdout, r);
  if (o->nscaling) {
    const int rc_scaling = run_scaling(&rc);
    bench_pool_destroy(rc.pool);
    return rc_scaling;
  }
  limits(&rc);
  plan(&rc);
  rc.planned = r->count;
  bench_print_limits(stdout, r, 0);
  printf("\nSweep: %zu points\n", rc.planned);
  if (!rc.planned) fprintf(stderr, "attn-bench: warning: nothing to measure with these options\n");
  if (o->dry_run) {
    bench_pool_destroy(rc.pool);
    return rc.planned ? 0 : 1;
  }
  bench_print_row_header(stdout);
  fflush(stdout);
  bench_progress_start(&rc.progress, r, o->max_call_time);
  if (o->rounds > 1)
    run_rounds(&rc);
  else
    for (size_t i = 0; i < rc.planned; i++) run_row(&rc, i);

  compute_crossovers(&rc);
  if (o->extend) {
    extend_crossovers(&rc);
    compute_crossovers(&rc);
  }
  bench_progress_end(&rc.progress);
  attn_isa_set(ATTN_ISA_AUTO);
  attach_baselines(r);
  judge_noise(&rc);
  r->elapsed = bench_now() - t0;

  char buf[6][PATH_MAX + 1200];
  const char *csv = out_path(o, o->csv, "attn-bench.csv", buf[0], sizeof buf[0]);
  const char *json = out_path(o, o->json, "attn-bench.json", buf[1], sizeof buf[1]);
  const char *md = out_path(o, o->md, "attn-bench.md", buf[2], sizeof buf[2]);
  const char *summary = out_path(o, NULL, "summary.md", buf[3], sizeof buf[3]);
  const char *svg = out_path(o, o->svg, "attn-bench.svg", buf[4], sizeof buf[4]);
  char *png = buf[5];
  png[0] = 0;
  int write_failed = 0;
  const char *paths[4] = {csv, json, md, summary};
  int (*writers[4])(const char *, const bench_results *) = {bench_write_csv, bench_write_json, bench_write_markdown,
                                                            bench_write_summary};
  int written[4] = {0};
  printf("\n");
  for (int k = 0; k < 4; k++) {
    if (writers[k](paths[k], r)) {
      fprintf(stderr, "attn-bench: cannot write %s: %s\n", paths[k], strerror(errno));
      write_failed = 1;
    } else {
      printf("wrote %s\n", paths[k]);
      written[k] = 1;
    }
  }
  char msg[3 * PATH_MAX + 128] = "plot disabled (--no-plot)";
  int plotted = 0;
  if (o->plot) {
    plotted = bench_write_plot(svg, r, png, sizeof buf[5], msg, sizeof msg);
    if (plotted < 0) write_failed = 1;
  }

  bench_print_baselines(stdout, r);
  bench_print_twins(stdout, r);
  printf("\n");
  bench_print_limits(stdout, r, 1);
  printf("Run quality: %s (%.0f s)\n", r->noise_note, r->elapsed);
  bench_print_crossovers(stdout, r);
  printf("\nPlot: %s\n", msg);
  const bench_file files[] = {{"table", written[2] ? md : NULL},  {"summary", written[3] ? summary : NULL},
                              {"CSV", written[0] ? csv : NULL},   {"JSON", written[1] ? json : NULL},
                              {"plot", plotted > 0 ? svg : NULL}, {"plot PNG", png[0] ? png : NULL}};
  bench_print_summary(stdout, r, files, sizeof files / sizeof files[0]);
  if (o->plot && plotted <= 0) printf("plot:     %s\n", msg);
  bench_pool_destroy(rc.pool);
  attn_pool_destroy(call_pool);
  free(r->rows);
  free(r->cross);
  return rc.failures || write_failed ? 1 : 0;
}
