/*
 * Shared helpers of the attn Check suites: environment and main, seeded RNG, guarded buffers,
 * strided tensors with padding, and the one comparison helper (|got - ref| <= tol * scale).
 */
#ifndef ATTN_TEST_UTIL_H
#define ATTN_TEST_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include <attn.h>

#include "ref/attn_ref.h"

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
/** 1 when ATTN_TEST_SCALE=small (cross runs under qemu): drop the heaviest table rows. */
int tu_small(void);
/** Table-row filter for small runs: work = n_q * n_kv * h_q * (d + dv); rows above it are heavy. */
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
uint64_t tu_rng_next(tu_rng *r);
/** Uniform in [lo, hi). */
float tu_rng_range(tu_rng *r, float lo, float hi);

/* ------------------------------------------------------------------------------------------ */
/* Guarded buffers: canaries before and after, body filled with the sentinel pattern            */
/* ------------------------------------------------------------------------------------------ */
#define TU_GUARD_BYTES 256
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
/* Strided tensors [tokens][heads][width]                                                       */
/* ------------------------------------------------------------------------------------------ */
typedef enum tu_layout_kind {
  TU_TOKEN_MAJOR = 0, /* [n][h][w]: row h*w, head w (the library's default) */
  TU_HEAD_MAJOR,      /* [h][n][w]: row w, head n*w */
  TU_PADDED,          /* token-major with prime padding: head w+3, row h*(w+3)+7 */
  TU_HEAD_PADDED,     /* head-major with prime padding: row w+5, head n*(w+5)+11 */
  TU_PACKED_QKV       /* inputs only: q, k, v interleaved per token in one buffer */
} tu_layout_kind;

typedef struct tu_tensor {
  float *data;     /* element (0, 0, 0) */
  size_t n, h, w;  /* tokens, heads, width */
  attn_layout l;   /* strides in elements */
  size_t span;     /* elements from data to one past the last element */
  void *owner;     /* allocation to free (NULL: data points into another buffer) */
  int guarded;     /* owner comes from tu_alloc (outputs) or malloc (inputs) */
} tu_tensor;

attn_layout tu_layout(tu_layout_kind kind, size_t n, size_t h, size_t w);
size_t tu_span(size_t n, size_t h, size_t w, attn_layout l);
/** Allocate a tensor, every element (gaps included) set to the sentinel. Outputs are guarded;
 *  inputs are allocated exactly (no guard) so that ASan sees any over-read. */
void tu_tensor_alloc(tu_tensor *t, tu_layout_kind kind, size_t n, size_t h, size_t w, int guarded);
void tu_tensor_free(tu_tensor *t);
float *tu_at(const tu_tensor *t, size_t token, size_t head, size_t c);
/** A view (not owning memory) of tokens [first, first + n) of a tensor. */
tu_tensor tu_rows_view(const tu_tensor *t, size_t first, size_t n);
/** Fill the logical elements uniformly in [lo, hi). */
void tu_tensor_fill(tu_tensor *t, tu_rng *r, float lo, float hi);
/** Copy the logical elements to a contiguous [n][h][w] double array. */
void tu_tensor_to_double(const tu_tensor *t, double *out);
/** Output checks after a successful call: guard zones intact and every gap element (inside the
 *  span but not part of the layout) still holds the sentinel. */
void tu_assert_output_clean(const char *what, const tu_tensor *t);

/* ------------------------------------------------------------------------------------------ */
/* Inputs q, k, v                                                                              */
/* ------------------------------------------------------------------------------------------ */
typedef enum tu_data {
  TU_DATA_UNIFORM = 0, /* q, k, v in [-1, 1) */
  TU_DATA_POSITIVE,    /* q, k, v in [0, 1) */
  TU_DATA_LARGE,       /* q, k near sqrt(95/d): with scale 1 every logit lies in ~[90, 100] */
  TU_DATA_WIDE         /* q, k in [-30, 30), v in [-1, 1): elu1 over its whole range */
} tu_data;

typedef struct tu_qkv {
  tu_tensor q, k, v;
  void *packed; /* the shared buffer of a packed layout */
  size_t packed_bytes;
  void *copy;   /* snapshot of all input bytes, to prove the call did not write them */
  size_t copy_bytes;
} tu_qkv;

/** Allocate and fill q [n_q][h_q][d], k [n_kv][h_kv][d], v [n_kv][h_kv][dv] in a layout
 *  (TU_PACKED_QKV needs n_q == n_kv), then snapshot them. */
void tu_qkv_make(tu_qkv *x, tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv,
                 size_t h_q, size_t h_kv, size_t d, size_t dv);
/** The cases of tu_qkv_poison: q, k or v x NaN, +inf or -inf x a token early or late. */
#define TU_POISON_CASES 18
/** Non-finite-policy tests: sets one element of q, k or v (case / 6) to NaN, +inf or -inf
 *  ((case / 2) % 3) in the last head, at a token early or late (case % 2) among the tensor's
 *  tokens but its last `tail`; re-snapshots the inputs and describes the element in what. */
void tu_qkv_poison(tu_qkv *x, int poison_case, size_t tail, char *what, size_t len);
/** Re-snapshot after the test modified inputs on purpose. */
void tu_qkv_snapshot(tu_qkv *x);
/** Asserts that no input byte changed since the snapshot. */
void tu_qkv_assert_unchanged(const tu_qkv *x);
void tu_qkv_free(tu_qkv *x);
ref_layout tu_ref_layout(const tu_tensor *t);

/* ------------------------------------------------------------------------------------------ */
/* Comparison                                                                                  */
/* ------------------------------------------------------------------------------------------ */
/**
 * Asserts |got[e] - ref[e]| <= tol[e] * scale[e] for every logical element e of got (in
 * [n][h][w] order); where ref is infinite, got must equal it exactly; where ref is NaN, got
 * must be NaN; elsewhere a NaN fails. On failure it
 * names `what` and the first failing (token, head, column) with got, ref and the bound.
 * With ATTN_TEST_REPORT set in the environment it prints, on stderr, one line
 * "ATTN_ERR <family> <isa> <max err/scale> <max err/(tol*scale)> <what>" per call.
 */
void tu_compare(const char *family, const char *what, const tu_tensor *got, const double *ref,
                const double *scale, const double *tol);

/** Convenience: a double array of `count` copies of value (freed by the caller). */
double *tu_dup(double value, size_t count);

#endif /* ATTN_TEST_UTIL_H */
