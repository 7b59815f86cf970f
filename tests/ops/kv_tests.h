/* The storage tests the kv_half executable runs beside its own: int8 K/V (kv_int8.c), batched,
 * paged calls (kv_paged.c) and half queries and outputs (qo_half.c); row i of each file's part
 * of the executable's test list (int8 and paged: 2 rows, qo_half: 3). */
#ifndef ATTN_TEST_KV_TESTS_H
#define ATTN_TEST_KV_TESTS_H

#include "harness.h"

tu_entry kv_int8_row(size_t i);
tu_entry kv_paged_row(size_t i);
tu_entry qo_half_row(size_t i);

#endif
