#include "lab/spec.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "core/sha256.h"

namespace ouro::lab {

namespace {

const std::vector<std::string> kEngineMetrics = {"prefill_tok_s", "decode_tok_s", "peak_rss_mib", "wall_s"};
const std::vector<std::string> kKernelMetrics = {"ns_per_op", "gb_s", "gflops", "peak_rss_mib", "wall_s"};
const std::vector<std::string> kEngineCorrectness = {"top1_agreement", "max_abs_logit_diff", "greedy_match",
                                                     "first_divergence", "kl_mean", "kl_max"};
const std::vector<std::string> kKernelCorrectness = {"max_abs_diff", "max_rel_diff", "exact"};
const std::vector<std::string> kServeMetrics = {"output_tok_s", "request_throughput", "ttft_p50_s", "ttft_p99_s",
                                                "tpot_p50_s", "itl_p50_s", "e2e_p50_s", "e2e_p99_s", "peak_rss_mib", "wall_s"};
// Fraction of requests whose greedy text through the candidate's server equals the baseline's.
const std::vector<std::string> kServeCorrectness = {"greedy_match"};

bool is_kernel_like(Level l) { return l == Level::kKernel || l == Level::kOp; }

// Reads a TOML table strictly: every key must be claimed, types must match, errors name the key path.
class Reader {
 public:
  Reader(const toml::table& t, std::string where, std::string file) : t_(t), where_(std::move(where)), file_(std::move(file)) {}

  Error err(const std::string& key, const std::string& why) const {
    return usage_error(file_ + ": " + path(key) + ": " + why);
  }
  std::string path(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }
  bool has(const std::string& key) const { return t_.contains(key); }

  Status str(const std::string& key, std::string& out) {
    seen_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return Ok{};
    auto v = n->value<std::string>();
    if (!n->is_string() || !v) return err(key, "expected a string");
    out = *v;
    return Ok{};
  }
  Status num(const std::string& key, double& out, double lo, double hi) {
    seen_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return Ok{};
    if (!n->is_number()) return err(key, "expected a number");
    const double v = *n->value<double>();
    if (!(v >= lo && v <= hi)) return err(key, "out of range: " + fmt(v) + " (allowed " + fmt(lo) + ".." + fmt(hi) + ")");
    out = v;
    return Ok{};
  }
  Status integer(const std::string& key, int& out, long long lo, long long hi) {
    seen_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return Ok{};
    if (!n->is_integer()) return err(key, "expected an integer");
    const long long v = *n->value<long long>();
    if (v < lo || v > hi) return err(key, "out of range: " + std::to_string(v) + " (allowed " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
    out = (int)v;
    return Ok{};
  }
  Status boolean(const std::string& key, bool& out) {
    seen_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return Ok{};
    if (!n->is_boolean()) return err(key, "expected true or false");
    out = *n->value<bool>();
    return Ok{};
  }
  Status strings(const std::string& key, std::vector<std::string>& out) {
    seen_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return Ok{};
    const toml::array* a = n->as_array();
    if (!a) return err(key, "expected an array of strings");
    out.clear();
    for (size_t i = 0; i < a->size(); ++i) {
      auto v = (*a)[i].value<std::string>();
      if (!(*a)[i].is_string() || !v) return err(key, "element " + std::to_string(i) + " is not a string");
      out.push_back(*v);
    }
    return Ok{};
  }
  const toml::table* table(const std::string& key, Status& st) {
    seen_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return nullptr;
    if (!n->is_table()) st = err(key, "expected a table");
    return n->as_table();
  }
  const toml::node* raw(const std::string& key) {
    seen_.insert(key);
    return t_.get(key);
  }
  Status no_unknown_keys() const {
    for (auto&& [k, v] : t_) {
      const std::string key(k.str());
      if (!seen_.count(key)) return err(key, "unknown key (see docs/lab.md for the spec's keys)");
    }
    return Ok{};
  }

  static std::string fmt(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  }

 private:
  const toml::table& t_;
  std::string where_, file_;
  std::set<std::string> seen_;
};

Status read_side(Reader& top, const std::string& name, Side& side, const std::string& file) {
  Status st = Ok{};
  const toml::table* t = top.table(name, st);
  if (!st) return st;
  if (!t) return top.err(name, "missing (every spec names a baseline and a candidate)");
  Reader r(*t, name, file);
  if (Status s = r.str("revision", side.revision); !s) return s;
  if (side.revision.empty()) return r.err("revision", "empty (use a git revision or \"worktree\")");
  if (side.revision.find_first_of(" \t\n;|&$`'\"\\") != std::string::npos || side.revision[0] == '-')
    return r.err("revision", "'" + side.revision + "' is not a revision name");
  if (Status s = r.strings("build", side.build); !s) return s;
  for (const auto& b : side.build)
    if (b.rfind("-D", 0) != 0 || b.size() < 3 || b.find('=') == std::string::npos)
      return r.err("build", "'" + b + "' is not a CMake cache option (-DNAME=VALUE)");
  if (Status s = r.strings("args", side.args); !s) return s;
  Status est = Ok{};
  if (const toml::table* env = r.table("env", est)) {
    for (auto&& [k, v] : *env) {
      const std::string key(k.str());
      auto val = v.value<std::string>();
      if (!v.is_string() || !val) return r.err("env." + key, "expected a string");
      if (key.empty() || key.find('=') != std::string::npos) return r.err("env", "bad variable name '" + key + "'");
      side.env[key] = *val;
    }
  }
  if (!est) return est;
  return r.no_unknown_keys();
}

Status read_workload(Reader& top, Spec& s, const std::string& file, const std::string& repo_root) {
  Status st = Ok{};
  const toml::table* t = top.table("workload", st);
  if (!st) return st;
  Workload& w = s.workload;
  if (!t) {
    if (is_kernel_like(s.level)) return top.err("workload", "missing (a kernel or op spec names its kernel)");
    return Ok{};
  }
  Reader r(*t, "workload", file);
  if (Status x = r.str("model", w.model); !x) return x;
  if (Status x = r.integer("prompt_len", w.prompt_len, 1, 1 << 16); !x) return x;
  if (Status x = r.integer("gen_len", w.gen_len, 0, 1 << 16); !x) return x;
  if (Status x = r.integer("batch", w.batch, 1, 1); !x) return x;  // concurrency is the serve level's business
  if (s.level == Level::kServe) {
    if (Status x = r.integer("concurrency", w.concurrency, 1, 1024); !x) return x;
    if (Status x = r.integer("requests", w.requests, 1, 100000); !x) return x;
    if (w.gen_len < 1) return r.err("gen_len", "a serve-level spec generates at least 1 token");
  } else if (r.has("concurrency") || r.has("requests")) {
    return r.err(r.has("concurrency") ? "concurrency" : "requests", "only serve-level specs take concurrent requests");
  }
  if (Status x = r.strings("prompts", w.prompts); !x) return x;
  if (Status x = r.str("prompts_file", w.prompts_file); !x) return x;
  if (Status x = r.integer("threads", w.threads, 0, 1024); !x) return x;
  if (Status x = r.integer("bench_repeats", w.bench_repeats, 1, 100); !x) return x;
  if (Status x = r.integer("depth", w.depth, 0, 1 << 20); !x) return x;
  if (w.depth > 0 && s.level != Level::kEngine) return r.err("depth", "only engine-level specs take a cache depth");
  if (Status x = r.integer("greedy_tokens", w.greedy_tokens, 0, 1024); !x) return x;
  if (Status x = r.str("kernel", w.kernel); !x) return x;
  if (Status x = r.strings("kernel_args", w.kernel_args); !x) return x;
  if (Status x = r.num("min_time_ms", w.min_time_ms, 1, 60000); !x) return x;
  if (const toml::node* n = r.raw("seeds")) {
    const toml::array* a = n->as_array();
    if (!a || a->empty()) return r.err("seeds", "expected a non-empty array of integers");
    w.seeds.clear();
    for (size_t i = 0; i < a->size(); ++i) {
      auto v = (*a)[i].value<long long>();
      if (!(*a)[i].is_integer() || !v || *v < 0) return r.err("seeds", "element " + std::to_string(i) + " is not an integer >= 0");
      w.seeds.push_back((unsigned long long)*v);
    }
    if (w.seeds.size() > 64) return r.err("seeds", "more than 64 seeds");
  }
  if (!w.prompts_file.empty()) {
    const std::string p = w.prompts_file[0] == '/' ? w.prompts_file : repo_root + "/" + w.prompts_file;
    std::ifstream in(p);
    if (!in) return r.err("prompts_file", "cannot read '" + p + "'");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) w.prompts.push_back(line);
    if (w.prompts.empty()) return r.err("prompts_file", "'" + p + "' holds no prompt (one per line)");
  }
  for (const auto& p : w.prompts)
    if (p.empty()) return r.err("prompts", "an empty prompt");
  if (is_kernel_like(s.level)) {
    if (w.kernel.empty()) return r.err("kernel", "missing (the microbenchmark to run: `ouro microbench --help` lists them)");
    if (w.kernel.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
      return r.err("kernel", "'" + w.kernel + "' is not a kernel name");
  } else if (!w.kernel.empty() || !w.kernel_args.empty()) {
    return r.err("kernel", "only kernel- and op-level specs run a kernel");
  }
  return r.no_unknown_keys();
}

// Names a criterion may use at this level: baseline.M / candidate.M for a metric, correctness.X,
// correctness.spec.X, correctness.heldout.X.
Status check_name(const Spec& s, const std::string& name, const std::string& where) {
  const size_t dot = name.find('.');
  const std::string head = name.substr(0, dot);
  const std::string rest = dot == std::string::npos ? "" : name.substr(dot + 1);
  if (head == "baseline" || head == "candidate") {
    if (rest.empty()) return usage_error(where + ": '" + name + "' names no metric");
    if (!known_metric(s.level, rest))
      return usage_error(where + ": unknown metric '" + rest + "' for level " + level_name(s.level) + " (known: " +
                         [&] { std::string k; for (auto& m : level_metrics(s.level)) k += (k.empty() ? "" : ", ") + m; return k; }() +
                         (s.level == Level::kEngine ? ", span.OP" : "") + ")");
    if (rest.rfind("span.", 0) == 0 && !s.trace) return usage_error(where + ": '" + name + "' needs trace = true");
    return Ok{};
  }
  if (head == "correctness") {
    std::string leaf = rest;
    if (leaf.rfind("spec.", 0) == 0) leaf = leaf.substr(5);
    else if (leaf.rfind("heldout.", 0) == 0) leaf = leaf.substr(8);
    for (const auto& c : correctness_names(s.level))
      if (leaf == c) return Ok{};
    std::string k;
    for (auto& c : correctness_names(s.level)) k += (k.empty() ? "" : ", ") + c;
    return usage_error(where + ": unknown correctness figure '" + rest + "' for level " + level_name(s.level) + " (known: " + k + ")");
  }
  return usage_error(where + ": unknown name '" + name + "' (names start with baseline., candidate. or correctness.)");
}

Status add_criteria(Spec& s, const std::vector<std::string>& texts, const std::string& source, const std::string& where) {
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "] '" + texts[i] + "'";
    auto e = parse_expr(texts[i]);
    if (!e) return usage_error(w + ": " + e.error().message);
    if (!(*e)->is_bool()) return usage_error(w + ": a criterion must be a comparison (e.g. candidate.x >= 0.95 * baseline.x)");
    for (const auto& n : expr_names(**e))
      if (Status st = check_name(s, n, w); !st) return st;
    s.criteria.push_back({texts[i], source, std::shared_ptr<Expr>(std::move(*e))});
  }
  return Ok{};
}

Status read_criteria_file(Spec& s, const std::string& name, const std::string& repo_root, const std::string& file) {
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
    return usage_error(file + ": criteria_file: '" + name + "' is not a criteria name (a file experiments/criteria/NAME.toml)");
  const std::string p = repo_root + "/experiments/criteria/" + name + ".toml";
  std::ifstream in(p, std::ios::binary);
  if (!in) return usage_error(file + ": criteria_file: no criteria named '" + name + "' (" + p + " is missing)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  s.criteria_sha256 = sha256_hex(text);
  s.criteria_name = name;
  toml::table t;
  try {
    t = toml::parse(text, p);
  } catch (const toml::parse_error& e) {
    return usage_error(p + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  Reader r(t, "", p);
  std::string desc;
  std::vector<std::string> texts;
  if (Status x = r.str("description", desc); !x) return x;
  if (Status x = r.strings("criteria", texts); !x) return x;
  std::vector<std::string> levels;
  if (Status x = r.strings("levels", levels); !x) return x;
  if (Status x = r.no_unknown_keys(); !x) return x;
  if (texts.empty()) return usage_error(p + ": criteria: missing or empty");
  if (!levels.empty()) {
    bool ok = false;
    for (const auto& l : levels) ok |= l == level_name(s.level);
    if (!ok) return usage_error(file + ": criteria_file '" + name + "' is not for level " + level_name(s.level));
  }
  return add_criteria(s, texts, "file:" + name, p + ": criteria");
}

}  // namespace

const char* level_name(Level l) {
  switch (l) {
    case Level::kKernel: return "kernel";
    case Level::kOp: return "op";
    case Level::kEngine: return "engine";
    case Level::kServe: return "serve";
  }
  return "?";
}

std::vector<std::string> level_metrics(Level l) {
  return is_kernel_like(l) ? kKernelMetrics : l == Level::kServe ? kServeMetrics : kEngineMetrics;
}

bool known_metric(Level l, const std::string& name) {
  if (l == Level::kEngine && name.rfind("span.", 0) == 0 && name.size() > 5) return true;
  for (const auto& m : level_metrics(l))
    if (m == name) return true;
  return false;
}

bool higher_is_better(const std::string& m) {
  return m == "prefill_tok_s" || m == "decode_tok_s" || m == "gb_s" || m == "gflops" || m == "output_tok_s" ||
         m == "request_throughput";
}

std::vector<std::string> correctness_names(Level l) {
  return is_kernel_like(l) ? kKernelCorrectness : l == Level::kServe ? kServeCorrectness : kEngineCorrectness;
}

bool correctness_higher_is_better(const std::string& n) {
  return n == "top1_agreement" || n == "greedy_match" || n == "first_divergence" || n == "exact";
}

Expected<Spec> parse_spec_text(const std::string& text, const std::string& file, const std::string& repo_root) {
  toml::table t;
  try {
    t = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    return usage_error(file + ":" + std::to_string(e.source().begin.line) + ":" + std::to_string(e.source().begin.column) +
                       ": TOML syntax: " + std::string(e.description()));
  }
  Spec s;
  s.path = file;
  s.toml = text;
  Reader r(t, "", file);
  std::string level = "engine";
  if (Status x = r.str("question", s.question); !x) return x.error();
  if (Status x = r.str("hypothesis", s.hypothesis); !x) return x.error();
  if (Status x = r.str("note", s.note); !x) return x.error();
  if (s.question.empty()) return r.err("question", "missing (one sentence: what does this experiment answer?)");
  if (s.hypothesis.empty()) return r.err("hypothesis", "missing (one sentence: what do you expect, and why?)");
  if (Status x = r.str("level", level); !x) return x.error();
  if (level == "kernel") s.level = Level::kKernel;
  else if (level == "op") s.level = Level::kOp;
  else if (level == "engine") s.level = Level::kEngine;
  else if (level == "serve") s.level = Level::kServe;
  else return r.err("level", "'" + level + "' is not one of kernel, op, engine, serve");
  if (Status x = r.integer("repeats", s.repeats, 2, 200); !x) return x.error();
  if (Status x = r.integer("max_repeats", s.max_repeats, 0, 400); !x) return x.error();
  if (Status x = r.integer("warmup", s.warmup, 0, 20); !x) return x.error();
  if (Status x = r.num("timeout", s.timeout_s, 1, 86400); !x) return x.error();
  if (Status x = r.num("memory_mib", s.memory_mib, 64, 1 << 22); !x) return x.error();
  if (Status x = r.num("min_effect", s.min_effect, 0, 1); !x) return x.error();
  if (Status x = r.boolean("trace", s.trace); !x) return x.error();
  if (s.trace && s.level == Level::kServe) return r.err("trace", "not available at level serve (trace an engine-level spec)");
  if (s.max_repeats == 0) s.max_repeats = std::min(60, 3 * s.repeats);
  if (s.max_repeats < s.repeats) return r.err("max_repeats", "smaller than repeats (" + std::to_string(s.repeats) + ")");
  if (Status x = read_side(r, "baseline", s.baseline, file); !x) return x.error();
  if (Status x = read_side(r, "candidate", s.candidate, file); !x) return x.error();
  if (Status x = read_workload(r, s, file, repo_root); !x) return x.error();
  std::vector<std::string> metrics, inline_criteria;
  if (Status x = r.strings("metrics", metrics); !x) return x.error();
  for (const auto& m : metrics) {
    if (!known_metric(s.level, m)) return check_name(s, "candidate." + m, file + ": metrics").error();
    if (m.rfind("span.", 0) == 0 && !s.trace) return r.err("metrics", "'" + m + "' needs trace = true");
  }
  if (Status x = r.strings("criteria", inline_criteria); !x) return x.error();
  std::string criteria_file;
  if (Status x = r.str("criteria_file", criteria_file); !x) return x.error();
  if (Status x = r.no_unknown_keys(); !x) return x.error();
  if (Status x = add_criteria(s, inline_criteria, "inline", file + ": criteria"); !x) return x.error();
  if (t.contains("criteria_file"))
    if (Status x = read_criteria_file(s, criteria_file, repo_root, file); !x) return x.error();
  if (s.criteria.empty())
    return usage_error(file + ": no criteria: write them before the run (criteria = [...] or criteria_file = NAME)");
  // Correctness is judged in every experiment: without a correctness criterion, the lab's floor.
  bool judges_correctness = false;
  for (const auto& c : s.criteria)
    for (const auto& n : expr_names(*c.expr)) judges_correctness |= n.rfind("correctness.", 0) == 0;
  if (!judges_correctness) {
    const std::string floor = is_kernel_like(s.level)         ? "correctness.max_rel_diff <= 1e-3"
                              : s.level == Level::kServe ? "correctness.greedy_match == 1"
                                                         : "correctness.top1_agreement >= 0.9";
    if (Status x = add_criteria(s, {floor}, "default", file + ": default criteria"); !x) return x.error();
  }
  // Collect every metric the criteria use, in order, after the explicit ones.
  s.metrics = metrics;
  auto add_metric = [&](const std::string& m) {
    for (const auto& x : s.metrics)
      if (x == m) return;
    s.metrics.push_back(m);
  };
  for (const auto& c : s.criteria)
    for (const auto& n : expr_names(*c.expr))
      if (n.rfind("baseline.", 0) == 0) add_metric(n.substr(9));
      else if (n.rfind("candidate.", 0) == 0) add_metric(n.substr(10));
  if (s.metrics.empty()) return r.err("metrics", "nothing to measure: name metrics or use them in criteria");
  return s;
}

Expected<Spec> parse_spec_file(const std::string& path, const std::string& repo_root) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return usage_error(path + ": cannot read the spec");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1 << 20)) return usage_error(path + ": spec larger than 1 MiB");
  return parse_spec_text(ss.str(), path, repo_root);
}

nlohmann::json spec_to_json(const Spec& s) {
  auto side = [](const Side& x) {
    return nlohmann::json{{"revision", x.revision}, {"build", x.build}, {"args", x.args}, {"env", x.env}};
  };
  const Workload& w = s.workload;
  nlohmann::json wl = {{"model", w.model}, {"seeds", w.seeds}, {"threads", w.threads}};
  if (is_kernel_like(s.level)) {
    wl["kernel"] = w.kernel;
    wl["kernel_args"] = w.kernel_args;
    wl["min_time_ms"] = w.min_time_ms;
  } else if (s.level == Level::kServe) {
    wl["prompt_len"] = w.prompt_len;
    wl["gen_len"] = w.gen_len;
    wl["concurrency"] = w.concurrency;
    wl["requests"] = w.requests;
    wl["greedy_tokens"] = w.greedy_tokens;
  } else {
    wl["prompt_len"] = w.prompt_len;
    wl["gen_len"] = w.gen_len;
    wl["batch"] = w.batch;
    wl["prompts"] = w.prompts;
    wl["bench_repeats"] = w.bench_repeats;
    wl["greedy_tokens"] = w.greedy_tokens;
    if (w.depth > 0) wl["depth"] = w.depth;  // absent when 0: older records keep their identity
  }
  nlohmann::json crit = nlohmann::json::array();
  for (const auto& c : s.criteria) crit.push_back({{"expr", c.text}, {"source", c.source}});
  return {{"question", s.question}, {"hypothesis", s.hypothesis}, {"note", s.note}, {"level", level_name(s.level)},
          {"baseline", side(s.baseline)}, {"candidate", side(s.candidate)}, {"workload", wl}, {"metrics", s.metrics},
          {"criteria", crit}, {"criteria_file", s.criteria_name}, {"repeats", s.repeats}, {"max_repeats", s.max_repeats},
          {"warmup", s.warmup}, {"timeout", s.timeout_s}, {"memory_mib", s.memory_mib}, {"min_effect", s.min_effect},
          {"trace", s.trace}};
}

}  // namespace ouro::lab
