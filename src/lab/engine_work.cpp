#include "lab/engine_work.h"

#include <algorithm>

namespace ouro::lab {

EngineWork engine_work(const Workload& w) {
  EngineWork e;
  e.depth = std::max(0, w.depth);
  e.prompt_len = std::max(1, w.prompt_len);
  e.gen = w.gen_len > 0 ? w.gen_len : std::max(1, w.greedy_tokens);
  e.threads = w.threads;
  return e;
}

std::vector<std::string> bench_args_for(const EngineWork& w, const std::string& metric, int repeats) {
  std::vector<std::string> a = {"--json", "--repeats", std::to_string(std::max(1, repeats)), "--warmup", "1"};
  auto add = [&](int prompt, int gen, int depth) {
    a.insert(a.end(), {"--prompt-len", std::to_string(prompt), "--gen-len", std::to_string(gen), "--depth", std::to_string(depth)});
  };
  if (metric == "prefill_tok_s")
    add(w.prompt_len, 0, w.depth);
  else if (metric == "decode_tok_s" && w.decode_steps() >= 1)
    add(0, w.decode_steps(), w.decode_depth());
  else
    return {};
  return a;
}

}  // namespace ouro::lab
