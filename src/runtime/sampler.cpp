#include "runtime/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace ouro {

Status SamplingParams::validate() const {
  if (!(temperature >= 0 && temperature <= 100)) return usage_error("temperature must be in [0, 100]");
  if (top_k < 0) return usage_error("top_k must be >= 0");
  if (!(top_p > 0 && top_p <= 1)) return usage_error("top_p must be in (0, 1]");
  if (!(min_p >= 0 && min_p <= 1)) return usage_error("min_p must be in [0, 1]");
  if (!(repeat_penalty > 0 && repeat_penalty <= 10)) return usage_error("repeat_penalty must be in (0, 10]");
  if (repeat_last_n < 0) return usage_error("repeat_last_n must be >= 0");
  return Ok{};
}

int argmax(const float* x, int n) {
  // Two passes: the maximum with independent vector lanes (no dependency through the index),
  // then the first position holding it. Ties go to the lowest index, as in the scalar loop.
  int i = 0;
  float mx = -INFINITY;
  if (n >= 16) {
    __m256 m0 = _mm256_loadu_ps(x), m1 = _mm256_loadu_ps(x + 8);
    for (i = 16; i + 16 <= n; i += 16) {
      m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
      m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
    for (float v : lanes) mx = std::max(mx, v);
  }
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  for (int k = 0; k < n; ++k)
    if (x[k] == mx) return k;
  // NaNs defeat the comparisons above: fall back to the plain scan.
  int best = 0;
  for (int k = 1; k < n; ++k)
    if (x[k] > x[best]) best = k;
  return best;
}

int Sampler::sample(float* logits, int n_vocab, const std::vector<int>& recent) {
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    std::unordered_set<int> seen;
    const size_t from = recent.size() > (size_t)p_.repeat_last_n ? recent.size() - p_.repeat_last_n : 0;
    for (size_t i = from; i < recent.size(); ++i) {
      const int id = recent[i];
      if (id < 0 || id >= n_vocab || !seen.insert(id).second) continue;
      logits[id] = logits[id] > 0 ? logits[id] / p_.repeat_penalty : logits[id] * p_.repeat_penalty;
    }
  }
  if (p_.temperature <= 0) return argmax(logits, n_vocab);

  cand_.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], i};
  auto by_logit = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  size_t n = cand_.size();
  if (p_.top_k > 0 && (size_t)p_.top_k < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = p_.top_k;
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // softmax with temperature over the kept candidates (sorted, so cand_[0] is the max)
  const float mx = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = (float)std::exp((cand_[i].first - mx) / p_.temperature);
    sum += cand_[i].first;
  }
  for (size_t i = 0; i < n; ++i) cand_[i].first = (float)(cand_[i].first / sum);
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].first;
      if (cum >= p_.top_p) { keep = i + 1; break; }
    }
    n = keep;
  }
  if (p_.min_p > 0) {
    const float thr = p_.min_p * cand_[0].first;
    size_t keep = 1;
    while (keep < n && cand_[keep].first >= thr) ++keep;
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_), acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += cand_[i].first;
    if (r < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace ouro
