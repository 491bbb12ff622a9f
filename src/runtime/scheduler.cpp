#include "runtime/scheduler.h"

#include <algorithm>
#include <cmath>

#include "trace/trace.h"

namespace ouro {

using Clock = std::chrono::steady_clock;

struct Scheduler::Seq {
  uint64_t id = 0;
  GenRequest req;
  std::vector<int> tokens;        // prompt, then generated tokens
  int n_prompt = 0;
  int n_computed = 0;             // tokens whose K/V are in the cache
  std::vector<int> table;         // block table
  int slot = -1;                  // recurrent-state slot while admitted
  std::vector<uint64_t> hashes;   // chain hash of each published (full) block
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamDecoder> dec;
  std::string text;               // all generated text
  size_t emitted = 0;             // bytes of text handed out
  int generated = 0, cached_tokens = 0;
  bool looked_up = false;         // prefix-cache figures count a request's first admission only
  bool preempted = false;         // blocks freed this step; back to the queue
  Clock::time_point arrival, last_token;
};

StopScan scan_stops(const std::string& text, size_t emitted, const std::vector<std::string>& stops) {
  StopScan r;
  r.end = text.size();
  size_t longest = 0;
  for (const std::string& s : stops) longest = std::max(longest, s.size());
  if (longest == 0) return r;
  // A stop string may straddle what was emitted and what is new: search from that far back.
  const size_t from = emitted >= longest - 1 ? emitted - (longest - 1) : 0;
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t p = text.find(s, from);
    if (p != std::string::npos && p < best) best = p;
  }
  if (best != std::string::npos) {
    r.hit = true;
    r.end = std::max(best, emitted);
    return r;
  }
  // Hold back the longest tail that is a proper prefix of a stop string.
  for (size_t k = std::min(longest - 1, text.size()); k > 0; --k) {
    const std::string_view tail(text.data() + text.size() - k, k);
    bool prefix = false;
    for (const std::string& s : stops) prefix = prefix || (s.size() > k && std::string_view(s).substr(0, k) == tail);
    if (prefix) {
      r.end = std::max(emitted, text.size() - k);
      break;
    }
  }
  return r;
}

Scheduler::Scheduler(Engine& e, const SchedulerConfig& c, ServeMetrics& metrics)
    : e_(e),
      cfg_(c),
      m_(metrics),
      kv_(e.model().kv_layout(), e.kv_spec(), c.n_blocks, c.block_size),
      state_(e.model().state_bytes_per_seq(), std::max(c.max_running, 1)),
      blocks_(c.n_blocks, c.block_size),
      ws_(e.model().new_workspace(c.batch_tokens)) {
  // The pool is resident from the start: the server's memory is what --kv-mem says, and does not
  // creep up as the prefix cache fills blocks for the first time.
  kv_.commit();
  for (int i = state_.n_slots() - 1; i >= 0; --i) free_slots_.push_back(i);
  logits_.resize((size_t)std::max(c.max_running, 1) * e.model().info().n_vocab);
  row_copy_.resize(e.model().info().n_vocab);
  m_.kv_total = c.n_blocks;
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    accepting_ = false;
    abort_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int Scheduler::max_sequence_tokens() const {
  return std::min(e_.config().n_ctx, cfg_.n_blocks * cfg_.block_size);
}

Scheduler::Submit Scheduler::submit(GenRequest r, uint64_t id) {
  auto s = std::make_unique<Seq>();
  s->req = std::move(r);
  s->tokens = s->req.prompt;
  s->n_prompt = (int)s->tokens.size();
  s->sampler = std::make_unique<Sampler>(s->req.sampling);
  s->dec = std::make_unique<StreamDecoder>(e_.tokenizer());
  s->arrival = Clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_) return Submit::kShuttingDown;
    if (queued_ >= cfg_.max_waiting) return Submit::kQueueFull;
    s->id = id;
    ++queued_;
    m_.waiting = queued_;
    idle_ = false;
    incoming_.push_back(std::move(s));
  }
  cv_.notify_all();
  return Submit::kOk;
}

void Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

void Scheduler::drain(double grace_s) {
  std::unique_lock<std::mutex> lk(mu_);
  accepting_ = false;
  if (!idle_cv_.wait_for(lk, std::chrono::duration<double>(grace_s), [&] { return idle_; })) {
    abort_ = true;
    cv_.notify_all();
    idle_cv_.wait(lk, [&] { return idle_; });
  }
}

void Scheduler::loop() {
  for (;;) {
    std::vector<uint64_t> cancels;
    bool abort;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stop_ || abort_ || !incoming_.empty() || !cancels_.empty() || !waiting_.empty() || !running_.empty();
      });
      for (auto& s : incoming_) waiting_.push_back(std::move(s));
      incoming_.clear();
      cancels.swap(cancels_);
      abort = abort_;
      abort_ = false;  // consumed: once the queue is empty the loop sleeps again
      if (stop_ && waiting_.empty() && running_.empty()) break;
    }
    // Cancellations and aborts first: their blocks are free for this very step.
    auto drop = [&](const std::string& reason, auto&& pred) {
      for (auto it = running_.begin(); it != running_.end();)
        if (pred(**it)) { finish(**it, reason); it = running_.erase(it); } else ++it;
      for (auto it = waiting_.begin(); it != waiting_.end();)
        if (pred(**it)) { finish(**it, reason); it = waiting_.erase(it); } else ++it;
    };
    if (!cancels.empty())
      drop("cancelled", [&](const Seq& s) { return std::find(cancels.begin(), cancels.end(), s.id) != cancels.end(); });
    if (abort) drop("abort", [](const Seq&) { return true; });

    // Admission, oldest first, while slots and blocks allow.
    while (!waiting_.empty() && (int)running_.size() < cfg_.max_running) {
      Seq& s = *waiting_.front();
      if (!admit(s)) {
        if (running_.empty()) {  // it cannot fit even alone
          finish(s, "error", "the request needs more KV blocks than the pool has");
          waiting_.pop_front();
          continue;
        }
        break;
      }
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    if (!running_.empty()) step();

    std::lock_guard<std::mutex> lk(mu_);
    queued_ = (int)(incoming_.size() + waiting_.size());
    m_.waiting = queued_;
    m_.running = (int)running_.size();
    m_.kv_used = blocks_.used();
    m_.kv_cached = blocks_.cached();
    idle_ = incoming_.empty() && waiting_.empty() && running_.empty();
    if (idle_) idle_cv_.notify_all();
  }
  std::lock_guard<std::mutex> lk(mu_);
  idle_ = true;
  idle_cv_.notify_all();
}

bool Scheduler::admit(Seq& s) {
  const int bs = cfg_.block_size, len = (int)s.tokens.size();
  const int need = (len + bs - 1) / bs;
  if (free_slots_.empty()) return false;
  // Reuse cached full blocks of the same prefix; at least one token is always computed, since
  // its logits are needed. A model with recurrent state cannot start after a cached prefix (its
  // state there is not kept), so it computes the whole prompt.
  const bool recurrent = state_.bytes_per_slot() > 0;
  uint64_t h = 0;
  for (int b = 0; !recurrent && b < (len - 1) / bs; ++b) {
    const uint64_t hb = KvBlocks::chain_hash(h, &s.tokens[(size_t)b * bs], bs);
    const int blk = blocks_.lookup(hb, &s.tokens[(size_t)b * bs]);
    if (blk < 0) break;
    s.table.push_back(blk);
    s.hashes.push_back(hb);
    h = hb;
  }
  if (blocks_.available() < need - (int)s.table.size()) {
    release_blocks(s);
    return false;
  }
  while ((int)s.table.size() < need) s.table.push_back(blocks_.allocate());
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  state_.clear(s.slot);
  s.preempted = false;
  s.n_computed = (int)s.hashes.size() * bs;
  if (!s.looked_up) {
    s.looked_up = true;
    s.cached_tokens = s.n_computed;
    m_.prompt_tokens += s.n_prompt;
    m_.prefix_query_tokens += s.n_prompt;
    m_.prefix_hit_tokens += s.n_computed;
  }
  return true;
}

void Scheduler::release_blocks(Seq& s) {
  for (int b : s.table) blocks_.release(b);
  s.table.clear();
  if (s.slot >= 0) free_slots_.push_back(s.slot);
  s.slot = -1;
  s.hashes.clear();
  s.n_computed = 0;
}

void Scheduler::preempt(Seq& s) {
  release_blocks(s);
  s.preempted = true;
  ++m_.preemptions;
}

void Scheduler::publish_full_blocks(Seq& s) {
  const int bs = cfg_.block_size;
  while ((int)s.hashes.size() < s.n_computed / bs) {
    const size_t b = s.hashes.size();
    const uint64_t h = KvBlocks::chain_hash(b ? s.hashes.back() : 0, &s.tokens[b * bs], bs);
    s.hashes.push_back(h);
    blocks_.publish(s.table[b], h, &s.tokens[b * bs]);
  }
}

void Scheduler::step() {
  const int bs = cfg_.block_size;
  struct Pick { Seq* s; int n; };
  std::vector<Pick> picks;
  int budget = cfg_.batch_tokens;
  // Decode tokens first (each running request that has only its last token to run), then prefill.
  std::vector<Seq*> order;
  for (auto& s : running_) if (s->tokens.size() - s->n_computed == 1) order.push_back(s.get());
  for (auto& s : running_) if (s->tokens.size() - s->n_computed > 1) order.push_back(s.get());
  for (Seq* s : order) {
    if (budget == 0) break;
    if (s->preempted) continue;
    const int take = std::min<int>(budget, (int)s->tokens.size() - s->n_computed);
    // Blocks for the positions this step writes; preempt the newest other request when out.
    const int need = (s->n_computed + take + bs - 1) / bs;
    bool preempted_self = false;
    while ((int)s->table.size() < need) {
      const int b = blocks_.allocate();
      if (b >= 0) { s->table.push_back(b); continue; }
      Seq* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it)
        if (!(*it)->preempted) { victim = it->get(); break; }
      if (!victim || victim == s) { preempted_self = true; victim = s; }
      preempt(*victim);
      picks.erase(std::remove_if(picks.begin(), picks.end(), [&](const Pick& p) { return p.s == victim; }), picks.end());
      if (preempted_self) break;
    }
    if (preempted_self) continue;
    picks.push_back({s, take});
    budget -= take;
  }
  // Preempted requests go back to the front of the queue, in their original order.
  for (auto it = running_.end(); it != running_.begin();) {
    --it;
    if ((*it)->preempted) {
      waiting_.push_front(std::move(*it));
      it = running_.erase(it);
    }
  }
  if (picks.empty()) return;

  std::vector<SeqBatch> batch(picks.size());
  for (size_t i = 0; i < picks.size(); ++i) {
    Seq& s = *picks[i].s;
    SeqBatch& b = batch[i];
    b.tokens = &s.tokens[s.n_computed];
    b.n = picks[i].n;
    b.n_past = s.n_computed;
    b.blocks = s.table.data();
    b.state_slot = s.slot;
    b.want_logits = s.n_computed + b.n == (int)s.tokens.size();
    b.n_sampled = std::clamp(s.n_computed + b.n - s.n_prompt, 0, b.n);  // tokens past the prompt
  }
  Status st = Ok{};
  trace::counter("requests_running", (double)running_.size());
  trace::counter("requests_waiting", (double)waiting_.size());
  trace::counter("kv_blocks_used", (double)blocks_.used());
  {
    trace::Span sp("step", "phase", -1, cfg_.batch_tokens - budget);
    sp.pos((int64_t)picks.size());
    for (const auto& p : picks) trace::flow('t', "request", p.s->id);
    st = e_.model().forward({kv_, state_}, *ws_, batch.data(), (int)batch.size(), logits_.data(), e_.pool(), e_.kernels());
  }
  if (!st) {
    for (auto& p : picks) p.s->n_computed = -1;  // marks them for removal below
    for (auto it = running_.begin(); it != running_.end();)
      if ((*it)->n_computed < 0) { finish(**it, "error", st.error().message); it = running_.erase(it); } else ++it;
    return;
  }
  int row = 0;
  std::vector<Seq*> done;
  for (size_t i = 0; i < picks.size(); ++i) {
    Seq& s = *picks[i].s;
    s.n_computed += picks[i].n;
    publish_full_blocks(s);
    if (batch[i].want_logits) on_token(s, &logits_[(size_t)row++ * e_.model().info().n_vocab]);
  }
  for (auto it = running_.begin(); it != running_.end();)
    if ((*it)->req.on_event == nullptr) it = running_.erase(it); else ++it;
}

void Scheduler::on_token(Seq& s, float* logits) {
  const int nv = e_.model().info().n_vocab;
  GenEvent ev;
  if (s.req.logprobs >= 0) std::copy(logits, logits + nv, row_copy_.begin());
  if (s.req.constraint) {
    // Tokens left to this request, this one included: the document must close within them.
    const int budget = std::min(s.req.max_tokens - s.generated, max_sequence_tokens() - (int)s.tokens.size());
    trace::Span span("constrain", "op");
    if (s.req.constraint->mask(logits, nv, budget, s.req.stop_ids) == 0) {
      finish(s, "length");
      return;
    }
  }
  const int id = s.sampler->sample(logits, nv, s.tokens);
  if (s.req.constraint && std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), id) == s.req.stop_ids.end() &&
      !s.req.constraint->accept(id)) {
    finish(s, "error", "constrained decoding sampled a token outside the mask");
    return;
  }
  if (s.req.logprobs >= 0) {
    // log-softmax of the model's logits (before penalties and temperature)
    const float mx = *std::max_element(row_copy_.begin(), row_copy_.end());
    double sum = 0;
    for (int i = 0; i < nv; ++i) sum += std::exp((double)row_copy_[i] - mx);
    const float lse = mx + (float)std::log(sum);
    ev.logprob = row_copy_[id] - lse;
    const int k = std::min(s.req.logprobs, nv);
    std::vector<int> idx(nv);
    for (int i = 0; i < nv; ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return row_copy_[a] > row_copy_[b]; });
    for (int i = 0; i < k; ++i) ev.top.push_back({idx[i], row_copy_[idx[i]] - lse});
  }
  const auto now = Clock::now();
  if (s.generated == 0) m_.ttft.observe(std::chrono::duration<double>(now - s.arrival).count());
  else m_.itl.observe(std::chrono::duration<double>(now - s.last_token).count());
  s.last_token = now;
  if (std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), id) != s.req.stop_ids.end()) {
    finish(s, "stop");
    return;
  }
  s.tokens.push_back(id);
  ++s.generated;
  ++m_.generation_tokens;
  s.text += s.dec->push(id);
  if (s.generated == s.req.max_tokens || (int)s.tokens.size() >= max_sequence_tokens()) s.text += s.dec->flush();
  const StopScan sc = scan_stops(s.text, s.emitted, s.req.stop);
  ev.kind = GenEvent::kToken;
  ev.token = id;
  ev.text = s.text.substr(s.emitted, sc.end - s.emitted);
  s.emitted = sc.end;
  if (sc.hit) s.text.resize(sc.end);
  s.req.on_event(std::move(ev));
  if (sc.hit) finish(s, "stop");
  else if (s.generated == s.req.max_tokens || (int)s.tokens.size() >= max_sequence_tokens()) finish(s, "length");
}

void Scheduler::finish(Seq& s, const std::string& reason, const std::string& error) {
  if (!s.req.on_event) return;  // already finished
  trace::Span sp("finish", "request", -1, s.generated);
  trace::flow('f', "request", s.id);
  GenEvent ev;
  ev.kind = GenEvent::kDone;
  ev.finish_reason = reason;
  ev.error = error;
  if (reason == "stop" || reason == "length") {
    // Whatever was held back (a partial stop string that never completed, an unfinished character).
    if (s.emitted < s.text.size() && !scan_stops(s.text, s.emitted, s.req.stop).hit) {
      const std::string tail = s.dec->flush();
      s.text += tail;
      ev.text = s.text.substr(s.emitted);
      s.emitted = s.text.size();
    }
  }
  ev.prompt_tokens = s.n_prompt;
  ev.completion_tokens = s.generated;
  ev.cached_tokens = s.cached_tokens;
  m_.e2e.observe(std::chrono::duration<double>(Clock::now() - s.arrival).count());
  release_blocks(s);
  auto cb = std::move(s.req.on_event);
  s.req.on_event = nullptr;  // marks it finished; step() drops it from running_
  cb(std::move(ev));
}

}  // namespace ouro
