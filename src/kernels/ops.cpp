#include "kernels/ops.h"
#include "kernels/simd_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace ouro {

namespace {


// exp(x) for x <= 0 (softmax arguments after max subtraction): range reduction x = n ln2 + r,
// |r| <= ln2/2, degree-6 polynomial; relative error about 2e-7 (tested against std::exp).
inline __m256 exp256_nonpos(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace

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

void rope_inplace(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq) {
  float cs[256], sn[256];
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double a = (double)pos * inv_freq[i];
    cs[i] = (float)std::cos(a);
    sn[i] = (float)std::sin(a);
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + (int64_t)h * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cs[i] - b * sn[i];
      v[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void softmax_inplace(float* x, int64_t n) {
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
}

void attend_one(const float* q, const float* k, const float* v, int64_t stride, int64_t n_keys, int head_dim,
                float scale, float* scores, float* out) {
  const int block0 = 0;
  attend_paged(q, k, v, KvPages{&block0, std::max<int64_t>(n_keys, 1), 0, stride}, n_keys, head_dim, scale, scores, out);
}

void attend_paged(const float* q, const float* k, const float* v, const KvPages& pg, int64_t n_keys, int head_dim,
                  float scale, float* scores, float* out) {
  // Visits the keys block by block: fn(first position, rows in this block, row offset of its first row).
  auto for_blocks = [&](auto&& fn) {
    for (int64_t p0 = 0, b = 0; p0 < n_keys; p0 += pg.block_size, ++b)
      fn(p0, std::min(pg.block_size, n_keys - p0), (int64_t)pg.blocks[b] * pg.block_floats);
  };
  for_blocks([&](int64_t p0, int64_t n, int64_t off) {
    for (int64_t r = 0; r < n; ++r) scores[p0 + r] = dot_f32(q, k + off + r * pg.stride, head_dim) * scale;
  });
  softmax_inplace(scores, n_keys);
  for (int i = 0; i < head_dim; ++i) out[i] = 0;
  if (head_dim % 8 == 0 && head_dim <= 256) {
    __m256 acc[32];
    const int nv = head_dim / 8;
    for (int c = 0; c < nv; ++c) acc[c] = _mm256_setzero_ps();
    for_blocks([&](int64_t p0, int64_t n, int64_t off) {
      for (int64_t r = 0; r < n; ++r) {
        const __m256 w = _mm256_set1_ps(scores[p0 + r]);
        const float* vp = v + off + r * pg.stride;
        for (int c = 0; c < nv; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 8 * c), acc[c]);
      }
    });
    for (int c = 0; c < nv; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
    return;
  }
  for_blocks([&](int64_t p0, int64_t n, int64_t off) {
    for (int64_t r = 0; r < n; ++r)
      for (int i = 0; i < head_dim; ++i) out[i] += scores[p0 + r] * v[off + r * pg.stride + i];
  });
}

}  // namespace ouro
