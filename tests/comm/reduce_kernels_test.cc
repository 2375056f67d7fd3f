// ctest-labels: unit
// The reduction kernels (reduce.h) for every op x element type: Gloo's own results, both
// instruction-set forms at every relative alignment against a scalar reference, f16 over
// every bit pattern (the AVX2 form converts with F16C), each memory
// order reduce_order picks against 4K aliasing (and that it picks it), the explicit AVX2
// sums, reduce_to_both and its streaming form, integer average, and the refusal of bitwise
// ops on floating point. Integer sum and product wrap modulo 2^bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "heft/comm/cpu.h"
#include "heft/comm/dtype.h"
#include "heft/comm/reduce.h"
#include "heft/error.h"

namespace heft::comm {
namespace {

int bits(DataType t) { return 8 * static_cast<int>(element_size(t)); }
uint64_t mask(DataType t) { return bits(t) == 64 ? ~uint64_t{0} : (uint64_t{1} << bits(t)) - 1; }

// Integer bits, sign- (or, for u8, zero-) extended to 64.
int64_t as_signed(DataType t, uint64_t v) {
  v &= mask(t);
  if (t == DataType::u8 || bits(t) == 64) return static_cast<int64_t>(v);
  const uint64_t top = uint64_t{1} << (bits(t) - 1);
  return static_cast<int64_t>((v ^ top) - top);
}

uint64_t load_bits(const uint8_t* p, DataType t) {
  uint64_t v = 0;
  std::memcpy(&v, p, element_size(t));  // little-endian
  return v;
}

// The results Gloo gave for these two ranks' inputs (torch 1.13, gloo backend, 2 ranks,
// all_reduce and reduce; 2026-11-25): integer sum and product wrap.
TEST(ReduceKernels, GiveGloosResults) {
  struct Row {
    DataType t;
    int64_t a[4], b[4];
    int64_t sum[4], product[4], min[4], max[4], band[4], bor[4], bxor[4];
  };
  const int64_t i32big = 1073741826, i64big = 4611686018427387906;
  const Row rows[] = {
      {DataType::i8, {1, -2, 66, 100}, {2, -3, 66, 101}, {3, -5, -124, -55}, {2, 6, 4, 116},
       {1, -3, 66, 100}, {2, -2, 66, 101}, {0, -4, 66, 100}, {3, -1, 66, 101}, {3, 3, 0, 1}},
      {DataType::u8, {1, 200, 130, 100}, {2, 200, 130, 101}, {3, 144, 4, 201}, {2, 64, 4, 116},
       {1, 200, 130, 100}, {2, 200, 130, 101}, {0, 200, 130, 100}, {3, 200, 130, 101},
       {3, 0, 0, 1}},
      {DataType::i32, {1, -2, i32big, 100}, {2, -3, i32big, 101}, {3, -5, -2147483644, 201},
       {2, 6, 4, 10100}, {1, -3, i32big, 100}, {2, -2, i32big, 101}, {0, -4, i32big, 100},
       {3, -1, i32big, 101}, {3, 3, 0, 1}},
      {DataType::i64, {1, -2, i64big, 100}, {2, -3, i64big, 101},
       {3, -5, -9223372036854775804, 201}, {2, 6, 4, 10100}, {1, -3, i64big, 100},
       {2, -2, i64big, 101}, {0, -4, i64big, 100}, {3, -1, i64big, 101}, {3, 3, 0, 1}},
  };
  for (const Row& row : rows) {
    const std::pair<ReduceOp, const int64_t*> ops[] = {
        {ReduceOp::sum, row.sum}, {ReduceOp::product, row.product}, {ReduceOp::min, row.min},
        {ReduceOp::max, row.max}, {ReduceOp::band, row.band},       {ReduceOp::bor, row.bor},
        {ReduceOp::bxor, row.bxor}};
    const size_t es = element_size(row.t);
    uint8_t a[32], b[32], d[32];
    for (int j = 0; j < 4; ++j) {
      std::memcpy(a + j * es, &row.a[j], es);
      std::memcpy(b + j * es, &row.b[j], es);
    }
    for (const auto& [op, want] : ops) {
      reduce_to(d, a, b, 4, row.t, op);
      for (int j = 0; j < 4; ++j)
        EXPECT_EQ(as_signed(row.t, load_bits(d + j * es, row.t)), want[j])
            << name(row.t) << " " << name(op) << " element " << j;
    }
  }
}

std::vector<KernelIsa> forms() {
  std::vector<KernelIsa> out{KernelIsa::kPortable};
  if (cpu_supports(KernelIsa::kAvx2)) out.push_back(KernelIsa::kAvx2);
  return out;
}

// Runs body(isa, t, op) in each kernel form (set while it runs) for every dtype and every op
// that applies to it, stopping at the first fatal failure; then sets back the form that was
// set before.
template <class Body>
void each_form_type_op(Body body) {
  if (::testing::Test::HasFatalFailure()) return;  // as an ASSERT would have left the test
  const KernelIsa saved = kernel_isa();
  for (KernelIsa isa : forms()) {
    ASSERT_TRUE(set_kernel_isa(isa));
    for (DataType t : kEveryDataType)
      for (ReduceOp op : kEveryReduceOp) {
        if (!op_applies(op, t)) continue;
        body(isa, t, op);
        if (::testing::Test::HasFatalFailure()) return;
      }
  }
  set_kernel_isa(saved);
}

// One element of a (op) b as the kernels define it: integers on their bits modulo 2^bits,
// floating point exactly in double and rounded once to the type.
void reference(uint8_t* d, const uint8_t* a, const uint8_t* b, DataType t, ReduceOp op) {
  if (!is_integral_type(t)) {
    const double x = read_element(a, t), y = read_element(b, t);
    double v = x + y;
    if (op == ReduceOp::product) v = x * y;
    if (op == ReduceOp::min) v = std::min(x, y);
    if (op == ReduceOp::max) v = std::max(x, y);
    return write_element(d, t, v);
  }
  const uint64_t x = load_bits(a, t), y = load_bits(b, t);
  uint64_t v = x + y;
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: break;
    case ReduceOp::product: v = x * y; break;
    case ReduceOp::min: v = as_signed(t, x) < as_signed(t, y) ? x : y; break;
    case ReduceOp::max: v = as_signed(t, x) < as_signed(t, y) ? y : x; break;
    case ReduceOp::band: v = x & y; break;
    case ReduceOp::bor: v = x | y; break;
    case ReduceOp::bxor: v = x ^ y; break;
  }
  std::memcpy(d, &v, element_size(t));
}

// Random bits for the integers (every wrap), small halves for floating point (exact sums).
void fill_random(uint8_t* p, size_t count, DataType t, std::mt19937_64& rng) {
  const size_t es = element_size(t);
  for (size_t i = 0; i < count; ++i) {
    if (is_integral_type(t)) {
      const uint64_t v = rng();
      std::memcpy(p + i * es, &v, es);
    } else {
      write_element(p + i * es, t, static_cast<double>(static_cast<int>(rng() % 401) - 200) / 2);
    }
  }
}

// Both instruction-set forms, every relative alignment the type allows, lengths around the
// vector widths, cached and streaming stores; the bytes around dst stay untouched.
TEST(ReduceKernels, EveryOpAndTypeInEveryFormAndAlignment) {
  constexpr uint8_t kGuard = 0xA5;
  const size_t kMax = 4099;
  std::mt19937_64 rng(29);
  std::vector<uint8_t> a(kMax * 8 + 128), b(kMax * 8 + 128), dst(kMax * 8 + 256), want(kMax * 8);
  each_form_type_op([&](KernelIsa isa, DataType t, ReduceOp op) {
    const size_t es = element_size(t);
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{33}, size_t{257}, kMax}) {
      for (size_t d = 0; d < 64; d += es * (n > 300 ? 4 : 1)) {
        const size_t x = (d * 3 + es) % 64 / es * es, y = (d * 7 + 2 * es) % 64 / es * es;
        fill_random(a.data() + x, n, t, rng);
        fill_random(b.data() + y, n, t, rng);
        for (size_t i = 0; i < n; ++i)
          reference(want.data() + i * es, a.data() + x + i * es, b.data() + y + i * es, t, op);
        for (StoreHint hint : {StoreHint::kCached, StoreHint::kStreaming}) {
          std::fill(dst.begin(), dst.end(), kGuard);
          reduce_to(dst.data() + 64 + d, a.data() + x, b.data() + y, n, t, op, hint);
          ASSERT_EQ(std::memcmp(dst.data() + 64 + d, want.data(), n * es), 0)
              << name(isa) << " " << name(t) << " " << name(op) << " n=" << n
              << " offsets dst " << d << " a " << x << " b " << y;
          ASSERT_EQ(dst[63 + d], kGuard);
          ASSERT_EQ(dst[64 + d + n * es], kGuard);
        }
      }
    }
  });
}

// avg on the integer types: the wrapped sum divided toward zero, world sizes beyond the
// 8-bit range included.
TEST(ReduceKernels, IntegerAverageTruncatesTheWrappedSum) {
  int8_t i8[3] = {-7, 7, 100};
  finish_average(i8, 3, DataType::i8, ReduceOp::avg, 2);
  EXPECT_EQ(i8[0], -3);
  EXPECT_EQ(i8[1], 3);
  EXPECT_EQ(i8[2], 50);
  uint8_t u8[2] = {255, 7};
  finish_average(u8, 2, DataType::u8, ReduceOp::avg, 2);
  EXPECT_EQ(u8[0], 127);
  EXPECT_EQ(u8[1], 3);
  finish_average(u8, 2, DataType::u8, ReduceOp::avg, 300);
  EXPECT_EQ(u8[0], 0);
  int16_t i16[1] = {-32768};
  finish_average(i16, 1, DataType::i16, ReduceOp::avg, 1000);
  EXPECT_EQ(i16[0], -32);
  finish_average(i16, 1, DataType::i16, ReduceOp::product, 1000);  // not avg: untouched
  EXPECT_EQ(i16[0], -32);
}

// A bitwise op on a floating-point type: InvalidArgument naming both, dst untouched.
TEST(ReduceKernels, RefuseBitwiseOpsOnFloatingPoint) {
  for (DataType t : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16})
    for (ReduceOp op : {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor}) {
      EXPECT_FALSE(op_applies(op, t));
      uint8_t a[16] = {1}, b[16] = {2}, d[16] = {};
      try {
        reduce_to(d, a, b, 2, t, op);
        ADD_FAILURE() << name(op) << " on " << name(t) << " did not throw";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(name(op)), std::string::npos) << what;
        EXPECT_NE(what.find(name(t)), std::string::npos) << what;
      }
      EXPECT_EQ(d[0], 0) << "dst written before the refusal";
    }
}

// f16 over every 16-bit pattern (NaNs, infinities, subnormals) against each pattern's
// partner: both forms (AVX2 uses F16C) give the software conversion's bits.
TEST(ReduceKernels, F16EveryPatternInBothForms) {
  std::vector<uint16_t> x(65536), y(65536), want(65536), got(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    x[i] = static_cast<uint16_t>(i);
    y[i] = static_cast<uint16_t>(i * 40503u + 977u);  // an odd multiplier: every pattern again
  }
  const KernelIsa saved = kernel_isa();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::product, ReduceOp::min, ReduceOp::max}) {
    for (uint32_t i = 0; i < 65536; ++i) {
      const float a = half_to_float(x[i]), b = half_to_float(y[i]);
      const float r = op == ReduceOp::sum       ? a + b
                      : op == ReduceOp::product ? a * b
                      : op == ReduceOp::min     ? std::min(a, b)
                                                : std::max(a, b);
      want[i] = float_to_half(r);
    }
    for (KernelIsa isa : forms()) {
      ASSERT_TRUE(set_kernel_isa(isa));
      reduce_to(got.data(), x.data(), y.data(), 65536, DataType::f16, op);
      // When both inputs are NaN, which one's sign survives is the compiler's choice of
      // operand order (x86 keeps the first): any quiet NaN is right there.
      size_t bad = 0, first = 0;
      for (uint32_t i = 0; i < 65536; ++i) {
        const bool both_nan = std::isnan(half_to_float(x[i])) && std::isnan(half_to_float(y[i]));
        const bool ok = both_nan ? (got[i] & 0x7fff) == 0x7e00 : got[i] == want[i];
        if (!ok && bad++ == 0) first = i;
      }
      EXPECT_EQ(bad, 0u) << name(isa) << " " << name(op) << ": first at 0x" << std::hex
                         << x[first] << " op 0x" << y[first] << " got 0x" << got[first]
                         << " want 0x" << want[first];
    }
  }
  set_kernel_isa(saved);
}

// Buffers placed at chosen offsets within 4 KiB pages, so each order of reduce_order runs.
TEST(ReduceKernels, EachMemoryOrderIsChosenAndExact) {
  struct Placement {
    const char* what;
    size_t dst, a, b;  // byte offsets into one page-aligned area; dst == a: in place
    ReduceOrder want;
  };
  constexpr size_t kPage = 4096, kA = 0, kB = 4 * kPage, kD = 8 * kPage;  // disjoint regions
  const Placement cases[] = {
      {"dst far from both", kD + 1024, kA, kB, ReduceOrder::kForward},
      {"dst 64 and 32 bytes past a and b", kD + 64, kA, kB + 32, ReduceOrder::kBackward},
      {"dst 64 past a, 64 before b", kD + 64, kA, kB + 128, ReduceOrder::kThroughBlock},
      {"in place, dst 96 past b", kD + 96, kD + 96, kB, ReduceOrder::kBackward},
      {"dst 1024 past a, 200 before b", kD + 1024, kA, kB + 1224, ReduceOrder::kForward},
  };
  const size_t kBytes = 3 * kPage + 40;  // several pages and a partial one, every dtype
  const size_t kArea = 12 * kPage + 2048;
  auto* area = static_cast<uint8_t*>(std::aligned_alloc(kPage, kArea));
  std::vector<uint8_t> want(kBytes), x(kBytes), y(kBytes);
  std::mt19937_64 rng(4096);
  for (const Placement& p : cases) {
    uint8_t* dst = area + p.dst;
    const uint8_t* a = area + p.a;
    const uint8_t* b = area + p.b;
    EXPECT_EQ(reduce_order(dst, a, b, kBytes), p.want) << p.what;
    EXPECT_EQ(reduce_order(dst, a, b, 512), ReduceOrder::kForward) << p.what << ", small";
    each_form_type_op([&](KernelIsa isa, DataType t, ReduceOp op) {
      const size_t es = element_size(t), n = kBytes / es;
      std::memset(area, 0xA5, kArea);
      fill_random(area + p.a, n, t, rng);
      fill_random(area + p.b, n, t, rng);
      std::memcpy(x.data(), a, n * es);
      std::memcpy(y.data(), b, n * es);
      for (size_t i = 0; i < n; ++i)
        reference(want.data() + i * es, x.data() + i * es, y.data() + i * es, t, op);
      reduce_to(dst, a, b, n, t, op);
      ASSERT_EQ(std::memcmp(dst, want.data(), n * es), 0)
          << p.what << " " << name(isa) << " " << name(t) << " " << name(op);
      ASSERT_EQ(dst[-1], 0xA5) << p.what << " wrote before dst";
      ASSERT_EQ(dst[n * es], 0xA5) << p.what << " wrote past dst";
    });
  }
  std::free(area);
}

// reduce_to_both: both outputs hold reduce_to's bits, for every dtype and op, with the
// outputs apart from the inputs or equal to one of them, at mixed offsets; one pass where
// the dtype is native and no output sits 1-256 bytes past an input modulo 4 KiB, else
// reduce_to and a copy (the return value says which ran).
TEST(ReduceKernels, ReduceToBothMatchesReduceToInOneOrTwoPasses) {
  struct Placement {
    const char* what;
    size_t dst, dst2, a, b;  // byte offsets into one page-aligned area
    bool one_pass;           // for native dtypes
  };
  constexpr size_t kPage = 4096, kA = 0, kB = 4 * kPage, kD = 8 * kPage, kE = 12 * kPage;
  const Placement cases[] = {
      {"all apart", kD + 1024, kE + 2048, kA + 4, kB + 12, true},
      {"dst is a", kA + 8, kE + 2056, kA + 8, kB + 16, true},
      {"dst is b, dst2 far", kB + 24, kE + 3000, kA + 40, kB + 24, true},
      {"dst2 is a (a fold into it)", kD + 2048, kA + 32, kA + 32, kB + 1000, true},
      {"dst2 64 bytes past b", kD + 2048, kE + 64 + 16, kA, kB + 16, false},
      {"dst 32 bytes past a", kD + 32, kE + 2048, kA, kB + 1024, false},
  };
  const size_t kBytes = 3 * kPage + 40;  // several pages and a partial one, every dtype
  const size_t kArea = 16 * kPage + 4096;
  auto* area = static_cast<uint8_t*>(std::aligned_alloc(kPage, kArea));
  std::vector<uint8_t> want(kBytes), x(kBytes), y(kBytes);
  std::mt19937_64 rng(2048);
  for (const Placement& p : cases) {
    each_form_type_op([&](KernelIsa isa, DataType t, ReduceOp op) {
      const size_t es = element_size(t);
      for (size_t n : {kBytes / es, size_t{37}}) {
        std::memset(area, 0xA5, kArea);
        fill_random(area + p.a, n, t, rng);
        fill_random(area + p.b, n, t, rng);
        std::memcpy(x.data(), area + p.a, n * es);
        std::memcpy(y.data(), area + p.b, n * es);
        reduce_to(want.data(), x.data(), y.data(), n, t, op);
        uint8_t *d = area + p.dst, *e = area + p.dst2;
        const bool one = reduce_to_both(d, e, area + p.a, area + p.b, n, t, op);
        const bool native = t != DataType::f16 && t != DataType::bf16;
        EXPECT_EQ(one, explicit_sum_applies(t, op) || (native && (p.one_pass || n * es < 1024)))
            << p.what << " " << name(t) << " n=" << n;
        ASSERT_EQ(std::memcmp(d, want.data(), n * es), 0)
            << p.what << " dst " << name(isa) << " " << name(t) << " " << name(op);
        ASSERT_EQ(std::memcmp(e, want.data(), n * es), 0)
            << p.what << " dst2 " << name(isa) << " " << name(t) << " " << name(op);
        for (const uint8_t* out : {d, e}) {
          if (out != area + p.a && out != area + p.b) {
            ASSERT_EQ(out[-1], 0xA5) << p.what << " wrote before an output";
            ASSERT_EQ(out[n * es], 0xA5) << p.what << " wrote past an output";
          }
        }
      }
    });
  }
  std::free(area);
}

// The explicit AVX2 sum (explicit_sum_applies): chosen for exactly the native types' sum
// and avg under AVX2, and exact through reduce_to and reduce_to_both at every dst
// offset against sources at equal and unequal offsets, in place, at lengths around its
// vector (L), group (G = 4 L) and two-group lookahead boundaries; nothing written outside.
TEST(ReduceKernels, ExplicitSumAtEveryAlignmentAndLength) {
  const KernelIsa saved = kernel_isa();
  ASSERT_TRUE(set_kernel_isa(KernelIsa::kPortable));
  EXPECT_FALSE(explicit_sum_applies(DataType::f32, ReduceOp::sum));
  if (!set_kernel_isa(KernelIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  EXPECT_TRUE(explicit_sum_applies(DataType::f32, ReduceOp::sum));
  EXPECT_TRUE(explicit_sum_applies(DataType::i64, ReduceOp::avg));
  EXPECT_FALSE(explicit_sum_applies(DataType::f32, ReduceOp::product));
  EXPECT_FALSE(explicit_sum_applies(DataType::f16, ReduceOp::sum));
  EXPECT_FALSE(explicit_sum_applies(DataType::bf16, ReduceOp::avg));
  EXPECT_FALSE(explicit_sum_applies(DataType::i16, ReduceOp::max));
  constexpr uint8_t kGuard = 0xA5;
  std::mt19937_64 rng(256);
  std::vector<uint8_t> a(8192), b(8192), d(8192), e(8192), want(8192), in(8192);
  for (DataType t : {DataType::f32, DataType::f64, DataType::i8, DataType::u8, DataType::i16,
                     DataType::i32, DataType::i64}) {
    const size_t es = element_size(t), L = 32 / es, G = 4 * L;
    for (size_t n : {size_t{0}, L - 1, L, L + 1, 2 * G - 1, 2 * G, 2 * G + 1, 3 * G - 1, 3 * G,
                     3 * G + L + 3, 1000 / es}) {
      for (size_t off = 0; off < 64; off += es) {
        for (size_t y : {size_t{16}, (off * 5 + 8) % 64 / es * es}) {
          fill_random(a.data() + 16, n, t, rng);
          fill_random(b.data() + y, n, t, rng);
          for (size_t i = 0; i < n; ++i)
            reference(want.data() + i * es, a.data() + 16 + i * es, b.data() + y + i * es, t,
                      ReduceOp::sum);
          const std::string at = std::string(name(t)) + " n=" + std::to_string(n) +
                                 " dst offset " + std::to_string(off) + " b " + std::to_string(y);
          std::fill(d.begin(), d.end(), kGuard);
          std::fill(e.begin(), e.end(), kGuard);
          uint8_t *out = d.data() + 64 + off, *out2 = e.data() + 128 + (off * 3) % 64 / es * es;
          reduce_to(out, a.data() + 16, b.data() + y, n, t, ReduceOp::sum);
          ASSERT_EQ(std::memcmp(out, want.data(), n * es), 0) << "reduce_to " << at;
          ASSERT_EQ(out[-1], kGuard) << at;
          ASSERT_EQ(out[n * es], kGuard) << at;
          EXPECT_TRUE(reduce_to_both(out, out2, a.data() + 16, b.data() + y, n, t, ReduceOp::sum));
          ASSERT_EQ(std::memcmp(out, want.data(), n * es), 0) << "reduce_to_both dst " << at;
          ASSERT_EQ(std::memcmp(out2, want.data(), n * es), 0) << "reduce_to_both dst2 " << at;
          ASSERT_EQ(out2[-1], kGuard) << at;
          ASSERT_EQ(out2[n * es], kGuard) << at;
          std::memcpy(in.data() + off, a.data() + 16, n * es);  // in place: dst == a
          reduce_into(in.data() + off, b.data() + y, n, t, ReduceOp::sum);
          ASSERT_EQ(std::memcmp(in.data() + off, want.data(), n * es), 0) << "in place " << at;
        }
      }
    }
  }
  set_kernel_isa(saved);
}

// reduce_to_both_streaming: both outputs hold reduce_to's bits for every dtype and op in
// both forms, outputs apart from the inputs or dst equal to a, dst2 at every offset mod 64;
// the one pass exactly where explicit_sum_applies and dst2 is element-aligned.
TEST(ReduceKernels, ReduceToBothStreamingMatchesReduceTo) {
  constexpr uint8_t kGuard = 0xA5;
  const size_t kMax = 1031;
  std::mt19937_64 rng(4096);
  std::vector<uint8_t> a(kMax * 8 + 128), b(kMax * 8 + 128), d(kMax * 8 + 256),
      e(kMax * 8 + 256), want(kMax * 8), own(kMax * 8 + 128);
  each_form_type_op([&](KernelIsa isa, DataType t, ReduceOp op) {
    const size_t es = element_size(t);
    for (size_t n : {size_t{5}, size_t{200}, kMax}) {
      for (size_t off = 0; off < 64; off += n == kMax ? 7 : 1) {
        const bool in_place = off % 2;
        fill_random(a.data() + 16, n, t, rng);
        fill_random(b.data() + 16 + es, n, t, rng);
        for (size_t i = 0; i < n; ++i)
          reference(want.data() + i * es, a.data() + 16 + i * es,
                    b.data() + 16 + es + i * es, t, op);
        std::fill(d.begin(), d.end(), kGuard);
        std::fill(e.begin(), e.end(), kGuard);
        std::memcpy(own.data() + 32, a.data() + 16, n * es);
        uint8_t* out = in_place ? own.data() + 32 : d.data() + 64 + es * 3;
        const uint8_t* x = in_place ? own.data() + 32 : a.data() + 16;
        uint8_t* out2 = e.data() + 64 + off;
        const bool one =
            reduce_to_both_streaming(out, out2, x, b.data() + 16 + es, n, t, op);
        const std::string at = std::string(name(isa)) + " " + name(t) + " " + name(op) +
                               " n=" + std::to_string(n) + " dst2 offset " +
                               std::to_string(off) + (in_place ? " in place" : "");
        EXPECT_EQ(one, explicit_sum_applies(t, op) && off % es == 0) << at;
        ASSERT_EQ(std::memcmp(out, want.data(), n * es), 0) << "dst " << at;
        ASSERT_EQ(std::memcmp(out2, want.data(), n * es), 0) << "dst2 " << at;
        ASSERT_EQ(out2[-1], kGuard) << at;
        ASSERT_EQ(out2[n * es], kGuard) << at;
      }
    }
  });
}

}  // namespace
}  // namespace heft::comm
