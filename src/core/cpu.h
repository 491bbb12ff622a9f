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
// True when the CPU can run kernels of this family.
bool isa_supported(Isa isa);

}  // namespace ouro
