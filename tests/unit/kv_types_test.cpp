// KV cache element types (kernels/kv_types.h): the FP8 E4M3 and BF16 codecs against references
// written from the formats' definitions (never from the encoders under test), the per-head scaled
// row codecs, typed paged attention against a double-precision reference, and the --kv /
// --kv-layers parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/kv_types.h"
#include "kernels/ops.h"

using namespace ouro;

namespace {

// ---- independent references -------------------------------------------------------------------

// OCP FP8 E4M3 (E4M3FN) from its definition: sign bit, 4 exponent bits with bias 7, 3 mantissa
// bits; exponent 0 is subnormal (m * 2^-9); s.1111.111 is NaN; there is no infinity.
double e4m3_ref(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  double v;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) v = std::ldexp((double)m, -9);
  else v = std::ldexp(8.0 + m, e - 7 - 3);  // (1 + m/8) * 2^(e-7)
  return s ? -v : v;
}

// Nearest finite E4M3 code to x by brute force over the 127 non-negative finite codes (0x00..0x7e,
// whose values increase with the code); the sign is x's. Ties go to the code with an even
// mantissa LSB. Values beyond 448 get 0x7e (the nearest finite code): saturation.
uint8_t e4m3_nearest(float x) {
  const double a = std::fabs((double)x);
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(a - e4m3_ref((uint8_t)c));  // exact: see the test's comment
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return (uint8_t)(best | (std::signbit(x) ? 0x80 : 0));
}

float f32_bits(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
uint32_t bits_f32(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }
float bf16_value(uint16_t h) { return f32_bits((uint32_t)h << 16); }

// x rounded to bfloat16 (8 significant bits, float's exponent range), nearest, ties to even,
// computed in double from the spacing of bf16 values around x. Returns +-inf on overflow.
double bf16_round_ref(float x) {
  const double a = std::fabs((double)x);
  if (a == 0) return x;
  // Spacing (ulp) of bf16 at a: 2^(e - 7) for normal a in [2^e, 2^(e+1)); 2^-133 below 2^-126.
  const int e = std::max(std::ilogb(a), -126);
  const double ulp = std::ldexp(1.0, e - 7);
  const double k = std::floor(a / ulp);  // exact: a / ulp is a power-of-two scaling
  const double lo = k * ulp, hi = (k + 1) * ulp;
  double r;
  if (a - lo < hi - a) r = lo;
  else if (a - lo > hi - a) r = hi;
  else r = std::fmod(k, 2.0) == 0 ? lo : hi;
  if (r >= std::ldexp(1.0, 128)) r = std::numeric_limits<double>::infinity();
  return std::signbit(x) ? -r : r;
}

// Half an E4M3 step at |y| (y = x / scale, in the code's units): 2^-10 in the subnormal range,
// 2^(floor(log2 |y|) - 4) among normals, 2^4 at the top binade (448's neighbourhood).
double e4m3_half_ulp(double y) {
  const double a = std::fabs(y);
  if (a < std::ldexp(1.0, -6)) return std::ldexp(1.0, -10);
  return std::ldexp(1.0, std::min(std::ilogb(a), 8) - 4);
}

float read_scale(const std::vector<uint8_t>& row, KvType t, int n_heads, int hd, int h) {
  float s;
  std::memcpy(&s, row.data() + (size_t)n_heads * hd * kv_elem_bytes(t) + 4 * h, 4);
  return s;
}

}  // namespace

// ---- FP8 E4M3 ---------------------------------------------------------------------------------

TEST(Fp8E4M3, DecodeAll256Codes) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float got = fp8_e4m3_decode((uint8_t)c);
    const double want = e4m3_ref((uint8_t)c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      ++nans;
      continue;
    }
    EXPECT_EQ((double)got, want) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 0x80) << "code " << c;  // including -0 for 0x80
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff only
  EXPECT_TRUE(std::isnan(fp8_e4m3_decode(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_decode(0xff)));
  // Landmarks of the format, written out.
  EXPECT_EQ(fp8_e4m3_decode(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_decode(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_decode(0x7e), kFp8E4M3Max);
  EXPECT_EQ(fp8_e4m3_decode(0x01), 0x1p-9f);
  EXPECT_EQ(fp8_e4m3_decode(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(fp8_e4m3_decode(0x08), 0x1p-6f);
  EXPECT_EQ(fp8_e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_decode(0x3c), 1.5f);
  EXPECT_EQ(fp8_e4m3_decode(0x77), 240.0f);
  // Non-negative finite codes are strictly increasing.
  for (int c = 0; c < 0x7e; ++c) EXPECT_LT(fp8_e4m3_decode((uint8_t)c), fp8_e4m3_decode((uint8_t)(c + 1))) << c;
}

TEST(Fp8E4M3, EncodeDecodeRoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7f || c == 0xff) continue;
    EXPECT_EQ(fp8_e4m3_encode(fp8_e4m3_decode((uint8_t)c)), c) << "code " << c;
  }
  EXPECT_EQ(fp8_e4m3_encode(0.0f), 0x00);
  EXPECT_EQ(fp8_e4m3_encode(-0.0f), 0x80);
}

TEST(Fp8E4M3, Saturates) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 449.0f, 463.9f, std::nextafter(464.0f, 0.0f), 464.0f, 465.0f, 480.0f, 1e6f,
                  std::numeric_limits<float>::max(), inf}) {
    EXPECT_EQ(fp8_e4m3_encode(x), 0x7e) << x;
    EXPECT_EQ(fp8_e4m3_encode(-x), 0xfe) << -x;
  }
  // Just below 448's lower neighbour's midpoint: 416 and 448 are neighbours (step 32).
  EXPECT_EQ(fp8_e4m3_encode(431.9f), 0x7d);  // 416
  EXPECT_EQ(fp8_e4m3_encode(432.0f), 0x7e);  // tie 416 (odd 0x7d) / 448 (even 0x7e)
  EXPECT_EQ(fp8_e4m3_encode(432.1f), 0x7e);
}

TEST(Fp8E4M3, NanStaysNan) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        f32_bits(0x7f800001u), f32_bits(0xff800001u), f32_bits(0x7fffffffu)};
  for (float x : nans) {
    const uint8_t c = fp8_e4m3_encode(x);
    EXPECT_EQ(c & 0x7f, 0x7f) << std::hex << bits_f32(x);
    EXPECT_TRUE(std::isnan(fp8_e4m3_decode(c))) << std::hex << bits_f32(x);
  }
}

TEST(Fp8E4M3, Subnormals) {
  EXPECT_EQ(fp8_e4m3_encode(0x1p-9f), 0x01);
  EXPECT_EQ(fp8_e4m3_encode(0x1p-10f), 0x00);         // tie 0 / 2^-9: to even (0)
  EXPECT_EQ(fp8_e4m3_encode(-0x1p-10f) & 0x7f, 0x00);  // magnitude 0 (sign kept: 0x80)
  EXPECT_EQ(fp8_e4m3_encode(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(fp8_e4m3_encode(0x1p-11f), 0x00);
  EXPECT_EQ(fp8_e4m3_encode(1.5f * 0x1p-9f), 0x02);   // tie 1 / 2: to even
  EXPECT_EQ(fp8_e4m3_encode(2.5f * 0x1p-9f), 0x02);   // tie 2 / 3: to even
  EXPECT_EQ(fp8_e4m3_encode(3.5f * 0x1p-9f), 0x04);   // tie 3 / 4: to even
  EXPECT_EQ(fp8_e4m3_encode(-2.5f * 0x1p-9f), 0x82);
  EXPECT_EQ(fp8_e4m3_encode(6.5f * 0x1p-9f), 0x06);
  EXPECT_EQ(fp8_e4m3_encode(7.0f * 0x1p-9f), 0x07);
  EXPECT_EQ(fp8_e4m3_encode(7.5f * 0x1p-9f), 0x08);   // tie 7 / 2^-6 (code 8): to even, crosses into normals
  EXPECT_EQ(fp8_e4m3_encode(std::nextafter(0x1p-6f, 0.0f)), 0x08);
  EXPECT_EQ(fp8_e4m3_encode(0x1p-6f), 0x08);
  EXPECT_EQ(fp8_e4m3_encode(std::nextafter(7.5f * 0x1p-9f, 0.0f)), 0x07);
}

// Every midpoint between two adjacent finite codes (exact in float: 5 significant bits) goes to
// the even code, and one float ulp either side goes to the nearer code.
TEST(Fp8E4M3, EveryMidpointTiesToEven) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = fp8_e4m3_decode((uint8_t)c), hi = fp8_e4m3_decode((uint8_t)(c + 1));
    const float mid = (float)(((double)lo + hi) / 2);
    ASSERT_EQ((double)mid, ((double)lo + hi) / 2);
    const int even = (c & 1) ? c + 1 : c;
    EXPECT_EQ(fp8_e4m3_encode(mid), even) << "between codes " << c << " and " << c + 1;
    EXPECT_EQ(fp8_e4m3_encode(-mid), even | 0x80) << "between codes " << c << " and " << c + 1;
    EXPECT_EQ(fp8_e4m3_encode(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(fp8_e4m3_encode(std::nextafter(mid, 1e9f)), c + 1) << c;
  }
}

// Random floats, log-uniform magnitudes in [2^-12, 600], both signs: the encoder agrees with a
// brute-force nearest-code search. (|x| - value is exact in double: x has 24 significant bits at
// >= 2^-35, codes are multiples of 2^-9 below 2^9, so the difference spans < 53 bits.)
TEST(Fp8E4M3, RandomMatchesBruteForceNearest) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> lg(-12.0, std::log2(600.0));
  for (int i = 0; i < 200000; ++i) {
    float x = (float)std::exp2(lg(rng));
    if (rng() & 1) x = -x;
    const uint8_t want = e4m3_nearest(x);
    const uint8_t got = fp8_e4m3_encode(x);
    ASSERT_EQ(got, want) << "x = " << x << " (" << std::hexfloat << x << ")";
  }
}

// ---- BF16 -------------------------------------------------------------------------------------

TEST(Bf16, RandomBitPatternsRoundToNearestEven) {
  std::mt19937 rng(99);
  int checked = 0;
  for (int i = 0; i < 400000; ++i) {
    uint32_t b = rng();
    if (i % 2) b = (b & 0xffff0000u) | 0x8000u;  // every other one an exact tie
    if (i % 7 == 0) b = (b & 0x807fffffu) | (0x7f000000u + (rng() & 0x00800000u));  // top binades
    const float x = f32_bits(b);
    if (!std::isfinite(x)) continue;
    const uint16_t h = bf16_encode(x);
    const double want = bf16_round_ref(x);
    const float got = bf16_value(h);
    ASSERT_EQ((double)got, want) << std::hex << "bits " << b << " -> " << h;
    ASSERT_EQ(std::signbit(got), std::signbit(x)) << std::hex << b;
    ++checked;
  }
  EXPECT_GT(checked, 350000);
}

TEST(Bf16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_encode(inf), 0x7f80);
  EXPECT_EQ(bf16_encode(-inf), 0xff80);
  EXPECT_EQ(bf16_encode(0.0f), 0x0000);
  EXPECT_EQ(bf16_encode(-0.0f), 0x8000);
  EXPECT_EQ(bf16_encode(1.0f), 0x3f80);
  EXPECT_EQ(bf16_encode(f32_bits(0x3f808000u)), 0x3f80);  // 1 + 2^-8: tie, to even (down)
  EXPECT_EQ(bf16_encode(f32_bits(0x3f818000u)), 0x3f82);  // tie, to even (up)
  EXPECT_EQ(bf16_encode(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  // NaNs stay NaN, including ones whose payload is only in the low 16 bits.
  for (uint32_t b : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7fffffffu}) {
    EXPECT_TRUE(std::isnan(bf16_value(bf16_encode(f32_bits(b))))) << std::hex << b;
    EXPECT_EQ(bf16_encode(f32_bits(b)) >> 15, b >> 31) << std::hex << b;
  }
}

// ---- row codecs -------------------------------------------------------------------------------

namespace {

constexpr KvType kScaledTypes[] = {KvType::kInt8, KvType::kFP8};
constexpr KvType kAllTypes[] = {KvType::kF32, KvType::kBF16, KvType::kFP8, KvType::kInt8};

std::vector<float> roundtrip(KvType t, const std::vector<float>& x, int n_heads, int hd, std::vector<uint8_t>* enc) {
  enc->assign(kv_row_bytes(t, n_heads, hd) + 16, 0xcd);  // 16 guard bytes
  kv_encode_row(t, x.data(), n_heads, hd, enc->data());
  for (size_t i = kv_row_bytes(t, n_heads, hd); i < enc->size(); ++i) EXPECT_EQ((*enc)[i], 0xcd) << "wrote past the row";
  std::vector<float> out(x.size(), -12345.0f);
  kv_decode_row(t, enc->data(), n_heads, hd, out.data());
  return out;
}

// |decoded - x| bound of one finite element of a head with scale s (amax / qmax).
double elem_bound(KvType t, double x, double s) {
  // (1 + 1e-4): the encoder's float x * (qmax / amax) and the decoder's float q * scale.
  if (t == KvType::kInt8) return 0.5 * s * (1 + 1e-4) + 1e-30;
  return e4m3_half_ulp(x / s) * s * (1 + 1e-5) + 1e-30;
}

double qmax_of(KvType t) { return t == KvType::kInt8 ? 127.0 : 448.0; }

}  // namespace

TEST(KvRow, RowBytes) {
  EXPECT_EQ(kv_row_bytes(KvType::kF32, 3, 64), 768u);
  EXPECT_EQ(kv_row_bytes(KvType::kBF16, 3, 64), 384u);
  EXPECT_EQ(kv_row_bytes(KvType::kFP8, 3, 64), 204u);
  EXPECT_EQ(kv_row_bytes(KvType::kInt8, 3, 64), 204u);
  EXPECT_EQ(kv_row_bytes(KvType::kInt8, 8, 128), 8u * 128 + 32);
}

TEST(KvRow, F32AndBf16RoundTrip) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 3);
  const int nh = 3, hd = 64;
  std::vector<float> x(nh * hd);
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> enc;
  EXPECT_EQ(roundtrip(KvType::kF32, x, nh, hd, &enc), x);
  const auto y = roundtrip(KvType::kBF16, x, nh, hd, &enc);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ((double)y[i], bf16_round_ref(x[i])) << i;
}

TEST(KvRow, AllZeroRow) {
  const int nh = 3, hd = 64;
  std::vector<float> x(nh * hd, 0.0f);
  for (KvType t : kScaledTypes) {
    std::vector<uint8_t> enc;
    const auto y = roundtrip(t, x, nh, hd, &enc);
    for (int h = 0; h < nh; ++h) EXPECT_EQ(read_scale(enc, t, nh, hd, h), 0.0f) << kv_type_name(t);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_FALSE(std::isnan(y[i])) << kv_type_name(t) << " " << i;
      ASSERT_EQ(y[i], 0.0f) << kv_type_name(t) << " " << i;
    }
  }
}

// One huge outlier in head 1: it sets that head's scale and is reproduced; the other values of
// head 1 land within the bound of that (coarse) scale; heads 0 and 2 keep their own fine scales.
TEST(KvRow, SingleOutlier) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  const int nh = 3, hd = 64;
  std::vector<float> x(nh * hd);
  for (auto& v : x) v = u(rng);
  x[1 * hd + 17] = 1e4f;
  for (KvType t : kScaledTypes) {
    std::vector<uint8_t> enc;
    const auto y = roundtrip(t, x, nh, hd, &enc);
    for (int h = 0; h < nh; ++h) {
      double amax = 0;
      for (int i = 0; i < hd; ++i) amax = std::max(amax, std::fabs((double)x[h * hd + i]));
      const double s = amax / qmax_of(t);
      EXPECT_NEAR(read_scale(enc, t, nh, hd, h), s, 1e-6 * s) << kv_type_name(t) << " head " << h;
      for (int i = 0; i < hd; ++i) {
        const double xi = x[h * hd + i];
        ASSERT_LE(std::fabs(y[h * hd + i] - xi), elem_bound(t, xi, s)) << kv_type_name(t) << " head " << h << " i " << i;
      }
    }
    const double outlier = y[1 * hd + 17];
    if (t == KvType::kInt8) {
      EXPECT_NEAR(outlier, 1e4, 1e4 / 127 / 2) << "int8";
    } else {
      EXPECT_NEAR(outlier, 1e4, 1e4 * std::ldexp(1.0, -4)) << "fp8";
    }
    EXPECT_NEAR(outlier, 1e4, 1e4 * 1e-6) << kv_type_name(t) << ": amax maps to qmax exactly";
  }
}

TEST(KvRow, RandomRowsWithinBound) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0, 1);
  for (int hd : {64, 12, 128}) {
    const int nh = 4;
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<float> x(nh * hd);
      for (int h = 0; h < nh; ++h) {
        const float mag = std::ldexp(1.0f, (int)(rng() % 24) - 12);  // heads of very different sizes
        for (int i = 0; i < hd; ++i) x[h * hd + i] = nd(rng) * mag;
      }
      for (KvType t : kScaledTypes) {
        std::vector<uint8_t> enc;
        const auto y = roundtrip(t, x, nh, hd, &enc);
        for (int h = 0; h < nh; ++h) {
          double amax = 0;
          for (int i = 0; i < hd; ++i) amax = std::max(amax, std::fabs((double)x[h * hd + i]));
          const double s = amax / qmax_of(t);
          ASSERT_NEAR(read_scale(enc, t, nh, hd, h), s, 1e-6 * s) << kv_type_name(t);
          for (int i = 0; i < hd; ++i) {
            const double xi = x[h * hd + i];
            ASSERT_LE(std::fabs(y[h * hd + i] - xi), elem_bound(t, xi, s))
                << kv_type_name(t) << " hd " << hd << " head " << h << " i " << i << " x " << xi;
          }
        }
      }
    }
  }
}

// A NaN element: int8 has no NaN code, so it is stored as 0 (decodes to 0); fp8 keeps it NaN.
// Either way it is excluded from the head's amax and the other elements are unaffected.
// Infinities are excluded from amax too and saturate to +-amax (the largest code times the scale).
TEST(KvRow, NanAndInfDoNotPoisonTheRow) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-2, 2);
  const int nh = 2, hd = 64;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(nh * hd);
  for (auto& v : x) v = u(rng);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[9] = inf;
  x[hd + 3] = -inf;
  x[hd + 4] = std::numeric_limits<float>::quiet_NaN();
  for (KvType t : kScaledTypes) {
    std::vector<uint8_t> enc;
    const auto y = roundtrip(t, x, nh, hd, &enc);
    for (int h = 0; h < nh; ++h) {
      double amax = 0;
      for (int i = 0; i < hd; ++i)
        if (std::isfinite(x[h * hd + i])) amax = std::max(amax, std::fabs((double)x[h * hd + i]));
      const double s = amax / qmax_of(t);
      EXPECT_NEAR(read_scale(enc, t, nh, hd, h), s, 1e-6 * s) << kv_type_name(t);
      for (int i = 0; i < hd; ++i) {
        const float xi = x[h * hd + i], yi = y[h * hd + i];
        if (std::isnan(xi)) {
          if (t == KvType::kInt8) {
            EXPECT_EQ(yi, 0.0f) << "int8 NaN is stored as 0";
          } else {
            EXPECT_TRUE(std::isnan(yi)) << "fp8 NaN stays NaN";
          }
        } else if (std::isinf(xi)) {
          EXPECT_NEAR(yi, std::copysign(amax, xi), 1e-6 * amax) << kv_type_name(t) << " inf saturates";
        } else {
          ASSERT_LE(std::fabs(yi - xi), elem_bound(t, xi, s)) << kv_type_name(t) << " head " << h << " i " << i;
        }
      }
    }
  }
}

// A head whose only non-zero entries are infinite has amax 0 (scale 0): the infinities saturate to
// the largest code, which is worth 0 at that scale; nothing may come out NaN.
TEST(KvRow, InfInOtherwiseZeroHead) {
  const int nh = 2, hd = 16;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(nh * hd, 0.0f);
  x[3] = inf;
  x[4] = -inf;
  x[hd + 1] = 1.0f;
  for (KvType t : kScaledTypes) {
    std::vector<uint8_t> enc;
    const auto y = roundtrip(t, x, nh, hd, &enc);
    EXPECT_EQ(read_scale(enc, t, nh, hd, 0), 0.0f) << kv_type_name(t);
    for (int i = 0; i < nh * hd; ++i) {
      EXPECT_FALSE(std::isnan(y[i])) << kv_type_name(t) << " element " << i;
      EXPECT_EQ(y[i], x[i] == 1.0f ? 1.0f : 0.0f) << kv_type_name(t) << " element " << i;
    }
  }
}

// ---- typed paged attention --------------------------------------------------------------------

namespace {

struct Pool {
  KvType type;
  int n_heads, hd, block_size;
  std::vector<uint8_t> mem;
  int64_t row_bytes, block_bytes;
  Pool(KvType t, int nh, int hd_, int bs, int n_blocks) : type(t), n_heads(nh), hd(hd_), block_size(bs) {
    row_bytes = (int64_t)kv_row_bytes(t, nh, hd);
    block_bytes = row_bytes * bs;
    mem.assign((size_t)block_bytes * n_blocks, 0xff);  // NaN-ish garbage everywhere not written
  }
  uint8_t* row(int block, int r) { return mem.data() + (size_t)block * block_bytes + (size_t)r * row_bytes; }
  // As PagedKvCache::side does.
  KvSide side(int head) const {
    return KvSide{mem.data(), type, row_bytes, block_bytes, (int64_t)head * hd * (int64_t)kv_elem_bytes(type),
                  (int64_t)n_heads * hd * (int64_t)kv_elem_bytes(type) + 4 * head};
  }
};

// One head's K and V pools behind a shuffled block table of 16-row blocks, rows [0, n) random.
struct RandomPages {
  std::vector<int> table;
  Pool K, V;
  // 12 blocks of 16 positions, or as many as n needs.
  static int blocks_for(int64_t n) { return (int)std::max<int64_t>(12, (n + 15) / 16); }
  RandomPages(KvType kt, KvType vt, int hd, int64_t n, std::mt19937& rng)
      : table(blocks_for(n)), K(kt, 1, hd, 16, blocks_for(n)), V(vt, 1, hd, 16, blocks_for(n)) {
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> row(hd);
    for (int p = 0; p < n; ++p) {
      for (auto& a : row) a = nd(rng);
      kv_encode_row(kt, row.data(), 1, hd, K.row(table[p / 16], p % 16));
      for (auto& a : row) a = nd(rng);
      kv_encode_row(vt, row.data(), 1, hd, V.row(table[p / 16], p % 16));
    }
  }
  KvPages pages() const { return KvPages{table.data(), 16, K.side(0), V.side(0)}; }
};

void check_attend(KvType kt, KvType vt, int hd, int n_keys, std::mt19937& rng) {
  const int nh = 3, head = 1, bs = 16, n_blocks = 8;
  const int used = (n_keys + bs - 1) / bs;
  std::vector<int> table(n_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  Pool K(kt, nh, hd, bs, n_blocks), V(vt, nh, hd, bs, n_blocks);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(hd), kx(nh * hd), vx(nh * hd), kd(nh * hd), vd(nh * hd);
  for (auto& a : q) a = nd(rng);
  std::vector<double> s(n_keys);
  std::vector<std::vector<float>> vrows(n_keys);
  const double scale = 1.0 / std::sqrt((double)hd);
  for (int p = 0; p < n_keys; ++p) {
    for (int i = 0; i < nh * hd; ++i) {
      kx[i] = nd(rng) * (1.0f + (float)(i / hd));  // heads of different magnitudes
      vx[i] = nd(rng) * (1.0f + 2.0f * (float)(i / hd));
    }
    uint8_t* kr = K.row(table[p / bs], p % bs);
    uint8_t* vr = V.row(table[p / bs], p % bs);
    kv_encode_row(kt, kx.data(), nh, hd, kr);
    kv_encode_row(vt, vx.data(), nh, hd, vr);
    kv_decode_row(kt, kr, nh, hd, kd.data());
    kv_decode_row(vt, vr, nh, hd, vd.data());
    double dot = 0;
    for (int i = 0; i < hd; ++i) dot += (double)q[i] * kd[head * hd + i];
    s[p] = dot * scale;
    vrows[p].assign(vd.begin() + head * hd, vd.begin() + (head + 1) * hd);
  }
  double mx = -1e300, sum = 0;
  for (double v : s) mx = std::max(mx, v);
  for (double& v : s) sum += (v = std::exp(v - mx));
  std::vector<float> out(hd + 8, NAN), scores(n_keys + 8, NAN);
  const KvPages pages{table.data(), bs, K.side(head), V.side(head)};
  attend_paged(q.data(), pages, n_keys, hd, (float)scale, scores.data(), out.data());
  for (int i = 0; i < hd; ++i) {
    double o = 0, mag = 0;
    for (int p = 0; p < n_keys; ++p) {
      o += s[p] / sum * vrows[p][i];
      mag += s[p] / sum * std::fabs(vrows[p][i]);
    }
    ASSERT_NEAR(out[i], o, 1e-4 * mag + 1e-6)
        << "K " << kv_type_name(kt) << " V " << kv_type_name(vt) << " hd " << hd << " n_keys " << n_keys << " i " << i
        << " (blocks used " << used << ")";
  }
}

}  // namespace

TEST(AttendPaged, EveryTypePairMatchesDoubleReference) {
  std::mt19937 rng(77);
  for (KvType kt : kAllTypes)
    for (KvType vt : kAllTypes)
      for (int hd : {64, 12, 40, 8, 264, 576})  // wider than 256: MLA latent rows, in column chunks
        for (int n : {1, 15, 16, 17, 70}) {
          SCOPED_TRACE(::testing::Message() << kv_type_name(kt) << "/" << kv_type_name(vt) << " hd " << hd << " n " << n);
          check_attend(kt, vt, hd, n, rng);
          if (::testing::Test::HasFatalFailure()) return;
        }
}

// The f32 path through a one-block table is attend_one's.
TEST(AttendPaged, F32OneBlockEqualsAttendOne) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0, 1);
  const int hd = 64, n = 23, nh = 3;
  std::vector<float> q(hd), k(n * nh * hd), v(n * nh * hd), o1(hd), o2(hd), s1(n), s2(n);
  for (auto& a : q) a = nd(rng);
  for (auto& a : k) a = nd(rng);
  for (auto& a : v) a = nd(rng);
  attend_one(q.data(), k.data() + hd, v.data() + hd, nh * hd, n, hd, 0.125f, s1.data(), o1.data());
  const int blk = 0;
  const int64_t rb = nh * hd * 4;
  const KvPages pg{&blk, n, KvSide{reinterpret_cast<const uint8_t*>(k.data()), KvType::kF32, rb, rb * n, hd * 4, 0},
                   KvSide{reinterpret_cast<const uint8_t*>(v.data()), KvType::kF32, rb, rb * n, hd * 4, 0}};
  attend_paged(q.data(), pg, n, hd, 0.125f, s2.data(), o2.data());
  EXPECT_EQ(o1, o2);
}

// attend_paged_tokens for one token gives each head exactly attend_paged's bits (the first hd_v
// values), for every type pair, key counts around its tiles of 4 and 64, shuffled blocks, head dims
// the vector path and the generic path take, and both score passes (AVX2; AVX-512's four heads per
// row chunk where the host has it); it writes nothing past hd_v.
TEST(AttendPagedHeads, EachHeadIsAttendPagedBitForBit) {
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0, 1);
  struct Dims { int hd, hd_v; };
  for (KvType kt : kAllTypes)
    for (KvType vt : kAllTypes)
      for (Dims dm : {Dims{64, 64}, Dims{576, 512}, Dims{264, 136}, Dims{40, 40}, Dims{12, 8}})
        for (int n : {1, 3, 4, 5, 63, 64, 65, 130})
          for (int G : {1, 3, 8}) {
            SCOPED_TRACE(::testing::Message() << kv_type_name(kt) << "/" << kv_type_name(vt) << " hd " << dm.hd
                                              << " hd_v " << dm.hd_v << " n " << n << " G " << G);
            const RandomPages rp(kt, vt, dm.hd, n, rng);
            const int64_t qs = dm.hd + 8, os = dm.hd + 16;
            std::vector<float> q(G * qs), out(G * os, NAN), one(dm.hd), scores(G * n), s1(n);
            for (auto& a : q) a = nd(rng);
            const KvPages pg = rp.pages();
            std::vector<Isa> isas = {Isa::kAvx2};
            if (isa_supported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);  // four heads per row chunk
            for (Isa isa : isas) {
              std::fill(out.begin(), out.end(), NAN);
              const int64_t nk = n;
              attend_paged_tokens(q.data(), 1, G, qs, pg, &nk, dm.hd, dm.hd_v, 0.09f, scores.data(), out.data(), os,
                                  isa);
              for (int g = 0; g < G; ++g) {
                attend_paged(q.data() + g * qs, pg, n, dm.hd, 0.09f, s1.data(), one.data());
                ASSERT_EQ(0, std::memcmp(one.data(), out.data() + g * os, sizeof(float) * dm.hd_v))
                    << "head " << g << " isa " << isa_name(isa);
                for (int64_t i = dm.hd_v; i < os; ++i)
                  ASSERT_TRUE(std::isnan(out[g * os + i])) << "head " << g << " i " << i << " isa " << isa_name(isa);
              }
            }
          }
}

// attend_paged_tokens gives each (token, head) exactly attend_paged's bits over that token's keys:
// a prompt's causal key counts starting on either side of the 4- and 64-position tiles, and a
// ragged set with a token that has no keys (zeros) after one that has some; every type pair, head
// dims of the vector and generic paths, both ISAs where the host has AVX-512; nothing written
// past hd_v.
TEST(AttendPagedTokens, EachTokenHeadIsAttendPagedBitForBit) {
  std::mt19937 rng(43);
  std::normal_distribution<float> nd(0, 1);
  struct Dims { int hd, hd_v; };
  std::vector<std::vector<int64_t>> key_sets;
  for (auto [first, n_tok] : {std::pair{1, 9}, {61, 5}, {126, 3}, {3, 2}}) {
    key_sets.emplace_back();
    for (int t = 0; t < n_tok; ++t) key_sets.back().push_back(first + t);
  }
  key_sets.push_back({7, 0, 70, 3, 64, 65});
  for (KvType kt : kAllTypes)
    for (KvType vt : kAllTypes)
      for (Dims dm : {Dims{576, 512}, Dims{64, 64}, Dims{264, 136}, Dims{12, 8}})
        for (const auto& nk : key_sets)
          for (int G : {1, 3}) {
            const int nt = (int)nk.size();
            const int64_t n = *std::max_element(nk.begin(), nk.end());
            SCOPED_TRACE(::testing::Message() << kv_type_name(kt) << "/" << kv_type_name(vt) << " hd " << dm.hd
                                              << " hd_v " << dm.hd_v << " first keys " << nk[0] << " tokens " << nt
                                              << " G " << G);
            const RandomPages rp(kt, vt, dm.hd, n, rng);
            const int64_t qs = dm.hd + 8, os = dm.hd + 16;
            std::vector<float> q(nt * G * qs), out(nt * G * os), one(dm.hd), scores(nt * G * n), s1(n);
            for (auto& a : q) a = nd(rng);
            const KvPages pg = rp.pages();
            std::vector<Isa> isas = {Isa::kAvx2};
            if (isa_supported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
            for (Isa isa : isas) {
              std::fill(out.begin(), out.end(), NAN);
              attend_paged_tokens(q.data(), nt, G, qs, pg, nk.data(), dm.hd, dm.hd_v, 0.09f, scores.data(), out.data(),
                                  os, isa);
              for (int t = 0; t < nt; ++t)
                for (int g = 0; g < G; ++g) {
                  const int64_t i = (int64_t)t * G + g;
                  if (nk[t] > 0) attend_paged(q.data() + i * qs, pg, nk[t], dm.hd, 0.09f, s1.data(), one.data());
                  else std::fill(one.begin(), one.end(), 0.0f);
                  ASSERT_EQ(0, std::memcmp(one.data(), out.data() + i * os, sizeof(float) * dm.hd_v))
                      << "token " << t << " head " << g << " isa " << isa_name(isa);
                  for (int64_t c = dm.hd_v; c < os; ++c)
                    ASSERT_TRUE(std::isnan(out[i * os + c])) << "token " << t << " head " << g << " c " << c;
                }
            }
          }
}

// A long attention cut into chunks of positions (attend_paged_tokens from p_begin, with each
// chunk's softmax max and sum), merged by merge_attention_chunks, is the one attention over all the
// keys within float rounding: chunk lengths around the tiles of 4, 16 and 64, a last chunk of one
// key, heads in groups, every ISA the host has. The stats are the chunk's largest scaled score and
// its sum; a chunk past the token's keys gives zeros, m = -inf, l = 0, and merges as nothing; with
// p_begin = 0 the stats change no bit of the output.
TEST(AttendPagedTokens, ChunksMergeIntoOneSoftmax) {
  std::mt19937 rng(47);
  std::normal_distribution<float> nd(0, 1);
  struct Dims { int hd, hd_v; };
  for (auto [kt, vt] : {std::pair{KvType::kF32, KvType::kF32}, {KvType::kBF16, KvType::kBF16}, {KvType::kInt8, KvType::kFP8}})
    for (Dims dm : {Dims{576, 512}, Dims{64, 64}})
      for (auto [n, C] : {std::pair{300, 64}, {513, 256}, {257, 256}, {130, 17}})
        for (int G : {1, 3, 8}) {
          SCOPED_TRACE(::testing::Message() << kv_type_name(kt) << "/" << kv_type_name(vt) << " hd " << dm.hd << " n "
                                            << n << " chunk " << C << " G " << G);
          const RandomPages rp(kt, vt, dm.hd, n, rng);
          const KvPages pg = rp.pages();
          const int chunks = (n + C - 1) / C;
          const int64_t qs = dm.hd, os = dm.hd_v;
          std::vector<float> q(G * qs), full(G * os), scores(G * (int64_t)n), merged(dm.hd_v);
          std::vector<float> parts((size_t)chunks * G * os), st((size_t)chunks * G * 2);
          for (auto& a : q) a = nd(rng);
          std::vector<Isa> isas = {Isa::kAvx2};
          if (isa_supported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
          for (Isa isa : isas) {
            const int64_t nk = n;
            attend_paged_tokens(q.data(), 1, G, qs, pg, &nk, dm.hd, dm.hd_v, 0.09f, scores.data(), full.data(), os, isa);
            std::vector<float> with_stats(G * os), st0(G * 2);
            attend_paged_tokens(q.data(), 1, G, qs, pg, &nk, dm.hd, dm.hd_v, 0.09f, scores.data(), with_stats.data(), os,
                                isa, 0, st0.data());
            ASSERT_EQ(0, std::memcmp(full.data(), with_stats.data(), sizeof(float) * full.size()));
            for (int k = 0; k < chunks; ++k) {
              const int64_t end = std::min<int64_t>(n, (int64_t)(k + 1) * C);
              attend_paged_tokens(q.data(), 1, G, qs, pg, &end, dm.hd, dm.hd_v, 0.09f, scores.data(),
                                  &parts[(size_t)k * G * os], os, isa, (int64_t)k * C, &st[(size_t)k * G * 2]);
            }
            for (int g = 0; g < G; ++g) {
              // The sums lie in [1, keys]; the maxima are checked by the merge below.
              for (int k = 0; k < chunks; ++k) {
                const int64_t b = (int64_t)k * C, e = std::min<int64_t>(n, b + C);
                const float l = st[((size_t)k * G + g) * 2 + 1];
                EXPECT_GE(l, 1.0f);  // the largest score's own term is exp(0)
                EXPECT_LE(l, (float)(e - b) * 1.0001f);
              }
              merge_attention_chunks(&parts[(size_t)g * os], (int64_t)G * os, &st[(size_t)g * 2], (int64_t)G * 2, chunks,
                                     dm.hd_v, merged.data());
              float mag = 0;
              for (int v = 0; v < dm.hd_v; ++v) mag = std::max(mag, std::fabs(full[g * os + v]));
              for (int v = 0; v < dm.hd_v; ++v)
                ASSERT_NEAR(merged[v], full[g * os + v], 2e-6f * mag + 1e-7f) << "head " << g << " v " << v
                                                                                << " isa " << isa_name(isa);
            }
          }
        }
  // A chunk past the token's keys, merged with one that has them, changes nothing.
  const RandomPages rp(KvType::kF32, KvType::kF32, 64, 40, rng);
  const KvPages pg = rp.pages();
  std::vector<float> q(64), parts(2 * 64, NAN), st(4, NAN), out(64), ref(64), scores(64);
  for (auto& a : q) a = nd(rng);
  const int64_t n0 = 40;
  attend_paged_tokens(q.data(), 1, 1, 64, pg, &n0, 64, 64, 0.1f, scores.data(), parts.data(), 64, Isa::kAvx2, 0,
                      st.data());
  attend_paged_tokens(q.data(), 1, 1, 64, pg, &n0, 64, 64, 0.1f, scores.data(), parts.data() + 64, 64, Isa::kAvx2, 40,
                      st.data() + 2);
  EXPECT_EQ(st[2], -INFINITY);
  EXPECT_EQ(st[3], 0.0f);
  for (int v = 0; v < 64; ++v) EXPECT_EQ(parts[64 + v], 0.0f);
  attend_paged(q.data(), pg, 40, 64, 0.1f, scores.data(), ref.data());
  merge_attention_chunks(parts.data(), 64, st.data(), 2, 2, 64, out.data());
  for (int v = 0; v < 64; ++v) EXPECT_NEAR(out[v], ref[v], 1e-6f * (1.0f + std::fabs(ref[v])));
}

// ---- --kv / --kv-layers -----------------------------------------------------------------------

namespace {

KvSpec must_parse(const std::string& kv, const std::string& layers, int n_layer = 30) {
  auto r = parse_kv_spec(kv, layers, n_layer);
  EXPECT_TRUE(r.ok()) << "'" << kv << "' '" << layers << "': " << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : KvSpec{};
}

std::string must_fail(const std::string& kv, const std::string& layers, int n_layer = 30) {
  auto r = parse_kv_spec(kv, layers, n_layer);
  EXPECT_FALSE(r.ok()) << "'" << kv << "' '" << layers << "' was accepted: " << (r.ok() ? r->describe() : "");
  if (r.ok()) return "";
  EXPECT_EQ(r.error().kind, ErrorKind::kUsage) << r.error().message;
  return r.error().message;
}

std::vector<KvType> all(KvType t, int n = 30) { return std::vector<KvType>(n, t); }

}  // namespace

TEST(KvSpecParse, TypeNames) {
  KvType t;
  EXPECT_TRUE(parse_kv_type("f32", &t)); EXPECT_EQ(t, KvType::kF32);
  EXPECT_TRUE(parse_kv_type("bf16", &t)); EXPECT_EQ(t, KvType::kBF16);
  EXPECT_TRUE(parse_kv_type("fp8", &t)); EXPECT_EQ(t, KvType::kFP8);
  EXPECT_TRUE(parse_kv_type("fp8_e4m3", &t)); EXPECT_EQ(t, KvType::kFP8);
  EXPECT_TRUE(parse_kv_type("int8", &t)); EXPECT_EQ(t, KvType::kInt8);
  EXPECT_TRUE(parse_kv_type("i8", &t)); EXPECT_EQ(t, KvType::kInt8);
  for (const char* bad : {"fp16", "f16", "FP8", "", "int4", "bf16 ", "q8_0"}) EXPECT_FALSE(parse_kv_type(bad, &t)) << bad;
  for (KvType k : kAllTypes) {
    KvType back;
    EXPECT_TRUE(parse_kv_type(kv_type_name(k), &back));
    EXPECT_EQ(back, k);
  }
}

TEST(KvSpecParse, Uniform) {
  KvSpec s = must_parse("", "");
  EXPECT_EQ(s.k, all(KvType::kF32));
  EXPECT_EQ(s.v, all(KvType::kF32));
  EXPECT_EQ(s.describe(), "f32");

  s = must_parse("fp8", "");
  EXPECT_EQ(s.k, all(KvType::kFP8));
  EXPECT_EQ(s.v, all(KvType::kFP8));
  EXPECT_TRUE(s.uniform());
  EXPECT_EQ(s.describe(), "fp8");

  s = must_parse("k=bf16,v=fp8", "");
  EXPECT_EQ(s.k, all(KvType::kBF16));
  EXPECT_EQ(s.v, all(KvType::kFP8));
  EXPECT_EQ(s.describe(), "k=bf16,v=fp8");

  s = must_parse("v=fp8,k=bf16", "");
  EXPECT_EQ(s.k, all(KvType::kBF16));
  EXPECT_EQ(s.v, all(KvType::kFP8));

  s = must_parse("k=int8", "");
  EXPECT_EQ(s.k, all(KvType::kInt8));
  EXPECT_EQ(s.v, all(KvType::kF32));
  EXPECT_EQ(s.describe(), "k=int8,v=f32");

  s = must_parse("v=bf16", "");
  EXPECT_EQ(s.k, all(KvType::kF32));
  EXPECT_EQ(s.v, all(KvType::kBF16));
}

TEST(KvSpecParse, LayerOverrides) {
  KvSpec s = must_parse("", "0-3:bf16,4-:fp8");
  for (int l = 0; l < 30; ++l) {
    EXPECT_EQ(s.k[l], l <= 3 ? KvType::kBF16 : KvType::kFP8) << l;
    EXPECT_EQ(s.v[l], l <= 3 ? KvType::kBF16 : KvType::kFP8) << l;
  }
  EXPECT_FALSE(s.uniform());
  EXPECT_EQ(s.describe(), "0-3:bf16,4-29:fp8");
  // The per-layer description is itself a valid --kv-layers value giving the same spec.
  KvSpec back = must_parse("", s.describe());
  EXPECT_EQ(back.k, s.k);
  EXPECT_EQ(back.v, s.v);

  s = must_parse("", "-2:k=int8");
  for (int l = 0; l < 30; ++l) {
    EXPECT_EQ(s.k[l], l <= 2 ? KvType::kInt8 : KvType::kF32) << l;
    EXPECT_EQ(s.v[l], KvType::kF32) << l;
  }
  EXPECT_EQ(s.describe(), "0-2:k=int8,0-2:v=f32,3-29:f32");
  back = must_parse("", s.describe());  // mixed K/V ranges read back too
  EXPECT_EQ(back.k, s.k);
  EXPECT_EQ(back.v, s.v);

  // Overrides apply on top of --kv, per side.
  s = must_parse("bf16", "-2:k=int8,28-:v=fp8");
  for (int l = 0; l < 30; ++l) {
    EXPECT_EQ(s.k[l], l <= 2 ? KvType::kInt8 : KvType::kBF16) << l;
    EXPECT_EQ(s.v[l], l >= 28 ? KvType::kFP8 : KvType::kBF16) << l;
  }

  // K and V ranges may coincide: only ranges of one side must not overlap.
  s = must_parse("", "0-3:k=bf16,0-3:v=fp8");
  for (int l = 0; l < 30; ++l) {
    EXPECT_EQ(s.k[l], l <= 3 ? KvType::kBF16 : KvType::kF32) << l;
    EXPECT_EQ(s.v[l], l <= 3 ? KvType::kFP8 : KvType::kF32) << l;
  }

  // Single layers and the last layer.
  s = must_parse("fp8", "7:int8,29:bf16");
  for (int l = 0; l < 30; ++l) EXPECT_EQ(s.k[l], l == 7 ? KvType::kInt8 : l == 29 ? KvType::kBF16 : KvType::kFP8) << l;
  EXPECT_EQ(s.describe(), "0-6:fp8,7-7:int8,8-28:fp8,29-29:bf16");
}

TEST(KvSpecParse, Errors) {
  std::string m;
  m = must_fail("", "0-3:bf16,3-5:fp8");
  EXPECT_NE(m.find("--kv-layers"), std::string::npos) << m;
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;
  EXPECT_NE(m.find("3"), std::string::npos) << m;
  m = must_fail("", "0-3:k=bf16,2:k=fp8");
  EXPECT_NE(m.find("--kv-layers"), std::string::npos) << m;
  m = must_fail("", "0-3:bf16,1:v=fp8");  // "bf16" already set V of layer 1
  EXPECT_NE(m.find("--kv-layers"), std::string::npos) << m;

  m = must_fail("", "0-40:fp8");
  EXPECT_NE(m.find("--kv-layers"), std::string::npos) << m;
  EXPECT_NE(m.find("30"), std::string::npos) << m;
  m = must_fail("", "30:fp8");
  EXPECT_NE(m.find("--kv-layers"), std::string::npos) << m;
  must_parse("", "29:fp8");

  m = must_fail("fp16", "");
  EXPECT_NE(m.find("--kv"), std::string::npos) << m;
  EXPECT_NE(m.find("fp16"), std::string::npos) << m;
  m = must_fail("k=fp16", "");
  EXPECT_NE(m.find("--kv"), std::string::npos) << m;
  m = must_fail("", "0-3:fp16");
  EXPECT_NE(m.find("--kv-layers"), std::string::npos) << m;
  EXPECT_NE(m.find("fp16"), std::string::npos) << m;

  m = must_fail("k=bf16,k=fp8", "");
  EXPECT_NE(m.find("--kv"), std::string::npos) << m;
  m = must_fail("fp8,v=bf16", "");  // "fp8" already gave V
  EXPECT_NE(m.find("--kv"), std::string::npos) << m;

  // Garbage. (An empty --kv or --kv-layers means "not given" and is accepted; an empty item is not.)
  for (const char* kv : {",", ":", "k=", "v=", "fp8,", ",fp8", "K=bf16", "k:bf16", "bf16 ", "k=bf16;v=fp8"}) {
    m = must_fail(kv, "");
    EXPECT_NE(m.find("--kv"), std::string::npos) << kv << ": " << m;
  }
  for (const char* layers : {":", ",", "0-3:bf16,", "a-b:fp8", "3-1:fp8", "-:fp8", "0-3", "0-3:", ":fp8", "1-2-3:fp8",
                             "x:fp8", " 1:fp8", "1 :fp8", "+1:fp8", "0-3:k=", "99999999:fp8"}) {
    m = must_fail("", layers);
    EXPECT_NE(m.find("--kv-layers"), std::string::npos) << layers << ": " << m;
  }
}

TEST(KvSpecParse, LayerRange) {
  int lo = -1, hi = -1;
  ASSERT_TRUE(parse_layer_range("5", 30, &lo, &hi).ok());
  EXPECT_EQ(lo, 5); EXPECT_EQ(hi, 5);
  ASSERT_TRUE(parse_layer_range("3-", 30, &lo, &hi).ok());
  EXPECT_EQ(lo, 3); EXPECT_EQ(hi, 29);
  ASSERT_TRUE(parse_layer_range("-2", 30, &lo, &hi).ok());
  EXPECT_EQ(lo, 0); EXPECT_EQ(hi, 2);
  ASSERT_TRUE(parse_layer_range("0-29", 30, &lo, &hi).ok());
  EXPECT_EQ(lo, 0); EXPECT_EQ(hi, 29);
  ASSERT_TRUE(parse_layer_range("4-4", 30, &lo, &hi).ok());
  EXPECT_EQ(lo, 4); EXPECT_EQ(hi, 4);
  for (const char* bad : {"", "-", "30", "0-30", "3-1", "a", "1-b", "-1-2", "1.5", "29-"}) {
    int l = 0, h = 0;
    const bool ok = parse_layer_range(bad, 30, &l, &h).ok();
    if (std::string(bad) == "29-") {
      EXPECT_TRUE(ok);  // 29..29
      EXPECT_EQ(l, 29); EXPECT_EQ(h, 29);
    } else {
      EXPECT_FALSE(ok) << "'" << bad << "' accepted as [" << l << ", " << h << "]";
    }
  }
}

TEST(KvSpecParse, BytesPerToken) {
  // n_heads 3, head_dim 64: f32 row 768 bytes, bf16 384, fp8 / int8 192 + 3 scales * 4 = 204.
  EXPECT_EQ(KvSpec{}.bytes_per_token(3, 64), 0u);
  EXPECT_EQ(must_parse("", "").bytes_per_token(3, 64), 30u * (768 + 768));
  EXPECT_EQ(must_parse("bf16", "").bytes_per_token(3, 64), 30u * (384 + 384));
  EXPECT_EQ(must_parse("fp8", "").bytes_per_token(3, 64), 30u * (204 + 204));
  EXPECT_EQ(must_parse("int8", "").bytes_per_token(3, 64), 30u * (204 + 204));
  EXPECT_EQ(must_parse("k=bf16,v=fp8", "").bytes_per_token(3, 64), 30u * (384 + 204));
  EXPECT_EQ(must_parse("k=int8", "").bytes_per_token(3, 64), 30u * (204 + 768));
  EXPECT_EQ(must_parse("", "0-3:bf16,4-:fp8").bytes_per_token(3, 64), 4u * (384 + 384) + 26u * (204 + 204));
  EXPECT_EQ(must_parse("", "-2:k=int8").bytes_per_token(3, 64), 3u * (204 + 768) + 27u * (768 + 768));
}

// Fuzz: random strings over the flags' alphabet (and some mutations of valid specs) never crash,
// and either parse into a full spec or fail as a usage error naming the flag.
TEST(KvSpecParse, FuzzNeverCrashes) {
  std::mt19937 rng(77);
  const std::string alphabet = "0123456789-:,=kvfbintp8316 \x01\xff";
  const std::vector<std::string> seeds = {"fp8", "k=bf16,v=fp8", "0-3:bf16,4-:fp8", "-2:k=int8", "5:v=f32"};
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    if (i % 2) {
      s = seeds[rng() % seeds.size()];
      for (int m = 0, n = 1 + (int)(rng() % 4); m < n && !s.empty(); ++m) {
        const size_t p = rng() % (s.size() + 1);
        switch (rng() % 3) {
          case 0: s.insert(p, 1, alphabet[rng() % alphabet.size()]); break;
          case 1: if (p < s.size()) s.erase(p, 1); break;
          default: if (p < s.size()) s[p] = alphabet[rng() % alphabet.size()]; break;
        }
      }
    } else {
      for (int n = (int)(rng() % 24); n > 0; --n) s += alphabet[rng() % alphabet.size()];
    }
    const bool as_layers = rng() % 2;
    auto r = as_layers ? parse_kv_spec("", s, 30) : parse_kv_spec(s, "", 30);
    if (r.ok()) {
      ++ok;
      EXPECT_EQ(r->k.size(), 30u);
      EXPECT_EQ(r->v.size(), 30u);
    } else {
      EXPECT_EQ(r.error().kind, ErrorKind::kUsage) << s;
      EXPECT_NE(r.error().message.find(as_layers ? "--kv-layers" : "--kv"), std::string::npos) << s << ": "
                                                                                               << r.error().message;
    }
  }
  EXPECT_GT(ok, 100);  // the mutations do reach valid specs, so both branches are exercised
}
