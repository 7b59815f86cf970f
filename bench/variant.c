/* variant.c: the helpers every adapter (bench/variants/) shares. */
#include "variant.h"

const attn_threads *bench_call_threads = NULL;
int bench_call_workers = 1;

/* Powers of two from lo to hi. */
static size_t powers_of_two(size_t lo, size_t hi, size_t *out) {
  size_t n = 0;
  for (size_t v = lo; v <= hi && n < BENCH_MAX_SIZES; v *= 2) out[n++] = v;
  return n;
}

/* Prefill: --sizes, or powers of two, up to --quad-n-max for the quadratic variants; decode:
 * --caches, or powers of two from --cache-min to --cache-max. */
size_t bench_sweep_sizes(const bench_variant *v, const bench_sweep *sw, size_t *out) {
  if (v->mode == BENCH_DECODE && sw->ncaches) {
    for (size_t i = 0; i < sw->ncaches; i++) out[i] = sw->caches[i];
    return sw->ncaches;
  }
  if (v->mode == BENCH_DECODE) return powers_of_two(sw->cache_min, sw->cache_max, out);
  size_t hi = v->quadratic ? sw->quad_n_max : sw->n_max, n = 0;
  if (!sw->nsizes) return powers_of_two(sw->n_min, hi, out);
  for (size_t i = 0; i < sw->nsizes; i++)
    if (sw->sizes[i] <= hi) out[n++] = sw->sizes[i];
  return n;
}

bench_shape bench_shape_start(const bench_variant *v, const bench_sweep *sw, bench_kind kind, size_t n, size_t d) {
  bench_shape s = {0};
  s.kind = kind;
  s.h_q = sw->heads;
  s.h_kv = sw->kv_heads;
  s.kv_head_major = sw->kv_head_major;
  s.qkv_head_major = sw->qkv_head_major;
  s.d = s.dv = d;
  s.map = v->map;
  s.causal = v->causal;
  s.normalize = v->normalize;
  s.gate = v->gate;
  s.fixed_decay = v->fixed_decay;
  s.exclusive = v->exclusive;
  if (v->qk_shared) { /* Mamba-2's layer, whatever --heads and --kv-heads say */
    s.qk_shared = 1;
    s.h_q = 1;
    s.h_kv = BENCH_MAMBA2_HEADS;
    s.dv = BENCH_MAMBA2_P;
  }
  s.n_q = s.n_kv = n;
  s.window_left = s.window_right = ATTN_UNBOUNDED;
  return s;
}

size_t bench_variant_index(const bench_variant *const *list, size_t n, const bench_variant *v) {
  size_t i = 0;
  while (i < n && list[i] != v) i++;
  return i;
}

bench_cost bench_cost_plain(bench_shape *s, attn_isa isa) {
  (void)isa;
  return bench_cost_of(s);
}
