// ctest-labels: multiproc
// A lost supervisor stops its workers on every engine (docs/clusters.md, "When heft train
// dies"). The worker shim (launch/worker_shim.h) through `heft mpi-worker` with a store of
// this test's own: a store that goes stops the rank within the check interval plus the stop
// grace, a rank's end is recorded in the store and mirrored, signals reach the rank. Then
// SIGKILL of `heft train` during a local job, an mpirun job on this machine and a Slurm batch
// job (tests/support/slurm_cluster.sh): every worker is gone within the bound (by pid), the
// Slurm job leaves the queue, and `heft resume` completes the job; mpirun also across two
// network-namespace hosts (tests/support/netns_hosts.sh). The mpirun and Slurm cases skip,
// saying why, where the engine (or namespaces) is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/store/tcp_store.h"
#include "heft/job/launch/process.h"
#include "heft/job/launch/worker_shim.h"
#include "support/command.h"
#include "support/files.h"
#include "support/heft_process.h"

namespace {

using namespace std::chrono_literals;
using heft::test::read_file;
using heft::test::TempDir;
using Clock = std::chrono::steady_clock;

const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kCluster = HEFT_SOURCE_DIR "/tests/support/slurm_cluster.sh";
const std::string kHosts = HEFT_SOURCE_DIR "/tests/support/netns_hosts.sh";
const std::string kRsh = HEFT_SOURCE_DIR "/tests/support/netns_rsh.sh";

bool gone(pid_t pid) { return heft::job::process_start_ticks(pid) == -1; }

// Waits up to `limit` for every pid to be gone; returns the seconds it took, or -1.
double seconds_until_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  for (;;) {
    bool all = true;
    for (pid_t p : pids) all = all && gone(p);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (all) return s;
    if (Clock::now() - start > limit) return -1;
    std::this_thread::sleep_for(20ms);
  }
}

// The pids in the files `<dir>/pid-<r>` once all `n` exist (0 for one missing at the deadline).
std::vector<pid_t> wait_for_pids(const std::string& dir, int n, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  std::vector<pid_t> pids(static_cast<size_t>(n), 0);
  while (Clock::now() < deadline) {
    bool all = true;
    for (int r = 0; r < n; ++r) {
      const std::string text = read_file(dir + "/pid-" + std::to_string(r));
      pids[static_cast<size_t>(r)] = text.find('\n') == std::string::npos ? 0 : std::atoi(text.c_str());
      all = all && pids[static_cast<size_t>(r)] > 0;
    }
    if (all) break;
    std::this_thread::sleep_for(50ms);
  }
  return pids;
}

// --- the shim, with a store of the test's own -------------------------------------------

class Shim : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<heft::comm::TcpStoreServer>(
        heft::comm::TcpStoreServerOptions{"127.0.0.1", 0, "s3cret"});
  }
  // `heft mpi-worker -- /bin/sh -c SCRIPT` as rank 0 of 1, the store's address and token given.
  std::unique_ptr<heft::test::HeftProcess> start(const std::string& script) {
    static int n = 0;
    return std::make_unique<heft::test::HeftProcess>(
        kHeft, std::vector<std::string>{"mpi-worker", "--", "/bin/sh", "-c", script},
        dir_.path() + "/shim-" + std::to_string(n++),
        std::vector<std::pair<std::string, std::string>>{
            {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
            {"HEFT_MPI_HOSTS", "localhost"}, {"HEFT_JOB", "shimjob"},
            {"HEFT_STORE", "127.0.0.1:" + std::to_string(store_->port())},
            {"HEFT_TOKEN", "s3cret"}, {"HEFT_STOP_GRACE_MS", "1000"}});
  }
  TempDir dir_;
  std::unique_ptr<heft::comm::TcpStoreServer> store_;
};

TEST_F(Shim, ARankWhoseStoreWentIsStoppedWithinTheCheckAndTheGrace) {
  // The rank ignores SIGTERM: only the SIGKILL after the grace (1 s) ends it.
  auto p = start("trap \"\" TERM; echo $$ > " + dir_.path() + "/pid-0; while :; do sleep 0.1; done");
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), 1, 30s);
  ASSERT_GT(pids[0], 0);
  std::this_thread::sleep_for(300ms);
  ASSERT_FALSE(gone(pids[0]));
  store_.reset();  // as when the supervisor's process dies: every connection closes
  const double s = seconds_until_gone(pids, 10s);
  // Bound: one check (1 s) + the grace (1 s), plus scheduling on a loaded machine.
  EXPECT_GE(s, 0) << "the rank outlived its supervisor's store by 10 s";
  EXPECT_LT(s, 1.0 + 1.0 + 1.5);
  const auto o = p->wait(10s);
  EXPECT_FALSE(o.timed_out);
  EXPECT_NE(o.err.find("heft mpi-worker: rank 0: the supervisor is gone (its store at 127.0.0.1:"),
            std::string::npos)
      << heft::test::describe(o);
  EXPECT_NE(o.err.find("SIGKILL after 1000 ms"), std::string::npos) << o.err;
}

TEST_F(Shim, RecordsTheRanksEndInTheStoreAndEndsAsTheRankDid) {
  auto code = start("exit 3");
  EXPECT_EQ(code->wait(30s).exit_code, 3);
  EXPECT_EQ(store_->peek("shimjob/world/exit/0"), std::optional<std::string>(std::to_string(3 << 8)));
  auto killed = start("kill -USR1 $$");
  EXPECT_EQ(killed->wait(30s).exit_code, 128 + SIGUSR1);  // the rank's signal, raised by the shim
  EXPECT_EQ(store_->peek("shimjob/world/exit/0"), std::optional<std::string>(std::to_string(SIGUSR1)));
}

TEST_F(Shim, SignalsGoOnToTheRank) {
  auto p = start("trap \"echo got TERM; exit 7\" TERM; echo $$ > " + dir_.path() +
                 "/pid-0; while :; do sleep 0.1; done");
  ASSERT_GT(wait_for_pids(dir_.path(), 1, 30s)[0], 0);
  ::kill(p->pid(), SIGTERM);
  const auto o = p->wait(10s);
  EXPECT_EQ(o.exit_code, 7) << heft::test::describe(o);
  EXPECT_NE(o.out.find("got TERM"), std::string::npos);
}

// --- heft train, SIGKILLed --------------------------------------------------------------

class LostSupervisor : public ::testing::Test {
 protected:
  // A job whose ranks each start a sleep, write its pid to `<checkpoints>/pid-<r>` and wait
  // for it (a shell's child: the worker's own child, which PR_SET_PDEATHSIG does not reach),
  // and on the resumed start (their checkpoint is there) exit 0.
  std::string spec(const std::string& name, const std::string& cluster) {
    const std::string path = tmp_.path() + "/" + name + ".yaml";
    std::ofstream(path)
        << "name: " << name << "\nentry_point: [/bin/sh, -c, 'c=$SM_CHECKPOINT_DIR; "
        << "if [ -e $c/started-$RANK ]; then echo resumed; exit 0; fi; touch $c/started-$RANK; "
        << "sleep 600 & echo $! > $c/pid-$RANK; wait', sh]\n"
        << "cluster: " << cluster << "\nstopping: {grace_s: 1}\n";
    return path;
  }
  std::string checkpoints(const std::string& name) const {
    return tmp_.path() + "/home/jobs/" + name + "/checkpoints";
  }
  std::vector<std::pair<std::string, std::string>> env() const {
    std::vector<std::pair<std::string, std::string>> e = {{"HEFT_HOME", tmp_.path() + "/home"}};
    if (!slurm_conf_.empty()) e.push_back({"SLURM_CONF", slurm_conf_});
    if (!netns_prefix_.empty()) e.push_back({"NETNS_PREFIX", netns_prefix_});
    return e;
  }
  std::unique_ptr<heft::test::HeftProcess> heft(const std::vector<std::string>& args) {
    static int n = 0;
    return std::make_unique<heft::test::HeftProcess>(
        kHeft, args, tmp_.path() + "/heft-" + std::to_string(n++), env());
  }
  // Starts the job, SIGKILLs heft train once every rank runs, and returns how long the
  // ranks took to be gone (-1: not within `limit`).
  double kill_supervisor(const std::string& name, const std::string& cluster, int world,
                         std::chrono::milliseconds limit) {
    auto train = heft({"train", spec(name, cluster)});
    const std::vector<pid_t> pids = wait_for_pids(checkpoints(name), world, 90s);
    for (pid_t p : pids) EXPECT_GT(p, 0) << heft::test::describe(train->wait(1s));
    if (HasFailure()) return -1;
    ::kill(train->pid(), SIGKILL);
    train->wait(10s);
    return seconds_until_gone(pids, limit);
  }
  // `heft resume` completes the job: the ranks find their checkpoints and exit 0.
  void expect_resume_completes(const std::string& name) {
    const auto resumed = heft({"resume", name})->wait(120s);
    EXPECT_EQ(resumed.exit_code, 0) << heft::test::describe(resumed);
    EXPECT_NE(resumed.err.find("Completed"), std::string::npos) << resumed.err;
    const auto d = heft({"describe", name, "--json"})->wait(30s);
    ASSERT_EQ(d.exit_code, 0) << heft::test::describe(d);
    EXPECT_EQ(d.json()["status"], "Completed");
    // The resumed ranks found what the killed start left in SM_CHECKPOINT_DIR.
    const std::string log = read_file(tmp_.path() + "/home/jobs/" + name + "/logs/rank-0.log");
    EXPECT_NE(log.find("resumed"), std::string::npos) << log;
  }
  TempDir tmp_;
  std::string slurm_conf_;
  std::string netns_prefix_;
};

TEST_F(LostSupervisor, LocalWorkersDieWithHeftTrainAndResumeCompletes) {
  // The workers: PR_SET_PDEATHSIG; what they started: the orphan guard. At once.
  const double s = kill_supervisor("lost-local", "{processes_per_host: 2}", 2, 5s);
  EXPECT_GE(s, 0);
  EXPECT_LT(s, 2.0);
  expect_resume_completes("lost-local");
}

TEST_F(LostSupervisor, MpirunRanksStopWithinTheBoundAndResumeCompletes) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun is not installed here (OpenMPI's openmpi-bin)";
  const double s = kill_supervisor(
      "lost-mpirun", "{launcher: mpirun, hosts: [localhost], processes_per_host: 2}", 2, 15s);
  // The stated bound: one check (1 s) + grace_s (1 s here) + 1 s.
  EXPECT_GE(s, 0);
  EXPECT_LT(s, 3.0);
  expect_resume_completes("lost-mpirun");
}

// Across two network-namespace hosts: mpirun's daemons run the ranks there, on their own
// network stacks; each shim reaches the store over its host's link.
TEST_F(LostSupervisor, MpirunRanksOnOtherHostsStopWithinTheBoundAndResumeCompletes) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun is not installed here (OpenMPI's openmpi-bin)";
  const auto check = heft::test::run_command(kHosts + " check 2>&1");
  if (check.code != 0) GTEST_SKIP() << "no namespace hosts here: " << check.text;
  netns_prefix_ = "hls" + std::to_string(::getpid() % 100000);
  struct Down {
    std::string prefix;
    ~Down() { heft::test::run_command(kHosts + " down --prefix " + prefix); }
  } down{netns_prefix_};
  const auto up = heft::test::run_command(kHosts + " up 2 --net 79 --prefix " + netns_prefix_ + " 2>&1");
  ASSERT_EQ(up.code, 0) << up.text;
  const double s = kill_supervisor(
      "lost-netns", "{launcher: mpirun, hosts: [10.79.0.11, 10.79.0.12], processes_per_host: 1, "
      "custom_mpi_options: \"--mca plm_rsh_agent " + kRsh + " --mca oob_tcp_if_include 10.79.0.0/24\"}",
      2, 15s);
  EXPECT_GE(s, 0);
  EXPECT_LT(s, 3.0);
  expect_resume_completes("lost-netns");
}

TEST_F(LostSupervisor, SlurmBatchJobEndsWithinTheBoundAndResumeCompletes) {
  const auto check = heft::test::run_command(kCluster + " check");
  if (check.code != 0) GTEST_SKIP() << check.text;
  const std::string dir = "/tmp/heft-lost-slurm-" + std::to_string(::getpid());
  const auto up = heft::test::run_command(kCluster + " up " + dir + " 2 2>&1");
  struct Down {
    std::string dir;
    ~Down() { heft::test::run_command(kCluster + " down " + dir); }
  } down{dir};
  if (up.code != 0) GTEST_SKIP() << "Slurm did not start here: " << up.text;
  slurm_conf_ = dir + "/slurm.conf";
  const double s = kill_supervisor(
      "lost-slurm", "{launcher: slurm, instance_count: 2, processes_per_host: 1}", 2, 15s);
  EXPECT_GE(s, 0);
  EXPECT_LT(s, 3.0);
  // The batch job itself ends once its step has: srun and the batch script return.
  const std::string squeue = "SLURM_CONF=" + slurm_conf_ + " timeout 10 squeue -h";
  const auto start = Clock::now();
  std::string queue = heft::test::run_command(squeue).text;
  while (!queue.empty() && Clock::now() - start < 15s) {
    std::this_thread::sleep_for(200ms);
    queue = heft::test::run_command(squeue).text;
  }
  EXPECT_EQ(queue, "") << "the batch job was left in the queue";
  std::cerr << "[ info ] ranks gone " << s << " s after heft train's SIGKILL; queue empty "
            << std::chrono::duration<double>(Clock::now() - start).count() << " s later\n";
  expect_resume_completes("lost-slurm");
}

}  // namespace
