/*
 * libFuzzer target: attn_gau_desc_init, attn_gau_workspace_size and attn_gau.
 *
 * From the bytes: the ISA path, shapes (n up to 200, d and dv up to 130, up to 8 heads, GQA),
 * the mask (window sides, and a chunk-local width: 0, small, up to n, or huge), the scale, the
 * bias (a scalar beta, or a causal or two-sided table of L entries, L from 1 to beyond the
 * lengths, with values from the bytes), the normalisation, layouts of every tensor (packed QKV
 * included), the values, and up to two faults (fuzz_common.h plus a non-finite scale, a
 * normalisation other than 0 and 1, a bad bias: unknown kind, non-finite beta, NULL table, L = 0,
 * a non-finite entry; and head counts that divide H but that GAU refuses). Checks: the documented
 * defaults of desc_init (the shape as attn_shape_init writes it, full mask, 1/sqrt(d), scalar
 * bias 0, no table, no normalisation); the workspace query answers the same size for every
 * layout, mask and bias, or the status of the faulty descriptor without writing; the call returns
 * the expected status; inputs and the table are unchanged; on error o and the workspace are
 * unchanged; on success guards and gap elements are intact and o matches the float64 reference.
 */
#include <math.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "tolerances.h"

enum { MAX_N = 200, MAX_D = 130, MAX_H = 8 };
/* n_q * n_kv * h_q * (d + dv) above this is scaled down: one input stays within milliseconds. */
#define WORK_LIMIT ((size_t)1500000)

enum { F_BAD_SCALE = FZ_COMMON_FAULTS, F_BAD_NORMALIZE, F_BAD_BIAS, F_HEADS, F_COUNT };

/* Bounds: tolerances.h's tol_gau_bound, from the reference's three error scales. */

static void check_defaults(const attn_gau_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dim,
                           size_t dv) {
  fz_check_shape_defaults("gau_desc_init", &d->shape, n_q, n_kv, h_q, h_kv, h_kv, dim, dv);
  FZ_CHECK(d->scale == (float)(1.0 / sqrt((double)dim)), "desc_init: scale %g is not 1/sqrt(d)", (double)d->scale);
  const attn_mask full = attn_mask_full();
  FZ_CHECK(d->mask.left == full.left && d->mask.right == full.right && d->mask.chunk == full.chunk,
           "desc_init: mask not full");
  FZ_CHECK(d->bias == ATTN_GAU_BIAS_SCALAR && d->beta == 0.0f && d->bias_table == NULL && d->bias_len == 0,
           "desc_init: bias not the scalar 0");
  FZ_CHECK(d->normalize == 0, "desc_init: normalize %d", d->normalize);
}

/* A bad bias on the call's descriptor: the table (when there is one) is the caller's `table` of
 * `count` floats, which a non-finite entry changes in place. */
static void bias_fault(fz_in *in, attn_gau_desc *d, float *table, size_t count) {
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  switch (fz_pick(in, 5)) {
    case 0:
      d->bias = (attn_gau_bias)(3 + fz_u8(in) % 4);
      break;
    case 1:
      d->bias = ATTN_GAU_BIAS_SCALAR;
      d->beta = bad[fz_pick(in, 3)];
      break;
    case 2:
      if (d->bias == ATTN_GAU_BIAS_SCALAR) d->bias = fz_pick(in, 2) ? ATTN_GAU_BIAS_CAUSAL : ATTN_GAU_BIAS_TWO_SIDED;
      d->bias_table = NULL;
      if (d->bias_len == 0) d->bias_len = 1;
      break;
    case 3:
      if (d->bias == ATTN_GAU_BIAS_SCALAR) {
        d->bias = ATTN_GAU_BIAS_CAUSAL;
        d->bias_table = table;
      }
      d->bias_len = 0;
      break;
    default:
      if (d->bias == ATTN_GAU_BIAS_SCALAR || count == 0) {
        d->beta = bad[fz_pick(in, 3)];
        d->bias = ATTN_GAU_BIAS_SCALAR;
      } else {
        table[fz_pick(in, 256) % count] = bad[fz_pick(in, 3)];
      }
      break;
  }
}

static void check_results(const attn_gau_desc *d, const fz_qkv *x, const tu_tensor *o) {
  const attn_shape *s = &d->shape;
  const size_t rows = s->n_q * s->h_q, count = rows * s->dv;
  double *ro = fz_doubles(count), *oscale = fz_doubles(count), *oarg = fz_doubles(count);
  double *onear = fz_doubles(count), *bound = fz_doubles(count), *one = fz_doubles(rows);
  const ref_gau_problem p = tu_gau_problem(d, &x->q, &x->k, &x->v);
  ref_gau(&p, ro, oscale, oarg, onear);
  for (size_t e = 0; e < count; ++e) bound[e] = tol_gau_bound(s->n_kv, s->d, oscale[e], oarg[e], onear[e]);
  for (size_t r = 0; r < rows; ++r) one[r] = 1.0;
  fz_compare("gau o", o, ro, bound, one, NULL); /* the reference applies the NaN policy */
  fz_free_all((void *[]){ro, oscale, oarg, onear, bound, one}, 6);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  fz_begin(&in, data, size);

  const fz_kv_sizes z = fz_draw_kv_sizes(&in, MAX_N, MAX_D, MAX_H, WORK_LIMIT);
  const size_t n_q = z.n_q, n_kv = z.n_kv, h_q = z.h_q, h_kv = z.h_kv, dim = z.d, dv = z.dv;
  fz_check_status("desc_init(NULL)", attn_gau_desc_init(NULL, n_q, n_kv, h_q, h_kv, dim, dv), ATTN_E_NULL_POINTER);
  attn_gau_desc d;
  fz_check_status("desc_init", attn_gau_desc_init(&d, n_q, n_kv, h_q, h_kv, dim, dv), ATTN_OK);
  check_defaults(&d, n_q, n_kv, h_q, h_kv, dim, dv);
  size_t need = 0;
  fz_check_status("workspace_size(defaults)", attn_gau_workspace_size(&d, &need), ATTN_OK);

  d.mask = fz_mask(&in, MAX_N);
  /* |scale q.k| up to ~4^2 * 130 * 16 ~ 3e4: r^2 ~ 1e9, far inside float */
  const float scales[8] = {d.scale, 1.0f, 4.0f, 16.0f, -1.0f, 0.0f, 1.0f / 512, -16.0f};
  const float amps[4] = {0.5f, 1.0f, 2.0f, 4.0f};
  d.scale = scales[fz_pick(&in, 8)];
  const float amp = amps[fz_pick(&in, 4)], vamp = fz_pick(&in, 4) ? 1.0f : 1000.0f;
  d.normalize = (int)fz_pick(&in, 2);

  /* the bias: a scalar from a short list, or a table of L entries (1 .. beyond the lengths) */
  const float betas[6] = {0.0f, 0.5f, -0.5f, 2.0f, -1e4f, 1e-3f};
  d.bias = (attn_gau_bias)fz_pick(&in, 3);
  size_t count = 0;
  float *table = NULL;
  if (d.bias == ATTN_GAU_BIAS_SCALAR) {
    d.beta = betas[fz_pick(&in, 6)];
  } else {
    d.bias_len = fz_size(&in, 2 * MAX_N);
    count = d.bias == ATTN_GAU_BIAS_CAUSAL ? d.bias_len : 2 * d.bias_len - 1;
    table = fz_calloc(count, sizeof(float)); /* exactly sized: ASan sees an over-read */
    const float tamp = amps[fz_pick(&in, 4)];
    for (size_t e = 0; e < count; ++e) table[e] = fz_value(&in, -tamp, tamp);
    d.bias_table = table;
  }
  fz_check_status("workspace_size(bias)", attn_gau_workspace_size(&d, &need), ATTN_OK);

  fz_qkv x;
  fz_qkv_make(&in, &x, &d.shape, -amp, amp, vamp);

  fz_call c = {0};
  d.shape.o = fz_layout(&in, n_q, h_q, dv, 1);
  fz_expect_output_layout(&c.query, n_q, h_q, dv, d.shape.o);
  c.call = c.query;
  tu_tensor o;
  fz_output_alloc(&in, &o, n_q, h_q, dv, d.shape.o);
  void *ws = fz_alloc(need, fz_pick(&in, 64));

  attn_gau_desc cd = d; /* the call's descriptor, which faults change */
  float *ctable = NULL; /* the call's copy of the table (a fault may poison it) */
  if (count) {
    ctable = fz_calloc(count, sizeof(float));
    for (size_t e = 0; e < count; ++e) ctable[e] = table[e];
    cd.bias_table = ctable;
  }
  fz_call_bind(&c, &cd.shape, NULL, &x, &o, ws, need);
  size_t own = 0; /* a valid call runs in its own bytes (at most need), which a workspace fault cuts */
  if (attn_gau_call_workspace_size(&cd, &own) == ATTN_OK) {
    FZ_CHECK(own <= need, "call_workspace_size %zu > workspace_size %zu", own, need);
    c.ws_bytes = own;
  }
  for (int f = fz_fault_count(&in); f > 0; --f) {
    const int fault = (int)fz_pick(&in, F_COUNT);
    if (fault == F_BAD_SCALE) {
      fz_scale_fault(&in, &c, &cd.scale);
    } else if (fault == F_BAD_NORMALIZE) {
      cd.normalize = fz_pick(&in, 2) ? 2 + (int)fz_u8(&in) : -1 - (int)fz_u8(&in);
      fz_expect_fault(&c.query, ATTN_E_BAD_ARGUMENT);
      fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
    } else if (fault == F_BAD_BIAS) {
      bias_fault(&in, &cd, ctable, count);
      fz_expect_fault(&c.query, ATTN_E_BAD_BIAS);
      fz_expect_fault(&c.call, ATTN_E_BAD_BIAS);
    } else if (fault == F_HEADS) {
      fz_kv_heads_fault(&in, &c);
    } else {
      fz_common_fault(&in, &c, fault);
    }
  }
  const attn_gau_desc *dp = c.null_desc ? NULL : &cd;

  size_t got = SIZE_MAX;
  const attn_status qs = attn_gau_workspace_size(dp, &got);
  fz_check_ws_query("attn_gau_workspace_size", qs, got, need, &c.query, attn_gau_workspace_size(dp, NULL));

  fz_watch w;
  fz_snap st_table;
  fz_watch_take(&w, &o, NULL, ws, need);
  fz_snap_take(&st_table, ctable, sizeof(float) * count);
  const attn_status st = attn_gau(dp, c.q, c.k, c.v, c.o, c.ws, c.ws_bytes);
  fz_watch_check(&w, "attn_gau", st, &c.call, &x);
  fz_snap_check(&st_table, "bias table after the call");
  if (st == ATTN_OK) {
    fz_check_output_clean("gau o", &o);
    check_results(&d, &x, &o);
  }
  fz_watch_free(&w);
  fz_snap_free(&st_table);
  fz_free(ws);
  fz_tensor_free(&o);
  fz_qkv_free(&x);
  free(table);
  free(ctable);
  return 0;
}
