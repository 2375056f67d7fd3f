// ctest-labels: multiproc
// The shared-memory allreduce's per-call choice from the ranks' placement (transport/shm/
// context.h, Context::far): far, the direct form writes both slot areas with streaming
// stores; near, cached. A test cannot choose where the host puts its CPUs, so the placement
// is forced (CommunicatorOptions::shm_placement) or the probe's threshold is (1 ns: every
// probe says far; INT_MAX: none does), on ranks pinned one per CPU where the probe runs.
// Each choice is shown to run (PathCounts: far, probes, streamed), the same on every rank,
// with exact results; the probe's syncs are not the collective's, and a call that other
// ranks made with another size still fails on every rank when a probe is its first sync.
// Real forked ranks.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/error.h"
#include "support/ranks.h"
#include "support/values.h"

namespace heft::comm {
namespace {

using test::Buffer;
using test::expect;
using Placement = CommunicatorOptions::ShmPlacement;

// Rank r's element i: small integers, exact in every dtype under sum and max.
double contribution(int r, size_t i) {
  return static_cast<double>((r + 1) * (i % 2 ? -1 : 1)) + static_cast<double>(i % 5);
}

double expected(ReduceOp op, int n, size_t i) {
  double acc = contribution(0, i);
  for (int r = 1; r < n; ++r)
    acc = op == ReduceOp::max ? std::max(acc, contribution(r, i)) : acc + contribution(r, i);
  return op == ReduceOp::avg ? static_cast<double>(static_cast<float>(acc) / static_cast<float>(n))
                             : acc;
}

// Allreduces of every kind the far path treats apart (one pass or not, an average, bf16),
// at misaligned offsets; throws on the first wrong element. Returns the number of calls.
int exact_calls(Communicator& c) {
  const int r = c.rank(), n = c.size();
  struct Case {
    DataType t;
    ReduceOp op;
  };
  int calls = 0;
  for (const Case& k : {Case{DataType::f32, ReduceOp::sum}, Case{DataType::i32, ReduceOp::max},
                        Case{DataType::f32, ReduceOp::avg}, Case{DataType::bf16, ReduceOp::sum}})
    for (size_t count : {size_t{97}, size_t{20011}, size_t{1} << 18}) {
      const size_t skip = (3 + 5 * static_cast<size_t>(r)) % 17;  // elements
      Buffer b(k.t, count + skip);
      for (size_t i = 0; i < count; ++i) b.set(skip + i, contribution(r, i));
      c.allreduce(b.at(skip), count, k.t, k.op);
      ++calls;
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += b.get(skip + i) != expected(k.op, n, i);
      expect(wrong == 0, std::to_string(wrong) + " wrong of " + std::to_string(count) + " " +
                             name(k.t) + " " + name(k.op) + " on " + std::to_string(n) +
                             " ranks, path " + c.last_allreduce_path());
    }
  return calls;
}

CommunicatorOptions direct_options(Placement placement) {
  CommunicatorOptions o;
  o.shm_form = CommunicatorOptions::ShmForm::kDirect;
  o.shm_small_bytes = 0;
  o.shm_chunk_bytes = 4096;  // many pieces per slice
  o.shm_placement = placement;
  o.timeout = std::chrono::seconds(60);
  return o;
}

// Forced far: every direct call streams both areas (counted), results exact, no probe; the
// sums reduce into the buffer and stream into the out area in one pass (one_pass counted).
TEST(ShmPlacement, ForcedFarStreamsAndIsExact) {
  for (int n : {2, 3}) {
    test::StoreProcess store;
    auto res = test::run_world(n, store, [](Communicator& c) {
      const int calls = exact_calls(c);
      const shm::PathCounts k = c.shm_path_counts();
      expect(k.direct == static_cast<uint64_t>(calls) && k.far == k.direct,
             "direct=" + std::to_string(k.direct) + " far=" + std::to_string(k.far));
      expect(k.streamed > 0 && k.probes == 0 && k.one_pass > 0,
             "streamed=" + std::to_string(k.streamed) + " probes=" + std::to_string(k.probes) +
                 " one_pass=" + std::to_string(k.one_pass));
    }, direct_options(Placement::kFar));
    EXPECT_TRUE(res.all_ok()) << n << " ranks\n" << res.summary();
  }
}

// Forced near: cached stores, as before the probe existed.
TEST(ShmPlacement, ForcedNearCachesAndIsExact) {
  test::StoreProcess store;
  auto res = test::run_world(2, store, [](Communicator& c) {
    exact_calls(c);
    const shm::PathCounts k = c.shm_path_counts();
    expect(k.far == 0 && k.streamed == 0 && k.probes == 0 && k.one_pass > 0,
           "far=" + std::to_string(k.far) + " streamed=" + std::to_string(k.streamed) +
               " probes=" + std::to_string(k.probes) + " one_pass=" + std::to_string(k.one_pass));
  }, direct_options(Placement::kNear));
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// Two ranks joining a world with `o`: pinned one per CPU (as `heft run` binds them), or free
// to move (as torchrun or mp.spawn start them).
test::RunResult pair(const test::StoreProcess& store, CommunicatorOptions o,
                     const std::function<void(Communicator&)>& body, bool pinned = true) {
  o.token = store.token();
  static int worlds = 0;
  const std::string group = "test/placement" + std::to_string(worlds++);
  return test::run_ranks(2, [&](int rank) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(rank, &one);
    expect(!pinned || sched_setaffinity(0, sizeof(one), &one) == 0,
           "pinning rank " + std::to_string(rank));
    auto c = Communicator::create(store.connect(), group, rank, 2, o);
    body(*c);
  });
}

bool two_cpus() {
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_ISSET(0, &cpus) &&
         CPU_ISSET(1, &cpus);
}

// Measured: a probe at the 1st, 9th, 17th direct call; its answer follows the threshold,
// is the same on both ranks and holds until the next probe; the probe's syncs are not
// counted as the collective's (3 per 1 MiB, as without it).
TEST(ShmPlacement, MeasuredChoiceFollowsTheProbeOnEveryRank) {
  if (!two_cpus()) GTEST_SKIP() << "needs CPUs 0 and 1 to pin two ranks apart";
  for (int far_ns : {1, INT_MAX}) {
    test::StoreProcess store;
    CommunicatorOptions o;
    o.shm_far_sync_ns = far_ns;
    o.shm_chunk_bytes = 256 << 10;  // 3 syncs per 1 MiB (the default follows the L2 size)
    auto res = pair(store, o, [far_ns](Communicator& c) {
      const size_t count = (1 << 20) / 4;
      std::vector<float> x(count);
      uint64_t syncs = 0;
      for (int call = 0; call < 20; ++call) {
        std::fill(x.begin(), x.end(), static_cast<float>(c.rank() + call));
        const uint64_t before = c.shm_path_counts().syncs;
        c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        syncs += c.shm_path_counts().syncs - before;
        expect(x[0] == static_cast<float>(1 + 2 * call) && x[count - 1] == x[0],
               "call " + std::to_string(call) + ": " + std::to_string(x[0]));
        // The plan carries the placement the probe gave.
        const AllreducePlan plan = c.last_allreduce_plan();
        expect(plan.algorithm == Algorithm::kShm && plan.shm == ShmStep::kDirect &&
                   plan.far == (far_ns == 1) && plan.bytes == count * 4,
               "call " + std::to_string(call) + " planned " + plan.path() +
                   (plan.far ? " far" : " near"));
      }
      const shm::PathCounts k = c.shm_path_counts();
      const bool far = far_ns == 1;
      expect(k.probes == 3 && k.probe_ns > 0,
             "probes=" + std::to_string(k.probes) + " probe_ns=" + std::to_string(k.probe_ns));
      expect(k.far == (far ? 20u : 0u) && (k.streamed > 0) == far,
             "far=" + std::to_string(k.far) + " streamed=" + std::to_string(k.streamed));
      expect(syncs == 60, std::to_string(syncs) + " syncs in 20 allreduces of 1 MiB");
      // Both ranks saw the same probe (rank 0's measurement).
      std::vector<int64_t> seen{static_cast<int64_t>(k.probe_ns), static_cast<int64_t>(k.far)};
      std::vector<int64_t> lowest = seen;
      c.allreduce(lowest.data(), lowest.size(), DataType::i64, ReduceOp::min);
      expect(lowest == seen, "the ranks' probes differ: " + std::to_string(k.probe_ns) +
                                 " ns against " + std::to_string(lowest[0]));
    });
    EXPECT_TRUE(res.all_ok()) << "far_sync_ns " << far_ns << "\n" << res.summary();
  }
}

// Large calls probe more often: after 8 MiB since the last probe as well as after 8 calls,
// so a change of placement is seen within a call or two at 4 MiB and up (the probes at the
// 1st, 3rd, 5th call of 4 MiB; at every call of 16 MiB), the same on both ranks.
TEST(ShmPlacement, LargeCallsProbeByTheirBytes) {
  if (!two_cpus()) GTEST_SKIP() << "needs CPUs 0 and 1 to pin two ranks apart";
  test::StoreProcess store;
  auto res = pair(store, CommunicatorOptions{}, [](Communicator& c) {
    auto probes_in = [&c](size_t bytes, int calls) {
      std::vector<float> x(bytes / 4);
      const uint64_t before = c.shm_path_counts().probes;
      for (int call = 0; call < calls; ++call) {
        std::fill(x.begin(), x.end(), static_cast<float>(c.rank() + call));
        c.allreduce(x.data(), x.size(), DataType::f32, ReduceOp::sum);
        expect(x[0] == static_cast<float>(1 + 2 * call) && x.back() == x[0],
               std::to_string(bytes) + " bytes, call " + std::to_string(call));
      }
      return c.shm_path_counts().probes - before;
    };
    const uint64_t four = probes_in(4 << 20, 6);
    expect(four == 3, std::to_string(four) + " probes in 6 calls of 4 MiB, expected 3");
    const uint64_t sixteen = probes_in(16 << 20, 3);
    expect(sixteen == 3, std::to_string(sixteen) + " probes in 3 calls of 16 MiB, expected 3");
    const uint64_t small = probes_in(256 << 10, 16);  // 8 calls between probes
    expect(small == 2, std::to_string(small) + " probes in 16 calls of 256 KiB, expected 2");
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// Ranks free to move (unbound, as torchrun or mp.spawn start them) probe too: a probe during
// which both ran on two CPUs answers as for pinned ranks; one where they shared a CPU or one
// moved leaves the last answer (counted unanswered). The same on both ranks either way.
TEST(ShmPlacement, FreeRanksProbeWhileOnTwoCpus) {
  if (!two_cpus()) GTEST_SKIP() << "needs CPUs 0 and 1";
  for (int far_ns : {1, INT_MAX}) {
    test::StoreProcess store;
    CommunicatorOptions o;
    o.shm_far_sync_ns = far_ns;
    auto res = pair(store, o, [far_ns](Communicator& c) {
      const size_t count = (1 << 20) / 4;
      std::vector<float> x(count);
      for (int call = 0; call < 40; ++call) {
        std::fill(x.begin(), x.end(), static_cast<float>(c.rank() + call));
        c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        expect(x[0] == static_cast<float>(1 + 2 * call) && x[count - 1] == x[0],
               "call " + std::to_string(call) + ": " + std::to_string(x[0]));
      }
      const shm::PathCounts k = c.shm_path_counts();
      expect(k.probes == 5 && k.unanswered <= k.probes,
             "probes=" + std::to_string(k.probes) + " unanswered=" + std::to_string(k.unanswered));
      // Far from the first answered probe on (threshold 1 ns), never far (the maximum).
      if (far_ns == INT_MAX) expect(k.far == 0, "far=" + std::to_string(k.far));
      if (far_ns == 1 && k.unanswered < k.probes) expect(k.far > 0, "no far call");
      std::vector<int64_t> seen{static_cast<int64_t>(k.far), static_cast<int64_t>(k.unanswered)};
      std::vector<int64_t> lowest = seen;
      c.allreduce(lowest.data(), lowest.size(), DataType::i64, ReduceOp::min);
      expect(lowest == seen, "the ranks' answers differ: far " + std::to_string(k.far) +
                                 " against " + std::to_string(lowest[0]));
    }, /*pinned=*/false);
    EXPECT_TRUE(res.all_ok()) << "far_sync_ns " << far_ns << "\n" << res.summary();
  }
}

// The probe is then the call's first sync: ranks that called with other sizes still fail
// together, naming both counts, instead of one probing while the other moves data.
TEST(ShmPlacement, MismatchedCallFailsAtTheProbe) {
  if (!two_cpus()) GTEST_SKIP() << "needs CPUs 0 and 1 to pin two ranks apart";
  test::StoreProcess store;
  CommunicatorOptions o;
  o.timeout = std::chrono::seconds(20);
  auto res = pair(store, o, [](Communicator& c) {
    std::vector<float> x(c.rank() == 0 ? 300000 : 200000, 1.0f);
    try {
      c.allreduce(x.data(), x.size(), DataType::f32, ReduceOp::sum);
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      expect(what.find("300000") != std::string::npos && what.find("200000") != std::string::npos,
             "message names both counts: " + what);
      return;
    }
    expect(false, "a mismatched allreduce ran");
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// This machine's line (measure_far_line: HEFT_SHM_FAR_NS auto): a probe's reading is classed
// by half-octave, and each class takes the stores rank 0's record holds for it. Calls under
// 256 KiB never time the stores (the line decides, nothing is recorded); the first probe of a
// 1 MiB call whose class is new times both stores and records its class; a record edited by
// hand decides every call's stores (all far: every call streams; all near: none does), with
// no measurement. Exact sums throughout.
TEST(ShmPlacement, MeasuredLineClassifiesReadingsByTheRecord) {
  if (!two_cpus()) GTEST_SKIP() << "needs CPUs 0 and 1 to pin two ranks apart";
  const std::string dir = ::testing::TempDir() + "heft-far-line-" + std::to_string(getpid());
  const std::string cache = dir + "/allreduce-forms";
  std::filesystem::remove_all(dir);
  setenv("HEFT_ALLREDUCE_CACHE", cache.c_str(), 1);  // read by rank 0 only
  CommunicatorOptions o;
  o.measure_far_line = true;
  o.shm_chunk_bytes = 256 << 10;
  // `calls` allreduces of `bytes` on a fresh pair; checks the sums and what `check` says.
  const auto lifetime = [&](size_t bytes, const std::function<void(Communicator&, int calls_far)>& check) {
    test::StoreProcess store;
    auto res = pair(store, o, [&](Communicator& c) {
      std::vector<float> x(bytes / 4);
      int calls_far = 0;
      for (int call = 0; call < 20; ++call) {
        std::fill(x.begin(), x.end(), static_cast<float>(c.rank() + call));
        c.allreduce(x.data(), x.size(), DataType::f32, ReduceOp::sum);
        expect(x[0] == static_cast<float>(1 + 2 * call) && x.back() == x[0], "call " + std::to_string(call));
        calls_far += c.last_allreduce_plan().far;
      }
      const shm::PathCounts k = c.shm_path_counts();
      expect(k.far == static_cast<uint64_t>(calls_far) && k.direct == 20,
             "counted far " + std::to_string(k.far) + ", planned " + std::to_string(calls_far) + ", direct " +
                 std::to_string(k.direct));
      check(c, calls_far);
    });
    EXPECT_TRUE(res.all_ok()) << res.summary();
  };
  const auto lines = [&] {
    std::vector<std::pair<int, std::string>> out;
    std::ifstream in(cache);
    for (std::string line; std::getline(in, line);) {
      EXPECT_EQ(line.rfind("shm-far v1 world=2 ", 0), 0u) << line;
      const auto a = line.find('\t'), b = line.rfind('\t');
      out.emplace_back(std::atoi(line.substr(a + 1, b - a - 1).c_str()), line.substr(b + 1));
    }
    return out;
  };
  lifetime(64 << 10, [](Communicator& c, int) {
    expect(c.allreduce_measurements() == 0, "64 KiB calls timed the stores");
  });
  EXPECT_TRUE(lines().empty()) << "a 64 KiB call recorded a class";
  lifetime(1 << 20, [](Communicator& c, int calls_far) {
    const shm::PathCounts k = c.shm_path_counts();
    expect(c.allreduce_measurements() >= 1 && c.allreduce_measurements() <= static_cast<int>(k.probes),
           std::to_string(c.allreduce_measurements()) + " measurements in " + std::to_string(k.probes) + " probes");
    (void)calls_far;
  });
  const auto recorded = lines();
  ASSERT_FALSE(recorded.empty()) << "nothing recorded in " << cache;
  std::string fingerprint;
  {
    std::ifstream in(cache);
    std::getline(in, fingerprint, '\t');
  }
  for (const char* stores : {"far", "near"}) {
    {
      std::ofstream out(cache, std::ios::trunc);
      for (int bucket = 0; bucket < 64; ++bucket) out << fingerprint << '\t' << bucket << '\t' << stores << '\n';
    }
    const bool far = std::string(stores) == "far";
    lifetime(1 << 20, [far](Communicator& c, int calls_far) {
      expect(c.allreduce_measurements() == 0, "measured despite a record");
      expect(calls_far == (far ? 20 : 0), std::to_string(calls_far) + " far calls of 20 under a record of " +
                                               (far ? "far" : "near"));
      const shm::PathCounts k = c.shm_path_counts();
      expect((k.streamed > 0) == far, "streamed " + std::to_string(k.streamed));
    });
  }
  unsetenv("HEFT_ALLREDUCE_CACHE");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace heft::comm
