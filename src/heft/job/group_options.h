// What each launcher is given to run a job's group (the job supervisor's side of
// local_launcher.h, mpirun_launcher.h and slurm_launcher.h): the spec's hosts and workers
// per host, its stopping grace and communication timeout, and what the supervisor adds:
// the worker command and the environment every worker gets besides the launcher's own.
//
// Deliberately left out: the hooks (the supervisor's) and running anything.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "heft/job/launch/local_launcher.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/slurm_launcher.h"
#include "heft/job/spec/spec.h"

namespace heft::job {

// What the supervisor adds to every launcher's options.
struct GroupSettings {
  std::vector<std::string> command;  // worker_command(spec, ...)
  Environment extra_env;             // training_environment() and the observer's variables
  std::string log_name;              // leads heft's own lines on stderr
  int worker_umask = -1;             // -1: this process's
  std::string python_path;           // first on the workers' PYTHONPATH
  std::string heft_binary;           // runs `mpi-worker` / `slurm-worker` on every rank
};

// stopping.grace_s, as the launchers take it.
std::chrono::milliseconds stop_grace(const JobSpec& spec);

// On this machine: instance_count simulated hosts of processes_per_host workers.
LocalLauncherOptions local_launcher_options(const JobSpec& spec, const GroupSettings& group,
                                            LauncherHooks hooks);

// Over OpenMPI's mpirun, on cluster.hosts with cluster.custom_mpi_options.
MpirunOptions mpirun_options(const JobSpec& spec, const GroupSettings& group);

// Over Slurm on instance_count nodes: srun inside an allocation (SLURM_JOB_ID set), else
// sbatch and follow, with the batch script and its output under `<job_root>/slurm`.
SlurmOptions slurm_options(const JobSpec& spec, const GroupSettings& group,
                           const std::string& job_root);

}  // namespace heft::job
