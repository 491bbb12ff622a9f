// Judging a spec's criteria on the paired samples (docs/lab.md, "What a run does", step 7): each
// criterion at the point figures and at every corner of the 99% confidence box of the baseline's
// typical value and the paired ratio; pass, fail or inconclusive, with the detail in words.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/spec.h"

namespace ouro::lab {

struct Judged {
  nlohmann::json criteria = nlohmann::json::array();
  std::vector<std::string> reasons;
  bool any_fail = false, any_inconclusive = false;
};

// base[i] and cand[i]: the figures of pair i. `correctness` holds the correctness figures (and its
// "spec" / "heldout" / "timed" parts) that `correctness.NAME` criteria read.
Judged judge(const Spec& spec, const std::vector<std::map<std::string, double>>& base,
             const std::vector<std::map<std::string, double>>& cand, const nlohmann::json& correctness);

// For an inconclusive criterion: roughly how many pairs would decide it at the noise measured so far.
std::string pairs_to_decide(size_t pairs, double point, double lo, double hi);

}  // namespace ouro::lab
