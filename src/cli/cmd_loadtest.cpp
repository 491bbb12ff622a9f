// ouro loadtest: drives an OpenAI-compatible server (`ouro serve`, llama.cpp, vLLM, ...) with
// streamed requests, closed loop (N workers) or open loop (Poisson arrivals), and reports
// throughput, latency percentiles (TTFT, TPOT, inter-token, end-to-end) and goodput under SLOs.
// One file over 600 lines on purpose: the request client, the closed and open loops, the spawned
// server and the report share Config, Work and Sample, and read best in one pass from work_for()
// to the printed record.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/common.h"
#include "serve/http_client.h"

namespace ouro {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* kUsage =
    "usage: ouro loadtest --url URL [--concurrency N | --rate R] [--requests N]\n"
    "                     [--dataset FILE | --prompt-len L --gen-len G] [options]\n"
    "  Sends streamed requests (temperature 0, max_tokens G, usage included) to an\n"
    "  OpenAI-compatible server and reports throughput and latency percentiles.\n"
    "  --url URL          http://HOST:PORT[/PREFIX]; requests go to PREFIX/v1/completions or\n"
    "                     PREFIX/v1/chat/completions (a PREFIX ending in /v1 is not doubled)\n"
    "  --concurrency N    closed loop: N workers, each sends its next request when the last ends\n"
    "                     (default 1, at most 1024)\n"
    "  --rate R           open loop: Poisson arrivals at R requests/s, each launched at its time\n"
    "                     whatever the others do (at most 1024 in flight; more count as errors)\n"
    "  --requests N       how many requests (default 100, or the dataset's line count)\n"
    "  --prompt-len L     synthetic prompts of about L words (~tokens), random per request (128)\n"
    "  --gen-len G        max_tokens of each request (128; the dataset's default too)\n"
    "  --dataset FILE     JSON lines {\"prompt\": str, \"max_tokens\": int} or {\"messages\": [...], ...},\n"
    "                     used in turn (cycled when --requests is larger)\n"
    "  --endpoint E       completions (default) or chat\n"
    "  --model NAME       the request's model (default: the first id of GET /v1/models, if any)\n"
    "  --api-key KEY      sent as Authorization: Bearer KEY\n"
    "  --slo-ttft S       goodput counts requests whose time to first token is <= S seconds\n"
    "  --slo-tpot S       ... and whose time per output token is <= S seconds\n"
    "  --seed N           prompts and arrival times (default 0)\n"
    "  --timeout S        per request, connect to last byte (default 600)\n"
    "  --json             one JSON object instead of the table\n"
    "  --texts            with --json: each request's generated text, in request order (greedy\n"
    "                     outputs to compare two servers; the lab's serve-level correctness check)\n"
    "  --serve-bin PATH   start `PATH serve --port 0 ARGS` first and load it (instead of --url); it\n"
    "                     gets SIGTERM when the run ends and its exit status goes into the record\n"
    "  --serve-args ARGS  the server's flags, space-separated (e.g. \"-t 2 --max-batch 8\")\n"
    "  TPOT = (e2e - TTFT) / (output tokens - 1); output tokens come from the usage chunk, else\n"
    "  the number of content events. Total tok/s adds the prompt tokens the server reports.\n"
    "  Exit: 0 when the run happened (even with failed requests), 1 when the server cannot be\n"
    "  reached, 2 on usage errors.\n";

// Most requests in flight at once in the open loop (one thread each).
constexpr int kMaxInFlight = 1024;

// One request to send: its varying parts.
struct Work {
  std::string prompt;  // the completion prompt, or the single user message for chat
  json messages;       // chat messages from the dataset (null: use prompt)
  long long max_tokens = 0;
};

// What happened to one request. Times are seconds.
struct Sample {
  bool ok = false;
  std::string error_kind, error_msg;  // when !ok
  double ttft = -1;                   // -1: no content arrived
  double e2e = 0;
  std::vector<double> itl;            // gaps between consecutive content events
  long long out_tokens = 0, prompt_tokens = 0;
  std::string text;                   // the streamed text (kept for --texts)
};

struct Config {
  http::Url url;
  std::string path;  // the endpoint's full path
  bool chat = false;
  std::string model, api_key;
  double timeout_s = 600;
  // Synthetic prompts (when dataset is empty).
  long long prompt_len = 128, gen_len = 128;
  uint64_t seed = 0;
  std::vector<Work> dataset;
};

// A fixed vocabulary of plain words (about one token each with a leading space in BPE vocabularies).
const char* const kWords[] = {
    "time",   "year",   "people", "way",    "day",    "man",     "thing",  "woman",   "life",   "child",  "world",
    "school", "state",  "family", "student", "group", "country", "problem", "hand",   "part",   "place",  "case",
    "week",   "company", "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water",  "room",   "mother", "area",   "money",  "story",   "fact",   "month",   "lot",    "right",  "study",
    "book",   "eye",    "job",    "word",   "business", "issue", "side",   "kind",    "head",   "house",  "service",
    "friend", "father", "power",  "hour",   "game",   "line",    "end",    "member",  "law",    "car",    "city",
    "name",   "team",   "minute", "idea",   "kid",    "body",    "back",   "parent",  "face",   "others", "level",
    "office", "door",   "health", "person", "art",    "war",     "history", "party",  "result", "change", "morning",
    "reason", "research", "girl", "guy",    "moment", "air",     "teacher", "force",  "river",  "green",  "quick",
    "small",  "large",  "old",    "new",    "good",   "first",   "last",   "long",    "great",  "little", "own",
    "other",  "right",  "big",    "high",   "different", "early", "young", "important", "few", "public", "bad",
    "same",   "able",   "run",    "make",   "take",   "see",     "know",   "think",   "come",   "give",   "look",
};
constexpr size_t kNumWords = sizeof kWords / sizeof kWords[0];

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The i-th request: a dataset record (cycled) or a synthetic prompt of prompt_len random words
// drawn from a generator seeded by (seed, i), so prompts differ from the first word on and the
// run is reproducible whatever the threads' order.
Work work_for(const Config& c, long long i) {
  if (!c.dataset.empty()) return c.dataset[(size_t)(i % (long long)c.dataset.size())];
  Work w;
  w.max_tokens = c.gen_len;
  std::mt19937_64 rng(splitmix64(c.seed * 0x100000001B3ull + (uint64_t)i));
  for (long long k = 0; k < c.prompt_len; ++k) {
    if (k) w.prompt += ' ';
    w.prompt += kWords[rng() % kNumWords];
  }
  return w;
}

std::string first_chars(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

// The message of an OpenAI error body, or the start of the body.
std::string error_message(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return first_chars(e["message"].get<std::string>(), 200);
    if (e.is_string()) return first_chars(e.get<std::string>(), 200);
  }
  return first_chars(body, 200);
}

// Sends one streamed request and times its events.
Sample run_one(const Config& c, const Work& w) {
  Sample s;
  json body = {{"max_tokens", w.max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!c.model.empty()) body["model"] = c.model;
  if (c.chat)
    body["messages"] = w.messages.is_null() ? json::array({{{"role", "user"}, {"content", w.prompt}}}) : w.messages;
  else
    body["prompt"] = w.prompt;
  http::Request req;
  req.method = "POST";
  req.path = c.path;
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!c.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + c.api_key);
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  http::Options opt;
  opt.timeout_s = c.timeout_s;
  opt.connect_timeout_s = std::min(c.timeout_s, 10.0);

  // Stream state, updated by the body callback as bytes arrive.
  const auto t0 = Clock::now();
  http::SseParser sse;
  bool done = false, bad = false, have_usage = false;
  std::string bad_msg, error_body;
  long long content_events = 0, usage_out = 0;
  double last_content = -1;
  auto on_event = [&](const std::string& data, double t) {
    if (done || bad) return;  // anything after [DONE] is ignored
    if (data == "[DONE]" || data == " [DONE]") {
      done = true;
      return;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      bad = true;
      bad_msg = "event is not a JSON object: '" + first_chars(data, 80) + "'";
      return;
    }
    if (j.contains("error")) {
      bad = true;
      bad_msg = "error event: " + first_chars(j["error"].dump(-1, ' ', false, json::error_handler_t::replace), 200);
      return;
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (auto ct = u->find("completion_tokens"); ct != u->end() && ct->is_number_integer()) {
        usage_out = ct->get<long long>();
        have_usage = true;
      }
      if (auto pt = u->find("prompt_tokens"); pt != u->end() && pt->is_number_integer()) s.prompt_tokens = pt->get<long long>();
    }
    bool content = false;
    if (auto ch = j.find("choices"); ch != j.end() && ch->is_array()) {
      for (const json& choice : *ch) {
        if (!choice.is_object()) continue;
        const json* text = nullptr;
        if (c.chat) {
          auto d = choice.find("delta");
          if (d != choice.end() && d->is_object())
            if (auto ct = d->find("content"); ct != d->end()) text = &*ct;
        } else if (auto tx = choice.find("text"); tx != choice.end()) {
          text = &*tx;
        }
        if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) {
          content = true;
          s.text += text->get_ref<const std::string&>();
        }
      }
    }
    if (!content) return;
    if (content_events == 0)
      s.ttft = t;
    else
      s.itl.push_back(t - last_content);
    last_content = t;
    ++content_events;
  };
  auto sink = [&](const http::Response& head, std::string_view d) {
    if (head.status != 200) {  // keep the start of an error body to quote it
      if (error_body.size() < 4096) error_body.append(d.substr(0, 4096 - error_body.size()));
      return true;
    }
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!sse.feed(d, [&](const std::string& ev) { on_event(ev, t); })) {
      bad = true;
      bad_msg = "an event line exceeds " + std::to_string(sse.max_line) + " bytes";
    }
    return !bad;  // stop reading a malformed stream
  };
  http::Response r = http::request(c.url, req, opt, sink);
  s.e2e = std::chrono::duration<double>(Clock::now() - t0).count();

  auto fail = [&](std::string kind, std::string msg) {
    s.ok = false;
    s.error_kind = std::move(kind);
    s.error_msg = std::move(msg);
    return s;
  };
  if (r.headers_done && r.status != 200)
    return fail("http_" + std::to_string(r.status), std::to_string(r.status) + " " + r.reason + ": " + error_message(error_body));
  switch (r.failure) {
    case http::Failure::kNone: break;
    case http::Failure::kConnect: return fail("connect", r.error);
    case http::Failure::kTimeout: return fail("timeout", r.error);
    case http::Failure::kAborted: return fail("malformed_stream", bad_msg);
    // Trouble after the headers is trouble in the stream.
    case http::Failure::kClosed: return fail(r.headers_done ? "malformed_stream" : "closed", r.error);
    case http::Failure::kProtocol: return fail(r.headers_done ? "malformed_stream" : "protocol", r.error);
  }
  const double t_end = s.e2e;
  sse.finish([&](const std::string& ev) { on_event(ev, t_end); });
  if (bad) return fail("malformed_stream", bad_msg);
  if (!done) return fail("malformed_stream", "the stream ended without 'data: [DONE]'");
  s.ok = true;
  s.out_tokens = have_usage ? usage_out : content_events;
  return s;
}

// run_one that turns an unexpected exception into a failed sample instead of ending the process.
Sample run_guarded(const Config& c, long long i) {
  try {
    return run_one(c, work_for(c, i));
  } catch (const std::exception& e) {
    Sample s;
    s.error_kind = "internal";
    s.error_msg = e.what();
    return s;
  }
}

// Closed loop: `workers` threads take the next request index until all are sent.
void closed_loop(const Config& c, long long n, int workers, std::vector<Sample>* out) {
  std::atomic<long long> next{0};
  auto worker = [&] {
    for (long long i; (i = next.fetch_add(1)) < n;) (*out)[(size_t)i] = run_guarded(c, i);
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < workers; ++k) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error& e) {
      std::fprintf(stderr, "ouro: loadtest: could start only %d of %d workers (%s)\n", k, workers, e.what());
      break;
    }
  }
  if (threads.empty()) worker();  // no thread at all: run on this one
  for (auto& t : threads) t.join();
}

// Starts a detached thread with a small stack (the open loop may run a thousand of them).
bool spawn_detached(std::function<void()> fn, std::string* error) {
  auto* heap = new std::function<void()>(std::move(fn));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t t;
  const int rc = pthread_create(
      &t, &attr,
      [](void* p) -> void* {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
        (*f)();
        return nullptr;
      },
      heap);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete heap;
    *error = std::strerror(rc);
    return false;
  }
  return true;
}

// Open loop: request i launches at its Poisson arrival time on its own thread. Threads are
// detached and share this state through a shared_ptr, so whichever finishes last frees it.
struct OpenLoopState {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
};

void open_loop(const Config& c, long long n, double rate, std::vector<Sample>* out) {
  auto st = std::make_shared<OpenLoopState>();
  std::mt19937_64 rng(splitmix64(c.seed ^ 0xA5A5A5A5A5A5A5A5ull));
  std::exponential_distribution<double> gap(rate);
  const auto start = Clock::now();
  double t = 0;
  for (long long i = 0; i < n; ++i) {
    t += gap(rng);
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
    Sample* slot = &(*out)[(size_t)i];
    {
      std::lock_guard<std::mutex> lk(st->mu);
      if (st->in_flight >= kMaxInFlight) {
        slot->error_kind = "not_launched";
        slot->error_msg = std::to_string(kMaxInFlight) + " requests already in flight at its arrival time";
        continue;
      }
      ++st->in_flight;
    }
    std::string err;
    const bool started = spawn_detached(
        [st, slot, &c, i] {
          *slot = run_guarded(c, i);
          std::lock_guard<std::mutex> lk(st->mu);
          --st->in_flight;
          st->cv.notify_all();
        },
        &err);
    if (!started) {
      std::lock_guard<std::mutex> lk(st->mu);
      --st->in_flight;
      slot->error_kind = "not_launched";
      slot->error_msg = "cannot start a thread: " + err;
    }
  }
  // The samples, the config and the dataset outlive every request thread: wait for them all.
  std::unique_lock<std::mutex> lk(st->mu);
  st->cv.wait(lk, [&] { return st->in_flight == 0; });
}

// Percentiles (linear interpolation between order statistics) and mean.
struct Dist {
  bool empty = true;
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

Dist dist(std::vector<double> v) {
  Dist d;
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    const double pos = p / 100.0 * (double)(v.size() - 1);
    const size_t lo = (size_t)pos;
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
  };
  d.empty = false;
  d.p50 = pct(50);
  d.p90 = pct(90);
  d.p99 = pct(99);
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / (double)v.size();
  return d;
}

json dist_json(const Dist& d) {
  if (d.empty) return {{"p50", nullptr}, {"p90", nullptr}, {"p99", nullptr}, {"mean", nullptr}};
  return {{"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"mean", d.mean}};
}

// Reads the dataset: one JSON object per non-blank line.
Expected<std::vector<Work>> load_dataset(const std::string& path, bool chat, long long default_max_tokens) {
  std::ifstream f(path);
  if (!f) return usage_error("flag --dataset: cannot read '" + path + "'");
  std::vector<Work> out;
  std::string line;
  for (long long no = 1; std::getline(f, line); ++no) {
    auto bad = [&](const std::string& why) -> Error {
      return usage_error("flag --dataset: " + path + " line " + std::to_string(no) + ": " + why);
    };
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    Work w;
    w.max_tokens = default_max_tokens;
    if (auto m = j.find("max_tokens"); m != j.end()) {
      if (!m->is_number_integer() || m->get<long long>() < 1 || m->get<long long>() > 1000000)
        return bad("max_tokens must be an integer in [1, 1000000]");
      w.max_tokens = m->get<long long>();
    }
    auto p = j.find("prompt");
    auto msgs = j.find("messages");
    if (p != j.end()) {
      if (!p->is_string()) return bad("prompt must be a string");
      w.prompt = p->get<std::string>();
    } else if (msgs != j.end()) {
      if (!msgs->is_array() || msgs->empty()) return bad("messages must be a non-empty array");
      for (const json& m : *msgs)
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
          return bad("each message must be an object with a string role");
      if (!chat) return bad("messages need --endpoint chat");
      w.messages = *msgs;
    } else {
      return bad("needs \"prompt\" or \"messages\"");
    }
    out.push_back(std::move(w));
  }
  if (out.empty()) return usage_error("flag --dataset: " + path + " has no records");
  return out;
}

// The model the server lists first under GET /v1/models, or "" (no such endpoint, unreachable...).
std::string discover_model(const Config& c, const std::string& v1) {
  http::Request req;
  req.path = v1 + "/models";
  if (!c.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + c.api_key);
  http::Options opt;
  opt.timeout_s = std::min(c.timeout_s, 10.0);
  opt.connect_timeout_s = opt.timeout_s;
  http::Response r = http::request(c.url, req, opt);
  if (!r.ok() || r.status != 200) return "";
  json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return "";
  const json& m = j["data"][0];
  if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) return "";
  return m["id"].get<std::string>();
}

}  // namespace

// A server this run starts (--serve-bin) and stops: its stderr is read for the `listening on`
// line, then drained (its last 4 KiB kept for the record).
class SpawnedServer {
 public:
  ~SpawnedServer() { stop(); }
  Status start(const std::string& bin, const std::vector<std::string>& args, double timeout_s) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<std::string> argv = {bin, "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& x : argv) cargv.push_back(x.data());
    cargv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) return runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      dup2(p[1], 2);
      execv(cargv[0], cargv.data());
      std::fprintf(stderr, "cannot run %s: %s\n", cargv[0], std::strerror(errno));
      _exit(127);
    }
    close(p[1]);
    fd_ = p[0];
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    std::string buf;
    while (url_.empty()) {
      const int left = (int)std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pf{fd_, POLLIN, 0};
      if (left <= 0 || poll(&pf, 1, left) <= 0) {
        stop();
        return runtime_error(bin + " serve did not report `listening on` within " + std::to_string((int)timeout_s) + " s");
      }
      char tmp[4096];
      const ssize_t n = read(fd_, tmp, sizeof tmp);
      if (n <= 0) {
        json st = stop();
        return runtime_error(bin + " serve exited before listening: " + st.dump() + "; stderr: " + buf.substr(buf.size() > 600 ? buf.size() - 600 : 0));
      }
      buf.append(tmp, (size_t)n);
      const size_t at = buf.find("listening on http://");
      const size_t eol = at == std::string::npos ? at : buf.find('\n', at);
      if (eol != std::string::npos) url_ = buf.substr(at + 13, eol - at - 13);
    }
    tail_ = buf;
    drain_ = std::thread([this] {
      char tmp[4096];
      ssize_t n;
      while ((n = read(fd_, tmp, sizeof tmp)) > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        tail_.append(tmp, (size_t)n);
        if (tail_.size() > 8192) tail_.erase(0, tail_.size() - 4096);
      }
    });
    return Ok{};
  }
  const std::string& url() const { return url_; }
  // SIGTERM, up to 60 s to exit (the server drains for up to 10 s), then SIGKILL.
  json stop() {
    if (pid_ <= 0) return stopped_;
    kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    if (drain_.joinable()) drain_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    std::lock_guard<std::mutex> lk(mu_);
    stopped_ = {{"exit_code", WIFEXITED(status) ? json(WEXITSTATUS(status)) : json(nullptr)},
                {"signal", WIFSIGNALED(status) ? json(WTERMSIG(status)) : json(nullptr)},
                {"stderr_tail", tail_.substr(tail_.size() > 1000 ? tail_.size() - 1000 : 0)}};
    return stopped_;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::thread drain_;
  std::mutex mu_;
  std::string tail_, url_;
  json stopped_;
};

int cmd_loadtest(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Args a;
  if (Status s = a.parse(argc, argv,
                         {"--url", "--concurrency", "--rate", "--requests", "--dataset", "--prompt-len", "--gen-len",
                          "--model", "--endpoint", "--api-key", "--slo-ttft", "--slo-tpot", "--seed", "--timeout",
                          "--serve-bin", "--serve-args"},
                         {"--json", "--texts"});
      !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  if (a.has("--url") == a.has("--serve-bin"))
    return report(usage_error(a.has("--url") ? "--url and --serve-bin exclude each other"
                                             : "missing --url (e.g. --url http://127.0.0.1:8080) or --serve-bin PATH"));
  if (a.has("--serve-args") && !a.has("--serve-bin")) return report(usage_error("--serve-args needs --serve-bin"));
  if (a.has("--texts") && !a.has("--json")) return report(usage_error("--texts needs --json"));
  SpawnedServer server;
  std::string url_text = a.str("--url");
  if (a.has("--serve-bin")) {
    std::vector<std::string> sargs;
    std::istringstream ss(a.str("--serve-args"));
    for (std::string w; ss >> w;) sargs.push_back(w);
    if (Status st = server.start(a.str("--serve-bin"), sargs, 600); !st) return report(st.error());
    url_text = server.url();
  }
  if (a.has("--concurrency") && a.has("--rate"))
    return report(usage_error("--concurrency and --rate exclude each other (closed loop or open loop)"));
  if (a.has("--dataset") && a.has("--prompt-len"))
    return report(usage_error("--dataset and --prompt-len exclude each other (the dataset has the prompts)"));
  auto url = http::parse_url(url_text);
  if (!url) return report(usage_error("flag --url: " + url.error().message));
  auto conc = a.integer("--concurrency", 1, 1, kMaxInFlight);
  auto rate = a.number("--rate", 1, 1e-6, 1e6);
  auto pl = a.integer("--prompt-len", 128, 1, 1000000);
  auto gl = a.integer("--gen-len", 128, 1, 1000000);
  auto seed = a.integer("--seed", 0, 0, LLONG_MAX);
  auto timeout = a.number("--timeout", 600, 0.001, 86400 * 7);
  auto slo_ttft = a.number("--slo-ttft", 0, 1e-9, 1e6);
  auto slo_tpot = a.number("--slo-tpot", 0, 1e-9, 1e6);
  for (auto* v : {&conc, &pl, &gl, &seed})
    if (!*v) return report(v->error());
  for (auto* v : {&rate, &timeout, &slo_ttft, &slo_tpot})
    if (!*v) return report(v->error());
  const std::string endpoint = a.str("--endpoint", "completions");
  if (endpoint != "completions" && endpoint != "chat")
    return report(usage_error("flag --endpoint: '" + endpoint + "' is not one of completions, chat"));

  Config c;
  c.url = *url;
  c.chat = endpoint == "chat";
  c.api_key = a.str("--api-key");
  c.timeout_s = *timeout;
  c.prompt_len = *pl;
  c.gen_len = *gl;
  c.seed = (uint64_t)*seed;
  if (a.has("--dataset")) {
    auto ds = load_dataset(a.str("--dataset"), c.chat, *gl);
    if (!ds) return report(ds.error());
    c.dataset = std::move(*ds);
  }
  auto nreq = a.integer("--requests", c.dataset.empty() ? 100 : (long long)c.dataset.size(), 1, 10000000);
  if (!nreq) return report(nreq.error());
  const long long n = *nreq;
  // A prefix that already ends in /v1 is not doubled.
  const std::string& pre = c.url.prefix;
  const std::string v1 = pre.size() >= 3 && pre.compare(pre.size() - 3, 3, "/v1") == 0 ? pre : pre + "/v1";
  c.path = v1 + (c.chat ? "/chat/completions" : "/completions");

  std::string err;
  if (!http::can_connect(c.url, std::min(c.timeout_s, 10.0), &err))
    return report(runtime_error("cannot reach the server at " + url_text + ": " + err));
  c.model = a.has("--model") ? a.str("--model") : discover_model(c, v1);

  // The run.
  const bool open = a.has("--rate");
  std::vector<Sample> samples((size_t)n);
  const auto start = Clock::now();
  if (open)
    open_loop(c, n, *rate, &samples);
  else
    closed_loop(c, n, (int)std::min<long long>(*conc, n), &samples);
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  // Aggregates over the completed requests.
  std::map<std::string, long long> errors;
  std::map<std::string, std::string> examples;
  std::vector<double> ttft, tpot, itl, e2e;
  long long completed = 0, out_tok = 0, prompt_tok = 0, good = 0;
  const bool has_ttft_slo = a.has("--slo-ttft"), has_tpot_slo = a.has("--slo-tpot");
  for (const Sample& s : samples) {
    if (!s.ok) {
      ++errors[s.error_kind];
      examples.emplace(s.error_kind, s.error_msg);
      continue;
    }
    ++completed;
    out_tok += s.out_tokens;
    prompt_tok += s.prompt_tokens;
    e2e.push_back(s.e2e);
    if (s.ttft >= 0) ttft.push_back(s.ttft);
    itl.insert(itl.end(), s.itl.begin(), s.itl.end());
    const bool has_tpot = s.ttft >= 0 && s.out_tokens > 1;
    const double tp = has_tpot ? (s.e2e - s.ttft) / (double)(s.out_tokens - 1) : 0;
    if (has_tpot) tpot.push_back(tp);
    // A request without content fails a TTFT objective; one with a single token has no TPOT to miss.
    const bool ttft_ok = !has_ttft_slo || (s.ttft >= 0 && s.ttft <= *slo_ttft);
    const bool tpot_ok = !has_tpot_slo || !has_tpot || tp <= *slo_tpot;
    good += ttft_ok && tpot_ok;
  }
  const double dur = std::max(duration, 1e-9);
  const Dist d_ttft = dist(ttft), d_tpot = dist(tpot), d_itl = dist(itl), d_e2e = dist(e2e);
  const bool any_slo = has_ttft_slo || has_tpot_slo;

  const json server_status = a.has("--serve-bin") ? server.stop() : json(nullptr);
  json j = {{"url", url_text},
            {"endpoint", c.path},
            {"model", c.model.empty() ? json(nullptr) : json(c.model)},
            {"mode", open ? "open" : "closed"},
            {"concurrency", open ? json(nullptr) : json(*conc)},
            {"rate", open ? json(*rate) : json(nullptr)},
            {"requests", n},
            {"completed", completed},
            {"errors", errors},
            {"error_examples", examples},
            {"duration_s", duration},
            {"request_throughput", completed / dur},
            {"output_tokens", out_tok},
            {"prompt_tokens", prompt_tok},
            {"output_tok_s", out_tok / dur},
            {"total_tok_s", (out_tok + prompt_tok) / dur},
            {"ttft_s", dist_json(d_ttft)},
            {"tpot_s", dist_json(d_tpot)},
            {"itl_s", dist_json(d_itl)},
            {"e2e_s", dist_json(d_e2e)},
            {"goodput_req_s", any_slo ? json(good / dur) : json(nullptr)},
            {"slo", {{"ttft_s", has_ttft_slo ? json(*slo_ttft) : json(nullptr)},
                     {"tpot_s", has_tpot_slo ? json(*slo_tpot) : json(nullptr)}}}};
  if (a.has("--serve-bin")) j["server"] = server_status;
  if (a.has("--texts")) {
    json texts = json::array();
    for (const Sample& smp : samples) texts.push_back(smp.ok ? json(smp.text) : json(nullptr));
    j["texts"] = texts;
  }
  if (a.has("--json")) {
    std::puts(j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("target      http://%s%s  model %s\n", c.url.authority().c_str(), c.path.c_str(), c.model.empty() ? "(none sent)" : c.model.c_str());
  if (open)
    std::printf("load        open loop, Poisson arrivals at %g req/s\n", *rate);
  else
    std::printf("load        closed loop, concurrency %lld\n", *conc);
  long long nerr = 0;
  for (const auto& [k, v] : errors) nerr += v;
  std::printf("requests    %lld sent, %lld completed, %lld failed\n", n, completed, nerr);
  for (const auto& [k, v] : errors)
    std::printf("  %-18s %6lld   e.g. %s\n", k.c_str(), v, first_chars(examples[k], 100).c_str());
  std::printf("duration    %.3f s\n", duration);
  std::printf("throughput  %.3f req/s   output %.1f tok/s   total %.1f tok/s   (%lld output, %lld prompt tokens)\n",
              completed / dur, out_tok / dur, (out_tok + prompt_tok) / dur, out_tok, prompt_tok);
  if (any_slo) {
    char slo[128];
    if (has_ttft_slo && has_tpot_slo)
      std::snprintf(slo, sizeof slo, "TTFT <= %g ms and TPOT <= %g ms", *slo_ttft * 1e3, *slo_tpot * 1e3);
    else if (has_ttft_slo)
      std::snprintf(slo, sizeof slo, "TTFT <= %g ms", *slo_ttft * 1e3);
    else
      std::snprintf(slo, sizeof slo, "TPOT <= %g ms", *slo_tpot * 1e3);
    std::printf("goodput     %.3f req/s   (%lld of %lld requests meet %s)\n", good / dur, good, n, slo);
  }
  std::printf("\n%-12s %10s %10s %10s %10s %8s\n", "latency ms", "p50", "p90", "p99", "mean", "samples");
  auto row = [](const char* name, const Dist& d, size_t count) {
    if (d.empty) {
      std::printf("%-12s %10s %10s %10s %10s %8zu\n", name, "-", "-", "-", "-", count);
      return;
    }
    std::printf("%-12s %10.2f %10.2f %10.2f %10.2f %8zu\n", name, d.p50 * 1e3, d.p90 * 1e3, d.p99 * 1e3, d.mean * 1e3, count);
  };
  row("ttft", d_ttft, ttft.size());
  row("tpot", d_tpot, tpot.size());
  row("itl", d_itl, itl.size());
  row("e2e", d_e2e, e2e.size());
  return 0;
}

}  // namespace ouro
