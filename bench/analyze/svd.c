/* Singular values through LAPACK's dgesdd (Debian: OpenBLAS or the reference liblapack), and the
 * numerical rank #{sigma_k > tol * sigma_max} of spec 7. */
#include <stdlib.h>

#include "analyze.h"

/* The Fortran symbol, with gfortran's hidden length of the character argument. */
void dgesdd_(const char *jobz, const int *m, const int *n, double *a, const int *lda, double *s, double *u,
             const int *ldu, double *vt, const int *ldvt, double *work, const int *lwork, int *iwork, int *info,
             size_t jobz_len);

#ifdef ANALYZE_OPENBLAS
void openblas_set_num_threads(int n);
void an_lapack_single_thread(void) { openblas_set_num_threads(1); }
#else
void an_lapack_single_thread(void) {}
#endif

/* Singular values do not depend on transposition: the row-major matrix is passed as its
 * column-major transpose. */
int an_svd(size_t rows, size_t cols, double *a, double *sv) {
  const int m = (int)cols, n = (int)rows, one = 1, query = -1;
  int info = 0, k = m < n ? m : n, *iwork = malloc(8 * (size_t)k * sizeof *iwork);
  double wsize = 0, dummy = 0;
  if (!iwork) return -1;
  dgesdd_("N", &m, &n, a, &m, sv, &dummy, &one, &dummy, &one, &wsize, &query, iwork, &info, 1);
  int lwork = (int)wsize + 1;
  double *work = info == 0 ? malloc((size_t)lwork * sizeof *work) : NULL;
  if (work) dgesdd_("N", &m, &n, a, &m, sv, &dummy, &one, &dummy, &one, work, &lwork, iwork, &info, 1);
  int ok = work && info == 0;
  free(work);
  free(iwork);
  return ok ? 0 : -1;
}

size_t an_rank(const double *sv, size_t k, double tol) {
  size_t r = 0;
  while (r < k && sv[r] > tol * sv[0]) r++;
  return r;
}

long an_rank_f32(const float *a, size_t rows, size_t cols, size_t ld, double tol, double tol2, long *rank2) {
  size_t k = rows < cols ? rows : cols;
  double *x = malloc(rows * cols * sizeof *x), *sv = malloc(k * sizeof *sv);
  long r = -1;
  if (x && sv) {
    for (size_t i = 0; i < rows; i++)
      for (size_t j = 0; j < cols; j++) x[i * cols + j] = a[i * ld + j];
    if (an_svd(rows, cols, x, sv) == 0) {
      r = (long)an_rank(sv, k, tol);
      if (rank2) *rank2 = tol2 > 0 ? (long)an_rank(sv, k, tol2) : -1;
    }
  }
  free(x);
  free(sv);
  return r;
}
