#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/sampler.h"

using namespace ouro;

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(s.sample(l.data(), 4, {}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 99;
  std::vector<float> base(50);
  for (int i = 0; i < 50; ++i) base[i] = std::sin((float)i);
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int> out;
    for (int i = 0; i < 40; ++i) { auto l = base; out.push_back(s.sample(l.data(), 50, {})); }
    return out;
  };
  EXPECT_EQ(run(99), run(99));
  EXPECT_NE(run(99), run(100));
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f; p.top_k = 0; p.top_p = 1.0f; p.min_p = 0; p.seed = 5;
  Sampler s(p);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = {0.0f, std::log(2.0f)};  // probabilities 1/3, 2/3
    ones += s.sample(l.data(), 2, {}) == 1;
  }
  // 2/3 with a standard deviation of sqrt(n * 2/9) ~ 67: allow 5 sigma.
  EXPECT_NEAR(ones, n * 2.0 / 3.0, 5 * std::sqrt(n * 2.0 / 9.0));
}

TEST(Sampler, TopKOneAndMinPAndTopPCut) {
  SamplingParams p;
  p.temperature = 1.0f; p.top_k = 1; p.top_p = 1.0f; p.min_p = 0;
  {
    Sampler s(p);
    for (int i = 0; i < 100; ++i) { std::vector<float> l = {1, 5, 4.9f}; EXPECT_EQ(s.sample(l.data(), 3, {}), 1); }
  }
  p.top_k = 0; p.min_p = 0.5f;  // token 2 has probability e^-3 relative: cut
  {
    Sampler s(p);
    for (int i = 0; i < 200; ++i) { std::vector<float> l = {5, 5, 2}; EXPECT_NE(s.sample(l.data(), 3, {}), 2); }
  }
  p.min_p = 0; p.top_p = 0.5f;  // the top token alone holds > 0.5
  {
    Sampler s(p);
    for (int i = 0; i < 200; ++i) { std::vector<float> l = {10, 0, 0}; EXPECT_EQ(s.sample(l.data(), 3, {}), 0); }
  }
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplingParams p;
  p.temperature = 0; p.repeat_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {3.0f, 2.0f};
  EXPECT_EQ(s.sample(l.data(), 2, {0}), 1);  // 3/2 = 1.5 < 2
}

TEST(Sampler, ValidateRejectsOutOfRange) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_FALSE(p.validate().ok());
  p = {};
  p.temperature = -1;
  EXPECT_FALSE(p.validate().ok());
}

TEST(Sampler, ArgmaxMatchesScanIncludingTiesAndTails) {
  std::mt19937 rng(9);
  for (int n : {1, 7, 16, 17, 33, 49152}) {
    std::vector<float> x(n);
    for (auto& v : x) v = (float)(rng() % 1000) / 10;  // many ties
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (x[i] > x[best]) best = i;
    EXPECT_EQ(argmax(x.data(), n), best) << n;
    x[n - 1] = 1e9f;  // the maximum in the scalar tail
    EXPECT_EQ(argmax(x.data(), n), n - 1) << n;
  }
  std::vector<float> nan(20, 1.0f);
  nan[3] = 5.0f;
  nan[0] = NAN;
  EXPECT_EQ(argmax(nan.data(), 20), 3);
}
