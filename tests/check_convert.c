/*
 * The row converters attn_f32_to_f16, attn_f16_to_f32, attn_f32_to_bf16 and attn_bf16_to_f32 on
 * the path ATTN_ISA forces, against references written here from the formats' definitions in
 * double arithmetic (independent of the library's bit manipulation and of tests/common/half_ref.h).
 * Every result is compared bit for bit, NaNs included (attn.h specifies their bits), so passing on
 * every path means every path gives the same bits. Inputs: all 65536 patterns of each half type;
 * every fp16 value, the midpoints between neighbours and their float neighbours; every bf16 upper
 * half with the lower halves at and around a tie; millions of random float bit patterns; listed
 * specials; lengths 0 .. 67 at element offsets 0 .. 3 in guarded buffers; bad input; threads.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* ---- references ---------------------------------------------------------------------------- */
/* The bits of a value that a float represents exactly (a half value). */
static uint32_t ref_f32_bits(double v) { return u_of((float)v); }

/* Value of fp16 bits: (-1)^s (1024 + f) 2^(e - 25), subnormals f 2^-24; NaN with e = 31, f != 0. */
static double ref_f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, f = h & 1023;
  const double s = h >> 15 ? -1.0 : 1.0;
  if (e == 31) return f ? NAN : s * INFINITY;
  return s * (e ? ldexp(1024 + f, e - 25) : ldexp(f, -24));
}
/* Value of bf16 bits: (-1)^s (128 + f) 2^(e - 134), subnormals f 2^-133; NaN with e = 255, f != 0. */
static double ref_bf16_value(uint16_t h) {
  const int e = (h >> 7) & 255, f = h & 127;
  const double s = h >> 15 ? -1.0 : 1.0;
  if (e == 255) return f ? NAN : s * INFINITY;
  return s * (e ? ldexp(128 + f, e - 134) : ldexp(f, -133));
}
/* Expected floats: the value's bits; a NaN as attn.h says (fp16 made quiet, bf16 shifted). */
static uint32_t ref_f16_to_f32(uint16_t h) {
  const double v = ref_f16_value(h);
  if (!isnan(v)) return ref_f32_bits(v);
  return (uint32_t)(h & 0x8000) << 16 | 0x7fc00000u | (uint32_t)(h & 1023) << 13;
}
static uint32_t ref_bf16_to_f32(uint16_t h) { return (uint32_t)h << 16; }

/* |x| (finite, not 0) as a multiple m of quantum q = 2^qe, rounded to the nearest integer, ties
 * to the even one, by comparing the remainder with one half (no reliance on rounding modes). */
static double ref_round(double a, int qe) {
  const double m = ldexp(a, -qe), r = floor(m), d = m - r; /* exact: a has 24 bits */
  return ldexp(d > 0.5 || (d == 0.5 && fmod(r, 2.0) == 1.0) ? r + 1.0 : r, qe);
}
/* fp16 bits of x: quantum 2^(e - 10) for binade 2^e >= 2^-14, 2^-24 below; 65520 and above: inf. */
static uint16_t ref_f32_to_f16(float x) {
  const uint32_t u = u_of(x);
  const uint16_t s = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(x)) return (uint16_t)(s | 0x7e00 | ((u >> 13) & 1023));
  const double a = fabs((double)x);
  if (a >= 65520.0) return (uint16_t)(s | 0x7c00);
  if (a == 0.0) return s;
  const double v = ref_round(a, a >= 0x1p-14 ? ilogb(a) - 10 : -24);
  if (v < 0x1p-14) return (uint16_t)(s | (uint16_t)ldexp(v, 24));
  const int e = ilogb(v);
  return (uint16_t)(s | (e + 15) << 10 | (uint16_t)(ldexp(v, 10 - e) - 1024.0));
}
/* bf16 bits of x: 8 significant bits (quantum 2^(e - 7), 2^-133 below 2^-126); 2^128: inf. */
static uint16_t ref_f32_to_bf16(float x) {
  const uint32_t u = u_of(x);
  const uint16_t s = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  const double a = fabs((double)x);
  if (a == 0.0 || isinf(a)) return (uint16_t)(u >> 16);
  const double v = ref_round(a, a >= 0x1p-126 ? ilogb(a) - 7 : -133);
  return v >= 0x1p128 ? (uint16_t)(s | 0x7f80) : (uint16_t)(s | ref_f32_bits(v) >> 16);
}

/* The references on every finite fp16 value (each rounds to itself, and comes back); the
 * specials test below checks them against bits written out. */
START_TEST(reference_self_check) {
  for (uint32_t h = 0; h < 0x7c00; h++) {
    ck_assert_uint_eq(ref_f32_to_f16((float)ref_f16_value((uint16_t)h)), h);
    ck_assert_uint_eq(ref_f32_to_f16(f_of(ref_f16_to_f32((uint16_t)(h | 0x8000)))), h | 0x8000);
  }
}
END_TEST

/* ---- checks ------------------------------------------------------------------------------- */
/* x (n floats) through attn_f32_to_f16 (bf = 0) or attn_f32_to_bf16, against the reference. */
static void check_down(int bf, const float *x, size_t n) {
  uint16_t *y = malloc(n * sizeof *y);
  ck_assert_ptr_nonnull(y);
  ck_assert_int_eq((bf ? attn_f32_to_bf16 : attn_f32_to_f16)(x, y, n), ATTN_OK);
  for (size_t i = 0; i < n; i++) {
    const uint16_t want = bf ? ref_f32_to_bf16(x[i]) : ref_f32_to_f16(x[i]);
    ck_assert_msg(y[i] == want, "%s of 0x%08x (%a): 0x%04x, want 0x%04x", bf ? "bf16" : "f16", u_of(x[i]), (double)x[i],
                  y[i], want);
  }
  free(y);
}

/* Every pattern up, then back down: exact values, NaN bits as attn.h says; fp16 and bf16 each
 * round-trip except a signalling NaN, which comes back quiet. */
START_TEST(all_patterns_up_and_back) {
  const int bf = _i;
  uint16_t *h = malloc(65536 * sizeof *h), *back = malloc(65536 * sizeof *back);
  float *y = malloc(65536 * sizeof *y);
  ck_assert(h && back && y);
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  ck_assert_int_eq((bf ? attn_bf16_to_f32 : attn_f16_to_f32)(h, y, 65536), ATTN_OK);
  for (uint32_t i = 0; i < 65536; i++) {
    const uint32_t want = bf ? ref_bf16_to_f32((uint16_t)i) : ref_f16_to_f32((uint16_t)i);
    const double v = bf ? ref_bf16_value((uint16_t)i) : ref_f16_value((uint16_t)i);
    ck_assert_msg(u_of(y[i]) == want, "%s 0x%04x: 0x%08x, want 0x%08x", bf ? "bf16" : "f16", i, u_of(y[i]), want);
    ck_assert(isnan(v) ? isnan(y[i]) : (double)y[i] == v);
  }
  check_down(bf, y, 65536);
  ck_assert_int_eq((bf ? attn_f32_to_bf16 : attn_f32_to_f16)(y, back, 65536), ATTN_OK);
  const uint16_t quiet = bf ? 0x40 : 0x200;
  for (uint32_t i = 0; i < 65536; i++) {
    const int nan = isnan(y[i]);
    ck_assert_msg(back[i] == (nan ? (i | quiet) : i), "0x%04x came back 0x%04x", i, back[i]);
  }
  free(h), free(back), free(y);
}
END_TEST

/* Each finite fp16 value of both signs, the midpoint to the next one up (65520 above 65504),
 * and the float neighbours of both: ties go to even, one float ulp off a tie goes its way. */
START_TEST(f16_boundaries) {
  const size_t per = 6;
  float *x = malloc(2 * 0x7c00 * per * sizeof *x);
  ck_assert_ptr_nonnull(x);
  size_t n = 0;
  for (uint32_t h = 0; h < 0x7c00; h++) {
    const double v = ref_f16_value((uint16_t)h), up = h == 0x7bff ? 65536.0 : ref_f16_value((uint16_t)(h + 1));
    const float mid = (float)((v + up) / 2); /* 12 significant bits: exact */
    const float pts[6] = {(float)v, nextafterf((float)v, INFINITY), nextafterf(mid, 0),
                          mid,      nextafterf(mid, INFINITY),      nextafterf((float)up, 0)};
    for (size_t k = 0; k < per; k++) x[n++] = pts[k], x[n++] = -pts[k];
  }
  check_down(0, x, n);
  free(x);
}
END_TEST

/* Every bf16 upper half with the lower halves around and at the tie (NaNs among them). */
START_TEST(bf16_boundaries) {
  static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  const size_t nl = sizeof lows / sizeof lows[0];
  float *x = malloc(65536 * nl * sizeof *x);
  ck_assert_ptr_nonnull(x);
  for (uint32_t h = 0; h < 65536; h++)
    for (size_t k = 0; k < nl; k++) x[h * nl + k] = f_of(h << 16 | lows[k]);
  check_down(1, x, 65536 * nl);
  free(x);
}
END_TEST

/* Random float bit patterns, every exponent alike (NaNs, subnormals, infinities included). */
START_TEST(random_bits) {
  const size_t n = tu_small() ? (size_t)1 << 18 : (size_t)1 << 21;
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  tu_rng rng = tu_rng_of(0xc0417 + (uint64_t)_i);
  for (size_t i = 0; i < n; i++) x[i] = f_of((uint32_t)(tu_rng_next(&rng) >> 32));
  check_down(0, x, n);
  check_down(1, x, n);
  free(x);
}
END_TEST

/* Listed specials, against bits written out here as well as the reference. */
START_TEST(specials) {
  static const struct {
    uint32_t x;
    uint16_t f16, bf16;
  } t[] = {
      {0x00000000u, 0x0000, 0x0000}, {0x80000000u, 0x8000, 0x8000}, {0x7f800000u, 0x7c00, 0x7f80},
      {0xff800000u, 0xfc00, 0xff80}, {0x7f800001u, 0x7e00, 0x7fc0}, {0xffc00000u, 0xfe00, 0xffc0},
      {0x7fbfffffu, 0x7fff, 0x7fff}, {0x7f802000u, 0x7e01, 0x7fc0}, {0x00000001u, 0x0000, 0x0000},
      {0x807fffffu, 0x8000, 0x8080}, {0x477fe000u, 0x7bff, 0x4780}, {0x477fefffu, 0x7bff, 0x4780},
      {0x477ff000u, 0x7c00, 0x4780}, {0xc7800000u, 0xfc00, 0xc780}, {0x7f7fffffu, 0x7c00, 0x7f80},
      {0x33800000u, 0x0001, 0x3380}, {0x33000000u, 0x0000, 0x3300}, {0x33000001u, 0x0001, 0x3300},
      {0x387fc000u, 0x03ff, 0x3880}, {0x38800000u, 0x0400, 0x3880}, {0x3f808000u, 0x3c04, 0x3f80},
      {0x3f801000u, 0x3c00, 0x3f80}, {0x3f803000u, 0x3c02, 0x3f80}, {0x33c00000u, 0x0002, 0x33c0},
      {0x3f818000u, 0x3c0c, 0x3f82}, {0x00008000u, 0x0000, 0x0000}, {0x00018000u, 0x0000, 0x0002},
      {0x7fffffffu, 0x7fff, 0x7fff}, {0xff80ffffu, 0xfe07, 0xffc0}, {0x7f7f7fffu, 0x7c00, 0x7f7f},
      {0xff812345u, 0xfe09, 0xffc1}, {0x387fffffu, 0x0400, 0x3880}, {0xc77fefffu, 0xfbff, 0xc780},
  };
  const size_t n = sizeof t / sizeof t[0];
  float x[sizeof t / sizeof t[0]];
  uint16_t y[2][sizeof t / sizeof t[0]];
  for (size_t i = 0; i < n; i++) x[i] = f_of(t[i].x);
  ck_assert_int_eq(attn_f32_to_f16(x, y[0], n), ATTN_OK);
  ck_assert_int_eq(attn_f32_to_bf16(x, y[1], n), ATTN_OK);
  for (size_t i = 0; i < n; i++) {
    ck_assert_msg(y[0][i] == t[i].f16 && ref_f32_to_f16(x[i]) == t[i].f16, "f16 of 0x%08x: 0x%04x", t[i].x, y[0][i]);
    ck_assert_msg(y[1][i] == t[i].bf16 && ref_f32_to_bf16(x[i]) == t[i].bf16, "bf16 of 0x%08x: 0x%04x", t[i].x,
                  y[1][i]);
  }
}
END_TEST

/* ---- lengths, alignment, guards ------------------------------------------------------------ */
/* One call of converter k (0: f32 -> f16, 1: f32 -> bf16, 2: f16 -> f32, 3: bf16 -> f32). */
static attn_status convert(int k, const void *x, void *y, size_t n) {
  return k == 0   ? attn_f32_to_f16(x, y, n)
         : k == 1 ? attn_f32_to_bf16(x, y, n)
         : k == 2 ? attn_f16_to_f32(x, y, n)
                  : attn_bf16_to_f32(x, y, n);
}
static size_t in_size(int k) { return k < 2 ? sizeof(float) : sizeof(uint16_t); }
static size_t out_size(int k) { return k < 2 ? sizeof(uint16_t) : sizeof(float); }

/* Element i of converter k's input at x, converted by the references into out. */
static void ref_one(int k, const unsigned char *x, size_t i, unsigned char *out) {
  float f;
  uint16_t h, o16;
  uint32_t o32;
  if (k < 2) {
    memcpy(&f, x + i * sizeof f, sizeof f);
    o16 = k == 0 ? ref_f32_to_f16(f) : ref_f32_to_bf16(f);
    memcpy(out + i * sizeof o16, &o16, sizeof o16);
  } else {
    memcpy(&h, x + i * sizeof h, sizeof h);
    o32 = k == 2 ? ref_f16_to_f32(h) : ref_bf16_to_f32(h);
    memcpy(out + i * sizeof o32, &o32, sizeof o32);
  }
}

/* Lengths 0 .. 67 (tails of every path's vector, and its double) at element offsets 0 .. 3 of
 * guarded buffers: y[0 .. n) as the reference, everything after it untouched. Inputs: floats of
 * every fp16 binade and beyond, or half patterns of any kind. */
START_TEST(lengths_and_offsets) {
  const int k = _i;
  tu_rng rng = tu_rng_of(77 + (uint64_t)k);
  const size_t is = in_size(k), os = out_size(k), cap = 67 + 3;
  unsigned char *xb = tu_alloc(cap * is, 0), *yb = tu_alloc(cap * os, 0), *want = malloc(cap * os);
  ck_assert_ptr_nonnull(want);
  for (size_t n = 0; n <= 67; n++)
    for (size_t xo = 0; xo < 4; xo++)
      for (size_t yo = 0; yo < 4; yo++) {
        unsigned char *x = xb + xo * is, *y = yb + yo * os;
        for (size_t i = 0; i < n; i++) {
          const uint32_t r = (uint32_t)(tu_rng_next(&rng) >> 32);
          const float f = ldexpf((float)(r & 0xffffff) + 0.5f, (int)(r >> 24) % 48 - 48);
          const uint16_t h = (uint16_t)r;
          memcpy(x + i * is, k < 2 ? (const void *)&f : (const void *)&h, is);
        }
        memset(y, 0xa5, (cap - yo) * os);
        memcpy(want, y, (cap - yo) * os);
        for (size_t i = 0; i < n; i++) ref_one(k, x, i, want);
        ck_assert_int_eq(convert(k, x, y, n), ATTN_OK);
        ck_assert_msg(memcmp(y, want, (cap - yo) * os) == 0, "converter %d, n %zu, offsets %zu %zu", k, n, xo, yo);
      }
  ck_assert_int_eq(convert(k, NULL, NULL, 0), ATTN_OK); /* n = 0: nothing is read or written */
  ck_assert_int_eq(convert(k, xb, yb, 0), ATTN_OK);
  tu_assert_guards("x", xb);
  tu_assert_guards("y", yb);
  tu_free(xb), tu_free(yb), free(want);
}
END_TEST

/* NULL with n > 0, overlap in bytes (one element, or more), an impossible length: the status,
 * a detail for attn_last_error, and nothing written. Buffers that only touch are fine. */
START_TEST(bad_input) {
  const int k = _i;
  const size_t n = 16, is = in_size(k), os = out_size(k);
  _Alignas(16) unsigned char buf[4 * 16 * 4], copy[sizeof buf];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 37 + 11);
  memcpy(copy, buf, sizeof buf);
  unsigned char *x = buf + 64, y[16 * 4];
  memset(y, 0x5a, sizeof y);
  const struct {
    const void *x;
    void *y;
    size_t n;
    attn_status st;
  } t[] = {
      {NULL, y, n, ATTN_E_NULL_POINTER},       {x, NULL, n, ATTN_E_NULL_POINTER},
      {NULL, NULL, 1, ATTN_E_NULL_POINTER},    {x, x, n, ATTN_E_ALIASING},
      {x, x + n * is - 4, n, ATTN_E_ALIASING}, /* y's first element over x's last */
      {x, x - n * os + 4, n, ATTN_E_ALIASING}, /* y's last element over x's first */
      {x, y, SIZE_MAX, ATTN_E_SIZE_OVERFLOW},  {x, y, SIZE_MAX / 2, ATTN_E_SIZE_OVERFLOW},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    ck_assert_msg(convert(k, t[i].x, t[i].y, t[i].n) == t[i].st, "converter %d, row %zu", k, i);
    ck_assert_msg(attn_last_error()[0] != '\0', "converter %d, row %zu: no detail", k, i);
    ck_assert_msg(memcmp(buf, copy, sizeof buf) == 0, "converter %d, row %zu wrote its input", k, i);
    for (size_t b = 0; b < sizeof y; b++) ck_assert_msg(y[b] == 0x5a, "converter %d, row %zu wrote y", k, i);
  }
  ck_assert_int_eq(convert(k, x, x + n * is, n), ATTN_OK); /* y just after x */
  ck_assert_int_eq(convert(k, x, x - n * os, n), ATTN_OK); /* y just before x */
}
END_TEST

/* Calls from several threads at once give what one thread alone gives. */
static int reentrant_job(const void *arg, float *out) {
  const float *x = arg;
  return attn_f32_to_f16(x, (uint16_t *)(void *)out, 4096) || attn_f32_to_bf16(x, (uint16_t *)(void *)out + 4096, 4096);
}
START_TEST(reentrant) {
  static float x[4][4096];
  tu_rng rng = tu_rng_of(5);
  for (size_t t = 0; t < 4; t++)
    for (size_t i = 0; i < 4096; i++) x[t][i] = f_of((uint32_t)(tu_rng_next(&rng) >> 32));
  const void *args[4] = {x[0], x[1], x[2], x[3]};
  tu_assert_reentrant("f32 to f16 and bf16", reentrant_job, args, 4, 4096);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"convert", reference_self_check, 1}, {"convert", all_patterns_up_and_back, 2}, {"convert", f16_boundaries, 1},
    {"convert", bf16_boundaries, 1}, {"convert", random_bits, 2}, {"convert", specials, 1},
    {"convert", lengths_and_offsets, 4}, {"convert", bad_input, 4}, {"convert", reentrant, 1})
/* clang-format on */
