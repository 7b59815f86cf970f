/*
 * int8 K and V in softmax attention (attn_shape.kv_type ATTN_I8 and ATTN_Q8_0, 0.8.0), per ISA
 * path: prefill, decode and speculative blocks, windows, GQA, strided and head-major layouts,
 * key ranges and threads, zero and extreme scales; bad descriptors and the variants that refuse
 * int8. Part of the kv_half executable (its TU_MAIN lists these rows).
 *
 * Inputs: K and V drawn as floats and quantised here (tests/common/half_ref.h rounds the q8_0
 * scales to fp16, independently of the library): ATTN_I8 with s = max |x| / 127 per (token,
 * head), ATTN_Q8_0 with d = fp16(max |x| / 127) per block of 32; each value q = round(x / s)
 * clamped to int8, and its float twin s * q (one float product, the dequantised value). The
 * scales' gaps (a padded scale layout) hold NaN and the q8_0 tensors' gap blocks a NaN scale, so
 * a read of either poisons the output.
 * Checks, per case:
 *   - bit for bit against the library's fp32 call on the twins: attn.h promises the fp32 call's
 *     results on the dequantised floats (NaN compares as NaN);
 *   - against the float64 reference of the twins with the softmax suite's bounds (factor 1: the
 *     dequantisation is the caller's, so the call owes only the fp32 call's rounding).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half_ref.h"
#include "kv_tests.h"
#include "test_util.h"
#include "tolerances.h"

#define UNB ATTN_UNBOUNDED
typedef struct i8_case {
  const char *name;
  attn_dtype ty;
  size_t n_q, n_kv, h_q, h_kv, d, dv;
  size_t left, right;
  tu_layout_kind lay;
  int threads; /* the int8 call on the library's pool of 2 workers */
  int extreme; /* zero scales, a scale of 1e30, values -128 and 127 */
} i8_case;

static const i8_case i8_cases[] = {
    {"i8 full tiny", ATTN_I8, 7, 37, 2, 2, 5, 3, UNB, UNB, TU_TOKEN_MAJOR, 0, 0},
    {"i8 prefill causal gqa padded", ATTN_I8, 45, 170, 4, 2, 24, 13, UNB, 0, TU_PADDED, 0, 0},
    {"i8 prefill packed heads", ATTN_I8, 530, 530, 2, 2, 16, 8, UNB, 0, TU_TOKEN_MAJOR, 0, 0},
    {"i8 decode gqa", ATTN_I8, 1, 700, 8, 2, 64, 64, UNB, 0, TU_TOKEN_MAJOR, 0, 0},
    {"i8 decode 8 heads threads", ATTN_I8, 1, 1500, 8, 8, 32, 32, UNB, 0, TU_TOKEN_MAJOR, 1, 0},
    {"i8 decode key ranges threads", ATTN_I8, 1, 9000, 4, 2, 16, 16, UNB, 0, TU_TOKEN_MAJOR, 1, 0},
    {"i8 verify window head-major", ATTN_I8, 5, 400, 8, 2, 16, 24, 99, 0, TU_HEAD_MAJOR, 0, 0},
    {"i8 extreme scales", ATTN_I8, 9, 300, 2, 1, 16, 16, UNB, 0, TU_TOKEN_MAJOR, 0, 1},
    {"i8 extreme scales decode", ATTN_I8, 1, 300, 4, 2, 16, 16, UNB, 0, TU_TOKEN_MAJOR, 0, 1},
    {"q8_0 decode gqa", ATTN_Q8_0, 1, 600, 8, 2, 64, 64, UNB, 0, TU_TOKEN_MAJOR, 0, 0},
    {"q8_0 prefill causal head-major", ATTN_Q8_0, 60, 200, 4, 4, 32, 96, UNB, 0, TU_HEAD_MAJOR, 0, 0},
    {"q8_0 verify gqa4 threads", ATTN_Q8_0, 8, 1100, 8, 2, 32, 32, UNB, 0, TU_TOKEN_MAJOR, 1, 0},
    {"q8_0 window", ATTN_Q8_0, 40, 300, 2, 1, 64, 32, 50, 3, TU_TOKEN_MAJOR, 0, 0},
    {"q8_0 extreme scales", ATTN_Q8_0, 3, 257, 2, 2, 32, 32, UNB, 0, TU_TOKEN_MAJOR, 0, 1},
};
#define I8_NCASES (sizeof i8_cases / sizeof i8_cases[0])

/* A quantised K or V: bytes in the library's layout (ATTN_I8: one per element, the twin's
 * strides; ATTN_Q8_0: 34-byte blocks, strides / 32), and for ATTN_I8 the scales (their layout). */
typedef struct qx {
  unsigned char *data;
  float *scales;
  attn_layout sl;
} qx;

static int8_t q_of(float x, float s) {
  const double r = s == 0.0f ? 0.0 : nearbyint((double)x / (double)s);
  return (int8_t)(r > 127.0 ? 127 : r < -128.0 ? -128 : r);
}

/* The row's scale as the case wants it: max |x| / 127, or (extreme) 0, 1e30 or that. */
static float scale_of(const i8_case *c, float amax, size_t i, size_t a) {
  if (c->extreme && i % 7 == 3) return 0.0f;
  if (c->extreme && i == 11 && a == 0) return 1e30f;
  return amax / 127.0f;
}

/* Quantise every element of t (a K or V twin), writing the dequantised floats back into it. */
static qx quantise(tu_tensor *t, const i8_case *c, tu_rng *r) {
  qx q = {0};
  if (c->ty == ATTN_I8) {
    q.data = malloc(t->span ? t->span : 1);
    q.sl = (attn_layout){t->h + 1, 1}; /* a gap after each token's scales: NaN */
    q.scales = malloc(sizeof(float) * t->n * q.sl.row_stride);
    ck_assert(q.data && q.scales);
    memset(q.data, 0x55, t->span);
    for (size_t e = 0; e < t->n * q.sl.row_stride; e++) q.scales[e] = NAN;
    for (size_t i = 0; i < t->n; i++)
      for (size_t a = 0; a < t->h; a++) {
        float amax = 0.0f;
        for (size_t x = 0; x < t->w; x++) amax = fmaxf(amax, fabsf(*tu_at(t, i, a, x)));
        const float s = scale_of(c, amax, i, a);
        q.scales[i * q.sl.row_stride + a] = s;
        for (size_t x = 0; x < t->w; x++) {
          float *v = tu_at(t, i, a, x);
          int8_t qq = q_of(*v, s);
          if (c->extreme && i % 5 == 1) qq = (int8_t)(x % 2 ? 127 : -128);
          q.data[(size_t)(v - t->data)] = (unsigned char)qq;
          *v = s * (float)qq;
        }
      }
    return q;
  }
  /* q8_0: the twin's strides are multiples of 32 (d and dv are); block b of a row at its
   * element offset / 32 */
  const size_t blocks = (t->span + 31) / 32;
  q.data = malloc(blocks * 34);
  ck_assert_ptr_nonnull(q.data);
  for (size_t b = 0; b < blocks; b++) { /* gaps: a NaN scale */
    q.data[b * 34] = 0x00, q.data[b * 34 + 1] = 0x7e;
    memset(q.data + b * 34 + 2, 1, 32);
  }
  (void)r;
  for (size_t i = 0; i < t->n; i++)
    for (size_t a = 0; a < t->h; a++)
      for (size_t b0 = 0; b0 < t->w; b0 += 32) {
        float amax = 0.0f;
        for (size_t x = b0; x < b0 + 32; x++) amax = fmaxf(amax, fabsf(*tu_at(t, i, a, x)));
        const float want = scale_of(c, amax, i, a);
        const uint16_t hb = hr_f16_bits(hr_f16_round((double)(want > 65504.0f ? 65504.0f : want)));
        const float s = (float)hr_f16_value(hb);
        float *first = tu_at(t, i, a, b0);
        unsigned char *blk = q.data + (size_t)(first - t->data) / 32 * 34;
        memcpy(blk, &hb, sizeof hb); /* the scale's bits in this machine's order */
        for (size_t x = b0; x < b0 + 32; x++) {
          float *v = tu_at(t, i, a, x);
          int8_t qq = q_of(*v, s);
          if (c->extreme && i % 5 == 1) qq = (int8_t)(x % 2 ? 127 : -128);
          blk[2 + (x - b0)] = (unsigned char)qq;
          *v = s * (float)qq;
        }
      }
  return q;
}

static void qx_free(qx *q) {
  free(q->data);
  free(q->scales);
}

/* got and want equal: same bits, or both NaN. */
static void same_bits(const char *what, const char *name, const float *got, const float *want, size_t n) {
  for (size_t e = 0; e < n; e++) {
    if (isnan(got[e]) && isnan(want[e])) continue;
    ck_assert_msg(memcmp(got + e, want + e, sizeof(float)) == 0, "%s %s: element %zu: int8 K/V %a, fp32 K/V %a", name,
                  what, e, (double)got[e], (double)want[e]);
  }
}

/* The call with workspace of exactly its own size (guarded). */
static void sm_run(const attn_softmax_desc *d, const float *q, const void *k, const void *v, tu_tensor *o,
                   tu_tensor *lse) {
  size_t ws = 0;
  TU_CALL_WS(attn_softmax, d, &ws);
  void *w = tu_alloc(ws, 0);
  ck_assert_int_eq(attn_softmax(d, q, k, v, o->data, lse->data, w, ws), ATTN_OK);
  tu_assert_guards("int8 workspace", w);
  tu_free(w);
}

START_TEST(kv_int8_softmax) {
  const i8_case *c = &i8_cases[_i];
  tu_rng rng = tu_rng_of(0x18 + (uint64_t)_i);
  tu_qkv x;
  tu_qkv_make(&x, c->lay, TU_DATA_UNIFORM, &rng, c->n_q, c->n_kv, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  qx k = quantise(&x.k, c, &rng), v = quantise(&x.v, c, &rng);
  tu_tensor o, o32, lse, lse32;
  tu_tensor_alloc(&o, TU_TOKEN_MAJOR, c->n_q, c->h_q, c->dv, 1);
  tu_tensor_alloc(&o32, TU_TOKEN_MAJOR, c->n_q, c->h_q, c->dv, 1);
  tu_tensor_alloc(&lse, TU_TOKEN_MAJOR, c->n_q, c->h_q, 1, 1);
  tu_tensor_alloc(&lse32, TU_TOKEN_MAJOR, c->n_q, c->h_q, 1, 1);
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, c->n_q, c->n_kv, c->h_q, c->h_kv, c->d, c->dv), ATTN_OK);
  d.mask = attn_mask_window(c->left, c->right);
  tu_shape_layouts(&d.shape, &x.q, &x.k, &x.v, &o);
  sm_run(&d, x.q.data, x.k.data, x.v.data, &o32, &lse32); /* fp32 on the twins */

  attn_softmax_desc di = d;
  di.shape.kv_type = c->ty;
  if (c->ty == ATTN_I8) {
    di.k_scales = k.scales, di.v_scales = v.scales, di.scale_layout = k.sl;
  } else { /* strides in blocks */
    di.shape.k.row_stride /= 32, di.shape.k.head_stride /= 32, di.shape.v.row_stride /= 32,
        di.shape.v.head_stride /= 32;
  }
  attn_pool *pool = NULL;
  attn_threads th;
  if (c->threads) {
    ck_assert_int_eq(attn_pool_create(2, &pool), ATTN_OK);
    ck_assert_int_eq(attn_pool_threads(pool, &th), ATTN_OK);
    di.shape.threads = &th;
  }
  sm_run(&di, x.q.data, k.data, v.data, &o, &lse);
  attn_pool_destroy(pool);
  tu_assert_output_clean("o", &o);
  tu_assert_output_clean("lse", &lse);
  same_bits("o", c->name, o.data, o32.data, o.span);
  same_bits("lse", c->name, lse.data, lse32.data, lse.span);

  /* the float64 reference of the dequantised values */
  const size_t rows = c->n_q * c->h_q;
  const ref_softmax_problem p = tu_softmax_problem(&d, &x.q, &x.k, &x.v);
  double *ro = malloc(sizeof(double) * rows * c->dv), *rs = malloc(sizeof(double) * rows * c->dv);
  double *rl = malloc(sizeof(double) * rows), *sabs = malloc(sizeof(double) * rows);
  double *tol = malloc(sizeof(double) * rows * c->dv), *one = malloc(sizeof(double) * rows);
  ck_assert(ro && rs && rl && sabs && tol && one);
  ref_softmax(&p, ro, rl, rs, sabs);
  for (size_t r = 0; r < rows; r++)
    for (size_t e = 0; e < c->dv; e++) tol[r * c->dv + e] = tol_softmax_o(c->n_kv, c->d, sabs[r]);
  tu_compare("kv_int8.softmax.o", c->name, &o, ro, rs, tol);
  for (size_t r = 0; r < rows; r++)
    one[r] = 1.0, tol[r] = tol_softmax_lse(c->n_kv, c->d, sabs[r], isfinite(rl[r]) ? rl[r] : 0);
  tu_compare("kv_int8.softmax.lse", c->name, &lse, rl, one, tol);
  free(ro), free(rs), free(rl), free(sabs), free(tol), free(one);
  tu_tensor_free(&o), tu_tensor_free(&o32), tu_tensor_free(&lse), tu_tensor_free(&lse32);
  qx_free(&k), qx_free(&v);
  tu_qkv_free(&x);
}
END_TEST

/* Bad int8 calls: a status, a detail, nothing written. */
enum { BAD_N = 2, BAD_H = 2, BAD_D = 32 };
START_TEST(kv_int8_bad) {
  static float q[BAD_N * BAD_H * BAD_D], o[BAD_N * BAD_H * BAD_D + 64], lse[BAD_N * BAD_H], scales[BAD_N * BAD_H];
  static int8_t k[BAD_N * BAD_H * BAD_D], v[BAD_N * BAD_H * BAD_D];
  static char ws[1 << 20];
  for (size_t i = 0; i < BAD_N * BAD_H; i++) scales[i] = 0.01f;
  for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) o[i] = -7.0f;
  /* each row's fault on a valid ATTN_I8 call; the query answers the call's status but aliasing's */
  static const struct {
    int ty;             /* kv_type */
    int k_null, v_null; /* a scale array NULL */
    size_t d;           /* d (0: BAD_D) */
    size_t scale_rows;  /* scale_layout.row_stride (0: BAD_H) */
    int scales_in_o;    /* k_scales inside o */
    attn_status want;
  } rows[] = {
      {ATTN_I8, 1, 0, 0, 0, 0, ATTN_E_NULL_POINTER}, {ATTN_I8, 0, 1, 0, 0, 0, ATTN_E_NULL_POINTER},
      {ATTN_Q8_0, 0, 0, 48, 0, 0, ATTN_E_BAD_DTYPE}, {ATTN_I8, 0, 0, 0, SIZE_MAX / 2, 0, ATTN_E_SIZE_OVERFLOW},
      {ATTN_I8, 0, 0, 0, 0, 1, ATTN_E_ALIASING},     {5, 0, 0, 0, 0, 0, ATTN_E_BAD_DTYPE},
  };
  attn_softmax_desc d;
  ck_assert_int_eq(attn_softmax_desc_init(&d, BAD_N, BAD_N, BAD_H, BAD_H, BAD_D, BAD_D), ATTN_OK);
  d.shape.kv_type = (attn_dtype)rows[_i].ty;
  d.k_scales = rows[_i].k_null ? NULL : rows[_i].scales_in_o ? o + 8 : scales;
  d.v_scales = rows[_i].v_null ? NULL : scales;
  if (rows[_i].d) d.shape.d = rows[_i].d, d.shape.k.row_stride = 2, d.shape.k.head_stride = 1;
  if (rows[_i].scale_rows) d.scale_layout.row_stride = rows[_i].scale_rows;
  size_t bytes = 12345;
  ck_assert_int_eq(attn_softmax(&d, q, k, v, o, lse, ws, sizeof ws), rows[_i].want);
  ck_assert_int_eq(attn_softmax_call_workspace_size(&d, &bytes), rows[_i].scales_in_o ? ATTN_OK : rows[_i].want);
  for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) ck_assert_msg(o[i] == -7.0f, "o[%zu] written", i);
  /* the variants that take no int8 K/V refuse both types */
  for (int ty = ATTN_I8; ty <= ATTN_Q8_0 && _i == 0; ty++) {
    attn_gau_desc gd;
    ck_assert_int_eq(attn_gau_desc_init(&gd, BAD_N, BAD_N, BAD_H, BAD_H, BAD_D, BAD_D), ATTN_OK);
    gd.shape.kv_type = (attn_dtype)ty;
    ck_assert_int_eq(attn_gau_workspace_size(&gd, &bytes), ATTN_E_BAD_DTYPE);
    attn_selective_desc sd;
    ck_assert_int_eq(attn_selective_desc_init(&sd, BAD_N, BAD_N, BAD_H, BAD_H, BAD_D, BAD_D), ATTN_OK);
    sd.shape.kv_type = (attn_dtype)ty;
    ck_assert_int_eq(attn_selective_workspace_size(&sd, &bytes), ATTN_E_BAD_DTYPE);
    attn_linear_desc ld;
    ck_assert_int_eq(attn_linear_desc_init(&ld, BAD_N, BAD_N, BAD_H, BAD_H, BAD_D, BAD_D, ATTN_FEATURE_ELU1), ATTN_OK);
    ld.shape.kv_type = (attn_dtype)ty;
    ck_assert_int_eq(attn_linear_workspace_size(&ld, &bytes), ATTN_E_BAD_DTYPE);
  }
}
END_TEST

tu_entry kv_int8_row(size_t i) {
  const tu_entry rows[] = {{"int8", kv_int8_softmax, (int)I8_NCASES}, {"int8", kv_int8_bad, 6 /* its rows */}};
  return rows[i];
}
