/*
 * libFuzzer target: attn_delta_desc_init, attn_delta_state_size, attn_delta_workspace_size,
 * attn_delta_chunk_size and attn_delta (the delta rule, with checkpoints).
 *
 * From the bytes: the ISA path, sizes (n up to 160, d and dv up to 130, h_k up to 4 key heads
 * shared by h_v value heads, a multiple up to 8), the gate kind, the chunk (the path's, 1, 2, 7, 16,
 * 64, 256 or any), qk_l2norm (without it the keys are scaled to |k| <= 1), the scale, layouts of
 * q, k, v and o (packed QKV included), a gate layout (default, padded, row stride 0), log gates
 * from 0 down to -250, betas in [0, 1] or [0, 2], an incoming state or none, up to 4 checkpoints,
 * the values, non-finite values (ATTN_FUZZ_NONFINITE) and up to two faults (fuzz_common.h's, and
 * the delta rule's own: bad log gates and betas, NULL gates or betas, a gate given to PLAIN, an
 * unknown gate kind, qk_l2norm not 0/1, a chunk above ATTN_LINEAR_MAX_CHUNK, an fp16 kv_type, a
 * non-finite scale, n_q != n_kv, h_q != h_k, bad checkpoints, a state or checkpoints aliasing a
 * buffer). Checks: desc_init's defaults; the three size queries answer the expected status without
 * writing on error; the call returns the expected status; the inputs are unchanged; on error o,
 * the state, the checkpoint states and the workspace are unchanged; on success the guards and gap
 * elements of o are intact, o, the final state and the checkpoints match the float64 recurrence
 * (tests/ref/ref_delta.c, which applies the non-finite policy) within FZ_DT_FACTOR times
 * tol_delta, a checkpoint after the last token is the final state bit for bit, and restoring the
 * first checkpoint and calling on the tokens after it (with the later checkpoints) gives the same
 * bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "ref/ref_delta.h"
#include "tolerances.h"

enum { MAX_N = 160, MAX_D = 130, MAX_HK = 4, MAX_HV = 8, MAX_CK = 4 };
/* n * h_v * d * dv above this is scaled down: one input stays within milliseconds. */
#define WORK_LIMIT ((size_t)2000000)
/* The Check suite's bounds hold at ~0.3 of tol_delta on random data; fuzz data (equal keys, beta 2
 * with near-parallel keys, gates far apart within a chunk) gets 16 times the bound plus the
 * equal-terms allowance of the linear fuzzers (tolerances.h, TOL_EQ). */
#define FZ_DT_FACTOR 16.0

enum {
  F_GATE = FZ_COMMON_FAULTS, /* a bad log gate, a NULL one, or one given to PLAIN */
  F_BETA,                    /* a bad beta or a NULL one */
  F_KIND,
  F_L2,
  F_CHUNK,
  F_DTYPE,
  F_SCALE,
  F_NQ,
  F_HQ,
  F_CK,
  F_ALIAS,
  F_COUNT
};

/* An exactly sized input array of count floats (no guard: ASan sees an over-read). */
static float *input_floats(size_t count) { return fz_calloc(count ? count : 1, sizeof(float)); }

static ref_layout rl(attn_layout l) {
  const ref_layout r = {l.row_stride, l.head_stride};
  return r;
}

/* Compares a [rows][h][w] result (layout l at got) with the reference within the bound. */
static void compare(const char *what, float *got, size_t rows, size_t h, size_t w, attn_layout l, const double *ref,
                    const double *scale, double tol) {
  tu_tensor t;
  memset(&t, 0, sizeof t);
  t.data = got;
  t.n = rows;
  t.h = h;
  t.w = w;
  t.l = l;
  const size_t count = rows * h * w;
  double *sc = fz_doubles(count), *tr = fz_doubles(rows * h);
  for (size_t e = 0; e < count; ++e) sc[e] = scale[e] + TOL_DT_FLOOR / tol;
  for (size_t r = 0; r < rows * h; ++r) tr[r] = tol;
  fz_compare(what, &t, ref, sc, tr, NULL);
  free(sc);
  free(tr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  fz_begin(&in, data, size);

  /* sizes */
  const size_t hk = fz_size(&in, MAX_HK), hv = hk * fz_size(&in, MAX_HV / hk), dd = fz_size(&in, MAX_D);
  const size_t dv = fz_size(&in, MAX_D);
  size_t n = fz_size(&in, MAX_N);
  while (n > 1 && n * hv * dd * dv > WORK_LIMIT) n /= 2;
  const attn_delta_gate gate = (attn_delta_gate)fz_pick(&in, 3);
  fz_check_status("desc_init(NULL)", attn_delta_desc_init(NULL, n, hk, hv, dd, dv, gate), ATTN_E_NULL_POINTER);
  attn_delta_desc d;
  fz_check_status("desc_init", attn_delta_desc_init(&d, n, hk, hv, dd, dv, gate), ATTN_OK);
  fz_check_shape_defaults("delta_desc_init", &d.shape, n, n, hk, hk, hv, dd, dv);
  const double rs = 1.0 / sqrt((double)dd); /* within an ulp: 1 / sqrtf(d) and the rounded double both qualify */
  FZ_CHECK(d.gate == gate && d.qk_l2norm == 1 && d.chunk == 0 && fabs((double)d.scale - rs) <= 0x1p-23 * rs,
           "desc_init: gate %d, qk_l2norm %d, chunk %zu, scale %g", (int)d.gate, d.qk_l2norm, d.chunk, (double)d.scale);
  const size_t gw = gate == ATTN_DELTA_FEATURE ? dd : 1;
  FZ_CHECK(d.beta_layout.row_stride == hv && d.beta_layout.head_stride == 1, "desc_init: beta layout");
  FZ_CHECK(gate == ATTN_DELTA_PLAIN || (d.gate_layout.row_stride == hv * gw && d.gate_layout.head_stride == gw),
           "desc_init: gate layout");
  size_t sbytes = 0, need = 0, C = 0;
  fz_check_status("state_size", attn_delta_state_size(&d, &sbytes), ATTN_OK);
  FZ_CHECK(sbytes == sizeof(float) * hv * dd * dv, "state_size %zu, not h_v d dv floats", sbytes);

  /* options */
  const size_t chunks[8] = {0, 1, 2, 7, 16, 64, ATTN_LINEAR_MAX_CHUNK, 0};
  const size_t ci = fz_pick(&in, 8);
  d.chunk = ci == 7 ? fz_size(&in, ATTN_LINEAR_MAX_CHUNK) : chunks[ci];
  d.qk_l2norm = fz_pick(&in, 3) != 0;
  const float scales[6] = {d.scale, 1.0f, 0.25f, -1.0f, 0.0f, 4.0f};
  d.scale = scales[fz_pick(&in, 6)];
  const float gmins[5] = {-0.05f, -1.0f, -20.0f, -250.0f, 0.0f}, gmin = gmins[fz_pick(&in, 5)];
  const float bmax = fz_pick(&in, 2) ? 1.0f : 2.0f;
  const float amps[3] = {0.5f, 1.0f, 4.0f};
  const float amp = d.qk_l2norm ? amps[fz_pick(&in, 3)] : (float)(1.0 / sqrt((double)dd));
  fz_check_status("workspace_size(defaults)", attn_delta_workspace_size(&d, &need), ATTN_OK);
  fz_check_status("chunk_size", attn_delta_chunk_size(&d, &C), ATTN_OK);
  FZ_CHECK(C >= 1 && C <= ATTN_LINEAR_MAX_CHUNK && (!d.chunk || C == d.chunk), "chunk_size %zu (desc %zu)", C, d.chunk);

  /* inputs: q, k, v, log gates, beta */
  fz_qkv x;
  fz_qkv_make(&in, &x, &d.shape, -amp, amp, 1.0f);
  float *lg = NULL;
  size_t gfloats = 0;
  if (gate != ATTN_DELTA_PLAIN) {
    switch (fz_pick(&in, 3)) {
      case 1:
        d.gate_layout = (attn_layout){hv * (gw + 3) + 5, gw + 3};
        break;
      case 2:
        d.gate_layout = (attn_layout){0, gw};
        break;
      default:
        break;
    }
    gfloats = tu_span(n, hv, gw, d.gate_layout);
    lg = input_floats(gfloats);
    for (size_t e = 0; e < gfloats; ++e) lg[e] = fz_value(&in, gmin, 0.0f);
  }
  const size_t bfloats = tu_span(n, hv, 1, d.beta_layout);
  float *beta = input_floats(bfloats);
  for (size_t e = 0; e < bfloats; ++e) beta[e] = fz_value(&in, 0.0f, bmax);

  /* o, the state, checkpoints, workspace */
  fz_call c = {0};
  d.shape.o = fz_layout(&in, n, hv, dv, 1);
  fz_expect_output_layout(&c.query, n, hv, dv, d.shape.o);
  c.call = c.query;
  tu_tensor o;
  fz_output_alloc(&in, &o, n, hv, dv, d.shape.o);
  const size_t sf = sbytes / sizeof(float);
  float *state = NULL, *s0 = NULL;
  if (fz_pick(&in, 3)) {
    state = fz_alloc(sbytes, 0);
    s0 = input_floats(sf);
    for (size_t e = 0; e < sf; ++e) state[e] = s0[e] = fz_value(&in, -1.0f, 1.0f);
  }
  size_t after[MAX_CK + 1];
  size_t count = 0;
  for (size_t k = fz_pick(&in, MAX_CK + 1), t = 0; k > 0 && t < n; --k) { /* increasing, < n */
    t += fz_pick(&in, 4) == 0 ? 0 : fz_pick(&in, n);
    if (t >= n) t = n - 1;
    if (count && t <= after[count - 1]) break;
    after[count++] = t;
    ++t;
  }
  float *cks = count ? fz_alloc(count * sbytes, 0) : NULL;
  attn_checkpoints ck = {count, after, cks};
  void *ws = fz_alloc(need, fz_pick(&in, 64));

  /* faults */
  attn_delta_desc cd = d;
  const float *gp = lg, *bp = beta;
  float *sp = state;
  fz_call_bind(&c, &cd.shape, NULL, &x, &o, ws, need);
  for (int f = fz_fault_count(&in); f > 0; --f) {
    const int fault = (int)fz_pick(&in, F_COUNT);
    switch (fault) {
      case F_GATE: {
        const float bad[5] = {0.5f, 1e-30f, NAN, INFINITY, -INFINITY};
        if (cd.gate == ATTN_DELTA_PLAIN || !lg) {
          gp = beta; /* any non-NULL pointer */
        } else if (fz_pick(&in, 4) == 0) {
          gp = NULL;
          fz_expect_fault(&c.call, ATTN_E_NULL_POINTER);
          break;
        } else {
          lg[tu_span(n, hv, gw, cd.gate_layout) - 1 - fz_pick(&in, 256) % gw] = bad[fz_pick(&in, 5)];
        }
        fz_expect_fault(&c.call, ATTN_E_BAD_GATE);
        break;
      }
      case F_BETA: {
        const float bad[4] = {-0.5f, -1e-30f, NAN, INFINITY};
        if (fz_pick(&in, 4) == 0) {
          bp = NULL;
          fz_expect_fault(&c.call, ATTN_E_NULL_POINTER);
        } else {
          beta[fz_pick(&in, 256) % bfloats] = bad[fz_pick(&in, 4)];
          fz_expect_fault(&c.call, ATTN_E_BAD_GATE);
        }
        break;
      }
      case F_KIND:
        cd.gate = (attn_delta_gate)(fz_pick(&in, 2) ? 3 + (int)fz_u8(&in) : -1 - (int)fz_u8(&in));
        fz_expect_fault(&c.query, ATTN_E_BAD_GATE);
        fz_expect_fault(&c.call, ATTN_E_BAD_GATE);
        break;
      case F_L2:
        cd.qk_l2norm = fz_pick(&in, 2) ? 2 + (int)fz_u8(&in) : -1;
        fz_expect_fault(&c.query, ATTN_E_BAD_ARGUMENT);
        fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
        break;
      case F_CHUNK:
        cd.chunk = ATTN_LINEAR_MAX_CHUNK + 1 + fz_u8(&in);
        fz_expect_fault(&c.query, ATTN_E_BAD_ARGUMENT);
        fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
        break;
      case F_DTYPE:
        cd.shape.kv_type = fz_pick(&in, 2) ? ATTN_F16 : ATTN_BF16;
        fz_expect_fault(&c.query, ATTN_E_BAD_DTYPE);
        fz_expect_fault(&c.call, ATTN_E_BAD_DTYPE);
        break;
      case F_SCALE:
        fz_scale_fault(&in, &c, &cd.scale);
        break;
      case F_NQ:
        if (cd.shape.n_kv >= 2) { /* fewer queries: every layout of n rows holds for fewer */
          cd.shape.n_q = cd.shape.n_kv - 1 - fz_pick(&in, cd.shape.n_kv - 1);
        } else { /* two queries over default layouts (a count-1 stride may be anything) */
          cd.shape.n_q = 2;
          cd.shape.q = (attn_layout){cd.shape.h_q * cd.shape.d, cd.shape.d};
          cd.shape.o = (attn_layout){cd.shape.h_v * cd.shape.dv, cd.shape.dv};
        }
        fz_expect_fault(&c.query, ATTN_E_BAD_ARGUMENT);
        fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
        break;
      case F_HQ: /* h_q a multiple of h_k that divides H, with a valid q layout */
        cd.shape.h_q = cd.shape.h_v > cd.shape.h_k ? cd.shape.h_v : 2 * cd.shape.h_k;
        cd.shape.q = (attn_layout){cd.shape.h_q * cd.shape.d, cd.shape.d};
        if (cd.shape.h_q > cd.shape.h_v) cd.shape.o = (attn_layout){cd.shape.h_q * cd.shape.dv, cd.shape.dv};
        fz_expect_fault(&c.query, ATTN_E_BAD_HEADS);
        fz_expect_fault(&c.call, ATTN_E_BAD_HEADS);
        break;
      case F_CK:
        if (count == 0 || fz_pick(&in, 3) == 0) { /* out of range */
          if (count == 0) ck.states = cks = fz_alloc(sbytes, 0);
          after[count ? count - 1 : 0] = n + fz_pick(&in, 3);
          ck.count = count = count ? count : 1;
          fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
        } else if (count >= 2 && fz_pick(&in, 2)) { /* not increasing */
          after[count - 1] = after[fz_pick(&in, count - 1)];
          fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
        } else {
          if (fz_pick(&in, 2))
            ck.after = NULL;
          else
            ck.states = NULL;
          fz_expect_fault(&c.call, ATTN_E_NULL_POINTER);
        }
        break;
      case F_ALIAS:
        if (sp && fz_pick(&in, 2))
          sp = (float *)x.k.data; /* the state over an input */
        else if (ck.count && ck.states)
          ck.states = c.o; /* the checkpoints over o */
        else
          c.o = beta; /* o over the betas */
        fz_expect_fault(&c.call, ATTN_E_ALIASING);
        break;
      default:
        fz_common_fault(&in, &c, fault);
        break;
    }
  }
  const attn_delta_desc *dp = c.null_desc ? NULL : &cd;

  size_t q1 = SIZE_MAX, q2 = SIZE_MAX, q3 = SIZE_MAX;
  fz_check_expect("attn_delta_workspace_size", attn_delta_workspace_size(dp, &q1), &c.query);
  fz_check_expect("attn_delta_state_size", attn_delta_state_size(dp, &q2), &c.query);
  fz_check_expect("attn_delta_chunk_size", attn_delta_chunk_size(dp, &q3), &c.query);
  if (c.query.faults)
    FZ_CHECK(q1 == SIZE_MAX && q2 == SIZE_MAX && q3 == SIZE_MAX, "a size query wrote its output on error");
  else
    FZ_CHECK(q1 == need && q2 == sbytes, "size queries: workspace %zu (%zu), state %zu (%zu)", q1, need, q2, sbytes);

  fz_watch w;
  fz_snap ss, sc, sg, sb;
  fz_watch_take(&w, &o, NULL, ws, need);
  fz_snap_take(&ss, state, state ? sbytes : 0);
  fz_snap_take(&sc, cks, cks ? count * sbytes : 0);
  fz_snap_take(&sg, lg, sizeof(float) * gfloats);
  fz_snap_take(&sb, beta, sizeof(float) * bfloats);
  const attn_status st = attn_delta(dp, c.q, c.k, c.v, gp, bp, c.o, sp, &ck, c.ws, c.ws_bytes);
  fz_watch_check(&w, "attn_delta", st, &c.call, &x);
  fz_snap_check(&sg, "log gates after the call");
  fz_snap_check(&sb, "beta after the call");
  if (st != ATTN_OK) {
    fz_snap_check(&ss, "state after an error");
    fz_snap_check(&sc, "checkpoint states after an error");
  } else {
    fz_check_output_clean("delta o", &o);
    if (state) FZ_CHECK(fz_guards_intact(state), "state guard zone written");
    if (cks) FZ_CHECK(fz_guards_intact(cks), "checkpoint guard zone written");
    /* the reference */
    const ref_delta_problem p = {n,
                                 hk,
                                 hv,
                                 dd,
                                 dv,
                                 x.q.data,
                                 x.k.data,
                                 x.v.data,
                                 rl(d.shape.q),
                                 rl(d.shape.k),
                                 rl(d.shape.v),
                                 (ref_delta_gate)gate,
                                 lg,
                                 rl(d.gate_layout),
                                 beta,
                                 rl(d.beta_layout),
                                 (double)d.scale,
                                 d.qk_l2norm,
                                 s0,
                                 C};
    const size_t oc = n * hv * dv;
    double *ro = fz_doubles(oc), *ros = fz_doubles(oc), *rs = fz_doubles(sf), *rss = fz_doubles(sf);
    double *rc = fz_doubles(count * sf), *rcs = fz_doubles(count * sf);
    const ref_delta_out out = {ro, ros, rs, rss, count, after, rc, rcs};
    ref_delta(&p, &out);
    const double tol = FZ_DT_FACTOR * tol_delta(dd, C) + tol_equal_terms(C + dd);
    const attn_layout sl = {dd * dv, dv};
    compare("delta o", o.data, n, hv, dv, d.shape.o, ro, ros, tol);
    if (state) compare("delta state", state, hv, dd, dv, sl, rs, rss, tol);
    for (size_t i = 0; i < count; ++i)
      compare("delta checkpoint", cks + i * sf, hv, dd, dv, sl, rc + i * sf, rcs + i * sf, tol);
    if (state && count && after[count - 1] == n - 1)
      FZ_CHECK(memcmp(cks + (count - 1) * sf, state, sbytes) == 0, "checkpoint after the last token != final state");
    /* restore the first checkpoint and call on the tokens after it, with the later checkpoints */
    if (count && after[0] + 1 < n) {
      const size_t t0 = after[0] + 1, rest = count - 1;
      attn_delta_desc rd = d;
      rd.shape.n_q = rd.shape.n_kv = n - t0;
      size_t rneed = 0;
      fz_check_status("workspace_size(restore)", attn_delta_workspace_size(&rd, &rneed), ATTN_OK);
      void *rws = fz_alloc(rneed, 0);
      float *rst = fz_alloc(sbytes, 0), *rck = fz_alloc(rest * sbytes + 1, 0);
      memcpy(rst, cks, sbytes);
      size_t later[MAX_CK + 1];
      for (size_t j = 0; j < rest; ++j) later[j] = after[1 + j] - t0;
      const attn_checkpoints ck2 = {rest, later, rck};
      tu_tensor o2;
      fz_output_alloc(&in, &o2, n - t0, hv, dv, d.shape.o);
      fz_check_status("attn_delta(restored)",
                      attn_delta(&rd, tu_at(&x.q, t0, 0, 0), tu_at(&x.k, t0, 0, 0), tu_at(&x.v, t0, 0, 0),
                                 lg ? lg + t0 * d.gate_layout.row_stride : NULL, beta + t0 * d.beta_layout.row_stride,
                                 o2.data, rst, &ck2, rws, rneed),
                      ATTN_OK);
      for (size_t t = t0; t < n; ++t)
        for (size_t h = 0; h < hv; ++h)
          FZ_CHECK(memcmp(tu_at(&o, t, h, 0), tu_at(&o2, t - t0, h, 0), sizeof(float) * dv) == 0,
                   "restored checkpoint: o row %zu head %zu differs", t, h);
      if (state) FZ_CHECK(memcmp(rst, state, sbytes) == 0, "restored checkpoint: final state differs");
      FZ_CHECK(memcmp(rck, cks + sf, rest * sbytes) == 0, "restored checkpoint: later checkpoints differ");
      fz_tensor_free(&o2);
      fz_free(rws);
      fz_free(rst);
      fz_free(rck);
    }
    free(ro);
    free(ros);
    free(rs);
    free(rss);
    free(rc);
    free(rcs);
  }
  fz_watch_free(&w);
  fz_snap_free(&ss);
  fz_snap_free(&sc);
  fz_snap_free(&sg);
  fz_snap_free(&sb);
  fz_free(ws);
  if (state) fz_free(state);
  if (cks) fz_free(cks);
  fz_tensor_free(&o);
  fz_qkv_free(&x);
  free(lg);
  free(beta);
  free(s0);
  return 0;
}
