#include "heft/comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "heft/error.h"

namespace heft::comm {

namespace {

struct Sum {
  template <typename T> static T apply(T a, T b) { return a + b; }
};
struct Min {
  template <typename T> static T apply(T a, T b) { return std::min(a, b); }
};
struct Max {
  template <typename T> static T apply(T a, T b) { return std::max(a, b); }
};

template <typename T, typename Op>
void reduce_native(void* dst, const void* src, size_t n) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(d[i], s[i]);
}

// 16-bit floats: widen to f32, reduce, round back. Blocked so the f32 temporaries stay in
// registers / L1 and the loops vectorise.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), typename Op>
void reduce_16(void* dst, const void* src, size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  constexpr size_t kBlock = 256;
  float a[kBlock], b[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    size_t m = std::min(kBlock, n - off);
    for (size_t i = 0; i < m; ++i) a[i] = Widen(d[off + i]);
    for (size_t i = 0; i < m; ++i) b[i] = Widen(s[off + i]);
    for (size_t i = 0; i < m; ++i) a[i] = Op::apply(a[i], b[i]);
    for (size_t i = 0; i < m; ++i) d[off + i] = Narrow(a[i]);
  }
}

// bf16 fused and branch-free (the NaN check is a select), so it vectorises: widening is a
// shift, narrowing a rounding add.
template <typename Op>
void reduce_bf16(void* dst, const void* src, size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    const float r = Op::apply(bf16_to_float(d[i]), bf16_to_float(s[i]));
    uint32_t u;
    std::memcpy(&u, &r, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
    d[i] = static_cast<uint16_t>(is_nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

template <typename Op>
void reduce_typed(void* dst, const void* src, size_t n, DataType t) {
  switch (t) {
    case DataType::f32: return reduce_native<float, Op>(dst, src, n);
    case DataType::f64: return reduce_native<double, Op>(dst, src, n);
    case DataType::i32: return reduce_native<int32_t, Op>(dst, src, n);
    case DataType::i64: return reduce_native<int64_t, Op>(dst, src, n);
    case DataType::f16: return reduce_16<half_to_float, float_to_half, Op>(dst, src, n);
    case DataType::bf16: return reduce_bf16<Op>(dst, src, n);
  }
  throw InvalidArgument("reduce: unknown data type");
}

template <typename T>
void divide(void* data, size_t n, int by) {
  T* d = static_cast<T*>(data);
  const T k = static_cast<T>(by);
  for (size_t i = 0; i < n; ++i) d[i] = d[i] / k;
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide_16(void* data, size_t n, int by) {
  uint16_t* d = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(Widen(d[i]) / static_cast<float>(by));
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t count, DataType t, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return reduce_typed<Sum>(dst, src, count, t);
    case ReduceOp::min: return reduce_typed<Min>(dst, src, count, t);
    case ReduceOp::max: return reduce_typed<Max>(dst, src, count, t);
  }
  throw InvalidArgument("reduce: unknown reduce op");
}

void finish_average(void* data, size_t count, DataType t, ReduceOp op, int world_size) {
  if (op != ReduceOp::avg || world_size == 1) return;
  switch (t) {
    case DataType::f32: return divide<float>(data, count, world_size);
    case DataType::f64: return divide<double>(data, count, world_size);
    case DataType::i32: return divide<int32_t>(data, count, world_size);
    case DataType::i64: return divide<int64_t>(data, count, world_size);
    case DataType::f16: return divide_16<half_to_float, float_to_half>(data, count, world_size);
    case DataType::bf16: return divide_16<bf16_to_float, float_to_bf16>(data, count, world_size);
  }
}

}  // namespace heft::comm
