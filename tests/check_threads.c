/*
 * Concurrency (run under ThreadSanitizer by `scripts/test-all.sh tsan`, and plainly elsewhere).
 *
 * first_use: threads released at once make the process's first library calls (dispatch is
 *   initialised by whichever wins); every call succeeds, all see the same active path, the path
 *   ATTN_ISA asks for (a native one when unset), and their results equal a later call's bit for
 *   bit. It needs a process that has not called the library yet: Check forks each test from a
 *   parent that never calls it (with CK_FORK=no it relies on being the first test).
 * isa_switch: worker threads run softmax, merge and linear (each with its own outputs, workspace
 *   and state, shared read-only inputs) while another thread keeps switching the ISA path with
 *   attn_isa_set across every runnable path and reads attn_isa_get. Every call returns ATTN_OK
 *   and its outputs equal, bit for bit, those precomputed on one of the runnable paths (paths
 *   differ in rounding; a call runs on one path).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { N = 45, HQ = 4, HKV = 2, D = 24, DV = 20, ROWS = N * HQ, PARTS = 3, WORKERS = 3, WS = 1 << 20 };
enum { OP_SOFTMAX, OP_MERGE, OP_LINEAR, OPS };

/* Outputs of one operation: o, then lse (softmax, merge) or the state (linear). */
enum { O_FLOATS = ROWS * DV, AUX_FLOATS = HKV * D * (DV + 2) }; /* the state: L = HKV heads of D rows of DV + 2 */
typedef struct outputs {
  float o[O_FLOATS];
  float aux[AUX_FLOATS];
} outputs;

/* Shared read-only inputs. */
static tu_qkv g_x;
static float *g_parts[PARTS], *g_lses[PARTS];

static void make_inputs(void) {
  tu_rng rng = tu_rng_of(7);
  tu_qkv_make(&g_x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, D, DV);
  for (int c = 0; c < PARTS; ++c) {
    g_parts[c] = malloc(sizeof(float) * O_FLOATS);
    g_lses[c] = malloc(sizeof(float) * ROWS);
    ck_assert(g_parts[c] && g_lses[c]);
    for (int e = 0; e < O_FLOATS; ++e) g_parts[c][e] = tu_rng_range(&rng, -1.0f, 1.0f);
    for (int r = 0; r < ROWS; ++r) g_lses[c][r] = tu_rng_range(&rng, -5.0f, 5.0f);
  }
}

static void free_inputs(void) {
  tu_qkv_free(&g_x);
  for (int c = 0; c < PARTS; ++c) {
    free(g_parts[c]);
    free(g_lses[c]);
  }
}

/* One operation on the active path; out: outputs (zeroed first), ws: WS bytes of workspace. */
static attn_status run_op(int op, outputs *out, void *ws) {
  memset(out, 0, sizeof *out);
  switch (op) {
    case OP_SOFTMAX: {
      attn_softmax_desc d;
      attn_softmax_desc_init(&d, N, N, HQ, HKV, D, DV);
      d.mask = attn_mask_causal();
      return attn_softmax(&d, g_x.q.data, g_x.k.data, g_x.v.data, out->o, out->aux, ws, WS);
    }
    case OP_MERGE:
      return attn_softmax_merge(ROWS, DV, PARTS, (const float *const *)g_parts, DV, (const float *const *)g_lses, 1,
                                out->o, DV, out->aux, 1);
    default: {
      attn_linear_desc d;
      attn_linear_desc_init(&d, N, N, HQ, HKV, D, DV, ATTN_FEATURE_ELU1);
      attn_linear_state s;
      const attn_status st = attn_linear_state_init(&s, &d, out->aux, sizeof out->aux);
      return st != ATTN_OK ? st : attn_linear(&d, g_x.q.data, g_x.k.data, g_x.v.data, out->o, &s, ws, WS);
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* First use                                                                                   */
/* ------------------------------------------------------------------------------------------ */
typedef struct first_arg {
  pthread_barrier_t *start;
  int op;
  attn_status status;
  attn_isa isa;
  outputs out;
  void *ws;
} first_arg;

static void *first_call(void *p) {
  first_arg *a = p;
  pthread_barrier_wait(a->start);
  if (a->op == OPS)
    a->isa = attn_isa_get(); /* one thread only asks for the path */
  else
    a->status = run_op(a->op, &a->out, a->ws);
  if (a->op != OPS) a->isa = attn_isa_get();
  return NULL;
}

START_TEST(first_use) {
  enum { T = OPS + 1 };
  make_inputs();
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, T);
  first_arg *args = calloc(T, sizeof *args);
  ck_assert_ptr_nonnull(args);
  pthread_t th[T];
  for (int i = 0; i < T; ++i) {
    args[i] = (first_arg){&start, i, ATTN_OK, ATTN_ISA_NONE, {{0}, {0}}, tu_alloc(WS, 0)};
    ck_assert_int_eq(pthread_create(&th[i], NULL, first_call, &args[i]), 0);
  }
  for (int i = 0; i < T; ++i) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
  pthread_barrier_destroy(&start);
  attn_isa active;
  ck_assert_msg(tu_setup_isa(&active) == 0, "the path after a racing first use is not the one ATTN_ISA asks for");
  outputs *again = malloc(sizeof *again);
  ck_assert_ptr_nonnull(again);
  for (int i = 0; i < T; ++i) {
    ck_assert_int_eq(args[i].isa, active);
    if (i == OPS) continue;
    ck_assert_int_eq(args[i].status, ATTN_OK);
    ck_assert_int_eq(run_op(i, again, args[i].ws), ATTN_OK);
    tu_assert_same_bits("first-use result vs a later call", &args[i].out, again, sizeof *again);
  }
  for (int i = 0; i < T; ++i) tu_free(args[i].ws);
  free(again);
  free(args);
  free_inputs();
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Calls while the ISA path switches                                                          */
/* ------------------------------------------------------------------------------------------ */
static attn_isa g_paths[ATTN_ISA_COUNT];
static int g_npaths;
static outputs *g_expected;           /* [path][op] */
static atomic_int g_stop, g_switched; /* g_switched: the switcher has switched once */

typedef struct worker {
  int iters, id;
  int calls, bad_status, mismatches; /* results, checked by the main thread */
} worker;

static void *work(void *p) {
  worker *w = p;
  outputs *out = malloc(sizeof *out);
  void *ws = tu_alloc(WS, 0);
  for (int it = 0; out && it < w->iters; ++it) {
    const int op = (it + w->id) % OPS;
    const attn_status st = run_op(op, out, ws);
    ++w->calls;
    if (st != ATTN_OK) {
      ++w->bad_status;
      continue;
    }
    int match = 0;
    for (int p = 0; p < g_npaths && !match; ++p) match = memcmp(out, &g_expected[p * OPS + op], sizeof *out) == 0;
    w->mismatches += !match;
  }
  free(out);
  tu_free(ws);
  return NULL;
}

typedef struct switcher {
  long switches, bad;
} switcher;

static void *switch_paths(void *p) {
  switcher *s = p;
  for (long i = 0; !atomic_load(&g_stop); ++i) {
    if (attn_isa_set(g_paths[i % g_npaths]) != ATTN_OK) ++s->bad;
    const attn_isa now = attn_isa_get();
    int known = 0;
    for (int k = 0; k < g_npaths; ++k) known |= now == g_paths[k];
    s->bad += !known;
    ++s->switches;
    atomic_store(&g_switched, 1);
  }
  return NULL;
}

START_TEST(isa_switch) {
  make_inputs();
  g_npaths = 0;
  for (int i = ATTN_ISA_AUTO + 1; i < ATTN_ISA_COUNT; ++i)
    if (attn_isa_available((attn_isa)i, NULL)) g_paths[g_npaths++] = (attn_isa)i;
  ck_assert_int_gt(g_npaths, 0);
  g_expected = malloc(sizeof *g_expected * (size_t)g_npaths * OPS);
  void *ws = tu_alloc(WS, 0);
  ck_assert_ptr_nonnull(g_expected);
  for (int p = 0; p < g_npaths; ++p) {
    ck_assert_int_eq(attn_isa_set(g_paths[p]), ATTN_OK);
    for (int op = 0; op < OPS; ++op) ck_assert_int_eq(run_op(op, &g_expected[p * OPS + op], ws), ATTN_OK);
  }
  tu_free(ws);

  const int iters = tu_small() ? 6 : 150;
  worker w[WORKERS];
  switcher s = {0, 0};
  pthread_t th[WORKERS], sw;
  atomic_store(&g_stop, 0);
  atomic_store(&g_switched, 0);
  ck_assert_int_eq(pthread_create(&sw, NULL, switch_paths, &s), 0);
  while (!atomic_load(&g_switched)) sched_yield(); /* on a loaded machine it might not run before the workers end */
  for (int i = 0; i < WORKERS; ++i) {
    w[i] = (worker){iters, i, 0, 0, 0};
    ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < WORKERS; ++i) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
  atomic_store(&g_stop, 1);
  ck_assert_int_eq(pthread_join(sw, NULL), 0);
  for (int i = 0; i < WORKERS; ++i) {
    ck_assert_int_eq(w[i].calls, iters);
    ck_assert_msg(w[i].bad_status == 0, "worker %d: %d calls did not return ATTN_OK", i, w[i].bad_status);
    ck_assert_msg(w[i].mismatches == 0, "worker %d: %d results match no path's", i, w[i].mismatches);
  }
  ck_assert_msg(s.bad == 0, "%ld ISA switches failed or read back an unknown path", s.bad);
  ck_assert_int_gt(s.switches, 0);
  free(g_expected);
  free_inputs();
}
END_TEST

int main(void) {
  Suite *s = suite_create("threads");
  TCase *tc = tu_tcase("threads");
  tcase_add_test(tc, first_use); /* first: with CK_FORK=no it must find the library unused */
  tcase_add_test(tc, isa_switch);
  suite_add_tcase(s, tc);
  return tu_run_suite(s); /* never calls the library: each forked test starts unused */
}
