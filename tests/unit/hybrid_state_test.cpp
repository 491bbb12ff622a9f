// The hybrid model's per-sequence memory through SequenceState, on models/hybrid-tiny.F32 (made by
// scripts/setup.sh): a prefill in pieces equals one prefill (the conv windows and S handed over at
// every boundary), decode after a prefill equals the same tokens in one prefill, and the memory
// sizes are the ones the config gives. Also the k_only layout of the paged cache the MLA rows use.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/thread_pool.h"
#include "model/memory.h"
#include "model/model.h"
#include "runtime/sequence.h"

namespace ouro {
namespace {

const std::string kPath = std::string(OURO_SOURCE_DIR) + "/models/hybrid-tiny.F32.gguf";

class HybridState : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kPath)) << kPath << " is missing: scripts/make_hybrid.sh makes it";
    auto m = Model::load(kPath, {}, Isa::kScalar, pool);
    ASSERT_TRUE(m) << m.error().message;
    model = std::move(*m);
    ASSERT_EQ(model->info().arch, "kimi-linear");
    std::mt19937 rng(7);
    ids.resize(1000);
    for (int& t : ids) t = (int)(rng() % (uint32_t)model->info().n_vocab);
  }
  // Logits of every token of ids[from, from + n).
  std::vector<float> run(SequenceState& st, int from, int n) {
    std::vector<float> out((size_t)n * model->info().n_vocab);
    Status s = st.forward(ids.data() + from, n, out.data(), true, pool, matmul_kernels(Isa::kScalar));
    EXPECT_TRUE(s) << s.error().message;
    return out;
  }
  static double nmse(const float* a, const float* b, size_t n) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (a[i] - b[i]) * (double)(a[i] - b[i]);
      ref += b[i] * (double)b[i];
    }
    return err / ref;
  }
  ThreadPool pool{2};
  std::unique_ptr<Model> model;
  std::vector<int> ids;
};

TEST_F(HybridState, PiecesEqualOneCallAtEveryBoundary) {
  const size_t nv = model->info().n_vocab;
  SequenceState one(*model, 512, 512);
  const std::vector<float> whole = run(one, 0, 300);
  // 300 tokens as 64-token chunks inside one call, and as calls of 1, 2, 3, 5, 150, 139 tokens:
  // every split point before, at and after the conv window of 3 inputs.
  SequenceState chunked(*model, 512, 64);
  EXPECT_LT(nmse(run(chunked, 0, 300).data(), whole.data(), whole.size()), 1e-10);
  SequenceState pieces(*model, 512, 512);
  int at = 0;
  for (int n : {1, 2, 3, 5, 150, 139}) {
    const std::vector<float> part = run(pieces, at, n);
    EXPECT_LT(nmse(part.data(), whole.data() + at * nv, part.size()), 1e-10) << "call at " << at << " of " << n;
    at += n;
  }
  EXPECT_EQ(pieces.n_past(), 300);
}

TEST_F(HybridState, Prefill700Then300EqualsOne1000) {
  const size_t nv = model->info().n_vocab;
  SequenceState one(*model, 1024, 512);  // 1,000 tokens in one call (chunks of 512 + 488 inside)
  const std::vector<float> whole = run(one, 0, 1000);
  SequenceState two(*model, 1024, 512);
  run(two, 0, 700);
  const std::vector<float> tail = run(two, 700, 300);
  EXPECT_LT(nmse(tail.data(), whole.data() + 700 * nv, tail.size()), 1e-10);
  EXPECT_EQ(two.n_past(), 1000);
}

// Decode steps run MLA in the absorbed form, prompts in the decompressing one (kimi_linear.cpp):
// the same math, rounded differently.
TEST_F(HybridState, DecodeAfterPrefillEqualsOnePrefill) {
  const size_t nv = model->info().n_vocab;
  SequenceState one(*model, 512, 512);
  const std::vector<float> whole = run(one, 0, 40);
  SequenceState dec(*model, 512, 512);
  run(dec, 0, 30);
  for (int t = 30; t < 40; ++t) {
    std::vector<float> row(nv);
    ASSERT_TRUE(dec.decode(ids[t], row.data(), pool, matmul_kernels(Isa::kScalar)));
    EXPECT_LT(nmse(row.data(), whole.data() + t * nv, nv), 1e-10) << "decode step at " << t;
  }
}

// Past 256 keys a decode step's MLA attends in chunks of keys whose softmaxes merge
// (kimi_linear.cpp's kMlaDecodeChunk): still the one prefill's logits within rounding, on every
// ISA, and the same bits with 1, 2 or 3 threads (chunks sit at fixed positions). Recomputed in one
// batch the sampled tokens take the same path: SampledTokensInOneBatchAreTheirDecodeSteps.
TEST_F(HybridState, DecodePastOneKeyChunkEqualsOnePrefill) {
  std::vector<Isa> isas = {Isa::kAvx2};
  if (isa_supported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  for (Isa isa : isas) {
    auto m = Model::load(kPath, {}, isa, pool);
    ASSERT_TRUE(m) << m.error().message;
    const size_t nv = (*m)->info().n_vocab;
    const MatmulKernels& k = matmul_kernels(isa);
    SequenceState one(**m, 1024, 600);
    std::vector<float> whole(600 * nv);
    ASSERT_TRUE(one.forward(ids.data(), 600, whole.data(), true, pool, k));
    std::vector<std::vector<float>> by_threads;
    for (int threads : {2, 1, 3}) {
      if (threads != 2 && isa != isas.back()) continue;
      ThreadPool tp(threads);
      SequenceState dec(**m, 1024, 600);
      std::vector<float> skip(600 * nv), row(nv), rows;
      ASSERT_TRUE(dec.forward(ids.data(), 250, skip.data(), true, tp, k));
      // 251..263 keys one by one (one chunk, then two), then 401 and 561 keys (two and three chunks).
      for (int t : {250, 251, 252, 253, 254, 255, 256, 257, 258, 259, 260, 261, 262, 400, 560}) {
        if (dec.n_past() < t) {
          ASSERT_TRUE(dec.forward(ids.data() + dec.n_past(), t - dec.n_past(), skip.data(), true, tp, k));
        }
        ASSERT_TRUE(dec.decode(ids[t], row.data(), tp, k));
        EXPECT_LT(nmse(row.data(), whole.data() + (size_t)t * nv, nv), 1e-10)
            << "decode step at " << t << " " << isa_name(isa) << " threads " << threads;
        rows.insert(rows.end(), row.begin(), row.end());
      }
      by_threads.push_back(rows);
    }
    for (size_t i = 1; i < by_threads.size(); ++i) EXPECT_EQ(by_threads[0], by_threads[i]) << isa_name(isa) << " " << i;
  }
}

// A prompt token's arithmetic does not depend on the chunking (the server prefills by 256,
// `ouro generate` by 512, and their greedy texts must agree): the same bits in any split. On the
// AVX-512 kernels too, where MLA's decompression and attention run in 512-bit registers.
TEST_F(HybridState, PromptTokensAreTheSameBitsInAnyChunking) {
  std::vector<Isa> isas = {Isa::kScalar, Isa::kAvx2};
  if (isa_supported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  for (Isa isa : isas) {
    auto m = Model::load(kPath, {}, isa, pool);
    ASSERT_TRUE(m) << m.error().message;
    const size_t nv = (*m)->info().n_vocab;
    auto logits = [&](int max_batch, std::initializer_list<int> calls) {
      SequenceState st(**m, 512, max_batch);
      std::vector<float> out;
      int at = 0;
      for (int n : calls) {
        std::vector<float> part((size_t)n * nv);
        EXPECT_TRUE(st.forward(ids.data() + at, n, part.data(), true, pool, matmul_kernels(isa)));
        out.insert(out.end(), part.begin(), part.end());
        at += n;
      }
      return out;
    };
    const std::vector<float> whole = logits(512, {300});
    EXPECT_EQ(logits(64, {300}), whole) << isa_name(isa);
    EXPECT_EQ(logits(512, {1, 2, 3, 5, 150, 139}), whole) << isa_name(isa);
    EXPECT_EQ(logits(256, {44, 256}), whole) << isa_name(isa);
  }
}

// The scheduler recomputes a preempted request's prompt and sampled tokens in one batch: the
// sampled ones keep their decode steps' arithmetic (SeqBatch::n_sampled), bit for bit: short, and
// straddling 256 keys, where decode steps start attending in chunks of keys.
TEST_F(HybridState, SampledTokensInOneBatchAreTheirDecodeSteps) {
  const int nv = model->info().n_vocab;
  const MatmulKernels& k = matmul_kernels(Isa::kScalar);
  for (auto [n_prompt, n] : {std::pair{20, 24}, {250, 266}}) {
    SequenceState ref(*model, 512, 512);
    const std::vector<float> prompt = run(ref, 0, n_prompt);
    std::vector<float> steps((size_t)(n - n_prompt) * nv);
    for (int t = n_prompt; t < n; ++t) ASSERT_TRUE(ref.decode(ids[t], &steps[(size_t)(t - n_prompt) * nv], pool, k));
    PagedKvCache kv(model->kv_layout(), KvSpec{}, 1, 512);
    RecurrentStateStore state(model->state_bytes_per_seq(), 1);
    auto ws = model->new_workspace(512);
    const int block0 = 0;
    SeqBatch b;
    b.tokens = ids.data();
    b.n = n;
    b.blocks = &block0;
    b.all_logits = true;
    b.n_sampled = n - n_prompt;
    std::vector<float> all((size_t)n * nv);
    ASSERT_TRUE(model->forward({kv, state}, *ws, &b, 1, all.data(), pool, k));
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), all.begin())) << n;
    EXPECT_TRUE(std::equal(steps.begin(), steps.end(), all.begin() + (size_t)n_prompt * nv)) << n;
  }
}

TEST_F(HybridState, TruncateResetsTheRecurrentState) {
  SequenceState st(*model, 512, 512);
  const std::vector<float> first = run(st, 0, 20);
  st.truncate(10);  // a recurrent state cannot go back 10 tokens: the sequence starts over
  EXPECT_EQ(st.n_past(), 0);
  EXPECT_EQ(run(st, 0, 20), first);  // the same state and arithmetic: bit-identical
}

TEST_F(HybridState, MemorySizesAreTheConfigs) {
  // hybrid-tiny: two MLA layers of kv_lora 64 + rope 16 values, one row per position (no V rows);
  // six KDA layers of 2 heads x 128 with conv 4: 6 x (3 x 3 x 256 + 2 x 128 x 128) floats.
  SequenceState st(*model, 512, 512);
  EXPECT_EQ(st.kv_bytes_per_token(), 4u * 2 * 80);
  EXPECT_EQ(st.state_bytes(), 4u * 6 * (3 * 3 * 256 + 2 * 128 * 128));
  KvSpec int8;
  int8.k.assign(2, KvType::kInt8);
  int8.v.assign(2, KvType::kF32);
  EXPECT_EQ(model->kv_bytes_per_token(int8), 2u * (80 + 4));  // int8 values and one scale per row
}

TEST_F(HybridState, RewindToAMarkRepeatsTheSameLogits) {
  // What bench does at --depth: fill once, mark, then every measurement from the mark. The KDA
  // state is copied back and the MLA rows after the mark are dropped, so the same tokens after it
  // give the same bits as the first time; a reset since makes the mark unusable.
  SequenceState st(*model, 512, 64);
  run(st, 0, 100);
  const SequenceState::Mark at = st.mark();
  EXPECT_EQ(at.n_past, 100);
  EXPECT_EQ(at.state.size(), st.state_bytes());
  const std::vector<float> first = run(st, 100, 70);
  run(st, 300, 5);  // other tokens after the first ones: the state moved on
  for (int again = 0; again < 2; ++again) {
    ASSERT_TRUE(st.rewind(at));
    EXPECT_EQ(st.n_past(), 100);
    const std::vector<float> next = run(st, 100, 70);
    ASSERT_EQ(next.size(), first.size());
    EXPECT_EQ(std::memcmp(next.data(), first.data(), first.size() * sizeof(float)), 0) << "rewind " << again;
  }
  st.reset();
  run(st, 0, 150);
  EXPECT_FALSE(st.rewind(at));  // the positions before the mark may hold other tokens now
  EXPECT_EQ(st.n_past(), 150);
}

TEST(KOnlyLayout, OneRowServesAsKeyAndValue) {
  const KvLayout layout{2, 1, 80, true};
  KvSpec spec;
  spec.k = {KvType::kBF16, KvType::kInt8};
  spec.v = {KvType::kF32, KvType::kF32};  // what --kv k=... leaves: V follows K
  EXPECT_TRUE(PagedKvCache::check_spec(layout, spec));
  PagedKvCache kv(layout, spec, 3, 16);
  EXPECT_EQ(PagedKvCache::bytes_per_token(layout, spec), 80u * 2 + 80 + 4);
  for (int l = 0; l < 2; ++l) {
    const KvSide k = kv.side(l, false, 0), v = kv.side(l, true, 0);
    EXPECT_EQ(k.base, v.base);
    EXPECT_EQ(k.type, v.type);
    EXPECT_EQ(k.row_bytes, v.row_bytes);
    EXPECT_EQ(kv.row(l, false, 2, 5), kv.row(l, true, 2, 5));
  }
  EXPECT_NE(kv.row(0, false, 0, 0), kv.row(1, false, 0, 0));
  spec.v = {KvType::kFP8, KvType::kInt8};  // a V type of its own cannot be honoured
  const Status s = PagedKvCache::check_spec(layout, spec);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("one latent row per position"), std::string::npos) << s.error().message;
  EXPECT_TRUE(PagedKvCache::check_spec({2, 1, 80, false}, spec));  // an ordinary layout takes any types
}

}  // namespace
}  // namespace ouro
