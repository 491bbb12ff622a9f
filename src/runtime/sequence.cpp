#include "runtime/sequence.h"

#include <algorithm>
#include <string>

namespace ouro {

SequenceState::SequenceState(const Model& m, int n_ctx, int max_batch, const KvSpec& kv)
    : m_(m), n_ctx_(n_ctx), max_batch_(std::max(1, max_batch)), kv_(m.kv_layout(), kv, 1, n_ctx),
      state_(m.state_bytes_per_seq(), 1), ws_(m.new_workspace(max_batch_)) {}

size_t SequenceState::kv_bytes_per_token() const { return m_.kv_bytes_per_token(kv_.spec()); }

void SequenceState::reset() {
  n_past_ = 0;
  ++epoch_;
  state_.clear(0);
}

void SequenceState::truncate(int n) {
  if (n >= n_past_) return;
  if (state_.bytes_per_slot() > 0) {
    reset();
    return;
  }
  n_past_ = std::max(0, n);
  ++epoch_;
}

SequenceState::Mark SequenceState::mark() const {
  if (state_.bytes_per_slot() == 0) return {n_past_, epoch_, {}};  // attention only: no slot memory to read
  const uint8_t* slot = state_.slot(0);
  return {n_past_, epoch_, std::vector<uint8_t>(slot, slot + state_.bytes_per_slot())};
}

bool SequenceState::rewind(const Mark& m) {
  if (m.epoch != epoch_ || m.n_past > n_past_ || m.state.size() != state_.bytes_per_slot()) return false;
  n_past_ = m.n_past;
  if (!m.state.empty()) std::copy(m.state.begin(), m.state.end(), state_.slot(0));
  return true;
}

Status SequenceState::forward(const int* tokens, int n, float* logits, bool all_logits, ThreadPool& pool,
                              const MatmulKernels& k) {
  return run(tokens, n, logits, all_logits, false, pool, k);
}

Status SequenceState::run(const int* tokens, int n, float* logits, bool all_logits, bool sampled, ThreadPool& pool,
                          const MatmulKernels& k) {
  if (n <= 0) return usage_error("no tokens to process");
  if (n_past_ + n > n_ctx_)
    return runtime_error("context overflow: " + std::to_string(n_past_) + " cached + " + std::to_string(n) +
                         " new tokens exceed the context of " + std::to_string(n_ctx_));
  const int nv = m_.info().n_vocab;
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= nv)
      return usage_error("token id " + std::to_string(tokens[i]) + " is out of range [0, " + std::to_string(nv) + ")");
  const int block0 = 0;
  const ModelMemory mem{kv_, state_};
  for (int done = 0; done < n; done += max_batch_) {
    const int T = std::min(max_batch_, n - done);
    const bool last = done + T == n;
    SeqBatch b;
    b.tokens = tokens + done;
    b.n = T;
    b.n_past = n_past_;
    b.blocks = &block0;
    b.state_slot = 0;
    b.all_logits = all_logits;
    b.want_logits = all_logits || (last && logits);
    b.n_sampled = sampled ? T : 0;
    if (Status s = m_.forward(mem, *ws_, &b, 1, all_logits ? logits + (size_t)done * nv : logits, pool, k); !s) return s;
    n_past_ += T;
  }
  return Ok{};
}

}  // namespace ouro
