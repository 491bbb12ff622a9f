// The Llama-family architecture (SmolLM2 and friends) behind the model interface (model.h): config,
// read-only weights, scratch and the forward pass. Included only by src/model/ files; the rest of
// the house sees a Model. Weights are const after load, so several sequences share one model.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace ouro {

struct LlamaConfig {
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int n_ctx_train = 0, rope_dim = 0;
  float rope_base = 10000.0f, rms_eps = 1e-5f;
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd] (the file's, or smoothed_* when smoothing)
  const float* ffn_norm = nullptr;   // [n_embd]
  std::vector<float> smoothed_attn_norm, smoothed_ffn_norm;
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

// SmoothQuant (docs/quantization.md): per layer and input channel, factors s that move activation
// outliers into the weights of qkv (attn) and gate_up (ffn), whose inputs follow an RMSNorm:
// W[:, j] *= s[j] before requantizing, norm weight[j] /= s[j]. Empty: no smoothing.
struct SmoothFactors {
  std::vector<float> attn, ffn;  // [n_layer * n_embd]
  float alpha = 0;               // what made them (for the description)
};

// Per-channel max |x| of the normalized inputs of qkv (attn) and gate_up (ffn), per layer
// ([n_layer * n_embd] each): what SmoothQuant calibrates from. Filled by the forward pass when set
// on a LlamaWorkspace.
struct ActStats {
  std::vector<float> attn, ffn;
};

class LlamaWorkspace : public Workspace {
 public:
  LlamaWorkspace(const LlamaConfig& c, int max_tokens);
  // Collect activation statistics in forward passes (calibration); nullptr: off.
  void set_act_stats(ActStats* s) { stats_ = s; }

 private:
  friend class LlamaModel;
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, g_, u_, h_, scores_;
  std::vector<float> rope_;  // per token: RoPE's cos then sin of its position's angles (head_dim floats)
  std::vector<int> tok_, pos_, seq_, out_rows_;
  std::vector<int64_t> cum_keys_;
  QuantActs qa_;
  ActStats* stats_ = nullptr;
};

class LlamaModel : public Model {
 public:
  // Loads the file (general.architecture "llama"), calibrating SmoothQuant first when asked
  // (llama_load.cpp).
  static Expected<std::unique_ptr<Model>> load(std::unique_ptr<GgufFile> file, const WeightRequest& wr, Isa isa,
                                               ThreadPool& pool);
  static Expected<std::unique_ptr<LlamaModel>> load_with(std::unique_ptr<GgufFile> file, const WeightRequest& wr,
                                                         const SmoothFactors& smooth, Isa isa);

  const ModelInfo& info() const override { return info_; }
  const GgufFile& gguf() const override { return *file_; }
  const std::string& weights_desc() const override { return weights_desc_; }
  size_t weight_bytes_per_token() const override;
  KvLayout kv_layout() const override { return {cfg_.n_layer, cfg_.n_head_kv, cfg_.head_dim}; }
  size_t state_bytes_per_seq() const override { return 0; }
  std::unique_ptr<Workspace> new_workspace(int max_tokens) const override {
    return std::make_unique<LlamaWorkspace>(cfg_, max_tokens);
  }
  Status forward(const ModelMemory& mem, Workspace& ws, const SeqBatch* seqs, int n_seqs, float* logits,
                 ThreadPool& pool, const MatmulKernels& k) const override;

  const LlamaConfig& config() const { return cfg_; }
  const LlamaWeights& weights() const { return w_; }
  const PackedMatrix& output_matrix() const { return w_.tied_output ? w_.token_embd : w_.output; }
  // Dequantizes row `token` of the embedding into out[n_embd].
  void embed(int token, float* out) const;

 private:
  std::unique_ptr<GgufFile> file_;
  std::string weights_desc_ = "native";
  ModelInfo info_;
  LlamaConfig cfg_;
  LlamaWeights w_;
};

}  // namespace ouro
