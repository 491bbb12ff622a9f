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

Expected<NpyF32> read_npy_f32(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return runtime_error(path + ": cannot read: " + std::strerror(errno));
  std::string bytes;
  char buf[65536];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, got);
  std::fclose(f);
  auto bad = [&](const std::string& why) { return runtime_error(path + ": not a float32 .npy: " + why); };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) return bad("bad magic");
  const int major = (unsigned char)bytes[6];
  size_t hl, off;
  if (major == 1) {
    hl = (unsigned char)bytes[8] | (size_t)(unsigned char)bytes[9] << 8;
    off = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    hl = 0;
    for (int i = 0; i < 4; ++i) hl |= (size_t)(unsigned char)bytes[8 + i] << (8 * i);
    off = 12;
  } else {
    return bad("unknown format version " + std::to_string(major));
  }
  if (off + hl > bytes.size()) return bad("truncated header");
  const std::string header = bytes.substr(off, hl);
  if (header.find("'<f4'") == std::string::npos) return bad("dtype is not '<f4'");
  if (header.find("'fortran_order': False") == std::string::npos) return bad("not C order");
  const size_t sp = header.find("'shape': (");
  const size_t se = sp == std::string::npos ? sp : header.find(')', sp);
  if (se == std::string::npos) return bad("no shape");
  NpyF32 r;
  size_t n = 1;
  const std::string dims = header.substr(sp + 10, se - sp - 10);
  for (size_t i = 0; i < dims.size();) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i >= dims.size()) break;
    size_t v = 0, j = i;
    while (j < dims.size() && dims[j] >= '0' && dims[j] <= '9') {
      if (v > (size_t(1) << 40)) return bad("absurd shape");
      v = v * 10 + (size_t)(dims[j] - '0');
      ++j;
    }
    if (j == i) return bad("bad shape");
    r.shape.push_back(v);
    if (v && n > (size_t(1) << 40) / v) return bad("absurd shape");
    n *= v;
    i = j;
  }
  const size_t data_off = off + hl;
  if (bytes.size() - data_off != n * 4) return bad("data size does not match the shape");
  r.data.resize(n);
  if (n) std::memcpy(r.data.data(), bytes.data() + data_off, n * 4);
  return r;
}

}  // namespace ouro
