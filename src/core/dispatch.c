/*
 * Runtime dispatch: detect once (pthread_once), then publish one atomic pointer to the active
 * table. The tables themselves are constant data in each ISA folder. ATTN_ISA is read once.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static uint32_t cpu_features;
static _Atomic(const struct attn_ukernels *) active;

static const struct attn_ukernels *const tables[ATTN_ISA_COUNT] = {
    [ATTN_ISA_SCALAR] = &attn_ukernels_scalar,
    [ATTN_ISA_AVX2] = &attn_ukernels_avx2,
    [ATTN_ISA_NEON] = &attn_ukernels_neon,
};

static int is_path(attn_isa isa) { return isa > ATTN_ISA_AUTO && isa < ATTN_ISA_COUNT; }

/* Can the path run here, and is it the CPU's own instruction set? */
static int runnable(attn_isa isa, uint32_t cpu, int *native) {
  int run = 0, nat = 0;
  (void)cpu; /* only x86 and 32-bit Arm consult it */
  switch (isa) {
    case ATTN_ISA_SCALAR:
      run = 1;
      nat = 1;
      break;
    case ATTN_ISA_AVX2:
#if defined(__x86_64__) || defined(__i386__)
      run = nat = (cpu & ATTN_CPU_X86_AVX2_FMA) != 0; /* built with -mavx2 -mfma */
#else
      run = 1; /* SIMDe's portable implementation */
#endif
      break;
    case ATTN_ISA_NEON:
#if defined(__aarch64__)
      run = nat = 1;
#elif defined(__arm__)
      run = nat = (cpu & ATTN_CPU_ARM_NEON) != 0; /* built with -mfpu=neon-vfpv4 */
#else
      run = 1; /* SIMDe's emulation (SSE2 on x86) */
#endif
      break;
    default:
      break;
  }
  if (native) *native = run && nat;
  return run;
}

static attn_isa best_native(uint32_t cpu) {
  for (int i = ATTN_ISA_COUNT - 1; i > ATTN_ISA_AUTO; i--) {
    int nat;
    if (runnable((attn_isa)i, cpu, &nat) && nat) return (attn_isa)i;
  }
  return ATTN_ISA_SCALAR;
}

static void init_all(void) {
  cpu_features = attn_cpu_features();
  attn_isa pick = best_native(cpu_features);
  const char *env = getenv("ATTN_ISA");
  if (env && *env && strcmp(env, "auto") != 0) pick = attn_isa_from_name(env);
  const struct attn_ukernels *t = (is_path(pick) && runnable(pick, cpu_features, NULL)) ? tables[pick] : NULL;
  atomic_store_explicit(&active, t, memory_order_release);
}

const struct attn_ukernels *attn_dispatch(void) {
  pthread_once(&init_once, init_all);
  return atomic_load_explicit(&active, memory_order_acquire);
}

const struct attn_ukernels *attn_ukernels_for(attn_isa isa) {
  pthread_once(&init_once, init_all);
  if (isa == ATTN_ISA_AUTO) isa = best_native(cpu_features);
  return is_path(isa) && runnable(isa, cpu_features, NULL) ? tables[isa] : NULL;
}

const char *attn_isa_name(attn_isa isa) {
  switch (isa) {
    case ATTN_ISA_NONE: return "none";
    case ATTN_ISA_AUTO: return "auto";
    case ATTN_ISA_SCALAR: return "scalar";
    case ATTN_ISA_AVX2: return "avx2";
    case ATTN_ISA_NEON: return "neon";
    default: return "unknown";
  }
}

attn_isa attn_isa_from_name(const char *name) {
  if (!name) return ATTN_ISA_NONE;
  for (int i = ATTN_ISA_AUTO; i < ATTN_ISA_COUNT; i++)
    if (strcmp(name, attn_isa_name((attn_isa)i)) == 0) return (attn_isa)i;
  return ATTN_ISA_NONE;
}

int attn_isa_available(attn_isa isa, int *is_native) {
  pthread_once(&init_once, init_all);
  if (isa == ATTN_ISA_AUTO) {
    if (is_native) *is_native = 1;
    return 1;
  }
  if (!is_path(isa)) {
    if (is_native) *is_native = 0;
    return 0;
  }
  return runnable(isa, cpu_features, is_native);
}

attn_status attn_isa_set(attn_isa isa) {
  pthread_once(&init_once, init_all);
  if (isa != ATTN_ISA_AUTO && !is_path(isa)) return ATTN_E_BAD_ARGUMENT;
  if (isa == ATTN_ISA_AUTO) isa = best_native(cpu_features);
  if (!runnable(isa, cpu_features, NULL)) return ATTN_E_UNSUPPORTED_ISA;
  atomic_store_explicit(&active, tables[isa], memory_order_release);
  return ATTN_OK;
}

attn_isa attn_isa_get(void) {
  const struct attn_ukernels *t = attn_dispatch();
  return t ? t->isa : ATTN_ISA_NONE;
}
