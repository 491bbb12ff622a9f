// `ouro agent`'s proposals: the launch parameters it may change (names, ranges, which ops they
// reach), the JSON schema a proposer's reply must match, and the checks a proposal passes before
// anything runs (schema, parameter names and ranges, a diff that touches no tests, criteria or
// ledger). Everything here is pure: no processes, no files.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro::lab {

// One launch parameter the agent may change: `ouro bench` accepts it as --NAME VALUE.
struct ParamRule {
  std::string name;                 // canonical, without dashes: "threads", "kv"
  std::vector<std::string> values;  // allowed values; empty: an integer in [lo, hi]
  long long lo = 0, hi = 0;
  std::string default_value;        // what the engine uses when the flag is absent
  std::vector<std::string> ops;     // trace op names whose time it changes; empty: every op
};
// The whitelist. threads: 1..nproc; ctx: 64..131072; isa, kv, weights: their enums.
const std::vector<ParamRule>& param_rules(int nproc);
// "threads", "--threads", "-t" -> "threads"; "" when the name is not on the whitelist.
std::string canonical_param(const std::string& name);
// "" when `value` is allowed for the canonical parameter `name`, else why not.
std::string check_param(const std::string& name, const std::string& value, int nproc);

// A launch configuration: whitelisted parameters by canonical name, plus other arguments passed
// through as given (e.g. --kv-layers specs), in order.
struct LaunchParams {
  std::map<std::string, std::string> values;
  std::vector<std::string> extra;
  std::vector<std::string> to_args() const;  // {"--threads", "2", ...} then extra
  std::string text() const;                  // the same joined by spaces ("(defaults)" when empty)
  // The value in effect (the rule's default when absent).
  std::string value_of(const std::string& name, int nproc) const;
  bool operator==(const LaunchParams& o) const { return values == o.values && extra == o.extra; }
};
// Parses "-t 1 --kv int8" (as --base-args gives it). Whitelisted flags are checked against their
// ranges; -m/--model is refused (the workload names the model). Errors name `flag`.
Expected<LaunchParams> parse_launch_args(const std::string& text, const std::string& flag, int nproc);

struct Proposal {
  std::string hypothesis, level, expected_effect, diff;
  std::map<std::string, std::string> params;  // canonical name -> value
  nlohmann::json raw;                         // the reply as parsed
};

// The JSON schema sent as response_format (name "ouro_proposal").
nlohmann::json proposal_schema(int nproc);
// Parses a proposer's reply: valid JSON, the schema's fields and types, whitelisted parameter
// names and ranges, a non-blank diff when one is given. The error text is meant for the proposer.
Expected<Proposal> parse_proposal(const std::string& text, int nproc);

// Every path a unified diff touches (both sides of ---/+++ and diff --git lines, renames and
// copies), without a/ b/ prefixes; an error for a diff with no file headers or a path that is
// absolute or climbs out with "..".
Expected<std::vector<std::string>> diff_paths(const std::string& diff);
// The first path under tests/ or experiments/criteria/, or experiments/ledger.jsonl; "" when none.
std::string protected_path(const std::vector<std::string>& paths);

}  // namespace ouro::lab
