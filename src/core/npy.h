// Writes float32 arrays as NumPy .npy (format 1.0, little-endian, C order).
#pragma once
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro {
Status write_npy_f32(const std::string& path, const float* data, const std::vector<size_t>& shape);
}
