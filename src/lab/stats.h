// Statistics for ABBA-paired samples: medians, a robust t interval of the candidate/baseline ratio
// (trimmed mean of log pair ratios), and the Mann-Whitney rank test. Deterministic: the record's
// figures can be recomputed from its samples.
#pragma once
#include <cstddef>
#include <vector>

namespace ouro::lab {

double median(std::vector<double> v);
// Two-sided p-value of the Mann-Whitney U test: exact when both sides have <= 30 values (the
// permutation distribution of the mid-rank sum, ties included), else the normal approximation with
// tie and continuity corrections.
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);
// Percentile (0..1) of v, linear interpolation.
double percentile(std::vector<double> v, double q);

// Quantile of Student's t distribution with df > 0 degrees of freedom (0 < p < 1).
double student_t_quantile(double p, double df);

// The one-sided error the lab allows itself per decision and per look: each bound of a decision
// interval is exceeded by the truth with probability <= kDecisionAlpha (a 99% two-sided interval).
// Chosen by simulation of the sequential ABBA procedure (5 pairs, then +2 up to 15): identical
// configurations are falsely rejected in <= 1.5% of runs even when sample-to-sample noise is
// 100% (docs/lab.md, "What a verdict promises"); the old bootstrap of the median gave 9%.
constexpr double kDecisionAlpha = 0.005;

// A robust interval for the typical value of positive samples x, on the log scale: the 20%
// trimmed mean of log(x) with the Tukey-McLaughlin standard error (Winsorized variance) and
// Student's t with n - 2g - 1 degrees of freedom (g = floor(0.2 n) trimmed from each end).
// Trimming keeps a burst that slowed a fifth of the runs from moving the estimate; the t quantile
// keeps 3 or 5 samples from claiming the confidence of 30. `alpha` is one-sided per bound.
// point/lo/hi are on the original scale (exp of the log-scale figures). Fewer than 2 samples, or a
// value that is not positive and finite, give an unbounded interval [0, inf] around the median.
struct LogInterval {
  double point = 0, lo = 0, hi = 0;
};
LogInterval log_trimmed_interval(const std::vector<double>& x, double alpha);

// The candidate/baseline ratio of paired samples: log_trimmed_interval of the per-pair ratios
// c[i]/b[i] (each pair ran back to back, so the machine's drift cancels within it). `point` is
// the ratio the lab reports: the geometric 20% trimmed mean of the pair ratios.
LogInterval paired_ratio_interval(const std::vector<double>& base, const std::vector<double>& cand, double alpha);
double paired_ratio(const std::vector<double>& base, const std::vector<double>& cand);

struct RatioStats {
  double baseline_median = 0, candidate_median = 0, ratio = 0, ci_lo = 0, ci_hi = 0, p_value = 1;  // ratio: paired_ratio
  // ci: paired_ratio_interval at kDecisionAlpha (99%). "higher", "lower" or "none": a change needs
  // p < 0.01, an interval that excludes 1 and a ratio at least min_effect away from 1.
  const char* change = "none";
};
RatioStats ratio_stats(const std::vector<double>& base, const std::vector<double>& cand, double min_effect);

}  // namespace ouro::lab
