/* The shared bad-input tables of the Check suites: see bad_input.h. */
#include "bad_input.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HUGE_N (SIZE_MAX / 2)

/* The shared rows: those every variant runs, then the LSE_ROWS of an lse output. */
#define ROW(f, s, lvl) .fault = (f), .expect = (s), .desc_level = (lvl)
static const tu_bad_case shared_rows[] = {
    {.name = "desc NULL", ROW(TU_BAD_DESC_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "q NULL", ROW(TU_BAD_Q_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "k NULL", ROW(TU_BAD_K_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "v NULL", ROW(TU_BAD_V_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "o NULL", ROW(TU_BAD_O_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "workspace NULL", ROW(TU_BAD_WS_NULL, ATTN_E_NULL_POINTER, 0)},
    {.name = "n_q 0", ROW(TU_BAD_NQ_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "n_kv 0", ROW(TU_BAD_NKV_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "h_q 0", ROW(TU_BAD_HQ_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "h_k 0", ROW(TU_BAD_HK_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "h_v 0", ROW(TU_BAD_HV_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "d 0", ROW(TU_BAD_D_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "dv 0", ROW(TU_BAD_DV_0, ATTN_E_ZERO_SIZE, 1)},
    {.name = "n_q SIZE_MAX/2", ROW(TU_BAD_NQ_HUGE, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "n_kv SIZE_MAX/2", ROW(TU_BAD_NKV_HUGE, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "q and o bytes above PTRDIFF_MAX", ROW(TU_BAD_NQ_PTRDIFF, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "q row stride huge", ROW(TU_BAD_QROW_HUGE, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "o head stride huge", ROW(TU_BAD_OHEAD_HUGE, ATTN_E_SIZE_OVERFLOW, 1)},
    {.name = "q row stride < d", ROW(TU_BAD_QROW_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "q head stride < d", ROW(TU_BAD_QHEAD_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "k row stride < d", ROW(TU_BAD_KROW_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "k head stride < d", ROW(TU_BAD_KHEAD_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "v row stride < dv", ROW(TU_BAD_VROW_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "v head stride < dv", ROW(TU_BAD_VHEAD_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "o row stride < dv", ROW(TU_BAD_OROW_SMALL, ATTN_E_BAD_STRIDE, 1)},
    {.name = "o rows overlap heads", ROW(TU_BAD_O_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 1)},
    {.name = "o heads run into next token", ROW(TU_BAD_O_HEADS_INTERLEAVE, ATTN_E_BAD_STRIDE, 1)},
    {.name = "h_q 3, h_kv 2", ROW(TU_BAD_HEADS_3_2, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_q 4, h_kv 3", ROW(TU_BAD_HEADS_4_3, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_q 2, h_kv 4", ROW(TU_BAD_HEADS_2_4, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_k 2 != h_v 1", ROW(TU_BAD_HK_2_HV_1, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_k 2 != h_v 4", ROW(TU_BAD_HK_2_HV_4, ATTN_E_BAD_HEADS, 1)},
    {.name = "h_k 1 != h_v 2", ROW(TU_BAD_HK_1_HV_2, ATTN_E_BAD_HEADS, 1)},
    {.name = "scale NaN", ROW(TU_BAD_SCALE_NAN, ATTN_E_BAD_SCALE, 1)},
    {.name = "scale +inf", ROW(TU_BAD_SCALE_INF, ATTN_E_BAD_SCALE, 1)},
    {.name = "scale -inf", ROW(TU_BAD_SCALE_NINF, ATTN_E_BAD_SCALE, 1)},
    {.name = "workspace one byte short", ROW(TU_BAD_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL, 0)},
    {.name = "o is q", ROW(TU_BAD_O_IS_Q, ATTN_E_ALIASING, 0)},
    {.name = "o inside k", ROW(TU_BAD_O_IN_K, ATTN_E_ALIASING, 0)},
    {.name = "o is v", ROW(TU_BAD_O_IS_V, ATTN_E_ALIASING, 0)},
    {.name = "o inside workspace", ROW(TU_BAD_O_IN_WS, ATTN_E_ALIASING, 0)},
    /* an lse output */
    {.name = "lse layout overlaps itself", ROW(TU_BAD_LSE_SELF_OVERLAP, ATTN_E_BAD_STRIDE, 0)},
    {.name = "lse row stride 0", ROW(TU_BAD_LSE_ROW_0, ATTN_E_BAD_STRIDE, 0)},
    {.name = "lse inside o", ROW(TU_BAD_LSE_IN_O, ATTN_E_ALIASING, 0)},
    {.name = "lse is q", ROW(TU_BAD_LSE_IS_Q, ATTN_E_ALIASING, 0)},
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
  ck_assert_msg(
      s->h_q == TU_BAD_HQ && s->h_k == TU_BAD_HKV && s->h_v == TU_BAD_HKV && s->d == TU_BAD_D && s->dv == TU_BAD_DV,
      "the shared bad-input rows are written for h_q %d, h_k = h_v %d, d %d, dv %d", TU_BAD_HQ, TU_BAD_HKV, TU_BAD_D,
      TU_BAD_DV);
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

void tu_bad_apply(tu_bad *b, int fault, attn_shape *s, float *scale, attn_layout *lse) {
  const size_t n_q = s->n_q, d = s->d, dv = s->dv;
  prime_detail();
  switch ((tu_bad_fault)fault) {
    case TU_BAD_DESC_NULL:
      b->desc_null = 1;
      break;
    case TU_BAD_Q_NULL:
      b->q = NULL;
      break;
    case TU_BAD_K_NULL:
      b->k = NULL;
      break;
    case TU_BAD_V_NULL:
      b->v = NULL;
      break;
    case TU_BAD_O_NULL:
      b->o_arg = NULL;
      break;
    case TU_BAD_WS_NULL:
      b->ws_arg = NULL;
      break;
    case TU_BAD_NQ_0:
      s->n_q = 0;
      break;
    case TU_BAD_NKV_0:
      s->n_kv = 0;
      break;
    case TU_BAD_HQ_0:
      s->h_q = 0;
      break;
    case TU_BAD_HK_0:
      s->h_k = 0;
      break;
    case TU_BAD_HV_0:
      s->h_v = 0;
      break;
    case TU_BAD_D_0:
      s->d = 0;
      break;
    case TU_BAD_DV_0:
      s->dv = 0;
      break;
    case TU_BAD_NQ_HUGE:
      s->n_q = HUGE_N;
      break;
    case TU_BAD_NKV_HUGE:
      s->n_kv = HUGE_N;
      break;
    case TU_BAD_NQ_PTRDIFF: /* q: 128 bytes per token, o: 96: element counts fit, byte counts do not */
      s->n_q = SIZE_MAX / 512 * 3;
      break;
    case TU_BAD_QROW_HUGE:
      s->q.row_stride = SIZE_MAX / 4;
      break;
    case TU_BAD_OHEAD_HUGE:
      s->o.head_stride = SIZE_MAX / 2;
      s->o.row_stride = dv;
      break;
    case TU_BAD_QROW_SMALL:
      s->q.row_stride = d - 1;
      break;
    case TU_BAD_QHEAD_SMALL:
      s->q.head_stride = d - 1;
      break;
    case TU_BAD_KROW_SMALL:
      s->k.row_stride = d - 1;
      break;
    case TU_BAD_KHEAD_SMALL:
      s->k.head_stride = d - 1;
      break;
    case TU_BAD_VROW_SMALL:
      s->v.row_stride = dv - 1;
      break;
    case TU_BAD_VHEAD_SMALL:
      s->v.head_stride = dv - 1;
      break;
    case TU_BAD_OROW_SMALL:
      s->o.row_stride = dv - 1;
      s->o.head_stride = n_q * dv;
      break;
    case TU_BAD_O_SELF_OVERLAP:
      s->o.row_stride = dv;
      s->o.head_stride = dv;
      break;
    case TU_BAD_O_HEADS_INTERLEAVE:
      s->o.head_stride = 2 * dv;
      break; /* row stride h_q * dv */
    case TU_BAD_HEADS_3_2:
      s->h_q = 3;
      break;
    case TU_BAD_HEADS_4_3:
      s->h_k = s->h_v = 3;
      break;
    case TU_BAD_HEADS_2_4:
      s->h_q = 2;
      s->h_k = s->h_v = 4;
      break;
    case TU_BAD_HK_2_HV_1:
      s->h_v = 1;
      break;
    case TU_BAD_HK_2_HV_4:
      s->h_v = 4;
      s->v.row_stride = 4 * dv;
      break; /* H = h_q = 4: only h_k != h_v is wrong */
    case TU_BAD_HK_1_HV_2:
      s->h_k = 1;
      s->k.row_stride = d;
      break;
    case TU_BAD_SCALE_NAN:
      *scale = NAN;
      break;
    case TU_BAD_SCALE_INF:
      *scale = INFINITY;
      break;
    case TU_BAD_SCALE_NINF:
      *scale = -INFINITY;
      break;
    case TU_BAD_WS_SMALL:
      ck_assert_uint_gt(b->need, 0);
      b->ws_size = b->need - 1;
      break;
    case TU_BAD_O_IS_Q:
      b->o_arg = b->x.q.data;
      break;
    case TU_BAD_O_IN_K:
      b->o_arg = b->x.k.data + 3;
      break;
    case TU_BAD_O_IS_V:
      b->o_arg = b->x.v.data;
      break;
    case TU_BAD_O_IN_WS:
      b->o_arg = (float *)b->ws;
      b->ws_size = b->need + TU_BAD_WS_ROOM;
      break;
    case TU_BAD_LSE_SELF_OVERLAP:
      ck_assert(lse && b->with_lse);
      lse->row_stride = 1;
      lse->head_stride = 1;
      break;
    case TU_BAD_LSE_ROW_0:
      ck_assert(lse && b->with_lse);
      lse->row_stride = 0;
      break;
    case TU_BAD_LSE_IN_O:
      ck_assert(b->with_lse);
      b->lse_arg = b->o.data + 10;
      break;
    case TU_BAD_LSE_IS_Q:
      ck_assert(b->with_lse);
      b->lse_arg = b->x.q.data;
      break;
    case TU_BAD_OWN:
    default:
      break; /* the suite's own */
  }
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
