// Test tool: reads raw GGUF blocks of a given type from stdin, writes the dequantized float32
// values (scalar reference) and, for types with an int8 packed layout, the values as repacked by
// pack_matrix, to stdout. Used by tests/oracle/test_dequant.py against gguf.quants.dequantize.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/types.h"

using namespace ouro;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ouro_dequant_tool TYPE_ID ROW_ELEMENTS ref|packed < blocks > floats\n");
    return 2;
  }
  const GgmlType type = (GgmlType)std::atoi(argv[1]);
  const int64_t cols = std::atoll(argv[2]);
  const TypeTraits* tt = type_traits(type);
  if (!tt || cols <= 0 || cols % tt->block_size) { std::fprintf(stderr, "bad type or row size\n"); return 2; }
  std::vector<uint8_t> in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const size_t rb = row_bytes(type, cols);
  if (in.size() % rb) { std::fprintf(stderr, "input is not a whole number of rows\n"); return 2; }
  const int64_t rows = in.size() / rb;
  std::vector<float> out(rows * cols);
  if (!std::strcmp(argv[3], "ref")) {
    for (int64_t r = 0; r < rows; ++r) tt->dequant_row(in.data() + r * rb, out.data() + r * cols, cols);
  } else {
    PackedMatrix m = pack_matrix(type, in.data(), cols, rows);
    if (m.kind == PackedKind::kRows) { std::fprintf(stderr, "type has no packed layout\n"); return 2; }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) out[r * cols + k] = m.value(r, k);
  }
  std::fwrite(out.data(), sizeof(float), out.size(), stdout);
  return 0;
}
