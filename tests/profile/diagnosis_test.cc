// ctest-labels: multiproc
// Hang diagnosis from real ranks' collective traces: a group where one rank skips a
// collective is named with the collective and its sequence number; a group the mesh
// labelled is named by its dimension, with world ranks.
#include "heft/profile/diagnosis.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "heft/comm/trace.h"
#include "heft/error.h"
#include "support/ranks.h"

namespace heft::profile {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string dir = fs::temp_directory_path() / ("heft-diag-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs `body` on a world of n ranks whose collectives trace into `dir` (HEFT_TRACE_DIR);
// each blocking call times out after `op_timeout` when given, and the run after `run_timeout`.
test::RunResult run_traced(const std::string& dir, int n,
                           const std::function<void(comm::Communicator&)>& body,
                           std::optional<std::chrono::seconds> op_timeout,
                           std::chrono::seconds run_timeout) {
  ::setenv("HEFT_TRACE_DIR", dir.c_str(), 1);
  test::StoreProcess store;
  comm::CommunicatorOptions options;
  options.token = store.token();
  if (op_timeout) options.timeout = *op_timeout;
  test::RunResult res = test::run_world(n, store, body, options, run_timeout);
  ::unsetenv("HEFT_TRACE_DIR");
  return res;
}

TEST(Diagnosis, RankThatSkipsACollectiveIsNamedWithItsSequenceNumber) {
  const std::string dir = fresh_dir("skip");
  test::RunResult res = run_traced(
      dir, 4,
      [](comm::Communicator& c) {
        std::vector<float> x(1024, 1.0f);
        for (int i = 0; i < 5; ++i) c.allreduce(x.data(), x.size(), comm::DataType::f32, comm::ReduceOp::sum);
        c.broadcast(x.data(), x.size(), comm::DataType::f32, 0);  // #6
        if (c.rank() == 2) {  // skips allreduce #7: busy elsewhere past the others' timeout
          std::this_thread::sleep_for(std::chrono::seconds(4));
          return;
        }
        try {
          c.allreduce(x.data(), x.size(), comm::DataType::f32, comm::ReduceOp::sum);
          test::expect(false, "allreduce #7 finished without rank 2");
        } catch (const Error&) {
        }
      },
      std::chrono::seconds(2), std::chrono::seconds(60));
  ASSERT_TRUE(res.all_ok()) << res.summary();
  const Diagnosis d = diagnose(dir, comm::trace_clock());
  EXPECT_EQ(d.traces, 4);
  ASSERT_TRUE(d.stuck()) << d.text();
  const GroupDiagnosis* g = nullptr;
  for (const GroupDiagnosis& x : d.groups)
    if (x.stuck) g = &x;
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->seq, 7u);
  EXPECT_EQ(g->behind, std::vector<int>({2}));
  EXPECT_EQ(g->waiting, std::vector<int>({0, 1, 3}));
  EXPECT_EQ(g->waited_for, std::vector<int>({2}));
  const std::string text = d.text();
  EXPECT_NE(text.find("allreduce #7"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2 never entered it (last: broadcast #6"), std::string::npos) << text;
  EXPECT_NE(text.find("ranks 0, 1, 3 wait in it for rank 2"), std::string::npos) << text;
  fs::remove_all(dir);
}

// The device mesh labels its split groups (parallel/mesh.h: rank-<R>.groups.json beside the
// traces); the diagnosis then names a group by its dimension and its members, and speaks of
// world ranks, not ranks in the group. Here the tensor groups {0,1} and {2,3} are split as
// the mesh splits them (color: the smallest member; key: the index in the group) and the
// labels written in the mesh's format; world rank 3 skips the second allreduce of {2,3}.
TEST(Diagnosis, GroupsLabelledByTheMeshAreNamedByDimensionWithWorldRanks) {
  const std::string dir = fresh_dir("dims");
  test::RunResult res = run_traced(
      dir, 4,
      [&dir](comm::Communicator& c) {
        ::setenv("RANK", std::to_string(c.rank()).c_str(), 1);  // as a launcher sets it
        const int first = c.rank() / 2 * 2;
        std::unique_ptr<comm::Communicator> tensor = c.split(first, c.rank() - first);
        std::ofstream(dir + "/rank-" + std::to_string(c.rank()) + ".groups.json")
            << "{\"world_rank\": " << c.rank() << ", \"groups\": [{\"group\": \"" << tensor->group()
            << "\", \"dimension\": \"tensor\", \"ranks\": [" << first << ", " << first + 1 << "]}]}";
        std::vector<float> x(64, 1.0f);
        tensor->allreduce(x.data(), x.size(), comm::DataType::f32, comm::ReduceOp::sum);  // #1
        if (c.rank() == 3) {  // skips #2 of the group {2,3}
          std::this_thread::sleep_for(std::chrono::seconds(4));
          return;
        }
        if (c.rank() < 2) return;
        bool finished = true;
        try {
          tensor->allreduce(x.data(), x.size(), comm::DataType::f32, comm::ReduceOp::sum);
        } catch (const Error&) {
          finished = false;
        }
        test::expect(!finished, "allreduce #2 finished without world rank 3");
      },
      std::chrono::seconds(2), std::chrono::seconds(60));
  ASSERT_TRUE(res.all_ok()) << res.summary();
  const Diagnosis d = diagnose(dir, comm::trace_clock());
  ASSERT_TRUE(d.stuck()) << d.text();
  int tensor_groups = 0;
  for (const GroupDiagnosis& g : d.groups) {
    if (g.dimension != "tensor") continue;
    ++tensor_groups;
    EXPECT_NE(g.group.find("/split"), std::string::npos) << g.group;
    if (g.stuck) {
      EXPECT_EQ(g.label, "tensor group {2,3}");
      EXPECT_EQ(g.ranks, std::vector<int>({2, 3}));
      EXPECT_EQ(g.behind, std::vector<int>({3}));  // world ranks, not 1 (its rank in the group)
      EXPECT_EQ(g.waiting, std::vector<int>({2}));
      EXPECT_EQ(g.waited_for, std::vector<int>({3}));
    } else {
      EXPECT_EQ(g.label, "tensor group {0,1}");
    }
  }
  EXPECT_EQ(tensor_groups, 2);
  const std::string text = d.text();
  EXPECT_NE(text.find("allreduce #2 in the tensor group {2,3}: rank 3 never entered it"),
            std::string::npos) << text;
  EXPECT_NE(text.find("rank 2 waits in it for rank 3"), std::string::npos) << text;
  EXPECT_EQ(text.find("split"), std::string::npos) << text;
  EXPECT_EQ(d.json()["groups"][0].count("dimension"), 1u);
  fs::remove_all(dir);
}

// Synthetic traces in the format of comm/trace.h, ranks 0 and 1 of `group` (world ranks the
// same): rank 0 entered collective #1 `op` at t = 100 and still runs it, rank 1 never did.
void write_two_traces(const std::string& dir, const std::string& group, const std::string& op) {
  std::string file = group;
  std::replace(file.begin(), file.end(), '/', '+');
  for (int rank = 0; rank < 2; ++rank) {
    auto f = std::make_unique<comm::TraceFile>();
    std::memset(f.get(), 0, sizeof(comm::TraceFile));
    std::memcpy(f->magic, comm::kTraceMagic, sizeof(f->magic));
    f->rank = f->world_rank = rank;
    f->size = 2;
    f->pid = ::getpid();
    std::snprintf(f->group, sizeof(f->group), "%s", group.c_str());
    if (rank == 0) {
      f->issued = 1;
      comm::TraceEntry& e = f->entries[0];
      e.seq = 1;
      e.queued_at = e.started_at = 100;
      e.state = static_cast<int32_t>(comm::TraceState::kRunning);
      e.peer = -1;
      std::snprintf(e.op, sizeof(e.op), "%s", op.c_str());
    }
    std::ofstream(dir + "/rank-" + std::to_string(rank) + "." + file + ".trace", std::ios::binary)
        .write(reinterpret_cast<const char*>(f.get()), sizeof(comm::TraceFile));
  }
}

// A pipeline exchange one rank never entered is named by its kind ("exchange", not
// "exchange[send"); a label file of a rank that wrote no trace (left from a start with more
// ranks) is not believed.
TEST(Diagnosis, ExchangeIsNamedByItsKind) {
  const std::string dir = fresh_dir("exchange");
  write_two_traces(dir, "job/world/split1/0",
                   "exchange[send(to rank 1, tag 0, 64 B), recv(from rank 1, tag 0, 64 B)]");
  std::ofstream(dir + "/rank-5.groups.json")
      << R"({"world_rank": 5, "groups": [{"group": "job/world/split1/0", "dimension": "tensor", "ranks": [4, 5]}]})";
  const Diagnosis d = diagnose(dir, 110);
  ASSERT_TRUE(d.stuck()) << d.text();
  EXPECT_EQ(d.groups.at(0).dimension, "");
  EXPECT_NE(d.text().find("exchange #1 in group job/world/split1/0: rank 1 never entered it (no "
                          "collective yet); rank 0 waits in it for rank 1 (for 10.0 s)"),
            std::string::npos) << d.text();
  fs::remove_all(dir);
}

// The world serving as the data group also serves as the shard group (sharding over the
// whole data dimension) or the replicate group (no sharding): it is called the data group.
TEST(Diagnosis, AGroupThatIsTheWholeDataDimensionIsTheDataGroup) {
  const std::string dir = fresh_dir("data");
  write_two_traces(dir, "job/world", "allreduce(shm, 4096 B)");
  for (int rank = 0; rank < 2; ++rank)
    std::ofstream(dir + "/rank-" + std::to_string(rank) + ".groups.json")
        << "{\"world_rank\": " << rank << R"(, "groups": [
             {"group": "job/world", "dimension": "data", "ranks": [0, 1]},
             {"group": "job/world/split0/)" << rank << R"(", "dimension": "replicate", "ranks": [)" << rank << R"(]},
             {"group": "job/world", "dimension": "shard", "ranks": [0, 1]}]})";
  const Diagnosis d = diagnose(dir, 110);
  ASSERT_EQ(d.groups.size(), 1u);
  EXPECT_EQ(d.groups[0].dimension, "data");
  EXPECT_EQ(d.groups[0].label, "data group {0,1}");
  EXPECT_NE(d.text().find("allreduce #1 in the data group {0,1}: rank 1 never entered it"),
            std::string::npos) << d.text();
  fs::remove_all(dir);
}

TEST(Diagnosis, MembersText) {
  EXPECT_EQ(members_text({2, 3}), "{2,3}");
  EXPECT_EQ(members_text({0, 1, 2, 3}), "{0-3}");
  EXPECT_EQ(members_text({0, 4, 8}), "{0,4,8}");
  EXPECT_EQ(members_text({0, 1, 2, 5, 6}), "{0-2,5,6}");
  EXPECT_EQ(members_text({}), "{}");
}

TEST(Diagnosis, FinishedGroupIsNotStuck) {
  const std::string dir = fresh_dir("done");
  test::RunResult res = run_traced(
      dir, 3,
      [](comm::Communicator& c) {
        std::vector<float> x(16, 1.0f);
        for (int i = 0; i < 70; ++i)  // more than the ring holds
          c.allreduce(x.data(), x.size(), comm::DataType::f32, comm::ReduceOp::sum);
      },
      std::nullopt, std::chrono::seconds(120));
  ASSERT_TRUE(res.all_ok()) << res.summary();
  const Diagnosis d = diagnose(dir, comm::trace_clock());
  EXPECT_EQ(d.traces, 3);
  EXPECT_FALSE(d.stuck());
  EXPECT_NE(d.text().find("every rank finished collective #70"), std::string::npos) << d.text();
  fs::remove_all(dir);
}

TEST(Diagnosis, RanksText) {
  EXPECT_EQ(ranks_text({3}), "rank 3");
  EXPECT_EQ(ranks_text({2, 0, 1}), "ranks 0-2");
  EXPECT_EQ(ranks_text({0, 2, 5}), "ranks 0, 2, 5");
  EXPECT_EQ(ranks_text({0, 1}), "ranks 0, 1");
}

TEST(Diagnosis, NoTraces) {
  const std::string dir = fresh_dir("none");
  const Diagnosis d = diagnose(dir, 0);
  EXPECT_EQ(d.traces, 0);
  EXPECT_FALSE(d.stuck());
  EXPECT_NE(d.text().find("no collective traces"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace heft::profile
