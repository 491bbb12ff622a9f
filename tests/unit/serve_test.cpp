// The serving pieces that need no model: KV block bookkeeping with the prefix cache, stop-string
// scanning, and attention through a block table.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "kernels/ops.h"
#include "runtime/kv_blocks.h"
#include "runtime/scheduler.h"

using namespace ouro;

TEST(KvBlocks, AllocatesEachBlockOnceAndRunsOut) {
  KvBlocks kb(4, 16);
  std::set<int> got;
  for (int i = 0; i < 4; ++i) got.insert(kb.allocate());
  EXPECT_EQ(got, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(kb.allocate(), -1);
  EXPECT_EQ(kb.used(), 4);
  kb.release(2);
  EXPECT_EQ(kb.used(), 3);
  EXPECT_EQ(kb.allocate(), 2);
}

TEST(KvBlocks, PrefixCacheSharesRefcountsAndEvictsLeastRecentlyUsed) {
  KvBlocks kb(3, 4);
  const int toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const uint64_t h0 = KvBlocks::chain_hash(0, toks, 4), h1 = KvBlocks::chain_hash(h0, toks + 4, 4);
  EXPECT_NE(h0, h1);
  EXPECT_NE(h1, KvBlocks::chain_hash(0, toks + 4, 4));  // the hash depends on the prefix too
  const int a = kb.allocate(), b = kb.allocate();
  kb.publish(a, h0, toks);
  kb.publish(b, h1, toks + 4);
  EXPECT_EQ(kb.lookup(h0, toks), a);  // shared: two references
  kb.release(a);
  EXPECT_EQ(kb.used(), 2);
  kb.release(a);
  kb.release(b);
  EXPECT_EQ(kb.used(), 0);
  EXPECT_EQ(kb.cached(), 2);
  EXPECT_EQ(kb.available(), 3);
  // A lookup with other tokens under the same hash (a collision) misses.
  const int other[4] = {9, 9, 9, 9};
  EXPECT_EQ(kb.lookup(h0, other), -1);
  // Free blocks go first, then the least recently used cached one (a, released first).
  const int c = kb.allocate();
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(kb.allocate(), a);
  EXPECT_EQ(kb.lookup(h0, toks), -1);  // evicted
  EXPECT_EQ(kb.lookup(h1, toks + 4), b);
  EXPECT_EQ(kb.cached(), 0);
  EXPECT_EQ(kb.allocate(), -1);
}

TEST(ScanStops, HoldsBackPossibleStartsAndCutsAtTheFirstStop) {
  const std::vector<std::string> stops = {"END", "\n\n"};
  StopScan r = scan_stops("Hello", 0, stops);
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.end, 5u);
  r = scan_stops("Hello E", 0, stops);  // "E" may begin "END"
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.end, 6u);
  r = scan_stops("Hello EN", 6, stops);
  EXPECT_EQ(r.end, 6u);
  r = scan_stops("Hello END there", 6, stops);
  EXPECT_TRUE(r.hit);
  EXPECT_EQ(r.end, 6u);
  r = scan_stops("a\n\nb END", 1, stops);  // the earliest stop wins
  EXPECT_TRUE(r.hit);
  EXPECT_EQ(r.end, 1u);
  r = scan_stops("abc", 0, {});
  EXPECT_EQ(r.end, 3u);
  // Never goes back before what was already emitted.
  r = scan_stops("xxEND", 4, stops);
  EXPECT_TRUE(r.hit);
  EXPECT_EQ(r.end, 4u);
}

// Attention through a shuffled block table equals attention over the same rows laid out contiguously.
TEST(Ops, AttendPagedMatchesContiguous) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  const int hd = 64, stride = 3 * hd, bs = 16, n_blocks = 6;
  for (int n_keys : {1, 15, 16, 17, 70, 96}) {
    std::vector<float> q(hd), kc((size_t)n_keys * stride), vc((size_t)n_keys * stride);
    for (auto& a : q) a = nd(rng);
    for (auto& a : kc) a = nd(rng);
    for (auto& a : vc) a = nd(rng);
    std::vector<int> table = {4, 0, 5, 2, 1, 3};
    std::vector<float> kp((size_t)n_blocks * bs * stride, NAN), vp(kp.size(), NAN);
    for (int p = 0; p < n_keys; ++p)
      for (int i = 0; i < stride; ++i) {
        kp[((size_t)table[p / bs] * bs + p % bs) * stride + i] = kc[(size_t)p * stride + i];
        vp[((size_t)table[p / bs] * bs + p % bs) * stride + i] = vc[(size_t)p * stride + i];
      }
    std::vector<float> s1(n_keys), s2(n_keys), o1(hd), o2(hd);
    attend_one(q.data(), kc.data(), vc.data(), stride, n_keys, hd, 0.125f, s1.data(), o1.data());
    const int64_t rb = 4 * stride, bb = rb * bs;
    const KvPages pages{table.data(), bs, KvSide{reinterpret_cast<const uint8_t*>(kp.data()), KvType::kF32, rb, bb, 0, 0},
                        KvSide{reinterpret_cast<const uint8_t*>(vp.data()), KvType::kF32, rb, bb, 0, 0}};
    attend_paged(q.data(), pages, n_keys, hd, 0.125f, s2.data(), o2.data());
    for (int i = 0; i < hd; ++i) EXPECT_EQ(o1[i], o2[i]) << n_keys << " " << i;  // same arithmetic, same order
  }
}
