// ouro trace: reads Chrome trace-event JSON (Ouro's --trace output or any other tool's).
//   summarize TRACE   time per op / layer / thread, against the probe's ceilings, with a verdict
//   overlap TRACE     how much of the spans matching A runs under spans matching B
//   diff BASE CAND    an end-to-end change explained span by span
// The analyses are in src/trace/analyze.cpp; this file parses flags and prints.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/common.h"
#include "lab/probe.h"
#include "trace/analyze.h"

namespace ouro {

namespace {

namespace an = ouro::analysis;

const char* kUsage =
    "usage: ouro trace <summarize|overlap|diff> ... [--json]\n"
    "  summarize TRACE [--probe FILE] [--top N]   time per op, per layer and per thread, verdicts\n"
    "  overlap TRACE --a PATTERN --b PATTERN      time of A covered by B, longest stretches of A alone\n"
    "  diff BASE CAND [--top N]                   an end-to-end change explained by spans\n"
    "Reads any Chrome trace-event JSON ({\"traceEvents\": [...]} or a bare array). See docs/trace.md.\n"
    "Run 'ouro trace <subcommand> --help' for details.\n";

const char* kSummarizeUsage =
    "usage: ouro trace summarize TRACE [--probe FILE] [--top N] [--json]\n"
    "  Per op name (spans with cat \"op\" on the main thread; every span of the busiest thread when the\n"
    "  trace has no op spans): calls, total and self time, share of the wall time, mean, GB/s and\n"
    "  GFLOP/s from args.bytes/args.flops, fractions of the probe's ceilings, and a verdict.\n"
    "  Shares of the rows plus the residual (main-thread time in no row's span) sum to 100%.\n"
    "  Then per layer (args.layer) and per thread: busy (kernel and op spans), waiting (sync-wait), idle.\n"
    "  --probe FILE  ceilings from a probe result (JSON); default: this CPU's cached probe, if any\n"
    "  --top N       text output: the N rows with the most self time, the rest in one row (default 30,\n"
    "                0 = all); --json always lists every row\n";

const char* kOverlapUsage =
    "usage: ouro trace overlap TRACE --a PATTERN --b PATTERN [--json]\n"
    "  The union of spans matching A (any thread), the part of it covered by the union of spans\n"
    "  matching B (seconds and fraction of A), and the 5 longest stretches where A ran with no B.\n"
    "  PATTERN: NAME-GLOB, name:NAME-GLOB or cat:CATEGORY-GLOB; '*' matches any run of characters,\n"
    "  the whole name must match (attn*, *norm, cat:op, cat:sync-wait). A must match a span.\n";

const char* kDiffUsage =
    "usage: ouro trace diff BASE CAND [--top N] [--json]\n"
    "  Per (cat, name, layer) key: self time on the main thread in BASE and CAND and the delta,\n"
    "  largest |delta| first; with the residual (main-thread time in no span) the deltas sum exactly\n"
    "  to the change of the wall time. Keys only in CAND (new) or only in BASE (vanished) are listed.\n"
    "  --top N   text output: the N largest changes, the rest in one row (default 20, 0 = all)\n";

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", s * 1e3);
  return b;
}
std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", f * 100);
  return b;
}
std::string num(const std::optional<double>& v, const char* fmt = "%.1f") {
  if (!v) return "-";
  char b[48];
  std::snprintf(b, sizeof b, fmt, *v);
  return b;
}
std::string opct(const std::optional<double>& v) { return v ? pct(*v) : "-"; }
std::string signed_ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.3f", s * 1e3);
  return b;
}

// Control characters in names would break the table; print them as '?'.
std::string clean(const std::string& s, size_t max = 48) {
  std::string o;
  for (unsigned char c : s) o += c < 0x20 || c == 0x7f ? '?' : (char)c;
  if (o.size() > max) o = o.substr(0, max - 3) + "...";
  return o;
}

void print_json(const nlohmann::json& j) {
  std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

Expected<long long> top_flag(const Args& a, long long def) { return a.integer("--top", def, 0, 1000000); }

// Parses flags for a subcommand and checks the number of positional arguments.
Status parse_sub(Args& a, int argc, char** argv, const std::vector<std::string>& value_flags, size_t npos,
                 const char* what) {
  if (Status s = a.parse(argc, argv, value_flags, {"--json"}); !s) return s;
  if (a.positional().size() < npos) return usage_error(std::string("trace ") + what);
  if (a.positional().size() > npos) return usage_error("unexpected argument '" + a.positional()[npos] + "'");
  return Ok{};
}

// ---- summarize -------------------------------------------------------------------------------

// This CPU's cached probe result (written by `ouro probe`), when there is one. A missing cache is
// silent; an unreadable one is noted in the output and the fractions are left out.
std::optional<an::Ceilings> default_ceilings(std::string* note) {
  const std::string path = probe_cache_path();
  if (path.empty()) return std::nullopt;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  auto c = an::load_probe(path);
  if (!c) {
    *note = "cached probe ignored: " + c.error().message;
    return std::nullopt;
  }
  return *c;
}

void print_summary(const an::Summary& s, long long top) {
  std::printf("trace %s: %zu spans, wall %s ms (first span at ts %.3f us)\n", clean(s.source, 200).c_str(), s.spans,
              ms(s.wall_s).c_str(), s.wall_start_us);
  if (s.spans == 0) {
    std::printf("no timed spans (complete \"X\" events or \"B\"/\"E\" pairs) in the trace\n");
    return;
  }
  std::printf("main thread: %s\n", clean(s.main_label, 80).c_str());
  if (s.ceilings) {
    const auto& c = *s.ceilings;
    std::printf("probe %s: read %s GB/s, fp32 %s GFLOP/s, int8 %s GOP/s\n", clean(c.source, 200).c_str(),
                num(c.read_gb_s).c_str(), num(c.fp32_gflops).c_str(), num(c.int8_gops).c_str());
  } else {
    std::printf("probe: none (no --probe, no cached probe for this CPU): no fractions; verdicts unknown unless waiting\n");
  }
  const bool op_mode = s.mode == "op";
  std::printf("\n%s\n", op_mode ? "ops (cat \"op\" on the main thread; share = self time / wall)"
                                : "spans of the main thread by name (no \"op\" spans; share = self time / wall)");
  size_t w = 12;
  for (const auto& r : s.ops) w = std::max(w, clean(r.name).size() + (op_mode ? 0 : clean(r.cat, 16).size() + 3));
  w = std::min<size_t>(w, 56);
  std::printf("%-*s %7s %11s %11s %7s %10s %6s %8s %6s %9s %6s  %s\n", (int)w, op_mode ? "op" : "name [cat]", "calls",
              "total ms", "self ms", "share", "mean us", "wait%", "GB/s", "%bw", "GFLOP/s", "%peak", "verdict");
  const size_t shown = top == 0 ? s.ops.size() : std::min<size_t>(s.ops.size(), (size_t)top);
  for (size_t i = 0; i < shown; ++i) {
    const an::OpRow& r = s.ops[i];
    std::string label = clean(r.name);
    if (!op_mode && !r.cat.empty()) label += " [" + clean(r.cat, 16) + "]";
    std::printf("%-*s %7zu %11s %11s %7s %10.2f %6s %8s %6s %9s %6s  %s\n", (int)w, label.c_str(), r.calls,
                ms(r.total_s).c_str(), ms(r.self_s).c_str(), pct(r.share).c_str(), r.mean_s * 1e6,
                r.total_s > 0 ? pct(r.wait_s / r.total_s).c_str() : "-", num(r.gb_s).c_str(),
                opct(r.bw_fraction).c_str(), num(r.gflop_s).c_str(), opct(r.flop_fraction).c_str(), r.verdict.c_str());
  }
  if (shown < s.ops.size()) {
    size_t calls = 0;
    double total = 0, self = 0, share = 0;
    for (size_t i = shown; i < s.ops.size(); ++i) {
      calls += s.ops[i].calls;
      total += s.ops[i].total_s;
      self += s.ops[i].self_s;
      share += s.ops[i].share;
    }
    const std::string label = "(" + std::to_string(s.ops.size() - shown) + " more)";
    std::printf("%-*s %7zu %11s %11s %7s\n", (int)w, label.c_str(), calls, ms(total).c_str(), ms(self).c_str(),
                pct(share).c_str());
  }
  std::printf("%-*s %7s %11s %11s %7s   %s\n", (int)w, "residual", "", "", ms(s.residual_s).c_str(),
              pct(s.residual_share).c_str(),
              op_mode ? "main-thread time in no op span" : "main-thread time in no span");
  std::printf("%-*s %7s %11s %11s %7s\n", (int)w, "wall", "", "", ms(s.wall_s).c_str(), "100.0%");
  if (s.table_spans_elsewhere)
    std::printf("(%zu op spans on other threads are not in this table)\n", s.table_spans_elsewhere);

  if (!s.layers.empty()) {
    std::printf("\nlayers (args.layer; share = self time / wall; the residual above completes them)\n");
    std::printf("%-12s %7s %11s %11s %7s %8s %9s\n", "layer", "calls", "total ms", "self ms", "share", "GB/s", "GFLOP/s");
    for (const an::LayerRow& r : s.layers)
      std::printf("%-12s %7zu %11s %11s %7s %8s %9s\n", clean(r.layer, 12).c_str(), r.calls, ms(r.total_s).c_str(),
                  ms(r.self_s).c_str(), pct(r.share).c_str(), num(r.gb_s).c_str(), num(r.gflop_s).c_str());
  }

  std::printf("\nthreads (busy: %s; idle: wall - busy; waiting: sync-wait spans)\n", s.busy_rule.c_str());
  size_t tw = 8;
  for (const auto& r : s.threads) tw = std::max(tw, clean(r.label, 40).size());
  std::printf("%-*s %8s %11s %7s %11s %11s %7s\n", (int)tw, "thread", "spans", "busy ms", "busy%", "waiting ms",
              "idle ms", "idle%");
  for (const an::ThreadRow& r : s.threads)
    std::printf("%-*s %8zu %11s %7s %11s %11s %7s\n", (int)tw, clean(r.label, 40).c_str(), r.spans,
                ms(r.busy_s).c_str(), pct(s.wall_s > 0 ? r.busy_s / s.wall_s : 0).c_str(), ms(r.waiting_s).c_str(),
                ms(r.idle_s).c_str(), pct(s.wall_s > 0 ? r.idle_s / s.wall_s : 0).c_str());
  if (s.unmatched_end || s.unclosed_begin)
    std::printf("\nignored: %zu \"E\" events without a \"B\", %zu \"B\" events never closed\n", s.unmatched_end,
                s.unclosed_begin);
}

int summarize_cmd(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kSummarizeUsage, stdout);
    return 0;
  }
  Args a;
  if (Status s = parse_sub(a, argc, argv, {"--probe", "--top"}, 1, "summarize needs a TRACE file"); !s)
    return report(s.error());
  auto top = top_flag(a, 30);
  if (!top) return report(top.error());
  std::optional<an::Ceilings> ceilings;
  std::string probe_note;
  if (a.has("--probe")) {
    auto c = an::load_probe(a.str("--probe"));
    if (!c) return report(c.error());
    ceilings = *c;
  } else {
    ceilings = default_ceilings(&probe_note);
  }
  auto t = an::load_trace(a.positional()[0]);
  if (!t) return report(t.error());
  const an::Summary s = an::summarize(*t, ceilings);
  if (a.has("--json")) {
    nlohmann::json j = an::to_json(s);
    if (!probe_note.empty()) j["probe_note"] = probe_note;
    print_json(j);
  } else {
    print_summary(s, *top);
    if (!probe_note.empty()) std::printf("\nnote: %s\n", clean(probe_note, 300).c_str());
  }
  return 0;
}

// ---- overlap ---------------------------------------------------------------------------------

int overlap_cmd(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kOverlapUsage, stdout);
    return 0;
  }
  Args a;
  if (Status s = parse_sub(a, argc, argv, {"--a", "--b"}, 1, "overlap needs a TRACE file"); !s) return report(s.error());
  if (!a.has("--a") || !a.has("--b")) return report(usage_error("trace overlap needs --a PATTERN and --b PATTERN"));
  auto pa = an::Pattern::parse(a.str("--a"));
  if (!pa) return report(usage_error("flag --a: " + pa.error().message));
  auto pb = an::Pattern::parse(a.str("--b"));
  if (!pb) return report(usage_error("flag --b: " + pb.error().message));
  auto t = an::load_trace(a.positional()[0]);
  if (!t) return report(t.error());
  const an::OverlapResult r = an::overlap(*t, *pa, *pb);
  if (r.a_spans == 0)
    return report(runtime_error(t->source + ": no span matches --a '" + pa->text + "'"));
  if (a.has("--json")) {
    print_json(an::to_json(r));
    return 0;
  }
  std::printf("trace %s\n", clean(r.source, 200).c_str());
  std::printf("A = '%s': %zu spans, %s ms (union over all threads)\n", clean(r.a.text).c_str(), r.a_spans,
              ms(r.a_s).c_str());
  std::printf("B = '%s': %zu spans, %s ms (union over all threads)\n", clean(r.b.text).c_str(), r.b_spans,
              ms(r.b_s).c_str());
  std::printf("A overlapped by B: %s ms = %s of A; A without B: %s ms\n", ms(r.overlap_s).c_str(),
              pct(r.fraction).c_str(), ms(r.a_s - r.overlap_s).c_str());
  if (r.stretches.empty()) {
    std::printf("A never ran without B\n");
    return 0;
  }
  std::printf("longest stretches of A without B:\n");
  for (const auto& [lo, hi] : r.stretches)
    std::printf("  %11s ms  from +%s ms (ts %.3f us)\n", ms((hi - lo) / 1e6).c_str(),
                ms((lo - r.wall_start_us) / 1e6).c_str(), lo);
  return 0;
}

// ---- diff ------------------------------------------------------------------------------------

int diff_cmd(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kDiffUsage, stdout);
    return 0;
  }
  Args a;
  if (Status s = parse_sub(a, argc, argv, {"--top"}, 2, "diff needs two trace files: BASE CAND"); !s)
    return report(s.error());
  auto top = top_flag(a, 20);
  if (!top) return report(top.error());
  auto base = an::load_trace(a.positional()[0]);
  if (!base) return report(base.error());
  auto cand = an::load_trace(a.positional()[1]);
  if (!cand) return report(cand.error());
  const an::DiffResult d = an::diff(*base, *cand);
  if (a.has("--json")) {
    print_json(an::to_json(d));
    return 0;
  }
  std::printf("base %s: wall %s ms, main thread %s\n", clean(d.base_source, 200).c_str(), ms(d.base_wall_s).c_str(),
              clean(d.base_main, 80).c_str());
  std::printf("cand %s: wall %s ms, main thread %s\n", clean(d.cand_source, 200).c_str(), ms(d.cand_wall_s).c_str(),
              clean(d.cand_main, 80).c_str());
  std::printf("wall delta %s ms%s\n\n", signed_ms(d.delta_wall_s).c_str(),
              d.base_wall_s > 0 ? (" (" + pct(d.delta_wall_s / d.base_wall_s) + ")").c_str() : "");
  std::printf("self time on the main thread per (cat, name, layer); deltas + residual = wall delta\n");
  auto share = [&](double x) { return d.delta_wall_s != 0 ? pct(x / d.delta_wall_s) : std::string("-"); };
  size_t w = 24;
  for (const auto& r : d.rows) w = std::max(w, clean(r.key.cat, 16).size() + 1 + clean(r.key.name).size());
  w = std::min<size_t>(w, 66);
  std::printf("%-*s %8s %11s %11s %11s %9s %15s\n", (int)w, "cat name", "layer", "base ms", "cand ms", "delta ms",
              "of delta", "calls");
  const size_t shown = *top == 0 ? d.rows.size() : std::min<size_t>(d.rows.size(), (size_t)*top);
  for (size_t i = 0; i < shown; ++i) {
    const an::DiffRow& r = d.rows[i];
    const std::string label = (r.key.cat.empty() ? "" : clean(r.key.cat, 16) + " ") + clean(r.key.name);
    const std::string calls = std::to_string(r.base_calls) + " -> " + std::to_string(r.cand_calls);
    std::printf("%-*s %8s %11s %11s %11s %9s %15s\n", (int)w, label.c_str(),
                r.key.layer ? clean(*r.key.layer, 8).c_str() : "-", ms(r.base_s).c_str(), ms(r.cand_s).c_str(),
                signed_ms(r.delta_s).c_str(), share(r.delta_s).c_str(), calls.c_str());
  }
  if (shown < d.rows.size()) {
    double b = 0, c = 0, dl = 0;
    for (size_t i = shown; i < d.rows.size(); ++i) {
      b += d.rows[i].base_s;
      c += d.rows[i].cand_s;
      dl += d.rows[i].delta_s;
    }
    const std::string label = "(" + std::to_string(d.rows.size() - shown) + " more keys)";
    std::printf("%-*s %8s %11s %11s %11s %9s\n", (int)w, label.c_str(), "", ms(b).c_str(), ms(c).c_str(),
                signed_ms(dl).c_str(), share(dl).c_str());
  }
  std::printf("%-*s %8s %11s %11s %11s %9s\n", (int)w, "residual / not in spans", "", ms(d.residual_base_s).c_str(),
              ms(d.residual_cand_s).c_str(), signed_ms(d.residual_delta_s).c_str(), share(d.residual_delta_s).c_str());
  std::printf("%-*s %8s %11s %11s %11s %9s\n", (int)w, "wall", "", ms(d.base_wall_s).c_str(), ms(d.cand_wall_s).c_str(),
              signed_ms(d.delta_wall_s).c_str(), d.delta_wall_s != 0 ? "100.0%" : "-");
  if (d.by_name.size() < d.rows.size()) {
    std::printf("\nthe same, summed over layers per (cat, name)\n");
    std::printf("%-*s %11s %11s %11s %9s %15s\n", (int)w, "cat name", "base ms", "cand ms", "delta ms", "of delta",
                "calls");
    const size_t n = *top == 0 ? d.by_name.size() : std::min<size_t>(d.by_name.size(), (size_t)*top);
    for (size_t i = 0; i < n; ++i) {
      const an::DiffRow& r = d.by_name[i];
      const std::string label = (r.key.cat.empty() ? "" : clean(r.key.cat, 16) + " ") + clean(r.key.name);
      const std::string calls = std::to_string(r.base_calls) + " -> " + std::to_string(r.cand_calls);
      std::printf("%-*s %11s %11s %11s %9s %15s\n", (int)w, label.c_str(), ms(r.base_s).c_str(), ms(r.cand_s).c_str(),
                  signed_ms(r.delta_s).c_str(), share(r.delta_s).c_str(), calls.c_str());
    }
    if (n < d.by_name.size()) std::printf("(%zu more)\n", d.by_name.size() - n);
  }
  auto list = [](const char* what, const std::vector<an::DiffKey>& keys) {
    if (keys.empty()) return;
    std::printf("%s (%zu):", what, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) std::printf("%s %s", i ? "," : "", clean(keys[i].label(), 80).c_str());
    std::printf("\n");
  };
  std::printf("\n");
  list("new in cand", d.added);
  list("vanished from base", d.vanished);
  return 0;
}

}  // namespace

int cmd_trace(int argc, char** argv) {
  if (argc < 1) return report(usage_error("trace needs a subcommand: summarize, overlap or diff (see ouro trace --help)"));
  const std::string sub = argv[0];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (sub == "summarize") return summarize_cmd(argc - 1, argv + 1);
  if (sub == "overlap") return overlap_cmd(argc - 1, argv + 1);
  if (sub == "diff") return diff_cmd(argc - 1, argv + 1);
  return report(usage_error("trace: unknown subcommand '" + sub + "' (summarize, overlap, diff)"));
}

}  // namespace ouro
