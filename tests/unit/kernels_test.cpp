// Packed int8 matmul kernels (every ISA the CPU has) against a float reference computed from the
// scalar dequantization, with an error bound derived from the int8 activation rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

using namespace ouro;

namespace {

// Random blocks of a packed type: random value bytes, then each block's fp16 scale fields set to
// small valid values (Q4_0 / Q8_0: d; Q4_1: d, m; Q4_K: d, dmin, its 6-bit scales random).
std::vector<uint8_t> random_blocks(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> v(rows * row_bytes(type, cols));
  for (auto& b : v) b = (uint8_t)(rng() & 0xff);
  const int64_t per_block = type == GgmlType::kQ4_K ? 256 : 32;
  const size_t bb = row_bytes(type, per_block);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (size_t o = 0; o < v.size(); o += bb) {
    const uint16_t d = fp32_to_fp16(type == GgmlType::kQ4_K ? 0.0001f + 0.001f * (float)(rng() % 100) / 100
                                                            : 0.001f + 0.01f * (float)(rng() % 100) / 100);
    std::memcpy(&v[o], &d, 2);
    if (type == GgmlType::kQ4_1 || type == GgmlType::kQ4_K) {
      const uint16_t m = fp32_to_fp16(type == GgmlType::kQ4_K ? std::fabs(u(rng)) * 0.01f : u(rng));
      std::memcpy(&v[o + 2], &m, 2);
    }
  }
  return v;
}

struct Case { GgmlType type; int64_t rows, cols, T; };

void check_all_isas(const Case& c) {
  std::mt19937 rng(42 + (int)c.rows + (int)c.T);
  auto data = random_blocks(c.type, c.rows, c.cols, rng);
  PackedMatrix W = pack_matrix(c.type, data.data(), c.cols, c.rows);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> X(c.T * c.cols);
  for (auto& x : X) x = nd(rng);
  QuantActs qa;
  qa.resize(c.T, c.cols);
  qa.x = X.data();
  quantize_acts(X.data(), 0, c.T, qa);

  // Reference: dequantized weights times the float activations, in double.
  std::vector<float> wrow(c.cols);
  std::vector<double> ref(c.T * c.rows), bound(c.T * c.rows);
  for (int64_t r = 0; r < c.rows; ++r) {
    type_traits(c.type)->dequant_row(data.data() + r * row_bytes(c.type, c.cols), wrow.data(), c.cols);
    for (int64_t t = 0; t < c.T; ++t) {
      double acc = 0, err = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        acc += (double)wrow[k] * X[t * c.cols + k];
        // |x - d*q| <= d/2 per element from rounding to int8
        err += std::fabs(wrow[k]) * 0.5 * qa.d[t * qa.nb + k / 32];
      }
      ref[t * c.rows + r] = acc;
      bound[t * c.rows + r] = err * 1.0001 + 1e-4;
    }
  }
  std::vector<float> scalar_out(c.T * c.rows);
  gemm_rows(matmul_kernels_scalar(), W, qa, 0, c.rows, scalar_out.data(), c.rows);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_LE(std::fabs(scalar_out[i] - ref[i]), bound[i]) << "scalar, index " << i;

  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    std::vector<float> out(c.T * c.rows, NAN);
    // Split rows unevenly to exercise the tile edges.
    const int64_t mid = c.rows / 3 + 1;
    gemm_rows(matmul_kernels(isa), W, qa, 0, mid, out.data(), c.rows);
    gemm_rows(matmul_kernels(isa), W, qa, mid, c.rows, out.data(), c.rows);
    // Whole-block integer dots and one FMA per term and block, in block order, on every ISA: the
    // same bits as the scalar reference.
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], scalar_out[i]) << isa_name(isa) << ", index " << i;
  }
}

}  // namespace

TEST(Matmul, Q4_1DecodeShapes) { check_all_isas({GgmlType::kQ4_1, 37, 576, 1}); }
TEST(Matmul, Q4_1PrefillShapes) { check_all_isas({GgmlType::kQ4_1, 45, 1536, 11}); }
TEST(Matmul, Q4_1OddBlockCount) { check_all_isas({GgmlType::kQ4_1, 9, 96, 5}); }
TEST(Matmul, Q4_0RowGroupsAndTokenTiles) { check_all_isas({GgmlType::kQ4_0, 70, 320, 19}); }
// Q4_K: f32 scales (d * scale products are not exact in fp16).
TEST(Matmul, Q4_KRowGroupsAndTokenTiles) { check_all_isas({GgmlType::kQ4_K, 35, 512, 11}); }
TEST(Matmul, Q8_0Decode) { check_all_isas({GgmlType::kQ8_0, 33, 576, 1}); }
TEST(Matmul, Q8_0Prefill) { check_all_isas({GgmlType::kQ8_0, 21, 160, 7}); }
// Several groups of 16 rows with a partial last one, 8-token tiles and a remainder of 3.
TEST(Matmul, Q8_0RowGroupsAndTokenTiles) { check_all_isas({GgmlType::kQ8_0, 70, 320, 19}); }
// An odd block count: the step's second block is padding.
TEST(Matmul, Q8_0OddBlockCount) { check_all_isas({GgmlType::kQ8_0, 17, 96, 9}); }

TEST(Matmul, ParallelJobsMatchSerial) {
  std::mt19937 rng(7);
  auto a = random_blocks(GgmlType::kQ4_1, 40, 128, rng), b = random_blocks(GgmlType::kQ4_1, 24, 128, rng);
  PackedMatrix A = pack_matrix(GgmlType::kQ4_1, a.data(), 128, 40), B = pack_matrix(GgmlType::kQ4_1, b.data(), 128, 24);
  std::vector<float> X(3 * 128);
  for (auto& x : X) x = (float)((int)(rng() % 200) - 100) / 50;
  QuantActs qa;
  qa.resize(3, 128);
  quantize_acts(X.data(), 0, 3, qa);
  const MatmulKernels& k = matmul_kernels(best_isa());
  std::vector<float> ya(3 * 40), yb(3 * 24), sa(3 * 40), sb(3 * 24);
  ThreadPool pool(3);
  MatmulJob jobs[] = {{&A, ya.data(), 40}, {&B, yb.data(), 24}};
  matmul_parallel(k, pool, qa, jobs, 2);
  gemm_rows(k, A, qa, 0, 40, sa.data(), 40);
  gemm_rows(k, B, qa, 0, 24, sb.data(), 24);
  EXPECT_EQ(ya, sa);
  EXPECT_EQ(yb, sb);
}

TEST(QuantizeActs, AllZeroBlockAndOutlier) {
  std::vector<float> x(64, 0.0f);
  x[40] = 1000.0f;
  x[41] = 1.0f;
  QuantActs qa;
  qa.resize(1, 64);
  quantize_acts(x.data(), 0, 1, qa);
  EXPECT_EQ(qa.d[0], 0.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(qa.qs[i], 0);
  EXPECT_EQ(qa.qs[40], 127);
  EXPECT_FLOAT_EQ(qa.d[1], 1000.0f / 127);
  EXPECT_EQ(qa.qs[41], 0);  // 1.0 is below half a step of 1000/127
}

// quantize_acts (AVX2 for full blocks of 32) against the plain per-element loop, bitwise:
// random values, exact ties at half steps, all-zero blocks, partial last blocks.
TEST(QuantizeActs, BitwiseEqualToScalarLoop) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0, 1);
  for (int64_t cols : {5, 32, 40, 64, 100, 576, 1536}) {
    const int64_t T = 3;
    std::vector<float> X(T * cols);
    for (auto& x : X) x = nd(rng) * (rng() % 4 == 0 ? 30.0f : 1.0f);
    for (int64_t i = 0; i < std::min<int64_t>(cols, 32); ++i) X[cols + i] = 0.0f;  // token 1: a zero block
    if (cols >= 64)  // token 2, block 1: amax 127, so x * id = x and the half steps are exact ties
      for (int64_t i = 0; i < 32; ++i) X[2 * cols + 32 + i] = i == 0 ? 127.0f : (float)((int)(rng() % 254) - 127) + 0.5f;
    QuantActs qa;
    qa.resize(T, cols);
    quantize_acts(X.data(), 0, T, qa);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < qa.nb; ++b) {
        const int64_t k0 = b * 32, n = std::max<int64_t>(0, std::min<int64_t>(32, cols - k0));
        const float* x = &X[t * cols + k0];
        float amax = 0;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float db = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int64_t i = 0; i < 32; ++i) {
          const int v = i < n ? (int)std::nearbyint(x[i] * id) : 0;
          ASSERT_EQ(qa.qs[t * qa.cols_pad + k0 + i], (int8_t)v) << cols << " " << t << " " << b << " " << i;
          sum += v;
        }
        ASSERT_EQ(qa.d[t * qa.nb + b], db);
        ASSERT_EQ(qa.s[t * qa.nb + b], db * (float)sum);
        ASSERT_EQ(qa.qsum[t * qa.nb + b], sum);
      }
  }
}
