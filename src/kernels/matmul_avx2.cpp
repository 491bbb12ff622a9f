// AVX2 kernels (the baseline ISA), maddubs/madd integer dots. Q4 and W8A8: one row quad against
// one or two tokens per pass, two blocks per step. Q8: 16 rows (two halves of 8) against up to two
// tokens, whole-block integer dots. See matmul.h for the layouts.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/simd_avx2.h"

namespace ouro {
namespace {


inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

template <bool kF32>
inline __m256 load8(const uint8_t* p) {
  if constexpr (kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Q4: one quad of rows against T tokens starting at t0; writes rows [lo, hi) of the quad.
template <bool kF32, int T>
void quad(const PackedMatrix& W, const QuantActs& A, int64_t g, int64_t t0, int lo, int hi, float* Y, int64_t ldy) {
  __m256 acc[4][T], cacc[T];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int t = 0; t < T; ++t) cacc[t] = _mm256_setzero_ps();
  const size_t sb = kF32 ? 32 : 16;
  for (int64_t j = 0; j < W.nsteps; ++j) {
    const uint8_t* st = W.step(g, j);
    alignas(32) float d8[8];
    _mm256_store_ps(d8, load8<kF32>(st + W.value_bytes()));
    const __m256 c8 = load8<kF32>(st + W.value_bytes() + sb);
    for (int t = 0; t < T; ++t) {
      const __m256 s2 = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(A.s.data() + (t0 + t) * A.nb + 2 * j)));
      cacc[t] = _mm256_fmadd_ps(c8, s2, cacc[t]);
    }
    for (int r = 0; r < 4; ++r) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st + 32 * r));
      const __m256i w0 = _mm256_and_si256(raw, _mm256_set1_epi8(0x0f));
      const __m256i w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0f));
      for (int t = 0; t < T; ++t) {
        const int8_t* a = A.qs.data() + (t0 + t) * A.cols_pad + 64 * j;
        const float* da = A.d.data() + (t0 + t) * A.nb + 2 * j;
        const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
        const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32));
        const __m256i p0 = dot_u8s8(w0, a0), p1 = dot_u8s8(w1, a1);
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d8[2 * r] * da[0]), acc[r][t]);
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(d8[2 * r + 1] * da[1]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(32) float cc[8];
    _mm256_store_ps(cc, cacc[t]);
    for (int r = lo; r < hi; ++r)
      Y[(t0 + t) * ldy + g * 4 + r] = hsum256(acc[r][t]) + (cc[2 * r] + cc[2 * r + 1]);
  }
}

// Runs pass<T>(g, t0, lo, hi) over the row groups of [r0, r1) (lo, hi: the group's rows to
// write) and all tokens, two tokens at a time.
template <typename Pass>
void drive(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, Pass&& pass) {
  const int64_t n = W.group_rows;
  for (int64_t g = r0 / n; g * n < r1; ++g) {
    const int lo = (int)std::max<int64_t>(0, r0 - g * n);
    const int hi = (int)std::min<int64_t>({n, r1 - g * n, W.rows - g * n});
    int64_t t = 0;
    for (; t + 2 <= A.T; t += 2) pass.template operator()<2>(g, t, lo, hi);
    if (t < A.T) pass.template operator()<1>(g, t, lo, hi);
  }
}

template <bool kF32>
void gemm(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  drive(W, A, r0, r1, [&]<int T>(int64_t g, int64_t t, int lo, int hi) { quad<kF32, T>(W, A, g, t, lo, hi, Y, ldy); });
}

// Q8_0 in groups of 16 rows (matmul.h): T tokens against group g; writes rows [lo, hi) of it.
// Per block and half, 8 maddubs/madd dots of the signed weights (abs/sign keeps maddubs from
// saturating) with the token's 4 activation bytes broadcast give 8 rows' whole-block dots in
// int32, then acc += dot * (d_w * d_a) in one FMA: the same bits as the AVX-512 and scalar kernels.
template <int T>
void group16(const PackedMatrix& W, const QuantActs& A, int64_t g, int64_t t0, int lo, int hi, float* Y, int64_t ldy) {
  __m256 acc[2][T];
#pragma GCC unroll 8
  for (int q = 0; q < 2; ++q)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[q][t] = _mm256_setzero_ps();
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  const int8_t* arow[T];
  const float* da[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    arow[t] = A.qs.data() + (t0 + t) * A.cols_pad;
    da[t] = A.d.data() + (t0 + t) * A.nb;
  }
  const uint8_t* st = W.step(g, 0);
  for (int64_t j = 0; j < W.nsteps; ++j, st += W.step_bytes) {
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * j + h;
#pragma GCC unroll 8
      for (int q = 0; q < 2; ++q) {
        __m256i dot[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          const __m256i ws = _mm256_xor_si256(
              _mm256_load_si256(reinterpret_cast<const __m256i*>(st + 512 * h + 64 * v + 32 * q)), flip);
          const __m256i wa = _mm256_sign_epi8(ws, ws);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            int32_t a4;
            std::memcpy(&a4, arow[t] + 32 * b + 4 * v, 4);
            dot[t] = _mm256_add_epi32(dot[t], dot_u8s8(wa, _mm256_sign_epi8(_mm256_set1_epi32(a4), ws)));
          }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(st + 1024 + 32 * h + 16 * q)));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          acc[q][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]), _mm256_mul_ps(dw, _mm256_set1_ps(da[t][b])), acc[q][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    float* out = Y + (t0 + t) * ldy + g * 16;
    if (lo == 0 && hi == 16) {
      _mm256_storeu_ps(out, acc[0][t]);
      _mm256_storeu_ps(out + 8, acc[1][t]);
    } else {
      alignas(32) float y[16];
      _mm256_store_ps(y, acc[0][t]);
      _mm256_store_ps(y + 8, acc[1][t]);
      for (int r = lo; r < hi; ++r) out[r] = y[r];
    }
  }
}

void gemm_q8(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  drive(W, A, r0, r1, [&]<int T>(int64_t g, int64_t t, int lo, int hi) { group16<T>(W, A, g, t, lo, hi, Y, ldy); });
}

// W8A8: signed weights and activations; maddubs needs an unsigned operand, so it multiplies
// |a| by w carrying a's sign (both within +-127: no 16-bit saturation), as llama.cpp does.
template <int T>
void quad_w8(const PackedMatrix& W, const QuantActs& A, int64_t g, int64_t t0, int lo, int hi, float* Y, int64_t ldy) {
  __m256i acc[4][T];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* arow[T];
  for (int t = 0; t < T; ++t) arow[t] = A.qs.data() + (t0 + t) * A.cols_pad;
  const uint8_t* st = W.step(g, 0);
  for (int64_t j = 0; j < W.nsteps; ++j, st += W.step_bytes) {
    for (int h = 0; h < 2; ++h) {
      __m256i w[4];
      for (int r = 0; r < 4; ++r) w[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st + 64 * r + 32 * h));
      for (int t = 0; t < T; ++t) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(arow[t] + 64 * j + 32 * h));
        const __m256i au = _mm256_sign_epi8(a, a);
        for (int r = 0; r < 4; ++r) {
          const __m256i p16 = _mm256_maddubs_epi16(au, _mm256_sign_epi8(w[r], a));
          acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(p16, ones));
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = lo; r < hi; ++r) {
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc[r][t]), _mm256_extracti128_si256(acc[r][t], 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
      Y[(t0 + t) * ldy + g * 4 + r] = (float)_mm_cvtsi128_si32(s) * (W.rscale[g * 4 + r] * A.td[t0 + t]);
    }
}

void gemm_w8(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  drive(W, A, r0, r1, [&]<int T>(int64_t g, int64_t t, int lo, int hi) { quad_w8<T>(W, A, g, t, lo, hi, Y, ldy); });
}

void gemm_q4(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  if (W.f32_scales) gemm<true>(W, A, r0, r1, Y, ldy);
  else gemm<false>(W, A, r0, r1, Y, ldy);
}

}  // namespace

const MatmulKernels& matmul_kernels_avx2() {
  static const MatmulKernels k{gemm_q4, gemm_q8, gemm_w8};
  return k;
}

}  // namespace ouro
