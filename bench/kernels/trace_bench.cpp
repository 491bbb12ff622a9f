// What one span costs, tracing off and on (the per-token cost is this times the spans per
// token: about 730 per decode step of SmolLM2 at 2 threads, see docs/benchmarks.md).
#include <benchmark/benchmark.h>

#include "trace/trace.h"

namespace {

void BM_Span(benchmark::State& state) {
  const bool on = state.range(0) != 0;
  if (on) ouro::trace::enable(1 << 20);
  else ouro::trace::disable();
  int i = 0;
  for (auto _ : state) {
    ouro::trace::Span s("x", "op", ++i & 31, 1, 1.0, 2.0);
    benchmark::DoNotOptimize(i);
  }
  ouro::trace::disable();
  state.SetLabel(on ? "tracing on" : "tracing off");
}
BENCHMARK(BM_Span)->Name("trace/span")->Arg(0)->Arg(1);

}  // namespace
