// ctest-labels: multiproc
// Stragglers (supervisor.h, launch/straggler_watch.h): once a rank exited 0, the others get
// stopping.straggler_grace_s; one still running after it is stopped and the job fails naming
// it and its last lines, without a retry; a rank 0 that saves for less than the grace
// completes the job. With the local launcher (real shell workers) and, where OpenMPI is
// installed, through mpirun on this machine, where each rank's worker shim records its exit
// in the store (launch/worker_shim.h), and under Slurm on the test cluster
// (tests/support/slurm_cluster.sh; skipped, saying why, where it cannot start). The 10 s save under the default grace is
// supervisor_straggler_slow_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "heft/job/job_observer.h"
#include "heft/job/launch/process.h"
#include "heft/job/launch/straggler_watch.h"
#include "heft/job/spec/spec_env.h"
#include "heft/job/supervisor.h"
#include "support/files.h"

namespace heft::job {
namespace {

using heft::test::read_file;
using heft::test::TempDir;

struct Ran {
  int exit_code = -1;
  double seconds = 0;
  JobRecord job;
  std::vector<Transition> transitions;
  std::string statuses() const {
    std::string s;
    for (const Transition& t : transitions) s += (s.empty() ? "" : " ") + t.status;
    return s;
  }
};

Ran run_job(const std::string& home, const std::string& yaml, JobObserver* observer = nullptr) {
  const Result<JobSpec> spec = parse_spec(yaml, "test.yaml");
  HEFT_CHECK(spec.ok(), spec.error());
  auto db = JobDb::open(database_path(home));
  const JobPaths paths = job_paths(home, spec.value().name);
  HEFT_CHECK(make_job_dirs(paths).ok());
  JobRecord job = db->create_job(spec.value().name, spec_to_json(spec.value()), paths.root,
                                 spec.value().cluster.instance_count, spec.value().world_size())
                      .value();
  const auto command = worker_command(spec.value(), "/nonexistent");
  HEFT_CHECK(command.ok(), command.error());
  SupervisorOptions options;
  options.echo = false;
  options.heft_binary = HEFT_BINARY_DIR "/heft";
  options.observer = observer;
  Ran ran;
  const auto start = std::chrono::steady_clock::now();
  ran.exit_code = Supervisor(*db, job, spec.value(), paths, command.value(), options).run();
  ran.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ran.job = db->find_job(spec.value().name).value();
  ran.transitions = db->transitions(ran.job.id);
  return ran;
}

std::string sh_job(const std::string& name, const std::string& cluster, const std::string& script,
                   const std::string& stopping) {
  return "name: " + name + "\nentry_point: [/bin/sh, -c, '" + script + "', sh]\ncluster: " +
         cluster + "\nstopping: " + stopping + "\n";
}

// Rank 1 prints what it does, writes its pid and sleeps on; the others exit 0 at once.
std::string straggling_rank_1(const std::string& pid_dir) {
  return "if [ $RANK = 1 ]; then echo tearing down the process group; echo $$ > " + pid_dir +
         "/pid; exec sleep 600; fi; echo done";
}

bool gone(pid_t pid) { return process_start_ticks(pid) == -1; }

TEST(Stragglers, ARankStillRunningAfterItsPeersExitedZeroIsStoppedAndNamed) {
  TempDir home;
  const Ran r = run_job(home.path(),
                        sh_job("straggler", "{processes_per_host: 3}", straggling_rank_1(home.path()),
                               "{straggler_grace_s: 1, grace_s: 1}\nretry: {max_attempts: 2}"));
  EXPECT_EQ(r.exit_code, kExitFailed);
  EXPECT_EQ(r.job.status, "Failed");
  EXPECT_EQ(r.statuses(), "Starting Training Failed");
  EXPECT_EQ(r.job.failure_reason,
            "rank 1 was still running 1 s after ranks 0, 2 exited 0 (stopping.straggler_grace_s); "
            "stopped\nlast lines of logs/rank-1.log:\ntearing down the process group");
  EXPECT_EQ(r.job.attempts, 1);  // the work was done: not retried
  // The grace (1 s) plus a bound: the tick (0.2 s), SIGTERM, and a loaded machine's start-up.
  EXPECT_LT(r.seconds, 1 + 8);
  EXPECT_GE(r.seconds, 1);
  const pid_t pid = std::atoi(read_file(home.path() + "/pid").c_str());
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(gone(pid));
}

// What the profiler would say from the collective traces (profile/diagnosis.h).
class StuckInAllreduce : public JobObserver {
 public:
  Environment environment() override { return {}; }
  void on_start(int, const std::vector<int>&) override {}
  std::string on_tick() override { return ""; }
  void on_end(bool) override {}
  std::string diagnosis() override {
    ++asked;
    return "allreduce #12 in group straggler-diag/world: rank 1 waits in it for rank 0";
  }
  int asked = 0;
};

TEST(Stragglers, TheHangDiagnosisSaysWhereTheStragglerWaits) {
  TempDir home;
  StuckInAllreduce observer;
  const Ran r = run_job(home.path(),
                        sh_job("straggler-diag", "{processes_per_host: 2}", straggling_rank_1(home.path()),
                               "{straggler_grace_s: 0.5, grace_s: 1}"),
                        &observer);
  EXPECT_EQ(r.exit_code, kExitFailed);
  EXPECT_EQ(r.job.failure_reason,
            "rank 1 was still running 0.5 s after rank 0 exited 0 (stopping.straggler_grace_s); "
            "stopped\nallreduce #12 in group straggler-diag/world: rank 1 waits in it for rank 0\n"
            "last lines of logs/rank-1.log:\ntearing down the process group");
  EXPECT_GE(observer.asked, 1);
}

TEST(Stragglers, RankZeroSavingWithinTheGraceCompletesTheJob) {
  TempDir home;
  const Ran r = run_job(home.path(),
                        sh_job("saver", "{processes_per_host: 3}",
                               "if [ $RANK = 0 ]; then sleep 1; echo saved > $SM_MODEL_DIR/model; fi",
                               "{straggler_grace_s: 3, grace_s: 1}"));
  EXPECT_EQ(r.exit_code, kExitCompleted) << r.job.failure_reason;
  EXPECT_EQ(r.statuses(), "Starting Training Uploading Completed");
  EXPECT_GE(r.seconds, 1);
}

TEST(Stragglers, EveryRankFailingOrEndingTogetherIsNoStraggler) {
  TempDir home;
  // Rank 1 fails after rank 0 exited 0: a failure, named as one, not a straggler.
  const Ran r = run_job(home.path(), sh_job("late-failure", "{processes_per_host: 2}",
                                            "if [ $RANK = 1 ]; then sleep 0.5; exit 4; fi",
                                            "{straggler_grace_s: 5, grace_s: 1}"));
  EXPECT_EQ(r.exit_code, kExitFailed);
  EXPECT_EQ(r.job.failure_reason.rfind("rank 1 exited with code 4", 0), 0u) << r.job.failure_reason;
}

TEST(StragglerWatch, CountsFromTheFirstZeroExit) {
  using namespace std::chrono_literals;
  StragglerWatch w(3s);
  const auto t0 = StragglerWatch::Clock::now();
  w.start(4);
  w.exited(2, 1 << 8, t0);  // exit code 1: not a success
  EXPECT_TRUE(w.overdue(t0 + 10s).empty());
  w.exited(0, 0, t0 + 1s);
  w.exited(0, 0, t0 + 2s);  // a second report is ignored
  w.exited(7, 0, t0 + 2s);  // outside the start
  EXPECT_TRUE(w.overdue(t0 + 3900ms).empty());
  EXPECT_EQ(w.overdue(t0 + 4s), (std::vector<int>{1, 3}));
  EXPECT_EQ(w.finished(), std::vector<int>{0});
  w.start(2);
  EXPECT_TRUE(w.overdue(t0 + 100s).empty());
  EXPECT_EQ(rank_list_text({3}), "rank 3");
  EXPECT_EQ(rank_list_text({0, 2, 5}), "ranks 0, 2, 5");
  EXPECT_EQ(rank_list_text({0, 1, 2, 3, 7, 8}), "ranks 0-3, 7, 8");
}

// Under mpirun the supervisor learns of rank exits from the ranks' worker shims.
TEST(Stragglers, UnderMpirunTheStragglerIsNamedFromTheShimsRecords) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun is not installed here (OpenMPI's openmpi-bin)";
  TempDir home;
  const Ran r = run_job(home.path(),
                        sh_job("mpi-straggler", "{launcher: mpirun, hosts: [localhost], processes_per_host: 3}",
                               straggling_rank_1(home.path()), "{straggler_grace_s: 1, grace_s: 1}"));
  EXPECT_EQ(r.exit_code, kExitFailed);
  EXPECT_EQ(r.job.failure_reason.rfind(
                "rank 1 was still running 1 s after ranks 0, 2 exited 0 (stopping.straggler_grace_s)", 0),
            0u)
      << r.job.failure_reason;
  EXPECT_NE(r.job.failure_reason.find("tearing down the process group"), std::string::npos);
  EXPECT_LT(r.seconds, 1 + 15);
  const pid_t pid = std::atoi(read_file(home.path() + "/pid").c_str());
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 50 && !gone(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(gone(pid));
}

// Under Slurm (a batch job on the test cluster) the same, from the tasks' shims.
TEST(Stragglers, UnderSlurmTheStragglerIsNamedFromTheShimsRecords) {
  const std::string cluster = HEFT_SOURCE_DIR "/tests/support/slurm_cluster.sh";
  const int check = std::system((cluster + " check > /dev/null 2>&1").c_str());
  if (check != 0) GTEST_SKIP() << "no test Slurm cluster here (`" << cluster << " check` failed)";
  const std::string dir = "/tmp/heft-straggler-slurm-" + std::to_string(::getpid());
  struct Down {
    std::string cmd;
    ~Down() {
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "%s failed\n", cmd.c_str());
      ::unsetenv("SLURM_CONF");
    }
  } down{cluster + " down " + dir + " > /dev/null 2>&1"};
  if (std::system((cluster + " up " + dir + " 2 > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "Slurm did not start here (" << cluster << " up)";
  ::setenv("SLURM_CONF", (dir + "/slurm.conf").c_str(), 1);
  TempDir home;
  const Ran r = run_job(home.path(),
                        sh_job("slurm-straggler", "{launcher: slurm, instance_count: 2, processes_per_host: 2}",
                               straggling_rank_1(home.path()), "{straggler_grace_s: 1, grace_s: 1}"));
  EXPECT_EQ(r.exit_code, kExitFailed);
  EXPECT_EQ(r.job.failure_reason.rfind(
                "rank 1 was still running 1 s after ranks 0, 2, 3 exited 0 (stopping.straggler_grace_s)", 0),
            0u)
      << r.job.failure_reason;
  const pid_t pid = std::atoi(read_file(home.path() + "/pid").c_str());
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 50 && !gone(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(gone(pid));
}

}  // namespace
}  // namespace heft::job
