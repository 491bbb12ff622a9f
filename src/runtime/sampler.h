// Token sampling: repetition penalty, then top-k, temperature, top-p and min-p; greedy when the
// temperature is 0. The same seed gives the same tokens.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/status.h"

namespace ouro {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;          // 0 = off
  float top_p = 0.95f;     // 1 = off
  float min_p = 0.05f;     // 0 = off
  float repeat_penalty = 1.0f;  // 1 = off
  int repeat_last_n = 64;
  uint64_t seed = 0;
  Status validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // Picks the next token from logits (modified in place by the penalty); `recent` are the
  // previously seen tokens (prompt and generated) for the repetition penalty.
  int sample(float* logits, int n_vocab, const std::vector<int>& recent);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> cand_;
};

int argmax(const float* x, int n);

}  // namespace ouro
