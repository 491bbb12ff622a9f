#include "runtime/quality.h"

#include <algorithm>
#include <cmath>

namespace ouro {

double log_sum_exp(const float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (!std::isfinite(mx)) return mx;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp((double)x[i] - mx);
  return mx + std::log(s);
}

double kl_divergence(const float* ref, const float* cand, int64_t n, double lse_ref, double lse_cand) {
  if (lse_ref == kComputeLse) lse_ref = log_sum_exp(ref, n);
  if (lse_cand == kComputeLse) lse_cand = log_sum_exp(cand, n);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = ref[i] - lse_ref, lq = cand[i] - lse_cand;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(0.0, kl);  // tiny negative values are rounding
}

int64_t argmax_row(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return b;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * (double)(v.size() - 1);
  const size_t i = (size_t)pos;
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

}  // namespace ouro
