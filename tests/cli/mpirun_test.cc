// ctest-labels: multiproc
// `heft run --launcher mpirun` with Debian's OpenMPI: on this machine (a localhost hostfile),
// and across two network-namespace hosts (tests/support/netns_hosts.sh, 1 Gbit/s links)
// reached through mpirun's rsh agent (tests/support/netns_rsh.sh), with real collectives
// between them; bad input (too many processes for a host's slots, an unreachable host,
// options that make mpirun fail) is a clear error and leaves no process behind. The namespace
// cases skip, saying why, where namespaces cannot be made (not root, no iproute2).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "support/command.h"
#include "support/files.h"
#include "support/heft_process.h"

namespace {

using std::chrono::seconds;
const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kWorker = HEFT_BINARY_DIR "/test-workers/step_worker";
const std::string kHosts = HEFT_SOURCE_DIR "/tests/support/netns_hosts.sh";
const std::string kRsh = HEFT_SOURCE_DIR "/tests/support/netns_rsh.sh";

heft::test::Outcome heft_run(const heft::test::TempDir& dir, const std::vector<std::string>& args,
                             const std::vector<std::pair<std::string, std::string>>& env = {},
                             seconds timeout = seconds(90)) {
  static int n = 0;
  std::vector<std::string> all = {"run", "--launcher", "mpirun"};
  all.insert(all.end(), args.begin(), args.end());
  heft::test::HeftProcess p(kHeft, all, dir.path() + "/out-" + std::to_string(n++), env);
  return p.wait(timeout);
}

std::string write(const heft::test::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// No step_worker with this --steps count runs (each case uses its own count; the bracket
// keeps pgrep's pattern from matching the shell that runs it).
bool no_worker_left(int steps) {
  return heft::test::run_command("pgrep -f 'step_worke[r] --steps " + std::to_string(steps) + "$'")
      .text.empty();
}

TEST(Mpirun, LocalhostRanksGetTheContract) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "localhost slots=4\n"), "-n", "3", "--",
                                "/bin/sh", "-c",
                                "echo rank=$RANK/$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
                                "host=$SM_CURRENT_HOST store=$HEFT_STORE token=${#HEFT_TOKEN}"});
  ASSERT_EQ(o.exit_code, 0) << heft::test::describe(o);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(o.out.find("rank=" + std::to_string(r) + "/3 local=" + std::to_string(r) +
                         "/3 host=localhost store=127.0.0.1:"),
              std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("token=0"), std::string::npos) << o.out;  // every rank has the token
}

TEST(Mpirun, BadInputIsAClearErrorNamingIt) {
  heft::test::TempDir dir;
  const auto slots = heft_run(dir, {"--hostfile", write(dir, "hosts", "localhost slots=2\n"), "-n", "3",
                                    "--", kWorker, "--steps", "7701"});
  EXPECT_EQ(slots.exit_code, 2) << heft::test::describe(slots);
  EXPECT_NE(slots.err.find("processes_per_host 3 is more than the 2 slots of host localhost"),
            std::string::npos) << slots.err;
  const auto unknown = heft_run(dir, {"--hostfile", write(dir, "h2", "no-such-host.invalid\n"), "--",
                                      kWorker, "--steps", "7701"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no-such-host.invalid"), std::string::npos) << unknown.err;
  const auto options = heft_run(dir, {"--hostfile", write(dir, "h3", "localhost slots=2\n"), "-n", "2",
                                      "--mpi-options", "--no-such-mpirun-option", "--", kWorker,
                                      "--steps", "7701"});
  EXPECT_NE(options.exit_code, 0) << heft::test::describe(options);
  EXPECT_NE((options.out + options.err).find("no-such-mpirun-option"), std::string::npos)
      << heft::test::describe(options);
  EXPECT_TRUE(no_worker_left(7701));
}

class NetnsHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto check = heft::test::run_command(kHosts + " check 2>&1");
    if (check.code != 0) GTEST_SKIP() << "no namespace hosts here: " << check.text;
    prefix_ = "hft" + std::to_string(::getpid() % 100000);
    const auto up = heft::test::run_command(kHosts + " up 2 --net 78 --prefix " + prefix_ + " 2>&1");
    ASSERT_EQ(up.code, 0) << up.text;
  }
  void TearDown() override {
    if (!prefix_.empty()) heft::test::run_command(kHosts + " down --prefix " + prefix_);
  }
  std::string mpi_options() const {
    return "--mca plm_rsh_agent " + kRsh + " --mca oob_tcp_if_include 10.78.0.0/24";
  }
  std::string prefix_;
};

TEST_F(NetnsHosts, CollectivesRunAcrossTwoHostsThroughMpirunsRshAgent) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "10.78.0.11\n10.78.0.12\n"), "-n", "2",
                                "--mpi-options", mpi_options(), "--", "/bin/sh", "-c",
                                "echo rank=$RANK uts=$(hostname) host=$SM_CURRENT_HOST store=$HEFT_STORE; "
                                "exec " + kWorker + " --phase-ms 0 --steps 7720"},
                          {{"NETNS_PREFIX", prefix_}});
  ASSERT_EQ(o.exit_code, 0) << heft::test::describe(o);
  EXPECT_NE(o.out.find("rank=0 uts=h1 host=10.78.0.11 store=10.78.0.1:"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rank=3 uts=h2 host=10.78.0.12 store=10.78.0.1:"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("step=7720 loss="), std::string::npos) << o.out;
  EXPECT_TRUE(no_worker_left(7720));
}

TEST_F(NetnsHosts, UnreachableHostIsNamedAndNothingIsLeft) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "10.78.0.11\n10.78.0.19\n"), "-n", "1",
                                "--mpi-options", mpi_options(), "--", kWorker, "--steps", "7705"},
                          {{"NETNS_PREFIX", prefix_}}, seconds(60));
  EXPECT_NE(o.exit_code, 0) << heft::test::describe(o);
  EXPECT_NE((o.out + o.err).find("h9"), std::string::npos) << heft::test::describe(o);
  EXPECT_TRUE(no_worker_left(7705));
}

}  // namespace
