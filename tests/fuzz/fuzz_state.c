/*
 * libFuzzer target: attn_linear_state_init, attn_linear_state_reset and attn_linear_state_copy.
 *
 * From the bytes: two valid descriptors (the second of the same shape and mode or of another):
 * every feature map, element-wise ones normalised or not, the exponential maps (exp, favor,
 * dsoftmax) normalised with their default temperature, scale and eps (dsoftmax: scale 1, eps 0),
 * favor with m = 0 (4d), d or any m up to 4d + 3 and W from a seed or the caller; for the
 * element-wise maps sometimes a SCALAR or FEATURE gate and / or beta with h_g gate heads; key,
 * value (and gate) head counts h_k, h_v, h_g apart, so that descriptors of different heads can
 * share a state shape through L = lcm(h_k, h_v (, h_g)); m = 0 or d. Each state is of either kind,
 * rows of dv + 2 floats (attn_linear_state_init) or aligned ones (dv + 2 rounded up to 16,
 * attn_linear_state_init_aligned, 64-byte aligned memory), bound to guarded memory of exactly
 * L * m * ld floats, and a sequence of operations runs on them: init of its kind
 * (valid, memory one byte or more too small, NULL state / memory / descriptor, an invalid
 * descriptor: a zero size, head counts that do not divide H, a bad m or map, a window the
 * descriptor cannot take (with a gate or beta, for every map), a bad normalize flag, an exponential map
 * un-normalised, a bad gate kind; aligned: memory off a 64-byte line), reset (valid, NULL,
 * unbound), copy between states of the same or another shape or kind, into itself, between states
 * whose memory overlaps, with NULL. Checks: the state sizes and the state's shape fields
 * (heads = L, m, dv, ld of its kind, map, mode); the expected
 * status; on error every byte of the states' memory and structs unchanged; on success init and
 * reset zero exactly the state's floats (sums, z and offsets), copy copies them bitwise with the
 * token count, keeps dst's data pointer and writes nothing outside dst; guards intact throughout.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "linear_util.h"

enum { MAX_H = 8, MAX_D = 64, STATES = 3, OPS = 8 };

typedef struct slot {
  attn_linear_desc d;
  int aligned; /* rows of dv + 2 rounded up to 16 (attn_linear_state_init_aligned) */
  attn_linear_state s;
  float *mem; /* guarded: floats(d) floats; slot 2 lies inside slot 0's memory when they overlap */
  size_t floats;
} slot;

static int is_xmap(attn_feature_map fm) {
  return fm == ATTN_FEATURE_EXP || fm == ATTN_FEATURE_FAVOR || fm == ATTN_FEATURE_DSOFTMAX;
}
static int is_gated(const attn_linear_desc *d) { return d->gate != ATTN_GATE_NONE || d->beta; }
/* State heads: lcm(h_k, h_v), and h_g (0: H) with a gate or beta. */
static size_t heads_of(const attn_linear_desc *d) {
  const size_t kv = fz_state_heads(d->shape.h_k, d->shape.h_v);
  return is_gated(d) ? ref_lcm(kv, d->h_g ? d->h_g : d->shape.h_q) : kv;
}
/* The feature size: d, or favor's m (0: 4d). */
static size_t m_of(const attn_linear_desc *d) {
  return d->feature_map != ATTN_FEATURE_FAVOR ? d->shape.d : d->m ? d->m : 4 * d->shape.d;
}
/* Floats per row of a slot's state: dv + 2, or rounded up to 16 for an aligned one. */
static size_t ld_of(const slot *sl) { return sl->aligned ? lu_state_ld_aligned(sl->d.shape.dv) : sl->d.shape.dv + 2; }
static size_t floats_of(const slot *sl) { return heads_of(&sl->d) * m_of(&sl->d) * ld_of(sl); }

/* Whether two slots' states have one shape, mode and row width. */
static int same_state_shape(const slot *x, const slot *y) {
  const attn_linear_desc *a = &x->d, *b = &y->d;
  return heads_of(a) == heads_of(b) && m_of(a) == m_of(b) && a->shape.dv == b->shape.dv &&
         a->feature_map == b->feature_map && a->normalize == b->normalize && ld_of(x) == ld_of(y);
}

/* attn_linear_state_init or _init_aligned, as the slot's kind. */
static attn_status init_as(const slot *sl, attn_linear_state *s, const attn_linear_desc *d, void *mem, size_t bytes) {
  return sl->aligned ? attn_linear_state_init_aligned(s, d, mem, bytes) : attn_linear_state_init(s, d, mem, bytes);
}

static void check_bound(const slot *sl, const char *what) {
  const attn_linear_state *s = &sl->s;
  FZ_CHECK(s->heads == heads_of(&sl->d) && s->m == m_of(&sl->d) && s->dv == sl->d.shape.dv && s->ld == ld_of(sl) &&
               s->feature_map == sl->d.feature_map && s->normalize == sl->d.normalize && s->data == sl->mem,
           "%s: state shape {heads %zu, m %zu, dv %zu, ld %zu}", what, s->heads, s->m, s->dv, s->ld);
}

/* A caller's FAVOR+ W of any size the fuzzer draws (m up to 4 * MAX_D + 3 rows of d): finite. */
static float favor_w[(4 * MAX_D + 3) * MAX_D];

/* A valid descriptor drawn from the bytes (see the header). */
static void draw_desc(fz_in *in, attn_linear_desc *d) {
  const attn_feature_map fm = (attn_feature_map)fz_pick(in, ATTN_FEATURE_COUNT);
  const size_t heads = fz_size(in, MAX_H), h_k = fz_divisor(in, heads), h_v = fz_divisor(in, heads);
  const size_t dd = fz_size(in, MAX_D), dv = fz_size(in, MAX_D);
  attn_linear_desc_init(d, 1, 1, 1, h_k, dd, dv, fm); /* the map's own scale and eps */
  d->normalize = is_xmap(fm) || fz_pick(in, 3) != 0;  /* the exponential maps: normalised only */
  d->m = fz_pick(in, 2) ? 0 : dd;
  if (fm == ATTN_FEATURE_FAVOR) {
    if (fz_pick(in, 2)) d->m = fz_size(in, 4 * dd + 3);
    d->favor_source = (attn_favor_source)fz_pick(in, 4); /* chi, sqrt(d), caller W, caller W^T */
    d->favor_seed = fz_u8(in);
    d->favor_w = favor_w;
  }
  size_t h_q = fz_state_heads(h_k, h_v);     /* every count divides it */
  if (!is_xmap(fm) && fz_pick(in, 3) == 0) { /* a gate and / or beta (causal, element-wise maps) */
    const unsigned g = 1 + fz_pick(in, 5);   /* bit 0: beta; 1 .. 5: SCALAR, FEATURE or none */
    d->gate = g <= 2 ? ATTN_GATE_SCALAR : g <= 4 ? ATTN_GATE_FEATURE : ATTN_GATE_NONE;
    d->beta = (g & 1u) || d->gate == ATTN_GATE_NONE;
    d->h_g = fz_pick(in, 3) ? fz_divisor(in, heads) : 0;
    if (d->h_g) h_q = ref_lcm(h_q, d->h_g);
    const size_t hg = d->h_g ? d->h_g : h_q, w = d->gate == ATTN_GATE_FEATURE ? dd : 1;
    d->gate_layout = (attn_layout){hg * w, w};
    d->beta_layout = (attn_layout){hg, 1};
  }
  attn_shape_init(&d->shape, 1, 1, h_q, h_k, h_v, dd, dv);
}

/* A descriptor that state_init must refuse with the returned status (one fault). */
static attn_status bad_desc(fz_in *in, attn_linear_desc *d) {
  const int xmap = is_xmap(d->feature_map);
  switch (fz_pick(in, 6)) {
    case 0:
      d->shape.dv = 0;
      return ATTN_E_ZERO_SIZE;
    case 1:
      d->h_g = 0; /* H = max(h_q, h_k, h_v): fz_break_heads's rule */
      fz_break_heads(in, &d->shape);
      return ATTN_E_BAD_HEADS;
    case 2:
      if (d->feature_map == ATTN_FEATURE_FAVOR || (fz_u8(in) & 1)) /* favor takes any m >= 1 */
        d->feature_map = (attn_feature_map)(ATTN_FEATURE_COUNT + fz_u8(in));
      else
        d->m = d->shape.d + 1 + fz_u8(in);
      return ATTN_E_BAD_FEATURE_MAP;
    case 3: /* a window with a gate or beta (every map takes a window without one since 0.4.0; none
             * with h_k != h_v, which comes first) */
      d->mask = attn_mask_window(fz_u8(in), fz_u8(in) & 1 ? 0 : ATTN_UNBOUNDED);
      if (!is_gated(d)) d->beta = 1;
      return d->shape.h_k != d->shape.h_v || d->shape.h_q != fz_heads_out(d->shape.h_q, d->shape.h_k, d->shape.h_v)
                 ? ATTN_E_BAD_HEADS
                 : ATTN_E_BAD_WINDOW;
    case 4:
      d->normalize = fz_u8(in) & 1 ? 2 : -1;
      return ATTN_E_BAD_ARGUMENT;
    default:
      if (xmap) {
        d->normalize = 0;
        return ATTN_E_BAD_NORMALIZATION;
      }
      d->gate = (attn_gate_kind)(ATTN_GATE_FEATURE + 1 + fz_u8(in) % 8);
      return ATTN_E_BAD_GATE;
  }
}

static void fill(fz_in *in, slot *sl) {
  for (size_t e = 0; e < sl->floats; ++e) sl->s.data[e] = fz_value(in, -1.0f, 1.0f);
  sl->s.tokens = fz_u8(in);
}

static void snap_all(slot *sl, fz_snap *snaps, fz_snap *structs, float *shared, size_t shared_floats) {
  for (int i = 0; i < STATES; ++i) {
    fz_snap_take(&snaps[i], sl[i].mem, sizeof(float) * sl[i].floats);
    fz_snap_take(&structs[i], &sl[i].s, sizeof sl[i].s);
  }
  fz_snap_take(&snaps[STATES], shared, sizeof(float) * shared_floats);
}

/* Every snapshot unchanged except the memory in `may_change` (bit i: slot i, bit STATES: the shared
 * buffer) and the struct of slot `changed` (-1: none); then the snapshots are released. */
static void check_all(fz_snap *snaps, fz_snap *structs, unsigned may_change, int changed, const char *what) {
  for (int i = 0; i <= STATES; ++i) {
    if (!(may_change >> i & 1u)) fz_snap_check(&snaps[i], what);
    if (i < STATES && i != changed) fz_snap_check(&structs[i], what);
    fz_snap_free(&snaps[i]);
    if (i < STATES) fz_snap_free(&structs[i]);
  }
}

/* The memory a write to slot a may change: its own, or with overlap slots 0, 2 and the buffer. */
static unsigned written(int overlap, int a) { return overlap && a != 1 ? (1u << 0 | 1u << 2 | 1u << STATES) : 1u << a; }

static void check_zero(const slot *sl, const char *what) {
  for (size_t e = 0; e < sl->floats; ++e) FZ_CHECK(sl->s.data[e] == 0.0f, "%s: float %zu not zeroed", what, e);
  FZ_CHECK(sl->s.tokens == 0, "%s: tokens not zeroed", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  fz_init(&in, data, size);
  if (!favor_w[0])
    for (size_t e = 0; e < sizeof favor_w / sizeof favor_w[0]; ++e) favor_w[e] = (float)(e % 7) * 0.25f - 0.75f;
  slot sl[STATES];
  /* slot 0: a shape; slot 1: the same or another; slot 2: slot 0's shape, its memory either its
   * own or overlapping slot 0's (inside one shared guarded buffer) */
  for (int i = 0; i < 2; ++i) draw_desc(&in, &sl[i].d), sl[i].aligned = (int)fz_pick(&in, 2);
  if (fz_pick(&in, 2)) sl[1].d = sl[0].d;
  sl[2].d = sl[0].d;
  sl[2].aligned = sl[0].aligned;
  for (int i = 0; i < STATES; ++i) sl[i].floats = floats_of(&sl[i]);
  /* slot 2 starts inside slot 0 (an aligned one on a line: then slot 0 must hold two) */
  const size_t step = sl[0].aligned ? 16 : 1;
  const int overlap = sl[0].floats > step && fz_pick(&in, 2);
  size_t shift = 0;
  if (overlap) shift = step * (1 + fz_pick(&in, 256) % ((sl[0].floats - 1) / step));
  const size_t shared_floats = overlap ? shift + sl[0].floats : 0;
  float *shared = overlap ? fz_alloc(sizeof(float) * shared_floats, 0) : NULL;
  for (int i = 0; i < STATES; ++i) {
    sl[i].mem = (overlap && i == 0)   ? shared
                : (overlap && i == 2) ? shared + shift
                                      : fz_alloc(sizeof(float) * sl[i].floats, 0);
    size_t bytes = 0, other = 0;
    const attn_status size_st =
        sl[i].aligned ? attn_linear_state_size_aligned(&sl[i].d, &bytes) : attn_linear_state_size(&sl[i].d, &bytes);
    fz_check_status("state_size", size_st, ATTN_OK);
    FZ_CHECK(bytes == sizeof(float) * sl[i].floats, "state_size %zu, expected %zu floats", bytes, sl[i].floats);
    fz_check_status(
        "state_size of the other kind",
        sl[i].aligned ? attn_linear_state_size(&sl[i].d, &other) : attn_linear_state_size_aligned(&sl[i].d, &other),
        ATTN_OK);
    FZ_CHECK(sl[i].aligned ? other <= bytes : other >= bytes, "state sizes of the two kinds: %zu, %zu", bytes, other);
    fz_check_status("state_init", init_as(&sl[i], &sl[i].s, &sl[i].d, sl[i].mem, bytes), ATTN_OK);
    check_bound(&sl[i], "state_init");
  }
  for (int i = 0; i < STATES; ++i) fill(&in, &sl[i]); /* slot 2 overwrites the shared part of slot 0 */

  for (int op = 0; op < OPS && in.pos < in.n; ++op) {
    const int a = (int)fz_pick(&in, STATES), b = (int)fz_pick(&in, STATES);
    fz_snap snaps[STATES + 1], structs[STATES];
    snap_all(sl, snaps, structs, shared, shared_floats);
    attn_status st;
    switch (fz_pick(&in, 10)) {
      case 0: { /* init on exactly enough memory: zeroes the state */
        fz_check_status("state_init", init_as(&sl[a], &sl[a].s, &sl[a].d, sl[a].mem, sizeof(float) * sl[a].floats),
                        ATTN_OK);
        check_zero(&sl[a], "state_init");
        check_bound(&sl[a], "state_init");
        check_all(snaps, structs, written(overlap, a), a, "state_init of another state");
        break;
      }
      case 1: { /* init on too little memory */
        const size_t bytes = sizeof(float) * sl[a].floats - 1 - fz_u8(&in) % (sizeof(float) * sl[a].floats);
        fz_check_status("state_init(small)", init_as(&sl[a], &sl[a].s, &sl[a].d, sl[a].mem, bytes),
                        ATTN_E_WORKSPACE_TOO_SMALL);
        check_all(snaps, structs, 0, -1, "state_init on too little memory");
        break;
      }
      case 2: { /* init with a NULL argument or an invalid descriptor */
        attn_linear_desc bad = sl[a].d;
        const unsigned k = fz_pick(&in, 4);
        const attn_status want = k == 3 ? bad_desc(&in, &bad) : ATTN_E_NULL_POINTER;
        st = init_as(&sl[a], k == 0 ? NULL : &sl[a].s, k == 1 ? NULL : &bad, k == 2 ? NULL : sl[a].mem,
                     sizeof(float) * sl[a].floats);
        fz_check_status("state_init(bad)", st, want);
        check_all(snaps, structs, 0, -1, "a refused state_init");
        break;
      }
      case 9: { /* an aligned init on memory off a line, whatever its size (the line is checked first) */
        size_t in_floats = 1 + fz_pick(&in, 15);
        if ((uintptr_t)(sl[a].mem + in_floats) % 64 == 0) in_floats++; /* slot 2's memory may be off a line */
        st = attn_linear_state_init_aligned(&sl[a].s, &sl[a].d, sl[a].mem + in_floats, sizeof(float) * sl[a].floats);
        fz_check_status("state_init_aligned(off a line)", st, ATTN_E_BAD_ARGUMENT);
        check_all(snaps, structs, 0, -1, "a refused state_init_aligned");
        break;
      }
      case 3: /* reset */
        fz_check_status("state_reset", attn_linear_state_reset(&sl[a].s), ATTN_OK);
        check_zero(&sl[a], "state_reset");
        check_all(snaps, structs, written(overlap, a), a, "state_reset of another state");
        break;
      case 4: { /* reset NULL, or a state without memory */
        attn_linear_state unbound = sl[a].s;
        unbound.data = NULL;
        fz_check_status("state_reset(NULL)", attn_linear_state_reset(fz_pick(&in, 2) ? NULL : &unbound),
                        ATTN_E_NULL_POINTER);
        check_all(snaps, structs, 0, -1, "a refused state_reset");
        break;
      }
      case 5: { /* copy with NULL */
        attn_linear_state unbound = sl[b].s;
        unbound.data = NULL;
        const unsigned k = fz_pick(&in, 3);
        st = attn_linear_state_copy(k == 0 ? NULL : &sl[a].s, k == 1 ? NULL : k == 2 ? &unbound : &sl[b].s);
        fz_check_status("state_copy(NULL)", st, ATTN_E_NULL_POINTER);
        check_all(snaps, structs, 0, -1, "a refused state_copy");
        break;
      }
      default: { /* copy b into a */
        const int same_shape = same_state_shape(&sl[a], &sl[b]);
        const int same_mem = sl[a].s.data == sl[b].s.data;
        const int overlapping = !same_mem && overlap && a != 1 && b != 1;
        const attn_status want = !same_shape ? ATTN_E_STATE_MISMATCH : overlapping ? ATTN_E_ALIASING : ATTN_OK;
        float *src = fz_calloc(sl[b].floats, sizeof(float));
        memcpy(src, sl[b].s.data, sizeof(float) * sl[b].floats);
        const uint64_t tokens = sl[b].s.tokens;
        st = attn_linear_state_copy(&sl[a].s, &sl[b].s);
        fz_check_status("state_copy", st, want);
        if (st == ATTN_OK) {
          FZ_CHECK(sl[a].s.data == sl[a].mem, "state_copy changed dst's data pointer");
          FZ_CHECK(memcmp(sl[a].s.data, src, sizeof(float) * sl[a].floats) == 0 && sl[a].s.tokens == tokens,
                   "state_copy: not a bitwise copy");
          check_all(snaps, structs, written(overlap, a), a, "state_copy: another state");
        } else {
          check_all(snaps, structs, 0, -1, "a refused state_copy");
        }
        free(src);
      }
    }
  }
  for (int i = 0; i < STATES; ++i) {
    if (overlap && i != 1) continue; /* inside the shared buffer */
    FZ_CHECK(fz_guards_intact(sl[i].mem), "state memory guard zone written");
    fz_free(sl[i].mem);
  }
  if (shared) {
    FZ_CHECK(fz_guards_intact(shared), "shared state memory guard zone written");
    fz_free(shared);
  }
  return 0;
}
