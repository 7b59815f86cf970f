/*
 * attn: SIMD-optimised CPU attention kernels.
 *
 * One public header. Every entry point validates its arguments and answers with an attn_status
 * (attn_last_error() then says which argument was wrong and why); the library never prints,
 * never aborts, never allocates on a compute path and never writes outside the buffers the
 * caller passes. This header is the whole contract: the conventions every variant shares are
 * below, and each variant's exact mathematics stands beside its functions.
 *
 * Conventions used throughout
 * ---------------------------
 * - Data is fp32, one row per token. Strides are in ELEMENTS (floats), never bytes. Every tensor
 *   is described by a row stride (between consecutive tokens of one head) and a head stride
 *   (between consecutive heads of one token). The default layout that the *_desc_init functions
 *   write is token-major, [n][H][d]: row stride H*d, head stride d. A packed QKV projection
 *   [n][3][H][d] is passed as q = buf, k = buf + H*d, v = buf + 2*H*d with row stride 3*H*d.
 * - Heads: h_q query heads, h_k key heads and h_v value heads (attn_shape); with GQA / MQA,
 *   h_k = h_v = H_kv divides h_q and query head h reads key/value head h / (h_q / H_kv).
 * - Causal alignment is bottom-right: query i sits at absolute position p_i = (n_kv - n_q) + i
 *   (PyTorch's is_causal is top-left, p_i = i: the two agree only when n_q = n_kv).
 *   Decode is n_q = 1 over a cache of n_kv rows; chunked prefill is 1 < n_q < n_kv. When
 *   n_q > n_kv the first n_q - n_kv queries have negative positions and see no key.
 * - Input strides: a row stride (when the count of rows is > 1) and a head stride (when the count
 *   of heads is > 1) must each be at least the row width (d for q and k, dv for v). Inputs may
 *   overlap one another (packed QKV). Outputs must describe a layout whose elements do not
 *   overlap: besides the rule above, when both counts are > 1, the larger of the two strides must
 *   be at least (count of the smaller-stride dimension - 1) x smaller stride + row width
 *   (ATTN_E_BAD_STRIDE otherwise). An output's address span must not overlap any input's span
 *   (ATTN_E_ALIASING).
 * - Non-finite values: a NaN or an infinity in an input that a row uses makes EVERY element of
 *   that row's output NaN, on every ISA path. A row uses q_i, and the k_j and v_j of every key j
 *   it can see; keys it cannot see (masked by causality or a window) never bring a NaN or an
 *   infinity into it, whatever they hold, and never change its bits, except with the exponential
 *   maps of linear attention, where they may move its last bits within rounding (see "Exact
 *   stabilisation"). Softmax: lse_i is NaN too when the value is in q_i or a visible k_j (v does not
 *   enter the LSE). Linear attention: a non-finite k or v poisons the state, so every later row
 *   (and decode step) that sees it is NaN; a non-finite incoming state makes every row NaN.
 *   Logits are formed in fp32: one that overflows to +-inf (|scale q.k| > 3.4e38) counts as
 *   non-finite.
 * - Thread safety: every compute function is reentrant and may be called concurrently from
 *   several threads as long as their output buffers, workspaces and states are distinct. The
 *   only global state is the ISA choice (attn_isa_set / ATTN_ISA), which is process-wide. One
 *   call can itself use several threads (attn_shape.threads, since 0.6.0): bit-identical results
 *   for any number of workers; see "Threads" below.
 * - Workspace: compute functions take caller-provided scratch memory; ask its size with the
 *   matching *_workspace_size function. Any alignment works; 64-byte alignment is fastest.
 *
 * Since 0.1.0 unless said otherwise; 0.1.1 made the non-finite policy hold on every path; 0.2.0
 * gave every descriptor one shape block (attn_shape) and one mask (attn_mask), and the linear
 * state its final layout (state heads for separate key/value head counts, per-feature offsets);
 * 0.3.0 added the linear family (exp, FAVOR+, dsoftmax, gates, windows); 0.4.0 windows for the
 * exponential maps; 0.5.0 the AVX-512 path and the analysis; 0.6.0 multi-threaded calls.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ATTN_STATIC_DEFINE) || !defined(__GNUC__)
#define ATTN_API
#else
#define ATTN_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */
#define ATTN_VERSION_MAJOR  0
#define ATTN_VERSION_MINOR  12
#define ATTN_VERSION_PATCH  7
#define ATTN_VERSION_NUMBER (ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH)
#define ATTN_VERSION_STRING "0.12.7"

/** Version of the library actually linked, as ATTN_VERSION_NUMBER. Thread-safe. */
ATTN_API unsigned attn_version_number(void);
/** Version of the library actually linked, "MAJOR.MINOR.PATCH". Never NULL. Thread-safe. */
ATTN_API const char *attn_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes. Values are fixed; new codes are only appended.
 * ------------------------------------------------------------------------------------------- */
typedef enum attn_status {
  ATTN_OK = 0,
  ATTN_E_NULL_POINTER = 1,         /**< a required pointer is NULL */
  ATTN_E_ZERO_SIZE = 2,            /**< a size (tokens, heads, dimension, count) is zero */
  ATTN_E_SIZE_OVERFLOW = 3,        /**< a size product or offset overflows size_t / ptrdiff_t */
  ATTN_E_BAD_STRIDE = 4,           /**< a stride is smaller than a row, or an output layout overlaps itself */
  ATTN_E_BAD_HEADS = 5,            /**< a head count does not divide the output heads H, or h_k != h_v where required */
  ATTN_E_BAD_WINDOW = 6,           /**< a mask the variant cannot honour (linear attention: not full or causal) */
  ATTN_E_BAD_SCALE = 7,            /**< scale is NaN or infinite (or not what the feature map needs) */
  ATTN_E_BAD_EPS = 8,              /**< eps is NaN, infinite or negative (or not 0 for dsoftmax) */
  ATTN_E_BAD_FEATURE_MAP = 9,      /**< unknown feature map, or a feature size it cannot use */
  ATTN_E_UNSUPPORTED_ISA = 10,     /**< the forced ISA path cannot run on this CPU, or is unknown */
  ATTN_E_WORKSPACE_TOO_SMALL = 11, /**< workspace_size is below what *_workspace_size reported */
  ATTN_E_ALIASING = 12,            /**< an output overlaps an input or another output */
  ATTN_E_STATE_MISMATCH = 13,      /**< a state's shape or mode differs from the call's */
  ATTN_E_BAD_ARGUMENT = 14,        /**< any other invalid value (mode, flag, chunk size, ISA id) */
  ATTN_E_BAD_NORMALIZATION = 15,   /**< the feature map cannot run with this normalisation (0.3.0) */
  ATTN_E_BAD_FEATURE_MATRIX = 16,  /**< FAVOR+: the caller's W is NULL or not finite, or the source is
                                        unknown (0.3.0) */
  ATTN_E_BAD_GATE = 17,            /**< a log gate > 0 or not finite, a beta <= 0 or not finite, or
                                        an unknown gate kind (0.3.0) */
  ATTN_E_BAD_BIAS = 18,            /**< GAU: an unknown bias kind, a bias that is not finite, or a
                                        bias table that is NULL or empty (0.4.0); softmax: a sink
                                        or ALiBi slope that is not finite (0.6.0) */
  ATTN_E_TOO_LARGE = 19,           /**< an explicit analysis call above its size limit
                                        (ATTN_MATRIX_MAX_KV; 0.5.0) */
  ATTN_E_SYSTEM = 20,              /**< attn_pool_create: the system refused memory or a thread
                                        (0.6.0) */
  ATTN_E_BAD_DTYPE = 21            /**< an unknown element type (attn_shape.kv_type, q_type,
                                        o_type), or one the variant does not take (linear
                                        attention's K/V, attn_matrix: fp32 only) (0.6.0) */
} attn_status;

/** A short English description of a status; "unknown status" for values not listed. Never NULL. */
ATTN_API const char *attn_status_string(attn_status status);
/** The enumerator's name of a status ("ATTN_E_BAD_STRIDE"); "ATTN_UNKNOWN_STATUS" for values not
 *  listed. Never NULL; a string constant. Thread-safe. Since 0.6.1. */
ATTN_API const char *attn_status_name(attn_status status);
/**
 * What the last call on this thread that returned an error status found wrong: the argument or
 * field, its value and what was expected, e.g. "shape.k.row_stride 7 < d 8" or
 * "workspace_size 1000 B < 1024 B needed". "" until a call on this thread fails. A call that
 * succeeds leaves it as it is (the success path does not touch it), so read it right after the
 * status says the call failed. The wording is for people and may change between versions.
 * Thread-local: never NULL, valid until this thread's next failing call or its exit; other
 * threads' calls do not change it. Since 0.6.1.
 */
ATTN_API const char *attn_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * ISA paths and runtime dispatch
 *
 * Every compiled path is listed by attn_isa (values 1 .. ATTN_ISA_COUNT-1; iterate them to list
 * the paths). On first use the library detects the CPU (x86: CPUID + XGETBV, each path's features
 * and the register state the OS saves; AArch64: NEON always) and picks the best NATIVE path,
 * unless the environment variable ATTN_ISA = auto or a path's name (attn_isa_name) names another;
 * it is read once, on first use.
 * A path that is compiled but not the CPU's own (NEON on x86, AVX2 on AArch64) runs through SIMDe
 * emulation: it is "available" but not "native", and is selected only when forced.
 * If ATTN_ISA names an unknown path or one this CPU cannot run, every compute call returns
 * ATTN_E_UNSUPPORTED_ISA until attn_isa_set() picks a runnable one; attn_last_error() then names
 * the variable, its value and the path names it takes.
 * ------------------------------------------------------------------------------------------- */
typedef enum attn_isa {
  ATTN_ISA_NONE = -1, /**< no usable path (ATTN_ISA named one that cannot run) */
  ATTN_ISA_AUTO = 0,  /**< best native path of this CPU */
  ATTN_ISA_SCALAR = 1,
  ATTN_ISA_AVX2 = 2, /**< AVX2 + FMA */
  ATTN_ISA_NEON = 3,
  ATTN_ISA_AVX512 = 4, /**< AVX-512F (with the OS saving the opmask and ZMM state; since 0.5.0) */
  ATTN_ISA_COUNT = 5
} attn_isa;

/** Name of a path ("auto", "scalar", "avx2", "neon", ...: lower case of the enum's suffix); "none" for
 * ATTN_ISA_NONE; "unknown" otherwise. */
ATTN_API const char *attn_isa_name(attn_isa isa);
/** Path id for a name (case-sensitive, as attn_isa_name writes it); ATTN_ISA_NONE when unknown or NULL. */
ATTN_API attn_isa attn_isa_from_name(const char *name);
/**
 * Whether a path can run on this CPU. Returns 1 if it can, 0 if not (or the id is not a path).
 * If is_native is not NULL it receives 1 when the path uses the CPU's own instructions and 0 when
 * it runs through SIMDe emulation (or cannot run). ATTN_ISA_AUTO is always available and native.
 * Thread-safe.
 */
ATTN_API int attn_isa_available(attn_isa isa, int *is_native);
/**
 * Force a path for the whole process (ATTN_ISA_AUTO: back to the best native path, ignoring the
 * environment). Takes effect for calls that start after it returns.
 * @retval ATTN_OK
 * @retval ATTN_E_BAD_ARGUMENT      isa is not ATTN_ISA_AUTO or a path id; nothing changes.
 * @retval ATTN_E_UNSUPPORTED_ISA   the path cannot run on this CPU; the active path does not change.
 * Thread-safe (atomic), but calls racing with it may run on either path.
 */
ATTN_API attn_status attn_isa_set(attn_isa isa);
/** The active path (never ATTN_ISA_AUTO); ATTN_ISA_NONE when ATTN_ISA made every call fail. Thread-safe. */
ATTN_API attn_isa attn_isa_get(void);

/* ---------------------------------------------------------------------------------------------
 * Threads (0.6.0)
 *
 * A call runs on the caller's thread alone unless its shape names an attn_threads. Then its work
 * is cut into tasks whose boundaries depend only on the problem and the ISA path's tunings, never
 * on the number of workers: heads and query blocks (softmax, GAU and windowed linear prefill), a
 * fixed split of a short call's keys into ranges merged in a fixed order (decode and calls of at
 * most ATTN_SPLIT_TOKENS query tokens over at least 2 ATTN_SPLIT_KEYS visible keys; a call
 * without threads splits and merges the same way), state heads (linear attention without a
 * window), and the caller's parallel-for runs them. Results are bit-identical for any number of
 * workers, and to a call without threads. A causal linear prefill by the recurrence (desc.chunk)
 * runs each head's tokens on one worker, heads in groups. Any other causal linear prefill of two
 * or more chunks is a chunk scan (since 0.6.0; FLASH's exclusive form over two or more of its chunks too, its chunks
 * being the scan's): each chunk's own state is computed apart and the states are summed in chunk
 * order (exp, favor and dsoftmax: at their larger per-feature offsets), so that when the state
 * heads alone cannot keep the workers busy (fewer than 4 per worker and not a multiple of the
 * workers) the chunks of each head run in parallel, in waves of groups of chunks (each group's
 * state, the state before it and its outputs on one worker), one parallel-for per wave, plus one
 * over the heads before the first wave when there are two or more; otherwise a head's chunks run one after another; either
 * way the same arithmetic, hence the same bits. Selective attention (since 0.6.0) runs its query
 * blocks one after another, as F runs along the tokens, but splits each block's keys into ranges
 * of at least 256 keys (ATTN_SPLIT_KEYS in calls of at most ATTN_SPLIT_TOKENS tokens: decode, the
 * cache's steps; whole key blocks, 16 ranges at most, with or without threads) that run in
 * parallel, every head group of a range in order on one worker, and are merged in range order.
 * The recurrent decode step of linear attention is one task per state head. attn_linear_gated's
 * check of its log gates and beta (a pass over each before anything is written) runs in slices of
 * a fixed size on the workers too. A split's merge
 * (softmax and selective: running maxima and sums rescaled like attn_softmax_merge; GAU: sums)
 * runs on the calling thread. A softmax or GAU call of at most 32 rows per key head (n_q h_q /
 * h_k: decode steps, speculative blocks) whose key ranges give fewer tasks than workers also
 * splits its heads into groups, one per worker up to one per key head (since 0.8.0): heads are
 * independent, so the grouping changes no bit, and a decode over a short cache runs on the
 * threads too.
 * The workspace holds one scratch region per worker (*_workspace_size reads `workers`), plus, for
 * a split, each range's partial result, and for a linear scan in waves, the heads' states and a
 * wave's chunks (8 MiB at most, or one chunk per head): ask the size with the same shape as the
 * call (or, softmax, GAU and selective, the call's own bytes: *_call_workspace_size).
 * ------------------------------------------------------------------------------------------- */
/** A task: runs task `task` as worker `worker` (< the attn_threads' workers). */
typedef void (*attn_task_fn)(void *context, size_t task, size_t worker);

/**
 * An engine's parallel-for (the pthreadpool / XNNPACK pattern, so an engine keeps its own pool).
 * parallel_for(pool, fn, context, tasks) must call fn(context, i, w) exactly once for every i in
 * [0, tasks), in any order and on any threads, with w < workers naming the worker that runs it
 * (two calls never run at the same time with the same w), and return once all have returned.
 * The library calls it a few times per compute call (a linear chunk scan: once per wave, one
 * wave unless its states pass 8 MiB, plus once before the waves with two or more heads;
 * selective attention: once per query block that sees
 * 512 keys or more, 4096 in decode), from the calling thread, never from inside a task.
 */
typedef struct attn_threads {
  void (*parallel_for)(void *pool, attn_task_fn fn, void *context, size_t tasks);
  void *pool;     /**< handed back to parallel_for */
  size_t workers; /**< 1 .. ATTN_MAX_WORKERS: the workers parallel_for may use (sizes the workspace) */
} attn_threads;

#define ATTN_MAX_WORKERS  1024
#define ATTN_SPLIT_TOKENS 4    /**< calls with at most this many query tokens split their keys */
#define ATTN_SPLIT_KEYS   2048 /**< into ranges of at least this many keys (at most 16 ranges) */

/** The library's own pool: threads - 1 background threads plus the calling thread. */
typedef struct attn_pool attn_pool;

/**
 * Start a pool of `threads` workers (the thread calling parallel_for counts as worker 0, so
 * threads - 1 are started; 1 starts none). Allocates; call it once, not per attention call.
 * @retval ATTN_OK  @retval ATTN_E_NULL_POINTER pool is NULL  @retval ATTN_E_ZERO_SIZE threads is 0
 * @retval ATTN_E_BAD_ARGUMENT threads > ATTN_MAX_WORKERS
 * @retval ATTN_E_SYSTEM memory or a thread could not be had (nothing is left running).
 */
ATTN_API attn_status attn_pool_create(size_t threads, attn_pool **pool);

/** Stop and free a pool (NULL: nothing). No call may be using it. */
ATTN_API void attn_pool_destroy(attn_pool *pool);

/**
 * Pin the pool's background workers to CPUs (Linux; since 0.6.0): worker w (1 .. threads - 1)
 * runs only on CPU cpus[(w - 1) % count] from now on. Worker 0 is the thread that calls
 * parallel_for, which pins itself if it wants (say, to a CPU none of the workers has). Unpinned
 * workers go where the system puts them, which can leave two on one core for a while. Pinning
 * only moves threads: results are the same bits either way. Safe to
 * call while the pool runs a parallel_for (a worker moves when the system next schedules it);
 * cpus is read during the call only.
 * @retval ATTN_OK  @retval ATTN_E_NULL_POINTER pool or cpus is NULL  @retval ATTN_E_ZERO_SIZE count is 0
 * @retval ATTN_E_BAD_ARGUMENT a CPU number is negative or past the system's CPU set size (nothing moved)
 * @retval ATTN_E_SYSTEM the system refused (a CPU it does not have or the process may not use;
 *         workers before the refused one stay moved), or this platform has no thread affinity.
 */
ATTN_API attn_status attn_pool_pin(attn_pool *pool, const int *cpus, size_t count);

/**
 * The attn_threads of a pool, for attn_shape.threads. Its parallel_for may be called from any
 * thread; calls from several threads at once run one after another. A task must not call it.
 * @retval ATTN_OK  @retval ATTN_E_NULL_POINTER pool or threads is NULL.
 */
ATTN_API attn_status attn_pool_threads(attn_pool *pool, attn_threads *threads);

/* ---------------------------------------------------------------------------------------------
 * Shapes, layouts and masks: one block shared by every variant's descriptor
 * ------------------------------------------------------------------------------------------- */
/** Strides, in elements, of one [tokens x heads x width] tensor. */
typedef struct attn_layout {
  size_t row_stride;  /**< between token t and t+1 of the same head */
  size_t head_stride; /**< between head h and h+1 of the same token */
} attn_layout;

/**
 * Element type of K and V (attn_shape.kv_type; since 0.6.0), and of queries and outputs
 * (attn_shape.q_type and o_type, ATTN_F32, ATTN_F16 or ATTN_BF16; since 0.10.0); every other
 * array stays fp32. Half queries are converted exactly as a task reads them, and each output row
 * is computed in fp32 and rounded once (to nearest even) as it is written: a call's outputs are
 * the fp32 call's on the converted queries, rounded; LSE, states and statistics are the fp32
 * call's bit for bit. A half type is read as raw 16-bit patterns (uint16_t in the caller's byte
 * order), converted exactly to fp32 block by block inside the kernels (every fp16 and bf16 value
 * is a float), and all arithmetic is fp32 as for ATTN_F32: the results are those of the fp32 call
 * on the converted values. Subnormals, infinities and NaNs convert to the same float values, and
 * the non-finite policy below applies to them.
 *
 * Performance: a decode step over a long cache reads every K and V row once and is bound by memory;
 * half K/V halve the bytes. Over caches of many MiB the page walks then weigh too: a cache in
 * transparent huge pages (Linux: a 2 MiB aligned buffer and madvise(MADV_HUGEPAGE) before its
 * first touch) avoids most of them.
 */
typedef enum attn_dtype {
  ATTN_F32 = 0,  /**< IEEE binary32 (float) */
  ATTN_F16 = 1,  /**< IEEE binary16 (half): 1 sign, 5 exponent, 10 fraction bits */
  ATTN_BF16 = 2, /**< bfloat16: the upper 16 bits of a binary32 */
  /** int8_t q with one float scale s per (token, head) of K and of V: the value is the float
   *  s * q (one rounded product), the scales in attn_softmax_desc.k_scales / v_scales. Softmax
   *  only (since 0.8.0); ATTN_E_BAD_DTYPE elsewhere. */
  ATTN_I8 = 3,
  /** llama.cpp's block_q8_0 (ggml's GGML_TYPE_Q8_0), read in place: blocks of 34 bytes, an fp16
   *  scale d (2 bytes, the caller's byte order) then 32 int8_t q; value j of a block is the float
   *  (float)d * q[j]. d and dv must be multiples of 32 (ATTN_E_BAD_DTYPE), and K and V strides
   *  count blocks (a row of d values is d / 32 blocks). Softmax only (since 0.8.0). */
  ATTN_Q8_0 = 4
} attn_dtype;

/**
 * Row converters between fp32 and the half types (K/V caches; since 0.6.1): n elements of x into
 * n of y (one contiguous row each), on the active ISA path, with the same bits on every path.
 * attn_f32_to_f16 / attn_f32_to_bf16 round to nearest, ties to even (IEEE): fp16 overflows to
 * +-inf from 65520 (the midpoint above 65504) and gives subnormals down to 2^-24, bf16 rounds the
 * 16 dropped bits (up to +-inf); signed zeros stay. A NaN stays a quiet NaN, never infinity, with
 * its sign and its fraction's top bits: fp16 0x7e00 | fraction >> 13, bf16 (bits >> 16) | 0x0040
 * (the result of F16C, NEON and AVX-512 BF16). For the default rounding mode, as the whole library.
 * attn_f16_to_f32 / attn_bf16_to_f32 are exact (every fp16 and bf16 value is a float). bf16 is the
 * upper half of the float: every pattern keeps its bits, NaNs too; an fp16 NaN keeps its sign and
 * payload and is made quiet (as F16C and NEON do).
 * @retval ATTN_OK                 n == 0 writes nothing.
 * @retval ATTN_E_NULL_POINTER     x or y is NULL and n > 0.
 * @retval ATTN_E_SIZE_OVERFLOW    n elements span more than PTRDIFF_MAX bytes.
 * @retval ATTN_E_ALIASING         x and y overlap (their bytes).
 * @retval ATTN_E_UNSUPPORTED_ISA  the forced path cannot run here.
 * On an error y is untouched. Thread-safe; no allocation.
 */
ATTN_API attn_status attn_f32_to_f16(const float *x, uint16_t *y, size_t n);
/** fp16 bits to fp32, exactly (attn_f32_to_f16 above). Since 0.6.1. */
ATTN_API attn_status attn_f16_to_f32(const uint16_t *x, float *y, size_t n);
/** fp32 to bfloat16 bits, to nearest even (attn_f32_to_f16 above). Since 0.6.1. */
ATTN_API attn_status attn_f32_to_bf16(const float *x, uint16_t *y, size_t n);
/** bfloat16 bits to fp32, exactly (attn_f32_to_f16 above). Since 0.6.1. */
ATTN_API attn_status attn_bf16_to_f32(const uint16_t *x, float *y, size_t n);

/**
 * Sizes and strides of one call: the first member of every descriptor.
 * Output heads: H = max(h_q, h_k, h_v); each of h_q, h_k, h_v must divide H (ATTN_E_BAD_HEADS).
 * Output head h reads query head h / (H / h_q), key head h / (H / h_k), value head h / (H / h_v)
 * (contiguous groups: MHA has all three equal; GQA/MQA has h_k = h_v dividing h_q; Mamba2 shares
 * q and k across a group of value heads, h_q = h_k dividing h_v). Softmax attention needs
 * h_k == h_v == h_q / g (H = h_q); linear attention takes any three counts that divide H.
 */
typedef struct attn_shape {
  size_t n_q, n_kv;            /**< query tokens, key/value tokens (both >= 1) */
  size_t h_q, h_k, h_v;        /**< query, key and value heads */
  size_t d, dv;                /**< query/key width, value (and output) width */
  attn_layout q, k, v, o;      /**< strides; q and k rows have d elements, v and o rows dv; o has H heads */
  const attn_threads *threads; /**< NULL (attn_shape_init): the caller's thread alone; otherwise
                                    parallel_for non-NULL and 1 <= workers <= ATTN_MAX_WORKERS
                                    (ATTN_E_BAD_ARGUMENT). Read during the call only. 0.6.0 */
  attn_dtype kv_type;          /**< element type of k and v (strides count elements of that type);
                               ATTN_F32 from attn_shape_init and every *_desc_init. Softmax, GAU
                               and selective attention (and the selective cache's load and step)
                               take ATTN_F16 and ATTN_BF16; softmax also ATTN_I8 and ATTN_Q8_0
                               (0.8.0); linear attention and attn_matrix return ATTN_E_BAD_DTYPE
                               for all of them; an unknown value is ATTN_E_BAD_DTYPE everywhere
                               (0.6.0) */
  attn_dtype q_type;           /**< element type of q (strides count elements of that type): ATTN_F32
                               (attn_shape_init), ATTN_F16 or ATTN_BF16 for softmax (its batch too),
                               GAU, selective attention (its cache's step too), linear attention
                               and the delta rule; others ATTN_E_BAD_DTYPE. 0.10.0 */
  attn_dtype o_type;           /**< element type of o, as q_type (independent of it). LSE, states,
                               statistics and every other array stay fp32. 0.10.0 */
} attn_shape;

/**
 * Write sizes and the default token-major contiguous layouts ([n][heads][width]: row stride
 * heads * width, head stride width; o has H = max(h_q, h_k, h_v) heads) and kv_type = ATTN_F32.
 * Nothing is validated here; the compute calls validate. @retval ATTN_OK  @retval ATTN_E_NULL_POINTER shape is NULL.
 * Since 0.2.0.
 */
ATTN_API attn_status attn_shape_init(attn_shape *shape, size_t n_q, size_t n_kv, size_t h_q, size_t h_k, size_t h_v,
                                     size_t d, size_t dv);

/** "No bound" for a mask side. */
#define ATTN_UNBOUNDED SIZE_MAX

/**
 * Which keys a query sees, for every variant. Query i sits at position p_i = (n_kv - n_q) + i
 * (bottom-right); key j is visible to it iff
 *     p_i - left <= j <= p_i + right   and, when chunk > 0,   floor(j / chunk) == floor(p_i / chunk).
 * Full (bidirectional): left = right = ATTN_UNBOUNDED, chunk = 0.  Causal: right = 0 (left
 * unbounded): the one way to say causal.  Causal sliding window of w keys including itself:
 * left = w - 1, right = 0.  Chunk-local (FLASH's quadratic part, blocked local attention): chunk
 * = g, with right = 0 for its causal form. Chunks are counted from key position 0.
 * Since 0.2.0 (replaces 0.1's window_left / window_right and linear attention's `causal` flag).
 */
typedef struct attn_mask {
  size_t left;  /**< keys visible before the query's position (ATTN_UNBOUNDED: all) */
  size_t right; /**< keys visible after it (0: causal; ATTN_UNBOUNDED: all) */
  size_t chunk; /**< chunk-local width g (0: no chunk limit) */
} attn_mask;

/** Every key visible. */
static inline attn_mask attn_mask_full(void) {
  attn_mask m = {ATTN_UNBOUNDED, ATTN_UNBOUNDED, 0};
  return m;
}
/** Keys at or before the query's position. */
static inline attn_mask attn_mask_causal(void) {
  attn_mask m = {ATTN_UNBOUNDED, 0, 0};
  return m;
}
/** A (left, right) window; (w - 1, 0) is a causal sliding window of w keys. */
static inline attn_mask attn_mask_window(size_t left, size_t right) {
  attn_mask m = {left, right, 0};
  return m;
}
/** 1 when the mask is causal (right == 0, left unbounded, no chunk limit). */
static inline int attn_mask_is_causal(attn_mask m) { return m.right == 0 && m.left == ATTN_UNBOUNDED && m.chunk == 0; }

/* ---------------------------------------------------------------------------------------------
 * Softmax attention
 *
 *   o_i = sum_j softmax_j(scale * q_i . k_j) v_j over the keys j the mask lets query i see.
 *
 * Streamed over key blocks with the online-softmax recurrence (FlashAttention-2 style), fp32
 * accumulation; memory O(n) and work proportional to the visible pairs (plus at most one query
 * block by one key block of padding per block row): key blocks the mask hides from a whole query
 * block are never read. A row with no visible key gets zeros and LSE = -inf. Non-finite inputs:
 * see the conventions. exp is vectorised (Cody-Waite reduction, then a degree-6 polynomial in the
 * reduced argument): relative error at most 2^-22 (2 to 4 ulp) for arguments in [-87.33, 0],
 * asserted on every path by the tests; smaller arguments give 0, so weights below e^-87.33
 * relative to the row's largest are 0.
 * ------------------------------------------------------------------------------------------- */
typedef struct attn_softmax_desc {
  attn_shape shape; /**< sizes and strides; h_k == h_v, dividing h_q */
  attn_mask mask;   /**< which keys each query sees; attn_softmax_desc_init: full */
  float scale;      /**< logit scale; attn_softmax_desc_init sets 1/sqrt(d) */
  attn_layout lse;  /**< strides of the optional LSE output (one float per row, h_q heads);
                         checked even when no lse is passed (the init defaults are valid) */
  /* Options inference engines ask for (0.6.0; attn_softmax_desc_init turns them all off; a call
   * with none of them runs exactly as before, at no cost). Query i of head h sits at position
   * p_i (attn_mask); each pair's logit is, in this order:
   *   s = scale q_i . k_j;   s = softcap tanh(s / softcap)   (softcap > 0: Gemma 2, Grok);
   *   s += alibi_slopes[h] (j - p_i)                          (ALiBi: <= 0 for the keys before);
   *   s += bias[i][h][j]                                      (an additive bias or mask tensor);
   * With a mask that shows keys after the query, ALiBi's term slope (j - p_i) keeps growing for
   * them (not the symmetric -slope |j - p_i|); BLOOM's key-position form slope j gives the same o
   * and an LSE larger by slope p_i. Sinks are not soft-capped. Then the mask: pairs it hides never
   * count, whatever the bias holds there (NaN and infinities included), and a bias of -inf hides
   * a pair too. A row whose every key is hidden has o = 0 and LSE -inf (with a sink: o = 0, LSE =
   * the sink; PyTorch's attention gives NaN there). A NaN or +inf
   * bias of a visible pair makes its row NaN (the non-finite policy), and a key hidden only by a
   * -inf bias is still read: its non-finite k makes the row (o and LSE) NaN, its non-finite v o. With sinks, each row's
   * weights are e^s_j / (e^sink_h + sum_j e^s_j): a virtual key of logit sink_h and value 0 (the
   * attention sinks of gpt-oss, StreamingLLM's learned form), and the LSE includes it,
   * log(e^sink_h + sum_j e^s_j). Split-KV with sinks: compute every part WITHOUT sinks and merge
   * them together with one more part whose o rows are 0 and whose lse is the row's sink logit
   * (attn_softmax_merge then gives exactly this call's o and LSE); or give the sinks to exactly
   * one part. Statistics (attn_softmax_stats, attn_matrix_stats) stay the visible keys' (the
   * sink's share left out, the keys' weights renormalised, count n visible keys). The tanh of
   * softcap is 1 - 2 / (e^(2 s / softcap) + 1) on the path's vectorised exp: absolute error
   * within 4e-7 softcap on the capped logit. */
  const float *sinks;        /**< NULL, or h_q finite logits (ATTN_E_BAD_BIAS otherwise) */
  float softcap;             /**< 0: none; > 0 and finite (ATTN_E_BAD_SCALE otherwise) */
  const float *alibi_slopes; /**< NULL, or h_q finite slopes (ATTN_E_BAD_BIAS otherwise) */
  const float *bias;         /**< NULL, or element (i, h, j) at i row_stride + h head_stride + j,
                                  for n_q queries, h_q heads and n_kv keys; read only; must not
                                  overlap o, lse or the workspace (ATTN_E_ALIASING) */
  attn_layout bias_layout;   /**< strides of bias, in floats; 0 broadcasts over queries or heads
                                  (init: [n_q][h_q][n_kv] contiguous) */
  /* int8 K/V (shape.kv_type ATTN_I8; since 0.8.0): the scale of key j of key head h is
   * k_scales[j scale_layout.row_stride + h scale_layout.head_stride], v_scales likewise. Read only
   * for ATTN_I8 (ATTN_E_NULL_POINTER when NULL then); must not overlap o, lse or the workspace
   * (ATTN_E_ALIASING). A non-finite scale makes its row's values non-finite (the policy above). */
  const float *k_scales, *v_scales;
  attn_layout scale_layout; /**< strides in floats; 0 broadcasts (row_stride 0: a scale per head;
                                 both: one per tensor); init: [n_kv][h_kv] contiguous */
} attn_softmax_desc;

/**
 * Fill a descriptor with defaults: h_k = h_v = h_kv, full (unmasked) attention, scale 1/sqrt(d),
 * token-major contiguous layouts (attn_shape_init; [n_q][h_q] for lse). Sizes are copied as
 * given; validation happens in the compute call.
 * @retval ATTN_OK  @retval ATTN_E_NULL_POINTER desc is NULL.
 */
ATTN_API attn_status attn_softmax_desc_init(attn_softmax_desc *desc, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                                            size_t d, size_t dv);

/**
 * Bytes of workspace attn_softmax needs for this descriptor on the active path, written to
 * *bytes. The value depends on d, dv, h_q, h_k, the path and shape.threads' workers (per worker
 * at most ~256 KiB of per-head state for d = dv = 64, one logits block and a key split's fold,
 * and when h_q / h_k <= 8 the logits of one key block for every head a worker holds in a decode
 * step, ~22 KiB for d = dv = 64 (since 0.6.0); since 0.6.0 a decode step holds every head of a
 * token together where ~256 KiB takes them with their logits and folds, so a worker may hold
 * that much more; with threads, each split range's state: 16 x 4 tokens x h_q rows of dv + 5
 * floats, rounded up to whole head groups), not on n_q or n_kv. Since 0.6.0 also, per worker,
 * 4096 keys' K and V rows as fp32 (4096 (d + dv) floats: 2 MiB at d = dv = 64), where a call of 8
 * or more query blocks whose key rows of a head are not contiguous fp32 (token-major K/V with
 * several heads, or fp16 / bf16) copies each head's first 4096 keys once and reads them from
 * there (the same bits); other calls leave that region untouched.
 * @retval ATTN_OK  and every validation status of attn_softmax (strides, heads, sizes, ISA).
 */
ATTN_API attn_status attn_softmax_workspace_size(const attn_softmax_desc *desc, size_t *bytes);

/**
 * Bytes of workspace this very call needs (since 0.8.0): at most attn_softmax_workspace_size's
 * answer, for a descriptor of these n_q and n_kv only (ask again when they change). attn_softmax
 * checks workspace_size against this number. A call of at most 8 rows per key head (n_q h_q /
 * h_k <= 8 and n_q below a query block: a decode step, a speculative block) holds its own rows'
 * state, scores and key ranges, with no packed K/V: at d = dv = 128 and 8 heads of 8 (AVX-512),
 * a decode step over 1k / 32k keys needs 33 / 50 KiB with 1 worker, 33 / 365 KiB with 2 and
 * 36 / 662 KiB with 8, where attn_softmax_workspace_size answers 4.3, 9.0 and 34.5 MiB.
 * @retval ATTN_OK  and every status of attn_softmax_workspace_size.
 */
ATTN_API attn_status attn_softmax_call_workspace_size(const attn_softmax_desc *desc, size_t *bytes);

/**
 * Softmax attention for all heads of one sequence.
 * @param desc  shapes, mask, scale and strides (see attn_softmax_desc).
 * @param q     n_q x h_q rows of d (of shape.q_type: float *, or uint16_t * holding fp16 / bf16
 *              bits; const void * since 0.10.0);  k: n_kv x h_k rows of d;  v: n_kv x h_v rows of dv,
 *              k and v of desc->shape.kv_type (float *, or uint16_t * holding fp16 / bf16 bits;
 *              const void * since 0.6.0, source-compatible with float *), strides in its elements.
 *              Half K/V are converted exactly, block by block, in the kernels: the result is the
 *              fp32 call's on the converted values (a decode reads half the bytes).
 * @param o     out: n_q x h_q rows of dv of shape.o_type. Must not overlap q, k, v (their spans in bytes of
 *              the element type), lse or the workspace.
 * @param lse   optional out (NULL: not written): natural-log LSE per (query, head), -inf for
 *              rows with no visible key.
 * @param workspace, workspace_size  scratch of at least attn_softmax_call_workspace_size bytes (which
 *              attn_softmax_workspace_size's answer, for any n_q and n_kv, always is).
 * @retval ATTN_OK
 * @retval ATTN_E_NULL_POINTER q, k, v, o, workspace or desc is NULL.
 * @retval ATTN_E_ZERO_SIZE n_q, n_kv, h_q, h_k, h_v, d or dv is 0.
 * @retval ATTN_E_SIZE_OVERFLOW an offset or byte count does not fit.
 * @retval ATTN_E_BAD_STRIDE a stride is smaller than a row, or o / lse overlap themselves.
 * @retval ATTN_E_BAD_HEADS h_q % h_k != 0 or h_k != h_v.
 * @retval ATTN_E_BAD_SCALE scale is not finite, or softcap is negative or not finite.
 * @retval ATTN_E_BAD_BIAS a sink or ALiBi slope is not finite (0.6.0).
 * @retval ATTN_E_ALIASING o or lse overlaps an input (the bias included), or each other.
 * @retval ATTN_E_WORKSPACE_TOO_SMALL
 * @retval ATTN_E_UNSUPPORTED_ISA the forced path cannot run here.
 * @retval ATTN_E_BAD_DTYPE shape.kv_type is not an attn_dtype (since 0.6.0), or ATTN_Q8_0 with d
 *         or dv not a multiple of 32 (since 0.8.0); shape.q_type or o_type not ATTN_F32, ATTN_F16
 *         or ATTN_BF16 (since 0.10.0, every variant that takes them).
 * ATTN_I8 and ATTN_Q8_0 K/V are converted to fp32 as they are read (each value one rounded product,
 * as the caller would dequantise it: in registers for decode steps and speculative blocks, into
 * scratch block by block otherwise): the results are the fp32 call's on those floats, bit for bit.
 * On any error no output is written. Reentrant.
 */
ATTN_API attn_status attn_softmax(const attn_softmax_desc *desc, const void *q, const void *k, const void *v, void *o,
                                  float *lse, void *workspace, size_t workspace_size);

/**
 * A batch of sequences for attn_softmax_batch (since 0.9.0): B sequences of different lengths in
 * one call (varlen: FlashAttention's cu_seqlens), with K/V either contiguous per sequence or in
 * pages of a shared pool (vLLM's and FlashInfer's paged KV cache). Sequence b's queries, outputs
 * and LSE are rows [q_offsets[b], q_offsets[b + 1]) of q, o and lse (packed); each sequence is
 * masked on its own (attn_mask, bottom-right: its query i sits at n_kv_b - n_q_b + i).
 * Contiguous K/V (page_size 0): its keys are rows [kv_offsets[b], kv_offsets[b + 1]) of k, v (and
 * of the int8 scales). Paged (page_size > 0): its n_kv_b = kv_lens[b] keys lie in pages of
 * page_size tokens: key j is row j % page_size of page page_table[b table_stride + j /
 * page_size], whose first element is page k_page_stride (v_page_stride) elements into k (v); the
 * layouts shape.k and shape.v give rows and heads within a page: [pages][page_size][h_kv][d] is
 * {h_kv d, d} with page stride page_size h_kv d, [pages][h_kv][page_size][d] is {d, page_size d}
 * with h_kv page_size d. Pages may be shared between sequences (a common prefix).
 */
typedef struct attn_batch {
  size_t count;              /**< sequences B (>= 1) */
  const size_t *q_offsets;   /**< B + 1 non-decreasing row offsets, the last <= shape.n_q */
  const size_t *kv_offsets;  /**< contiguous K/V: B + 1 non-decreasing, the last <= shape.n_kv */
  const size_t *kv_lens;     /**< paged: B key counts */
  const int32_t *page_table; /**< paged: B rows of table_stride entries, each in [0, pages) */
  size_t table_stride;       /**< paged: entries between rows (>= the longest sequence's pages) */
  size_t page_size;          /**< tokens per page; 0: K/V contiguous (kv_offsets) */
  size_t pages;              /**< paged: pages of the pool (>= 1) */
  size_t k_page_stride;      /**< paged: k elements between pages (ATTN_Q8_0: blocks) */
  size_t v_page_stride;      /**< paged: v elements between pages */
  size_t scale_page_stride;  /**< paged ATTN_I8: floats between pages of k_scales and v_scales */
} attn_batch;

/** Zero a batch (no sequences, contiguous K/V). @retval ATTN_OK @retval ATTN_E_NULL_POINTER batch is NULL. Since 0.9.0. */
ATTN_API attn_status attn_batch_init(attn_batch *batch);

/**
 * Bytes of workspace attn_softmax_batch needs for this batch (its lengths: ask again when they
 * change): a record per sequence (~1 KiB) and, per worker, the largest of its sequences' own
 * call workspaces (attn_softmax_call_workspace_size). Since 0.9.0.
 * @retval ATTN_OK and every status of attn_softmax_batch but those of its pointers and memory.
 */
ATTN_API attn_status attn_softmax_batch_workspace_size(const attn_softmax_desc *desc, const attn_batch *batch,
                                                       size_t *bytes);

/**
 * Softmax attention over a batch of sequences in one call (since 0.9.0). desc gives what every
 * sequence shares: heads, widths, strides (K/V within a page when paged), mask, scale, options
 * and kv_type (every type of attn_softmax, int8 scales paged as their rows); its shape.n_q is the
 * rows of q, o and lse; its shape.n_kv the rows of k and v (contiguous), or page_size (paged).
 * A bias is indexed by the packed query row and the key's position in its sequence (the bias
 * layout needs the longest sequence's keys). One dispatch to shape.threads takes every
 * sequence's tasks (query blocks, head groups, key ranges); o and lse are bit for bit those of
 * attn_softmax on each sequence alone (its keys contiguous, each head's rows apart as in the
 * pages: head-major pages as a head-major cache, token-major as token-major; since 0.12.6 a
 * decode step without GQA may differ between the two in its last bits), for any thread count and
 * any pages.
 * Rows of q, o and lse no sequence holds are not touched; a sequence without query rows is
 * skipped.
 * @param q, k, v, o, lse, workspace  as attn_softmax; k and v the pool when paged.
 * @retval ATTN_OK, and the statuses of attn_softmax, plus
 * @retval ATTN_E_NULL_POINTER batch, q_offsets, kv_offsets (contiguous), kv_lens or page_table (paged) is NULL.
 * @retval ATTN_E_ZERO_SIZE count is 0, pages is 0 (paged), or a sequence with query rows has no key.
 * @retval ATTN_E_BAD_ARGUMENT offsets decrease or pass shape.n_q / n_kv, shape.n_kv != page_size
 *         (paged), table_stride is too short, or a page index a sequence reads is outside [0, pages).
 * @retval ATTN_E_ALIASING o, lse or the workspace overlaps the pool, an option array or the batch's arrays.
 * On any error no output is written. Reentrant; the batch's arrays are read during the call only.
 */
ATTN_API attn_status attn_softmax_batch(const attn_softmax_desc *desc, const attn_batch *batch, const void *q,
                                        const void *k, const void *v, void *o, float *lse, void *workspace,
                                        size_t workspace_size);

/**
 * Merge partial softmax results computed over disjoint key sets (split-KV, ring attention):
 *   M = max_c lse_c, w_c = exp(lse_c - M), o = sum_c w_c o_c / sum_c w_c, lse = M + log sum_c w_c.
 * Rows whose parts all have lse = -inf give zeros and -inf. A part with lse = -inf is empty: its
 * o row is never read. Non-finite values: a NaN or +inf part lse makes the row's o and lse NaN;
 * a NaN or infinite o row of a non-empty part makes the row's o NaN (lse as computed).
 * @param rows      number of rows (e.g. n_q * h_q for a contiguous [n][h][dv] output).
 * @param dv        floats per row.
 * @param parts     number of partial results (>= 1).
 * @param o_parts   parts pointers, each rows x dv with row stride o_stride.
 * @param lse_parts parts pointers, each rows floats with stride lse_stride.
 * @param o         out: rows x dv with row stride out_stride. May be exactly o_parts[c] when
 *                  out_stride == o_stride (in place; the same pointer may appear in several
 *                  parts: each is weighted as a part of its own); otherwise must not overlap
 *                  any input.
 * @param lse_out   optional out (NULL: not written), stride lse_out_stride; may be exactly
 *                  lse_parts[c] when the strides are equal.
 * @retval ATTN_OK, ATTN_E_NULL_POINTER, ATTN_E_ZERO_SIZE, ATTN_E_SIZE_OVERFLOW,
 *         ATTN_E_BAD_STRIDE (o_stride or out_stride < dv; an lse stride of 0 with rows > 1),
 *         ATTN_E_ALIASING, ATTN_E_UNSUPPORTED_ISA. Reentrant; uses no workspace.
 */
ATTN_API attn_status attn_softmax_merge(size_t rows, size_t dv, size_t parts, const float *const *o_parts,
                                        size_t o_stride, const float *const *lse_parts, size_t lse_stride, float *o,
                                        size_t out_stride, float *lse_out, size_t lse_out_stride);

/* ---------------------------------------------------------------------------------------------
 * Linear attention
 *
 *   phi = psi = the feature map, applied per row, to feature size m (m = d for the maps below).
 *   With relu, a row whose features are all 0 has a normalised denominator of eps: its output is
 *   0 (and, with eps = 0, falls under the zero-denominator rule below).
 *   Bidirectional (full mask):  o_i = s phi(q_i)^T S / (s phi(q_i)^T z + eps),
 *                   S = sum_j psi(k_j) v_j^T,  z = sum_j psi(k_j),  over all n_kv keys,
 *                   s = the descriptor's scale (it multiplies phi(q); default 1).
 *   Causal mask:    the sums run over j <= p_i (bottom-right), on top of an optional incoming
 *                   state (S0, z0) that stands for earlier tokens:
 *                   o_i = s phi(q_i)^T (S0 + sum_{j<=p_i} psi(k_j) v_j^T) / (s phi(q_i)^T (z0 + ...) + eps)
 *   Un-normalised (normalize = 0): o_i = s phi(q_i)^T S (z is not used and stays 0).
 *   A normalised row whose denominator s phi(q_i).z + eps is exactly 0 (eps = 0 and no visible
 *   key, or features orthogonal to z) gets zeros, as a softmax row with no visible key does.
 *   Non-finite values: see the conventions (every feature map gives NaN for a non-finite input).
 *   Heads (attn_shape): one state head per distinct (key head, value head) pair, that is
 *   lcm(h_k, h_v) of them; output head h uses state head h / (H / lcm(h_k, h_v)).
 *   Windowed (any other attn_mask: a (left, right) window, chunk-local; since 0.3.0): the sums
 *   run over the keys the mask lets row i see, normalised over them, in O(n window) work and
 *   O(n) memory on the blocked engine of softmax attention with the scores phi(q_i).psi(k_j) (no
 *   state: like softmax attention, the caller keeps K and V; chunked prefill and decode are
 *   n_q < n_kv calls). Every map (the exponential ones since 0.4.0: exactly stabilised per row,
 *   with the offsets c_f taken over the keys that row sees, see below; dsoftmax softmaxes each
 *   key feature column over the row's window), h_k == h_v dividing h_q (ATTN_E_BAD_HEADS
 *   otherwise), no gate. As in softmax attention, a row that sees no key gets zeros (whatever its
 *   q holds).
 *
 *   What combines (since 0.3.0):
 *     map                  bidirectional  causal (prefill, decode)  window  gates / beta
 *     identity, elu1, relu yes            yes                       yes     yes (causal)
 *     exp, favor, dsoftmax yes            yes                       yes     no
 *   Gates and beta (attn_linear_gated) are causal only; windows and gates do not combine.
 *   FLASH's chunk-exclusive causal form (exclusive_chunk, since 0.4.0): element-wise maps, no gate.
 *
 * Causal prefill runs the chunkwise-parallel form: per chunk of C tokens
 *   O = tril(phi(Q) psi(K)^T) V + phi(Q) S,   S += psi(K)^T V,
 * each a small matrix product on the same GEMM micro-kernel; a call with n_q = n_kv = 1 is the
 * recurrent decode step. The state depends only on the key and value heads, so with GQA one state
 * head serves its whole group of query heads.
 *
 * Exponential maps (since 0.3.0), normalised only (ATTN_E_BAD_NORMALIZATION otherwise):
 *   exp:    phi(x) = psi(x) = exp(x'), x' = sqrt(scale) x elementwise (m = d): the weight of key
 *           j in row i is sum_f exp(q'_if + k'_jf).
 *   favor:  FAVOR+ (Performer): phi(x) = psi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m), W the m x d
 *           random matrix of attn_favor_source (attn_linear_favor_matrix writes the one a seed
 *           gives). E[phi(q).phi(k)] = exp(q'.k') = exp(scale q.k).
 *   dsoftmax: o_i = sum_f softmax_f(q_i) S_f / z_f with S_f = sum_j exp(k_jf) v_j and
 *           z_f = sum_j exp(k_jf) over the keys row i sees: each key feature column is softmaxed
 *           over the visible keys (Shen et al.'s efficient attention; causal: over the prefix,
 *           this library's definition). No scale (must be 1) and no eps (must be 0).
 *   Exact stabilisation: the state keeps per feature f an offset c_f (the largest pre-exponential
 *   key feature absorbed so far) and stores S and z scaled by exp(-c_f), so every stored term is
 *   at most 1; queries add c_f back before taking their own maximum, so every term of a row is at
 *   most 1 and the largest is 1: no input overflows, and no key a row relies on underflows, for
 *   features up to +-150 and beyond (where the float64 value is finite, so is the output). In
 *   chunkwise prefill a chunk whose keys would raise an offset by more than 40 above the chunk's
 *   start is split there, so a query never loses precision to a later key it cannot see. The
 *   offsets are shared by the rows of a chunk (causal) or of a query block (windows), so a key
 *   one of those rows cannot see may still move the row's offsets: the row's value then moves
 *   within rounding (its last bits), never by a NaN or an infinity, whatever the key holds. With
 *   eps = 0 a row with at least one visible key has a denominator >= 1.
 *   Windowed (since 0.4.0): the same definition with each row's offsets over the keys its window
 *   shows it (c_f = max of k'_jf over them, up to the block sharing above), so eps meets the same
 *   stabilised sums, and no row loses a term to a key it cannot see. Cost: per key block a
 *   row sees, the products of identity plus O((keys + rows) m) exponentials, plus an O(rows x
 *   visible keys x m) max pass on the blocks at the window's edges; dsoftmax reads its window
 *   twice (the column sums first).
 *   Cost: exp and dsoftmax, the products of identity plus O(n m) exponentials; favor, m/d times
 *   those (its m x d projection included). FAVOR+ with a seed source builds W in the workspace at
 *   every call (O(m d^2) work), and with ATTN_FAVOR_CALLER copies W transposed into it (O(m d)):
 *   for decode steps, build W once with attn_linear_favor_matrix and pass its transpose as
 *   ATTN_FAVOR_CALLER_T.
 * ------------------------------------------------------------------------------------------- */
typedef enum attn_feature_map {
  ATTN_FEATURE_IDENTITY = 0, /**< phi(x) = x (sign-indefinite: use it un-normalised) */
  ATTN_FEATURE_ELU1 = 1,     /**< phi(x) = x + 1 for x >= 0, exp(x) for x < 0 */
  ATTN_FEATURE_RELU = 2,     /**< phi(x) = max(x, 0); normalised or not (since 0.2.0) */
  ATTN_FEATURE_EXP = 3,      /**< phi(x) = exp(sqrt(scale) x), elementwise; normalised only (0.3.0) */
  ATTN_FEATURE_FAVOR = 4,    /**< FAVOR+: exp(W x' - |x'|^2 / 2) / sqrt(m), x' = sqrt(scale) x;
                                  normalised only; m any >= 1, default 4d (0.3.0) */
  ATTN_FEATURE_DSOFTMAX = 5, /**< phi(q) = softmax(q) over features, psi: each key feature column
                                  softmaxed over the visible keys; self-normalised (0.3.0) */
  ATTN_FEATURE_COUNT = 6
} attn_feature_map;

/** How FAVOR+ gets its m x d random matrix W (attn_linear_desc.favor_source; since 0.3.0). */
typedef enum attn_favor_source {
  ATTN_FAVOR_SEED_CHI = 0,    /**< from favor_seed; row norms drawn from the chi distribution with d
                                   degrees of freedom (Performer's default) */
  ATTN_FAVOR_SEED_SQRT_D = 1, /**< from favor_seed; every row norm exactly sqrt(d) */
  ATTN_FAVOR_CALLER = 2,      /**< W = favor_w, the caller's m x d row-major floats (all finite) */
  ATTN_FAVOR_CALLER_T = 3     /**< W^T = favor_w, d x m row-major (all finite): the layout the
                                   kernels read, so a call makes no copy of W (decode steps) */
} attn_favor_source;

/**
 * Decay and gates of causal linear attention (since 0.3.0; spec: RetNet, GLA, Mamba2). The
 * recurrence becomes S_t = G_t(S_{t-1}) + beta_t psi(k_t) v_t^T (and z likewise), always in
 * natural log space: log gamma <= 0.
 */
typedef enum attn_gate_kind {
  ATTN_GATE_NONE = 0,   /**< G_t(S) = S: plain linear attention */
  ATTN_GATE_SCALAR = 1, /**< G_t(S) = gamma_t S, log gamma_t per (key token, gate head): simple GLA,
                             Mamba2 (log gamma = dt A); a gate row stride of 0 gives one fixed
                             gamma per head: RetNet (attn_retnet_log_decays) */
  ATTN_GATE_FEATURE = 2 /**< G_t(S) = diag(alpha_t) S, log alpha_t in R^m per (key token, gate head):
                             GLA; with all m entries equal it is the scalar gate */
} attn_gate_kind;

typedef struct attn_linear_desc {
  attn_shape shape;             /**< sizes and strides; h_q, h_k, h_v each divide H */
  attn_mask mask;               /**< attn_mask_full() (bidirectional), attn_mask_causal() (chunkwise
                                     prefill and a state), or any other mask: windowed (every
                                     map; the exponential maps since 0.4.0) */
  attn_feature_map feature_map; /**< phi = psi */
  size_t m;                     /**< feature size; 0: the map's own (d for every map but favor, the
                                     only size they take; 4d for favor, which takes any m >= 1) */
  float scale;                  /**< identity, elu1, relu: multiplies phi(q), any finite value;
                                     exp, favor: the temperature, x' = sqrt(scale) x, > 0 and finite;
                                     dsoftmax: must be 1. attn_linear_desc_init sets 1, or
                                     1/sqrt(d) for exp and favor */
  int normalize;                /**< 1: divide by s phi(q).z + eps; 0: un-normalised (identity,
                                     elu1, relu only: ATTN_E_BAD_NORMALIZATION otherwise) */
  float eps;                    /**< >= 0 and finite; 0 for dsoftmax (it has none); attn_linear_desc_init
                                     sets 1e-6, or 0 for dsoftmax */
  size_t chunk;                 /**< causal chunk size C, 1..ATTN_LINEAR_MAX_CHUNK; 0: the path's default.
                                     1 (maps without offsets: identity, elu1, relu; not FLASH's form):
                                     the recurrence, one pass over the state per token; it is also
                                     the default with per-feature gates over a state of at most
                                     64 x 65 floats (m x (dv + normalize); 128 x 129 on the scalar
                                     path; since 0.11.3). Its tasks are state heads: one head's
                                     tokens run on one worker */
  /* FAVOR+ only (ignored by the other maps); since 0.3.0. W is the same for every head of a call
   * and must stay the same for a whole sequence (prefill and every decode step). */
  attn_favor_source favor_source; /**< where W comes from; attn_linear_desc_init sets SEED_CHI */
  uint64_t favor_seed;            /**< the seed of W (SEED_* sources); attn_linear_desc_init sets 0 */
  const float *favor_w;           /**< ATTN_FAVOR_CALLER: W, m x d floats, row-major; CALLER_T: W^T,
                                       d x m row-major. Read only; scanned for non-finite values at
                                       every call (m d floats) */
  /* Decay and gates (attn_linear_gated; causal only, element-wise maps only); since 0.3.0. */
  attn_gate_kind gate;     /**< attn_linear_desc_init sets ATTN_GATE_NONE */
  size_t h_g;              /**< heads of the gate and of beta; 0: H. With a gate or beta the output
                                heads are H = max(h_q, h_k, h_v, h_g), each dividing H (o then
                                has H heads: set shape.o when h_g is the largest); output head h
                                uses gate head h / (H / h_g) */
  attn_layout gate_layout; /**< log gates, n_kv tokens: element (t, g, f) at t row_stride +
                                g head_stride + f (f < m for FEATURE, f = 0 for SCALAR); row_stride
                                may be 0 (the same gate for every token). desc_init: [n_kv][H][1] */
  int beta;                /**< 1: attn_linear_gated reads beta (> 0), the input scale of each key */
  attn_layout beta_layout; /**< beta (t, g) at t row_stride + g head_stride. desc_init: [n_kv][H] */
  /** FLASH's chunk-exclusive causal form (spec 5; since 0.4.0). 0: none (attn_linear_desc_init).
   *  G >= 1: with the causal mask, query i (position p_i) sees only the keys of earlier chunks of
   *  G tokens, floor(j / G) < floor(p_i / G), chunks counted from the start of the sequence;
   *  element-wise maps, no gate (ATTN_E_BAD_WINDOW for another mask or a gate,
   *  ATTN_E_BAD_FEATURE_MAP for an exponential map). FLASH's linear part is the identity map,
   *  un-normalised, scale 1/G; its quadratic part is attn_gau with the chunk-local mask of G:
   *  the two outputs sum to FLASH. A state absorbs a chunk only when the call completes it, and
   *  its `tokens` counts the absorbed tokens (a multiple of G; ATTN_E_STATE_MISMATCH otherwise):
   *  a call with a state passes the keys from that position on, i.e. again the tokens of an
   *  incomplete chunk (the caller keeps them anyway for the quadratic part), so decode is an
   *  n_q = 1 call over the current chunk's keys. */
  size_t exclusive_chunk;
} attn_linear_desc;

#define ATTN_LINEAR_MAX_CHUNK 256

/**
 * Fill a descriptor with defaults: h_k = h_v = h_kv, causal mask, normalised, eps = 1e-6 (0 for
 * dsoftmax), scale 1 (1/sqrt(d) for exp and favor), m = 0 (the map's own feature size), chunk = 0
 * (the path's default), favor_source = ATTN_FAVOR_SEED_CHI with seed 0, token-major contiguous
 * layouts. The map is stored as given (an unknown one is reported by the calls that validate).
 * @retval ATTN_OK @retval ATTN_E_NULL_POINTER
 */
ATTN_API attn_status attn_linear_desc_init(attn_linear_desc *desc, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv,
                                           size_t d, size_t dv, attn_feature_map feature_map);

/** Feature size m of a descriptor's map (d for every map but favor; favor: desc->m, or 4d when 0), in *m.
 * Validates desc. */
ATTN_API attn_status attn_linear_feature_size(const attn_linear_desc *desc, size_t *m);

/**
 * The caller-owned recurrent state of causal linear attention, one per sequence.
 * Its memory is the caller's: `data` points to attn_linear_state_size() bytes: `heads` state
 * heads (lcm(h_k, h_v)), each an m x ld row-major float matrix, ld = dv + 2 (an aligned state,
 * attn_linear_state_init_aligned: dv + 2 rounded up to a multiple of 16, the rest of a row
 * unused, and attn_linear_state_size_aligned() bytes); for state head h
 * and feature p, with r = (h * m + p) * ld:
 *   S[h][p][c] = data[r + c]        for c < dv   (sum of psi(k) v^T)
 *   z[h][p]    = data[r + dv]                    (sum of psi(k); 0 when not normalised)
 *   c[h][p]    = data[r + dv + 1]                (the feature's offset: the sums are stored
 *                                                 scaled by exp(-c); 0 for identity, elu1, relu)
 * `tokens` counts the key/value tokens absorbed. A prefill leaves the state of all n_kv tokens;
 * the next call (a decode step, or the next prefill chunk) continues from it. Snapshot and
 * restore are attn_linear_state_copy (or memcpy of both the struct and its data).
 * A state is not thread-safe: one call at a time may use it. Layout since 0.2.0.
 */
typedef struct attn_linear_state {
  size_t heads, m, dv;          /**< shape: state heads, feature size, value width */
  size_t ld;                    /**< floats per state row: dv + 2, or an aligned state's */
  attn_feature_map feature_map; /**< the map the state was built with */
  int normalize;                /**< whether z is maintained */
  uint64_t tokens;              /**< tokens absorbed so far */
  float *data;                  /**< heads * m * ld floats, caller-owned */
} attn_linear_state;

/** Bytes of state memory for a descriptor, in *bytes. Validates desc. */
ATTN_API attn_status attn_linear_state_size(const attn_linear_desc *desc, size_t *bytes);
/**
 * Bind caller memory (at least attn_linear_state_size bytes, float-aligned) to a state, set its
 * shape from desc and zero it (the empty prefix).
 * @retval ATTN_OK, ATTN_E_NULL_POINTER, ATTN_E_WORKSPACE_TOO_SMALL (memory too small), and the
 *         validation statuses of desc.
 */
ATTN_API attn_status attn_linear_state_init(attn_linear_state *state, const attn_linear_desc *desc, void *memory,
                                            size_t bytes);
/**
 * A state whose rows lie on whole 64-byte lines (since 0.12.0): ld = dv + 2 rounded up to a
 * multiple of 16 floats, in memory aligned to 64 bytes, so that the recurrent step (decode) and
 * the recurrence read and write no row across two lines. Bytes: heads x m x ld floats
 * (attn_linear_state_size_aligned; validates desc). Every call takes either kind of state and
 * gives the same bits with both; attn_linear_state_copy needs two states of the same kind
 * (ATTN_E_STATE_MISMATCH), and checkpoints are images of the call's state, in its rows.
 * @retval as attn_linear_state_init, and ATTN_E_BAD_ARGUMENT (memory not aligned to 64 bytes).
 */
ATTN_API attn_status attn_linear_state_size_aligned(const attn_linear_desc *desc, size_t *bytes);
ATTN_API attn_status attn_linear_state_init_aligned(attn_linear_state *state, const attn_linear_desc *desc,
                                                    void *memory, size_t bytes);
/** Zero a state's sums, offsets and token count (the empty prefix). @retval ATTN_OK, ATTN_E_NULL_POINTER */
ATTN_API attn_status attn_linear_state_reset(attn_linear_state *state);
/**
 * Copy src's contents into dst (snapshot / restore). Both must be bound and of the same shape
 * and mode; dst keeps its own data pointer. Exact (bitwise) copy.
 * @retval ATTN_OK, ATTN_E_NULL_POINTER, ATTN_E_STATE_MISMATCH, ATTN_E_ALIASING (data overlap
 *         without being the same buffer; the same buffer is a no-op).
 */
ATTN_API attn_status attn_linear_state_copy(attn_linear_state *dst, const attn_linear_state *src);

/**
 * The causal chunk size C that attn_linear uses for this descriptor on the active path, in *chunk:
 * desc->chunk when it is set, else the path's default (48 on the AVX2, AVX-512 and NEON paths,
 * 64 on the scalar path; 1 where the default is the recurrence, desc.chunk). For FLOP accounting
 * of the chunkwise products (C = 1: the recurrence's). Validates desc.
 * @retval ATTN_OK, the validation statuses, ATTN_E_UNSUPPORTED_ISA.
 */
ATTN_API attn_status attn_linear_chunk_size(const attn_linear_desc *desc, size_t *chunk);

/** Bytes of workspace attn_linear needs for this descriptor on the active path. Validates desc. */
ATTN_API attn_status attn_linear_workspace_size(const attn_linear_desc *desc, size_t *bytes);

/**
 * Write the FAVOR+ matrix W (m x d floats, row-major, m = attn_linear_feature_size) that desc's
 * seed source gives, so that a caller can store it and pass it back as ATTN_FAVOR_CALLER. Since 0.3.0.
 * The generator is portable and documented, so the same (seed, m, d, source) gives the same W
 * bit for bit on every platform and path:
 *   - uniform 64-bit numbers from xoshiro256** seeded with four outputs of splitmix64(seed);
 *     a uniform double in [0, 1) is (x >> 11) 2^-53;
 *   - standard Gaussians by Marsaglia's polar method (u, v = 2 U - 1; reject s = u^2 + v^2 >= 1 or
 *     s == 0; return u sqrt(-2 ln s / s), then v sqrt(-2 ln s / s)), with a natural log the
 *     library computes itself from + - * / only, in double, so libm does not enter;
 *   - block b = 0, 1, ... of d rows: d x d Gaussians drawn row by row, orthonormalised in order by
 *     modified Gram-Schmidt in double (a row whose residual norm falls below 1e-3 of its own norm
 *     is redrawn); then, for ATTN_FAVOR_SEED_CHI, d norms, each the Euclidean norm of d fresh
 *     Gaussians (the chi distribution with d degrees of freedom), or sqrt(d) for SEED_SQRT_D;
 *     row r of the block is its orthonormal row times its norm; the last block is cut at m rows.
 *   Consequences: rows within a block are orthogonal; W for m rows is the first m rows of W for
 *   any larger m (same seed and d). Every operation is a correctly rounded IEEE double operation
 *   (compiled without contraction into FMA), then rounded to float.
 * @param desc      a FAVOR+ descriptor with a seed source (validated as by attn_linear).
 * @param w         out: m x d floats.
 * @param w_floats  floats available at w (at least m d).
 * @param workspace, workspace_size  at least attn_linear_workspace_size(desc) bytes.
 * @retval ATTN_OK, the validation statuses, ATTN_E_BAD_FEATURE_MATRIX (desc is not FAVOR+ or its
 *         source is a caller's W), ATTN_E_NULL_POINTER, ATTN_E_WORKSPACE_TOO_SMALL (w_floats or
 *         workspace_size too small), ATTN_E_ALIASING (w overlaps the workspace). Reentrant.
 */
ATTN_API attn_status attn_linear_favor_matrix(const attn_linear_desc *desc, float *w, size_t w_floats, void *workspace,
                                              size_t workspace_size);

/**
 * Linear attention for all heads of one sequence.
 * @param q, k, v  n_q x h_q rows of d, n_kv x h_k rows of d, n_kv x h_v rows of dv.
 * @param o        out: n_q x H rows of dv; must not overlap the inputs, the state or the workspace.
 * @param state    causal: in/out, may be NULL (then the prefix is empty and nothing is kept); its
 *                 shape and mode must match desc (ATTN_E_STATE_MISMATCH otherwise); on return it
 *                 holds the sums over all its earlier tokens plus this call's n_kv keys.
 *                 Bidirectional and windowed: must be NULL (ATTN_E_BAD_ARGUMENT otherwise).
 * @retval ATTN_OK and the statuses of attn_softmax (ATTN_E_BAD_HEADS: a head count does not
 *         divide H; ATTN_E_BAD_DTYPE: a kv_type other than ATTN_F32, as linear attention takes
 *         fp32 K and V only), plus ATTN_E_BAD_EPS, ATTN_E_BAD_FEATURE_MAP (unknown map, or an m it cannot
 *         use), ATTN_E_BAD_WINDOW (a window with a gate), ATTN_E_STATE_MISMATCH,
 *         ATTN_E_BAD_ARGUMENT (normalize not 0/1, chunk above ATTN_LINEAR_MAX_CHUNK),
 *         ATTN_E_BAD_NORMALIZATION (exp, favor or dsoftmax un-normalised), ATTN_E_BAD_FEATURE_MATRIX
 *         (FAVOR+: a caller's W that is NULL or not finite, an unknown source), ATTN_E_BAD_ARGUMENT
 *         (a desc with a gate or beta: call attn_linear_gated; ATTN_E_NULL_POINTER before 0.6.1).
 *         On any error neither o nor the state is written.
 * Performance: a causal prefill with several heads reads each head's rows a chunk at a time.
 * Where every head has its own query, key and value head, the library gathers token-major rows
 * (a head's rows a whole row of heads apart) a chunk at a time into its workspace; with grouped
 * query or key heads it reads them in place. With threads, each worker takes a group of heads,
 * so with token-major inputs every core reads part of every row. A caller that can choose, and
 * above all a threaded one, should give each head its own rows (head-major: row_stride d,
 * head_stride n d). Either layout gives the same outputs and state bit for bit.
 */
ATTN_API attn_status attn_linear(const attn_linear_desc *desc, const void *q, const float *k, const float *v, void *o,
                                 attn_linear_state *state, void *workspace, size_t workspace_size);

/**
 * Decayed and gated linear attention (since 0.3.0): attn_linear with the gate and input scale of
 * desc. Causal only (ATTN_E_BAD_WINDOW otherwise), element-wise maps only (identity, elu1, relu:
 * ATTN_E_BAD_FEATURE_MAP otherwise), normalised or not (RetNet, GLA and Mamba2 are un-normalised;
 * the normalised mode divides by the same gated z). Query i (position p_i, bottom-right) gets
 *   o_i = s phi(q_i)^T S_i  (/ (s phi(q_i)^T z_i + eps)),
 *   S_i = D(0, p_i) S0 + sum_{j <= p_i} beta_j D(j, p_i) psi(k_j) v_j^T,
 * where D(j, p) is the product of the gates of tokens j+1 .. p (SCALAR: prod gamma_t; FEATURE: the
 * diagonal prod alpha_t, applied to psi's features), S0 the incoming state (D(0, p) counts the
 * gates of tokens 0 .. p: a key token's gate decays what came before it). A query before every key
 * (n_q > n_kv) sees S0 undecayed. States: one per distinct (key, value, gate) head triple,
 * lcm(h_k, h_v, h_g). Chunkwise prefill uses the chunk-local cumulative log gates (never a
 * cumulative sum over the sequence), so nothing overflows for log gates down to -20 per token and
 * beyond, and a chunk whose decay underflows below e^-300 is still exact; a scalar gate (or beta
 * alone) takes its intra-chunk weights as a product of a key factor and a query factor while the
 * chunk decays by at most e^-60 (both factors then in range), element by element beyond; per-feature
 * gates use sub-chunks with per-element exponentials on the diagonal blocks. A factor holds a term
 * up to e^60 below its value until the other restores it: terms below about 2^-149 e^60 (1.6e-19)
 * have that absolute accuracy, not a relative one (normalised: that error over the denominator
 * s phi(q_i)^T z_i + eps, which eps = 0 lets fall into float's subnormal range).
 * Mamba2 (SSD): q = C, k = B, v = x, beta = dt, log gamma = dt A_h, scale = 1, un-normalised,
 * identity map, h_q = h_k = groups, h_v = h_g = heads (the caller adds D x). A state head's S
 * is N rows (state size) of P columns (head dim) in rows of ld = P + 2 (attn_linear_state): the
 * transpose of mamba_ssm's and fla's [P][N].
 * @param log_gate  desc->gate != NONE: log gates, finite and <= 0 (layout desc->gate_layout);
 *                  NULL otherwise.
 * @param beta      desc->beta: input scales, finite and > 0 (layout desc->beta_layout); NULL otherwise.
 * @retval the statuses of attn_linear, ATTN_E_NULL_POINTER (a gate or beta the desc asks for is
 *         NULL), ATTN_E_BAD_GATE (a log gate positive or not finite, a beta not positive or not
 *         finite, an unknown gate kind, beta not 0/1), ATTN_E_BAD_STRIDE (a gate layout smaller than
 *         its rows, other than the row stride 0), ATTN_E_BAD_HEADS (h_g does not divide H).
 *         On any error neither o nor the state is written.
 */
ATTN_API attn_status attn_linear_gated(const attn_linear_desc *desc, const void *q, const float *k, const float *v,
                                       const float *log_gate, const float *beta, void *o, attn_linear_state *state,
                                       void *workspace, size_t workspace_size);

/**
 * RetNet's default decays: log_gamma[h] = log(1 - 2^(-5-h)) for h < heads (computed as log1p in
 * double, then rounded), to be passed as a SCALAR gate with gate_layout {0, 1} (one gamma per
 * head for every token). Since 0.3.0.
 * @retval ATTN_OK, ATTN_E_NULL_POINTER, ATTN_E_ZERO_SIZE.
 */
ATTN_API attn_status attn_retnet_log_decays(size_t heads, float *log_gamma);

/* ============================================================================================ */
/* State checkpoints of a causal prefill (every chunkwise variant; since 0.7.0).                  */
/* ============================================================================================ */

/**
 * The states a prefill keeps on its way (prefix caching, speculative decoding's roll-back):
 * checkpoint i is the state after the call's token after[i] (0-based within the call), i.e. after
 * the incoming state's tokens plus after[i] + 1. A prefill with checkpoints cuts its chunks at
 * every checkpoint (a chunk ends after token after[i]), so restoring checkpoint i and calling on
 * the tokens after it gives the call's own outputs and final state bit for bit on the same path
 * (the same chunks), for any thread count. The outputs of a call with checkpoints may differ from
 * the same call without them in the last bits (other chunk boundaries).
 * Memory: `states` holds `count` states one after another, each in the variant's state layout
 * (attn_delta_state_size bytes, or the image of attn_linear_state.data: attn_linear_state_size
 * bytes, attn_linear_state_size_aligned for an aligned state),
 * caller-owned, written only by a successful call; it must not overlap the call's other buffers
 * (ATTN_E_ALIASING).
 */
typedef struct attn_checkpoints {
  size_t count;        /**< checkpoints (0: none; after and states may then be NULL) */
  const size_t *after; /**< count token indices, strictly increasing, each < the call's tokens
                            (ATTN_E_BAD_ARGUMENT otherwise) */
  float *states;       /**< count states, one after another */
} attn_checkpoints;

/**
 * attn_linear_gated with checkpoints (desc->gate and beta may be off: then it is attn_linear's
 * causal prefill; log_gate and beta as there). Causal, n_q == n_kv (the call's tokens are both
 * its queries and its keys), no window (ATTN_E_BAD_ARGUMENT otherwise); with exclusive_chunk G
 * (FLASH's linear part, whose state absorbs whole rounds), every checkpoint ends a round:
 * after[i] + 1 a multiple of G, counted from the call's first token (ATTN_E_BAD_ARGUMENT);
 * state must not be NULL (it carries the prefix and, on return, the final state). Checkpoint i
 * holds state->data's image after it; to restore it, copy it into a bound state's data and set
 * that state's tokens to the call's incoming tokens + after[i] + 1. ck NULL or count 0: exactly
 * attn_linear_gated. Since 0.7.0.
 * @retval the statuses of attn_linear_gated, ATTN_E_BAD_ARGUMENT (see above), ATTN_E_NULL_POINTER
 *         (state, or ck's after or states with count > 0), ATTN_E_ALIASING (ck->states overlapping
 *         an input, o, the state or the workspace). On any error nothing is written.
 */
ATTN_API attn_status attn_linear_checkpointed(const attn_linear_desc *desc, const void *q, const float *k,
                                              const float *v, const float *log_gate, const float *beta, void *o,
                                              attn_linear_state *state, const attn_checkpoints *ck, void *workspace,
                                              size_t workspace_size);

/* ============================================================================================ */
/* The delta rule: DeltaNet, Gated DeltaNet, Kimi Delta Attention (spec 8). Since 0.7.0.         */
/* ============================================================================================ */

/**
 * Per value head, with S in R^{d x dv} (rows indexed by key feature) and token t's normalised
 * key k_t, query q_t, value v_t, beta_t and decay D_t:
 *   S~ = D_t S_{t-1};   delta_t = beta_t (v_t - S~^T k_t);   S_t = S~ + k_t delta_t^T;
 *   o_t = scale S_t^T q_t                                  (token t sees its own update)
 * D_t: ATTN_DELTA_PLAIN 1 (DeltaNet); ATTN_DELTA_SCALAR exp(g_t) per token and value head (Gated
 * DeltaNet, Qwen3-Next); ATTN_DELTA_FEATURE diag(exp(g_t)), g_t in R^d per token, value head and
 * key channel (Kimi Delta Attention). The log gates g are given in natural log space, <= 0 (the
 * model's parametrisation, e.g. GDN's -exp(A_log) softplus(a + dt_bias), is the caller's).
 * With qk_l2norm, q and k are first divided by sqrt(sum x^2 + 1e-6) (both models do it; with
 * |k| = 1 and 0 <= beta <= 2, I - beta k k^T is a contraction, which keeps fp32 safe over any
 * length). Heads: shape.h_q == shape.h_k key heads shared by h_v value heads (h_k dividing h_v:
 * value head h reads key head h / (h_v / h_k); Qwen3-Next 16 and 32); gates and beta per value
 * head; one state per value head; o has h_v heads of dv.
 * Prefill runs the chunkwise form of spec 8 (chunks of C tokens: the unit-lower-triangular solve
 * T = (I + diag(beta) L)^-1 diag(beta), U = T V, W = T (K (.) e^B), Delta = U - W S_0, then the
 * outputs and S_C as GEMMs on the path's micro-kernel; per-channel gates by sub-blocks whose every
 * exponential is <= 0, element by element where a block's own decay spans more than e^60), a
 * one-token chunk (a decode step) the recurrence itself in two passes over S. Work per token and
 * head: about 2 C d + C (d + dv) / 2 + 3 d dv multiply-adds. Tasks are groups of value heads, each
 * run a chunk of every head at a time (a token-major input is read row by row): results are
 * bit-identical for any thread count. No allocation.
 * Non-finite inputs: a chunk whose q, k or v holds an infinity or NaN runs token by token, so a
 * non-finite k or v makes the outputs from its token on NaN (it enters the state), a non-finite q
 * its own row; the rows before it keep their values (within rounding of the chunked form).
 */
typedef enum attn_delta_gate {
  ATTN_DELTA_PLAIN = 0,  /**< DeltaNet: no decay */
  ATTN_DELTA_SCALAR = 1, /**< Gated DeltaNet: log alpha_t per (token, value head) */
  ATTN_DELTA_FEATURE = 2 /**< Kimi Delta Attention: log alpha_t in R^d per (token, value head) */
} attn_delta_gate;

typedef struct attn_delta_desc {
  attn_shape shape;        /**< n_q == n_kv: the call's tokens; h_q == h_k dividing h_v; q, k rows
                                of d, v and o rows of dv (o: h_v heads); kv_type ATTN_F32 */
  attn_delta_gate gate;    /**< attn_delta_desc_init: as given */
  attn_layout gate_layout; /**< log gate (t, h, f) at t row_stride + h head_stride + f (f < d for
                                FEATURE, f = 0 for SCALAR); row_stride 0 repeats one row for every
                                token. desc_init: [n][h_v][1] (SCALAR) or [n][h_v][d] (FEATURE) */
  attn_layout beta_layout; /**< beta (t, h) at t row_stride + h head_stride. desc_init: [n][h_v] */
  float scale;             /**< output scale; desc_init 1/sqrt(d) */
  int qk_l2norm;           /**< 1: L2-normalise q and k in the call (desc_init: 1) */
  size_t chunk;            /**< C; 0 (desc_init): the path's default (16 on AVX-512 and scalar, 12 on AVX2
                                and NEON); at most ATTN_LINEAR_MAX_CHUNK */
} attn_delta_desc;

/**
 * Defaults: n_q = n_kv = n, h_q = h_k, token-major contiguous layouts (attn_shape_init), the gate
 * and beta layouts above, scale 1/sqrt(d), qk_l2norm 1, chunk 0. Nothing is validated.
 * @retval ATTN_OK @retval ATTN_E_NULL_POINTER
 */
ATTN_API attn_status attn_delta_desc_init(attn_delta_desc *desc, size_t n, size_t h_k, size_t h_v, size_t d, size_t dv,
                                          attn_delta_gate gate);
/** Bytes of one state: h_v * d * dv floats, value head h's S at h d dv, row f (key channel) at
 * f dv, row-major (fla's [H][K][V] per sequence). Validates desc. */
ATTN_API attn_status attn_delta_state_size(const attn_delta_desc *desc, size_t *bytes);
/** Bytes of workspace attn_delta needs on the active path (it grows with shape.threads' workers).
 * Validates desc. */
ATTN_API attn_status attn_delta_workspace_size(const attn_delta_desc *desc, size_t *bytes);
/** The chunk C attn_delta uses on the active path (desc->chunk, or the path's default). Validates desc. */
ATTN_API attn_status attn_delta_chunk_size(const attn_delta_desc *desc, size_t *chunk);

/**
 * Delta-rule attention over the call's n tokens of one sequence, continuing `state`.
 * @param q, k      n x h_k rows of d (shape.q, shape.k).
 * @param v         n x h_v rows of dv.
 * @param log_gate  SCALAR / FEATURE: finite and <= 0 (gate_layout); PLAIN: must be NULL.
 * @param beta      n x h_v values, finite and >= 0 (beta_layout); never NULL.
 * @param o         out: n x h_v rows of dv; must not overlap an input, the state, the checkpoints
 *                  or the workspace.
 * @param state     in/out, attn_delta_state_size bytes, or NULL (a zero state, nothing kept). On
 *                  return: the state after the call's last token.
 * @param ck        NULL, or checkpoints (attn_checkpoints; states of attn_delta_state_size bytes).
 * A decode step is a call with n = 1; a speculative block n = 2..8 (a chunk of its own).
 * @retval ATTN_OK, the shape statuses of attn_linear (ATTN_E_BAD_HEADS: h_q != h_k or h_k not
 *         dividing h_v; ATTN_E_BAD_ARGUMENT: n_q != n_kv, qk_l2norm not 0/1, chunk above
 *         ATTN_LINEAR_MAX_CHUNK, bad checkpoints; ATTN_E_BAD_DTYPE: kv_type not ATTN_F32),
 *         ATTN_E_BAD_SCALE (scale not finite), ATTN_E_BAD_GATE (unknown gate kind, a log gate
 *         positive or not finite, a beta negative or not finite, a log_gate given to PLAIN),
 *         ATTN_E_NULL_POINTER, ATTN_E_WORKSPACE_TOO_SMALL, ATTN_E_ALIASING, ATTN_E_UNSUPPORTED_ISA.
 *         On any error nothing is written. Reentrant; a state is used by one call at a time.
 */
ATTN_API attn_status attn_delta(const attn_delta_desc *desc, const void *q, const float *k, const float *v,
                                const float *log_gate, const float *beta, void *o, float *state,
                                const attn_checkpoints *ck, void *workspace, size_t workspace_size);

/* ============================================================================================ */
/* GAU relu^2 attention (spec 5; Hua et al. 2022, seed 000). Since 0.4.0.                        */
/* ============================================================================================ */

/**
 * GAU's squared-relu attention: no softmax, no running maximum. Query i (position p_i = n_kv -
 * n_q + i, bottom-right as everywhere) of head h gets
 *   o_i = t_i sum_j relu(scale q_i . k_j + bias_ij)^2 v_j
 * over the keys j the mask lets it see, with bias_ij a scalar beta or a relative-position table
 * b[p_i - j] (the bias is added after the scale, inside the relu), and t_i = 1 (FLASH) or
 * 1 / (number of keys row i sees) (Su's bert4keras form, outside the square). A row that sees no
 * key gets zeros. FLASH's quadratic part is the chunk-local mask (attn_mask.chunk = g) with
 * scale 1/g or the constant 1/n of its training length and a bias table; Su's causal form is
 * scale 1/sqrt(d), normalised by the count. The score walk, memory and costs are softmax
 * attention's (the same blocked engine and GEMM micro-kernel): O(n) memory, work proportional to
 * the visible pairs; decode is n_q = 1 and chunked prefill 1 < n_q < n_kv over the caller's keys.
 * Non-finite values: a row that sees a non-finite q, k or v element gets NaN (every column); a
 * hidden one never reaches it.
 */
typedef enum attn_gau_bias {
  ATTN_GAU_BIAS_SCALAR = 0,   /**< bias_ij = beta */
  ATTN_GAU_BIAS_CAUSAL = 1,   /**< bias_ij = table[clamp(p_i - j, 0, L - 1)]: L entries, the
                                   causal Toeplitz table (offsets 0 .. L-1, the last for every farther
                                   key; a key after p_i, under a non-causal mask, reads table[0]) */
  ATTN_GAU_BIAS_TWO_SIDED = 2 /**< bias_ij = table[clamp(p_i - j + L - 1, 0, 2L - 2)]: 2L - 1
                                   entries, offsets -(L-1) .. L-1 (an expanded T5 table) */
} attn_gau_bias;

typedef struct attn_gau_desc {
  attn_shape shape;        /**< sizes and strides; h_k == h_v, dividing h_q */
  attn_mask mask;          /**< which keys each query sees (any mask; chunk-local for FLASH) */
  float scale;             /**< multiplies q . k; finite; attn_gau_desc_init: 1/sqrt(d) */
  attn_gau_bias bias;      /**< the bias kind; init: ATTN_GAU_BIAS_SCALAR */
  float beta;              /**< the scalar bias (SCALAR only), finite; init: 0 */
  const float *bias_table; /**< the table (CAUSAL, TWO_SIDED): finite floats, read only */
  size_t bias_len;         /**< L >= 1: the table holds L (CAUSAL) or 2L - 1 (TWO_SIDED) floats */
  int normalize;           /**< 0: t_i = 1; 1: t_i = 1 / (keys row i sees); init: 0 */
} attn_gau_desc;

/**
 * Fill a GAU descriptor with defaults: h_k = h_v = h_kv, full mask, scale 1/sqrt(d), scalar bias
 * 0, no normalisation, token-major contiguous layouts.
 * @retval ATTN_OK  @retval ATTN_E_NULL_POINTER desc is NULL.
 */
ATTN_API attn_status attn_gau_desc_init(attn_gau_desc *desc, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t d,
                                        size_t dv);

/**
 * Bytes of workspace attn_gau needs for this descriptor on the active path (as for softmax: a
 * function of d, dv, the heads and the path, not of n_q or n_kv).
 * @retval ATTN_OK and every validation status of attn_gau but those of q, k, v, o and the
 *         workspace (the bias and its table are checked: ATTN_E_BAD_BIAS).
 */
ATTN_API attn_status attn_gau_workspace_size(const attn_gau_desc *desc, size_t *bytes);
/** This very call's bytes, at most attn_gau_workspace_size's (as attn_softmax_call_workspace_size;
 * since 0.8.0). */
ATTN_API attn_status attn_gau_call_workspace_size(const attn_gau_desc *desc, size_t *bytes);

/**
 * GAU relu^2 attention for all heads of one sequence (attn_gau_desc).
 * @param q, k, v  n_q x h_q rows of d, n_kv x h_k rows of d, n_kv x h_v rows of dv (k and v of
 *                 shape.kv_type: fp32, fp16 or bf16, as attn_softmax).
 * @param o        out: n_q x h_q rows of dv; must not overlap q, k, v, the bias table or the
 *                 workspace.
 * @retval ATTN_OK, and the statuses of attn_softmax (ATTN_E_BAD_SCALE: scale not finite), plus
 *         ATTN_E_BAD_ARGUMENT (normalize not 0 or 1), ATTN_E_BAD_BIAS (unknown kind; SCALAR: beta
 *         not finite; a table kind: a table that is NULL, of length 0 or holding a non-finite
 *         value, or 2L - 1 overflowing), ATTN_E_ALIASING (o or the workspace overlapping the
 *         table too).
 *         On any error o is not written. Reentrant.
 */
ATTN_API attn_status attn_gau(const attn_gau_desc *desc, const void *q, const void *k, const void *v, void *o,
                              void *workspace, size_t workspace_size);

/** Bytes of workspace attn_gau_batch needs for this batch (as attn_softmax_batch_workspace_size).
 *  Since 0.10.0. @retval ATTN_OK and every status of attn_gau_batch but those of its pointers and memory. */
ATTN_API attn_status attn_gau_batch_workspace_size(const attn_gau_desc *desc, const attn_batch *batch, size_t *bytes);

/**
 * GAU over a batch of sequences in one call (since 0.10.0), as attn_softmax_batch is softmax's:
 * packed query rows by batch->q_offsets, K/V contiguous by kv_offsets or in pages of a pool
 * (fp32, fp16, bf16), each sequence masked bottom-right on its own and its positional bias taken
 * from its own positions; desc->shape.n_q is the packed rows, n_kv the contiguous rows or
 * page_size. o is bit for bit attn_gau's on each sequence alone, for any thread count and pages.
 * @retval ATTN_OK, the statuses of attn_gau, and those attn_softmax_batch gives for the batch.
 * On any error no output is written. Reentrant.
 */
ATTN_API attn_status attn_gau_batch(const attn_gau_desc *desc, const attn_batch *batch, const void *q, const void *k,
                                    const void *v, void *o, void *workspace, size_t workspace_size);

/* ============================================================================================ */
/* Selective attention (spec 6; Leviathan, Kalman, Matias 2024, seed 002). Since 0.4.0.          */
/* ============================================================================================ */

/**
 * Causal softmax attention whose logits are reduced by a selection mask F shared by all heads of
 * a layer. With positions p (query, p_i = n_kv - n_q + i) and j (key), and s^(h)_pj = scale
 * q_p^(h) . k_j of head h:
 *   S_kj = relu(s^(h_sel)_kj) for 0 < j < k, else 0 (the selecting head h_sel; BOS, token 0, is
 *          never selected away, and a token never masks itself);
 *   F_pj = sum_{j < k < p} S_kj (a token's decision affects only later queries; F never
 *          decreases down a column; F_p0 = F_pp = F_p,p-1 = 0);
 *   o_p^(h) = sum_{j <= p} softmax_j(s^(h)_pj - F_pj) v_j^(h) for every head, h_sel included.
 * F is carried as running column sums over the queries seen so far: the caller's array f, one
 * float per key (O(n) memory; no n x n buffer). Chunked prefill and decode continue from it.
 * Within a prefill call, each key's sums over the call's queries are taken a vector of queries at
 * a time (a running sum in registers, in each ISA path's own order of additions): the same bits
 * for any thread count, and the exact sums within rounding (which may let a column fall by an ulp
 * between consecutive queries); decode calls add one query's S to f in turn.
 * Non-finite values: as softmax attention's; a non-finite score of head h_sel (a NaN, or an
 * infinite q or k element) reaches F, and a later row whose logit meets a non-finite F gets NaN
 * (every column), as for any non-finite input it sees. A score of -inf is such a score too, not
 * relu's limit 0 (since 0.6.1: it reached F as 0 before), as a -inf logit from an infinite input
 * makes a softmax row NaN.
 */
typedef struct attn_selective_desc {
  attn_shape shape; /**< sizes and strides; h_k == h_v, dividing h_q */
  float scale;      /**< logit scale; attn_selective_desc_init: 1/sqrt(d) */
  size_t h_sel;     /**< the selecting query head, < h_q (ATTN_E_BAD_HEADS otherwise); init: 0 */
  attn_layout lse;  /**< strides of the optional LSE output (as attn_softmax_desc) */
} attn_selective_desc;

/**
 * Defaults: h_k = h_v = h_kv, scale 1/sqrt(d), h_sel 0, token-major contiguous layouts.
 * @retval ATTN_OK  @retval ATTN_E_NULL_POINTER desc is NULL.
 */
ATTN_API attn_status attn_selective_desc_init(attn_selective_desc *desc, size_t n_q, size_t n_kv, size_t h_q,
                                              size_t h_kv, size_t d, size_t dv);

/**
 * Workspace bytes of attn_selective (independent of n_q and n_kv), as attn_softmax_workspace_size;
 * with threads, the split ranges' states are those of whole query blocks: 16 x q_block rows
 * (48 on AVX2 and NEON, 64 on AVX-512 and 128 there where d + dv >= 256 since 0.12.7, 32 scalar)
 * per key head of dv + 5 floats.
 */
ATTN_API attn_status attn_selective_workspace_size(const attn_selective_desc *desc, size_t *bytes);
/** This very call's bytes, at most attn_selective_workspace_size's (as
 * attn_softmax_call_workspace_size; since 0.8.0). */
ATTN_API attn_status attn_selective_call_workspace_size(const attn_selective_desc *desc, size_t *bytes);

/**
 * Selective attention prefill (a causal call; decode is n_q = 1, chunked prefill n_q < n_kv).
 * @param q, k, v, o, lse, workspace  as attn_softmax (o: n_q x h_q rows of dv; lse optional).
 * @param f  in/out, n_kv floats: F's running column sums. On entry f[j] for the keys of earlier
 *           calls (j < n_kv - n_q) holds the sum of S_kj over every earlier query k (what the
 *           previous call returned; zeros for a fresh sequence); the call sets the entries of its
 *           own keys (their input is ignored). On return f[j] = sum of S_kj over every query up
 *           to position n_kv - 1. Must not overlap q, k, v, o, lse or the workspace.
 * @retval ATTN_OK and the statuses of attn_softmax, plus ATTN_E_BAD_HEADS (h_sel >= h_q),
 *         ATTN_E_NULL_POINTER (f NULL), ATTN_E_ALIASING (f overlapping an input or output).
 *         On any error neither o, lse nor f is written. Reentrant (calls with distinct f).
 */
ATTN_API attn_status attn_selective(const attn_selective_desc *desc, const void *q, const void *k, const void *v,
                                    void *o, float *lse, float *f, void *workspace, size_t workspace_size);

/**
 * A selective KV cache for decode with context pruning (spec 6): per live token its keys and
 * values for every key head, its position and its current F_j, in caller-owned memory sized by
 * attn_selcache_size. A step (attn_selcache_step), in this order: (1) append the new token (F = 0)
 * and attend the new query over the live tokens with the current F (every head: softmax of
 * s - F); (2) add the query's selection S_pj = relu(s^(h_sel)_pj) to F_j of every live token but
 * BOS and itself; (3) evict, for good: every token with F_j >= tau, then, while more than budget
 * tokens are live, the one with the largest F_j (ties: the oldest; a NaN F_j, which is never
 * >= tau, ranks below every number, so a token whose selections were NaN stays while others
 * can go and keeps poisoning the rows that see it). BOS (position 0) and the newest token are
 * never evicted. With tau = +inf and no budget (or one >= the tokens) pruning
 * changes nothing: the outputs are attn_selective's. A step costs time proportional to the live
 * tokens (an eviction moves one token's rows, never the cache), so with a budget K its cost stays
 * flat as the context grows. The fields are the cache's report; read them, do not write them.
 */
typedef struct attn_selcache {
  size_t capacity;    /**< slots (live tokens the memory holds, the step's new one included) */
  size_t h_kv, d, dv; /**< key/value heads and widths */
  float tau;          /**< evict when F_j >= tau (+inf: never) */
  size_t budget;      /**< at most this many live tokens after a step (0: no budget) */
  size_t live;        /**< live tokens now */
  size_t tokens;      /**< tokens appended since init (the next position) */
  size_t evicted;     /**< tokens evicted since init */
  void *memory;       /**< the caller's memory: K, V, F and positions of the live slots */
} attn_selcache;

/** Bytes of memory a cache of `capacity` slots needs (K, V, F and a position per slot).
 *  @retval ATTN_OK, ATTN_E_NULL_POINTER, ATTN_E_ZERO_SIZE, ATTN_E_SIZE_OVERFLOW. */
ATTN_API attn_status attn_selcache_size(size_t capacity, size_t h_kv, size_t d, size_t dv, size_t *bytes);

/**
 * Bind an empty cache to memory (at least attn_selcache_size bytes, aligned for float; 8-byte
 * aligned is fastest).
 * @retval ATTN_OK, ATTN_E_NULL_POINTER, ATTN_E_ZERO_SIZE (capacity, heads or widths 0),
 *         ATTN_E_SIZE_OVERFLOW, ATTN_E_WORKSPACE_TOO_SMALL (memory), ATTN_E_BAD_ARGUMENT (tau
 *         NaN; a budget of 1, or one above capacity - 1: a step needs a slot for the new token;
 *         memory not aligned for float).
 */
ATTN_API attn_status attn_selcache_init(attn_selcache *cache, size_t capacity, size_t h_kv, size_t d, size_t dv,
                                        float tau, size_t budget, void *memory, size_t bytes);

/**
 * Append n tokens of a prefill to the cache: their keys and values (the layouts of shape.k and
 * shape.v of desc, whose n_kv must be n; they take positions cache->tokens ..) and F, then evict
 * as a step does. f holds F of every position so far, cache->tokens + n floats: what
 * attn_selective returned in f for the whole sequence (chunked prefill carries it from call to
 * call); the live tokens' F are refreshed from it too, so loads may follow each chunk of a
 * prefill. A cache built this way continues the sequence of the prefill.
 * K and V may be fp16 or bf16 (desc->shape.kv_type, since 0.6.0): the cache keeps fp32 K and V
 * (its memory and attn_selcache_size do not depend on the type), and converts them exactly here,
 * so a cache fed half K/V holds what one fed their values as floats would.
 * @retval ATTN_OK, ATTN_E_NULL_POINTER, the shape statuses of attn_selective (the cache's heads
 *         and widths must be desc's: ATTN_E_STATE_MISMATCH otherwise; ATTN_E_BAD_DTYPE),
 *         ATTN_E_WORKSPACE_TOO_SMALL
 *         (more than capacity live tokens before eviction), ATTN_E_ALIASING (k, v or f
 *         overlapping the cache's memory). On error the cache is unchanged.
 */
ATTN_API attn_status attn_selcache_load(attn_selcache *cache, const attn_selective_desc *desc, const void *k,
                                        const void *v, const float *f);

/**
 * One decode step: the new token's q (h_q rows of d), k and v (h_kv rows), the output o (h_q
 * rows of dv) and optional lse, in the layouts of desc (shape.n_q = shape.n_kv = 1; h_kv, d, dv
 * those of the cache, ATTN_E_STATE_MISMATCH otherwise). The workspace is attn_selective's for a
 * descriptor with n_kv = capacity (attn_selcache_workspace_size). The new token's k and v are of
 * desc->shape.kv_type (fp32, fp16 or bf16; converted into the cache's fp32 slots, as
 * attn_selcache_load does); the attention runs over the cache's fp32 K and V.
 * @retval ATTN_OK and the statuses of attn_selective, plus ATTN_E_WORKSPACE_TOO_SMALL when every
 *         slot is live (no room for the new token: give a budget or more capacity). On error
 *         neither o, lse nor the cache is changed. Not reentrant on one cache.
 */
ATTN_API attn_status attn_selcache_step(const attn_selective_desc *desc, attn_selcache *cache, const void *q,
                                        const void *k, const void *v, void *o, float *lse, void *workspace,
                                        size_t workspace_size);

/**
 * One decode step of each of `count` caches in one call (since 0.11.0): sequence b's new token is
 * row b of q, k, v, o and lse in the layouts of desc (shape.n_q = shape.n_kv = count; h_kv, d, dv
 * those of every cache), caches[b] its cache. Each cache steps exactly as attn_selcache_step with
 * a one-token descriptor of desc's fields would step it (appends, attends, adds its selection,
 * evicts): o, lse and every cache's state are those calls' bit for bit, for any threads; the
 * attention of all sequences goes to shape.threads in one dispatch. The caches must be distinct
 * and their memories must not overlap each other or any tensor. The workspace:
 * attn_selcache_step_batch_workspace_size.
 * @retval ATTN_OK and the statuses of attn_selcache_step, plus ATTN_E_ZERO_SIZE (count 0),
 *         ATTN_E_NULL_POINTER (caches or an entry NULL), ATTN_E_BAD_ARGUMENT (shape.n_q or n_kv
 *         not count), ATTN_E_ALIASING (two caches' memories overlap). On error neither o, lse nor
 *         any cache is changed. Not reentrant on one cache.
 */
ATTN_API attn_status attn_selcache_step_batch(const attn_selective_desc *desc, attn_selcache *const *caches,
                                              size_t count, const void *q, const void *k, const void *v, void *o,
                                              float *lse, void *workspace, size_t workspace_size);

/** Workspace bytes of attn_selcache_step_batch for desc and these caches (enough for any of their
 *  steps while their capacities hold; since 0.11.0). */
ATTN_API attn_status attn_selcache_step_batch_workspace_size(const attn_selective_desc *desc,
                                                             attn_selcache *const *caches, size_t count, size_t *bytes);

/** Workspace bytes of attn_selcache_step for desc and cache. */
ATTN_API attn_status attn_selcache_workspace_size(const attn_selective_desc *desc, const attn_selcache *cache,
                                                  size_t *bytes);

/** The bytes of K, V, F and positions the live tokens hold now (the memory the pruning keeps). */
ATTN_API attn_status attn_selcache_live_bytes(const attn_selcache *cache, size_t *bytes);

/** Snapshot / restore: copy src's live tokens and report (tau and budget included) into dst (same
 *  capacity, heads and widths, ATTN_E_STATE_MISMATCH otherwise; non-overlapping memory,
 *  ATTN_E_ALIASING otherwise). */
ATTN_API attn_status attn_selcache_copy(attn_selcache *dst, const attn_selcache *src);

/* ---------------------------------------------------------------------------------------------
 * Analysis (spec 7; since 0.5.0): per-row statistics of the attention weights, computed in the
 * streamed kernels (softmax, GAU, selective) or through the explicit matrix (every variant), and
 * the explicit n_q x n_kv attention matrix of any variant for small n.
 *
 * A row's weights w_ij are what its output is made of, o_i = sum_j w_ij v_j (masked pairs: 0):
 *   softmax: softmax_j(s_ij) over the visible keys;  selective: softmax_j(s_ij - F_ij);
 *   GAU: relu(s_ij + b_ij)^2 t_i;  linear (every map, decay, gate, window): the weight the call
 *   gives v_j, normalisation, scale, gates and beta included (it may be negative: identity map).
 * Statistics of row i over its n_i visible keys (the mask's, whatever their weights), with
 * W_i = sum_j |w_ij| and p_ij = |w_ij| / W_i:
 *   count    n_i (a float, exact up to 2^24);
 *   entropy  H_i = -sum_j p_ij log p_ij in nats (0 log 0 = 0); for softmax-type rows
 *            LSE_i - sum_j p_ij s_ij (selective: with s - F), computed in the streamed kernel;
 *   sparsity S_i = mean_j |w_ij| / sqrt(mean_j w_ij^2) = W_i / sqrt(n_i sum_j w_ij^2), in
 *            [1/sqrt(n_i), 1], smaller is sparser (seed 000's measure; independent of a row
 *            factor, so normalised or not gives the same S).
 * A row with no visible key or with W_i = 0 gets count n_i and NaN entropy and sparsity; a row
 * whose weights are not all finite gets NaN entropy and sparsity (the outputs' policy). The
 * streamed sums are fp32 (as the outputs): attn_gau_stats gives NaN for a row whose weights leave
 * float's range in them (sum w^2 above ~3e38: weights above ~1e18, or every weight below ~1e-19);
 * attn_matrix_stats sums in double.
 * ------------------------------------------------------------------------------------------- */

/** Where per-row statistics go: three optional arrays (NULL: not wanted; at least one must be
 *  given) of n_q x H floats, element (i, h) at i * layout.row_stride + h * layout.head_stride (H:
 *  the call's output heads). None may overlap another, an input or an output of the call. */
typedef struct attn_row_stats {
  float *entropy;     /**< H_i, nats */
  float *sparsity;    /**< S_i */
  float *count;       /**< n_i */
  attn_layout layout; /**< strides of all three (attn_row_stats_init: {H, 1}) */
} attn_row_stats;

/** Point stats at the three arrays (any may be NULL) with the token-major layout {heads, 1}.
 *  @retval ATTN_OK, ATTN_E_NULL_POINTER (stats NULL), ATTN_E_ZERO_SIZE (heads 0). */
ATTN_API attn_status attn_row_stats_init(attn_row_stats *stats, size_t heads, float *entropy, float *sparsity,
                                         float *count);

/**
 * attn_softmax, attn_gau and attn_selective with per-row statistics, computed in the same
 * streamed pass (no n x n buffer, no second pass over K or V; the bench's *_stats rows give
 * their cost). Outputs o, lse and f exactly as the plain calls; the workspace is theirs
 * (*_workspace_size covers the statistics since 0.5.0).
 * @retval the plain call's statuses, plus ATTN_E_NULL_POINTER (stats NULL, or all three arrays
 *         NULL), ATTN_E_BAD_STRIDE (a stats layout that overlaps itself), ATTN_E_ALIASING (a
 *         stats array overlapping another, an input or an output). On error nothing is written.
 */
ATTN_API attn_status attn_softmax_stats(const attn_softmax_desc *desc, const void *q, const void *k, const void *v,
                                        void *o, float *lse, const attn_row_stats *stats, void *workspace,
                                        size_t workspace_size);
ATTN_API attn_status attn_gau_stats(const attn_gau_desc *desc, const void *q, const void *k, const void *v, void *o,
                                    const attn_row_stats *stats, void *workspace, size_t workspace_size);
ATTN_API attn_status attn_selective_stats(const attn_selective_desc *desc, const void *q, const void *k, const void *v,
                                          void *o, float *lse, float *f, const attn_row_stats *stats, void *workspace,
                                          size_t workspace_size);

/** The variant of an attn_call. */
typedef enum attn_kind {
  ATTN_KIND_SOFTMAX = 0,  /**< desc: attn_softmax_desc */
  ATTN_KIND_LINEAR = 1,   /**< desc: attn_linear_desc (attn_linear, or attn_linear_gated when it has
                               a gate or beta); a fresh sequence (no state) */
  ATTN_KIND_GAU = 2,      /**< desc: attn_gau_desc */
  ATTN_KIND_SELECTIVE = 3 /**< desc: attn_selective_desc */
} attn_kind;

/** One call of any variant, for the explicit analysis functions: its kind and descriptor, and the
 *  inputs its weights depend on (v and o are not needed: the functions make their own). */
typedef struct attn_call {
  attn_kind kind;
  const void *desc;      /**< the descriptor of that kind (its v and o layouts and dv are
                                    ignored) */
  const float *q, *k;    /**< in the layouts of desc */
  const float *log_gate; /**< LINEAR with a gate: as attn_linear_gated's; NULL otherwise */
  const float *beta;     /**< LINEAR with beta: as attn_linear_gated's; NULL otherwise */
  const float *f;        /**< SELECTIVE: F of the keys before the call, n_kv floats of which
                                    the first n_kv - n_q are read (attn_selective's f on entry);
                                    NULL: a fresh sequence. Never written */
} attn_call;

/** The largest n_kv of the explicit analysis functions (their workspace holds an n_kv x n_kv
 *  identity that every value head shares, 64 MiB at the limit, besides the variant's own
 *  workspace; attn_matrix_stats's also the n_q x H x n_kv matrix); ATTN_E_TOO_LARGE above it. */
#define ATTN_MATRIX_MAX_KV 4096

/** Workspace bytes of attn_matrix for call (its sizes and kinds checked as attn_matrix does). */
ATTN_API attn_status attn_matrix_workspace_size(const attn_call *call, size_t *bytes);

/**
 * The explicit attention matrix of any variant: a[(i, h, j)] = w_ij of output head h (the weights
 * defined above; 0 for masked pairs), element (i, h, j) at i * layout.row_stride +
 * h * layout.head_stride + j for i < n_q, h < H, j < n_kv. Computed through the variant's own
 * kernels on the active ISA path (its call with V = the identity, dv = n_kv), so it is the matrix
 * the calls use, to their precision. For rank and plots; O(n_kv^2) time per row block and
 * memory: n_kv <= ATTN_MATRIX_MAX_KV. FLASH is the sum of its two parts' matrices.
 * @retval ATTN_OK, the statuses of the variant's call for its descriptor and inputs,
 *         ATTN_E_NULL_POINTER (call, desc, q, k, a or the workspace NULL; a gate or beta the
 *         descriptor asks for), ATTN_E_BAD_ARGUMENT (an unknown kind), ATTN_E_TOO_LARGE
 *         (n_kv > ATTN_MATRIX_MAX_KV), ATTN_E_BAD_DTYPE (a kv_type, q_type or o_type other than
 *         ATTN_F32: call.q and call.k are read as floats), ATTN_E_BAD_STRIDE (a layout smaller than a row or
 *         overlapping itself), ATTN_E_WORKSPACE_TOO_SMALL, ATTN_E_ALIASING (a overlapping an
 *         input or the workspace, or the workspace an input). On error a is not written. Reentrant.
 */
ATTN_API attn_status attn_matrix(const attn_call *call, float *a, attn_layout layout, void *workspace,
                                 size_t workspace_size);

/** Workspace bytes of attn_matrix_stats for call. */
ATTN_API attn_status attn_matrix_stats_workspace_size(const attn_call *call, size_t *bytes);

/**
 * Per-row statistics of any variant through its explicit matrix (the path for linear attention,
 * whose chunkwise form has no streamed weights; also a cross-check of the streamed ones): the
 * definitions above, n_kv <= ATTN_MATRIX_MAX_KV.
 * @retval the statuses of attn_matrix, plus those of attn_softmax_stats for stats.
 */
ATTN_API attn_status attn_matrix_stats(const attn_call *call, const attn_row_stats *stats, void *workspace,
                                       size_t workspace_size);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_H */
