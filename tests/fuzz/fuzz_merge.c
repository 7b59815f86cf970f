/*
 * libFuzzer target: attn_softmax_merge.
 *
 * From the bytes: the ISA path, rows (up to 512), dv (up to 130), parts (up to 8; a part may be
 * repeated), strides, LSE values (spread up to +-1000, some parts empty with LSE = -inf), the
 * output separate or in place on one part (o and/or lse), and up to two faults (NULL pointers,
 * zero sizes, strides below a row, overflowing sizes, outputs overlapping inputs other than
 * exactly in place). Checks: the expected status; inputs (every part not written in place) are
 * unchanged; on error the outputs are unchanged; on success guards and gap elements are intact and
 * o and lse match the float64 reference. With ATTN_FUZZ_NONFINITE=1: NaN or +Inf part LSEs (the
 * row must be NaN in o and lse), and in place with the output part repeated (right result, or
 * ATTN_E_ALIASING).
 */
#include <math.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "tolerances.h"

enum { MAX_ROWS = 512, MAX_DV = 130, MAX_PARTS = 8 };

enum { F_NULL, F_ZERO, F_STRIDE, F_OVERFLOW, F_ALIAS, F_COUNT };

/* Bounds: tolerances.h's tol_merge_o / tol_merge_lse times the reference's error scales. */

typedef struct merge_args {
  size_t rows, dv, parts;
  const float *const *o_parts;
  size_t o_stride;
  const float *const *lse_parts;
  size_t lse_stride;
  float *o;
  size_t out_stride;
  float *lse;
  size_t lse_out_stride;
} merge_args;

static attn_status merge(const merge_args *a) {
  return attn_softmax_merge(a->rows, a->dv, a->parts, a->o_parts, a->o_stride, a->lse_parts, a->lse_stride, a->o,
                            a->out_stride, a->lse, a->lse_out_stride);
}

static size_t span(size_t rows, size_t w, size_t stride) { return (rows - 1) * stride + w; }

/* One fault into the call's arguments a (op, lp: its own copies of the pointer arrays); v: the
 * arguments before any fault (sizes to pick parts and strides from). */
static void add_fault(fz_in *in, merge_args *a, const merge_args *v, const float **op, const float **lp, fz_expect *e) {
  switch (fz_pick(in, F_COUNT)) {
    case F_NULL:
      switch (fz_pick(in, 5)) {
        case 0:
          a->o_parts = NULL;
          break;
        case 1:
          a->lse_parts = NULL;
          break;
        case 2:
          a->o = NULL;
          break;
        case 3:
          op[fz_pick(in, 256) % v->parts] = NULL;
          break;
        default:
          lp[fz_pick(in, 256) % v->parts] = NULL;
          break;
      }
      fz_expect_fault(e, ATTN_E_NULL_POINTER);
      return;
    case F_ZERO: {
      size_t *sizes[3] = {&a->rows, &a->dv, &a->parts};
      *sizes[fz_pick(in, 3)] = 0;
      fz_expect_fault(e, ATTN_E_ZERO_SIZE);
      return;
    }
    case F_STRIDE:
      if (v->rows == 1) return; /* strides of a single row do not matter */
      switch (fz_pick(in, 4)) {
        case 0:
          a->o_stride = fz_pick(in, 256) % v->dv;
          break;
        case 1:
          a->out_stride = fz_pick(in, 256) % v->dv;
          break;
        case 2:
          a->lse_stride = 0;
          break;
        default:
          if (!a->lse) return;
          a->lse_out_stride = 0;
      }
      fz_expect_fault(e, ATTN_E_BAD_STRIDE);
      return;
    case F_OVERFLOW:
      if (a->rows == 1 || fz_pick(in, 2))
        a->rows = SIZE_MAX / 2 + fz_u8(in); /* o_parts' span overflows */
      else
        a->o_stride = SIZE_MAX / 2;
      fz_expect_fault(e, ATTN_E_SIZE_OVERFLOW);
      return;
    default: { /* an output overlapping an input without being exactly in place */
      const size_t c = fz_pick(in, 256) % v->parts;
      if (!op[c] || !lp[c]) return; /* another fault decides */
      switch (fz_pick(in, 4)) {
        case 0: /* o one float into a part, or at it with another stride */
          if (v->dv > 1)
            a->o = (float *)op[c] + 1;
          else
            a->o = (float *)op[c], a->out_stride = v->o_stride + 1;
          break;
        case 1:
          a->o = (float *)lp[c];
          break;
        case 2:
          if (a->lse)
            a->lse = (float *)op[c];
          else
            return;
          break;
        default:
          if (a->lse)
            a->lse = a->o;
          else
            return;
          break;
      }
      if (!a->o || (a->out_stride < a->dv && a->rows > 1)) return; /* another fault decides */
      fz_expect_fault(e, ATTN_E_ALIASING);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in;
  fz_begin(&in, data, size);
  const size_t rows = fz_size(&in, MAX_ROWS), dv = fz_size(&in, MAX_DV), parts = fz_size(&in, MAX_PARTS);
  const size_t o_stride = dv + (fz_pick(&in, 3) ? 0 : fz_pick(&in, 16));
  const size_t lse_stride = rows == 1 && fz_pick(&in, 2) ? 0 : 1 + (fz_pick(&in, 3) ? 0 : fz_pick(&in, 8));
  const float spreads[4] = {1.0f, 30.0f, 200.0f, 1000.0f};
  const float spread = spreads[fz_pick(&in, 4)], amp = fz_pick(&in, 3) ? 1.0f : 100.0f;
  const unsigned empty_every = fz_u8(&in); /* part c is empty in row r when (r + c) % this == 0 */

  /* Parts: each its own exact buffer, unless it repeats an earlier one. */
  float *ob[MAX_PARTS], *lb[MAX_PARTS];
  int owns[MAX_PARTS];
  for (size_t c = 0; c < parts; ++c) {
    owns[c] = c == 0 || fz_pick(&in, 6) != 0;
    if (!owns[c]) {
      const size_t src = fz_pick(&in, 256) % c;
      ob[c] = ob[src];
      lb[c] = lb[src];
      continue;
    }
    ob[c] = fz_calloc(span(rows, dv, o_stride), sizeof(float));
    lb[c] = fz_calloc(span(rows, 1, lse_stride), sizeof(float));
    tu_tensor ot = {ob[c], rows, 1, dv, {o_stride, 0}, span(rows, dv, o_stride), NULL, 0};
    fz_tensor_fill(&in, &ot, -amp, amp);
    for (size_t r = 0; r < rows; ++r) {
      const int empty = empty_every > 1 && (r + c) % empty_every == 0;
      lb[c][r * lse_stride] = empty ? -INFINITY : fz_value(&in, -spread, spread);
    }
    if (fz_nonfinite() && fz_pick(&in, 4) == 0) { /* a NaN or +Inf LSE poisons its row */
      const size_t r = fz_pick(&in, 256) % rows;
      lb[c][r * lse_stride] = fz_pick(&in, 2) ? NAN : INFINITY;
    }
  }

  /* Outputs: separate guarded buffers, or in place on part `ip` (o and/or lse). */
  const unsigned place = fz_pick(&in, 4); /* 0, 1: separate; 2: o in place; 3: o and lse in place */
  const size_t ip = fz_pick(&in, 256) % parts;
  int repeated = 0;
  for (size_t c = 0; c < parts; ++c) repeated += ob[c] == ob[ip];
  const int in_place_ok = repeated == 1 || fz_nonfinite();
  const int o_in_place = place >= 2 && in_place_ok, lse_in_place = place == 3 && in_place_ok;
  const int with_lse = lse_in_place || fz_pick(&in, 4) != 0;
  const size_t out_stride = o_in_place ? o_stride : dv + (fz_pick(&in, 2) ? 0 : fz_pick(&in, 16));
  const size_t lse_out_stride = lse_in_place ? lse_stride : 1 + fz_pick(&in, 4);
  tu_tensor o = {0}, lse = {0};
  fz_output_alloc(&in, &o, rows, 1, dv, (attn_layout){out_stride, 0});
  fz_output_alloc(&in, &lse, rows, 1, 1, (attn_layout){lse_out_stride, 0});

  /* Snapshots of every input byte (a part written in place excepted), before any fault. */
  fz_snap snaps[2 * MAX_PARTS] = {{0}};
  for (size_t c = 0; c < parts; ++c) {
    if (!owns[c]) continue;
    if (!(o_in_place && ob[c] == ob[ip])) fz_snap_take(&snaps[2 * c], ob[c], sizeof(float) * span(rows, dv, o_stride));
    if (!(lse_in_place && lb[c] == lb[ip]))
      fz_snap_take(&snaps[2 * c + 1], lb[c], sizeof(float) * span(rows, 1, lse_stride));
  }
  /* The expected result, from the inputs before the call. */
  double *ro = fz_doubles(rows * dv), *oscale = fz_doubles(rows * dv), *rl = fz_doubles(rows),
         *lscale = fz_doubles(rows);
  ref_merge(rows, dv, parts, (const float *const *)ob, o_stride, (const float *const *)lb, lse_stride, ro, rl, oscale,
            lscale);

  const float *op[MAX_PARTS], *lp[MAX_PARTS];
  for (size_t c = 0; c < parts; ++c) {
    op[c] = ob[c];
    lp[c] = lb[c];
  }
  merge_args a = {rows,          dv,
                  parts,         op,
                  o_stride,      lp,
                  lse_stride,    o_in_place ? ob[ip] : o.data,
                  out_stride,    with_lse ? (lse_in_place ? lb[ip] : lse.data) : NULL,
                  lse_out_stride};
  const merge_args valid = a;
  fz_expect e = {0};
  for (int f = fz_fault_count(&in); f > 0; --f) add_fault(&in, &a, &valid, op, lp, &e);
  /* Same part repeated and in place: the right result, or a refusal as aliasing. */
  if (o_in_place && repeated > 1 && e.faults == 0) fz_expect_fault(&e, ATTN_E_ALIASING);
  fz_snap so, sl, sip_o, sip_l;
  fz_snap_take(&so, o.owner, sizeof(float) * o.span);
  fz_snap_take(&sl, lse.owner, sizeof(float) * lse.span);
  fz_snap_take(&sip_o, o_in_place ? ob[ip] : NULL, o_in_place ? sizeof(float) * span(rows, dv, o_stride) : 0);
  fz_snap_take(&sip_l, lse_in_place ? lb[ip] : NULL, lse_in_place ? sizeof(float) * span(rows, 1, lse_stride) : 0);

  const attn_status st = merge(&a);
  const int repeated_ok = o_in_place && repeated > 1 && e.faults == 1 && st == ATTN_OK;
  if (!repeated_ok) fz_check_expect("attn_softmax_merge", st, &e);
  for (size_t i = 0; i < 2 * parts; ++i) fz_snap_check(&snaps[i], "a merge input");
  if (st != ATTN_OK) {
    fz_snap_check(&so, "o after an error");
    fz_snap_check(&sl, "lse after an error");
    fz_snap_check(&sip_o, "in-place o part after an error");
    fz_snap_check(&sip_l, "in-place lse part after an error");
    FZ_CHECK(fz_guards_intact(o.owner) && fz_guards_intact(lse.owner), "guard zone written on error");
  } else {
    fz_check_output_clean("merge o", &o);
    fz_check_output_clean("merge lse", &lse);
    tu_tensor got_o = {valid.o, rows, 1, dv, {valid.out_stride, 0}, span(rows, dv, valid.out_stride), NULL, 0};
    double *tol_o = fz_doubles(rows), *tol_l = fz_doubles(rows);
    for (size_t r = 0; r < rows; ++r) {
      tol_o[r] = tol_merge_o(parts);
      tol_l[r] = tol_merge_lse(parts);
    }
    fz_compare("merge o", &got_o, ro, oscale, tol_o, NULL); /* the reference applies the NaN policy */
    if (valid.lse) {
      tu_tensor got_l = {valid.lse, rows, 1, 1, {valid.lse_out_stride, 0}, span(rows, 1, valid.lse_out_stride),
                         NULL,      0};
      fz_compare("merge lse", &got_l, rl, lscale, tol_l, NULL);
    }
    free(tol_o);
    free(tol_l);
  }
  fz_snap_free(&so);
  fz_snap_free(&sl);
  fz_snap_free(&sip_o);
  fz_snap_free(&sip_l);
  for (size_t i = 0; i < 2 * parts; ++i) fz_snap_free(&snaps[i]);
  for (size_t c = 0; c < parts; ++c)
    if (owns[c]) {
      free(ob[c]);
      free(lb[c]);
    }
  fz_tensor_free(&o);
  fz_tensor_free(&lse);
  free(ro);
  free(oscale);
  free(rl);
  free(lscale);
  return 0;
}
