// ctest-labels: multiproc
// A worker that vandalizes its own job folder cannot hang or bloat heft (regression tests of
// the finding "FIFOs and links to /dev/zero in a job folder hang heft train and heft logs"):
// the worker, a shell script run by the built `heft train` with its own HEFT_HOME, replaces
// every file heft reads there (its log, its step file, its failure records, a trace and a
// label file) and the report's temporary file with a FIFO or a link to /dev/zero. `heft
// train` still ends in bounded time with the job's status recorded, `heft stop` and SIGTERM
// still end a running one, `heft logs` exits 1 at once with a line naming the log and what
// it is, `heft diagnose` and `heft report` answer, and a 64 MiB log is printed in bounded
// memory. Memory is the largest RSS of any child this test process has waited for
// (getrusage(RUSAGE_CHILDREN): heft, its workers, their commands).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/files.h"
#include "support/heft_process.h"

namespace {

using Clock = std::chrono::steady_clock;
using heft::test::describe;
using heft::test::Outcome;
using heft::test::read_file;
using heft::test::TempDir;
using std::chrono::seconds;

const std::string kHeft = HEFT_BINARY_DIR "/heft";
// The most any heft process (or worker) here may hold: heft itself takes about 20 MiB; a
// reader that follows /dev/zero or loads a 64 MiB log whole takes gigabytes or 128+ MiB.
constexpr long kMaxChildRssKb = 96 * 1024;

// `heft ARGS...` in the background with HEFT_HOME=dir/home.
class Heft : public heft::test::HeftProcess {
 public:
  Heft(const std::string& dir, const std::vector<std::string>& args)
      : HeftProcess(kHeft, args, dir + "/out-" + std::to_string(counter_++),
                    {{"HEFT_HOME", dir + "/home"}}) {}
  Outcome wait(seconds timeout = seconds(30)) { return HeftProcess::wait(timeout); }

 private:
  static inline int counter_ = 0;
};

Outcome heft(const std::string& dir, const std::vector<std::string>& args,
             seconds timeout = seconds(30)) {
  return Heft(dir, args).wait(timeout);
}

// A two-worker job running `script` (no single quotes) in /bin/sh; returns the spec's path.
std::string spec(const TempDir& dir, const std::string& name, const std::string& script,
                 const std::string& extra = "") {
  const std::string path = dir.path() + "/" + name + ".yaml";
  std::ofstream(path) << "name: " << name << "\nentry_point: [/bin/sh, -c, '" << script
                      << "']\ncluster: {processes_per_host: 2}\nstopping: {grace_s: 2}\n"
                      << extra;
  return path;
}

// Rank 0 replaces each file heft reads in its job folder by what `make` makes of $f (after
// rm -f $f), then writes output/data/vandalized.
std::string vandalize(const std::string& make) {
  return "if [ $RANK = 0 ]; then cd $HEFT_JOB_DIR; for f in logs/rank-0.log profile/rank-0.steps "
         "output/failure output/data/failure traces/rank-0.world.trace "
         "traces/rank-0.groups.json report.html.tmp; do rm -f $f; " + make + "; done; "
         "touch output/data/vandalized; fi; ";
}

bool wait_for_file(const std::string& path, seconds timeout = seconds(20)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (::access(path.c_str(), F_OK) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

long max_child_rss_kb() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  return u.ru_maxrss;
}

// A job whose rank 0 vandalized its folder with `make` and exited 3 ends Failed in bounded
// time, the failure reason naming the failure file it did not read; heft logs, diagnose and
// describe answer at once.
void expect_vandalized_job_ends(const std::string& make, const std::string& kind) {
  TempDir dir;
  const std::string job = "vandal";
  const std::string jobdir = dir.path() + "/home/jobs/" + job;
  const std::string path = spec(dir, job,
                                "echo hello from $RANK; " + vandalize(make) +
                                    "if [ $RANK = 0 ]; then sleep 2.5; exit 3; fi; sleep 20");
  const Outcome train = heft(dir.path(), {"train", path}, seconds(40));
  EXPECT_FALSE(train.timed_out) << describe(train);
  EXPECT_EQ(train.exit_code, 1) << describe(train);
  EXPECT_LT(train.seconds, 20) << describe(train);
  // The profiler read the step file at least twice (interval 1 s) and said why once.
  const std::string steps_refused =
      jobdir + "/profile/rank-0.steps is " + kind + ", not a regular file: not read";
  EXPECT_NE(train.err.find(steps_refused), std::string::npos) << describe(train);
  EXPECT_EQ(train.err.find(steps_refused), train.err.rfind(steps_refused)) << describe(train);

  const Outcome d = heft(dir.path(), {"describe", job, "--json"}, seconds(10));
  ASSERT_EQ(d.exit_code, 0) << describe(d);
  const nlohmann::json j = d.json();
  EXPECT_EQ(j["status"], "Failed");
  const std::string reason = j["failure_reason"];
  EXPECT_EQ(reason.rfind("rank 0 exited with code 3", 0), 0u) << reason;
  EXPECT_NE(reason.find(jobdir + "/output/failure is " + kind + ", not a regular file: not read"),
            std::string::npos)
      << reason;

  const Outcome logs = heft(dir.path(), {"logs", job}, seconds(10));
  EXPECT_FALSE(logs.timed_out) << describe(logs);
  EXPECT_EQ(logs.exit_code, 1) << describe(logs);
  EXPECT_EQ(logs.err, "heft logs: " + jobdir + "/logs/rank-0.log is " + kind +
                          ", not a regular file: not read\n")
      << describe(logs);
  EXPECT_EQ(logs.out, "[rank 1] hello from 1\n") << describe(logs);
  const Outcome follow = heft(dir.path(), {"logs", job, "--follow"}, seconds(10));
  EXPECT_EQ(follow.exit_code, 1) << describe(follow);
  const Outcome rank1 = heft(dir.path(), {"logs", job, "--rank", "1"}, seconds(10));
  EXPECT_EQ(rank1.exit_code, 0) << describe(rank1);
  EXPECT_EQ(rank1.out, "hello from 1\n");

  const Outcome diagnose = heft(dir.path(), {"diagnose", job}, seconds(10));
  EXPECT_FALSE(diagnose.timed_out) << describe(diagnose);
  EXPECT_EQ(diagnose.exit_code, 0) << describe(diagnose);
  EXPECT_NE(diagnose.out.find(", 0 collective traces"), std::string::npos) << describe(diagnose);
  // heft report reads the traces and writes report.html through report.html.tmp.
  const Outcome report = heft(dir.path(), {"report", job}, seconds(10));
  EXPECT_EQ(report.exit_code, 0) << describe(report);
  EXPECT_EQ(report.out, jobdir + "/report.html\n");
  EXPECT_NE(read_file(jobdir + "/report.html").find("<!doctype html>"), std::string::npos);
  EXPECT_LT(max_child_rss_kb(), kMaxChildRssKb);
}

TEST(JobFolderFiles, FifosInTheFolderNeitherHangTrainNorLogs) {
  expect_vandalized_job_ends("mkfifo $f", "a FIFO");
}

TEST(JobFolderFiles, LinksToDevZeroNeitherGrowTrainNorLogs) {
  expect_vandalized_job_ends("ln -s /dev/zero $f", "a symbolic link");
}

// A running job whose folder holds FIFOs (read by the profiler every second) still stops on
// heft stop, and another on SIGTERM.
TEST(JobFolderFiles, StopAndSigtermEndAJobWhoseWorkerMadeFifos) {
  TempDir dir;
  for (const std::string how : {"stop", "sigterm"}) {
    const std::string job = "running-" + how;
    const std::string jobdir = dir.path() + "/home/jobs/" + job;
    Heft train(dir.path(), {"train", spec(dir, job, vandalize("mkfifo $f") + "sleep 30")});
    ASSERT_TRUE(wait_for_file(jobdir + "/output/data/vandalized"));
    std::this_thread::sleep_for(seconds(2));  // two collections of the profiler
    const auto asked = Clock::now();
    if (how == "stop") {
      const Outcome stop = heft(dir.path(), {"stop", job}, seconds(10));
      EXPECT_EQ(stop.exit_code, 0) << describe(stop);
    } else {
      ::kill(train.pid(), SIGTERM);
    }
    const Outcome o = train.wait(seconds(20));
    EXPECT_FALSE(o.timed_out) << how << ": " << describe(o);
    EXPECT_EQ(o.exit_code, 3) << how << ": " << describe(o);
    EXPECT_LT(Clock::now() - asked, seconds(8)) << how;
    const Outcome d = heft(dir.path(), {"describe", job, "--json"}, seconds(10));
    ASSERT_EQ(d.exit_code, 0) << describe(d);
    EXPECT_EQ(d.json()["status"], "Stopped") << how;
  }
}

// A 64 MiB log (sparse: a worker extended it) is streamed, not loaded: heft logs prints all
// of it, in bounded memory, with or without the rank prefixes.
TEST(JobFolderFiles, AHugeLogIsPrintedInBoundedMemory) {
  TempDir dir;
  const std::string job = "huge";
  // Rank 0 waits for its first line to be in the log before extending it.
  const std::string path = spec(
      dir, job,
      "if [ $RANK = 0 ]; then log=$HEFT_JOB_DIR/logs/rank-0.log; echo first; "
      "while [ ! -s $log ]; do sleep 0.05; done; truncate -s +64M $log; echo; echo last; fi");
  const Outcome train = heft(dir.path(), {"train", path});
  ASSERT_EQ(train.exit_code, 0) << describe(train);
  const size_t size = 6 + (64u << 20) + 1 + 5;  // "first\n", the zeros, "\n", "last\n"
  {
    const Outcome one = heft(dir.path(), {"logs", job, "--rank", "0"});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_EQ(one.out.size(), size);
    EXPECT_EQ(one.out.substr(0, 6), "first\n");
    EXPECT_EQ(one.out.substr(one.out.size() - 6), "\nlast\n");
  }  // freed before the next fork, whose RSS would count it until its exec
  EXPECT_LT(max_child_rss_kb(), kMaxChildRssKb);
  const Outcome all = heft(dir.path(), {"logs", job});
  EXPECT_LT(max_child_rss_kb(), kMaxChildRssKb);
  std::cout << "largest child RSS: " << max_child_rss_kb() / 1024 << " MiB\n";
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out.size(), size + 3 * 9);  // "[rank 0] " before first, the zeros and last
  EXPECT_EQ(all.out.substr(0, 15), "[rank 0] first\n");
  EXPECT_EQ(all.out.substr(15, 9), "[rank 0] ");
  EXPECT_EQ(all.out.substr(all.out.size() - 15), "\n[rank 0] last\n");
}

}  // namespace
