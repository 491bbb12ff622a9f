// AVX2 kernels (the baseline ISA): two blocks per step, maddubs/madd integer dots.
#include <immintrin.h>

#include "kernels/matmul.h"

namespace ouro {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum over blocks of c[b] * s[b] (the Q4 min/offset term).
inline float cterm(const float* c, const float* s, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(c + b), _mm256_loadu_ps(s + b), acc);
  float r = hsum256(acc);
  for (; b < nb; ++b) r += c[b] * s[b];
  return r;
}

inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// One row against T tokens (T <= 4), Q4 layout.
template <int T>
void row_q4(const PackedMatrix& W, const QuantActs& A, int64_t r, int64_t t0, float* Y, int64_t ldy) {
  const uint8_t* w = W.qrow(r);
  const float* dw = W.drow(r);
  const __m256i mask = _mm256_set1_epi8(0x0f);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t j = 0; j < W.nb / 2; ++j) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * j));
    const __m256i lo = _mm256_and_si256(raw, mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
    for (int t = 0; t < T; ++t) {
      const int8_t* a = A.qs.data() + (t0 + t) * A.cols_pad + 64 * j;
      const float* da = A.d.data() + (t0 + t) * A.nb + 2 * j;
      const __m256i p0 = dot_u8s8(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
      const __m256i p1 = dot_u8s8(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(dw[2 * j] * da[0]), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(dw[2 * j + 1] * da[1]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t)
    Y[(t0 + t) * ldy + r] = hsum256(acc[t]) + cterm(W.crow(r), A.s.data() + (t0 + t) * A.nb, W.nb);
}

// One row against T tokens, Q8 layout, computed signed (abs/sign trick keeps maddubs from saturating).
template <int T>
void row_q8(const PackedMatrix& W, const QuantActs& A, int64_t r, int64_t t0, float* Y, int64_t ldy) {
  const uint8_t* w = W.qrow(r);
  const float* dw = W.drow(r);
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < W.nb; ++b) {
    const __m256i s = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * b)), flip);
    const __m256i as = _mm256_sign_epi8(s, s);
    for (int t = 0; t < T; ++t) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(A.qs.data() + (t0 + t) * A.cols_pad + 32 * b));
      const __m256i p = dot_u8s8(as, _mm256_sign_epi8(a, s));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[b] * A.d[(t0 + t) * A.nb + b]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) Y[(t0 + t) * ldy + r] = hsum256(acc[t]);
}

template <template <int> class Row>
void gemm(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t t = 0;
    for (; t + 4 <= A.T; t += 4) Row<4>::run(W, A, r, t, Y, ldy);
    switch (A.T - t) {
      case 3: Row<3>::run(W, A, r, t, Y, ldy); break;
      case 2: Row<2>::run(W, A, r, t, Y, ldy); break;
      case 1: Row<1>::run(W, A, r, t, Y, ldy); break;
      default: break;
    }
  }
}

template <int T> struct RowQ4 { static void run(const PackedMatrix& W, const QuantActs& A, int64_t r, int64_t t, float* Y, int64_t ldy) { row_q4<T>(W, A, r, t, Y, ldy); } };
template <int T> struct RowQ8 { static void run(const PackedMatrix& W, const QuantActs& A, int64_t r, int64_t t, float* Y, int64_t ldy) { row_q8<T>(W, A, r, t, Y, ldy); } };

}  // namespace

const MatmulKernels& matmul_kernels_avx2() {
  static const MatmulKernels k{gemm<RowQ4>, gemm<RowQ8>};
  return k;
}

}  // namespace ouro
