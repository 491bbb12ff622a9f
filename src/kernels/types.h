// Tensor element types as GGUF stores them, their block layouts, and scalar dequantization
// (the reference every fast path is tested against). One source of truth for block sizes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ouro {

enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14, kBF16 = 30,
};

struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210);

// Dequantizes n elements (a multiple of the block size) starting at block-aligned `src`.
using DequantRowFn = void (*)(const void* src, float* dst, int64_t n);

struct TypeTraits {
  const char* name;
  int block_size;    // elements per block
  int block_bytes;   // bytes per block
  DequantRowFn dequant_row;
};

// nullptr when the type is not supported by Ouro.
const TypeTraits* type_traits(GgmlType t);
// A printable name for any ggml type id, supported or not ("IQ2_XXS", "unknown(99)").
const char* ggml_type_name_any(uint32_t id);
inline size_t row_bytes(GgmlType t, int64_t n) {
  const TypeTraits* tt = type_traits(t);
  return (size_t)(n / tt->block_size) * tt->block_bytes;
}

// Q4_K's packed 6-bit scale and min of sub-block j (0..7).
void q4k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m);

}  // namespace ouro
