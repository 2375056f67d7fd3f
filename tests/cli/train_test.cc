// ctest-labels: multiproc
// End-to-end tests of `heft train` and the job commands (jobs, describe, logs, metrics,
// stop) through the built binary, each test with its own HEFT_HOME. Workers are shell and
// Python scripts (tests/job/counter_job.py checkpoints and resumes), never heft-train.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
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
const std::string kCounter = HEFT_SOURCE_DIR "/tests/job/counter_job.py";

using heft::test::TempDir;

using heft::test::read_file;

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

using heft::test::describe;
using heft::test::Outcome;

// `heft ARGS...` in the background with HEFT_HOME=home/home, output to files under home.
class Heft : public heft::test::HeftProcess {
 public:
  Heft(const std::string& home, const std::vector<std::string>& args,
       const std::string& binary = kHeft)
      : HeftProcess(binary, args, unique_base(home), {{"HEFT_HOME", home + "/home"}}) {}
  Outcome wait(seconds timeout = seconds(30)) { return HeftProcess::wait(timeout); }

 private:
  static std::string unique_base(const std::string& home) {
    static int counter = 0;
    return home + "/out-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  }
};

Outcome heft(const std::string& home, const std::vector<std::string>& args,
             seconds timeout = seconds(30)) {
  return Heft(home, args).wait(timeout);
}

// Writes spec.yaml into dir and returns its path.
std::string spec(const TempDir& dir, const std::string& yaml, const std::string& file = "spec.yaml") {
  const std::string path = dir.path() + "/" + file;
  write_file(path, yaml);
  return path;
}

std::string sh_spec(const std::string& name, const std::string& script,
                    const std::string& extra = "") {
  return "name: " + name + "\nentry_point: [/bin/sh, -c, '" + script + "']\n" +
         "cluster: {processes_per_host: 2}\n" + extra;
}

// Polls `heft describe --json` until the job's secondary status is `status`.
bool wait_for_status(const std::string& home, const std::string& job, const std::string& status,
                     seconds timeout = seconds(20)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const Outcome o = heft(home, {"describe", job, "--json"});
    if (o.exit_code == 0 && o.json()["secondary_status"] == status) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::vector<std::string> transition_names(const nlohmann::json& described) {
  std::vector<std::string> names;
  for (const auto& t : described["transitions"]) names.push_back(t["status"]);
  return names;
}

TEST(HeftTrain, BadSpecExits2NamingTheFieldWithTheNearestKey) {
  TempDir dir;
  const std::string path =
      spec(dir, "name: j\nentry_point: [/bin/true]\nhyperparamters: {lr: 0.1}\n"
                "cluster: {instance_count: 0}\n");
  const Outcome o = heft(dir.path(), {"train", path});
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("heft train: " + path +
                       ":3: hyperparamters: unknown field; did you mean 'hyperparameters'?\n"),
            std::string::npos)
      << describe(o);
  EXPECT_NE(o.err.find("heft train: " + path +
                       ":4: cluster.instance_count: expected an integer from 1 to 1024, found 0\n"),
            std::string::npos)
      << describe(o);
  EXPECT_EQ(o.out, "");
  const Outcome jobs = heft(dir.path(), {"jobs", "--json"});
  EXPECT_EQ(jobs.json(), nlohmann::json::array()) << describe(jobs);

  const Outcome bad_set = heft(dir.path(), {"train", path, "--set", "retry.max_attempts=zero"});
  EXPECT_EQ(bad_set.exit_code, 2);
  EXPECT_NE(bad_set.err.find("--set retry.max_attempts: expected an integer from 1 to 30, found 'zero'"),
            std::string::npos)
      << describe(bad_set);
  const Outcome usage = heft(dir.path(), {"train"});
  EXPECT_EQ(usage.exit_code, 2) << describe(usage);
}

TEST(HeftTrain, CompletedJobIsListedAndATakenNameIsRefused) {
  TempDir dir;
  const std::string path = spec(dir, sh_spec("once", "echo hello from $RANK"));
  const Outcome first = heft(dir.path(), {"train", path});
  ASSERT_EQ(first.exit_code, 0) << describe(first);
  EXPECT_NE(first.out.find("[rank 1] hello from 1\n"), std::string::npos) << describe(first);
  const Outcome again = heft(dir.path(), {"train", path});
  EXPECT_EQ(again.exit_code, 2) << describe(again);
  EXPECT_NE(again.err.find("heft train: a job named 'once' already exists (Completed, created "),
            std::string::npos)
      << describe(again);
  const Outcome renamed = heft(dir.path(), {"train", path, "--name", "twice"});
  EXPECT_EQ(renamed.exit_code, 0) << describe(renamed);

  const Outcome list = heft(dir.path(), {"jobs"});
  EXPECT_EQ(list.out.rfind("NAME", 0), 0u) << describe(list);
  const nlohmann::json jobs = heft(dir.path(), {"jobs", "--json"}).json();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]["name"], "twice");
  EXPECT_EQ(jobs[1]["status"], "Completed");
}

TEST(HeftTrain, FailingWorkerExits1AndDescribeGivesItsExitCode) {
  TempDir dir;
  const std::string path = spec(
      dir, sh_spec("boom", "if [ $RANK = 1 ]; then echo bad batch >&2; exit 7; fi; sleep 20"));
  const Outcome o = heft(dir.path(), {"train", path});
  EXPECT_EQ(o.exit_code, 1) << describe(o);
  EXPECT_NE(o.err.find("heft train: rank 1 exited with code 7"), std::string::npos) << describe(o);
  const Outcome d = heft(dir.path(), {"describe", "boom", "--json"});
  ASSERT_EQ(d.exit_code, 0) << describe(d);
  const nlohmann::json j = d.json();
  EXPECT_EQ(j["status"], "Failed");
  EXPECT_EQ(j["secondary_status"], "Failed");
  EXPECT_EQ(j["failure_reason"], "rank 1 exited with code 7; last lines of logs/rank-1.log:\nbad batch");
  EXPECT_EQ(j["attempts"], 1);
  for (const char* key : {"status", "secondary_status", "failure_reason", "attempts",
                          "interruptions", "training_seconds", "billable_seconds", "transitions",
                          "final_metrics"})
    EXPECT_TRUE(j.contains(key)) << key;
  const Outcome text = heft(dir.path(), {"describe", "boom"});
  EXPECT_NE(text.out.find("Status:           Failed\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Failure reason:   rank 1 exited with code 7"), std::string::npos);
}

// 40 steps of 50 ms: 2 s of work, so two interruptions 0.4 s into a start (plus up to one
// 200 ms tick) always land in the middle of the work (with 0.8 s of work, the second start
// could finish before the tick that interrupts it, and a third start print `final` again).
std::string counter_spec(const std::string& name) {
  return "name: " + name + "\nentry_point: [" HEFT_PYTHON ", -u, " + kCounter + "]\n" +
         "hyperparameters: {steps: 40, sleep: 0.05}\n"
         "cluster: {processes_per_host: 2}\n"
         "metric_definitions: [{name: value, regex: '^final: .*value=([0-9]+)'}]\n";
}

TEST(HeftTrain, TwoSpotInterruptionsCompleteWithTheValueOfAnUninterruptedRun) {
  TempDir dir;
  const std::string path = spec(dir, counter_spec("plain"));
  ASSERT_EQ(heft(dir.path(), {"train", path}).exit_code, 0);
  const Outcome o = heft(dir.path(), {"train", path, "--name", "spot", "--set", "spot.enabled=true",
                                      "--set", "spot.simulate={every_s: 0.4, count: 2}"});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_NE(o.err.find("Simulated spot interruption 2 of 2"), std::string::npos) << describe(o);
  const nlohmann::json j = heft(dir.path(), {"describe", "spot", "--json"}).json();
  EXPECT_EQ(j["status"], "Completed");
  EXPECT_EQ(j["interruptions"], 2);
  EXPECT_EQ(j["attempts"], 3);
  const std::vector<std::string> expected = {"Starting",    "Training",   "Interrupted",
                                             "Restarting",  "Training",   "Interrupted",
                                             "Restarting",  "Training",   "Uploading",
                                             "Completed"};
  EXPECT_EQ(transition_names(j), expected);
  const nlohmann::json plain =
      heft(dir.path(), {"metrics", "plain", "--name", "value", "--format", "json"}).json();
  const nlohmann::json spot =
      heft(dir.path(), {"metrics", "spot", "--name", "value", "--format", "json"}).json();
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(spot.size(), 2u);
  std::map<int, double> plain_by_rank, spot_by_rank;  // ranks finish in either order
  for (size_t i = 0; i < 2; ++i) {
    plain_by_rank[plain[i]["rank"]] = plain[i]["value"];
    spot_by_rank[spot[i]["rank"]] = spot[i]["value"];
  }
  EXPECT_EQ(spot_by_rank, plain_by_rank);
  EXPECT_EQ(plain_by_rank.size(), 2u);
}

TEST(HeftTrain, MaxRuntimeExits3StoppedMaxRuntimeExceeded) {
  TempDir dir;
  const std::string path =
      spec(dir, sh_spec("slow", "sleep 30", "stopping: {max_runtime_s: 0.5, grace_s: 2}\n"));
  const auto start = Clock::now();
  const Outcome o = heft(dir.path(), {"train", path});
  EXPECT_EQ(o.exit_code, 3) << describe(o);
  EXPECT_LT(Clock::now() - start, seconds(8));
  const nlohmann::json j = heft(dir.path(), {"describe", "slow", "--json"}).json();
  EXPECT_EQ(j["status"], "Stopped");
  EXPECT_EQ(j["secondary_status"], "MaxRuntimeExceeded");
}

TEST(HeftTrain, StopFromASecondProcessStopsTheGroup) {
  TempDir dir;
  const std::string path = spec(
      dir, sh_spec("long", "echo $$ > $SM_OUTPUT_DATA_DIR/pid-$RANK; sleep 30",
                   "stopping: {grace_s: 2}\n"));
  Heft train(dir.path(), {"train", path});
  ASSERT_TRUE(wait_for_status(dir.path(), "long", "Training"));
  const auto stop_at = Clock::now();
  const Outcome stop = heft(dir.path(), {"stop", "long"});
  EXPECT_EQ(stop.exit_code, 0) << describe(stop);
  EXPECT_NE(stop.err.find("heft stop: stopping job 'long'"), std::string::npos) << describe(stop);
  const Outcome o = train.wait(seconds(15));
  EXPECT_EQ(o.exit_code, 3) << describe(o);
  EXPECT_LT(Clock::now() - stop_at, seconds(4));  // seen within a second, then SIGTERM
  const nlohmann::json j = heft(dir.path(), {"describe", "long", "--json"}).json();
  EXPECT_EQ(j["status"], "Stopped");
  EXPECT_EQ(j["secondary_status"], "Stopped");
  const std::vector<std::string> names = transition_names(j);
  EXPECT_EQ(names, (std::vector<std::string>{"Starting", "Training", "Stopping", "Stopped"}));
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = std::atoi(read_file(dir.path() + "/home/jobs/long/output/data/pid-" +
                                          std::to_string(rank)).c_str());
    ASSERT_GT(pid, 0);
    EXPECT_TRUE(::kill(pid, 0) != 0 && errno == ESRCH) << "worker " << pid << " survived";
  }
  const Outcome again = heft(dir.path(), {"stop", "long"});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.err.find("already ended (Stopped); nothing to stop"), std::string::npos);
  const Outcome missing = heft(dir.path(), {"stop", "nope"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "heft stop: no job named 'nope' (heft jobs lists them)\n");
}

TEST(HeftTrain, CtrlCStopsTheJob) {
  TempDir dir;
  const std::string path = spec(dir, sh_spec("interrupted", "sleep 30", "stopping: {grace_s: 2}\n"));
  Heft train(dir.path(), {"train", path});
  ASSERT_TRUE(wait_for_status(dir.path(), "interrupted", "Training"));
  ::kill(train.pid(), SIGINT);
  const Outcome o = train.wait(seconds(10));
  EXPECT_EQ(o.exit_code, 3) << describe(o);
  EXPECT_NE(o.err.find("heft train: received SIGINT; stopping 2 workers"), std::string::npos)
      << describe(o);
  const nlohmann::json j = heft(dir.path(), {"describe", "interrupted", "--json"}).json();
  EXPECT_EQ(j["status"], "Stopped");
  EXPECT_EQ(j["transitions"].back()["message"], "Stopped: heft train received SIGINT");
}

TEST(HeftTrain, ReadersRunWhileAJobWritesMetrics) {
  TempDir dir;
  const std::string path = spec(
      dir, sh_spec("busy", "i=0; while [ $i -lt 1500 ]; do i=$((i+1)); echo step=$i loss=0.5; "
                           "[ $((i % 100)) = 0 ] && sleep 0.1; done; true",
                   "metric_definitions: [{name: loss, regex: \"loss=([0-9.]+)\"}]\n"));
  Heft train(dir.path(), {"train", path});
  ASSERT_TRUE(wait_for_status(dir.path(), "busy", "Training"));
  int reads = 0;
  for (; reads < 8; ++reads) {
    const Outcome jobs = heft(dir.path(), {"jobs", "--json"});
    ASSERT_EQ(jobs.exit_code, 0) << describe(jobs);
    ASSERT_EQ(jobs.json().size(), 1u);
    const Outcome metrics = heft(dir.path(), {"metrics", "busy", "--format", "json"});
    ASSERT_EQ(metrics.exit_code, 0) << describe(metrics);
    ASSERT_TRUE(metrics.json().is_array());
  }
  const Outcome o = train.wait();
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  // The job's own series (the profiler's system:... series are there too).
  const nlohmann::json all =
      heft(dir.path(), {"metrics", "busy", "--name", "loss", "--format", "json"}).json();
  EXPECT_EQ(all.size(), 2u * 1500u);
}

TEST(HeftTrain, LogsAndMetricsShowWhatTheWorkersWrote) {
  TempDir dir;
  const std::string path = spec(
      dir, sh_spec("talk", "echo step=1 loss=0.25; echo \"rank $RANK\" >&2; printf tail",
                   "metric_definitions: [{name: \"train:loss\", regex: \"loss=([0-9.]+)\"}]\n"));
  ASSERT_EQ(heft(dir.path(), {"train", path}).exit_code, 0);
  EXPECT_EQ(heft(dir.path(), {"logs", "talk", "--rank", "1"}).out, "step=1 loss=0.25\nrank 1\ntail\n");
  const Outcome all = heft(dir.path(), {"logs", "talk"});
  EXPECT_NE(all.out.find("[rank 0] step=1 loss=0.25\n[rank 0] rank 0\n[rank 0] tail\n[rank 1] "),
            std::string::npos)
      << describe(all);
  const Outcome bad_rank = heft(dir.path(), {"logs", "talk", "--rank", "2"});
  EXPECT_EQ(bad_rank.exit_code, 2);
  EXPECT_EQ(bad_rank.err,
            "heft logs: --rank must be from 0 to 1 (job 'talk' has 2 workers), got 2\n");

  const Outcome csv = heft(dir.path(), {"metrics", "talk", "--format", "csv"});
  EXPECT_EQ(csv.out.substr(0, csv.out.find('\n')), "name,rank,step,value,timestamp");
  EXPECT_NE(csv.out.find("\ntrain:loss,1,1,0.25,"), std::string::npos) << csv.out;
  // Without --all, only the job's own metrics: the profiler's series are left out.
  EXPECT_EQ(csv.out.find("\nsystem:"), std::string::npos) << csv.out;
  EXPECT_EQ(csv.out.find("\nstep:"), std::string::npos) << csv.out;
  const Outcome all_csv = heft(dir.path(), {"metrics", "talk", "--all", "--format", "csv"});
  EXPECT_NE(all_csv.out.find("\ntrain:loss,1,1,0.25,"), std::string::npos) << all_csv.out;
  // --name: a job that outlives the profiler's first second also has system:... series.
  const Outcome table = heft(dir.path(), {"metrics", "talk", "--name", "train:loss"});
  EXPECT_EQ(table.out.rfind("NAME        RANK  STEP  VALUE  ELAPSED_S\n", 0), 0u) << table.out;
  const Outcome unknown = heft(dir.path(), {"metrics", "talk", "--name", "loss"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_EQ(unknown.err.rfind("heft metrics: job 'talk' has no metric named 'loss'; it has: ", 0), 0u)
      << unknown.err;
  EXPECT_NE(unknown.err.find("train:loss"), std::string::npos) << unknown.err;
  const nlohmann::json d = heft(dir.path(), {"describe", "talk", "--json"}).json();
  ASSERT_EQ(d["final_metrics"].size(), 1u);
  EXPECT_EQ(d["final_metrics"][0]["name"], "train:loss");
  EXPECT_EQ(d["final_metrics"][0]["value"], 0.25);
  const Outcome missing = heft(dir.path(), {"describe", "nope"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "heft describe: no job named 'nope' (heft jobs lists them)\n");
}

TEST(HeftTrain, LogsFollowPrintsUntilTheJobEnds) {
  TempDir dir;
  const std::string path =
      spec(dir, "name: follow\nentry_point: [/bin/sh, -c, 'for i in 1 2 3 4 5; do echo line $i; "
                "sleep 0.2; done']\n");
  Heft train(dir.path(), {"train", path});
  ASSERT_TRUE(wait_for_status(dir.path(), "follow", "Training"));
  const Outcome logs = heft(dir.path(), {"logs", "follow", "--rank", "0", "--follow"}, seconds(15));
  EXPECT_EQ(logs.exit_code, 0) << describe(logs);
  EXPECT_EQ(logs.out, "line 1\nline 2\nline 3\nline 4\nline 5\n");
  EXPECT_EQ(train.wait().exit_code, 0);
}

TEST(HeftTrain, BuiltinTrainerMissingNextToHeftIsAClearError) {
  TempDir dir;
  const std::string copy = dir.path() + "/heft";
  fs::copy_file(kHeft, copy);
  fs::permissions(copy, fs::perms::owner_all);
  const std::string path = spec(dir, "name: builtin\nentry_point: heft-train\n");
  const Outcome o = Heft(dir.path(), {"train", path}, copy).wait();
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("heft train: entry_point: heft-train: the built-in trainer is not built "
                       "(expected the executable " + dir.path() + "/heft-train next to heft"),
            std::string::npos)
      << describe(o);
}

}  // namespace

namespace {

// Nothing a worker prints can crash or stall the supervisor: the metric regexes that made
// std::regex recurse per character (SIGSEGV) or backtrack for minutes, on the lines that
// trigger them, through the real supervisor. The job must complete quickly with its status.
TEST(HeftTrain, PathologicalMetricRegexesAndLinesCannotHurtTheSupervisor) {
  TempDir dir;
  const std::string printer = dir.path() + "/print.py";
  write_file(printer,
             "import sys\n"
             "w = sys.stdout.buffer\n"
             "w.write(b'a' * 16000 + b'\\n')\n"
             "w.write(b'a' * 16000 + b'c7\\n')\n"
             "w.write(b'a' * 100000 + b'!\\n')\n"
             "w.write(b'x' * 60000 + b'y' * 60000 + b'\\n')\n"
             "w.write(b'a\\0b\\0c1\\n')\n"
             "w.write(b'\\xff\\xfe\\xc3(c2\\n')\n"
             "w.write(b'z' * (3 << 20))\n"  // megabytes without a newline
             "w.write(b'\\nloss=0.5\\n')\n");
  const std::string path =
      spec(dir, "name: nasty\nentry_point: [" HEFT_PYTHON ", " + printer + "]\n"
                "metric_definitions:\n"
                "  - {name: issue, regex: '^(a|b)*c([0-9])'}\n"
                "  - {name: alt, regex: '^(?:a|b)*c([0-9])'}\n"
                "  - {name: nested, regex: '^(a+)+b=([0-9]+)'}\n"
                "  - {name: stars, regex: '(x*)*(y*)*z=([0-9])'}\n"
                "  - {name: loss, regex: 'loss=([0-9.]+)'}\n");
  const auto start = Clock::now();
  const Outcome o = heft(dir.path(), {"train", path});
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_LT(s, 60.0);
  const nlohmann::json j = heft(dir.path(), {"describe", "nasty", "--json"}).json();
  EXPECT_EQ(j["status"], "Completed");
  const nlohmann::json alt =
      heft(dir.path(), {"metrics", "nasty", "--name", "alt", "--format", "json"}).json();
  ASSERT_EQ(alt.size(), 1u);
  EXPECT_EQ(alt[0]["value"], 7);
  const nlohmann::json loss =
      heft(dir.path(), {"metrics", "nasty", "--name", "loss", "--format", "json"}).json();
  ASSERT_EQ(loss.size(), 1u);
}

}  // namespace

namespace {

// Each unclear answer to bad input the adversarial run found, now an exit 2 (1 for an
// unusable home) whose message names the option or field.
TEST(HeftCli, BadInputGetsAClearAnswerNamingTheOptionOrField) {
  TempDir dir;
  const std::string ok = spec(dir, "name: fine\nentry_point: [/bin/true]\n", "ok.yaml");
  const std::string empty_entry = spec(dir, "name: e\nentry_point: []\n", "empty.yaml");
  const std::string nested =
      spec(dir, "name: n\nentry_point: " + std::string(20000, '[') + "\n", "nested.yaml");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {{"train", ok, "--name", ""}, 2, "--name: expected a job name, found ''"},
      {{"logs", "fine", "--rank", "-1"}, 2, "--rank: Value -1 not in range 0 to 1023"},
      {{"frobnicate"}, 2, "heft: unknown command 'frobnicate'; the commands are train, resume, plan, jobs"},
      {{"train", empty_entry}, 2, "entry_point: expected heft-train or a command list such as "
                                  "[python3, train.py], found an empty list"},
      {{"train", nested}, 2, "nested.yaml:2:270: not valid YAML: [ and { nest deeper than 256"},
      {{"run", "--grace", "inf", "--", "/bin/true"}, 2, "--grace must be a number of seconds"},
  };
  for (const Case& c : cases) {
    const Outcome o = heft(dir.path(), c.args);
    EXPECT_EQ(o.exit_code, c.exit_code) << describe(o);
    EXPECT_NE(o.err.find(c.fragment), std::string::npos) << "expected: " << c.fragment << "\n"
                                                          << describe(o);
  }
  // An unusable home is an error (exit 1), not an empty table.
  TempDir other;
  write_file(other.path() + "/home", "a file, not a directory\n");  // HEFT_HOME=<other>/home
  const Outcome home = heft(other.path(), {"jobs"});
  EXPECT_EQ(home.exit_code, 1) << describe(home);
  EXPECT_NE(home.err.find("(HEFT_HOME) is not a directory"), std::string::npos) << describe(home);
}

}  // namespace

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777u;
}

// heft's own files are private (0600, folders 0700); what a user's script writes keeps the
// user's umask; a home others can read gets a warning.
TEST(HeftTrain, HeftsFilesArePrivateAndTheUsersAreTheirs) {
  TempDir dir;
  const std::string home = dir.path() + "/home";
  ASSERT_EQ(::mkdir(home.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(home.c_str(), 0755), 0);
  const mode_t saved = ::umask(022);
  const std::string path = spec(dir, sh_spec("modes", "echo step=1 loss=1; echo mine > "
                                                      "$SM_OUTPUT_DATA_DIR/mine.txt"));
  const Outcome o = heft(dir.path(), {"train", path});
  ::umask(saved);
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  EXPECT_NE(o.err.find("warning: heft's home " + home + " can be read by other users (mode "
                       "0755)"), std::string::npos) << describe(o);
  const std::string job = home + "/jobs/modes";
  EXPECT_EQ(mode_of(home + "/heft.db"), 0600u);
  EXPECT_EQ(mode_of(job), 0700u);
  EXPECT_EQ(mode_of(job + "/logs"), 0700u);
  EXPECT_EQ(mode_of(job + "/checkpoints"), 0700u);
  EXPECT_EQ(mode_of(job + "/logs/rank-0.log"), 0600u);
  EXPECT_EQ(mode_of(job + "/output/data/mine.txt"), 0644u);  // the user's, by the user's umask
}

}  // namespace

namespace {

// Regression: after SIGKILL of `heft train` mid-training, `describe` showed 0.0 training and
// billable seconds, and the job could neither run again under its name nor be resumed.
TEST(HeftTrain, AJobWhoseSupervisorDiedKeepsItsTimesAndResumes) {
  TempDir dir;
  const std::string path = spec(dir, counter_spec("plain"));
  ASSERT_EQ(heft(dir.path(), {"train", path}).exit_code, 0);
  Heft killed(dir.path(), {"train", path, "--name", "lost"});
  ASSERT_TRUE(wait_for_status(dir.path(), "lost", "Training"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(killed.pid(), SIGKILL);
  killed.wait(seconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the workers die with it

  nlohmann::json j = heft(dir.path(), {"describe", "lost", "--json"}).json();
  EXPECT_EQ(j["status"], "Failed");
  EXPECT_GE(j["training_seconds"].get<double>(), 1.0) << j.dump();
  const double billable_before = j["billable_seconds"].get<double>();
  EXPECT_GE(billable_before, 1.0) << j.dump();  // 1.5 s ran; written every 0.2 s
  EXPECT_EQ(heft(dir.path(), {"train", path, "--name", "lost"}).exit_code, 2);

  const Outcome resumed = heft(dir.path(), {"resume", "lost"}, seconds(60));
  ASSERT_EQ(resumed.exit_code, 0) << describe(resumed);
  j = heft(dir.path(), {"describe", "lost", "--json"}).json();
  EXPECT_EQ(j["status"], "Completed");
  EXPECT_EQ(j["attempts"], 2);
  // The second attempt adds its own time (the rest of the 40 steps of 50 ms) to the first's.
  EXPECT_GE(j["billable_seconds"].get<double>(), billable_before + 0.3) << j.dump();
  const std::vector<std::string> names = transition_names(j);
  EXPECT_NE(std::find(names.begin(), names.end(), "Failed"), names.end());
  EXPECT_EQ(names.back(), "Completed");
  // The resumed run ends with the value of an uninterrupted one (it went on from its
  // checkpoints, not from step 0).
  const nlohmann::json plain =
      heft(dir.path(), {"metrics", "plain", "--name", "value", "--format", "json"}).json();
  const nlohmann::json lost =
      heft(dir.path(), {"metrics", "lost", "--name", "value", "--format", "json"}).json();
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[0]["value"], plain[0]["value"]);
  const std::string log = read_file(dir.path() + "/home/jobs/lost/logs/rank-0.log");
  EXPECT_NE(log.find("resumed step="), std::string::npos);

  // Only Failed or Stopped jobs resume; an unknown one is named.
  const Outcome again = heft(dir.path(), {"resume", "lost"});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("job 'lost' is Completed: only a Failed or Stopped job can be "
                           "resumed"), std::string::npos) << describe(again);
  const Outcome none = heft(dir.path(), {"resume", "nosuch"});
  EXPECT_EQ(none.exit_code, 1);  // a missing job, as for every command
  EXPECT_NE(none.err.find("no job named 'nosuch'"), std::string::npos) << describe(none);
}

}  // namespace

namespace {

TEST(HeftTrain, ABadDistributionIsRefusedBeforeAnyWorkerStarts) {
  TempDir dir;
  const std::string marker = dir.path() + "/worker-ran";
  const std::string path = spec(
      dir, sh_spec("dist", "touch " + marker,
                   "distribution: {modelparallel: {enabled: true, parameters: {pipeline: "
                   "fast}}}\n"));
  const Outcome o = heft(dir.path(), {"train", path});
  EXPECT_EQ(o.exit_code, 2) << describe(o);
  EXPECT_NE(o.err.find("distribution.modelparallel.parameters.pipeline: expected simple or "
                       "interleaved, found 'fast'"), std::string::npos) << describe(o);
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_EQ(heft(dir.path(), {"describe", "dist"}).exit_code, 1);  // nothing recorded
}

}  // namespace
