// Continuous batching: a scheduler thread admits waiting requests while KV blocks and batch slots
// allow, then runs one batched forward pass per step with a chunk of prefill for new prompts and
// one decode token for every running request, samples, and hands each request its tokens as they
// come. KV blocks come from a paged pool with prefix caching; when blocks run out the newest
// running request is preempted (its blocks freed, its tokens recomputed when it is readmitted).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/json_constraint.h"
#include "runtime/kv_blocks.h"
#include "runtime/metrics.h"

namespace ouro {

struct TokenLogprob {
  int id = -1;
  float logprob = 0;
};

struct GenEvent {
  enum Kind { kToken, kDone } kind = kToken;
  // kToken: one sampled token and the text it releases (empty while held back for a possible stop
  // string or an incomplete UTF-8 character).
  std::string text;
  int token = -1;
  float logprob = 0;                // log-probability under the model (temperature 1)
  std::vector<TokenLogprob> top;    // the most likely alternatives, when asked for
  // kDone: why it ended (stop | length | cancelled | abort | error), any last text, and usage.
  std::string finish_reason, error;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

struct GenRequest {
  std::vector<int> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int> stop_ids;        // end-of-sequence tokens
  std::vector<std::string> stop;    // stop strings (not part of the output)
  int logprobs = -1;                // -1: off; else how many alternatives per token (0..20)
  // response_format: tokens that cannot continue a valid document are masked before sampling
  // (used on the scheduler thread only).
  std::shared_ptr<JsonConstraint> constraint;
  // Called on the scheduler thread, in order; kDone comes last. Must not block.
  std::function<void(GenEvent&&)> on_event;
};

struct SchedulerConfig {
  int max_running = 16;     // sequences in one batch
  int max_waiting = 256;    // queued requests beyond which submit refuses
  int batch_tokens = 256;   // tokens per forward pass (decode tokens first, then prefill chunks)
  int n_blocks = 0;         // KV pool
  int block_size = 16;
};

// Where the text released so far may end: at the first stop string (hit), else before the
// longest tail that could still grow into one. `emitted` is what was already released.
struct StopScan {
  bool hit = false;
  size_t end = 0;
};
StopScan scan_stops(const std::string& text, size_t emitted, const std::vector<std::string>& stops);

class Scheduler {
 public:
  Scheduler(Engine& e, const SchedulerConfig& c, ServeMetrics& metrics);
  ~Scheduler();  // aborts what is left, then joins the thread
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Submit { kOk, kQueueFull, kShuttingDown };
  // A fresh request id (for a trace flow that must start before submit).
  uint64_t new_id() { return next_id_++; }
  // Queues a request under `id` (from new_id()), which cancel() takes.
  Submit submit(GenRequest r, uint64_t id);
  // Ends a request (a client went away): its blocks are freed within one step.
  void cancel(uint64_t id);
  // Refuses new requests, lets the queued and running ones finish for up to grace_s seconds,
  // aborts the rest, and returns when none is left.
  void drain(double grace_s);
  // The most tokens (prompt + generated) one request may hold: the context and the KV pool.
  int max_sequence_tokens() const;
  const SchedulerConfig& config() const { return cfg_; }

 private:
  struct Seq;
  void loop();
  bool admit(Seq& s);
  void step();
  void preempt(Seq& s);
  void release_blocks(Seq& s);
  void finish(Seq& s, const std::string& reason, const std::string& error = "");
  void on_token(Seq& s, float* logits);
  void publish_full_blocks(Seq& s);

  Engine& e_;
  SchedulerConfig cfg_;
  ServeMetrics& m_;
  PagedKvCache kv_;
  RecurrentStateStore state_;     // one slot per running sequence (empty for attention-only models)
  std::vector<int> free_slots_;
  KvBlocks blocks_;
  std::unique_ptr<Workspace> ws_;
  std::vector<float> logits_, row_copy_;

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::unique_ptr<Seq>> incoming_;
  std::vector<uint64_t> cancels_;
  bool accepting_ = true, abort_ = false, stop_ = false, idle_ = true;
  int queued_ = 0;  // incoming + waiting, for max_waiting
  std::atomic<uint64_t> next_id_{1};

  // Owned by the scheduler thread.
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  std::thread thread_;
};

}  // namespace ouro
