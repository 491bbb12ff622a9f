#include "serve/openai.h"

#include <chrono>
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "trace/trace.h"

namespace ouro {

using json = nlohmann::json;

namespace {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // empty: null
  std::string code;   // empty: null
  std::string type = "invalid_request_error";
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

void send_error(const std::shared_ptr<Exchange>& ex, const ApiError& e, const HeaderList& extra = {}) {
  ex->respond(e.status, dump(error_json(e)), "application/json", extra);
}

ApiError bad(const std::string& param, const std::string& message, const std::string& code = "") {
  ApiError e;
  e.message = message;
  e.param = param;
  e.code = code;
  return e;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Optional fields: absent and null mean "use the default".
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> get_number(const json& body, const char* name, double lo, double hi, float* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return bad(name, std::string("'") + name + "' must be a number");
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    return bad(name, std::string("'") + name + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v->dump());
  *out = (float)d;
  return std::nullopt;
}

std::optional<ApiError> get_int(const json& body, const char* name, int64_t lo, int64_t hi, int64_t* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return bad(name, std::string("'") + name + "' must be an integer");
  if (v->is_number_unsigned() ? v->get<uint64_t>() > (uint64_t)hi : (v->get<int64_t>() < lo || v->get<int64_t>() > hi))
    return bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v->dump());
  *out = v->is_number_unsigned() ? (int64_t)v->get<uint64_t>() : v->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& body, const char* name, bool* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return bad(name, std::string("'") + name + "' must be a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

// Message content: a string, or a list of {"type": "text", "text": ...} parts.
std::optional<ApiError> content_text(const json& c, const std::string& param, std::string* out) {
  if (c.is_string()) { *out = c.get<std::string>(); return std::nullopt; }
  if (c.is_array()) {
    for (const json& part : c) {
      if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
        return bad(param, "content parts must be {\"type\": \"text\", \"text\": string} (only text is supported)");
      *out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return bad(param, "'content' must be a string or a list of text parts");
}

struct Parsed {
  GenRequest gen;
  bool stream = false, include_usage = false;
};

}  // namespace

void OpenAiApi::handle(const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  struct Route { const char* path; const char* method; };
  static const Route routes[] = {{"/health", "GET"}, {"/metrics", "GET"}, {"/v1/models", "GET"},
                                 {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}};
  const Route* route = nullptr;
  for (const Route& r : routes) if (req.path == r.path) route = &r;
  if (!route) {
    ApiError e = bad("", "unknown path '" + req.path + "'", "not_found");
    e.status = 404;
    e.type = "not_found_error";
    return send_error(ex, e);
  }
  if (req.method != route->method) {
    ApiError e = bad("", req.path + " takes " + route->method + ", not " + req.method, "method_not_allowed");
    e.status = 405;
    return send_error(ex, e, {{"Allow", route->method}});
  }
  if (req.path == "/health") return ex->respond(200, "{\"status\":\"ok\"}");
  if (req.path == "/metrics") return ex->respond(200, m_.render(), "text/plain; version=0.0.4; charset=utf-8");
  if (!o_.api_key.empty()) {
    const std::string auth = req.header("authorization");
    if (auth != "Bearer " + o_.api_key) {
      ApiError e = bad("", auth.empty() ? "missing API key (send 'Authorization: Bearer KEY')" : "invalid API key", "invalid_api_key");
      e.status = 401;
      e.type = "authentication_error";
      return send_error(ex, e);
    }
  }
  if (req.path == "/v1/models") {
    json j = {{"object", "list"},
              {"data", json::array({{{"id", o_.model_id}, {"object", "model"}, {"created", now_s()}, {"owned_by", "ouro"}}})}};
    return ex->respond(200, dump(j));
  }
  if (shutting_down_) {
    ApiError e = bad("", "the server is shutting down", "shutting_down");
    e.status = 503;
    e.type = "server_error";
    return send_error(ex, e);
  }
  completion(req, ex, req.path == "/v1/chat/completions");
}

std::shared_ptr<const VocabTrie> OpenAiApi::vocab() {
  std::lock_guard<std::mutex> lock(vocab_mu_);
  if (!vocab_) vocab_ = std::make_shared<VocabTrie>(e_.tokenizer());
  return vocab_;
}

void OpenAiApi::completion(const HttpRequest& req, const std::shared_ptr<Exchange>& ex, bool chat) {
  // The request's first interval (parse, template, tokenize, submit) on the HTTP thread; a flow
  // ties it to the scheduler steps that run it and to its end.
  trace::Span span(chat ? "chat_request" : "completion_request", "request");
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return send_error(ex, bad("", "the request body is not valid JSON"));
  if (!body.is_object()) return send_error(ex, bad("", "the request body must be a JSON object"));

  Parsed p;
  GenRequest& g = p.gen;
  auto fail = [&](const ApiError& e) { send_error(ex, e); };
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) return fail(bad("model", "'model' must be a string"));
    if (m->get<std::string>() != o_.model_id)
      return fail(bad("model", "unknown model '" + m->get<std::string>() + "' (this server serves '" + o_.model_id + "')",
                      "model_not_found"));
  }
  // The prompt
  std::string text;
  if (chat) {
    const json* msgs = field(body, "messages");
    if (!msgs) return fail(bad("messages", "'messages' is required"));
    if (!msgs->is_array()) return fail(bad("messages", "'messages' must be a list"));
    if (msgs->empty()) return fail(bad("messages", "'messages' must not be empty"));
    if (!e_.chat()) return fail(bad("messages", e_.chat().error().message));
    std::vector<ChatMessage> cm;
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) return fail(bad(where, where + " must be an object"));
      if (!m.contains("role") || !m["role"].is_string()) return fail(bad(where + ".role", where + ".role must be a string"));
      std::string role = m["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant")
        return fail(bad(where + ".role", "unknown role '" + m["role"].get<std::string>() + "' (system, developer, user, assistant)"));
      if (!m.contains("content") || m["content"].is_null()) return fail(bad(where + ".content", where + ".content is required"));
      std::string c;
      if (auto e = content_text(m["content"], where + ".content", &c)) return fail(*e);
      cm.push_back({role, c});
    }
    text = e_.chat()->render(cm);
    g.prompt = e_.tokenizer().encode(text);
  } else {
    const json* pr = field(body, "prompt");
    if (!pr) return fail(bad("prompt", "'prompt' is required"));
    if (pr->is_array() && pr->size() == 1 && (*pr)[0].is_string()) pr = &(*pr)[0];
    if (pr->is_string()) {
      g.prompt = e_.tokenizer().encode(pr->get<std::string>());
    } else if (pr->is_array() && !pr->empty() && std::all_of(pr->begin(), pr->end(), [](const json& t) { return t.is_number_integer(); })) {
      for (const json& t : *pr) {
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id >= e_.model().info().n_vocab) return fail(bad("prompt", "token id " + std::to_string(id) + " is out of range"));
        g.prompt.push_back((int)id);
      }
    } else {
      return fail(bad("prompt", "'prompt' must be a string, a list of one string, or a list of token ids"));
    }
    if (const json* echo = field(body, "echo"); echo && (!echo->is_boolean() || echo->get<bool>()))
      return fail(bad("echo", "'echo' is not supported"));
  }
  if (g.prompt.empty()) return fail(bad(chat ? "messages" : "prompt", "the prompt is empty (no tokens)"));
  const int limit = s_.max_sequence_tokens();
  if ((int)g.prompt.size() >= limit)
    return fail(bad(chat ? "messages" : "prompt",
                    "the prompt has " + std::to_string(g.prompt.size()) + " tokens; this server's context holds " +
                        std::to_string(limit) + " (prompt and completion together)",
                    "context_length_exceeded"));

  // Length and sampling
  int64_t max_tokens = chat ? limit - (int64_t)g.prompt.size() : std::min<int64_t>(16, limit - (int64_t)g.prompt.size());
  const char* mt_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  bool mt_given = field(body, mt_name) != nullptr;
  if (auto e = get_int(body, mt_name, 1, 1 << 24, &max_tokens)) return fail(*e);
  if (mt_given && (int)g.prompt.size() + max_tokens > limit)
    return fail(bad(mt_name,
                    "the prompt (" + std::to_string(g.prompt.size()) + " tokens) plus " + mt_name + " " +
                        std::to_string(max_tokens) + " exceeds this server's context of " + std::to_string(limit) + " tokens",
                    "context_length_exceeded"));
  g.max_tokens = (int)max_tokens;
  SamplingParams& sp = g.sampling;  // OpenAI's defaults: temperature 1, nucleus and top-k off
  sp.temperature = 1.0f;
  sp.top_p = 1.0f;
  sp.top_k = 0;
  sp.min_p = 0.0f;
  int64_t top_k = 0, n = 1, seed = -1;
  if (auto e = get_number(body, "temperature", 0, 2, &sp.temperature)) return fail(*e);
  if (auto e = get_number(body, "top_p", 0, 1, &sp.top_p)) return fail(*e);
  if (sp.top_p <= 0) return fail(bad("top_p", "'top_p' must be in (0, 1]"));
  if (auto e = get_int(body, "top_k", -1, 1 << 20, &top_k)) return fail(*e);
  sp.top_k = top_k < 0 ? 0 : (int)top_k;
  if (auto e = get_number(body, "min_p", 0, 1, &sp.min_p)) return fail(*e);
  for (const char* pen : {"presence_penalty", "frequency_penalty"}) {
    float v = 0;
    if (auto e = get_number(body, pen, -2, 2, &v)) return fail(*e);
    if (v != 0) return fail(bad(pen, std::string("'") + pen + "' is not supported (only 0)"));
  }
  if (auto e = get_number(body, "repetition_penalty", 0.01, 10, &sp.repeat_penalty)) return fail(*e);
  if (auto e = get_int(body, "n", 1, 1 << 20, &n)) return fail(*e);
  if (n != 1) return fail(bad("n", "only n = 1 is supported"));
  if (auto e = get_int(body, "seed", INT64_MIN, INT64_MAX, &seed)) return fail(*e);
  sp.seed = field(body, "seed") ? (uint64_t)seed : std::random_device{}();
  // Stop strings
  if (const json* st = field(body, "stop")) {
    if (st->is_string()) {
      g.stop.push_back(st->get<std::string>());
    } else if (st->is_array() && st->size() <= 4 && std::all_of(st->begin(), st->end(), [](const json& s) { return s.is_string(); })) {
      for (const json& s : *st) g.stop.push_back(s.get<std::string>());
    } else {
      return fail(bad("stop", "'stop' must be a string or a list of up to 4 strings"));
    }
    for (const std::string& s : g.stop) if (s.empty()) return fail(bad("stop", "stop strings must not be empty"));
  }
  g.stop_ids = stop_ids_for(e_, chat);
  // Streaming and log-probabilities
  if (auto e = get_bool(body, "stream", &p.stream)) return fail(*e);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return fail(bad("stream_options", "'stream_options' must be an object"));
    if (auto e = get_bool(*so, "include_usage", &p.include_usage)) return fail(bad("stream_options.include_usage", e->message));
  }
  if (chat) {
    bool lp = false;
    int64_t top = 0;
    if (auto e = get_bool(body, "logprobs", &lp)) return fail(*e);
    if (auto e = get_int(body, "top_logprobs", 0, 20, &top)) return fail(*e);
    if (field(body, "top_logprobs") && !lp) return fail(bad("top_logprobs", "'top_logprobs' needs 'logprobs': true"));
    g.logprobs = lp ? (int)top : -1;
  } else {
    int64_t lp = -1;
    if (auto e = get_int(body, "logprobs", 0, 20, &lp)) return fail(*e);
    g.logprobs = (int)lp;
  }

  // Structured output: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
  // "schema", "strict"}} (OpenAI); llama-server's {"type": "json_object", "schema": {...}} too.
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      return fail(bad("response_format", "'response_format' must be an object with a string 'type' (text, json_object, json_schema)"));
    const std::string type = (*rf)["type"].get<std::string>();
    std::shared_ptr<const JsonGrammar> grammar;
    if (type == "json_schema" || (type == "json_object" && rf->contains("schema"))) {
      const json* schema = nullptr;
      if (type == "json_schema") {
        const json* js = rf->contains("json_schema") ? &(*rf)["json_schema"] : nullptr;
        if (!js || !js->is_object())
          return fail(bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'"));
        if (js->contains("name") && !(*js)["name"].is_string())
          return fail(bad("response_format.json_schema.name", "'name' must be a string"));
        if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null())
          return fail(bad("response_format.json_schema.strict", "'strict' must be a boolean"));
        if (js->contains("schema")) schema = &(*js)["schema"];
      } else {
        schema = &(*rf)["schema"];
      }
      if (schema) {
        auto g = compile_json_schema(*schema);
        if (!g) return fail(bad("response_format", "response_format schema: " + g.error().message));
        grammar = *g;
      } else {
        grammar = json_object_grammar();
      }
    } else if (type == "json_object") {
      grammar = json_object_grammar();
    } else if (type != "text") {
      return fail(bad("response_format.type", "unknown response_format type '" + type + "' (text, json_object, json_schema)"));
    }
    if (grammar) {
      const int need = min_document_bytes(*grammar);
      if (need > g.max_tokens)
        return fail(bad(mt_name,
                        std::string(mt_name) + " " + std::to_string(g.max_tokens) +
                            " cannot hold the shortest document the response_format admits (" + std::to_string(need) + " tokens)"));
      g.constraint = std::make_shared<JsonConstraint>(grammar, vocab());
    }
  }

  // The answer, built from the scheduler's events (on its thread).
  struct Answer {
    std::string text;
    json lp_chat = json::array(), lp_tokens = json::array(), lp_values = json::array(), lp_top = json::array(),
         lp_offsets = json::array();
    bool first = true;
  };
  auto ans = std::make_shared<Answer>();
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  const int64_t created = now_s();
  const std::string model = o_.model_id;
  const bool stream = p.stream, include_usage = p.include_usage;
  const int logprobs = g.logprobs;
  const Tokenizer& tok = e_.tokenizer();
  auto usage = [](const GenEvent& ev) {
    return json{{"prompt_tokens", ev.prompt_tokens},
                {"completion_tokens", ev.completion_tokens},
                {"total_tokens", ev.prompt_tokens + ev.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", ev.cached_tokens}}}};
  };
  auto chunk = [=](json choice) {
    json c = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created}, {"model", model},
              {"choices", json::array({std::move(choice)})}};
    if (include_usage) c["usage"] = nullptr;
    return "data: " + dump(c) + "\n\n";
  };
  // Log-probabilities of one token, in the chat or the completions shape.
  auto add_logprobs = [&tok, chat](const GenEvent& ev, json& lp_chat, json& tokens, json& values, json& top, json& offsets,
                                   size_t offset) {
    auto bytes = [&](int t) {
      json b = json::array();
      for (unsigned char ch : tok.token_bytes(t)) b.push_back((int)ch);
      return b;
    };
    if (chat) {
      json alts = json::array();
      for (const TokenLogprob& a : ev.top)
        alts.push_back({{"token", tok.token_bytes(a.id)}, {"logprob", a.logprob}, {"bytes", bytes(a.id)}});
      lp_chat.push_back({{"token", tok.token_bytes(ev.token)}, {"logprob", ev.logprob}, {"bytes", bytes(ev.token)}, {"top_logprobs", alts}});
    } else {
      tokens.push_back(tok.token_bytes(ev.token));
      values.push_back(ev.logprob);
      json alts3 = json::object();
      for (const TokenLogprob& a : ev.top) alts3[tok.token_bytes(a.id)] = a.logprob;
      top.push_back(alts3);
      offsets.push_back(offset);
    }
  };
  std::weak_ptr<Exchange> wex = ex;
  g.on_event = [=](GenEvent&& ev) {
    std::shared_ptr<Exchange> x = wex.lock();
    if (!x) return;
    if (ev.kind == GenEvent::kToken) {
      if (stream) {
        if (ans->first && chat) {
          x->send(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
        }
        ans->first = false;
        json lpc = json::array(), t = json::array(), v = json::array(), tp = json::array(), off = json::array();
        if (logprobs >= 0) add_logprobs(ev, lpc, t, v, tp, off, ans->text.size());
        ans->text += ev.text;
        if (ev.text.empty() && logprobs < 0) return;
        json lpj = logprobs < 0 ? json(nullptr)
                                : chat ? json{{"content", lpc}}
                                       : json{{"tokens", t}, {"token_logprobs", v}, {"top_logprobs", tp}, {"text_offset", off}};
        if (chat)
          x->send(chunk({{"index", 0}, {"delta", {{"content", ev.text}}}, {"logprobs", lpj}, {"finish_reason", nullptr}}));
        else
          x->send(chunk({{"index", 0}, {"text", ev.text}, {"logprobs", lpj}, {"finish_reason", nullptr}}));
      } else {
        if (logprobs >= 0) add_logprobs(ev, ans->lp_chat, ans->lp_tokens, ans->lp_values, ans->lp_top, ans->lp_offsets, ans->text.size());
        ans->text += ev.text;
      }
      return;
    }
    // Done
    if (ev.finish_reason == "cancelled") { x->end(); return; }
    if (ev.finish_reason == "abort" || ev.finish_reason == "error") {
      ApiError e;
      e.status = ev.finish_reason == "abort" ? 503 : 500;
      e.type = "server_error";
      e.message = ev.finish_reason == "abort" ? "the server is shutting down; the request was aborted" : ev.error;
      if (stream) {
        x->send("data: " + dump(error_json(e)) + "\n\n");
        x->end();
      } else {
        send_error(x, e);
      }
      return;
    }
    ans->text += ev.text;
    if (stream) {
      if (ans->first && chat)
        x->send(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
      if (chat)
        x->send(chunk({{"index", 0}, {"delta", ev.text.empty() ? json::object() : json{{"content", ev.text}}}, {"logprobs", nullptr},
                       {"finish_reason", ev.finish_reason}}));
      else
        x->send(chunk({{"index", 0}, {"text", ev.text}, {"logprobs", nullptr}, {"finish_reason", ev.finish_reason}}));
      if (include_usage) {
        json c = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                  {"model", model}, {"choices", json::array()}, {"usage", usage(ev)}};
        x->send("data: " + dump(c) + "\n\n");
      }
      x->send("data: [DONE]\n\n");
      x->end();
      return;
    }
    json choice;
    if (chat) {
      choice = {{"index", 0}, {"message", {{"role", "assistant"}, {"content", ans->text}}},
                {"logprobs", logprobs < 0 ? json(nullptr) : json{{"content", ans->lp_chat}}}, {"finish_reason", ev.finish_reason}};
    } else {
      choice = {{"index", 0}, {"text", ans->text},
                {"logprobs", logprobs < 0 ? json(nullptr)
                                          : json{{"tokens", ans->lp_tokens}, {"token_logprobs", ans->lp_values},
                                                 {"top_logprobs", ans->lp_top}, {"text_offset", ans->lp_offsets}}},
                {"finish_reason", ev.finish_reason}};
    }
    json r = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created}, {"model", model},
              {"choices", json::array({choice})}, {"usage", usage(ev)}};
    x->respond(200, dump(r));
  };

  const uint64_t rid = s_.new_id();
  trace::flow('s', "request", rid);
  const Scheduler::Submit sub = s_.submit(std::move(g), rid);
  if (sub == Scheduler::Submit::kQueueFull) {
    ApiError e = bad("", "too many requests are waiting; retry later", "queue_full");
    e.status = 429;
    e.type = "rate_limit_error";
    return send_error(ex, e, {{"Retry-After", "1"}});
  }
  if (sub == Scheduler::Submit::kShuttingDown) {
    ApiError e = bad("", "the server is shutting down", "shutting_down");
    e.status = 503;
    e.type = "server_error";
    return send_error(ex, e);
  }
  if (stream) ex->begin_stream(200, "text/event-stream");  // events sent before this wait behind the headers
  ex->on_disconnect([&sched = s_, rid] { sched.cancel(rid); });
}

}  // namespace ouro
