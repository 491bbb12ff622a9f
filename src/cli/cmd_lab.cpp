// ouro lab: experiments (run, rerun, check, plan, bisect) and the ledger (log, show, verify, report).
// The machinery is in src/lab/; this file parses flags, prints, and appends to the ledger.
#include "cli/cmd_lab.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "cli/common.h"
#include "lab/ledger.h"
#include "lab/measurement.h"
#include "lab/plan.h"
#include "lab/process.h"
#include "lab/runner.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ouro {

namespace {

const char* kUsage =
    "usage: ouro lab <command> ...\n"
    "  run SPEC       run an experiment: build, check correctness, measure ABBA, judge, record\n"
    "  check SPEC     parse and validate a spec and its criteria (nothing runs)\n"
    "  rerun ID       run a recorded experiment again on today's machine and compare\n"
    "  plan BASE CAND propose the cheapest specs that answer whether a change helps\n"
    "  bisect --good REV --bad REV SPEC   the first revision where the spec's verdict flips\n"
    "  log            one line per experiment, newest first\n"
    "  show ID        one experiment in full\n"
    "  verify         check the ledger's hash chain\n"
    "  report         one self-contained HTML page of the ledger\n"
    "Specs, criteria and the ledger: docs/lab.md. Run 'ouro lab <command> --help' for options.\n";

const char* kRunUsage =
    "usage: ouro lab run SPEC [--json] [--note TEXT] [--bin PATH] [--no-build] [--ledger PATH | --no-ledger]\n"
    "                    [--out-dir DIR] [--quiet-wait SECONDS] [--force] [--correctness-only]\n"
    "  Builds each side (git worktree + build dir per commit and options, cached; \"worktree\" builds\n"
    "  the checkout's build/), waits for a quiet machine, checks correctness on the spec's inputs and\n"
    "  on held-out inputs from a fresh seed, runs warm-up then baseline/candidate pairs in ABBA order\n"
    "  with a bandwidth figure before each pair, adds pairs while a criterion is inconclusive (up to\n"
    "  max_repeats), and appends the record to experiments/ledger.jsonl.\n"
    "  An identical request (same resolved revisions or binaries, options, workload, repeats, metrics,\n"
    "  criteria and criteria file: the record's measurement_key) already in the ledger is not measured\n"
    "  again: its record is printed (--json: with \"reused\": true) and nothing is appended.\n"
    "  --force         measure even so; the new record says \"forced\": true and \"force_of\": ID\n"
    "  --correctness-only  only the correctness check of both sides (no timing, nothing recorded);\n"
    "                  the record's kind is \"correctness\", judged on the correctness criteria alone\n"
    "  --bin PATH      use this ouro binary for \"worktree\" sides without build options (no build)\n"
    "  --no-build      use the checkout's build/ouro as it is\n"
    "  --note TEXT     the proposer's note, kept in the record\n"
    "  exit status: 0 accept, 3 reject, 4 inconclusive, 1 error, 2 bad spec or flags\n";

const char* kCheckUsage = "usage: ouro lab check SPEC [--json]\n  Validates the spec and its criteria; prints the metrics and criteria it would use.\n";
const char* kRerunUsage =
    "usage: ouro lab rerun ID [--json] [--bin PATH] [--no-build] [--ledger PATH | --no-ledger]\n"
    "  Runs the record's spec again with its revisions pinned to the recorded commits, on today's\n"
    "  machine, and compares: same verdict? each metric's new ratio inside the recorded interval?\n";
const char* kBisectUsage =
    "usage: ouro lab bisect --good REV --bad REV SPEC [--json] [--ledger PATH | --no-ledger]\n"
    "  Runs SPEC with its candidate at revisions between GOOD and BAD (first-parent history) and\n"
    "  finds the first revision whose verdict differs from GOOD's. Builds are reused from the cache.\n";

int verdict_exit(const json& rec) {
  const std::string v = rec.value("verdict", "");
  return v == "accept" ? 0 : v == "reject" ? 3 : 4;
}

std::string self_command(const char* sub, int argc, char** argv) {
  std::string s = std::string("ouro lab ") + sub;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool plain = !a.empty() && a.find_first_of(" \t\"'$`\\;&|<>()*?") == std::string::npos;
    s += " " + (plain ? a : "'" + a + "'");
  }
  return s;
}

Expected<std::string> repo_root() { return lab::repo_root_of(fs::current_path().string()); }

std::string ledger_path(const Args& a, const std::string& root) {
  return a.has("--ledger") ? a.str("--ledger") : root + "/experiments/ledger.jsonl";
}

Expected<lab::BuildContext> build_context(const Args& a, const std::string& root) {
  lab::BuildContext b;
  b.repo_root = root;
  b.cache_root = lab::default_cache_root();
  b.no_build = a.has("--no-build");
  if (a.has("--bin")) {
    std::error_code ec;
    const std::string p = fs::absolute(a.str("--bin"), ec).string();
    if (access(p.c_str(), X_OK) != 0) return usage_error("--bin: no executable at " + a.str("--bin"));
    b.worktree_bin = p;
  }
  return b;
}

// Appends unless --no-ledger; prints; returns the exit status.
int finish(const Args& a, const std::string& root, json rec) {
  if (!a.has("--no-ledger")) {
    auto stored = lab::append_record(ledger_path(a, root), rec, a.has("--ledger") ? "" : root);
    if (!stored) return report(stored.error());
    rec = *stored;
  }
  if (a.has("--json")) {
    std::puts(rec.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::fputs(lab::summarize_record(rec).c_str(), stdout);
    if (rec.contains("id")) std::printf("recorded as %s in %s\n", rec["id"].get<std::string>().c_str(), ledger_path(a, root).c_str());
  }
  return verdict_exit(rec);
}

const std::vector<std::string> kRunValue = {"--note", "--bin", "--ledger", "--out-dir", "--quiet-wait"};
const std::vector<std::string> kRunBool = {"--json", "--no-build", "--no-ledger"};

Expected<lab::RunOptions> run_options(const Args& a, const std::string& root, const std::string& command) {
  auto bc = build_context(a, root);
  if (!bc) return bc.error();
  lab::RunOptions o;
  o.build = *bc;
  o.out_dir = a.str("--out-dir");
  o.note = a.str("--note");
  o.command = command;
  auto qw = a.number("--quiet-wait", 20, 0, 3600);
  if (!qw) return qw.error();
  o.quiet_wait_s = *qw;
  if (a.has("--ledger") && a.has("--no-ledger")) return usage_error("--ledger and --no-ledger contradict each other");
  return o;
}

}  // namespace

int lab_run(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kRunUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, kRunValue, concat(kRunBool, {"--force", "--correctness-only"})); !s) return report(s.error());
  if (a.positional().size() != 1) return report(usage_error("lab run needs one SPEC file"));
  auto root = repo_root();
  if (!root) return report(root.error());
  auto spec = lab::parse_spec_file(a.positional()[0], *root);
  if (!spec) return report(spec.error());
  auto opt = run_options(a, *root, self_command("run", argc, argv));
  if (!opt) return report(opt.error());
  if (a.has("--correctness-only")) {
    if (a.has("--ledger") || a.has("--force")) return report(usage_error("--correctness-only records nothing: drop --ledger/--force"));
    opt->correctness_only = true;
    opt->quiet_wait_s = 0;
    auto rec = lab::run_experiment(*spec, *opt);
    if (!rec) return report(rec.error());
    if (a.has("--json")) std::puts(lab::safe_dump(*rec).c_str());
    else std::fputs(lab::summarize_record(*rec).c_str(), stdout);
    return verdict_exit(*rec);
  }
  // De-duplication: the same measurement request returns the stored record (docs/lab.md).
  auto key = lab::measurement_key(*spec, opt->build);
  if (!key) return report(key.error());
  std::optional<lab::StoredMeasurement> stored;
  if (!a.has("--no-ledger")) {
    // Only a ledger that verifies can vouch for a stored record (and only such a ledger would
    // take the new one: say so before measuring rather than after).
    const std::string path = ledger_path(a, *root);
    if (fs::exists(path)) {
      lab::VerifyResult v = lab::verify_ledger(path, a.has("--ledger") ? "" : *root);
      if (!v.ok())
        return report(runtime_error(path + ": refusing to use a ledger that fails verification: " + v.problems[0] +
                                    (v.problems.size() > 1 ? " (and " + std::to_string(v.problems.size() - 1) + " more)" : "")));
    }
    auto recs = lab::read_ledger(path);
    if (!recs) return report(recs.error());
    stored = lab::find_measurement(*recs, *key);
  }
  if (stored && !a.has("--force")) {
    json rec = stored->record;
    const std::string id = rec.value("id", std::string("?"));
    if (a.has("--json")) {
      rec["reused"] = true;
      rec["identical_records"] = stored->ids;
      std::puts(lab::safe_dump(rec).c_str());
    } else {
      std::printf("identical to %s: returning the stored record (use --force to measure again)\n", id.c_str());
      std::fputs(lab::summarize_record(rec).c_str(), stdout);
    }
    std::fprintf(stderr, "lab: identical to %s: returning the stored record (use --force to measure again)\n", id.c_str());
    return verdict_exit(rec);
  }
  auto rec = lab::run_experiment(*spec, *opt);
  if (!rec) return report(rec.error());
  (*rec)["measurement_key"] = *key;
  if (stored) {
    (*rec)["forced"] = true;
    (*rec)["force_of"] = stored->record.value("id", std::string("?"));
  }
  return finish(a, *root, *rec);
}

int lab_check(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kCheckUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, {}, {"--json"}); !s) return report(s.error());
  if (a.positional().size() != 1) return report(usage_error("lab check needs one SPEC file"));
  auto root = repo_root();
  if (!root) return report(root.error());
  auto spec = lab::parse_spec_file(a.positional()[0], *root);
  if (!spec) return report(spec.error());
  if (a.has("--json")) {
    std::puts(lab::spec_to_json(*spec).dump().c_str());
  } else {
    std::printf("%s: ok (level %s)\nmetrics:", a.positional()[0].c_str(), lab::level_name(spec->level));
    for (const auto& m : spec->metrics) std::printf(" %s", m.c_str());
    std::printf("\ncriteria:\n");
    for (const auto& c : spec->criteria) std::printf("  %s   [%s]\n", c.text.c_str(), c.source.c_str());
  }
  return 0;
}

int lab_rerun(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kRerunUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, kRunValue, kRunBool); !s) return report(s.error());
  if (a.positional().size() != 1) return report(usage_error("lab rerun needs one record ID"));
  auto root = repo_root();
  if (!root) return report(root.error());
  auto recs = lab::read_ledger(ledger_path(a, *root));
  if (!recs) return report(recs.error());
  auto old = lab::find_record(*recs, a.positional()[0]);
  if (!old) return report(old.error());
  if (!old->contains("spec_toml") || !(*old)["spec_toml"].is_string())
    return report(runtime_error("record " + old->value("id", std::string("?")) + " holds no spec text to rerun"));
  auto spec = lab::parse_spec_text((*old)["spec_toml"].get<std::string>(), old->value("spec_path", std::string("(record)")), *root);
  if (!spec) return report(spec.error());
  // Pin each side to the recorded commit (a recorded dirty working tree cannot be reproduced exactly).
  std::vector<std::string> warnings;
  const json revs = old->value("revisions", json::object());
  for (auto [side, name] : {std::pair{&spec->baseline, "baseline"}, std::pair{&spec->candidate, "candidate"}}) {
    const json r = revs.value(name, json::object());
    const std::string commit = r.value("commit", std::string());
    if (r.value("dirty", false))
      warnings.push_back(std::string(name) + " was an uncommitted working tree: rerun uses the working tree as it is now");
    else if (!commit.empty())
      side->revision = commit;
  }
  auto opt = run_options(a, *root, self_command("rerun", argc, argv));
  if (!opt) return report(opt.error());
  for (const auto& w : warnings) std::fprintf(stderr, "lab: %s\n", w.c_str());
  auto rec = lab::run_experiment(*spec, *opt);
  if (!rec) return report(rec.error());
  json& r = *rec;
  r["kind"] = "rerun";
  if (auto key = lab::measurement_key(*spec, opt->build)) r["measurement_key"] = *key;
  r["rerun_of"] = old->value("id", std::string());
  json cmp = json::object();
  bool inside_all = true;
  const json ostats = old->value("stats", json::object());
  for (auto it = r["stats"].begin(); r.contains("stats") && it != r["stats"].end(); ++it) {
    if (!ostats.contains(it.key())) continue;
    const json& o = ostats[it.key()];
    const json ci = o.value("ci", json::array());
    const double nr = it.value().value("ratio", 0.0);
    const bool inside = ci.size() == 2 && ci[0].is_number() && ci[1].is_number() && nr >= ci[0].get<double>() && nr <= ci[1].get<double>();
    inside_all &= inside;
    cmp[it.key()] = {{"recorded_ratio", o.value("ratio", 0.0)}, {"recorded_ci", ci}, {"new_ratio", nr}, {"inside_recorded_ci", inside}};
  }
  const bool same = r.value("verdict", "") == old->value("verdict", "");
  r["rerun_comparison"] = {{"metrics", cmp}, {"same_verdict", same}, {"ratios_inside_recorded_ci", inside_all}, {"warnings", warnings}};
  r["reasons"].push_back(std::string("rerun of ") + old->value("id", std::string()) + ": verdict " + (same ? "reproduced" : "differs") +
                         " (was " + old->value("verdict", std::string("?")) + "); ratios " +
                         (inside_all ? "inside" : "not all inside") + " the recorded intervals");
  return finish(a, *root, r);
}

int lab_bisect(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kBisectUsage, stdout); return 0; }
  Args a;
  std::vector<std::string> value = kRunValue;
  value.insert(value.end(), {"--good", "--bad"});
  if (Status s = a.parse(argc, argv, value, kRunBool); !s) return report(s.error());
  if (a.positional().size() != 1) return report(usage_error("lab bisect needs one SPEC file"));
  if (!a.has("--good") || !a.has("--bad")) return report(usage_error("lab bisect needs --good REV and --bad REV"));
  auto root = repo_root();
  if (!root) return report(root.error());
  auto spec = lab::parse_spec_file(a.positional()[0], *root);
  if (!spec) return report(spec.error());
  auto opt = run_options(a, *root, self_command("bisect", argc, argv));
  if (!opt) return report(opt.error());
  auto good = lab::resolve_commit(*root, a.str("--good"));
  if (!good) return report(good.error());
  auto bad = lab::resolve_commit(*root, a.str("--bad"));
  if (!bad) return report(bad.error());
  auto list = lab::capture({"git", "rev-list", "--first-parent", "--reverse", *good + ".." + *bad}, *root);
  if (!list) return report(list.error());
  std::vector<std::string> commits = {*good};
  for (size_t i = 0; i < list->size();) {
    const size_t nl = list->find('\n', i);
    const std::string c = list->substr(i, nl == std::string::npos ? std::string::npos : nl - i);
    if (!c.empty()) commits.push_back(c);
    if (nl == std::string::npos) break;
    i = nl + 1;
  }
  if (commits.size() < 2 || commits.back() != *bad)
    return report(usage_error("--bad is not a first-parent descendant of --good"));
  json steps = json::array();
  std::map<size_t, std::string> verdicts;
  auto verdict_at = [&](size_t i) -> Expected<std::string> {
    if (verdicts.count(i)) return verdicts[i];
    lab::Spec s = *spec;
    s.candidate.revision = commits[i];
    std::fprintf(stderr, "lab bisect: testing %s (%zu of %zu)\n", commits[i].substr(0, 12).c_str(), i, commits.size() - 1);
    auto rec = lab::run_experiment(s, *opt);
    if (!rec) return rec.error();
    (*rec)["kind"] = "bisect";
    if (auto key = lab::measurement_key(s, opt->build)) (*rec)["measurement_key"] = *key;
    (*rec)["bisect"] = {{"good", *good}, {"bad", *bad}, {"commit", commits[i]}};
    if (!a.has("--no-ledger")) {
      auto st = lab::append_record(ledger_path(a, *root), *rec, a.has("--ledger") ? "" : *root);
      if (!st) return st.error();
      *rec = *st;
    }
    const std::string v = rec->value("verdict", "");
    steps.push_back({{"commit", commits[i]}, {"verdict", v}, {"id", rec->value("id", std::string())}});
    verdicts[i] = v;
    return v;
  };
  auto vg = verdict_at(0);
  if (!vg) return report(vg.error());
  auto vb = verdict_at(commits.size() - 1);
  if (!vb) return report(vb.error());
  json out = {{"good", *good}, {"bad", *bad}, {"good_verdict", *vg}, {"bad_verdict", *vb}};
  int rc = 0;
  if (*vg == *vb) {
    out["error"] = "the verdict does not flip between --good and --bad (both " + *vg + ")";
    rc = 1;
  } else if (*vg == "inconclusive" || *vb == "inconclusive") {
    out["error"] = "an end point is inconclusive: raise repeats so both ends are decided";
    rc = 1;
  } else {
    size_t lo = 0, hi = commits.size() - 1;  // verdict(lo) == good's, verdict(hi) == bad's
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      auto v = verdict_at(mid);
      if (!v) return report(v.error());
      if (*v == "inconclusive") {
        out["error"] = "inconclusive at " + commits[mid] + ": raise repeats";
        rc = 1;
        break;
      }
      (*v == *vg ? lo : hi) = mid;
    }
    if (rc == 0) out["first_bad"] = commits[hi];
  }
  out["steps"] = steps;
  if (a.has("--json")) {
    std::puts(out.dump().c_str());
  } else {
    for (const auto& s : steps) std::printf("%s  %s\n", s["commit"].get<std::string>().substr(0, 12).c_str(), s["verdict"].get<std::string>().c_str());
    if (out.contains("first_bad")) std::printf("first revision with verdict '%s': %s\n", vb->c_str(), out["first_bad"].get<std::string>().c_str());
    else std::fprintf(stderr, "ouro: %s\n", out["error"].get<std::string>().c_str());
  }
  return rc;
}

int lab_plan(int argc, char** argv) {
  static const char* kPlanUsage =
      "usage: ouro lab plan BASE CAND [-o DIR] [--json]\n"
      "       ouro lab plan --base-args \"ARGS\" --cand-args \"ARGS\" [--revision REV] [-o DIR] [--json]\n"
      "  Reads the diff between two revisions (CAND may be \"worktree\") or two launch configurations,\n"
      "  names the kernels, ops and parameters it touches, and writes the cheapest specs that would\n"
      "  answer whether it helps (kernel microbenchmarks first, the engine only when needed) to DIR\n"
      "  (default experiments/specs/planned). Edit the hypothesis, then `ouro lab run` them.\n";
  if (wants_help(argc, argv)) { std::fputs(kPlanUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, {"-o", "--base-args", "--cand-args", "--revision"}, {"--json"}); !s) return report(s.error());
  auto root = repo_root();
  if (!root) return report(root.error());
  Expected<lab::Plan> plan = runtime_error("");
  if (a.has("--base-args") || a.has("--cand-args")) {
    if (!a.positional().empty()) return report(usage_error("give either BASE CAND revisions or --base-args/--cand-args, not both"));
    plan = lab::plan_launch(a.str("--base-args"), a.str("--cand-args"), a.str("--revision", "worktree"));
  } else {
    if (a.positional().size() != 2) return report(usage_error("lab plan needs BASE and CAND (revisions), or --base-args/--cand-args"));
    plan = lab::plan_revisions(*root, a.positional()[0], a.positional()[1]);
  }
  if (!plan) return report(plan.error());
  const std::string dir = a.str("-o", *root + "/experiments/specs/planned");
  std::error_code ec;
  fs::create_directories(dir, ec);
  json files = json::array();
  for (const auto& s : plan->specs) {
    const std::string path = dir + "/" + s.name + ".toml";
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f || std::fputs(s.toml.c_str(), f) < 0) {
      if (f) std::fclose(f);
      return report(runtime_error(path + ": cannot write"));
    }
    std::fclose(f);
    files.push_back({{"path", path}, {"level", s.level}, {"why", s.why}});
  }
  if (a.has("--json")) {
    std::puts(json{{"touched", plan->touched}, {"kernels", plan->kernels}, {"specs", files}, {"notes", plan->notes}}.dump().c_str());
    return 0;
  }
  std::printf("touched:\n");
  for (const auto& t : plan->touched) std::printf("  %s\n", t.c_str());
  if (!plan->kernels.empty()) {
    std::printf("kernels reached:");
    for (const auto& k : plan->kernels) std::printf(" %s", k.c_str());
    std::printf("\n");
  }
  std::printf("proposed specs (cheapest first):\n");
  for (const auto& f : files)
    std::printf("  [%s] %s\n      because %s\n", f["level"].get<std::string>().c_str(), f["path"].get<std::string>().c_str(),
                f["why"].get<std::string>().c_str());
  for (const auto& n : plan->notes) std::printf("note: %s\n", n.c_str());
  return 0;
}

int cmd_lab(int argc, char** argv) {
  if (argc < 1 || wants_help(1, argv)) {
    std::fputs(kUsage, argc < 1 ? stderr : stdout);
    return argc < 1 ? 2 : 0;
  }
  struct { const char* name; int (*fn)(int, char**); } cmds[] = {
      {"run", lab_run},       {"check", lab_check}, {"rerun", lab_rerun}, {"plan", lab_plan},   {"bisect", lab_bisect},
      {"log", lab_log},       {"show", lab_show},   {"verify", lab_verify}, {"report", lab_report},
  };
  for (const auto& c : cmds)
    if (!std::strcmp(argv[0], c.name)) return c.fn(argc - 1, argv + 1);
  std::fprintf(stderr, "ouro: unknown lab command '%s' (run 'ouro lab --help')\n", argv[0]);
  return 2;
}

}  // namespace ouro
