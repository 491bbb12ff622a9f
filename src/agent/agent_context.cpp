// Step 1 of `ouro agent`: the context a proposal starts from, gathered with cheap child runs of
// this binary (a cached probe, one traced bench, its summary) and the ledger.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "agent/agent.h"
#include "lab/ledger.h"
#include "lab/process.h"

namespace ouro::lab {

using nlohmann::json;

namespace {

// Runs this ouro with `args`; its stdout parsed as one JSON object, or an error naming the command.
Expected<json> run_json(const AgentOptions& o, const std::vector<std::string>& args, double timeout_s) {
  std::vector<std::string> argv = {o.self_bin};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string cmd = "ouro";
  for (const auto& a : args) cmd += " " + a;
  ProcLimits lim;
  lim.timeout_s = timeout_s;
  const ProcResult r = run_process(argv, current_env(), o.repo_root, lim);
  if (!r.ok()) {
    std::string tail = r.err;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    return runtime_error("context: '" + cmd + "' failed (" + r.failure() + ")" + (tail.empty() ? "" : ": " + tail));
  }
  json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return runtime_error("context: '" + cmd + "' did not print a JSON object");
  return j;
}

std::string fmt(double v, int prec = 3) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}

// The best figure over thread counts of a probe field ({"1": x, "2": y}).
double best_of(const json& probe, const char* key) {
  double best = 0;
  if (const json* m = jobj(probe, key))
    for (auto it = m->begin(); it != m->end(); ++it)
      if (it.value().is_number()) best = std::max(best, it.value().get<double>());
  return best;
}

// A record in a few lines of JSON: what was tried, the verdict and why.
json short_record(const json& r) {
  json s = {{"id", jstr(r, "id")}, {"kind", jstr(r, "kind")}, {"verdict", jstr(r, "verdict")}};
  if (const json* spec = jobj(r, "spec")) s["question"] = jstr(*spec, "question");
  if (const json* revs = jobj(r, "revisions"))
    for (const char* side : {"baseline", "candidate"})
      if (const json* x = jobj(*revs, side)) {
        if (const json* a = jarr(*x, "args")) s[std::string(side) + "_args"] = *a;
        if (!jstr(*x, "revision").empty()) s[std::string(side) + "_revision"] = jstr(*x, "revision");
      }
  if (const json* st = jobj(r, "stats"))
    for (auto it = st->begin(); it != st->end(); ++it)
      if (auto ratio = jnum(it.value(), "ratio")) s["ratios"][it.key()] = *ratio;
  if (const json* rs = jarr(r, "reasons")) {
    json reasons = json::array();
    for (size_t i = 0; i < rs->size() && i < 4; ++i) reasons.push_back((*rs)[i]);
    s["reasons"] = reasons;
  }
  if (!jstr(r, "summary").empty()) s["summary"] = jstr(r, "summary");
  return s;
}

}  // namespace

Expected<AgentContext> gather_context(const AgentOptions& o, const LaunchParams& current) {
  AgentContext c;
  auto probe = run_json(o, {"probe", "--json"}, 300);
  if (!probe) return probe.error();
  c.probe = *probe;
  const std::string probe_file = o.work_dir + "/probe.json", trace_file = o.work_dir + "/context-trace.json";
  {
    std::ofstream f(probe_file);
    f << c.probe.dump();
    if (!f) return runtime_error(probe_file + ": cannot write");
  }
  std::vector<std::string> bench = {"bench", "--json", "--repeats", "1", "--warmup", "0", "--prompt-len", std::to_string(o.workload.prompt_len),
                                    "--gen-len", std::to_string(o.workload.gen_len), "--trace", trace_file};
  if (o.workload.depth > 0) bench.insert(bench.end(), {"--depth", std::to_string(o.workload.depth)});
  if (!o.workload.model.empty()) bench.insert(bench.end(), {"-m", o.workload.model});
  const auto args = current.to_args();
  bench.insert(bench.end(), args.begin(), args.end());
  auto b = run_json(o, bench, 600);
  if (!b) return b.error();
  c.bench = *b;
  auto s = run_json(o, {"trace", "summarize", trace_file, "--probe", probe_file, "--json"}, 120);
  if (!s) return s.error();
  c.summary = *s;

  // The top ops, and the words that find related records: op names and the launch flags.
  std::vector<const json*> top;
  if (const json* ops = jarr(c.summary, "ops"))
    for (const auto& op : *ops)
      if (op.is_object() && top.size() < 8) top.push_back(&op);
  std::set<std::string> words;
  for (size_t i = 0; i < top.size() && i < 5; ++i) words.insert(jstr(*top[i], "name"));
  for (const auto& r : param_rules(o.nproc)) words.insert("--" + r.name);
  words.insert("\"-t\"");
  auto recs = read_ledger(o.ledger);
  if (!recs) return recs.error();
  for (auto it = recs->rbegin(); it != recs->rend() && c.related.size() < 8; ++it) {
    const std::string k = jstr(*it, "kind");
    if (k == "agent-account") continue;
    std::string hay = safe_dump(it->value("spec", json())) + safe_dump(it->value("attribution", json())) +
                      safe_dump(it->value("reasons", json())) + safe_dump(it->value("revisions", json())) +
                      safe_dump(it->value("proposal", json()));
    bool hit = false;
    for (const auto& w : words) hit |= !w.empty() && hay.find(w) != std::string::npos;
    if (hit) c.related.push_back(short_record(*it));
  }

  std::ostringstream t;
  t << "Machine ceiling (ouro probe): read bandwidth " << fmt(best_of(c.probe, "read_gb_s")) << " GB/s, FP32 "
    << fmt(best_of(c.probe, "fp32_gflops")) << " GFLOP/s, INT8 " << fmt(best_of(c.probe, "int8_gops")) << " GOP/s, "
    << o.nproc << " CPUs.\n";
  t << "Current configuration: " << current.text() << " (workload: prompt " << o.workload.prompt_len << ", gen "
    << o.workload.gen_len << ", depth " << o.workload.depth << (o.workload.model.empty() ? "" : ", model " + o.workload.model) << ").\n";
  auto median = [&](const char* k) {
    const json* m = jobj(c.bench, k);
    return m ? jnum(*m, "median").value_or(0) : 0.0;
  };
  t << "Its bench: prefill " << fmt(median("prefill_tok_s"), 4) << " tok/s, decode " << fmt(median("decode_tok_s"), 4) << " tok/s.\n";
  t << "Top ops in its trace (share of wall time, GB/s, fraction of the bandwidth ceiling, roofline verdict):\n";
  for (const json* op : top) {
    t << "  " << jstr(*op, "name") << ": " << fmt(100 * jnum(*op, "share").value_or(0), 3) << "%";
    if (auto g = jnum(*op, "gb_s")) t << ", " << fmt(*g) << " GB/s";
    if (auto f = jnum(*op, "bw_fraction")) t << " (" << fmt(100 * *f, 2) << "% of bandwidth)";
    if (auto f = jnum(*op, "flop_fraction")) t << ", " << fmt(100 * *f, 2) << "% of compute";
    t << ", " << jstr(*op, "verdict") << "\n";
  }
  t << "Parameters and the ops they reach: threads (every op), kv (attention, rope_kv), weights and isa (qkv, "
       "attn_out, gate_up, down, lm_head), ctx (attention).\n";
  if (c.related.empty()) {
    t << "The ledger holds no earlier experiments on these ops or parameters.\n";
  } else {
    t << "Recent ledger records on these ops or parameters (newest first; rejected ones say why):\n";
    for (const auto& r : c.related) t << "  " << safe_dump(r) << "\n";
  }
  c.text = t.str();
  return c;
}

}  // namespace ouro::lab
