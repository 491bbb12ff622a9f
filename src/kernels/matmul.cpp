#include "kernels/matmul.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/fp16.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace ouro {

void AlignedFree::operator()(void* p) const { std::free(p); }

AlignedPtr aligned_alloc_zero(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  void* p = std::aligned_alloc(64, n);
  OURO_ASSERT(p != nullptr);
  std::memset(p, 0, n);
  return AlignedPtr(static_cast<uint8_t*>(p));
}

size_t PackedMatrix::bytes() const {
  switch (kind) {
    case PackedKind::kQ4: return rows * (cols_pad / 2 + 2 * nb * sizeof(float));
    case PackedKind::kQ8: return rows * (cols_pad + 2 * nb * sizeof(float));
    case PackedKind::kRows: return rows * src_row_bytes;
  }
  return 0;
}

namespace {

// Writes 32 unsigned 4-bit values of block b into the pair-interleaved nibble layout.
void put_q4_block(uint8_t* row_nibbles, int64_t b, const uint8_t* u32) {
  uint8_t* p = row_nibbles + (b / 2) * 32;
  const bool high = b % 2;
  for (int i = 0; i < 32; ++i) p[i] = high ? (uint8_t)((p[i] & 0x0f) | (u32[i] << 4)) : (uint8_t)((p[i] & 0xf0) | u32[i]);
}

}  // namespace

PackedMatrix pack_matrix(GgmlType type, const uint8_t* data, int64_t cols, int64_t rows) {
  PackedMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.cols_pad = (cols + 63) / 64 * 64;
  m.nb = m.cols_pad / 32;
  m.src_type = type;
  m.src = data;
  m.src_row_bytes = row_bytes(type, cols);
  const bool q4 = type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ4_K;
  const bool q8 = type == GgmlType::kQ8_0;
  if (!q4 && !q8) return m;
  m.kind = q4 ? PackedKind::kQ4 : PackedKind::kQ8;
  m.q = aligned_alloc_zero(rows * (q4 ? m.cols_pad / 2 : m.cols_pad));
  m.d = aligned_alloc_zero(rows * m.nb * sizeof(float));
  m.c = aligned_alloc_zero(rows * m.nb * sizeof(float));
  uint8_t u[32];
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = data + r * m.src_row_bytes;
    uint8_t* qrow = m.q.get() + r * (q4 ? m.cols_pad / 2 : m.cols_pad);
    float* d = reinterpret_cast<float*>(m.d.get()) + r * m.nb;
    float* c = reinterpret_cast<float*>(m.c.get()) + r * m.nb;
    if (type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1) {
      const size_t bb = type == GgmlType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ4_1);
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = src + b * bb;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const uint8_t* qs = blk + (type == GgmlType::kQ4_0 ? 2 : 4);
        for (int i = 0; i < 16; ++i) { u[i] = qs[i] & 0xf; u[i + 16] = qs[i] >> 4; }
        put_q4_block(qrow, b, u);
        d[b] = fp16_to_fp32(dh);
        if (type == GgmlType::kQ4_0) {
          c[b] = -8.0f * d[b];
        } else {
          uint16_t mh;
          std::memcpy(&mh, blk + 2, 2);
          c[b] = fp16_to_fp32(mh);
        }
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
          const int64_t b = k * 8 + sub;
          put_q4_block(qrow, b, u);
          d[b] = dd * sc;
          c[b] = -dmin * mn;
        }
      }
    } else {  // Q8_0
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(src);
      for (int64_t b = 0; b < cols / 32; ++b) {
        for (int i = 0; i < 32; ++i) qrow[b * 32 + i] = (uint8_t)(blk[b].qs[i] ^ 0x80);
        d[b] = fp16_to_fp32(blk[b].d);
        c[b] = -128.0f * d[b];
      }
      for (int64_t i = cols; i < m.cols_pad; ++i) qrow[i] = 0x80;  // padding: s = 0
    }
  }
  return m;
}

void QuantActs::resize(int64_t t, int64_t c) {
  T = t;
  cols = c;
  cols_pad = (c + 63) / 64 * 64;
  nb = cols_pad / 32;
  if ((int64_t)qs.size() < T * cols_pad) qs.resize(T * cols_pad);
  if ((int64_t)d.size() < T * nb) { d.resize(T * nb); s.resize(T * nb); }
}

void quantize_acts(const float* X, int64_t t0, int64_t t1, QuantActs& qa) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* x = X + t * qa.cols;
    int8_t* q = qa.qs.data() + t * qa.cols_pad;
    float* d = qa.d.data() + t * qa.nb;
    float* s = qa.s.data() + t * qa.nb;
    for (int64_t b = 0; b < qa.nb; ++b) {
      const int64_t k0 = b * 32;
      const int64_t n = std::max<int64_t>(0, std::min<int64_t>(32, qa.cols - k0));
      float amax = 0;
      for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[k0 + i]));
      const float db = amax / 127.0f;
      const float id = amax > 0 ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int64_t i = 0; i < 32; ++i) {
        const int v = i < n ? (int)std::nearbyint(x[k0 + i] * id) : 0;
        q[k0 + i] = (int8_t)v;
        sum += v;
      }
      d[b] = db;
      s[b] = db * (float)sum;
    }
  }
}

void gemm_rows(const MatmulKernels& k, const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1,
               float* Y, int64_t ldy) {
  switch (W.kind) {
    case PackedKind::kQ4: k.gemm_q4(W, A, r0, r1, Y, ldy); return;
    case PackedKind::kQ8: k.gemm_q8(W, A, r0, r1, Y, ldy); return;
    case PackedKind::kRows: {
      const TypeTraits* tt = type_traits(W.src_type);
      std::vector<float> row(W.cols);
      for (int64_t r = r0; r < r1; ++r) {
        tt->dequant_row(W.src + r * W.src_row_bytes, row.data(), W.cols);
        for (int64_t t = 0; t < A.T; ++t) {
          const float* x = A.x + t * A.cols;
          double acc = 0;  // rows are a rare, slow path: keep it simple and accurate
          for (int64_t i = 0; i < W.cols; ++i) acc += (double)row[i] * x[i];
          Y[t * ldy + r] = (float)acc;
        }
      }
      return;
    }
  }
}

void matmul_parallel(const MatmulKernels& k, ThreadPool& pool, const QuantActs& qa, const MatmulJob* jobs, int n_jobs) {
  int64_t total = 0;
  for (int j = 0; j < n_jobs; ++j) total += jobs[j].W->rows;
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
  });
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
