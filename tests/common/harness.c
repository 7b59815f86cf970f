/* Helpers shared by every Check executable: see harness.h. */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Environment and main                                                                        */
/* ------------------------------------------------------------------------------------------ */
/* Under UBSan (scripts/test-all.sh sanitize and fuzz) the first report ends the process, so a
 * test that runs into undefined behaviour fails. The builds keep UBSan's recoverable checks rather
 * than -fno-sanitize-recover=all: with ASan, the non-recovering checks made clang take 4-8 minutes
 * per GEMM micro-kernel file (src/simd/gemm_tmpl.h), some 25 of CI's minutes. The runtime reads
 * this before UBSAN_OPTIONS, which can still add to it (the fuzz targets' print_stacktrace=1).
 * Unused in other builds. */
const char *__ubsan_default_options(void);
__attribute__((visibility("default"), used)) const char *__ubsan_default_options(void) {
  return "halt_on_error=1:print_stacktrace=1";
}

int tu_setup_isa(attn_isa *active) {
  const char *name = getenv("ATTN_ISA");
  const attn_isa want = (name && *name) ? attn_isa_from_name(name) : ATTN_ISA_AUTO;
  if (want == ATTN_ISA_NONE || !attn_isa_available(want, NULL)) return 77; /* Meson: SKIP */
  const attn_isa got = attn_isa_get();
  if (want == ATTN_ISA_AUTO) {
    int native = 0;
    if (got <= ATTN_ISA_AUTO || got >= ATTN_ISA_COUNT || !attn_isa_available(got, &native) || !native) {
      fprintf(stderr, "ATTN_ISA=auto: active path %d (%s) is not a native path\n", (int)got, attn_isa_name(got));
      return 1;
    }
  } else if (got != want) {
    fprintf(stderr, "ATTN_ISA=%s not honoured: active path is %s\n", name, attn_isa_name(got));
    return 1;
  }
  *active = got;
  return 0;
}

int tu_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

int tu_main(Suite *(*make_suite)(attn_isa active)) {
  attn_isa active = ATTN_ISA_NONE;
  const int rc = tu_setup_isa(&active);
  if (rc != 0) return rc;
  return tu_run_suite(make_suite(active));
}

TCase *tu_tcase(const char *name) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, TU_TIMEOUT_S);
  return tc;
}

Suite *tu_suite(attn_isa active, const tu_entry *tests, size_t count) {
  Suite *s = suite_create(attn_isa_name(active));
  TCase *tc = NULL;
  const char *name = NULL;
  for (size_t i = 0; i < count; ++i) {
    if (!tc || strcmp(tests[i].tcase, name) != 0) {
      name = tests[i].tcase;
      tc = tu_tcase(name);
      suite_add_tcase(s, tc);
    }
    tcase_add_loop_test(tc, tests[i].test, 0, tests[i].loops);
  }
  return s;
}

int tu_small(void) {
  const char *s = getenv("ATTN_TEST_SCALE");
  return s && strcmp(s, "small") == 0;
}

size_t tu_select_rows(size_t count, const size_t *work, size_t *idx) {
  const int small = tu_small();
  size_t k = 0;
  for (size_t i = 0; i < count; ++i)
    if (!small || work[i] <= TU_SMALL_WORK_LIMIT) idx[k++] = i;
  return k;
}

/* ------------------------------------------------------------------------------------------ */
/* RNG                                                                                         */
/* ------------------------------------------------------------------------------------------ */
void tu_rng_seed(tu_rng *r, uint64_t seed) {
  r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  if (r->s == 0) r->s = 1;
  for (int i = 0; i < 4; ++i) (void)tu_rng_next(r);
}

tu_rng tu_rng_of(uint64_t seed) {
  tu_rng r;
  tu_rng_seed(&r, seed);
  return r;
}

uint64_t tu_rng_next(tu_rng *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

float tu_rng_range(tu_rng *r, float lo, float hi) {
  const double u01 = (double)(tu_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(lo + (hi - lo) * u01);
}

/* ------------------------------------------------------------------------------------------ */
/* Guarded buffers                                                                             */
/* ------------------------------------------------------------------------------------------ */
typedef struct guard_hdr {
  void *raw;
  size_t bytes;
} guard_hdr;

static unsigned char canary(size_t i) { return (unsigned char)(0xC3u ^ (unsigned)(i * 37u)); }

void *tu_alloc(size_t bytes, size_t misalign) {
  misalign %= 64;
  const size_t total = 64 + TU_GUARD_BYTES + misalign + bytes + TU_GUARD_BYTES;
  const size_t rounded = (total + 63) / 64 * 64;
  unsigned char *raw = aligned_alloc(64, rounded);
  ck_assert_ptr_nonnull(raw);
  unsigned char *p = raw + 64 + TU_GUARD_BYTES + misalign;
  guard_hdr h = {raw, bytes};
  memcpy(p - TU_GUARD_BYTES - sizeof h, &h, sizeof h);
  for (size_t i = 0; i < TU_GUARD_BYTES; ++i) {
    p[-1 - (ptrdiff_t)i] = canary(i);
    p[bytes + i] = canary(i + 1000);
  }
  for (size_t i = 0; i + sizeof(float) <= bytes; i += sizeof(float)) {
    const uint32_t bits = TU_SENTINEL_BITS;
    memcpy(p + i, &bits, sizeof bits);
  }
  return p;
}

static guard_hdr header_of(const void *p) {
  guard_hdr h;
  memcpy(&h, (const unsigned char *)p - TU_GUARD_BYTES - sizeof h, sizeof h);
  return h;
}

int tu_guards_intact(const void *p) {
  const unsigned char *b = p;
  const guard_hdr h = header_of(p);
  for (size_t i = 0; i < TU_GUARD_BYTES; ++i)
    if (b[-1 - (ptrdiff_t)i] != canary(i) || b[h.bytes + i] != canary(i + 1000)) return 0;
  return 1;
}

void tu_free(void *p) {
  if (p) free(header_of(p).raw);
}

float tu_sentinel(void) {
  const uint32_t bits = TU_SENTINEL_BITS;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

void tu_fill_sentinel(float *p, size_t count) {
  const float s = tu_sentinel();
  for (size_t i = 0; i < count; ++i) p[i] = s;
}

void tu_assert_guards(const char *what, const void *p) {
  ck_assert_msg(tu_guards_intact(p), "%s: the library wrote into a guard zone around the buffer", what);
}

void tu_assert_same_bits(const char *what, const void *a, const void *b, size_t bytes) {
  if (memcmp(a, b, bytes) == 0) return;
  const unsigned char *x = a, *y = b;
  size_t i = 0;
  while (x[i] == y[i]) ++i;
  ck_abort_msg("%s: bytes differ, first at float index %zu (of %zu)", what, i / sizeof(float), bytes / sizeof(float));
}

/* ------------------------------------------------------------------------------------------ */
/* Reentrancy                                                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef struct job_run {
  tu_job job;
  const void *arg;
  float *out;
  int status;
} job_run;

static void *job_thread(void *p) {
  job_run *r = p;
  r->status = r->job(r->arg, r->out);
  return NULL;
}

void tu_assert_reentrant(const char *what, tu_job job, const void *const *args, size_t threads, size_t out_floats) {
  job_run *runs = calloc(threads, sizeof *runs);
  pthread_t *th = calloc(threads, sizeof *th);
  float *out = malloc(sizeof(float) * out_floats * (threads + 1));
  ck_assert(runs && th && out);
  float *serial = out + threads * out_floats;
  for (size_t t = 0; t < threads; ++t) {
    runs[t] = (job_run){job, args[t], out + t * out_floats, -1};
    ck_assert_int_eq(pthread_create(&th[t], NULL, job_thread, &runs[t]), 0);
  }
  for (size_t t = 0; t < threads; ++t) ck_assert_int_eq(pthread_join(th[t], NULL), 0);
  for (size_t t = 0; t < threads; ++t) {
    ck_assert_msg(runs[t].status == 0, "%s: thread %zu failed (%d)", what, t, runs[t].status);
    ck_assert_int_eq(job(args[t], serial), 0);
    tu_assert_same_bits(what, runs[t].out, serial, sizeof(float) * out_floats);
  }
  free(out);
  free(th);
  free(runs);
}
