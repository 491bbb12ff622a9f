// Sustained memory read bandwidth, 1..N threads: each thread sums its share of a 256 MiB buffer
// with 256-bit loads, 5 passes; prints the median GB/s. The roofline for decode, which streams
// every weight once per token. Usage: ouro_membw [max_threads]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const size_t n = (size_t)256 << 20;
  const int max_threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : (int)std::thread::hardware_concurrency();
  char* p = static_cast<char*>(std::aligned_alloc(64, n));
  std::memset(p, 1, n);
  for (int nt = 1; nt <= max_threads; ++nt) {
    std::vector<double> gbs;
    long long sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
      std::vector<long long> part(nt);
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> th;
      for (int t = 0; t < nt; ++t)
        th.emplace_back([&, t] {
          __m256i a0 = _mm256_setzero_si256(), a1 = a0;
          for (size_t i = n / nt * t; i < n / nt * (t + 1); i += 128) {
            a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
            a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
          }
          part[t] = _mm256_extract_epi64(_mm256_add_epi64(a0, a1), 0);
        });
      for (auto& x : th) x.join();
      gbs.push_back(n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
      for (long long v : part) sink += v;
    }
    std::sort(gbs.begin(), gbs.end());
    std::printf("read bandwidth, %d thread%s: median %.1f GB/s (min %.1f, max %.1f)%s\n", nt, nt > 1 ? "s" : "",
                gbs[2], gbs[0], gbs[4], sink == 42 ? " " : "");
  }
  std::free(p);
  return 0;
}
