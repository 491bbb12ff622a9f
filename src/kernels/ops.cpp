#include "kernels/ops.h"
#include "kernels/attend_avx512.h"
#include "kernels/kv_simd.h"
#include "kernels/simd_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/fp16.h"

namespace ouro {

float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float ss = dot_f32(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / (float)n + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void rope_angles(int64_t pos, const float* inv_freq, int half, float* cs, float* sn) {
  for (int i = 0; i < half; ++i) {
    const double a = (double)pos * inv_freq[i];
    cs[i] = (float)std::cos(a);
    sn[i] = (float)std::sin(a);
  }
}

void rope_rotate(float* x, int n_heads, int head_dim, const float* cs, const float* sn) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + (int64_t)h * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cs[i] - b * sn[i];
      v[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

void rope_inplace(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq) {
  float cs[256], sn[256];
  rope_angles(pos, inv_freq, head_dim / 2, cs, sn);
  rope_rotate(x, n_heads, head_dim, cs, sn);
}

namespace {

// silu(g) * u for 8 values: sigmoid(g) from e = exp(-|g|) (never a positive argument): 1 / (1 + e)
// for g >= 0, e / (1 + e) below.
inline __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp256_nonpos(_mm256_or_ps(g, _mm256_set1_ps(-0.0f)));
  const __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
  const __m256 s = _mm256_blendv_ps(r, _mm256_mul_ps(e, r), _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_mul_ps(_mm256_mul_ps(g, s), u);
}

}  // namespace

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {
    float gb[8] = {}, ub[8] = {}, yb[8];
    std::memcpy(gb, g + i, sizeof(float) * (n - i));
    std::memcpy(ub, u + i, sizeof(float) * (n - i));
    _mm256_storeu_ps(yb, swiglu8(_mm256_loadu_ps(gb), _mm256_loadu_ps(ub)));
    std::memcpy(y + i, yb, sizeof(float) * (n - i));
  }
}

void softmax_inplace(float* x, int64_t n, float* m_out, float* l_out) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256_nonpos(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
    _mm256_storeu_ps(x + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum256(vsum);
  for (; i < n; ++i) { x[i] = std::exp(x[i] - mx); sum += x[i]; }
  const float inv = 1.0f / sum;
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
  if (m_out) *m_out = mx;
  if (l_out) *l_out = sum;
}

float online_softmax_block(float* s, int cnt, int np, float scale, float* m, float* l) {
  float bm = -INFINITY;
  for (int j = 0; j < cnt; ++j) bm = std::max(bm, s[j] * scale);
  const float mn = std::max(*m, bm), a = std::exp(*m - mn);
  const __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(mn);
  __m256 acc = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= cnt; j += 8) {
    const __m256 e = exp256_nonpos(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(s + j), vs), vm));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (j < cnt) {  // the last partial group, padded, its lanes past cnt masked out
    alignas(32) float buf[8];
    alignas(32) int32_t lane[8];
    for (int i = 0; i < 8; ++i) {
      buf[i] = j + i < cnt ? s[j + i] : 0.0f;
      lane[i] = j + i < cnt ? -1 : 0;
    }
    const __m256 mask = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(lane)));
    const __m256 e = _mm256_and_ps(mask, exp256_nonpos(_mm256_sub_ps(_mm256_mul_ps(_mm256_load_ps(buf), vs), vm)));
    _mm256_store_ps(buf, e);
    for (int i = 0; j + i < cnt; ++i) s[j + i] = buf[i];
    acc = _mm256_add_ps(acc, e);
  }
  for (int i = cnt; i < np; ++i) s[i] = 0.0f;
  *l = *l * a + hsum256(acc);
  *m = mn;
  return a;
}

void attend_one(const float* q, const float* k, const float* v, int64_t stride, int64_t n_keys, int head_dim,
                float scale, float* scores, float* out) {
  const int block0 = 0;
  const int64_t rb = stride * 4;
  const KvPages pg{&block0, std::max<int64_t>(n_keys, 1),
                   KvSide{reinterpret_cast<const uint8_t*>(k), KvType::kF32, rb, 0, 0, 0},
                   KvSide{reinterpret_cast<const uint8_t*>(v), KvType::kF32, rb, 0, 0, 0}};
  attend_paged(q, pg, n_keys, head_dim, scale, scores, out);
}

namespace {

template <KvType T>
inline float dot_row(const float* q, const uint8_t* p, int hd) {
  if constexpr (T == KvType::kF32) {
    return dot_f32(q, reinterpret_cast<const float*>(p), hd);
  } else {
    constexpr int eb = (int)(T == KvType::kBF16 ? 2 : 1);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= hd; i += 16) {
      __m256 lo, hi;
      load16<T>(p + i * eb, &lo, &hi);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), lo, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), hi, a1);
    }
    if (i < hd) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<T>(p + i * eb), a0);
    return hsum256(_mm256_add_ps(a0, a1));
  }
}

// Four keys' dot_row at once, bit for bit: each key keeps dot_row's two accumulators and the same
// FMAs, and the four horizontal sums are one transpose in hsum256's order (lo + hi, then pairs
// two apart, then neighbours), so scores do not depend on whether a key came in a group of four.
template <KvType T>
inline void dot_rows4(const float* q, const uint8_t* const* p, int hd, float* out) {
  constexpr int eb = (int)kv_elem_bytes(T);
  __m256 a0[4], a1[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) a0[k] = a1[k] = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= hd; i += 16) {
    const __m256 ql = _mm256_loadu_ps(q + i), qh = _mm256_loadu_ps(q + i + 8);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m256 lo, hi;
      load16<T>(p[k] + i * eb, &lo, &hi);
      a0[k] = _mm256_fmadd_ps(ql, lo, a0[k]);
      a1[k] = _mm256_fmadd_ps(qh, hi, a1[k]);
    }
  }
  if (i < hd) {
    const __m256 ql = _mm256_loadu_ps(q + i);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) a0[k] = _mm256_fmadd_ps(ql, load8<T>(p[k] + i * eb), a0[k]);
  }
  sum4(a0, a1, out);
}

// Any head_dim, any types: through the scalar decoder (slow; head dims that are not a multiple of 8).
// The output is the first hd_v values of the weighted value rows.
void attend_generic(const float* q, const KvPages& pg, int64_t n_keys, int hd, int hd_v, float scale, float* scores,
                    float* out) {
  std::vector<float> row;
  auto value = [&](const KvSide& s, int64_t p, int i) -> float {
    const uint8_t* r = s.base + (int64_t)pg.blocks[p / pg.block_size] * s.block_bytes + (p % pg.block_size) * s.row_bytes;
    const uint8_t* d = r + s.data_off;
    float sc = 1.0f;
    if (kv_scaled(s.type)) std::memcpy(&sc, r + s.scale_off, 4);
    switch (s.type) {
      case KvType::kF32: { float f; std::memcpy(&f, d + 4 * i, 4); return f; }
      case KvType::kBF16: { uint16_t h; std::memcpy(&h, d + 2 * i, 2); return bf16_to_fp32(h); }
      case KvType::kFP8: return fp8_e4m3_decode(d[i]) * sc;
      case KvType::kInt8: return (float)(int8_t)d[i] * sc;
    }
    return 0;
  };
  for (int64_t p = 0; p < n_keys; ++p) {
    float s = 0;
    for (int i = 0; i < hd; ++i) s += q[i] * value(pg.k, p, i);
    scores[p] = s * scale;
  }
  softmax_inplace(scores, n_keys);
  for (int i = 0; i < hd_v; ++i) out[i] = 0;
  for (int64_t p = 0; p < n_keys; ++p)
    for (int i = 0; i < hd_v; ++i) out[i] += scores[p] * value(pg.v, p, i);
}

template <KvType KT, KvType VT>
void attend_typed(const float* q, const KvPages& pg, int64_t n_keys, int hd, float scale, float* scores, float* out) {
  // Visits the keys block by block: fn(first position, rows in this block, block index).
  auto for_blocks = [&](auto&& fn) {
    for (int64_t p0 = 0, b = 0; p0 < n_keys; p0 += pg.block_size, ++b) fn(p0, std::min(pg.block_size, n_keys - p0), pg.blocks[b]);
  };
  const KvSide& K = pg.k;
  const KvSide& V = pg.v;
  for_blocks([&](int64_t p0, int64_t n, int blk) {
    const uint8_t* r = K.base + (int64_t)blk * K.block_bytes;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4, r += 4 * K.row_bytes) {
      const uint8_t* rows[4] = {r + K.data_off, r + K.row_bytes + K.data_off, r + 2 * K.row_bytes + K.data_off,
                                r + 3 * K.row_bytes + K.data_off};
      float d[4];
      dot_rows4<KT>(q, rows, hd, d);
      for (int k = 0; k < 4; ++k) scores[p0 + i + k] = d[k] * (kv_scale_of<KT>(r + k * K.row_bytes, K) * scale);
    }
    for (; i < n; ++i, r += K.row_bytes)
      scores[p0 + i] = dot_row<KT>(q, r + K.data_off, hd) * (kv_scale_of<KT>(r, K) * scale);
  });
  softmax_inplace(scores, n_keys);
  // The weighted sum of the value rows, 256 columns at a time (32 registers of accumulators): one
  // chunk for heads up to 256 values, several for wider rows (MLA's latent rows).
  constexpr int veb = (int)kv_elem_bytes(VT);
  for (int c0 = 0; c0 < hd; c0 += 256) {
    __m256 acc[32];
    const int nv = std::min(256, hd - c0) / 8;
    for (int c = 0; c < nv; ++c) acc[c] = _mm256_setzero_ps();
    for_blocks([&](int64_t p0, int64_t n, int blk) {
      const uint8_t* r = V.base + (int64_t)blk * V.block_bytes;
      for (int64_t i = 0; i < n; ++i, r += V.row_bytes) {
        const __m256 w = _mm256_set1_ps(scores[p0 + i] * kv_scale_of<VT>(r, V));
        const uint8_t* vp = r + V.data_off + (int64_t)c0 * veb;
        int c = 0;
        for (; c + 2 <= nv; c += 2) {
          __m256 lo, hi;
          load16<VT>(vp + 8 * c * veb, &lo, &hi);
          acc[c] = _mm256_fmadd_ps(w, lo, acc[c]);
          acc[c + 1] = _mm256_fmadd_ps(w, hi, acc[c + 1]);
        }
        if (c < nv) acc[c] = _mm256_fmadd_ps(w, load8<VT>(vp + 8 * c * veb), acc[c]);
      }
    });
    for (int c = 0; c < nv; ++c) _mm256_storeu_ps(out + c0 + 8 * c, acc[c]);
  }
}

// Row r's address and scale for positions [p0, p0 + n) of a side, across its blocks.
template <KvType T>
void rows_of(const KvPages& pg, const KvSide& s, int64_t p0, int64_t n, const uint8_t** rows, float* scales) {
  for (int64_t j = 0; j < n; ++j) {
    const int64_t p = p0 + j;
    rows[j] = s.base + (int64_t)pg.blocks[p / pg.block_size] * s.block_bytes + (p % pg.block_size) * s.row_bytes;
    scales[j] = kv_scale_of<T>(rows[j], s);
  }
}

// out[h][c0, c0 + 8 NV) (+)= sum over the n rows of w[h][j] * row j, for GB heads at once: each
// row's values are loaded once for the GB heads, every accumulator in a register. Per column and
// head the FMAs are attend_typed's, in position order. first: the accumulators start at zero.
template <KvType VT, int GB, int NV>
void weighted_cols(const uint8_t* const* rows, int64_t off, int64_t n, const float* w, int64_t w_stride, bool first,
                   float* out, int64_t os) {
  constexpr int veb = (int)kv_elem_bytes(VT);
  __m256 acc[GB][NV];
#pragma GCC unroll 4
  for (int h = 0; h < GB; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[h][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + h * os + 8 * c);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* vp = rows[j] + off;
    __m256 v[NV];
#pragma GCC unroll 4
    for (int c = 0; c + 1 < NV; c += 2) load16<VT>(vp + 8 * c * veb, &v[c], &v[c + 1]);
    if constexpr (NV % 2 == 1) v[NV - 1] = load8<VT>(vp + 8 * (NV - 1) * veb);
#pragma GCC unroll 4
    for (int h = 0; h < GB; ++h) {
      const __m256 wv = _mm256_broadcast_ss(&w[h * w_stride + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[h][c] = _mm256_fmadd_ps(wv, v[c], acc[h][c]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < GB; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(out + h * os + 8 * c, acc[h][c]);
}

// weighted_cols over all hd_v columns, 32 at a time.
template <KvType VT, int GB>
void weighted_rows(const uint8_t* const* rows, int64_t data_off, int64_t n, const float* w, int64_t w_stride, int hd_v,
                   bool first, float* out, int64_t os) {
  constexpr int64_t veb = (int64_t)kv_elem_bytes(VT);
  int c0 = 0;
  for (; c0 + 32 <= hd_v; c0 += 32) weighted_cols<VT, GB, 4>(rows, data_off + c0 * veb, n, w, w_stride, first, out + c0, os);
  switch ((hd_v - c0) / 8) {
    case 3: return weighted_cols<VT, GB, 3>(rows, data_off + c0 * veb, n, w, w_stride, first, out + c0, os);
    case 2: return weighted_cols<VT, GB, 2>(rows, data_off + c0 * veb, n, w, w_stride, first, out + c0, os);
    case 1: return weighted_cols<VT, GB, 1>(rows, data_off + c0 * veb, n, w, w_stride, first, out + c0, os);
  }
}

// Scores of queries [0, G) (query g at q + g * qs, its scores at scores + g * ss) against the n
// rows of a tile starting at position p0: per block of 4 keys every query's dot_rows4 (the keys stay
// in L1 across the queries), each times the same (row scale * scale) product; the last n % 4 keys
// one at a time, as attend_typed does. With avx512 four queries against four rows in 512-bit
// registers (attend_avx512.h), with the same bits.
template <KvType KT>
void score_tile(const float* q, int G, int64_t qs, const uint8_t* const* rows, int64_t off, const float* rs, int64_t n,
                int hd, float scale, float* scores, int64_t ss, int64_t p0, bool avx512) {
  int64_t i = 0;
  if (avx512) {
    score_heads_avx512<KT>(q, G, qs, rows, off, rs, n, hd, scale, scores, ss, p0);
    i = n - n % 4;
  }
  for (; i + 4 <= n; i += 4) {
    const uint8_t* r4[4] = {rows[i] + off, rows[i + 1] + off, rows[i + 2] + off, rows[i + 3] + off};
    for (int g = 0; g < G; ++g) {
      float d[4];
      dot_rows4<KT>(q + g * qs, r4, hd, d);
      for (int k = 0; k < 4; ++k) scores[g * ss + p0 + i + k] = d[k] * (rs[i + k] * scale);
    }
  }
  for (; i < n; ++i)
    for (int g = 0; g < G; ++g) scores[g * ss + p0 + i] = dot_row<KT>(q + g * qs, rows[i] + off, hd) * (rs[i] * scale);
}

// attend_typed for the G heads of each of nt tokens at once (token t's head g: query q + (t * G + g)
// * qs, output out + (t * G + g) * os, keys [0, nk[t])). Scores: tiles of kTile positions, the
// tokens whose part of the tile has the same length scored together (score_tile), the others one
// by one, so every token's keys fall in attend_typed's tiles of 4 and its tail. Weighted sum: tiles
// of kVTile positions (in L1 across the tokens and heads), two or four heads at a time
// (weighted_rows, weighted_heads_avx512), the accumulators carried through out between tiles;
// every column still sums its keys in position order with attend_typed's FMA and weight, so the
// bits are its. A cached row is read once per tile of tokens, not once per token.
template <KvType KT, KvType VT>
void attend_tokens_typed(const float* q, int nt, int G, int64_t qs, const KvPages& pg, const int64_t* nk, int64_t pb,
                         int hd, int hd_v, float scale, float* scores, float* out, int64_t os, float* stats,
                         bool avx512) {
  // Positions below are relative to pb: token t reads [pb, nk[t]), its keys 0 .. nk[t] - pb.
  const int64_t ss = *std::max_element(nk, nk + nt) - pb;  // scores of query i at scores + i * ss
  auto keys = [&](int t) { return nk[t] - pb; };
  constexpr int64_t kTile = 64;
  const uint8_t* rows[kTile];
  float rs[kTile];
  for (int64_t p0 = 0; p0 < ss; p0 += kTile) {
    rows_of<KT>(pg, pg.k, pb + p0, std::min(kTile, ss - p0), rows, rs);
    for (int t = 0; t < nt;) {
      if (keys(t) <= p0) { ++t; continue; }
      const int64_t n = std::min(kTile, keys(t) - p0);
      int t2 = t + 1;
      while (t2 < nt && keys(t2) > p0 && std::min(kTile, keys(t2) - p0) == n) ++t2;
      score_tile<KT>(q + t * G * qs, (t2 - t) * G, qs, rows, pg.k.data_off, rs, n, hd, scale, scores + t * G * ss, ss,
                     p0, avx512);
      t = t2;
    }
  }
  for (int t = 0; t < nt; ++t)
    if (keys(t) > 0)
      for (int g = 0; g < G; ++g) {
        const int64_t i = (int64_t)t * G + g;
        softmax_inplace(scores + i * ss, keys(t), stats ? &stats[2 * i] : nullptr, stats ? &stats[2 * i + 1] : nullptr);
      }
  constexpr int64_t kVTile = 16;
  float wt[4][kVTile];
  const int step = avx512 ? 4 : 2;  // heads per pass over a tile's rows
  for (int64_t p0 = 0; p0 < ss; p0 += kVTile) {
    rows_of<VT>(pg, pg.v, pb + p0, std::min(kVTile, ss - p0), rows, rs);
    for (int t = 0; t < nt; ++t) {
      if (keys(t) <= p0) continue;
      const int64_t n = std::min(kVTile, keys(t) - p0);
      for (int g = 0; g < G; g += step) {
        const int gb = std::min(step, G - g);
        const int64_t qi = (int64_t)t * G + g;
        for (int h = 0; h < gb; ++h)
          for (int64_t j = 0; j < n; ++j) wt[h][j] = scores[(qi + h) * ss + p0 + j] * rs[j];
        float* o = out + qi * os;
        if (avx512) weighted_heads_avx512<VT>(rows, pg.v.data_off, n, &wt[0][0], kVTile, gb, hd_v, p0 == 0, o, os);
        else if (gb == 2) weighted_rows<VT, 2>(rows, pg.v.data_off, n, &wt[0][0], kVTile, hd_v, p0 == 0, o, os);
        else weighted_rows<VT, 1>(rows, pg.v.data_off, n, &wt[0][0], kVTile, hd_v, p0 == 0, o, os);
      }
    }
  }
}

// Calls fn.template operator()<KT, VT>() for the sides' runtime types.
template <KvType KT, class F>
void with_v_type(KvType vt, F&& fn) {
  switch (vt) {
    case KvType::kF32: return fn.template operator()<KT, KvType::kF32>();
    case KvType::kBF16: return fn.template operator()<KT, KvType::kBF16>();
    case KvType::kFP8: return fn.template operator()<KT, KvType::kFP8>();
    case KvType::kInt8: return fn.template operator()<KT, KvType::kInt8>();
  }
}
template <class F>
void with_kv_types(KvType kt, KvType vt, F&& fn) {
  switch (kt) {
    case KvType::kF32: return with_v_type<KvType::kF32>(vt, fn);
    case KvType::kBF16: return with_v_type<KvType::kBF16>(vt, fn);
    case KvType::kFP8: return with_v_type<KvType::kFP8>(vt, fn);
    case KvType::kInt8: return with_v_type<KvType::kInt8>(vt, fn);
  }
}

}  // namespace

void merge_attention_chunks(const float* parts, int64_t part_stride, const float* stats, int64_t stats_stride,
                            int n_chunks, int n, float* out) {
  float mx = -INFINITY;
  for (int c = 0; c < n_chunks; ++c) mx = std::max(mx, stats[c * stats_stride]);
  std::fill(out, out + n, 0.0f);
  if (mx == -INFINITY) return;  // no keys at all: attend_paged's zero sum
  float wsum = 0.0f;
  for (int c = 0; c < n_chunks; ++c) {
    const float l = stats[c * stats_stride + 1];
    if (l == 0.0f) continue;
    const float w = l * std::exp(stats[c * stats_stride] - mx);
    wsum += w;
    const float* o = parts + c * part_stride;
    for (int v = 0; v < n; ++v) out[v] = std::fma(w, o[v], out[v]);
  }
  const float inv = 1.0f / wsum;
  for (int v = 0; v < n; ++v) out[v] *= inv;
}

void attend_paged(const float* q, const KvPages& pg, int64_t n_keys, int hd, float scale, float* scores, float* out) {
  if (hd % 8 != 0) return attend_generic(q, pg, n_keys, hd, hd, scale, scores, out);
  with_kv_types(pg.k.type, pg.v.type, [&]<KvType KT, KvType VT>() {
    attend_typed<KT, VT>(q, pg, n_keys, hd, scale, scores, out);
  });
}

void attend_paged_tokens(const float* q, int n_tok, int g_heads, int64_t q_stride, const KvPages& pg,
                         const int64_t* n_keys, int hd, int hd_v, float scale, float* scores, float* out,
                         int64_t out_stride, Isa isa, int64_t p_begin, float* stats) {
  bool any = false;
  for (int t = 0; t < n_tok; ++t) {
    if (n_keys[t] > p_begin) { any = true; continue; }
    for (int g = 0; g < g_heads; ++g) {  // attend_paged's zero sum
      const int64_t i = (int64_t)t * g_heads + g;
      std::fill(out + i * out_stride, out + i * out_stride + hd_v, 0.0f);
      if (stats) stats[2 * i] = -INFINITY, stats[2 * i + 1] = 0.0f;
    }
  }
  if (!any) return;
  if (p_begin > 0 || stats) {  // the ranged form: 256-bit or 512-bit tiles only
    if (hd % 8 != 0 || hd_v % 8 != 0) {
      std::fprintf(stderr, "ouro: internal error: attend_paged_tokens over a key range needs hd %% 8 == 0\n");
      std::abort();
    }
  } else if (hd % 8 != 0 || hd_v % 8 != 0) {
    for (int t = 0; t < n_tok; ++t) {
      if (n_keys[t] <= 0) continue;
      for (int g = 0; g < g_heads; ++g) {
        const int64_t i = (int64_t)t * g_heads + g;
        attend_generic(q + i * q_stride, pg, n_keys[t], hd, hd_v, scale, scores, out + i * out_stride);
      }
    }
    return;
  }
  with_kv_types(pg.k.type, pg.v.type, [&]<KvType KT, KvType VT>() {
    attend_tokens_typed<KT, VT>(q, n_tok, g_heads, q_stride, pg, n_keys, p_begin, hd, hd_v, scale, scores, out,
                                out_stride, stats, isa == Isa::kAvx512 && cpu_supports(Isa::kAvx512));
  });
}

}  // namespace ouro
