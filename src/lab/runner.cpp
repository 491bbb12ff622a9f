// Runs one experiment (docs/lab.md, "What a run does"): run_experiment's steps in order, one
// function read top to bottom, which is why this file is over 600 lines; the parts it calls are
// runner_parts.cpp.
#include "lab/runner.h"
#include "lab/runner_parts.h"
#include "runtime/quality.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <immintrin.h>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/cpu.h"
#include "core/npy.h"
#include "core/sha256.h"
#include "lab/engine_work.h"
#include "lab/judge.h"
#include "lab/numfmt.h"
#include "lab/measurement.h"
#include "lab/probe.h"
#include "lab/process.h"
#include "lab/stats.h"
#include "lab/pipe_process.h"
#include "lab/trust.h"
#include "lab/worker_runs.h"
#include "model/gguf.h"
#include "trace/analyze.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ouro::lab {

using namespace runner_detail;

// ---- the experiment --------------------------------------------------------------------------

Expected<json> run_experiment(const Spec& spec, const RunOptions& opt) {
  auto say = [&](const std::string& s) {
    if (opt.verbose) std::fprintf(stderr, "lab: %s\n", s.c_str());
  };
  Ctx c{spec, opt, engine_work(spec.workload), opt.out_dir, "", 0, {}, 0, 0, 0};
  if (c.run_dir.empty()) {
    char b[64];
    std::snprintf(b, sizeof b, "/runs/%lld-%d", (long long)std::time(nullptr), (int)getpid());
    c.run_dir = opt.build.cache_root + b;
  }
  if (spec.level != Level::kKernel) {
    std::string m = spec.workload.model;
    if (m.empty()) {
      const char* env = std::getenv("OURO_MODEL");
      m = env && *env ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    }
    if (m[0] != '/') m = opt.build.repo_root + "/" + m;
    if (!fs::exists(m)) return usage_error(spec.path + ": workload.model: no file " + m);
    c.model = m;
  }

  json record;
  record["kind"] = opt.correctness_only ? "correctness" : "run";
  record["spec_path"] = spec.path;
  record["spec"] = spec_to_json(spec);
  record["spec_toml"] = spec.toml;
  if (!spec.criteria_sha256.empty()) record["criteria_sha256"] = spec.criteria_sha256;
  record["command"] = opt.command;
  record["note"] = opt.note;
  record["time"] = now_iso();
  std::vector<std::string> reasons;
  auto finish = [&](const std::string& verdict) {
    record["verdict"] = verdict;
    record["reasons"] = reasons;
    sanitize(record);
    return record;
  };

  // 1. Binaries (a baseline that does not build is an error; a candidate that does not, a reject).
  //    Both revisions are resolved before anything builds, so a typo costs nothing.
  SideExec sides[2] = {{"baseline", {}, {}, {}}, {"candidate", {}, {}, {}}};
  const Side* specs[2] = {&spec.baseline, &spec.candidate};
  for (const Side* sd : specs)
    if (sd->revision != "worktree")
      if (auto r = resolve_commit(opt.build.repo_root, sd->revision); !r) return r.error();
  json revs = json::object();
  for (int i = 0; i < 2; ++i) {
    auto b = prepare_binary(opt.build, *specs[i]);
    if (!b) {
      if (i == 0 || b.error().kind == ErrorKind::kUsage) return b.error();
      reasons.push_back("candidate does not build: " + b.error().message);
      record["revisions"] = revs;
      return finish("reject");
    }
    sides[i].bin = *b;
    auto env = current_env();
    env.erase("OURO_FAULT");  // faults only where a side asks for them
    for (const auto& [k, v] : specs[i]->env) env[k] = v;
    sides[i].env = env;
    sides[i].args = specs[i]->args;
    revs[sides[i].name] = {{"revision", b->revision}, {"commit", b->commit}, {"dirty", b->dirty}, {"diff_sha256", b->diff_sha256},
                           {"build", b->build}, {"args", specs[i]->args}, {"env", specs[i]->env}, {"binary", b->path}};
  }
  record["revisions"] = revs;
  std::error_code ec;
  fs::create_directories(c.run_dir, ec);
  if (ec) return runtime_error("cannot create the run folder " + c.run_dir + ": " + ec.message());
  c.run_dir = fs::canonical(c.run_dir).string();
  record["run_dir"] = c.run_dir;
  for (auto& sd : sides) sd.env["TMPDIR"] = c.run_dir;

  // 2. The machine: wait (a while) for quiet, and say how quiet it was.
  MachineLoad load = measure_load(0.3);
  const auto wait_start = std::chrono::steady_clock::now();
  while (load.busy_cores > 0.5 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count() < opt.quiet_wait_s) {
    say("machine busy (" + fmt(load.busy_cores, 2) + " cores in use by others); waiting");
    load = measure_load(1.0);
  }
  const bool quiet = load.busy_cores <= 0.5;
  if (!quiet) say("machine still busy (" + fmt(load.busy_cores, 2) + " cores): measuring anyway, the record says so");
  json machine = {{"cpu", cpu_features().model_name}, {"features", cpu_features().flags_string()},
                  {"isa", isa_name(best_isa())}, {"ouro_isa", std::getenv("OURO_ISA") ? std::getenv("OURO_ISA") : "auto"},
                  {"cpus", std::thread::hardware_concurrency()}, {"load1", load.load1}, {"busy_cores", load.busy_cores},
                  {"quiet", quiet}, {"write_confinement", landlock_available() ? "landlock" : "unavailable"}};
  if (auto p = load_cached_probe()) machine["probe"] = json::parse(p->to_json());
  record["machine"] = machine;

  // 3. Correctness first (cheap, and a crash shows up before any timing): the spec's inputs and
  //    held-out inputs from a seed drawn now, which the spec cannot know.
  std::random_device rd;
  const uint64_t heldout_seed = ((uint64_t)rd() << 32) ^ rd();
  record["heldout_seed"] = heldout_seed;
  // What the timed runs get is drawn per pair from this generator, seeded now (not announced).
  std::mt19937_64 draw_rng(heldout_seed ^ 0x9e3779b97f4a7c15ull);
  std::map<std::string, std::string> checked[2];  // checked outputs by input key, per side
  long long kernel_iters = 0;
  int runs_started[2] = {0, 0};
  // A candidate that fails: rejected, as `unstable` when it crashed, hung or broke the protocol.
  auto reject_with = [&](const std::string& msg) {
    if (msg.rfind("unstable: ", 0) == 0) {
      record["rejected_for"] = "unstable";
      reasons.push_back(msg + " (in its run " + std::to_string(runs_started[1]) + ", after " + std::to_string(runs_started[1] - 1) +
                        " clean ones; one failure rejects: a candidate that fails in 1 of 20 runs fails in production too)");
    } else {
      reasons.push_back(msg);
    }
    return finish("reject");
  };
  if (spec.level == Level::kEngine) {
    auto f = GgufFile::open(c.model);
    if (!f) return f.error();
    const GgufValue* toks = (*f)->find("tokenizer.ggml.tokens");
    const GgufTensorInfo* emb = (*f)->tensor("token_embd.weight");
    c.n_vocab = toks && !toks->arr.empty() ? (int)toks->arr.size() : emb && emb->ne.size() == 2 ? (int)emb->ne[1] : 0;
    if (c.n_vocab <= 0) return usage_error(c.model + ": no tokenizer.ggml.tokens or token_embd.weight to learn the vocabulary from");
    if (c.work.depth > 0) c.context = seeded_prompt(heldout_seed ^ 0xdeadbeefull, c.work.depth, c.n_vocab);
  }
  say("checking correctness (spec inputs and held-out inputs)");
  json corr_spec, corr_held;
  {
    Agreement spec_ag, held_ag;
    if (kernel_like(spec.level)) {
      // Calibration: the baseline's own figure for one call sizes the timed section (min_time).
      {
        std::vector<std::string> argv = {"microbench", spec.workload.kernel};
        argv.insert(argv.end(), spec.workload.kernel_args.begin(), spec.workload.kernel_args.end());
        argv.insert(argv.end(), {"--seed", std::to_string(spec.workload.seeds[0]), "--json", "--min-time", "20"});
        auto args = common_args(c, sides[0]);
        argv.insert(argv.end(), args.begin(), args.end());
        ProcResult r = exec(c, sides[0], argv);
        if (!r.ok()) return runtime_error(failure_text(sides[0], "calibration run", r));
        const json j = json::parse(r.out, nullptr, false);
        const double ns = j.is_object() && j.value("ns_per_op", json()).is_number() ? j["ns_per_op"].get<double>() : 0;
        if (!(ns > 0)) return runtime_error("baseline's calibration run printed no ns_per_op");
        kernel_iters = (long long)std::clamp(std::ceil(spec.workload.min_time_ms * 1e6 / ns), 5.0, 1e9);
        auto field = [&](const char* k) { return j.value(k, json()).is_number() ? j[k].get<double>() : 0.0; };
        c.k_bytes = field("bytes");
        c.k_flops = field("flops");
        record["kernel_iters"] = kernel_iters;
      }
      std::vector<std::pair<uint64_t, bool>> seeds;
      for (auto s : spec.workload.seeds) seeds.push_back({s, false});
      seeds.push_back({heldout_seed % (1ull << 62), true});
      for (auto [seed, held] : seeds) {
        Expected<NpyF32> out[2] = {runtime_error(""), runtime_error("")};
        for (int i = 0; i < 2; ++i) {
          Sample smp;
          ++runs_started[i];
          Status st = kernel_timed(c, sides[i], "check-" + std::to_string(seed), Draw{{}, seed, held, kernel_iters}, smp);
          if (st) out[i] = read_npy_f32(smp.out_file);
          if (st && !out[i]) st = runtime_error(std::string(sides[i].name) + " wrote an unreadable output: " + out[i].error().message);
          if (!st) {
            if (i == 0) return runtime_error(st.error().message);
            return reject_with(st.error().message);
          }
          checked[i][smp.slots[0].key] = smp.slots[0].output_sha256;
        }
        (held ? held_ag : spec_ag).add_kernel(*out[0], *out[1]);
      }
      corr_spec = spec_ag.kernel_json();
      corr_held = held_ag.kernel_json();
    } else if (spec.level == Level::kServe) {
      // Greedy texts of the same seeded prompts through both servers, at the spec's concurrency, in
      // runs shaped exactly like the timed ones (requests, gen_len).
      std::vector<std::pair<uint64_t, bool>> seeds;
      for (auto sd : spec.workload.seeds) seeds.push_back({sd, false});
      seeds.push_back({heldout_seed % (1ull << 62), true});
      double same[2] = {0, 0}, total[2] = {0, 0};
      for (auto [seed, held] : seeds) {
        json texts[2];
        for (int i = 0; i < 2; ++i) {
          ++runs_started[i];
          auto j = serve_loadtest(c, sides[i], spec.workload.requests, spec.workload.gen_len, seed, true, "correctness run");
          if (!j) {
            if (i == 0) return runtime_error(j.error().message);
            return reject_with(j.error().message);
          }
          texts[i] = (*j)["texts"];
          checked[i][(held ? "heldout:" : "spec:") + std::to_string(seed)] = sha256_hex(texts[i].dump());
        }
        for (size_t k = 0; k < texts[0].size(); ++k) {
          same[held] += k < texts[1].size() && texts[0][k] == texts[1][k];
          total[held] += 1;
        }
      }
      corr_spec = {{"greedy_match", total[0] ? same[0] / total[0] : 0.0}};
      corr_held = {{"greedy_match", total[1] ? same[1] / total[1] : 0.0}};
    } else {
      // The distribution: logits at every position of the spec's texts and held-out texts.
      std::vector<std::pair<std::string, bool>> inputs;
      const int words = std::clamp(spec.workload.prompt_len * 3 / 4, 4, 96);
      if (!spec.workload.prompts.empty())
        for (const auto& p : spec.workload.prompts) inputs.push_back({p, false});
      else
        for (auto s : spec.workload.seeds) inputs.push_back({synthetic_text(s, words), false});
      const size_t n_spec = inputs.size();
      for (size_t k = 0; k < std::min<size_t>(std::max<size_t>(n_spec, 1), 3); ++k)
        inputs.push_back({synthetic_text(heldout_seed + k, words), true});
      for (size_t k = 0; k < inputs.size(); ++k) {
        Expected<Outputs> out[2] = {runtime_error(""), runtime_error("")};
        for (int i = 0; i < 2; ++i) {
          out[i] = engine_outputs(c, sides[i], inputs[k].first,
                                  c.run_dir + "/logits-" + sides[i].name + "-" + std::to_string(k) + ".npy");
          if (!out[i]) {
            if (i == 0) return runtime_error(out[i].error().message);
            return reject_with(out[i].error().message);
          }
        }
        (inputs[k].second ? held_ag : spec_ag).add_engine(*out[0], *out[1]);
      }
      // Greedy continuations: worker runs shaped exactly like the timed ones (a warm-up request and
      // bench_repeats more, gen_len tokens each), over the spec's seeds and held-out seeds.
      std::vector<WorkerInput> todo;
      for (auto sd : spec.workload.seeds) todo.push_back(spec_input(c, sd));
      for (size_t k = 0; k < std::min<size_t>(spec.workload.seeds.size(), 3); ++k) todo.push_back(heldout_input(c, draw_rng));
      const size_t per_run = 1 + (size_t)spec.workload.bench_repeats;
      while (todo.size() % per_run) todo.push_back(heldout_input(c, draw_rng));
      double slowest = 0;
      for (size_t g = 0; g < todo.size(); g += per_run) {
        const std::vector<WorkerInput> group(todo.begin() + g, todo.begin() + g + per_run);
        WorkerRun wr[2];
        for (int i = 0; i < 2; ++i) {
          ++runs_started[i];
          wr[i] = run_worker(worker_call(c, sides[i], ""), group);
          if (!wr[i].ok) {
            const Error e = worker_error(sides[i], "correctness run", wr[i]);
            if (i == 0) return runtime_error(e.message);
            return reject_with(e.message);
          }
          for (const auto& sl : wr[i].slots) {
            checked[i][sl.key] = tokens_key(sl.tokens);
            if (i == 0) slowest = std::max(slowest, sl.lab_prefill_s + sl.lab_decode_s);
          }
        }
        for (size_t k = 0; k < group.size(); ++k) (group[k].heldout ? held_ag : spec_ag).add_greedy(wr[0].slots[k].tokens, wr[1].slots[k].tokens);
        if (wr[1].n_vocab != wr[0].n_vocab)
          return reject_with("the candidate's worker reports a vocabulary of " + std::to_string(wr[1].n_vocab) + " tokens, the baseline's " +
                             std::to_string(wr[0].n_vocab));
      }
      // From now on a request that takes 20 times the baseline's slowest checked one is a hang.
      c.request_timeout_s = std::min(spec.timeout_s, std::max(10.0, 20 * slowest));
      corr_spec = spec_ag.engine_json();
      corr_held = held_ag.engine_json();
    }
  }
  json correctness = worst_of(corr_spec, corr_held);
  correctness["spec"] = corr_spec;
  correctness["heldout"] = corr_held;
  record["correctness"] = correctness;
  if (opt.correctness_only) {
    // No timing: only the criteria that name nothing but correctness figures can be judged.
    Spec only = spec;
    std::erase_if(only.criteria, [](const Criterion& cr) { return !correctness_only(cr); });
    const Judged j = judge(only, {}, {}, correctness);
    record["criteria"] = j.criteria;
    reasons.insert(reasons.end(), j.reasons.begin(), j.reasons.end());
    return finish(j.any_fail ? "reject" : "accept");
  }

  // 4. Timing: warm-up, then ABBA pairs with a bandwidth figure before each pair; extend while
  //    a criterion is inconclusive, up to max_repeats.
  std::vector<Sample> samples[2];
  std::vector<Draw> kept_draws;  // each kept pair's inputs (engine level: rechecked below)
  std::vector<double> bw;
  const int bw_threads = spec.workload.threads > 0 ? spec.workload.threads : (int)std::thread::hardware_concurrency();
  auto one = [&](int side, const std::string& tag, bool keep, const Draw& d) -> Status {
    ++runs_started[side];
    auto r = timed_run(c, sides[side], tag, d);
    if (!r) return r.error();
    if (keep) samples[side].push_back(std::move(*r));
    return Ok{};
  };
  auto fail_side = [&](int side, const Error& e) -> Expected<json> {
    if (side == 0) return runtime_error(e.message);
    return reject_with(e.message);
  };
  // Each pair's inputs: a held-out input (fresh seed) in about a third of the places, else one of
  // the spec's; both sides get the same, neither is told which is which.
  size_t spec_next = 0;
  auto draw = [&]() {
    Draw d;
    auto next_spec = [&] { return spec.workload.seeds[spec_next++ % spec.workload.seeds.size()]; };
    if (spec.level == Level::kEngine) {
      // Input 0 is the run's warm-up. When a run has two timed inputs or more, one of them is held
      // out and one a spec input, at random places; the others are held out 1 time in 3. (All drawn
      // 1 in 3, an experiment of 5 pairs with 2 timed inputs each had fewer than 2 held-out ones about
      // 1 time in 10, and heldout_speed_differs was skipped for the memorising adversary.)
      const int n = spec.workload.bench_repeats + 1;
      std::vector<int> kind(n, -1);  // -1: drawn, 0: spec input, 1: held out
      if (n - 1 >= 2) {
        const int a = 1 + (int)(draw_rng() % (uint64_t)(n - 1));
        const int b = 1 + (a - 1 + 1 + (int)(draw_rng() % (uint64_t)(n - 2))) % (n - 1);
        kind[a] = 1;
        kind[b] = 0;
      }
      for (int i = 0; i < n; ++i) {
        const bool held = kind[i] < 0 ? draw_rng() % 3 == 0 : kind[i] == 1;
        d.inputs.push_back(held ? heldout_input(c, draw_rng) : spec_input(c, next_spec()));
      }
    } else {
      d.iters = kernel_iters;
      d.heldout = draw_rng() % 3 == 0;
      d.seed = d.heldout ? draw_rng() % (1ull << 62) : next_spec();
    }
    return d;
  };
  Agreement timed_ag;  // timed outputs against the baseline's for the same inputs
  auto add_timed = [&](const Sample& b, const Sample& cd) {
    if (spec.level == Level::kEngine) {
      for (size_t k = 0; k < b.slots.size() && k < cd.slots.size(); ++k) timed_ag.add_greedy(b.slots[k].tokens, cd.slots[k].tokens);
    } else if (spec.level == Level::kServe) {
      double same = 0;
      for (size_t k = 0; k < b.texts.size(); ++k) same += k < cd.texts.size() && b.texts[k] == cd.texts[k];
      timed_ag.greedy_same += b.texts.empty() ? 0 : same / (double)b.texts.size();
      timed_ag.greedy_n += 1;
    } else if (kernel_like(spec.level)) {
      auto x = read_npy_f32(b.out_file), y = read_npy_f32(cd.out_file);
      if (x && y) timed_ag.add_kernel(*x, *y);
      else timed_ag.max_abs = INFINITY, timed_ag.exact = 0;
    }
  };
  say("warming up");
  for (int w = 0; w < spec.warmup; ++w) {
    const Draw d = draw();
    for (int i = 0; i < 2; ++i)
      if (Status s = one(i, std::string("warmup-") + std::to_string(w) + "-" + sides[i].name, false, d); !s) return fail_side(i, s.error());
  }
  Judged judged;
  int pairs = 0;
  int target = spec.repeats;
  // A pair during which other processes used the CPUs is dropped and run again: a spin-waiting
  // thread pool loses 10-50x when a core is taken, which no statistic should have to absorb.
  // Others' load = machine CPU time over the pair minus the runs' own CPU time, per second.
  std::vector<double> others_load;
  json dropped = json::array();
  const double kBusyLimit = 0.25;  // cores' worth of other work
  while (true) {
    while (pairs < target) {
      bw.push_back(quick_bandwidth_gb_s(bw_threads));
      const int order[2] = {pairs % 2, 1 - pairs % 2};  // AB, BA, AB, ...
      const double busy0 = machine_busy_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      double own_cpu = 0;
      const Draw d = draw();
      for (int side : order) {
        if (Status s = one(side, std::string(sides[side].name) + "-" + std::to_string(pairs) + "-" + std::to_string(dropped.size()), true, d); !s)
          return fail_side(side, s.error());
        own_cpu += samples[side].back().cpu_s;
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double others = std::max(0.0, (machine_busy_seconds() - busy0 - own_cpu) / std::max(wall, 1e-3));
      if (others > kBusyLimit && (int)dropped.size() < spec.max_repeats) {
        json d = {{"others_cores", others}, {"bandwidth_gb_s", bw.back()}};
        for (int side : {0, 1}) {
          d[sides[side].name] = samples[side].back().m;
          samples[side].pop_back();
        }
        dropped.push_back(d);
        bw.pop_back();
        say("pair dropped: other processes used " + fmt(others, 2) + " cores during it; waiting for quiet");
        const auto w0 = std::chrono::steady_clock::now();
        while (measure_load(0.5).busy_cores > 0.5 &&
               std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() < opt.quiet_wait_s) {
        }
        continue;
      }
      others_load.push_back(others);
      kept_draws.push_back(d);
      add_timed(samples[0].back(), samples[1].back());
      ++pairs;
      say("pair " + std::to_string(pairs) + "/" + std::to_string(target) + " done");
    }
    judged = judge(spec, figures(samples[0]), figures(samples[1]), correctness);
    if (!judged.any_inconclusive || judged.any_fail || pairs >= spec.max_repeats) break;
    target = std::min(spec.max_repeats, pairs + 2);
    say("inconclusive after " + std::to_string(pairs) + " pairs: adding pairs (cap " + std::to_string(spec.max_repeats) + ")");
  }

  // 4a. A timed input the sides answered differently that no checked run has seen (a held-out
  //     input drawn for timing): both sides run that pair's inputs again, untimed and shaped as
  //     the timed run, so trust can tell the candidate's numerics (its checked answer differs
  //     too: the correctness criteria judge it) from an answer changed only while timed. Without
  //     this, a candidate with slightly different numerics whose checked answers happened to match
  //     the baseline's was rejected as timed_outputs_differ (an int8 KV cache, 2026-12-07). Only a
  //     candidate whose checked logits differ from the baseline's has numerics to show: one whose
  //     logits were the baseline's bits cannot differ on a fresh input by rounding, so no recheck
  //     may excuse it (it could answer honestly in its first runs and cheat in every later one).
  // (Where the checked answers already differ, trust does not compare with the baseline's.)
  const bool numerics_differ = corr_spec.value("max_abs_logit_diff", 0.0) > 0 || corr_held.value("max_abs_logit_diff", 0.0) > 0;
  const bool answers_agreed = corr_spec.value("greedy_match", 0.0) == 1 && corr_held.value("greedy_match", 0.0) == 1;
  if (spec.level == Level::kEngine && numerics_differ && answers_agreed) {
    int rechecks = 0;
    for (size_t p = 0; p < kept_draws.size() && p < samples[0].size() && p < samples[1].size() && rechecks < 3; ++p) {
      const auto &sb = samples[0][p].slots, &sc = samples[1][p].slots;
      bool fresh_diff = false;
      for (size_t k = 0; k < sb.size() && k < sc.size(); ++k)
        fresh_diff |= sb[k].tokens != sc[k].tokens && !(checked[0].count(sc[k].key) && checked[1].count(sc[k].key));
      if (!fresh_diff) continue;
      ++rechecks;
      say("rechecking pair " + std::to_string(p + 1) + "'s inputs untimed: the sides' timed answers differ on an unchecked input");
      for (int i = 0; i < 2; ++i) {
        ++runs_started[i];
        const WorkerRun wr = run_worker(worker_call(c, sides[i], ""), kept_draws[p].inputs);
        if (!wr.ok) return fail_side(i, worker_error(sides[i], "recheck run", wr));
        for (const auto& sl : wr.slots) checked[i].emplace(sl.key, tokens_key(sl.tokens));
      }
    }
  }

  // 4b. Trust (docs/lab.md, "A lab an agent cannot fool"): the timed outputs against the checked
  //     ones and the baseline's, the self-reports against the lab's clock, the held-out inputs'
  //     speed against the spec's, and the CPU the candidate used.
  std::vector<TrustCheck> trust;
  const Judged on_checked = judged;  // the criteria on the checked outputs alone
  {
    json timed = json::object();
    if (spec.level == Level::kEngine) {
      const json e = timed_ag.engine_json();
      timed = {{"greedy_match", e["greedy_match"]}, {"first_divergence", e["first_divergence"]}};
    } else if (spec.level == Level::kServe) {
      timed = {{"greedy_match", timed_ag.greedy_n ? timed_ag.greedy_same / timed_ag.greedy_n : 0.0}};
    } else {
      timed = timed_ag.kernel_json();
    }
    correctness["timed"] = timed;
    json flat = correctness;
    for (const char* k : {"spec", "heldout", "timed"}) flat.erase(k);
    json with_timed = worst_of(flat, timed);
    for (const char* k : {"spec", "heldout", "timed"}) with_timed[k] = correctness[k];
    const Judged before = judged;
    judged = judge(spec, figures(samples[0]), figures(samples[1]), with_timed);
    correctness = with_timed;
    record["correctness"] = correctness;
    TrustInput ti;
    for (int side = 0; side < 2; ++side)
      for (const auto& smp : samples[side]) {
        TrustRun tr{smp.slots, {}, smp.self, smp.cpu_cores};
        for (const auto& [m, v] : smp.self)
          if (smp.m.count(m)) tr.lab[m] = smp.m.at(m);
        (side ? ti.cand : ti.base).push_back(std::move(tr));
      }
    ti.checked[0] = checked[0];
    ti.checked[1] = checked[1];
    ti.checked_all_equal = !kernel_like(spec.level) ? corr_spec.value("greedy_match", 0.0) == 1 && corr_held.value("greedy_match", 0.0) == 1
                                                    : corr_spec.value("exact", 0.0) == 1 && corr_held.value("exact", 0.0) == 1;
    ti.allowed_cores = spec.level == Level::kEngine && c.work.threads > 0 ? c.work.threads : 0;
    if (spec.level == Level::kEngine) {
      // Each side's own benchmark, three back-to-back pairs (ABABAB): its figures are a self-report
      // too, compared pair by pair like the timed runs. Each figure is its own `ouro bench` call on
      // the work the lab timed (bench_args_for: prefill after the depth, decode after depth + prompt).
      say("asking both sides' `ouro bench` for their own figures of the timed work");
      json bench_j = {{"baseline", json::object()}, {"candidate", json::object()}};
      // Each bench process also prints @timed-start / @timed-end around its measured repeats: the
      // lab's clock between them gives the process's figure as the lab sees it (the median over its
      // repeats), checked against what the process prints like the worker's timestamps are. That
      // names a lying bench whatever the noise between processes. (A revision from before the
      // markers rejects the flag: its bench runs without them and only the pair check applies.)
      std::map<std::string, std::vector<double>> runs[2], lab_runs[2];
      bool no_markers[2] = {false, false};
      auto bench_pairs = [&](int from, int to) {
        for (int rep = from; rep < to; ++rep) {
          const int i = rep % 2;
          for (const std::string k : {"prefill_tok_s", "decode_tok_s"}) {
            std::vector<std::string> argv = bench_args_for(c.work, k, std::max(2, spec.workload.bench_repeats));
            if (argv.empty()) continue;
            argv.insert(argv.begin(), "bench");
            if (rep < 2) bench_j["argv"][k] = argv;
            auto args = common_args(c, sides[i]);
            argv.insert(argv.end(), args.begin(), args.end());
            std::vector<double> frames;
            ProcResult r;
            if (!no_markers[i]) {
              argv.push_back("--markers");
              r = exec_framed(c, sides[i], argv, frames);
              argv.pop_back();
              if (!r.ok() && !r.timed_out && r.signal == 0 && r.err.find("--markers") != std::string::npos) no_markers[i] = true;
            }
            if (no_markers[i] && frames.empty()) r = exec(c, sides[i], argv);
            const json j = r.ok() ? json::parse(r.out, nullptr, false) : json();
            if (!r.ok()) bench_j[sides[i].name]["error"] = failure_text(sides[i], "bench", r);
            if (j.is_object() && j.contains(k) && j[k].is_object() && j[k].value("median", json()).is_number()) {
              runs[i][k].push_back(j[k]["median"].get<double>());
              bench_j[sides[i].name][k] = runs[i][k];
              const json n = j.value(k == "prefill_tok_s" ? "prompt_len" : "gen_len", json());
              std::vector<double> figs;
              for (double f : frames)
                if (f > 0 && n.is_number()) figs.push_back(n.get<double>() / f);
              if (!no_markers[i]) {
                lab_runs[i][k].push_back(figs.empty() ? NAN : median(figs));
                bench_j[sides[i].name]["lab_clock"][k] = lab_runs[i][k];
              }
            }
          }
        }
      };
      bench_pairs(0, 6);
      // A bench ratio beyond the 15% floor from the lab's after three pairs is either a lie or
      // noise: three pairs more decide it (the tolerance shrinks with the pairs). An honest bench
      // rarely gets there, so this costs nothing then. (With three pairs only, a 1.3x bench lie went
      // unnamed in one CI run of the adversarial set: decode pairs swung by +-8% on this host and
      // the tolerance was 21-25%, 2026-12-06.)
      bool unsure = false;
      for (const auto& [k, bc] : runs[1]) {
        if (!runs[0].count(k) || runs[0].at(k).size() != bc.size() || bc.size() < 2) continue;
        std::vector<double> bl, ll;
        for (size_t p = 0; p < bc.size(); ++p)
          if (runs[0].at(k)[p] > 0 && bc[p] > 0) bl.push_back(std::log(bc[p] / runs[0].at(k)[p]));
        for (size_t p = 0; p < samples[0].size() && p < samples[1].size(); ++p)
          if (samples[0][p].m.count(k) && samples[1][p].m.count(k) && samples[0][p].m.at(k) > 0 && samples[1][p].m.at(k) > 0)
            ll.push_back(std::log(samples[1][p].m.at(k) / samples[0][p].m.at(k)));
        unsure |= !bl.empty() && !ll.empty() && std::fabs(median(bl) - median(ll)) > 0.15;
      }
      if (unsure) {
        say("the bench figures disagree with the lab's clock by more than 15%: three more bench pairs");
        bench_pairs(6, 12);
      }
      for (int i = 0; i < 2; ++i)
        for (const auto& [k, v] : runs[i])
          if (runs[1 - i].count(k) && runs[1 - i].at(k).size() == v.size()) {
            ti.bench_self[i][k] = v;
            if (lab_runs[i][k].size() == v.size()) ti.bench_lab[i][k] = lab_runs[i][k];
          }
      record["bench_self_report"] = bench_j;
    }
    trust = check_trust(ti);
    // Correctness criteria that held on the checked outputs but not with the timed ones.
    for (size_t k = 0; k < judged.criteria.size() && k < before.criteria.size(); ++k)
      if (judged.criteria[k]["verdict"] == "fail" && before.criteria[k]["verdict"] != "fail")
        for (auto& t : trust)
          if (t.code == "timed_outputs_differ") {
            t.verdict = "fail";
            t.detail += "; with the timed outputs counted, " + judged.criteria[k]["expr"].get<std::string>() + " fails (it held on the checked ones)";
          }
    record["trust"] = trust_json(trust);
  }

  // 5. Statistics per metric.
  json samples_j = {{"baseline", json::object()}, {"candidate", json::object()}, {"bandwidth_gb_s", bw},
                    {"others_cores", others_load}, {"dropped_pairs", dropped}};
  json stats = json::object();
  for (const auto& m : spec.metrics) {
    std::vector<double> b, cd;
    for (const auto& s : samples[0]) b.push_back(s.m.at(m));
    for (const auto& s : samples[1]) cd.push_back(s.m.at(m));
    samples_j["baseline"][m] = b;
    samples_j["candidate"][m] = cd;
    RatioStats r = ratio_stats(b, cd, spec.min_effect);
    stats[m] = {{"baseline_median", r.baseline_median}, {"candidate_median", r.candidate_median}, {"ratio", r.ratio},
                {"ci", {r.ci_lo, r.ci_hi}}, {"ci_level", 1 - 2 * kDecisionAlpha}, {"p_value", r.p_value}, {"change", r.change},
                {"higher_is_better", higher_is_better(m)}, {"n", b.size()}};
  }
  record["samples"] = samples_j;
  record["stats"] = stats;
  record["headline"] = spec.metrics.front();
  record["pairs"] = pairs;
  if (!bw.empty()) {
    const double lo = *std::min_element(bw.begin(), bw.end()), hi = *std::max_element(bw.begin(), bw.end());
    record["bandwidth_swing"] = lo > 0 ? hi / lo - 1 : 0.0;
  }

  // 6. Attribution: the trace diff of the median runs of each side.
  if (spec.trace && !kernel_like(spec.level)) {
    auto median_run = [&](int side) -> const Sample& {
      const std::string& h = spec.metrics.front();
      std::vector<double> v;
      for (const auto& s : samples[side]) v.push_back(s.m.at(h));
      const double med = median(v);
      size_t best = 0;
      for (size_t i = 1; i < v.size(); ++i)
        if (std::fabs(v[i] - med) < std::fabs(v[best] - med)) best = i;
      return samples[side][best];
    };
    auto tb = analysis::load_trace(median_run(0).trace);
    auto tc = analysis::load_trace(median_run(1).trace);
    if (tb && tc) {
      analysis::DiffResult d = analysis::diff(*tb, *tc);
      json rows = json::array();
      const double per = 1e3 / (spec.level == Level::kEngine ? 1 + spec.workload.bench_repeats : 1);
      for (size_t i = 0; i < d.by_name.size() && rows.size() < 8; ++i) {
        const auto& r = d.by_name[i];
        rows.push_back({{"name", r.key.name}, {"cat", r.key.cat}, {"baseline_ms", r.base_s * per}, {"candidate_ms", r.cand_s * per},
                        {"delta_ms", r.delta_s * per}, {"delta_pct", r.base_s > 0 ? 100 * r.delta_s / r.base_s : 0.0}});
      }
      record["attribution"] = rows;
      record["attribution_wall_delta_ms"] = d.delta_wall_s * per;
      if (!rows.empty())
        reasons.push_back("attribution: the largest change is " + rows[0]["name"].get<std::string>() + " " +
                          pct(rows[0]["delta_pct"].get<double>() / 100) + " (" + fmt(rows[0]["delta_ms"].get<double>(), 3) +
                          " ms per run of " + fmt(d.delta_wall_s * per, 3) + " ms)");
    } else {
      reasons.push_back("attribution unavailable: " + (tb ? tc.error().message : tb.error().message));
    }
  }

  record["criteria"] = judged.criteria;
  // A correctness criterion that failed on the checked outputs (not only with the timed ones, which
  // is timed_outputs_differ's case) is the cause of a reject: its reasons come first, and a trust
  // check that fails beside it is named after it, never as the cause.
  std::vector<std::string> correctness_reasons, other_reasons;
  for (size_t k = 0; k < judged.criteria.size(); ++k) {
    if (judged.criteria[k]["verdict"] == "pass") continue;
    const std::string line = std::string(judged.criteria[k]["verdict"] == "fail" ? "criterion failed: " : "criterion inconclusive: ") +
                             judged.criteria[k]["expr"].get<std::string>() + " (" + judged.criteria[k]["detail"].get<std::string>() + ")";
    const bool failed_checked = k < on_checked.criteria.size() && on_checked.criteria[k]["verdict"] == "fail" &&
                                judged.criteria[k]["verdict"] == "fail" && k < spec.criteria.size() &&
                                correctness_only(spec.criteria[k]);
    (failed_checked ? correctness_reasons : other_reasons).push_back(line);
  }
  const bool correctness_failed = !correctness_reasons.empty();
  std::vector<std::string> all = correctness_reasons;
  all.insert(all.end(), other_reasons.begin(), other_reasons.end());
  all.insert(all.end(), reasons.begin(), reasons.end());
  reasons = all;
  std::string verdict = judged.any_fail ? "reject" : judged.any_inconclusive ? "inconclusive" : "accept";
  // A failed trust check overrides the criteria: the figures they judged cannot be believed.
  size_t after_cause = correctness_reasons.size();
  for (const auto& t : trust) {
    if (t.verdict != "fail") continue;
    if (t.baseline_at_fault) {
      if (verdict == "accept") verdict = "inconclusive";
      reasons.insert(reasons.begin(), "the baseline failed the lab's " + t.code + " check, so nothing can be judged: " + t.detail);
      ++after_cause;
      continue;
    }
    verdict = "reject";
    if (correctness_failed) {
      reasons.insert(reasons.begin() + (long)after_cause++, "the trust check " + t.code + " failed too: " + t.detail);
      continue;
    }
    if (!record.contains("rejected_for")) record["rejected_for"] = t.code;
    reasons.insert(reasons.begin(), t.code + ": " + t.detail);
    ++after_cause;
  }
  if (verdict == "accept")
    reasons.insert(reasons.begin(), "all " + std::to_string(judged.criteria.size()) + " criteria pass" +
                                        (trust.empty() ? "" : " and every trust check holds"));
  if (verdict == "inconclusive")
    reasons.push_back("still inconclusive after " + std::to_string(pairs) + " pairs (max_repeats " + std::to_string(spec.max_repeats) + ")");
  if (!quiet) reasons.push_back("the machine was busy (" + fmt(load.busy_cores, 2) + " cores in use by others)");
  if (!dropped.empty())
    reasons.push_back(std::to_string(dropped.size()) + " pair(s) dropped and rerun: other processes used the CPUs during them");
  const double worst = others_load.empty() ? 0 : *std::max_element(others_load.begin(), others_load.end());
  if (worst > kBusyLimit) reasons.push_back("some kept pairs ran with other load (up to " + fmt(worst, 2) + " cores): treat with care");
  return finish(verdict);
}

}  // namespace ouro::lab
