// The human-readable summary of a lab record (lab/runner.h: summarize_record): `ouro lab run`'s
// text output, MCP's lab_result text and `ouro agent`'s feedback.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "lab/ledger.h"
#include "lab/numfmt.h"
#include "lab/runner.h"

using nlohmann::json;

namespace ouro::lab {

std::string summarize_record(const json& rec) {
  std::ostringstream o;
  const json spec = rec.value("spec", json::object());
  o << "question:  " << spec.value("question", "") << "\n";
  o << "level:     " << spec.value("level", "") << "   pairs: " << rec.value("pairs", 0) << "\n";
  if (rec.contains("stats") && rec["stats"].is_object()) {
    char line[256];
    const json& stats = rec["stats"];
    const std::string ci_head = !stats.empty() && stats.begin()->is_object() ? interval_name(*stats.begin()) : "interval";
    std::snprintf(line, sizeof line, "%-18s %12s %12s %8s %18s %9s  %s\n", "metric", "baseline", "candidate", "ratio",
                  ci_head.c_str(), "p", "change");
    o << line;
    for (auto it = rec["stats"].begin(); it != rec["stats"].end(); ++it) {
      const json& s = it.value();
      const json ci = s.value("ci", json::array({0, 0}));
      std::snprintf(line, sizeof line, "%-18s %12s %12s %8.3f   [%6.3f, %6.3f] %9.2g  %s\n", it.key().c_str(),
                    fmt(s.value("baseline_median", 0.0), 5).c_str(), fmt(s.value("candidate_median", 0.0), 5).c_str(),
                    s.value("ratio", 0.0), ci.size() == 2 ? ci[0].get<double>() : 0.0, ci.size() == 2 ? ci[1].get<double>() : 0.0,
                    s.value("p_value", 1.0), s.value("change", "").c_str());
      o << line;
    }
  }
  if (rec.contains("correctness")) {
    o << "correctness:";
    for (auto it = rec["correctness"].begin(); it != rec["correctness"].end(); ++it)
      if (it.value().is_number()) o << " " << it.key() << "=" << fmt(it.value().get<double>());
    o << "\n";
  }
  if (rec.contains("criteria"))
    for (const auto& c : rec["criteria"])
      o << "  [" << c.value("verdict", "") << "] " << c.value("expr", "") << "\n      " << c.value("detail", "") << "\n";
  if (rec.contains("attribution") && rec["attribution"].is_array()) {
    o << "attribution (ms per run, median runs):\n";
    for (const auto& a : rec["attribution"]) {
      char line[200];
      std::snprintf(line, sizeof line, "  %-14s %9.3f -> %9.3f  (%+.3f, %+.1f%%)\n", a.value("name", "").c_str(),
                    a.value("baseline_ms", 0.0), a.value("candidate_ms", 0.0), a.value("delta_ms", 0.0), a.value("delta_pct", 0.0));
      o << line;
    }
  }
  if (rec.contains("trust") && rec["trust"].is_array()) {
    o << "trust (the lab's own clock and checks):\n";
    for (const auto& t : rec["trust"])
      o << "  [" << t.value("verdict", "") << "] " << t.value("check", "") << "\n      " << t.value("detail", "") << "\n";
  }
  o << "verdict:   " << rec.value("verdict", "");
  if (rec.contains("rejected_for") && rec["rejected_for"].is_string()) o << " (rejected for " << rec["rejected_for"].get<std::string>() << ")";
  o << "\n";
  if (rec.contains("reasons"))
    for (const auto& r : rec["reasons"]) o << "  - " << (r.is_string() ? r.get<std::string>() : r.dump()) << "\n";
  return o.str();
}


}  // namespace ouro::lab
