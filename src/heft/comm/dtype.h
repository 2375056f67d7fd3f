// Element types and reduction operators of the collectives, and their names.
// f16 and bf16 are stored as raw 16-bit patterns; reductions on them compute in f32 and
// round to nearest-even once per step, as NCCL and Gloo do. Integer reductions wrap modulo
// 2^bits (sum and product as C++ unsigned arithmetic: what Gloo gives, without the undefined
// behaviour of signed overflow); the bitwise ops apply to the integer types only.
// Deliberately left out: complex types; bool (Gloo refuses it for every op; the Python
// backend reduces it as i32); unsigned types wider than 8 bits (torch has none that
// torch.distributed reduces); premultiplied sum (a sum after a local scale: callers scale).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace heft::comm {

// New values go at the end: the numbers travel in call signatures and choice records.
enum class DataType : uint8_t { f32, f64, f16, bf16, i32, i64, i8, u8, i16 };
enum class ReduceOp : uint8_t { sum, avg, min, max, product, band, bor, bxor };

// Every type and every operator.
constexpr DataType kEveryDataType[] = {DataType::f32, DataType::f64, DataType::f16,
                                       DataType::bf16, DataType::i8,  DataType::u8,
                                       DataType::i16, DataType::i32, DataType::i64};
constexpr ReduceOp kEveryReduceOp[] = {ReduceOp::sum,     ReduceOp::avg,  ReduceOp::min,
                                       ReduceOp::max,     ReduceOp::product,
                                       ReduceOp::band,    ReduceOp::bor,  ReduceOp::bxor};

// The six types and four operators of the first release, under their old names: sweeps
// that feed signed values and sums beyond 8 bits use them (every op here applies to every
// type here). New code that means "all" uses kEveryDataType / kEveryReduceOp.
constexpr DataType kAllDataTypes[] = {DataType::f32, DataType::f64, DataType::f16,
                                      DataType::bf16, DataType::i32, DataType::i64};
constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min,
                                      ReduceOp::max};

// Bytes per element.
size_t element_size(DataType t);

// i8, u8, i16, i32, i64.
bool is_integral_type(DataType t);

// band, bor, bxor: defined on the integer types only.
bool is_bitwise(ReduceOp op);

// Whether `op` applies to `t`: every op but the bitwise ones applies to every type.
bool op_applies(ReduceOp op, DataType t);

// Throws heft::InvalidArgument naming `what` (the collective), the op and the type when
// `op` does not apply to `t` (e.g. "allreduce: reduce op band needs an integer type, got
// f32 ..."), or when either value is outside its enum. Collectives call it before they
// communicate, so every rank refuses the call and no peer is left waiting.
void require_op_applies(ReduceOp op, DataType t, const char* what);

// "f32", "i8", "u8", "i16", ..., "sum", "product", "band", "bor", "bxor", ...
const char* name(DataType t);
const char* name(ReduceOp op);

// Parse the names above; throw heft::InvalidArgument listing the accepted names.
DataType parse_data_type(const std::string& s);
ReduceOp parse_reduce_op(const std::string& s);

// One element of type t at p, converted from / to double (rounded as t rounds; integers
// truncate toward zero, then wrap to the type's width: -1 written as u8 is 255; |v| must be
// below 2^63). For tests, benchmarks and closed-form checks, not for hot loops.
void write_element(void* p, DataType t, double v);
double read_element(const void* p, DataType t);

// IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN). Inline so the
// reduction loops over f16 / bf16 vectorise.

namespace detail {
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = detail::bits_of(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  // A select rather than an early return, so loops over it vectorise.
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float bf16_to_float(uint16_t b) { return detail::float_of(static_cast<uint32_t>(b) << 16); }

// Half precision: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Both directions compute
// every case and combine them with integer masks, not branches or selects: the compiler
// will not speculate the floating-point step of the subnormal case into a select (it might
// trap), and a branch keeps the loops over these from vectorising.
namespace detail {
inline uint32_t all_ones_if(bool c) { return 0u - static_cast<uint32_t>(c); }
inline uint32_t pick(uint32_t mask, uint32_t if_set, uint32_t otherwise) {
  return (if_set & mask) | (otherwise & ~mask);
}
}  // namespace detail

inline uint16_t float_to_half(float f) {
  using detail::all_ones_if;
  using detail::pick;
  const uint32_t u = detail::bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  // Normal result: rebias the exponent (-112 << 23) and round to nearest even.
  const uint32_t normal = (abs + 0xc8000fffu + ((abs >> 13) & 1u)) >> 13;
  // Subnormal or zero: adding 0.5 (as float) makes the FPU round the mantissa to half's
  // subnormal grid.
  const uint32_t subnormal = detail::bits_of(detail::float_of(abs) + 0.5f) - 0x3f000000u;
  uint32_t r = pick(all_ones_if(abs < 0x38800000u), subnormal, normal);
  r = pick(all_ones_if(abs >= 0x477ff000u), 0x7c00u, r);  // overflow -> inf
  r = pick(all_ones_if(abs > 0x7f800000u), 0x7e00u, r);   // NaN -> the quiet NaN
  return static_cast<uint16_t>(sign | (r & 0x7fffu));
}

inline float half_to_float(uint16_t h) {
  using detail::all_ones_if;
  using detail::pick;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  const uint32_t normal = ((exp + 112) << 23) | (mant << 13);
  const uint32_t special = 0x7f800000u | (mant << 13);  // inf / NaN
  // Subnormal or zero: value = mant * 2^-24.
  const uint32_t subnormal =
      detail::bits_of(static_cast<float>(static_cast<int32_t>(mant)) * 5.9604644775390625e-8f);
  uint32_t r = pick(all_ones_if(exp == 0), subnormal, normal);
  r = pick(all_ones_if(exp == 0x1f), special, r);
  return detail::float_of(sign | r);
}

}  // namespace heft::comm
