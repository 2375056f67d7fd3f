#include "heft/comm/dtype.h"

#include <cstring>

#include "heft/error.h"

namespace heft::comm {

size_t element_size(DataType t) {
  switch (t) {
    case DataType::f32: case DataType::i32: return 4;
    case DataType::f64: case DataType::i64: return 8;
    case DataType::f16: case DataType::bf16: return 2;
  }
  throw InvalidArgument("unknown data type " + std::to_string(static_cast<int>(t)));
}

const char* name(DataType t) {
  switch (t) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::f16: return "f16";
    case DataType::bf16: return "bf16";
    case DataType::i32: return "i32";
    case DataType::i64: return "i64";
  }
  return "?";
}

const char* name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "?";
}

DataType parse_data_type(const std::string& s) {
  for (DataType t : kAllDataTypes)
    if (s == name(t)) return t;
  throw InvalidArgument("unknown dtype '" + s + "': expected one of f32, f64, f16, bf16, i32, i64");
}

ReduceOp parse_reduce_op(const std::string& s) {
  for (ReduceOp op : kAllReduceOps)
    if (s == name(op)) return op;
  throw InvalidArgument("unknown reduce op '" + s + "': expected one of sum, avg, min, max");
}

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

uint16_t float_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

// Half precision: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
uint16_t float_to_half(float f) {
  uint32_t u = bits_of(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    // Add 0.5 (as float) so the FPU rounds the mantissa to half's subnormal grid.
    float r = float_of(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (bits_of(r) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // Subnormal or zero: value = mant * 2^-24.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace heft::comm
