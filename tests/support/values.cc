#include "support/values.h"

#include <cstring>

#include "heft/error.h"

namespace heft::test {

using comm::DataType;

void Buffer::set(size_t i, double v) {
  void* p = at(i);
  switch (type_) {
    case DataType::f32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case DataType::f64: std::memcpy(p, &v, 8); break;
    case DataType::i32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case DataType::i64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case DataType::f16: { uint16_t x = comm::float_to_half(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case DataType::bf16: { uint16_t x = comm::float_to_bf16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
  }
}

double Buffer::get(size_t i) const {
  const void* p = bytes_.data() + i * comm::element_size(type_);
  switch (type_) {
    case DataType::f32: { float x; std::memcpy(&x, p, 4); return x; }
    case DataType::f64: { double x; std::memcpy(&x, p, 8); return x; }
    case DataType::i32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::i64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DataType::f16: { uint16_t x; std::memcpy(&x, p, 2); return comm::half_to_float(x); }
    case DataType::bf16: { uint16_t x; std::memcpy(&x, p, 2); return comm::bf16_to_float(x); }
  }
  return 0;
}

void fail_values(const std::string& what, size_t first_bad, double got, double want,
                 double largest_diff, size_t bad) {
  throw Error(what + ": " + std::to_string(bad) + " elements wrong; first at index " +
              std::to_string(first_bad) + " (got " + std::to_string(got) + ", expected " +
              std::to_string(want) + "); largest difference " + std::to_string(largest_diff));
}

}  // namespace heft::test
