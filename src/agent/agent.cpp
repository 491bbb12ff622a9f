// Steps 2-6 of `ouro agent` (agent.h): propose, validate, route, run, feed back, account.
#include "agent/agent.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lab/ledger.h"
#include "lab/plan.h"
#include "lab/process.h"
#include "lab/spec.h"

namespace fs = std::filesystem;

namespace ouro::lab {

using nlohmann::json;

namespace {

std::string toml_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    const unsigned char c = (unsigned char)ch;
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c == '\n') {
      o += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      o += ' ';
    } else {
      o += ch;
    }
  }
  return o + "\"";
}
std::string toml_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + toml_str(v[i]);
  return s + "]";
}
std::string one_line(std::string s, size_t max = 160) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}
std::string fmt(double v, int prec = 3) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}

void progress(const std::string& m) { std::fprintf(stderr, "agent: %s\n", m.c_str()); }

// "--threads 1 -> 2, --kv f32 -> int8"
std::string change_text(const LaunchParams& from, const LaunchParams& to, int nproc) {
  std::string s;
  for (const auto& [k, v] : to.values) {
    const std::string old = from.value_of(k, nproc);
    if (old != v) s += (s.empty() ? "" : ", ") + ("--" + k + " " + (old.empty() ? "(default)" : old) + " -> " + v);
  }
  return s.empty() ? "no launch change" : s;
}

// Replaces the value of `key = ...` lines (top-level keys written by plan.cpp) in a spec text.
std::string set_toml_line(const std::string& toml, const std::string& key, const std::string& value) {
  std::istringstream in(toml);
  std::ostringstream out;
  std::string line;
  bool done = false;
  while (std::getline(in, line)) {
    if (!done && line.rfind(key + " =", 0) == 0) {
      out << key << " = " << value << "\n";
      done = true;
    } else {
      out << line << "\n";
    }
  }
  std::string s = out.str();
  if (!done) s = key + " = " + value + "\n" + s;
  return s;
}

struct Step {
  int n = 0;
  std::string outcome;  // accept | reject | inconclusive | refused | skipped | error
  std::string id;       // the step's ledger record
  std::string change;   // what it changed, in words
  std::vector<std::string> reasons;
  std::string branch;   // diff candidates
  json ratios = json::object();
};

struct Candidate;

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o), current_(o.base), start_(o.base) {}
  Expected<json> run();

 private:
  // A proposal, or nullopt with the step recorded as skipped (or the loop told to stop).
  Expected<std::optional<Proposal>> propose(int n, bool* stop);
  Expected<std::optional<Proposal>> ask_llm(int n, bool* stop);
  // Keeps the system prompt, the context and the latest exchanges, so that a long run still fits
  // a small model's context.
  void trim_history();
  // Appends an agent-step record (fields of `extra` added); its id.
  Expected<std::string> append_step(int n, const std::string& verdict, const std::vector<std::string>& reasons, const json& proposal,
                                    const json& extra);
  // append_step, and the step in the account.
  Status record_step(int n, const std::string& verdict, const std::vector<std::string>& reasons, const json& proposal);
  // Validates, routes, runs; appends the step to steps_.
  Status try_proposal(int n, const Proposal& p);
  // Checks that need no process; the refusal reason, or "" (then *c holds the candidate's args).
  std::string check(const Proposal& p, Candidate* c) const;
  // Commits the diff on agent/<run>-<n> in a worktree of HEAD: a refusal reason, "" when done.
  Expected<std::string> make_branch(int n, const Proposal& p, Candidate* c);
  // Routes (lab plan) and writes the spec: a refusal reason, "" when *spec_path is ready.
  Expected<std::string> write_spec(int n, const Proposal& p, const Candidate& c, std::string* spec_path, std::string* level);
  // Records the step as refused (nothing ran) and tells the proposer why.
  Status refuse(int n, const Proposal& p, const std::string& why);
  std::string feedback_text(const Step& s, const json& rec) const;
  Expected<json> account();

  const AgentOptions& o_;
  LaunchParams current_, start_;
  std::optional<TunePolicy> tune_;
  std::optional<TuneTry> tune_try_;
  AgentContext ctx_;
  json messages_ = json::array();
  std::vector<Step> steps_;
  std::vector<std::string> offered_, learned_;
  int llm_retries_ = 0;
  bool goal_met_ = false;
  std::string stop_reason_;
};

Expected<std::string> Agent::append_step(int n, const std::string& verdict, const std::vector<std::string>& reasons, const json& proposal,
                                         const json& extra) {
  json rec = {{"kind", "agent-step"},
              {"verdict", verdict},
              {"reasons", reasons},
              {"proposal", proposal},
              {"goal", o_.goal},
              {"criteria_file", o_.criteria_name},
              {"criteria_sha256", o_.criteria_sha256},
              {"config", current_.text()},
              {"agent", {{"run", o_.run_id}, {"step", n}, {"proposer", o_.tune ? "policy tune" : "llm " + o_.llm.model}}},
              {"summary", "agent " + o_.run_id + " step " + std::to_string(n) + " " + verdict + ": " +
                              one_line(reasons.empty() ? "" : reasons[0], 120)}};
  for (auto it = extra.begin(); extra.is_object() && it != extra.end(); ++it) rec[it.key()] = it.value();
  auto stored = append_record(o_.ledger, rec);
  if (!stored) return stored.error();
  return jstr(*stored, "id");
}

Status Agent::record_step(int n, const std::string& verdict, const std::vector<std::string>& reasons, const json& proposal) {
  auto id = append_step(n, verdict, reasons, proposal, json::object());
  if (!id) return id.error();
  Step s;
  s.n = n;
  s.outcome = verdict;
  s.id = *id;
  s.reasons = reasons;
  if (proposal.is_object() && proposal.contains("hypothesis") && proposal["hypothesis"].is_string())
    s.change = one_line(proposal["hypothesis"].get<std::string>(), 100);
  steps_.push_back(s);
  progress("step " + std::to_string(n) + ": " + verdict + " (" + s.id + "): " + one_line(reasons.empty() ? "" : reasons[0]));
  return Ok{};
}

void Agent::trim_history() {
  constexpr size_t kHead = 2, kTail = 12;
  if (messages_.size() <= kHead + kTail) return;
  json kept = json::array();
  for (size_t i = 0; i < kHead; ++i) kept.push_back(messages_[i]);
  kept.push_back({{"role", "user"}, {"content", "(earlier steps left out; their records are in the ledger)"}});
  for (size_t i = messages_.size() - kTail; i < messages_.size(); ++i) kept.push_back(messages_[i]);
  messages_ = std::move(kept);
}

Expected<std::optional<Proposal>> Agent::ask_llm(int n, bool* stop) {
  messages_.push_back({{"role", "user"},
                       {"content", "Step " + std::to_string(n) + " of " + std::to_string(o_.budget) +
                                       ": propose the next experiment as one JSON object matching the schema."}});
  std::string last_error;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto reply = chat_complete(o_.llm, messages_, proposal_schema(o_.nproc));
    if (!reply) {
      // The endpoint itself failed: nothing more can be asked.
      *stop = true;
      stop_reason_ = reply.error().message;
      if (Status s = record_step(n, "skipped", {"the proposer did not answer: " + reply.error().message}, json::object()); !s)
        return s.error();
      return std::optional<Proposal>();
    }
    // The conversation keeps a reply only up to 1,500 characters: a rambling reply (a small
    // model can fill its whole budget with one string) must not crowd the proposer's context out.
    constexpr size_t kKeep = 1500;
    messages_.push_back({{"role", "assistant"},
                         {"content", reply->size() <= kKeep ? *reply : reply->substr(0, kKeep) + " ... [truncated]"}});
    trim_history();
    auto p = parse_proposal(*reply, o_.nproc);
    if (p) return std::optional<Proposal>(*p);
    last_error = p.error().message;
    if (attempt == 0) {
      ++llm_retries_;
      progress("step " + std::to_string(n) + ": invalid proposal (" + last_error + "), asking again");
      messages_.push_back({{"role", "user"},
                           {"content", "That reply was not accepted: " + last_error +
                                           ". Reply again with only one JSON object that matches the schema."}});
    }
  }
  messages_.push_back({{"role", "user"}, {"content", "Step " + std::to_string(n) + " was skipped: the reply was invalid twice (" + last_error + ")."}});
  json raw = {{"reply", messages_[messages_.size() - 2]["content"]}};
  if (Status s = record_step(n, "skipped", {"invalid proposal twice: " + last_error}, raw); !s) return s.error();
  return std::optional<Proposal>();
}

Expected<std::optional<Proposal>> Agent::propose(int n, bool* stop) {
  if (!o_.tune) return ask_llm(n, stop);
  tune_try_ = tune_->next(current_);
  if (!tune_try_) {
    *stop = true;
    stop_reason_ = "the search space is exhausted";
    return std::optional<Proposal>();
  }
  Proposal p;
  p.level = "engine";
  p.params[tune_try_->param] = tune_try_->value;
  p.hypothesis = "--" + tune_try_->param + " " + tune_try_->value + " instead of " + current_.value_of(tune_try_->param, o_.nproc) +
                 " helps; ranked by " + tune_try_->why;
  if (tune_try_->attempt > 0) p.hypothesis += " (again with twice the pairs: the last try was inconclusive)";
  p.expected_effect = "higher prefill or decode throughput within the criteria";
  p.raw = {{"hypothesis", p.hypothesis}, {"level", p.level}, {"params", p.params}, {"diff", ""}, {"expected_effect", p.expected_effect}};
  return std::optional<Proposal>(p);
}

Status Agent::refuse(int n, const Proposal& p, const std::string& why) {
  if (Status s = record_step(n, "refused", {why}, p.raw); !s) return s;
  if (!o_.tune) messages_.push_back({{"role", "user"}, {"content", "Step " + std::to_string(n) + " was refused before running: " + why}});
  return Ok{};
}

// What the validation makes of a proposal: both sides of the experiment.
struct Candidate {
  LaunchParams args;                                    // the candidate's launch configuration
  std::string base_rev = "worktree", cand_rev = "worktree";
  std::string tree, branch;                             // a diff's worktree and branch
  std::string change;                                   // in words
};

std::string Agent::check(const Proposal& p, Candidate* c) const {
  if (!p.diff.empty()) {
    auto paths = diff_paths(p.diff);
    if (!paths) return "diff: " + paths.error().message;
    if (std::string bad = protected_path(*paths); !bad.empty())
      return "diff touches " + bad + ": tests, criteria and the ledger belong to people";
  }
  c->args = current_;
  for (const auto& [k, v] : p.params) c->args.values[k] = v;
  if (p.diff.empty() && c->args == current_) return "the proposed parameters are the current configuration: nothing to test";
  if (auto ctx = c->args.values.find("ctx"); ctx != c->args.values.end()) {
    const long long need = (long long)o_.workload.depth + o_.workload.prompt_len + o_.workload.gen_len;
    if (std::stoll(ctx->second) < need) return "--ctx " + ctx->second + " is below the workload's " + std::to_string(need) + " tokens";
  }
  return "";
}

Expected<std::string> Agent::make_branch(int n, const Proposal& p, Candidate* c) {
  auto head = capture({"git", "rev-parse", "HEAD"}, o_.repo_root);
  if (!head) return head.error();
  c->base_rev = head->substr(0, head->find_first_of("\r\n"));
  const std::string branch = "agent/" + o_.run_id + "-" + std::to_string(n);
  const std::string tree = o_.work_dir + "/tree-" + std::to_string(n);
  if (auto w = capture({"git", "worktree", "add", "-q", "-b", branch, tree, c->base_rev}, o_.repo_root); !w)
    return "cannot create the worktree: " + one_line(w.error().message, 300);
  c->tree = tree;
  c->branch = branch;
  const std::string patch = o_.work_dir + "/step-" + std::to_string(n) + ".diff";
  {
    std::ofstream f(patch);
    f << p.diff;
    if (p.diff.back() != '\n') f << "\n";
    if (!f) return runtime_error(patch + ": cannot write");
  }
  if (auto chk = capture({"git", "apply", "--check", patch}, tree); !chk)
    return "the diff does not apply to HEAD: " + one_line(chk.error().message, 300);
  auto ap = capture({"git", "apply", "--index", patch}, tree);
  if (!ap) return "the diff cannot be applied: " + one_line(ap.error().message, 300);
  auto cm = capture({"git", "-c", "user.name=ouro agent", "-c", "user.email=agent@ouro.invalid", "commit", "-q", "-m",
                     "agent " + o_.run_id + " step " + std::to_string(n) + ": " + one_line(p.hypothesis, 72)},
                    tree);
  if (!cm) return "the diff cannot be committed: " + one_line(cm.error().message, 300);
  c->cand_rev = branch;
  progress("step " + std::to_string(n) + ": committed the diff on " + branch + " in " + tree);
  return std::string();
}

Expected<std::string> Agent::write_spec(int n, const Proposal& p, const Candidate& c, std::string* spec_path, std::string* level) {
  // `lab plan` names the cheapest levels; take the cheapest the criteria file judges.
  auto plan = p.diff.empty() ? plan_launch(current_.text() == "(defaults)" ? "" : current_.text(), c.args.text(), "worktree")
                             : plan_revisions(o_.repo_root, c.base_rev, c.cand_rev);
  if (!plan) return "lab plan: " + plan.error().message;
  auto allowed = [&](const std::string& l) {
    return std::find(o_.criteria_levels.begin(), o_.criteria_levels.end(), l) != o_.criteria_levels.end();
  };
  const PlannedSpec* chosen = nullptr;
  for (const auto& s : plan->specs)
    if (!chosen && allowed(s.level)) chosen = &s;
  *level = chosen ? chosen->level : "";
  if (!chosen && allowed("engine") && !plan->specs.empty()) *level = "engine";  // the engine answers any change, at a price
  if (level->empty()) {
    std::string levels;
    for (const auto& s : plan->specs) levels += (levels.empty() ? "" : ", ") + s.level;
    return "criteria '" + o_.criteria_name + "' judges no level this change needs (" +
           (levels.empty() ? "none: " + (plan->notes.empty() ? std::string("no experiment") : plan->notes[0]) : levels) + ")";
  }
  const std::string question = "agent " + o_.run_id + " step " + std::to_string(n) + ": does " + c.change + " help (" + o_.goal + ")?";
  const std::string hypothesis = one_line(p.hypothesis + " Expected: " + p.expected_effect, 800);
  // A retry of an inconclusive try (tune) gets twice the pairs.
  const int repeats = o_.workload.repeats * (tune_try_ ? 1 + tune_try_->attempt : 1);
  std::string toml;
  if (*level == "engine") {
    std::ostringstream t;
    t << "# Written by `ouro agent` run " << o_.run_id << ", step " << n << ": " << one_line(chosen ? chosen->why : "engine", 200) << "\n"
      << "question = " << toml_str(one_line(question, 400)) << "\n"
      << "hypothesis = " << toml_str(hypothesis) << "\n"
      << "level = \"engine\"\nrepeats = " << repeats << "\nmax_repeats = " << 3 * repeats
      << "\ntrace = true\ncriteria_file = " << toml_str(o_.criteria_name) << "\n"
      << "metrics = [\"prefill_tok_s\", \"decode_tok_s\", \"peak_rss_mib\"]\n\n"
      << "[baseline]\nrevision = " << toml_str(c.base_rev) << "\nargs = " << toml_list(current_.to_args()) << "\n\n"
      << "[candidate]\nrevision = " << toml_str(c.cand_rev) << "\nargs = " << toml_list(c.args.to_args()) << "\n\n"
      << "[workload]\n";
    if (!o_.workload.model.empty()) t << "model = " << toml_str(o_.workload.model) << "\n";
    t << "prompt_len = " << o_.workload.prompt_len << "\ngen_len = " << o_.workload.gen_len << "\n";
    if (o_.workload.depth > 0) t << "depth = " << o_.workload.depth << "\n";
    t << "bench_repeats = " << o_.workload.bench_repeats << "\nseeds = [1]\ngreedy_tokens = 8\n";
    toml = t.str();
  } else {
    // The plan's kernel/op spec (its shapes and inputs), judged by the person's criteria.
    toml = set_toml_line(chosen->toml, "criteria_file", toml_str(o_.criteria_name));
    toml = set_toml_line(toml, "repeats", std::to_string(repeats));
    toml = set_toml_line(toml, "question", toml_str(one_line(question, 400)));
    toml = set_toml_line(toml, "hypothesis", toml_str(hypothesis));
  }
  *spec_path = o_.work_dir + "/step-" + std::to_string(n) + ".toml";
  {
    std::ofstream f(*spec_path);
    f << toml;
    if (!f) return runtime_error(*spec_path + ": cannot write");
  }
  // A spec the lab would refuse is refused here, with the lab's own message.
  if (auto chk = parse_spec_file(*spec_path, o_.repo_root); !chk) return "the generated spec is invalid: " + chk.error().message;
  return std::string();
}

Status Agent::try_proposal(int n, const Proposal& p) {
  Candidate c;
  if (std::string why = check(p, &c); !why.empty()) return refuse(n, p, why);
  // On every way out, a diff's worktree goes; its branch stays only when the candidate is kept.
  bool keep_branch = false;
  struct Cleanup {
    Agent* a;
    const Candidate& c;
    const bool& keep;
    ~Cleanup() {
      if (!c.tree.empty()) (void)capture({"git", "worktree", "remove", "--force", c.tree}, a->o_.repo_root);
      if (!keep && !c.branch.empty()) (void)capture({"git", "branch", "-D", c.branch}, a->o_.repo_root);
    }
  } cleanup{this, c, keep_branch};
  if (!p.diff.empty()) {
    auto why = make_branch(n, p, &c);
    if (!why) return why.error();
    if (!why->empty()) return refuse(n, p, *why);
  }
  c.change = (p.diff.empty() ? "" : "diff on " + c.branch + (p.params.empty() ? "" : "; ")) +
             (p.params.empty() ? "" : change_text(current_, c.args, o_.nproc));
  std::string spec_path, level;
  auto why = write_spec(n, p, c, &spec_path, &level);
  if (!why) return why.error();
  if (!why->empty()) return refuse(n, p, *why);

  progress("step " + std::to_string(n) + ": running " + c.change + " at the " + level + " level (" + spec_path + ")");
  std::vector<std::string> argv = {o_.self_bin, "lab", "run", spec_path, "--json", "--ledger", o_.ledger, "--quiet-wait",
                                   fmt(o_.quiet_wait_s, 6), "--note", "agent " + o_.run_id + " step " + std::to_string(n) + ": " + one_line(p.hypothesis, 300)};
  if (!o_.lab_bin.empty()) argv.insert(argv.end(), {"--bin", o_.lab_bin});
  ProcLimits lim;
  lim.timeout_s = 4 * 3600;
  const ProcResult r = run_process(argv, current_env(), o_.repo_root, lim);
  json rec = r.started && (r.exit_code == 0 || r.exit_code == 3 || r.exit_code == 4) ? json::parse(r.out, nullptr, false) : json();
  if (!rec.is_object()) {
    std::string tail = r.err;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    const std::string why = "lab run failed (" + r.failure() + ")" + (tail.empty() ? "" : ": " + one_line(tail.substr(tail.size() > 600 ? tail.size() - 600 : 0), 600));
    if (Status s = record_step(n, "error", {why}, p.raw); !s) return s;
    if (!o_.tune) messages_.push_back({{"role", "user"}, {"content", "Step " + std::to_string(n) + " could not be measured: " + why}});
    return Ok{};
  }
  Step s;
  s.n = n;
  s.outcome = jstr(rec, "verdict");
  s.id = jstr(rec, "id");
  s.change = c.change;
  s.branch = c.branch;
  if (const json* rs = jarr(rec, "reasons"))
    for (const auto& x : *rs)
      if (x.is_string()) s.reasons.push_back(x.get<std::string>());
  if (const json* st = jobj(rec, "stats"))
    for (auto it = st->begin(); it != st->end(); ++it)
      if (auto ratio = jnum(it.value(), "ratio")) s.ratios[it.key()] = *ratio;
  if (rec.value("reused", false)) {
    // The lab found an identical measurement and appended nothing: the step gets its own record
    // that points at the stored one.
    s.reasons.insert(s.reasons.begin(), "identical to " + s.id + ": the lab returned its stored record (nothing measured)");
    auto id = append_step(n, s.outcome, s.reasons, p.raw, {{"reused", s.id}});
    if (!id) return id.error();
    s.id = *id;
  }
  const bool kept = s.outcome == "accept";
  keep_branch = kept;
  if (kept && !c.branch.empty()) offered_.push_back(c.branch);
  if (kept) current_ = c.args;
  if (tune_ && tune_try_) tune_->feedback(*tune_try_, s.outcome);
  std::string ratios;
  for (const char* m : {"prefill_tok_s", "decode_tok_s", "ns_per_op"})
    if (s.ratios.contains(m)) ratios += std::string(ratios.empty() ? "" : ", ") + m + " x" + fmt(s.ratios[m].get<double>());
  learned_.push_back(c.change + ": " + s.outcome + (ratios.empty() ? "" : " (" + ratios + ")") +
                     (kept || s.reasons.empty() ? "" : "; " + one_line(s.reasons[0], 200)));
  progress("step " + std::to_string(n) + ": " + s.outcome + " (" + s.id + ")" + (ratios.empty() ? "" : ": " + ratios));
  if (!o_.tune) messages_.push_back({{"role", "user"}, {"content", feedback_text(s, rec)}});
  // The goal: a kept configuration that reaches every --target.
  if (kept && !o_.targets.empty()) {
    bool all = true;
    for (const auto& [m, v] : o_.targets) {
      const json* st = jobj(rec, "stats");
      const json* ms = st ? jobj(*st, m.c_str()) : nullptr;
      const auto got = ms ? jnum(*ms, "candidate_median") : std::nullopt;
      all &= got && (higher_is_better(m) ? *got >= v : *got <= v);
    }
    goal_met_ = all;
  }
  steps_.push_back(s);
  return Ok{};
}

std::string Agent::feedback_text(const Step& s, const json& rec) const {
  std::ostringstream t;
  t << "Step " << s.n << " (" << s.change << ") was measured: verdict " << s.outcome << " (" << s.id << ").\n";
  if (rec.contains("rejected_for") && rec["rejected_for"].is_string())
    t << "  rejected for a trust reason: " << rec["rejected_for"].get<std::string>()
      << " (the lab times and checks the runs itself; see the first reason)\n";
  for (const auto& r : s.reasons) t << "  reason: " << one_line(r, 300) << "\n";
  if (const json* st = jobj(rec, "stats"))
    for (auto it = st->begin(); it != st->end(); ++it) {
      t << "  " << it.key() << ": baseline " << fmt(jnum(it.value(), "baseline_median").value_or(0), 4) << ", candidate "
        << fmt(jnum(it.value(), "candidate_median").value_or(0), 4) << ", ratio " << fmt(jnum(it.value(), "ratio").value_or(0), 4) << "\n";
    }
  if (const json* c = jobj(rec, "correctness")) t << "  correctness: " << one_line(safe_dump(*c), 400) << "\n";
  if (const json* a = jarr(rec, "attribution")) {
    t << "  attribution (ms per run, largest changes first):";
    for (size_t i = 0; i < a->size() && i < 4; ++i) t << " " << jstr((*a)[i], "name") << " " << fmt(jnum((*a)[i], "delta_ms").value_or(0)) << ";";
    t << "\n";
  }
  t << "Current configuration now: " << current_.text() << ".";
  return t.str();
}

Expected<json> Agent::account() {
  json steps = json::array(), kept = json::array(), ids = json::array();
  int runs = 0;
  for (const auto& s : steps_) {
    steps.push_back({{"step", s.n}, {"outcome", s.outcome}, {"id", s.id}, {"change", s.change}, {"ratios", s.ratios},
                     {"reason", s.reasons.empty() ? "" : one_line(s.reasons[0], 300)}});
    ids.push_back(s.id);
    runs += s.outcome == "accept" || s.outcome == "reject" || s.outcome == "inconclusive";
    if (s.outcome == "accept") kept.push_back({{"step", s.n}, {"id", s.id}, {"change", s.change}, {"branch", s.branch}});
  }
  auto count = [&](const char* o) { return (int)std::count_if(steps_.begin(), steps_.end(), [&](const Step& s) { return s.outcome == o; }); };
  json learned = learned_;
  if (tune_)
    for (const auto& r : tune_->ranking()) learned.push_back("ranked " + r);
  if (const json* ops = jarr(ctx_.summary, "ops"); ops && !ops->empty())
    learned.push_back("largest op at the start: " + jstr((*ops)[0], "name") + " " + fmt(100 * jnum((*ops)[0], "share").value_or(0)) + "% of the time, " +
                      jstr((*ops)[0], "verdict"));
  json offered = json::array();
  for (const auto& b : offered_) offered.push_back({{"branch", b}, {"merge", "git merge " + b}});
  std::string summary = "agent " + o_.run_id + ": " + std::to_string(steps_.size()) + " steps, " + std::to_string(runs) + " run, " +
                        std::to_string(count("accept")) + " kept; " + start_.text() + " -> " + current_.text();
  json rec = {{"kind", "agent-account"},
              {"summary", summary},
              {"goal", o_.goal},
              {"goal_met", goal_met_},
              {"criteria_file", o_.criteria_name},
              {"criteria_sha256", o_.criteria_sha256},
              {"agent", {{"run", o_.run_id}, {"proposer", o_.tune ? "policy tune" : "llm " + o_.llm.model}, {"budget", o_.budget}}},
              {"tried", {{"steps", steps_.size()}, {"runs", runs}, {"accept", count("accept")}, {"reject", count("reject")},
                         {"inconclusive", count("inconclusive")}, {"refused", count("refused")}, {"skipped", count("skipped")},
                         {"error", count("error")}, {"llm_retries", llm_retries_}}},
              {"steps", steps},
              {"kept", kept},
              {"start_config", start_.text()},
              {"final_config", current_.text()},
              {"final_args", current_.to_args()},
              {"offered_for_merge", offered},
              {"learned", learned},
              {"stopped", stop_reason_.empty() ? (goal_met_ ? "the goal was met" : "the budget was spent") : stop_reason_},
              {"ids", ids}};
  if (o_.tune) rec["agent"]["space"] = o_.space.text(), rec["agent"]["space_configurations"] = o_.space.configurations();
  return append_record(o_.ledger, rec);
}

Expected<json> Agent::run() {
  progress("run " + o_.run_id + ": gathering context for " + current_.text());
  auto ctx = gather_context(o_, current_);
  if (!ctx) return ctx.error();
  ctx_ = *ctx;
  if (o_.tune) {
    tune_.emplace(o_.space, ctx_.summary, o_.nproc);
  } else {
    messages_.push_back(
        {{"role", "system"},
         {"content",
          "You propose performance experiments for Ouro, a C++ LLM inference engine with an optimization lab. Each proposal is "
          "measured by `ouro lab run` (baseline = the current configuration, candidate = your change, ABBA pairs, correctness "
          "checked) and judged by criteria that people wrote; you cannot change the criteria. Reply with one JSON object only: "
          "{\"hypothesis\": string, \"level\": \"kernel\"|\"op\"|\"engine\"|\"serve\", \"params\": {each launch parameter, null to leave it as it is: "
          "threads (integer 1.." + std::to_string(o_.nproc) + "), kv (f32|bf16|fp8|int8), weights (native|w8a8), isa "
          "(auto|avx512|avx2|scalar), ctx (integer)}, \"diff\": a unified diff against the repository (or \"\"), "
          "\"expected_effect\": string}. A diff may not touch tests/, experiments/criteria/ or experiments/ledger.jsonl."}});
    std::ostringstream u;
    u << "Goal: " << o_.goal << "\nCriteria '" << o_.criteria_name << "' (experiments/criteria/" << o_.criteria_name
      << ".toml):\n" << o_.criteria_text << "\n" << ctx_.text;
    messages_.push_back({{"role", "user"}, {"content", u.str()}});
  }
  for (int n = 1; n <= o_.budget && !goal_met_; ++n) {
    bool stop = false;
    auto p = propose(n, &stop);
    if (!p) return p.error();
    if (*p) {
      if (Status s = try_proposal(n, **p); !s) return s.error();
    }
    if (stop) break;
  }
  auto acc = account();
  if (!acc) return acc.error();
  return *acc;
}

}  // namespace

Expected<json> run_agent(const AgentOptions& o) {
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec) return runtime_error(o.work_dir + ": cannot create (" + ec.message() + ")");
  Agent a(o);
  return a.run();
}

std::string account_text(const json& a) {
  std::ostringstream t;
  t << jstr(a, "summary") << "\n";
  t << "goal: " << jstr(a, "goal") << (a.value("goal_met", false) ? " (met)" : "") << "; stopped: " << jstr(a, "stopped") << "\n";
  t << "tried:\n";
  if (const json* st = jarr(a, "steps"))
    for (const auto& s : *st)
      t << "  step " << jstr(s, "step") << "  " << jstr(s, "outcome") << "  " << (jstr(s, "id").empty() ? "-" : jstr(s, "id")) << "  "
        << jstr(s, "change") << (jstr(s, "outcome") == "accept" || jstr(s, "reason").empty() ? "" : "  — " + one_line(jstr(s, "reason"), 140))
        << "\n";
  t << "kept: " << jstr(a, "start_config") << " -> " << jstr(a, "final_config") << "\n";
  if (const json* off = jarr(a, "offered_for_merge"))
    for (const auto& b : *off) t << "offered for merge: " << jstr(b, "branch") << " (" << jstr(b, "merge") << ")\n";
  t << "learned:\n";
  if (const json* l = jarr(a, "learned"))
    for (const auto& x : *l)
      if (x.is_string()) t << "  " << one_line(x.get<std::string>(), 240) << "\n";
  t << "recorded as " << jstr(a, "id") << "\n";
  return t.str();
}

}  // namespace ouro::lab
