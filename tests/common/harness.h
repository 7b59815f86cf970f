/*
 * The part of the test helpers that every Check executable shares, the white-box one included
 * (it links the library's internal archive, so nothing here depends on the reference or on the
 * tensor helpers): the environment and main, a seeded RNG, guarded buffers, and a reentrancy
 * check. Only the public header's declarations are used; the library comes from the executable.
 */
#ifndef ATTN_TEST_HARNESS_H
#define ATTN_TEST_HARNESS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include <attn.h>

/* Check's ck_assert_msg (under every ck_assert_*) reports each passing assertion to the runner
 * as a mark point, a write(2) per assertion: the suites' loops over every element paid more for
 * that than for the library (a third of a run natively, more under the sanitizers and qemu). Here
 * a passing assertion is a comparison only; a failing one reports as before. What is lost: after
 * a crash Check names the last mark_point() rather than the last passing assertion. */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...) \
  ((expr) ? (void)0 : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

/* *bytes = the call's own workspace (prefix##_call_workspace_size), asserted to be at most the
 * answer for any n_q and n_kv (prefix##_workspace_size): what the runners allocate, so that every
 * call runs in exactly the bytes it asks for. */
#define TU_CALL_WS(prefix, desc, bytes)                                       \
  do {                                                                        \
    size_t any_ = 0;                                                          \
    ck_assert_int_eq(prefix##_workspace_size((desc), &any_), ATTN_OK);        \
    ck_assert_int_eq(prefix##_call_workspace_size((desc), (bytes)), ATTN_OK); \
    ck_assert_uint_le(*(bytes), any_);                                        \
  } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Environment and main                                                                        */
/* ------------------------------------------------------------------------------------------ */
/** Check timeout of every TCase, in seconds (sanitizers and qemu are slow; the default is 4). */
#define TU_TIMEOUT_S 300

/**
 * Reads ATTN_ISA (unset or empty: "auto"), maps it with attn_isa_from_name. Returns 77 (Meson
 * SKIP) when that path is unknown or cannot run here; 1 (after a message on stderr) when the
 * library's active path is not the one the environment asked for (for "auto": a native path);
 * 0 otherwise, with the active path in *active.
 */
int tu_setup_isa(attn_isa *active);
/** The common main: tu_setup_isa, then run make_suite(active path) with CK_ENV verbosity. */
int tu_main(Suite *(*make_suite)(attn_isa active));
/** Runs a suite with CK_ENV verbosity (Check prints its summary line); returns the exit code. */
int tu_run_suite(Suite *s);
/** A TCase with the suite-wide timeout. */
TCase *tu_tcase(const char *name);
/** One row of a suite's list of tests: its TCase's name, the test, and how many times it runs
 *  (_i = 0 .. loops - 1; 1 for a test without a loop: tcase_add_test is that loop of one). */
typedef struct tu_entry {
  const char *tcase;
  const TTest *test;
  int loops;
} tu_entry;
/** A suite named after the path, holding the tests in order; consecutive rows of one TCase name
 *  share that TCase (tu_tcase). */
Suite *tu_suite(attn_isa active, const tu_entry *tests, size_t count);
/** tu_suite over the rows given as arguments (a suite's table: one line per TCase, its rows side
 *  by side). */
#define TU_SUITE(active, ...) \
  tu_suite((active), (const tu_entry[]){__VA_ARGS__}, sizeof((const tu_entry[]){__VA_ARGS__}) / sizeof(tu_entry))
/** The main of a suite that needs no set-up: tu_main over TU_SUITE of the rows given (a row's
 *  count may be computed: TU_SELECT_CASES). */
#define TU_MAIN(...)                                                                     \
  static Suite *tu_main_suite(attn_isa active) { return TU_SUITE(active, __VA_ARGS__); } \
  int main(void) { return tu_main(tu_main_suite); }
/** 1 when ATTN_TEST_SCALE=small (cross runs under qemu): drop the heaviest table rows. */
int tu_small(void);
/** Table-row filter for small runs: work = n_q * n_kv * heads * (d + dv); rows above it are heavy. */
#define TU_SMALL_WORK_LIMIT ((size_t)600000)
/** Fill idx with the rows of a table of `count` rows that run in this mode; returns how many. */
size_t tu_select_rows(size_t count, const size_t *work, size_t *idx);

/* ------------------------------------------------------------------------------------------ */
/* Deterministic RNG (xorshift64*)                                                             */
/* ------------------------------------------------------------------------------------------ */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;
void tu_rng_seed(tu_rng *r, uint64_t seed);
/** A generator seeded with seed (a test's prologue: tu_rng rng = tu_rng_of(base + _i)). */
tu_rng tu_rng_of(uint64_t seed);
uint64_t tu_rng_next(tu_rng *r);
/** Uniform in [lo, hi). */
float tu_rng_range(tu_rng *r, float lo, float hi);

/* ------------------------------------------------------------------------------------------ */
/* Guarded buffers: canaries before and after, body filled with the sentinel pattern            */
/* ------------------------------------------------------------------------------------------ */
#define TU_GUARD_BYTES   256
#define TU_SENTINEL_BITS 0x7FA5A5A5u /* a NaN: a library that reads it poisons its output */

/** bytes of memory (0 allowed) at 64-byte alignment + misalign; guards on both sides. */
void *tu_alloc(size_t bytes, size_t misalign);
/** Whether both guard zones of a tu_alloc block are intact. */
int tu_guards_intact(const void *p);
void tu_free(void *p);
void tu_fill_sentinel(float *p, size_t count);
float tu_sentinel(void);
/** Asserts (Check) that the guard zones of p are intact. */
void tu_assert_guards(const char *what, const void *p);
/** Asserts that two byte ranges are identical; reports the first differing float index. */
void tu_assert_same_bits(const char *what, const void *a, const void *b, size_t bytes);

/* ------------------------------------------------------------------------------------------ */
/* Reentrancy                                                                                  */
/* ------------------------------------------------------------------------------------------ */
/** One unit of work for tu_assert_reentrant: writes out_floats floats to out; returns 0 on
 *  success. It must use only its own outputs, workspace and state (inputs may be shared). */
typedef int (*tu_job)(const void *arg, float *out);
/** Runs job(args[t], out_t) for t < threads, each on its own thread and all at once, then each
 *  again alone on this thread, and asserts that every call succeeded and that each threaded
 *  result equals its serial one bit for bit (compute calls are documented reentrant). */
void tu_assert_reentrant(const char *what, tu_job job, const void *const *args, size_t threads, size_t out_floats);

#endif /* ATTN_TEST_HARNESS_H */
