#include "heft/comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "heft/comm/cpu.h"
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

template <typename Op>
__attribute__((always_inline)) inline void loop_typed(void* d, const void* a, const void* b,
                                                      size_t n, DataType t) {
  switch (t) {
    case DataType::f32: return loop_native<float, Op>(d, a, b, n);
    case DataType::f64: return loop_native<double, Op>(d, a, b, n);
    case DataType::i32: return loop_native<int32_t, Op>(d, a, b, n);
    case DataType::i64: return loop_native<int64_t, Op>(d, a, b, n);
    case DataType::f16: return loop_f16<Op>(d, a, b, n);
    case DataType::bf16: return loop_bf16<Op>(d, a, b, n);
  }
}

__attribute__((always_inline)) inline void loop_op(void* d, const void* a, const void* b, size_t n,
                                                   DataType t, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return loop_typed<Sum>(d, a, b, n, t);
    case ReduceOp::min: return loop_typed<Min>(d, a, b, n, t);
    case ReduceOp::max: return loop_typed<Max>(d, a, b, n, t);
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
  const T k = static_cast<T>(by);
  for (size_t i = 0; i < n; ++i) d[i] = d[i] / k;
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide_16(void* data, size_t n, int by) {
  uint16_t* d = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(Widen(d[i]) / static_cast<float>(by));
}

}  // namespace

void reduce_to(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceOp op,
               StoreHint hint) {
  if (static_cast<unsigned>(t) > static_cast<unsigned>(DataType::i64))
    throw InvalidArgument("reduce: unknown data type");
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::max))
    throw InvalidArgument("reduce: unknown reduce op");
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
    case DataType::f16: return divide_16<half_to_float, float_to_half>(data, count, world_size);
    case DataType::bf16: return divide_16<bf16_to_float, float_to_bf16>(data, count, world_size);
  }
}

}  // namespace heft::comm
