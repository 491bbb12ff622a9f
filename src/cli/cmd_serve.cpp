// ouro serve: the OpenAI-compatible server (src/serve/) over the continuous-batching scheduler
// (src/runtime/scheduler.h).
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "cli/common.h"
#include "runtime/scheduler.h"
#include "serve/http.h"
#include "serve/openai.h"

namespace ouro {

namespace {

const char* kServeUsage =
    "usage: ouro serve [options]\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (streaming with\n"
    "SSE), GET /v1/models, /health and /metrics (Prometheus). Requests are batched continuously.\n"
    "  --host ADDR          address to bind (default 127.0.0.1: loopback only)\n"
    "  --port N             port (default 8080; 0 picks a free one)\n"
    "  --max-batch N        requests running in one batch (default 16)\n"
    "  --batch-tokens N     tokens per forward pass: decode tokens, then prefill chunks (default 256)\n"
    "  --kv-blocks N        KV cache blocks (default: --max-batch full contexts, at most --kv-mem)\n"
    "  --kv-mem MiB         KV cache size instead of --kv-blocks (default cap 1024); resident from the start\n"
    "  --block-size N       positions per KV block (default 16)\n"
    "  --max-queue N        waiting requests beyond which new ones get 429 (default 256)\n"
    "  --max-body BYTES     request body limit, 413 beyond (default 8388608)\n"
    "  --api-key KEY        require 'Authorization: Bearer KEY' on /v1/* (or OURO_API_KEY)\n"
    "  --trace FILE         write a Chrome trace of the whole run at exit\n"
    "  --model, --threads, --ctx, --isa: as for generate\n"
    "SIGINT/SIGTERM: stop accepting, finish running requests (abort after 10 s), exit 0.\n";

std::string model_id_of(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0) base.resize(base.size() - 5);
  return base;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kServeUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv,
                         concat(concat(kCommonValueFlags, kTraceFlags),
                                {"--host", "--port", "--max-batch", "--batch-tokens", "--kv-blocks", "--kv-mem", "--block-size",
                                 "--max-queue", "--max-body", "--api-key"}),
                         {});
      !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  if (a.has("--kv-blocks") && a.has("--kv-mem")) return report(usage_error("--kv-blocks and --kv-mem exclude each other"));
  auto port = a.integer("--port", 8080, 0, 65535);
  auto max_batch = a.integer("--max-batch", 16, 1, 1024);
  auto batch_tokens = a.integer("--batch-tokens", 256, 1, 65536);
  auto block_size = a.integer("--block-size", 16, 1, 4096);
  auto max_queue = a.integer("--max-queue", 256, 0, 1 << 20);
  auto max_body = a.integer("--max-body", 8 << 20, 1024, 1LL << 30);
  auto kv_mem = a.integer("--kv-mem", 1024, 1, 1 << 24);
  for (auto* v : {&port, &max_batch, &batch_tokens, &block_size, &max_queue, &max_body, &kv_mem})
    if (!*v) return report(v->error());
  std::string api_key = a.str("--api-key");
  if (api_key.empty()) if (const char* k = std::getenv("OURO_API_KEY")) api_key = k;

  // SIGINT/SIGTERM arrive on a signalfd in the HTTP loop: block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // One descriptor per connection: take the hard limit (often 1024 soft vs much more hard).
  if (rlimit rl; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  if (Status s = start_trace(a); !s) return report(s.error());
  auto eng = load_engine(a);
  if (!eng) return report(eng.error());
  Engine& e = **eng;

  SchedulerConfig sc;
  sc.max_running = (int)*max_batch;
  sc.batch_tokens = (int)std::max<long long>(*batch_tokens, *max_batch);  // room for every decode token
  sc.block_size = (int)*block_size;
  sc.max_waiting = (int)*max_queue;
  {
    // --kv-mem holds both memories: each running sequence's recurrent state first, the KV blocks in
    // what is left (a hybrid model's memory is not its attention layers' alone).
    const size_t block_bytes = PagedKvCache::bytes_per_block(e.model().kv_layout(), e.kv_spec(), sc.block_size);
    const long long state_bytes = (long long)e.model().state_bytes_per_seq() * sc.max_running;
    const long long full = (long long)sc.max_running * ((e.config().n_ctx + sc.block_size - 1) / sc.block_size);
    const long long by_mem = block_bytes == 0 ? 0 : std::max(0LL, (long long)(*kv_mem << 20) - state_bytes) / (long long)block_bytes;
    auto blocks = a.integer("--kv-blocks", std::min(full, by_mem), 1, 1 << 24);
    if (!blocks) return report(blocks.error());
    if (a.has("--kv-mem") && by_mem < 1)
      return report(usage_error("--kv-mem " + std::to_string(*kv_mem) + " MiB holds no KV block" +
                                (state_bytes > 0 ? " after the recurrent state of " + std::to_string(sc.max_running) +
                                                       " sequences (" + std::to_string(state_bytes >> 20) + " MiB)"
                                                 : std::string())));
    sc.n_blocks = (int)(a.has("--kv-mem") ? by_mem : *blocks);
    // The pool is made resident at start: refuse one the machine cannot hold instead of being
    // killed for memory while touching it.
    const double pool_mib = ((double)sc.n_blocks * block_bytes + state_bytes) / (1 << 20);
    const double phys_mib = (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / (1 << 20);
    if (phys_mib > 0 && pool_mib > 0.8 * phys_mib)
      return report(usage_error("a KV pool of " + std::to_string(sc.n_blocks) + " blocks needs " +
                                std::to_string((long long)pool_mib) + " MiB, more than 80% of this machine's " +
                                std::to_string((long long)phys_mib) + " MiB (lower --kv-blocks or --kv-mem)"));
  }
  ServeMetrics metrics;
  Scheduler sched(e, sc, metrics);
  ApiOptions ao;
  ao.model_id = model_id_of(e.config().model_path);
  ao.api_key = api_key;
  OpenAiApi api(e, sched, metrics, ao);
  HttpServerOptions ho;
  ho.host = a.str("--host", "127.0.0.1");
  ho.port = (int)*port;
  ho.max_body = (size_t)*max_body;
  HttpServer http(ho, [&](const HttpRequest& r, const std::shared_ptr<Exchange>& x) { api.handle(r, x); },
                  [&](int status) { metrics.count_status(status); });
  auto bound = http.listen();
  if (!bound) return report(bound.error());
  const int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  std::thread drainer;
  int signals = 0;
  http.set_signal_handler(sfd, [&](int sig) {
    if (signals++ > 0) {  // a second signal: stop now
      http.stop(0.5);
      return;
    }
    std::fprintf(stderr, "ouro serve: %s: finishing running requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    api.shutting_down();
    http.stop_accepting();
    drainer = std::thread([&] {
      sched.drain(10.0);
      http.stop(5.0);
    });
  });
  std::fprintf(stderr, "ouro serve: model %s, %d threads, ctx %d, max batch %d, %d KV blocks of %d (%.0f MiB)%s\n",
               ao.model_id.c_str(), e.config().threads, e.config().n_ctx, sc.max_running, sc.n_blocks, sc.block_size,
               (double)sc.n_blocks * PagedKvCache::bytes_per_block(e.model().kv_layout(), e.kv_spec(), sc.block_size) / (1 << 20),
               e.model().state_bytes_per_seq() == 0 ? "" :
               (", recurrent state " + std::to_string(e.model().state_bytes_per_seq() >> 10) + " KiB per sequence").c_str());
  std::fprintf(stderr, "ouro serve: listening on http://%s:%d\n", ho.host.find(':') != std::string::npos ? ("[" + ho.host + "]").c_str() : ho.host.c_str(), *bound);
  std::fflush(stderr);
  http.run();
  if (drainer.joinable()) drainer.join();
  sched.drain(0.0);
  close(sfd);
  if (Status s = finish_trace(a, e); !s) return report(s.error());
  std::fprintf(stderr, "ouro serve: stopped\n");
  return 0;
}

}  // namespace ouro
