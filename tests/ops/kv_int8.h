/* int8 K/V tests (kv_int8.c), run by the kv_half executable: each Check test and its loop count. */
#ifndef ATTN_TEST_KV_INT8_H
#define ATTN_TEST_KV_INT8_H

#include <check.h>

const TTest *kv_int8_softmax_test(void);
int kv_int8_softmax_cases(void);
const TTest *kv_int8_bad_test(void);
int kv_int8_bad_cases(void);

#endif
