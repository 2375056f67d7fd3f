// The data kernels of the shared-memory paths (copy.h, reduce.h), in every instruction-set
// form this CPU runs: every relative alignment of destination and sources (0..63 bytes),
// lengths around the vector and unroll widths, every dtype and op, cached and streaming
// stores, against a scalar reference. Bytes just outside the destination must stay untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "heft/comm/copy.h"
#include "heft/comm/cpu.h"
#include "heft/comm/dtype.h"
#include "heft/comm/reduce.h"

namespace heft::comm {
namespace {

constexpr uint8_t kGuard = 0xA5;
// Around the vector, group (4 vectors) and pipeline (2 groups ahead) widths of both forms.
const size_t kLengths[] = {0,   1,   3,   15,  31,   33,   63,   127,  128,  129,
                           255, 256, 257, 383, 384, 385, 511, 1000, 4099, 65537};

std::vector<KernelIsa> forms() {
  std::vector<KernelIsa> out{KernelIsa::kPortable};
  if (cpu_supports(KernelIsa::kAvx2)) out.push_back(KernelIsa::kAvx2);
  return out;
}

// Restores the kernels in use when a test ends.
struct IsaScope {
  KernelIsa saved = kernel_isa();
  explicit IsaScope(KernelIsa isa) { EXPECT_TRUE(set_kernel_isa(isa)); }
  ~IsaScope() { set_kernel_isa(saved); }
};

TEST(Kernels, IsaReportsWhatTheCpuHas) {
  EXPECT_TRUE(cpu_supports(KernelIsa::kPortable));
  EXPECT_TRUE(kernel_isa() == KernelIsa::kPortable || cpu_supports(KernelIsa::kAvx2));
  EXPECT_GT(last_level_cache_bytes(), size_t{64} << 10);
  std::printf("kernels: %s, last-level cache %zu KiB\n", name(kernel_isa()),
              last_level_cache_bytes() >> 10);
}

TEST(Kernels, CopyEveryAlignmentAndLength) {
  std::mt19937 rng(7);
  std::vector<uint8_t> src(70000 + 128), dst(70000 + 256);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  for (KernelIsa isa : forms()) {
    IsaScope scope(isa);
    for (StoreHint hint : {StoreHint::kCached, StoreHint::kStreaming}) {
      for (size_t n : kLengths) {
        for (size_t d = 0; d < 64; ++d) {
          const size_t s = (d * 37 + 5) % 64;  // a different source offset for each d
          std::fill(dst.begin(), dst.end(), kGuard);
          copy_bytes(dst.data() + 64 + d, src.data() + s, n, hint);
          ASSERT_EQ(std::memcmp(dst.data() + 64 + d, src.data() + s, n), 0)
              << name(isa) << " n=" << n << " dst offset " << d << " src offset " << s;
          ASSERT_EQ(dst[63 + d], kGuard) << name(isa) << " wrote before dst, n=" << n;
          ASSERT_EQ(dst[64 + d + n], kGuard) << name(isa) << " wrote past dst, n=" << n;
        }
      }
    }
  }
}

double apply(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return a + b;
    case ReduceOp::min: return std::min(a, b);
    case ReduceOp::max: return std::max(a, b);
    case ReduceOp::product: return a * b;
    case ReduceOp::band: return static_cast<double>(int64_t(a) & int64_t(b));
    case ReduceOp::bor: return static_cast<double>(int64_t(a) | int64_t(b));
    case ReduceOp::bxor: return static_cast<double>(int64_t(a) ^ int64_t(b));
  }
  return 0;
}

// Small integers and halves: exact in every dtype, so the reference (computed in double,
// rounded once to the dtype) is what a correct kernel gives.
void fill(uint8_t* p, size_t count, DataType t, std::mt19937& rng) {
  const size_t es = element_size(t);
  for (size_t i = 0; i < count; ++i) {
    double v = static_cast<double>(static_cast<int>(rng() % 201) - 100);
    if (t != DataType::i32 && t != DataType::i64) v += (rng() % 2) * 0.5;
    write_element(p + i * es, t, v);
  }
}

TEST(Kernels, ReduceToEveryDtypeOpAlignmentAndLength) {
  std::mt19937 rng(11);
  const size_t kMax = 4099;
  for (KernelIsa isa : forms()) {
    IsaScope scope(isa);
    for (DataType t : kAllDataTypes) {
      const size_t es = element_size(t);
      std::vector<uint8_t> a(kMax * es + 128), b(kMax * es + 128), dst(kMax * es + 256);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::max, ReduceOp::avg}) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{257}, kMax}) {
          // Offsets in whole elements (the kernels take typed buffers), covering every
          // relative alignment of the three buffers that the dtype allows.
          for (size_t d = 0; d < 64; d += es) {
            const size_t x = (d * 3 + es) % 64 / es * es, y = (d * 7 + 2 * es) % 64 / es * es;
            fill(a.data() + x, n, t, rng);
            fill(b.data() + y, n, t, rng);
            std::fill(dst.begin(), dst.end(), kGuard);
            for (StoreHint hint : {StoreHint::kCached, StoreHint::kStreaming}) {
              reduce_to(dst.data() + 64 + d, a.data() + x, b.data() + y, n, t, op, hint);
              size_t wrong = 0;
              for (size_t i = 0; i < n; ++i) {
                // Rounded once to the dtype, as the kernels round (f16/bf16: in f32, then once).
                uint8_t rounded[8];
                write_element(rounded, t, apply(op, read_element(a.data() + x + i * es, t),
                                                read_element(b.data() + y + i * es, t)));
                const double want = read_element(rounded, t);
                wrong += read_element(dst.data() + 64 + d + i * es, t) != want;
              }
              ASSERT_EQ(wrong, 0u) << name(isa) << " " << name(t) << " " << name(op) << " n=" << n
                                   << " offsets dst " << d << " a " << x << " b " << y;
              ASSERT_EQ(dst[63 + d], kGuard);
              ASSERT_EQ(dst[64 + d + n * es], kGuard);
            }
          }
        }
      }
    }
  }
}

// reduce_into is reduce_to with dst == a.
TEST(Kernels, ReduceIntoInPlace) {
  std::vector<float> x(1001), y(1001);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 0.5f * static_cast<float>(i);
  }
  reduce_into(x.data(), y.data(), x.size(), DataType::f32, ReduceOp::sum);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], 1.5f * static_cast<float>(i));
}

// The portable and AVX2 forms give the same bits on arbitrary floats, NaNs and signed
// zeros included (results must be identical on ranks that run different forms).
TEST(Kernels, FormsAgreeBitForBit) {
  if (!cpu_supports(KernelIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937 rng(3);
  const size_t n = 10007;
  for (DataType t : kAllDataTypes) {
    const size_t es = element_size(t);
    std::vector<uint8_t> a(n * es), b(n * es), out[2];
    for (auto& v : a) v = static_cast<uint8_t>(rng());
    for (auto& v : b) v = static_cast<uint8_t>(rng());
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::max}) {
      for (int f = 0; f < 2; ++f) {
        IsaScope scope(f ? KernelIsa::kAvx2 : KernelIsa::kPortable);
        out[f].assign(n * es, 0);
        reduce_to(out[f].data(), a.data(), b.data(), n, t, op);
      }
      EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), n * es), 0) << name(t) << " " << name(op);
    }
  }
}

}  // namespace
}  // namespace heft::comm
