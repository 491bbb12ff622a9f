// rows_times_matrix's AVX-512 tiles (rows_matrix_avx512.cpp). Internal to src/kernels.
#pragma once
#include <cstdint>

namespace ouro {

// Columns [0, m - m % 64) of rows_times_matrix in tiles of 4 rows x 64 columns (16 zmm
// accumulators; a row left over alone); returns m - m % 64, the columns done.
int64_t rows_times_matrix_avx512(const float* x, int64_t n, int64_t ldx, int k, const float* w, int64_t m, float* y,
                                 int64_t ldy);

}  // namespace ouro
