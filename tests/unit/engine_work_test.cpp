// The engine level's one definition of the timed work (src/lab/engine_work.h): the cross-check's
// `ouro bench` calls measure the prefill after the depth and the decode steps after depth + prompt.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "lab/engine_work.h"
#include "lab/runner_parts.h"

using namespace ouro::lab;
using namespace ouro::lab::runner_detail;

namespace {
// "--flag value" pairs of a bench argument list ("--json" has no value).
std::map<std::string, std::string> flags(const std::vector<std::string>& a) {
  std::map<std::string, std::string> m;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != "--json" && i + 1 < a.size()) m[a[i]] = a[i + 1], ++i;
  return m;
}
}  // namespace

TEST(EngineWork, BenchMeasuresTheTimedPositions) {
  Workload w;
  w.prompt_len = 256;
  w.gen_len = 64;
  w.depth = 0;
  w.threads = 2;
  const EngineWork e = engine_work(w);
  auto pp = flags(bench_args_for(e, "prefill_tok_s", 3));
  EXPECT_EQ(pp["--prompt-len"], "256");
  EXPECT_EQ(pp["--gen-len"], "0");
  EXPECT_EQ(pp["--depth"], "0");
  EXPECT_EQ(pp["--repeats"], "3");
  // The timed decode: 63 steps after the 256-token prompt (the first token comes from prefill).
  auto tg = flags(bench_args_for(e, "decode_tok_s", 3));
  EXPECT_EQ(tg["--prompt-len"], "0");
  EXPECT_EQ(tg["--gen-len"], "63");
  EXPECT_EQ(tg["--depth"], "256");

  w.depth = 4096;
  auto tgd = flags(bench_args_for(engine_work(w), "decode_tok_s", 3));
  EXPECT_EQ(tgd["--depth"], "4352");
  auto ppd = flags(bench_args_for(engine_work(w), "prefill_tok_s", 3));
  EXPECT_EQ(ppd["--depth"], "4096");
}

TEST(EngineWork, PrefillOnlySpecsAndUnknownFigures) {
  Workload w;
  w.prompt_len = 128;
  w.gen_len = 0;          // prefill only: the checked continuations are greedy_tokens long
  w.greedy_tokens = 1;
  const EngineWork e = engine_work(w);
  EXPECT_EQ(e.gen, 1);
  EXPECT_TRUE(bench_args_for(e, "decode_tok_s", 2).empty());  // no decode step to compare
  EXPECT_FALSE(bench_args_for(e, "prefill_tok_s", 2).empty());
  EXPECT_TRUE(bench_args_for(e, "ns_per_op", 2).empty());
  w.greedy_tokens = 16;
  EXPECT_EQ(flags(bench_args_for(engine_work(w), "decode_tok_s", 2))["--gen-len"], "15");
}

// Work deeper than the engines' default context gets exactly the context it needs (rounded up to
// 256) on every call of both sides; shallower work keeps the default, so its argv (and the records
// measured before the rule) do not change.
TEST(EngineWork, DeepWorkAsksForTheContextItNeeds) {
  Spec spec;
  RunOptions opt;
  SideExec side{"baseline", Binary{}, {}, {"--weights", "native"}};
  auto ctx_of = [&](int depth, int prompt, int gen) {
    Workload w;
    w.depth = depth, w.prompt_len = prompt, w.gen_len = gen;
    Ctx c{spec, opt, engine_work(w)};
    return flags(common_args(c, side));
  };
  EXPECT_EQ(ctx_of(4096, 128, 16)["--ctx"], "4352");
  EXPECT_EQ(ctx_of(8000, 512, 0).count("--ctx"), 1u);
  EXPECT_EQ(ctx_of(3900, 128, 16).count("--ctx"), 0u);  // 4044 fits the default 4096
  EXPECT_EQ(ctx_of(256, 192, 64).count("--ctx"), 0u);
  EXPECT_EQ(ctx_of(4096, 128, 16)["--weights"], "native");  // the side's own flags still follow
}
