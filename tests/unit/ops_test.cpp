#include <gtest/gtest.h>

#include <cmath>
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
