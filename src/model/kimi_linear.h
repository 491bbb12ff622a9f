// The hybrid architecture in llama.cpp's `kimi-linear` form (docs/hybrid.md) behind the model
// interface (model.h): Kimi Delta Attention layers, a Multi-head Latent Attention layer wherever
// `attention.head_count_kv[il]` is nonzero, a dense FFN for the leading layers and mixtures of
// experts after them. Config, read-only weights and scratch here; loading in kimi_linear_load.cpp,
// the forward pass in kimi_linear.cpp. Included only by src/model/ files.
//
// Memory (model/memory.h): the MLA layers' rows go to the paged KV cache (one latent row of
// kv_lora + rope values per position and layer, key and value at once: a k_only layout); the KDA
// layers' state is one slot of the recurrent-state store per sequence: per KDA layer the short
// convolutions' last d_conv - 1 inputs of q, k and v, then S (n_head x head_dim x head_dim, fp32).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/kda.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace ouro {

struct KimiConfig {
  int n_vocab = 0, n_embd = 0, n_layer = 0, n_ctx_train = 0;
  float rms_eps = 1e-5f;
  std::vector<bool> is_mla;        // per layer: MLA (head_count_kv != 0) or KDA
  std::vector<int> mixer_index;    // per layer: its index among the KDA layers or among the MLA layers
  int n_kda = 0, n_mla = 0;
  // KDA: n_head heads of head_dim; short convolution of d_conv taps.
  int n_head = 0, head_dim = 0, d_conv = 0;
  // MLA: n_head heads; latent kv_lora values plus rope shared key values per token; per-head key
  // k_mla = nope + rope, value v_mla.
  int kv_lora = 0, rope = 0, k_mla = 0, v_mla = 0;
  // FFN: layers below n_dense_lead dense (n_ff); the rest MoE: n_expert experts (n_ff_exp), top
  // n_used, sigmoid router with selection bias, weights renormalised when weights_norm, times
  // weights_scale; n_ff_shared = shared experts x n_ff_exp (0: none).
  int n_dense_lead = 0, n_ff = 0, n_expert = 0, n_used = 0, n_ff_exp = 0, n_ff_shared = 0;
  bool weights_norm = true;
  float weights_scale = 1.0f;

  int d_inner() const { return n_head * head_dim; }
  // The routed experts' shape and routing constants (kernels/moe.h), without weights.
  MoeExperts moe_shape() const {
    MoeExperts m;
    m.d = n_embd, m.ff = n_ff_exp, m.n_expert = n_expert, m.n_used = n_used;
    m.weights_norm = weights_norm, m.weights_scale = weights_scale;
    return m;
  }
  int nope() const { return k_mla - rope; }
  int latent() const { return kv_lora + rope; }
  bool is_moe(int layer) const { return layer >= n_dense_lead; }
  // Floats of one KDA layer's state: three conv windows, then S.
  size_t conv_floats() const { return (size_t)(d_conv > 1 ? d_conv - 1 : 0) * d_inner(); }
  size_t kda_layer_floats() const { return 3 * conv_floats() + (size_t)d_inner() * head_dim; }
};

struct KdaWeights {
  PackedMatrix wq, wk, wv, f_a, f_b, g_a, g_b, beta, wo;
  const float* conv[3] = {};       // q, k, v taps [d_inner][d_conv], oldest first
  const float* dt_bias = nullptr;  // [d_inner]
  const float* a = nullptr;        // [n_head]: A (negative), the log-decay's scale
  const float* out_norm = nullptr; // [head_dim]
};

struct MlaWeights {
  PackedMatrix wq, wkv_a, wo;
  std::vector<PackedMatrix> k_b, v_b;  // per head: nope -> kv_lora, kv_lora -> v_mla
  // The same in f32 for the decompressing form, per head: [nope][kv_lora] and [kv_lora][v_mla]
  // (with a block of cached latent rows they give the head's keys and values; kimi_linear_load.cpp).
  std::vector<float> dk, dv;
  const float* kv_norm = nullptr;      // [kv_lora]
};

struct FfnWeights {
  PackedMatrix gate, up, down;          // the dense FFN, or the shared expert(s) of a MoE layer
  PackedMatrix router;                  // [n_expert] rows
  const float* bias = nullptr;          // [n_expert] selection bias
  std::vector<PackedMatrix> e_gate, e_up, e_down;  // per expert
  MoeExperts experts(const KimiConfig& c) const {
    MoeExperts m = c.moe_shape();
    m.bias = bias, m.gate = e_gate.data(), m.up = e_up.data(), m.down = e_down.data();
    return m;
  }
};

struct KimiLayer {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  KdaWeights kda;
  MlaWeights mla;
  FfnWeights ffn;
};

// Scratch of one forward pass over up to max_tokens tokens of one sequence (sequences of a batch
// run one after the other).
class KimiWorkspace : public Workspace {
 public:
  KimiWorkspace(const KimiConfig& c, int max_tokens);

  std::vector<float> x, xn, tmp;
  std::vector<float> proj[3], conv[3], fa, ga, gate, og, beta, o;  // KDA
  std::vector<float> q, ckv, gather, qk, ctx, mo, scores;          // MLA
  std::vector<float> dscratch, dstat;  // MLA's decompressing form: per-thread blocks; row maxima and sums
  std::vector<float> router, g, u, h;  // FFN / MoE: router logits; dense or shared expert
  MoeScratch moe;                      // the routed experts' routing and scratch
  std::vector<int64_t> cum_keys, n_keys;
  std::vector<int64_t> chunk_cum;          // MLA decode's key chunks: their end positions
  std::vector<float> parts, part_stats;     // ... and per chunk and head: the output, its softmax's max and sum
  QuantActs qa;
};

class KimiLinearModel final : public Model {
 public:
  // Loads the file (general.architecture "kimi-linear"): every key and tensor checked.
  static Expected<std::unique_ptr<Model>> load(std::unique_ptr<GgufFile> file, const WeightRequest& wr, Isa isa,
                                               ThreadPool& pool);

  const ModelInfo& info() const override { return info_; }
  const GgufFile& gguf() const override { return *file_; }
  const std::string& weights_desc() const override { return weights_desc_; }
  size_t weight_bytes_per_token() const override;
  KvLayout kv_layout() const override { return {cfg_.n_mla, 1, cfg_.latent(), true}; }
  size_t state_bytes_per_seq() const override { return 4 * (size_t)cfg_.n_kda * cfg_.kda_layer_floats(); }
  std::unique_ptr<Workspace> new_workspace(int max_tokens) const override {
    return std::make_unique<KimiWorkspace>(cfg_, max_tokens);
  }
  Status forward(const ModelMemory& mem, Workspace& ws, const SeqBatch* seqs, int n_seqs, float* logits,
                 ThreadPool& pool, const MatmulKernels& k) const override;

  const KimiConfig& config() const { return cfg_; }
  const std::vector<KimiLayer>& layers() const { return layers_; }
  const float* output_norm() const { return output_norm_; }
  const PackedMatrix& output() const { return tied_ ? embd_ : output_; }
  // Dequantizes row `token` of the embedding into out[n_embd].
  void embed(int token, float* out) const;
  // The KDA kernel family of the ISA the model was loaded for.
  const KdaKernels& kda_kernels() const { return *kda_; }
  // The ISA the model was loaded for (attention's score pass picks its registers by it).
  Isa isa() const { return isa_; }

 private:
  std::unique_ptr<GgufFile> file_;
  std::string weights_desc_ = "native";
  ModelInfo info_;
  KimiConfig cfg_;
  const KdaKernels* kda_ = nullptr;
  Isa isa_ = Isa::kScalar;
  std::vector<KimiLayer> layers_;
  const GgufTensorInfo* embd_info_ = nullptr;
  PackedMatrix embd_, output_;
  bool tied_ = false;
  const float* output_norm_ = nullptr;
};

}  // namespace ouro
