#include "lab/judge.h"

#include <algorithm>
#include <cmath>

#include "lab/expr.h"
#include "lab/numfmt.h"
#include "lab/stats.h"

using nlohmann::json;

namespace ouro::lab {

// For an inconclusive criterion: roughly how many pairs would decide it at the noise measured so
// far. The box's reach toward the bound shrinks like 1/sqrt(pairs), so deciding needs it to shrink
// below the point's distance from the bound: pairs * (reach / distance)^2.
std::string pairs_to_decide(size_t pairs, double point, double lo, double hi) {
  const double reach = point >= 0 ? point - lo : hi - point;
  if (pairs < 2 || !std::isfinite(reach)) return "; too few pairs to estimate how many would decide it";
  if (std::fabs(point) < 1e-4) return "; the point lies on the bound: no number of pairs decides it";
  const double need = std::ceil(pairs * (reach / point) * (reach / point));
  return "; at this noise about " + (need > 1e4 ? std::string("10000+") : fmt(need, 6)) + " pairs would decide it";
}

// A criterion is judged on the point figures and on every corner of a confidence box: for each
// metric it names, the baseline's typical value and the paired ratio each range over their
// kDecisionAlpha interval (log_trimmed_interval), and `candidate.M` is baseline times ratio.
// pass: holds at the point and at every corner; fail: fails at the point and at every corner;
// otherwise inconclusive (the box straddles the bound). Exact for criteria monotone in each figure
// (the usual `candidate.M >= k * baseline.M`), whose extremes over a box lie at its corners.
Judged judge(const Spec& spec, const std::vector<std::map<std::string, double>>& base,
             const std::vector<std::map<std::string, double>>& cand, const json& correctness) {
  Judged out;
  const size_t pairs = std::min(base.size(), cand.size());
  std::map<std::string, std::vector<double>> bs, cs;
  for (const auto& m : spec.metrics)
    for (size_t i = 0; i < pairs; ++i) {
      bs[m].push_back(base[i].at(m));
      cs[m].push_back(cand[i].at(m));
    }
  auto lookup_with = [&](const std::map<std::string, double>& bv, const std::map<std::string, double>& cv) {
    return [&, bv, cv](const std::string& name) -> double {
      if (name.rfind("baseline.", 0) == 0) return bv.at(name.substr(9));
      if (name.rfind("candidate.", 0) == 0) return cv.at(name.substr(10));
      const std::string rest = name.substr(12);  // after "correctness."
      const json* node = &correctness;
      std::string key = rest;
      if (rest.rfind("spec.", 0) == 0 && correctness.contains("spec")) { node = &correctness.at("spec"); key = rest.substr(5); }
      if (rest.rfind("heldout.", 0) == 0 && correctness.contains("heldout")) { node = &correctness.at("heldout"); key = rest.substr(8); }
      return node->is_object() && node->contains(key) && node->at(key).is_number() ? node->at(key).get<double>() : NAN;
    };
  };
  std::map<std::string, double> bpt, cpt;
  std::map<std::string, LogInterval> bint, rint;
  for (const auto& [m, v] : bs) {
    bint[m] = log_trimmed_interval(v, kDecisionAlpha);
    rint[m] = paired_ratio_interval(v, cs[m], kDecisionAlpha);
    bpt[m] = bint[m].point;
    cpt[m] = bpt[m] * rint[m].point;
  }
  const std::string level = fmt(100 * (1 - 2 * kDecisionAlpha), 3) + "%";
  for (const auto& c : spec.criteria) {
    std::vector<std::string> used;  // metrics the criterion names
    for (const auto& n : expr_names(*c.expr)) {
      if (n.rfind("correctness.", 0) == 0) continue;
      const std::string m = n.substr(n.find('.') + 1);
      if (std::find(used.begin(), used.end(), m) == used.end()) used.push_back(m);
    }
    const bool uses_samples = !used.empty();
    auto point_lookup = lookup_with(bpt, cpt);
    const bool point = eval_expr(*c.expr, point_lookup) != 0;
    double frac = point ? 1 : 0;
    std::vector<double> margins;
    const Expr* lhs = comparison_lhs(*c.expr);
    const Expr* rhs = comparison_rhs(*c.expr);
    if (uses_samples && pairs > 0) {
      int yes = 0, n = 0;
      const size_t corners = (size_t)1 << (2 * std::min<size_t>(used.size(), 6));
      for (size_t k = 0; k < corners; ++k) {
        std::map<std::string, double> bv = bpt, cv = cpt;
        for (size_t i = 0; i < used.size() && i < 6; ++i) {
          const std::string& m = used[i];
          const double b = (k >> (2 * i)) & 1 ? bint[m].hi : bint[m].lo;
          const double r = (k >> (2 * i + 1)) & 1 ? rint[m].hi : rint[m].lo;
          bv[m] = b;
          cv[m] = b * r;
        }
        auto lk = lookup_with(bv, cv);
        yes += eval_expr(*c.expr, lk) != 0;
        ++n;
        if (lhs && rhs) {
          const double l = eval_expr(*lhs, lk), r = eval_expr(*rhs, lk);
          margins.push_back(r != 0 ? l / r - 1 : l - r);
        }
      }
      frac = (double)yes / n;
    }
    const bool all = frac == 1, none = frac == 0;
    std::string verdict = all && point ? "pass" : none && !point ? "fail" : "inconclusive";
    std::string detail;
    if (lhs && rhs) {
      const double l = eval_expr(*lhs, point_lookup), r = eval_expr(*rhs, point_lookup);
      detail = to_string(*lhs) + " = " + fmt(l) + " vs " + to_string(*rhs) + " = " + fmt(r);
      if (!margins.empty() && r != 0) {
        auto [lo, hi] = std::minmax_element(margins.begin(), margins.end());
        detail += "; margin " + pct(l / r - 1) + " [" + level + " box " + pct(*lo) + ", " + pct(*hi) + "]";
        if (verdict == "inconclusive") detail += pairs_to_decide(pairs, l / r - 1, *lo, *hi);
      }
    } else {
      detail = "value " + fmt(eval_expr(*c.expr, point_lookup));
    }
    if (uses_samples) detail += "; holds at " + fmt(100 * frac, 3) + "% of the " + level + " box's corners";
    out.criteria.push_back({{"expr", c.text}, {"source", c.source}, {"verdict", verdict}, {"detail", detail}, {"holds_fraction", frac}});
    if (verdict == "fail") {
      out.any_fail = true;
      out.reasons.push_back("criterion failed: " + c.text + " (" + detail + ")");
    } else if (verdict == "inconclusive") {
      out.any_inconclusive = true;
      out.reasons.push_back("criterion inconclusive: " + c.text + " (" + detail + ")");
    }
  }
  return out;
}

}  // namespace ouro::lab
