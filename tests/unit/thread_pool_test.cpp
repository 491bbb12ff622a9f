#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

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
