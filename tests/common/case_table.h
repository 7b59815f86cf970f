/*
 * Abbreviations of the case tables of the attention suites (tests/ops/check_softmax.c,
 * check_gau.c, check_selective.c): masks as attn_mask initialisers, layouts, data kinds, and the
 * designated initialisers that their rows share. The names are short on purpose (a table row fits
 * on a line): only those suites include this header, after test_util.h.
 */
#ifndef ATTN_TEST_CASE_TABLE_H
#define ATTN_TEST_CASE_TABLE_H

#include "test_util.h"

/* masks */
#define U ATTN_UNBOUNDED
#define FULL \
  { U, U, 0 }
#define CAUSAL \
  { U, 0, 0 }
#define WINDOW(l, r) \
  { (l), (r), 0 }
#define MASK(l, r, g) \
  { (l), (r), (g) }
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

#endif /* ATTN_TEST_CASE_TABLE_H */
