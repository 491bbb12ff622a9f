// Server figures in Prometheus' text format: counters, gauges and cumulative histograms.
// Thread-safe: the scheduler thread and the HTTP thread both record.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ouro {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends NAME_bucket{le=...}, NAME_sum and NAME_count lines (with # HELP and # TYPE).
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct ServeMetrics {
  // Latency buckets in seconds, from a few ms (a decode step) to minutes (a long queue).
  static std::vector<double> latency_buckets();
  Histogram ttft{latency_buckets()}, itl{latency_buckets()}, e2e{latency_buckets()};
  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0}, prefix_hit_tokens{0}, prefix_query_tokens{0};
  std::atomic<uint64_t> preemptions{0};
  std::atomic<int> running{0}, waiting{0}, kv_used{0}, kv_cached{0}, kv_total{0};

  void count_status(int status);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> by_status_;
};

}  // namespace ouro
