// How the job commands show what the database holds (`heft jobs`, `heft describe`,
// `heft metrics`): tables for people, JSON and CSV for programs. Pure functions of the
// records, so the formats are tested without running jobs; docs/jobs.md shows them.
//
// Deliberately left out: reading arguments and printing (src/heft/cli).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "heft/job/record/job_db.h"

namespace heft::job {

// The database under `home`, or nullptr when it does not exist yet and !create (a read-only
// command then has nothing to show and leaves no file behind).
std::unique_ptr<JobDb> open_job_db(const std::string& home, bool create);


// Training seconds of a job so far: the recorded value (the supervisor writes it every
// 0.2 s while the job runs; a resumed job's excludes the time it sat Stopped or Failed).
double live_training_seconds(const JobRecord& job);

// Billable seconds, the one meaning heft gives the word (docs/jobs.md), as the cloud service
// bills: the running seconds (the time the group ran, summed over its starts) times the
// instances it ran on. Every place that shows billable time uses these.
double billable_instance_seconds(double running_seconds, int instance_count);
double billable_instance_seconds(const JobRecord& job);
// "207.3 s (103.6 s running x 2 instances)".
std::string billable_text(double running_seconds, int instance_count);

// `v` with `digits` decimals ("207.3"): the one number format of the job and profile
// commands' text.
std::string decimal_text(double v, int digits);

// "Completed", or "Stopped (MaxRuntimeExceeded)": the secondary status only when it says
// more than the primary one.
std::string status_text(const std::string& status, const std::string& secondary);

// What `heft jobs` shows: every field optional, all of them must hold.
struct JobFilter {
  std::vector<std::string> statuses;       // primary statuses; empty: any
  std::optional<std::vector<std::string>> names;  // only these (a tuning's trials)
  std::optional<double> since;             // created at or after (Unix seconds)
  std::optional<size_t> limit;             // the newest this many of those left
};
// `jobs` (newest first) that pass `filter`, in the same order.
std::vector<JobRecord> filter_jobs(const std::vector<JobRecord>& jobs, const JobFilter& filter);
// `--status` values: each a primary status (any case) or a comma list of them; the canonical
// names, or an error naming the value and the statuses.
Result<std::vector<std::string>> parse_statuses(const std::vector<std::string>& values);
// `--since`: a duration back from `now` ("90s", "30m", "2h", "3d", "1w") or a date or time in
// ISO 8601 form ("2026-11-25", "2026-11-25T14:00", "2026-11-25 14:00:05"; local time, or UTC
// with a trailing Z); Unix seconds, or an error saying what was expected.
Result<double> parse_since(const std::string& text, double now);

// `heft jobs`: one row per job, newest first.
std::string jobs_table(const std::vector<JobRecord>& jobs);
nlohmann::json jobs_json(const std::vector<JobRecord>& jobs);

// `heft describe`: every field, the transitions and the final metrics.
// The profiler's series ("system:...", "step:...") are left out of the final metrics; the
// findings come last.
nlohmann::json describe_json(const JobRecord& job, const std::vector<Transition>& transitions,
                             const std::vector<MetricPoint>& final_metrics,
                             const std::vector<Finding>& findings = {});
std::string describe_text(const JobRecord& job, const std::vector<Transition>& transitions,
                          const std::vector<MetricPoint>& final_metrics,
                          const std::vector<Finding>& findings = {});
nlohmann::json findings_json(const std::vector<Finding>& findings);
// True for the profiler's series: "system:..." and "step:...".
bool is_profile_metric(const std::string& name);

// `heft metrics`: elapsed seconds in the table are counted from `since` (the job's creation).
std::string metrics_table(const std::vector<MetricPoint>& points, double since);
std::string metrics_csv(const std::vector<MetricPoint>& points);
nlohmann::json metrics_json(const std::vector<MetricPoint>& points);

}  // namespace heft::job
