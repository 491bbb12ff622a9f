// The runner's parts: see runner_parts.h.
#include "lab/runner_parts.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <immintrin.h>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/cpu.h"
#include "core/sha256.h"
#include "lab/judge.h"
#include "lab/measurement.h"
#include "lab/numfmt.h"
#include "lab/pipe_process.h"
#include "lab/probe.h"
#include "model/gguf.h"
#include "runtime/engine.h"
#include "trace/analyze.h"

namespace ouro::lab::runner_detail {

namespace fs = std::filesystem;

bool kernel_like(Level l) { return l == Level::kKernel || l == Level::kOp; }

std::string synthetic_text(uint64_t seed, int words) {
  static const char* kWords[] = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "with", "as", "was", "on", "be", "at", "by",
      "this", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which", "one", "you", "were",
      "engine", "memory", "kernel", "matrix", "token", "river", "mountain", "history", "water", "light",
      "return", "value", "function", "if", "else", "while", "int", "float", "(", ")", "{", "}", "=", ";",
      "1", "42", "2026", "city", "music", "garden", "winter", "number", "question", "answer"};
  std::mt19937_64 rng(seed);
  std::string s;
  for (int i = 0; i < words; ++i) {
    if (i) s += ' ';
    s += kWords[rng() % (sizeof kWords / sizeof kWords[0])];
  }
  return s;
}

std::vector<std::string> common_args(const Ctx& c, const SideExec& s) {
  std::vector<std::string> a;
  if (!c.model.empty()) a.insert(a.end(), {"-m", c.model});
  if (c.work.threads > 0) a.insert(a.end(), {"-t", std::to_string(c.work.threads)});
  // Work deeper than the default context asks for what it needs (rounded up to 256), so the
  // worker and every bench call of the spec run in one context; shallower work keeps the default
  // (and the argv of the records measured before this rule).
  const int need = c.work.depth + c.work.prompt_len + c.work.gen;
  if (need > kDefaultCtxCap) a.insert(a.end(), {"--ctx", std::to_string((need + 255) / 256 * 256)});
  a.insert(a.end(), s.args.begin(), s.args.end());
  return a;
}

ProcResult exec(const Ctx& c, const SideExec& s, std::vector<std::string> argv) {
  argv.insert(argv.begin(), s.bin.path);
  return run_process(argv, s.env, c.opt.build.repo_root, c.limits(s));
}

ProcResult exec_framed(const Ctx& c, const SideExec& s, std::vector<std::string> argv, std::vector<double>& frames_s) {
  argv.insert(argv.begin(), s.bin.path);
  std::vector<std::string> env;
  for (const auto& [k, v] : s.env) env.push_back(k + "=" + v);
  ProcResult r;
  PipeProcess p;
  if (Status st = p.start(argv, env, c.opt.build.repo_root, c.limits(s)); !st) {
    r.err = st.error().message;
    return r;
  }
  const auto deadline = LabClock::now() + std::chrono::duration_cast<LabClock::duration>(std::chrono::duration<double>(c.spec.timeout_s));
  LabClock::time_point t0{};
  bool open = false;
  std::string out;
  while (auto l = p.read_line(deadline)) {
    if (l->text == "@timed-start") {
      t0 = l->arrived;
      open = true;
    } else if (l->text == "@timed-end" && open) {
      frames_s.push_back(std::chrono::duration<double>(l->arrived - t0).count());
      open = false;
    } else {
      out += l->text + "\n";
    }
  }
  const bool hung = p.timed_out();
  r = p.finish(1.0);
  r.timed_out = r.timed_out || hung;
  r.out = out;
  return r;
}

std::string failure_text(const SideExec& s, const char* what, const ProcResult& r) {
  std::string tail = r.err;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  const size_t nl = tail.rfind('\n');
  if (nl != std::string::npos) tail = tail.substr(nl + 1);
  if (tail.size() > 300) tail = tail.substr(tail.size() - 300);
  return std::string(s.name) + " " + what + " failed: " + r.failure() + (tail.empty() ? "" : " (" + tail + ")");
}

bool correctness_only(const Criterion& cr) {
  for (const auto& n : expr_names(*cr.expr))
    if (n.rfind("correctness.", 0) != 0) return false;
  return true;
}

Expected<Outputs> engine_outputs(const Ctx& c, const SideExec& s, const std::string& text, const std::string& file) {
  // The distribution check: every position's logits (`ouro logits`). Greedy continuations are
  // checked through the worker, in runs shaped exactly like the timed ones (step 3 below).
  auto args = common_args(c, s);
  std::vector<std::string> argv = {"logits", "--text", text, "--all", "--out", file};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r = exec(c, s, argv);
  if (!r.ok()) return runtime_error(failure_text(s, "correctness run (logits)", r));
  Outputs o;
  auto npy = read_npy_f32(file);
  if (!npy) return runtime_error(std::string(s.name) + " wrote unreadable logits: " + npy.error().message);
  o.logits = std::move(*npy);
  return o;
}

Expected<json> serve_loadtest(const Ctx& c, const SideExec& s, int requests, int gen_len, uint64_t seed, bool texts,
                              const char* what) {
  std::string serve_args;
  for (const auto& x : common_args(c, s)) serve_args += (serve_args.empty() ? "" : " ") + x;
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return runtime_error("cannot find the lab's own binary: " + ec.message());
  const Workload& w = c.spec.workload;
  std::vector<std::string> argv = {self, "loadtest", "--serve-bin", s.bin.path, "--serve-args", serve_args, "--json",
                                   "--concurrency", std::to_string(w.concurrency), "--requests", std::to_string(requests),
                                   "--prompt-len", std::to_string(w.prompt_len), "--gen-len", std::to_string(gen_len),
                                   "--seed", std::to_string(seed), "--timeout", fmt(c.spec.timeout_s, 10)};
  if (texts) argv.push_back("--texts");
  ProcResult r = run_process(argv, s.env, c.opt.build.repo_root, c.limits(s));
  if (!r.ok()) return runtime_error(failure_text(s, what, r));
  json j = json::parse(r.out, nullptr, false);
  if (!j.is_object() || !j.contains("completed")) return runtime_error(std::string(s.name) + " " + what + ": loadtest printed no record");
  const json srv = j.value("server", json());
  if (srv.is_object() && srv.value("exit_code", json()) != json(0))
    return runtime_error(std::string(s.name) + "'s server did not exit cleanly after the " + what + ": " + srv.dump());
  if (j["completed"] != j["requests"])
    return runtime_error(std::string(s.name) + "'s server failed " +
                         std::to_string(j["requests"].get<long long>() - j["completed"].get<long long>()) + " of " +
                         std::to_string(j["requests"].get<long long>()) + " requests in the " + what + ": " +
                         j.value("error_examples", json::object()).dump());
  j["_rss_mib"] = r.max_rss_mib;
  j["_cpu_s"] = r.cpu_s;
  j["_wall_s"] = r.wall_s;
  return j;
}

json worst_of(const json& a, const json& b) {
  json w = json::object();
  for (auto it = a.begin(); it != a.end(); ++it) {
    const double x = it.value().get<double>(), y = b.value(it.key(), x);
    w[it.key()] = correctness_higher_is_better(it.key()) ? std::min(x, y) : std::max(x, y);
  }
  return w;
}

double finite_or_max(double v) { return std::isfinite(v) ? v : (v > 0 ? 1e308 : -1e308); }

void sanitize(json& j) {
  if (j.is_number_float()) j = finite_or_max(j.get<double>());
  else if (j.is_structured()) for (auto& x : j) sanitize(x);
}

WorkerInput spec_input(const Ctx& c, uint64_t seed) {
  return {seeded_prompt(seed, c.work.prompt_len, c.n_vocab), "spec:" + std::to_string(seed), false};
}

WorkerInput heldout_input(const Ctx& c, std::mt19937_64& rng) {
  const uint64_t seed = rng() % (1ull << 62);
  return {seeded_prompt(seed, c.work.prompt_len, c.n_vocab), "heldout:" + std::to_string(seed), true};
}

int engine_gen(const Ctx& c) { return c.work.gen; }

WorkerCall worker_call(const Ctx& c, const SideExec& s, const std::string& trace) {
  WorkerCall w;
  w.argv = {s.bin.path, "worker"};
  auto args = common_args(c, s);
  w.argv.insert(w.argv.end(), args.begin(), args.end());
  if (!trace.empty()) w.argv.insert(w.argv.end(), {"--trace", trace});
  w.env = s.env;
  w.cwd = c.opt.build.repo_root;
  w.limits = c.limits(s);
  w.request_timeout_s = c.request_timeout_s > 0 ? c.request_timeout_s : c.spec.timeout_s;
  w.gen = engine_gen(c);
  w.context = c.context;
  w.timed_from = 1;
  return w;
}

Error worker_error(const SideExec& s, const char* what, const WorkerRun& r) {
  return runtime_error(std::string(r.unstable ? "unstable: " : "") + s.name + "'s worker " + r.failure + " during the " + what);
}

std::vector<TrustSlot> trust_slots(const Ctx& c, const WorkerRun& r) {
  std::vector<TrustSlot> v;
  const int gen = engine_gen(c);
  for (const auto& sl : r.slots) {
    TrustSlot t{sl.key, sl.heldout, sl.tokens, "", {}};
    if (sl.timed) {
      t.lab["prefill_tok_s"] = sl.lab_prefill_s > 0 ? c.work.prompt_len / sl.lab_prefill_s : 0;
      if (gen > 1) t.lab["decode_tok_s"] = sl.lab_decode_s > 0 ? (gen - 1) / sl.lab_decode_s : 0;
    }
    v.push_back(std::move(t));
  }
  return v;
}

Status kernel_timed(const Ctx& c, const SideExec& s, const std::string& tag, const Draw& d, Sample& out) {
  const Spec& sp = c.spec;
  out.out_file = c.run_dir + "/out-" + s.name + "-" + tag + ".npy";
  std::vector<std::string> argv = {s.bin.path, "microbench", sp.workload.kernel};
  argv.insert(argv.end(), sp.workload.kernel_args.begin(), sp.workload.kernel_args.end());
  argv.insert(argv.end(), {"--seed", std::to_string(d.seed), "--json", "--markers", "--iters", std::to_string(std::max(1LL, d.iters)),
                           "--out", out.out_file});
  auto args = common_args(c, s);
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  for (const auto& [k, v] : s.env) env.push_back(k + "=" + v);
  PipeProcess p;
  if (Status st = p.start(argv, env, c.opt.build.repo_root, c.limits(s)); !st)
    return runtime_error(std::string(s.name) + " could not start: " + st.error().message);
  const auto deadline = LabClock::now() + std::chrono::duration_cast<LabClock::duration>(std::chrono::duration<double>(sp.timeout_s));
  std::optional<LabClock::time_point> t0, t1;
  json j;
  while (auto l = p.read_line(deadline)) {
    if (l->text == "@timed-start" && !t0) t0 = l->arrived;
    else if (l->text == "@timed-end" && t0 && !t1) t1 = l->arrived;
    else if (!l->text.empty() && l->text[0] == '{') j = json::parse(l->text, nullptr, false);
  }
  const bool hung = p.timed_out();
  ProcResult r = p.finish(1.0);
  if (hung || r.timed_out) return runtime_error("unstable: " + std::string(s.name) + " hung: timed out after " + fmt(sp.timeout_s) + " s");
  if (!r.ok()) {
    const std::string f = failure_text(s, "run", r);
    return runtime_error((r.signal ? "unstable: " : "") + f);
  }
  if (!t0 || !t1)
    return runtime_error(std::string(s.name) + "'s microbench printed no @timed-start/@timed-end markers (a revision from before "
                         "the lab timed kernels from outside cannot be measured)");
  if (!j.is_object()) return runtime_error(std::string(s.name) + " printed no JSON figures");
  const double iters = (double)std::max(1LL, d.iters);
  const double lab_ns = std::chrono::duration<double, std::nano>(*t1 - *t0).count() / iters;
  auto num = [&](const char* k) -> double { const json v = j.value(k, json()); return v.is_number() ? v.get<double>() : NAN; };
  out.m["ns_per_op"] = lab_ns;
  out.m["gb_s"] = c.k_bytes / lab_ns;
  out.m["gflops"] = c.k_flops / lab_ns;
  out.m["peak_rss_mib"] = r.max_rss_mib;
  out.m["wall_s"] = r.wall_s;
  out.cpu_s = r.cpu_s;
  // The self-report: the harness's own total over the calls the lab asked for.
  const double total = num("total_ns");
  out.self["ns_per_op"] = std::isfinite(total) ? total / iters : num("ns_per_op");
  out.slots = {TrustSlot{(d.heldout ? "heldout:" : "spec:") + std::to_string(d.seed), d.heldout, {}, file_sha256(out.out_file),
                         {{"ns_per_op", lab_ns}}}};
  return Ok{};
}

Expected<Sample> timed_run(const Ctx& c, const SideExec& s, const std::string& tag, const Draw& d) {
  const Spec& sp = c.spec;
  std::vector<std::string> argv;
  Sample out;
  if (sp.level == Level::kEngine) {
    // The lab's loop and clock: the side's worker answers the drawn inputs, streaming tokens.
    if (sp.trace) out.trace = c.run_dir + "/trace-" + tag + ".json";
    const WorkerRun r = run_worker(worker_call(c, s, out.trace), d.inputs);
    if (!r.ok) return worker_error(s, "timed run", r);
    const RunRates rr = run_rates(r, c.work.prompt_len, engine_gen(c));
    out.m["prefill_tok_s"] = rr.prefill_tok_s;
    out.self["prefill_tok_s"] = rr.self_prefill_tok_s;
    if (engine_gen(c) > 1) {
      out.m["decode_tok_s"] = rr.decode_tok_s;
      out.self["decode_tok_s"] = rr.self_decode_tok_s;
    }
    out.m["peak_rss_mib"] = r.proc.max_rss_mib;
    out.m["wall_s"] = r.proc.wall_s;
    out.cpu_s = r.proc.cpu_s;
    out.cpu_cores = r.cpu_cores;
    out.slots = trust_slots(c, r);
  }
  if (sp.level == Level::kServe) {
    // Timed runs are checked runs: the same call as the correctness runs, texts included.
    auto j = serve_loadtest(c, s, sp.workload.requests, sp.workload.gen_len, d.seed, true, "timed run");
    if (!j) return j.error();
    auto num = [](const json& v) -> double { return v.is_number() ? v.get<double>() : NAN; };
    auto pct = [&](const char* key, const char* p) { return (*j)[key].is_object() ? num((*j)[key].value(p, json())) : NAN; };
    out.m["output_tok_s"] = num((*j)["output_tok_s"]);
    out.m["request_throughput"] = num((*j)["request_throughput"]);
    out.m["ttft_p50_s"] = pct("ttft_s", "p50");
    out.m["ttft_p99_s"] = pct("ttft_s", "p99");
    out.m["tpot_p50_s"] = pct("tpot_s", "p50");
    out.m["itl_p50_s"] = pct("itl_s", "p50");
    out.m["e2e_p50_s"] = pct("e2e_s", "p50");
    out.m["e2e_p99_s"] = pct("e2e_s", "p99");
    out.m["peak_rss_mib"] = num((*j)["_rss_mib"]);
    out.m["wall_s"] = num((*j)["_wall_s"]);
    out.cpu_s = num((*j)["_cpu_s"]);
    out.texts = (*j)["texts"];
    out.slots = {TrustSlot{(d.heldout ? "heldout:" : "spec:") + std::to_string(d.seed), d.heldout, {},
                           sha256_hex(out.texts.dump()), {{"output_tok_s", out.m["output_tok_s"]}}}};
    for (const auto& m : sp.metrics)
      if (!out.m.count(m) || std::isnan(out.m[m]))
        return runtime_error(std::string(s.name) + " did not report metric '" + m + "'");
    return out;
  }
  if (kernel_like(sp.level)) {
    if (Status st = kernel_timed(c, s, tag, d, out); !st) return st.error();
  }
  if (sp.trace && !out.trace.empty()) {
    auto t = analysis::load_trace(out.trace);
    if (!t) return runtime_error(std::string(s.name) + ": unreadable trace: " + t.error().message);
    analysis::Summary sum = analysis::summarize(*t, std::nullopt);
    for (const auto& m : sp.metrics) {
      if (m.rfind("span.", 0) != 0) continue;
      double ms = 0;
      for (const auto& row : sum.ops)
        if (row.name == m.substr(5)) ms += row.total_s * 1e3;
      out.m[m] = ms / std::max<size_t>(1, d.inputs.size());  // per request (the warm-up included)
    }
  }
  for (const auto& m : sp.metrics)
    if (!out.m.count(m) || std::isnan(out.m[m]))
      return runtime_error(std::string(s.name) + " did not report metric '" + m + "'" +
                           (m == "prefill_tok_s" || m == "decode_tok_s" ? " (is its length 0?)" : ""));
  return out;
}

std::vector<std::map<std::string, double>> figures(const std::vector<Sample>& v) {
  std::vector<std::map<std::string, double>> out;
  for (const auto& s : v) out.push_back(s.m);
  return out;
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

}  // namespace ouro::lab::runner_detail
