// The memory-bandwidth bound of a shared-memory allreduce on this machine: a plain memcpy
// and a sum-into loop (dst[i] += src[i], f32), at the sizes the collectives move. Reported
// as bytes processed per second (one buffer's worth per iteration).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "heft/comm/reduce.h"

namespace {

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(a.data(), b.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_SumInto(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<float> a(bytes / 4, 1.0f), b(bytes / 4, 2.0f);
  for (auto _ : state) {
    heft::comm::reduce_into(a.data(), b.data(), a.size(), heft::comm::DataType::f32,
                            heft::comm::ReduceOp::sum);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_SumIntoBf16(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint16_t> a(bytes / 2, heft::comm::float_to_bf16(1.0f)),
      b(bytes / 2, heft::comm::float_to_bf16(2.0f));
  for (auto _ : state) {
    heft::comm::reduce_into(a.data(), b.data(), a.size(), heft::comm::DataType::bf16,
                            heft::comm::ReduceOp::sum);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_SumInto)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_SumIntoBf16)->RangeMultiplier(16)->Range(4 << 10, 64 << 20);

}  // namespace

BENCHMARK_MAIN();
