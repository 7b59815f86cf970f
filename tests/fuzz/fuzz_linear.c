/*
 * libFuzzer target: attn_linear_desc_init, attn_linear_feature_size, attn_linear_state_size,
 * attn_linear_state_init, attn_linear_chunk_size, attn_linear_workspace_size and attn_linear.
 *
 * From the bytes: the ISA path, shapes (n up to 200, d and dv up to 130, up to 8 heads, GQA),
 * feature map, causal or bidirectional, normalised or not, eps (0 included), chunk size, layouts
 * (packed QKV included), values, and for causal calls a state: none, or one or two calls in a
 * row on the same state (a prefill continued by a decode step or another chunk). The last call
 * gets up to two faults (fuzz_common.h, plus a bad feature map, mode, chunk, eps, a state of
 * another shape, a NULL state memory, a state on a bidirectional call, a state over o).
 * Checks: the queries answer what the header documents (m = d, the chunk, the state bytes
 * h_kv * m * (dv + 1) floats, one workspace size for every layout) or the status of the faulty
 * descriptor without writing; calls return the expected status; inputs are unchanged; on error
 * o, the workspace and the state (struct and memory) are unchanged; on success guards and gap
 * elements are intact, o matches the float64 reference (with the library's incoming state as
 * the reference's prefix) and the state matches the reference's state and token count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "tolerances.h"

enum { MAX_N = 200, MAX_D = 130, MAX_H = 8 };
/* n_q * n_kv * h_q * (d + dv) above this is scaled down (the reference is quadratic in n). */
#define WORK_LIMIT ((size_t)600000)

enum { F_FEATURE_MAP = FZ_COMMON_FAULTS, F_MODE, F_CHUNK, F_EPS, F_STATE, F_COUNT };

/* What stays fixed across the calls of one input (the state's shape and mode). */
typedef struct lin_shape {
  size_t h_kv, d, dv;
  attn_feature_map fm;
  int normalize;
  float lo, hi, vamp; /* q, k in [lo, hi]; v in [-vamp, vamp] */
} lin_shape;

/* A state bound to guarded memory of exactly h_kv * d * (dv + 1) floats. */
typedef struct lin_state {
  attn_linear_state s;
  void *mem;
  size_t bytes;
} lin_state;

static void check_queries(const attn_linear_desc *d, attn_isa isa, size_t *ws_bytes, size_t *state_bytes) {
  size_t m = 0, chunk = 0;
  fz_check_status("feature_size", attn_linear_feature_size(d, &m), ATTN_OK);
  FZ_CHECK(m == d->d, "feature_size %zu, d %zu", m, d->d);
  fz_check_status("chunk_size", attn_linear_chunk_size(d, &chunk), ATTN_OK);
  const size_t path_default = isa == ATTN_ISA_SCALAR ? 64 : 48;
  FZ_CHECK(chunk == (d->chunk ? d->chunk : path_default), "chunk_size %zu (desc %zu)", chunk, d->chunk);
  fz_check_status("state_size", attn_linear_state_size(d, state_bytes), ATTN_OK);
  FZ_CHECK(*state_bytes == sizeof(float) * d->h_kv * m * (d->dv + 1), "state_size %zu", *state_bytes);
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
  FZ_CHECK(st[3] != ATTN_OK || out[3] == ws_need, "workspace_size %zu, %zu with the default layouts", out[3],
           ws_need);
}

/* State rows (key/value head, feature) that no policy defines: every row of a head that absorbed a
 * non-finite k or v, or came in non-finite. */
static unsigned char *poisoned_state_rows(const attn_linear_desc *d, const fz_qkv *x, const double *s0) {
  const size_t slab = d->d * (d->dv + 1);
  unsigned char *rows = fz_calloc(d->h_kv * d->d, 1);
  for (size_t hk = 0; hk < d->h_kv; ++hk) {
    int bad = 0;
    for (size_t e = 0; s0 && e < slab && !bad; ++e) bad = !isfinite(s0[hk * slab + e]);
    for (size_t j = 0; j < d->n_kv && !bad; ++j) bad = fz_row_nonfinite(&x->k, j, hk) || fz_row_nonfinite(&x->v, j, hk);
    memset(rows + hk * d->d, bad, d->d);
  }
  return rows;
}

/* o (and the state after the call) against the reference; s0: the state before, or NULL. */
static void check_results(const attn_linear_desc *d, const fz_qkv *x, const tu_tensor *o, const lin_state *st,
                          const double *s0, uint64_t tokens0) {
  const size_t rows = d->n_q * d->h_q, slab = d->d * (d->dv + 1), sfloats = d->h_kv * slab;
  const size_t n_tokens = (size_t)tokens0 + d->n_kv;
  double *ro = fz_doubles(rows * d->dv), *oscale = fz_doubles(rows * d->dv), *tol = fz_doubles(rows);
  const ref_linear_problem p = {d->n_q, d->n_kv, d->h_q, d->h_kv, d->d, d->dv,
                                d->feature_map == ATTN_FEATURE_ELU1 ? REF_FM_ELU1 : REF_FM_IDENTITY,
                                d->causal, d->normalize, d->eps, x->q.data, x->k.data, x->v.data,
                                tu_ref_layout(&x->q), tu_ref_layout(&x->k), tu_ref_layout(&x->v), s0};
  ref_linear(&p, ro, oscale);
  for (size_t r = 0; r < rows; ++r) tol[r] = tol_linear_o(n_tokens, d->d);
  fz_compare("linear o", o, ro, oscale, tol, NULL); /* the reference applies the NaN policy */
  if (st) {
    double *rs = fz_doubles(sfloats), *sscale = fz_doubles(sfloats), *stol = fz_doubles(d->h_kv * d->d);
    ref_linear_state(&p, rs, sscale);
    for (size_t r = 0; r < d->h_kv * d->d; ++r) stol[r] = tol_linear_state(n_tokens);
    tu_tensor view = {st->s.data, d->h_kv, d->d, d->dv + 1, {slab, d->dv + 1}, sfloats, NULL, 0};
    unsigned char *free_rows = fz_nonfinite() ? poisoned_state_rows(d, x, s0) : NULL;
    fz_compare("linear state", &view, rs, sscale, stol, free_rows);
    free(free_rows);
    FZ_CHECK(st->s.tokens == n_tokens, "state tokens %llu, expected %zu", (unsigned long long)st->s.tokens,
             n_tokens);
    free(rs);
    free(sscale);
    free(stol);
  }
  free(ro);
  free(oscale);
  free(tol);
}

/* One call on a descriptor drawn from the bytes; faults only when `last`. Returns 0 when the call
 * failed (as expected), which ends the sequence. */
static int one_call(fz_in *in, attn_isa isa, const lin_shape *sh, lin_state *st, int last) {
  const size_t h_q = sh->h_kv * fz_size(in, MAX_H / sh->h_kv);
  size_t n_q = fz_size(in, MAX_N), n_kv = fz_size(in, MAX_N);
  if (fz_pick(in, 4) == 0) n_q = n_kv = 1; /* a decode step */
  while (n_q * n_kv * h_q * (sh->d + sh->dv) > WORK_LIMIT) {
    if (n_q >= n_kv) n_q = (n_q + 1) / 2;
    else n_kv = (n_kv + 1) / 2;
  }
  attn_linear_desc d;
  fz_check_status("desc_init", attn_linear_desc_init(&d, n_q, n_kv, h_q, sh->h_kv, sh->d, sh->dv, sh->fm), ATTN_OK);
  FZ_CHECK(d.causal == 1 && d.normalize == 1 && d.eps == 1e-6f && d.chunk == 0, "desc_init: defaults");
  d.causal = st ? 1 : fz_pick(in, 2) == 0;
  d.normalize = sh->normalize;
  const float eps[4] = {1e-6f, 0.0f, 1.0f, 1e-3f};
  d.eps = eps[fz_pick(in, 4)];
  d.chunk = fz_pick(in, 2) ? 0 : fz_size(in, ATTN_LINEAR_MAX_CHUNK);
  size_t need = 0, state_bytes = 0;
  check_queries(&d, isa, &need, &state_bytes);

  fz_qkv x;
  fz_qkv_alloc(in, &x, n_q, n_kv, h_q, sh->h_kv, sh->d, sh->dv);
  d.q = x.q.l;
  d.k = x.k.l;
  d.v = x.v.l;
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
  d.o = fz_layout(in, n_q, h_q, sh->dv, 1);
  fz_expect_output_layout(&c.query, n_q, h_q, sh->dv, d.o);
  c.call = c.query;
  tu_tensor o;
  fz_output_alloc(in, &o, n_q, h_q, sh->dv, d.o);
  void *ws = fz_alloc(need, fz_pick(in, 64));

  attn_linear_desc cd = d;
  size_t *const sizes[6] = {&cd.n_q, &cd.n_kv, &cd.h_q, &cd.h_kv, &cd.d, &cd.dv};
  attn_layout *const layouts[5] = {&cd.q, &cd.k, &cd.v, &cd.o, NULL};
  fz_call_bind(&c, sizes, layouts, &x, o.data, ws, need);
  attn_linear_state call_state = st ? st->s : (attn_linear_state){0};
  attn_linear_state *sp = st ? &call_state : NULL;
  int state_faulted = 0;
  for (int f = last ? fz_fault_count(in) : 0; f > 0; --f) {
    switch (fz_pick(in, F_COUNT)) {
    case F_FEATURE_MAP:
      cd.feature_map = (attn_feature_map)(ATTN_FEATURE_COUNT + fz_u8(in));
      fz_expect_fault(&c.query, ATTN_E_BAD_FEATURE_MAP);
      fz_expect_fault(&c.call, ATTN_E_BAD_FEATURE_MAP);
      break;
    case F_MODE:
      if (fz_u8(in) & 1) cd.causal = 2 + fz_u8(in);
      else cd.normalize = -1 - (int)fz_u8(in);
      fz_expect_fault(&c.query, ATTN_E_BAD_ARGUMENT);
      fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
      break;
    case F_CHUNK:
      cd.chunk = ATTN_LINEAR_MAX_CHUNK + 1 + fz_u8(in) * (SIZE_MAX / 512);
      fz_expect_fault(&c.query, ATTN_E_BAD_ARGUMENT);
      fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
      break;
    case F_EPS: {
      const float bad[4] = {NAN, INFINITY, -1e-6f, -INFINITY};
      cd.eps = bad[fz_pick(in, 4)];
      fz_expect_fault(&c.query, ATTN_E_BAD_EPS);
      fz_expect_fault(&c.call, ATTN_E_BAD_EPS);
      break;
    }
    case F_STATE:
      if (!sp) { /* a state on a bidirectional call, or a causal call that keeps none */
        if (!cd.causal) {
          call_state = (attn_linear_state){sh->h_kv, sh->d, sh->dv, sh->fm, sh->normalize, 0, o.data};
          sp = &call_state;
          fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
        }
        break;
      }
      if (state_faulted++) break; /* a second state fault could undo the first (a toggled flag) */
      switch (fz_pick(in, 6)) {
      case 0: call_state.data = NULL; fz_expect_fault(&c.call, ATTN_E_NULL_POINTER); break;
      case 1: call_state.data = c.o; fz_expect_fault(&c.call, ATTN_E_ALIASING); break;
      case 2: call_state.heads++; fz_expect_fault(&c.call, ATTN_E_STATE_MISMATCH); break;
      case 3: call_state.dv += 1 + fz_u8(in); fz_expect_fault(&c.call, ATTN_E_STATE_MISMATCH); break;
      case 4: call_state.normalize = !call_state.normalize; fz_expect_fault(&c.call, ATTN_E_STATE_MISMATCH); break;
      default: call_state.feature_map = (attn_feature_map)!call_state.feature_map;
        fz_expect_fault(&c.call, ATTN_E_STATE_MISMATCH); break;
      }
      break;
    default:
      fz_common_fault(in, &c, (int)fz_pick(in, FZ_COMMON_FAULTS));
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
  sh.h_kv = fz_size(&in, MAX_H);
  sh.d = fz_size(&in, MAX_D);
  sh.dv = fz_size(&in, MAX_D);
  sh.fm = fz_pick(&in, 2) ? ATTN_FEATURE_ELU1 : ATTN_FEATURE_IDENTITY;
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
    attn_linear_desc_init(&d, 1, 1, sh.h_kv, sh.h_kv, sh.d, sh.dv, sh.fm);
    d.normalize = sh.normalize;
    st.bytes = sizeof(float) * sh.h_kv * sh.d * (sh.dv + 1);
    st.mem = fz_alloc(st.bytes, 0);
    fz_snap small;
    fz_snap_take(&small, st.mem, st.bytes);
    fz_check_status("state_init(too small)", attn_linear_state_init(&st.s, &d, st.mem, st.bytes - 1 - fz_u8(&in) % st.bytes),
                    ATTN_E_WORKSPACE_TOO_SMALL);
    fz_snap_check(&small, "state memory after a refused state_init");
    fz_snap_free(&small);
    fz_check_status("state_init", attn_linear_state_init(&st.s, &d, st.mem, st.bytes), ATTN_OK);
    FZ_CHECK(st.s.heads == sh.h_kv && st.s.m == sh.d && st.s.dv == sh.dv && st.s.feature_map == sh.fm &&
                 st.s.normalize == sh.normalize && st.s.tokens == 0 && st.s.data == st.mem,
             "state_init: shape");
    for (size_t e = 0; e < st.bytes / sizeof(float); ++e) FZ_CHECK(st.s.data[e] == 0.0f, "state_init: not zeroed");
  }
  for (unsigned call = 0; call < (plan ? plan : 1); ++call)
    if (!one_call(&in, isa, &sh, plan ? &st : NULL, call + 1 == (plan ? plan : 1))) break;
  fz_free(st.mem);
  return 0;
}
