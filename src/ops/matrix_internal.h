/* The explicit matrix's internals (attn.h, analysis), shared by matrix.c (the plan, the
 * checks, the run with V the identity) and matrix_stats.c (each row's statistics). */
#ifndef ATTN_OPS_MATRIX_INTERNAL_H
#define ATTN_OPS_MATRIX_INTERNAL_H

#include "core/internal.h"

/* A descriptor of any kind; attn_shape is the first member of each. */
typedef union mx_desc {
  attn_shape shape;
  attn_softmax_desc sm;
  attn_linear_desc lin;
  attn_gau_desc gau;
  attn_selective_desc sel;
} mx_desc;

/* A validated call: the descriptor the variant runs (v the tape, dv = n_kv, o the matrix's layout),
 * the mask each row's count comes from, and the workspace's regions. */
typedef struct mx_plan {
  mx_desc d;
  size_t n_q, n_kv, H;
  attn_mask mask;
  size_t xchunk;                           /* linear attention's exclusive_chunk (0: none) */
  size_t tape, matrix;                     /* floats of the tape and of the matrix region (0: none) */
  size_t off_mat, off_tape, off_f, off_ws; /* regions, floats from the aligned base */
  size_t bytes;                            /* the whole workspace */
} mx_plan;

/* The plan of a call (with_matrix: attn_matrix_stats' workspace, with the matrix's region). */
ATTN_INTERNAL attn_status attn_mx_prepare(const attn_call *c, int with_matrix, mx_plan *p);
/* The aliasing checks of the outputs (n_out of them, the workspace the last) against the inputs. */
ATTN_INTERNAL attn_status attn_mx_check_io(const attn_call *c, const mx_plan *p, void *const *out,
                                           const size_t *out_bytes, size_t n_out, size_t workspace_size);
/* The matrix into a (the plan's layout). */
ATTN_INTERNAL attn_status attn_mx_compute(const attn_call *c, const mx_plan *p, float *a, void *workspace,
                                          size_t workspace_size);
/* The workspace of attn_matrix (with_matrix 0) or attn_matrix_stats (1). */
ATTN_INTERNAL attn_status attn_mx_workspace_bytes(const attn_call *call, int with_matrix, size_t *bytes);

#endif
