#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "trace/trace.h"

namespace ouro {

// Helpers poll for the next job with plain loads, without PAUSE (so a new job is seen within a
// load's latency rather than after the PAUSE in flight), for up to kSpinFor, then sleep on the
// futex. The budget is a time, not a count (a PAUSE-free poll takes a few cycles), and longer
// than any gap between regions in a decode step or between steps.
static constexpr std::chrono::microseconds kSpinFor{1000};
static constexpr int kPollsPerClockRead = 256;
// The caller spins this many pauses for helpers to finish before yielding its core.
static constexpr int kYieldAfter = 200000;

ThreadPool::ThreadPool(int n_threads) : n_(std::max(1, n_threads)) {
  try {
    for (int i = 1; i < n_; ++i) threads_.emplace_back([this, i] { worker(i); });
  } catch (...) {  // could not create a thread: stop the ones already running, then report
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::split(int64_t n, int t, int nt, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / nt, rem = units % nt;
  const int64_t b = t * per + std::min<int64_t>(t, rem);
  const int64_t e = b + per + (t < rem ? 1 : 0);
  *begin = std::min(n, b * align);
  *end = std::min(n, e * align);
}

namespace {

// Total cost of the first i items of split_weighted: whole tokens f = i / per_token, then
// i % per_token items of token f, which cost cum[f + 1] - cum[f] each.
int64_t weighted_cost(const int64_t* cum, int64_t i, int per_token) {
  const int64_t f = i / per_token, rem = i % per_token;
  return per_token * cum[f] + (rem ? rem * (cum[f + 1] - cum[f]) : 0);
}

// The first item index whose preceding cost reaches total * t / nt.
int64_t weighted_boundary(const int64_t* cum, int64_t T, int per_token, int t, int nt) {
  const int64_t n = T * per_token;
  if (t <= 0) return 0;
  if (t >= nt) return n;
  const int64_t total = weighted_cost(cum, n, per_token);
  int64_t lo = 0, hi = n;  // smallest i with cost(i) * nt >= total * t
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (weighted_cost(cum, mid, per_token) * nt >= total * t) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace

void ThreadPool::split_weighted(const int64_t* cum, int64_t T, int per_token, int t, int nt, int64_t* begin,
                                int64_t* end) {
  *begin = weighted_boundary(cum, T, per_token, t, nt);
  *end = weighted_boundary(cum, T, per_token, t + 1, nt);
}

void ThreadPool::run(const std::function<void(int, int)>& fn, const char* region) {
  if (n_ == 1) {
    trace::Span job("pool.job", "kernel");
    job.region(region);
    fn(0, 1);
    return;
  }
  job_ = &fn;
  region_ = region;
  pending_.store(n_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  {
    trace::Span job("pool.job", "kernel");
    job.region(region);
    fn(0, n_);
  }
  trace::Span wait("pool.wait", "sync-wait");
  wait.region(region);
  // Spin while helpers finish; if one is not running (another process took its core), yield so
  // it can get this core instead of spinning through our time slice.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kYieldAfter) _mm_pause();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker(int idx) {
  trace::set_thread_name("worker-" + std::to_string(idx));
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
      for (int poll = 1; g == seen; ++poll) {
        g = generation_.load(std::memory_order_acquire);
        if (poll % kPollsPerClockRead == 0 && std::chrono::steady_clock::now() >= deadline) break;
      }
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    {
      trace::Span job("pool.job", "kernel");
      job.region(region_);
      (*job_)(idx, n_);
    }
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace ouro
