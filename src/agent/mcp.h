// `ouro mcp`: a Model Context Protocol server over the lab (docs/agents.md). Newline-delimited
// JSON-RPC 2.0 on stdio; both protocol eras (the `initialize` handshake up to 2025-11-25 and the
// stateless 2026-07-28 revision with `server/discover`). Tools run this same binary as child
// processes (`--json`) and return a text summary plus `structuredContent`.
//
// The rule the server enforces: acceptance criteria belong to people. Specs must name a criteria
// file under experiments/criteria/ (never inline criteria), and no tool argument may point at the
// criteria files or the ledger: those calls are refused with a message naming the rule.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lab/spec.h"

namespace ouro::lab {

struct McpConfig {
  std::string repo_root;     // the checkout (experiments/criteria/, the default ledger)
  std::string self_bin;      // this ouro binary: tools run it as child processes
  std::string worktree_bin;  // --bin for `lab run` ("" = the lab builds the working tree)
  std::string ledger;        // the ledger experiments append to (a launch flag, never a tool argument)
  std::string state_dir;     // $XDG_CACHE_HOME/ouro/mcp: jobs, traces, scratch files
  double quiet_wait_s = -1;  // passed to `lab run --quiet-wait` when >= 0
  double tool_timeout_s = 120;  // a synchronous tool's child is killed after this long
  std::string version;
};

// What a tool call produced: the text summary, the structured result, and whether it failed.
struct ToolResult {
  std::string text;
  nlohmann::json structured = nlohmann::json::object();
  bool is_error = false;
};

// A JSON-RPC error raised while handling a request (code, message).
struct RpcError {
  int code;
  std::string message;
};

struct ToolDef {
  std::string name, title, description;
  nlohmann::json input_schema, output_schema;
  ToolResult (*run)(const nlohmann::json& args, const McpConfig& cfg);
};

// The tools, in the order tools/list shows them (mcp_tools.cpp).
const std::vector<ToolDef>& mcp_tools();
// The rules (mcp_rules.cpp):
// "" when `args` satisfies `schema` (the subset of JSON Schema the tools use), else what is wrong.
std::string check_arguments(const nlohmann::json& schema, const nlohmann::json& args);
// "" when the call is allowed, else a message starting "refused:" naming the rule it breaks.
std::string refusal_for(const nlohmann::json& args, const McpConfig& cfg);
// Reads a spec from the arguments (spec_path or spec_toml), enforces the criteria rule (a
// criteria_file that exists, no inline criteria) and parses it with the lab's parser. False with
// the tool's error result in `out` when it cannot be used.
bool load_spec(const nlohmann::json& args, const McpConfig& cfg, std::string& text, Spec& spec, ToolResult& out);

// Jobs: experiments started by lab_submit, running detached from the server (mcp_jobs.cpp).
struct JobStart {
  std::string id, dir;
};
// Writes the spec into a new job folder and starts `ouro lab run` there, detached; returns at once.
std::optional<JobStart> start_job(const McpConfig& cfg, const std::string& spec_toml, const std::string& note, bool force,
                                  std::string& error);
// {"job_id", "state": running|done|failed, "elapsed_s", "progress": [...], "exit_code"?, "reason"?}
// or nullopt when there is no such job.
std::optional<nlohmann::json> job_status(const McpConfig& cfg, const std::string& id);
// The job's stdout (the record `lab run --json` printed).
std::string job_output(const McpConfig& cfg, const std::string& id);
bool valid_job_id(const std::string& id);

class McpServer {
 public:
  explicit McpServer(McpConfig cfg) : cfg_(std::move(cfg)) {}
  // One received line; the line to send back, or nullopt for notifications (nothing is sent).
  std::optional<std::string> handle_line(const std::string& line);
  // The answer to a line longer than the transport accepts.
  std::string too_long() const;

 private:
  nlohmann::json dispatch(const std::string& method, const nlohmann::json& params, bool& stateless);
  nlohmann::json call_tool(const nlohmann::json& params);
  nlohmann::json server_info() const;
  McpConfig cfg_;
};

}  // namespace ouro::lab
