// One sequence's own memory and scratch, for the commands that run one sequence at a time (generate,
// chat, logits, bench, quality, the lab's worker): a contiguous KV cache (one block of n_ctx
// positions), one recurrent-state slot and a workspace of max_batch tokens, all from the model
// interface. The server's scheduler shares a paged pool between many sequences instead.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"

namespace ouro {

class SequenceState {
 public:
  SequenceState(const Model& m, int n_ctx, int max_batch = 512, const KvSpec& kv = {});
  int n_ctx() const { return n_ctx_; }
  int n_past() const { return n_past_; }
  // Forgets every position (the recurrent state is zeroed too).
  void reset();
  // Drops cached positions >= n (for reusing a common prefix). A model with recurrent state cannot
  // go back: its state is reset unless n covers every position.
  void truncate(int n);

  // A place to come back to: the position and a copy of the recurrent state there. rewind(m) drops
  // the positions after it and puts the state back, so a model with recurrent memory can go back
  // too (bench starts every repeat at the same --depth without filling it again). It returns false,
  // changing nothing, after a reset or truncate since the mark (its positions may be other tokens now).
  struct Mark {
    int n_past = 0;
    uint64_t epoch = 0;
    std::vector<uint8_t> state;
  };
  Mark mark() const;
  bool rewind(const Mark& m);

  // Runs tokens[0..n) at positions n_past.. and appends them to the memory. Writes logits of the
  // last token to `logits` [n_vocab], or of every token ([n][n_vocab]) when all_logits.
  // Processes in chunks of max_batch. Returns an error if the context would overflow.
  // The tokens are given (a prompt; SeqBatch::n_sampled).
  Status forward(const int* tokens, int n, float* logits, bool all_logits, ThreadPool& pool, const MatmulKernels& k);
  // One decode step: the token the model sampled last, its logits to `logits` [n_vocab].
  Status decode(int token, float* logits, ThreadPool& pool, const MatmulKernels& k) {
    return run(&token, 1, logits, false, true, pool, k);
  }

  // Collects each layer's output of the coming forward calls into *out (Workspace::layer_out),
  // [call][n_layer][tokens of the call][n_embd]; nullptr stops.
  void collect_layers(std::vector<float>* out) { ws_->layer_out = out; }

  // Attention memory per position and recurrent memory of the sequence, in bytes.
  size_t kv_bytes_per_token() const;
  size_t state_bytes() const { return state_.bytes_per_slot(); }

 private:
  Status run(const int* tokens, int n, float* logits, bool all_logits, bool sampled, ThreadPool& pool,
             const MatmulKernels& k);
  const Model& m_;
  int n_ctx_, max_batch_;
  int n_past_ = 0;
  uint64_t epoch_ = 0;  // counts resets and truncations: a Mark from another epoch is gone
  PagedKvCache kv_;
  RecurrentStateStore state_;
  std::unique_ptr<Workspace> ws_;
};

}  // namespace ouro
