// The profiler of one training job (a job::JobObserver the supervisor drives): every
// profiler.interval_s it samples the workers from /proc (system_sampler.h), reads the step
// lines they appended to <job>/profile/rank-N.steps (step_profiler.h), stores both as series
// in the job database beside the metrics ("system:cpu_percent", "step:total_ms", ...;
// docs/observability.md), evaluates the spec's rules (rules.h) and records each new finding
// (rule, rank) once. A finding of a rule with action stop stops the job; one with a notify
// action is sent to its command or URL (notify.h) and never stops it. Workers write their
// collective traces into <job>/traces (comm/trace.h), which diagnosis() reads.
//
// Deliberately left out: anything on other machines (their /proc is not ours).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "heft/job/record/job_db.h"
#include "heft/job/job_observer.h"
#include "heft/job/paths.h"
#include "heft/job/spec/spec.h"
#include "heft/profile/notify.h"
#include "heft/profile/observations.h"
#include "heft/profile/system_sampler.h"

namespace heft::profile {

// <job>/profile and <job>/traces.
std::string profile_dir(const job::JobPaths& paths);
std::string trace_dir(const job::JobPaths& paths);

class JobProfiler : public job::JobObserver {
 public:
  // `db` outlives the profiler; `log_name` leads the lines it writes on stderr.
  JobProfiler(job::JobDb& db, int64_t job_id, const job::JobSpec& spec, job::JobPaths paths,
              std::string log_name);

  job::Environment environment() override;
  void on_start(int restart_count, const std::vector<int>& pids) override;
  std::string on_tick() override;
  void on_end(bool failed) override;
  std::string diagnosis() override;

  const Observations& observations() const { return obs_; }

 private:
  void collect(double now);
  void read_steps(std::vector<job::MetricPoint>* points);
  void read_metrics();
  // Returns why to stop the job, or "".
  std::string evaluate(bool final);

  job::JobDb& db_;
  int64_t job_id_;
  job::JobSpec spec_;
  job::JobPaths paths_;
  std::string log_name_;
  SystemSampler sampler_;
  Observations obs_;
  std::vector<std::pair<std::string, int64_t>> step_files_;  // path, bytes read
  std::vector<std::string> partial_;                          // a torn last line per file
  std::set<std::pair<std::string, int>> recorded_;            // (rule, rank) found
  int64_t metrics_seen_ = 0;  // the last metrics row read for activity
  double last_collect_ = 0;
  bool running_ = false;
  Notifier notifier_;  // last: its destructor waits for notifications that read the above
};

}  // namespace heft::profile
