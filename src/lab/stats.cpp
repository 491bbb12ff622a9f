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

namespace {
// Continued fraction of the regularized incomplete beta function (modified Lentz).
double beta_cf(double a, double b, double x) {
  const double tiny = 1e-300;
  auto clamp = [&](double v) { return std::fabs(v) < tiny ? tiny : v; };
  double c = 1, d = 1 / clamp(1 - (a + b) * x / (a + 1)), h = d;
  for (int m = 1; m < 400; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 / clamp(1 + aa * d);
    c = clamp(1 + aa / c);
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 / clamp(1 + aa * d);
    c = clamp(1 + aa / c);
    h *= d * c;
    if (std::fabs(d * c - 1) < 1e-15) break;
  }
  return h;
}

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double lb = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(lb) * beta_cf(a, b, x) / a;
  return 1 - std::exp(lb) * beta_cf(b, a, 1 - x) / b;
}

double student_t_cdf(double t, double df) {
  const double tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t));
  return t > 0 ? 1 - tail : tail;
}
}  // namespace

double student_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1) || !(df > 0)) return NAN;
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p && hi < 1e12) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

LogInterval log_trimmed_interval(const std::vector<double>& x, double alpha) {
  LogInterval r;
  const size_t n = x.size();
  std::vector<double> y;
  y.reserve(n);
  for (double v : x) {
    if (!(v > 0) || !std::isfinite(v)) {
      r.point = median(x);
      r.hi = INFINITY;
      return r;
    }
    y.push_back(std::log(v));
  }
  if (n == 0) return r;
  std::sort(y.begin(), y.end());
  const size_t g = (size_t)std::floor(0.2 * (double)n), h = n - 2 * g;
  double tm = 0;
  for (size_t i = g; i < n - g; ++i) tm += y[i];
  tm /= (double)h;
  r.point = std::exp(tm);
  if (n < 2 || h < 2) {
    r.hi = INFINITY;
    return r;
  }
  double wmean = 0;  // Winsorized: the g smallest set to y[g], the g largest to y[n-g-1]
  auto w = [&](size_t i) { return y[std::clamp(i, g, n - g - 1)]; };
  for (size_t i = 0; i < n; ++i) wmean += w(i);
  wmean /= (double)n;
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += (w(i) - wmean) * (w(i) - wmean);
  const double se = std::sqrt(ss / (double)(n - 1)) / ((double)h / (double)n * std::sqrt((double)n));
  const double t = student_t_quantile(1 - alpha, (double)(h - 1));
  r.lo = std::exp(tm - t * se);
  r.hi = std::exp(tm + t * se);
  return r;
}

LogInterval paired_ratio_interval(const std::vector<double>& base, const std::vector<double>& cand, double alpha) {
  const size_t n = std::min(base.size(), cand.size());
  std::vector<double> r(n);
  for (size_t i = 0; i < n; ++i) {
    if (!(base[i] > 0)) {
      LogInterval bad;
      bad.point = median(cand) / median(base);
      bad.hi = INFINITY;
      return bad;
    }
    r[i] = cand[i] / base[i];
  }
  return log_trimmed_interval(r, alpha);
}

double paired_ratio(const std::vector<double>& base, const std::vector<double>& cand) {
  return paired_ratio_interval(base, cand, kDecisionAlpha).point;
}

RatioStats ratio_stats(const std::vector<double>& base, const std::vector<double>& cand, double min_effect) {
  RatioStats r;
  r.baseline_median = median(base);
  r.candidate_median = median(cand);
  r.p_value = mann_whitney_p(base, cand);
  const LogInterval ci = paired_ratio_interval(base, cand, kDecisionAlpha);
  r.ratio = ci.point;
  r.ci_lo = ci.lo;
  r.ci_hi = ci.hi;
  if (r.p_value < 0.01 && std::fabs(r.ratio - 1) >= min_effect) {
    if (r.ci_lo > 1) r.change = "higher";
    if (r.ci_hi < 1) r.change = "lower";
  }
  return r;
}

}  // namespace ouro::lab
