// Packed matmul kernels, one thread: every kind x ISA x shape x token count, and the float-row
// path (F16). Names: matmul/<kind>/<isa>/<rows>x<cols>/T:<tokens>.
// Bytes and FLOPs are those of matmul_cost (weights once, int8 activations in, f32 results out;
// 2 FLOPs per multiply-add); the F16 row path reads float activations (4 bytes per value).
// Note: the 576-column matrices fit in L2/L3, so these are in-cache kernel speeds; decode in the
// engine streams every weight from memory (see `ouro probe` for that ceiling).
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu.h"
#include "core/fp16.h"
#include "kernels/matmul.h"
#include "kernels/types.h"

namespace ouro {
namespace {

// GGUF-format random weights of `type`, shape rows x cols, and their packed form.
struct Weights {
  std::vector<uint8_t> raw;
  PackedMatrix W;
};

std::vector<uint8_t> random_blocks(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> raw(row_bytes(type, cols) * rows);
  const int64_t nblk = rows * cols / 32;
  if (type == GgmlType::kQ4_1) {
    auto* b = reinterpret_cast<BlockQ4_1*>(raw.data());
    for (int64_t i = 0; i < nblk; ++i) {
      b[i].d = fp32_to_fp16(0.001f + 0.01f * std::abs(u(rng)));
      b[i].m = fp32_to_fp16(0.05f * u(rng));
      for (auto& q : b[i].qs) q = (uint8_t)rng();
    }
  } else if (type == GgmlType::kQ8_0) {
    auto* b = reinterpret_cast<BlockQ8_0*>(raw.data());
    for (int64_t i = 0; i < nblk; ++i) {
      b[i].d = fp32_to_fp16(0.0001f + 0.001f * std::abs(u(rng)));
      for (auto& q : b[i].qs) q = (int8_t)rng();
    }
  } else {  // F16
    auto* h = reinterpret_cast<uint16_t*>(raw.data());
    for (int64_t i = 0; i < rows * cols; ++i) h[i] = fp32_to_fp16(0.05f * u(rng));
  }
  return raw;
}

// Built once per (type, rows, cols): google-benchmark calls each function several times.
const Weights& weights(GgmlType type, int64_t rows, int64_t cols) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::unique_ptr<Weights>> cache;
  auto& slot = cache[{(int)type, rows, cols}];
  if (!slot) {
    slot = std::make_unique<Weights>();
    slot->raw = random_blocks(type, rows, cols, 1000 + rows + (int)type);
    slot->W = pack_matrix(type, slot->raw.data(), cols, rows);
  }
  return *slot;
}

struct Acts {
  std::vector<float> x;
  QuantActs qa;
};

Acts make_acts(int64_t T, int64_t cols) {
  Acts a;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  a.x.resize(T * cols);
  for (auto& v : a.x) v = n(rng);
  a.qa.resize(T, cols);
  quantize_acts(a.x.data(), 0, T, a.qa);
  a.qa.x = a.x.data();
  return a;
}

void set_counters(benchmark::State& state, double bytes, double flops) {
  state.SetBytesProcessed((int64_t)(bytes * (double)state.iterations()));
  state.counters["FLOP/s"] = benchmark::Counter(flops * (double)state.iterations(), benchmark::Counter::kIsRate);
}

void bm_matmul(benchmark::State& state, GgmlType type, Isa isa, int64_t rows, int64_t cols, int64_t T) {
  if (!isa_supported(isa)) {
    state.SkipWithError("this CPU lacks the ISA");
    return;
  }
  const Weights& w = weights(type, rows, cols);
  Acts a = make_acts(T, cols);
  std::vector<float> Y(T * rows);
  const MatmulKernels& k = matmul_kernels(isa);
  for (auto _ : state) {
    gemm_rows(k, w.W, a.qa, 0, rows, Y.data(), rows);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  OpCost c = matmul_cost(w.W, T);
  if (w.W.kind == PackedKind::kRows) c.bytes += 3.0 * T * cols;  // float activations, not int8
  set_counters(state, c.bytes, c.flops);
}

struct Registrar {
  Registrar() {
    struct Shape { int64_t rows, cols; };
    const Shape q4_shapes[] = {{576, 576}, {1536, 576}};
    const Shape q8_shapes[] = {{576, 576}, {1536, 576}, {49152, 576}};  // the last: the tied output head
    const Isa isas[] = {Isa::kAvx512, Isa::kAvx2, Isa::kScalar};
    auto name = [](const char* kind, const char* isa, Shape s, int64_t T) {
      return std::string("matmul/") + kind + "/" + isa + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
             "/T:" + std::to_string(T);
    };
    for (int64_t T : {1, 64}) {
      for (Isa isa : isas) {
        for (Shape s : q4_shapes)
          benchmark::RegisterBenchmark(name("q4_1", isa_name(isa), s, T).c_str(), bm_matmul, GgmlType::kQ4_1, isa,
                                       s.rows, s.cols, T)->Unit(benchmark::kMicrosecond);
        for (Shape s : q8_shapes) {
          if (isa == Isa::kScalar && T > 1 && s.rows > 4096) continue;  // ~10 s a run; T=1 covers it
          benchmark::RegisterBenchmark(name("q8_0", isa_name(isa), s, T).c_str(), bm_matmul, GgmlType::kQ8_0, isa,
                                       s.rows, s.cols, T)->Unit(benchmark::kMicrosecond);
        }
      }
      for (Shape s : q4_shapes)  // the float-row path does not depend on the kernel family
        benchmark::RegisterBenchmark(name("f16_rows", "any", s, T).c_str(), bm_matmul, GgmlType::kF16, Isa::kAvx2,
                                     s.rows, s.cols, T)->Unit(benchmark::kMicrosecond);
    }
  }
} registrar;

// quantize_acts: per value, |x| and max (2), scale and round (2), sum (1): 5 FLOPs counted.
void bm_quantize_acts(benchmark::State& state) {
  const int64_t T = state.range(0), cols = state.range(1);
  Acts a = make_acts(T, cols);
  for (auto _ : state) {
    quantize_acts(a.x.data(), 0, T, a.qa);
    benchmark::DoNotOptimize(a.qa.qs.data());
    benchmark::ClobberMemory();
  }
  const double bytes = (double)T * (4.0 * cols + a.qa.cols_pad + 8.0 * a.qa.nb);
  set_counters(state, bytes, 5.0 * T * cols);
}
BENCHMARK(bm_quantize_acts)->Name("quantize_acts")->ArgNames({"T", "cols"})
    ->Args({1, 576})->Args({1, 1536})->Args({64, 576})->Args({64, 1536});

}  // namespace
}  // namespace ouro
