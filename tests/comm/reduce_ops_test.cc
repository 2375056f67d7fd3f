// ctest-labels: multiproc
// Every reduce op x every element type (dtype.h) through allreduce, reduce and reduce_scatter
// on 1-4 real forked ranks over TCP, one shared-memory host and two hosts, at buffer offsets
// that differ between ranks, checked bit for bit against closed forms; and the kernels
// (reduce.h) in both instruction-set forms against a scalar reference. Integer sum and product
// wrap modulo 2^bits (Gloo's results: C++ arithmetic, unsigned wrap); bitwise ops on
// floating-point types are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/comm/cpu.h"
#include "heft/comm/dtype.h"
#include "heft/comm/reduce.h"
#include "heft/error.h"
#include "support/ranks.h"

namespace heft::comm {
namespace {

using test::expect;

// ---- Values and closed forms ----------------------------------------------------------
// Element i of rank r's contribution, for n ranks. m(r, i) runs over 1..n as r does, in an
// order that changes with i, so the rank holding the minimum moves.
uint64_t m(int r, int n, size_t i) { return (static_cast<uint64_t>(r) + i) % n + 1; }
int sign(size_t i) { return i % 2 == 0 ? 1 : -1; }
int bits(DataType t) { return 8 * static_cast<int>(element_size(t)); }
uint64_t mask(DataType t) { return bits(t) == 64 ? ~uint64_t{0} : (uint64_t{1} << bits(t)) - 1; }

// Integer bits, sign- (or, for u8, zero-) extended to 64.
int64_t as_signed(DataType t, uint64_t v) {
  v &= mask(t);
  if (t == DataType::u8 || bits(t) == 64) return static_cast<int64_t>(v);
  const uint64_t top = uint64_t{1} << (bits(t) - 1);
  return static_cast<int64_t>((v ^ top) - top);
}

// Integer contributions, as two's-complement bits narrowed to the type on store:
//   sum, avg:  base + s*m       (base[i % 4] = big, -big, 0, 5: n*big wraps for n >= 2)
//   min, max:  base + s*m       (in range, 10 from the type's extremes: no wrap)
//   product:   c*m              (c = 1, -1, 3, k, -k with k = 2^(bits/2) + 1: k*k wraps)
//   bitwise:   high | 2^((r+i) % 7)   (high: pseudo-random bits above bit 6, sign included)
struct IntTerms {
  uint64_t base = 0;  // or c for product, high for the bitwise ops
  int64_t s = 1;
};

IntTerms int_terms(ReduceOp op, DataType t, size_t i) {
  const int w = bits(t);
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: {
      const uint64_t big = (uint64_t{1} << (w - 1)) - (uint64_t{1} << (w - 3)) + 3;
      const uint64_t base[] = {big, uint64_t{0} - big, 0, 5};
      return {base[i % 4], sign(i)};
    }
    case ReduceOp::min: case ReduceOp::max: {
      const int64_t lo = t == DataType::u8 ? 0 : -(int64_t{1} << (w - 1));
      const int64_t hi = t == DataType::u8 ? 255 : static_cast<int64_t>(mask(t) >> 1);
      const int64_t base[] = {lo + 10, hi - 10, t == DataType::u8 ? 128 : 0};
      const int64_t s[] = {1, -1, sign(i)};
      return {static_cast<uint64_t>(base[i % 3]), s[i % 3]};
    }
    case ReduceOp::product: {
      const uint64_t k = (uint64_t{1} << (w / 2)) + 1;
      const uint64_t c[] = {1, uint64_t{0} - 1, 3, k, uint64_t{0} - k};
      return {c[i % 5], 1};
    }
    case ReduceOp::band: case ReduceOp::bor: case ReduceOp::bxor:
      return {(i * 0x9E3779B97F4A7C15ull) & ~uint64_t{0x7f}, 1};
  }
  return {};
}

uint64_t int_value(ReduceOp op, DataType t, int r, int n, size_t i) {
  const IntTerms k = int_terms(op, t, i);
  if (op == ReduceOp::product) return k.base * m(r, n, i);
  if (is_bitwise(op)) return k.base | (uint64_t{1} << ((r + i) % 7));
  return k.base + static_cast<uint64_t>(k.s) * m(r, n, i);
}

// The closed forms, computed modulo 2^64 (hence modulo 2^bits) and narrowed.
uint64_t int_expected(ReduceOp op, DataType t, int n, size_t i) {
  const IntTerms k = int_terms(op, t, i);
  const uint64_t un = static_cast<uint64_t>(n);
  uint64_t v = 0;
  switch (op) {
    case ReduceOp::sum: v = un * k.base + static_cast<uint64_t>(k.s) * (un * (un + 1) / 2); break;
    case ReduceOp::avg:  // the wrapped sum, divided as C++ divides (toward zero)
      v = static_cast<uint64_t>(as_signed(t, int_expected(ReduceOp::sum, t, n, i)) / n);
      break;
    case ReduceOp::min: v = k.base + static_cast<uint64_t>(k.s > 0 ? 1 : -n); break;
    case ReduceOp::max: v = k.base + static_cast<uint64_t>(k.s > 0 ? n : -1); break;
    case ReduceOp::product: {  // c^n * n!
      v = 1;
      for (int j = 1; j <= n; ++j) v *= k.base * static_cast<uint64_t>(j);
      break;
    }
    case ReduceOp::band: case ReduceOp::bor: case ReduceOp::bxor: {
      uint64_t own = 0;  // the ranks' own bits: distinct, so their xor is their or
      for (int r = 0; r < n; ++r) own |= uint64_t{1} << ((r + i) % 7);
      if (op == ReduceOp::band) v = n == 1 ? k.base | own : k.base;
      if (op == ReduceOp::bor) v = k.base | own;
      if (op == ReduceOp::bxor) v = (n % 2 == 1 ? k.base : 0) | own;
      break;
    }
  }
  return v & mask(t);
}

// Floating-point contributions: small halves and products of powers of two and 1.5, exact
// in every type at every step of any reduction order (odd parts stay below 2^8 for n <= 4).
double float_value(ReduceOp op, int r, int n, size_t i) {
  const double k = 0.5 * static_cast<double>(i % 3);
  if (op == ReduceOp::product) {
    const double c[] = {1, -1, 2, -0.5, 1.5};
    return c[i % 5] * static_cast<double>(m(r, n, i));
  }
  return sign(i) * static_cast<double>(m(r, n, i)) + k;
}

double float_expected(ReduceOp op, DataType t, int n, size_t i) {
  const double k = 0.5 * static_cast<double>(i % 3), s = sign(i), dn = n;
  double v = 0;
  switch (op) {
    case ReduceOp::sum: v = s * dn * (dn + 1) / 2 + dn * k; break;
    case ReduceOp::avg: v = (s * dn * (dn + 1) / 2 + dn * k) / dn; break;
    case ReduceOp::min: v = (s > 0 ? 1 : -dn) + k; break;
    case ReduceOp::max: v = (s > 0 ? dn : -1) + k; break;
    case ReduceOp::product: {  // c^n * n!
      const double c[] = {1, -1, 2, -0.5, 1.5};
      v = 1;
      for (int j = 1; j <= n; ++j) v *= c[i % 5] * j;
      break;
    }
    case ReduceOp::band: case ReduceOp::bor: case ReduceOp::bxor: break;  // refused
  }
  uint8_t rounded[8];
  write_element(rounded, t, v);  // the type's rounding (only avg rounds)
  return read_element(rounded, t);
}

uint64_t load_bits(const uint8_t* p, DataType t) {
  uint64_t v = 0;
  std::memcpy(&v, p, element_size(t));  // little-endian
  return v;
}

void store(uint8_t* p, DataType t, ReduceOp op, int r, int n, size_t i) {
  if (is_integral_type(t)) {
    const uint64_t v = int_value(op, t, r, n, i);
    std::memcpy(p, &v, element_size(t));  // little-endian: the low bytes, i.e. wrapped
  } else {
    write_element(p, t, float_value(op, r, n, i));
  }
}

// Empty when element i (at p) is the closed form, else what differs.
std::string mismatch(const uint8_t* p, DataType t, ReduceOp op, int n, size_t i) {
  if (is_integral_type(t)) {
    const uint64_t got = load_bits(p, t);
    const uint64_t want = int_expected(op, t, n, i);
    if (got == want) return "";
    return "element " + std::to_string(i) + ": got " + std::to_string(as_signed(t, got)) +
           ", want " + std::to_string(as_signed(t, want));
  }
  const double got = read_element(p, t), want = float_expected(op, t, n, i);
  if (got == want) return "";
  return "element " + std::to_string(i) + ": got " + std::to_string(got) + ", want " +
         std::to_string(want);
}

// ---- Buffers at rank-dependent offsets ------------------------------------------------
// `count` elements starting `offset` bytes past a 64-byte boundary (a whole number of
// elements: torch tensors are element-aligned).
struct Slab {
  Slab(DataType t, size_t count, size_t offset)
      : bytes(count * element_size(t) + 128), base(bytes.data()) {
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64 + offset;
  }
  std::vector<uint8_t> bytes;
  uint8_t* base;
};

size_t offset_for(DataType t, int r, size_t salt) {
  const size_t es = element_size(t);
  return (static_cast<size_t>(r) * 3 + salt) % (64 / es) * es;
}

std::string label(const char* what, DataType t, ReduceOp op, size_t count, int n) {
  return std::string(what) + " " + name(t) + " " + name(op) + " count=" +
         std::to_string(count) + " world=" + std::to_string(n);
}

void expect_closed_form(const uint8_t* p, size_t count, size_t first, DataType t, ReduceOp op,
                        int n, const std::string& what) {
  const size_t es = element_size(t);
  size_t bad = 0;
  std::string first_bad;
  for (size_t j = 0; j < count; ++j) {
    std::string d = mismatch(p + j * es, t, op, n, first + j);
    if (!d.empty() && bad++ == 0) first_bad = d;
  }
  expect(bad == 0, what + ": " + std::to_string(bad) + " wrong, first " + first_bad);
}

// ---- The kernels -----------------------------------------------------------------------
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
  const KernelIsa saved = kernel_isa();
  for (KernelIsa isa : forms()) {
    ASSERT_TRUE(set_kernel_isa(isa));
    for (DataType t : kEveryDataType) {
      const size_t es = element_size(t);
      for (ReduceOp op : kEveryReduceOp) {
        if (!op_applies(op, t)) continue;
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
      }
    }
  }
  set_kernel_isa(saved);
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

// ---- The collectives ------------------------------------------------------------------
void check_allreduce(Communicator& c, DataType t, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t es = element_size(t);
  size_t salt = 0;
  for (size_t count : {size_t{1}, size_t{8}, size_t{5003}}) {
    const bool in_place = ++salt % 2 == 0;
    Slab in(t, count, offset_for(t, r, salt)), out(t, count, offset_for(t, r, salt + 5));
    for (size_t i = 0; i < count; ++i) store(in.base + i * es, t, op, r, n, i);
    uint8_t* result = in_place ? in.base : out.base;
    c.allreduce(in.base, result, count, t, op);
    expect_closed_form(result, count, 0, t, op, n,
                       label(in_place ? "allreduce in place" : "allreduce", t, op, count, n) +
                           " path " + c.last_allreduce_path());
  }
}

void check_reduce(Communicator& c, DataType t, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t es = element_size(t);
  size_t salt = 1;
  for (size_t count : {size_t{1}, size_t{97}, size_t{3001}}) {
    const int root = static_cast<int>(salt++ % n);
    Slab in(t, count, offset_for(t, r, salt)), out(t, count, offset_for(t, r, salt + 2));
    for (size_t i = 0; i < count; ++i) store(in.base + i * es, t, op, r, n, i);
    c.reduce(in.base, out.base, count, t, op, root);
    if (r == root)
      expect_closed_form(out.base, count, 0, t, op, n,
                         label("reduce", t, op, count, n) + " root " + std::to_string(root));
  }
}

void check_reduce_scatter(Communicator& c, DataType t, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t es = element_size(t);
  size_t salt = 2;
  for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{1201}}) {
    // Element j of block b is global index b*count + j; odd counts reduce in place.
    const bool in_place = count % 2 == 1;
    Slab in(t, count * n, offset_for(t, r, ++salt)), out(t, count, offset_for(t, r, salt + 3));
    for (size_t i = 0; i < count * n; ++i) store(in.base + i * es, t, op, r, n, i);
    uint8_t* dst = in_place ? in.base + r * count * es : out.base;
    c.reduce_scatter(in.base, dst, count, t, op);
    expect_closed_form(dst, count, r * count, t, op, n,
                       label("reduce_scatter", t, op, count, n));
  }
}

// Every op that applies to every type (the bitwise ops to the integer types only).
void check_every_op_and_type(Communicator& c) {
  for (DataType t : kEveryDataType)
    for (ReduceOp op : kEveryReduceOp) {
      if (!op_applies(op, t)) continue;
      check_allreduce(c, t, op);
      check_reduce(c, t, op);
      check_reduce_scatter(c, t, op);
    }
}

enum class Layout { kTcp, kShm, kTwoHosts };

class ReduceOps : public ::testing::TestWithParam<std::tuple<int, Layout>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  Layout layout() const { return std::get<1>(GetParam()); }
  void run(const std::function<void(Communicator&)>& body, CommunicatorOptions options = {}) {
    test::StoreProcess store;
    options.timeout = std::chrono::seconds(60);
    setenv("HEFT_ALLREDUCE_CACHE", "off", 1);
    options.shm_chunk_bytes = 4096;  // several chunks at the larger counts
    std::vector<std::string> hosts;
    if (layout() == Layout::kTcp) options.shared_memory = false;
    if (layout() == Layout::kTwoHosts) hosts = test::split_hosts(world(), std::min(2, world()));
    test::RunResult res =
        test::run_world(world(), store, body, options, std::chrono::seconds(120), hosts);
    EXPECT_TRUE(res.all_ok()) << res.summary();
  }
};

TEST_P(ReduceOps, EveryOpAndTypeMatchesTheClosedForm) { run(check_every_op_and_type); }

// The flat forms forced, over TCP (the default above picks by size and topology).
TEST_P(ReduceOps, AllreduceRingAndRecursiveDoubling) {
  if (layout() != Layout::kTcp || world() < 3) GTEST_SKIP() << "the auto run covers it";
  for (Algorithm a : {Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
    CommunicatorOptions o;
    o.allreduce_algorithm = a;
    run([a](Communicator& c) {
      for (DataType t : kEveryDataType)
        for (ReduceOp op : kEveryReduceOp)
          if (op_applies(op, t)) check_allreduce(c, t, op);
      expect(c.last_allreduce_path() == name(a), "ran " + c.last_allreduce_path());
    }, o);
  }
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<int, Layout>>& info) {
  static const char* kLayouts[] = {"tcp", "shm", "two_hosts"};
  return "world" + std::to_string(std::get<0>(info.param)) + "_" +
         kLayouts[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, ReduceOps,
    ::testing::Combine(::testing::Values(1, 2, 3, 4),
                       ::testing::Values(Layout::kTcp, Layout::kShm, Layout::kTwoHosts)),
    param_name);

}  // namespace
}  // namespace heft::comm
