// The supervised run of a recorded job (supervise.h).
#include "heft/cli/supervise.h"

#include <unistd.h>

#include <utility>

#include "heft/cli/commands.h"
#include "heft/job/supervisor.h"
#include "heft/profile/job_profiler.h"

namespace heft::cli {

int supervise(job::JobDb& db, job::JobRecord record, const job::JobSpec& spec,
              const job::JobPaths& paths, std::vector<std::string> command,
              const std::string& log_name) {
  job::SupervisorOptions options;
  options.log_name = log_name;
  options.progress = ::isatty(STDOUT_FILENO) == 1;
  options.worker_umask = user_umask();
  options.python_path = worker_python_path(spec.distribution_config);
  options.heft_binary = heft_binary_dir() + "/heft";
  profile::JobProfiler profiler(db, record.id, spec, paths, log_name);
  options.observer = &profiler;
  job::Supervisor supervisor(db, std::move(record), spec, paths, std::move(command), options);
  return supervisor.run();
}

}  // namespace heft::cli
