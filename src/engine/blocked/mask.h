/* The blocked engine's mask geometry (engine/blocked.h, attn_mask in positions): which keys a
 * position sees, which positions see a key, boundary blocks and their masked pairs. Tiny and on the
 * block loop's path, so static inline here. Positions are absolute (bottom-right: token t of the
 * call sits at n_kv - n_q + t). */
#ifndef ATTN_ENGINE_BLOCKED_MASK_H
#define ATTN_ENGINE_BLOCKED_MASK_H

#include "engine/blocked.h"

/* Clamp a mask size to what positions can reach, so int64 arithmetic cannot overflow. */
static inline int64_t clamp_reach(size_t w, size_t reach) { return (int64_t)(w < reach ? w : reach); }

static inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
static inline int64_t chunk_start(const attn_blocked_plan *p, int64_t pos) {
  return floor_div(pos, p->chunk) * p->chunk;
}

/* The mask's interval around a position: [lo(pos, back), hi(pos, fwd)] cut to pos's chunk. Keys
 * visible to position pos are [lo(pos, left), hi(pos, right)]; read the other way, the positions
 * that see key j are [lo(j, right), hi(j, left)]. Both ends are nondecreasing in pos. */
static inline int64_t mask_lo(const attn_blocked_plan *p, int64_t pos, int64_t back) {
  const int64_t lo = pos - back, cs = p->chunk ? chunk_start(p, pos) : lo;
  return cs > lo ? cs : lo;
}
static inline int64_t mask_hi(const attn_blocked_plan *p, int64_t pos, int64_t fwd) {
  const int64_t hi = pos + fwd, ce = p->chunk ? chunk_start(p, pos) + p->chunk - 1 : hi;
  return ce < hi ? ce : hi;
}
static inline int64_t vis_lo(const attn_blocked_plan *p, int64_t pos) { return mask_lo(p, pos, p->left); }
static inline int64_t vis_hi(const attn_blocked_plan *p, int64_t pos) { return mask_hi(p, pos, p->right); }

static inline int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Set the masked pairs of a boundary block to -inf, and turn -inf scores of visible pairs (from
 * non-finite input) into NaN, so that -inf means "masked" only. The tokens that see key j are one
 * contiguous range, so each key row is at most three fills. */
static inline void blk_mask(const attn_blocked_plan *p, float *st, size_t ldst, size_t jn, int64_t j0, size_t tn,
                            int64_t p0) {
  const size_t g = p->g, rows = tn * g;
  for (size_t jj = 0; jj < jn; jj++) {
    const int64_t j = j0 + (int64_t)jj;
    const int64_t a = mask_lo(p, j, p->right) - p0,
                  b = mask_hi(p, j, p->left) - p0; /* visible tokens [a, b] of the block */
    const size_t lo = a <= 0 ? 0 : (a >= (int64_t)tn ? rows : (size_t)a * g);
    const size_t hi = b < 0 ? 0 : (b >= (int64_t)tn - 1 ? rows : (size_t)(b + 1) * g);
    float *row = st + jj * ldst;
    if (hi <= lo) {
      for (size_t c = 0; c < rows; c++) row[c] = -INFINITY;
    } else {
      for (size_t c = 0; c < lo; c++) row[c] = -INFINITY;
      for (size_t c = lo; c < hi; c++) row[c] = row[c] == -INFINITY ? NAN : row[c];
      for (size_t c = hi; c < rows; c++) row[c] = -INFINITY;
    }
  }
}

/* The keys of [j0, j0 + jn) that position pos sees: [*first, *first + count) of the block. */
static inline size_t blk_visible(const attn_blocked_plan *p, int64_t pos, int64_t j0, size_t jn, size_t *first) {
  const int64_t jl = j0 + (int64_t)jn - 1;
  const int64_t a = clamp64(vis_lo(p, pos), j0, jl + 1), b = clamp64(vis_hi(p, pos), j0 - 1, jl);
  *first = b >= a ? (size_t)(a - j0) : 0;
  return b >= a ? (size_t)(b - a + 1) : 0;
}

/* 1 when some token at [p0, p1] cannot see some key of [ka, kb]: a boundary block (masked). */
static inline int blk_masked(const attn_blocked_plan *p, int64_t p0, int64_t p1, int64_t ka, int64_t kb) {
  return ka < vis_lo(p, p1) || kb > vis_hi(p, p0);
}

#endif
