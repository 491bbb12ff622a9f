// The lab's trust checks (src/lab/trust.cpp) on made-up runs, one trick at a time, and the pipe
// process the lab times workers through (src/lab/pipe_process.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>

#include "lab/pipe_process.h"
#include "lab/trust.h"

using namespace ouro::lab;

namespace {

// Five pairs of three timed requests each; spec and held-out inputs alternate; noise of ~2%.
TrustInput honest(uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0, 0.02);
  TrustInput in;
  for (int i = 0; i < 5; ++i)
    for (int side = 0; side < 2; ++side) {
      TrustRun r;
      for (int k = 0; k < 3; ++k) {
        const bool held = (i + k) % 3 == 0;
        const std::string key = held ? "heldout:" + std::to_string(100 + i * 3 + k) : "spec:" + std::to_string(k % 2);
        const int j = held ? 100 + i * 3 + k : k % 2;  // an input's answer depends on the input only
        TrustSlot s{key, held, {j, j + 1, j + 2}, "", {{"decode_tok_s", 100 * std::exp(n(rng))}}};
        r.slots.push_back(s);
      }
      r.lab["decode_tok_s"] = 100 * std::exp(n(rng));
      r.self["decode_tok_s"] = r.lab["decode_tok_s"] * (1 + 1e-4 * n(rng));
      r.cpu_cores = 1.98;
      (side ? in.cand : in.base).push_back(r);
    }
  for (int side = 0; side < 2; ++side)
    for (int k = 0; k < 2; ++k) in.checked[side]["spec:" + std::to_string(k)] = tokens_key({k, k + 1, k + 2});
  in.checked_all_equal = true;
  in.allowed_cores = 2;
  in.bench_self[0]["decode_tok_s"] = {120, 118, 125};
  in.bench_self[1]["decode_tok_s"] = {121, 117, 124};
  return in;
}

// By value: the checks are usually a temporary.
TrustCheck get(const std::vector<TrustCheck>& v, const std::string& code) {
  for (const auto& c : v)
    if (c.code == code) return c;
  return {"?", "missing", ""};
}

}  // namespace

TEST(Trust, HonestRunsPassEveryCheck) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto v = check_trust(honest(seed));
    for (const auto& c : v) EXPECT_NE(c.verdict, "fail") << seed << " " << c.code << ": " << c.detail;
    EXPECT_EQ(get(v, "heldout_speed_differs").verdict, "pass");
  }
}

TEST(Trust, InflatedSelfReportIsAMismatch) {
  TrustInput in = honest();
  for (auto& r : in.cand) r.self["decode_tok_s"] *= 1.3;
  const TrustCheck c = get(check_trust(in), "measurement_mismatch");
  EXPECT_EQ(c.verdict, "fail") << c.detail;
  EXPECT_FALSE(c.baseline_at_fault);
  EXPECT_NE(c.detail.find("1.3x"), std::string::npos) << c.detail;
}

TEST(Trust, InflatedBenchIsAMismatchAndANoisyOneIsNot) {
  TrustInput in = honest();
  in.bench_self[1]["decode_tok_s"] = {1.3 * 121, 1.3 * 117, 1.3 * 124};
  EXPECT_EQ(get(check_trust(in), "measurement_mismatch").verdict, "fail");
  in.bench_self[1]["decode_tok_s"] = {1.1 * 121, 1.1 * 117, 1.1 * 124};  // within the 15% floor
  EXPECT_EQ(get(check_trust(in), "measurement_mismatch").verdict, "pass");
  // Drift between bench pairs cancels: both sides 30% slower in the last pair is no lie.
  in.bench_self[0]["decode_tok_s"] = {120, 118, 84};
  in.bench_self[1]["decode_tok_s"] = {121, 117, 85};
  EXPECT_EQ(get(check_trust(in), "measurement_mismatch").verdict, "pass");
}

// The lab's clock between each bench process's markers names the lie process by process, even when
// the bench pairs are too noisy for the pair check (the adversary that went unnamed in CI).
TEST(Trust, InflatedBenchIsNamedByItsMarkersWhateverThePairNoise) {
  TrustInput in = honest();
  // Pairs 40% apart either way: the pair check's tolerance grows past the lie.
  in.bench_self[0]["decode_tok_s"] = {120, 70, 125, 80, 118, 130};
  const std::vector<double> cand_true = {80, 118, 84, 125, 121, 75};
  in.bench_lab[0]["decode_tok_s"] = {119, 70.5, 124, 79.6, 118.5, 129};
  in.bench_lab[1]["decode_tok_s"] = cand_true;
  in.bench_self[1]["decode_tok_s"].clear();
  for (double v : cand_true) in.bench_self[1]["decode_tok_s"].push_back(v * 1.003);
  TrustCheck c = get(check_trust(in), "measurement_mismatch");
  EXPECT_EQ(c.verdict, "pass") << c.detail;  // honest, noisy: no mismatch
  for (auto& v : in.bench_self[1]["decode_tok_s"]) v *= 1.3;
  c = get(check_trust(in), "measurement_mismatch");
  EXPECT_EQ(c.verdict, "fail") << c.detail;
  EXPECT_FALSE(c.baseline_at_fault);
  EXPECT_NE(c.detail.find("between its markers): the candidate's own timing says 1.3"), std::string::npos) << c.detail;
  // A candidate that takes --markers and prints none cannot be checked: that fails too.
  in.bench_self[1]["decode_tok_s"] = cand_true;
  in.bench_lab[1]["decode_tok_s"].assign(6, NAN);
  c = get(check_trust(in), "measurement_mismatch");
  EXPECT_EQ(c.verdict, "fail") << c.detail;
  EXPECT_NE(c.detail.find("printed none"), std::string::npos) << c.detail;
  // A candidate without markers (its bench rejected the flag): the pair check only, and said.
  in.bench_lab[1].clear();
  c = get(check_trust(in), "measurement_mismatch");
  EXPECT_EQ(c.verdict, "pass") << c.detail;
  EXPECT_NE(c.detail.find("rejected --markers"), std::string::npos) << c.detail;
  // A baseline without markers (a revision from before them): only the pair check applies.
  in.bench_lab[0].clear();
  in.bench_lab[1].clear();
  EXPECT_EQ(get(check_trust(in), "measurement_mismatch").verdict, "pass");
}

TEST(Trust, ABaselineThatLiesMakesTheRunUnjudgeable) {
  TrustInput in = honest();
  for (auto& r : in.base) r.self["decode_tok_s"] *= 1.3;
  const TrustCheck c = get(check_trust(in), "measurement_mismatch");
  EXPECT_EQ(c.verdict, "fail");
  EXPECT_TRUE(c.baseline_at_fault);
}

TEST(Trust, TimedOutputsMustBeTheCheckedOnes) {
  TrustInput in = honest();
  in.cand[2].slots[1].tokens = {9, 9, 9};  // a spec input answered differently while timed
  const TrustCheck c = get(check_trust(in), "timed_outputs_differ");
  EXPECT_EQ(c.verdict, "fail") << c.detail;
  EXPECT_NE(c.detail.find("pair 3"), std::string::npos) << c.detail;
}

TEST(Trust, HeldOutTimedOutputsMustMatchTheBaselineWhenTheCheckedOnesDid) {
  TrustInput in = honest();
  for (auto& s : in.cand[1].slots)
    if (s.heldout) s.tokens = {7};
  EXPECT_EQ(get(check_trust(in), "timed_outputs_differ").verdict, "fail");
  in.checked_all_equal = false;  // a candidate whose numerics legitimately differ: criteria decide
  EXPECT_EQ(get(check_trust(in), "timed_outputs_differ").verdict, "pass");
}

// A run of the lab, 2026-12-07: an int8 KV cache answered one fresh held-out input of 6 differently
// from the baseline, its checked answers having matched by chance. The lab reruns such a pair
// untimed (runner.cpp); where both sides' checked answers differ too, it is the candidate's
// numerics; where the candidate's checked answer is the baseline's, its timed one was a trick.
TEST(Trust, ATimedDifferenceTheRecheckReproducesIsNumericsNotATrick) {
  TrustInput in = honest();
  TrustSlot& s = in.cand[1].slots[2];
  ASSERT_TRUE(s.heldout);
  s.tokens = {7};
  EXPECT_EQ(get(check_trust(in), "timed_outputs_differ").verdict, "fail");
  in.checked[0][s.key] = tokens_key(in.base[1].slots[2].tokens);
  in.checked[1][s.key] = tokens_key({7});  // the recheck: the candidate answers 7 untimed too
  TrustCheck c = get(check_trust(in), "timed_outputs_differ");
  EXPECT_EQ(c.verdict, "pass") << c.detail;
  EXPECT_NE(c.detail.find("1 differ from the baseline's where both sides' checked runs"), std::string::npos) << c.detail;
  in.checked[1][s.key] = in.checked[0][s.key];  // untimed it gives the baseline's answer
  c = get(check_trust(in), "timed_outputs_differ");
  EXPECT_EQ(c.verdict, "fail") << c.detail;
  EXPECT_NE(c.detail.find("1 timed output(s) differ from the candidate's own checked"), std::string::npos) << c.detail;
}

TEST(Trust, ANonReproducibleBaselineIsItsOwnFault) {
  TrustInput in = honest();
  in.base[0].slots[1].tokens = {5, 5};
  const TrustCheck c = get(check_trust(in), "timed_outputs_differ");
  EXPECT_EQ(c.verdict, "fail");
  EXPECT_TRUE(c.baseline_at_fault);
}

TEST(Trust, FastOnlyOnTheSpecsInputsIsCaught) {
  TrustInput in = honest();
  for (auto& r : in.cand)
    for (auto& s : r.slots)
      if (!s.heldout) s.lab["decode_tok_s"] *= 5;
  EXPECT_EQ(get(check_trust(in), "heldout_speed_differs").verdict, "fail");
  // A real, uniform 10% speed-up is not.
  in = honest();
  for (auto& r : in.cand)
    for (auto& s : r.slots) s.lab["decode_tok_s"] *= 1.1;
  EXPECT_EQ(get(check_trust(in), "heldout_speed_differs").verdict, "pass");
}

// CI, 2026-12-06: an honest candidate (1.7x faster everywhere) timed on one request per run, 3 on
// spec inputs and 2 held out whose ratios happened to lie close together. Four Welch standard
// errors rested on those two and failed it; the pooled sd with Student's t does not, and a
// memorising candidate in the same shape is still caught.
TEST(Trust, FewHeldOutRequestsDoNotFailAnHonestSpeedUp) {
  const double spec[] = {1.66, 1.74, 1.83}, held[] = {1.53, 1.555};
  auto make = [&](double seen_gain) {
    TrustInput in;
    for (int i = 0; i < 5; ++i) {
      const bool h = i == 1 || i == 3;
      const double r = h ? held[i / 2] : spec[i / 2] * seen_gain;
      for (int side = 0; side < 2; ++side) {
        TrustRun run;
        run.slots.push_back(TrustSlot{h ? "heldout:" + std::to_string(i) : "spec:1", h, {1}, "", {{"prefill_tok_s", side ? 100 * r : 100}}});
        (side ? in.cand : in.base).push_back(run);
      }
    }
    return get(check_trust(in), "heldout_speed_differs");
  };
  const TrustCheck honest_c = make(1.0);
  EXPECT_EQ(honest_c.verdict, "pass") << honest_c.detail;
  EXPECT_EQ(make(600.0).verdict, "fail");
}

TEST(Trust, KernelLevelSpeedIsLowerIsBetter) {
  TrustInput in = honest();
  for (int side = 0; side < 2; ++side)
    for (auto& r : side ? in.cand : in.base)
      for (auto& s : r.slots) {
        const double v = s.lab["decode_tok_s"];
        s.lab = {{"ns_per_op", 1e6 / v / ((side && !s.heldout) ? 4 : 1)}};  // 4x faster on spec inputs
      }
  EXPECT_EQ(get(check_trust(in), "heldout_speed_differs").verdict, "fail");
}

TEST(Trust, MoreCoresThanThreadsIsOveruse) {
  TrustInput in = honest();
  in.allowed_cores = 1;
  EXPECT_EQ(get(check_trust(in), "cpu_overuse").verdict, "fail");
  in.allowed_cores = 0;
  EXPECT_EQ(get(check_trust(in), "cpu_overuse").verdict, "skipped");
}

TEST(PipeProcess, StampsArrivalsAndSeesHangsAndExits) {
  PipeProcess p;
  ProcLimits lim;
  lim.timeout_s = 30;
  ASSERT_TRUE(p.start({"/bin/sh", "-c", "read x; echo got $x; sleep 0.3; echo late; read y; exit 3"}, {"PATH=/bin:/usr/bin"}, "", lim).ok());
  ASSERT_TRUE(p.send("hello"));
  const auto t0 = LabClock::now();
  auto a = p.read_line(t0 + std::chrono::seconds(10));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->text, "got hello");
  auto b = p.read_line(t0 + std::chrono::seconds(10));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->text, "late");
  EXPECT_GE(std::chrono::duration<double>(b->arrived - a->arrived).count(), 0.25);
  // Nothing more comes until input closes: a short deadline passes.
  EXPECT_FALSE(p.read_line(LabClock::now() + std::chrono::milliseconds(100)));
  EXPECT_TRUE(p.timed_out());
  ProcResult r = p.finish(5);
  EXPECT_TRUE(r.timed_out);  // a read passed its deadline: the group was killed
  PipeProcess q;
  ASSERT_TRUE(q.start({"/bin/sh", "-c", "read x; exit 3"}, {"PATH=/bin:/usr/bin"}, "", lim).ok());
  ProcResult s = q.finish(5);  // closing stdin ends its read; it exits 3
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_FALSE(s.timed_out);
}
