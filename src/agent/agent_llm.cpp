#include "agent/agent_llm.h"

namespace ouro::lab {

using nlohmann::json;

Expected<std::string> chat_complete(const ChatEndpoint& ep, const json& messages, const json& schema) {
  const json body = {{"model", ep.model},
                     {"messages", messages},
                     {"temperature", 0},
                     {"response_format",
                      {{"type", "json_schema"}, {"json_schema", {{"name", "ouro_proposal"}, {"schema", schema}, {"strict", true}}}}}};
  http::Request req;
  req.method = "POST";
  req.path = ep.url.prefix + "/chat/completions";
  req.headers = {{"Content-Type", "application/json"}};
  if (!ep.api_key.empty()) req.headers.push_back({"Authorization", "Bearer " + ep.api_key});
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  http::Options opt;
  opt.timeout_s = ep.timeout_s;
  const std::string where = "http://" + ep.url.authority() + req.path;
  const http::Response r = http::request(ep.url, req, opt);
  if (!r.ok()) return runtime_error(where + ": " + http::failure_name(r.failure) + ": " + r.error);
  if (r.status < 200 || r.status > 299)
    return runtime_error(where + ": HTTP " + std::to_string(r.status) + " " + r.reason + ": " + r.body.substr(0, 300));
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return runtime_error(where + ": the response body is not a JSON object");
  const json* choices = j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() ? &j["choices"][0] : nullptr;
  if (!choices || !choices->is_object() || !choices->contains("message") || !(*choices)["message"].is_object())
    return runtime_error(where + ": the response has no choices[0].message");
  const json& m = (*choices)["message"];
  if (!m.contains("content") || !m["content"].is_string()) return runtime_error(where + ": choices[0].message.content is not a string");
  return m["content"].get<std::string>();
}

}  // namespace ouro::lab
