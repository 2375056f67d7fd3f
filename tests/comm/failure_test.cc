// ctest-labels: multiproc
// What happens when a rank dies or hangs: every other rank raises heft::PeerLost naming the
// lost rank (or heft::Timeout) within the timeout, never hangs; a broken communicator keeps
// failing; a peer with the wrong job token is refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/error.h"
#include "support/ranks.h"

namespace heft::comm {
namespace {

using Clock = std::chrono::steady_clock;
using test::expect;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The names in /dev/shm that this run's ranks created: a segment's name ends in its
// creator's pid ("heft-<group hash>-<local rank>-<pid>", shm/context.cc), so segments of
// other tests running alongside (ctest -j) are not counted.
std::set<std::string> segments_of(const std::vector<pid_t>& pids) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("heft-", 0) != 0) continue;
    for (pid_t p : pids)
      if (p > 0 && name.size() > std::to_string(p).size() + 1 &&
          name.compare(name.size() - std::to_string(p).size() - 1, std::string::npos,
                       "-" + std::to_string(p)) == 0)
        names.insert(name);
  }
  return names;
}

// A table of n pids the forked ranks write and the parent reads (shared, anonymous).
class PidTable {
 public:
  explicit PidTable(int n) : n_(n) {
    void* p = mmap(nullptr, sizeof(pid_t) * n, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("mmap of the pid table failed");
    pids_ = static_cast<pid_t*>(p);
    std::fill(pids_, pids_ + n, pid_t{0});
  }
  ~PidTable() { munmap(pids_, sizeof(pid_t) * n_); }
  void record(int rank) { pids_[rank] = getpid(); }
  std::vector<pid_t> pids() const { return {pids_, pids_ + n_}; }

 private:
  int n_;
  pid_t* pids_ = nullptr;
};

// Rank `victim` starts a large allreduce and is SIGKILLed in the middle of it; the others
// must raise PeerLost naming it, well before the 30 s timeout, and no shared-memory segment
// may be left behind.
void kill_one_rank_mid_allreduce(int n, int victim, Algorithm algo,
                                 std::vector<std::string> hosts = {}, int core_group = -1) {
  PidTable pids(n);
  test::StoreProcess store;
  CommunicatorOptions o;
  o.timeout = std::chrono::seconds(30);
  o.allreduce_algorithm = algo;
  o.shm_core_group = core_group;
  // Groups forced: the core-grouped form runs where the placement reads far.
  if (core_group > 0) o.shm_placement = CommunicatorOptions::ShmPlacement::kFar;
  test::RunResult res = test::run_world(
      n, store,
      [&](Communicator& c) {
        pids.record(c.rank());
        std::vector<float> buf(8 << 20, 1.0f);  // 32 MiB: many ring steps
        c.allreduce(buf.data(), buf.size(), DataType::f32, ReduceOp::sum);  // warm-up
        if (c.rank() == victim) {
          auto w = c.allreduce_async(buf.data(), buf.data(), buf.size(), DataType::f32,
                                     ReduceOp::sum);
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          raise(SIGKILL);
        }
        const auto start = Clock::now();
        try {
          for (int i = 0; i < 100; ++i)
            c.allreduce(buf.data(), buf.size(), DataType::f32, ReduceOp::sum);
        } catch (const PeerLost& e) {
          expect(e.peer() == victim, std::string("PeerLost names the victim: ") + e.what());
          expect(e.rank() == c.rank(), "PeerLost names this rank");
          expect(seconds_since(start) < 20, "PeerLost took longer than 20 s");
          // The communicator stays broken: later calls fail at once, with the same error.
          float x = 1;
          try {
            c.allreduce(&x, 1, DataType::f32, ReduceOp::sum);
          } catch (const PeerLost& again) {
            expect(again.peer() == victim, "a later call rethrows the same PeerLost");
            expect(!c.healthy(), "healthy() is false after a failure");
            return;
          }
          throw Error("a call after PeerLost succeeded");
        }
        throw Error("no PeerLost after the victim was killed");
      },
      o, std::chrono::seconds(60), hosts);
  ASSERT_FALSE(res.timed_out) << res.summary();
  // Every rank exited (the victim killed, the others returned): none of their segments may
  // be left, the victim's included (its peers unlink it).
  for (pid_t p : pids.pids()) EXPECT_GT(p, 0) << "a rank never reached its body";
  const std::set<std::string> left = segments_of(pids.pids());
  EXPECT_TRUE(left.empty()) << "shared-memory segments leaked in /dev/shm: " << left.size()
                            << ", e.g. " << (left.empty() ? "" : *left.begin());
  for (const test::RankExit& e : res.ranks) {
    if (e.rank == victim) {
      EXPECT_EQ(e.signal, SIGKILL) << res.summary();
    } else {
      EXPECT_EQ(e.exit_code, 0) << res.summary();
      EXPECT_LT(e.seconds, 30) << res.summary();
    }
  }
}

TEST(Failure, KilledRankMidRingAllreduceRaisesPeerLostEverywhere) {
  kill_one_rank_mid_allreduce(4, 2, Algorithm::kRing);
}

TEST(Failure, KilledRankMidRecursiveDoublingRaisesPeerLostEverywhere) {
  kill_one_rank_mid_allreduce(7, 0, Algorithm::kRecursiveDoubling);
}

TEST(Failure, KilledRankMidSharedMemoryAllreduceRaisesPeerLostEverywhere) {
  kill_one_rank_mid_allreduce(4, 1, Algorithm::kShm);
}

TEST(Failure, KilledRankMidHierarchicalAllreduceRaisesPeerLostEverywhere) {
  kill_one_rank_mid_allreduce(4, 3, Algorithm::kHierarchical, test::split_hosts(4, 2));
}

TEST(Failure, KilledRankMidUnevenHierarchicalAllreduceRaisesPeerLostEverywhere) {
  kill_one_rank_mid_allreduce(7, 5, Algorithm::kHierarchical, test::split_hosts(7, 2));
}

// Ranks that share a core (groups of 2 forced): a core's second rank, and a core's first
// rank, which the other cores' first ranks wait for.
TEST(Failure, KilledRankMidCoreGroupedAllreduceRaisesPeerLostEverywhere) {
  kill_one_rank_mid_allreduce(4, 1, Algorithm::kShm, {}, 2);
  kill_one_rank_mid_allreduce(5, 2, Algorithm::kShm, {}, 2);
}

TEST(Failure, HungRankMakesOthersTimeOutNotHang) {
  test::StoreProcess store;
  CommunicatorOptions o;
  o.timeout = std::chrono::seconds(2);
  test::RunResult res = test::run_world(
      3, store,
      [&](Communicator& c) {
        if (c.rank() == 1) {  // never joins the allreduce; exits after the others gave up
          std::this_thread::sleep_for(std::chrono::seconds(5));
          return;
        }
        float x = 1;
        const auto start = Clock::now();
        try {
          c.allreduce(&x, 1, DataType::f32, ReduceOp::sum);
        } catch (const Timeout& e) {
          expect(seconds_since(start) >= 1.9, "timed out before the deadline");
          expect(std::string(e.what()).find("allreduce") != std::string::npos,
                 std::string("the message names the operation: ") + e.what());
          return;
        } catch (const PeerLost&) {
          return;  // the other waiting rank timed out first and broke its links: also fine
        }
        throw Error("allreduce finished without rank 1");
      },
      o, std::chrono::seconds(30));
  EXPECT_TRUE(res.all_ok()) << res.summary();
  for (const test::RankExit& e : res.ranks) {
    if (e.rank != 1) {
      EXPECT_LT(e.seconds, 10) << res.summary();
    }
  }
}

TEST(Failure, PeerWithWrongTokenIsRefused) {
  test::StoreProcess store;
  test::RunResult res = test::run_ranks(2, [&](int rank) {
    CommunicatorOptions o;
    o.timeout = std::chrono::seconds(3);
    o.token = rank == 1 ? "not-the-job-token" : store.token();
    try {
      auto c = Communicator::create(store.connect(), "test/auth", rank, 2, o);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (rank == 1)
        expect(msg.find("refused") != std::string::npos, "connector is told it was refused: " + msg);
      return;  // both sides must fail
    }
    throw Error("a communicator formed with a wrong token");
  }, std::chrono::seconds(30));
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

TEST(Failure, MismatchedRecvIsAClearError) {
  test::StoreProcess store;
  test::RunResult res = test::run_world(2, store, [](Communicator& c) {
    int32_t buf[4] = {1, 2, 3, 4};
    try {
      if (c.rank() == 0) {
        c.send(buf, 4, DataType::i32, 1, /*tag=*/5);
      } else {
        c.recv(buf, 4, DataType::i32, 0, /*tag=*/6);
      }
    } catch (const Error& e) {
      expect(c.rank() == 1, std::string("only the receiver detects it: ") + e.what());
      expect(std::string(e.what()).find("tag 5") != std::string::npos, e.what());
      return;
    }
    expect(c.rank() == 0, "the receiver accepted a message with the wrong tag");
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// Ranks calling one collective with different counts (a caller's bug) get an error naming
// the collective on every rank, at the latest at the timeout: never a crash, a hang, or a
// silently wrong result. Through shared memory it names both counts at once.
void mismatched_counts(int n, const std::string& collective, Algorithm algo, bool tcp_only,
                       size_t base, std::vector<std::string> hosts = {}) {
  test::StoreProcess store;
  CommunicatorOptions o;
  o.timeout = std::chrono::seconds(5);
  o.allreduce_algorithm = algo;
  o.shared_memory = !tcp_only;
  test::RunResult res = test::run_world(
      n, store,
      [&](Communicator& c) {
        const size_t count = base + static_cast<size_t>(c.rank() % 2) * (base / 2 + 3);
        std::vector<float> a(count * static_cast<size_t>(c.size()), 1.0f), b(a.size());
        const auto start = Clock::now();
        try {
          if (collective == "allreduce")
            c.allreduce(a.data(), count, DataType::f32, ReduceOp::sum);
          else if (collective == "broadcast")
            c.broadcast(a.data(), count, DataType::f32, 0);
          else if (collective == "allgather")
            c.allgather(a.data(), b.data(), count, DataType::f32);
          else if (collective == "reduce_scatter")
            c.reduce_scatter(a.data(), b.data(), count, DataType::f32, ReduceOp::sum);
          else
            c.reduce(a.data(), b.data(), count, DataType::f32, ReduceOp::sum, 0);
          // A second call, as a training loop would make: the mismatch must surface by now.
          c.allreduce(a.data(), 1, DataType::f32, ReduceOp::sum);
        } catch (const Error& e) {
          const std::string what = e.what();
          expect(what.find(collective) != std::string::npos, "the error names " + collective + ": " + what);
          expect(seconds_since(start) < 10, "the error came after the timeout: " + what);
          return;
        }
        throw Error(collective + " with different counts on the ranks raised nothing");
      },
      o, std::chrono::seconds(60), hosts);
  ASSERT_FALSE(res.timed_out) << res.summary();
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

TEST(Failure, DifferentCountsInSharedMemoryCollectivesAreAClearError) {
  for (int n : {2, 3})
    for (size_t base : {size_t{5}, size_t{70000}})
      for (const char* collective : {"allreduce", "broadcast", "allgather", "reduce_scatter", "reduce"}) {
        SCOPED_TRACE(std::string(collective) + " n=" + std::to_string(n) + " count=" + std::to_string(base));
        mismatched_counts(n, collective, Algorithm::kAuto, false, base);
      }
}

TEST(Failure, DifferentCountsInTcpCollectivesAreAClearError) {
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kRecursiveDoubling})
    for (size_t base : {size_t{5}, size_t{70000}}) {
      SCOPED_TRACE("count=" + std::to_string(base));
      mismatched_counts(3, "allreduce", algo, true, base);
    }
  for (const char* collective : {"broadcast", "allgather", "reduce_scatter", "reduce"})
    mismatched_counts(3, collective, Algorithm::kAuto, true, 70000);
}

TEST(Failure, DifferentCountsInHierarchicalAllreduceAreAClearError) {
  for (size_t base : {size_t{5}, size_t{70000}})
    mismatched_counts(4, "allreduce", Algorithm::kHierarchical, false, base, {"a", "a", "b", "b"});
}

}  // namespace
}  // namespace heft::comm
