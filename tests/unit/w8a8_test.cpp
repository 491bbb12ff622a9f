// W8A8 (PackedKind::kW8): per-row symmetric int8 weights from any GGUF type, per-token int8
// activations, and the gemm_w8 kernels of every ISA family this CPU has, against references
// computed in the test (double / exact integer arithmetic), never from the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/matmul.h"

using namespace ouro;

namespace {

// IEEE binary16 from its definition (independent of core/fp16.h).
double half_ref(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1024.0 + m, e - 25);
  return s ? -v : v;
}

uint16_t half_bits(int sign, int exp, int man) { return (uint16_t)((sign << 15) | (exp << 10) | man); }

// Random Q4_1 rows: d in [2^-10, 2^-1), m of either sign, random nibbles. Returns the data and,
// through `vals`, the exact element values d * q + m (exact in double: halves times 4-bit ints).
std::vector<uint8_t> random_q4_1(int64_t rows, int64_t cols, std::mt19937& rng, std::vector<double>* vals) {
  std::vector<uint8_t> v(rows * cols / 32 * sizeof(BlockQ4_1));
  vals->assign(rows * cols, 0);
  auto* b = reinterpret_cast<BlockQ4_1*>(v.data());
  for (int64_t i = 0; i < rows * cols / 32; ++i) {
    b[i].d = half_bits(0, 5 + (int)(rng() % 9), (int)(rng() % 1024));
    b[i].m = half_bits((int)(rng() & 1), 5 + (int)(rng() % 9), (int)(rng() % 1024));
    for (auto& q : b[i].qs) q = (uint8_t)(rng() & 0xff);
    const double d = half_ref(b[i].d), m = half_ref(b[i].m);
    for (int j = 0; j < 16; ++j) {
      (*vals)[i * 32 + j] = d * (b[i].qs[j] & 0xf) + m;
      (*vals)[i * 32 + j + 16] = d * (b[i].qs[j] >> 4) + m;
    }
  }
  return v;
}

// Round half to even, written out.
long round_half_even(double y) {
  const double f = std::floor(y), frac = y - f;
  if (frac < 0.5) return (long)f;
  if (frac > 0.5) return (long)f + 1;
  return std::fmod(f, 2.0) == 0 ? (long)f : (long)f + 1;
}

// Checks W (packed from rows of exact values `vals`) against per-row symmetric quantization:
// scale = amax / 127, s = round_half_even(x / scale). The packer computes x * (127 / amax) in
// float, so where x / scale lies within 1e-4 of a half step either neighbour is accepted (and
// counted); elsewhere the integer must be exact.
void check_packed(const PackedMatrix& W, const std::vector<double>& vals, int64_t rows, int64_t cols,
                  int* near_ties = nullptr, bool exact_ties = false) {
  ASSERT_EQ(W.kind, PackedKind::kW8);
  ASSERT_EQ(W.rows, rows);
  ASSERT_EQ(W.cols, cols);
  ASSERT_EQ(W.cols_pad % 64, 0);
  ASSERT_GE(W.cols_pad, cols);
  ASSERT_LT(W.cols_pad - cols, 64);
  ASSERT_GE((int64_t)W.rscale.size(), rows);
  ASSERT_GE((int64_t)W.rsum.size(), rows);
  for (int64_t r = 0; r < rows; ++r) {
    double amax = 0;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(vals[r * cols + k]));
    const double scale = amax / 127;
    ASSERT_NEAR(W.rscale[r], scale, 1e-6 * scale) << "row " << r;
    ASSERT_FALSE(std::isnan(W.rscale[r])) << "row " << r;
    int64_t sum = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const int got = W.raw(r, k);
      sum += got;
      ASSERT_GE(got, -127) << r << " " << k;
      ASSERT_LE(got, 127) << r << " " << k;
      ASSERT_EQ(W.d(r, k / 32), W.rscale[r]);
      ASSERT_EQ(W.value(r, k), W.rscale[r] * (float)got) << r << " " << k;
      if (amax == 0) {
        ASSERT_EQ(got, 0) << "zero row " << r;
        continue;
      }
      const double y = vals[r * cols + k] / scale;
      const long want = round_half_even(y);
      const double frac = std::fabs(y - std::floor(y) - 0.5);
      if (!exact_ties && frac < 1e-4) {
        ASSERT_TRUE(got == (long)std::floor(y) || got == (long)std::floor(y) + 1) << r << " " << k << " y " << y;
        if (near_ties) ++*near_ties;
      } else {
        ASSERT_EQ(got, want) << "row " << r << " col " << k << " x " << vals[r * cols + k] << " y " << y;
      }
    }
    ASSERT_EQ(W.rsum[r], sum) << "row " << r;
    // Padding columns hold 0 (they meet zero-padded activations, and rsum excludes them).
    for (int64_t k = cols; k < W.cols_pad; ++k) ASSERT_EQ(W.raw(r, k), 0) << "pad col " << k << " row " << r;
  }
  // Padding rows of the last quad: zero values and scale.
  for (int64_t r = rows; r < W.groups * 4; ++r) {
    EXPECT_EQ(W.rscale[r], 0.0f);
    EXPECT_EQ(W.rsum[r], 0);
    for (int64_t k = 0; k < W.cols_pad; ++k) ASSERT_EQ(W.raw(r, k), 0) << "pad row " << r;
  }
}

std::vector<float> gaussian(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

PackedMatrix pack_f32(const std::vector<float>& w, int64_t rows, int64_t cols, float factor = 1.0f) {
  return pack_matrix_w8a8(GgmlType::kF32, reinterpret_cast<const uint8_t*>(w.data()), cols, rows, factor);
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

struct Family {
  const char* name;
  const MatmulKernels* k;
};

// Every kernel family this CPU can run (the others are not run, as in kernels_test.cpp).
std::vector<Family> families() {
  std::vector<Family> f{{"scalar", &matmul_kernels_scalar()}};
  if (isa_supported(Isa::kAvx2)) f.push_back({"avx2", &matmul_kernels_avx2()});
  if (isa_supported(Isa::kAvx512)) f.push_back({"avx512", &matmul_kernels_avx512()});
  return f;
}

QuantActs quantize_per_token(const std::vector<float>& X, int64_t T, int64_t cols) {
  QuantActs qa;
  qa.resize(T, cols, true);
  qa.x = X.data();
  quantize_acts(X.data(), 0, T, qa);
  return qa;
}

// Exact reference of gemm_w8: the integer dot in int64 over the real columns, scaled in double.
double w8_ref(const PackedMatrix& W, const QuantActs& qa, int64_t r, int64_t t) {
  int64_t isum = 0;
  for (int64_t k = 0; k < W.cols; ++k) isum += (int64_t)W.raw(r, k) * qa.qs[t * qa.cols_pad + k];
  return (double)isum * W.rscale[r] * qa.td[t];
}

}  // namespace

// ---- packing ----------------------------------------------------------------------------------

TEST(W8Pack, FromF32) {
  std::mt19937 rng(1);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{13, 100}, {8, 64}, {5, 576}, {1, 7}}) {
    auto w = gaussian(rows * cols, rng);
    for (int64_t k = 0; k < cols; ++k) w[2 % rows * cols + k] *= 1000.0f;  // a large row
    if (rows > 3) for (int64_t k = 0; k < cols; ++k) w[3 * cols + k] *= 1e-6f;  // a tiny row
    PackedMatrix W = pack_f32(w, rows, cols);
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    check_packed(W, to_double(w), rows, cols);
  }
}

// amax = 127 makes the packer's multiplier exactly 1, so the half steps are exact ties:
// they must round to even (2.5 -> 2, 3.5 -> 4, -2.5 -> -2, ...).
TEST(W8Pack, ExactTiesRoundToEven) {
  const int64_t rows = 2, cols = 64;
  std::vector<float> w(rows * cols);
  for (int64_t k = 0; k < cols; ++k) {
    w[k] = k == 0 ? 127.0f : (float)(k - 32) + 0.5f;       // -31.5 .. 31.5
    w[cols + k] = k == 0 ? -127.0f : (float)((k % 8) - 4) * 1.0f + 0.5f;
  }
  PackedMatrix W = pack_f32(w, rows, cols);
  check_packed(W, to_double(w), rows, cols, nullptr, /*exact_ties=*/true);
  EXPECT_EQ(W.raw(0, 35), 4);    // 3.5
  EXPECT_EQ(W.raw(0, 34), 2);    // 2.5
  EXPECT_EQ(W.raw(0, 29), -2);   // -2.5
  EXPECT_EQ(W.raw(0, 28), -4);   // -3.5
  EXPECT_EQ(W.rscale[0], 1.0f);
}

TEST(W8Pack, FromQ4_1) {
  std::mt19937 rng(2);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{9, 96}, {6, 576}, {4, 32}}) {
    std::vector<double> vals;
    auto data = random_q4_1(rows, cols, rng, &vals);
    PackedMatrix W = pack_matrix_w8a8(GgmlType::kQ4_1, data.data(), cols, rows);
    EXPECT_EQ(W.src_type, GgmlType::kQ4_1);
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    check_packed(W, vals, rows, cols);
  }
}

TEST(W8Pack, AllZeroRow) {
  std::mt19937 rng(3);
  const int64_t rows = 6, cols = 128;
  auto w = gaussian(rows * cols, rng);
  for (int64_t k = 0; k < cols; ++k) w[4 * cols + k] = 0.0f;
  for (int64_t k = 0; k < cols; ++k) w[1 * cols + k] = (k % 2) ? -0.0f : 0.0f;
  PackedMatrix W = pack_f32(w, rows, cols);
  check_packed(W, to_double(w), rows, cols);
  for (int64_t r : {1, 4}) {
    EXPECT_EQ(W.rscale[r], 0.0f);
    EXPECT_EQ(W.rsum[r], 0);
    for (int64_t k = 0; k < cols; ++k) {
      EXPECT_EQ(W.raw(r, k), 0);
      EXPECT_EQ(W.value(r, k), 0.0f);
    }
  }
}

TEST(W8Pack, ScaleFactorMultipliesScalesOnly) {
  std::mt19937 rng(4);
  const int64_t rows = 5, cols = 64;
  auto w = gaussian(rows * cols, rng);
  PackedMatrix A = pack_f32(w, rows, cols), B = pack_f32(w, rows, cols, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(B.rscale[r], 2.0f * A.rscale[r]);
    EXPECT_EQ(B.rsum[r], A.rsum[r]);
    for (int64_t k = 0; k < cols; ++k) EXPECT_EQ(B.raw(r, k), A.raw(r, k));
  }
}

// ---- per-token activations --------------------------------------------------------------------

TEST(W8Acts, PerTokenQuantization) {
  std::mt19937 rng(5);
  for (int64_t cols : {7, 64, 100, 576}) {
    const int64_t T = 4;
    auto X = gaussian(T * cols, rng, 3.0f);
    for (int64_t k = 0; k < cols; ++k) X[2 * cols + k] = 0.0f;  // token 2: all zero
    X[3 * cols + cols / 2] = 500.0f;                             // token 3: one outlier
    QuantActs qa = quantize_per_token(X, T, cols);
    ASSERT_TRUE(qa.per_token);
    ASSERT_EQ(qa.cols_pad % 64, 0);
    for (int64_t t = 0; t < T; ++t) {
      double amax = 0;
      for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs((double)X[t * cols + k]));
      const double td = amax / 127;
      ASSERT_NEAR(qa.td[t], td, 1e-6 * td) << cols << " " << t;
      for (int64_t k = 0; k < qa.cols_pad; ++k) {
        const int got = qa.qs[t * qa.cols_pad + k];
        if (k >= cols || amax == 0) {
          ASSERT_EQ(got, 0) << cols << " t " << t << " k " << k;
          continue;
        }
        const double y = X[t * cols + k] / td;
        if (std::fabs(y - std::floor(y) - 0.5) < 1e-4) {
          ASSERT_TRUE(got == (long)std::floor(y) || got == (long)std::floor(y) + 1) << y;
        } else {
          ASSERT_EQ(got, round_half_even(y)) << cols << " t " << t << " k " << k << " y " << y;
        }
      }
    }
    EXPECT_EQ(qa.td[2], 0.0f);
    EXPECT_EQ(qa.qs[3 * qa.cols_pad + cols / 2], 127);
  }
}

// ---- gemm_w8 ----------------------------------------------------------------------------------

namespace {

struct Shape { int64_t rows, cols, T; };

void check_gemm(const Shape& s, GgmlType src) {
  std::mt19937 rng(100 + (int)s.rows + (int)s.T);
  PackedMatrix W;
  std::vector<uint8_t> q41;
  std::vector<float> wf;
  if (src == GgmlType::kQ4_1) {
    std::vector<double> vals;
    q41 = random_q4_1(s.rows, s.cols, rng, &vals);
    W = pack_matrix_w8a8(GgmlType::kQ4_1, q41.data(), s.cols, s.rows);
  } else {
    wf = gaussian(s.rows * s.cols, rng);
    W = pack_f32(wf, s.rows, s.cols);
  }
  auto X = gaussian(s.T * s.cols, rng);
  if (s.T > 2) for (int64_t k = 0; k < s.cols; ++k) X[1 * s.cols + k] = 0.0f;  // an all-zero token
  QuantActs qa = quantize_per_token(X, s.T, s.cols);
  std::vector<double> ref(s.T * s.rows);
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t r = 0; r < s.rows; ++r) ref[t * s.rows + r] = w8_ref(W, qa, r, t);

  for (const Family& f : families()) {
    SCOPED_TRACE(::testing::Message() << f.name << " " << s.rows << "x" << s.cols << " T " << s.T);
    // Whole matrix, then an uneven split into row ranges that start and end inside row groups.
    const int64_t ldy = s.rows + 3;
    std::vector<float> Y(s.T * ldy, NAN), Z(s.T * ldy, NAN);
    gemm_rows(*f.k, W, qa, 0, s.rows, Y.data(), ldy);
    const int64_t a = std::min<int64_t>(s.rows, 1), b = std::min<int64_t>(s.rows, s.rows / 3 + 2);
    gemm_rows(*f.k, W, qa, 0, a, Z.data(), ldy);
    gemm_rows(*f.k, W, qa, a, b, Z.data(), ldy);
    gemm_rows(*f.k, W, qa, b, s.rows, Z.data(), ldy);
    for (int64_t t = 0; t < s.T; ++t) {
      for (int64_t r = 0; r < s.rows; ++r) {
        const double want = ref[t * s.rows + r];
        const float y = Y[t * ldy + r];
        ASSERT_FALSE(std::isnan(y)) << "t " << t << " r " << r;
        ASSERT_NEAR(y, want, 1e-6 * std::fabs(want) + 1e-30) << "t " << t << " r " << r;
        ASSERT_EQ(Z[t * ldy + r], y) << "split, t " << t << " r " << r;
        if (s.T > 2 && t == 1) {
          ASSERT_EQ(y, 0.0f) << "zero token, r " << r;
        }
      }
      for (int64_t r = s.rows; r < ldy; ++r) ASSERT_TRUE(std::isnan(Y[t * ldy + r])) << "wrote past rows, r " << r;
    }
  }
}

}  // namespace

TEST(W8Gemm, DecodeShape) { check_gemm({37, 576, 1}, GgmlType::kF32); }
TEST(W8Gemm, PrefillShape) { check_gemm({45, 1536, 11}, GgmlType::kF32); }
TEST(W8Gemm, OddStepCount) { check_gemm({9, 96, 5}, GgmlType::kF32); }
TEST(W8Gemm, OneStep) { check_gemm({5, 64, 4}, GgmlType::kF32); }
TEST(W8Gemm, ManyQuads) { check_gemm({130, 576, 17}, GgmlType::kF32); }
TEST(W8Gemm, TwoTokenTail) { check_gemm({11, 192, 6}, GgmlType::kF32); }
TEST(W8Gemm, PaddedCols) { check_gemm({7, 100, 3}, GgmlType::kF32); }
TEST(W8Gemm, TokenChunkBoundary) { check_gemm({6, 128, 70}, GgmlType::kF32); }
TEST(W8Gemm, FromQ4_1) { check_gemm({21, 576, 7}, GgmlType::kQ4_1); }

// A row range inside the matrix that starts and ends inside a quad ([1, 7) and [5, 6)) writes
// exactly those rows, with the full-product values.
TEST(W8Gemm, RowRangesInsideQuads) {
  std::mt19937 rng(9);
  const int64_t rows = 12, cols = 192, T = 5;
  auto w = gaussian(rows * cols, rng);
  PackedMatrix W = pack_f32(w, rows, cols);
  auto X = gaussian(T * cols, rng);
  QuantActs qa = quantize_per_token(X, T, cols);
  for (const Family& f : families()) {
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{1, 7}, {5, 6}, {3, 4}, {4, 8}, {9, 12}}) {
      std::vector<float> Y(T * rows, NAN);
      gemm_rows(*f.k, W, qa, r0, r1, Y.data(), rows);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          const float y = Y[t * rows + r];
          if (r < r0 || r >= r1) {
            ASSERT_TRUE(std::isnan(y)) << f.name << " [" << r0 << "," << r1 << ") wrote row " << r;
          } else {
            const double want = w8_ref(W, qa, r, t);
            ASSERT_NEAR(y, want, 1e-6 * std::fabs(want) + 1e-30) << f.name << " [" << r0 << "," << r1 << ") r " << r;
          }
        }
    }
  }
}

// Quantization error end to end: the W8A8 product of Gaussian data is close to the float product
// of the original weights (int8 steps of amax/127 on both sides give about 1% here).
TEST(W8Gemm, CloseToFloatProduct) {
  std::mt19937 rng(10);
  const int64_t rows = 64, cols = 512, T = 8;
  auto w = gaussian(rows * cols, rng, 0.05f);
  auto X = gaussian(T * cols, rng, 2.0f);
  PackedMatrix W = pack_f32(w, rows, cols);
  QuantActs qa = quantize_per_token(X, T, cols);
  for (const Family& f : families()) {
    std::vector<float> Y(T * rows, NAN);
    gemm_rows(*f.k, W, qa, 0, rows, Y.data(), rows);
    double num = 0, den = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0;
        for (int64_t k = 0; k < cols; ++k) ref += (double)w[r * cols + k] * X[t * cols + k];
        num += (Y[t * rows + r] - ref) * (Y[t * rows + r] - ref);
        den += ref * ref;
      }
    const double rel = std::sqrt(num / den);
    EXPECT_LT(rel, 0.02) << f.name;
    EXPECT_GT(rel, 1e-4) << f.name << ": suspiciously exact for int8";
  }
}

// A token row of zeros has td = 0 and gives exact zeros (no 0 * inf or 0/0), for every family.
TEST(W8Gemm, AllZeroTokenGivesZero) {
  std::mt19937 rng(11);
  const int64_t rows = 9, cols = 96, T = 3;
  auto w = gaussian(rows * cols, rng);
  for (int64_t k = 0; k < cols; ++k) w[2 * cols + k] = 0.0f;  // and an all-zero weight row
  PackedMatrix W = pack_f32(w, rows, cols);
  std::vector<float> X(T * cols, 0.0f);
  for (int64_t k = 0; k < cols; ++k) X[2 * cols + k] = (float)(k % 5) - 2.0f;
  QuantActs qa = quantize_per_token(X, T, cols);
  EXPECT_EQ(qa.td[0], 0.0f);
  EXPECT_EQ(qa.td[1], 0.0f);
  for (int64_t k = 0; k < qa.cols_pad; ++k) ASSERT_EQ(qa.qs[k], 0);
  for (const Family& f : families()) {
    std::vector<float> Y(T * rows, NAN);
    gemm_rows(*f.k, W, qa, 0, rows, Y.data(), rows);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const float y = Y[t * rows + r];
        ASSERT_FALSE(std::isnan(y)) << f.name << " t " << t << " r " << r;
        if (t < 2 || r == 2) {
          ASSERT_EQ(y, 0.0f) << f.name << " t " << t << " r " << r;
        } else {
          ASSERT_NEAR(y, w8_ref(W, qa, r, t), 1e-6 * std::fabs(w8_ref(W, qa, r, t))) << f.name;
        }
      }
  }
}

// amax = 127 makes the activation multiplier exactly 1, so half steps are exact ties: they round
// to even both in the vector body and in the scalar tail (cols 100: 96 + 4).
TEST(W8Acts, ExactTiesRoundToEven) {
  const int64_t cols = 100;
  std::vector<float> X(cols);
  for (int64_t k = 0; k < cols; ++k) X[k] = k == 0 ? -127.0f : (float)((int)(k % 9) - 4) + 0.5f;  // -3.5 .. 4.5
  QuantActs qa = quantize_per_token(X, 1, cols);
  ASSERT_EQ(qa.td[0], 1.0f);
  for (int64_t k = 0; k < cols; ++k)
    ASSERT_EQ(qa.qs[k], round_half_even(X[k])) << "k " << k << " x " << X[k];
}

// A QuantActs reused for a larger per-token batch after a per-block one keeps td sized.
TEST(W8Acts, ResizeFromPerBlockToPerToken) {
  QuantActs qa;
  qa.resize(2, 64);
  std::vector<float> X(5 * 64, 1.0f);
  qa.resize(5, 64, true);
  ASSERT_GE((int64_t)qa.td.size(), 5);
  quantize_acts(X.data(), 0, 5, qa);
  for (int t = 0; t < 5; ++t) EXPECT_EQ(qa.td[t], 1.0f / 127);
  EXPECT_EQ(qa.qs[4 * qa.cols_pad + 63], 127);
}
