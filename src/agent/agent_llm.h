// The proposer behind `ouro agent --llm URL`: one chat request to an OpenAI-compatible endpoint
// (POST URL/chat/completions), the reply constrained by a JSON schema through
// response_format {type: "json_schema", json_schema: {name, schema, strict: true}}.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "serve/http_client.h"

namespace ouro::lab {

struct ChatEndpoint {
  http::Url url;           // e.g. http://127.0.0.1:8080/v1
  std::string model;       // the request's "model"
  std::string api_key;     // sent as "Authorization: Bearer KEY" when not empty
  double timeout_s = 600;  // a local model may take minutes for a long prompt
};

// Sends `messages` (an array of {role, content}) and returns choices[0].message.content. A
// network failure, a non-2xx status or a reply without that content is a runtime error naming
// the endpoint.
Expected<std::string> chat_complete(const ChatEndpoint& ep, const nlohmann::json& messages, const nlohmann::json& schema);

}  // namespace ouro::lab
