// An experiment spec (TOML, docs/lab.md): one question, a baseline and a candidate, a workload,
// the metrics to collect and the criteria that decide it, written before anything runs.
// Parsing checks everything that can be checked without running: unknown keys, wrong types,
// out-of-range numbers, metric and correctness names, criteria syntax, criteria files.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "lab/expr.h"

namespace ouro::lab {

enum class Level { kKernel, kOp, kEngine, kServe };
const char* level_name(Level l);

struct Side {
  std::string revision = "worktree";  // a git revision, or "worktree": the checkout as it is
  std::vector<std::string> build;     // CMake options, e.g. "-DOURO_NO_TRACE=ON"
  std::vector<std::string> args;      // launch arguments added to every run
  std::map<std::string, std::string> env;
};

struct Workload {
  std::string model;  // engine/op levels; empty: the default model
  // engine: synthetic prompt shape (random token ids from each seed) and/or prompt texts
  int prompt_len = 128;
  int gen_len = 32;
  int batch = 1;
  std::vector<std::string> prompts;  // texts (inline or read from prompts_file)
  std::string prompts_file;
  std::vector<unsigned long long> seeds{1};
  int threads = 0;  // 0: the engine's default
  int bench_repeats = 1;  // repeats inside one bench process (the run's sample is their median)
  int depth = 0;          // engine: tokens already cached before each pp/tg measurement (bench --depth)
  // kernel/op: `ouro microbench KERNEL ARGS...`
  std::string kernel;
  std::vector<std::string> kernel_args;
  double min_time_ms = 100;
  int greedy_tokens = 16;  // engine correctness: greedy continuation length
  // serve: `ouro loadtest --concurrency C --requests N` against each side's `ouro serve`
  int concurrency = 8;
  int requests = 32;
};

struct Criterion {
  std::string text;
  std::string source;  // "inline" or "file:NAME"
  std::shared_ptr<Expr> expr;
};

struct Spec {
  std::string path;  // as given ("" when parsed from text)
  std::string toml;  // the file's text, kept for the record and for reruns
  std::string question, hypothesis, note;
  Level level = Level::kEngine;
  Side baseline, candidate;
  Workload workload;
  std::vector<std::string> metrics;  // explicit + those the criteria use
  std::vector<Criterion> criteria;
  std::string criteria_name;         // experiments/criteria/NAME.toml, when named
  std::string criteria_sha256;       // of that file's bytes
  int repeats = 5;                   // ABBA pairs before looking at the verdict
  int max_repeats = 0;               // cap when inconclusive (0: 3 x repeats, at most 60)
  int warmup = 1;                    // unrecorded runs of each side before the pairs
  double timeout_s = 300;            // per run
  double memory_mib = 8192;          // per run (address space)
  double min_effect = 0.02;          // smaller relative changes count as "no change"
  bool trace = false;
};

// Metric names a level can collect, and whether higher is better. Span metrics "span.OP" (ms of OP
// per run, from the trace) need trace = true.
bool known_metric(Level l, const std::string& name);
bool higher_is_better(const std::string& metric);
std::vector<std::string> level_metrics(Level l);
// Correctness figures a level reports (correctness.NAME, correctness.spec.NAME, correctness.heldout.NAME).
std::vector<std::string> correctness_names(Level l);
bool correctness_higher_is_better(const std::string& name);

// repo_root: where experiments/criteria/ lives. Errors are usage errors naming the file, the key and
// (for TOML syntax) the line.
Expected<Spec> parse_spec_file(const std::string& path, const std::string& repo_root);
Expected<Spec> parse_spec_text(const std::string& text, const std::string& source, const std::string& repo_root);
nlohmann::json spec_to_json(const Spec& s);

}  // namespace ouro::lab
