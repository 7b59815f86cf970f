/* avx2 path: rows element-wise, their copy and against a vector of columns (src/simd/rows_tmpl.h). */
#include "simd/vf_avx2.h"
#define ATTN_ROWS_AXPBY_NAME attn_f32_rows_axpby_ukernel__avx2
#define ATTN_ROWS_COPY_NAME  attn_f32_rows_copy_ukernel__avx2
#define ATTN_ROWS_COLS_NAME  attn_f32_rows_cols_ukernel__avx2
#include "simd/rows_tmpl.h"
