// The JSON-RPC side of `ouro mcp`: framing, the two protocol eras, errors, tools/list and tools/call.
#include <algorithm>

#include "lab/ledger.h"
#include "agent/mcp.h"

using nlohmann::json;

namespace ouro::lab {

namespace {

// Handshake-era revisions, oldest first; the stateless revision answers server/discover.
const std::vector<std::string> kHandshakeVersions = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"};
const std::string kStatelessVersion = "2026-07-28";
const char* kMetaVersion = "io.modelcontextprotocol/protocolVersion";

constexpr int kParseError = -32700, kInvalidRequest = -32600, kMethodNotFound = -32601, kInvalidParams = -32602,
              kInternalError = -32603, kUnsupportedVersion = -32022;

const char* kInstructions =
    "Ouro's optimization lab. Read before measuring: lab_log (every accepted and rejected change), lab_show ID. "
    "Measure: probe (the machine's ceiling), bench (+ trace), trace_summarize/overlap/diff. Decide: lab_plan proposes "
    "specs; correctness_check runs only the correctness part; lab_submit starts an experiment and returns a job id "
    "(poll lab_status, then lab_result). Criteria belong to people: a spec names a criteria_file from "
    "experiments/criteria/ and never carries its own criteria; tools never write criteria files or the ledger. An "
    "identical request returns the stored record; force=true measures again and is recorded as forced.";

json error_reply(const json& id, int code, const std::string& message, const json& data = json()) {
  json e = {{"code", code}, {"message", message}};
  if (!data.is_null()) e["data"] = data;
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", e}};
}

struct Thrown {
  RpcError e;
  json data;
};

}  // namespace

json McpServer::server_info() const { return {{"name", "ouro"}, {"title", "Ouro lab"}, {"version", cfg_.version}}; }

std::string McpServer::too_long() const {
  return safe_dump(error_reply(json(), kInvalidRequest, "request line too long (the limit is 4 MiB); discarded"));
}

std::optional<std::string> McpServer::handle_line(const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;  // blank lines are not messages
  json msg = json::parse(line, nullptr, false);
  if (msg.is_discarded()) return safe_dump(error_reply(json(), kParseError, "parse error: the line is not JSON"));
  if (msg.is_array())
    return safe_dump(error_reply(json(), kInvalidRequest, "invalid request: batches (JSON arrays) are not supported; send one object per line"));
  if (!msg.is_object()) return safe_dump(error_reply(json(), kInvalidRequest, "invalid request: a message is a JSON object"));
  // The id, when usable; an unusable id is answered with null.
  json id = json();
  const bool has_id = msg.contains("id");
  if (has_id && (msg["id"].is_string() || msg["id"].is_number_integer())) id = msg["id"];
  if (msg.value("jsonrpc", json()) != json("2.0"))
    return safe_dump(error_reply(id, kInvalidRequest, "invalid request: \"jsonrpc\" must be \"2.0\""));
  if (has_id && id.is_null()) return safe_dump(error_reply(json(), kInvalidRequest, "invalid request: \"id\" must be a string or an integer"));
  if (!msg.contains("method") || !msg["method"].is_string()) {
    if (!has_id && (msg.contains("result") || msg.contains("error"))) return std::nullopt;  // a response to us: we send no requests
    return safe_dump(error_reply(id, kInvalidRequest, "invalid request: \"method\" must be a string"));
  }
  const std::string method = msg["method"].get<std::string>();
  if (!has_id) return std::nullopt;  // notifications (notifications/initialized, cancelled, ...) get no answer
  json params = msg.value("params", json::object());
  if (!params.is_object()) return safe_dump(error_reply(id, kInvalidParams, "invalid params: \"params\" must be an object"));
  try {
    bool stateless = false;
    json result = dispatch(method, params, stateless);
    if (stateless && result.is_object()) result["resultType"] = "complete";
    return safe_dump({{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
  } catch (const Thrown& t) {
    return safe_dump(error_reply(id, t.e.code, t.e.message, t.data));
  } catch (const std::exception& e) {
    return safe_dump(error_reply(id, kInternalError, std::string("internal error: ") + e.what()));
  }
}

json McpServer::dispatch(const std::string& method, const json& params, bool& stateless) {
  // A stateless-era request declares its revision in _meta; an unknown revision is refused.
  const json meta = params.value("_meta", json::object());
  if (meta.is_object() && meta.contains(kMetaVersion)) {
    const json v = meta[kMetaVersion];
    const bool known = v.is_string() && (v == kStatelessVersion || std::count(kHandshakeVersions.begin(), kHandshakeVersions.end(), v.get<std::string>()));
    if (!known) {
      json supported = json::array({kStatelessVersion});
      for (auto it = kHandshakeVersions.rbegin(); it != kHandshakeVersions.rend(); ++it) supported.push_back(*it);
      throw Thrown{{kUnsupportedVersion, "unsupported protocol version " + v.dump()}, {{"supported", supported}, {"requested", v}}};
    }
    stateless = v == kStatelessVersion;
  }
  if (method == "initialize") {
    const json requested = params.value("protocolVersion", json());
    std::string version = kHandshakeVersions.back();
    if (requested.is_string() && std::count(kHandshakeVersions.begin(), kHandshakeVersions.end(), requested.get<std::string>()))
      version = requested.get<std::string>();
    return {{"protocolVersion", version},
            {"capabilities", {{"tools", {{"listChanged", false}}}}},
            {"serverInfo", server_info()},
            {"instructions", kInstructions}};
  }
  if (method == "server/discover") {
    stateless = true;
    json supported = json::array({kStatelessVersion});
    for (auto it = kHandshakeVersions.rbegin(); it != kHandshakeVersions.rend(); ++it) supported.push_back(*it);
    return {{"supportedVersions", supported},
            {"capabilities", {{"tools", {{"listChanged", false}}}}},
            {"serverInfo", server_info()},
            {"instructions", kInstructions},
            {"_meta", {{"io.modelcontextprotocol/serverInfo", server_info()}}}};
  }
  if (method == "ping") return json::object();
  if (method == "tools/list") {
    json tools = json::array();
    for (const auto& t : mcp_tools())
      tools.push_back({{"name", t.name}, {"title", t.title}, {"description", t.description}, {"inputSchema", t.input_schema},
                       {"outputSchema", t.output_schema}});
    return {{"tools", tools}};
  }
  if (method == "tools/call") return call_tool(params);
  throw Thrown{{kMethodNotFound, "method not found: " + method}, json()};
}

json McpServer::call_tool(const json& params) {
  if (!params.contains("name") || !params["name"].is_string())
    throw Thrown{{kInvalidParams, "invalid params: tools/call needs \"name\" (a string)"}, json()};
  const std::string name = params["name"].get<std::string>();
  const auto& tools = mcp_tools();
  auto it = std::find_if(tools.begin(), tools.end(), [&](const ToolDef& t) { return t.name == name; });
  if (it == tools.end()) throw Thrown{{kInvalidParams, "invalid params: unknown tool '" + name + "' (see tools/list)"}, json()};
  const json args = params.value("arguments", json::object());
  if (!args.is_object()) throw Thrown{{kInvalidParams, "invalid params: \"arguments\" must be an object"}, json()};
  ToolResult r;
  if (std::string refused = refusal_for(args, cfg_); !refused.empty()) {
    r.is_error = true;
    r.text = refused;
    r.structured = {{"error", refused}};
  } else if (std::string bad = check_arguments(it->input_schema, args); !bad.empty()) {
    throw Thrown{{kInvalidParams, "invalid params for " + name + ": " + bad}, json()};
  } else {
    r = it->run(args, cfg_);
    if (r.is_error && !r.structured.contains("error")) r.structured = {{"error", r.text}};
  }
  json out = {{"content", json::array({{{"type", "text"}, {"text", r.text}}})}, {"isError", r.is_error}};
  // On failure the result does not follow the tool's output schema, so only the text carries it.
  if (!r.is_error) out["structuredContent"] = r.structured;
  return out;
}

}  // namespace ouro::lab
