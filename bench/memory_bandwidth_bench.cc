// The memory-bandwidth bound of a shared-memory allreduce on this machine: a plain memcpy
// and a sum-into loop (dst[i] += src[i], f32), at the sizes the collectives move, and the
// copy of a buffer another core has just written (BM_CopyFromPeerCore: what a rank pays to
// read a peer's slot; heft's copy kernel). Reported as bytes processed per second (one
// buffer's worth per iteration). BM_CacheLineRoundTrip: one cache line passed from the first
// CPU to the second and back (ns a round trip, the iteration's time): how far apart the two
// cores are. On the 2-vCPU cloud machines here the host places the vCPUs near (about 100 ns:
// a shared cache) or far (about 400 ns) and moves them within seconds; every shared-memory
// collective's speed follows it (docs/performance.md).
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

// The first two CPUs this process may run on, or {-1, -1}.
std::pair<int, int> two_cpus() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return {-1, -1};
  int cpus[2] = {-1, -1};
  for (int c = 0, found = 0; c < CPU_SETSIZE && found < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  return {cpus[0], cpus[1]};
}

// Each iteration: a thread on a second CPU writes the source (its lines then sit in that
// core's cache, as a peer's freshly written slot does), then this thread, on the first CPU,
// copies it; only the copy is timed.
void BM_CopyFromPeerCore(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) CPU_ZERO(&allowed);
  const auto [first, second] = two_cpus();
  const int cpus[2] = {first, second};
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

void BM_CacheLineRoundTrip(benchmark::State& state) {
  const auto [first, second] = two_cpus();
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) CPU_ZERO(&allowed);
  if (second < 0 || !pin(first)) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  alignas(64) std::atomic<int64_t> line{0};
  std::thread echo([&, second = second] {
    pin(second);
    for (int64_t seen = 0;;) {
      int64_t v;
      while ((v = line.load(std::memory_order_acquire)) == seen) {
      }
      if (v < 0) return;
      line.store(seen = v + 1, std::memory_order_release);
    }
  });
  int64_t sent = 0;
  for (auto _ : state) {
    line.store(sent + 1, std::memory_order_release);
    while (line.load(std::memory_order_acquire) != sent + 2) {
    }
    sent += 2;
  }
  line.store(-1, std::memory_order_release);
  echo.join();
  sched_setaffinity(0, sizeof(allowed), &allowed);
}

BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_SumInto)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_CopyFromPeerCore)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_SumIntoBf16)->RangeMultiplier(16)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_CacheLineRoundTrip)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
