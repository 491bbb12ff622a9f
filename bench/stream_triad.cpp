// An independent STREAM-style triad, a[i] = b[i] + q * c[i] over doubles, to cross-check the
// memory figures of `ouro probe`. Plain C++ loops (whatever the compiler makes of them), std::thread,
// no code shared with the engine. Bytes are counted as STREAM counts them: 3 arrays x 8 bytes per
// element (two read, one written). Each thread count runs 10 timed passes after one warm-up; the
// best and the median are printed (STREAM reports the best).
// Usage: ouro_stream_triad [max_threads] [MiB per array, default 80]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace {

void triad(double* a, const double* b, const double* c, double q, long lo, long hi) {
  for (long i = lo; i < hi; ++i) a[i] = b[i] + q * c[i];
}

// Runs the triad on nt freshly started threads; returns the wall seconds from before the first
// thread starts until the last one is joined (as STREAM times its whole parallel region).
double one_pass(double* a, const double* b, const double* c, long n, int nt) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  for (int t = 0; t < nt; ++t) th.emplace_back(triad, a, b, c, 3.0, n * t / nt, n * (t + 1) / nt);
  for (auto& x : th) x.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int max_threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : (int)std::thread::hardware_concurrency();
  const long mib = argc > 2 ? std::max(1, std::atoi(argv[2])) : 80;
  const long n = mib * (1L << 20) / (long)sizeof(double);
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  for (long i = 0; i < n; ++i) { a[i] = 0.0; b[i] = 1.0; c[i] = 2.0; }
  const double bytes = 3.0 * sizeof(double) * (double)n;
  std::printf("triad a = b + 3*c, double, %ld MiB per array (%ld MiB total), 24 bytes per element\n", mib, 3 * mib);
  for (int nt = 1; nt <= max_threads; ++nt) {
    one_pass(a.get(), b.get(), c.get(), n, nt);  // warm-up
    std::vector<double> gbs;
    for (int rep = 0; rep < 10; ++rep) gbs.push_back(bytes / one_pass(a.get(), b.get(), c.get(), n, nt) / 1e9);
    std::sort(gbs.begin(), gbs.end());
    std::printf("threads %d: best %.1f GB/s  median %.1f GB/s  (min %.1f)\n", nt, gbs.back(),
                0.5 * (gbs[4] + gbs[5]), gbs.front());
  }
  for (long i = 0; i < n; i += n / 101 + 1)
    if (a[i] != 7.0) { std::fprintf(stderr, "triad: wrong result at %ld\n", i); return 1; }
  return 0;
}
