/*
 * Shared helpers of the attn Check suites that call the public API: everything in harness.h
 * (environment and main, seeded RNG, guarded buffers), strided tensors with padding, inputs
 * q, k, v, and the one comparison helper (|got - ref| <= tol * scale) against the reference.
 */
#ifndef ATTN_TEST_UTIL_H
#define ATTN_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <attn.h>

#include "harness.h"
#include "ref/attn_ref.h"
#include "ref/ref_selective.h"

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
  float *data;    /* element (0, 0, 0) */
  size_t n, h, w; /* tokens, heads, width */
  attn_layout l;  /* strides in elements */
  size_t span;    /* elements from data to one past the last element */
  void *owner;    /* allocation to free (NULL: data points into another buffer) */
  int guarded;    /* owner comes from tu_alloc (outputs) or malloc (inputs) */
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
/** A standard Gaussian number (Box-Muller in double over two tu_rng draws). */
double tu_rng_gauss(tu_rng *r);
/** count floats, each sigma times a standard Gaussian (a caller's FAVOR+ matrix). */
void tu_fill_gauss(float *x, size_t count, tu_rng *r, double sigma);
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
  void *copy; /* snapshot of all input bytes, to prove the call did not write them */
  size_t copy_bytes;
} tu_qkv;

/** Views of x for a call over part of it: q rows [q0, q0 + nq), k and v rows [0, nkv) (a KV cache
 *  of nkv tokens); nothing to free. */
tu_qkv tu_qkv_rows(const tu_qkv *x, size_t q0, size_t nq, size_t nkv);

/* Properties against a full call (decode equals prefill, chunked prefill, pieces equal one call):
 * the driver cuts the query rows; a variant's part function calls it on q rows [q0, q0 + nq)
 * over keys [0, nkv) of the full call's inputs (ctx: its full call) and compares the output
 * (what names it) with the full call's rows from q0 within TOL_PROPERTY_FACTOR. step: the
 * part's index (the decode step or the piece), for the variant's misalignments. */
typedef enum tu_prop_kind { TU_PROP_DECODE, TU_PROP_CHUNKED, TU_PROP_PIECES } tu_prop_kind;
typedef void (*tu_prop_part_fn)(const void *ctx, const char *what, tu_prop_kind kind, size_t step, size_t q0, size_t nq,
                                size_t nkv);
/** Decode steps: row t over keys [0, t] for each t < n. */
void tu_prop_decode(const void *ctx, size_t n, tu_prop_part_fn part);
/** Chunked prefill: rows [start, n) over all n keys. */
void tu_prop_chunked(const void *ctx, size_t n, size_t start, tu_prop_part_fn part);
/** Pieces of a prefill: rows [cuts[i], cuts[i + 1]) over keys [0, cuts[i + 1]) for i < 3, as a
 *  growing KV cache holds them (empty pieces skipped). */
void tu_prop_pieces(const void *ctx, const size_t cuts[4], tu_prop_part_fn part);

/** Allocate and fill q [n_q][h_q][d], k [n_kv][h_k][d], v [n_kv][h_v][dv] in a layout
 *  (TU_PACKED_QKV needs n_q == n_kv), then snapshot them. */
void tu_qkv_make(tu_qkv *x, tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv, size_t h_q,
                 size_t h_k, size_t h_v, size_t d, size_t dv);
/** tu_qkv_make's inputs, returned (a test's prologue: tu_qkv x = tu_qkv_of(...)). */
tu_qkv tu_qkv_of(tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv, size_t h_q, size_t h_k,
                 size_t h_v, size_t d, size_t dv);
/** q, k, v with log gates g and beta b (a tensor without data where a call has none), and copies of
 *  g and b that prove a call did not write them: the inputs of the delta rule and of gated linear
 *  attention (delta_util.h's dt_in, gated_util.h's gt_inputs). */
typedef struct tu_gated_in {
  tu_qkv x;
  tu_tensor g, b;
  float *gcopy, *bcopy;
} tu_gated_in;
/** Snapshots q, k, v, g and b (after filling them, or after a test changed them on purpose). */
void tu_gated_snapshot(tu_gated_in *in);
/** Asserts that no byte of q, k, v, g or b changed since the snapshot. */
void tu_gated_assert_unchanged(const tu_gated_in *in);
void tu_gated_free(tu_gated_in *in);
/** Asserts that a descriptor's shape is attn_shape_init's for the sizes of the descriptor tests
 *  (n_q 5, n_kv 9, h_q 6, h_kv 2, head width d, dv 40): h_k = h_v = h_kv, default layouts. */
void tu_assert_shape_defaults(const char *what, const attn_shape *got, size_t d);
/** free() of each of count pointers (the arrays of a result struct). */
void tu_free_all(void *const *p, size_t count);
/** Point a shape's q, k, v and o layouts at tensors (sizes stay as they are). */
void tu_shape_layouts(attn_shape *s, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v, const tu_tensor *o);
/** The outputs of a call of shape *s over q, k, v, guarded and all sentinel in layout okind: o
 *  [n_q][h_q][dv] and, unless lse is NULL, lse [n_q][h_q][1]; points s's layouts at q, k, v and o
 *  and *lse_layout at lse's. */
void tu_outputs_alloc(attn_shape *s, attn_layout *lse_layout, const tu_tensor *q, const tu_tensor *k,
                      const tu_tensor *v, tu_layout_kind okind, tu_tensor *o, tu_tensor *lse);
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
/** The reference's name of a library feature map (the reference does not include attn.h). */
ref_feature_map tu_ref_map(attn_feature_map map);
/** The reference's GAU problem of a descriptor over tensors q, k, v (their layouts, not the
 *  descriptor's; the bias table is the descriptor's). */
ref_gau_problem tu_gau_problem(const attn_gau_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v);
/** The reference's softmax problem of a descriptor (mask, scale and options) over q, k, v. */
ref_softmax_problem tu_softmax_problem(const attn_softmax_desc *d, const tu_tensor *q, const tu_tensor *k,
                                       const tu_tensor *v);
/** The reference's selective problem of a descriptor over q, k, v, with f0 the F on entry
 *  (NULL: a fresh sequence). */
ref_selective_problem tu_selective_problem(const attn_selective_desc *d, const tu_tensor *q, const tu_tensor *k,
                                           const tu_tensor *v, const float *f0);
/** The softmax reference of a call: o [n_q][h_q][dv], lse [n_q][h_q], and their error scales
 *  oscale (of o) and sabs (of the logits), all allocated here. */
typedef struct tu_softmax_ref {
  double *o, *lse, *oscale, *sabs;
} tu_softmax_ref;
void tu_softmax_ref_compute(const attn_softmax_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                            tu_softmax_ref *r);
void tu_softmax_ref_free(tu_softmax_ref *r);

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
void tu_compare(const char *family, const char *what, const tu_tensor *got, const double *ref, const double *scale,
                const double *tol);

/** tu_select_rows over a table of `count` rows of `stride` bytes, a row's work n_q n_kv h_q (d + w)
 *  from the size_t fields at the byte offsets at[0..4] (case_table.h's TU_SELECT_CASES). */
size_t tu_select_cases(const void *rows, size_t count, size_t stride, const size_t at[5], size_t *sel);

/** A tensor stored as fp16 or bf16: every logical element of t rounded to the type in place (the
 *  tests' own converter, half_ref.h), and its 16-bit patterns in a new malloc'd buffer of t's
 *  layout (t->span elements) whose gaps hold NaN patterns, so a read of a gap poisons a result. */
uint16_t *tu_half_of(tu_tensor *t, attn_dtype ty);
/** The pattern of a float rounded to fp16 or bf16 (nearest even), and the value of a pattern. */
uint16_t tu_half_bits(attn_dtype ty, float x);
double tu_half_value(attn_dtype ty, uint16_t h);

/** Convenience: a double array of `count` copies of value (freed by the caller). */
double *tu_dup(double value, size_t count);

#endif /* ATTN_TEST_UTIL_H */
