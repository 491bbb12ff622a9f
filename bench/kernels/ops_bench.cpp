// Element-wise ops, attention over one head, and the sampler, one thread. Each reports bytes/s
// (the bytes the op must read and write once) and FLOP/s (the counting convention is stated per
// benchmark; exp, sin and cos count as one FLOP where counted at all).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "runtime/sampler.h"

namespace ouro {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void set_counters(benchmark::State& state, double bytes, double flops) {
  state.SetBytesProcessed((int64_t)(bytes * (double)state.iterations()));
  state.counters["FLOP/s"] = benchmark::Counter(flops * (double)state.iterations(), benchmark::Counter::kIsRate);
}

// rmsnorm: x and w read, y written; x^2 summed (2), then x * scale * w (2): 4 FLOPs per value.
void bm_rmsnorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto x = randn(n, 1), w = randn(n, 2);
  std::vector<float> y(n);
  for (auto _ : state) {
    rmsnorm(x.data(), w.data(), y.data(), n, 1e-5f);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 12.0 * n, 4.0 * n);
}
BENCHMARK(bm_rmsnorm)->Name("rmsnorm")->ArgName("n")->Arg(576)->Arg(1536);

// rope_inplace: each head read and written; per pair 4 mul + 2 add = 6 FLOPs (the head_dim/2
// sin/cos pairs, computed once per call, are not counted). Shapes: SmolLM2's 9 query heads and
// 3 key heads of 64.
void bm_rope(benchmark::State& state) {
  const int heads = (int)state.range(0), hd = 64;
  auto x = randn((size_t)heads * hd, 3);
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = std::pow(100000.0f, -2.0f * i / hd);
  int64_t pos = 0;
  for (auto _ : state) {
    rope_inplace(x.data(), heads, hd, pos, inv.data());  // a rotation: values stay bounded
    pos = (pos + 1) & 4095;
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 8.0 * heads * hd + 2.0 * hd, 3.0 * heads * hd);
}
BENCHMARK(bm_rope)->Name("rope_inplace")->ArgName("heads")->Arg(9)->Arg(3);

// softmax_inplace: read and written once (8 bytes per value); max, subtract, exp, sum, scale:
// 5 FLOPs per value. Run in place repeatedly (the input is then a previous softmax: same work).
void bm_softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto x = randn(n, 4, 3.0f);
  for (auto _ : state) {
    softmax_inplace(x.data(), n);
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 8.0 * n, 5.0 * n);
}
BENCHMARK(bm_softmax)->Name("softmax_inplace")->ArgName("n")->Arg(1024)->Arg(49152);

// attend_one: one query head (64) over n_keys cached keys and values; rows 192 floats apart (the
// KV cache's row of 3 KV heads). Bytes and FLOPs from ops.h (attend_one_bytes/attend_one_flops).
void bm_attend_one(benchmark::State& state) {
  const int64_t n_keys = state.range(0);
  const int hd = 64;
  const int64_t stride = 192;
  auto q = randn(hd, 5), k = randn(n_keys * stride, 6), v = randn(n_keys * stride, 7);
  std::vector<float> scores(n_keys), out(hd);
  for (auto _ : state) {
    attend_one(q.data(), k.data(), v.data(), stride, n_keys, hd, 0.125f, scores.data(), out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, attend_one_bytes(n_keys, hd), attend_one_flops(n_keys, hd));
}
BENCHMARK(bm_attend_one)->Name("attend_one")->ArgName("n_keys")->Arg(128)->Arg(1024);

// Sampler over 49152 logits (SmolLM2's vocabulary): reads each logit once (4 bytes); one
// comparison per logit counted as the FLOP. greedy: temperature 0 (argmax). top-k/top-p: the
// defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).
void bm_sampler(benchmark::State& state, bool greedy) {
  const int n = 49152;
  auto logits = randn(n, 8, 3.0f);
  SamplingParams p;
  if (greedy) p.temperature = 0;
  p.seed = 42;
  Sampler s(p);
  const std::vector<int> recent;
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(logits.data(), n, recent));
  set_counters(state, 4.0 * n, (double)n);
}
BENCHMARK_CAPTURE(bm_sampler, greedy, true)->Name("sampler/greedy/49152");
BENCHMARK_CAPTURE(bm_sampler, topk_topp, false)->Name("sampler/top_k40_top_p0.95/49152");

}  // namespace
}  // namespace ouro

BENCHMARK_MAIN();
