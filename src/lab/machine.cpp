// The machine right now, for `ouro lab run` (lab/runner.h): CPU time from /proc/stat, the share
// of the CPUs others use, and a quick read-bandwidth figure taken before each pair.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <immintrin.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "lab/runner.h"

namespace ouro::lab {


double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double v[10] = {0};
  in >> cpu;
  for (double& x : v) in >> x;
  double busy = 0;
  for (int i = 0; i < 10; ++i)
    if (i != 3 && i != 4 && i < 8) busy += v[i];  // not idle, iowait, or guest (counted in user)
  static const double hz = (double)sysconf(_SC_CLK_TCK);
  return busy / hz;
}

MachineLoad measure_load(double window_s) {
  auto read_stat = [](double& busy, double& total) {
    std::ifstream in("/proc/stat");
    std::string cpu;
    double v[10] = {0};
    in >> cpu;
    for (double& x : v) in >> x;
    total = 0;
    for (double x : v) total += x;
    busy = total - v[3] - v[4];  // minus idle and iowait
  };
  double b0, t0, b1, t1;
  read_stat(b0, t0);
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  read_stat(b1, t1);
  MachineLoad l;
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  l.busy_cores = t1 > t0 ? (b1 - b0) / (t1 - t0) * n : 0;
  std::ifstream la("/proc/loadavg");
  la >> l.load1;
  return l;
}

double quick_bandwidth_gb_s(int threads) {
  static constexpr size_t n = (64u << 20) / sizeof(__m256i);  // 64 MiB, far larger than any cache here
  static __m256i* buf = [] {
    auto* p = static_cast<__m256i*>(std::aligned_alloc(64, n * sizeof(__m256i)));
    for (size_t i = 0; p && i < n; ++i) p[i] = _mm256_set1_epi64x(1);
    return p;
  }();
  if (!buf) return 0;
  threads = std::max(1, threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::thread> ts;
    std::vector<long long> sink(threads);
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        const size_t b = n * t / threads, e = n * (t + 1) / threads;
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = b; i + 4 <= e; i += 4) {
          a0 = _mm256_add_epi64(a0, _mm256_load_si256(buf + i));
          a1 = _mm256_add_epi64(a1, _mm256_load_si256(buf + i + 1));
          a2 = _mm256_add_epi64(a2, _mm256_load_si256(buf + i + 2));
          a3 = _mm256_add_epi64(a3, _mm256_load_si256(buf + i + 3));
        }
        __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
        sink[t] = _mm256_extract_epi64(s, 0);
      });
    for (auto& t : ts) t.join();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, n * sizeof(__m256i) / sec / 1e9);
    if (sink[0] == 42) best += 0;  // keep the sums alive
  }
  return best;
}


}  // namespace ouro::lab
