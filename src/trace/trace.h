// Span recorder: scoped spans with a name, a category, the thread and a few numeric arguments,
// kept in per-thread ring buffers (no locks or allocation on the hot path), written out as Chrome
// trace-event JSON. Off by default; a disabled span costs one relaxed atomic load.
// Conventions (names, categories, args) are documented in docs/trace.md.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace ouro::trace {

// Names and categories must be string literals (or otherwise outlive the recorder).
struct Event {
  const char* name;
  const char* cat;
  const char* region;   // for kernel/sync-wait spans: the op that owns the parallel region
  const char* precision;  // arithmetic of an op's FLOPs ("int8", "bf16"; null = fp32)
  uint64_t t0_ns, t1_ns;
  int32_t layer = -1;   // -1: none
  int32_t tokens = -1;  // -1: none
  int64_t pos = -1;
  double bytes = 0, flops = 0;
  char ph = 'X';        // 'X' complete, 'C' counter (value in bytes), 's'/'t'/'f' flow (id in pos)
};

extern std::atomic<bool> g_enabled;
#ifdef OURO_NO_TRACE
// A build without tracing (for measuring what the disabled spans cost): spans compile away.
inline constexpr bool enabled() { return false; }
#else
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
#endif
inline uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Starts recording with room for `capacity` events per thread (oldest dropped when full).
void enable(size_t capacity);
void disable();
// Names the calling thread in the trace ("main", "worker-1", ...).
void set_thread_name(const std::string& name);
// Appends an event to the calling thread's buffer (only call when enabled()).
void record(const Event& e);
// Writes everything recorded so far as Chrome trace JSON; other_data is a JSON object's text.
Status write_chrome_json(const std::string& path, const std::string& other_data_json);
// Number of events currently held and dropped (for tests).
size_t held_events();
uint64_t dropped_events();

// A scoped span: records [construction, destruction) when tracing is on.
class Span {
 public:
  Span(const char* name, const char* cat, int layer = -1, int tokens = -1, double bytes = 0, double flops = 0)
      : on_(enabled()) {
    if (on_) {
      e_.name = name; e_.cat = cat; e_.region = nullptr; e_.precision = nullptr; e_.layer = layer; e_.tokens = tokens;
      e_.bytes = bytes; e_.flops = flops; e_.t0_ns = now_ns();
    }
  }
  Span& region(const char* r) { if (on_) e_.region = r; return *this; }
  Span& pos(int64_t p) { if (on_) e_.pos = p; return *this; }
  Span& precision(const char* p) { if (on_) e_.precision = p; return *this; }
  ~Span() {
    if (on_) { e_.t1_ns = now_ns(); record(e_); }
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool on_;
  Event e_{};
};

// A counter sample (Chrome "C" event) and flow steps tying a request's spans together.
void counter(const char* name, double value);
void flow(char ph, const char* name, uint64_t id);

}  // namespace ouro::trace
