// ouro mcp: the lab as a Model Context Protocol server on stdio (docs/agents.md). One JSON-RPC
// message per line in, one answer per line out; nothing but protocol messages on stdout (the
// tools' children write to files or pipes; logs go to stderr).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "cli/common.h"
#include "lab/builds.h"
#include "agent/mcp.h"
#include "ouro_version.h"

namespace fs = std::filesystem;

namespace ouro {

namespace {

const char* kMcpUsage =
    "usage: ouro mcp [--bin PATH] [--root DIR] [--ledger PATH] [--quiet-wait SECONDS] [--tool-timeout SECONDS]\n"
    "  A Model Context Protocol server over the lab, on stdin/stdout: newline-delimited JSON-RPC 2.0,\n"
    "  protocol revisions 2024-11-05 .. 2025-11-25 (initialize) and 2026-07-28 (server/discover).\n"
    "  Tools: probe, bench, trace_summarize, trace_overlap, trace_diff, lab_plan, lab_submit,\n"
    "  lab_status, lab_result, lab_log, lab_show, correctness_check (docs/agents.md).\n"
    "  --bin PATH        the ouro binary experiments use for \"worktree\" sides (lab run --bin; default: build)\n"
    "  --root DIR        the repository (default: the git top level of the current directory)\n"
    "  --ledger PATH     the ledger experiments append to (default: ROOT/experiments/ledger.jsonl);\n"
    "                    set by whoever starts the server: no tool argument can change it\n"
    "  --quiet-wait S    passed to lab run (how long to wait for a quiet machine)\n"
    "  --tool-timeout S  a synchronous tool's command is killed after S seconds (default 120)\n"
    "  Jobs and scratch files: $XDG_CACHE_HOME/ouro/mcp (default ~/.cache/ouro/mcp).\n";

constexpr size_t kMaxLine = 4u << 20;

// Reads one line (without the newline) of at most kMaxLine bytes. Returns false at EOF with
// nothing read; `too_long` is set when the line was longer (the rest of it is skipped).
bool read_line(std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  int c;
  bool any = false;
  while ((c = std::getc(stdin)) != EOF) {
    any = true;
    if (c == '\n') return true;
    if (line.size() < kMaxLine) line.push_back((char)c);
    else too_long = true;
  }
  return any;
}

}  // namespace

int cmd_mcp(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kMcpUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, {"--bin", "--root", "--ledger", "--quiet-wait", "--tool-timeout"}, {}); !s) return report(s.error());
  if (!a.positional().empty()) return report(usage_error("mcp takes no positional arguments"));
  lab::McpConfig cfg;
  std::error_code ec;
  cfg.self_bin = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return report(runtime_error("cannot find this binary (/proc/self/exe): " + ec.message()));
  if (a.has("--root")) {
    cfg.repo_root = fs::absolute(a.str("--root"), ec).lexically_normal().string();
    if (!fs::is_directory(cfg.repo_root)) return report(usage_error("--root: no directory " + a.str("--root")));
    while (cfg.repo_root.size() > 1 && cfg.repo_root.back() == '/') cfg.repo_root.pop_back();
  } else {
    auto root = lab::repo_root_of(fs::current_path().string());
    if (!root) return report(root.error());
    cfg.repo_root = *root;
  }
  if (a.has("--bin")) {
    cfg.worktree_bin = fs::absolute(a.str("--bin"), ec).string();
    if (access(cfg.worktree_bin.c_str(), X_OK) != 0) return report(usage_error("--bin: no executable at " + a.str("--bin")));
  }
  cfg.ledger = a.has("--ledger") ? fs::absolute(a.str("--ledger"), ec).string() : cfg.repo_root + "/experiments/ledger.jsonl";
  auto qw = a.number("--quiet-wait", -1, 0, 3600);
  if (!qw) return report(qw.error());
  cfg.quiet_wait_s = a.has("--quiet-wait") ? *qw : -1;
  auto tt = a.number("--tool-timeout", 120, 1, 86400);
  if (!tt) return report(tt.error());
  cfg.tool_timeout_s = *tt;
  cfg.state_dir = fs::path(lab::default_cache_root()).parent_path().string() + "/mcp";
  fs::create_directories(cfg.state_dir, ec);
  cfg.version = OURO_COMMIT;

  // A client that goes away shows up as a failed flush (then exit 0), not as SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  std::fprintf(stderr, "ouro mcp: serving %s on stdio (ledger %s)\n", cfg.repo_root.c_str(), cfg.ledger.c_str());
  lab::McpServer server(cfg);
  std::string line;
  bool too_long = false;
  while (read_line(line, too_long)) {
    std::optional<std::string> reply = too_long ? std::optional<std::string>(server.too_long()) : server.handle_line(line);
    if (!reply) continue;
    std::fputs(reply->c_str(), stdout);
    std::fputc('\n', stdout);
    if (std::fflush(stdout) != 0) return 0;  // the client went away
  }
  return 0;
}

}  // namespace ouro
