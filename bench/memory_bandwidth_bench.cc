// The memory-bandwidth bound of a shared-memory allreduce on this machine: a plain memcpy
// and a sum-into loop (dst[i] += src[i], f32), at the sizes the collectives move, and the
// copy of a buffer another core has just written (BM_CopyFromPeerCore: what a rank pays to
// read a peer's slot; heft's copy kernel). Reported as bytes processed per second (one
// buffer's worth per iteration).
#include <benchmark/benchmark.h>
#include <sched.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "heft/comm/copy.h"
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

bool pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof(one), &one) == 0;
}

// Each iteration: a thread on a second CPU writes the source (its lines then sit in that
// core's cache, as a peer's freshly written slot does), then this thread, on the first CPU,
// copies it; only the copy is timed.
void BM_CopyFromPeerCore(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) CPU_ZERO(&allowed);
  int cpus[2] = {-1, -1};
  for (int c = 0, found = 0; c < CPU_SETSIZE && found < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  if (cpus[1] < 0 || !pin(cpus[0])) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  std::vector<char> src(bytes, 1), dst(bytes, 2);
  std::atomic<int> asked{0}, written{0};
  std::thread writer([&] {
    pin(cpus[1]);
    for (int seen = 0;;) {
      int want;
      while ((want = asked.load(std::memory_order_acquire)) == seen) sched_yield();
      if (want < 0) return;
      std::memset(src.data(), want & 0x7f, bytes);
      written.store(seen = want, std::memory_order_release);
    }
  });
  int round = 0;
  for (auto _ : state) {
    state.PauseTiming();
    asked.store(++round, std::memory_order_release);
    while (written.load(std::memory_order_acquire) != round) sched_yield();
    state.ResumeTiming();
    heft::comm::copy_bytes(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  asked.store(-1, std::memory_order_release);
  writer.join();
  sched_setaffinity(0, sizeof(allowed), &allowed);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_SumInto)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_CopyFromPeerCore)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_SumIntoBf16)->RangeMultiplier(16)->Range(4 << 10, 64 << 20);

}  // namespace

BENCHMARK_MAIN();
