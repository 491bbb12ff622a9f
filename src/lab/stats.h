// Statistics for ABBA-paired samples: medians, a paired bootstrap of the candidate/baseline ratio,
// and the Mann-Whitney rank test. Deterministic for a given seed (the record can be recomputed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ouro::lab {

double median(std::vector<double> v);
// Two-sided p-value of the Mann-Whitney U test: exact when both sides have <= 30 values (the
// permutation distribution of the mid-rank sum, ties included), else the normal approximation with
// tie and continuity corrections.
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);
// Percentile (0..1) of v, linear interpolation.
double percentile(std::vector<double> v, double q);

// Resamples pair indices with replacement (the pairs ran next to each other, so the pairing
// carries the slow drift of the machine). Calls fn(indices) `n` times.
template <typename Fn>
void paired_bootstrap(size_t pairs, int n, uint64_t seed, Fn fn) {
  uint64_t s = seed ? seed : 0x9e3779b97f4a7c15ull;
  std::vector<size_t> idx(pairs);
  for (int b = 0; b < n; ++b) {
    for (auto& i : idx) {
      s ^= s << 13; s ^= s >> 7; s ^= s << 17;  // xorshift64
      i = (size_t)(s % pairs);
    }
    fn(idx);
  }
}

// The candidate/baseline ratio of paired samples: the median of the per-pair ratios c[i]/b[i]
// (each pair ran back to back, so the machine's drift cancels within it), or the ratio of the
// medians when a baseline sample is not positive.
double paired_ratio(const std::vector<double>& base, const std::vector<double>& cand);

struct RatioStats {
  double baseline_median = 0, candidate_median = 0, ratio = 0, ci_lo = 0, ci_hi = 0, p_value = 1;  // ratio: paired_ratio
  // "higher", "lower" or "none": a change needs p < 0.01, a 95% interval that excludes 1 and a
  // ratio at least min_effect away from 1.
  const char* change = "none";
};
RatioStats ratio_stats(const std::vector<double>& base, const std::vector<double>& cand, double min_effect,
                       uint64_t seed, int resamples = 2000);

}  // namespace ouro::lab
