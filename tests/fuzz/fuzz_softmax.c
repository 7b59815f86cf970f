/*
 * libFuzzer target: attn_softmax_desc_init, attn_softmax_workspace_size and attn_softmax.
 *
 * From the bytes: the ISA path, shapes (n up to 200, d and dv up to 130, up to 8 heads, GQA),
 * the mask (window sides, and a chunk-local width: 0, small, up to n, or huge), the scale (logits
 * up to ~3e4), the options (sinks, a soft cap, ALiBi, a bias tensor: draw_options), layouts of every tensor (packed QKV included), the values, and up to two faults
 * (fuzz_common.h plus a non-finite scale, an lse over o, and head counts that divide H but that
 * softmax refuses: h_k != h_v, or h_q < H). Checks: the documented defaults of desc_init (the
 * shape as attn_shape_init writes it, full mask, 1/sqrt(d)); the workspace query answers the same
 * size for every layout and mask, or the status of the faulty descriptor without writing; the
 * call returns the expected status; inputs are unchanged; on error o, lse and the workspace are
 * unchanged; on success guards and gap elements are intact and o and lse match the float64
 * reference.
 */
#include <math.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "tolerances.h"

enum { MAX_N = 200, MAX_D = 130, MAX_H = 8 };
/* n_q * n_kv * h_q * (d + dv) above this is scaled down: one input stays within milliseconds. */
#define WORK_LIMIT ((size_t)1500000)

enum { F_BAD_SCALE = FZ_COMMON_FAULTS, F_LSE_OVER_O, F_HEADS, F_COUNT };

/* Bounds: tolerances.h's tol_softmax_o / tol_softmax_lse, relative to the reference's error
 * scales. */

static void check_defaults(const attn_softmax_desc *d, size_t n_q, size_t n_kv, size_t h_q, size_t h_kv, size_t dim,
                           size_t dv) {
  fz_check_shape_defaults("softmax_desc_init", &d->shape, n_q, n_kv, h_q, h_kv, h_kv, dim, dv);
  FZ_CHECK(d->scale == (float)(1.0 / sqrt((double)dim)), "desc_init: scale %g is not 1/sqrt(d)", (double)d->scale);
  const attn_mask full = attn_mask_full();
  FZ_CHECK(d->mask.left == full.left && d->mask.right == full.right && d->mask.chunk == full.chunk,
           "desc_init: mask not full");
  FZ_CHECK(d->lse.row_stride == h_q && d->lse.head_stride == 1, "desc_init: lse layout is not [n_q][h_q]");
  FZ_CHECK(!d->sinks && !d->alibi_slopes && !d->bias && d->softcap == 0.0f, "desc_init: an option is on");
  FZ_CHECK(d->bias_layout.row_stride == h_q * n_kv && d->bias_layout.head_stride == n_kv,
           "desc_init: bias layout is not [n_q][h_q][n_kv]");
}

/* The options (attn.h), each on with probability 1/4: sinks in [-5, 5], a soft cap of 0.5, 5
 * or 50, ALiBi slopes in [0, 1], a bias tensor in [-3, 3] with about 5% -inf (hidden pairs),
 * contiguous or broadcast over queries or heads. The arrays go to opt (freed by the caller). */
typedef struct sm_opt_arrays {
  float *sinks, *slopes, *bias;
} sm_opt_arrays;

static void draw_options(fz_in *in, attn_softmax_desc *d, sm_opt_arrays *a) {
  const attn_shape *s = &d->shape;
  *a = (sm_opt_arrays){0};
  if (fz_pick(in, 4) == 0) {
    a->sinks = malloc(sizeof(float) * s->h_q);
    for (size_t h = 0; h < s->h_q; h++) a->sinks[h] = fz_value(in, -5.0f, 5.0f);
    d->sinks = a->sinks;
  }
  if (fz_pick(in, 4) == 0) {
    const float caps[3] = {0.5f, 5.0f, 50.0f};
    d->softcap = caps[fz_pick(in, 3)];
  }
  if (fz_pick(in, 4) == 0) {
    a->slopes = malloc(sizeof(float) * s->h_q);
    for (size_t h = 0; h < s->h_q; h++) a->slopes[h] = fz_value(in, 0.0f, 1.0f);
    d->alibi_slopes = a->slopes;
  }
  if (fz_pick(in, 4) == 0) {
    const size_t kind = fz_pick(in, 3); /* 0: [n_q][h_q][n_kv], 1: rows broadcast, 2: heads broadcast */
    d->bias_layout = kind == 0   ? (attn_layout){s->h_q * s->n_kv, s->n_kv}
                     : kind == 1 ? (attn_layout){0, s->n_kv}
                                 : (attn_layout){s->n_kv, 0};
    const size_t n = (s->n_q - 1) * d->bias_layout.row_stride + (s->h_q - 1) * d->bias_layout.head_stride + s->n_kv;
    a->bias = malloc(sizeof(float) * n);
    for (size_t e = 0; e < n; e++) a->bias[e] = fz_pick(in, 20) == 0 ? -INFINITY : fz_value(in, -3.0f, 3.0f);
    d->bias = a->bias;
  }
}

static void check_results(const attn_softmax_desc *d, const fz_qkv *x, const tu_tensor *o, const tu_tensor *lse) {
  const size_t rows = d->shape.n_q * d->shape.h_q;
  double *ro = fz_doubles(rows * d->shape.dv), *oscale = fz_doubles(rows * d->shape.dv);
  double *rl = fz_doubles(rows), *sabs = fz_doubles(rows), *tol_o = fz_doubles(rows), *tol_l = fz_doubles(rows);
  const attn_shape *s = &d->shape;
  const ref_softmax_problem p = {s->n_q,
                                 s->n_kv,
                                 s->h_q,
                                 s->h_k,
                                 s->d,
                                 s->dv,
                                 d->scale,
                                 d->mask.left,
                                 d->mask.right,
                                 d->mask.chunk,
                                 x->q.data,
                                 x->k.data,
                                 x->v.data,
                                 tu_ref_layout(&x->q),
                                 tu_ref_layout(&x->k),
                                 tu_ref_layout(&x->v),
                                 d->sinks,
                                 d->alibi_slopes,
                                 d->bias,
                                 d->softcap,
                                 d->bias_layout.row_stride,
                                 d->bias_layout.head_stride};
  ref_softmax(&p, ro, rl, oscale, sabs);
  for (size_t r = 0; r < rows; ++r) {
    tol_o[r] = tol_softmax_o(s->n_kv, s->d, sabs[r]);
    tol_l[r] = tol_softmax_lse(s->n_kv, s->d, sabs[r], isfinite(rl[r]) ? rl[r] : 0.0);
  }
  /* With a sink above every key's logit by more than 87.33, all key weights underflow to 0 in
   * fp32 (attn.h: weights below e^-87.33 of the row's largest are 0), and o is 0 where the
   * reference has |o| < n_kv e^-87.33 max|v| (each dropped key weighs below e^-87.33 of the
   * sink): an absolute allowance of that size (|v| <= 1000 here). */
  for (size_t e = 0; d->sinks && e < rows * s->dv; ++e)
    oscale[e] = fmax(oscale[e], (double)s->n_kv * 1000.0 * 1.2e-38 / tol_o[e / s->dv]);
  fz_compare("softmax o", o, ro, oscale, tol_o, NULL); /* the reference applies the NaN policy */
  if (lse) fz_compare("softmax lse", lse, rl, NULL, tol_l, NULL);
  fz_free_all((void *[]){ro, oscale, rl, sabs, tol_o, tol_l}, 6);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  fz_begin(&in, data, size);

  const fz_kv_sizes z = fz_draw_kv_sizes(&in, MAX_N, MAX_D, MAX_H, WORK_LIMIT);
  const size_t n_q = z.n_q, n_kv = z.n_kv, h_q = z.h_q, h_kv = z.h_kv, dim = z.d, dv = z.dv;
  fz_check_status("desc_init(NULL)", attn_softmax_desc_init(NULL, n_q, n_kv, h_q, h_kv, dim, dv), ATTN_E_NULL_POINTER);
  attn_softmax_desc d;
  fz_check_status("desc_init", attn_softmax_desc_init(&d, n_q, n_kv, h_q, h_kv, dim, dv), ATTN_OK);
  check_defaults(&d, n_q, n_kv, h_q, h_kv, dim, dv);
  sm_opt_arrays opt;
  draw_options(&in, &d, &opt);
  size_t need = 0;
  fz_check_status("workspace_size(defaults)", attn_softmax_workspace_size(&d, &need), ATTN_OK);

  d.mask = fz_mask(&in, MAX_N);
  const float scales[8] = {d.scale, 1.0f, 4.0f, 16.0f, -1.0f, 0.0f, 1e-3f, -16.0f};
  const float amps[4] = {0.5f, 1.0f, 2.0f, 4.0f};
  d.scale = scales[fz_pick(&in, 8)];
  const float amp = amps[fz_pick(&in, 4)], vamp = fz_pick(&in, 4) ? 1.0f : 1000.0f;

  fz_qkv x;
  fz_qkv_make(&in, &x, &d.shape, -amp, amp, vamp);

  fz_call c = {0};
  d.shape.o = fz_layout(&in, n_q, h_q, dv, 1);
  d.lse = fz_layout(&in, n_q, h_q, 1, 1);
  fz_expect_output_layout(&c.query, n_q, h_q, dv, d.shape.o);
  fz_expect_output_layout(&c.query, n_q, h_q, 1, d.lse); /* checked even without an lse */
  c.call = c.query;
  tu_tensor o, lse;
  fz_output_alloc(&in, &o, n_q, h_q, dv, d.shape.o);
  fz_output_alloc(&in, &lse, n_q, h_q, 1, d.lse);
  const int with_lse = fz_pick(&in, 4) != 0;
  void *ws = fz_alloc(need, fz_pick(&in, 64));

  attn_softmax_desc cd = d; /* the call's descriptor, which faults change */
  fz_call_bind(&c, &cd.shape, &cd.lse, &x, &o, ws, need);
  size_t own = 0; /* a valid call runs in its own bytes (at most need), which a workspace fault cuts */
  if (attn_softmax_call_workspace_size(&cd, &own) == ATTN_OK) {
    FZ_CHECK(own <= need, "call_workspace_size %zu > workspace_size %zu", own, need);
    c.ws_bytes = own;
  }
  float *lse_arg = with_lse ? lse.data : NULL;
  for (int f = fz_fault_count(&in); f > 0; --f) {
    const int fault = (int)fz_pick(&in, F_COUNT);
    if (fault == F_BAD_SCALE) {
      fz_scale_fault(&in, &c, &cd.scale);
    } else if (fault == F_LSE_OVER_O && lse_arg) {
      lse_arg = c.o;
      fz_expect_fault(&c.call, ATTN_E_ALIASING);
    } else if (fault == F_HEADS) {
      fz_kv_heads_fault(&in, &c);
    } else {
      fz_common_fault(&in, &c, fault);
    }
  }
  const attn_softmax_desc *dp = c.null_desc ? NULL : &cd;

  size_t got = SIZE_MAX;
  const attn_status qs = attn_softmax_workspace_size(dp, &got);
  fz_check_ws_query("attn_softmax_workspace_size", qs, got, need, &c.query, attn_softmax_workspace_size(dp, NULL));

  fz_watch w;
  fz_watch_take(&w, &o, &lse, ws, need);
  const attn_status st = attn_softmax(dp, c.q, c.k, c.v, c.o, lse_arg, c.ws, c.ws_bytes);
  fz_watch_check(&w, "attn_softmax", st, &c.call, &x);
  if (st == ATTN_OK) {
    fz_check_output_clean("softmax o", &o);
    fz_check_output_clean("softmax lse", &lse);
    if (!with_lse) fz_snap_check(&w.lse, "lse buffer passed as NULL");
    check_results(&d, &x, &o, with_lse ? &lse : NULL);
  }
  fz_watch_free(&w);
  fz_free(ws);
  fz_tensor_free(&o);
  fz_tensor_free(&lse);
  fz_qkv_free(&x);
  free(opt.sinks);
  free(opt.slopes);
  free(opt.bias);
  return 0;
}
