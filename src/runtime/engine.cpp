#include "runtime/engine.h"
#include "core/fault.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>

#include "trace/trace.h"

namespace ouro {

Expected<std::unique_ptr<Engine>> Engine::load(const LaunchConfig& cfg) {
  std::unique_ptr<Engine> e(new Engine());
  e->cfg_ = cfg;
  if (!isa_supported(cfg.isa))
    return usage_error(isa_refusal(cfg.isa));
  if (e->cfg_.threads <= 0) e->cfg_.threads = std::max(1, (int)sysconf(_SC_NPROCESSORS_ONLN));
  try {
    e->pool_ = std::make_unique<ThreadPool>(fault::pool_threads(e->cfg_.threads));
  } catch (const std::system_error& err) {
    return runtime_error("cannot start " + std::to_string(e->cfg_.threads) + " threads: " + err.what());
  }
  if (cfg.weights.smooth_alpha > 0 && cfg.weights.mode != "w8a8")
    return usage_error("flag --w8a8-smooth needs --weights w8a8");
  auto m = Model::load(cfg.model_path, cfg.weights, cfg.isa, *e->pool_);
  if (!m) return m.error();
  e->model_ = std::move(*m);
  auto kv = parse_kv_spec(cfg.kv, cfg.kv_layers, e->model_->kv_layout().n_layer);
  if (!kv) return kv.error();
  if (Status s = PagedKvCache::check_spec(e->model_->kv_layout(), *kv); !s) return s.error();
  e->kv_ = std::move(*kv);
  auto t = Tokenizer::from_gguf(e->model_->gguf());
  if (!t) return t.error();
  e->tok_ = std::move(*t);
  if (e->tok_->n_vocab() != e->model_->info().n_vocab)
    return runtime_error(cfg.model_path + ": tokenizer has " + std::to_string(e->tok_->n_vocab()) +
                         " tokens but the embedding has " + std::to_string(e->model_->info().n_vocab));
  std::string tmpl;
  if (const GgufValue* v = e->model_->gguf().find("tokenizer.chat_template"); v && v->type == GgufType::kString) tmpl = v->s;
  e->chat_ = ChatTemplate::from_template_text(tmpl);
  if (!e->chat_) e->chat_ = runtime_error(cfg.model_path + ": " + e->chat_.error().message);
  const int max_ctx = e->model_->info().n_ctx_train;
  if (e->cfg_.n_ctx <= 0) e->cfg_.n_ctx = std::min(max_ctx, kDefaultCtxCap);
  if (e->cfg_.n_ctx > max_ctx)
    return usage_error("--ctx " + std::to_string(e->cfg_.n_ctx) + " exceeds the model's context length " + std::to_string(max_ctx));
  e->kernels_ = &matmul_kernels(cfg.isa);
  return e;
}

std::vector<int> stop_ids_for(const Engine& e, bool chat) {
  std::vector<int> stop;
  if (e.tokenizer().eos() >= 0) stop.push_back(e.tokenizer().eos());
  if (chat && e.chat()) {
    const int im_end = e.tokenizer().find_special(e.chat()->stop_text());
    if (im_end >= 0 && im_end != e.tokenizer().eos()) stop.push_back(im_end);
  }
  return stop;
}

Expected<GenerateResult> generate(Engine& e, SequenceState& st, const std::vector<int>& prompt, int max_tokens,
                                  const SamplingParams& sp, const std::vector<int>& stop_ids,
                                  const std::function<void(const std::string&)>& on_text) {
  using clock = std::chrono::steady_clock;
  GenerateResult r;
  r.prompt_tokens = (int)prompt.size();
  if (prompt.empty()) return usage_error("the prompt is empty (no tokens)");
  if (st.n_past() + (int)prompt.size() > st.n_ctx())
    return usage_error("the prompt (" + std::to_string(prompt.size()) + " tokens) does not fit the context of " +
                       std::to_string(st.n_ctx()) + " tokens");
  if (st.n_past() + (int)prompt.size() + max_tokens > st.n_ctx())
    return usage_error("prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(max_tokens) +
                       " exceeds the context of " + std::to_string(st.n_ctx()) + " tokens (raise --ctx or lower -n)");
  const int nv = e.model().info().n_vocab;
  std::vector<float> logits(nv);
  std::vector<int> recent = prompt;
  Sampler sampler(sp);
  StreamDecoder dec(e.tokenizer());

  static std::atomic<uint64_t> next_request_id{1};
  const uint64_t rid = next_request_id++;
  trace::Span request("generate", "request", -1, (int)prompt.size());
  request.pos((int64_t)rid);
  trace::flow('s', "request", rid);
  auto t0 = clock::now();
  {
    trace::Span phase("prefill", "phase", -1, (int)prompt.size());
    phase.pos(st.n_past());
    trace::flow('t', "request", rid);
    if (Status s = st.forward(prompt.data(), (int)prompt.size(), logits.data(), false, e.pool(), e.kernels()); !s)
      return s.error();
  }
  trace::counter("kv_cache", st.n_past());
  auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.finish_reason = "length";
  for (int i = 0; i < max_tokens; ++i) {
    int id;
    {
      trace::Span sp("sample", "sample", -1, 1, 4.0 * nv);
      id = sampler.sample(logits.data(), nv, recent);
    }
    if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) { r.finish_reason = "stop"; break; }
    r.tokens.push_back(id);
    recent.push_back(id);
    const std::string piece = dec.push(id);
    r.text += piece;
    if (on_text && !piece.empty()) on_text(piece);
    if (i + 1 == max_tokens) break;
    trace::Span phase("decode", "phase", -1, 1);
    phase.pos(st.n_past());
    if (Status s = st.decode(id, logits.data(), e.pool(), e.kernels()); !s) return s.error();
    trace::counter("kv_cache", st.n_past());
  }
  trace::flow('f', "request", rid);
  const std::string tail = dec.flush();
  r.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

}  // namespace ouro
