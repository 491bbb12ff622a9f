// AVX-512 VNNI kernels: tiles of R rows x T tokens, two 32-element blocks per 512-bit step,
// vpdpbusd (u8 x s8 -> s32) dots; per-block scales applied in float. See matmul.h for layouts.
#include <immintrin.h>

#include <algorithm>

#include "kernels/matmul.h"

namespace ouro {
namespace {

// [x[0] x8 | x[1] x8]: the scales of two consecutive blocks, spread over their 8 lanes each.
inline __m512 spread2(const float* x) {
  const __m512 v = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(x))));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), v);
}

inline float cterm(const float* c, const float* s, int64_t nb) {
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 16 <= nb; b += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(c + b), _mm512_loadu_ps(s + b), acc);
  if (b < nb) {
    const __mmask16 m = (__mmask16)((1u << (nb - b)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c + b), _mm512_maskz_loadu_ps(m, s + b), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

template <bool kIsQ4>
inline __m512i load_w(const uint8_t* row, int64_t j) {
  if constexpr (kIsQ4) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * j));
    const __m256i mask = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(raw, mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  } else {
    return _mm512_loadu_si512(row + 64 * j);
  }
}

template <bool kIsQ4, int R, int T>
void tile(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t t0, float* Y, int64_t ldy) {
  __m512 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* wrow[R];
  const float* dw[R];
  for (int r = 0; r < R; ++r) { wrow[r] = W.qrow(r0 + r); dw[r] = W.drow(r0 + r); }
  const int8_t* arow[T];
  const float* da[T];
  for (int t = 0; t < T; ++t) { arow[t] = A.qs.data() + (t0 + t) * A.cols_pad; da[t] = A.d.data() + (t0 + t) * A.nb; }

  for (int64_t j = 0; j < W.nb / 2; ++j) {
    __m512i w[R];
    __m512 sw[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) { w[r] = load_w<kIsQ4>(wrow[r], j); sw[r] = spread2(dw[r] + 2 * j); }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m512i a = _mm512_loadu_si512(arow[t] + 64 * j);
      const __m512 sa = spread2(da[t] + 2 * j);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r], a);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sw[r], sa), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      Y[(t0 + t) * ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][t]) +
                                   cterm(W.crow(r0 + r), A.s.data() + (t0 + t) * A.nb, W.nb);
}


template <bool kIsQ4>
void gemm(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  // Token chunks keep the activations of a chunk hot in L1/L2 while the rows stream through.
  constexpr int64_t kTokChunk = 64;
  for (int64_t tc = 0; tc < A.T; tc += kTokChunk) {
    const int64_t tn = std::min(kTokChunk, A.T - tc);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      int64_t t = tc;
      for (; t + 4 <= tc + tn; t += 4) tile<kIsQ4, 4, 4>(W, A, r, t, Y, ldy);
      for (; t < tc + tn; ++t) tile<kIsQ4, 4, 1>(W, A, r, t, Y, ldy);
    }
    for (; r < r1; ++r) {
      int64_t t = tc;
      for (; t + 4 <= tc + tn; t += 4) tile<kIsQ4, 1, 4>(W, A, r, t, Y, ldy);
      for (; t < tc + tn; ++t) tile<kIsQ4, 1, 1>(W, A, r, t, Y, ldy);
    }
  }
}

}  // namespace

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels k{gemm<true>, gemm<false>};
  return k;
}

}  // namespace ouro
