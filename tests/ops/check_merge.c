/*
 * attn_softmax_merge (split-KV / ring attention partial results), on the ISA path named by
 * ATTN_ISA, against the float64 reference. TCases: "reference" (the case table, in place and not,
 * the non-finite policy), "properties" (regrouping and reordering the parts), "api" (reentrancy)
 * and "bad_input" (the exact status of every bad argument, nothing written). The split-KV
 * property (two softmax halves merged equal the whole) is in check_softmax.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h" /* tu_bad_case: a row of the table */
#include "test_util.h"
#include "tolerances.h"

#define T TU_TOKEN_MAJOR
#define P TU_PADDED

/* ------------------------------------------------------------------------------------------ */
/* Reference table                                                                             */
/* ------------------------------------------------------------------------------------------ */
enum { LSE_NARROW, LSE_WIDE, LSE_HOLES };
typedef struct mg_case {
  size_t rows, dv, parts;
  tu_layout_kind layout; /* T: o stride dv, lse stride 1; P: o stride dv + 10, lse stride 11 */
  int lse_mode;
  int in_place; /* 0: separate output; k > 0: the output is part k - 1 (same strides) */
  int no_lse;   /* 1: lse_out = NULL */
} mg_case;

static const mg_case mg_cases[] = {
    {.rows = 1, .dv = 1, .parts = 1},
    {.rows = 7, .dv = 8, .parts = 2},
    {.rows = 33, .dv = 65, .parts = 3, .layout = P, .lse_mode = LSE_WIDE},
    {.rows = 50, .dv = 64, .parts = 4, .lse_mode = LSE_HOLES},
    {.rows = 9, .dv = 7, .parts = 2, .layout = P, .lse_mode = LSE_HOLES, .in_place = 1},
    {.rows = 64, .dv = 128, .parts = 2, .lse_mode = LSE_WIDE, .in_place = 2},
    {.rows = 20, .dv = 9, .parts = 5, .lse_mode = LSE_HOLES, .no_lse = 1},
    {.rows = 17, .dv = 4, .parts = 2, .layout = P, .in_place = 1, .no_lse = 1},
    {.rows = 97, .dv = 3, .parts = 3, .layout = P, .lse_mode = LSE_HOLES},
    {.rows = 31, .dv = 16, .parts = 4, .in_place = 3},
    {.rows = 40, .dv = 9, .parts = 3, .layout = P, .lse_mode = LSE_HOLES, .in_place = 3},
};
#define MG_NCASES (sizeof mg_cases / sizeof mg_cases[0])

START_TEST(merge_matches_reference) {
  const mg_case *c = &mg_cases[_i];
  tu_rng rng = tu_rng_of(5000 + (uint64_t)_i);
  tu_tensor o[5], l[5], out, lout;
  const float *op[5], *lp[5];
  for (size_t p = 0; p < c->parts; ++p) {
    tu_tensor_alloc(&o[p], c->layout, c->rows, 1, c->dv, 1);
    tu_tensor_alloc(&l[p], c->layout, c->rows, 1, 1, 1);
    tu_tensor_fill(&o[p], &rng, -1.0f, 1.0f);
    for (size_t r = 0; r < c->rows; ++r) {
      float v = tu_rng_range(&rng, -3.0f, 3.0f);
      if (c->lse_mode == LSE_WIDE) v = tu_rng_range(&rng, -150.0f, 150.0f);
      if (c->lse_mode == LSE_HOLES && (r % 5 == 0 || tu_rng_next(&rng) % 4 == 0)) v = -INFINITY;
      *tu_at(&l[p], r, 0, 0) = v;
    }
    op[p] = o[p].data;
    lp[p] = l[p].data;
  }
  const size_t os = o[0].l.row_stride, ls = l[0].l.row_stride;
  double *ro = malloc(sizeof(double) * c->rows * c->dv), *rl = malloc(sizeof(double) * c->rows);
  double *so = malloc(sizeof(double) * c->rows * c->dv), *sl = malloc(sizeof(double) * c->rows);
  ck_assert(ro && rl && so && sl);
  ref_merge(c->rows, c->dv, c->parts, op, os, lp, ls, ro, rl, so, sl);
  if (c->in_place) {
    out = o[c->in_place - 1];
    lout = l[c->in_place - 1];
  } else {
    tu_tensor_alloc(&out, c->layout, c->rows, 1, c->dv, 1);
    tu_tensor_alloc(&lout, c->layout, c->rows, 1, 1, 1);
  }
  ck_assert_int_eq(attn_softmax_merge(c->rows, c->dv, c->parts, op, os, lp, ls, out.data, out.l.row_stride,
                                      !c->no_lse ? lout.data : NULL, lout.l.row_stride),
                   ATTN_OK);
  tu_assert_output_clean("merge o", &out);
  tu_assert_output_clean("merge lse", &lout);
  double *tol = tu_dup(tol_merge_o(c->parts), c->rows * c->dv);
  tu_compare("merge.o", "merge", &out, ro, so, tol);
  if (!c->no_lse) {
    for (size_t r = 0; r < c->rows; ++r) tol[r] = tol_merge_lse(c->parts);
    tu_compare("merge.lse", "merge", &lout, rl, sl, tol);
  } else if (!c->in_place) {
    /* lse_out NULL: the buffer we did not pass stays all sentinel */
    for (size_t r = 0; r < c->rows; ++r) {
      const float s = tu_sentinel(), g = *tu_at(&lout, r, 0, 0);
      ck_assert_int_eq(memcmp(&s, &g, sizeof s), 0);
    }
  }
  free(tol);
  free(ro);
  free(rl);
  free(so);
  free(sl);
  if (!c->in_place) {
    tu_tensor_free(&out);
    tu_tensor_free(&lout);
  }
  for (size_t p = 0; p < c->parts; ++p) {
    tu_tensor_free(&o[p]);
    tu_tensor_free(&l[p]);
  }
}
END_TEST

/* The audit's case: in place with the same part twice, o_parts = {a, a}, o = a, equal LSE, a =
 * {2, 4}: the weights 1/2 + 1/2 of the one buffer are summed before it is overwritten, so o = a
 * exactly and lse = l + log 2. Also {a, b, a} with o = a. */
START_TEST(merge_in_place_same_part_twice) {
  float a[2] = {2, 4}, b[2] = {6, 8}, la = 0.5f, lb = 0.5f, lout = 0;
  const float *op2[2] = {a, a}, *lp2[2] = {&la, &la};
  ck_assert_int_eq(attn_softmax_merge(1, 2, 2, op2, 2, lp2, 1, a, 2, &lout, 1), ATTN_OK);
  ck_assert_msg(a[0] == 2.0f && a[1] == 4.0f, "o = {%g, %g}, want {2, 4}", a[0], a[1]);
  ck_assert_float_eq_tol(lout, 0.5f + logf(2.0f), 1e-6f);
  const float *op3[3] = {a, b, a}, *lp3[3] = {&la, &lb, &la};
  ck_assert_int_eq(attn_softmax_merge(1, 2, 3, op3, 2, lp3, 1, a, 2, NULL, 1), ATTN_OK);
  ck_assert_float_eq_tol(a[0], 10.0f / 3.0f, 1e-6f); /* (2 + 6 + 2) / 3 */
  ck_assert_float_eq_tol(a[1], 16.0f / 3.0f, 1e-6f); /* (4 + 8 + 4) / 3 */
}
END_TEST

/* Non-finite parts, one row per situation, against the reference (which applies the policy):
 * a NaN LSE, a +inf LSE, every LSE NaN, a NaN o in a part with a finite LSE, a NaN o in an empty
 * part (LSE -inf: never read), every part empty, and an infinite o; in place and not. */
START_TEST(merge_nonfinite_policy) {
  enum { ROWS = 7, DV = 5, PARTS = 3 };
  const float lse_in[ROWS][PARTS] = {{0.5f, NAN, 1.0f},   {0.5f, INFINITY, 1.0f},  {NAN, NAN, NAN},
                                     {0.5f, 0.25f, 1.0f}, {0.5f, -INFINITY, 1.0f}, {-INFINITY, -INFINITY, -INFINITY},
                                     {2.0f, 0.0f, -1.0f}};
  for (int in_place = 0; in_place < 2; ++in_place) {
    tu_rng rng = tu_rng_of(5100);
    tu_tensor o[PARTS], l[PARTS], out, lout;
    const float *op[PARTS], *lp[PARTS];
    for (size_t p = 0; p < PARTS; ++p) {
      tu_tensor_alloc(&o[p], T, ROWS, 1, DV, 1);
      tu_tensor_alloc(&l[p], T, ROWS, 1, 1, 1);
      tu_tensor_fill(&o[p], &rng, -1.0f, 1.0f);
      for (size_t r = 0; r < ROWS; ++r) *tu_at(&l[p], r, 0, 0) = lse_in[r][p];
      op[p] = o[p].data;
      lp[p] = l[p].data;
    }
    *tu_at(&o[1], 3, 0, 2) = NAN;      /* row 3: used part */
    *tu_at(&o[1], 4, 0, 1) = NAN;      /* row 4: empty part, never read */
    *tu_at(&o[0], 6, 0, 4) = INFINITY; /* row 6: used part */
    double ro[ROWS * DV], rl[ROWS], so[ROWS * DV], sl[ROWS];
    ref_merge(ROWS, DV, PARTS, op, DV, lp, 1, ro, rl, so, sl);
    if (in_place) {
      out = o[0];
      lout = l[2];
    } else {
      tu_tensor_alloc(&out, T, ROWS, 1, DV, 1);
      tu_tensor_alloc(&lout, T, ROWS, 1, 1, 1);
    }
    ck_assert_int_eq(attn_softmax_merge(ROWS, DV, PARTS, op, DV, lp, 1, out.data, DV, lout.data, 1), ATTN_OK);
    double *tol = tu_dup(tol_merge_o(PARTS), ROWS * DV);
    tu_compare("merge.o", in_place ? "non-finite parts, in place" : "non-finite parts", &out, ro, so, tol);
    for (size_t r = 0; r < ROWS; ++r) tol[r] = tol_merge_lse(PARTS);
    tu_compare("merge.lse", in_place ? "non-finite parts, in place" : "non-finite parts", &lout, rl, sl, tol);
    ck_assert(isnan(rl[0]) && isnan(rl[2]) && isnan(ro[3 * DV]) && !isnan(ro[4 * DV]) && rl[5] == -INFINITY);
    free(tol);
    if (!in_place) {
      tu_tensor_free(&out);
      tu_tensor_free(&lout);
    }
    for (size_t p = 0; p < PARTS; ++p) {
      tu_tensor_free(&o[p]);
      tu_tensor_free(&l[p]);
    }
  }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties: the grouping and the order of the parts do not matter                           */
/* ------------------------------------------------------------------------------------------ */
enum { PR_PARTS = 5 };
typedef struct mg_parts {
  tu_tensor o[PR_PARTS], l[PR_PARTS];
  const float *op[PR_PARTS], *lp[PR_PARTS];
  double *ro, *rl, *so, *sl; /* the reference merge of all parts and its error scales */
} mg_parts;

/* PR_PARTS parts of rows x dv, LSE in [-3, 3) with holes (-inf: empty parts). */
static void mg_parts_make(mg_parts *m, size_t rows, size_t dv, uint64_t seed) {
  tu_rng rng = tu_rng_of(seed);
  for (size_t p = 0; p < PR_PARTS; ++p) {
    tu_tensor_alloc(&m->o[p], T, rows, 1, dv, 1);
    tu_tensor_alloc(&m->l[p], T, rows, 1, 1, 1);
    tu_tensor_fill(&m->o[p], &rng, -1.0f, 1.0f);
    for (size_t r = 0; r < rows; ++r)
      *tu_at(&m->l[p], r, 0, 0) = tu_rng_next(&rng) % 4 == 0 ? -INFINITY : tu_rng_range(&rng, -3.0f, 3.0f);
    m->op[p] = m->o[p].data;
    m->lp[p] = m->l[p].data;
  }
  m->ro = malloc(sizeof(double) * rows * dv);
  m->so = malloc(sizeof(double) * rows * dv);
  m->rl = malloc(sizeof(double) * rows);
  m->sl = malloc(sizeof(double) * rows);
  ck_assert(m->ro && m->so && m->rl && m->sl);
  ref_merge(rows, dv, PR_PARTS, m->op, dv, m->lp, 1, m->ro, m->rl, m->so, m->sl);
}

static void mg_parts_free(mg_parts *m) {
  for (size_t p = 0; p < PR_PARTS; ++p) {
    tu_tensor_free(&m->o[p]);
    tu_tensor_free(&m->l[p]);
  }
  free(m->ro);
  free(m->so);
  free(m->rl);
  free(m->sl);
}

/* attn_softmax_merge of `parts` parts into freshly allocated o and lse (contiguous). */
static void mg_call(size_t rows, size_t dv, size_t parts, const float *const *op, const float *const *lp, tu_tensor *o,
                    tu_tensor *l) {
  tu_tensor_alloc(o, T, rows, 1, dv, 1);
  tu_tensor_alloc(l, T, rows, 1, 1, 1);
  ck_assert_int_eq(attn_softmax_merge(rows, dv, parts, op, dv, lp, 1, o->data, dv, l->data, 1), ATTN_OK);
  tu_assert_output_clean("merge o", o);
  tu_assert_output_clean("merge lse", l);
}

/* got against another library result `want` (both within their bounds of the reference, whose
 * error scales are used), bounds times TOL_PROPERTY_FACTOR. */
static void mg_compare_results(const char *what, const mg_parts *m, const tu_tensor *go, const tu_tensor *gl,
                               const tu_tensor *wo, const tu_tensor *wl) {
  const size_t rows = go->n, dv = go->w;
  double *eo = malloc(sizeof(double) * rows * dv), *el = malloc(sizeof(double) * rows);
  ck_assert(eo && el);
  tu_tensor_to_double(wo, eo);
  tu_tensor_to_double(wl, el);
  double *tol = tu_dup(TOL_PROPERTY_FACTOR * tol_merge_o(PR_PARTS), rows * dv);
  tu_compare("merge.o", what, go, eo, m->so, tol);
  for (size_t r = 0; r < rows; ++r) tol[r] = TOL_PROPERTY_FACTOR * tol_merge_lse(PR_PARTS);
  tu_compare("merge.lse", what, gl, el, m->sl, tol);
  free(tol);
  free(eo);
  free(el);
}

/* Merging parts {0, 1} first and then the result with parts 2.. equals merging all at once
 * (ring attention merges as the parts arrive); so does merging them in reverse order. */
START_TEST(merge_regroup_and_reorder_match_one_call) {
  static const size_t shapes[][2] = {{33, 16}, {7, 65}, {64, 3}};
  const size_t rows = shapes[_i][0], dv = shapes[_i][1];
  mg_parts m;
  mg_parts_make(&m, rows, dv, 5200 + (uint64_t)_i);
  tu_tensor all_o, all_l, ab_o, ab_l, re_o, re_l, rev_o, rev_l;
  mg_call(rows, dv, PR_PARTS, m.op, m.lp, &all_o, &all_l);
  double *tol = tu_dup(tol_merge_o(PR_PARTS), rows * dv);
  tu_compare("merge.o", "one call", &all_o, m.ro, m.so, tol);
  free(tol);
  mg_call(rows, dv, 2, m.op, m.lp, &ab_o, &ab_l);
  const float *op[PR_PARTS - 1] = {ab_o.data}, *lp[PR_PARTS - 1] = {ab_l.data};
  for (size_t p = 2; p < PR_PARTS; ++p) {
    op[p - 1] = m.op[p];
    lp[p - 1] = m.lp[p];
  }
  mg_call(rows, dv, PR_PARTS - 1, op, lp, &re_o, &re_l);
  mg_compare_results("parts {0, 1} merged first", &m, &re_o, &re_l, &all_o, &all_l);
  const float *rop[PR_PARTS], *rlp[PR_PARTS];
  for (size_t p = 0; p < PR_PARTS; ++p) {
    rop[p] = m.op[PR_PARTS - 1 - p];
    rlp[p] = m.lp[PR_PARTS - 1 - p];
  }
  mg_call(rows, dv, PR_PARTS, rop, rlp, &rev_o, &rev_l);
  mg_compare_results("parts in reverse order", &m, &rev_o, &rev_l, &all_o, &all_l);
  tu_tensor *all[] = {&all_o, &all_l, &ab_o, &ab_l, &re_o, &re_l, &rev_o, &rev_l};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tu_tensor_free(all[i]);
  mg_parts_free(&m);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Reentrancy                                                                                  */
/* ------------------------------------------------------------------------------------------ */
enum { RE_THREADS = 4, RE_ROWS = 90, RE_DV = 24, RE_REPS = 50 };

static int mg_job_run(const void *arg, float *out) {
  const mg_parts *m = arg;
  int rc = 0;
  for (int rep = 0; rep < RE_REPS && rc == 0; ++rep)
    rc =
        (int)attn_softmax_merge(RE_ROWS, RE_DV, PR_PARTS, m->op, RE_DV, m->lp, 1, out, RE_DV, out + RE_ROWS * RE_DV, 1);
  return rc;
}

START_TEST(merge_concurrent_calls_match_serial) {
  mg_parts m[RE_THREADS];
  const void *args[RE_THREADS];
  for (int t = 0; t < RE_THREADS; ++t) {
    mg_parts_make(&m[t], RE_ROWS, RE_DV, 5300 + (uint64_t)t);
    args[t] = &m[t];
  }
  tu_assert_reentrant("threaded merge vs serial", mg_job_run, args, RE_THREADS, RE_ROWS * (RE_DV + 1));
  for (int t = 0; t < RE_THREADS; ++t) mg_parts_free(&m[t]);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input: each row changes one argument of a valid call; the call answers the row's status */
/* and writes nothing (the one OK row, in place, writes only its own part).                    */
/* ------------------------------------------------------------------------------------------ */
#define HUGE_N (SIZE_MAX / 2)
enum { MROWS = 6, MDV = 5 };
typedef enum mv_kind {
  MV_OPARTS_NULL,
  MV_OPART1_NULL,
  MV_LPARTS_NULL,
  MV_LPART0_NULL,
  MV_O_NULL,
  MV_ROWS_0,
  MV_DV_0,
  MV_PARTS_0,
  MV_ROWS_HUGE,
  MV_OSTRIDE_HUGE,
  MV_OSTRIDE_SMALL,
  MV_OUTSTRIDE_SMALL,
  MV_LSTRIDE_0,
  MV_LOUTSTRIDE_0,
  MV_O_IN_PART0,
  MV_O_IS_PART1_OTHER_STRIDE,
  MV_LOUT_IN_LPART0,
  MV_LOUT_IN_O,
  MV_O_IS_LPART0,
  MV_IN_PLACE_OK
} mv_kind;

static const tu_bad_case mv_cases[] = {
    {.name = "o_parts NULL", .fault = MV_OPARTS_NULL, .expect = ATTN_E_NULL_POINTER},
    {.name = "o_parts[1] NULL", .fault = MV_OPART1_NULL, .expect = ATTN_E_NULL_POINTER},
    {.name = "lse_parts NULL", .fault = MV_LPARTS_NULL, .expect = ATTN_E_NULL_POINTER},
    {.name = "lse_parts[0] NULL", .fault = MV_LPART0_NULL, .expect = ATTN_E_NULL_POINTER},
    {.name = "o NULL", .fault = MV_O_NULL, .expect = ATTN_E_NULL_POINTER},
    {.name = "rows 0", .fault = MV_ROWS_0, .expect = ATTN_E_ZERO_SIZE},
    {.name = "dv 0", .fault = MV_DV_0, .expect = ATTN_E_ZERO_SIZE},
    {.name = "parts 0", .fault = MV_PARTS_0, .expect = ATTN_E_ZERO_SIZE},
    {.name = "rows SIZE_MAX/2", .fault = MV_ROWS_HUGE, .expect = ATTN_E_SIZE_OVERFLOW},
    {.name = "o_stride huge", .fault = MV_OSTRIDE_HUGE, .expect = ATTN_E_SIZE_OVERFLOW},
    {.name = "o_stride < dv", .fault = MV_OSTRIDE_SMALL, .expect = ATTN_E_BAD_STRIDE},
    {.name = "out_stride < dv", .fault = MV_OUTSTRIDE_SMALL, .expect = ATTN_E_BAD_STRIDE},
    {.name = "lse_stride 0", .fault = MV_LSTRIDE_0, .expect = ATTN_E_BAD_STRIDE},
    {.name = "lse_out_stride 0", .fault = MV_LOUTSTRIDE_0, .expect = ATTN_E_BAD_STRIDE},
    {.name = "o inside o_parts[0]", .fault = MV_O_IN_PART0, .expect = ATTN_E_ALIASING},
    {.name = "o is o_parts[1] with another stride", .fault = MV_O_IS_PART1_OTHER_STRIDE, .expect = ATTN_E_ALIASING},
    {.name = "lse_out inside lse_parts[0]", .fault = MV_LOUT_IN_LPART0, .expect = ATTN_E_ALIASING},
    {.name = "lse_out inside o", .fault = MV_LOUT_IN_O, .expect = ATTN_E_ALIASING},
    {.name = "o is lse_parts[0]", .fault = MV_O_IS_LPART0, .expect = ATTN_E_ALIASING},
    {.name = "in place (o is o_parts[1], lse_out is lse_parts[1])", .fault = MV_IN_PLACE_OK, .expect = ATTN_OK},
};
#define MV_NCASES (sizeof mv_cases / sizeof mv_cases[0])

START_TEST(merge_rejects_bad_input) {
  const tu_bad_case *c = &mv_cases[_i];
  tu_rng rng = tu_rng_of(200 + (uint64_t)_i);
  /* parts and outputs: guarded, with room for the strided cases */
  const size_t cap = 2 * MROWS * (MDV + 1) + 8;
  float *po[2], *pl[2], *out, *lout;
  for (int p = 0; p < 2; ++p) {
    po[p] = tu_alloc(sizeof(float) * cap, 0);
    pl[p] = tu_alloc(sizeof(float) * cap, 0);
    for (size_t e = 0; e < cap; ++e) {
      po[p][e] = tu_rng_range(&rng, -1.0f, 1.0f);
      pl[p][e] = tu_rng_range(&rng, -2.0f, 2.0f);
    }
  }
  out = tu_alloc(sizeof(float) * cap, 0);
  lout = tu_alloc(sizeof(float) * cap, 0);
  float *copy = malloc(sizeof(float) * cap * 6);
  ck_assert_ptr_nonnull(copy);
  float *const all[6] = {po[0], po[1], pl[0], pl[1], out, lout};
  for (int b = 0; b < 6; ++b) memcpy(copy + b * cap, all[b], sizeof(float) * cap);
  const float *opv[2] = {po[0], po[1]}, *lpv[2] = {pl[0], pl[1]};
  const float *const *op = opv, *const *lp = lpv;
  size_t rows = MROWS, dv = MDV, parts = 2, os = MDV, ls = 1, outs = MDV, louts = 1;
  float *o = out, *lo = lout;
  switch ((mv_kind)c->fault) {
    case MV_OPARTS_NULL:
      op = NULL;
      break;
    case MV_OPART1_NULL:
      opv[1] = NULL;
      break;
    case MV_LPARTS_NULL:
      lp = NULL;
      break;
    case MV_LPART0_NULL:
      lpv[0] = NULL;
      break;
    case MV_O_NULL:
      o = NULL;
      break;
    case MV_ROWS_0:
      rows = 0;
      break;
    case MV_DV_0:
      dv = 0;
      break;
    case MV_PARTS_0:
      parts = 0;
      break;
    case MV_ROWS_HUGE:
      rows = HUGE_N;
      break;
    case MV_OSTRIDE_HUGE:
      os = SIZE_MAX / 4;
      break;
    case MV_OSTRIDE_SMALL:
      os = MDV - 1;
      break;
    case MV_OUTSTRIDE_SMALL:
      outs = MDV - 1;
      break;
    case MV_LSTRIDE_0:
      ls = 0;
      break;
    case MV_LOUTSTRIDE_0:
      louts = 0;
      break;
    case MV_O_IN_PART0:
      o = po[0] + 1;
      break;
    case MV_O_IS_PART1_OTHER_STRIDE:
      o = po[1];
      outs = MDV + 1;
      break;
    case MV_LOUT_IN_LPART0:
      lo = pl[0] + 1;
      break;
    case MV_LOUT_IN_O:
      lo = out + 3;
      break;
    case MV_O_IS_LPART0:
      o = pl[0];
      break;
    case MV_IN_PLACE_OK:
      o = po[1];
      lo = pl[1];
      break;
  }
  ck_assert_int_eq(attn_softmax_merge(rows, dv, parts, op, os, lp, ls, o, outs, lo, louts), c->expect);
  for (int b = 0; b < 6; ++b) {
    tu_assert_guards("merge buffer", all[b]);
    if (c->expect != ATTN_OK)
      tu_assert_same_bits("merge buffer after a rejected call", copy + b * cap, all[b], sizeof(float) * cap);
  }
  if (c->expect == ATTN_OK) { /* in place wrote only o_parts[1] and lse_parts[1] */
    ck_assert_int_ne(memcmp(copy + 1 * cap, po[1], sizeof(float) * MROWS * MDV), 0);
    const int untouched[4] = {0, 2, 4, 5};
    for (int b = 0; b < 4; ++b)
      tu_assert_same_bits("merge buffer not written in place", copy + untouched[b] * cap, all[untouched[b]],
                          sizeof(float) * cap);
  }
  for (int b = 0; b < 6; ++b) tu_free(all[b]);
  free(copy);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"reference", merge_matches_reference, (int)MG_NCASES}, {"reference", merge_in_place_same_part_twice, 1},
    {"reference", merge_nonfinite_policy, 1},
  {"properties", merge_regroup_and_reorder_match_one_call, 3},
  {"api", merge_concurrent_calls_match_serial, 1},
  {"bad_input", merge_rejects_bad_input, (int)MV_NCASES})
/* clang-format on */
