// The model interface: everything outside src/model/ sees a model through this header only
// (docs/design.md, "The model interface"). An architecture is one class behind it, registered by
// its GGUF `general.architecture` (model.cpp); llama is the first (llama.h, llama.cpp).
//
// What an architecture provides:
//  - load: check every key and tensor it reads, each error naming the file and the key or tensor;
//  - info, the weights' description and bytes read per token (bench, roofline);
//  - its memory needs: attention rows (kv_layout, paged, any number of positions) and recurrent
//    state (state_bytes_per_seq, one fixed-size slot per running sequence);
//  - forward: the new tokens of several sequences as one batch, each with its block table and
//    state slot, writing the logit rows asked for; a trace span per op carrying the bytes and
//    FLOPs it moved (src/trace), and the fault hooks the lab's adversaries use (core/fault.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/status.h"
#include "kernels/matmul.h"
#include "model/gguf.h"
#include "model/memory.h"

namespace ouro {

class ThreadPool;

struct ModelInfo {
  std::string arch;  // general.architecture
  int n_layer = 0, n_embd = 0, n_vocab = 0, n_ctx_train = 0;
};

// How the weights are computed (docs/quantization.md): "native" runs the GGUF's own blocks; "w8a8"
// requantizes the chosen ops' matrices to int8 per output row at load time, with int8 per-token
// activations. ops: comma list of the architecture's op names (llama: qkv, o, gate_up, down, head;
// empty: all but head); layers: comma list of layer ranges (empty: all). smooth_alpha > 0:
// SmoothQuant factors calibrated at load time on the native model over smooth_calib's text.
struct WeightRequest {
  std::string mode = "native";
  std::string ops, layers;
  float smooth_alpha = 0;
  std::string smooth_calib;
};

// Says once on stderr that W8A8 runs without AVX-512 VNNI when `isa` is not AVX-512 (both loaders).
void note_w8a8_kernel(Isa isa);

// One sequence's part of a batched forward pass: n new tokens at positions n_past.., whose K/V go
// to the blocks of its table (which must cover n_past + n positions) and whose recurrent state is
// slot state_slot of the store.
struct SeqBatch {
  const int* tokens = nullptr;
  int n = 0;
  int n_past = 0;
  const int* blocks = nullptr;
  int state_slot = 0;
  bool want_logits = false;  // logits of the last new token ...
  bool all_logits = false;   // ... or of every new token
  // How many of the n new tokens, at the end, the model sampled (decode steps); the others were
  // given (a prompt). An architecture may compute the two kinds differently (kimi-linear's MLA), so
  // a token's arithmetic follows its kind and never the chunking of the batch.
  int n_sampled = 0;
};

// Scratch of a forward pass over up to max_tokens tokens (of any number of sequences); each
// architecture has its own.
class Workspace {
 public:
  explicit Workspace(int max_tokens) : max_tokens_(max_tokens < 1 ? 1 : max_tokens) {}
  virtual ~Workspace() = default;
  int max_tokens() const { return max_tokens_; }
  // When set, a forward pass over one sequence's n tokens appends the residual stream after each
  // layer ([n_layer][n][n_embd]): the oracle tests' per-layer view (`ouro logits --hidden`).
  std::vector<float>* layer_out = nullptr;

 private:
  int max_tokens_;
};

class Model {
 public:
  virtual ~Model() = default;
  // Opens the GGUF and loads it with the architecture its general.architecture names; an unknown
  // one is an error naming it and the known ones. `isa` is the kernel family that will run; `pool`
  // runs load-time work (SmoothQuant calibration).
  static Expected<std::unique_ptr<Model>> load(const std::string& path, const WeightRequest& wr, Isa isa,
                                               ThreadPool& pool);
  static std::vector<std::string> architectures();

  virtual const ModelInfo& info() const = 0;
  virtual const GgufFile& gguf() const = 0;
  // "native", or e.g. "w8a8:OPS@LAYERS".
  virtual const std::string& weights_desc() const = 0;
  // Bytes of weights one decode step reads.
  virtual size_t weight_bytes_per_token() const = 0;
  virtual KvLayout kv_layout() const = 0;
  virtual size_t state_bytes_per_seq() const = 0;
  virtual std::unique_ptr<Workspace> new_workspace(int max_tokens) const = 0;
  // Runs the new tokens of n_seqs sequences as one batch. Logit rows go to `logits` in sequence
  // order ([rows][n_vocab]). The tokens must fit the workspace and the block tables (the caller's
  // contract; checked by SequenceState and the scheduler).
  virtual Status forward(const ModelMemory& mem, Workspace& ws, const SeqBatch* seqs, int n_seqs, float* logits,
                         ThreadPool& pool, const MatmulKernels& k) const = 0;

  // Attention memory per position for the given KV types, and recurrent memory per sequence.
  size_t kv_bytes_per_token(const KvSpec& spec) const { return PagedKvCache::bytes_per_token(kv_layout(), spec); }
};

}  // namespace ouro
