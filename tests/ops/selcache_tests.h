/* The tests the selective_cache executable runs beside its own: batches of caches stepped in one
 * call (selcache_batch.c), row i (0: the batch, 1: its bad input) of the executable's list. */
#ifndef ATTN_TEST_SELCACHE_TESTS_H
#define ATTN_TEST_SELCACHE_TESTS_H

#include "harness.h"

tu_entry selcache_batch_row(size_t i);

#endif
