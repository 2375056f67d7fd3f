// ctest-labels: unit
// dtype.h: f16 and bf16 conversions (round to nearest even, overflow to infinity,
// subnormals, NaN stays NaN, exact round trips of every 16-bit pattern that is a number);
// every type's and op's name, size and parse; integer elements wrap to their width; which
// op applies to which type, and the refusal's message.
#include "heft/comm/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include "heft/error.h"

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

// float_to_half against rounding done in double: |f| in units of its half ulp, rounded to
// nearest even by nearbyint, for one float pattern in every 4099 (~1M, every exponent).
uint16_t half_by_double(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;
  const int e = a == 0 ? -14 : std::max(static_cast<int>(std::floor(std::log2(a))), -14);
  const double q = std::nearbyint(std::ldexp(a, 10 - e));  // mantissa with its leading bit
  if (e == -14 && q < 1024) return sign | static_cast<uint16_t>(q);  // subnormal (or 1024)
  return sign | static_cast<uint16_t>(((e + 15) << 10) + static_cast<int>(q) - 1024);
}

TEST(Dtype, FloatToHalfMatchesRoundingInDouble) {
  int bad = 0;
  uint32_t first_bad = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
    const float f = from_bits(static_cast<uint32_t>(b));
    if (float_to_half(f) != half_by_double(f) && bad++ == 0) first_bad = static_cast<uint32_t>(b);
  }
  EXPECT_EQ(bad, 0) << "first at float bits 0x" << std::hex << first_bad;
}

TEST(Dtype, EveryTypeAndOpHasADistinctNameThatParsesBack) {
  std::set<std::string> names;
  for (DataType t : kEveryDataType) {
    EXPECT_EQ(parse_data_type(name(t)), t);
    names.insert(name(t));
  }
  for (ReduceOp op : kEveryReduceOp) {
    EXPECT_EQ(parse_reduce_op(name(op)), op);
    names.insert(name(op));
  }
  EXPECT_EQ(names.size(), std::size(kEveryDataType) + std::size(kEveryReduceOp));
  EXPECT_EQ(std::size(kEveryDataType), 9u);
  EXPECT_EQ(std::size(kEveryReduceOp), 8u);
  EXPECT_STREQ(name(DataType::i8), "i8");
  EXPECT_STREQ(name(DataType::u8), "u8");
  EXPECT_STREQ(name(DataType::i16), "i16");
  EXPECT_STREQ(name(ReduceOp::product), "product");
  EXPECT_STREQ(name(ReduceOp::bxor), "bxor");
  EXPECT_EQ(element_size(DataType::i8), 1u);
  EXPECT_EQ(element_size(DataType::u8), 1u);
  EXPECT_EQ(element_size(DataType::i16), 2u);
  EXPECT_EQ(element_size(DataType::i64), 8u);
}

TEST(Dtype, ParseErrorsListEveryAcceptedName) {
  try {
    parse_data_type("int8");
    ADD_FAILURE() << "int8 parsed";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    for (DataType t : kEveryDataType) EXPECT_NE(what.find(name(t)), std::string::npos) << what;
    EXPECT_NE(what.find("'int8'"), std::string::npos) << what;
  }
  try {
    parse_reduce_op("prod");
    ADD_FAILURE() << "prod parsed";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    for (ReduceOp op : kEveryReduceOp) EXPECT_NE(what.find(name(op)), std::string::npos) << what;
  }
}

TEST(Dtype, IntegerElementsTruncateAndWrapToTheirWidth) {
  uint8_t buf[8];
  write_element(buf, DataType::u8, -1);
  EXPECT_EQ(buf[0], 255);
  EXPECT_EQ(read_element(buf, DataType::u8), 255);
  write_element(buf, DataType::i8, 200);
  EXPECT_EQ(read_element(buf, DataType::i8), -56);
  write_element(buf, DataType::i8, -2.9);  // toward zero
  EXPECT_EQ(read_element(buf, DataType::i8), -2);
  write_element(buf, DataType::i16, 40000);
  EXPECT_EQ(read_element(buf, DataType::i16), -25536);
  write_element(buf, DataType::i32, 4294967297.0);  // 2^32 + 1
  EXPECT_EQ(read_element(buf, DataType::i32), 1);
  write_element(buf, DataType::i64, -3);
  EXPECT_EQ(read_element(buf, DataType::i64), -3);
  for (DataType t : kEveryDataType) {  // small integers are exact in every type
    write_element(buf, t, 100);
    EXPECT_EQ(read_element(buf, t), 100) << name(t);
  }
}

TEST(Dtype, BitwiseOpsApplyToIntegerTypesOnly) {
  for (DataType t : kEveryDataType) {
    const bool integer = t == DataType::i8 || t == DataType::u8 || t == DataType::i16 ||
                         t == DataType::i32 || t == DataType::i64;
    EXPECT_EQ(is_integral_type(t), integer) << name(t);
    for (ReduceOp op : kEveryReduceOp) {
      const bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
      EXPECT_EQ(is_bitwise(op), bitwise) << name(op);
      EXPECT_EQ(op_applies(op, t), integer || !bitwise) << name(op) << " " << name(t);
      if (op_applies(op, t)) {
        EXPECT_NO_THROW(require_op_applies(op, t, "allreduce"));
      }
    }
  }
  // The first release's sweeps: every op there applies to every type there.
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps) EXPECT_TRUE(op_applies(op, t));
}

TEST(Dtype, RefusalNamesTheCollectiveTheOpAndTheType) {
  try {
    require_op_applies(ReduceOp::bxor, DataType::bf16, "reduce_scatter");
    ADD_FAILURE() << "bxor on bf16 accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("reduce_scatter: ", 0), 0u) << what;
    EXPECT_NE(what.find("bxor"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16"), std::string::npos) << what;
  }
  EXPECT_THROW(require_op_applies(static_cast<ReduceOp>(99), DataType::f32, "x"),
               InvalidArgument);
  EXPECT_THROW(require_op_applies(ReduceOp::sum, static_cast<DataType>(99), "x"),
               InvalidArgument);
  EXPECT_FALSE(op_applies(ReduceOp::sum, static_cast<DataType>(99)));
}

}  // namespace
}  // namespace heft::comm
