#include "agent/agent_tune.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace ouro::lab {

using nlohmann::json;

size_t TuneSpace::configurations() const {
  size_t n = 1;
  for (const auto& d : dims) n *= d.second.size();
  return n;
}

std::string TuneSpace::text() const {
  std::string s;
  for (const auto& [name, values] : dims) {
    s += (s.empty() ? "" : " ") + name + "=";
    for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + values[i];
  }
  return s;
}

Expected<TuneSpace> parse_space(const std::vector<std::string>& flags, int nproc) {
  TuneSpace sp;
  if (flags.empty()) {
    std::vector<std::string> threads;
    for (int t : {1, std::max(1, nproc / 2), std::max(1, nproc)})
      if (std::find(threads.begin(), threads.end(), std::to_string(t)) == threads.end()) threads.push_back(std::to_string(t));
    sp.dims = {{"threads", threads}, {"kv", {"f32", "bf16", "int8"}}, {"weights", {"native", "w8a8"}}};
    return sp;
  }
  for (const auto& f : flags) {
    const auto eq = f.find('=');
    if (eq == std::string::npos || eq == 0) return usage_error("--space: '" + f + "' is not NAME=v1,v2,...");
    const std::string c = canonical_param(f.substr(0, eq));
    if (c.empty()) return usage_error("--space: " + check_param(f.substr(0, eq), "", nproc));
    for (const auto& d : sp.dims)
      if (d.first == c) return usage_error("--space: " + c + " is given twice");
    std::vector<std::string> values;
    std::string rest = f.substr(eq + 1);
    size_t i = 0;
    while (i <= rest.size()) {
      const size_t comma = rest.find(',', i);
      const std::string v = rest.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
      if (v.empty()) return usage_error("--space: " + c + " has an empty value");
      if (std::string why = check_param(c, v, nproc); !why.empty()) return usage_error("--space: " + why);
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
      if (comma == std::string::npos) break;
      i = comma + 1;
    }
    if (values.size() < 2) return usage_error("--space: " + c + " needs at least two values to search");
    sp.dims.push_back({c, values});
  }
  return sp;
}

namespace {

int kv_bytes_rank(const std::string& v) { return v == "int8" || v == "fp8" ? 1 : v == "bf16" ? 2 : 4; }
int isa_rank(const std::string& v) { return v == "avx512" ? 0 : v == "auto" ? 1 : v == "avx2" ? 2 : 3; }

}  // namespace

TunePolicy::TunePolicy(TuneSpace space, const json& summary, int nproc) : nproc_(nproc) {
  // Shares and verdicts of the traced ops.
  std::map<std::string, double> share;
  std::map<std::string, std::string> verdict;
  double waiting = 0;
  if (summary.is_object() && summary.contains("ops") && summary["ops"].is_array())
    for (const auto& op : summary["ops"]) {
      if (!op.is_object() || !op.contains("name") || !op["name"].is_string()) continue;
      const std::string n = op["name"].get<std::string>();
      const double s = op.value("share", 0.0);
      share[n] += s;
      verdict[n] = op.value("verdict", std::string());
      if (verdict[n] == "waiting") waiting += s;
    }
  struct Ranked {
    size_t order;
    double score;
    std::string name, why;
    std::vector<std::string> values;
  };
  std::vector<Ranked> ranked;
  for (size_t i = 0; i < space.dims.size(); ++i) {
    const auto& [name, values] = space.dims[i];
    Ranked r{i, 0, name, "", values};
    const ParamRule* rule = nullptr;
    for (const auto& pr : param_rules(nproc))
      if (pr.name == name) rule = &pr;
    std::string verdicts;
    if (!rule || rule->ops.empty()) {
      r.score = 1.0;
      r.why = name + ": every op (100% of traced time)";
    } else {
      for (const auto& o : rule->ops) {
        r.score += share.count(o) ? share[o] : 0.0;
        if (verdict.count(o) && !verdict[o].empty()) verdicts += (verdicts.empty() ? "" : ", ") + o + " " + verdict[o];
      }
      char b[64];
      std::snprintf(b, sizeof b, "%.1f%%", 100 * r.score);
      r.why = name + ": " + b + " of traced time" + (verdicts.empty() ? "" : " (" + verdicts + ")");
    }
    // Value order from the verdicts.
    auto& v = r.values;
    if (name == "threads") {
      const bool mostly_waiting = waiting > 0.3;
      std::stable_sort(v.begin(), v.end(), [&](const std::string& a, const std::string& b) {
        return mostly_waiting ? std::stoll(a) < std::stoll(b) : std::stoll(a) > std::stoll(b);
      });
      r.why += mostly_waiting ? "; mostly waiting: fewer threads first" : "; more threads first";
    } else if (name == "kv") {
      std::stable_sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) { return kv_bytes_rank(a) < kv_bytes_rank(b); });
      r.why += "; smaller KV types first (attention reads every cached row)";
    } else if (name == "isa") {
      std::stable_sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) { return isa_rank(a) < isa_rank(b); });
    } else if (name == "weights") {
      // int8 rows (w8a8) pay off where the matmuls are compute-bound; Q4 rows read fewer bytes.
      bool compute = false;
      for (const char* o : {"qkv", "gate_up", "down"}) compute |= verdict.count(o) && verdict[o] == "compute-bound";
      std::stable_sort(v.begin(), v.end(), [&](const std::string& a, const std::string& b) {
        return compute ? (a == "w8a8") > (b == "w8a8") : (a == "native") > (b == "native");
      });
      r.why += compute ? "; matmuls compute-bound: w8a8 first" : "; matmuls not compute-bound: native first";
    } else if (name == "ctx") {
      std::stable_sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
    }
    ranked.push_back(r);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) { return a.score > b.score; });
  for (const auto& r : ranked) {
    ranking_.push_back(r.why);
    for (const auto& v : r.values) queue_.push_back({r.name, v, r.why});
  }
}

std::optional<TuneTry> TunePolicy::next(const LaunchParams& current) {
  while (!queue_.empty()) {
    TuneTry t = queue_.front();
    queue_.erase(queue_.begin());
    if (std::find(settled_.begin(), settled_.end(), t.param) != settled_.end()) continue;
    if (current.value_of(t.param, nproc_) == t.value) continue;
    return t;
  }
  return std::nullopt;
}

void TunePolicy::feedback(const TuneTry& t, const std::string& verdict) {
  if (verdict == "accept") settled_.push_back(t.param);
  if (verdict == "inconclusive" && t.attempt == 0) {
    TuneTry again = t;
    again.attempt = 1;
    queue_.insert(queue_.begin(), again);
  }
}

}  // namespace ouro::lab
