// The engine level's timed work, defined once (docs/lab.md, "What the cross-check compares"). The
// lab's timed runs (`ouro worker`: the depth filled untimed, then a prompt, then greedy tokens) and
// the cross-check of each side's own `ouro bench` are both derived from this one value, so the two
// cannot measure different work: bench's prefill is the same prompt length after the same depth,
// its decode the same steps at the same positions (after depth + prompt), on the same threads.
#pragma once
#include <string>
#include <vector>

#include "lab/spec.h"

namespace ouro::lab {

struct EngineWork {
  int depth = 0;       // tokens cached (untimed) before each request
  int prompt_len = 0;  // prefill: this many tokens at positions depth ... depth+prompt_len-1
  int gen = 1;         // greedy tokens per request: the first comes from the prefill, gen-1 from decode steps
  int threads = 0;     // 0: the engine's default (both sides' every run gets `-t threads`)

  // The decode steps run at positions decode_depth() ... decode_depth() + decode_steps() - 1.
  int decode_depth() const { return depth + prompt_len; }
  int decode_steps() const { return gen - 1; }
};

// From the spec: gen is gen_len, or greedy_tokens for a prefill-only spec (gen_len = 0), so that its
// checked continuations are still that long.
EngineWork engine_work(const Workload& w);

// The arguments of `ouro bench` (after "bench") that measure one figure of this work:
// "prefill_tok_s" (the prompt after the depth) or "decode_tok_s" (the decode steps after depth +
// prompt). Empty when the work has no such figure (decode with fewer than 2 tokens). The threads
// and the model come with the side's common flags, as for its worker.
std::vector<std::string> bench_args_for(const EngineWork& w, const std::string& metric, int repeats);

}  // namespace ouro::lab
