// `ouro trace summarize`: time per op, per layer and per thread against the machine's ceilings.
#include "trace/analyze.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "trace/analyze_internal.h"

namespace ouro::analysis {

using json = nlohmann::json;

// ---- summarize -------------------------------------------------------------------------------

namespace {

std::optional<double> compute_peak(const Ceilings& c, const std::string& precision, std::string* which) {
  if (precision == "int8") {
    *which = "int8";
    return c.int8_gops;
  }
  if (precision == "bf16") {
    *which = "bf16";
    return c.bf16_gflops;
  }
  *which = "fp32";
  return c.fp32_gflops;
}

std::string verdict(const OpRow& r, const std::optional<Ceilings>& c, const std::optional<double>& peak,
                    const Thresholds& th) {
  if (r.cat == "sync-wait") return "waiting";
  bool checked = false;
  if (c && r.bw_fraction) {
    checked = true;
    bool below_ridge = true;  // without FLOPs (or a compute ceiling) the memory roof is the only one
    if (r.flops && r.bytes && *r.bytes > 0 && peak && c->read_gb_s)
      below_ridge = *r.flops / *r.bytes < *peak / *c->read_gb_s;
    if (*r.bw_fraction >= th.bound_fraction && below_ridge) return "memory-bound";
  }
  if (c && r.flop_fraction) {
    checked = true;
    if (*r.flop_fraction >= th.bound_fraction) return "compute-bound";
  }
  if (r.total_s > 0 && r.wait_s / r.total_s >= th.waiting_fraction) return "waiting";
  if (!checked) return "unknown";
  return r.mean_s * kUsPerS < th.short_call_us ? "overhead-bound" : "under-utilized";
}

void add_opt(std::optional<double>& acc, const std::optional<double>& v) {
  if (v) acc = acc.value_or(0) + *v;
}

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json thread_json(const ThreadKey& t) { return {{"pid", t.pid}, {"tid", t.tid}}; }

}  // namespace

Summary summarize(const Trace& t, const std::optional<Ceilings>& c, const Thresholds& th) {
  Summary s;
  s.source = t.source;
  s.spans = t.spans.size();
  s.ceilings = c;
  s.thresholds = th;
  s.unmatched_end = t.unmatched_end;
  s.unclosed_begin = t.unclosed_begin;
  s.wall_start_us = t.wall_start;
  const double wall_us = t.wall_us();
  s.wall_s = us_to_s(wall_us);
  const bool op_mode = std::any_of(t.spans.begin(), t.spans.end(), [](const Span& x) { return x.cat == "op"; });
  s.mode = op_mode ? "op" : "all-spans";
  s.main = main_thread(t);
  if (s.main) s.main_label = t.thread_label(*s.main);

  // The table: op spans (or all spans) of the main thread; each instant goes to the innermost.
  std::vector<const Span*> table;
  std::vector<Interval> waits;
  for (const Span& x : t.spans) {
    const bool on_main = s.main && x.thread == *s.main;
    if (on_main && x.cat == "sync-wait") waits.push_back({x.start, x.end});
    if (op_mode && x.cat != "op") continue;
    if (on_main) table.push_back(&x);
    else if (op_mode) ++s.table_spans_elsewhere;
  }
  const std::vector<Interval> wait_u = union_of(std::move(waits));
  const std::vector<double> self = self_times(table);

  struct Acc {
    OpRow row;
    double total_us = 0, self_us = 0, wait_us = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> groups;  // (name, cat)
  std::map<std::string, LayerRow, decltype(&natural_less)> layers(&natural_less);
  std::map<std::string, std::pair<double, double>, decltype(&natural_less)> layer_us(&natural_less);  // total, self
  LayerRow no_layer;
  no_layer.layer = "(no layer)";
  double no_layer_total = 0, no_layer_self = 0;
  bool any_layer = false;
  double self_sum = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const Span& x = *table[i];
    const double dur = x.end - x.start;
    Acc& a = groups[{x.name, x.cat}];
    if (a.row.calls == 0) {
      a.row.name = x.name;
      a.row.cat = x.cat;
    }
    ++a.row.calls;
    a.total_us += dur;
    a.self_us += self[i];
    self_sum += self[i];
    a.wait_us += x.cat == "sync-wait" ? dur : covered_within(wait_u, x.start, x.end);
    add_opt(a.row.bytes, x.bytes);
    add_opt(a.row.flops, x.flops);
    if (a.row.peak.empty() && !x.precision.empty()) a.row.peak = x.precision;
    LayerRow* lr = &no_layer;
    double *lt = &no_layer_total, *ls = &no_layer_self;
    if (x.layer) {
      any_layer = true;
      lr = &layers[*x.layer];
      lr->layer = *x.layer;
      auto& u = layer_us[*x.layer];
      lt = &u.first;
      ls = &u.second;
    }
    ++lr->calls;
    *lt += dur;
    *ls += self[i];
    add_opt(lr->bytes, x.bytes);
    add_opt(lr->flops, x.flops);
  }

  auto share = [&](double us) { return wall_us > 0 ? us / wall_us : 0.0; };
  for (auto& [k, a] : groups) {
    OpRow r = std::move(a.row);
    r.total_s = us_to_s(a.total_us);
    r.self_s = us_to_s(a.self_us);
    r.share = share(a.self_us);
    r.mean_s = r.total_s / (double)r.calls;
    r.wait_s = us_to_s(a.wait_us);
    if (a.total_us > 0) {
      if (r.bytes) r.gb_s = per_us_to_giga(*r.bytes, a.total_us);
      if (r.flops) r.gflop_s = per_us_to_giga(*r.flops, a.total_us);
    }
    std::optional<double> peak;
    if (c) {
      std::string which;
      peak = compute_peak(*c, r.peak, &which);
      r.peak = which;
      if (r.gb_s && c->read_gb_s) r.bw_fraction = *r.gb_s / *c->read_gb_s;
      if (r.gflop_s && peak) r.flop_fraction = *r.gflop_s / *peak;
    }
    r.verdict = verdict(r, c, peak, th);
    s.ops.push_back(std::move(r));
  }
  std::sort(s.ops.begin(), s.ops.end(), [](const OpRow& a, const OpRow& b) {
    if (a.self_s != b.self_s) return a.self_s > b.self_s;
    if (a.name != b.name) return a.name < b.name;
    return a.cat < b.cat;
  });
  const double residual_us = wall_us - self_sum;
  s.residual_s = us_to_s(residual_us);
  s.residual_share = share(residual_us);

  if (any_layer) {
    auto finish_layer = [&](LayerRow r, double total_us, double self_us) {
      r.total_s = us_to_s(total_us);
      r.self_s = us_to_s(self_us);
      r.share = share(self_us);
      if (total_us > 0) {
        if (r.bytes) r.gb_s = per_us_to_giga(*r.bytes, total_us);
        if (r.flops) r.gflop_s = per_us_to_giga(*r.flops, total_us);
      }
      s.layers.push_back(std::move(r));
    };
    for (auto& [k, r] : layers) finish_layer(std::move(r), layer_us[k].first, layer_us[k].second);
    if (no_layer.calls) finish_layer(std::move(no_layer), no_layer_total, no_layer_self);
  }

  // Threads: busy = union of kernel and op spans (every span when the trace has neither).
  const bool ouro_cats = std::any_of(t.spans.begin(), t.spans.end(),
                                     [](const Span& x) { return x.cat == "op" || x.cat == "kernel"; });
  s.busy_rule = ouro_cats ? "union of cat kernel and op spans" : "union of all spans (no kernel/op spans in the trace)";
  std::map<ThreadKey, std::pair<std::vector<Interval>, std::vector<Interval>>, ThreadLess> per;
  std::map<ThreadKey, size_t, ThreadLess> counts;
  for (const auto& [th_key, name] : t.thread_names) per[th_key];
  for (const Span& x : t.spans) {
    auto& p = per[x.thread];
    ++counts[x.thread];
    if (!ouro_cats || x.cat == "op" || x.cat == "kernel") p.first.push_back({x.start, x.end});
    if (x.cat == "sync-wait") p.second.push_back({x.start, x.end});
  }
  for (auto& [th_key, p] : per) {
    ThreadRow r;
    r.thread = th_key;
    r.label = t.thread_label(th_key);
    r.spans = counts[th_key];
    const double busy = total_length(union_of(std::move(p.first)));
    r.busy_s = us_to_s(busy);
    r.waiting_s = us_to_s(total_length(union_of(std::move(p.second))));
    r.idle_s = us_to_s(wall_us - busy);
    s.threads.push_back(std::move(r));
  }
  return s;
}

json to_json(const Summary& s) {
  json j;
  j["file"] = s.source;
  j["mode"] = s.mode;
  j["spans"] = s.spans;
  j["wall_s"] = s.wall_s;
  j["wall_start_us"] = s.wall_start_us;
  j["main_thread"] = s.main ? json{{"pid", s.main->pid}, {"tid", s.main->tid}, {"label", s.main_label}} : json(nullptr);
  json ops = json::array();
  for (const OpRow& r : s.ops)
    ops.push_back({{"name", r.name},
                   {"cat", r.cat},
                   {"calls", r.calls},
                   {"total_s", r.total_s},
                   {"self_s", r.self_s},
                   {"share", r.share},
                   {"mean_s", r.mean_s},
                   {"wait_s", r.wait_s},
                   {"bytes", opt(r.bytes)},
                   {"flops", opt(r.flops)},
                   {"gb_s", opt(r.gb_s)},
                   {"gflop_s", opt(r.gflop_s)},
                   {"bw_fraction", opt(r.bw_fraction)},
                   {"flop_fraction", opt(r.flop_fraction)},
                   {"peak", r.peak.empty() ? json(nullptr) : json(r.peak)},
                   {"verdict", r.verdict}});
  j["ops"] = ops;
  j["residual"] = {{"self_s", s.residual_s},
                   {"share", s.residual_share},
                   {"what", s.mode == "op" ? "wall time not covered by any op span on the main thread"
                                           : "wall time not covered by any span on the main thread"}};
  j["op_spans_off_main"] = s.table_spans_elsewhere;
  json layers = json::array();
  for (const LayerRow& r : s.layers)
    layers.push_back({{"layer", r.layer},
                      {"calls", r.calls},
                      {"total_s", r.total_s},
                      {"self_s", r.self_s},
                      {"share", r.share},
                      {"bytes", opt(r.bytes)},
                      {"flops", opt(r.flops)},
                      {"gb_s", opt(r.gb_s)},
                      {"gflop_s", opt(r.gflop_s)}});
  j["layers"] = layers;
  json threads = json::array();
  for (const ThreadRow& r : s.threads) {
    json tj = thread_json(r.thread);
    tj["label"] = r.label;
    tj["spans"] = r.spans;
    tj["busy_s"] = r.busy_s;
    tj["waiting_s"] = r.waiting_s;
    tj["idle_s"] = r.idle_s;
    threads.push_back(std::move(tj));
  }
  j["threads"] = threads;
  j["busy_rule"] = s.busy_rule;
  if (s.ceilings)
    j["probe"] = {{"source", s.ceilings->source},
                  {"read_gb_s", opt(s.ceilings->read_gb_s)},
                  {"fp32_gflops", opt(s.ceilings->fp32_gflops)},
                  {"bf16_gflops", opt(s.ceilings->bf16_gflops)},
                  {"int8_gops", opt(s.ceilings->int8_gops)}};
  else
    j["probe"] = nullptr;
  j["thresholds"] = {{"bound_fraction", s.thresholds.bound_fraction},
                     {"waiting_fraction", s.thresholds.waiting_fraction},
                     {"short_call_us", s.thresholds.short_call_us}};
  j["unmatched_end"] = s.unmatched_end;
  j["unclosed_begin"] = s.unclosed_begin;
  return j;
}

}  // namespace ouro::analysis
