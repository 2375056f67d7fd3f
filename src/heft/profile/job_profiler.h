// The profiler of one training job (a job::JobObserver the supervisor drives): every
// profiler.interval_s it samples the workers from /proc (system_sampler.h), reads the step
// lines they appended to <job>/profile/rank-N.steps (step_profiler.h; through job/job_file.h,
// at most 16 MiB over the ranks each time; a step file that is not a regular file is
// skipped, said once on stderr), stores both as series in the job database beside the
// metrics ("system:cpu_percent", "step:total_ms", ...; docs/observability.md), evaluates the
// spec's rules (rules.h) and records each new finding (rule, rank) once. A finding of a rule
// with action stop stops the job; one with a notify action is sent to its command or URL
// (notify.h) and never stops it. Workers write their collective traces into <job>/traces
// (comm/trace.h), which diagnosis() reads.
//
// Ranks on other hosts (an engine's group: on_start gets no pids) are sampled by their worker
// shims, which publish each sample in the start's store (system_sampler.h: rank_sample_key,
// every HEFT_SYSTEM_SAMPLE_MS, which environment() sets to the profiler's interval); the
// supervisor hands the profiler a way to read that store (set_sample_source) and the
// profiler records those samples as the same system:* series, their host's cores as
// system:<host>/core<N>_busy_percent, its available memory as
// system:<host>/memory_available_mb, and Observations::hosts (with each host's memory). Every rank's host (this
// machine's name for local workers) is one point of "system:host:<host>" per start, its
// value the host's cores (what `heft describe` lists as hosts).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
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

  // The value of a key in the current start's store now, or nothing (ExternalStart::peek).
  using SampleSource = std::function<std::optional<std::string>(const std::string& key)>;
  // Where the samples of the ranks this machine did not start are read from, from now on
  // (an empty source: none). Called on the supervisor's thread, like the rest.
  void set_sample_source(SampleSource source);
  void on_store(job::StorePeek peek) override { set_sample_source(std::move(peek)); }

 private:
  void collect(double now);
  // One system sample of every rank: this machine's workers from /proc, the others from
  // their shims' newest samples; its series into `points`.
  void sample_system(std::vector<job::MetricPoint>* points);
  // The newest sample `rank`'s shim published since the last read, into `out`, its host's
  // read in `by_host` and `points`.
  void read_remote(int rank, SystemSample* out, std::map<std::string, SystemSample>* by_host,
                   std::vector<job::MetricPoint>* points);
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
  std::vector<std::string> refused_;  // why a step file was last not read (said once)
  std::set<std::pair<std::string, int>> recorded_;  // (rule, rank) found; rule@host for a host's
  int64_t metrics_seen_ = 0;  // the last metrics row read for activity
  double last_collect_ = 0;
  SampleSource source_;
  size_t local_ranks_ = 0;                     // ranks with a pid here (the first ones)
  std::map<int, double> remote_seen_;          // rank: its newest sample's time read
  std::map<std::string, double> host_seen_;    // host: its newest cores' time recorded
  std::set<int> host_recorded_;                // ranks whose system:host:<host> point is in
  std::string local_host_;                     // this machine's name
  bool running_ = false;
  Notifier notifier_;  // last: its destructor waits for notifications that read the above
};

}  // namespace heft::profile
