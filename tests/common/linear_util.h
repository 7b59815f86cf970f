/*
 * Shared helpers of the linear attention suites (tests/ops/check_linear*.c, check_linear_gates.c)
 * and of the linear fuzzers: head counts, caller-owned states, one call of attn_linear or
 * attn_linear_gated with its memory checks, the float64 reference problem of a descriptor, and the
 * size queries of a descriptor. Every head count is computed here from attn.h's rules (through the
 * reference's lcm), never asked of the library.
 */
#ifndef ATTN_TEST_LINEAR_UTIL_H
#define ATTN_TEST_LINEAR_UTIL_H

#include <stddef.h>

#include <attn.h>

#include "ref/ref_gated.h"
#include "test_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Heads and masks                                                                             */
/* ------------------------------------------------------------------------------------------ */
/** 1 when the descriptor has a gate or beta (then h_g takes part in the heads). */
int lu_gated(const attn_linear_desc *d);
/** Output heads H = max(h_q, h_k, h_v) (and h_g with a gate or beta). */
size_t lu_out_heads(const attn_linear_desc *d);
/** Gate heads: h_g, or H when h_g is 0. */
size_t lu_gate_heads(const attn_linear_desc *d);
/** State heads L = lcm(h_k, h_v) (lcm(h_k, h_v, h_g) with a gate or beta). */
size_t lu_state_heads(const attn_linear_desc *d);
/** 1 when the mask is neither full nor causal: windowed linear attention (the blocked engine). */
int lu_windowed(attn_mask m);
/** The feature size the library reports (asserts ATTN_OK). */
size_t lu_feature_size(const attn_linear_desc *d);

/* ------------------------------------------------------------------------------------------ */
/* States                                                                                      */
/* ------------------------------------------------------------------------------------------ */
/** A state bound to guarded memory of exactly attn_linear_state_size bytes. */
typedef struct lu_state {
  attn_linear_state s;
  void *mem;
  size_t bytes;
} lu_state;

/** Binds a zeroed state and asserts its documented shape: L state heads (lu_state_heads) of m
 *  rows (the feature size) of ld = dv + 2 floats (S | z | offset), L * m * (dv + 2) floats, map,
 *  mode, no token, data at the memory. */
void lu_state_make(lu_state *st, const attn_linear_desc *d);
/** A bound state filled with values in [0, 1) and 11 tokens, so that an unwanted write shows. */
void lu_state_make_filled(lu_state *st, const attn_linear_desc *d, tu_rng *r);
/** Asserts the guards of the state memory, then frees it. */
void lu_state_free(lu_state *st);
/** Floats of a state: heads * m * ld. */
size_t lu_state_floats(const attn_linear_state *s);
/** The state's floats as doubles (malloc'd, freed by the caller). */
double *lu_state_to_double(const attn_linear_state *s);
/** The state's documented layout (row r = h * m + p at data[r * ld]: S in columns c < dv, z in
 *  column dv, the offset in column dv + 1) as a [heads * m][1][ld] tensor. */
tu_tensor lu_state_view(const attn_linear_state *s);
/** Floats per row of an aligned state (attn_linear_state_init_aligned): dv + 2 rounded up to 16. */
size_t lu_state_ld_aligned(size_t dv);
/** The state's rows at dv + 2 floats a row (an aligned state's compacted) in out (heads * m *
 *  (dv + 2) floats): the same state with ld = dv + 2 and data out. No Check assertion. */
attn_linear_state lu_state_compact(const attn_linear_state *s, float *out);

/* ------------------------------------------------------------------------------------------ */
/* Calls                                                                                       */
/* ------------------------------------------------------------------------------------------ */
/**
 * One call on q, k, v (and, when g / b are given with data, log gates and beta: their layouts go
 * into the descriptor), o ([n_q][H][dv], guarded) freshly allocated in layout okind, a workspace of
 * exactly attn_linear_workspace_size bytes at `misalign`: attn_linear_gated when the descriptor
 * has a gate or beta, attn_linear otherwise. Asserts ATTN_OK, the guards of o, the workspace and
 * the state memory, and that no gap element of o was written.
 */
void lu_call(const attn_linear_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
             const tu_tensor *g, const tu_tensor *b, tu_layout_kind okind, attn_linear_state *state, size_t misalign,
             tu_tensor *o);

/* ------------------------------------------------------------------------------------------ */
/* Reference problems (no Check assertion: the fuzzers use them too)                            */
/* ------------------------------------------------------------------------------------------ */
/** The ref_linear problem of a descriptor over tensors: causal, full, or windowed (any other mask,
 *  ref_visible); s0 the incoming state ([L][m][dv + 2] doubles, NULL: none); m the feature size;
 *  favor_w FAVOR+'s W (m x d floats; NULL for the other maps). */
ref_linear_problem lu_ref_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                                  const double *s0, size_t m, const float *favor_w);
/** The ref_gated problem of a descriptor over tensors (g and b may be NULL or have no data: no
 *  gate, no beta); chunk and step_chunk are the error model's (ref_gated.h). */
ref_gated_problem lu_gated_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                                   const tu_tensor *v, const tu_tensor *g, const tu_tensor *b, const double *s0,
                                   size_t chunk, size_t step_chunk);

/* ------------------------------------------------------------------------------------------ */
/* Size queries                                                                                */
/* ------------------------------------------------------------------------------------------ */
/** attn_linear_workspace_size, _state_size, _feature_size and _chunk_size all answer `want`;
 *  on an error none of them writes its output. */
void lu_assert_queries(const attn_linear_desc *d, attn_status want);

/* ------------------------------------------------------------------------------------------ */
/* Rejected calls: nothing written                                                              */
/* ------------------------------------------------------------------------------------------ */
/** A snapshot of the state a call gets (its struct) and of the memory it was bound to. */
typedef struct lu_rejected {
  const attn_linear_state *sp; /* NULL: the call gets no state */
  attn_linear_state before;
  const void *mem; /* a tu_alloc block */
  void *copy;
  size_t bytes;
} lu_rejected;

/** Before the call: the struct at sp (NULL: none) and `bytes` of state memory `mem`. */
void lu_rejected_take(lu_rejected *r, const attn_linear_state *sp, const void *mem, size_t bytes);
/** After a rejected call: every float of o's span still the sentinel and its guards intact, the
 *  workspace's guards intact, the inputs unchanged, the state's struct and memory unchanged and its
 *  guards intact. Frees the snapshot. */
void lu_rejected_check(lu_rejected *r, const tu_tensor *o, const void *ws, const tu_qkv *x);

/** A valid linear call for a bad-input row: a filled state for d, o [n_q][heads][dv] (token-major,
 *  sentinel, guarded) and a guarded workspace of need + 4096 bytes (need: d's workspace query).
 *  alt: a second state a row may make (alt.mem NULL: none). */
typedef struct lu_bad_call {
  lu_state st, alt;
  tu_tensor o;
  void *ws;
  size_t need;
  lu_rejected untouched;
} lu_bad_call;
void lu_bad_call_make(lu_bad_call *b, const attn_linear_desc *d, tu_rng *r, size_t n_q, size_t heads, size_t dv);
/** Before the call: snapshots the state the call gets (sp: &st.s, &alt.s or NULL). */
void lu_bad_call_take(lu_bad_call *b, const attn_linear_state *sp);
/** After a rejected call: lu_rejected_check (o, the workspace, the inputs x, the state), then frees
 *  the states, o and the workspace. */
void lu_bad_call_finish(lu_bad_call *b, const tu_qkv *x);

/** A log gate or beta value every gated call rejects (ATTN_E_BAD_GATE); LU_BAD_NONE: none. */
typedef enum lu_bad_value {
  LU_BAD_NONE,
  LU_GATE_POS,      /* +0.25 */
  LU_GATE_HALF,     /* +0.5 */
  LU_GATE_TINY_POS, /* +1e-30 */
  LU_GATE_NAN,
  LU_GATE_NINF,
  LU_GATE_PINF,
  LU_BETA_0,
  LU_BETA_NEG, /* -0.5 */
  LU_BETA_NAN,
  LU_BETA_INF
} lu_bad_value;
/** The rows of a bad scalar log gate that every gated suite's table holds: ROW(value) gives a row's
 *  fields after its name. */
#define LU_BAD_LOG_GATE_ROW_(ROW, text, v) \
  { "a log gate " text, ROW(v) }
#define LU_BAD_LOG_GATE_ROWS(ROW)                                                                         \
  LU_BAD_LOG_GATE_ROW_(ROW, "+0.25", LU_GATE_POS), LU_BAD_LOG_GATE_ROW_(ROW, "+1e-30", LU_GATE_TINY_POS), \
      LU_BAD_LOG_GATE_ROW_(ROW, "NaN", LU_GATE_NAN), LU_BAD_LOG_GATE_ROW_(ROW, "-inf", LU_GATE_NINF),     \
      LU_BAD_LOG_GATE_ROW_(ROW, "+inf", LU_GATE_PINF)
/** Writes that value into lg[at] (a gate) or beta[at] (a beta). */
void lu_poison_gate(lu_bad_value bad, float *lg, float *beta, size_t at);

/** A gated bad-input test's gate inputs: log gates [n][h][m] in [-3, 0] and betas [n][h] in
 *  [beta_lo, beta_hi] from r (valid for the SCALAR layout {h, 1} and the FEATURE layout feat
 *  {h m, m}), and their copies before the call. */
typedef struct lu_gate_inputs {
  float *lg, *beta, *lg0, *beta0;
  size_t gfloats, bfloats;
  attn_layout feat;
} lu_gate_inputs;
void lu_gate_inputs_make(lu_gate_inputs *g, tu_rng *r, size_t n, size_t h, size_t m, float beta_lo, float beta_hi);
/** A row's gate fault: with feature, *layout = feat; bad (not LU_BAD_NONE) written at the last
 *  token's last head (SCALAR gates and beta), or at the last entry of a FEATURE gate. */
void lu_gate_inputs_fault(lu_gate_inputs *g, int feature, lu_bad_value bad, attn_layout *layout);
/** Copies the gates and betas before the call; the check after it asserts them unchanged. */
void lu_gate_inputs_take(lu_gate_inputs *g);
void lu_gate_inputs_check(const lu_gate_inputs *g);
void lu_gate_inputs_free(lu_gate_inputs *g);

/* ------------------------------------------------------------------------------------------ */
/* The plain linear suites (check_linear*.c): descriptors, calls, reference comparisons         */
/* ------------------------------------------------------------------------------------------ */
/** The largest of three. */
size_t lu_max3(size_t a, size_t b, size_t c);
/** The exponential maps (exp, favor, dsoftmax): exact per-feature offsets in the state (column
 *  dv + 1). */
int lu_xmap(attn_feature_map fm);
/** A descriptor of map fm (attn_linear_desc_init's defaults) with separate head counts h_q, h_k,
 *  h_v, the causal (causal 1) or full mask, normalize and chunk (asserts ATTN_OK). */
void lu_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t dd, size_t dv,
             attn_feature_map fm, int causal, int normalize, size_t chunk);
/** FAVOR+ source of a test: 0 leaves the seed source (chi) with `seed`, 1 sets SEED_SQRT_D with
 *  `seed`, 2 sets ATTN_FAVOR_CALLER with m x d Gaussian floats from rng, returned (the caller
 *  frees them; NULL otherwise). No-op for the other maps. d->m must be set first. */
float *lu_set_favor(attn_linear_desc *d, int wsrc, uint64_t seed, tu_rng *rng);
/** The W a FAVOR+ descriptor uses: the caller's, or what attn_linear_favor_matrix writes for its
 *  seed source (test linear_favor_seed_equals_caller shows that a seed call is a caller call with
 *  that W, bit for bit), cached per (source, seed, m, d) for the process. NULL for other maps. */
const float *lu_favor_w(const attn_linear_desc *d);
/** attn_linear with q, k, v as given (lu_call without gates: o freshly allocated in layout
 *  okind, memory checks). */
void lu_call_plain(const attn_linear_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                   tu_layout_kind okind, attn_linear_state *state, size_t misalign, tu_tensor *o);
/** The reference problem of a descriptor (lu_ref_problem with its feature size and W). */
ref_linear_problem lu_problem(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                              const double *s0);
/** The tolerance of every element (tolerances.h, by map: the exponential maps' grows with the
 *  weighted size of their exponents, arg / scale), times factor; state: the state's bound, else
 *  the output's (malloc'd, count elements). */
double *lu_tols(attn_feature_map fm, int state, size_t n_tokens, size_t m, const double *scale, const double *arg,
                size_t count, double factor);
/** The one output comparison: got against expected values (the reference or another library
 *  result) with the reference's scales and argument scales (exponential maps); n_tokens: the
 *  tokens behind the sums; factor: 1 against the reference, TOL_PROPERTY_FACTOR between two
 *  library results. */
void lu_compare(const char *what, attn_feature_map fm, size_t n_tokens, size_t m, const tu_tensor *got,
                const double *expect, const double *scale, const double *arg, double factor);

/** Reference output of a problem: values, scales, argument scales ([n_q][H][dv]). */
typedef struct lu_ref {
  double *o, *scale, *arg;
} lu_ref;

/** The reference output of a descriptor's problem over q, k, v from state s0 (NULL: none). */
void lu_ref_output(const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                   const double *s0, lu_ref *r);
void lu_ref_free(lu_ref *r);
/** Reference outputs and scales of a problem, then the comparison; prefix counts the key tokens
 *  behind the incoming state. */
void lu_check_output(const char *what, const attn_linear_desc *d, const tu_tensor *q, const tu_tensor *k,
                     const tu_tensor *v, const double *s0, size_t prefix, const tu_tensor *got);
/** A state against expected values (the reference's state, or another library state as doubles)
 *  with the reference's scales; favor: expected re-expressed in the offsets of s first (FAVOR+
 *  states are compared through their offset-free sums: the library's offsets come from its own
 *  float dot products; exp's and dsoftmax's offsets must be exact). The offset column's scale is
 *  0 for exp and dsoftmax: exact. */
void lu_compare_state(const char *what, attn_feature_map fm, size_t n_tokens, const attn_linear_state *s,
                      double *expect, double *scale, double *arg, double factor);
/** The state after a call against the reference: s0 plus this call's keys; tokens counted; the
 *  offset column (and z when not normalised) must be exactly 0 for the elementwise maps, exactly
 *  the reference's offsets for exp and dsoftmax (their reference scale is 0). */
void lu_check_state(const char *what, const attn_linear_desc *d, const tu_tensor *k, const tu_tensor *v,
                    const double *s0, size_t prefix, const attn_linear_state *s);

/* ------------------------------------------------------------------------------------------ */
/* Exponential maps under stress: designed features (check_linear_maps.c, check_linear_window.c) */
/* ------------------------------------------------------------------------------------------ */
/**
 * Inputs are designed as target features T (n x d): exp's x' = T; favor's W x' = T with
 * W = 100 Q (Q orthonormal rows from the test's own Gram-Schmidt, m = d), x' = Q^T T / 100, so
 * that its features u = T - |x'|^2 / 2 follow the same pattern (|x'|^2 / 2 <= 9). x = x' / xs.
 * Patterns:
 *   0 wide: q, k in [-150, 150];
 *   1 low feature: keys' feature 0 in [-110, -90], the rest in [-10, 10]; queries' feature 0 in
 *     [140, 150]: the term that matters is 100 below every other key feature (a single
 *     per-head maximum would underflow it to 0);
 *   2 high key: everything in [-5, 5] but keys 17, 66 and 101 (mid-chunk for chunks 48 and 7),
 *     100 above the rest in every feature: queries before them in their chunk must be exact;
 *   3 the same 30 above (below a chunk-split guard of 40: a query that used the raised offset
 *     would see its denominator shrink by e^-30, and eps with it grow by e^30);
 *   4 the same, feature 0 only, 100 above.
 */
enum { LU_XS_N = 120, LU_XS_D = 8, LU_XS_DV = 4, LU_XS_PATTERNS = 5 };
/** favor's caller W = 100 Q (Q orthonormal rows), m = d, into the descriptor. */
void lu_xs_favor(tu_rng *rng, attn_linear_desc *d, double *Q, float *w);
/** q and k (one head) from target features: x = x' / xs with x' = T (exp; dsoftmax, whose xs is
 *  1: its pre-features are k itself), or for favor (Q given) x' = Q^T T / 100, so that W x' = T.
 *  The keys raised: high[j], or with high NULL keys 17, 66 and 101 (mid-chunk for chunks 48 and
 *  7). Then a fresh snapshot of the inputs. */
void lu_xs_fill(tu_rng *rng, tu_qkv *x, int pattern, const double *Q, float xs, const unsigned char *high);

/* ------------------------------------------------------------------------------------------ */
/* Short names of the plain linear suites' tables (a suite defines LU_SHORT_NAMES first)        */
/* ------------------------------------------------------------------------------------------ */
#ifdef LU_SHORT_NAMES
#include "case_table.h" /* layouts, data, SIZES and SCALE */
#define HEADS(q, k, v) .h_q = (q), .h_k = (k), .h_v = (v)
#define EPS(x)         .eps = (x), .set_eps = 1
#define XEXP           .xmap = ATTN_FEATURE_EXP
#define XFAV           .xmap = ATTN_FEATURE_FAVOR
#define XDSM           .xmap = ATTN_FEATURE_DSOFTMAX
#define WCALLER        .wsrc = 2
#define WSQRTD(s)      .wsrc = 1, .seed = (s)
#define ELU            ATTN_FEATURE_ELU1
#define ID             ATTN_FEATURE_IDENTITY
#define RELU           ATTN_FEATURE_RELU
#define EXPM           ATTN_FEATURE_EXP
#define FAV            ATTN_FEATURE_FAVOR
#define DSM            ATTN_FEATURE_DSOFTMAX
#define CAUSAL         1
#define BIDIR          0
#define NORM           1
#define UNNORM         0
#endif

#endif /* ATTN_TEST_LINEAR_UTIL_H */
