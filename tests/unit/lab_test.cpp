// The lab's pieces that need no build or model: criteria expressions, statistics, spec parsing,
// and the process runner's limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "lab/expr.h"
#include "lab/process.h"
#include "lab/spec.h"
#include "lab/stats.h"

namespace fs = std::filesystem;
using namespace ouro::lab;

namespace {

double eval(const std::string& text, std::map<std::string, double> vars = {}) {
  auto e = parse_expr(text);
  EXPECT_TRUE(e.ok()) << text << ": " << (e.ok() ? "" : e.error().message);
  if (!e) return NAN;
  return eval_expr(**e, [&](const std::string& n) { return vars.count(n) ? vars[n] : NAN; });
}

std::string parse_error(const std::string& text) {
  auto e = parse_expr(text);
  return e.ok() ? "" : e.error().message;
}

}  // namespace

TEST(LabExpr, ArithmeticPrecedenceAndLogic) {
  EXPECT_DOUBLE_EQ(eval("1 + 2 * 3"), 7);
  EXPECT_DOUBLE_EQ(eval("(1 + 2) * 3"), 9);
  EXPECT_DOUBLE_EQ(eval("-2 * -3"), 6);
  EXPECT_DOUBLE_EQ(eval("10 / 4 - 1"), 1.5);
  EXPECT_DOUBLE_EQ(eval("1e-3 * 1000"), 1);
  EXPECT_DOUBLE_EQ(eval("abs(-2) + max(1, 3) + min(1, 3)"), 6);
  EXPECT_EQ(eval("1 < 2 and 2 < 3"), 1);
  EXPECT_EQ(eval("1 < 2 and 3 < 2"), 0);
  EXPECT_EQ(eval("1 > 2 or 2 >= 2"), 1);
  EXPECT_EQ(eval("not 1 > 2"), 1);
  EXPECT_EQ(eval("1 > 2 || !(2 != 2) && 1 == 1"), 1);
  EXPECT_EQ(eval("candidate.x >= 0.95 * baseline.x", {{"candidate.x", 96}, {"baseline.x", 100}}), 1);
  EXPECT_EQ(eval("candidate.x >= 0.95 * baseline.x", {{"candidate.x", 94}, {"baseline.x", 100}}), 0);
  // A comparison with NaN (a missing figure) is false, also through !=.
  EXPECT_EQ(eval("missing >= 0"), 0);
  EXPECT_EQ(eval("missing != 0"), 0);
}

TEST(LabExpr, NamesAndShape) {
  auto e = parse_expr("candidate.a >= baseline.a and correctness.heldout.top1_agreement == 1 and candidate.a > 0");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(expr_names(**e), (std::vector<std::string>{"candidate.a", "baseline.a", "correctness.heldout.top1_agreement"}));
  EXPECT_TRUE((*e)->is_bool());
  auto f = parse_expr("candidate.a * 2");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->is_bool());
  auto g = parse_expr("candidate.a <= 2 * baseline.a");
  ASSERT_TRUE(g.ok());
  ASSERT_NE(comparison_lhs(**g), nullptr);
  EXPECT_EQ(to_string(*comparison_rhs(**g)), "(2 * baseline.a)");
}

TEST(LabExpr, MalformedExpressionsNameThePlace) {
  EXPECT_NE(parse_error(""), "");
  EXPECT_NE(parse_error("candidate.x >="), "");
  EXPECT_NE(parse_error("candidate.x = 1").find("'=='"), std::string::npos);
  EXPECT_NE(parse_error("(1 < 2"), "");
  EXPECT_NE(parse_error("1 < 2)").find("column 6"), std::string::npos);
  EXPECT_NE(parse_error("1 < 2 < 3").find("chained"), std::string::npos);
  EXPECT_NE(parse_error("sqrt(2) > 1").find("unknown function"), std::string::npos);
  EXPECT_NE(parse_error("candidate..x > 1"), "");
  EXPECT_NE(parse_error("candidate.x. > 1"), "");
  EXPECT_NE(parse_error("1 > 2 $"), "");
  EXPECT_NE(parse_error("2x > 1"), "");
  EXPECT_NE(parse_error("max(1) > 0"), "");
  EXPECT_NE(parse_error(std::string(5000, '(')), "");
}

TEST(LabExpr, FuzzNeverCrashes) {
  const std::string alphabet = "candidte.x0123456789 +-*/()<>=!&|,e";
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int n = rng() % 30;
    for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    auto e = parse_expr(s);
    if (e) eval_expr(**e, [](const std::string&) { return 1.0; });
  }
}

// The exact Mann-Whitney p-value against brute-force enumeration of every split of the pooled
// sample (an independent computation of the same null distribution), with and without ties (a tie
// across the groups counts 1/2 in U).
TEST(LabStats, MannWhitneyExactMatchesEnumeration) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const bool tied = trial % 2 == 1;  // values drawn from a few levels: many ties
    const int n1 = 3 + rng() % 4, n2 = 3 + rng() % 4;
    auto draw = [&](double lo, double hi) {
      const double x = std::uniform_real_distribution<>(lo, hi)(rng);
      return tied ? std::floor(x * 4) : x;
    };
    std::vector<double> a, b, all;
    for (int i = 0; i < n1; ++i) a.push_back(draw(0, 1));
    for (int i = 0; i < n2; ++i) b.push_back(draw(0.2, 1.2));
    all = a;
    all.insert(all.end(), b.begin(), b.end());
    auto u_of = [&](const std::vector<int>& pick) {
      double u = 0;
      for (int i = 0; i < n1 + n2; ++i)
        if (pick[i])
          for (int j = 0; j < n1 + n2; ++j)
            if (!pick[j]) u += all[i] > all[j] ? 1.0 : all[i] == all[j] ? 0.5 : 0.0;
      return u;
    };
    std::vector<int> observed(n1 + n2, 0);
    std::fill(observed.begin(), observed.begin() + n1, 1);
    const double mean = n1 * n2 / 2.0, u_obs = u_of(observed);
    std::vector<int> pick(n1 + n2, 0);
    std::fill(pick.end() - n1, pick.end(), 1);
    int extreme = 0, total = 0;
    do {
      ++total;
      extreme += std::fabs(u_of(pick) - mean) >= std::fabs(u_obs - mean) - 1e-9;
    } while (std::next_permutation(pick.begin(), pick.end()));
    EXPECT_NEAR(mann_whitney_p(a, b), (double)extreme / total, 1e-12) << "n1=" << n1 << " n2=" << n2 << " tied=" << tied;
  }
  // Completely separated samples of 5 and 5: p = 2 / C(10, 5), ties inside a group or not (the lab
  // once called a 156x slower candidate "no change" when two baseline samples tied).
  EXPECT_NEAR(mann_whitney_p({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}), 2.0 / 252, 1e-12);
  EXPECT_NEAR(mann_whitney_p({1, 2, 2, 4, 5}, {600, 700, 800, 900, 900}), 2.0 / 252, 1e-12);
}

TEST(LabStats, MannWhitneyAllTiedAndLargeSamples) {
  EXPECT_NEAR(mann_whitney_p({1, 1, 1}, {1, 1, 1}), 1.0, 1e-12);
  const double p = mann_whitney_p({1, 1, 2, 2, 3, 3, 3, 3}, {5, 5, 6, 6, 7, 7, 8, 8});
  EXPECT_NEAR(p, 2.0 / 12870, 1e-12);  // complete separation of 8 and 8
  // Beyond 30 a side: the normal approximation, still finding a clear shift.
  std::vector<double> lo, hi;
  for (int i = 0; i < 40; ++i) { lo.push_back(i % 7); hi.push_back(5 + i % 7); }
  const double pn = mann_whitney_p(lo, hi);
  EXPECT_LT(pn, 1e-6);
  EXPECT_GT(pn, 0.0);
}

TEST(LabStats, RatioStatsFindsChangesAndNotNoise) {
  std::mt19937 rng(11);
  std::normal_distribution<> noise(0, 0.01);
  std::vector<double> base, same, slower;
  for (int i = 0; i < 10; ++i) {
    base.push_back(100 * (1 + noise(rng)));
    same.push_back(100 * (1 + noise(rng)));
    slower.push_back(90 * (1 + noise(rng)));
  }
  RatioStats s = ratio_stats(base, slower, 0.02);
  EXPECT_STREQ(s.change, "lower");
  EXPECT_NEAR(s.ratio, 0.9, 0.02);
  EXPECT_LT(s.ci_hi, 1.0);
  EXPECT_GT(s.ci_lo, 0.85);
  RatioStats n = ratio_stats(base, same, 0.02);
  EXPECT_STREQ(n.change, "none");
  EXPECT_LT(n.ci_lo, n.ratio);
  EXPECT_GT(n.ci_hi, n.ratio);
  // A real but tiny change stays "none" under the minimum effect.
  std::vector<double> tiny;
  for (double x : base) tiny.push_back(x * 1.005);
  EXPECT_STREQ(ratio_stats(base, tiny, 0.02).change, "none");
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(percentile({0, 10}, 0.25), 2.5);
}

TEST(LabStats, StudentTQuantileMatchesTables) {
  // Printed tables (two-sided 95% / 99%, one-sided 95%) and the normal limit.
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.776, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.995, 10), 3.169, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.95, 30), 1.697, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.975, 1e6), 1.960, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.025, 4), -2.776, 1e-3);
  EXPECT_TRUE(std::isnan(student_t_quantile(1.0, 3)));
}

TEST(LabStats, TrimmedIntervalByHand) {
  // logs 1..5: g = 1, trimmed mean 3, Winsorized logs {2,2,3,4,4} (sd 1), se = 1 / (0.6 sqrt 5),
  // df = 2, t(0.975, 2) = 4.303.
  std::vector<double> x;
  for (int i = 1; i <= 5; ++i) x.push_back(std::exp((double)i));
  const LogInterval r = log_trimmed_interval(x, 0.025);
  const double se = 1 / (0.6 * std::sqrt(5.0));
  EXPECT_NEAR(r.point, std::exp(3.0), 1e-9);
  EXPECT_NEAR(std::log(r.lo), 3 - 4.303 * se, 1e-3);
  EXPECT_NEAR(std::log(r.hi), 3 + 4.303 * se, 1e-3);
  // One wild value among five identical ones is trimmed away: the interval collapses on 1.
  const LogInterval t = log_trimmed_interval({1, 1, 1, 1, 40}, 0.005);
  EXPECT_DOUBLE_EQ(t.point, 1);
  EXPECT_DOUBLE_EQ(t.lo, 1);
  EXPECT_DOUBLE_EQ(t.hi, 1);
  // Too little or unusable data: unbounded, never a confident claim.
  EXPECT_TRUE(std::isinf(log_trimmed_interval({2}, 0.005).hi));
  EXPECT_TRUE(std::isinf(log_trimmed_interval({2, 0, 3}, 0.005).hi));
  EXPECT_TRUE(std::isinf(paired_ratio_interval({0, 1}, {1, 1}, 0.005).hi));
}

// The runner's sequential procedure for one criterion `candidate <= 1.05 * baseline` on ratios:
// judged at 5 pairs, then every 2 more up to 15, pass/fail only when the decision interval and
// the point agree. Returns 'p', 'f' or 'i'.
char sequential_verdict(std::mt19937& rng, double true_ratio, double log_sd, double burst_p = 0) {
  std::normal_distribution<> noise(0, log_sd);
  std::uniform_real_distribution<> u(0, 1);
  std::vector<double> base, cand;
  for (int n = 1; n <= 15; ++n) {
    double lr = std::log(true_ratio) + noise(rng);
    if (u(rng) < burst_p) lr += (u(rng) < 0.5 ? 1 : -1) * std::log(1.3);
    base.push_back(1);
    cand.push_back(std::exp(lr));
    if (n < 5 || n % 2 == 0) continue;
    const LogInterval r = paired_ratio_interval(base, cand, kDecisionAlpha);
    if (r.point <= 1.05 && r.hi <= 1.05) return 'p';
    if (r.point > 1.05 && r.lo > 1.05) return 'f';
  }
  return 'i';
}

TEST(LabStats, SequentialVerdictsKeepFalseAlarmsRare) {
  // Monte Carlo of the decision rule (docs/lab.md, "What a verdict promises"): identical sides
  // are almost never rejected however noisy the machine; a quiet machine decides in few pairs;
  // real regressions are rejected.
  std::mt19937 rng(2026);
  auto rate = [&](char want, double ratio, double sd, double burst = 0) {
    int k = 0;
    for (int i = 0; i < 2000; ++i) k += sequential_verdict(rng, ratio, sd, burst) == want;
    return k / 2000.0;
  };
  EXPECT_LE(rate('f', 1.0, 0.3), 0.02);      // 30% noise: false rejects (bootstrap of medians: 5%)
  EXPECT_LE(rate('f', 1.0, 1.0), 0.025);     // 100% noise (bootstrap: 9%)
  EXPECT_LE(rate('f', 1.0, 0.005, 0.3), 0.01);  // a third of the runs hit by +-30% bursts
  EXPECT_GE(rate('p', 1.0, 0.02), 0.99);     // a quiet machine: identical sides pass
  EXPECT_GE(rate('p', 1.0, 0.005, 0.3), 0.75);
  EXPECT_GE(rate('f', 1.2, 0.10), 0.85);     // a 20% regression under 10% noise is caught
  EXPECT_GE(rate('f', 1.1, 0.02), 0.99);
  EXPECT_LE(rate('p', 1.1, 0.10), 0.01);     // and never passed
}

namespace {
const char* kGoodSpec = R"(
question = "q"
hypothesis = "h"
level = "kernel"
criteria = ["candidate.ns_per_op <= 0.97 * baseline.ns_per_op"]
[baseline]
revision = "HEAD"
[candidate]
revision = "worktree"
args = ["--isa", "avx2"]
env = { A = "1" }
[workload]
kernel = "rmsnorm"
kernel_args = ["--cols", "64"]
)";

std::string spec_error(const std::string& text, const std::string& root = "/nonexistent") {
  auto s = parse_spec_text(text, "t.toml", root);
  return s.ok() ? "" : s.error().message;
}
std::string replace(std::string s, const std::string& a, const std::string& b) {
  const size_t p = s.find(a);
  EXPECT_NE(p, std::string::npos) << a;
  if (p != std::string::npos) s.replace(p, a.size(), b);
  return s;
}
}  // namespace

TEST(LabSpec, ParsesAGoodSpecAndAddsTheCorrectnessFloor) {
  auto s = parse_spec_text(kGoodSpec, "t.toml", "/nonexistent");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->level, Level::kKernel);
  EXPECT_EQ(s->candidate.args, (std::vector<std::string>{"--isa", "avx2"}));
  EXPECT_EQ(s->candidate.env.at("A"), "1");
  EXPECT_EQ(s->metrics, (std::vector<std::string>{"ns_per_op"}));
  ASSERT_EQ(s->criteria.size(), 2u);
  EXPECT_EQ(s->criteria[1].source, "default");
  EXPECT_EQ(s->max_repeats, 15);
}

TEST(LabSpec, MalformedSpecsAreRejectedWithTheKey) {
  EXPECT_NE(spec_error("question = "), "");
  EXPECT_NE(spec_error(replace(kGoodSpec, "level = \"kernel\"", "level = \"gpu\"")).find("level"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "question = \"q\"", "")).find("question"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "level = \"kernel\"", "level = \"kernel\"\ncolour = 1")).find("colour"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "level = \"kernel\"", "level = \"kernel\"\nrepeats = 0")).find("repeats"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "level = \"kernel\"", "level = \"kernel\"\nrepeats = \"5\"")).find("integer"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "revision = \"HEAD\"", "revision = \"x; rm -rf /\"")).find("revision"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "[candidate]", "[candidate]\nbuild = [\"-O3\"]")).find("build"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "ns_per_op <=", "nanoseconds <=")).find("unknown metric 'nanoseconds'"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "candidate.ns_per_op <=", "cand.ns_per_op <=")).find("unknown name"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "<= 0.97 *", "<= 0.97 * *")).find("column"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "<= 0.97 * baseline.ns_per_op", "* 2")).find("comparison"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "criteria = [\"candidate.ns_per_op <= 0.97 * baseline.ns_per_op\"]", "")).find("no criteria"),
            std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "candidate.ns_per_op <=", "correctness.top1_agreement <=")).find("unknown correctness"),
            std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "kernel = \"rmsnorm\"", "")).find("kernel"), std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "level = \"kernel\"", "level = \"kernel\"\ncriteria_file = \"nope\"")).find("no criteria named 'nope'"),
            std::string::npos);
  EXPECT_NE(spec_error(replace(kGoodSpec, "level = \"kernel\"", "level = \"kernel\"\ncriteria_file = \"../etc/passwd\"")).find("not a criteria name"),
            std::string::npos);
  // span metrics need a trace, and only the engine level has them
  std::string eng = replace(replace(kGoodSpec, "level = \"kernel\"", "level = \"engine\""), "[workload]\nkernel = \"rmsnorm\"\nkernel_args = [\"--cols\", \"64\"]", "");
  eng = replace(eng, "candidate.ns_per_op <= 0.97 * baseline.ns_per_op", "candidate.span.swiglu <= baseline.span.swiglu");
  EXPECT_NE(spec_error(eng).find("trace = true"), std::string::npos);
  EXPECT_EQ(spec_error(replace(eng, "level = \"engine\"", "level = \"engine\"\ntrace = true")), "");
}

TEST(LabSpec, CriteriaFilesAreReadAndHashed) {
  const fs::path root = fs::temp_directory_path() / ("ouro-lab-spec-" + std::to_string(::getpid()));
  fs::create_directories(root / "experiments/criteria");
  std::ofstream(root / "experiments/criteria/fast.toml") << "description = \"d\"\nlevels = [\"kernel\"]\ncriteria = [\"candidate.ns_per_op < baseline.ns_per_op\", \"correctness.exact == 1\"]\n";
  std::ofstream(root / "experiments/criteria/bad.toml") << "criteria = [\"candidate.ns_per_op <\"]\n";
  std::ofstream(root / "experiments/criteria/engine.toml") << "levels = [\"engine\"]\ncriteria = [\"candidate.decode_tok_s > 0\"]\n";
  const std::string spec = replace(kGoodSpec, "criteria = [\"candidate.ns_per_op <= 0.97 * baseline.ns_per_op\"]", "criteria_file = \"fast\"");
  auto s = parse_spec_text(spec, "t.toml", root.string());
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->criteria.size(), 2u);  // the file judges correctness: no default added
  EXPECT_EQ(s->criteria[0].source, "file:fast");
  EXPECT_EQ(s->criteria_sha256.size(), 64u);
  EXPECT_NE(spec_error(replace(spec, "\"fast\"", "\"bad\""), root.string()).find("bad.toml"), std::string::npos);
  EXPECT_NE(spec_error(replace(spec, "\"fast\"", "\"engine\""), root.string()).find("not for level kernel"), std::string::npos);
  fs::remove_all(root);
}

TEST(LabProcess, ExitCodesSignalsAndTimeouts) {
  auto env = current_env();
  ProcLimits lim;
  lim.timeout_s = 10;
  ProcResult ok = run_process({"/bin/sh", "-c", "echo hello; echo oops >&2"}, env, "", lim);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.out, "hello\n");
  EXPECT_EQ(ok.err, "oops\n");
  ProcResult code = run_process({"/bin/sh", "-c", "exit 3"}, env, "", lim);
  EXPECT_EQ(code.exit_code, 3);
  EXPECT_EQ(code.failure(), "exit code 3");
  ProcResult sig = run_process({"/bin/sh", "-c", "kill -ABRT $$"}, env, "", lim);
  EXPECT_EQ(sig.signal, SIGABRT);
  EXPECT_EQ(sig.failure(), "killed by SIGABRT");
  lim.timeout_s = 0.5;
  ProcResult hang = run_process({"/bin/sh", "-c", "sleep 30 & sleep 30"}, env, "", lim);
  EXPECT_TRUE(hang.timed_out);
  EXPECT_LT(hang.wall_s, 5);
  ProcResult missing = run_process({"/nonexistent/ouro"}, env, "", lim);
  EXPECT_FALSE(missing.started);
}

TEST(LabProcess, MemoryLimit) {
  ProcLimits lim;
  lim.timeout_s = 20;
  lim.memory_mib = 64;
  // python3 is not guaranteed; sh + head reading /dev/zero into a variable grows the shell.
  ProcResult r = run_process({"/bin/sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo done"}, current_env(), "", lim);
  EXPECT_FALSE(r.ok());
}

TEST(LabProcess, WritesAreConfinedToTheGivenDirectories) {
  if (!landlock_available()) GTEST_SKIP() << "the kernel has no Landlock: writes cannot be confined here";
  const fs::path base = fs::temp_directory_path() / ("ouro-lab-ll-" + std::to_string(::getpid()));
  fs::create_directories(base / "allowed");
  fs::create_directories(base / "forbidden");
  ProcLimits lim;
  lim.timeout_s = 10;
  lim.write_dirs = {(base / "allowed").string()};
  const std::string a = (base / "allowed/f").string(), f = (base / "forbidden/f").string();
  ProcResult r1 = run_process({"/bin/sh", "-c", "echo x > " + a}, current_env(), "", lim);
  EXPECT_TRUE(r1.ok()) << r1.err;
  EXPECT_TRUE(r1.confined);
  ProcResult r2 = run_process({"/bin/sh", "-c", "echo x > " + f}, current_env(), "", lim);
  EXPECT_FALSE(r2.ok());
  EXPECT_FALSE(fs::exists(f));
  ProcResult r3 = run_process({"/bin/sh", "-c", "echo x > /dev/null && cat " + a}, current_env(), "", lim);
  EXPECT_TRUE(r3.ok()) << r3.err;  // reads anywhere, /dev/null writable
  fs::remove_all(base);
}
