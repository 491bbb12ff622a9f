#include "lab/worker_runs.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "lab/pipe_process.h"
#include "lab/stats.h"

using nlohmann::json;

namespace ouro::lab {

std::vector<int> seeded_prompt(uint64_t seed, int len, int n_vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int> v((size_t)std::max(1, len));
  for (int& t : v) t = (int)(rng() % (uint64_t)std::max(1, n_vocab));
  return v;
}

namespace {

double secs(LabClock::time_point a, LabClock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The worker's lines are untrusted: a field of the wrong type is "absent", never an exception.
bool flag(const json& j, const char* k) { return j.is_object() && j.contains(k) && j[k].is_boolean() && j[k].get<bool>(); }

std::string tail_of(const std::string& err) {
  std::string t = err;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const size_t nl = t.rfind('\n');
  if (nl != std::string::npos) t = t.substr(nl + 1);
  if (t.size() > 300) t = t.substr(t.size() - 300);
  return t;
}

}  // namespace

WorkerRun run_worker(const WorkerCall& call, const std::vector<WorkerInput>& inputs) {
  WorkerRun out;
  PipeProcess p;
  std::vector<std::string> env;
  for (const auto& [k, v] : call.env) env.push_back(k + "=" + v);
  if (Status s = p.start(call.argv, env, call.cwd, call.limits); !s) {
    out.failure = s.error().message;
    return out;
  }
  const auto started = LabClock::now();
  const auto run_deadline = started + std::chrono::duration_cast<LabClock::duration>(std::chrono::duration<double>(call.limits.timeout_s));
  auto fail = [&](const std::string& what, bool unstable) {
    out.proc = p.finish(1.0);
    const std::string t = tail_of(out.proc.err);
    std::string how = out.proc.signal ? out.proc.failure() : out.proc.exit_code > 0 ? "exit code " + std::to_string(out.proc.exit_code) : "";
    out.failure = what + (how.empty() ? "" : " (" + how + ")") + (t.empty() ? "" : ": " + t);
    out.unstable = unstable;
    return out;
  };
  auto next = [&](double timeout_s) {
    return p.read_line(std::min(run_deadline, LabClock::now() + std::chrono::duration_cast<LabClock::duration>(std::chrono::duration<double>(timeout_s))));
  };
  // Loading: the ready line (or the worker's own error, e.g. a bad flag, which is not instability).
  auto ready = next(call.limits.timeout_s);
  if (!ready) {
    if (p.timed_out()) return fail("did not get ready within " + std::to_string((int)call.limits.timeout_s) + " s", true);
    ProcResult r = p.finish(1.0);
    const bool crashed = r.signal != 0;
    out.proc = r;
    out.failure = std::string(crashed ? "crashed while loading" : "exited while loading") + " (" + r.failure() + ")" +
                  (tail_of(r.err).empty() ? "" : ": " + tail_of(r.err));
    out.unstable = crashed;
    return out;
  }
  const json rj = json::parse(ready->text, nullptr, false);
  if (!flag(rj, "ready")) return fail("printed no ready line (got: " + ready->text.substr(0, 120) + ")", true);
  out.n_vocab = rj.contains("n_vocab") && rj["n_vocab"].is_number_integer() ? rj["n_vocab"].get<int>() : 0;
  double cpu0 = 0, wall_timed = 0, cpu_timed = 0;
  LabClock::time_point timed_t0{};
  for (size_t k = 0; k < inputs.size(); ++k) {
    const bool timed = (int)k >= call.timed_from;
    if (timed && (int)k == call.timed_from) {
      cpu0 = p.cpu_seconds();
      timed_t0 = LabClock::now();
    }
    if (!call.context.empty()) {
      if (!p.send(json({{"tokens", call.context}, {"n", 0}, {"reset", true}}).dump())) return fail("closed its input", true);
      auto l = next(call.request_timeout_s);
      if (!l) return fail(p.timed_out() ? "hung: timed out after " + std::to_string((int)call.request_timeout_s) + " s without an answer" : "crashed", true);
      if (!flag(json::parse(l->text, nullptr, false), "done")) return fail("did not fill its context: " + l->text.substr(0, 200), true);
    }
    const json req = {{"tokens", inputs[k].prompt}, {"n", call.gen}, {"reset", call.context.empty()}};
    const auto sent = LabClock::now();
    if (!p.send(req.dump())) return fail("closed its input", true);
    SlotResult s;
    s.key = inputs[k].key;
    s.heldout = inputs[k].heldout;
    s.timed = timed;
    LabClock::time_point first{}, last{};
    long long self_first = 0, self_last = 0;
    for (;;) {
      auto l = next(call.request_timeout_s);
      if (!l) return fail(p.timed_out() ? "hung: timed out after " + std::to_string((int)call.request_timeout_s) + " s without an answer" : "crashed", true);
      const json j = json::parse(l->text, nullptr, false);
      if (!j.is_object()) return fail("broke the protocol (printed: " + l->text.substr(0, 120) + ")", true);
      if (j.contains("error")) return fail("refused a request: " + j["error"].dump(), true);
      if (flag(j, "done")) break;
      if (!j.contains("tok") || !j["tok"].is_number_integer()) return fail("broke the protocol (printed: " + l->text.substr(0, 120) + ")", true);
      // A timestamp that is not a number claims nothing (and then fails measurement_mismatch).
      const long long t = j.contains("t_ns") && j["t_ns"].is_number() ? (long long)j["t_ns"].get<double>() : -1;
      if (s.tokens.empty()) { first = l->arrived; self_first = t; }
      last = l->arrived;
      self_last = t;
      s.tokens.push_back(j["tok"].get<int>());
    }
    if ((int)s.tokens.size() != call.gen)
      return fail("answered " + std::to_string(s.tokens.size()) + " tokens where " + std::to_string(call.gen) + " were asked", true);
    s.lab_prefill_s = secs(sent, first);
    s.lab_decode_s = secs(first, last);
    s.self_prefill_s = self_first * 1e-9;
    s.self_decode_s = (self_last - self_first) * 1e-9;
    out.slots.push_back(std::move(s));
  }
  if ((int)inputs.size() > call.timed_from) {
    cpu_timed = p.cpu_seconds() - cpu0;
    wall_timed = secs(timed_t0, LabClock::now());
    out.cpu_cores = wall_timed > 0 ? cpu_timed / wall_timed : 0;
  }
  out.proc = p.finish(std::max(5.0, call.request_timeout_s));
  if (!out.proc.ok()) {
    out.failure = "did not exit cleanly after its last request (" + out.proc.failure() + ")";
    out.unstable = true;
    return out;
  }
  out.ok = true;
  return out;
}

RunRates run_rates(const WorkerRun& r, int prompt_len, int gen) {
  std::vector<double> pp, tg, spp, stg;
  for (const auto& s : r.slots) {
    if (!s.timed) continue;
    // A zero or negative self-reported interval claims unbounded speed: kept as a huge figure.
    auto rate = [](double work, double t) { return t > 0 ? work / t : 1e12; };
    pp.push_back(rate(prompt_len, s.lab_prefill_s));
    spp.push_back(rate(prompt_len, s.self_prefill_s));
    if (gen > 1) {
      tg.push_back(rate(gen - 1, s.lab_decode_s));
      stg.push_back(rate(gen - 1, s.self_decode_s));
    }
  }
  auto med = [](const std::vector<double>& v) { return v.empty() ? NAN : median(v); };
  return {med(pp), med(tg), med(spp), med(stg)};
}

}  // namespace ouro::lab
