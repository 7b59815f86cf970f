/*
 * Linear attention's internals shared by its files (src/ops/linear*.c), hidden like the rest of
 * the library: the descriptor's validation, gate tensors and the call's plan and workspace
 * (linear.c), the windowed form on the blocked engine (linear_window.c) and the caller-owned
 * state (linear_state.c); the compute entry points (linear_call.c) use them all.
 */
#ifndef ATTN_OPS_LINEAR_INTERNAL_H
#define ATTN_OPS_LINEAR_INTERNAL_H

#include "engine/blocked.h"
#include "engine/chunkwise.h"

/* ---- the descriptor (linear.c) ---- */

/* The log gates (beta = 0) or beta (beta = 1) of a call planned in p (its gate heads and m): rows
 * (a row stride of 0 is one row for every token), h_g heads of width floats, layout. */
typedef struct attn_lin_gate_tensor {
  attn_layout l;
  size_t rows, width;
} attn_lin_gate_tensor;

ATTN_INTERNAL attn_lin_gate_tensor attn_lin_gate_of(const attn_linear_desc *d, const attn_chunkwise_plan *p, int beta);
/* Its span in elements (and the stride checks). */
ATTN_INTERNAL attn_status attn_lin_gate_span(const attn_linear_desc *d, const attn_chunkwise_plan *p, int beta,
                                             size_t *span);
/* Validation and the sizes that do not depend on the path; spans of the tensors in *sp. */
ATTN_INTERNAL attn_status attn_lin_validate(const attn_linear_desc *d, attn_spans *sp, attn_chunkwise_plan *p);

/* ---- the windowed form (linear_window.c) ---- */

/* A mask other than full and causal: windowed linear attention on the blocked engine. */
ATTN_INTERNAL int attn_lin_windowed(const attn_linear_desc *d);

/* Windowed linear attention's score step parameters (engine/blocked.h). */
typedef struct attn_lin_window_params {
  float scale, eps;
  int normalize;
} attn_lin_window_params;

/* The blocked plan of a windowed call (m: the map's feature size; favor's W^T is set later). */
ATTN_INTERNAL attn_status attn_lin_window_plan(const attn_linear_desc *d, size_t m, attn_blocked_plan *bp,
                                               const attn_lin_window_params *lp, const struct attn_ukernels *uk);
/* The windowed step's parameters: exponential maps are normalised and scale their inputs. */
ATTN_INTERNAL attn_lin_window_params attn_lin_window_params_of(const attn_linear_desc *d);

/* ---- the call's plan and workspace (linear.c) ---- */

/* The workspace: for FAVOR+ (unless the caller gives W^T), W^T (d x m floats) first, then the
 * engine's scratch, which the generator of a seed source uses before the engine does (W, then its
 * doubles). */
typedef struct attn_lin_ws {
  size_t wt_floats;    /* W^T region (0 without favor) */
  size_t gen_w_floats; /* generator: W region (0 without a seed source), its doubles follow */
  size_t bytes;        /* the whole workspace */
} attn_lin_ws;

/* The engine's plan of a call (a window: bp; otherwise p gets its chunk, for aligned state rows:
 * attn_lin_plan_ld) and the workspace. */
ATTN_INTERNAL attn_status attn_lin_plan(const attn_linear_desc *d, attn_chunkwise_plan *p, attn_blocked_plan *bp,
                                        const attn_lin_window_params *lp, const struct attn_ukernels *uk,
                                        attn_lin_ws *l);

/* ---- the caller-owned state (linear_state.c) ---- */

/* Floats per row of a state with rows on 64-byte lines (attn_linear_state_init_aligned): dv + 2
 * rounded up to 16. dv <= the span of v <= PTRDIFF_MAX / 4, so no overflow. */
static inline size_t attn_lin_ld_aligned(size_t dv) { return attn_line_floats(dv + 2); }
/* The plan's state rows of ld floats (its state_floats with them). A call plans its scratch for
 * aligned rows, the longer (so that the workspace depends on the descriptor alone), then runs
 * with its state's rows (every region fits them), or aligned ones in its scratch without one. */
ATTN_INTERNAL attn_status attn_lin_plan_ld(attn_chunkwise_plan *p, size_t ld);
/* A call's state against its plan: bound, of the descriptor's shape and mode, with rows of
 * dv + 2 floats or aligned ones (its ld then in *ld). */
ATTN_INTERNAL attn_status attn_lin_state_check(const attn_linear_desc *d, const attn_chunkwise_plan *p,
                                               const attn_linear_state *s, size_t *ld);
/* The state a descriptor's plan describes, bound to data. */
ATTN_INTERNAL attn_linear_state attn_lin_state_of(const attn_linear_desc *d, const attn_chunkwise_plan *p, float *data);
ATTN_INTERNAL int attn_lin_state_same_shape(const attn_linear_state *a, const attn_linear_state *b);
/* The first field in which state a differs from b: "<a_is> 2 heads, <b_is> 8", "<a_is> dv 5,
 * <b_is> 6" (b: the state the call needs, or another state). */
ATTN_INTERNAL ATTN_COLD attn_status attn_lin_state_mismatch(const attn_linear_state *a, const attn_linear_state *b,
                                                            const char *a_is, const char *b_is);

/* ---- the compute call (linear_call.c) ---- */

/* Every log gate finite and <= 0, every beta finite and > 0 (NULL: none), on the call's threads. */
ATTN_INTERNAL attn_status attn_lin_check_gates(const attn_linear_desc *d, const attn_chunkwise_plan *p, const float *lg,
                                               const float *beta);
/* attn_linear (gated 0: a descriptor with a gate or beta is the wrong call) and attn_linear_gated. */
ATTN_INTERNAL attn_status attn_lin_run(const attn_linear_desc *d, const void *q, const float *k, const float *v,
                                       const float *log_gate, const float *beta, void *o, attn_linear_state *state,
                                       void *workspace, size_t workspace_size, int gated);

#endif /* ATTN_OPS_LINEAR_INTERNAL_H */
