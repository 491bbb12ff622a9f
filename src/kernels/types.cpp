#include "kernels/types.h"

#include <cstring>

#include "core/fp16.h"

namespace ouro {

namespace {

void dequant_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void dequant_f16(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t k = 0; k < n / 32; ++k) {
    const float d = fp16_to_fp32(b[k].d);
    for (int i = 0; i < 32; ++i) dst[k * 32 + i] = d * b[k].qs[i];
  }
}

void dequant_q4_0(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t k = 0; k < n / 32; ++k) {
    const float d = fp16_to_fp32(b[k].d);
    for (int i = 0; i < 16; ++i) {
      dst[k * 32 + i] = d * ((b[k].qs[i] & 0xf) - 8);
      dst[k * 32 + i + 16] = d * ((b[k].qs[i] >> 4) - 8);
    }
  }
}

void dequant_q4_1(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t k = 0; k < n / 32; ++k) {
    const float d = fp16_to_fp32(b[k].d), m = fp16_to_fp32(b[k].m);
    for (int i = 0; i < 16; ++i) {
      dst[k * 32 + i] = d * (b[k].qs[i] & 0xf) + m;
      dst[k * 32 + i + 16] = d * (b[k].qs[i] >> 4) + m;
    }
  }
}

void dequant_q4_k(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t k = 0; k < n / 256; ++k) {
    const float d = fp16_to_fp32(b[k].d), dmin = fp16_to_fp32(b[k].dmin);
    float* y = dst + k * 256;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, m0, sc1, m1;
      q4k_scale_min(2 * c, b[k].scales, &sc0, &m0);
      q4k_scale_min(2 * c + 1, b[k].scales, &sc1, &m1);
      const uint8_t* q = b[k].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        y[64 * c + l] = d * sc0 * (q[l] & 0xf) - dmin * m0;
        y[64 * c + 32 + l] = d * sc1 * (q[l] >> 4) - dmin * m1;
      }
    }
  }
}

void dequant_q6_k(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t k = 0; k < n / 256; ++k) {
    const float d = fp16_to_fp32(b[k].d);
    const uint8_t* ql = b[k].ql;
    const uint8_t* qh = b[k].qh;
    const int8_t* sc = b[k].scales;
    float* y = dst + k * 256;
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = (int)((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = (int)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128; ql += 64; qh += 32; sc += 8;
    }
  }
}

const TypeTraits kF32{"F32", 1, 4, dequant_f32};
const TypeTraits kF16{"F16", 1, 2, dequant_f16};
const TypeTraits kBF16{"BF16", 1, 2, dequant_bf16};
const TypeTraits kQ8_0{"Q8_0", 32, 34, dequant_q8_0};
const TypeTraits kQ4_0{"Q4_0", 32, 18, dequant_q4_0};
const TypeTraits kQ4_1{"Q4_1", 32, 20, dequant_q4_1};
const TypeTraits kQ4_K{"Q4_K", 256, 144, dequant_q4_k};
const TypeTraits kQ6_K{"Q6_K", 256, 210, dequant_q6_k};

}  // namespace

void q4k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

const TypeTraits* type_traits(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return &kF32;
    case GgmlType::kF16: return &kF16;
    case GgmlType::kBF16: return &kBF16;
    case GgmlType::kQ8_0: return &kQ8_0;
    case GgmlType::kQ4_0: return &kQ4_0;
    case GgmlType::kQ4_1: return &kQ4_1;
    case GgmlType::kQ4_K: return &kQ4_K;
    case GgmlType::kQ6_K: return &kQ6_K;
  }
  return nullptr;
}

const char* ggml_type_name_any(uint32_t id) {
  static const char* names[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2(removed)", "Q4_3(removed)", "Q5_0", "Q5_1",
                                "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
                                "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",
                                "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  if (id < sizeof(names) / sizeof(names[0])) return names[id];
  if (id == 34) return "TQ1_0";
  if (id == 35) return "TQ2_0";
  if (id == 39) return "MXFP4";
  return "unknown";
}

}  // namespace ouro
