// ctest-labels: unit
// f16 and bf16 conversions (dtype.h): round to nearest even, overflow to infinity,
// subnormals, NaN stays NaN, and exact round trips of every 16-bit pattern that is a number.
#include "heft/comm/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace heft::comm {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Dtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1.0).
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even (1 + 2^-6).
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000)), 0x3f82);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001)), 0x3f81);  // just above halfway: up
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
}

TEST(Dtype, HalfRoundsOverflowsAndKeepsSubnormals) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);                     // the largest half
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);                     // rounds up to infinity
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);        // the smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -26)), 0x0000);        // below half of it: zero
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // halfway: to even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
}

TEST(Dtype, EveryNumberPatternRoundTrips) {
  int bad_half = 0, bad_bf16 = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float fh = half_to_float(h), fb = bf16_to_float(h);
    if (!std::isnan(fh)) bad_half += float_to_half(fh) != h;
    if (!std::isnan(fb)) bad_bf16 += float_to_bf16(fb) != h;
  }
  EXPECT_EQ(bad_half, 0);
  EXPECT_EQ(bad_bf16, 0);
}

}  // namespace
}  // namespace heft::comm
