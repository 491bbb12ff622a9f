// KDA kernels (kernels/kda.h) against a double-precision reference written here from the equations
// (S as a [key][value] matrix of doubles, each step spelled out), and the chunked form against the
// recurrent one at chunk boundaries, with the state carried across calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "kernels/kda.h"

using namespace ouro;

namespace {

// T tokens of one head with realistic statistics: q, k unit-norm, g <= 0 (most channels slow, a
// few fast, some very fast to exercise exp underflow), beta in (0, 1).
struct Inputs {
  int64_t T;
  int dk, dv;
  std::vector<float> q, k, v, g, beta;
  Inputs(int64_t T_, int dk_, int dv_, uint32_t seed, float g_min = -2.0f) : T(T_), dk(dk_), dv(dv_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0, 1);
    std::uniform_real_distribution<float> ud(0, 1);
    q.resize(T * dk), k.resize(T * dk), v.resize(T * dv), g.resize(T * dk), beta.resize(T);
    for (auto& x : q) x = nd(rng);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    for (int64_t t = 0; t < T; ++t) {
      l2norm_inplace(&q[t * dk], dk, 1e-5f);
      l2norm_inplace(&k[t * dk], dk, 1e-5f);
      beta[t] = 0.05f + 0.9f * ud(rng);
      for (int c = 0; c < dk; ++c) {
        const float u = ud(rng);
        g[t * dk + c] = u < 0.02f ? -30.0f * ud(rng) : g_min * u * u * u;
      }
    }
  }
  KdaHead head(float* o, int64_t from = 0) const {
    KdaHead h;
    h.q = q.data() + from * dk, h.k = k.data() + from * dk, h.v = v.data() + from * dv;
    h.g = g.data() + from * dk, h.beta = beta.data() + from, h.o = o;
    h.qk_stride = dk, h.g_stride = dk, h.v_stride = dv, h.beta_stride = 1, h.o_stride = dv;
    return h;
  }
};

// The recurrence in doubles, from REFERENCE.md §1.1.
std::vector<double> reference(const Inputs& in, float scale, std::vector<double>& S) {
  std::vector<double> out(in.T * in.dv);
  for (int64_t t = 0; t < in.T; ++t) {
    std::vector<double> pred(in.dv, 0.0);
    for (int c = 0; c < in.dk; ++c)
      for (int j = 0; j < in.dv; ++j) {
        S[c * in.dv + j] *= std::exp((double)in.g[t * in.dk + c]);
        pred[j] += S[c * in.dv + j] * in.k[t * in.dk + c];
      }
    for (int c = 0; c < in.dk; ++c)
      for (int j = 0; j < in.dv; ++j)
        S[c * in.dv + j] += in.k[t * in.dk + c] * in.beta[t] * (in.v[t * in.dv + j] - pred[j]);
    for (int j = 0; j < in.dv; ++j) {
      double o = 0;
      for (int c = 0; c < in.dk; ++c) o += S[c * in.dv + j] * in.q[t * in.dk + c];
      out[t * in.dv + j] = o * scale;
    }
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (double)std::abs(a[i] - b[i]));
  return m;
}

void run_chunked(const Inputs& in, int64_t from, int64_t n, float scale, int chunk, std::vector<float>& S,
                 std::vector<float>& o) {
  std::vector<float> scratch(kda_chunked_scratch(in.dk, in.dv, chunk));
  kda_chunked(in.head(o.data() + from * in.dv, from), n, in.dk, in.dv, scale, chunk, S.data(), scratch.data());
}

}  // namespace

// Outputs are O(1) (unit q, k; v ~ N(0,1); scale 1/sqrt(dk)) and the state stays bounded, so fp32
// errors of a few 1e-5 absolute after 1000 tokens are rounding; a wrong step gives O(0.1) or more.
constexpr double kTol = 2e-4;

TEST(Kda, RecurrentMatchesDoubleReference) {
  for (auto [T, dk, dv] : {std::tuple{37, 128, 128}, {20, 40, 24}, {5, 1, 3}}) {
    Inputs in(T, dk, dv, 7 + T);
    const float scale = 1.0f / std::sqrt((float)dk);
    std::vector<float> S(dk * dv, 0.0f), o(T * dv);
    std::vector<double> Sd(dk * dv, 0.0);
    kda_recurrent(in.head(o.data()), T, dk, dv, scale, S.data());
    const auto ref = reference(in, scale, Sd);
    EXPECT_LT(max_abs_diff(o, ref), kTol) << T << " " << dk << " " << dv;
    std::vector<double> Sf(S.begin(), S.end());
    double ms = 0;
    for (size_t i = 0; i < S.size(); ++i) ms = std::max(ms, std::abs(Sf[i] - Sd[i]));
    EXPECT_LT(ms, kTol);
  }
}

TEST(Kda, ChunkedEqualsRecurrentAtEveryBoundary) {
  const int dk = 128, dv = 128;
  const float scale = 1.0f / std::sqrt((float)dk);
  for (int chunk : {16, 64}) {
    for (int64_t T : {1, 15, 16, 17, 63, 64, 65, 1000}) {
      Inputs in(T, dk, dv, 100 + (uint32_t)T);
      std::vector<float> S1(dk * dv, 0.0f), S2(dk * dv, 0.0f), o1(T * dv), o2(T * dv);
      kda_recurrent(in.head(o1.data()), T, dk, dv, scale, S1.data());
      run_chunked(in, 0, T, scale, chunk, S2, o2);
      EXPECT_LT(max_abs_diff(o1, o2), kTol) << "chunk " << chunk << " T " << T;
      EXPECT_LT(max_abs_diff(S1, S2), kTol) << "chunk " << chunk << " T " << T;
    }
  }
}

TEST(Kda, StateCarriesAcrossCalls) {
  // prefill 700 then 300 == prefill 1000, for both forms, and the chunked split at 700 (not a
  // chunk multiple) equals the recurrent run over all 1000.
  const int dk = 64, dv = 96, T = 1000;
  const float scale = 0.125f;
  Inputs in(T, dk, dv, 11);
  std::vector<float> Sr(dk * dv, 0.0f), or_(T * dv);
  kda_recurrent(in.head(or_.data()), T, dk, dv, scale, Sr.data());

  std::vector<float> Sa(dk * dv, 0.0f), oa(T * dv);
  run_chunked(in, 0, 700, scale, 64, Sa, oa);
  run_chunked(in, 700, 300, scale, 64, Sa, oa);
  EXPECT_LT(max_abs_diff(oa, or_), kTol);
  EXPECT_LT(max_abs_diff(Sa, Sr), kTol);

  std::vector<float> Sb(dk * dv, 0.0f), ob(T * dv);
  kda_recurrent(in.head(ob.data()), 700, dk, dv, scale, Sb.data());
  kda_recurrent(in.head(ob.data() + 700 * dv, 700), 300, dk, dv, scale, Sb.data());
  EXPECT_EQ(max_abs_diff(ob, or_), 0.0);  // the same operations in the same order
  // Decode after a chunked prefill: one recurrent token from the chunked state.
  std::vector<float> Sc(dk * dv, 0.0f), oc(T * dv);
  run_chunked(in, 0, T - 1, scale, 16, Sc, oc);
  kda_recurrent(in.head(oc.data() + (T - 1) * dv, T - 1), 1, dk, dv, scale, Sc.data());
  EXPECT_LT(max_abs_diff(oc, or_), kTol);
}

TEST(Kda, ExtremeDecayStaysFinite) {
  // Every channel forgets almost everything each step (g = -80): exp underflows to 0 in both forms
  // and outputs reduce to the current token's own write, never inf or NaN.
  const int dk = 32, dv = 32, T = 70;
  Inputs in(T, dk, dv, 5);
  for (auto& x : in.g) x = -80.0f;
  std::vector<float> S1(dk * dv, 0.0f), S2(dk * dv, 0.0f), o1(T * dv), o2(T * dv);
  kda_recurrent(in.head(o1.data()), T, dk, dv, 0.5f, S1.data());
  run_chunked(in, 0, T, 0.5f, 64, S2, o2);
  for (float x : o2) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(max_abs_diff(o1, o2), 1e-5);
  // o_t = scale * beta_t (q_t . k_t) v_t when the state before t is wiped.
  const int t = 40;
  double qk = 0;
  for (int c = 0; c < dk; ++c) qk += in.q[t * dk + c] * in.k[t * dk + c];
  for (int j = 0; j < dv; ++j) EXPECT_NEAR(o1[t * dv + j], 0.5 * in.beta[t] * qk * in.v[t * dv + j], 1e-5);
}

TEST(Kda, ShortConvWindowHandOffAtEveryBoundary) {
  const int C = 24, K = 4, T = 19;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(T * C), w(C * K), win0((K - 1) * C);
  for (auto& a : x) a = nd(rng);
  for (auto& a : w) a = nd(rng);
  for (auto& a : win0) a = nd(rng);
  // Reference in doubles: the sequence (window ++ x), taps oldest first.
  std::vector<double> seq((K - 1 + T) * C);
  for (int i = 0; i < K - 1; ++i)
    for (int c = 0; c < C; ++c) seq[i * C + c] = win0[i * C + c];
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) seq[(K - 1 + t) * C + c] = x[t * C + c];
  std::vector<double> ref(T * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int i = 0; i < K; ++i) s += w[c * K + i] * seq[(t + i) * C + c];
      ref[t * C + c] = s / (1 + std::exp(-s));
    }
  // One call, then every split into two calls and a split into single tokens.
  for (int split = 0; split <= T; ++split) {
    std::vector<float> win = win0, y(T * C);
    short_conv_silu(x.data(), C, split, C, w.data(), K, win.data(), y.data(), C);
    short_conv_silu(x.data() + split * C, C, T - split, C, w.data(), K, win.data(), y.data() + split * C, C);
    EXPECT_LT(max_abs_diff(y, ref), 1e-5) << split;
    for (int i = 0; i < K - 1; ++i)
      for (int c = 0; c < C; ++c) EXPECT_EQ(win[i * C + c], x[(T - K + 1 + i) * C + c]) << split;
  }
  std::vector<float> win = win0, y(T * C);
  for (int t = 0; t < T; ++t) short_conv_silu(x.data() + t * C, C, 1, C, w.data(), K, win.data(), y.data() + t * C, C);
  EXPECT_LT(max_abs_diff(y, ref), 1e-5);
}

TEST(Kda, L2NormEpsilonIsAFloorOnTheNorm) {
  // ggml's l2_norm: x / max(||x||, eps).
  std::vector<float> x = {3, 4};
  l2norm_inplace(x.data(), 2, 1e-5f);  // ||x|| = 5 above eps
  EXPECT_FLOAT_EQ(x[0], 0.6f);
  EXPECT_FLOAT_EQ(x[1], 0.8f);
  std::vector<float> y = {3, 4};
  l2norm_inplace(y.data(), 2, 10.0f);  // the floor: divided by 10, not by 5 or sqrt(25 + 10)
  EXPECT_FLOAT_EQ(y[0], 0.3f);
  EXPECT_FLOAT_EQ(y[1], 0.4f);
  std::vector<float> z = {0, 0, 0};
  l2norm_inplace(z.data(), 3, 1e-6f);
  for (float a : z) EXPECT_EQ(a, 0.0f);
}

// ---- the vector families against the scalar reference, at odd shapes, on every ISA the CPU has

namespace {

std::vector<const KdaKernels*> vector_families() {
  std::vector<const KdaKernels*> f;
  if (isa_supported(Isa::kAvx2)) f.push_back(&kda_kernels_avx2());
  if (isa_supported(Isa::kAvx512)) f.push_back(&kda_kernels_avx512());
  return f;
}

}  // namespace

TEST(KdaFamilies, DispatchPicksTheFamilyOfTheIsa) {
  EXPECT_STREQ(kda_kernels(Isa::kScalar).name, "scalar");
  EXPECT_STREQ(kda_kernels(Isa::kAvx2).name, "avx2");
  EXPECT_STREQ(kda_kernels(Isa::kAvx512).name, "avx512");
  EXPECT_FALSE(vector_families().empty()) << "the build's floor is AVX2";
}

TEST(KdaFamilies, RecurrentMatchesScalarAtOddShapes) {
  for (const KdaKernels* fam : vector_families()) {
    for (auto [T, dk, dv] : {std::tuple{5, 1, 3}, {9, 7, 9}, {17, 33, 17}, {37, 128, 128}, {3, 130, 131}, {64, 16, 16}}) {
      Inputs in(T, dk, dv, 21 + T + dk);
      const float scale = 1.0f / std::sqrt((float)dk);
      std::vector<float> S0(dk * dv), S1, o0(T * dv), o1(T * dv, 7.0f);
      std::mt19937 rng(dk);
      std::normal_distribution<float> nd(0, 0.1f);
      for (auto& x : S0) x = nd(rng);  // a state carried from an earlier call
      S1 = S0;
      kda_recurrent(in.head(o0.data()), T, dk, dv, scale, S0.data());
      fam->recurrent(in.head(o1.data()), T, dk, dv, scale, S1.data());
      EXPECT_LT(max_abs_diff(o1, o0), 1e-5) << fam->name << " T " << T << " dk " << dk << " dv " << dv;
      EXPECT_LT(max_abs_diff(S1, S0), 1e-5) << fam->name << " T " << T << " dk " << dk << " dv " << dv;
    }
  }
}

TEST(KdaFamilies, ConvSiluMatchesScalarAtOddShapesAndSplits) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0, 3.0f);  // sums well past |s| = 10, both signs
  for (const KdaKernels* fam : vector_families()) {
    for (int C : {1, 7, 8, 9, 17, 33, 256}) {
      for (int K : {1, 2, 4}) {
        const int T = 19, stride = C + 5;  // rows wider than the channels, as in a fused projection
        std::vector<float> x(T * stride), w(C * K), win0((K - 1) * C);
        for (auto& a : x) a = nd(rng);
        for (auto& a : w) a = nd(rng) / 3;
        for (auto& a : win0) a = nd(rng);
        for (int split : {0, 1, 2, 7, T}) {
          std::vector<float> wa = win0, wb = win0, ya(T * C), yb(T * C);
          short_conv_silu(x.data(), stride, split, C, w.data(), K, wa.data(), ya.data(), C);
          short_conv_silu(x.data() + split * stride, stride, T - split, C, w.data(), K, wa.data(), ya.data() + split * C, C);
          fam->conv_silu(x.data(), stride, split, C, w.data(), K, wb.data(), yb.data(), C);
          fam->conv_silu(x.data() + split * stride, stride, T - split, C, w.data(), K, wb.data(), yb.data() + split * C, C);
          double rel = 0;
          for (size_t i = 0; i < ya.size(); ++i) rel = std::max(rel, std::abs(ya[i] - yb[i]) / (1.0 + std::abs(ya[i])));
          EXPECT_LT(rel, 2e-6) << fam->name << " C " << C << " K " << K << " split " << split;
          EXPECT_EQ(wa, wb) << fam->name << " C " << C << " K " << K << " split " << split;
        }
      }
    }
    // Far outside the polynomial's comfort: silu(+-100) = 100 and -0, never inf or NaN.
    std::vector<float> x = {100.0f, -100.0f, 0.0f}, w = {1, 1, 1}, y(3), win;
    fam->conv_silu(x.data(), 3, 1, 3, w.data(), 1, win.data(), y.data(), 3);
    EXPECT_FLOAT_EQ(y[0], 100.0f) << fam->name;
    EXPECT_NEAR(y[1], 0.0f, 1e-30) << fam->name;
    EXPECT_EQ(y[2], 0.0f) << fam->name;
  }
}

TEST(KdaFamilies, L2NormMatchesScalar) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0, 1);
  for (const KdaKernels* fam : vector_families()) {
    for (int n : {1, 7, 15, 16, 17, 128, 129}) {
      std::vector<float> a(n);
      for (auto& v : a) v = nd(rng);
      std::vector<float> b = a;
      l2norm_inplace(a.data(), n, 1e-5f);
      fam->l2norm(b.data(), n, 1e-5f);
      EXPECT_LT(max_abs_diff(a, b), 1e-6) << fam->name << " n " << n;
    }
    std::vector<float> y = {3, 4};
    fam->l2norm(y.data(), 2, 10.0f);  // the floor
    EXPECT_FLOAT_EQ(y[0], 0.3f) << fam->name;
  }
}
