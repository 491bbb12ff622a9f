#include "trace/trace.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

namespace ouro::trace {

std::atomic<bool> g_enabled{false};

namespace {

// Raw storage (malloc, not value-initialised): a large ring costs memory only as it fills, and
// creating it does not stall the first traced span of a thread.
struct RingFree { void operator()(Event* p) const { std::free(p); } };

struct ThreadBuffer {
  std::unique_ptr<Event[], RingFree> ring;
  size_t cap = 0;
  size_t next = 0;       // total events ever written to this buffer
  std::string name;
  int tid = 0;
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
  size_t capacity = 0;
  uint64_t origin_ns = 0;
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local ThreadBuffer* t_buffer = nullptr;
thread_local std::string t_pending_name;

ThreadBuffer* local_buffer() {
  if (t_buffer) return t_buffer;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);  // once per thread, not on the hot path
  auto b = std::make_unique<ThreadBuffer>();
  b->cap = std::max<size_t>(r.capacity, 1);
  b->ring.reset(static_cast<Event*>(std::malloc(b->cap * sizeof(Event))));
  if (!b->ring) throw std::bad_alloc();
  b->tid = (int)r.buffers.size();
  b->name = t_pending_name.empty() ? "thread-" + std::to_string(b->tid) : t_pending_name;
  t_buffer = b.get();
  r.buffers.push_back(std::move(b));
  return t_buffer;
}

}  // namespace

void enable(size_t capacity) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.capacity = std::max<size_t>(capacity, 16);
    r.origin_ns = now_ns();
    for (auto& b : r.buffers) {
      if (b->cap != r.capacity) {
        b->ring.reset(static_cast<Event*>(std::malloc(r.capacity * sizeof(Event))));
        if (!b->ring) throw std::bad_alloc();
        b->cap = r.capacity;
      }
      b->next = 0;
    }
  }
  g_enabled.store(true);
}

void disable() { g_enabled.store(false); }

void set_thread_name(const std::string& name) {
  t_pending_name = name;
  if (t_buffer) t_buffer->name = name;
}

void record(const Event& e) {
  ThreadBuffer* b = local_buffer();
  b->ring[b->next % b->cap] = e;
  ++b->next;
}

void counter(const char* name, double value) {
  if (!enabled()) return;
  Event e{};
  e.name = name; e.cat = "counter"; e.ph = 'C'; e.bytes = value; e.t0_ns = e.t1_ns = now_ns();
  record(e);
}

void flow(char ph, const char* name, uint64_t id) {
  if (!enabled()) return;
  Event e{};
  e.name = name; e.cat = "request"; e.ph = ph; e.pos = (int64_t)id; e.t0_ns = e.t1_ns = now_ns();
  record(e);
}

size_t held_events() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  size_t n = 0;
  for (auto& b : r.buffers) n += std::min(b->next, b->cap);
  return n;
}

uint64_t dropped_events() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  uint64_t n = 0;
  for (auto& b : r.buffers) n += b->next > b->cap ? b->next - b->cap : 0;
  return n;
}

Status write_chrome_json(const std::string& path, const std::string& other_data_json) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "ouro"}}}});
  json dropped = json::object();
  auto us = [&](uint64_t ns) { return (double)(int64_t)(ns - r.origin_ns) / 1000.0; };
  for (auto& b : r.buffers) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", b->tid}, {"args", {{"name", b->name}}}});
    const size_t n = std::min(b->next, b->cap);
    const size_t first = b->next - n;
    dropped[b->name] = first;
    for (size_t i = first; i < b->next; ++i) {
      const Event& e = b->ring[i % b->cap];
      if (e.t0_ns < r.origin_ns) continue;  // recorded before the last enable()
      json ev = {{"name", e.name}, {"cat", e.cat}, {"pid", 1}, {"tid", b->tid}, {"ts", us(e.t0_ns)}};
      if (e.ph == 'C') {
        ev["ph"] = "C";
        ev["args"] = {{"value", e.bytes}};
      } else if (e.ph == 's' || e.ph == 't' || e.ph == 'f') {
        ev["ph"] = std::string(1, e.ph);
        ev["id"] = e.pos;
        if (e.ph != 's') ev["bp"] = "e";
      } else {
        ev["ph"] = "X";
        ev["dur"] = (double)(e.t1_ns - e.t0_ns) / 1000.0;
        json args = json::object();
        if (e.layer >= 0) args["layer"] = e.layer;
        if (e.tokens >= 0) args["tokens"] = e.tokens;
        if (e.pos >= 0) args["pos"] = e.pos;
        if (e.bytes > 0) args["bytes"] = e.bytes;
        if (e.flops > 0) args["flops"] = e.flops;
        if (e.region) args["region"] = e.region;
        if (e.precision) args["precision"] = e.precision;
        if (!args.empty()) ev["args"] = args;
      }
      events.push_back(std::move(ev));
    }
  }
  json other = json::parse(other_data_json.empty() ? "{}" : other_data_json, nullptr, false);
  if (other.is_discarded()) other = json::object();
  other["dropped_events"] = dropped;
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ns"}, {"otherData", other}};
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return runtime_error(path + ": cannot write the trace");
  const std::string text = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return runtime_error(path + ": write failed");
  return Ok{};
}

}  // namespace ouro::trace
