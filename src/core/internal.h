/* Internal declarations shared by the ISA-independent drivers. Nothing here is public. */
#ifndef ATTN_CORE_INTERNAL_H
#define ATTN_CORE_INTERNAL_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "core/ukernels.h"

static inline size_t attn_min_sz(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t attn_max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The active micro-kernel table (built once); NULL when the forced path cannot run. */
ATTN_INTERNAL const struct attn_ukernels *attn_dispatch(void);
/* The table of one path, or NULL if the path is not runnable here (for white-box tests and bench). */
ATTN_INTERNAL const struct attn_ukernels *attn_ukernels_for(attn_isa isa);

/* CPU features, as bits: the ISA list (meson.build) names the bits each path needs, so a path
 * whose features are decoded here needs no code in the dispatcher. */
enum {
  ATTN_CPU_X86_AVX2_FMA = 1u << 0, /* AVX2 + FMA + F16C + OS-saved YMM state */
  ATTN_CPU_ARM_NEON = 1u << 1,
  ATTN_CPU_X86_AVX512 = 1u << 2, /* AVX-512 F, DQ, BW, VL + OS-saved ZMM and opmask state */
  ATTN_CPU_X86_AMD = 1u << 3     /* an AMD (or Hygon) core: tunings only (attn_ukernels_tune); no path needs it */
};
ATTN_INTERNAL uint32_t attn_cpu_features(void);
/* Pure decoder of recorded x86 CPUID/XGETBV values, unit-tested on real CPUs' values.
 * max_leaf: CPUID.0:EAX; leaf1_ecx: CPUID.1:ECX; leaf7_ebx: CPUID.(7,0):EBX; xcr0: XGETBV(0)
 * (only meaningful when OSXSAVE, leaf1_ecx bit 27, is set). */
ATTN_INTERNAL uint32_t attn_cpu_decode_x86(uint32_t max_leaf, uint32_t leaf1_ecx, uint32_t leaf7_ebx, uint64_t xcr0);
/* The vendor's bits (ATTN_CPU_X86_AMD or 0) from CPUID.0's EBX, EDX, ECX (its 12-byte name). */
ATTN_INTERNAL uint32_t attn_cpu_vendor_x86(uint32_t ebx, uint32_t edx, uint32_t ecx);

/* ---- error details (attn_last_error; src/core/status.c, validate.c, dispatch.c) ----
 * A failing check returns attn_fail(status, ...) or one of the helpers below, which write the
 * thread's detail (naming the argument or field, its value and what was expected) and return the
 * status. They are cold and called only on error branches: a successful call runs none of them
 * and leaves the detail as it is. */
#if defined(__GNUC__)
#define ATTN_COLD              __attribute__((cold, noinline))
#define ATTN_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define ATTN_COLD
#define ATTN_PRINTF(fmt, args)
#endif
/* The detail, printf-style (truncated to the buffer); returns st. */
ATTN_INTERNAL ATTN_COLD attn_status attn_fail(attn_status st, const char *fmt, ...) ATTN_PRINTF(2, 3);
/* Appends to the detail attn_fail wrote; returns st. */
ATTN_INTERNAL ATTN_COLD attn_status attn_fail_more(attn_status st, const char *fmt, ...) ATTN_PRINTF(2, 3);
/* ATTN_E_NULL_POINTER naming the first NULL of p (one at least is), whose names are the
 * space-separated words of names: attn_fail_null("q k v", (const void *[]){q, k, v}). */
ATTN_INTERNAL ATTN_COLD attn_status attn_fail_null(const char *names, const void *const *p);
/* ATTN_E_WORKSPACE_TOO_SMALL: "<what> <have> B < <need> B needed". */
ATTN_INTERNAL ATTN_COLD attn_status attn_fail_ws(const char *what, size_t have, size_t need);
/* Word i of space-separated names in *name; returns its length (the last word past the end). */
ATTN_INTERNAL size_t attn_name_at(const char *names, size_t i, const char **name);
/* Index of the first non-finite element of x[0 .. n), or n. */
ATTN_INTERNAL ATTN_COLD size_t attn_first_nonfinite(const float *x, size_t n);
/* ATTN_E_UNSUPPORTED_ISA, saying why no path is active (ATTN_ISA unknown, or not runnable). */
ATTN_INTERNAL ATTN_COLD attn_status attn_fail_isa(void);

/* ---- argument validation (src/core/validate.c) ---- */
/* Elements from a [rows x heads x width] tensor's first element to one past its last, any strides
 * (0 broadcasts); ATTN_E_SIZE_OVERFLOW past PTRDIFF_MAX bytes of floats. */
ATTN_INTERNAL attn_status attn_layout_span(size_t rows, size_t heads, size_t width, attn_layout l, size_t *span);
/* A [rows x heads x width] tensor: element span (one past the last element) in *span. */
ATTN_INTERNAL attn_status attn_check_input(size_t rows, size_t heads, size_t width, attn_layout l, size_t *span);
/* As above, and the layout must not overlap itself. */
ATTN_INTERNAL attn_status attn_check_output(size_t rows, size_t heads, size_t width, attn_layout l, size_t *span);
/* These two checks set no detail (some callers only want a validated span): on their failure st,
 * the caller's error branch describes it, naming the tensor (name, e.g. "shape.k") and its row
 * width (wname, e.g. "d"; NULL: the width alone). Returns st. */
ATTN_INTERNAL ATTN_COLD attn_status attn_fail_layout(attn_status st, const char *name, const char *wname, size_t rows,
                                                     size_t heads, size_t width, attn_layout l);
/* Element spans of a shape's tensors and its output heads H = max(h_q, h_k, h_v). */
typedef struct attn_spans {
  size_t q, k, v, o, H;
  size_t kv_elem;        /* bytes of one K or V element (shape.kv_type) */
  size_t q_elem, o_elem; /* bytes of one q and one o element (shape.q_type, o_type) */
} attn_spans;
#define ATTN_Q8_0_BLOCK_BYTES 34
/* Bytes of one element of a K/V type (a q8_0 element is a block of 32 values); 0 for an unknown one. */
static inline size_t attn_dtype_size(attn_dtype t) {
  return t == ATTN_F32                       ? sizeof(float)
         : (t == ATTN_F16 || t == ATTN_BF16) ? sizeof(uint16_t)
         : t == ATTN_I8                      ? 1
         : t == ATTN_Q8_0                    ? ATTN_Q8_0_BLOCK_BYTES
                                             : 0;
}
/* Bytes of one element of a query or output type (ATTN_F32, ATTN_F16, ATTN_BF16); 0 for another. */
static inline size_t attn_act_size(attn_dtype t) {
  return t == ATTN_F32 ? sizeof(float) : (t == ATTN_F16 || t == ATTN_BF16) ? sizeof(uint16_t) : 0;
}
/* ATTN_Q8_0: values per block and bytes per block (an fp16 scale, then the values). */
enum { ATTN_Q8_0_VALUES = 32 };
/* A row of w values in elements of the type: a q8_0 row is w / 32 blocks. */
static inline size_t attn_dtype_width(attn_dtype t, size_t w) { return t == ATTN_Q8_0 ? w / ATTN_Q8_0_VALUES : w; }
/* The validation every variant shares: sizes, the K/V type (known: ATTN_E_BAD_DTYPE otherwise),
 * the query and output types (fp32 or half: ATTN_E_BAD_DTYPE otherwise),
 * head counts dividing H, strides, spans. h_extra:
 * one more head count (a gate's) that joins H = max(h_q, h_k, h_v, h_extra), or 0. */
ATTN_INTERNAL attn_status attn_shape_check(const attn_shape *s, size_t h_extra, attn_spans *sp);

/* A CPU pause for a spinning wait (the pool's, the grouped scan's). */
static inline void attn_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}
/* Workers of a call's threads (1 without). */
ATTN_INTERNAL size_t attn_workers(const attn_threads *th);
/* fn(ctx, i, worker) for i in [0, tasks): in order on the calling thread as worker 0 without
 * threads, with one worker or one task; through th->parallel_for otherwise (core/pool.c). */
ATTN_INTERNAL void attn_parallel(const attn_threads *th, size_t tasks, attn_task_fn fn, void *ctx);
/* ATTN_E_ALIASING when one of the n_out outputs (NULL entries skipped; sizes in bytes; workspaces
 * and states count as outputs) overlaps q, k or v (spans sp; k and v in elements of sp->kv_elem
 * bytes) or another output. */
ATTN_INTERNAL attn_status attn_check_io(const attn_spans *sp, const void *q, const void *k, const void *v,
                                        void *const *out, const size_t *out_bytes, size_t n_out);
/* Its failure described: which output (names: the outputs', space-separated) overlaps which
 * input or output. Returns ATTN_E_ALIASING. */
ATTN_INTERNAL ATTN_COLD attn_status attn_fail_io(const char *names, const attn_spans *sp, const void *q, const void *k,
                                                 const void *v, void *const *out, const size_t *out_bytes,
                                                 size_t n_out);
/* ATTN_E_ALIASING when one of the n_in extra inputs (a call's arrays besides q, k and v: gates,
 * beta; NULL entries skipped; in_bytes each; names space-separated) overlaps one of the n_out
 * outputs (NULL entries skipped), naming both ("o overlaps input beta"); ATTN_OK otherwise. */
ATTN_INTERNAL attn_status attn_check_extra_inputs(const char *in_names, const void *const *in, const size_t *in_bytes,
                                                  size_t n_in, const char *out_names, void *const *out,
                                                  const size_t *out_bytes, size_t n_out);
/* 1 when the float ranges [a, a+na) and [b, b+nb) overlap. */
ATTN_INTERNAL int attn_overlap(const void *a, size_t na_bytes, const void *b, size_t nb_bytes);
/* Per-row statistics (attn.h, analysis): at least one array, a layout of n_q x heads single
 * floats that does not overlap itself, arrays not overlapping each other. *bytes: the span of
 * each array, for the caller's own aliasing checks against its inputs and outputs. */
ATTN_INTERNAL attn_status attn_row_stats_check(const attn_row_stats *s, size_t n_q, size_t heads, size_t *bytes);
/* A prefill's checkpoints (attn.h attn_checkpoints) over n tokens: NULL or count 0 (bytes 0), or
 * after and states non-NULL, after strictly increasing and below n; *bytes: count * state_bytes. */
ATTN_INTERNAL attn_status attn_check_checkpoints(const attn_checkpoints *ck, size_t n, size_t state_bytes,
                                                 size_t *bytes);
/* A compute call's required pointers (q, k, v, o, workspace: ATTN_E_NULL_POINTER naming the first
 * NULL) and its workspace (at least need bytes: ATTN_E_WORKSPACE_TOO_SMALL). */
ATTN_INTERNAL attn_status attn_check_call_memory(const void *q, const void *k, const void *v, const void *o,
                                                 const void *workspace, size_t workspace_size, size_t need);
/* Checked arithmetic: return 0 on overflow. */
static inline int attn_mul_ok(size_t a, size_t b, size_t *r) {
  if (a != 0 && b > SIZE_MAX / a) return 0;
  *r = a * b;
  return 1;
}
static inline int attn_add_ok(size_t a, size_t b, size_t *r) {
  if (b > SIZE_MAX - a) return 0;
  *r = a + b;
  return 1;
}

/* ---- non-finite values (the policy in attn.h: a row that uses one is NaN) ---- */
/* Bit 31 set when *p is NaN or infinite: integer arithmetic on the bits (an exponent of all ones
 * plus one exponent step carries into the sign bit), so OR-ing it over a loop vectorises without
 * -ffast-math. */
static inline uint32_t attn_nonfinite_bit_(const float *p) {
  uint32_t u;
  memcpy(&u, p, sizeof u);
  return (u & 0x7f800000u) + 0x00800000u;
}
/* 1 when every x[i], i < n, lies in [lo, hi] (NaN does not), in a loop that vectorises. */
static inline int attn_all_within(const float *restrict x, size_t n, float lo, float hi) {
  int ok = 1;
  for (size_t i = 0; i < n; i++) ok &= (x[i] >= lo) & (x[i] <= hi);
  return ok;
}
/* 1 when every element of a rows x cols block (row stride ld) is finite. */
static inline int attn_rows_finite(const float *x, size_t rows, size_t cols, size_t ld) {
  uint32_t any = 0;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) any |= attn_nonfinite_bit_(x + r * ld + c);
  return !(any & 0x80000000u);
}
static inline void attn_fill_nan(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = NAN;
}
/* o[i] = x[i] num / den in double, for a normalised row whose float factor num / den overflowed
 * (den subnormal: its reciprocal is past FLT_MAX) while the quotients may well fit a float. */
static inline void attn_row_div(size_t n, const float *x, double num, double den, float *o) {
  for (size_t i = 0; i < n; i++) o[i] = (float)((double)x[i] * num / den);
}

/* ---- workspace carving: regions of floats, each 64-byte aligned ---- */
typedef struct attn_ws {
  size_t floats; /* running total, in floats, of aligned regions */
  int overflow;
} attn_ws;
/* n floats rounded up to whole 64-byte lines (rows that start on a line never straddle two);
 * n <= SIZE_MAX - 15. */
static inline size_t attn_line_floats(size_t n) { return (n + 15) & ~(size_t)15; }
/* Reserve n floats (rounded to 16) and return the offset of the region, in floats. */
static inline size_t attn_ws_take(attn_ws *w, size_t n) {
  const size_t off = w->floats;
  size_t r;
  if (!attn_add_ok(n, 15, &r) || !attn_add_ok(off, r & ~(size_t)15, &w->floats)) w->overflow = 1;
  return off;
}
/* Bytes for a carved workspace (64 bytes of slack let any caller pointer be aligned up). */
static inline int attn_ws_bytes(const attn_ws *w, size_t *bytes) {
  size_t b;
  if (w->overflow || !attn_mul_ok(w->floats, sizeof(float), &b) || !attn_add_ok(b, 64, bytes)) return 0;
  return 1;
}
static inline float *attn_ws_base(void *workspace) { return (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63); }

#endif
