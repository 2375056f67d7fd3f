// How shm::Context::sync()'s waits end (transport/shm/context.h), read from the PathCounts
// wait counters: after a slow yield puts a rank in the contended mode, ranks on disjoint
// cores still spin briefly before sleeping (a peer on its own core arrives within
// microseconds; sleeping at once made every sync of the next 50 ms a futex wake-up) until
// one such spin fails, while ranks that share a core sleep at once. Two ranks as threads of
// this process, each pinned to a CPU before it creates its context (the placement the
// context reads), over an in-memory store. Counts, not times.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/store/memory_store.h"
#include "heft/comm/transport/shm/context.h"
#include "heft/job/launch/placement.h"

namespace heft::comm::shm {
namespace {

constexpr int kSyncs = 200;

using heft::job::allowed_cpus;  // the launcher's: the CPUs this process may run on

void pin_this_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0) << "cpu " << cpu;
}

// Rank 0's counts around the syncs after its first: before (after the first sync, whose wait
// entered the contended mode) and after kSyncs more.
struct Rank0 {
  bool disjoint = false;
  PathCounts first, last;
};

// Rank 1 arrives late at the first sync (past the spin budget `spin`), so rank 0's wait
// spins, yields (every yield counts as slow: slow_yield_us 0) and enters the contended mode
// for the rest of the test; then both sync kSyncs times (with `late_again`, rank 1 comes
// late to the first of them too, so rank 0's contended spin fails there, and 50 ms late to
// the one in the middle, so rank 0 surely waits again: it failed 1 run in 20 under ctest -j2
// beside a busy loop when rank 1 happened to be the one waiting at every later sync). The
// contended spin is `spin` too: long enough that a loaded machine's scheduler does not fail it.
Rank0 run(int cpu0, int cpu1, std::chrono::milliseconds spin, bool late_again = false) {
  MemoryStore store;
  ContextOptions o;
  o.spin_us = static_cast<int>(spin.count()) * 1000;
  o.yields = 1;
  o.slow_yield_us = 0;
  o.contended_ms = 600'000;
  o.contended_spin_us = o.spin_us;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  Rank0 out;
  auto rank = [&](int r, int cpu) {
    pin_this_thread(cpu);
    std::unique_ptr<Context> ctx = Context::create(store, "wait", r, {0, 1}, o, deadline);
    if (r == 1) std::this_thread::sleep_for(spin + std::chrono::milliseconds(100));
    ctx->sync(deadline, "sync");
    if (r == 0) out.first = ctx->path_counts();
    if (r == 1 && late_again) std::this_thread::sleep_for(spin + std::chrono::milliseconds(50));
    for (int i = 0; i < kSyncs; ++i) {
      if (r == 1 && late_again && i == kSyncs / 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ctx->sync(deadline, "sync");
    }
    if (r == 0) {
      out.last = ctx->path_counts();
      out.disjoint = ctx->placement_disjoint();
    }
    ctx->sync(deadline, "sync");  // rank 1 keeps its segment mapped until rank 0 has read
  };
  cpu_set_t mine;
  sched_getaffinity(0, sizeof(mine), &mine);
  std::thread t1(rank, 1, cpu1);
  rank(0, cpu0);
  t1.join();
  sched_setaffinity(0, sizeof(mine), &mine);  // the next test sees this process's CPUs again
  return out;
}

TEST(ShmWaitPolicy, ContendedWaitsOnDisjointCoresSpinBeforeSleeping) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs, has " << cpus.size();
  const Rank0 r = run(cpus[0], cpus[1], std::chrono::milliseconds(200));
  ASSERT_TRUE(r.disjoint);
  EXPECT_EQ(r.first.contended, 1u) << "the late peer's wait should have yielded slowly";
  EXPECT_GE(r.first.slept, 1u) << "and then slept until the peer came";
  EXPECT_EQ(r.last.contended, 1u);
  // The regression: in the contended mode every wait slept at once (spun stayed put).
  EXPECT_GT(r.last.spun, r.first.spun)
      << "slept " << r.last.slept - r.first.slept << " times in " << kSyncs << " syncs";
  EXPECT_EQ(r.last.yielded, r.first.yielded) << "no yields while contended";
}

TEST(ShmWaitPolicy, AContendedSpinThatFailedMakesTheNextWaitsSleepAtOnce) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs, has " << cpus.size();
  const Rank0 r = run(cpus[0], cpus[1], std::chrono::milliseconds(200), /*late_again=*/true);
  ASSERT_TRUE(r.disjoint);
  EXPECT_EQ(r.last.contended, 1u);
  // The late peer's core was busy (here: asleep): spinning again would only burn this core.
  EXPECT_EQ(r.last.spun, r.first.spun) << "no contended spin after the one that failed";
  EXPECT_GT(r.last.slept, r.first.slept + 1)
      << "the failed wait and the one rank 1 came late to should have slept (slept "
      << r.first.slept << " -> " << r.last.slept << ", spun " << r.first.spun << " -> "
      << r.last.spun << ")";
}

TEST(ShmWaitPolicy, ContendedWaitsOnASharedCoreSleepAtOnce) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) GTEST_SKIP() << "no CPU in this process's affinity";
  const Rank0 r = run(cpus[0], cpus[0], std::chrono::milliseconds(2));
  ASSERT_FALSE(r.disjoint);
  EXPECT_EQ(r.first.contended, 1u);
  EXPECT_EQ(r.last.spun, r.first.spun) << "a rank sharing its core must not spin while contended";
  EXPECT_EQ(r.last.yielded, r.first.yielded);
  EXPECT_GT(r.last.slept, r.first.slept) << "rank 0 waited in none of " << kSyncs << " syncs";
}

}  // namespace
}  // namespace heft::comm::shm
