// The memory types behind the model interface (model/memory.h) and SequenceState over a model with
// recurrent state. The model here is a toy written for the test: its "state" is the running sum of
// the token ids, so what each call must see is known without any engine code.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "model/memory.h"
#include "model/model.h"
#include "runtime/sequence.h"

using namespace ouro;

namespace {

// Vocabulary of 4; logits[0] = the sum of every token id seen by the sequence so far (its state),
// logits[1] = the position, logits[2] = how many tokens share this call. One attention layer of one
// head of 2 values is declared so the KV cache has rows; the toy writes its position into them.
class SumModel : public Model {
 public:
  const ModelInfo& info() const override { return info_; }
  const GgufFile& gguf() const override { std::abort(); }
  const std::string& weights_desc() const override { return desc_; }
  size_t weight_bytes_per_token() const override { return 0; }
  KvLayout kv_layout() const override { return {1, 1, 2}; }
  size_t state_bytes_per_seq() const override { return sizeof(double); }
  std::unique_ptr<Workspace> new_workspace(int max_tokens) const override {
    return std::make_unique<Workspace>(max_tokens);
  }
  Status forward(const ModelMemory& mem, Workspace& ws, const SeqBatch* seqs, int n_seqs, float* logits, ThreadPool&,
                 const MatmulKernels&) const override {
    int row = 0;
    for (int s = 0; s < n_seqs; ++s) {
      const SeqBatch& b = seqs[s];
      if (b.n > ws.max_tokens()) return usage_error("over the workspace");
      double sum;
      std::memcpy(&sum, mem.state.slot(b.state_slot), sizeof sum);
      for (int i = 0; i < b.n; ++i) {
        sum += b.tokens[i];
        const int pos = b.n_past + i;
        float* k = reinterpret_cast<float*>(mem.kv.row(0, false, b.blocks[pos / mem.kv.block_size()], pos % mem.kv.block_size()));
        k[0] = (float)pos;
        if (b.all_logits || (b.want_logits && i == b.n - 1)) {
          float* out = logits + (size_t)row++ * 4;
          out[0] = (float)sum;
          out[1] = (float)pos;
          out[2] = (float)b.n;
          out[3] = k[0];
        }
      }
      std::memcpy(mem.state.slot(b.state_slot), &sum, sizeof sum);
    }
    return Ok{};
  }

 private:
  ModelInfo info_{"sum", 1, 2, 4, 1024};
  std::string desc_ = "native";
};

TEST(RecurrentStateStore, SlotsAreAlignedZeroedAndCleared) {
  RecurrentStateStore st(100, 3);
  EXPECT_EQ(st.bytes_per_slot(), 100u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(st.slot(i)) % 64, 0u);
    for (int b = 0; b < 100; ++b) EXPECT_EQ(st.slot(i)[b], 0);
  }
  std::memset(st.slot(1), 7, 100);
  st.clear(1);
  for (int b = 0; b < 100; ++b) EXPECT_EQ(st.slot(1)[b], 0);
  RecurrentStateStore none(0, 4);  // an attention-only model: nothing to hold, clear is a no-op
  EXPECT_EQ(none.bytes_per_slot(), 0u);
  none.clear(3);
}

TEST(PagedKvCache, BytesPerTokenFollowTheLayoutAndTypes) {
  const KvLayout l{30, 3, 64};
  EXPECT_EQ(PagedKvCache::bytes_per_token(l, KvSpec{}), 2u * 30 * 3 * 64 * 4);
  EXPECT_EQ(PagedKvCache::bytes_per_block(l, KvSpec{}, 16), 16u * 2 * 30 * 3 * 64 * 4);
  EXPECT_EQ(PagedKvCache::bytes_per_token(KvLayout{}, KvSpec{}), 0u);
  PagedKvCache empty(KvLayout{}, KvSpec{}, 4, 16);  // no attention layers: no pool at all
  EXPECT_EQ(empty.n_blocks(), 4);
}

TEST(SequenceState, RecurrentStateCarriesAcrossCallsAndChunks) {
  SumModel m;
  ThreadPool pool(1);
  const MatmulKernels& k = matmul_kernels(Isa::kScalar);
  SequenceState st(m, 64, /*max_batch=*/3);
  EXPECT_EQ(st.state_bytes(), sizeof(double));
  EXPECT_EQ(st.kv_bytes_per_token(), 2u * 2 * 4);
  const std::vector<int> ids = {1, 2, 3, 0, 1, 2, 3};
  std::vector<float> all(ids.size() * 4);
  ASSERT_TRUE(st.forward(ids.data(), (int)ids.size(), all.data(), true, pool, k));  // chunks of 3, 3, 1
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    sum += ids[i];
    EXPECT_EQ(all[i * 4 + 0], sum) << i;
    EXPECT_EQ(all[i * 4 + 1], (float)i);
    EXPECT_EQ(all[i * 4 + 2], i < 6 ? 3.0f : 1.0f);
    EXPECT_EQ(all[i * 4 + 3], (float)i);  // the row of position i in the cache
  }
  std::vector<float> last(4);
  const int more = 2;
  ASSERT_TRUE(st.forward(&more, 1, last.data(), false, pool, k));
  EXPECT_EQ(last[0], sum + 2);
  EXPECT_EQ(st.n_past(), 8);
}

TEST(SequenceState, ARecurrentStateCannotGoBack) {
  SumModel m;
  ThreadPool pool(1);
  const MatmulKernels& k = matmul_kernels(Isa::kScalar);
  SequenceState st(m, 64);
  const std::vector<int> ids = {3, 3, 3};
  std::vector<float> out(4);
  ASSERT_TRUE(st.forward(ids.data(), 3, out.data(), false, pool, k));
  st.truncate(5);  // keeps everything: nothing to drop
  EXPECT_EQ(st.n_past(), 3);
  st.truncate(2);  // the state after 2 tokens is gone: the sequence starts over
  EXPECT_EQ(st.n_past(), 0);
  ASSERT_TRUE(st.forward(ids.data(), 1, out.data(), false, pool, k));
  EXPECT_EQ(out[0], 3.0f);  // not 9 + 3: the state was zeroed
  st.reset();
  EXPECT_EQ(st.n_past(), 0);
  const int bad = 4;
  EXPECT_FALSE(st.forward(&bad, 1, out.data(), false, pool, k));  // out of the vocabulary
}

TEST(SequenceState, ARecurrentStateGoesBackToAMark) {
  SumModel m;
  ThreadPool pool(1);
  const MatmulKernels& k = matmul_kernels(Isa::kScalar);
  SequenceState st(m, 64);
  const std::vector<int> ids = {1, 2, 3};
  std::vector<float> out(4);
  ASSERT_TRUE(st.forward(ids.data(), 3, out.data(), false, pool, k));
  const SequenceState::Mark at = st.mark();  // sum 6 after 3 positions
  ASSERT_TRUE(st.forward(ids.data(), 3, out.data(), false, pool, k));
  EXPECT_EQ(out[0], 12.0f);
  ASSERT_TRUE(st.rewind(at));
  EXPECT_EQ(st.n_past(), 3);
  const int two = 2;
  ASSERT_TRUE(st.forward(&two, 1, out.data(), false, pool, k));
  EXPECT_EQ(out[0], 8.0f);  // 6 + 2: the state at the mark, not 12 + 2 or 0 + 2
  EXPECT_EQ(out[1], 3.0f);  // at position 3 again
  ASSERT_TRUE(st.rewind(at));  // a mark serves any number of times
  EXPECT_EQ(st.n_past(), 3);
  st.truncate(1);  // positions before the mark are gone: it cannot be used any more
  EXPECT_FALSE(st.rewind(at));
  EXPECT_EQ(st.n_past(), 0);
  st.reset();
  ASSERT_TRUE(st.forward(ids.data(), 3, out.data(), false, pool, k));
  EXPECT_FALSE(st.rewind(at));  // the same position count, but filled after a reset
}

}  // namespace
