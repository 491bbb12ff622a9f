// The rules `ouro mcp` enforces before any tool runs: arguments against the tool's input schema,
// and the criteria rule (criteria belong to people; the ledger belongs to the lab).
#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "agent/mcp.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ouro::lab {

namespace {

ToolResult fail(const std::string& msg) { return {msg, json::object(), true}; }

std::string criteria_dir(const McpConfig& cfg) { return cfg.repo_root + "/experiments/criteria"; }

std::vector<std::string> criteria_names(const McpConfig& cfg) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(criteria_dir(cfg), ec))
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool under(const fs::path& p, const fs::path& dir) {
  auto d = dir.begin(), e = dir.end();
  auto i = p.begin();
  for (; d != e; ++d, ++i)
    if (i == p.end() || *i != *d) return false;
  return true;
}

// Names of arguments no tool takes because they would hand the caller what belongs to people or
// to the lab: the criteria and the ledger.
const char* forbidden_reason(const std::string& key) {
  if (key == "ledger" || key == "ledger_path" || key == "no_ledger")
    return "the ledger is written only by the lab itself, to the ledger chosen by whoever started `ouro mcp` (--ledger); "
           "no tool argument can name or change it";
  if (key == "criteria" || key == "criteria_file" || key == "criteria_path" || key == "criteria_text")
    return "criteria belong to people: a spec names a criteria_file in experiments/criteria/; tools never pass their own "
           "criteria or edit the files";
  if (key == "out_dir" || key == "output" || key == "out")
    return "tools choose where they write (the server's state folder); no argument can direct output elsewhere";
  return nullptr;
}

std::string check_strings(const json& v, const std::string& where, const McpConfig& cfg) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it)
      if (auto m = check_strings(it.value(), where + "." + it.key(), cfg); !m.empty()) return m;
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i)
      if (auto m = check_strings(v[i], where + "[" + std::to_string(i) + "]", cfg); !m.empty()) return m;
  } else if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.empty() || s.size() > 4096 || s.find('\n') != std::string::npos) return "";  // texts (spec_toml), not paths
    if (s.rfind("--", 0) == 0 && s.find('=') != std::string::npos) s = s.substr(s.find('=') + 1);  // --flag=PATH
    if (s.empty()) return "";
    std::error_code ec;
    fs::path p = s[0] == '/' ? fs::path(s) : fs::path(cfg.repo_root) / s;
    p = fs::weakly_canonical(p, ec).lexically_normal();
    const fs::path crit = fs::weakly_canonical(criteria_dir(cfg), ec);
    const fs::path ledger = fs::weakly_canonical(cfg.ledger, ec);
    const fs::path repo_ledger = fs::weakly_canonical(cfg.repo_root + "/experiments/ledger.jsonl", ec);
    if ((!p.empty() && !crit.empty() && under(p, crit)) || s.find("experiments/criteria") != std::string::npos)
      return "refused: argument " + where + " names " + s +
             ", inside experiments/criteria/. Criteria belong to people: tools read them (through specs) and never write "
             "them or pass them as files";
    if (p == ledger || p == repo_ledger || fs::path(s).filename() == ledger.filename())
      return "refused: argument " + where + " names the ledger (" + s +
             "). Only the lab appends to it, through lab_submit; read it with lab_log and lab_show";
  }
  return "";
}

}  // namespace

// Reads the spec (spec_path or spec_toml), enforces the criteria rule, and parses it with the lab's
// own parser. On failure `out` holds the tool's error result.
bool load_spec(const json& args, const McpConfig& cfg, std::string& text, Spec& spec, ToolResult& out) {
  const bool has_path = args.contains("spec_path"), has_toml = args.contains("spec_toml");
  if (has_path == has_toml) {
    out = fail("give the spec as spec_path (a TOML file) or spec_toml (its text), one of them");
    return false;
  }
  std::string source = "(spec_toml)";
  if (has_path) {
    std::string p = args["spec_path"].get<std::string>();
    if (!p.empty() && p[0] != '/') p = cfg.repo_root + "/" + p;
    std::ifstream in(p, std::ios::binary);
    if (!in || fs::is_directory(p)) {
      out = fail("spec_path: cannot read " + p);
      return false;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    source = p;
  } else {
    text = args["spec_toml"].get<std::string>();
  }
  toml::table tbl;
  bool parsed = true;
  try {
    tbl = toml::parse(text, source);
  } catch (const toml::parse_error&) {
    parsed = false;  // the lab's parser names the line below
  }
  if (parsed) {
    std::string names;
    for (const auto& n : criteria_names(cfg)) names += (names.empty() ? "" : ", ") + n;
    if (tbl.contains("criteria")) {
      out = fail("refused: the spec carries its own criteria (criteria = [...]). Criteria belong to people: name a file "
                 "in experiments/criteria/ with criteria_file = \"NAME\" (available: " + names + ")");
      return false;
    }
    const auto cf = tbl["criteria_file"].value<std::string>();
    if (!cf) {
      out = fail("refused: the spec names no criteria_file. Criteria belong to people: the spec must be judged by a file "
                 "in experiments/criteria/ (available: " + names + ")");
      return false;
    }
    if (cf->find('/') != std::string::npos || cf->find("..") != std::string::npos || !fs::exists(criteria_dir(cfg) + "/" + *cf + ".toml")) {
      out = fail("refused: criteria_file '" + *cf + "' is not a file in experiments/criteria/. Criteria belong to people: "
                 "tools cannot create them; ask a person, or use one of: " + names);
      return false;
    }
  }
  auto s = parse_spec_text(text, source, cfg.repo_root);
  if (!s) {
    out = fail("invalid spec: " + s.error().message);
    return false;
  }
  spec = *s;
  return true;
}


std::string refusal_for(const json& args, const McpConfig& cfg) {
  for (auto it = args.begin(); it != args.end(); ++it)
    if (const char* why = forbidden_reason(it.key())) return "refused: argument '" + it.key() + "': " + why;
  return check_strings(args, "arguments", cfg);
}

std::string check_arguments(const json& schema, const json& args) {
  const json& props = schema["properties"];
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!props.contains(it.key())) {
      std::string names;
      for (auto p = props.begin(); p != props.end(); ++p) names += (names.empty() ? "" : ", ") + p.key();
      return "unknown argument '" + it.key() + "' (this tool takes: " + (names.empty() ? "nothing" : names) + ")";
    }
    const json& ps = props[it.key()];
    const std::string type = ps.value("type", "");
    const json& v = it.value();
    bool ok = type == "string"    ? v.is_string()
              : type == "boolean" ? v.is_boolean()
              : type == "integer" ? v.is_number_integer()
              : type == "number"  ? v.is_number()
              : type == "array"   ? v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); })
                                  : true;
    if (!ok) return "argument '" + it.key() + "' must be " + (type == "array" ? "an array of strings" : type == "integer" ? "an integer" : "a " + type);
    if (type == "integer") {
      const long long n = v.is_number_unsigned() && v.get<unsigned long long>() > (unsigned long long)LLONG_MAX ? LLONG_MAX : v.get<long long>();
      if (n < ps.value("minimum", LLONG_MIN) || n > ps.value("maximum", LLONG_MAX))
        return "argument '" + it.key() + "' must be between " + ps["minimum"].dump() + " and " + ps["maximum"].dump();
    }
    if (type == "string" && v.get<std::string>().find('\0') != std::string::npos) return "argument '" + it.key() + "' holds a NUL byte";
  }
  for (const auto& r : schema.value("required", json::array()))
    if (!args.contains(r.get<std::string>())) return "missing required argument '" + r.get<std::string>() + "'";
  return "";
}

}  // namespace ouro::lab
