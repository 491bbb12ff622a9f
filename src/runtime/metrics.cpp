#include "runtime/metrics.h"

#include <cstdio>

namespace ouro {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lk(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lk(mu_);
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

std::vector<double> ServeMetrics::latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

void ServeMetrics::count_status(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++by_status_[status];
}

std::string ServeMetrics::render() const {
  std::string out;
  header(out, "ouro_requests_total", "counter", "HTTP requests answered, by status code");
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [status, n] : by_status_)
      out += "ouro_requests_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  }
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    out += std::string(name) + " " + num(v) + "\n";
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(out, name, "counter", help);
    out += std::string(name) + " " + num(v) + "\n";
  };
  gauge("ouro_requests_running", "requests in the running batch", running.load());
  gauge("ouro_requests_waiting", "requests waiting for admission", waiting.load());
  gauge("ouro_kv_blocks_used", "KV blocks referenced by requests", kv_used.load());
  gauge("ouro_kv_blocks_cached", "KV blocks no request references, kept for prefix reuse (evictable)", kv_cached.load());
  gauge("ouro_kv_blocks_total", "KV blocks in the pool", kv_total.load());
  counter("ouro_prefix_cache_hit_tokens_total", "prompt tokens whose KV came from the prefix cache",
          (double)prefix_hit_tokens.load());
  counter("ouro_prefix_cache_query_tokens_total", "prompt tokens looked up in the prefix cache",
          (double)prefix_query_tokens.load());
  counter("ouro_prompt_tokens_total", "prompt tokens of admitted requests", (double)prompt_tokens.load());
  counter("ouro_generation_tokens_total", "tokens generated", (double)generation_tokens.load());
  counter("ouro_preemptions_total", "requests preempted (blocks freed, recomputed later)", (double)preemptions.load());
  ttft.render(out, "ouro_time_to_first_token_seconds", "time from arrival to the first generated token");
  itl.render(out, "ouro_inter_token_latency_seconds", "time between consecutive generated tokens of a request");
  e2e.render(out, "ouro_e2e_request_latency_seconds", "time from arrival to the last token");
  return out;
}

}  // namespace ouro
