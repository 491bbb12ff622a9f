// rows_times_matrix_avx512 (rows_matrix_avx512.h): each zmm lane is one output's chain of fused
// multiply-adds in l's order, the same chain as the AVX2 and scalar paths (rows_matrix.cpp).
#include "kernels/rows_matrix_avx512.h"

#include <immintrin.h>

#include "kernels/avx512_warnings.h"

namespace ouro {

namespace {

template <int R>
inline void tile(const float* x, int64_t ldx, int k, const float* w, int64_t m, float* y, int64_t ldy, int64_t j0,
                 int64_t c) {
  __m512 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int l = 0; l < k; ++l) {
    const float* wl = w + (int64_t)l * m + c;
    const __m512 w0 = _mm512_loadu_ps(wl), w1 = _mm512_loadu_ps(wl + 16), w2 = _mm512_loadu_ps(wl + 32),
                 w3 = _mm512_loadu_ps(wl + 48);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[(j0 + r) * ldx + l]);
      acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(xb, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(xb, w3, acc[r][3]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(y + (j0 + r) * ldy + c + 16 * v, acc[r][v]);
}

}  // namespace

int64_t rows_times_matrix_avx512(const float* x, int64_t n, int64_t ldx, int k, const float* w, int64_t m, float* y,
                                 int64_t ldy) {
  const int64_t c64 = m / 64 * 64;
  for (int64_t c = 0; c < c64; c += 64) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) tile<4>(x, ldx, k, w, m, y, ldy, j, c);
    for (; j < n; ++j) tile<1>(x, ldx, k, w, m, y, ldy, j, c);
  }
  return c64;
}

}  // namespace ouro
