// ctest-labels: multiproc
// Every reduce op x every element type (dtype.h) through allreduce, reduce and reduce_scatter
// on 1-4 real forked ranks over TCP, one shared-memory host and two hosts, at buffer offsets
// that differ between ranks, checked bit for bit against closed forms. Integer sum and
// product wrap modulo 2^bits (Gloo's results: C++ arithmetic, unsigned wrap). The kernels
// alone: reduce_kernels_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/comm/dtype.h"
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

// The flat forms forced, over TCP, on 3 and 4 ranks (the runs above pick by size).
TEST(ReduceOpsForced, AllreduceRingAndRecursiveDoubling) {
  setenv("HEFT_ALLREDUCE_CACHE", "off", 1);
  for (int n : {3, 4})
    for (Algorithm a : {Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
      CommunicatorOptions o;
      o.shared_memory = false;
      o.allreduce_algorithm = a;
      o.timeout = std::chrono::seconds(60);
      test::StoreProcess store;
      test::RunResult res = test::run_world(n, store, [a](Communicator& c) {
        for (DataType t : kEveryDataType)
          for (ReduceOp op : kEveryReduceOp)
            if (op_applies(op, t)) check_allreduce(c, t, op);
        expect(c.last_allreduce_path() == name(a), "ran " + c.last_allreduce_path());
      }, o);
      EXPECT_TRUE(res.all_ok()) << name(a) << " world " << n << "\n" << res.summary();
    }
}

// A bitwise op on a float is refused before anything is sent, naming the collective, the op
// and the type, on every rank alike, and the communicator stays usable.
TEST(ReduceOpsRefused, BitwiseOnFloatBeforeAnythingIsSent) {
  for (int n : {1, 2}) {
    test::StoreProcess store;
    test::RunResult res = test::run_world(n, store, [](Communicator& c) {
      float x[4] = {1, 2, 3, 4}, y[4] = {};
      for (int which = 0; which < 3; ++which) {
        std::string said;
        try {
          if (which == 0) c.allreduce(x, y, 4, DataType::f32, ReduceOp::band);
          if (which == 1) c.reduce(x, y, 4, DataType::f64, ReduceOp::bor, 0);
          if (which == 2) c.reduce_scatter(x, y, 4 / c.size(), DataType::bf16, ReduceOp::bxor);
        } catch (const heft::InvalidArgument& e) {
          said = e.what();
        }
        const char* op[] = {"band", "bor", "bxor"};
        const char* type[] = {"f32", "f64", "bf16"};
        expect(said.find(op[which]) != std::string::npos &&
                   said.find(type[which]) != std::string::npos,
               "refusal " + std::to_string(which) + ": '" + said + "'");
      }
      expect(c.healthy(), "unhealthy after a refusal");
      c.allreduce(x, y, 4, DataType::f32, ReduceOp::sum);
      expect(y[3] == 4.0f * static_cast<float>(c.size()), "sum after the refusals");
    });
    EXPECT_TRUE(res.all_ok()) << "world " << n << "\n" << res.summary();
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
