// The machine probe: sustained memory bandwidth (read, STREAM triad) and peak compute (FP32 FMA,
// BF16 dot, INT8 dot) for 1..N threads, each figure the median of several timed passes.
//
// Memory: one buffer of three arrays of doubles, together at least 240 MiB and 4x the L3 caches
//   (at most 1 GiB).
//   read:  every byte of the buffer summed with 256-bit loads; bytes = buffer size.
//   triad: a[i] = b[i] + s * c[i] over doubles; bytes counted as STREAM does, 3 x 8 per element
//          (two arrays read, one written; the write-allocate read of `a` is not counted).
// Compute: independent accumulator chains on registers (no memory traffic), one loop per thread:
//   fp32: vfmadd on zmm (AVX-512F) or ymm (AVX2);  2 flops per lane.
//   bf16: vdpbf16ps on zmm (AVX512_BF16 only);     2 flops per bf16 product.
//   int8: vpdpbusd on zmm (AVX512_VNNI), else the AVX2 vpmaddubsw + vpmaddwd + vpaddd sequence the
//         AVX2 kernels use;                         2 ops per u8 x s8 product.
// Each measurement runs one untimed warm-up pass, then `passes` timed ones on threads that stay
// alive between passes (thread start-up is not timed); a pass lasts from the release of all
// threads until the last one finishes.
#include "lab/probe.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/cpu.h"
#include "lab/probe_kernels.h"

namespace ouro {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFormatVersion = 1;
constexpr int kMemPasses = 9;
constexpr int kComputePasses = 3;
constexpr double kComputePassSeconds = 0.03;  // per thread and pass

// Written by every measurement so the compiler keeps the work.
std::atomic<double> g_sink{0};

void spin_pause(int& spins) {
  if (++spins < 4096) {
    _mm_pause();
  } else {
    spins = 0;
    std::this_thread::yield();  // a thread that lost its core (more threads than free CPUs)
  }
}

// Runs work(t, nt) on nt threads (the caller is thread 0): one warm-up pass, then `passes`
// timed passes. Returns the seconds of each timed pass.
template <class F>
std::vector<double> timed_passes(int nt, int passes, F&& work) {
  std::atomic<int> ready{0}, done{0}, go{-1};
  std::atomic<bool> abandon{false};
  std::vector<std::thread> helpers;
  helpers.reserve(nt - 1);
  try {
    for (int t = 1; t < nt; ++t)
      helpers.emplace_back([&, t] {
        ready.fetch_add(1);
        for (int p = 0; p <= passes; ++p) {
          int spins = 0;
          while (go.load(std::memory_order_acquire) < p) {
            if (abandon.load(std::memory_order_relaxed)) return;
            spin_pause(spins);
          }
          work(t, nt);
          done.fetch_add(1, std::memory_order_acq_rel);
        }
      });
  } catch (...) {  // thread creation failed: release the started helpers, report the error
    abandon.store(true);
    for (auto& h : helpers) h.join();
    throw;
  }
  int spins = 0;
  while (ready.load() < nt - 1) spin_pause(spins);
  std::vector<double> secs;
  for (int p = 0; p <= passes; ++p) {
    done.store(0);
    const auto t0 = Clock::now();
    go.store(p, std::memory_order_release);
    work(0, nt);
    while (done.load(std::memory_order_acquire) < nt - 1) spin_pause(spins);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (p > 0) secs.push_back(s);
  }
  for (auto& h : helpers) h.join();
  return secs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Thread counts to measure: all of 1..max up to 8, else powers of two and max.
std::vector<int> thread_counts(int max_threads) {
  std::vector<int> v;
  if (max_threads <= 8) {
    for (int t = 1; t <= max_threads; ++t) v.push_back(t);
  } else {
    for (int t = 1; t < max_threads; t *= 2) v.push_back(t);
    v.push_back(max_threads);
  }
  return v;
}

// [begin, end) of thread t's share of n elements, boundaries multiples of `align` elements.
void share(size_t n, int t, int nt, size_t align, size_t* b, size_t* e) {
  const size_t units = n / align;
  *b = units * t / nt * align;
  *e = t + 1 == nt ? n : units * (t + 1) / nt * align;
}

// ---- memory ----

struct MemBuffers {
  double* base = nullptr;
  size_t n = 0;  // doubles per array; arrays a, b, c follow each other
  double* a() const { return base; }
  double* b() const { return base + n; }
  double* c() const { return base + 2 * n; }
  size_t bytes() const { return 3 * n * sizeof(double); }
};

// Total L3 over its instances (sysfs; a VM's CPUID, which sysconf reads, can report the host's).
size_t l3_bytes() {
  std::map<std::string, size_t> instances;  // shared_cpu_list -> size
  for (int cpu = 0; cpu < 4096; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/";
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) break;
    for (int idx = 0; idx < 8; ++idx) {
      const std::string d = dir + "index" + std::to_string(idx) + "/";
      std::ifstream lv(d + "level"), sz(d + "size"), sh(d + "shared_cpu_list");
      int level = 0;
      std::string size, shared;
      if (!(lv >> level)) break;
      if (level != 3 || !(sz >> size) || !(sh >> shared)) continue;
      size_t v = std::strtoull(size.c_str(), nullptr, 10);
      if (size.back() == 'K') v <<= 10;
      else if (size.back() == 'M') v <<= 20;
      instances[shared] = v;
    }
  }
  size_t total = 0;
  for (const auto& [k, v] : instances) total += v;
  if (total == 0) {
    const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    total = v > 0 ? (size_t)v : 0;
  }
  return total;
}

long long read_range(const uint8_t* p, size_t b, size_t e) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = b;
  for (; i + 128 <= e; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  long long s = _mm256_extract_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)), 0);
  for (; i < e; ++i) s += p[i];
  return s;
}

void triad_range(double* a, const double* b, const double* c, double s, size_t i0, size_t i1) {
  const __m256d vs = _mm256_set1_pd(s);
  size_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    _mm256_store_pd(a + i, _mm256_add_pd(_mm256_load_pd(b + i), _mm256_mul_pd(vs, _mm256_load_pd(c + i))));
    _mm256_store_pd(a + i + 4, _mm256_add_pd(_mm256_load_pd(b + i + 4), _mm256_mul_pd(vs, _mm256_load_pd(c + i + 4))));
  }
  for (; i < i1; ++i) a[i] = b[i] + s * c[i];
}

double measure_read(const MemBuffers& m, int nt) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(m.base);
  std::vector<long long> part(nt * 8);
  auto secs = timed_passes(nt, kMemPasses, [&](int t, int n) {
    size_t b, e;
    share(m.bytes(), t, n, 128, &b, &e);
    part[t * 8] += read_range(p, b, e);
  });
  long long s = 0;
  for (long long v : part) s += v;
  g_sink.store((double)s, std::memory_order_relaxed);
  return (double)m.bytes() / median(secs) / 1e9;
}

double measure_triad(const MemBuffers& m, int nt) {
  constexpr double kScalar = 3.0;
  auto secs = timed_passes(nt, kMemPasses, [&](int t, int n) {
    size_t b, e;
    share(m.n, t, n, 8, &b, &e);
    triad_range(m.a(), m.b(), m.c(), kScalar, b, e);
  });
  // b = 1, c = 2: every a[i] is exactly 7.
  for (size_t i = 0; i < m.n; i += m.n / 97 + 1) OURO_ASSERT(m.a()[i] == 7.0);
  OURO_ASSERT(m.a()[m.n - 1] == 7.0);
  return 3.0 * sizeof(double) * (double)m.n / median(secs) / 1e9;
}

// ---- compute ----

float fp32_fma_avx2(long iters) {
  using namespace probe_detail;
  __m256 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_set1_ps(0.5f + 0.01f * i);
  __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (long it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+x"(a));
    __asm__ volatile("" : "+x"(b));
#pragma GCC unroll 16
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

int int8_dot_avx2(long iters) {
  using namespace probe_detail;
  __m256i acc[kMaddubsChains];
  for (int i = 0; i < kMaddubsChains; ++i) acc[i] = _mm256_setzero_si256();
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  const __m256i ones = _mm256_set1_epi16(1);
  for (long it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+x"(b));
#pragma GCC unroll 16
    for (int i = 0; i < kMaddubsChains; ++i) {
      // A fresh-looking `a` per chain: otherwise the compiler computes the product once for all.
      __asm__ volatile("" : "+x"(a));
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    }
  }
  __m256i s = acc[0];
  for (int i = 1; i < kMaddubsChains; ++i) s = _mm256_add_epi32(s, acc[i]);
  return _mm256_extract_epi32(s, 0);
}

// Peak of `fn` (ops_per_iter operations per iteration) in G ops/s for each thread count.
template <class Fn>
std::map<int, double> measure_compute(Fn fn, double ops_per_iter, const std::vector<int>& counts) {
  // Calibrate on one thread: iterations for about kComputePassSeconds.
  long iters = 1 << 12;
  double s = 0;
  for (;;) {
    const auto t0 = Clock::now();
    g_sink.store((double)fn(iters), std::memory_order_relaxed);
    s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0.004 || iters > (1L << 40)) break;
    iters *= 4;
  }
  iters = std::max(1L, (long)((double)iters * kComputePassSeconds / s));
  std::map<int, double> out;
  for (int nt : counts) {
    std::vector<double> part(nt * 8);
    auto secs = timed_passes(nt, kComputePasses, [&](int t, int) { part[t * 8] += (double)fn(iters); });
    double sum = 0;
    for (double v : part) sum += v;
    g_sink.store(sum, std::memory_order_relaxed);
    out[nt] = (double)nt * (double)iters * ops_per_iter / median(secs) / 1e9;
  }
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double best_of(const std::map<int, double>& m) {
  double b = 0;
  for (const auto& [t, v] : m) b = std::max(b, v);
  return b;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const bool keep = std::isalnum((unsigned char)ch) || ch == '.' || ch == '_';
    if (keep) out += ch;
    else if (!out.empty() && out.back() != '-') out += '-';
    if (out.size() >= 96) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown-cpu" : out;
}

}  // namespace

// ---- ProbeResult ----

double ProbeResult::best_read_gb_s() const { return best_of(read_gb_s); }
double ProbeResult::best_fp32_gflops() const { return best_of(fp32_gflops); }
double ProbeResult::best_int8_gops() const { return best_of(int8_gops); }

std::string ProbeResult::to_json() const {
  auto per_thread = [](const std::map<int, double>& m) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [t, v] : m) o[std::to_string(t)] = v;
    return o;
  };
  nlohmann::json j = {{"version", kFormatVersion},
                      {"cpu_model", cpu_model},
                      {"cpu_features", cpu_features},
                      {"max_threads", max_threads},
                      {"buffer_mib", buffer_mib},
                      {"fp32_kernel", fp32_kernel},
                      {"bf16_kernel", bf16_kernel},
                      {"int8_kernel", int8_kernel},
                      {"read_gb_s", per_thread(read_gb_s)},
                      {"triad_gb_s", per_thread(triad_gb_s)},
                      {"fp32_gflops", per_thread(fp32_gflops)},
                      {"bf16_gflops", per_thread(bf16_gflops)},
                      {"int8_gops", per_thread(int8_gops)},
                      {"measured_at", measured_at}};
  return j.dump();
}

Expected<ProbeResult> ProbeResult::from_json(const std::string& text, const std::string& source) {
  auto bad = [&](const std::string& why) {
    return runtime_error(source + ": not a valid probe result: " + why);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("malformed JSON (") + e.what() + ")");
  }
  if (!j.is_object()) return bad("expected a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer()) return bad("field 'version' is missing or not an integer");
  if (j["version"].get<long long>() != kFormatVersion)
    return bad("format version " + j["version"].dump() + " (expected " + std::to_string(kFormatVersion) + ")");
  ProbeResult r;
  auto str = [&](const char* k, std::string* out, bool required) -> std::optional<Error> {
    if (!j.contains(k)) {
      if (required) return bad(std::string("field '") + k + "' is missing");
      return std::nullopt;
    }
    if (!j[k].is_string()) return bad(std::string("field '") + k + "' is not a string");
    *out = j[k].get<std::string>();
    return std::nullopt;
  };
  auto map = [&](const char* k, std::map<int, double>* out, bool required) -> std::optional<Error> {
    if (!j.contains(k)) {
      if (required) return bad(std::string("field '") + k + "' is missing");
      return std::nullopt;
    }
    const auto& o = j[k];
    if (!o.is_object()) return bad(std::string("field '") + k + "' is not an object of thread count -> figure");
    if (required && o.empty()) return bad(std::string("field '") + k + "' is empty");
    for (const auto& [key, v] : o.items()) {
      const bool digits = !key.empty() && key.size() <= 7 && std::all_of(key.begin(), key.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; });
      const int t = digits ? std::atoi(key.c_str()) : 0;
      if (t < 1) return bad(std::string("field '") + k + "': '" + key + "' is not a thread count");
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        return bad(std::string("field '") + k + "': the figure for " + key + " threads is not a positive number");
      (*out)[t] = v.get<double>();
    }
    return std::nullopt;
  };
  for (auto e : {str("cpu_model", &r.cpu_model, true), str("cpu_features", &r.cpu_features, true),
                 str("measured_at", &r.measured_at, true), str("fp32_kernel", &r.fp32_kernel, false),
                 str("bf16_kernel", &r.bf16_kernel, false), str("int8_kernel", &r.int8_kernel, false),
                 map("read_gb_s", &r.read_gb_s, true), map("triad_gb_s", &r.triad_gb_s, true),
                 map("fp32_gflops", &r.fp32_gflops, true), map("bf16_gflops", &r.bf16_gflops, false),
                 map("int8_gops", &r.int8_gops, true)})
    if (e) return *e;
  if (!j.contains("max_threads") || !j["max_threads"].is_number_integer() || j["max_threads"].get<long long>() < 1 ||
      j["max_threads"].get<long long>() > (1 << 20))
    return bad("field 'max_threads' is missing or not a positive integer");
  r.max_threads = j["max_threads"].get<int>();
  if (j.contains("buffer_mib")) {
    if (!j["buffer_mib"].is_number() || j["buffer_mib"].get<double>() < 0) return bad("field 'buffer_mib' is not a number");
    r.buffer_mib = j["buffer_mib"].get<double>();
  }
  return r;
}

// ---- measuring ----

ProbeResult run_probe(int max_threads) {
  const CpuFeatures& f = cpu_features();
  ProbeResult r;
  r.cpu_model = f.model_name.empty() ? "unknown" : f.model_name;
  r.cpu_features = f.flags_string();
  r.max_threads = max_threads > 0 ? max_threads : std::max(1, (int)std::thread::hardware_concurrency());
  const std::vector<int> counts = thread_counts(r.max_threads);

  // Memory: three arrays, together >= 240 MiB and >= 4x L3, at most 2 GiB.
  {
    size_t total = std::max<size_t>((size_t)240 << 20, 4 * l3_bytes());
    total = std::min<size_t>(total, (size_t)2 << 30);
    MemBuffers m;
    m.n = total / 3 / sizeof(double) / 64 * 64;
    m.base = static_cast<double*>(std::aligned_alloc(64, m.bytes()));
    if (!m.base) throw std::bad_alloc();
    r.buffer_mib = (double)m.bytes() / (1 << 20);
    // First touch on the threads that will read it (where the OS places pages by first touch).
    timed_passes(r.max_threads, 0, [&](int t, int nt) {
      size_t b, e;
      share(m.n, t, nt, 8, &b, &e);
      std::fill(m.a() + b, m.a() + e, 0.0);
      std::fill(m.b() + b, m.b() + e, 1.0);
      std::fill(m.c() + b, m.c() + e, 2.0);
    });
    for (int nt : counts) {
      r.read_gb_s[nt] = measure_read(m, nt);
      r.triad_gb_s[nt] = measure_triad(m, nt);
    }
    std::free(m.base);
  }

  const bool avx512 = cpu_supports(Isa::kAvx512);  // the machine's ceiling, whatever OURO_ISA caps
  if (avx512) {
    r.fp32_kernel = "avx512 vfmadd231ps zmm";
    r.fp32_gflops = measure_compute(probe_detail::fp32_fma_avx512, probe_detail::kFp32Avx512Flops, counts);
  } else {
    r.fp32_kernel = "avx2 vfmadd231ps ymm";
    r.fp32_gflops = measure_compute(fp32_fma_avx2, probe_detail::kFp32Avx2Flops, counts);
  }
  if (avx512 && f.avx512bf16) {
    r.bf16_kernel = "avx512 vdpbf16ps zmm";
    r.bf16_gflops = measure_compute(probe_detail::bf16_dot_avx512, probe_detail::kBf16Avx512Flops, counts);
  }
  if (avx512) {  // includes AVX512_VNNI
    r.int8_kernel = "avx512 vpdpbusd zmm";
    r.int8_gops = measure_compute(probe_detail::int8_dot_avx512vnni, probe_detail::kInt8VnniOps, counts);
  } else {
    r.int8_kernel = "avx2 vpmaddubsw+vpmaddwd+vpaddd ymm";
    r.int8_gops = measure_compute(int8_dot_avx2, probe_detail::kInt8Avx2Ops, counts);
  }
  r.measured_at = utc_now();
  return r;
}

// ---- cache ----

std::string probe_cache_path() {
  std::string dir;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && xdg[0] == '/') dir = xdg;  // the XDG spec ignores relative paths
  else if (home && home[0]) dir = std::string(home) + "/.cache";
  else return "";
  return dir + "/ouro/probe-" + sanitize(cpu_features().model_name) + ".json";
}

Expected<ProbeResult> read_probe_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return runtime_error("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return runtime_error("cannot read " + path);
  return ProbeResult::from_json(ss.str(), path);
}

std::optional<ProbeResult> load_cached_probe() {
  const std::string path = probe_cache_path();
  if (path.empty()) return std::nullopt;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  auto r = read_probe_file(path);
  if (!r) return std::nullopt;
  const std::string model = cpu_features().model_name.empty() ? "unknown" : cpu_features().model_name;
  if (r->cpu_model != model) return std::nullopt;  // another CPU whose name sanitizes alike
  return std::move(*r);
}

Status save_probe_cache(const ProbeResult& r) {
  const std::string path = probe_cache_path();
  if (path.empty()) return runtime_error("no cache directory: neither XDG_CACHE_HOME nor HOME is set");
  std::error_code ec;
  const std::filesystem::path p(path);
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return runtime_error("cannot create " + p.parent_path().string() + ": " + ec.message());
  // Write a temporary file and rename it: a concurrent reader sees the old or the new file whole.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    out << r.to_json() << '\n';
    out.close();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return runtime_error("cannot write " + tmp);
    }
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return runtime_error("cannot write " + path + ": " + ec.message());
  }
  return Ok{};
}

}  // namespace ouro
