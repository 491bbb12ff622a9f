// ouro probe: the machine's ceiling (memory bandwidth, peak compute), cached per CPU model.
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/common.h"
#include "lab/probe.h"

namespace ouro {

namespace {

const char* kUsage =
    "usage: ouro probe [--json] [--threads N] [--refresh]\n"
    "  Measures sustained memory bandwidth (read; STREAM triad over doubles, 24 bytes per element)\n"
    "  and peak compute (FP32 FMA, BF16 dot where the CPU has it, INT8 dot) for 1..N threads, a few\n"
    "  seconds in all, and caches the result in $XDG_CACHE_HOME/ouro (default ~/.cache/ouro).\n"
    "  A cached result for this CPU and thread count is printed as it is, unless --refresh.\n"
    "  An unreadable or invalid cache file is reported on stderr, then measured again and replaced.\n"
    "  --json          the result as one JSON object (the cache file's content)\n"
    "  -t, --threads N measure 1..N threads (default: all CPUs)\n"
    "  --refresh       measure even when a cached result exists\n";

void print_table(const ProbeResult& r, const std::string& source) {
  std::printf("cpu      %s\n", r.cpu_model.c_str());
  std::printf("features %s\n", r.cpu_features.c_str());
  std::printf("measured %s  (%s)\n", r.measured_at.c_str(), source.c_str());
  std::printf("kernels  fp32: %s; bf16: %s; int8: %s\n", r.fp32_kernel.c_str(),
              r.bf16_kernel.empty() ? "not available" : r.bf16_kernel.c_str(), r.int8_kernel.c_str());
  std::printf("buffer   %.0f MiB (read: all of it; triad a = b + s*c over doubles)\n\n", r.buffer_mib);
  std::printf("%7s  %10s  %10s  %12s  %12s  %10s\n", "threads", "read GB/s", "triad GB/s", "fp32 GFLOP/s",
              "bf16 GFLOP/s", "int8 GOP/s");
  std::map<int, bool> rows;
  for (const auto* m : {&r.read_gb_s, &r.triad_gb_s, &r.fp32_gflops, &r.bf16_gflops, &r.int8_gops})
    for (const auto& [t, v] : *m) rows[t] = true;
  auto cell = [](const std::map<int, double>& m, int t, int width) {
    auto it = m.find(t);
    if (it == m.end()) std::printf("  %*s", width, "-");
    else std::printf("  %*.1f", width, it->second);
  };
  for (const auto& [t, _] : rows) {
    std::printf("%7d", t);
    cell(r.read_gb_s, t, 10);
    cell(r.triad_gb_s, t, 10);
    cell(r.fp32_gflops, t, 12);
    cell(r.bf16_gflops, t, 12);
    cell(r.int8_gops, t, 10);
    std::printf("\n");
  }
  std::printf("\nceilings: read %.1f GB/s, fp32 %.1f GFLOP/s, int8 %.1f GOP/s\n", r.best_read_gb_s(),
              r.best_fp32_gflops(), r.best_int8_gops());
}

}  // namespace

int cmd_probe(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, {"--threads", "-t"}, {"--json", "--refresh"}); !s) return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  auto threads = a.integer(a.has("-t") ? "-t" : "--threads", 0, 1, 1024);
  if (!threads) return report(threads.error());
  const int want = *threads > 0 ? (int)*threads : std::max(1, (int)std::thread::hardware_concurrency());

  const std::string path = probe_cache_path();
  std::optional<ProbeResult> result;
  std::string source = "cached: " + path;
  std::error_code ec;
  if (!a.has("--refresh") && !path.empty() && std::filesystem::exists(path, ec)) {
    auto cached = read_probe_file(path);
    if (!cached) {
      std::fprintf(stderr, "ouro: ignoring the probe cache: %s; measuring again\n", cached.error().message.c_str());
    } else if (cached->cpu_model == (cpu_features().model_name.empty() ? "unknown" : cpu_features().model_name) &&
               cached->max_threads == want) {
      result = std::move(*cached);
    }
  }
  if (!result) {
    result = run_probe(want);
    source = "measured now";
    if (Status s = save_probe_cache(*result); !s)
      std::fprintf(stderr, "ouro: warning: the result was not cached: %s\n", s.error().message.c_str());
    else
      source += ", cached in " + path;
  }
  if (a.has("--json")) std::puts(result->to_json().c_str());
  else print_table(*result, source);
  return 0;
}

}  // namespace ouro
