// The launchers' options for a job (group_options.h).
#include "heft/job/group_options.h"

#include <cmath>
#include <cstdlib>
#include <utility>

namespace heft::job {

namespace {

// The same workers and environment for an outside engine (external_group.h).
void engine_options(const JobSpec& spec, const GroupSettings& group, EngineOptions& o) {
  o.processes_per_host = spec.cluster.processes_per_host;
  o.command = group.command;
  o.store_bind_address = spec.cluster.store_address;
  o.timeout_s = spec.stopping.timeout_s;
  o.job_name = spec.name;
  o.python_path = group.python_path;
  o.extra_env = group.extra_env;
  o.heft_binary = group.heft_binary;
  o.log_name = group.log_name;
}

}  // namespace

std::chrono::milliseconds stop_grace(const JobSpec& spec) {
  return std::chrono::milliseconds(std::llround(spec.stopping.grace_s * 1000));
}

LocalLauncherOptions local_launcher_options(const JobSpec& spec, const GroupSettings& group,
                                            LauncherHooks hooks) {
  LocalLauncherOptions o;
  o.hosts = spec.cluster.instance_count;
  o.processes_per_host = spec.cluster.processes_per_host;
  o.command = group.command;
  o.grace = stop_grace(spec);
  o.timeout_s = spec.stopping.timeout_s;
  o.extra_env = group.extra_env;
  o.log_name = group.log_name;
  o.worker_umask = group.worker_umask;
  o.python_path = group.python_path;
  o.in_place_recoveries = spec.retry.in_place ? kInPlaceRecoveries : 0;
  o.hooks = std::move(hooks);
  return o;
}

MpirunOptions mpirun_options(const JobSpec& spec, const GroupSettings& group) {
  MpirunOptions o;
  engine_options(spec, group, o);
  for (const std::string& h : spec.cluster.hosts) o.hosts.push_back({h, 0});
  o.custom_mpi_options = spec.cluster.custom_mpi_options;
  return o;
}

SlurmOptions slurm_options(const JobSpec& spec, const GroupSettings& group,
                           const std::string& job_root) {
  SlurmOptions o;
  engine_options(spec, group, o);
  o.nodes = spec.cluster.instance_count;
  o.custom_srun_options = spec.cluster.srun_options;
  const char* allocation = std::getenv("SLURM_JOB_ID");
  if (!allocation || !*allocation) {
    o.batch_dir = job_root + "/slurm";
    o.custom_sbatch_options = spec.cluster.sbatch_options;
  }
  return o;
}

}  // namespace heft::job
