// The Llama-family model (SmolLM2 and friends): config, read-only weights, per-sequence state and
// the forward pass. Weights are const after load, so several states can share one model.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/lazy_buffer.h"
#include "core/status.h"
#include "kernels/matmul.h"
#include "model/gguf.h"

namespace ouro {

class ThreadPool;

struct LlamaConfig {
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int n_ctx_train = 0, rope_dim = 0;
  float rope_base = 10000.0f, rms_eps = 1e-5f;
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  PackedMatrix wq, wk, wv, wo;       // [n_head*hd, n_embd], [n_kv*hd, n_embd] x2, [n_embd, n_head*hd]
  PackedMatrix w_gate, w_up, w_down; // [n_ff, n_embd] x2, [n_embd, n_ff]
};

struct LlamaWeights {
  PackedMatrix token_embd;           // [n_vocab, n_embd]
  PackedMatrix output;               // [n_vocab, n_embd]; shares token_embd when tied
  bool tied_output = false;
  const float* output_norm = nullptr;
  std::vector<LayerWeights> layers;
  std::vector<float> rope_inv_freq;  // [head_dim / 2]
};

class LlamaModel {
 public:
  static Expected<std::unique_ptr<LlamaModel>> load(const std::string& path);
  const LlamaConfig& config() const { return cfg_; }
  const LlamaWeights& weights() const { return w_; }
  const GgufFile& gguf() const { return *file_; }
  const PackedMatrix& output_matrix() const { return w_.tied_output ? w_.token_embd : w_.output; }
  // Bytes of weights read by one decode step (all layer matrices + output head).
  size_t weight_bytes_per_token() const;
  // Dequantizes row `token` of the embedding into out[n_embd].
  void embed(int token, float* out) const;

 private:
  std::unique_ptr<GgufFile> file_;
  LlamaConfig cfg_;
  LlamaWeights w_;
};

// Per-sequence state: the KV cache and scratch for up to max_batch tokens per forward call.
class LlamaState {
 public:
  LlamaState(const LlamaModel& m, int n_ctx, int max_batch = 512);
  int n_ctx() const { return n_ctx_; }
  int n_past() const { return n_past_; }
  void reset() { n_past_ = 0; }
  // Drops cached positions >= n (for reusing a common prefix).
  void truncate(int n) { if (n < n_past_) n_past_ = n; }

  // Runs tokens[0..n) at positions n_past.. and appends them to the cache. Writes logits of the
  // last token to `logits` [n_vocab], or of every token ([n][n_vocab]) when all_logits.
  // Processes in chunks of max_batch. Returns an error if the context would overflow.
  Status forward(const int* tokens, int n, float* logits, bool all_logits, ThreadPool& pool, const MatmulKernels& k);

  size_t kv_bytes_per_token() const;

 private:
  void forward_chunk(const int* tokens, int T, float* logits, bool all_logits, ThreadPool& pool, const MatmulKernels& k);
  const LlamaModel& m_;
  int n_ctx_, max_batch_;
  int n_past_ = 0;
  LazyBuffer k_cache_, v_cache_;  // [n_layer][n_ctx][n_kv * hd]
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, g_, u_, h_, scores_;
  QuantActs qa_;
};

}  // namespace ouro
