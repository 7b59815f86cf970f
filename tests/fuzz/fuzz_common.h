/*
 * Shared helpers of the attn libFuzzer targets (tests/fuzz/fuzz_*.c).
 *
 * Every target turns the fuzz bytes into one or a few library calls. The first FZ_HEADER_BYTES
 * bytes describe the case (shapes, layouts, faults: fz_u8 and what builds on it, 0 once used up),
 * the rest are element values (fz_value; once they run out, values come from an RNG seeded with a
 * hash of the input, so short inputs still describe large tensors). Buffers are sized exactly
 * from the descriptor by the harness (tu_span), inputs without guard zones (ASan sees any
 * over-read) and outputs between guard zones with every byte set to a NaN sentinel, so that
 * "nothing written on error", "no gap element written" and "no guard touched" are byte
 * comparisons. A failed check prints what failed and aborts: libFuzzer then saves the input.
 *
 * Results are compared with the float64 reference (tests/ref) within the bounds of
 * tests/tolerances.h, |got - ref| <= tol * scale, scale being the reference's error scale.
 *
 * ATTN_FUZZ_NONFINITE=1 (environment) enables the cases of the library's non-finite policy:
 * NaN and +-Inf injected into inputs, with the expectation that a row which uses a non-finite
 * input is all NaN and every other row matches the reference; and merge in place with the output
 * part repeated. On by default (meson option fuzz_nonfinite).
 */
#ifndef ATTN_FUZZ_COMMON_H
#define ATTN_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <attn.h>

#include "test_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Reading the fuzz bytes                                                                      */
/* ------------------------------------------------------------------------------------------ */
#define FZ_HEADER_BYTES 64
typedef struct fz_in {
  const uint8_t *p;
  size_t n, pos;       /* header: bytes [0, n) */
  const uint8_t *vals; /* values: the bytes after the header */
  size_t nvals, vpos;
  tu_rng rng; /* values once those are used up */
} fz_in;

void fz_init(fz_in *in, const uint8_t *data, size_t size);
/** The next header byte; 0 once the header is used up. */
unsigned fz_u8(fz_in *in);
/** 0 .. count-1 from one byte (count >= 1). */
size_t fz_pick(fz_in *in, size_t count);
/** 1 .. max from one byte, small sizes far more likely than large ones. */
size_t fz_size(fz_in *in, size_t max);
/** A value in [lo, hi]: 256 levels from one value byte while they last, then uniform from the RNG. */
float fz_value(fz_in *in, float lo, float hi);

/* ------------------------------------------------------------------------------------------ */
/* Failure reports and the environment                                                         */
/* ------------------------------------------------------------------------------------------ */
/** Prints "attn fuzz: <message>" on stderr and aborts (libFuzzer saves the input). */
void fz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
#define FZ_CHECK(cond, ...)            \
  do {                                 \
    if (!(cond)) fz_fail(__VA_ARGS__); \
  } while (0)
/** Aborts unless got == want: "<what>: status <got> (<string>), expected <want>". */
void fz_check_status(const char *what, attn_status got, attn_status want);
/** ATTN_FUZZ_NONFINITE=1: the non-finite policy cases are on. */
int fz_nonfinite(void);
/** Picks a runnable ISA path from a byte and makes it active (attn_isa_set must succeed). */
attn_isa fz_set_isa(fz_in *in);
/** fz_init, then fz_set_isa: the first step of every target that runs on a path. */
attn_isa fz_begin(fz_in *in, const uint8_t *data, size_t size);

/* ------------------------------------------------------------------------------------------ */
/* Expected status of a call with injected faults                                              */
/* ------------------------------------------------------------------------------------------ */
/** No fault: ATTN_OK; one fault: its status exactly; two or more: any error. */
typedef struct fz_expect {
  int faults;
  attn_status status;
} fz_expect;
void fz_expect_fault(fz_expect *e, attn_status status);
/** Aborts unless got is what e expects. */
void fz_check_expect(const char *what, attn_status got, const fz_expect *e);
/** A workspace query: it answered st (what: its name) as e expects and wrote got (SIZE_MAX before)
 *  only as need; without a fault the same query with NULL bytes answered null_st, which must be
 *  ATTN_E_NULL_POINTER. */
void fz_check_ws_query(const char *what, attn_status st, size_t got, size_t need, const fz_expect *e,
                       attn_status null_st);

/** How many faults to inject into one call: 0 (about 60%), 1 (30%) or 2 (10%). */
int fz_fault_count(fz_in *in);

typedef struct fz_qkv fz_qkv; /* below */

/* ------------------------------------------------------------------------------------------ */
/* Shapes and head counts                                                                      */
/* ------------------------------------------------------------------------------------------ */
/** Output heads H = max(h_q, h_k, h_v). */
size_t fz_heads_out(size_t h_q, size_t h_k, size_t h_v);
/** 1 when every count is > 0 and divides H (the rule attn_shape states). */
int fz_heads_valid(size_t h_q, size_t h_k, size_t h_v);
/** lcm(h_k, h_v): the state heads of linear attention. */
size_t fz_state_heads(size_t h_k, size_t h_v);
/** A divisor of h (h >= 1; its first 64 divisors), picked by a byte. */
size_t fz_divisor(fz_in *in, size_t h);
/** The sizes of a call whose keys and values share their heads (softmax, GAU). */
typedef struct fz_kv_sizes {
  size_t n_q, n_kv, h_q, h_kv, d, dv;
} fz_kv_sizes;
/** From the bytes: h_kv up to max_h, h_q a multiple of it up to max_h, n_q and n_kv up to max_n, d
 *  and dv up to max_d; then the longer length halved until n_q n_kv h_q (d + dv) <= work_limit
 *  (one input stays within milliseconds). */
fz_kv_sizes fz_draw_kv_sizes(fz_in *in, size_t max_n, size_t max_d, size_t max_h, size_t work_limit);
/** Sets two of s's head counts to p and p + 1 (p >= 2, from the bytes, raised until the rule
 *  fails): counts that do not all divide the largest (ATTN_E_BAD_HEADS). */
void fz_break_heads(fz_in *in, attn_shape *s);
/** Aborts unless s holds the sizes and the default token-major layouts attn_shape_init documents
 *  ([n][heads][width]; o with H heads). */
void fz_check_shape_defaults(const char *what, const attn_shape *s, size_t n_q, size_t n_kv, size_t h_q, size_t h_k,
                             size_t h_v, size_t d, size_t dv);

/** The arguments of one softmax or linear call, which the fault injectors change. */
typedef struct fz_call {
  attn_shape *shape;          /* the call's copy of the descriptor's shape */
  attn_layout *l[5];          /* its q, k, v, o layouts and (softmax) lse; l[4] may be NULL */
  size_t ln[5], lh[5], lw[5]; /* their token counts, head counts and widths */
  const float *q, *k, *v;
  float *o;
  void *ws;
  size_t ws_bytes;
  int null_desc;   /* pass NULL for the descriptor */
  fz_expect query; /* expected status of the descriptor queries (*_workspace_size, ...) */
  fz_expect call;  /* expected status of the compute call */
} fz_call;

/** Points c at a call: the shape of the call's copy of the descriptor (its q, k, v, o layouts),
 *  the lse layout (softmax; else NULL), the inputs x, the output o (n_q x H rows) and the
 *  workspace. Leaves the expectations alone. */
void fz_call_bind(fz_call *c, attn_shape *shape, attn_layout *lse, const fz_qkv *x, const tu_tensor *o, void *ws,
                  size_t ws_bytes);

/** Faults that softmax and linear calls share. */
enum fz_fault {
  FZ_NULL_DESC,    /* NULL descriptor */
  FZ_NULL_POINTER, /* q, k, v, o or the workspace NULL */
  FZ_ZERO_SIZE,    /* one of the seven sizes of the shape 0 */
  FZ_BAD_HEADS,    /* head counts that do not all divide the largest (fz_break_heads) */
  FZ_BAD_STRIDE,   /* a stride below the width on a dimension of count > 1 */
  FZ_OVERFLOW,     /* a huge stride, or a huge token count */
  FZ_ALIAS,        /* o over an input, the workspace over an input or o */
  FZ_WS_SMALL,     /* workspace_size below what the query reported */
  FZ_COMMON_FAULTS
};
/** Applies one fault (a value of enum fz_fault) to c and records its expected status; a fault
 *  that cannot apply to the shape (a stride fault when every count is 1) changes nothing. */
void fz_common_fault(fz_in *in, fz_call *c, int fault);
/** A non-finite scale (NaN, +inf or -inf) on the call's descriptor: ATTN_E_BAD_SCALE. */
void fz_scale_fault(fz_in *in, fz_call *c, float *scale);
/** Head counts that divide H but that a variant whose keys and values share their heads (softmax,
 *  GAU) refuses whatever the other faults did: h_k != h_v, or h_q below h_k. Counts only go down,
 *  or a count of 1 goes up with a valid head stride, so that no stride or span check can answer
 *  first. Records ATTN_E_BAD_HEADS; changes nothing when no such change fits (all counts 1, or an
 *  earlier fault made h_k != h_v). */
void fz_kv_heads_fault(fz_in *in, fz_call *c);

/* ------------------------------------------------------------------------------------------ */
/* Layouts                                                                                     */
/* ------------------------------------------------------------------------------------------ */
/** A mask from the bytes: each side unbounded, 0, huge but not ATTN_UNBOUNDED (the library clamps
 *  it) or below max_n; a chunk-local width that is mostly none, else small, up to max_n, or beyond
 *  everything. */
attn_mask fz_mask(fz_in *in, size_t max_n);
/** A layout from a byte: the library's default, head-major, padded, head-major padded,
 *  arbitrary strides, or arbitrary strides (0, 1, huge) for a dimension of count 1. Always a
 *  valid input layout (inputs may overlap themselves); an output layout is judged by
 *  fz_expect_output_layout. */
attn_layout fz_layout(fz_in *in, size_t n, size_t h, size_t w, int output);
/** What the library must do with an output layout [n][h][w]: accept it when it follows the
 *  header's rule (strides of count > 1 at least w; with both counts > 1, the larger stride at
 *  least (count of the smaller-stride dimension - 1) x smaller stride + w), refuse it otherwise
 *  (a fault, ATTN_E_BAD_STRIDE). The harness also checks that the rule never accepts a layout
 *  whose elements share memory. */
void fz_expect_output_layout(fz_expect *e, size_t n, size_t h, size_t w, attn_layout l);

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */
/** A byte snapshot of a buffer, to prove later that a call did (not) change it. */
typedef struct fz_snap {
  const void *p;
  size_t bytes;
  void *copy;
} fz_snap;
void fz_snap_take(fz_snap *s, const void *p, size_t bytes);
/** Aborts if the bytes changed since the snapshot. */
void fz_snap_check(const fz_snap *s, const char *what);
void fz_snap_free(fz_snap *s);

/** Bytes of an element of a float type: 4 for fp32, 2 for fp16 and bf16. */
size_t fz_float_size(attn_dtype t);
/** n values in [-amp, amp] from the fuzz bytes, stored at dst as type t (fp32, or fp16 / bf16
 *  rounded by the library's converter). */
void fz_draw_typed(fz_in *in, attn_dtype t, void *dst, size_t n, float amp);
/** Fills the logical elements of t with values in [lo, hi] from the fuzz bytes. */
void fz_tensor_fill(fz_in *in, tu_tensor *t, float lo, float hi);
/** A guarded output tensor (fz_alloc, misaligned by a byte's worth of floats), every byte of its
 *  span set to the sentinel. */
void fz_output_alloc(fz_in *in, tu_tensor *t, size_t n, size_t h, size_t w, attn_layout l);
/** Whether some element of logical row (token, head) is NaN or infinite. */
int fz_row_nonfinite(const tu_tensor *t, size_t token, size_t head);
/** Sets up to three logical elements of t, picked by the bytes, to NaN, +Inf or -Inf. */
void fz_inject_nonfinite(fz_in *in, tu_tensor *t);

/** The inputs q [n_q][h_q][d], k [n_kv][h_k][d], v [n_kv][h_v][dv] of one call, each allocated
 *  exactly (span floats, no guard) with gap elements set to the sentinel, in layouts picked by the
 *  bytes: one fz_layout per tensor, or one packed QKV buffer [n][h_q*d + h_k*d + h_v*dv]. */
struct fz_qkv {
  tu_tensor q, k, v;
  void *packed;
  fz_snap snap[3];
};
void fz_qkv_alloc(fz_in *in, fz_qkv *x, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t d,
                  size_t dv);
/** The inputs of the call of shape s (fz_qkv_alloc with its sizes; s's q, k, v layouts then
 *  point at them): q and k in [lo, hi], v in [-vamp, vamp] from the bytes, with non-finite values
 *  injected when fz_nonfinite(), then snapshot. */
void fz_qkv_make(fz_in *in, fz_qkv *x, attn_shape *s, float lo, float hi, float vamp);
/** Snapshot of the inputs (after filling them), then the check that a call left them intact. */
void fz_qkv_snapshot(fz_qkv *x);
void fz_qkv_check_unchanged(const fz_qkv *x);
void fz_qkv_free(fz_qkv *x);

/** Guard zones of a guarded output intact, and every gap element (inside the span, not part of
 *  the layout) still the sentinel. */
void fz_check_output_clean(const char *what, const tu_tensor *t);

/* ------------------------------------------------------------------------------------------ */
/* Comparison with the reference                                                               */
/* ------------------------------------------------------------------------------------------ */
/**
 * For every logical element e of got (in [n][h][w] order) with row r = e / w, unless
 * skip_rows && skip_rows[r] (a value no policy defines):
 * - ref NaN: got must be NaN (the reference applies the non-finite policy); ref infinite: got must
 *   equal it;
 * - otherwise |got - ref| <= tol[r] * scale[e] (scale NULL: 1).
 * Aborts with the first failing element otherwise.
 */
void fz_compare(const char *what, const tu_tensor *got, const double *ref, const double *scale, const double *tol,
                const unsigned char *skip_rows);

/** Guarded memory: `bytes` (0 allowed) at 64-byte alignment + misalign, every float of it set to
 *  the sentinel, between two guard zones of FZ_GUARD_BYTES that hold a canary and, under ASan,
 *  are poisoned (a write into them is reported where it happens). */
#define FZ_GUARD_BYTES 256
void *fz_alloc(size_t bytes, size_t misalign);
int fz_guards_intact(const void *p);
void fz_free(void *p);
/** Frees a tensor's buffer (guarded outputs through fz_free). */
void fz_tensor_free(tu_tensor *t);

/** calloc that aborts on failure (count 0 allowed). */
void *fz_calloc(size_t count, size_t size);
double *fz_doubles(size_t count);
/** free() of each of the count pointers in p. */
void fz_free_all(void *const *p, size_t count);

/** What a call must leave alone: its inputs always, its outputs and workspace on error. */
typedef struct fz_watch {
  fz_snap o, lse, ws;
  const void *o_owner, *lse_owner, *ws_owner;
} fz_watch;
/** Snapshots o, lse (NULL: none) and the `need` bytes of the workspace ws (fz_alloc) before the call. */
void fz_watch_take(fz_watch *w, const tu_tensor *o, const tu_tensor *lse, const void *ws, size_t need);
/** After the call: st is the status e expects (what: the call's name), x is unchanged and the
 *  workspace's guards are intact; on error o, lse and the workspace are unchanged and the outputs'
 *  guards intact. */
void fz_watch_check(const fz_watch *w, const char *what, attn_status st, const fz_expect *e, const fz_qkv *x);
void fz_watch_free(fz_watch *w);

#endif /* ATTN_FUZZ_COMMON_H */
