/* Decay and gates (engine/chunkwise.h): a chunk's cumulative log gates and, from them, the row
 * scales of its absorb, its state product and its intra weights. */
#include "engine/chunkwise/internal.h"

/* cur = prev + g, m doubles (g floats), in a function of its own so that the loop vectorises
 * (GCC did not along b's rows, m doubles apart, without knowing m). */
static void cw_sum_row(size_t m, double *restrict cur, const double *restrict prev, const float *restrict g) {
  for (size_t f = 0; f < m; f++) cur[f] = prev[f] + g[f];
}

/* The decay quantities of the chunk of keys j0 .. j0+cn: b (inclusive cumulative log gates, in
 * double: differences of sums of up to C terms keep their precision), and from it din, dout, dc
 * and (for the outputs) wt (scalar gate, or beta alone with b = 0), or dout and (for the absorb)
 * dc (per-feature gate; the absorb takes its key factors from b). The same values whatever `uses`
 * adds. */
void attn_cw_gates(const cw_ctx *x, size_t j0, size_t cn, int uses) {
  const attn_chunkwise_plan *p = x->p;
  const attn_chunkwise_gates *g = &p->g;
  const size_t m = p->m, grs = g->layout.row_stride, brs = g->blayout.row_stride;
  const float *lg = x->io->log_gate ? x->io->log_gate + j0 * grs + x->hg * g->layout.head_stride : NULL;
  const float *bt = g->beta ? x->io->beta + j0 * brs + x->hg * g->blayout.head_stride : NULL;
  double *b = x->b;
  if (g->kind == ATTN_GATE_FEATURE) {
    for (size_t f = 0; !(uses & CW_B_KEPT) && f < m; f++) b[f] = lg[f];
    for (size_t c = 1; !(uses & CW_B_KEPT) && c < cn; c++) cw_sum_row(m, b + c * m, b + (c - 1) * m, lg + c * grs);
    /* beta: the intra part's and the absorb's row factors */
    for (size_t c = 0; c < cn; c++) x->dout[c] = bt ? bt[c * brs] : 1.0f;
    if (!(uses & CW_FOR_ABSORB)) return;
    /* dC = exp(B_last) (the keys' exp(B_last - B) is attn_cw_absorb_to's, the queries' exp(B)
     * cw_query_feature's) */
    x->uk->gate_exp(1, m, b + (cn - 1) * m, m, NULL, 0, NULL, 0, x->dc, m);
    return;
  }
  for (size_t c = 0; c < cn; c++) b[c] = (c ? b[c - 1] : 0.0) + (lg ? lg[c * grs] : 0.0f);
  const int factored = (uses & CW_FOR_QUERY) && cw_factored(x, cn);
  /* One gate for every token (grs 0: RetNet's fixed decay), or none: wt[j][i] depends on i - j
   * alone, so row 0's exps serve every row (b_i - b_j taken as b_(i-j) - b_0). */
  const int toeplitz = !lg || grs == 0;
  for (size_t j = 0; (uses & CW_FOR_QUERY) && !factored && j < cn; j++) { /* wt[j][i] = beta_j exp(b_i - b_j), i >= j */
    float *row = x->wt + j * cn;
    if (toeplitz && j) {
      memcpy(row + j, x->wt, (cn - j) * sizeof(float));
    } else {
      for (size_t i = j; i < cn; i++) row[i] = (float)(b[i] - b[j]);
      x->uk->vexp(cn - j, row + j, row + j);
    }
  }
  for (size_t j = 0; (uses & CW_FOR_QUERY) && !factored && bt && j < cn; j++) /* after the copies of row 0 */
    for (size_t i = j; i < cn; i++) x->wt[j * cn + i] *= bt[j * brs];
  /* din = exp(b), dout = beta exp(b_last - b), through the path's vector exp (not libm's expf,
   * two calls per token) */
  for (size_t c = 0; c < cn; c++) x->din[c] = (float)b[c], x->dout[c] = (float)(b[cn - 1] - b[c]);
  x->uk->vexp(cn, x->din, x->din);
  x->uk->vexp(cn, x->dout, x->dout);
  for (size_t c = 0; bt && c < cn; c++) x->dout[c] *= bt[c * brs];
  for (size_t f = 0; f < m; f++) x->dc[f] = x->din[cn - 1];
  if (factored) { /* g_i = exp(b_i - b_last) in wt[0, cn), the intra weights' column factors */
    float *g = x->wt;
    for (size_t c = 0; c < cn; c++) g[c] = (float)(b[c] - b[cn - 1]);
    x->uk->vexp(cn, g, g);
  }
}
