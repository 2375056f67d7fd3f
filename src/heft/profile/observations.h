// What the rules look at: a job's step records, system samples and metric series so far,
// gathered by the job profiler (job_profiler.h) or rebuilt from the job database (report.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "heft/job/record/job_db.h"
#include "heft/profile/system_sampler.h"

namespace heft::profile {

// One line of a rank's step file (step_profiler.h); times in milliseconds.
struct StepRecord {
  int rank = 0;
  int64_t step = 0;
  double timestamp = 0;  // when the step ended, Unix seconds
  double total_ms = 0, data_ms = 0, forward_ms = 0, backward_ms = 0, communication_ms = 0,
         optimizer_ms = 0;
  // The step's own work: its time less the wait for other ranks' data.
  double busy_ms() const { return total_ms - communication_ms; }
};

// Parses one step line; false when it is not one (a torn last line).
bool parse_step_line(const std::string& line, int rank, StepRecord* out);

// A host the job's ranks run on, as their samples describe it.
struct HostObservation {
  int cores = 0;            // its online cores
  std::vector<int> ranks;   // the ranks sampled there, ascending
  // Another host's reads, one per profiler read that got a new sample of one of its ranks:
  // its cores' busy share (the newest) and the CPU of its ranks read then, in time order.
  // This machine's are Observations::system.
  std::vector<SystemSample> samples;
  double memory_mb = 0;  // its memory, MemTotal (0: unknown, e.g. an older shim's sample)
};

struct Observations {
  int world = 1;
  // The cores the workers share on this machine and how many workers share them: a worker
  // may use cores / workers_here of them.
  int cores = 1;
  int workers_here = 1;
  double started_at = 0;      // the current start of the group, Unix seconds
  double now = 0;
  double last_activity = 0;   // newest step record or metric point (or the start)
  double first_step_at = 0;   // the current start's first step record (0: none yet)
  double memory_mb = 0;       // this machine's memory (0: unknown)
  std::vector<StepRecord> steps;      // every rank's, in the order read
  std::vector<SystemSample> system;   // in time order
  std::map<std::string, std::vector<job::MetricPoint>> metrics;  // by name, lowest rank's
  // The hosts by name ("": this machine, the local launcher's) and each sampled rank's host.
  // `cores` and `workers_here` above are this machine's, or for a group that runs only on
  // other hosts, the largest host's cores and the most ranks a host holds.
  std::map<std::string, HostObservation> hosts;
  std::map<int, std::string> host_of_rank;

  // The cores `rank` may use: its host's cores over the ranks sampled there (cores /
  // workers_here when the rank's host is unknown).
  double cores_of(int rank) const;
  // The memory `rank` may use, in MB: its host's memory over the ranks sampled there
  // (memory_mb / workers_here when the rank's host or that host's memory is unknown; 0 when
  // that is unknown too).
  double memory_of(int rank) const;
  // A worker's CPU use in % of the cores it may use (100 = all of its share busy).
  double worker_utilisation(double cpu_percent) const;
  // The same for `rank` on its own host: that host's cores over the ranks sampled there
  // (the form above when the rank's host is unknown).
  double worker_utilisation(double cpu_percent, int rank) const;
};

}  // namespace heft::profile
