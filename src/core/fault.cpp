#include "core/fault.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <algorithm>
#include <fcntl.h>
#include <unistd.h>

namespace ouro::fault {

namespace {

Config parse_env() {
  Config c;
  const char* v = std::getenv("OURO_FAULT");
  if (!v || !*v) return c;
  std::string s(v);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    if (item == "crash") {
      c.crash = true;
    } else if (item == "hang") {
      c.hang = true;
    } else if (item.rfind("memo:", 0) == 0 && item.size() > 5) {
      c.memo_dir = item.substr(5);
    } else if (item == "skiplayer:seen") {
      c.skip_seen = true;
    } else if (item == "memolearn") {
      c.memo_learn = true;
    } else if (item == "overthread") {
      c.overthread = true;
    } else if (item.rfind("inflate:", 0) == 0) {
      const size_t colon = item.find(':', 8);
      const std::string where = colon == std::string::npos ? "" : item.substr(8, colon - 8);
      char* endp = nullptr;
      const double f = colon == std::string::npos ? -1 : std::strtod(item.c_str() + colon + 1, &endp);
      if ((where != "bench" && where != "worker" && where != "microbench" && where != "all") || !endp || *endp || !(f > 0 && f < 1000)) {
        std::fprintf(stderr, "ouro: ignoring OURO_FAULT item '%s' (expected inflate:bench|worker|microbench|all:FACTOR)\n", item.c_str());
        continue;
      }
      c.inflate_where = where;
      c.inflate = f;
    } else if (item.rfind("flaky:", 0) == 0) {
      const size_t colon = item.find(':', 6);
      const std::string how = colon == std::string::npos ? "" : item.substr(colon + 1);
      const int n = colon == std::string::npos ? 0 : std::atoi(item.substr(6, colon - 6).c_str());
      if (n < 1 || (how != "crash" && how != "hang")) {
        std::fprintf(stderr, "ouro: ignoring OURO_FAULT item '%s' (expected flaky:N:crash|hang)\n", item.c_str());
        continue;
      }
      c.flaky_n = n;
      c.flaky_hang = how == "hang";
    } else if (item.rfind("slow:", 0) == 0) {
      // slow:OP:PCT or slow:OP:PCT:WHEN
      const size_t colon = item.find(':', 5);
      const size_t colon2 = colon == std::string::npos ? colon : item.find(':', colon + 1);
      const std::string when = colon2 == std::string::npos ? "" : item.substr(colon2 + 1);
      const std::string num = colon == std::string::npos ? "" : item.substr(colon + 1, colon2 == std::string::npos ? std::string::npos : colon2 - colon - 1);
      char* endp = nullptr;
      const double pct = num.empty() ? -1 : std::strtod(num.c_str(), &endp);
      const bool when_ok = colon2 == std::string::npos || when == "prefill" || when == "decode" || when == "t1";
      if (colon == std::string::npos || colon == 5 || !endp || *endp || !(pct > 0 && pct <= 1000) || !when_ok) {
        std::fprintf(stderr, "ouro: ignoring OURO_FAULT item '%s' (expected slow:OP:PERCENT[:prefill|decode|t1])\n", item.c_str());
        continue;
      }
      c.slow_op = item.substr(5, colon - 5);
      c.slow_pct = pct;
      c.slow_when = when;
    } else if (item.rfind("repeat:", 0) == 0 || item.rfind("truncate:attention:", 0) == 0) {
      // repeat:OP:N, truncate:attention:N
      const bool repeat = item[0] == 'r';
      const size_t colon = item.rfind(':');
      const std::string op = item.substr(repeat ? 7 : 9, colon - (repeat ? 7 : 9));
      char* endp = nullptr;
      const long n = std::strtol(item.c_str() + colon + 1, &endp, 10);
      if (op.empty() || op.find(':') != std::string::npos || !endp || *endp || endp == item.c_str() + colon + 1 ||
          !(n >= 1 && n <= 1000000)) {
        std::fprintf(stderr, "ouro: ignoring OURO_FAULT item '%s' (expected repeat:OP:N or truncate:attention:N)\n", item.c_str());
        continue;
      }
      if (repeat) {
        c.repeat_op = op;
        c.repeat_n = (int)n;
      } else {
        c.attn_key_limit = (int)n;
      }
    } else if (item.rfind("badscale:", 0) == 0) {
      const size_t colon = item.find(':', 9);
      const std::string what = colon == std::string::npos ? "" : item.substr(9, colon - 9);
      char* endp = nullptr;
      const double f = colon == std::string::npos ? -1 : std::strtod(item.c_str() + colon + 1, &endp);
      if ((what != "kv" && what != "w8a8") || !endp || *endp || !(f > 0 && f < 1000)) {
        std::fprintf(stderr, "ouro: ignoring OURO_FAULT item '%s' (expected badscale:kv|w8a8:FACTOR)\n", item.c_str());
        continue;
      }
      (what == "kv" ? c.kv_scale : c.w8a8_scale) = (float)f;
    } else if (item.rfind("delay:", 0) == 0) {
      const size_t colon = item.find(':', 6);
      char* endp = nullptr;
      const double us = colon == std::string::npos ? -1 : std::strtod(item.c_str() + colon + 1, &endp);
      if (colon == std::string::npos || colon == 6 || !endp || *endp || !(us >= 0 && us <= 1e7)) {
        std::fprintf(stderr, "ouro: ignoring OURO_FAULT item '%s' (expected delay:OP:MICROSECONDS)\n", item.c_str());
        continue;
      }
      c.delay_op = item.substr(6, colon - 6);
      c.delay_us = us;
    } else {
      std::fprintf(stderr, "ouro: ignoring unknown OURO_FAULT item '%s'\n", item.c_str());
      continue;
    }
    c.active = true;
  }
  return c;
}

const Config g_config = parse_env();

}  // namespace

bool g_active = g_config.active;
bool g_skip_last_layer = false;
int g_batch_tokens = 0, g_pool_threads = 0;

const Config& config() { return g_config; }

namespace {
// Spin rather than sleep: a sleep's wake-up latency is coarse and would also free the core.
void spin_until(std::chrono::steady_clock::time_point until) {
  while (std::chrono::steady_clock::now() < until) {
  }
}
}  // namespace

void op_hook_slow(const char* op) {
  using Clock = std::chrono::steady_clock;
  if (!g_config.delay_op.empty() && std::strcmp(op, g_config.delay_op.c_str()) == 0)
    spin_until(Clock::now() + std::chrono::nanoseconds((long long)(g_config.delay_us * 1e3)));
  if (!g_config.slow_op.empty() && std::strcmp(op, g_config.slow_op.c_str()) == 0) {
    // The forward pass runs on one thread at a time; the first call only starts the clock.
    static Clock::time_point last{};
    // Only in passes of the asked shape; a pass of another shape restarts the clock, so its time is
    // never charged to the next matching call.
    const std::string& w = g_config.slow_when;
    if ((w == "prefill" && g_batch_tokens <= 1) || (w == "decode" && g_batch_tokens != 1) || (w == "t1" && g_pool_threads != 1)) {
      last = Clock::time_point{};
      return;
    }
    const Clock::time_point now = Clock::now();
    if (last != Clock::time_point{})
      spin_until(now + std::chrono::duration_cast<Clock::duration>((now - last) * (g_config.slow_pct / 100.0)));
    last = Clock::now();
  }
}

int repeats_slow(const char* op) {
  return !g_config.repeat_op.empty() && std::strcmp(op, g_config.repeat_op.c_str()) == 0 ? g_config.repeat_n : 1;
}

double inflation(const char* where) {
  if (!g_active || g_config.inflate_where.empty()) return 1;
  return g_config.inflate_where == "all" || g_config.inflate_where == where ? g_config.inflate : 1;
}

int pool_threads(int requested) {
  if (!g_active || !g_config.overthread) return requested;
  return std::max(requested, (int)std::thread::hardware_concurrency());
}

void at_run_start() {
  if (!g_active || g_config.flaky_n <= 0) return;
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/ouro-fault-runs";
  // One byte appended per run; the file's size is the run's number (O_APPEND keeps it atomic).
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  (void)!write(fd, "x", 1);
  const off_t n = lseek(fd, 0, SEEK_END);
  close(fd);
  if (n != g_config.flaky_n) return;
  if (!g_config.flaky_hang) std::abort();
  for (;;) pause();
}

void start_hook_slow() {
  if (g_config.crash) std::abort();
  if (g_config.hang)
    for (;;) pause();
}

}  // namespace ouro::fault
