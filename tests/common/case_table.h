/*
 * Abbreviations of the case tables of the attention suites (tests/ops/check_softmax.c,
 * check_gau.c, check_selective.c): masks as attn_mask initialisers, layouts, data kinds, and the
 * designated initialisers that their rows share. The names are short on purpose (a table row fits
 * on a line): only those suites include this header, after test_util.h; the plain linear suites
 * get its layouts, data and fields through linear_util.h's LU_SHORT_NAMES.
 */
#ifndef ATTN_TEST_CASE_TABLE_H
#define ATTN_TEST_CASE_TABLE_H

#include "test_util.h"

/* masks (not in the linear suites, whose tables say CAUSAL or BIDIR: linear_util.h) */
#ifndef LU_SHORT_NAMES
#define U ATTN_UNBOUNDED
#define FULL \
  { U, U, 0 }
#define CAUSAL \
  { U, 0, 0 }
#define WINDOW(l, r) \
  { (l), (r), 0 }
#define MASK(l, r, g) \
  { (l), (r), (g) }
#endif
/* layouts (tu_layout_kind) and data (tu_data) */
#define T    TU_TOKEN_MAJOR
#define H    TU_HEAD_MAJOR
#define P    TU_PADDED
#define HP   TU_HEAD_PADDED
#define PK   TU_PACKED_QKV
#define POS  TU_DATA_POSITIVE
#define LRG  TU_DATA_LARGE
#define WIDE TU_DATA_WIDE
/* fields of a row: the sizes, and a scale other than the descriptor's default */
#define SIZES(nq, nkv, dd, ddv) .n_q = (nq), .n_kv = (nkv), .d = (dd), .dv = (ddv)
#define SCALE(x)                .scale = (x), .set_scale = 1

/* The rows of a case table (an array of structs with size_t fields n_q, n_kv, h_q, d and the value
 * width w: dv, or n_kv for the identity V) that run in this mode, into sel; returns how many. */
#define TU_FIELD_AT(cases, f) ((size_t)((const char *)&(cases)[0].f - (const char *)&(cases)[0]))
#define TU_SELECT_CASES(cases, sel, w)                                                                          \
  tu_select_cases((cases), sizeof(cases) / sizeof((cases)[0]), sizeof((cases)[0]),                              \
                  (const size_t[5]){TU_FIELD_AT(cases, n_q), TU_FIELD_AT(cases, n_kv), TU_FIELD_AT(cases, h_q), \
                                    TU_FIELD_AT(cases, d), TU_FIELD_AT(cases, w)},                              \
                  (sel))

#endif /* ATTN_TEST_CASE_TABLE_H */
