// Writes float32 arrays as NumPy .npy (format 1.0, little-endian, C order).
#pragma once
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro {
Status write_npy_f32(const std::string& path, const float* data, const std::vector<size_t>& shape);

struct NpyF32 {
  std::vector<size_t> shape;
  std::vector<float> data;
};
// Reads a little-endian float32, C-order .npy (format 1.x or 2.x); anything else is an error
// naming the file and what is wrong.
Expected<NpyF32> read_npy_f32(const std::string& path);
}
