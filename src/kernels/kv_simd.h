// The KV cache's row loads and dot products in 256-bit vectors (kernels/ops.cpp's attention): every
// KV type's values as floats, and four keys' sums in one transpose. Shared by ops.cpp (AVX2) and
// attend_avx512.cpp, which runs the same 256-bit arithmetic in AVX-512's 32 registers; an
// anonymous namespace keeps each file's copy (compiled for its own ISA) its own.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/kv_types.h"
#include "kernels/ops.h"

namespace ouro {
namespace {

// E4M3 codes (in the low bytes of 16-bit lanes) as IEEE half bits: the sign stays at bit 15 and
// eeee.mmm moves to bits 13..7, so a half reads value * 2^-8 (its bias is 8 more; the 256 is folded
// into the scale by kv_scale_of), subnormals included. E4M3's NaN (s.1111.111) would read as 480:
// it becomes a half NaN.
inline __m256i fp8_to_half16(__m256i b) {
  __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b, 8), 1), _mm256_set1_epi16((short)0xbfff));
  const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
  return _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7e00)));
}

// 8 consecutive values of a row as floats, before the row's scale.
template <KvType T>
inline __m256 load8(const uint8_t* p) {
  if constexpr (T == KvType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == KvType::kBF16) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (T == KvType::kFP8) {
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(fp8_to_half16(b)));
  } else {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
}

// 16 consecutive values: fp8 converts them in one 256-bit pass, the others are two load8s.
template <KvType T>
inline void load16(const uint8_t* p, __m256* lo, __m256* hi) {
  if constexpr (T == KvType::kFP8) {
    const __m256i h = fp8_to_half16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  } else {
    *lo = load8<T>(p);
    *hi = load8<T>(p + 8 * kv_elem_bytes(T));
  }
}

template <KvType T>
inline float kv_scale_of(const uint8_t* row, const KvSide& s) {
  if constexpr (T == KvType::kF32 || T == KvType::kBF16) {
    (void)row; (void)s;
    return 1.0f;
  } else {
    float f;
    std::memcpy(&f, row + s.scale_off, 4);
    return T == KvType::kFP8 ? f * 256.0f : f;
  }
}

// out[k] = the sum of a0[k] + a1[k]'s lanes for four keys, in hsum256's order (lo + hi, then pairs
// two apart, then neighbours), as one transpose.
inline void sum4(const __m256* a0, const __m256* a1, float* out) {
  __m256 x[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) x[k] = _mm256_add_ps(a0[k], a1[k]);
  const __m256 y01 = _mm256_add_ps(_mm256_permute2f128_ps(x[0], x[1], 0x20), _mm256_permute2f128_ps(x[0], x[1], 0x31));
  const __m256 y23 = _mm256_add_ps(_mm256_permute2f128_ps(x[2], x[3], 0x20), _mm256_permute2f128_ps(x[2], x[3], 0x31));
  const __m256d d01 = _mm256_castps_pd(y01), d23 = _mm256_castps_pd(y23);
  const __m256 z = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(d01, d23)), _mm256_castpd_ps(_mm256_unpackhi_pd(d01, d23)));
  const __m256 h = _mm256_hadd_ps(z, z);  // lane 0: [key 0, key 2, ...], lane 1: [key 1, key 3, ...]
  alignas(32) float f[8];
  _mm256_store_ps(f, h);
  out[0] = f[0];
  out[1] = f[4];
  out[2] = f[1];
  out[3] = f[5];
}

}  // namespace
}  // namespace ouro
