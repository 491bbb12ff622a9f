#include "lab/stats.h"

#include <algorithm>
#include <cmath>

namespace ouro::lab {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * (double)(v.size() - 1);
  const size_t lo = (size_t)std::floor(pos), hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (pos - (double)lo) * (v[hi] - v[lo]);
}

double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n1 = a.size(), n2 = b.size();
  if (n1 == 0 || n2 == 0) return 1.0;
  // Ranks of the pooled sample, doubled so that mid-ranks of ties (i + 1 + j) / 2 stay integers.
  std::vector<std::pair<double, int>> all;
  for (double x : a) all.push_back({x, 0});
  for (double x : b) all.push_back({x, 1});
  std::sort(all.begin(), all.end());
  const size_t n = all.size();
  std::vector<size_t> rank2(n);
  size_t s1 = 0;  // doubled rank sum of a
  double tie_term = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    const double t = (double)(j - i);
    if (t > 1) tie_term += t * t * t - t;
    for (size_t k = i; k < j; ++k) {
      rank2[k] = i + 1 + j;
      if (all[k].second == 0) s1 += rank2[k];
    }
    i = j;
  }
  const double mean2 = (double)n1 * (double)(n + 1);  // doubled rank sum's mean under the null
  if (n1 <= 30 && n2 <= 30) {
    // Exact permutation distribution of the doubled rank sum, ties included: ways[k][s] = number
    // of k-subsets of the pooled sample with doubled rank sum s (C(60, 30) ~ 1e17 fits a double).
    const size_t smax = 2 * n * n1;
    std::vector<std::vector<double>> ways(n1 + 1, std::vector<double>(smax + 1, 0.0));
    ways[0][0] = 1;
    for (size_t e = 0; e < n; ++e)
      for (size_t k = std::min(n1, e + 1); k >= 1; --k)
        for (size_t s = smax; s >= rank2[e]; --s) ways[k][s] += ways[k - 1][s - rank2[e]];
    const double dev = std::fabs((double)s1 - mean2);
    double tail = 0, total = 0;
    for (size_t s = 0; s <= smax; ++s) {
      total += ways[n1][s];
      if (std::fabs((double)s - mean2) >= dev - 1e-9) tail += ways[n1][s];
    }
    return std::min(1.0, tail / total);
  }
  const double u1 = 0.5 * (double)s1 - (double)n1 * (n1 + 1) / 2.0;
  const double mean = (double)n1 * n2 / 2.0;
  const double var = (double)n1 * n2 / 12.0 * ((double)(n + 1) - tie_term / ((double)n * (n - 1)));
  if (var <= 0) return 1.0;
  const double z = (std::fabs(u1 - mean) - 0.5) / std::sqrt(var);
  return std::min(1.0, std::erfc(std::max(0.0, z) / std::sqrt(2.0)));
}

double paired_ratio(const std::vector<double>& base, const std::vector<double>& cand) {
  const size_t n = std::min(base.size(), cand.size());
  std::vector<double> r(n);
  for (size_t i = 0; i < n; ++i) {
    if (!(base[i] > 0)) return median(cand) / median(base);
    r[i] = cand[i] / base[i];
  }
  return median(r);
}

RatioStats ratio_stats(const std::vector<double>& base, const std::vector<double>& cand, double min_effect,
                       uint64_t seed, int resamples) {
  RatioStats r;
  r.baseline_median = median(base);
  r.candidate_median = median(cand);
  r.ratio = paired_ratio(base, cand);
  r.p_value = mann_whitney_p(base, cand);
  const size_t pairs = std::min(base.size(), cand.size());
  if (pairs == 0) return r;
  std::vector<double> ratios;
  ratios.reserve(resamples);
  std::vector<double> b(pairs), c(pairs);
  paired_bootstrap(pairs, resamples, seed, [&](const std::vector<size_t>& idx) {
    for (size_t i = 0; i < pairs; ++i) { b[i] = base[idx[i]]; c[i] = cand[idx[i]]; }
    ratios.push_back(paired_ratio(b, c));
  });
  r.ci_lo = percentile(ratios, 0.025);
  r.ci_hi = percentile(ratios, 0.975);
  if (r.p_value < 0.01 && std::fabs(r.ratio - 1) >= min_effect) {
    if (r.ci_lo > 1) r.change = "higher";
    if (r.ci_hi < 1) r.change = "lower";
  }
  return r;
}

}  // namespace ouro::lab
