/*
 * Shared helpers of the linear attention suites (tests/ops/check_linear.c, check_linear_gates.c)
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

#endif /* ATTN_TEST_LINEAR_UTIL_H */
