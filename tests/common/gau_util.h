/*
 * Shared helpers of the GAU suites (tests/ops/check_gau.c and check_gau_props.c): bias tables, one
 * call of attn_gau with its memory checks, the float64 reference and the one GAU comparison, a
 * case row (the case table's type, with its short field macros) made into inputs and a descriptor.
 */
#ifndef ATTN_TEST_GAU_UTIL_H
#define ATTN_TEST_GAU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <attn.h>

#include "test_util.h"

/* fields of a case row (after case_table.h's) */
#define HEADS(q, kv) .h_q = (q), .h_kv = (kv)
#define BETA(x)      .bias = ATTN_GAU_BIAS_SCALAR, .beta = (x)
#define CTAB(l)      .bias = ATTN_GAU_BIAS_CAUSAL, .bias_len = (l)
#define TTAB(l)      .bias = ATTN_GAU_BIAS_TWO_SIDED, .bias_len = (l)
#define NORM         .normalize = 1

/** Entries a table kind holds: L (causal), 2L - 1 (two-sided); 0 for the scalar bias. */
size_t gau_table_count(attn_gau_bias kind, size_t len);
/** A table of the kind's count, uniform in [-amp, amp) (amp 0: 0.5), exactly sized (malloc: ASan
 *  sees an over-read); NULL for the scalar bias. */
float *gau_table_make(attn_gau_bias kind, size_t len, float amp, tu_rng *r);
/** attn_gau_desc_init (asserted) with a mask. */
void gau_desc(attn_gau_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv, attn_mask mask);
/** Workspace misalignments (bytes) the calls cycle through: any alignment is documented to work. */
extern const size_t gau_misalign[4];
/** attn_gau into a fresh o of layout okind, with every memory check (see gau_util.c). */
void gau_call(const attn_gau_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
              tu_layout_kind okind, size_t misalign, tu_tensor *o);

typedef struct gau_ref {
  double *o, *oscale, *oarg, *onear;
} gau_ref;

void gau_ref_compute(const attn_gau_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v, gau_ref *r);
void gau_ref_free(gau_ref *r);
/** A view of a reference's scales from element `off` on (a property compares some rows only). */
gau_ref gau_ref_at(const gau_ref *r, size_t off);
/** got against expected values with the reference's error scales (tolerances.h, tol_gau_bound). */
void gau_compare(const char *family, const char *what, const tu_tensor *got, const double *expect, const gau_ref *sc,
                 size_t n, size_t d, double factor);

/* A row of a case table. GAU needs h_k == h_v (one count, h_kv, dividing h_q). */
/* GAU needs h_k == h_v (one count, h_kv, dividing h_q). */
typedef struct gau_case {
  const char *name;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  attn_mask mask;        /* every row states it */
  tu_layout_kind layout; /* default: token-major */
  float scale;           /* with set_scale; otherwise the default 1/sqrt(d) */
  int set_scale;
  tu_data data; /* default: uniform in [-1, 1) */
  attn_gau_bias bias;
  float beta;      /* SCALAR */
  size_t bias_len; /* table kinds: L */
  float amp;       /* table entries in [-amp, amp) (0: 0.5) */
  int normalize;
} gau_case;

/* Inputs, table and descriptor of a case. */
typedef struct gau_setup {
  tu_qkv x;
  float *table;
  attn_gau_desc d;
} gau_setup;

void gau_setup_make(gau_setup *s, const gau_case *c, uint64_t seed);
void gau_setup_free(gau_setup *s);
/** Runs a call (gau_call, output in okind) and compares it with the reference. */
void gau_check_call(const char *what, const attn_gau_desc *d, const tu_qkv *x, tu_layout_kind okind, size_t misalign);

#endif /* ATTN_TEST_GAU_UTIL_H */
