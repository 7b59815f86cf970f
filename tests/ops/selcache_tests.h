/* The tests the selective_cache executable runs beside its own: batches of caches stepped in one
 * call (selcache_batch.c), each Check test and its loop count. */
#ifndef ATTN_TEST_SELCACHE_TESTS_H
#define ATTN_TEST_SELCACHE_TESTS_H

#include <check.h>

const TTest *selcache_batch_test(void);
int selcache_batch_cases(void);
const TTest *selcache_batch_bad_test(void);
int selcache_batch_bad_cases(void);

#endif
