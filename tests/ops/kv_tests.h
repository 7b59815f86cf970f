/* The storage tests the kv_half executable runs beside its own: int8 K/V (kv_int8.c), batched,
 * paged calls (kv_paged.c) and half queries and outputs (qo_half.c), each Check test and its
 * loop count. */
#ifndef ATTN_TEST_KV_TESTS_H
#define ATTN_TEST_KV_TESTS_H

#include <check.h>

const TTest *kv_int8_softmax_test(void);
int kv_int8_softmax_cases(void);
const TTest *kv_int8_bad_test(void);
int kv_int8_bad_cases(void);
const TTest *kv_paged_batch_test(void);
int kv_paged_batch_cases(void);
const TTest *kv_paged_bad_test(void);
int kv_paged_bad_cases(void);
const TTest *qo_half_test(void);
int qo_half_cases(void);
const TTest *qo_half_bad_test(void);
int qo_half_bad_cases(void);
const TTest *qo_half_alias_test(void);

#endif
