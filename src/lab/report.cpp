// The HTML report. Everything is generated as text here (no template engine): the page is small,
// and one place that escapes every record string is easier to audit than a template's rules.
// The output does not depend on the time of generation, so the same ledger gives the same page.
#include "lab/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "core/sha256.h"
#include "lab/ledger.h"

namespace ouro::lab {

using nlohmann::json;

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

namespace {

// The one script on the page: the verdict filter (also settable by a #verdict=reject fragment) and
// the "N shown" count, which only the script fills in, so a test can tell that it ran. Its SHA-256
// goes into the CSP, so it must be emitted byte for byte.
const char* kScript = R"JS(
(function () {
  var sel = document.getElementById('verdict-filter');
  var shown = document.getElementById('shown');
  var m = /^#verdict=(\w+)$/.exec(location.hash);
  if (m && sel.querySelector('option[value="' + m[1] + '"]')) sel.value = m[1];
  function apply() {
    var v = sel.value, n = 0;
    var els = document.querySelectorAll('tr.exp, section.exp-detail');
    for (var i = 0; i < els.length; i++) {
      var on = v === 'all' || els[i].getAttribute('data-verdict') === v;
      els[i].style.display = on ? '' : 'none';
      if (on && els[i].tagName === 'TR') n++;
    }
    shown.textContent = n + ' shown';
  }
  sel.addEventListener('change', apply);
  apply();
})();
)JS";

const char* kStyle = R"CSS(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}h3{font-size:15px;margin:0 0 6px}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.q{max-width:420px}td.num{white-space:nowrap;font-variant-numeric:tabular-nums}
.verdict{font-weight:600;padding:1px 6px;border-radius:3px;color:#fff}
.v-accept{background:#2e7d32}.v-reject{background:#c62828}.v-inconclusive{background:#b26a00}.v-other{background:#757575}
ul.reasons{margin:0;padding-left:16px}section.exp-detail{border:1px solid #ddd;border-radius:4px;padding:10px 14px;margin:12px 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0}dt{color:#666}dd{margin:0;white-space:pre-wrap}
svg{font:11px system-ui,sans-serif;display:block;margin:6px 0}svg .base{fill:#1565c0}svg .cand{fill:#ef6c00}
svg .box{fill:none;stroke:#999}svg .med{stroke:#222;stroke-width:2}svg .axis{stroke:#bbb}
svg .line{fill:none;stroke:#2e7d32;stroke-width:1.5}svg .pt{fill:#2e7d32}.muted{color:#777}
table.small{width:auto;font-size:13px}.charts{display:flex;flex-wrap:wrap;gap:4px 24px}
)CSS";

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (unsigned char)bytes[i] << 16 | (unsigned char)bytes[i + 1] << 8 | (unsigned char)bytes[i + 2];
    o += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = (unsigned char)bytes[i] << 16;
    o += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const unsigned v = (unsigned char)bytes[i] << 16 | (unsigned char)bytes[i + 1] << 8;
    o += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return o;
}

// CSP source for a script: 'sha256-' + base64 of the raw digest.
std::string csp_hash(const std::string& script) {
  const std::string hex = sha256_hex(script);
  std::string raw;
  for (size_t i = 0; i < hex.size(); i += 2) raw += (char)std::stoi(hex.substr(i, 2), nullptr, 16);
  return "'sha256-" + base64(raw) + "'";
}

std::string f(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

std::string num(double v) {
  const double a = std::fabs(v);
  if (!std::isfinite(v)) return f("%g", v);
  if (a >= 1e4) return f("%.0f", v);
  if (a >= 100) return f("%.1f", v);
  if (a >= 1) return f("%.3f", v);
  return f("%.4g", v);
}

std::string e(const std::string& s) { return html_escape(s); }

// Element ids from record ids: only [A-Za-z0-9_-] survive, so the id can't break out of anything.
std::string anchor(const json& rec, size_t index) {
  std::string id = jstr(rec, "id"), o;
  for (char c : id.substr(0, 32)) o += std::isalnum((unsigned char)c) || c == '-' || c == '_' ? c : '_';
  return "exp-" + (o.empty() ? "row" + std::to_string(index) : o);
}

std::string verdict_class(const std::string& v) {
  return v == "accept" || v == "reject" || v == "inconclusive" ? "v-" + v : "v-other";
}

std::string ratio_cell(const json& rec, const std::string& metric) {
  const json* stats = jobj(rec, "stats");
  const json* st = stats && !metric.empty() ? jobj(*stats, metric.c_str()) : nullptr;
  if (!st) return "-";
  std::string s = e(metric) + " ";
  auto r = jnum(*st, "ratio");
  s += r ? f("&times;%.3f", *r) : "&times;?";
  const json* ci = jarr(*st, "ci");
  if (ci && ci->size() == 2 && (*ci)[0].is_number() && (*ci)[1].is_number())
    s += " <span class=\"muted\" title=\"" + e(interval_name(*st, true)) + "\">[" + f("%.3f", (*ci)[0].get<double>()) + ", " +
         f("%.3f", (*ci)[1].get<double>()) + "] " + e(interval_name(*st)) + "</span>";
  return s;
}

std::string text_of(const json& x) { return x.is_string() ? x.get<std::string>() : safe_dump(x); }

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * (double)(v.size() - 1);
  const size_t lo = (size_t)std::floor(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

// A strip plot with box (quartiles) and median of one metric's baseline and candidate samples.
std::string strip_chart(const std::string& metric, const std::vector<double>& base, const std::vector<double>& cand,
                        const json* st) {
  const double W = 480, H = 92, L = 96, R = 16;
  double dmin = INFINITY, dmax = -INFINITY;
  for (const auto* v : {&base, &cand})
    for (double x : *v) dmin = std::min(dmin, x), dmax = std::max(dmax, x);
  // A little room at both ends so extreme dots stay clear of the labels; all-equal samples get some.
  const double pad = dmax - dmin > 1e-12 * std::max(1.0, std::fabs(dmax)) ? (dmax - dmin) * 0.04
                                                                           : std::max(std::fabs(dmin) * 0.05, 1e-9);
  const double lo = dmin - pad, hi = dmax + pad;
  const char* axis_fmt = std::max(std::fabs(dmin), std::fabs(dmax)) >= 100 ? "%.1f" : "%.4g";
  auto X = [&](double v) { return L + (v - lo) / (hi - lo) * (W - L - R); };
  std::ostringstream o;
  o << "<svg class=\"chart\" data-metric=\"" << e(metric) << "\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\">";
  std::string caption = metric;
  if (st)
    if (auto r = jnum(*st, "ratio")) caption += "  candidate/baseline " + f("%.3f", *r);
  o << "<text x=\"" << L << "\" y=\"11\">" << e(caption) << "</text>";
  const struct {
    const std::vector<double>* v;
    const char* name;
    const char* cls;
    double y;
  } rows[] = {{&base, "baseline", "base", 32}, {&cand, "candidate", "cand", 58}};
  for (const auto& row : rows) {
    o << "<text x=\"4\" y=\"" << row.y + 4 << "\">" << row.name << " (" << row.v->size() << ")</text>";
    if (row.v->empty()) continue;
    const double q1 = quantile(*row.v, 0.25), med = quantile(*row.v, 0.5), q3 = quantile(*row.v, 0.75);
    o << "<rect class=\"box\" x=\"" << f("%.1f", X(q1)) << "\" y=\"" << row.y - 8 << "\" width=\""
      << f("%.1f", std::max(X(q3) - X(q1), 0.5)) << "\" height=\"16\"/>";
    o << "<line class=\"med\" x1=\"" << f("%.1f", X(med)) << "\" x2=\"" << f("%.1f", X(med)) << "\" y1=\""
      << row.y - 9 << "\" y2=\"" << row.y + 9 << "\"><title>median " << num(med) << "</title></line>";
    for (size_t i = 0; i < row.v->size(); ++i)  // a fixed small jitter keeps equal samples visible
      o << "<circle class=\"" << row.cls << "\" cx=\"" << f("%.1f", X((*row.v)[i])) << "\" cy=\""
        << row.y + ((int)(i % 5) - 2) * 2 << "\" r=\"2.5\"><title>" << num((*row.v)[i]) << "</title></circle>";
  }
  o << "<line class=\"axis\" x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"74\" y2=\"74\"/>";
  o << "<text x=\"" << f("%.1f", X(dmin)) << "\" y=\"87\">" << f(axis_fmt, dmin) << "</text>";
  o << "<text x=\"" << f("%.1f", X(dmax)) << "\" y=\"87\" text-anchor=\"end\">" << f(axis_fmt, dmax) << "</text>";
  o << "</svg>";
  return o.str();
}

// ---- trends: one line per measurement, never across workloads ---------------------------------

// The unit of a metric, from its name.
std::string unit_of(const std::string& m) {
  auto ends = [&](const char* s) { const std::string x(s); return m.size() >= x.size() && m.compare(m.size() - x.size(), x.size(), x) == 0; };
  if (ends("tok_s")) return "tok/s";
  if (m.rfind("ns_", 0) == 0) return "ns";
  if (ends("gb_s")) return "GB/s";
  if (ends("gflops")) return "GFLOP/s";
  if (ends("_mib")) return "MiB";
  if (ends("_s")) return "s";
  if (ends("throughput")) return "req/s";
  return "";
}

// What a record's figure of `metric` measured, in words: level, the workload's shape, threads and
// the kernel ISA. Two records' figures are comparable exactly when these words are equal.
std::string trend_key(const json& rec, const std::string& metric) {
  const json* spec = jobj(rec, "spec");
  const json* w = spec ? jobj(*spec, "workload") : nullptr;
  const std::string level = spec ? jstr(*spec, "level") : "";
  std::ostringstream k;
  k << metric << " (" << unit_of(metric) << "), " << (level.empty() ? "level unrecorded" : level);
  if (w) {
    if (!jstr(*w, "kernel").empty()) {
      k << ", " << jstr(*w, "kernel");
      if (const json* a = jarr(*w, "kernel_args"))
        for (const json& x : *a) k << " " << text_of(x);
    } else {
      auto n = [&](const char* key) { auto v = jnum(*w, key); return v ? (long long)*v : 0LL; };
      k << ", pp" << n("prompt_len") << " tg" << n("gen_len") << " depth " << n("depth");
      if (level == "serve") k << ", " << n("concurrency") << " streams x " << n("requests") << " requests";
      if (const json* p = jarr(*w, "prompts"); p && !p->empty()) k << ", " << p->size() << " prompt texts";
    }
    if (!jstr(*w, "model").empty()) k << ", " << jstr(*w, "model").substr(jstr(*w, "model").find_last_of('/') + 1);
    if (auto t = jnum(*w, "threads"); t && *t > 0) k << ", " << (long long)*t << " threads";
  }
  const json* m = jobj(rec, "machine");
  k << ", ISA " << (m && !jstr(*m, "isa").empty() ? jstr(*m, "isa") : "unrecorded");
  return k.str();
}

// Candidate medians of accepted records, one panel per comparable measurement (trend_key) with two
// records or more; a measurement with no comparable neighbour is a row of the single-points table.
// Rates and times are never negative: every axis starts at zero unless a value is below it, and
// then says so.
std::string trend_chart(const std::vector<const json*>& by_seq) {
  const char* metrics[] = {"prefill_tok_s", "decode_tok_s", "output_tok_s", "ns_per_op"};
  struct Pt {
    const json* rec;
    double v;
  };
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::string, std::vector<Pt>>> groups;  // key -> (metric, points)
  for (const json* r : by_seq) {
    if (jstr(*r, "verdict") != "accept") continue;
    const json* stats = jobj(*r, "stats");
    for (const char* m : metrics) {
      const json* st = stats ? jobj(*stats, m) : nullptr;
      auto v = st ? jnum(*st, "candidate_median") : std::nullopt;
      if (!v || !std::isfinite(*v)) continue;
      const std::string key = trend_key(*r, m);
      if (!groups.count(key)) order.push_back(key);
      groups[key].first = m;
      groups[key].second.push_back({r, *v});
    }
  }
  std::ostringstream o;
  o << "<div id=\"trends\">";
  if (order.empty()) {
    o << "<p class=\"muted\">no accepted experiment with " << metrics[0] << ", " << metrics[1] << ", " << metrics[2] << " or "
      << metrics[3] << " yet</p></div>";
    return o.str();
  }
  std::ostringstream singles;
  size_t n_single = 0;
  const double W = 720, H = 150, L = 70, R = 20, top = 30, bottom = H - 30;
  for (const std::string& key : order) {
    const auto& [metric, pts] = groups[key];
    if (pts.size() < 2) {
      const json* st = jobj(*jobj(*pts[0].rec, "stats"), metric.c_str());
      auto ratio = jnum(*st, "ratio");
      singles << "<tr><td>" << e(jstr(*pts[0].rec, "id")) << "</td><td>"
              << e(key) << "</td><td class=\"num\">" << num(pts[0].v) << "</td><td class=\"num\">"
              << (ratio ? f("&times;%.3f", *ratio) : "?") << "</td></tr>";
      ++n_single;
      continue;
    }
    double lo = 0, hi = 0;
    for (const Pt& p : pts) lo = std::min(lo, p.v), hi = std::max(hi, p.v);
    const bool from_zero = lo >= 0;
    hi += (hi - lo) * 0.1 + (hi == lo ? 1e-9 : 0);
    if (!from_zero) lo -= (hi - lo) * 0.1;
    auto X = [&](size_t i) { return L + (double)i / (double)(pts.size() - 1) * (W - L - R); };
    auto Y = [&](double v) { return bottom - (v - lo) / (hi - lo) * (bottom - top); };
    const bool lower_better = metric.rfind("ns_", 0) == 0;
    o << "<svg class=\"trend\" data-key=\"" << e(key) << "\" data-ymin=\"" << f("%.6g", lo) << "\" width=\"" << W
      << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\">";
    o << "<text x=\"4\" y=\"14\">" << e(key) << "</text>";
    o << "<text x=\"4\" y=\"26\" class=\"muted\">candidate median, " << (lower_better ? "lower" : "higher") << " is better"
      << (from_zero ? "" : "; this axis does not start at zero") << "</text>";
    o << "<line class=\"axis\" x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << bottom << "\" y2=\"" << bottom << "\"/>";
    o << "<text x=\"" << L - 4 << "\" y=\"" << top + 8 << "\" text-anchor=\"end\">" << num(hi) << "</text>";
    o << "<text x=\"" << L - 4 << "\" y=\"" << bottom << "\" text-anchor=\"end\">" << num(lo) << "</text>";
    std::string path;
    for (size_t i = 0; i < pts.size(); ++i) path += f("%.1f", X(i)) + "," + f("%.1f", Y(pts[i].v)) + " ";
    o << "<polyline class=\"line\" points=\"" << path << "\"/>";
    const size_t every = std::max<size_t>(1, pts.size() / 12);  // keep the id labels readable
    for (size_t i = 0; i < pts.size(); ++i) {
      const std::string id = jstr(*pts[i].rec, "id");
      o << "<circle class=\"pt\" cx=\"" << f("%.1f", X(i)) << "\" cy=\"" << f("%.1f", Y(pts[i].v)) << "\" r=\"3\"><title>"
        << e(id) << ": " << num(pts[i].v) << "</title></circle>";
      if (i % every == 0)
        o << "<text x=\"" << f("%.1f", X(i)) << "\" y=\"" << bottom + 14 << "\" text-anchor=\"middle\">" << e(id.substr(0, 12))
          << "</text>";
    }
    o << "</svg>";
  }
  if (n_single)
    o << "<p class=\"muted\">Measured once (no accepted record of the same measurement to join a line with):</p>"
      << "<table class=\"small\" id=\"single-points\"><thead><tr><th>id</th><th>measurement</th><th>candidate median</th>"
      << "<th>candidate/baseline</th></tr></thead><tbody>" << singles.str() << "</tbody></table>";
  o << "</div>";
  return o.str();
}

void detail_section(std::ostringstream& o, const json& rec, size_t index) {
  const json* spec = jobj(rec, "spec");
  const json none = json::object();
  const json& sp = spec ? *spec : none;
  const std::string verdict = jstr(rec, "verdict");
  o << "<section class=\"exp-detail\" id=\"" << anchor(rec, index) << "\" data-verdict=\"" << e(verdict) << "\">";
  o << "<h3>" << e(jstr(rec, "id")) << " <span class=\"verdict " << verdict_class(verdict) << "\">"
    << e(verdict.empty() ? "-" : verdict) << "</span></h3><dl>";
  auto item = [&](const char* label, const std::string& v) {
    if (!v.empty()) o << "<dt>" << label << "</dt><dd>" << e(v) << "</dd>";
  };
  item("question", jstr(sp, "question"));
  item("hypothesis", jstr(sp, "hypothesis"));
  item("kind", jstr(rec, "kind"));
  item("rerun of", jstr(rec, "rerun_of"));
  item("time", jstr(rec, "time"));
  item("spec", jstr(rec, "spec_path"));
  item("command", jstr(rec, "command"));
  if (const json* revs = jobj(rec, "revisions"))
    for (auto it = revs->begin(); it != revs->end(); ++it) {
      std::string s = jstr(*it, "revision");
      if (const std::string c = jstr(*it, "commit"); !c.empty()) s += " @ " + c.substr(0, 12);
      if (it->is_object() && it->contains("dirty") && (*it)["dirty"] == true) s += " (dirty)";
      if (const json* b = jarr(*it, "build"))
        for (const json& x : *b) s += " " + text_of(x);
      if (const json* a = jarr(*it, "args"))
        for (const json& x : *a) s += " " + text_of(x);
      o << "<dt>" << e(it.key()) << "</dt><dd>" << e(s) << "</dd>";
    }
  if (const json* m = jobj(rec, "machine")) {
    std::string s = jstr(*m, "cpu");
    if (auto l = jnum(*m, "load1")) s += ", load1 " + f("%.2f", *l);
    if (m->contains("quiet") && (*m)["quiet"].is_boolean()) s += (*m)["quiet"].get<bool>() ? ", quiet" : ", not quiet";
    item("machine", s);
  }
  if (const json* c = jobj(rec, "correctness")) {
    std::string s;
    for (const char* k : {"top1_agreement", "greedy_match", "max_abs_logit_diff"})
      if (auto v = jnum(*c, k)) s += (s.empty() ? "" : ", ") + std::string(k) + " " + f("%.4g", *v);
    if (const json* h = jobj(*c, "heldout"))
      for (const char* k : {"top1_agreement", "greedy_match", "max_abs_logit_diff"})
        if (auto v = jnum(*h, k)) s += std::string(", held-out ") + k + " " + f("%.4g", *v);
    item("correctness", s);
  }
  item("note", jstr(rec, "note"));
  o << "</dl>";
  // Charts: every metric with numeric samples on either side.
  const json* samples = jobj(rec, "samples");
  const json* base = samples ? jobj(*samples, "baseline") : nullptr;
  const json* cand = samples ? jobj(*samples, "candidate") : nullptr;
  const json* stats = jobj(rec, "stats");
  std::set<std::string> metrics;
  for (const json* side : {base, cand})
    if (side)
      for (auto it = side->begin(); it != side->end(); ++it)
        if (it->is_array()) metrics.insert(it.key());
  o << "<div class=\"charts\">";
  for (const std::string& m : metrics) {
    const auto b = base ? jnums(*base, m.c_str()) : std::vector<double>{};
    const auto c = cand ? jnums(*cand, m.c_str()) : std::vector<double>{};
    if (b.empty() && c.empty()) continue;
    o << strip_chart(m, b, c, stats ? jobj(*stats, m.c_str()) : nullptr);
  }
  o << "</div>";
  if (const json* cr = jarr(rec, "criteria"); cr && !cr->empty()) {
    o << "<table class=\"small criteria\"><tr><th>criterion</th><th>verdict</th><th>detail</th><th>source</th></tr>";
    for (const json& x : *cr)
      o << "<tr><td>" << e(jstr(x, "expr")) << "</td><td>" << e(jstr(x, "verdict")) << "</td><td>"
        << e(jstr(x, "detail")) << "</td><td>" << e(jstr(x, "source")) << "</td></tr>";
    o << "</table>";
  }
  if (const json* at = jarr(rec, "attribution"); at && !at->empty()) {
    o << "<table class=\"small attribution\"><tr><th>op</th><th>baseline ms</th><th>candidate ms</th><th>delta ms</th>"
         "<th>delta %</th></tr>";
    for (const json& x : *at) {
      auto cell = [&](const char* k, const char* fmt) {
        auto v = jnum(x, k);
        return v ? f(fmt, *v) : std::string("-");
      };
      o << "<tr><td>" << e(jstr(x, "name")) << "</td><td class=\"num\">" << cell("baseline_ms", "%.3f")
        << "</td><td class=\"num\">" << cell("candidate_ms", "%.3f") << "</td><td class=\"num\">"
        << cell("delta_ms", "%+.3f") << "</td><td class=\"num\">" << cell("delta_pct", "%+.1f") << "</td></tr>";
    }
    o << "</table>";
  }
  o << "</section>\n";
}

}  // namespace

std::string render_report(const std::vector<json>& records, const std::string& title) {
  // Newest first for reading; the trend runs in seq order. Records without an integer seq keep
  // their file position.
  std::vector<const json*> by_seq;
  for (const json& r : records) by_seq.push_back(&r);
  auto seq_of = [](const json* r) -> long long {
    auto it = r->is_object() ? r->find("seq") : r->end();
    return r->is_object() && it != r->end() && it->is_number_integer() ? it->get<long long>() : 0;
  };
  std::stable_sort(by_seq.begin(), by_seq.end(), [&](const json* a, const json* b) { return seq_of(a) < seq_of(b); });
  std::map<std::string, int> counts;
  for (const json* r : by_seq) ++counts[jstr(*r, "verdict").empty() ? "-" : jstr(*r, "verdict")];

  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
    << "script-src " << csp_hash(kScript) << "\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>" << e(title) << "</title><style>" << kStyle << "</style></head><body>\n";
  o << "<h1>" << e(title) << "</h1><p class=\"muted\">" << records.size() << " experiment"
    << (records.size() == 1 ? "" : "s");
  for (const auto& [v, n] : counts) o << " &middot; " << n << " " << e(v);
  o << "</p>\n";
  o << "<h2>Headline figures of accepted experiments</h2>\n<p class=\"muted\">One line per measurement: the same "
       "metric, level, workload (prompt, generation, depth or kernel shape), model, threads and kernel ISA. Figures "
       "of different measurements are never joined.</p>\n"
    << trend_chart(by_seq) << "\n";
  o << "<h2>Verdicts</h2>\n<p><label>Show <select id=\"verdict-filter\"><option value=\"all\">all</option>"
    << "<option value=\"accept\">accept</option><option value=\"reject\">reject</option>"
    << "<option value=\"inconclusive\">inconclusive</option></select></label> <span id=\"shown\" class=\"muted\"></span></p>\n";
  o << "<table id=\"verdicts\"><thead><tr><th>id</th><th>date</th><th>level</th><th>question</th><th>verdict</th>"
       "<th>headline (candidate/baseline, [the interval the verdict used])</th><th>reasons</th></tr></thead><tbody>\n";
  for (size_t k = by_seq.size(); k-- > 0;) {
    const json& r = *by_seq[k];
    const json* spec = jobj(r, "spec");
    const std::string verdict = jstr(r, "verdict");
    o << "<tr class=\"exp\" data-verdict=\"" << e(verdict) << "\"><td><a href=\"#" << anchor(r, k) << "\">"
      << e(jstr(r, "id")) << "</a></td><td class=\"num\">" << e(jstr(r, "time").substr(0, 10)) << "</td><td>"
      << e(spec ? jstr(*spec, "level") : "") << "</td><td class=\"q\">" << e(spec ? jstr(*spec, "question") : "")
      << "</td><td><span class=\"verdict " << verdict_class(verdict) << "\">" << e(verdict.empty() ? "-" : verdict)
      << "</span></td><td class=\"num\">" << ratio_cell(r, headline_metric(r)) << "</td><td><ul class=\"reasons\">";
    if (const json* rs = jarr(r, "reasons"))
      for (const json& x : *rs) o << "<li>" << e(text_of(x)) << "</li>";
    o << "</ul></td></tr>\n";
  }
  o << "</tbody></table>\n<h2>Experiments</h2>\n";
  for (size_t k = by_seq.size(); k-- > 0;) {
    try {
      std::ostringstream d;  // appended only when complete
      detail_section(d, *by_seq[k], k);
      o << d.str();
    } catch (const std::exception& ex) {  // one odd record must not cost the whole page
      o << "<section class=\"exp-detail\"><p>record " << k + 1 << " could not be shown: " << e(ex.what())
        << "</p></section>\n";
    }
  }
  o << "<script>" << kScript << "</script>\n</body></html>\n";
  return o.str();
}

}  // namespace ouro::lab
