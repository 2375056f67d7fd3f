// How `heft train` and `heft resume` run a job once it is recorded (InProgress/Starting,
// supervised by this process): a job::Supervisor (supervisor.h) with the profiler
// (profile/job_profiler.h) watching it, worker files in the user's umask, heft's Python
// package first on the workers' PYTHONPATH, and a progress line when stdout is a terminal.
#pragma once

#include <string>
#include <vector>

#include "heft/job/paths.h"
#include "heft/job/record/job_db.h"
#include "heft/job/spec/spec.h"

namespace heft::cli {

// Runs the job to its end and returns Supervisor::run()'s exit code. `command` is
// job::worker_command(spec, ...); `log_name` leads every line written on stderr ("heft
// train"). Throws as Supervisor::run().
int supervise(job::JobDb& db, job::JobRecord record, const job::JobSpec& spec,
              const job::JobPaths& paths, std::vector<std::string> command,
              const std::string& log_name);

}  // namespace heft::cli
