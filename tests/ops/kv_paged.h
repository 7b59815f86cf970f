/* Batched and paged softmax tests (kv_paged.c), run by the kv_half executable: each Check test
 * and its loop count. */
#ifndef ATTN_TEST_KV_PAGED_H
#define ATTN_TEST_KV_PAGED_H

#include <check.h>

const TTest *kv_paged_batch_test(void);
int kv_paged_batch_cases(void);
const TTest *kv_paged_bad_test(void);
int kv_paged_bad_cases(void);

#endif
