// What the microbench's bench classes share (microbench.cpp, microbench_moe.cpp): the seeded float
// source, the base class, the thread split of the forward pass, the weight types and their random
// blocks. Included by src/lab/microbench*.cpp only.
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/types.h"
#include "lab/microbench.h"

namespace ouro::microbench {

inline constexpr long long kMax = kMaxElements;

// Floats from mt19937_64 bits with our own conversion: std::uniform_real_distribution's algorithm is
// implementation-defined, and the inputs must be identical in every build the lab compares.
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  // In double, the product of a float and a 24-bit fraction is exact, so whether the compiler
  // contracts the multiply-add into an FMA (build flags may differ between baseline and candidate)
  // cannot change the value: one rounding in double, one to float.
  float uniform(float lo, float hi) {
    const double u = (double)(g_() >> 40) * 0x1p-24;
    return (float)((double)lo + (double)(hi - lo) * u);
  }
  uint8_t byte() { return (uint8_t)(g_() >> 56); }
  std::vector<float> uniform_vec(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }

 private:
  std::mt19937_64 g_;
};

// Runs fn over ranges of [0, n) as the model's forward pass does (core's parallel_ranges: on the
// caller below min_parallel items or with one thread, else split across the pool); no pool (one
// thread) runs on the caller.
template <typename Fn>
void for_tokens(ThreadPool* pool, int64_t n, const char* region, Fn&& fn, int64_t min_parallel = 4) {
  if (!pool) { if (n > 0) fn((int64_t)0, n); return; }
  parallel_ranges(*pool, n, region, fn, min_parallel);
}

inline Error too_big(const std::string& what, int64_t n) {
  return usage_error(what + ": " + std::to_string(n) + " elements exceed the limit of " + std::to_string(kMax));
}

class BenchBase : public Bench {
 protected:
  // Kernels that split work across threads get a pool when there is more than one thread.
  BenchBase(const Setup& s, bool parallel) : s_(s) {
    if (parallel && s.threads > 1) pool_ = std::make_unique<ThreadPool>(s.threads);
  }

 public:
  // Checks the shape (usage errors name the flag) and draws the inputs.
  virtual Status init() = 0;

 protected:
  int64_t dim(const char* key) const { return s_.shape.at(key); }
  Setup s_;
  std::unique_ptr<ThreadPool> pool_;
};

struct TypeName { const char* name; GgmlType type; };
constexpr TypeName kTypes[] = {{"q4_0", GgmlType::kQ4_0}, {"q4_1", GgmlType::kQ4_1}, {"q4_k", GgmlType::kQ4_K},
                               {"q8_0", GgmlType::kQ8_0}, {"f32", GgmlType::kF32},   {"f16", GgmlType::kF16}};


// GGUF-format blocks with random integer values and scales, as tests/unit and bench/kernels build
// them (the repo has no float -> block quantizer; the packer and the reference dequantizer are what
// is exercised). Magnitudes keep weights around |w| < 0.2 so outputs stay O(1) for any K.
std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, Rng& rng);
// The type --type names, or nullptr.
const TypeName* find_type(const std::string& name);

// `ouro microbench moe` (microbench_moe.cpp).
std::unique_ptr<BenchBase> make_moe_bench(const Setup& s);

}  // namespace ouro::microbench
