// ctest-labels: multiproc
// Hang diagnosis from real ranks' collective traces: a group where one rank skips a
// collective is named with the collective and its sequence number.
#include "heft/profile/diagnosis.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
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

TEST(Diagnosis, RankThatSkipsACollectiveIsNamedWithItsSequenceNumber) {
  const std::string dir = fresh_dir("skip");
  ::setenv("HEFT_TRACE_DIR", dir.c_str(), 1);
  test::StoreProcess store;
  comm::CommunicatorOptions options;
  options.token = store.token();
  options.timeout = std::chrono::seconds(2);
  test::RunResult res = test::run_world(
      4, store,
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
      options, std::chrono::seconds(60));
  ::unsetenv("HEFT_TRACE_DIR");
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

TEST(Diagnosis, FinishedGroupIsNotStuck) {
  const std::string dir = fresh_dir("done");
  ::setenv("HEFT_TRACE_DIR", dir.c_str(), 1);
  test::StoreProcess store;
  comm::CommunicatorOptions options;
  options.token = store.token();
  test::RunResult res = test::run_world(3, store, [](comm::Communicator& c) {
    std::vector<float> x(16, 1.0f);
    for (int i = 0; i < 70; ++i)  // more than the ring holds
      c.allreduce(x.data(), x.size(), comm::DataType::f32, comm::ReduceOp::sum);
  }, options);
  ::unsetenv("HEFT_TRACE_DIR");
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
