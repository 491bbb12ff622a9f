#include <gtest/gtest.h>

#include "core/fp16.h"

TEST(Fp16, RoundTripsEveryFiniteHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t x = (uint16_t)h;
    if (((x >> 10) & 0x1f) == 0x1f) continue;  // inf/nan
    EXPECT_EQ(ouro::fp32_to_fp16(ouro::fp16_to_fp32(x)), x) << h;
  }
}
