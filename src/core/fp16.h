// Half and bfloat16 conversions (bit-exact, scalar; F16C/AVX-512 paths convert in the kernels).
#pragma once
#include <cstdint>
#include <cstring>

namespace ouro {

inline float fp32_from_bits(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t fp32_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

// IEEE binary16 -> binary32, exact for every code (subnormals, inf, nan).
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {
    if (man == 0) return fp32_from_bits(sign);
    float v = (float)man * (1.0f / 16777216.0f);  // man * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return fp32_from_bits(sign | 0x7f800000u | (man << 13));
  return fp32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

// binary32 -> binary16, round to nearest even.
inline uint16_t fp32_to_fp16(float f) {
  uint32_t x = fp32_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
  if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00);  // rounds to inf
  if (absx < 0x38800000) {                                    // subnormal or zero in half
    float v = fp32_from_bits(absx) * 16777216.0f;               // scale by 2^24
    uint32_t m = (uint32_t)__builtin_nearbyintf(v);
    return (uint16_t)(sign | m);
  }
  uint32_t mant_odd = (absx >> 13) & 1;
  absx += 0xfff + mant_odd;
  return (uint16_t)(sign | ((absx - 0x38000000) >> 13));
}

inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits((uint32_t)h << 16); }

}  // namespace ouro
