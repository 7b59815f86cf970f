/*
 * libFuzzer target: attn_linear_desc_init, attn_shape_init, attn_linear_feature_size,
 * attn_linear_state_size, attn_linear_state_init, attn_linear_chunk_size,
 * attn_linear_workspace_size, attn_linear and attn_linear_gated.
 *
 * From the bytes: the ISA path, shapes (n up to 200, d and dv up to 130), head counts h_q, h_k
 * and h_v, each a divisor of H = max of them (up to 8: MHA, GQA/MQA, Mamba2-style value groups,
 * h_k != h_v with lcm(h_k, h_v) state heads), feature map (the exponential maps exp, favor and
 * dsoftmax included: normalised, a positive temperature, dsoftmax with scale 1 and eps 0),
 * feature size m (0 or d; favor: 0 (4d), d, or any m up to 4d + 3), favor's W (seed sources chi
 * and sqrt(d) with a seed, or the caller's floats as W or W^T), normalised or not, scale (0
 * included; negative when un-normalised), eps (0 included), chunk size, layouts (packed QKV
 * included), values, and one of three modes:
 * - plain: causal or full mask, and for causal calls a state: none, or one or two calls in a row
 *   on the same state (a prefill continued by a decode step or another chunk, with its own h_q);
 * - windowed (every map; the exponential maps since 0.4.0): h_k = h_v dividing h_q, a mask neither
 *   full nor causal (left and right sides 0, small, beyond every position or unbounded; chunk-local
 *   widths), no state, n_q <= n_kv (chunked prefill, decode) or not; the reference is ref_linear
 *   with the window (the exponential maps: normalised over each row's visible keys, its offsets);
 * - gated (element-wise maps): attn_linear_gated with a SCALAR or FEATURE gate or none, beta or
 *   not, h_g gate heads (0: H), log gates in [lo, 0] (lo from -0.05 to -20) and betas in
 *   [0.05, 2] in token-major, padded, head-major or row-stride-0 layouts, causal, with states as
 *   in the plain mode; the reference is ref_gated (tolerances.h, gated linear attention).
 * The last call gets up to two faults (fuzz_common.h, head counts that do not divide H included,
 * plus a bad feature map or m, a mask other than full or causal (gated calls), a
 * bad normalize flag, chunk, scale or eps, a state of another shape (heads, m, dv, ld, map, mode),
 * a NULL state memory, a state on a bidirectional or windowed call, a state over o; for the
 * exponential maps no normaliser, a scale they refuse, dsoftmax's eps, favor's source or W;
 * windowed: h_k != h_v, a gate or beta, an exponential map un-normalised; gated: a log gate > 0 or
 * not finite, a
 * beta <= 0 or not finite, a NULL gate or beta, an unknown gate kind or beta flag, h_g not
 * dividing H, an exponential map, attn_linear in place of attn_linear_gated).
 * Checks: the queries answer what the header documents (m = d, or favor's m; the chunk, the state
 * bytes L * m * (dv + 2) floats with L = lcm(h_k, h_v (, h_g)); a state of either kind, rows of
 * dv + 2 floats or aligned ones (attn_linear_state_init_aligned), one workspace size for every
 * layout) or the status of the faulty descriptor without writing; calls return the expected
 * status; inputs (gates and betas included) are unchanged; on error o, the workspace and the state
 * (struct and memory) are unchanged; on success guards and gap elements are intact, o matches the
 * float64 reference (with the library's incoming state as the reference's prefix) and the state
 * (S, z and the offset column) matches the reference's state and token count (favor: S and z in
 * the library's offsets, which come from its own float dot products; exp and dsoftmax: the offsets
 * exactly).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "linear_util.h"
#include "tolerances.h"

enum { MAX_N = 200, MAX_D = 130, MAX_H = 8 };
/* n_q * n_kv * H * (d + dv) above this is scaled down (the reference is quadratic in n). */
#define WORK_LIMIT ((size_t)600000)

enum {
  F_FEATURE_MAP = FZ_COMMON_FAULTS,
  F_MASK,
  F_MODE,
  F_CHUNK,
  F_SCALE,
  F_EPS,
  F_STATE,
  F_XMAP,
  F_WINDOW,
  F_GATE,
  F_COUNT
};

/* The three kinds of calls (element-wise maps only for the last two). */
enum { MODE_PLAIN = 0, MODE_WINDOW, MODE_GATED };

/* What stays fixed across the calls of one input (the state's shape and mode, favor's W). */
typedef struct lin_shape {
  int mode;
  size_t h_k, h_v, L, d, dv; /* L = lcm(h_k, h_v (, h_g)) state heads */
  attn_gate_kind gate;       /* gated mode: the gate kind, beta, gate heads (0: H, every h_q = L) */
  int beta;
  size_t h_g;
  float glo; /* log gates in [glo, 0] */
  attn_feature_map fm;
  int normalize;
  float lo, hi, vamp; /* q, k in [lo, hi]; v in [-vamp, vamp] */
  size_t m_desc, m;   /* the descriptor's m (0: the map's own) and the feature size */
  attn_favor_source src;
  uint64_t seed;
  float *w;    /* favor: the caller's W (src CALLER), or what favor_matrix writes for the seed */
  float *wt;   /* favor, src CALLER_T: W^T (d x m), what the calls pass */
  float scale; /* exp and favor: the temperature of every call (> 0) */
} lin_shape;

static int is_xmap(attn_feature_map fm) {
  return fm == ATTN_FEATURE_EXP || fm == ATTN_FEATURE_FAVOR || fm == ATTN_FEATURE_DSOFTMAX;
}

/* A state bound to guarded memory of exactly L * d * ld floats (ld = dv + 2, or an aligned
 * state's dv + 2 rounded up to 16). */
typedef struct lin_state {
  attn_linear_state s;
  void *mem;
  size_t bytes;
} lin_state;

static int is_causal(const attn_linear_desc *d) { return attn_mask_is_causal(d->mask); }

static void check_queries(const attn_linear_desc *d, attn_isa isa, size_t L, size_t want_m, size_t *ws_bytes,
                          size_t *state_bytes) {
  size_t m = 0, chunk = 0;
  fz_check_status("feature_size", attn_linear_feature_size(d, &m), ATTN_OK);
  FZ_CHECK(m == want_m, "feature_size %zu, expected %zu (map %d, d %zu, desc m %zu)", m, want_m, (int)d->feature_map,
           d->shape.d, d->m);
  fz_check_status("chunk_size", attn_linear_chunk_size(d, &chunk), ATTN_OK);
  /* the path's chunk, or 1 (the recurrence) for per-feature gates over a small state (attn.h) */
  const size_t path_default = isa == ATTN_ISA_SCALAR ? 64 : 48, rec_max = isa == ATTN_ISA_SCALAR ? 16512 : 4160;
  const int elementwise = d->feature_map == ATTN_FEATURE_IDENTITY || d->feature_map == ATTN_FEATURE_ELU1 ||
                          d->feature_map == ATTN_FEATURE_RELU;
  const int rec = d->gate == ATTN_GATE_FEATURE && is_causal(d) && !d->exclusive_chunk && elementwise &&
                  want_m * (d->shape.dv + (d->normalize ? 1 : 0)) <= rec_max;
  FZ_CHECK(chunk == (d->chunk ? d->chunk : rec ? 1 : path_default), "chunk_size %zu (desc %zu)", chunk, d->chunk);
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
static unsigned char *poisoned_state_rows(const attn_shape *s, size_t L, size_t m, const fz_qkv *x, const double *s0) {
  const size_t slab = m * (s->dv + 2);
  unsigned char *rows = fz_calloc(L * m, 1);
  for (size_t hs = 0; hs < L; ++hs) {
    const size_t hk = hs / (L / s->h_k), hv = hs / (L / s->h_v);
    int bad = 0;
    for (size_t e = 0; s0 && e < slab && !bad; ++e) bad = !isfinite(s0[hs * slab + e]);
    for (size_t j = 0; j < s->n_kv && !bad; ++j) bad = fz_row_nonfinite(&x->k, j, hk) || fz_row_nonfinite(&x->v, j, hv);
    memset(rows + hs * m, bad, m);
  }
  return rows;
}

/* What a comparison names: the call's descriptor in short. */
static void describe(char *buf, size_t len, const char *what, const attn_linear_desc *d, int mode) {
  const attn_shape *s = &d->shape;
  snprintf(buf, len,
           "%s (mode %d, map %d, normalize %d, scale %g, eps %g, mask {%zu, %zu, %zu}, n_q %zu, n_kv %zu, "
           "heads %zu/%zu/%zu, h_g %zu, gate %d, beta %d, d %zu, dv %zu, chunk %zu)",
           what, mode, (int)d->feature_map, d->normalize, (double)d->scale, (double)d->eps, d->mask.left, d->mask.right,
           d->mask.chunk, s->n_q, s->n_kv, s->h_q, s->h_k, s->h_v, d->h_g, (int)d->gate, d->beta, s->d, s->dv,
           d->chunk);
}

/* Windowed calls: the rows (query, output head) that see no key while their q holds a NaN or an
 * infinity. attn.h's policy makes them NaN (a row uses q_i); the library's windowed path (the
 * blocked engine, like softmax attention's rows without keys) writes zeros there, while its
 * chunkwise path writes NaN for the same rows of a causal call: reported as a library
 * inconsistency, and left out of the comparison until it is settled (NULL when there is none). */
static unsigned char *empty_rows_nonfinite_q(const attn_linear_desc *d, const fz_qkv *x) {
  const attn_shape *s = &d->shape;
  const size_t H = lu_out_heads(d);
  unsigned char *rows = NULL;
  for (size_t i = 0; i < s->n_q; ++i) {
    int seen = 0;
    for (size_t j = 0; j < s->n_kv && !seen; ++j)
      seen = ref_visible(i, j, s->n_q, s->n_kv, d->mask.left, d->mask.right, d->mask.chunk);
    for (size_t h = 0; h < H && !seen; ++h)
      if (fz_row_nonfinite(&x->q, i, h / (H / s->h_q))) {
        if (!rows) rows = fz_calloc(s->n_q * H, 1);
        rows[i * H + h] = 1;
      }
  }
  return rows;
}

/* o (and the state after the call) against the reference; s0: the state before, or NULL. The
 * tolerances of tolerances.h are per element for the exponential maps (they grow with the size of
 * the exponents, arg / scale): compared as |err| <= 1 * bound. */
static void check_results(const attn_linear_desc *d, const lin_shape *sh, const fz_qkv *x, const tu_tensor *o,
                          const lin_state *st, const double *s0, uint64_t tokens0) {
  const attn_shape *s = &d->shape;
  const size_t H = fz_heads_out(s->h_q, s->h_k, s->h_v), L = fz_state_heads(s->h_k, s->h_v), m = sh->m;
  const size_t rows = s->n_q * H, ld = s->dv + 2, slab = m * ld, sfloats = L * slab;
  const size_t n_tokens = (size_t)tokens0 + s->n_kv, count = rows * s->dv;
  double *ro = fz_doubles(count), *oscale = fz_doubles(count), *oarg = fz_doubles(count), *ones = fz_doubles(rows);
  const ref_linear_problem p = lu_ref_problem(d, &x->q, &x->k, &x->v, s0, m, sh->w);
  ref_linear_ex(&p, ro, oscale, oarg);
  const int xmap = is_xmap(d->feature_map);
  for (size_t r = 0; r < rows; ++r) ones[r] = 1.0;
  for (size_t e = 0; e < count; ++e) /* the bound itself, in place of the scale */
    oscale[e] *= (xmap ? tol_linear_xp_o(n_tokens, m, oscale[e], oarg[e]) : tol_linear_o(n_tokens, m)) +
                 tol_equal_terms(n_tokens + m);
  char what[320];
  describe(what, sizeof what, "linear o", d, sh->mode);
  unsigned char *odd_rows = lu_windowed(d->mask) ? empty_rows_nonfinite_q(d, x) : NULL;
  fz_compare(what, o, ro, oscale, ones, odd_rows); /* the reference applies the NaN policy */
  free(odd_rows);
  if (st) {
    double *rs = fz_doubles(sfloats), *sscale = fz_doubles(sfloats), *sarg = fz_doubles(sfloats);
    double *stol = fz_doubles(L * m);
    ref_linear_state_ex(&p, rs, sscale, sarg);
    for (size_t r = 0; r < L * m; ++r) {
      stol[r] = 1.0;
      /* favor: re-express the reference's S and z in the library's offsets (S exp(c - c_lib)) */
      const double f = d->feature_map == ATTN_FEATURE_FAVOR && isfinite(rs[r * ld + s->dv + 1]) &&
                               isfinite(st->s.data[r * ld + s->dv + 1])
                           ? exp(rs[r * ld + s->dv + 1] - (double)st->s.data[r * ld + s->dv + 1])
                           : 1.0;
      for (size_t c = 0; c < ld; ++c) {
        const size_t e = r * ld + c;
        if (c <= s->dv) {
          rs[e] *= f;
          sscale[e] *= f;
          sarg[e] *= f;
        }
        sscale[e] *= (xmap ? tol_linear_xp_state(n_tokens, sscale[e], sarg[e]) : tol_linear_state(n_tokens)) +
                     tol_equal_terms(n_tokens);
      }
    }
    tu_tensor view = {st->s.data, L, m, ld, {slab, ld}, sfloats, NULL, 0};
    unsigned char *free_rows = fz_nonfinite() ? poisoned_state_rows(s, L, m, x, s0) : NULL;
    describe(what, sizeof what, "linear state", d, sh->mode);
    fz_compare(what, &view, rs, sscale, stol, free_rows);
    free(free_rows);
    FZ_CHECK(st->s.tokens == n_tokens, "state tokens %llu, expected %zu", (unsigned long long)st->s.tokens, n_tokens);
    free(rs);
    free(sscale);
    free(sarg);
    free(stol);
  }
  free(ro);
  free(oscale);
  free(oarg);
  free(ones);
}

/* The log gates and betas of a gated call ([n_kv][h_g][m or 1], [n_kv][h_g]), NULL data when the
 * call has none, each allocated exactly (no guard: ASan sees an over-read) with its gaps set to the
 * sentinel NaN. */
typedef struct lin_gates {
  tu_tensor g, b;
  fz_snap snap[2];
} lin_gates;

/* A gate or beta tensor in a layout from the bytes: token-major, padded, head-major, or row
 * stride 0 (the same row for every token); values in [lo, hi]. */
static void gate_tensor(fz_in *in, tu_tensor *t, size_t n, size_t h, size_t w, float lo, float hi) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->h = h;
  t->w = w;
  const tu_layout_kind kinds[3] = {TU_TOKEN_MAJOR, TU_PADDED, TU_HEAD_MAJOR};
  const size_t kind = fz_pick(in, 4);
  t->l = kind < 3 ? tu_layout(kinds[kind], n, h, w) : (attn_layout){0, w + fz_pick(in, 3)};
  const size_t rows = t->l.row_stride ? n : 1;
  t->span = (rows - 1) * t->l.row_stride + (h - 1) * t->l.head_stride + w;
  t->owner = t->data = fz_calloc(t->span, sizeof(float));
  tu_fill_sentinel(t->data, t->span);
  for (size_t i = 0; i < rows; ++i)
    for (size_t g = 0; g < h; ++g)
      for (size_t f = 0; f < w; ++f) *tu_at(t, i, g, f) = fz_value(in, lo, hi);
}

static void gates_make(fz_in *in, lin_gates *gb, const lin_shape *sh, size_t n_kv, size_t H) {
  memset(gb, 0, sizeof *gb);
  const size_t hg = sh->h_g ? sh->h_g : H;
  if (sh->gate != ATTN_GATE_NONE)
    gate_tensor(in, &gb->g, n_kv, hg, sh->gate == ATTN_GATE_FEATURE ? sh->d : 1, sh->glo, 0.0f);
  if (sh->beta) gate_tensor(in, &gb->b, n_kv, hg, 1, 0.05f, 2.0f);
}

/* One logical element of a gate tensor (t, h, f), picked by the bytes. */
static float *gate_at(fz_in *in, const tu_tensor *t) {
  return tu_at(t, fz_pick(in, 256) % t->n, fz_pick(in, 256) % t->h, fz_pick(in, 256) % t->w);
}

static void gates_free(lin_gates *gb) {
  for (int i = 0; i < 2; ++i) fz_snap_free(&gb->snap[i]);
  fz_tensor_free(&gb->g);
  fz_tensor_free(&gb->b);
}

/* A gated call's o and state against ref_gated (chunk and step chunk C: tolerances.h, gated
 * linear attention), with the library's incoming state as the prefix. */
static void check_results_gated(const attn_linear_desc *d, const lin_shape *sh, const fz_qkv *x, const tu_tensor *o,
                                const lin_state *st, const double *s0, uint64_t tokens0, const lin_gates *gb) {
  const attn_shape *s = &d->shape;
  const size_t H = lu_out_heads(d), L = sh->L, m = s->d, ld = s->dv + 2, sfloats = L * m * ld;
  const size_t rows = s->n_q * H, count = rows * s->dv, n_tokens = (size_t)tokens0 + s->n_kv;
  size_t C = 0;
  fz_check_status("chunk_size", attn_linear_chunk_size(d, &C), ATTN_OK);
  const ref_gated_problem p = lu_gated_problem(d, &x->q, &x->k, &x->v, &gb->g, &gb->b, s0, C, C);
  FZ_CHECK(ref_gated_heads(&p) == H && ref_gated_state_heads(&p) == L, "gated heads: H %zu, L %zu", H, L);
  double *ro = fz_doubles(6 * count), *ones = fz_doubles(rows > L * m ? rows : L * m);
  ref_gated_scales sc = {ro + count, ro + 2 * count, ro + 3 * count, ro + 4 * count, ro + 5 * count};
  ref_gated(&p, ro, &sc);
  for (size_t r = 0; r < (rows > L * m ? rows : L * m); ++r) ones[r] = 1.0;
  for (size_t e = 0; e < count; ++e) /* the bound itself, in place of the scale */
    sc.abs[e] *= tol_gated(n_tokens, m, sc.abs[e], sc.log[e], sc.step[e], sc.tiny[e], sc.floor[e]) +
                 tol_equal_terms(n_tokens + m);
  char what[320];
  describe(what, sizeof what, "gated o", d, sh->mode);
  fz_compare(what, o, ro, sc.abs, ones, NULL);
  if (st) {
    double *rs = fz_doubles(5 * sfloats);
    ref_gated_scales ss = {rs + sfloats, rs + 2 * sfloats, rs + 3 * sfloats, rs + 4 * sfloats, NULL};
    ref_gated_state(&p, rs, &ss);
    for (size_t e = 0; e < sfloats; ++e)
      ss.abs[e] *= tol_gated(n_tokens, 0, ss.abs[e], ss.log[e], ss.step[e], ss.tiny[e], 1.0) + tol_equal_terms(n_tokens);
    tu_tensor view = lu_state_view(&st->s);
    unsigned char *free_rows = fz_nonfinite() ? poisoned_state_rows(s, L, m, x, s0) : NULL;
    describe(what, sizeof what, "gated state", d, sh->mode);
    fz_compare(what, &view, rs, ss.abs, ones, free_rows);
    free(free_rows);
    FZ_CHECK(st->s.tokens == n_tokens, "state tokens %llu, expected %zu", (unsigned long long)st->s.tokens, n_tokens);
    free(rs);
  }
  free(ro);
  free(ones);
}

/* A window from the bytes: each side 0, small, past every position (n <= 200) or unbounded, and a
 * chunk-local width (none, small or wide); may come out full or causal (then it is one of those). */
static attn_mask draw_window(fz_in *in) {
  size_t side[2];
  for (int i = 0; i < 2; ++i) {
    const unsigned k = fz_pick(in, 5);
    side[i] = k == 0   ? 0
              : k == 1 ? 1 + fz_u8(in) % 20
              : k == 2 ? 150 + 4 * fz_u8(in)
              : k == 3 ? SIZE_MAX - 1
                       : SIZE_MAX;
  }
  const unsigned c = fz_pick(in, 3);
  const size_t chunk = c == 0 ? 0 : c == 1 ? 1 + fz_u8(in) % 16 : 1 + 8 * (size_t)fz_u8(in);
  const attn_mask m = {side[0], side[1], chunk};
  return m;
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
    case 3: /* neither dv + 2 nor the aligned width (both are a state's) */
      s->ld = fz_u8(in) & 1 ? s->ld - 1 : s->ld + 1 + fz_u8(in);
      if (s->ld == s->dv + 2 || s->ld == lu_state_ld_aligned(s->dv)) s->ld++;
      break;
    case 4:
      s->normalize = !s->normalize;
      break;
    default: /* another map (the exponential maps: exp <-> favor, dsoftmax -> identity) */
      s->feature_map = s->feature_map == ATTN_FEATURE_EXP     ? ATTN_FEATURE_FAVOR
                       : s->feature_map == ATTN_FEATURE_FAVOR ? ATTN_FEATURE_EXP
                                                              : (attn_feature_map)!s->feature_map;
      break;
  }
}

/* 1 when every count (h_g 0: not one) divides the largest. */
static int heads_valid(size_t h_q, size_t h_k, size_t h_v, size_t h_g) {
  if (!h_q || !h_k || !h_v) return 0;
  const size_t H3 = fz_heads_out(h_q, h_k, h_v), H = H3 > h_g ? H3 : h_g;
  return H % h_q == 0 && H % h_k == 0 && H % h_v == 0 && (!h_g || H % h_g == 0);
}

/* A query head count that fits the state's heads: each count divides the largest (gated: h_g too;
 * with h_g 0 the gate heads are H, so h_q = L keeps H, and the state, the same in every call);
 * windowed: a multiple of h_k = h_v. */
static size_t pick_h_q(fz_in *in, const lin_shape *sh) {
  if (sh->mode == MODE_GATED && !sh->h_g) return sh->L;
  size_t fit[MAX_H], count = 0;
  for (size_t h = 1; h <= MAX_H; ++h)
    if (sh->mode == MODE_WINDOW ? h % sh->h_k == 0 : heads_valid(h, sh->h_k, sh->h_v, sh->h_g)) fit[count++] = h;
  return fit[fz_pick(in, count)]; /* h = L always fits */
}

/* One call on a descriptor drawn from the bytes; faults only when `last`. Returns 0 when the call
 * failed (as expected), which ends the sequence. */
static int one_call(fz_in *in, attn_isa isa, const lin_shape *sh, lin_state *st, int last) {
  const size_t h_q = pick_h_q(in, sh), H3 = fz_heads_out(h_q, sh->h_k, sh->h_v);
  const size_t H = sh->mode == MODE_GATED && sh->h_g > H3 ? sh->h_g : H3; /* o's heads */
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
  const int temperature = sh->fm == ATTN_FEATURE_EXP || sh->fm == ATTN_FEATURE_FAVOR;
  const int dsoftmax = sh->fm == ATTN_FEATURE_DSOFTMAX;
  FZ_CHECK(is_causal(&d) && d.feature_map == sh->fm && d.m == 0 &&
               d.scale == (temperature ? 1.0f / sqrtf((float)sh->d) : 1.0f) && d.normalize == 1 &&
               d.eps == (dsoftmax ? 0.0f : 1e-6f) && d.chunk == 0 && d.favor_source == ATTN_FAVOR_SEED_CHI &&
               d.favor_seed == 0 && d.favor_w == NULL,
           "desc_init: defaults (map %d)", (int)sh->fm);
  fz_check_status("shape_init", attn_shape_init(&d.shape, n_q, n_kv, h_q, sh->h_k, sh->h_v, sh->d, sh->dv), ATTN_OK);
  fz_check_shape_defaults("shape_init", &d.shape, n_q, n_kv, h_q, sh->h_k, sh->h_v, sh->d, sh->dv);
  if (sh->mode == MODE_WINDOW)
    d.mask = draw_window(in);
  else
    d.mask = st || sh->mode == MODE_GATED || fz_pick(in, 2) == 0 ? attn_mask_causal() : attn_mask_full();
  d.normalize = sh->normalize;
  const float eps[4] = {1e-6f, 0.0f, 1.0f, 1e-3f};
  d.eps = dsoftmax ? 0.0f : eps[fz_pick(in, 4)];
  d.chunk = fz_pick(in, 2) ? 0 : fz_size(in, ATTN_LINEAR_MAX_CHUNK);
  d.m = sh->fm == ATTN_FEATURE_FAVOR ? sh->m_desc : fz_pick(in, 2) ? 0 : sh->d;
  const float scales[6] = {1.0f, 0.5f, 2.0f, 0.125f, 0.0f, 3.0f};
  d.scale = scales[fz_pick(in, 6)];
  if (!sh->normalize && fz_pick(in, 2)) d.scale = -d.scale; /* a normaliser wants s phi(q).z > 0 */
  if (temperature) d.scale = sh->scale;                     /* the temperature is part of the sequence (its offsets) */
  if (dsoftmax) d.scale = 1.0f;
  d.favor_source = sh->src;
  d.favor_seed = sh->seed;
  d.favor_w = sh->src == ATTN_FAVOR_CALLER ? sh->w : sh->src == ATTN_FAVOR_CALLER_T ? sh->wt : NULL;
  lin_gates gb;
  memset(&gb, 0, sizeof gb);
  if (sh->mode == MODE_GATED) {
    d.gate = sh->gate;
    d.beta = sh->beta;
    d.h_g = sh->h_g;
    d.shape.o = tu_layout(TU_TOKEN_MAJOR, n_q, H, sh->dv); /* H heads when h_g is the largest count */
    gates_make(in, &gb, sh, n_kv, H);
    if (gb.g.data) d.gate_layout = gb.g.l;
    if (gb.b.data) d.beta_layout = gb.b.l;
  }
  size_t need = 0, state_bytes = 0;
  check_queries(&d, isa, sh->L, sh->m, &need, &state_bytes);

  fz_qkv x;
  fz_qkv_make(in, &x, &d.shape, sh->lo, sh->hi, sh->vamp); /* d.shape: the sizes of attn_shape_init above */

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
  const float *gp = gb.g.data, *bp = gb.b.data;
  int gated_entry = sh->mode == MODE_GATED; /* attn_linear_gated, or attn_linear */
  for (int f = last ? fz_fault_count(in) : 0; f > 0; --f) {
    attn_status want = ATTN_OK; /* a fault of the descriptor: the queries answer it too */
    switch (fz_pick(in, F_COUNT)) {
      case F_FEATURE_MAP:
        if ((fz_u8(in) & 1) || sh->fm == ATTN_FEATURE_FAVOR) /* favor takes any m >= 1 */
          cd.feature_map = (attn_feature_map)(ATTN_FEATURE_COUNT + fz_u8(in));
        else
          cd.m = sh->d > 1 && (fz_u8(in) & 1) ? 1 + fz_u8(in) % (sh->d - 1) : sh->d + 1 + fz_u8(in);
        want = ATTN_E_BAD_FEATURE_MAP;
        break;
      case F_XMAP: /* what only the exponential maps refuse */
        if (!is_xmap(sh->fm)) break;
        switch (fz_pick(in, sh->fm == ATTN_FEATURE_FAVOR ? 4 : sh->fm == ATTN_FEATURE_DSOFTMAX ? 3 : 2)) {
          case 0:
            cd.normalize = 0;
            want = ATTN_E_BAD_NORMALIZATION;
            break;
          case 1: {
            const float bad[4] = {0.0f, -1.0f, 2.0f, 0.5f}; /* dsoftmax: not 1; exp, favor: <= 0 */
            cd.scale = bad[sh->fm == ATTN_FEATURE_DSOFTMAX ? fz_pick(in, 4) : fz_pick(in, 2)];
            want = ATTN_E_BAD_SCALE;
            break;
          }
          case 2:
            if (sh->fm == ATTN_FEATURE_DSOFTMAX) {
              cd.eps = fz_u8(in) & 1 ? 1e-6f : 1.0f;
              want = ATTN_E_BAD_EPS;
            } else {
              cd.favor_source = (attn_favor_source)(fz_u8(in) & 1 ? 99 : -1);
              want = ATTN_E_BAD_FEATURE_MATRIX;
            }
            break;
          default: /* favor: the caller's W missing or not finite */
            cd.favor_source = ATTN_FAVOR_CALLER;
            cd.favor_w = fz_u8(in) & 1 ? NULL : sh->w + sh->m * sh->d; /* the poisoned copy */
            want = ATTN_E_BAD_FEATURE_MATRIX;
            break;
        }
        break;
      case F_MASK: /* a gate takes the causal mask only (every map takes a window since 0.4.0) */
        if (sh->mode == MODE_GATED && lu_gated(&cd)) {
          /* a window with h_k != h_v, or h_q below H, is refused for its heads first */
          const int heads_ok = cd.shape.h_k == cd.shape.h_v && cd.shape.h_q == H;
          cd.mask = heads_ok && (fz_u8(in) & 1) ? bad_mask(in, cd.mask) : attn_mask_full();
          want = ATTN_E_BAD_WINDOW;
        }
        break;
      case F_WINDOW: /* what a window refuses (with a mask that is one) */
        if (sh->mode != MODE_WINDOW || !lu_windowed(cd.mask)) break;
        switch (fz_pick(in, 3)) {
          case 0: { /* h_k != h_v, or h_q below H: counts that would do without the window */
            attn_shape *hs = &cd.shape;
            if (hs->h_k > 1)
              hs->h_v = 1;
            else if (hs->h_q > 1)
              hs->h_v = hs->h_q;
            else
              hs->h_k = hs->h_v = 2;
            const size_t Hn = fz_heads_out(hs->h_q, hs->h_k, hs->h_v);
            hs->k = tu_layout(TU_TOKEN_MAJOR, hs->n_kv, hs->h_k, hs->d); /* layouts valid for the new counts */
            hs->v = tu_layout(TU_TOKEN_MAJOR, hs->n_kv, hs->h_v, hs->dv);
            hs->o = tu_layout(TU_TOKEN_MAJOR, hs->n_q, Hn, hs->dv);
            want = ATTN_E_BAD_HEADS;
            break;
          }
          case 1: /* a gate or beta */
            if (fz_u8(in) & 1)
              cd.gate = fz_u8(in) & 1 ? ATTN_GATE_SCALAR : ATTN_GATE_FEATURE;
            else
              cd.beta = 1;
            gated_entry = fz_u8(in) & 1;
            want = ATTN_E_BAD_WINDOW;
            break;
          default: /* an exponential map un-normalised (a window takes them normalised only, as the other masks) */
            cd.feature_map = (attn_feature_map)(ATTN_FEATURE_EXP + fz_pick(in, 3));
            cd.normalize = 0;
            want = ATTN_E_BAD_NORMALIZATION;
            break;
        }
        break;
      case F_GATE: /* what a gated call refuses */
        if (sh->mode != MODE_GATED) break;
        switch (fz_pick(in, 8)) {
          case 0: /* a log gate > 0 or not finite, or a beta <= 0 or not finite */
          case 1: {
            const int on_gate = gb.g.data && (!gb.b.data || (fz_u8(in) & 1));
            if (on_gate) {
              const float bad[5] = {0.25f, 1e-30f, NAN, INFINITY, -INFINITY};
              *gate_at(in, &gb.g) = bad[fz_pick(in, 5)];
            } else if (gb.b.data) {
              const float bad[5] = {0.0f, -0.5f, NAN, INFINITY, -0.0f};
              *gate_at(in, &gb.b) = bad[fz_pick(in, 5)];
            } else {
              break;
            }
            fz_expect_fault(&c.call, ATTN_E_BAD_GATE);
            break;
          }
          case 2: /* a NULL gate or beta the descriptor asks for */
            if (gb.g.data && (!gb.b.data || (fz_u8(in) & 1)))
              gp = NULL;
            else if (gb.b.data)
              bp = NULL;
            else
              break;
            fz_expect_fault(&c.call, ATTN_E_NULL_POINTER);
            break;
          case 3:
            cd.gate = (attn_gate_kind)(fz_u8(in) & 1 ? ATTN_GATE_FEATURE + 1 + fz_u8(in) : -1 - (int)fz_u8(in));
            want = ATTN_E_BAD_GATE;
            break;
          case 4:
            cd.beta = fz_u8(in) & 1 ? 2 + (int)fz_u8(in) : -1 - (int)fz_u8(in);
            want = ATTN_E_BAD_GATE;
            break;
          case 5: /* h_g that does not divide H (when that breaks the rule) */
            if (!heads_valid(cd.shape.h_q, cd.shape.h_k, cd.shape.h_v, H + 1)) {
              cd.h_g = H + 1;
              cd.gate = cd.gate == ATTN_GATE_NONE && !cd.beta ? ATTN_GATE_SCALAR : cd.gate;
              want = ATTN_E_BAD_HEADS;
            }
            break;
          case 6: /* an exponential map */
            cd.feature_map = (attn_feature_map)(ATTN_FEATURE_EXP + fz_pick(in, 3));
            cd.gate = cd.gate == ATTN_GATE_NONE && !cd.beta ? ATTN_GATE_SCALAR : cd.gate;
            want = ATTN_E_BAD_FEATURE_MAP;
            break;
          default: /* attn_linear with a gate or beta: the wrong call (ATTN_E_NULL_POINTER before 0.6.1) */
            if (gb.g.data || gb.b.data) {
              gated_entry = 0;
              fz_expect_fault(&c.call, ATTN_E_BAD_ARGUMENT);
            }
            break;
        }
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
            call_state = (attn_linear_state){sh->L, sh->m, sh->dv, sh->dv + 2, sh->fm, sh->normalize, 0, o.data};
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
      default: {
        const int fault = (int)fz_pick(in, FZ_COMMON_FAULTS);
        if (fault == FZ_BAD_HEADS) cd.h_g = 0; /* H = max(h_q, h_k, h_v): fz_break_heads's rule */
        fz_common_fault(in, &c, fault);
      }
    }
    if (want != ATTN_OK) {
      fz_expect_fault(&c.query, want);
      fz_expect_fault(&c.call, want);
    }
  }
  const attn_linear_desc *dp = c.null_desc ? NULL : &cd;
  check_queries_expect(dp, &c.query, need);

  double *s0 = NULL;
  fz_watch w;
  fz_snap ss;
  fz_watch_take(&w, &o, NULL, ws, need);
  fz_snap_take(&ss, st ? st->mem : NULL, st ? st->bytes : 0);
  if (st && st->s.tokens > 0) { /* in the reference's rows */
    const size_t floats = st->s.heads * st->s.m * (st->s.dv + 2);
    float *rows = fz_calloc(floats, sizeof(float));
    (void)lu_state_compact(&st->s, rows);
    s0 = fz_doubles(floats);
    for (size_t e = 0; e < floats; ++e) s0[e] = rows[e];
    free(rows);
  }
  const attn_linear_state before = call_state;
  fz_snap_take(&gb.snap[0], gb.g.data, gb.g.data ? sizeof(float) * gb.g.span : 0);
  fz_snap_take(&gb.snap[1], gb.b.data, gb.b.data ? sizeof(float) * gb.b.span : 0);
  const attn_status rc = gated_entry ? attn_linear_gated(dp, c.q, c.k, c.v, gp, bp, c.o, sp, c.ws, c.ws_bytes)
                                     : attn_linear(dp, c.q, c.k, c.v, c.o, sp, c.ws, c.ws_bytes);
  fz_watch_check(&w, gated_entry ? "attn_linear_gated" : "attn_linear", rc, &c.call, &x);
  fz_snap_check(&gb.snap[0], "log gates");
  fz_snap_check(&gb.snap[1], "beta");
  if (st) FZ_CHECK(fz_guards_intact(st->mem), "state memory guard zone written");
  if (rc != ATTN_OK) {
    fz_snap_check(&ss, "state memory after an error");
    FZ_CHECK(memcmp(&before, &call_state, sizeof before) == 0, "state struct changed on error");
  } else {
    if (st) st->s = call_state;
    fz_check_output_clean("linear o", &o);
    lin_state cst = st ? *st : (lin_state){{0}, NULL, 0}; /* the state in the reference's rows */
    float *rows = st ? fz_calloc(st->s.heads * st->s.m * (sh->dv + 2), sizeof(float)) : NULL;
    if (st) cst.s = lu_state_compact(&st->s, rows);
    if (sh->mode == MODE_GATED)
      check_results_gated(&d, sh, &x, &o, st ? &cst : NULL, s0, before.tokens, &gb);
    else
      check_results(&d, sh, &x, &o, st ? &cst : NULL, s0, before.tokens);
    free(rows);
  }
  gates_free(&gb);
  free(s0);
  fz_watch_free(&w);
  fz_snap_free(&ss);
  fz_free(ws);
  fz_tensor_free(&o);
  fz_qkv_free(&x);
  return rc == ATTN_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  const attn_isa isa = fz_begin(&in, data, size);
  lin_shape sh;
  const size_t heads = fz_size(&in, MAX_H); /* h_k and h_v divide it: their lcm does too */
  sh.h_k = fz_divisor(&in, heads);
  sh.h_v = fz_divisor(&in, heads);
  sh.L = fz_state_heads(sh.h_k, sh.h_v);
  sh.d = fz_size(&in, MAX_D);
  sh.dv = fz_size(&in, MAX_D);
  sh.fm = (attn_feature_map)fz_pick(&in, ATTN_FEATURE_COUNT); /* every map */
  sh.normalize = is_xmap(sh.fm) || fz_pick(&in, 3) != 0;      /* the exponential maps: normalised only */
  /* the mode: gates are the element-wise maps'; windows take every map (0.4.0) */
  sh.mode = (int)fz_pick(&in, is_xmap(sh.fm) ? 2 : 3);
  sh.gate = ATTN_GATE_NONE;
  sh.beta = 0;
  sh.h_g = 0;
  sh.glo = 0.0f;
  if (sh.mode == MODE_WINDOW) { /* h_k = h_v, dividing h_q */
    sh.h_v = sh.h_k;
    sh.L = sh.h_k;
  }
  if (sh.mode == MODE_GATED) {
    sh.gate = (attn_gate_kind)fz_pick(&in, 3);
    sh.beta = (int)fz_pick(&in, 2);
    sh.h_g = fz_pick(&in, 2) ? fz_divisor(&in, heads) : 0; /* a divisor of heads: L still divides it */
    if (sh.gate == ATTN_GATE_NONE && !sh.beta) sh.h_g = 0; /* h_g counts with a gate or beta only */
    if (sh.h_g) sh.L = ref_lcm(sh.L, sh.h_g);
    const float glo[4] = {-0.05f, -0.5f, -3.0f, -20.0f};
    sh.glo = glo[fz_pick(&in, 4)];
  }
  const float amps[4] = {0.25f, 1.0f, 4.0f, 30.0f};
  const float amp = amps[fz_pick(&in, 4)];
  const float temps[5] = {0.0f, 1.0f, 0.25f, 2.0f, 0.01f}; /* 0: the default 1/sqrt(d) */
  sh.scale = temps[fz_pick(&in, 5)];
  if (sh.scale == 0.0f) sh.scale = 1.0f / sqrtf((float)sh.d);
  /* favor: m (0: 4d), the source of W; the caller's W from the values, with a poisoned copy of it
   * after it (for the faults), or the seed's W as favor_matrix writes it (for the reference) */
  sh.m_desc = 0;
  sh.m = sh.d;
  sh.src = ATTN_FAVOR_SEED_CHI;
  sh.seed = 0;
  sh.w = sh.wt = NULL;
  if (sh.fm == ATTN_FEATURE_FAVOR) {
    const unsigned mp = fz_pick(&in, 4);
    sh.m_desc = mp == 0 ? 0 : mp == 1 ? sh.d : fz_size(&in, 4 * sh.d + 3);
    sh.m = sh.m_desc ? sh.m_desc : 4 * sh.d;
    sh.src = (attn_favor_source)fz_pick(&in, 4); /* chi, sqrt(d), caller W, caller W^T */
    sh.seed = fz_u8(&in) * 0x9E3779B97F4A7C15ull;
    const size_t wn = sh.m * sh.d;
    sh.w = fz_calloc(2 * wn, sizeof(float));
    if (sh.src >= ATTN_FAVOR_CALLER) {
      for (size_t e = 0; e < wn; ++e) sh.w[e] = fz_value(&in, -2.0f, 2.0f);
      sh.wt = fz_calloc(wn, sizeof(float));
      for (size_t f = 0; f < sh.m; ++f)
        for (size_t t = 0; t < sh.d; ++t) sh.wt[t * sh.m + f] = sh.w[f * sh.d + t];
    } else {
      attn_linear_desc wd;
      attn_linear_desc_init(&wd, 1, 1, 1, 1, sh.d, sh.dv, sh.fm);
      wd.m = sh.m_desc;
      wd.favor_source = sh.src;
      wd.favor_seed = sh.seed;
      size_t wsb = 0;
      fz_check_status("favor workspace_size", attn_linear_workspace_size(&wd, &wsb), ATTN_OK);
      void *wws = fz_alloc(wsb, 0);
      fz_check_status("favor_matrix", attn_linear_favor_matrix(&wd, sh.w, wn, wws, wsb), ATTN_OK);
      FZ_CHECK(fz_guards_intact(wws), "favor_matrix: workspace guard zone written");
      fz_free(wws);
    }
    for (size_t e = 0; e < wn; ++e) sh.w[wn + e] = sh.w[e];
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    sh.w[wn + fz_pick(&in, 256) % wn] = bad[fz_pick(&in, 3)];
  }
  /* identity with a normaliser needs phi(q).z > 0 to be well conditioned: non-negative q, k */
  sh.lo = sh.fm == ATTN_FEATURE_IDENTITY && sh.normalize ? 0.0f : -amp;
  sh.hi = sh.fm == ATTN_FEATURE_IDENTITY && amp > 4.0f ? 4.0f : amp;
  sh.vamp = fz_pick(&in, 4) ? 1.0f : 100.0f;
  fz_check_status("desc_init(NULL)", attn_linear_desc_init(NULL, 1, 1, 1, 1, 1, 1, sh.fm), ATTN_E_NULL_POINTER);

  /* 0: no state; 1: one call on a state; 2: two calls (windows: no state) */
  const unsigned plan = sh.mode == MODE_WINDOW ? 0 : (unsigned)fz_pick(&in, 3);
  lin_state st = {{0}, NULL, 0};
  if (plan > 0) {
    attn_linear_desc d;
    attn_linear_desc_init(&d, 1, 1, sh.L, sh.h_k, sh.d, sh.dv, sh.fm);
    attn_shape_init(&d.shape, 1, 1, sh.L, sh.h_k, sh.h_v, sh.d, sh.dv); /* h_q = L: every count divides it */
    d.normalize = sh.normalize;
    d.m = sh.m_desc;
    if (sh.mode == MODE_GATED) { /* L = lcm(h_k, h_v, h_g) state heads */
      const size_t hg = sh.h_g ? sh.h_g : sh.L, w = sh.gate == ATTN_GATE_FEATURE ? sh.d : 1;
      d.gate = sh.gate;
      d.beta = sh.beta;
      d.h_g = sh.h_g;
      d.gate_layout = (attn_layout){hg * w, w};
      d.beta_layout = (attn_layout){hg, 1};
    }
    const int aligned = (int)fz_pick(&in, 2);
    attn_status (*init)(attn_linear_state *, const attn_linear_desc *, void *, size_t) =
        aligned ? attn_linear_state_init_aligned : attn_linear_state_init;
    const size_t ld = aligned ? lu_state_ld_aligned(sh.dv) : sh.dv + 2;
    st.bytes = sizeof(float) * sh.L * sh.m * ld;
    size_t reported = 0;
    fz_check_status("state_size", (aligned ? attn_linear_state_size_aligned : attn_linear_state_size)(&d, &reported),
                    ATTN_OK);
    FZ_CHECK(reported == st.bytes, "state size %zu, expected %zu", reported, st.bytes);
    st.mem = fz_alloc(st.bytes, 0);
    fz_snap small;
    fz_snap_take(&small, st.mem, st.bytes);
    fz_check_status("state_init(too small)", init(&st.s, &d, st.mem, st.bytes - 1 - fz_u8(&in) % st.bytes),
                    ATTN_E_WORKSPACE_TOO_SMALL);
    fz_snap_check(&small, "state memory after a refused state_init");
    fz_snap_free(&small);
    fz_check_status("state_init", init(&st.s, &d, st.mem, st.bytes), ATTN_OK);
    FZ_CHECK(st.s.heads == sh.L && st.s.m == sh.m && st.s.dv == sh.dv && st.s.ld == ld && st.s.feature_map == sh.fm &&
                 st.s.normalize == sh.normalize && st.s.tokens == 0 && st.s.data == st.mem,
             "state_init: shape");
    for (size_t e = 0; e < st.bytes / sizeof(float); ++e) FZ_CHECK(st.s.data[e] == 0.0f, "state_init: not zeroed");
  }
  for (unsigned call = 0; call < (plan ? plan : 1); ++call)
    if (!one_call(&in, isa, &sh, plan ? &st : NULL, call + 1 == (plan ? plan : 1))) break;
  fz_free(st.mem);
  free(sh.w);
  free(sh.wt);
  return 0;
}
