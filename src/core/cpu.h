// CPU feature detection and the kernel family (ISA) chosen once at start-up.
#pragma once
#include <string>

namespace ouro {

enum class Isa { kScalar, kAvx2, kAvx512 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
  std::string model_name;
  std::string flags_string() const;  // e.g. "avx2 fma f16c avx512f ..."
};

const CpuFeatures& cpu_features();
Isa best_isa();
const char* isa_name(Isa isa);
// Parses "auto|avx512|avx2|scalar"; returns false on an unknown name.
bool parse_isa(const std::string& s, Isa* out);
// True when the CPU can run kernels of this family (what the hardware has, whatever OURO_ISA says).
bool cpu_supports(Isa isa);
// True when this process may run kernels of this family: the CPU supports it and it is not above
// the cap set by the launch setting OURO_ISA (auto|avx512|avx2|scalar; unset or "auto" = no cap).
// OURO_ISA=avx2 makes an AVX-512 host choose, and allow, only what an AVX2-only host would.
bool isa_supported(Isa isa);
// Why this process may not run the family: the CPU lacks it, or OURO_ISA caps it (for errors).
std::string isa_refusal(Isa isa);
// Empty when OURO_ISA is unset or valid, else a message naming the bad value.
std::string isa_env_problem();

}  // namespace ouro
