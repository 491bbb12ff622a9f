#include "core/cpu.h"

#include <cpuid.h>
#include <cstdlib>
#include <fstream>

namespace ouro {

static CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.fma = c & (1u << 12);
    f.f16c = c & (1u << 29);
  }
  const bool osxsave = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27));
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = ((unsigned long long)hi << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = os_avx && (b & (1u << 5));
    f.avx512f = os_avx512 && (b & (1u << 16));
    f.avx512dq = os_avx512 && (b & (1u << 17));
    f.avx512bw = os_avx512 && (b & (1u << 30));
    f.avx512vl = os_avx512 && (b & (1u << 31));
    f.avx512vnni = os_avx512 && (c & (1u << 11));
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = os_avx512 && (a & (1u << 5));
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) f.model_name = line.substr(p + 2);
      break;
    }
  }
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string CpuFeatures::flags_string() const {
  std::string s;
  auto add = [&](bool on, const char* n) { if (on) { if (!s.empty()) s += ' '; s += n; } };
  add(avx2, "avx2"); add(fma, "fma"); add(f16c, "f16c"); add(avx512f, "avx512f");
  add(avx512bw, "avx512bw"); add(avx512vl, "avx512vl"); add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni"); add(avx512bf16, "avx512bf16");
  return s;
}

bool cpu_supports(Isa isa) {
  const auto& f = cpu_features();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return f.avx2 && f.fma && f.f16c;
    case Isa::kAvx512: return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
  }
  return false;
}

namespace {
// The cap from OURO_ISA, read once; an unknown value caps nothing here and is reported by
// isa_env_problem() (the CLI refuses to start with it).
struct EnvCap {
  bool set = false, valid = true;
  Isa cap = Isa::kAvx512;
  std::string raw;
};
const EnvCap& env_cap() {
  static const EnvCap c = [] {
    EnvCap e;
    const char* v = std::getenv("OURO_ISA");
    if (!v || !*v || std::string(v) == "auto") return e;
    e.raw = v;
    if (e.raw == "avx512") e.cap = Isa::kAvx512;
    else if (e.raw == "avx2") e.cap = Isa::kAvx2;
    else if (e.raw == "scalar") e.cap = Isa::kScalar;
    else e.valid = false;
    e.set = e.valid;
    return e;
  }();
  return c;
}
}  // namespace

bool isa_supported(Isa isa) {
  const EnvCap& c = env_cap();
  if (c.set && (int)isa > (int)c.cap) return false;
  return cpu_supports(isa);
}

std::string isa_refusal(Isa isa) {
  if (!cpu_supports(isa)) return std::string("this CPU cannot run the ") + isa_name(isa) + " kernels";
  return std::string("OURO_ISA=") + env_cap().raw + " does not allow the " + isa_name(isa) + " kernels";
}

std::string isa_env_problem() {
  const EnvCap& c = env_cap();
  if (c.valid) return "";
  return "environment OURO_ISA: '" + c.raw + "' is not one of auto, avx512, avx2, scalar";
}

Isa best_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

bool parse_isa(const std::string& s, Isa* out) {
  if (s == "auto") { *out = best_isa(); return true; }
  if (s == "avx512") { *out = Isa::kAvx512; return true; }
  if (s == "avx2") { *out = Isa::kAvx2; return true; }
  if (s == "scalar") { *out = Isa::kScalar; return true; }
  return false;
}

}  // namespace ouro
