#include "heft/comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "heft/comm/cpu.h"
#include "heft/error.h"

namespace heft::comm {

namespace {

// Integer sum and product wrap modulo 2^bits: computed in an unsigned type at least as wide
// as int (no signed overflow, no promotion to signed int), then narrowed.
template <typename T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct Sum {
  template <typename T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    else
      return a + b;
  }
};
struct Product {
  template <typename T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    else
      return a * b;
  }
};
struct Min {
  template <typename T> static T apply(T a, T b) { return std::min(a, b); }
};
struct Max {
  template <typename T> static T apply(T a, T b) { return std::max(a, b); }
};
// Bitwise: integer types only (loop_integer).
struct BitAnd {
  template <typename T> static T apply(T a, T b) { return static_cast<T>(a & b); }
};
struct BitOr {
  template <typename T> static T apply(T a, T b) { return static_cast<T>(a | b); }
};
struct BitXor {
  template <typename T> static T apply(T a, T b) { return static_cast<T>(a ^ b); }
};

// The loops, written once and inlined into a portable and an AVX2 entry point below, where
// the compiler vectorises each for its instruction set.

template <typename T, typename Op>
__attribute__((always_inline)) inline void loop_native(void* dst, const void* a, const void* b,
                                                       size_t n) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(x[i], y[i]);
}

// IEEE half: widen to f32, reduce, round back, in blocks so the f32 temporaries stay in
// registers / L1 and the loops vectorise.
template <typename Op>
__attribute__((always_inline)) inline void loop_f16(void* dst, const void* a, const void* b,
                                                    size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  constexpr size_t kBlock = 256;
  float u[kBlock], v[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = std::min(kBlock, n - off);
    for (size_t i = 0; i < m; ++i) u[i] = half_to_float(x[off + i]);
    for (size_t i = 0; i < m; ++i) v[i] = half_to_float(y[off + i]);
    for (size_t i = 0; i < m; ++i) u[i] = Op::apply(u[i], v[i]);
    for (size_t i = 0; i < m; ++i) d[off + i] = float_to_half(u[i]);
  }
}

// bf16 fused and branch-free (the NaN check is a select), so it vectorises: widening is a
// shift, narrowing a rounding add.
template <typename Op>
__attribute__((always_inline)) inline void loop_bf16(void* dst, const void* a, const void* b,
                                                     size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float r = Op::apply(bf16_to_float(x[i]), bf16_to_float(y[i]));
    uint32_t u;
    std::memcpy(&u, &r, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
    d[i] = static_cast<uint16_t>(is_nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

// The integer types; a floating-point `t` never gets here (require_op_applies refused it).
template <typename Op>
__attribute__((always_inline)) inline void loop_integer(void* d, const void* a, const void* b,
                                                        size_t n, DataType t) {
  switch (t) {
    case DataType::i8: return loop_native<int8_t, Op>(d, a, b, n);
    case DataType::u8: return loop_native<uint8_t, Op>(d, a, b, n);
    case DataType::i16: return loop_native<int16_t, Op>(d, a, b, n);
    case DataType::i32: return loop_native<int32_t, Op>(d, a, b, n);
    case DataType::i64: return loop_native<int64_t, Op>(d, a, b, n);
    case DataType::f32: case DataType::f64: case DataType::f16: case DataType::bf16: return;
  }
}

// Every type: the arithmetic operators.
template <typename Op>
__attribute__((always_inline)) inline void loop_typed(void* d, const void* a, const void* b,
                                                      size_t n, DataType t) {
  switch (t) {
    case DataType::f32: return loop_native<float, Op>(d, a, b, n);
    case DataType::f64: return loop_native<double, Op>(d, a, b, n);
    case DataType::f16: return loop_f16<Op>(d, a, b, n);
    case DataType::bf16: return loop_bf16<Op>(d, a, b, n);
    case DataType::i8: case DataType::u8: case DataType::i16: case DataType::i32:
    case DataType::i64: return loop_integer<Op>(d, a, b, n, t);
  }
}

__attribute__((always_inline)) inline void loop_op(void* d, const void* a, const void* b, size_t n,
                                                   DataType t, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return loop_typed<Sum>(d, a, b, n, t);
    case ReduceOp::min: return loop_typed<Min>(d, a, b, n, t);
    case ReduceOp::max: return loop_typed<Max>(d, a, b, n, t);
    case ReduceOp::product: return loop_typed<Product>(d, a, b, n, t);
    case ReduceOp::band: return loop_integer<BitAnd>(d, a, b, n, t);
    case ReduceOp::bor: return loop_integer<BitOr>(d, a, b, n, t);
    case ReduceOp::bxor: return loop_integer<BitXor>(d, a, b, n, t);
  }
}

void reduce_portable(void* d, const void* a, const void* b, size_t n, DataType t, ReduceOp op) {
  loop_op(d, a, b, n, t, op);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void reduce_avx2(void* d, const void* a, const void* b,
                                                      size_t n, DataType t, ReduceOp op) {
  loop_op(d, a, b, n, t, op);
}
#endif

void reduce_cached(void* d, const void* a, const void* b, size_t n, DataType t, ReduceOp op) {
#if defined(__x86_64__)
  if (kernel_isa() == KernelIsa::kAvx2) return reduce_avx2(d, a, b, n, t, op);
#endif
  reduce_portable(d, a, b, n, t, op);
}

template <typename T>
void divide(void* data, size_t n, int by) {
  T* d = static_cast<T*>(data);
  // 8- and 16-bit integers divide as int, so a world size beyond their range still divides.
  using Divisor = std::conditional_t<std::is_integral_v<T> && (sizeof(T) < sizeof(int)), int, T>;
  const Divisor k = static_cast<Divisor>(by);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / k);
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide_16(void* data, size_t n, int by) {
  uint16_t* d = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(Widen(d[i]) / static_cast<float>(by));
}

}  // namespace

void reduce_to(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceOp op,
               StoreHint hint) {
  require_op_applies(op, t, "reduce");
  if (hint == StoreHint::kCached) return reduce_cached(dst, a, b, count, t, op);
  // Streaming: reduce a block into a buffer that stays in L1, then stream it out.
  const size_t es = element_size(t);
  constexpr size_t kBlockBytes = 4096;
  alignas(64) uint8_t block[kBlockBytes];
  const size_t per = kBlockBytes / es;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (size_t first = 0; first < count; first += per) {
    const size_t m = std::min(per, count - first);
    reduce_cached(block, x + first * es, y + first * es, m, t, op);
    copy_bytes(d + first * es, block, m * es, StoreHint::kStreaming);
  }
}

void finish_average(void* data, size_t count, DataType t, ReduceOp op, int world_size) {
  if (op != ReduceOp::avg || world_size == 1) return;
  switch (t) {
    case DataType::f32: return divide<float>(data, count, world_size);
    case DataType::f64: return divide<double>(data, count, world_size);
    case DataType::i32: return divide<int32_t>(data, count, world_size);
    case DataType::i64: return divide<int64_t>(data, count, world_size);
    case DataType::i8: return divide<int8_t>(data, count, world_size);
    case DataType::u8: return divide<uint8_t>(data, count, world_size);
    case DataType::i16: return divide<int16_t>(data, count, world_size);
    case DataType::f16: return divide_16<half_to_float, float_to_half>(data, count, world_size);
    case DataType::bf16: return divide_16<bf16_to_float, float_to_bf16>(data, count, world_size);
  }
}

}  // namespace heft::comm
