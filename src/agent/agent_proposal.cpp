#include "agent/agent_proposal.h"
#include "lab/plan.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>

namespace ouro::lab {

using nlohmann::json;

namespace {

const ParamRule* find_rule(const std::string& canonical, int nproc) {
  for (const auto& r : param_rules(nproc))
    if (r.name == canonical) return &r;
  return nullptr;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

const std::vector<ParamRule>& param_rules(int nproc) {
  // Built per call site's nproc; the machine's CPU count does not change within a run.
  static std::map<int, std::vector<ParamRule>> cache;
  auto it = cache.find(nproc);
  if (it != cache.end()) return it->second;
  const std::vector<std::string> matmuls = {"qkv", "attn_out", "gate_up", "down", "lm_head"};
  std::vector<ParamRule> r = {
      {"threads", {}, 1, std::max(1, nproc), std::to_string(std::max(1, nproc)), {}},
      {"kv", {"f32", "bf16", "fp8", "int8"}, 0, 0, "f32", {"attention", "rope_kv"}},
      {"weights", {"native", "w8a8"}, 0, 0, "native", matmuls},
      {"isa", {"auto", "avx512", "avx2", "scalar"}, 0, 0, "auto", matmuls},
      {"ctx", {}, 64, 131072, "", {"attention"}},
  };
  return cache.emplace(nproc, std::move(r)).first->second;
}

std::string canonical_param(const std::string& name) {
  std::string n = name;
  if (n == "-t") return "threads";
  while (!n.empty() && n[0] == '-') n.erase(0, 1);
  for (const auto& r : param_rules(1))
    if (r.name == n) return n;
  return "";
}

std::string check_param(const std::string& name, const std::string& value, int nproc) {
  const ParamRule* r = find_rule(name, nproc);
  if (!r) return "'" + name + "' is not a launch parameter the agent may change (allowed: threads, kv, weights, isa, ctx)";
  if (!r->values.empty()) {
    if (std::find(r->values.begin(), r->values.end(), value) == r->values.end())
      return name + ": '" + value + "' is not one of " + join(r->values, "|");
    return "";
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE) return name + ": '" + value + "' is not an integer";
  if (v < r->lo || v > r->hi)
    return name + ": " + value + " is out of range [" + std::to_string(r->lo) + ", " + std::to_string(r->hi) + "]";
  return "";
}

std::vector<std::string> LaunchParams::to_args() const {
  std::vector<std::string> a;
  // A fixed order (the rule table's), so equal configurations give equal command lines.
  for (const auto& r : param_rules(1)) {
    auto it = values.find(r.name);
    if (it != values.end()) a.insert(a.end(), {"--" + r.name, it->second});
  }
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string LaunchParams::text() const {
  const auto a = to_args();
  return a.empty() ? "(defaults)" : join(a, " ");
}

std::string LaunchParams::value_of(const std::string& name, int nproc) const {
  auto it = values.find(name);
  if (it != values.end()) return it->second;
  const ParamRule* r = find_rule(name, nproc);
  return r ? r->default_value : "";
}

Expected<LaunchParams> parse_launch_args(const std::string& text, const std::string& flag, int nproc) {
  LaunchParams p;
  const auto v = split_ws(text);
  for (size_t i = 0; i < v.size(); ++i) {
    std::string name = v[i], value;
    bool inline_value = false;
    if (auto eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (name == "-m" || name == "--model")
      return usage_error(flag + ": give the model with -m/--model, not inside the launch arguments");
    const std::string c = name.rfind("-", 0) == 0 ? canonical_param(name) : "";
    if (c.empty()) {
      p.extra.push_back(v[i]);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= v.size()) return usage_error(flag + ": " + name + " needs a value");
      value = v[++i];
    }
    if (std::string why = check_param(c, value, nproc); !why.empty()) return usage_error(flag + ": " + why);
    p.values[c] = value;
  }
  return p;
}

json proposal_schema(int nproc) {
  // Strict-mode shape (OpenAI's structured outputs): every property required, no others; a
  // parameter the proposal leaves alone is null.
  json params = {{"type", "object"}, {"additionalProperties", false}, {"properties", json::object()},
                 {"required", json::array()}};
  for (const auto& r : param_rules(nproc)) {
    json e = json::array();
    std::string type;
    if (!r.values.empty()) {
      type = "string";
      for (const auto& v : r.values) e.push_back(v);
    } else if (r.hi - r.lo < 64) {
      // An enum rather than minimum/maximum: constrained decoders (ouro serve's) support enum.
      type = "integer";
      for (long long v = r.lo; v <= r.hi; ++v) e.push_back(v);
    } else {
      // Typical sizes only (a small model fills every property it is offered); any value in the
      // range is accepted from endpoints that do not enforce the schema.
      type = "integer";
      for (long long v = 512; v <= std::min(r.hi, 32768LL); v *= 2)
        if (v >= r.lo) e.push_back(v);
    }
    e.push_back(nullptr);
    params["properties"][r.name] = {{"type", {type, "null"}}, {"enum", e}};
    params["required"].push_back(r.name);
  }
  return {{"type", "object"},
          {"additionalProperties", false},
          {"required", {"hypothesis", "level", "params", "diff", "expected_effect"}},
          {"properties",
           {{"hypothesis", {{"type", "string"}}},
            {"level", {{"type", "string"}, {"enum", {"kernel", "op", "engine", "serve"}}}},
            {"params", params},
            {"diff", {{"type", "string"}}},
            {"expected_effect", {{"type", "string"}}}}}};
}

Expected<Proposal> parse_proposal(const std::string& text, int nproc) {
  // Some endpoints wrap JSON in a Markdown fence even when asked not to; take what is inside.
  std::string body = text;
  if (auto f = body.find("```"); f != std::string::npos) {
    auto nl = body.find('\n', f);
    auto close = nl == std::string::npos ? std::string::npos : body.find("```", nl);
    if (close != std::string::npos) body = body.substr(nl + 1, close - nl - 1);
  }
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return usage_error("the reply is not valid JSON");
  if (!j.is_object()) return usage_error("the reply must be a JSON object");
  Proposal p;
  p.raw = j;
  static const std::set<std::string> known = {"hypothesis", "level", "params", "diff", "expected_effect"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) return usage_error("unknown field '" + it.key() + "' (the schema allows no other fields)");
  for (const char* k : {"hypothesis", "level", "expected_effect"}) {
    if (!j.contains(k)) return usage_error(std::string("missing required field '") + k + "'");
    if (!j[k].is_string()) return usage_error(std::string("field '") + k + "' must be a string");
  }
  p.hypothesis = j["hypothesis"].get<std::string>();
  p.level = j["level"].get<std::string>();
  p.expected_effect = j["expected_effect"].get<std::string>();
  if (p.hypothesis.find_first_not_of(" \t\n") == std::string::npos) return usage_error("field 'hypothesis' is empty");
  if (p.level != "kernel" && p.level != "op" && p.level != "engine" && p.level != "serve")
    return usage_error("field 'level': '" + p.level + "' is not one of kernel|op|engine|serve");
  if (j.contains("diff") && !j["diff"].is_null()) {
    if (!j["diff"].is_string()) return usage_error("field 'diff' must be a string (a unified diff, or empty)");
    p.diff = j["diff"].get<std::string>();
    if (p.diff.find_first_not_of(" \t\r\n") == std::string::npos) p.diff.clear();
  }
  if (j.contains("params") && !j["params"].is_null()) {
    if (!j["params"].is_object()) return usage_error("field 'params' must be an object of launch parameters");
    for (auto it = j["params"].begin(); it != j["params"].end(); ++it) {
      if (it.value().is_null()) continue;
      const std::string c = canonical_param(it.key());
      if (c.empty()) return usage_error("params: " + check_param(it.key(), "", nproc));
      std::string v;
      if (it.value().is_string()) {
        v = it.value().get<std::string>();
      } else if (it.value().is_number_integer()) {
        v = std::to_string(it.value().get<long long>());
      } else {
        return usage_error("params." + it.key() + " must be a string or an integer");
      }
      if (std::string why = check_param(c, v, nproc); !why.empty()) return usage_error("params: " + why);
      p.params[c] = v;
    }
  }
  if (p.params.empty() && p.diff.empty())
    return usage_error("the proposal changes nothing: give params (a launch-parameter change) and/or a diff");
  return p;
}

Expected<std::vector<std::string>> diff_paths(const std::string& diff) {
  std::vector<std::string> paths;
  auto add = [&](std::string p) -> Status {
    while (!p.empty() && (p.back() == '\r' || p.back() == ' ' || p.back() == '\t')) p.pop_back();
    if (auto tab = p.find('\t'); tab != std::string::npos) p = p.substr(0, tab);  // "--- a/x\t(date)"
    if (p == "/dev/null") return Ok{};
    if (p.size() >= 2 && p[0] == '"') return usage_error("the diff quotes a path (" + p + "): unusual names are refused");
    if (p.rfind("a/", 0) == 0 || p.rfind("b/", 0) == 0) p = p.substr(2);
    while (p.rfind("./", 0) == 0) p = p.substr(2);
    if (p.empty()) return usage_error("the diff has an empty path");
    if (p[0] == '/') return usage_error("the diff touches an absolute path (" + p + ")");
    std::istringstream parts(p);
    std::string part;
    while (std::getline(parts, part, '/'))
      if (part == "..") return usage_error("the diff climbs out of the repository (" + p + ")");
    if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
    return Ok{};
  };
  std::istringstream in(diff);
  std::string line;
  bool headers = false;
  while (std::getline(in, line)) {
    for (const char* pre : {"--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to "}) {
      if (line.rfind(pre, 0) != 0) continue;
      if (Status s = add(line.substr(std::string(pre).size())); !s) return s.error();
      headers = true;
    }
    if (line.rfind("diff --git ", 0) == 0) {
      // "diff --git a/X b/Y": split at " b/" (paths with spaces are rare and refused above when quoted).
      const std::string rest = line.substr(11);
      const auto b = rest.find(" b/");
      if (b == std::string::npos) return usage_error("malformed 'diff --git' line: " + line.substr(0, 120));
      if (Status s = add(rest.substr(0, b)); !s) return s.error();
      if (Status s = add(rest.substr(b + 1)); !s) return s.error();
      headers = true;
    }
  }
  if (!headers) return usage_error("the diff has no file headers (---/+++ lines): not a unified diff");
  return paths;
}

std::string protected_path(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    if (p.rfind("tests/", 0) == 0 || p == "tests" || p.rfind("experiments/criteria/", 0) == 0 ||
        p == "experiments/criteria" || p == "experiments/ledger.jsonl")
      return p;
  }
  return "";
}

}  // namespace ouro::lab
