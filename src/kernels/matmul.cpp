#include "kernels/matmul.h"

#include <immintrin.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/fp16.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace ouro {

void AlignedFree::operator()(void* p) const { std::free(p); }

AlignedPtr aligned_alloc_zero(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  void* p = std::aligned_alloc(64, n);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, n);
  return AlignedPtr(static_cast<uint8_t*>(p));
}

size_t PackedMatrix::bytes() const {
  if (kind == PackedKind::kRows) return rows * src_row_bytes;
  if (kind == PackedKind::kW8) return groups * group_bytes + rows * 8;
  return groups * group_bytes;
}

namespace {

inline float load_scale(const PackedMatrix& m, const uint8_t* p) {
  if (m.f32_scales) { float f; std::memcpy(&f, p, 4); return f; }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

inline void store_scale(const PackedMatrix& m, uint8_t* p, float v) {
  if (m.f32_scales) { std::memcpy(p, &v, 4); return; }
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Where row r's scale of block b sits (kQ4, kQ8): after the step's values, d[16] of block 2j
// then of block 2j+1 (kQ8), or d[16], c[16] of block 2j then of block 2j+1 (kQ4).
inline const uint8_t* scale_ptr(const PackedMatrix& m, int64_t r, int64_t b, bool is_c) {
  const int64_t slot = (m.kind == PackedKind::kQ4 ? 2 * (b % 2) + is_c : b % 2) * 16 + r % 16;
  return m.step(r / m.group_rows, b / 2) + m.value_bytes() + slot * (m.f32_scales ? 4 : 2);
}

// Where value k of row r sits in its step. kQ8: block half, vector (k%32)/4, lane r, byte k%4.
// kQ4: block half, vector (k%32)/8, lane r, byte k%4, the low nibble for (k%8) < 4 (*high = false).
inline size_t value_offset(const PackedMatrix& m, int64_t r, int64_t k, bool* high) {
  const int64_t i = k % 32;
  if (m.kind == PackedKind::kQ8) return (k % 64) / 32 * 512 + i / 4 * 64 + (r % 16) * 4 + i % 4;
  *high = i % 8 >= 4;
  return (k % 64) / 32 * 256 + i / 8 * 64 + (r % 16) * 4 + i % 4;
}

}  // namespace

int PackedMatrix::raw(int64_t r, int64_t k) const {
  const int64_t b = k / 32, i = k % 32;
  const uint8_t* vals = step(r / group_rows, b / 2);
  if (kind == PackedKind::kW8) return (int)(int8_t)vals[(r % 4) * 64 + (b % 2) * 32 + i];
  bool high = false;
  const uint8_t byte = vals[value_offset(*this, r, k, &high)];
  if (kind == PackedKind::kQ8) return (int)(int8_t)(byte ^ 0x80);
  return high ? (byte >> 4) : (byte & 0xf);
}

float PackedMatrix::d(int64_t r, int64_t b) const {
  if (kind == PackedKind::kW8) return rscale[r];
  return load_scale(*this, scale_ptr(*this, r, b, false));
}

float PackedMatrix::c(int64_t r, int64_t b) const {
  return kind == PackedKind::kQ4 ? load_scale(*this, scale_ptr(*this, r, b, true)) : 0.0f;
}

float PackedMatrix::value(int64_t r, int64_t k) const {
  if (kind == PackedKind::kQ8 || kind == PackedKind::kW8) return d(r, k / 32) * (float)raw(r, k);
  return d(r, k / 32) * (float)raw(r, k) + c(r, k / 32);
}

namespace {

// The shape fields every kind shares, and the source it was made from.
PackedMatrix shaped(GgmlType type, const uint8_t* data, int64_t cols, int64_t rows) {
  PackedMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.cols_pad = (cols + 63) / 64 * 64;
  m.nb = m.cols_pad / 32;
  m.nsteps = m.cols_pad / 64;
  m.groups = (rows + 3) / 4;
  m.src_type = type;
  m.src = data;
  m.src_row_bytes = row_bytes(type, cols);
  return m;
}

}  // namespace

PackedMatrix pack_matrix(GgmlType type, const uint8_t* data, int64_t cols, int64_t rows) {
  PackedMatrix m = shaped(type, data, cols, rows);
  const bool q4 = type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ4_K;
  const bool q8 = type == GgmlType::kQ8_0;
  if (!q4 && !q8) return m;
  m.kind = q4 ? PackedKind::kQ4 : PackedKind::kQ8;
  m.f32_scales = type == GgmlType::kQ4_K;
  m.group_rows = 16;
  m.groups = (rows + 15) / 16;
  // Scales for each of the step's two blocks: kQ4 d[16] and c[16], kQ8 d[16].
  m.step_bytes = m.value_bytes() + 2 * (q4 ? 32 : 16) * (m.f32_scales ? 4 : 2);
  m.group_bytes = m.nsteps * m.step_bytes;
  m.q = aligned_alloc_zero(m.groups * m.group_bytes);
  if (q8)  // padding values are s = 0, i.e. u = 0x80
    for (int64_t g = 0; g < m.groups; ++g)
      for (int64_t j = 0; j < m.nsteps; ++j) std::memset(const_cast<uint8_t*>(m.step(g, j)), 0x80, m.value_bytes());

  auto put = [&](int64_t r, int64_t b, const uint8_t* vals32, float d, float c) {
    uint8_t* st = const_cast<uint8_t*>(m.step(r / m.group_rows, b / 2));
    for (int i = 0; i < 32; ++i) {
      bool high = false;
      uint8_t& p = st[value_offset(m, r, 32 * (b % 2) + i, &high)];
      if (!q4) p = vals32[i];
      else p = high ? (uint8_t)((p & 0x0f) | (vals32[i] << 4)) : (uint8_t)((p & 0xf0) | vals32[i]);
    }
    if (q4) store_scale(m, const_cast<uint8_t*>(scale_ptr(m, r, b, true)), c);
    store_scale(m, const_cast<uint8_t*>(scale_ptr(m, r, b, false)), d);
  };
  uint8_t u[32];
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = data + r * m.src_row_bytes;
    if (type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1) {
      const size_t bb = type == GgmlType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ4_1);
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = src + b * bb;
        uint16_t dh, mh = 0;
        std::memcpy(&dh, blk, 2);
        if (type == GgmlType::kQ4_1) std::memcpy(&mh, blk + 2, 2);
        const uint8_t* qs = blk + (type == GgmlType::kQ4_0 ? 2 : 4);
        for (int i = 0; i < 16; ++i) { u[i] = qs[i] & 0xf; u[i + 16] = qs[i] >> 4; }
        const float d = fp16_to_fp32(dh);
        put(r, b, u, d, type == GgmlType::kQ4_0 ? -8.0f * d : fp16_to_fp32(mh));
      }
    } else if (type == GgmlType::kQ4_K) {
      const BlockQ4_K* blk = reinterpret_cast<const BlockQ4_K*>(src);
      for (int64_t k = 0; k < cols / 256; ++k) {
        const float dd = fp16_to_fp32(blk[k].d), dmin = fp16_to_fp32(blk[k].dmin);
        for (int sub = 0; sub < 8; ++sub) {
          uint8_t sc, mn;
          q4k_scale_min(sub, blk[k].scales, &sc, &mn);
          const uint8_t* q = blk[k].qs + 32 * (sub / 2);
          for (int l = 0; l < 32; ++l) u[l] = (sub % 2) ? (q[l] >> 4) : (q[l] & 0xf);
          put(r, k * 8 + sub, u, dd * sc, -dmin * mn);
        }
      }
    } else {  // Q8_0
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(src);
      for (int64_t b = 0; b < cols / 32; ++b) {
        for (int i = 0; i < 32; ++i) u[i] = (uint8_t)(blk[b].qs[i] ^ 0x80);
        put(r, b, u, fp16_to_fp32(blk[b].d), 0);
      }
    }
  }
  return m;
}

PackedMatrix pack_matrix_w8a8(GgmlType type, const uint8_t* data, int64_t cols, int64_t rows, float scale_factor,
                              const float* col_scale) {
  PackedMatrix m = shaped(type, data, cols, rows);
  m.kind = PackedKind::kW8;
  m.step_bytes = 256;
  m.group_bytes = m.nsteps * m.step_bytes;
  m.q = aligned_alloc_zero(m.groups * m.group_bytes);
  m.rscale.assign(m.groups * 4, 0.0f);
  m.rsum.assign(m.groups * 4, 0);
  const TypeTraits* tt = type_traits(type);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    tt->dequant_row(data + r * m.src_row_bytes, row.data(), cols);
    if (col_scale)
      for (int64_t k = 0; k < cols; ++k) row[k] *= col_scale[k];
    float amax = 0;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const int v = (int)std::nearbyint(row[k] * inv);
      uint8_t* st = const_cast<uint8_t*>(m.step(r / 4, k / 64));
      st[(r % 4) * 64 + k % 64] = (uint8_t)(int8_t)v;
      sum += v;
    }
    m.rscale[r] = amax / 127.0f * scale_factor;
    m.rsum[r] = sum;
  }
  return m;
}

void QuantActs::resize(int64_t t, int64_t c, bool pt) {
  per_token = pt;
  if (pt && (int64_t)td.size() < t) td.resize(t);
  T = t;
  cols = c;
  cols_pad = (c + 63) / 64 * 64;
  nb = cols_pad / 32;
  if ((int64_t)qs.size() < T * cols_pad) qs.resize(T * cols_pad);
  if ((int64_t)d.size() < T * nb) { d.resize(T * nb); s.resize(T * nb); qsum.resize(T * nb); }
}

namespace {

// One block of n <= 32 values (the rest of the 32 are zero): the reference loop.
void quantize_block_scalar(const float* x, int64_t n, int8_t* q, float* d, float* s, int32_t* qsum) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float db = amax / 127.0f;
  const float id = amax > 0 ? 127.0f / amax : 0.0f;
  int sum = 0;
  for (int64_t i = 0; i < 32; ++i) {
    const int v = i < n ? (int)std::nearbyint(x[i] * id) : 0;
    q[i] = (int8_t)v;
    sum += v;
  }
  *d = db;
  *s = db * (float)sum;
  *qsum = sum;
}

// A full block of 32 with AVX2, bitwise the scalar loop's results for finite inputs: the max is
// exact in any order, each value goes through the same x * id and rounding in the current mode
// (as nearbyint) then truncation, and the integer sum is exact.
inline void quantize_block32(const float* x, int8_t* q, float* d, float* s, int32_t* qsum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
               v3 = _mm256_loadu_ps(x + 24);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float db = amax / 127.0f;
  const float id = amax > 0 ? 127.0f / amax : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  auto qv = [&](__m256 v) {
    return _mm256_cvttps_epi32(_mm256_round_ps(_mm256_mul_ps(v, vid), _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC));
  };
  const __m256i i0 = qv(v0), i1 = qv(v1), i2 = qv(v2), i3 = qv(v3);
  // int32 -> int8 (|v| <= 127: no saturation); packs work per 128-bit lane, the permute restores order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
  __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, _MM_SHUFFLE(1, 0, 3, 2)));
  t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, _MM_SHUFFLE(2, 3, 0, 1)));
  *d = db;
  *qsum = _mm_cvtsi128_si32(t4);
  *s = db * (float)*qsum;
}

}  // namespace

namespace {

// One token's row quantized with a single scale (kW8's activations); padding is zero.
void quantize_token(const float* x, int64_t cols, int64_t cols_pad, int8_t* q, float* td) {
  __m256 m = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
  alignas(32) float mm[8];
  _mm256_store_ps(mm, m);
  float amax = 0;
  for (float v : mm) amax = std::max(amax, v);
  for (; k < cols; ++k) amax = std::max(amax, std::fabs(x[k]));
  const float id = amax > 0 ? 127.0f / amax : 0.0f;
  *td = amax / 127.0f;
  const __m256 vid = _mm256_set1_ps(id);
  k = 0;
  for (; k + 32 <= cols; k += 32) {
    auto qv = [&](int o) {
      return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + o), vid));  // rounds to nearest even
    };
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qv(0), qv(8)), _mm256_packs_epi32(qv(16), qv(24)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  for (; k < cols; ++k) q[k] = (int8_t)std::nearbyint(x[k] * id);
  for (; k < cols_pad; ++k) q[k] = 0;
}

}  // namespace

void quantize_acts(const float* X, int64_t t0, int64_t t1, QuantActs& qa) {
  if (qa.per_token) {
    for (int64_t t = t0; t < t1; ++t)
      quantize_token(X + t * qa.cols, qa.cols, qa.cols_pad, qa.qs.data() + t * qa.cols_pad, &qa.td[t]);
    return;
  }
  for (int64_t t = t0; t < t1; ++t) {
    const float* x = X + t * qa.cols;
    int8_t* q = qa.qs.data() + t * qa.cols_pad;
    float* d = qa.d.data() + t * qa.nb;
    float* s = qa.s.data() + t * qa.nb;
    int32_t* qsum = qa.qsum.data() + t * qa.nb;
    for (int64_t b = 0; b < qa.nb; ++b) {
      const int64_t k0 = b * 32;
      const int64_t n = std::max<int64_t>(0, std::min<int64_t>(32, qa.cols - k0));
      if (n == 32) quantize_block32(x + k0, q + k0, d + b, s + b, qsum + b);
      else quantize_block_scalar(x + k0, n, q + k0, d + b, s + b, qsum + b);
    }
  }
}

void gemm_rows(const MatmulKernels& k, const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1,
               float* Y, int64_t ldy) {
  switch (W.kind) {
    case PackedKind::kQ4: k.gemm_q4(W, A, r0, r1, Y, ldy); return;
    case PackedKind::kQ8: k.gemm_q8(W, A, r0, r1, Y, ldy); return;
    case PackedKind::kW8: k.gemm_w8(W, A, r0, r1, Y, ldy); return;
    case PackedKind::kRows: {
      // Types without an integer layout: dequantize each row once, then float dot products
      // (AVX2 FMA) with every token's float activations.
      const TypeTraits* tt = type_traits(W.src_type);
      std::vector<float> row(W.cols);
      for (int64_t r = r0; r < r1; ++r) {
        tt->dequant_row(W.src + r * W.src_row_bytes, row.data(), W.cols);
        for (int64_t t = 0; t < A.T; ++t) Y[t * ldy + r] = dot_f32(row.data(), A.x + t * A.cols, W.cols);
      }
      return;
    }
  }
}

OpCost matmul_cost(const PackedMatrix& W, int64_t T) {
  OpCost c;
  c.bytes = (double)W.bytes() + (double)T * (W.cols + 4.0 * W.rows);  // int8 activations in, f32 out
  c.flops = 2.0 * (double)T * W.rows * W.cols;
  return c;
}

void matmul_parallel(const MatmulKernels& k, ThreadPool& pool, const QuantActs& qa, const MatmulJob* jobs, int n_jobs,
                     const char* region) {
  int64_t total = 0;
  for (int j = 0; j < n_jobs; ++j) {
    total += jobs[j].W->rows;
    // A caller's mistake, not bad input: activations quantized for another kind of matrix.
    if (jobs[j].W->kind != PackedKind::kRows && wants_per_token(*jobs[j].W) != qa.per_token) {
      std::fprintf(stderr, "ouro: internal error: %s: a matrix needs %s activations\n", region,
                   qa.per_token ? "per-block" : "per-token");
      std::abort();
    }
  }
  pool.run([&](int t, int nt) {
    int64_t b, e;
    ThreadPool::split(total, t, nt, 16, &b, &e);
    int64_t base = 0;
    for (int j = 0; j < n_jobs; ++j) {
      const int64_t rows = jobs[j].W->rows;
      const int64_t lo = std::max(b, base) - base, hi = std::min(e, base + rows) - base;
      if (lo < hi) gemm_rows(k, *jobs[j].W, qa, lo, hi, jobs[j].Y, jobs[j].ldy);
      base += rows;
    }
  }, region);
}

const MatmulKernels& matmul_kernels(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return matmul_kernels_avx512();
    case Isa::kAvx2: return matmul_kernels_avx2();
    case Isa::kScalar: break;
  }
  return matmul_kernels_scalar();
}

}  // namespace ouro
