#include "core/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ouro {

Status write_npy_f32(const std::string& path, const float* data, const std::vector<size_t>& shape) {
  std::string dims;
  size_t n = 1;
  for (size_t s : shape) { dims += std::to_string(s) + ", "; n *= s; }
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return runtime_error(path + ": cannot write: " + std::strerror(errno));
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const unsigned short hl = (unsigned short)header.size();
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(&hl, 2, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() && std::fwrite(data, 4, n, f) == n;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return runtime_error(path + ": write failed");
  return Ok{};
}

}  // namespace ouro
