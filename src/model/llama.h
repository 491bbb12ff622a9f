// The Llama-family model (SmolLM2 and friends): config, read-only weights, per-sequence state and
// the forward pass. Weights are const after load, so several states can share one model.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/lazy_buffer.h"
#include "core/status.h"
#include "kernels/kv_types.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/gguf.h"

namespace ouro {

class ThreadPool;

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

// How the weights are computed (docs/quantization.md): "native" runs the GGUF's own blocks; "w8a8"
// requantizes the chosen ops' matrices to int8 per output row at load time, with int8 per-token
// activations. ops: comma list of qkv, o, gate_up, down, head (empty: all but head); layers: comma
// list of layer ranges (empty: all).
// SmoothQuant (docs/quantization.md): per layer and input channel, factors s that move activation
// outliers into the weights of qkv (attn) and gate_up (ffn), whose inputs follow an RMSNorm:
// W[:, j] *= s[j] before requantizing, norm weight[j] /= s[j]. Empty: no smoothing.
struct WeightRequest {
  std::string mode = "native";
  std::string ops, layers;
  std::vector<float> smooth_attn, smooth_ffn;  // [n_layer * n_embd]
  float smooth_alpha = 0;                      // what made them (for the description)
};

// Per-channel max |x| of the normalized inputs of qkv (attn) and gate_up (ffn), per layer
// ([n_layer * n_embd] each): what SmoothQuant calibrates from. Filled by llama_forward when set
// on a Workspace.
struct ActStats {
  std::vector<float> attn, ffn;
};

class LlamaModel {
 public:
  // `isa` is the kernel family that will run (W8A8 without AVX-512 VNNI says once that it falls back).
  static Expected<std::unique_ptr<LlamaModel>> load(const std::string& path, const WeightRequest& wr = {},
                                                    Isa isa = Isa::kAvx512);
  // "native", or "w8a8:OPS@LAYERS".
  const std::string& weights_desc() const { return weights_desc_; }
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
  std::string weights_desc_ = "native";
  LlamaConfig cfg_;
  LlamaWeights w_;
};

// Paged KV storage: per layer, n_blocks blocks of block_size positions, each position a K row and a
// V row of n_head_kv heads of head_dim values, in the layer's K and V types (kernels/kv_types.h;
// an f32 row is n_head_kv * head_dim floats). A sequence's block table maps its position p to row
// p % block_size of block table[p / block_size]. One block of n_ctx positions is a plain cache.
class KvStore {
 public:
  // An empty spec means f32 everywhere. Throws std::bad_alloc.
  KvStore(const LlamaConfig& c, const KvSpec& spec, int n_blocks, int block_size);
  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  const KvSpec& spec() const { return spec_; }
  // Layer `layer`'s K (v = false) or V storage, positioned at kv head `head`.
  KvSide side(int layer, bool v, int head) const;
  // The row of position r of block `block` in layer `layer`'s K or V storage.
  uint8_t* row(int layer, bool v, int block, int r) const {
    const Region& g = reg_[2 * layer + v];
    return buf_.bytes() + g.offset + (size_t)block * g.block_bytes + (size_t)r * g.row_bytes;
  }
  // Bytes of one block (K and V of every layer).
  size_t block_bytes() const { return bytes_per_block(n_head_kv_, head_dim_, spec_, block_size_); }
  // Makes the whole pool resident now (see LazyBuffer::commit).
  void commit() { buf_.commit(); }
  static size_t bytes_per_block(const LlamaConfig& c, const KvSpec& spec, int block_size) {
    return bytes_per_block(c.n_head_kv, c.head_dim, full_spec(c, spec), block_size);
  }
  // `spec`, or f32 for every layer when it is empty.
  static KvSpec full_spec(const LlamaConfig& c, const KvSpec& spec);

 private:
  static size_t bytes_per_block(int n_head_kv, int head_dim, const KvSpec& spec, int block_size) {
    return spec.bytes_per_token(n_head_kv, head_dim) * (size_t)block_size;
  }
  struct Region { size_t offset, block_bytes, row_bytes; KvType type; };
  int n_head_kv_, head_dim_, n_blocks_, block_size_;
  KvSpec spec_;
  std::vector<Region> reg_;  // [2 * layer + (0: K, 1: V)]
  LazyBuffer buf_;
};

// One sequence's part of a batched forward pass: n new tokens at positions n_past.., whose K/V go
// to the blocks of its table (which must cover n_past + n positions).
struct SeqBatch {
  const int* tokens = nullptr;
  int n = 0;
  int n_past = 0;
  const int* blocks = nullptr;
  bool want_logits = false;  // logits of the last new token ...
  bool all_logits = false;   // ... or of every new token
};

// Scratch of a forward pass over up to max_tokens tokens (of any number of sequences).
class Workspace {
 public:
  Workspace(const LlamaConfig& c, int max_tokens);
  int max_tokens() const { return max_tokens_; }
  // Collect activation statistics in forward passes (calibration); nullptr: off.
  void set_act_stats(ActStats* s) { stats_ = s; }

 private:
  friend Status llama_forward(const LlamaModel&, KvStore&, Workspace&, const SeqBatch*, int, float*, ThreadPool&,
                              const MatmulKernels&);
  int max_tokens_;
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, g_, u_, h_, scores_;
  std::vector<int> tok_, pos_, seq_, out_rows_;
  std::vector<int64_t> cum_keys_;
  QuantActs qa_;
  ActStats* stats_ = nullptr;
};

// Runs the new tokens of n_seqs sequences as one batch: every matrix is read once for all of them,
// attention reads each sequence's own cache through its block table. Logit rows go to `logits` in
// sequence order ([rows][n_vocab]). The sum of n must fit the workspace; positions must fit the
// block tables (the caller's contract; checked by LlamaState and the scheduler).
Status llama_forward(const LlamaModel& m, KvStore& kv, Workspace& ws, const SeqBatch* seqs, int n_seqs, float* logits,
                     ThreadPool& pool, const MatmulKernels& k);

// Per-sequence state: a contiguous KV cache (one block of n_ctx positions) and scratch for up to
// max_batch tokens per forward call.
class LlamaState {
 public:
  LlamaState(const LlamaModel& m, int n_ctx, int max_batch = 512, const KvSpec& kv = {});
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
  const LlamaModel& m_;
  int n_ctx_, max_batch_;
  int n_past_ = 0;
  KvStore kv_;
  Workspace ws_;
};

}  // namespace ouro
