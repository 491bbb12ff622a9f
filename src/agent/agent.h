// `ouro agent`: the loop that proposes, tests and learns (docs/agents.md).
//
//   1. context   — the probe's ceilings, a traced bench of the current configuration, its top ops
//                  with roofline verdicts, and the ledger's recent records on the same ops or
//                  parameters (rejected ones with their reasons);
//   2. propose   — an OpenAI-compatible model (reply constrained by a JSON schema) or the built-in
//                  `tune` policy (agent_tune.h);
//   3. validate  — schema, parameter whitelist and ranges, a diff that applies to HEAD and touches
//                  no tests, criteria or ledger; refused proposals never run;
//   4. route     — `lab plan` picks the cheapest level the criteria file allows, the agent writes
//                  the spec (criteria_file = the person's criteria, never inline criteria);
//   5. run       — `ouro lab run SPEC --json --ledger L` as a child process; its record is the
//                  step's ledger record; the verdict, reasons, attribution and correctness go
//                  back to the proposer;
//   6. repeat    — until the budget of steps is spent or a --target is met; then an account
//                  (tried, kept, learned) is printed and recorded.
// Diff candidates live on branches agent/<run>-<step> made in worktrees under the cache; accepted
// ones are offered for merge, never merged.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "agent/agent_llm.h"
#include "agent/agent_proposal.h"
#include "agent/agent_tune.h"

namespace ouro::lab {

struct AgentWorkload {
  std::string model;  // "" = the engine's default (OURO_MODEL or the shipped model)
  int prompt_len = 128, gen_len = 32, depth = 0;
  int repeats = 5;        // ABBA pairs per experiment
  int bench_repeats = 1;  // repeats inside one bench process
};

struct AgentOptions {
  std::string goal;
  // The person's criteria file (experiments/criteria/NAME.toml): read, hashed, named by every spec.
  std::string criteria_name, criteria_text, criteria_sha256;
  std::vector<std::string> criteria_levels;
  bool tune = false;  // --policy tune; otherwise --llm
  ChatEndpoint llm;
  TuneSpace space;
  int budget = 4;  // steps: each proposal (run, refused or skipped) uses one
  std::vector<std::pair<std::string, double>> targets;  // --target METRIC=VALUE: stop when a kept config reaches it
  std::string self_bin;  // this ouro: probe, bench, trace summarize and lab run are its subcommands
  std::string lab_bin;   // --bin for `lab run` ("" = build the checkout)
  std::string ledger;    // where the records go
  std::string repo_root;
  std::string work_dir;  // this run's folder (specs, traces, worktrees)
  std::string run_id;
  LaunchParams base;
  AgentWorkload workload;
  double quiet_wait_s = 20;
  int nproc = 1;
};

// What the proposer is told before the first proposal.
struct AgentContext {
  nlohmann::json probe;        // `ouro probe --json`
  nlohmann::json bench;        // `ouro bench --json` of the current configuration
  nlohmann::json summary;      // `ouro trace summarize --json` of its trace
  std::vector<nlohmann::json> related;  // recent ledger records on the same ops/parameters (short form)
  std::string text;            // all of it, as the prompt shows it
};
Expected<AgentContext> gather_context(const AgentOptions& o, const LaunchParams& current);

// Runs the loop; returns the account record as appended to the ledger.
Expected<nlohmann::json> run_agent(const AgentOptions& o);

// The account's readable form (what `ouro agent` prints without --json).
std::string account_text(const nlohmann::json& account);

}  // namespace ouro::lab
