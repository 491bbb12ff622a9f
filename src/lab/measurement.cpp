#include "lab/measurement.h"

#include <cstdio>

#include "core/sha256.h"

using nlohmann::json;

namespace ouro::lab {

std::string file_sha256(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  Sha256 h;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) h.update(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  return failed ? "" : h.hex();
}

Expected<std::string> measurement_key(const Spec& spec, const BuildContext& ctx) {
  const json s = spec_to_json(spec);
  json sides = json::object();
  for (auto [side, name] : {std::pair{&spec.baseline, "baseline"}, std::pair{&spec.candidate, "candidate"}}) {
    json j = {{"build", side->build}, {"args", side->args}, {"env", side->env}, {"revision", side->revision}};
    const bool given_binary = side->revision == "worktree" && side->build.empty() && (!ctx.worktree_bin.empty() || ctx.no_build);
    if (given_binary) {
      // What runs is that binary, whatever the checkout's sources say.
      const std::string bin = !ctx.worktree_bin.empty() ? ctx.worktree_bin : ctx.repo_root + "/build/ouro";
      const std::string h = file_sha256(bin);
      if (h.empty()) return runtime_error("cannot read the binary " + bin + " to identify the measurement");
      j["binary_sha256"] = h;
    } else {
      auto d = describe_side(ctx, *side);
      if (!d) return d.error();
      j["commit"] = d->commit;
      j["dirty"] = d->dirty;
      j["diff_sha256"] = d->diff_sha256;
    }
    sides[name] = j;
  }
  json criteria = json::array();
  for (const auto& c : spec.criteria) criteria.push_back({{"expr", c.text}, {"source", c.source}});
  // "method": how the lab measures; a record measured another way (before issue 15 the
  // candidate's own `ouro bench` figures were taken at their word; at engine level, before issue
  // 31, its cross-check ran `ouro bench` on other work than the timed runs) is never reused for this one.
  const json identity = {{"method", s["level"] == "engine" ? "lab-clock-checked-runs-bench-same-work" : "lab-clock-checked-runs"},
                         {"level", s["level"]},
                         {"sides", sides},
                         {"workload", s["workload"]},
                         {"repeats", spec.repeats},
                         {"max_repeats", spec.max_repeats},
                         {"warmup", spec.warmup},
                         {"timeout", spec.timeout_s},
                         {"memory_mib", spec.memory_mib},
                         {"min_effect", spec.min_effect},
                         {"metrics", spec.metrics},
                         {"trace", spec.trace},
                         {"criteria", criteria},
                         {"criteria_file", spec.criteria_name},
                         {"criteria_sha256", spec.criteria_sha256}};
  return sha256_hex(identity.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::optional<StoredMeasurement> find_measurement(const std::vector<json>& records, const std::string& key) {
  std::optional<StoredMeasurement> found;
  for (const auto& r : records) {
    if (!r.is_object() || r.value("kind", json()) != json("run") || r.value("measurement_key", json()) != json(key)) continue;
    if (!found) found.emplace();
    found->record = r;
    found->ids.push_back(r.value("id", json()).is_string() ? r["id"].get<std::string>() : "?");
  }
  return found;
}

}  // namespace ouro::lab
