// rows_times_matrix (ops.h): tiles of 4 rows x 16 columns in AVX2 registers, or 4 x 64 in AVX-512
// ones (rows_matrix_avx512.cpp), a row or column left over done one at a time. Every output is
// std::fma(x[l], w[l][c], acc) for l = 0, 1, ... from acc = 0 in every path, so the paths agree bit
// for bit.
#include <immintrin.h>

#include <cmath>

#include "core/cpu.h"
#include "kernels/ops.h"
#include "kernels/rows_matrix_avx512.h"

namespace ouro {

namespace {

// Rows [j0, j0 + R) x columns [c, c + 16).
template <int R>
inline void tile_avx2(const float* x, int64_t ldx, int k, const float* w, int64_t m, float* y, int64_t ldy,
                      int64_t j0, int64_t c) {
  __m256 acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int l = 0; l < k; ++l) {
    const __m256 w0 = _mm256_loadu_ps(w + (int64_t)l * m + c), w1 = _mm256_loadu_ps(w + (int64_t)l * m + c + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_broadcast_ss(x + (j0 + r) * ldx + l);
      acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(y + (j0 + r) * ldy + c, acc[r][0]);
    _mm256_storeu_ps(y + (j0 + r) * ldy + c + 8, acc[r][1]);
  }
}

void one(const float* x, int64_t ldx, int k, const float* w, int64_t m, float* y, int64_t ldy, int64_t j, int64_t c) {
  float acc = 0.0f;
  for (int l = 0; l < k; ++l) acc = std::fma(x[j * ldx + l], w[(int64_t)l * m + c], acc);
  y[j * ldy + c] = acc;
}

}  // namespace

void rows_times_matrix(const float* x, int64_t n, int64_t ldx, int k, const float* w, int64_t m, float* y,
                       int64_t ldy, Isa isa) {
  if (isa == Isa::kScalar) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < m; ++c) one(x, ldx, k, w, m, y, ldy, j, c);
    return;
  }
  int64_t c0 = 0;  // columns [0, c0) done in AVX-512 registers
  if (isa == Isa::kAvx512 && cpu_supports(Isa::kAvx512)) c0 = rows_times_matrix_avx512(x, n, ldx, k, w, m, y, ldy);
  const int64_t c16 = c0 + (m - c0) / 16 * 16;
  for (int64_t c = c0; c < c16; c += 16) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) tile_avx2<4>(x, ldx, k, w, m, y, ldy, j, c);
    for (; j < n; ++j) tile_avx2<1>(x, ldx, k, w, m, y, ldy, j, c);
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = c16; c < m; ++c) one(x, ldx, k, w, m, y, ldy, j, c);
}

}  // namespace ouro
