// `ouro lab run`: build both sides, check the machine is quiet, check correctness (spec inputs and
// held-out inputs from a fresh seed), run baseline and candidate in ABBA order with warm-up,
// extend while inconclusive, compute statistics, judge the criteria, attribute with traces, and
// produce the ledger record.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "lab/builds.h"
#include "lab/spec.h"

namespace ouro::lab {

struct RunOptions {
  BuildContext build;
  std::string out_dir;      // run folder (traces, outputs); "" = under the cache
  std::string command;      // the reference command, for the record
  std::string note;         // the proposer's note
  double quiet_wait_s = 20; // how long to wait for a quiet machine before going on (and saying so)
  bool correctness_only = false;  // stop after the correctness check: a record of kind "correctness",
                                 // judged on the criteria that name only correctness figures
  bool verbose = true;
};

// The record (not yet in the ledger: the caller appends it). Usage errors (bad spec, unknown
// revision, serve level) come back as errors; a candidate that fails to build, crashes, hangs or
// exceeds its limits gives a record with verdict "reject" and the reason. A baseline that fails
// is an error (nothing to compare against).
Expected<nlohmann::json> run_experiment(const Spec& spec, const RunOptions& opt);

// Human-readable summary of a record (the verdict, the figures, the reasons).
std::string summarize_record(const nlohmann::json& rec);

// The machine right now: busy cores (from /proc/stat over `window_s`) and the 1-minute load.
struct MachineLoad {
  double busy_cores = 0, load1 = 0;
};
MachineLoad measure_load(double window_s);
// CPU seconds spent by the whole machine so far (all CPUs, not idle or iowait), from /proc/stat.
double machine_busy_seconds();
// A quick read-bandwidth figure (GB/s), about 50 ms.
double quick_bandwidth_gb_s(int threads);

}  // namespace ouro::lab
