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

void write_element(void* p, DataType t, double v) {
  switch (t) {
    case DataType::f32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); return; }
    case DataType::f64: std::memcpy(p, &v, 8); return;
    case DataType::i32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); return; }
    case DataType::i64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); return; }
    case DataType::f16: { uint16_t x = float_to_half(static_cast<float>(v)); std::memcpy(p, &x, 2); return; }
    case DataType::bf16: { uint16_t x = float_to_bf16(static_cast<float>(v)); std::memcpy(p, &x, 2); return; }
  }
}

double read_element(const void* p, DataType t) {
  switch (t) {
    case DataType::f32: { float x; std::memcpy(&x, p, 4); return x; }
    case DataType::f64: { double x; std::memcpy(&x, p, 8); return x; }
    case DataType::i32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::i64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DataType::f16: { uint16_t x; std::memcpy(&x, p, 2); return half_to_float(x); }
    case DataType::bf16: { uint16_t x; std::memcpy(&x, p, 2); return bf16_to_float(x); }
  }
  return 0;
}

}  // namespace heft::comm
