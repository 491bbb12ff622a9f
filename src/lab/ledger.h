// The lab's ledger: experiments/ledger.jsonl, one experiment record (a JSON object) per line,
// append-only and hash-chained so that an edited, deleted, reordered or truncated record is
// detected (`ouro lab verify`).
//
// Chain rule, checkable by any tool (tests/lab/test_report.py re-derives it with Python):
//   record n has seq = n, id = "E" + seq zero-padded to 4 digits, prev = hash of record n-1 (64 '0's
//   for the first), and hash = SHA-256 of the record's compact JSON with the "hash" key removed and
//   keys sorted (nlohmann's dump(); Python: json.dumps(sort_keys=True, separators=(',', ':'),
//   ensure_ascii=False) for the strings and simple numbers records hold).
//
// Records are written by the runner and read back by humans and tools, so every reader here
// tolerates missing or wrongly-typed fields: they print "-" or skip, never throw.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro::lab {

inline const std::string kGenesisPrev(64, '0');

// Appends `rec` to the ledger at `path` (parent directories and the file are created). Sets seq,
// id, prev, time (when absent) and hash; returns the record as written. The file is locked while
// appending (flock), the line is written with O_APPEND and fsync'd. Refuses when the existing
// file fails verification (the chain checks; plus the committed-prefix check when repo_root is
// given), so a damaged ledger is never extended silently.
Expected<nlohmann::json> append_record(const std::string& path, nlohmann::json rec, const std::string& repo_root = "");

// All records in file order. A missing file is an empty ledger; a line that is not a JSON object
// is an error naming the file and line number. Hashes are not checked here (see verify_ledger).
Expected<std::vector<nlohmann::json>> read_ledger(const std::string& path);

struct VerifyResult {
  size_t records = 0;                  // lines that parsed as JSON objects
  std::vector<std::string> problems;  // each names the line (and id) and what is wrong
  bool ok() const { return problems.empty(); }
};

// Recomputes every hash and checks seq continuity, id, prev chaining and unparsable lines. When
// repo_root is non-empty, inside a git work tree, and HEAD holds a committed version of the ledger,
// the committed file must be a prefix of the current one (committed records were not edited,
// deleted or truncated away). Without git, or outside a repository, that check is skipped.
VerifyResult verify_ledger(const std::string& path, const std::string& repo_root);

// The hash a record should carry: SHA-256 of its dump() without the "hash" key.
std::string record_hash(const nlohmann::json& rec);

// Looks a record up by exact id ("E0007", case-insensitive), by seq ("7", "E7"), or by a unique
// prefix of its hash (at least 6 hex digits). A digit string that is no record's seq is tried as a
// hash prefix. Not found: runtime error; ambiguous prefix or malformed reference: usage error.
Expected<nlohmann::json> find_record(const std::vector<nlohmann::json>& records, const std::string& ref);

// One line per record for `ouro lab log`: id, date, verdict, level, a metric's ratio with its CI
// (the headline, or `metric` when given and present), and the question (truncated).
std::string log_line(const nlohmann::json& rec, const std::string& metric = "");
// A readable multi-line account of a record for `ouro lab show` (ends with a newline).
std::string show_record(const nlohmann::json& rec);

// The git top level of `dir` (`git -C dir rev-parse --show-toplevel`); nullopt when `dir` is not
// in a work tree or git is not installed. Runs git without a shell, so paths need no quoting.
std::optional<std::string> git_toplevel(const std::string& dir);

// ---- tolerant field access (never throw; shared with report.cpp) ----------------------------
// The member `key` of `j` when `j` is an object holding it with the right type, else nullptr/"".
const nlohmann::json* jobj(const nlohmann::json& j, const char* key);
const nlohmann::json* jarr(const nlohmann::json& j, const char* key);
std::optional<double> jnum(const nlohmann::json& j, const char* key);
// A string member as is; a number or bool member as its JSON text; anything else "".
std::string jstr(const nlohmann::json& j, const char* key);
// Numbers of an array member, skipping non-numbers.
std::vector<double> jnums(const nlohmann::json& j, const char* key);
// The record's headline metric: "headline" if it names a metric in "stats", else decode_tok_s,
// prefill_tok_s, ns_per_op, then the first metric in stats; "" when there are no stats.
std::string headline_metric(const nlohmann::json& rec);
// The interval a record's statistics of one metric carry, by the name of the rule that computed
// it: "99% trimmed-mean t" (the paired ratio's interval the verdict used, with its level) when the
// record has "ci_level", else "95% bootstrap" (the lab's rule before 2026-12-04, which stored no
// level). `long_form` says what the interval is of.
std::string interval_name(const nlohmann::json& metric_stats, bool long_form = false);
// Compact JSON text that never throws (invalid UTF-8 is replaced).
std::string safe_dump(const nlohmann::json& j, int indent = -1);

}  // namespace ouro::lab
