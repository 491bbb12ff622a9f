// Element types of the KV cache and their codecs (docs/quantization.md).
//
// A cached position of one layer is a row: K (or V) of n_heads heads of head_dim values each,
// encoded in one type, followed, for scaled types, by one f32 scale per head:
//   f32   4 bytes a value, no scale
//   bf16  2 bytes (the top half of the f32, rounded to nearest even), no scale
//   fp8   1 byte, OCP FP8 E4M3 (E4M3FN: bias 7, max 448, subnormals down to 2^-9, no inf, NaN =
//         s.1111.111); value = decode(code) * scale, scale = amax(head) / 448 per (token, head)
//   int8  1 byte, symmetric: value = q * scale, scale = amax(head) / 127 per (token, head)
// Encoding rounds to nearest even and saturates at the format's largest finite value; a NaN input
// stays NaN (fp8's NaN code), infinities saturate. K and V, and every layer, may use their own type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro {

enum class KvType : uint8_t { kF32, kBF16, kFP8, kInt8 };

const char* kv_type_name(KvType t);
// Accepts f32, bf16, fp8 (or fp8_e4m3), int8 (or i8). False for anything else.
bool parse_kv_type(const std::string& s, KvType* out);
constexpr size_t kv_elem_bytes(KvType t) { return t == KvType::kF32 ? 4 : t == KvType::kBF16 ? 2 : 1; }
constexpr bool kv_scaled(KvType t) { return t == KvType::kFP8 || t == KvType::kInt8; }
inline size_t kv_row_bytes(KvType t, int n_heads, int head_dim) {
  return (size_t)n_heads * head_dim * kv_elem_bytes(t) + (kv_scaled(t) ? (size_t)n_heads * 4 : 0);
}

// Scalar codecs (the reference the attention kernels are tested against).
uint8_t fp8_e4m3_encode(float x);
float fp8_e4m3_decode(uint8_t code);
uint16_t bf16_encode(float x);
constexpr float kFp8E4M3Max = 448.0f;

// One row: x[n_heads * head_dim] -> dst (kv_row_bytes bytes), and back.
void kv_encode_row(KvType t, const float* x, int n_heads, int head_dim, uint8_t* dst);
void kv_decode_row(KvType t, const uint8_t* src, int n_heads, int head_dim, float* out);

// The KV cache's types: per layer, for K and for V.
struct KvSpec {
  std::vector<KvType> k, v;
  bool uniform() const;
  std::string describe() const;  // "f32", "k=bf16,v=fp8", or the per-layer list "0-3:bf16,4-29:fp8"
  size_t bytes_per_token(int n_heads, int head_dim) const;  // K and V of every layer
};

// One layer range "N", "N-M", "N-" or "-M" (inclusive) inside [0, n_layer) -> [*lo, *hi].
Status parse_layer_range(const std::string& s, int n_layer, int* lo, int* hi);

// --kv and --kv-layers (docs/quantization.md):
//   kv:        "TYPE" (K and V) or "k=TYPE,v=TYPE" (either may be omitted: it stays f32)
//   kv_layers: comma-separated "RANGE:TYPE", "RANGE:k=TYPE" or "RANGE:v=TYPE", RANGE = N, N-M, N- or
//              -M (inclusive); overrides --kv for those layers. Ranges of one side may not overlap
//              and must lie inside [0, n_layer).
Expected<KvSpec> parse_kv_spec(const std::string& kv, const std::string& kv_layers, int n_layer);

}  // namespace ouro
