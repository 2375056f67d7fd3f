#include "heft/comm/dtype.h"

#include <cstring>

#include "heft/error.h"

namespace heft::comm {

namespace {

bool known(DataType t) { return static_cast<unsigned>(t) <= static_cast<unsigned>(DataType::i16); }
bool known(ReduceOp op) {
  return static_cast<unsigned>(op) <= static_cast<unsigned>(ReduceOp::bxor);
}

std::string accepted_names(bool types) {
  std::string s;
  auto add = [&](const char* n) { s += (s.empty() ? "" : ", ") + std::string(n); };
  if (types)
    for (DataType t : kEveryDataType) add(name(t));
  else
    for (ReduceOp op : kEveryReduceOp) add(name(op));
  return s;
}

// v truncated toward zero, then wrapped to T's width (two's complement, as C++20 defines
// the conversion and GCC / Clang always did).
template <typename T>
void store_integer(void* p, double v) {
  const T x = static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(v)));
  std::memcpy(p, &x, sizeof x);
}

void store_16(void* p, uint16_t x) { std::memcpy(p, &x, 2); }

template <typename T>
double load(const void* p) {
  T x;
  std::memcpy(&x, p, sizeof x);
  return static_cast<double>(x);
}

}  // namespace

size_t element_size(DataType t) {
  switch (t) {
    case DataType::i8: case DataType::u8: return 1;
    case DataType::f16: case DataType::bf16: case DataType::i16: return 2;
    case DataType::f32: case DataType::i32: return 4;
    case DataType::f64: case DataType::i64: return 8;
  }
  throw InvalidArgument("unknown data type " + std::to_string(static_cast<int>(t)));
}

bool is_integral_type(DataType t) {
  switch (t) {
    case DataType::i8: case DataType::u8: case DataType::i16: case DataType::i32:
    case DataType::i64: return true;
    case DataType::f32: case DataType::f64: case DataType::f16: case DataType::bf16: return false;
  }
  return false;
}

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
}

bool op_applies(ReduceOp op, DataType t) {
  return known(op) && known(t) && (!is_bitwise(op) || is_integral_type(t));
}

void require_op_applies(ReduceOp op, DataType t, const char* what) {
  if (!known(t))
    throw InvalidArgument(std::string(what) + ": unknown data type " +
                          std::to_string(static_cast<int>(t)) + " (expected one of " +
                          accepted_names(true) + ")");
  if (!known(op))
    throw InvalidArgument(std::string(what) + ": unknown reduce op " +
                          std::to_string(static_cast<int>(op)) + " (expected one of " +
                          accepted_names(false) + ")");
  if (!op_applies(op, t))
    throw InvalidArgument(std::string(what) + ": reduce op " + name(op) +
                          " needs an integer type (i8, u8, i16, i32, i64), got " + name(t) +
                          " (as Gloo, heft does not apply bitwise ops to floating point)");
}

const char* name(DataType t) {
  switch (t) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::f16: return "f16";
    case DataType::bf16: return "bf16";
    case DataType::i32: return "i32";
    case DataType::i64: return "i64";
    case DataType::i8: return "i8";
    case DataType::u8: return "u8";
    case DataType::i16: return "i16";
  }
  return "?";
}

const char* name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::product: return "product";
    case ReduceOp::band: return "band";
    case ReduceOp::bor: return "bor";
    case ReduceOp::bxor: return "bxor";
  }
  return "?";
}

DataType parse_data_type(const std::string& s) {
  for (DataType t : kEveryDataType)
    if (s == name(t)) return t;
  throw InvalidArgument("unknown dtype '" + s + "': expected one of " + accepted_names(true));
}

ReduceOp parse_reduce_op(const std::string& s) {
  for (ReduceOp op : kEveryReduceOp)
    if (s == name(op)) return op;
  throw InvalidArgument("unknown reduce op '" + s + "': expected one of " +
                        accepted_names(false));
}

void write_element(void* p, DataType t, double v) {
  switch (t) {
    case DataType::f32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); return; }
    case DataType::f64: std::memcpy(p, &v, 8); return;
    case DataType::f16: return store_16(p, float_to_half(static_cast<float>(v)));
    case DataType::bf16: return store_16(p, float_to_bf16(static_cast<float>(v)));
    case DataType::i8: return store_integer<int8_t>(p, v);
    case DataType::u8: return store_integer<uint8_t>(p, v);
    case DataType::i16: return store_integer<int16_t>(p, v);
    case DataType::i32: return store_integer<int32_t>(p, v);
    case DataType::i64: return store_integer<int64_t>(p, v);
  }
}

double read_element(const void* p, DataType t) {
  switch (t) {
    case DataType::f32: return load<float>(p);
    case DataType::f64: return load<double>(p);
    case DataType::f16: { uint16_t x; std::memcpy(&x, p, 2); return half_to_float(x); }
    case DataType::bf16: { uint16_t x; std::memcpy(&x, p, 2); return bf16_to_float(x); }
    case DataType::i8: return load<int8_t>(p);
    case DataType::u8: return load<uint8_t>(p);
    case DataType::i16: return load<int16_t>(p);
    case DataType::i32: return load<int32_t>(p);
    case DataType::i64: return load<int64_t>(p);
  }
  return 0;
}

}  // namespace heft::comm
