// A persistent pool: the caller's thread is worker 0; helpers spin briefly, then sleep, between jobs.
// run(fn) calls fn(thread_index, n_threads) on every thread and returns when all are done.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ouro {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  // `region` names the parallel region in traces (each thread's share is a "pool.job" span, the
  // caller's wait for helpers a "pool.wait" span); it must be a string literal.
  void run(const std::function<void(int, int)>& fn, const char* region = "pool");

  // Splits [0, n) into size() contiguous chunks, aligned to `align`; chunk of thread t.
  static void split(int64_t n, int t, int nt, int64_t align, int64_t* begin, int64_t* end);
  // Splits the T * per_token items of attention (item i belongs to token i / per_token and costs
  // cum[token + 1] - cum[token], e.g. the keys it reads; cum holds T + 1 prefix sums starting at 0)
  // into nt contiguous chunks of near-equal total cost (each within one item's cost of total / nt);
  // chunk of thread t.
  static void split_weighted(const int64_t* cum, int64_t T, int per_token, int t, int nt, int64_t* begin, int64_t* end);

 private:
  void worker(int idx);
  int n_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  const char* region_ = "pool";
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// Runs fn(begin, end) over [0, n) in one contiguous chunk per thread, or inline over all of it when
// n < min_parallel or the pool has one thread (a decode step's few items are not worth a wake-up).
template <typename Fn>
void parallel_ranges(ThreadPool& pool, int64_t n, const char* region, Fn&& fn, int64_t min_parallel = 4) {
  if (n <= 0) return;
  if (n < min_parallel || pool.size() == 1) { fn((int64_t)0, n); return; }
  pool.run([&](int t, int nt) {
    int64_t b, e;
    ThreadPool::split(n, t, nt, 1, &b, &e);
    if (b < e) fn(b, e);
  }, region);
}

}  // namespace ouro
