// ctest-labels: multiproc
// End-to-end tests of `heft run` (src/heft/cli/run.cc over job::LocalLauncher): the real
// built binary is started with fork/exec, its stdout/stderr go to files, and every wait has
// a deadline. Workers are small scripts under tests/cli/ that write their pids to a
// temporary directory, so each test can check that no worker (nor a worker's own child)
// survives the run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sched.h>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/files.h"
#include "support/heft_process.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kScripts = HEFT_SOURCE_DIR "/tests/cli";
const std::string kPython = HEFT_PYTHON;  // .venv/bin/python: the one with torch

using heft::test::TempDir;

using heft::test::read_file;

using heft::test::describe;
using heft::test::Outcome;

// `heft ARGS...` running in the background, stdout and stderr to dir/heft.out and .err.
class Heft : public heft::test::HeftProcess {
 public:
  Heft(const std::vector<std::string>& args, const std::string& dir)
      : HeftProcess(kHeft, args, dir + "/heft") {}
};

Outcome run_heft(const std::vector<std::string>& args, seconds timeout = seconds(60)) {
  TempDir dir;
  return Heft(args, dir.path()).wait(timeout);
}


// The pid files (worker-R.pid, sleep-R.pid) the worker scripts wrote to dir.
std::vector<std::pair<std::string, pid_t>> pid_files(const std::string& dir) {
  std::vector<std::pair<std::string, pid_t>> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".pid") continue;
    const std::string text = read_file(entry.path().string());
    if (!text.empty()) out.emplace_back(entry.path().filename().string(), std::atoi(text.c_str()));
  }
  return out;
}

bool wait_for_pid_files(const std::string& dir, size_t count, seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (pid_files(dir).size() < count) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Gone: no such process, or a zombie waiting for init (the process no longer runs).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

// Waits up to `timeout` for every process named in dir's pid files to be gone; returns the
// names of the survivors (and kills them, so a failing test leaves nothing behind).
std::vector<std::string> survivors(const std::string& dir, seconds timeout = seconds(5)) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> alive;
  do {
    alive.clear();
    for (const auto& [name, pid] : pid_files(dir))
      if (!process_gone(pid)) alive.push_back(name + " (pid " + std::to_string(pid) + ")");
    if (alive.empty()) return alive;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (Clock::now() < deadline);
  for (const auto& [name, pid] : pid_files(dir)) ::kill(pid, SIGKILL);
  return alive;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

std::vector<std::string> exit_rank_command(const std::string& dir, const std::string& rank,
                                           const std::string& action, const std::string& arg) {
  return {"--", "/bin/sh", kScripts + "/exit_rank.sh", dir, rank, action, arg};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(HeftRun, TorchScriptRunsOnTwoHostsOfTwo) {
  if (std::system((kPython + " -c 'import torch.distributed' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << kPython << " has no torch";
  const Outcome o = run_heft({"run", "--hosts", "2", "-n", "2", "--timeout", "60", "--",
                              kPython, kScripts + "/torchrun_script.py"},
                             seconds(240));
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string line = "[rank " + std::to_string(rank) + "] rank " +
                             std::to_string(rank) + "/4 on algo-" + std::to_string(rank / 2 + 1) +
                             ": all_reduce=6 all_gather=[0, 10, 20, 30] ok\n";
    EXPECT_NE(o.out.find(line), std::string::npos) << "missing: " << line << describe(o);
  }
}

TEST(HeftRun, FailingRankStopsTheOthersAndGivesItsExitCode) {
  TempDir dir;
  Heft heft(concat({"run", "-n", "4"}, exit_rank_command(dir.path(), "2", "exit", "7")),
            dir.path());
  const Outcome o = heft.wait(seconds(50));
  EXPECT_EQ(o.exit_code, 7) << describe(o);
  EXPECT_LT(o.seconds, 20.0) << describe(o);
  EXPECT_NE(o.err.find("heft run: rank 2 exited with code 7; stopping the other 3 workers\n"),
            std::string::npos)
      << describe(o);
  EXPECT_EQ(pid_files(dir.path()).size(), 7u) << "4 workers and 3 background sleeps";
  EXPECT_EQ(join(survivors(dir.path())), "");
}

TEST(HeftRun, WorkerKilledBySigkillGives137) {
  TempDir dir;
  Heft heft(concat({"run", "--hosts", "3"}, exit_rank_command(dir.path(), "1", "kill", "KILL")),
            dir.path());
  const Outcome o = heft.wait(seconds(50));
  EXPECT_EQ(o.exit_code, 137) << describe(o);
  EXPECT_NE(o.err.find("heft run: rank 1 was killed by signal 9 (SIGKILL); stopping the other "
                       "2 workers\n"),
            std::string::npos)
      << describe(o);
  EXPECT_EQ(join(survivors(dir.path())), "");
}

TEST(HeftRun, SigintEndsAllWorkersAndReturns130) {
  TempDir dir;
  Heft heft(concat({"run", "--hosts", "2", "-n", "2"},
                   exit_rank_command(dir.path(), "-1", "none", "0")),
            dir.path());
  ASSERT_TRUE(wait_for_pid_files(dir.path(), 8, seconds(30))) << "workers did not start";
  ::kill(heft.pid(), SIGINT);
  const Outcome o = heft.wait(seconds(30));
  EXPECT_EQ(o.exit_code, 130) << describe(o);
  EXPECT_NE(o.err.find("heft run: received SIGINT; stopping 4 workers\n"), std::string::npos)
      << describe(o);
  EXPECT_EQ(join(survivors(dir.path())), "");
}

TEST(HeftRun, SigtermReturns143) {
  TempDir dir;
  Heft heft(concat({"run", "-n", "2"}, exit_rank_command(dir.path(), "-1", "none", "0")),
            dir.path());
  ASSERT_TRUE(wait_for_pid_files(dir.path(), 4, seconds(30))) << "workers did not start";
  ::kill(heft.pid(), SIGTERM);
  const Outcome o = heft.wait(seconds(30));
  EXPECT_EQ(o.exit_code, 143) << describe(o);
  EXPECT_EQ(join(survivors(dir.path())), "");
}

TEST(HeftRun, WorkersIgnoringSigtermAreKilledAfterTheGrace) {
  TempDir dir;
  const std::string d = dir.path();
  // Ranks 1 and 2 ignore SIGTERM (and so does their exec'd sleep); rank 0 fails once they
  // are set up.
  const std::string script = "trap '' TERM; echo $$ > " + d + "/worker-$RANK.pid; " +
                             "if [ $RANK = 0 ]; then while [ ! -e " + d + "/worker-1.pid ] || " +
                             "[ ! -e " + d + "/worker-2.pid ]; do sleep 0.05; done; exit 3; fi; " +
                             "exec sleep 60";
  Heft heft({"run", "-n", "3", "--grace", "1", "--", "/bin/sh", "-c", script}, dir.path());
  const Outcome o = heft.wait(seconds(50));
  EXPECT_EQ(o.exit_code, 3) << describe(o);
  EXPECT_GE(o.seconds, 1.0) << describe(o);
  EXPECT_LT(o.seconds, 20.0) << describe(o);
  EXPECT_NE(o.err.find("heft run: 2 workers still running 1 s after being stopped; "
                       "sending SIGKILL\n"),
            std::string::npos)
      << describe(o);
  EXPECT_EQ(join(survivors(dir.path())), "");
}

TEST(HeftRun, LauncherKilledBySigkillLeavesNoWorker) {
  TempDir dir;
  const std::string script = "echo $$ > " + dir.path() + "/worker-$RANK.pid; exec sleep 60";
  Heft heft({"run", "-n", "3", "--", "/bin/sh", "-c", script}, dir.path());
  ASSERT_TRUE(wait_for_pid_files(dir.path(), 3, seconds(30))) << "workers did not start";
  ::kill(heft.pid(), SIGKILL);
  const Outcome o = heft.wait(seconds(30));
  EXPECT_EQ(o.exit_code, 137);
  EXPECT_EQ(join(survivors(dir.path())), "") << "PR_SET_PDEATHSIG should have killed them";
}

TEST(HeftRun, OutputLinesCarryTheRankPrefix) {
  const Outcome o = run_heft({"run", "-n", "2", "--", "/bin/sh", "-c",
                              "echo out-$RANK; echo err-$RANK >&2; printf partial-$RANK"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  for (const std::string rank : {"0", "1"}) {
    const std::string p = "[rank " + rank + "] ";
    EXPECT_NE(o.out.find(p + "out-" + rank + "\n"), std::string::npos) << describe(o);
    EXPECT_NE(o.out.find(p + "partial-" + rank + "\n"), std::string::npos) << describe(o);
    EXPECT_NE(o.err.find(p + "err-" + rank + "\n"), std::string::npos) << describe(o);
    EXPECT_EQ(o.out.find("err-" + rank), std::string::npos) << "stderr stays on stderr";
  }
}

TEST(HeftRun, NoPrefixPassesOutputThrough) {
  const Outcome o = run_heft({"run", "--no-prefix", "--", "/bin/sh", "-c", "printf raw"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_EQ(o.out, "raw");
}

TEST(HeftRun, WorkersGetTheEnvironmentContract) {
  const Outcome o = run_heft(
      {"run", "--hosts", "2", "-n", "2", "--timeout", "42", "--", "/bin/sh", "-c",
       "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $SM_CURRENT_HOST "
       "$HEFT_HOST $SM_HOSTS $SM_NUM_GPUS $HEFT_TIMEOUT $TORCHELASTIC_RESTART_COUNT "
       "$MASTER_ADDR ${#HEFT_TOKEN}\""});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  const char* expected[] = {
      "[rank 0] 0 0 4 2 0 algo-1 algo-1 [\"algo-1\",\"algo-2\"] 0 42 0 127.0.0.1 64\n",
      "[rank 1] 1 1 4 2 0 algo-1 algo-1 [\"algo-1\",\"algo-2\"] 0 42 0 127.0.0.1 64\n",
      "[rank 2] 2 0 4 2 1 algo-2 algo-2 [\"algo-1\",\"algo-2\"] 0 42 0 127.0.0.1 64\n",
      "[rank 3] 3 1 4 2 1 algo-2 algo-2 [\"algo-1\",\"algo-2\"] 0 42 0 127.0.0.1 64\n"};
  for (const char* line : expected)
    EXPECT_NE(o.out.find(line), std::string::npos) << "missing: " << line << describe(o);
}

// --distribution: the block checked as a spec's and given as heft train gives it (heft's form
// in HEFT_DISTRIBUTION, the toolkit's framework parameters), the vendor's data-parallel
// stand-in on the path only when the block asks for it; a bad block names the option and field.
TEST(HeftRun, DistributionReachesTheWorkersAsHeftTrainGivesIt) {
  const std::string show = "echo \"$HEFT_DISTRIBUTION|$SM_FRAMEWORK_PARAMS|$PYTHONPATH\"";
  const Outcome o = run_heft({"run", "-n", "2", "--no-prefix", "--distribution",
                              R"({"smdistributed": {"dataparallel": {"enabled": true}}})", "--",
                              "/bin/sh", "-c", show});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_NE(o.out.find(R"({"dataparallel":{"enabled":true}}|)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(R"("sagemaker_distributed_dataparallel_enabled":true)"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("/heft/vendor/smddp"), std::string::npos) << o.out;
  const Outcome plain = run_heft({"run", "--no-prefix", "--distribution",
                                  R"({"dataparallel": {"enabled": true}})", "--", "/bin/sh", "-c",
                                  show});
  ASSERT_EQ(plain.exit_code, 0) << describe(plain);
  EXPECT_EQ(plain.out.find("vendor"), std::string::npos) << plain.out;
  // The model-parallel library's dict: its stand-in (not the data-parallel one) and its
  // parameters as given, for smp.init.
  const std::string mp_show = "echo \"$SM_HP_MP_PARAMETERS|$PYTHONPATH\"";
  const Outcome mp = run_heft({"run", "-n", "2", "--no-prefix", "--distribution",
                               R"({"smdistributed": {"modelparallel": {"enabled": true, )"
                               R"("parameters": {"pipeline_parallel_degree": 2}}}})",
                               "--", "/bin/sh", "-c", mp_show});
  ASSERT_EQ(mp.exit_code, 0) << describe(mp);
  EXPECT_NE(mp.out.find(R"({"pipeline_parallel_degree":2}|)"), std::string::npos) << mp.out;
  EXPECT_NE(mp.out.find("/heft/vendor/smdmp"), std::string::npos) << mp.out;
  EXPECT_EQ(mp.out.find("/heft/vendor/smddp"), std::string::npos) << mp.out;
  const Outcome bad = run_heft({"run", "-n", "2", "--distribution",
                                R"({"modelparallel": {"enabled": true, "parameters": {"partitions": 3}}})",
                                "--", "true"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("heft run: --distribution: "), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("partitions"), std::string::npos) << bad.err;
}

TEST(HeftRun, AllWorkersSucceedingGivesZero) {
  const Outcome o = run_heft({"run", "--hosts", "3", "-n", "1", "--", "true"});
  EXPECT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "");
}

TEST(HeftRun, MissingCommandExits127) {
  Outcome o = run_heft({"run", "-n", "2", "--", "heft-no-such-command", "--flag"});
  EXPECT_EQ(o.exit_code, 127) << describe(o);
  EXPECT_EQ(o.err, "heft run: cannot execute 'heft-no-such-command': No such file or directory\n");
  o = run_heft({"run", "--", "/nonexistent/worker"});
  EXPECT_EQ(o.exit_code, 127) << describe(o);
  EXPECT_EQ(o.err, "heft run: cannot execute '/nonexistent/worker': No such file or directory\n");
}

TEST(HeftRun, NonExecutableCommandExits126) {
  TempDir dir;
  const std::string file = dir.path() + "/not-executable";
  std::ofstream(file) << "echo never\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  const Outcome o = run_heft({"run", "--", file});
  EXPECT_EQ(o.exit_code, 126) << describe(o);
  EXPECT_NE(o.err.find("Permission denied"), std::string::npos) << describe(o);
}

TEST(HeftRun, UsageErrorsNameTheOption) {
  Outcome o = run_heft({"run", "--hosts", "0", "--", "true"});
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("heft run: --hosts must be at least 1, got 0"), std::string::npos)
      << describe(o);
  o = run_heft({"run", "-n", "0", "--", "true"});
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("heft run: --nproc-per-host must be at least 1, got 0"),
            std::string::npos)
      << describe(o);
  o = run_heft({"run", "-n", "2"});
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("heft run: no command given"), std::string::npos) << describe(o);
}


// Each worker's Cpus_allowed_list, by rank, from `heft run -n N -- grep ...`.
std::map<int, std::string> allowed_cpus_of_workers(int n) {
  const Outcome o = run_heft({"run", "-n", std::to_string(n), "--", "/bin/grep",
                              "Cpus_allowed_list", "/proc/self/status"});
  EXPECT_EQ(o.exit_code, 0) << describe(o);
  std::map<int, std::string> out;
  std::istringstream lines(o.out);
  std::string line;
  while (std::getline(lines, line)) {
    int rank = -1;
    char list[256] = {};
    if (std::sscanf(line.c_str(), "[rank %d] Cpus_allowed_list: %255s", &rank, list) == 2)
      out[rank] = list;
  }
  return out;
}

TEST(HeftRun, WorkersGetTheirOwnCoresOrShareThemInPairs) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "this process may use one CPU (" << cores << " online)";
  const std::map<int, std::string> bound = allowed_cpus_of_workers(2);
  ASSERT_EQ(bound.size(), 2u);
  EXPECT_NE(bound.at(0), bound.at(1)) << "two workers on " << CPU_COUNT(&mine) << " CPUs share";
  // HEFT_BIND=none: every worker may run anywhere this process may.
  ::setenv("HEFT_BIND", "none", 1);
  const std::map<int, std::string> free = allowed_cpus_of_workers(2);
  ::unsetenv("HEFT_BIND");
  ASSERT_EQ(free.size(), 2u);
  EXPECT_EQ(free.at(0), free.at(1));
  // Twice as many workers as CPUs: consecutive pairs share one CPU, each pair its own.
  const int twice = 2 * CPU_COUNT(&mine);
  const std::map<int, std::string> many = allowed_cpus_of_workers(twice);
  ASSERT_EQ(many.size(), static_cast<size_t>(twice));
  for (int r = 0; r < twice; r += 2) {
    EXPECT_EQ(many.at(r), many.at(r + 1)) << "ranks " << r << " and " << r + 1;
    EXPECT_EQ(many.at(r).find_first_of(",-"), std::string::npos) << "rank " << r << ": " << many.at(r);
    if (r > 0) {
      EXPECT_NE(many.at(r), many.at(r - 2)) << "ranks " << r - 2 << " and " << r;
    }
  }
}

TEST(HeftRun, BadHeftBindIsAUsageError) {
  ::setenv("HEFT_BIND", "socket", 1);
  const Outcome o = run_heft({"run", "-n", "2", "--", "/bin/true"});
  ::unsetenv("HEFT_BIND");
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("HEFT_BIND: expected core or none, found 'socket'"), std::string::npos)
      << describe(o);
}

// Processes whose command line contains `marker`, other than this test.
std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file(entry.path().string() + "/cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    const pid_t pid = std::atoi(name.c_str());
    if (cmdline.find(marker) != std::string::npos && pid != ::getpid() && !process_gone(pid))
      out.push_back(pid);
  }
  return out;
}

// Regression: `heft run -n 100000 -- true` printed nothing for 30 s and ignored SIGTERM.
TEST(HeftRun, WorkerCountsPastTheLimitAreRefused) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "-n", "100000", "--", "/bin/true"},
        std::vector<std::string>{"run", "--hosts", "40", "-n", "40", "--", "/bin/true"}}) {
    const Outcome o = run_heft(args, seconds(10));
    EXPECT_EQ(o.exit_code, 2) << describe(o);
    EXPECT_NE(o.err.find("--hosts x --nproc-per-host must be at most 1024 workers"),
              std::string::npos) << describe(o);
  }
  const Outcome b = run_heft({"bench", "allreduce", "--ranks", "5000"}, seconds(10));
  EXPECT_EQ(b.exit_code, 2) << describe(b);
  EXPECT_NE(b.err.find("--ranks: expected 1 to 1024"), std::string::npos) << describe(b);
}

// Regression: `heft bench allreduce --min 0 --max 0` spun both cores and printed nothing.
TEST(HeftRun, BenchOfZeroBytesIsRefusedAtOnce) {
  const Outcome o = run_heft({"bench", "allreduce", "--ranks", "2", "--min", "0", "--max", "0"},
                             seconds(10));
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("--min: expected at least 1 byte, found 0"), std::string::npos)
      << describe(o);
}

TEST(HeftRun, GraceMustBeFinite) {
  const Outcome o = run_heft({"run", "--grace", "inf", "--", "/bin/true"}, seconds(10));
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("--grace must be a number of seconds from 0 to 3600, got inf"),
            std::string::npos) << describe(o);
}

// SIGTERM while a large group is still being started ends the launch within 5 s and leaves
// no worker behind.
TEST(HeftRun, SigtermWhileStartingStopsTheLaunch) {
  TempDir dir;
  const std::string marker = "30.4242";  // a unique argument to find our sleeps by
  Heft heft({"run", "-n", "1024", "--grace", "10", "--", "/bin/sleep", marker}, dir.path());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few dozen started
  ::kill(heft.pid(), SIGTERM);
  const auto sent = Clock::now();
  const Outcome o = heft.wait(seconds(30));
  const double took = std::chrono::duration<double>(Clock::now() - sent).count();
  EXPECT_EQ(o.exit_code, 128 + SIGTERM) << describe(o);
  EXPECT_LT(took, 5.0) << describe(o);
  const auto deadline = Clock::now() + seconds(5);
  while (!processes_with(marker).empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(processes_with(marker).empty()) << processes_with(marker).size() << " left";
}

// Regression: workers inherited the launcher's ignored signals, and a launcher started with
// SIGTERM blocked never saw a stop request. Started that way (SIGTERM blocked and ignored,
// SIGUSR1 ignored), heft's workers have nothing blocked or ignored, and SIGTERM stops heft.
TEST(HeftRun, WorkersStartWithDefaultSignalsWhateverTheLaunchersWere) {
  TempDir dir;
  sigset_t term, saved_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &term, &saved_mask);
  struct sigaction ignore {}, saved_term {}, saved_usr1 {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTERM, &ignore, &saved_term);
  ::sigaction(SIGUSR1, &ignore, &saved_usr1);
  Heft heft({"run", "-n", "2", "--", "/bin/sh", "-c",
             "grep -E \"SigBlk|SigIgn\" /proc/self/status; exec sleep 30"},
            dir.path());
  ::sigaction(SIGTERM, &saved_term, nullptr);
  ::sigaction(SIGUSR1, &saved_usr1, nullptr);
  ::sigprocmask(SIG_SETMASK, &saved_mask, nullptr);
  const auto deadline = Clock::now() + seconds(20);
  for (;;) {
    const std::string out = read_file(dir.path() + "/heft.out");
    if (std::count(out.begin(), out.end(), '\n') >= 4 || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(heft.pid(), SIGTERM);
  const Outcome o = heft.wait(seconds(20));
  EXPECT_EQ(o.exit_code, 128 + SIGTERM) << describe(o);
  EXPECT_LT(o.seconds, 15.0) << describe(o);
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 4) << describe(o);
  std::istringstream lines(o.out);
  std::string line;
  while (std::getline(lines, line))
    EXPECT_NE(line.find(":\t0000000000000000"), std::string::npos) << line;
}

// The worker processes of `launcher` (its children) and each one's RANK.
std::map<int, pid_t> worker_ranks(pid_t launcher) {
  std::map<int, pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(entry.path().string() + "/stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + paren + 2, "%c %d", &state, &ppid) != 2 || ppid != launcher)
      continue;
    std::string env = read_file(entry.path().string() + "/environ");
    const auto at = env.find(std::string("\0RANK=", 6));
    if (at != std::string::npos) out[std::atoi(env.c_str() + at + 6)] = std::atoi(name.c_str());
  }
  return out;
}

// Regression: with one worker stopped (a hang), the summary named the first rank that timed
// out ("rank 1 exited with code 1") though every worker's own message said whom it waited
// for. It must name the stopped rank and the collective.
TEST(HeftRun, AHungRankIsNamedWithItsCollective) {
  for (const char* layout : {"1", "2"}) {  // one shared-memory host; two hosts (TCP between)
    TempDir dir;
    Heft heft({"bench", "allreduce", "--ranks", "4", "--hosts", layout, "--min", "4K", "--max",
               "4K", "--iters", "100000000", "--warmup", "0", "--timeout", "2"},
              dir.path());
    std::map<int, pid_t> ranks;
    const auto deadline = Clock::now() + seconds(20);
    while ((ranks = worker_ranks(heft.pid())).size() < 4 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(ranks.size(), 4u);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // in the timed loop
    ::kill(ranks.at(2), SIGSTOP);
    const Outcome o = heft.wait(seconds(60));
    ::kill(ranks.at(2), SIGKILL);
    EXPECT_NE(o.exit_code, 0) << describe(o);
    EXPECT_NE(o.err.find("heft bench: rank 2 stopped responding in allreduce("), std::string::npos)
        << "hosts=" << layout << "\n" << describe(o);
    EXPECT_NE(o.err.find("timed out waiting for it"), std::string::npos) << describe(o);
  }
}

}  // namespace
