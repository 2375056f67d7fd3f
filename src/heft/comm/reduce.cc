#include "heft/comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "heft/comm/cpu.h"
#include "heft/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
// the compiler vectorises each for its instruction set. kBack: from the last element down
// (reduce_order below says when).
//
// The *anchor* is the stream whose vectors a loop aligns to 32 bytes with scalar steps
// first (when its elements are aligned at all): of the streams (stores first, then loads),
// the one whose alignment mod 32 the most streams share. A vector access split across two
// cache lines costs more than one that is not, a store more than a load (on Zen 4 an
// in-place f32 sum ran at 0.8x with dst misaligned), but two split loads per vector cost
// more than one split store: dst = a + b with a and b 16 bytes into a page and dst at
// another offset ran at 0.82-0.85x of the aligned speed with dst aligned, 0.92-0.96x with
// a and b aligned (AMD Zen 5, f32 at 256 KiB).
constexpr uintptr_t kVectorAlign = 32;

inline uintptr_t phase_of(uintptr_t at) { return at % kVectorAlign; }
inline uintptr_t phase(const void* p) { return phase_of(reinterpret_cast<uintptr_t>(p)); }
// The anchor among `streams` (stores first): ties go to the earlier one.
template <size_t N>
inline uintptr_t anchor(const void* const (&streams)[N]) {
  size_t best = 0, best_votes = 0;
  for (size_t i = 0; i < N; ++i) {
    size_t votes = 0;
    for (size_t k = 0; k < N; ++k) votes += phase(streams[k]) == phase(streams[i]);
    if (votes > best_votes) best = i, best_votes = votes;
  }
  return reinterpret_cast<uintptr_t>(streams[best]);
}
// Elements of T from `at` up to the next vector boundary, at most n (0 when T-misaligned).
template <typename T>
inline size_t head_to_align(uintptr_t at, size_t n) {
  return at % sizeof(T) ? 0 : std::min(n, (kVectorAlign - phase_of(at)) % kVectorAlign / sizeof(T));
}
// Elements of T from the last vector boundary up to `end`, at most n (0 when T-misaligned).
template <typename T>
inline size_t tail_to_align(uintptr_t end, size_t n) {
  return end % sizeof(T) ? 0 : std::min(n, phase_of(end) / sizeof(T));
}

template <typename T, typename Op, bool kBack>
__attribute__((always_inline)) inline void loop_native(void* dst, const void* a, const void* b,
                                                       size_t n) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const uintptr_t at = anchor({dst, a, b});
  if constexpr (kBack) {
    const size_t tail = tail_to_align<T>(at + n * sizeof(T), n);
    size_t i = n;
    for (; i > n - tail; --i) d[i - 1] = Op::apply(x[i - 1], y[i - 1]);
    while (i-- > 0) d[i] = Op::apply(x[i], y[i]);
  } else {
    const size_t head = head_to_align<T>(at, n);
    size_t i = 0;
    for (; i < head; ++i) d[i] = Op::apply(x[i], y[i]);
    for (; i < n; ++i) d[i] = Op::apply(x[i], y[i]);
  }
}

// IEEE half: widen to f32, reduce, round back, in blocks so the f32 temporaries stay in
// registers / L1 and the loops vectorise. Always forward (compute-bound: the order of its
// memory accesses does not show).
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
__attribute__((always_inline)) inline uint16_t bf16_op(uint16_t x, uint16_t y) {
  const float r = Op::apply(bf16_to_float(x), bf16_to_float(y));
  uint32_t u;
  std::memcpy(&u, &r, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(is_nan ? ((u >> 16) | 0x40u) : rounded);
}

template <typename Op, bool kBack>
__attribute__((always_inline)) inline void loop_bf16(void* dst, const void* a, const void* b,
                                                     size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  if constexpr (kBack) {
    for (size_t i = n; i-- > 0;) d[i] = bf16_op<Op>(x[i], y[i]);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = bf16_op<Op>(x[i], y[i]);
  }
}

// The integer types; a floating-point `t` never gets here (require_op_applies refused it).
template <typename Op, bool kBack>
__attribute__((always_inline)) inline void loop_integer(void* d, const void* a, const void* b,
                                                        size_t n, DataType t) {
  switch (t) {
    case DataType::i8: return loop_native<int8_t, Op, kBack>(d, a, b, n);
    case DataType::u8: return loop_native<uint8_t, Op, kBack>(d, a, b, n);
    case DataType::i16: return loop_native<int16_t, Op, kBack>(d, a, b, n);
    case DataType::i32: return loop_native<int32_t, Op, kBack>(d, a, b, n);
    case DataType::i64: return loop_native<int64_t, Op, kBack>(d, a, b, n);
    case DataType::f32: case DataType::f64: case DataType::f16: case DataType::bf16: return;
  }
}

// Every type: the arithmetic operators.
template <typename Op, bool kBack>
__attribute__((always_inline)) inline void loop_typed(void* d, const void* a, const void* b,
                                                      size_t n, DataType t) {
  switch (t) {
    case DataType::f32: return loop_native<float, Op, kBack>(d, a, b, n);
    case DataType::f64: return loop_native<double, Op, kBack>(d, a, b, n);
    case DataType::f16: return loop_f16<Op>(d, a, b, n);
    case DataType::bf16: return loop_bf16<Op, kBack>(d, a, b, n);
    case DataType::i8: case DataType::u8: case DataType::i16: case DataType::i32:
    case DataType::i64: return loop_integer<Op, kBack>(d, a, b, n, t);
  }
}

template <bool kBack>
__attribute__((always_inline)) inline void loop_op(void* d, const void* a, const void* b, size_t n,
                                                   DataType t, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return loop_typed<Sum, kBack>(d, a, b, n, t);
    case ReduceOp::min: return loop_typed<Min, kBack>(d, a, b, n, t);
    case ReduceOp::max: return loop_typed<Max, kBack>(d, a, b, n, t);
    case ReduceOp::product: return loop_typed<Product, kBack>(d, a, b, n, t);
    case ReduceOp::band: return loop_integer<BitAnd, kBack>(d, a, b, n, t);
    case ReduceOp::bor: return loop_integer<BitOr, kBack>(d, a, b, n, t);
    case ReduceOp::bxor: return loop_integer<BitXor, kBack>(d, a, b, n, t);
  }
}

// reduce_to_both's one pass: scalar steps until the anchor (loop_native) is aligned, then 64
// bytes of results computed into registers (all of a block's loads before its stores, so an
// output equal to an input is fine), stored to both outputs. Native types only.
template <typename T, typename Op>
__attribute__((always_inline)) inline void loop_both(void* dst, void* dst2, const void* a,
                                                     const void* b, size_t n) {
  T* d = static_cast<T*>(dst);
  T* e = static_cast<T*>(dst2);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  constexpr size_t kBlock = 64 / sizeof(T);
  const size_t head = head_to_align<T>(anchor({dst, dst2, a, b}), n);
  size_t i = 0;
  for (; i < head; ++i) {
    const T v = Op::apply(x[i], y[i]);
    d[i] = v;
    e[i] = v;
  }
  for (; i + kBlock <= n; i += kBlock) {
    T v[kBlock];
    for (size_t k = 0; k < kBlock; ++k) v[k] = Op::apply(x[i + k], y[i + k]);
    for (size_t k = 0; k < kBlock; ++k) d[i + k] = v[k];
    for (size_t k = 0; k < kBlock; ++k) e[i + k] = v[k];
  }
  for (; i < n; ++i) {
    const T v = Op::apply(x[i], y[i]);
    d[i] = v;
    e[i] = v;
  }
}

template <typename Op>
__attribute__((always_inline)) inline void both_integer(void* d, void* e, const void* a,
                                                        const void* b, size_t n, DataType t) {
  switch (t) {
    case DataType::i8: return loop_both<int8_t, Op>(d, e, a, b, n);
    case DataType::u8: return loop_both<uint8_t, Op>(d, e, a, b, n);
    case DataType::i16: return loop_both<int16_t, Op>(d, e, a, b, n);
    case DataType::i32: return loop_both<int32_t, Op>(d, e, a, b, n);
    case DataType::i64: return loop_both<int64_t, Op>(d, e, a, b, n);
    case DataType::f32: case DataType::f64: case DataType::f16: case DataType::bf16: return;
  }
}

template <typename Op>
__attribute__((always_inline)) inline void both_typed(void* d, void* e, const void* a,
                                                      const void* b, size_t n, DataType t) {
  if (t == DataType::f32) return loop_both<float, Op>(d, e, a, b, n);
  if (t == DataType::f64) return loop_both<double, Op>(d, e, a, b, n);
  both_integer<Op>(d, e, a, b, n, t);  // f16 / bf16 never get here (reduce_to_both)
}

__attribute__((always_inline)) inline void both_op(void* d, void* e, const void* a,
                                                   const void* b, size_t n, DataType t,
                                                   ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return both_typed<Sum>(d, e, a, b, n, t);
    case ReduceOp::min: return both_typed<Min>(d, e, a, b, n, t);
    case ReduceOp::max: return both_typed<Max>(d, e, a, b, n, t);
    case ReduceOp::product: return both_typed<Product>(d, e, a, b, n, t);
    case ReduceOp::band: return both_integer<BitAnd>(d, e, a, b, n, t);
    case ReduceOp::bor: return both_integer<BitOr>(d, e, a, b, n, t);
    case ReduceOp::bxor: return both_integer<BitXor>(d, e, a, b, n, t);
  }
}

void both_portable(void* d, void* e, const void* a, const void* b, size_t n, DataType t,
                   ReduceOp op) {
  both_op(d, e, a, b, n, t, op);
}

void reduce_portable(void* d, const void* a, const void* b, size_t n, DataType t, ReduceOp op,
                     bool back) {
  back ? loop_op<true>(d, a, b, n, t, op) : loop_op<false>(d, a, b, n, t, op);
}

#if defined(__x86_64__)
// f16 with the F16C conversions, 8 elements a step; the same bits as loop_f16: F16C rounds
// to nearest even as float_to_half does, and NaN results become float_to_half's quiet NaN
// (sign | 0x7e00) rather than keeping their payload.
template <typename Op>
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 apply8(__m256 a, __m256 b) {
  if constexpr (std::is_same_v<Op, Sum>) return _mm256_add_ps(a, b);
  if constexpr (std::is_same_v<Op, Product>) return _mm256_mul_ps(a, b);
  if constexpr (std::is_same_v<Op, Min>) return _mm256_min_ps(b, a);  // std::min: b < a ? b : a
  if constexpr (std::is_same_v<Op, Max>) return _mm256_max_ps(b, a);  // std::max: a < b ? b : a
}

template <typename Op>
__attribute__((target("avx2,f16c"))) void loop_f16_f16c(void* dst, const void* a, const void* b,
                                                        size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  const __m128i sign = _mm_set1_epi16(static_cast<int16_t>(0x8000));
  const __m128i quiet = _mm_set1_epi16(0x7e00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 u = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    const __m256 r = apply8<Op>(u, v);
    const __m128i h = _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32),
                                          _mm256_extracti128_si256(nan32, 1));
    const __m128i canonical = _mm_or_si128(_mm_and_si128(h, sign), quiet);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_or_si128(_mm_and_si128(nan16, canonical), _mm_andnot_si128(nan16, h)));
  }
  for (; i < n; ++i) d[i] = float_to_half(Op::apply(half_to_float(x[i]), half_to_float(y[i])));
}

__attribute__((target("avx2,f16c"))) void reduce_avx2(void* d, const void* a, const void* b,
                                                      size_t n, DataType t, ReduceOp op,
                                                      bool back) {
  if (t == DataType::f16 && (op == ReduceOp::sum || op == ReduceOp::avg))
    return loop_f16_f16c<Sum>(d, a, b, n);
  if (t == DataType::f16 && op == ReduceOp::product) return loop_f16_f16c<Product>(d, a, b, n);
  if (t == DataType::f16 && op == ReduceOp::min) return loop_f16_f16c<Min>(d, a, b, n);
  if (t == DataType::f16 && op == ReduceOp::max) return loop_f16_f16c<Max>(d, a, b, n);
  back ? loop_op<true>(d, a, b, n, t, op) : loop_op<false>(d, a, b, n, t, op);
}
__attribute__((target("avx2"))) void both_avx2(void* d, void* e, const void* a, const void* b,
                                                size_t n, DataType t, ReduceOp op) {
  both_op(d, e, a, b, n, t, op);
}

// The sums of the native types (most of what collectives reduce) with explicit AVX2 bodies:
// the compiler's loops above do one vector per iteration (backward: permutes to reverse
// each vector as well) and ran 0.80-0.85x of their aligned speed at most alignments of dst
// against equally aligned a and b (AMD Zen 5, f32 at 256 KiB; i16 0.61x), and down to 0.70x
// backward with dst just before a modulo 4 KiB. Terms: *lanes* (elements per vector), a
// *group* (four vectors). Always forward: scalar steps until the anchor is aligned, then
// groups whose sums are computed two groups ahead of their stores (no load follows a store
// it 4K-aliases while dst is less than two groups, 256 bytes, past a or b modulo 4 KiB:
// copy.cc), then single vectors, then scalar steps. Stores are unaligned instructions
// (aligned when dst is the anchor). kOuts: kTwo stores every result to e as well
// (reduce_to_both); kTwoStreamed with non-temporal stores, e as the anchor (e must be
// element-aligned), and a store fence.
template <typename T> struct SumV;
template <> struct SumV<float> {
  using V = __m256;
  __attribute__((target("avx2"))) static V ld(const float* p) { return _mm256_loadu_ps(p); }
  __attribute__((target("avx2"))) static V op(V a, V b) { return _mm256_add_ps(a, b); }
  __attribute__((target("avx2"))) static void st(float* p, V v) { _mm256_storeu_ps(p, v); }
  __attribute__((target("avx2"))) static void nt(float* p, V v) { _mm256_stream_ps(p, v); }
};
template <> struct SumV<double> {
  using V = __m256d;
  __attribute__((target("avx2"))) static V ld(const double* p) { return _mm256_loadu_pd(p); }
  __attribute__((target("avx2"))) static V op(V a, V b) { return _mm256_add_pd(a, b); }
  __attribute__((target("avx2"))) static void st(double* p, V v) { _mm256_storeu_pd(p, v); }
  __attribute__((target("avx2"))) static void nt(double* p, V v) { _mm256_stream_pd(p, v); }
};
template <typename T> struct SumVInt {  // two's complement: wraps as Sum does
  using V = __m256i;
  __attribute__((target("avx2"))) static V ld(const T* p) {
    return _mm256_loadu_si256(reinterpret_cast<const V*>(p));
  }
  __attribute__((target("avx2"))) static V op(V a, V b) {
    if constexpr (sizeof(T) == 1) return _mm256_add_epi8(a, b);
    else if constexpr (sizeof(T) == 2) return _mm256_add_epi16(a, b);
    else if constexpr (sizeof(T) == 4) return _mm256_add_epi32(a, b);
    else return _mm256_add_epi64(a, b);
  }
  __attribute__((target("avx2"))) static void st(T* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<V*>(p), v);
  }
  __attribute__((target("avx2"))) static void nt(T* p, V v) {
    _mm256_stream_si256(reinterpret_cast<V*>(p), v);
  }
};
template <> struct SumV<int8_t> : SumVInt<int8_t> {};
template <> struct SumV<uint8_t> : SumVInt<uint8_t> {};
template <> struct SumV<int16_t> : SumVInt<int16_t> {};
template <> struct SumV<int32_t> : SumVInt<int32_t> {};
template <> struct SumV<int64_t> : SumVInt<int64_t> {};

enum class Outs { kOne, kTwo, kTwoStreamed };

template <typename T, Outs kOuts>
__attribute__((target("avx2"))) void sum_avx2(T* d, T* e, const T* x, const T* y, size_t n) {
  using S = SumV<T>;
  using V = typename S::V;
  constexpr size_t L = 32 / sizeof(T), G = 4 * L;
  constexpr bool kTwo = kOuts != Outs::kOne, kStream = kOuts == Outs::kTwoStreamed;
  auto second = [&](T* at, V v) __attribute__((target("avx2"))) {
    if constexpr (kStream) S::nt(at, v);
    else S::st(at, v);
  };
  auto put = [&](size_t at, const V* g) __attribute__((target("avx2"))) {
    for (size_t k = 0; k < 4; ++k) S::st(d + at + k * L, g[k]);
    if constexpr (kTwo) for (size_t k = 0; k < 4; ++k) second(e + at + k * L, g[k]);
  };
  auto sums = [&](size_t at, V* g) __attribute__((target("avx2"))) {
    for (size_t k = 0; k < 4; ++k) g[k] = S::op(S::ld(x + at + k * L), S::ld(y + at + k * L));
  };
  auto one = [&](size_t i) {
    d[i] = Sum::apply(x[i], y[i]);
    if constexpr (kTwo) e[i] = d[i];
  };
  size_t i = 0;
  for (const size_t head = kStream ? head_to_align<T>(reinterpret_cast<uintptr_t>(e), n)
                           : kTwo  ? head_to_align<T>(anchor({d, e, x, y}), n)
                                   : head_to_align<T>(anchor({d, x, y}), n);
       i < head; ++i)
    one(i);
  if (i + 2 * G <= n) {
    V p[4], q[4], r[4];
    sums(i, p);
    sums(i + G, q);
    for (; i + 3 * G <= n; i += G) {
      sums(i + 2 * G, r);
      put(i, p);
      for (size_t k = 0; k < 4; ++k) p[k] = q[k], q[k] = r[k];
    }
    put(i, p);
    put(i + G, q);
    i += 2 * G;
  }
  for (; i + L <= n; i += L) {
    const V v = S::op(S::ld(x + i), S::ld(y + i));
    S::st(d + i, v);
    if constexpr (kTwo) second(e + i, v);
  }
  for (; i < n; ++i) one(i);
  if constexpr (kStream) _mm_sfence();
}

// Runs the explicit sum for (t, op) when explicit_sum_applies; returns whether it did.
template <Outs kOuts>
bool sum_explicit(void* d, void* e, const void* a, const void* b, size_t n, DataType t,
                  ReduceOp op) {
  if (!explicit_sum_applies(t, op)) return false;
  if (kOuts == Outs::kTwoStreamed && reinterpret_cast<uintptr_t>(e) % element_size(t))
    return false;
  auto run = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    sum_avx2<T, kOuts>(static_cast<T*>(d), static_cast<T*>(e), static_cast<const T*>(a),
                      static_cast<const T*>(b), n);
    return true;
  };
  switch (t) {
    case DataType::f32: return run(static_cast<float*>(nullptr));
    case DataType::f64: return run(static_cast<double*>(nullptr));
    case DataType::i32: return run(static_cast<int32_t*>(nullptr));
    case DataType::i64: return run(static_cast<int64_t*>(nullptr));
    case DataType::i8: return run(static_cast<int8_t*>(nullptr));
    case DataType::u8: return run(static_cast<uint8_t*>(nullptr));
    case DataType::i16: return run(static_cast<int16_t*>(nullptr));
    case DataType::f16: case DataType::bf16: break;
  }
  return false;
}
#else
enum class Outs { kOne, kTwo, kTwoStreamed };
template <Outs kOuts>
bool sum_explicit(void*, void*, const void*, const void*, size_t, DataType, ReduceOp) {
  return false;
}
#endif

void reduce_cached(void* d, const void* a, const void* b, size_t n, DataType t, ReduceOp op,
                   bool back = false) {
#if defined(__x86_64__)
  if (kernel_isa() == KernelIsa::kAvx2) return reduce_avx2(d, a, b, n, t, op, back);
#endif
  reduce_portable(d, a, b, n, t, op, back);
}

// 4K aliasing: a load whose address matches an older store still in the store buffer in
// bits 11:0 waits for it (the CPU cannot yet tell them apart). Going forward, loads run ahead
// of stores, so a destination 1..kAliasWindow bytes past a source modulo 4 KiB stalls most
// loads (measured on AMD Zen 4, f32 sum at 256 KiB: 0.80x of the best at 48 bytes, 0.91x at
// 80, 0.95x at 144, none past 208); going backward the same holds with the signs swapped.
constexpr size_t kPage = 4096;
constexpr size_t kAliasWindow = 256;
constexpr size_t kMinOrderedBytes = 1024;  // below this the order does not show

// (to - from) mod 4 KiB.
size_t page_distance(const void* from, const void* to) {
  return (reinterpret_cast<uintptr_t>(to) - reinterpret_cast<uintptr_t>(from)) & (kPage - 1);
}
// Whether stores to `store` stall forward loads from `load` (store 1..window bytes ahead).
bool trails(const void* load, const void* store) {
  const size_t d = page_distance(load, store);
  return d != 0 && d <= kAliasWindow;
}
// The same for a backward loop (store 1..window bytes behind).
bool leads(const void* load, const void* store) {
  const size_t d = page_distance(store, load);
  return d != 0 && d <= kAliasWindow;
}

// An L1 block for one page of output, 64-byte aligned, placed so that neither source's
// distance to it nor its distance to dst falls in the window. `area` holds 2 pages + 64 B.
uint8_t* placed_block(uint8_t* area, const void* dst, const void* a, const void* b) {
  uint8_t* base = area + (64 - reinterpret_cast<uintptr_t>(area) % 64) % 64;
  for (size_t shift = 0; shift < kPage; shift += 64) {
    uint8_t* block = base + shift;
    if (!trails(a, block) && !trails(b, block) && !trails(block, dst)) return block;
  }
  return base;  // unreachable: three windows of 256 bytes leave most of a page free
}

// A page at a time through a placed block, then copied out with `hint`: the distances stay
// fixed from page to page.
void reduce_through_block(void* dst, const void* a, const void* b, size_t count, DataType t,
                          ReduceOp op, StoreHint hint) {
  const size_t es = element_size(t);
  alignas(64) uint8_t area[2 * kPage + 64];
  uint8_t* block = placed_block(area, dst, a, b);
  const size_t per = kPage / es;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (size_t first = 0; first < count; first += per) {
    const size_t m = std::min(per, count - first);
    reduce_cached(block, x + first * es, y + first * es, m, t, op);
    copy_bytes(d + first * es, block, m * es, hint);
  }
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

bool explicit_sum_applies(DataType t, ReduceOp op) {
#if defined(__x86_64__)
  const bool native = t != DataType::f16 && t != DataType::bf16;
  return native && (op == ReduceOp::sum || op == ReduceOp::avg) &&
         kernel_isa() == KernelIsa::kAvx2;
#else
  (void)t;
  (void)op;
  return false;
#endif
}

ReduceOrder reduce_order(const void* dst, const void* a, const void* b, size_t bytes) {
  if (bytes < kMinOrderedBytes || (!trails(a, dst) && !trails(b, dst)))
    return ReduceOrder::kForward;
  if (!leads(a, dst) && !leads(b, dst)) return ReduceOrder::kBackward;
  return ReduceOrder::kThroughBlock;  // a and b on either side of dst, both close
}

void reduce_to(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceOp op,
               StoreHint hint) {
  require_op_applies(op, t, "reduce");
  // Streaming: reduce into a block that stays in L1, then stream it out.
  if (hint == StoreHint::kStreaming)
    return reduce_through_block(dst, a, b, count, t, op, StoreHint::kStreaming);
  if (sum_explicit<Outs::kOne>(dst, nullptr, a, b, count, t, op)) return;
  switch (reduce_order(dst, a, b, count * element_size(t))) {
    case ReduceOrder::kForward: return reduce_cached(dst, a, b, count, t, op);
    case ReduceOrder::kBackward: return reduce_cached(dst, a, b, count, t, op, true);
    case ReduceOrder::kThroughBlock:
      return reduce_through_block(dst, a, b, count, t, op, StoreHint::kCached);
  }
}

bool reduce_to_both(void* dst, void* dst2, const void* a, const void* b, size_t count,
                    DataType t, ReduceOp op) {
  require_op_applies(op, t, "reduce");
  const size_t bytes = count * element_size(t);
  if (sum_explicit<Outs::kTwo>(dst, dst2, a, b, count, t, op)) return true;
  const bool native = t != DataType::f16 && t != DataType::bf16;
  if (!native || reduce_order(dst, a, b, bytes) != ReduceOrder::kForward ||
      reduce_order(dst2, a, b, bytes) != ReduceOrder::kForward) {
    reduce_to(dst2, a, b, count, t, op);
    copy_bytes(dst, dst2, bytes);
    return false;
  }
#if defined(__x86_64__)
  if (kernel_isa() == KernelIsa::kAvx2) {
    both_avx2(dst, dst2, a, b, count, t, op);
    return true;
  }
#endif
  both_portable(dst, dst2, a, b, count, t, op);
  return true;
}

bool reduce_to_both_streaming(void* dst, void* dst2, const void* a, const void* b, size_t count,
                              DataType t, ReduceOp op) {
  require_op_applies(op, t, "reduce");
  if (sum_explicit<Outs::kTwoStreamed>(dst, dst2, a, b, count, t, op)) return true;
  reduce_to(dst, a, b, count, t, op);
  copy_bytes(dst2, dst, count * element_size(t), StoreHint::kStreaming);
  return false;
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
