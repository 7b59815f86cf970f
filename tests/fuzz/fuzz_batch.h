/* The batch target's variants defined outside fuzz_batch.c, which draws which one an input runs. */
#ifndef ATTN_FUZZ_BATCH_H
#define ATTN_FUZZ_BATCH_H

#include "fuzz_common.h"

/* Batched steps of selective caches (fuzz_selcache_batch.c). */
void fb_selcache(fz_in *in);

#endif
