// AVX-512 VNNI kernels, vpdpbusd (u8 x s8 -> s32) dots. Q4 and Q8: 16 rows x up to 8 tokens per
// pass, whole-block integer dots, one float step per block. W8A8: one row quad x up to 4 tokens,
// whole rows in int32. See matmul.h for the layouts.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul.h"
// GCC 12's false positive once the T < 4 variants of quad_w8 constant-fold their zero accumulators.
#include "kernels/avx512_warnings.h"

namespace ouro {
namespace {

template <bool kF32>
inline __m512 load16(const uint8_t* p) {
  if constexpr (kF32) return _mm512_load_ps(reinterpret_cast<const float*>(p));
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// pass<N>(g, t, lo, hi) for the N = n in 1..kMax.
template <int kMax, typename Pass>
void pass_of(int64_t n, Pass& pass, int64_t g, int64_t t, int lo, int hi) {
  if constexpr (kMax > 0) {
    if (n == kMax) pass.template operator()<kMax>(g, t, lo, hi);
    else pass_of<kMax - 1>(n, pass, g, t, lo, hi);
  }
}

// Runs pass<T>(g, t0, lo, hi) over the row groups of [r0, r1) (lo, hi: the group's rows to write)
// and all tokens, kTile tokens at a time. Token chunks keep a chunk's activations in L1/L2 while
// the row groups stream through.
template <int kTile, typename Pass>
void drive(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, Pass&& pass) {
  constexpr int64_t kTokChunk = 64;
  const int64_t n = W.group_rows;
  for (int64_t tc = 0; tc < A.T; tc += kTokChunk) {
    const int64_t te = std::min(A.T, tc + kTokChunk);
    for (int64_t g = r0 / n; g * n < r1; ++g) {
      const int lo = (int)std::max<int64_t>(0, r0 - g * n);
      const int hi = (int)std::min<int64_t>({n, r1 - g * n, W.rows - g * n});
      int64_t t = tc;
      for (; t + kTile <= te; t += kTile) pass.template operator()<kTile>(g, t, lo, hi);
      pass_of<kTile - 1>(te - t, pass, g, t, lo, hi);
    }
  }
}

// Q4 and Q8_0 in groups of 16 rows (matmul.h): T tokens against group g; writes rows [lo, hi) of
// the group. Per block, vpdpbusd with the token's 4 activation bytes broadcast give the 16 rows'
// whole-block dots in int32 (Q8: 8 vectors of bytes, started at -128 * sum(q) to take out the
// weights' +128 offset; Q4: 4 vectors of nibbles, low then high), then the float step, one
// rounding each as the scalar reference's std::fma (the same bits): acc += dot * (d_w * d_a), and
// for Q4 acc += c_w * s_a.
template <bool kQ4, bool kF32, int T>
void group16(const PackedMatrix& W, const QuantActs& A, int64_t g, int64_t t0, int lo, int hi, float* Y, int64_t ldy) {
  constexpr size_t kSz = kF32 ? 4 : 2;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const int8_t* arow[T];
  const float* da[T];
  const float* sa[T];
  const int32_t* qsum[T];
  for (int t = 0; t < T; ++t) {
    arow[t] = A.qs.data() + (t0 + t) * A.cols_pad;
    da[t] = A.d.data() + (t0 + t) * A.nb;
    sa[t] = A.s.data() + (t0 + t) * A.nb;
    qsum[t] = A.qsum.data() + (t0 + t) * A.nb;
  }
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const size_t vb = W.value_bytes(), ahead = 4 * W.step_bytes;
  const uint8_t* st = W.step(g, 0);
  for (int64_t j = 0; j < W.nsteps; ++j, st += W.step_bytes) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * j + h;
      const uint8_t* wv = st + vb / 2 * h;
      __m512i dot[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) dot[t] = kQ4 ? _mm512_setzero_si512() : _mm512_set1_epi32(-128 * qsum[t][b]);
      if constexpr (kQ4) {
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          _mm_prefetch(reinterpret_cast<const char*>(wv + 64 * v + ahead), _MM_HINT_T0);
          const __m512i x = _mm512_load_si512(wv + 64 * v);
          const __m512i wl = _mm512_and_si512(x, nib), wh = _mm512_and_si512(_mm512_srli_epi16(x, 4), nib);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            dot[t] = _mm512_dpbusd_epi32(dot[t], wl, bcast4(arow[t] + 32 * b + 8 * v));
            dot[t] = _mm512_dpbusd_epi32(dot[t], wh, bcast4(arow[t] + 32 * b + 8 * v + 4));
          }
        }
      } else {
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          _mm_prefetch(reinterpret_cast<const char*>(wv + 64 * v + ahead), _MM_HINT_T0);
          const __m512i w = _mm512_load_si512(wv + 64 * v);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) dot[t] = _mm512_dpbusd_epi32(dot[t], w, bcast4(arow[t] + 32 * b + 4 * v));
        }
      }
      if (h == 1)
        for (size_t o = vb; o < W.step_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(st + o + ahead), _MM_HINT_T0);
      const uint8_t* sc = st + vb + (kQ4 ? 2 * h : h) * 16 * kSz;  // d[16] (and c[16] for Q4) of block b
      const __m512 dw = load16<kF32>(sc);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t]), _mm512_mul_ps(dw, _mm512_set1_ps(da[t][b])), acc[t]);
      if constexpr (kQ4) {
        const __m512 cw = load16<kF32>(sc + 16 * kSz);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(cw, _mm512_set1_ps(sa[t][b]), acc[t]);
      }
    }
  }
  const __mmask16 keep = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(Y + (t0 + t) * ldy + g * 16, keep, acc[t]);
}

// 8 tokens at a time: a weight vector loaded once feeds 8 dots.
template <bool kQ4, bool kF32>
void gemm16(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  drive<8>(W, A, r0, r1, [&]<int T>(int64_t g, int64_t t, int lo, int hi) { group16<kQ4, kF32, T>(W, A, g, t, lo, hi, Y, ldy); });
}

// Lane i of the result = the sum of all lanes of v[4 (i % 4) + i / 4]: a 4-level transpose-and-add
// (512 -> 256 -> 128 -> 64 -> 32 bits), 30 shuffles and 15 adds for 16 sums.
inline __m512i sum_lanes16(const __m512i* v) {
  auto half = [](__m512i a, __m512i b, int level) {
    switch (level) {
      case 0: return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
      case 1: return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
      case 2: return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
      default: {
        const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
        return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, _MM_SHUFFLE(2, 0, 2, 0))),
                                _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, _MM_SHUFFLE(3, 1, 3, 1))));
      }
    }
  };
  __m512i w[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) w[i] = half(v[2 * i], v[2 * i + 1], 0);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) w[i] = half(w[2 * i], w[2 * i + 1], 1);
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) w[i] = half(w[2 * i], w[2 * i + 1], 2);
  return half(w[0], w[1], 3);
}

// W8A8: vpdpbusd wants u8 x s8, so activations are offset by 128 on load (a ^ 0x80) and the
// row's 128 * sum(w) is subtracted at the end; whole rows accumulate in int32 and are scaled once.
template <int T>
void quad_w8(const PackedMatrix& W, const QuantActs& A, int64_t g, int64_t t0, int lo, int hi, float* Y, int64_t ldy) {
  __m512i acc[4][T];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const int8_t* arow[T];
  for (int t = 0; t < T; ++t) arow[t] = A.qs.data() + (t0 + t) * A.cols_pad;
  const uint8_t* st = W.step(g, 0);
  for (int64_t j = 0; j < W.nsteps; ++j, st += W.step_bytes) {
    _mm_prefetch(reinterpret_cast<const char*>(st + 4 * W.step_bytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(st + 4 * W.step_bytes + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(st + 4 * W.step_bytes + 128), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(st + 4 * W.step_bytes + 192), _MM_HINT_T0);
    __m512i w[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) w[r] = _mm512_loadu_si512(st + 64 * r);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m512i a = _mm512_xor_si512(_mm512_loadu_si512(arow[t] + 64 * j), flip);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], a, w[r]);
    }
  }
  // The 4 x T row sums in one vector, lane 4 t + r, instead of 4 T horizontal reductions.
  __m512i v[16];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) v[4 * r + t] = t < T ? acc[r][t < T ? t : 0] : _mm512_setzero_si512();
  const __m512i rsum = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&W.rsum[g * 4])));
  const __m512i isum = _mm512_sub_epi32(sum_lanes16(v), _mm512_slli_epi32(rsum, 7));
  const __m512 rscale = _mm512_broadcast_f32x4(_mm_loadu_ps(&W.rscale[g * 4]));
  const __m512 td = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                          _mm512_zextps128_ps512(_mm_maskz_loadu_ps((__mmask8)((1u << T) - 1), &A.td[t0])));
  // The same two roundings as (float)isum * (rscale * td), so results do not depend on T.
  alignas(64) float y[16];
  _mm512_store_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(rscale, td)));
  for (int t = 0; t < T; ++t) {
    float* out = Y + (t0 + t) * ldy + g * 4;
    if (lo == 0 && hi == 4) _mm_storeu_ps(out, _mm_load_ps(y + 4 * t));
    else
      for (int r = lo; r < hi; ++r) out[r] = y[4 * t + r];
  }
}

void gemm_w8(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  drive<4>(W, A, r0, r1, [&]<int T>(int64_t g, int64_t t, int lo, int hi) { quad_w8<T>(W, A, g, t, lo, hi, Y, ldy); });
}

void gemm_q4(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  if (W.f32_scales) gemm16<true, true>(W, A, r0, r1, Y, ldy);
  else gemm16<true, false>(W, A, r0, r1, Y, ldy);
}

}  // namespace

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels k{gemm_q4, gemm16<false, false>, gemm_w8};
  return k;
}

}  // namespace ouro
