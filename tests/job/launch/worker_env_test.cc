// Unit tests of the worker environment (src/heft/job/launch/worker_env.h): every variable of the
// contract in docs/run.md, the host-major rank layout, OMP_NUM_THREADS, what is inherited
// and what overrides what.
#include "heft/job/launch/worker_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "heft/error.h"

namespace heft::job {
namespace {

JobEnvironment two_by_two() {
  JobEnvironment job;
  job.hosts = 2;
  job.processes_per_host = 2;
  job.master_port = 29500;
  job.store_address = "127.0.0.1:4242";
  job.token = "secret-token";
  job.timeout_s = 120;
  job.num_cpus = 8;
  return job;
}

TEST(WorkerEnvironment, SetsEveryContractVariableForOneRank) {
  const Environment env = worker_environment(two_by_two(), 3, {});
  const Environment expected = {
      {"RANK", "3"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "1"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"SM_HOSTS", R"(["algo-1","algo-2"])"},
      {"SM_CURRENT_HOST", "algo-2"},
      {"SM_NUM_CPUS", "8"},
      {"SM_NUM_GPUS", "0"},
      {"HEFT_STORE", "127.0.0.1:4242"},
      {"HEFT_TOKEN", "secret-token"},
      {"HEFT_TIMEOUT", "120"},
      {"HEFT_HOST", "algo-2"},
      {"OMP_NUM_THREADS", "2"},
  };
  EXPECT_EQ(env, expected);
}

// SM_NUM_GPUS says what the host gives its workers (the launcher fills num_gpus from
// host::visible_gpus; SM_TRAINING_ENV's num_gpus is read from it).
TEST(WorkerEnvironment, NumGpusIsWhatTheHostHas) {
  JobEnvironment job = two_by_two();
  job.num_gpus = 4;
  const Environment env = worker_environment(job, 1, {});
  EXPECT_EQ(env.at("SM_NUM_GPUS"), "4");
  EXPECT_EQ(worker_environment(two_by_two(), 1, {}).at("SM_NUM_GPUS"), "0");
}

TEST(WorkerEnvironment, RanksAreHostMajor) {
  JobEnvironment job = two_by_two();
  job.hosts = 3;
  job.processes_per_host = 3;
  for (int rank = 0; rank < 9; ++rank) {
    const Environment env = worker_environment(job, rank, {});
    const int host = rank / 3;
    EXPECT_EQ(env.at("RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("GROUP_RANK"), std::to_string(host)) << "rank " << rank;
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(rank % 3)) << "rank " << rank;
    EXPECT_EQ(env.at("SM_CURRENT_HOST"), "algo-" + std::to_string(host + 1));
    EXPECT_EQ(env.at("HEFT_HOST"), env.at("SM_CURRENT_HOST"));
    EXPECT_EQ(env.at("SM_HOSTS"), R"(["algo-1","algo-2","algo-3"])");
  }
}

TEST(WorkerEnvironment, OneHostOneProcess) {
  JobEnvironment job = two_by_two();
  job.hosts = 1;
  job.processes_per_host = 1;
  const Environment env = worker_environment(job, 0, {});
  EXPECT_EQ(env.at("WORLD_SIZE"), "1");
  EXPECT_EQ(env.at("SM_HOSTS"), R"(["algo-1"])");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "8");
}

// Regression: 2 simulated hosts x 1 worker on 2 cores got 2 threads each (the hosts share
// the machine), oversubscribing it 2x and slowing heft-train 4x.
TEST(WorkerEnvironment, OmpThreadsSplitCoresAmongAllWorkersAndNeverDropBelowOne) {
  JobEnvironment job = two_by_two();
  job.processes_per_host = 1;
  job.num_cpus = 2;
  EXPECT_EQ(worker_environment(job, 0, {}).at("OMP_NUM_THREADS"), "1");
  job.processes_per_host = 2;
  job.num_cpus = 8;
  EXPECT_EQ(worker_environment(job, 0, {}).at("OMP_NUM_THREADS"), "2");
  job.processes_per_host = 7;
  job.num_cpus = 2;
  EXPECT_EQ(worker_environment(job, 0, {}).at("OMP_NUM_THREADS"), "1");
}

TEST(WorkerEnvironment, ParentOmpThreadsWins) {
  const Environment env = worker_environment(two_by_two(), 0, {{"OMP_NUM_THREADS", "3"}});
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "3");
}

TEST(WorkerEnvironment, InheritsTheParentButReplacesContractVariables) {
  const Environment parent = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/root"}, {"RANK", "9"},
                              {"HEFT_TOKEN", "stale"}};
  const Environment env = worker_environment(two_by_two(), 1, parent);
  EXPECT_EQ(env.at("PATH"), "/usr/bin:/bin");
  EXPECT_EQ(env.at("HOME"), "/root");
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("HEFT_TOKEN"), "secret-token");
}

TEST(WorkerEnvironment, ExtraOverridesEverything) {
  JobEnvironment job = two_by_two();
  job.extra = {{"HEFT_ALLREDUCE_ALGO", "ring"}, {"OMP_NUM_THREADS", "5"}, {"PATH", "/opt"}};
  const Environment env = worker_environment(job, 2, {{"PATH", "/usr/bin"}});
  EXPECT_EQ(env.at("HEFT_ALLREDUCE_ALGO"), "ring");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "5");
  EXPECT_EQ(env.at("PATH"), "/opt");
}

TEST(WorkerEnvironment, PythonPathLeadsThePythonPathOfTheParentAndExtra) {
  JobEnvironment job = two_by_two();
  job.python_path = "/opt/heft/python";
  EXPECT_EQ(worker_environment(job, 0, {}).at("PYTHONPATH"), "/opt/heft/python");
  EXPECT_EQ(worker_environment(job, 0, {{"PYTHONPATH", "/mine"}}).at("PYTHONPATH"),
            "/opt/heft/python:/mine");
  EXPECT_EQ(worker_environment(job, 0, {{"PYTHONPATH", ""}}).at("PYTHONPATH"), "/opt/heft/python");
  job.extra = {{"PYTHONPATH", "/spec"}};
  EXPECT_EQ(worker_environment(job, 0, {{"PYTHONPATH", "/mine"}}).at("PYTHONPATH"),
            "/opt/heft/python:/spec");
  job.python_path.clear();
  EXPECT_EQ(worker_environment(job, 0, {{"PYTHONPATH", "/mine"}}).at("PYTHONPATH"), "/spec");
  job.extra.clear();
  EXPECT_EQ(worker_environment(job, 0, {}).count("PYTHONPATH"), 0u);
}

TEST(WorkerEnvironment, RejectsRankOutsideTheWorld) {
  try {
    worker_environment(two_by_two(), 4, {});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "worker environment: rank 4 outside the world of 4 ranks");
  }
  EXPECT_THROW(worker_environment(two_by_two(), -1, {}), InvalidArgument);
}

TEST(WorkerEnvironment, RejectsBadLayoutNamingTheField) {
  JobEnvironment job = two_by_two();
  job.processes_per_host = 0;
  try {
    worker_environment(job, 0, {});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "worker environment: processes_per_host must be at least 1, found 0");
  }
  job = two_by_two();
  job.hosts = 0;
  EXPECT_THROW(worker_environment(job, 0, {}), InvalidArgument);
  job = two_by_two();
  job.timeout_s = 0;
  EXPECT_THROW(worker_environment(job, 0, {}), InvalidArgument);
}

TEST(WorkerEnvironment, HostNames) {
  EXPECT_EQ(host_name(0), "algo-1");
  EXPECT_EQ(host_name(11), "algo-12");
}

TEST(WorkerEnvironment, ToEnvpAndCurrentEnvironment) {
  const auto envp = to_envp({{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}});
  EXPECT_EQ(envp, (std::vector<std::string>{"A=1", "B=x=y", "EMPTY="}));
  const Environment here = current_environment();
  ASSERT_TRUE(here.count("PATH")) << "the test runs with a PATH";
  EXPECT_GE(available_cpus(), 1);
}

}  // namespace
}  // namespace heft::job
