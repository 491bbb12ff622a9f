// AVX-512 builds of the attention's score and weighted-sum passes (attend_avx512.h). Scores: per
// query chunk of 16 values, four rows' values are loaded once and used by up to four heads; each
// (head, row) pair's zmm accumulator holds the AVX2 path's two ymm accumulators (a0 in the low
// lanes, a1 in the high), so 16 accumulators + 4 rows + 4 queries fit in the 32 registers and the
// horizontal sums (kv_simd.h's sum4) are the AVX2 path's. Weighted sum: 64 columns of up to four
// heads in 16 registers, each row's values loaded once for all of them.
#include "kernels/attend_avx512.h"

#include <algorithm>

#include "kernels/kv_simd.h"
#include "kernels/avx512_warnings.h"

namespace ouro {

namespace {

// 16 consecutive values of a row as floats (before its scale): load16's two halves in one register.
template <KvType T>
inline __m512 load16z(const uint8_t* p) {
  if constexpr (T == KvType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
  } else {
    __m256 lo, hi;
    load16<T>(p, &lo, &hi);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  }
}

template <KvType T, int H>
void scores_hx4(const float* q, int64_t qs, const uint8_t* const* p, int hd, float (*d)[4]) {
  constexpr int eb = (int)kv_elem_bytes(T);
  __m512 acc[H][4];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) acc[h][k] = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= hd; i += 16) {
    __m512 v[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) v[k] = load16z<T>(p[k] + i * eb);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m512 qz = _mm512_loadu_ps(q + h * qs + i);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) acc[h][k] = _mm512_fmadd_ps(qz, v[k], acc[h][k]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      a0[k] = _mm512_castps512_ps256(acc[h][k]);
      a1[k] = _mm512_extractf32x8_ps(acc[h][k], 1);
    }
    if (i < hd) {  // 8 values left: the low accumulators only, as dot_rows4 does
      const __m256 ql = _mm256_loadu_ps(q + h * qs + i);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) a0[k] = _mm256_fmadd_ps(ql, load8<T>(p[k] + i * eb), a0[k]);
    }
    sum4(a0, a1, d[h]);
  }
}

template <KvType T, int GB, int NZ>
void weighted_cols_z(const uint8_t* const* rows, int64_t off, int64_t n, const float* w, int64_t w_stride, bool first,
                     float* out, int64_t os) {
  constexpr int veb = (int)kv_elem_bytes(T);
  __m512 acc[GB][NZ];
#pragma GCC unroll 4
  for (int h = 0; h < GB; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NZ; ++c) acc[h][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + h * os + 16 * c);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* vp = rows[j] + off;
    __m512 v[NZ];
#pragma GCC unroll 4
    for (int c = 0; c < NZ; ++c) v[c] = load16z<T>(vp + 16 * c * veb);
#pragma GCC unroll 4
    for (int h = 0; h < GB; ++h) {
      const __m512 wv = _mm512_set1_ps(w[h * w_stride + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NZ; ++c) acc[h][c] = _mm512_fmadd_ps(wv, v[c], acc[h][c]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < GB; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NZ; ++c) _mm512_storeu_ps(out + h * os + 16 * c, acc[h][c]);
}

// The last 8 columns (hd_v % 16 == 8) in 256 bits.
template <KvType T, int GB>
void weighted_cols_8(const uint8_t* const* rows, int64_t off, int64_t n, const float* w, int64_t w_stride, bool first,
                     float* out, int64_t os) {
  __m256 acc[GB];
#pragma GCC unroll 4
  for (int h = 0; h < GB; ++h) acc[h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + h * os);
  for (int64_t j = 0; j < n; ++j) {
    const __m256 v = load8<T>(rows[j] + off);
#pragma GCC unroll 4
    for (int h = 0; h < GB; ++h) acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(w[h * w_stride + j]), v, acc[h]);
  }
#pragma GCC unroll 4
  for (int h = 0; h < GB; ++h) _mm256_storeu_ps(out + h * os, acc[h]);
}

template <KvType T, int GB>
void weighted_gb(const uint8_t* const* rows, int64_t off, int64_t n, const float* w, int64_t w_stride, int hd_v,
                 bool first, float* out, int64_t os) {
  constexpr int64_t veb = (int64_t)kv_elem_bytes(T);
  int c0 = 0;
  for (; c0 + 64 <= hd_v; c0 += 64) weighted_cols_z<T, GB, 4>(rows, off + c0 * veb, n, w, w_stride, first, out + c0, os);
  for (; c0 + 16 <= hd_v; c0 += 16) weighted_cols_z<T, GB, 1>(rows, off + c0 * veb, n, w, w_stride, first, out + c0, os);
  if (c0 < hd_v) weighted_cols_8<T, GB>(rows, off + c0 * veb, n, w, w_stride, first, out + c0, os);
}

}  // namespace

template <KvType T>
void score_heads_avx512(const float* q, int G, int64_t qs, const uint8_t* const* rows, int64_t data_off,
                        const float* rs, int64_t n, int hd, float scale, float* scores, int64_t n_keys, int64_t p0) {
  for (int64_t i = 0; i + 4 <= n; i += 4) {
    const uint8_t* r4[4] = {rows[i] + data_off, rows[i + 1] + data_off, rows[i + 2] + data_off, rows[i + 3] + data_off};
    for (int g = 0; g < G; g += 4) {
      float d[4][4];
      switch (std::min(4, G - g)) {
        case 4: scores_hx4<T, 4>(q + g * qs, qs, r4, hd, d); break;
        case 3: scores_hx4<T, 3>(q + g * qs, qs, r4, hd, d); break;
        case 2: scores_hx4<T, 2>(q + g * qs, qs, r4, hd, d); break;
        default: scores_hx4<T, 1>(q + g * qs, qs, r4, hd, d); break;
      }
      for (int h = 0; h < std::min(4, G - g); ++h)
        for (int k = 0; k < 4; ++k) scores[(g + h) * n_keys + p0 + i + k] = d[h][k] * (rs[i + k] * scale);
    }
  }
}

template <KvType T>
void weighted_heads_avx512(const uint8_t* const* rows, int64_t data_off, int64_t n, const float* w, int64_t w_stride,
                           int G, int hd_v, bool first, float* out, int64_t os) {
  switch (G) {
    case 4: return weighted_gb<T, 4>(rows, data_off, n, w, w_stride, hd_v, first, out, os);
    case 3: return weighted_gb<T, 3>(rows, data_off, n, w, w_stride, hd_v, first, out, os);
    case 2: return weighted_gb<T, 2>(rows, data_off, n, w, w_stride, hd_v, first, out, os);
    default: return weighted_gb<T, 1>(rows, data_off, n, w, w_stride, hd_v, first, out, os);
  }
}

#define OURO_ATTEND_AVX512(T)                                                                                     \
  template void score_heads_avx512<T>(const float*, int, int64_t, const uint8_t* const*, int64_t, const float*,   \
                                      int64_t, int, float, float*, int64_t, int64_t);                             \
  template void weighted_heads_avx512<T>(const uint8_t* const*, int64_t, int64_t, const float*, int64_t, int, int, \
                                         bool, float*, int64_t);
OURO_ATTEND_AVX512(KvType::kF32)
OURO_ATTEND_AVX512(KvType::kBF16)
OURO_ATTEND_AVX512(KvType::kFP8)
OURO_ATTEND_AVX512(KvType::kInt8)
#undef OURO_ATTEND_AVX512

}  // namespace ouro
