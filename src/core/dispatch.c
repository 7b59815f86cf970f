/*
 * Runtime dispatch: detect once (pthread_once), build every path's table (plain stores, no path's
 * code runs), then publish one atomic pointer to the active table. ATTN_ISA is read once. The
 * paths, their names, detection and preference order all come from the ISA list (isa_list.h,
 * written by Meson from the top-level meson.build).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "isa_list.h"

/* The list and the public enum (include/attn.h) agree: every listed ID is an attn_isa value in
 * 1 .. ATTN_ISA_COUNT-1 (and distinct: attn_isa_name switches on them), and there are
 * ATTN_ISA_COUNT-1 of them. */
#define ATTN_ISA_IN_RANGE_(name, ID, host, cpu)                                   \
  _Static_assert(ATTN_ISA_##ID > ATTN_ISA_AUTO && ATTN_ISA_##ID < ATTN_ISA_COUNT, \
                 "ATTN_ISA_" #ID " is not a path id of enum attn_isa");
ATTN_ISA_LIST(ATTN_ISA_IN_RANGE_)
#define ATTN_ISA_ONE_(name, ID, host, cpu) +1
_Static_assert(0 ATTN_ISA_LIST(ATTN_ISA_ONE_) == ATTN_ISA_COUNT - 1,
               "the ISA list (meson.build) and enum attn_isa (include/attn.h) differ");

/* Host families of the list: where a path is native, its kernels were built with its flags. */
#define ATTN_HOST_any  1
#define ATTN_HOST_none 0 /* emulation builds (-Dsimde_no_native=true): native nowhere */
#if defined(__x86_64__) || defined(__i386__)
#define ATTN_HOST_x86 1
#else
#define ATTN_HOST_x86 0
#endif
#if defined(__aarch64__) || defined(__arm__)
#define ATTN_HOST_arm 1
#else
#define ATTN_HOST_arm 0
#endif

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static uint32_t cpu_features;
static struct attn_ukernels tables[ATTN_ISA_COUNT];
static _Atomic(const struct attn_ukernels *) active;
/* Why ATTN_ISA left no path active (for attn_fail_isa): its value, and 1 when it names no path,
 * 2 when it names one this CPU cannot run. Written once, inside init_all. */
static char env_value[40];
static int env_refused;

static int is_path(attn_isa isa) { return isa > ATTN_ISA_AUTO && isa < ATTN_ISA_COUNT; }

/* Can the path run here, and is it the CPU's own instruction set? A native path runs where the
 * CPU has its feature bits; an emulated one (SIMDe, built without the path's flags) runs anywhere. */
static int runnable(attn_isa isa, uint32_t cpu, int *native) {
  int run = 0, nat = 0;
  switch (isa) {
#define ATTN_ISA_RUNNABLE_(name, ID, host, bits) \
  case ATTN_ISA_##ID:                            \
    nat = ATTN_HOST_##host;                      \
    run = !nat || (cpu & (bits)) == (bits);      \
    break;
    ATTN_ISA_LIST(ATTN_ISA_RUNNABLE_)
    default:
      break;
  }
  if (native) *native = run && nat;
  return run;
}

/* The last path of the list (its preference order) that runs natively; scalar always does. */
static attn_isa best_native(uint32_t cpu) {
  attn_isa best = ATTN_ISA_SCALAR;
  int nat;
#define ATTN_ISA_PREFER_(name, ID, host, cpu_bits) \
  if (runnable(ATTN_ISA_##ID, cpu, &nat) && nat) best = ATTN_ISA_##ID;
  ATTN_ISA_LIST(ATTN_ISA_PREFER_)
  return best;
}

static void init_all(void) {
#define ATTN_ISA_TABLE_(name, ID, host, cpu) attn_ukernels_init(&tables[ATTN_ISA_##ID], ATTN_ISA_##ID);
  ATTN_ISA_LIST(ATTN_ISA_TABLE_)
  cpu_features = attn_cpu_features();
#define ATTN_ISA_TUNE_(name, ID, host, cpu) attn_ukernels_tune(&tables[ATTN_ISA_##ID], cpu_features);
  ATTN_ISA_LIST(ATTN_ISA_TUNE_)
  attn_isa pick = best_native(cpu_features);
  const char *env = getenv("ATTN_ISA");
  if (env && *env && strcmp(env, "auto") != 0) pick = attn_isa_from_name(env);
  const struct attn_ukernels *t = (is_path(pick) && runnable(pick, cpu_features, NULL)) ? &tables[pick] : NULL;
  if (!t) {
    env_refused = is_path(pick) ? 2 : 1;
    snprintf(env_value, sizeof env_value, "%s", env);
  }
  atomic_store_explicit(&active, t, memory_order_release);
}

attn_status attn_fail_isa(void) {
  if (env_refused == 1) { /* every name ATTN_ISA takes, in path id order, then auto */
    char names[128] = "";
    for (int i = ATTN_ISA_AUTO + 1; i < ATTN_ISA_COUNT; i++) {
      strncat(names, attn_isa_name((attn_isa)i), sizeof names - strlen(names) - 1);
      strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    return attn_fail(ATTN_E_UNSUPPORTED_ISA, "ATTN_ISA=%s: not a path name (%sauto)", env_value, names);
  }
  if (env_refused == 2)
    return attn_fail(ATTN_E_UNSUPPORTED_ISA, "ATTN_ISA=%s: this CPU cannot run that path", env_value);
  return attn_fail(ATTN_E_UNSUPPORTED_ISA, "no ISA path is active");
}

const struct attn_ukernels *attn_dispatch(void) {
  pthread_once(&init_once, init_all);
  return atomic_load_explicit(&active, memory_order_acquire);
}

const struct attn_ukernels *attn_ukernels_for(attn_isa isa) {
  pthread_once(&init_once, init_all);
  if (isa == ATTN_ISA_AUTO) isa = best_native(cpu_features);
  return is_path(isa) && runnable(isa, cpu_features, NULL) ? &tables[isa] : NULL;
}

const char *attn_isa_name(attn_isa isa) {
  switch (isa) {
    case ATTN_ISA_NONE:
      return "none";
    case ATTN_ISA_AUTO:
      return "auto";
#define ATTN_ISA_NAME_(name, ID, host, cpu) \
  case ATTN_ISA_##ID:                       \
    return #name;
      ATTN_ISA_LIST(ATTN_ISA_NAME_)
    default:
      return "unknown";
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
  if (isa != ATTN_ISA_AUTO && !is_path(isa))
    return attn_fail(ATTN_E_BAD_ARGUMENT, "isa %d: not ATTN_ISA_AUTO or a path id (1 .. %d)", (int)isa,
                     ATTN_ISA_COUNT - 1);
  if (isa == ATTN_ISA_AUTO) isa = best_native(cpu_features);
  if (!runnable(isa, cpu_features, NULL))
    return attn_fail(ATTN_E_UNSUPPORTED_ISA, "isa %s: this CPU cannot run that path", attn_isa_name(isa));
  atomic_store_explicit(&active, &tables[isa], memory_order_release);
  return ATTN_OK;
}

attn_isa attn_isa_get(void) {
  const struct attn_ukernels *t = attn_dispatch();
  return t ? t->isa : ATTN_ISA_NONE;
}
