// The machine's ceiling: sustained memory bandwidth and peak compute, measured in a few seconds
// and cached per CPU model. Trace summaries and benchmarks state figures as fractions of it.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "core/status.h"

namespace ouro {

struct ProbeResult {
  std::string cpu_model;
  std::string cpu_features;
  int max_threads = 0;
  std::map<int, double> read_gb_s;    // threads -> sustained read bandwidth, GB/s (1e9 bytes/s)
  std::map<int, double> triad_gb_s;   // threads -> STREAM-style triad a = b + s*c, GB/s
  std::map<int, double> fp32_gflops;  // threads -> FP32 FMA peak, GFLOP/s (2 flops per FMA lane)
  std::map<int, double> bf16_gflops;  // threads -> BF16 dot peak (absent where the CPU lacks it)
  std::map<int, double> int8_gops;    // threads -> INT8 dot peak, GOP/s (2 ops per MAC)
  std::string measured_at;            // ISO-8601 UTC
  double buffer_mib = 0;              // size of the memory test's buffer (three arrays of doubles)
  std::string fp32_kernel, bf16_kernel, int8_kernel;  // the instruction each peak was measured with

  // The best figure over thread counts (the roofline ceilings).
  double best_read_gb_s() const;
  double best_fp32_gflops() const;
  double best_int8_gops() const;
  std::string to_json() const;
  static Expected<ProbeResult> from_json(const std::string& text, const std::string& source);
};

// Measures now (about 2-5 s). threads: up to how many threads to measure (0 = all CPUs).
ProbeResult run_probe(int max_threads);
// Where the cache for this CPU model lives ($XDG_CACHE_HOME or ~/.cache)/ouro/probe-<cpu>.json.
std::string probe_cache_path();
// Reads and validates a probe result file (errors name the file and what is wrong).
Expected<ProbeResult> read_probe_file(const std::string& path);
// The cached result for this CPU, if any (a missing, unreadable, invalid or other-CPU file: none).
std::optional<ProbeResult> load_cached_probe();
Status save_probe_cache(const ProbeResult& r);

}  // namespace ouro
