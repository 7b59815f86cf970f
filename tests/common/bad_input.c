/* The shared bad-input tables of the Check suites: see bad_input.h. */
#include "bad_input.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shared rows: those every variant runs, then the LSE_ROWS of an lse output. The edits name
 * the call's arguments (ARG), the shape (SH), the scale and the lse layout (LSE). */
#define ROW(f, s, lvl)    .fault = (f), .expect = (s), .desc_level = (lvl)
#define SH(f, val)        TU_SET_Z(TU_OB_SHAPE, attn_shape, f, val)
#define ARG_NUL(f)        TU_NUL(TU_OB_BAD, tu_bad, f)
#define ARG_PTR(f, to, n) TU_PTR(TU_OB_BAD, tu_bad, f, to, n)
#define WS_ADD(delta)     TU_ADD(TU_OB_BAD, tu_bad, ws_size, delta)
#define SCALE(val)        TU_ELEM_F(TU_OB_SCALE, 0, val)
#define LSE(f, val)       TU_SET_Z(TU_OB_LSE, attn_layout, f, val)
enum { D = TU_BAD_D, DV = TU_BAD_DV };
static const tu_bad_case shared_rows[] = {
    {"desc NULL", ROW(TU_BAD_DESC_NULL, ATTN_E_NULL_POINTER, 0), {TU_SET_I(TU_OB_BAD, tu_bad, desc_null, 1)}},
    {"q NULL", ROW(TU_BAD_Q_NULL, ATTN_E_NULL_POINTER, 0), {ARG_NUL(q)}},
    {"k NULL", ROW(TU_BAD_K_NULL, ATTN_E_NULL_POINTER, 0), {ARG_NUL(k)}},
    {"v NULL", ROW(TU_BAD_V_NULL, ATTN_E_NULL_POINTER, 0), {ARG_NUL(v)}},
    {"o NULL", ROW(TU_BAD_O_NULL, ATTN_E_NULL_POINTER, 0), {ARG_NUL(o_arg)}},
    {"workspace NULL", ROW(TU_BAD_WS_NULL, ATTN_E_NULL_POINTER, 0), {ARG_NUL(ws_arg)}},
    {"n_q 0", ROW(TU_BAD_NQ_0, ATTN_E_ZERO_SIZE, 1), {SH(n_q, 0)}},
    {"n_kv 0", ROW(TU_BAD_NKV_0, ATTN_E_ZERO_SIZE, 1), {SH(n_kv, 0)}},
    {"h_q 0", ROW(TU_BAD_HQ_0, ATTN_E_ZERO_SIZE, 1), {SH(h_q, 0)}},
    {"h_k 0", ROW(TU_BAD_HK_0, ATTN_E_ZERO_SIZE, 1), {SH(h_k, 0)}},
    {"h_v 0", ROW(TU_BAD_HV_0, ATTN_E_ZERO_SIZE, 1), {SH(h_v, 0)}},
    {"d 0", ROW(TU_BAD_D_0, ATTN_E_ZERO_SIZE, 1), {SH(d, 0)}},
    {"dv 0", ROW(TU_BAD_DV_0, ATTN_E_ZERO_SIZE, 1), {SH(dv, 0)}},
    {"n_q SIZE_MAX/2", ROW(TU_BAD_NQ_HUGE, ATTN_E_SIZE_OVERFLOW, 1), {SH(n_q, SIZE_MAX / 2)}},
    {"n_kv SIZE_MAX/2", ROW(TU_BAD_NKV_HUGE, ATTN_E_SIZE_OVERFLOW, 1), {SH(n_kv, SIZE_MAX / 2)}},
    /* q: 128 bytes per token, o: 96: element counts fit, byte counts do not */
    {"q and o bytes above PTRDIFF_MAX", ROW(TU_BAD_NQ_PTRDIFF, ATTN_E_SIZE_OVERFLOW, 1), {SH(n_q, SIZE_MAX / 512 * 3)}},
    {"q row stride huge", ROW(TU_BAD_QROW_HUGE, ATTN_E_SIZE_OVERFLOW, 1), {SH(q.row_stride, SIZE_MAX / 4)}},
    {"o head stride huge",
     ROW(TU_BAD_OHEAD_HUGE, ATTN_E_SIZE_OVERFLOW, 1),
     {SH(o.head_stride, SIZE_MAX / 2), SH(o.row_stride, DV)}},
    {"q row stride < d", ROW(TU_BAD_QROW_SMALL, ATTN_E_BAD_STRIDE, 1), {SH(q.row_stride, D - 1)}},
    {"q head stride < d", ROW(TU_BAD_QHEAD_SMALL, ATTN_E_BAD_STRIDE, 1), {SH(q.head_stride, D - 1)}},
    {"k row stride < d", ROW(TU_BAD_KROW_SMALL, ATTN_E_BAD_STRIDE, 1), {SH(k.row_stride, D - 1)}},
    {"k head stride < d", ROW(TU_BAD_KHEAD_SMALL, ATTN_E_BAD_STRIDE, 1), {SH(k.head_stride, D - 1)}},
    {"v row stride < dv", ROW(TU_BAD_VROW_SMALL, ATTN_E_BAD_STRIDE, 1), {SH(v.row_stride, DV - 1)}},
    {"v head stride < dv", ROW(TU_BAD_VHEAD_SMALL, ATTN_E_BAD_STRIDE, 1), {SH(v.head_stride, DV - 1)}},
    {"o row stride < dv",
     ROW(TU_BAD_OROW_SMALL, ATTN_E_BAD_STRIDE, 1),
     {SH(o.row_stride, DV - 1), SH(o.head_stride, (size_t)TU_BAD_NQ *DV)}},
    {"o rows overlap heads",
     ROW(TU_BAD_O_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 1),
     {SH(o.row_stride, DV), SH(o.head_stride, DV)}},
    /* row stride h_q * dv */
    {"o heads run into next token", ROW(TU_BAD_O_HEADS_INTERLEAVE, ATTN_E_BAD_STRIDE, 1), {SH(o.head_stride, 2 * DV)}},
    {"h_q 3, h_kv 2", ROW(TU_BAD_HEADS_3_2, ATTN_E_BAD_HEADS, 1), {SH(h_q, 3)}},
    {"h_q 4, h_kv 3", ROW(TU_BAD_HEADS_4_3, ATTN_E_BAD_HEADS, 1), {SH(h_k, 3), SH(h_v, 3)}},
    {"h_q 2, h_kv 4", ROW(TU_BAD_HEADS_2_4, ATTN_E_BAD_HEADS, 1), {SH(h_q, 2), SH(h_k, 4), SH(h_v, 4)}},
    {"h_k 2 != h_v 1", ROW(TU_BAD_HK_2_HV_1, ATTN_E_BAD_HEADS, 1), {SH(h_v, 1)}},
    /* H = h_q = 4: only h_k != h_v is wrong */
    {"h_k 2 != h_v 4", ROW(TU_BAD_HK_2_HV_4, ATTN_E_BAD_HEADS, 1), {SH(h_v, 4), SH(v.row_stride, 4 * DV)}},
    {"h_k 1 != h_v 2", ROW(TU_BAD_HK_1_HV_2, ATTN_E_BAD_HEADS, 1), {SH(h_k, 1), SH(k.row_stride, D)}},
    {"scale NaN", ROW(TU_BAD_SCALE_NAN, ATTN_E_BAD_SCALE, 1), {SCALE(NAN)}},
    {"scale +inf", ROW(TU_BAD_SCALE_INF, ATTN_E_BAD_SCALE, 1), {SCALE(INFINITY)}},
    {"scale -inf", ROW(TU_BAD_SCALE_NINF, ATTN_E_BAD_SCALE, 1), {SCALE(-INFINITY)}},
    {"workspace one byte short", ROW(TU_BAD_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0), {WS_ADD(-1)}},
    {"o is q", ROW(TU_BAD_O_IS_Q, ATTN_E_ALIASING, 0), {ARG_PTR(o_arg, TU_OB_Q, 0)}},
    {"o inside k", ROW(TU_BAD_O_IN_K, ATTN_E_ALIASING, 0), {ARG_PTR(o_arg, TU_OB_K, 3)}},
    {"o is v", ROW(TU_BAD_O_IS_V, ATTN_E_ALIASING, 0), {ARG_PTR(o_arg, TU_OB_V, 0)}},
    {"o inside workspace",
     ROW(TU_BAD_O_IN_WS, ATTN_E_ALIASING, 0),
     {ARG_PTR(o_arg, TU_OB_WS, 0), WS_ADD(TU_BAD_WS_ROOM)}},
    /* an lse output */
    {"lse layout overlaps itself",
     ROW(TU_BAD_LSE_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 0),
     {LSE(row_stride, 1), LSE(head_stride, 1)}},
    {"lse row stride 0", ROW(TU_BAD_LSE_ROW_0, ATTN_E_BAD_STRIDE, 0), {LSE(row_stride, 0)}},
    {"lse inside o", ROW(TU_BAD_LSE_IN_O, ATTN_E_ALIASING, 0), {ARG_PTR(lse_arg, TU_OB_O, 10)}},
    {"lse is q", ROW(TU_BAD_LSE_IS_Q, ATTN_E_ALIASING, 0), {ARG_PTR(lse_arg, TU_OB_Q, 0)}},
};
#define SHARED_ROWS (sizeof shared_rows / sizeof shared_rows[0])
#define LSE_ROWS    ((size_t)(TU_BAD_OWN - TU_BAD_LSE_SELF_OVERLAP))

static size_t shared_count(int with_lse) { return with_lse ? SHARED_ROWS : SHARED_ROWS - LSE_ROWS; }

size_t tu_bad_rows(int with_lse, size_t n_own) { return shared_count(with_lse) + n_own; }

const tu_bad_case *tu_bad_row(size_t i, int with_lse, const tu_bad_case *own) {
  /* one row per shared fault, in the enum's order: the fault is its row's index */
  _Static_assert(SHARED_ROWS == TU_BAD_OWN, "one shared row per shared fault");
  const size_t shared = shared_count(with_lse);
  if (i >= shared) return &own[i - shared];
  ck_assert_int_eq(shared_rows[i].fault, (int)i);
  return &shared_rows[i];
}

void tu_bad_make(tu_bad *b, tu_rng *r, const attn_shape *s, size_t room, int with_lse, size_t need) {
  ck_assert_msg(s->n_q == TU_BAD_NQ && s->h_q == TU_BAD_HQ && s->h_k == TU_BAD_HKV && s->h_v == TU_BAD_HKV &&
                    s->d == TU_BAD_D && s->dv == TU_BAD_DV,
                "the shared bad-input rows are written for n_q %d, h_q %d, h_k = h_v %d, d %d, dv %d", TU_BAD_NQ,
                TU_BAD_HQ, TU_BAD_HKV, TU_BAD_D, TU_BAD_DV);
  tu_qkv_make(&b->x, TU_TOKEN_MAJOR, TU_DATA_UNIFORM, r, room * s->n_q * s->h_q, room * s->n_kv * s->h_q, s->h_q,
              s->h_k, s->h_q, s->d, s->dv);
  tu_tensor_alloc(&b->o, TU_TOKEN_MAJOR, s->n_q, s->h_q, s->dv, 1);
  b->with_lse = with_lse;
  if (with_lse) tu_tensor_alloc(&b->lse, TU_TOKEN_MAJOR, s->n_q, s->h_q, 1, 1);
  b->need = need;
  b->ws = tu_alloc(need + TU_BAD_WS_ROOM, 0);
  b->q = b->x.q.data;
  b->k = b->x.k.data;
  b->v = b->x.v.data;
  b->o_arg = b->o.data;
  b->lse_arg = with_lse ? b->lse.data : NULL;
  b->ws_arg = b->ws;
  b->ws_size = need;
  b->desc_null = 0;
}

/* The thread's error detail (attn_last_error) set by a failure no row makes, so that a rejected
 * call that sets no detail of its own shows as this one left behind. */
static char primed[256];
static void prime_detail(void) {
  ck_assert_int_eq(attn_isa_set((attn_isa)-9), ATTN_E_BAD_ARGUMENT);
  snprintf(primed, sizeof primed, "%s", attn_last_error());
  ck_assert(primed[0] != '\0');
}

int tu_edits_touch(const tu_edit *e, size_t n, int o) {
  for (size_t i = 0; i < n && e[i].op != TU_EDIT_END; ++i)
    if (e[i].obj == o) return 1;
  return 0;
}

void tu_edits_apply(const tu_edit *e, size_t n, void *const *obj, size_t n_obj) {
  for (size_t i = 0; i < n && e[i].op != TU_EDIT_END; ++i) {
    const tu_edit *x = &e[i];
    ck_assert_msg(x->obj < n_obj && obj[x->obj], "edit %zu: object %d absent", i, (int)x->obj);
    unsigned char *at = (unsigned char *)obj[x->obj] + x->off;
    switch ((tu_edit_op)x->op) {
      case TU_EDIT_SIZE:
        ck_assert_uint_eq(x->width, sizeof(size_t));
        memcpy(at, &x->v.z, sizeof(size_t));
        break;
      case TU_EDIT_INT: /* an int or an enum */
        ck_assert_uint_eq(x->width, sizeof(int));
        memcpy(at, &x->v.i, sizeof(int));
        break;
      case TU_EDIT_FLOAT: {
        ck_assert_uint_eq(x->width, sizeof(float));
        const float f = (float)x->v.f;
        memcpy(at, &f, sizeof f);
        break;
      }
      case TU_EDIT_PTR: {
        ck_assert_uint_eq(x->width, sizeof(void *));
        ck_assert_msg(x->to == TU_OBJ_NONE || (x->to < n_obj && obj[x->to]), "edit %zu: target %d absent", i,
                      (int)x->to);
        void *p = x->to == TU_OBJ_NONE ? NULL : (void *)((float *)obj[x->to] + x->v.n);
        memcpy(at, &p, sizeof p);
        break;
      }
      case TU_EDIT_ADD: {
        ck_assert_uint_eq(x->width, sizeof(size_t));
        size_t z;
        memcpy(&z, at, sizeof z);
        ck_assert_msg(x->v.n >= 0 ? z <= SIZE_MAX - (size_t)x->v.n : z >= (size_t)-x->v.n, "edit %zu: %zu %+td wraps",
                      i, z, x->v.n);
        z += (size_t)x->v.n;
        memcpy(at, &z, sizeof z);
        break;
      }
      default:
        ck_abort_msg("edit %zu: op %d", i, (int)x->op);
    }
  }
}

void tu_bad_apply(tu_bad *b, const tu_bad_case *c, attn_shape *s, float *scale, attn_layout *lse, void *const *own,
                  size_t n_own) {
  prime_detail();
  /* the lse rows run only with an lse output */
  if (c->fault >= TU_BAD_LSE_SELF_OVERLAP && c->fault < TU_BAD_OWN) ck_assert(b->with_lse);
  void *obj[TU_OB_OWN + 8] = {
      b, s, scale, lse, b->x.q.data, b->x.k.data, b->x.v.data, b->o.data, b->with_lse ? b->lse.data : NULL, b->ws};
  ck_assert_uint_le(n_own, 8);
  for (size_t i = 0; i < n_own; ++i) obj[TU_OB_OWN + i] = own[i];
  tu_edits_apply(c->edit, TU_EDITS, obj, TU_OB_OWN + n_own);
}

void tu_bad_assert_status(const tu_bad_case *c, const char *call, attn_status got) {
  ck_assert_msg(got == c->expect, "%s: %s answered %d (%s), expected %d (%s)", c->name, call, (int)got,
                attn_status_string(got), (int)c->expect, attn_status_string(c->expect));
  const char *detail = attn_last_error();
  ck_assert_msg(detail[0] != '\0' && strcmp(detail, primed) != 0, "%s: %s set no error detail of its own", c->name,
                call);
  prime_detail(); /* for the next call of the row */
}

void tu_bad_assert_query(const tu_bad_case *c, const char *query, attn_status got, size_t bytes) {
  if (!c->desc_level) return;
  tu_bad_assert_status(c, query, got);
  ck_assert_msg(bytes == TU_BAD_UNTOUCHED, "%s: %s wrote its output on error", c->name, query);
}

/* Every float of t's span still the sentinel, and its guards intact. */
static void assert_all_sentinel(const char *what, const tu_tensor *t) {
  float *pristine = malloc(sizeof(float) * t->span);
  ck_assert_ptr_nonnull(pristine);
  tu_fill_sentinel(pristine, t->span);
  tu_assert_same_bits(what, pristine, t->data, sizeof(float) * t->span);
  tu_assert_guards(what, t->owner);
  free(pristine);
}

void tu_bad_assert_untouched(const tu_bad *b) {
  assert_all_sentinel("o after a rejected call", &b->o);
  if (b->with_lse) assert_all_sentinel("lse after a rejected call", &b->lse);
  tu_assert_guards("workspace", b->ws);
  tu_qkv_assert_unchanged(&b->x);
}

void tu_bad_free(tu_bad *b) {
  tu_free(b->ws);
  tu_tensor_free(&b->o);
  if (b->with_lse) tu_tensor_free(&b->lse);
  tu_qkv_free(&b->x);
}
