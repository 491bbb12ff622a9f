// ouro worker: the engine as a worker that answers the lab's requests (docs/lab.md, "What a
// candidate can and cannot influence"). The lab owns the loop and the clock: it sends a prompt,
// stamps each streamed token's arrival itself, and checks every token it times. Nothing here
// decides a verdict; the timestamps this prints are the candidate's self-report, recorded beside
// the lab's own.
//
// Protocol (JSON lines): after loading it prints {"ready": true, "n_vocab", "n_ctx", "commit"}.
// Each request {"tokens": [ids], "n": N, "reset": true|false} runs the tokens through the model
// (after clearing the context when reset, the default) and streams N greedy tokens, each as
// {"tok": id, "t_ns": ns since the request arrived} the moment it is known, then
// {"done": true, "t_ns": ..., "n_past": ...}. N = 0 only fills the context. A bad request gets
// {"error": "..."} and the worker reads on; end of input ends it (exit 0).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/stat.h>

#include "cli/common.h"
#include "core/fault.h"
#include "core/sha256.h"
#include "ouro_version.h"
#include "runtime/sampler.h"

namespace ouro {

namespace {

const char* kUsage =
    "usage: ouro worker [-m MODEL] [-t THREADS] [--ctx N] [--isa ...] [quantization flags] [--trace FILE]\n"
    "  Reads JSON-line requests on stdin and streams greedy tokens with timestamps on stdout, for\n"
    "  `ouro lab run` (the lab times and checks them from outside). Protocol: src/cli/cmd_worker.cpp.\n";

using Clock = std::chrono::steady_clock;

void emit(const nlohmann::json& j) {
  std::fputs(j.dump().c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// The adversarial faults' memory of inputs, under $TMPDIR (src/core/fault.h).
std::string fault_path(const char* kind, const std::vector<int>& ids, int n) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/ouro-fault-" + kind;
  mkdir(dir.c_str(), 0755);
  return dir + "/" + sha256_hex(nlohmann::json(ids).dump() + "/" + std::to_string(n)).substr(0, 16);
}

}  // namespace

int cmd_worker(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, concat(kCommonValueFlags, kTraceFlags), {}); !s) return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  auto eng = load_engine(a);
  if (!eng) return report(eng.error());
  Engine& e = **eng;
  const int n_vocab = e.model().info().n_vocab;
  auto st = e.new_state();
  if (Status s = start_trace(a); !s) return report(s.error());  // --trace: every request's spans
  emit({{"ready", true}, {"n_vocab", n_vocab}, {"n_ctx", st->n_ctx()}, {"commit", OURO_COMMIT}});
  fault::at_run_start();
  const double inflate = fault::inflation("worker");
  const bool skip_seen = fault::g_active && fault::config().skip_seen;
  const bool memo_learn = fault::g_active && fault::config().memo_learn;
  std::vector<float> logits(n_vocab);
  std::string line;
  while (std::getline(std::cin, line)) {
    const auto t0 = Clock::now();
    auto ns = [&] { return (long long)(std::chrono::duration<double, std::nano>(Clock::now() - t0).count()); };
    nlohmann::json req = nlohmann::json::parse(line, nullptr, false);
    if (!req.is_object() || !req.contains("tokens") || !req["tokens"].is_array()) {
      emit({{"error", "a request is an object with \"tokens\": [ids] and \"n\": count"}});
      continue;
    }
    std::vector<int> ids;
    bool ok = true;
    for (const auto& t : req["tokens"]) {
      if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= n_vocab) { ok = false; break; }
      ids.push_back(t.get<int>());
    }
    const nlohmann::json nj = req.value("n", nlohmann::json(0));
    const nlohmann::json rj = req.value("reset", nlohmann::json(true));
    if (!ok || !nj.is_number_integer() || nj.get<long long>() < 0 || !rj.is_boolean()) {
      emit({{"error", "tokens must be ids in [0, " + std::to_string(n_vocab) + "), n a count >= 0 and reset true or false"}});
      continue;
    }
    const bool reset = rj.get<bool>();
    const int n = (int)std::min<long long>(nj.get<long long>(), 1 << 20);
    const int past = reset ? 0 : st->n_past();
    if (ids.empty() || (long long)past + (long long)ids.size() + n > st->n_ctx()) {
      emit({{"error", "the request needs 1.." + std::to_string(st->n_ctx() - past - n) + " tokens to fit the context of " +
                          std::to_string(st->n_ctx())}});
      continue;
    }
    if (reset) st->reset();
    // Adversaries only (OURO_FAULT): an input seen before is "probably the timed run".
    std::string memo;
    if (skip_seen) {
      const std::string p = fault_path("seen", ids, n);
      fault::g_skip_last_layer = std::ifstream(p).good();
      std::ofstream(p) << "1";
    }
    if (memo_learn) {
      memo = fault_path("memo", ids, n);
      std::ifstream in(memo);
      std::vector<int> replay;
      for (int t; in >> t;) replay.push_back(t);
      if ((int)replay.size() == n && n > 0) {
        for (int t : replay) emit({{"tok", t}, {"t_ns", ns()}});
        emit({{"done", true}, {"t_ns", ns()}, {"n_past", st->n_past()}});
        continue;
      }
    }
    if (Status s = st->forward(ids.data(), (int)ids.size(), logits.data(), false, e.pool(), e.kernels()); !s) {
      emit({{"error", s.error().message}});
      continue;
    }
    std::vector<int> out;
    long long t_first = 0;
    for (int i = 0; i < n; ++i) {
      const int tok = argmax(logits.data(), n_vocab);
      out.push_back(tok);
      long long t = ns();
      if (i == 0) t_first = t;
      else t = t_first + (long long)((double)(t - t_first) / inflate);
      emit({{"tok", tok}, {"t_ns", t}});
      if (i + 1 < n)
        if (Status s = st->decode(tok, logits.data(), e.pool(), e.kernels()); !s) {
          emit({{"error", s.error().message}});
          break;
        }
    }
    fault::g_skip_last_layer = false;
    if (!memo.empty()) {
      std::ofstream o(memo);
      for (int t : out) o << t << ' ';
    }
    emit({{"done", true}, {"t_ns", ns()}, {"n_past", st->n_past()}});
  }
  if (Status s = finish_trace(a, e); !s) return report(s.error());
  return 0;
}

}  // namespace ouro
