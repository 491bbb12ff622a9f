// The runner's parts (runner.cpp runs the experiment with them): the two sides' invocations, the
// correctness outputs and their agreement figures, and the timed runs. Internal to src/lab/.
#pragma once
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "lab/engine_work.h"
#include "lab/process.h"
#include "lab/runner.h"
#include "lab/stats.h"
#include "lab/trust.h"
#include "lab/worker_runs.h"
#include "runtime/quality.h"

namespace ouro::lab::runner_detail {

using nlohmann::json;

bool kernel_like(Level l);

// Model-independent synthetic text (the tokenizer turns it into tokens), from a seed.
std::string synthetic_text(uint64_t seed, int words);

struct SideExec {
  const char* name;  // "baseline" / "candidate"
  Binary bin;
  std::map<std::string, std::string> env;
  std::vector<std::string> args;
};

struct Ctx {
  const Spec& spec;
  const RunOptions& opt;
  EngineWork work;    // the engine level's timed work: worker runs and the bench cross-check alike
  std::string run_dir;
  std::string model;  // absolute, engine/op levels
  int n_vocab = 0;    // engine level: the model's vocabulary (prompt ids are drawn below it)
  std::vector<int> context;  // engine level: the spec's depth, filled untimed before each request
  double request_timeout_s = 0;  // engine level: no answer for this long is a hang
  double k_bytes = 0, k_flops = 0;  // kernel level: the baseline's cost of one call
  ProcLimits limits(const SideExec& s) const {
    ProcLimits l;
    l.timeout_s = spec.timeout_s;
    l.memory_mib = spec.memory_mib;
    l.write_dirs = {run_dir, s.bin.write_dir};
    return l;
  }
};

std::vector<std::string> common_args(const Ctx& c, const SideExec& s);

ProcResult exec(const Ctx& c, const SideExec& s, std::vector<std::string> argv);
// The same, read line by line on the lab's clock: the seconds between each @timed-start and the
// @timed-end after it go to `frames_s` (in order); the other lines are the result's `out`.
ProcResult exec_framed(const Ctx& c, const SideExec& s, std::vector<std::string> argv, std::vector<double>& frames_s);

std::string failure_text(const SideExec& s, const char* what, const ProcResult& r);

// ---- correctness ---------------------------------------------------------------------------

// A criterion that names correctness figures only (no timing).
bool correctness_only(const Criterion& cr);

struct Outputs {
  NpyF32 logits;
};

Expected<Outputs> engine_outputs(const Ctx& c, const SideExec& s, const std::string& text, const std::string& file);

// Serve level: the lab's own `ouro loadtest` starts the side's `ouro serve` (with the side's flags
// and environment, inside the side's limits), loads it and stops it; the JSON record it prints.
Expected<json> serve_loadtest(const Ctx& c, const SideExec& s, int requests, int gen_len, uint64_t seed, bool texts,
                              const char* what);

// Figures over a set of inputs (worst case over inputs).
struct Agreement {
  double top1_sum = 0, top1_n = 0, max_abs = 0, greedy_same = 0, greedy_n = 0, first_div = 1e300;
  double max_rel = 0, exact = 1, max_ref = 0;
  std::vector<double> kl;  // KL(baseline || candidate) of each scored position's next-token distribution
  void add_greedy(const std::vector<int>& b, const std::vector<int>& c) {
    greedy_n += 1;
    size_t i = 0;
    while (i < b.size() && i < c.size() && b[i] == c[i]) ++i;
    const bool same = b == c;
    greedy_same += same;
    first_div = std::min(first_div, (double)i);
  }
  void add_engine(const Outputs& b, const Outputs& c) {
    const auto& x = b.logits;
    const auto& y = c.logits;
    if (x.shape != y.shape || x.shape.size() != 2) {
      top1_n += 1;
      max_abs = INFINITY;
    } else {
      const size_t rows = x.shape[0], cols = x.shape[1];
      for (size_t r = 0; r < rows; ++r) {
        const float* a = &x.data[r * cols];
        const float* d = &y.data[r * cols];
        size_t ia = 0, id = 0;
        for (size_t k = 0; k < cols; ++k) {
          if (a[k] > a[ia]) ia = k;
          if (d[k] > d[id]) id = k;
          const double diff = std::fabs((double)a[k] - d[k]);
          max_abs = std::max(max_abs, std::isnan(diff) ? INFINITY : diff);
        }
        const double k = kl_divergence(a, d, (int64_t)cols);
        kl.push_back(std::isnan(k) ? INFINITY : k);
        top1_sum += ia == id;
        top1_n += 1;
      }
    }
  }
  void add_kernel(const NpyF32& b, const NpyF32& c) {
    if (b.shape != c.shape) {
      max_abs = INFINITY;
      exact = 0;
      return;
    }
    for (size_t i = 0; i < b.data.size(); ++i) {
      const double d = std::fabs((double)b.data[i] - c.data[i]);
      if (std::memcmp(&b.data[i], &c.data[i], 4) != 0) exact = 0;
      max_abs = std::max(max_abs, std::isnan(d) ? INFINITY : d);
      max_ref = std::max(max_ref, std::fabs((double)b.data[i]));
    }
  }
  json engine_json() const {
    double kl_mean = 0;
    for (double v : kl) kl_mean += v / (double)kl.size();
    return {{"top1_agreement", top1_n ? top1_sum / top1_n : 0.0}, {"max_abs_logit_diff", max_abs},
            {"greedy_match", greedy_n ? greedy_same / greedy_n : 0.0}, {"first_divergence", first_div > 1e299 ? 0.0 : first_div},
            {"kl_mean", kl.empty() ? INFINITY : kl_mean}, {"kl_max", kl.empty() ? INFINITY : quantile(kl, 1.0)}};
  }
  json kernel_json() const {
    const double rel = max_abs == 0 ? 0.0 : max_abs / std::max(max_ref, 1e-30);
    return {{"max_abs_diff", max_abs}, {"max_rel_diff", rel}, {"exact", exact}};
  }
};

// Worst of the spec's and the held-out figures, per name.
json worst_of(const json& a, const json& b);

// nlohmann refuses to dump infinity as a number; the record keeps it as a large sentinel.
double finite_or_max(double v);

void sanitize(json& j);

// ---- timing -----------------------------------------------------------------------------------

struct Sample {
  std::map<std::string, double> m;
  std::map<std::string, double> self;  // the candidate's self-reported figures for the same run
  std::string trace;
  double cpu_s = 0;  // the run's own CPU time (to tell its load from other processes')
  double cpu_cores = 0;  // CPU seconds per wall second while timed (engine level)
  std::vector<TrustSlot> slots;  // what each request (engine) or the run (kernel) produced
  std::string out_file;          // kernel level: the output written after the timed calls
  json texts;                    // serve level: each request's greedy text
};

// What one timed run of a pair gets: the lab draws it per pair, the same for both sides.
struct Draw {
  std::vector<WorkerInput> inputs;  // engine: warm-up request first, then the timed ones
  uint64_t seed = 0;                // kernel/op: the input seed
  bool heldout = false;
  long long iters = 0;              // kernel/op: calls to time (from the baseline's calibration)
};

// The engine level's prompts: the spec's seeds, and held-out ones drawn by the lab.
WorkerInput spec_input(const Ctx& c, uint64_t seed);

WorkerInput heldout_input(const Ctx& c, std::mt19937_64& rng);

// Greedy tokens per request, checked and timed alike (EngineWork::gen).
int engine_gen(const Ctx& c);

WorkerCall worker_call(const Ctx& c, const SideExec& s, const std::string& trace);

// A failed run of a side: "unstable: ..." when it crashed, hung or broke the protocol.
Error worker_error(const SideExec& s, const char* what, const WorkerRun& r);

std::vector<TrustSlot> trust_slots(const Ctx& c, const WorkerRun& r);

// Kernel and op level: `ouro microbench` with a fixed number of calls, framed by the markers it
// prints; the lab stamps their arrival and divides by the calls. The run's output is written after
// the timed calls, and a checked run is this same call.
Status kernel_timed(const Ctx& c, const SideExec& s, const std::string& tag, const Draw& d, Sample& out);

Expected<Sample> timed_run(const Ctx& c, const SideExec& s, const std::string& tag, const Draw& d);

// Each run's figures, for the criteria.
std::vector<std::map<std::string, double>> figures(const std::vector<Sample>& v);

std::string now_iso();

}  // namespace ouro::lab::runner_detail
