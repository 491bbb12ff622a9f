// `ouro agent --policy tune`: a coordinate search over launch parameters that the trace decides
// the order of. Each parameter is ranked by the share of traced time in the ops it reaches
// (threads: every op; kv: attention and the KV write; weights and isa: the matmuls), and each
// parameter's values are ordered by what the ops' roofline verdicts suggest (a memory-bound
// attention tries the smallest KV type first; a run that mostly waits tries fewer threads first).
// Every try is one experiment of the current best against it changed in one parameter; a kept
// change settles that parameter; an inconclusive try is repeated once with twice the pairs. With d parameters of n_i values it measures at most
// 1 + sum(n_i - 1) configurations where a sweep measures prod(n_i).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "agent/agent_proposal.h"

namespace ouro::lab {

struct TuneSpace {
  std::vector<std::pair<std::string, std::vector<std::string>>> dims;  // canonical name -> values
  size_t configurations() const;  // the exhaustive sweep's size
  std::string text() const;       // "threads=1,2 kv=f32,int8"
};

// From repeated --space NAME=v1,v2 flags (each value checked against the whitelist); empty
// `flags` gives the default space: threads {1, nproc/2, nproc}, kv {f32, bf16, int8}, weights
// {native, w8a8}.
Expected<TuneSpace> parse_space(const std::vector<std::string>& flags, int nproc);

struct TuneTry {
  std::string param, value;
  std::string why;  // the share and verdict that ranked it
  int attempt = 0;  // 1: a retry of an inconclusive try (with twice the pairs)
};

class TunePolicy {
 public:
  // summary: `ouro trace summarize --json` of the starting configuration (may be empty JSON:
  // then the space's order is kept).
  TunePolicy(TuneSpace space, const nlohmann::json& summary, int nproc);
  // The next (parameter, value) to try against `current`; nullopt when nothing is left.
  std::optional<TuneTry> next(const LaunchParams& current);
  // After a try (its verdict): a kept change settles its parameter; an inconclusive try is tried
  // once more, next, with twice the pairs (noise, not the change, may have decided it).
  void feedback(const TuneTry& t, const std::string& verdict);
  // "threads: 100% of traced time (every op)", ... in rank order, for the account.
  const std::vector<std::string>& ranking() const { return ranking_; }

 private:
  std::vector<TuneTry> queue_;
  std::vector<std::string> settled_, ranking_;
  int nproc_;
};

}  // namespace ouro::lab
