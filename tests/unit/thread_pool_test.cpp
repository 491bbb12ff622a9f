#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

using namespace ouro;

TEST(ThreadPool, SplitCoversRangeOnce) {
  for (int64_t n : {0, 1, 5, 16, 17, 1000})
    for (int nt : {1, 2, 3, 7})
      for (int64_t align : {1, 4, 16}) {
        std::vector<int> hits(n, 0);
        for (int t = 0; t < nt; ++t) {
          int64_t b, e;
          ThreadPool::split(n, t, nt, align, &b, &e);
          for (int64_t i = b; i < e; ++i) hits[i]++;
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << " " << nt << " " << align;
      }
}

TEST(ThreadPool, RunsEveryThreadEachTime) {
  ThreadPool pool(3);
  std::atomic<int> sum{0};
  for (int rep = 0; rep < 1000; ++rep) pool.run([&](int t, int nt) { sum += t + 1; EXPECT_EQ(nt, 3); });
  EXPECT_EQ(sum.load(), 1000 * 6);
}

// split_weighted covers every (token, head) item once, in order, and balances the keys read, for a
// causal prefill (token t reads pos0 + t + 1 keys) and for a mixed batch (costs in any order).
TEST(ThreadPool, SplitWeightedCoversOnceAndBalancesKeys) {
  for (int64_t T : {1, 2, 7, 64, 512})
    for (int per : {1, 3, 9})
      for (int64_t pos0 : {0, 5, 1000})
        for (int nt : {1, 2, 3, 8}) {
          const int64_t n = T * per;
          std::vector<int64_t> cum(T + 1, 0), keys(T);
          for (int64_t u = 0; u < T; ++u) {
            // pos0 == 5 stands for a batch of sequences: costs jump around instead of growing.
            keys[u] = pos0 == 5 ? 1 + (u * 7919) % 300 : pos0 + u + 1;
            cum[u + 1] = cum[u] + keys[u];
          }
          int64_t prev_end = 0, total = 0, max_item = *std::max_element(keys.begin(), keys.end());
          std::vector<int64_t> cost(nt, 0);
          for (int t = 0; t < nt; ++t) {
            int64_t b, e;
            ThreadPool::split_weighted(cum.data(), T, per, t, nt, &b, &e);
            ASSERT_EQ(b, prev_end) << T << " " << per << " " << pos0 << " " << nt;
            ASSERT_LE(b, e);
            for (int64_t i = b; i < e; ++i) cost[t] += keys[i / per];
            prev_end = e;
            total += cost[t];
          }
          ASSERT_EQ(prev_end, n);
          for (int t = 0; t < nt; ++t)
            EXPECT_LE(std::llabs(cost[t] * nt - total), (int64_t)nt * max_item + nt) << T << " " << per << " " << pos0
                                                                                     << " " << nt << " thread " << t;
        }
}

// Helpers that have stopped spinning and sleep on the futex still take every job.
TEST(ThreadPool, WakesSleepingHelpers) {
  ThreadPool pool(3);
  std::atomic<int> sum{0};
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the helpers' spin budget
    pool.run([&](int t, int nt) { sum += t + 1; });
  }
  EXPECT_EQ(sum.load(), 5 * 6);
}
