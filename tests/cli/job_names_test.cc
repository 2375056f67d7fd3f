// ctest-labels: multiproc
// Job names end to end through the built `heft`, each test with its own HEFT_HOME: a spec's
// base_name gives every run its own name (the main job's spec runs twice in a row), commands
// find a base name's newest job, `heft delete` removes a job's record and directory (a
// running one refused) or a tuning with its trials, `heft jobs` filters, and the closing
// line of `heft train` says the same billable time as `heft describe`.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/files.h"
#include "support/heft_process.h"

namespace {

namespace fs = std::filesystem;
using heft::test::describe;
using heft::test::Outcome;
using heft::test::TempDir;
using std::chrono::seconds;

const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kMainJob = HEFT_SOURCE_DIR "/examples/fashion-mnist.yaml";

// `heft ARGS...` with HEFT_HOME=dir/home, in the background.
class Heft : public heft::test::HeftProcess {
 public:
  Heft(const std::string& dir, const std::vector<std::string>& args)
      : HeftProcess(kHeft, args, dir + "/out-" + std::to_string(counter_++),
                    {{"HEFT_HOME", dir + "/home"}}) {}
  Outcome wait(seconds timeout = seconds(60)) { return HeftProcess::wait(timeout); }

 private:
  static inline int counter_ = 0;
};

Outcome heft(const TempDir& dir, const std::vector<std::string>& args) {
  return Heft(dir.path(), args).wait();
}

std::string write_spec(const TempDir& dir, const std::string& file, const std::string& yaml) {
  const std::string path = dir.path() + "/" + file;
  std::ofstream(path) << yaml;
  return path;
}

std::string sh_spec(const std::string& name, const std::string& script,
                    const std::string& cluster = "{processes_per_host: 2}") {
  return "name: " + name + "\nentry_point: [/bin/sh, -c, '" + script + "']\ncluster: " +
         cluster + "\nstopping: {grace_s: 2}\n";
}

std::vector<std::string> job_names(const nlohmann::json& jobs) {
  std::vector<std::string> out;
  for (const auto& j : jobs) out.push_back(j["name"]);
  return out;
}

bool wait_for_training(const TempDir& dir, const std::string& job) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const Outcome o = heft(dir, {"describe", job, "--json"});
    if (o.exit_code == 0 && o.json()["secondary_status"] == "Training") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The README's main job, as written but for its trainer (a no-op, to keep the test fast):
// the spec's base_name names each run apart, so it runs twice in a row on a fresh home.
TEST(JobNames, TheMainJobsSpecRunsTwiceInARowWithoutANameClash) {
  TempDir dir;
  std::vector<std::string> names;
  for (int run = 0; run < 2; ++run) {
    const Outcome o = heft(dir, {"train", kMainJob, "--set", "entry_point=[/bin/true]"});
    ASSERT_EQ(o.exit_code, 0) << describe(o);
  }
  const nlohmann::json jobs = heft(dir, {"jobs", "--json"}).json();
  ASSERT_EQ(jobs.size(), 2u) << jobs.dump();
  const std::regex stamped("fashion-cnn-\\d{4}-\\d\\d-\\d\\d-\\d\\d-\\d\\d-\\d\\d-\\d{3}(-\\d+)?");
  for (const auto& j : jobs) {
    EXPECT_TRUE(std::regex_match(j["name"].get<std::string>(), stamped)) << j["name"];
    EXPECT_EQ(j["base_name"], "fashion-cnn");
    EXPECT_EQ(j["status"], "Completed");
    EXPECT_TRUE(fs::is_directory(j["job_dir"].get<std::string>()));
  }
  const std::string newest = jobs[0]["name"], older = jobs[1]["name"];
  EXPECT_NE(newest, older);
  // Commands that take a JOB take the base name: its newest job, said on stderr.
  const Outcome d = heft(dir, {"describe", "fashion-cnn"});
  ASSERT_EQ(d.exit_code, 0) << describe(d);
  EXPECT_EQ(d.out.rfind("Name:             " + newest + "\n", 0), 0u) << d.out;
  EXPECT_EQ(d.err, "heft describe: fashion-cnn: the newest of 2 jobs named fashion-cnn-*: " +
                       newest + "\n");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"logs", "fashion-cnn"}, {"metrics", "fashion-cnn"},
        {"stop", "fashion-cnn"}}) {
    const Outcome o = heft(dir, args);
    EXPECT_EQ(o.exit_code, 0) << args[0] << ": " << describe(o);
  }
  EXPECT_EQ(heft(dir, {"describe", older, "--json"}).json()["name"], older);
  // A name given on the command line still wins over the base name.
  const Outcome named = heft(dir, {"train", kMainJob, "--set", "entry_point=[/bin/true]",
                                   "--name", "fashion-cnn"});
  ASSERT_EQ(named.exit_code, 0) << describe(named);
  const nlohmann::json exact = heft(dir, {"describe", "fashion-cnn", "--json"}).json();
  EXPECT_EQ(exact["name"], "fashion-cnn");
  EXPECT_EQ(exact["base_name"], "");
}

TEST(JobNames, TheClosingLineSaysTheBillableTimeDescribeSays) {
  TempDir dir;
  const std::string spec = write_spec(
      dir, "spec.yaml",
      sh_spec("billed", "sleep 0.3", "{instance_count: 2, processes_per_host: 1}"));
  const Outcome o = heft(dir, {"train", spec});
  ASSERT_EQ(o.exit_code, 0) << describe(o);
  std::smatch closing;
  ASSERT_TRUE(std::regex_search(
      o.err, closing,
      std::regex("heft train: job billed Completed after [0-9.]+ s; billable "
                 "(([0-9.]+) s \\(([0-9.]+) s running x 2 instances\\)), 1 start, 0 "
                 "interruptions\n")))
      << describe(o);
  EXPECT_EQ(o.err.find("(Completed)"), std::string::npos) << describe(o);
  const Outcome d = heft(dir, {"describe", "billed"});
  EXPECT_NE(d.out.find("Billable time:    " + closing[1].str() + "\n"), std::string::npos)
      << closing[1] << "\n" << d.out;
  EXPECT_NE(d.out.find("Status:           Completed\n"), std::string::npos) << d.out;
  const nlohmann::json j = heft(dir, {"describe", "billed", "--json"}).json();
  EXPECT_NEAR(j["billable_seconds"].get<double>(), std::stod(closing[2]), 0.05 + 1e-9);
  EXPECT_NEAR(j["billable_seconds"].get<double>(), 2 * j["running_seconds"].get<double>(), 1e-9);
  const nlohmann::json listed = heft(dir, {"jobs", "--json"}).json();
  EXPECT_EQ(listed[0]["billable_seconds"], j["billable_seconds"]);
}

TEST(JobNames, DeleteRemovesTheRecordAndDirectoryAndRefusesARunningJob) {
  TempDir dir;
  const std::string done = write_spec(dir, "done.yaml", sh_spec("done", "echo hello"));
  ASSERT_EQ(heft(dir, {"train", done}).exit_code, 0);
  const std::string job_dir = dir.path() + "/home/jobs/done";
  ASSERT_TRUE(fs::is_directory(job_dir));

  const std::string busy = write_spec(dir, "busy.yaml", sh_spec("busy", "sleep 30"));
  Heft train(dir.path(), {"train", busy});
  ASSERT_TRUE(wait_for_training(dir, "busy"));
  const Outcome refused = heft(dir, {"delete", "busy"});
  EXPECT_EQ(refused.exit_code, 1) << describe(refused);
  EXPECT_EQ(refused.err, "heft delete: job 'busy' is InProgress (Training): a running job is not "
                         "deleted; stop it first (heft stop busy)\n");
  EXPECT_TRUE(fs::is_directory(dir.path() + "/home/jobs/busy"));
  EXPECT_EQ(heft(dir, {"describe", "busy", "--json"}).json()["status"], "InProgress");

  const Outcome deleted = heft(dir, {"delete", "done"});
  EXPECT_EQ(deleted.exit_code, 0) << describe(deleted);
  EXPECT_EQ(deleted.out.rfind("deleted job done (Completed, created ", 0), 0u) << deleted.out;
  EXPECT_NE(deleted.out.find(") and " + job_dir + "\n"), std::string::npos) << deleted.out;
  EXPECT_FALSE(fs::exists(job_dir));
  EXPECT_EQ(heft(dir, {"describe", "done"}).exit_code, 1);
  EXPECT_EQ(heft(dir, {"metrics", "done"}).exit_code, 1);
  EXPECT_EQ(job_names(heft(dir, {"jobs", "--json"}).json()), std::vector<std::string>{"busy"});
  // The name can be used again.
  EXPECT_EQ(heft(dir, {"train", done}).exit_code, 0);

  ASSERT_EQ(heft(dir, {"stop", "busy", "--wait"}).exit_code, 0);
  EXPECT_EQ(train.wait().exit_code, 3);
  const Outcome both = heft(dir, {"delete", "busy", "nope", "done"});
  EXPECT_EQ(both.exit_code, 1) << describe(both);  // nope is missing; the others are deleted
  EXPECT_NE(both.err.find("heft delete: no job named 'nope'"), std::string::npos) << describe(both);
  EXPECT_EQ(heft(dir, {"jobs", "--json"}).json(), nlohmann::json::array());
  EXPECT_EQ(heft(dir, {"delete"}).exit_code, 2);
  EXPECT_EQ(heft(dir, {"delete", "x", "--tuning", "y"}).exit_code, 2);
}

TEST(JobNames, DeleteTuningRemovesItsTrialsAndItsRecord) {
  TempDir dir;
  const std::string solo = write_spec(dir, "solo.yaml", sh_spec("solo", "echo alone"));
  ASSERT_EQ(heft(dir, {"train", solo}).exit_code, 0);
  const std::string tuning = write_spec(
      dir, "tune.yaml",
      "name: grid\nobjective: {metric: loss, type: Minimize}\nstrategy: Grid\nmax_jobs: 10\n"
      "hyperparameter_ranges:\n  categorical: [{name: opt, values: [a, b]}]\n"
      "training_job:\n  entry_point: [/bin/sh, -c, 'echo loss=1']\n"
      "  hyperparameters: {opt: a}\n"
      "  metric_definitions: [{name: loss, regex: 'loss=([0-9.]+)'}]\n");
  const Outcome tuned = heft(dir, {"tune", tuning});
  ASSERT_EQ(tuned.exit_code, 0) << describe(tuned);
  const nlohmann::json trials = heft(dir, {"jobs", "--tuning", "grid", "--json"}).json();
  ASSERT_EQ(trials.size(), 2u) << trials.dump();
  EXPECT_EQ(heft(dir, {"jobs", "--json"}).json().size(), 3u);
  const Outcome wrong = heft(dir, {"delete", "grid"});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("heft delete --tuning grid"), std::string::npos) << describe(wrong);

  const Outcome deleted = heft(dir, {"delete", "--tuning", "grid"});
  EXPECT_EQ(deleted.exit_code, 0) << describe(deleted);
  EXPECT_EQ(deleted.out, "deleted tuning job grid (Completed, 2 trial jobs) and " + dir.path() +
                             "/home/tunings/grid\n");
  EXPECT_EQ(job_names(heft(dir, {"jobs", "--json"}).json()), std::vector<std::string>{"solo"});
  EXPECT_FALSE(fs::exists(dir.path() + "/home/tunings/grid"));
  for (const auto& t : trials) EXPECT_FALSE(fs::exists(t["job_dir"].get<std::string>()));
  EXPECT_EQ(heft(dir, {"jobs", "--tuning", "grid"}).exit_code, 1);
  EXPECT_EQ(heft(dir, {"delete", "--tuning", "grid"}).exit_code, 1);
}

TEST(JobNames, JobsFiltersByStatusTuningSinceAndLimit) {
  TempDir dir;
  for (const auto& [name, script] : std::vector<std::pair<std::string, std::string>>{
           {"first", "true"}, {"boom", "exit 4"}, {"last", "true"}})
    heft(dir, {"train", write_spec(dir, name + ".yaml", sh_spec(name, script))});
  auto listed = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "jobs");
    args.push_back("--json");
    const Outcome o = heft(dir, args);
    EXPECT_EQ(o.exit_code, 0) << describe(o);
    return job_names(o.json());
  };
  using Names = std::vector<std::string>;
  EXPECT_EQ(listed({}), (Names{"last", "boom", "first"}));
  EXPECT_EQ(listed({"--status", "Failed"}), Names{"boom"});
  EXPECT_EQ(listed({"--status", "completed", "--limit", "1"}), Names{"last"});
  EXPECT_EQ(listed({"--status", "Stopped", "--status", "Failed,Completed"}),
            (Names{"last", "boom", "first"}));
  EXPECT_EQ(listed({"--since", "1h"}), (Names{"last", "boom", "first"}));
  EXPECT_EQ(listed({"--since", "2000-01-01T00:00Z"}), (Names{"last", "boom", "first"}));
  EXPECT_EQ(listed({"--since", "2999-01-01"}), Names{});
  EXPECT_EQ(listed({"--limit", "2"}), (Names{"last", "boom"}));
  const Outcome table = heft(dir, {"jobs", "--status", "Failed"});
  EXPECT_EQ(table.out.rfind("NAME", 0), 0u) << table.out;
  EXPECT_NE(table.out.find("\nboom "), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find("first"), std::string::npos) << table.out;

  const Outcome bad_status = heft(dir, {"jobs", "--status", "Done"});
  EXPECT_EQ(bad_status.exit_code, 2);
  EXPECT_NE(bad_status.err.find("--status: expected InProgress, Completed, Failed, Stopping or "
                                "Stopped (or a comma list of them), found 'Done'"),
            std::string::npos)
      << describe(bad_status);
  const Outcome bad_since = heft(dir, {"jobs", "--since", "yesterday"});
  EXPECT_EQ(bad_since.exit_code, 2);
  EXPECT_NE(bad_since.err.find("found 'yesterday'"), std::string::npos) << describe(bad_since);
  EXPECT_EQ(heft(dir, {"jobs", "--limit", "0"}).exit_code, 2);
  const Outcome no_tuning = heft(dir, {"jobs", "--tuning", "nope"});
  EXPECT_EQ(no_tuning.exit_code, 1);
  EXPECT_NE(no_tuning.err.find("no tuning job named 'nope'"), std::string::npos);
}

}  // namespace
