// ctest-labels: multiproc
// Tests of job::LocalLauncher used as a library (as `heft bench` does): options checks,
// extra environment, unprefixed output, exit codes, the launcher's own log lines, and that
// run() gives this process's signal handlers back. End-to-end behaviour of the command
// (signals, survivors, torch) is tests/cli/run_test.cc.
#include "heft/job/launch/local_launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "heft/error.h"
#include "heft/job/launch/job_cgroup.h"
#include "heft/job/launch/process.h"
#include "support/command.h"
#include "support/files.h"

namespace heft::job {
namespace {

namespace fs = std::filesystem;

using heft::test::TempDir;

using heft::test::read_file;

LocalLauncherOptions sh(const std::string& script) {
  LocalLauncherOptions o;
  o.command = {"/bin/sh", "-c", script};
  o.grace = std::chrono::milliseconds(500);
  return o;
}

TEST(LocalLauncher, ExtraEnvironmentReachesEveryWorker) {
  TempDir dir;
  LocalLauncherOptions o = sh("echo \"$RANK $HEFT_HOST $BENCH_SIZE $HEFT_TIMEOUT\" > " +
                              dir.path() + "/rank-$RANK");
  o.hosts = 2;
  o.processes_per_host = 2;
  o.timeout_s = 7;
  o.prefix_output = false;
  o.extra_env = {{"BENCH_SIZE", "1024"}, {"HEFT_TIMEOUT", "9"}};
  ASSERT_EQ(LocalLauncher(o).run(), 0);
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(read_file(dir.path() + "/rank-" + std::to_string(rank)),
              std::to_string(rank) + " algo-" + std::to_string(rank / 2 + 1) + " 1024 9\n");
}

TEST(LocalLauncher, ReturnsTheFailingWorkersCodeAndLogsWithItsName) {
  LocalLauncherOptions o = sh("if [ $RANK = 1 ]; then exit 5; fi; exec sleep 30");
  o.processes_per_host = 3;
  o.log_name = "heft bench";
  testing::internal::CaptureStderr();
  const int code = LocalLauncher(o).run();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 5);
  EXPECT_NE(err.find("heft bench: rank 1 exited with code 5; stopping the other 2 workers\n"),
            std::string::npos)
      << err;
}

// A worker's child that leaves the worker's session (setsid), and a daemon that forks twice
// to do so, outlived a Completed job: the launcher, their subreaper, ends them once the
// workers are reaped, and says so: per worker the sleep, the shell and, once the shell is
// gone, the shell's sleep (6 in all).
TEST(LocalLauncher, NoDescendantOfAWorkerOutlivesTheJob) {
  // Sleeps of a length no other test uses, so pgrep finds only these.
  const std::string id = std::to_string(::getpid());
  LocalLauncherOptions o = sh("setsid sleep 7" + id + " </dev/null >/dev/null 2>&1 & "
                              "(setsid sh -c 'sleep 8" + id + "; :' </dev/null >/dev/null 2>&1 &); "
                              "sleep 0.3; exit 0");
  o.processes_per_host = 2;
  testing::internal::CaptureStderr();
  EXPECT_EQ(LocalLauncher(o).run(), 0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ended 6 processes a worker left running outside its process group"),
            std::string::npos) << err;
  const std::string left = heft::test::run_command("pgrep -af '^sleep [78]" + id + "$'").text;
  EXPECT_EQ(left, "") << "still running: " << left;
}

// Where the machine lets heft make a cgroup (root here; job_cgroup.h), every worker runs in
// the job's, and a SIGKILLed launcher's orphan guard ends what a worker left outside its
// group: the subreaper cannot, it died with the launcher. The next launcher removes the
// dead one's cgroup.
TEST(LocalLauncher, ASigkilledLauncherLeavesNoDescendantBehind) {
  std::string why;
  const std::unique_ptr<JobCgroup> probe = JobCgroup::create(&why);  // where they are made
  if (!probe) GTEST_SKIP() << "no cgroup here: " << why;
  TempDir dir;
  const std::string id = std::to_string(::getpid());
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    LocalLauncherOptions o = sh("setsid sleep 9" + id + " </dev/null >/dev/null 2>&1 & "
                                "cat /proc/self/cgroup > " + dir.path() + "/cg-$RANK; exec sleep 60");
    o.processes_per_host = 2;
    ::_exit(LocalLauncher(o).run());
  }
  auto escapees = [&] { return heft::test::run_command("pgrep -f '^sleep 9" + id + "$'").text; };
  std::string cg;
  for (int i = 0; i < 400 && (cg.empty() || escapees().empty()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    cg = read_file(dir.path() + "/cg-1");
  }
  ASSERT_NE(cg.find("0::"), std::string::npos) << cg;
  EXPECT_NE(cg.find("/heft-"), std::string::npos) << "the worker ran outside a job cgroup: " << cg;
  ASSERT_NE(escapees(), "");
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  std::string left = escapees();
  for (int i = 0; i < 200 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    left = escapees();
  }
  EXPECT_EQ(left, "") << "outlived its SIGKILLed launcher";
  // The dead launcher's cgroup stays (empty) until the next launcher removes it: this sweep,
  // or a launcher of a test running beside this one.
  const std::string base = probe->path().substr(0, probe->path().rfind('/'));
  const std::string name = cg.substr(cg.rfind('/'), cg.find('\n', cg.rfind('/')) - cg.rfind('/'));
  const std::string folder = base + name;
  struct stat st {};
  EXPECT_EQ(read_file(folder + "/cgroup.procs"), "");  // nothing runs in it any more (or it is gone)
  end_stale_cgroups("test");
  EXPECT_NE(::stat(folder.c_str(), &st), 0) << folder << " was not removed";
}

// A heft cgroup whose launcher is gone and whose guard did not end it (killed too): the next
// launcher ends what runs in it and removes it; a live launcher's cgroup is left alone.
TEST(LocalLauncher, TheNextLauncherEndsWhatADeadOneLeft) {
  std::string why;
  std::unique_ptr<JobCgroup> live = JobCgroup::create(&why);
  if (!live) GTEST_SKIP() << "no cgroup here: " << why;
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  // The stale group in a folder of this test's own (a sweep of the launchers' folder by a
  // test running beside this one would end it first), with a live launcher's group beside it.
  const std::string base = live->path().substr(0, live->path().rfind('/')) + "/test-sweep-" +
                           std::to_string(::getpid());
  ASSERT_EQ(::mkdir(base.c_str(), 0755), 0) << base;
  const std::string mine = base + "/" + live->path().substr(live->path().rfind('/') + 1);
  ASSERT_EQ(::mkdir(mine.c_str(), 0755), 0) << mine;
  const std::string stale = base + "/heft-" + std::to_string(gone) + "-1-0";
  ASSERT_EQ(::mkdir(stale.c_str(), 0755), 0) << stale;
  const pid_t sleeper = ::fork();
  if (sleeper == 0) {
    std::ofstream(stale + "/cgroup.procs") << "0";
    ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 200 && read_file(stale + "/cgroup.procs").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_NE(read_file(stale + "/cgroup.procs"), "");
  testing::internal::CaptureStderr();
  EXPECT_EQ(end_stale_cgroups("heft run", base), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "heft run: ended 1 process left by a heft launcher that is gone\n");
  int status = 0;  // the sweep may have reaped it already (its members that are our children)
  if (::waitpid(sleeper, &status, 0) == sleeper)
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  else
    EXPECT_EQ(errno, ECHILD);
  struct stat st {};
  EXPECT_NE(::stat(stale.c_str(), &st), 0) << stale << " was not removed";
  EXPECT_EQ(::stat(mine.c_str(), &st), 0) << "a live launcher's cgroup was removed";
  ::rmdir(mine.c_str());
  ::rmdir(base.c_str());
}

TEST(LocalLauncher, GraceZeroKillsAtOnce) {
  LocalLauncherOptions o = sh("trap '' TERM; if [ $RANK = 0 ]; then exit 4; fi; exec sleep 30");
  o.processes_per_host = 2;
  o.grace = std::chrono::milliseconds(0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(LocalLauncher(o).run(), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(LocalLauncher, MissingCommandReturns127) {
  LocalLauncherOptions o;
  o.command = {"heft-no-such-command"};
  o.processes_per_host = 2;
  testing::internal::CaptureStderr();
  EXPECT_EQ(LocalLauncher(o).run(), 127);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "heft run: cannot execute 'heft-no-such-command': No such file or directory\n");
}

TEST(LocalLauncher, GivesSignalHandlersBackAndRunsAgain) {
  struct sigaction before {};
  ::sigaction(SIGINT, nullptr, &before);
  EXPECT_EQ(LocalLauncher(sh("exit 0")).run(), 0);
  EXPECT_EQ(LocalLauncher(sh("exit 2")).run(), 2);
  struct sigaction after {};
  ::sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(LocalLauncher, OnLineHookGetsEveryLineInsteadOfTheTerminal) {
  LocalLauncherOptions o = sh("echo out $RANK; echo err $RANK >&2; printf last");
  o.processes_per_host = 2;
  std::vector<std::string> lines;
  o.hooks.on_line = [&](int rank, bool is_stderr, std::string_view line) {
    lines.push_back(std::to_string(rank) + (is_stderr ? " E " : " O ") + std::string(line));
  };
  testing::internal::CaptureStdout();
  EXPECT_EQ(LocalLauncher(o).run(), 0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"0 E err 0", "0 O last", "0 O out 0", "1 E err 1",
                                             "1 O last", "1 O out 1"}));
}

TEST(LocalLauncher, TickHookStopsTheGroupAndRestartHookStartsItAgain) {
  TempDir dir;
  LocalLauncherOptions o = sh("echo $TORCHELASTIC_RESTART_COUNT >> " + dir.path() +
                              "/starts-$RANK; sleep 30");
  o.processes_per_host = 2;
  o.hooks.tick = std::chrono::milliseconds(20);
  int started = 0;
  auto begin = std::chrono::steady_clock::now();
  o.hooks.on_start = [&](int restart_count, const std::vector<int>&) {
    EXPECT_EQ(restart_count, started++);
    begin = std::chrono::steady_clock::now();
  };
  o.hooks.on_tick = [&] {
    return std::chrono::steady_clock::now() - begin > std::chrono::milliseconds(200);
  };
  std::vector<GroupEnd> ends;
  o.hooks.restart = [&](const GroupEnd& end) {
    ends.push_back(end);
    return end.restart_count < 2;
  };
  const GroupEnd last = LocalLauncher(o).run_group();
  EXPECT_EQ(started, 3);
  ASSERT_EQ(ends.size(), 3u);
  for (const GroupEnd& end : ends) {
    EXPECT_TRUE(end.stop_requested);
    EXPECT_EQ(end.failed_rank, -1);  // exits of stopped workers are not failures
    EXPECT_EQ(end.exit_code, 128 + SIGTERM);
  }
  EXPECT_EQ(last.restart_count, 2);
  EXPECT_EQ(read_file(dir.path() + "/starts-1"), "0\n1\n2\n");
}

TEST(LocalLauncher, RunGroupNamesTheFirstFailingRank) {
  LocalLauncherOptions o = sh("if [ $RANK = 2 ]; then exit 9; fi; sleep 30");
  o.processes_per_host = 3;
  testing::internal::CaptureStderr();
  const GroupEnd end = LocalLauncher(o).run_group();
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(end.failed_rank, 2);
  EXPECT_EQ(shell_exit_code(end.failed_wait_status), 9);
  EXPECT_EQ(end.exit_code, 9);
  EXPECT_FALSE(end.stop_requested);
}

// In-place recovery: a rank killed by a signal is started again alone with HEFT_GENERATION 1
// (published in the store) while the other keeps running; the start ends 0 with one recovery.
TEST(LocalLauncher, InPlaceRecoveryRestartsTheKilledRankAlone) {
  TempDir dir;
  LocalLauncherOptions o = sh("echo \"$HEFT_RECOVERY ${HEFT_GENERATION:-0}\" >> " + dir.path() +
                              "/rank-$RANK; if [ $RANK = 1 ] && [ -z \"$HEFT_GENERATION\" ]; then kill -9 $$; fi; "
                              "[ $RANK = 0 ] && sleep 1; exit 0");
  o.processes_per_host = 2;
  o.prefix_output = false;
  o.in_place_recoveries = 1;
  int recovered = -1, generation = -1;
  o.hooks.on_recover = [&](int rank, int status, int, int g) {
    recovered = WIFSIGNALED(status) ? rank : -1;
    generation = g;
  };
  const GroupEnd end = LocalLauncher(o).run_group();
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_EQ(end.recoveries, 1);
  EXPECT_EQ(end.restart_count, 0);
  EXPECT_EQ(recovered, 1);
  EXPECT_EQ(generation, 1);
  EXPECT_EQ(read_file(dir.path() + "/rank-0"), "in_place 0\n");  // started once
  EXPECT_EQ(read_file(dir.path() + "/rank-1"), "in_place 0\nin_place 1\n");
}

// Every rank lost at once: nobody holds a state, so the start fails as without recovery (and
// is not mistaken for a success). Should the two deaths fall in different settle windows, the
// second comes while generation 1 forms (the shell never says it formed): no second recovery.
TEST(LocalLauncher, InPlaceRecoveryOfEveryRankFailsTheStart) {
  LocalLauncherOptions o = sh("kill -9 $$");
  o.processes_per_host = 2;
  o.prefix_output = false;
  o.in_place_recoveries = 4;
  const GroupEnd end = LocalLauncher(o).run_group();
  EXPECT_EQ(end.exit_code, 128 + SIGKILL);
  EXPECT_LE(end.recoveries, 1);
}

TEST(LocalLauncher, RejectsBadOptionsNamingTheField) {
  LocalLauncherOptions o = sh("true");
  o.hosts = 0;
  try {
    LocalLauncher launcher(o);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "local launcher: hosts must be at least 1, found 0");
  }
  o = sh("true");
  o.command.clear();
  EXPECT_THROW(LocalLauncher{o}, InvalidArgument);
  o = sh("true");
  o.grace = std::chrono::milliseconds(-1);
  EXPECT_THROW(LocalLauncher{o}, InvalidArgument);
}

}  // namespace
}  // namespace heft::job
