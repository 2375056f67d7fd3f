// ctest-labels: multiproc
// The profiler on real jobs (`heft train` with tests/profile/workers/step_worker.cc as the
// entry point, 4 ranks): an injected slow rank gets LoadBalancing and StepOutlier findings
// naming it; a rank that stops gets StalledTrainingRule within its threshold and, with action
// stop, the job is stopped, the finding carrying the hang diagnosis; the series land in the
// database; `heft describe`, `heft report` and `heft diagnose` show them; bad rules are
// clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/heft_process.h"

namespace {

using std::chrono::seconds;
const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kWorker = HEFT_BINARY_DIR "/test-workers/step_worker";

struct Home {
  heft::test::TempDir dir;
  std::string home() const { return dir.path() + "/home"; }
  heft::test::Outcome heft(const std::vector<std::string>& args, seconds timeout = seconds(60)) {
    static int n = 0;
    heft::test::HeftProcess p(kHeft, args, dir.path() + "/out-" + std::to_string(n++),
                              {{"HEFT_HOME", home()}});
    return p.wait(timeout);
  }
  std::string spec(const std::string& yaml) {
    const std::string path = dir.path() + "/spec.yaml";
    std::ofstream(path) << yaml;
    return path;
  }
};

std::string worker_spec(const std::string& name, const std::string& args, const std::string& rules) {
  return "name: " + name + "\nentry_point: [" + kWorker + args + "]\n" +
         "cluster: {instance_count: 2, processes_per_host: 2}\n"
         "metric_definitions: [{name: 'train:loss', regex: 'loss=([0-9.]+)'}]\n"
         "profiler: {interval_s: 0.5}\n" + rules;
}

TEST(JobProfiler, SlowRankGetsLoadBalancingAndStepOutlierFindingsNamingIt) {
  Home h;
  const std::string path = h.spec(worker_spec(
      "slow-rank", ", --steps, 40, --slow-rank, 3, --slow-ms, 200, --slow-every, 4",
      "rules: [{rule: LoadBalancing}, {rule: StepOutlier, parameters: {n_outliers: 5}},\n"
      "        {rule: StalledTrainingRule}]\n"));
  const auto run = h.heft({"train", path});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  const auto d = h.heft({"describe", "slow-rank", "--json"});
  ASSERT_EQ(d.exit_code, 0) << heft::test::describe(d);
  const nlohmann::json j = d.json();
  std::map<std::string, int> rank_of;
  for (const auto& f : j["findings"]) rank_of[f["rule"].get<std::string>()] = f["rank"].get<int>();
  ASSERT_TRUE(rank_of.count("LoadBalancing")) << j["findings"].dump(1);
  ASSERT_TRUE(rank_of.count("StepOutlier")) << j["findings"].dump(1);
  EXPECT_EQ(rank_of["LoadBalancing"], 3);
  EXPECT_EQ(rank_of["StepOutlier"], 3);
  EXPECT_FALSE(rank_of.count("StalledTrainingRule"));
  // Billable time counts both instances (issue: it said "x 2 instances" without multiplying).
  EXPECT_EQ(j["instance_count"], 2);
  EXPECT_NEAR(j["billable_seconds"].get<double>(), 2 * j["running_seconds"].get<double>(), 1e-6);
  EXPECT_GT(j["running_seconds"].get<double>(), 0.5);
  // Profile metrics are series in the database, not final metrics.
  for (const auto& m : j["final_metrics"])
    EXPECT_EQ(m["name"].get<std::string>().find("step:"), std::string::npos) << m.dump();
  const auto steps = h.heft({"metrics", "slow-rank", "--name", "step:total_ms", "--format", "json"});
  ASSERT_EQ(steps.exit_code, 0) << heft::test::describe(steps);
  EXPECT_EQ(steps.json().size(), 160u);  // 4 ranks x 40 steps
  const auto text = h.heft({"describe", "slow-rank"});
  EXPECT_NE(text.out.find("LoadBalancing (rank 3): rank 3 is the slowest"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Billable time:"), std::string::npos);
  const auto report = h.heft({"report", "slow-rank", "-o", h.dir.path() + "/r.html"});
  ASSERT_EQ(report.exit_code, 0) << heft::test::describe(report);
  const std::string html = heft::test::read_file(h.dir.path() + "/r.html");
  EXPECT_NE(html.find("LoadBalancing"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("communication ms"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, no script
  const auto diag = h.heft({"diagnose", "slow-rank"});
  EXPECT_EQ(diag.exit_code, 0) << heft::test::describe(diag);
  EXPECT_NE(diag.out.find("every rank finished collective"), std::string::npos) << diag.out;
}

TEST(JobProfiler, StalledRankIsFoundAndTheRuleStopsTheJob) {
  Home h;
  const std::string path = h.spec(worker_spec(
      "stalled", ", --steps, 1000, --stall-rank, 1, --stall-step, 5",
      "rules: [{rule: StalledTrainingRule, parameters: {threshold: 3}, action: stop}]\n"));
  const auto start = std::chrono::steady_clock::now();
  const auto run = h.heft({"train", path}, seconds(60));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.exit_code, 3) << heft::test::describe(run);  // Stopped
  EXPECT_LT(took, 20) << heft::test::describe(run);  // 3 s threshold, not the 300 s timeout
  const auto d = h.heft({"describe", "stalled", "--json"});
  const nlohmann::json j = d.json();
  EXPECT_EQ(j["status"], "Stopped");
  ASSERT_EQ(j["findings"].size(), 1u) << j["findings"].dump(1);
  const auto& f = j["findings"][0];
  EXPECT_EQ(f["rule"], "StalledTrainingRule");
  EXPECT_EQ(f["action"], "stop");
  const std::string diagnosis = f["evidence"].value("diagnosis", "");
  EXPECT_NE(diagnosis.find("rank 1 never entered it"), std::string::npos) << diagnosis;
  EXPECT_NE(diagnosis.find("ranks 0, 2, 3 wait in it for rank 1"), std::string::npos) << diagnosis;
  EXPECT_NE(diagnosis.find("allreduce #5 "), std::string::npos) << diagnosis;
  EXPECT_NE(run.err.find("rank 1 never entered it"), std::string::npos) << run.err;
}

TEST(JobProfiler, CollectiveTimeoutFailsTheJobWithTheHangDiagnosis) {
  Home h;
  // No stall rule: the ranks' own timeout (stopping.timeout_s) ends the job.
  const std::string path = h.spec(worker_spec(
      "hung", ", --steps, 1000, --stall-rank, 2, --stall-step, 7",
      "rules: []\nstopping: {timeout_s: 3, grace_s: 1}\n"));
  const auto run = h.heft({"train", path}, seconds(60));
  EXPECT_EQ(run.exit_code, 1) << heft::test::describe(run);
  const nlohmann::json j = h.heft({"describe", "hung", "--json"}).json();
  EXPECT_EQ(j["status"], "Failed");
  const std::string reason = j["failure_reason"];
  EXPECT_NE(reason.find("rank 2 stopped responding in allreduce"), std::string::npos) << reason;
  EXPECT_NE(reason.find("allreduce #7 in group hung/world: rank 2 never entered it"), std::string::npos)
      << reason;
  const auto diag = h.heft({"diagnose", "hung"});
  EXPECT_EQ(diag.exit_code, 3) << heft::test::describe(diag);
  EXPECT_NE(diag.out.find("ranks 0, 1, 3 wait in it for rank 2"), std::string::npos) << diag.out;
}

TEST(JobProfiler, BadRulesAreClearErrors) {
  Home h;
  const auto bad_name = h.heft({"train", h.spec(worker_spec("bad", "", "rules: [{rule: StepOutlyer}]\n"))});
  EXPECT_EQ(bad_name.exit_code, 2);
  EXPECT_NE(bad_name.err.find("rules[0].rule"), std::string::npos) << bad_name.err;
  EXPECT_NE(bad_name.err.find("did you mean 'StepOutlier'?"), std::string::npos) << bad_name.err;
  const auto bad_param = h.heft({"train", h.spec(worker_spec(
      "bad", "", "rules: [{rule: StepOutlier, parameters: {stdev: 2, n_outliers: -1}, action: kill}]\n"))});
  EXPECT_EQ(bad_param.exit_code, 2);
  EXPECT_NE(bad_param.err.find("rules[0].parameters.stdev: unknown field; did you mean 'stddev'?"), std::string::npos)
      << bad_param.err;
  EXPECT_NE(bad_param.err.find("rules[0].parameters.n_outliers"), std::string::npos) << bad_param.err;
  EXPECT_NE(bad_param.err.find("rules[0].action"), std::string::npos) << bad_param.err;
}

TEST(JobProfiler, ProfilerOffLeavesNoSeries) {
  Home h;
  const std::string path = h.spec("name: quiet\nentry_point: [" + kWorker + ", --steps, 10]\n"
                                  "cluster: {processes_per_host: 2}\nrules: []\n"
                                  "profiler: {enabled: false}\n");
  const auto run = h.heft({"train", path});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  const auto m = h.heft({"metrics", "quiet", "--all", "--format", "json"});
  EXPECT_EQ(m.json().size(), 0u) << m.out;
}

}  // namespace
