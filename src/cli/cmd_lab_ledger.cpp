// ouro lab verify | log | show | report: reading the experiment ledger (src/lab/ledger.h) and
// rendering its HTML report (src/lab/report.h). cmd_lab.cpp dispatches here; each function gets
// the arguments after its subcommand's name.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cmd_lab.h"
#include "cli/common.h"
#include "lab/ledger.h"
#include "lab/report.h"

namespace ouro {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kLedgerHelp =
    "  --ledger PATH  the ledger file (default: <repo>/experiments/ledger.jsonl, where <repo> is the git\n"
    "                 top level of the current directory, or the current directory outside git)\n";

const char* kVerifyUsage =
    "usage: ouro lab verify [--ledger PATH] [--json]\n"
    "  Recomputes every record's hash and checks the chain: seq 1, 2, 3... with matching ids, each\n"
    "  record's prev equal to the previous record's hash, every line a JSON object. When the ledger is\n"
    "  in a git repository and committed, the committed version must be a prefix of the file (committed\n"
    "  records were not edited, deleted or truncated). Prints 'ledger OK: N records' and exits 0, or\n"
    "  prints one line per problem (naming the line and record) and exits 1.\n";

const char* kLogUsage =
    "usage: ouro lab log [--verdict V] [--metric NAME] [--grep TEXT] [-n N] [--json] [--ledger PATH]\n"
    "  One line per experiment, newest first: id, date, verdict, level, the headline metric's\n"
    "  candidate/baseline ratio with the interval the verdict used (99% trimmed-mean t; 95% bootstrap\n"
    "  in records from before 2026-12-04), and the question.\n"
    "  --verdict V    only accept, reject or inconclusive records (or ouro agent's refused, skipped, error)\n"
    "  --metric NAME  only records with statistics for NAME, and show NAME's ratio instead of the headline\n"
    "  --grep TEXT    only records whose id, question, hypothesis, command, spec path, reasons or note\n"
    "                 contain TEXT (case-insensitive)\n"
    "  -n N           at most N records\n"
    "  --json         the matching records as a JSON array (full records, newest first)\n";

const char* kShowUsage =
    "usage: ouro lab show ID [--json] [--ledger PATH]\n"
    "  Everything recorded about one experiment: question, hypothesis, revisions, command, machine,\n"
    "  per-metric statistics, correctness, criteria verdicts, reasons, attribution and note.\n"
    "  ID: an id (E0007), a number (7), or at least 6 hex digits of the record's hash.\n"
    "  --json   the record as stored (one JSON object)\n";

const char* kReportUsage =
    "usage: ouro lab report [-o FILE] [--title T] [--ledger PATH]\n"
    "  Writes one self-contained HTML page (no external resources): the verdict table (filterable by\n"
    "  verdict), per experiment a strip plot of each metric's baseline and candidate samples, and the\n"
    "  trend of the headline figures over accepted experiments.\n"
    "  -o FILE     output file (default: <repo>/experiments/report.html)\n"
    "  --title T   page title (default: 'Ouro experiments')\n";

std::string usage_with_ledger(const char* u) { return std::string(u) + kLedgerHelp; }

std::string repo_root() {
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  if (auto top = lab::git_toplevel(cwd.empty() ? "." : cwd)) return *top;
  return cwd.empty() ? "." : cwd;
}

// Parses flags (--ledger always accepted), answers --help, and resolves the ledger path.
// Returns -1 to continue, or the exit code.
int parse(Args& a, int argc, char** argv, std::vector<std::string> value_flags, const std::vector<std::string>& bool_flags,
          const char* usage, size_t max_pos, std::string* ledger) {
  if (wants_help(argc, argv)) {
    std::fputs(usage_with_ledger(usage).c_str(), stdout);
    return 0;
  }
  value_flags.push_back("--ledger");
  if (Status s = a.parse(argc, argv, value_flags, bool_flags); !s) return report(s.error());
  if (a.positional().size() > max_pos) return report(usage_error("unexpected argument '" + a.positional()[max_pos] + "'"));
  if (a.has("--ledger") && a.str("--ledger").empty()) return report(usage_error("flag --ledger needs a file name"));
  *ledger = a.has("--ledger") ? a.str("--ledger") : (fs::path(repo_root()) / "experiments" / "ledger.jsonl").string();
  return -1;
}

void print_json(const json& j) { std::puts(lab::safe_dump(j).c_str()); }

// Records for log/show/report. A missing ledger is an error for show and report (the path is
// probably wrong); for log it is just "nothing yet". A chain that fails verification is a warning:
// the records are still worth reading, but the user should know.
Expected<std::vector<json>> load(const std::string& path, bool missing_ok) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (missing_ok) return std::vector<json>{};
    return runtime_error(path + ": no ledger here (no experiment recorded yet, or pass --ledger PATH)");
  }
  auto recs = lab::read_ledger(path);
  if (!recs) return recs.error();
  const lab::VerifyResult v = lab::verify_ledger(path, "");
  if (!v.ok())
    std::fprintf(stderr, "ouro: warning: %s fails verification (%zu problem%s; run 'ouro lab verify')\n", path.c_str(),
                 v.problems.size(), v.problems.size() == 1 ? "" : "s");
  return recs;
}

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

bool matches_grep(const json& r, const std::string& needle) {
  std::string hay = lab::jstr(r, "id") + "\n" + lab::jstr(r, "command") + "\n" + lab::jstr(r, "spec_path") + "\n" +
                    lab::jstr(r, "note") + "\n";
  if (const json* spec = lab::jobj(r, "spec")) hay += lab::jstr(*spec, "question") + "\n" + lab::jstr(*spec, "hypothesis") + "\n";
  if (const json* rs = lab::jarr(r, "reasons"))
    for (const json& x : *rs)
      if (x.is_string()) hay += x.get<std::string>() + "\n";
  return lower(hay).find(lower(needle)) != std::string::npos;
}

// Writes via a temporary file and rename, so a reader never sees half a page.
Status write_file(const std::string& path, const std::string& text) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return runtime_error(parent.string() + ": cannot create directory: " + ec.message());
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return runtime_error(path + ": cannot write");
    f << text;
    f.flush();
    if (!f) {
      fs::remove(tmp, ec);
      return runtime_error(path + ": write failed");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return runtime_error(path + ": cannot write: " + ec.message());
  }
  return Ok{};
}

}  // namespace

int lab_verify(int argc, char** argv) {
  Args a;
  std::string path;
  if (int rc = parse(a, argc, argv, {}, {"--json"}, kVerifyUsage, 0, &path); rc >= 0) return rc;
  // The committed-prefix check needs the repository that holds the ledger, wherever it is.
  std::error_code ec;
  const fs::path dir = fs::absolute(path, ec).parent_path();
  const std::string root = fs::is_directory(dir, ec) ? lab::git_toplevel(dir.string()).value_or("") : "";
  const lab::VerifyResult v = lab::verify_ledger(path, root);
  if (a.has("--json")) {
    print_json({{"ledger", path}, {"ok", v.ok()}, {"records", v.records}, {"problems", v.problems},
                {"git_checked", !root.empty()}});
    return v.ok() ? 0 : 1;
  }
  if (v.ok()) {
    std::printf("ledger OK: %zu record%s%s\n", v.records, v.records == 1 ? "" : "s",
                fs::exists(path, ec) ? "" : (" (" + path + " does not exist yet)").c_str());
    return 0;
  }
  for (const std::string& p : v.problems) std::printf("%s: %s\n", path.c_str(), p.c_str());
  std::fprintf(stderr, "ouro: %s fails verification: %zu problem%s\n", path.c_str(), v.problems.size(),
               v.problems.size() == 1 ? "" : "s");
  return 1;
}

int lab_log(int argc, char** argv) {
  Args a;
  std::string path;
  if (int rc = parse(a, argc, argv, {"--verdict", "--metric", "--grep", "-n"}, {"--json"}, kLogUsage, 0, &path); rc >= 0)
    return rc;
  const std::string verdict = a.str("--verdict"), metric = a.str("--metric"), grep = a.str("--grep");
  if (a.has("--verdict") && verdict != "accept" && verdict != "reject" && verdict != "inconclusive" && verdict != "refused" &&
      verdict != "skipped" && verdict != "error")
    return report(usage_error("flag --verdict: '" + verdict + "' is not one of accept, reject, inconclusive, refused, skipped, error"));
  auto n = a.integer("-n", 0, 1, 1000000000);
  if (!n) return report(n.error());
  auto recs = load(path, true);
  if (!recs) return report(recs.error());
  std::vector<const json*> shown;
  for (auto it = recs->rbegin(); it != recs->rend(); ++it) {
    const json& r = *it;
    if (a.has("--verdict") && lab::jstr(r, "verdict") != verdict) continue;
    if (a.has("--metric")) {
      const json* stats = lab::jobj(r, "stats");
      if (!stats || !lab::jobj(*stats, metric.c_str())) continue;
    }
    if (a.has("--grep") && !matches_grep(r, grep)) continue;
    shown.push_back(&r);
    if (*n && (long long)shown.size() >= *n) break;
  }
  if (a.has("--json")) {
    json arr = json::array();
    for (const json* r : shown) arr.push_back(*r);
    print_json(arr);
    return 0;
  }
  if (shown.empty()) {
    std::printf(recs->empty() ? "no experiments recorded yet (%s)\n" : "no record matches (%s)\n", path.c_str());
    return 0;
  }
  std::printf("%-6s %-10s %-12s %-6s %-40s %s\n", "id", "date", "verdict", "level",
              "metric candidate/baseline [interval]", "question");
  for (const json* r : shown) std::printf("%s\n", lab::log_line(*r, metric).c_str());
  return 0;
}

int lab_show(int argc, char** argv) {
  Args a;
  std::string path;
  if (int rc = parse(a, argc, argv, {}, {"--json"}, kShowUsage, 1, &path); rc >= 0) return rc;
  if (a.positional().empty())
    return report(usage_error("lab show needs a record: an id (E0007), a number, or a hash prefix (see --help)"));
  auto recs = load(path, false);
  if (!recs) return report(recs.error());
  auto r = lab::find_record(*recs, a.positional()[0]);
  if (!r) return report(Error{r.error().kind, path + ": " + r.error().message});
  if (a.has("--json")) print_json(*r);
  else std::fputs(lab::show_record(*r).c_str(), stdout);
  return 0;
}

int lab_report(int argc, char** argv) {
  Args a;
  std::string path;
  if (int rc = parse(a, argc, argv, {"-o", "--title"}, {}, kReportUsage, 0, &path); rc >= 0) return rc;
  if (a.has("-o") && a.str("-o").empty()) return report(usage_error("flag -o needs a file name"));
  const std::string out = a.has("-o") ? a.str("-o") : (fs::path(repo_root()) / "experiments" / "report.html").string();
  auto recs = load(path, false);
  if (!recs) return report(recs.error());
  if (Status s = write_file(out, lab::render_report(*recs, a.str("--title", "Ouro experiments"))); !s)
    return report(s.error());
  std::printf("wrote %s: %zu experiment%s\n", out.c_str(), recs->size(), recs->size() == 1 ? "" : "s");
  return 0;
}

}  // namespace ouro
