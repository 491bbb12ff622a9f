// `ouro trace diff`: an end-to-end change explained by spans.
#include "trace/analyze.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "trace/analyze_internal.h"

namespace ouro::analysis {

using json = nlohmann::json;

// ---- diff ------------------------------------------------------------------------------------

bool DiffKey::operator<(const DiffKey& o) const {
  if (cat != o.cat) return cat < o.cat;
  if (name != o.name) return name < o.name;
  if (layer.has_value() != o.layer.has_value()) return !layer.has_value();
  if (layer && *layer != *o.layer) return natural_less(*layer, *o.layer);
  return false;
}

std::string DiffKey::label() const {
  std::string s = (cat.empty() ? "" : cat + " ") + name;
  if (layer) s += " layer " + *layer;
  return s;
}

namespace {

struct KeyAcc {
  size_t calls = 0;
  double total_us = 0, self_us = 0;
};
struct Profile {
  std::map<DiffKey, KeyAcc> keys;
  double self_sum_us = 0;
  std::string main;
};

Profile profile(const Trace& t) {
  Profile p;
  const auto main = main_thread(t);
  if (main) p.main = t.thread_label(*main);
  std::vector<const Span*> on_main;
  std::vector<DiffKey> main_keys;
  for (const Span& s : t.spans) {
    DiffKey k{s.cat, s.name, s.layer};
    KeyAcc& a = p.keys[k];
    ++a.calls;
    a.total_us += s.end - s.start;
    if (main && s.thread == *main) {
      on_main.push_back(&s);
      main_keys.push_back(std::move(k));
    }
  }
  const auto self = self_times(on_main);
  for (size_t i = 0; i < on_main.size(); ++i) {
    p.keys[main_keys[i]].self_us += self[i];
    p.self_sum_us += self[i];
  }
  return p;
}

json key_json(const DiffKey& k) {
  return {{"cat", k.cat}, {"name", k.name}, {"layer", k.layer ? json(*k.layer) : json(nullptr)}};
}

}  // namespace

DiffResult diff(const Trace& base, const Trace& cand) {
  DiffResult d;
  d.base_source = base.source;
  d.cand_source = cand.source;
  const Profile pb = profile(base), pc = profile(cand);
  d.base_main = pb.main;
  d.cand_main = pc.main;
  d.base_wall_s = us_to_s(base.wall_us());
  d.cand_wall_s = us_to_s(cand.wall_us());
  d.delta_wall_s = d.cand_wall_s - d.base_wall_s;
  std::set<DiffKey> keys;
  for (const auto& [k, a] : pb.keys) keys.insert(k);
  for (const auto& [k, a] : pc.keys) keys.insert(k);
  double sum_base = 0, sum_cand = 0, sum_delta = 0;
  for (const DiffKey& k : keys) {
    DiffRow r;
    r.key = k;
    auto ib = pb.keys.find(k), ic = pc.keys.find(k);
    if (ib != pb.keys.end()) {
      r.base_s = us_to_s(ib->second.self_us);
      r.base_calls = ib->second.calls;
      r.base_total_s = us_to_s(ib->second.total_us);
    }
    if (ic != pc.keys.end()) {
      r.cand_s = us_to_s(ic->second.self_us);
      r.cand_calls = ic->second.calls;
      r.cand_total_s = us_to_s(ic->second.total_us);
    }
    r.delta_s = r.cand_s - r.base_s;
    sum_base += r.base_s;
    sum_cand += r.cand_s;
    sum_delta += r.delta_s;
    if (r.base_calls == 0) d.added.push_back(k);
    if (r.cand_calls == 0) d.vanished.push_back(k);
    d.rows.push_back(std::move(r));
  }
  auto by_delta = [](const DiffRow& a, const DiffRow& b) {
    const double da = std::fabs(a.delta_s), db = std::fabs(b.delta_s);
    if (da != db) return da > db;
    const double ta = std::fabs(a.cand_total_s - a.base_total_s), tb = std::fabs(b.cand_total_s - b.base_total_s);
    return ta > tb;
  };
  std::map<DiffKey, DiffRow> names;  // rows are in key order here, so sums are reproducible
  for (const DiffRow& r : d.rows) {
    DiffRow& n = names[DiffKey{r.key.cat, r.key.name, std::nullopt}];
    n.key = DiffKey{r.key.cat, r.key.name, std::nullopt};
    n.base_s += r.base_s;
    n.cand_s += r.cand_s;
    n.base_calls += r.base_calls;
    n.cand_calls += r.cand_calls;
    n.base_total_s += r.base_total_s;
    n.cand_total_s += r.cand_total_s;
  }
  for (auto& [k, n] : names) {
    n.delta_s = n.cand_s - n.base_s;
    d.by_name.push_back(std::move(n));
  }
  std::stable_sort(d.rows.begin(), d.rows.end(), by_delta);
  std::stable_sort(d.by_name.begin(), d.by_name.end(), by_delta);
  d.residual_base_s = d.base_wall_s - sum_base;
  d.residual_cand_s = d.cand_wall_s - sum_cand;
  d.residual_delta_s = d.delta_wall_s - sum_delta;
  return d;
}

json to_json(const DiffResult& d) {
  auto rows_json = [](const std::vector<DiffRow>& v, bool with_layer) {
    json rows = json::array();
    for (const DiffRow& r : v) {
      json k = key_json(r.key);
      if (!with_layer) k.erase("layer");
      k["base_s"] = r.base_s;
      k["cand_s"] = r.cand_s;
      k["delta_s"] = r.delta_s;
      k["base_calls"] = r.base_calls;
      k["cand_calls"] = r.cand_calls;
      k["base_total_s"] = r.base_total_s;
      k["cand_total_s"] = r.cand_total_s;
      rows.push_back(std::move(k));
    }
    return rows;
  };
  json added = json::array(), vanished = json::array();
  for (const DiffKey& k : d.added) added.push_back(key_json(k));
  for (const DiffKey& k : d.vanished) vanished.push_back(key_json(k));
  return {{"base", {{"file", d.base_source}, {"wall_s", d.base_wall_s}, {"main_thread", d.base_main}}},
          {"cand", {{"file", d.cand_source}, {"wall_s", d.cand_wall_s}, {"main_thread", d.cand_main}}},
          {"delta_wall_s", d.delta_wall_s},
          {"rows", rows_json(d.rows, true)},
          {"by_name", rows_json(d.by_name, false)},
          {"residual",
           {{"what", "main-thread wall time not in any span"},
            {"base_s", d.residual_base_s},
            {"cand_s", d.residual_cand_s},
            {"delta_s", d.residual_delta_s}}},
          {"new", added},
          {"vanished", vanished}};
}

}  // namespace ouro::analysis
