/* The delta-rule suites' inputs, calls, reference runs and comparisons (check_delta.c,
 * check_delta_state.c): one binder from the public attn_delta_desc to the float64 reference's
 * problem (ref/ref_delta.h), shared by both. */
#ifndef TESTS_COMMON_DELTA_UTIL_H
#define TESTS_COMMON_DELTA_UTIL_H

#include <attn.h>

#include "ref/ref_delta.h"
#include "test_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Inputs                                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* How a call's inputs are drawn. Log gates uniform in [glo, ghi) (glo = ghi = 0: [-0.5, 0));
 * FEATURE split: odd key channels at glo, even ones in [-0.05, 0) (channels that keep beside
 * channels that vanish). Beta uniform in [blo, bhi) (both 0: [0.05, 1)); beta0: every third 0. */
typedef struct dt_spec {
  attn_delta_gate gate;
  tu_layout_kind layout;
  int small_keys; /* |k| < 1: keys in [-1, 1) / sqrt(d) (qk_l2norm 0 keeps the recurrence bounded) */
  float glo, ghi, blo, bhi;
  int split, beta0, row0; /* row0: gate row stride 0 (one row of gates for every token) */
} dt_spec;

/* q, k [n][h_k][d], v [n][h_v][dv], log gates g [n][h_v][w] (no data for PLAIN), beta b
 * [n][h_v][1] (tu_gated_free, tu_gated_assert_unchanged). */
typedef tu_gated_in dt_in;

/* A reference result: o and its scales, the final state and its scales, checkpoint states. */
typedef struct dt_ref {
  double *o, *os, *s, *ss, *ck, *cks;
} dt_ref;

/* Configurations of the property tests: gate, l2norm (0: small keys), chunk, heads. */
typedef struct dt_pcase {
  attn_delta_gate gate;
  int l2;
  size_t chunk, hk, hv, d, dv;
} dt_pcase;

extern const dt_pcase dt_pcases[];
extern const size_t dt_npcases;

void dt_aux_alloc(tu_tensor *t, tu_layout_kind kind, size_t n, size_t h, size_t w, int row0);

void dt_in_make(dt_in *in, const dt_spec *s, tu_rng *r, size_t n, size_t hk, size_t hv, size_t d, size_t dv);

/* Row t0 of a tensor (NULL without data). */
static inline const float *dt_row(const tu_tensor *t, size_t t0) { return t->data ? tu_at(t, t0, 0, 0) : NULL; }

void dt_desc(attn_delta_desc *d, size_t hk, size_t hv, size_t dd, size_t dv, attn_delta_gate gate, size_t chunk,
             int l2);

/* The descriptor of a call on tokens [t0, t0 + n) of in: sizes, the tensors' layouts, o
 * token-major [n][h_v][dv]. */
attn_delta_desc dt_bind(const attn_delta_desc *base, const dt_in *in, size_t n);

size_t dt_chunk(const attn_delta_desc *d);

static inline size_t dt_state_floats(const attn_delta_desc *d) { return d->shape.h_v * d->shape.d * d->shape.dv; }

/* A guarded state of attn_delta_state_size bytes: zero, or values in [-1, 1) (fill). */
float *dt_state(const attn_delta_desc *d, tu_rng *r, int fill);

float *dt_copy_state(const attn_delta_desc *d, const float *from);

/* attn_delta on tokens [t0, t0 + n): o freshly allocated (guarded, token-major), a workspace of
 * exactly the reported size; asserts ATTN_OK, guards, no gap of o written, inputs unchanged. */
void dt_call(const attn_delta_desc *base, const dt_in *in, size_t t0, size_t n, float *state,
             const attn_checkpoints *ck, tu_tensor *o);

ref_delta_problem dt_problem(const attn_delta_desc *d, const dt_in *in, size_t t0, size_t n, const float *s0, size_t C);

double *dt_doubles(size_t count);

void dt_ref_run(dt_ref *r, const attn_delta_desc *d, const dt_in *in, size_t t0, size_t n, const float *s0, size_t C,
                size_t count, const size_t *after);

void dt_ref_free(dt_ref *r);

/* got against expect (the reference or another library result) within factor times
 * tol_delta(d, C) scale + TOL_DT_FLOOR, scale the reference's. */
void dt_compare(const char *family, const char *what, const tu_tensor *got, const double *expect, const double *scale,
                size_t d, size_t C, double factor);

/* A state [h_v][d][dv] as a tensor (tokens = value heads, heads = key channels). */
tu_tensor dt_state_view(const attn_delta_desc *d, float *s);

void dt_check_state(const char *what, const attn_delta_desc *d, float *s, const double *ref, const double *scale,
                    size_t C, double factor);

void dt_assert_finite(const char *what, const float *x, size_t count);

void dt_pcase_setup(const dt_pcase *p, uint64_t seed, size_t n_of_c_mul, long n_of_c_add, attn_delta_desc *d, dt_in *in,
                    size_t *C, size_t *n, tu_rng *rng);

#endif
