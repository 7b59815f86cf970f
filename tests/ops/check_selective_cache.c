/*
 * The selective KV cache (attn_selcache_*), on the ISA path named by ATTN_ISA. TCases: "cache" (no
 * pruning = attn_selective exactly; loads in pieces; budget and tau eviction against a float64
 * simulation of the policy; a NaN F; live bytes; copy / snapshot), "api" (attn_selcache_size and
 * init) and "bad_input" (the exact status of every bad argument of step, load, copy and workspace
 * size; outputs and cache untouched); "batch" and "batch_bad" (selcache_batch.c: caches stepped in
 * one call). attn_selective itself: check_selective.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h" /* tu_bad_case: a row of the table */
#include "selcache_tests.h"
#include "selective_util.h"
#include "tolerances.h"
#include "case_table.h" /* last: its short macro names */

/* No pruning (tau = +inf; no budget, or one no smaller than the tokens): every step equals
 * attn_selective's decode call over the same keys with the same carried f, bit for bit (the cache
 * holds the tokens in order, in the layout of a token-major tensor); and the reference rows of the
 * whole sequence within the bound. prefill 0: the cache is built by steps from BOS on. */
typedef struct unp_case {
  size_t h_q, h_kv, d, dv, h_sel, prefill, n, budget;
} unp_case;
static const unp_case unp_cases[] = {
    {.h_q = 4, .h_kv = 2, .d = 16, .dv = 16, .h_sel = 3, .prefill = 37, .n = 67},
    {.h_q = 2, .h_kv = 1, .d = 8, .dv = 12, .h_sel = 0, .prefill = 0, .n = 50},
    {.h_q = 1, .h_kv = 1, .d = 64, .dv = 64, .h_sel = 0, .prefill = 49, .n = 100, .budget = 100},
    {.h_q = 3, .h_kv = 3, .d = 9, .dv = 9, .h_sel = 1, .prefill = 1, .n = 40, .budget = 40},
};
#define UNP_NCASES (sizeof unp_cases / sizeof unp_cases[0])

START_TEST(selcache_unpruned_equals_selective) {
  const unp_case *c = &unp_cases[_i];
  tu_rng rng = tu_rng_of(3000 + (uint64_t)_i);
  tu_qkv x;
  attn_selective_desc dfull;
  sel_inputs(&x, &dfull, &rng, TU_DATA_UNIFORM, c->n, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  sel_ref ref;
  sel_ref_compute(&dfull, &x.q, &x.k, &x.v, NULL, &ref);
  sc_fix s;
  sc_fix_init(&s, c->n + 1, c->h_kv, c->d, c->dv, INFINITY, c->budget, 4);
  float *f = malloc(sizeof(float) * c->n);
  ck_assert_ptr_nonnull(f);
  if (c->prefill) sc_prefill_load(&s, &x, c->prefill, c->h_q, c->h_kv, c->d, c->dv, c->h_sel, f);
  sc_check_report(&s, c->prefill, c->prefill, 0);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  for (size_t t = c->prefill; t < c->n; ++t) {
    tu_tensor o, lse;
    tu_tensor_alloc(&o, T, 1, c->h_q, c->dv, 1);
    tu_tensor_alloc(&lse, T, 1, c->h_q, 1, 1);
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 12), ATTN_OK);
    tu_assert_output_clean("cache step o", &o);
    tu_assert_output_clean("cache step lse", &lse);
    sc_check_report(&s, t + 1, t + 1, 0);
    /* the same step through attn_selective */
    attn_selective_desc d;
    sel_desc(&d, 1, t + 1, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
    const tu_tensor q = tu_rows_view(&x.q, t, 1), k = tu_rows_view(&x.k, 0, t + 1), v = tu_rows_view(&x.v, 0, t + 1);
    sel_res r;
    sel_run(&d, &q, &k, &v, T, 1, f, 0, &r);
    ck_assert_msg(!memcmp(o.data, r.o.data, sizeof(float) * c->h_q * c->dv) &&
                      !memcmp(lse.data, r.lse.data, sizeof(float) * c->h_q),
                  "step %zu: the cache's output differs from attn_selective's (o[0] %.9g vs %.9g)", t,
                  (double)o.data[0], (double)r.o.data[0]);
    char what[64];
    snprintf(what, sizeof what, "cache step %zu vs reference", t);
    sel_compare(what, c->n, c->d, &o, &lse, ref.o + t * c->h_q * c->dv, ref.lse + t * c->h_q,
                sel_scales_at(&ref, t, c->h_q, c->dv), 1.0);
    memcpy(f, r.f, sizeof(float) * (t + 1));
    sel_res_free(&r);
    tu_tensor_free(&o);
    tu_tensor_free(&lse);
  }
  tu_qkv_assert_unchanged(&x);
  free(f);
  sc_fix_free(&s);
  sel_ref_free(&ref);
  tu_qkv_free(&x);
}
END_TEST

/* attn_selcache_load into a partly filled cache (attn.h: "an empty or partly filled cache"): a
 * prefill of 37 tokens loaded, then a chunk of 20 (attn_selective with the carried f, n_q < n_kv)
 * loaded with its tokens' f, then decode steps, without pruning, must give the rows of the whole
 * sequence (the reference) as the documented "pruning changes nothing" promises: the cached
 * tokens' F must include the chunk's selections too. */
START_TEST(selcache_load_in_two_pieces) {
  enum { HQ = 4, HKV = 2, DD = 16, HS = 3, N = 67, A = 37, B = 20 };
  tu_rng rng = tu_rng_of(3050);
  tu_qkv x;
  attn_selective_desc dfull;
  sel_inputs(&x, &dfull, &rng, TU_DATA_UNIFORM, N, HQ, HKV, DD, DD, HS);
  sel_ref ref;
  sel_ref_compute(&dfull, &x.q, &x.k, &x.v, NULL, &ref);
  sc_fix s;
  sc_fix_init(&s, N + 1, HKV, DD, DD, INFINITY, 0, 0);
  float f[N];
  sc_prefill_load(&s, &x, A, HQ, HKV, DD, DD, HS, f);
  attn_selective_desc dc;
  sel_desc(&dc, B, A + B, HQ, HKV, DD, DD, HS);
  const tu_tensor qc = tu_rows_view(&x.q, A, B), kc = tu_rows_view(&x.k, 0, A + B), vc = tu_rows_view(&x.v, 0, A + B);
  sel_res r;
  sel_run(&dc, &qc, &kc, &vc, T, 1, f, 0, &r);
  attn_selective_desc dl;
  sel_desc(&dl, B, B, HQ, HKV, DD, DD, HS);
  ck_assert_int_eq(attn_selcache_load(&s.c, &dl, tu_at(&x.k, A, 0, 0), tu_at(&x.v, A, 0, 0), r.f),
                   ATTN_OK); /* F of all A + B positions */
  sel_res_free(&r);
  sc_check_report(&s, A + B, A + B, 0);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, HQ, HKV, DD, DD, HS);
  for (size_t t = A + B; t < N; ++t) {
    tu_tensor o, lse;
    tu_tensor_alloc(&o, T, 1, HQ, DD, 1);
    tu_tensor_alloc(&lse, T, 1, HQ, 1, 1);
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 0), ATTN_OK);
    char what[64];
    snprintf(what, sizeof what, "step %zu after two loads vs reference", t);
    sel_compare(what, N, DD, &o, &lse, ref.o + t * HQ * DD, ref.lse + t * HQ, sel_scales_at(&ref, t, HQ, DD), 1.0);
    tu_tensor_free(&o);
    tu_tensor_free(&lse);
  }
  sc_fix_free(&s);
  sel_ref_free(&ref);
  tu_qkv_free(&x);
}
END_TEST

/* A float64 simulation of the policy: the live positions, their F and the magnitudes G behind it. */
typedef struct sim {
  size_t n, evicted, d;
  size_t *pos;
  double *F, *G;
} sim;

static void sim_init(sim *s, size_t cap, size_t d) {
  memset(s, 0, sizeof *s);
  s->pos = malloc(sizeof(size_t) * (cap + 1));
  s->F = sel_dalloc(cap + 1);
  s->G = sel_dalloc(cap + 1);
  s->d = d;
  ck_assert_ptr_nonnull(s->pos);
}

static void sim_free(sim *s) {
  free(s->pos);
  free(s->F);
  free(s->G);
}

static void sim_add(sim *s, size_t pos, double F, double G) {
  s->pos[s->n] = pos;
  s->F[s->n] = F;
  s->G[s->n] = G;
  s->n++;
}

static void sim_remove(sim *s, size_t i) {
  s->n--;
  s->pos[i] = s->pos[s->n];
  s->F[i] = s->F[s->n];
  s->G[i] = s->G[s->n];
  s->evicted++;
}

/* How far the library's float F of live entry i may be from the simulation's (generously: 16 times
 * the bound of a returned column sum). Decisions closer than this are ambiguous: the test data
 * must avoid them (exact ties are fine: both sides see F = 0 exactly). */
static double sim_margin(const sim *s, size_t i, size_t tokens) {
  return 16.0 * tol_selective_f(tokens, s->d, s->F[i], s->G[i]);
}

/* Step (3) of the policy: F >= tau, then the budget (largest F, ties: the oldest), BOS and the
 * newest exempt. */
static void sim_evict(sim *s, float tau, size_t budget, size_t newest, size_t tokens) {
  for (size_t i = 0; i < s->n;) {
    const size_t p = s->pos[i];
    if (p == 0 || p == newest) {
      ++i;
      continue;
    }
    ck_assert_msg(
        s->F[i] == (double)tau || fabs(s->F[i] - (double)tau) > sim_margin(s, i, tokens) || isinf((double)tau),
        "ambiguous test data: F %.9g of position %zu is within rounding of tau %g", s->F[i], p, (double)tau);
    if (s->F[i] >= (double)tau)
      sim_remove(s, i);
    else
      ++i;
  }
  while (budget && s->n > budget) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < s->n; ++i) {
      const size_t p = s->pos[i];
      if (p == 0 || p == newest) continue;
      if (best == SIZE_MAX || s->F[i] > s->F[best] || (s->F[i] == s->F[best] && p < s->pos[best])) best = i;
    }
    ck_assert_uint_ne(best, SIZE_MAX);
    for (size_t i = 0; i < s->n; ++i) {
      if (i == best || s->pos[i] == 0 || s->pos[i] == newest || s->F[i] == s->F[best]) continue;
      ck_assert_msg(fabs(s->F[i] - s->F[best]) > sim_margin(s, i, tokens) + sim_margin(s, best, tokens),
                    "ambiguous test data: F %.9g (position %zu) and %.9g (position %zu) within rounding", s->F[i],
                    s->pos[i], s->F[best], s->pos[best]);
    }
    sim_remove(s, best);
  }
  /* the simulation's own invariants */
  int bos = 0, newest_live = 0;
  for (size_t i = 0; i < s->n; ++i) {
    bos |= s->pos[i] == 0;
    newest_live |= s->pos[i] == newest;
  }
  ck_assert(bos && newest_live);
  if (budget) ck_assert_uint_le(s->n, budget);
}

/* Ties: the selecting head's queries are >= 0, and the keys of its key head are <= 0 at positions
 * 1 mod 3 (their scores are <= 0: S = 0 exactly, their F stays exactly 0, a tie the budget breaks
 * by age) and >= 0 elsewhere (selected at every step: F grows by about the same amount per step). */
static void sel_make_ties(tu_qkv *x, size_t h_sel, size_t group) {
  const size_t hk = h_sel / group;
  for (size_t t = 0; t < x->q.n; ++t)
    for (size_t e = 0; e < x->q.w; ++e) *tu_at(&x->q, t, h_sel, e) = fabsf(*tu_at(&x->q, t, h_sel, e));
  for (size_t t = 0; t < x->k.n; ++t)
    for (size_t e = 0; e < x->k.w; ++e) {
      const float a = fabsf(*tu_at(&x->k, t, hk, e));
      *tu_at(&x->k, t, hk, e) = t % 3 == 1 ? -a : a;
    }
  tu_qkv_snapshot(x);
}

typedef struct pol_case {
  const char *name;
  size_t h_q, h_kv, d, dv, h_sel;
  size_t prefill, n, capacity, budget;
  float tau;
  int ties;
} pol_case;
static const pol_case pol_cases[] = {
    {"ties_budget6", 2, 1, 16, 16, 0, 9, 50, 10, 6, INFINITY, 1},
    {"ties_budget2", 2, 1, 8, 8, 1, 5, 35, 12, 2, INFINITY, 1},
    {"ties_gqa_budget17", 4, 2, 8, 12, 3, 40, 90, 48, 17, INFINITY, 1},
    {"ties_budget4_no_prefill", 2, 2, 16, 16, 1, 0, 40, 6, 4, INFINITY, 1},
    {"random_budget5", 2, 2, 16, 16, 1, 20, 60, 24, 5, INFINITY, 0},
    {"random_budget_load_evicts", 3, 1, 8, 8, 2, 30, 50, 31, 12, INFINITY, 0},
    {"ties_tau2", 2, 1, 16, 16, 0, 20, 60, 64, 0, 2.0f, 1},
    {"random_tau0.5", 2, 1, 16, 16, 1, 30, 60, 70, 0, 0.5f, 0},
    {"random_tau3_budget8", 3, 1, 8, 8, 2, 10, 50, 12, 8, 3.0f, 0},
    {"ties_tau0", 2, 1, 8, 8, 0, 6, 26, 8, 0, 0.0f, 1},
    {"ties_tau_-inf", 2, 1, 8, 8, 1, 6, 26, 8, 0, -INFINITY, 1},
};
#define POL_NCASES (sizeof pol_cases / sizeof pol_cases[0])

/* Pruned decode against the simulation: after a load (the prefill's f) and after every step, the
 * report (live, tokens, evicted, live bytes) equals the simulation's, the live set stays within the
 * budget with BOS and the newest token, and every step's output equals the reference over the
 * simulated live set with the simulated F (an evicted token that came back, the wrong token evicted
 * or a wrong tie-break change the output far beyond the bound). */
START_TEST(selcache_policy_matches_simulation) {
  const pol_case *c = &pol_cases[_i];
  tu_rng rng = tu_rng_of(3100 + (uint64_t)_i);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, c->n, c->n, c->h_q, c->h_kv, c->h_kv, c->d, c->dv);
  if (c->ties) sel_make_ties(&x, c->h_sel, c->h_q / c->h_kv);
  sc_fix s;
  sc_fix_init(&s, c->capacity, c->h_kv, c->d, c->dv, c->tau, c->budget, 4);
  sim sm;
  sim_init(&sm, c->capacity, c->d);
  if (c->prefill) {
    float *f = malloc(sizeof(float) * c->prefill);
    ck_assert_ptr_nonnull(f);
    sc_prefill_load(&s, &x, c->prefill, c->h_q, c->h_kv, c->d, c->dv, c->h_sel, f);
    attn_selective_desc dp;
    sel_desc(&dp, c->prefill, c->prefill, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
    const tu_tensor q = tu_rows_view(&x.q, 0, c->prefill), k = tu_rows_view(&x.k, 0, c->prefill),
                    v = tu_rows_view(&x.v, 0, c->prefill);
    sel_ref pre;
    sel_ref_compute(&dp, &q, &k, &v, NULL, &pre);
    for (size_t j = 0; j < c->prefill; ++j) sim_add(&sm, j, (double)f[j], pre.fg[j]);
    sel_ref_free(&pre);
    free(f);
    sim_evict(&sm, c->tau, c->budget, c->prefill - 1, c->prefill);
    sc_check_report(&s, sm.n, c->prefill, sm.evicted);
  }
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, c->h_q, c->h_kv, c->d, c->dv, c->h_sel);
  const float **kp = malloc(sizeof(float *) * (c->capacity + 1)), **vp = malloc(sizeof(float *) * (c->capacity + 1));
  ck_assert(kp && vp);
  const size_t hd = c->h_q * c->dv;
  double *eo = sel_dalloc(hd), *el = sel_dalloc(c->h_q), *os = sel_dalloc(hd), *oa = sel_dalloc(hd),
         *of = sel_dalloc(hd);
  double *sa = sel_dalloc(c->h_q), *la = sel_dalloc(c->h_q), *lf = sel_dalloc(c->h_q),
         *srow = sel_dalloc(c->capacity + 1), *grow = sel_dalloc(c->capacity + 1);
  for (size_t t = c->prefill; t < c->n; ++t) {
    tu_tensor o, lse;
    tu_tensor_alloc(&o, T, 1, c->h_q, c->dv, 1);
    tu_tensor_alloc(&lse, T, 1, c->h_q, 1, 1);
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, t % 8), ATTN_OK);
    tu_assert_output_clean("cache step o", &o);
    /* (1) the new token with F = 0, attention over the live set */
    sim_add(&sm, t, 0.0, 0.0);
    for (size_t i = 0; i < sm.n; ++i) {
      kp[i] = tu_at(&x.k, sm.pos[i], 0, 0);
      vp[i] = tu_at(&x.v, sm.pos[i], 0, 0);
    }
    const ref_selective_live lp = {.n = sm.n,
                                   .h_q = c->h_q,
                                   .h_kv = c->h_kv,
                                   .d = c->d,
                                   .dv = c->dv,
                                   .scale = (double)d1.scale,
                                   .h_sel = c->h_sel,
                                   .q = tu_at(&x.q, t, 0, 0),
                                   .q_head_stride = x.q.l.head_stride,
                                   .k = kp,
                                   .v = vp,
                                   .k_head_stride = x.k.l.head_stride,
                                   .v_head_stride = x.v.l.head_stride,
                                   .F = sm.F,
                                   .G = sm.G};
    const ref_selective_out out = {eo, el, os, oa, of, sa, la, lf, srow, grow, NULL};
    ref_selective_live_attend(&lp, &out);
    char what[96];
    snprintf(what, sizeof what, "%s: step %zu over %zu live tokens", c->name, t, sm.n);
    const sel_scales sc = {os, oa, of, sa, la, lf};
    sel_compare(what, t + 1, c->d, &o, &lse, eo, el, sc, 1.0);
    /* (2) the query's selection into F of every live token but BOS and itself */
    for (size_t i = 0; i < sm.n; ++i)
      if (sm.pos[i] != 0 && sm.pos[i] != t) {
        sm.F[i] += srow[i];
        sm.G[i] += grow[i];
      }
    /* (3) eviction */
    sim_evict(&sm, c->tau, c->budget, t, t + 1);
    sc_check_report(&s, sm.n, t + 1, sm.evicted);
    tu_tensor_free(&o);
    tu_tensor_free(&lse);
  }
  /* the cases exercise eviction */
  if (c->budget || isfinite(c->tau)) ck_assert_uint_gt(s.c.evicted, 0);
  tu_qkv_assert_unchanged(&x);
  double *all[] = {eo, el, os, oa, of, sa, la, lf, srow, grow};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
  free(kp);
  free(vp);
  sim_free(&sm);
  sc_fix_free(&s);
  tu_qkv_free(&x);
}
END_TEST

/* A NaN F ranks below every number for the budget (as it is never >= tau). Token 1's key is NaN,
 * so the first query after it gives F_1 = NaN: token 1 then stays live while tokens with a
 * number remain, and every later row, which sees it, is NaN (were it evicted, as the first slot
 * examined once was against any number, the later rows would come out finite). With every key
 * after BOS NaN, every candidate is NaN and the budget still holds (the oldest goes first). */
START_TEST(selcache_nan_f_ranks_last) {
  enum { N = 14, HQ = 2, HKV = 1, D = 8, BUDGET = 3 };
  for (int all = 0; all < 2; all++) {
    tu_rng rng = tu_rng_of(4200 + (uint64_t)all);
    tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, D, D);
    for (size_t t = 1; t < (all ? (size_t)N : 2); t++) *tu_at(&x.k, t, 0, 3) = NAN;
    tu_qkv_snapshot(&x);
    sc_fix s;
    sc_fix_init(&s, BUDGET + 1, HKV, D, D, INFINITY, BUDGET, 4);
    attn_selective_desc d1;
    sel_desc(&d1, 1, 1, HQ, HKV, D, D, 0);
    for (size_t t = 0; t < N; t++) {
      tu_tensor o, lse;
      tu_tensor_alloc(&o, T, 1, HQ, D, 1);
      tu_tensor_alloc(&lse, T, 1, HQ, 1, 1);
      ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 0), ATTN_OK);
      for (size_t h = 0; h < HQ; h++)
        for (size_t c = 0; c < D; c++) {
          const float got = *tu_at(&o, 0, h, c);
          ck_assert_msg(t == 0 ? isfinite(got) : isnan(got), "all %d step %zu head %zu col %zu: %g", all, t, h, c,
                        (double)got);
        }
      sc_check_report(&s, t + 1 < BUDGET ? t + 1 : BUDGET, t + 1, t + 1 > BUDGET ? t + 1 - BUDGET : 0);
      tu_tensor_free(&o);
      tu_tensor_free(&lse);
    }
    tu_qkv_assert_unchanged(&x);
    sc_fix_free(&s);
    tu_qkv_free(&x);
  }
}
END_TEST

/* attn_selcache_copy: a copy continues exactly as the original (the same outputs, bit for bit, and
 * reports); a snapshot restored into the original replays the same steps; copying a cache onto
 * itself changes nothing. */
START_TEST(selcache_copy_and_restore) {
  enum { HQ = 4, HKV = 2, DD = 8, DV = 8, HS = 1, N = 60, PRE = 12, CAP = 16, BUDGET = 7, MID = 30 };
  tu_rng rng = tu_rng_of(3200);
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, N, N, HQ, HKV, HKV, DD, DV);
  sel_make_ties(&x, HS, HQ / HKV);
  sc_fix a, b, snap;
  sc_fix_init(&a, CAP, HKV, DD, DV, 4.0f, BUDGET, 0);
  sc_fix_init(&b, CAP, HKV, DD, DV, INFINITY, 0, 4); /* its own settings are overwritten by the copy */
  sc_fix_init(&snap, CAP, HKV, DD, DV, INFINITY, 0, 8);
  float f[PRE];
  sc_prefill_load(&a, &x, PRE, HQ, HKV, DD, DV, HS, f);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, HQ, HKV, DD, DV, HS);
  tu_tensor o1, l1, o2, l2;
  tu_tensor_alloc(&o1, T, 1, HQ, DV, 1);
  tu_tensor_alloc(&l1, T, 1, HQ, 1, 1);
  tu_tensor_alloc(&o2, T, 1, HQ, DV, 1);
  tu_tensor_alloc(&l2, T, 1, HQ, 1, 1);
  for (size_t t = PRE; t < MID; ++t) ck_assert_int_eq(sc_step_token(&d1, &a.c, &x, t, &o1, &l1, 0), ATTN_OK);
  ck_assert_int_eq(attn_selcache_copy(&b.c, &a.c), ATTN_OK);
  ck_assert_int_eq(attn_selcache_copy(&snap.c, &a.c), ATTN_OK);
  ck_assert(b.c.memory == b.mem && snap.c.memory == snap.mem);
  ck_assert(b.c.live == a.c.live && b.c.tokens == a.c.tokens && b.c.evicted == a.c.evicted &&
            b.c.budget == a.c.budget && b.c.tau == a.c.tau);
  /* onto itself: nothing changes */
  attn_selcache before = a.c;
  unsigned char *mem_before = malloc(a.bytes);
  ck_assert_ptr_nonnull(mem_before);
  memcpy(mem_before, a.mem, a.bytes);
  ck_assert_int_eq(attn_selcache_copy(&a.c, &a.c), ATTN_OK);
  tu_assert_same_bits("cache copied onto itself", &before, &a.c, sizeof before);
  tu_assert_same_bits("memory copied onto itself", mem_before, a.mem, a.bytes);
  free(mem_before);
  float *replay = malloc(sizeof(float) * (N - MID) * (HQ * DV + HQ));
  ck_assert_ptr_nonnull(replay);
  for (size_t t = MID; t < N; ++t) {
    ck_assert_int_eq(sc_step_token(&d1, &a.c, &x, t, &o1, &l1, 0), ATTN_OK);
    ck_assert_int_eq(sc_step_token(&d1, &b.c, &x, t, &o2, &l2, 4), ATTN_OK);
    tu_assert_same_bits("copy's o", o1.data, o2.data, sizeof(float) * HQ * DV);
    tu_assert_same_bits("copy's lse", l1.data, l2.data, sizeof(float) * HQ);
    ck_assert(b.c.live == a.c.live && b.c.tokens == a.c.tokens && b.c.evicted == a.c.evicted);
    memcpy(replay + (t - MID) * (HQ * DV + HQ), o1.data, sizeof(float) * HQ * DV);
    memcpy(replay + (t - MID) * (HQ * DV + HQ) + HQ * DV, l1.data, sizeof(float) * HQ);
  }
  ck_assert_uint_gt(a.c.evicted, 0);
  /* restore the snapshot into a and replay */
  ck_assert_int_eq(attn_selcache_copy(&a.c, &snap.c), ATTN_OK);
  ck_assert(a.c.memory == a.mem && a.c.tokens == MID);
  for (size_t t = MID; t < N; ++t) {
    ck_assert_int_eq(sc_step_token(&d1, &a.c, &x, t, &o1, &l1, 0), ATTN_OK);
    tu_assert_same_bits("replayed o", replay + (t - MID) * (HQ * DV + HQ), o1.data, sizeof(float) * HQ * DV);
    tu_assert_same_bits("replayed lse", replay + (t - MID) * (HQ * DV + HQ) + HQ * DV, l1.data, sizeof(float) * HQ);
  }
  ck_assert(a.c.live == b.c.live && a.c.tokens == b.c.tokens && a.c.evicted == b.c.evicted);
  free(replay);
  tu_tensor_free(&o1);
  tu_tensor_free(&l1);
  tu_tensor_free(&o2);
  tu_tensor_free(&l2);
  sc_fix_free(&a);
  sc_fix_free(&b);
  sc_fix_free(&snap);
  tu_qkv_free(&x);
}
END_TEST

START_TEST(selcache_size_and_init) {
  size_t bytes = 777;
  ck_assert_int_eq(attn_selcache_size(10, 2, 8, 4, NULL), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_size(0, 2, 8, 4, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(10, 0, 8, 4, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(10, 2, 0, 4, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(10, 2, 8, 0, &bytes), ATTN_E_ZERO_SIZE);
  ck_assert_int_eq(attn_selcache_size(SIZE_MAX / 4, 2, 8, 4, &bytes), ATTN_E_SIZE_OVERFLOW);
  ck_assert_int_eq(attn_selcache_size(2, SIZE_MAX / 2, 8, 4, &bytes), ATTN_E_SIZE_OVERFLOW);
  ck_assert_uint_eq(bytes, 777);
  size_t need = 0;
  ck_assert_int_eq(attn_selcache_size(10, 2, 8, 4, &need), ATTN_OK);
  ck_assert_uint_ge(need, 10 * sc_token_bytes(2, 8, 4));
  unsigned char *mem = tu_alloc(need, 0);
  memset(mem, 0x5A, need);
  static const struct {
    size_t cap, h_kv, d, dv;
    float tau;
    size_t budget;
    int short_mem, null_cache, null_mem;
    attn_status expect;
  } rows[] = {
      {0, 2, 8, 4, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 0, 8, 4, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 2, 0, 4, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 2, 8, 0, INFINITY, 0, 0, 0, 0, ATTN_E_ZERO_SIZE},
      {10, 2, 8, 4, INFINITY, 0, 1, 0, 0, ATTN_E_WORKSPACE_TOO_SMALL},
      {10, 2, 8, 4, NAN, 0, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, INFINITY, 1, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, INFINITY, 10, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, 1.0f, 11, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {1, 2, 8, 4, INFINITY, 1, 0, 0, 0, ATTN_E_BAD_ARGUMENT},
      {10, 2, 8, 4, INFINITY, 0, 0, 1, 0, ATTN_E_NULL_POINTER},
      {10, 2, 8, 4, INFINITY, 0, 0, 0, 1, ATTN_E_NULL_POINTER},
  };
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
    attn_selcache c, pristine;
    memset(&c, 0x3C, sizeof c);
    pristine = c;
    const attn_status st = attn_selcache_init(rows[r].null_cache ? NULL : &c, rows[r].cap, rows[r].h_kv, rows[r].d,
                                              rows[r].dv, rows[r].tau, rows[r].budget, rows[r].null_mem ? NULL : mem,
                                              rows[r].short_mem ? need - 1 : need);
    ck_assert_msg(st == rows[r].expect, "init row %zu: status %d, expected %d", r, (int)st, (int)rows[r].expect);
    tu_assert_same_bits("cache struct after a rejected init", &pristine, &c, sizeof c);
    for (size_t i = 0; i < need; ++i) ck_assert_msg(mem[i] == 0x5A, "init row %zu wrote memory byte %zu", r, i);
  }
  tu_assert_guards("cache memory", mem);
  /* memory not aligned for float: refused, nothing written */
  {
    unsigned char *odd = tu_alloc(need + 1, 0);
    memset(odd, 0x5A, need + 1);
    attn_selcache c, pristine;
    memset(&c, 0x3C, sizeof c);
    pristine = c;
    ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, INFINITY, 0, odd + 1, need), ATTN_E_BAD_ARGUMENT);
    tu_assert_same_bits("cache struct after a misaligned init", &pristine, &c, sizeof c);
    for (size_t i = 0; i <= need; ++i) ck_assert(odd[i] == 0x5A);
    tu_free(odd);
  }
  /* the largest budget, -inf and 0 as tau, and a 1-slot cache without budget are valid */
  attn_selcache c;
  ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, INFINITY, 9, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, -INFINITY, 2, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_init(&c, 10, 2, 8, 4, 0.0f, 0, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_init(&c, 1, 2, 8, 4, INFINITY, 0, mem, need), ATTN_OK);
  ck_assert_int_eq(attn_selcache_live_bytes(NULL, &bytes), ATTN_E_NULL_POINTER);
  ck_assert_int_eq(attn_selcache_live_bytes(&c, NULL), ATTN_E_NULL_POINTER);
  tu_free(mem);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Bad input of the cache: step, load, copy and workspace size. Each row runs against a cache    */
/* holding a prefill and a few steps (a budget: evictions happened); the call answers the row's  */
/* status and changes nothing: o, lse, the cache's struct and its memory keep their bytes.       */
/* ------------------------------------------------------------------------------------------ */
enum { CHQ = 4, CHKV = 2, CD = 8, CDV = 6, CSEL = 1, CCAP = 12, CBUDGET = 8, CPRE = 6, CSTEPS = 10 };

typedef enum cb_kind {
  CB_STEP_DESC_NULL,
  CB_STEP_CACHE_NULL,
  CB_STEP_Q_NULL,
  CB_STEP_K_NULL,
  CB_STEP_V_NULL,
  CB_STEP_O_NULL,
  CB_STEP_WS_NULL,
  CB_STEP_NQ_2,
  CB_STEP_NKV_2,
  CB_STEP_HKV_MISMATCH,
  CB_STEP_D_MISMATCH,
  CB_STEP_DV_MISMATCH,
  CB_STEP_HSEL,
  CB_STEP_SCALE_NAN,
  CB_STEP_WS_SMALL,
  CB_STEP_FULL,
  CB_STEP_O_IN_MEMORY,
  CB_STEP_LSE_IN_MEMORY,
  CB_STEP_WS_IN_MEMORY,
  CB_STEP_O_IS_Q,
  CB_LOAD_TOO_MANY,
  CB_LOAD_MISMATCH,
  CB_LOAD_K_NULL,
  CB_LOAD_F_NULL,
  CB_LOAD_F_IN_MEMORY,
  CB_COPY_NULL,
  CB_COPY_CAPACITY,
  CB_COPY_DV,
  CB_COPY_OVERLAP,
  CB_WS_MISMATCH
} cb_kind;

/* The step's arguments, which the step rows' edits change, and the objects the edits name: the
 * descriptor, the arguments, the cache memory (its start and its end) and the step's q row. The
 * other rows (load, copy, the workspace query) make their own calls. */
typedef struct sc_args {
  const attn_selective_desc *d;
  attn_selcache *c;
  const float *q, *k, *v;
  float *o, *lse;
  void *ws;
  size_t ws_size;
} sc_args;
enum { OB_D, OB_ARG, OB_MEM, OB_MEM_END, OB_Q, OB_N };
#define CB(f, s)          .fault = (f), .expect = (s), .desc_level = 0
#define SH(m, val)        TU_SET_Z(OB_D, attn_selective_desc, shape.m, val)
#define ARG_NUL(m)        TU_NUL(OB_ARG, sc_args, m)
#define ARG_PTR(m, to, k) TU_PTR(OB_ARG, sc_args, m, to, k)
static const tu_bad_case cb_cases[] = {
    {"step: desc NULL", CB(CB_STEP_DESC_NULL, ATTN_E_NULL_POINTER), {ARG_NUL(d)}},
    {"step: cache NULL", CB(CB_STEP_CACHE_NULL, ATTN_E_NULL_POINTER), {ARG_NUL(c)}},
    {"step: q NULL", CB(CB_STEP_Q_NULL, ATTN_E_NULL_POINTER), {ARG_NUL(q)}},
    {"step: k NULL", CB(CB_STEP_K_NULL, ATTN_E_NULL_POINTER), {ARG_NUL(k)}},
    {"step: v NULL", CB(CB_STEP_V_NULL, ATTN_E_NULL_POINTER), {ARG_NUL(v)}},
    {"step: o NULL", CB(CB_STEP_O_NULL, ATTN_E_NULL_POINTER), {ARG_NUL(o)}},
    {"step: workspace NULL", CB(CB_STEP_WS_NULL, ATTN_E_NULL_POINTER), {ARG_NUL(ws)}},
    {"step: n_q 2", CB(CB_STEP_NQ_2, ATTN_E_BAD_ARGUMENT), {SH(n_q, 2)}},
    {"step: n_kv 2", CB(CB_STEP_NKV_2, ATTN_E_BAD_ARGUMENT), {SH(n_kv, 2)}},
    /* h_kv 1: the same rows read as MQA */
    {"step: h_kv of the cache differs", CB(CB_STEP_HKV_MISMATCH, ATTN_E_STATE_MISMATCH), {SH(h_k, 1), SH(h_v, 1)}},
    {"step: d of the cache differs", CB(CB_STEP_D_MISMATCH, ATTN_E_STATE_MISMATCH), {SH(d, 2 * CD)}},
    {"step: dv of the cache differs", CB(CB_STEP_DV_MISMATCH, ATTN_E_STATE_MISMATCH), {SH(dv, CDV - 1)}},
    {"step: h_sel = h_q", CB(CB_STEP_HSEL, ATTN_E_BAD_HEADS), {TU_SET_Z(OB_D, attn_selective_desc, h_sel, CHQ)}},
    {"step: scale NaN", CB(CB_STEP_SCALE_NAN, ATTN_E_BAD_SCALE), {TU_SET_F(OB_D, attn_selective_desc, scale, NAN)}},
    {"step: workspace one byte short",
     CB(CB_STEP_WS_SMALL, ATTN_E_WORKSPACE_TOO_SMALL),
     {TU_ADD(OB_ARG, sc_args, ws_size, -1)}},
    {"step: cache full, no budget", CB(CB_STEP_FULL, ATTN_E_WORKSPACE_TOO_SMALL)},
    {"step: o inside the cache memory", CB(CB_STEP_O_IN_MEMORY, ATTN_E_ALIASING), {ARG_PTR(o, OB_MEM, 3)}},
    {"step: lse inside the cache memory", CB(CB_STEP_LSE_IN_MEMORY, ATTN_E_ALIASING), {ARG_PTR(lse, OB_MEM_END, -2)}},
    {"step: workspace overlaps the cache memory", CB(CB_STEP_WS_IN_MEMORY, ATTN_E_ALIASING), {ARG_PTR(ws, OB_MEM, 2)}},
    {"step: o is q", CB(CB_STEP_O_IS_Q, ATTN_E_ALIASING), {ARG_PTR(o, OB_Q, 0)}},
    {"load: more tokens than free slots", CB(CB_LOAD_TOO_MANY, ATTN_E_WORKSPACE_TOO_SMALL)},
    {"load: d of the cache differs", CB(CB_LOAD_MISMATCH, ATTN_E_STATE_MISMATCH)},
    {"load: k NULL", CB(CB_LOAD_K_NULL, ATTN_E_NULL_POINTER)},
    {"load: f NULL", CB(CB_LOAD_F_NULL, ATTN_E_NULL_POINTER)},
    {"load: f inside the cache memory", CB(CB_LOAD_F_IN_MEMORY, ATTN_E_ALIASING)},
    {"copy: src NULL", CB(CB_COPY_NULL, ATTN_E_NULL_POINTER)},
    {"copy: capacities differ", CB(CB_COPY_CAPACITY, ATTN_E_STATE_MISMATCH)},
    {"copy: dv differs", CB(CB_COPY_DV, ATTN_E_STATE_MISMATCH)},
    {"copy: memories overlap", CB(CB_COPY_OVERLAP, ATTN_E_ALIASING)},
    {"workspace size: d of the cache differs", CB(CB_WS_MISMATCH, ATTN_E_STATE_MISMATCH)},
};
#define CB_NCASES (sizeof cb_cases / sizeof cb_cases[0])

START_TEST(selcache_rejects_bad_input) {
  const tu_bad_case *c = &cb_cases[_i];
  tu_rng rng = tu_rng_of(4100 + (uint64_t)_i);
  const size_t n = CPRE + CSTEPS + CCAP + 1;
  tu_qkv x = tu_qkv_of(T, TU_DATA_UNIFORM, &rng, n, n, CHQ, CHKV, CHKV, 2 * CD, 2 * CDV);
  /* views of the first CD / CDV columns: a d = CD cache; the wider rows let a mismatched desc read */
  x.q.w = x.k.w = CD;
  x.v.w = CDV;
  const int full = c->fault == CB_STEP_FULL;
  sc_fix s;
  sc_fix_init(&s, full ? CPRE : CCAP, CHKV, CD, CDV, INFINITY, full ? 0 : CBUDGET, 0);
  float f[CPRE];
  sc_prefill_load(&s, &x, CPRE, CHQ, CHKV, CD, CDV, CSEL, f);
  attn_selective_desc d1;
  sel_desc(&d1, 1, 1, CHQ, CHKV, CD, CDV, CSEL);
  tu_tensor o, lse;
  tu_tensor_alloc(&o, T, 1, CHQ, CDV, 1);
  tu_tensor_alloc(&lse, T, 1, CHQ, 1, 1);
  for (size_t t = CPRE; !full && t < CPRE + CSTEPS; ++t)
    ck_assert_int_eq(sc_step_token(&d1, &s.c, &x, t, &o, &lse, 0), ATTN_OK);
  if (!full) ck_assert_uint_gt(s.c.evicted, 0);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  tu_tensor_alloc(&o, T, 1, CHQ, CDV, 1);
  tu_tensor_alloc(&lse, T, 1, CHQ, 1, 1);
  /* the call's arguments */
  const size_t t = s.c.tokens;
  const tu_tensor qv = tu_rows_view(&x.q, t, 1), kv = tu_rows_view(&x.k, t, 1), vv = tu_rows_view(&x.v, t, 1);
  attn_selective_desc d = d1;
  tu_shape_layouts(&d.shape, &qv, &kv, &vv, &o);
  size_t need = 0;
  ck_assert_int_eq(attn_selcache_workspace_size(&d, &s.c, &need), ATTN_OK);
  void *ws = tu_alloc(need + 64, 0);
  sc_args a = {&d, &s.c, qv.data, kv.data, vv.data, o.data, lse.data, ws, need};
  void *obj[OB_N] = {&d, &a, s.mem, (unsigned char *)s.mem + s.bytes, (void *)qv.data};
  tu_edits_apply(c->edit, TU_EDITS, obj, OB_N);
  if (full) ck_assert_uint_eq(s.c.live, s.c.capacity);
  /* a second cache (copy rows) and the state of both before the call */
  sc_fix other;
  memset(&other, 0, sizeof other);
  const attn_selcache before = s.c;
  unsigned char *mem_before = malloc(s.bytes);
  ck_assert_ptr_nonnull(mem_before);
  memcpy(mem_before, s.mem, s.bytes);
  attn_status st = ATTN_OK;
  switch ((cb_kind)c->fault) {
    case CB_LOAD_TOO_MANY:
    case CB_LOAD_MISMATCH:
    case CB_LOAD_K_NULL:
    case CB_LOAD_F_NULL:
    case CB_LOAD_F_IN_MEMORY: {
      const size_t nl = c->fault == CB_LOAD_TOO_MANY ? s.c.capacity - s.c.live + 1 : 2;
      attn_selective_desc dl;
      sel_desc(&dl, nl, nl, CHQ, CHKV, c->fault == CB_LOAD_MISMATCH ? 2 * CD : CD, CDV, CSEL);
      const tu_tensor kl = tu_rows_view(&x.k, t, nl), vl = tu_rows_view(&x.v, t, nl);
      dl.shape.k = kl.l;
      dl.shape.v = vl.l;
      float fl[CCAP + 1] = {0};
      const float *fp = c->fault == CB_LOAD_F_NULL ? NULL : c->fault == CB_LOAD_F_IN_MEMORY ? (const float *)s.mem : fl;
      st = attn_selcache_load(&s.c, &dl, c->fault == CB_LOAD_K_NULL ? NULL : kl.data, vl.data, fp);
      break;
    }
    case CB_COPY_NULL:
      st = attn_selcache_copy(&s.c, NULL);
      break;
    case CB_COPY_CAPACITY:
    case CB_COPY_DV:
      sc_fix_init(&other, c->fault == CB_COPY_CAPACITY ? CCAP + 1 : CCAP, CHKV, CD,
                  c->fault == CB_COPY_DV ? CDV + 1 : CDV, INFINITY, 0, 0);
      st = attn_selcache_copy(&s.c, &other.c);
      break;
    case CB_COPY_OVERLAP: { /* a source cache whose memory starts inside s's */
      attn_selcache src = s.c;
      src.memory = (unsigned char *)s.mem + 4;
      src.live = 0;
      st = attn_selcache_copy(&s.c, &src);
      break;
    }
    case CB_WS_MISMATCH: {
      size_t bytes = 4242;
      d.shape.d = 2 * CD;
      st = attn_selcache_workspace_size(&d, &s.c, &bytes);
      ck_assert_uint_eq(bytes, 4242);
      break;
    }
    default:
      st = attn_selcache_step(a.d, a.c, a.q, a.k, a.v, a.o, a.lse, a.ws, a.ws_size);
      break;
  }
  ck_assert_msg(st == c->expect, "%s: status %d (%s), expected %d (%s)", c->name, (int)st, attn_status_string(st),
                (int)c->expect, attn_status_string(c->expect));
  tu_assert_same_bits("cache struct after a rejected call", &before, &s.c, sizeof before);
  tu_assert_same_bits("cache memory after a rejected call", mem_before, s.mem, s.bytes);
  tu_tensor pristine;
  tu_tensor_alloc(&pristine, T, 1, CHQ, CDV, 1);
  tu_assert_same_bits("o after a rejected call", pristine.data, o.data, sizeof(float) * o.span);
  tu_assert_same_bits("lse after a rejected call", pristine.data, lse.data, sizeof(float) * lse.span);
  tu_assert_guards("workspace", ws);
  tu_qkv_assert_unchanged(&x);
  tu_tensor_free(&pristine);
  if (other.mem) sc_fix_free(&other);
  free(mem_before);
  tu_free(ws);
  tu_tensor_free(&o);
  tu_tensor_free(&lse);
  sc_fix_free(&s);
  tu_qkv_free(&x);
}
END_TEST

/* clang-format off */
TU_MAIN(
  {"cache", selcache_unpruned_equals_selective, (int)UNP_NCASES}, {"cache", selcache_load_in_two_pieces, 1},
    {"cache", selcache_policy_matches_simulation, (int)POL_NCASES}, {"cache", selcache_copy_and_restore, 1},
    {"cache", selcache_nan_f_ranks_last, 1},
  {"api", selcache_size_and_init, 1},
  {"bad_input", selcache_rejects_bad_input, (int)CB_NCASES},
  selcache_batch_row(0), selcache_batch_row(1))
/* clang-format on */
