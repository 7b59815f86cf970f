/*
 * baseline_onednn.c: naive softmax attention through oneDNN (C API), the kind of library CPU
 * inference stacks use; its JIT picks the ISA (AVX-512, AVX2, ...) at run time.
 *
 * Per query head: S = scale Q K^T (matmul primitive, the scale as an output scale), the mask of
 * causal and windowed variants (a plain loop setting the scores of invisible keys to -inf), the
 * softmax primitive (accurate) in place over each row, O = P V (matmul primitive). Q, K, V and O
 * are read and written in place through strided memory descriptors (one head's columns).
 * Primitives, memory objects and the scratchpads (user mode, so no execution allocates) are made
 * in the call's setup, outside the timed loop; a call only points the memory objects at the
 * head's columns and executes.
 *
 * One thread: oneDNN sizes its work by its runtime's thread count at primitive creation and at
 * execution. With the OpenMP runtime (Debian's build) that is the calling thread's OpenMP
 * nthreads-var, so both the creating and the executing thread set it to 1 (omp_set_num_threads
 * affects only the calling thread, and the bench runs --threads T calls on T threads of its own).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "bench_config.h"

#if defined(ATTN_BENCH_HAVE_ONEDNN)
#include <dnnl.h>
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

/* One thread for oneDNN calls made from the calling thread. */
static void one_thread(void) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  omp_set_num_threads(bench_call_workers);
#endif
}

enum { MEM_Q, MEM_KT, MEM_S, MEM_V, MEM_O, MEM_COUNT };
enum { PRIM_QK, PRIM_SOFTMAX, PRIM_PV, PRIM_COUNT };
#define MAX_ARGS 4

typedef struct onednn_call {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  dnnl_memory_t mem[MEM_COUNT];
  dnnl_primitive_t prim[PRIM_COUNT];
  dnnl_memory_t scratchpad[PRIM_COUNT]; /* NULL where a primitive needs none */
  dnnl_exec_arg_t args[PRIM_COUNT][MAX_ARGS];
  int nargs[PRIM_COUNT];
} onednn_call;

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "any (no x86 ISA limit)";
  }
}

void bench_onednn_describe(bench_baseline_info *info) {
  const dnnl_version_t *v = dnnl_version();
  one_thread();
  info->available = 1;
  snprintf(info->ran_on, sizeof info->ran_on, "oneDNN %d.%d.%d, effective ISA %s, %s runtime, 1 thread", v->major,
           v->minor, v->patch, isa_name(dnnl_get_effective_cpu_isa()),
           DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP ? "OpenMP" : "sequential");
}

/* A row-major matrix view: dims rows x cols, the given row and column strides (in floats). */
static dnnl_memory_desc_t matrix(size_t rows, size_t cols, size_t row_stride, size_t col_stride) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {(dnnl_dim_t)rows, (dnnl_dim_t)cols};
  const dnnl_dims_t strides = {(dnnl_dim_t)row_stride, (dnnl_dim_t)col_stride};
  if (dnnl_memory_desc_init_by_strides(&md, 2, dims, dnnl_f32, strides) != dnnl_success) memset(&md, 0, sizeof md);
  return md;
}

/* The primitive of op_desc with a user scratchpad (and an output scale unless scale is 0), and
 * its execution arguments: in, weights (NULL for softmax), out. */
static dnnl_status_t make_primitive(onednn_call *c, int which, const void *op_desc, float scale, dnnl_memory_t in,
                                    dnnl_memory_t weights, dnnl_memory_t out) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t st = dnnl_primitive_attr_create(&attr);
  if (st == dnnl_success) st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success && scale != 0) st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale);
  if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, op_desc, attr, c->engine, NULL);
  if (st == dnnl_success) st = dnnl_primitive_create(&c->prim[which], pd);
  const dnnl_memory_desc_t *pad =
      st == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
  if (pad && dnnl_memory_desc_get_size(pad) > 0)
    st = dnnl_memory_create(&c->scratchpad[which], pad, c->engine, DNNL_MEMORY_ALLOCATE);
  dnnl_exec_arg_t *a = c->args[which];
  int n = 0;
  a[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, in};
  if (weights) a[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, weights};
  a[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, out};
  if (c->scratchpad[which]) a[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, c->scratchpad[which]};
  c->nargs[which] = n;
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  return st;
}

static int onednn_setup(bench_work *w, char *err, size_t errlen) {
  const bench_shape *s = &w->s;
  if (bench_baseline_scratch(w, err, errlen)) return -1;
  onednn_call *c = bench_work_impl(w, sizeof *c, err, errlen);
  if (!c) return -1;
  one_thread();
  /* One head's columns of Q, K^T (a transposed view of K), V and O, and the dense scores. */
  const dnnl_memory_desc_t md[MEM_COUNT] = {
      [MEM_Q] = matrix(s->n_q, s->d, s->h_q * s->d, 1),   [MEM_KT] = matrix(s->d, s->n_kv, 1, s->h_kv * s->d),
      [MEM_S] = matrix(s->n_q, s->n_kv, s->n_kv, 1),      [MEM_V] = matrix(s->n_kv, s->dv, s->h_kv * s->dv, 1),
      [MEM_O] = matrix(s->n_q, s->dv, s->h_q * s->dv, 1),
  };
  void *const data[MEM_COUNT] = {w->q, w->k, w->scratch, w->v, w->o};
  dnnl_status_t st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
  if (st == dnnl_success) st = dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags);
  for (int i = 0; i < MEM_COUNT && st == dnnl_success; i++)
    st = dnnl_memory_create(&c->mem[i], &md[i], c->engine, data[i]);
  dnnl_matmul_desc_t qk, pv;
  dnnl_softmax_v2_desc_t sm;
  if (st == dnnl_success) st = dnnl_matmul_desc_init(&qk, &md[MEM_Q], &md[MEM_KT], NULL, &md[MEM_S]);
  if (st == dnnl_success)
    st = make_primitive(c, PRIM_QK, &qk, 1.0f / sqrtf((float)s->d), c->mem[MEM_Q], c->mem[MEM_KT], c->mem[MEM_S]);
  if (st == dnnl_success)
    st = dnnl_softmax_v2_forward_desc_init(&sm, dnnl_forward_inference, dnnl_softmax_accurate, &md[MEM_S], &md[MEM_S],
                                           1);
  if (st == dnnl_success) st = make_primitive(c, PRIM_SOFTMAX, &sm, 0, c->mem[MEM_S], NULL, c->mem[MEM_S]);
  if (st == dnnl_success) st = dnnl_matmul_desc_init(&pv, &md[MEM_S], &md[MEM_V], NULL, &md[MEM_O]);
  if (st == dnnl_success) st = make_primitive(c, PRIM_PV, &pv, 0, c->mem[MEM_S], c->mem[MEM_V], c->mem[MEM_O]);
  if (st != dnnl_success) {
    snprintf(err, errlen, "oneDNN setup failed (status %d)", (int)st);
    return -1;
  }
  return 0;
}

/* Scores of keys query i cannot see become -inf, so the softmax gives them weight 0. */
static void mask_scores(float *scores, const bench_shape *s) {
  for (size_t i = 0; i < s->n_q; i++) {
    size_t lo = s->n_kv, hi = 0; /* kept when query i sees no key: the whole row */
    bench_visible_range(s->n_q, s->n_kv, s->window_left, s->window_right, i, &lo, &hi);
    float *row = scores + i * s->n_kv;
    for (size_t j = 0; j < lo; j++) row[j] = -INFINITY;
    for (size_t j = hi + 1; j < s->n_kv; j++) row[j] = -INFINITY;
  }
}

static void onednn_run(bench_work *w) {
  const bench_shape *s = &w->s;
  onednn_call *c = w->impl;
  const size_t group = s->h_q / s->h_kv;
  const int masked = s->window_left != ATTN_UNBOUNDED || s->window_right != ATTN_UNBOUNDED;
  dnnl_status_t st = dnnl_success;
  one_thread();
  for (size_t h = 0; h < s->h_q && st == dnnl_success; h++) {
    const size_t g = h / group;
    dnnl_memory_set_data_handle(c->mem[MEM_Q], w->q + h * s->d);
    dnnl_memory_set_data_handle(c->mem[MEM_KT], w->k + g * s->d);
    dnnl_memory_set_data_handle(c->mem[MEM_V], w->v + g * s->dv);
    dnnl_memory_set_data_handle(c->mem[MEM_O], w->o + h * s->dv);
    st = dnnl_primitive_execute(c->prim[PRIM_QK], c->stream, c->nargs[PRIM_QK], c->args[PRIM_QK]);
    if (masked && st == dnnl_success) {
      dnnl_stream_wait(c->stream);
      mask_scores(w->scratch, s);
    }
    for (int p = PRIM_SOFTMAX; p <= PRIM_PV && st == dnnl_success; p++)
      st = dnnl_primitive_execute(c->prim[p], c->stream, c->nargs[p], c->args[p]);
  }
  if (st == dnnl_success) st = dnnl_stream_wait(c->stream);
  if (st != dnnl_success && !w->failure) w->failure = "a oneDNN primitive failed";
}

/* The struct itself is w->impl, which work.c frees. */
static void onednn_teardown(bench_work *w) {
  onednn_call *c = w->impl;
  if (!c) return;
  for (int p = 0; p < PRIM_COUNT; p++) {
    dnnl_primitive_destroy(c->prim[p]);
    dnnl_memory_destroy(c->scratchpad[p]);
  }
  for (int i = 0; i < MEM_COUNT; i++) dnnl_memory_destroy(c->mem[i]);
  dnnl_stream_destroy(c->stream);
  dnnl_engine_destroy(c->engine);
}

const bench_call bench_onednn_call = {onednn_setup, onednn_run, onednn_teardown, NULL};

#else /* built without oneDNN: never called beyond describe (its rows are skipped) */

void bench_onednn_describe(bench_baseline_info *info) {
  info->available = 0;
  snprintf(info->absent, sizeof info->absent, "oneDNN %s", ATTN_BENCH_ONEDNN_ABSENT);
}
static int onednn_absent(bench_work *w, char *err, size_t errlen) {
  (void)w;
  snprintf(err, errlen, "built without oneDNN");
  return -1;
}
const bench_call bench_onednn_call = {onednn_absent, NULL, NULL, NULL};

#endif
