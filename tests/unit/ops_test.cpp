#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/ops.h"

using namespace ouro;

TEST(Ops, SoftmaxMatchesDoubleReference) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 8);
  for (int n : {1, 7, 8, 33, 1000}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    std::vector<double> ref(n);
    double mx = -1e300, sum = 0;
    for (float v : x) mx = std::max(mx, (double)v);
    for (int i = 0; i < n; ++i) sum += (ref[i] = std::exp((double)x[i] - mx));
    softmax_inplace(x.data(), n);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(x[i], ref[i] / sum, 1e-6 * (ref[i] / sum) + 1e-9) << n << " " << i;
  }
}

// online_softmax_block over a row cut into blocks (the last one partly masked) ends with the
// float64 softmax: weight w_j of key j in block b is its block's p_j times the factors of the
// blocks after it, over the final sum. Masked keys weigh exactly 0; a block's weights are the same
// bits in a wider block with the same keys (the decompressing MLA form's chunking invariance).
TEST(Ops, OnlineSoftmaxBlocksEqualOneSoftmax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 6);
  const float scale = 0.125f;
  for (int n : {1, 7, 9, 128, 300}) {
    for (int bw : {8, 64, 128}) {
      SCOPED_TRACE(::testing::Message() << "keys " << n << " block " << bw);
      std::vector<float> s(n);
      for (auto& v : s) v = nd(rng);
      double mx = -1e300, sum = 0;
      for (float v : s) mx = std::max(mx, (double)v * scale);
      std::vector<double> ref(n);
      for (int j = 0; j < n; ++j) sum += (ref[j] = std::exp((double)s[j] * scale - mx));
      float m = -INFINITY, l = 0.0f;
      std::vector<double> w(n);
      for (int b0 = 0; b0 < n; b0 += bw) {
        const int cnt = std::min(bw, n - b0);
        std::vector<float> blk(bw, 42.0f);  // past cnt: masked, must come back 0
        std::copy(s.begin() + b0, s.begin() + b0 + cnt, blk.begin());
        const float a = online_softmax_block(blk.data(), cnt, bw, scale, &m, &l);
        if (b0 == 0) {
          EXPECT_EQ(a, 0.0f);
        }
        for (int j = 0; j < b0; ++j) w[j] *= a;
        for (int j = 0; j < cnt; ++j) w[b0 + j] = blk[j];
        for (int j = cnt; j < bw; ++j) ASSERT_EQ(blk[j], 0.0f) << j;
        // The same keys in a block twice as wide, the rest masked: the same bits.
        std::vector<float> wide(2 * bw, -7.0f);
        std::copy(s.begin() + b0, s.begin() + b0 + cnt, wide.begin());
        float m2 = -INFINITY, l2 = 0.0f;
        if (b0 == 0) {
          online_softmax_block(wide.data(), cnt, 2 * bw, scale, &m2, &l2);
          for (int j = 0; j < cnt; ++j) ASSERT_EQ(wide[j], blk[j]) << j;
          EXPECT_EQ(l2, l);
        }
      }
      EXPECT_NEAR(m, mx, 1e-6 * std::fabs(mx) + 1e-7);
      for (int j = 0; j < n; ++j) EXPECT_NEAR(w[j] / l, ref[j] / sum, 2e-6 * (ref[j] / sum) + 1e-9) << j;
    }
  }
}

TEST(Ops, RmsNorm) {
  std::vector<float> x = {1, -2, 3, -4, 5}, w = {1, 2, 1, 2, 1}, y(5);
  rmsnorm(x.data(), w.data(), y.data(), 5, 1e-5f);
  const double rms = std::sqrt((1 + 4 + 9 + 16 + 25) / 5.0 + 1e-5);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(y[i], x[i] / rms * w[i], 1e-6);
}

TEST(Ops, RopeRotatesAdjacentPairs) {
  const int hd = 8, nh = 2;
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = (float)std::pow(10000.0, -2.0 * i / hd);
  std::vector<float> x(nh * hd);
  for (int i = 0; i < nh * hd; ++i) x[i] = (float)(i + 1);
  std::vector<float> orig = x;
  rope_inplace(x.data(), nh, hd, 5, inv.data());
  for (int h = 0; h < nh; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      const double a = 5.0 * inv[i];
      const double x0 = orig[h * hd + 2 * i], x1 = orig[h * hd + 2 * i + 1];
      EXPECT_NEAR(x[h * hd + 2 * i], x0 * std::cos(a) - x1 * std::sin(a), 1e-5);
      EXPECT_NEAR(x[h * hd + 2 * i + 1], x0 * std::sin(a) + x1 * std::cos(a), 1e-5);
    }
}

TEST(Ops, RopeAnglesThenRotateAreRopeInplacesBits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 2);
  const int hd = 64, nh = 9, half = hd / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = (float)std::pow(10000.0, -2.0 * i / hd);
  for (int64_t pos : {0, 1, 17, 4095, 131071}) {
    std::vector<float> a(nh * hd), cs(half), sn(half);
    for (auto& v : a) v = nd(rng);
    std::vector<float> b = a;
    rope_inplace(a.data(), nh, hd, pos, inv.data());
    rope_angles(pos, inv.data(), half, cs.data(), sn.data());
    rope_rotate(b.data(), nh, hd, cs.data(), sn.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size())) << "pos " << pos;
  }
}

// silu(g) * u against float64 over the range a model's gate takes (and past it), every length
// through the 8-wide body and the tail; a value's bits do not depend on its place in the array.
TEST(Ops, SwigluMatchesDoubleReferenceAndIgnoresPlace) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 4);
  for (int n : {1, 3, 7, 8, 9, 16, 23, 1536}) {
    std::vector<float> g(n), u(n), y(n);
    for (int i = 0; i < n; ++i) {
      g[i] = i % 11 == 5 ? (float)((i % 3) - 1) * 60.0f : nd(rng);  // some -60, 0, 60
      u[i] = nd(rng);
    }
    swiglu(g.data(), u.data(), y.data(), n);
    for (int i = 0; i < n; ++i) {
      const double gd = g[i], ref = gd / (1.0 + std::exp(-gd)) * u[i];
      EXPECT_NEAR(y[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << "n " << n << " i " << i << " g " << g[i];
      float one;
      swiglu(&g[i], &u[i], &one, 1);
      ASSERT_EQ(0, std::memcmp(&one, &y[i], sizeof one)) << "n " << n << " i " << i;
    }
  }
  const float g0 = 0.0f, gneg = -0.0f, u1 = 3.0f;
  float y0, yneg;
  swiglu(&g0, &u1, &y0, 1);
  swiglu(&gneg, &u1, &yneg, 1);
  EXPECT_EQ(y0, 0.0f);
  EXPECT_EQ(yneg, 0.0f);
}

TEST(Ops, AttendOneMatchesNaive) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  const int hd = 64, n = 37, stride = 3 * hd;
  std::vector<float> q(hd), k(n * stride), v(n * stride), out(hd), scores(n);
  for (auto& a : q) a = nd(rng);
  for (auto& a : k) a = nd(rng);
  for (auto& a : v) a = nd(rng);
  attend_one(q.data(), k.data(), v.data(), stride, n, hd, 0.125f, scores.data(), out.data());
  std::vector<double> s(n);
  double mx = -1e300, sum = 0;
  for (int p = 0; p < n; ++p) {
    double d = 0;
    for (int i = 0; i < hd; ++i) d += (double)q[i] * k[p * stride + i];
    s[p] = d * 0.125;
    mx = std::max(mx, s[p]);
  }
  for (int p = 0; p < n; ++p) sum += (s[p] = std::exp(s[p] - mx));
  for (int i = 0; i < hd; ++i) {
    double o = 0;
    for (int p = 0; p < n; ++p) o += s[p] / sum * v[p * stride + i];
    EXPECT_NEAR(out[i], o, 1e-5);
  }
}

// rows_times_matrix: every output is one fused multiply-add chain in l's order, so the scalar,
// AVX2 and AVX-512 paths give the same bits, a row's outputs do not depend on the rows computed
// with it (MLA decompresses a key in whichever chunk comes; its values must not change), and the
// sums are within float rounding of a float64 reference. Odd shapes: row tails of the 4-row tiles,
// column tails of the 16- and 64-column ones, strides wider than the rows.
TEST(Ops, RowsTimesMatrixIsOneFmaChainOnEveryIsa) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  struct Shape { int64_t n, k, m; };
  for (Shape s : {Shape{1, 1, 1}, Shape{3, 7, 5}, Shape{4, 512, 128}, Shape{9, 33, 80}, Shape{70, 64, 200}, Shape{5, 512, 64}}) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " k " << s.k << " m " << s.m);
    const int64_t ldx = s.k + 3, ldy = s.m + 5;
    std::vector<float> x(s.n * ldx), w(s.k * s.m);
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    std::vector<float> ref(s.n * ldy, NAN);
    rows_times_matrix(x.data(), s.n, ldx, (int)s.k, w.data(), s.m, ref.data(), ldy, Isa::kScalar);
    for (int64_t j = 0; j < s.n; ++j)
      for (int64_t c = 0; c < s.m; ++c) {
        double d = 0, mag = 0;
        for (int64_t l = 0; l < s.k; ++l) {
          d += (double)x[j * ldx + l] * w[l * s.m + c];
          mag += std::fabs((double)x[j * ldx + l] * w[l * s.m + c]);
        }
        ASSERT_NEAR(ref[j * ldy + c], d, 1e-6 * mag + 1e-30) << j << " " << c;
      }
    std::vector<Isa> isas = {Isa::kAvx2};
    if (isa_supported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
    for (Isa isa : isas) {
      std::vector<float> y(s.n * ldy, NAN);
      rows_times_matrix(x.data(), s.n, ldx, (int)s.k, w.data(), s.m, y.data(), ldy, isa);
      for (int64_t j = 0; j < s.n; ++j)
        ASSERT_EQ(0, std::memcmp(&y[j * ldy], &ref[j * ldy], sizeof(float) * s.m)) << isa_name(isa) << " row " << j;
      // Each row alone, and the rows from an odd offset on: the same bits.
      for (int64_t j0 : {int64_t{0}, s.n / 2 + 1}) {
        if (j0 >= s.n) continue;
        std::vector<float> z((s.n - j0) * ldy, NAN);
        if (j0 == 0)
          for (int64_t j = 0; j < s.n; ++j) rows_times_matrix(&x[j * ldx], 1, ldx, (int)s.k, w.data(), s.m, &z[j * ldy], ldy, isa);
        else
          rows_times_matrix(&x[j0 * ldx], s.n - j0, ldx, (int)s.k, w.data(), s.m, z.data(), ldy, isa);
        for (int64_t j = j0; j < s.n; ++j)
          ASSERT_EQ(0, std::memcmp(&z[(j - j0) * ldy], &ref[j * ldy], sizeof(float) * s.m)) << isa_name(isa) << " row " << j;
      }
    }
  }
}
