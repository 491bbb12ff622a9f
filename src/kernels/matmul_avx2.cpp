// AVX2 kernels (the baseline ISA), maddubs/madd integer dots. Q4 and Q8: 16 rows (two halves of 8)
// against up to two tokens per pass, whole-block integer dots. W8A8: one row quad against up to
// two tokens, two blocks per step. See matmul.h for the layouts.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul.h"

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

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
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

// Q4 and Q8_0 in groups of 16 rows (matmul.h): T tokens against group g; writes rows [lo, hi) of
// the group. Per block and half (8 rows), maddubs/madd dots with the token's 4 activation bytes
// broadcast give 8 rows' whole-block dots in int32 (Q8: 8 vectors of signed weights, abs/sign
// keeping maddubs from saturating; Q4: 4 vectors of nibbles, low then high), then the float step
// in one FMA each as the scalar reference (the same bits): acc += dot * (d_w * d_a), and for Q4
// acc += c_w * s_a.
template <bool kQ4, bool kF32, int T>
void group16(const PackedMatrix& W, const QuantActs& A, int64_t g, int64_t t0, int lo, int hi, float* Y, int64_t ldy) {
  constexpr size_t kSz = kF32 ? 4 : 2;
  __m256 acc[2][T];
#pragma GCC unroll 8
  for (int q = 0; q < 2; ++q)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[q][t] = _mm256_setzero_ps();
  const __m256i flip = _mm256_set1_epi8((char)0x80), nib = _mm256_set1_epi8(0x0f);
  const int8_t* arow[T];
  const float* da[T];
  const float* sa[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    arow[t] = A.qs.data() + (t0 + t) * A.cols_pad;
    da[t] = A.d.data() + (t0 + t) * A.nb;
    sa[t] = A.s.data() + (t0 + t) * A.nb;
  }
  const size_t vb = W.value_bytes();
  const uint8_t* st = W.step(g, 0);
  for (int64_t j = 0; j < W.nsteps; ++j, st += W.step_bytes) {
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * j + h;
      const uint8_t* wv = st + vb / 2 * h;
#pragma GCC unroll 8
      for (int q = 0; q < 2; ++q) {
        __m256i dot[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
        if constexpr (kQ4) {
#pragma GCC unroll 8
          for (int v = 0; v < 4; ++v) {
            const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(wv + 64 * v + 32 * q));
            const __m256i wl = _mm256_and_si256(x, nib), wh = _mm256_and_si256(_mm256_srli_epi16(x, 4), nib);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t)
              dot[t] = _mm256_add_epi32(dot[t], _mm256_add_epi32(dot_u8s8(wl, bcast4(arow[t] + 32 * b + 8 * v)),
                                                                 dot_u8s8(wh, bcast4(arow[t] + 32 * b + 8 * v + 4))));
          }
        } else {
#pragma GCC unroll 8
          for (int v = 0; v < 8; ++v) {
            const __m256i ws = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(wv + 64 * v + 32 * q)), flip);
            const __m256i wa = _mm256_sign_epi8(ws, ws);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t)
              dot[t] = _mm256_add_epi32(dot[t], dot_u8s8(wa, _mm256_sign_epi8(bcast4(arow[t] + 32 * b + 4 * v), ws)));
          }
        }
        const uint8_t* sc = st + vb + ((kQ4 ? 2 * h : h) * 16 + 8 * q) * kSz;  // d of block b, rows 8q..8q+7
        const __m256 dw = load8<kF32>(sc);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          acc[q][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]), _mm256_mul_ps(dw, _mm256_set1_ps(da[t][b])), acc[q][t]);
        if constexpr (kQ4) {
          const __m256 cw = load8<kF32>(sc + 16 * kSz);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) acc[q][t] = _mm256_fmadd_ps(cw, _mm256_set1_ps(sa[t][b]), acc[q][t]);
        }
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

template <bool kQ4, bool kF32>
void gemm16(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  drive(W, A, r0, r1, [&]<int T>(int64_t g, int64_t t, int lo, int hi) { group16<kQ4, kF32, T>(W, A, g, t, lo, hi, Y, ldy); });
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
  if (W.f32_scales) gemm16<true, true>(W, A, r0, r1, Y, ldy);
  else gemm16<true, false>(W, A, r0, r1, Y, ldy);
}

}  // namespace

const MatmulKernels& matmul_kernels_avx2() {
  static const MatmulKernels k{gemm_q4, gemm16<false, false>, gemm_w8};
  return k;
}

}  // namespace ouro
