// The tools of `ouro mcp`: their schemas and what each runs (the rules checked before: mcp_rules.cpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "lab/ledger.h"
#include "agent/mcp.h"
#include "lab/process.h"
#include "lab/runner.h"
#include "lab/spec.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ouro::lab {

namespace {

// ---- schemas -------------------------------------------------------------------------------

json str_p(const char* d) { return {{"type", "string"}, {"description", d}}; }
json bool_p(const char* d) { return {{"type", "boolean"}, {"description", d}}; }
json int_p(const char* d, long long lo, long long hi) { return {{"type", "integer"}, {"description", d}, {"minimum", lo}, {"maximum", hi}}; }
json strs_p(const char* d) { return {{"type", "array"}, {"items", {{"type", "string"}}}, {"description", d}}; }
json input(json props, json required = json::array()) {
  return {{"type", "object"}, {"properties", std::move(props)}, {"required", std::move(required)}, {"additionalProperties", false}};
}
// Output schemas describe structuredContent; extra members are allowed (records grow).
json output(json props, json required) {
  return {{"type", "object"}, {"properties", std::move(props)}, {"required", std::move(required)}};
}
json t(const char* type) { return {{"type", type}}; }
json t2(const char* a, const char* b) { return {{"type", json::array({a, b})}}; }

// ---- helpers ---------------------------------------------------------------------------------

ToolResult fail(const std::string& msg) { return {msg, json::object(), true}; }

std::string fmt(double v, int prec = 4) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}

// A fresh folder under the server's state folder: KIND/<time>-<pid>-<n>.
std::string scratch_dir(const McpConfig& cfg, const char* kind) {
  static std::atomic<int> counter{0};
  char b[96];
  std::snprintf(b, sizeof b, "/%s/%lld-%d-%d", kind, (long long)std::time(nullptr), (int)getpid(), counter++);
  const std::string d = cfg.state_dir + b;
  std::error_code ec;
  fs::create_directories(d, ec);
  return d;
}

// Runs this binary with `args` from the repository root; writes confined to `write_dirs` (where
// the kernel has Landlock), killed after the tool timeout.
ProcResult run_self(const McpConfig& cfg, std::vector<std::string> args, const std::vector<std::string>& write_dirs) {
  args.insert(args.begin(), cfg.self_bin);
  ProcLimits lim;
  lim.timeout_s = cfg.tool_timeout_s;
  lim.write_dirs = write_dirs;
  auto env = current_env();
  env.erase("OURO_FAULT");
  return run_process(args, env, cfg.repo_root, lim);
}

// The child's own error line ("ouro: ..."), else how it ended.
std::string child_error(const std::vector<std::string>& args, const ProcResult& r) {
  std::string tail = r.err;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  const size_t nl = tail.rfind('\n');
  if (nl != std::string::npos) tail = tail.substr(nl + 1);
  std::string cmd = "ouro";
  for (size_t i = 0; i < args.size() && i < 3; ++i) cmd += " " + args[i];
  return cmd + " failed (" + r.failure() + ")" + (tail.empty() ? "" : ": " + tail);
}

// Runs a read-only command and parses the JSON object it prints; `err` set on failure.
std::optional<json> run_json(const McpConfig& cfg, const std::vector<std::string>& args, const std::vector<std::string>& write_dirs,
                             std::string& err) {
  ProcResult r = run_self(cfg, args, write_dirs);
  if (!r.ok()) {
    err = child_error(args, r);
    return std::nullopt;
  }
  json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded()) {
    err = "ouro " + args[0] + " printed no JSON";
    return std::nullopt;
  }
  return j;
}

std::string cache_ouro(const McpConfig& cfg) { return fs::path(cfg.state_dir).parent_path().string(); }

std::optional<long long> opt_int(const json& a, const char* k) {
  return a.contains(k) ? std::optional<long long>(a[k].get<long long>()) : std::nullopt;
}

std::string max_of(const json& per_threads, std::string* at = nullptr) {
  double best = 0;
  std::string key;
  if (per_threads.is_object())
    for (auto it = per_threads.begin(); it != per_threads.end(); ++it)
      if (it.value().is_number() && it.value().get<double>() > best) { best = it.value().get<double>(); key = it.key(); }
  if (at) *at = key;
  return fmt(best);
}

// ---- tools ---------------------------------------------------------------------------------------

ToolResult tool_probe(const json& a, const McpConfig& cfg) {
  std::vector<std::string> args = {"probe", "--json"};
  if (auto n = opt_int(a, "threads")) args.insert(args.end(), {"-t", std::to_string(*n)});
  if (a.value("refresh", false)) args.push_back("--refresh");
  std::string err;
  auto j = run_json(cfg, args, {cache_ouro(cfg)}, err);
  if (!j) return fail(err);
  std::string at;
  const std::string bw = max_of(j->value("read_gb_s", json()), &at);
  std::string text = "read bandwidth " + bw + " GB/s (" + at + " threads), fp32 " + max_of(j->value("fp32_gflops", json())) +
                     " GFLOP/s, int8 " + max_of(j->value("int8_gops", json())) + " GOP/s on " + jstr(*j, "cpu_model");
  return {text, *j, false};
}

ToolResult tool_bench(const json& a, const McpConfig& cfg) {
  const std::string dir = scratch_dir(cfg, "bench");
  std::vector<std::string> args = {"bench", "--json", "--prompt-len", std::to_string(a.value("prompt_len", 128)), "--gen-len",
                                   std::to_string(a.value("gen_len", 32)), "--repeats", std::to_string(a.value("repeats", 3))};
  if (a.contains("model")) args.insert(args.end(), {"-m", a["model"].get<std::string>()});
  if (auto n = opt_int(a, "threads")) args.insert(args.end(), {"-t", std::to_string(*n)});
  if (auto d = opt_int(a, "depth")) args.insert(args.end(), {"--depth", std::to_string(*d)});
  for (const auto& x : a.value("args", json::array())) args.push_back(x.get<std::string>());
  std::string trace;
  if (a.value("trace", false)) {
    trace = dir + "/trace.json";
    args.insert(args.end(), {"--trace", trace});
  }
  std::string err;
  auto j = run_json(cfg, args, {dir, cache_ouro(cfg)}, err);
  if (!j) return fail(err);
  json out = {{"bench", *j}};
  auto med = [&](const char* k) { return (*j)[k].is_object() ? fmt((*j)[k].value("median", 0.0)) : std::string("-"); };
  std::string text = "prefill " + med("prefill_tok_s") + " tok/s, decode " + med("decode_tok_s") + " tok/s (median of " +
                     std::to_string(a.value("repeats", 3)) + "; isa " + jstr(*j, "isa") + ", commit " + jstr(*j, "commit") + ")";
  if (!trace.empty()) {
    out["trace_path"] = trace;
    text += "\ntrace: " + trace + " (trace_summarize / trace_overlap / trace_diff read it)";
  }
  return {text, out, false};
}

ToolResult tool_trace_summarize(const json& a, const McpConfig& cfg) {
  std::string err;
  auto j = run_json(cfg, {"trace", "summarize", a["path"].get<std::string>(), "--json"}, {scratch_dir(cfg, "scratch")}, err);
  if (!j) return fail(err);
  std::vector<json> ops;
  for (const auto& r : j->value("ops", json::array())) ops.push_back(r);
  std::sort(ops.begin(), ops.end(), [](const json& x, const json& y) { return x.value("self_s", 0.0) > y.value("self_s", 0.0); });
  std::string text = "wall " + fmt(j->value("wall_s", 0.0) * 1e3) + " ms; ops by self time:";
  for (size_t i = 0; i < ops.size() && i < 8; ++i)
    text += "\n  " + jstr(ops[i], "name") + ": " + fmt(ops[i].value("self_s", 0.0) * 1e3) + " ms (" +
            fmt(100 * ops[i].value("share", 0.0), 3) + "%), " + fmt(ops[i].value("gb_s", 0.0)) + " GB/s, verdict " +
            jstr(ops[i], "verdict");
  return {text, *j, false};
}

ToolResult tool_trace_overlap(const json& a, const McpConfig& cfg) {
  std::string err;
  auto j = run_json(cfg, {"trace", "overlap", a["path"].get<std::string>(), "--a", a["a"].get<std::string>(), "--b", a["b"].get<std::string>(), "--json"},
                    {scratch_dir(cfg, "scratch")}, err);
  if (!j) return fail(err);
  const std::string text = fmt(100 * j->value("fraction", 0.0), 3) + "% of " + jstr(*j, "a") + " (" + fmt(j->value("a_s", 0.0) * 1e3) +
                           " ms) is covered by " + jstr(*j, "b") + "; " + fmt(j->value("a_without_b_s", 0.0) * 1e3) + " ms without it";
  return {text, *j, false};
}

ToolResult tool_trace_diff(const json& a, const McpConfig& cfg) {
  std::string err;
  auto j = run_json(cfg, {"trace", "diff", a["base"].get<std::string>(), a["cand"].get<std::string>(), "--json"},
                    {scratch_dir(cfg, "scratch")}, err);
  if (!j) return fail(err);
  std::string text = "wall time change " + fmt(j->value("delta_wall_s", 0.0) * 1e3) + " ms; largest changes:";
  const json rows = j->value("by_name", json::array());
  for (size_t i = 0; i < rows.size() && i < 8; ++i)
    text += "\n  " + jstr(rows[i], "name") + ": " + fmt(rows[i].value("delta_s", 0.0) * 1e3) + " ms";
  return {text, *j, false};
}

ToolResult tool_lab_plan(const json& a, const McpConfig& cfg) {
  const std::string dir = scratch_dir(cfg, "plans");
  std::vector<std::string> args = {"lab", "plan"};
  const bool revs = a.contains("base") || a.contains("cand"), launch = a.contains("base_args") || a.contains("cand_args");
  if (revs == launch) return fail("give base and cand (two revisions; cand may be \"worktree\"), or base_args/cand_args (two launch configurations)");
  if (revs) {
    if (!a.contains("base") || !a.contains("cand")) return fail("give both base and cand");
    args.insert(args.end(), {a["base"].get<std::string>(), a["cand"].get<std::string>()});
  } else {
    args.insert(args.end(), {"--base-args", a.value("base_args", ""), "--cand-args", a.value("cand_args", "")});
    if (a.contains("revision")) args.insert(args.end(), {"--revision", a["revision"].get<std::string>()});
  }
  args.insert(args.end(), {"-o", dir, "--json"});
  std::string err;
  // Not write-confined: it runs git, whose helpers write temporary files; it writes only to -o.
  auto j = run_json(cfg, args, {}, err);
  if (!j) return fail(err);
  std::string text = "touched:";
  for (const auto& x : j->value("touched", json::array())) text += "\n  " + (x.is_string() ? x.get<std::string>() : x.dump());
  text += "\nproposed specs (cheapest first; pass the text to lab_submit as spec_toml after editing the hypothesis):";
  for (auto& s : (*j)["specs"]) {
    std::ifstream in(jstr(s, "path"));
    std::stringstream ss;
    ss << in.rdbuf();
    s["toml"] = ss.str();
    text += "\n  [" + jstr(s, "level") + "] " + jstr(s, "path") + ": " + jstr(s, "why");
  }
  return {text, *j, false};
}

ToolResult tool_lab_submit(const json& a, const McpConfig& cfg) {
  std::string text;
  Spec spec;
  ToolResult bad;
  if (!load_spec(a, cfg, text, spec, bad)) return bad;
  std::string err;
  auto job = start_job(cfg, text, a.value("note", ""), a.value("force", false), err);
  if (!job) return fail("could not start the experiment: " + err);
  return {"started job " + job->id + " (" + level_name(spec.level) + " level, criteria_file " + spec.criteria_name +
              "); poll lab_status, then lab_result",
          {{"job_id", job->id}, {"state", "running"}, {"job_dir", job->dir}},
          false};
}

ToolResult tool_lab_status(const json& a, const McpConfig& cfg) {
  const std::string id = a["job_id"].get<std::string>();
  auto st = job_status(cfg, id);
  if (!st) return fail("no job " + id);
  std::string text = "job " + id + ": " + jstr(*st, "state") + " after " + fmt(st->value("elapsed_s", 0.0), 3) + " s";
  if (st->contains("reason")) text += " (" + jstr(*st, "reason") + ")";
  for (const auto& p : st->value("progress", json::array())) text += "\n  " + p.get<std::string>();
  return {text, *st, false};
}

ToolResult tool_lab_result(const json& a, const McpConfig& cfg) {
  const std::string id = a["job_id"].get<std::string>();
  auto st = job_status(cfg, id);
  if (!st) return fail("no job " + id);
  if (st->value("state", "") == "running")
    return fail("job " + id + " is still running (" + fmt(st->value("elapsed_s", 0.0), 3) + " s): poll lab_status");
  if (st->value("state", "") == "failed") return fail("job " + id + " failed: " + jstr(*st, "reason"));
  json rec = json::parse(job_output(cfg, id), nullptr, false);
  if (!rec.is_object()) return fail("job " + id + " finished but printed no record");
  json out = {{"job_id", id},
              {"verdict", jstr(rec, "verdict")},
              {"id", jstr(rec, "id")},
              {"reused", rec.value("reused", false)},
              {"forced", rec.value("forced", false)},
              {"record", rec}};
  for (const char* k : {"force_of", "measurement_key", "criteria_sha256", "rejected_for"})
    if (rec.contains(k) && rec[k].is_string()) out[k] = rec[k];
  std::string text = jstr(rec, "id") + ": " + jstr(rec, "verdict");
  if (rec.contains("rejected_for") && rec["rejected_for"].is_string())
    text += " (rejected for a trust reason: " + jstr(rec, "rejected_for") +
            "; the lab's own clock and checks disagreed with the candidate, whatever the criteria said)";
  if (out["reused"].get<bool>()) text += " (identical request: the stored record, not measured again; force=true measures again)";
  if (out["forced"].get<bool>()) text += " (forced re-measurement of " + jstr(rec, "force_of") + ")";
  return {text + "\n" + summarize_record(rec), out, false};
}

ToolResult tool_lab_log(const json& a, const McpConfig& cfg) {
  std::vector<std::string> args = {"lab", "log", "--json", "--ledger", cfg.ledger};
  for (const char* k : {"verdict", "grep", "metric"})
    if (a.contains(k)) args.insert(args.end(), {std::string("--") + k, a[k].get<std::string>()});
  args.insert(args.end(), {"-n", std::to_string(a.value("n", 20))});
  std::string err;
  auto j = run_json(cfg, args, {scratch_dir(cfg, "scratch")}, err);
  if (!j || !j->is_array()) return fail(j ? "ouro lab log printed no list" : err);
  const std::string metric = a.value("metric", "");
  json rows = json::array();
  std::string text;
  for (const auto& r : *j) {
    const std::string h = metric.empty() ? headline_metric(r) : metric;
    json row = {{"id", jstr(r, "id")}, {"time", jstr(r, "time")}, {"kind", jstr(r, "kind")}, {"verdict", jstr(r, "verdict")},
                {"level", r.contains("spec") ? jstr(r["spec"], "level") : ""}, {"question", r.contains("spec") ? jstr(r["spec"], "question") : ""},
                {"metric", h}, {"ratio", nullptr}};
    if (const json* st = jobj(r, "stats"); st && !h.empty())
      if (const json* m = jobj(*st, h.c_str()))
        if (auto ratio = jnum(*m, "ratio")) row["ratio"] = *ratio;
    rows.push_back(row);
    text += log_line(r, metric) + "\n";
  }
  if (rows.empty()) text = "no records match\n";
  return {text, {{"records", rows}, {"ledger", cfg.ledger}}, false};
}

ToolResult tool_lab_show(const json& a, const McpConfig& cfg) {
  std::string err;
  auto j = run_json(cfg, {"lab", "show", a["id"].get<std::string>(), "--json", "--ledger", cfg.ledger}, {scratch_dir(cfg, "scratch")}, err);
  if (!j || !j->is_object()) return fail(j ? "ouro lab show printed no record" : err);
  return {show_record(*j), *j, false};
}

ToolResult tool_correctness_check(const json& a, const McpConfig& cfg) {
  std::string text;
  Spec spec;
  ToolResult bad;
  if (!load_spec(a, cfg, text, spec, bad)) return bad;
  const std::string dir = scratch_dir(cfg, "checks");
  const std::string path = dir + "/spec.toml";
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) return fail("cannot write " + path);
  }
  std::vector<std::string> args = {"lab", "run", path, "--correctness-only", "--json", "--no-ledger", "--out-dir", dir + "/run"};
  if (!cfg.worktree_bin.empty()) args.insert(args.end(), {"--bin", cfg.worktree_bin});
  ProcResult r = run_self(cfg, args, {});
  json rec = json::parse(r.out, nullptr, false);
  if (!r.started || r.timed_out || r.signal || (r.exit_code != 0 && r.exit_code != 3) || !rec.is_object())
    return fail(child_error(args, r));
  json out = {{"verdict", jstr(rec, "verdict")},
              {"correctness", rec.value("correctness", json::object())},
              {"criteria", rec.value("criteria", json::array())},
              {"reasons", rec.value("reasons", json::array())},
              {"heldout_seed", rec.value("heldout_seed", json())},
              {"revisions", rec.value("revisions", json::object())}};
  std::string summary = "correctness " + std::string(out["verdict"] == "accept" ? "holds" : "fails") + " (nothing recorded):";
  for (auto it = out["correctness"].begin(); it != out["correctness"].end(); ++it)
    if (it.value().is_number()) summary += " " + it.key() + "=" + fmt(it.value().get<double>());
  for (const auto& x : out["reasons"]) summary += "\n  - " + (x.is_string() ? x.get<std::string>() : x.dump());
  return {summary, out, false};
}

// ---- the table ---------------------------------------------------------------------------------

std::vector<ToolDef> make_tools() {
  const json spec_in = input({{"spec_path", str_p("a spec file (TOML), relative to the repository root")},
                              {"spec_toml", str_p("the spec's TOML text (instead of spec_path)")}});
  json submit_props = spec_in["properties"];
  submit_props["note"] = str_p("why you propose it: kept in the record");
  submit_props["force"] = bool_p("measure again even when an identical request is already in the ledger (recorded as forced)");
  const json num = t("number"), str = t("string"), obj = t("object"), arr = t("array");
  const json job_state = {{"type", "string"}, {"enum", {"running", "done", "failed"}}};
  return {
      {"probe", "Machine ceiling",
       "Memory bandwidth and peak compute (fp32, bf16, int8) of this machine per thread count (`ouro probe`, cached).",
       input({{"threads", int_p("measure 1..N threads (default: all CPUs)", 1, 4096)}, {"refresh", bool_p("measure even when cached")}}),
       output({{"read_gb_s", obj}, {"triad_gb_s", obj}, {"fp32_gflops", obj}, {"int8_gops", obj}, {"max_threads", t("integer")},
               {"cpu_model", str}},
              {"read_gb_s", "fp32_gflops", "max_threads"}),
       tool_probe},
      {"bench", "Engine benchmark",
       "Prefill and decode throughput (`ouro bench --json`); with trace=true also a Chrome trace whose path trace_* tools read.",
       input({{"model", str_p("GGUF file (default: the default model)")},
              {"prompt_len", int_p("prefill tokens (default 128)", 1, 32768)},
              {"gen_len", int_p("decode tokens (default 32)", 1, 32768)},
              {"repeats", int_p("measured repeats (default 3)", 1, 100)},
              {"threads", int_p("threads (default: the engine's)", 1, 4096)},
              {"depth", int_p("tokens already cached before each measurement", 0, 1 << 20)},
              {"args", strs_p("extra launch flags, e.g. [\"--isa\", \"avx2\"] or [\"--kv\", \"int8\"] (checked by ouro bench)")},
              {"trace", bool_p("record a trace of the measured repeats")}}),
       output({{"bench", output({{"prefill_tok_s", obj}, {"decode_tok_s", obj}}, {"prefill_tok_s", "decode_tok_s"})},
               {"trace_path", str}},
              {"bench"}),
       tool_bench},
      {"trace_summarize", "Summarize a trace",
       "Per op, layer and thread: time, share, GB/s, GFLOP/s against the probe's ceiling, and a verdict (`ouro trace summarize`).",
       input({{"path", str_p("a Chrome trace file (e.g. bench's trace_path)")}}, {"path"}),
       output({{"wall_s", num}, {"ops", arr}, {"layers", arr}, {"threads", arr}}, {"wall_s", "ops"}), tool_trace_summarize},
      {"trace_overlap", "Overlap of two span sets",
       "Time of spans matching A covered by spans matching B, and the longest stretches of A alone (`ouro trace overlap`).",
       input({{"path", str_p("a Chrome trace file")}, {"a", str_p("pattern: NAME-GLOB, name:GLOB or cat:GLOB, e.g. cat:op")},
              {"b", str_p("pattern, e.g. pool.job")}},
             {"path", "a", "b"}),
       output({{"a_s", num}, {"a_without_b_s", num}, {"fraction", num}, {"longest_a_without_b", arr}}, {"a_s", "fraction"}),
       tool_trace_overlap},
      {"trace_diff", "Diff two traces",
       "An end-to-end change explained by spans: self time per (cat, name, layer) in BASE and CAND (`ouro trace diff`).",
       input({{"base", str_p("baseline trace file")}, {"cand", str_p("candidate trace file")}}, {"base", "cand"}),
       output({{"delta_wall_s", num}, {"by_name", arr}, {"rows", arr}, {"new", arr}, {"vanished", arr}}, {"delta_wall_s", "by_name"}),
       tool_trace_diff},
      {"lab_plan", "Plan experiments",
       "The cheapest experiments that answer whether a change helps: from two revisions (base, cand) or two launch "
       "configurations (base_args, cand_args). Returns proposed specs with their TOML text (`ouro lab plan`).",
       input({{"base", str_p("base revision")}, {"cand", str_p("candidate revision, or \"worktree\"")},
              {"base_args", str_p("baseline launch flags, e.g. \"-t 1\"")}, {"cand_args", str_p("candidate launch flags")},
              {"revision", str_p("revision for launch plans (default worktree)")}}),
       output({{"touched", arr}, {"kernels", arr}, {"specs", {{"type", "array"}, {"items", output({{"path", str}, {"level", str}, {"why", str}, {"toml", str}}, {"path", "level", "toml"})}}},
               {"notes", arr}},
              {"touched", "specs"}),
       tool_lab_plan},
      {"lab_submit", "Start an experiment",
       "Starts `ouro lab run` on a spec and returns a job id at once (poll lab_status, then lab_result). The spec must name a "
       "criteria_file from experiments/criteria/ and carry no criteria of its own. An identical request already in the "
       "ledger returns the stored record; force=true measures again and is recorded as forced.",
       input(submit_props), output({{"job_id", str}, {"state", job_state}, {"job_dir", str}}, {"job_id", "state"}), tool_lab_submit},
      {"lab_status", "Experiment status", "State of a submitted experiment (running, done, failed), elapsed time and its latest progress lines.",
       input({{"job_id", str_p("from lab_submit")}}, {"job_id"}),
       output({{"job_id", str}, {"state", job_state}, {"elapsed_s", num}, {"progress", {{"type", "array"}, {"items", str}}},
               {"exit_code", t("integer")}, {"reason", str}},
              {"job_id", "state", "elapsed_s", "progress"}),
       tool_lab_status},
      {"lab_result", "Experiment result",
       "The ledger record of a finished experiment: verdict, statistics, correctness, criteria, trust checks, reasons; "
       "rejected_for names the trust check (measurement_mismatch, timed_outputs_differ, heldout_speed_differs, "
       "cpu_overuse, unstable) when the lab's own clock and checks rejected the candidate. An error while it runs.",
       input({{"job_id", str_p("from lab_submit")}}, {"job_id"}),
       output({{"job_id", str}, {"verdict", {{"type", "string"}, {"enum", {"accept", "reject", "inconclusive"}}}}, {"id", str},
               {"reused", t("boolean")}, {"forced", t("boolean")}, {"force_of", str}, {"measurement_key", str},
               {"criteria_sha256", str}, {"rejected_for", str}, {"record", obj}},
              {"job_id", "verdict", "id", "reused", "forced", "record"}),
       tool_lab_result},
      {"lab_log", "The ledger, newest first",
       "Every recorded experiment: id, time, verdict, level, question and the headline ratio (`ouro lab log`).",
       input({{"verdict", str_p("only accept, reject or inconclusive")}, {"grep", str_p("only records containing this text")},
              {"metric", str_p("only records with this metric (its ratio is shown)")}, {"n", int_p("at most N records (default 20)", 1, 10000)}}),
       output({{"records", {{"type", "array"},
                            {"items", output({{"id", str}, {"time", str}, {"kind", str}, {"verdict", str}, {"level", str},
                                              {"question", str}, {"metric", str}, {"ratio", t2("number", "null")}},
                                             {"id", "verdict"})}}},
               {"ledger", str}},
              {"records"}),
       tool_lab_log},
      {"lab_show", "One ledger record", "Everything recorded about one experiment (`ouro lab show`): E0007, 7, or a hash prefix.",
       input({{"id", str_p("record id, number or hash prefix")}}, {"id"}),
       output({{"id", str}, {"verdict", str}, {"spec", obj}, {"stats", obj}, {"correctness", obj}}, {"id"}), tool_lab_show},
      {"correctness_check", "Correctness only",
       "Runs only the lab's correctness check of a spec's two sides (spec inputs and held-out inputs), judged on the "
       "spec's correctness criteria; no timing, nothing recorded. Same criteria rule as lab_submit.",
       spec_in,
       output({{"verdict", {{"type", "string"}, {"enum", {"accept", "reject"}}}}, {"correctness", obj}, {"criteria", arr},
               {"reasons", arr}, {"heldout_seed", t2("integer", "null")}, {"revisions", obj}},
              {"verdict", "correctness", "criteria", "reasons"}),
       tool_correctness_check},
  };
}

}  // namespace

const std::vector<ToolDef>& mcp_tools() {
  static const std::vector<ToolDef> tools = make_tools();
  return tools;
}

}  // namespace ouro::lab
