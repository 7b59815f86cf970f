/*
 * The bad-input tables that the variants over one attn_shape share (softmax, GAU, selective):
 * the faults of a valid call's pointers, shape, scale, workspace and output aliasing (and of an
 * lse output, for the variants with one), their names and expected statuses, the valid call's
 * buffers, and the check that a rejected call wrote nothing. A suite's bad-input test iterates
 * the shared rows and then its own (faults from TU_BAD_OWN on), applying a shared fault with
 * tu_bad_apply and its own faults itself, so that every variant tests every shared fault on
 * every path with the same expectations.
 */
#ifndef ATTN_TEST_BAD_INPUT_H
#define ATTN_TEST_BAD_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include <attn.h>

#include "test_util.h"

/* The valid call's shape (tu_bad_make asserts it): the head faults' names, the strides and the
 * PTRDIFF_MAX fault's sizes are written for it (n_kv is free). */
enum { TU_BAD_NQ = 5, TU_BAD_HQ = 4, TU_BAD_HKV = 2, TU_BAD_D = 8, TU_BAD_DV = 6 };
/* Bytes of workspace beyond the size the query reported (room for an output inside it). */
enum { TU_BAD_WS_ROOM = 4096 };
/* What a size query's output holds before a rejected query (it must still hold it after). */
#define TU_BAD_UNTOUCHED ((size_t)12345)

/** The shared faults, in the order of the shared rows; a suite numbers its own from TU_BAD_OWN. */
typedef enum tu_bad_fault {
  /* pointers of the call */
  TU_BAD_DESC_NULL,
  TU_BAD_Q_NULL,
  TU_BAD_K_NULL,
  TU_BAD_V_NULL,
  TU_BAD_O_NULL,
  TU_BAD_WS_NULL,
  /* sizes of the shape */
  TU_BAD_NQ_0,
  TU_BAD_NKV_0,
  TU_BAD_HQ_0,
  TU_BAD_HK_0,
  TU_BAD_HV_0,
  TU_BAD_D_0,
  TU_BAD_DV_0,
  TU_BAD_NQ_HUGE,
  TU_BAD_NKV_HUGE,
  TU_BAD_NQ_PTRDIFF,
  /* strides of the shape */
  TU_BAD_QROW_HUGE,
  TU_BAD_OHEAD_HUGE,
  TU_BAD_QROW_SMALL,
  TU_BAD_QHEAD_SMALL,
  TU_BAD_KROW_SMALL,
  TU_BAD_KHEAD_SMALL,
  TU_BAD_VROW_SMALL,
  TU_BAD_VHEAD_SMALL,
  TU_BAD_OROW_SMALL,
  TU_BAD_O_SELF_OVERLAP,
  TU_BAD_O_HEADS_INTERLEAVE,
  /* head counts: not dividing H, or h_k != h_v */
  TU_BAD_HEADS_3_2,
  TU_BAD_HEADS_4_3,
  TU_BAD_HEADS_2_4,
  TU_BAD_HK_2_HV_1,
  TU_BAD_HK_2_HV_4,
  TU_BAD_HK_1_HV_2,
  /* the descriptor's scale */
  TU_BAD_SCALE_NAN,
  TU_BAD_SCALE_INF,
  TU_BAD_SCALE_NINF,
  /* workspace and aliasing */
  TU_BAD_WS_SMALL,
  TU_BAD_O_IS_Q,
  TU_BAD_O_IN_K,
  TU_BAD_O_IS_V,
  TU_BAD_O_IN_WS,
  /* the lse output (the variants with one) */
  TU_BAD_LSE_SELF_OVERLAP,
  TU_BAD_LSE_ROW_0,
  TU_BAD_LSE_IN_O,
  TU_BAD_LSE_IS_Q,
  TU_BAD_OWN /* the first value of a suite's own faults */
} tu_bad_fault;

/*
 * A fault as data: up to TU_EDITS stores into the objects of a valid call (a descriptor, a shape,
 * a struct of the call's arguments, a buffer), each object named by its index in the array the
 * suite hands to tu_edits_apply. TU_SET_* write a size_t, int (or enum), float or pointer field
 * (T: the object's type, m: the field; the field's width is checked); TU_PTR points a field into
 * another object (n floats past its start), TU_NUL sets it to NULL; TU_ADD adds to a size_t
 * field (asserting it does not wrap); TU_ELEM_* write element i of an object that is an array.
 */
typedef enum tu_edit_op { TU_EDIT_END, TU_EDIT_SIZE, TU_EDIT_INT, TU_EDIT_FLOAT, TU_EDIT_PTR, TU_EDIT_ADD } tu_edit_op;
enum { TU_EDITS = 5, TU_OBJ_NONE = 255 };
typedef struct tu_edit {
  unsigned char op, obj, width, to; /* to: TU_EDIT_PTR's target object (TU_OBJ_NONE: NULL) */
  size_t off;                       /* the field's byte offset in obj */
  union {
    size_t z;
    ptrdiff_t n; /* TU_EDIT_PTR: floats past the target's start; TU_EDIT_ADD: the delta */
    int i;
    double f;
  } v;
} tu_edit;
#define TU_FIELD_(T, m) sizeof(((T *)0)->m), 0, offsetof(T, m)
#define TU_SET_Z(o, T, m, val)                         \
  {                                                    \
    TU_EDIT_SIZE, (o), TU_FIELD_(T, m), { .z = (val) } \
  }
#define TU_SET_I(o, T, m, val)                             \
  {                                                        \
    TU_EDIT_INT, (o), TU_FIELD_(T, m), { .i = (int)(val) } \
  }
#define TU_SET_F(o, T, m, val)                          \
  {                                                     \
    TU_EDIT_FLOAT, (o), TU_FIELD_(T, m), { .f = (val) } \
  }
#define TU_PTR(o, T, m, to, k)                                                \
  {                                                                           \
    TU_EDIT_PTR, (o), sizeof(((T *)0)->m), (to), offsetof(T, m), { .n = (k) } \
  }
#define TU_NUL(o, T, m) TU_PTR(o, T, m, TU_OBJ_NONE, 0)
#define TU_ADD(o, T, m, delta)                          \
  {                                                     \
    TU_EDIT_ADD, (o), TU_FIELD_(T, m), { .n = (delta) } \
  }
#define TU_ELEM_F(o, idx, val)                                                  \
  {                                                                             \
    TU_EDIT_FLOAT, (o), sizeof(float), 0, sizeof(float) * (idx), { .f = (val) } \
  }
#define TU_ELEM_Z(o, idx, val)                                                   \
  {                                                                              \
    TU_EDIT_SIZE, (o), sizeof(size_t), 0, sizeof(size_t) * (idx), { .z = (val) } \
  }
#define TU_ELEM_P(o, idx, to, k)                                                 \
  {                                                                              \
    TU_EDIT_PTR, (o), sizeof(void *), (to), sizeof(void *) * (idx), { .n = (k) } \
  }

/** The rows of a NULL descriptor, q, k, v and o of a suite whose call's arguments are a struct with
 *  fields d, q, k, v and o: ROW(status, desc_level) gives a row's fields after its name, NUL(m) the
 *  edit that sets field m to NULL. */
#define TU_NULL_ROW_(ROW, NUL, text, m)                   \
  {                                                       \
    text " NULL", ROW(ATTN_E_NULL_POINTER, 0), { NUL(m) } \
  }
#define TU_NULL_ARG_ROWS(ROW, NUL)                                                                   \
  TU_NULL_ROW_(ROW, NUL, "desc", d), TU_NULL_ROW_(ROW, NUL, "q", q), TU_NULL_ROW_(ROW, NUL, "k", k), \
      TU_NULL_ROW_(ROW, NUL, "v", v), TU_NULL_ROW_(ROW, NUL, "o", o)

/** Applies the edits (up to n, to the first TU_EDIT_END) to obj[0 .. n_obj): every object an edit
 *  names must be there (non-NULL). */
void tu_edits_apply(const tu_edit *e, size_t n, void *const *obj, size_t n_obj);
/** 1 when one of the edits (up to n, to the first TU_EDIT_END) writes into object o. */
int tu_edits_touch(const tu_edit *e, size_t n, int o);

/** One row of a bad-input table (also the row type of the merge's and the selective cache's own
 *  tables, whose faults are their own). */
typedef struct tu_bad_case {
  const char *name;
  int fault; /* a tu_bad_fault, or a suite's own (>= TU_BAD_OWN) */
  attn_status expect;
  int desc_level;         /* 1: the descriptor's size query must answer the same status */
  tu_edit edit[TU_EDITS]; /* the fault (tu_bad_apply: objects TU_OB_*, then the suite's own) */
} tu_bad_case;

/** The objects a tu_bad_case's edits name: the shared ones, then a suite's own (TU_OB_OWN on). */
enum {
  TU_OB_BAD,   /* the tu_bad (the call's arguments) */
  TU_OB_SHAPE, /* the descriptor's attn_shape */
  TU_OB_SCALE, /* the descriptor's scale (a float) */
  TU_OB_LSE,   /* the descriptor's lse layout (variants with an lse) */
  TU_OB_Q,     /* the inputs' and outputs' floats, the workspace */
  TU_OB_K,
  TU_OB_V,
  TU_OB_O,
  TU_OB_LSE_DATA,
  TU_OB_WS,
  TU_OB_OWN
};

/** Rows: the shared ones (those of the lse faults with with_lse only), then the suite's n_own. */
size_t tu_bad_rows(int with_lse, size_t n_own);
/** Row i of that table (own: the suite's rows). */
const tu_bad_case *tu_bad_row(size_t i, int with_lse, const tu_bad_case *own);

/** The buffers of a valid call and the arguments a fault changes. */
typedef struct tu_bad {
  tu_qkv x;         /* inputs big enough that an aliased output fits inside them */
  tu_tensor o, lse; /* guarded outputs, all sentinel (lse: only with_lse) */
  void *ws;         /* need + TU_BAD_WS_ROOM bytes, guarded */
  size_t need;
  int with_lse;
  /* the call's arguments: those of the valid call until a fault changes them */
  const float *q, *k, *v;
  float *o_arg, *lse_arg;
  void *ws_arg;
  size_t ws_size;
  int desc_null; /* 1: the call gets a NULL descriptor */
} tu_bad;

/**
 * The buffers of a valid call of shape s (the default layouts; the sizes TU_BAD_*) whose size
 * query answered need bytes: q [room n_q h_q][h_q][d], k [room n_kv h_q][h_k][d] and
 * v [room n_kv h_q][h_q][dv] (room for h_v up to h_q) from r, o [n_q][h_q][dv], lse
 * [n_q][h_q][1] (with_lse), and the arguments of that valid call.
 */
void tu_bad_make(tu_bad *b, tu_rng *r, const attn_shape *s, size_t room, int with_lse, size_t need);
/** Applies row c's edits to the call's arguments, the descriptor's shape s, its scale, its lse
 *  layout (NULL: none) and the suite's n_own objects (TU_OB_OWN on; a shared row names none). */
void tu_bad_apply(tu_bad *b, const tu_bad_case *c, attn_shape *s, float *scale, attn_layout *lse, void *const *own,
                  size_t n_own);
/** Asserts that the call answered the row's status (the message names the row) and set an error
 *  detail of its own (attn_last_error: tu_bad_apply and this function leave one no call makes). */
void tu_bad_assert_status(const tu_bad_case *c, const char *call, attn_status got);
/** For a descriptor-level row: the size query answered the row's status and left its output at
 *  TU_BAD_UNTOUCHED. Other rows: nothing. */
void tu_bad_assert_query(const tu_bad_case *c, const char *query, attn_status got, size_t bytes);
/** After a rejected call: o and lse still all sentinel, their guards and the workspace's intact,
 *  the inputs unchanged. */
void tu_bad_assert_untouched(const tu_bad *b);
void tu_bad_free(tu_bad *b);

#endif /* ATTN_TEST_BAD_INPUT_H */
