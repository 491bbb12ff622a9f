// Measurement identity: two `lab run` requests that would measure the same thing (same resolved
// revisions and binaries, options, workload, repeats, metrics, criteria and criteria file) share a
// measurement key, so the second returns the stored record instead of re-rolling the dice
// (docs/lab.md, "Identical requests"). The question, hypothesis and note are not part of it.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "lab/builds.h"
#include "lab/spec.h"

namespace ouro::lab {

// SHA-256 of the canonical JSON (sorted keys, compact) of everything that decides a measurement.
// Resolves revisions (and the working tree's diff) with git, builds nothing; a "worktree" side run
// from a given binary (--bin, or --no-build) is identified by that binary's SHA-256 instead.
Expected<std::string> measurement_key(const Spec& spec, const BuildContext& ctx);

// The newest measured record ("kind": "run") carrying `key`, and the ids of all that carry it.
struct StoredMeasurement {
  nlohmann::json record;
  std::vector<std::string> ids;  // oldest first
};
std::optional<StoredMeasurement> find_measurement(const std::vector<nlohmann::json>& records, const std::string& key);

// SHA-256 of a file's bytes ("" when it cannot be read).
std::string file_sha256(const std::string& path);

}  // namespace ouro::lab
