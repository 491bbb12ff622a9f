// ouro agent: flags and printing; the loop is in src/lab/agent.cpp (docs/agents.md).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <toml++/toml.h>

#include "cli/common.h"
#include "core/sha256.h"
#include "agent/agent.h"
#include "lab/builds.h"
#include "lab/ledger.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ouro {

namespace {

const char* kAgentUsage =
    "usage: ouro agent --goal TEXT --criteria NAME (--llm URL --llm-model NAME | --policy tune)\n"
    "                  [--budget N] [--json] [--base-args \"ARGS\"] [--space NAME=v1,v2 ...] [--target METRIC=VALUE]\n"
    "                  [-m MODEL] [--prompt-len N] [--gen-len N] [--depth N] [--repeats N] [--bench-repeats N]\n"
    "                  [--bin PATH] [--ledger PATH] [--quiet-wait SECONDS] [--llm-key KEY]\n"
    "  The loop that proposes, tests and learns: gathers context (probe, a traced bench of the current\n"
    "  configuration, its top ops with roofline verdicts, related ledger records), asks for a proposal,\n"
    "  validates it, routes it to the cheapest level (lab plan), runs it (lab run), feeds the verdict\n"
    "  back, and repeats; every step is a ledger record, and a final account says what was tried,\n"
    "  kept and learned. Diff candidates are committed on agent/<run>-<step> branches in worktrees\n"
    "  under the cache and only offered for merge.\n"
    "  --goal TEXT         what to achieve (given to the proposer, kept in the records)\n"
    "  --criteria NAME     experiments/criteria/NAME.toml: judges every experiment (read, never written)\n"
    "  --llm URL           an OpenAI-compatible endpoint (e.g. http://127.0.0.1:8080/v1) proposes;\n"
    "  --llm-model NAME    its model; --llm-key KEY or OPENAI_API_KEY for a key\n"
    "  --policy tune       the built-in search over launch parameters, ordered by the trace\n"
    "  --budget N          steps (proposals, whether run, refused or skipped), default 4\n"
    "  --base-args \"ARGS\"  the current launch configuration (e.g. \"-t 1\"), default the engine's\n"
    "  --space NAME=V,V    tune's values for a parameter (repeatable; threads, kv, weights, isa, ctx)\n"
    "  --target M=V        stop when a kept configuration reaches metric M (e.g. decode_tok_s=200)\n"
    "  workload: -m/--model, --prompt-len (128), --gen-len (32), --depth (0), --repeats (ABBA pairs, 5),\n"
    "            --bench-repeats (1)\n"
    "  --bin PATH          the binary for the lab's \"worktree\" sides (no build)\n"
    "  --ledger PATH       where records go (default experiments/ledger.jsonl)\n"
    "  --quiet-wait S      passed to lab run (default 20)\n"
    "  exit status: 0 the loop ran to its end, 1 an error, 2 bad flags\n";

// --space may repeat; Args keeps one value per flag, so the occurrences are taken out first.
std::vector<std::string> take_repeated(int& argc, char** argv, const std::string& flag, std::string* error) {
  std::vector<std::string> out;
  int w = 0;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == flag) {
      if (i + 1 >= argc) {
        *error = "flag " + flag + " needs a value";
        return out;
      }
      out.push_back(argv[++i]);
    } else if (a.rfind(flag + "=", 0) == 0) {
      out.push_back(a.substr(flag.size() + 1));
    } else {
      argv[w++] = argv[i];
    }
  }
  argc = w;
  return out;
}

std::string run_id() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[64];
  std::snprintf(b, sizeof b, "%04d%02d%02d-%02d%02d%02d-%x", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                tm.tm_sec, (unsigned)getpid() & 0xffff);
  return b;
}

}  // namespace

int cmd_agent(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kAgentUsage, stdout);
    return 0;
  }
  std::string err;
  const std::vector<std::string> space_flags = take_repeated(argc, argv, "--space", &err);
  if (!err.empty()) return report(usage_error(err));
  Args a;
  if (Status s = a.parse(argc, argv,
                         {"--goal", "--criteria", "--llm", "--llm-model", "--llm-key", "--policy", "--budget", "--base-args", "--target",
                          "-m", "--model", "--prompt-len", "--gen-len", "--depth", "--repeats", "--bench-repeats", "--bin", "--ledger",
                          "--quiet-wait"},
                         {"--json"});
      !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "' (see --help)"));
  lab::AgentOptions o;
  o.nproc = std::max(1u, std::thread::hardware_concurrency());
  o.goal = a.str("--goal");
  if (o.goal.find_first_not_of(" \t\n") == std::string::npos) return report(usage_error("--goal TEXT is required"));
  if (!a.has("--criteria")) return report(usage_error("--criteria NAME is required (a file experiments/criteria/NAME.toml)"));
  o.criteria_name = a.str("--criteria");
  if (o.criteria_name.empty() || o.criteria_name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos)
    return report(usage_error("--criteria: '" + o.criteria_name + "' is not a criteria name (letters, digits, - and _)"));

  // Exactly one proposer.
  const bool llm = a.has("--llm"), tune = a.has("--policy");
  if (llm == tune) return report(usage_error("give exactly one proposer: --llm URL --llm-model NAME, or --policy tune"));
  if (tune && a.str("--policy") != "tune") return report(usage_error("--policy: '" + a.str("--policy") + "' is not a policy (tune)"));
  if (tune && (a.has("--llm-model") || a.has("--llm-key"))) return report(usage_error("--llm-model/--llm-key need --llm"));
  if (!tune && !space_flags.empty()) return report(usage_error("--space is for --policy tune"));
  o.tune = tune;
  if (llm) {
    auto url = http::parse_url(a.str("--llm"));
    if (!url) return report(usage_error("--llm: " + url.error().message));
    if (!a.has("--llm-model") || a.str("--llm-model").empty()) return report(usage_error("--llm needs --llm-model NAME"));
    o.llm.url = *url;
    o.llm.model = a.str("--llm-model");
    const char* key = std::getenv("OPENAI_API_KEY");
    o.llm.api_key = a.has("--llm-key") ? a.str("--llm-key") : key ? key : "";
  }
  auto budget = a.integer("--budget", 4, 1, 1000);
  if (!budget) return report(budget.error());
  o.budget = (int)*budget;
  auto pl = a.integer("--prompt-len", 128, 1, 1 << 20);
  auto gl = a.integer("--gen-len", 32, 1, 1 << 20);
  auto depth = a.integer("--depth", 0, 0, 1 << 24);
  auto reps = a.integer("--repeats", 5, 2, 60);
  auto breps = a.integer("--bench-repeats", 1, 1, 100);
  auto qw = a.number("--quiet-wait", 20, 0, 3600);
  for (const auto* e : {&pl, &gl, &depth, &reps, &breps})
    if (!*e) return report(e->error());
  if (!qw) return report(qw.error());
  o.workload.prompt_len = (int)*pl;
  o.workload.gen_len = (int)*gl;
  o.workload.depth = (int)*depth;
  o.workload.repeats = (int)*reps;
  o.workload.bench_repeats = (int)*breps;
  o.quiet_wait_s = *qw;
  const std::string model = a.has("--model") ? a.str("--model") : a.str("-m");
  if (!model.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(model, ec)) return report(usage_error("--model: no file at " + model));
    o.workload.model = fs::absolute(model, ec).string();
  }
  auto base = lab::parse_launch_args(a.str("--base-args"), "--base-args", o.nproc);
  if (!base) return report(base.error());
  o.base = *base;
  if (tune) {
    auto sp = lab::parse_space(space_flags, o.nproc);
    if (!sp) return report(sp.error());
    o.space = *sp;
  }
  if (a.has("--target")) {
    const std::string t = a.str("--target");
    const auto eq = t.find('=');
    char* end = nullptr;
    const double v = eq == std::string::npos ? 0 : std::strtod(t.c_str() + eq + 1, &end);
    if (eq == std::string::npos || eq == 0 || !end || *end != '\0' || end == t.c_str() + eq + 1)
      return report(usage_error("--target: '" + t + "' is not METRIC=VALUE (e.g. decode_tok_s=200)"));
    const std::string m = t.substr(0, eq);
    if (!lab::known_metric(lab::Level::kEngine, m) || m.rfind("span.", 0) == 0)
      return report(usage_error("--target: '" + m + "' is not an engine metric (prefill_tok_s, decode_tok_s, peak_rss_mib, wall_s)"));
    o.targets.push_back({m, v});
  }
  if (a.has("--bin")) {
    std::error_code ec;
    o.lab_bin = fs::absolute(a.str("--bin"), ec).string();
    if (access(o.lab_bin.c_str(), X_OK) != 0) return report(usage_error("--bin: no executable at " + a.str("--bin")));
  }

  // The repository, its criteria file (read and hashed; the agent never writes it), the ledger.
  auto root = lab::repo_root_of(fs::current_path().string());
  if (!root) return report(root.error());
  o.repo_root = *root;
  const std::string cpath = o.repo_root + "/experiments/criteria/" + o.criteria_name + ".toml";
  {
    std::ifstream f(cpath, std::ios::binary);
    if (!f) return report(usage_error("--criteria: no criteria named '" + o.criteria_name + "' (" + cpath + " is missing)"));
    std::ostringstream ss;
    ss << f.rdbuf();
    o.criteria_text = ss.str();
  }
  o.criteria_sha256 = sha256_hex(o.criteria_text);
  try {
    const toml::table t = toml::parse(o.criteria_text, cpath);
    if (const auto* lv = t["levels"].as_array())
      for (const auto& x : *lv)
        if (const auto* s = x.as_string()) o.criteria_levels.push_back(s->get());
  } catch (const toml::parse_error& e) {
    return report(usage_error(cpath + ": " + std::string(e.description())));
  }
  if (o.criteria_levels.empty()) o.criteria_levels = {"engine"};
  o.ledger = a.has("--ledger") ? fs::absolute(a.str("--ledger")).string() : o.repo_root + "/experiments/ledger.jsonl";
  std::error_code ec;
  o.self_bin = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec || o.self_bin.empty()) return report(runtime_error("cannot find this binary (/proc/self/exe)"));
  o.run_id = run_id();
  o.work_dir = fs::path(lab::default_cache_root()).parent_path().string() + "/agent/" + o.run_id;
  // A damaged ledger is never appended to: find out before any step runs.
  if (auto v = lab::verify_ledger(o.ledger, a.has("--ledger") ? "" : o.repo_root); !v.ok())
    return report(runtime_error(o.ledger + ": fails verification (" + v.problems[0] + "); run 'ouro lab verify'"));

  auto account = lab::run_agent(o);
  if (!account) return report(account.error());
  if (a.has("--json"))
    std::puts(account->dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  else
    std::fputs(lab::account_text(*account).c_str(), stdout);
  return 0;
}

}  // namespace ouro
