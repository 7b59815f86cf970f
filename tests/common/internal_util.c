/* Shared state of the white-box suites: see internal_util.h. */
#include "internal_util.h"

const struct attn_ukernels *uk;
tu_rng rng;

float frand(void) { return tu_rng_range(&rng, -1.0f, 1.0f); }

float *galloc(size_t n) { return tu_alloc(n * sizeof(float), 0); }

void gcheck_free(float *p) {
  tu_assert_guards("kernel output", p);
  tu_free(p);
}

void ti_setup(attn_isa active) {
  uk = attn_ukernels_for(active); /* not NULL: tu_main checked that the path runs here */
  tu_rng_seed(&rng, 1);
}
