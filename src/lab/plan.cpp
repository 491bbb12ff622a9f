#include "lab/plan.h"

#include <map>
#include <set>
#include <sstream>

#include "lab/builds.h"
#include "lab/process.h"

namespace ouro::lab {

namespace {

// A kernel the microbenchmark knows, the words in code that reach it, and a shape like the
// default model's (SmolLM2-135M: d 576, ff 1536, 9 heads of 64, vocab 49152).
struct KernelInfo {
  const char* name;
  std::vector<const char*> words;
  std::vector<const char*> args;
};
const std::vector<KernelInfo>& kernels() {
  static const std::vector<KernelInfo> k = {
      {"matmul", {"matmul", "MatmulJob", "dot_q", "vnni", "row_quad", "pack_"}, {"--type", "q4_1", "--rows", "1536", "--cols", "576", "--tokens", "1"}},
      {"quantize_acts", {"quantize_acts", "QuantActs"}, {"--cols", "576", "--tokens", "64"}},
      {"rmsnorm", {"rmsnorm"}, {"--cols", "576", "--tokens", "64"}},
      {"softmax", {"softmax", "exp_ps", "vexp"}, {"--cols", "1024", "--tokens", "9"}},
      {"swiglu", {"swiglu", "silu"}, {"--cols", "1536", "--tokens", "64"}},
      {"rope", {"rope"}, {"--heads", "9", "--head-dim", "64", "--pos", "100"}},
      {"attend", {"attend_one", "attend"}, {"--ctx", "1024", "--head-dim", "64"}},
      {"argmax", {"argmax"}, {"--cols", "49152"}},
      // KDA's recurrence at hybrid-small's shape (8 heads of 128), one decode token.
      {"kda_recurrent", {"kda_recurrent", "recurrent_v", "KdaHead"}, {"--heads", "8", "--head-dim", "128", "--tokens", "1"}},
      // Its chunked form at the same shape, one 512-token prefill.
      {"kda_chunk", {"kda_chunked"}, {"--heads", "8", "--head-dim", "128", "--tokens", "512", "--chunk", "64"}},
      // The routed experts at hybrid-small's shape (128 experts of 256, top 4), one 512-token prefill.
      {"moe", {"moe_", "Moe", "one_by_one", "in_parallel"},
       {"--type", "q8_0", "--hidden", "1024", "--ff", "256", "--experts", "128", "--used", "4", "--tokens", "512"}},
  };
  return k;
}

std::string quote_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::string("\"") + v[i] + "\"";
  return s + "]";
}
std::string toml_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') { o += "\\n"; continue; }
    o += c;
  }
  return o + "\"";
}

PlannedSpec kernel_spec(const KernelInfo& k, const std::string& base, const std::string& cand, const std::string& why,
                        const std::vector<std::string>& base_args = {}, const std::vector<std::string>& cand_args = {}) {
  PlannedSpec p;
  p.name = std::string("kernel-") + k.name;
  p.level = "kernel";
  p.why = why;
  std::vector<std::string> args(k.args.begin(), k.args.end());
  std::ostringstream o;
  o << "# Proposed by `ouro lab plan`: " << why << "\n"
    << "question = " << toml_str(std::string("Does the change make the ") + k.name + " kernel faster without changing its output?") << "\n"
    << "hypothesis = " << toml_str(std::string("The change speeds up ") + k.name + " (state how and by how much before running).") << "\n"
    << "level = \"kernel\"\nrepeats = 5\ncriteria_file = \"kernel-speedup\"\n\n"
    << "[baseline]\nrevision = " << toml_str(base) << "\nargs = " << quote_list(base_args) << "\n\n"
    << "[candidate]\nrevision = " << toml_str(cand) << "\nargs = " << quote_list(cand_args) << "\n\n"
    << "[workload]\nkernel = \"" << k.name << "\"\nkernel_args = " << quote_list(args) << "\nseeds = [1, 2]\nthreads = 2\n";
  p.toml = o.str();
  return p;
}

PlannedSpec engine_spec(const std::string& base, const std::string& cand, const std::string& why,
                        const std::vector<std::string>& base_args = {}, const std::vector<std::string>& cand_args = {}) {
  PlannedSpec p;
  p.name = "engine";
  p.level = "engine";
  p.why = why;
  std::ostringstream o;
  o << "# Proposed by `ouro lab plan`: " << why << "\n"
    << "question = \"Does the change keep or raise prefill and decode throughput, with the same outputs?\"\n"
    << "hypothesis = \"State the expected effect on prefill and decode before running.\"\n"
    << "level = \"engine\"\nrepeats = 5\ntrace = true\ncriteria_file = \"engine-no-regression\"\n"
    << "metrics = [\"prefill_tok_s\", \"decode_tok_s\", \"peak_rss_mib\"]\n\n"
    << "[baseline]\nrevision = " << toml_str(base) << "\nargs = " << quote_list(base_args) << "\n\n"
    << "[candidate]\nrevision = " << toml_str(cand) << "\nargs = " << quote_list(cand_args) << "\n\n"
    << "[workload]\nprompt_len = 128\ngen_len = 32\nseeds = [1]\n";
  p.toml = o.str();
  return p;
}


}  // namespace

std::vector<std::string> split_ws(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> v;
  std::string w;
  while (in >> w) v.push_back(w);
  return v;
}

Expected<Plan> plan_revisions(const std::string& repo_root, const std::string& base, const std::string& cand) {
  std::string bc = base, cc = cand;
  std::vector<std::string> diff_args = {"git", "diff", "-U0", "--no-color"};
  if (base != "worktree") {
    auto b = resolve_commit(repo_root, base);
    if (!b) return b.error();
    diff_args.push_back(*b);
  } else {
    return usage_error("BASE must be a revision (CAND may be \"worktree\")");
  }
  if (cand != "worktree") {
    auto c = resolve_commit(repo_root, cand);
    if (!c) return c.error();
    diff_args.push_back(*c);
  }
  auto diff = capture(diff_args, repo_root);
  if (!diff) return diff.error();
  Plan plan;
  std::map<std::string, std::string> reached;  // kernel -> why
  bool engine = false;
  std::string engine_why;
  std::set<std::string> files;
  std::istringstream in(*diff);
  std::string line, file;
  while (std::getline(in, line)) {
    if (line.rfind("+++ b/", 0) == 0 || line.rfind("--- a/", 0) == 0) {
      const std::string f = line.substr(6);
      if (files.insert(f).second) plan.touched.push_back(f);
      file = f;
      continue;
    }
    const bool hunk = line.rfind("@@", 0) == 0;
    const bool changed = (line[0] == '+' || line[0] == '-') && line.rfind("+++", 0) != 0 && line.rfind("---", 0) != 0;
    if (!hunk && !changed) continue;
    const bool src = file.rfind("src/", 0) == 0;
    if (!src) continue;
    const bool kernel_file = file.rfind("src/kernels/", 0) == 0 || file == "src/runtime/sampler.cpp";
    for (const auto& k : kernels())
      for (const char* w : k.words)
        if (line.find(w) != std::string::npos && kernel_file && !reached.count(k.name))
          reached[k.name] = file + (hunk ? " (hunk " + line.substr(0, 60) + ")" : " (changed line mentions " + std::string(w) + ")");
    if (file.rfind("src/core/thread_pool", 0) == 0 || file.rfind("src/model/", 0) == 0 || file.rfind("src/runtime/engine", 0) == 0) {
      if (!engine) engine_why = file + ": reaches the whole forward pass";
      engine = true;
    }
    if (file.rfind("src/tokenizer/", 0) == 0 && plan.notes.empty())
      plan.notes.push_back(file + ": a tokenizer change is a correctness question (tests/oracle/test_tokenizer.py), not a speed one");
  }
  for (const auto& k : kernels())
    if (reached.count(k.name)) {
      plan.kernels.push_back(k.name);
      plan.specs.push_back(kernel_spec(k, base, cand, reached[k.name]));
    }
  // A kernel change that the microbenchmark answers needs no engine run; anything beyond one kernel does.
  if (engine || (!files.empty() && plan.specs.empty() && [&] {
        for (const auto& f : files)
          if (f.rfind("src/", 0) == 0 && f.rfind("src/lab/", 0) != 0 && f.rfind("src/cli/", 0) != 0 && f.rfind("src/tokenizer/", 0) != 0 &&
              f.rfind("src/trace/", 0) != 0)
            return true;
        return false;
      }()))
    plan.specs.push_back(engine_spec(base, cand, engine ? engine_why : "engine code outside any single kernel"));
  if (plan.specs.empty() && plan.notes.empty())
    plan.notes.push_back("no engine code changed (" + std::to_string(files.size()) + " files): no speed experiment needed");
  return plan;
}

Expected<Plan> plan_launch(const std::string& base_args, const std::string& cand_args, const std::string& revision) {
  const auto b = split_ws(base_args), c = split_ws(cand_args);
  auto to_map = [](const std::vector<std::string>& v) {
    std::map<std::string, std::string> m;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].rfind("-", 0) != 0) continue;
      std::string f = v[i] == "-t" ? "--threads" : v[i] == "-m" ? "--model" : v[i];
      m[f] = i + 1 < v.size() && v[i + 1].rfind("-", 0) != 0 ? v[i + 1] : "";
    }
    return m;
  };
  const auto mb = to_map(b), mc = to_map(c);
  Plan plan;
  std::set<std::string> keys;
  for (auto& [k, v] : mb) keys.insert(k);
  for (auto& [k, v] : mc) keys.insert(k);
  for (const auto& k : keys) {
    const std::string vb = mb.count(k) ? mb.at(k) : "(default)", vc = mc.count(k) ? mc.at(k) : "(default)";
    if (vb != vc) plan.touched.push_back(k + ": " + vb + " -> " + vc);
  }
  if (plan.touched.empty()) return usage_error("the two launch configurations are the same: nothing to compare");
  bool isa = false;
  for (const auto& t : plan.touched) isa |= t.rfind("--isa", 0) == 0;
  if (isa) {
    // The ISA picks kernel variants: the matmul microbenchmark answers first, on both shapes.
    auto pick = [](const std::vector<std::string>& v) {
      std::vector<std::string> out;
      for (size_t i = 0; i + 1 < v.size(); ++i)
        if (v[i] == "--isa") out = {"--isa", v[i + 1]};
      return out;
    };
    plan.kernels.push_back("matmul");
    plan.specs.push_back(kernel_spec(kernels()[0], revision, revision, "--isa selects the kernel variant", pick(b), pick(c)));
  }
  plan.specs.push_back(engine_spec(revision, revision, "launch parameters reach the whole engine", b, c));
  return plan;
}

}  // namespace ouro::lab
