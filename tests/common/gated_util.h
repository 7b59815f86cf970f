/*
 * Shared helpers of the gated linear attention suites (tests/ops/check_linear_gates.c and
 * check_linear_gates_props.c): descriptors, log-gate and beta tensors in their layouts, the inputs
 * of a call and views of their rows, one call of attn_linear_gated, and its output and state
 * against the float64 reference (tests/ref/ref_gated.c) with the bound of tolerances.h.
 */
#ifndef ATTN_TEST_GATED_UTIL_H
#define ATTN_TEST_GATED_UTIL_H

#include <stddef.h>

#include <attn.h>

#include "linear_util.h"
#include "ref/ref_gated.h"
#include "test_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Descriptors, tensors, inputs                                                                */
/* ------------------------------------------------------------------------------------------ */
/** A causal gated descriptor (asserted), with separate value heads h_v and gate heads h_g. */
void gt_desc(attn_linear_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v, size_t h_g, size_t dd,
             size_t dv, attn_feature_map fm, int normalize, attn_gate_kind gate, int beta, size_t chunk);

/* Layouts of the gate and beta tensors [n_kv][h_g][w] (w = m for FEATURE gates, 1 otherwise). */
typedef enum gt_glayout {
  GL_T = 0, /* token-major contiguous */
  GL_P,     /* padded: head w + 3, row h (w + 3) + 5 */
  GL_HM,    /* head-major: row w, head n w */
  GL_R0,    /* row stride 0 (the same gate for every token), head w */
  GL_R0P    /* row stride 0, padded heads w + 2 */
} gt_glayout;

/** An input tensor of exactly its span in a gate layout, gaps set to the sentinel NaN. */
void gt_tensor_alloc(tu_tensor *t, gt_glayout kind, size_t n, size_t h, size_t w);

/* How log gates are drawn. */
typedef enum gt_fill {
  GF_UNIFORM = 0, /* uniform in [lo, hi) */
  GF_CONST,       /* lo everywhere */
  GF_SPLIT,       /* FEATURE: 0 in even features, lo in odd ones */
  GF_MIXED        /* FEATURE: odd features lo, even ones uniform in [-0.05, 0) */
} gt_fill;

typedef struct gt_gatespec {
  attn_gate_kind kind;
  int beta;
  gt_glayout layout;
  gt_fill fill;
  float lo, hi;
} gt_gatespec;

/* q, k, v, log gates and beta of one call (g.data / b.data NULL: no gate / no beta). */
/* q, k, v, log gates and beta (tu_gated_snapshot, tu_gated_assert_unchanged, tu_gated_free). */
typedef tu_gated_in gt_inputs;

typedef struct gt_view {
  tu_tensor q, k, v, g, b;
} gt_view;

/** q, k, v in layout kind, log gates and beta as s says, for descriptor d's heads; snapshotted. */
void gt_inputs_make(gt_inputs *in, tu_layout_kind kind, tu_data data, tu_rng *r, size_t n_q, size_t n_kv,
                    const attn_linear_desc *d, const gt_gatespec *s);
/** Queries [q0, q0 + nq), keys (and their gates and betas) [k0, k0 + nk). */
gt_view gt_slice(const gt_inputs *in, size_t q0, size_t nq, size_t k0, size_t nk);
gt_view gt_all(const gt_inputs *in);
/** Points the descriptor's layouts at the tensors (o's at its own default token-major layout). */
void gt_bind(attn_linear_desc *d, const gt_view *v);
/** The chunk size the library reports (asserted within [1, ATTN_LINEAR_MAX_CHUNK]). */
size_t gt_chunk(const attn_linear_desc *d);

/* ------------------------------------------------------------------------------------------ */
/* Calls, reference, comparison                                                                */
/* ------------------------------------------------------------------------------------------ */
/** attn_linear_gated over a view (lu_call: o freshly allocated in layout okind, memory checks). */
void gt_call(const attn_linear_desc *desc, const gt_view *v, tu_layout_kind okind, attn_linear_state *state,
             size_t misalign, tu_tensor *o);
ref_gated_problem gt_problem(const attn_linear_desc *d, const gt_view *v, const double *s0, size_t chunk,
                             size_t step_chunk);

/* A reference result and its error scales (ref_gated_scales). */
typedef struct gt_ref {
  double *o, *abs, *log, *step, *tiny, *floor;
  size_t count;
} gt_ref;

void gt_ref_output(gt_ref *r, const ref_gated_problem *p);
void gt_ref_state(gt_ref *r, const ref_gated_problem *p);
void gt_ref_free(gt_ref *r);
/** got against expect with the scales of r from element `off` on; m = 0: a state. */
void gt_compare(const char *family, const char *what, const tu_tensor *got, const double *expect, const gt_ref *r,
                size_t off, size_t n_tokens, size_t m, double factor);
/** The output of a call against the reference. */
void gt_check_output(const char *what, const attn_linear_desc *d, const gt_view *v, const double *s0, size_t prefix,
                     size_t chunk, size_t step_chunk, const tu_tensor *got);
/** The state after a call against the reference (shape, tokens, S, z and the offset column). */
void gt_check_state(const char *what, const attn_linear_desc *d, const gt_view *v, const double *s0, size_t prefix,
                    size_t chunk, size_t step_chunk, const attn_linear_state *s);
void gt_assert_finite(const char *what, const float *x, size_t count);
void gt_assert_output_finite(const char *what, const tu_tensor *o);

/* ------------------------------------------------------------------------------------------ */
/* The maps and gate kinds of the case tables                                                  */
/* ------------------------------------------------------------------------------------------ */
typedef enum gt_map {
  M_ID = 0,  /* identity, un-normalised (RetNet, GLA, Mamba2) */
  M_ELU,     /* elu1, normalised */
  M_RELU,    /* relu, normalised */
  M_ELU_UN,  /* elu1, un-normalised */
  M_RELU_UN, /* relu, un-normalised */
  M_ID_NORM  /* identity, normalised (positive data) */
} gt_map;

attn_feature_map gt_fm(gt_map m);
int gt_norm(gt_map m);

typedef enum gt_gk { K_SCALAR = 0, K_FEATURE, K_NONE } gt_gk;
attn_gate_kind gt_kind(gt_gk k);

/* fields of a case row */
#define FEAT .gate = K_FEATURE
#define BETA .beta = 1
#define MILD .mild = 1

#endif /* ATTN_TEST_GATED_UTIL_H */
