// ctest-labels: unit
// Tests of what the job commands show (src/heft/job/record/job_report.h) from records alone: the one
// billable figure and its text, a status said once, and `heft jobs`' filters (statuses,
// names, since, limit) with their parsers' answers to bad input.
#include "heft/job/record/job_report.h"

#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <vector>

namespace heft::job {
namespace {

JobRecord job(const std::string& name, const std::string& status, double created_at) {
  JobRecord j;
  j.name = name;
  j.status = status;
  j.secondary_status = status;
  j.created_at = created_at;
  j.spec = nlohmann::json::object();
  return j;
}

std::vector<std::string> names(const std::vector<JobRecord>& jobs) {
  std::vector<std::string> out;
  for (const JobRecord& j : jobs) out.push_back(j.name);
  return out;
}

TEST(JobReport, BillableIsRunningTimesInstancesEverywhere) {
  JobRecord j = job("j", status::kCompleted, 0);
  j.billable_seconds = 103.64;  // the running seconds
  j.instance_count = 2;
  EXPECT_DOUBLE_EQ(billable_instance_seconds(j), 207.28);
  EXPECT_DOUBLE_EQ(billable_instance_seconds(103.64, 2), 207.28);
  EXPECT_EQ(billable_text(103.64, 2), "207.3 s (103.6 s running x 2 instances)");
  EXPECT_EQ(billable_text(0.9, 1), "0.9 s (0.9 s running x 1 instance)");
  const std::string described = describe_text(j, {}, {});
  EXPECT_NE(described.find("Billable time:    " + billable_text(103.64, 2) + "\n"),
            std::string::npos)
      << described;
  EXPECT_DOUBLE_EQ(jobs_json({j})[0]["billable_seconds"].get<double>(), 207.28);
  EXPECT_DOUBLE_EQ(describe_json(j, {}, {})["billable_seconds"].get<double>(), 207.28);
}

TEST(JobReport, TheStatusIsSaidOnceAndTheSecondaryOnlyWhenItSaysMore) {
  EXPECT_EQ(status_text("Completed", "Completed"), "Completed");
  EXPECT_EQ(status_text("Stopped", "MaxRuntimeExceeded"), "Stopped (MaxRuntimeExceeded)");
  EXPECT_EQ(status_text("InProgress", "Training"), "InProgress (Training)");
  JobRecord j = job("j", status::kFailed, 0);
  EXPECT_NE(describe_text(j, {}, {}).find("Status:           Failed\n"), std::string::npos);
}

TEST(JobReport, FiltersKeepTheOrderAndAllMustHold) {
  const std::vector<JobRecord> jobs = {job("e", status::kInProgress, 500),
                                       job("d", status::kFailed, 400),
                                       job("c", status::kCompleted, 300),
                                       job("b", status::kCompleted, 200),
                                       job("a", status::kStopped, 100)};
  EXPECT_EQ(names(filter_jobs(jobs, {})), (std::vector<std::string>{"e", "d", "c", "b", "a"}));
  JobFilter f;
  f.statuses = {status::kCompleted, status::kFailed};
  EXPECT_EQ(names(filter_jobs(jobs, f)), (std::vector<std::string>{"d", "c", "b"}));
  f.limit = 2;
  EXPECT_EQ(names(filter_jobs(jobs, f)), (std::vector<std::string>{"d", "c"}));
  f.since = 250;
  f.limit.reset();
  EXPECT_EQ(names(filter_jobs(jobs, f)), (std::vector<std::string>{"d", "c"}));
  JobFilter trials;
  trials.names = std::vector<std::string>{"a", "c", "zz"};
  EXPECT_EQ(names(filter_jobs(jobs, trials)), (std::vector<std::string>{"c", "a"}));
  trials.names->clear();  // a tuning with no trial recorded yet
  EXPECT_TRUE(filter_jobs(jobs, trials).empty());
}

TEST(JobReport, StatusesAreCheckedInAnyCaseAndCommaLists) {
  const auto ok = parse_statuses({"completed,FAILED", "Stopped", "failed"});
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(ok.value(), (std::vector<std::string>{"Completed", "Failed", "Stopped"}));
  EXPECT_TRUE(parse_statuses({}).value().empty());
  const auto bad = parse_statuses({"Completed,Done"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "--status: expected InProgress, Completed, Failed, Stopping or Stopped (or a comma "
            "list of them), found 'Done'");
  EXPECT_FALSE(parse_statuses({"Training"}).ok());  // a secondary status
}

TEST(JobReport, SinceIsADurationBackFromNowOrAnIsoTime) {
  const double now = 1795277295;  // 2026-11-21 16:08:15 UTC
  EXPECT_DOUBLE_EQ(parse_since("90s", now).value(), now - 90);
  EXPECT_DOUBLE_EQ(parse_since("30m", now).value(), now - 1800);
  EXPECT_DOUBLE_EQ(parse_since("2h", now).value(), now - 7200);
  EXPECT_DOUBLE_EQ(parse_since("1.5d", now).value(), now - 1.5 * 86400);
  EXPECT_DOUBLE_EQ(parse_since("1w", now).value(), now - 604800);
  EXPECT_DOUBLE_EQ(parse_since("2026-11-21T16:08:15Z", now).value(), now);
  EXPECT_DOUBLE_EQ(parse_since("2026-11-21T16:08Z", now).value(), now - 15);
  EXPECT_DOUBLE_EQ(parse_since("2026-11-21Z", now).value(), now - (16 * 3600 + 8 * 60 + 15));
  // Without Z: local time, as `heft jobs` shows it.
  struct tm local {};
  local.tm_year = 2026 - 1900;
  local.tm_mon = 10;
  local.tm_mday = 21;
  local.tm_hour = 9;
  local.tm_isdst = -1;
  EXPECT_DOUBLE_EQ(parse_since("2026-11-21 09:00", now).value(),
                   static_cast<double>(std::mktime(&local)));
  for (const char* bad : {"yesterday", "2h30m", "-2h", "h", "2026-13-01", "2026-11-21T25:00",
                          "2026-11-21T16", "2026-11-21T16:08:15:00", "26-11-21", ""}) {
    const auto r = parse_since(bad, now);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().rfind("--since: expected a duration back from now", 0), 0u) << r.error();
    EXPECT_NE(r.error().find("found '" + std::string(bad) + "'"), std::string::npos);
  }
}

}  // namespace
}  // namespace heft::job
