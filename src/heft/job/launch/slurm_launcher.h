// The Slurm launcher: runs a group of workers with `srun` (inside an allocation, on its
// nodes; outside one, srun asks for the nodes itself). As with mpirun, heft keeps the
// rendezvous store on this machine (fresh token, bound to the address the nodes reach it by)
// and every task runs `heft slurm-worker -- CMD`, which maps SLURM_PROCID, SLURM_LOCALID,
// SLURM_NTASKS, SLURM_NODEID and SLURM_JOB_NODELIST onto the environment contract and
// executes CMD.
//
//   heft run --launcher slurm --hosts N -n P [--srun-options "..."] -- CMD ARGS...
//
// `heft train` with cluster.launcher slurm runs the group through run_srun_group: inside an
// allocation (SLURM_JOB_ID set) with srun on its nodes; outside one it submits a batch job
// (sbatch) whose script runs the same srun, and follows it (`heft slurm-batch`: the batch
// job's output file is read as srun's output, its end and exit code from squeue/scontrol;
// stopping the supervisor cancels it with scancel: slurm_batch.h). The supervisor itself
// stays on this machine, with the store; the output file must be on a file system the batch
// host shares.
//
// Deliberately left out (docs/clusters.md): submitting the supervisor itself with sbatch.
#pragma once

#include <string>
#include <vector>

#include <chrono>

#include "heft/job/launch/external_group.h"
#include "heft/job/launch/group_watch.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

// store_bind_address "": toward the allocation's first node (SLURM_JOB_NODELIST; its
// NodeAddr when the name does not resolve here), else toward this machine's own name.
struct SlurmOptions : EngineOptions {
  int nodes = 1;
  std::string custom_srun_options;  // appended to srun's own (split like a shell's words)
  std::string srun = "srun";
  // Non-empty: submit with sbatch and follow (run_srun_group only); the batch script and
  // its output go to this folder.
  std::string batch_dir;
  std::string custom_sbatch_options;  // appended to sbatch's own
};

// Slurm's compact host lists: "n[1-3,7],gpu01,x[08-10]" -> n1 n2 n3 n7 gpu01 x08 x09 x10
// (zero padding kept). Throws heft::InvalidArgument on a malformed list.
std::vector<std::string> expand_hostlist(const std::string& list);

// srun's argument vector: nodes, tasks a node, kill the step
// when a task fails, the custom options, then `HEFT slurm-worker -- CMD...`. Values reach
// the tasks through srun's environment (never on the command line).
std::vector<std::string> srun_argv(const SlurmOptions& options);

// For the job supervisor: the group under the launchers' hooks (srun --label tells
// each line's task), restarts with a fresh store and token (external_group.h).
GroupEnd run_srun_group(const SlurmOptions& options, const LauncherHooks& hooks,
                        std::chrono::milliseconds grace);

// Runs the group; returns srun's exit code (128 + signal if killed). SIGINT/SIGTERM go to srun.
int run_srun(const SlurmOptions& options);

// In a task started by srun: `parent` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, SM_HOSTS, SM_CURRENT_HOST, HEFT_HOST, ... from SLURM_*. Throws
// heft::InvalidArgument naming a missing variable.
Environment slurm_worker_environment(const Environment& parent);

}  // namespace heft::job
