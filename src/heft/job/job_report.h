// How the job commands show what the database holds (`heft jobs`, `heft describe`,
// `heft metrics`): tables for people, JSON and CSV for programs. Pure functions of the
// records, so the formats are tested without running jobs; docs/jobs.md shows them.
//
// Deliberately left out: reading arguments and printing (src/heft/cli).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/job/job_db.h"

namespace heft::job {

// The database under `home`, or nullptr when it does not exist yet and !create (a read-only
// command then has nothing to show and leaves no file behind).
std::unique_ptr<JobDb> open_job_db(const std::string& home, bool create);


// Training seconds of a job so far: the recorded value once ended, else measured from
// its training start.
double live_training_seconds(const JobRecord& job);

// Billable seconds as the cloud service counts them: the time the group ran (the record's
// billable_seconds, summed over its starts) times the instances it ran on.
double billable_instance_seconds(const JobRecord& job);

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
