// ouro microbench: one kernel or model op, timed, with its output on seeded inputs (src/lab/microbench.h).
// The lab runs it in separate processes for baseline and candidate builds and compares the JSON
// figures and the --out files.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cmd_lab.h"
#include "cli/common.h"
#include "core/fault.h"
#include "lab/microbench.h"
#include "ouro_version.h"

namespace ouro {

namespace {

const char* kUsage =
    "usage: ouro microbench NAME [shape options] [--seed S] [--iters N | --min-time MS] [--warmup N]\n"
    "                       [--out FILE.npy] [--dump-inputs DIR] [--json] [-t THREADS]\n"
    "                       [--isa auto|avx512|avx2|scalar] [-m MODEL.gguf --tensor NAME]\n"
    "  Times one kernel on inputs drawn from --seed (std::mt19937_64: the same seed gives the same\n"
    "  inputs in every build) and can write its output on those inputs for correctness checks.\n"
    "kernels (shape flags; * required):\n"
    "  matmul        --type* q4_0|q8_0|q4_k|q4_1|f32|f16 --rows* M --cols* K --tokens T (1)\n"
    "                quantize activations + the ISA kernel on the thread pool, as the model does;\n"
    "                output [T, M]. --cols must be a multiple of the type's block (32; q4_k 256).\n"
    "                Or on a model's weights: -m MODEL.gguf --tensor blk.0.ffn_gate.weight --tokens T\n"
    "                (M and K and the type come from the tensor; it is packed as the model packs it)\n"
    "                --w8a8: requantize the weights to int8 per row and quantize activations per\n"
    "                token, as --weights w8a8 does (--dump-inputs writes the int8 weights' values)\n"
    "  rmsnorm       --cols* N --tokens T (1)          output [T, N] (eps 1e-5)\n"
    "  softmax       --cols* N --tokens T (1)          output [T, N]\n"
    "  swiglu        --cols* N --tokens T (1)          output [T, N] = silu(g) * u\n"
    "  quantize_acts --cols* N --tokens T (1)          output [T, N]: the dequantized int8 values q*d\n"
    "  rope          --heads* H --head-dim* D (even, <= 512) --pos P (0)   output [H, D] (base 10000)\n"
    "  attend        --ctx* L --head-dim* D            output [D]: one query over L keys/values\n"
    "  argmax        --cols* N (<= 2^24)               output [1]: the index, as a float\n"
    "  kda_recurrent --heads* H --head-dim* D (<= 1024) --tokens T (1)   output [T, H, D]: KDA's delta\n"
    "                rule over T tokens of every head (--isa's family, heads split across -t threads)\n"
    "  kda_chunk     the same flags, --chunk C (64)   the same output: the chunked (WY/UT) form over\n"
    "                chunks of C tokens (scalar whatever --isa says: no vector family has it yet)\n"
    "  moe           --type* T --hidden* D --ff* F --experts* E --used* K --tokens T (1)   output [T, D]:\n"
    "                the routed experts of one MoE layer as the hybrid runs them: sigmoid scores of\n"
    "                the input router logits, top K by score + bias, weights renormalised x 2.5, the\n"
    "                chosen experts' SwiGLU FFNs (F wide, weights of --type) over their tokens, each\n"
    "                token's weighted sum; inputs x, router_logits, bias, gate, up, down\n"
    "  Every array is limited to 2^28 elements; sizes beyond are usage errors.\n"
    "options:\n"
    "  --seed S            input seed (default 0)\n"
    "  --iters N           time exactly N calls; --min-time MS: time until MS have passed and at\n"
    "                      least 5 samples (default 200 ms). Not both.\n"
    "  --warmup N          untimed calls first (default: as many as fit in 20 ms, at least one)\n"
    "  Calls are timed with steady_clock in batches sized from the last warm-up call (a sample\n"
    "  lasts >= ~20 us; with --warmup 0 each call is timed alone); ns_per_op is the median sample.\n"
    "  --out FILE.npy      write the output on the seed's inputs (float32 .npy), after the timed calls\n"
    "  --markers           print @timed-start / @timed-end lines around the timed calls (the lab\n"
    "                      times the run from outside between them)\n"
    "  --dump-inputs DIR   write the inputs as DIR/<input>.npy (quantized weights dequantized by the\n"
    "                      reference dequantizer), so another implementation can recompute the output\n"
    "  --json              one JSON line on stdout:\n"
    "                      {\"name\", \"params\": {shape, type, seed, threads, isa, ...}, \"ns_per_op\",\n"
    "                       \"samples_ns\", \"iters\", \"batch\", \"bytes\", \"flops\", \"gb_s\", \"gflops\",\n"
    "                       \"out\": path or null, \"commit\"}\n"
    "  -t, --threads N     threads (default 1): matmul's pool; token ops split tokens across it as the\n"
    "                      model does (from 4 tokens); rope, attend and argmax run on the caller\n"
    "  --isa NAME          matmul / KDA kernel family (default auto: the best this CPU has)\n"
    "  bytes and FLOPs per op come from the kernels' cost functions (matmul_cost + the float\n"
    "  activations quantization reads; attend_one_bytes/flops); for the others inputs + outputs.\n"
    "  OURO_FAULT (src/core/fault.h) applies: delay:NAME:US inside each call, crash, hang, memo:DIR.\n";

}  // namespace

int cmd_microbench(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kUsage, stdout); return 0; }
  namespace mb = microbench;
  Args a;
  std::vector<std::string> value_flags = {"--type", "--seed", "--iters", "--min-time", "--warmup", "--out",
                                          "--dump-inputs", "-t", "--threads", "--isa", "-m", "--model", "--tensor"};
  value_flags = concat(value_flags, mb::all_shape_flags());
  if (Status s = a.parse(argc, argv, value_flags, {"--json", "--w8a8", "--markers"}); !s) return report(s.error());
  if (a.positional().empty()) {
    std::string names;
    for (const auto& k : mb::kernels()) names += std::string(names.empty() ? "" : ", ") + k.name;
    return report(usage_error("missing kernel NAME (one of " + names + "; see --help)"));
  }
  if (a.positional().size() > 1) return report(usage_error("unexpected argument '" + a.positional()[1] + "'"));
  const std::string name = a.positional()[0];
  const mb::KernelSpec* spec = mb::find_kernel(name);
  if (!spec) {
    std::string names;
    for (const auto& k : mb::kernels()) names += std::string(names.empty() ? "" : ", ") + k.name;
    return report(usage_error("unknown kernel '" + name + "' (one of " + names + ")"));
  }

  mb::Setup s;
  s.name = name;
  // Shape flags: only the kernel's own; values range-checked here so the message names the flag.
  for (const std::string& f : mb::all_shape_flags()) {
    if (!a.has(f)) continue;
    const mb::ShapeFlag* sf = nullptr;
    for (const auto& x : spec->flags)
      if (f == x.flag) sf = &x;
    if (!sf) return report(usage_error("flag " + f + " does not apply to " + name + " (see --help)"));
    auto v = a.integer(f, 0, sf->lo, sf->hi);
    if (!v) return report(v.error());
    s.shape[sf->key] = *v;
  }
  if (a.has("--type")) {
    s.type = a.str("--type");
    if (s.type.empty()) return report(usage_error("flag --type needs a value"));
  }
  s.w8a8 = a.has("--w8a8");
  s.model = a.has("--model") ? a.str("--model") : a.str("-m");
  s.tensor = a.str("--tensor");
  if (a.has("--tensor") && s.tensor.empty()) return report(usage_error("flag --tensor needs a tensor name"));
  if ((a.has("-m") || a.has("--model")) && s.model.empty()) return report(usage_error("flag -m needs a file name"));
  if (a.has("--tensor") && s.model.empty()) return report(usage_error("flag --tensor needs -m MODEL.gguf"));
  auto seed = a.integer("--seed", 0, 0, INT64_MAX);
  auto threads = a.integer(a.has("-t") ? "-t" : "--threads", 1, 1, 1024);
  auto iters = a.integer("--iters", 0, 1, 1000000000);
  auto warmup = a.integer("--warmup", -1, 0, 1000000000);
  auto min_time = a.number("--min-time", 200, 0.001, 60000);
  for (const Error* e : {seed ? nullptr : &seed.error(), threads ? nullptr : &threads.error(),
                         iters ? nullptr : &iters.error(), warmup ? nullptr : &warmup.error(),
                         min_time ? nullptr : &min_time.error()})
    if (e) return report(*e);
  if (a.has("--iters") && a.has("--min-time")) return report(usage_error("flags --iters and --min-time exclude each other"));
  if (a.has("--out") && a.str("--out").empty()) return report(usage_error("flag --out needs a file name"));
  if (a.has("--dump-inputs") && a.str("--dump-inputs").empty()) return report(usage_error("flag --dump-inputs needs a directory"));
  s.seed = (uint64_t)*seed;
  s.threads = (int)*threads;
  if (const std::string bad = isa_env_problem(); !bad.empty()) return report(usage_error(bad));
  const std::string isa_s = a.str("--isa", "auto");
  if (!parse_isa(isa_s, &s.isa)) return report(usage_error("flag --isa: '" + isa_s + "' is not one of auto, avx512, avx2, scalar"));
  if (!isa_supported(s.isa)) return report(usage_error("flag --isa: " + isa_refusal(s.isa)));

  auto bench = mb::make_bench(s);
  if (!bench) return report(bench.error());
  mb::Bench& b = **bench;
  if (a.has("--dump-inputs"))
    if (Status st = mb::dump_inputs(b, a.str("--dump-inputs")); !st) return report(st.error());

  // Crash and hang faults strike here, before the first kernel call.
  fault::at_run_start();
  fault::at_start();
  mb::TimingOptions to;
  to.warmup = *warmup;
  to.iters = *iters;
  to.min_time_ms = *min_time;
  if (a.has("--markers")) {
    // The lab stamps these lines' arrival with its own clock (docs/lab.md).
    to.on_start = [] { std::fputs("@timed-start\n", stdout); std::fflush(stdout); };
    to.on_end = [] { std::fputs("@timed-end\n", stdout); std::fflush(stdout); };
  }
  mb::Timing t = mb::measure(b, to);
  if (const double f = fault::inflation("microbench"); f != 1) {  // the lab's inflating adversary
    t.median_ns /= f;
    t.total_ns /= f;
    for (double& x : t.samples_ns) x /= f;
  }
  // The output is written after the timed calls, from the state they left.
  if (a.has("--out"))
    if (Status st = mb::write_output(b, s, a.str("--out")); !st) return report(st.error());

  const OpCost c = b.cost();
  const double ns = t.median_ns > 0 ? t.median_ns : 1e-9;  // a median of 0 only for sub-ns clocks
  nlohmann::json j = {{"name", name},
                      {"params", b.params},
                      {"ns_per_op", t.median_ns},
                      {"samples_ns", t.samples_ns},
                      {"iters", t.iters},
                      {"total_ns", t.total_ns},
                      {"batch", t.batch},
                      {"bytes", c.bytes},
                      {"flops", c.flops},
                      {"gb_s", c.bytes / ns},
                      {"gflops", c.flops / ns},
                      {"out", a.has("--out") ? nlohmann::json(a.str("--out")) : nlohmann::json(nullptr)},
                      {"commit", OURO_COMMIT}};
  if (a.has("--json")) {
    std::puts(j.dump().c_str());
  } else {
    std::printf("%s %s\n", name.c_str(), b.params.dump().c_str());
    std::printf("%.1f ns/op (median of %zu samples, %lld calls, %lld per sample)  %.2f GB/s  %.2f GFLOP/s\n",
                t.median_ns, t.samples_ns.size(), t.iters, t.batch, c.bytes / ns, c.flops / ns);
  }
  return 0;
}

}  // namespace ouro
