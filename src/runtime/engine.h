// The loaded engine: launch configuration, model, tokenizer, chat template, thread pool, kernels.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "runtime/sequence.h"
#include "runtime/sampler.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

namespace ouro {

// The context a launch gets without --ctx: the model's, capped at this many tokens.
constexpr int kDefaultCtxCap = 4096;

// Every launch parameter in one place, printed in bench records.
struct LaunchConfig {
  std::string model_path;
  int threads = 0;   // 0: all online CPUs
  int n_ctx = 0;     // 0: min(model's context, kDefaultCtxCap)
  Isa isa = Isa::kScalar;
  int max_batch = 512;
  // Quantization (docs/quantization.md): --kv / --kv-layers, --weights / --w8a8-ops / --w8a8-layers.
  std::string kv, kv_layers;
  // SmoothQuant for W8A8 (--w8a8-smooth ALPHA, 0 = off; --w8a8-calib FILE) is part of it: factors
  // calibrated at load time on the native model's activations over the calibration text.
  WeightRequest weights;
};

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> load(const LaunchConfig& cfg);
  const LaunchConfig& config() const { return cfg_; }
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  // The chat template, or why the model's template cannot be used (only chat needs it).
  const Expected<ChatTemplate>& chat() const { return chat_; }
  ThreadPool& pool() { return *pool_; }
  const MatmulKernels& kernels() const { return *kernels_; }
  // The KV cache's types per layer (from --kv / --kv-layers; f32 everywhere by default).
  const KvSpec& kv_spec() const { return kv_; }
  std::unique_ptr<SequenceState> new_state() const {
    return std::make_unique<SequenceState>(*model_, cfg_.n_ctx, cfg_.max_batch, kv_);
  }

 private:
  LaunchConfig cfg_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  Expected<ChatTemplate> chat_{ChatTemplate()};
  std::unique_ptr<ThreadPool> pool_;
  const MatmulKernels* kernels_ = nullptr;
  KvSpec kv_;
};

// The tokens that end a reply: end-of-sequence, and in chat the template's end-of-turn token.
std::vector<int> stop_ids_for(const Engine& e, bool chat);

struct GenerateResult {
  std::vector<int> tokens;       // generated ids
  std::string text;
  std::string finish_reason;     // stop | length
  int prompt_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Prefills `prompt` after the state's cached tokens, then samples up to max_tokens, stopping at
// any id in stop_ids. on_text receives each complete piece of UTF-8 text as it is produced.
Expected<GenerateResult> generate(Engine& e, SequenceState& st, const std::vector<int>& prompt, int max_tokens,
                                  const SamplingParams& sp, const std::vector<int>& stop_ids,
                                  const std::function<void(const std::string&)>& on_text = {});

}  // namespace ouro
