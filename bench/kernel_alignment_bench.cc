// Copy and reduce kernels across the 64 relative alignments of destination and source, at
// sizes inside L2 (64 and 256 KiB, where glibc 2.36 copies with `rep movsb`, which on AMD
// Zen 3/4 falls off a cliff when (dst - src) mod 64 is between 4 and 28), at its size (1 MiB
// on Zen 5) and past it (4 MiB). Kernels: glibc's memcpy, heft's copy_bytes (AVX2 and
// portable), heft's reduce_to (f32 sum, dst = a + b) and reduce_to_both (the same result
// stored into dst and a second output dst2 at the same offset, as the direct allreduce's
// last fold does). Sources 16 bytes into a page (a large malloc'd buffer), outputs at
// +offset. Arguments: (kernel, bytes, relative offset); bytes per second is one buffer's
// worth.
// bench/allreduce_vs_peers.sh summarises the rows: best, worst and worst/best per kernel.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "heft/comm/copy.h"
#include "heft/comm/cpu.h"
#include "heft/comm/reduce.h"

namespace {

using heft::comm::KernelIsa;

enum Kernel { kGlibcMemcpy, kHeftCopyAvx2, kHeftCopyPortable, kHeftSumAvx2, kHeftSumBothAvx2 };

void BM_Align(benchmark::State& state) {
  const auto kernel = static_cast<Kernel>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1));
  const size_t offset = static_cast<size_t>(state.range(2));
  const KernelIsa isa = kernel == kHeftCopyPortable ? KernelIsa::kPortable : KernelIsa::kAvx2;
  if (kernel != kGlibcMemcpy && !heft::comm::set_kernel_isa(isa)) {
    state.SkipWithError("this CPU has no AVX2");
    return;
  }
  // Sources 16 bytes into a page, as a large malloc'd buffer is; destination at +offset.
  auto* a = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes + 8192));
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes + 8192));
  auto* d = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes + 8192));
  auto* e = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes + 8192));
  std::memset(a, 1, bytes + 8192);
  std::memset(b, 0, bytes + 8192);
  std::memset(d, 2, bytes + 8192);
  std::memset(e, 2, bytes + 8192);
  const uint8_t* src = a + 16;
  uint8_t* dst = d + 16 + offset;
  for (auto _ : state) {
    switch (kernel) {
      case kGlibcMemcpy: std::memcpy(dst, src, bytes); break;
      case kHeftCopyAvx2:
      case kHeftCopyPortable: heft::comm::copy_bytes(dst, src, bytes); break;
      case kHeftSumAvx2:
        heft::comm::reduce_to(dst, src, b + 16, bytes / 4, heft::comm::DataType::f32,
                              heft::comm::ReduceOp::sum);
        break;
      case kHeftSumBothAvx2:
        heft::comm::reduce_to_both(dst, e + 16 + offset, src, b + 16, bytes / 4,
                                   heft::comm::DataType::f32, heft::comm::ReduceOp::sum);
        break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  std::free(a);
  std::free(b);
  std::free(d);
  std::free(e);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int kernel : {kGlibcMemcpy, kHeftCopyAvx2, kHeftCopyPortable, kHeftSumAvx2,
                     kHeftSumBothAvx2})
    for (int64_t bytes : {int64_t{64} << 10, int64_t{256} << 10, int64_t{1} << 20,
                          int64_t{4} << 20})
      for (int offset = 0; offset < 64; ++offset) b->Args({kernel, bytes, offset});
}

BENCHMARK(BM_Align)->Apply(Args)->ArgNames({"kernel", "bytes", "offset"});

}  // namespace

BENCHMARK_MAIN();
