/*
 * Shared helpers of the selective attention suites (tests/ops/check_selective.c and
 * check_selective_cache.c): one call of attn_selective with its memory checks, the float64
 * reference of a call and its comparison (o, lse and the column sums f), and a selective cache in
 * guarded memory stepped token by token.
 */
#ifndef ATTN_TEST_SELECTIVE_UTIL_H
#define ATTN_TEST_SELECTIVE_UTIL_H

#include <stddef.h>

#include <attn.h>

#include "ref/ref_selective.h"
#include "test_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Running the library and the reference                                                       */
/* ------------------------------------------------------------------------------------------ */
/** attn_selective_desc_init (asserted) with h_sel. */
void sel_desc(attn_selective_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dd, size_t dv,
              size_t h_sel);
/** Token-major inputs of n tokens from r and the descriptor of one call over all of them. */
void sel_inputs(tu_qkv *x, attn_selective_desc *d, tu_rng *r, tu_data data, size_t n, size_t h_q, size_t h_kv,
                size_t dd, size_t dv, size_t h_sel);

typedef struct sel_res {
  tu_tensor o, lse;
  int has_lse;
  float *f; /* n_kv floats, guarded */
  size_t n_kv;
} sel_res;

/** attn_selective into a fresh result, f carried from f_in (see selective_util.c). */
void sel_run(const attn_selective_desc *desc, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
             tu_layout_kind okind, int with_lse, const float *f_in, size_t misalign, sel_res *r);
void sel_res_free(sel_res *r);

/** n doubles (malloc'd, asserted). */
double *sel_dalloc(size_t n);

typedef struct sel_ref {
  double *o, *lse, *oscale, *oarg, *of, *sabs, *larg, *lf, *f, *fg, *F;
} sel_ref;

/** The reference of a call of desc (its sizes, scale, h_sel) over these tensors, f0 the state. */
void sel_ref_compute(const attn_selective_desc *d, const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                     const float *f0, sel_ref *r);
void sel_ref_free(sel_ref *r);

/** The error scales of some rows (pointers at the first row's [h_q][dv] and [h_q] entries). */
typedef struct sel_scales {
  const double *oscale, *oarg, *of, *sabs, *larg, *lf;
} sel_scales;

sel_scales sel_scales_at(const sel_ref *r, size_t row, size_t h_q, size_t dv);
/** o (and lse) against expected values with the scales of o's rows; n the tokens behind them. */
void sel_compare(const char *what, size_t n, size_t d, const tu_tensor *o, const tu_tensor *lse, const double *exp_o,
                 const double *exp_lse, sel_scales sc, double factor);
/** The n floats of f against expected column sums (fr, fg: the reference's f and magnitudes). */
void sel_compare_f(const char *what, size_t n_tokens, size_t d, float *f, size_t n, const double *expect,
                   const double *fr, const double *fg, double factor);
/** A tensor's logical elements as a malloc'd [n][h][w] double array. */
double *sel_tensor_double(const tu_tensor *t);

/* ------------------------------------------------------------------------------------------ */
/* The selective cache                                                                         */
/* ------------------------------------------------------------------------------------------ */
typedef struct sc_fix {
  attn_selcache c;
  void *mem;
  size_t bytes;
} sc_fix;

/** The documented bytes of one live token. */
size_t sc_token_bytes(size_t h_kv, size_t d, size_t dv);
/** A cache in guarded memory of exactly attn_selcache_size bytes, its fields asserted. */
void sc_fix_init(sc_fix *s, size_t cap, size_t h_kv, size_t d, size_t dv, float tau, size_t budget, size_t misalign);
void sc_fix_free(sc_fix *s);
/** One step with token t of x into o and lse (1 x h_q); desc1 gives the sizes and h_sel. */
attn_status sc_step_token(const attn_selective_desc *desc1, attn_selcache *c, const tu_qkv *x, size_t t, tu_tensor *o,
                          tu_tensor *lse, size_t misalign);
/** Prefill [0, n) with attn_selective, then attn_selcache_load of its keys, values and f. */
void sc_prefill_load(sc_fix *s, const tu_qkv *x, size_t n, size_t h_q, size_t h_kv, size_t d, size_t dv, size_t h_sel,
                     float *f_out);
/** Asserts the cache's report (live, tokens, evicted) and its live bytes. */
void sc_check_report(const sc_fix *s, size_t live, size_t tokens, size_t evicted);

#endif /* ATTN_TEST_SELECTIVE_UTIL_H */
