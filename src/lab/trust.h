// The lab's trust checks (docs/lab.md, "A lab an agent cannot fool"): after the timed pairs, before
// any criterion may accept, each of these must hold. A failing one rejects the candidate with its
// code as the reason:
//   measurement_mismatch   the candidate's self-reported figures (its worker's timestamps, its
//                          microbench's samples, its own `ouro bench`) disagree with the lab's
//                          clock beyond the disagreement measured on the baseline
//   timed_outputs_differ   a timed run's outputs are not the outputs checked for the same input
//                          (its own, or the baseline's where the checked outputs agreed)
//   heldout_speed_differs  faster against the baseline on the spec's inputs than on held-out inputs
//                          from the same distribution (memorised or special-cased inputs)
//   cpu_overuse            more CPU per second than the spec's threads allow
// (`unstable`, a crash or hang in any run, is decided by the runner as it happens.)
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ouro::lab {

struct TrustSlot {
  std::string key;                   // the input (same key: same input)
  bool heldout = false;
  std::vector<int> tokens;           // engine: greedy ids (empty at kernel level)
  std::string output_sha256;         // kernel: the timed run's output file ("" at engine level)
  std::map<std::string, double> lab; // figures on the lab's clock (higher is better unless named ns_*)
};

struct TrustRun {
  std::vector<TrustSlot> slots;             // the timed ones
  std::map<std::string, double> lab, self;  // the run's figures: the lab's clock and the self-report
  double cpu_cores = 0;                     // CPU seconds per wall second while timed (0: unknown)
};

struct TrustInput {
  std::vector<TrustRun> base, cand;  // pairs: base[i] and cand[i] ran the same inputs
  // Outputs of the checked runs by input key, per side (tokens joined, or the output's SHA-256).
  std::map<std::string, std::string> checked[2];
  bool checked_all_equal = false;  // the candidate's checked outputs equal the baseline's on every input
  double allowed_cores = 0;        // 0: no CPU check
  // `ouro bench --json` figures of each side (empty: not asked), run k of both sides back to back.
  std::map<std::string, std::vector<double>> bench_self[2];
  // The same processes' figures on the lab's clock between their markers (NaN: no markers).
  std::map<std::string, std::vector<double>> bench_lab[2];
};

struct TrustCheck {
  std::string code;     // measurement_mismatch, timed_outputs_differ, heldout_speed_differs, cpu_overuse
  std::string verdict;  // pass, fail, skipped
  std::string detail;   // what was compared, in words a person reads
  bool baseline_at_fault = false;  // the baseline itself broke the check (the run cannot be judged)
};

// The output key of a token sequence (what TrustInput::checked holds at engine level).
std::string tokens_key(const std::vector<int>& t);
std::vector<TrustCheck> check_trust(const TrustInput& in);
nlohmann::json trust_json(const std::vector<TrustCheck>& checks);

}  // namespace ouro::lab
