// Element types and reduction operators of the collectives, and their names.
// f16 and bf16 are stored as raw 16-bit patterns; reductions on them compute in f32 and
// round to nearest-even once per step, as NCCL and Gloo do.
// Deliberately left out: complex types, bitwise ops, products.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace heft::comm {

enum class DataType : uint8_t { f32, f64, f16, bf16, i32, i64 };
enum class ReduceOp : uint8_t { sum, avg, min, max };

constexpr DataType kAllDataTypes[] = {DataType::f32, DataType::f64, DataType::f16,
                                      DataType::bf16, DataType::i32, DataType::i64};
constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min,
                                      ReduceOp::max};

// Bytes per element.
size_t element_size(DataType t);

// "f32", "sum", ...
const char* name(DataType t);
const char* name(ReduceOp op);

// Parse the names above; throw heft::InvalidArgument listing the accepted names.
DataType parse_data_type(const std::string& s);
ReduceOp parse_reduce_op(const std::string& s);

// IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

}  // namespace heft::comm
