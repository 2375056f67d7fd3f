// Something that watches a running job beside its supervisor: the profiler
// (profile/job_profiler.h) samples the workers, reads their step timings, evaluates rules
// and may ask for the job to stop. The supervisor calls it on its own thread, never
// concurrently. job defines the interface so that it need not know the profiler.
#pragma once

#include <string>
#include <vector>

#include "heft/job/launch/group_watch.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

class JobObserver {
 public:
  virtual ~JobObserver() = default;
  // Variables added to every worker's environment (where to write step timings and
  // collective traces); read once before the first start.
  virtual Environment environment() = 0;
  // Every worker of a start runs: their process ids, by rank.
  virtual void on_start(int restart_count, const std::vector<int>& pids) = 0;
  // Under an engine, after on_start: a way to read the start's store (the shims' system
  // samples); an empty one when the start ended.
  virtual void on_store(StorePeek) {}
  // About every 200 ms while the group runs. A non-empty result stops the job (Stopped),
  // the text saying why ("rule StalledTrainingRule: ...").
  virtual std::string on_tick() = 0;
  // A start ended (its workers are reaped); `failed` when it ended in a failure.
  virtual void on_end(bool failed) = 0;
  // What the ranks' collective traces say about who is stuck where, or "" when nothing is
  // in flight or there are no traces; for failure reasons and stop messages.
  virtual std::string diagnosis() = 0;
};

}  // namespace heft::job
