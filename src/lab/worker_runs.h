// Engine-level runs through `ouro worker` (src/cli/cmd_worker.cpp): the lab starts the side's
// worker, sends it every input in turn and stamps each streamed token's arrival with its own clock.
// Prefill is the lab's send of a request to the first token's arrival, decode the first token's
// arrival to the last's; the worker's own timestamps are its self-report, kept beside them.
// Checked runs and timed runs are the same call (docs/lab.md, "A lab an agent cannot fool").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lab/process.h"

namespace ouro::lab {

// One request's input: prompt ids drawn from a seed, and whether the spec could know it.
struct WorkerInput {
  std::vector<int> prompt;
  std::string key;       // "spec:SEED" or "heldout:SEED": inputs with one key are one input
  bool heldout = false;
};
// `len` ids uniform in [0, n_vocab) from std::mt19937_64(seed).
std::vector<int> seeded_prompt(uint64_t seed, int len, int n_vocab);

struct WorkerCall {
  std::vector<std::string> argv;  // the side's binary, "worker", its flags
  std::map<std::string, std::string> env;
  std::string cwd;
  ProcLimits limits;              // timeout_s: for loading and for the whole run
  double request_timeout_s = 60;  // no line for this long: the worker hangs
  int gen = 16;                   // greedy tokens per request
  std::vector<int> context;       // filled untimed before each request (the spec's depth)
  int timed_from = 1;             // requests before this one are warm-up (answers still checked)
};

struct SlotResult {
  std::string key;
  bool heldout = false;
  bool timed = false;
  std::vector<int> tokens;
  double lab_prefill_s = 0, lab_decode_s = 0;    // the lab's clock
  double self_prefill_s = 0, self_decode_s = 0;  // the worker's timestamps
};

struct WorkerRun {
  bool ok = false;
  std::string failure;  // what went wrong ("crashed: killed by SIGABRT", "hung: no answer for 5 s", ...)
  bool unstable = false;  // it crashed, hung or broke the protocol (not a usage error at start)
  int n_vocab = 0;
  std::vector<SlotResult> slots;
  double cpu_cores = 0;  // CPU seconds per wall second over the timed requests
  ProcResult proc;
};

WorkerRun run_worker(const WorkerCall& call, const std::vector<WorkerInput>& inputs);

// Per-run figures from the timed slots: medians of prompt/prefill_s and (gen-1)/decode_s, on the
// lab's clock and on the worker's own.
struct RunRates {
  double prefill_tok_s = 0, decode_tok_s = 0, self_prefill_tok_s = 0, self_decode_tok_s = 0;
};
RunRates run_rates(const WorkerRun& r, int prompt_len, int gen);

}  // namespace ouro::lab
