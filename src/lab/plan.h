// `ouro lab plan`: from a change (two revisions, or two launch configurations) to the cheapest
// experiments that would answer whether it helps: a kernel microbenchmark for a kernel's code, an
// op-level run for one op, the engine only when the change reaches beyond one kernel (threading,
// the forward pass, launch parameters). The specs are written as files a person or agent edits.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro::lab {

struct PlannedSpec {
  std::string name;   // file stem, e.g. "kernel-rmsnorm"
  std::string level;  // kernel | op | engine
  std::string why;    // which file/function/parameter led here
  std::string toml;   // the spec
};

struct Plan {
  std::vector<std::string> touched;  // files (revisions) or parameters (launch configurations)
  std::vector<std::string> kernels;  // kernels/ops the change reaches
  std::vector<PlannedSpec> specs;    // cheapest first
  std::vector<std::string> notes;    // e.g. "tokenizer: a correctness question, not a speed one"
};

// Whitespace-separated words (launch arguments as people type them, without quoting).
std::vector<std::string> split_ws(const std::string& s);

// Between two revisions of the repository (git diff BASE CAND).
Expected<Plan> plan_revisions(const std::string& repo_root, const std::string& base, const std::string& cand);
// Between two launch configurations of one revision ("-t 1" vs "-t 2"), each a whitespace-separated
// argument list.
Expected<Plan> plan_launch(const std::string& base_args, const std::string& cand_args, const std::string& revision);

}  // namespace ouro::lab
