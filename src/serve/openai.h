// The OpenAI-compatible API over the scheduler: /v1/chat/completions, /v1/completions,
// /v1/models, /health, /metrics. Requests are validated into GenRequests (every bad field is a 400
// naming it); answers are OpenAI-shaped JSON or SSE chunks ending with `data: [DONE]`.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/engine.h"
#include "runtime/metrics.h"
#include "runtime/scheduler.h"
#include "serve/http.h"

namespace ouro {

struct ApiOptions {
  std::string model_id;  // what /v1/models reports and requests may name
  std::string api_key;   // empty: no authentication
};

class OpenAiApi {
 public:
  OpenAiApi(Engine& e, Scheduler& s, ServeMetrics& m, ApiOptions o) : e_(e), s_(s), m_(m), o_(std::move(o)) {}
  void handle(const HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  // New requests get 503 from now on.
  void shutting_down() { shutting_down_ = true; }

 private:
  void completion(const HttpRequest& req, const std::shared_ptr<Exchange>& ex, bool chat);
  // The vocabulary trie for response_format, built by the first request that needs it.
  std::shared_ptr<const VocabTrie> vocab();
  Engine& e_;
  Scheduler& s_;
  ServeMetrics& m_;
  ApiOptions o_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> next_id_{1};
  std::mutex vocab_mu_;
  std::shared_ptr<const VocabTrie> vocab_;
};

}  // namespace ouro
