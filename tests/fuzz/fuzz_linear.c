/*
 * libFuzzer target: attn_linear_desc_init, attn_shape_init, attn_linear_feature_size,
 * attn_linear_state_size, attn_linear_state_init, attn_linear_chunk_size,
 * attn_linear_workspace_size and attn_linear.
 *
 * From the bytes: the ISA path, shapes (n up to 200, d and dv up to 130), head counts h_q, h_k
 * and h_v, each a divisor of H = max of them (up to 8: MHA, GQA/MQA, Mamba2-style value groups,
 * h_k != h_v with lcm(h_k, h_v) state heads), feature map, feature size m (0 or d), causal or
 * full mask, normalised or not, scale (0 included; negative when un-normalised), eps (0
 * included), chunk size, layouts (packed QKV included), values, and for causal calls a state:
 * none, or one or two calls in a row on the same state (a prefill continued by a decode step or
 * another chunk, with its own h_q). The last call gets up to two faults (fuzz_common.h, head
 * counts that do not divide H included, plus a bad feature map or m, a mask other than full or
 * causal, a bad normalize flag, chunk, scale or eps, a state of another shape (heads, m, dv, ld,
 * map, mode), a NULL state memory, a state on a bidirectional call, a state over o).
 * Checks: the queries answer what the header documents (m = d, the chunk, the state bytes
 * lcm(h_k, h_v) * m * (dv + 2) floats, one workspace size for every layout) or the status of the
 * faulty descriptor without writing; calls return the expected status; inputs are unchanged; on
 * error o, the workspace and the state (struct and memory) are unchanged; on success guards and
 * gap elements are intact, o matches the float64 reference (with the library's incoming state as
 * the reference's prefix) and the state (S, z and the offset column) matches the reference's
 * state and token count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "tolerances.h"

enum { MAX_N = 200, MAX_D = 130, MAX_H = 8 };
/* n_q * n_kv * H * (d + dv) above this is scaled down (the reference is quadratic in n). */
#define WORK_LIMIT ((size_t)600000)

enum { F_FEATURE_MAP = FZ_COMMON_FAULTS, F_MASK, F_MODE, F_CHUNK, F_SCALE, F_EPS, F_STATE, F_COUNT };

/* What stays fixed across the calls of one input (the state's shape and mode). */
typedef struct lin_shape {
  size_t h_k, h_v, L, d, dv; /* L = lcm(h_k, h_v) state heads */
  attn_feature_map fm;
  int normalize;
  float lo, hi, vamp; /* q, k in [lo, hi]; v in [-vamp, vamp] */
} lin_shape;

/* A state bound to guarded memory of exactly L * d * (dv + 2) floats. */
typedef struct lin_state {
  attn_linear_state s;
  void *mem;
  size_t bytes;
} lin_state;

static int is_causal(const attn_linear_desc *d) { return attn_mask_is_causal(d->mask); }

static void check_queries(const attn_linear_desc *d, attn_isa isa, size_t L, size_t *ws_bytes, size_t *state_bytes) {
  size_t m = 0, chunk = 0;
  fz_check_status("feature_size", attn_linear_feature_size(d, &m), ATTN_OK);
  FZ_CHECK(m == d->shape.d, "feature_size %zu, d %zu", m, d->shape.d);
  fz_check_status("chunk_size", attn_linear_chunk_size(d, &chunk), ATTN_OK);
  const size_t path_default = isa == ATTN_ISA_SCALAR ? 64 : 48;
  FZ_CHECK(chunk == (d->chunk ? d->chunk : path_default), "chunk_size %zu (desc %zu)", chunk, d->chunk);
  fz_check_status("state_size", attn_linear_state_size(d, state_bytes), ATTN_OK);
  FZ_CHECK(*state_bytes == sizeof(float) * L * m * (d->shape.dv + 2), "state_size %zu", *state_bytes);
  fz_check_status("workspace_size", attn_linear_workspace_size(d, ws_bytes), ATTN_OK);
  const attn_status null_out[4] = {attn_linear_feature_size(d, NULL), attn_linear_chunk_size(d, NULL),
                                   attn_linear_state_size(d, NULL), attn_linear_workspace_size(d, NULL)};
  for (int i = 0; i < 4; ++i) fz_check_status("size query with a NULL output", null_out[i], ATTN_E_NULL_POINTER);
}

/* Every query on a (possibly faulty) descriptor: the expected status, nothing written on error. */
static void check_queries_expect(const attn_linear_desc *dp, const fz_expect *e, size_t ws_need) {
  const char *names[4] = {"feature_size", "chunk_size", "state_size", "workspace_size"};
  size_t out[4] = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
  const attn_status st[4] = {attn_linear_feature_size(dp, &out[0]), attn_linear_chunk_size(dp, &out[1]),
                             attn_linear_state_size(dp, &out[2]), attn_linear_workspace_size(dp, &out[3])};
  for (int i = 0; i < 4; ++i) {
    fz_check_expect(names[i], st[i], e);
    FZ_CHECK(st[i] == ATTN_OK || out[i] == SIZE_MAX, "%s wrote its output on error", names[i]);
  }
  FZ_CHECK(st[3] != ATTN_OK || out[3] == ws_need, "workspace_size %zu, %zu with the default layouts", out[3], ws_need);
}

/* State rows (state head, feature) that no policy defines: every row of a state head whose key
 * or value head absorbed a non-finite k or v, or that came in non-finite. */
static unsigned char *poisoned_state_rows(const attn_shape *s, size_t L, const fz_qkv *x, const double *s0) {
  const size_t slab = s->d * (s->dv + 2);
  unsigned char *rows = fz_calloc(L * s->d, 1);
  for (size_t hs = 0; hs < L; ++hs) {
    const size_t hk = hs / (L / s->h_k), hv = hs / (L / s->h_v);
    int bad = 0;
    for (size_t e = 0; s0 && e < slab && !bad; ++e) bad = !isfinite(s0[hs * slab + e]);
    for (size_t j = 0; j < s->n_kv && !bad; ++j) bad = fz_row_nonfinite(&x->k, j, hk) || fz_row_nonfinite(&x->v, j, hv);
    memset(rows + hs * s->d, bad, s->d);
  }
  return rows;
}

/* o (and the state after the call) against the reference; s0: the state before, or NULL. */
static void check_results(const attn_linear_desc *d, const fz_qkv *x, const tu_tensor *o, const lin_state *st,
                          const double *s0, uint64_t tokens0) {
  const attn_shape *s = &d->shape;
  const size_t H = fz_heads_out(s->h_q, s->h_k, s->h_v), L = fz_state_heads(s->h_k, s->h_v);
  const size_t rows = s->n_q * H, ld = s->dv + 2, slab = s->d * ld, sfloats = L * slab;
  const size_t n_tokens = (size_t)tokens0 + s->n_kv;
  double *ro = fz_doubles(rows * s->dv), *oscale = fz_doubles(rows * s->dv), *tol = fz_doubles(rows);
  const ref_linear_problem p = {s->n_q,
                                s->n_kv,
                                s->h_q,
                                s->h_k,
                                s->h_v,
                                s->d,
                                s->dv,
                                tu_ref_map(d->feature_map),
                                is_causal(d),
                                d->normalize,
                                d->eps,
                                d->scale,
                                x->q.data,
                                x->k.data,
                                x->v.data,
                                tu_ref_layout(&x->q),
                                tu_ref_layout(&x->k),
                                tu_ref_layout(&x->v),
                                s0};
  ref_linear(&p, ro, oscale);
  for (size_t r = 0; r < rows; ++r) tol[r] = tol_linear_o(n_tokens, s->d);
  fz_compare("linear o", o, ro, oscale, tol, NULL); /* the reference applies the NaN policy */
  if (st) {
    double *rs = fz_doubles(sfloats), *sscale = fz_doubles(sfloats), *stol = fz_doubles(L * s->d);
    ref_linear_state(&p, rs, sscale);
    for (size_t r = 0; r < L * s->d; ++r) stol[r] = tol_linear_state(n_tokens);
    tu_tensor view = {st->s.data, L, s->d, ld, {slab, ld}, sfloats, NULL, 0};
    unsigned char *free_rows = fz_nonfinite() ? poisoned_state_rows(s, L, x, s0) : NULL;
    fz_compare("linear state", &view, rs, sscale, stol, free_rows);
    free(free_rows);
    FZ_CHECK(st->s.tokens == n_tokens, "state tokens %llu, expected %zu", (unsigned long long)st->s.tokens, n_tokens);
    free(rs);
    free(sscale);
    free(stol);
  }
  free(ro);
  free(oscale);
  free(tol);
}

/* A mask that is neither full nor causal: a finite left side, a finite right side other than 0, or
 * a chunk-local width. */
static attn_mask bad_mask(fz_in *in, attn_mask m) {
  switch (fz_pick(in, 3)) {
    case 0:
      m.left = fz_u8(in) * (SIZE_MAX / 512);
      break;
    case 1:
      m.right = 1 + fz_u8(in) * (SIZE_MAX / 512);
      break;
    default:
      m.chunk = 1 + fz_u8(in) * (SIZE_MAX / 512);
      break;
  }
  return m;
}

/* A state struct of another shape or mode than the call's (one field changed). */
static void state_mismatch(fz_in *in, attn_linear_state *s) {
  switch (fz_pick(in, 6)) {
    case 0:
      s->heads += 1 + fz_u8(in) % 4;
      break;
    case 1:
      s->m += 1 + fz_u8(in);
      break;
    case 2:
      s->dv += 1 + fz_u8(in);
      break;
    case 3:
      s->ld = fz_u8(in) & 1 ? s->ld - 1 : s->ld + 1 + fz_u8(in);
      break;
    case 4:
      s->normalize = !s->normalize;
      break;
    default:
      s->feature_map = (attn_feature_map)!s->feature_map;
      break;
  }
}

/* A query head count that fits the state's key and value heads (each count divides the largest). */
static size_t pick_h_q(fz_in *in, const lin_shape *sh) {
  size_t fit[MAX_H], count = 0;
  for (size_t h = 1; h <= MAX_H; ++h)
    if (fz_heads_valid(h, sh->h_k, sh->h_v)) fit[count++] = h;
  return fit[fz_pick(in, count)]; /* h = L always fits */
}

/* One call on a descriptor drawn from the bytes; faults only when `last`. Returns 0 when the call
 * failed (as expected), which ends the sequence. */
static int one_call(fz_in *in, attn_isa isa, const lin_shape *sh, lin_state *st, int last) {
  const size_t h_q = pick_h_q(in, sh), H = fz_heads_out(h_q, sh->h_k, sh->h_v);
  size_t n_q = fz_size(in, MAX_N), n_kv = fz_size(in, MAX_N);
  if (fz_pick(in, 4) == 0) n_q = n_kv = 1; /* a decode step */
  while (n_q * n_kv * H * (sh->d + sh->dv) > WORK_LIMIT) {
    if (n_q >= n_kv)
      n_q = (n_q + 1) / 2;
    else
      n_kv = (n_kv + 1) / 2;
  }
  attn_linear_desc d;
  fz_check_status("desc_init", attn_linear_desc_init(&d, n_q, n_kv, h_q, sh->h_k, sh->d, sh->dv, sh->fm), ATTN_OK);
  fz_check_shape_defaults("linear_desc_init", &d.shape, n_q, n_kv, h_q, sh->h_k, sh->h_k, sh->d, sh->dv);
  FZ_CHECK(is_causal(&d) && d.feature_map == sh->fm && (d.m == 0 || d.m == sh->d) && d.scale == 1.0f &&
               d.normalize == 1 && d.eps == 1e-6f && d.chunk == 0,
           "desc_init: defaults");
  fz_check_status("shape_init", attn_shape_init(&d.shape, n_q, n_kv, h_q, sh->h_k, sh->h_v, sh->d, sh->dv), ATTN_OK);
  fz_check_shape_defaults("shape_init", &d.shape, n_q, n_kv, h_q, sh->h_k, sh->h_v, sh->d, sh->dv);
  d.mask = st || fz_pick(in, 2) == 0 ? attn_mask_causal() : attn_mask_full();
  d.normalize = sh->normalize;
  const float eps[4] = {1e-6f, 0.0f, 1.0f, 1e-3f};
  d.eps = eps[fz_pick(in, 4)];
  d.chunk = fz_pick(in, 2) ? 0 : fz_size(in, ATTN_LINEAR_MAX_CHUNK);
  d.m = fz_pick(in, 2) ? 0 : sh->d;
  const float scales[6] = {1.0f, 0.5f, 2.0f, 0.125f, 0.0f, 3.0f};
  d.scale = scales[fz_pick(in, 6)];
  if (!sh->normalize && fz_pick(in, 2)) d.scale = -d.scale; /* a normaliser wants s phi(q).z > 0 */
  size_t need = 0, state_bytes = 0;
  check_queries(&d, isa, sh->L, &need, &state_bytes);

  fz_qkv x;
  fz_qkv_alloc(in, &x, n_q, n_kv, h_q, sh->h_k, sh->h_v, sh->d, sh->dv);
  d.shape.q = x.q.l;
  d.shape.k = x.k.l;
  d.shape.v = x.v.l;
  fz_tensor_fill(in, &x.q, sh->lo, sh->hi);
  fz_tensor_fill(in, &x.k, sh->lo, sh->hi);
  fz_tensor_fill(in, &x.v, -sh->vamp, sh->vamp);
  if (fz_nonfinite()) {
    fz_inject_nonfinite(in, &x.q);
    fz_inject_nonfinite(in, &x.k);
    fz_inject_nonfinite(in, &x.v);
  }
  fz_qkv_snapshot(&x);

  fz_call c = {0};
  d.shape.o = fz_layout(in, n_q, H, sh->dv, 1);
  fz_expect_output_layout(&c.query, n_q, H, sh->dv, d.shape.o);
  c.call = c.query;
  tu_tensor o;
  fz_output_alloc(in, &o, n_q, H, sh->dv, d.shape.o);
  void *ws = fz_alloc(need, fz_pick(in, 64));

  attn_linear_desc cd = d;
  fz_call_bind(&c, &cd.shape, NULL, &x, &o, ws, need);
  attn_linear_state call_state = st ? st->s : (attn_linear_state){0};
  attn_linear_state *sp = st ? &call_state : NULL;
  int state_faulted = 0;
  for (int f = last ? fz_fault_count(in) : 0; f > 0; --f) {
    attn_status want = ATTN_OK; /* a fault of the descriptor: the queries answer it too */
    switch (fz_pick(in, F_COUNT)) {
      case F_FEATURE_MAP:
        if (fz_u8(in) & 1)
          cd.feature_map = (attn_feature_map)(ATTN_FEATURE_COUNT + fz_u8(in));
        else
          cd.m = sh->d > 1 && (fz_u8(in) & 1) ? 1 + fz_u8(in) % (sh->d - 1) : sh->d + 1 + fz_u8(in);
        want = ATTN_E_BAD_FEATURE_MAP;
        break;
      case F_MASK:
        cd.mask = bad_mask(in, cd.mask);
        want = ATTN_E_BAD_WINDOW;
        break;
      case F_MODE:
        cd.normalize = fz_u8(in) & 1 ? 2 + (int)fz_u8(in) : -1 - (int)fz_u8(in);
        want = ATTN_E_BAD_ARGUMENT;
        break;
      case F_CHUNK:
        cd.chunk = ATTN_LINEAR_MAX_CHUNK + 1 + fz_u8(in) * (SIZE_MAX / 512);
        want = ATTN_E_BAD_ARGUMENT;
        break;
      case F_SCALE: {
        const float bad[3] = {NAN, INFINITY, -INFINITY};
        cd.scale = bad[fz_pick(in, 3)];
        want = ATTN_E_BAD_SCALE;
        break;
      }
      case F_EPS: {
        const float bad[4] = {NAN, INFINITY, -1e-6f, -INFINITY};
        cd.eps = bad[fz_pick(in, 4)];
        want = ATTN_E_BAD_EPS;
        break;
      }
      case F_STATE:
        if (!sp) { /* a state on a bidirectional call, or a causal call that keeps none */
          if (!is_causal(&cd)) {
            call_state = (attn_linear_state){sh->L, sh->d, sh->dv, sh->dv + 2, sh->fm, sh->normalize, 0, o.data};
            sp = &call_state;
            fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
          }
          break;
        }
        if (state_faulted++) break; /* a second state fault could undo the first (a toggled flag) */
        switch (fz_pick(in, 3)) {
          case 0:
            call_state.data = NULL;
            fz_expect_fault(&c.call, ATTN_E_NULL_POINTER);
            break;
          case 1:
            call_state.data = c.o;
            fz_expect_fault(&c.call, ATTN_E_ALIASING);
            break;
          default:
            state_mismatch(in, &call_state);
            fz_expect_fault(&c.call, ATTN_E_STATE_MISMATCH);
            break;
        }
        break;
      default:
        fz_common_fault(in, &c, (int)fz_pick(in, FZ_COMMON_FAULTS));
    }
    if (want != ATTN_OK) {
      fz_expect_fault(&c.query, want);
      fz_expect_fault(&c.call, want);
    }
  }
  const attn_linear_desc *dp = c.null_desc ? NULL : &cd;
  check_queries_expect(dp, &c.query, need);

  double *s0 = NULL;
  fz_snap so, sw, ss;
  fz_snap_take(&so, o.owner, sizeof(float) * o.span);
  fz_snap_take(&sw, ws, need);
  fz_snap_take(&ss, st ? st->mem : NULL, st ? st->bytes : 0);
  if (st && st->s.tokens > 0) {
    s0 = fz_doubles(st->bytes / sizeof(float));
    for (size_t e = 0; e < st->bytes / sizeof(float); ++e) s0[e] = st->s.data[e];
  }
  const attn_linear_state before = call_state;
  const attn_status rc = attn_linear(dp, c.q, c.k, c.v, c.o, sp, c.ws, c.ws_bytes);
  fz_check_expect("attn_linear", rc, &c.call);
  fz_qkv_check_unchanged(&x);
  FZ_CHECK(fz_guards_intact(ws), "workspace guard zone written");
  if (st) FZ_CHECK(fz_guards_intact(st->mem), "state memory guard zone written");
  if (rc != ATTN_OK) {
    fz_snap_check(&so, "o after an error");
    fz_snap_check(&sw, "workspace after an error");
    fz_snap_check(&ss, "state memory after an error");
    FZ_CHECK(memcmp(&before, &call_state, sizeof before) == 0, "state struct changed on error");
    FZ_CHECK(fz_guards_intact(o.owner), "guard zone written on error");
  } else {
    if (st) st->s = call_state;
    fz_check_output_clean("linear o", &o);
    check_results(&d, &x, &o, st, s0, before.tokens);
  }
  free(s0);
  fz_snap_free(&so);
  fz_snap_free(&sw);
  fz_snap_free(&ss);
  fz_free(ws);
  fz_tensor_free(&o);
  fz_qkv_free(&x);
  return rc == ATTN_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  fz_init(&in, data, size);
  const attn_isa isa = fz_set_isa(&in);
  lin_shape sh;
  const size_t heads = fz_size(&in, MAX_H); /* h_k and h_v divide it: their lcm does too */
  sh.h_k = fz_divisor(&in, heads);
  sh.h_v = fz_divisor(&in, heads);
  sh.L = fz_state_heads(sh.h_k, sh.h_v);
  sh.d = fz_size(&in, MAX_D);
  sh.dv = fz_size(&in, MAX_D);
  sh.fm = (attn_feature_map)fz_pick(&in, ATTN_FEATURE_COUNT); /* every map: identity, elu1, relu */
  sh.normalize = fz_pick(&in, 3) != 0;
  const float amps[4] = {0.25f, 1.0f, 4.0f, 30.0f};
  const float amp = amps[fz_pick(&in, 4)];
  /* identity with a normaliser needs phi(q).z > 0 to be well conditioned: non-negative q, k */
  sh.lo = sh.fm == ATTN_FEATURE_IDENTITY && sh.normalize ? 0.0f : -amp;
  sh.hi = sh.fm == ATTN_FEATURE_IDENTITY && amp > 4.0f ? 4.0f : amp;
  sh.vamp = fz_pick(&in, 4) ? 1.0f : 100.0f;
  fz_check_status("desc_init(NULL)", attn_linear_desc_init(NULL, 1, 1, 1, 1, 1, 1, sh.fm), ATTN_E_NULL_POINTER);

  const unsigned plan = fz_pick(&in, 3); /* 0: no state; 1: one call on a state; 2: two calls */
  lin_state st = {{0}, NULL, 0};
  if (plan > 0) {
    attn_linear_desc d;
    attn_linear_desc_init(&d, 1, 1, sh.L, sh.h_k, sh.d, sh.dv, sh.fm);
    attn_shape_init(&d.shape, 1, 1, sh.L, sh.h_k, sh.h_v, sh.d, sh.dv); /* h_q = L: every count divides it */
    d.normalize = sh.normalize;
    st.bytes = sizeof(float) * sh.L * sh.d * (sh.dv + 2);
    st.mem = fz_alloc(st.bytes, 0);
    fz_snap small;
    fz_snap_take(&small, st.mem, st.bytes);
    fz_check_status("state_init(too small)",
                    attn_linear_state_init(&st.s, &d, st.mem, st.bytes - 1 - fz_u8(&in) % st.bytes),
                    ATTN_E_WORKSPACE_TOO_SMALL);
    fz_snap_check(&small, "state memory after a refused state_init");
    fz_snap_free(&small);
    fz_check_status("state_init", attn_linear_state_init(&st.s, &d, st.mem, st.bytes), ATTN_OK);
    FZ_CHECK(st.s.heads == sh.L && st.s.m == sh.d && st.s.dv == sh.dv && st.s.ld == sh.dv + 2 &&
                 st.s.feature_map == sh.fm && st.s.normalize == sh.normalize && st.s.tokens == 0 && st.s.data == st.mem,
             "state_init: shape");
    for (size_t e = 0; e < st.bytes / sizeof(float); ++e) FZ_CHECK(st.s.data[e] == 0.0f, "state_init: not zeroed");
  }
  for (unsigned call = 0; call < (plan ? plan : 1); ++call)
    if (!one_call(&in, isa, &sh, plan ? &st : NULL, call + 1 == (plan ? plan : 1))) break;
  fz_free(st.mem);
  return 0;
}
