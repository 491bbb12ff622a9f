// The registry of architectures: general.architecture -> loader.
#include "model/model.h"

#include <cstdio>

#include "model/kimi_linear.h"
#include "model/llama.h"

namespace ouro {

namespace {

using Loader = Expected<std::unique_ptr<Model>> (*)(std::unique_ptr<GgufFile>, const WeightRequest&, Isa, ThreadPool&);

struct Architecture {
  const char* name;
  Loader load;
};

const Architecture kArchitectures[] = {
    {"llama", &LlamaModel::load},
    {"kimi-linear", &KimiLinearModel::load},
};

}  // namespace

void note_w8a8_kernel(Isa isa) {
  static bool said = false;
  if (isa != Isa::kAvx512 && !said)
    std::fprintf(stderr, "ouro: W8A8 runs on the %s kernel (no AVX-512 VNNI in use: slower than on a VNNI CPU)\n", isa_name(isa));
  said = true;
}

std::vector<std::string> Model::architectures() {
  std::vector<std::string> out;
  for (const Architecture& a : kArchitectures) out.push_back(a.name);
  return out;
}

Expected<std::unique_ptr<Model>> Model::load(const std::string& path, const WeightRequest& wr, Isa isa,
                                             ThreadPool& pool) {
  auto fr = GgufFile::open(path);
  if (!fr) return fr.error();
  auto arch = (*fr)->get_string("general.architecture");
  if (!arch) return arch.error();
  for (const Architecture& a : kArchitectures)
    if (*arch == a.name) return a.load(std::move(*fr), wr, isa, pool);
  std::string known;
  for (const Architecture& a : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(a.name);
  return runtime_error(path + ": unsupported architecture '" + *arch + "' (supported: " + known + ")");
}

}  // namespace ouro
